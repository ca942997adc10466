/*
 * vocab_vectors.h - llama.cpp's tokenizer test vectors
 * (PAGEDLM_TESTDATA/tokenizers/llama.cpp-vectors): NAME.inp holds the test
 * strings, each followed by "\n__ggml_vocab_test__\n"; NAME.out one line of
 * expected ids per string (Hugging Face encode(text, add_special_tokens=False)).
 */
#ifndef PDL_TEST_VOCAB_VECTORS_H
#define PDL_TEST_VOCAB_VECTORS_H

#include <stddef.h>
#include <stdint.h>

typedef struct vocab_vectors {
    size_t n;
    char **text;       /* [n] NUL-terminated (the files' bytes) */
    size_t *text_len;  /* [n] */
    int32_t **ids;     /* [n] expected ids */
    size_t *n_ids;     /* [n] */
    char *inp, *out;   /* file contents the above point into */
} vocab_vectors;

/* Loads tokenizers/llama.cpp-vectors/ggml-vocab-NAME.gguf.{inp,out};
 * REQUIREs that both exist and agree in count. */
void vocab_vectors_load(vocab_vectors *v, const char *name);
void vocab_vectors_free(vocab_vectors *v);

#endif
