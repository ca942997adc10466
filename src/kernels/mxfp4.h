/*
 * mxfp4.h - the two numbers behind GGUF's MXFP4 blocks (format/tensor.h's
 * PDL_DTYPE_MXFP4): the 16 E2M1 code values and the E8M0 scale, in the
 * form every MXFP4 kernel here multiplies them (as llama.cpp does).
 *
 * E2M1 code c: sign bit 3, magnitude bits 0-2 from {0, 0.5, 1, 1.5, 2, 3,
 * 4, 6}. The values are kept doubled, as int8 {0, 1, 2, 3, 4, 6, 8, 12,
 * 0, -1, ..., -12} (so an integer dot product with int8 activations is
 * exact), and the scale halved: 2^(e - 128) instead of 2^(e - 127). The
 * element is code2[c] * mxfp4_scale_half(e), a float product that is
 * exact unless it overflows. Like llama.cpp, e = 255 (NaN in the OCP
 * spec) is read as 2^127 (elements of magnitude 1 and above then overflow
 * to infinity), e = 0 and 1 give the subnormal floats 2^-128 and 2^-127,
 * and code 8 (-0) gives +0.
 */
#ifndef PDL_KERNELS_MXFP4_H
#define PDL_KERNELS_MXFP4_H

#include <stdint.h>
#include <string.h>

/* Twice the E2M1 value of each 4-bit code. */
static const int8_t mxfp4_code2[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

/* The same plus 12 (0..24): the unsigned bytes VPDPBUSD / VPMADDUBSW
 * multiply (the kernels take 12 x the activation sum back off). */
#define PDL_MXFP4_OFFSET 12

/* The bits of 2^(e - 128) as a float (exact for every e; subnormal for
 * e < 2). Its low 16 bits are zero, so it is also exact as a BF16 (the top
 * half), which is how weight panels keep it. */
static inline uint32_t mxfp4_scale_half_bits(uint8_t e) {
    return e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
}

/* 2^(e - 128) as a float. */
static inline float mxfp4_scale_half(uint8_t e) {
    uint32_t bits = mxfp4_scale_half_bits(e);
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

#endif
