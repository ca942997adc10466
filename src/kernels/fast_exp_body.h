/*
 * fast_exp_body.h - the float part of fexp_nonpos (fast_exp.h) on one
 * vector, written once for any width and included by cpu_ops_avx2.c (8
 * lanes), cpu_ops_avx512.c (16 lanes) and cpu_ops_neon.c (4 lanes): from the clamped argument zc,
 * n = round(zc / ln2), the reduced r, the polynomial and the scale 2^n,
 * each operation rounded once in fexp_nonpos's order (no fused
 * multiply-adds), so every width gives the portable bits. The caller
 * clamps before and zeroes the lanes below -87 (and NaN) after.
 *
 * The including file defines the vector types fe_v (float) and fe_vi
 * (int32), and fe_set1, fe_add, fe_sub, fe_mul, fe_cvtt (float to int32,
 * truncating), fe_add_i32, fe_set1_i32, fe_shl23 and fe_as_float (the
 * bits of an int vector as floats).
 */
static inline fe_v exp_nonpos_core(fe_v zc) {
    fe_v shifter = fe_set1(12582912.0f);
    fe_v n = fe_sub(fe_add(fe_mul(zc, fe_set1(1.44269504088896341f)), shifter), shifter);
    fe_v r = fe_sub(fe_sub(zc, fe_mul(n, fe_set1(0.693359375f))), fe_mul(n, fe_set1(-2.12194440e-4f)));
    fe_v p = fe_set1(1.9875691500e-4f);
    p = fe_add(fe_mul(p, r), fe_set1(1.3981999507e-3f));
    p = fe_add(fe_mul(p, r), fe_set1(8.3334519073e-3f));
    p = fe_add(fe_mul(p, r), fe_set1(4.1665795894e-2f));
    p = fe_add(fe_mul(p, r), fe_set1(1.6666665459e-1f));
    p = fe_add(fe_mul(p, r), fe_set1(5.0000001201e-1f));
    p = fe_add(fe_add(fe_mul(p, fe_mul(r, r)), r), fe_set1(1.0f));
    fe_vi bits = fe_shl23(fe_add_i32(fe_cvtt(n), fe_set1_i32(127)));
    return fe_mul(p, fe_as_float(bits));
}
