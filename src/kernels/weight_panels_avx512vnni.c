/*
 * weight_panels_avx512vnni.c - AVX-512 VNNI panel tiles for Q8_0, Q4_0 and
 * Q4_K weights (layout and order in weight_panels.h).
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

/* Q4_K: per super-block and sub-block j, VPDPBUSD sums the unsigned
 * nibbles times 4 broadcast activations at a time (exact), then the sum is
 * multiplied by the lanes' six-bit scales and added into the super-block's
 * isum; msum is the mins times the activation sums per 32; then the two
 * fused multiply-adds of kquant.h. */
static inline __attribute__((always_inline)) void kbody(const pdl_block_q8k *x, int64_t ldx, const int nr,
                                                        const uint8_t *panel, size_t pb, const int ng, int64_t nb,
                                                        int last_cols, float *y, int64_t ldy, const float *bias,
                                                        bool accumulate) {
    const __m512i low = _mm512_set1_epi8(0x0F);
    __m512 acc[R][G];
    for (int r = 0; r < R; r++)
        for (int g = 0; g < G; g++) acc[r][g] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk[G];
        for (int g = 0; g < ng; g++) blk[g] = panel + (size_t)g * pb + (size_t)b * PDL_Q4K_PANEL_BLOCK;
        __m512i isum[R][G];
        for (int r = 0; r < nr; r++)
            for (int g = 0; g < ng; g++) isum[r][g] = _mm512_setzero_si512();
        for (int j = 0; j < 8; j++) {
            __m512i s[R][G];
            for (int r = 0; r < nr; r++)
                for (int g = 0; g < ng; g++) s[r][g] = _mm512_setzero_si512();
            for (int kk = 0; kk < 8; kk++) {
                __m512i w[G];
                for (int g = 0; g < ng; g++) {
                    __m512i v = _mm512_load_si512((const void *)(blk[g] + ((j / 2) * 8 + kk) * 64));
                    w[g] = _mm512_and_si512(j % 2 ? _mm512_srli_epi16(v, 4) : v, low);
                }
                for (int r = 0; r < nr; r++) {
                    __m512i xb = _mm512_set1_epi32(load4(x[r * ldx + b].qs + 32 * j + 4 * kk));
                    for (int g = 0; g < ng; g++) s[r][g] = _mm512_dpbusd_epi32(s[r][g], w[g], xb);
                }
            }
            for (int g = 0; g < ng; g++) {
                __m512i sc = _mm512_cvtepu8_epi32(_mm_load_si128((const __m128i *)(const void *)(blk[g] + 2048 + j * 16)));
                for (int r = 0; r < nr; r++) isum[r][g] = _mm512_add_epi32(isum[r][g], _mm512_mullo_epi32(s[r][g], sc));
            }
        }
        for (int g = 0; g < ng; g++) {
            __m512 dw = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(const void *)(blk[g] + 2304)));
            __m512 dm = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(const void *)(blk[g] + 2336)));
            for (int r = 0; r < nr; r++) {
                const pdl_block_q8k *xb = &x[r * ldx + b];
                __m512i msum = _mm512_setzero_si512();
                for (int j = 0; j < 8; j++) {
                    __m512i mn = _mm512_cvtepu8_epi32(_mm_load_si128((const __m128i *)(const void *)(blk[g] + 2176 + j * 16)));
                    msum = _mm512_add_epi32(msum, _mm512_mullo_epi32(mn, _mm512_set1_epi32(xb->bsum32[j])));
                }
                __m512 dx = _mm512_set1_ps(xb->d);
                acc[r][g] = _mm512_fmadd_ps(_mm512_mul_ps(dw, dx), _mm512_cvtepi32_ps(isum[r][g]), acc[r][g]);
                __m512 mdx = _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(_mm512_mul_ps(dm, dx)),
                                                                  _mm512_set1_epi32((int)0x80000000u)));
                acc[r][g] = _mm512_fmadd_ps(mdx, _mm512_cvtepi32_ps(msum), acc[r][g]);
            }
        }
    }
    for (int r = 0; r < nr; r++)
        for (int g = 0; g < ng; g++)
            panel_store(y + r * ldy + g * 16, acc[r][g], bias ? bias + g * 16 : NULL, accumulate, g == ng - 1,
                        last_cols);
}

/* One activation row (decode): the same sums, with the loop turned for
 * latency: each loaded nibble vector serves both of its sub-blocks, and
 * each sub-block's sum runs in two accumulators (even and odd groups of 4)
 * added at its end (exact integers, so the order is free); the 4-row tile
 * above has enough independent sums without this. */
static inline __attribute__((always_inline)) void kbody1(const pdl_block_q8k *x, const uint8_t *panel, size_t pb,
                                                         const int ng, int64_t nb, int last_cols, float *y,
                                                         const float *bias, bool accumulate) {
    const __m512i low = _mm512_set1_epi8(0x0F);
    __m512 acc[G];
    for (int g = 0; g < G; g++) acc[g] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk[G];
        for (int g = 0; g < ng; g++) blk[g] = panel + (size_t)g * pb + (size_t)b * PDL_Q4K_PANEL_BLOCK;
        const int8_t *xq = x[b].qs;
        __m512i isum[G];
        for (int g = 0; g < ng; g++) isum[g] = _mm512_setzero_si512();
        for (int p = 0; p < 4; p++) {
            /* sums of even (0) and odd (1) groups of 4, low and high nibbles */
            __m512i sl0[G], sl1[G], sh0[G], sh1[G];
            for (int g = 0; g < ng; g++) sl0[g] = sl1[g] = sh0[g] = sh1[g] = _mm512_setzero_si512();
#define K1_AHEAD (4 * PDL_Q4K_PANEL_BLOCK)
#define K1_STEP(KK, SL, SH)                                                                                  \
    do {                                                                                                     \
        __m512i xl = _mm512_set1_epi32(load4(xq + 64 * p + 4 * (KK)));                                      \
        __m512i xh = _mm512_set1_epi32(load4(xq + 64 * p + 32 + 4 * (KK)));                                 \
        for (int g = 0; g < ng; g++) {                                                                       \
            __m512i v = _mm512_load_si512((const void *)(blk[g] + (p * 8 + (KK)) * 64));                     \
            _mm_prefetch((const char *)(blk[g] + K1_AHEAD + (p * 8 + (KK)) * 64), _MM_HINT_T0);              \
            SL[g] = _mm512_dpbusd_epi32(SL[g], _mm512_and_si512(v, low), xl);                                \
            SH[g] = _mm512_dpbusd_epi32(SH[g], _mm512_and_si512(_mm512_srli_epi16(v, 4), low), xh);          \
        }                                                                                                    \
    } while (0)
            for (int kk = 0; kk < 8; kk += 2) {
                K1_STEP(kk, sl0, sh0);
                K1_STEP(kk + 1, sl1, sh1);
            }
#undef K1_STEP
#undef K1_AHEAD
            for (int g = 0; g < ng; g++) {
                const uint8_t *sc = blk[g] + 2048 + 2 * p * 16;
                __m512i scl = _mm512_cvtepu8_epi32(_mm_load_si128((const __m128i *)(const void *)sc));
                __m512i sch = _mm512_cvtepu8_epi32(_mm_load_si128((const __m128i *)(const void *)(sc + 16)));
                isum[g] = _mm512_add_epi32(isum[g], _mm512_mullo_epi32(_mm512_add_epi32(sl0[g], sl1[g]), scl));
                isum[g] = _mm512_add_epi32(isum[g], _mm512_mullo_epi32(_mm512_add_epi32(sh0[g], sh1[g]), sch));
            }
        }
        __m512 dx = _mm512_set1_ps(x[b].d);
        for (int g = 0; g < ng; g++) {
            __m512i msum = _mm512_setzero_si512();
            for (int j = 0; j < 8; j++) {
                __m512i mn = _mm512_cvtepu8_epi32(_mm_load_si128((const __m128i *)(const void *)(blk[g] + 2176 + j * 16)));
                msum = _mm512_add_epi32(msum, _mm512_mullo_epi32(mn, _mm512_set1_epi32(x[b].bsum32[j])));
            }
            __m512 dw = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(const void *)(blk[g] + 2304)));
            __m512 dm = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(const void *)(blk[g] + 2336)));
            acc[g] = _mm512_fmadd_ps(_mm512_mul_ps(dw, dx), _mm512_cvtepi32_ps(isum[g]), acc[g]);
            __m512 mdx = _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(_mm512_mul_ps(dm, dx)),
                                                              _mm512_set1_epi32((int)0x80000000u)));
            acc[g] = _mm512_fmadd_ps(mdx, _mm512_cvtepi32_ps(msum), acc[g]);
        }
    }
    for (int g = 0; g < ng; g++)
        panel_store(y + g * 16, acc[g], bias ? bias + g * 16 : NULL, accumulate, g == ng - 1, last_cols);
}

static void kpanel_q4_k(const pdl_block_q8k *x, int64_t ldx, int rows, const uint8_t *panel, size_t pb, int panels,
                        int64_t nb, int last_cols, float *y, int64_t ldy, const float *bias, bool accumulate) {
    if (rows == R && panels == G)
        kbody(x, ldx, R, panel, pb, G, nb, last_cols, y, ldy, bias, accumulate);
    else if (rows == 1 && panels == G)
        kbody1(x, panel, pb, G, nb, last_cols, y, bias, accumulate);
    else if (rows == 1)
        kbody1(x, panel, pb, panels, nb, last_cols, y, bias, accumulate);
    else if (panels == 1)
        kbody(x, ldx, rows, panel, pb, 1, nb, last_cols, y, ldy, bias, accumulate);
    else if (panels == 2)
        kbody(x, ldx, rows, panel, pb, 2, nb, last_cols, y, ldy, bias, accumulate);
    else
        kbody(x, ldx, rows, panel, pb, G, nb, last_cols, y, ldy, bias, accumulate);
}

const pdl_qpanel_fn pdl_qpanel_tile_q8_0_vnni = qpanel_q8_0;
const pdl_qpanel_fn pdl_qpanel_tile_q4_0_vnni = qpanel_q4_0;
const pdl_kpanel_fn pdl_kpanel_tile_q4_k_vnni = kpanel_q4_k;
#else
const pdl_qpanel_fn pdl_qpanel_tile_q8_0_vnni = NULL;
const pdl_qpanel_fn pdl_qpanel_tile_q4_0_vnni = NULL;
const pdl_kpanel_fn pdl_kpanel_tile_q4_k_vnni = NULL;
#endif
