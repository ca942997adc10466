/*
 * test_model_load.c - loading whole models, good and bad, from files the
 * test writes: the same random-weight Llama written as GGUF (Q/K rows
 * permuted as llama.cpp's converter does) and as a Hugging Face folder must
 * give the same logits; every kind of broken model gives one clear error
 * naming the file and the tensor or key at fault.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <sys/stat.h>

#include "format/tensor.h"
#include "gguf_writer.h"
#include "kernels/cpu_features.h"
#include "kernels/fp16.h"
#include "kernels/matmul_table.h"
#include "model/model.h"
#include "pagedlm.h"
#include "st_writer.h"
#include "test_util.h"

/* The test model: hidden 32, 2 heads of 16, 1 KV head, ffn 64, vocab 40. */
enum { HID = 32, NH = 2, NKV = 1, HD = 16, FFN = 64, VOC = 40, NL = 2 };

static uint64_t seed;
static float frand(void) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((seed >> 40) / (double)(1ull << 24)) - 0.5f;
}

typedef struct tensor_spec {
    char hf[96], gg[96];
    int n_dims;
    int64_t shape[2];
    float *data;
    int permute_heads; /* >0: Q/K rows permuted for GGUF with this many heads */
} tensor_spec;

static tensor_spec specs[64];
static int n_specs;

static void spec(const char *hf, const char *gg, int64_t d0, int64_t d1, int permute_heads, bool ones) {
    tensor_spec *t = &specs[n_specs++];
    snprintf(t->hf, sizeof t->hf, "%s", hf);
    snprintf(t->gg, sizeof t->gg, "%s", gg);
    t->n_dims = d1 ? 2 : 1;
    t->shape[0] = d0, t->shape[1] = d1;
    int64_t n = d0 * (d1 ? d1 : 1);
    t->data = malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) t->data[i] = ones ? 1.0f + 0.1f * frand() : frand();
    t->permute_heads = permute_heads;
}

static void make_specs(void) {
    if (n_specs) return;
    seed = 42;
    spec("model.embed_tokens.weight", "token_embd.weight", VOC, HID, 0, false);
    spec("model.norm.weight", "output_norm.weight", HID, 0, 0, true);
    spec("lm_head.weight", "output.weight", VOC, HID, 0, false);
    for (int l = 0; l < NL; l++) {
        char hf[96], gg[96];
#define L(h, g, d0, d1, p, ones)                                            \
    snprintf(hf, sizeof hf, "model.layers.%d.%s", l, h);                    \
    snprintf(gg, sizeof gg, "blk.%d.%s", l, g);                             \
    spec(hf, gg, d0, d1, p, ones);
        L("input_layernorm.weight", "attn_norm.weight", HID, 0, 0, true);
        L("self_attn.q_proj.weight", "attn_q.weight", NH * HD, HID, NH, false);
        L("self_attn.k_proj.weight", "attn_k.weight", NKV * HD, HID, NKV, false);
        L("self_attn.v_proj.weight", "attn_v.weight", NKV * HD, HID, 0, false);
        L("self_attn.o_proj.weight", "attn_output.weight", HID, NH * HD, 0, false);
        L("post_attention_layernorm.weight", "ffn_norm.weight", HID, 0, 0, true);
        L("mlp.gate_proj.weight", "ffn_gate.weight", FFN, HID, 0, false);
        L("mlp.up_proj.weight", "ffn_up.weight", FFN, HID, 0, false);
        L("mlp.down_proj.weight", "ffn_down.weight", HID, FFN, 0, false);
#undef L
    }
}

/* llama.cpp's permute: within each head, row 2i <- i and 2i+1 <- i + hd/2. */
static float *permuted(const tensor_spec *t) {
    int64_t rows = t->shape[0], cols = t->shape[1], hd = rows / t->permute_heads;
    float *out = malloc((size_t)(rows * cols) * sizeof *out);
    for (int64_t h = 0; h < t->permute_heads; h++)
        for (int64_t i = 0; i < hd / 2; i++) {
            memcpy(out + (h * hd + 2 * i) * cols, t->data + (h * hd + i) * cols, (size_t)cols * 4);
            memcpy(out + (h * hd + 2 * i + 1) * cols, t->data + (h * hd + i + hd / 2) * cols, (size_t)cols * 4);
        }
    return out;
}

typedef struct build_opts {
    const char *skip;        /* leave this tensor out (GGUF or HF name) */
    const char *dup;         /* write this tensor twice */
    const char *wrong_shape; /* write this tensor with one row fewer */
    int f16_matrices;        /* GGUF: 1 = 2-D weights as F16; 2 = as F32 holding F16-rounded values */
    const char *arch;        /* GGUF general.architecture (default llama) */
    int block_count;         /* GGUF block_count written (0: the true NL) */
    float rms_eps, freq_base;/* GGUF values written (0: 1e-5 and 10000) */
    const char *const *extra;/* NULL-ended names of (HID) tensors the model has no use for, written last */
} build_opts;

/* o->extra's tensors: HID floats each */
static void add_extra_gguf(gguf_writer *w, const build_opts *o) {
    for (int i = 0; o->extra && o->extra[i]; i++) gguf_writer_add_tensor_f32(w, o->extra[i], 1, (int64_t[]){HID}, specs[1].data);
}
static void add_extra_hf(stw_writer *w, const build_opts *o) {
    for (int i = 0; o->extra && o->extra[i]; i++) stw_add_f32(w, o->extra[i], 1, (int64_t[]){HID}, specs[1].data);
}

static gguf_writer *gguf_model(const build_opts *o) {
    make_specs();
    gguf_writer *w = gguf_writer_new(3);
    gguf_writer_add_str(w, "general.architecture", o->arch ? o->arch : "llama");
    const char *a = o->arch ? o->arch : "llama";
    char k[128];
#define KEY(s) (snprintf(k, sizeof k, "%s.%s", a, s), k)
    gguf_writer_add_u32(w, KEY("block_count"), o->block_count ? (uint32_t)o->block_count : NL);
    gguf_writer_add_u32(w, KEY("context_length"), 64);
    gguf_writer_add_u32(w, KEY("embedding_length"), HID);
    gguf_writer_add_u32(w, KEY("feed_forward_length"), FFN);
    gguf_writer_add_u32(w, KEY("attention.head_count"), NH);
    gguf_writer_add_u32(w, KEY("attention.head_count_kv"), NKV);
    gguf_writer_add_f32(w, KEY("attention.layer_norm_rms_epsilon"), o->rms_eps != 0 ? o->rms_eps : 1e-5f);
    gguf_writer_add_f32(w, KEY("rope.freq_base"), o->freq_base != 0 ? o->freq_base : 10000.0f);
#undef KEY
    for (int i = 0; i < n_specs; i++) {
        tensor_spec *t = &specs[i];
        if (o->skip && strcmp(o->skip, t->gg) == 0) continue;
        float *data = t->permute_heads ? permuted(t) : t->data;
        int64_t shape[2] = {t->shape[0], t->shape[1]};
        if (o->wrong_shape && strcmp(o->wrong_shape, t->gg) == 0) shape[0] -= 1;
        int reps = o->dup && strcmp(o->dup, t->gg) == 0 ? 2 : 1;
        for (int r = 0; r < reps; r++) {
            if (o->f16_matrices == 2 && t->n_dims == 2) {
                size_t n = (size_t)(shape[0] * shape[1]);
                float *r16 = malloc(n * sizeof *r16);
                for (size_t j = 0; j < n; j++) r16[j] = fp16_f16_to_f32(fp16_f32_to_f16(data[j]));
                gguf_writer_add_tensor_f32(w, t->gg, 2, shape, r16);
                free(r16);
            } else if (o->f16_matrices && t->n_dims == 2) {
                size_t n = (size_t)(shape[0] * shape[1]);
                uint16_t *h = malloc(n * 2);
                for (size_t j = 0; j < n; j++) h[j] = fp16_f32_to_f16(data[j]);
                uint64_t ne[2] = {(uint64_t)shape[1], (uint64_t)shape[0]};
                gguf_writer_add_tensor(w, t->gg, GW_GGML_F16, 2, ne, h, n * 2);
                free(h);
            } else {
                gguf_writer_add_tensor_f32(w, t->gg, t->n_dims, shape, data);
            }
        }
        if (data != t->data) free(data);
    }
    add_extra_gguf(w, o);
    return w;
}

static char *write_gguf(const char *name, const build_opts *o) {
    gguf_writer *w = gguf_model(o);
    char *path = test_tmp_path(name);
    REQUIRE(gguf_writer_write(w, path) == 0);
    gguf_writer_free(w);
    return path;
}

static const char *CONFIG =
    "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", \"hidden_size\": 32,"
    " \"num_hidden_layers\": 2, \"num_attention_heads\": 2, \"num_key_value_heads\": 1,"
    " \"intermediate_size\": 64, \"vocab_size\": 40, \"rms_norm_eps\": 1e-05, \"rope_theta\": 10000.0,"
    " \"max_position_embeddings\": 64, \"tie_word_embeddings\": false, \"hidden_act\": \"silu\"}";

/* A Hugging Face folder; config NULL means CONFIG. bf16: 1 = matrices as
 * BF16, 2 = as F32 holding the BF16-truncated values. */
static char *write_hf(const char *name, const build_opts *o, const char *config, int bf16) {
    make_specs();
    char *dir = test_tmp_path(name);
    mkdir(dir, 0755);
    char path[1024];
    snprintf(path, sizeof path, "%s/config.json", dir);
    const char *cfg = config ? config : CONFIG;
    test_write_file(path, cfg, strlen(cfg));
    stw_writer *w = stw_new();
    for (int i = 0; i < n_specs; i++) {
        tensor_spec *t = &specs[i];
        if (o->skip && strcmp(o->skip, t->hf) == 0) continue;
        int64_t shape[2] = {t->shape[0], t->shape[1]};
        if (o->wrong_shape && strcmp(o->wrong_shape, t->hf) == 0) shape[0] -= 1;
        if (bf16 == 2 && t->n_dims == 2) {
            size_t n = (size_t)(shape[0] * shape[1]);
            float *rb = malloc(n * sizeof *rb);
            for (size_t j = 0; j < n; j++) rb[j] = fp16_bits_to_f32(fp16_f32_to_bits(t->data[j]) & 0xffff0000u);
            stw_add_f32(w, t->hf, 2, shape, rb);
            free(rb);
        } else if (bf16 && t->n_dims == 2) {
            size_t n = (size_t)(shape[0] * shape[1]);
            uint16_t *h = malloc(n * 2);
            for (size_t j = 0; j < n; j++) h[j] = (uint16_t)(fp16_f32_to_bits(t->data[j]) >> 16);
            stw_add(w, t->hf, "BF16", 2, shape, h);
            free(h);
        } else {
            stw_add_f32(w, t->hf, t->n_dims, shape, t->data);
        }
    }
    add_extra_hf(w, o);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    REQUIRE(stw_write(w, path) == 0);
    stw_free(w);
    return dir;
}

static const int32_t TOKENS[9] = {3, 17, 0, 39, 22, 5, 5, 31, 12};

/* The 9 x VOC logits of TOKENS with the model at path loaded with mo. */
static float *logits_with(const char *path, const pdl_model_options *mo, pdl_kv_dtype kvt) {
    pdl_model *m = NULL;
    pdl_error err;
    REQUIRE_MSG(pdl_model_load(&m, path, mo, &err) == 0, "%s", err.message);
    pdl_context *ctx = test_context(m);
    pdl_kv_cache *kv = NULL;
    REQUIRE(pdl_kv_cache_create(&kv, m, kvt, 4, 8, &err) == 0);
    float *out = malloc(9 * VOC * sizeof *out);
    pdl_seq seq = {0};
    REQUIRE_MSG(pdl_seq_forward(ctx, kv, &seq, TOKENS, NULL, 9, PDL_LOGITS_ALL, out, &err) == 0, "%s", err.message);
    pdl_seq_release(kv, &seq);
    pdl_kv_cache_free(kv);
    pdl_context_free(ctx);
    pdl_model_free(m);
    return out;
}

static float *logits_of(const char *path, pdl_kv_dtype kvt) {
    pdl_model_options mo = {.n_threads = 2};
    return logits_with(path, &mo, kvt);
}

static double max_diff(const float *a, const float *b, size_t n) {
    double md = 0;
    for (size_t i = 0; i < n; i++)
        if (fabs(a[i] - b[i]) > md) md = fabs(a[i] - b[i]);
    return md;
}

/* The permuted GGUF (adjacent-pair RoPE) and the rotate-half Hugging Face
 * folder hold the same model: same logits up to float rounding (1e-5; a
 * RoPE layout mix-up moves them by ~0.1 here). */
static void test_gguf_and_hf_copies_give_the_same_logits(void) {
    build_opts o = {0};
    char *g = write_gguf("same.gguf", &o), *h = write_hf("same-hf", &o, NULL, 0);
    float *a = logits_of(g, PDL_KV_F32), *b = logits_of(h, PDL_KV_F32);
    double md = max_diff(a, b, 9 * VOC);
    CHECK_MSG(md < 1e-5, "max |diff| %.3g", md);
    double mag = 0;
    for (int i = 0; i < 9 * VOC; i++) mag = fmax(mag, fabs(a[i]));
    CHECK(mag > 0.05); /* the comparison is not between zeros */
    free(a), free(b), free(g), free(h);
}

/* F16 GGUF and BF16 safetensors weights give the logits of an F32 model
 * holding the same rounded values (1e-5: only the summation may differ;
 * reading a half as bfloat16 or the reverse would be off by ~1). Exact F32
 * products here; BF16 activations are checked below. */
static void test_f16_and_bf16_weights_load(void) {
    matmul_set_bf16_activations(false);
    build_opts o = {0}, of16 = {.f16_matrices = 1}, of16r = {.f16_matrices = 2};
    char *g = write_gguf("f32.gguf", &o), *g16 = write_gguf("f16.gguf", &of16), *g16r = write_gguf("f16r.gguf", &of16r);
    char *hb = write_hf("bf16-hf", &o, NULL, 1), *hbr = write_hf("bf16r-hf", &o, NULL, 2);
    float *a = logits_of(g, PDL_KV_F32), *b = logits_of(g16, PDL_KV_F32), *br = logits_of(g16r, PDL_KV_F32);
    float *c = logits_of(hb, PDL_KV_F32), *cr = logits_of(hbr, PDL_KV_F32);
    double d16 = max_diff(br, b, 9 * VOC), dbf = max_diff(cr, c, 9 * VOC);
    CHECK_MSG(d16 < 1e-5, "F16: %.3g", d16);
    CHECK_MSG(dbf < 1e-5, "BF16: %.3g", dbf);
    CHECK(max_diff(a, b, 9 * VOC) > 1e-5); /* the rounding is visible: the test compares real F16 data */
    /* With BF16 activations (VDPBF16PS, where the CPU has it) the logits
     * move by the activation rounding only (2^-9 relative per value): under
     * 1% of the largest logit here. */
    matmul_set_bf16_activations(true);
    float *c16 = logits_of(hb, PDL_KV_F32);
    double d_act = max_diff(cr, c16, 9 * VOC), mag = 0;
    for (int i = 0; i < 9 * VOC; i++) mag = fmax(mag, fabs(cr[i]));
    CHECK_MSG(d_act < 1e-2 * mag, "BF16 activations moved logits by %.3g (largest logit %.3g)", d_act, mag);
    fprintf(stderr, "  BF16 activations: max |logit change| %.3g, largest |logit| %.3g\n", d_act, mag);
    free(c16);
    free(br), free(cr), free(g16r), free(hbr);
    pdl_model *m = NULL;
    pdl_error err;
    REQUIRE(pdl_model_load(&m, g16, NULL, &err) == 0);
    pdl_model_info info;
    pdl_model_get_info(m, &info);
    CHECK(strcmp(info.weight_types, "F16") == 0);
    pdl_model_free(m);
    free(a), free(b), free(c), free(g), free(g16), free(hb);
}

static void expect_load_error(const char *path, const char *part1, const char *part2) {
    pdl_model *m = NULL;
    pdl_error err = {{0}};
    int rc = pdl_model_load(&m, path, NULL, &err);
    CHECK_MSG(rc != 0, "%s loaded but should not", path);
    CHECK(m == NULL);
    if (rc == 0) {
        pdl_model_free(m);
        return;
    }
    if (part1) CHECK_CONTAINS(err.message, part1);
    if (part2) CHECK_CONTAINS(err.message, part2);
}

static void test_missing_tensor_is_named(void) {
    build_opts o = {.skip = "blk.1.ffn_up.weight"};
    char *g = write_gguf("missing.gguf", &o);
    expect_load_error(g, "blk.1.ffn_up.weight", "missing.gguf");
    build_opts oh = {.skip = "model.layers.0.self_attn.k_proj.weight"};
    char *h = write_hf("missing-hf", &oh, NULL, 0);
    expect_load_error(h, "model.layers.0.self_attn.k_proj.weight", "missing");
    build_opts oh2 = {.skip = "lm_head.weight"}; /* untied: the head is required */
    char *h2 = write_hf("missing-head-hf", &oh2, NULL, 0);
    expect_load_error(h2, "lm_head.weight", "missing");
    free(g), free(h), free(h2);
}

static void test_shape_not_matching_config_is_named(void) {
    build_opts o = {.wrong_shape = "blk.0.attn_k.weight"};
    char *g = write_gguf("shape.gguf", &o);
    expect_load_error(g, "blk.0.attn_k.weight", "[15, 32]");
    build_opts oh = {.wrong_shape = "model.layers.1.mlp.down_proj.weight"};
    char *h = write_hf("shape-hf", &oh, NULL, 0);
    expect_load_error(h, "model.layers.1.mlp.down_proj.weight", "needs [32, 64]");
    free(g), free(h);
}

static void test_duplicate_tensor_is_named(void) {
    build_opts o = {.dup = "blk.0.ffn_norm.weight"};
    char *g = write_gguf("dup.gguf", &o);
    expect_load_error(g, "blk.0.ffn_norm.weight", "duplicate");
    free(g);
}

/* The offset field of tensor `name`'s info in a GGUF image: after the name
 * (u64 length + bytes), n_dims (u32), n_dims u64 dimensions and the type (u32). */
static uint8_t *tensor_offset_field(uint8_t *img, size_t size, const char *name) {
    size_t nl = strlen(name);
    for (size_t i = 8; i + nl < size; i++) {
        uint64_t len;
        memcpy(&len, img + i - 8, 8);
        if (len != nl || memcmp(img + i, name, nl) != 0) continue;
        uint32_t n_dims;
        memcpy(&n_dims, img + i + nl, 4);
        return img + i + nl + 4 + 8 * (size_t)n_dims + 4;
    }
    return NULL;
}

/* Tensors sharing bytes (llama.cpp writes them one after the other): two at
 * the same offset, and one starting inside another. */
static void test_overlapping_gguf_tensors_are_named(void) {
    build_opts o = {0};
    gguf_writer *w = gguf_model(&o);
    size_t size;
    const uint8_t *bytes = gguf_writer_bytes(w, &size);
    uint8_t *img = malloc(size);
    char *path = test_tmp_path("overlap.gguf");
    for (int shift = 0; shift < 2; shift++) {
        memcpy(img, bytes, size);
        uint8_t *a = tensor_offset_field(img, size, "blk.0.ffn_gate.weight");
        uint8_t *b = tensor_offset_field(img, size, "blk.0.ffn_up.weight");
        REQUIRE(a && b);
        uint64_t off;
        memcpy(&off, a, 8);
        off += shift ? 32 * 4 : 0; /* 32 floats in: still inside the gate's 64 x 32 */
        memcpy(b, &off, 8);
        test_write_file(path, img, size);
        expect_load_error(path, "'blk.0.ffn_gate.weight'", "'blk.0.ffn_up.weight'");
        expect_load_error(path, "overlap", "overlap.gguf");
    }
    free(img), free(path);
    gguf_writer_free(w);
}

/* A layer's tensors beyond block_count, or non-finite norm epsilon / RoPE
 * base, are errors naming the key; not a model run with a layer missing. */
static void test_layer_count_and_non_finite_values_are_checked(void) {
    build_opts o = {.block_count = NL - 1};
    char *g = write_gguf("stray.gguf", &o);
    expect_load_error(g, "'blk.1.", "declares 1 layers (block_count)");
    free(g);
    build_opts e = {.rms_eps = INFINITY};
    g = write_gguf("eps.gguf", &e);
    expect_load_error(g, "epsilon inf", NULL);
    free(g);
    build_opts f = {.freq_base = INFINITY};
    g = write_gguf("freq.gguf", &f);
    expect_load_error(g, "RoPE theta inf", NULL);
    free(g);
    char *cfg = strdup(CONFIG);
    char *p = strstr(cfg, "\"num_hidden_layers\": 2");
    p[strlen("\"num_hidden_layers\": ")] = '1';
    build_opts oh = {0};
    char *h = write_hf("stray-hf", &oh, cfg, 0);
    expect_load_error(h, "'model.layers.1.", "declares 1 layers (num_hidden_layers)");
    free(h), free(cfg);
}

/* eos_token_id / bos_token_id outside the vocabulary (40 here), in
 * config.json or generation_config.json, are refused with file and field. */
static void test_token_ids_outside_the_vocabulary_are_refused(void) {
    build_opts o = {0};
    char cfg[1024];
    snprintf(cfg, sizeof cfg, "%.*s, \"eos_token_id\": 40}", (int)strlen(CONFIG) - 1, CONFIG);
    char *h = write_hf("eos-hf", &o, cfg, 0);
    expect_load_error(h, "config.json: field 'eos_token_id' is 40, outside the vocabulary [0, 40)", NULL);
    free(h);
    snprintf(cfg, sizeof cfg, "%.*s, \"eos_token_id\": [2, -1]}", (int)strlen(CONFIG) - 1, CONFIG);
    h = write_hf("eos-list-hf", &o, cfg, 0);
    expect_load_error(h, "'eos_token_id[1]' is -1", NULL);
    free(h);
    snprintf(cfg, sizeof cfg, "%.*s, \"eos_token_id\": 39}", (int)strlen(CONFIG) - 1, CONFIG);
    h = write_hf("gen-hf", &o, cfg, 0); /* 39 is the last id: fine */
    free(logits_of(h, PDL_KV_F32));
    char path[1024];
    snprintf(path, sizeof path, "%s/generation_config.json", h);
    test_write_file(path, "{\"eos_token_id\": [1, 4000]}", strlen("{\"eos_token_id\": [1, 4000]}"));
    expect_load_error(h, "generation_config.json: field 'eos_token_id[1]' is 4000", NULL);
    free(h);
}

typedef struct progress_log {
    double last;
    int calls, ends;
    bool backwards;
} progress_log;

static void on_progress(double done, void *user) {
    progress_log *p = user;
    if (done < p->last) p->backwards = true;
    p->last = done;
    p->calls++;
    p->ends += done == 1.0;
}

/* The load reports progress from 0 towards 1 as the matrices are laid out
 * (one call per matrix here), and 1 exactly once, at the end. */
static void test_load_progress_goes_to_one_once(void) {
    build_opts o = {0};
    char *g = write_gguf("progress.gguf", &o);
    progress_log p = {0};
    pdl_model_options mo = {.n_threads = 1, .progress = on_progress, .progress_user = &p};
    pdl_model *m = NULL;
    pdl_error err;
    REQUIRE_MSG(pdl_model_load(&m, g, &mo, &err) == 0, "%s", err.message);
    pdl_model_free(m);
    CHECK(!p.backwards);
    CHECK_EQ_INT(p.ends, 1);
    CHECK(p.last == 1.0);
    CHECK_MSG(p.calls >= 2 * 7, "%d calls: expected one per matrix (7 per layer, 2 layers) and the end", p.calls);
    free(g);
}

typedef struct lines_log {
    char text[4096];
    int n;
} lines_log;

static void on_log(const char *line, void *user) {
    lines_log *l = user;
    size_t at = strlen(l->text);
    snprintf(l->text + at, sizeof l->text - at, "%s\n", line);
    l->n++;
}

/* What the loader logs for path (every line, one after the other). */
static void load_log(const char *path, lines_log *l) {
    memset(l, 0, sizeof *l);
    pdl_model *m = NULL;
    pdl_error err;
    pdl_model_options opts = {.n_threads = 1, .log = on_log, .log_user = l};
    REQUIRE_MSG(pdl_model_load(&m, path, &opts, &err) == 0, "%s", err.message);
    pdl_model_free(m);
}

/* pdl_model_options.kernels gives a model its own kernel family: its
 * contexts run it bit for bit as when that family is the process's, while
 * the process keeps another; an unknown name loads with the best family
 * and logs pdl_set_kernels' message. */
static void test_model_options_choose_the_kernel_family(void) {
    build_opts o = {.f16_matrices = 1};
    char *g = write_gguf("family.gguf", &o);
    pdl_isa was = cpu_isa_active();
    cpu_isa_set(PDL_ISA_SCALAR);
    float *want = logits_of(g, PDL_KV_F32);
    cpu_isa_set(was);
    pdl_model_options mo = {.n_threads = 2, .kernels = "scalar"};
    float *got = logits_with(g, &mo, PDL_KV_F32);
    CHECK_MSG(memcmp(want, got, 9 * VOC * sizeof *got) == 0, "the model's scalar family differs from the process's");
    CHECK(cpu_isa_active() == was);
    lines_log l = {0};
    pdl_model_options bad = {.n_threads = 1, .kernels = "bogus", .log = on_log, .log_user = &l};
    pdl_model *m = NULL;
    pdl_error err;
    REQUIRE_MSG(pdl_model_load(&m, g, &bad, &err) == 0, "%s", err.message);
    CHECK_CONTAINS(l.text, "kernels: bogus is not one of scalar, avx2, avx512, neon; using ");
    pdl_model_free(m);
    free(want), free(got), free(g);
}

/* pdl_model_options.bf16_activations: ROUND and EXACT give the model's
 * kernel table that choice whatever the process-wide one is; DEFAULT
 * takes the process-wide one. */
static void test_model_options_choose_bf16_activations(void) {
    build_opts o = {.f16_matrices = 1};
    char *g = write_gguf("bf16-act.gguf", &o);
    bool was = matmul_bf16_activations();
    const pdl_bf16_activations modes[] = {PDL_BF16_ACT_ROUND, PDL_BF16_ACT_EXACT, PDL_BF16_ACT_DEFAULT};
    for (int process = 0; process < 2; process++) {
        matmul_set_bf16_activations(process);
        for (int i = 0; i < 3; i++) {
            pdl_model_options mo = {.n_threads = 1, .bf16_activations = modes[i]};
            pdl_model *m = NULL;
            pdl_error err;
            REQUIRE_MSG(pdl_model_load(&m, g, &mo, &err) == 0, "%s", err.message);
            bool want = modes[i] == PDL_BF16_ACT_ROUND || (modes[i] == PDL_BF16_ACT_DEFAULT && process);
            CHECK_MSG(m->kernels.bf16_activations == want, "mode %d with the process at %d", i, process);
            pdl_model_free(m);
        }
    }
    matmul_set_bf16_activations(was);
    free(g);
}

/* Tensors the model does not take are counted in one log line naming the
 * first four in file order, in both formats; a file whose every tensor is
 * used logs nothing of the kind; a multimodal checkpoint's vision tensors
 * (the vision loader's) are not counted. */
static void test_unused_tensors_are_logged(void) {
    lines_log l;
    build_opts clean = {0};
    char *g = write_gguf("all-used.gguf", &clean), *h = write_hf("all-used-hf", &clean, NULL, 0);
    load_log(g, &l);
    CHECK_MSG(!strstr(l.text, "not used"), "a file with every tensor used logs: %s", l.text);
    load_log(h, &l);
    CHECK_MSG(!strstr(l.text, "not used"), "a folder with every tensor used logs: %s", l.text);
    free(g), free(h);

    const char *const gx[] = {"blk.1.attn_sinks.weight", "blk.0.ffn_extra.weight", "a.weight", "b.weight",
                              "c.weight", NULL};
    build_opts og = {.extra = gx};
    g = write_gguf("unused.gguf", &og);
    load_log(g, &l);
    CHECK_CONTAINS(l.text, "5 of its 26 tensors are not used by the model: blk.1.attn_sinks.weight, "
                           "blk.0.ffn_extra.weight, a.weight, b.weight, ...");
    CHECK_MSG(!strstr(l.text, "c.weight"), "past the first four: %s", l.text);
    CHECK_EQ_INT(l.n, 1);
    free(g);
    og.extra = gx + 1; /* exactly four: all named, no "..." */
    g = write_gguf("unused4.gguf", &og);
    load_log(g, &l);
    CHECK_CONTAINS(l.text, "4 of its 25 tensors are not used by the model: blk.0.ffn_extra.weight, a.weight, "
                           "b.weight, c.weight\n");

    const char *const hx[] = {"model.layers.0.self_attn.rotary_emb.inv_freq", "vision_tower.vision_model.x.weight",
                              "multi_modal_projector.linear_1.weight", NULL};
    build_opts oh = {.extra = hx};
    h = write_hf("unused-hf", &oh, NULL, 0);
    load_log(h, &l);
    CHECK_CONTAINS(l.text, "1 of its 22 tensors are not used by the model: "
                           "model.layers.0.self_attn.rotary_emb.inv_freq\n");
    CHECK_MSG(!strstr(l.text, "vision_tower") && !strstr(l.text, "multi_modal"), "vision tensors counted: %s", l.text);
    free(g), free(h);
}

static void test_truncated_model_file_fails_cleanly(void) {
    build_opts o = {0};
    gguf_writer *w = gguf_model(&o);
    size_t size;
    const uint8_t *bytes = gguf_writer_bytes(w, &size);
    char *path = test_tmp_path("trunc.gguf");
    /* header, metadata, tensor infos, and data: cut at several places */
    size_t cuts[] = {3, 20, 100, size / 2, size - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        test_write_file(path, bytes, cuts[i]);
        expect_load_error(path, "trunc.gguf", NULL);
    }
    gguf_writer_free(w);
    free(path);
}

static void test_unsupported_architecture_is_named(void) {
    build_opts o = {.arch = "gpt2"};
    char *g = write_gguf("gpt2.gguf", &o);
    expect_load_error(g, "gpt2", "not supported");
    char *cfg = strdup(CONFIG);
    char *p = strstr(cfg, "\"llama\"");
    memcpy(p, "\"gpt2\" ", 7);
    build_opts oh = {0};
    char *h = write_hf("gpt2-hf", &oh, cfg, 0);
    expect_load_error(h, "gpt2", "not supported");
    free(cfg), free(g), free(h);
}

static void test_config_json_errors_name_file_and_field(void) {
    build_opts o = {0};
    char *h = write_hf("badjson-hf", &o, "{\"model_type\": \"llama\",\n \"hidden_size\": 32,,}", 0);
    expect_load_error(h, "config.json", "line 2");
    free(h);
    h = write_hf("badtype-hf", &o,
                 "{\"model_type\": \"llama\", \"hidden_size\": \"32\", \"num_hidden_layers\": 2,"
                 " \"num_attention_heads\": 2, \"intermediate_size\": 64, \"vocab_size\": 40}",
                 0);
    expect_load_error(h, "config.json", "'hidden_size' must be an integer");
    free(h);
    h = write_hf("nofield-hf", &o, "{\"model_type\": \"llama\", \"hidden_size\": 32}", 0);
    expect_load_error(h, "config.json", "num_hidden_layers");
    free(h);
    h = write_hf("yarn-hf", &o,
                 "{\"model_type\": \"llama\", \"hidden_size\": 32, \"num_hidden_layers\": 2,"
                 " \"num_attention_heads\": 2, \"num_key_value_heads\": 1, \"intermediate_size\": 64,"
                 " \"vocab_size\": 40, \"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4.0}}",
                 0);
    expect_load_error(h, "rope_scaling", "yarn");
    free(h);
    h = write_hf("array-hf", &o, "[1, 2, 3]", 0);
    expect_load_error(h, "config.json", "not a JSON object");
    free(h);
}

static void test_folder_without_config_is_explained(void) {
    char *dir = test_tmp_path("empty-dir");
    mkdir(dir, 0755);
    expect_load_error(dir, "config.json", NULL);
    expect_load_error("/nonexistent/path/x.gguf", "/nonexistent/path/x.gguf", NULL);
    free(dir);
}

/* Head counts that do not divide, or a zero layer count, are caught before
 * any weight is used. */
static void test_inconsistent_hyperparameters_are_rejected(void) {
    build_opts o = {0};
    char *h = write_hf("heads-hf", &o,
                       "{\"model_type\": \"llama\", \"hidden_size\": 32, \"num_hidden_layers\": 2,"
                       " \"num_attention_heads\": 2, \"num_key_value_heads\": 3, \"intermediate_size\": 64,"
                       " \"vocab_size\": 40}",
                       0);
    expect_load_error(h, "KV heads", NULL);
    free(h);
}

int main(void) {
    fp16_init();
    RUN(test_gguf_and_hf_copies_give_the_same_logits);
    RUN(test_unused_tensors_are_logged);
    RUN(test_f16_and_bf16_weights_load);
    RUN(test_missing_tensor_is_named);
    RUN(test_shape_not_matching_config_is_named);
    RUN(test_duplicate_tensor_is_named);
    RUN(test_truncated_model_file_fails_cleanly);
    RUN(test_unsupported_architecture_is_named);
    RUN(test_config_json_errors_name_file_and_field);
    RUN(test_folder_without_config_is_explained);
    RUN(test_inconsistent_hyperparameters_are_rejected);
    RUN(test_overlapping_gguf_tensors_are_named);
    RUN(test_layer_count_and_non_finite_values_are_checked);
    RUN(test_token_ids_outside_the_vocabulary_are_refused);
    RUN(test_load_progress_goes_to_one_once);
    RUN(test_model_options_choose_the_kernel_family);
    RUN(test_model_options_choose_bf16_activations);
    for (int i = 0; i < n_specs; i++) free(specs[i].data);
    return test_summary();
}
