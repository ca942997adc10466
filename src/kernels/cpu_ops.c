/*
 * cpu_ops.c - RMSNorm, LayerNorm, RoPE, SiLU/GELU gates and row dequantization
 * (GGUF block formats and MLX affine quantization; portable C).
 */
#include "kernels/cpu_ops.h"

#include <math.h>
#include <string.h>

#include "kernels/cpu_features.h"
#include "kernels/fast_exp.h"
#include "kernels/fp16.h"
#include "kernels/iq4nl.h"
#include "kernels/kquant.h"
#include "kernels/mxfp4.h"

void ops_rmsnorm(float *out, const float *x, const float *w, int n, float eps) {
    /* Sum of squares in double: exact enough to match float64 references.
     * Eight partial sums (lane l adds elements l, l + 8, ...) in a fixed
     * tree, which the compiler vectorises: a single running sum waits for
     * each add. */
    double lane[8] = {0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++) lane[l] += (double)x[i + l] * (double)x[i + l];
    for (int l = 0; i + l < n; l++) lane[l] += (double)x[i + l] * (double)x[i + l];
    double ss = ((lane[0] + lane[4]) + (lane[2] + lane[6])) + ((lane[1] + lane[5]) + (lane[3] + lane[7]));
    float scale = (float)(1.0 / sqrt(ss / n + (double)eps));
    for (int i = 0; i < n; i++) out[i] = x[i] * scale * w[i];
}

void ops_layernorm(float *out, const float *x, const float *w, int n, float eps) {
    /* Mean and variance in double, as ops_rmsnorm's sum of squares. */
    double sum = 0.0;
    for (int i = 0; i < n; i++) sum += x[i];
    float mean = (float)(sum / n);
    double ss = 0.0;
    for (int i = 0; i < n; i++) {
        double d = (double)(x[i] - mean);
        ss += d * d;
    }
    float scale = (float)(1.0 / sqrt(ss / n + (double)eps));
    for (int i = 0; i < n; i++) out[i] = (x[i] - mean) * scale * w[i];
}

void ops_rope_angles(float *cs, int rope_dim, int pos, const float *inv_freq) {
    int half = rope_dim / 2;
    for (int i = 0; i < half; i++) {
        double theta = (double)pos * (double)inv_freq[i];
        cs[i] = (float)cos(theta);
        cs[half + i] = (float)sin(theta);
    }
}

void ops_rope_angles_sections(float *cs, int rope_dim, const int32_t pos3[3], const int sections[3],
                              const float *inv_freq) {
    int half = rope_dim / 2, section = 0, section_end = sections[0];
    for (int i = 0; i < half; i++) {
        while (i >= section_end && section < 2) section_end += sections[++section];
        double theta = (double)pos3[section] * (double)inv_freq[i];
        cs[i] = (float)cos(theta);
        cs[half + i] = (float)sin(theta);
    }
}

void ops_rope_apply(float *x, int rope_dim, const float *cs, int neox) {
    int half = rope_dim / 2;
    for (int i = 0; i < half; i++) {
        float c = cs[i], s = cs[half + i];
        int a = neox ? i : 2 * i;
        int b = neox ? i + half : 2 * i + 1;
        float x0 = x[a], x1 = x[b];
        x[a] = x0 * c - x1 * s;
        x[b] = x0 * s + x1 * c;
    }
}

void ops_rope(float *x, int rope_dim, int pos, const float *inv_freq, int neox) {
    float cs[1024];
    if (rope_dim > 1024) return; /* no model has heads this wide; the loader refuses them */
    ops_rope_angles(cs, rope_dim, pos, inv_freq);
    ops_rope_apply(x, rope_dim, cs, neox);
}

/* g / (1 + e^-z) * up, with e = e^-|z|: g / (1 + e) for z >= 0, g e /
 * (1 + e) below (no overflow for either sign). SiLU: z = g. */
static inline float sigmoid_gate(float g, float z, float up) {
    float e = fexp_nonpos(-fabsf(z));
    float num = z < 0.0f ? g * e : g;
    return num / (1.0f + e) * up;
}

void ops_silu_mul_portable(float *gate, const float *up, int n) {
    for (int i = 0; i < n; i++) gate[i] = sigmoid_gate(gate[i], gate[i], up[i]);
}

void ops_swiglu_oai_mul_portable(float *gate, const float *up, int n) {
    const float L = PDL_SWIGLU_OAI_LIMIT;
    for (int i = 0; i < n; i++) {
        float g = gate[i] < L ? gate[i] : L, u = up[i] < L ? up[i] : L;
        u = u > -L ? u : -L;
        gate[i] = sigmoid_gate(g, PDL_SWIGLU_OAI_ALPHA * g, u + 1.0f);
    }
}

void ops_gate_table_for(pdl_isa isa, pdl_gate_table *t) {
    t->isa = isa;
    switch (isa) {
    case PDL_ISA_AVX512:
        t->silu_mul = ops_silu_mul_avx512, t->gelu_tanh_mul = ops_gelu_tanh_mul_avx512;
        t->swiglu_oai_mul = ops_swiglu_oai_mul_avx512;
        break;
    case PDL_ISA_AVX2:
        t->silu_mul = ops_silu_mul_avx2, t->gelu_tanh_mul = ops_gelu_tanh_mul_avx2;
        t->swiglu_oai_mul = ops_swiglu_oai_mul_avx2;
        break;
    case PDL_ISA_NEON:
        t->silu_mul = ops_silu_mul_neon, t->gelu_tanh_mul = ops_gelu_tanh_mul_neon;
        t->swiglu_oai_mul = ops_swiglu_oai_mul_neon;
        break;
    default:
        t->isa = PDL_ISA_SCALAR;
        t->silu_mul = ops_silu_mul_portable, t->gelu_tanh_mul = ops_gelu_tanh_mul_portable;
        t->swiglu_oai_mul = ops_swiglu_oai_mul_portable;
    }
}

void ops_swiglu_oai_mul(float *gate, const float *up, int n) {
    pdl_gate_table t;
    ops_gate_table_for(cpu_isa_active(), &t);
    t.swiglu_oai_mul(gate, up, n);
}

void ops_silu_mul(float *gate, const float *up, int n) {
    pdl_gate_table t;
    ops_gate_table_for(cpu_isa_active(), &t);
    t.silu_mul(gate, up, n);
}

void ops_gelu_tanh_mul_portable(float *gate, const float *up, int n) {
    for (int i = 0; i < n; i++) {
        float g = gate[i];
        gate[i] = sigmoid_gate(g, PDL_GELU_2K * (g + PDL_GELU_C * (g * g * g)), up[i]);
    }
}

void ops_gelu_tanh_mul(float *gate, const float *up, int n) {
    pdl_gate_table t;
    ops_gate_table_for(cpu_isa_active(), &t);
    t.gelu_tanh_mul(gate, up, n);
}

/* ---- block formats ---------------------------------------------------------
 * Each function expands nb blocks at src into out[nb * block elems], with
 * the float operations in the order ggml's dequantize_row_* uses, so the
 * values are the bits llama.cpp computes. */

static float half_at(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return fp16_f16_to_f32(h);
}

/* Q4_0 / Q4_1: byte j holds element j (low nibble) and j + 16 (high). */
static void dequant_q4_0(const uint8_t *src, float *out, int64_t nb) {
    for (int64_t b = 0; b < nb; b++, src += 18, out += 32) {
        float d = half_at(src);
        for (int j = 0; j < 16; j++) {
            out[j] = (float)((src[2 + j] & 0xF) - 8) * d;
            out[j + 16] = (float)((src[2 + j] >> 4) - 8) * d;
        }
    }
}

static void dequant_q4_1(const uint8_t *src, float *out, int64_t nb) {
    for (int64_t b = 0; b < nb; b++, src += 20, out += 32) {
        float d = half_at(src), m = half_at(src + 2);
        for (int j = 0; j < 16; j++) {
            out[j] = (float)(src[4 + j] & 0xF) * d + m;
            out[j + 16] = (float)(src[4 + j] >> 4) * d + m;
        }
    }
}

/* Q5_0 / Q5_1: as Q4 with a fifth bit for element i at bit i of the u32. */
static void dequant_q5(const uint8_t *src, float *out, int64_t nb, int with_min) {
    size_t hdr = with_min ? 4 : 2, bytes = hdr + 4 + 16;
    for (int64_t b = 0; b < nb; b++, src += bytes, out += 32) {
        float d = half_at(src), m = with_min ? half_at(src + 2) : 0.0f;
        uint32_t qh;
        memcpy(&qh, src + hdr, 4);
        const uint8_t *qs = src + hdr + 4;
        for (int j = 0; j < 16; j++) {
            int lo = (qs[j] & 0xF) | (int)((qh >> j) & 1) << 4;
            int hi = (qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
            if (with_min) {
                out[j] = (float)lo * d + m;
                out[j + 16] = (float)hi * d + m;
            } else {
                out[j] = (float)(lo - 16) * d;
                out[j + 16] = (float)(hi - 16) * d;
            }
        }
    }
}

/* Q2_K: 16 sub-blocks of 16; scale byte s: low nibble scales d, high
 * nibble scales dmin. Element e: byte qs[32 * (e / 128) + e % 32], bits
 * 2 * ((e % 128) / 32), sub-block e / 16. */
static void dequant_q2_k(const uint8_t *src, float *out, int64_t nb) {
    for (int64_t b = 0; b < nb; b++, src += 84, out += 256) {
        const uint8_t *sc = src, *qs = src + 16;
        float d = half_at(src + 80), dmin = half_at(src + 82);
        for (int e = 0; e < 256; e++) {
            int s = sc[e / 16], q = (qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
            float dl = d * (float)(s & 0xF), ml = dmin * (float)(s >> 4);
            out[e] = dl * (float)q - ml;
        }
    }
}

/* Q3_K: 2 low bits as Q2_K, the third bit in hmask[e % 32] bit e / 32
 * (set: q, clear: q - 4); 16 six-bit scales (minus 32) packed in 12 bytes:
 * low nibble in byte i (i < 8) or the high nibble of byte i - 8, the top 2
 * bits in byte 8 + i % 4 at bit 2 * (i / 4). */
static void dequant_q3_k(const uint8_t *src, float *out, int64_t nb) {
    for (int64_t b = 0; b < nb; b++, src += 110, out += 256) {
        const uint8_t *hm = src, *qs = src + 32, *sb = src + 96;
        float d = half_at(src + 108);
        for (int e = 0; e < 256; e++) {
            int i = e / 16;
            int lo = i < 8 ? sb[i] & 0xF : sb[i - 8] >> 4, top = (sb[8 + i % 4] >> (2 * (i / 4))) & 3;
            int scale = (lo | top << 4) - 32;
            int q = (qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
            if (!(hm[e % 32] & (1 << (e / 32)))) q -= 4;
            float dl = d * (float)scale;
            out[e] = dl * (float)q;
        }
    }
}

/* Element e: byte qs[32 * (e / 64) + e % 32], low nibble when (e / 32) is
 * even; Q5_K's fifth bit is qh[e % 32] bit e / 32. */
static void dequant_q45_k(const uint8_t *src, float *out, int64_t nb, int five) {
    size_t bytes = five ? 176 : 144;
    for (int64_t b = 0; b < nb; b++, src += bytes, out += 256) {
        float d = half_at(src), dmin = half_at(src + 2);
        const uint8_t *sb = src + 4, *qh = src + 16, *qs = src + (five ? 48 : 16);
        for (int j = 0; j < 8; j++) {
            int sc, mn;
            kquant_scale_min(sb, j, &sc, &mn);
            float dl = d * (float)sc, ml = dmin * (float)mn;
            for (int l = 0; l < 32; l++) {
                int e = 32 * j + l;
                int q = (qs[32 * (j / 2) + l] >> (4 * (j % 2))) & 0xF;
                if (five && (qh[l] & (1 << j))) q += 16;
                out[e] = dl * (float)q - ml;
            }
        }
    }
}

/* Q6_K: 16 sub-blocks of 16 with int8 scales. Element e in half h = e / 128,
 * r = e % 128, quarter k = r / 32, l = r % 32: low 4 bits from
 * ql[64h + l + 32 (k odd)] (high nibble when k >= 2), top 2 bits from
 * qh[32h + l] bits 2k; value minus 32, scale scales[8h + l / 16 + 2k]. */
static void dequant_q6_k(const uint8_t *src, float *out, int64_t nb) {
    for (int64_t b = 0; b < nb; b++, src += 210, out += 256) {
        const uint8_t *ql = src, *qh = src + 128;
        const int8_t *sc = (const int8_t *)(src + 192);
        float d = half_at(src + 208);
        for (int e = 0; e < 256; e++) {
            int h = e / 128, k = (e % 128) / 32, l = e % 32;
            int lo = (ql[64 * h + l + 32 * (k % 2)] >> (4 * (k / 2))) & 0xF;
            int q = (lo | ((qh[32 * h + l] >> (2 * k)) & 3) << 4) - 32;
            out[e] = d * (float)sc[8 * h + l / 16 + 2 * k] * (float)q;
        }
    }
}

/* MXFP4: byte 0 the E8M0 scale, byte 1 + j elements j (low nibble) and
 * j + 16 (high); each the float product of kernels/mxfp4.h. */
static void dequant_mxfp4(const uint8_t *src, float *out, int64_t nb) {
    for (int64_t b = 0; b < nb; b++, src += 17, out += 32) {
        float d = mxfp4_scale_half(src[0]);
        for (int j = 0; j < 16; j++) {
            out[j] = (float)mxfp4_code2[src[1 + j] & 0xF] * d;
            out[j + 16] = (float)mxfp4_code2[src[1 + j] >> 4] * d;
        }
    }
}

/* 32 elements from 16 bytes of IQ4 codes, each dl times its value. */
static void iq4_codes(const uint8_t *qs, float dl, float *out) {
    for (int j = 0; j < 16; j++) {
        out[j] = dl * (float)iq4nl_values[qs[j] & 0xF];
        out[j + 16] = dl * (float)iq4nl_values[qs[j] >> 4];
    }
}

static void dequant_iq4_nl(const uint8_t *src, float *out, int64_t nb) {
    for (int64_t b = 0; b < nb; b++, src += 18, out += 32) iq4_codes(src + 2, half_at(src), out);
}

/* IQ4_XS: 8 sub-blocks of 32, sub-block i scaled by d * (its 6-bit scale - 32). */
static void dequant_iq4_xs(const uint8_t *src, float *out, int64_t nb) {
    for (int64_t b = 0; b < nb; b++, src += 136, out += 256) {
        float d = half_at(src);
        uint16_t sh;
        memcpy(&sh, src + 2, 2);
        const uint8_t *sl = src + 4, *qs = src + 8;
        for (int i = 0; i < 8; i++) {
            int ls = ((sl[i / 2] >> (4 * (i % 2))) & 0xF) | ((sh >> (2 * i)) & 3) << 4;
            iq4_codes(qs + 16 * i, d * (float)(ls - 32), out + 32 * i);
        }
    }
}

/* One trit of a TQ1_0 byte: the byte times 3^n (mod 256), then times 3 over
 * 256 (a byte holds trits t0..t4 as the fraction 0.t0t1t2t3t4 in base 3,
 * rounded up to 8 bits), as value + 1. */
static float tq1_trit(uint8_t q, int n, float d) {
    static const uint8_t POW3[5] = {1, 3, 9, 27, 81};
    uint8_t shifted = (uint8_t)(q * POW3[n]);
    return (float)(((uint16_t)shifted * 3 >> 8) - 1) * d;
}

/* TQ1_0: bytes 0..31 give elements 32n + m (trit n of byte m), bytes 32..47
 * elements 160 + 16n + m, the 4 bytes after them elements 240 + 4n + j. */
static void dequant_tq1_0(const uint8_t *src, float *out, int64_t nb) {
    for (int64_t b = 0; b < nb; b++, src += 54, out += 256) {
        float d = half_at(src + 52);
        for (int n = 0; n < 5; n++)
            for (int m = 0; m < 32; m++) out[32 * n + m] = tq1_trit(src[m], n, d);
        for (int n = 0; n < 5; n++)
            for (int m = 0; m < 16; m++) out[160 + 16 * n + m] = tq1_trit(src[32 + m], n, d);
        for (int n = 0; n < 4; n++)
            for (int j = 0; j < 4; j++) out[240 + 4 * n + j] = tq1_trit(src[48 + j], n, d);
    }
}

/* TQ2_0: element 128h + 32l + m is bits 2l of byte 32h + m, minus 1. */
static void dequant_tq2_0(const uint8_t *src, float *out, int64_t nb) {
    for (int64_t b = 0; b < nb; b++, src += 66, out += 256) {
        float d = half_at(src + 64);
        for (int h = 0; h < 2; h++)
            for (int l = 0; l < 4; l++)
                for (int m = 0; m < 32; m++)
                    out[128 * h + 32 * l + m] = (float)(((src[32 * h + m] >> (2 * l)) & 3) - 1) * d;
    }
}

int ops_dequant_blocks(pdl_dtype dtype, const void *src, float *out, int64_t n) {
    const uint8_t *p = src;
    int64_t nb = n / (int64_t)dtype_block_elems(dtype);
    switch (dtype) {
    case PDL_DTYPE_F32: memcpy(out, src, (size_t)n * sizeof *out); break;
    case PDL_DTYPE_F16:
        for (int64_t i = 0; i < n; i++) out[i] = half_at(p + 2 * i);
        break;
    case PDL_DTYPE_BF16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            out[i] = fp16_bf16_to_f32(h);
        }
        break;
    case PDL_DTYPE_Q8_0:
        for (int64_t b = 0; b < nb; b++) {
            const uint8_t *blk = p + b * 34;
            float d = half_at(blk);
            const int8_t *q = (const int8_t *)(blk + 2);
            for (int j = 0; j < 32; j++) out[b * 32 + j] = d * (float)q[j];
        }
        break;
    case PDL_DTYPE_Q4_0: dequant_q4_0(p, out, nb); break;
    case PDL_DTYPE_Q4_1: dequant_q4_1(p, out, nb); break;
    case PDL_DTYPE_Q5_0: dequant_q5(p, out, nb, 0); break;
    case PDL_DTYPE_Q5_1: dequant_q5(p, out, nb, 1); break;
    case PDL_DTYPE_Q2_K: dequant_q2_k(p, out, nb); break;
    case PDL_DTYPE_Q3_K: dequant_q3_k(p, out, nb); break;
    case PDL_DTYPE_Q4_K: dequant_q45_k(p, out, nb, 0); break;
    case PDL_DTYPE_Q5_K: dequant_q45_k(p, out, nb, 1); break;
    case PDL_DTYPE_Q6_K: dequant_q6_k(p, out, nb); break;
    case PDL_DTYPE_MXFP4: dequant_mxfp4(p, out, nb); break;
    case PDL_DTYPE_IQ4_NL: dequant_iq4_nl(p, out, nb); break;
    case PDL_DTYPE_IQ4_XS: dequant_iq4_xs(p, out, nb); break;
    case PDL_DTYPE_TQ1_0: dequant_tq1_0(p, out, nb); break;
    case PDL_DTYPE_TQ2_0: dequant_tq2_0(p, out, nb); break;
    default: return -1; /* no dequantization for it (U32, MLX, ...): never a silent zero */
    }
    return 0;
}

/* ---- MLX affine quantization ------------------------------------------------
 * Row `row` of an MLX_Q4 / MLX_Q8 tensor of n columns: its packed codes are
 * the row's n * bits / 8 bytes (u32 words are little-endian in the file, so
 * reading bytes in order is reading each word from its least significant
 * bits: 4-bit element j is the low nibble of byte j / 2 when j is even, the
 * high one when odd; 8-bit element j is byte j), its scales and biases are
 * entries row * (n / group) .. + n / group - 1 of t->mlx.
 *
 * The value is computed in float as (scale * q) + bias: a multiply, then an
 * add (two roundings; -ffp-contract=off keeps them apart), the order of
 * mlx's CPU quantized matmul (its SIMD path widens scale and bias to float,
 * multiplies the codes by the scale, then adds the bias). With F16 or BF16
 * scales, the usual case, the product of an 11- or 8-bit significand and a
 * code below 256 is exact in float, so this equals fmaf(scale, q, bias): the
 * one rounding is the add's. mx.dequantize itself rounds scale * q and the
 * sum to the scale dtype (its output dtype); mlx's matmul kernels (CPU and
 * Metal) accumulate in float and do not, and neither does this. */
static float mlx_param_at(pdl_dtype dt, const uint8_t *p, int64_t i) {
    uint16_t h;
    switch (dt) {
    case PDL_DTYPE_F32: {
        float f;
        memcpy(&f, p + 4 * i, 4);
        return f;
    }
    case PDL_DTYPE_F16: return half_at(p + 2 * i);
    case PDL_DTYPE_BF16: memcpy(&h, p + 2 * i, 2); return fp16_bf16_to_f32(h);
    default: return 0.0f; /* not reached: dequant_mlx_row refuses other dtypes first */
    }
}

static int dequant_mlx_row(const pdl_tensor *t, int64_t row, float *out, int64_t n) {
    pdl_dtype pdt = t->mlx.dtype; /* of the scales and biases */
    if (pdt != PDL_DTYPE_F32 && pdt != PDL_DTYPE_F16 && pdt != PDL_DTYPE_BF16) return -1;
    int64_t group = t->mlx.group, n_groups = n / group;
    const uint8_t *codes = (const uint8_t *)t->data + (size_t)row * dtype_row_bytes(t->dtype, n);
    const uint8_t *sc = t->mlx.scales, *bi = t->mlx.biases;
    for (int64_t g = 0; g < n_groups; g++, out += group) {
        float s = mlx_param_at(t->mlx.dtype, sc, row * n_groups + g);
        float b = mlx_param_at(t->mlx.dtype, bi, row * n_groups + g);
        if (t->dtype == PDL_DTYPE_MLX_Q4) {
            const uint8_t *c = codes + g * (group / 2);
            for (int64_t j = 0; j < group / 2; j++) {
                out[2 * j] = s * (float)(c[j] & 0xF) + b;
                out[2 * j + 1] = s * (float)(c[j] >> 4) + b;
            }
        } else {
            const uint8_t *c = codes + g * group;
            for (int64_t j = 0; j < group; j++) out[j] = s * (float)c[j] + b;
        }
    }
    return 0;
}

int ops_dequant_row(const pdl_tensor *t, int64_t row, float *out, int64_t n) {
    if (dtype_is_mlx(t->dtype)) return dequant_mlx_row(t, row, out, n);
    const uint8_t *base = (const uint8_t *)t->data + (size_t)row * dtype_row_bytes(t->dtype, n);
    return ops_dequant_blocks(t->dtype, base, out, n);
}
