/*
 * weight_panels_avx512vnni.c - AVX-512 VNNI panel tiles for Q8_0, Q4_0, MXFP4,
 * IQ4_NL, Q5_0, Q4_1, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS, TQ2_0 and TQ1_0 weights (layout and order in
 * weight_panels.h).
 *
 * Per block, each accumulator's integer sum starts at -offset * (sum of the
 * row's 32 quantized activations) and VPDPBUSD adds the products of the
 * unsigned weight bytes (value + offset: 128 for Q8_0, 8 for Q4_0; MXFP4's
 * codes become their doubled values + 12 by a byte shuffle, VPSHUFB, and
 * IQ4_NL's their int8 values + 128 (1..241) likewise) with 4
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

#include "kernels/iq4nl.h"
#include "kernels/mxfp4.h"
#include "kernels/weight_panels_avx512_body.h" /* panel_store */

#define R PDL_QPANEL_TILE_ROWS
#define G PDL_PANEL_TILE_PANELS

static inline int32_t load4(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* The doubled E2M1 value + 12 of each code, in every 128-bit lane (the
 * VPSHUFB table). */
static inline __m512i mxfp4_codes_plus_offset(void) {
    int8_t t[16];
    for (int i = 0; i < 16; i++) t[i] = (int8_t)(mxfp4_code2[i] + PDL_MXFP4_OFFSET);
    return _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(const void *)t));
}

/* IQ4_NL's value + 128 of each code, in every 128-bit lane (the VPSHUFB
 * table). */
static inline __m512i iq4nl_values_plus_offset(void) {
    uint8_t t[16];
    for (int i = 0; i < 16; i++) t[i] = (uint8_t)(iq4nl_values[i] + PDL_IQ4NL_OFFSET);
    return _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(const void *)t));
}

/* 16 BF16 scales (an MXFP4 panel's, exact 2^(e - 128)) -> 16 floats. */
static inline __m512 mxfp4_scales16(const uint8_t *p) {
    __m256i h = _mm256_loadu_si256((const __m256i *)(const void *)p);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

static inline __attribute__((always_inline)) void qbody(const int q4, const int8_t *xq, const float *xd,
                                                        const int32_t *xs, int64_t ldx, int64_t nbx, const int nr,
                                                        const uint8_t *panel, size_t pb, const int ng, int64_t nb,
                                                        int last_cols, float *y, int64_t ldy, const float *bias,
                                                        bool accumulate) {
    /* q4: 0 Q8_0, 1 Q4_0, 2 MXFP4, 3 IQ4_NL */
    const size_t qbytes = q4 ? 256 : 512;
    const int32_t offset = q4 == 3 ? PDL_IQ4NL_OFFSET : q4 == 2 ? PDL_MXFP4_OFFSET : q4 ? 8 : 128;
    const __m512i low = _mm512_set1_epi8(0x0F);
    const __m512i code2 = q4 == 3 ? iq4nl_values_plus_offset() : mxfp4_codes_plus_offset();
    __m512 acc[R][G];
    for (int r = 0; r < R; r++)
        for (int g = 0; g < G; g++) acc[r][g] = _mm512_setzero_ps();
    size_t at = 0; /* qpanel_quants_at(qbytes, b) */
    for (int64_t b = 0; b < nb; at = qpanel_next_quants(qbytes, at, b), b++) {
        __m512i isum[R][G];
        for (int r = 0; r < nr; r++) {
            __m512i start = _mm512_set1_epi32(-offset * xs[r * nbx + b]);
            for (int g = 0; g < ng; g++) isum[r][g] = start;
        }
        for (int q = 0; q < 8; q++) {
            __m512i w[G];
            for (int g = 0; g < ng; g++) {
                const uint8_t *blk = panel + (size_t)g * pb + at;
                if (nr == 1 && q < (q4 ? 4 : 8)) qpanel_prefetch_step(blk, qbytes, b, q, q4 ? 4 : 8);
                if (q4) {
                    __m512i v = _mm512_load_si512((const void *)(blk + (q & 3) * 64));
                    w[g] = q < 4 ? _mm512_and_si512(v, low) : _mm512_and_si512(_mm512_srli_epi16(v, 4), low);
                    if (q4 >= 2) w[g] = _mm512_shuffle_epi8(code2, w[g]);
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
        size_t scales_at = qpanel_scales_near(qbytes, at, b);
        for (int g = 0; g < ng; g++) {
            const uint8_t *sp = panel + (size_t)g * pb + scales_at;
            dw[g] = q4 == 2 ? mxfp4_scales16(sp) : _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)sp));
        }
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

/* A tile of the per-32-block types over NAME's BODY (qbody's KIND, lbody's
 * dtype): constant shapes for the full tile and 1 to 3 panels, and decode
 * (one row) a panel at a time. */
#define DEFINE_QPANEL_TILE(NAME, BODY, KIND)                                                                        \
    static void NAME(const int8_t *xq, const float *xd, const int32_t *xs, int64_t ldx, int64_t nbx, int rows,      \
                     const uint8_t *panel, size_t pb, int panels, int64_t nb, int last_cols, float *y,              \
                     int64_t ldy, const float *bias, bool accumulate) {                                             \
        if (rows == R && panels == G)                                                                               \
            BODY(KIND, xq, xd, xs, ldx, nbx, R, panel, pb, G, nb, last_cols, y, ldy, bias, accumulate);             \
        else if (rows == 1) /* decode: one panel at a time, its blocks in memory order */                           \
            for (int g = 0; g < panels; g++)                                                                        \
                BODY(KIND, xq, xd, xs, ldx, nbx, 1, panel + (size_t)g * pb, pb, 1, nb,                              \
                      g == panels - 1 ? last_cols : 16, y + g * 16, ldy, bias ? bias + g * 16 : NULL, accumulate);  \
        else if (panels == 1)                                                                                       \
            BODY(KIND, xq, xd, xs, ldx, nbx, rows, panel, pb, 1, nb, last_cols, y, ldy, bias, accumulate);          \
        else if (panels == 2)                                                                                       \
            BODY(KIND, xq, xd, xs, ldx, nbx, rows, panel, pb, 2, nb, last_cols, y, ldy, bias, accumulate);          \
        else                                                                                                        \
            BODY(KIND, xq, xd, xs, ldx, nbx, rows, panel, pb, G, nb, last_cols, y, ldy, bias, accumulate);          \
    }

DEFINE_QPANEL_TILE(qpanel_q8_0, qbody, 0)
DEFINE_QPANEL_TILE(qpanel_q4_0, qbody, 1)
DEFINE_QPANEL_TILE(qpanel_mxfp4, qbody, 2)
DEFINE_QPANEL_TILE(qpanel_iq4_nl, qbody, 3)

/* Q5_K's and Q5_0 / Q5_1's fifth bits: bit j of each byte of a qh word
 * vector moved to bit 4 (16-bit shifts: no bit crosses into the other
 * byte's bit 4), to be ORed onto the nibble values. */
static inline __attribute__((always_inline)) __m512i q5_high(__m512i h, const int j) {
    __m512i s = j <= 4 ? _mm512_slli_epi16(h, (unsigned)(4 - j)) : _mm512_srli_epi16(h, (unsigned)(j - 4));
    return _mm512_and_si512(s, _mm512_set1_epi8(0x10));
}

/* The same five-bit values another way: each byte of lo (a nibble value,
 * 0..15) plus 16 where bit j of the same byte of h is set (a VPTESTMB mask
 * and a masked byte add: two operations where q5_high and its OR take
 * three). The decode body's, whose unpacking is what it waits on (Q5_K
 * decode 1.17x on one Zen 5 core); the 4-row tiles measured slower with
 * it, so they keep q5_high. */
static inline __attribute__((always_inline)) __m512i q5_with_high(__m512i lo, __m512i h, const int j) {
    __mmask64 set = _mm512_test_epi8_mask(h, _mm512_set1_epi8((char)(1 << j)));
    return _mm512_mask_add_epi8(lo, set, lo, _mm512_set1_epi8(16));
}

/* Q4_K: per super-block and sub-block j, VPDPBUSD sums the unsigned
 * nibbles times 4 broadcast activations at a time (exact), then the sum is
 * multiplied by the lanes' six-bit scales and added into the super-block's
 * isum; msum is the mins times the activation sums per 32; then the two
 * fused multiply-adds of kquant.h. Q5_K (q5): the same on Q4_K's part of
 * its panel block, each nibble plus its high bit (values 0..31). */
static inline __attribute__((always_inline)) void kbody(const pdl_block_q8k *x, int64_t ldx, const int nr,
                                                        const uint8_t *panel, size_t pb, const int ng, int64_t nb,
                                                        int last_cols, float *y, int64_t ldy, const float *bias,
                                                        bool accumulate, const int q5) {
    const size_t pbb = q5 ? PDL_Q5K_PANEL_BLOCK : PDL_Q4K_PANEL_BLOCK;
    const __m512i low = _mm512_set1_epi8(0x0F);
    __m512 acc[R][G];
    for (int r = 0; r < R; r++)
        for (int g = 0; g < G; g++) acc[r][g] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk[G];
        for (int g = 0; g < ng; g++) blk[g] = panel + (size_t)g * pb + (size_t)b * pbb;
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
                    if (q5)
                        w[g] = _mm512_or_si512(
                            w[g], q5_high(_mm512_load_si512((const void *)(blk[g] + PDL_Q4K_PANEL_BLOCK + kk * 64)), j));
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
                                                         const float *bias, bool accumulate, const int q5) {
    const size_t pbb = q5 ? PDL_Q5K_PANEL_BLOCK : PDL_Q4K_PANEL_BLOCK;
    const size_t ahead = panel_ahead(pbb);
    const __m512i low = _mm512_set1_epi8(0x0F);
    __m512 acc[G];
    for (int g = 0; g < G; g++) acc[g] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk[G];
        for (int g = 0; g < ng; g++) blk[g] = panel + (size_t)g * pb + (size_t)b * pbb;
        const int8_t *xq = x[b].qs;
        __m512i isum[G];
        for (int g = 0; g < ng; g++) isum[g] = _mm512_setzero_si512();
        for (int p = 0; p < 4; p++) {
            /* sums of even (0) and odd (1) groups of 4, low and high nibbles */
            __m512i sl0[G], sl1[G], sh0[G], sh1[G];
            for (int g = 0; g < ng; g++) sl0[g] = sl1[g] = sh0[g] = sh1[g] = _mm512_setzero_si512();
#define K1_STEP(KK, SL, SH)                                                                                  \
    do {                                                                                                     \
        __m512i xl = _mm512_set1_epi32(load4(xq + 64 * p + 4 * (KK)));                                      \
        __m512i xh = _mm512_set1_epi32(load4(xq + 64 * p + 32 + 4 * (KK)));                                 \
        for (int g = 0; g < ng; g++) {                                                                       \
            __m512i v = _mm512_load_si512((const void *)(blk[g] + (p * 8 + (KK)) * 64));                     \
            _mm_prefetch((const char *)(blk[g] + ahead + (p * 8 + (KK)) * 64), _MM_HINT_T0);                    \
            panel_prefetch_tail(blk[g] + ahead, 2048, PDL_Q4K_PANEL_BLOCK, p * 8 + (KK), 32);                \
            __m512i wl = _mm512_and_si512(v, low), wh = _mm512_and_si512(_mm512_srli_epi16(v, 4), low);          \
            if (q5) {                                                                                        \
                const uint8_t *hl = blk[g] + PDL_Q4K_PANEL_BLOCK + (KK) * 64;                                \
                __m512i h = _mm512_load_si512((const void *)hl);                                             \
                if (p == 0) _mm_prefetch((const char *)(hl + ahead), _MM_HINT_T0);                           \
                wl = q5_with_high(wl, h, 2 * p);                                                             \
                wh = q5_with_high(wh, h, 2 * p + 1);                                                         \
            }                                                                                                \
            SL[g] = _mm512_dpbusd_epi32(SL[g], wl, xl);                                                      \
            SH[g] = _mm512_dpbusd_epi32(SH[g], wh, xh);                                                      \
        }                                                                                                    \
    } while (0)
            for (int kk = 0; kk < 8; kk += 2) {
                K1_STEP(kk, sl0, sh0);
                K1_STEP(kk + 1, sl1, sh1);
            }
#undef K1_STEP
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

static inline __attribute__((always_inline)) void kpanel_q45_k(const pdl_block_q8k *x, int64_t ldx, int rows,
                                                               const uint8_t *panel, size_t pb, int panels, int64_t nb,
                                                               int last_cols, float *y, int64_t ldy, const float *bias,
                                                               bool accumulate, const int q5) {
    if (rows == R && panels == G)
        kbody(x, ldx, R, panel, pb, G, nb, last_cols, y, ldy, bias, accumulate, q5);
    else if (rows == 1) /* decode: one panel at a time, its blocks in memory order */
        for (int g = 0; g < panels; g++)
            kbody1(x, panel + (size_t)g * pb, pb, 1, nb, g == panels - 1 ? last_cols : 16, y + g * 16,
                   bias ? bias + g * 16 : NULL, accumulate, q5);
    else if (panels == 1)
        kbody(x, ldx, rows, panel, pb, 1, nb, last_cols, y, ldy, bias, accumulate, q5);
    else if (panels == 2)
        kbody(x, ldx, rows, panel, pb, 2, nb, last_cols, y, ldy, bias, accumulate, q5);
    else
        kbody(x, ldx, rows, panel, pb, G, nb, last_cols, y, ldy, bias, accumulate, q5);
}

static void kpanel_q4_k(const pdl_block_q8k *x, int64_t ldx, int rows, const uint8_t *panel, size_t pb, int panels,
                        int64_t nb, int last_cols, float *y, int64_t ldy, const float *bias, bool accumulate) {
    kpanel_q45_k(x, ldx, rows, panel, pb, panels, nb, last_cols, y, ldy, bias, accumulate, 0);
}

static void kpanel_q5_k(const pdl_block_q8k *x, int64_t ldx, int rows, const uint8_t *panel, size_t pb, int panels,
                        int64_t nb, int last_cols, float *y, int64_t ldy, const float *bias, bool accumulate) {
    kpanel_q45_k(x, ldx, rows, panel, pb, panels, nb, last_cols, y, ldy, bias, accumulate, 1);
}

/* Q6_K: the 6-bit values of 4 elements of 16 rows, for quarter Q (0..3)
 * of a 128-element half: low nibbles of ql word A (quarters 0, 2 from the
 * first 32 ql bytes, 1, 3 from the next 32) and two bits of qh word H,
 * in the file's positions (weight_panels.h). */
static inline __attribute__((always_inline)) __m512i q6_values(const int quarter, __m512i a, __m512i h) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), m2 = _mm512_set1_epi8(0x30);
    __m512i lo = quarter < 2 ? _mm512_and_si512(a, m4) : _mm512_and_si512(_mm512_srli_epi16(a, 4), m4);
    __m512i hi;
    switch (quarter) {
    case 0: hi = _mm512_and_si512(_mm512_slli_epi16(h, 4), m2); break;
    case 1: hi = _mm512_and_si512(_mm512_slli_epi16(h, 2), m2); break;
    case 2: hi = _mm512_and_si512(h, m2); break;
    default: hi = _mm512_and_si512(_mm512_srli_epi16(h, 2), m2); break;
    }
    return _mm512_or_si512(lo, hi);
}

/* Q6_K, Q3_K and Q2_K (KIND) walk their panels alike: 16 groups of 16
 * elements a super-block, a group's 4 steps of 4 elements per half and
 * quarter. Step l4's vectors (weight_panels.h): Q6_K three per half (ql,
 * ql + 32, qh), Q3_K three (the qs of each half, the hmask), Q2_K two (the
 * qs of each half). */
enum { K16_Q6K, K16_Q3K, K16_Q2K };

static inline size_t k16_block_bytes(const int KIND) {
    return KIND == K16_Q6K ? PDL_Q6K_PANEL_BLOCK : KIND == K16_Q3K ? PDL_Q3K_PANEL_BLOCK : PDL_Q2K_PANEL_BLOCK;
}

/* Where the 16 groups' scales start (Q6_K, Q3_K: int8; Q2_K: four-bit,
 * unsigned): as int32, group `group`'s. */
static inline __attribute__((always_inline)) __m512i k16_scales(const uint8_t *blk, int group, const int KIND) {
    const size_t at = (KIND == K16_Q6K ? 3072 : KIND == K16_Q3K ? 1536 : 1024) + (size_t)group * 16;
    __m128i s = _mm_load_si128((const __m128i *)(const void *)(blk + at));
    return KIND == K16_Q2K ? _mm512_cvtepu8_epi32(s) : _mm512_cvtepi8_epi32(s);
}

/* A group's sum sg of (q + offset) x into the super-block's isum, less
 * off (offset x the group's activation sum, bsum16; 0 for Q2_K) and times
 * the group's 16 scales sc (k16_scales); and Q6_K's and Q3_K's block end,
 * isum times its d (at dw) and the row's into acc, as kquant.h. */
static inline __attribute__((always_inline)) __m512i k16_group_into(__m512i isum, __m512i sg, int32_t off,
                                                                    __m512i sc) {
    return _mm512_add_epi32(isum, _mm512_mullo_epi32(_mm512_sub_epi32(sg, _mm512_set1_epi32(off)), sc));
}
static inline __attribute__((always_inline)) __m512 k16_block_end(__m512 acc, __m512i isum, const uint8_t *dw,
                                                                  float dx) {
    __m512 d = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(const void *)dw));
    return _mm512_fmadd_ps(_mm512_mul_ps(d, _mm512_set1_ps(dx)), _mm512_cvtepi32_ps(isum), acc);
}

/* One activation row (decode): each step's three loads (side by side in
 * the panel) give the values of all four quarters, summed into one
 * accumulator per quarter (the groups of a step's 4 elements). */
static inline __attribute__((always_inline)) void q6body1(const pdl_block_q8k *x, const uint8_t *panel, int64_t nb,
                                                          int last_cols, float *y, const float *bias,
                                                          bool accumulate) {
    const size_t ahead = panel_ahead(PDL_Q6K_PANEL_BLOCK);
    __m512 acc = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = panel + (size_t)b * PDL_Q6K_PANEL_BLOCK;
        const int8_t *xq = x[b].qs;
        __m512i isum = _mm512_setzero_si512();
        for (int half = 0; half < 2; half++)
            for (int gs = 0; gs < 2; gs++) {
                __m512i s[4];
                for (int t = 0; t < 4; t++) s[t] = _mm512_setzero_si512();
                for (int l4 = 4 * gs; l4 < 4 * gs + 4; l4++) {
                    const int8_t *xs = xq + 128 * half + 4 * l4;
                    __m512i x0 = _mm512_set1_epi32(load4(xs)), x1 = _mm512_set1_epi32(load4(xs + 32));
                    __m512i x2 = _mm512_set1_epi32(load4(xs + 64)), x3 = _mm512_set1_epi32(load4(xs + 96));
                    const uint8_t *wd = blk + (size_t)((8 * half + l4) * 3) * 64;
                    _mm_prefetch((const char *)(wd + ahead), _MM_HINT_T0);
                    _mm_prefetch((const char *)(wd + 64 + ahead), _MM_HINT_T0);
                    _mm_prefetch((const char *)(wd + 128 + ahead), _MM_HINT_T0);
                    panel_prefetch_tail(blk + ahead, 3072, PDL_Q6K_PANEL_BLOCK, 8 * half + l4, 16);
                    __m512i a = _mm512_load_si512((const void *)wd), a2 = _mm512_load_si512((const void *)(wd + 64));
                    __m512i h = _mm512_load_si512((const void *)(wd + 128));
                    s[0] = _mm512_dpbusd_epi32(s[0], q6_values(0, a, h), x0);
                    s[1] = _mm512_dpbusd_epi32(s[1], q6_values(1, a2, h), x1);
                    s[2] = _mm512_dpbusd_epi32(s[2], q6_values(2, a, h), x2);
                    s[3] = _mm512_dpbusd_epi32(s[3], q6_values(3, a2, h), x3);
                }
#pragma GCC unroll 4
                for (int quarter = 0; quarter < 4; quarter++) {
                    int group = 8 * half + 2 * quarter + gs;
                    isum = k16_group_into(isum, s[quarter], 32 * x[b].bsum16[group], k16_scales(blk, group, K16_Q6K));
                }
            }
        acc = k16_block_end(acc, isum, blk + 3328, x[b].d);
    }
    panel_store(y, acc, bias, accumulate, true, last_cols);
}

/* Q3_K: the unsigned values q + 4 (0..7) of 4 elements of 16 rows for
 * half H and quarter K: bits 2K of qs word vector A (the half's), bit 4H +
 * K of hmask word vector M moved to bit 2 (16-bit shifts: no bit crosses
 * into the other byte's bits 0..2). */
static inline __attribute__((always_inline)) __m512i q3_values(const int half, const int quarter, __m512i a,
                                                               __m512i m) {
    const int t = 4 * half + quarter;
    __m512i lo = _mm512_and_si512(_mm512_srli_epi16(a, (unsigned)(2 * quarter)), _mm512_set1_epi8(0x03));
    __m512i hb = t <= 2 ? _mm512_slli_epi16(m, (unsigned)(2 - t)) : _mm512_srli_epi16(m, (unsigned)(t - 2));
    return _mm512_or_si512(lo, _mm512_and_si512(hb, _mm512_set1_epi8(0x04)));
}

/* Q2_K: the end of a super-block: msum (the mins times the activation
 * sums per 16) and kquant.h's two fused multiply-adds into acc. */
static inline __attribute__((always_inline)) __m512 q2_block_end(const uint8_t *blk, __m512i isum,
                                                                 const pdl_block_q8k *xb, __m512 acc) {
    __m512i msum = _mm512_setzero_si512();
    for (int g = 0; g < 16; g++) {
        __m512i mn = _mm512_cvtepu8_epi32(_mm_load_si128((const __m128i *)(const void *)(blk + 1280 + g * 16)));
        msum = _mm512_add_epi32(msum, _mm512_mullo_epi32(mn, _mm512_set1_epi32(xb->bsum16[g])));
    }
    __m512 dw = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(const void *)(blk + 1536)));
    __m512 dm = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(const void *)(blk + 1568)));
    __m512 dx = _mm512_set1_ps(xb->d);
    acc = _mm512_fmadd_ps(_mm512_mul_ps(dw, dx), _mm512_cvtepi32_ps(isum), acc);
    __m512 mdx = _mm512_castsi512_ps(
        _mm512_xor_si512(_mm512_castps_si512(_mm512_mul_ps(dm, dx)), _mm512_set1_epi32((int)0x80000000u)));
    return _mm512_fmadd_ps(mdx, _mm512_cvtepi32_ps(msum), acc);
}

/* NR rows (up to R) of a Q6_K, Q3_K or Q2_K panel: per group of 16
 * elements VPDPBUSD sums the unsigned values (q + 32, q + 4, q) times x
 * over 4 steps of 4 (exact), the group's sum of x times the offset (32, 4)
 * is taken off and the group's scale multiplies it into the super-block's
 * isum; then one fused multiply-add, as kquant.h (Q2_K: q2_block_end's
 * two). */
static inline __attribute__((always_inline)) void k16body(const int KIND, const pdl_block_q8k *x, int64_t ldx,
                                                          const int nr, const uint8_t *panel, int64_t nb,
                                                          int last_cols, float *y, int64_t ldy, const float *bias,
                                                          bool accumulate) {
    const size_t pbb = k16_block_bytes(KIND);
    const int offset = KIND == K16_Q6K ? 32 : KIND == K16_Q3K ? 4 : 0;
    __m512 acc[R];
    for (int r = 0; r < R; r++) acc[r] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = panel + (size_t)b * pbb;
        __m512i isum[R];
        for (int r = 0; r < nr; r++) isum[r] = _mm512_setzero_si512();
#pragma GCC unroll 2
        for (int half = 0; half < 2; half++)
#pragma GCC unroll 4
            for (int quarter = 0; quarter < 4; quarter++) /* constants in each copy: the values without branches */
#pragma GCC unroll 2
                for (int gs = 0; gs < 2; gs++) { /* group 8 half + 2 quarter + gs */
                    int group = 8 * half + 2 * quarter + gs;
                    __m512i sg[R];
                    for (int r = 0; r < nr; r++) sg[r] = _mm512_setzero_si512();
                    for (int l4 = 4 * gs; l4 < 4 * gs + 4; l4++) {
                        __m512i w;
                        if (KIND == K16_Q2K) {
                            __m512i a = _mm512_load_si512((const void *)(blk + (size_t)(l4 * 2 + half) * 64));
                            w = _mm512_and_si512(_mm512_srli_epi16(a, (unsigned)(2 * quarter)), _mm512_set1_epi8(0x03));
                        } else {
                            const int q6 = KIND == K16_Q6K;
                            const uint8_t *wd = blk + (size_t)(((q6 ? 8 * half : 0) + l4) * 3) * 64;
                            __m512i a = _mm512_load_si512((const void *)(wd + (q6 ? quarter % 2 : half) * 64));
                            __m512i h = _mm512_load_si512((const void *)(wd + 128));
                            w = q6 ? q6_values(quarter, a, h) : q3_values(half, quarter, a, h);
                        }
                        for (int r = 0; r < nr; r++) {
                            __m512i xb = _mm512_set1_epi32(load4(x[r * ldx + b].qs + 128 * half + 32 * quarter + 4 * l4));
                            sg[r] = _mm512_dpbusd_epi32(sg[r], w, xb);
                        }
                    }
                    __m512i sc = k16_scales(blk, group, KIND);
                    for (int r = 0; r < nr; r++)
                        isum[r] = k16_group_into(isum[r], sg[r], offset * x[r * ldx + b].bsum16[group], sc);
                }
        if (KIND == K16_Q2K) {
            for (int r = 0; r < nr; r++) acc[r] = q2_block_end(blk, isum[r], &x[r * ldx + b], acc[r]);
        } else {
            const uint8_t *d = blk + (KIND == K16_Q6K ? 3328 : 1792); /* the 16 rows' d, after the scales */
            __m512 dw = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(const void *)d));
            for (int r = 0; r < nr; r++) {
                __m512 dx = _mm512_set1_ps(x[r * ldx + b].d);
                acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(dw, dx), _mm512_cvtepi32_ps(isum[r]), acc[r]);
            }
        }
    }
    for (int r = 0; r < nr; r++) panel_store(y + r * ldy, acc[r], bias, accumulate, true, last_cols);
}

/* One activation row (decode) of Q3_K or Q2_K: each step's loads (side
 * by side in the panel: three, two) give the values of all eight
 * quarters, summed into one accumulator per quarter (the groups of a
 * step's 4 elements). */
static inline __attribute__((always_inline)) void k16body1_low(const int KIND, const pdl_block_q8k *x,
                                                               const uint8_t *panel, int64_t nb, int last_cols,
                                                               float *y, const float *bias, bool accumulate) {
    const int q3 = KIND == K16_Q3K, vecs = q3 ? 3 : 2;
    const size_t pbb = k16_block_bytes(KIND), ahead = panel_ahead(pbb), steps_end = q3 ? 1536 : 1024;
    __m512 acc = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = panel + (size_t)b * pbb;
        const int8_t *xq = x[b].qs;
        __m512i isum = _mm512_setzero_si512();
        for (int gs = 0; gs < 2; gs++) {
            __m512i s[8];
            for (int t = 0; t < 8; t++) s[t] = _mm512_setzero_si512();
            for (int l4 = 4 * gs; l4 < 4 * gs + 4; l4++) {
                const uint8_t *wd = blk + (size_t)(l4 * vecs) * 64;
                for (int i = 0; i < vecs; i++) _mm_prefetch((const char *)(wd + 64 * i + ahead), _MM_HINT_T0);
                panel_prefetch_tail(blk + ahead, steps_end, pbb, l4, 8);
                __m512i a0 = _mm512_load_si512((const void *)wd), a1 = _mm512_load_si512((const void *)(wd + 64));
                __m512i m = q3 ? _mm512_load_si512((const void *)(wd + 128)) : _mm512_setzero_si512();
#pragma GCC unroll 8
                for (int t = 0; t < 8; t++) { /* t = 4 half + quarter */
                    __m512i xb = _mm512_set1_epi32(load4(xq + 32 * t + 4 * l4));
                    __m512i v = q3 ? q3_values(t / 4, t % 4, t / 4 ? a1 : a0, m)
                                   : _mm512_and_si512(_mm512_srli_epi16(t / 4 ? a1 : a0, (unsigned)(2 * (t % 4))),
                                                      _mm512_set1_epi8(0x03));
                    s[t] = _mm512_dpbusd_epi32(s[t], v, xb);
                }
            }
            for (int t = 0; t < 8; t++) {
                int group = 2 * t + gs;
                isum = k16_group_into(isum, s[t], q3 ? 4 * x[b].bsum16[group] : 0, k16_scales(blk, group, KIND));
            }
        }
        acc = q3 ? k16_block_end(acc, isum, blk + 1792, x[b].d) : q2_block_end(blk, isum, &x[b], acc);
    }
    panel_store(y, acc, bias, accumulate, true, last_cols);
}

/* The bodies the tile macro below takes. */
static inline __attribute__((always_inline)) void q6body(const pdl_block_q8k *x, int64_t ldx, const int nr,
                                                         const uint8_t *panel, int64_t nb, int last_cols, float *y,
                                                         int64_t ldy, const float *bias, bool accumulate) {
    k16body(K16_Q6K, x, ldx, nr, panel, nb, last_cols, y, ldy, bias, accumulate);
}
static inline __attribute__((always_inline)) void q3body(const pdl_block_q8k *x, int64_t ldx, const int nr,
                                                         const uint8_t *panel, int64_t nb, int last_cols, float *y,
                                                         int64_t ldy, const float *bias, bool accumulate) {
    k16body(K16_Q3K, x, ldx, nr, panel, nb, last_cols, y, ldy, bias, accumulate);
}
static inline __attribute__((always_inline)) void q2body(const pdl_block_q8k *x, int64_t ldx, const int nr,
                                                         const uint8_t *panel, int64_t nb, int last_cols, float *y,
                                                         int64_t ldy, const float *bias, bool accumulate) {
    k16body(K16_Q2K, x, ldx, nr, panel, nb, last_cols, y, ldy, bias, accumulate);
}
static inline __attribute__((always_inline)) void q3body1(const pdl_block_q8k *x, const uint8_t *panel, int64_t nb,
                                                          int last_cols, float *y, const float *bias,
                                                          bool accumulate) {
    k16body1_low(K16_Q3K, x, panel, nb, last_cols, y, bias, accumulate);
}
static inline __attribute__((always_inline)) void q2body1(const pdl_block_q8k *x, const uint8_t *panel, int64_t nb,
                                                          int last_cols, float *y, const float *bias,
                                                          bool accumulate) {
    k16body1_low(K16_Q2K, x, panel, nb, last_cols, y, bias, accumulate);
}

/* IQ4_XS, NR rows x NG panels: per sub-block j the codes' values + 128
 * (VPSHUFB, as IQ4_NL's) times the activations, 4 steps of a low and a
 * high nibble vector, into a sum that starts at -128 x the activations'
 * sum over the sub-block (bsum32), which leaves exactly sum v x; times the
 * lanes' signed scales into isum; then one fused multiply-add, as
 * kquant.h. One row (decode) prefetches ahead as the other bodies do. */
static inline __attribute__((always_inline)) void iq4xs_body(const pdl_block_q8k *x, int64_t ldx, const int nr,
                                                             const uint8_t *panel, size_t pb, const int ng, int64_t nb,
                                                             int last_cols, float *y, int64_t ldy, const float *bias,
                                                             bool accumulate) {
    const __m512i low = _mm512_set1_epi8(0x0F), values = iq4nl_values_plus_offset();
    const size_t ahead = panel_ahead(PDL_IQ4XS_PANEL_BLOCK);
    __m512 acc[R][G];
    for (int r = 0; r < R; r++)
        for (int g = 0; g < G; g++) acc[r][g] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk[G];
        for (int g = 0; g < ng; g++) blk[g] = panel + (size_t)g * pb + (size_t)b * PDL_IQ4XS_PANEL_BLOCK;
        __m512i isum[R][G];
        for (int r = 0; r < nr; r++)
            for (int g = 0; g < ng; g++) isum[r][g] = _mm512_setzero_si512();
        for (int j = 0; j < 8; j++) {
            __m512i s[R][G];
            for (int r = 0; r < nr; r++) {
                __m512i start = _mm512_set1_epi32(-PDL_IQ4NL_OFFSET * x[r * ldx + b].bsum32[j]);
                for (int g = 0; g < ng; g++) s[r][g] = start;
            }
            for (int q = 0; q < 4; q++) {
                __m512i wl[G], wh[G];
                for (int g = 0; g < ng; g++) {
                    const uint8_t *line = blk[g] + (4 * j + q) * 64;
                    if (nr == 1) {
                        _mm_prefetch((const char *)(line + ahead), _MM_HINT_T0);
                        panel_prefetch_tail(blk[g] + ahead, 2048, PDL_IQ4XS_PANEL_BLOCK, 4 * j + q, 32);
                    }
                    __m512i v = _mm512_load_si512((const void *)line);
                    wl[g] = _mm512_shuffle_epi8(values, _mm512_and_si512(v, low));
                    wh[g] = _mm512_shuffle_epi8(values, _mm512_and_si512(_mm512_srli_epi16(v, 4), low));
                }
                for (int r = 0; r < nr; r++) {
                    const int8_t *xq = x[r * ldx + b].qs + 32 * j + 4 * q;
                    __m512i xl = _mm512_set1_epi32(load4(xq)), xh = _mm512_set1_epi32(load4(xq + 16));
                    for (int g = 0; g < ng; g++) {
                        s[r][g] = _mm512_dpbusd_epi32(s[r][g], wl[g], xl);
                        s[r][g] = _mm512_dpbusd_epi32(s[r][g], wh[g], xh);
                    }
                }
            }
            for (int g = 0; g < ng; g++) {
                __m512i sc = _mm512_cvtepi8_epi32(_mm_load_si128((const __m128i *)(const void *)(blk[g] + 2048 + j * 16)));
                for (int r = 0; r < nr; r++) isum[r][g] = _mm512_add_epi32(isum[r][g], _mm512_mullo_epi32(s[r][g], sc));
            }
        }
        for (int g = 0; g < ng; g++) {
            __m512 dw = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(const void *)(blk[g] + 2176)));
            for (int r = 0; r < nr; r++) {
                __m512 dx = _mm512_set1_ps(x[r * ldx + b].d);
                acc[r][g] = _mm512_fmadd_ps(_mm512_mul_ps(dw, dx), _mm512_cvtepi32_ps(isum[r][g]), acc[r][g]);
            }
        }
    }
    for (int r = 0; r < nr; r++)
        for (int g = 0; g < ng; g++)
            panel_store(y + r * ldy + g * 16, acc[r][g], bias ? bias + g * 16 : NULL, accumulate, g == ng - 1,
                        last_cols);
}

static void kpanel_iq4_xs(const pdl_block_q8k *x, int64_t ldx, int rows, const uint8_t *panel, size_t pb, int panels,
                          int64_t nb, int last_cols, float *y, int64_t ldy, const float *bias, bool accumulate) {
    if (rows == R && panels == G)
        iq4xs_body(x, ldx, R, panel, pb, G, nb, last_cols, y, ldy, bias, accumulate);
    else if (rows == 1) /* decode: one panel at a time, its blocks in memory order */
        for (int g = 0; g < panels; g++)
            iq4xs_body(x, ldx, 1, panel + (size_t)g * pb, pb, 1, nb, g == panels - 1 ? last_cols : 16, y + g * 16,
                       ldy, bias ? bias + g * 16 : NULL, accumulate);
    else if (panels == 1)
        iq4xs_body(x, ldx, rows, panel, pb, 1, nb, last_cols, y, ldy, bias, accumulate);
    else if (panels == 2)
        iq4xs_body(x, ldx, rows, panel, pb, 2, nb, last_cols, y, ldy, bias, accumulate);
    else
        iq4xs_body(x, ldx, rows, panel, pb, G, nb, last_cols, y, ldy, bias, accumulate);
}

/* Q5_0, Q4_1 and Q5_1 (weight_panels.h's layout): qbody's steps on
 * Q4_0's nibble words, each code plus its fifth bit (Q5: q5_high of the
 * block's rearranged qh word vector, bit q for step q), sums starting at
 * -16 x sum(x) for Q5_0 (codes w + 16) and at 0 for Q4_1 / Q5_1, whose
 * min term follows the block's fma: acc = fma(xs, m x dx, acc). */
static inline __attribute__((always_inline)) void lbody(const pdl_dtype dt, const int8_t *xq, const float *xd,
                                                        const int32_t *xs, int64_t ldx, int64_t nbx, const int nr,
                                                        const uint8_t *panel, size_t pb, const int ng, int64_t nb,
                                                        int last_cols, float *y, int64_t ldy, const float *bias,
                                                        bool accumulate) {
    const size_t qbytes = legacy_panel_qbytes(dt), min_at = legacy_panel_min_at(dt);
    const bool q5 = dt != PDL_DTYPE_Q4_1, with_min = dt != PDL_DTYPE_Q5_0;
    const __m512i low = _mm512_set1_epi8(0x0F);
    __m512 acc[R][G];
    for (int r = 0; r < R; r++)
        for (int g = 0; g < G; g++) acc[r][g] = _mm512_setzero_ps();
    size_t at = 0; /* qpanel_quants_at(qbytes, b) */
    for (int64_t b = 0; b < nb; at = qpanel_next_quants(qbytes, at, b), b++) {
        __m512i isum[R][G], hv[G];
        for (int r = 0; r < nr; r++) {
            __m512i start = _mm512_set1_epi32(with_min ? 0 : -16 * xs[r * nbx + b]);
            for (int g = 0; g < ng; g++) isum[r][g] = start;
        }
        for (int g = 0; g < ng; g++)
            hv[g] = q5 ? _mm512_load_si512((const void *)(panel + (size_t)g * pb + at + PDL_LEGACY_PANEL_HIGH_AT))
                       : _mm512_setzero_si512();
        _Pragma("GCC unroll 8") /* q constant in each copy: q5_high's shifts take immediates */
        for (int q = 0; q < 8; q++) {
            __m512i w[G];
            for (int g = 0; g < ng; g++) {
                if (nr == 1 && q < 4) qpanel_prefetch_step(panel + (size_t)g * pb + at, qbytes, b, q, 4);
                __m512i v = _mm512_load_si512((const void *)(panel + (size_t)g * pb + at + (q & 3) * 64));
                w[g] = q < 4 ? _mm512_and_si512(v, low) : _mm512_and_si512(_mm512_srli_epi16(v, 4), low);
                if (q5) w[g] = _mm512_or_si512(w[g], q5_high(hv[g], q));
            }
            for (int r = 0; r < nr; r++) {
                __m512i xb = _mm512_set1_epi32(load4(xq + r * ldx + b * 32 + 4 * q));
                for (int g = 0; g < ng; g++) isum[r][g] = _mm512_dpbusd_epi32(isum[r][g], w[g], xb);
            }
        }
        __m512 dw[G], m[G];
        size_t scales_at = qpanel_scales_near(qbytes, at, b);
        for (int g = 0; g < ng; g++) {
            const uint8_t *pg = panel + (size_t)g * pb;
            dw[g] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(pg + scales_at)));
            m[g] = with_min ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(pg + at + min_at)))
                            : _mm512_setzero_ps();
        }
        for (int r = 0; r < nr; r++) {
            __m512 dx = _mm512_set1_ps(xd[r * nbx + b]);
            for (int g = 0; g < ng; g++) {
                acc[r][g] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[r][g]), _mm512_mul_ps(dw[g], dx), acc[r][g]);
                if (with_min)
                    acc[r][g] = _mm512_fmadd_ps(_mm512_set1_ps((float)xs[r * nbx + b]), _mm512_mul_ps(m[g], dx),
                                                acc[r][g]);
            }
        }
    }
    for (int r = 0; r < nr; r++)
        for (int g = 0; g < ng; g++)
            panel_store(y + r * ldy + g * 16, acc[r][g], bias ? bias + g * 16 : NULL, accumulate, g == ng - 1,
                        last_cols);
}

DEFINE_QPANEL_TILE(qpanel_q5_0, lbody, PDL_DTYPE_Q5_0)
DEFINE_QPANEL_TILE(qpanel_q4_1, lbody, PDL_DTYPE_Q4_1)
DEFINE_QPANEL_TILE(qpanel_q5_1, lbody, PDL_DTYPE_Q5_1)

/* TQ2_0 / TQ1_0: the end of a super-block: the codes' sum (codes 0..3
 * times x) minus the activations' sum (all 16 bsum16) is kquant.h's isum,
 * then one fused multiply-add into acc. */
static inline __attribute__((always_inline)) __m512 tq_block_end(const uint8_t *blk, __m512i csum,
                                                                 const pdl_block_q8k *xb, __m512 acc) {
    int32_t bt = 0;
    for (int g = 0; g < 16; g++) bt += xb->bsum16[g];
    __m512i isum = _mm512_sub_epi32(csum, _mm512_set1_epi32(bt));
    __m512 dw = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(const void *)(blk + 1024)));
    return _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_set1_ps(xb->d)), _mm512_cvtepi32_ps(isum), acc);
}

/* NR rows (up to R) of a TQ2_0 / TQ1_0 panel: VPDPBUSD sums code x over
 * the whole super-block (exact), Q2_K's walk of the codes without its
 * scales; then tq_block_end. */
static inline __attribute__((always_inline)) void tqbody(const pdl_block_q8k *x, int64_t ldx, const int nr,
                                                         const uint8_t *panel, int64_t nb, int last_cols, float *y,
                                                         int64_t ldy, const float *bias, bool accumulate) {
    const __m512i m3 = _mm512_set1_epi8(0x03);
    __m512 acc[R];
    for (int r = 0; r < R; r++) acc[r] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = panel + (size_t)b * PDL_TQ_PANEL_BLOCK;
        __m512i csum[R];
        for (int r = 0; r < nr; r++) csum[r] = _mm512_setzero_si512();
#pragma GCC unroll 2
        for (int half = 0; half < 2; half++)
#pragma GCC unroll 4
            for (int quarter = 0; quarter < 4; quarter++)
                for (int l4 = 0; l4 < 8; l4++) {
                    __m512i a = _mm512_load_si512((const void *)(blk + (size_t)(l4 * 2 + half) * 64));
                    __m512i w = _mm512_and_si512(_mm512_srli_epi16(a, (unsigned)(2 * quarter)), m3);
                    for (int r = 0; r < nr; r++) {
                        __m512i xb = _mm512_set1_epi32(load4(x[r * ldx + b].qs + 128 * half + 32 * quarter + 4 * l4));
                        csum[r] = _mm512_dpbusd_epi32(csum[r], w, xb);
                    }
                }
        for (int r = 0; r < nr; r++) acc[r] = tq_block_end(blk, csum[r], &x[r * ldx + b], acc[r]);
    }
    for (int r = 0; r < nr; r++) panel_store(y + r * ldy, acc[r], bias, accumulate, true, last_cols);
}

/* One activation row (decode): each step's two loads give the codes of all
 * eight quarters, summed into two chains. */
static inline __attribute__((always_inline)) void tqbody1(const pdl_block_q8k *x, const uint8_t *panel, int64_t nb,
                                                          int last_cols, float *y, const float *bias,
                                                          bool accumulate) {
    const __m512i m3 = _mm512_set1_epi8(0x03);
    const size_t ahead = panel_ahead(PDL_TQ_PANEL_BLOCK);
    __m512 acc = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = panel + (size_t)b * PDL_TQ_PANEL_BLOCK;
        const int8_t *xq = x[b].qs;
        __m512i s[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()};
        for (int l4 = 0; l4 < 8; l4++) {
            const uint8_t *wd = blk + (size_t)(l4 * 2) * 64;
            _mm_prefetch((const char *)(wd + ahead), _MM_HINT_T0);
            _mm_prefetch((const char *)(wd + 64 + ahead), _MM_HINT_T0);
            panel_prefetch_tail(blk + ahead, 1024, PDL_TQ_PANEL_BLOCK, l4, 8);
            __m512i a0 = _mm512_load_si512((const void *)wd), a1 = _mm512_load_si512((const void *)(wd + 64));
#pragma GCC unroll 8
            for (int t = 0; t < 8; t++) { /* t = 4 half + quarter */
                __m512i xb = _mm512_set1_epi32(load4(xq + 32 * t + 4 * l4));
                __m512i v = _mm512_and_si512(_mm512_srli_epi16(t / 4 ? a1 : a0, (unsigned)(2 * (t % 4))), m3);
                s[t % 2] = _mm512_dpbusd_epi32(s[t % 2], v, xb);
            }
        }
        acc = tq_block_end(blk, _mm512_add_epi32(s[0], s[1]), &x[b], acc);
    }
    panel_store(y, acc, bias, accumulate, true, last_cols);
}

/* Q6_K, Q3_K, Q2_K and TQ2_0 / TQ1_0: up to R rows of one panel at a time
 * (BODY), and decode (BODY1: one row) one panel at a time, its blocks in
 * memory order. Two panels a tile, as the other types take, held 4 rows'
 * group sums, super-block sums and accumulators for both: the registers
 * spilled and prefill ran 1.2-1.4x slower (docs/benchmarks.md). */
#define DEFINE_ONE_PANEL_TILE(NAME, BODY, BODY1)                                                                 \
    static void NAME(const pdl_block_q8k *x, int64_t ldx, int rows, const uint8_t *panel, size_t pb, int panels, \
                     int64_t nb, int last_cols, float *y, int64_t ldy, const float *bias, bool accumulate) {    \
        if (rows == 1) {                                                                                        \
            for (int g = 0; g < panels; g++)                                                                    \
                BODY1(x, panel + (size_t)g * pb, nb, g == panels - 1 ? last_cols : 16, y + g * 16,              \
                      bias ? bias + g * 16 : NULL, accumulate);                                                 \
            return;                                                                                             \
        }                                                                                                       \
        for (int g = 0; g < panels; g++) {                                                                      \
            const uint8_t *pg = panel + (size_t)g * pb;                                                         \
            int last = g == panels - 1 ? last_cols : 16;                                                        \
            const float *bg = bias ? bias + g * 16 : NULL;                                                      \
            if (rows == R) BODY(x, ldx, R, pg, nb, last, y + g * 16, ldy, bg, accumulate);                      \
            else BODY(x, ldx, rows, pg, nb, last, y + g * 16, ldy, bg, accumulate);                             \
        }                                                                                                       \
    }

DEFINE_ONE_PANEL_TILE(kpanel_q6_k, q6body, q6body1)
DEFINE_ONE_PANEL_TILE(kpanel_q3_k, q3body, q3body1)
DEFINE_ONE_PANEL_TILE(kpanel_q2_k, q2body, q2body1)
DEFINE_ONE_PANEL_TILE(kpanel_tq, tqbody, tqbody1)

const pdl_qpanel_fn qpanel_tile_q8_0_vnni = qpanel_q8_0;
const pdl_qpanel_fn qpanel_tile_q4_0_vnni = qpanel_q4_0;
const pdl_qpanel_fn qpanel_tile_mxfp4_vnni = qpanel_mxfp4;
const pdl_qpanel_fn qpanel_tile_iq4_nl_vnni = qpanel_iq4_nl;
const pdl_kpanel_fn kpanel_tile_q4_k_vnni = kpanel_q4_k;
const pdl_kpanel_fn kpanel_tile_q5_k_vnni = kpanel_q5_k;
const pdl_kpanel_fn kpanel_tile_q6_k_vnni = kpanel_q6_k;
const pdl_kpanel_fn kpanel_tile_q3_k_vnni = kpanel_q3_k;
const pdl_kpanel_fn kpanel_tile_q2_k_vnni = kpanel_q2_k;
const pdl_kpanel_fn kpanel_tile_iq4_xs_vnni = kpanel_iq4_xs;
const pdl_kpanel_fn kpanel_tile_tq_vnni = kpanel_tq;
const pdl_qpanel_fn qpanel_tile_q5_0_vnni = qpanel_q5_0;
const pdl_qpanel_fn qpanel_tile_q4_1_vnni = qpanel_q4_1;
const pdl_qpanel_fn qpanel_tile_q5_1_vnni = qpanel_q5_1;
#else
const pdl_qpanel_fn qpanel_tile_q8_0_vnni = NULL;
const pdl_qpanel_fn qpanel_tile_q4_0_vnni = NULL;
const pdl_qpanel_fn qpanel_tile_mxfp4_vnni = NULL;
const pdl_qpanel_fn qpanel_tile_iq4_nl_vnni = NULL;
const pdl_kpanel_fn kpanel_tile_q4_k_vnni = NULL;
const pdl_kpanel_fn kpanel_tile_q5_k_vnni = NULL;
const pdl_kpanel_fn kpanel_tile_q6_k_vnni = NULL;
const pdl_kpanel_fn kpanel_tile_q3_k_vnni = NULL;
const pdl_kpanel_fn kpanel_tile_q2_k_vnni = NULL;
const pdl_kpanel_fn kpanel_tile_iq4_xs_vnni = NULL;
const pdl_kpanel_fn kpanel_tile_tq_vnni = NULL;
const pdl_qpanel_fn qpanel_tile_q5_0_vnni = NULL;
const pdl_qpanel_fn qpanel_tile_q4_1_vnni = NULL;
const pdl_qpanel_fn qpanel_tile_q5_1_vnni = NULL;
#endif
