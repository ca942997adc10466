/*
 * test_vision_qwen25vl.c - Qwen2.5-VL's text model with M-RoPE against a
 * float64 forward written from the published description (transformers'
 * modeling_qwen2_5_vl.py: Qwen2 decoder layers, apply_multimodal_rotary_
 * pos_emb with rope_scaling.mrope_section; vLLM's MRotaryEmbedding for the
 * decode rows' index + mrope_position_delta).
 *
 * The model is a tiny random-weight Qwen2_5_VLForConditionalGeneration
 * folder written here (text part: 2 layers of width 48, 3 query heads and
 * one KV head of 16, Q/K/V biases, mrope_section [2, 3, 3] over the 8
 * frequency pairs, as [16, 24, 24] cuts Qwen2.5-VL's 64).
 *
 * The reference follows transformers' layout literally: each of the three
 * position components gives a full (head_dim) cos/sin vector
 * cat(freqs, freqs); the head_dim is cut into chunks of mrope_section * 2
 * (six chunks) and chunk j takes component j % 3. The engine computes the
 * angles per frequency pair and section (pdl_rope_angles_sections); the
 * two must agree.
 *
 * Tolerance: 1e-4 absolute on logits of magnitude ~1-5. The engine runs in
 * float32 (F32 weights and KV cache) over 2 layers; the observed difference
 * from float64 is ~1e-6. The reference variants with the height and width
 * sections swapped, with plain RoPE on the row index, or with the decode
 * rows' delta one off land far outside it, so the comparison sees each.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pagedlm.h"
#include "st_writer.h"
#include "test_util.h"

#define TOL 1e-4

/* text */
enum { TH = 48, NH = 3, NKV = 1, HD = 16, FFN = 96, VOC = 160, NL = 2 };
static const int SECTION[3] = {2, 3, 3}; /* frequency pairs per t, h, w: sum HD / 2 */
static const double TEPS = 1e-6, THETA = 1e6;

/* ---- random weights ------------------------------------------------------------ */

static uint64_t seed;
static float frand(void) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((seed >> 40) / (double)(1ull << 24)) - 0.5f;
}

typedef struct wspec {
    char name[160];
    int n_dims;
    int64_t shape[4];
    float *data;
} wspec;

static wspec specs[256];
static int n_specs;

static float *W(const char *name) {
    for (int i = 0; i < n_specs; i++)
        if (strcmp(specs[i].name, name) == 0) return specs[i].data;
    fprintf(stderr, "no weight %s\n", name);
    abort();
}

/* kind 0: uniform [-0.5, 0.5) * scale; 1: around 1 (norm weights); 2: small (biases) */
static void add(const char *name, int n_dims, int64_t d0, int64_t d1, int64_t d2, int64_t d3, int kind,
                double scale) {
    wspec *t = &specs[n_specs++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->n_dims = n_dims;
    int64_t d[4] = {d0, d1, d2, d3}, n = 1;
    for (int i = 0; i < n_dims; i++) t->shape[i] = d[i], n *= d[i];
    t->data = malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++)
        t->data[i] = kind == 1 ? 1.0f + 0.2f * frand() : kind == 2 ? 0.2f * frand() : (float)(scale * frand());
}

static void make_weights(void) {
    if (n_specs) return;
    seed = 2525;
    char n[160];
    add("model.embed_tokens.weight", 2, VOC, TH, 0, 0, 0, 1.0);
    add("model.norm.weight", 1, TH, 0, 0, 0, 1, 0);
    add("lm_head.weight", 2, VOC, TH, 0, 0, 0, 0.6);
    for (int l = 0; l < NL; l++) {
#define T(fmt) (snprintf(n, sizeof n, "model.layers.%d." fmt, l), n)
        add(T("input_layernorm.weight"), 1, TH, 0, 0, 0, 1, 0);
        add(T("self_attn.q_proj.weight"), 2, NH * HD, TH, 0, 0, 0, 0.6);
        add(T("self_attn.q_proj.bias"), 1, NH * HD, 0, 0, 0, 2, 0);
        add(T("self_attn.k_proj.weight"), 2, NKV * HD, TH, 0, 0, 0, 0.6);
        add(T("self_attn.k_proj.bias"), 1, NKV * HD, 0, 0, 0, 2, 0);
        add(T("self_attn.v_proj.weight"), 2, NKV * HD, TH, 0, 0, 0, 0.6);
        add(T("self_attn.v_proj.bias"), 1, NKV * HD, 0, 0, 0, 2, 0);
        add(T("self_attn.o_proj.weight"), 2, TH, NH * HD, 0, 0, 0, 0.5);
        add(T("post_attention_layernorm.weight"), 1, TH, 0, 0, 0, 1, 0);
        add(T("mlp.gate_proj.weight"), 2, FFN, TH, 0, 0, 0, 0.5);
        add(T("mlp.up_proj.weight"), 2, FFN, TH, 0, 0, 0, 0.5);
        add(T("mlp.down_proj.weight"), 2, TH, FFN, 0, 0, 0, 0.5);
#undef T
    }
}

/* ---- the folder ---------------------------------------------------------------- */

/* transformers 4.49's layout: the text model's fields at the top level,
 * rope_scaling as the published checkpoints write it */
static const char *CONFIG =
    "{\"architectures\": [\"Qwen2_5_VLForConditionalGeneration\"], \"model_type\": \"qwen2_5_vl\","
    " \"hidden_size\": 48, \"intermediate_size\": 96, \"num_hidden_layers\": 2, \"num_attention_heads\": 3,"
    " \"num_key_value_heads\": 1, \"vocab_size\": 160, \"max_position_embeddings\": 256,"
    " \"rms_norm_eps\": 1e-06, \"rope_theta\": 1000000.0, \"hidden_act\": \"silu\","
    " \"tie_word_embeddings\": false, \"use_sliding_window\": false, \"sliding_window\": 32768,"
    " \"bos_token_id\": 150, \"eos_token_id\": 151,"
    " \"rope_scaling\": {\"type\": \"mrope\", \"mrope_section\": [2, 3, 3]},"
    " \"torch_dtype\": \"float32\"}";

static char *hf_dir;

static void write_folder(const char *dir, const char *config) {
    char *p = test_join(dir, "config.json");
    test_write_file(p, config, strlen(config));
    free(p);
    stw_writer *w = stw_new();
    for (int i = 0; i < n_specs; i++) stw_add_f32(w, specs[i].name, specs[i].n_dims, specs[i].shape, specs[i].data);
    p = test_join(dir, "model.safetensors");
    REQUIRE(stw_write(w, p) == 0);
    free(p);
    stw_free(w);
}

static void need_files(void) {
    if (hf_dir) return;
    make_weights();
    hf_dir = test_make_dir("qwen25vl");
    write_folder(hf_dir, CONFIG);
}

/* ---- the float64 reference ------------------------------------------------------------ */

typedef enum ref_bug {
    BUG_NONE,
    BUG_SWAP_HW,     /* the height and width sections' components swapped */
    BUG_PLAIN_ROPE,  /* every row turned by its index (no M-RoPE) */
} ref_bug;

static void rmsnorm(double *o, const double *x, const float *w, int n, double eps) {
    double ss = 0;
    for (int i = 0; i < n; i++) ss += x[i] * x[i];
    double r = 1.0 / sqrt(ss / n + eps);
    for (int i = 0; i < n; i++) o[i] = x[i] * r * w[i];
}

static void linear(double *y, const float *w, const float *b, const double *x, int rows, int cols) {
    for (int r = 0; r < rows; r++) {
        double s = b ? b[r] : 0.0;
        for (int c = 0; c < cols; c++) s += (double)w[(size_t)r * cols + c] * x[c];
        y[r] = s;
    }
}

/* apply_multimodal_rotary_pos_emb on one head: cos/sin of each component
 * as cat(freqs, freqs) over head_dim, the head_dim cut into chunks
 * mrope_section * 2 = [s0, s1, s2, s0, s1, s2], chunk j from component
 * j % 3; then x * cos + rotate_half(x) * sin. */
static void mrope(double *x, const int32_t pos3[3], ref_bug bug) {
    double cosv[HD], sinv[HD], out[HD];
    int chunk[6] = {SECTION[0], SECTION[1], SECTION[2], SECTION[0], SECTION[1], SECTION[2]};
    int d = 0;
    for (int j = 0; j < 6; j++) {
        int comp = j % 3;
        if (bug == BUG_SWAP_HW && comp) comp = 3 - comp;
        for (int k = 0; k < chunk[j]; k++, d++) {
            int i = d % (HD / 2); /* cat(freqs, freqs): index d holds frequency d mod HD/2 */
            double ang = pos3[comp] * pow(THETA, -2.0 * i / HD);
            cosv[d] = cos(ang), sinv[d] = sin(ang);
        }
    }
    for (int e = 0; e < HD; e++) {
        double rot = e < HD / 2 ? -x[e + HD / 2] : x[e - HD / 2];
        out[e] = x[e] * cosv[e] + rot * sinv[e];
    }
    memcpy(x, out, sizeof out);
}

/* The Qwen2 decoder over n rows (row i: token ids[i], or the vector embd[i]
 * when given), causal, rows turned by pos3[i]; logits of every row. With
 * BUG_PLAIN_ROPE every row turns by its index instead. */
static void ref_text_logits(ref_bug bug, const int32_t *ids, const double *const *embd, const int32_t *pos3, int n,
                            double *logits) {
    double *x = calloc((size_t)n * TH, sizeof *x), *xn = malloc(sizeof(double) * TH);
    double *q = malloc(sizeof(double) * (size_t)n * NH * HD), *k = malloc(sizeof(double) * (size_t)n * NKV * HD);
    double *v = malloc(sizeof(double) * (size_t)n * NKV * HD), *att = malloc(sizeof(double) * NH * HD);
    double *g = malloc(sizeof(double) * FFN), *u = malloc(sizeof(double) * FFN), *o = malloc(sizeof(double) * TH);
    double *sc = malloc(sizeof(double) * (size_t)n);
    const float *emb = W("model.embed_tokens.weight");
    for (int i = 0; i < n; i++)
        for (int c = 0; c < TH; c++) x[(size_t)i * TH + c] = embd && embd[i] ? embd[i][c] : emb[(size_t)ids[i] * TH + c];
    char nm[160];
    for (int l = 0; l < NL; l++) {
#define L(s) (snprintf(nm, sizeof nm, "model.layers.%d.%s", l, s), W(nm))
        for (int i = 0; i < n; i++) {
            rmsnorm(xn, x + (size_t)i * TH, L("input_layernorm.weight"), TH, TEPS);
            linear(q + (size_t)i * NH * HD, L("self_attn.q_proj.weight"), L("self_attn.q_proj.bias"), xn, NH * HD, TH);
            linear(k + (size_t)i * NKV * HD, L("self_attn.k_proj.weight"), L("self_attn.k_proj.bias"), xn, NKV * HD, TH);
            linear(v + (size_t)i * NKV * HD, L("self_attn.v_proj.weight"), L("self_attn.v_proj.bias"), xn, NKV * HD, TH);
            int32_t idx3[3] = {i, i, i};
            const int32_t *p = bug == BUG_PLAIN_ROPE ? idx3 : pos3 + 3 * i;
            ref_bug b = bug == BUG_PLAIN_ROPE ? BUG_NONE : bug;
            for (int h = 0; h < NH; h++) mrope(q + ((size_t)i * NH + h) * HD, p, b);
            for (int h = 0; h < NKV; h++) mrope(k + ((size_t)i * NKV + h) * HD, p, b);
        }
        for (int i = 0; i < n; i++) {
            for (int h = 0; h < NH; h++) {
                const double *qh = q + ((size_t)i * NH + h) * HD;
                int kvh = h / (NH / NKV);
                double mx = -1e300, sum = 0;
                for (int j = 0; j <= i; j++) {
                    double s = 0;
                    for (int e = 0; e < HD; e++) s += qh[e] * k[((size_t)j * NKV + kvh) * HD + e];
                    sc[j] = s / sqrt((double)HD);
                    if (sc[j] > mx) mx = sc[j];
                }
                for (int j = 0; j <= i; j++) sum += sc[j] = exp(sc[j] - mx);
                for (int e = 0; e < HD; e++) {
                    double a = 0;
                    for (int j = 0; j <= i; j++) a += sc[j] * v[((size_t)j * NKV + kvh) * HD + e];
                    att[h * HD + e] = a / sum;
                }
            }
            linear(o, L("self_attn.o_proj.weight"), NULL, att, TH, NH * HD);
            for (int c = 0; c < TH; c++) x[(size_t)i * TH + c] += o[c];
        }
        for (int i = 0; i < n; i++) {
            double *xi = x + (size_t)i * TH;
            rmsnorm(xn, xi, L("post_attention_layernorm.weight"), TH, TEPS);
            linear(g, L("mlp.gate_proj.weight"), NULL, xn, FFN, TH);
            linear(u, L("mlp.up_proj.weight"), NULL, xn, FFN, TH);
            for (int f = 0; f < FFN; f++) g[f] = g[f] / (1.0 + exp(-g[f])) * u[f];
            linear(o, L("mlp.down_proj.weight"), NULL, g, TH, FFN);
            for (int c = 0; c < TH; c++) xi[c] += o[c];
        }
#undef L
    }
    for (int i = 0; i < n; i++) {
        rmsnorm(xn, x + (size_t)i * TH, W("model.norm.weight"), TH, TEPS);
        linear(logits + (size_t)i * VOC, W("lm_head.weight"), NULL, xn, VOC, TH);
    }
    free(x), free(xn), free(q), free(k), free(v), free(att), free(g), free(u), free(o), free(sc);
}

static double max_diff(const float *a, const double *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= m)) m = d; /* NaN counts as the largest */
    }
    return m;
}

/* ---- stage 1: M-RoPE through the batch ---------------------------------------------- */

/* Made-up positions as an image prompt lays them out: 3 text rows, a
 * 2 x 3 grid of image rows at start 3 ((3, 3 + row, 3 + col)), then text
 * from max + 1 = 6; then 3 decode rows at index + delta (delta = 6 - 9). */
enum { N_PRE = 12, N_DEC = 3, N_ALL = N_PRE + N_DEC };
static void made_up_positions(int32_t *pos3, int32_t *delta) {
    int i = 0;
    for (; i < 3; i++) pos3[3 * i] = pos3[3 * i + 1] = pos3[3 * i + 2] = i;
    for (int r = 0; r < 2; r++)
        for (int c = 0; c < 3; c++, i++) pos3[3 * i] = 3, pos3[3 * i + 1] = 3 + r, pos3[3 * i + 2] = 3 + c;
    int next = 3 + 2 + 1; /* the image's largest component (3 + col 2) + 1 */
    for (int t = 0; i < N_PRE; i++, t++) pos3[3 * i] = pos3[3 * i + 1] = pos3[3 * i + 2] = next + t;
    *delta = next - 9; /* row 9 (the first text row after the image) is at position 6 */
    for (; i < N_ALL; i++) pos3[3 * i] = pos3[3 * i + 1] = pos3[3 * i + 2] = i + *delta;
}

static void stage1_ids(int32_t *ids) {
    for (int i = 0; i < N_ALL; i++) ids[i] = (int32_t)((i * 37 + 11) % 150);
}

/* The engine's logits of all N_ALL rows: the prompt in one call with its
 * positions, then each decode row alone at index + delta. */
static float *stage1_engine_logits(int32_t delta_error) {
    pdl_error err = {0};
    pdl_model *m = NULL;
    pdl_model_options mo = {.n_threads = 2};
    REQUIRE_MSG(pdl_model_load(&m, hf_dir, &mo, &err) == 0, "%s", err.message);
    pdl_kv_cache *kv = NULL;
    REQUIRE(pdl_kv_cache_create(&kv, m, PDL_KV_F32, 16, 4, &err) == 0);
    int32_t ids[N_ALL], pos3[3 * N_ALL], delta;
    stage1_ids(ids);
    made_up_positions(pos3, &delta);
    float *logits = malloc((size_t)N_ALL * VOC * sizeof *logits);
    pdl_seq seq = {0};
    pdl_row_inputs in = {.rope_pos3 = pos3};
    int rc = pdl_seq_forward_rows(m, kv, &seq, ids, &in, N_PRE, PDL_LOGITS_ALL, logits, &err);
    CHECK_MSG(rc == 0, "%s", err.message);
    for (int i = N_PRE; rc == 0 && i < N_ALL; i++) {
        int32_t p3[3] = {i + delta + delta_error, i + delta + delta_error, i + delta + delta_error};
        pdl_row_inputs d = {.rope_pos3 = p3};
        rc = pdl_seq_forward_rows(m, kv, &seq, ids + i, &d, 1, PDL_LOGITS_ALL, logits + (size_t)i * VOC, &err);
        CHECK_MSG(rc == 0, "%s", err.message);
    }
    pdl_seq_release(kv, &seq);
    pdl_kv_cache_free(kv);
    pdl_model_free(m);
    if (rc) free(logits), logits = NULL;
    return logits;
}

static void test_mrope_rows_match_the_float64_reference(void) {
    need_files();
    int32_t ids[N_ALL], pos3[3 * N_ALL], delta;
    stage1_ids(ids);
    made_up_positions(pos3, &delta);
    double *want = malloc(sizeof(double) * N_ALL * VOC), *bad = malloc(sizeof(double) * N_ALL * VOC);
    ref_text_logits(BUG_NONE, ids, NULL, pos3, N_ALL, want);
    float *got = stage1_engine_logits(0);
    REQUIRE(got);
    double d = max_diff(got, want, (size_t)N_ALL * VOC);
    fprintf(stderr, "  M-RoPE text model: max |engine - float64 reference| = %.3g over %d rows\n", d, N_ALL);
    CHECK_MSG(d < TOL, "%.3g", d);
    /* the reference can tell: h/w swapped, plain RoPE, the delta one off */
    ref_text_logits(BUG_SWAP_HW, ids, NULL, pos3, N_ALL, bad);
    double d_swap = max_diff(got, bad, (size_t)N_ALL * VOC);
    ref_text_logits(BUG_PLAIN_ROPE, ids, NULL, pos3, N_ALL, bad);
    double d_plain = max_diff(got, bad, (size_t)N_ALL * VOC);
    fprintf(stderr, "  variants: h/w swapped %.3g, plain RoPE %.3g\n", d_swap, d_plain);
    CHECK_MSG(d_swap > 100 * TOL, "%.3g", d_swap);
    CHECK_MSG(d_plain > 100 * TOL, "%.3g", d_plain);
    free(got);
    got = stage1_engine_logits(1);
    REQUIRE(got);
    /* the prompt rows agree, the decode rows do not */
    CHECK(max_diff(got, want, (size_t)N_PRE * VOC) < TOL);
    double d_delta = max_diff(got + (size_t)N_PRE * VOC, want + (size_t)N_PRE * VOC, (size_t)N_DEC * VOC);
    fprintf(stderr, "  decode rows with the delta one off: %.3g\n", d_delta);
    CHECK_MSG(d_delta > 100 * TOL, "%.3g", d_delta);
    free(got), free(want), free(bad);
}

/* Equal components are plain RoPE, to the bit; a model without M-RoPE
 * refuses 3-component positions. */
static void test_equal_components_are_plain_rope(void) {
    need_files();
    pdl_error err = {0};
    pdl_model *m = NULL;
    pdl_model_options mo = {.n_threads = 2};
    REQUIRE_MSG(pdl_model_load(&m, hf_dir, &mo, &err) == 0, "%s", err.message);
    pdl_kv_cache *kv = NULL;
    REQUIRE(pdl_kv_cache_create(&kv, m, PDL_KV_F32, 16, 4, &err) == 0);
    int32_t ids[N_PRE], pos3[3 * N_PRE];
    stage1_ids(ids);
    for (int i = 0; i < N_PRE; i++) pos3[3 * i] = pos3[3 * i + 1] = pos3[3 * i + 2] = i;
    float *a = malloc(sizeof(float) * N_PRE * VOC), *b = malloc(sizeof(float) * N_PRE * VOC);
    pdl_seq s1 = {0}, s2 = {0};
    pdl_row_inputs in = {.rope_pos3 = pos3};
    CHECK(pdl_seq_forward_rows(m, kv, &s1, ids, NULL, N_PRE, PDL_LOGITS_ALL, a, &err) == 0);
    CHECK(pdl_seq_forward_rows(m, kv, &s2, ids, &in, N_PRE, PDL_LOGITS_ALL, b, &err) == 0);
    CHECK(memcmp(a, b, sizeof(float) * N_PRE * VOC) == 0);
    /* shifted by one in one component: different */
    pdl_seq_release(kv, &s2);
    pos3[3 * 5 + 2] += 1;
    CHECK(pdl_seq_forward_rows(m, kv, &s2, ids, &in, N_PRE, PDL_LOGITS_ALL, b, &err) == 0);
    CHECK(memcmp(a + 5 * VOC, b + 5 * VOC, sizeof(float) * VOC) != 0);
    CHECK(memcmp(a, b, sizeof(float) * 5 * VOC) == 0);
    pdl_seq_release(kv, &s1), pdl_seq_release(kv, &s2);
    /* negative components are refused */
    pos3[3 * 2 + 1] = -1;
    CHECK(pdl_seq_forward_rows(m, kv, &s2, ids, &in, N_PRE, PDL_LOGITS_ALL, b, &err) != 0);
    CHECK_CONTAINS(err.message, "row 2: M-RoPE position -1 of component 1 is negative");
    pdl_seq_release(kv, &s2);
    pdl_kv_cache_free(kv);
    pdl_model_free(m);

    /* a plain Qwen2 folder (no mrope_section) refuses them */
    char *dir = test_make_dir("qwen2-plain");
    char cfg[2048];
    snprintf(cfg, sizeof cfg, "%s", CONFIG);
    char *at = strstr(cfg, "\"rope_scaling\"");
    REQUIRE(at);
    memcpy(at, "\"rope_scalinX\"", 14); /* an unknown key: no rope scaling */
    write_folder(dir, cfg);
    REQUIRE_MSG(pdl_model_load(&m, dir, &mo, &err) == 0, "%s", err.message);
    REQUIRE(pdl_kv_cache_create(&kv, m, PDL_KV_F32, 16, 4, &err) == 0);
    for (int i = 0; i < N_PRE; i++) pos3[3 * i] = pos3[3 * i + 1] = pos3[3 * i + 2] = i;
    CHECK(pdl_seq_forward_rows(m, kv, &s1, ids, &in, N_PRE, PDL_LOGITS_ALL, b, &err) != 0);
    CHECK_CONTAINS(err.message, "no M-RoPE sections");
    pdl_seq_release(kv, &s1);
    pdl_kv_cache_free(kv);
    pdl_model_free(m);
    free(dir), free(a), free(b);
}

/* Sections that do not sum to rope_dim / 2 are refused at load, naming them. */
static void test_bad_sections_are_refused(void) {
    need_files();
    char *dir = test_make_dir("qwen25vl-bad-sections");
    char cfg[2048];
    snprintf(cfg, sizeof cfg, "%s", CONFIG);
    char *at = strstr(cfg, "[2, 3, 3]");
    REQUIRE(at);
    memcpy(at, "[2, 3, 4]", 9);
    write_folder(dir, cfg);
    pdl_error err = {0};
    pdl_model *m = NULL;
    pdl_model_options mo = {.n_threads = 1};
    CHECK(pdl_model_load(&m, dir, &mo, &err) != 0);
    CHECK_CONTAINS(err.message, "M-RoPE sections [2, 3, 4]");
    free(dir);
}

int main(void) {
    RUN(test_mrope_rows_match_the_float64_reference);
    RUN(test_equal_components_are_plain_rope);
    RUN(test_bad_sections_are_refused);
    for (int i = 0; i < n_specs; i++) free(specs[i].data);
    free(hf_dir);
    return test_summary();
}
