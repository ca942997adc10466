/*
 * matmul.c - portable dot-product kernels per weight dtype and the threaded
 * row-by-column driver.
 *
 * The portable dot products keep 16 independent partial sums and add them
 * in a fixed tree; they are the reference the SIMD tiles (matmul_avx512.c,
 * matmul_avx2.c) are tested against. Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS, TQ2_0 and TQ1_0 weights have their
 * reference and tiles in kquant*.c (order in kquant.h); the NEON tiles are
 * in matmul_neon*.c. The kernels of a family are chosen once, into a
 * pdl_kernels table (matmul_kernels_for) that a model and each context keep
 * and every entry point takes; within it, every output element is computed
 * by the same instruction sequence whatever the batch, so results are
 * batch-invariant.
 */
#include "kernels/matmul.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu_features.h"
#include "kernels/cpu_ops.h"
#include "kernels/fp16.h"
#include "kernels/iq4nl.h"
#include "kernels/kquant.h"
#include "kernels/legacy_quant.h"
#include "kernels/matmul_table.h"
#include "kernels/mxfp4.h"
#include "kernels/weight_panels.h"

#define LANES 16

static float reduce_lanes(const float acc[LANES]) {
    float s8[8], s4[4];
    for (int i = 0; i < 8; i++) s8[i] = acc[i] + acc[i + 8];
    for (int i = 0; i < 4; i++) s4[i] = s8[i] + s8[i + 4];
    return (s4[0] + s4[2]) + (s4[1] + s4[3]);
}

static float dot_f32(const float *w, const float *x, int64_t n) {
    float acc[LANES] = {0};
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int j = 0; j < LANES; j++) acc[j] += w[i + j] * x[i + j];
    for (int j = 0; i < n; i++, j++) acc[j] += w[i] * x[i];
    return reduce_lanes(acc);
}

static float dot_f16(const uint16_t *w, const float *x, int64_t n) {
    float acc[LANES] = {0};
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int j = 0; j < LANES; j++) acc[j] += fp16_f16_to_f32(w[i + j]) * x[i + j];
    for (int j = 0; i < n; i++, j++) acc[j] += fp16_f16_to_f32(w[i]) * x[i];
    return reduce_lanes(acc);
}

static float dot_bf16(const uint16_t *w, const float *x, int64_t n) {
    float acc[LANES] = {0};
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int j = 0; j < LANES; j++) acc[j] += fp16_bf16_to_f32(w[i + j]) * x[i + j];
    for (int j = 0; i < n; i++, j++) acc[j] += fp16_bf16_to_f32(w[i]) * x[i];
    return reduce_lanes(acc);
}

/* One 32-element block of the integer dots below: 8 lanes, each an exact
 * sum of 4 int8 products, added with fma scaled by d = d_w * d_x. */
static inline void block_acc(float acc[8], const int8_t *q, const int8_t *x, float d) {
    for (int j = 0; j < 8; j++) {
        int32_t p = 0;
        for (int i = 0; i < 4; i++) p += (int32_t)q[4 * j + i] * (int32_t)x[4 * j + i];
        acc[j] = fmaf((float)p, d, acc[j]);
    }
}

/* The lanes' fixed final tree (the SIMD tiles sum in this order too). */
static inline float acc_total(const float acc[8]) {
    float s0 = acc[0] + acc[4], s1 = acc[1] + acc[5], s2 = acc[2] + acc[6], s3 = acc[3] + acc[7];
    return (s0 + s2) + (s1 + s3);
}

/* Q8_0 weights multiply activations quantized the same way (per 32-block,
 * as llama.cpp does in every quantized matmul). The order of the float
 * operations is llama.cpp's x86 one, and every SIMD family here follows it
 * too, bit for bit: per block, 8 lanes each hold the exact integer sum of 4
 * consecutive products; lane j accumulates fma(sum_j, d_w * d_x, acc_j);
 * the 8 lanes are added as (a0+a4 + a2+a6) + (a1+a5 + a3+a7). The order
 * matters more than usual: the next layer's activation quantization rounds
 * to integers, so a last-bit difference can move a logit by ~1e-3. */
static float dot_q8_0_q8(const uint8_t *w, const int8_t *xq, const float *xd, int64_t nb) {
    float acc[8] = {0};
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = w + b * 34;
        uint16_t d16;
        memcpy(&d16, blk, 2);
        const int8_t *q = (const int8_t *)(blk + 2), *x = xq + b * 32;
        float d = fp16_f16_to_f32(d16) * xd[b];
        block_acc(acc, q, x, d);
    }
    return acc_total(acc);
}

/* 4-bit weights in Q4_0's block (f16 d, then byte j holding element j's
 * code in its low nibble and element j + 16's in its high one), each code
 * standing for value[code], times Q8_0 activations in the same order as
 * dot_q8_0_q8. Q4_0: value = code - 8 (llama.cpp's x86
 * ggml_vec_dot_q4_0_q8_0 has the same shape: 8 lanes of exact 4-product
 * integer sums, fma with d_w * d_x, the same final tree); IQ4_NL:
 * kernels/iq4nl.h's table (ggml_vec_dot_iq4_nl_q8_0 takes the same exact
 * integer sums and d_w * d_x per block). */
static float dot_nibbles_q8(const uint8_t *w, const int8_t *xq, const float *xd, int64_t nb, const int8_t value[16]) {
    float acc[8] = {0};
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = w + b * 18;
        uint16_t d16;
        memcpy(&d16, blk, 2);
        int8_t q[32];
        for (int i = 0; i < 16; i++) {
            q[i] = value[blk[2 + i] & 0xF];
            q[i + 16] = value[blk[2 + i] >> 4];
        }
        const int8_t *x = xq + b * 32;
        float d = fp16_f16_to_f32(d16) * xd[b];
        block_acc(acc, q, x, d);
    }
    return acc_total(acc);
}

static const int8_t Q4_0_VALUES[16] = {-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7};

/* The legacy blocks Q5_0, Q4_1 and Q5_1 (kernels/legacy_quant.h: their
 * layouts and the codes legacy_codes unpacks) times Q8_0 activations in
 * dot_q8_0_q8's order: per block, lane j's exact integer sum p_j of the 4
 * products of elements 4j .. 4j + 3 (w the code, Q5_0: minus 16), acc_j =
 * fma(p_j, d_w * d_x, acc_j); Q4_1 / Q5_1 then also acc_j = fma(xs_j,
 * m_w * d_x, acc_j), xs_j the exact sum of those 4 activations; the same
 * final tree. */
static float dot_legacy_q8(const uint8_t *w, const int8_t *xq, const float *xd, int64_t nb, pdl_dtype dt) {
    const size_t bb = legacy_block_bytes(dt);
    const bool with_min = dt != PDL_DTYPE_Q5_0;
    float acc[8] = {0};
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = w + b * bb;
        int8_t q[32];
        legacy_codes(dt, blk, q);
        if (dt == PDL_DTYPE_Q5_0)
            for (int k = 0; k < 32; k++) q[k] = (int8_t)(q[k] - 16);
        const int8_t *x = xq + b * 32;
        float d = legacy_d(blk) * xd[b];
        block_acc(acc, q, x, d);
        if (with_min) {
            float dm = legacy_m(blk) * xd[b];
            for (int j = 0; j < 8; j++) {
                int32_t xs = 0;
                for (int i = 0; i < 4; i++) xs += x[4 * j + i];
                acc[j] = fmaf((float)xs, dm, acc[j]);
            }
        }
    }
    return acc_total(acc);
}

/* MXFP4 weights (kernels/mxfp4.h: doubled E2M1 codes, halved E8M0 scale)
 * times Q8_0 activations in the same order (llama.cpp's
 * ggml_vec_dot_mxfp4_q8_0 takes the same exact integer sums and d_w * d_x
 * per block). Byte 1 + j of a block holds element j (low) and j + 16
 * (high). */
static float dot_mxfp4_q8(const uint8_t *w, const int8_t *xq, const float *xd, int64_t nb) {
    float acc[8] = {0};
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = w + b * 17;
        int8_t q[32];
        for (int i = 0; i < 16; i++) {
            q[i] = mxfp4_code2[blk[1 + i] & 0xF];
            q[i + 16] = mxfp4_code2[blk[1 + i] >> 4];
        }
        const int8_t *x = xq + b * 32;
        float d = mxfp4_scale_half(blk[0]) * xd[b];
        block_acc(acc, q, x, d);
    }
    return acc_total(acc);
}

/* Weights with a dedicated kernel taking Q8_0-quantized activations. */
static bool takes_q8_activations(pdl_dtype dtype) {
    return dtype == PDL_DTYPE_Q8_0 || dtype == PDL_DTYPE_Q4_0 || dtype == PDL_DTYPE_MXFP4 || dtype == PDL_DTYPE_IQ4_NL ||
           legacy_quant(dtype);
}

/* Weights with a dedicated kernel taking Q8_K-quantized activations
 * (kquant.h). Named one by one: a new block dtype keeps the expand path
 * below until it gets its own kernel. */
static bool takes_q8k_activations(pdl_dtype dtype) {
    return dtype == PDL_DTYPE_Q4_K || dtype == PDL_DTYPE_Q5_K || dtype == PDL_DTYPE_Q6_K || dtype == PDL_DTYPE_Q3_K ||
           dtype == PDL_DTYPE_Q2_K || dtype == PDL_DTYPE_IQ4_XS || dtype == PDL_DTYPE_TQ2_0 || dtype == PDL_DTYPE_TQ1_0;
}

/* Other block formats (MLX, ...) have no dot
 * kernel yet: their weight rows are expanded to F32 once per call and use
 * dot_f32. */
static bool dequantized_first(pdl_dtype dtype) {
    return dtype_is_quantized(dtype) && !takes_q8_activations(dtype) && !takes_q8k_activations(dtype);
}

static void quantize_row_q8_0_portable(const float *x, int64_t n, int8_t *qs, float *d, int32_t *sums) {
    for (int64_t b = 0; b < n / 32; b++) {
        const float *xb = x + b * 32;
        float amax = 0.0f;
        for (int j = 0; j < 32; j++) amax = fabsf(xb[j]) > amax ? fabsf(xb[j]) : amax;
        float scale = amax / 127.0f, inv = scale != 0.0f ? 1.0f / scale : 0.0f;
        int32_t s = 0;
        for (int j = 0; j < 32; j++) {
            qs[b * 32 + j] = (int8_t)lrintf(xb[j] * inv); /* nearest, ties to even */
            s += qs[b * 32 + j];
        }
        d[b] = fp16_f16_to_f32(fp16_f32_to_f16(scale)); /* stored as a half, as GGUF's Q8_0 */
        if (sums) sums[b] = s;
    }
}

pdl_quantize_q8_0_fn matmul_quantizer_q8_0(pdl_isa isa) {
#if defined(__x86_64__) || defined(__i386__)
    if (isa == PDL_ISA_AVX512) return matmul_quantize_row_q8_0_avx512;
    if (isa == PDL_ISA_AVX2) return matmul_quantize_row_q8_0_avx2;
#endif
#if defined(__aarch64__)
    if (isa == PDL_ISA_NEON) return matmul_quantize_row_q8_0_neon;
#endif
    return quantize_row_q8_0_portable;
}

void matmul_quantize_row_q8_0_sums(const float *x, int64_t n, int8_t *qs, float *d, int32_t *sums) {
    matmul_kernels_active()->quantize_q8_0(x, n, qs, d, sums);
}

void matmul_quantize_row_q8_0(const float *x, int64_t n, int8_t *qs, float *d) {
    matmul_quantize_row_q8_0_sums(x, n, qs, d, NULL);
}

/* One portable dot product of a weight row with x[in] (not Q8_0). */
static float dot_row(pdl_dtype dtype, const void *w_row, const float *x, int64_t in) {
    switch (dtype) {
    case PDL_DTYPE_F32: return dot_f32((const float *)w_row, x, in);
    case PDL_DTYPE_F16: return dot_f16((const uint16_t *)w_row, x, in);
    case PDL_DTYPE_BF16: return dot_bf16((const uint16_t *)w_row, x, in);
    default: return 0.0f; /* not reached: matmul_run refuses what matmul_supports does not take */
    }
}

bool matmul_has_dot(pdl_dtype dtype) { return matmul_supports(dtype) && !dequantized_first(dtype); }

bool matmul_supports(pdl_dtype dtype) {
    return dtype == PDL_DTYPE_F32 || dtype == PDL_DTYPE_F16 || dtype == PDL_DTYPE_BF16 ||
           (dtype < PDL_DTYPE_COUNT && dtype_is_quantized(dtype)); /* block formats and MLX: expanded at worst */
}

typedef struct matmul_task {
    const pdl_tile_kernels *tiles; /* NULL: the portable path */
    const uint16_t *x_bf16;        /* x rounded to BF16, for tiles that take it */
    const float *x_perm;           /* x in the x_perm32 order, for tiles that take it */
    int64_t ldx_perm;              /* its row stride (in rounded up to 32) */
    const int8_t *xq;              /* Q8_0/Q4_0 weights: x quantized per 32-block [n_rows][in] */
    const float *xd;               /* ... and its block scales [n_rows][in / 32] */
    const pdl_block_q8k *xk;       /* Q2_K..Q6_K, IQ4_XS, TQ2_0, TQ1_0 weights: x quantized per 256-block [n_rows][in / 256] */
    float *wf;                     /* other block formats: per thread, COL_CHUNK weight rows as F32 [nth][COL_CHUNK][in] */
    float *y;
    int64_t ldy;
    const float *x;
    int64_t n_rows, in, out;
    const pdl_tensor *w;
    size_t w_row_bytes;
    const float *bias;
    bool accumulate;
} matmul_task;

/* Columns in chunks of 8 weight rows: each chunk is reused across all input
 * rows while it is in L1. */
#define COL_CHUNK 8

static void matmul_worker(void *p, int ith, int nth) {
    const matmul_task *t = p;
    long n_chunks = (long)((t->out + COL_CHUNK - 1) / COL_CHUNK);
    long c0, c1;
    threadpool_split_range(n_chunks, ith, nth, &c0, &c1);
    const uint8_t *wbase = t->w->data;
    pdl_dtype dt = t->w->dtype;
    bool expand = dequantized_first(dt);
    float *wf = expand ? t->wf + (size_t)ith * COL_CHUNK * (size_t)t->in : NULL;
    for (long c = c0; c < c1; c++) {
        int64_t o0 = c * COL_CHUNK, o1 = o0 + COL_CHUNK < t->out ? o0 + COL_CHUNK : t->out;
        if (expand)
            for (int64_t o = o0; o < o1; o++)
                (void)ops_dequant_row(t->w, o, wf + (o - o0) * t->in, t->in); /* a dtype matmul_run took */
        for (int64_t r = 0; r < t->n_rows; r++) {
            const float *xr = t->x + r * t->in;
            float *yr = t->y + r * t->ldy;
            const int8_t *xq = t->xq ? t->xq + r * t->in : NULL;
            const float *xd = t->xq ? t->xd + r * (t->in / 32) : NULL;
            const pdl_block_q8k *xk = t->xk ? t->xk + r * (t->in / PDL_QK_K) : NULL;
            for (int64_t o = o0; o < o1; o++) {
                const uint8_t *wr = wbase + (size_t)o * t->w_row_bytes;
                float v;
                if (expand) v = dot_f32(wf + (o - o0) * t->in, xr, t->in);
                else if (dt == PDL_DTYPE_Q8_0) v = dot_q8_0_q8(wr, xq, xd, t->in / 32);
                else if (dt == PDL_DTYPE_Q4_0) v = dot_nibbles_q8(wr, xq, xd, t->in / 32, Q4_0_VALUES);
                else if (dt == PDL_DTYPE_MXFP4) v = dot_mxfp4_q8(wr, xq, xd, t->in / 32);
                else if (dt == PDL_DTYPE_IQ4_NL) v = dot_nibbles_q8(wr, xq, xd, t->in / 32, iq4nl_values);
                else if (legacy_quant(dt)) v = dot_legacy_q8(wr, xq, xd, t->in / 32, dt);
                else if (dt == PDL_DTYPE_Q4_K) v = kquant_dot_q4_k_q8_k(wr, xk, t->in / PDL_QK_K);
                else if (dt == PDL_DTYPE_Q5_K) v = kquant_dot_q5_k_q8_k(wr, xk, t->in / PDL_QK_K);
                else if (dt == PDL_DTYPE_Q3_K) v = kquant_dot_q3_k_q8_k(wr, xk, t->in / PDL_QK_K);
                else if (dt == PDL_DTYPE_Q2_K) v = kquant_dot_q2_k_q8_k(wr, xk, t->in / PDL_QK_K);
                else if (dt == PDL_DTYPE_Q6_K) v = kquant_dot_q6_k_q8_k(wr, xk, t->in / PDL_QK_K);
                else if (dt == PDL_DTYPE_IQ4_XS) v = kquant_dot_iq4_xs_q8_k(wr, xk, t->in / PDL_QK_K);
                else if (dt == PDL_DTYPE_TQ2_0) v = kquant_dot_tq2_0_q8_k(wr, xk, t->in / PDL_QK_K);
                else if (dt == PDL_DTYPE_TQ1_0) v = kquant_dot_tq1_0_q8_k(wr, xk, t->in / PDL_QK_K);
                else v = dot_row(dt, wr, xr, t->in);
                if (t->bias) v += t->bias[o];
                yr[o] = t->accumulate ? yr[o] + v : v;
            }
        }
    }
}

/* Rows are taken in blocks that stay in L2 while every column tile of the
 * thread's share passes over them. */
#define ROW_BLOCK 32

static void matmul_tiled_worker(void *p, int ith, int nth) {
    const matmul_task *t = p;
    /* up to one row block: each weight tile comes from memory once, so even
     * full tiles prefetch (batched decode 16: +30%; a prompt's full tiles
     * re-read weights from cache and lose ~3% to the prefetches) */
    bool stream = t->n_rows <= ROW_BLOCK;
    const pdl_tile_kernels *tk = t->tiles;
    pdl_tile_fn tile = tk->fn[t->w->dtype];
    pdl_tile_q8_fn qtile = t->w->dtype == PDL_DTYPE_Q4_0    ? tk->q4
                           : t->w->dtype == PDL_DTYPE_MXFP4  ? tk->mxfp4
                           : t->w->dtype == PDL_DTYPE_IQ4_NL ? tk->iq4nl
                           : t->w->dtype == PDL_DTYPE_Q5_0   ? tk->q5_0
                           : t->w->dtype == PDL_DTYPE_Q4_1   ? tk->q4_1
                           : t->w->dtype == PDL_DTYPE_Q5_1   ? tk->q5_1
                                                             : tk->q8; /* Q8_0-activation weights */
    pdl_tile_kq_fn ktile = t->w->dtype == PDL_DTYPE_Q4_K     ? tk->q4k
                           : t->w->dtype == PDL_DTYPE_Q5_K   ? tk->q5k
                           : t->w->dtype == PDL_DTYPE_Q3_K   ? tk->q3k
                           : t->w->dtype == PDL_DTYPE_Q2_K   ? tk->q2k
                           : t->w->dtype == PDL_DTYPE_IQ4_XS ? tk->iq4xs
                           : t->w->dtype == PDL_DTYPE_TQ2_0  ? tk->tq2
                           : t->w->dtype == PDL_DTYPE_TQ1_0  ? tk->tq1
                                                             : tk->q6k; /* Q8_K-activation weights */
    int TR = tk->tile_rows, TC = tk->tile_cols;
    long n_tiles = (long)((t->out + TC - 1) / TC);
    long c0, c1;
    threadpool_split_range(n_tiles, ith, nth, &c0, &c1);
    const uint8_t *wbase = t->w->data;
    const uint8_t *xbase = t->x_bf16 ? (const uint8_t *)t->x_bf16
                           : t->x_perm ? (const uint8_t *)t->x_perm
                                       : (const uint8_t *)t->x;
    size_t xsize = t->x_bf16 ? 2 : 4;
    int64_t ldx = t->x_perm ? t->ldx_perm : t->in;
    float tmp[64];
    for (int64_t rb = 0; rb < t->n_rows; rb += ROW_BLOCK) {
        int64_t re = rb + ROW_BLOCK < t->n_rows ? rb + ROW_BLOCK : t->n_rows;
        for (long c = c0; c < c1; c++) {
            int64_t o0 = c * TC;
            int cols = (int)(t->out - o0 < TC ? t->out - o0 : TC);
            for (int64_t r = rb; r < re; r += TR) {
                int rows = (int)(re - r < TR ? re - r : TR);
                if (t->xk)
                    ktile(t->xk + r * (t->in / PDL_QK_K), t->in / PDL_QK_K, rows, wbase + (size_t)o0 * t->w_row_bytes,
                        t->w_row_bytes, cols, tmp, TC);
                else if (t->xq)
                    qtile(t->xq + r * t->in, t->xd + r * (t->in / 32), t->in / 32, rows,
                          wbase + (size_t)o0 * t->w_row_bytes, t->w_row_bytes, cols, tmp, TC, stream);
                else
                    tile((const float *)(const void *)(xbase + (size_t)r * (size_t)ldx * xsize), ldx, rows,
                         wbase + (size_t)o0 * t->w_row_bytes, t->w_row_bytes, cols, t->in, tmp, TC, stream);
                for (int i = 0; i < rows; i++) {
                    float *yr = t->y + (r + i) * t->ldy + o0;
                    for (int j = 0; j < cols; j++) {
                        float v = tmp[i * TC + j];
                        if (t->bias) v += t->bias[o0 + j];
                        yr[j] = t->accumulate ? yr[j] + v : v;
                    }
                }
            }
        }
    }
}

static int bf16_act = -1; /* -1: not decided yet (the CPU's default) */

void matmul_set_bf16_activations(bool on) { bf16_act = on; }

bool matmul_bf16_activations(void) {
    if (bf16_act < 0) {
        /* on by default where the CPU has VDPBF16PS, as llama.cpp does for
         * BF16 weights: with weight panels a 512-token prompt runs 1.5x as
         * fast as with exact F32 products (weight_panels.h), for a rounding
         * of each activation by at most 2^-9 relative;
         * pdl_set_kernels(NULL, 0, ..) keeps exact products */
        bf16_act = cpu_features_get()->avx512bf16;
    }
    return bf16_act;
}

static bool family_has(const pdl_tile_kernels *tk, pdl_dtype dtype) {
    if (dtype == PDL_DTYPE_Q8_0) return tk->q8 != NULL;
    if (dtype == PDL_DTYPE_Q4_0) return tk->q4 != NULL;
    if (dtype == PDL_DTYPE_MXFP4) return tk->mxfp4 != NULL;
    if (dtype == PDL_DTYPE_IQ4_NL) return tk->iq4nl != NULL;
    if (dtype == PDL_DTYPE_Q5_0) return tk->q5_0 != NULL;
    if (dtype == PDL_DTYPE_Q4_1) return tk->q4_1 != NULL;
    if (dtype == PDL_DTYPE_Q5_1) return tk->q5_1 != NULL;
    if (dtype == PDL_DTYPE_Q4_K) return tk->q4k != NULL;
    if (dtype == PDL_DTYPE_Q5_K) return tk->q5k != NULL;
    if (dtype == PDL_DTYPE_Q3_K) return tk->q3k != NULL;
    if (dtype == PDL_DTYPE_Q2_K) return tk->q2k != NULL;
    if (dtype == PDL_DTYPE_Q6_K) return tk->q6k != NULL;
    if (dtype == PDL_DTYPE_IQ4_XS) return tk->iq4xs != NULL;
    if (dtype == PDL_DTYPE_TQ2_0) return tk->tq2 != NULL;
    if (dtype == PDL_DTYPE_TQ1_0) return tk->tq1 != NULL;
    return tk->fn[dtype] != NULL;
}

void matmul_pack_perm32(const float *x, int64_t n, float *dst) {
    int64_t np = (n + 31) / 32 * 32;
    for (int64_t b = 0; b < np; b += 32)
        for (int g = 0; g < 4; g++)
            for (int j = 0; j < 4; j++) {
                int64_t lo = b + g * 8 + j, hi = lo + 4;
                dst[b + g * 4 + j] = lo < n ? x[lo] : 0.0f;
                dst[b + 16 + g * 4 + j] = hi < n ? x[hi] : 0.0f;
            }
}

/* The tiles family isa runs dtype with (NULL: the portable dot products). */
static const pdl_tile_kernels *tiles_for(pdl_isa isa, bool bf16_activations, pdl_dtype dtype) {
    const pdl_tile_kernels *tk = NULL;
    switch (isa) {
    case PDL_ISA_AVX512:
        if (dtype == PDL_DTYPE_BF16 && cpu_features_get()->avx512bf16 && matmul_tiles_avx512bf16.fn[dtype] &&
            bf16_activations)
            return &matmul_tiles_avx512bf16;
        if (dtype == PDL_DTYPE_BF16 && matmul_tiles_avx512_bf16w.fn[dtype]) return &matmul_tiles_avx512_bf16w;
        if (takes_q8k_activations(dtype) && cpu_features_get()->avx512vnni && family_has(&matmul_tiles_avx512_vnni, dtype))
            return &matmul_tiles_avx512_vnni;
        /* MXFP4 / IQ4_NL without panels (no VNNI, or PAGEDLM_WEIGHT_PANELS=0): the AVX2 tile (the driver
         * takes the tile size from the table returned; the same bits as the portable dot) */
        if ((dtype == PDL_DTYPE_MXFP4 || dtype == PDL_DTYPE_IQ4_NL || legacy_quant(dtype)) &&
            !family_has(&matmul_tiles_avx512, dtype))
            return family_has(&matmul_tiles_avx2, dtype) ? &matmul_tiles_avx2 : NULL;
        tk = &matmul_tiles_avx512;
        break;
    case PDL_ISA_AVX2: tk = &matmul_tiles_avx2; break;
    case PDL_ISA_NEON:
        if ((takes_q8_activations(dtype) || takes_q8k_activations(dtype)) && cpu_features_get()->neon_dotprod &&
            family_has(&matmul_tiles_neon_dotprod, dtype))
            return &matmul_tiles_neon_dotprod;
        tk = &matmul_tiles_neon;
        break;
    default: return NULL;
    }
    return family_has(tk, dtype) ? tk : NULL;
}

void matmul_kernels_for(pdl_isa isa, bool bf16_activations, pdl_kernels *k) {
    *k = (pdl_kernels){.isa = isa, .bf16_activations = bf16_activations};
    for (int dt = 0; dt < PDL_DTYPE_COUNT; dt++) k->tiles[dt] = tiles_for(isa, bf16_activations, (pdl_dtype)dt);
    k->q8k_avx512 = isa == PDL_ISA_AVX512;
    k->quantize_q8_0 = matmul_quantizer_q8_0(isa);
    panels_kernels_for(isa, bf16_activations, &k->panels);
}

/* One table per (family, BF16 mode), all filled at the first call. */
static pdl_kernels active_tables[PDL_ISA_COUNT][2];
static pthread_once_t active_tables_once = PTHREAD_ONCE_INIT;

static void fill_active_tables(void) {
    for (int isa = 0; isa < PDL_ISA_COUNT; isa++)
        for (int b = 0; b < 2; b++) matmul_kernels_for((pdl_isa)isa, b, &active_tables[isa][b]);
}

const pdl_kernels *matmul_kernels_active(void) {
    pthread_once(&active_tables_once, fill_active_tables);
    return &active_tables[cpu_isa_active()][matmul_bf16_activations() ? 1 : 0];
}

typedef struct q8k_task {
    const float *x;
    int64_t in, n_rows;
    pdl_block_q8k *y;
    bool simd; /* kquant_quantize_row_q8_k_avx512: the same bytes, faster */
} q8k_task;

static void q8k_worker(void *p, int ith, int nth) {
    const q8k_task *t = p;
    long r0, r1;
    threadpool_split_range((long)t->n_rows, ith, nth, &r0, &r1);
    void (*quantize)(const float *, int64_t, pdl_block_q8k *) = kquant_quantize_row_q8_k;
#if defined(__x86_64__) || defined(__i386__)
    if (t->simd) quantize = kquant_quantize_row_q8_k_avx512;
#endif
    for (long r = r0; r < r1; r++) quantize(t->x + r * t->in, t->in, t->y + r * (t->in / PDL_QK_K));
}

/* The activations prepared once per matmul for the kernels that read them
 * so (Q8_0 quantization, the x_perm32 order, BF16 rounding), rows split
 * over the threads: each row's bytes are the same whoever does it. */
typedef struct prep_task {
    const float *x;
    int64_t in, n_rows;
    int8_t *q;      /* Q8_0 values [n_rows][in], or NULL */
    float *d;       /* ... and scales [n_rows][in / 32] */
    float *perm;    /* x_perm32 rows of ld floats, or NULL */
    int64_t ld;
    uint16_t *bf16; /* BF16 rows [n_rows][in], or NULL */
    pdl_quantize_q8_0_fn quantize; /* the family's, for q */
} prep_task;

static void prep_worker(void *p, int ith, int nth) {
    const prep_task *t = p;
    long r0, r1;
    threadpool_split_range(t->n_rows, ith, nth, &r0, &r1);
    for (long r = r0; r < r1; r++) {
        const float *xr = t->x + r * t->in;
        if (t->q) t->quantize(xr, t->in, t->q + r * t->in, t->d + r * (t->in / 32), NULL);
        if (t->perm) matmul_pack_perm32(xr, t->in, t->perm + r * t->ld);
        if (t->bf16) matmul_f32_to_bf16_avx512(xr, t->bf16 + r * t->in, t->in);
    }
}

int matmul_shared(const pdl_kernels *kernels, pdl_threadpool *pool, pdl_scratch *scratch, const float *x,
                  int64_t n_rows, const pdl_matmul_out *outs, int n_outs) {
    bool together = n_outs > 0 && n_outs <= PDL_MATMUL_SHARED_MAX;
    for (int i = 0; i < n_outs && together; i++)
        together = outs[i].w->panels && outs[i].w->dtype == outs[0].w->dtype &&
                   outs[i].w->shape[1] == outs[0].w->shape[1];
    if (together) return panels_matmul_shared(kernels, pool, scratch, x, n_rows, outs, n_outs);
    for (int i = 0; i < n_outs; i++)
        if (matmul_run(kernels, pool, scratch, outs[i].y, outs[i].ldy, x, n_rows, outs[i].w, outs[i].bias,
                       outs[i].accumulate))
            return -1;
    return 0;
}

typedef struct gate_task {
    float *gate;
    const float *up;
    int64_t ld, n_rows;
    int n;
    pdl_gate_fn act;
} gate_task;

static void gate_worker(void *p, int ith, int nth) {
    const gate_task *t = p;
    long r0, r1;
    threadpool_split_range((long)t->n_rows, ith, nth, &r0, &r1);
    for (long r = r0; r < r1; r++) t->act(t->gate + r * t->ld, t->up + r * t->ld, t->n);
}

static bool gated_panels(const pdl_tensor *w_gate, const pdl_tensor *w_up) {
    return w_gate->panels && w_up->panels && w_gate->dtype == w_up->dtype && w_gate->shape[0] == w_up->shape[0] &&
           w_gate->shape[1] == w_up->shape[1];
}

int matmul_gated(const pdl_kernels *kernels, pdl_threadpool *pool, pdl_scratch *scratch, float *gate, int64_t ldg,
                 float *up, const float *x, int64_t n_rows, const pdl_tensor *w_gate, const pdl_tensor *w_up,
                 pdl_gate_fn act) {
    if (n_rows == 0) return 0;
    if (gated_panels(w_gate, w_up)) return panels_matmul_gated(kernels, pool, scratch, gate, ldg, x, n_rows,
                                                               w_gate, w_up, act);
    pdl_matmul_out o[2] = {{.y = gate, .ldy = ldg, .w = w_gate}, {.y = up, .ldy = ldg, .w = w_up}};
    if (matmul_shared(kernels, pool, scratch, x, n_rows, o, 2)) return -1;
    gate_task t = {.gate = gate, .up = up, .ld = ldg, .n_rows = n_rows, .n = (int)w_gate->shape[0], .act = act};
    threadpool_run_n(pool, threadpool_threads_for(pool, (double)n_rows * (double)t.n, 16384.0), gate_worker, &t);
    return 0;
}

int matmul_grouped(const pdl_kernels *kernels, pdl_threadpool *pool, pdl_scratch *scratch, const float *x,
                   int64_t n_rows, const pdl_matmul_group *groups, int n_groups, pdl_gate_fn act, float *up) {
    if (n_groups <= 0) return 0;
    int64_t in = groups[0].w->shape[1];
    for (int at = 0; at < n_groups; at += PDL_MATMUL_GROUP_MAX) {
        int n = n_groups - at < PDL_MATMUL_GROUP_MAX ? n_groups - at : PDL_MATMUL_GROUP_MAX;
        const pdl_matmul_group *g = groups + at;
        bool together = true;
        for (int i = 0; i < n && together; i++) {
            const pdl_tensor *w = g[i].w, *u = g[i].w_up;
            together = w->panels && w->dtype == g[0].w->dtype && w->shape[1] == in &&
                       (!act || (u && u->panels && u->dtype == w->dtype && u->shape[0] == w->shape[0] &&
                                 u->shape[1] == in));
        }
        if (together) {
            if (panels_matmul_grouped(kernels, pool, scratch, x, n_rows, g, n, act)) return -1;
            continue;
        }
        for (int i = 0; i < n; i++) {
            if (g[i].n_rows <= 0) continue;
            const float *xi = x + g[i].r0 * in;
            int rc = act ? matmul_gated(kernels, pool, scratch, g[i].y, g[i].ldy, up + g[i].r0 * g[i].ldy, xi,
                                        g[i].n_rows, g[i].w, g[i].w_up, act)
                         : matmul_run(kernels, pool, scratch, g[i].y, g[i].ldy, xi, g[i].n_rows, g[i].w, NULL, false);
            if (rc) return -1;
        }
    }
    return 0;
}

/* The scratch one matmul_run call without panels takes, in pieces of whole
 * cache lines: Q8_0 activations and their scales, Q8_K activations, BF16
 * or x_perm32 activations for the tiles that read them, and each thread's
 * expanded weight rows for the block formats without kernels. */
typedef struct matmul_pieces {
    size_t q, d, k, bf16, perm, wf;
    int64_t ld_perm;
} matmul_pieces;

static size_t matmul_pieces_of(const pdl_tile_kernels *tiles, pdl_dtype dt, int64_t in, int64_t n_rows, int nth,
                               matmul_pieces *p) {
    *p = (matmul_pieces){0};
    size_t rows = (size_t)n_rows;
    if (takes_q8_activations(dt)) {
        p->q = scratch_piece(rows * (size_t)in);
        p->d = scratch_piece((rows * (size_t)in / 32 + 1) * sizeof(float));
    }
    if (takes_q8k_activations(dt)) p->k = scratch_piece(rows * (size_t)(in / PDL_QK_K) * sizeof(pdl_block_q8k));
    if (tiles && tiles->x_bf16) p->bf16 = scratch_piece(rows * (size_t)in * sizeof(uint16_t));
    if (tiles && tiles->x_perm32) {
        p->ld_perm = (in + 31) / 32 * 32;
        p->perm = scratch_piece(rows * (size_t)p->ld_perm * sizeof(float));
    }
    if (dequantized_first(dt)) p->wf = scratch_piece((size_t)nth * COL_CHUNK * (size_t)in * sizeof(float));
    return p->q + p->d + p->k + p->bf16 + p->perm + p->wf;
}

/* ~64k multiply-adds per thread at least: below that a wake-up costs more
 * than it saves */
static int matmul_threads(pdl_threadpool *pool, const pdl_tensor *w, int64_t n_rows) {
    return threadpool_threads_for(pool, (double)n_rows * (double)w->shape[0] * (double)w->shape[1], 65536.0);
}

size_t matmul_scratch_bytes(const pdl_kernels *kernels, pdl_threadpool *pool, const pdl_tensor *w, int64_t n_rows) {
    if (n_rows <= 0) return 0;
    if (w->panels) return panels_scratch_bytes(kernels, w, n_rows);
    matmul_pieces p;
    return matmul_pieces_of(kernels->tiles[w->dtype], w->dtype, w->shape[1], n_rows, matmul_threads(pool, w, n_rows),
                            &p);
}

int matmul_run(const pdl_kernels *kernels, pdl_threadpool *pool, pdl_scratch *scratch, float *y, int64_t ldy,
               const float *x, int64_t n_rows, const pdl_tensor *w, const float *bias, bool accumulate) {
    const pdl_kernels *k = kernels;
    prep_task prep = {.x = x, .in = w->shape[1], .n_rows = n_rows, .quantize = k->quantize_q8_0};
    matmul_task t = {
        .y = y, .ldy = ldy, .x = x, .n_rows = n_rows,
        .in = w->shape[1], .out = w->shape[0], .w = w,
        .w_row_bytes = dtype_row_bytes(w->dtype, w->shape[1]),
        .bias = bias, .accumulate = accumulate, .tiles = k->tiles[w->dtype],
    };
    if (n_rows == 0) return 0;
    if (w->panels) return panels_matmul(kernels, pool, scratch, y, ldy, x, n_rows, w, bias, accumulate);
    if (!matmul_supports(w->dtype)) {
        scratch->failed = 0; /* not the memory: the caller's message says so */
        return -1;
    }
    int nth = matmul_threads(pool, w, n_rows);
    matmul_pieces pc;
    size_t need = matmul_pieces_of(t.tiles, w->dtype, t.in, n_rows, nth, &pc);
    uint8_t *at = NULL;
    if (need) {
        at = scratch_take(scratch, need);
        if (!at) return -1; /* y is left as it was; the caller reports it */
    }
    if (pc.q) {
        /* quantize the activations once: every column tile reads them */
        prep.q = (int8_t *)at, prep.d = (float *)(void *)(at + pc.q);
        t.xq = prep.q;
        t.xd = prep.d;
        at += pc.q + pc.d;
    }
    if (pc.k) {
        /* the same for Q8_K */
        q8k_task qt = {.x = x, .in = t.in, .n_rows = n_rows, .y = (pdl_block_q8k *)(void *)at,
                       .simd = t.tiles && k->q8k_avx512};
        /* rows split over threads: done serially it took ~9% of a 512-token prompt */
        threadpool_run_n(pool, threadpool_threads_for(pool, (double)n_rows * (double)t.in, 65536.0), q8k_worker, &qt);
        t.xk = qt.y;
        at += pc.k;
    }
    if (pc.bf16) {
        /* pack the activations once: every column tile reads them */
        prep.bf16 = (uint16_t *)(void *)at;
        t.x_bf16 = prep.bf16;
        at += pc.bf16;
    }
    if (pc.perm) {
        /* reorder the activations once: every column tile reads them */
        prep.perm = (float *)(void *)at, prep.ld = pc.ld_perm;
        t.x_perm = prep.perm;
        t.ldx_perm = pc.ld_perm;
        at += pc.perm;
    }
    if (prep.q || prep.perm || prep.bf16) /* done serially this took ~5-10% of a prompt */
        threadpool_run_n(pool, threadpool_threads_for(pool, (double)n_rows * (double)t.in, 65536.0), prep_worker, &prep);
    if (pc.wf) t.wf = (float *)(void *)at; /* each thread's expanded weight rows */
    threadpool_run_n(pool, nth, t.tiles ? matmul_tiled_worker : matmul_worker, &t);
    return 0;
}
