/*
 * matmul_avx512bf16.c - BF16 weights x BF16 activations with AVX512_BF16's
 * VDPBF16PS (two products per lane per instruction, FP32 accumulation):
 * twice the multiply rate of widening the weights to F32.
 *
 * The activations are rounded to BF16 once per matmul (matmul.c packs them);
 * that rounding (relative 2^-9 per value) is the only difference from the
 * exact path, and it is the same for every row whatever the batch.
 * x here points to BF16 activations and ldx counts BF16 values.
 */
#include "kernels/matmul_table.h"
#include "kernels/weight_panels.h"

#if defined(__AVX512BF16__)
#include <immintrin.h>
#include <stdbool.h>

#define TR 4
#define TC 4

/* Every 64 bytes of a weight row also prefetch the same bytes of the row
 * PF_ROWS ahead in tiles of fewer than TR rows, as matmul_avx512.c's tiles
 * do (decode streams each weight once per token). Inlined, or GCC deletes
 * it. */
#define PF_ROWS (4 * TC)
static inline __attribute__((always_inline)) void prefetch_line(const uint8_t *p) {
    _mm_prefetch((const char *)p, _MM_HINT_T0);
}

static inline __attribute__((always_inline)) void body(const uint16_t *x, int64_t ldx, int nr, const uint8_t *w,
                                                       size_t wrb, int nc, int64_t in, float *out, int64_t ldo) {
    int64_t kf = in & ~(int64_t)31;
    __mmask32 tail = (__mmask32)((1ull << (in - kf)) - 1);
    __m512 acc[TR][TC];
    for (int r = 0; r < TR; r++)
        for (int c = 0; c < TC; c++) acc[r][c] = _mm512_setzero_ps();
    for (int64_t k = 0; k < in; k += 32) {
        bool full = k < kf;
        __m512i v[TC];
        for (int c = 0; c < nc; c++) {
            const uint16_t *wc = (const uint16_t *)(w + c * wrb) + k;
            if (nr < TR) prefetch_line((const uint8_t *)wc + PF_ROWS * wrb);
            v[c] = full ? _mm512_loadu_si512(wc) : _mm512_maskz_loadu_epi16(tail, wc);
        }
        for (int r = 0; r < nr; r++) {
            const uint16_t *xr = x + r * ldx + k;
            __m512i b = full ? _mm512_loadu_si512(xr) : _mm512_maskz_loadu_epi16(tail, xr);
            for (int c = 0; c < nc; c++)
                acc[r][c] = _mm512_dpbf16_ps(acc[r][c], (__m512bh)b, (__m512bh)v[c]);
        }
    }
    for (int r = 0; r < nr; r++)
        for (int c = 0; c < nc; c++) out[r * ldo + c] = _mm512_reduce_add_ps(acc[r][c]);
}

static void tile_bf16(const float *xf, int64_t ldx, int rows, const uint8_t *w, size_t wrb, int cols, int64_t in,
                      float *out, int64_t ldo, bool stream) {
    (void)stream; /* this tile does not prefetch */
    const uint16_t *x = (const uint16_t *)(const void *)xf;
    if (cols == TC && rows == TR) body(x, ldx, TR, w, wrb, TC, in, out, ldo);
    else if (cols == TC && rows == 1) body(x, ldx, 1, w, wrb, TC, in, out, ldo);
    else body(x, ldx, rows, w, wrb, cols, in, out, ldo);
}

/* Rounds n floats to BF16 (nearest even), 16 at a time. */
void matmul_f32_to_bf16_avx512(const float *src, uint16_t *dst, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(dst + i), (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(src + i)));
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        __m256bh h = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, src + i));
        _mm256_mask_storeu_epi16(dst + i, m, (__m256i)h);
    }
}

/* The panel tile for BF16 weights x BF16 activation pairs (weight_panels.h):
 * one VDPBF16PS per step and accumulator. */
#include "kernels/weight_panels_avx512_body.h"
DEFINE_PANEL_TILE(panel_bf16_dp, 3)
const pdl_panel_fn panels_tile_bf16_dp = panel_bf16_dp;

const pdl_tile_kernels matmul_tiles_avx512bf16 = {
    .tile_rows = TR,
    .tile_cols = TC,
    .fn = {[PDL_DTYPE_BF16] = tile_bf16},
    .x_bf16 = true,
};
#else
const pdl_tile_kernels matmul_tiles_avx512bf16 = {0};
const pdl_panel_fn panels_tile_bf16_dp = NULL;
void matmul_f32_to_bf16_avx512(const float *src, uint16_t *dst, int64_t n) {
    (void)src, (void)dst, (void)n;
}
#endif
