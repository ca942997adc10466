/*
 * kquant_avx512_body.h - the AVX-512 Q2_K / Q3_K / Q4_K / Q5_K / Q6_K / IQ4_XS / TQ2_0 / TQ1_0 x Q8_K tiles,
 * included by
 * kquant_avx512.c (AVX-512BW: VPMADDUBSW + VPMADDWD + VPADDD) and by
 * kquant_avx512vnni.c (the last two fused into VPDPWSSD); KQ_VNNI says
 * which, KQ_NAME(x) names the functions. Both give the exact same int32
 * sums, so the same bits.
 *
 * Tile: 4 activation rows x 4 weight rows. Per super-block each (row,
 * column) pair gets a 16-lane int32 accumulator of scale-weighted products
 * (unsigned weights times signed activations, pair sums times the 16-bit
 * sub-block scale); the 16 accumulators are then summed across lanes into
 * one vector of the 16 pairs (element 4 c + r), exact integer arithmetic
 * in any order. The float part is kquant.h's, done for the 16 pairs at once
 * with the same single-rounding FMA as fmaf.
 */
#include <immintrin.h>
#include <string.h>

#include "kernels/iq4nl.h"
#include "kernels/kquant.h"

#define TR 4
#define TC 4

/* Weight rows are streamed from memory once per token in decode, and a
 * tile's long integer body leaves too few loads in flight for the
 * hardware prefetchers to keep up (measured: a 128 MB Q6_K matrix ran at 9
 * GB/s without, 32-36 GB/s with, on one Zen 5 core): each super-block step
 * also prefetches the same block of weight row c + 16 (four tiles ahead in
 * the stream). Prefetches never fault, past the end included. The helper
 * must be inlined: GCC deletes calls to a function that only prefetches. */
#define KQ_PF_ROWS (4 * TC)
static inline __attribute__((always_inline)) void KQ_NAME(prefetch)(const uint8_t *p, size_t bytes) {
    for (size_t o = 0; o < bytes; o += 64) _mm_prefetch((const char *)p + o, _MM_HINT_T0);
}

static inline __m512i KQ_NAME(step)(__m512i acc, __m512i w_u8, __m512i x_s8, __m512i sc16) {
#if KQ_VNNI
    return _mm512_dpwssd_epi32(acc, _mm512_maddubs_epi16(w_u8, x_s8), sc16);
#else
    return _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(w_u8, x_s8), sc16));
#endif
}

/* Four vectors -> one whose 128-bit chunk k holds, in lane i, the sum of
 * chunk k's four lanes of vector i. */
static inline __m512i KQ_NAME(red4)(__m512i a0, __m512i a1, __m512i a2, __m512i a3) {
    __m512i t01 = _mm512_add_epi32(_mm512_unpacklo_epi32(a0, a1), _mm512_unpackhi_epi32(a0, a1));
    __m512i t23 = _mm512_add_epi32(_mm512_unpacklo_epi32(a2, a3), _mm512_unpackhi_epi32(a2, a3));
    return _mm512_add_epi32(_mm512_unpacklo_epi64(t01, t23), _mm512_unpackhi_epi64(t01, t23));
}

/* acc[r][c] (16 lanes each) -> lane 4 c + r: the sum of acc[r][c]. */
static inline __m512i KQ_NAME(reduce_tile)(__m512i acc[TR][TC]) {
    __m512i v[TC];
    for (int c = 0; c < TC; c++) v[c] = KQ_NAME(red4)(acc[0][c], acc[1][c], acc[2][c], acc[3][c]);
    /* v[c] chunk k lane r: partial sum of (r, c); add the four chunks */
    __m512i x01 = _mm512_add_epi32(_mm512_shuffle_i32x4(v[0], v[1], _MM_SHUFFLE(1, 0, 1, 0)),
                                   _mm512_shuffle_i32x4(v[0], v[1], _MM_SHUFFLE(3, 2, 3, 2)));
    __m512i x23 = _mm512_add_epi32(_mm512_shuffle_i32x4(v[2], v[3], _MM_SHUFFLE(1, 0, 1, 0)),
                                   _mm512_shuffle_i32x4(v[2], v[3], _MM_SHUFFLE(3, 2, 3, 2)));
    return _mm512_add_epi32(_mm512_shuffle_i32x4(x01, x23, _MM_SHUFFLE(2, 0, 2, 0)),
                            _mm512_shuffle_i32x4(x01, x23, _MM_SHUFFLE(3, 1, 3, 1)));
}

static inline float KQ_NAME(half)(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

/* Lane 4 c + r of the result: a[c] * b[r] as the tile's float factor. */
static inline __m512 KQ_NAME(outer)(const float a[TC], const float b[TR]) {
    __m512 av = _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3),
                                      _mm512_castps128_ps512(_mm_loadu_ps(a)));
    __m512 bv = _mm512_broadcast_f32x4(_mm_loadu_ps(b));
    return _mm512_mul_ps(av, bv);
}

static inline void KQ_NAME(store)(__m512 acc, int nr, int nc, float *out, int64_t ldo) {
    float t[TR * TC];
    _mm512_storeu_ps(t, acc);
    for (int r = 0; r < nr; r++)
        for (int c = 0; c < nc; c++) out[r * ldo + c] = t[4 * c + r];
}

/* 16-bit lane i of the result: (scale index base + i / span) */
#define KQ_IDX(a, b) \
    _mm512_setr_epi32((a) | (a) << 16, (a) | (a) << 16, (a) | (a) << 16, (a) | (a) << 16, (a) | (a) << 16,       \
                      (a) | (a) << 16, (a) | (a) << 16, (a) | (a) << 16, (b) | (b) << 16, (b) | (b) << 16,       \
                      (b) | (b) << 16, (b) | (b) << 16, (b) | (b) << 16, (b) | (b) << 16, (b) | (b) << 16,       \
                      (b) | (b) << 16)

/* Q4_K: a 64-byte slice g of the nibbles holds sub-blocks 4g (low nibbles
 * of bytes 0-31), 4g+1 (their high nibbles), 4g+2 and 4g+3 (bytes 32-63);
 * so a zmm of low nibbles pairs sub-blocks (4g, 4g+2), of high nibbles
 * (4g+1, 4g+3), and the activations are loaded in the same pairs.
 * Q5_K (q5): the same with each 256-bit half's fifth bits from the 32 qh
 * bytes, bit j for sub-block j (values 0..31: a VPMADDUBSW pair is at
 * most 2 * 31 * 127, no saturation). */
static inline __attribute__((always_inline)) void KQ_NAME(q4k_body)(const pdl_block_q8k *x, int64_t nb, int nr,
                                                                    const uint8_t *w, size_t wrb, int nc,
                                                                    float *out, int64_t ldo, const int q5) {
    const size_t bb = q5 ? 176 : 144, qs_at = q5 ? 48 : 16;
    const __m512i m1 = _mm512_set1_epi8(0x01);
    const __m512i m4 = _mm512_set1_epi8(0x0F), zero = _mm512_setzero_si512();
    const __m512i idx[4] = {KQ_IDX(0, 2), KQ_IDX(1, 3), KQ_IDX(4, 6), KQ_IDX(5, 7)};
    __m512 facc = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        __m512i acc[TR][TC], scz[TC];
        __m128i mins[TC];
        float dw[TC] = {0}, dm[TC] = {0}, dx[TR] = {0};
        for (int r = 0; r < TR; r++)
            for (int c = 0; c < TC; c++) acc[r][c] = zero;
        for (int c = 0; c < TC; c++) {
            scz[c] = zero;
            mins[c] = _mm_setzero_si128();
        }
        for (int c = 0; c < nc; c++) {
            const uint8_t *blk = w + c * wrb + b * bb;
            uint64_t sc, mn;
            kquant_q4_k_scales_mins(blk, &sc, &mn);
            scz[c] = _mm512_castsi128_si512(_mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)sc)));
            mins[c] = _mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)mn));
            dw[c] = KQ_NAME(half)(blk);
            dm[c] = KQ_NAME(half)(blk + 2);
            KQ_NAME(prefetch)(blk + KQ_PF_ROWS * wrb, bb);
        }
        for (int r = 0; r < nr; r++) dx[r] = x[r * nb + b].d;
        for (int s = 0; s < 4; s++) { /* slice g = s / 2, nibble s % 2 */
            int g = s / 2, hi = s % 2;
            __m512i wq[TC], sv[TC];
            for (int c = 0; c < nc; c++) {
                __m512i v = _mm512_loadu_si512(w + c * wrb + b * bb + qs_at + 64 * g);
                wq[c] = _mm512_and_si512(hi ? _mm512_srli_epi16(v, 4) : v, m4);
                if (q5) { /* halves: sub-blocks 4g + hi and 4g + 2 + hi */
                    __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(w + c * wrb + b * bb + 16)));
                    __m512i sh = _mm512_inserti64x4(_mm512_set1_epi16((short)(4 * g + hi)),
                                                    _mm256_set1_epi16((short)(4 * g + 2 + hi)), 1);
                    __m512i bit = _mm512_and_si512(_mm512_srlv_epi16(qh, sh), m1);
                    wq[c] = _mm512_or_si512(wq[c], _mm512_slli_epi16(bit, 4));
                }
                sv[c] = _mm512_permutexvar_epi16(idx[s], scz[c]);
            }
            for (int r = 0; r < nr; r++) {
                const int8_t *xq = x[r * nb + b].qs + 128 * g + 32 * hi;
                __m512i xv = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)xq)),
                                                _mm256_loadu_si256((const __m256i *)(xq + 64)), 1);
                for (int c = 0; c < nc; c++) acc[r][c] = KQ_NAME(step)(acc[r][c], wq[c], xv, sv[c]);
            }
        }
        __m512i isum = KQ_NAME(reduce_tile)(acc);
        /* msum: chunk c of M holds column c's 8 mins, broadcast row r's 8
         * sub-block sums against it */
        __m512i mz = _mm512_inserti32x4(_mm512_inserti32x4(_mm512_inserti32x4(_mm512_castsi128_si512(mins[0]),
                                                                              mins[1], 1), mins[2], 2), mins[3], 3);
        __m512i p[TR];
        for (int r = 0; r < TR; r++)
            p[r] = r < nr ? _mm512_madd_epi16(mz, _mm512_broadcast_i32x4(_mm_loadu_si128(
                                                      (const __m128i *)x[r * nb + b].bsum32)))
                          : zero;
        __m512i msum = KQ_NAME(red4)(p[0], p[1], p[2], p[3]);
        facc = _mm512_fmadd_ps(KQ_NAME(outer)(dw, dx), _mm512_cvtepi32_ps(isum), facc);
        facc = _mm512_fnmadd_ps(KQ_NAME(outer)(dm, dx), _mm512_cvtepi32_ps(msum), facc);
    }
    KQ_NAME(store)(facc, nr, nc, out, ldo);
}

/* Q6_K, Q3_K and Q2_K (KIND; sb_*: the sixteen-scale super-blocks): a
 * super-block's 16 groups of 16 elements each have a scale of their own; a
 * zmm holds 64 consecutive elements 128 h + 64 p + (0..63) (s = 2 h + p),
 * its 16-element groups using scales 4 s + (0..3); one term over the
 * groups' bsum16 ends the block.
 * Q6_K: the low (p = 0) or high (p = 1) nibbles of ql[64 h .. 64 h + 63]
 * and bit pairs 4p, 4p + 2 of qh[32 h .. 32 h + 31] (one per 256-bit
 * half). The -32 offset is taken off at the end: isum = sum sc_g * sum q x
 * - 32 sum sc_g * bsum16_g.
 * Q3_K: quarters k = 2p (low 256-bit half) and 2p + 1 (high half): bits 2k
 * of qs[32 h .. 32 h + 31] and bit 4 h + k of the 32 hmask bytes, the
 * unsigned value q + 4 (0..7: a VPMADDUBSW pair is at most 2 * 7 * 127);
 * the scales minus 32, signed. The +4 is taken off at the end: isum -= 4
 * sum_g sc_g * bsum16_g.
 * Q2_K: Q3_K's walk over qs without the hmask bit (values 0..3); its 16
 * groups use the low nibbles of the 16 scale bytes (unsigned), and msum
 * is the high nibbles (mins) times bsum16, then kquant.h's two fused
 * multiply-adds. */
enum { KQ_SB_Q6K, KQ_SB_Q3K, KQ_SB_Q2K };

/* A block's 16 scales (and Q2_K's mins) as int16, its d (and Q2_K's dmin). */
static inline __attribute__((always_inline)) void KQ_NAME(sb_scales)(const uint8_t *blk, __m512i *scz, __m512i *mnz,
                                                                     float *dw, float *dm, const int KIND) {
    if (KIND == KQ_SB_Q6K) {
        *scz = _mm512_castsi256_si512(_mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(blk + 192))));
        *dw = KQ_NAME(half)(blk + 208);
    } else if (KIND == KQ_SB_Q3K) {
        int8_t sc[16];
        kquant_q3_k_scales(blk + 96, sc);
        *scz = _mm512_castsi256_si512(_mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)sc)));
        *dw = KQ_NAME(half)(blk + 108);
    } else {
        __m128i sb = _mm_loadu_si128((const __m128i *)blk);
        *scz = _mm512_castsi256_si512(_mm256_cvtepu8_epi16(_mm_and_si128(sb, _mm_set1_epi8(0x0F))));
        *mnz = _mm512_castsi256_si512(
            _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sb, 4), _mm_set1_epi8(0x0F))));
        *dw = KQ_NAME(half)(blk + 80);
        *dm = KQ_NAME(half)(blk + 82);
    }
}

/* The 64 unsigned values of zmm s = 2 h + p. */
static inline __attribute__((always_inline)) __m512i KQ_NAME(sb_chunk)(const uint8_t *blk, int s, const int KIND) {
    const __m512i m1 = _mm512_set1_epi8(0x01), m3 = _mm512_set1_epi8(0x03), m4 = _mm512_set1_epi8(0x0F);
    /* bit pairs 4p and 4p + 2 (Q6_K's qh; Q3_K / Q2_K's quarters 2p, 2p + 1 of qs) */
    const __m512i pair_shift[2] = {_mm512_inserti64x4(_mm512_set1_epi16(0), _mm256_set1_epi16(2), 1),
                                   _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(6), 1)};
    int h = s / 2, p = s % 2;
    if (KIND == KQ_SB_Q6K) {
        __m512i ql = _mm512_loadu_si512(blk + 64 * h);
        __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(blk + 128 + 32 * h)));
        __m512i lo = _mm512_and_si512(p ? _mm512_srli_epi16(ql, 4) : ql, m4);
        __m512i top = _mm512_and_si512(_mm512_srlv_epi16(qh, pair_shift[p]), m3);
        return _mm512_or_si512(lo, _mm512_slli_epi16(top, 4));
    }
    __m512i qs = _mm512_broadcast_i64x4(
        _mm256_loadu_si256((const __m256i *)(blk + (KIND == KQ_SB_Q3K ? 32 : 16) + 32 * h)));
    __m512i lo = _mm512_and_si512(_mm512_srlv_epi16(qs, pair_shift[p]), m3);
    if (KIND == KQ_SB_Q2K) return lo;
    const __m512i hshift = _mm512_inserti64x4(_mm512_set1_epi16((short)(4 * h + 2 * p)),
                                              _mm256_set1_epi16((short)(4 * h + 2 * p + 1)), 1);
    __m512i hm = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)blk));
    __m512i hb = _mm512_and_si512(_mm512_srlv_epi16(hm, hshift), m1);
    return _mm512_or_si512(lo, _mm512_slli_epi16(hb, 2));
}

/* Lane 4 c + r: sum_g s[c]_g * bsum16_g of row r (s[c]: column c's 16
 * int16). */
static inline __m512i KQ_NAME(sb_bsum_dot)(const __m512i s[TC], const pdl_block_q8k *x, int64_t nb, int64_t b,
                                           int nr) {
    /* chunk c of lo / hi holds column c's 0-7 / 8-15 */
    __m128i sl[TC], sh[TC];
    for (int c = 0; c < TC; c++) {
        sl[c] = _mm512_castsi512_si128(s[c]);
        sh[c] = _mm512_extracti32x4_epi32(s[c], 1);
    }
    __m512i lo = _mm512_inserti32x4(
        _mm512_inserti32x4(_mm512_inserti32x4(_mm512_castsi128_si512(sl[0]), sl[1], 1), sl[2], 2), sl[3], 3);
    __m512i hi = _mm512_inserti32x4(
        _mm512_inserti32x4(_mm512_inserti32x4(_mm512_castsi128_si512(sh[0]), sh[1], 1), sh[2], 2), sh[3], 3);
    __m512i q[TR];
    for (int r = 0; r < TR; r++) {
        if (r < nr) {
            const int16_t *bs = x[r * nb + b].bsum16;
            q[r] = _mm512_add_epi32(
                _mm512_madd_epi16(lo, _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)bs))),
                _mm512_madd_epi16(hi, _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(bs + 8)))));
        } else {
            q[r] = _mm512_setzero_si512();
        }
    }
    return KQ_NAME(red4)(q[0], q[1], q[2], q[3]);
}

static inline __attribute__((always_inline)) void KQ_NAME(sb_body)(const pdl_block_q8k *x, int64_t nb, int nr,
                                                                   const uint8_t *w, size_t wrb, int nc,
                                                                   float *out, int64_t ldo, const int KIND) {
    const size_t bb = KIND == KQ_SB_Q6K ? 210 : KIND == KQ_SB_Q3K ? 110 : 84;
    const __m512i zero = _mm512_setzero_si512();
    const __m512i idx[4] = {
        _mm512_setr_epi32(0, 0, 0, 0, 0x10001, 0x10001, 0x10001, 0x10001, 0x20002, 0x20002, 0x20002, 0x20002,
                          0x30003, 0x30003, 0x30003, 0x30003),
        _mm512_setr_epi32(0x40004, 0x40004, 0x40004, 0x40004, 0x50005, 0x50005, 0x50005, 0x50005, 0x60006,
                          0x60006, 0x60006, 0x60006, 0x70007, 0x70007, 0x70007, 0x70007),
        _mm512_setr_epi32(0x80008, 0x80008, 0x80008, 0x80008, 0x90009, 0x90009, 0x90009, 0x90009, 0xa000a,
                          0xa000a, 0xa000a, 0xa000a, 0xb000b, 0xb000b, 0xb000b, 0xb000b),
        _mm512_setr_epi32(0xc000c, 0xc000c, 0xc000c, 0xc000c, 0xd000d, 0xd000d, 0xd000d, 0xd000d, 0xe000e,
                          0xe000e, 0xe000e, 0xe000e, 0xf000f, 0xf000f, 0xf000f, 0xf000f)};
    __m512 facc = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        __m512i acc[TR][TC], scz[TC], mnz[TC];
        float dw[TC] = {0}, dm[TC] = {0}, dx[TR] = {0};
        for (int r = 0; r < TR; r++)
            for (int c = 0; c < TC; c++) acc[r][c] = zero;
        for (int c = 0; c < TC; c++) scz[c] = mnz[c] = zero;
        for (int c = 0; c < nc; c++) {
            const uint8_t *blk = w + c * wrb + b * bb;
            KQ_NAME(sb_scales)(blk, &scz[c], &mnz[c], &dw[c], &dm[c], KIND);
            KQ_NAME(prefetch)(blk + KQ_PF_ROWS * wrb, bb);
        }
        for (int r = 0; r < nr; r++) dx[r] = x[r * nb + b].d;
        for (int s = 0; s < 4; s++) {
            __m512i wq[TC], sv[TC];
            for (int c = 0; c < nc; c++) {
                wq[c] = KQ_NAME(sb_chunk)(w + c * wrb + b * bb, s, KIND);
                sv[c] = _mm512_permutexvar_epi16(idx[s], scz[c]);
            }
            for (int r = 0; r < nr; r++) {
                __m512i xv = _mm512_loadu_si512(x[r * nb + b].qs + 64 * s);
                for (int c = 0; c < nc; c++) acc[r][c] = KQ_NAME(step)(acc[r][c], wq[c], xv, sv[c]);
            }
        }
        __m512i isum = KQ_NAME(reduce_tile)(acc);
        if (KIND == KQ_SB_Q2K) {
            __m512i msum = KQ_NAME(sb_bsum_dot)(mnz, x, nb, b, nr);
            facc = _mm512_fmadd_ps(KQ_NAME(outer)(dw, dx), _mm512_cvtepi32_ps(isum), facc);
            facc = _mm512_fnmadd_ps(KQ_NAME(outer)(dm, dx), _mm512_cvtepi32_ps(msum), facc);
        } else {
            __m512i off = KQ_NAME(sb_bsum_dot)(scz, x, nb, b, nr);
            isum = _mm512_sub_epi32(isum, _mm512_slli_epi32(off, KIND == KQ_SB_Q6K ? 5 : 2));
            facc = _mm512_fmadd_ps(KQ_NAME(outer)(dw, dx), _mm512_cvtepi32_ps(isum), facc);
        }
    }
    KQ_NAME(store)(facc, nr, nc, out, ldo);
}

/* IQ4_XS: a zmm holds sub-blocks 2g and 2g + 1 (64 consecutive elements):
 * the 32 code bytes at blk + 8 + 32 g as 128-bit chunks (bytes 0-15 low
 * nibbles, bytes 0-15 high, bytes 16-31 low, bytes 16-31 high), through
 * VPSHUFB to kernels/iq4nl.h's int8 values; VPMADDUBSW takes |value| times
 * x negated where the value is negative (a pair is at most 2 * 127 * 127,
 * no saturation), then the pair sums times the signed scale ls_j - 32 (the
 * low 256 bits sub-block 2g's, the high 2g + 1's). */
static inline __attribute__((always_inline)) void KQ_NAME(iq4xs_body)(const pdl_block_q8k *x, int64_t nb, int nr,
                                                                      const uint8_t *w, size_t wrb, int nc,
                                                                      float *out, int64_t ldo) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), zero = _mm512_setzero_si512();
    const __m512i table = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)iq4nl_values));
    const __m512i dup = _mm512_setr_epi64(0, 1, 0, 1, 2, 3, 2, 3);
    const __m512i nib = _mm512_setr_epi64(0, 0, 0x0004000400040004LL, 0x0004000400040004LL, 0, 0,
                                          0x0004000400040004LL, 0x0004000400040004LL);
    __m512 facc = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        __m512i acc[TR][TC];
        short sc[TC][8] = {{0}};
        float dw[TC] = {0}, dx[TR] = {0};
        for (int r = 0; r < TR; r++)
            for (int c = 0; c < TC; c++) acc[r][c] = zero;
        for (int c = 0; c < nc; c++) {
            const uint8_t *blk = w + c * wrb + b * 136;
            for (int j = 0; j < 8; j++) sc[c][j] = (short)kquant_iq4_xs_scale(blk, j);
            dw[c] = KQ_NAME(half)(blk);
            KQ_NAME(prefetch)(blk + KQ_PF_ROWS * wrb, 136);
        }
        for (int r = 0; r < nr; r++) dx[r] = x[r * nb + b].d;
        for (int g = 0; g < 4; g++) {
            __m512i wa[TC], sv[TC];
            __mmask64 sgn[TC];
            for (int c = 0; c < nc; c++) {
                __m256i v = _mm256_loadu_si256((const __m256i *)(w + c * wrb + b * 136 + 8 + 32 * g));
                __m512i codes = _mm512_and_si512(
                    _mm512_srlv_epi16(_mm512_permutexvar_epi64(dup, _mm512_castsi256_si512(v)), nib), m4);
                __m512i wq = _mm512_shuffle_epi8(table, codes);
                wa[c] = _mm512_abs_epi8(wq);
                sgn[c] = _mm512_movepi8_mask(wq);
                sv[c] = _mm512_inserti64x4(_mm512_set1_epi16(sc[c][2 * g]), _mm256_set1_epi16(sc[c][2 * g + 1]),
                                           1);
            }
            for (int r = 0; r < nr; r++) {
                __m512i xv = _mm512_loadu_si512(x[r * nb + b].qs + 64 * g);
                for (int c = 0; c < nc; c++)
                    acc[r][c] = KQ_NAME(step)(acc[r][c], wa[c], _mm512_mask_sub_epi8(xv, sgn[c], zero, xv), sv[c]);
            }
        }
        __m512i isum = KQ_NAME(reduce_tile)(acc);
        facc = _mm512_fmadd_ps(KQ_NAME(outer)(dw, dx), _mm512_cvtepi32_ps(isum), facc);
    }
    KQ_NAME(store)(facc, nr, nc, out, ldo);
}

/* Constant shapes for the full tile and single-row decode, so the
 * accumulators stay in registers; the sequence per element is the same. */
static void KQ_NAME(tile_q4_k)(const pdl_block_q8k *x, int64_t nb, int rows, const uint8_t *w, size_t wrb,
                               int cols, float *out, int64_t ldo) {
    if (cols == TC && rows == TR) KQ_NAME(q4k_body)(x, nb, TR, w, wrb, TC, out, ldo, 0);
    else if (cols == TC && rows == 1) KQ_NAME(q4k_body)(x, nb, 1, w, wrb, TC, out, ldo, 0);
    else KQ_NAME(q4k_body)(x, nb, rows, w, wrb, cols, out, ldo, 0);
}

static void KQ_NAME(tile_q5_k)(const pdl_block_q8k *x, int64_t nb, int rows, const uint8_t *w, size_t wrb,
                               int cols, float *out, int64_t ldo) {
    if (cols == TC && rows == TR) KQ_NAME(q4k_body)(x, nb, TR, w, wrb, TC, out, ldo, 1);
    else if (cols == TC && rows == 1) KQ_NAME(q4k_body)(x, nb, 1, w, wrb, TC, out, ldo, 1);
    else KQ_NAME(q4k_body)(x, nb, rows, w, wrb, cols, out, ldo, 1);
}

static void KQ_NAME(tile_q6_k)(const pdl_block_q8k *x, int64_t nb, int rows, const uint8_t *w, size_t wrb,
                               int cols, float *out, int64_t ldo) {
    if (cols == TC && rows == TR) KQ_NAME(sb_body)(x, nb, TR, w, wrb, TC, out, ldo, KQ_SB_Q6K);
    else if (cols == TC && rows == 1) KQ_NAME(sb_body)(x, nb, 1, w, wrb, TC, out, ldo, KQ_SB_Q6K);
    else KQ_NAME(sb_body)(x, nb, rows, w, wrb, cols, out, ldo, KQ_SB_Q6K);
}

static void KQ_NAME(tile_q3_k)(const pdl_block_q8k *x, int64_t nb, int rows, const uint8_t *w, size_t wrb,
                               int cols, float *out, int64_t ldo) {
    if (cols == TC && rows == TR) KQ_NAME(sb_body)(x, nb, TR, w, wrb, TC, out, ldo, KQ_SB_Q3K);
    else if (cols == TC && rows == 1) KQ_NAME(sb_body)(x, nb, 1, w, wrb, TC, out, ldo, KQ_SB_Q3K);
    else KQ_NAME(sb_body)(x, nb, rows, w, wrb, cols, out, ldo, KQ_SB_Q3K);
}

static void KQ_NAME(tile_q2_k)(const pdl_block_q8k *x, int64_t nb, int rows, const uint8_t *w, size_t wrb,
                               int cols, float *out, int64_t ldo) {
    if (cols == TC && rows == TR) KQ_NAME(sb_body)(x, nb, TR, w, wrb, TC, out, ldo, KQ_SB_Q2K);
    else if (cols == TC && rows == 1) KQ_NAME(sb_body)(x, nb, 1, w, wrb, TC, out, ldo, KQ_SB_Q2K);
    else KQ_NAME(sb_body)(x, nb, rows, w, wrb, cols, out, ldo, KQ_SB_Q2K);
}

static void KQ_NAME(tile_iq4_xs)(const pdl_block_q8k *x, int64_t nb, int rows, const uint8_t *w, size_t wrb,
                                 int cols, float *out, int64_t ldo) {
    if (cols == TC && rows == TR) KQ_NAME(iq4xs_body)(x, nb, TR, w, wrb, TC, out, ldo);
    else if (cols == TC && rows == 1) KQ_NAME(iq4xs_body)(x, nb, 1, w, wrb, TC, out, ldo);
    else KQ_NAME(iq4xs_body)(x, nb, rows, w, wrb, cols, out, ldo);
}

/* TQ1_0: the trits 0..2 of 64 bytes q, byte i's trit picked by its
 * multiplier m_i = 3^n: ((q_i m_i mod 256) 3) >> 8 (kquant_tq1_0_trit),
 * the low and high bytes of each 16-bit lane apart (VPMULLW keeps the low
 * byte of q m exact; VPMULHUW by 3 of that byte moved to the top is the
 * shift by 8). */
static inline __m512i KQ_NAME(tq1_trits)(__m512i q, __m512i m) {
    const __m512i three = _mm512_set1_epi16(3), top = _mm512_set1_epi16((short)0xFF00);
    __m512i lo = _mm512_mulhi_epu16(_mm512_slli_epi16(_mm512_mullo_epi16(q, m), 8), three);
    __m512i hi = _mm512_mulhi_epu16(_mm512_mullo_epi16(_mm512_and_si512(q, top), _mm512_srli_epi16(m, 8)), three);
    return _mm512_or_si512(lo, _mm512_slli_epi16(hi, 8));
}

/* The multipliers of the 4 chunks of 64 TQ1_0 elements (tq_body): chunks
 * 0 and 1 trits (0, 1) and (2, 3) of bytes 0..31 in each half; 2 trit 4 of
 * bytes 0..31, then trits 0 and 1 of bytes 32..47; 3 trits 2, 3 and 4 of
 * bytes 32..47, then trits 0..3 of bytes 48..51 (element 240 + 4 n + j). */
static const uint8_t KQ_NAME(tq1_mult)[4][64] = {
    {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
     1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
     3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3,
     3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3},
    {9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9,
     9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9,
     27, 27, 27, 27, 27, 27, 27, 27, 27, 27, 27, 27, 27, 27, 27, 27,
     27, 27, 27, 27, 27, 27, 27, 27, 27, 27, 27, 27, 27, 27, 27, 27},
    {81, 81, 81, 81, 81, 81, 81, 81, 81, 81, 81, 81, 81, 81, 81, 81,
     81, 81, 81, 81, 81, 81, 81, 81, 81, 81, 81, 81, 81, 81, 81, 81,
     1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
     3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3},
    {9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9,
     27, 27, 27, 27, 27, 27, 27, 27, 27, 27, 27, 27, 27, 27, 27, 27,
     81, 81, 81, 81, 81, 81, 81, 81, 81, 81, 81, 81, 81, 81, 81, 81,
     1, 1, 1, 1, 3, 3, 3, 3, 9, 9, 9, 9, 27, 27, 27, 27}
};

/* TQ2_0 / TQ1_0 (tq1): chunk s of 64 codes 0..2 (TQ2_0: Q2_K's walk, bits
 * 2 (2 (s % 2)) and 2 (2 (s % 2) + 1) of the 32 bytes at 32 (s / 2) in
 * the two halves; TQ1_0: tq1_trits of the bytes each half's multipliers
 * read) against activations 64 s ..; codes times activations summed by
 * VPDPBUSD (VNNI), or by VPMADDUBSW pairs (at most 2 * 3 * 128: TQ2_0's
 * code 3) summed in int16 over the 4 chunks (at most 3072, exact) and VPMADDWD by ones once
 * per super-block; the row's sum of q (its bsum16s) is taken off
 * (kquant.h), then the one fused multiply-add. */
static inline __attribute__((always_inline)) void KQ_NAME(tq_body)(const pdl_block_q8k *x, int64_t nb, int nr,
                                                                   const uint8_t *w, size_t wrb, int nc,
                                                                   float *out, int64_t ldo, const int tq1) {
    const size_t bb = tq1 ? 54 : 66;
    const __m512i m3 = _mm512_set1_epi8(0x03), zero = _mm512_setzero_si512();
    const __m512i qshift[2] = {_mm512_inserti64x4(_mm512_set1_epi16(0), _mm256_set1_epi16(2), 1),
                               _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(6), 1)};
    __m512 facc = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        __m512i acc[TR][TC], src[TC][3];
        float dw[TC] = {0}, dx[TR] = {0};
        int32_t bt[TR] = {0};
        for (int r = 0; r < TR; r++)
            for (int c = 0; c < TC; c++) acc[r][c] = zero;
        for (int c = 0; c < nc; c++) {
            const uint8_t *blk = w + c * wrb + b * bb;
            if (tq1) {
                uint32_t qh;
                memcpy(&qh, blk + 48, 4);
                __m256i lo = _mm256_loadu_si256((const __m256i *)blk);
                __m128i mid = _mm_loadu_si128((const __m128i *)(blk + 32));
                src[c][0] = _mm512_broadcast_i64x4(lo);
                src[c][1] = _mm512_inserti64x4(_mm512_castsi256_si512(lo), _mm256_set_m128i(mid, mid), 1);
                src[c][2] = _mm512_inserti32x4(_mm512_broadcast_i32x4(mid), _mm_set1_epi32((int)qh), 3);
            } else {
                src[c][0] = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)blk));
                src[c][1] = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(blk + 32)));
            }
            dw[c] = KQ_NAME(half)(blk + bb - 2);
            KQ_NAME(prefetch)(blk + KQ_PF_ROWS * wrb, bb);
        }
        for (int r = 0; r < nr; r++) {
            dx[r] = x[r * nb + b].d;
            for (int g = 0; g < 16; g++) bt[r] += x[r * nb + b].bsum16[g];
        }
        for (int s = 0; s < 4; s++) {
            __m512i wq[TC];
            for (int c = 0; c < nc; c++) {
                if (tq1)
                    wq[c] = KQ_NAME(tq1_trits)(src[c][s < 2 ? 0 : s - 1],
                                               _mm512_loadu_si512(KQ_NAME(tq1_mult)[s]));
                else
                    wq[c] = _mm512_and_si512(_mm512_srlv_epi16(src[c][s / 2], qshift[s % 2]), m3);
            }
            for (int r = 0; r < nr; r++) {
                __m512i xv = _mm512_loadu_si512(x[r * nb + b].qs + 64 * s);
                for (int c = 0; c < nc; c++)
#if KQ_VNNI
                    acc[r][c] = _mm512_dpbusd_epi32(acc[r][c], wq[c], xv);
#else
                    acc[r][c] = _mm512_add_epi16(acc[r][c], _mm512_maddubs_epi16(wq[c], xv));
#endif
            }
        }
#if !KQ_VNNI
        for (int r = 0; r < TR; r++)
            for (int c = 0; c < TC; c++) acc[r][c] = _mm512_madd_epi16(acc[r][c], _mm512_set1_epi16(1));
#endif
        __m512i isum = _mm512_sub_epi32(KQ_NAME(reduce_tile)(acc),
                                        _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)bt)));
        facc = _mm512_fmadd_ps(KQ_NAME(outer)(dw, dx), _mm512_cvtepi32_ps(isum), facc);
    }
    KQ_NAME(store)(facc, nr, nc, out, ldo);
}

static void KQ_NAME(tile_tq2_0)(const pdl_block_q8k *x, int64_t nb, int rows, const uint8_t *w, size_t wrb,
                                int cols, float *out, int64_t ldo) {
    if (cols == TC && rows == TR) KQ_NAME(tq_body)(x, nb, TR, w, wrb, TC, out, ldo, 0);
    else if (cols == TC && rows == 1) KQ_NAME(tq_body)(x, nb, 1, w, wrb, TC, out, ldo, 0);
    else KQ_NAME(tq_body)(x, nb, rows, w, wrb, cols, out, ldo, 0);
}

static void KQ_NAME(tile_tq1_0)(const pdl_block_q8k *x, int64_t nb, int rows, const uint8_t *w, size_t wrb,
                                int cols, float *out, int64_t ldo) {
    if (cols == TC && rows == TR) KQ_NAME(tq_body)(x, nb, TR, w, wrb, TC, out, ldo, 1);
    else if (cols == TC && rows == 1) KQ_NAME(tq_body)(x, nb, 1, w, wrb, TC, out, ldo, 1);
    else KQ_NAME(tq_body)(x, nb, rows, w, wrb, cols, out, ldo, 1);
}
