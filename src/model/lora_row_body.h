/*
 * lora_row_body.h - one row's LoRA delta, y += B ((s A) x), as plain C
 * compiled once per instruction set (lora.c portable, lora_avx2.c,
 * lora_avx512.c with their flags, chosen at run time by lora_row_for):
 * the compiler vectorises the same operations in the same order at each
 * width, so every build gives the portable build's bits (tests/test_lora.c
 * compares them). Defines LORA_ROW_NAME; needs lora.h.
 */
#include "model/lora.h"

/* 16 partial sums over i mod 16, the tail into the first lanes, then a
 * fixed pairwise tree: no reassociation is needed to vectorise it */
static inline float lora_row_dot(const float *a, const float *b, int n) {
    float acc[16] = {0};
    int i = 0;
    for (; i + 16 <= n; i += 16)
        for (int j = 0; j < 16; j++) acc[j] += a[i + j] * b[i + j];
    for (int j = 0; i + j < n; j++) acc[j] += a[i + j] * b[i + j];
    for (int w = 8; w >= 1; w /= 2)
        for (int j = 0; j < w; j++) acc[j] += acc[j + w];
    return acc[0];
}

void LORA_ROW_NAME(const lora_pair *pr, int rank, float scale, const float *x, float *y) {
    float t[PDL_LORA_MAX_RANK];
    for (int k = 0; k < rank; k++) t[k] = scale * lora_row_dot(pr->a + (size_t)k * pr->in, x, pr->in);
    int out = pr->out;
    for (int k = 0; k < rank; k++) { /* k ascending: a fixed order per output */
        const float *bk = pr->bt + (size_t)k * out;
        float c = t[k];
        for (int o = 0; o < out; o++) y[o] += c * bk[o];
    }
}
