/*
 * matmul_neon_dotprod.c - the NEON family's Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, MXFP4, IQ4_NL, Q2_K, Q3_K, Q4_K, Q5_K,
 * Q6_K, IQ4_XS, TQ2_0 and TQ1_0
 * tiles with SDOT
 * (Armv8.2 DotProd: one instruction gives a lane the exact sum of 4 int8
 * products, the 4-sums the order needs). Compiled with
 * -march=armv8.2-a+dotprod (CMakeLists.txt, scripts/test-aarch64); called
 * only when the kernel reports the feature (cpu_features.c). The same bits
 * as matmul_neon.c's tiles and the portable dot products.
 */
#include "kernels/matmul_table.h"

#if defined(__aarch64__) && defined(__ARM_FEATURE_DOTPROD)
#include <arm_neon.h>

#define TR 4
#define TC 4
#define PF_ROWS 16

static inline void q_sums(int8x16_t w0, int8x16_t w1, int8x16_t x0, int8x16_t x1, int32x4_t *lo, int32x4_t *hi) {
    *lo = vdotq_s32(vdupq_n_s32(0), w0, x0);
    *hi = vdotq_s32(vdupq_n_s32(0), w1, x1);
}
#include "kernels/matmul_neon_q_body.h"

const pdl_tile_kernels matmul_tiles_neon_dotprod = {
    .tile_rows = TR,
    .tile_cols = TC,
    .q8 = tile_q8_0,
    .q4 = tile_q4_0,
    .mxfp4 = tile_mxfp4,
    .iq4nl = tile_iq4_nl,
    .q5_0 = tile_q5_0,
    .q4_1 = tile_q4_1,
    .q5_1 = tile_q5_1,
    .q4k = tile_q4_k,
    .q5k = tile_q5_k,
    .q6k = tile_q6_k,
    .q3k = tile_q3_k,
    .q2k = tile_q2_k,
    .iq4xs = tile_iq4_xs,
    .tq2 = tile_tq2_0,
    .tq1 = tile_tq1_0,
};
#else
/* Not built for this target: the family has no kernels. */
const pdl_tile_kernels matmul_tiles_neon_dotprod = {0};
#endif
