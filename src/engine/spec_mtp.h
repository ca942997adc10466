/*
 * spec_mtp.h - the model's own multi-token-prediction block as the
 * speculative drafter (vLLM's --speculative-config '{"method": "mtp"}').
 *
 * Qwen3.5 (and DeepSeek-V3-style) files carry an MTP block after the main
 * stack: from the main model's hidden state at position p and the token
 * at p + 1 it predicts the token at p + 2 (model_forward_mtp). Its one
 * attention layer keeps K/V in the engine's own cache, as one more layer
 * of the same blocks (kv_cache_create with_mtp): the block tables, the
 * prefix cache, forks' block copies and preemption cover it unchanged.
 *
 * Absorbing: after every forward, each sequence's rows that the step kept
 * (its prefill chunk, or its verified decode rows up to the last accepted
 * one) go through the MTP block with the main model's hidden states of
 * those rows (model_forward_hidden), so that its K/V follows the main
 * model's; the block's output at the last kept row is kept with the
 * sequence (spec.mtp_hidden, at spec.mtp_pos). That costs one layer per
 * computed token, about what vLLM's MTP drafter costs.
 *
 * Proposing: a decoding sequence with N tokens (N - 1 computed) whose
 * kept output is at N - 2 drafts t[N] from it through the LM head, then
 * each further draft by one more MTP row (at position N - 2 + j, the
 * previous draft as its token, the block's own previous output as its
 * hidden state), one forward for all proposing sequences per draft. Those
 * rows write K/V at positions >= N - 1, which the next absorb writes again
 * before anything reads them; their blocks are reserved here (the
 * verification needs them anyway).
 *
 * What it does not keep exact (draft quality only; verification keeps the
 * output exact): a prefix-cache hit brings the MTP K/V of the cached
 * blocks, computed by the sequence that cached them, whose row at the
 * block's last position saw that sequence's next token; a fork's children
 * start from the parent's K/V and propose after their first decode step.
 */
#ifndef PDL_ENGINE_SPEC_MTP_H
#define PDL_ENGINE_SPEC_MTP_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/batch_builder.h"
#include "engine/request.h"
#include "pagedlm.h"

struct sched;

typedef struct mtp_pending {
    eng_seq *seq;
    int row0;  /* its first row in the step's batch */
    int start; /* the position of that row */
} mtp_pending;

typedef struct spec_mtp {
    const pdl_model *model;
    pdl_context *ctx;          /* the drafter's run state over the target model (owned) */
    pdl_kv_cache *kv;          /* the engine's cache, with the MTP layer */
    struct sched *sched;       /* reserves the draft rows' blocks */
    batch_builder bb;
    float *hidden_in;          /* [rows][hidden] the MTP rows' hidden states */
    size_t hidden_rows;
    float *hidden_out, *logits; /* [seqs][hidden], [seqs][vocab] */
    int out_rows;
    mtp_pending *pending;      /* this step's kept rows, by sequence */
    int n_pending, cap_pending;
    /* per sequence of a forward (seq_cap of each): its sequence, its last
     * row's position (the logits row), its drafts wanted */
    eng_seq **seqs;
    int32_t *pos;
    int *want;
    int seq_cap;
} spec_mtp;

/* Needs target->cfg.mtp_loaded (an error naming the file's lack otherwise). */
int mtp_init(spec_mtp *t, const pdl_model *target, int block_size, pdl_error *err);
/* The engine's cache (made with the MTP layer) and scheduler. */
void mtp_attach(spec_mtp *t, pdl_kv_cache *kv, struct sched *s);
void mtp_free(spec_mtp *t);

/* Before a step's update: seq's rows start at batch row row0, position start. */
int mtp_note_rows(spec_mtp *t, eng_seq *seq, int row0, int start);
/* seq leaves (finished or aborted during the update): nothing to absorb. */
void mtp_forget(spec_mtp *t, eng_seq *seq);
/* After the update: the noted sequences' kept rows through the MTP block;
 * hidden is the step's model_forward_hidden. */
int mtp_absorb(spec_mtp *t, const float *hidden, pdl_error *err);

/* Drafts for the n sequences, want[i] each (>= 1): seq->spec.draft and
 * n_draft (0 for a sequence whose kept output is not at n_tokens - 2). */
int mtp_propose(spec_mtp *t, eng_seq **seqs, const int *want, int n, pdl_error *err);

#endif
