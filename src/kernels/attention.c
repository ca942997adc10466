/*
 * attention.c - paged causal attention: the portable build of the body
 * (attention_body.h, the reference), and the dispatch to the SIMD builds
 * (attention_avx512.c, attention_avx2.c, attention_neon.c; the BF16 order:
 * attention_bf16.c, attention_avx512bf16.c; the AMX order:
 * attention_amx.c) by the process's instruction set.
 */
#include "kernels/attention.h"

#include "kernels/cpu_features.h"
#include "kernels/fp16.h"
#include "pagedlm.h"
#include "util/error.h"

#include <math.h>
#include <string.h>

#define ATTN_QUERIES_FN attn_queries_scalar
#define ATTN_F16(h) fp16_f16_to_f32(h)
#include "kernels/attention_body.h"

/* Per query: its scores over the span, padded by a tile of 32 keys on
 * each side (the AVX-512 tiles score whole groups of 16 positions, the AMX
 * tiles take whole tiles of 32), and half as much again for the AMX
 * tiles' BF16 probabilities; then the BF16 and AMX tiles' buffers. */
size_t attn_queries_scratch(int n_q, int span, int head_dim) {
    size_t rows = ((size_t)n_q + 15) / 16 * 16; /* the AMX tiles' rows: whole tiles of 16 queries */
    return rows * ((size_t)span + 64) * 3 / 2 + (size_t)ATTN_BF16_SCRATCH_PER_DIM * (size_t)head_dim +
           ATTN_AMX_SCRATCH_FIXED + 16; /* + 16: the AMX tiles start their buffers on a cache line */
}

static _Atomic pdl_attn_order order_set;

void attn_set_order(pdl_attn_order order) { order_set = order; }
pdl_attn_order attn_order(void) { return order_set; }

static const char *const order_names[] = {[PDL_ATTN_F32] = "f32", [PDL_ATTN_BF16] = "bf16", [PDL_ATTN_AMX] = "amx"};

const char *attn_order_name(pdl_attn_order order) { return order_names[order]; }

int pdl_set_attention(const char *order, pdl_error *err) {
    if (!order) return 0;
    int want = -1;
    for (int i = 0; i < (int)(sizeof order_names / sizeof order_names[0]); i++)
        if (strcmp(order, order_names[i]) == 0) want = i;
    if (want < 0)
        return err_fail(err, "%s is not one of f32, bf16, amx; attention stays in the %s order", order,
                        attn_order_name(order_set));
    order_set = (pdl_attn_order)want;
    pdl_attention_table t; /* what a context made now takes */
    attn_table_for(cpu_isa_active(), order_set, &t);
    if (t.order != order_set)
        return err_fail(err, "the %s order is not available to the %s kernels here; they attend in the %s order",
                        order, cpu_isa_name(t.isa), attn_order_name(t.order));
    return 0;
}

void attn_table_for(pdl_isa isa, pdl_attn_order order, pdl_attention_table *t) {
    bool bf16 = order != PDL_ATTN_F32;
    t->isa = isa;
    t->order = PDL_ATTN_F32;
    switch (isa) {
    case PDL_ISA_AVX512:
        t->queries = attn_queries_avx512, t->ranges = attn_queries_avx512_ranges;
        t->store_f16 = attn_store_f16c;
        if (bf16 && cpu_features_get()->avx512bf16) {
            t->queries = attn_queries_avx512bf16, t->ranges = attn_queries_avx512bf16_ranges;
            t->order = PDL_ATTN_BF16;
        }
        if (order == PDL_ATTN_AMX && attn_amx_built && cpu_amx_bf16_ready()) {
            t->queries = attn_queries_amx, t->ranges = attn_queries_amx_ranges;
            t->order = PDL_ATTN_AMX;
        }
        break;
    case PDL_ISA_AVX2:
        t->queries = attn_queries_avx2, t->ranges = attn_queries_avx2_ranges;
        t->store_f16 = attn_store_f16c;
        break;
    case PDL_ISA_NEON:
        t->queries = attn_queries_neon, t->ranges = attn_queries_neon_ranges;
        t->store_f16 = attn_store_neon;
        break;
    default:
        t->isa = PDL_ISA_SCALAR;
        t->queries = attn_queries_scalar, t->ranges = attn_queries_scalar_ranges;
        t->store_f16 = attn_store_scalar;
        if (bf16) { /* the exact emulation, as the portable BF16 panel tile */
            t->queries = attn_queries_bf16_scalar, t->ranges = attn_queries_bf16_scalar_ranges;
            t->order = PDL_ATTN_BF16;
        }
    }
}

void attn_queries(float *const *out, const float *const *q, const int *pos, int n_q, int head_dim,
                  int kv_head, float scale, float softcap, const float *sinks, int window,
                  const pdl_attn_kv *kv, float *scratch) {
    pdl_attention_table t;
    attn_table_for(cpu_isa_active(), PDL_ATTN_F32, &t);
    t.queries(out, q, pos, n_q, head_dim, kv_head, scale, softcap, sinks, window, kv, scratch);
}

void attn_ranges(float *const *out, const float *const *q, const int *first, const int *last, int n_q,
                 int head_dim, int kv_head, float scale, float softcap, const float *sinks,
                 const pdl_attn_kv *kv, float *scratch) {
    pdl_attention_table t;
    attn_table_for(cpu_isa_active(), PDL_ATTN_F32, &t);
    t.ranges(out, q, first, last, n_q, head_dim, kv_head, scale, softcap, sinks, kv, scratch);
}

void attn_store_scalar(void *kpool, void *vpool, int kv_is_f16, int kv_dim, int head_dim, int block_size,
                       int64_t slot, const float *k, const float *v) {
    for (int e = 0; e < kv_dim; e++) {
        size_t ke = attn_k_index(slot, block_size, kv_dim, e);
        size_t ve = attn_v_index(slot, block_size, kv_dim, head_dim, e);
        if (kv_is_f16) {
            ((uint16_t *)kpool)[ke] = fp16_f32_to_f16(k[e]);
            ((uint16_t *)vpool)[ve] = fp16_f32_to_f16(v[e]);
        } else {
            ((float *)kpool)[ke] = k[e];
            ((float *)vpool)[ve] = v[e];
        }
    }
}

void attn_q8_quantize_group(const float *x, int n, uint16_t *scale, int8_t *q) {
    float amax = 0.0f;
    for (int i = 0; i < n; i++) {
        float a = fabsf(x[i]);
        if (a > amax) amax = a; /* NaN never wins */
    }
    float d = amax / 127.0f;
    if (d > 65504.0f) d = 65504.0f; /* the largest finite half */
    *scale = fp16_f32_to_f16(d);
    float s = fp16_f16_to_f32_exact(*scale);
    for (int i = 0; i < n; i++) {
        float v = s > 0.0f ? x[i] / s : 0.0f;
        q[i] = (int8_t)(v >= 127.0f ? 127 : v <= -127.0f ? -127 : v == v ? (int)roundf(v) : 0);
    }
}

void attn_store_q8_0(void *kpool, void *vpool, int kv_is_f16, int kv_dim, int head_dim, int block_size,
                     int64_t slot, const float *k, const float *v) {
    (void)kv_is_f16;
    uint8_t *kp = kpool, *vp = vpool;
    int gs = attn_q8_group(head_dim);
    for (int e = 0; e < kv_dim; e += gs) {
        uint16_t s;
        int8_t q[32];
        attn_q8_quantize_group(k + e, gs, &s, q);
        memcpy(kp + attn_q8_k_scale(slot, block_size, kv_dim, head_dim, e), &s, 2);
        for (int i = 0; i < gs; i++) kp[attn_q8_k_byte(slot, block_size, kv_dim, head_dim, e + i)] = (uint8_t)q[i];
        uint8_t *vb = vp + attn_q8_v_byte(slot, block_size, kv_dim, head_dim, e);
        attn_q8_quantize_group(v + e, gs, &s, q);
        memcpy(vb, &s, 2);
        memcpy(vb + 2, q, (size_t)gs);
    }
}

void attn_q4_quantize_group(const float *x, int n, uint16_t *scale, uint8_t *codes) {
    float amax = 0.0f, m = 0.0f;
    for (int i = 0; i < n; i++) {
        float a = fabsf(x[i]);
        if (a > amax) amax = a, m = x[i]; /* NaN never wins */
    }
    float d = m / -8.0f;
    if (d > 65504.0f) d = 65504.0f;
    if (d < -65504.0f) d = -65504.0f;
    *scale = fp16_f32_to_f16(d);
    float s = fp16_f16_to_f32_exact(*scale);
    uint8_t c[32];
    for (int i = 0; i < n; i++) {
        float v = s != 0.0f ? x[i] / s + 8.5f : 8.5f;
        c[i] = (uint8_t)(v >= 15.0f ? 15 : v >= 0.0f ? (int)v : v == v ? 0 : 8);
    }
    for (int i = 0; i < n / 2; i++) codes[i] = (uint8_t)(c[i] | c[i + n / 2] << 4);
}

void attn_store_q4_0(void *kpool, void *vpool, int kv_is_f16, int kv_dim, int head_dim, int block_size,
                     int64_t slot, const float *k, const float *v) {
    (void)kv_is_f16;
    uint8_t *kp = kpool, *vp = vpool;
    int gs = attn_q8_group(head_dim), cb = gs / 2;
    for (int e = 0; e < kv_dim; e += gs) {
        uint16_t s;
        uint8_t c[16];
        attn_q4_quantize_group(k + e, gs, &s, c);
        memcpy(kp + attn_kvq_k_scale(slot, block_size, kv_dim, head_dim, e, 1), &s, 2);
        for (int i = 0; i < cb; i++) kp[attn_kvq_k_byte(slot, block_size, kv_dim, head_dim, e + i, 1)] = c[i];
        uint8_t *vb = vp + attn_kvq_v_byte(slot, block_size, kv_dim, head_dim, e, 1);
        attn_q4_quantize_group(v + e, gs, &s, c);
        memcpy(vb, &s, 2);
        memcpy(vb + 2, c, (size_t)cb);
    }
}

void attn_store(void *kpool, void *vpool, int kv_is_f16, int kv_dim, int head_dim, int block_size,
                int64_t slot, const float *k, const float *v) {
    pdl_attention_table t;
    attn_table_for(cpu_isa_active(), PDL_ATTN_F32, &t);
    attn_table_store(&t, kv_is_f16)(kpool, vpool, kv_is_f16, kv_dim, head_dim, block_size, slot, k, v);
}

void attn_head(float *out_h, const float *q_h, int head_dim, int kv_head, float scale, float softcap,
               int pos, int window, const pdl_attn_kv *kv, float *scratch) {
    attn_queries(&out_h, &q_h, &pos, 1, head_dim, kv_head, scale, softcap, NULL, window, kv, scratch);
}
