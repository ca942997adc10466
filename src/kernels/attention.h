/*
 * attention.h - causal attention of query rows over a paged KV cache.
 *
 * Pure functions over plain pointers: the caller passes the layer's K and V
 * pools and the sequence's block table.
 *
 * Cache layout (per layer): a block holds block_size slots; slot s is in
 * block s / block_size at offset s % block_size, and each block is
 * kv_dim * block_size elements of K and as many of V, head after head.
 * K is dimension-major within a head: element e (= kv_head * head_dim + d)
 * of the key in slot s is at attn_k_index(s, block_size, kv_dim, e),
 * so for one dimension the keys of a block lie side by side and a vector
 * load takes 16 of them. V is slot-major within a head: the value of slot
 * s for element e is at attn_v_index(s, block_size, kv_dim, head_dim,
 * e), so one head's values of a block are one run of block_size * head_dim
 * elements and the value products read them in order (a row of every
 * head, kv_dim apart, put each head's rows a power of two apart, which
 * keeps few of them in a set-associative cache).
 *
 * Order of operations (every build gives the same bits: the portable
 * reference in attention_body.h and the AVX-512, AVX2 and NEON tiles follow
 * it exactly),
 * for a query q at position pos over keys j in [first, pos] (first = 0, or
 * with a sliding window W > 0, max(0, pos - W + 1); attn_ranges
 * takes any [first, last] per query):
 *   score:   acc = fma(q[d], k_j[d], acc) for d = 0 .. head_dim - 1 from 0,
 *            s_j = acc * scale, then s_j = softcap * tanh(s_j / softcap)
 *            when softcap > 0 (Gemma 2);
 *   softmax: m = max s_j (and the query's sink logit z when it has one);
 *            p_j = fexp_nonpos(s_j - m); 16 partial sums,
 *            lane l adding p_{first + l}, p_{first + l + 16}, ... in order
 *            from 0, reduced as (l + l+8), then (+4), then
 *            (0 + 2) + (1 + 3); with a sink, sum += fexp_nonpos(z - m)
 *            (gpt-oss: the sink joins the denominator and takes no value);
 *            p_j *= 1 / sum;
 *   output:  out[d] = fma(p_j, v_j[d], out[d]) for j = first .. pos from 0.
 * So a query's result depends only on its own query and its sequence's
 * cache, never on the other queries of a call or on the batch.
 *
 * The BF16 order (the forward's attention when attn_set_order asks for it,
 * on the AVX-512 family with AVX512_BF16 and on the portable one; head_dim
 * even): bf(x) is x rounded to BF16 as VCVTNEPS2BF16
 * rounds it (a denormal x as zero of its sign, then to nearest even), and
 * dp(acc, a, b) = daz(fma(daz(a), daz(b), acc)) one step of VDPBF16PS (daz: a
 * denormal as zero of its sign). x is the element's float value (F16
 * widened, Q8_0 / Q4_0 S * q).
 *   score:   acc = 0; for t = 0 .. head_dim / 2 - 1:
 *            acc = dp(acc, bf(q[2t + 1]), bf(k_j[2t + 1])), then
 *            acc = dp(acc, bf(q[2t]), bf(k_j[2t]));
 *            scale, soft-cap and softmax as above (F32);
 *   output:  out[d] = 0; for each pair of positions (2m, 2m + 1) with a key
 *            in [first, last], m rising:
 *            out[d] = dp(out[d], bf(p_{2m+1}), bf(v_{2m+1}[d])), then
 *            out[d] = dp(out[d], bf(p_{2m}), bf(v_{2m}[d])),
 *            a position outside [first, last] taking p = 0 and v = 0.
 * Pairs are fixed by absolute position, so the bits still depend only on
 * the query and its sequence's cache. Against the F32 order each product
 * carries the rounding of both its factors to BF16 (2^-9 relative each): a
 * score is off by about 2^-9 |q| |k| / sqrt(head_dim) at most (random
 * signs), an output by about 2^-8 of its largest value's magnitude
 * (test_attention checks the order against float64 over BF16-rounded q, K
 * and V, where only P's rounding, 2^-9 of the largest |v|, is left).
 *
 * The AMX order (attention_amx.c; AVX-512 with AMX-BF16 only): q, K, V are
 * rounded to BF16 as in the BF16 order, and the products are AMX's
 * TDPBF16PS, which multiplies a tile of up to 16 rows (queries) by 32 BF16
 * elements against 16 columns (keys, or dimensions):
 *   score:   acc = 0; for each run of 32 dimensions from 0, rising:
 *            acc = TDPBF16PS(acc, q's run, k_j's run); s_j = acc * scale
 *            (then the soft-cap as above when softcap > 0);
 *   weights: m = max s_j (and the sink); p_j = e^(s_j - m), s_j - m
 *            rounded once (fma(acc, scale, -m) when uncapped), e^ to about
 *            3e-6 relative (attention_amx.c's amx_exp); sum = the p_j in 16
 *            lanes, lane l adding the positions j = l mod 16 in order, reduced
 *            as the F32 order's lanes, + e^(z - m) with a sink z; w_j =
 *            bf(p_j);
 *   output:  o[d] = 0; for each tile of 32 positions (tiles starting at
 *            multiples of 32), rising, that meets the query's range:
 *            o[d] = TDPBF16PS(o[d], w's tile, v's tile at d), a position
 *            outside [first, last] taking w = 0 and v = 0;
 *            out[d] = o[d] * (1 / sum) + 0 (a zero sum is +0).
 * How TDPBF16PS rounds inside one product is the hardware's: none of the
 * sixteen emulations tried (a rounding per product or per pair, either
 * element first; the exact sum, or groups of it, rounded to nearest, toward
 * zero or to odd; products aligned to windows of 24 to 30 bits) gives its
 * bits, so no portable code follows this order and its bits are those of
 * AMX alone. They still depend only
 * on the query and its sequence's cache (a tile's row depends only on its
 * own row of A). Against float64 over BF16-rounded q, K and V the error is
 * of the BF16 order's size, 2^-9 of the largest |v| from the weights'
 * rounding (test_attention holds it to the same bound).
 */
#ifndef PDL_KERNELS_ATTENTION_H
#define PDL_KERNELS_ATTENTION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/cpu_features.h"

typedef struct pdl_attn_kv {
    const void *k;             /* layer's K pool: blocks of [kv_dim][block_size] */
    const void *v;             /* layer's V pool: [slots][kv_dim] */
    int kv_is_f16;             /* element type of k and v: F16 or F32 */
    int kv_is_q8;              /* Q8_0 instead (the layout below; kv_is_f16 then unused) */
    int kv_is_q4;              /* Q4_0 instead (the layout below; kv_is_f16 and kv_is_q8 then 0) */
    int kv_dim;                /* n_kv_heads * head_dim */
    const int32_t *block_table;/* the sequence's blocks, in position order */
    int block_size;
} pdl_attn_kv;

/* Index (in elements) of element e of the key in `slot` in a K pool. */
static inline size_t attn_k_index(int64_t slot, int block_size, int kv_dim, int e) {
    int64_t block = slot / block_size;
    return ((size_t)block * (size_t)kv_dim + (size_t)e) * (size_t)block_size + (size_t)(slot % block_size);
}

/* Index (in elements) of element e (= kv_head * head_dim + d) of the
 * value in `slot` in a V pool. */
static inline size_t attn_v_index(int64_t slot, int block_size, int kv_dim, int head_dim, int e) {
    int64_t block = slot / block_size;
    int head = e / head_dim;
    return ((size_t)block * (size_t)kv_dim + (size_t)head * (size_t)head_dim) * (size_t)block_size +
           (size_t)(slot % block_size) * (size_t)head_dim + (size_t)(e % head_dim);
}

/*
 * The Q8_0 cache (kv_is_q8): every group of gs = attn_q8_group(head_dim)
 * elements of a head's key or value row (32, as llama.cpp's block_q8_0;
 * the whole head when head_dim < 32; head_dim >= 32 must be a multiple of
 * 32) is one f16 scale S and gs int8 q, the element being S * q (exact in
 * float: an 11-bit times an 8-bit significand), so the kernels dequantize
 * as they load and keep the order of operations above bit for bit: a Q8_0
 * cache attends exactly as an F32 cache holding the dequantized rows. A
 * block is attn_q8_block_bytes of K and as many of V (gs + 2 bytes per gs
 * elements and slot). K, per group of kv_dim (group G = e / gs):
 * [gs][block_size] int8 dimension-major (as F16's K), then [block_size]
 * f16 scales, one per slot. V, per head: its block_size rows in slot order,
 * a row being head_dim / gs blocks of (f16 scale, gs int8), block_q8_0's
 * layout.
 *
 * The Q4_0 cache (kv_is_q4): the same groups, each one f16 scale S and gs
 * 4-bit codes c, the element being S * (c - 8) (exact in float), two codes
 * to a byte as in llama.cpp's block_q4_0: byte i of a group holds element
 * i in its low nibble and element i + gs / 2 in its high nibble (head_dim
 * even). So a group is cb = gs / 2 code bytes and its scale: K, per group,
 * [cb][block_size] bytes (byte (i, slot): elements i and i + cb of the key
 * in slot, so one load still takes neighbouring keys), then [block_size]
 * f16 scales; V, per head, its rows in slot order, a row being head_dim /
 * gs blocks of (f16 scale, cb code bytes). The kernels widen the low
 * nibbles of a group's bytes for its first cb dimensions and the high ones
 * for the rest, so the dimensions still run in order and a Q4_0 cache too
 * attends exactly as an F32 cache of its dequantized rows.
 *
 * attn_kvq_* give both layouts' addresses (q4: 0 for Q8_0, 1 for Q4_0);
 * attn_q8_* are Q8_0's.
 */
static inline int attn_q8_group(int head_dim) { return head_dim < 32 ? head_dim : 32; }
/* Code bytes per group: gs (Q8_0) or gs / 2 (Q4_0). */
static inline int attn_kvq_code_bytes(int head_dim, int q4) {
    return q4 ? attn_q8_group(head_dim) / 2 : attn_q8_group(head_dim);
}
static inline size_t attn_kvq_block_bytes(int block_size, int kv_dim, int head_dim, int q4) {
    int gs = attn_q8_group(head_dim);
    return (size_t)(kv_dim / gs) * (size_t)(attn_kvq_code_bytes(head_dim, q4) + 2) * (size_t)block_size;
}
/* Byte offset in a K pool of the code byte of element e of the key in slot
 * (Q4_0: its low nibble when e % gs < gs / 2, else its high nibble; the
 * scale: attn_kvq_k_scale). */
static inline size_t attn_kvq_k_byte(int64_t slot, int block_size, int kv_dim, int head_dim, int e, int q4) {
    int64_t block = slot / block_size;
    int gs = attn_q8_group(head_dim), cb = attn_kvq_code_bytes(head_dim, q4);
    return (size_t)block * attn_kvq_block_bytes(block_size, kv_dim, head_dim, q4) +
           (size_t)(e / gs) * (size_t)(cb + 2) * (size_t)block_size + (size_t)(e % gs % cb) * (size_t)block_size +
           (size_t)(slot % block_size);
}
/* Byte offset in a K pool of the f16 scale of element e's group of the key in slot. */
static inline size_t attn_kvq_k_scale(int64_t slot, int block_size, int kv_dim, int head_dim, int e, int q4) {
    int64_t block = slot / block_size;
    int gs = attn_q8_group(head_dim), cb = attn_kvq_code_bytes(head_dim, q4);
    return (size_t)block * attn_kvq_block_bytes(block_size, kv_dim, head_dim, q4) +
           (size_t)(e / gs) * (size_t)(cb + 2) * (size_t)block_size + (size_t)cb * (size_t)block_size +
           2 * (size_t)(slot % block_size);
}
/* Byte offset in a V pool of the block (f16 scale, code bytes) holding
 * element e (= kv_head * head_dim + d) of the value in slot. */
static inline size_t attn_kvq_v_byte(int64_t slot, int block_size, int kv_dim, int head_dim, int e, int q4) {
    int64_t block = slot / block_size;
    int gs = attn_q8_group(head_dim), cb = attn_kvq_code_bytes(head_dim, q4);
    size_t row = (size_t)(head_dim / gs) * (size_t)(cb + 2);
    return (size_t)block * attn_kvq_block_bytes(block_size, kv_dim, head_dim, q4) +
           (size_t)(e / head_dim) * row * (size_t)block_size + (size_t)(slot % block_size) * row +
           (size_t)((e % head_dim) / gs) * (size_t)(cb + 2);
}
static inline size_t attn_q8_block_bytes(int block_size, int kv_dim, int head_dim) {
    return attn_kvq_block_bytes(block_size, kv_dim, head_dim, 0);
}
static inline size_t attn_q8_k_byte(int64_t slot, int block_size, int kv_dim, int head_dim, int e) {
    return attn_kvq_k_byte(slot, block_size, kv_dim, head_dim, e, 0);
}
static inline size_t attn_q8_k_scale(int64_t slot, int block_size, int kv_dim, int head_dim, int e) {
    return attn_kvq_k_scale(slot, block_size, kv_dim, head_dim, e, 0);
}
static inline size_t attn_q8_v_byte(int64_t slot, int block_size, int kv_dim, int head_dim, int e) {
    return attn_kvq_v_byte(slot, block_size, kv_dim, head_dim, e, 0);
}

/* One group of n floats to Q8_0: S = max|x| / 127 rounded to f16 (nearest
 * even; capped at the largest finite half), q = round(x / S) (half away
 * from zero, clamped to [-127, 127]); S = 0 gives q = 0. */
void attn_q8_quantize_group(const float *x, int n, uint16_t *scale, int8_t *q);
/* One group of n (even) floats to Q4_0: m = the element of largest
 * magnitude (the first of equals; NaNs never win), S = m / -8 rounded to
 * f16 (nearest even; capped at +-65504), code c = min(15, floor(x / S +
 * 8.5)) (at least 0; 8 when S = 0 or x is NaN), stored two to a byte:
 * byte i = c[i] | c[i + n / 2] << 4. */
void attn_q4_quantize_group(const float *x, int n, uint16_t *scale, uint8_t *codes);

/* Writes one slot's key and value (kv_dim floats each, heads of head_dim,
 * F16 rounded to nearest even when kv_is_f16) into layer pools of the
 * layout above. */
typedef void (*pdl_attention_store_fn)(void *kpool, void *vpool, int kv_is_f16, int kv_dim, int head_dim,
                                       int block_size, int64_t slot, const float *k, const float *v);
void attn_store(void *kpool, void *vpool, int kv_is_f16, int kv_dim, int head_dim, int block_size,
                int64_t slot, const float *k, const float *v);
void attn_store_scalar(void *kpool, void *vpool, int kv_is_f16, int kv_dim, int head_dim, int block_size,
                       int64_t slot, const float *k, const float *v);
void attn_store_f16c(void *kpool, void *vpool, int kv_is_f16, int kv_dim, int head_dim, int block_size,
                     int64_t slot, const float *k, const float *v);
void attn_store_neon(void *kpool, void *vpool, int kv_is_f16, int kv_dim, int head_dim, int block_size,
                     int64_t slot, const float *k, const float *v);
/* The same into a Q8_0 cache (attn_q8_quantize_group per group; kv_is_f16
 * unused); one portable build on every family. */
void attn_store_q8_0(void *kpool, void *vpool, int kv_is_f16, int kv_dim, int head_dim, int block_size,
                     int64_t slot, const float *k, const float *v);
/* The same into a Q4_0 cache (attn_q4_quantize_group per group). */
void attn_store_q4_0(void *kpool, void *vpool, int kv_is_f16, int kv_dim, int head_dim, int block_size,
                     int64_t slot, const float *k, const float *v);

/*
 * Several queries of one sequence against one KV head: out[i] (head_dim
 * floats) for query q[i] at position pos[i], in the order above, with
 * keys read once per tile for all n_q queries (the rows of a prefill chunk
 * and the heads of a GQA group). scratch holds
 * attn_queries_scratch(n_q, span, head_dim) floats, span =
 * max pos[i] - min first[i] + 1. sinks: NULL, or n_q logits, sinks[i]
 * query i's attention sink (its head's; a per-head constant, so a query's
 * result still depends on nothing else in the call).
 */
void attn_queries(float *const *out, const float *const *q, const int *pos, int n_q, int head_dim,
                  int kv_head, float scale, float softcap, const float *sinks, int window,
                  const pdl_attn_kv *kv, float *scratch);
size_t attn_queries_scratch(int n_q, int span, int head_dim);
/* What the BF16 and AMX tiles add to the scratch: floats per dimension of
 * head (their BF16 queries, keys and values, the AMX tiles' sums), and a
 * fixed part (the AMX tiles' masked value tile: attention_amx.c). */
#define ATTN_BF16_SCRATCH_PER_DIM 288
#define ATTN_AMX_SCRATCH_FIXED 3072
/* The most queries a caller gathers for one call (the forward's, in the
 * AMX order; the kernels take any number, in passes). */
#define ATTN_MAX_QUERIES_PER_CALL 128

/*
 * The same with each query's keys given as a range [first[i], last[i]]
 * (first <= last; every key in it already stored), in the same order of
 * operations with j running over the range: for rows that see keys past
 * their own position (Gemma 3's image rows, which attend to every row of
 * their image both ways). With first = max(0, pos - W + 1) (or 0) and
 * last = pos it gives attn_queries' bits. Scratch as above with
 * span = max last[i] - min first[i] + 1.
 */
void attn_ranges(float *const *out, const float *const *q, const int *first, const int *last, int n_q,
                 int head_dim, int kv_head, float scale, float softcap, const float *sinks,
                 const pdl_attn_kv *kv, float *scratch);

/* The same in the BF16 order: the portable reference (any head_dim even,
 * any cache), and the AVX-512 BF16 tiles (the reference for the shapes they
 * do not take; built where the compiler knows AVX512_BF16, else the
 * reference). Scratch as above. */
void attn_queries_bf16_scalar(float *const *out, const float *const *q, const int *pos, int n_q, int head_dim,
                              int kv_head, float scale, float softcap, const float *sinks, int window,
                              const pdl_attn_kv *kv, float *scratch);
void attn_queries_bf16_scalar_ranges(float *const *out, const float *const *q, const int *first, const int *last,
                                     int n_q, int head_dim, int kv_head, float scale, float softcap,
                                     const float *sinks, const pdl_attn_kv *kv, float *scratch);
void attn_queries_avx512bf16(float *const *out, const float *const *q, const int *pos, int n_q, int head_dim,
                             int kv_head, float scale, float softcap, const float *sinks, int window,
                             const pdl_attn_kv *kv, float *scratch);
void attn_queries_avx512bf16_ranges(float *const *out, const float *const *q, const int *first, const int *last,
                                    int n_q, int head_dim, int kv_head, float scale, float softcap,
                                    const float *sinks, const pdl_attn_kv *kv, float *scratch);

/* The same with AMX tiles, in the AMX order (above; built where the
 * compiler knows AMX-BF16, else the AVX-512 BF16 tiles; those take the
 * shapes these do not: head_dim not a multiple of 32). The caller has
 * checked cpu_amx_bf16_ready(). Scratch as above. attn_amx_built: whether
 * this build has the tiles (attn_table_for takes them only then). */
extern const bool attn_amx_built;
void attn_queries_amx(float *const *out, const float *const *q, const int *pos, int n_q, int head_dim, int kv_head,
                      float scale, float softcap, const float *sinks, int window, const pdl_attn_kv *kv,
                      float *scratch);
void attn_queries_amx_ranges(float *const *out, const float *const *q, const int *first, const int *last, int n_q,
                             int head_dim, int kv_head, float scale, float softcap, const float *sinks,
                             const pdl_attn_kv *kv, float *scratch);

/* One query: attn_queries with n_q = 1 (scratch likewise). */
void attn_head(float *out_h, const float *q_h, int head_dim, int kv_head, float scale, float softcap,
               int pos, int window, const pdl_attn_kv *kv, float *scratch);

/* The builds per instruction set (attn_queries, _ranges and
 * attn_store pick the process's family on each call, for the
 * vision encoder and the tests; the forward calls through its context's
 * pdl_attention_table instead); exposed for the tests that compare them. */
typedef void (*pdl_attention_fn)(float *const *out, const float *const *q, const int *pos, int n_q, int head_dim,
                                 int kv_head, float scale, float softcap, const float *sinks, int window,
                                 const pdl_attn_kv *kv, float *scratch);
void attn_queries_scalar(float *const *out, const float *const *q, const int *pos, int n_q, int head_dim,
                         int kv_head, float scale, float softcap, const float *sinks, int window, const pdl_attn_kv *kv,
                         float *scratch);
void attn_queries_avx2(float *const *out, const float *const *q, const int *pos, int n_q, int head_dim,
                       int kv_head, float scale, float softcap, const float *sinks, int window, const pdl_attn_kv *kv,
                       float *scratch);
void attn_queries_avx512(float *const *out, const float *const *q, const int *pos, int n_q, int head_dim,
                         int kv_head, float scale, float softcap, const float *sinks, int window, const pdl_attn_kv *kv,
                         float *scratch);
void attn_queries_neon(float *const *out, const float *const *q, const int *pos, int n_q, int head_dim,
                       int kv_head, float scale, float softcap, const float *sinks, int window, const pdl_attn_kv *kv,
                       float *scratch);
typedef void (*pdl_attention_ranges_fn)(float *const *out, const float *const *q, const int *first, const int *last,
                                        int n_q, int head_dim, int kv_head, float scale, float softcap,
                                        const float *sinks, const pdl_attn_kv *kv, float *scratch);
void attn_queries_scalar_ranges(float *const *out, const float *const *q, const int *first, const int *last,
                                int n_q, int head_dim, int kv_head, float scale, float softcap,
                                const float *sinks, const pdl_attn_kv *kv, float *scratch);
void attn_queries_avx2_ranges(float *const *out, const float *const *q, const int *first, const int *last,
                              int n_q, int head_dim, int kv_head, float scale, float softcap,
                              const float *sinks, const pdl_attn_kv *kv, float *scratch);
void attn_queries_avx512_ranges(float *const *out, const float *const *q, const int *first, const int *last,
                                int n_q, int head_dim, int kv_head, float scale, float softcap,
                                const float *sinks, const pdl_attn_kv *kv, float *scratch);
void attn_queries_neon_ranges(float *const *out, const float *const *q, const int *first, const int *last,
                              int n_q, int head_dim, int kv_head, float scale, float softcap,
                              const float *sinks, const pdl_attn_kv *kv, float *scratch);

/* The orders of operations above. */
typedef enum pdl_attn_order {
    PDL_ATTN_F32 = 0, /* the order above: every family, the same bits */
    PDL_ATTN_BF16,    /* the BF16 order: AVX-512 BF16 tiles, the portable emulation */
    PDL_ATTN_AMX,     /* the AMX order: AMX tiles only, held to a tolerance */
} pdl_attn_order;

/* One family's attention kernels, chosen once (a pdl_context fills its
 * table when it is made) and called through by the forward: one indirect
 * call per attention call, no dispatch per call or per row. */
typedef struct pdl_attention_table {
    pdl_isa isa;                      /* the family it was filled for */
    pdl_attn_order order;             /* the order its kernels keep */
    pdl_attention_fn queries;         /* attn_queries' body */
    pdl_attention_ranges_fn ranges;   /* attn_ranges' body */
    pdl_attention_store_fn store_f16; /* F16 K/V stores; F32 K/V is attn_store_scalar on every family */
} pdl_attention_table;

/* The order contexts made from now on attend in: PDL_ATTN_F32 unless set
 * (pdl_set_attention in pagedlm.h, which names them "f32", "bf16", "amx";
 * PAGEDLM_BF16_ATTENTION in the programs). The BF16 order is off by
 * default: on an Intel Xeon VM (AVX-512 BF16, AMX) it is slower, since
 * VDPBF16PS issues at the rate of one F32 FMA port there, so its pairs gain
 * nothing over FMAs on two ports and the conversions cost on top (the
 * kernels alone take 1.5x the F32 tiles' time); on an AMD Zen 5 VM it
 * prefills at depth 4096 1.23-1.26x faster and decodes there 0.94-0.95x as
 * fast; and its bits are not those of the AVX2 and NEON families. The AMX
 * order is off by default because its bits are those of the AMX hardware
 * alone, not of every family, and decode at depth is slower in it
 * (docs/benchmarks.md has the measurements). */
void attn_set_order(pdl_attn_order order);
pdl_attn_order attn_order(void);
/* "f32", "bf16", "amx". */
const char *attn_order_name(pdl_attn_order order);

/* The table of family isa (the scalar one for a family this build lacks),
 * in the given order where the family has it: the BF16 order on AVX-512
 * where the CPU has AVX512_BF16, and on the portable family, which
 * emulates it; the AMX order on AVX-512 where the CPU has AMX-BF16 and the
 * kernel grants its tiles (else the BF16 order where there is one). AVX2
 * and NEON keep the F32 order. */
void attn_table_for(pdl_isa isa, pdl_attn_order order, pdl_attention_table *t);
/* The table's store for a cache of that K/V dtype. */
static inline pdl_attention_store_fn attn_table_store(const pdl_attention_table *t, int kv_is_f16) {
    return kv_is_f16 ? t->store_f16 : attn_store_scalar;
}
static inline pdl_attention_store_fn attn_table_store_for(const pdl_attention_table *t, int kv_is_f16, int kv_is_q8,
                                                          int kv_is_q4) {
    return kv_is_q4 ? attn_store_q4_0 : kv_is_q8 ? attn_store_q8_0 : attn_table_store(t, kv_is_f16);
}

#endif
