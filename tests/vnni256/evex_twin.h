/*
 * evex_twin.h - the AVX-VNNI panel tiles built with EVEX encoding, for
 * test_weight_panels (evex_twin.c). NULL where not built.
 */
#ifndef PDL_TESTS_VNNI256_EVEX_TWIN_H
#define PDL_TESTS_VNNI256_EVEX_TWIN_H

#include "kernels/weight_panels.h"

extern const pdl_qpanel_fn test_qpanel_q8_0_vnni256_evex, test_qpanel_q4_0_vnni256_evex, test_qpanel_mxfp4_vnni256_evex,
    test_qpanel_iq4_nl_vnni256_evex;
extern const pdl_qpanel_fn test_qpanel_q5_0_vnni256_evex, test_qpanel_q4_1_vnni256_evex, test_qpanel_q5_1_vnni256_evex;
extern const pdl_kpanel_fn test_kpanel_q4_k_vnni256_evex, test_kpanel_q5_k_vnni256_evex, test_kpanel_q6_k_vnni256_evex;
extern const pdl_kpanel_fn test_kpanel_q3_k_vnni256_evex, test_kpanel_q2_k_vnni256_evex;
extern const pdl_kpanel_fn test_kpanel_iq4_xs_vnni256_evex;
extern const pdl_kpanel_fn test_kpanel_tq_vnni256_evex; /* TQ2_0 and TQ1_0 */

#endif
