/*
 * spec_decode.h - speculative decoding: who proposes draft tokens, and when.
 *
 * Proposers: n-gram prompt lookup (vLLM's "ngram": the longest suffix of a
 * sequence, prompt_lookup_max .. prompt_lookup_min tokens, that occurred
 * earlier; its earliest occurrence; the tokens that followed it) and a
 * draft model (a second, smaller model with the same vocabulary, with its
 * own paged KV; it drafts greedily, k forwards per step batched over the
 * speculating sequences, and its cache follows the target's accepted
 * length), and the model's own multi-token-prediction block (vLLM's
 * "mtp", spec_mtp.h). The engine verifies the drafts in the normal packed batch: a
 * speculating sequence gets k + 1 rows, all of them logits rows.
 *
 * Verification (in engine_step.c): the drafts are one-hot proposals (n-gram, and
 * greedy drafts), for which vLLM's rejection sampler (accept draft d with
 * probability min(1, p_target(d) / p_draft(d)) = p_target(d), else draw from
 * the normalised residual, a bonus token when every draft passes) is the
 * same as drawing each position's token from the target distribution and
 * accepting the draft when they agree: P(d) = p_target(d) and, for x != d,
 * P(x) = p_target(x), the residual's mass. Drawing with the request's own
 * random stream, one draw per position as without speculation, makes the
 * output the same tokens as without speculation, greedy or sampled, for a
 * given seed.
 *
 * Hybrid models (a recurrent state per sequence, pdl_batch.state_slots):
 * rejected drafts' rows must need no undo of the state, so a sequence's
 * drafts are at most state_max_rows and none sits at a position p with
 * p % state_chunk == state_chunk - 1 (that row would close a chunk of the
 * state): a sequence whose next position closes a chunk proposes nothing
 * that step (spec_hybrid_cap). A hybrid draft model is refused.
 *
 * Policy (adaptive): no drafts when more than `max_batch` sequences are
 * decoding (verification rows then cost more than they save: llama.cpp's
 * lookup decoding loses from 4 concurrent slots); a sequence whose drafts
 * were all rejected waits 1, 2, 4, ... up to 32 steps before it proposes
 * again (a proposer that never hits costs a verification step in 32), and
 * the wait resets when a draft is accepted. And it measures: decode-only
 * steps are timed with and without drafts (moving averages, drafting
 * included), and when a speculative step's time over a plain one's exceeds
 * the tokens a speculating sequence gains per step, speculation pauses for
 * 64 steps and is tried again (a model so small that k + 1 rows cost k + 1
 * times one row, or drafts that do not pay for themselves).
 */
#ifndef PDL_ENGINE_SPEC_DECODE_H
#define PDL_ENGINE_SPEC_DECODE_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/batch_builder.h"
#include "engine/block_pool.h"
#include "engine/request.h"
#include "engine/spec_mtp.h"
#include "pagedlm.h"

/* The n-gram proposer on its own (pure; tested): the longest n in
 * [lookup_min, lookup_max] whose last-n-tokens pattern occurs earlier in
 * tokens[0 .. n_tokens), its earliest occurrence, and up to k tokens that
 * followed it. Returns how many were written to out. */
int spec_ngram_propose(const int32_t *tokens, int n_tokens, int lookup_min, int lookup_max, int k, int32_t *out);

/* The greedy draft of a row of logits: the first largest. */
int32_t spec_argmax(const float *x, int n);

/* Drafts at most, of k wanted, for a hybrid model's sequence whose first
 * draft sits at position `first` (its n_tokens): none at a position p with
 * p % chunk == chunk - 1, at most max_rows. chunk 0 (not hybrid): k. */
int spec_hybrid_cap(int first, int k, int chunk, int max_rows);

typedef struct spec_state {
    pdl_spec_method method;
    int k;                      /* drafts per step at most */
    int lookup_min, lookup_max; /* n-gram */
    int max_batch;              /* no drafts beyond this many decoding sequences */
    int state_chunk, state_max_rows; /* the target's (hybrid models; 0 otherwise): spec_hybrid_cap */
    /* draft model */
    const pdl_model *draft;
    pdl_context *draft_ctx;     /* the draft model's run state (owned) */
    pdl_kv_cache *kv;
    block_pool pool;
    batch_builder bb;           /* the draft model's batch: one segment per speculating sequence */
    float *logits;              /* [seqs][draft vocab] */
    int logits_cap;
    /* the model's MTP block (spec_mtp.h) */
    spec_mtp mtp;
    /* the cost model: moving averages over decode-only steps */
    double t_plain, t_spec;     /* seconds per step without / with drafts */
    double gain;                /* tokens per speculating sequence per step */
    int n_plain, n_spec;        /* samples in each (the first few are not trusted) */
    int pause;                  /* steps left without drafts */
    bool no_pause;              /* options.spec_no_pause */
    /* statistics (vLLM's spec_decode counters) */
    uint64_t drafts, draft_tokens, accepted;
    uint64_t accepted_per_pos[PDL_MAX_SPEC_TOKENS];
} spec_state;

/* From the engine options; method PDL_SPEC_NONE makes an inert state.
 * block_size and n_blocks size the draft model's KV like the target's. */
int spec_init(spec_state *s, const pdl_engine_options *o, const pdl_model *target, int block_size, int n_blocks,
              pdl_error *err);
void spec_free(spec_state *s);

/* Fills seq->spec.draft for the running sequences that should speculate this
 * step (decoding, not backing off, under the batch limit, room before
 * max_len[i]); clears it for the others. */
int spec_propose(spec_state *s, eng_seq **seqs, const int *max_len, int n, pdl_error *err);

/* After verification, before the accepted tokens are appended: `accepted`
 * of seq->spec.n_draft drafts were accepted. The draft model's cache goes back
 * to the accepted length; statistics and the back-off follow. */
void spec_verified(spec_state *s, eng_seq *seq, int accepted);

/* One engine step done: its time (drafting included), whether it only
 * decoded, whether any sequence had drafts, and how many tokens the
 * speculating sequences emitted (n_spec of them). */
void spec_step_done(spec_state *s, double seconds, bool decode_only, bool drafted, int spec_tokens, int n_spec);

/* MTP drafting (spec_mtp.h; nothing for other methods): the engine's
 * cache and scheduler, once made; a step's entry about to be updated
 * (its rows from batch row row0, position start); the step's updates
 * done, hidden the forward's final hidden states. */
void spec_attach(spec_state *s, pdl_kv_cache *kv, struct sched *sc);
int spec_note_rows(spec_state *s, eng_seq *seq, int row0, int start);
int spec_absorb(spec_state *s, const float *hidden, pdl_error *err);

/* The sequence left the running set (finished, aborted, preempted):
 * its draft-model blocks go back. */
void spec_release(spec_state *s, eng_seq *seq);

#endif
