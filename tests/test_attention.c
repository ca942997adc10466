/*
 * test_attention.c - attn_queries (many queries of one sequence
 * against one KV head, keys read once per tile) gives each query exactly
 * the bytes attn_head gives it alone, and every instruction-set
 * build gives the portable body's bytes.
 *
 * This is what keeps the forward batch-invariant while prefill rows and GQA
 * heads share key tiles: a query's result must not depend on which other
 * queries are in its call. Checked with memcmp over head sizes that take the
 * register-tiled AVX-512 path (64, 128, 256, 48) and one that does not (40),
 * block sizes of 16 and 48 (tiled) and 8 (portable body), F16 and F32
 * caches, windows, soft-caps, attention sinks (none, or one logit per
 * query), positions that straddle tiles and blocks, and calls of 1 to 40
 * queries (more than one tile and more than 16 queries); the results also
 * against a float64 attention (sinks in its denominator).
 * Q8_0 caches (head sizes 64 and 128, and 8 and 24: one
 * group per head, which the tiles leave to the portable body) take every
 * check above, the float64 attention reading
 * the dequantized rows at 1e-5 as the others (the kernels dequantize
 * exactly, so only float32 rounding of the sums is left), and give the
 * bytes of an F32 cache holding the dequantized rows; the Q8_0 store is
 * checked bit for bit against the format's definition. Q4_0 caches (the
 * same head sizes; 4-bit codes, two to a byte, element i's low nibble
 * beside element i + 16's high one) likewise, the float64 attention
 * reading their rows as written out here (q4_at), and the Q4_0 store
 * against its definition.
 */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/attention.h"
#include "kernels/cpu_features.h"
#include "kernels/fp16.h"
#include "test_util.h"

static uint32_t rng = 2024;
static float frand(void) {
    rng = rng * 1664525u + 1013904223u;
    return (float)((rng >> 8) & 0xFFFF) / 32768.0f - 1.0f;
}

static const struct {
    pdl_isa isa;
    pdl_attention_fn fn;
    pdl_attention_ranges_fn ranges;
} simd_builds[] = {
    {PDL_ISA_AVX2, attn_queries_avx2, attn_queries_avx2_ranges},
    {PDL_ISA_AVX512, attn_queries_avx512, attn_queries_avx512_ranges},
    {PDL_ISA_NEON, attn_queries_neon, attn_queries_neon_ranges},
};

/* Element e of position pos's key or value, at the place attention.h's
 * layout gives (written out here, not through the index helpers, so a
 * helper that moved an element would be caught): each block holds every
 * head's keys dimension-major, then (V) every head's values slot-major. */
static double half_at(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return fp16_f16_to_f32(h);
}

/* A Q8_0 cache's element (attention.h, written out here too): groups of
 * G = 32 elements (the head if head_dim < 32); per block, K in groups of
 * kv_dim, each [G][bs] int8 then [bs] f16 scales; V head by head, bs rows
 * of head_dim / G blocks (f16 scale, G int8). The element is scale * q. */
static double q8_at(const pdl_attn_kv *kv, int hd, int pos, int e, bool value) {
    size_t G = hd < 32 ? (size_t)hd : 32;
    size_t bs = (size_t)kv->block_size, block = (size_t)kv->block_table[pos / kv->block_size];
    size_t off = (size_t)(pos % kv->block_size), blk = block * ((size_t)kv->kv_dim / G) * (G + 2) * bs;
    if (!value) {
        const uint8_t *g = (const uint8_t *)kv->k + blk + ((size_t)e / G) * (G + 2) * bs;
        return half_at(g + G * bs + 2 * off) * (int8_t)g[((size_t)e % G) * bs + off];
    }
    size_t row = ((size_t)hd / G) * (G + 2);
    const uint8_t *b = (const uint8_t *)kv->v + blk + (size_t)(e / hd) * row * bs + off * row +
                       ((size_t)(e % hd) / G) * (G + 2);
    return half_at(b) * (int8_t)b[2 + (size_t)(e % hd) % G];
}

/* A Q4_0 cache's element (attention.h, written out here too): Q8_0's
 * groups of G with G / 2 code bytes where Q8_0 has G: K per group [G / 2][bs]
 * bytes then [bs] f16 scales, V rows of head_dim / G blocks (f16 scale,
 * G / 2 bytes); element i of a group is the low nibble of byte i for
 * i < G / 2, else the high nibble of byte i - G / 2; the element is
 * scale * (code - 8). */
static double q4_at(const pdl_attn_kv *kv, int hd, int pos, int e, bool value) {
    size_t G = hd < 32 ? (size_t)hd : 32, H = G / 2;
    size_t bs = (size_t)kv->block_size, block = (size_t)kv->block_table[pos / kv->block_size];
    size_t off = (size_t)(pos % kv->block_size), blk = block * ((size_t)kv->kv_dim / G) * (H + 2) * bs;
    size_t i = (size_t)(e % hd) % G;
    uint8_t byte;
    double S;
    if (!value) {
        const uint8_t *g = (const uint8_t *)kv->k + blk + ((size_t)e / G) * (H + 2) * bs;
        S = half_at(g + H * bs + 2 * off), byte = g[(i % H) * bs + off];
    } else {
        size_t row = ((size_t)hd / G) * (H + 2);
        const uint8_t *b = (const uint8_t *)kv->v + blk + (size_t)(e / hd) * row * bs + off * row +
                           ((size_t)(e % hd) / G) * (H + 2);
        S = half_at(b), byte = b[2 + i % H];
    }
    return S * (double)((i < H ? byte & 15 : byte >> 4) - 8);
}

static double kv_at(const pdl_attn_kv *kv, int hd, int pos, int e, bool value) {
    if (kv->kv_is_q8) return q8_at(kv, hd, pos, e, value);
    if (kv->kv_is_q4) return q4_at(kv, hd, pos, e, value);
    int bs = kv->block_size;
    size_t block = (size_t)kv->block_table[pos / bs], off = (size_t)(pos % bs), head = (size_t)(e / hd);
    size_t d = (size_t)(e % hd), at_head = (block * kv->kv_dim + head * hd) * bs;
    size_t i = value ? at_head + off * hd + d : at_head + d * bs + off;
    const void *p = value ? kv->v : kv->k;
    return kv->kv_is_f16 ? fp16_f16_to_f32(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}

/* One query over keys [first, last] in float64 (softmax of the scaled,
 * soft-capped dot products and, when sink is given, one more logit that
 * takes no value, then the values): the largest difference from got. */
static double ref_range_r(const float *q, const float *got, int hd, int kv_head, double scale, double cap,
                          const float *sink, int first, int last, const pdl_attn_kv *kv, bool bf16);
static double ref_range(const float *q, const float *got, int hd, int kv_head, double scale, double cap,
                        const float *sink, int first, int last, const pdl_attn_kv *kv) {
    return ref_range_r(q, got, hd, kv_head, scale, cap, sink, first, last, kv, false);
}

/* x rounded to BF16 (nearest even; the test data has no denormals). */
static double to_bf16(double x) { return fp16_bf16_to_f32(fp16_f32_to_bf16((float)x)); }

/* The same with q, K and V rounded to BF16 first when bf16 (what the BF16
 * order multiplies; its products are exact, so what is left is the
 * rounding of P and float32 sums). */
static double ref_range_r(const float *q, const float *got, int hd, int kv_head, double scale, double cap,
                          const float *sink, int first, int last, const pdl_attn_kv *kv, bool bf16) {
    double s[512], mx = sink ? *sink : -INFINITY, z = 0, d = 0;
#define R_(x) (bf16 ? to_bf16(x) : (double)(x))
    for (int j = first; j <= last; j++) {
        double a = 0;
        for (int e = 0; e < hd; e++) a += R_(q[e]) * R_(kv_at(kv, hd, j, kv_head * hd + e, false));
        a *= scale;
        if (cap > 0) a = tanh(a / cap) * cap;
        s[j - first] = a;
        mx = fmax(mx, a);
    }
    for (int j = first; j <= last; j++) z += s[j - first] = exp(s[j - first] - mx);
    if (sink) z += exp(*sink - mx); /* the sink joins the denominator and takes no value */
    for (int e = 0; e < hd; e++) {
        double o = 0;
        for (int j = first; j <= last; j++) o += s[j - first] / z * R_(kv_at(kv, hd, j, kv_head * hd + e, true));
        d = fmax(d, fabs(o - got[e]));
    }
#undef R_
    return d;
}

/* The key spans check_bf16 and check_amx give their queries: each one's
 * causal keys (with the window), or with `wide` spans starting and ending
 * on odd and even positions around them (up to 20 keys past, 10 before). */
static void bf16_spans(int *first, int *last, const int *pos, int nq, int window, bool wide) {
    for (int i = 0; i < nq; i++) {
        first[i] = window && pos[i] - window + 1 > 0 ? pos[i] - window + 1 : 0, last[i] = pos[i];
        if (!wide) continue;
        last[i] = pos[i] + (i * 7) % 21;
        if (last[i] >= 150) last[i] = 149;
        int span_first = pos[i] - (i * 5) % 10 - (i & 1);
        if (span_first < first[i]) first[i] = span_first < 0 ? 0 : span_first;
    }
}

/* The BF16 order (attention.h) for one case of check_head_dim: the
 * portable reference against float64 over BF16-rounded q, K and V, where
 * only P's rounding to BF16 (2^-9 of each weight, so at most 2^-9 of the
 * largest |v|, here 1) and float32 sums are left: 2.1e-3; and the AVX-512
 * BF16 tiles, where the CPU has them, give its bytes for many queries at
 * once, one at a time, and ranges of either parity at both ends. */
static void check_bf16(const float *const *qs, const int *pos, int nq, int hd, float cap, const float *sk,
                       int window, const pdl_attn_kv *kv, float *scratch, float *got, float *want, int BSZ) {
    enum { NQ = 40 };
    float *outs[NQ], *outw[NQ];
    int first[NQ], last[NQ];
    for (int i = 0; i < nq; i++) outs[i] = got + (size_t)i * hd, outw[i] = want + (size_t)i * hd;
    bf16_spans(first, last, pos, nq, window, false);
    const double tol = 2.1e-3;
    attn_queries_bf16_scalar(outw, qs, pos, nq, hd, 1, 0.3f, cap, sk, window, kv, scratch);
    for (int i = 0; i < nq; i += nq > 1 ? nq - 1 : 1) { /* the first and the last query (time under qemu) */
        double d = ref_range_r(qs[i], outw[i], hd, 1, 0.3, cap, sk ? sk + i : NULL, first[i], last[i], kv, true);
        CHECK_MSG(d < tol, "BF16 head_dim %d block %d query %d: %.3g from float64 over BF16 inputs", hd, BSZ, i, d);
        if (d >= tol) break;
    }
    bool tiles = cpu_features_get()->avx512bf16;
    if (tiles) {
        attn_queries_avx512bf16(outs, qs, pos, nq, hd, 1, 0.3f, cap, sk, window, kv, scratch);
        CHECK_MSG(memcmp(got, want, (size_t)nq * hd * sizeof *got) == 0,
                  "BF16 head_dim %d block %d window %d cap %g: %d queries: AVX-512 BF16 tiles differ from the "
                  "portable order", hd, BSZ, window, cap, nq);
        for (int i = 0; i < nq; i++)
            attn_queries_avx512bf16(&outw[i], &qs[i], &pos[i], 1, hd, 1, 0.3f, cap, sk ? sk + i : NULL, window, kv,
                                    scratch);
        CHECK_MSG(memcmp(got, want, (size_t)nq * hd * sizeof *got) == 0,
                  "BF16 head_dim %d block %d: %d queries at once differ from one at a time", hd, BSZ, nq);
    }
    bf16_spans(first, last, pos, nq, window, true);
    attn_queries_bf16_scalar_ranges(outw, qs, first, last, nq, hd, 1, 0.3f, cap, sk, kv, scratch);
    for (int i = 0; i < nq; i += nq > 1 ? nq - 1 : 1) {
        double d = ref_range_r(qs[i], outw[i], hd, 1, 0.3, cap, sk ? sk + i : NULL, first[i], last[i], kv, true);
        CHECK_MSG(d < tol, "BF16 head_dim %d block %d query %d over [%d, %d]: %.3g from float64 over BF16 inputs",
                  hd, BSZ, i, first[i], last[i], d);
        if (d >= tol) break;
    }
    if (tiles) {
        attn_queries_avx512bf16_ranges(outs, qs, first, last, nq, hd, 1, 0.3f, cap, sk, kv, scratch);
        CHECK_MSG(memcmp(got, want, (size_t)nq * hd * sizeof *got) == 0,
                  "BF16 head_dim %d block %d: %d ranges: AVX-512 BF16 tiles differ from the portable order", hd, BSZ,
                  nq);
    }
}

/* The AMX order (attention.h), where the CPU has AMX-BF16, on the shapes
 * its tiles take (head_dim a multiple of 32, blocks of 16): every query
 * against float64 over BF16-rounded q, K and V within the BF16 order's
 * 2.1e-3 (the same roundings of q, K, V and the weights; the sums'
 * rounding is AMX's, the exponential good to 3e-6), and each query's bytes the same alone as among all of them, for
 * positions with a window and for ranges of either parity at both ends. */
static void check_amx(const float *const *qs, const int *pos, int nq, int hd, float cap, const float *sk,
                      int window, const pdl_attn_kv *kv, float *scratch, float *got, float *want, int BSZ) {
    enum { NQ = 40 };
    if (!attn_amx_built || !cpu_amx_bf16_ready() || hd % 32 || BSZ % 16) return;
    float *outs[NQ], *outw[NQ];
    int first[NQ], last[NQ];
    for (int i = 0; i < nq; i++) outs[i] = got + (size_t)i * hd, outw[i] = want + (size_t)i * hd;
    const double tol = 2.1e-3;
    for (int ranges = 0; ranges < 2; ranges++) {
        bf16_spans(first, last, pos, nq, window, ranges);
        attn_queries_amx_ranges(outs, qs, first, last, nq, hd, 1, 0.3f, cap, sk, kv, scratch);
        for (int i = 0; i < nq; i++) {
            double d = ref_range_r(qs[i], outs[i], hd, 1, 0.3, cap, sk ? sk + i : NULL, first[i], last[i], kv, true);
            CHECK_MSG(d < tol, "AMX head_dim %d block %d query %d over [%d, %d]: %.3g from float64 over BF16 inputs",
                      hd, BSZ, i, first[i], last[i], d);
            if (d >= tol) break;
        }
        for (int i = 0; i < nq; i++)
            if (ranges)
                attn_queries_amx_ranges(&outw[i], &qs[i], &first[i], &last[i], 1, hd, 1, 0.3f, cap,
                                        sk ? sk + i : NULL, kv, scratch);
            else
                attn_queries_amx(&outw[i], &qs[i], &pos[i], 1, hd, 1, 0.3f, cap, sk ? sk + i : NULL, window, kv,
                                 scratch);
        CHECK_MSG(memcmp(got, want, (size_t)nq * hd * sizeof *got) == 0,
                  "AMX head_dim %d block %d window %d cap %g: %d %s at once differ from one at a time", hd, BSZ,
                  window, cap, nq, ranges ? "ranges" : "queries");
    }
}

static void check_head_dim(int hd, int BSZ) {
    enum { NKV = 2, NPOS = 150, NBLK = 20 };
    int32_t table[NBLK];
    for (int b = 0; b < NBLK; b++) table[b] = (b * 7 + 3) % NBLK; /* scattered blocks */
    int kv_dim = NKV * hd;
    for (int f16 = 0; f16 < 4; f16++) { /* F32, F16, Q8_0 (2), Q4_0 (3) */
        int q4 = f16 == 3, q8 = f16 == 2 || q4; /* q8: a quantized cache, Q8_0 or Q4_0 */
        if (q8 && hd > 32 && hd % 32) continue; /* Q8_0 / Q4_0 caches need whole groups of 32 */
        if (q8 && hd == 256) continue;            /* 128's code with more groups: time saved under qemu */
        if (!q8 && hd < 32) continue;             /* the short heads are here for the one group per head */
        size_t elem = f16 ? 2 : 4, n = (size_t)NBLK * BSZ * kv_dim;
        uint8_t *kpool = malloc(n * elem), *vpool = malloc(n * elem);
        float *deq_k = NULL, *deq_v = NULL; /* Q8_0: the same cache dequantized into an F32 one */
        if (q8) {
            float *kr = malloc((size_t)kv_dim * sizeof *kr), *vr = malloc((size_t)kv_dim * sizeof *vr);
            for (int s = 0; s < NBLK * BSZ; s++) {
                for (int e = 0; e < kv_dim; e++) /* groups of different sizes, up to 1 as the others */
                    kr[e] = frand() * (float)(1 + (e / 32 + s) % 4) / 4, vr[e] = frand() * (float)(1 + (e / 32) % 3) / 3;
                (q4 ? attn_store_q4_0 : attn_store_q8_0)(kpool, vpool, 0, kv_dim, hd, BSZ, s, kr, vr);
            }
            free(kr), free(vr);
            pdl_attn_kv qk = {.k = kpool, .v = vpool, .kv_is_q8 = !q4, .kv_is_q4 = q4, .kv_dim = kv_dim,
                              .block_table = table, .block_size = BSZ};
            deq_k = malloc(n * sizeof *deq_k), deq_v = malloc(n * sizeof *deq_v);
            for (int pos = 0; pos < NBLK * BSZ; pos++) /* through the table both ways: every slot */
                for (int e = 0; e < kv_dim; e++) {
                    int64_t slot = (int64_t)table[pos / BSZ] * BSZ + pos % BSZ;
                    deq_k[attn_k_index(slot, BSZ, kv_dim, e)] = (float)kv_at(&qk, hd, pos, e, false);
                    deq_v[attn_v_index(slot, BSZ, kv_dim, hd, e)] = (float)kv_at(&qk, hd, pos, e, true);
                }
        }
        for (size_t i = 0; i < n && !q8; i++) {
            float k = frand(), v = frand();
            if (f16) {
                uint16_t kh = fp16_f32_to_f16(k), vh = fp16_f32_to_f16(v);
                memcpy(kpool + i * 2, &kh, 2), memcpy(vpool + i * 2, &vh, 2);
            } else {
                memcpy(kpool + i * 4, &k, 4), memcpy(vpool + i * 4, &v, 4);
            }
        }
        pdl_attn_kv kv = {.k = kpool, .v = vpool, .kv_is_f16 = f16 == 1, .kv_is_q8 = q8 && !q4, .kv_is_q4 = q4,
                          .kv_dim = kv_dim, .block_table = table, .block_size = BSZ};
        pdl_attn_kv kv_deq = {.k = deq_k, .v = deq_v, .kv_dim = kv_dim, .block_table = table, .block_size = BSZ};
        enum { NQ = 40 };
        float *q = malloc((size_t)NQ * hd * sizeof *q), *got = malloc((size_t)NQ * hd * sizeof *got);
        float *want = malloc((size_t)NQ * hd * sizeof *want);
        float *scratch = malloc(attn_queries_scratch(NQ, NPOS, hd) * sizeof *scratch);
        for (int i = 0; i < NQ * hd; i++) q[i] = frand();
        int windows[] = {0, 37};
        float caps[] = {0.0f, 0.7f};
        int counts[] = {1, 2, 3, 5, 16, 40}; /* every value tile height, 1 to 6 queries */
        /* attention sinks (gpt-oss): none, or one logit per query around the
         * scores' size, so that it takes a large share of some softmaxes */
        float sinkv[NQ];
        for (int i = 0; i < NQ; i++) sinkv[i] = 3.0f * frand();
        for (int si = 0; si < 2; si++)
        for (int wi = 0; wi < 2; wi++)
            for (int ci = 0; ci < 2; ci++)
                for (int k = 0; k < 6; k++) {
                    int nq = counts[k], pos[NQ];
                    float *outs[NQ];
                    const float *qs[NQ];
                    for (int i = 0; i < nq; i++) { /* consecutive rows, two heads each, as a prefill chunk */
                        pos[i] = 100 + i / 2 + (k == 5 ? 0 : 3 * k) - (k == 0 ? 100 : 0);
                        outs[i] = got + (size_t)i * hd;
                        qs[i] = q + (size_t)i * hd;
                    }
                    const float *sk = si ? sinkv : NULL;
                    attn_queries(outs, qs, pos, nq, hd, 1, 0.3f, caps[ci], sk, windows[wi], &kv, scratch);
                    for (int i = 0; i < nq; i++) {
                        float *wi_out = want + (size_t)i * hd;
                        if (sk)
                            attn_queries(&wi_out, &qs[i], &pos[i], 1, hd, 1, 0.3f, caps[ci], sk + i, windows[wi], &kv,
                                         scratch);
                        else attn_head(wi_out, qs[i], hd, 1, 0.3f, caps[ci], pos[i], windows[wi], &kv, scratch);
                    }
                    CHECK_MSG(memcmp(got, want, (size_t)nq * hd * sizeof *got) == 0,
                              "head_dim %d block %d f16 %d window %d cap %g: %d queries differ from one at a time", hd,
                              BSZ, f16, windows[wi], caps[ci], nq);
                    /* the portable body (the reference order) gives the same bytes */
                    float *outw[NQ];
                    for (int i = 0; i < nq; i++) outw[i] = want + (size_t)i * hd;
                    attn_queries_scalar(outw, qs, pos, nq, hd, 1, 0.3f, caps[ci], sk, windows[wi], &kv, scratch);
                    CHECK_MSG(memcmp(got, want, (size_t)nq * hd * sizeof *got) == 0,
                              "head_dim %d block %d f16 %d window %d cap %g: %d queries differ from the portable body",
                              hd, BSZ, f16, windows[wi], caps[ci], nq);
                    if (q8) { /* Q8_0 / Q4_0 attend exactly as F32 over their dequantized rows (attention.h) */
                        attn_queries_scalar(outw, qs, pos, nq, hd, 1, 0.3f, caps[ci], sk, windows[wi], &kv_deq,
                                            scratch);
                        CHECK_MSG(memcmp(got, want, (size_t)nq * hd * sizeof *got) == 0,
                                  "head_dim %d block %d window %d cap %g: %d queries: %s differs from F32 over "
                                  "its dequantized rows", hd, BSZ, windows[wi], caps[ci], nq, q4 ? "Q4_0" : "Q8_0");
                    }
                    /* and so does every SIMD build the CPU has (the dispatcher above
                     * took the best: AVX-512 or NEON; AVX2 has its own 8-lane tiles) */
                    for (size_t bi = 0; bi < sizeof simd_builds / sizeof simd_builds[0]; bi++) {
                        if (!cpu_isa_supported(simd_builds[bi].isa)) continue;
                        simd_builds[bi].fn(outw, qs, pos, nq, hd, 1, 0.3f, caps[ci], sk, windows[wi], &kv, scratch);
                        CHECK_MSG(memcmp(got, want, (size_t)nq * hd * sizeof *got) == 0,
                                  "head_dim %d block %d f16 %d window %d cap %g: %d queries: %s build differs", hd,
                                  BSZ, f16, windows[wi], caps[ci], nq, cpu_isa_name(simd_builds[bi].isa));
                    }
                    /* ranges: the causal ranges give the same bytes; any ranges
                     * (keys past the query's position: two-way spans) give every
                     * build the portable body's bytes and the float64 value */
                    int first[NQ], last[NQ];
                    for (int i = 0; i < nq; i++)
                        first[i] = windows[wi] && pos[i] - windows[wi] + 1 > 0 ? pos[i] - windows[wi] + 1 : 0,
                        last[i] = pos[i];
                    attn_ranges(outw, qs, first, last, nq, hd, 1, 0.3f, caps[ci], sk, &kv, scratch);
                    CHECK_MSG(memcmp(got, want, (size_t)nq * hd * sizeof *got) == 0,
                              "head_dim %d block %d: causal ranges differ from attn_queries", hd, BSZ);
                    for (int i = 0; i < nq; i++) { /* the causal results against float64 too */
                        double d = ref_range(qs[i], outs[i], hd, 1, 0.3, caps[ci], sk ? sk + i : NULL, first[i],
                                             last[i], &kv);
                        CHECK_MSG(d < 1e-5, "head_dim %d block %d sink %d query %d causal: %.3g from float64", hd,
                                  BSZ, si, i, d);
                        if (d >= 1e-5) break;
                    }
                    for (int i = 0; i < nq; i++) { /* spans reaching up to 20 keys past the row, down to 9 before */
                        last[i] = pos[i] + (i * 7) % 21;
                        if (last[i] >= NPOS) last[i] = NPOS - 1;
                        int span_first = pos[i] - (i * 5) % 10;
                        if (span_first < first[i]) first[i] = span_first < 0 ? 0 : span_first;
                    }
                    attn_ranges(outs, qs, first, last, nq, hd, 1, 0.3f, caps[ci], sk, &kv, scratch);
                    for (int i = 0; i < nq; i++) {
                        double d = ref_range(qs[i], outs[i], hd, 1, 0.3, caps[ci], sk ? sk + i : NULL, first[i],
                                             last[i], &kv);
                        CHECK_MSG(d < 1e-5, "head_dim %d block %d query %d over [%d, %d]: %.3g from float64", hd,
                                  BSZ, i, first[i], last[i], d);
                        if (d >= 1e-5) break;
                    }
                    for (int i = 0; i < nq; i++)
                        outw[i] = want + (size_t)i * hd;
                    attn_queries_scalar_ranges(outw, qs, first, last, nq, hd, 1, 0.3f, caps[ci], sk, &kv,
                                               scratch);
                    CHECK_MSG(memcmp(got, want, (size_t)nq * hd * sizeof *got) == 0,
                              "head_dim %d block %d: ranges differ from the portable body", hd, BSZ);
                    for (size_t bi = 0; bi < sizeof simd_builds / sizeof simd_builds[0]; bi++) {
                        if (!cpu_isa_supported(simd_builds[bi].isa)) continue;
                        simd_builds[bi].ranges(outw, qs, first, last, nq, hd, 1, 0.3f, caps[ci], sk, &kv, scratch);
                        CHECK_MSG(memcmp(got, want, (size_t)nq * hd * sizeof *got) == 0,
                                  "head_dim %d block %d: ranges: %s build differs", hd, BSZ,
                                  cpu_isa_name(simd_builds[bi].isa));
                    }
#if !defined(__aarch64__) /* no BF16 tiles there: the portable order is checked on x86, not again under qemu */
                    /* the heads the tiles take (others run the portable order itself), 2 queries (the
                     * tiles' direct path, and 1 at a time) and 40 (the buffers, every value tile height),
                     * sinks with soft-caps and neither: the portable reference is slow under the
                     * sanitizers */
                    if (hd % 16 == 0 && hd <= 128 && (k == 1 || k == 5) && si == ci)
                        check_bf16(qs, pos, nq, hd, caps[ci], sk, windows[wi], &kv, scratch, got, want, BSZ);
                    if (k == 1 || k == 5)
                        check_amx(qs, pos, nq, hd, caps[ci], sk, windows[wi], &kv, scratch, got, want, BSZ);
#endif
                }
        free(q), free(got), free(want), free(scratch), free(kpool), free(vpool), free(deq_k), free(deq_v);
    }
}

static void test_query_blocks_equal_single_queries(void) {
    fp16_init();
    int dims[] = {64, 128, 256, 48, 40, 8, 24}, blocks[] = {16, 48, 8};
    for (int i = 0; i < 7; i++)
        for (int b = 0; b < 3; b++) check_head_dim(dims[i], blocks[b]);
}

/* The AVX-512 build directly (the dispatcher picks it only on such CPUs). */
static void test_avx512_build_equals_its_single_query_body(void) {
    if (!cpu_isa_supported(PDL_ISA_AVX512)) {
        fprintf(stderr, "  (no AVX-512 on this CPU: dispatcher checks only)\n");
        return;
    }
    fp16_init();
    enum { HD = 128, BSZ = 16, NPOS = 70 };
    int32_t table[5] = {4, 0, 3, 1, 2};
    float *k = malloc((size_t)5 * BSZ * HD * sizeof *k), *v = malloc((size_t)5 * BSZ * HD * sizeof *v);
    for (int i = 0; i < 5 * BSZ * HD; i++) k[i] = frand(), v[i] = frand();
    pdl_attn_kv kv = {.k = k, .v = v, .kv_is_f16 = 0, .kv_dim = HD, .block_table = table, .block_size = BSZ};
    float q[3][HD], got[3][HD], want[3][HD];
    float *scratch = malloc(attn_queries_scratch(3, NPOS, HD) * sizeof *scratch);
    for (int i = 0; i < 3 * HD; i++) q[i / HD][i % HD] = frand();
    int pos[3] = {69, 33, 0};
    float *outs[3] = {got[0], got[1], got[2]};
    const float *qs[3] = {q[0], q[1], q[2]};
    attn_queries_avx512(outs, qs, pos, 3, HD, 0, 0.1f, 0.0f, NULL, 0, &kv, scratch);
    for (int i = 0; i < 3; i++) {
        float *o = want[i];
        const float *qi = q[i];
        attn_queries_avx512(&o, &qi, &pos[i], 1, HD, 0, 0.1f, 0.0f, NULL, 0, &kv, scratch);
    }
    CHECK(memcmp(got, want, sizeof got) == 0);
    free(k), free(v), free(scratch);
}

/* The cache write: the F16C and NEON builds give the portable one's bytes (round to
 * nearest even, ties, subnormals, overflow, infinities, NaN), and each key
 * element lands where attention.h's layout says (the attention above reads
 * it there): keys dimension-major, values slot-major, head by head within a
 * block (written out here, not through the index helpers). */
static void test_cache_store_builds_agree(void) {
    fp16_init();
    enum { KVD = 75, HD = 15, BS = 16, SLOTS = 48 }; /* 5 heads of 15: ragged ends after 8-wide steps */
    float k[KVD], v[KVD];
    size_t n = (size_t)SLOTS * KVD;
    uint16_t *k0 = calloc(n, 2), *v0 = calloc(n, 2), *k1 = calloc(n, 2), *v1 = calloc(n, 2);
    REQUIRE(k0 && v0 && k1 && v1);
    /* the build this CPU has (none: the portable one against itself) */
    pdl_attention_store_fn store = attn_store_scalar;
    if (cpu_isa_supported(PDL_ISA_AVX2)) store = attn_store_f16c;
    if (cpu_isa_supported(PDL_ISA_NEON)) store = attn_store_neon;
    const float special[] = {0.0f, -0.0f, 65504.0f, 65520.0f, 1e6f, -1e6f, 5.96e-8f, 2.98e-8f, 2.9802326e-8f,
                             6.1e-5f, 1.0f + 1.0f / 2048.0f, 1.0f + 3.0f / 2048.0f, INFINITY, -INFINITY, NAN};
    int bad_place = 0;
    for (int s = 0; s < SLOTS; s++) {
        for (int e = 0; e < KVD; e++) {
            k[e] = (e + s) % 5 == 0 ? special[(e + s) % 15] : frand() * 8.0f;
            v[e] = (e * 3 + s) % 7 == 0 ? special[(e * 7 + s) % 15] : frand() * 8.0f;
        }
        int64_t slot = (s * 7) % SLOTS;
        attn_store_scalar(k0, v0, 1, KVD, HD, BS, slot, k, v);
        store(k1, v1, 1, KVD, HD, BS, slot, k, v);
        size_t block = (size_t)slot / BS, off = (size_t)slot % BS;
        for (int e = 0; e < KVD; e++) {
            size_t at_head = (block * KVD + (size_t)(e / HD) * HD) * BS;
            if (k0[at_head + (size_t)(e % HD) * BS + off] != fp16_f32_to_f16(k[e]) ||
                v0[at_head + off * HD + (size_t)(e % HD)] != fp16_f32_to_f16(v[e]))
                bad_place++;
        }
    }
    CHECK_EQ_INT(bad_place, 0);
    CHECK(memcmp(k0, k1, n * 2) == 0);
    CHECK(memcmp(v0, v1, n * 2) == 0);
    free(k0), free(v0), free(k1), free(v1);
}

/* Round a double to the nearest half (ties to even), the test's own
 * reading of IEEE binary16 (finite results only: the callers stay below
 * 65504). */
static uint16_t test_to_half(double x) {
    uint16_t best = 0;
    double bd = INFINITY;
    for (uint32_t h = 0; h < 0x7c00u; h++) { /* every finite non-negative half */
        double v = ldexp((double)(h & 0x3ff) + ((h >> 10) ? 1024 : 0), (h >> 10) ? (int)(h >> 10) - 25 : -24);
        double d = fabs(v - fabs(x));
        if (d < bd || (d == bd && (h & 1) == 0)) bd = d, best = (uint16_t)h;
    }
    return (uint16_t)(best | (x < 0 ? 0x8000u : 0));
}

/* The Q8_0 store against the format's definition read here: per group of
 * 32, scale = f16(max|x| / 127) (the division in float, as llama.cpp's
 * quantize_row_q8_0 does; f16 rounding written out above), q = round(x /
 * scale) half away from zero, each byte at the place the layout says
 * (q8_at). Groups of all sizes: tiny (subnormal scales), zero, huge, ties
 * x / scale = k + 0.5, and every sign. */
static void test_q8_store_bit_exact(void) {
    fp16_init();
    enum { HD = 64, NKV = 2, KVD = HD * NKV, BS = 16, SLOTS = 32 };
    int32_t table[2] = {1, 0};
    uint8_t *kp = calloc((size_t)SLOTS * KVD * 2, 1), *vp = calloc((size_t)SLOTS * KVD * 2, 1);
    REQUIRE(kp && vp);
    pdl_attn_kv kv = {.k = kp, .v = vp, .kv_is_q8 = 1, .kv_dim = KVD, .block_table = table, .block_size = BS};
    float k[KVD], v[KVD];
    int bad_scale = 0, bad_q = 0, checked = 0;
    for (int s = 0; s < SLOTS; s++) {
        for (int e = 0; e < KVD; e++) {
            int g = (e / 32 + s) % 6;
            float mag = g == 0 ? 1e-9f : g == 1 ? 0.0f : g == 2 ? 3000.0f : g == 3 ? 1.0f : g == 4 ? 0.01f : 17.0f;
            k[e] = frand() * mag, v[e] = frand() * mag * 0.5f;
            if (g == 5 && e % 32 == 3) k[e] = -k[e - 1] * 1.0f; /* a sign flip of a neighbour */
        }
        if (s == 5) /* a tie: max 127 * 0.5 gives scale 0.5 exactly, x = 2.25 is q = 4.5 -> 5 */
            for (int e = 0; e < 32; e++) k[e] = e == 0 ? 63.5f : e == 1 ? 2.25f : e == 2 ? -2.25f : 0.0f;
        attn_store_q8_0(kp, vp, 0, KVD, HD, BS, s, k, v);
        int pos = s < BS ? BS + s : s - BS; /* slot s through table {1, 0} */
        for (int which = 0; which < 2; which++) {
            const float *x = which ? v : k;
            for (int g0 = 0; g0 < KVD; g0 += 32) {
                float amax = 0;
                for (int i = 0; i < 32; i++) amax = fabsf(x[g0 + i]) > amax ? fabsf(x[g0 + i]) : amax;
                float d = amax / 127.0f;
                uint16_t want_h = test_to_half((double)d);
                double S = fp16_f16_to_f32(want_h);
                for (int i = 0; i < 32; i++) {
                    double want_q = 0;
                    if (S > 0) {
                        float r = x[g0 + i] / (float)S;
                        want_q = r >= 0 ? floor((double)r + 0.5) : -floor(-(double)r + 0.5);
                        if (want_q > 127) want_q = 127;
                        if (want_q < -127) want_q = -127;
                    }
                    double got = q8_at(&kv, HD, pos, g0 + i, which == 1);
                    if (got != S * want_q) bad_q++;
                    checked++;
                }
                /* the scale itself, at its place */
                const uint8_t *sp = which ? vp + (size_t)(s / BS) * (KVD / 32) * 34 * BS +
                                                 (size_t)(g0 / HD) * (HD / 32) * 34 * BS + (size_t)(s % BS) * (HD / 32) * 34 +
                                                 (size_t)((g0 % HD) / 32) * 34
                                          : kp + (size_t)(s / BS) * (KVD / 32) * 34 * BS + (size_t)(g0 / 32) * 34 * BS +
                                                 32 * BS + 2 * (size_t)(s % BS);
                uint16_t got_h;
                memcpy(&got_h, sp, 2);
                if (got_h != want_h) bad_scale++;
            }
        }
    }
    CHECK_EQ_INT(bad_scale, 0);
    CHECK_EQ_INT(bad_q, 0);
    CHECK(checked == SLOTS * KVD * 2);
    free(kp), free(vp);
}

/* The Q4_0 store against its definition (attention.h) read here: per group
 * of 32, m = the element of largest magnitude (the first of equals), scale
 * = f16(m / -8), code = min(15, floor(x / scale + 8.5)) (8 for a zero
 * scale), each nibble at the place the layout says (q4_at). Groups of all
 * sizes (tiny: subnormal scales; zero; huge), the largest element of either
 * sign (it is code 0 exactly), codes at the clamp (x = -m is 16 -> 15), and
 * a tie x / scale = k + 0.5 that must round up. */
static void test_q4_store_bit_exact(void) {
    fp16_init();
    enum { HD = 64, NKV = 2, KVD = HD * NKV, BS = 16, SLOTS = 32 };
    int32_t table[2] = {1, 0};
    uint8_t *kp = calloc((size_t)SLOTS * KVD, 1), *vp = calloc((size_t)SLOTS * KVD, 1);
    REQUIRE(kp && vp);
    pdl_attn_kv kv = {.k = kp, .v = vp, .kv_is_q4 = 1, .kv_dim = KVD, .block_table = table, .block_size = BS};
    float k[KVD], v[KVD];
    int bad_scale = 0, bad_q = 0, checked = 0, clamped = 0;
    for (int s = 0; s < SLOTS; s++) {
        for (int e = 0; e < KVD; e++) {
            int g = (e / 32 + s) % 6;
            float mag = g == 0 ? 1e-9f : g == 1 ? 0.0f : g == 2 ? 3000.0f : g == 3 ? 1.0f : g == 4 ? 0.01f : 17.0f;
            k[e] = frand() * mag, v[e] = frand() * mag * 0.5f;
            if (g == 5 && e % 32 == 3) k[e] = -k[e - 1]; /* a sign flip of a neighbour */
        }
        if (s == 5) /* m = -4: scale 0.5; 1.25 / 0.5 + 8.5 = 11 exactly; 4 is 16.5 -> 15 */
            for (int e = 0; e < 32; e++) k[e] = e == 0 ? -4.0f : e == 1 ? 1.25f : e == 2 ? 4.0f : e == 3 ? -0.25f : 0.0f;
        attn_store_q4_0(kp, vp, 0, KVD, HD, BS, s, k, v);
        int pos = s < BS ? BS + s : s - BS; /* slot s through table {1, 0} */
        for (int which = 0; which < 2; which++) {
            const float *x = which ? v : k;
            for (int g0 = 0; g0 < KVD; g0 += 32) {
                float amax = 0, m = 0;
                for (int i = 0; i < 32; i++)
                    if (fabsf(x[g0 + i]) > amax) amax = fabsf(x[g0 + i]), m = x[g0 + i];
                float d = m / -8.0f; /* -0 for an all-zero group */
                uint16_t want_h = (uint16_t)(test_to_half((double)d) | (signbit(d) ? 0x8000u : 0));
                double S = fp16_f16_to_f32(want_h);
                for (int i = 0; i < 32; i++) {
                    double want_c = 8;
                    if (S != 0) {
                        want_c = floor((double)(x[g0 + i] / (float)S + 8.5f));
                        if (want_c > 15) want_c = 15, clamped++;
                        if (want_c < 0) want_c = 0;
                    }
                    double got = q4_at(&kv, HD, pos, g0 + i, which == 1);
                    if (got != S * (want_c - 8)) bad_q++;
                    checked++;
                }
                const uint8_t *sp = which ? vp + (size_t)(s / BS) * (KVD / 32) * 18 * BS +
                                                 (size_t)(g0 / HD) * (HD / 32) * 18 * BS + (size_t)(s % BS) * (HD / 32) * 18 +
                                                 (size_t)((g0 % HD) / 32) * 18
                                          : kp + (size_t)(s / BS) * (KVD / 32) * 18 * BS + (size_t)(g0 / 32) * 18 * BS +
                                                 16 * BS + 2 * (size_t)(s % BS);
                uint16_t got_h;
                memcpy(&got_h, sp, 2);
                if (got_h != want_h) bad_scale++;
            }
        }
        if (s == 5) { /* the written-out case, read back */
            CHECK(q4_at(&kv, HD, pos, 0, false) == -4.0 && q4_at(&kv, HD, pos, 1, false) == 1.5 &&
                  q4_at(&kv, HD, pos, 2, false) == 3.5 && q4_at(&kv, HD, pos, 3, false) == 0.0);
        }
    }
    CHECK_EQ_INT(bad_scale, 0);
    CHECK_EQ_INT(bad_q, 0);
    CHECK(clamped > 0);
    CHECK(checked == SLOTS * KVD * 2);
    free(kp), free(vp);
}

/* In the BF16 order a position outside a query's range enters as p = 0,
 * v = 0 even where it shares a pair of positions with the query's first or
 * last key: NaN and infinite keys and values at positions 61 and 64 reach
 * no query over [.., 60] or [65, ..] (the tiles pair 60 with 61 and 64
 * with 65), in any build, and the tiles give the portable order's bytes. */
static void test_bf16_outside_keys_reach_nothing(void) {
    fp16_init();
    enum { HD = 64, BSZ = 16, NBLK = 8, NQ = 7 };
    int32_t table[NBLK] = {5, 2, 7, 0, 3, 6, 1, 4};
    size_t n = (size_t)NBLK * BSZ * HD;
    uint16_t *k = malloc(n * sizeof *k), *v = malloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++) k[i] = fp16_f32_to_f16(frand()), v[i] = fp16_f32_to_f16(frand());
    pdl_attn_kv kv = {.k = k, .v = v, .kv_is_f16 = 1, .kv_dim = HD, .block_table = table, .block_size = BSZ};
    int bad[2] = {61, 64};
    for (int b = 0; b < 2; b++)
        for (int e = 0; e < HD; e++) {
            int64_t slot = (int64_t)table[bad[b] / BSZ] * BSZ + bad[b] % BSZ;
            k[attn_k_index(slot, BSZ, HD, e)] = e % 2 ? 0x7E00 : 0x7C00; /* NaN, +infinity */
            v[attn_v_index(slot, BSZ, HD, HD, e)] = e % 2 ? 0x7C00 : 0x7E00;
        }
    /* ranges with no keys in common, then six that share their partial
     * last pair (61 outside each), then six that share their partial first
     * pair (64); the seventh query, in a value tile of its own, makes the
     * call read 61 and 64 */
    const int firsts[3][NQ] = {{0, 0, 30, 65, 65, 66, 2}, {0, 3, 31, 1, 5, 29, 65}, {65, 65, 65, 65, 65, 65, 0}};
    const int lasts[3][NQ] = {
        {60, 60, 60, 65, 100, 99, 3}, {60, 60, 60, 60, 60, 60, 70}, {70, 90, 100, 101, 120, 127, 10}};
    float *q = malloc((size_t)NQ * HD * sizeof *q), got[NQ * HD], want[NQ * HD], amx[2][NQ * HD];
    for (int i = 0; i < NQ * HD; i++) q[i] = frand();
    float *scratch = malloc(attn_queries_scratch(NQ, 128, HD) * sizeof *scratch);
    const float *qs[NQ];
    float *outs[NQ], *outw[NQ], *outa[2][NQ];
    for (int i = 0; i < NQ; i++) qs[i] = q + i * HD, outs[i] = got + i * HD, outw[i] = want + i * HD;
    for (int i = 0; i < NQ; i++) outa[0][i] = amx[0] + i * HD, outa[1][i] = amx[1] + i * HD;
    bool has_amx = attn_amx_built && cpu_amx_bf16_ready();
    for (int set = 0; set < 3; set++)
    for (int nq = 1; nq <= NQ; nq += NQ - 1) { /* one query at a time, and all in one call */
        const int *first = firsts[set], *last = lasts[set];
        for (int i0 = 0; i0 < NQ; i0 += nq) {
            memset(scratch, 0xFF, attn_queries_scratch(NQ, 128, HD) * sizeof *scratch); /* NaN everywhere */
            attn_queries_bf16_scalar_ranges(outw + i0, qs + i0, first + i0, last + i0, nq, HD, 0, 0.3f, 0.0f, NULL,
                                            &kv, scratch);
            if (has_amx) { /* the AMX tiles: the masked tile path */
                memset(scratch, 0xFF, attn_queries_scratch(NQ, 128, HD) * sizeof *scratch);
                attn_queries_amx_ranges(outa[nq > 1] + i0, qs + i0, first + i0, last + i0, nq, HD, 0, 0.3f, 0.0f,
                                        NULL, &kv, scratch);
            }
            if (!cpu_features_get()->avx512bf16) continue;
            memset(scratch, 0xFF, attn_queries_scratch(NQ, 128, HD) * sizeof *scratch);
            attn_queries_avx512bf16_ranges(outs + i0, qs + i0, first + i0, last + i0, nq, HD, 0, 0.3f, 0.0f, NULL,
                                           &kv, scratch);
        }
        bool finite = true;
        for (int i = 0; i < NQ * HD; i++) finite &= isfinite(want[i]) != 0;
        CHECK_MSG(finite, "BF16 portable order: a NaN or infinity outside a query's range reached it");
        if (cpu_features_get()->avx512bf16)
            CHECK_MSG(memcmp(got, want, sizeof got) == 0,
                      "BF16 tiles (ranges %d, %d queries a call): a NaN or infinity outside a query's range reached "
                      "it", set, nq);
        if (has_amx && nq > 1) {
            finite = true;
            for (int i = 0; i < NQ * HD; i++) finite &= isfinite(amx[1][i]) != 0;
            CHECK_MSG(finite && memcmp(amx[0], amx[1], sizeof amx[0]) == 0,
                      "AMX tiles (ranges %d): a NaN or infinity outside a query's range reached it", set);
        }
    }
    if (!has_amx) fprintf(stderr, "  (no AMX on this CPU: its tiles are not checked)\n");
    if (!cpu_features_get()->avx512bf16) fprintf(stderr, "  (no AVX512_BF16 on this CPU: the portable order only)\n");
    free(k), free(v), free(q), free(scratch);
}

int main(void) {
    RUN(test_cache_store_builds_agree);
    RUN(test_q8_store_bit_exact);
    RUN(test_q4_store_bit_exact);
    RUN(test_query_blocks_equal_single_queries);
    RUN(test_avx512_build_equals_its_single_query_body);
    RUN(test_bf16_outside_keys_reach_nothing);
    return test_summary();
}
