/*
 * scheduler.c - continuous batching with chunked prefill, prefix caching and
 * preemption by recomputation (vLLM v1's policy, one step at a time).
 *
 * Each step: every running sequence gets its next tokens (1 for a decode,
 * the next chunk for a prompt still being prefilled), oldest first, then
 * waiting sequences are admitted in order while the token budget, the
 * sequence limit and the block pool allow. A sequence admitted with nothing
 * computed first takes the cached blocks of its prompt's prefix (walking the
 * block hashes from the start, stopping at the first miss, leaving at least
 * its last token to compute: that row gives the logits). A sequence whose
 * blocks cannot be found causes the newest running sequence to be preempted.
 *
 * A hybrid model's sequence holds a state slot from admission to its end or
 * preemption. Its prefix hit stops at the last cached block that carries a
 * snapshot of the recurrent state (the blocks after it are given back), and
 * the snapshot is copied into its slot: it starts there. Its prefill chunks
 * end at snapshot points, so that the state there exists to be copied.
 */
#include "engine/scheduler.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "model/kv_cache.h"
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

static int gcd(int a, int b) { return b ? gcd(b, a % b) : a; }

int sched_init(sched *s, const sched_config *cfg, block_pool *pool, pdl_kv_cache *kv, state_pool *states,
               pdl_error *err) {
    memset(s, 0, sizeof *s);
    s->cfg = *cfg;
    s->pool = pool;
    s->kv = kv;
    s->states = states && states->n_slots > 0 ? states : NULL;
    if (cfg->max_num_seqs <= 0 || cfg->max_num_batched_tokens <= 0)
        return err_fail(err, "scheduler: max_num_seqs (%d) and max_num_batched_tokens (%d) must be positive",
                        cfg->max_num_seqs, cfg->max_num_batched_tokens);
    if (s->states && cfg->state_chunk > 0) {
        int bs = pool->block_size;
        int unit = cfg->state_chunk / gcd(cfg->state_chunk, bs) * bs;
        int every = cfg->snapshot_interval > 0 ? cfg->snapshot_interval : SCHED_SNAPSHOT_INTERVAL;
        s->snapshot_unit = unit;
        s->cfg.snapshot_interval = (every + unit - 1) / unit * unit;
    }
    s->key_ids = malloc((size_t)pool->block_size * sizeof *s->key_ids);
    if (!s->key_ids) return err_fail(err, "scheduler: out of memory");
    return 0;
}

void sched_free(sched *s) {
    free(s->waiting);
    free(s->running);
    free(s->entries);
    free(s->key_ids);
    memset(s, 0, sizeof *s);
}

int sched_add(sched *s, eng_seq *seq, pdl_error *err) {
    if (grow_ptrs(&s->waiting, &s->cap_waiting, s->n_waiting + 1)) return err_fail(err, "scheduler: out of memory");
    seq->state = SEQ_WAITING;
    s->waiting[s->n_waiting++] = seq;
    return 0;
}

/* The running list stays sorted by arrival: the oldest is served first and
 * the newest (the last) is the one preempted. */
static int insert_running(sched *s, eng_seq *seq, pdl_error *err) {
    if (grow_ptrs(&s->running, &s->cap_running, s->n_running + 1)) return err_fail(err, "scheduler: out of memory");
    int at = s->n_running;
    while (at > 0 && s->running[at - 1]->arrival > seq->arrival) at--;
    memmove(s->running + at + 1, s->running + at, (size_t)(s->n_running - at) * sizeof *s->running);
    s->running[at] = seq;
    s->n_running++;
    seq->state = SEQ_RUNNING;
    return 0;
}


void sched_release_blocks(sched *s, eng_seq *seq) {
    if (s->states) spool_release(s->states, seq->cache.state_slot);
    seq->cache.state_slot = -1;
    bpool_release_all(s->pool, seq->cache.blocks, seq->cache.n_blocks);
    seq->cache.n_blocks = 0;
    seq->cache.n_computed = 0;
    seq->cache.n_registered = 0;
    seq->cache.canon_last = -1;
}

static int grow_blocks(eng_seq *seq, int n) { return bpool_table_grow(&seq->cache.blocks, &seq->cache.cap_blocks, n); }

int sched_reserve(sched *s, eng_seq *seq, int n_positions) {
    int bs = s->pool->block_size;
    int need = (n_positions + bs - 1) / bs - seq->cache.n_blocks;
    if (need <= 0) return 0;
    if (!bpool_can_alloc(s->pool, need) || grow_blocks(seq, seq->cache.n_blocks + need)) return -1;
    for (int i = 0; i < need; i++) seq->cache.blocks[seq->cache.n_blocks++] = bpool_alloc(s->pool);
    return 0;
}

/* ---- prefix caching ------------------------------------------------------ */

/* What the prefix cache keys q's block b by: its ids, or (a block holding
 * image rows) the ids with each image row's extra key (eng_request.hash_ids)
 * in s->key_ids, valid until the next call. */
static const int32_t *block_key(sched *s, const eng_seq *q, int b) {
    int bs = s->pool->block_size;
    const int32_t *ids = q->tokens + (size_t)b * (size_t)bs;
    if (!q->req->hash_ids || b * bs >= q->n_prompt) return ids;
    for (int i = 0; i < bs; i++) {
        int pos = b * bs + i;
        s->key_ids[i] = pos < q->n_prompt ? q->req->hash_ids[pos] : q->tokens[pos];
    }
    return s->key_ids;
}

/* The chain hash of seq's full block b (computed once per sequence). */
static int block_hash(sched *s, eng_seq *q, int b, bpool_hash *out) {
    if (b >= q->cache.cap_block_hashes) {
        int cap = q->cache.cap_block_hashes ? q->cache.cap_block_hashes : 8;
        while (cap <= b) cap *= 2;
        bpool_hash *h = realloc(q->cache.block_hashes, (size_t)cap * sizeof *h);
        if (!h) return -1;
        q->cache.block_hashes = h;
        q->cache.cap_block_hashes = cap;
    }
    while (q->cache.n_block_hashes <= b) {
        int k = q->cache.n_block_hashes;
        bpool_hash parent = k ? q->cache.block_hashes[k - 1] : q->req->root_hash;
        q->cache.block_hashes[k] = bpool_block_hash(s->pool, parent, block_key(s, q, k));
        q->cache.n_block_hashes++;
    }
    *out = q->cache.block_hashes[b];
    return 0;
}

/* Whether q's block b (its first cache miss) is the same block a running
 * sequence is computing: it would be a hit once that sequence's step is
 * done, so admitting q now computes it twice (two requests with one new
 * system prompt arriving together). Same hash, same index, not yet offered
 * to the cache by the runner. */
static bool prefix_in_flight(sched *s, eng_seq *q, int b) {
    int bs = s->pool->block_size;
    bpool_hash h;
    if (b >= (q->n_tokens - 1) / bs || block_hash(s, q, b, &h)) return false;
    for (int i = 0; i < s->n_running; i++) {
        eng_seq *o = s->running[i];
        if (o->req->salt_check != q->req->salt_check || o->cache.n_registered > b || (b + 1) * bs > o->n_tokens) continue;
        bpool_hash oh;
        if (block_hash(s, o, b, &oh) == 0 && oh.lo == h.lo && oh.hi == h.hi) return true;
    }
    return false;
}

/* Takes the cached blocks of q's known tokens from the start, up to the
 * first miss and never its last token; returns the tokens covered. A
 * hybrid model's hit ends at the last block with a state snapshot, whose
 * slot goes to *snapshot (-1 when none): it is copied into q's slot once q
 * is admitted (restore_snapshot), not for a sequence that waits. */
static int take_prefix(sched *s, eng_seq *q, int32_t *snapshot) {
    block_pool *p = s->pool;
    int bs = p->block_size;
    *snapshot = -1;
    if (!p->caching || q->req->no_prefix_cache || q->cache.n_blocks > 0) return 0;
    int max_blocks = (q->n_tokens - 1) / bs;
    if (grow_blocks(q, max_blocks)) return 0;
    int32_t parent = -1;
    for (int b = 0; b < max_blocks; b++) {
        bpool_hash h;
        if (block_hash(s, q, b, &h)) break;
        int32_t blk = bpool_take_cached(p, h, block_key(s, q, b), parent,
                                        b == 0 ? q->req->salt_check : 0);
        if (blk < 0) break;
        q->cache.blocks[q->cache.n_blocks++] = blk;
        parent = blk;
    }
    if (s->states) {
        /* align: the hit ends at the last block with a snapshot of the
         * state at its end, which the sequence's slot starts from */
        int keep = q->cache.n_blocks, unit = s->snapshot_unit;
        while (keep > 0 && s->pool->blocks[q->cache.blocks[keep - 1]].snapshot < 0) keep--;
        /* the shared prefix ran past the last snapshot: keep the state
         * where it ends (rounded down to a snapshot unit) once this
         * sequence gets there, so that the next prompt sharing it starts
         * there */
        int shared = unit ? q->cache.n_blocks * bs / unit * unit : 0;
        q->cache.snapshot_shared = shared > keep * bs ? shared : 0;
        bpool_release_all(p, q->cache.blocks + keep, q->cache.n_blocks - keep);
        q->cache.n_blocks = keep;
        parent = keep ? q->cache.blocks[keep - 1] : -1;
        if (keep) *snapshot = spool_snapshot_of(s->states, parent);
    }
    q->cache.n_computed = q->cache.n_blocks * bs;
    q->cache.n_registered = q->cache.n_blocks;
    q->cache.canon_last = parent;
    return q->cache.n_computed;
}

void sched_cache_full_blocks(sched *s, eng_seq *q) {
    block_pool *p = s->pool;
    int bs = p->block_size;
    if (!p->caching) return;
    while ((q->cache.n_registered + 1) * bs <= q->cache.n_computed && q->cache.n_registered < q->cache.n_blocks) {
        int b = q->cache.n_registered;
        bpool_hash h;
        if (block_hash(s, q, b, &h)) return;
        int32_t canon = bpool_cache(p, q->cache.blocks[b], h, block_key(s, q, b), q->cache.canon_last,
                                    b == 0 ? q->req->salt_check : 0);
        q->cache.canon_last = canon >= 0 ? canon : q->cache.blocks[b];
        q->cache.n_registered++;
    }
}

/* ---- snapshots of the recurrent state (hybrid models) ------------------------ */

bool sched_snapshot_point(const sched *s, const eng_seq *q, int pos) {
    int unit = s->snapshot_unit;
    if (!unit || !s->pool->caching || q->req->no_prefix_cache || pos <= 0 || pos % unit) return false;
    int last_before = (q->n_prompt - 1) / unit * unit; /* a hit always leaves the last prompt token to compute */
    return pos % s->cfg.snapshot_interval == 0 || pos == last_before || pos == q->n_prompt ||
           pos == q->cache.snapshot_shared;
}

/* The first snapshot point of q in (from, to), or `to` when none. */
static int next_snapshot_point(const sched *s, const eng_seq *q, int from, int to) {
    int unit = s->snapshot_unit;
    if (!unit) return to;
    for (int pos = (from / unit + 1) * unit; pos < to; pos += unit)
        if (sched_snapshot_point(s, q, pos)) return pos;
    return to;
}

void sched_snapshot_after_step(sched *s, eng_seq *q, int start) {
    int pos = q->cache.n_computed, bs = s->pool->block_size;
    if (!s->states || pos <= start || !sched_snapshot_point(s, q, pos)) return;
    /* the cached block standing for the one that ends at pos (the one a
     * later prompt's walk finds) */
    if (q->cache.n_registered != pos / bs || q->cache.canon_last < 0) return;
    int32_t slot = spool_alloc_snapshot(s->states, q->cache.canon_last);
    if (slot >= 0) pdl_kv_cache_copy_state(s->kv, q->cache.state_slot, slot, pos);
}

/* ---- forks ----------------------------------------------------------------- */

int sched_fork(sched *s, eng_seq *parent, eng_seq **children, int n, pdl_error *err) {
    int bs = s->pool->block_size;
    int full = parent->cache.n_computed / bs, partial = parent->cache.n_computed % bs;
    int running = 0;
    for (int i = 0; i < n; i++) {
        eng_seq *c = children[i];
        bool ok = grow_blocks(c, parent->cache.n_blocks + 1) == 0;
        if (ok && s->states) {
            /* its own state slot, starting from the parent's state */
            c->cache.state_slot = spool_alloc_live(s->states);
            ok = c->cache.state_slot >= 0;
            if (ok) pdl_kv_cache_copy_state(s->kv, parent->cache.state_slot, c->cache.state_slot,
                                            parent->cache.n_computed);
        }
        for (int b = 0; ok && b < full; b++) {
            bpool_ref(s->pool, parent->cache.blocks[b]);
            c->cache.blocks[c->cache.n_blocks++] = parent->cache.blocks[b];
        }
        if (ok && partial) {
            int32_t nb = bpool_alloc(s->pool);
            if (nb >= 0) {
                pdl_kv_cache_copy_block(s->kv, parent->cache.blocks[full], nb, partial);
                c->cache.blocks[c->cache.n_blocks++] = nb;
            } else {
                ok = false;
            }
        }
        if (ok) {
            c->cache.n_computed = parent->cache.n_computed;
            c->cache.n_registered = parent->cache.n_registered < full ? parent->cache.n_registered : full;
            c->cache.canon_last = c->cache.n_registered == parent->cache.n_registered ? parent->cache.canon_last : -1;
            if (c->cache.n_registered && c->cache.canon_last < 0) c->cache.canon_last = c->cache.blocks[c->cache.n_registered - 1];
            if (insert_running(s, c, err)) return -1;
            /* the running ones first: they sample their first token now */
            children[i] = children[running];
            children[running++] = c;
        } else {
            /* no block to copy into: it recomputes its prompt later */
            sched_release_blocks(s, c);
            if (sched_add(s, c, err)) return -1;
        }
    }
    return running;
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
    victim->spec.n_draft = 0;
    if (grow_ptrs(&s->waiting, &s->cap_waiting, s->n_waiting + 1)) {
        err_fail(err, "scheduler: out of memory");
        return NULL;
    }
    memmove(s->waiting + 1, s->waiting, (size_t)s->n_waiting * sizeof *s->waiting);
    s->waiting[0] = victim;
    s->n_waiting++;
    victim->state = SEQ_WAITING;
    s->preemptions++;
    return victim;
}

/* Whether q is decoding: prompt done, its last token to compute. */
static bool decoding(const eng_seq *q) { return q->cache.n_computed >= q->n_prompt && q->cache.n_computed + 1 == q->n_tokens; }

/* New tokens a sequence wants this step, before the budget: a decode with
 * speculative drafts wants its last token and the drafts. */
static int wanted(const sched *s, const eng_seq *q) {
    if (decoding(q)) return 1 + q->spec.n_draft;
    int n = q->n_tokens - q->cache.n_computed;
    bool prefill = n > 1 || q->cache.n_computed < q->n_prompt;
    if (prefill && s->cfg.max_prefill_chunk > 0 && n > s->cfg.max_prefill_chunk) n = s->cfg.max_prefill_chunk;
    return n;
}

/* n new tokens from q's n_computed, cut so that a hybrid model's chunk
 * ends at the first snapshot point inside it (the state there is then
 * kept: sched_snapshot_after_step). */
static int to_snapshot_point(const sched *s, const eng_seq *q, int n) {
    int start = q->cache.n_computed;
    return next_snapshot_point(s, q, start, start + n) - start;
}

/* n new tokens from q's n_computed, cut so that no two-way span (Gemma 3's
 * image rows, which attend to each other both ways) is split across steps:
 * a chunk ending inside a span ends before it instead, or, starting in it
 * (or at its first row), runs to its end when the budget allows (past
 * max_prefill_chunk: the span is one unit) and waits (0) otherwise. A
 * chunk may start inside a span when the prefix cache gave its first rows:
 * their K/V were computed with the whole span, and the rest sees them. */
static int whole_spans(const eng_seq *q, int n, int budget) {
    const eng_request *r = q->req;
    int start = q->cache.n_computed, end = start + n;
    if (!r->span_first || n <= 0 || end >= q->n_prompt || r->span_first[end] == end) return n;
    int first = r->span_first[end], last = r->span_last[end];
    if (first > start) return first - start;
    return last + 1 - start <= budget ? last + 1 - start : 0;
}

/* Room for an entry per sequence the scheduler holds (entries are filled in
 * place as the step is planned). */
static int reserve_entries(sched *s, pdl_error *err) {
    if (s->cap_entries < s->n_running + s->n_waiting + 1) {
        int cap = (s->n_running + s->n_waiting + 1) * 2;
        sched_entry *e = realloc(s->entries, (size_t)cap * sizeof *e);
        if (!e) return err_fail(err, "scheduler: out of memory");
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
    if (reserve_entries(s, err)) return -1;

    /* 1. running sequences, oldest first */
    for (int i = 0; i < s->n_running && budget > 0; i++) {
        eng_seq *q = s->running[i];
        int n = wanted(s, q);
        if (n > budget) n = budget;
        n = whole_spans(q, n, budget);
        if (n <= 0) continue;
        if (!decoding(q)) n = to_snapshot_point(s, q, n);
        if (q->spec.n_draft > 0) {
            /* drafts are the first thing to give up: for the budget, then for blocks */
            if (n < 1 + q->spec.n_draft) q->spec.n_draft = n - 1;
            if (q->spec.n_draft > 0 && sched_reserve(s, q, q->cache.n_computed + n) != 0) q->spec.n_draft = 0, n = 1;
        }
        bool preempted_self = false;
        while (sched_reserve(s, q, q->cache.n_computed + n) != 0) {
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
        s->entries[n_entries++] = (sched_entry){.seq = q, .start = q->cache.n_computed, .n_new = n};
        budget -= n;
    }

    /* 2. waiting sequences, in order, while everything allows */
    while (s->n_waiting > 0 && budget > 0 && s->n_running < s->cfg.max_num_seqs) {
        eng_seq *q = s->waiting[0];
        if (s->states && (q->cache.state_slot = spool_alloc_live(s->states)) < 0)
            break; /* every state slot is live: it waits for one */
        int32_t snapshot;
        int cached = take_prefix(s, q, &snapshot);
        if (s->pool->caching && !q->req->no_prefix_cache && prefix_in_flight(s, q, q->cache.n_blocks)) {
            /* wait a step: the prefix it misses is being computed right now */
            sched_release_blocks(s, q);
            break;
        }
        int n = wanted(s, q);
        if (n > budget) n = budget;
        n = whole_spans(q, n, budget);
        if (n > 0 && !decoding(q)) n = to_snapshot_point(s, q, n);
        if (n <= 0) {
            sched_release_blocks(s, q); /* its span waits for a step with room */
            break;
        }
        if (sched_reserve(s, q, q->cache.n_computed + n) != 0) {
            sched_release_blocks(s, q); /* the cached blocks too: it waits for room */
            break;
        }
        if (s->pool->caching && !q->req->no_prefix_cache) {
            s->pool->queries += (uint64_t)q->n_tokens;
            s->pool->hits += (uint64_t)cached;
        }
        if (snapshot >= 0) {
            /* the sequence starts from the snapshot's state */
            pdl_kv_cache_copy_state(s->kv, snapshot, q->cache.state_slot, cached);
            s->states->snapshots_restored++;
        }
        if (q->cache.n_cached_prompt < 0) q->cache.n_cached_prompt = cached < q->n_prompt ? cached : q->n_prompt;
        remove_at(s->waiting, &s->n_waiting, 0);
        if (insert_running(s, q, err) || reserve_entries(s, err)) return -1;
        s->entries[n_entries++] = (sched_entry){.seq = q, .start = q->cache.n_computed, .n_new = n};
        budget -= n;
    }

    /* decodes (with their drafts) first, then prefill chunks, each group in
     * scheduling order */
    int n_decode = 0;
    for (int k = 0; k < n_entries; k++) {
        const eng_seq *q = s->entries[k].seq;
        if (decoding(q)) {
            s->entries[k].verifies_drafts = s->entries[k].n_new > 1; /* rows past the last token are drafts */
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
