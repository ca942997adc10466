/*
 * fp16.h - exact conversions between float and IEEE half / bfloat16.
 *
 * Scalar and portable; the table in fp16.c makes half -> float one load on
 * hot paths. float -> half rounds to nearest even, as F16C's VCVTPS2PH does.
 */
#ifndef PDL_KERNELS_FP16_H
#define PDL_KERNELS_FP16_H

#include <stdint.h>
#include <string.h>

static inline float fp16_bits_to_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint32_t fp16_f32_to_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* Exact half -> float (subnormals, infinities and NaNs included). */
static inline float fp16_f16_to_f32_exact(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t mant = h & 0x3ff;
    uint32_t bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (mant << 13);
    } else if (exp == 0) {
        if (mant == 0) {
            bits = sign;
        } else { /* subnormal: normalize */
            int e = -1;
            do {
                e++;
                mant <<= 1;
            } while (!(mant & 0x400));
            bits = sign | ((uint32_t)(127 - 15 - e) << 23) | ((mant & 0x3ff) << 13);
        }
    } else {
        bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
    }
    return fp16_bits_to_f32(bits);
}

/* float -> half, round to nearest even; overflow gives infinity. */
static inline uint16_t fp16_f32_to_f16(float f) {
    uint32_t x = fp16_f32_to_bits(f);
    uint32_t sign = (x >> 16) & 0x8000;
    uint32_t absx = x & 0x7fffffff;
    if (absx >= 0x7f800000u) /* inf or nan */
        return (uint16_t)(sign | 0x7c00 | (absx > 0x7f800000u ? 0x200 | ((absx >> 13) & 0x3ff) : 0));
    if (absx >= 0x477ff000u) /* rounds to >= 65520: infinity */
        return (uint16_t)(sign | 0x7c00);
    if (absx < 0x38800000u) { /* below the smallest normal half: subnormal or zero */
        if (absx < 0x33000000u) return (uint16_t)sign; /* < half of the smallest subnormal */
        uint32_t mant = (absx & 0x7fffff) | 0x800000;
        int shift = 126 - (int)(absx >> 23); /* 14 .. 24 */
        uint32_t half = mant >> shift;
        uint32_t rem = mant & ((1u << shift) - 1);
        uint32_t mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1))) half++;
        return (uint16_t)(sign | half);
    }
    uint32_t h = ((absx >> 13) - (112u << 10));
    uint32_t rem = absx & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++;
    return (uint16_t)(sign | h);
}

static inline float fp16_bf16_to_f32(uint16_t b) { return fp16_bits_to_f32((uint32_t)b << 16); }

/* float -> bfloat16, round to nearest even (NaN kept quiet), as PyTorch's .to(torch.bfloat16). */
static inline uint16_t fp16_f32_to_bf16(float f) {
    uint32_t u = fp16_f32_to_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* f to BF16 as VCVTNEPS2BF16 rounds it: a denormal f (which the
 * instruction takes as zero whatever MXCSR says) as zero of its sign, else
 * fp16_f32_to_bf16. The portable twin of the AVX-512 BF16 conversions of
 * activations and attention operands. */
static inline uint16_t fp16_f32_to_bf16_daz(float f) {
    uint32_t u = fp16_f32_to_bits(f);
    if ((u & 0x7f800000u) == 0) return (uint16_t)((u >> 16) & 0x8000u);
    return fp16_f32_to_bf16(f);
}

/* The 65536-entry half -> float table, filled on first use. */
extern float fp16_f16_table[65536];
void fp16_init(void);

static inline float fp16_f16_to_f32(uint16_t h) { return fp16_f16_table[h]; }

#if defined(__aarch64__)
/* The same value with one FCVT (half precision conversion is part of the
 * aarch64 base), for the NEON kernels: no table to fill first. */
static inline float fp16_f16_to_f32_hw(uint16_t h) {
    __fp16 f;
    memcpy(&f, &h, sizeof f);
    return (float)f;
}
#endif

#endif
