/*
 * generate.c - continuation of one prompt: prefill, then one decode row per
 * step, sampling each next token, until max_tokens, EOS or the context end.
 *
 * Prefill goes through the forward in chunks (logits only for the last row
 * of the last chunk). The continuous-batching engine replaces this loop for
 * many requests; the single-request case stays here for `pagedlm run`.
 */
#include <stdlib.h>

#include "model/kv_cache.h"
#include "model/model.h"
#include "util/error.h"

#define PREFILL_CHUNK 512
#define BLOCK_SIZE 16

static bool is_eos(const pdl_model_config *c, int32_t id) {
    for (int i = 0; i < c->n_eos; i++)
        if (c->eos_ids[i] == id) return true;
    return false;
}

int pdl_generate(pdl_model *m, const int32_t *prompt, size_t n_prompt, const pdl_generate_params *params,
                 pdl_token_callback cb, void *user, int32_t **out_ids, size_t *n_out, pdl_error *err) {
    *out_ids = NULL;
    *n_out = 0;
    if (n_prompt == 0) return pdl_fail(err, "empty prompt: at least one token is needed");
    if (n_prompt >= (size_t)m->ctx_size)
        return pdl_fail(err, "prompt of %zu tokens does not fit the context size %d", n_prompt, m->ctx_size);
    for (size_t i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= m->cfg.vocab)
            return pdl_fail(err, "prompt token %zu: id %d out of range [0, %d)", i, prompt[i], m->cfg.vocab);
    int max_new = params->max_tokens;
    if (max_new < 0) return pdl_fail(err, "max_tokens %d must not be negative", max_new);
    size_t room = (size_t)m->ctx_size - n_prompt;
    if ((size_t)max_new > room) max_new = (int)room;

    /* KV for exactly the positions this request can reach, not the whole
     * context (a 128k-context model would otherwise reserve gigabytes) */
    int n_blocks = (int)((n_prompt + (size_t)max_new + BLOCK_SIZE - 1) / BLOCK_SIZE);
    pdl_kv_cache *kv = NULL;
    if (pdl_kv_cache_create(&kv, m, params->kv_dtype, BLOCK_SIZE, n_blocks, err)) return -1;
    pdl_sampler *sampler = pdl_sampler_new(&params->sampling, m->cfg.vocab);
    float *logits = malloc((size_t)m->cfg.vocab * sizeof *logits);
    int32_t *ids = malloc((size_t)(max_new ? max_new : 1) * sizeof *ids);
    pdl_detok *detok = cb ? pdl_detok_new(m, prompt, n_prompt) : NULL;
    pdl_seq seq = {0};
    int rc = 0;
    size_t n = 0;
    if (!sampler || !logits || !ids) {
        rc = pdl_fail(err, "out of memory");
        goto done;
    }
    for (size_t off = 0; off < n_prompt && rc == 0 && max_new > 0; off += PREFILL_CHUNK) {
        size_t len = n_prompt - off < PREFILL_CHUNK ? n_prompt - off : PREFILL_CHUNK;
        bool last = off + len == n_prompt;
        rc = pdl_seq_forward(m, kv, &seq, prompt + off, (int)len, last ? PDL_LOGITS_LAST : PDL_LOGITS_NONE, logits,
                             err);
    }
    while (rc == 0 && (int)n < max_new) {
        int32_t tok = pdl_sampler_sample(sampler, logits);
        ids[n++] = tok;
        bool go_on = true;
        if (cb) go_on = cb(tok, detok ? pdl_detok_push(detok, tok) : "", user);
        if (params->stop_at_eos && is_eos(&m->cfg, tok)) break;
        if (!go_on || (int)n == max_new) break;
        rc = pdl_seq_forward(m, kv, &seq, &tok, 1, PDL_LOGITS_LAST, logits, err);
    }
    if (rc == 0 && cb && detok) {
        const char *tail = pdl_detok_flush(detok);
        if (tail[0]) cb(-1, tail, user);
    }
done:
    pdl_seq_release(kv, &seq);
    pdl_kv_cache_free(kv);
    pdl_sampler_free(sampler);
    pdl_detok_free(detok);
    free(logits);
    if (rc != 0) {
        free(ids);
        return -1;
    }
    *out_ids = ids;
    *n_out = n;
    return 0;
}
