/*
 * evex_twin.c - for test_weight_panels only: the AVX-VNNI panel tiles'
 * body (src/kernels/weight_panels_int256_body.h, the same C) built with
 * the EVEX-encoded 256-bit VPDPBUSD of AVX512-VNNI + AVX512VL, so a
 * machine with AVX-512 VNNI but without AVX-VNNI (CPUID gives them
 * separately) still runs that code against the portable tiles. Compiled
 * with those flags (CMakeLists.txt); called only when the CPU has them.
 */
#include "vnni256/evex_twin.h"

#if defined(__AVX512VNNI__) && defined(__AVX512VL__) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>

#define PANEL_VNNI256(acc, w, x) _mm256_dpbusd_epi32(acc, w, x)
#define PANEL_PREFIX(name) evex_twin_##name
#include "kernels/weight_panels_int256_body.h"

const pdl_qpanel_fn test_qpanel_q8_0_vnni256_evex = evex_twin_q8_0;
const pdl_qpanel_fn test_qpanel_q4_0_vnni256_evex = evex_twin_q4_0;
const pdl_qpanel_fn test_qpanel_mxfp4_vnni256_evex = evex_twin_mxfp4;
const pdl_qpanel_fn test_qpanel_iq4_nl_vnni256_evex = evex_twin_iq4_nl;
const pdl_kpanel_fn test_kpanel_q4_k_vnni256_evex = evex_twin_q4_k;
const pdl_kpanel_fn test_kpanel_q5_k_vnni256_evex = evex_twin_q5_k;
const pdl_kpanel_fn test_kpanel_q6_k_vnni256_evex = evex_twin_q6_k;
const pdl_kpanel_fn test_kpanel_q3_k_vnni256_evex = evex_twin_q3_k;
const pdl_kpanel_fn test_kpanel_q2_k_vnni256_evex = evex_twin_q2_k;
const pdl_kpanel_fn test_kpanel_iq4_xs_vnni256_evex = evex_twin_iq4_xs;
const pdl_kpanel_fn test_kpanel_tq_vnni256_evex = evex_twin_tq;
const pdl_qpanel_fn test_qpanel_q5_0_vnni256_evex = evex_twin_q5_0;
const pdl_qpanel_fn test_qpanel_q4_1_vnni256_evex = evex_twin_q4_1;
const pdl_qpanel_fn test_qpanel_q5_1_vnni256_evex = evex_twin_q5_1;
#else
const pdl_qpanel_fn test_qpanel_q8_0_vnni256_evex = NULL;
const pdl_qpanel_fn test_qpanel_q4_0_vnni256_evex = NULL;
const pdl_qpanel_fn test_qpanel_mxfp4_vnni256_evex = NULL;
const pdl_qpanel_fn test_qpanel_iq4_nl_vnni256_evex = NULL;
const pdl_kpanel_fn test_kpanel_q4_k_vnni256_evex = NULL;
const pdl_kpanel_fn test_kpanel_q5_k_vnni256_evex = NULL;
const pdl_kpanel_fn test_kpanel_q6_k_vnni256_evex = NULL;
const pdl_kpanel_fn test_kpanel_q3_k_vnni256_evex = NULL;
const pdl_kpanel_fn test_kpanel_q2_k_vnni256_evex = NULL;
const pdl_kpanel_fn test_kpanel_iq4_xs_vnni256_evex = NULL;
const pdl_kpanel_fn test_kpanel_tq_vnni256_evex = NULL;
const pdl_qpanel_fn test_qpanel_q5_0_vnni256_evex = NULL;
const pdl_qpanel_fn test_qpanel_q4_1_vnni256_evex = NULL;
const pdl_qpanel_fn test_qpanel_q5_1_vnni256_evex = NULL;
#endif
