/*
 * engine.c - the engine's core: creating it (the KV pool and a hybrid
 * model's state slots sized from one budget, the scheduler, proposers and
 * runner set up), freeing it, the records of
 * requests and sequences, and statistics. The stages build on it and it
 * calls none of them.
 *
 * What it is not for: a request's validation and images (engine_input.c),
 * the step, finishing and aborts (engine_step.c), text and events
 * (engine_output.c), test hooks (engine_hooks.c). What they share is
 * engine_internal.h.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "util/huge_alloc.h"

void eng_log(const pdl_engine *e, const char *fmt, ...) {
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (e->opts.log) e->opts.log(line, e->opts.log_user);
}

/* ---- KV pool sizing ------------------------------------------------------ */

/* A hybrid model's state slots out of the budget mem (vLLM's hybrid
 * manager sizes the recurrent state and the attention blocks from one
 * budget too): one live slot per running sequence, max_num_seqs of them
 * but at most what half the budget holds (max_num_seqs is lowered to that,
 * with a log line), then the snapshot slots of prefix caching (the
 * option's count, or what a quarter of the budget holds, at most two per
 * live slot); the blocks get the rest. Returns the bytes left for blocks. */
static int state_slots(pdl_engine *e, size_t mem, size_t *left, pdl_error *err) {
    pdl_model_info info;
    pdl_model_get_info(e->model, &info);
    *left = mem;
    if (info.n_recurrent_layers == 0) return 0;
    size_t one = info.state_bytes;
    size_t live = mem / 2 / one;
    if (live < 1)
        return err_fail(err, "KV cache memory of %zu bytes holds no recurrent state slot of %zu bytes beside its "
                        "blocks (a hybrid model's running sequence needs one; raise --kv-cache-memory)", mem, one);
    if (live > (size_t)e->opts.max_num_seqs) live = (size_t)e->opts.max_num_seqs;
    if (live < (size_t)e->opts.max_num_seqs) {
        eng_log(e, "the KV cache memory holds %zu recurrent state slots of %zu bytes in its half for them: "
                   "max_num_seqs lowered from %d to %zu (raise --kv-cache-memory)", live, one, e->opts.max_num_seqs,
                live);
        e->opts.max_num_seqs = (int)live;
    }
    size_t snap = 0;
    if (!e->opts.no_prefix_caching && e->opts.state_snapshot_slots >= 0) {
        snap = e->opts.state_snapshot_slots > 0 ? (size_t)e->opts.state_snapshot_slots : mem / 4 / one;
        if (e->opts.state_snapshot_slots == 0 && snap > 2 * live) snap = 2 * live;
    }
    if ((live + snap) * one >= mem)
        return err_fail(err, "KV cache memory of %zu bytes holds no block beside %zu recurrent state slots of %zu "
                        "bytes (%zu live, %zu snapshots)", mem, live + snap, one, live, snap);
    if (live + snap > INT32_MAX) return err_fail(err, "%zu recurrent state slots are too many", live + snap);
    *left = mem - (live + snap) * one;
    return (int)(live + snap);
}

/* The cache keeps K/V of the model's MTP block too (spec_mtp.h). */
static bool with_mtp(const pdl_engine *e) { return e->opts.spec_method == PDL_SPEC_MTP && e->model->cfg.mtp_loaded; }

static int pool_blocks(pdl_engine *e, size_t *mem_out, int *n_slots, pdl_error *err) {
    size_t block_bytes = kv_cache_block_bytes(e->model, e->opts.kv_dtype, e->opts.block_size, with_mtp(e));
    size_t mem = e->opts.kv_cache_memory;
    if (mem == 0) {
        size_t avail = huge_available_memory() / 2, cap = (size_t)4 << 30;
        mem = avail && avail < cap ? avail : cap;
    }
    *mem_out = mem;
    size_t left;
    if ((*n_slots = state_slots(e, mem, &left, err)) < 0) return -1;
    size_t blocks = left / block_bytes;
    /* more than every sequence at full length could use is wasted */
    size_t per_seq = (size_t)(e->max_model_len + e->opts.block_size - 1) / (size_t)e->opts.block_size;
    size_t useful = per_seq * (size_t)e->opts.max_num_seqs;
    if (blocks > useful) blocks = useful;
    if (blocks > INT32_MAX / (size_t)e->opts.block_size) blocks = INT32_MAX / (size_t)e->opts.block_size;
    if (blocks < 1)
        return err_fail(err, "KV cache memory of %zu bytes holds no block (one block of %d tokens needs %zu bytes)", mem,
                        e->opts.block_size, block_bytes);
    return (int)blocks;
}

/* The longest sequence the engine admits: what the user asked for, which
 * must fit the pool (vLLM refuses to start otherwise), or else the model's
 * context length, lowered to what the pool holds with a log line. */
static int settle_model_len(pdl_engine *e, size_t mem, pdl_error *err) {
    long long pool = (long long)e->kv->n_blocks * e->kv->block_size;
    if (pool >= e->max_model_len) return 0;
    if (e->opts.max_model_len > 0)
        return err_fail(err, "the model's max seq len (%d) is larger than the maximum number of tokens that can be "
                        "stored in the KV cache (%lld: %d blocks of %d tokens in %zu bytes); raise the KV cache "
                        "memory (--kv-cache-memory) or lower max_model_len (--max-model-len)",
                        e->max_model_len, pool, e->kv->n_blocks, e->kv->block_size, mem);
    eng_log(e, "the KV cache holds %lld tokens (%d blocks of %d), fewer than the model's context length %d: "
               "max_model_len lowered to %lld (raise --kv-cache-memory, or set --max-model-len)", pool,
               e->kv->n_blocks, e->kv->block_size, e->max_model_len, pool);
    e->max_model_len = (int)pool;
    return 0;
}

/* ---- create / free -------------------------------------------------------- */

int pdl_engine_create(pdl_engine **out, const pdl_model *model, const pdl_engine_options *opts, pdl_error *err) {
    *out = NULL;
    pdl_engine *e = calloc(1, sizeof *e);
    if (!e) return err_fail(err, "engine: out of memory");
    e->model = model;
    if (opts) e->opts = *opts;
    if (e->opts.block_size <= 0) e->opts.block_size = 16;
    if (e->opts.max_num_seqs <= 0) e->opts.max_num_seqs = 256;
    if (e->opts.max_num_batched_tokens <= 0) e->opts.max_num_batched_tokens = 2048;
    if (e->opts.encoder_cache_bytes == 0) e->opts.encoder_cache_bytes = (size_t)256 << 20;
    enc_cache_init(&e->encoder_cache, e->opts.no_encoder_cache ? 0 : e->opts.encoder_cache_bytes);
    e->next_request_id = 1;

    int rc = 0;
    e->max_model_len = model->ctx_size;
    if (e->opts.max_model_len > model->ctx_size)
        rc = err_fail(err, "max_model_len %d exceeds the model's context length %d (load the model with a larger "
                      "context: --max-model-len sets both)", e->opts.max_model_len, model->ctx_size);
    else if (e->opts.max_model_len > 0)
        e->max_model_len = e->opts.max_model_len;
    size_t mem = 0;
    int n_slots = 0;
    int n_blocks = rc ? -1 : pool_blocks(e, &mem, &n_slots, err);
    if (n_blocks < 0) rc = -1;
    if (rc == 0)
        rc = kv_cache_create(&e->kv, model, e->opts.kv_dtype, e->opts.block_size, n_blocks, n_slots, with_mtp(e), err);
    if (rc == 0) rc = settle_model_len(e, mem, err);
    if (rc == 0) rc = bpool_init(&e->pool, n_blocks, e->opts.block_size, !e->opts.no_prefix_caching, err);
    if (rc == 0) rc = spool_init(&e->states, n_slots, &e->pool, err);
    if (rc == 0) rc = spec_init(&e->spec, &e->opts, model, e->opts.block_size, n_blocks, err);
    if (rc == 0) {
        pdl_model_info info;
        pdl_model_get_info(model, &info);
        sched_config sc = {.max_num_seqs = e->opts.max_num_seqs,
                           .max_num_batched_tokens = e->opts.max_num_batched_tokens,
                           .max_prefill_chunk = e->opts.max_prefill_chunk,
                           .state_chunk = info.state_chunk,
                           .snapshot_interval = e->opts.state_snapshot_interval};
        rc = sched_init(&e->sched, &sc, &e->pool, e->kv, &e->states, err);
        if (rc == 0) spec_attach(&e->spec, e->kv, &e->sched);
    }
    if (rc == 0) {
        switch (e->opts.logits_mode) {
        case PDL_LOGITS_FULL: e->selective = false; break;
        case PDL_LOGITS_SELECTIVE: e->selective = true; break;
        default: {
            pdl_model_info info;
            pdl_model_get_info(model, &info);
            bool ok = info.probe_state == 1;
            char why[512] = "";
            if (info.probe_state < 0) rc = pdl_model_probe_selective_logits(model, &ok, why, sizeof why, err);
            if (rc == 0 && !ok) eng_log(e, "%s", why[0] ? why : "selective logits rejected by the probe: using full logits");
            e->selective = ok;
        }
        }
    }
    if (rc == 0) rc = runner_init(&e->runner, model, e->kv, !e->selective, err);
    if (rc) {
        pdl_engine_free(e);
        return -1;
    }
    *out = e;
    return 0;
}

void eng_seq_free(eng_seq *q) {
    if (!q) return;
    free(q->tokens);
    free(q->cache.blocks);
    free(q->spec.blocks);
    free(q->spec.mtp_hidden);
    free(q->pool_acc);
    free(q->cache.block_hashes);
    free(q->text.held);
    free(q->text.out);
    pdl_sampler_free(q->sampling.sampler);
    gram_matcher_free(q->sampling.matcher);
    pdl_detok_free(q->text.detok);
    free(q);
}

void eng_request_free(eng_request *r) {
    for (int i = 0; r->stop_strings && i < r->params.n_stop; i++) free(r->stop_strings[i]);
    free(r->stop_strings);
    stop_matcher_free(r->stops);
    free(r->stop_ids);
    free(r->logit_bias);
    free(r->min_banned);
    free(r->cache_salt);
    pdl_lora_free(r->params.lora); /* the engine's reference (request_new) */
    if (r->grammar) gram_grammar_free(r->grammar);
    for (int i = 0; r->image_rows && i < r->n_images; i++) free(r->image_rows[i]);
    free(r->image_rows);
    free(r->row_embd);
    free(r->hash_ids);
    free(r->span_first), free(r->span_last);
    free(r->rope_pos3);
    free(r);
}

void pdl_engine_free(pdl_engine *e) {
    if (!e) return;
    for (int i = 0; i < e->n_seqs; i++) {
        eng_request *r = e->seqs[i]->req;
        if (--r->n_live == 0) eng_request_free(r);
        eng_seq_free(e->seqs[i]);
    }
    free(e->seqs);
    runner_free(&e->runner);
    sched_free(&e->sched);
    spool_free(&e->states);
    bpool_free(&e->pool);
    spec_free(&e->spec);
    so_rows_free(&e->masked);
    free(e->max_lens);
    free(e->pool_row);
    pdl_kv_cache_free(e->kv);
    enc_cache_free(&e->encoder_cache);
    free(e);
}

/* ---- the records ---------------------------------------------------------- */

int eng_track(pdl_engine *e, eng_seq *q, pdl_error *err) {
    if (e->n_seqs == e->cap_seqs) {
        int cap = e->cap_seqs ? e->cap_seqs * 2 : 16;
        eng_seq **p = realloc(e->seqs, (size_t)cap * sizeof *p);
        if (!p) return err_fail(err, "engine: out of memory");
        e->seqs = p;
        e->cap_seqs = cap;
    }
    e->seqs[e->n_seqs++] = q;
    return 0;
}

void eng_untrack(pdl_engine *e, eng_seq *q) {
    for (int i = 0; i < e->n_seqs; i++)
        if (e->seqs[i] == q) {
            e->seqs[i] = e->seqs[--e->n_seqs];
            return;
        }
}

/* Longest sequence (prompt + output) this request may reach. */
int eng_max_len(const pdl_engine *e, const eng_seq *q) {
    int limit = e->max_model_len; /* a lone sequence of it fits the pool (settle_model_len) */
    int mt = q->req->params.max_tokens;
    if (mt > 0 && q->n_prompt + mt < limit) limit = q->n_prompt + mt;
    return limit;
}

eng_seq *eng_seq_new(pdl_engine *e, eng_request *r, int index, const int32_t *tokens, int n_tokens, int n_prompt) {
    eng_seq *q = calloc(1, sizeof *q);
    if (!q) return NULL;
    q->req = r;
    q->index = index;
    q->arrival = e->next_arrival++;
    q->cap_tokens = n_tokens + 16;
    q->tokens = malloc((size_t)q->cap_tokens * sizeof *q->tokens);
    pdl_sampling sp = r->params.sampling;
    sp.seed += (uint64_t)index; /* sequence i of n draws from seed + i */
    q->sampling.sampler = pdl_sampler_new(&sp, e->runner.vocab);
    if (r->grammar) q->sampling.matcher = gram_matcher_new(r->grammar);
    if (r->params.pooling != PDL_POOLING_NONE) q->pool_acc = calloc((size_t)e->model->cfg.hidden, sizeof *q->pool_acc);
    if (!q->tokens || !q->sampling.sampler || (r->grammar && !q->sampling.matcher) ||
        (r->params.pooling != PDL_POOLING_NONE && !q->pool_acc)) {
        eng_seq_free(q);
        return NULL;
    }
    memcpy(q->tokens, tokens, (size_t)n_tokens * sizeof *tokens);
    q->n_tokens = n_tokens;
    q->n_prompt = n_prompt;
    bool inside = r->params.reasoning.enabled && r->params.reasoning.starts_inside;
    q->sampling.think = (eng_think){.inside = inside, .decided = inside};
    q->logprobs.prompt_next = 1;
    q->spec.mtp_pos = -1;
    q->cache.canon_last = -1;
    q->cache.n_cached_prompt = -1;
    q->cache.state_slot = -1;
    pdl_sampler_add_prompt(q->sampling.sampler, tokens, (size_t)n_prompt);
    q->text.detok = pdl_detok_new(e->model, tokens, (size_t)n_tokens);
    return q;
}


/* ---- statistics ----------------------------------------------------------- */

void pdl_engine_get_stats(const pdl_engine *e, pdl_engine_stats *st) {
    memset(st, 0, sizeof *st);
    st->running = e->sched.n_running;
    st->waiting = e->sched.n_waiting;
    st->kv_blocks_total = e->pool.n_blocks;
    st->kv_blocks_used = bpool_used(&e->pool);
    st->kv_blocks_cached = e->pool.n_cached_free;
    st->prefix_cache_queries = e->pool.queries;
    st->prefix_cache_hits = e->pool.hits;
    st->encoder_cache_queries = e->encoder_cache.queries;
    st->encoder_cache_hits = e->encoder_cache.hits;
    st->encoder_cache_evictions = e->encoder_cache.evictions;
    st->encoder_cache_bytes = e->encoder_cache.bytes;
    st->images_encoded = e->images_encoded;
    st->spec_drafts = e->spec.drafts;
    st->spec_draft_tokens = e->spec.draft_tokens;
    st->spec_accepted_tokens = e->spec.accepted;
    memcpy(st->spec_accepted_per_pos, e->spec.accepted_per_pos, sizeof st->spec_accepted_per_pos);
    st->preemptions = e->sched.preemptions;
    st->steps = e->steps;
    st->prompt_tokens = e->prompt_tokens;
    st->generation_tokens = e->generation_tokens;
    st->selective_logits = e->selective;
    st->kv_block_bytes = kv_cache_block_bytes(e->model, e->opts.kv_dtype, e->opts.block_size, with_mtp(e));
    if (e->states.n_slots > 0) {
        pdl_model_info info;
        pdl_model_get_info(e->model, &info);
        st->state_slots_total = e->states.n_slots;
        st->state_slots_used = e->states.n_live;
        st->state_snapshots = e->states.n_snapshots;
        st->state_slot_bytes = info.state_bytes;
        st->state_snapshots_taken = e->states.snapshots_taken;
        st->state_snapshots_restored = e->states.snapshots_restored;
    }
}

int pdl_engine_max_model_len(const pdl_engine *e) { return e->max_model_len; }
