/*
 * weight_panels.h - F32, F16, BF16, Q8_0, Q4_0, MXFP4, IQ4_NL, Q5_0, Q4_1, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K,
 * IQ4_XS, TQ2_0 and TQ1_0 weight matrices copied
 * once, at model load, into panels of 16 output rows laid out k-major, and
 * the matmul that reads them: each step loads one vector holding the same
 * k (or 4 k) of 16 outputs and multiplies it by one broadcast activation
 * (or 4 of them), so a tile of R rows x G panels keeps R*G accumulators
 * that never need a horizontal sum, and every weight load serves R rows
 * (the row-major tiles in matmul_table.h load both operands for every
 * product).
 *
 * Layout of a matrix of `out` rows and `in` columns: ceil(out / 16) panels,
 * panel p holding output rows 16p .. 16p + 15 (rows past `out` are zeros),
 * each panels_bytes() long, one step after the other:
 *   F32:  step k = 16 floats, w[16p + c][k] for c = 0..15;
 *   F16:  step k = 16 halves, likewise;
 *   BF16: step j = 16 32-bit words, word c holding w[16p + c][2j] in its low
 *         half and w[16p + c][2j + 1] in its high half (a zero past `in`).
 *   Q8_0 and Q4_0 (blocks of 32): the blocks in pairs, each pair the
 *         quants of its two blocks and then their scales (16 halves per
 *         block, as in the file; 64 bytes, so every pair starts 64-byte
 *         aligned), at qpanel_quants_at / qpanel_scales_at; an odd
 *         last block's pair is padded with zeros. Q8_0's block b is 8 x 16
 *         32-bit words, word (q, c) holding the 4 bytes 4q .. 4q + 3 of
 *         row 16p + c's block b, each plus 128 (an unsigned byte); Q4_0's
 *         block b is 4 x 16 words, word (q, c) holding the file's nibble
 *         bytes 4q .. 4q + 3 of that block (low nibbles: elements
 *         4q .. 4q + 3, high: 16 + 4q ..), each nibble the value plus 8.
 *   MXFP4 (blocks of 32): Q4_0's layout; the quants are the file's 16
 *         code bytes placed as Q4_0's nibble bytes (4-bit E2M1 codes, not
 *         values), and the scales are the 16 rows' halved E8M0 scales
 *         2^(e - 128) as BF16 (exact: kernels/mxfp4.h), where Q4_0 has its
 *         halves.
 *   IQ4_NL (blocks of 32): Q4_0's panel exactly (the file's block is
 *         Q4_0's: f16 d, then the code bytes); a nibble is a code that
 *         indexes kernels/iq4nl.h's int8 values instead of the value + 8.
 *   Q5_0, Q4_1, Q5_1 (blocks of 32, kernels/legacy_quant.h): Q4_0's pairs
 *         with legacy_panel_qbytes() of quants per block: Q4_0's 256
 *         bytes of nibble words (the file's qs), then Q5_0 / Q5_1's 16
 *         words of fifth bits, word c (at 256 + 4c) holding row 16p + c's
 *         qh rearranged so that byte i bit j is the fifth bit of element
 *         4j + i (legacy_panel_high: step q's bytes 4q.. (low nibbles)
 *         take bit q, their high nibbles bit 4 + q, each one shift and
 *         mask away from bit 4); then Q4_1 / Q5_1's 16 rows' m (halves,
 *         at legacy_panel_min_at) and 32 bytes of zeros; the 16 scales
 *         are the rows' d, as Q4_0's.
 *   Q4_K (super-blocks of 256): PDL_Q4K_PANEL_BLOCK bytes per super-block
 *         b, one after the other: 32 x 16 32-bit words, word (w4, c)
 *         holding the file's nibble bytes 4 w4 .. 4 w4 + 3 of row 16p + c's
 *         block b (byte 32 (j / 2) + k holds element 32 j + k of sub-block
 *         j, low nibble for even j, high for odd); then the 8 six-bit
 *         scales (byte 16 j + c: sub-block j of row c), the 8 six-bit mins
 *         likewise, the 16 rows' d (halves) and their dmin (halves).
 *   Q5_K (super-blocks of 256): PDL_Q5K_PANEL_BLOCK bytes per super-block:
 *         Q4_K's panel block exactly (the file's nibbles, scales, mins, d,
 *         dmin), then 8 x 16 32-bit words of high bits, word (l4, c)
 *         holding the file's qh bytes 4 l4 .. 4 l4 + 3 of row 16p + c
 *         (bit j of qh byte l: the fifth bit of element 32 j + l).
 *   Q6_K (super-blocks of 256): PDL_Q6K_PANEL_BLOCK bytes per super-block:
 *         for each half h (128 elements) and step l4 = 0..7, three vectors
 *         of 16 words, word c holding 4 bytes of row c's block: ql bytes
 *         64h + 4 l4 .., ql bytes 64h + 32 + 4 l4 .., qh bytes 32h + 4 l4
 *         .. (all that elements 128h + 4 l4 + {0, 32, 64, 96} + 0..3 need,
 *         in the file's bit positions, side by side in the order the
 *         kernels read them); then the 16 int8 scales (byte 16 g + c), the
 *         16 rows' d (halves) and 32 bytes of zeros.
 *   Q3_K (super-blocks of 256): PDL_Q3K_PANEL_BLOCK bytes per super-block:
 *         for each step l4 = 0..7, three vectors of 16 words, word c
 *         holding 4 bytes of row c's block: qs bytes 4 l4 .., qs bytes 32
 *         + 4 l4 .., hmask bytes 4 l4 .. (all that elements 128h + 32k +
 *         4 l4 + 0..3, h = 0..1, k = 0..3, need, in the file's bit
 *         positions); then the 16 scales minus 32 as int8 (byte 16 g + c),
 *         the 16 rows' d (halves) and 32 bytes of zeros.
 *   Q2_K (super-blocks of 256): PDL_Q2K_PANEL_BLOCK bytes per super-block:
 *         Q3_K's steps without the hmask word (for each step l4 two
 *         vectors of 16 words: qs bytes 4 l4 .., qs bytes 32 + 4 l4 ..);
 *         then the 16 four-bit scales (byte 16 g + c), the 16 four-bit
 *         mins likewise, the 16 rows' d (halves) and their dmin (halves).
 *   IQ4_XS (super-blocks of 256): PDL_IQ4XS_PANEL_BLOCK bytes per
 *         super-block: 32 x 16 32-bit words, word (w4, c) holding the
 *         file's code bytes 4 w4 .. 4 w4 + 3 of row 16p + c's block (byte
 *         16 j + k of sub-block j: element 32 j + k's code in the low
 *         nibble, 32 j + 16 + k's in the high); then the 8 signed scales
 *         ls_j - 32 as int8 (byte 16 j + c), the 16 rows' d (halves) and
 *         32 bytes of zeros.
 *   TQ2_0 and TQ1_0 (super-blocks of 256): PDL_TQ_PANEL_BLOCK bytes per
 *         super-block, one layout for both: Q2_K's steps of 2-bit codes
 *         (for each step l4 two vectors of 16 words: code bytes 4 l4 ..,
 *         code bytes 32 + 4 l4 .., TQ2_0's 64 bytes as in the file; TQ1_0's
 *         trits rewritten into that form at load), then the 16 rows' d
 *         (halves) and 32 bytes of zeros.
 *
 * Every output element is one accumulator, zero first, carried over the
 * steps in order with one rounding per product (fused multiply-add):
 *   F32, F16: acc = fma(w[k], x[k], acc) for k = 0, 1, ...;
 *   BF16:     acc = fma(w[2j + 1], x[2j + 1], acc), then
 *             acc = fma(w[2j], x[2j], acc) for j = 0, 1, ... (the odd
 *             element first: the order of VDPBF16PS, which the BF16
 *             activation mode uses with x rounded to BF16 as
 *             VCVTNEPS2BF16 rounds it, a denormal x as zero:
 *             fp16_f32_to_bf16_daz);
 *   Q8_0, Q4_0, MXFP4, IQ4_NL: x is quantized to Q8_0 per 32-block
 *         (matmul_quantize_row_q8_0: int8 x[k], scale dx[b]); block b gives
 *         the exact integer sum s = sum over its 32 k of w[k] x[k] (MXFP4:
 *         w the doubled E2M1 values and dw[b] the halved E8M0 scale,
 *         kernels/mxfp4.h; IQ4_NL: w the code's int8 value), then acc = fma((float)s, dw[b] * dx[b], acc)
 *         for b = 0, 1, ...;
 *   Q5_0, Q4_1, Q5_1: as Q4_0, w the code (Q5_0: minus 16), then for
 *         Q4_1 / Q5_1 acc = fma((float)xs[b], m[b] * dx[b], acc), xs[b]
 *         the exact sum of the block's 32 quantized activations
 *         (matmul_quantize_row_q8_0_sums);
 *   Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS, TQ2_0, TQ1_0: x is quantized to Q8_K per 256-block (kquant.h) and each
 *         super-block adds to acc exactly as kquant.h's dots do (exact
 *         integer sums, then one or two fused multiply-adds), so panels
 *         give the bits of kquant_dot_q4_k_q8_k / _q5_k_ / _q6_k_ / _q3_k_ / _q2_k_ /
 *         kquant_dot_iq4_xs_q8_k / _tq2_0_ / _tq1_0_ and of
 *         the row-major tiles;
 * then + bias, then += into y when accumulating. The sequence does not
 * depend on the tile, the batch or the thread count, and the portable
 * kernel here (the reference), the AVX-512 and the AVX2 ones give the same
 * bits. (BF16 activations need a BF16 dot product: the AVX2 family, which
 * has none, multiplies F32 activations whatever matmul_bf16_activations
 * says.)
 */
#ifndef PDL_KERNELS_WEIGHT_PANELS_H
#define PDL_KERNELS_WEIGHT_PANELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "format/tensor.h"
#include "kernels/cpu_features.h"
#include "kernels/kquant.h"
#include "kernels/matmul.h"
#include "kernels/threadpool.h"

#define PDL_PANEL_COLS 16

/* Whether w (a 2-D F32, F16, BF16, Q8_0, Q4_0, MXFP4, IQ4_NL, Q5_0, Q4_1, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K,
 * IQ4_XS, TQ2_0 or TQ1_0 matrix) can be
 * made into panels for the family of `kernels`: it has the AVX-512 panel
 * kernels (for the block formats with AVX512-VNNI), or the AVX2 ones (every
 * one of these dtypes; the block formats through VPMADDUBSW, or AVX-VNNI
 * where the CPU has it). The model loader makes them unless
 * PAGEDLM_WEIGHT_PANELS=0 (model_load.c). */
bool panels_wanted(const pdl_kernels *kernels, const pdl_tensor *w);

/* Steps per panel and bytes per panel of w's layout. */
int64_t panels_steps(pdl_dtype dtype, int64_t in);
size_t panels_bytes(pdl_dtype dtype, int64_t in);

/* Bytes of w's panels, a multiple of 64 (so the panels of several
 * matrices can follow one another in one buffer). */
size_t panels_size(const pdl_tensor *w);

/* Copies w into panels at dst (64-byte aligned, panels_size(w) bytes;
 * the threads of pool share the work) and points w->panels at it. */
void panels_fill(pdl_threadpool *pool, pdl_tensor *w, void *dst);

/* y = x w^T (+ bias, += when accumulate) from w->panels, as matmul_run
 * (its scratch and its -1 when that cannot be had, y then untouched). */
int panels_matmul(const pdl_kernels *kernels, pdl_threadpool *pool, pdl_scratch *scratch, float *y, int64_t ldy,
                  const float *x, int64_t n_rows, const pdl_tensor *w, const float *bias, bool accumulate);

/* Bytes of scratch the panel products take for n_rows rows times w. */
size_t panels_scratch_bytes(const pdl_kernels *kernels, const pdl_tensor *w, int64_t n_rows);

/* matmul_shared for matrices that all have panels of one dtype and
 * width (the caller checks). */
int panels_matmul_shared(const pdl_kernels *kernels, pdl_threadpool *pool, pdl_scratch *scratch, const float *x,
                         int64_t n_rows, const pdl_matmul_out *outs, int n_outs);

/* matmul_gated for a gate and an up matrix with panels of one dtype
 * and shape (the caller checks). */
int panels_matmul_gated(const pdl_kernels *kernels, pdl_threadpool *pool, pdl_scratch *scratch, float *gate,
                        int64_t ldg, const float *x, int64_t n_rows, const pdl_tensor *w_gate,
                        const pdl_tensor *w_up, pdl_gate_fn act);

/* matmul_grouped for matrices (and up matrices) that all have panels
 * of one dtype and width (the caller checks). */
int panels_matmul_grouped(const pdl_kernels *kernels, pdl_threadpool *pool, pdl_scratch *scratch, const float *x,
                          int64_t n_rows, const pdl_matmul_group *groups, int n_groups, pdl_gate_fn act);

/* A tile: rows x (panels x 16) outputs. x holds F32 activations (ldx
 * floats per row) or, for BF16 weights in the BF16 activation mode, pairs
 * of BF16 activations as 32-bit words (ldx words per row); last_cols is
 * how many outputs of the last panel exist (1..16). */
typedef void (*pdl_panel_fn)(const void *x, int64_t ldx, int rows, const uint8_t *panel, size_t panel_bytes,
                             int panels, int64_t steps, int last_cols, float *y, int64_t ldy, const float *bias,
                             bool accumulate);

/* Q8_0 / Q4_0 / MXFP4 / IQ4_NL / Q5_0 / Q4_1 / Q5_1 weights: rows x (panels x 16) outputs from activations
 * quantized to Q8_0 (xq: ldx int8 per row; xd: block scales and xs: block
 * sums of xq, nbx per row). */
typedef void (*pdl_qpanel_fn)(const int8_t *xq, const float *xd, const int32_t *xs, int64_t ldx, int64_t nbx,
                              int rows, const uint8_t *panel, size_t panel_bytes, int panels, int64_t blocks,
                              int last_cols, float *y, int64_t ldy, const float *bias, bool accumulate);

/* Q2_K / Q3_K / Q4_K / Q5_K / Q6_K / IQ4_XS / TQ2_0 / TQ1_0 weights: rows x (panels x 16) outputs from activations quantized
 * to Q8_K (ldx blocks apart, `blocks` per row). */
typedef void (*pdl_kpanel_fn)(const pdl_block_q8k *x, int64_t ldx, int rows, const uint8_t *panel,
                              size_t panel_bytes, int panels, int64_t blocks, int last_cols, float *y, int64_t ldy,
                              const float *bias, bool accumulate);

/* Bytes of one Q4_K super-block of a panel: 2048 of nibbles, 128 of
 * scales, 128 of mins, 32 of d and 32 of dmin. */
#define PDL_Q4K_PANEL_BLOCK 2368
/* ... of Q5_K: Q4_K's 2368, then 512 of high bits. */
#define PDL_Q5K_PANEL_BLOCK 2880
/* ... and of Q6_K: 3072 of ql and qh, 256 of scales, 32 of d, 32 of
 * padding (64-byte alignment). */
#define PDL_Q6K_PANEL_BLOCK 3392
/* ... and of Q3_K: 1536 of qs and hmask, 256 of scales, 32 of d, 32 of
 * padding. */
#define PDL_Q3K_PANEL_BLOCK 1856
/* ... and of Q2_K: 1024 of qs, 256 of scales, 256 of mins, 32 of d and 32
 * of dmin. */
#define PDL_Q2K_PANEL_BLOCK 1600
/* ... and of IQ4_XS: 2048 of codes, 128 of signed scales, 32 of d, 32 of
 * padding (64-byte alignment). */
#define PDL_IQ4XS_PANEL_BLOCK 2240
/* ... and of TQ2_0 / TQ1_0: 1024 of codes, 32 of d, 32 of padding. */
#define PDL_TQ_PANEL_BLOCK 1088

/* Q8_0 / Q4_0 panels (qb: bytes of one block's quants, 512 / 256): the
 * offsets in a panel of block b's quants and of its 16 scales. A block
 * and its scales lie together, so a one-row product reads a panel as one
 * stream in memory order (a test program on a Zen 4 VM, Q4_0 3072 x 1024,
 * weights not in cache: 1.8-2.0x the rate of all quants then all scales
 * read 3 panels side by side on one core, 1.0-1.4x on two). */
static inline size_t qpanel_pair_bytes(size_t qb) { return 2 * qb + 64; }
static inline size_t qpanel_quants_at(size_t qb, int64_t b) {
    return ((size_t)b >> 1) * qpanel_pair_bytes(qb) + ((size_t)b & 1) * qb;
}
static inline size_t qpanel_scales_at(size_t qb, int64_t b) {
    return ((size_t)b >> 1) * qpanel_pair_bytes(qb) + 2 * qb + ((size_t)b & 1) * 32;
}
/* The same, carried from block to block in a tile's loop (a multiply per
 * block cost the AVX2 prefill tile about 6%): block b + 1's quants from
 * block b's at `at`, and block b's scales from it. */
static inline size_t qpanel_next_quants(size_t qb, size_t at, int64_t b) {
    return at + qb + ((size_t)b & 1) * 64;
}
static inline size_t qpanel_scales_near(size_t qb, size_t at, int64_t b) {
    return at + ((size_t)b & 1 ? qb + 32 : 2 * qb);
}

/* Q5_0 / Q4_1 / Q5_1 panels (see the top): bytes of one block's quants
 * (the qb of qpanel_quants_at), and where in them the fifth-bit words and
 * the m halves start. */
static inline size_t legacy_panel_qbytes(pdl_dtype dt) { return dt == PDL_DTYPE_Q5_1 ? 384 : 320; }
#define PDL_LEGACY_PANEL_HIGH_AT 256
static inline size_t legacy_panel_min_at(pdl_dtype dt) { return dt == PDL_DTYPE_Q5_1 ? 320 : 256; }

/* The tile sizes the driver uses: at most PDL_PANEL_TILE_ROWS rows (4 for
 * Q8_0 / Q4_0 / Q4_K / Q6_K: their integer sums need registers too) and
 * PDL_PANEL_TILE_PANELS panels per call. */
#define PDL_PANEL_TILE_ROWS 8
#define PDL_PANEL_TILE_ROWS_AVX2 6 /* the AVX2 F32 / F16 tiles' piece */
#define PDL_PANEL_TILE_ROWS_AVX2_BF16 5 /* and the AVX2 BF16 one's */
#define PDL_QPANEL_TILE_ROWS 4
#define PDL_PANEL_TILE_PANELS 3

/* The one-row (decode) tiles of the super-block types prefetch each
 * panel about this many bytes ahead of the line they read: with several
 * panels read side by side the hardware prefetcher alone left a core at
 * about two thirds of its streaming bandwidth (measured, Zen 5: 4 KiB
 * ahead best of 1, 4, 12 KiB). */
#define PDL_PANEL_AHEAD 4096

/* The prefetch of the helpers below; a test defines it before including
 * this header to see which lines they reach. */
#ifndef PANEL_PREFETCH
#define PANEL_PREFETCH(p) __builtin_prefetch((p), 0, 3)
#endif

/* The distance itself: the fewest whole super-blocks of `block` bytes
 * that reach PDL_PANEL_AHEAD, so a tile that prefetches each line it reads
 * at this distance fetches every line of the blocks ahead. A distance that
 * is not whole blocks left lines no prefetch reached in every block (5 of
 * Q5_K's 45, 9 of Q2_K's 25), whose loads then waited on memory: Q5_K
 * decoded at 0.64x, the others 0.82-0.94x (docs/benchmarks.md). */
static inline size_t panel_ahead(size_t block) { return (PDL_PANEL_AHEAD + block - 1) / block * block; }

/* Step i of the `steps` of a tile's prefetching loop also prefetches lines
 * i and i + steps of the bytes [from, to) of blk (at most 2 x steps lines:
 * scales, mins and d, which the tile reads outside that loop), so they
 * are spread over the steps. Always inlined: GCC deletes the calls of a
 * function that only prefetches (as kquant_avx512_body.h says). */
static inline __attribute__((always_inline)) void panel_prefetch_tail(const uint8_t *blk, size_t from, size_t to,
                                                                      int i, int steps) {
    size_t o = from + 64 * (size_t)i;
    if (o < to) PANEL_PREFETCH(blk + o);
    if (o + 64 * (size_t)steps < to) PANEL_PREFETCH(blk + o + 64 * (size_t)steps);
}

/* The one-row (decode) tiles of the pair-layout panels (Q8_0, Q4_0,
 * MXFP4, IQ4_NL, Q5_0, Q4_1, Q5_1): step q of the `steps` over block b's
 * quants (blk: where they start, one 64-byte line read a step) prefetches
 * that line whole pairs ahead (panel_ahead of the pair: the same line of a
 * later pair), the block's lines past its steps (Q5_0 / Q5_1's fifth bits,
 * Q4_1 / Q5_1's m; qb bytes in all) and, at step 0, its scales' line. A
 * fixed 4 KiB missed one line of every pair (of Q4_0's 9, Q8_0's 17) and
 * every scales line. */
static inline __attribute__((always_inline)) void qpanel_prefetch_step(const uint8_t *blk, size_t qb, int64_t b, int q,
                                                                       int steps) {
    const uint8_t *later = blk + panel_ahead(qpanel_pair_bytes(qb));
    PANEL_PREFETCH(later + 64 * (size_t)q);
    panel_prefetch_tail(later, 64 * (size_t)steps, qb, q, steps);
    if (q == 0) PANEL_PREFETCH(later + qpanel_scales_near(qb, 0, b));
}

/* AVX-512 tiles (weight_panels_avx512.c; the BF16 activation one in
 * matmul_avx512bf16.c) and AVX2 tiles for the float dtypes
 * (weight_panels_avx2.c, pieces of PDL_PANEL_TILE_ROWS_AVX2 rows for F32 /
 * F16, PDL_PANEL_TILE_ROWS_AVX2_BF16 for BF16). NULL entries: not built
 * for this target. */
extern const pdl_panel_fn panels_tiles_avx512[PDL_DTYPE_COUNT];
extern const pdl_panel_fn panels_tiles_avx2[PDL_DTYPE_COUNT];
extern const pdl_panel_fn panels_tile_bf16_dp; /* BF16 weights x BF16 activation pairs */
extern const pdl_qpanel_fn qpanel_tile_q8_0_vnni, qpanel_tile_q4_0_vnni, qpanel_tile_mxfp4_vnni,
    qpanel_tile_iq4_nl_vnni; /* weight_panels_avx512vnni.c */
extern const pdl_qpanel_fn qpanel_tile_q5_0_vnni, qpanel_tile_q4_1_vnni, qpanel_tile_q5_1_vnni; /* likewise */
extern const pdl_kpanel_fn kpanel_tile_q4_k_vnni, kpanel_tile_q5_k_vnni, kpanel_tile_q6_k_vnni; /* likewise */
extern const pdl_kpanel_fn kpanel_tile_q3_k_vnni, kpanel_tile_q2_k_vnni;
extern const pdl_kpanel_fn kpanel_tile_iq4_xs_vnni; /* likewise */
extern const pdl_kpanel_fn kpanel_tile_tq_vnni;     /* TQ2_0 and TQ1_0 panels (one layout) */
/* 256-bit integer tiles (weight_panels_int256_body.h): AVX2 (VPMADDUBSW,
 * weight_panels_avx2.c) and AVX-VNNI (VPDPBUSD, weight_panels_avxvnni.c) */
extern const pdl_qpanel_fn qpanel_tile_q8_0_avx2, qpanel_tile_q4_0_avx2, qpanel_tile_mxfp4_avx2,
    qpanel_tile_iq4_nl_avx2;
extern const pdl_kpanel_fn kpanel_tile_q4_k_avx2, kpanel_tile_q5_k_avx2, kpanel_tile_q6_k_avx2;
extern const pdl_kpanel_fn kpanel_tile_q3_k_avx2, kpanel_tile_q2_k_avx2;
extern const pdl_kpanel_fn kpanel_tile_iq4_xs_avx2;
extern const pdl_kpanel_fn kpanel_tile_tq_avx2;
extern const pdl_qpanel_fn qpanel_tile_q5_0_avx2, qpanel_tile_q4_1_avx2, qpanel_tile_q5_1_avx2;
extern const pdl_qpanel_fn qpanel_tile_q8_0_avxvnni, qpanel_tile_q4_0_avxvnni, qpanel_tile_mxfp4_avxvnni,
    qpanel_tile_iq4_nl_avxvnni;
extern const pdl_kpanel_fn kpanel_tile_q4_k_avxvnni, kpanel_tile_q5_k_avxvnni, kpanel_tile_q6_k_avxvnni;
extern const pdl_kpanel_fn kpanel_tile_q3_k_avxvnni, kpanel_tile_q2_k_avxvnni;
extern const pdl_kpanel_fn kpanel_tile_iq4_xs_avxvnni;
extern const pdl_kpanel_fn kpanel_tile_tq_avxvnni;
extern const pdl_qpanel_fn qpanel_tile_q5_0_avxvnni, qpanel_tile_q4_1_avxvnni, qpanel_tile_q5_1_avxvnni;

/* The panel kernels of one family, chosen once (panels_kernels_for)
 * instead of per call: every choice the driver makes from the instruction
 * set, the CPU's features and the BF16 activation mode, per weight dtype.
 * Part of pdl_kernels (matmul_table.h). */
typedef struct pdl_panel_kernels {
    bool wanted[PDL_DTYPE_COUNT];      /* the family has panel tiles for the dtype (panels_wanted) */
    pdl_panel_fn fn[PDL_DTYPE_COUNT];  /* F32 / F16 / BF16 tile (BF16: of `pairs` or F32 activations) */
    pdl_qpanel_fn qfn[PDL_DTYPE_COUNT];/* Q8_0 / Q4_0 / MXFP4 / IQ4_NL tile */
    pdl_kpanel_fn kfn[PDL_DTYPE_COUNT];/* Q2_K / Q3_K / Q4_K / Q5_K / Q6_K / IQ4_XS / TQ2_0 / TQ1_0 tile */
    bool pairs[PDL_DTYPE_COUNT];       /* BF16 weights take BF16 activation pairs */
    int tile_rows[PDL_DTYPE_COUNT];    /* rows per tile call */
    bool avx2_float[PDL_DTYPE_COUNT];  /* the AVX2 float tiles: larger activation blocks */
    bool avxvnni;                      /* the integer panels take the AVX-VNNI tiles: the AVX2 family, a CPU
                                        * with AVX-VNNI and a build with the tiles (`bench` names it) */
    bool q8k_avx512;                   /* Q8_K activations by kquant_quantize_row_q8_k_avx512 (same bytes) */
    bool bf16_avx512;                  /* BF16 pairs by matmul_f32_to_bf16_avx512 (same bytes) */
    /* matmul_quantize_row_q8_0_sums of the family (same bytes on each) */
    void (*quantize_q8_0)(const float *x, int64_t n, int8_t *qs, float *d, int32_t *sums);
} pdl_panel_kernels;

/* Fills *pk for family isa (cpu_features.h) on this CPU, BF16 weights
 * taking BF16 activations where the family can when bf16_activations. */
void panels_kernels_for(pdl_isa isa, bool bf16_activations, pdl_panel_kernels *pk);


#endif
