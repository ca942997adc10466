/*
 * weight_panels_avx512vnni.c - AVX-512 VNNI panel tiles for Q8_0 and Q4_0
 * weights (layout and order in weight_panels.h).
 *
 * Per block, each accumulator's integer sum starts at -offset * (sum of the
 * row's 32 quantized activations) and VPDPBUSD adds the products of the
 * unsigned weight bytes (value + offset: 128 for Q8_0, 8 for Q4_0) with 4
 * broadcast activations at a time, which leaves exactly sum w x; integer
 * sums are exact in any order. The float part is then one multiply of the
 * two scales and one fused multiply-add per block, as the portable tile.
 * Compiled with AVX-512 VNNI flags (see CMakeLists.txt); called only when
 * the CPU has them.
 */
#include "kernels/weight_panels.h"

#if defined(__AVX512VNNI__)
#include <immintrin.h>
#include <string.h>

#include "kernels/weight_panels_avx512_body.h" /* panel_store */

#define R PDL_QPANEL_TILE_ROWS
#define G PDL_PANEL_TILE_PANELS

static inline int32_t load4(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

static inline __attribute__((always_inline)) void qbody(const int q4, const int8_t *xq, const float *xd,
                                                        const int32_t *xs, int64_t ldx, int64_t nbx, const int nr,
                                                        const uint8_t *panel, size_t pb, const int ng, int64_t nb,
                                                        int last_cols, float *y, int64_t ldy, const float *bias,
                                                        bool accumulate) {
    const size_t qbytes = q4 ? 256 : 512;
    const int32_t offset = q4 ? 8 : 128;
    const __m512i low = _mm512_set1_epi8(0x0F);
    __m512 acc[R][G];
    for (int r = 0; r < R; r++)
        for (int g = 0; g < G; g++) acc[r][g] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        __m512i isum[R][G];
        for (int r = 0; r < nr; r++) {
            __m512i start = _mm512_set1_epi32(-offset * xs[r * nbx + b]);
            for (int g = 0; g < ng; g++) isum[r][g] = start;
        }
        for (int q = 0; q < 8; q++) {
            __m512i w[G];
            for (int g = 0; g < ng; g++) {
                const uint8_t *blk = panel + (size_t)g * pb + (size_t)b * qbytes;
                if (q4) {
                    __m512i v = _mm512_load_si512((const void *)(blk + (q & 3) * 64));
                    w[g] = q < 4 ? _mm512_and_si512(v, low) : _mm512_and_si512(_mm512_srli_epi16(v, 4), low);
                } else {
                    w[g] = _mm512_load_si512((const void *)(blk + q * 64));
                }
            }
            /* Q4_0: group q < 4 holds elements 4q.., q >= 4 holds 16 + 4(q - 4).. = 4q.. too */
            for (int r = 0; r < nr; r++) {
                __m512i xb = _mm512_set1_epi32(load4(xq + r * ldx + b * 32 + 4 * q));
                for (int g = 0; g < ng; g++) isum[r][g] = _mm512_dpbusd_epi32(isum[r][g], w[g], xb);
            }
        }
        __m512 dw[G];
        for (int g = 0; g < ng; g++)
            dw[g] = _mm512_cvtph_ps(
                _mm256_loadu_si256((const __m256i *)(const void *)(panel + (size_t)g * pb + nb * qbytes + b * 32)));
        for (int r = 0; r < nr; r++) {
            __m512 dx = _mm512_set1_ps(xd[r * nbx + b]);
            for (int g = 0; g < ng; g++)
                acc[r][g] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[r][g]), _mm512_mul_ps(dw[g], dx), acc[r][g]);
        }
    }
    for (int r = 0; r < nr; r++)
        for (int g = 0; g < ng; g++)
            panel_store(y + r * ldy + g * 16, acc[r][g], bias ? bias + g * 16 : NULL, accumulate, g == ng - 1,
                        last_cols);
}

#define DEFINE_QPANEL_TILE(NAME, Q4)                                                                             \
    static void NAME(const int8_t *xq, const float *xd, const int32_t *xs, int64_t ldx, int64_t nbx, int rows,  \
                     const uint8_t *panel, size_t pb, int panels, int64_t nb, int last_cols, float *y,          \
                     int64_t ldy, const float *bias, bool accumulate) {                                         \
        if (rows == R && panels == G)                                                                           \
            qbody(Q4, xq, xd, xs, ldx, nbx, R, panel, pb, G, nb, last_cols, y, ldy, bias, accumulate);          \
        else if (rows == 1 && panels == G)                                                                      \
            qbody(Q4, xq, xd, xs, ldx, nbx, 1, panel, pb, G, nb, last_cols, y, ldy, bias, accumulate);          \
        else if (panels == 1)                                                                                   \
            qbody(Q4, xq, xd, xs, ldx, nbx, rows, panel, pb, 1, nb, last_cols, y, ldy, bias, accumulate);       \
        else if (panels == 2)                                                                                   \
            qbody(Q4, xq, xd, xs, ldx, nbx, rows, panel, pb, 2, nb, last_cols, y, ldy, bias, accumulate);       \
        else                                                                                                    \
            qbody(Q4, xq, xd, xs, ldx, nbx, rows, panel, pb, G, nb, last_cols, y, ldy, bias, accumulate);       \
    }

DEFINE_QPANEL_TILE(qpanel_q8_0, 0)
DEFINE_QPANEL_TILE(qpanel_q4_0, 1)

const pdl_qpanel_fn pdl_qpanel_tile_q8_0_vnni = qpanel_q8_0;
const pdl_qpanel_fn pdl_qpanel_tile_q4_0_vnni = qpanel_q4_0;
#else
const pdl_qpanel_fn pdl_qpanel_tile_q8_0_vnni = NULL;
const pdl_qpanel_fn pdl_qpanel_tile_q4_0_vnni = NULL;
#endif
