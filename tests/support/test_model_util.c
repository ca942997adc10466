/*
 * test_model_util.c - the model helper of tests/test_util.h: every row's
 * logits of a token sequence, and a forward whose kernels cannot have their
 * scratch (kept apart from test_util.c so the kernel tests need only the
 * kernels; scripts/test-aarch64 links them so).
 */
#include "test_util.h"

#include <stdlib.h>
#include <string.h>

#include "model/context.h"
#include "model/model.h"
#include "pagedlm.h"

pdl_context *test_context(const pdl_model *m) {
    pdl_context *ctx = NULL;
    pdl_error err;
    REQUIRE_MSG(pdl_context_create(&ctx, m, NULL, &err) == 0, "%s", err.message);
    return ctx;
}

float *test_context_row_logits(pdl_context *ctx, const int32_t *tokens, size_t n) {
    const pdl_model *m = pdl_context_model(ctx);
    pdl_model_info info;
    pdl_model_get_info(m, &info);
    pdl_kv_cache *kv = NULL;
    pdl_error err;
    REQUIRE_MSG(pdl_kv_cache_create(&kv, m, PDL_KV_F32, 16, (int)(n / 16 + 1), &err) == 0, "%s", err.message);
    float *logits = malloc(n * (size_t)info.vocab * sizeof *logits);
    pdl_seq seq = {0};
    int rc = pdl_seq_forward(ctx, kv, &seq, tokens, NULL, (int)n, PDL_LOGITS_ALL, logits, &err);
    pdl_seq_release(kv, &seq);
    pdl_kv_cache_free(kv);
    REQUIRE_MSG(rc == 0, "%s", err.message);
    return logits;
}

float *test_all_row_logits(pdl_model *m, const int32_t *tokens, size_t n) {
    pdl_context *ctx = test_context(m);
    float *logits = test_context_row_logits(ctx, tokens, n);
    pdl_context_free(ctx);
    return logits;
}

/* One forward of tokens at the sequence's next positions with the take
 * fail_in from now failing (0: none); the takes it made in *takes. */
static int forward_failing(pdl_context *ctx, pdl_kv_cache *kv, pdl_seq *seq, const int32_t *tokens, int n,
                           long fail_in, float *logits, long *takes, pdl_error *err) {
    pdl_scratch *ks = &ctx->scratch.kernel;
    long t0 = ks->takes;
    ks->fail_in = fail_in;
    int rc = pdl_seq_forward(ctx, kv, seq, tokens, NULL, n, PDL_LOGITS_ALL, logits, err);
    *takes = ks->takes - t0;
    return rc;
}

int test_forward_fails_at_every_scratch_take(pdl_context *ctx, const int32_t *tokens, size_t n) {
    const pdl_model *m = pdl_context_model(ctx);
    pdl_model_info info;
    pdl_model_get_info(m, &info);
    REQUIRE(n >= 2);
    pdl_kv_cache *kv = NULL;
    pdl_error err;
    REQUIRE_MSG(pdl_kv_cache_create(&kv, m, PDL_KV_F32, 16, (int)(n / 16 + 1), &err) == 0, "%s", err.message);
    size_t row = (size_t)info.vocab * sizeof(float);
    float *want = malloc(n * row), *got = malloc(n * row);
    REQUIRE(want && got);
    /* the clean run: a prefill of n - 1 rows, then one decode row */
    int np = (int)n - 1;
    long takes[2];
    pdl_seq seq = {0};
    REQUIRE_MSG(forward_failing(ctx, kv, &seq, tokens, np, 0, want, &takes[0], &err) == 0, "%s", err.message);
    REQUIRE_MSG(forward_failing(ctx, kv, &seq, tokens + np, 1, 0, want + (size_t)np * info.vocab, &takes[1], &err) == 0,
                "%s", err.message);
    pdl_seq_release(kv, &seq);
    int checked = 0;
    for (int phase = 0; phase < 2; phase++) {
        const int32_t *tok = phase ? tokens + np : tokens;
        int rows = phase ? 1 : np;
        float *out = phase ? got + (size_t)np * info.vocab : got, *ref = phase ? want + (size_t)np * info.vocab : want;
        for (long k = 1; k <= takes[phase]; k++) {
            long t;
            if (phase) /* the prefill again, cleanly */
                REQUIRE_MSG(forward_failing(ctx, kv, &seq, tokens, np, 0, got, &t, &err) == 0, "%s", err.message);
            memset(out, 0xA5, (size_t)rows * row);
            err.message[0] = 0;
            int rc = forward_failing(ctx, kv, &seq, tok, rows, k, out, &t, &err);
            CHECK_MSG(rc != 0, "%s: take %ld failed, yet the forward reported success", phase ? "decode" : "prefill", k);
            CHECK_MSG(strstr(err.message, "kernel scratch") != NULL, "take %ld: error '%s' does not name the scratch",
                      k, err.message);
            bool untouched = true;
            for (size_t i = 0; i < (size_t)rows * row; i++) untouched &= ((const uint8_t *)out)[i] == 0xA5;
            CHECK_MSG(untouched, "%s: take %ld failed, yet logits were written", phase ? "decode" : "prefill", k);
            CHECK_MSG(ctx->scratch.kernel.fail_in == 0, "take %ld: the failure was not reached", k);
            /* the failed forward left nothing behind: run again, the clean bytes */
            REQUIRE_MSG(forward_failing(ctx, kv, &seq, tok, rows, 0, out, &t, &err) == 0, "%s", err.message);
            CHECK_MSG(memcmp(out, ref, (size_t)rows * row) == 0, "%s after a failure at take %ld: logits differ",
                      phase ? "decode" : "prefill", k);
            pdl_seq_release(kv, &seq);
            checked++;
        }
    }
    CHECK_MSG(takes[0] > 0 && takes[1] > 0, "the forward took no kernel scratch (%ld, %ld): nothing was tested",
              takes[0], takes[1]);
    free(want), free(got);
    pdl_kv_cache_free(kv);
    return checked;
}

void test_log_no_unused_tensors(const char *line, void *user) {
    CHECK_MSG(strstr(line, "not used") == NULL, "%s: %s", user ? (const char *)user : "", line);
}
