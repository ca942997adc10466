/*
 * scheduler.c - continuous batching with chunked prefill and preemption by
 * recomputation (vLLM v1's policy, one step at a time).
 *
 * Each step: every running sequence gets its next tokens (1 for a decode,
 * the next chunk for a prompt still being prefilled), oldest first, then
 * waiting sequences are admitted in order while the token budget, the
 * sequence limit and the block pool allow. A sequence whose blocks cannot
 * be found causes the newest running sequence to be preempted.
 */
#include "engine/scheduler.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "engine/kv_cache.h"
#include "util/error.h"

static int grow_ptrs(eng_seq ***arr, int *cap, int need) {
    if (need <= *cap) return 0;
    int cap2 = *cap ? *cap * 2 : 16;
    while (cap2 < need) cap2 *= 2;
    eng_seq **p = realloc(*arr, (size_t)cap2 * sizeof *p);
    if (!p) return -1;
    *arr = p;
    *cap = cap2;
    return 0;
}

int sched_init(sched *s, const sched_config *cfg, pdl_kv_cache *kv, pdl_error *err) {
    memset(s, 0, sizeof *s);
    s->cfg = *cfg;
    s->kv = kv;
    if (cfg->max_num_seqs <= 0 || cfg->max_num_batched_tokens <= 0)
        return pdl_fail(err, "scheduler: max_num_seqs (%d) and max_num_batched_tokens (%d) must be positive",
                        cfg->max_num_seqs, cfg->max_num_batched_tokens);
    return 0;
}

void sched_free(sched *s) {
    free(s->waiting);
    free(s->running);
    free(s->entries);
    memset(s, 0, sizeof *s);
}

int sched_add(sched *s, eng_seq *seq, pdl_error *err) {
    if (grow_ptrs(&s->waiting, &s->cap_waiting, s->n_waiting + 1)) return pdl_fail(err, "scheduler: out of memory");
    seq->state = SEQ_WAITING;
    s->waiting[s->n_waiting++] = seq;
    return 0;
}

/* The running list stays sorted by arrival: the oldest is served first and
 * the newest (the last) is the one preempted. */
static int insert_running(sched *s, eng_seq *seq, pdl_error *err) {
    if (grow_ptrs(&s->running, &s->cap_running, s->n_running + 1)) return pdl_fail(err, "scheduler: out of memory");
    int at = s->n_running;
    while (at > 0 && s->running[at - 1]->arrival > seq->arrival) at--;
    memmove(s->running + at + 1, s->running + at, (size_t)(s->n_running - at) * sizeof *s->running);
    s->running[at] = seq;
    s->n_running++;
    seq->state = SEQ_RUNNING;
    return 0;
}

int sched_add_running(sched *s, eng_seq *seq, pdl_error *err) { return insert_running(s, seq, err); }

void sched_release_blocks(sched *s, eng_seq *seq) {
    for (int i = 0; i < seq->n_blocks; i++) pdl_kv_cache_release_block(s->kv, seq->blocks[i]);
    seq->n_blocks = 0;
    seq->n_computed = 0;
}

int sched_reserve(sched *s, eng_seq *seq, int n_positions) {
    int bs = s->kv->block_size;
    int need = (n_positions + bs - 1) / bs - seq->n_blocks;
    if (need <= 0) return 0;
    if (need > s->kv->n_free) return -1;
    if (seq->n_blocks + need > seq->cap_blocks) {
        int cap = seq->cap_blocks ? seq->cap_blocks : 8;
        while (cap < seq->n_blocks + need) cap *= 2;
        int32_t *b = realloc(seq->blocks, (size_t)cap * sizeof *b);
        if (!b) return -1;
        seq->blocks = b;
        seq->cap_blocks = cap;
    }
    for (int i = 0; i < need; i++) seq->blocks[seq->n_blocks++] = pdl_kv_cache_alloc_block(s->kv);
    return 0;
}

static void remove_at(eng_seq **arr, int *n, int i) {
    memmove(arr + i, arr + i + 1, (size_t)(*n - i - 1) * sizeof *arr);
    (*n)--;
}

void sched_remove(sched *s, eng_seq *seq) {
    for (int i = 0; i < s->n_running; i++)
        if (s->running[i] == seq) {
            remove_at(s->running, &s->n_running, i);
            break;
        }
    for (int i = 0; i < s->n_waiting; i++)
        if (s->waiting[i] == seq) {
            remove_at(s->waiting, &s->n_waiting, i);
            break;
        }
    sched_release_blocks(s, seq);
}

/* Moves the newest running sequence (the last) back to the front of the
 * queue and returns it. */
static eng_seq *preempt_newest(sched *s, pdl_error *err) {
    eng_seq *victim = s->running[s->n_running - 1];
    s->n_running--;
    sched_release_blocks(s, victim);
    if (grow_ptrs(&s->waiting, &s->cap_waiting, s->n_waiting + 1)) {
        pdl_fail(err, "scheduler: out of memory");
        return NULL;
    }
    memmove(s->waiting + 1, s->waiting, (size_t)s->n_waiting * sizeof *s->waiting);
    s->waiting[0] = victim;
    s->n_waiting++;
    victim->state = SEQ_WAITING;
    s->preemptions++;
    return victim;
}

/* New tokens a sequence wants this step, before the budget. */
static int wanted(const sched *s, const eng_seq *q) {
    int n = q->n_tokens - q->n_computed;
    bool prefill = n > 1 || q->n_computed < q->n_prompt;
    if (prefill && s->cfg.max_prefill_chunk > 0 && n > s->cfg.max_prefill_chunk) n = s->cfg.max_prefill_chunk;
    return n;
}

static int push_entry(sched *s, eng_seq *q, int n_new, pdl_error *err) {
    if (s->cap_entries < s->n_running + s->n_waiting + 1) {
        int cap = (s->n_running + s->n_waiting + 1) * 2;
        sched_entry *e = realloc(s->entries, (size_t)cap * sizeof *e);
        if (!e) return pdl_fail(err, "scheduler: out of memory");
        s->entries = e;
        s->cap_entries = cap;
    }
    return 0;
}

int sched_schedule(sched *s, sched_output *out, pdl_error *err) {
    memset(out, 0, sizeof *out);
    int budget = s->cfg.max_num_batched_tokens;
    int n_entries = 0;
    uint64_t preempted_before = s->preemptions;
    if (push_entry(s, NULL, 0, err)) return -1;

    /* 1. running sequences, oldest first */
    for (int i = 0; i < s->n_running && budget > 0; i++) {
        eng_seq *q = s->running[i];
        int n = wanted(s, q);
        if (n > budget) n = budget;
        if (n <= 0) continue;
        bool preempted_self = false;
        while (sched_reserve(s, q, q->n_computed + n) != 0) {
            /* out of blocks: preempt the newest running sequence (the last,
             * at or after i); drop what was planned for it this step */
            eng_seq *victim = preempt_newest(s, err);
            if (!victim) return -1;
            for (int k = 0; k < n_entries; k++)
                if (s->entries[k].seq == victim) {
                    budget += s->entries[k].n_new;
                    memmove(s->entries + k, s->entries + k + 1, (size_t)(n_entries - k - 1) * sizeof *s->entries);
                    n_entries--;
                    break;
                }
            if (victim == q) {
                preempted_self = true;
                break;
            }
        }
        if (preempted_self) break; /* q was the newest: nothing runs after it */
        s->entries[n_entries++] = (sched_entry){q, q->n_computed, n};
        budget -= n;
    }

    /* 2. waiting sequences, in order, while everything allows */
    while (s->n_waiting > 0 && budget > 0 && s->n_running < s->cfg.max_num_seqs) {
        eng_seq *q = s->waiting[0];
        int n = wanted(s, q);
        if (n > budget) n = budget;
        if (sched_reserve(s, q, q->n_computed + n) != 0) break; /* wait for blocks */
        remove_at(s->waiting, &s->n_waiting, 0);
        if (insert_running(s, q, err) || push_entry(s, q, n, err)) return -1;
        s->entries[n_entries++] = (sched_entry){q, q->n_computed, n};
        budget -= n;
    }

    /* decodes first, then prefill chunks, each group in scheduling order */
    int n_decode = 0;
    for (int k = 0; k < n_entries; k++) {
        const eng_seq *q = s->entries[k].seq;
        bool decode = s->entries[k].n_new == 1 && q->n_computed >= q->n_prompt && q->n_computed + 1 == q->n_tokens;
        if (decode) {
            sched_entry e = s->entries[k];
            memmove(s->entries + n_decode + 1, s->entries + n_decode, (size_t)(k - n_decode) * sizeof *s->entries);
            s->entries[n_decode++] = e;
        }
    }
    out->entries = s->entries;
    out->n_entries = n_entries;
    out->n_decode = n_decode;
    for (int k = 0; k < n_entries; k++) out->n_tokens += s->entries[k].n_new;
    out->n_preempted = (int)(s->preemptions - preempted_before);
    return 0;
}
