/*
 * tokenizer.h - text <-> token ids for the model's own vocabulary.
 *
 * What it is for: loading a tokenizer from GGUF metadata or a Hugging Face
 * tokenizer.json (+ tokenizer_config.json), encoding UTF-8 text to ids, and
 * decoding ids back to text, whole or streamed one id at a time, token for
 * token as Hugging Face tokenizers does. Three model families:
 *   - SentencePiece-style BPE with byte fallback (Llama 2, Mistral, Phi-3,
 *     the stories models): GGUF "llama", tokenizer.json BPE + Metaspace or
 *     Prepend/Replace;
 *   - byte-level BPE (GPT-2, Llama 3, Qwen2/2.5/3, StarCoder, Falcon, MPT,
 *     Phi-2): GGUF "gpt2" with tokenizer.ggml.pre naming the pre-tokenizer,
 *     tokenizer.json BPE + ByteLevel / Split regexes (run on PCRE2) +
 *     NFC/NFKC normalizers (utf8proc);
 *   - WordPiece (BERT, bge, nomic-embed, all-MiniLM): GGUF "bert",
 *     tokenizer.json WordPiece + BertNormalizer + BertPreTokenizer, or a
 *     folder with vocab.txt; [CLS] and [SEP] are its BOS and EOS.
 * Added tokens (tokenizer.json added_tokens; GGUF control and user-defined
 * tokens) are cut out of the text before anything else: special ones only
 * when the caller asks (parse_special), the others always.
 * What it is not for: chat templates (src/template/).
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
 * bos_token_id,eos_token_id,unknown_token_id,add_bos_token,add_eos_token,
 * fim_{pre,suf,mid,pad,rep,sep}_token_id,{prefix,suffix,middle}_token_id}. */
int tok_load_gguf(tok_tokenizer **out, const gguf_file *g, pdl_error *err);
/* From dir/tokenizer.json, with add_bos_token / add_eos_token from
 * dir/tokenizer_config.json when present. */
int tok_load_hf_dir(tok_tokenizer **out, const char *dir, pdl_error *err);
/* Either of the above by what path is: a folder (tokenizer.json) or a .gguf file. */
int tok_load_path(tok_tokenizer **out, const char *path, pdl_error *err);
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
/* The bytes id adds to decoded text when special tokens are kept (before
 * any UTF-8 repair): one raw byte for <0xXX>, an SPM piece with "\xe2\x96\x81"
 * as " ", a byte-level piece mapped back through GPT-2's byte map, a control
 * token's text. *len is 0 for missing and unused ids; NULL outside the
 * vocabulary. Constrained decoding (src/grammar/) matches these bytes. */
const char *tok_id_bytes(const tok_tokenizer *t, int32_t id, size_t *len);
/* The id whose stored piece is exactly piece[0..len), or -1. */
int32_t tok_piece_to_id(const tok_tokenizer *t, const char *piece, size_t len);
/* Control and unknown ids (<s>, </s>, <unk>, special added tokens): decode
 * skips them. */
bool tok_is_control(const tok_tokenizer *t, int32_t id);

/* Fill-in-the-middle tokens (fim.c): from GGUF keys (tok_load_gguf) or, for
 * those still unknown, by their text, as llama.cpp finds them. */
typedef enum tok_fim {
    TOK_FIM_PRE = 0, TOK_FIM_SUF, TOK_FIM_MID, TOK_FIM_PAD, TOK_FIM_REP, TOK_FIM_SEP, TOK_FIM_COUNT
} tok_fim;
int32_t tok_fim_id(const tok_tokenizer *t, tok_fim which);  /* -1 when none */
/* Whether the vocabulary has FIM_PRE, FIM_SUF and FIM_MID. */
bool tok_has_fim(const tok_tokenizer *t);
/* The prompt of a FIM request (pdl_fim_prompt, pagedlm.h). */
int tok_fim_prompt(const tok_tokenizer *t, const pdl_fim_input *in, int32_t **ids, size_t *n_ids, bool *truncated,
                   pdl_error *err);

/* Whether this is a byte-level BPE tokenizer (else SentencePiece-style or
 * WordPiece). */
bool tok_is_byte_level(const tok_tokenizer *t);

/* Encodes len bytes of text (any bytes: invalid UTF-8 goes through byte
 * fallback or the byte-level map like any other byte). add_special: add
 * BOS/EOS as the tokenizer's settings say (Hugging Face encode(text)).
 * Special-token text is encoded as plain text (tok_encode_ex to parse it).
 * *ids is malloc'ed. */
int tok_encode(const tok_tokenizer *t, const char *text, size_t len, bool add_special,
               int32_t **ids, size_t *n_ids, pdl_error *err);
/* The same; parse_special: the text of special tokens ("<|im_start|>",
 * "<s>") becomes their ids, as Hugging Face does by default
 * (split_special_tokens=False). Without it (HF split_special_tokens=True)
 * only non-special added tokens are matched. */
int tok_encode_ex(const tok_tokenizer *t, const char *text, size_t len, bool add_special,
                  bool parse_special, int32_t **ids, size_t *n_ids, pdl_error *err);

/* Decodes a whole sequence as Hugging Face's decode(skip_special_tokens=True)
 * does. Returns a malloc'ed NUL-terminated string, or NULL on error (an id
 * outside the vocabulary). Bytes that do not form UTF-8 become U+FFFD, one
 * per maximal invalid subsequence: exactly HF for byte-level BPE (its
 * from_utf8_lossy); for SPM byte fallback HF writes one per byte of an
 * invalid run, which no streaming decoder can match (valid runs agree).
 * clean_up_tokenization_spaces (a transformers-side option) is not applied. */
char *tok_decode(const tok_tokenizer *t, const int32_t *ids, size_t n_ids, pdl_error *err);
/* The same, with the byte length in *len (the text holds a NUL byte where
 * the ids hold <0x00>). */
char *tok_decode_n(const tok_tokenizer *t, const int32_t *ids, size_t n_ids, size_t *len,
                   pdl_error *err);
/* The same; keep_special: special tokens give their text
 * (decode(skip_special_tokens=False)). */
char *tok_decode_ex(const tok_tokenizer *t, const int32_t *ids, size_t n_ids, bool keep_special,
                    size_t *len, pdl_error *err);

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
/* A stream that keeps the text of special tokens (as tok_decode_ex). */
tok_stream *tok_stream_new_ex(const tok_tokenizer *t, bool keep_special);
void tok_stream_prime(tok_stream *s, const int32_t *ids, size_t n_ids);
const char *tok_stream_push(tok_stream *s, int32_t id);
const char *tok_stream_flush(tok_stream *s);
/* Byte length of the text the last push or flush returned (see tok_decode_n). */
size_t tok_stream_len(const tok_stream *s);
void tok_stream_free(tok_stream *s);

#endif
