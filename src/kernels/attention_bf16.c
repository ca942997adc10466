/*
 * attention_bf16.c - attention in the BF16 order of attention.h, portable:
 * the reference the AVX-512 BF16 tiles (attention_avx512bf16.c) give bit
 * for bit, and the portable family's attention when that order is on (the
 * exact emulation of VDPBF16PS, as weight_panels.c's portable BF16 panel
 * tile).
 * One query at a time, one element at a time: for the tests and for shapes
 * no tile takes, not for speed.
 */
#include "kernels/attention.h"

#include <float.h>
#include <math.h>

#include "kernels/fp16.h"

#define ATTN_COMMON_ONLY
#define ATTN_F16(h) fp16_f16_to_f32(h)
#include "kernels/attention_body.h"

/* A denormal as zero of its sign (VDPBF16PS' FTZ). */
static inline float daz(float x) { return fabsf(x) < FLT_MIN ? copysignf(0.0f, x) : x; }

/* x rounded to BF16 as VCVTNEPS2BF16 rounds it: a denormal as zero first,
 * then to nearest even (no result is denormal after that). */
static inline float bf(float x) { return fp16_bf16_to_f32(fp16_f32_to_bf16_daz(x)); }

/* One step of VDPBF16PS for one lane: a and b are BF16 values (never
 * denormal), their product exact in float, one rounding, the result
 * flushed. */
static inline float dp(float acc, float a, float b) { return daz(fmaf(a, b, acc)); }

/* Element d of the key in slot of the head at element e0, as a float. */
static float key_at(const pdl_attn_kv *kv, int hd, int e0, int64_t slot, int d) {
    int bs = kv->block_size;
    if (kv->kv_is_q8 || kv->kv_is_q4) {
        int q4 = kv->kv_is_q4, gs = attn_q8_group(hd), cb = attn_kvq_code_bytes(hd, q4);
        const uint8_t *kb = kv->k;
        float S = fp16_f16_to_f32(attn_half_at(kb + attn_kvq_k_scale(slot, bs, kv->kv_dim, hd, e0 + d, q4)));
        return S * attn_code(kb[attn_kvq_k_byte(slot, bs, kv->kv_dim, hd, e0 + d, q4)], q4, d % gs >= cb);
    }
    size_t at = attn_k_index(slot, bs, kv->kv_dim, e0 + d);
    return kv->kv_is_f16 ? fp16_f16_to_f32(((const uint16_t *)kv->k)[at]) : ((const float *)kv->k)[at];
}

/* Element d of the value in slot, likewise. */
static float value_at(const pdl_attn_kv *kv, int hd, int e0, int64_t slot, int d) {
    int bs = kv->block_size;
    if (kv->kv_is_q8 || kv->kv_is_q4) {
        int q4 = kv->kv_is_q4, gs = attn_q8_group(hd), cb = attn_kvq_code_bytes(hd, q4);
        const uint8_t *row = (const uint8_t *)kv->v + attn_kvq_v_byte(slot, bs, kv->kv_dim, hd, e0 + d, q4);
        return fp16_f16_to_f32(attn_half_at(row)) * attn_code(row[2 + d % gs % cb], q4, d % gs >= cb);
    }
    size_t at = attn_v_index(slot, bs, kv->kv_dim, hd, e0 + d);
    return kv->kv_is_f16 ? fp16_f16_to_f32(((const uint16_t *)kv->v)[at]) : ((const float *)kv->v)[at];
}

/* One query over keys [first, last]. */
static void bf16_one(float *out, const float *q, int hd, int kv_head, float scale, float softcap, float sink,
                     int first, int last, const pdl_attn_kv *kv, float *scores) {
    int e0 = kv_head * hd;
    float max = -INFINITY;
    for (int j = first; j <= last; j++) {
        int64_t slot = attn_slot(kv, j);
        float acc = 0.0f;
        for (int t = 0; t < hd; t += 2) {
            acc = dp(acc, bf(q[t + 1]), bf(key_at(kv, hd, e0, slot, t + 1)));
            acc = dp(acc, bf(q[t]), bf(key_at(kv, hd, e0, slot, t)));
        }
        float s = acc * scale;
        if (softcap > 0.0f) s = tanhf(s / softcap) * softcap;
        scores[j - first] = s;
        if (s > max) max = s;
    }
    attn_softmax(scores, last - first + 1, max, sink);
    for (int d = 0; d < hd; d++) out[d] = 0.0f;
    for (int m = first / 2; m <= last / 2; m++)
        for (int j = 2 * m + 1; j >= 2 * m; j--) { /* the odd position first */
            int in = j >= first && j <= last;
            float p = in ? bf(scores[j - first]) : 0.0f;
            int64_t slot = in ? attn_slot(kv, j) : 0;
            for (int d = 0; d < hd; d++) out[d] = dp(out[d], p, in ? bf(value_at(kv, hd, e0, slot, d)) : 0.0f);
        }
}

void attn_queries_bf16_scalar(float *const *out, const float *const *q, const int *pos, int n_q, int head_dim,
                              int kv_head, float scale, float softcap, const float *sinks, int window,
                              const pdl_attn_kv *kv, float *scratch) {
    for (int i = 0; i < n_q; i++)
        bf16_one(out[i], q[i], head_dim, kv_head, scale, softcap, attn_sink(sinks, i), attn_first(pos[i], window),
                 pos[i], kv, scratch);
}

void attn_queries_bf16_scalar_ranges(float *const *out, const float *const *q, const int *first, const int *last,
                                     int n_q, int head_dim, int kv_head, float scale, float softcap,
                                     const float *sinks, const pdl_attn_kv *kv, float *scratch) {
    for (int i = 0; i < n_q; i++)
        bf16_one(out[i], q[i], head_dim, kv_head, scale, softcap, attn_sink(sinks, i), first[i], last[i], kv,
                 scratch);
}
