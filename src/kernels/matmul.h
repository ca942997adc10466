/*
 * matmul.h - y = x W^T for F32 activations and F32/F16/BF16/Q8_0 weights.
 *
 * x is (n_rows, in) F32, W is (out, in) in its stored dtype, used in place
 * from the mapping; y is (n_rows, out). Every y[r][o] is one dot product
 * computed by one thread in a fixed order, so it does not depend on n_rows,
 * on the other rows, or on the number of threads (batch invariance).
 */
#ifndef PDL_KERNELS_MATMUL_H
#define PDL_KERNELS_MATMUL_H

#include <stdbool.h>
#include <stdint.h>

#include "format/tensor.h"
#include "kernels/threadpool.h"

/* One dot product of a weight row (in elements of dtype) with x[in]. */
float pdl_dot_row(pdl_dtype dtype, const void *w_row, const float *x, int64_t in);

/* y[r*ldy + o] (=, or += when accumulate) dot(W[o], x[r*in ...]) (+ bias[o]).
 * bias may be NULL. Work is split over output columns. */
void pdl_matmul(pdl_threadpool *pool, float *y, int64_t ldy, const float *x, int64_t n_rows,
                const pdl_tensor *w, const float *bias, bool accumulate);

#endif
