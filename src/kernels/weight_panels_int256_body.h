/*
 * weight_panels_int256_body.h - the 256-bit integer panel tiles for Q8_0,
 * Q4_0, MXFP4, IQ4_NL, Q5_0, Q4_1, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS, TQ2_0 and TQ1_0 weights (layouts and
 * order in weight_panels.h),
 * written once and included by weight_panels_avx2.c (VPMADDUBSW, AVX2) and
 * weight_panels_avxvnni.c (VPDPBUSD, AVX-VNNI), each built with its own
 * instruction-set flags. Not for the float dtypes (weight_panels_avx2.c).
 *
 * A panel's 16 outputs are two "column groups" of 8 (one ymm of int32 or
 * float lanes each; the second half of a panel's 64-byte step is the
 * second group). A piece is NR activation rows x NV column groups; every
 * step of 4 k multiplies one vector of unsigned weight bytes (8 columns x
 * 4 k) by 4 broadcast signed activation bytes per row.
 *
 * The exact integer sums, two ways (the including file defines
 * PANEL_VNNI256 as its VPDPBUSD intrinsic, or nothing):
 *   VNNI: VPDPBUSD adds the 4 products of each lane into int32 directly.
 *   AVX2: VPMADDUBSW gives int16 sums of 2 products, added up in int16
 *         lanes over as many steps as cannot overflow, then VPMADDWD folds
 *         lane pairs into int32 (times a scale where the format has one).
 *         Unsigned weights of at most 15 times activations of at most 127
 *         in magnitude: a pair is at most 3810, 8 steps at most 30480 <
 *         32767. So Q4_0 and Q4_K nibbles sum a whole 32-block in int16;
 *         Q6_K's 6-bit values (at most 63: 16002 a pair) fold every 2
 *         steps; Q5_K's values (at most 31: 7874 a pair) fold every 4
 *         steps; Q3_K's values + 4 (at most 7: 1778 a pair) sum a whole
 *         group of 16 (4 steps, 7112) in int16, Q2_K's (at most 3)
 *         likewise; Q8_0 takes the sign trick (|w| times x with w's sign, a
 *         pair at most 32512) and folds every step (ib_q8_piece).
 *         MXFP4's codes become their doubled values + 12 (0..24) by a byte
 *         shuffle (VPSHUFB): a pair is at most 6096, so its int16 sums
 *         fold into int32 every 4 steps. IQ4_NL's values (|w| <= 127)
 *         take Q8_0's sign trick, from a shuffle of the signed values,
 *         and fold every step (with VNNI: the values + 128 by the
 *         shuffle, 1..241 as unsigned bytes). IQ4_XS: IQ4_NL's values and
 *         sign trick, each step's pair sums times the sub-block's signed
 *         scale by VPMADDWD straight into int32 (with VNNI: the values +
 *         128, a sum per sub-block from -128 x its activation sum).
 *         TQ2_0 / TQ1_0's codes (at most 3: 762 a pair) sum half a
 *         super-block (32 steps, 24384) in int16, then VPMADDWD by ones.
 *   With VNNI, one-row (decode) Q8_0 pieces take that sign trick too:
 *   Qwen3-0.6B Q8_0 tg64 on a Zen 5 VM, 5 alternating pairs, 1.07x
 *   (1.00-1.10x) over VPDPBUSD's one-row piece, whose decode was 0.86-1.01x
 *   the VPMADDUBSW build's (two chains of VPDPBUSD per sum: no better).
 *   Pieces of several rows keep VPDPBUSD (prefill 1.85-1.89x).
 * Integer sums are exact in any order, so both give the portable tile's
 * integers, and the float part (one conversion, one or two fused
 * multiply-adds per block, as weight_panels.h says) gives its bits.
 *
 * The including file defines PANEL_PREFIX(name), the prefix of the
 * tile functions this body defines (static; it exports them).
 */
#ifndef PDL_KERNELS_WEIGHT_PANELS_INT256_BODY_H
#define PDL_KERNELS_WEIGHT_PANELS_INT256_BODY_H

#include <immintrin.h>
#include <string.h>

#include "kernels/iq4nl.h"
#include "kernels/mxfp4.h"
#include "kernels/weight_panels.h"

/* Column groups of 8 per piece at most, and rows. */
#define IB_MAX_V 6
#define IB_MAX_R 4

#ifndef IB_PF
#define IB_PF 1
#endif

/* Loops over registers unrolled before GCC decides where an array of
 * vectors lives (else it keeps sums in memory, stored at every step). */
#define IB_UNROLL _Pragma("GCC unroll 16")

static inline int32_t ib_load4(const void *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

static inline __m256i ib_bcast4(const void *p) { return _mm256_set1_epi32(ib_load4(p)); }

/* One column group of a tile: its panel, which half of the panel's 16
 * columns (its bytes are at + 32 half in every 64-byte step, its halves
 * and scale bytes at + 16 half / + 8 half), where its outputs go and how
 * many of its 8 columns are real (1..8). */
typedef struct ib_group {
    const uint8_t *panel; /* the panel's start */
    int half;             /* 0: columns 0-7, 1: 8-15 */
    float *y;
    const float *bias;
    int cols;
} ib_group;

/* y[0..cols) = acc (+ bias) (+ what y held when accumulating): the
 * portable tile's sequence, lane by lane. */
static inline __attribute__((always_inline)) void ib_store(float *y, __m256 acc, const float *bias, bool accumulate,
                                                           int cols) {
    if (cols == 8) {
        if (bias) acc = _mm256_add_ps(acc, _mm256_loadu_ps(bias));
        if (accumulate) acc = _mm256_add_ps(_mm256_loadu_ps(y), acc);
        _mm256_storeu_ps(y, acc);
        return;
    }
    float t[8];
    _mm256_storeu_ps(t, acc);
    for (int c = 0; c < cols; c++) {
        float v = t[c];
        if (bias) v += bias[c];
        y[c] = accumulate ? y[c] + v : v;
    }
}

/* 8 halves at p -> 8 floats. */
static inline __m256 ib_halves(const uint8_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)p)); }

/* Lane c: the unsigned (u8) or signed (i8) byte p[c] in both of its 16-bit
 * halves (a VPMADDWD scale). */
static inline __m256i ib_scale16_u8(const uint8_t *p) {
    __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)p));
    return _mm256_or_si256(v, _mm256_slli_epi32(v, 16));
}

/* Lane c: a[c] in its low 16 bits, b[c] in its high (signed bytes, or
 * unsigned when u). */
static inline __m256i ib_pair16(const uint8_t *a, const uint8_t *b, bool u) {
    __m128i la = _mm_loadl_epi64((const __m128i *)(const void *)a), lb = _mm_loadl_epi64((const __m128i *)(const void *)b);
    __m256i va = u ? _mm256_cvtepu8_epi32(la) : _mm256_cvtepi8_epi32(la);
    __m256i vb = u ? _mm256_cvtepu8_epi32(lb) : _mm256_cvtepi8_epi32(lb);
    return _mm256_blend_epi16(va, _mm256_slli_epi32(vb, 16), 0xAA);
}

#if defined(PANEL_VNNI256)
#define IB_DOT(acc, w, x) PANEL_VNNI256(acc, w, x)
#else
#define IB_DOT(acc, w, x) _mm256_add_epi16(acc, _mm256_maddubs_epi16(w, x))
#endif

/* ---- Q8_0 and Q4_0 ---------------------------------------------------------- */

/* 8 BF16 scales (an MXFP4 panel's, exact 2^(e - 128)) -> 8 floats. */
static inline __m256 ib_mxfp4_scales(const uint8_t *p) {
    __m128i h = _mm_loadu_si128((const __m128i *)(const void *)p);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* The doubled E2M1 value + 12 of each code in both 128-bit lanes (the
 * VPSHUFB table). */
static inline __m256i ib_mxfp4_table(void) {
    int8_t t[16];
    for (int i = 0; i < 16; i++) t[i] = (int8_t)(mxfp4_code2[i] + PDL_MXFP4_OFFSET);
    return _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)t));
}

/* IQ4_NL's VPSHUFB table in both 128-bit lanes: the signed values for the
 * sign trick (AVX2), the values + 128 for VPDPBUSD (VNNI). */
static inline __m256i ib_iq4nl_table(void) {
    int8_t t[16];
#if defined(PANEL_VNNI256)
    for (int i = 0; i < 16; i++) t[i] = (int8_t)(uint8_t)(iq4nl_values[i] + PDL_IQ4NL_OFFSET);
#else
    for (int i = 0; i < 16; i++) t[i] = iq4nl_values[i];
#endif
    return _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)t));
}

/* The end of block b of a Q8_0 / Q4_0 / MXFP4 / IQ4_NL piece: acc += (float)isum x
 * dw x dx (the block's weight scales, qpanel_scales_at for qbytes of quants
 * per block, times the row's activation scale). */
static inline __attribute__((always_inline)) void ib_q_block_end(const int mx, __m256 acc[IB_MAX_R][IB_MAX_V],
                                                                 __m256i isum[IB_MAX_R][IB_MAX_V], const float *xd,
                                                                 int64_t nbx, const int nr, const ib_group *grp,
                                                                 const int nv, size_t scales_at, int64_t b) {
    __m256 dw[IB_MAX_V];
    IB_UNROLL for (int v = 0; v < nv; v++)
        dw[v] = mx ? ib_mxfp4_scales(grp[v].panel + scales_at + 16 * grp[v].half)
                   : ib_halves(grp[v].panel + scales_at + 16 * grp[v].half);
    IB_UNROLL for (int r = 0; r < nr; r++) {
        __m256 dx = _mm256_set1_ps(xd[r * nbx + b]);
        IB_UNROLL for (int v = 0; v < nv; v++)
            acc[r][v] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[r][v]), _mm256_mul_ps(dw[v], dx), acc[r][v]);
    }
}

/* A piece's sums into its rows of y. */
static inline __attribute__((always_inline)) void ib_q_store(__m256 acc[IB_MAX_R][IB_MAX_V], const int nr,
                                                             const ib_group *grp, const int nv, int64_t ldy,
                                                             bool accumulate) {
    IB_UNROLL for (int r = 0; r < nr; r++)
        IB_UNROLL for (int v = 0; v < nv; v++)
            ib_store(grp[v].y + r * ldy, acc[r][v], grp[v].bias, accumulate, grp[v].cols);
}

/* NR rows x NV groups of one block format (q4: 1 Q4_0, 2 MXFP4, 3 IQ4_NL,
 * 0 Q8_0; Q8_0 without VNNI, and one row of it with VNNI, is ib_q8_piece's)
 * in one pass over the bytes as stored: step q's sums start at -offset x
 * sum(x) (the stored bytes are value + offset) and add the products (AVX2:
 * int16 pairs, folded into int32 once per block; IQ4_NL without VNNI: the
 * sign trick, offset 0, folded at every step). */
static inline __attribute__((always_inline)) void ib_q_piece(const int q4, const int8_t *xq, const float *xd,
                                                             const int32_t *xs, int64_t ldx, int64_t nbx, const int nr,
                                                             const ib_group *grp, const int nv, int64_t nb,
                                                             int64_t ldy, bool accumulate) {
    const size_t qbytes = q4 ? 256 : 512;
    const __m256i low = _mm256_set1_epi8(0x0F), code2 = q4 == 3 ? ib_iq4nl_table() : ib_mxfp4_table();
#if !defined(PANEL_VNNI256)
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i s32[IB_MAX_R][IB_MAX_V]; /* MXFP4: the first 4 steps' sums, in int32 */
#endif
    __m256 acc[IB_MAX_R][IB_MAX_V];
    IB_UNROLL for (int r = 0; r < nr; r++)
        IB_UNROLL for (int v = 0; v < nv; v++) acc[r][v] = _mm256_setzero_ps();
    size_t at = 0; /* qpanel_quants_at(qbytes, b) */
    for (int64_t b = 0; b < nb; at = qpanel_next_quants(qbytes, at, b), b++) {
        const uint8_t *blk[IB_MAX_V];
        IB_UNROLL for (int v = 0; v < nv; v++) blk[v] = grp[v].panel + at + 32 * grp[v].half;
        __m256i s[IB_MAX_R][IB_MAX_V];
        IB_UNROLL for (int r = 0; r < nr; r++)
            IB_UNROLL for (int v = 0; v < nv; v++) s[r][v] = _mm256_setzero_si256();
        /* Q4_0: step q's bytes give elements 4q.. (low nibbles) and
         * 16 + 4q.. (high), one load for both */
        for (int q = 0; q < (q4 ? 4 : 8); q++) {
            __m256i w[IB_MAX_V], w2[IB_MAX_V];
            IB_UNROLL for (int v = 0; v < nv; v++) {
                __m256i raw = _mm256_load_si256((const __m256i *)(const void *)(blk[v] + q * 64));
                if (IB_PF && nr == 1 && grp[v].half == 0) qpanel_prefetch_step(blk[v], qbytes, b, q, q4 ? 4 : 8);
                if (q4) {
                    w[v] = _mm256_and_si256(raw, low);
                    w2[v] = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low);
                    if (q4 >= 2) w[v] = _mm256_shuffle_epi8(code2, w[v]), w2[v] = _mm256_shuffle_epi8(code2, w2[v]);
                } else {
                    w[v] = raw;
                }
            }
#if !defined(PANEL_VNNI256)
            if (q4 == 3) { /* the sign trick: |w| x (x with w's sign), pairs at most 32258, into int32 at once */
                __m256i aw[IB_MAX_V], aw2[IB_MAX_V];
                IB_UNROLL for (int v = 0; v < nv; v++) aw[v] = _mm256_abs_epi8(w[v]), aw2[v] = _mm256_abs_epi8(w2[v]);
                IB_UNROLL for (int r = 0; r < nr; r++) {
                    __m256i xb = ib_bcast4(xq + r * ldx + b * 32 + 4 * q);
                    __m256i xb2 = ib_bcast4(xq + r * ldx + b * 32 + 16 + 4 * q);
                    IB_UNROLL for (int v = 0; v < nv; v++) {
                        __m256i p = _mm256_add_epi32(
                            _mm256_madd_epi16(_mm256_maddubs_epi16(aw[v], _mm256_sign_epi8(xb, w[v])), ones),
                            _mm256_madd_epi16(_mm256_maddubs_epi16(aw2[v], _mm256_sign_epi8(xb2, w2[v])), ones));
                        s[r][v] = _mm256_add_epi32(s[r][v], p);
                    }
                }
                continue;
            }
#endif
            IB_UNROLL for (int r = 0; r < nr; r++) {
                __m256i xb = ib_bcast4(xq + r * ldx + b * 32 + 4 * q);
                IB_UNROLL for (int v = 0; v < nv; v++) s[r][v] = IB_DOT(s[r][v], w[v], xb);
                if (q4) {
                    __m256i xb2 = ib_bcast4(xq + r * ldx + b * 32 + 16 + 4 * q);
                    IB_UNROLL for (int v = 0; v < nv; v++) s[r][v] = IB_DOT(s[r][v], w2[v], xb2);
                }
            }
#if !defined(PANEL_VNNI256)
            if (q4 == 2 && q == 1) /* 4 steps of pairs up to 6096: fold before int16 overflows */
                IB_UNROLL for (int r = 0; r < nr; r++)
                    IB_UNROLL for (int v = 0; v < nv; v++) {
                        s32[r][v] = _mm256_madd_epi16(s[r][v], ones);
                        s[r][v] = _mm256_setzero_si256();
                    }
#endif
        }
        __m256i isum[IB_MAX_R][IB_MAX_V];
        IB_UNROLL for (int r = 0; r < nr; r++) {
            __m256i start = _mm256_set1_epi32(
                -(q4 == 3 ? PDL_IQ4NL_OFFSET : q4 == 2 ? PDL_MXFP4_OFFSET : q4 ? 8 : 128) * xs[r * nbx + b]);
            IB_UNROLL for (int v = 0; v < nv; v++) {
#if defined(PANEL_VNNI256)
                isum[r][v] = _mm256_add_epi32(start, s[r][v]);
#else
                if (q4 == 3) { isum[r][v] = s[r][v]; continue; } /* int32 already, no offset */
                isum[r][v] = _mm256_add_epi32(start, _mm256_madd_epi16(s[r][v], ones));
                if (q4 == 2) isum[r][v] = _mm256_add_epi32(isum[r][v], s32[r][v]);
#endif
            }
        }
        ib_q_block_end(q4 == 2, acc, isum, xd, nbx, nr, grp, nv, qpanel_scales_near(qbytes, at, b), b);
    }
    ib_q_store(acc, nr, grp, nv, ldy, accumulate);
}

/* Q8_0 without VNNI, and one-row Q8_0 with it (see the top): the sign
 * trick. A stored byte is value + 128, so XOR 0x80 gives the signed value
 * w; VPMADDUBSW multiplies |w| (unsigned, at most 128) by x with w's sign
 * moved onto it (VPSIGNB; |x| <= 127, the quantizer's bound), so a pair is
 * at most 32512 and each step's int16 pair sums go to int32 at once
 * (VPMADDWD by ones): 4 operations per row and step, half the int16 work
 * of splitting the bytes into nibbles, and NR x NV int32 sums instead of
 * three sets of registers (which spilled). */
static inline __attribute__((always_inline)) void ib_q8_piece(const int8_t *xq, const float *xd, int64_t ldx,
                                                              int64_t nbx, const int nr, const ib_group *grp,
                                                              const int nv, int64_t nb, int64_t ldy,
                                                              bool accumulate) {
    const __m256i flip = _mm256_set1_epi8((char)0x80), ones = _mm256_set1_epi16(1);
    __m256 acc[IB_MAX_R][IB_MAX_V];
    IB_UNROLL for (int r = 0; r < nr; r++)
        IB_UNROLL for (int v = 0; v < nv; v++) acc[r][v] = _mm256_setzero_ps();
    size_t at = 0; /* qpanel_quants_at(512, b) */
    for (int64_t b = 0; b < nb; at = qpanel_next_quants(512, at, b), b++) {
        const uint8_t *blk[IB_MAX_V];
        IB_UNROLL for (int v = 0; v < nv; v++) blk[v] = grp[v].panel + at + 32 * grp[v].half;
        __m256i isum[IB_MAX_R][IB_MAX_V];
        IB_UNROLL for (int r = 0; r < nr; r++)
            IB_UNROLL for (int v = 0; v < nv; v++) isum[r][v] = _mm256_setzero_si256();
        IB_UNROLL for (int q = 0; q < 8; q++) {
            __m256i w[IB_MAX_V], aw[IB_MAX_V];
            IB_UNROLL for (int v = 0; v < nv; v++) {
                w[v] = _mm256_xor_si256(_mm256_load_si256((const __m256i *)(const void *)(blk[v] + q * 64)), flip);
                if (IB_PF && nr == 1 && grp[v].half == 0) qpanel_prefetch_step(blk[v], 512, b, q, 8);
                aw[v] = _mm256_abs_epi8(w[v]);
            }
            IB_UNROLL for (int r = 0; r < nr; r++) {
                __m256i xb = ib_bcast4(xq + r * ldx + b * 32 + 4 * q);
                IB_UNROLL for (int v = 0; v < nv; v++) {
                    __m256i p = _mm256_maddubs_epi16(aw[v], _mm256_sign_epi8(xb, w[v]));
                    isum[r][v] = _mm256_add_epi32(isum[r][v], _mm256_madd_epi16(p, ones));
                }
            }
        }
        ib_q_block_end(0, acc, isum, xd, nbx, nr, grp, nv, qpanel_scales_near(512, at, b), b);
    }
    ib_q_store(acc, nr, grp, nv, ldy, accumulate);
}

/* The column groups of a driver tile (panels x 16 outputs, last_cols of
 * the last panel real), rows r0.. of y; groups with no real column are
 * left out. */
static inline int ib_groups(const uint8_t *panel, size_t pb, int panels, int last_cols, float *y, const float *bias,
                            ib_group *g) {
    int n = 0;
    for (int p = 0; p < panels; p++)
        for (int h = 0; h < 2; h++) {
            int cols = p == panels - 1 ? last_cols - 8 * h : 8;
            if (cols > 8) cols = 8;
            if (cols <= 0) continue;
            g[n++] = (ib_group){.panel = panel + (size_t)p * pb, .half = h, .y = y + p * 16 + 8 * h,
                                .bias = bias ? bias + p * 16 + 8 * h : NULL, .cols = cols};
        }
    return n;
}

/* Column groups per piece: IB_V with several rows, IB_V1 with one
 * (decode): one panel, so a piece reads its bytes as one stream in
 * memory order (qpanel_quants_at). Three panels side by side were
 * slower: Qwen3-0.6B decode on a Zen 4 VM with these kernels, 3
 * interleaved pairs each, Q4_0 1.26-1.28x and Q8_0 1.29-1.56x with one
 * panel and the blocks' scales beside them. */
#define IB_V 2
#define IB_V1 2

/* Which Q8_0 pieces of NR rows take the sign trick (ib_q8_piece): all
 * without VNNI, the one-row ones with it (see the top). */
#if defined(PANEL_VNNI256)
#define IB_Q8_SIGN_TRICK(NR) ((NR) == 1)
#else
#define IB_Q8_SIGN_TRICK(NR) 1
#endif

/* Pieces of nr (1..IB_MAX_R) rows: groups IB_V (IB_V1) at a time, each
 * piece's sizes constants in its copy of the body. */
static inline __attribute__((always_inline)) void ib_q_rows(const int q4, const int8_t *xq, const float *xd,
                                                            const int32_t *xs, int64_t ldx, int64_t nbx, int nr,
                                                            const ib_group *g, int n, int64_t nb, int64_t ldy,
                                                            bool accumulate) {
    int step = nr == 1 ? IB_V1 : IB_V;
    for (int i = 0; i < n; i += step) {
        int nv = n - i < step ? n - i : step;
        const ib_group *gi = g + i;
#define IB_Q(NR, NV)                                                                                                   \
    (q4 || !IB_Q8_SIGN_TRICK(NR) ? ib_q_piece(q4, xq, xd, xs, ldx, nbx, NR, gi, NV, nb, ldy, accumulate)             \
                                 : ib_q8_piece(xq, xd, ldx, nbx, NR, gi, NV, nb, ldy, accumulate))
        switch (nr * 8 + nv) {
        case 8 + 1: IB_Q(1, 1); break;
        case 8 + 2: IB_Q(1, 2); break;
        case 8 + 3: IB_Q(1, 3); break;
        case 8 + 4: IB_Q(1, 4); break;
        case 8 + 5: IB_Q(1, 5); break;
        case 8 + 6: IB_Q(1, 6); break;
        case 16 + 1: IB_Q(2, 1); break;
        case 16 + 2: IB_Q(2, 2); break;
        case 24 + 1: IB_Q(3, 1); break;
        case 24 + 2: IB_Q(3, 2); break;
        case 32 + 1: IB_Q(4, 1); break;
        default: IB_Q(4, 2); break;
        }
#undef IB_Q
    }
}

/* A driver tile (rows <= PDL_QPANEL_TILE_ROWS, panels <= 3) in pieces. */
static inline __attribute__((always_inline)) void ib_q_tile(const int q4, const int8_t *xq, const float *xd,
                                                            const int32_t *xs, int64_t ldx, int64_t nbx, int rows,
                                                            const uint8_t *panel, size_t pb, int panels, int64_t nb,
                                                            int last_cols, float *y, int64_t ldy, const float *bias,
                                                            bool accumulate) {
    ib_group g[2 * PDL_PANEL_TILE_PANELS];
    int n = ib_groups(panel, pb, panels, last_cols, y, bias, g);
    for (int r0 = 0; r0 < rows; r0 += IB_MAX_R) {
        int nr = rows - r0 < IB_MAX_R ? rows - r0 : IB_MAX_R;
        ib_group gr[2 * PDL_PANEL_TILE_PANELS];
        for (int i = 0; i < n; i++) {
            gr[i] = g[i];
            gr[i].y += r0 * ldy;
        }
        ib_q_rows(q4, xq + r0 * ldx, xd + r0 * nbx, xs + r0 * nbx, ldx, nbx, nr, gr, n, nb, ldy, accumulate);
    }
}

static void PANEL_PREFIX(q8_0)(const int8_t *xq, const float *xd, const int32_t *xs, int64_t ldx, int64_t nbx,
                               int rows, const uint8_t *panel, size_t pb, int panels, int64_t nb, int last_cols,
                               float *y, int64_t ldy, const float *bias, bool accumulate) {
    ib_q_tile(0, xq, xd, xs, ldx, nbx, rows, panel, pb, panels, nb, last_cols, y, ldy, bias, accumulate);
}

static void PANEL_PREFIX(q4_0)(const int8_t *xq, const float *xd, const int32_t *xs, int64_t ldx, int64_t nbx,
                               int rows, const uint8_t *panel, size_t pb, int panels, int64_t nb, int last_cols,
                               float *y, int64_t ldy, const float *bias, bool accumulate) {
    ib_q_tile(1, xq, xd, xs, ldx, nbx, rows, panel, pb, panels, nb, last_cols, y, ldy, bias, accumulate);
}

static void PANEL_PREFIX(mxfp4)(const int8_t *xq, const float *xd, const int32_t *xs, int64_t ldx, int64_t nbx,
                                int rows, const uint8_t *panel, size_t pb, int panels, int64_t nb, int last_cols,
                                float *y, int64_t ldy, const float *bias, bool accumulate) {
    ib_q_tile(2, xq, xd, xs, ldx, nbx, rows, panel, pb, panels, nb, last_cols, y, ldy, bias, accumulate);
}

static void PANEL_PREFIX(iq4_nl)(const int8_t *xq, const float *xd, const int32_t *xs, int64_t ldx, int64_t nbx,
                                 int rows, const uint8_t *panel, size_t pb, int panels, int64_t nb, int last_cols,
                                 float *y, int64_t ldy, const float *bias, bool accumulate) {
    ib_q_tile(3, xq, xd, xs, ldx, nbx, rows, panel, pb, panels, nb, last_cols, y, ldy, bias, accumulate);
}

/* ---- Q4_K and Q6_K ------------------------------------------------------------ */

/* A sub-sum of 4-product steps times a scale per lane into int32: VNNI
 * sums are int32 already (times the scale's int32 lanes); AVX2 sums are
 * int16 lane pairs, which VPMADDWD multiplies by the scale in both halves
 * and adds (ib_scale16_*). */
#if defined(PANEL_VNNI256)
static inline __m256i ib_scaled(__m256i s, __m256i sc32) { return _mm256_mullo_epi32(s, sc32); }
static inline __m256i ib_scale_u8(const uint8_t *p) {
    return _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)p));
}
static inline __m256i ib_scale_i8(const uint8_t *p) {
    return _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)p));
}
#else
static inline __m256i ib_scaled(__m256i s, __m256i sc16) { return _mm256_madd_epi16(s, sc16); }
static inline __m256i ib_scale_u8(const uint8_t *p) { return ib_scale16_u8(p); }
static inline __m256i ib_scale_i8(const uint8_t *p) {
    __m256i v = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)p));
    return _mm256_blend_epi16(v, _mm256_slli_epi32(v, 16), 0xAA);
}
#endif

/* Q5_K's fifth bits: bit j of each byte of a qh word vector moved to bit
 * 4 (16-bit shifts: no bit crosses into the other byte's bit 4). */
static inline __attribute__((always_inline)) __m256i ib_q5_high(__m256i h, const int j) {
    __m256i s = j <= 4 ? _mm256_slli_epi16(h, 4 - j) : _mm256_srli_epi16(h, j - 4);
    return _mm256_and_si256(s, _mm256_set1_epi8(0x10));
}

/* Q5_K int16 sums (AVX2) fold into int32 after 4 of a sub-block's 8 steps
 * (8 steps of 7874 would pass 32767); VNNI sums are int32 already. */
#if defined(PANEL_VNNI256)
#define IB_Q5_FOLD 0
#else
#define IB_Q5_FOLD 1
#endif

/* Q4_K, NR (2..4) rows x NV groups: per sub-block j the nibbles times
 * the activations (8 steps), times the lanes' six-bit scale, into isum;
 * msum is the mins times the activation sums per 32 (pairs of sub-blocks
 * per VPMADDWD); then kquant.h's two fused multiply-adds. One row is
 * ib_q4k_row's. Q5_K (q5): the same on Q4_K's part of its panel block,
 * each nibble plus its high bit. */
static inline __attribute__((always_inline)) void ib_q4k_piece(const pdl_block_q8k *x, int64_t ldx, const int nr,
                                                               const ib_group *grp, const int nv, int64_t nb,
                                                               int64_t ldy, bool accumulate, const int q5) {
    const size_t pbb = q5 ? PDL_Q5K_PANEL_BLOCK : PDL_Q4K_PANEL_BLOCK;
    const __m256i low = _mm256_set1_epi8(0x0F);
    __m256 acc[IB_MAX_R][IB_MAX_V];
    IB_UNROLL for (int r = 0; r < nr; r++)
        IB_UNROLL for (int v = 0; v < nv; v++) acc[r][v] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk[IB_MAX_V];
        IB_UNROLL for (int v = 0; v < nv; v++) blk[v] = grp[v].panel + (size_t)b * pbb;
        __m256i isum[IB_MAX_R][IB_MAX_V];
        IB_UNROLL for (int r = 0; r < nr; r++)
            IB_UNROLL for (int v = 0; v < nv; v++) isum[r][v] = _mm256_setzero_si256();
        for (int j = 0; j < 8; j++) {
            __m256i s[IB_MAX_R][IB_MAX_V];
            IB_UNROLL for (int r = 0; r < nr; r++)
                IB_UNROLL for (int v = 0; v < nv; v++) s[r][v] = _mm256_setzero_si256();
            for (int kk = 0; kk < 8; kk++) {
                __m256i w[IB_MAX_V];
                IB_UNROLL for (int v = 0; v < nv; v++) {
                    const uint8_t *line = blk[v] + ((j / 2) * 8 + kk) * 64;
                    __m256i raw = _mm256_load_si256((const __m256i *)(const void *)(line + 32 * grp[v].half));
                    w[v] = _mm256_and_si256(j % 2 ? _mm256_srli_epi16(raw, 4) : raw, low);
                    if (q5) {
                        const uint8_t *hl = blk[v] + PDL_Q4K_PANEL_BLOCK + kk * 64 + 32 * grp[v].half;
                        w[v] = _mm256_or_si256(w[v], ib_q5_high(_mm256_load_si256((const __m256i *)(const void *)hl), j));
                    }
                }
                IB_UNROLL for (int r = 0; r < nr; r++) {
                    __m256i xb = ib_bcast4(x[r * ldx + b].qs + 32 * j + 4 * kk);
                    IB_UNROLL for (int v = 0; v < nv; v++) s[r][v] = IB_DOT(s[r][v], w[v], xb);
                }
                if (q5 && IB_Q5_FOLD && kk == 3) /* the first 4 steps' int16 sums, before they can overflow */
                    IB_UNROLL for (int v = 0; v < nv; v++) {
                        __m256i sc = ib_scale_u8(blk[v] + 2048 + j * 16 + 8 * grp[v].half);
                        IB_UNROLL for (int r = 0; r < nr; r++) {
                            isum[r][v] = _mm256_add_epi32(isum[r][v], ib_scaled(s[r][v], sc));
                            s[r][v] = _mm256_setzero_si256();
                        }
                    }
            }
            IB_UNROLL for (int v = 0; v < nv; v++) {
                __m256i sc = ib_scale_u8(blk[v] + 2048 + j * 16 + 8 * grp[v].half);
                IB_UNROLL for (int r = 0; r < nr; r++) isum[r][v] = _mm256_add_epi32(isum[r][v], ib_scaled(s[r][v], sc));
            }
        }
        IB_UNROLL for (int v = 0; v < nv; v++) {
            const uint8_t *mn = blk[v] + 2176 + 8 * grp[v].half;
            __m256i mp[4]; /* lane c: mins 2 jj and 2 jj + 1 of column c */
            IB_UNROLL for (int jj = 0; jj < 4; jj++) mp[jj] = ib_pair16(mn + 32 * jj, mn + 32 * jj + 16, true);
            __m256 dw = ib_halves(blk[v] + 2304 + 16 * grp[v].half), dm = ib_halves(blk[v] + 2336 + 16 * grp[v].half);
            IB_UNROLL for (int r = 0; r < nr; r++) {
                const pdl_block_q8k *xb = &x[r * ldx + b];
                __m256i msum = _mm256_setzero_si256();
                IB_UNROLL for (int jj = 0; jj < 4; jj++)
                    msum = _mm256_add_epi32(msum, _mm256_madd_epi16(mp[jj], ib_bcast4(xb->bsum32 + 2 * jj)));
                __m256 dx = _mm256_set1_ps(xb->d);
                acc[r][v] = _mm256_fmadd_ps(_mm256_mul_ps(dw, dx), _mm256_cvtepi32_ps(isum[r][v]), acc[r][v]);
                __m256 mdx = _mm256_xor_ps(_mm256_mul_ps(dm, dx), _mm256_set1_ps(-0.0f));
                acc[r][v] = _mm256_fmadd_ps(mdx, _mm256_cvtepi32_ps(msum), acc[r][v]);
            }
        }
    }
    IB_UNROLL for (int r = 0; r < nr; r++)
        IB_UNROLL for (int v = 0; v < nv; v++)
            ib_store(grp[v].y + r * ldy, acc[r][v], grp[v].bias, accumulate, grp[v].cols);
}

/* Q4_K, one row x NV groups (decode): each 64-byte line of a sub-block
 * pair read once, its low nibbles for sub-block 2 jj and its high ones for
 * 2 jj + 1 (two int16 sums), then both scales, so the loads and the loop
 * are half of ib_q4k_piece's; the same integers, the same float part.
 * One thread, a 512 x 1024 matrix in L2 (a test program outside the
 * tree, Zen 4 VM): 41.5 GB/s of panels against 34.8 for ib_q4k_piece's
 * one-row copy; 3072 x 1024 matrices out of cache on 2 threads, 8
 * alternating runs: median 1.18x. */
static inline __attribute__((always_inline)) void ib_q4k_row(const pdl_block_q8k *x, const ib_group *grp,
                                                             const int nv, int64_t nb, bool accumulate, const int q5) {
    const size_t pbb = q5 ? PDL_Q5K_PANEL_BLOCK : PDL_Q4K_PANEL_BLOCK, ahead = panel_ahead(pbb);
    const __m256i low = _mm256_set1_epi8(0x0F);
    __m256 acc[IB_MAX_V];
    IB_UNROLL for (int v = 0; v < nv; v++) acc[v] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk[IB_MAX_V];
        IB_UNROLL for (int v = 0; v < nv; v++) blk[v] = grp[v].panel + (size_t)b * pbb;
        const int8_t *xq = x[b].qs;
        __m256i isum[IB_MAX_V];
        IB_UNROLL for (int v = 0; v < nv; v++) isum[v] = _mm256_setzero_si256();
        for (int jj = 0; jj < 4; jj++) {
            __m256i s0[IB_MAX_V], s1[IB_MAX_V];
            IB_UNROLL for (int v = 0; v < nv; v++) s0[v] = s1[v] = _mm256_setzero_si256();
            IB_UNROLL for (int kk = 0; kk < 8; kk++) {
                __m256i xb0 = ib_bcast4(xq + 64 * jj + 4 * kk), xb1 = ib_bcast4(xq + 64 * jj + 32 + 4 * kk);
                IB_UNROLL for (int v = 0; v < nv; v++) {
                    const uint8_t *line = blk[v] + (jj * 8 + kk) * 64;
                    __m256i raw = _mm256_load_si256((const __m256i *)(const void *)(line + 32 * grp[v].half));
                    if (grp[v].half == 0) {
                        _mm_prefetch((const char *)(line + ahead), _MM_HINT_T0);
                        panel_prefetch_tail(blk[v] + ahead, 2048, PDL_Q4K_PANEL_BLOCK, jj * 8 + kk, 32);
                    }
                    __m256i w0 = _mm256_and_si256(raw, low), w1 = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low);
                    if (q5) {
                        const uint8_t *hl = blk[v] + PDL_Q4K_PANEL_BLOCK + kk * 64;
                        __m256i h = _mm256_load_si256((const __m256i *)(const void *)(hl + 32 * grp[v].half));
                        if (jj == 0 && grp[v].half == 0) _mm_prefetch((const char *)(hl + ahead), _MM_HINT_T0);
                        w0 = _mm256_or_si256(w0, ib_q5_high(h, 2 * jj));
                        w1 = _mm256_or_si256(w1, ib_q5_high(h, 2 * jj + 1));
                    }
                    s0[v] = IB_DOT(s0[v], w0, xb0);
                    s1[v] = IB_DOT(s1[v], w1, xb1);
                }
                if (q5 && IB_Q5_FOLD && kk == 3) /* the first 4 steps' int16 sums, before they can overflow */
                    IB_UNROLL for (int v = 0; v < nv; v++) {
                        const uint8_t *sc = blk[v] + 2048 + 2 * jj * 16 + 8 * grp[v].half;
                        isum[v] = _mm256_add_epi32(isum[v], ib_scaled(s0[v], ib_scale_u8(sc)));
                        isum[v] = _mm256_add_epi32(isum[v], ib_scaled(s1[v], ib_scale_u8(sc + 16)));
                        s0[v] = s1[v] = _mm256_setzero_si256();
                    }
            }
            IB_UNROLL for (int v = 0; v < nv; v++) {
                const uint8_t *sc = blk[v] + 2048 + 2 * jj * 16 + 8 * grp[v].half;
                isum[v] = _mm256_add_epi32(isum[v], ib_scaled(s0[v], ib_scale_u8(sc)));
                isum[v] = _mm256_add_epi32(isum[v], ib_scaled(s1[v], ib_scale_u8(sc + 16)));
            }
        }
        IB_UNROLL for (int v = 0; v < nv; v++) {
            const uint8_t *mn = blk[v] + 2176 + 8 * grp[v].half;
            __m256i msum = _mm256_setzero_si256();
            IB_UNROLL for (int jj = 0; jj < 4; jj++)
                msum = _mm256_add_epi32(msum, _mm256_madd_epi16(ib_pair16(mn + 32 * jj, mn + 32 * jj + 16, true),
                                                                ib_bcast4(x[b].bsum32 + 2 * jj)));
            __m256 dw = ib_halves(blk[v] + 2304 + 16 * grp[v].half), dm = ib_halves(blk[v] + 2336 + 16 * grp[v].half);
            __m256 dx = _mm256_set1_ps(x[b].d);
            acc[v] = _mm256_fmadd_ps(_mm256_mul_ps(dw, dx), _mm256_cvtepi32_ps(isum[v]), acc[v]);
            __m256 mdx = _mm256_xor_ps(_mm256_mul_ps(dm, dx), _mm256_set1_ps(-0.0f));
            acc[v] = _mm256_fmadd_ps(mdx, _mm256_cvtepi32_ps(msum), acc[v]);
        }
    }
    IB_UNROLL for (int v = 0; v < nv; v++) ib_store(grp[v].y, acc[v], grp[v].bias, accumulate, grp[v].cols);
}

/* Q6_K: the 6-bit values of 4 elements of 8 columns, for quarter Q (0..3)
 * of a 128-element half: low nibbles of ql vector A (quarters 0, 2 from
 * the first 32 ql bytes, 1, 3 from the next 32) and two bits of qh vector
 * H, in the file's positions (weight_panels.h). */
static inline __attribute__((always_inline)) __m256i ib_q6_values(const int quarter, __m256i a, __m256i h) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(0x30);
    __m256i lo = quarter < 2 ? _mm256_and_si256(a, m4) : _mm256_and_si256(_mm256_srli_epi16(a, 4), m4);
    __m256i hi;
    switch (quarter) {
    case 0: hi = _mm256_and_si256(_mm256_slli_epi16(h, 4), m2); break;
    case 1: hi = _mm256_and_si256(_mm256_slli_epi16(h, 2), m2); break;
    case 2: hi = _mm256_and_si256(h, m2); break;
    default: hi = _mm256_and_si256(_mm256_srli_epi16(h, 2), m2); break;
    }
    return _mm256_or_si256(lo, hi);
}

/* Q6_K, NR (2..4) rows x NV groups: per group of 16 elements the values
 * (q + 32, unsigned) times the activations, times the group's scale, into
 * isum (on AVX2 folded every 2 steps: 6-bit values would overflow int16
 * in 3); then 32 x the scaled activation sums per 16 are taken off (pairs
 * of groups per VPMADDWD) and one fused multiply-add, as kquant.h. One
 * row is ib_q6k_row's. */
static inline __attribute__((always_inline)) void ib_q6k_piece(const pdl_block_q8k *x, int64_t ldx, const int nr,
                                                               const ib_group *grp, const int nv, int64_t nb,
                                                               int64_t ldy, bool accumulate) {
    __m256 acc[IB_MAX_R][IB_MAX_V];
    IB_UNROLL for (int r = 0; r < nr; r++)
        IB_UNROLL for (int v = 0; v < nv; v++) acc[r][v] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk[IB_MAX_V];
        IB_UNROLL for (int v = 0; v < nv; v++) blk[v] = grp[v].panel + (size_t)b * PDL_Q6K_PANEL_BLOCK;
        __m256i isum[IB_MAX_R][IB_MAX_V];
        IB_UNROLL for (int r = 0; r < nr; r++)
            IB_UNROLL for (int v = 0; v < nv; v++) isum[r][v] = _mm256_setzero_si256();
        for (int half = 0; half < 2; half++)
            IB_UNROLL for (int quarter = 0; quarter < 4; quarter++) /* a constant in each copy */
                for (int gs = 0; gs < 2; gs++) {
                    int group = 8 * half + 2 * quarter + gs;
                    __m256i sc[IB_MAX_V];
                    IB_UNROLL for (int v = 0; v < nv; v++) sc[v] = ib_scale_i8(blk[v] + 3072 + group * 16 + 8 * grp[v].half);
#if defined(PANEL_VNNI256)
                    const int fold = 4; /* steps per int32 sum */
#else
                    const int fold = 2;
#endif
                    IB_UNROLL for (int l0 = 4 * gs; l0 < 4 * gs + 4; l0 += fold) {
                        __m256i s[IB_MAX_R][IB_MAX_V];
                        IB_UNROLL for (int r = 0; r < nr; r++)
                            IB_UNROLL for (int v = 0; v < nv; v++) s[r][v] = _mm256_setzero_si256();
                        IB_UNROLL for (int l4 = l0; l4 < l0 + fold; l4++) {
                            __m256i w[IB_MAX_V];
                            IB_UNROLL for (int v = 0; v < nv; v++) {
                                const uint8_t *wd = blk[v] + (size_t)((8 * half + l4) * 3) * 64 + 32 * grp[v].half;
                                __m256i a = _mm256_load_si256((const __m256i *)(const void *)(wd + (quarter % 2) * 64));
                                __m256i h = _mm256_load_si256((const __m256i *)(const void *)(wd + 128));
                                w[v] = ib_q6_values(quarter, a, h);
                            }
                            IB_UNROLL for (int r = 0; r < nr; r++) {
                                __m256i xb = ib_bcast4(x[r * ldx + b].qs + 128 * half + 32 * quarter + 4 * l4);
                                IB_UNROLL for (int v = 0; v < nv; v++) s[r][v] = IB_DOT(s[r][v], w[v], xb);
                            }
                        }
                        IB_UNROLL for (int r = 0; r < nr; r++)
                            IB_UNROLL for (int v = 0; v < nv; v++)
                                isum[r][v] = _mm256_add_epi32(isum[r][v], ib_scaled(s[r][v], sc[v]));
                    }
                }
        IB_UNROLL for (int v = 0; v < nv; v++) {
            const uint8_t *scb = blk[v] + 3072 + 8 * grp[v].half;
            __m256i sp[8]; /* lane c: scales 2 gg and 2 gg + 1 of column c */
            IB_UNROLL for (int gg = 0; gg < 8; gg++) sp[gg] = ib_pair16(scb + 32 * gg, scb + 32 * gg + 16, false);
            __m256 dw = ib_halves(blk[v] + 3328 + 16 * grp[v].half);
            IB_UNROLL for (int r = 0; r < nr; r++) {
                const pdl_block_q8k *xb = &x[r * ldx + b];
                __m256i off = _mm256_setzero_si256();
                IB_UNROLL for (int gg = 0; gg < 8; gg++)
                    off = _mm256_add_epi32(off, _mm256_madd_epi16(sp[gg], ib_bcast4(xb->bsum16 + 2 * gg)));
                __m256i is = _mm256_sub_epi32(isum[r][v], _mm256_slli_epi32(off, 5));
                acc[r][v] = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_set1_ps(xb->d)), _mm256_cvtepi32_ps(is), acc[r][v]);
            }
        }
    }
    IB_UNROLL for (int r = 0; r < nr; r++)
        IB_UNROLL for (int v = 0; v < nv; v++)
            ib_store(grp[v].y + r * ldy, acc[r][v], grp[v].bias, accumulate, grp[v].cols);
}

/* Q6_K, one row x NV groups (decode): each step's three lines (ql, ql,
 * qh) read once for all four quarters of the half (ib_q6k_piece reads
 * them once per quarter), four int16 sums folded every 2 steps as there;
 * the same integers, the same float part. Same test as ib_q4k_row: 31.6
 * GB/s in L2 against 28.2 for ib_q6k_piece's one-row copy. */
static inline __attribute__((always_inline)) void ib_q6k_row(const pdl_block_q8k *x, const ib_group *grp,
                                                             const int nv, int64_t nb, bool accumulate) {
#if defined(PANEL_VNNI256)
    const int fold = 4; /* steps per int32 sum */
#else
    const int fold = 2;
#endif
    __m256 acc[IB_MAX_V];
    IB_UNROLL for (int v = 0; v < nv; v++) acc[v] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk[IB_MAX_V];
        const size_t ahead = panel_ahead(PDL_Q6K_PANEL_BLOCK);
        IB_UNROLL for (int v = 0; v < nv; v++) blk[v] = grp[v].panel + (size_t)b * PDL_Q6K_PANEL_BLOCK;
        const int8_t *xq = x[b].qs;
        __m256i isum[IB_MAX_V];
        IB_UNROLL for (int v = 0; v < nv; v++) isum[v] = _mm256_setzero_si256();
        for (int half = 0; half < 2; half++)
            for (int l0 = 0; l0 < 8; l0 += fold) {
                __m256i s[4][IB_MAX_V];
                IB_UNROLL for (int q = 0; q < 4; q++)
                    IB_UNROLL for (int v = 0; v < nv; v++) s[q][v] = _mm256_setzero_si256();
                IB_UNROLL for (int l4 = l0; l4 < l0 + fold; l4++)
                    IB_UNROLL for (int v = 0; v < nv; v++) {
                        const uint8_t *wd = blk[v] + (size_t)((8 * half + l4) * 3) * 64 + 32 * grp[v].half;
                        __m256i a0 = _mm256_load_si256((const __m256i *)(const void *)wd);
                        __m256i a1 = _mm256_load_si256((const __m256i *)(const void *)(wd + 64));
                        __m256i h = _mm256_load_si256((const __m256i *)(const void *)(wd + 128));
                        if (grp[v].half == 0) {
                            _mm_prefetch((const char *)(wd + ahead), _MM_HINT_T0);
                            _mm_prefetch((const char *)(wd + 64 + ahead), _MM_HINT_T0);
                            _mm_prefetch((const char *)(wd + 128 + ahead), _MM_HINT_T0);
                            panel_prefetch_tail(blk[v] + ahead, 3072, PDL_Q6K_PANEL_BLOCK, 8 * half + l4, 16);
                        }
                        IB_UNROLL for (int q = 0; q < 4; q++) {
                            __m256i xb = ib_bcast4(xq + 128 * half + 32 * q + 4 * l4);
                            s[q][v] = IB_DOT(s[q][v], ib_q6_values(q, q % 2 ? a1 : a0, h), xb);
                        }
                    }
                const int gs = l0 / 4;
                IB_UNROLL for (int q = 0; q < 4; q++)
                    IB_UNROLL for (int v = 0; v < nv; v++) {
                        int group = 8 * half + 2 * q + gs;
                        isum[v] = _mm256_add_epi32(isum[v], ib_scaled(s[q][v], ib_scale_i8(blk[v] + 3072 + group * 16 + 8 * grp[v].half)));
                    }
            }
        IB_UNROLL for (int v = 0; v < nv; v++) {
            const uint8_t *scb = blk[v] + 3072 + 8 * grp[v].half;
            __m256i off = _mm256_setzero_si256();
            IB_UNROLL for (int gg = 0; gg < 8; gg++)
                off = _mm256_add_epi32(off, _mm256_madd_epi16(ib_pair16(scb + 32 * gg, scb + 32 * gg + 16, false),
                                                              ib_bcast4(x[b].bsum16 + 2 * gg)));
            __m256i is = _mm256_sub_epi32(isum[v], _mm256_slli_epi32(off, 5));
            __m256 dw = ib_halves(blk[v] + 3328 + 16 * grp[v].half);
            acc[v] = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_set1_ps(x[b].d)), _mm256_cvtepi32_ps(is), acc[v]);
        }
    }
    IB_UNROLL for (int v = 0; v < nv; v++) ib_store(grp[v].y, acc[v], grp[v].bias, accumulate, grp[v].cols);
}

/* Groups per piece of several rows for the k-quants (their per-block sums
 * take registers too), and of one row for Q6_K and Q4_K: 6 groups' values,
 * scales and sums need more than 16 registers, and the spilled piece ran
 * at half the memory rate (Q6_K decode of a 151936 x 1024 matrix on 2
 * threads: 14-17 GB/s with 6 groups, 18-31 GB/s with 2; Q4_K_M
 * Qwen3-0.6B decode with AVX2 kernels, 4 interleaved pairs: 2 groups 8-15%
 * faster than 6, 1 group slower than 2). */
#define IB_V_K 1
#define IB_V1_Q6 2
#define IB_V1_Q4K 2
_Static_assert(IB_V_K == 1 && IB_V1_Q6 <= 2 && IB_V1_Q4K <= 2, "ib_k_tile instantiates its pieces for these");

/* q6: 0 Q4_K, 1 Q6_K, 2 Q5_K */
static inline __attribute__((always_inline)) void ib_k_tile(const int q6, const pdl_block_q8k *x, int64_t ldx,
                                                            int rows, const uint8_t *panel, size_t pb, int panels,
                                                            int64_t nb, int last_cols, float *y, int64_t ldy,
                                                            const float *bias, bool accumulate) {
    ib_group g[2 * PDL_PANEL_TILE_PANELS];
    int n = ib_groups(panel, pb, panels, last_cols, y, bias, g);
    for (int r0 = 0; r0 < rows; r0 += IB_MAX_R) {
        int nr = rows - r0 < IB_MAX_R ? rows - r0 : IB_MAX_R;
        ib_group gr[2 * PDL_PANEL_TILE_PANELS];
        for (int i = 0; i < n; i++) {
            gr[i] = g[i];
            gr[i].y += r0 * ldy;
        }
        const pdl_block_q8k *xr = x + r0 * ldx;
        int step = nr == 1 ? (q6 == 1 ? IB_V1_Q6 : IB_V1_Q4K) : IB_V_K;
        for (int i = 0; i < n; i += step) {
            int nv = n - i < step ? n - i : step;
            const ib_group *gi = gr + i;
#define IB_K_ROW(NV) (q6 == 1 ? ib_q6k_row(xr, gi, NV, nb, accumulate) : ib_q4k_row(xr, gi, NV, nb, accumulate, q6 == 2))
#define IB_K(NR)                                                                                                     \
    (q6 == 1 ? ib_q6k_piece(xr, ldx, NR, gi, 1, nb, ldy, accumulate)                                                 \
             : ib_q4k_piece(xr, ldx, NR, gi, 1, nb, ldy, accumulate, q6 == 2))
            switch (nr) {
            case 1: nv == 2 ? IB_K_ROW(2) : IB_K_ROW(1); break;
            case 2: IB_K(2); break;
            case 3: IB_K(3); break;
            default: IB_K(4); break;
            }
#undef IB_K_ROW
#undef IB_K
        }
    }
}

static void PANEL_PREFIX(q4_k)(const pdl_block_q8k *x, int64_t ldx, int rows, const uint8_t *panel, size_t pb,
                               int panels, int64_t nb, int last_cols, float *y, int64_t ldy, const float *bias,
                               bool accumulate) {
    ib_k_tile(0, x, ldx, rows, panel, pb, panels, nb, last_cols, y, ldy, bias, accumulate);
}

static void PANEL_PREFIX(q5_k)(const pdl_block_q8k *x, int64_t ldx, int rows, const uint8_t *panel, size_t pb,
                               int panels, int64_t nb, int last_cols, float *y, int64_t ldy, const float *bias,
                               bool accumulate) {
    ib_k_tile(2, x, ldx, rows, panel, pb, panels, nb, last_cols, y, ldy, bias, accumulate);
}

static void PANEL_PREFIX(q6_k)(const pdl_block_q8k *x, int64_t ldx, int rows, const uint8_t *panel, size_t pb,
                               int panels, int64_t nb, int last_cols, float *y, int64_t ldy, const float *bias,
                               bool accumulate) {
    ib_k_tile(1, x, ldx, rows, panel, pb, panels, nb, last_cols, y, ldy, bias, accumulate);
}

/* A driver tile of a type decoded in pieces (Q3_K, Q2_K, IQ4_XS, TQ2_0 /
 * TQ1_0): IB_MAX_R rows at a time, one group a piece for several rows and
 * two for one row. PIECE(x, ldx, NR, groups, NV, nb, ldy, accumulate) is
 * the type's always-inline piece, instantiated here for each NR and NV. */
#define IB_PIECE_TILE(NAME, PIECE)                                                                               \
    static void PANEL_PREFIX(NAME)(const pdl_block_q8k *x, int64_t ldx, int rows, const uint8_t *panel,          \
                                   size_t pb, int panels, int64_t nb, int last_cols, float *y, int64_t ldy,      \
                                   const float *bias, bool accumulate) {                                         \
        ib_group g[2 * PDL_PANEL_TILE_PANELS];                                                                   \
        int n = ib_groups(panel, pb, panels, last_cols, y, bias, g);                                             \
        for (int r0 = 0; r0 < rows; r0 += IB_MAX_R) {                                                            \
            int nr = rows - r0 < IB_MAX_R ? rows - r0 : IB_MAX_R;                                                \
            ib_group gr[2 * PDL_PANEL_TILE_PANELS];                                                              \
            for (int i = 0; i < n; i++) {                                                                        \
                gr[i] = g[i];                                                                                    \
                gr[i].y += r0 * ldy;                                                                             \
            }                                                                                                    \
            const pdl_block_q8k *xr = x + r0 * ldx;                                                              \
            int step = nr == 1 ? 2 : 1;                                                                          \
            for (int i = 0; i < n; i += step) {                                                                  \
                int nv = n - i < step ? n - i : step;                                                            \
                const ib_group *gi = gr + i;                                                                     \
                switch (nr) {                                                                                    \
                case 1:                                                                                          \
                    if (nv == 2) PIECE(xr, ldx, 1, gi, 2, nb, ldy, accumulate);                                  \
                    else PIECE(xr, ldx, 1, gi, 1, nb, ldy, accumulate);                                          \
                    break;                                                                                       \
                case 2: PIECE(xr, ldx, 2, gi, 1, nb, ldy, accumulate); break;                                    \
                case 3: PIECE(xr, ldx, 3, gi, 1, nb, ldy, accumulate); break;                                    \
                default: PIECE(xr, ldx, 4, gi, 1, nb, ldy, accumulate); break;                                   \
                }                                                                                                \
            }                                                                                                    \
        }                                                                                                        \
    }

/* ---- Q3_K and Q2_K --------------------------------------------------------------- */

/* Q3_K: the unsigned values q + 4 (0..7) of 4 elements of 8 columns for
 * half H and quarter K: bits 2K of qs vector A (the half's), bit 4H + K of
 * hmask vector M moved to bit 2 (16-bit shifts: no bit crosses into the
 * other byte's bits 0..2). */
static inline __attribute__((always_inline)) __m256i ib_q3_values(const int half, const int quarter, __m256i a,
                                                                  __m256i m) {
    const int t = 4 * half + quarter;
    __m256i lo = _mm256_and_si256(_mm256_srli_epi16(a, 2 * quarter), _mm256_set1_epi8(0x03));
    __m256i hb = t <= 2 ? _mm256_slli_epi16(m, 2 - t) : _mm256_srli_epi16(m, t - 2);
    return _mm256_or_si256(lo, _mm256_and_si256(hb, _mm256_set1_epi8(0x04)));
}

/* isum - 4 x (the scaled activation sums per 16) (pairs of groups per
 * VPMADDWD), then kquant.h's fused multiply-add into acc. */
static inline __attribute__((always_inline)) __m256 ib_q3k_end(const uint8_t *blk, int half8, __m256i isum,
                                                               const pdl_block_q8k *xb, __m256 acc) {
    const uint8_t *scb = blk + 1536 + half8;
    __m256i off = _mm256_setzero_si256();
    IB_UNROLL for (int gg = 0; gg < 8; gg++)
        off = _mm256_add_epi32(off, _mm256_madd_epi16(ib_pair16(scb + 32 * gg, scb + 32 * gg + 16, false),
                                                      ib_bcast4(xb->bsum16 + 2 * gg)));
    __m256i is = _mm256_sub_epi32(isum, _mm256_slli_epi32(off, 2));
    __m256 dw = ib_halves(blk + 1792 + 2 * half8);
    return _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_set1_ps(xb->d)), _mm256_cvtepi32_ps(is), acc);
}

/* msum (the mins times the activation sums per 16, pairs of groups per
 * VPMADDWD), then kquant.h's two fused multiply-adds into acc. */
static inline __attribute__((always_inline)) __m256 ib_q2k_end(const uint8_t *blk, int half8, __m256i isum,
                                                               const pdl_block_q8k *xb, __m256 acc) {
    const uint8_t *mnb = blk + 1280 + half8;
    __m256i msum = _mm256_setzero_si256();
    IB_UNROLL for (int gg = 0; gg < 8; gg++)
        msum = _mm256_add_epi32(msum, _mm256_madd_epi16(ib_pair16(mnb + 32 * gg, mnb + 32 * gg + 16, true),
                                                        ib_bcast4(xb->bsum16 + 2 * gg)));
    __m256 dx = _mm256_set1_ps(xb->d);
    __m256 dw = ib_halves(blk + 1536 + 2 * half8), dm = ib_halves(blk + 1568 + 2 * half8);
    acc = _mm256_fmadd_ps(_mm256_mul_ps(dw, dx), _mm256_cvtepi32_ps(isum), acc);
    return _mm256_fnmadd_ps(_mm256_mul_ps(dm, dx), _mm256_cvtepi32_ps(msum), acc);
}

/* Q3_K and Q2_K (KIND; ib_lb_*: the low-bit pair) share the walk: per
 * half and group of 16 elements (4 steps of 4), the values times the
 * activations, times the group's scale, into isum; a block ends with
 * ib_q3k_end / ib_q2k_end. Step l4's vectors (panel layout,
 * weight_panels.h): Q3_K three (the qs of half 0, of half 1, the hmask),
 * Q2_K two (the qs of each half). */
enum { IB_LB_Q3K, IB_LB_Q2K };

static inline size_t ib_lb_block(const int KIND) {
    return KIND == IB_LB_Q3K ? PDL_Q3K_PANEL_BLOCK : PDL_Q2K_PANEL_BLOCK;
}

/* Step l4's first vector, at group half gh's 8 rows. */
static inline const uint8_t *ib_lb_step(const uint8_t *blk, int l4, int gh, const int KIND) {
    return blk + (size_t)(l4 * (KIND == IB_LB_Q3K ? 3 : 2)) * 64 + 32 * gh;
}

/* Group `group`'s scales: Q3_K's signed (minus 32), Q2_K's four-bit ones. */
static inline __m256i ib_lb_scale(const uint8_t *blk, int group, int gh, const int KIND) {
    return KIND == IB_LB_Q3K ? ib_scale_i8(blk + 1536 + group * 16 + 8 * gh)
                             : ib_scale_u8(blk + 1024 + group * 16 + 8 * gh);
}

/* Half `half`'s qs vector of a step (st: ib_lb_step) and Q3_K's hmask one. */
static inline __attribute__((always_inline)) void ib_lb_load(const uint8_t *st, int half, __m256i *a, __m256i *m,
                                                             const int KIND) {
    *a = _mm256_load_si256((const __m256i *)(const void *)(st + half * 64));
    *m = KIND == IB_LB_Q3K ? _mm256_load_si256((const __m256i *)(const void *)(st + 128)) : _mm256_setzero_si256();
}

/* Quarter `quarter`'s values: Q3_K's q + 4 (0..7), Q2_K's 0..3. */
static inline __attribute__((always_inline)) __m256i ib_lb_values(const int half, const int quarter, __m256i a,
                                                                  __m256i m, const int KIND) {
    if (KIND == IB_LB_Q3K) return ib_q3_values(half, quarter, a, m);
    return _mm256_and_si256(_mm256_srli_epi16(a, 2 * quarter), _mm256_set1_epi8(0x03));
}

/* A block's end for one row and group (ib_q3k_end / ib_q2k_end). */
static inline __attribute__((always_inline)) __m256 ib_lb_end(const uint8_t *blk, int half8, __m256i isum,
                                                              const pdl_block_q8k *xb, __m256 acc, const int KIND) {
    return KIND == IB_LB_Q3K ? ib_q3k_end(blk, half8, isum, xb, acc) : ib_q2k_end(blk, half8, isum, xb, acc);
}

/* Decode's prefetch for step l4 of half `half` (st: ib_lb_step at group
 * half 0) a block ahead: Q3_K the step's three lines once (at half 0),
 * Q2_K the half's line; then the block's lines past its steps. */
static inline __attribute__((always_inline)) void ib_lb_prefetch(const uint8_t *blk, const uint8_t *st,
                                                                 size_t ahead, int l4, int half, const int KIND) {
    if (KIND == IB_LB_Q3K) {
        if (half) return;
        _mm_prefetch((const char *)(st + ahead), _MM_HINT_T0);
        _mm_prefetch((const char *)(st + 64 + ahead), _MM_HINT_T0);
        _mm_prefetch((const char *)(st + 128 + ahead), _MM_HINT_T0);
        panel_prefetch_tail(blk + ahead, 1536, PDL_Q3K_PANEL_BLOCK, l4, 8);
    } else {
        _mm_prefetch((const char *)(st + 64 * half + ahead), _MM_HINT_T0);
        panel_prefetch_tail(blk + ahead, 1024, PDL_Q2K_PANEL_BLOCK, 2 * l4 + half, 16);
    }
}

/* Q3_K / Q2_K, NR (2..4) rows x NV groups: per group of 16 elements the
 * values times the activations over its 4 steps (int16 on AVX2: at most
 * 7112 for Q3_K's q + 4, 3048 for Q2_K), times the group's scale, into
 * isum; then ib_lb_end. One row is ib_lb_row's. */
static inline __attribute__((always_inline)) void ib_lb_piece(const pdl_block_q8k *x, int64_t ldx, const int nr,
                                                              const ib_group *grp, const int nv, int64_t nb,
                                                              int64_t ldy, bool accumulate, const int KIND) {
    __m256 acc[IB_MAX_R][IB_MAX_V];
    IB_UNROLL for (int r = 0; r < nr; r++)
        IB_UNROLL for (int v = 0; v < nv; v++) acc[r][v] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk[IB_MAX_V];
        IB_UNROLL for (int v = 0; v < nv; v++) blk[v] = grp[v].panel + (size_t)b * ib_lb_block(KIND);
        __m256i isum[IB_MAX_R][IB_MAX_V];
        IB_UNROLL for (int r = 0; r < nr; r++)
            IB_UNROLL for (int v = 0; v < nv; v++) isum[r][v] = _mm256_setzero_si256();
        for (int half = 0; half < 2; half++)
            IB_UNROLL for (int quarter = 0; quarter < 4; quarter++) /* a constant in each copy */
                for (int gs = 0; gs < 2; gs++) {
                    int group = 8 * half + 2 * quarter + gs;
                    __m256i sc[IB_MAX_V];
                    IB_UNROLL for (int v = 0; v < nv; v++) sc[v] = ib_lb_scale(blk[v], group, grp[v].half, KIND);
                    __m256i sg[IB_MAX_R][IB_MAX_V];
                    IB_UNROLL for (int r = 0; r < nr; r++)
                        IB_UNROLL for (int v = 0; v < nv; v++) sg[r][v] = _mm256_setzero_si256();
                    IB_UNROLL for (int l4 = 4 * gs; l4 < 4 * gs + 4; l4++) {
                        __m256i w[IB_MAX_V];
                        IB_UNROLL for (int v = 0; v < nv; v++) {
                            __m256i a, m;
                            ib_lb_load(ib_lb_step(blk[v], l4, grp[v].half, KIND), half, &a, &m, KIND);
                            w[v] = ib_lb_values(half, quarter, a, m, KIND);
                        }
                        IB_UNROLL for (int r = 0; r < nr; r++) {
                            __m256i xb = ib_bcast4(x[r * ldx + b].qs + 128 * half + 32 * quarter + 4 * l4);
                            IB_UNROLL for (int v = 0; v < nv; v++) sg[r][v] = IB_DOT(sg[r][v], w[v], xb);
                        }
                    }
                    IB_UNROLL for (int r = 0; r < nr; r++)
                        IB_UNROLL for (int v = 0; v < nv; v++)
                            isum[r][v] = _mm256_add_epi32(isum[r][v], ib_scaled(sg[r][v], sc[v]));
                }
        IB_UNROLL for (int v = 0; v < nv; v++)
            IB_UNROLL for (int r = 0; r < nr; r++)
                acc[r][v] = ib_lb_end(blk[v], 8 * grp[v].half, isum[r][v], &x[r * ldx + b], acc[r][v], KIND);
    }
    IB_UNROLL for (int r = 0; r < nr; r++)
        IB_UNROLL for (int v = 0; v < nv; v++)
            ib_store(grp[v].y + r * ldy, acc[r][v], grp[v].bias, accumulate, grp[v].cols);
}

/* Q3_K / Q2_K, one row x NV groups (decode): per half and group of steps,
 * each step's lines read once for the half's four quarters. */
static inline __attribute__((always_inline)) void ib_lb_row(const pdl_block_q8k *x, const ib_group *grp,
                                                            const int nv, int64_t nb, bool accumulate,
                                                            const int KIND) {
    __m256 acc[IB_MAX_V];
    IB_UNROLL for (int v = 0; v < nv; v++) acc[v] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk[IB_MAX_V];
        const size_t ahead = panel_ahead(ib_lb_block(KIND));
        IB_UNROLL for (int v = 0; v < nv; v++) blk[v] = grp[v].panel + (size_t)b * ib_lb_block(KIND);
        const int8_t *xq = x[b].qs;
        __m256i isum[IB_MAX_V];
        IB_UNROLL for (int v = 0; v < nv; v++) isum[v] = _mm256_setzero_si256();
        IB_UNROLL for (int half = 0; half < 2; half++)
            for (int gs = 0; gs < 2; gs++) {
                __m256i s[4][IB_MAX_V];
                IB_UNROLL for (int q = 0; q < 4; q++)
                    IB_UNROLL for (int v = 0; v < nv; v++) s[q][v] = _mm256_setzero_si256();
                IB_UNROLL for (int l4 = 4 * gs; l4 < 4 * gs + 4; l4++)
                    IB_UNROLL for (int v = 0; v < nv; v++) {
                        const uint8_t *st = ib_lb_step(blk[v], l4, grp[v].half, KIND);
                        __m256i a, m;
                        ib_lb_load(st, half, &a, &m, KIND);
                        if (grp[v].half == 0) ib_lb_prefetch(blk[v], st, ahead, l4, half, KIND);
                        IB_UNROLL for (int q = 0; q < 4; q++) {
                            __m256i xb = ib_bcast4(xq + 128 * half + 32 * q + 4 * l4);
                            s[q][v] = IB_DOT(s[q][v], ib_lb_values(half, q, a, m, KIND), xb);
                        }
                    }
                IB_UNROLL for (int q = 0; q < 4; q++)
                    IB_UNROLL for (int v = 0; v < nv; v++) {
                        int group = 8 * half + 2 * q + gs;
                        isum[v] = _mm256_add_epi32(isum[v], ib_scaled(s[q][v], ib_lb_scale(blk[v], group, grp[v].half, KIND)));
                    }
            }
        IB_UNROLL for (int v = 0; v < nv; v++)
            acc[v] = ib_lb_end(blk[v], 8 * grp[v].half, isum[v], &x[b], acc[v], KIND);
    }
    IB_UNROLL for (int v = 0; v < nv; v++) ib_store(grp[v].y, acc[v], grp[v].bias, accumulate, grp[v].cols);
}

/* Q3_K's and Q2_K's pieces: rows x groups as IB_PIECE_TILE asks (one row:
 * ib_lb_row). */
static inline __attribute__((always_inline)) void ib_q3k_any(const pdl_block_q8k *x, int64_t ldx, const int nr,
                                                             const ib_group *grp, const int nv, int64_t nb,
                                                             int64_t ldy, bool accumulate) {
    if (nr == 1) ib_lb_row(x, grp, nv, nb, accumulate, IB_LB_Q3K);
    else ib_lb_piece(x, ldx, nr, grp, nv, nb, ldy, accumulate, IB_LB_Q3K);
}
static inline __attribute__((always_inline)) void ib_q2k_any(const pdl_block_q8k *x, int64_t ldx, const int nr,
                                                             const ib_group *grp, const int nv, int64_t nb,
                                                             int64_t ldy, bool accumulate) {
    if (nr == 1) ib_lb_row(x, grp, nv, nb, accumulate, IB_LB_Q2K);
    else ib_lb_piece(x, ldx, nr, grp, nv, nb, ldy, accumulate, IB_LB_Q2K);
}

IB_PIECE_TILE(q3_k, ib_q3k_any)
IB_PIECE_TILE(q2_k, ib_q2k_any)

/* ---- IQ4_XS ---------------------------------------------------------------- */

/* IQ4_XS, NR (1..4) rows x NV groups: per sub-block j, 4 steps of a low
 * and a high nibble vector (elements 32 j + 4 q .. and 32 j + 16 + 4 q ..
 * of word 4 j + q) through the value table. AVX2: the sign trick, and each
 * step's pair sums (at most 2 x 127 x 127) times the lanes' signed scale
 * into isum (VPMADDWD); VNNI: the values + 128 by VPDPBUSD into a sum that
 * starts at -128 x bsum32_j, times the scale at the sub-block's end. Then
 * kquant.h's fused multiply-add. */
static inline __attribute__((always_inline)) void ib_iq4xs_piece(const pdl_block_q8k *x, int64_t ldx, const int nr,
                                                                 const ib_group *grp, const int nv, int64_t nb,
                                                                 int64_t ldy, bool accumulate) {
    const __m256i low = _mm256_set1_epi8(0x0F);
#if defined(PANEL_VNNI256)
    uint8_t t[16];
    for (int i = 0; i < 16; i++) t[i] = (uint8_t)(iq4nl_values[i] + PDL_IQ4NL_OFFSET);
    const __m256i values = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)t));
#else
    const __m256i values = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)iq4nl_values));
#endif
    __m256 acc[IB_MAX_R][IB_MAX_V];
    IB_UNROLL for (int r = 0; r < nr; r++)
        IB_UNROLL for (int v = 0; v < nv; v++) acc[r][v] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk[IB_MAX_V];
        const size_t ahead = panel_ahead(PDL_IQ4XS_PANEL_BLOCK);
        IB_UNROLL for (int v = 0; v < nv; v++) blk[v] = grp[v].panel + (size_t)b * PDL_IQ4XS_PANEL_BLOCK;
        __m256i isum[IB_MAX_R][IB_MAX_V];
        IB_UNROLL for (int r = 0; r < nr; r++)
            IB_UNROLL for (int v = 0; v < nv; v++) isum[r][v] = _mm256_setzero_si256();
        for (int j = 0; j < 8; j++) {
            __m256i sc[IB_MAX_V];
            IB_UNROLL for (int v = 0; v < nv; v++) sc[v] = ib_scale_i8(blk[v] + 2048 + j * 16 + 8 * grp[v].half);
#if defined(PANEL_VNNI256)
            __m256i s[IB_MAX_R][IB_MAX_V];
            IB_UNROLL for (int r = 0; r < nr; r++) {
                __m256i start = _mm256_set1_epi32(-PDL_IQ4NL_OFFSET * x[r * ldx + b].bsum32[j]);
                IB_UNROLL for (int v = 0; v < nv; v++) s[r][v] = start;
            }
#endif
            IB_UNROLL for (int q = 0; q < 4; q++) {
                __m256i wl[IB_MAX_V], wh[IB_MAX_V];
                IB_UNROLL for (int v = 0; v < nv; v++) {
                    const uint8_t *line = blk[v] + (4 * j + q) * 64;
                    if (IB_PF && nr == 1 && grp[v].half == 0) {
                        _mm_prefetch((const char *)(line + ahead), _MM_HINT_T0);
                        panel_prefetch_tail(blk[v] + ahead, 2048, PDL_IQ4XS_PANEL_BLOCK, 4 * j + q, 32);
                    }
                    __m256i raw = _mm256_load_si256((const __m256i *)(const void *)(line + 32 * grp[v].half));
                    wl[v] = _mm256_shuffle_epi8(values, _mm256_and_si256(raw, low));
                    wh[v] = _mm256_shuffle_epi8(values, _mm256_and_si256(_mm256_srli_epi16(raw, 4), low));
                }
                IB_UNROLL for (int r = 0; r < nr; r++) {
                    const int8_t *xq = x[r * ldx + b].qs + 32 * j + 4 * q;
                    __m256i xl = ib_bcast4(xq), xh = ib_bcast4(xq + 16);
                    IB_UNROLL for (int v = 0; v < nv; v++) {
#if defined(PANEL_VNNI256)
                        s[r][v] = PANEL_VNNI256(s[r][v], wl[v], xl);
                        s[r][v] = PANEL_VNNI256(s[r][v], wh[v], xh);
#else
                        __m256i p = _mm256_add_epi32(
                            _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(wl[v]), _mm256_sign_epi8(xl, wl[v])),
                                              sc[v]),
                            _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(wh[v]), _mm256_sign_epi8(xh, wh[v])),
                                              sc[v]));
                        isum[r][v] = _mm256_add_epi32(isum[r][v], p);
#endif
                    }
                }
            }
#if defined(PANEL_VNNI256)
            IB_UNROLL for (int r = 0; r < nr; r++)
                IB_UNROLL for (int v = 0; v < nv; v++)
                    isum[r][v] = _mm256_add_epi32(isum[r][v], ib_scaled(s[r][v], sc[v]));
#endif
        }
        IB_UNROLL for (int v = 0; v < nv; v++) {
            __m256 dw = ib_halves(blk[v] + 2176 + 16 * grp[v].half);
            IB_UNROLL for (int r = 0; r < nr; r++) {
                __m256 dx = _mm256_set1_ps(x[r * ldx + b].d);
                acc[r][v] = _mm256_fmadd_ps(_mm256_mul_ps(dw, dx), _mm256_cvtepi32_ps(isum[r][v]), acc[r][v]);
            }
        }
    }
    IB_UNROLL for (int r = 0; r < nr; r++)
        IB_UNROLL for (int v = 0; v < nv; v++)
            ib_store(grp[v].y + r * ldy, acc[r][v], grp[v].bias, accumulate, grp[v].cols);
}

IB_PIECE_TILE(iq4_xs, ib_iq4xs_piece)

/* ---- Q5_0, Q4_1 and Q5_1 ------------------------------------------------ */

/* NR rows x NV groups of a legacy block format (weight_panels.h's layout):
 * Q4_0's nibble steps, each code plus its fifth bit (Q5: ib_q5_high on
 * the block's word of rearranged qh bits, bit q for step q's low nibbles,
 * 4 + q for its high ones); Q5_0's sums start at -16 x sum(x) (its codes
 * are w + 16); AVX2: Q5 codes (at most 31: pairs of 7874) fold the int16
 * sums into int32 after 4 of the 8 products per block, Q4_1's nibbles
 * never need to. Then ib_q_block_end's fma, and for Q4_1 / Q5_1 the min
 * term: acc = fma(xs, m x dx, acc). */
static inline __attribute__((always_inline)) void ib_leg_piece(const pdl_dtype dt, const int8_t *xq, const float *xd,
                                                               const int32_t *xs, int64_t ldx, int64_t nbx,
                                                               const int nr, const ib_group *grp, const int nv,
                                                               int64_t nb, int64_t ldy, bool accumulate) {
    const size_t qbytes = legacy_panel_qbytes(dt), min_at = legacy_panel_min_at(dt);
    const bool q5 = dt != PDL_DTYPE_Q4_1, with_min = dt != PDL_DTYPE_Q5_0;
    const __m256i low = _mm256_set1_epi8(0x0F);
#if !defined(PANEL_VNNI256)
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i s32[IB_MAX_R][IB_MAX_V]; /* Q5: the first 2 steps' sums, in int32 */
#endif
    __m256 acc[IB_MAX_R][IB_MAX_V];
    IB_UNROLL for (int r = 0; r < nr; r++)
        IB_UNROLL for (int v = 0; v < nv; v++) acc[r][v] = _mm256_setzero_ps();
    size_t at = 0; /* qpanel_quants_at(qbytes, b) */
    for (int64_t b = 0; b < nb; at = qpanel_next_quants(qbytes, at, b), b++) {
        const uint8_t *blk[IB_MAX_V];
        __m256i hv[IB_MAX_V];
        IB_UNROLL for (int v = 0; v < nv; v++) {
            blk[v] = grp[v].panel + at + 32 * grp[v].half;
            hv[v] = q5 ? _mm256_load_si256((const __m256i *)(const void *)(blk[v] + PDL_LEGACY_PANEL_HIGH_AT))
                       : _mm256_setzero_si256();
        }
        __m256i s[IB_MAX_R][IB_MAX_V];
        IB_UNROLL for (int r = 0; r < nr; r++)
            IB_UNROLL for (int v = 0; v < nv; v++) s[r][v] = _mm256_setzero_si256();
        IB_UNROLL for (int q = 0; q < 4; q++) {
            __m256i w[IB_MAX_V], w2[IB_MAX_V];
            IB_UNROLL for (int v = 0; v < nv; v++) {
                __m256i raw = _mm256_load_si256((const __m256i *)(const void *)(blk[v] + q * 64));
                if (IB_PF && nr == 1 && grp[v].half == 0) qpanel_prefetch_step(blk[v], qbytes, b, q, 4);
                w[v] = _mm256_and_si256(raw, low);
                w2[v] = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low);
                if (q5) {
                    w[v] = _mm256_or_si256(w[v], ib_q5_high(hv[v], q));
                    w2[v] = _mm256_or_si256(w2[v], ib_q5_high(hv[v], 4 + q));
                }
            }
            IB_UNROLL for (int r = 0; r < nr; r++) {
                __m256i xb = ib_bcast4(xq + r * ldx + b * 32 + 4 * q);
                __m256i xb2 = ib_bcast4(xq + r * ldx + b * 32 + 16 + 4 * q);
                IB_UNROLL for (int v = 0; v < nv; v++) {
                    s[r][v] = IB_DOT(s[r][v], w[v], xb);
                    s[r][v] = IB_DOT(s[r][v], w2[v], xb2);
                }
            }
#if !defined(PANEL_VNNI256)
            if (q5 && q == 1) /* 4 products of pairs up to 7874: fold before int16 overflows */
                IB_UNROLL for (int r = 0; r < nr; r++)
                    IB_UNROLL for (int v = 0; v < nv; v++) {
                        s32[r][v] = _mm256_madd_epi16(s[r][v], ones);
                        s[r][v] = _mm256_setzero_si256();
                    }
#endif
        }
        __m256i isum[IB_MAX_R][IB_MAX_V];
        IB_UNROLL for (int r = 0; r < nr; r++) {
            __m256i start = _mm256_set1_epi32(with_min ? 0 : -16 * xs[r * nbx + b]);
            IB_UNROLL for (int v = 0; v < nv; v++) {
#if defined(PANEL_VNNI256)
                isum[r][v] = _mm256_add_epi32(start, s[r][v]);
#else
                isum[r][v] = _mm256_add_epi32(start, _mm256_madd_epi16(s[r][v], ones));
                if (q5) isum[r][v] = _mm256_add_epi32(isum[r][v], s32[r][v]);
#endif
            }
        }
        ib_q_block_end(0, acc, isum, xd, nbx, nr, grp, nv, qpanel_scales_near(qbytes, at, b), b);
        if (with_min) {
            __m256 m[IB_MAX_V];
            IB_UNROLL for (int v = 0; v < nv; v++) m[v] = ib_halves(grp[v].panel + at + min_at + 16 * grp[v].half);
            IB_UNROLL for (int r = 0; r < nr; r++) {
                __m256 dx = _mm256_set1_ps(xd[r * nbx + b]), xsf = _mm256_set1_ps((float)xs[r * nbx + b]);
                IB_UNROLL for (int v = 0; v < nv; v++) acc[r][v] = _mm256_fmadd_ps(xsf, _mm256_mul_ps(m[v], dx), acc[r][v]);
            }
        }
    }
    ib_q_store(acc, nr, grp, nv, ldy, accumulate);
}

/* A driver tile of a legacy format in pieces, as ib_q_tile's. */
static inline __attribute__((always_inline)) void ib_leg_tile(const pdl_dtype dt, const int8_t *xq, const float *xd,
                                                              const int32_t *xs, int64_t ldx, int64_t nbx, int rows,
                                                              const uint8_t *panel, size_t pb, int panels, int64_t nb,
                                                              int last_cols, float *y, int64_t ldy, const float *bias,
                                                              bool accumulate) {
    ib_group g[2 * PDL_PANEL_TILE_PANELS];
    int n = ib_groups(panel, pb, panels, last_cols, y, bias, g);
    for (int r0 = 0; r0 < rows; r0 += IB_MAX_R) {
        int nr = rows - r0 < IB_MAX_R ? rows - r0 : IB_MAX_R;
        const int8_t *xr = xq + r0 * ldx;
        const float *dr = xd + r0 * nbx;
        const int32_t *sr = xs + r0 * nbx;
        int step = nr == 1 ? IB_V1 : IB_V;
        for (int i = 0; i < n; i += step) {
            int nv = n - i < step ? n - i : step;
            ib_group gi[IB_MAX_V];
            for (int j = 0; j < nv; j++) {
                gi[j] = g[i + j];
                gi[j].y += r0 * ldy;
            }
#define IB_L(NR, NV) ib_leg_piece(dt, xr, dr, sr, ldx, nbx, NR, gi, NV, nb, ldy, accumulate)
            switch (nr * 8 + nv) {
            case 8 + 1: IB_L(1, 1); break;
            case 8 + 2: IB_L(1, 2); break;
            case 16 + 1: IB_L(2, 1); break;
            case 16 + 2: IB_L(2, 2); break;
            case 24 + 1: IB_L(3, 1); break;
            case 24 + 2: IB_L(3, 2); break;
            case 32 + 1: IB_L(4, 1); break;
            default: IB_L(4, 2); break;
            }
#undef IB_L
        }
    }
}
_Static_assert(IB_V == 2 && IB_V1 == 2, "ib_leg_tile instantiates its pieces for these");

static void PANEL_PREFIX(q5_0)(const int8_t *xq, const float *xd, const int32_t *xs, int64_t ldx, int64_t nbx,
                               int rows, const uint8_t *panel, size_t pb, int panels, int64_t nb, int last_cols,
                               float *y, int64_t ldy, const float *bias, bool accumulate) {
    ib_leg_tile(PDL_DTYPE_Q5_0, xq, xd, xs, ldx, nbx, rows, panel, pb, panels, nb, last_cols, y, ldy, bias,
                accumulate);
}

static void PANEL_PREFIX(q4_1)(const int8_t *xq, const float *xd, const int32_t *xs, int64_t ldx, int64_t nbx,
                               int rows, const uint8_t *panel, size_t pb, int panels, int64_t nb, int last_cols,
                               float *y, int64_t ldy, const float *bias, bool accumulate) {
    ib_leg_tile(PDL_DTYPE_Q4_1, xq, xd, xs, ldx, nbx, rows, panel, pb, panels, nb, last_cols, y, ldy, bias,
                accumulate);
}

static void PANEL_PREFIX(q5_1)(const int8_t *xq, const float *xd, const int32_t *xs, int64_t ldx, int64_t nbx,
                               int rows, const uint8_t *panel, size_t pb, int panels, int64_t nb, int last_cols,
                               float *y, int64_t ldy, const float *bias, bool accumulate) {
    ib_leg_tile(PDL_DTYPE_Q5_1, xq, xd, xs, ldx, nbx, rows, panel, pb, panels, nb, last_cols, y, ldy, bias,
                accumulate);
}

/* ---- TQ2_0 and TQ1_0 ------------------------------------------------------------ */

/* A half super-block's code sums into int32: VNNI's are already. */
#if defined(PANEL_VNNI256)
static inline __m256i ib_tq_fold(__m256i s) { return s; }
#else
static inline __m256i ib_tq_fold(__m256i s) { return _mm256_madd_epi16(s, _mm256_set1_epi16(1)); }
#endif

/* TQ2_0 / TQ1_0, NR (1..4) rows x NV groups: the codes (0..3) times the
 * activations over the super-block (Q2_K's walk without its scales), minus
 * the activations' sum (their 16 bsum16): kquant.h's isum; then one fused
 * multiply-add. */
static inline __attribute__((always_inline)) void ib_tq_piece(const pdl_block_q8k *x, int64_t ldx, const int nr,
                                                              const ib_group *grp, const int nv, int64_t nb,
                                                              int64_t ldy, bool accumulate) {
    const __m256i m3 = _mm256_set1_epi8(0x03);
    __m256 acc[IB_MAX_R][IB_MAX_V];
    IB_UNROLL for (int r = 0; r < nr; r++)
        IB_UNROLL for (int v = 0; v < nv; v++) acc[r][v] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk[IB_MAX_V];
        const size_t ahead = panel_ahead(PDL_TQ_PANEL_BLOCK);
        IB_UNROLL for (int v = 0; v < nv; v++) blk[v] = grp[v].panel + (size_t)b * PDL_TQ_PANEL_BLOCK;
        __m256i csum[IB_MAX_R][IB_MAX_V];
        IB_UNROLL for (int r = 0; r < nr; r++)
            IB_UNROLL for (int v = 0; v < nv; v++) csum[r][v] = _mm256_setzero_si256();
        for (int half = 0; half < 2; half++) {
            __m256i s[IB_MAX_R][IB_MAX_V];
            IB_UNROLL for (int r = 0; r < nr; r++)
                IB_UNROLL for (int v = 0; v < nv; v++) s[r][v] = _mm256_setzero_si256();
            for (int l4 = 0; l4 < 8; l4++) {
                __m256i a[IB_MAX_V];
                IB_UNROLL for (int v = 0; v < nv; v++) {
                    const uint8_t *wd = blk[v] + (size_t)(l4 * 2 + half) * 64 + 32 * grp[v].half;
                    a[v] = _mm256_load_si256((const __m256i *)(const void *)wd);
                    if (nr == 1 && grp[v].half == 0) {
                        _mm_prefetch((const char *)(wd + ahead), _MM_HINT_T0);
                        panel_prefetch_tail(blk[v] + ahead, 1024, PDL_TQ_PANEL_BLOCK, 8 * half + l4, 16);
                    }
                }
                IB_UNROLL for (int q = 0; q < 4; q++) {
                    __m256i w[IB_MAX_V];
                    IB_UNROLL for (int v = 0; v < nv; v++) w[v] = _mm256_and_si256(_mm256_srli_epi16(a[v], 2 * q), m3);
                    IB_UNROLL for (int r = 0; r < nr; r++) {
                        __m256i xb = ib_bcast4(x[r * ldx + b].qs + 128 * half + 32 * q + 4 * l4);
                        IB_UNROLL for (int v = 0; v < nv; v++) s[r][v] = IB_DOT(s[r][v], w[v], xb);
                    }
                }
            }
            IB_UNROLL for (int r = 0; r < nr; r++)
                IB_UNROLL for (int v = 0; v < nv; v++) csum[r][v] = _mm256_add_epi32(csum[r][v], ib_tq_fold(s[r][v]));
        }
        IB_UNROLL for (int r = 0; r < nr; r++) {
            const pdl_block_q8k *xb = &x[r * ldx + b];
            int32_t bt = 0;
            for (int g = 0; g < 16; g++) bt += xb->bsum16[g];
            __m256 dx = _mm256_set1_ps(xb->d);
            IB_UNROLL for (int v = 0; v < nv; v++) {
                __m256i isum = _mm256_sub_epi32(csum[r][v], _mm256_set1_epi32(bt));
                __m256 dw = ib_halves(blk[v] + 1024 + 16 * grp[v].half);
                acc[r][v] = _mm256_fmadd_ps(_mm256_mul_ps(dw, dx), _mm256_cvtepi32_ps(isum), acc[r][v]);
            }
        }
    }
    IB_UNROLL for (int r = 0; r < nr; r++)
        IB_UNROLL for (int v = 0; v < nv; v++)
            ib_store(grp[v].y + r * ldy, acc[r][v], grp[v].bias, accumulate, grp[v].cols);
}

IB_PIECE_TILE(tq, ib_tq_piece)

#endif
