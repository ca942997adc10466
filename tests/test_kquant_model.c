/*
 * test_kquant_model.c - a whole model with k-quant weights, laid out as a
 * Q4_K_M file is (Q4_K for most matrices, Q6_K for attn_v, ffn_down and the
 * output), against its F32 twin holding exactly the dequantized values.
 *
 * The blocks are random bytes (every byte pattern is a valid Q4_K / Q6_K
 * block once d and dmin are sane halves), so the test needs no quantizer; the
 * twin is made with ops_dequant_row, which tests/test_dequant.c checks
 * against hand-computed blocks. The only difference left between the two
 * models is the activations: the k-quant kernels multiply activations
 * quantized per 256-block to 8 bits (Q8_K), as llama.cpp does, so each
 * activation moves by up to amax/254 of its block (~0.5% of a dot product's
 * size on these random activations). Through this 2-layer model that moves
 * the logits by 2.3% of the largest one (observed; printed). The tolerance,
 * 5% of the largest logit, is far below what a wrong scale, min or -32 offset
 * does: a port that drops Q4_K's mins lands 130% away, and the test checks
 * that it would fail. On each instruction set the thread
 * count does not change a byte.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "format/tensor.h"
#include "kernels/cpu_features.h"
#include "kernels/cpu_ops.h"
#include "kernels/fp16.h"
#include "model/model.h"
#include "pagedlm.h"
#include "support/gguf_writer.h"
#include "test_util.h"

/* logits may differ from the twin's by this fraction of the largest one */
#define TOL_REL 0.05

enum { HID = 256, NH = 4, NKV = 2, HD = 64, FFN = 512, NL = 2, VOCAB = 300, T = 12 };

static uint32_t rng = 99;
static uint32_t next(void) {
    rng = rng * 1664525u + 1013904223u;
    return rng >> 8;
}
static float urand(void) { return (float)(next() & 0xFFFF) / 65536.0f; } /* [0, 1) */

static void put_half(uint8_t *p, float v) {
    uint16_t h = fp16_f32_to_f16(v);
    memcpy(p, &h, 2);
}

/* rows x cols of random blocks, values ~ +-amp */
static uint8_t *random_blocks(pdl_dtype dt, int rows, int cols, float amp, size_t *nbytes) {
    size_t nb = (size_t)rows * cols / dtype_block_elems(dt), bb = dtype_block_bytes(dt);
    uint8_t *b = malloc(nb * bb);
    for (size_t i = 0; i < nb * bb; i++) b[i] = (uint8_t)next();
    for (size_t k = 0; k < nb; k++) {
        uint8_t *blk = b + k * bb;
        if (dt == PDL_DTYPE_Q5_K) { /* d, dmin first, as Q4_K's, with q < 32 */
            put_half(blk, amp * (0.5f + urand()) / (63.0f * 31.0f / 2.0f));
            put_half(blk + 2, amp * (0.5f + urand()) / 63.0f);
        } else if (dt == PDL_DTYPE_Q4_K) { /* d, dmin first: value = d sc q - dmin m, sc, m < 64, q < 16 */
            put_half(blk, amp * (0.5f + urand()) / (63.0f * 15.0f / 2.0f));
            put_half(blk + 2, amp * (0.5f + urand()) / 63.0f);
        } else if (dt == PDL_DTYPE_IQ4_XS) { /* d first: value = d (ls - 32) v, |v| <= 127 */
            put_half(blk, amp * (0.5f + urand()) / (32.0f * 127.0f / 2.0f));
        } else if (dt == PDL_DTYPE_IQ4_NL) { /* d first: value = d v */
            put_half(blk, amp * (0.5f + urand()) / 127.0f);
        } else if (dt == PDL_DTYPE_TQ1_0 || dt == PDL_DTYPE_TQ2_0) { /* d last: value = d t, |t| <= 2 */
            put_half(blk + bb - 2, amp * (0.5f + urand()) / 2.0f);
        } else { /* Q6_K: d last; value = d sc (q - 32), sc int8 */
            put_half(blk + 208, amp * (0.5f + urand()) / (127.0f * 32.0f / 2.0f));
        }
    }
    *nbytes = nb * bb;
    return b;
}

typedef struct twin {
    gguf_writer *q, *f, *bad; /* bad: the F32 twin of a port that drops Q4_K's mins */
} twin;

static void add_keys(gguf_writer *w) {
    gguf_writer_add_str(w, "general.architecture", "llama");
    gguf_writer_add_u32(w, "llama.block_count", NL);
    gguf_writer_add_u32(w, "llama.context_length", 64);
    gguf_writer_add_u32(w, "llama.embedding_length", HID);
    gguf_writer_add_u32(w, "llama.feed_forward_length", FFN);
    gguf_writer_add_u32(w, "llama.attention.head_count", NH);
    gguf_writer_add_u32(w, "llama.attention.head_count_kv", NKV);
    gguf_writer_add_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
    gguf_writer_add_f32(w, "llama.rope.freq_base", 10000.0f);
}

/* A matrix in dt to q, its exact F32 expansion to f (IQ4_NL and IQ4_XS,
 * which have dot kernels of their own and multiply Q8_0- / Q8_K-quantized
 * activations: the same blocks to f, so the twins differ only in the
 * expanded types). */
static void add_matrix(twin *t, const char *name, pdl_dtype dt, int rows, int cols, float amp) {
    size_t nbytes;
    uint8_t *blocks = random_blocks(dt, rows, cols, amp, &nbytes);
    uint64_t ne[2] = {(uint64_t)cols, (uint64_t)rows};
    uint32_t ggml = dt == PDL_DTYPE_Q4_K     ? GW_GGML_Q4_K
                    : dt == PDL_DTYPE_Q5_K   ? GW_GGML_Q5_K
                    : dt == PDL_DTYPE_IQ4_NL ? 20
                    : dt == PDL_DTYPE_IQ4_XS ? GW_GGML_IQ4_XS
                    : dt == PDL_DTYPE_TQ1_0  ? GW_GGML_TQ1_0
                    : dt == PDL_DTYPE_TQ2_0  ? GW_GGML_TQ2_0
                                             : GW_GGML_Q6_K;
    gguf_writer_add_tensor(t->q, name, ggml, 2, ne, blocks, nbytes);
    float *f = malloc((size_t)rows * cols * sizeof *f);
    pdl_tensor view = {.dtype = dt, .n_dims = 2, .shape = {rows, cols}, .data = blocks, .nbytes = nbytes};
    for (int r = 0; r < rows; r++) ops_dequant_row(&view, r, f + (size_t)r * cols, cols);
    if (dt == PDL_DTYPE_IQ4_NL || dt == PDL_DTYPE_IQ4_XS) gguf_writer_add_tensor(t->f, name, ggml, 2, ne, blocks, nbytes);
    else gguf_writer_add_tensor_f32(t->f, name, 2, (const int64_t[]){rows, cols}, f);
    if (dt == PDL_DTYPE_Q4_K)
        for (size_t k = 0; k < nbytes / 144; k++) put_half(blocks + k * 144 + 2, 0.0f);
    for (int r = 0; r < rows; r++) ops_dequant_row(&view, r, f + (size_t)r * cols, cols);
    gguf_writer_add_tensor_f32(t->bad, name, 2, (const int64_t[]){rows, cols}, f);
    free(f), free(blocks);
}

static void add_norm(twin *t, const char *name) {
    float w[HID];
    for (int i = 0; i < HID; i++) w[i] = 0.8f + 0.4f * urand();
    gguf_writer_add_tensor_f32(t->q, name, 1, (const int64_t[]){HID}, w);
    gguf_writer_add_tensor_f32(t->f, name, 1, (const int64_t[]){HID}, w);
    gguf_writer_add_tensor_f32(t->bad, name, 1, (const int64_t[]){HID}, w);
}

/* tq2: attn_v in TQ2_0 rather than Q6_K.
 * iq: IQ4_XS for the Q4_K matrices and the output, IQ4_NL for attn_output,
 * TQ2_0 for attn_v and TQ1_0 for ffn_down. */
static void write_twins_mix(char **qpath, char **fpath, char **badpath, bool tq2, bool iq) {
    rng = 99; /* the same model every time */
    twin t = {gguf_writer_new(3), gguf_writer_new(3), gguf_writer_new(3)};
    add_keys(t.q), add_keys(t.f), add_keys(t.bad);
    add_matrix(&t, "token_embd.weight", iq ? PDL_DTYPE_IQ4_XS : PDL_DTYPE_Q4_K, VOCAB, HID, 1.0f);
    add_norm(&t, "output_norm.weight");
    add_matrix(&t, "output.weight", iq ? PDL_DTYPE_IQ4_XS : PDL_DTYPE_Q6_K, VOCAB, HID, 0.15f);
    char n[64];
    for (int l = 0; l < NL; l++) {
#define NAME(x) (snprintf(n, sizeof n, "blk.%d.%s", l, x), n)
        add_norm(&t, NAME("attn_norm.weight"));
        add_norm(&t, NAME("ffn_norm.weight"));
        pdl_dtype q4 = iq ? PDL_DTYPE_IQ4_XS : PDL_DTYPE_Q4_K;
        add_matrix(&t, NAME("attn_q.weight"), q4, NH * HD, HID, 0.12f);
        add_matrix(&t, NAME("attn_k.weight"), q4, NKV * HD, HID, 0.12f);
        add_matrix(&t, NAME("attn_v.weight"), iq || tq2 ? PDL_DTYPE_TQ2_0 : PDL_DTYPE_Q6_K, NKV * HD, HID, 0.12f);
        add_matrix(&t, NAME("attn_output.weight"), iq ? PDL_DTYPE_IQ4_NL : PDL_DTYPE_Q4_K, HID, NH * HD, 0.12f);
        add_matrix(&t, NAME("ffn_gate.weight"), q4, FFN, HID, 0.12f);
        add_matrix(&t, NAME("ffn_up.weight"), q4, FFN, HID, 0.12f);
        add_matrix(&t, NAME("ffn_down.weight"), iq ? PDL_DTYPE_TQ1_0 : PDL_DTYPE_Q6_K, HID, FFN, 0.09f);
#undef NAME
    }
    const char *tag = iq ? "-iq" : tq2 ? "-tq2" : "";
    char name[64];
    snprintf(name, sizeof name, "kquant%s.gguf", tag);
    *qpath = test_tmp_path(name);
    snprintf(name, sizeof name, "kquant%s-f32-twin.gguf", tag);
    *fpath = test_tmp_path(name);
    snprintf(name, sizeof name, "kquant%s-f32-no-mins.gguf", tag);
    *badpath = test_tmp_path(name);
    REQUIRE(gguf_writer_write(t.q, *qpath) == 0 && gguf_writer_write(t.f, *fpath) == 0 &&
            gguf_writer_write(t.bad, *badpath) == 0);
    gguf_writer_free(t.q), gguf_writer_free(t.f), gguf_writer_free(t.bad);
}

static void write_twins(char **qpath, char **fpath, char **badpath) { write_twins_mix(qpath, fpath, badpath, false, false); }

static bool g_weights_mapped; /* the next loads leave matrices in the file mapping */

/* The kernel family the models below are loaded with (NULL: the one in effect). */
static const char *g_kernels;

static float *logits_of(const char *path, int threads, const char *want_types) {
    pdl_model *m = NULL;
    pdl_error err;
    pdl_model_options o = {.n_threads = threads, .weights_mapped = g_weights_mapped, .kernels = g_kernels};
    REQUIRE_MSG(pdl_model_load(&m, path, &o, &err) == 0, "%s: %s", path, err.message);
    pdl_model_info info;
    pdl_model_get_info(m, &info);
    CHECK_MSG(strcmp(info.weight_types, want_types) == 0, "%s: weight types %s, expected %s", path,
              info.weight_types, want_types);
    int32_t tok[T];
    for (int i = 0; i < T; i++) tok[i] = (int32_t)((i * 37 + 11) % VOCAB);
    float *logits = test_all_row_logits(m, tok, T);
    pdl_model_free(m);
    return logits;
}

static double max_diff(const float *a, const float *b) {
    double d = 0;
    for (int i = 0; i < T * VOCAB; i++) d = fmax(d, fabs((double)a[i] - b[i]));
    return d;
}

static void test_q4_k_m_model_matches_its_f32_twin(void) {
    fp16_init();
    char *qp, *fp, *bp;
    write_twins(&qp, &fp, &bp);
    float *q = logits_of(qp, 2, "Q4_K,Q6_K"), *f = logits_of(fp, 2, "F32"), *bad = logits_of(bp, 2, "F32");
    double mag = 0;
    for (int i = 0; i < T * VOCAB; i++) mag = fmax(mag, fabs((double)f[i]));
    double d = max_diff(q, f), wrong = max_diff(bad, f);
    fprintf(stderr, "  max |Q4_K_M - F32 twin| = %.3g, %.2f%% of the largest logit %.3g; a port without Q4_K's mins: %.3g\n",
            d, 100 * d / mag, mag, wrong);
    CHECK_MSG(d <= TOL_REL * mag, "k-quant model differs from its F32 twin by %g (%.2f%% of %g)", d, 100 * d / mag, mag);
    CHECK_MSG(wrong > 3 * TOL_REL * mag, "dropping the mins moves logits by only %g: the test could not see it", wrong);
    free(q), free(f), free(bad), free(qp), free(fp), free(bp);
}

/* On every instruction set the model stays within the tolerance of its
 * twin, and 1 or 2 threads give the same bytes (the k-quant tiles are
 * bit-identical across instruction sets, tests/test_kquant.c; attention is
 * not, so the instruction sets are compared with the tolerance only). */
static void test_k_quant_model_on_every_isa(void) {
    fp16_init();
    char *qp, *fp, *bp;
    write_twins(&qp, &fp, &bp);
    float *f = logits_of(fp, 2, "F32");
    for (int isa = PDL_ISA_SCALAR; isa < PDL_ISA_COUNT; isa++) {
        if (!cpu_isa_supported((pdl_isa)isa)) continue;
        g_kernels = cpu_isa_name((pdl_isa)isa); /* the model's own family (pdl_model_options.kernels) */
        float *one = logits_of(qp, 1, "Q4_K,Q6_K"), *two = logits_of(qp, 2, "Q4_K,Q6_K");
        CHECK_MSG(memcmp(one, two, (size_t)T * VOCAB * sizeof *one) == 0, "%s: 1 and 2 threads differ",
                  cpu_isa_name((pdl_isa)isa));
        double d = max_diff(one, f), mag = 0;
        for (int i = 0; i < T * VOCAB; i++) mag = fmax(mag, fabs((double)f[i]));
        CHECK_MSG(d <= TOL_REL * mag, "%s: %g from the F32 twin", cpu_isa_name((pdl_isa)isa), d);
        free(one), free(two);
    }
    g_kernels = NULL;
    free(f), free(qp), free(fp), free(bp);
}

/* The loader copies matrices without panels byte for byte into its
 * huge-page buffer (model_load.c): the copy gives the mapped file's logits
 * exactly (a copy one byte off, or of the wrong length, would not), and
 * weights_mapped leaves the matrices in the mapping. */
static void test_copied_matrices_give_the_mapped_files_logits(void) {
    fp16_init();
    char *qp, *fp, *bp;
    write_twins(&qp, &fp, &bp);
    pdl_model *m = NULL;
    pdl_error err;
    pdl_model_options o = {.n_threads = 2};
    REQUIRE_MSG(pdl_model_load(&m, qp, &o, &err) == 0, "%s", err.message);
    const uint8_t *wq = m->w.layers[NL - 1].w_down.data, *buf = m->matrices;
    CHECK_MSG(buf && wq > buf && ((uintptr_t)wq % 64) == 0, "the last matrix is not in the model's copy");
    pdl_model_free(m);
    float *copied = logits_of(qp, 2, "Q4_K,Q6_K");
    o.weights_mapped = true;
    REQUIRE_MSG(pdl_model_load(&m, qp, &o, &err) == 0, "%s", err.message);
    CHECK(m->matrices == NULL);
    pdl_model_free(m);
    g_weights_mapped = true;
    float *mapped = logits_of(qp, 2, "Q4_K,Q6_K");
    g_weights_mapped = false;
    CHECK(memcmp(copied, mapped, (size_t)T * VOCAB * sizeof *copied) == 0);
    free(copied), free(mapped), free(qp), free(fp), free(bp);
}

/* A dense forward whose matmuls cannot have their scratch (the Q8_K
 * activations of every k-quant matmul) returns an error and reports no
 * logits, at each of them in turn: q/k/v, the attention output, gate/up,
 * down, the head (test_util.h). */
static void test_forward_reports_scratch_failure(void) {
    fp16_init();
    char *qp, *fp, *bp;
    write_twins(&qp, &fp, &bp);
    pdl_model *m = NULL;
    pdl_error err;
    pdl_model_options o = {.n_threads = 2};
    REQUIRE_MSG(pdl_model_load(&m, qp, &o, &err) == 0, "%s", err.message);
    int32_t tok[T];
    for (int i = 0; i < T; i++) tok[i] = (int32_t)((i * 37 + 11) % VOCAB);
    pdl_context *ctx = test_context(m);
    int n = test_forward_fails_at_every_scratch_take(ctx, tok, T);
    pdl_context_free(ctx);
    fprintf(stderr, "  %d failing forwards checked\n", n);
    CHECK_MSG(n >= 2 * (NL * 4 + 1), "%d failing forwards: fewer than the model's matmuls", n);
    pdl_model_free(m);
    free(qp), free(fp), free(bp);
}

/* pdl_model_tensor_types (pagedlm info's "tensor_types") sums the file up
 * by type, largest first: a Q4_K_M-like mix with TQ2_0 attn_v, none of its
 * matrices on the slow path (expanded to F32: no GGUF type is since TQ2_0
 * and TQ1_0 have their own kernels), and the model still matches its F32
 * twin. */
static void test_the_type_mix_sums_up_the_file(void) {
    fp16_init();
    char *qp, *fp, *bp;
    write_twins_mix(&qp, &fp, &bp, true, false);
    float *q = logits_of(qp, 2, "Q4_K,Q6_K,TQ2_0"), *f = logits_of(fp, 2, "F32");
    double mag = 0;
    for (int i = 0; i < T * VOCAB; i++) mag = fmax(mag, fabs((double)f[i]));
    CHECK_MSG(max_diff(q, f) <= TOL_REL * mag, "the TQ2_0 mix differs from its F32 twin by %g", max_diff(q, f));
    pdl_model *m = NULL;
    pdl_error err;
    REQUIRE_MSG(pdl_model_load(&m, qp, NULL, &err) == 0, "%s", err.message);
    pdl_tensor_type_stats s[8];
    int n = pdl_model_tensor_types(m, s, 8);
    CHECK_EQ_INT(n, 4);
    const struct {
        const char *type;
        int tensors, expanded;
        uint64_t bytes;
    } want[4] = {{"Q4_K", 1 + 5 * NL, 0, (uint64_t)(VOCAB * HID + NL * (2 * NH * HD * HID + NKV * HD * HID + 2 * FFN * HID)) / 256 * 144},
                 {"Q6_K", 1 + NL, 0, (uint64_t)(VOCAB * HID + NL * HID * FFN) / 256 * 210},
                 {"TQ2_0", NL, 0, (uint64_t)(NL * NKV * HD * HID) / 256 * 66},
                 {"F32", 1 + 2 * NL, 0, (uint64_t)(1 + 2 * NL) * HID * 4}};
    for (int i = 0; i < 4 && i < n; i++) {
        int j = 0;
        while (j < 4 && strcmp(want[j].type, s[i].type)) j++;
        REQUIRE_MSG(j < 4, "type %s", s[i].type);
        CHECK_MSG(s[i].n_tensors == want[j].tensors && s[i].n_expanded == want[j].expanded && s[i].bytes == want[j].bytes,
                  "%s: %d tensors (%d expanded), %llu bytes; expected %d (%d), %llu", s[i].type, s[i].n_tensors,
                  s[i].n_expanded, (unsigned long long)s[i].bytes, want[j].tensors, want[j].expanded,
                  (unsigned long long)want[j].bytes);
        if (i > 0) CHECK(s[i].bytes <= s[i - 1].bytes); /* largest first */
        if (!strcmp(s[i].type, "TQ2_0"))
            CHECK_MSG(strstr(s[i].example, "attn_v.weight") != NULL, "example %s", s[i].example);
    }
    CHECK_EQ_INT(pdl_model_tensor_types(m, s, 1), 4); /* the count, whatever fits */
    pdl_model_free(m);
    free(q), free(f), free(qp), free(fp), free(bp);
}

/* GGUF's TQ1_0 and TQ2_0 load and run beside IQ4_NL and IQ4_XS (each its
 * own kernels; the same IQ4 matrices in the twin, the ternary ones
 * expanded to F32), giving their twin's logits within the Q8_K activation
 * rounding of the ternary matmuls (TOL_REL of the largest logit); the type
 * mix says none of them is expanded (tests/test_ternary_model.c and
 * tests/test_iq4_xs_model.c test each type against its F32 expansion). */
static void test_iq4_and_ternary_model_matches_its_f32_twin(void) {
    fp16_init();
    char *qp, *fp, *bp;
    write_twins_mix(&qp, &fp, &bp, false, true);
    float *q = logits_of(qp, 2, "IQ4_NL,IQ4_XS,TQ1_0,TQ2_0"), *f = logits_of(fp, 2, "F32,IQ4_NL,IQ4_XS");
    double mag = 0;
    for (int i = 0; i < T * VOCAB; i++) mag = fmax(mag, fabs((double)f[i]));
    fprintf(stderr, "  IQ4 / ternary mix: max |q - f32 twin| %.3g of the largest logit %.3g\n", max_diff(q, f), mag);
    CHECK_MSG(max_diff(q, f) <= TOL_REL * mag, "the IQ4 / ternary mix differs from its F32 twin by %g", max_diff(q, f));
    pdl_model *m = NULL;
    pdl_error err;
    REQUIRE_MSG(pdl_model_load(&m, qp, NULL, &err) == 0, "%s", err.message);
    pdl_tensor_type_stats st[8];
    int n = pdl_model_tensor_types(m, st, 8);
    for (int i = 0; i < n; i++)
        if (!strcmp(st[i].type, "TQ1_0") || !strcmp(st[i].type, "TQ2_0") || !strcmp(st[i].type, "IQ4_NL") ||
            !strcmp(st[i].type, "IQ4_XS"))
            CHECK_MSG(st[i].n_expanded == 0, "%s: %d of %d expanded", st[i].type, st[i].n_expanded, st[i].n_tensors);
    pdl_model_free(m);
    free(q), free(f), free(qp), free(fp), free(bp);
}

int main(void) {
    RUN(test_q4_k_m_model_matches_its_f32_twin);
    RUN(test_k_quant_model_on_every_isa);
    RUN(test_copied_matrices_give_the_mapped_files_logits);
    RUN(test_forward_reports_scratch_failure);
    RUN(test_the_type_mix_sums_up_the_file);
    RUN(test_iq4_and_ternary_model_matches_its_f32_twin);
    return test_summary();
}
