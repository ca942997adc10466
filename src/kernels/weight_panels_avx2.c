/*
 * weight_panels_avx2.c - AVX2 panel tiles: F32, F16 (F16C) and BF16
 * weights with F32 activations here, and the integer block formats (Q8_0,
 * Q4_0, MXFP4, IQ4_NL, Q4_K, Q5_K, Q6_K, IQ4_XS, TQ2_0, TQ1_0) through VPMADDUBSW from weight_panels_int256_body.h,
 * all in weight_panels.h's order (the same bits as the portable and
 * AVX-512 tiles).
 *
 * Float tiles: a panel's 16 outputs are two ymm accumulators per row; each
 * step loads the panel's two weight vectors (F16 widened once per step,
 * for all the piece's rows) and broadcasts one activation (BF16: the odd
 * element's, then the even's) per row. With 16 ymm registers a piece is 6
 * rows x 1 panel (5 for BF16) or, for a single row (decode), 1 row x 3
 * panels; the driver's larger tiles are walked in those pieces, and every
 * accumulator's sequence of roundings is the same whatever the piece.
 * Compiled with AVX2 + FMA + F16C flags (CMakeLists.txt); called only when
 * the CPU has them.
 */
#include "kernels/weight_panels.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>

/* y[0..15] (the first last_cols in the tile's last panel) = acc (+ bias)
 * (+ what y held when accumulating): the portable tile's sequence. */
static inline void store16(float *y, __m256 lo, __m256 hi, const float *bias, bool accumulate, int cols) {
    if (cols == 16) {
        if (bias) lo = _mm256_add_ps(lo, _mm256_loadu_ps(bias)), hi = _mm256_add_ps(hi, _mm256_loadu_ps(bias + 8));
        if (accumulate) lo = _mm256_add_ps(_mm256_loadu_ps(y), lo), hi = _mm256_add_ps(_mm256_loadu_ps(y + 8), hi);
        _mm256_storeu_ps(y, lo);
        _mm256_storeu_ps(y + 8, hi);
        return;
    }
    float t[16];
    _mm256_storeu_ps(t, lo);
    _mm256_storeu_ps(t + 8, hi);
    for (int c = 0; c < cols; c++) {
        float v = t[c];
        if (bias) v += bias[c];
        y[c] = accumulate ? y[c] + v : v;
    }
}

/* Weight vector h (0: outputs 0-7, 1: 8-15) of step k of a panel, widened
 * to F32: mode 0 F32, 1 F16; mode 2 (BF16 pairs) gives the even
 * element's in *w0 and the odd's in *w1. */
static inline __attribute__((always_inline)) void load_w(const int mode, const uint8_t *pg, int64_t k, int h,
                                                         __m256 *w0, __m256 *w1) {
    if (mode == 0) {
        *w0 = _mm256_load_ps((const float *)(const void *)pg + k * 16 + 8 * h);
    } else if (mode == 1) {
        *w0 = _mm256_cvtph_ps(_mm_load_si128((const __m128i *)(const void *)(pg + k * 32 + 16 * h)));
    } else {
        __m256i wi = _mm256_load_si256((const __m256i *)(const void *)(pg + k * 64 + 32 * h));
        *w0 = _mm256_castsi256_ps(_mm256_slli_epi32(wi, 16));
        *w1 = _mm256_castsi256_ps(_mm256_and_si256(wi, _mm256_set1_epi32((int)0xFFFF0000u)));
    }
}

/* Loops over registers unrolled before GCC decides where an array of
 * vectors lives: otherwise it keeps the accumulators in memory and stores
 * every one of them at every step. */
#define UNROLL _Pragma("GCC unroll 16")

/* A piece of NR rows x NG panels: each accumulator an exact-size array
 * element (so the compiler keeps them all in registers), each step the NG
 * panels' weight vectors loaded once and every row's activation broadcast
 * once. last: whether the piece's last panel is the tile's last. */
#define DEFINE_PIECE(NAME, MODE, NR, NG)                                                                           \
    static void NAME(const float *x, int64_t ldx, const uint8_t *panel, size_t pb, int64_t steps, int last_cols,   \
                     bool last, float *y, int64_t ldy, const float *bias, bool accumulate) {                       \
        __m256 acc[NR][NG][2];                                                                                     \
        UNROLL for (int r = 0; r < NR; r++)                                                                               \
            UNROLL for (int g = 0; g < NG; g++) acc[r][g][0] = acc[r][g][1] = _mm256_setzero_ps();                       \
        for (int64_t k = 0; k < steps; k++) {                                                                      \
            __m256 w0[NG][2], w1[NG][2];                                                                           \
            UNROLL for (int g = 0; g < NG; g++)                                                                           \
                UNROLL for (int h = 0; h < 2; h++) load_w(MODE, panel + (size_t)g * pb, k, h, &w0[g][h], &w1[g][h]);     \
            UNROLL for (int r = 0; r < NR; r++) {                                                                         \
                if (MODE == 2) {                                                                                   \
                    __m256 b1 = _mm256_broadcast_ss(x + r * ldx + 2 * k + 1);                                      \
                    __m256 b0 = _mm256_broadcast_ss(x + r * ldx + 2 * k);                                          \
                    UNROLL for (int g = 0; g < NG; g++)                                                                   \
                        UNROLL for (int h = 0; h < 2; h++) {                                                              \
                            acc[r][g][h] = _mm256_fmadd_ps(w1[g][h], b1, acc[r][g][h]);                            \
                            acc[r][g][h] = _mm256_fmadd_ps(w0[g][h], b0, acc[r][g][h]);                            \
                        }                                                                                          \
                } else {                                                                                           \
                    __m256 b = _mm256_broadcast_ss(x + r * ldx + k);                                               \
                    UNROLL for (int g = 0; g < NG; g++)                                                                   \
                        UNROLL for (int h = 0; h < 2; h++) acc[r][g][h] = _mm256_fmadd_ps(w0[g][h], b, acc[r][g][h]);     \
                }                                                                                                  \
            }                                                                                                      \
        }                                                                                                          \
        UNROLL for (int r = 0; r < NR; r++)                                                                               \
            UNROLL for (int g = 0; g < NG; g++)                                                                           \
                store16(y + r * ldy + g * 16, acc[r][g][0], acc[r][g][1], bias ? bias + g * 16 : NULL, accumulate, \
                        last && g == NG - 1 ? last_cols : 16);                                                     \
    }

typedef void (*piece_fn)(const float *x, int64_t ldx, const uint8_t *panel, size_t pb, int64_t steps,
                         int last_cols, bool last, float *y, int64_t ldy, const float *bias, bool accumulate);

/* Pieces per mode: up to PR rows x 1 panel (F32, F16: 6 rows, 12
 * accumulators, enough independent chains for both FMA pipes, with 2
 * weight vectors and a broadcast in the 16 registers, and F16 converts
 * each weight vector once for 6 rows; BF16: 5 rows, 10 accumulators, its
 * two weight vectors per half and a broadcast taking the rest: each
 * accumulator takes two dependent FMAs per step, so 4 rows (8 chains of
 * 2 x 4 cycles in a step of 8) left the pipes waiting: Qwen3-0.6B BF16
 * pp512 on a 2-core Zen 4 VM 1.11x, pp2048 1.085x), 1 row x 1..3 panels
 * (decode) and the rows a tile has left. */
#define PR PDL_PANEL_TILE_ROWS_AVX2
#define PR_BF16 PDL_PANEL_TILE_ROWS_AVX2_BF16
#define DEFINE_PIECES(MODE, P)                                                                                      \
    DEFINE_PIECE(P##_r1g1, MODE, 1, 1)                                                                             \
    DEFINE_PIECE(P##_r1g2, MODE, 1, 2)                                                                             \
    DEFINE_PIECE(P##_r1g3, MODE, 1, 3)                                                                             \
    DEFINE_PIECE(P##_r2, MODE, 2, 1)                                                                               \
    DEFINE_PIECE(P##_r3, MODE, 3, 1)                                                                               \
    DEFINE_PIECE(P##_r4, MODE, 4, 1)                                                                               \
    DEFINE_PIECE(P##_r5, MODE, 5, 1)                                                                               \
    DEFINE_PIECE(P##_r6, MODE, 6, 1)                                                                               \
    static const piece_fn P##_rows[PR + 1] = {NULL, P##_r1g1, P##_r2, P##_r3, P##_r4, P##_r5, P##_r6};            \
    static const piece_fn P##_one_row[4] = {NULL, P##_r1g1, P##_r1g2, P##_r1g3};

DEFINE_PIECES(0, f32)
DEFINE_PIECES(1, f16)
DEFINE_PIECES(2, bf16)

/* A driver tile (rows x panels, at most PDL_PANEL_TILE_ROWS x
 * PDL_PANEL_TILE_PANELS) in pieces. */
static inline void panel_tile(const int pr, const piece_fn *rows_fn, const piece_fn *one_row_fn, const void *xv, int64_t ldx,
                              int rows, const uint8_t *panel, size_t pb, int panels, int64_t steps, int last_cols,
                              float *y, int64_t ldy, const float *bias, bool accumulate) {
    const float *x = (const float *)xv;
    if (rows == 1) { /* decode: up to 3 panels side by side */
        for (int g = 0; g < panels; g += 3) {
            int ng = panels - g < 3 ? panels - g : 3;
            one_row_fn[ng](x, ldx, panel + (size_t)g * pb, pb, steps, last_cols, g + ng == panels, y + g * 16, ldy,
                           bias ? bias + g * 16 : NULL, accumulate);
        }
        return;
    }
    for (int g = 0; g < panels; g++)
        for (int r = 0; r < rows; r += pr) {
            int nr = rows - r < pr ? rows - r : pr;
            rows_fn[nr](x + r * ldx, ldx, panel + (size_t)g * pb, pb, steps, last_cols, g + 1 == panels,
                        y + r * ldy + g * 16, ldy, bias ? bias + g * 16 : NULL, accumulate);
        }
}

#define DEFINE_PANEL_TILE(NAME, P, ROWS)                                                                         \
    static void NAME(const void *x, int64_t ldx, int rows, const uint8_t *panel, size_t pb, int panels,         \
                     int64_t steps, int last_cols, float *y, int64_t ldy, const float *bias, bool accumulate) { \
        panel_tile(ROWS, P##_rows, P##_one_row, x, ldx, rows, panel, pb, panels, steps, last_cols, y, ldy, bias,       \
                   accumulate);                                                                                  \
    }

DEFINE_PANEL_TILE(panel_f32, f32, PR)
DEFINE_PANEL_TILE(panel_f16, f16, PR)
DEFINE_PANEL_TILE(panel_bf16, bf16, PR_BF16)

const pdl_panel_fn panels_tiles_avx2[PDL_DTYPE_COUNT] = {
    [PDL_DTYPE_F32] = panel_f32,
    [PDL_DTYPE_F16] = panel_f16,
    [PDL_DTYPE_BF16] = panel_bf16,
};

/* The integer block formats: VPMADDUBSW sums (weight_panels_int256_body.h). */
#define PANEL_PREFIX(name) ipanel_avx2_##name
#include "kernels/weight_panels_int256_body.h"

const pdl_qpanel_fn qpanel_tile_q8_0_avx2 = ipanel_avx2_q8_0;
const pdl_qpanel_fn qpanel_tile_q4_0_avx2 = ipanel_avx2_q4_0;
const pdl_qpanel_fn qpanel_tile_mxfp4_avx2 = ipanel_avx2_mxfp4;
const pdl_qpanel_fn qpanel_tile_iq4_nl_avx2 = ipanel_avx2_iq4_nl;
const pdl_kpanel_fn kpanel_tile_q4_k_avx2 = ipanel_avx2_q4_k;
const pdl_kpanel_fn kpanel_tile_q5_k_avx2 = ipanel_avx2_q5_k;
const pdl_kpanel_fn kpanel_tile_q6_k_avx2 = ipanel_avx2_q6_k;
const pdl_kpanel_fn kpanel_tile_q3_k_avx2 = ipanel_avx2_q3_k;
const pdl_kpanel_fn kpanel_tile_q2_k_avx2 = ipanel_avx2_q2_k;
const pdl_kpanel_fn kpanel_tile_iq4_xs_avx2 = ipanel_avx2_iq4_xs;
const pdl_kpanel_fn kpanel_tile_tq_avx2 = ipanel_avx2_tq;
const pdl_qpanel_fn qpanel_tile_q5_0_avx2 = ipanel_avx2_q5_0;
const pdl_qpanel_fn qpanel_tile_q4_1_avx2 = ipanel_avx2_q4_1;
const pdl_qpanel_fn qpanel_tile_q5_1_avx2 = ipanel_avx2_q5_1;
#else
const pdl_panel_fn panels_tiles_avx2[PDL_DTYPE_COUNT] = {0};
const pdl_qpanel_fn qpanel_tile_q8_0_avx2 = NULL;
const pdl_qpanel_fn qpanel_tile_q4_0_avx2 = NULL;
const pdl_qpanel_fn qpanel_tile_mxfp4_avx2 = NULL;
const pdl_qpanel_fn qpanel_tile_iq4_nl_avx2 = NULL;
const pdl_kpanel_fn kpanel_tile_q4_k_avx2 = NULL;
const pdl_kpanel_fn kpanel_tile_q5_k_avx2 = NULL;
const pdl_kpanel_fn kpanel_tile_q6_k_avx2 = NULL;
const pdl_kpanel_fn kpanel_tile_q3_k_avx2 = NULL;
const pdl_kpanel_fn kpanel_tile_q2_k_avx2 = NULL;
const pdl_kpanel_fn kpanel_tile_iq4_xs_avx2 = NULL;
const pdl_kpanel_fn kpanel_tile_tq_avx2 = NULL;
const pdl_qpanel_fn qpanel_tile_q5_0_avx2 = NULL;
const pdl_qpanel_fn qpanel_tile_q4_1_avx2 = NULL;
const pdl_qpanel_fn qpanel_tile_q5_1_avx2 = NULL;
#endif
