/*
 * pagedlm.h - the public interface of libpagedlm.
 *
 * What this is for: programs (the pagedlm CLI, the server, embedders) load a
 * model, tokenize text, run the packed-batch forward and sample tokens through
 * these functions. What it is not for: kernels, file formats and other
 * internals, which live under src/ and may change without notice.
 *
 * Conventions: every function that can fail returns 0 on success and -1 on
 * failure, with a message in the caller's pdl_error naming the file, field or
 * offset at fault. The library never prints to stdout and never exits.
 */
#ifndef PAGEDLM_H
#define PAGEDLM_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PDL_ERROR_MAX 1024

/* A failure description, filled by the function that failed. */
typedef struct pdl_error {
    char message[PDL_ERROR_MAX];
} pdl_error;

/* ---------------------------------------------------------------------------
 * Models
 * ------------------------------------------------------------------------- */

typedef struct pdl_model pdl_model;

typedef enum pdl_kv_dtype {
    PDL_KV_F16 = 0,  /* default: half the memory, moves logits by ~3e-4 */
    PDL_KV_F32 = 1,  /* exact; used by the reference tests */
} pdl_kv_dtype;

typedef struct pdl_model_options {
    int n_threads;        /* 0 = all online cores */
    int ctx_size;         /* 0 = the model's own context length */
} pdl_model_options;

/* Hyperparameters as the engine uses them, whatever the source format. */
typedef struct pdl_model_info {
    const char *arch;         /* "llama", "mistral", "qwen2", "qwen3" */
    const char *source;       /* "gguf" or "safetensors" */
    int n_layers;
    int hidden;               /* hidden size (embedding width) */
    int n_heads;
    int n_kv_heads;
    int head_dim;
    int ffn;                  /* intermediate size */
    int vocab;
    int ctx_len;              /* context length in effect */
    int bos_id;               /* -1 when none */
    int eos_id;               /* -1 when none */
    bool add_bos;             /* the tokenizer prepends BOS by default */
    const char *weight_types; /* e.g. "F32" or "F16,F32" */
} pdl_model_info;

/* Loads a .gguf file or a Hugging Face folder (config.json + safetensors). */
int pdl_model_load(pdl_model **out, const char *path,
                   const pdl_model_options *opts, pdl_error *err);
void pdl_model_free(pdl_model *model);
void pdl_model_get_info(const pdl_model *model, pdl_model_info *info);

/* ---------------------------------------------------------------------------
 * Tokenizer (the one that came with the model)
 * ------------------------------------------------------------------------- */

/* Whether the model came with a usable tokenizer (text in and out). */
bool pdl_model_has_tokenizer(const pdl_model *model);

/* Encodes UTF-8 text. add_special: prepend BOS when the tokenizer does.
 * *ids is malloc'ed; the caller frees it. */
int pdl_tokenize(const pdl_model *model, const char *text, size_t len,
                 bool add_special, int32_t **ids, size_t *n_ids, pdl_error *err);

/* Decodes ids to text (special tokens skipped); *text is malloc'ed. */
int pdl_detokenize(const pdl_model *model, const int32_t *ids, size_t n_ids, char **text, pdl_error *err);

/* Streaming detokenizer: feed ids one at a time, receive only complete UTF-8.
 * The concatenation of all outputs equals the whole sequence decoded at once.
 * context (e.g. the prompt) is decoded silently first, so a continuation
 * reads as it does after that context. NULL when the model has no tokenizer. */
typedef struct pdl_detok pdl_detok;
pdl_detok *pdl_detok_new(const pdl_model *model, const int32_t *context, size_t n_context);
/* The newly completed text for `id` (possibly ""), valid until the next call. */
const char *pdl_detok_push(pdl_detok *d, int32_t id);
const char *pdl_detok_flush(pdl_detok *d);  /* pending incomplete bytes as U+FFFD */
void pdl_detok_free(pdl_detok *d);

/* ---------------------------------------------------------------------------
 * KV cache and the packed-batch forward
 * ------------------------------------------------------------------------- */

typedef struct pdl_kv_cache pdl_kv_cache;

/* A pool of n_blocks blocks of block_size tokens for every layer. */
int pdl_kv_cache_create(pdl_kv_cache **out, const pdl_model *model,
                        pdl_kv_dtype dtype, int block_size, int n_blocks,
                        pdl_error *err);
void pdl_kv_cache_free(pdl_kv_cache *kv);
int pdl_kv_cache_block_size(const pdl_kv_cache *kv);
int pdl_kv_cache_free_blocks(const pdl_kv_cache *kv);
/* Takes one free block, or returns -1 when none is left. */
int32_t pdl_kv_cache_alloc_block(pdl_kv_cache *kv);
void pdl_kv_cache_release_block(pdl_kv_cache *kv, int32_t block);

/*
 * One forward over a packed batch of sequences. Row i (0 <= i < n_tokens) is
 * token token_ids[i] at position positions[i] of the sequence s whose segment
 * cu_seqlens[s] <= i < cu_seqlens[s+1] holds it. Each sequence's K/V rows go to
 * the cache slots slot_mapping[i] (slot = block * block_size + offset); its
 * attention reads positions 0 .. positions[i] through block_tables[s].
 * Positions inside a segment are consecutive; positions before a segment's
 * first row must already be in the cache.
 *
 * Only the rows in logits_indices (ascending) get the final norm and the LM
 * head: logits_out holds n_logits x vocab floats, row j for input row
 * logits_indices[j]. A row's result does not depend on the other rows.
 */
typedef struct pdl_batch {
    int n_tokens;
    const int32_t *token_ids;            /* [n_tokens] */
    const int32_t *positions;            /* [n_tokens] */
    const int32_t *slot_mapping;         /* [n_tokens] */
    int n_seqs;
    const int32_t *cu_seqlens;           /* [n_seqs + 1], cu_seqlens[0] = 0 */
    const int32_t *const *block_tables;  /* [n_seqs][blocks of that sequence] */
    int n_logits;
    const int32_t *logits_indices;       /* [n_logits] */
} pdl_batch;

int pdl_forward(pdl_model *model, pdl_kv_cache *kv, const pdl_batch *batch,
                float *logits_out, pdl_error *err);

/*
 * One sequence's KV blocks, for callers that run sequences one at a time
 * (pdl_generate, `pagedlm logits`). The engine's scheduler keeps its own.
 */
typedef struct pdl_seq {
    int32_t *block_table; /* [n_blocks] blocks holding positions in order */
    int n_blocks, cap;
    int n_cached;         /* positions 0 .. n_cached-1 are in the cache */
} pdl_seq;

typedef enum pdl_logits_rows {
    PDL_LOGITS_NONE = 0,  /* fill the cache only */
    PDL_LOGITS_LAST,      /* the last row only: n_logits = 1 */
    PDL_LOGITS_ALL,       /* every row: n_logits = n_tokens */
} pdl_logits_rows;

/* Appends tokens at positions n_cached.. to the sequence (taking blocks from
 * kv as needed) in one forward, with logits for the rows asked. */
int pdl_seq_forward(pdl_model *model, pdl_kv_cache *kv, pdl_seq *seq, const int32_t *tokens, int n_tokens,
                    pdl_logits_rows rows, float *logits_out, pdl_error *err);
/* Gives the sequence's blocks back to kv and empties it. */
void pdl_seq_release(pdl_kv_cache *kv, pdl_seq *seq);

/* ---------------------------------------------------------------------------
 * Sampling and generation
 * ------------------------------------------------------------------------- */

typedef struct pdl_sampling {
    float temperature;   /* 0 = greedy (argmax, ties -> lowest id) */
    uint64_t seed;
} pdl_sampling;

typedef struct pdl_sampler pdl_sampler;
pdl_sampler *pdl_sampler_new(const pdl_sampling *params, int vocab);
int32_t pdl_sampler_sample(pdl_sampler *s, const float *logits);
void pdl_sampler_free(pdl_sampler *s);

/* Called for each generated token; return false to stop early. */
typedef bool (*pdl_token_callback)(int32_t token, const char *text, void *user);

typedef struct pdl_generate_params {
    int max_tokens;
    pdl_sampling sampling;
    pdl_kv_dtype kv_dtype;
    bool stop_at_eos;
} pdl_generate_params;

/* Greedy or sampled continuation of one prompt; *out_ids (malloc'ed) holds
 * the generated ids. Stops at max_tokens, EOS, or the context length. */
int pdl_generate(pdl_model *model, const int32_t *prompt, size_t n_prompt,
                 const pdl_generate_params *params, pdl_token_callback cb,
                 void *user, int32_t **out_ids, size_t *n_out, pdl_error *err);

#ifdef __cplusplus
}
#endif
#endif /* PAGEDLM_H */
