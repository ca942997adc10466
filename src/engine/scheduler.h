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
 */
#ifndef PDL_ENGINE_SCHEDULER_H
#define PDL_ENGINE_SCHEDULER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/request.h"
#include "pagedlm.h"

typedef struct sched_config {
    int max_num_seqs;
    int max_num_batched_tokens;
    int max_prefill_chunk;      /* 0 = only the budget limits a chunk */
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
} sched;

int sched_init(sched *s, const sched_config *cfg, block_pool *pool, pdl_kv_cache *kv, pdl_error *err);
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

/* Frees a sequence's blocks (it keeps its tokens). */
void sched_release_blocks(sched *s, eng_seq *seq);

/* Makes room for positions [0, n_positions) in seq's block table; -1 when
 * the pool has too few free blocks (nothing is taken then). */
int sched_reserve(sched *s, eng_seq *seq, int n_positions);

/* After a step: offers the blocks of seq that are now full (its first
 * cache.n_computed tokens) to the prefix cache. */
void sched_cache_full_blocks(sched *s, eng_seq *seq);

/* n > 1: children[0 .. n) start where parent (its prompt just computed)
 * is: the full blocks shared, the partly filled last one copied. A child
 * that gets no block for the copy waits to recompute its prompt. Returns
 * how many children run now (they come first in children[]), or -1 (out of
 * memory). */
int sched_fork(sched *s, eng_seq *parent, eng_seq **children, int n, pdl_error *err);

#endif
