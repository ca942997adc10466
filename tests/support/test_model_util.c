/*
 * test_model_util.c - the model helper of tests/test_util.h: every row's
 * logits of a token sequence (kept apart from test_util.c so the kernel
 * tests need only the kernels; scripts/test-aarch64 links them so).
 */
#include "test_util.h"

#include <stdlib.h>

#include "pagedlm.h"

float *test_all_row_logits(pdl_model *m, const int32_t *tokens, size_t n) {
    pdl_model_info info;
    pdl_model_get_info(m, &info);
    pdl_kv_cache *kv = NULL;
    pdl_error err;
    REQUIRE_MSG(pdl_kv_cache_create(&kv, m, PDL_KV_F32, 16, (int)(n / 16 + 1), &err) == 0, "%s", err.message);
    float *logits = malloc(n * (size_t)info.vocab * sizeof *logits);
    pdl_seq seq = {0};
    int rc = pdl_seq_forward(m, kv, &seq, tokens, (int)n, PDL_LOGITS_ALL, logits, &err);
    pdl_seq_release(kv, &seq);
    pdl_kv_cache_free(kv);
    REQUIRE_MSG(rc == 0, "%s", err.message);
    return logits;
}
