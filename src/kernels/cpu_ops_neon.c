/*
 * cpu_ops_neon.c - aarch64 Advanced SIMD builds of cpu_ops.c's element-wise
 * gates (SiLU, GELU-tanh), 4 lanes with the same float operations in the
 * same order as the portable code (no fused multiply-adds; FDIV is the
 * correctly rounded division), so the same bits; the elements past the
 * last whole vector go through the portable code.
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
#include "kernels/fast_exp_vec.h"

/* pdl_exp_nonpos (fast_exp.h) on 4 lanes: the clamp below -87 (and NaN)
 * with lane masks around the shared core. */
static inline float32x4_t exp_nonpos4(float32x4_t z) {
    uint32x4_t u = vreinterpretq_u32_f32(z), limit = vdupq_n_u32(0xc2ae0000u);
    /* u > 0xc2ae0000 unsigned (below -87), or NaN */
    uint32x4_t under = vorrq_u32(vcgtq_u32(u, limit), vcgtq_u32(vandq_u32(u, vdupq_n_u32(0x7fffffffu)),
                                                                 vdupq_n_u32(0x7f800000u)));
    float32x4_t zc = vreinterpretq_f32_u32(vbslq_u32(under, limit, u));
    return vreinterpretq_f32_u32(vbicq_u32(vreinterpretq_u32_f32(exp_nonpos_core(zc)), under));
}

/* cpu_ops.c's sigmoid_gate on 4 lanes: g / (1 + e^-z) * up. */
static inline float32x4_t sigmoid_gate4(float32x4_t g, float32x4_t z, float32x4_t up) {
    const float32x4_t one = vdupq_n_f32(1.0f), zero = vdupq_n_f32(0.0f);
    float32x4_t e = exp_nonpos4(vsubq_f32(zero, vabsq_f32(z)));
    uint32x4_t neg = vcltq_f32(z, zero);
    float32x4_t num = vbslq_f32(neg, vmulq_f32(g, e), g);
    return vmulq_f32(vdivq_f32(num, vaddq_f32(one, e)), up);
}

void pdl_silu_mul_neon(float *gate, const float *up, int n) {
    int i = 0;
    for (; i + 4 <= n; i += 4) {
        float32x4_t g = vld1q_f32(gate + i);
        vst1q_f32(gate + i, sigmoid_gate4(g, g, vld1q_f32(up + i)));
    }
    pdl_silu_mul_portable(gate + i, up + i, n - i);
}

void pdl_gelu_tanh_mul_neon(float *gate, const float *up, int n) {
    const float32x4_t k2 = vdupq_n_f32(PDL_GELU_2K), c = vdupq_n_f32(PDL_GELU_C);
    int i = 0;
    for (; i + 4 <= n; i += 4) {
        float32x4_t g = vld1q_f32(gate + i);
        float32x4_t cube = vmulq_f32(vmulq_f32(g, g), g);
        float32x4_t z = vmulq_f32(k2, vaddq_f32(g, vmulq_f32(c, cube)));
        vst1q_f32(gate + i, sigmoid_gate4(g, z, vld1q_f32(up + i)));
    }
    pdl_gelu_tanh_mul_portable(gate + i, up + i, n - i);
}
#else
void pdl_silu_mul_neon(float *gate, const float *up, int n) { pdl_silu_mul_portable(gate, up, n); }
void pdl_gelu_tanh_mul_neon(float *gate, const float *up, int n) { pdl_gelu_tanh_mul_portable(gate, up, n); }
#endif
