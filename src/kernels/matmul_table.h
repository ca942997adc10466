/*
 * matmul_table.h - the register-tiled inner kernels behind matmul_run, one
 * family per instruction set (matmul_avx512.c, matmul_avx2.c,
 * matmul_neon.c; the portable reference is in matmul.c).
 *
 * A tile computes out[r * ldo + c] = dot(W row c, x row r) for r < rows and
 * c < cols (at most tile_rows x tile_cols). Every element is one
 * accumulator carried over k in a fixed order and reduced in a fixed tree,
 * whatever the tile's size: a row gives the same bits alone or in a batch.
 *
 * Header names in src/kernels say what a header is: `*_table.h` declares
 * dispatch tables (which kernel runs a dtype, per family), `*_body.h` is a
 * kernel body written once and included by each instruction set's .c file
 * (compiled there with that set's flags); any other header is an ordinary
 * interface.
 */
#ifndef PDL_KERNELS_MATMUL_TABLE_H
#define PDL_KERNELS_MATMUL_TABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "format/tensor.h"
#include "kernels/cpu_features.h"
#include "kernels/kquant.h"
#include "kernels/weight_panels.h"

/* stream: the calling matmul has few activation rows (decode, batched
 * decode: at most one row block), so even full tiles stream their weights
 * from memory once and should prefetch them (the driver in matmul.c
 * decides per call; a tile that does not prefetch ignores it). */
typedef void (*pdl_tile_fn)(const float *x, int64_t ldx, int rows, const uint8_t *w, size_t w_row_bytes, int cols,
                            int64_t in, float *out, int64_t ldo, bool stream);

/* Q8_0 weights x Q8_0-quantized activations: row r of x is xq + r*ldb*32
 * int8 values with block scales xd + r*ldb; nb blocks per row. */
typedef void (*pdl_tile_q8_fn)(const int8_t *xq, const float *xd, int64_t ldb, int rows, const uint8_t *w,
                               size_t w_row_bytes, int cols, float *out, int64_t ldo, bool stream);

typedef struct pdl_tile_kernels {
    int tile_rows, tile_cols;
    pdl_tile_fn fn[PDL_DTYPE_COUNT]; /* float activations; NULL: the family lacks this dtype */
    pdl_tile_q8_fn q8;               /* Q8_0 weights; NULL: lacks it */
    pdl_tile_q8_fn q4;               /* Q4_0 weights (same activations); NULL: lacks it */
    pdl_tile_q8_fn mxfp4;            /* MXFP4 weights (same activations); NULL: lacks it */
    pdl_tile_q8_fn iq4nl;            /* IQ4_NL weights (same activations); NULL: lacks it */
    pdl_tile_q8_fn q5_0, q4_1, q5_1; /* Q5_0 / Q4_1 / Q5_1 weights (same activations, kernels/legacy_quant.h);
                                      * NULL: lacks it */
    pdl_tile_kq_fn q4k, q5k, q6k;    /* Q4_K / Q5_K / Q6_K weights x Q8_K activations (kquant.h); NULL: lacks it */
    pdl_tile_kq_fn q3k;              /* Q3_K weights x Q8_K activations; NULL: lacks it */
    pdl_tile_kq_fn q2k;              /* Q2_K weights x Q8_K activations; NULL: lacks it */
    pdl_tile_kq_fn iq4xs;            /* IQ4_XS weights x Q8_K activations (kquant.h); NULL: lacks it */
    pdl_tile_kq_fn tq2, tq1;         /* TQ2_0 / TQ1_0 weights x Q8_K activations (kquant.h); NULL: lacks it */
    /* The tiles take activations rounded to BF16: x then points to uint16
     * values and ldx counts them (matmul.c converts once per call). */
    bool x_bf16;
    /* The tiles take F32 activations reordered within each 32-block as
     * VPUNPCK{L,H}WD lays out 16-bit weights (elements 0-3, 8-11, 16-19,
     * 24-27, then 4-7, 12-15, 20-23, 28-31), rows zero-padded to a multiple
     * of 32 (matmul.c packs them; see matmul_pack_perm32). */
    bool x_perm32;
} pdl_tile_kernels;

extern const pdl_tile_kernels matmul_tiles_avx512;
extern const pdl_tile_kernels matmul_tiles_avx2;
extern const pdl_tile_kernels matmul_tiles_avx512bf16;
extern const pdl_tile_kernels matmul_tiles_avx512_bf16w; /* BF16 weights widened by unpacking */
extern const pdl_tile_kernels matmul_tiles_avx512_vnni;  /* Q2_K .. Q6_K / IQ4_XS / TQ2_0 / TQ1_0 only, with AVX512-VNNI */
extern const pdl_tile_kernels matmul_tiles_neon;
extern const pdl_tile_kernels matmul_tiles_neon_dotprod; /* Q8_0 / Q4_0 / Q2_K .. Q6_K / IQ4_XS / TQ2_0 / TQ1_0 only, with SDOT */
/* x[n] -> dst[round_up(n, 32)] in the x_perm32 order. */
void matmul_pack_perm32(const float *x, int64_t n, float *dst);
void matmul_f32_to_bf16_avx512(const float *src, uint16_t *dst, int64_t n);
/* matmul_quantize_row_q8_0_sums with AVX-512 (matmul_avx512.c): the same bytes. */
void matmul_quantize_row_q8_0_avx512(const float *x, int64_t n, int8_t *qs, float *d, int32_t *sums);
/* The same with AVX2 (matmul_avx2.c): the same bytes. */
void matmul_quantize_row_q8_0_avx2(const float *x, int64_t n, int8_t *qs, float *d, int32_t *sums);
/* The same with NEON (matmul_neon.c; aarch64 only): the same bytes. */
void matmul_quantize_row_q8_0_neon(const float *x, int64_t n, int8_t *qs, float *d, int32_t *sums);

/* The family's matmul_quantize_row_q8_0_sums (the same bytes on each). */
typedef void (*pdl_quantize_q8_0_fn)(const float *x, int64_t n, int8_t *qs, float *d, int32_t *sums);
/* ... of family isa (the portable one for a family without its own). */
pdl_quantize_q8_0_fn matmul_quantizer_q8_0(pdl_isa isa);

/* Every kernel choice of one family, made once (matmul_kernels_for) so that a
 * matmul looks its kernels up instead of asking the CPU and the family in
 * effect on every call: the tiles per weight dtype, the quantizers and the
 * panel kernels. */
typedef struct pdl_kernels {
    pdl_isa isa;
    bool bf16_activations;                          /* BF16 weights take BF16 activations where they can */
    const pdl_tile_kernels *tiles[PDL_DTYPE_COUNT]; /* NULL: the portable dot products */
    bool q8k_avx512;                                /* Q8_K activations by kquant_quantize_row_q8_k_avx512 */
    pdl_quantize_q8_0_fn quantize_q8_0;
    pdl_panel_kernels panels;
} pdl_kernels;

/* Whether BF16 weights use BF16 activations (VDPBF16PS, or its exact
 * emulation in the portable panel tile). On by default where the CPU has
 * AVX512_BF16, off elsewhere; PAGEDLM_BF16_ACTIVATIONS=0 or 1 decides for
 * a process, and the tests set it. The tables made afterwards follow it
 * (matmul_kernels_active); a model's options may choose otherwise. */
void matmul_set_bf16_activations(bool on);
bool matmul_bf16_activations(void);

#endif
