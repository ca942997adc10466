/*
 * logits_probe.c - the load-time check that the selective head (norm + LM
 * head on the sampled rows only) gives exactly the bytes of the full head
 * (every row through the complete head, post-processing included).
 *
 * Models change their head in ways that are easy to get silently wrong in
 * one path only (Cohere's logit_scale, Granite's logits_scaling, Gemma's
 * soft-capping); when the two paths disagree the engine keeps full logits.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/context.h"
#include "model/model.h"
#include "util/error.h"

#define PROBE_TOKENS 12

void probe_compare(const float *full, const float *sel, int n_rows, int vocab, const int32_t *rows, int n_tokens,
                   bool *ok, char *reason, size_t reason_len) {
    size_t n = (size_t)n_rows * vocab;
    *ok = memcmp(full, sel, n * sizeof(float)) == 0;
    if (reason && reason_len) reason[0] = '\0';
    if (*ok || !reason || !reason_len) return;
    double md = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)full[i] - (double)sel[i]);
        if (d > md || d != d) md = d;
    }
    snprintf(reason, reason_len,
             "selective logits differ from full logits on sampled rows %d and %d of a %d-token probe "
             "(max |difference| %.3g): using full logits",
             rows[0], rows[n_rows - 1], n_tokens, md);
}

int probe_run(pdl_context *ctx, bool *ok, char *reason, size_t reason_len, pdl_error *err) {
    const pdl_model *m = ctx->model;
    const pdl_model_config *c = &m->cfg;
    if (c->encoder) { /* no head to compare */
        *ok = true;
        if (reason && reason_len) snprintf(reason, reason_len, "an encoder has no LM head: nothing to probe");
        return 0;
    }
    int n = PROBE_TOKENS < m->ctx_size ? PROBE_TOKENS : m->ctx_size;
    int32_t tokens[PROBE_TOKENS], pos[PROBE_TOKENS], slots[PROBE_TOKENS];
    for (int i = 0; i < n; i++) {
        /* spread over the vocabulary, BOS first when the model has one */
        tokens[i] = i == 0 && c->bos_id >= 0 ? c->bos_id : (int32_t)(((int64_t)i * 7919 + 13) % c->vocab);
        pos[i] = i;
        slots[i] = i;
    }
    /* sampled rows as the engine asks for them: an inner row and the last */
    int32_t rows[2] = {n / 2, n - 1};
    int n_rows = n > 1 ? 2 : 1;
    if (n == 1) rows[0] = 0;
    pdl_kv_cache *kv = NULL;
    if (pdl_kv_cache_create(&kv, m, PDL_KV_F32, n, 1, err)) return -1;
    int32_t block0 = 0; /* the cache is this sequence's own */
    const int32_t *tables[1] = {&block0};
    int32_t cu[2] = {0, n};
    float *full = malloc((size_t)2 * n_rows * c->vocab * sizeof *full);
    if (!full) {
        pdl_kv_cache_free(kv);
        return err_fail(err, "probe: out of memory");
    }
    float *sel = full + (size_t)n_rows * c->vocab;
    pdl_batch b = {.n_tokens = n, .token_ids = tokens, .positions = pos, .slot_mapping = slots, .n_seqs = 1,
                   .cu_seqlens = cu, .block_tables = tables, .n_logits = n_rows, .logits_indices = rows,
                   .full_logits = true};
    static const int32_t slot0 = 0; /* a hybrid model's state (both runs start at position 0: from zero) */
    if (c->n_rec_layers > 0) b.state_slots = &slot0;
    int rc = pdl_forward(ctx, kv, &b, full, err);
    if (rc == 0) {
        b.full_logits = false;
        rc = pdl_forward(ctx, kv, &b, sel, err);
    }
    pdl_kv_cache_free(kv);
    if (rc) {
        free(full);
        return err_fail_prefix(err, "selective-logits probe");
    }
    probe_compare(full, sel, n_rows, c->vocab, rows, n, ok, reason, reason_len);
    free(full);
    return 0;
}

int pdl_model_probe_selective_logits(const pdl_model *m, bool *ok, char *reason, size_t reason_len, pdl_error *err) {
    pdl_context *ctx = NULL;
    if (pdl_context_create(&ctx, m, NULL, err)) return err_fail_prefix(err, "selective-logits probe");
    int rc = probe_run(ctx, ok, reason, reason_len, err);
    pdl_context_free(ctx);
    return rc;
}
