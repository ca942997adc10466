/*
 * engine_internal.h - what the engine's stage files share: the engine
 * struct and the functions one stage calls in another.
 *
 * The engine is split as vLLM v1 splits it: input processing
 * (engine_input.c: a request's validation, its owned copies, its images and
 * the encoder cache), the core (engine.c: create / free, the records'
 * lifecycle, stats), the step (engine_step.c: plan -> execute -> update:
 * schedule, pack and run through the runner, sample, verify drafts, fork,
 * finish; aborts) and output processing (engine_output.c: detokenizing, stop
 * strings held back, events). Not for anything outside src/engine (the
 * public interface is include/pagedlm.h; tests reach in through
 * engine_hooks.h).
 */
#ifndef PDL_ENGINE_INTERNAL_H
#define PDL_ENGINE_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/block_pool.h"
#include "engine/request.h"
#include "engine/runner.h"
#include "engine/scheduler.h"
#include "engine/spec_decode.h"
#include "engine/state_pool.h"
#include "engine/structured.h"
#include "model/kv_cache.h"
#include "pagedlm.h"
#include "util/error.h"
#include "vision/encoder_cache.h"

/* sequences one request may ask for (n): a fork's children are gathered in
 * a stack array of this size (engine_step.c) */
#define ENG_MAX_N 64

/* top logprobs a request may ask for (OpenAI's limit); e->top holds them */
#define MAX_TOP_LOGPROBS 20

struct pdl_engine {
    const pdl_model *model;
    pdl_engine_options opts;
    pdl_kv_cache *kv;          /* K/V storage */
    block_pool pool;           /* who holds which block; the prefix cache */
    state_pool states;         /* hybrid models: who holds which recurrent state slot; prefix snapshots */
    enc_cache encoder_cache;   /* images' encoded rows across requests, by image hash */
    spec_state spec;           /* speculative decoding's proposers */
    so_rows masked;            /* structured output: masked copies of the rows constrained sequences sample */
    int *max_lens;             /* [cap_max_lens] scratch: each sequence's max_len, for the proposers */
    int cap_max_lens;
    float *pool_row;           /* [hidden] scratch: a row through the final norm, then an embedding (made on
                                  first use) */
    sched sched;
    runner runner;
    bool selective;
    int max_model_len;         /* longest prompt + output (options.max_model_len as settled) */
    uint64_t next_request_id, next_arrival;
    eng_seq **seqs;            /* every live sequence */
    int n_seqs, cap_seqs;
    bool in_step;
    uint64_t steps, prompt_tokens, generation_tokens; /* prompt_tokens: when a prefill completes (engine_step.c) */
    uint64_t images_encoded;   /* tower runs (pdl_engine_stats) */
    pdl_logprob top[MAX_TOP_LOGPROBS];
};

/* How a sequence ended by a stop condition: the stop string's index or the
 * stop token (-1 each when neither, e.g. EOS). */
typedef struct eng_stop_cause {
    int string;
    int32_t token;
} eng_stop_cause;

/* ---- the core (engine.c) ---- */

/* A line to options.log (nothing when there is none). */
void eng_log(const pdl_engine *e, const char *fmt, ...) PDL_PRINTF(2, 3);

/* Sequence index of request r (n > 1: 0 .. n-1) over a copy of tokens
 * [0, n_tokens), the first n_prompt of them the prompt: sampler, matcher,
 * detokenizer primed with the tokens. NULL when out of memory. */
eng_seq *eng_seq_new(pdl_engine *e, eng_request *r, int index, const int32_t *tokens, int n_tokens, int n_prompt);
void eng_seq_free(eng_seq *q);
void eng_request_free(eng_request *r);

/* The live set (e->seqs). */
int eng_track(pdl_engine *e, eng_seq *q, pdl_error *err);
void eng_untrack(pdl_engine *e, eng_seq *q);

/* Longest sequence (prompt + output) q's request may reach. */
int eng_max_len(const pdl_engine *e, const eng_seq *q);

/* ---- the step (engine_step.c) ---- */

/* q ends: its FINISHED event (eng_out_finished), then it leaves the
 * scheduler, the proposers and the live set, and is freed (its request
 * with the last of its sequences). */
void eng_finish(pdl_engine *e, eng_seq *q, const char *reason, eng_stop_cause cause);

/* Finishes ("abort") every sequence whose abort was asked for; inside a
 * step that waits for the step's end. */
void eng_process_aborts(pdl_engine *e);

/* ---- output processing (engine_output.c) ---- */

/* Token tok, just appended to q (drawn from row), as a TOKEN event: its
 * logprobs, its text with stop strings held back. *cause gets the stop
 * token or stop string it completes (-1 each when none); returns whether
 * it is a stop token (EOS or one of the request's). */
bool eng_out_token(pdl_engine *e, eng_seq *q, const float *row, int32_t tok, eng_stop_cause *cause);

/* The FINISHED event of q: the rest of the text (flushed, unless aborted),
 * the stop string or token, the cached prompt tokens. */
void eng_out_finished(pdl_engine *e, eng_seq *q, const char *reason, eng_stop_cause cause);

/* The EMBEDDING event of an embedding request: vec, n floats. */
void eng_out_embedding(eng_seq *q, const float *vec, int n);

/* The PROMPT_LOGPROB event of the prompt token that row row_pos predicts,
 * when it is due. */
void eng_out_prompt_logprobs(pdl_engine *e, eng_seq *q, int row_pos, const float *row);

/* Generated tokens of q so far. */
static inline int n_generated(const eng_seq *q) { return q->n_tokens - q->n_prompt; }

#endif
