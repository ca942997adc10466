/*
 * scheduler.h - deciding what runs in each step: which sequences, how many
 * new tokens each, under the token budget and the KV block pool.
 *
 * The scheduler owns the waiting queue and the running list, and takes
 * every sequence's blocks from the block pool (block_pool.h): at admission
 * it first takes the prompt's cached prefix blocks (prefix caching), after
 * each step it offers the blocks that filled to the cache, and it forks the
 * n samples of a prompt. Its decision for a step is one plain struct
 * (sched_output) that the runner turns into a packed batch. It never looks
 * at tensors, logits or text.
 *
 * Hybrid models (recurrent layers beside attention): a running sequence
 * also holds a state slot (state_pool.h), taken at admission (the sequence
 * waits while none is free), given back at finish, abort and preemption,
 * copied for forks. The prefix cache then works in vLLM's "align" mode: a
 * hit is usable only up to a block whose end has a snapshot of the state;
 * snapshots are taken at snapshot points (sched_snapshot_point), where
 * prefill chunks are cut so that a step ends exactly there.
 */
#ifndef PDL_ENGINE_SCHEDULER_H
#define PDL_ENGINE_SCHEDULER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/request.h"
#include "engine/state_pool.h"
#include "pagedlm.h"

/* Positions between a hybrid model's prefix snapshots by default: a
 * snapshot costs a state slot (tens of MB for a real model), and a hit
 * then recomputes less than this many positions past it. */
#define SCHED_SNAPSHOT_INTERVAL 512

typedef struct sched_config {
    int max_num_seqs;
    int max_num_batched_tokens;
    int max_prefill_chunk;      /* 0 = only the budget limits a chunk */
    /* hybrid models (0 otherwise): the state's chunk (pdl_model_info's
     * state_chunk) and the positions between interval snapshots (rounded up
     * to a multiple of lcm(state_chunk, block size); 0 =
     * SCHED_SNAPSHOT_INTERVAL) */
    int state_chunk;
    int snapshot_interval;
} sched_config;

/* One sequence's share of a step: tokens [start, start + n_new). */
typedef struct sched_entry {
    eng_seq *seq;
    int start;
    int n_new;
    bool verifies_drafts;       /* a decode with speculative drafts: its last token, then seq->spec.draft[0 ..
                                   n_new - 1) (n_new rows, every one a logits row) */
} sched_entry;

typedef struct sched_output {
    sched_entry *entries;       /* decodes first, then prefill chunks */
    int n_entries;
    int n_decode;               /* entries[0 .. n_decode) are decodes: one row, or with speculative drafts
                                   1 + seq->spec.n_draft rows */
    int n_tokens;               /* rows in the step */
    int n_preempted;            /* sequences preempted while scheduling this step */
} sched_output;

typedef struct sched {
    sched_config cfg;
    block_pool *pool;
    pdl_kv_cache *kv;           /* storage: a forked partial block is copied there */
    eng_seq **waiting;          /* FIFO; preempted sequences go to the front */
    int n_waiting, cap_waiting;
    eng_seq **running;          /* in admission order (oldest first) */
    int n_running, cap_running;
    sched_entry *entries;       /* storage behind sched_output */
    int cap_entries;
    uint64_t preemptions;
    int32_t *key_ids;           /* [block_size] scratch: a block's ids with image rows' extra keys */
    state_pool *states;         /* hybrid models' state slots (NULL or empty: none) */
    int snapshot_unit;          /* lcm(state_chunk, block size): where a snapshot may sit (0: none) */
} sched;

/* states: a hybrid model's state slots (NULL otherwise). */
int sched_init(sched *s, const sched_config *cfg, block_pool *pool, pdl_kv_cache *kv, state_pool *states,
               pdl_error *err);
void sched_free(sched *s);

/* Queues a new (or forked) sequence at the back of the waiting queue. */
int sched_add(sched *s, eng_seq *seq, pdl_error *err);

/* Builds this step's plan in *out (valid until the next call). Running
 * sequences are served first, oldest first; then waiting ones while the
 * budget, max_num_seqs and the pool allow. When blocks run out, the newest
 * running sequence is preempted: its blocks are freed and it waits at the
 * front of the queue to be recomputed. */
int sched_schedule(sched *s, sched_output *out, pdl_error *err);

/* Takes a sequence out of the scheduler (finished or aborted) and frees its
 * blocks. */
void sched_remove(sched *s, eng_seq *seq);

/* Frees a sequence's blocks and its state slot (it keeps its tokens). */
void sched_release_blocks(sched *s, eng_seq *seq);

/* Makes room for positions [0, n_positions) in seq's block table; -1 when
 * the pool has too few free blocks (nothing is taken then). */
int sched_reserve(sched *s, eng_seq *seq, int n_positions);

/* After a step: offers the blocks of seq that are now full (its first
 * cache.n_computed tokens) to the prefix cache. */
void sched_cache_full_blocks(sched *s, eng_seq *seq);

/* Whether a hybrid model's sequence q keeps a prefix snapshot of its state
 * once positions [0, pos) are computed: pos a multiple of the snapshot
 * unit that is a multiple of the snapshot interval, or the last such
 * multiple before the prompt's last token, or the prompt's end, or the
 * last such multiple inside the cached blocks its admission found (a
 * prefix it shares with an earlier prompt: the third prompt sharing it
 * starts there). */
bool sched_snapshot_point(const sched *s, const eng_seq *q, int pos);

/* After a step that computed q's positions [start, cache.n_computed) (its
 * full blocks already offered, sched_cache_full_blocks): a hybrid model's
 * snapshot of q's state when the step ended exactly at a snapshot point,
 * kept with the cached block that ends there. */
void sched_snapshot_after_step(sched *s, eng_seq *q, int start);

/* n > 1: children[0 .. n) start where parent (its prompt just computed)
 * is: the full blocks shared, the partly filled last one copied, a hybrid
 * model's state copied into a slot of the child's own. A child that gets
 * no block for the copy (or no state slot) waits to recompute its prompt. Returns
 * how many children run now (they come first in children[]), or -1 (out of
 * memory). */
int sched_fork(sched *s, eng_seq *parent, eng_seq **children, int n, pdl_error *err);

#endif
