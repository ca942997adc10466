/*
 * matmul_tiles.h - the register-tiled inner kernels behind pdl_matmul, one
 * family per instruction set (matmul_avx512.c, matmul_avx2.c; the portable
 * reference is in matmul.c).
 *
 * A tile computes out[r * ldo + c] = dot(W row c, x row r) for r < rows and
 * c < cols (at most tile_rows x tile_cols). Every element is one
 * accumulator carried over k in a fixed order and reduced in a fixed tree,
 * whatever the tile's size: a row gives the same bits alone or in a batch.
 */
#ifndef PDL_KERNELS_MATMUL_TILES_H
#define PDL_KERNELS_MATMUL_TILES_H

#include <stddef.h>
#include <stdint.h>

#include "format/tensor.h"

typedef void (*pdl_tile_fn)(const float *x, int64_t ldx, int rows, const uint8_t *w, size_t w_row_bytes, int cols,
                            int64_t in, float *out, int64_t ldo);

typedef struct pdl_tile_kernels {
    int tile_rows, tile_cols;
    pdl_tile_fn fn[PDL_DTYPE_COUNT]; /* NULL: the family lacks this dtype */
} pdl_tile_kernels;

extern const pdl_tile_kernels pdl_tiles_avx512;
extern const pdl_tile_kernels pdl_tiles_avx2;

#endif
