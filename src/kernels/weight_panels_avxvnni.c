/*
 * weight_panels_avxvnni.c - the 256-bit integer panel tiles (Q8_0, Q4_0,
 * MXFP4, IQ4_NL, Q5_0, Q4_1, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS, TQ2_0, TQ1_0) with AVX-VNNI's VPDPBUSD (Alder Lake and later Intel client
 * cores, Zen 5): weight_panels_int256_body.h built with the VEX-encoded
 * dot product, the same integers and bits as the AVX2 and portable tiles.
 * The AVX2 family uses them where CPUID says the CPU has AVX-VNNI
 * (cpu_features.h). Compiled with AVX2 + FMA + F16C + AVX-VNNI flags where
 * the compiler has them (CMakeLists.txt), else the table is empty.
 */
#include "kernels/weight_panels.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__) && defined(__AVXVNNI__)
#include <immintrin.h>

#define PANEL_VNNI256(acc, w, x) _mm256_dpbusd_avx_epi32(acc, w, x)
#define PANEL_PREFIX(name) ipanel_avxvnni_##name
#include "kernels/weight_panels_int256_body.h"

const pdl_qpanel_fn qpanel_tile_q8_0_avxvnni = ipanel_avxvnni_q8_0;
const pdl_qpanel_fn qpanel_tile_q4_0_avxvnni = ipanel_avxvnni_q4_0;
const pdl_qpanel_fn qpanel_tile_mxfp4_avxvnni = ipanel_avxvnni_mxfp4;
const pdl_qpanel_fn qpanel_tile_iq4_nl_avxvnni = ipanel_avxvnni_iq4_nl;
const pdl_kpanel_fn kpanel_tile_q4_k_avxvnni = ipanel_avxvnni_q4_k;
const pdl_kpanel_fn kpanel_tile_q5_k_avxvnni = ipanel_avxvnni_q5_k;
const pdl_kpanel_fn kpanel_tile_q6_k_avxvnni = ipanel_avxvnni_q6_k;
const pdl_kpanel_fn kpanel_tile_q3_k_avxvnni = ipanel_avxvnni_q3_k;
const pdl_kpanel_fn kpanel_tile_q2_k_avxvnni = ipanel_avxvnni_q2_k;
const pdl_kpanel_fn kpanel_tile_iq4_xs_avxvnni = ipanel_avxvnni_iq4_xs;
const pdl_kpanel_fn kpanel_tile_tq_avxvnni = ipanel_avxvnni_tq;
const pdl_qpanel_fn qpanel_tile_q5_0_avxvnni = ipanel_avxvnni_q5_0;
const pdl_qpanel_fn qpanel_tile_q4_1_avxvnni = ipanel_avxvnni_q4_1;
const pdl_qpanel_fn qpanel_tile_q5_1_avxvnni = ipanel_avxvnni_q5_1;
#else
const pdl_qpanel_fn qpanel_tile_q8_0_avxvnni = NULL;
const pdl_qpanel_fn qpanel_tile_q4_0_avxvnni = NULL;
const pdl_qpanel_fn qpanel_tile_mxfp4_avxvnni = NULL;
const pdl_qpanel_fn qpanel_tile_iq4_nl_avxvnni = NULL;
const pdl_kpanel_fn kpanel_tile_q4_k_avxvnni = NULL;
const pdl_kpanel_fn kpanel_tile_q5_k_avxvnni = NULL;
const pdl_kpanel_fn kpanel_tile_q6_k_avxvnni = NULL;
const pdl_kpanel_fn kpanel_tile_q3_k_avxvnni = NULL;
const pdl_kpanel_fn kpanel_tile_q2_k_avxvnni = NULL;
const pdl_kpanel_fn kpanel_tile_iq4_xs_avxvnni = NULL;
const pdl_kpanel_fn kpanel_tile_tq_avxvnni = NULL;
const pdl_qpanel_fn qpanel_tile_q5_0_avxvnni = NULL;
const pdl_qpanel_fn qpanel_tile_q4_1_avxvnni = NULL;
const pdl_qpanel_fn qpanel_tile_q5_1_avxvnni = NULL;
#endif
