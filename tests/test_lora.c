/*
 * test_lora.c - LoRA adapters (src/model/lora.c) against a float64
 * reference: a random tiny Llama written as a Hugging Face folder, random
 * PEFT adapters written by the test (rank 4 on q, v, o, gate and down, B
 * nonzero), and every row's logits with the adapter compared with a plain
 * float64 forward (written here from transformers' modeling_llama.py, no
 * code shared with src/) whose weights are W + scale * B A, merged in
 * float64. Also: the rsLoRA and --lora-scale paths; a GGUF copy of the
 * model (Q/K permuted as llama.cpp's converter does) and llama.cpp LoRA
 * GGUF files (convert_lora_to_gguf.py's layout), each way round; a packed batch of rows
 * of two adapters and of none, in prefill chunks and decodes, bit-identical
 * to each sequence alone; the prefix cache never sharing blocks across
 * adapters or scales; the loader's refusals (DoRA, shapes, modules, rank).
 *
 * Tolerance: 5e-5 absolute on logits of magnitude ~1-10. The engine
 * computes in float32 (F32 weights and KV cache) and adds the delta as
 * scale * B (A x) rather than through merged weights; observed differences
 * from float64 are ~1e-6. The reference with the scale of the other
 * convention (alpha / sqrt(r) for alpha / r) lands orders of magnitude
 * outside the tolerance, so the comparison can fail.
 */
#define _POSIX_C_SOURCE 200809L
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu_features.h"
#include "model/lora.h"
#include "pagedlm.h"
#include "support/gguf_writer.h"
#include "support/st_writer.h"
#include "test_util.h"

#define TOL 5e-5

/* the tiny model */
enum { L = 2, H = 32, NH = 4, NKV = 2, HD = 8, FF = 48, V = 64, CTX = 64 };
#define EPS 1e-5
#define THETA 10000.0

/* modules in PEFT's names, in lora.h's order */
enum { M_Q, M_K, M_V, M_O, M_GATE, M_UP, M_DOWN, M_N };
static const char *const PEFT_NAMES[M_N] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                                            "self_attn.o_proj", "mlp.gate_proj",    "mlp.up_proj",
                                            "mlp.down_proj"};
static const char *const SHORT_NAMES[M_N] = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                             "down_proj"};
static const int OUT_DIM[M_N] = {NH * HD, NKV * HD, NKV * HD, H, FF, FF, H};
static const int IN_DIM[M_N] = {H, H, H, NH * HD, H, H, FF};

typedef struct model_w {
    float embd[V * H], norm[H], head[V * H];
    float in_norm[L][H], post_norm[L][H];
    float *w[L][M_N]; /* (out, in) */
} model_w;

typedef struct adapter {
    int rank;
    double scale;
    float *a[L][M_N], *b[L][M_N]; /* (rank, in), (out, rank); NULL: not targeted */
} adapter;

static uint64_t rng_state;
static float rnd(float amp) {
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return amp * (2.0f * (float)((rng_state >> 40) & 0xffffff) / 16777216.0f - 1.0f);
}
static float *rnd_vec(size_t n, float amp) {
    float *v = malloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++) v[i] = rnd(amp);
    return v;
}

static model_w W;
static char *model_dir;
static pdl_model *model;

static void write_model(void) {
    rng_state = 42;
    for (int i = 0; i < V * H; i++) W.embd[i] = rnd(1.0f), W.head[i] = rnd(0.3f);
    for (int i = 0; i < H; i++) W.norm[i] = 1.0f + rnd(0.1f);
    for (int l = 0; l < L; l++) {
        for (int i = 0; i < H; i++) W.in_norm[l][i] = 1.0f + rnd(0.1f), W.post_norm[l][i] = 1.0f + rnd(0.1f);
        for (int m = 0; m < M_N; m++) W.w[l][m] = rnd_vec((size_t)OUT_DIM[m] * IN_DIM[m], 0.3f);
    }
    model_dir = test_make_dir("base");
    char cfg[1024];
    snprintf(cfg, sizeof cfg,
             "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", \"vocab_size\": %d, "
             "\"hidden_size\": %d, \"intermediate_size\": %d, \"num_hidden_layers\": %d, \"num_attention_heads\": %d, "
             "\"num_key_value_heads\": %d, \"head_dim\": %d, \"max_position_embeddings\": %d, \"rms_norm_eps\": 1e-05, "
             "\"rope_theta\": 10000.0, \"hidden_act\": \"silu\", \"tie_word_embeddings\": false, "
             "\"bos_token_id\": 1, \"eos_token_id\": 2, \"torch_dtype\": \"float32\"}",
             V, H, FF, L, NH, NKV, HD, CTX);
    char *p = test_join(model_dir, "config.json");
    test_write_file(p, cfg, strlen(cfg));
    free(p);
    stw_writer *w = stw_new();
    int64_t sv[2] = {V, H}, sh[1] = {H};
    stw_add_f32(w, "model.embed_tokens.weight", 2, sv, W.embd);
    stw_add_f32(w, "lm_head.weight", 2, sv, W.head);
    stw_add_f32(w, "model.norm.weight", 1, sh, W.norm);
    char name[128];
    for (int l = 0; l < L; l++) {
        snprintf(name, sizeof name, "model.layers.%d.input_layernorm.weight", l);
        stw_add_f32(w, name, 1, sh, W.in_norm[l]);
        snprintf(name, sizeof name, "model.layers.%d.post_attention_layernorm.weight", l);
        stw_add_f32(w, name, 1, sh, W.post_norm[l]);
        for (int m = 0; m < M_N; m++) {
            int64_t s2[2] = {OUT_DIM[m], IN_DIM[m]};
            snprintf(name, sizeof name, "model.layers.%d.%s.weight", l, PEFT_NAMES[m]);
            stw_add_f32(w, name, 2, s2, W.w[l][m]);
        }
    }
    p = test_join(model_dir, "model.safetensors");
    REQUIRE(stw_write(w, p) == 0);
    free(p);
    stw_free(w);
}

/* A PEFT adapter folder: rank r on the modules of mask, alpha, rsLoRA,
 * extra JSON members for adapter_config.json (with a leading comma). */
static char *write_adapter(adapter *ad, const char *name, uint64_t seed, int r, double alpha, bool rslora,
                           unsigned mask, const char *extra) {
    memset(ad, 0, sizeof *ad);
    rng_state = seed;
    ad->rank = r;
    ad->scale = rslora ? alpha / sqrt(r) : alpha / r;
    char *dir = test_make_dir(name);
    char targets[256] = "";
    for (int m = 0; m < M_N; m++)
        if (mask & (1u << m))
            snprintf(targets + strlen(targets), sizeof targets - strlen(targets), "%s\"%s\"", targets[0] ? ", " : "",
                     SHORT_NAMES[m]);
    char cfg[1024];
    snprintf(cfg, sizeof cfg,
             "{\"peft_type\": \"LORA\", \"r\": %d, \"lora_alpha\": %g, \"use_rslora\": %s, \"target_modules\": [%s], "
             "\"lora_dropout\": 0.0, \"bias\": \"none\", \"use_dora\": false, \"modules_to_save\": null, "
             "\"rank_pattern\": {}, \"alpha_pattern\": {}, \"fan_in_fan_out\": false, \"task_type\": \"CAUSAL_LM\"%s}",
             r, alpha, rslora ? "true" : "false", targets, extra ? extra : "");
    char *p = test_join(dir, "adapter_config.json");
    test_write_file(p, cfg, strlen(cfg));
    free(p);
    stw_writer *w = stw_new();
    char tname[160];
    for (int l = 0; l < L; l++)
        for (int m = 0; m < M_N; m++) {
            if (!(mask & (1u << m))) continue;
            ad->a[l][m] = rnd_vec((size_t)r * IN_DIM[m], 0.3f);
            ad->b[l][m] = rnd_vec((size_t)OUT_DIM[m] * r, 0.3f);
            int64_t sa[2] = {r, IN_DIM[m]}, sb[2] = {OUT_DIM[m], r};
            snprintf(tname, sizeof tname, "base_model.model.model.layers.%d.%s.lora_A.weight", l, PEFT_NAMES[m]);
            stw_add_f32(w, tname, 2, sa, ad->a[l][m]);
            snprintf(tname, sizeof tname, "base_model.model.model.layers.%d.%s.lora_B.weight", l, PEFT_NAMES[m]);
            stw_add_f32(w, tname, 2, sb, ad->b[l][m]);
        }
    p = test_join(dir, "adapter_model.safetensors");
    REQUIRE(stw_write(w, p) == 0);
    free(p);
    stw_free(w);
    return dir;
}

static void adapter_free(adapter *ad) {
    for (int l = 0; l < L; l++)
        for (int m = 0; m < M_N; m++) free(ad->a[l][m]), free(ad->b[l][m]);
}

/* ---- the float64 reference (transformers' LlamaForCausalLM) ---------------------- */

/* W + scale * B A in float64; scale 0 or ad NULL: W */
static double *merged(int l, int m, const adapter *ad, double scale) {
    int out = OUT_DIM[m], in = IN_DIM[m];
    double *w = malloc((size_t)out * in * sizeof *w);
    for (int o = 0; o < out; o++)
        for (int i = 0; i < in; i++) {
            double d = 0;
            if (ad && ad->a[l][m])
                for (int k = 0; k < ad->rank; k++) d += (double)ad->b[l][m][o * ad->rank + k] * ad->a[l][m][k * in + i];
            w[(size_t)o * in + i] = W.w[l][m][(size_t)o * in + i] + scale * d;
        }
    return w;
}

static void matvec(const double *w, const double *x, int out, int in, double *y) {
    for (int o = 0; o < out; o++) {
        double s = 0;
        for (int i = 0; i < in; i++) s += w[(size_t)o * in + i] * x[i];
        y[o] = s;
    }
}

static void rmsnorm(const double *x, const float *w, double *out) {
    double ss = 0;
    for (int i = 0; i < H; i++) ss += x[i] * x[i];
    double r = 1.0 / sqrt(ss / H + EPS);
    for (int i = 0; i < H; i++) out[i] = x[i] * r * w[i];
}

/* rotate_half RoPE of one head at position pos */
static void rope(double *v, int pos) {
    for (int i = 0; i < HD / 2; i++) {
        double f = pow(THETA, -2.0 * i / HD), c = cos(pos * f), s = sin(pos * f);
        double a = v[i], b = v[i + HD / 2];
        v[i] = a * c - b * s;
        v[i + HD / 2] = b * c + a * s;
    }
}

/* logits (n, V) of tokens with the adapter merged at scale (ad NULL: base) */
static double *reference(const int32_t *tok, int n, const adapter *ad, double scale) {
    double *x = calloc((size_t)n * H, sizeof *x), *out = calloc((size_t)n * V, sizeof *out);
    double *K = malloc((size_t)n * NKV * HD * sizeof *K), *Vv = malloc((size_t)n * NKV * HD * sizeof *Vv);
    double *Q = malloc((size_t)n * NH * HD * sizeof *Q), *att = malloc((size_t)NH * HD * sizeof *att);
    double h[FF > H ? FF : H], g[FF], u[FF], o[H], sc[CTX];
    for (int t = 0; t < n; t++)
        for (int i = 0; i < H; i++) x[t * H + i] = W.embd[tok[t] * H + i];
    for (int l = 0; l < L; l++) {
        double *w[M_N];
        for (int m = 0; m < M_N; m++) w[m] = merged(l, m, ad, scale);
        for (int t = 0; t < n; t++) {
            rmsnorm(x + t * H, W.in_norm[l], h);
            matvec(w[M_Q], h, NH * HD, H, Q + t * NH * HD);
            matvec(w[M_K], h, NKV * HD, H, K + t * NKV * HD);
            matvec(w[M_V], h, NKV * HD, H, Vv + t * NKV * HD);
            for (int hh = 0; hh < NH; hh++) rope(Q + t * NH * HD + hh * HD, t);
            for (int hh = 0; hh < NKV; hh++) rope(K + t * NKV * HD + hh * HD, t);
        }
        for (int t = 0; t < n; t++) {
            for (int hh = 0; hh < NH; hh++) {
                int kh = hh / (NH / NKV);
                double mx = -INFINITY, sum = 0;
                for (int s = 0; s <= t; s++) {
                    double d = 0;
                    for (int i = 0; i < HD; i++) d += Q[t * NH * HD + hh * HD + i] * K[s * NKV * HD + kh * HD + i];
                    sc[s] = d / sqrt((double)HD);
                    mx = sc[s] > mx ? sc[s] : mx;
                }
                for (int s = 0; s <= t; s++) sum += sc[s] = exp(sc[s] - mx);
                for (int i = 0; i < HD; i++) {
                    double a = 0;
                    for (int s = 0; s <= t; s++) a += sc[s] / sum * Vv[s * NKV * HD + kh * HD + i];
                    att[hh * HD + i] = a;
                }
            }
            matvec(w[M_O], att, H, NH * HD, o);
            for (int i = 0; i < H; i++) x[t * H + i] += o[i];
        }
        for (int t = 0; t < n; t++) {
            rmsnorm(x + t * H, W.post_norm[l], h);
            matvec(w[M_GATE], h, FF, H, g);
            matvec(w[M_UP], h, FF, H, u);
            for (int i = 0; i < FF; i++) g[i] = g[i] / (1 + exp(-g[i])) * u[i];
            matvec(w[M_DOWN], g, H, FF, o);
            for (int i = 0; i < H; i++) x[t * H + i] += o[i];
        }
        for (int m = 0; m < M_N; m++) free(w[m]);
    }
    for (int t = 0; t < n; t++) {
        rmsnorm(x + t * H, W.norm, h);
        for (int v = 0; v < V; v++) {
            double s = 0;
            for (int i = 0; i < H; i++) s += (double)W.head[v * H + i] * h[i];
            out[t * V + v] = s;
        }
    }
    free(x), free(K), free(Vv), free(Q), free(att);
    return out;
}

/* ---- the engine's side ------------------------------------------------------------- */

static const int32_t TOKENS[24] = {1, 17, 5, 33, 60, 2, 9, 41, 12, 12, 50, 7, 3, 28, 44, 19, 63, 0, 8, 25, 36, 14, 55, 30};
#define N_TOK 24

static pdl_lora *load_lora(const char *dir) {
    pdl_lora *l = NULL;
    pdl_error err;
    REQUIRE_MSG(pdl_lora_load(&l, model, dir, &err) == 0, "%s", err.message);
    return l;
}

/* every row's logits of tokens through model m, alone, with lora at scale (0 = 1) */
static float *model_logits(pdl_model *m, const int32_t *tok, int n, const pdl_lora *lora, float scale) {
    pdl_context *ctx = test_context(m);
    pdl_kv_cache *kv = NULL;
    pdl_error err;
    REQUIRE_MSG(pdl_kv_cache_create(&kv, m, PDL_KV_F32, 4, CTX / 4, &err) == 0, "%s", err.message);
    float *logits = malloc((size_t)n * V * sizeof *logits);
    pdl_seq seq = {.lora = lora, .lora_scale = scale};
    int rc = pdl_seq_forward(ctx, kv, &seq, tok, NULL, n, PDL_LOGITS_ALL, logits, &err);
    REQUIRE_MSG(rc == 0, "%s", err.message);
    pdl_seq_release(kv, &seq);
    pdl_kv_cache_free(kv);
    pdl_context_free(ctx);
    return logits;
}

static float *engine_logits(const int32_t *tok, int n, const pdl_lora *lora, float scale) {
    return model_logits(model, tok, n, lora, scale);
}

static double max_diff(const float *a, const double *b, size_t n) {
    double d = 0;
    for (size_t i = 0; i < n; i++) d = fmax(d, fabs((double)a[i] - b[i]));
    return d;
}

static const unsigned MASK_QVOGD = 1u << M_Q | 1u << M_V | 1u << M_O | 1u << M_GATE | 1u << M_DOWN;

static void test_peft_against_reference(void) {
    adapter ad;
    char *dir = write_adapter(&ad, "ad1", 7, 4, 8.0, false, MASK_QVOGD, NULL);
    pdl_lora *lora = load_lora(dir);
    pdl_lora_info info;
    pdl_lora_get_info(lora, &info);
    CHECK_EQ_INT(info.rank, 4);
    CHECK(fabs(info.scale - 2.0f) < 1e-7);
    CHECK_EQ_INT(info.n_pairs, 5 * L);
    CHECK_CONTAINS(info.modules, "q,v,o,gate,down");

    float *base = engine_logits(TOKENS, N_TOK, NULL, 0);
    double *ref_base = reference(TOKENS, N_TOK, NULL, 0);
    double d_base = max_diff(base, ref_base, (size_t)N_TOK * V);
    float *got = engine_logits(TOKENS, N_TOK, lora, 0);
    double *ref = reference(TOKENS, N_TOK, &ad, ad.scale);
    double d = max_diff(got, ref, (size_t)N_TOK * V);
    double changed = max_diff(got, ref_base, (size_t)N_TOK * V);
    /* the other convention's scale (alpha / sqrt(r) = 4) must be far off */
    double *wrong = reference(TOKENS, N_TOK, &ad, 8.0 / sqrt(4.0));
    double d_wrong = max_diff(got, wrong, (size_t)N_TOK * V);
    printf("  base vs float64 %.2e; adapter vs float64 %.2e; adapter vs base %.2f; vs wrong scale %.2f\n", d_base, d,
           changed, d_wrong);
    CHECK(d_base < TOL);
    CHECK(d < TOL);
    CHECK(changed > 0.1);      /* the adapter does change the logits */
    CHECK(d_wrong > 100 * TOL); /* a scale mistake would be caught */

    /* --lora-scale 0.5: half the delta */
    float *half = engine_logits(TOKENS, N_TOK, lora, 0.5f);
    double *ref_half = reference(TOKENS, N_TOK, &ad, ad.scale * 0.5);
    double dh = max_diff(half, ref_half, (size_t)N_TOK * V);
    printf("  scale 0.5 vs float64 %.2e\n", dh);
    CHECK(dh < TOL);
    free(half), free(ref_half);
    free(base), free(ref_base), free(got), free(ref), free(wrong);
    pdl_lora_free(lora);
    adapter_free(&ad);
    free(dir);
}

static void test_rslora_and_all_modules(void) {
    adapter ad;
    char *dir = write_adapter(&ad, "ad_rs", 11, 4, 6.0, true, 0x7f, NULL);
    pdl_lora *lora = load_lora(dir);
    pdl_lora_info info;
    pdl_lora_get_info(lora, &info);
    CHECK(fabs(info.scale - 3.0f) < 1e-7); /* 6 / sqrt(4) */
    float *got = engine_logits(TOKENS, N_TOK, lora, 0);
    double *ref = reference(TOKENS, N_TOK, &ad, ad.scale);
    double *wrong = reference(TOKENS, N_TOK, &ad, 6.0 / 4);
    double d = max_diff(got, ref, (size_t)N_TOK * V), dw = max_diff(got, wrong, (size_t)N_TOK * V);
    printf("  rsLoRA, all seven modules: vs float64 %.2e, vs alpha / r %.2f\n", d, dw);
    CHECK(d < TOL);
    CHECK(dw > 100 * TOL);
    free(got), free(ref), free(wrong);
    pdl_lora_free(lora);
    adapter_free(&ad);
    free(dir);
}

/* `pagedlm logits --lora DIR --lora-scale S`: the library's bytes (%.9g
 * round-trips a float), and an adapter that does not load is an error. */
static void test_cli_logits_lora(void) {
    adapter ad;
    char *dir = write_adapter(&ad, "cli", 51, 4, 8.0, false, MASK_QVOGD, NULL);
    pdl_lora *lora = load_lora(dir);
    float *want = engine_logits(TOKENS, 8, lora, 0.5f);
    char args[4096];
    snprintf(args, sizeof args, "logits -m '%s' --tokens 1,17,5,33,60,2,9,41 --kv-cache-dtype f32 --lora '%s' "
             "--lora-scale 0.5 --all-rows", model_dir, dir);
    cmd_result r = test_pagedlm(args);
    CHECK_EQ_INT(r.status, 0);
    json_t *o = json_loads(r.out ? r.out : "", 0, NULL);
    const json_t *rows = json_object_get(o, "logits");
    CHECK_EQ_INT(json_array_size(rows), 8);
    int differ = 0;
    for (size_t i = 0; i < json_array_size(rows) && i < 8; i++)
        for (int v = 0; v < V; v++)
            differ += (float)json_number_value(json_array_get(json_array_get(rows, i), (size_t)v)) != want[i * V + v];
    CHECK_EQ_INT(differ, 0);
    json_decref(o);
    test_free_result(&r);
    snprintf(args, sizeof args, "logits -m '%s' --tokens 1,17 --lora '%s/missing'", model_dir, dir);
    r = test_pagedlm(args);
    CHECK_EQ_INT(r.status, 1);
    CHECK_CONTAINS(r.err, "no such file or folder");
    test_free_result(&r);
    free(want);
    pdl_lora_free(lora);
    adapter_free(&ad);
    free(dir);
}

/* ---- the packed batch ---------------------------------------------------------------- */

/* Three sequences (adapter 1, adapter 2, none) packed into steps of
 * different chunks: row by row the same bytes as each sequence alone. */
static void test_mixed_batch_bit_identical(void) {
    adapter a1, a2;
    char *d1 = write_adapter(&a1, "mix1", 21, 4, 8.0, false, MASK_QVOGD, NULL);
    char *d2 = write_adapter(&a2, "mix2", 22, 4, 4.0, false, 1u << M_K | 1u << M_UP | 1u << M_O, NULL);
    pdl_lora *l1 = load_lora(d1), *l2 = load_lora(d2);
    const pdl_lora *lora[3] = {l1, l2, NULL};
    float scale[3] = {1.0f, 0.75f, 1.0f};
    int32_t toks[3][N_TOK];
    for (int s = 0; s < 3; s++)
        for (int i = 0; i < N_TOK; i++) toks[s][i] = TOKENS[(i * (s + 1) + s) % N_TOK];
    float *alone[3];
    for (int s = 0; s < 3; s++) alone[s] = engine_logits(toks[s], N_TOK, lora[s], scale[s]);
    /* the rows each step runs of each sequence: prefill chunks, then decodes */
    static const int steps[][3] = {{5, 3, 9}, {7, 1, 1}, {1, 9, 1}, {1, 1, 6}, {4, 1, 1}, {1, 5, 1},
                                   {1, 1, 1}, {4, 4, 5}};
    int n_steps = (int)(sizeof steps / sizeof steps[0]);
    pdl_context *ctx = test_context(model);
    pdl_kv_cache *kv = NULL;
    pdl_error err;
    enum { BS = 4, BPS = CTX / BS }; /* blocks per sequence */
    REQUIRE_MSG(pdl_kv_cache_create(&kv, model, PDL_KV_F32, BS, 3 * BPS, &err) == 0, "%s", err.message);
    int32_t tables[3][BPS];
    for (int s = 0; s < 3; s++) /* interleaved blocks */
        for (int b = 0; b < BPS; b++) tables[s][b] = 3 * b + (2 - s);
    const int32_t *bt[3] = {tables[0], tables[1], tables[2]};
    int done[3] = {0, 0, 0};
    int mismatches = 0;
    for (int st = 0; st < n_steps; st++) {
        int32_t ids[3 * N_TOK], pos[3 * N_TOK], slots[3 * N_TOK], rows[3 * N_TOK], cu[4] = {0};
        const pdl_lora *bl[3];
        float bsc[3];
        int n = 0, ns = 0, first[3], who[3];
        for (int s = 0; s < 3; s++) {
            int k = steps[st][s];
            if (done[s] + k > N_TOK) k = N_TOK - done[s];
            if (k <= 0) continue;
            first[ns] = done[s], who[ns] = s;
            for (int i = 0; i < k; i++, n++) {
                int p = done[s] + i;
                ids[n] = toks[s][p], pos[n] = p, slots[n] = tables[s][p / BS] * BS + p % BS, rows[n] = n;
            }
            bl[ns] = lora[s], bsc[ns] = scale[s];
            done[s] += k;
            cu[++ns] = n;
        }
        if (ns == 0) break;
        const int32_t *tabs[3];
        for (int i = 0; i < ns; i++) tabs[i] = bt[who[i]];
        pdl_batch b = {.n_tokens = n, .token_ids = ids, .positions = pos, .slot_mapping = slots, .n_seqs = ns,
                       .cu_seqlens = cu, .block_tables = tabs, .n_logits = n, .logits_indices = rows,
                       .lora = bl, .lora_scale = bsc};
        float *out = malloc((size_t)n * V * sizeof *out);
        REQUIRE_MSG(pdl_forward(ctx, kv, &b, out, &err) == 0, "%s", err.message);
        for (int i = 0; i < ns; i++)
            for (int r = cu[i]; r < cu[i + 1]; r++)
                if (memcmp(out + (size_t)r * V, alone[who[i]] + (size_t)(first[i] + r - cu[i]) * V, V * sizeof *out))
                    mismatches++;
        free(out);
    }
    CHECK_EQ_INT(done[0] + done[1] + done[2], 3 * N_TOK);
    CHECK_EQ_INT(mismatches, 0);
    /* and the three differ from each other: the adapters did apply */
    float *base = engine_logits(toks[0], N_TOK, NULL, 0);
    CHECK(memcmp(alone[0], base, (size_t)N_TOK * V * sizeof(float)) != 0);
    free(base);
    pdl_kv_cache_free(kv);
    pdl_context_free(ctx);
    for (int s = 0; s < 3; s++) free(alone[s]);
    pdl_lora_free(l1), pdl_lora_free(l2);
    adapter_free(&a1), adapter_free(&a2);
    free(d1), free(d2);
}

/* ---- the prefix cache ---------------------------------------------------------------- */

typedef struct finish_info {
    int cached;
    int32_t first_token;
} finish_info;

static void on_event(const pdl_event *ev, void *user) {
    finish_info *f = user;
    if (ev->kind == PDL_EVENT_TOKEN && f->first_token < 0) f->first_token = ev->token;
    if (ev->kind == PDL_EVENT_FINISHED) f->cached = ev->cached_tokens;
}

static finish_info run_request(pdl_engine *e, pdl_lora *lora, float scale) {
    finish_info f = {-1, -1};
    pdl_request_params p = {.max_tokens = 1, .logprobs = -1, .prompt_logprobs = -1, .lora = lora,
                            .lora_scale = scale};
    pdl_error err;
    REQUIRE_MSG(pdl_engine_add_request(e, TOKENS, N_TOK, &p, on_event, &f, NULL, &err) == 0, "%s", err.message);
    REQUIRE_MSG(pdl_engine_run_until_idle(e, &err) == 0, "%s", err.message);
    return f;
}

static void test_prefix_cache_keeps_adapters_apart(void) {
    adapter a1, a2;
    char *d1 = write_adapter(&a1, "pc1", 31, 4, 8.0, false, MASK_QVOGD, NULL);
    char *d2 = write_adapter(&a2, "pc2", 32, 4, 8.0, false, MASK_QVOGD, NULL);
    pdl_lora *l1 = load_lora(d1), *l2 = load_lora(d2), *l1_again = load_lora(d1);
    pdl_engine *e = NULL;
    pdl_error err;
    pdl_engine_options o = {.block_size = 4, .kv_cache_memory = 1 << 20, .kv_dtype = PDL_KV_F32};
    REQUIRE_MSG(pdl_engine_create(&e, model, &o, &err) == 0, "%s", err.message);
    finish_info f;
    f = run_request(e, l1, 0);
    CHECK_EQ_INT(f.cached, 0);
    f = run_request(e, l2, 0); /* another adapter: nothing shared */
    CHECK_EQ_INT(f.cached, 0);
    f = run_request(e, NULL, 0); /* no adapter: nothing shared */
    CHECK_EQ_INT(f.cached, 0);
    f = run_request(e, l1, 0.5f); /* the same adapter at another scale: nothing shared */
    CHECK_EQ_INT(f.cached, 0);
    f = run_request(e, l1_again, 1.0f); /* the same adapter loaded again, scale 1 (= 0): a hit */
    CHECK(f.cached >= 20);
    f = run_request(e, l2, 0);
    CHECK(f.cached >= 20);
    /* the engine's reference keeps an adapter alive after the caller's is dropped */
    pdl_lora *l3 = load_lora(d2);
    finish_info g = {-1, -1};
    pdl_request_params p = {.max_tokens = 2, .logprobs = -1, .prompt_logprobs = -1, .lora = l3};
    REQUIRE_MSG(pdl_engine_add_request(e, TOKENS, 5, &p, on_event, &g, NULL, &err) == 0, "%s", err.message);
    pdl_lora_free(l3);
    REQUIRE_MSG(pdl_engine_run_until_idle(e, &err) == 0, "%s", err.message);
    CHECK(g.first_token >= 0);
    pdl_engine_free(e);
    pdl_lora_free(l1), pdl_lora_free(l2), pdl_lora_free(l1_again);
    adapter_free(&a1), adapter_free(&a2);
    free(d1), free(d2);
}

/* ---- GGUF: a llama.cpp base model and llama.cpp LoRA files ---------------------------- */

/* Rows of a Q or K matrix (heads of HD rows, `cols` wide) in llama.cpp's
 * converter's order (its permute: adjacent RoPE pairs), out of place. */
static float *gguf_permuted(const float *w, int heads, int cols) {
    float *o = malloc((size_t)heads * HD * cols * sizeof *o);
    for (int h = 0; h < heads; h++)
        for (int j = 0; j < 2; j++)
            for (int i = 0; i < HD / 2; i++)
                memcpy(o + ((size_t)h * HD + 2 * i + j) * cols, w + ((size_t)h * HD + j * HD / 2 + i) * cols,
                       (size_t)cols * sizeof *o);
    return o;
}

static const char *const GGUF_NAMES[M_N] = {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up",
                                            "ffn_down"};

/* The base model as llama.cpp's converter writes a Llama (Q and K permuted). */
static char *write_gguf_model(void) {
    gguf_writer *gw = gguf_writer_new(3);
    gguf_writer_add_str(gw, "general.architecture", "llama");
    gguf_writer_add_u32(gw, "llama.context_length", CTX);
    gguf_writer_add_u32(gw, "llama.embedding_length", H);
    gguf_writer_add_u32(gw, "llama.feed_forward_length", FF);
    gguf_writer_add_u32(gw, "llama.block_count", L);
    gguf_writer_add_u32(gw, "llama.attention.head_count", NH);
    gguf_writer_add_u32(gw, "llama.attention.head_count_kv", NKV);
    gguf_writer_add_u32(gw, "llama.rope.dimension_count", HD);
    gguf_writer_add_f32(gw, "llama.rope.freq_base", (float)THETA);
    gguf_writer_add_f32(gw, "llama.attention.layer_norm_rms_epsilon", (float)EPS);
    int64_t sv[2] = {V, H}, sh[1] = {H};
    gguf_writer_add_tensor_f32(gw, "token_embd.weight", 2, sv, W.embd);
    gguf_writer_add_tensor_f32(gw, "output.weight", 2, sv, W.head);
    gguf_writer_add_tensor_f32(gw, "output_norm.weight", 1, sh, W.norm);
    char name[128];
    for (int l = 0; l < L; l++) {
        snprintf(name, sizeof name, "blk.%d.attn_norm.weight", l);
        gguf_writer_add_tensor_f32(gw, name, 1, sh, W.in_norm[l]);
        snprintf(name, sizeof name, "blk.%d.ffn_norm.weight", l);
        gguf_writer_add_tensor_f32(gw, name, 1, sh, W.post_norm[l]);
        for (int m = 0; m < M_N; m++) {
            int64_t s2[2] = {OUT_DIM[m], IN_DIM[m]};
            float *w = m == M_Q || m == M_K ? gguf_permuted(W.w[l][m], m == M_Q ? NH : NKV, IN_DIM[m]) : W.w[l][m];
            snprintf(name, sizeof name, "blk.%d.%s.weight", l, GGUF_NAMES[m]);
            gguf_writer_add_tensor_f32(gw, name, 2, s2, w);
            if (w != W.w[l][m]) free(w);
        }
    }
    char *path = test_tmp_path("base.gguf");
    REQUIRE(gguf_writer_write(gw, path) == 0);
    gguf_writer_free(gw);
    return path;
}

/* The adapter as convert_lora_to_gguf.py writes it: lora_a (r, in) and
 * lora_b (out, r), lora_b of Q and K permuted as the base model's rows. */
static char *write_gguf_adapter(const adapter *ad, const char *file, double alpha) {
    gguf_writer *gw = gguf_writer_new(3);
    gguf_writer_add_str(gw, "general.architecture", "llama");
    gguf_writer_add_str(gw, "general.type", "adapter");
    gguf_writer_add_str(gw, "adapter.type", "lora");
    gguf_writer_add_f32(gw, "adapter.lora.alpha", (float)alpha);
    char name[128];
    for (int l = 0; l < L; l++)
        for (int m = 0; m < M_N; m++) {
            if (!ad->a[l][m]) continue;
            int64_t sa[2] = {ad->rank, IN_DIM[m]}, sb[2] = {OUT_DIM[m], ad->rank};
            snprintf(name, sizeof name, "blk.%d.%s.weight.lora_a", l, GGUF_NAMES[m]);
            gguf_writer_add_tensor_f32(gw, name, 2, sa, ad->a[l][m]);
            float *b = m == M_Q || m == M_K ? gguf_permuted(ad->b[l][m], m == M_Q ? NH : NKV, ad->rank) : ad->b[l][m];
            snprintf(name, sizeof name, "blk.%d.%s.weight.lora_b", l, GGUF_NAMES[m]);
            gguf_writer_add_tensor_f32(gw, name, 2, sb, b);
            if (b != ad->b[l][m]) free(b);
        }
    char *path = test_tmp_path(file);
    REQUIRE(gguf_writer_write(gw, path) == 0);
    gguf_writer_free(gw);
    return path;
}

/* PEFT and llama.cpp adapters on a Hugging Face and on a GGUF base: Q/K
 * rows permuted where the two layouts differ, all four against float64. */
static void test_gguf_models_and_adapters(void) {
    adapter ad;
    char *dir = write_adapter(&ad, "gg", 41, 4, 8.0, false, 1u << M_Q | 1u << M_K | 1u << M_V | 1u << M_DOWN, NULL);
    char *gpath = write_gguf_model(), *apath = write_gguf_adapter(&ad, "adapter.gguf", 8.0);
    pdl_model *gm = NULL;
    pdl_error err;
    pdl_model_options o = {.n_threads = 2};
    REQUIRE_MSG(pdl_model_load(&gm, gpath, &o, &err) == 0, "%s", err.message);
    double *ref = reference(TOKENS, N_TOK, &ad, ad.scale);
    struct {
        pdl_model *m;
        const char *path, *what;
    } cases[] = {{model, dir, "PEFT on HF"}, {gm, dir, "PEFT on GGUF"}, {model, apath, "GGUF adapter on HF"},
                 {gm, apath, "GGUF adapter on GGUF"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pdl_lora *l = NULL;
        REQUIRE_MSG(pdl_lora_load(&l, cases[i].m, cases[i].path, &err) == 0, "%s", err.message);
        float *got = model_logits(cases[i].m, TOKENS, N_TOK, l, 0);
        double d = max_diff(got, ref, (size_t)N_TOK * V);
        printf("  %s: vs float64 %.2e\n", cases[i].what, d);
        CHECK(d < TOL);
        free(got);
        pdl_lora_free(l);
    }
    /* a llama.cpp adapter file without alpha: scale 1 (llama.cpp's rule) */
    char *a1 = write_gguf_adapter(&ad, "adapter_noalpha.gguf", 0);
    pdl_lora *l = NULL;
    REQUIRE_MSG(pdl_lora_load(&l, gm, a1, &err) == 0, "%s", err.message);
    pdl_lora_info info;
    pdl_lora_get_info(l, &info);
    CHECK(info.scale == 1.0f);
    pdl_lora_free(l);
    /* a model file is not an adapter */
    CHECK(pdl_lora_load(&l, gm, gpath, &err) != 0);
    CHECK_CONTAINS(err.message, "not \"adapter\"");
    pdl_model_free(gm);
    free(ref), free(gpath), free(apath), free(a1), free(dir);
    adapter_free(&ad);
}

/* ---- the row kernel's builds ------------------------------------------------------------ */

/* Every instruction set's build of the row delta gives the portable build's
 * bytes, at odd sizes (tails) and at a real model's. */
static void test_row_kernels_match_portable(void) {
    static const int sizes[][3] = {{37, 29, 5}, {1024, 3072, 16}, {3072, 1024, 16}, {64, 17, 1}, {16, 16, 64}};
    static const pdl_isa isas[] = {PDL_ISA_AVX2, PDL_ISA_AVX512, PDL_ISA_NEON};
    int tried = 0;
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        int in = sizes[k][0], out = sizes[k][1], rank = sizes[k][2];
        rng_state = 99 + k;
        float *a = rnd_vec((size_t)rank * in, 0.3f), *bt = rnd_vec((size_t)rank * out, 0.3f);
        float *x = rnd_vec((size_t)in, 1.0f), *y0 = rnd_vec((size_t)out, 1.0f);
        float *want = malloc((size_t)out * sizeof *want), *got = malloc((size_t)out * sizeof *got);
        lora_pair pr = {.a = a, .bt = bt, .in = in, .out = out};
        memcpy(want, y0, (size_t)out * sizeof *want);
        lora_row_portable(&pr, rank, 0.7f, x, want);
        for (size_t i = 0; i < sizeof isas / sizeof isas[0]; i++) {
            if (!cpu_isa_supported(isas[i])) continue;
            memcpy(got, y0, (size_t)out * sizeof *got);
            lora_row_for(isas[i])(&pr, rank, 0.7f, x, got);
            CHECK(memcmp(got, want, (size_t)out * sizeof *got) == 0);
            tried++;
        }
        CHECK(memcmp(want, y0, (size_t)out * sizeof *want) != 0);
        free(a), free(bt), free(x), free(y0), free(want), free(got);
    }
    printf("  %d instruction-set builds compared with the portable one\n", tried);
}

/* ---- refusals ---------------------------------------------------------------------- */

static void expect_load_error(const char *dir, const char *needle) {
    pdl_lora *l = NULL;
    pdl_error err = {0};
    CHECK(pdl_lora_load(&l, model, dir, &err) != 0);
    CHECK(l == NULL);
    CHECK_CONTAINS(err.message, needle);
}

static void write_raw_adapter(const char *dir, const char *cfg, const char *const *names, const int64_t (*shapes)[2],
                              int n) {
    char *p = test_join(dir, "adapter_config.json");
    test_write_file(p, cfg, strlen(cfg));
    free(p);
    stw_writer *w = stw_new();
    for (int i = 0; i < n; i++) {
        float *z = calloc((size_t)(shapes[i][0] * shapes[i][1]), sizeof *z);
        stw_add_f32(w, names[i], 2, shapes[i], z);
        free(z);
    }
    p = test_join(dir, "adapter_model.safetensors");
    REQUIRE(stw_write(w, p) == 0);
    free(p);
    stw_free(w);
}

static void test_refusals(void) {
    adapter ad;
    char *dir = write_adapter(&ad, "dora", 5, 4, 8.0, false, 1u << M_Q, ", \"use_dora\": true");
    expect_load_error(dir, "DoRA");
    adapter_free(&ad), free(dir);
    dir = write_adapter(&ad, "mts", 5, 4, 8.0, false, 1u << M_Q, ", \"modules_to_save\": [\"lm_head\"]");
    expect_load_error(dir, "modules_to_save");
    adapter_free(&ad), free(dir);
    dir = write_adapter(&ad, "rp", 5, 4, 8.0, false, 1u << M_Q, ", \"rank_pattern\": {\"q_proj\": 8}");
    expect_load_error(dir, "rank_pattern");
    adapter_free(&ad), free(dir);

    const char *cfg = "{\"peft_type\": \"LORA\", \"r\": 4, \"lora_alpha\": 8}";
    char *d = test_make_dir("bad_shape"); /* q_proj's A as wide as k's output */
    const char *n1[] = {"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight",
                        "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight"};
    const int64_t s1[][2] = {{4, H + 1}, {NH * HD, 4}};
    write_raw_adapter(d, cfg, n1, s1, 2);
    expect_load_error(d, "q_proj.lora_A.weight");
    free(d);
    d = test_make_dir("bad_rank");
    const int64_t s2[][2] = {{4, H}, {NH * HD, 3}};
    write_raw_adapter(d, cfg, n1, s2, 2);
    expect_load_error(d, "rank");
    free(d);
    d = test_make_dir("no_b");
    write_raw_adapter(d, cfg, n1, s1, 1);
    expect_load_error(d, "no lora_B");
    free(d);
    d = test_make_dir("head");
    const char *n3[] = {"base_model.model.lm_head.lora_A.weight"};
    const int64_t s3[][2] = {{4, H}};
    write_raw_adapter(d, cfg, n3, s3, 1);
    expect_load_error(d, "lm_head");
    free(d);
    d = test_make_dir("layer");
    const char *n4[] = {"base_model.model.model.layers.9.self_attn.q_proj.lora_A.weight"};
    write_raw_adapter(d, cfg, n4, s3, 1);
    expect_load_error(d, "layer 9");
    free(d);
    d = test_make_dir("empty");
    expect_load_error(d, "adapter_config.json");
    free(d);
}

int main(void) {
    write_model();
    pdl_error err;
    pdl_model_options o = {.n_threads = 2};
    REQUIRE_MSG(pdl_model_load(&model, model_dir, &o, &err) == 0, "%s", err.message);
    RUN(test_peft_against_reference);
    RUN(test_rslora_and_all_modules);
    RUN(test_cli_logits_lora);
    RUN(test_mixed_batch_bit_identical);
    RUN(test_prefix_cache_keeps_adapters_apart);
    RUN(test_gguf_models_and_adapters);
    RUN(test_row_kernels_match_portable);
    RUN(test_refusals);
    pdl_model_free(model);
    for (int l = 0; l < L; l++)
        for (int m = 0; m < M_N; m++) free(W.w[l][m]);
    free(model_dir);
    return test_summary();
}
