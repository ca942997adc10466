/*
 * fast_exp.h - e^z for z <= 0 in plain float arithmetic, for turning a
 * whole row of max-subtracted scores into unnormalised probabilities (the
 * sampler's logits, attention's scores).
 *
 * libm's expf is a call per element; this is inline, branch-free and
 * vectorisable, and since it uses only +, *, conversions and bit moves
 * (built with -ffp-contract=off) it gives the same bits on every compiler,
 * ISA and libc, which keeps a seed's tokens the same across builds.
 * Cephes' expf scheme: z = n ln2 + r with |r| <= ln2 / 2 (ln2 split in two
 * so n * ln2_hi is exact), e^r by a degree-7 polynomial (1 + r + r^2 p(r), p of degree 5), 2^n by building the
 * exponent bits. Relative error within 1e-7 (8.2e-8 measured over every
 * float in [-87, 0); tests/test_sampler.c sweeps it); 0 below -87, where
 * e^z would leave float's normal range, and for NaN.
 * Not for: z > 0, or where libm's last-bit accuracy matters (logprobs use
 * float64 exp).
 */
#ifndef PDL_KERNELS_FAST_EXP_H
#define PDL_KERNELS_FAST_EXP_H

#include <stdint.h>
#include <string.h>

/* For z <= 0, -inf and NaN (both -> 0). The clamp and the final zeroing are
 * bit masks, not ?:, which GCC would turn into a branch and not vectorise. */
static inline float fexp_nonpos(float z) {
    uint32_t u;
    memcpy(&u, &z, sizeof u);
    /* all ones when z < -87 (for z <= 0, a larger bit pattern is more
     * negative) or NaN; clamping keeps 2^n normal (n >= -126) and the int
     * conversion defined */
    uint32_t under = 0u - (uint32_t)((u > 0xc2ae0000u) | ((u & 0x7fffffffu) > 0x7f800000u)); /* -87.0f; NaN */
    u = (u & ~under) | (0xc2ae0000u & under);
    float zc;
    memcpy(&zc, &u, sizeof zc);
    /* n = round(zc / ln2), by the 1.5 * 2^23 shifter (round to nearest) */
    float n = (zc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    float r = (zc - n * 0.693359375f) - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * (r * r) + r + 1.0f;
    uint32_t bits = (uint32_t)((int32_t)n + 127) << 23;
    float scale, out;
    memcpy(&scale, &bits, sizeof scale);
    out = p * scale;
    memcpy(&bits, &out, sizeof bits);
    bits &= ~under; /* e^z -> 0 below -87 */
    memcpy(&out, &bits, sizeof out);
    return out;
}

#endif
