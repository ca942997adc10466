/*
 * cpu_ops.h - the element-wise and per-row operations of the forward pass
 * on the CPU: RMSNorm, LayerNorm, RoPE, SiLU- and GELU-gated products,
 * embedding row lookup.
 *
 * Pure functions over plain pointers and sizes. Each reduces in a fixed
 * order per row, so a row's result never depends on the rest of the batch.
 */
#ifndef PDL_KERNELS_CPU_OPS_H
#define PDL_KERNELS_CPU_OPS_H

#include <stdint.h>

#include "format/tensor.h"
#include "kernels/cpu_features.h"

/* out[i] = x[i] / sqrt(mean(x^2) + eps) * w[i], for i < n. out may be x. */
void ops_rmsnorm(float *out, const float *x, const float *w, int n, float eps);

/* out[i] = (x[i] - mean(x)) / sqrt(var(x) + eps) * w[i]: LayerNorm without
 * a bias (Command-R). out may be x. */
void ops_layernorm(float *out, const float *x, const float *w, int n, float eps);

/* Rotates one head vector x[head_dim] in place for position pos.
 * neox: pairs (i, i + rope_dim/2); otherwise adjacent pairs (2i, 2i+1).
 * inv_freq[rope_dim/2] holds the per-pair angular frequencies. */
void ops_rope(float *x, int rope_dim, int pos, const float *inv_freq, int neox);

/* The same rotation split in two: the angles' cosines and sines of one
 * position (cs[0..half) cos, cs[half..2*half) sin; computed once per row and
 * shared by every head and layer), then their application. Same bits as
 * ops_rope. */
void ops_rope_angles(float *cs, int rope_dim, int pos, const float *inv_freq);
void ops_rope_apply(float *x, int rope_dim, const float *cs, int neox);

/* ops_rope_angles for M-RoPE (Qwen2-VL, Qwen2.5-VL): the rope_dim/2
 * frequency pairs are cut into three consecutive sections of
 * sections[0], sections[1], sections[2] pairs (their sum rope_dim/2), and
 * pair i of section j turns by pos3[j] (the row's temporal, height, width
 * position) instead of one position. Equal components give ops_rope_angles'
 * bits. */
void ops_rope_angles_sections(float *cs, int rope_dim, const int32_t pos3[3], const int sections[3],
                              const float *inv_freq);

/* gate[i] = silu(gate[i]) * up[i], silu(g) = g / (1 + e^-g) with e^-|g|
 * from fexp_nonpos (fast_exp.h: no libm call, the same bits on every
 * build): g / (1 + e) for g >= 0, g e / (1 + e) below. The portable,
 * AVX2 (cpu_ops_avx2.c), AVX-512 (cpu_ops_avx512.c) and NEON
 * (cpu_ops_neon.c) builds give the same bits; ops_silu_mul picks the process's. */
void ops_silu_mul(float *gate, const float *up, int n);
void ops_silu_mul_portable(float *gate, const float *up, int n);
void ops_silu_mul_avx512(float *gate, const float *up, int n);
void ops_silu_mul_avx2(float *gate, const float *up, int n);
void ops_silu_mul_neon(float *gate, const float *up, int n);

/* gate[i] = gelu_tanh(gate[i]) * up[i], GELU's tanh approximation
 * (PyTorch's gelu(approximate="tanh"), Gemma's gelu_pytorch_tanh):
 * 0.5 g (1 + tanh(u)), u = sqrt(2/pi) (g + 0.044715 g^3), computed as the
 * equal g / (1 + e^-2u) (1 + tanh(u) = 2 / (1 + e^-2u)), so the SiLU
 * gate's form with z = 2u: z = 2 sqrt(2/pi) * (g + 0.044715 * (g * g * g))
 * in float, e = e^-|z| from fexp_nonpos, then g / (1 + e) for z >= 0
 * and g e / (1 + e) below, times up. No libm call; the portable, AVX2,
 * AVX-512 and NEON builds give the same bits; within 2e-6 relative of the float64
 * definition (the rounding of z, amplified by |z| in e^-|z|). */
#define PDL_GELU_2K 1.59576912160573071176f /* 2 sqrt(2 / pi) */
#define PDL_GELU_C 0.044715f
void ops_gelu_tanh_mul(float *gate, const float *up, int n);
void ops_gelu_tanh_mul_portable(float *gate, const float *up, int n);
void ops_gelu_tanh_mul_avx512(float *gate, const float *up, int n);
void ops_gelu_tanh_mul_avx2(float *gate, const float *up, int n);
void ops_gelu_tanh_mul_neon(float *gate, const float *up, int n);

/* gate[i] = (u + 1) * g * sigmoid(1.702 g), g = min(gate[i], 7),
 * u = clamp(up[i], -7, 7): gpt-oss's clamped SwiGLU (modeling_gpt_oss.py;
 * llama.cpp's swiglu_oai, alpha 1.702 and limit 7 fixed as there), in
 * the SiLU gate's form with z = 1.702 g and up + 1 for up; min and max as
 * a < b ? a : b (the SIMD min/max). The portable, AVX2, AVX-512 and NEON
 * builds give the same bits; within 4e-7 relative of the float64
 * definition. */
#define PDL_SWIGLU_OAI_ALPHA 1.702f
#define PDL_SWIGLU_OAI_LIMIT 7.0f
void ops_swiglu_oai_mul(float *gate, const float *up, int n);
void ops_swiglu_oai_mul_portable(float *gate, const float *up, int n);
void ops_swiglu_oai_mul_avx512(float *gate, const float *up, int n);
void ops_swiglu_oai_mul_avx2(float *gate, const float *up, int n);
void ops_swiglu_oai_mul_neon(float *gate, const float *up, int n);

/* One family's MLP gates, chosen once (a pdl_context fills its table when
 * it is made) and handed to the gated matmul as they are, with no dispatch
 * per call; ops_silu_mul and ops_gelu_tanh_mul pick the process's family
 * per call (the vision encoder, the tests). */
typedef struct pdl_gate_table {
    pdl_isa isa; /* the family it was filled for */
    void (*silu_mul)(float *gate, const float *up, int n);
    void (*gelu_tanh_mul)(float *gate, const float *up, int n);
    void (*swiglu_oai_mul)(float *gate, const float *up, int n);
} pdl_gate_table;
/* The table of family isa (the portable gates for a family this build lacks). */
void ops_gate_table_for(pdl_isa isa, pdl_gate_table *t);

/* out[n] = row `row` of a (rows, n) matrix of any supported dtype, as F32
 * (MLX types: scale * q + bias per group, from t->mlx). 0, or -1 (out not
 * written) for a dtype it cannot dequantize: the caller names the tensor. */
int ops_dequant_row(const pdl_tensor *t, int64_t row, float *out, int64_t n);
/* out[n] = n elements of dtype stored at src (whole blocks), as F32 with
 * ggml's dequantization arithmetic; src needs no alignment. Not for the MLX
 * types, whose scales live outside the blocks (use ops_dequant_row). 0, or
 * -1 (out not written) for a dtype without a dequantization. */
int ops_dequant_blocks(pdl_dtype dtype, const void *src, float *out, int64_t n);

#endif
