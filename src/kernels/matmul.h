/*
 * matmul.h - y = x W^T for F32 activations and F32/F16/BF16 or GGUF block
 * format weights.
 *
 * x is (n_rows, in) F32, W is (out, in) in its stored dtype, used in place
 * (Q8_0, Q4_0, MXFP4, IQ4_NL, Q5_0, Q4_1 and Q5_1 weights: x is quantized to Q8_0 first, see
 * matmul_quantize_row_q8_0; Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS, TQ2_0 and TQ1_0 weights: to Q8_K, see kquant.h;
 * the other block formats are expanded to F32 a weight row at a time, a
 * slow path until they have kernels)
 * from the mapping, or from the copy in weight panels the model loader
 * made (w->panels; kernels/weight_panels.h, which defines that path's
 * order); y is (n_rows, out). Every y[r][o] is one dot product computed by
 * one thread in a fixed order, so it does not depend on n_rows, on the
 * other rows, or on the number of threads (batch invariance).
 *
 * Every entry point takes the caller's scratch (scratch.h) for the
 * activations it prepares once per call and returns 0, or -1 when that
 * scratch cannot be had: then its outputs are not written (or, for a call
 * of several products, not all of them) and the caller must report the
 * failure, never use them.
 */
#ifndef PDL_KERNELS_MATMUL_H
#define PDL_KERNELS_MATMUL_H

#include <stdbool.h>
#include <stdint.h>

#include "format/tensor.h"
#include "kernels/cpu_features.h"
#include "kernels/scratch.h"
#include "kernels/threadpool.h"

/* Every kernel choice of one family (instruction set, CPU features, BF16
 * activation mode), made once: the tiles, quantizers and panel kernels
 * each entry point below takes (matmul_table.h has its fields). A model
 * loader decides with it which weights get panels, a context keeps one
 * for its forward. */
typedef struct pdl_kernels pdl_kernels;

/* Fills *k for family isa on this CPU (isa need not be supported: a table
 * is only data until it runs). */
void matmul_kernels_for(pdl_isa isa, bool bf16_activations, pdl_kernels *k);

/* The table of the process-wide family in effect (cpu_isa_active) and BF16
 * mode (matmul_bf16_activations), each filled once per process: what a
 * model, context or vision model copies when it is made, and what tests
 * and matmul_quantize_row_q8_0 use. Not for a hot path that has a context. */
const pdl_kernels *matmul_kernels_active(void);

/* Q8_0 and Q4_0 weights multiply Q8_0-quantized activations, as llama.cpp does:
 * x[n] -> n/32 blocks of 32 int8 (nearest, ties to even) and a scale
 * amax/127 rounded through half precision. */
void matmul_quantize_row_q8_0(const float *x, int64_t n, int8_t *qs, float *d);
/* The same, and each block's sum of its 32 quantized values in sums[n / 32]
 * (NULL: not wanted). Same bytes on every instruction set. */
void matmul_quantize_row_q8_0_sums(const float *x, int64_t n, int8_t *qs, float *d, int32_t *sums);

/* Whether some kernel multiplies weights of this dtype (F32, F16, BF16,
 * every block format, MLX); a loader refuses a matrix of any other (U32,
 * ...) rather than have it multiply as zeros. */
bool matmul_supports(pdl_dtype dtype);

/* Whether weights of this dtype have dot kernels of their own (F32, F16,
 * BF16, Q8_0, Q4_0, MXFP4, IQ4_NL, Q5_0, Q4_1, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS, TQ2_0, TQ1_0); other block formats are expanded
 * to F32 row by row on every call (correct, several times slower). */
bool matmul_has_dot(pdl_dtype dtype);

/* y[r*ldy + o] (=, or += when accumulate) dot(W[o], x[r*in ...]) (+ bias[o]).
 * bias may be NULL. Work is split over output columns. -1 (y untouched)
 * when the scratch cannot be had (scratch->failed: its bytes), or when no
 * kernel takes w's dtype (scratch->failed: 0; the loaders refuse such
 * weights first). */
int matmul_run(const pdl_kernels *kernels, pdl_threadpool *pool, pdl_scratch *scratch, float *y, int64_t ldy,
               const float *x, int64_t n_rows, const pdl_tensor *w, const float *bias, bool accumulate);

/* Bytes of scratch matmul_run takes for n_rows rows times w (and each
 * product of matmul_shared / _gated / _grouped, whose activations are
 * those rows): a caller reserves the largest of its matrices' ahead of its
 * hot path. Grows with n_rows. */
size_t matmul_scratch_bytes(const pdl_kernels *kernels, pdl_threadpool *pool, const pdl_tensor *w, int64_t n_rows);

/* One product of matmul_shared, with matmul_run's arguments. */
typedef struct pdl_matmul_out {
    float *y;
    int64_t ldy;
    const pdl_tensor *w;
    const float *bias;   /* may be NULL */
    bool accumulate;
} pdl_matmul_out;

#define PDL_MATMUL_SHARED_MAX 4

/* Up to PDL_MATMUL_SHARED_MAX matrices times the same activations (Q, K
 * and V; gate and up): each output exactly as matmul_run gives it, but
 * where all the matrices have weight panels of one dtype and width, the
 * activations are prepared once and one parallel region splits all their
 * panels over the threads (one wake-up instead of one per matrix). */
int matmul_shared(const pdl_kernels *kernels, pdl_threadpool *pool, pdl_scratch *scratch, const float *x,
                  int64_t n_rows, const pdl_matmul_out *outs, int n_outs);

/* A gated MLP's activation: gate[i] = act(gate[i]) * up[i] for i < n
 * (ops_silu_mul, ops_gelu_tanh_mul). */
typedef void (*pdl_gate_fn)(float *gate, const float *up, int n);

/* One matrix of matmul_grouped: rows [r0, r0 + n_rows) of the shared
 * activations times w (gated: act(x w^T, x w_up^T)), output row r0 + i at
 * y + i * ldy. */
typedef struct pdl_matmul_group {
    const pdl_tensor *w, *w_up;
    float *y;
    int64_t ldy;
    int64_t r0, n_rows;
} pdl_matmul_group;

#define PDL_MATMUL_GROUP_MAX 64

/* Several matrices, each over its own rows of x (n_rows, in): a MoE layer's
 * experts, each over the rows routed to it. Each output row exactly as
 * matmul_run (matmul_gated with act) gives it for that row; where all
 * the matrices have weight panels of one dtype and width, x is prepared
 * once and one parallel region runs them all (at most PDL_MATMUL_GROUP_MAX
 * per call; more run in several). up: scratch (n_rows, w's rows) for the
 * gated fallback, or NULL without act. */
int matmul_grouped(const pdl_kernels *kernels, pdl_threadpool *pool, pdl_scratch *scratch, const float *x,
                   int64_t n_rows, const pdl_matmul_group *groups, int n_groups, pdl_gate_fn act, float *up);

/* gate[r][o] = act(x w_gate^T, x w_up^T) (ldg floats per row; up: a
 * scratch of the same shape): the gated MLP's two products and its
 * activation, exactly as matmul_shared and then act over each row give
 * it. Where both matrices have panels of one dtype and shape, each tile of
 * the up product is made right after the gate's and combined while both
 * are in L1, so `up` is not written at all. */
int matmul_gated(const pdl_kernels *kernels, pdl_threadpool *pool, pdl_scratch *scratch, float *gate, int64_t ldg,
                 float *up, const float *x, int64_t n_rows, const pdl_tensor *w_gate, const pdl_tensor *w_up,
                 pdl_gate_fn act);

#endif
