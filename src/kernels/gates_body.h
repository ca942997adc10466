/*
 * gates_body.h - cpu_ops.c's SiLU and GELU-tanh gates over whole vectors
 * (the last n % FE_W elements through the portable code), written once for
 * any width and included by cpu_ops_avx2.c (8 lanes) and cpu_ops_neon.c (4
 * lanes); the AVX-512 build masks its tail instead (cpu_ops_avx512.c). The
 * same float operations in the same order as the portable sigmoid_gate, so
 * the same bits.
 *
 * The including file defines what fast_exp_body.h needs, and FE_W,
 * exp_nonpos_v (fexp_nonpos on a vector: the clamp, exp_nonpos_core, the
 * zeroing), fe_load, fe_store, fe_div, fe_abs, fe_neg_select(z, a, b) (a
 * where z < 0, else b), fe_min(a, b) (a < b ? a : b), fe_max(a, b) (a > b ?
 * a : b), and the functions' names GATE_SILU_FN, GATE_GELU_FN and
 * GATE_SWIGLU_OAI_FN.
 */

/* g / (1 + e^-z) * up, e = e^-|z|: g / (1 + e) for z >= 0, g e / (1 + e)
 * below. */
static inline fe_v sigmoid_gate_v(fe_v g, fe_v z, fe_v up) {
    fe_v e = exp_nonpos_v(fe_sub(fe_set1(0.0f), fe_abs(z)));
    fe_v num = fe_neg_select(z, fe_mul(g, e), g);
    return fe_mul(fe_div(num, fe_add(fe_set1(1.0f), e)), up);
}

void GATE_SILU_FN(float *gate, const float *up, int n) {
    int i = 0;
    for (; i + FE_W <= n; i += FE_W) {
        fe_v g = fe_load(gate + i);
        fe_store(gate + i, sigmoid_gate_v(g, g, fe_load(up + i)));
    }
    ops_silu_mul_portable(gate + i, up + i, n - i);
}

void GATE_GELU_FN(float *gate, const float *up, int n) {
    const fe_v k2 = fe_set1(PDL_GELU_2K), c = fe_set1(PDL_GELU_C);
    int i = 0;
    for (; i + FE_W <= n; i += FE_W) {
        fe_v g = fe_load(gate + i);
        fe_v cube = fe_mul(fe_mul(g, g), g);
        fe_v z = fe_mul(k2, fe_add(g, fe_mul(c, cube)));
        fe_store(gate + i, sigmoid_gate_v(g, z, fe_load(up + i)));
    }
    ops_gelu_tanh_mul_portable(gate + i, up + i, n - i);
}

void GATE_SWIGLU_OAI_FN(float *gate, const float *up, int n) {
    const fe_v lim = fe_set1(PDL_SWIGLU_OAI_LIMIT), nlim = fe_set1(-PDL_SWIGLU_OAI_LIMIT);
    const fe_v alpha = fe_set1(PDL_SWIGLU_OAI_ALPHA), one = fe_set1(1.0f);
    int i = 0;
    for (; i + FE_W <= n; i += FE_W) {
        fe_v g = fe_min(fe_load(gate + i), lim);
        fe_v u = fe_max(fe_min(fe_load(up + i), lim), nlim);
        fe_store(gate + i, sigmoid_gate_v(g, fe_mul(alpha, g), fe_add(u, one)));
    }
    ops_swiglu_oai_mul_portable(gate + i, up + i, n - i);
}
