/*
 * quant_twin.c - the whole-model test of a quantized weight type against
 * its F32 twin, and its batch invariance (quant_twin.h).
 */
#define _POSIX_C_SOURCE 200809L
#include "support/quant_twin.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu_features.h"
#include "kernels/cpu_ops.h"
#include "kernels/fp16.h"
#include "model/model.h"
#include "pagedlm.h"
#include "support/gguf_writer.h"
#include "test_util.h"

/* logits may differ from the twin's by this fraction of the largest one */
#define TOL_REL 0.05

enum { HID = 256, NH = 4, NKV = 2, HD = 64, FFN = 512, NL = 2, VOCAB = 300, T = 12, BS = 16 };

static uint32_t rng = 7;
uint32_t qt_next(void) {
    rng = rng * 1664525u + 1013904223u;
    return rng >> 8;
}
float qt_urand(void) { return (float)(qt_next() & 0xFFFF) / 65536.0f; }

void qt_misread_interleaved(const pdl_tensor *view, uint8_t *blocks, int rows, int cols, float *f) {
    (void)view, (void)blocks;
    size_t n = (size_t)rows * cols;
    float *g = malloc(n * sizeof *g);
    REQUIRE(g);
    memcpy(g, f, n * sizeof *g);
    for (size_t i = 0; i < n; i += 32) /* element 2j <- j, 2j + 1 <- j + 16 */
        for (int j = 0; j < 16; j++) f[i + 2 * j] = g[i + j], f[i + 2 * j + 1] = g[i + j + 16];
    free(g);
}

typedef struct twin {
    gguf_writer *q, *f, *bad; /* bad: the F32 twin of a reader that misreads the layout */
    const qt_format *fmt;
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

/* A matrix of the type to q, its exact F32 expansion to f, the misreading
 * to bad. */
static void add_matrix(twin *t, const char *name, int rows, int cols, float amp) {
    size_t nbytes;
    uint8_t *blocks = t->fmt->random(rows, cols, amp, &nbytes);
    uint64_t ne[2] = {(uint64_t)cols, (uint64_t)rows};
    gguf_writer_add_tensor(t->q, name, t->fmt->ggml_type, 2, ne, blocks, nbytes);
    float *f = malloc((size_t)rows * cols * sizeof *f);
    REQUIRE(f);
    pdl_tensor view = {.dtype = t->fmt->dtype, .n_dims = 2, .shape = {rows, cols}, .data = blocks, .nbytes = nbytes};
    for (int r = 0; r < rows; r++) ops_dequant_row(&view, r, f + (size_t)r * cols, cols);
    gguf_writer_add_tensor_f32(t->f, name, 2, (const int64_t[]){rows, cols}, f);
    t->fmt->misread(&view, blocks, rows, cols, f);
    gguf_writer_add_tensor_f32(t->bad, name, 2, (const int64_t[]){rows, cols}, f);
    free(f), free(blocks);
}

static void add_f32(twin *t, const char *name, int n_dims, const int64_t *shape, float lo, float span) {
    size_t n = (size_t)shape[0] * (n_dims > 1 ? (size_t)shape[1] : 1);
    float *w = malloc(n * sizeof *w);
    REQUIRE(w);
    for (size_t i = 0; i < n; i++) w[i] = lo + span * qt_urand();
    gguf_writer_add_tensor_f32(t->q, name, n_dims, shape, w);
    gguf_writer_add_tensor_f32(t->f, name, n_dims, shape, w);
    gguf_writer_add_tensor_f32(t->bad, name, n_dims, shape, w);
    free(w);
}

static void write_twins(const qt_format *fmt, char **qpath, char **fpath, char **badpath) {
    rng = 7; /* the same model every time */
    twin t = {gguf_writer_new(3), gguf_writer_new(3), gguf_writer_new(3), fmt};
    add_keys(t.q), add_keys(t.f), add_keys(t.bad);
    add_f32(&t, "token_embd.weight", 2, (const int64_t[]){VOCAB, HID}, -1.0f, 2.0f);
    add_f32(&t, "output_norm.weight", 1, (const int64_t[]){HID}, 0.8f, 0.4f);
    add_matrix(&t, "output.weight", VOCAB, HID, 0.15f); /* 300 rows: a partial last panel */
    char n[64];
    for (int l = 0; l < NL; l++) {
#define NAME(x) (snprintf(n, sizeof n, "blk.%d.%s", l, x), n)
        add_f32(&t, NAME("attn_norm.weight"), 1, (const int64_t[]){HID}, 0.8f, 0.4f);
        add_f32(&t, NAME("ffn_norm.weight"), 1, (const int64_t[]){HID}, 0.8f, 0.4f);
        add_matrix(&t, NAME("attn_q.weight"), NH * HD, HID, 0.12f);
        add_matrix(&t, NAME("attn_k.weight"), NKV * HD, HID, 0.12f);
        add_matrix(&t, NAME("attn_v.weight"), NKV * HD, HID, 0.12f);
        add_matrix(&t, NAME("attn_output.weight"), HID, NH * HD, 0.12f);
        add_matrix(&t, NAME("ffn_gate.weight"), FFN, HID, 0.12f);
        add_matrix(&t, NAME("ffn_up.weight"), FFN, HID, 0.12f);
        add_matrix(&t, NAME("ffn_down.weight"), HID, FFN, 0.09f);
#undef NAME
    }
    char file[96];
    snprintf(file, sizeof file, "%s.gguf", fmt->file);
    *qpath = test_tmp_path(file);
    snprintf(file, sizeof file, "%s-f32-twin.gguf", fmt->file);
    *fpath = test_tmp_path(file);
    snprintf(file, sizeof file, "%s-f32-%s.gguf", fmt->file, fmt->misread_file);
    *badpath = test_tmp_path(file);
    REQUIRE(gguf_writer_write(t.q, *qpath) == 0 && gguf_writer_write(t.f, *fpath) == 0 &&
            gguf_writer_write(t.bad, *badpath) == 0);
    gguf_writer_free(t.q), gguf_writer_free(t.f), gguf_writer_free(t.bad);
}

static const char *g_kernels; /* the family models are loaded with (NULL: the one in effect) */
static bool g_mapped;         /* matrices left in the file mapping: the row-major kernels, no panels */

static pdl_model *load(const char *path, int threads, const char *want_types) {
    pdl_model *m = NULL;
    pdl_error err;
    pdl_model_options o = {.n_threads = threads, .kernels = g_kernels, .weights_mapped = g_mapped};
    REQUIRE_MSG(pdl_model_load(&m, path, &o, &err) == 0, "%s: %s", path, err.message);
    pdl_model_info info;
    pdl_model_get_info(m, &info);
    CHECK_MSG(strcmp(info.weight_types, want_types) == 0, "%s: weight types %s, expected %s", path,
              info.weight_types, want_types);
    return m;
}

static void tokens(int32_t *tok, int n, int salt) {
    for (int i = 0; i < n; i++) tok[i] = (int32_t)((i * 37 + 11 + salt * 101) % VOCAB);
}

static float *logits_of(const char *path, int threads, const char *want_types) {
    pdl_model *m = load(path, threads, want_types);
    int32_t tok[T];
    tokens(tok, T, 0);
    float *logits = test_all_row_logits(m, tok, T);
    pdl_model_free(m);
    return logits;
}

static double max_abs(const float *a, int n) {
    double d = 0;
    for (int i = 0; i < n; i++) d = fmax(d, fabs((double)a[i]));
    return d;
}

/* NaN where either side has one (fmax would drop it), so a NaN logit fails
 * every tolerance */
static double max_diff(const float *a, const float *b, int n) {
    double d = 0;
    for (int i = 0; i < n; i++) {
        double e = fabs((double)a[i] - b[i]);
        if (!(e <= d)) d = e;
    }
    return d;
}

void qt_test_matches_its_f32_twin(const qt_format *fmt) {
    fp16_init();
    char *qp, *fp, *bp, types[32];
    write_twins(fmt, &qp, &fp, &bp);
    snprintf(types, sizeof types, "F32,%s", fmt->name);
    float *q = logits_of(qp, 2, types), *f = logits_of(fp, 2, "F32"), *bad = logits_of(bp, 2, "F32");
    double mag = max_abs(f, T * VOCAB), d = max_diff(q, f, T * VOCAB), wrong = max_diff(bad, f, T * VOCAB);
    fprintf(stderr, "  max |%s - F32 twin| = %.3g, %.2f%% of the largest logit %.3g; %s: %.3g\n", fmt->name, d,
            100 * d / mag, mag, fmt->misread_what, wrong);
    CHECK_MSG(d <= TOL_REL * mag, "%s model differs from its F32 twin by %g (%.2f%% of %g)", fmt->name, d,
              100 * d / mag, mag);
    CHECK_MSG(wrong > 3 * TOL_REL * mag, "%s: moves logits by only %g: the test could not see it",
              fmt->misread_what, wrong);
    /* none of its matrices takes the slow path */
    pdl_model *m = NULL;
    pdl_error err;
    REQUIRE_MSG(pdl_model_load(&m, qp, NULL, &err) == 0, "%s", err.message);
    pdl_tensor_type_stats st[4];
    int n = pdl_model_tensor_types(m, st, 4), seen = 0;
    for (int i = 0; i < n; i++)
        if (!strcmp(st[i].type, fmt->name)) {
            seen = st[i].n_tensors;
            CHECK_MSG(st[i].n_expanded == 0, "%s: %d of %d expanded", fmt->name, st[i].n_expanded, st[i].n_tensors);
        }
    CHECK_EQ_INT(seen, 1 + 7 * NL);
    pdl_model_free(m);
    free(q), free(f), free(bad), free(qp), free(fp), free(bp);
}

/* One forward of the given sequences packed (each from position 0, all
 * rows' logits, in order) on a fresh cache. */
static void packed_forward(pdl_model *m, const int32_t *const *seqs, const int *lens, int n_seqs, float *logits) {
    pdl_kv_cache *kv = NULL;
    pdl_error err;
    REQUIRE_MSG(pdl_kv_cache_create(&kv, m, PDL_KV_F32, BS, 16, &err) == 0, "%s", err.message);
    pdl_context *ctx = test_context(m);
    int32_t ids[64], pos[64], slots[64], cu[5], lidx[64], blocks[4][4];
    const int32_t *tables[4];
    int n = 0, next_block = 0;
    cu[0] = 0;
    for (int s = 0; s < n_seqs; s++) {
        for (int b = 0; b * BS < lens[s]; b++) blocks[s][b] = next_block++;
        for (int i = 0; i < lens[s]; i++, n++) {
            ids[n] = seqs[s][i], pos[n] = i, slots[n] = blocks[s][i / BS] * BS + i % BS, lidx[n] = n;
        }
        cu[s + 1] = n;
        tables[s] = blocks[s];
    }
    pdl_batch b = {.n_tokens = n, .token_ids = ids, .positions = pos, .slot_mapping = slots, .n_seqs = n_seqs,
                   .cu_seqlens = cu, .block_tables = tables, .n_logits = n, .logits_indices = lidx};
    REQUIRE_MSG(pdl_forward(ctx, kv, &b, logits, &err) == 0, "%s", err.message);
    pdl_context_free(ctx);
    pdl_kv_cache_free(kv);
}

/* On every instruction set, with weight panels and with the row-major
 * kernels (matrices left in the file mapping): within the tolerance of the
 * twin, 1 and 2 threads give the same bytes, and three sequences packed
 * into one forward (1, 5 and 12 rows: a decode-sized one beside prefills)
 * give each the bytes it gets alone. */
void qt_test_batch_invariant_on_every_isa(const qt_format *fmt) {
    fp16_init();
    char *qp, *fp, *bp, types[32];
    write_twins(fmt, &qp, &fp, &bp);
    snprintf(types, sizeof types, "F32,%s", fmt->name);
    float *f = logits_of(fp, 2, "F32");
    double mag = max_abs(f, T * VOCAB);
    int32_t s0[T], s1[T], s2[T];
    tokens(s0, T, 1), tokens(s1, T, 2), tokens(s2, T, 3);
    const int32_t *seqs[3] = {s0, s1, s2};
    int lens[3] = {1, 5, 12}, total = 18;
    for (int run = 0; run < 2 * PDL_ISA_COUNT; run++) {
        int isa = run / 2;
        g_mapped = run % 2;
        if (!cpu_isa_supported((pdl_isa)isa)) continue;
        g_kernels = cpu_isa_name((pdl_isa)isa); /* the model's own family (pdl_model_options.kernels) */
        float *one = logits_of(qp, 1, types), *two = logits_of(qp, 2, types);
        CHECK_MSG(memcmp(one, two, (size_t)T * VOCAB * sizeof *one) == 0, "%s%s: 1 and 2 threads differ", g_kernels,
                  g_mapped ? " (mapped)" : "");
        double d = max_diff(one, f, T * VOCAB);
        CHECK_MSG(d <= TOL_REL * mag, "%s%s: %g from the F32 twin", g_kernels, g_mapped ? " (mapped)" : "", d);
        pdl_model *m = load(qp, 2, types);
        /* the x86 families make panels of the type (AVX-512: with VNNI); mapped matrices never have them */
        bool want_panels = !g_mapped && (isa == PDL_ISA_AVX2 || (isa == PDL_ISA_AVX512 && cpu_features_get()->avx512vnni));
        CHECK_MSG((m->w.layers[0].wq.panels != NULL) == want_panels, "%s%s: panels %s", g_kernels,
                  g_mapped ? " (mapped)" : "", want_panels ? "missing" : "made");
        float *packed = malloc((size_t)total * VOCAB * sizeof *packed), *alone = malloc((size_t)T * VOCAB * sizeof *alone);
        REQUIRE(packed && alone);
        packed_forward(m, seqs, lens, 3, packed);
        for (int s = 0, at = 0; s < 3; at += lens[s], s++) {
            packed_forward(m, &seqs[s], &lens[s], 1, alone);
            CHECK_MSG(memcmp(packed + (size_t)at * VOCAB, alone, (size_t)lens[s] * VOCAB * sizeof *alone) == 0,
                      "%s%s: sequence %d packed differs from alone", g_kernels, g_mapped ? " (mapped)" : "", s);
        }
        free(packed), free(alone), free(one), free(two);
        pdl_model_free(m);
    }
    g_kernels = NULL, g_mapped = false;
    free(f), free(qp), free(fp), free(bp);
}

