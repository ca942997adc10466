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

typedef __m256 fe_v;
typedef __m256i fe_vi;
#define fe_set1 _mm256_set1_ps
#define fe_add _mm256_add_ps
#define fe_sub _mm256_sub_ps
#define fe_mul _mm256_mul_ps
#define fe_cvtt _mm256_cvttps_epi32
#define fe_add_i32 _mm256_add_epi32
#define fe_set1_i32 _mm256_set1_epi32
#define fe_shl23(v) _mm256_slli_epi32((v), 23)
#define fe_as_float _mm256_castsi256_ps
#include "kernels/fast_exp_vec.h"

/* pdl_exp_nonpos (fast_exp.h) on 8 lanes: the clamp below -87 (and NaN)
 * with vector masks around the shared core. */
static inline __m256 exp_nonpos8(__m256 z) {
    __m256i u = _mm256_castps_si256(z);
    const __m256i sign = _mm256_set1_epi32((int)0x80000000u), limit = _mm256_set1_epi32((int)0xc2ae0000u);
    /* u > 0xc2ae0000 unsigned (below -87), or NaN */
    __m256i under = _mm256_or_si256(
        _mm256_cmpgt_epi32(_mm256_xor_si256(u, sign), _mm256_xor_si256(limit, sign)),
        _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000)));
    __m256 zc = _mm256_castsi256_ps(_mm256_blendv_epi8(u, limit, under));
    return _mm256_andnot_ps(_mm256_castsi256_ps(under), exp_nonpos_core(zc));
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
