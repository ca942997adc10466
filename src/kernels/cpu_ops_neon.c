/*
 * cpu_ops_neon.c - aarch64 Advanced SIMD builds of cpu_ops.c's element-wise
 * gates (SiLU, GELU-tanh, clamped SwiGLU): gates_body.h at 4 lanes, the same float
 * operations in the same order as the portable code (no fused
 * multiply-adds; FDIV is the correctly rounded division), so the same bits.
 */
#include "kernels/cpu_ops.h"

#if defined(__aarch64__)
#include <arm_neon.h>

typedef float32x4_t fe_v;
typedef int32x4_t fe_vi;
#define fe_set1 vdupq_n_f32
#define fe_add vaddq_f32
#define fe_sub vsubq_f32
#define fe_mul vmulq_f32
#define fe_cvtt vcvtq_s32_f32
#define fe_add_i32 vaddq_s32
#define fe_set1_i32 vdupq_n_s32
#define fe_shl23(v) vshlq_n_s32((v), 23)
#define fe_as_float vreinterpretq_f32_s32
#include "kernels/fast_exp_body.h"

/* fexp_nonpos (fast_exp.h) on 4 lanes: the clamp below -87 (and NaN)
 * with lane masks around the shared core. */
static inline float32x4_t exp_nonpos4(float32x4_t z) {
    uint32x4_t u = vreinterpretq_u32_f32(z), limit = vdupq_n_u32(0xc2ae0000u);
    /* u > 0xc2ae0000 unsigned (below -87), or NaN */
    uint32x4_t under = vorrq_u32(vcgtq_u32(u, limit), vcgtq_u32(vandq_u32(u, vdupq_n_u32(0x7fffffffu)),
                                                                 vdupq_n_u32(0x7f800000u)));
    float32x4_t zc = vreinterpretq_f32_u32(vbslq_u32(under, limit, u));
    return vreinterpretq_f32_u32(vbicq_u32(vreinterpretq_u32_f32(exp_nonpos_core(zc)), under));
}

#define FE_W 4
#define exp_nonpos_v exp_nonpos4
#define fe_load vld1q_f32
#define fe_store vst1q_f32
#define fe_div vdivq_f32
#define fe_abs vabsq_f32
#define fe_neg_select(z, a, b) vbslq_f32(vcltq_f32((z), vdupq_n_f32(0.0f)), (a), (b))
#define GATE_SILU_FN ops_silu_mul_neon
#define GATE_GELU_FN ops_gelu_tanh_mul_neon
#define GATE_SWIGLU_OAI_FN ops_swiglu_oai_mul_neon
#define fe_min(a, b) vbslq_f32(vcltq_f32((a), (b)), (a), (b))
#define fe_max(a, b) vbslq_f32(vcgtq_f32((a), (b)), (a), (b))
#include "kernels/gates_body.h"
#else
void ops_silu_mul_neon(float *gate, const float *up, int n) { ops_silu_mul_portable(gate, up, n); }
void ops_gelu_tanh_mul_neon(float *gate, const float *up, int n) { ops_gelu_tanh_mul_portable(gate, up, n); }
void ops_swiglu_oai_mul_neon(float *gate, const float *up, int n) { ops_swiglu_oai_mul_portable(gate, up, n); }
#endif
