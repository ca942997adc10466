/*
 * matmul_avx512.c - AVX-512 tiles for F32, F16 (F16C), BF16 (exact widening),
 * Q8_0 and Q4_0 weights with F32 activations. Q8_0 and Q4_0 weights take
 * Q8_0-quantized activations. Compiled with AVX-512 flags (see
 * CMakeLists.txt); called only when the CPU has them.
 *
 * Tile: 4 rows x 4 weight rows = 16 zmm accumulators, each a 16-lane
 * partial sum over k; loads per 16-wide step: 4 activation + 4 weight
 * vectors for 16 FMAs.
 */
#include "kernels/matmul_table.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#include <stdbool.h>
#include <string.h>


#define TR 4
#define TC 4

/* Weight rows are streamed from memory once per token in decode, and the
 * hardware prefetchers alone keep too few lines in flight for the four
 * interleaved row streams of a tile (as for the Q4_K / Q6_K tiles, see
 * kquant_avx512_body.h): every 64 bytes of a weight row also prefetch the
 * same bytes of the row PF_ROWS ahead (four tiles ahead in the stream).
 * Tiles of fewer than TR rows do (decode), and full tiles when the whole
 * matmul streams its weights once (the tile's `stream` argument: batched decode); a
 * prompt passes each weight tile once per TR rows from cache, and the extra
 * instructions would cost its full tiles ~3% (pp512), so there the body is
 * built without them. Prefetches never fault, past the end included, and
 * change no arithmetic. The helper must be inlined: GCC deletes calls to a
 * function that only prefetches. */
#define PF_ROWS (4 * TC)
static inline __attribute__((always_inline)) void prefetch_line(const uint8_t *p) {
    _mm_prefetch((const char *)p, _MM_HINT_T0);
}

/* 16 weights from element k of a row, widened to F32. */
static inline __m512 load_f32(const uint8_t *w, int64_t k) { return _mm512_loadu_ps((const float *)w + k); }
static inline __m512 load_f32_m(const uint8_t *w, int64_t k, __mmask16 m) {
    return _mm512_maskz_loadu_ps(m, (const float *)w + k);
}
static inline __m512 load_f16(const uint8_t *w, int64_t k) {
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)w + k)));
}
static inline __m512 load_f16_m(const uint8_t *w, int64_t k, __mmask16 m) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, (const uint16_t *)w + k));
}
static inline __m512 widen_bf16(__m256i v) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(v), 16));
}
static inline __m512 load_bf16(const uint8_t *w, int64_t k) {
    return widen_bf16(_mm256_loadu_si256((const __m256i *)((const uint16_t *)w + k)));
}
static inline __m512 load_bf16_m(const uint8_t *w, int64_t k, __mmask16 m) {
    return widen_bf16(_mm256_maskz_loadu_epi16(m, (const uint16_t *)w + k));
}

/* The tile body for nr <= TR rows and nc <= TC weight rows, inlined with
 * constant sizes for the common shapes (full tiles; single-row decode) so
 * the accumulators stay in registers. Every element's sequence is the same
 * for any nr, nc. A single row (decode) takes its TC weight rows one after
 * the other: one sequential stream per thread reads memory faster than TC
 * rows side by side (measured, tg64 F32 15-22 -> 26 tok/s, F16 28 -> 31-49,
 * BF16 25 -> 30), and each element's sum is the same either way. */
#define DEFINE_TILE(NAME, LOAD, LOAD_M, ESIZE)                                                                     \
    static inline __attribute__((always_inline)) void NAME##_body(const float *x, int64_t ldx, int nr,             \
                                                                  const uint8_t *w, size_t wrb, int nc,            \
                                                                  int64_t in, float *out, int64_t ldo,             \
                                                                  const int stream) {                              \
        int64_t kf = in & ~(int64_t)15;                                                                           \
        const uint8_t *pf = w + PF_ROWS * wrb;                                                                    \
        __mmask16 tail = (__mmask16)((1u << (in - kf)) - 1);                                                       \
        __m512 acc[TR][TC];                                                                                       \
        for (int r = 0; r < TR; r++)                                                                              \
            for (int c = 0; c < TC; c++) acc[r][c] = _mm512_setzero_ps();                                         \
        for (int64_t k = 0; k < in; k += 16) {                                                                    \
            __m512 v[TC];                                                                                         \
            bool full = k < kf;                                                                                   \
            if ((nr < TR || stream) && (k * ESIZE) % 64 == 0) /* decode: once per cache line of each row */                    \
                for (int c = 0; c < nc; c++) prefetch_line(pf + c * wrb + k * ESIZE);                             \
            for (int c = 0; c < nc; c++) v[c] = full ? LOAD(w + c * wrb, k) : LOAD_M(w + c * wrb, k, tail);       \
            for (int r = 0; r < nr; r++) {                                                                        \
                __m512 b = full ? _mm512_loadu_ps(x + r * ldx + k) : _mm512_maskz_loadu_ps(tail, x + r * ldx + k); \
                for (int c = 0; c < nc; c++) acc[r][c] = _mm512_fmadd_ps(v[c], b, acc[r][c]);                     \
            }                                                                                                     \
        }                                                                                                         \
        for (int r = 0; r < nr; r++)                                                                              \
            for (int c = 0; c < nc; c++) out[r * ldo + c] = _mm512_reduce_add_ps(acc[r][c]);                      \
    }                                                                                                             \
    static void NAME(const float *x, int64_t ldx, int rows, const uint8_t *w, size_t wrb, int cols, int64_t in,  \
                     float *out, int64_t ldo, bool stream) {                                                      \
        if (cols == TC && rows == TR && stream) NAME##_body(x, ldx, TR, w, wrb, TC, in, out, ldo, 1); \
        else if (cols == TC && rows == TR) NAME##_body(x, ldx, TR, w, wrb, TC, in, out, ldo, 0);                  \
        else if (cols == TC && rows == 1) /* decode: one weight row at a time, a single stream (see above) */      \
            for (int c = 0; c < TC; c++) NAME##_body(x, ldx, 1, w + c * wrb, wrb, 1, in, out + c, ldo, 0);        \
        else NAME##_body(x, ldx, rows, w, wrb, cols, in, out, ldo, stream);                         \
    }

DEFINE_TILE(tile_f32, load_f32, load_f32_m, 4)
DEFINE_TILE(tile_f16, load_f16, load_f16_m, 2)
DEFINE_TILE(tile_bf16, load_bf16, load_bf16_m, 2)

/* Q8_0 x Q8_0: two 32-blocks per zmm for the integer work (|w| times x with
 * w's sign through maddubs + madd: 8 exact int32 lane sums per block), then
 * the two blocks' lanes are folded into an 8-lane accumulator one block
 * after the other, in the order of the portable reference (matmul.c), so
 * Q8_0 results are the same bits on every instruction set. */
static inline __m512i q8_pair(const uint8_t *blk0, bool two) {
    __m256i lo = _mm256_loadu_si256((const __m256i *)(blk0 + 2));
    __m256i hi = two ? _mm256_loadu_si256((const __m256i *)(blk0 + 34 + 2)) : _mm256_setzero_si256();
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

/* Q4_0: two blocks' nibbles as 64 unsigned bytes 0..15 (the stored value,
 * w + 8), each block's low nibbles first: each 16 bytes go to two 128-bit
 * chunks, the second shifted right by 4. */
static inline __m512i q4_pair(const uint8_t *blk0, bool two) {
    __m256i lo = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(blk0 + 2)));
    __m256i hi = two ? _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(blk0 + 18 + 2)))
                     : _mm256_setzero_si256();
    __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
    return _mm512_and_si512(_mm512_mask_srli_epi16(v, 0xFF00FF00u, v, 4), _mm512_set1_epi8(0xF));
}

static inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* q4: Q4_0 weights (18-byte blocks) instead of Q8_0 (34); same order. Q4_0
 * takes the stored nibbles u = w + 8 as they are, unsigned (pair sums of
 * at most 2 * 15 * 127: VPMADDUBSW does not saturate), and subtracts 8
 * times each 4-sum of the activations, computed once per row: the same
 * exact int32 sums as (w - 8) * x. */
static inline __attribute__((always_inline)) void q8_body(const int8_t *xq, const float *xd, int64_t nb, int nr,
                                                          const uint8_t *w, size_t wrb, int nc, float *out,
                                                          int64_t ldo, int q4, const int stream) {
    const size_t bb = q4 ? 18 : 34;
    const __m512i ones = _mm512_set1_epi16(1), zero = _mm512_setzero_si512(), eights = _mm512_set1_epi8(8);
    __m256 acc[TR][TC];
    for (int r = 0; r < TR; r++)
        for (int c = 0; c < TC; c++) acc[r][c] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b += 2) {
        bool two = b + 1 < nb;
        __m512i wa[TC], wq[TC];
        float dw0[TC], dw1[TC];
        for (int c = 0; c < nc; c++) {
            const uint8_t *blk = w + c * wrb + b * bb;
            /* a step reads 2 bb bytes from blk: Q8_0's 68 pass a line
             * boundary more often than once, so its last byte too */
            if (nr < TR || stream) {
                prefetch_line(blk + PF_ROWS * wrb);
                if (!q4) prefetch_line(blk + PF_ROWS * wrb + 2 * bb - 1);
            }
            wq[c] = q4 ? q4_pair(blk, two) : q8_pair(blk, two);
            wa[c] = q4 ? wq[c] : _mm512_abs_epi8(wq[c]);
            uint16_t d0, d1 = 0;
            memcpy(&d0, blk, 2);
            if (two) memcpy(&d1, blk + bb, 2);
            dw0[c] = _cvtsh_ss(d0);
            dw1[c] = _cvtsh_ss(d1);
        }
        for (int r = 0; r < nr; r++) {
            const int8_t *xr = xq + (r * nb + b) * 32;
            __m512i xv = two ? _mm512_loadu_si512(xr)
                             : _mm512_inserti64x4(zero, _mm256_loadu_si256((const __m256i *)xr), 0);
            const float *dr = xd + r * nb + b;
            __m512i x8 = q4 ? _mm512_madd_epi16(_mm512_maddubs_epi16(eights, xv), ones) : zero;
            for (int c = 0; c < nc; c++) {
                __m512i p;
                if (q4) {
                    p = _mm512_sub_epi32(_mm512_madd_epi16(_mm512_maddubs_epi16(wa[c], xv), ones), x8);
                } else {
                    __mmask64 neg = _mm512_movepi8_mask(wq[c]);
                    __m512i sx = _mm512_mask_sub_epi8(xv, neg, zero, xv);
                    p = _mm512_madd_epi16(_mm512_maddubs_epi16(wa[c], sx), ones);
                }
                __m512 pf = _mm512_cvtepi32_ps(p);
                acc[r][c] = _mm256_fmadd_ps(_mm512_castps512_ps256(pf), _mm256_set1_ps(dw0[c] * dr[0]), acc[r][c]);
                if (two)
                    acc[r][c] = _mm256_fmadd_ps(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(pf), 1)),
                                                _mm256_set1_ps(dw1[c] * dr[1]), acc[r][c]);
            }
        }
    }
    for (int r = 0; r < nr; r++)
        for (int c = 0; c < nc; c++) out[r * ldo + c] = hsum8(acc[r][c]);
}

static void tile_q8_0(const int8_t *xq, const float *xd, int64_t nb, int rows, const uint8_t *w, size_t wrb,
                      int cols, float *out, int64_t ldo, bool stream) {
    if (cols == TC && rows == TR && stream) q8_body(xq, xd, nb, TR, w, wrb, TC, out, ldo, 0, 1);
    else if (cols == TC && rows == TR) q8_body(xq, xd, nb, TR, w, wrb, TC, out, ldo, 0, 0);
    else if (cols == TC && rows == 1) q8_body(xq, xd, nb, 1, w, wrb, TC, out, ldo, 0, 0);
    else q8_body(xq, xd, nb, rows, w, wrb, cols, out, ldo, 0, stream);
}

static void tile_q4_0(const int8_t *xq, const float *xd, int64_t nb, int rows, const uint8_t *w, size_t wrb,
                      int cols, float *out, int64_t ldo, bool stream) {
    if (cols == TC && rows == TR && stream) q8_body(xq, xd, nb, TR, w, wrb, TC, out, ldo, 1, 1);
    else if (cols == TC && rows == TR) q8_body(xq, xd, nb, TR, w, wrb, TC, out, ldo, 1, 0);
    else if (cols == TC && rows == 1) q8_body(xq, xd, nb, 1, w, wrb, TC, out, ldo, 1, 0);
    else q8_body(xq, xd, nb, rows, w, wrb, cols, out, ldo, 1, stream);
}

/* BF16 weights widened two vectors at a time: one 512-bit load of 32 values
 * and VPUNPCKLWD / VPUNPCKHWD with zero give their F32 bits in the
 * x_perm32 order, so the activations are packed in that order once per
 * matmul (matmul.c) instead of each weight being shuffled back. */
static inline __attribute__((always_inline)) void bf16w_body(const float *x, int64_t ldx, int nr, const uint8_t *w,
                                                            size_t wrb, int nc, int64_t in, float *out,
                                                            int64_t ldo, const int stream) {
    const __m512i zero = _mm512_setzero_si512();
    int64_t kf = in & ~(int64_t)31;
    __mmask32 tail = (__mmask32)((1ull << (in - kf)) - 1);
    __m512 acc[TR][TC];
    for (int r = 0; r < TR; r++)
        for (int c = 0; c < TC; c++) acc[r][c] = _mm512_setzero_ps();
    for (int64_t k = 0; k < in; k += 32) {
        __m512 lo[TC], hi[TC];
        for (int c = 0; c < nc; c++) {
            const uint16_t *wc = (const uint16_t *)(const void *)(w + c * wrb) + k;
            if (nr < TR || stream) prefetch_line((const uint8_t *)wc + PF_ROWS * wrb);
            __m512i v = k < kf ? _mm512_loadu_si512(wc) : _mm512_maskz_loadu_epi16(tail, wc);
            lo[c] = _mm512_castsi512_ps(_mm512_unpacklo_epi16(zero, v));
            hi[c] = _mm512_castsi512_ps(_mm512_unpackhi_epi16(zero, v));
        }
        for (int r = 0; r < nr; r++) {
            __m512 xl = _mm512_loadu_ps(x + r * ldx + k), xh = _mm512_loadu_ps(x + r * ldx + k + 16);
            for (int c = 0; c < nc; c++) {
                acc[r][c] = _mm512_fmadd_ps(lo[c], xl, acc[r][c]);
                acc[r][c] = _mm512_fmadd_ps(hi[c], xh, acc[r][c]);
            }
        }
    }
    for (int r = 0; r < nr; r++)
        for (int c = 0; c < nc; c++) out[r * ldo + c] = _mm512_reduce_add_ps(acc[r][c]);
}

static void tile_bf16w(const float *x, int64_t ldx, int rows, const uint8_t *w, size_t wrb, int cols, int64_t in,
                       float *out, int64_t ldo, bool stream) {
    if (cols == TC && rows == TR && stream) bf16w_body(x, ldx, TR, w, wrb, TC, in, out, ldo, 1);
    else if (cols == TC && rows == TR) bf16w_body(x, ldx, TR, w, wrb, TC, in, out, ldo, 0);
    else if (cols == TC && rows == 1) /* decode: one weight row at a time (see the F32/F16 tiles) */
        for (int c = 0; c < TC; c++) bf16w_body(x, ldx, 1, w + c * wrb, wrb, 1, in, out + c, ldo, 0);
    else bf16w_body(x, ldx, rows, w, wrb, cols, in, out, ldo, stream);
}

/* Q8_0 activation quantization (matmul.c has the portable one): the same
 * float operations per element (|x| max, amax / 127, 1 / scale, x * inv
 * rounded to nearest even by the default MXCSR mode, the scale through a
 * half and back), 32 at a time. */
void matmul_quantize_row_q8_0_avx512(const float *x, int64_t n, int8_t *qs, float *d, int32_t *sums) {
    for (int64_t b = 0; b < n / 32; b++) {
        __m512 x0 = _mm512_loadu_ps(x + b * 32), x1 = _mm512_loadu_ps(x + b * 32 + 16);
        float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(x0), _mm512_abs_ps(x1)));
        float scale = amax / 127.0f, inv = scale != 0.0f ? 1.0f / scale : 0.0f;
        __m512 iv = _mm512_set1_ps(inv);
        __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(x0, iv)), q1 = _mm512_cvtps_epi32(_mm512_mul_ps(x1, iv));
        _mm_storeu_si128((__m128i *)(void *)(qs + b * 32), _mm512_cvtepi32_epi8(q0));
        _mm_storeu_si128((__m128i *)(void *)(qs + b * 32 + 16), _mm512_cvtepi32_epi8(q1));
        d[b] = _cvtsh_ss(_cvtss_sh(scale, _MM_FROUND_TO_NEAREST_INT));
        if (sums) sums[b] = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
    }
}

const pdl_tile_kernels matmul_tiles_avx512_bf16w = {
    .tile_rows = TR,
    .tile_cols = TC,
    .fn = {[PDL_DTYPE_BF16] = tile_bf16w},
    .x_perm32 = true,
};

const pdl_tile_kernels matmul_tiles_avx512 = {
    .tile_rows = TR,
    .tile_cols = TC,
    .fn = {[PDL_DTYPE_F32] = tile_f32, [PDL_DTYPE_F16] = tile_f16, [PDL_DTYPE_BF16] = tile_bf16},
    .q8 = tile_q8_0,
    .q4 = tile_q4_0,
    .q4k = kquant_tile_q4_k_avx512, /* kquant_avx512.c */
    .q5k = kquant_tile_q5_k_avx512,
    .q6k = kquant_tile_q6_k_avx512,
    .q3k = kquant_tile_q3_k_avx512,
    .q2k = kquant_tile_q2_k_avx512,
    .iq4xs = kquant_tile_iq4_xs_avx512,
    .tq2 = kquant_tile_tq2_0_avx512,
    .tq1 = kquant_tile_tq1_0_avx512,
};
#else
/* Not built for this target: the family has no kernels. */
void matmul_quantize_row_q8_0_avx512(const float *x, int64_t n, int8_t *qs, float *d, int32_t *sums) {
    (void)x, (void)n, (void)qs, (void)d, (void)sums;
}
const pdl_tile_kernels matmul_tiles_avx512_bf16w = {0};
const pdl_tile_kernels matmul_tiles_avx512 = {0};
#endif
