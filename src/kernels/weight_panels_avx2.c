/*
 * weight_panels_avx2.c - AVX2 panel tiles for F32, F16 (F16C) and BF16
 * weights with F32 activations, in weight_panels.h's order (the same bits
 * as the portable and AVX-512 tiles). A panel's 16 outputs are two ymm
 * accumulators per row; each step loads the panel's two weight vectors and
 * broadcasts one activation (BF16: the odd element's, then the even's)
 * per row. With 16 ymm registers a tile holds 4 rows x 1 panel (8
 * accumulators: enough independent chains to keep both FMA pipes busy) or,
 * for a single row (decode), 1 row x 3 panels; the driver's larger tiles
 * are walked in those pieces, and every accumulator's sequence of roundings
 * is the same whatever the piece. Compiled with AVX2 + FMA + F16C flags
 * (CMakeLists.txt); called only when the CPU has them.
 */
#include "kernels/weight_panels.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>

#define AR 4 /* rows per piece */
#define AG 3 /* panels per piece of a single row */

/* y[0..15] (the first last_cols in the tile's last panel) = acc (+ bias)
 * (+ what y held when accumulating): the portable tile's sequence. */
static inline void store16(float *y, __m256 lo, __m256 hi, const float *bias, bool accumulate, int cols) {
    float t[16];
    _mm256_storeu_ps(t, lo);
    _mm256_storeu_ps(t + 8, hi);
    for (int c = 0; c < cols; c++) {
        float v = t[c];
        if (bias) v += bias[c];
        y[c] = accumulate ? y[c] + v : v;
    }
}

/* NR rows x NG panels of one mode (0 F32, 1 F16, 2 BF16 pairs). */
static inline __attribute__((always_inline)) void piece(const int mode, const float *x, int64_t ldx, const int nr,
                                                        const uint8_t *panel, size_t pb, const int ng, int64_t steps,
                                                        int last_cols, bool last_is_last, float *y, int64_t ldy,
                                                        const float *bias, bool accumulate) {
    __m256 acc[AR][AG][2];
    for (int r = 0; r < nr; r++)
        for (int g = 0; g < ng; g++) acc[r][g][0] = acc[r][g][1] = _mm256_setzero_ps();
    const __m256i high = _mm256_set1_epi32((int)0xFFFF0000u);
    for (int64_t k = 0; k < steps; k++) {
        __m256 w0[AG][2], w1[AG][2];
        for (int g = 0; g < ng; g++) {
            const uint8_t *pg = panel + (size_t)g * pb;
            for (int h = 0; h < 2; h++) {
                if (mode == 0) {
                    w0[g][h] = _mm256_load_ps((const float *)(const void *)pg + k * 16 + 8 * h);
                } else if (mode == 1) {
                    w0[g][h] = _mm256_cvtph_ps(_mm_load_si128((const __m128i *)(const void *)(pg + k * 32 + 16 * h)));
                } else {
                    __m256i wi = _mm256_load_si256((const __m256i *)(const void *)(pg + k * 64 + 32 * h));
                    w0[g][h] = _mm256_castsi256_ps(_mm256_slli_epi32(wi, 16));
                    w1[g][h] = _mm256_castsi256_ps(_mm256_and_si256(wi, high));
                }
            }
        }
        for (int r = 0; r < nr; r++) {
            if (mode == 2) {
                __m256 b1 = _mm256_broadcast_ss(x + r * ldx + 2 * k + 1), b0 = _mm256_broadcast_ss(x + r * ldx + 2 * k);
                for (int g = 0; g < ng; g++)
                    for (int h = 0; h < 2; h++) {
                        acc[r][g][h] = _mm256_fmadd_ps(w1[g][h], b1, acc[r][g][h]);
                        acc[r][g][h] = _mm256_fmadd_ps(w0[g][h], b0, acc[r][g][h]);
                    }
            } else {
                __m256 b = _mm256_broadcast_ss(x + r * ldx + k);
                for (int g = 0; g < ng; g++)
                    for (int h = 0; h < 2; h++) acc[r][g][h] = _mm256_fmadd_ps(w0[g][h], b, acc[r][g][h]);
            }
        }
    }
    for (int r = 0; r < nr; r++)
        for (int g = 0; g < ng; g++)
            store16(y + r * ldy + g * 16, acc[r][g][0], acc[r][g][1], bias ? bias + g * 16 : NULL, accumulate,
                    last_is_last && g == ng - 1 ? last_cols : 16);
}

/* A driver tile (rows x panels, at most PDL_PANEL_TILE_ROWS x
 * PDL_PANEL_TILE_PANELS) in pieces. */
static inline __attribute__((always_inline)) void panel_tile(const int mode, const void *xv, int64_t ldx, int rows,
                                                             const uint8_t *panel, size_t pb, int panels,
                                                             int64_t steps, int last_cols, float *y, int64_t ldy,
                                                             const float *bias, bool accumulate) {
    const float *x = (const float *)xv;
    if (rows == 1) { /* decode: up to AG panels side by side */
        for (int g = 0; g < panels; g += AG) {
            int ng = panels - g < AG ? panels - g : AG;
            const uint8_t *p = panel + (size_t)g * pb;
            const float *b = bias ? bias + g * 16 : NULL;
            if (ng == AG)
                piece(mode, x, ldx, 1, p, pb, AG, steps, last_cols, g + ng == panels, y + g * 16, ldy, b, accumulate);
            else
                for (int i = 0; i < ng; i++)
                    piece(mode, x, ldx, 1, p + (size_t)i * pb, pb, 1, steps, last_cols, g + i + 1 == panels,
                          y + (g + i) * 16, ldy, b ? b + i * 16 : NULL, accumulate);
        }
        return;
    }
    for (int g = 0; g < panels; g++) {
        const uint8_t *p = panel + (size_t)g * pb;
        const float *b = bias ? bias + g * 16 : NULL;
        bool last = g + 1 == panels;
        int r = 0;
        for (; r + AR <= rows; r += AR)
            piece(mode, x + r * ldx, ldx, AR, p, pb, 1, steps, last_cols, last, y + r * ldy + g * 16, ldy, b,
                  accumulate);
        for (; r < rows; r++)
            piece(mode, x + r * ldx, ldx, 1, p, pb, 1, steps, last_cols, last, y + r * ldy + g * 16, ldy, b,
                  accumulate);
    }
}

#define DEFINE_PANEL_TILE(NAME, MODE)                                                                            \
    static void NAME(const void *x, int64_t ldx, int rows, const uint8_t *panel, size_t pb, int panels,         \
                     int64_t steps, int last_cols, float *y, int64_t ldy, const float *bias, bool accumulate) { \
        panel_tile(MODE, x, ldx, rows, panel, pb, panels, steps, last_cols, y, ldy, bias, accumulate);          \
    }

DEFINE_PANEL_TILE(panel_f32, 0)
DEFINE_PANEL_TILE(panel_f16, 1)
DEFINE_PANEL_TILE(panel_bf16, 2)

const pdl_panel_fn pdl_panel_tiles_avx2[PDL_DTYPE_COUNT] = {
    [PDL_DTYPE_F32] = panel_f32,
    [PDL_DTYPE_F16] = panel_f16,
    [PDL_DTYPE_BF16] = panel_bf16,
};
#else
const pdl_panel_fn pdl_panel_tiles_avx2[PDL_DTYPE_COUNT] = {0};
#endif
