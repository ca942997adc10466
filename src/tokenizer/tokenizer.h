/*
 * tokenizer.h - text <-> token ids for the model's own vocabulary.
 *
 * What it is for: loading a tokenizer from GGUF metadata or a Hugging Face
 * tokenizer.json (+ tokenizer_config.json), encoding UTF-8 text to ids, and
 * decoding ids back to text, whole or streamed one id at a time.
 * Today: SentencePiece-style BPE with byte fallback (Llama 2, Mistral, the
 * stories models). Byte-level BPE and chat templates come with the tokenizer
 * issue behind the same interface.
 */
#ifndef PDL_TOKENIZER_TOKENIZER_H
#define PDL_TOKENIZER_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "format/gguf.h"
#include "pagedlm.h"

typedef struct tok_tokenizer tok_tokenizer;

/* From GGUF keys tokenizer.ggml.{model,tokens,scores,token_type,
 * bos_token_id,eos_token_id,unknown_token_id,add_bos_token,add_eos_token}. */
int tok_load_gguf(tok_tokenizer **out, const gguf_file *g, pdl_error *err);
/* From dir/tokenizer.json, with add_bos_token / add_eos_token from
 * dir/tokenizer_config.json when present. */
int tok_load_hf_dir(tok_tokenizer **out, const char *dir, pdl_error *err);
void tok_free(tok_tokenizer *t);

int tok_vocab_size(const tok_tokenizer *t);
int32_t tok_bos_id(const tok_tokenizer *t);   /* -1 when none */
int32_t tok_eos_id(const tok_tokenizer *t);   /* -1 when none */
bool tok_add_bos(const tok_tokenizer *t);
bool tok_add_eos(const tok_tokenizer *t);
int32_t tok_unk_id(const tok_tokenizer *t);   /* -1 when none */

/* The vocabulary entry of id as stored ("\xe2\x96\x81Hello", "<0x0A>", "<s>"),
 * NUL-terminated, with its length in *len; NULL for an id outside the vocabulary. */
const char *tok_id_to_piece(const tok_tokenizer *t, int32_t id, size_t *len);
/* The id whose stored piece is exactly piece[0..len), or -1. */
int32_t tok_piece_to_id(const tok_tokenizer *t, const char *piece, size_t len);
/* Control and unknown ids (<s>, </s>, <unk>, special added tokens): decode
 * skips them. */
bool tok_is_control(const tok_tokenizer *t, int32_t id);

/* Encodes len bytes of text (any bytes; invalid UTF-8 goes through byte
 * fallback). add_special: add BOS/EOS as the tokenizer's settings say.
 * *ids is malloc'ed. */
int tok_encode(const tok_tokenizer *t, const char *text, size_t len, bool add_special,
               int32_t **ids, size_t *n_ids, pdl_error *err);

/* Decodes a whole sequence as Hugging Face's decode(skip_special_tokens=True)
 * does. Returns a malloc'ed NUL-terminated string, or NULL on error (an id
 * outside the vocabulary). Byte-fallback bytes that do not form UTF-8 become
 * U+FFFD, one per maximal invalid subsequence (HF writes one per byte of an
 * invalid run, which no streaming decoder can match; valid runs agree). */
char *tok_decode(const tok_tokenizer *t, const int32_t *ids, size_t n_ids, pdl_error *err);
/* The same, with the byte length in *len (the text holds a NUL byte where
 * the ids hold <0x00>). */
char *tok_decode_n(const tok_tokenizer *t, const int32_t *ids, size_t n_ids, size_t *len,
                   pdl_error *err);

/* Streaming decode: push ids one by one; each push returns the newly completed
 * text (only whole UTF-8 characters; byte-fallback bytes are held until their
 * character completes). The concatenation of every push and the final flush
 * equals tok_decode of the whole sequence; ids outside the vocabulary are
 * ignored. tok_stream_prime feeds context (e.g. the prompt) without producing
 * text, so that a continuation decodes as it would after that context: the
 * output is decode(context + ids) minus decode(context) (no leading-space
 * strip once the context produced text; a context of only BOS keeps it). */
typedef struct tok_stream tok_stream;
tok_stream *tok_stream_new(const tok_tokenizer *t);
void tok_stream_prime(tok_stream *s, const int32_t *ids, size_t n_ids);
const char *tok_stream_push(tok_stream *s, int32_t id);
const char *tok_stream_flush(tok_stream *s);
/* Byte length of the text the last push or flush returned (see tok_decode_n). */
size_t tok_stream_len(const tok_stream *s);
void tok_stream_free(tok_stream *s);

#endif
