/*
 * cpu_ops.c - RMSNorm, RoPE, SiLU-gate and row dequantization (portable C).
 */
#include "kernels/cpu_ops.h"

#include <math.h>

#include "kernels/fp16.h"

void pdl_rmsnorm(float *out, const float *x, const float *w, int n, float eps) {
    /* Sum of squares in double: exact enough to match float64 references and
     * independent of vector width. */
    double ss = 0.0;
    for (int i = 0; i < n; i++) ss += (double)x[i] * (double)x[i];
    float scale = (float)(1.0 / sqrt(ss / n + (double)eps));
    for (int i = 0; i < n; i++) out[i] = x[i] * scale * w[i];
}

void pdl_rope(float *x, int rope_dim, int pos, const float *inv_freq, int neox) {
    int half = rope_dim / 2;
    for (int i = 0; i < half; i++) {
        double theta = (double)pos * (double)inv_freq[i];
        float c = (float)cos(theta), s = (float)sin(theta);
        int a = neox ? i : 2 * i;
        int b = neox ? i + half : 2 * i + 1;
        float x0 = x[a], x1 = x[b];
        x[a] = x0 * c - x1 * s;
        x[b] = x0 * s + x1 * c;
    }
}

void pdl_silu_mul(float *gate, const float *up, int n) {
    for (int i = 0; i < n; i++) {
        float g = gate[i];
        gate[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

void pdl_dequant_row(const pdl_tensor *t, int64_t row, float *out, int64_t n) {
    const uint8_t *base = (const uint8_t *)t->data + (size_t)row * pdl_dtype_row_bytes(t->dtype, n);
    switch (t->dtype) {
    case PDL_DTYPE_F32: {
        const float *p = (const float *)(const void *)base;
        for (int64_t i = 0; i < n; i++) out[i] = p[i];
        break;
    }
    case PDL_DTYPE_F16: {
        const uint16_t *p = (const uint16_t *)(const void *)base;
        for (int64_t i = 0; i < n; i++) out[i] = pdl_f16_to_f32(p[i]);
        break;
    }
    case PDL_DTYPE_BF16: {
        const uint16_t *p = (const uint16_t *)(const void *)base;
        for (int64_t i = 0; i < n; i++) out[i] = pdl_bf16_to_f32(p[i]);
        break;
    }
    case PDL_DTYPE_Q8_0:
        for (int64_t b = 0; b < n / 32; b++) {
            const uint8_t *blk = base + b * 34;
            uint16_t d16;
            memcpy(&d16, blk, 2);
            float d = pdl_f16_to_f32(d16);
            const int8_t *q = (const int8_t *)(blk + 2);
            for (int j = 0; j < 32; j++) out[b * 32 + j] = d * (float)q[j];
        }
        break;
    default:
        break;
    }
}
