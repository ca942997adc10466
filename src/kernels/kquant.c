/*
 * kquant.c - Q8_K activation quantization and the portable Q2_K, Q3_K,
 * Q4_K, Q5_K, Q6_K, IQ4_XS, TQ2_0 and TQ1_0 x Q8_K dot products: the reference the SIMD tiles are tested
 * against. The definitions and the float order are in kquant.h; the weight
 * layouts are those of kernels/cpu_ops.c's dequantizers.
 */
#include "kernels/kquant.h"

#include <math.h>
#include <string.h>

#include "kernels/fp16.h"
#include "kernels/iq4nl.h"

/* nearest(v), ties to even, for |v| < 2^22: v + 1.5 * 2^23 lies where the
 * float spacing is 1, so the addition rounds v as lrintf does (default
 * rounding mode) and the integer is the low bits of the sum. Plain
 * arithmetic, no float-to-int conversion: the compiler vectorizes it. */
static inline int32_t round_even(float v) {
    float f = v + 12582912.0f;
    uint32_t u;
    memcpy(&u, &f, 4);
    return (int32_t)(u - 0x4B400000u);
}

void kquant_quantize_row_q8_k(const float *x, int64_t n, pdl_block_q8k *y) {
    for (int64_t b = 0; b < n / PDL_QK_K; b++, x += PDL_QK_K, y++) {
        /* amax through the bits of |x|: for non-NaN floats their order is
         * the integers' order, and an integer max vectorizes */
        uint32_t abits = 0;
        for (int i = 0; i < PDL_QK_K; i++) {
            uint32_t u;
            memcpy(&u, &x[i], 4);
            u &= 0x7fffffffu;
            abits = u > abits ? u : abits;
        }
        float amax;
        memcpy(&amax, &abits, 4);
        if (amax == 0.0f || abits >= 0x7f800000u) { /* zero, or an infinity or NaN in the block */
            memset(y, 0, sizeof *y);
            y->d = amax;
            continue;
        }
        float iscale = 127.0f / amax;
        y->d = amax / 127.0f;
        for (int i = 0; i < PDL_QK_K; i++) {
            /* |x * iscale| <= 127 up to rounding; the clamp is a guard */
            int32_t q = round_even(x[i] * iscale);
            q = q > 127 ? 127 : q;
            q = q < -127 ? -127 : q;
            y->qs[i] = (int8_t)q;
        }
        for (int g = 0; g < 16; g++) {
            int s = 0;
            for (int i = 0; i < 16; i++) s += y->qs[16 * g + i];
            y->bsum16[g] = (int16_t)s;
        }
        for (int j = 0; j < 8; j++) y->bsum32[j] = (int16_t)(y->bsum16[2 * j] + y->bsum16[2 * j + 1]);
    }
}

static float half_at(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return fp16_f16_to_f32(h);
}

/* Q4_K block (144 bytes): f16 d, f16 dmin, 12 bytes of 6-bit scales and
 * mins, 128 bytes of nibbles; element 32 j + l of sub-block j is the low
 * (j even) or high (j odd) nibble of qs[32 (j / 2) + l]. */
float kquant_dot_q4_k_q8_k(const uint8_t *w, const pdl_block_q8k *x, int64_t nb) {
    float acc = 0.0f;
    for (int64_t b = 0; b < nb; b++, w += 144, x++) {
        const uint8_t *s = w + 4, *qs = w + 16;
        int32_t isum = 0, msum = 0;
        for (int j = 0; j < 8; j++) {
            int sc, mn;
            kquant_scale_min(s, j, &sc, &mn);
            int32_t p = 0;
            for (int l = 0; l < 32; l++) p += ((qs[32 * (j / 2) + l] >> (4 * (j % 2))) & 0xF) * x->qs[32 * j + l];
            isum += sc * p;
            msum += mn * x->bsum32[j];
        }
        acc = fmaf(half_at(w) * x->d, (float)isum, acc);
        acc = fmaf(-(half_at(w + 2) * x->d), (float)msum, acc);
    }
    return acc;
}

/* Q5_K block (176 bytes): Q4_K's f16 d, f16 dmin and 12 bytes of scales
 * and mins, then 32 bytes of high bits qh, then 128 bytes of nibbles;
 * element 32 j + l is Q4_K's nibble plus 16 times bit j of qh[l] (0..31). */
float kquant_dot_q5_k_q8_k(const uint8_t *w, const pdl_block_q8k *x, int64_t nb) {
    float acc = 0.0f;
    for (int64_t b = 0; b < nb; b++, w += 176, x++) {
        const uint8_t *s = w + 4, *qh = w + 16, *qs = w + 48;
        int32_t isum = 0, msum = 0;
        for (int j = 0; j < 8; j++) {
            int sc, mn;
            kquant_scale_min(s, j, &sc, &mn);
            int32_t p = 0;
            for (int l = 0; l < 32; l++) {
                int q = ((qs[32 * (j / 2) + l] >> (4 * (j % 2))) & 0xF) | ((qh[l] >> j) & 1) << 4;
                p += q * x->qs[32 * j + l];
            }
            isum += sc * p;
            msum += mn * x->bsum32[j];
        }
        acc = fmaf(half_at(w) * x->d, (float)isum, acc);
        acc = fmaf(-(half_at(w + 2) * x->d), (float)msum, acc);
    }
    return acc;
}

/* IQ4_XS block (136 bytes): f16 d, 16-bit scales_h, 4 bytes scales_l, 128
 * bytes of codes; in sub-block j, qs[16 j + k] holds element 32 j + k's code
 * in its low nibble and element 32 j + 16 + k's in its high (k < 16). */
float kquant_dot_iq4_xs_q8_k(const uint8_t *w, const pdl_block_q8k *x, int64_t nb) {
    float acc = 0.0f;
    for (int64_t b = 0; b < nb; b++, w += 136, x++) {
        const uint8_t *qs = w + 8;
        int32_t isum = 0;
        for (int j = 0; j < 8; j++) {
            int32_t p = 0;
            for (int k = 0; k < 16; k++) {
                p += iq4nl_values[qs[16 * j + k] & 0xF] * x->qs[32 * j + k];
                p += iq4nl_values[qs[16 * j + k] >> 4] * x->qs[32 * j + 16 + k];
            }
            isum += kquant_iq4_xs_scale(w, j) * p;
        }
        acc = fmaf(half_at(w) * x->d, (float)isum, acc);
    }
    return acc;
}

/* Q6_K block (210 bytes): 128 bytes of low nibbles ql, 64 bytes of high
 * bit pairs qh, 16 int8 scales, f16 d. Element e, h = e / 128, k =
 * (e % 128) / 32, l = e % 32: low 4 bits from ql[64 h + l + 32 (k % 2)]
 * (high nibble when k >= 2), bits 4-5 from qh[32 h + l] bits 2k; value
 * minus 32; scale scales[e / 16]. */
float kquant_dot_q6_k_q8_k(const uint8_t *w, const pdl_block_q8k *x, int64_t nb) {
    float acc = 0.0f;
    for (int64_t b = 0; b < nb; b++, w += 210, x++) {
        const uint8_t *ql = w, *qh = w + 128;
        const int8_t *sc = (const int8_t *)(w + 192);
        int32_t isum = 0;
        for (int g = 0; g < 16; g++) {
            int32_t p = 0;
            for (int i = 0; i < 16; i++) {
                int e = 16 * g + i, h = e / 128, k = (e % 128) / 32, l = e % 32;
                int lo = (ql[64 * h + l + 32 * (k % 2)] >> (4 * (k / 2))) & 0xF;
                int q = (lo | ((qh[32 * h + l] >> (2 * k)) & 3) << 4) - 32;
                p += q * x->qs[e];
            }
            isum += sc[g] * p;
        }
        acc = fmaf(half_at(w + 208) * x->d, (float)isum, acc);
    }
    return acc;
}

/* Q3_K block (110 bytes): 32 bytes hmask, 64 bytes of 2-bit q, 12 bytes of
 * scales, f16 d. Element e, h = e / 128, k = (e % 128) / 32, l = e % 32:
 * bits 2k of qs[32 h + l], minus 4 unless bit 4 h + k of hmask[l] is set
 * (-4..3); group e / 16 scales it (kquant_q3_k_scales). */
float kquant_dot_q3_k_q8_k(const uint8_t *w, const pdl_block_q8k *x, int64_t nb) {
    float acc = 0.0f;
    for (int64_t b = 0; b < nb; b++, w += 110, x++) {
        const uint8_t *hm = w, *qs = w + 32;
        int8_t sc[16];
        kquant_q3_k_scales(w + 96, sc);
        int32_t isum = 0;
        for (int g = 0; g < 16; g++) {
            int32_t p = 0;
            for (int i = 0; i < 16; i++) {
                int e = 16 * g + i, h = e / 128, k = (e % 128) / 32, l = e % 32;
                int q = (qs[32 * h + l] >> (2 * k)) & 3;
                if (!((hm[l] >> (4 * h + k)) & 1)) q -= 4;
                p += q * x->qs[e];
            }
            isum += sc[g] * p;
        }
        acc = fmaf(half_at(w + 108) * x->d, (float)isum, acc);
    }
    return acc;
}

/* Q2_K block (84 bytes): 16 scale bytes (low nibble the scale, high the
 * min of group g), 64 bytes of 2-bit q (Q3_K's positions: bits 2k of
 * qs[32 h + l]), f16 d, f16 dmin; value d sc q - dmin m. */
float kquant_dot_q2_k_q8_k(const uint8_t *w, const pdl_block_q8k *x, int64_t nb) {
    float acc = 0.0f;
    for (int64_t b = 0; b < nb; b++, w += 84, x++) {
        const uint8_t *sc = w, *qs = w + 16;
        int32_t isum = 0, msum = 0;
        for (int g = 0; g < 16; g++) {
            int32_t p = 0;
            for (int i = 0; i < 16; i++) {
                int e = 16 * g + i, h = e / 128, k = (e % 128) / 32, l = e % 32;
                p += ((qs[32 * h + l] >> (2 * k)) & 3) * x->qs[e];
            }
            isum += (sc[g] & 0xF) * p;
            msum += (sc[g] >> 4) * x->bsum16[g];
        }
        acc = fmaf(half_at(w + 80) * x->d, (float)isum, acc);
        acc = fmaf(-(half_at(w + 82) * x->d), (float)msum, acc);
    }
    return acc;
}

/* TQ2_0 block (66 bytes): 64 bytes of 2-bit codes, f16 d; value (c - 1) d
 * (kquant_tq2_0_code). */
float kquant_dot_tq2_0_q8_k(const uint8_t *w, const pdl_block_q8k *x, int64_t nb) {
    float acc = 0.0f;
    for (int64_t b = 0; b < nb; b++, w += 66, x++) {
        int32_t isum = 0;
        for (int e = 0; e < 256; e++) isum += (kquant_tq2_0_code(w, e) - 1) * x->qs[e];
        acc = fmaf(half_at(w + 64) * x->d, (float)isum, acc);
    }
    return acc;
}

/* TQ1_0 block (54 bytes): 52 bytes of trits, f16 d; value (c - 1) d
 * (kquant_tq1_0_code). */
float kquant_dot_tq1_0_q8_k(const uint8_t *w, const pdl_block_q8k *x, int64_t nb) {
    float acc = 0.0f;
    for (int64_t b = 0; b < nb; b++, w += 54, x++) {
        int32_t isum = 0;
        for (int e = 0; e < 256; e++) isum += (kquant_tq1_0_code(w, e) - 1) * x->qs[e];
        acc = fmaf(half_at(w + 52) * x->d, (float)isum, acc);
    }
    return acc;
}
