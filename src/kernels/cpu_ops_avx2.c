/*
 * cpu_ops_avx2.c - AVX2 builds of cpu_ops.c's element-wise gates (SiLU, clamped SwiGLU,
 * GELU-tanh): gates_body.h at 8 lanes, the same float operations in the
 * same order as the portable code (no fused multiply-adds), so the same
 * bits.
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
#include "kernels/fast_exp_body.h"

/* fexp_nonpos (fast_exp.h) on 8 lanes: the clamp below -87 (and NaN)
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

#define FE_W 8
#define exp_nonpos_v exp_nonpos8
#define fe_load _mm256_loadu_ps
#define fe_store _mm256_storeu_ps
#define fe_div _mm256_div_ps
#define fe_abs(v) _mm256_and_ps((v), _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff)))
#define fe_neg_select(z, a, b) _mm256_blendv_ps((b), (a), _mm256_cmp_ps((z), _mm256_setzero_ps(), _CMP_LT_OQ))
#define GATE_SILU_FN ops_silu_mul_avx2
#define GATE_GELU_FN ops_gelu_tanh_mul_avx2
#define GATE_SWIGLU_OAI_FN ops_swiglu_oai_mul_avx2
#define fe_min _mm256_min_ps
#define fe_max _mm256_max_ps
#include "kernels/gates_body.h"
#else
void ops_silu_mul_avx2(float *gate, const float *up, int n) { ops_silu_mul_portable(gate, up, n); }
void ops_gelu_tanh_mul_avx2(float *gate, const float *up, int n) { ops_gelu_tanh_mul_portable(gate, up, n); }
void ops_swiglu_oai_mul_avx2(float *gate, const float *up, int n) { ops_swiglu_oai_mul_portable(gate, up, n); }
#endif
