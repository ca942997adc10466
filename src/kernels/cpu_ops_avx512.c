/*
 * cpu_ops_avx512.c - AVX-512 builds of cpu_ops.c's element-wise operations
 * (the SiLU, GELU-tanh and gpt-oss's clamped SwiGLU gates), 16 lanes with the same float operations in the same
 * order as the portable code, so the same bits. Compiled with AVX-512
 * flags (see CMakeLists.txt); called only when the CPU has them.
 */
#include "kernels/cpu_ops.h"

#if defined(__AVX512F__)
#include <immintrin.h>

typedef __m512 fe_v;
typedef __m512i fe_vi;
#define fe_set1 _mm512_set1_ps
#define fe_add _mm512_add_ps
#define fe_sub _mm512_sub_ps
#define fe_mul _mm512_mul_ps
#define fe_cvtt _mm512_cvttps_epi32
#define fe_add_i32 _mm512_add_epi32
#define fe_set1_i32 _mm512_set1_epi32
#define fe_shl23(v) _mm512_slli_epi32((v), 23)
#define fe_as_float _mm512_castsi512_ps
#include "kernels/fast_exp_body.h"

/* fexp_nonpos (fast_exp.h) on 16 lanes: the clamp below -87 (and NaN)
 * with mask registers around the shared core. */
static inline __m512 exp_nonpos16(__m512 z) {
    __m512i u = _mm512_castps_si512(z);
    __mmask16 under = _mm512_cmpgt_epu32_mask(u, _mm512_set1_epi32((int)0xc2ae0000u)) |
                      _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                              _mm512_set1_epi32(0x7f800000));
    __m512 zc = _mm512_castsi512_ps(_mm512_mask_mov_epi32(u, under, _mm512_set1_epi32((int)0xc2ae0000u)));
    return _mm512_maskz_mov_ps((__mmask16)~under, exp_nonpos_core(zc));
}

/* cpu_ops.c's sigmoid_gate on 16 lanes: g / (1 + e^-z) * up. */
static inline __m512 sigmoid_gate16(__m512 g, __m512 z, __m512 up) {
    const __m512 one = _mm512_set1_ps(1.0f), zero = _mm512_setzero_ps();
    __m512 e = exp_nonpos16(_mm512_sub_ps(zero, _mm512_abs_ps(z)));
    __mmask16 neg = _mm512_cmp_ps_mask(z, zero, _CMP_LT_OQ);
    __m512 num = _mm512_mask_mul_ps(g, neg, g, e);
    return _mm512_mul_ps(_mm512_div_ps(num, _mm512_add_ps(one, e)), up);
}

void ops_silu_mul_avx512(float *gate, const float *up, int n) {
    for (int i = 0; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        __m512 g = _mm512_maskz_loadu_ps(m, gate + i);
        _mm512_mask_storeu_ps(gate + i, m, sigmoid_gate16(g, g, _mm512_maskz_loadu_ps(m, up + i)));
    }
}

void ops_gelu_tanh_mul_avx512(float *gate, const float *up, int n) {
    const __m512 k2 = _mm512_set1_ps(PDL_GELU_2K), c = _mm512_set1_ps(PDL_GELU_C);
    for (int i = 0; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        __m512 g = _mm512_maskz_loadu_ps(m, gate + i);
        __m512 cube = _mm512_mul_ps(_mm512_mul_ps(g, g), g);
        __m512 z = _mm512_mul_ps(k2, _mm512_add_ps(g, _mm512_mul_ps(c, cube)));
        _mm512_mask_storeu_ps(gate + i, m, sigmoid_gate16(g, z, _mm512_maskz_loadu_ps(m, up + i)));
    }
}

void ops_swiglu_oai_mul_avx512(float *gate, const float *up, int n) {
    const __m512 lim = _mm512_set1_ps(PDL_SWIGLU_OAI_LIMIT), nlim = _mm512_set1_ps(-PDL_SWIGLU_OAI_LIMIT);
    const __m512 alpha = _mm512_set1_ps(PDL_SWIGLU_OAI_ALPHA), one = _mm512_set1_ps(1.0f);
    for (int i = 0; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        __m512 g = _mm512_min_ps(_mm512_maskz_loadu_ps(m, gate + i), lim);
        __m512 u = _mm512_max_ps(_mm512_min_ps(_mm512_maskz_loadu_ps(m, up + i), lim), nlim);
        _mm512_mask_storeu_ps(gate + i, m, sigmoid_gate16(g, _mm512_mul_ps(alpha, g), _mm512_add_ps(u, one)));
    }
}
#else
void ops_silu_mul_avx512(float *gate, const float *up, int n) { ops_silu_mul_portable(gate, up, n); }
void ops_swiglu_oai_mul_avx512(float *gate, const float *up, int n) { ops_swiglu_oai_mul_portable(gate, up, n); }
void ops_gelu_tanh_mul_avx512(float *gate, const float *up, int n) { ops_gelu_tanh_mul_portable(gate, up, n); }
#endif
