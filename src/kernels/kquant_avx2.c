/*
 * kquant_avx2.c - the AVX2 Q2_K / Q3_K / Q4_K / Q5_K / Q6_K / IQ4_XS / TQ2_0 / TQ1_0 x Q8_K tiles (VPMADDUBSW +
 * VPMADDWD), same bits as the portable reference in kquant.c (order in
 * kquant.h). Compiled with AVX2 + FMA + F16C flags (CMakeLists.txt);
 * called only when the CPU has them.
 *
 * Tile: 4 activation rows x 2 weight rows (the AVX2 family's shape). Per
 * super-block each (row, column) pair gets an 8-lane int32 accumulator of
 * scale-weighted products; they are summed across lanes into one vector
 * of the 8 pairs (element 4 c + r), exact in any order, and the float part
 * is done for the 8 pairs at once with the single-rounding FMA.
 */
#include "kernels/kquant.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
#include <string.h>

#include "kernels/iq4nl.h"

#define TR 4
#define TC 2

/* Each super-block step prefetches the same block of weight row c + 16,
 * as the AVX-512 tiles do (see kquant_avx512_body.h); inlined, or GCC
 * deletes it. */
#define PF_ROWS 16
static inline __attribute__((always_inline)) void prefetch(const uint8_t *p, size_t bytes) {
    for (size_t o = 0; o < bytes; o += 64) _mm_prefetch((const char *)p + o, _MM_HINT_T0);
}

static inline float half_at(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

/* Four vectors -> 128-bit half k lane i: the sum of half k's four lanes of
 * vector i. */
static inline __m256i red4(__m256i a0, __m256i a1, __m256i a2, __m256i a3) {
    return _mm256_hadd_epi32(_mm256_hadd_epi32(a0, a1), _mm256_hadd_epi32(a2, a3));
}

/* acc[r][c] (8 lanes each) -> lane 4 c + r: the sum of acc[r][c]. */
static inline __m256i reduce_tile(__m256i acc[TR][TC]) {
    __m128i v[TC];
    for (int c = 0; c < TC; c++) {
        __m256i t = red4(acc[0][c], acc[1][c], acc[2][c], acc[3][c]);
        v[c] = _mm_add_epi32(_mm256_castsi256_si128(t), _mm256_extracti128_si256(t, 1));
    }
    return _mm256_set_m128i(v[1], v[0]);
}

/* Lane 4 c + r: a[c] * b[r]. */
static inline __m256 outer(const float a[TC], const float b[TR]) {
    __m256 av = _mm256_set_m128(_mm_set1_ps(a[1]), _mm_set1_ps(a[0]));
    __m256 bv = _mm256_broadcast_ps((const __m128 *)(const void *)b);
    return _mm256_mul_ps(av, bv);
}

static inline void store(__m256 acc, int nr, int nc, float *out, int64_t ldo) {
    float t[TR * TC];
    _mm256_storeu_ps(t, acc);
    for (int r = 0; r < nr; r++)
        for (int c = 0; c < nc; c++) out[r * ldo + c] = t[4 * c + r];
}

/* Q4_K: sub-block j (32 elements) is the low (j even) or high nibbles of
 * qs[32 (j / 2) .. + 31], scaled by 16-bit lane j of the decoded scales.
 * Q5_K (q5): plus 16 times bit j of the 32 qh bytes (values 0..31: a
 * VPMADDUBSW pair is at most 2 * 31 * 127, no saturation). */
static inline __attribute__((always_inline)) void q4k_body(const pdl_block_q8k *x, int64_t nb, int nr,
                                                           const uint8_t *w, size_t wrb, int nc, float *out,
                                                           int64_t ldo, const int q5) {
    const size_t bb = q5 ? 176 : 144, qs_at = q5 ? 48 : 16;
    const __m256i m4 = _mm256_set1_epi8(0x0F), m1 = _mm256_set1_epi8(0x01), zero = _mm256_setzero_si256();
    __m256 facc = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        __m256i acc[TR][TC], scb[TC];
        __m128i mins[TC];
        float dw[TC] = {0}, dm[TC] = {0}, dx[TR] = {0};
        for (int r = 0; r < TR; r++)
            for (int c = 0; c < TC; c++) acc[r][c] = zero;
        for (int c = 0; c < TC; c++) {
            scb[c] = zero;
            mins[c] = _mm_setzero_si128();
        }
        for (int c = 0; c < nc; c++) {
            const uint8_t *blk = w + c * wrb + b * bb;
            uint64_t sc, mn;
            kquant_q4_k_scales_mins(blk, &sc, &mn);
            scb[c] = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)sc)));
            mins[c] = _mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)mn));
            dw[c] = half_at(blk);
            dm[c] = half_at(blk + 2);
            prefetch(blk + PF_ROWS * wrb, bb);
        }
        for (int r = 0; r < nr; r++) dx[r] = x[r * nb + b].d;
        for (int j = 0; j < 8; j++) {
            const __m256i pick = _mm256_set1_epi16((short)((2 * j + 1) << 8 | 2 * j));
            __m256i wq[TC], sv[TC];
            for (int c = 0; c < nc; c++) {
                __m256i v = _mm256_loadu_si256((const __m256i *)(w + c * wrb + b * bb + qs_at + 32 * (j / 2)));
                wq[c] = _mm256_and_si256(j % 2 ? _mm256_srli_epi16(v, 4) : v, m4);
                if (q5) {
                    __m256i qh = _mm256_loadu_si256((const __m256i *)(w + c * wrb + b * bb + 16));
                    __m256i bit = _mm256_and_si256(_mm256_srli_epi16(qh, j), m1);
                    wq[c] = _mm256_or_si256(wq[c], _mm256_slli_epi16(bit, 4));
                }
                sv[c] = _mm256_shuffle_epi8(scb[c], pick);
            }
            for (int r = 0; r < nr; r++) {
                __m256i xv = _mm256_loadu_si256((const __m256i *)(x[r * nb + b].qs + 32 * j));
                for (int c = 0; c < nc; c++)
                    acc[r][c] = _mm256_add_epi32(acc[r][c],
                                                 _mm256_madd_epi16(_mm256_maddubs_epi16(wq[c], xv), sv[c]));
            }
        }
        __m256i isum = reduce_tile(acc);
        /* msum: half c of mz holds column c's 8 mins */
        __m256i mz = _mm256_set_m128i(mins[1], mins[0]), p[TR];
        for (int r = 0; r < TR; r++)
            p[r] = r < nr ? _mm256_madd_epi16(mz, _mm256_broadcastsi128_si256(_mm_loadu_si128(
                                                      (const __m128i *)x[r * nb + b].bsum32)))
                          : zero;
        __m256i msum = red4(p[0], p[1], p[2], p[3]);
        facc = _mm256_fmadd_ps(outer(dw, dx), _mm256_cvtepi32_ps(isum), facc);
        facc = _mm256_fnmadd_ps(outer(dm, dx), _mm256_cvtepi32_ps(msum), facc);
    }
    store(facc, nr, nc, out, ldo);
}

/* Q6_K, Q3_K and Q2_K (KIND; sb_*: the sixteen-scale super-blocks): a
 * super-block's 16 groups of 16 elements each have a scale of their own,
 * chunk t = 4 h + k (32 elements, t = 0..7) using scales 2t and 2t + 1,
 * and one term over the groups' bsum16 ends it.
 * Q6_K: chunk t is nibble k / 2 of ql[64 h + 32 (k % 2) ..], bits 2k of
 * qh[32 h ..]; the -32 offset is taken off at the end: isum = sum sc_g *
 * sum q x - 32 sum sc_g * bsum16_g.
 * Q3_K: bits 2k of qs[32 h ..] and bit t of the 32 hmask bytes, the
 * unsigned value q + 4 (0..7); the scales minus 32, signed. The +4 is taken
 * off at the end: isum -= 4 sum_g sc_g * bsum16_g.
 * Q2_K: Q3_K's chunks without the hmask bit (values 0..3), the groups'
 * scales the low nibbles of the 16 scale bytes; msum is the high nibbles
 * (mins) times bsum16, then kquant.h's two fused multiply-adds. */
enum { SB_Q6K, SB_Q3K, SB_Q2K };

static inline size_t sb_block_bytes(const int KIND) { return KIND == SB_Q6K ? 210 : KIND == SB_Q3K ? 110 : 84; }

/* A block's 16 scales (and Q2_K's mins) as int16, its d (and Q2_K's dmin). */
static inline __attribute__((always_inline)) void sb_scales(const uint8_t *blk, __m256i *scz, __m256i *mnz,
                                                            float *dw, float *dm, const int KIND) {
    if (KIND == SB_Q6K) {
        *scz = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(blk + 192)));
        *dw = half_at(blk + 208);
    } else if (KIND == SB_Q3K) {
        int8_t sc[16];
        kquant_q3_k_scales(blk + 96, sc);
        *scz = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)sc));
        *dw = half_at(blk + 108);
    } else {
        __m128i sb = _mm_loadu_si128((const __m128i *)blk);
        *scz = _mm256_cvtepu8_epi16(_mm_and_si128(sb, _mm_set1_epi8(0x0F)));
        *mnz = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sb, 4), _mm_set1_epi8(0x0F)));
        *dw = half_at(blk + 80);
        *dm = half_at(blk + 82);
    }
}

/* Chunk t's 32 unsigned values. */
static inline __attribute__((always_inline)) __m256i sb_chunk(const uint8_t *blk, int t, const int KIND) {
    const __m256i m1 = _mm256_set1_epi8(0x01), m3 = _mm256_set1_epi8(0x03), m4 = _mm256_set1_epi8(0x0F);
    int h = t / 4, k = t % 4;
    if (KIND == SB_Q6K) {
        __m256i ql = _mm256_loadu_si256((const __m256i *)(blk + 64 * h + 32 * (k % 2)));
        __m256i qh = _mm256_loadu_si256((const __m256i *)(blk + 128 + 32 * h));
        __m256i lo = _mm256_and_si256(k / 2 ? _mm256_srli_epi16(ql, 4) : ql, m4);
        __m256i top = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * k), m3);
        return _mm256_or_si256(lo, _mm256_slli_epi16(top, 4));
    }
    __m256i qs = _mm256_loadu_si256((const __m256i *)(blk + (KIND == SB_Q3K ? 32 : 16) + 32 * h));
    __m256i lo = _mm256_and_si256(_mm256_srli_epi16(qs, 2 * k), m3);
    if (KIND == SB_Q2K) return lo;
    __m256i hb = _mm256_and_si256(_mm256_srli_epi16(_mm256_loadu_si256((const __m256i *)blk), t), m1);
    return _mm256_or_si256(lo, _mm256_slli_epi16(hb, 2));
}

/* Lane 4 c + r: sum_g s[c]_g * bsum16_g of row r (s[c]: column c's 16
 * int16). */
static inline __m256i sb_bsum_dot(const __m256i s[TC], const pdl_block_q8k *x, int64_t nb, int64_t b, int nr) {
    /* half c of lo / hi holds column c's 0-7 / 8-15 */
    __m256i lo = _mm256_permute2x128_si256(s[0], s[1], 0x20);
    __m256i hi = _mm256_permute2x128_si256(s[0], s[1], 0x31);
    __m256i q[TR];
    for (int r = 0; r < TR; r++) {
        if (r < nr) {
            const int16_t *bs = x[r * nb + b].bsum16;
            q[r] = _mm256_add_epi32(
                _mm256_madd_epi16(lo, _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)bs))),
                _mm256_madd_epi16(hi, _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(bs + 8)))));
        } else {
            q[r] = _mm256_setzero_si256();
        }
    }
    return red4(q[0], q[1], q[2], q[3]);
}

static inline __attribute__((always_inline)) void sb_body(const pdl_block_q8k *x, int64_t nb, int nr,
                                                          const uint8_t *w, size_t wrb, int nc, float *out,
                                                          int64_t ldo, const int KIND) {
    const size_t bb = sb_block_bytes(KIND);
    const __m256i zero = _mm256_setzero_si256();
    /* within a 32-bit pair of scales: the low one for the lower 128 bits,
     * the high one for the upper */
    const __m256i pick = _mm256_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3, 2, 3, 2,
                                          3, 2, 3, 2, 3, 2, 3);
    __m256 facc = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        __m256i acc[TR][TC], scz[TC], mnz[TC];
        float dw[TC] = {0}, dm[TC] = {0}, dx[TR] = {0};
        for (int r = 0; r < TR; r++)
            for (int c = 0; c < TC; c++) acc[r][c] = zero;
        for (int c = 0; c < TC; c++) scz[c] = mnz[c] = zero;
        for (int c = 0; c < nc; c++) {
            const uint8_t *blk = w + c * wrb + b * bb;
            sb_scales(blk, &scz[c], &mnz[c], &dw[c], &dm[c], KIND);
            prefetch(blk + PF_ROWS * wrb, bb);
        }
        for (int r = 0; r < nr; r++) dx[r] = x[r * nb + b].d;
        for (int t = 0; t < 8; t++) {
            __m256i wq[TC], sv[TC];
            for (int c = 0; c < nc; c++) {
                wq[c] = sb_chunk(w + c * wrb + b * bb, t, KIND);
                sv[c] = _mm256_shuffle_epi8(_mm256_permutevar8x32_epi32(scz[c], _mm256_set1_epi32(t)), pick);
            }
            for (int r = 0; r < nr; r++) {
                __m256i xv = _mm256_loadu_si256((const __m256i *)(x[r * nb + b].qs + 32 * t));
                for (int c = 0; c < nc; c++)
                    acc[r][c] = _mm256_add_epi32(acc[r][c],
                                                 _mm256_madd_epi16(_mm256_maddubs_epi16(wq[c], xv), sv[c]));
            }
        }
        __m256i isum = reduce_tile(acc);
        if (KIND == SB_Q2K) {
            __m256i msum = sb_bsum_dot(mnz, x, nb, b, nr);
            facc = _mm256_fmadd_ps(outer(dw, dx), _mm256_cvtepi32_ps(isum), facc);
            facc = _mm256_fnmadd_ps(outer(dm, dx), _mm256_cvtepi32_ps(msum), facc);
        } else {
            __m256i off = sb_bsum_dot(scz, x, nb, b, nr);
            isum = _mm256_sub_epi32(isum, _mm256_slli_epi32(off, KIND == SB_Q6K ? 5 : 2));
            facc = _mm256_fmadd_ps(outer(dw, dx), _mm256_cvtepi32_ps(isum), facc);
        }
    }
    store(facc, nr, nc, out, ldo);
}

/* IQ4_XS: sub-block j (32 elements) is the low then the high nibbles of
 * the 16 code bytes at blk + 8 + 16 j, through VPSHUFB to kernels/iq4nl.h's
 * int8 values; VPMADDUBSW takes |value| times x with the value's sign (a
 * pair is at most 2 * 127 * 127, no saturation), VPMADDWD the pair sums
 * times the signed scale ls_j - 32. */
static inline __attribute__((always_inline)) void iq4xs_body(const pdl_block_q8k *x, int64_t nb, int nr,
                                                             const uint8_t *w, size_t wrb, int nc, float *out,
                                                             int64_t ldo) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), zero = _mm256_setzero_si256();
    const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)iq4nl_values));
    __m256 facc = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        __m256i acc[TR][TC];
        short sc[TC][8] = {{0}};
        float dw[TC] = {0}, dx[TR] = {0};
        for (int r = 0; r < TR; r++)
            for (int c = 0; c < TC; c++) acc[r][c] = zero;
        for (int c = 0; c < nc; c++) {
            const uint8_t *blk = w + c * wrb + b * 136;
            for (int j = 0; j < 8; j++) sc[c][j] = (short)kquant_iq4_xs_scale(blk, j);
            dw[c] = half_at(blk);
            prefetch(blk + PF_ROWS * wrb, 136);
        }
        for (int r = 0; r < nr; r++) dx[r] = x[r * nb + b].d;
        for (int j = 0; j < 8; j++) {
            __m256i wq[TC], wa[TC], sv[TC];
            for (int c = 0; c < nc; c++) {
                __m128i v = _mm_loadu_si128((const __m128i *)(w + c * wrb + b * 136 + 8 + 16 * j));
                __m256i codes = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(v, 4), v), m4);
                wq[c] = _mm256_shuffle_epi8(table, codes);
                wa[c] = _mm256_sign_epi8(wq[c], wq[c]);
                sv[c] = _mm256_set1_epi16(sc[c][j]);
            }
            for (int r = 0; r < nr; r++) {
                __m256i xv = _mm256_loadu_si256((const __m256i *)(x[r * nb + b].qs + 32 * j));
                for (int c = 0; c < nc; c++)
                    acc[r][c] = _mm256_add_epi32(
                        acc[r][c],
                        _mm256_madd_epi16(_mm256_maddubs_epi16(wa[c], _mm256_sign_epi8(xv, wq[c])), sv[c]));
            }
        }
        __m256i isum = reduce_tile(acc);
        facc = _mm256_fmadd_ps(outer(dw, dx), _mm256_cvtepi32_ps(isum), facc);
    }
    store(facc, nr, nc, out, ldo);
}

/* TQ1_0: the trits 0..2 of 32 bytes q, byte i's trit picked by its
 * multiplier m_i = 3^n: ((q_i m_i mod 256) 3) >> 8 (kquant_tq1_0_trit),
 * the low and high bytes of each 16-bit lane apart (VPMULLW keeps the low
 * byte of q m exact; VPMULHUW by 3 of that byte moved to the top is the
 * shift by 8). */
static inline __m256i tq1_trits(__m256i q, __m256i m) {
    const __m256i three = _mm256_set1_epi16(3), top = _mm256_set1_epi16((short)0xFF00);
    __m256i lo = _mm256_mulhi_epu16(_mm256_slli_epi16(_mm256_mullo_epi16(q, m), 8), three);
    __m256i hi = _mm256_mulhi_epu16(_mm256_mullo_epi16(_mm256_and_si256(q, top), _mm256_srli_epi16(m, 8)), three);
    return _mm256_or_si256(lo, _mm256_slli_epi16(hi, 8));
}

/* The multipliers of the 8 chunks of 32 TQ1_0 elements (tq_body): chunks
 * 0-4 trit n of bytes 0..31; 5 and 6 trits (0, 1) and (2, 3) of bytes
 * 32..47 in each half; 7 trit 4 of bytes 32..47, then trits 0..3 of bytes
 * 48..51 (element 240 + 4 n + j). */
static const uint8_t tq1_mult[8][32] = {
    {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1},
    {3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3},
    {9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9},
    {27, 27, 27, 27, 27, 27, 27, 27, 27, 27, 27, 27, 27, 27, 27, 27,
     27, 27, 27, 27, 27, 27, 27, 27, 27, 27, 27, 27, 27, 27, 27, 27},
    {81, 81, 81, 81, 81, 81, 81, 81, 81, 81, 81, 81, 81, 81, 81, 81,
     81, 81, 81, 81, 81, 81, 81, 81, 81, 81, 81, 81, 81, 81, 81, 81},
    {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3},
    {9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 27, 27, 27, 27, 27, 27, 27, 27, 27, 27, 27, 27, 27, 27, 27, 27},
    {81, 81, 81, 81, 81, 81, 81, 81, 81, 81, 81, 81, 81, 81, 81, 81,
     1, 1, 1, 1, 3, 3, 3, 3, 9, 9, 9, 9, 27, 27, 27, 27},
};

/* TQ2_0 / TQ1_0 (tq1): chunk t of 32 codes 0..2 (TQ2_0: bits 2 (t % 4) of
 * the 32 bytes at 32 (t / 4); TQ1_0: tq1_trits) against activations
 * 32 t ..; VPMADDUBSW pairs are at most 2 * 3 * 128 (TQ2_0's code 3),
 * summed over the 8 chunks in int16 (at most 6144, exact), VPMADDWD by ones once per
 * super-block; the row's sum of q (its bsum16s) is taken off (kquant.h),
 * then the one fused multiply-add. */
static inline __attribute__((always_inline)) void tq_body(const pdl_block_q8k *x, int64_t nb, int nr,
                                                          const uint8_t *w, size_t wrb, int nc, float *out,
                                                          int64_t ldo, const int tq1) {
    const size_t bb = tq1 ? 54 : 66;
    const __m256i m3 = _mm256_set1_epi8(0x03), ones = _mm256_set1_epi16(1), zero = _mm256_setzero_si256();
    __m256 facc = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        __m256i acc[TR][TC], src[TC][3];
        float dw[TC] = {0}, dx[TR] = {0};
        int32_t bt[TR] = {0};
        for (int r = 0; r < TR; r++)
            for (int c = 0; c < TC; c++) acc[r][c] = zero;
        for (int c = 0; c < nc; c++) {
            const uint8_t *blk = w + c * wrb + b * bb;
            if (tq1) {
                uint32_t qh;
                memcpy(&qh, blk + 48, 4);
                __m128i mid = _mm_loadu_si128((const __m128i *)(blk + 32));
                src[c][0] = _mm256_loadu_si256((const __m256i *)blk);
                src[c][1] = _mm256_set_m128i(mid, mid);
                src[c][2] = _mm256_set_m128i(_mm_set1_epi32((int)qh), mid);
            } else {
                src[c][0] = _mm256_loadu_si256((const __m256i *)blk);
                src[c][1] = _mm256_loadu_si256((const __m256i *)(blk + 32));
            }
            dw[c] = half_at(blk + bb - 2);
            prefetch(blk + PF_ROWS * wrb, bb);
        }
        for (int r = 0; r < nr; r++) {
            dx[r] = x[r * nb + b].d;
            for (int g = 0; g < 16; g++) bt[r] += x[r * nb + b].bsum16[g];
        }
        for (int t = 0; t < 8; t++) {
            __m256i wq[TC];
            for (int c = 0; c < nc; c++) {
                if (tq1)
                    wq[c] = tq1_trits(src[c][t < 5 ? 0 : t < 7 ? 1 : 2],
                                      _mm256_loadu_si256((const __m256i *)tq1_mult[t]));
                else
                    wq[c] = _mm256_and_si256(_mm256_srli_epi16(src[c][t / 4], 2 * (t % 4)), m3);
            }
            for (int r = 0; r < nr; r++) {
                __m256i xv = _mm256_loadu_si256((const __m256i *)(x[r * nb + b].qs + 32 * t));
                for (int c = 0; c < nc; c++) acc[r][c] = _mm256_add_epi16(acc[r][c], _mm256_maddubs_epi16(wq[c], xv));
            }
        }
        for (int r = 0; r < TR; r++)
            for (int c = 0; c < TC; c++) acc[r][c] = _mm256_madd_epi16(acc[r][c], ones);
        __m256i isum = _mm256_sub_epi32(reduce_tile(acc),
                                        _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)bt)));
        facc = _mm256_fmadd_ps(outer(dw, dx), _mm256_cvtepi32_ps(isum), facc);
    }
    store(facc, nr, nc, out, ldo);
}

void kquant_tile_q4_k_avx2(const pdl_block_q8k *x, int64_t nb, int rows, const uint8_t *w, size_t wrb, int cols,
                           float *out, int64_t ldo) {
    if (cols == TC && rows == TR) q4k_body(x, nb, TR, w, wrb, TC, out, ldo, 0);
    else if (cols == TC && rows == 1) q4k_body(x, nb, 1, w, wrb, TC, out, ldo, 0);
    else q4k_body(x, nb, rows, w, wrb, cols, out, ldo, 0);
}

void kquant_tile_q5_k_avx2(const pdl_block_q8k *x, int64_t nb, int rows, const uint8_t *w, size_t wrb, int cols,
                           float *out, int64_t ldo) {
    if (cols == TC && rows == TR) q4k_body(x, nb, TR, w, wrb, TC, out, ldo, 1);
    else if (cols == TC && rows == 1) q4k_body(x, nb, 1, w, wrb, TC, out, ldo, 1);
    else q4k_body(x, nb, rows, w, wrb, cols, out, ldo, 1);
}

void kquant_tile_q6_k_avx2(const pdl_block_q8k *x, int64_t nb, int rows, const uint8_t *w, size_t wrb, int cols,
                           float *out, int64_t ldo) {
    if (cols == TC && rows == TR) sb_body(x, nb, TR, w, wrb, TC, out, ldo, SB_Q6K);
    else if (cols == TC && rows == 1) sb_body(x, nb, 1, w, wrb, TC, out, ldo, SB_Q6K);
    else sb_body(x, nb, rows, w, wrb, cols, out, ldo, SB_Q6K);
}

void kquant_tile_q3_k_avx2(const pdl_block_q8k *x, int64_t nb, int rows, const uint8_t *w, size_t wrb, int cols,
                           float *out, int64_t ldo) {
    if (cols == TC && rows == TR) sb_body(x, nb, TR, w, wrb, TC, out, ldo, SB_Q3K);
    else if (cols == TC && rows == 1) sb_body(x, nb, 1, w, wrb, TC, out, ldo, SB_Q3K);
    else sb_body(x, nb, rows, w, wrb, cols, out, ldo, SB_Q3K);
}

void kquant_tile_q2_k_avx2(const pdl_block_q8k *x, int64_t nb, int rows, const uint8_t *w, size_t wrb, int cols,
                           float *out, int64_t ldo) {
    if (cols == TC && rows == TR) sb_body(x, nb, TR, w, wrb, TC, out, ldo, SB_Q2K);
    else if (cols == TC && rows == 1) sb_body(x, nb, 1, w, wrb, TC, out, ldo, SB_Q2K);
    else sb_body(x, nb, rows, w, wrb, cols, out, ldo, SB_Q2K);
}

void kquant_tile_iq4_xs_avx2(const pdl_block_q8k *x, int64_t nb, int rows, const uint8_t *w, size_t wrb, int cols,
                             float *out, int64_t ldo) {
    if (cols == TC && rows == TR) iq4xs_body(x, nb, TR, w, wrb, TC, out, ldo);
    else if (cols == TC && rows == 1) iq4xs_body(x, nb, 1, w, wrb, TC, out, ldo);
    else iq4xs_body(x, nb, rows, w, wrb, cols, out, ldo);
}
void kquant_tile_tq2_0_avx2(const pdl_block_q8k *x, int64_t nb, int rows, const uint8_t *w, size_t wrb, int cols,
                            float *out, int64_t ldo) {
    if (cols == TC && rows == TR) tq_body(x, nb, TR, w, wrb, TC, out, ldo, 0);
    else if (cols == TC && rows == 1) tq_body(x, nb, 1, w, wrb, TC, out, ldo, 0);
    else tq_body(x, nb, rows, w, wrb, cols, out, ldo, 0);
}

void kquant_tile_tq1_0_avx2(const pdl_block_q8k *x, int64_t nb, int rows, const uint8_t *w, size_t wrb, int cols,
                            float *out, int64_t ldo) {
    if (cols == TC && rows == TR) tq_body(x, nb, TR, w, wrb, TC, out, ldo, 1);
    else if (cols == TC && rows == 1) tq_body(x, nb, 1, w, wrb, TC, out, ldo, 1);
    else tq_body(x, nb, rows, w, wrb, cols, out, ldo, 1);
}
#endif
