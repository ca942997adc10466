/*
 * weight_panels.c - making weight panels, the portable panel tiles (the
 * reference for the order in weight_panels.h) and the threaded driver.
 */
#include "kernels/weight_panels.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu_features.h"
#include "kernels/fp16.h"
#include "kernels/matmul.h"
#include "kernels/iq4nl.h"
#include "kernels/legacy_quant.h"
#include "kernels/matmul_table.h"
#include "kernels/mxfp4.h"

static bool quantized(pdl_dtype dt) {
    return dt == PDL_DTYPE_Q8_0 || dt == PDL_DTYPE_Q4_0 || dt == PDL_DTYPE_MXFP4 || dt == PDL_DTYPE_IQ4_NL ||
           legacy_quant(dt);
}
static bool ternary(pdl_dtype dt) { return dt == PDL_DTYPE_TQ2_0 || dt == PDL_DTYPE_TQ1_0; }
/* Weights with Q8_K activations (kquant.h): the k-quants, IQ4_XS and the ternary types. */
static bool kquant(pdl_dtype dt) {
    return dt == PDL_DTYPE_Q4_K || dt == PDL_DTYPE_Q5_K || dt == PDL_DTYPE_Q6_K || dt == PDL_DTYPE_Q3_K ||
           dt == PDL_DTYPE_Q2_K || dt == PDL_DTYPE_IQ4_XS || ternary(dt);
}

/* Bytes of one super-block of a k-quant (or IQ4_XS) panel, and of the file's. */
static size_t kpanel_block(pdl_dtype dt) {
    if (dt == PDL_DTYPE_Q3_K) return PDL_Q3K_PANEL_BLOCK;
    if (dt == PDL_DTYPE_Q2_K) return PDL_Q2K_PANEL_BLOCK;
    if (dt == PDL_DTYPE_IQ4_XS) return PDL_IQ4XS_PANEL_BLOCK;
    if (ternary(dt)) return PDL_TQ_PANEL_BLOCK;
    return dt == PDL_DTYPE_Q4_K ? PDL_Q4K_PANEL_BLOCK : dt == PDL_DTYPE_Q5_K ? PDL_Q5K_PANEL_BLOCK : PDL_Q6K_PANEL_BLOCK;
}
static size_t kfile_block(pdl_dtype dt) {
    if (dt == PDL_DTYPE_Q3_K) return 110;
    if (dt == PDL_DTYPE_Q2_K) return 84;
    if (dt == PDL_DTYPE_IQ4_XS) return 136;
    if (ternary(dt)) return dt == PDL_DTYPE_TQ2_0 ? 66 : 54;
    return dt == PDL_DTYPE_Q4_K ? 144 : dt == PDL_DTYPE_Q5_K ? 176 : 210;
}

/* Whether family isa has panel tiles for dtype on this CPU (the width
 * must also be a multiple of a block: panels_wanted). */
static bool family_wants(pdl_isa isa, pdl_dtype dtype) {
    if (isa == PDL_ISA_AVX2) {
        if (quantized(dtype)) return qpanel_tile_q8_0_avx2 != NULL;
        if (dtype == PDL_DTYPE_IQ4_XS) return kpanel_tile_iq4_xs_avx2 != NULL;
        if (ternary(dtype)) return kpanel_tile_tq_avx2 != NULL;
        if (kquant(dtype)) return kpanel_tile_q4_k_avx2 != NULL;
        return panels_tiles_avx2[dtype] != NULL; /* F32, F16, BF16 */
    }
    if (isa != PDL_ISA_AVX512) return false;
    switch (dtype) {
    case PDL_DTYPE_F32:
    case PDL_DTYPE_F16:
    case PDL_DTYPE_BF16: return panels_tiles_avx512[dtype] != NULL;
    case PDL_DTYPE_Q8_0:
    case PDL_DTYPE_Q4_0:
    case PDL_DTYPE_MXFP4:
    case PDL_DTYPE_IQ4_NL:
    case PDL_DTYPE_Q5_0:
    case PDL_DTYPE_Q4_1:
    case PDL_DTYPE_Q5_1: return cpu_features_get()->avx512vnni && qpanel_tile_q8_0_vnni;
    case PDL_DTYPE_Q4_K:
    case PDL_DTYPE_Q5_K:
    case PDL_DTYPE_Q6_K:
    case PDL_DTYPE_Q3_K:
    case PDL_DTYPE_Q2_K: return cpu_features_get()->avx512vnni && kpanel_tile_q4_k_vnni;
    case PDL_DTYPE_IQ4_XS: return cpu_features_get()->avx512vnni && kpanel_tile_iq4_xs_vnni;
    case PDL_DTYPE_TQ2_0:
    case PDL_DTYPE_TQ1_0: return cpu_features_get()->avx512vnni && kpanel_tile_tq_vnni;
    default: return false;
    }
}

bool panels_wanted(const pdl_kernels *kernels, const pdl_tensor *w) {
    if (w->n_dims != 2 || w->shape[0] <= 0 || w->shape[1] <= 0) return false;
    if (!kernels->panels.wanted[w->dtype]) return false;
    if (quantized(w->dtype)) return w->shape[1] % 32 == 0;
    if (kquant(w->dtype)) return w->shape[1] % PDL_QK_K == 0;
    return true;
}

int64_t panels_steps(pdl_dtype dtype, int64_t in) {
    if (quantized(dtype)) return in / 32;
    if (kquant(dtype)) return in / PDL_QK_K;
    return dtype == PDL_DTYPE_BF16 ? (in + 1) / 2 : in;
}

/* Bytes of one block's quants in a panel (qpanel_quants_at). */
static size_t quant_bytes(pdl_dtype dtype) {
    return dtype == PDL_DTYPE_Q8_0 ? 512 : legacy_quant(dtype) ? legacy_panel_qbytes(dtype) : 256;
}

size_t panels_bytes(pdl_dtype dtype, int64_t in) {
    if (quantized(dtype)) return (size_t)((in / 32 + 1) / 2) * qpanel_pair_bytes(quant_bytes(dtype));
    if (kquant(dtype))
        return (size_t)(in / PDL_QK_K) * kpanel_block(dtype);
    size_t step = dtype == PDL_DTYPE_F16 ? 32 : 64;
    return (size_t)panels_steps(dtype, in) * step;
}

typedef struct pack_task {
    const pdl_tensor *w;
    uint8_t *dst;
    int64_t n_panels;
} pack_task;

/* Row c's super-block blk (the file's bytes) into its panel block db
 * (weight_panels.h's layouts). */
static void pack_q4_k_block(uint8_t *db, int c, const uint8_t *blk) {
    for (int w4 = 0; w4 < 32; w4++) /* bytes 4 w4 .. 4 w4 + 3 of the nibbles */
        memcpy(db + w4 * 64 + c * 4, blk + 16 + 4 * w4, 4);
    uint64_t sc, mn;
    kquant_q4_k_scales_mins(blk, &sc, &mn);
    for (int j = 0; j < 8; j++) {
        db[2048 + j * 16 + c] = (uint8_t)(sc >> (8 * j));
        db[2176 + j * 16 + c] = (uint8_t)(mn >> (8 * j));
    }
    memcpy(db + 2304 + c * 2, blk, 2);     /* d */
    memcpy(db + 2336 + c * 2, blk + 2, 2); /* dmin */
}

/* Q5_K: Q4_K's panel block from the file's scales, nibbles and halves
 * (a Q4_K block's bytes with qh left out), then the qh words. */
static void pack_q5_k_block(uint8_t *db, int c, const uint8_t *blk) {
    uint8_t q4[144];
    memcpy(q4, blk, 16);            /* d, dmin, scales and mins */
    memcpy(q4 + 16, blk + 48, 128); /* nibbles */
    pack_q4_k_block(db, c, q4);
    for (int l4 = 0; l4 < 8; l4++) memcpy(db + PDL_Q4K_PANEL_BLOCK + l4 * 64 + c * 4, blk + 16 + 4 * l4, 4);
}

static void pack_q6_k_block(uint8_t *db, int c, const uint8_t *blk) {
    for (int h = 0; h < 2; h++) /* per half and step of 4: ql, ql + 32, qh words */
        for (int l4 = 0; l4 < 8; l4++) {
            uint8_t *wd = db + (size_t)((h * 8 + l4) * 3) * 64 + c * 4;
            memcpy(wd, blk + 64 * h + 4 * l4, 4);
            memcpy(wd + 64, blk + 64 * h + 32 + 4 * l4, 4);
            memcpy(wd + 128, blk + 128 + 32 * h + 4 * l4, 4);
        }
    for (int g = 0; g < 16; g++) db[3072 + g * 16 + c] = blk[192 + g]; /* scales */
    memcpy(db + 3328 + c * 2, blk + 208, 2);                          /* d */
}

/* Q3_K: per step of 4 bytes the qs words of both halves and the hmask
 * word, then the decoded scales and d. */
static void pack_q3_k_block(uint8_t *db, int c, const uint8_t *blk) {
    for (int l4 = 0; l4 < 8; l4++) {
        uint8_t *wd = db + (size_t)(l4 * 3) * 64 + c * 4;
        memcpy(wd, blk + 32 + 4 * l4, 4);
        memcpy(wd + 64, blk + 64 + 4 * l4, 4);
        memcpy(wd + 128, blk + 4 * l4, 4);
    }
    int8_t sc[16];
    kquant_q3_k_scales(blk + 96, sc);
    for (int g = 0; g < 16; g++) db[1536 + g * 16 + c] = (uint8_t)sc[g];
    memcpy(db + 1792 + c * 2, blk + 108, 2); /* d */
}

/* Q2_K: per step of 4 bytes the qs words of both halves, then the scale
 * and min nibbles and the halves. */
static void pack_q2_k_block(uint8_t *db, int c, const uint8_t *blk) {
    for (int l4 = 0; l4 < 8; l4++) {
        uint8_t *wd = db + (size_t)(l4 * 2) * 64 + c * 4;
        memcpy(wd, blk + 16 + 4 * l4, 4);
        memcpy(wd + 64, blk + 48 + 4 * l4, 4);
    }
    for (int g = 0; g < 16; g++) {
        db[1024 + g * 16 + c] = blk[g] & 0xF;
        db[1280 + g * 16 + c] = blk[g] >> 4;
    }
    memcpy(db + 1536 + c * 2, blk + 80, 2); /* d */
    memcpy(db + 1568 + c * 2, blk + 82, 2); /* dmin */
}

/* IQ4_XS: the code bytes as words, the signed scales, d. */
static void pack_iq4_xs_block(uint8_t *db, int c, const uint8_t *blk) {
    for (int w4 = 0; w4 < 32; w4++) memcpy(db + w4 * 64 + c * 4, blk + 8 + 4 * w4, 4);
    for (int j = 0; j < 8; j++) db[2048 + j * 16 + c] = (uint8_t)(int8_t)kquant_iq4_xs_scale(blk, j);
    memcpy(db + 2176 + c * 2, blk, 2); /* d */
}

/* TQ2_0 / TQ1_0: the 64 bytes of 2-bit codes in Q2_K's steps, then d.
 * TQ2_0's code bytes are the file's; TQ1_0's trits are written as them. */
static void pack_tq_codes(uint8_t *db, int c, const uint8_t *codes, const uint8_t *d16) {
    for (int l4 = 0; l4 < 8; l4++) {
        uint8_t *wd = db + (size_t)(l4 * 2) * 64 + c * 4;
        memcpy(wd, codes + 4 * l4, 4);
        memcpy(wd + 64, codes + 32 + 4 * l4, 4);
    }
    memcpy(db + 1024 + c * 2, d16, 2);
}

static void pack_tq2_0_block(uint8_t *db, int c, const uint8_t *blk) { pack_tq_codes(db, c, blk, blk + 64); }

static void pack_tq1_0_block(uint8_t *db, int c, const uint8_t *blk) {
    uint8_t codes[64] = {0};
    for (int e = 0; e < 256; e++)
        codes[32 * (e / 128) + e % 32] |= (uint8_t)(kquant_tq1_0_code(blk, e) << (2 * ((e % 128) / 32)));
    pack_tq_codes(db, c, codes, blk + 52);
}

static void pack_worker(void *p, int ith, int nth) {
    const pack_task *t = p;
    long p0, p1;
    threadpool_split_range((long)t->n_panels, ith, nth, &p0, &p1);
    int64_t out = t->w->shape[0], in = t->w->shape[1];
    size_t pb = panels_bytes(t->w->dtype, in);
    for (long pn = p0; pn < p1; pn++) {
        uint8_t *dst = t->dst + (size_t)pn * pb;
        memset(dst, 0, pb);
        for (int c = 0; c < PDL_PANEL_COLS; c++) {
            int64_t o = pn * PDL_PANEL_COLS + c;
            if (kquant(t->w->dtype)) {
                if (o >= out) continue; /* zeros: scales 0 */
                pdl_dtype dt = t->w->dtype;
                size_t bb = kfile_block(dt), pbb = kpanel_block(dt);
                void (*pack)(uint8_t *, int, const uint8_t *) = dt == PDL_DTYPE_Q6_K   ? pack_q6_k_block
                                                                : dt == PDL_DTYPE_Q5_K ? pack_q5_k_block
                                                                : dt == PDL_DTYPE_Q3_K ? pack_q3_k_block
                                                                : dt == PDL_DTYPE_Q2_K ? pack_q2_k_block
                                                                                       : pack_q4_k_block;
                if (dt == PDL_DTYPE_IQ4_XS) pack = pack_iq4_xs_block;
                if (ternary(dt)) pack = dt == PDL_DTYPE_TQ2_0 ? pack_tq2_0_block : pack_tq1_0_block;
                int64_t nb = in / PDL_QK_K;
                const uint8_t *src = (const uint8_t *)t->w->data + (size_t)o * (size_t)nb * bb;
                for (int64_t b = 0; b < nb; b++) pack(dst + (size_t)b * pbb, c, src + b * bb);
            } else if (t->w->dtype == PDL_DTYPE_MXFP4) {
                if (o >= out) continue; /* zeros: codes 0 */
                int64_t nb = in / 32;
                const uint8_t *src = (const uint8_t *)t->w->data + (size_t)o * (size_t)nb * 17;
                for (int64_t b = 0; b < nb; b++) {
                    const uint8_t *blk = src + b * 17;
                    uint16_t s16 = (uint16_t)(mxfp4_scale_half_bits(blk[0]) >> 16); /* exact as BF16 */
                    memcpy(dst + qpanel_scales_at(256, b) + c * 2, &s16, 2);
                    uint8_t *dq = dst + qpanel_quants_at(256, b);
                    for (int q = 0; q < 4; q++) memcpy(dq + q * 64 + c * 4, blk + 1 + 4 * q, 4);
                }
            } else if (legacy_quant(t->w->dtype)) {
                if (o >= out) continue; /* zeros: scale 0 */
                pdl_dtype dt = t->w->dtype;
                size_t bb = legacy_block_bytes(dt), qb = quant_bytes(dt);
                int64_t nb = in / 32;
                const uint8_t *src = (const uint8_t *)t->w->data + (size_t)o * (size_t)nb * bb;
                for (int64_t b = 0; b < nb; b++) {
                    const uint8_t *blk = src + b * bb;
                    memcpy(dst + qpanel_scales_at(qb, b) + c * 2, blk, 2);
                    uint8_t *dq = dst + qpanel_quants_at(qb, b);
                    for (int q = 0; q < 4; q++) memcpy(dq + q * 64 + c * 4, blk + legacy_qs_at(dt) + 4 * q, 4);
                    if (dt != PDL_DTYPE_Q4_1) {
                        uint32_t qh;
                        memcpy(&qh, blk + legacy_qh_at(dt), 4);
                        uint32_t hw = legacy_panel_high(qh);
                        memcpy(dq + PDL_LEGACY_PANEL_HIGH_AT + c * 4, &hw, 4);
                    }
                    if (dt != PDL_DTYPE_Q5_0) memcpy(dq + legacy_panel_min_at(dt) + c * 2, blk + 2, 2);
                }
            } else if (quantized(t->w->dtype)) {
                if (o >= out) continue; /* zeros: scale 0 */
                bool q8 = t->w->dtype == PDL_DTYPE_Q8_0;
                size_t bb = q8 ? 34 : 18, qb = quant_bytes(t->w->dtype);
                int64_t nb = in / 32;
                const uint8_t *src = (const uint8_t *)t->w->data + (size_t)o * (size_t)nb * bb;
                for (int64_t b = 0; b < nb; b++) {
                    const uint8_t *blk = src + b * bb;
                    memcpy(dst + qpanel_scales_at(qb, b) + c * 2, blk, 2);
                    uint8_t *dq = dst + qpanel_quants_at(qb, b);
                    for (int q = 0; q < (q8 ? 8 : 4); q++)
                        for (int i = 0; i < 4; i++)
                            dq[q * 64 + c * 4 + i] = q8 ? blk[2 + 4 * q + i] ^ 0x80 : blk[2 + 4 * q + i];
                }
            } else if (t->w->dtype == PDL_DTYPE_F32) {
                const float *src = (const float *)t->w->data + o * in;
                float *d = (float *)(void *)dst;
                for (int64_t k = 0; k < in; k++) d[k * PDL_PANEL_COLS + c] = o < out ? src[k] : 0.0f;
            } else if (t->w->dtype == PDL_DTYPE_F16) {
                const uint16_t *src = (const uint16_t *)t->w->data + o * in;
                uint16_t *d = (uint16_t *)(void *)dst;
                for (int64_t k = 0; k < in; k++) d[k * PDL_PANEL_COLS + c] = o < out ? src[k] : 0;
            } else {
                const uint16_t *src = (const uint16_t *)t->w->data + o * in;
                uint32_t *d = (uint32_t *)(void *)dst;
                for (int64_t j = 0; j < (in + 1) / 2; j++) {
                    uint32_t lo = o < out ? src[2 * j] : 0, hi = o < out && 2 * j + 1 < in ? src[2 * j + 1] : 0;
                    d[j * PDL_PANEL_COLS + c] = lo | hi << 16;
                }
            }
        }
    }
}

size_t panels_size(const pdl_tensor *w) {
    int64_t n_panels = (w->shape[0] + PDL_PANEL_COLS - 1) / PDL_PANEL_COLS;
    return ((size_t)n_panels * panels_bytes(w->dtype, w->shape[1]) + 63) / 64 * 64;
}

void panels_fill(pdl_threadpool *pool, pdl_tensor *w, void *dst) {
    int64_t n_panels = (w->shape[0] + PDL_PANEL_COLS - 1) / PDL_PANEL_COLS;
    pack_task t = {.w = w, .dst = dst, .n_panels = n_panels};
    threadpool_run_n(pool, threadpool_threads_for(pool, (double)panels_size(w), 1 << 20), pack_worker, &t);
    w->panels = dst;
}

/* ---- portable tiles (the reference) ------------------------------------- */

static float bf16_value(uint32_t h) { return fp16_bf16_to_f32((uint16_t)h); }

/* VDPBF16PS treats denormal inputs as zero and flushes denormal results. */
static float daz(float v) { return fabsf(v) < 1.17549435e-38f ? copysignf(0.0f, v) : v; }

static void store(float *y, float acc, const float *bias, int c, bool accumulate) {
    float v = acc;
    if (bias) v += bias[c];
    *y = accumulate ? *y + v : v;
}

/* The loop every portable tile shares: for each row r, panel g and output
 * column c of the tile, acc = out(ctx, r, panel g, c), then bias and
 * accumulation as the AVX-512 tiles store them. */
typedef float (*output_fn)(const void *ctx, int r, const uint8_t *pp, int c);

static void portable_outputs(output_fn out, const void *ctx, int rows, const uint8_t *panel, size_t pb, int panels,
                             int last_cols, float *y, int64_t ldy, const float *bias, bool accumulate) {
    for (int r = 0; r < rows; r++)
        for (int g = 0; g < panels; g++) {
            const uint8_t *pp = panel + (size_t)g * pb;
            int cols = g == panels - 1 ? last_cols : PDL_PANEL_COLS;
            for (int c = 0; c < cols; c++)
                store(y + r * ldy + g * PDL_PANEL_COLS + c, out(ctx, r, pp, c),
                      bias ? bias + g * PDL_PANEL_COLS : NULL, c, accumulate);
        }
}

/* F32 / F16 / BF16 panels: mode 0 F32 weights, 1 F16, 2 BF16 with F32
 * activations, 3 BF16 with BF16 activation pairs. */
typedef struct float_ctx {
    int mode;
    const void *x;
    int64_t ldx, steps;
} float_ctx;

static float float_output(const void *ctx, int r, const uint8_t *pp, int c) {
    const float_ctx *t = ctx;
    int mode = t->mode;
    const void *x = t->x;
    int64_t ldx = t->ldx;
    float acc = 0.0f;
    for (int64_t k = 0; k < t->steps; k++) {
        if (mode == 0) {
            acc = fmaf(((const float *)(const void *)pp)[k * PDL_PANEL_COLS + c], ((const float *)x)[r * ldx + k], acc);
        } else if (mode == 1) {
            acc = fmaf(fp16_f16_to_f32(((const uint16_t *)(const void *)pp)[k * PDL_PANEL_COLS + c]),
                       ((const float *)x)[r * ldx + k], acc);
        } else {
            uint32_t wv = ((const uint32_t *)(const void *)pp)[k * PDL_PANEL_COLS + c];
            float w0 = bf16_value(wv & 0xFFFF), w1 = bf16_value(wv >> 16);
            if (mode == 2) {
                const float *xr = (const float *)x + r * ldx + 2 * k;
                acc = fmaf(w1, xr[1], acc);
                acc = fmaf(w0, xr[0], acc);
            } else {
                uint32_t xv = ((const uint32_t *)x)[r * ldx + k];
                acc = daz(fmaf(daz(w1), daz(bf16_value(xv >> 16)), acc));
                acc = daz(fmaf(daz(w0), daz(bf16_value(xv & 0xFFFF)), acc));
            }
        }
    }
    return acc;
}

static void portable_tile(int mode, const void *x, int64_t ldx, int rows, const uint8_t *panel, size_t pb,
                          int panels, int64_t steps, int last_cols, float *y, int64_t ldy, const float *bias,
                          bool accumulate) {
    float_ctx t = {.mode = mode, .x = x, .ldx = ldx, .steps = steps};
    portable_outputs(float_output, &t, rows, panel, pb, panels, last_cols, y, ldy, bias, accumulate);
}

#define PORTABLE(NAME, MODE)                                                                                    \
    static void NAME(const void *x, int64_t ldx, int rows, const uint8_t *panel, size_t pb, int panels,        \
                     int64_t steps, int last_cols, float *y, int64_t ldy, const float *bias, bool accumulate) { \
        portable_tile(MODE, x, ldx, rows, panel, pb, panels, steps, last_cols, y, ldy, bias, accumulate);      \
    }
PORTABLE(portable_f32, 0)
PORTABLE(portable_f16, 1)
PORTABLE(portable_bf16, 2)
PORTABLE(portable_bf16_dp, 3)

/* Q8_0 (q4 0), Q4_0 (q4 1), MXFP4 (q4 2) or IQ4_NL (q4 3: Q4_0's panel,
 * its codes indexing kernels/iq4nl.h's values) panels with Q8_0
 * activations. */
typedef struct q_ctx {
    int q4;
    const int8_t *xq;
    const float *xd;
    int64_t ldx, nbx, nb;
} q_ctx;

static float q_output(const void *ctx, int r, const uint8_t *pp, int c) {
    const q_ctx *t = ctx;
    size_t qb = t->q4 ? 256 : 512;
    float acc = 0.0f;
    for (int64_t b = 0; b < t->nb; b++) {
        const int8_t *x = t->xq + r * t->ldx + b * 32;
        const uint8_t *bq = pp + qpanel_quants_at(qb, b);
        int32_t s = 0;
        for (int k = 0; k < 32; k++) {
            int wk;
            if (t->q4) {
                uint8_t byte = bq[(k % 16 / 4) * 64 + c * 4 + k % 4];
                int code = k < 16 ? byte & 0xF : byte >> 4;
                wk = t->q4 == 3 ? iq4nl_values[code] : t->q4 == 2 ? mxfp4_code2[code] : code - 8;
            } else {
                wk = (int)bq[(k / 4) * 64 + c * 4 + k % 4] - 128;
            }
            s += wk * x[k];
        }
        uint16_t d16;
        memcpy(&d16, pp + qpanel_scales_at(qb, b) + c * 2, 2);
        float dw = t->q4 == 2 ? fp16_bf16_to_f32(d16) : fp16_f16_to_f32(d16);
        acc = fmaf((float)s, dw * t->xd[r * t->nbx + b], acc);
    }
    return acc;
}

static void portable_qtile(int q4, const int8_t *xq, const float *xd, const int32_t *xs, int64_t ldx, int64_t nbx,
                           int rows, const uint8_t *panel, size_t pb, int panels, int64_t nb, int last_cols,
                           float *y, int64_t ldy, const float *bias, bool accumulate) {
    (void)xs;
    q_ctx t = {.q4 = q4, .xq = xq, .xd = xd, .ldx = ldx, .nbx = nbx, .nb = nb};
    portable_outputs(q_output, &t, rows, panel, pb, panels, last_cols, y, ldy, bias, accumulate);
}

static void portable_q8_0(const int8_t *xq, const float *xd, const int32_t *xs, int64_t ldx, int64_t nbx, int rows,
                          const uint8_t *panel, size_t pb, int panels, int64_t nb, int last_cols, float *y,
                          int64_t ldy, const float *bias, bool accumulate) {
    portable_qtile(0, xq, xd, xs, ldx, nbx, rows, panel, pb, panels, nb, last_cols, y, ldy, bias, accumulate);
}

static void portable_q4_0(const int8_t *xq, const float *xd, const int32_t *xs, int64_t ldx, int64_t nbx, int rows,
                          const uint8_t *panel, size_t pb, int panels, int64_t nb, int last_cols, float *y,
                          int64_t ldy, const float *bias, bool accumulate) {
    portable_qtile(1, xq, xd, xs, ldx, nbx, rows, panel, pb, panels, nb, last_cols, y, ldy, bias, accumulate);
}

static void portable_mxfp4(const int8_t *xq, const float *xd, const int32_t *xs, int64_t ldx, int64_t nbx, int rows,
                           const uint8_t *panel, size_t pb, int panels, int64_t nb, int last_cols, float *y,
                           int64_t ldy, const float *bias, bool accumulate) {
    portable_qtile(2, xq, xd, xs, ldx, nbx, rows, panel, pb, panels, nb, last_cols, y, ldy, bias, accumulate);
}

static void portable_iq4_nl(const int8_t *xq, const float *xd, const int32_t *xs, int64_t ldx, int64_t nbx, int rows,
                            const uint8_t *panel, size_t pb, int panels, int64_t nb, int last_cols, float *y,
                            int64_t ldy, const float *bias, bool accumulate) {
    portable_qtile(3, xq, xd, xs, ldx, nbx, rows, panel, pb, panels, nb, last_cols, y, ldy, bias, accumulate);
}

/* Q5_0 / Q4_1 / Q5_1 panels (weight_panels.h) with Q8_0 activations and
 * their block sums. */
typedef struct legacy_ctx {
    pdl_dtype dt;
    const int8_t *xq;
    const float *xd;
    const int32_t *xs;
    int64_t ldx, nbx, nb;
} legacy_ctx;

static float legacy_output(const void *ctx, int r, const uint8_t *pp, int c) {
    const legacy_ctx *t = ctx;
    size_t qb = quant_bytes(t->dt);
    bool q5 = t->dt != PDL_DTYPE_Q4_1, with_min = t->dt != PDL_DTYPE_Q5_0;
    float acc = 0.0f;
    for (int64_t b = 0; b < t->nb; b++) {
        const int8_t *x = t->xq + r * t->ldx + b * 32;
        const uint8_t *bq = pp + qpanel_quants_at(qb, b);
        uint32_t hw = 0;
        if (q5) memcpy(&hw, bq + PDL_LEGACY_PANEL_HIGH_AT + c * 4, 4);
        int32_t s = 0;
        for (int k = 0; k < 32; k++) {
            uint8_t byte = bq[(k % 16 / 4) * 64 + c * 4 + k % 4];
            int code = (k < 16 ? byte & 0xF : byte >> 4) | (int)((hw >> (8 * (k % 4) + k / 4)) & 1) << 4;
            s += (t->dt == PDL_DTYPE_Q5_0 ? code - 16 : code) * x[k];
        }
        uint16_t d16;
        memcpy(&d16, pp + qpanel_scales_at(qb, b) + c * 2, 2);
        float dx = t->xd[r * t->nbx + b];
        acc = fmaf((float)s, fp16_f16_to_f32(d16) * dx, acc);
        if (with_min) {
            memcpy(&d16, bq + legacy_panel_min_at(t->dt) + c * 2, 2);
            acc = fmaf((float)t->xs[r * t->nbx + b], fp16_f16_to_f32(d16) * dx, acc);
        }
    }
    return acc;
}

#define PORTABLE_LEGACY(NAME, DT)                                                                               \
    static void NAME(const int8_t *xq, const float *xd, const int32_t *xs, int64_t ldx, int64_t nbx, int rows, \
                     const uint8_t *panel, size_t pb, int panels, int64_t nb, int last_cols, float *y,         \
                     int64_t ldy, const float *bias, bool accumulate) {                                        \
        legacy_ctx t = {.dt = DT, .xq = xq, .xd = xd, .xs = xs, .ldx = ldx, .nbx = nbx, .nb = nb};              \
        portable_outputs(legacy_output, &t, rows, panel, pb, panels, last_cols, y, ldy, bias, accumulate);      \
    }
PORTABLE_LEGACY(portable_q5_0, PDL_DTYPE_Q5_0)
PORTABLE_LEGACY(portable_q4_1, PDL_DTYPE_Q4_1)
PORTABLE_LEGACY(portable_q5_1, PDL_DTYPE_Q5_1)

/* One super-block of a k-quant panel for output row c: acc after it, in
 * kquant.h's order. */
typedef float (*kblock_fn)(const uint8_t *db, int c, const pdl_block_q8k *xb, float acc);

/* Q4_K's sums; with q5 (Q5_K) each nibble plus 16 times its qh bit, the
 * qh bytes after Q4_K's panel block. */
static inline __attribute__((always_inline)) float k4_block(const uint8_t *db, int c, const pdl_block_q8k *xb,
                                                            float acc, bool q5) {
    int32_t isum = 0, msum = 0;
    for (int j = 0; j < 8; j++) {
        int32_t s = 0;
        for (int k = 0; k < 32; k++) {
            uint8_t byte = db[((j / 2) * 8 + k / 4) * 64 + c * 4 + k % 4];
            int q = j % 2 ? byte >> 4 : byte & 0xF;
            if (q5) q |= ((db[PDL_Q4K_PANEL_BLOCK + (k / 4) * 64 + c * 4 + k % 4] >> j) & 1) << 4;
            s += q * xb->qs[32 * j + k];
        }
        isum += db[2048 + j * 16 + c] * s;
        msum += db[2176 + j * 16 + c] * xb->bsum32[j];
    }
    uint16_t d16, m16;
    memcpy(&d16, db + 2304 + c * 2, 2);
    memcpy(&m16, db + 2336 + c * 2, 2);
    acc = fmaf(fp16_f16_to_f32(d16) * xb->d, (float)isum, acc);
    return fmaf(-(fp16_f16_to_f32(m16) * xb->d), (float)msum, acc);
}

static float q4_k_block(const uint8_t *db, int c, const pdl_block_q8k *xb, float acc) {
    return k4_block(db, c, xb, acc, false);
}

static float q5_k_block(const uint8_t *db, int c, const pdl_block_q8k *xb, float acc) {
    return k4_block(db, c, xb, acc, true);
}

/* The 6-bit value of element e of row c in a Q6_K panel block (the
 * file's ql / qh bit positions, weight_panels.h). */
static int q6_panel_value(const uint8_t *db, int c, int e) {
    int h = e / 128, quarter = (e % 128) / 32, l = e % 32;
    const uint8_t *wd = db + (size_t)((h * 8 + l / 4) * 3) * 64 + c * 4 + l % 4;
    int lo = (wd[(quarter % 2) * 64] >> (4 * (quarter / 2))) & 0xF;
    int hi = (wd[128] >> (2 * quarter)) & 3;
    return lo | hi << 4;
}

/* Per group of 16: the exact sum of (q - 32) x, times the group's scale,
 * into isum; one fma per block. */
static float q6_k_block(const uint8_t *db, int c, const pdl_block_q8k *xb, float acc) {
    int32_t isum = 0;
    for (int gr = 0; gr < 16; gr++) {
        int32_t s = 0;
        for (int i = 0; i < 16; i++) s += (q6_panel_value(db, c, 16 * gr + i) - 32) * xb->qs[16 * gr + i];
        isum += (int8_t)db[3072 + gr * 16 + c] * s;
    }
    uint16_t d16;
    memcpy(&d16, db + 3328 + c * 2, 2);
    return fmaf(fp16_f16_to_f32(d16) * xb->d, (float)isum, acc);
}

/* The value -4..3 of element e of row c in a Q3_K panel block (the
 * file's qs / hmask bit positions, weight_panels.h). */
static int q3_panel_value(const uint8_t *db, int c, int e) {
    int h = e / 128, k = (e % 128) / 32, l = e % 32;
    const uint8_t *wd = db + (size_t)((l / 4) * 3) * 64 + c * 4 + l % 4;
    int q = (wd[64 * h] >> (2 * k)) & 3;
    return (wd[128] >> (4 * h + k)) & 1 ? q : q - 4;
}

/* Per group of 16: the exact sum of q x times the group's scale into isum;
 * one fma per block. */
static float q3_k_block(const uint8_t *db, int c, const pdl_block_q8k *xb, float acc) {
    int32_t isum = 0;
    for (int gr = 0; gr < 16; gr++) {
        int32_t s = 0;
        for (int i = 0; i < 16; i++) s += q3_panel_value(db, c, 16 * gr + i) * xb->qs[16 * gr + i];
        isum += (int8_t)db[1536 + gr * 16 + c] * s;
    }
    uint16_t d16;
    memcpy(&d16, db + 1792 + c * 2, 2);
    return fmaf(fp16_f16_to_f32(d16) * xb->d, (float)isum, acc);
}

/* Q2_K: per group of 16 the exact sum of q x (q 0..3 in Q3_K's qs
 * positions) times the group's scale into isum, the mins times the
 * activation sums per 16 into msum; then the two fused multiply-adds. */
static float q2_k_block(const uint8_t *db, int c, const pdl_block_q8k *xb, float acc) {
    int32_t isum = 0, msum = 0;
    for (int gr = 0; gr < 16; gr++) {
        int32_t s = 0;
        for (int i = 0; i < 16; i++) {
            int e = 16 * gr + i, h = e / 128, k = (e % 128) / 32, l = e % 32;
            int q = (db[(size_t)((l / 4) * 2 + h) * 64 + c * 4 + l % 4] >> (2 * k)) & 3;
            s += q * xb->qs[e];
        }
        isum += db[1024 + gr * 16 + c] * s;
        msum += db[1280 + gr * 16 + c] * xb->bsum16[gr];
    }
    uint16_t d16, m16;
    memcpy(&d16, db + 1536 + c * 2, 2);
    memcpy(&m16, db + 1568 + c * 2, 2);
    acc = fmaf(fp16_f16_to_f32(d16) * xb->d, (float)isum, acc);
    return fmaf(-(fp16_f16_to_f32(m16) * xb->d), (float)msum, acc);
}

/* IQ4_XS: per sub-block j the exact sum of v x (v the code's int8 value),
 * times its signed scale, into isum; one fma per block. */
static float iq4_xs_block(const uint8_t *db, int c, const pdl_block_q8k *xb, float acc) {
    int32_t isum = 0;
    for (int j = 0; j < 8; j++) {
        int32_t s = 0;
        for (int k = 0; k < 32; k++) {
            uint8_t byte = db[(4 * j + (k % 16) / 4) * 64 + c * 4 + k % 4];
            s += iq4nl_values[k < 16 ? byte & 0xF : byte >> 4] * xb->qs[32 * j + k];
        }
        isum += (int8_t)db[2048 + j * 16 + c] * s;
    }
    uint16_t d16;
    memcpy(&d16, db + 2176 + c * 2, 2);
    return fmaf(fp16_f16_to_f32(d16) * xb->d, (float)isum, acc);
}

/* TQ2_0 / TQ1_0: the exact sum of (code - 1) x over the super-block (the
 * codes in Q2_K's qs positions), then one fused multiply-add. */
static float tq_block(const uint8_t *db, int c, const pdl_block_q8k *xb, float acc) {
    int32_t isum = 0;
    for (int e = 0; e < 256; e++) {
        int h = e / 128, k = (e % 128) / 32, l = e % 32;
        int q = (db[(size_t)((l / 4) * 2 + h) * 64 + c * 4 + l % 4] >> (2 * k)) & 3;
        isum += (q - 1) * xb->qs[e];
    }
    uint16_t d16;
    memcpy(&d16, db + 1024 + c * 2, 2);
    return fmaf(fp16_f16_to_f32(d16) * xb->d, (float)isum, acc);
}

/* Q4_K / Q6_K panels, activations in Q8_K blocks (ldx per row). */
typedef struct k_ctx {
    kblock_fn block;
    size_t block_bytes;
    const pdl_block_q8k *x;
    int64_t ldx, nb;
} k_ctx;

static float k_output(const void *ctx, int r, const uint8_t *pp, int c) {
    const k_ctx *t = ctx;
    float acc = 0.0f;
    for (int64_t b = 0; b < t->nb; b++) acc = t->block(pp + (size_t)b * t->block_bytes, c, t->x + r * t->ldx + b, acc);
    return acc;
}

static void portable_ktile(kblock_fn block, size_t block_bytes, const pdl_block_q8k *x, int64_t ldx, int rows,
                           const uint8_t *panel, size_t pb, int panels, int64_t nb, int last_cols, float *y,
                           int64_t ldy, const float *bias, bool accumulate) {
    k_ctx t = {.block = block, .block_bytes = block_bytes, .x = x, .ldx = ldx, .nb = nb};
    portable_outputs(k_output, &t, rows, panel, pb, panels, last_cols, y, ldy, bias, accumulate);
}

static void portable_q4_k(const pdl_block_q8k *x, int64_t ldx, int rows, const uint8_t *panel, size_t pb, int panels,
                          int64_t nb, int last_cols, float *y, int64_t ldy, const float *bias, bool accumulate) {
    portable_ktile(q4_k_block, PDL_Q4K_PANEL_BLOCK, x, ldx, rows, panel, pb, panels, nb, last_cols, y, ldy, bias,
                   accumulate);
}

static void portable_q5_k(const pdl_block_q8k *x, int64_t ldx, int rows, const uint8_t *panel, size_t pb, int panels,
                          int64_t nb, int last_cols, float *y, int64_t ldy, const float *bias, bool accumulate) {
    portable_ktile(q5_k_block, PDL_Q5K_PANEL_BLOCK, x, ldx, rows, panel, pb, panels, nb, last_cols, y, ldy, bias,
                   accumulate);
}

static void portable_q6_k(const pdl_block_q8k *x, int64_t ldx, int rows, const uint8_t *panel, size_t pb, int panels,
                          int64_t nb, int last_cols, float *y, int64_t ldy, const float *bias, bool accumulate) {
    portable_ktile(q6_k_block, PDL_Q6K_PANEL_BLOCK, x, ldx, rows, panel, pb, panels, nb, last_cols, y, ldy, bias,
                   accumulate);
}

static void portable_q3_k(const pdl_block_q8k *x, int64_t ldx, int rows, const uint8_t *panel, size_t pb, int panels,
                          int64_t nb, int last_cols, float *y, int64_t ldy, const float *bias, bool accumulate) {
    portable_ktile(q3_k_block, PDL_Q3K_PANEL_BLOCK, x, ldx, rows, panel, pb, panels, nb, last_cols, y, ldy, bias,
                   accumulate);
}

static void portable_q2_k(const pdl_block_q8k *x, int64_t ldx, int rows, const uint8_t *panel, size_t pb, int panels,
                          int64_t nb, int last_cols, float *y, int64_t ldy, const float *bias, bool accumulate) {
    portable_ktile(q2_k_block, PDL_Q2K_PANEL_BLOCK, x, ldx, rows, panel, pb, panels, nb, last_cols, y, ldy, bias,
                   accumulate);
}

static void portable_iq4_xs(const pdl_block_q8k *x, int64_t ldx, int rows, const uint8_t *panel, size_t pb,
                            int panels, int64_t nb, int last_cols, float *y, int64_t ldy, const float *bias,
                            bool accumulate) {
    portable_ktile(iq4_xs_block, PDL_IQ4XS_PANEL_BLOCK, x, ldx, rows, panel, pb, panels, nb, last_cols, y, ldy, bias,
                   accumulate);
}

static void portable_tq(const pdl_block_q8k *x, int64_t ldx, int rows, const uint8_t *panel, size_t pb, int panels,
                        int64_t nb, int last_cols, float *y, int64_t ldy, const float *bias, bool accumulate) {
    portable_ktile(tq_block, PDL_TQ_PANEL_BLOCK, x, ldx, rows, panel, pb, panels, nb, last_cols, y, ldy, bias,
                   accumulate);
}

/* ---- driver --------------------------------------------------------------- */

/* One matrix of a panel task: its panels, the activation rows it takes
 * ([r0, r1) of the task's), and where its outputs go (row r at y + (r -
 * r0) * ldy). */
typedef struct panel_mat {
    const uint8_t *panels;
    const uint8_t *up_panels; /* gated tasks: the up matrix's panels */
    int64_t n_panels, first; /* first: its first panel in the task's numbering */
    int64_t r0, r1;
    int last_cols;
    float *y;
    int64_t ldy;
    const float *bias;
    bool accumulate;
} panel_mat;

typedef struct panel_task {
    pdl_panel_fn fn;
    pdl_qpanel_fn qfn;     /* Q8_0 / Q4_0 (then fn is NULL) */
    const int8_t *xq;      /* ... their quantized activations, */
    const float *xd;       /* block scales */
    const int32_t *xs;     /* and block sums */
    pdl_kpanel_fn kfn;     /* Q4_K (then fn and qfn are NULL), */
    const pdl_block_q8k *xk; /* its Q8_K activations */
    int tile_rows;
    const uint8_t *x;
    int64_t ldx, n_rows, row_block;
    size_t xsize;
    size_t panel_bytes;
    int64_t steps;
    panel_mat *mats;       /* matrices of the same dtype and width */
    int n_mats;
    pdl_gate_fn act;       /* gated: each mat is a gate, y = act(gate, up) with its up_panels */
    int64_t n_panels;      /* of all of them */
    int nth;               /* threads sharing the panels */
    atomic_long next_panel; /* the first panel nobody has taken: block x n_panels + panel */
} panel_task;

/* The tiles of panels [g0, g1) of one matrix over rows [rb, re). */
/* One tile: rows [r, r + nr) x ng panels at `panels` into y (ldy). */
static void run_tile(const panel_task *t, int64_t r, int nr, const uint8_t *panels, int ng, int last, float *y,
                     int64_t ldy, const float *bias, bool accumulate) {
    if (t->kfn) {
        t->kfn(t->xk + r * t->ldx, t->ldx, nr, panels, t->panel_bytes, ng, t->steps, last, y, ldy, bias, accumulate);
    } else if (t->qfn) {
        int64_t nbx = t->ldx / 32;
        t->qfn(t->xq + r * t->ldx, t->xd + r * nbx, t->xs + r * nbx, t->ldx, nbx, nr, panels, t->panel_bytes, ng,
               t->steps, last, y, ldy, bias, accumulate);
    } else {
        t->fn(t->x + (size_t)(r * t->ldx) * t->xsize, t->ldx, nr, panels, t->panel_bytes, ng, t->steps, last, y, ldy,
              bias, accumulate);
    }
}

/* The tiles of panels [g0, g1) of one matrix over rows [rb, re); in a
 * gated task each gate tile is followed by the same tile of the up
 * matrix, into a buffer on the stack, and the activation combines them
 * while both are in L1. */
static void panel_range(const panel_task *t, const panel_mat *pm, int64_t g0, int64_t g1, int64_t rb, int64_t re) {
    if (rb < pm->r0) rb = pm->r0;
    if (re > pm->r1) re = pm->r1;
    for (int64_t g = g0; g < g1 && rb < re; g += PDL_PANEL_TILE_PANELS) {
        int ng = (int)(g1 - g < PDL_PANEL_TILE_PANELS ? g1 - g : PDL_PANEL_TILE_PANELS);
        int last = g + ng == pm->n_panels ? pm->last_cols : PDL_PANEL_COLS;
        size_t at = (size_t)g * t->panel_bytes;
        float *y = pm->y + g * PDL_PANEL_COLS; /* row r of the task at y + (r - r0) * ldy */
        const float *bias = pm->bias ? pm->bias + g * PDL_PANEL_COLS : NULL;
        for (int64_t r = rb; r < re; r += t->tile_rows) {
            int nr = (int)(re - r < t->tile_rows ? re - r : t->tile_rows);
            run_tile(t, r, nr, pm->panels + at, ng, last, y + (r - pm->r0) * pm->ldy, pm->ldy, bias, pm->accumulate);
            if (t->act) {
                float up[PDL_PANEL_TILE_ROWS * PDL_PANEL_TILE_PANELS * PDL_PANEL_COLS];
                int cols = (ng - 1) * PDL_PANEL_COLS + last, ldu = ng * PDL_PANEL_COLS;
                run_tile(t, r, nr, pm->up_panels + at, ng, last, up, ldu, NULL, false);
                for (int i = 0; i < nr; i++) t->act(y + (r - pm->r0 + i) * pm->ldy, up + i * ldu, cols);
            }
        }
    }
}

/* Panels [p0, p1) of the task's matrices (counted across them) over rows
 * [rb, re): the part of each matrix in that span. */
static void panel_span(const panel_task *t, int64_t p0, int64_t p1, int64_t rb, int64_t re) {
    for (int i = 0; i < t->n_mats; i++) {
        const panel_mat *pm = &t->mats[i];
        int64_t g0 = p0 > pm->first ? p0 - pm->first : 0, g1 = p1 - pm->first;
        if (g1 > pm->n_panels) g1 = pm->n_panels;
        if (g0 < g1) panel_range(t, pm, g0, g1, rb, re);
    }
}

/* The panels go out in chunks, each thread taking the next as it finishes
 * its last: a thread slowed by the machine (a VM's other tenants, a core
 * that is interrupted) leaves its share to the others instead of holding
 * the region open. A chunk is a share of the row block's panels nobody
 * has taken yet (1 / (2 x threads) of them, whole driver tiles, at least
 * one): long chunks first, each read as one stream, and short ones at the
 * end, so the thread that finishes first waits little for the others.
 * Chunks run row block by row block (all of block 0, then of block 1,
 * ...), so the threads work on the same activation rows at a time and
 * each row block's rows stay in L2 while a thread's chunks of it run.
 * Every output's sum runs inside one tile whichever thread runs it, so
 * the bytes do not depend on who took which chunk. */
static bool take_chunk(panel_task *t, int64_t *block, int64_t *p0, int64_t *p1) {
    long at = atomic_load_explicit(&t->next_panel, memory_order_relaxed);
    for (;;) {
        int64_t b = at / t->n_panels, p = at % t->n_panels, left = t->n_panels - p;
        if (b * t->row_block >= t->n_rows) return false;
        int64_t n = left / (2 * (int64_t)t->nth);
        n = (n + PDL_PANEL_TILE_PANELS - 1) / PDL_PANEL_TILE_PANELS * PDL_PANEL_TILE_PANELS;
        if (n < PDL_PANEL_TILE_PANELS) n = PDL_PANEL_TILE_PANELS;
        if (n > left) n = left;
        if (atomic_compare_exchange_weak_explicit(&t->next_panel, &at, at + n, memory_order_relaxed,
                                                  memory_order_relaxed)) {
            *block = b, *p0 = p, *p1 = p + n;
            return true;
        }
    }
}

static void panel_worker(void *p, int ith, int nth) {
    panel_task *t = p;
    (void)ith, (void)nth;
    int64_t block, p0, p1;
    while (take_chunk(t, &block, &p0, &p1)) {
        int64_t rb = block * t->row_block;
        int64_t re = rb + t->row_block < t->n_rows ? rb + t->row_block : t->n_rows;
        panel_span(t, p0, p1, rb, re);
    }
}

/* Activations prepared once per matmul, rows split over the threads: BF16
 * pairs (round to nearest even) for the BF16 activation mode, or F32 rows
 * padded with a zero to an even length for BF16 weights of odd width. */
typedef struct act_task {
    const float *x;
    int64_t in, n_rows, ld;
    uint32_t *pairs;
    float *padded;
    int8_t *q;   /* Q8_0 / Q4_0 weights: Q8_0 activations [n_rows][in], */
    float *d;    /* their scales [n_rows][in / 32] */
    int32_t *s;  /* and block sums [n_rows][in / 32] */
    pdl_block_q8k *k; /* Q4_K weights: Q8_K activations [n_rows][in / 256] */
    const pdl_panel_kernels *pk; /* the family's quantizers */
} act_task;

static void act_worker(void *p, int ith, int nth) {
    const act_task *t = p;
    long r0, r1;
    threadpool_split_range((long)t->n_rows, ith, nth, &r0, &r1);
    for (long r = r0; r < r1; r++) {
        const float *xr = t->x + r * t->in;
        if (t->k) {
            pdl_block_q8k *kr = t->k + r * (t->in / PDL_QK_K);
#if defined(__x86_64__) || defined(__i386__) /* the AVX-512 quantizer exists only there (kquant.h) */
            if (t->pk->q8k_avx512) kquant_quantize_row_q8_k_avx512(xr, t->in, kr);
            else
#endif
                kquant_quantize_row_q8_k(xr, t->in, kr);
        } else if (t->q) {
            t->pk->quantize_q8_0(xr, t->in, t->q + r * t->in, t->d + r * (t->in / 32), t->s + r * (t->in / 32));
        } else if (t->pairs) {
            uint16_t *d = (uint16_t *)(void *)(t->pairs + r * t->ld);
            if (t->pk->bf16_avx512) {
                matmul_f32_to_bf16_avx512(xr, d, t->in);
            } else {
                for (int64_t i = 0; i < t->in; i++) d[i] = fp16_f32_to_bf16_daz(xr[i]);
            }
            if (t->in % 2) d[t->in] = 0;
        } else {
            float *d = t->padded + r * t->ld;
            memcpy(d, xr, (size_t)t->in * sizeof *d);
            d[t->in] = 0.0f;
        }
    }
}

static bool family_avxvnni(pdl_isa isa) {
    /* the four AVX-VNNI tiles are built together or not at all */
    return isa == PDL_ISA_AVX2 && cpu_features_get()->avxvnni && qpanel_tile_q8_0_avxvnni;
}

/* The tile for a dtype on family isa: the AVX-512
 * or AVX2 one where the CPU has it, else the portable one (the same bits).
 * dp: BF16 weights with BF16 activations. */
static void pick_tile(pdl_isa isa, pdl_dtype dt, bool dp, pdl_panel_fn *fn, pdl_qpanel_fn *qfn, pdl_kpanel_fn *kfn) {
    const pdl_cpu_features *f = cpu_features_get();
    bool avx512 = isa == PDL_ISA_AVX512;
    *fn = NULL, *qfn = NULL, *kfn = NULL;
    if (dt == PDL_DTYPE_IQ4_XS) {
        if (avx512 && f->avx512vnni) *kfn = kpanel_tile_iq4_xs_vnni;
        else if (family_avxvnni(isa)) *kfn = kpanel_tile_iq4_xs_avxvnni;
        else if (isa == PDL_ISA_AVX2) *kfn = kpanel_tile_iq4_xs_avx2;
        if (!*kfn) *kfn = portable_iq4_xs;
        return;
    }
    if (ternary(dt)) {
        if (avx512 && f->avx512vnni) *kfn = kpanel_tile_tq_vnni;
        else if (family_avxvnni(isa)) *kfn = kpanel_tile_tq_avxvnni;
        else if (isa == PDL_ISA_AVX2) *kfn = kpanel_tile_tq_avx2;
        if (!*kfn) *kfn = portable_tq;
        return;
    }
    if (kquant(dt)) {
        int k = dt == PDL_DTYPE_Q4_K   ? 0
                : dt == PDL_DTYPE_Q5_K ? 1
                : dt == PDL_DTYPE_Q6_K ? 2
                : dt == PDL_DTYPE_Q3_K ? 3
                                       : 4;
        const pdl_kpanel_fn vnni[5] = {kpanel_tile_q4_k_vnni, kpanel_tile_q5_k_vnni, kpanel_tile_q6_k_vnni,
                                       kpanel_tile_q3_k_vnni, kpanel_tile_q2_k_vnni};
        const pdl_kpanel_fn avxvnni[5] = {kpanel_tile_q4_k_avxvnni, kpanel_tile_q5_k_avxvnni, kpanel_tile_q6_k_avxvnni,
                                          kpanel_tile_q3_k_avxvnni, kpanel_tile_q2_k_avxvnni};
        const pdl_kpanel_fn avx2[5] = {kpanel_tile_q4_k_avx2, kpanel_tile_q5_k_avx2, kpanel_tile_q6_k_avx2,
                                       kpanel_tile_q3_k_avx2, kpanel_tile_q2_k_avx2};
        const pdl_kpanel_fn portable[5] = {portable_q4_k, portable_q5_k, portable_q6_k, portable_q3_k, portable_q2_k};
        if (avx512 && f->avx512vnni) *kfn = vnni[k];
        else if (family_avxvnni(isa)) *kfn = avxvnni[k];
        else if (isa == PDL_ISA_AVX2) *kfn = avx2[k];
        if (!*kfn) *kfn = portable[k];
        return;
    }
    if (legacy_quant(dt)) {
        int k = dt == PDL_DTYPE_Q5_0 ? 0 : dt == PDL_DTYPE_Q4_1 ? 1 : 2;
        const pdl_qpanel_fn vnni[3] = {qpanel_tile_q5_0_vnni, qpanel_tile_q4_1_vnni, qpanel_tile_q5_1_vnni};
        const pdl_qpanel_fn avxvnni[3] = {qpanel_tile_q5_0_avxvnni, qpanel_tile_q4_1_avxvnni, qpanel_tile_q5_1_avxvnni};
        const pdl_qpanel_fn avx2[3] = {qpanel_tile_q5_0_avx2, qpanel_tile_q4_1_avx2, qpanel_tile_q5_1_avx2};
        const pdl_qpanel_fn portable[3] = {portable_q5_0, portable_q4_1, portable_q5_1};
        if (avx512 && f->avx512vnni) *qfn = vnni[k];
        else if (family_avxvnni(isa)) *qfn = avxvnni[k];
        else if (isa == PDL_ISA_AVX2) *qfn = avx2[k];
        if (!*qfn) *qfn = portable[k];
        return;
    }
    if (quantized(dt)) {
        int k = dt == PDL_DTYPE_Q8_0 ? 0 : dt == PDL_DTYPE_Q4_0 ? 1 : dt == PDL_DTYPE_MXFP4 ? 2 : 3;
        const pdl_qpanel_fn vnni[4] = {qpanel_tile_q8_0_vnni, qpanel_tile_q4_0_vnni, qpanel_tile_mxfp4_vnni,
                                       qpanel_tile_iq4_nl_vnni};
        const pdl_qpanel_fn avxvnni[4] = {qpanel_tile_q8_0_avxvnni, qpanel_tile_q4_0_avxvnni, qpanel_tile_mxfp4_avxvnni,
                                          qpanel_tile_iq4_nl_avxvnni};
        const pdl_qpanel_fn avx2[4] = {qpanel_tile_q8_0_avx2, qpanel_tile_q4_0_avx2, qpanel_tile_mxfp4_avx2,
                                       qpanel_tile_iq4_nl_avx2};
        const pdl_qpanel_fn portable[4] = {portable_q8_0, portable_q4_0, portable_mxfp4, portable_iq4_nl};
        if (avx512 && f->avx512vnni) *qfn = vnni[k];
        else if (family_avxvnni(isa)) *qfn = avxvnni[k];
        else if (isa == PDL_ISA_AVX2) *qfn = avx2[k];
        if (!*qfn) *qfn = portable[k];
        return;
    }
    if (avx512) *fn = dp ? (f->avx512bf16 ? panels_tile_bf16_dp : NULL) : panels_tiles_avx512[dt];
    else if (isa == PDL_ISA_AVX2 && !dp) *fn = panels_tiles_avx2[dt];
    if (!*fn)
        *fn = dp ? portable_bf16_dp : dt == PDL_DTYPE_F32 ? portable_f32 : dt == PDL_DTYPE_F16 ? portable_f16 : portable_bf16;
}

/* BF16 activations where the family has a BF16 dot product (or its
 * portable emulation); the AVX2 family multiplies F32 activations. */
static bool bf16_pairs(pdl_isa isa, bool bf16_activations, pdl_dtype dt) {
    return dt == PDL_DTYPE_BF16 && bf16_activations && isa != PDL_ISA_AVX2;
}

void panels_kernels_for(pdl_isa isa, bool bf16_activations, pdl_panel_kernels *pk) {
    *pk = (pdl_panel_kernels){0};
    for (int i = 0; i < PDL_DTYPE_COUNT; i++) {
        pdl_dtype dt = (pdl_dtype)i;
        pk->wanted[dt] = family_wants(isa, dt);
        pk->pairs[dt] = bf16_pairs(isa, bf16_activations, dt);
        pick_tile(isa, dt, pk->pairs[dt], &pk->fn[dt], &pk->qfn[dt], &pk->kfn[dt]);
        pk->tile_rows[dt] = quantized(dt) || kquant(dt) ? PDL_QPANEL_TILE_ROWS : PDL_PANEL_TILE_ROWS;
        /* the AVX2 float tiles work in pieces of 6 rows, 5 for BF16 (weight_panels_avx2.c) */
        pk->avx2_float[dt] = pk->fn[dt] && isa == PDL_ISA_AVX2 && pk->fn[dt] == panels_tiles_avx2[dt];
        if (pk->avx2_float[dt])
            pk->tile_rows[dt] = dt == PDL_DTYPE_BF16 ? PDL_PANEL_TILE_ROWS_AVX2_BF16 : PDL_PANEL_TILE_ROWS_AVX2;
    }
    pk->avxvnni = family_avxvnni(isa);
    pk->q8k_avx512 = isa == PDL_ISA_AVX512;
    pk->bf16_avx512 = isa == PDL_ISA_AVX512 && cpu_features_get()->avx512bf16;
    pk->quantize_q8_0 = matmul_quantizer_q8_0(isa);
}

/* Bytes of the activations prepared once for n_rows rows times a matrix of
 * dtype dt and width in (0: the tiles read x as it is); *ld: their row
 * stride in elements for BF16 pairs or padded F32 rows. */
static size_t act_bytes(pdl_dtype dt, int64_t in, int64_t n_rows, bool dp, int64_t *ld) {
    size_t nbt = (size_t)n_rows * (size_t)(in / 32);
    int64_t steps = panels_steps(dt, in);
    *ld = 0;
    if (quantized(dt)) return (size_t)n_rows * (size_t)in + nbt * (sizeof(float) + sizeof(int32_t));
    if (kquant(dt)) return (size_t)n_rows * (size_t)(in / PDL_QK_K) * sizeof(pdl_block_q8k);
    if (dp || (dt == PDL_DTYPE_BF16 && in % 2)) {
        *ld = dp ? steps : 2 * steps;
        return (size_t)n_rows * (size_t)*ld * (dp ? sizeof(uint32_t) : sizeof(float));
    }
    return 0;
}

size_t panels_scratch_bytes(const pdl_kernels *kernels, const pdl_tensor *w, int64_t n_rows) {
    int64_t ld;
    size_t need = act_bytes(w->dtype, w->shape[1], n_rows, kernels->panels.pairs[w->dtype], &ld);
    return need ? scratch_piece(need) : 0;
}

int panels_matmul(const pdl_kernels *kernels, pdl_threadpool *pool, pdl_scratch *scratch, float *y, int64_t ldy,
                  const float *x, int64_t n_rows, const pdl_tensor *w, const float *bias, bool accumulate) {
    pdl_matmul_out o = {.y = y, .ldy = ldy, .w = w, .bias = bias, .accumulate = accumulate};
    return panels_matmul_shared(kernels, pool, scratch, x, n_rows, &o, 1);
}

static int panels_run(const pdl_kernels *kernels, pdl_threadpool *pool, pdl_scratch *scratch, const float *x,
                      int64_t n_rows, const pdl_tensor *w, panel_mat *mats, int n_mats, pdl_gate_fn act);

/* The panel_mat of one output over activation rows [r0, r1). */
static panel_mat mat_of(const pdl_tensor *w, const pdl_tensor *w_up, float *y, int64_t ldy, const float *bias,
                        bool accumulate, int64_t r0, int64_t r1) {
    int64_t n_out = w->shape[0];
    return (panel_mat){
        .panels = w->panels, .up_panels = w_up ? w_up->panels : NULL,
        .n_panels = (n_out + PDL_PANEL_COLS - 1) / PDL_PANEL_COLS, .r0 = r0, .r1 = r1,
        .last_cols = (int)(n_out - (n_out - 1) / PDL_PANEL_COLS * PDL_PANEL_COLS),
        .y = y, .ldy = ldy, .bias = bias, .accumulate = accumulate,
    };
}

int panels_matmul_shared(const pdl_kernels *kernels, pdl_threadpool *pool, pdl_scratch *scratch, const float *x,
                         int64_t n_rows, const pdl_matmul_out *outs, int n_outs) {
    panel_mat mats[PDL_MATMUL_SHARED_MAX];
    int n = 0;
    for (int i = 0; i < n_outs && i < PDL_MATMUL_SHARED_MAX; i++)
        mats[n++] = mat_of(outs[i].w, NULL, outs[i].y, outs[i].ldy, outs[i].bias, outs[i].accumulate, 0, n_rows);
    return n ? panels_run(kernels, pool, scratch, x, n_rows, outs[0].w, mats, n, NULL) : 0;
}

int panels_matmul_gated(const pdl_kernels *kernels, pdl_threadpool *pool, pdl_scratch *scratch, float *gate,
                        int64_t ldg, const float *x, int64_t n_rows, const pdl_tensor *w_gate,
                        const pdl_tensor *w_up, pdl_gate_fn act) {
    panel_mat m = mat_of(w_gate, w_up, gate, ldg, NULL, false, 0, n_rows);
    return panels_run(kernels, pool, scratch, x, n_rows, w_gate, &m, 1, act);
}

int panels_matmul_grouped(const pdl_kernels *kernels, pdl_threadpool *pool, pdl_scratch *scratch, const float *x,
                          int64_t n_rows, const pdl_matmul_group *groups, int n_groups, pdl_gate_fn act) {
    panel_mat mats[PDL_MATMUL_GROUP_MAX];
    int n = 0;
    for (int i = 0; i < n_groups && i < PDL_MATMUL_GROUP_MAX; i++) {
        const pdl_matmul_group *g = &groups[i];
        if (g->n_rows > 0) mats[n++] = mat_of(g->w, act ? g->w_up : NULL, g->y, g->ldy, NULL, false, g->r0, g->r0 + g->n_rows);
    }
    return n ? panels_run(kernels, pool, scratch, x, n_rows, groups[0].w, mats, n, act) : 0;
}

/* Prepares the activations once and runs the panel tiles of every matrix
 * (gated: each with its up matrix) in one parallel region; w is one of
 * them (its dtype and width are all of theirs). */
static int panels_run(const pdl_kernels *kernels, pdl_threadpool *pool, pdl_scratch *scratch, const float *x,
                      int64_t n_rows, const pdl_tensor *w, panel_mat *mats, int n_mats, pdl_gate_fn act) {
    if (n_rows == 0 || n_mats <= 0) return 0;
    pdl_dtype dt = w->dtype;
    int64_t in = w->shape[1], steps = panels_steps(dt, in);
    const pdl_panel_kernels *pk = &kernels->panels;
    bool dp = pk->pairs[dt];
    panel_task t = {
        .tile_rows = pk->tile_rows[dt],
        .fn = pk->fn[dt], .qfn = pk->qfn[dt], .kfn = pk->kfn[dt],
        .x = (const uint8_t *)x, .ldx = in, .n_rows = n_rows, .xsize = sizeof(float),
        .panel_bytes = panels_bytes(dt, in), .steps = steps,
        .act = act, .mats = mats, .n_mats = n_mats,
    };
    double macs = 0; /* multiply-adds of every matrix over its rows */
    for (int i = 0; i < n_mats; i++) {
        mats[i].first = t.n_panels;
        t.n_panels += mats[i].n_panels;
        macs += (double)(mats[i].r1 - mats[i].r0) * (double)mats[i].n_panels * PDL_PANEL_COLS * (double)in;
    }
    bool avx2_float = pk->avx2_float[dt];
    /* activations prepared once per matmul (Q8_0 values, scales and block
     * sums; BF16 pairs; or F32 rows padded to an even length) into the
     * caller's scratch (reserved ahead by the forward: no allocation per
     * token) */
    act_task a = {.x = x, .in = in, .n_rows = n_rows, .pk = pk};
    size_t nbt = (size_t)n_rows * (size_t)(in / 32);
    size_t need = act_bytes(dt, in, n_rows, dp, &a.ld);
    if (need) {
        void *abuf = scratch_take(scratch, need);
        if (!abuf) return -1; /* y is left as it was; the caller reports it */
        if (kquant(dt)) {
            a.k = abuf;
            t.xk = a.k;
            t.ldx = in / PDL_QK_K;
            t.xsize = sizeof(pdl_block_q8k);
        } else if (quantized(dt)) {
            a.d = abuf;
            a.s = (int32_t *)(void *)(a.d + nbt);
            a.q = (int8_t *)(void *)(a.s + nbt);
            t.xq = a.q, t.xd = a.d, t.xs = a.s;
            t.xsize = 1;
        } else {
            if (dp) a.pairs = abuf;
            else a.padded = abuf;
            t.x = abuf;
            t.ldx = a.ld;
            t.xsize = dp ? sizeof(uint32_t) : sizeof(float);
        }
        threadpool_run_n(pool, threadpool_threads_for(pool, (double)n_rows * (double)in, 65536.0), act_worker, &a);
    }
    /* activation rows per block: about 512 KiB of them (half an L2); 2 MiB
     * for the AVX2 float tiles, whose pieces read one panel at a time
     * (measured on a Zen 4 core: 512 rows x 3072 -> 1024 at 73-85 GFLOP/s with 512
     * KiB, 79-98 with 2 MiB; Qwen3-0.6B F16 pp512 on one thread +5-13%,
     * BF16 pp512 on two +1%) */
    size_t block_bytes = avx2_float ? (size_t)2048 * 1024 : (size_t)512 * 1024;
    int64_t rb = (int64_t)(block_bytes / ((size_t)t.ldx * t.xsize)) / t.tile_rows * t.tile_rows;
    t.row_block = rb < t.tile_rows ? t.tile_rows : rb;
    int nth = threadpool_threads_for(pool, macs * (act ? 2 : 1), 65536.0);
    t.nth = nth;
    atomic_init(&t.next_panel, 0);
    threadpool_run_n(pool, nth, panel_worker, &t);
    return 0;
}
