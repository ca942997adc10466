/*
 * tok_internal.h - the tokenizer's representation, shared by its loaders
 * (tok_gguf.c, tok_hf.c, tok_json.c), the model-specific encoders (spm.c,
 * bpe.c, wordpiece.c), the text stages in front of them (added.c: added/special tokens,
 * normalize.c: Unicode normalization, pretok.c: PCRE2 pre-tokenizer) and the
 * model-independent parts (tokenizer.c: encode driver, decode, streaming).
 *
 * What it is not for: anything outside src/tokenizer/; the rest of the engine
 * uses tokenizer.h only.
 *
 * A loader allocates with tok_new(), fills the pieces and settings, and calls
 * tok_finish(), which builds the lookup tables and the decode strings, then
 * adds merges, added tokens and pre-tokenizer steps. The tokenizer is
 * read-only afterwards; every encode call keeps its mutable state (match data,
 * buffers, word cache) in its own tok_ctx, so one tokenizer serves any number
 * of threads.
 *
 * Encoding, as Hugging Face tokenizers does it:
 *   text -> split out added tokens matched on the raw text (tok_added_split)
 *        -> normalize each remaining fragment (NFC/NFKC...; SPM: "▁" rules)
 *        -> split out added tokens matched on normalized text
 *        -> SPM: merge by score/rank (spm.c)
 *           byte-level BPE: pre-tokenizer regexes (pretok.c), then each word
 *           through GPT-2's byte -> character map and the merges (bpe.c).
 *           WordPiece (BERT): BertNormalizer, BertPreTokenizer and greedy
 *           longest-match-first pieces (wordpiece.c).
 */
#ifndef PDL_TOKENIZER_TOK_INTERNAL_H
#define PDL_TOKENIZER_TOK_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "pagedlm.h"
#include "tokenizer/tok_hash.h"
#include "tokenizer/tokenizer.h"

typedef enum tok_model_type {
    TOK_MODEL_SPM = 0,  /* SentencePiece-style BPE over characters, byte fallback */
    TOK_MODEL_BPE = 1,  /* byte-level BPE (GPT-2): bytes -> 256 visible characters, merges by rank */
    TOK_MODEL_WORDPIECE = 2, /* BERT: greedy longest-match pieces, "##" continuations */
} tok_model_type;

/* Unicode normalization applied to text fragments before the model. */
typedef enum tok_norm_form {
    TOK_NORM_NONE = 0,
    TOK_NORM_NFC,
    TOK_NORM_NFD,
    TOK_NORM_NFKC,
    TOK_NORM_NFKD,
} tok_norm_form;

/* How a pre-tokenizer split treats its matches (Hugging Face's
 * SplitDelimiterBehavior). */
typedef enum tok_split_behavior {
    TOK_SPLIT_ISOLATED = 0,     /* every match and every gap is a piece */
    TOK_SPLIT_REMOVED,          /* matches are dropped */
    TOK_SPLIT_MERGED_PREV,      /* a match joins the piece before it */
    TOK_SPLIT_MERGED_NEXT,      /* a match joins the piece after it */
    TOK_SPLIT_CONTIGUOUS,       /* adjacent matches form one piece */
} tok_split_behavior;

#define TOK_MAX_PRE_STEPS 8

/* One pre-tokenizer step, applied to every piece the steps before made. */
typedef struct tok_pre_step {
    pcre2_code *re;       /* NULL: a prefix-space step */
    bool jit;             /* re is JIT-compiled */
    uint8_t behavior;     /* tok_split_behavior */
    bool invert;          /* the gaps are the matches */
    bool mapped;          /* matches the byte-level form (a step after ByteLevel) */
} tok_pre_step;

/* Added-token flags (tokenizer.json added_tokens; GGUF token types). */
enum {
    TOK_ADDED_SPECIAL = 1 << 0,     /* matched only with parse_special */
    TOK_ADDED_LSTRIP = 1 << 1,      /* swallows whitespace on its left */
    TOK_ADDED_RSTRIP = 1 << 2,      /* swallows whitespace on its right */
    TOK_ADDED_SINGLE_WORD = 1 << 3, /* only when not inside a word */
    TOK_ADDED_NORMALIZED = 1 << 4,  /* matched on normalized text */
};

typedef struct tok_trie_node {
    int32_t child;    /* first child node, -1 when none */
    int32_t sibling;  /* next node with the same parent, -1 when none */
    int32_t added;    /* index into tok_trie.entries of the token ending here, -1 */
    uint8_t byte;
} tok_trie_node;

typedef struct tok_added_entry {
    int32_t id;
    uint8_t flags;
} tok_added_entry;

/* Added tokens matched in text, leftmost-longest (Hugging Face's
 * aho-corasick MatchKind::LeftmostLongest). Node 0 is the root. */
typedef struct tok_trie {
    tok_trie_node *nodes;     /* [n_nodes] */
    int32_t n_nodes, cap_nodes;
    tok_added_entry *entries; /* [n_entries] */
    int32_t n_entries, cap_entries;
    uint8_t first[32];        /* bitmap of the bytes a token can start with */
} tok_trie;

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

    /* What each id contributes to decoded text, before UTF-8 repair: one raw
     * byte for byte tokens; SPM: the piece with "▁" -> " "; byte-level: the
     * piece's characters mapped back to bytes (its raw text when a character
     * is outside the map, as HF's ByteLevel decoder does). Control and unknown
     * ids have their text here too; decode skips them unless asked to keep
     * special tokens (tok_skipped_by_default). Missing/unused ids: nothing. */
    char *dec_pool;
    uint32_t *dec_off;         /* [n_vocab] */
    uint32_t *dec_len;         /* [n_vocab] */
    uint32_t max_dec_len;

    tok_strmap vocab;          /* piece -> id */
    tok_pairmap merges;        /* (left, right) -> rank, result: tokenizer.json SPM merges, all BPE merges */
    int32_t byte_id[256];      /* id of <0xXX> (or the 1-char piece), -1 when none */

    int32_t bos_id, eos_id, unk_id;  /* -1 when none */
    int32_t fim[TOK_FIM_COUNT];      /* fill-in-the-middle tokens by tok_fim; -1 when none */
    bool add_bos, add_eos;

    /* Added tokens: matched on the raw text, and (tokenizer.json tokens with
     * normalized=true) on normalized text. */
    tok_trie added_raw, added_norm;
    tok_norm_form norm;        /* normalizer of text fragments (byte-level BPE) */

    /* Byte-level BPE. */
    tok_pre_step pre[TOK_MAX_PRE_STEPS];
    int n_pre;
    bool ignore_merges;        /* a word that is a piece is taken whole (Llama 3) */
    int32_t bl_byte_id[256];   /* id of the one-character piece of each byte, -1 */

    /* SPM normalization and decoding. */
    bool add_space_prefix;     /* prepend "▁" to non-empty text fragments */
    bool space_prefix_first;   /* ... only to the fragment at the start of the text */
    bool space_prefix_if_absent; /* ... not when it starts with "▁" already (Metaspace) */
    bool escape_spaces;        /* " " -> "▁" */
    bool strip_leading_space;  /* decode drops one leading " " */
    bool merge_by_rank;        /* tokenizer.json merges; else GGUF scores */
    bool byte_fallback;        /* HF: unknown chars become <0xXX> before merging */
    bool fuse_unk;             /* HF: adjacent unknown chars give one unk id */
    bool spm_split_words;      /* no merge crosses into a "▁" after non-"▁" (spm.c) */

    /* WordPiece (wordpiece.c). Pieces are kept in Hugging Face's spelling
     * (continuations carry wp_prefix) whatever file they came from. */
    char wp_prefix[16];        /* continuing_subword_prefix, "##" */
    uint8_t wp_prefix_len;
    int32_t wp_max_chars;      /* max_input_chars_per_word: a longer word is unk */
    uint32_t wp_max_piece;     /* longest piece in bytes (bounds the match) */
    bool wp_cleanup;           /* decoder cleanup: " ." -> "." ... */
    /* BertNormalizer; bert_norm false: no normalizer */
    bool bert_norm, bert_clean_text, bert_chinese, bert_strip_accents, bert_lowercase;
};

/* A tokenizer with n_vocab empty (MISSING) ids and default settings. */
tok_tokenizer *tok_new(int32_t n_vocab);
/* Copies the pieces: ptrs[i] (lens[i] bytes) or NULL for a hole. */
int tok_set_pieces(tok_tokenizer *t, const char *const *ptrs, const uint32_t *lens,
                   pdl_error *err);
/* Builds the vocabulary table, byte ids and decode strings, and looks up
 * the FIM tokens still unknown (tok_fim_detect). */
int tok_finish(tok_tokenizer *t, pdl_error *err);
/* Fills the FIM ids still -1 from the vocabulary's token texts (fim.c). */
void tok_fim_detect(tok_tokenizer *t);

/* Whether decode leaves id out by default (control, unknown): Hugging Face's
 * skip_special_tokens=True. */
bool tok_skipped_by_default(const tok_tokenizer *t, int32_t id);

/* Parses "<0xXX>" (hex digits in either case). Returns the byte or -1. */
int tok_parse_byte_piece(const char *s, size_t n);

/* Length of the valid UTF-8 character at s[0..n), or 0 when the bytes there
 * do not start one (invalid, overlong, surrogate or truncated). */
size_t tok_utf8_char_len(const uint8_t *s, size_t n);

/* SPM encode of already normalized text; out has room for n ids (an SPM
 * symbol never yields more ids than it has bytes). */
int tok_spm_encode(const tok_tokenizer *t, const char *text, size_t n, int32_t *out,
                   size_t *n_out, pdl_error *err);

/* The code point of the valid character at s[0..len) (len from
 * tok_utf8_char_len). */
uint32_t tok_utf8_decode(const uint8_t *s, size_t len);
/* Merges of a byte-level vocabulary whose ids are tiktoken ranks, into
 * t->merges (bpe_ranks.c); path names the file in errors. */
int tok_bpe_merges_from_ranks(tok_tokenizer *t, const char *path, pdl_error *err);

/* Unicode White_Space (Rust's char::is_whitespace) and alphanumeric
 * (char::is_alphanumeric: letters and numbers). */
bool tok_cp_is_space(uint32_t cp);
bool tok_cp_is_alnum(uint32_t cp);

/* ---- per-call encode state (tokenizer.c) ---------------------------------- */

typedef struct tok_buf {
    char *p;
    size_t n, cap;
} tok_buf;

typedef struct tok_span {
    uint32_t start, end;
    bool match;
} tok_span;

/* A bounded word -> ids memo for byte-level BPE (bpe.c). */
typedef struct tok_word_cache {
    struct tok_wc_slot *slots;  /* [mask + 1] */
    uint32_t mask, used;
    char *keys;                 /* [keys_cap] word bytes */
    size_t keys_n, keys_cap;
    int32_t *ids;               /* [ids_cap] */
    size_t ids_n, ids_cap;
} tok_word_cache;

typedef struct tok_ctx {
    const tok_tokenizer *t;
    pdl_error *err;
    bool parse_special;
    size_t text_len;           /* of the whole call (sizes the word cache) */
    int32_t *out;              /* [out_cap] ids so far */
    size_t n_out, out_cap;
    tok_buf norm;              /* a normalized fragment */
    tok_buf spm;               /* an SPM-normalized fragment */
    int32_t *ucs;              /* [ucs_cap] utf8proc scratch */
    size_t ucs_cap;
    pcre2_match_data *md;
    tok_buf step_buf[TOK_MAX_PRE_STEPS];    /* prefix-space copies, mapped text */
    uint32_t *step_back[TOK_MAX_PRE_STEPS]; /* mapped offset -> raw offset */
    size_t step_back_cap[TOK_MAX_PRE_STEPS];
    tok_span *spans[TOK_MAX_PRE_STEPS];     /* matches of a non-isolated split */
    size_t spans_cap[TOK_MAX_PRE_STEPS];
    /* BPE word scratch */
    int32_t *sym_id, *sym_rank, *sym_res;   /* [sym_cap] */
    size_t sym_cap;
    char *mapped;                           /* [mapped_cap] a word in byte-level form */
    size_t mapped_cap;
    void *long_syms;                        /* long-word symbols (bpe.c) */
    size_t long_syms_cap;
    void *heap;                             /* long-word merge candidates (bpe.c) */
    size_t heap_cap;
    tok_word_cache cache;
    tok_buf wp;                             /* WordPiece: prefix + rest of a word */
} tok_ctx;

bool tok_buf_reserve(tok_buf *b, size_t n);
/* Appends n ids to the call's output; false when out of memory (err set). */
bool tok_ctx_push(tok_ctx *c, const int32_t *ids, size_t n);
bool tok_ctx_reserve(tok_ctx *c, size_t more);

/* ---- added tokens (added.c) ----------------------------------------------- */

void tok_trie_free(tok_trie *tr);
/* Adds token id with content s[0..n) and flags; false when out of memory. */
bool tok_trie_add(tok_trie *tr, const char *s, size_t n, int32_t id, uint8_t flags);
/* Splits s[0..n) at the added tokens of tr as Hugging Face's AddedVocabulary
 * does: leftmost-longest matches, special ones skipped unless parse_special,
 * single_word / lstrip / rstrip honoured. Text between tokens goes to
 * on_text(c, text, len, offset), tokens are pushed to the output. */
typedef int (*tok_text_fn)(tok_ctx *c, const char *s, size_t n, size_t offset);
int tok_added_split(tok_ctx *c, const tok_trie *tr, const char *s, size_t n, bool parse_special,
                    tok_text_fn on_text);

/* ---- normalization (normalize.c) ------------------------------------------ */

/* out = form(s[0..n)); invalid UTF-8 bytes pass through unchanged. */
int tok_normalize(tok_ctx *c, tok_norm_form form, const char *s, size_t n, tok_buf *out);
/* The same for a load-time string (added token contents): malloc'ed. */
char *tok_normalize_alloc(tok_norm_form form, const char *s, size_t n, size_t *out_len);

/* ---- pre-tokenizer (pretok.c) --------------------------------------------- */

/* Appends a split step: pattern (a regex in Oniguruma/PCRE syntax, or a
 * literal string) compiled with PCRE2 (UTF, UCP, invalid UTF-8 allowed) and
 * JIT. mapped: the step runs on the byte-level form of each piece. */
int tok_pre_add_split(tok_tokenizer *t, const char *pattern, size_t len, bool literal,
                      tok_split_behavior behavior, bool invert, bool mapped, pdl_error *err);
/* Appends a step that prepends " " to pieces that do not start with one. */
int tok_pre_add_prefix_space(tok_tokenizer *t, pdl_error *err);
/* Sets the steps (and ignore_merges, add_bos defaults) that llama.cpp and
 * Hugging Face use for GGUF tokenizer.ggml.pre = name. */
int tok_pre_from_gguf(tok_tokenizer *t, const char *name, bool *add_bos, pdl_error *err);
void tok_pre_free(tok_tokenizer *t);
/* GPT-2's ByteLevel regex (the pre-tokenizer of ByteLevel with use_regex),
 * and one character of HF's Punctuation pre-tokenizer (ASCII or Unicode P*). */
extern const char TOK_RE_GPT2[];
extern const char TOK_RE_PUNCT[];
/* Runs the steps over s[0..n) and feeds every word to tok_bpe_word. */
int tok_pre_run(tok_ctx *c, const char *s, size_t n);

/* ---- byte-level BPE (bpe.c) ----------------------------------------------- */

/* GPT-2's byte <-> character map: byte b is shown as code point
 * tok_bl_cp[b]; tok_bl_byte(cp) is the byte of such a code point or -1. */
uint32_t tok_bl_cp(uint8_t b);
int tok_bl_byte(uint32_t cp);
/* Writes the byte-level form of s[0..n) (at most 2n bytes); returns its length. */
size_t tok_bl_map(const char *s, size_t n, char *out);
/* Fills bl_byte_id[] from the vocabulary. */
void tok_bpe_init_bytes(tok_tokenizer *t);
/* Encodes one pre-tokenized word (raw bytes) and appends its ids. */
int tok_bpe_word(tok_ctx *c, const char *s, size_t n);
/* Merges ids[0..n) in place (path 0: by length; 1: the short-word scan;
 * 2: the heap, for tests); returns the new count or -1 (out of memory). */
long tok_bpe_merge(tok_ctx *c, int32_t *ids, size_t n, int path);
void tok_bpe_ctx_free(tok_ctx *c);

/* ---- WordPiece (wordpiece.c) ---------------------------------------------- */

/* Settings of a WordPiece tokenizer as Hugging Face's defaults have them:
 * "##", 100 characters, cleanup, BertNormalizer with lowercase (strip_accents
 * following it), clean_text and CJK spacing. */
void tok_wp_defaults(tok_tokenizer *t);
/* BertNormalizer of s[0..n) into out. */
int tok_wp_normalize(tok_ctx *c, const char *s, size_t n, tok_buf *out);
/* The same for a load-time string (added token contents): malloc'ed. */
char *tok_wp_normalize_alloc(const tok_tokenizer *t, const char *s, size_t n, size_t *out_len);
/* BertPreTokenizer over normalized s[0..n), each word into its pieces. */
int tok_wp_run(tok_ctx *c, const char *s, size_t n);
/* What id adds to decoded text after the first token (HF's WordPiece
 * decoder: continuations lose the prefix, other pieces get a " ", then the
 * cleanup); out has room for piece_len + 1 bytes. Returns the length. */
uint32_t tok_wp_decoded_piece(const tok_tokenizer *t, int32_t id, char *out);
/* Whether id is a continuation piece (it decodes as itself in first place). */
bool tok_wp_is_continuation(const tok_tokenizer *t, int32_t id);
/* Hugging Face's punctuation for BERT: ASCII punctuation or Unicode P*. */
bool tok_wp_is_punct(uint32_t cp);
/* Loads a folder holding vocab.txt (+ tokenizer_config.json), tok_hf.c. */
int tok_load_vocab_txt(tok_tokenizer **out, const char *dir, pdl_error *err);

#endif
