/*
 * test_dequant.c - GGUF block formats expand to the values their layouts
 * define (ops_dequant_row, kernels/cpu_ops.c).
 *
 * Each test packs chosen integer quants and scales into a block the way
 * ggml's block_* structs lay them out (the packers below walk the blocks in
 * the order of ggml's dequantize_row_* loops, a different walk from the
 * engine's per-element indexing), then checks every element exactly: the
 * scales are powers of two and the quants small, so every product is exact
 * in float. A few elements are also checked against literal values worked
 * out by hand from the layout. A dtype nothing expands or multiplies is an
 * error, never a row of zeros.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "format/tensor.h"
#include "kernels/cpu_ops.h"
#include "kernels/fp16.h"
#include "kernels/matmul.h"
#include "test_util.h"

static uint32_t rng = 12345;
static int rnd(int n) { /* uniform in [0, n) */
    rng = rng * 1664525u + 1013904223u;
    return (int)((rng >> 8) % (uint32_t)n);
}

static void put_half(uint8_t *p, float v) {
    uint16_t h = fp16_f32_to_f16(v);
    memcpy(p, &h, 2);
}

/* Expands one row of n elements of dtype from bytes. */
static void dequant(pdl_dtype dtype, const uint8_t *bytes, float *out, int n) {
    pdl_tensor t = {.dtype = dtype, .n_dims = 1, .shape = {n}, .data = bytes};
    ops_dequant_row(&t, 0, out, n);
}

static int count_bad(const float *got, const float *want, int n) {
    int bad = 0;
    for (int i = 0; i < n; i++)
        if (got[i] != want[i]) {
            if (bad < 3) fprintf(stderr, "  element %d: got %.9g, want %.9g\n", i, got[i], want[i]);
            bad++;
        }
    return bad;
}

static void test_dtype_block_sizes(void) {
    struct {
        pdl_dtype t;
        const char *name;
        size_t elems, bytes;
    } want[] = {
        {PDL_DTYPE_Q4_0, "Q4_0", 32, 18},  {PDL_DTYPE_Q4_1, "Q4_1", 32, 20},  {PDL_DTYPE_Q5_0, "Q5_0", 32, 22},
        {PDL_DTYPE_Q5_1, "Q5_1", 32, 24},  {PDL_DTYPE_Q8_0, "Q8_0", 32, 34},  {PDL_DTYPE_Q2_K, "Q2_K", 256, 84},
        {PDL_DTYPE_Q3_K, "Q3_K", 256, 110}, {PDL_DTYPE_Q4_K, "Q4_K", 256, 144}, {PDL_DTYPE_Q5_K, "Q5_K", 256, 176},
        {PDL_DTYPE_Q6_K, "Q6_K", 256, 210}, {PDL_DTYPE_MXFP4, "MXFP4", 32, 17}, {PDL_DTYPE_IQ4_NL, "IQ4_NL", 32, 18},
        {PDL_DTYPE_IQ4_XS, "IQ4_XS", 256, 136}, {PDL_DTYPE_TQ1_0, "TQ1_0", 256, 54}, {PDL_DTYPE_TQ2_0, "TQ2_0", 256, 66},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        CHECK(strcmp(dtype_name(want[i].t), want[i].name) == 0);
        CHECK_EQ_INT(dtype_block_elems(want[i].t), want[i].elems);
        CHECK_EQ_INT(dtype_block_bytes(want[i].t), want[i].bytes);
        CHECK(dtype_is_quantized(want[i].t));
        CHECK_EQ_INT(dtype_row_bytes(want[i].t, 2 * (int64_t)want[i].elems), 2 * want[i].bytes);
    }
    CHECK(!dtype_is_quantized(PDL_DTYPE_F32));
}

/* Q4_0: byte j of the nibbles is element j (low) and j + 16 (high). */
static void test_q4_0_block(void) {
    uint8_t blk[2 * 18];
    float want[64], got[64];
    for (int b = 0; b < 2; b++) {
        uint8_t *p = blk + 18 * b;
        float d = b ? -0.25f : 0.5f;
        put_half(p, d);
        int q[32];
        for (int i = 0; i < 32; i++) q[i] = rnd(16);
        for (int j = 0; j < 16; j++) p[2 + j] = (uint8_t)(q[j] | q[j + 16] << 4);
        for (int i = 0; i < 32; i++) want[32 * b + i] = (float)(q[i] - 8) * d;
    }
    dequant(PDL_DTYPE_Q4_0, blk, got, 64);
    CHECK_EQ_INT(count_bad(got, want, 64), 0);
    /* by hand: d = 2, byte 0 = 0xF1 -> element 0 = (1 - 8) * 2, element 16 = (15 - 8) * 2 */
    memset(blk, 0x88, 18);
    put_half(blk, 2.0f);
    blk[2] = 0xF1;
    dequant(PDL_DTYPE_Q4_0, blk, got, 32);
    CHECK(got[0] == -14.0f && got[16] == 14.0f && got[1] == 0.0f && got[31] == 0.0f);
}

static void test_q4_1_block(void) {
    uint8_t p[20];
    float want[32], got[32];
    put_half(p, 0.125f);
    put_half(p + 2, -1.5f);
    int q[32];
    for (int i = 0; i < 32; i++) q[i] = rnd(16);
    for (int j = 0; j < 16; j++) p[4 + j] = (uint8_t)(q[j] | q[j + 16] << 4);
    for (int i = 0; i < 32; i++) want[i] = (float)q[i] * 0.125f - 1.5f;
    dequant(PDL_DTYPE_Q4_1, p, got, 32);
    CHECK_EQ_INT(count_bad(got, want, 32), 0);
}

/* Q5_0 / Q5_1: the fifth bit of element i is bit i of the little-endian u32. */
static void pack_q5(uint8_t *qh, uint8_t *qs, const int *q) {
    uint32_t h = 0;
    for (int j = 0; j < 16; j++) {
        qs[j] = (uint8_t)((q[j] & 15) | (q[j + 16] & 15) << 4);
        h |= (uint32_t)(q[j] >> 4) << j;
        h |= (uint32_t)(q[j + 16] >> 4) << (j + 16);
    }
    for (int k = 0; k < 4; k++) qh[k] = (uint8_t)(h >> (8 * k));
}

static void test_q5_0_block(void) {
    uint8_t p[22];
    float want[32], got[32];
    put_half(p, 0.5f);
    int q[32];
    for (int i = 0; i < 32; i++) q[i] = rnd(32);
    pack_q5(p + 2, p + 6, q);
    for (int i = 0; i < 32; i++) want[i] = (float)(q[i] - 16) * 0.5f;
    dequant(PDL_DTYPE_Q5_0, p, got, 32);
    CHECK_EQ_INT(count_bad(got, want, 32), 0);
    /* by hand: only element 17 has its fifth bit (qh byte 2 bit 1), nibbles 0 */
    memset(p, 0, sizeof p);
    put_half(p, 1.0f);
    p[2 + 2] = 0x02;
    dequant(PDL_DTYPE_Q5_0, p, got, 32);
    CHECK(got[17] == 0.0f && got[16] == -16.0f && got[1] == -16.0f);
}

static void test_q5_1_block(void) {
    uint8_t p[24];
    float want[32], got[32];
    put_half(p, 0.25f);
    put_half(p + 2, 3.0f);
    int q[32];
    for (int i = 0; i < 32; i++) q[i] = rnd(32);
    pack_q5(p + 4, p + 8, q);
    for (int i = 0; i < 32; i++) want[i] = (float)q[i] * 0.25f + 3.0f;
    dequant(PDL_DTYPE_Q5_1, p, got, 32);
    CHECK_EQ_INT(count_bad(got, want, 32), 0);
}

/* Q2_K: scales[16] (low nibble: scale, high: min), qs[64], d, dmin. Each
 * half of 128 elements uses 32 bytes; its 4 groups of 32 take bit pairs
 * 0, 2, 4, 6; each group is two sub-blocks of 16 (bytes 0..15, 16..31). */
static void test_q2_k_block(void) {
    uint8_t p[84] = {0};
    float want[256], got[256];
    float d = 0.5f, dmin = 0.25f;
    int sc[16], mn[16], q[256];
    for (int i = 0; i < 16; i++) sc[i] = rnd(16), mn[i] = rnd(16), p[i] = (uint8_t)(sc[i] | mn[i] << 4);
    for (int i = 0; i < 256; i++) q[i] = rnd(4);
    int e = 0;
    for (int half = 0; half < 2; half++)
        for (int shift = 0; shift < 8; shift += 2)
            for (int part = 0; part < 2; part++)
                for (int l = 0; l < 16; l++, e++) p[16 + 32 * half + 16 * part + l] |= (uint8_t)(q[e] << shift);
    put_half(p + 80, d);
    put_half(p + 82, dmin);
    for (int i = 0; i < 256; i++) want[i] = d * (float)sc[i / 16] * (float)q[i] - dmin * (float)mn[i / 16];
    dequant(PDL_DTYPE_Q2_K, p, got, 256);
    CHECK_EQ_INT(count_bad(got, want, 256), 0);
}

/* Q3_K: hmask[32], qs[64], scales[12], d. Quant = low 2 bits (as Q2_K)
 * minus 4 unless the high bit is set: group g (of 8, 32 elements each) uses
 * bit g of hmask[0..31]. 16 six-bit scales biased by 32: low nibbles in
 * bytes 0..7 (scales 0..7) and their high nibbles (scales 8..15), top bit
 * pairs in bytes 8..11. */
static void test_q3_k_block(void) {
    uint8_t p[110] = {0};
    float want[256], got[256];
    float d = 0.125f;
    int sc[16], q[256];
    for (int i = 0; i < 16; i++) sc[i] = rnd(64);
    for (int i = 0; i < 256; i++) q[i] = rnd(8) - 4;
    uint8_t *hm = p, *qs = p + 32, *sb = p + 96;
    int e = 0;
    for (int half = 0; half < 2; half++)
        for (int g = 0; g < 4; g++)
            for (int part = 0; part < 2; part++)
                for (int l = 0; l < 16; l++, e++) {
                    int lo = q[e] < 0 ? q[e] + 4 : q[e];
                    qs[32 * half + 16 * part + l] |= (uint8_t)(lo << (2 * g));
                    if (q[e] >= 0) hm[16 * part + l] |= (uint8_t)(1 << (4 * half + g));
                }
    for (int i = 0; i < 16; i++) {
        if (i < 8) sb[i] |= (uint8_t)(sc[i] & 15);
        else sb[i - 8] |= (uint8_t)((sc[i] & 15) << 4);
        sb[8 + i % 4] |= (uint8_t)((sc[i] >> 4) << (2 * (i / 4)));
    }
    put_half(p + 108, d);
    for (int i = 0; i < 256; i++) want[i] = d * (float)(sc[i / 16] - 32) * (float)q[i];
    dequant(PDL_DTYPE_Q3_K, p, got, 256);
    CHECK_EQ_INT(count_bad(got, want, 256), 0);
    /* by hand: all quant bits 0 and high bits clear -> q = -4; scale bytes 0
     * except byte 11 = 0xC0 (scale 15's top bits = 3, so 48 - 32 = 16)
     * and byte 7 = 0x50 (scale 15's low nibble 5: 53 - 32 = 21; scale 7's
     * low nibble 0: -32). Element 255: 1 * 21 * -4; element 112: -32 * -4. */
    memset(p, 0, sizeof p);
    p[96 + 11] = 0xC0;
    p[96 + 7] = 0x50;
    put_half(p + 108, 1.0f);
    dequant(PDL_DTYPE_Q3_K, p, got, 256);
    CHECK(got[255] == -84.0f && got[112] == 128.0f);
}

/* Q4_K / Q5_K scales: 8 six-bit scales and mins in 12 bytes. */
static void pack_scale_min_k4(uint8_t *s, const int *sc, const int *mn) {
    for (int j = 0; j < 4; j++) {
        s[j] = (uint8_t)((sc[j] & 63) | (sc[j + 4] >> 4) << 6);
        s[j + 4] = (uint8_t)((mn[j] & 63) | (mn[j + 4] >> 4) << 6);
        s[j + 8] = (uint8_t)((sc[j + 4] & 15) | (mn[j + 4] & 15) << 4);
    }
}

/* Q4_K: d, dmin, scales[12], qs[128]: 4 chunks of 64 elements, each 32
 * bytes: low nibbles are the first 32 (sub-block 2c), high the next 32. */
static void check_q45_k(int five) {
    uint8_t p[176] = {0};
    float want[256], got[256];
    float d = 0.0625f, dmin = 0.5f;
    int sc[8], mn[8], q[256];
    for (int i = 0; i < 8; i++) sc[i] = rnd(64), mn[i] = rnd(64);
    for (int i = 0; i < 256; i++) q[i] = rnd(five ? 32 : 16);
    put_half(p, d);
    put_half(p + 2, dmin);
    pack_scale_min_k4(p + 4, sc, mn);
    uint8_t *qh = p + 16, *qs = p + (five ? 48 : 16);
    int e = 0;
    for (int c = 0; c < 4; c++)
        for (int nib = 0; nib < 2; nib++)
            for (int l = 0; l < 32; l++, e++) {
                qs[32 * c + l] |= (uint8_t)((q[e] & 15) << (4 * nib));
                if (five) qh[l] |= (uint8_t)((q[e] >> 4) << (2 * c + nib));
            }
    for (int i = 0; i < 256; i++) want[i] = d * (float)sc[i / 32] * (float)q[i] - dmin * (float)mn[i / 32];
    dequant(five ? PDL_DTYPE_Q5_K : PDL_DTYPE_Q4_K, p, got, 256);
    CHECK_EQ_INT(count_bad(got, want, 256), 0);
}

static void test_q4_k_block(void) {
    check_q45_k(0);
    /* by hand: scale byte 0 = 0x41 -> sub-block 0 scale 1 and sub-block 4's
     * scale top bits 01 (16 + low nibble of byte 8 = 2 -> 18); min bytes 0;
     * d = 1, qs[0] = 0x0F, qs[64] = 0x03 */
    uint8_t p[144] = {0};
    put_half(p, 1.0f);
    put_half(p + 2, 1.0f);
    p[4] = 0x41;
    p[4 + 8] = 0x02;
    p[16] = 0x0F;
    p[16 + 64] = 0x03;
    float got[256];
    dequant(PDL_DTYPE_Q4_K, p, got, 256);
    CHECK(got[0] == 15.0f && got[128] == 54.0f && got[32] == 0.0f);
}

static void test_q5_k_block(void) { check_q45_k(1); }

/* Q6_K: ql[128], qh[64], scales[16] (int8), d. Each half of 128 elements:
 * element l (< 32) and l + 64 share ql[l] (low/high nibble), l + 32 and
 * l + 96 share ql[l + 32]; qh[l] holds the top 2 bits of l, l + 32, l + 64,
 * l + 96 at bits 0, 2, 4, 6. Quant minus 32; sub-block of 16 per scale. */
static void test_q6_k_block(void) {
    uint8_t p[210] = {0};
    float want[256], got[256];
    float d = 0.25f;
    int q[256];
    int8_t sc[16];
    for (int i = 0; i < 16; i++) sc[i] = (int8_t)(rnd(256) - 128);
    for (int i = 0; i < 256; i++) q[i] = rnd(64) - 32;
    for (int h = 0; h < 2; h++) {
        uint8_t *ql = p + 64 * h, *qh = p + 128 + 32 * h;
        const int *qq = q + 128 * h;
        for (int l = 0; l < 32; l++) {
            int u[4];
            for (int k = 0; k < 4; k++) u[k] = qq[l + 32 * k] + 32;
            ql[l] = (uint8_t)((u[0] & 15) | (u[2] & 15) << 4);
            ql[l + 32] = (uint8_t)((u[1] & 15) | (u[3] & 15) << 4);
            qh[l] = (uint8_t)((u[0] >> 4) | (u[1] >> 4) << 2 | (u[2] >> 4) << 4 | (u[3] >> 4) << 6);
        }
    }
    memcpy(p + 192, sc, 16);
    put_half(p + 208, d);
    for (int i = 0; i < 256; i++) want[i] = d * (float)sc[i / 16] * (float)q[i];
    dequant(PDL_DTYPE_Q6_K, p, got, 256);
    CHECK_EQ_INT(count_bad(got, want, 256), 0);
    /* by hand: all bytes 0 -> q = -32 everywhere; scale 9 = -2, d = 0.5:
     * element 144 (second half, sub-block 9) = 0.5 * -2 * -32 = 32 */
    memset(p, 0, sizeof p);
    p[192 + 9] = (uint8_t)(int8_t)-2;
    put_half(p + 208, 0.5f);
    dequant(PDL_DTYPE_Q6_K, p, got, 256);
    CHECK(got[144] == 32.0f && got[143] == 0.0f);
}

/* Rows past the first start at row * the row's bytes. */
/* MXFP4 (OCP Microscaling spec v1.0, as GGUF stores it: ggml's
 * block_mxfp4): element i of a block is the E2M1 code c (byte 1 + i % 16,
 * low nibble for i < 16, high for i >= 16) times the E8M0 scale 2^(e - 127)
 * of byte 0. E2M1 decoded from its bit fields: sign bit 3, exponent bits
 * 1-2 (bias 1), mantissa bit 0; exponent 0 is subnormal (0.5 m). The
 * product is taken in float64 and rounded once to float: exact for every
 * finite result, infinity past FLT_MAX. Every scale byte 0..255 with every
 * code in every position, compared bit for bit. Where the spec and llama.cpp
 * part, the engine follows llama.cpp (whose files these are): e = 255 (NaN
 * in the spec) scales by 2^128 as the formula continues (so magnitudes of 1
 * and more overflow to infinity, 0.5 gives 2^127), and the code -0 gives
 * +0.0 (llama.cpp multiplies an integer table). */
static double e2m1_value(int c) {
    int ex = (c >> 1) & 3, m = c & 1;
    double mag = ex == 0 ? 0.5 * m : ldexp(1.0 + 0.5 * m, ex - 1);
    return c & 8 ? -mag : mag;
}

static void test_mxfp4_block(void) {
    static const double table[16] = {0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6};
    for (int c = 0; c < 16; c++) CHECK(e2m1_value(c) == table[c]); /* the spec's table */
    int bad = 0;
    for (int e = 0; e < 256; e++)
        for (int shift = 0; shift < 32; shift++) { /* code (i + shift) % 16 at position i (+5 for the high half) */
            uint8_t blk[17];
            float got[32], want[32];
            blk[0] = (uint8_t)e;
            int code[32];
            for (int i = 0; i < 32; i++) code[i] = (i + shift + (i >= 16 ? shift / 16 * 5 : 0)) % 16;
            for (int j = 0; j < 16; j++) blk[1 + j] = (uint8_t)(code[j] | code[j + 16] << 4);
            for (int i = 0; i < 32; i++) {
                double v = e2m1_value(code[i]) * ldexp(1.0, e - 127);
                want[i] = v == 0.0 ? 0.0f : (float)v; /* +0.0 for -0, as llama.cpp */
            }
            dequant(PDL_DTYPE_MXFP4, blk, got, 32);
            for (int i = 0; i < 32; i++)
                if (memcmp(&got[i], &want[i], 4) != 0) {
                    if (bad < 3) fprintf(stderr, "  e %d code %d: got %.9g, want %.9g\n", e, code[i], got[i], want[i]);
                    bad++;
                }
        }
    CHECK_EQ_INT(bad, 0);
    /* by hand: e = 127 (scale 1), byte 1 = 0xF1 -> element 0 = 0.5, element 16 = -6 */
    uint8_t blk[2 * 17];
    float got[64];
    memset(blk, 0, sizeof blk);
    blk[0] = 127, blk[1] = 0xF1;
    blk[17] = 130, blk[17 + 16] = 0x5C; /* block 1: scale 8; element 15 = code 0xC (-2) x 8, element 31 = code 5 (3) x 8 */
    dequant(PDL_DTYPE_MXFP4, blk, got, 64);
    CHECK(got[0] == 0.5f && got[16] == -6.0f && got[1] == 0.0f && got[47] == -16.0f && got[63] == 24.0f);
    /* the extremes: e = 0 -> 2^-127 (subnormal), e = 254 -> 2^127, e = 255 -> 2^128 */
    blk[0] = 0, blk[1] = 0x71; /* 0.5 x 2^-127, 6 x 2^-127 */
    dequant(PDL_DTYPE_MXFP4, blk, got, 32);
    CHECK(got[0] == ldexpf(1.0f, -128) && got[16] == 6.0f * ldexpf(1.0f, -127) && fpclassify(got[0]) == FP_SUBNORMAL);
    blk[0] = 254, blk[1] = 0x98; /* -0 -> +0, -0.5 x 2^127 */
    dequant(PDL_DTYPE_MXFP4, blk, got, 32);
    CHECK(got[0] == 0.0f && !signbit(got[0]) && got[16] == -ldexpf(1.0f, 126));
    blk[0] = 255, blk[1] = 0x21; /* 0.5 x 2^128 = 2^127; 1 x 2^128 overflows */
    dequant(PDL_DTYPE_MXFP4, blk, got, 32);
    CHECK(got[0] == ldexpf(1.0f, 127) && isinf(got[16]) && got[16] > 0);
}

/* IQ4_NL / IQ4_XS's non-linear values, as the format defines them
 * (ggml-common.h's kvalues_iq4nl), written out here on their own. */
static const int IQ4[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

/* IQ4_NL: byte j of the 16 codes holds element j (low nibble) and j + 16
 * (high); each element d times its code's value. Every code at every
 * position over a few blocks; d a power of two, so products are exact. */
static void test_iq4_nl_block(void) {
    enum { NB = 4 };
    uint8_t p[NB * 18];
    float want[NB * 32], got[NB * 32];
    for (int b = 0; b < NB; b++) {
        float d = ldexpf(1.0f, b - 9);
        put_half(p + 18 * b, d);
        int q[32];
        for (int i = 0; i < 32; i++) q[i] = (i + 5 * b) % 16;
        for (int j = 0; j < 16; j++) p[18 * b + 2 + j] = (uint8_t)(q[j] | q[j + 16] << 4);
        for (int i = 0; i < 32; i++) want[32 * b + i] = d * (float)IQ4[q[i]];
    }
    dequant(PDL_DTYPE_IQ4_NL, p, got, NB * 32);
    CHECK_EQ_INT(count_bad(got, want, NB * 32), 0);
    /* by hand: code 0 in the low nibble of byte 0, 15 in its high nibble */
    p[2] = 0xF0;
    dequant(PDL_DTYPE_IQ4_NL, p, got, 32);
    CHECK(got[0] == -127.0f / 512 && got[16] == 113.0f / 512);
}

/* IQ4_XS: 8 sub-blocks of 32; sub-block i's scale ls = low nibble (i even)
 * or high nibble (i odd) of scales_l[i / 2], bits 4..5 from scales_h bits
 * 2i..2i+1; element = d * (ls - 32) * value. Every 6-bit scale over the
 * blocks, including 0 (-32) and 63 (+31). */
static void test_iq4_xs_block(void) {
    enum { NB = 8 };
    uint8_t p[NB * 136];
    static float want[NB * 256], got[NB * 256];
    for (int b = 0; b < NB; b++) {
        uint8_t *blk = p + 136 * b;
        float d = 0.25f;
        put_half(blk, d);
        uint16_t sh = 0;
        memset(blk + 4, 0, 4);
        for (int i = 0; i < 8; i++) {
            int ls = (8 * b + i) % 64;
            blk[4 + i / 2] |= (uint8_t)((ls & 15) << (4 * (i % 2)));
            sh |= (uint16_t)((ls >> 4) << (2 * i));
            int q[32];
            for (int e = 0; e < 32; e++) q[e] = rnd(16);
            for (int j = 0; j < 16; j++) blk[8 + 16 * i + j] = (uint8_t)(q[j] | q[j + 16] << 4);
            for (int e = 0; e < 32; e++) want[256 * b + 32 * i + e] = d * (float)(ls - 32) * (float)IQ4[q[e]];
        }
        memcpy(blk + 2, &sh, 2);
    }
    dequant(PDL_DTYPE_IQ4_XS, p, got, NB * 256);
    CHECK_EQ_INT(count_bad(got, want, NB * 256), 0);
}

/* Ternary values t in {-1, 0, 1} at every position, packed as the format
 * defines: TQ2_0 byte 32h + m holds elements 128h + 32l + m at bits 2l
 * (as t + 1); TQ1_0 packs five trits per byte as the base-3 fraction
 * 0.t0t1t2t3t4 rounded up to 8 bits (byte = ceil(v * 256 / 243) for the
 * 5-digit number v), bytes 0..31 elements 32n + m (digit n of byte m), bytes
 * 32..47 elements 160 + 16n + m, then 4 bytes of four digits each (v times
 * 3, a fifth digit 0) for elements 240 + 4n + j; d last. */
static uint8_t tq1_pack(const int *digits, int n) {
    int v = 0;
    for (int k = 0; k < 5; k++) v = 3 * v + (k < n ? digits[k] : 0);
    return (uint8_t)((v * 256 + 242) / 243);
}

static void test_ternary_blocks(void) {
    int t[256];
    float want[256], got[256];
    for (int e = 0; e < 256; e++) t[e] = rnd(3) - 1;
    t[0] = -1, t[1] = 0, t[2] = 1, t[255] = 1;
    float d = 0.375f;
    for (int e = 0; e < 256; e++) want[e] = (float)t[e] * d;

    uint8_t q2[66] = {0};
    for (int h = 0; h < 2; h++)
        for (int l = 0; l < 4; l++)
            for (int m = 0; m < 32; m++) q2[32 * h + m] |= (uint8_t)((t[128 * h + 32 * l + m] + 1) << (2 * l));
    put_half(q2 + 64, d);
    dequant(PDL_DTYPE_TQ2_0, q2, got, 256);
    CHECK_EQ_INT(count_bad(got, want, 256), 0);

    uint8_t q1[54] = {0};
    int dig[5];
    for (int m = 0; m < 32; m++) {
        for (int n = 0; n < 5; n++) dig[n] = t[32 * n + m] + 1;
        q1[m] = tq1_pack(dig, 5);
    }
    for (int m = 0; m < 16; m++) {
        for (int n = 0; n < 5; n++) dig[n] = t[160 + 16 * n + m] + 1;
        q1[32 + m] = tq1_pack(dig, 5);
    }
    for (int j = 0; j < 4; j++) {
        for (int n = 0; n < 4; n++) dig[n] = t[240 + 4 * n + j] + 1;
        q1[48 + j] = tq1_pack(dig, 4);
    }
    put_half(q1 + 52, d);
    dequant(PDL_DTYPE_TQ1_0, q1, got, 256);
    CHECK_EQ_INT(count_bad(got, want, 256), 0);
    /* by hand: the byte for digits 2, 0, 0, 0, 0 (v = 162) is ceil(162 * 256 / 243) = 171 */
    CHECK_EQ_INT(tq1_pack((const int[]){2, 0, 0, 0, 0}, 5), 171);
}

static void test_dequant_row_offsets_by_whole_blocks(void) {
    uint8_t p[2 * 210] = {0};
    put_half(p + 210 + 208, 1.0f);
    p[210 + 192] = 1; /* row 1, sub-block 0 scale 1: q = -32 */
    float got[256];
    pdl_tensor t = {.dtype = PDL_DTYPE_Q6_K, .n_dims = 2, .shape = {2, 256}, .data = p};
    ops_dequant_row(&t, 1, got, 256);
    CHECK(got[0] == -32.0f && got[16] == 0.0f);
}

/* U32 (raw words, never a weight) has no dequantization and no matmul
 * kernel: each says so with -1 and leaves its output as it was, where a
 * silent row of zeros would pass for a model's output; the loaders refuse
 * such a matrix by matmul_supports. */
static void test_unknown_dtype_is_an_error_not_zeros(void) {
    uint32_t words[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    float out[8];
    for (int i = 0; i < 8; i++) out[i] = -7.0f;
    pdl_tensor t = {.dtype = PDL_DTYPE_U32, .n_dims = 2, .shape = {1, 8}, .data = words, .nbytes = sizeof words};
    CHECK(ops_dequant_row(&t, 0, out, 8) == -1);
    CHECK(ops_dequant_blocks(PDL_DTYPE_U32, words, out, 8) == -1);
    for (int i = 0; i < 8; i++) CHECK(out[i] == -7.0f);
    CHECK(!matmul_supports(PDL_DTYPE_U32));
    CHECK(matmul_supports(PDL_DTYPE_F32) && matmul_supports(PDL_DTYPE_Q5_K) &&
          matmul_supports(PDL_DTYPE_MLX_Q4));
    pdl_threadpool *pool = threadpool_new(1);
    REQUIRE(pool);
    pdl_scratch scratch = {0};
    float x[8] = {1, 1, 1, 1, 1, 1, 1, 1}, y = -7.0f;
    CHECK(matmul_run(matmul_kernels_active(), pool, &scratch, &y, 1, x, 1, &t, NULL, false) == -1);
    CHECK(y == -7.0f);
    CHECK_EQ_INT((int)scratch.failed, 0); /* not the memory */
    scratch_free(&scratch);
    threadpool_free(pool);
}

int main(void) {
    fp16_init();
    RUN(test_dtype_block_sizes);
    RUN(test_q4_0_block);
    RUN(test_q4_1_block);
    RUN(test_q5_0_block);
    RUN(test_q5_1_block);
    RUN(test_q2_k_block);
    RUN(test_q3_k_block);
    RUN(test_q4_k_block);
    RUN(test_q5_k_block);
    RUN(test_q6_k_block);
    RUN(test_mxfp4_block);
    RUN(test_iq4_nl_block);
    RUN(test_iq4_xs_block);
    RUN(test_ternary_blocks);
    RUN(test_dequant_row_offsets_by_whole_blocks);
    RUN(test_unknown_dtype_is_an_error_not_zeros);
    return test_summary();
}
