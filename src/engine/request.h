/*
 * request.h - the engine's record of a request and of each sequence it
 * samples: tokens so far, and the sequence's state grouped by concern:
 * the KV cache (cache), drawing tokens (sampling), the output text (text),
 * speculative decoding (spec) and logprobs.
 *
 * Shared by the scheduler (which reads and updates state and cache), the
 * runner (which reads tokens, cache.blocks and spec.draft to pack a batch),
 * the proposers (spec) and the engine's stages (which append sampled
 * tokens and emit events).
 */
#ifndef PDL_ENGINE_REQUEST_H
#define PDL_ENGINE_REQUEST_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/block_pool.h"
#include "engine/stop_match.h"
#include "grammar/grammar.h"
#include "pagedlm.h"

typedef enum eng_seq_state {
    SEQ_WAITING = 0,  /* queued (new, or preempted: cache.n_computed back to 0) */
    SEQ_RUNNING,      /* holds blocks (and a hybrid model's state slot); scheduled every step */
    SEQ_FINISHED,
} eng_seq_state;

/* Where a sequence stands with its thinking block (pdl_reasoning). */
typedef struct eng_think {
    bool inside;    /* in the block: no grammar applies, tokens are counted */
    bool decided;   /* the block was opened, or the answer began: a start token now is plain text */
    int n;          /* tokens generated inside the block */
} eng_think;

/* What all sequences of one request share. */
typedef struct eng_request {
    uint64_t id;
    pdl_request_params params;  /* stop, stop_ids and sampling.logit_bias point into owned copies below */
    char **stop_strings;        /* [params.n_stop] owned */
    stop_matcher *stops;        /* over stop_strings; NULL when there are none */
    int32_t *stop_ids;          /* [params.n_stop_ids] owned */
    pdl_logit_bias *logit_bias; /* [params.sampling.n_logit_bias] owned */
    int32_t *min_banned;        /* [n_min_banned] EOS and stop ids, banned until min_tokens are out */
    int n_min_banned;
    char *cache_salt;           /* owned copy of params.cache_salt, or NULL */
    bpool_hash root_hash;       /* the chain value before the first block (salt folded in) */
    uint64_t salt_check;        /* bpool_extra_check of the salt, kept beside first blocks */
    bool no_prefix_cache;       /* prompt logprobs, mean or first-row pooling: every prompt row is computed */
    gram_grammar *grammar;      /* structured output (a reference of our own), or NULL */
    float **image_rows;         /* [n_images] owned: each image's encoded rows (rows x hidden) */
    int n_images;
    const float **row_embd;     /* [n_prompt] the input vector of each prompt row: NULL for a token row, else a
                                   row of image_rows; NULL when the prompt has no image */
    int32_t *hash_ids;          /* [n_prompt] what the prefix cache hashes for prompt rows: the ids, with
                                   image rows replaced by a value of the image's hash and the row's index
                                   (negative, so never a token id: vLLM's extra keys); NULL without images */
    int32_t *span_first, *span_last; /* [n_prompt] the two-way span of each prompt row (pdl_batch's; a row
                                   outside one: its position), or NULL: Gemma 3's images, whose rows the
                                   scheduler never splits across steps */
    int32_t *rope_pos3;         /* [n_prompt][3] M-RoPE positions of the prompt rows (pdl_batch's), or NULL:
                                   an image prompt of a model with M-RoPE (Qwen2.5-VL) */
    int32_t rope_delta;         /* rows past the prompt turn by (index + rope_delta) in all three components
                                   (vLLM's mrope_position_delta: the image's rows used fewer positions) */
    int n;                      /* sequences asked for */
    int n_live;                 /* sequences not finished yet */
    pdl_event_fn cb;
    void *user;
} eng_request;

/* Scheduling and the KV cache (scheduler.c, runner.c): where the sequence's
 * K/V is and what of it the prefix cache knows. */
typedef struct eng_seq_cache {
    int n_computed;             /* tokens 0 .. n_computed-1 have K/V in the cache */
    int32_t *blocks;            /* [n_blocks] the block table */
    int n_blocks, cap_blocks;
    bpool_hash *block_hashes;   /* [n_block_hashes] chain hashes of the full blocks of `tokens` so far */
    int n_block_hashes, cap_block_hashes;
    int n_registered;           /* blocks [0, n_registered) are known to the prefix cache (taken or offered) */
    int32_t canon_last;         /* the cached block standing for block n_registered - 1 (-1 = none) */
    int n_cached_prompt;        /* prompt tokens the prefix cache gave at the first admission (-1 = not yet) */
    int32_t state_slot;         /* hybrid models: the recurrent state slot (state_pool.h) held while running,
                                   holding the state after positions [0, n_computed); -1 = none */
    int snapshot_shared;        /* hybrid models: a snapshot point past the interval ones, where the cached
                                   blocks its admission found ended (a prefix shared with an earlier prompt,
                                   whose state no snapshot held yet); 0 = none */
} eng_seq_cache;

/* Drawing the next token (engine_step.c). */
typedef struct eng_seq_sampling {
    pdl_sampler *sampler;       /* the request's parameters, this sequence's random stream */
    gram_matcher *matcher;      /* where the output is in the request's grammar (NULL = none) */
    eng_think think;            /* the thinking block so far (params.reasoning) */
} eng_seq_sampling;

/* The output text (engine_output.c). */
typedef struct eng_seq_text {
    pdl_detok *detok;           /* incremental detokenizer, primed with the prompt */
    char *held;                 /* [held_len + 1] text held back while it may start a stop string */
    size_t held_len, held_cap;
    int32_t stop_state;         /* the stop matcher's state after all text so far */
    char *out;                  /* [out_cap] the text released with the current event */
    size_t out_cap;
} eng_seq_text;

/* Speculative decoding (spec_decode.c proposes, engine_step.c verifies). */
typedef struct eng_seq_spec {
    int32_t draft[PDL_MAX_SPEC_TOKENS]; /* [n_draft] tokens proposed for this step (never in `tokens`, never
                                           hashed) */
    int n_draft;
    int wait;                   /* steps to go before proposing again (after rejected drafts) */
    int backoff;                /* the next wait after a rejection: 1, 2, 4, ... 32 */
    int32_t *blocks;            /* [n_blocks] the draft model's block table */
    int n_blocks, cap_blocks;
    int computed;               /* tokens with K/V in the draft model's cache */
    float *mtp_hidden;          /* [hidden] the MTP block's output at mtp_pos (spec_mtp.h), or NULL */
    int mtp_pos;                /* -1: none kept */
} eng_seq_spec;

/* Logprobs due (engine_output.c). */
typedef struct eng_seq_logprobs {
    int prompt_next;            /* next prompt position (>= 1) whose logprobs are due */
} eng_seq_logprobs;

typedef struct eng_seq {
    /* what the sequence is: read by every stage */
    eng_request *req;
    int index;                  /* which of the request's n sequences */
    int32_t *tokens;            /* [n_tokens] prompt then output */
    int n_tokens, cap_tokens;
    int n_prompt;

    /* its life: admission order, state, what the step must do to it */
    uint64_t arrival;           /* admission order: FIFO and "newest" for preemption */
    eng_seq_state state;
    bool fork_pending;          /* index 0 of an n > 1 request: fork when the prompt is done */
    bool abort_requested;       /* finish ("abort") at the end of the step */

    eng_seq_cache cache;
    eng_seq_sampling sampling;
    eng_seq_text text;
    eng_seq_spec spec;
    eng_seq_logprobs logprobs;
    /* an embedding request (params.pooling): the pooled rows so far */
    double *pool_acc;           /* [hidden] the sum of the normed rows (MEAN) or the pooled row, or NULL */
    int pool_next;              /* MEAN: positions below it are in pool_acc (a recompute adds none twice) */
} eng_seq;

#endif
