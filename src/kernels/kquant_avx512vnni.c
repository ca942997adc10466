/*
 * kquant_avx512vnni.c - the Q2_K / Q3_K / Q4_K / Q5_K / Q6_K / IQ4_XS / TQ2_0 / TQ1_0 x Q8_K tiles with
 * AVX512-VNNI (VPDPWSSD, VPDPBUSD for the ternary types; the body is kquant_avx512_body.h), as the kernel family
 * matmul_tiles_avx512_vnni that matmul.c picks for those weights when the CPU
 * has VNNI. Compiled with AVX-512 + VNNI flags (CMakeLists.txt).
 */
#include "kernels/matmul_table.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
#define KQ_VNNI 1
#define KQ_NAME(x) kq_vnni_##x
#include "kernels/kquant_avx512_body.h"

const pdl_tile_kernels matmul_tiles_avx512_vnni = {
    .tile_rows = TR,
    .tile_cols = TC,
    .q4k = kq_vnni_tile_q4_k,
    .q5k = kq_vnni_tile_q5_k,
    .q6k = kq_vnni_tile_q6_k,
    .q3k = kq_vnni_tile_q3_k,
    .q2k = kq_vnni_tile_q2_k,
    .iq4xs = kq_vnni_tile_iq4_xs,
    .tq2 = kq_vnni_tile_tq2_0,
    .tq1 = kq_vnni_tile_tq1_0,
};
#else
/* Not built for this target: the family has no kernels. */
const pdl_tile_kernels matmul_tiles_avx512_vnni = {0};
#endif
