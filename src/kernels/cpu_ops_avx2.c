/*
 * cpu_ops_avx2.c - AVX2 builds of cpu_ops.c's element-wise gates (SiLU,
 * GELU-tanh), 8 lanes with the same float operations in the same order as
 * the portable code (no fused multiply-adds), so the same bits; the
 * elements past the last whole vector go through the portable code.
 * Compiled with AVX2 flags (see CMakeLists.txt); called only when the CPU
 * has them.
 */
#include "kernels/cpu_ops.h"

#if defined(__AVX2__)
#include <immintrin.h>

/* pdl_exp_nonpos (fast_exp.h) on 8 lanes. */
static inline __m256 exp_nonpos8(__m256 z) {
    __m256i u = _mm256_castps_si256(z);
    const __m256i sign = _mm256_set1_epi32((int)0x80000000u), limit = _mm256_set1_epi32((int)0xc2ae0000u);
    /* u > 0xc2ae0000 unsigned (below -87), or NaN */
    __m256i under = _mm256_or_si256(
        _mm256_cmpgt_epi32(_mm256_xor_si256(u, sign), _mm256_xor_si256(limit, sign)),
        _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000)));
    __m256 zc = _mm256_castsi256_ps(_mm256_blendv_epi8(u, limit, under));
    __m256 shifter = _mm256_set1_ps(12582912.0f);
    __m256 n = _mm256_sub_ps(_mm256_add_ps(_mm256_mul_ps(zc, _mm256_set1_ps(1.44269504088896341f)), shifter), shifter);
    __m256 r = _mm256_sub_ps(_mm256_sub_ps(zc, _mm256_mul_ps(n, _mm256_set1_ps(0.693359375f))),
                             _mm256_mul_ps(n, _mm256_set1_ps(-2.12194440e-4f)));
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(p, _mm256_mul_ps(r, r)), r), _mm256_set1_ps(1.0f));
    __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(n), _mm256_set1_epi32(127)), 23);
    __m256 out = _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
    return _mm256_andnot_ps(_mm256_castsi256_ps(under), out);
}

/* cpu_ops.c's sigmoid_gate on 8 lanes: g / (1 + e^-z) * up. */
static inline __m256 sigmoid_gate8(__m256 g, __m256 z, __m256 up) {
    const __m256 one = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps();
    __m256 absz = _mm256_and_ps(z, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff)));
    __m256 e = exp_nonpos8(_mm256_sub_ps(zero, absz));
    __m256 neg = _mm256_cmp_ps(z, zero, _CMP_LT_OQ);
    __m256 num = _mm256_blendv_ps(g, _mm256_mul_ps(g, e), neg);
    return _mm256_mul_ps(_mm256_div_ps(num, _mm256_add_ps(one, e)), up);
}

void pdl_silu_mul_avx2(float *gate, const float *up, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 g = _mm256_loadu_ps(gate + i);
        _mm256_storeu_ps(gate + i, sigmoid_gate8(g, g, _mm256_loadu_ps(up + i)));
    }
    pdl_silu_mul_portable(gate + i, up + i, n - i);
}

void pdl_gelu_tanh_mul_avx2(float *gate, const float *up, int n) {
    const __m256 k2 = _mm256_set1_ps(PDL_GELU_2K), c = _mm256_set1_ps(PDL_GELU_C);
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 g = _mm256_loadu_ps(gate + i);
        __m256 cube = _mm256_mul_ps(_mm256_mul_ps(g, g), g);
        __m256 z = _mm256_mul_ps(k2, _mm256_add_ps(g, _mm256_mul_ps(c, cube)));
        _mm256_storeu_ps(gate + i, sigmoid_gate8(g, z, _mm256_loadu_ps(up + i)));
    }
    pdl_gelu_tanh_mul_portable(gate + i, up + i, n - i);
}
#else
void pdl_silu_mul_avx2(float *gate, const float *up, int n) { pdl_silu_mul_portable(gate, up, n); }
void pdl_gelu_tanh_mul_avx2(float *gate, const float *up, int n) { pdl_gelu_tanh_mul_portable(gate, up, n); }
#endif
