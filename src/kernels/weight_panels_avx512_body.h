/*
 * weight_panels_avx512_body.h - the AVX-512 panel tile (weight_panels.h),
 * included by weight_panels_avx512.c (F32, F16, BF16 with F32 activations)
 * and matmul_avx512bf16.c (BF16 with BF16 activations: VDPBF16PS), each
 * built with its own instruction-set flags.
 *
 * Mode (a constant in every instantiation): 0 F32 weights, 1 F16, 2 BF16
 * with F32 activations, 3 BF16 with BF16 activation pairs. A tile holds up
 * to PDL_PANEL_TILE_ROWS x PDL_PANEL_TILE_PANELS accumulators of 16
 * outputs; each step loads one vector per panel and broadcasts one
 * activation (a pair in modes 2 and 3) per row. Each accumulator's
 * sequence of roundings is the one weight_panels.h names, whatever the
 * tile's size.
 */
#ifndef PDL_KERNELS_WEIGHT_PANELS_AVX512_BODY_H
#define PDL_KERNELS_WEIGHT_PANELS_AVX512_BODY_H

#include <immintrin.h>

#include "kernels/weight_panels.h"

#define PANEL_R PDL_PANEL_TILE_ROWS
#define PANEL_G PDL_PANEL_TILE_PANELS

/* y[0..15] (the first last_cols of them in a tile's last panel, else all)
 * = acc (+ bias) (+ what y held when accumulating): the portable tile's
 * sequence. */
static inline __attribute__((always_inline)) void panel_store(float *y, __m512 acc, const float *bias,
                                                              bool accumulate, bool last, int last_cols) {
    __mmask16 m = last ? (__mmask16)((1u << last_cols) - 1) : (__mmask16)0xFFFF;
    if (bias) acc = _mm512_add_ps(acc, _mm512_maskz_loadu_ps(m, bias));
    if (accumulate) acc = _mm512_add_ps(_mm512_maskz_loadu_ps(m, y), acc);
    _mm512_mask_storeu_ps(y, m, acc);
}

static inline __attribute__((always_inline)) void panel_body(const int mode, const void *xv, int64_t ldx, const int nr,
                                                             const uint8_t *panel, size_t pb, const int ng,
                                                             int64_t steps, int last_cols, float *y, int64_t ldy,
                                                             const float *bias, bool accumulate) {
    __m512 acc[PANEL_R][PANEL_G];
    for (int r = 0; r < PANEL_R; r++)
        for (int g = 0; g < PANEL_G; g++) acc[r][g] = _mm512_setzero_ps();
    const __m512i high = _mm512_set1_epi32((int)0xFFFF0000u);
    const float *xf = (const float *)xv;
    const uint32_t *xp = (const uint32_t *)xv;
    for (int64_t k = 0; k < steps; k++) {
        __m512 w0[PANEL_G], w1[PANEL_G];
        __m512i wi[PANEL_G];
        for (int g = 0; g < ng; g++) {
            const uint8_t *pg = panel + (size_t)g * pb;
            if (mode == 0) {
                w0[g] = _mm512_load_ps((const float *)(const void *)pg + k * 16);
            } else if (mode == 1) {
                w0[g] = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(const void *)(pg + k * 32)));
            } else {
                wi[g] = _mm512_load_si512((const void *)(pg + k * 64));
                if (mode == 2) {
                    w0[g] = _mm512_castsi512_ps(_mm512_slli_epi32(wi[g], 16));
                    w1[g] = _mm512_castsi512_ps(_mm512_and_si512(wi[g], high));
                }
            }
        }
        for (int r = 0; r < nr; r++) {
            if (mode == 0 || mode == 1) {
                __m512 b = _mm512_set1_ps(xf[r * ldx + k]);
                for (int g = 0; g < ng; g++) acc[r][g] = _mm512_fmadd_ps(w0[g], b, acc[r][g]);
            } else if (mode == 2) {
                __m512 b1 = _mm512_set1_ps(xf[r * ldx + 2 * k + 1]), b0 = _mm512_set1_ps(xf[r * ldx + 2 * k]);
                for (int g = 0; g < ng; g++) {
                    acc[r][g] = _mm512_fmadd_ps(w1[g], b1, acc[r][g]);
                    acc[r][g] = _mm512_fmadd_ps(w0[g], b0, acc[r][g]);
                }
            } else {
#if defined(__AVX512BF16__)
                __m512i b = _mm512_set1_epi32((int)xp[r * ldx + k]);
                for (int g = 0; g < ng; g++) acc[r][g] = _mm512_dpbf16_ps(acc[r][g], (__m512bh)wi[g], (__m512bh)b);
#endif
            }
        }
    }
    (void)xp, (void)high;
    for (int r = 0; r < nr; r++)
        for (int g = 0; g < ng; g++)
            panel_store(y + r * ldy + g * 16, acc[r][g], bias ? bias + g * 16 : NULL, accumulate, g == ng - 1,
                        last_cols);
}

/* NAME(x, ...) as a pdl_panel_fn for one mode, with the accumulators in
 * registers for the full tile and a single row (decode), and the same
 * sequence for any other size. */
#define DEFINE_PANEL_TILE(NAME, MODE)                                                                            \
    static void NAME(const void *x, int64_t ldx, int rows, const uint8_t *panel, size_t pb, int panels,         \
                     int64_t steps, int last_cols, float *y, int64_t ldy, const float *bias, bool accumulate) { \
        if (rows == PANEL_R && panels == PANEL_G)                                                               \
            panel_body(MODE, x, ldx, PANEL_R, panel, pb, PANEL_G, steps, last_cols, y, ldy, bias, accumulate);  \
        else if (rows == 1 && panels == PANEL_G)                                                                \
            panel_body(MODE, x, ldx, 1, panel, pb, PANEL_G, steps, last_cols, y, ldy, bias, accumulate);        \
        else if (rows == 1 && panels == 1)                                                                      \
            panel_body(MODE, x, ldx, 1, panel, pb, 1, steps, last_cols, y, ldy, bias, accumulate);              \
        else if (panels == 1)                                                                                   \
            panel_body(MODE, x, ldx, rows, panel, pb, 1, steps, last_cols, y, ldy, bias, accumulate);           \
        else if (panels == 2)                                                                                   \
            panel_body(MODE, x, ldx, rows, panel, pb, 2, steps, last_cols, y, ldy, bias, accumulate);           \
        else                                                                                                    \
            panel_body(MODE, x, ldx, rows, panel, pb, PANEL_G, steps, last_cols, y, ldy, bias, accumulate);     \
    }

#endif
