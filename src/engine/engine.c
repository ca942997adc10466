/*
 * engine.c - the continuous-batching engine: requests in, one packed forward
 * per step, sampled tokens and text out through each request's callback.
 *
 * A step: the scheduler plans (sched_schedule), the runner packs and runs
 * the forward (runner_execute), then this file walks the plan: blocks that
 * filled go to the prefix cache, prompt logprobs, sampling, stop
 * conditions, text with stop strings held back, forks for n > 1 (blocks
 * through the scheduler), and finished sequences leave and free their
 * blocks.
 */
#define _POSIX_C_SOURCE 200809L
#include "vision/image.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/block_pool.h"
#include "engine/engine_hooks.h"
#include "kernels/attention.h"
#include "model/kv_cache.h"
#include "engine/request.h"
#include "engine/runner.h"
#include "engine/scheduler.h"
#include "engine/spec_decode.h"
#include "engine/structured.h"
#include "model/model.h"
#include "util/error.h"
#include "util/huge_alloc.h"
#include "vision/encoder_cache.h"

#define MAX_TOP_LOGPROBS 20

struct pdl_engine {
    const pdl_model *model;
    pdl_engine_options opts;
    pdl_kv_cache *kv;          /* K/V storage */
    block_pool pool;           /* who holds which block; the prefix cache */
    enc_cache encoder_cache;   /* images' encoded rows across requests, by image hash */
    spec_state spec;           /* speculative decoding's proposers */
    so_rows masked;            /* structured output: masked copies of the rows constrained sequences sample */
    int *max_lens;             /* [cap_max_lens] scratch: each sequence's max_len, for the proposers */
    int cap_max_lens;
    sched sched;
    runner runner;
    bool selective;
    int max_model_len;         /* longest prompt + output (options.max_model_len as settled) */
    uint64_t next_request_id, next_arrival;
    eng_seq **seqs;            /* every live sequence */
    int n_seqs, cap_seqs;
    bool in_step;
    uint64_t steps, prompt_tokens, generation_tokens;
    uint64_t images_encoded;   /* tower runs (pdl_engine_stats) */
    pdl_logprob top[MAX_TOP_LOGPROBS];
};

static void engine_log(const pdl_engine *e, const char *fmt, ...) PDL_PRINTF(2, 3);
static void engine_log(const pdl_engine *e, const char *fmt, ...) {
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (e->opts.log) e->opts.log(line, e->opts.log_user);
}

/* ---- KV pool sizing ------------------------------------------------------ */

static int pool_blocks(const pdl_engine *e, size_t *mem_out, pdl_error *err) {
    size_t block_bytes = pdl_kv_cache_block_bytes(e->model, e->opts.kv_dtype, e->opts.block_size);
    size_t mem = e->opts.kv_cache_memory;
    if (mem == 0) {
        size_t avail = pdl_available_memory() / 2, cap = (size_t)4 << 30;
        mem = avail && avail < cap ? avail : cap;
    }
    *mem_out = mem;
    size_t blocks = mem / block_bytes;
    /* more than every sequence at full length could use is wasted */
    size_t per_seq = (size_t)(e->max_model_len + e->opts.block_size - 1) / (size_t)e->opts.block_size;
    size_t useful = per_seq * (size_t)e->opts.max_num_seqs;
    if (blocks > useful) blocks = useful;
    if (blocks > INT32_MAX / (size_t)e->opts.block_size) blocks = INT32_MAX / (size_t)e->opts.block_size;
    if (blocks < 1)
        return pdl_fail(err, "KV cache memory of %zu bytes holds no block (one block of %d tokens needs %zu bytes)", mem,
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
        return pdl_fail(err, "the model's max seq len (%d) is larger than the maximum number of tokens that can be "
                        "stored in the KV cache (%lld: %d blocks of %d tokens in %zu bytes); raise the KV cache "
                        "memory (--kv-cache-memory) or lower max_model_len (--max-model-len)",
                        e->max_model_len, pool, e->kv->n_blocks, e->kv->block_size, mem);
    engine_log(e, "the KV cache holds %lld tokens (%d blocks of %d), fewer than the model's context length %d: "
               "max_model_len lowered to %lld (raise --kv-cache-memory, or set --max-model-len)", pool,
               e->kv->n_blocks, e->kv->block_size, e->max_model_len, pool);
    e->max_model_len = (int)pool;
    return 0;
}

/* ---- create / free -------------------------------------------------------- */

int pdl_engine_create(pdl_engine **out, const pdl_model *model, const pdl_engine_options *opts, pdl_error *err) {
    *out = NULL;
    pdl_engine *e = calloc(1, sizeof *e);
    if (!e) return pdl_fail(err, "engine: out of memory");
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
        rc = pdl_fail(err, "max_model_len %d exceeds the model's context length %d (load the model with a larger "
                      "context: --max-model-len sets both)", e->opts.max_model_len, model->ctx_size);
    else if (e->opts.max_model_len > 0)
        e->max_model_len = e->opts.max_model_len;
    size_t mem = 0;
    int n_blocks = rc ? -1 : pool_blocks(e, &mem, err);
    if (n_blocks < 0) rc = -1;
    if (rc == 0) rc = pdl_kv_cache_create(&e->kv, model, e->opts.kv_dtype, e->opts.block_size, n_blocks, err);
    if (rc == 0) rc = settle_model_len(e, mem, err);
    if (rc == 0) rc = bpool_init(&e->pool, n_blocks, e->opts.block_size, !e->opts.no_prefix_caching, err);
    if (rc == 0) rc = spec_init(&e->spec, &e->opts, model, e->opts.block_size, n_blocks, err);
    if (rc == 0) {
        sched_config sc = {.max_num_seqs = e->opts.max_num_seqs,
                           .max_num_batched_tokens = e->opts.max_num_batched_tokens,
                           .max_prefill_chunk = e->opts.max_prefill_chunk};
        rc = sched_init(&e->sched, &sc, &e->pool, e->kv, err);
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
            if (rc == 0 && !ok) engine_log(e, "%s", why[0] ? why : "selective logits rejected by the probe: using full logits");
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

static void seq_free(eng_seq *q) {
    if (!q) return;
    free(q->tokens);
    free(q->blocks);
    free(q->draft_blocks);
    free(q->block_hashes);
    free(q->held);
    free(q->out);
    pdl_sampler_free(q->sampler);
    gram_matcher_free(q->matcher);
    pdl_detok_free(q->detok);
    free(q);
}

static void request_free(eng_request *r) {
    for (int i = 0; r->stop_strings && i < r->params.n_stop; i++) free(r->stop_strings[i]);
    free(r->stop_strings);
    stop_matcher_free(r->stops);
    free(r->stop_ids);
    free(r->logit_bias);
    free(r->min_banned);
    free(r->cache_salt);
    if (r->grammar) gram_grammar_free(r->grammar);
    for (int i = 0; r->image_rows && i < r->n_images; i++) free(r->image_rows[i]);
    free(r->image_rows);
    free(r->row_embd);
    free(r->hash_ids);
    free(r->span_first), free(r->span_last);
    free(r->rope_pos3);
    free(r);
}

/* The prefix-cache stand-in for row k of an image with this hash: a
 * negative int32 (token ids are not), different per row and per image. */
static int32_t image_row_key(const pdl_image *img, int k) {
    uint64_t h = img->hash_lo ^ (img->hash_hi * 0x9e3779b97f4a7c15ull) ^
                 ((uint64_t)(k + 1) * 0xc2b2ae3d27d4eb4full);
    h ^= h >> 31;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 29;
    return (int32_t)(0x80000000u | (uint32_t)(h & 0x7fffffffu));
}

/* Encodes the request's images and lays their rows over the prompt. */
static int request_images(pdl_engine *e, eng_request *r, const pdl_request_params *p, const int32_t *prompt,
                          size_t n_prompt, pdl_error *err) {
    if (p->n_images <= 0) return 0;
    if (!e->opts.vision) return pdl_fail(err, "request: %d image%s given but the engine has no vision model", p->n_images,
                                         p->n_images == 1 ? "" : "s");
    if (!p->images) return pdl_fail(err, "request: n_images %d with no images", p->n_images);
    r->image_rows = calloc((size_t)p->n_images, sizeof *r->image_rows);
    r->row_embd = calloc(n_prompt, sizeof *r->row_embd);
    r->hash_ids = malloc(n_prompt * sizeof *r->hash_ids);
    if (!r->image_rows || !r->row_embd || !r->hash_ids) return pdl_fail(err, "request: out of memory");
    r->n_images = p->n_images;
    memcpy(r->hash_ids, prompt, n_prompt * sizeof *prompt);
    int end = 0; /* the previous image's last row + 1 */
    for (int i = 0; i < p->n_images; i++) {
        const pdl_mm_input *in = &p->images[i];
        if (!in->image) return pdl_fail(err, "request: image %d is NULL", i);
        int n_rows = pdl_vision_image_rows(e->opts.vision, in->image);
        if (n_rows < 0)
            return pdl_fail(err, "request: image %d (%d x %d pixels) has an aspect ratio over 200, which the model's "
                            "processor refuses", i, in->image->width, in->image->height);
        if (in->position < end || (size_t)in->position + (size_t)n_rows > n_prompt)
            return pdl_fail(err, "request: image %d's %d rows at prompt position %d overlap the previous image or "
                            "pass the prompt's end (%zu tokens)", i, n_rows, in->position, n_prompt);
        int got = 0, width = e->model->cfg.hidden;
        const enc_entry *hit = e->opts.no_encoder_cache
                                   ? NULL
                                   : enc_cache_get(&e->encoder_cache, in->image->hash_lo, in->image->hash_hi);
        if (hit && hit->width == width) { /* the same bytes encoded before: the same rows */
            r->image_rows[i] = malloc((size_t)hit->n_rows * (size_t)width * sizeof(float));
            if (!r->image_rows[i]) return pdl_fail(err, "request: out of memory");
            memcpy(r->image_rows[i], hit->rows, (size_t)hit->n_rows * (size_t)width * sizeof(float));
            got = hit->n_rows;
        } else {
            if (pdl_vision_encode(e->opts.vision, in->image, &r->image_rows[i], &got, err))
                return pdl_fail_prefix(err, "request: image %d", i);
            e->images_encoded++;
            if (!e->opts.no_encoder_cache &&
                enc_cache_put(&e->encoder_cache, in->image->hash_lo, in->image->hash_hi, r->image_rows[i], got,
                              width))
                return pdl_fail(err, "request: out of memory");
        }
        if (got != n_rows) return pdl_fail(err, "request: image %d encoded to %d rows, expected %d", i, got, n_rows);
        for (int k = 0; k < n_rows; k++) {
            r->row_embd[in->position + k] = r->image_rows[i] + (size_t)k * e->model->cfg.hidden;
            r->hash_ids[in->position + k] = image_row_key(in->image, k);
        }
        end = in->position + n_rows;
    }
    /* M-RoPE (Qwen2.5-VL): the prompt's 3-component positions and the delta of the rows after it */
    r->rope_pos3 = malloc(n_prompt * 3 * sizeof *r->rope_pos3);
    if (!r->rope_pos3) return pdl_fail(err, "request: out of memory");
    if (!pdl_mm_rope_positions(e->opts.vision, p->images, p->n_images, (int)n_prompt, r->rope_pos3, &r->rope_delta)) {
        free(r->rope_pos3);
        r->rope_pos3 = NULL;
    }
    /* two-way spans (Gemma 3): computed whole in one step, so one image's
     * rows must fit a step's token budget */
    r->span_first = malloc(n_prompt * sizeof *r->span_first);
    r->span_last = malloc(n_prompt * sizeof *r->span_last);
    if (!r->span_first || !r->span_last) return pdl_fail(err, "request: out of memory");
    if (!pdl_mm_spans(e->opts.vision, p->images, p->n_images, (int)n_prompt, r->span_first, r->span_last)) {
        free(r->span_first), free(r->span_last);
        r->span_first = r->span_last = NULL;
        return 0;
    }
    for (int i = 0; i < p->n_images; i++) {
        int n_rows = pdl_vision_image_rows(e->opts.vision, p->images[i].image);
        if (n_rows > e->opts.max_num_batched_tokens)
            return pdl_fail(err, "request: image %d's %d rows attend to each other both ways and are computed in "
                            "one step, but a step holds %d tokens (max_num_batched_tokens)", i, n_rows,
                            e->opts.max_num_batched_tokens);
    }
    return 0;
}

void pdl_engine_free(pdl_engine *e) {
    if (!e) return;
    for (int i = 0; i < e->n_seqs; i++) {
        eng_request *r = e->seqs[i]->req;
        if (--r->n_live == 0) request_free(r);
        seq_free(e->seqs[i]);
    }
    free(e->seqs);
    runner_free(&e->runner);
    sched_free(&e->sched);
    bpool_free(&e->pool);
    spec_free(&e->spec);
    so_rows_free(&e->masked);
    free(e->max_lens);
    pdl_kv_cache_free(e->kv);
    enc_cache_free(&e->encoder_cache);
    free(e);
}

/* ---- requests ------------------------------------------------------------- */

static int track(pdl_engine *e, eng_seq *q, pdl_error *err) {
    if (e->n_seqs == e->cap_seqs) {
        int cap = e->cap_seqs ? e->cap_seqs * 2 : 16;
        eng_seq **p = realloc(e->seqs, (size_t)cap * sizeof *p);
        if (!p) return pdl_fail(err, "engine: out of memory");
        e->seqs = p;
        e->cap_seqs = cap;
    }
    e->seqs[e->n_seqs++] = q;
    return 0;
}

static void untrack(pdl_engine *e, eng_seq *q) {
    for (int i = 0; i < e->n_seqs; i++)
        if (e->seqs[i] == q) {
            e->seqs[i] = e->seqs[--e->n_seqs];
            return;
        }
}

/* Longest sequence (prompt + output) this request may reach. */
static int max_len(const pdl_engine *e, const eng_seq *q) {
    int limit = e->max_model_len; /* a lone sequence of it fits the pool (settle_model_len) */
    int mt = q->req->params.max_tokens;
    if (mt > 0 && q->n_prompt + mt < limit) limit = q->n_prompt + mt;
    return limit;
}

static eng_seq *seq_new(pdl_engine *e, eng_request *r, int index, const int32_t *tokens, int n_tokens, int n_prompt) {
    eng_seq *q = calloc(1, sizeof *q);
    if (!q) return NULL;
    q->req = r;
    q->index = index;
    q->arrival = e->next_arrival++;
    q->cap_tokens = n_tokens + 16;
    q->tokens = malloc((size_t)q->cap_tokens * sizeof *q->tokens);
    pdl_sampling sp = r->params.sampling;
    sp.seed += (uint64_t)index; /* sequence i of n draws from seed + i */
    q->sampler = pdl_sampler_new(&sp, e->runner.vocab);
    if (r->grammar) q->matcher = gram_matcher_new(r->grammar);
    if (!q->tokens || !q->sampler || (r->grammar && !q->matcher)) {
        seq_free(q);
        return NULL;
    }
    memcpy(q->tokens, tokens, (size_t)n_tokens * sizeof *tokens);
    q->n_tokens = n_tokens;
    q->n_prompt = n_prompt;
    bool inside = r->params.reasoning.enabled && r->params.reasoning.starts_inside;
    q->think = (eng_think){.inside = inside, .decided = inside};
    q->prompt_logprobs_next = 1;
    q->canon_last = -1;
    q->n_cached_prompt = -1;
    pdl_sampler_add_prompt(q->sampler, tokens, (size_t)n_prompt);
    q->detok = pdl_detok_new(e->model, tokens, (size_t)n_tokens);
    return q;
}

int pdl_engine_add_request(pdl_engine *e, const int32_t *prompt, size_t n_prompt, const pdl_request_params *params,
                           pdl_event_fn cb, void *user, uint64_t *id_out, pdl_error *err) {
    pdl_request_params p = {.logprobs = -1, .prompt_logprobs = -1};
    if (params) p = *params;
    const pdl_model_config *c = &e->model->cfg;
    if (n_prompt == 0) return pdl_fail(err, "request: the prompt is empty");
    for (size_t i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= c->vocab)
            return pdl_fail(err, "request: prompt token %zu: id %d out of range [0, %d)", i, prompt[i], c->vocab);
    if (n_prompt + 1 > (size_t)e->max_model_len)
        return pdl_fail(err, "request: the prompt has %zu tokens; with one generated token it exceeds the maximum "
                        "model length %d", n_prompt, e->max_model_len);
    if (pdl_sampling_validate(&p.sampling, c->vocab, err)) return pdl_fail_prefix(err, "request");
    if (p.max_tokens < 0) return pdl_fail(err, "request: max_tokens %d must not be negative", p.max_tokens);
    if (p.min_tokens < 0 || (p.max_tokens > 0 && p.min_tokens > p.max_tokens))
        return pdl_fail(err, "request: min_tokens %d must be in [0, max_tokens = %d]", p.min_tokens, p.max_tokens);
    if (p.logprobs > MAX_TOP_LOGPROBS || p.prompt_logprobs > MAX_TOP_LOGPROBS)
        return pdl_fail(err, "request: logprobs and prompt_logprobs are limited to %d", MAX_TOP_LOGPROBS);
    if (p.n < 0 || p.n > 64) return pdl_fail(err, "request: n = %d outside [1, 64]", p.n);
    if (p.n == 0) p.n = 1;
    if (p.n_stop < 0 || p.n_stop_ids < 0) return pdl_fail(err, "request: negative stop counts");
    for (int i = 0; i < p.n_stop; i++)
        if (!p.stop[i] || !p.stop[i][0]) return pdl_fail(err, "request: stop string %d is empty", i);
    const pdl_reasoning *rs = &p.reasoning;
    if (rs->enabled && (rs->end_token < 0 || rs->end_token >= c->vocab || rs->start_token < -1 ||
                        rs->start_token >= c->vocab || (rs->start_token < 0 && !rs->starts_inside)))
        return pdl_fail(err, "request: reasoning markers %d / %d are not tokens of the vocabulary [0, %d)",
                        rs->start_token, rs->end_token, c->vocab);
    if (p.grammar && gram_vocab_size(gram_grammar_vocab(p.grammar)) != e->runner.vocab)
        return pdl_fail(err, "request: the grammar was compiled for a vocabulary of %d tokens, the model has %d",
                        gram_vocab_size(gram_grammar_vocab(p.grammar)), e->runner.vocab);

    eng_request *r = calloc(1, sizeof *r);
    if (!r) return pdl_fail(err, "request: out of memory");
    r->id = e->next_request_id++;
    r->params = p;
    r->n = p.n;
    r->cb = cb;
    r->user = user;
    int n_bias = p.sampling.n_logit_bias;
    r->stop_strings = calloc((size_t)(p.n_stop ? p.n_stop : 1), sizeof *r->stop_strings);
    r->stop_ids = malloc((size_t)(p.n_stop_ids ? p.n_stop_ids : 1) * sizeof *r->stop_ids);
    r->logit_bias = malloc((size_t)(n_bias ? n_bias : 1) * sizeof *r->logit_bias);
    r->min_banned = malloc((size_t)(p.n_stop_ids + c->n_eos + 1) * sizeof *r->min_banned);
    bool oom = !r->stop_strings || !r->stop_ids || !r->logit_bias || !r->min_banned;
    for (int i = 0; !oom && i < p.n_stop; i++) oom = !(r->stop_strings[i] = strdup(p.stop[i]));
    if (!oom && p.n_stop_ids) memcpy(r->stop_ids, p.stop_ids, (size_t)p.n_stop_ids * sizeof *r->stop_ids);
    if (!oom && n_bias) memcpy(r->logit_bias, p.sampling.logit_bias, (size_t)n_bias * sizeof *r->logit_bias);
    r->params.stop = (const char *const *)r->stop_strings;
    r->params.stop_ids = r->stop_ids;
    r->params.sampling.logit_bias = r->logit_bias;
    if (!oom) {
        /* what min_tokens holds back: the tokens that would end the sequence */
        for (int i = 0; i < p.n_stop_ids; i++) r->min_banned[r->n_min_banned++] = p.stop_ids[i];
        for (int i = 0; !p.ignore_eos && i < c->n_eos; i++) r->min_banned[r->n_min_banned++] = c->eos_ids[i];
    }
    if (!oom && p.cache_salt) oom = !(r->cache_salt = strdup(p.cache_salt));
    r->params.cache_salt = r->cache_salt;
    r->root_hash = bpool_root_hash(r->cache_salt);
    r->salt_check = bpool_extra_check(r->cache_salt);
    r->no_prefix_cache = p.prompt_logprobs >= 0; /* every prompt row must be computed for its logprobs */
    if (p.grammar) r->grammar = gram_grammar_ref(p.grammar);
    if (!oom && request_images(e, r, &p, prompt, n_prompt, err)) {
        request_free(r);
        return -1;
    }
    r->params.images = NULL; /* not kept: the rows are */
    if (!oom && p.stop_matcher) {
        if (stop_matcher_count(p.stop_matcher) != p.n_stop) {
            request_free(r);
            return pdl_fail(err, "request: the stop matcher was made for %d stop strings, the request has %d",
                            stop_matcher_count(p.stop_matcher), p.n_stop);
        }
        r->stops = stop_matcher_ref(p.stop_matcher);
    } else if (!oom && p.n_stop > 0 && stop_matcher_new(&r->stops, p.stop, NULL, p.n_stop, err)) {
        request_free(r);
        return pdl_fail_prefix(err, "request");
    }
    r->params.stop_matcher = NULL; /* r->stops holds it */
    eng_seq *q = oom ? NULL : seq_new(e, r, 0, prompt, (int)n_prompt, (int)n_prompt);
    if (!q) {
        request_free(r);
        return pdl_fail(err, "request: out of memory");
    }
    r->n_live = 1;
    q->fork_pending = r->n > 1;
    if (track(e, q, err) || sched_add(&e->sched, q, err)) {
        untrack(e, q);
        seq_free(q);
        request_free(r);
        return -1;
    }
    e->prompt_tokens += n_prompt;
    if (id_out) *id_out = r->id;
    return 0;
}

/* ---- outputs -------------------------------------------------------------- */

static void emit(eng_seq *q, pdl_event *ev) {
    ev->request_id = q->req->id;
    ev->index = q->index;
    if (q->req->cb) q->req->cb(ev, q->req->user);
}

static int held_append(eng_seq *q, const char *s, size_t n) {
    if (q->held_len + n + 1 > q->held_cap) {
        size_t cap = (q->held_len + n + 1) * 2;
        char *p = realloc(q->held, cap);
        if (!p) return -1;
        q->held = p;
        q->held_cap = cap;
    }
    memcpy(q->held + q->held_len, s, n);
    q->held_len += n;
    q->held[q->held_len] = '\0';
    return 0;
}

/* Generated tokens of q so far. */
static int n_generated(const eng_seq *q) { return q->n_tokens - q->n_prompt; }

/* Adds len bytes of new text to what is held; returns how many bytes of
 * q->held can be released now. A stop string completed by the new text
 * (looked for once more than min_tokens tokens are out, as vLLM does) sets
 * *stop to its index (else -1) and drops the text from it on. Work per call
 * is proportional to len (stop_match.h), whatever the stop strings. */
static size_t text_release(eng_seq *q, const char *text, size_t len, int *stop) {
    *stop = -1;
    const eng_request *r = q->req;
    size_t before = q->held_len;
    if (held_append(q, text, len)) return q->held_len;
    if (!r->stops) return q->held_len;
    bool look = n_generated(q) > r->params.min_tokens;
    size_t fed = 0;
    stop_hit hit;
    while (fed < len && stop_matcher_feed(r->stops, &q->stop_state, text + fed, len - fed, &hit, NULL)) {
        fed += hit.end;
        if (!look) continue;
        /* the stop string starts inside the held text (a prefix of it was held) */
        size_t end = before + fed;
        q->held_len = end >= hit.len ? end - hit.len : 0;
        q->held[q->held_len] = '\0';
        *stop = hit.stop;
        return q->held_len;
    }
    size_t hold = stop_matcher_hold(r->stops, q->stop_state);
    return hold < q->held_len ? q->held_len - hold : 0;
}

/* Passes the first n held bytes on as ev->text, through the sequence's own
 * reusable buffer (valid during emit; no allocation per token once grown). */
static void release_into(eng_seq *q, size_t n, pdl_event *ev) {
    if (n + 1 > q->out_cap) {
        char *p = realloc(q->out, n + 1 > 64 ? n + 1 : 64);
        if (!p) {
            ev->text = "";
            ev->text_len = 0;
            return;
        }
        q->out = p;
        q->out_cap = n + 1 > 64 ? n + 1 : 64;
    }
    memcpy(q->out, q->held, n);
    q->out[n] = '\0';
    memmove(q->held, q->held + n, q->held_len - n + 1);
    q->held_len -= n;
    ev->text = q->out;
    ev->text_len = n;
}

/* How a sequence ended by a stop condition: the stop string's index or the
 * stop token (-1 each when neither, e.g. EOS). */
typedef struct stop_cause {
    int string;
    int32_t token;
} stop_cause;

static void finish(pdl_engine *e, eng_seq *q, const char *reason, stop_cause cause) {
    pdl_event ev = {.kind = PDL_EVENT_FINISHED, .token = -1, .finish_reason = reason, .stop_token = cause.token};
    bool aborted = strcmp(reason, "abort") == 0;
    if (!aborted && cause.string < 0) {
        /* the end of the text: incomplete UTF-8 as U+FFFD; a stop string it
         * completes still ends the text there */
        const char *tail = pdl_detok_flush(q->detok);
        int stop;
        text_release(q, tail, pdl_detok_len(q->detok), &stop);
        if (stop >= 0 && cause.token < 0) {
            ev.finish_reason = "stop";
            cause.string = stop;
        }
    }
    if (cause.string >= 0) ev.stop_string = q->req->stop_strings[cause.string];
    ev.cached_tokens = q->n_cached_prompt > 0 ? q->n_cached_prompt : 0;
    ev.text = aborted || !q->held ? "" : q->held;
    ev.text_len = aborted ? 0 : q->held_len;
    ev.position = q->n_tokens - 1;
    emit(q, &ev);
    sched_remove(&e->sched, q);
    spec_release(&e->spec, q);
    untrack(e, q);
    eng_request *r = q->req;
    q->state = SEQ_FINISHED;
    seq_free(q);
    if (--r->n_live == 0) request_free(r);
}

/* Whether tok ends the sequence: EOS first (no stop reason, as vLLM), then
 * the request's stop tokens (*cause_token = tok). */
static bool is_stop_token(const pdl_engine *e, const eng_seq *q, int32_t tok, int32_t *cause_token) {
    const pdl_request_params *p = &q->req->params;
    *cause_token = -1;
    const pdl_model_config *c = &e->model->cfg;
    for (int i = 0; !p->ignore_eos && i < c->n_eos; i++)
        if (c->eos_ids[i] == tok) return true;
    for (int i = 0; i < p->n_stop_ids; i++)
        if (p->stop_ids[i] == tok) {
            *cause_token = tok;
            return true;
        }
    return false;
}

static int append_token(eng_seq *q, int32_t tok) {
    if (q->n_tokens == q->cap_tokens) {
        int cap = q->cap_tokens * 2;
        int32_t *t = realloc(q->tokens, (size_t)cap * sizeof *t);
        if (!t) return -1;
        q->tokens = t;
        q->cap_tokens = cap;
    }
    q->tokens[q->n_tokens++] = tok;
    return 0;
}

/* The thinking block's state after tok (pdl_reasoning). */
static eng_think think_after(const pdl_reasoning *rs, eng_think t, int32_t tok) {
    if (!rs->enabled) return t;
    if (t.inside) {
        if (tok == rs->end_token) t.inside = false;
        else t.n++;
    } else if (!t.decided) {
        t.decided = true;
        t.inside = tok == rs->start_token;
    }
    return t;
}

/* Whether tok, drawn in state t, is the answer's (what a grammar constrains). */
static bool is_answer(const pdl_reasoning *rs, eng_think t, int32_t tok) {
    return !rs->enabled || (!t.inside && (t.decided || tok != rs->start_token));
}

/* Draws the token at q's position n_tokens + ahead from its row of logits
 * (ahead > 0: a row past drafts that were accepted before it; the sampler
 * has recorded them), in thinking-block state t. One draw of the request's
 * random stream, as without speculation. Under a grammar the draw is from a
 * masked copy of the row (in scratch slot `ahead`), and inside a thinking
 * block from the row itself, or from one that forces the block's end once
 * its budget is spent; *used gets the row drawn from, for its logprobs. -1
 * (err set) when the grammar cannot go on. */
static int32_t draw_token(pdl_engine *e, eng_seq *q, eng_think t, const float *row, int ahead, const float **used,
                          pdl_error *err) {
    const eng_request *r = q->req;
    const pdl_reasoning *rs = &r->params.reasoning;
    if (e->opts.on_logits)
        e->opts.on_logits(r->id, q->index, q->n_tokens - 1 + ahead, row, e->runner.vocab, e->opts.on_logits_user);
    if (rs->enabled && t.inside) {
        if (rs->budget >= 0 && t.n >= rs->budget &&
            !(row = so_forced_row(&e->masked, e->runner.vocab, row, rs->end_token, true, ahead, err)))
            return -1;
    } else {
        /* before the block, the model may open it (unless the budget is 0) instead of answering */
        bool may_open = rs->enabled && !t.decided && rs->start_token >= 0;
        int32_t open = may_open && rs->budget != 0 ? rs->start_token : -1;
        if (q->matcher) {
            if (!(row = so_masked_row(&e->masked, q->matcher, row, ahead, open, err))) return -1;
        } else if (may_open && rs->budget == 0) {
            if (!(row = so_forced_row(&e->masked, e->runner.vocab, row, rs->start_token, false, ahead, err))) return -1;
        }
    }
    *used = row;
    bool hold_stops = n_generated(q) + ahead < r->params.min_tokens;
    return pdl_sampler_sample_ex(q->sampler, row, r->min_banned, hold_stops ? r->n_min_banned : 0);
}

/* Appends tok (drawn from row) to q and emits it: logprobs, text with stop
 * strings held back. *reason gets why q must now finish ("stop", "length",
 * "abort" when the grammar refused the token) or NULL; the caller finishes
 * it (after anything that still needs q). */
static int emit_token(pdl_engine *e, eng_seq *q, const float *row, int32_t tok, const char **reason, stop_cause *why,
                      pdl_error *err) {
    *reason = NULL;
    if (append_token(q, tok)) return pdl_fail(err, "engine: out of memory");
    e->generation_tokens++;
    pdl_event ev = {.kind = PDL_EVENT_TOKEN, .token = tok, .position = q->n_tokens - 1, .text = ""};
    int nl = q->req->params.logprobs;
    if (nl >= 0) {
        pdl_logprobs(row, e->runner.vocab, tok, &ev.logprob, e->top, nl);
        ev.top = e->top;
        ev.n_top = nl;
    }
    stop_cause cause = {-1, -1};
    bool stop_tok = is_stop_token(e, q, tok, &cause.token);
    /* the text of a stop token (EOS) is not part of the output */
    const char *piece = stop_tok ? "" : pdl_detok_push(q->detok, tok);
    size_t n = text_release(q, piece, stop_tok ? 0 : pdl_detok_len(q->detok), &cause.string);
    release_into(q, n, &ev);
    emit(q, &ev);
    *why = cause;
    bool grammar_ok = true, grammar_done = false;
    bool answer = is_answer(&q->req->params.reasoning, q->think, tok);
    q->think = think_after(&q->req->params.reasoning, q->think, tok);
    if (q->matcher && answer) {
        /* the draw came from the masked row: only an all -inf row (every
         * allowed token banned) can give a token the grammar refuses */
        grammar_ok = gram_matcher_accept_token(q->matcher, tok);
        grammar_done = grammar_ok && gram_matcher_is_terminated(q->matcher);
        if (!grammar_ok) {
            const char *why = gram_matcher_error(q->matcher);
            engine_log(e, "request %llu: token %d %s: ending it", (unsigned long long)q->req->id, tok,
                       why ? why : "is not allowed by its grammar");
        }
    }
    if (stop_tok || cause.string >= 0) *reason = "stop";
    else if (!grammar_ok) *reason = "abort";
    else if (grammar_done) *reason = "stop"; /* the grammar is complete: nothing but EOS could follow */
    else if (q->n_tokens >= max_len(e, q)) *reason = "length";
    return 0;
}

/* The grammar of q cannot go on (no token continues it) or ran out of
 * memory: q ends ("abort"), the engine goes on. */
static void grammar_failed(pdl_engine *e, eng_seq *q, const pdl_error *why) {
    engine_log(e, "request %llu: %s", (unsigned long long)q->req->id, why->message);
    finish(e, q, "abort", (stop_cause){-1, -1});
}

/* Samples q's next token from its row, emits it, and finishes q when a
 * stop condition holds. */
static int sample_next(pdl_engine *e, eng_seq *q, const float *row, pdl_error *err) {
    const char *reason;
    stop_cause why;
    const float *used;
    pdl_error gerr;
    int32_t tok = draw_token(e, q, q->think, row, 0, &used, &gerr);
    if (tok < 0) {
        grammar_failed(e, q, &gerr);
        return 0;
    }
    if (emit_token(e, q, used, tok, &reason, &why, err)) return -1;
    if (reason) finish(e, q, reason, why);
    return 0;
}

/* A decode with n_draft speculative drafts, its rows[0 .. n_draft] from
 * the forward: each row's token is drawn as without speculation, and the
 * drafts are accepted while they equal the drawn tokens (for these one-hot
 * proposals, vLLM's rejection sampling; spec_decode.h). The tokens before
 * the first disagreement, and the token drawn there (or the bonus token
 * after the last draft), are emitted in order, stopping at a stop
 * condition; the K/V of rejected drafts is left behind (n_computed covers
 * the accepted ones only, and later rows overwrite the rest before any row
 * reads it). Under a grammar, row j is masked by the matcher's state after
 * drafts 0 .. j-1 (k + 1 masks), and the matcher is rolled back before the
 * emitted tokens are fed to it again one by one. */
static int verify_drafts(pdl_engine *e, eng_seq *q, int start, const float *rows, pdl_error *err) {
    int nd = q->n_draft, V = e->runner.vocab, accepted = 0;
    int32_t drawn[PDL_MAX_SPEC_TOKENS + 1];
    const float *used[PDL_MAX_SPEC_TOKENS + 1];
    int n_drawn = 0, fed = 0; /* fed: drafts given to the matcher to mask the rows after them */
    pdl_error gerr;
    bool failed = false;
    const pdl_reasoning *rs = &q->req->params.reasoning;
    eng_think t = q->think; /* the thinking block's state after the drafts accepted so far */
    for (int j = 0; j <= nd; j++) {
        int32_t tok = draw_token(e, q, t, rows + (size_t)j * (size_t)V, j, &used[n_drawn], &gerr);
        if (tok < 0) {
            failed = true;
            break;
        }
        drawn[n_drawn++] = tok;
        if (j == nd || drawn[j] != q->draft[j]) break;
        accepted++;
        bool answer = is_answer(rs, t, tok);
        t = think_after(rs, t, tok);
        if (q->matcher && answer) {
            if (!gram_matcher_accept_token(q->matcher, tok)) break; /* cannot happen: drawn from the mask */
            fed++;
        }
    }
    if (fed) gram_matcher_rollback(q->matcher, fed);
    spec_verified(&e->spec, q, accepted); /* before emitting: the sequence may end in it */
    const char *reason = NULL;
    stop_cause why = {-1, -1};
    int emitted = 0;
    while (emitted < n_drawn && !reason) {
        if (emit_token(e, q, used[emitted], drawn[emitted], &reason, &why, err)) return -1;
        emitted++;
    }
    int valid = accepted < emitted - 1 ? accepted : emitted - 1; /* accepted drafts now in tokens */
    if (valid < 0) valid = 0;
    q->n_computed = start + 1 + valid;
    sched_cache_full_blocks(&e->sched, q);
    if (reason) finish(e, q, reason, why);
    else if (failed) grammar_failed(e, q, &gerr);
    return 0;
}

/* n > 1: the other n - 1 sequences start from the finished prompt (blocks
 * shared through the scheduler); *kids gets the ones that run now (they
 * sample their first token from the parent's row), *n_kids their count. */
static int fork_children(pdl_engine *e, eng_seq *parent, eng_seq **kids, int *n_kids, pdl_error *err) {
    eng_request *r = parent->req;
    parent->fork_pending = false;
    *n_kids = 0;
    int made = 0;
    for (int i = 1; i < r->n; i++) {
        eng_seq *c = seq_new(e, r, i, parent->tokens, parent->n_tokens, parent->n_prompt);
        if (!c) return pdl_fail(err, "engine: out of memory");
        c->prompt_logprobs_next = parent->n_prompt; /* prompt logprobs belong to sequence 0 */
        c->n_cached_prompt = parent->n_cached_prompt;
        r->n_live++;
        if (track(e, c, err)) return -1;
        kids[made++] = c;
    }
    int running = sched_fork(&e->sched, parent, kids, made, err);
    if (running < 0) return -1;
    *n_kids = running;
    return 0;
}

static void emit_prompt_logprobs(pdl_engine *e, eng_seq *q, int row_pos, const float *row) {
    int target = row_pos + 1; /* row r predicts prompt token r + 1 */
    if (target >= q->n_prompt || target < q->prompt_logprobs_next) return;
    pdl_event ev = {.kind = PDL_EVENT_PROMPT_LOGPROB, .token = q->tokens[target], .position = target, .text = ""};
    int nl = q->req->params.prompt_logprobs;
    pdl_logprobs(row, e->runner.vocab, ev.token, &ev.logprob, e->top, nl);
    ev.top = e->top;
    ev.n_top = nl;
    emit(q, &ev);
    q->prompt_logprobs_next = target + 1;
}

/* ---- the step ------------------------------------------------------------- */

static void process_aborts(pdl_engine *e) {
    for (int i = 0; i < e->n_seqs;) {
        eng_seq *q = e->seqs[i];
        if (q->abort_requested) finish(e, q, "abort", (stop_cause){-1, -1}); /* untracks q: index i now holds another */
        else i++;
    }
}

/* Drafts for the sequences that speculate this step (spec_decode.h). */
static int propose_drafts(pdl_engine *e, pdl_error *err) {
    if (e->spec.method == PDL_SPEC_NONE || e->n_seqs == 0) return 0;
    if (e->n_seqs > e->cap_max_lens) {
        int *p = realloc(e->max_lens, (size_t)e->n_seqs * sizeof *p);
        if (!p) return pdl_fail(err, "engine: out of memory");
        e->max_lens = p;
        e->cap_max_lens = e->n_seqs;
    }
    for (int i = 0; i < e->n_seqs; i++) e->max_lens[i] = max_len(e, e->seqs[i]);
    return spec_propose(&e->spec, e->seqs, e->max_lens, e->n_seqs, err);
}

static double mono_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int pdl_engine_step(pdl_engine *e, int *active, pdl_error *err) {
    sched_output plan;
    e->in_step = true;
    double t0 = e->spec.method != PDL_SPEC_NONE ? mono_s() : 0;
    uint64_t gen0 = e->generation_tokens;
    int rc = propose_drafts(e, err);
    if (rc == 0) rc = sched_schedule(&e->sched, &plan, err);
    int n_spec = 0;
    for (int k = 0; rc == 0 && k < plan.n_entries; k++) n_spec += plan.entries[k].n_new > 1 && k < plan.n_decode;
    if (rc == 0 && plan.n_entries > 0) rc = runner_execute(&e->runner, &plan, err);
    if (rc == 0 && plan.n_entries > 0) {
        e->steps++;
        int32_t rows[4096];
        int32_t *rowbuf = plan.n_tokens <= 4096 ? rows : malloc((size_t)plan.n_tokens * sizeof *rowbuf);
        if (!rowbuf) rc = pdl_fail(err, "engine: out of memory");
        for (int k = 0; rc == 0 && k < plan.n_entries; k++) {
            sched_entry *en = &plan.entries[k];
            eng_seq *q = en->seq;
            int n = runner_logits_rows(en, rowbuf);
            const float *lg = e->runner.logits + (size_t)e->runner.logits_cu_seqlens[k] * e->runner.vocab;
            if (en->start == q->n_tokens - 1 && en->n_new > 1) { /* a decode with drafts */
                if (!q->abort_requested) rc = verify_drafts(e, q, en->start, lg, err);
                continue;
            }
            q->n_computed = en->start + en->n_new;
            sched_cache_full_blocks(&e->sched, q);
            bool completes = q->n_computed == q->n_tokens;
            for (int j = 0; j < n; j++)
                if (q->req->params.prompt_logprobs >= 0) emit_prompt_logprobs(e, q, rowbuf[j], lg + (size_t)j * e->runner.vocab);
            if (!completes || q->abort_requested) continue;
            const float *last = lg + (size_t)(n - 1) * e->runner.vocab;
            /* forked children sample their first token from the same row */
            eng_seq *kids[64];
            int n_kids = 0;
            if (q->fork_pending) rc = fork_children(e, q, kids, &n_kids, err);
            if (rc == 0) rc = sample_next(e, q, last, err);
            for (int i = 0; rc == 0 && i < n_kids; i++) rc = sample_next(e, kids[i], last, err);
        }
        if (rowbuf != rows) free(rowbuf);
        if (rc == 0 && e->spec.method != PDL_SPEC_NONE) {
            /* tokens beyond one per decode: what the drafts gained */
            int extra = (int)(e->generation_tokens - gen0) - plan.n_decode;
            spec_step_done(&e->spec, mono_s() - t0, plan.n_decode == plan.n_entries, n_spec > 0, n_spec + extra, n_spec);
        }
    }
    e->in_step = false;
    process_aborts(e);
    if (active) *active = e->sched.n_running + e->sched.n_waiting;
    return rc;
}

int pdl_engine_run_until_idle(pdl_engine *e, pdl_error *err) {
    int active = 1;
    while (active > 0)
        if (pdl_engine_step(e, &active, err)) return -1;
    return 0;
}

int pdl_engine_abort(pdl_engine *e, uint64_t request_id) {
    int found = 0;
    for (int i = 0; i < e->n_seqs; i++)
        if (e->seqs[i]->req->id == request_id) {
            e->seqs[i]->abort_requested = true;
            found = 1;
        }
    if (found && !e->in_step) process_aborts(e);
    return found ? 0 : -1;
}

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
}

int pdl_engine_max_model_len(const pdl_engine *e) { return e->max_model_len; }

block_pool *eng_block_pool(pdl_engine *e) { return &e->pool; }

void eng_poison_uncomputed_kv(pdl_engine *e) {
    pdl_kv_cache *kv = e->kv;
    int bs = kv->block_size;
    for (int i = 0; i < e->n_seqs; i++) {
        const eng_seq *q = e->seqs[i];
        for (int pos = q->n_computed; pos < q->n_blocks * bs; pos++) {
            int32_t b = q->blocks[pos / bs];
            for (int l = 0; l < kv->n_layers; l++) {
                char *kpool = pdl_kv_k_pool(kv, l), *vpool = pdl_kv_v_pool(kv, l);
                int64_t slot = (int64_t)b * bs + pos % bs;
                for (int d = 0; d < kv->kv_dim; d++) {
                    char *k = kpool + pdl_attn_k_index(slot, bs, kv->kv_dim, d) * kv->elem_bytes;
                    char *v = vpool + pdl_attn_v_index(slot, bs, kv->kv_dim, kv->head_dim, d) * kv->elem_bytes;
                    if (kv->elem_bytes == 4) {
                        const uint32_t nan = 0x7fc00000u;
                        memcpy(k, &nan, 4), memcpy(v, &nan, 4);
                    } else {
                        const uint16_t nan = 0x7e00u;
                        memcpy(k, &nan, 2), memcpy(v, &nan, 2);
                    }
                }
            }
        }
    }
}
