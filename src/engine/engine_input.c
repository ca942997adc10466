/*
 * engine_input.c - a request entering the engine (vLLM v1's input
 * processor): its parameters validated against the model, the engine's own
 * copies of what it points to (stop strings and ids, logit bias, salt,
 * grammar, stop matcher), its images encoded (or found in the encoder
 * cache) and laid over the prompt's rows, its first sequence queued.
 *
 * What it is not for: tokenizing text (the caller gives ids: pdl_tokenize,
 * src/model/model_text.c), the step or the output.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"
#include "model/lora.h"
#include "model/model.h"

/* Encodes the request's images and lays their rows over the prompt. */
static int request_images(pdl_engine *e, eng_request *r, const pdl_request_params *p, const int32_t *prompt,
                          size_t n_prompt, pdl_error *err) {
    if (p->n_images <= 0) return 0;
    if (!e->opts.vision) return err_fail(err, "request: %d image%s given but the engine has no vision model", p->n_images,
                                         p->n_images == 1 ? "" : "s");
    if (!p->images) return err_fail(err, "request: n_images %d with no images", p->n_images);
    r->image_rows = calloc((size_t)p->n_images, sizeof *r->image_rows);
    r->row_embd = calloc(n_prompt, sizeof *r->row_embd);
    r->hash_ids = malloc(n_prompt * sizeof *r->hash_ids);
    if (!r->image_rows || !r->row_embd || !r->hash_ids) return err_fail(err, "request: out of memory");
    r->n_images = p->n_images;
    memcpy(r->hash_ids, prompt, n_prompt * sizeof *prompt);
    int end = 0; /* the previous image's last row + 1 */
    for (int i = 0; i < p->n_images; i++) {
        const pdl_mm_input *in = &p->images[i];
        if (!in->image) return err_fail(err, "request: image %d is NULL", i);
        int n_rows = pdl_vision_image_rows(e->opts.vision, in->image);
        if (n_rows < 0)
            return err_fail(err, "request: image %d (%d x %d pixels) has an aspect ratio over 200, which the model's "
                            "processor refuses", i, pdl_image_width(in->image), pdl_image_height(in->image));
        if (in->position < end || (size_t)in->position + (size_t)n_rows > n_prompt)
            return err_fail(err, "request: image %d's %d rows at prompt position %d overlap the previous image or "
                            "pass the prompt's end (%zu tokens)", i, n_rows, in->position, n_prompt);
        int got = 0, width = e->model->cfg.hidden;
        enc_key key = enc_key_of(in->image);
        const enc_entry *hit = e->opts.no_encoder_cache ? NULL : enc_cache_get(&e->encoder_cache, key);
        if (hit && hit->width == width) { /* the same bytes encoded before: the same rows */
            r->image_rows[i] = malloc((size_t)hit->n_rows * (size_t)width * sizeof(float));
            if (!r->image_rows[i]) return err_fail(err, "request: out of memory");
            memcpy(r->image_rows[i], hit->rows, (size_t)hit->n_rows * (size_t)width * sizeof(float));
            got = hit->n_rows;
        } else {
            if (pdl_vision_encode(e->opts.vision, in->image, &r->image_rows[i], &got, err))
                return err_fail_prefix(err, "request: image %d", i);
            e->images_encoded++;
            if (!e->opts.no_encoder_cache &&
                enc_cache_put(&e->encoder_cache, key, r->image_rows[i], got, width))
                return err_fail(err, "request: out of memory");
        }
        if (got != n_rows) return err_fail(err, "request: image %d encoded to %d rows, expected %d", i, got, n_rows);
        for (int k = 0; k < n_rows; k++) {
            r->row_embd[in->position + k] = r->image_rows[i] + (size_t)k * e->model->cfg.hidden;
            r->hash_ids[in->position + k] = enc_row_key(key, k);
        }
        end = in->position + n_rows;
    }
    /* M-RoPE (Qwen2.5-VL): the prompt's 3-component positions and the delta of the rows after it */
    r->rope_pos3 = malloc(n_prompt * 3 * sizeof *r->rope_pos3);
    if (!r->rope_pos3) return err_fail(err, "request: out of memory");
    if (!pdl_mm_rope_positions(e->opts.vision, p->images, p->n_images, (int)n_prompt, r->rope_pos3, &r->rope_delta)) {
        free(r->rope_pos3);
        r->rope_pos3 = NULL;
    }
    /* two-way spans (Gemma 3): computed whole in one step, so one image's
     * rows must fit a step's token budget */
    r->span_first = malloc(n_prompt * sizeof *r->span_first);
    r->span_last = malloc(n_prompt * sizeof *r->span_last);
    if (!r->span_first || !r->span_last) return err_fail(err, "request: out of memory");
    if (!pdl_mm_spans(e->opts.vision, p->images, p->n_images, (int)n_prompt, r->span_first, r->span_last)) {
        free(r->span_first), free(r->span_last);
        r->span_first = r->span_last = NULL;
        return 0;
    }
    for (int i = 0; i < p->n_images; i++) {
        int n_rows = pdl_vision_image_rows(e->opts.vision, p->images[i].image);
        if (n_rows > e->opts.max_num_batched_tokens)
            return err_fail(err, "request: image %d's %d rows attend to each other both ways and are computed in "
                            "one step, but a step holds %d tokens (max_num_batched_tokens)", i, n_rows,
                            e->opts.max_num_batched_tokens);
    }
    return 0;
}

/* Checks a request against the model and the engine's limits; fills the
 * defaults (n = 0: one sequence). */
static int validate_request(const pdl_engine *e, const int32_t *prompt, size_t n_prompt, pdl_request_params *p,
                            pdl_error *err) {
    const pdl_model_config *c = &e->model->cfg;
    if (n_prompt == 0) return err_fail(err, "request: the prompt is empty");
    for (size_t i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= c->vocab)
            return err_fail(err, "request: prompt token %zu: id %d out of range [0, %d)", i, prompt[i], c->vocab);
    if (c->encoder && p->pooling == PDL_POOLING_NONE)
        return err_fail(err, "request: %s is an encoder: it computes embeddings (pooling), it generates nothing",
                        c->arch->name);
    if (c->encoder && n_prompt > (size_t)e->max_model_len)
        return err_fail(err, "request: the prompt has %zu tokens; the encoder takes at most %d", n_prompt,
                        e->max_model_len);
    if (c->encoder && n_prompt > (size_t)e->opts.max_num_batched_tokens)
        return err_fail(err, "request: an encoder's %zu prompt rows attend to each other both ways and are computed "
                        "in one step, but a step holds %d tokens (max_num_batched_tokens)", n_prompt,
                        e->opts.max_num_batched_tokens);
    if (!c->encoder && n_prompt + 1 > (size_t)e->max_model_len)
        return err_fail(err, "request: the prompt has %zu tokens; with one generated token it exceeds the maximum "
                        "model length %d", n_prompt, e->max_model_len);
    if (pdl_sampling_validate(&p->sampling, c->vocab, err)) return err_fail_prefix(err, "request");
    if (p->max_tokens < 0) return err_fail(err, "request: max_tokens %d must not be negative", p->max_tokens);
    if (p->min_tokens < 0 || (p->max_tokens > 0 && p->min_tokens > p->max_tokens))
        return err_fail(err, "request: min_tokens %d must be in [0, max_tokens = %d]", p->min_tokens, p->max_tokens);
    if (p->logprobs > MAX_TOP_LOGPROBS || p->prompt_logprobs > MAX_TOP_LOGPROBS)
        return err_fail(err, "request: logprobs and prompt_logprobs are limited to %d", MAX_TOP_LOGPROBS);
    if (p->n < 0 || p->n > ENG_MAX_N) return err_fail(err, "request: n = %d outside [1, %d]", p->n, ENG_MAX_N);
    if (p->n == 0) p->n = 1;
    if (p->n_stop < 0 || p->n_stop_ids < 0) return err_fail(err, "request: negative stop counts");
    for (int i = 0; i < p->n_stop; i++)
        if (!p->stop[i] || !p->stop[i][0]) return err_fail(err, "request: stop string %d is empty", i);
    const pdl_reasoning *rs = &p->reasoning;
    if (rs->enabled && (rs->end_token < 0 || rs->end_token >= c->vocab || rs->start_token < -1 ||
                        rs->start_token >= c->vocab || (rs->start_token < 0 && !rs->starts_inside)))
        return err_fail(err, "request: reasoning markers %d / %d are not tokens of the vocabulary [0, %d)",
                        rs->start_token, rs->end_token, c->vocab);
    if ((unsigned)p->pooling > PDL_POOLING_CLS) return err_fail(err, "request: unknown pooling %d", (int)p->pooling);
    if (p->lora && p->lora->model != e->model)
        return err_fail(err, "request: the LoRA adapter was loaded for another model");
    if (!isfinite(p->lora_scale)) return err_fail(err, "request: the LoRA scale is not finite");
    if (p->pooling != PDL_POOLING_NONE && (p->n > 1 || p->grammar || rs->enabled || p->prompt_logprobs >= 0))
        return err_fail(err, "request: an embedding request takes no n > 1, grammar, reasoning or prompt logprobs");
    if (p->grammar && gram_vocab_size(gram_grammar_vocab(p->grammar)) != e->runner.vocab)
        return err_fail(err, "request: the grammar was compiled for a vocabulary of %d tokens, the model has %d",
                        gram_vocab_size(gram_grammar_vocab(p->grammar)), e->runner.vocab);
    return 0;
}

/* The engine's record of a validated request: its own copies of what the
 * parameters point to (they point into the copies), the tokens min_tokens
 * holds back, the prefix cache's salt, the grammar and stop matcher
 * referenced, its images encoded and laid over the prompt. NULL (err set)
 * when out of memory or an image fails. */
static eng_request *request_new(pdl_engine *e, const pdl_request_params *p, const int32_t *prompt, size_t n_prompt,
                                pdl_event_fn cb, void *user, pdl_error *err) {
    const pdl_model_config *c = &e->model->cfg;
    eng_request *r = calloc(1, sizeof *r);
    if (!r) {
        err_fail(err, "request: out of memory");
        return NULL;
    }
    r->id = e->next_request_id++;
    r->params = *p;
    r->params.lora = NULL; /* a reference of its own, taken below */
    r->n = p->n;
    r->cb = cb;
    r->user = user;
    int n_bias = p->sampling.n_logit_bias;
    r->stop_strings = calloc((size_t)(p->n_stop ? p->n_stop : 1), sizeof *r->stop_strings);
    r->stop_ids = malloc((size_t)(p->n_stop_ids ? p->n_stop_ids : 1) * sizeof *r->stop_ids);
    r->logit_bias = malloc((size_t)(n_bias ? n_bias : 1) * sizeof *r->logit_bias);
    r->min_banned = malloc((size_t)(p->n_stop_ids + c->n_eos + 1) * sizeof *r->min_banned);
    bool oom = !r->stop_strings || !r->stop_ids || !r->logit_bias || !r->min_banned;
    for (int i = 0; !oom && i < p->n_stop; i++) oom = !(r->stop_strings[i] = strdup(p->stop[i]));
    if (!oom && p->n_stop_ids) memcpy(r->stop_ids, p->stop_ids, (size_t)p->n_stop_ids * sizeof *r->stop_ids);
    if (!oom && n_bias) memcpy(r->logit_bias, p->sampling.logit_bias, (size_t)n_bias * sizeof *r->logit_bias);
    r->params.stop = (const char *const *)r->stop_strings;
    r->params.stop_ids = r->stop_ids;
    r->params.sampling.logit_bias = r->logit_bias;
    if (!oom) {
        /* what min_tokens holds back: the tokens that would end the sequence */
        for (int i = 0; i < p->n_stop_ids; i++) r->min_banned[r->n_min_banned++] = p->stop_ids[i];
        for (int i = 0; !p->ignore_eos && i < c->n_eos; i++) r->min_banned[r->n_min_banned++] = c->eos_ids[i];
    }
    if (!oom && p->cache_salt) oom = !(r->cache_salt = strdup(p->cache_salt));
    r->params.cache_salt = r->cache_salt;
    /* a LoRA adapter and its scale are part of the prefix-cache key: K/V
     * computed under one adapter is never offered to another */
    struct {
        uint64_t key[2];
        float scale;
        uint32_t pad;
    } lora_key = {{0, 0}, 0, 0};
    if (p->lora) {
        r->params.lora = pdl_lora_ref(p->lora);
        pdl_lora_info li;
        pdl_lora_get_info(p->lora, &li);
        lora_key.key[0] = li.key[0], lora_key.key[1] = li.key[1];
        lora_key.scale = p->lora_scale == 0.0f ? 1.0f : p->lora_scale;
    }
    r->root_hash = bpool_root_hash_keyed(r->cache_salt, &lora_key, p->lora ? sizeof lora_key : 0);
    r->salt_check = bpool_extra_check_keyed(r->cache_salt, &lora_key, p->lora ? sizeof lora_key : 0);
    /* every prompt row must be computed for its logprobs, or for mean and first-row pooling */
    r->no_prefix_cache = p->prompt_logprobs >= 0 || p->pooling == PDL_POOLING_MEAN || p->pooling == PDL_POOLING_CLS;
    if (p->grammar) r->grammar = gram_grammar_ref(p->grammar);
    if (!oom && request_images(e, r, p, prompt, n_prompt, err)) {
        eng_request_free(r);
        return NULL;
    }
    if (!oom && c->encoder) { /* BERT: the whole prompt is one two-way span (validate_request: it fits a step) */
        r->no_prefix_cache = true; /* a row's K/V depends on the rows after it */
        oom = !(r->span_first = calloc(n_prompt, sizeof *r->span_first)) ||
              !(r->span_last = malloc(n_prompt * sizeof *r->span_last));
        for (size_t i = 0; !oom && i < n_prompt; i++) r->span_last[i] = (int32_t)n_prompt - 1;
    }
    r->params.images = NULL; /* not kept: the rows are */
    if (!oom && p->stop_matcher) {
        if (stop_matcher_count(p->stop_matcher) != p->n_stop) {
            err_fail(err, "request: the stop matcher was made for %d stop strings, the request has %d",
                     stop_matcher_count(p->stop_matcher), p->n_stop);
            eng_request_free(r);
            return NULL;
        }
        r->stops = stop_matcher_ref(p->stop_matcher);
    } else if (!oom && p->n_stop > 0 && stop_matcher_new(&r->stops, p->stop, NULL, p->n_stop, err)) {
        err_fail_prefix(err, "request");
        eng_request_free(r);
        return NULL;
    }
    r->params.stop_matcher = NULL; /* r->stops holds it */
    if (oom) {
        err_fail(err, "request: out of memory");
        eng_request_free(r);
        return NULL;
    }
    return r;
}

int pdl_engine_add_request(pdl_engine *e, const int32_t *prompt, size_t n_prompt, const pdl_request_params *params,
                           pdl_event_fn cb, void *user, uint64_t *id_out, pdl_error *err) {
    pdl_request_params p = {.logprobs = -1, .prompt_logprobs = -1};
    if (params) p = *params;
    if (validate_request(e, prompt, n_prompt, &p, err)) return -1;
    eng_request *r = request_new(e, &p, prompt, n_prompt, cb, user, err);
    if (!r) return -1;
    eng_seq *q = eng_seq_new(e, r, 0, prompt, (int)n_prompt, (int)n_prompt);
    if (!q) {
        eng_request_free(r);
        return err_fail(err, "request: out of memory");
    }
    r->n_live = 1;
    q->fork_pending = r->n > 1;
    if (eng_track(e, q, err) || sched_add(&e->sched, q, err)) {
        eng_untrack(e, q);
        eng_seq_free(q);
        eng_request_free(r);
        return -1;
    }
    if (id_out) *id_out = r->id;
    return 0;
}
