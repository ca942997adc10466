/*
 * tok_internal.h - the tokenizer's representation, shared by its loaders
 * (tok_gguf.c, tok_hf.c), the model-specific encoders (spm.c) and the
 * model-independent parts (tokenizer.c: normalization, decode, streaming).
 *
 * What it is not for: anything outside src/tokenizer/; the rest of the engine
 * uses tokenizer.h only.
 *
 * A loader allocates with tok_new(), fills the pieces and settings, and calls
 * tok_finish(), which builds the lookup tables and the decode strings. A new
 * model type (byte-level BPE) adds an enum value, its own encode function and
 * its own decode-string rule; the stream and the tables stay the same.
 */
#ifndef PDL_TOKENIZER_TOK_INTERNAL_H
#define PDL_TOKENIZER_TOK_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pagedlm.h"
#include "tokenizer/tok_hash.h"
#include "tokenizer/tokenizer.h"

typedef enum tok_model_type {
    TOK_MODEL_SPM = 0,  /* SentencePiece-style BPE over characters, byte fallback */
} tok_model_type;

/* Token types, numbered as GGUF's tokenizer.ggml.token_type. */
typedef enum tok_type {
    TOK_TYPE_MISSING = 0,       /* an id no piece was given for (a hole) */
    TOK_TYPE_NORMAL = 1,
    TOK_TYPE_UNKNOWN = 2,
    TOK_TYPE_CONTROL = 3,       /* <s>, </s>, special added tokens */
    TOK_TYPE_USER_DEFINED = 4,
    TOK_TYPE_UNUSED = 5,
    TOK_TYPE_BYTE = 6,          /* <0xXX> */
} tok_type;

/* "▁" (U+2581), SentencePiece's visible space. */
#define TOK_SPM_SPACE "\xe2\x96\x81"
#define TOK_SPM_SPACE_LEN 3

struct tok_tokenizer {
    tok_model_type model;
    int32_t n_vocab;

    /* Piece text of every id, NUL-terminated, in one pool. */
    char *pool;                /* [pool_len] */
    size_t pool_len;
    uint32_t *piece_off;       /* [n_vocab] */
    uint32_t *piece_len;       /* [n_vocab] */
    uint8_t *type;             /* [n_vocab] tok_type */
    float *scores;             /* [n_vocab]; used when !merge_by_rank, may be NULL (all 0) */

    /* What each id contributes to decoded text, before UTF-8 repair: nothing
     * for control/unknown ids, one raw byte for byte tokens, the piece with
     * "▁" -> " " otherwise. */
    char *dec_pool;
    uint32_t *dec_off;         /* [n_vocab] */
    uint32_t *dec_len;         /* [n_vocab] */
    uint32_t max_dec_len;

    tok_strmap vocab;          /* piece -> id */
    tok_pairmap merges;        /* (left, right) -> rank, result; merge_by_rank only */
    int32_t byte_id[256];      /* id of <0xXX> (or the 1-char piece), -1 when none */

    int32_t bos_id, eos_id, unk_id;  /* -1 when none */
    bool add_bos, add_eos;

    /* SPM normalization and decoding. */
    bool add_space_prefix;     /* prepend "▁" to non-empty text */
    bool escape_spaces;        /* " " -> "▁" */
    bool strip_leading_space;  /* decode drops one leading " " */
    bool merge_by_rank;        /* tokenizer.json merges; else GGUF scores */
    bool byte_fallback;        /* HF: unknown chars become <0xXX> before merging */
    bool fuse_unk;             /* HF: adjacent unknown chars give one unk id */
    bool spm_split_words;      /* no merge crosses into a "▁" after non-"▁" (spm.c) */
};

/* A tokenizer with n_vocab empty (MISSING) ids and default settings. */
tok_tokenizer *tok_new(int32_t n_vocab);
/* Copies the pieces: ptrs[i] (lens[i] bytes) or NULL for a hole. */
int tok_set_pieces(tok_tokenizer *t, const char *const *ptrs, const uint32_t *lens,
                   pdl_error *err);
/* Builds the vocabulary table, byte ids and decode strings. */
int tok_finish(tok_tokenizer *t, pdl_error *err);

/* Parses "<0xXX>" (hex digits in either case). Returns the byte or -1. */
int tok_parse_byte_piece(const char *s, size_t n);

/* Length of the valid UTF-8 character at s[0..n), or 0 when the bytes there
 * do not start one (invalid, overlong, surrogate or truncated). */
size_t tok_utf8_char_len(const uint8_t *s, size_t n);

/* SPM encode of already normalized text; out has room for n ids (an SPM
 * symbol never yields more ids than it has bytes). */
int tok_spm_encode(const tok_tokenizer *t, const char *text, size_t n, int32_t *out,
                   size_t *n_out, pdl_error *err);

#endif
