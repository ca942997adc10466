/*
 * test_yarn_reference.c - YaRN RoPE scaling against a float64 forward and
 * frequency table written from the published description: the YaRN paper
 * (arXiv 2309.00071) as its authors' code states it (jquesnelle/yarn, which
 * transformers' _compute_yarn_parameters and llama.cpp's rope_yarn follow;
 * the checkpoints were trained with it). Per rotary pair i of d dimensions,
 * base frequency b_i = theta^(-2i/d):
 *
 *   the pair turning n times over the original context L sits at
 *     p(n) = d ln(L / (2 pi n)) / (2 ln theta)
 *   lo = p(beta_fast), hi = p(beta_slow), rounded out to whole pairs unless
 *     the config says truncate: false, clamped to [0, d - 1]
 *   ramp r_i = clamp((i - lo) / (hi - lo), 0, 1)
 *   frequency_i = b_i (1 - r_i) + (b_i / factor) r_i
 *   cos and sin times the attention factor (0.1 ln factor + 1 unless given)
 *
 * (The paper writes its ramp gamma over the turn count n; the code, and so
 * every checkpoint, runs it linearly over the pair index between the two
 * pairs, as above.)
 *
 * ../shared holds no YaRN model, so each test makes a random-weight tiny
 * Qwen3 (per-head q/k RMSNorm, rotate-half RoPE, GQA), writes it as a
 * Hugging Face folder and as a GGUF file laid out as llama.cpp's converter
 * writes Qwen3 (rope.scaling.* keys), and compares the engine's all-row
 * logits over a 240-token prompt, whose positions run to almost 4 times the
 * original 64-token context, and then a greedy continuation through the
 * decode path, with the reference below (no code shared with src/).
 *
 * Tolerance: 2e-5 absolute on logits of magnitude ~1-5. The engine keeps
 * the frequency table in float32, as transformers does (relative rounding
 * 6e-8: at position 250 an angle off by up to 1.5e-5 rad) and computes in
 * float32; the largest difference observed is 4.9e-6 (printed per run).
 * Each comparison also runs the
 * reference with one thing wrong (the ramp reversed, no attention factor,
 * the factor not applied, the ramp's ends not rounded) and requires that
 * variant to land over 100x the tolerance away, so the comparison can fail.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "pagedlm.h"
#include "support/gguf_writer.h"
#include "support/st_writer.h"
#include "test_util.h"

#define TOL 2e-5
#define PROMPT 240 /* positions 0..239 over an original context of 64 */
#define STEPS 8    /* greedy tokens after it */

/* One deliberate mistake in the reference, to show the comparison can fail. */
typedef enum ref_bug {
    BUG_NONE,
    BUG_RAMP_REVERSED, /* the slow pairs kept and the fast ones divided (1 - r for r) */
    BUG_NO_ATTN,       /* cos and sin not multiplied by the attention factor */
    BUG_NO_FACTOR,     /* no pair divided by the factor (plain RoPE, attention factor kept) */
    BUG_TRUNCATE_FLIP, /* the ramp's ends rounded where they must not be, or the reverse */
} ref_bug;

typedef struct spec {
    int layers, hidden, heads, kv_heads, head_dim, ffn, vocab, max_pos;
    double theta, eps;
    double factor;              /* 0: absent from config.json (max_position_embeddings / original) */
    int orig;                   /* original context */
    double beta_fast, beta_slow; /* 0: absent from the files (32 and 1) */
    double attn;                /* 0: absent (0.1 ln factor + 1) */
    bool no_truncate;           /* HF "truncate": false (gpt-oss); GGUF cannot say it */
    bool rope_parameters;       /* transformers 5's rope_parameters instead of rope_scaling */
    bool old_type_key;          /* "type": "yarn" instead of "rope_type" */
    double mscale, mscale_all;  /* HF DeepSeek-style pair; 0: absent */
    double gguf_log_mul;        /* GGUF rope.scaling.yarn_log_multiplier; 0: absent */
    double gguf_ext;            /* GGUF rope.scaling.yarn_ext_factor; 0: absent */
    double gguf_attn_mult;      /* GGUF rope.scaling.attn_factor; 0: absent */
} spec;

typedef struct layer_w {
    float *in_norm, *post_norm, *q_norm, *k_norm, *wq, *wk, *wv, *wo, *wg, *wu, *wd;
} layer_w;

typedef struct weights {
    float *embed, *final_norm, *lm_head;
    layer_w *l;
} weights;

/* ---- random weights -------------------------------------------------------- */

static uint64_t rng_state;
static double urand(void) { /* uniform in [-1, 1) */
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

static float *rand_vec(size_t n, double center, double spread) {
    float *v = malloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++) v[i] = (float)(center + spread * urand());
    return v;
}

static float *rand_mat(int rows, int cols) { return rand_vec((size_t)rows * cols, 0.0, 1.7 / sqrt((double)cols)); }

static weights make_weights(const spec *s, uint64_t seed) {
    rng_state = seed;
    weights w = {0};
    int q = s->heads * s->head_dim, kv = s->kv_heads * s->head_dim;
    w.embed = rand_vec((size_t)s->vocab * s->hidden, 0.0, 1.0);
    w.final_norm = rand_vec((size_t)s->hidden, 1.0, 0.3);
    w.lm_head = rand_mat(s->vocab, s->hidden);
    w.l = calloc((size_t)s->layers, sizeof *w.l);
    for (int l = 0; l < s->layers; l++) {
        layer_w *L = &w.l[l];
        L->in_norm = rand_vec((size_t)s->hidden, 1.0, 0.3);
        L->post_norm = rand_vec((size_t)s->hidden, 1.0, 0.3);
        L->q_norm = rand_vec((size_t)s->head_dim, 1.0, 0.5);
        L->k_norm = rand_vec((size_t)s->head_dim, 1.0, 0.5);
        L->wq = rand_mat(q, s->hidden), L->wk = rand_mat(kv, s->hidden), L->wv = rand_mat(kv, s->hidden);
        L->wo = rand_mat(s->hidden, q);
        L->wg = rand_mat(s->ffn, s->hidden), L->wu = rand_mat(s->ffn, s->hidden), L->wd = rand_mat(s->hidden, s->ffn);
    }
    return w;
}

static void free_weights(const spec *s, weights *w) {
    free(w->embed), free(w->final_norm), free(w->lm_head);
    for (int l = 0; l < s->layers; l++) {
        layer_w *L = &w->l[l];
        free(L->in_norm), free(L->post_norm), free(L->q_norm), free(L->k_norm), free(L->wq), free(L->wk);
        free(L->wv), free(L->wo), free(L->wg), free(L->wu), free(L->wd);
    }
    free(w->l);
}

/* ---- the float64 reference -------------------------------------------------- */

/* The YaRN parameters the files describe, as the published rules read them. */
typedef struct yarn_params {
    double factor, beta_fast, beta_slow, attn;
    int orig;
    bool truncate;
    double ext; /* llama.cpp's ext_factor: the ramp's weight (1) */
} yarn_params;

static yarn_params hf_params(const spec *s) {
    yarn_params p = {.factor = s->factor > 0 ? s->factor : (double)s->max_pos / s->orig, .orig = s->orig,
                     .beta_fast = s->beta_fast > 0 ? s->beta_fast : 32, .beta_slow = s->beta_slow > 0 ? s->beta_slow : 1,
                     .truncate = !s->no_truncate, .ext = 1};
    double m1 = 0.1 * log(p.factor) + 1.0;
    if (s->attn > 0) p.attn = s->attn;
    else if (s->mscale > 0 && s->mscale_all > 0) /* DeepSeek: the ratio of the two */
        p.attn = (0.1 * s->mscale * log(p.factor) + 1.0) / (0.1 * s->mscale_all * log(p.factor) + 1.0);
    else p.attn = m1;
    return p;
}

/* llama.cpp's reading of the GGUF keys: the ends always rounded; the
 * converter's yarn_attn_factor (transformers' attention_factor) is the whole
 * factor; a log multiplier m divides by 0.1 m ln(factor) + 1; the extra
 * rope.scaling.attn_factor multiplies. */
static yarn_params gguf_params(const spec *s) {
    yarn_params p = hf_params(s);
    p.truncate = true;
    p.ext = s->gguf_ext > 0 ? s->gguf_ext : 1;
    if (s->gguf_log_mul > 0 && !(s->attn > 0)) p.attn = (0.1 * log(p.factor) + 1.0) / (0.1 * s->gguf_log_mul * log(p.factor) + 1.0);
    if (s->gguf_attn_mult > 0) p.attn *= s->gguf_attn_mult;
    return p;
}

/* inv[d / 2]: each pair's frequency; *attn: the cos/sin multiplier. */
static void ref_yarn_table(const spec *s, const yarn_params *p, ref_bug bug, double *inv, double *attn) {
    int d = s->head_dim;
    const double two_pi = 6.283185307179586476925;
    double lo = d * log(p->orig / (two_pi * p->beta_fast)) / (2.0 * log(s->theta));
    double hi = d * log(p->orig / (two_pi * p->beta_slow)) / (2.0 * log(s->theta));
    if (p->truncate != (bug == BUG_TRUNCATE_FLIP)) {
        lo = floor(lo);
        hi = ceil(hi);
    }
    if (lo < 0) lo = 0;
    if (hi > d - 1) hi = d - 1;
    if (hi == lo) hi += 0.001;
    for (int i = 0; i < d / 2; i++) {
        double b = pow(s->theta, -2.0 * i / d);
        double r = (i - lo) / (hi - lo);
        r = r < 0 ? 0 : r > 1 ? 1 : r;
        if (bug == BUG_RAMP_REVERSED) r = 1 - r;
        double keep = (1 - r) * p->ext; /* llama.cpp's ext_factor weighs the kept share */
        inv[i] = bug == BUG_NO_FACTOR ? b : b * keep + b / p->factor * (1 - keep);
    }
    *attn = bug == BUG_NO_ATTN ? 1.0 : p->attn;
}

/* y[o] = sum_i W[o][i] x[i], W (out, in) as nn.Linear holds it */
static void linear(double *y, const float *W, const double *x, int out, int in) {
    for (int o = 0; o < out; o++) {
        double acc = 0;
        for (int i = 0; i < in; i++) acc += (double)W[(size_t)o * in + i] * x[i];
        y[o] = acc;
    }
}

static void rmsnorm(double *y, const double *x, const float *w, int n, double eps) {
    double ss = 0;
    for (int i = 0; i < n; i++) ss += x[i] * x[i];
    double r = 1.0 / sqrt(ss / n + eps);
    for (int i = 0; i < n; i++) y[i] = x[i] * r * w[i];
}

/* rotate-half RoPE of one head at position pos: pairs (i, i + d/2) */
static void rope(double *x, int d, int pos, const double *inv, double attn) {
    int half = d / 2;
    for (int i = 0; i < half; i++) {
        double c = cos(pos * inv[i]) * attn, sn = sin(pos * inv[i]) * attn;
        double a = x[i], b = x[i + half];
        x[i] = a * c - b * sn;
        x[i + half] = b * c + a * sn;
    }
}

/* logits[T][vocab] of tokens[T] through Qwen3 (modeling_qwen3.py): x +=
 * o(attn(rope(q_norm(q)), rope(k_norm(k)), v)) of RMSNorm(x); x +=
 * down(silu(gate) * up) of RMSNorm(x); RMSNorm, lm_head. */
static void ref_forward(const spec *s, const weights *w, const yarn_params *p, ref_bug bug, const int32_t *tok, int T,
                        double *logits) {
    int H = s->hidden, hd = s->head_dim, qd = s->heads * hd, kvd = s->kv_heads * hd;
    double inv[512], attn;
    ref_yarn_table(s, p, bug, inv, &attn);
    double *x = calloc((size_t)T * H, sizeof *x), *h = calloc((size_t)H, sizeof *h);
    double *q = calloc((size_t)T * qd, sizeof *q), *k = calloc((size_t)T * kvd, sizeof *k);
    double *v = calloc((size_t)T * kvd, sizeof *v), *att = calloc((size_t)qd, sizeof *att);
    double *o = calloc((size_t)H, sizeof *o), *g = calloc((size_t)s->ffn, sizeof *g);
    double *u = calloc((size_t)s->ffn, sizeof *u), *pr = calloc((size_t)T, sizeof *pr);
    for (int t = 0; t < T; t++)
        for (int i = 0; i < H; i++) x[(size_t)t * H + i] = w->embed[(size_t)tok[t] * H + i];
    double scale = 1.0 / sqrt((double)hd);
    for (int l = 0; l < s->layers; l++) {
        const layer_w *L = &w->l[l];
        for (int t = 0; t < T; t++) {
            rmsnorm(h, x + (size_t)t * H, L->in_norm, H, s->eps);
            linear(q + (size_t)t * qd, L->wq, h, qd, H);
            linear(k + (size_t)t * kvd, L->wk, h, kvd, H);
            linear(v + (size_t)t * kvd, L->wv, h, kvd, H);
            for (int hh = 0; hh < s->heads; hh++) {
                double *qh = q + (size_t)t * qd + hh * hd;
                rmsnorm(qh, qh, L->q_norm, hd, s->eps);
                rope(qh, hd, t, inv, attn);
            }
            for (int hh = 0; hh < s->kv_heads; hh++) {
                double *kh = k + (size_t)t * kvd + hh * hd;
                rmsnorm(kh, kh, L->k_norm, hd, s->eps);
                rope(kh, hd, t, inv, attn);
            }
        }
        for (int t = 0; t < T; t++) {
            for (int hh = 0; hh < s->heads; hh++) {
                int kh = hh / (s->heads / s->kv_heads);
                const double *qh = q + (size_t)t * qd + hh * hd;
                double mx = -INFINITY;
                for (int j = 0; j <= t; j++) {
                    double dot = 0;
                    for (int i = 0; i < hd; i++) dot += qh[i] * k[(size_t)j * kvd + kh * hd + i];
                    pr[j] = dot * scale;
                    if (pr[j] > mx) mx = pr[j];
                }
                double sum = 0;
                for (int j = 0; j <= t; j++) sum += (pr[j] = exp(pr[j] - mx));
                for (int i = 0; i < hd; i++) {
                    double a = 0;
                    for (int j = 0; j <= t; j++) a += pr[j] * v[(size_t)j * kvd + kh * hd + i];
                    att[hh * hd + i] = a / sum;
                }
            }
            linear(o, L->wo, att, H, qd);
            double *xt = x + (size_t)t * H;
            for (int i = 0; i < H; i++) xt[i] += o[i];
            rmsnorm(h, xt, L->post_norm, H, s->eps);
            linear(g, L->wg, h, s->ffn, H);
            linear(u, L->wu, h, s->ffn, H);
            for (int i = 0; i < s->ffn; i++) g[i] = g[i] / (1.0 + exp(-g[i])) * u[i];
            linear(o, L->wd, g, H, s->ffn);
            for (int i = 0; i < H; i++) xt[i] += o[i];
        }
    }
    for (int t = 0; t < T; t++) {
        rmsnorm(h, x + (size_t)t * H, w->final_norm, H, s->eps);
        linear(logits + (size_t)t * s->vocab, w->lm_head, h, s->vocab, H);
    }
    free(x), free(h), free(q), free(k), free(v), free(att), free(o), free(g), free(u), free(pr);
}

/* ---- writing the model files ------------------------------------------------ */

static void put_mat(stw_writer *st, gguf_writer *gw, const char *hf, const char *gg, int rows, int cols,
                    const float *data) {
    int64_t shape[2] = {rows, cols};
    int nd = cols > 0 ? 2 : 1;
    if (cols <= 0) shape[0] = rows;
    stw_add_f32(st, hf, nd, shape, data);
    gguf_writer_add_tensor_f32(gw, gg, nd, shape, data);
}

static void write_config(const spec *s, const char *dir) {
    char rs[1024];
    size_t off = (size_t)snprintf(rs, sizeof rs, "{\"%s\": \"yarn\"", s->old_type_key ? "type" : "rope_type");
#define ADD(...) (off += (size_t)snprintf(rs + off, sizeof rs - off, __VA_ARGS__))
    if (s->factor > 0) ADD(", \"factor\": %.17g", s->factor);
    ADD(", \"original_max_position_embeddings\": %d", s->orig);
    if (s->beta_fast > 0) ADD(", \"beta_fast\": %.17g", s->beta_fast);
    if (s->beta_slow > 0) ADD(", \"beta_slow\": %.17g", s->beta_slow);
    if (s->attn != 0) ADD(", \"attention_factor\": %.17g", s->attn);
    if (s->mscale > 0) ADD(", \"mscale\": %.17g, \"mscale_all_dim\": %.17g", s->mscale, s->mscale_all);
    if (s->no_truncate) ADD(", \"truncate\": false");
    if (s->rope_parameters) ADD(", \"rope_theta\": %.17g", s->theta);
    ADD("}");
#undef ADD
    char cfg[4096], theta[64] = ""; /* transformers 5 keeps rope_theta inside rope_parameters */
    if (!s->rope_parameters) snprintf(theta, sizeof theta, "\"rope_theta\": %.17g, ", s->theta);
    snprintf(cfg, sizeof cfg,
             "{\n  \"model_type\": \"qwen3\", \"architectures\": [\"Qwen3ForCausalLM\"],\n"
             "  \"hidden_size\": %d, \"intermediate_size\": %d, \"num_hidden_layers\": %d,\n"
             "  \"num_attention_heads\": %d, \"num_key_value_heads\": %d, \"head_dim\": %d, \"vocab_size\": %d,\n"
             "  \"max_position_embeddings\": %d, \"rms_norm_eps\": %g, \"hidden_act\": \"silu\",\n"
             "  \"tie_word_embeddings\": false, \"bos_token_id\": 2, \"eos_token_id\": 1,\n"
             "  %s\"%s\": %s\n}\n",
             s->hidden, s->ffn, s->layers, s->heads, s->kv_heads, s->head_dim, s->vocab, s->max_pos, s->eps, theta,
             s->rope_parameters ? "rope_parameters" : "rope_scaling", rs);
    char *path = test_join(dir, "config.json");
    test_write_file(path, cfg, strlen(cfg));
    free(path);
}

/* The keys llama.cpp's converter writes for Qwen3 with YaRN (factor,
 * original context, the betas when the config has them). */
static void write_gguf_keys(const spec *s, gguf_writer *gw) {
    const yarn_params p = hf_params(s);
    gguf_writer_add_str(gw, "general.architecture", "qwen3");
    gguf_writer_add_u32(gw, "qwen3.context_length", (uint32_t)s->max_pos);
    gguf_writer_add_u32(gw, "qwen3.embedding_length", (uint32_t)s->hidden);
    gguf_writer_add_u32(gw, "qwen3.feed_forward_length", (uint32_t)s->ffn);
    gguf_writer_add_u32(gw, "qwen3.block_count", (uint32_t)s->layers);
    gguf_writer_add_u32(gw, "qwen3.attention.head_count", (uint32_t)s->heads);
    gguf_writer_add_u32(gw, "qwen3.attention.head_count_kv", (uint32_t)s->kv_heads);
    gguf_writer_add_u32(gw, "qwen3.attention.key_length", (uint32_t)s->head_dim);
    gguf_writer_add_u32(gw, "qwen3.attention.value_length", (uint32_t)s->head_dim);
    gguf_writer_add_f32(gw, "qwen3.rope.freq_base", (float)s->theta);
    gguf_writer_add_f32(gw, "qwen3.attention.layer_norm_rms_epsilon", (float)s->eps);
    gguf_writer_add_str(gw, "qwen3.rope.scaling.type", "yarn");
    gguf_writer_add_f32(gw, "qwen3.rope.scaling.factor", (float)p.factor);
    gguf_writer_add_u32(gw, "qwen3.rope.scaling.original_context_length", (uint32_t)s->orig);
    if (s->beta_fast > 0) gguf_writer_add_f32(gw, "qwen3.rope.scaling.yarn_beta_fast", (float)s->beta_fast);
    if (s->beta_slow > 0) gguf_writer_add_f32(gw, "qwen3.rope.scaling.yarn_beta_slow", (float)s->beta_slow);
    if (s->attn != 0) gguf_writer_add_f32(gw, "qwen3.rope.scaling.yarn_attn_factor", (float)s->attn);
    if (s->gguf_log_mul > 0) gguf_writer_add_f32(gw, "qwen3.rope.scaling.yarn_log_multiplier", (float)s->gguf_log_mul);
    if (s->gguf_ext > 0) gguf_writer_add_f32(gw, "qwen3.rope.scaling.yarn_ext_factor", (float)s->gguf_ext);
    if (s->gguf_attn_mult > 0) gguf_writer_add_f32(gw, "qwen3.rope.scaling.attn_factor", (float)s->gguf_attn_mult);
    gguf_writer_add_u32(gw, "tokenizer.ggml.bos_token_id", 2);
    gguf_writer_add_u32(gw, "tokenizer.ggml.eos_token_id", 1);
}

/* dir/hf (config.json + model.safetensors) and dir/model.gguf */
static void write_model(const spec *s, const weights *w, const char *name, char **hf_dir, char **gguf_path) {
    char *dir = test_make_dir(name);
    *hf_dir = test_join(dir, "hf");
    *gguf_path = test_join(dir, "model.gguf");
    char sub[256];
    snprintf(sub, sizeof sub, "%s/hf", name);
    free(test_make_dir(sub));
    write_config(s, *hf_dir);
    stw_writer *st = stw_new();
    gguf_writer *gw = gguf_writer_new(3);
    write_gguf_keys(s, gw);
    int H = s->hidden, q = s->heads * s->head_dim, kv = s->kv_heads * s->head_dim, F = s->ffn, hd = s->head_dim;
    put_mat(st, gw, "model.embed_tokens.weight", "token_embd.weight", s->vocab, H, w->embed);
    put_mat(st, gw, "model.norm.weight", "output_norm.weight", H, 0, w->final_norm);
    put_mat(st, gw, "lm_head.weight", "output.weight", s->vocab, H, w->lm_head);
    char hn[128], gn[128];
    for (int l = 0; l < s->layers; l++) {
        const layer_w *L = &w->l[l];
#define HF(x) (snprintf(hn, sizeof hn, "model.layers.%d.%s", l, x), hn)
#define GG(x) (snprintf(gn, sizeof gn, "blk.%d.%s", l, x), gn)
        put_mat(st, gw, HF("input_layernorm.weight"), GG("attn_norm.weight"), H, 0, L->in_norm);
        put_mat(st, gw, HF("self_attn.q_proj.weight"), GG("attn_q.weight"), q, H, L->wq);
        put_mat(st, gw, HF("self_attn.k_proj.weight"), GG("attn_k.weight"), kv, H, L->wk);
        put_mat(st, gw, HF("self_attn.v_proj.weight"), GG("attn_v.weight"), kv, H, L->wv);
        put_mat(st, gw, HF("self_attn.o_proj.weight"), GG("attn_output.weight"), H, q, L->wo);
        put_mat(st, gw, HF("self_attn.q_norm.weight"), GG("attn_q_norm.weight"), hd, 0, L->q_norm);
        put_mat(st, gw, HF("self_attn.k_norm.weight"), GG("attn_k_norm.weight"), hd, 0, L->k_norm);
        put_mat(st, gw, HF("post_attention_layernorm.weight"), GG("ffn_norm.weight"), H, 0, L->post_norm);
        put_mat(st, gw, HF("mlp.gate_proj.weight"), GG("ffn_gate.weight"), F, H, L->wg);
        put_mat(st, gw, HF("mlp.up_proj.weight"), GG("ffn_up.weight"), F, H, L->wu);
        put_mat(st, gw, HF("mlp.down_proj.weight"), GG("ffn_down.weight"), H, F, L->wd);
#undef HF
#undef GG
    }
    char *st_path = test_join(*hf_dir, "model.safetensors");
    REQUIRE_MSG(stw_write(st, st_path) == 0, "cannot write %s", st_path);
    REQUIRE_MSG(gguf_writer_write(gw, *gguf_path) == 0, "cannot write %s", *gguf_path);
    free(st_path);
    stw_free(st);
    gguf_writer_free(gw);
    free(dir);
}

/* ---- comparing ------------------------------------------------------------- */

static pdl_model *load(const char *path) {
    pdl_model *m = NULL;
    pdl_error err;
    pdl_model_options o = {.n_threads = 2, .log = test_log_no_unused_tensors, .log_user = (void *)path};
    REQUIRE_MSG(pdl_model_load(&m, path, &o, &err) == 0, "%s: %s", path, err.message);
    return m;
}

static double max_diff(const float *got, const double *want, size_t n) {
    double d = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - want[i]);
        if (!(e <= d)) d = e; /* NaN counts as the largest */
    }
    return d;
}

static double max_diff_d(const double *a, const double *b, size_t n) {
    double d = 0;
    for (size_t i = 0; i < n; i++) d = fmax(d, fabs(a[i] - b[i]));
    return d;
}

/* The loaded model's frequency table and attention factor against the
 * reference's (relative 1e-6: the table is float32, rounded once). */
static void check_table(const char *path, const spec *s, const yarn_params *p) {
    pdl_model *m = load(path);
    double inv[512], attn;
    ref_yarn_table(s, p, BUG_NONE, inv, &attn);
    double worst = 0;
    for (int i = 0; i < s->head_dim / 2; i++) worst = fmax(worst, fabs(m->rope_inv_freq[i] - inv[i]) / inv[i]);
    CHECK_MSG(worst <= 1e-6, "%s: frequency table off by %.3g (relative)", path, worst);
    CHECK_MSG(fabs(m->cfg.rope_mscale - attn) <= 1e-6 * attn, "%s: attention factor %.9g, want %.9g", path,
              (double)m->cfg.rope_mscale, attn);
    /* the declared context is the scaled one */
    pdl_model_info info;
    pdl_model_get_info(m, &info);
    int scaled = (int)(p->orig * p->factor);
    CHECK_MSG(info.ctx_len == (scaled > s->max_pos ? scaled : s->max_pos), "%s: context %d", path, info.ctx_len);
    pdl_model_free(m);
}

/* All-row logits of the prompt, then greedy tokens through the decode path
 * (the engine's own choices), each step's logits against the reference's
 * over the prompt and the tokens so far. */
static void check_forward(const char *path, const spec *s, const weights *w, const yarn_params *p,
                          const int32_t *prompt) {
    pdl_model *m = load(path);
    int V = s->vocab, N = PROMPT + STEPS;
    float *rows = test_all_row_logits(m, prompt, PROMPT);
    int32_t seq_tok[PROMPT + STEPS];
    memcpy(seq_tok, prompt, sizeof(int32_t) * PROMPT);
    /* greedy: one forward of the prompt (last row), then a token at a time */
    pdl_context *ctx = test_context(m);
    pdl_kv_cache *kv = NULL;
    pdl_error err;
    REQUIRE(pdl_kv_cache_create(&kv, m, PDL_KV_F32, 16, N / 16 + 1, &err) == 0);
    float *step = malloc((size_t)STEPS * V * sizeof *step);
    pdl_seq seq = {0};
    REQUIRE_MSG(pdl_seq_forward(ctx, kv, &seq, prompt, NULL, PROMPT, PDL_LOGITS_LAST, step, &err) == 0, "%s",
                err.message);
    for (int k = 0; k < STEPS; k++) {
        const float *lk = step + (size_t)k * V;
        int32_t best = 0;
        for (int j = 1; j < V; j++)
            if (lk[j] > lk[best]) best = j;
        seq_tok[PROMPT + k] = best;
        if (k + 1 < STEPS)
            REQUIRE_MSG(pdl_seq_forward(ctx, kv, &seq, &best, NULL, 1, PDL_LOGITS_LAST, step + (size_t)(k + 1) * V,
                                        &err) == 0, "%s", err.message);
    }
    pdl_seq_release(kv, &seq);
    pdl_kv_cache_free(kv);
    pdl_context_free(ctx);
    pdl_model_free(m);

    double *want = malloc((size_t)N * V * sizeof *want), *bad = malloc((size_t)N * V * sizeof *bad);
    ref_forward(s, w, p, BUG_NONE, seq_tok, N, want);
    double d = max_diff(rows, want, (size_t)PROMPT * V);
    double ds = max_diff(step, want + (size_t)(PROMPT - 1) * V, (size_t)STEPS * V);
    fprintf(stderr, "  %s: max |engine - float64|: prompt rows %.3g, greedy steps %.3g\n", path, d, ds);
    CHECK_MSG(d <= TOL, "%s: prompt logits differ from the float64 reference by %g (tolerance %g)", path, d, TOL);
    CHECK_MSG(ds <= TOL, "%s: decode logits differ from the float64 reference by %g (tolerance %g)", path, ds, TOL);
    double margin = INFINITY;
    for (int k = 0; k < STEPS; k++) { /* the reference's greedy token at each step is the engine's */
        const double *r = want + (size_t)(PROMPT - 1 + k) * V;
        int best = 0;
        for (int j = 1; j < V; j++)
            if (r[j] > r[best]) best = j;
        CHECK_MSG(best == seq_tok[PROMPT + k], "%s: greedy step %d: engine %d, reference %d", path, k,
                  seq_tok[PROMPT + k], best);
        for (int j = 0; j < V; j++)
            if (j != best) margin = fmin(margin, r[best] - r[j]);
    }
    fprintf(stderr, "  %s: greedy tokens equal; smallest top-1 margin %.3g\n", path, margin);
    /* each mistake moves the reference far outside the tolerance */
    ref_bug bugs[] = {BUG_RAMP_REVERSED, BUG_NO_ATTN, BUG_NO_FACTOR, BUG_TRUNCATE_FLIP};
    for (size_t b = 0; b < sizeof bugs / sizeof bugs[0]; b++) {
        ref_forward(s, w, p, bugs[b], seq_tok, PROMPT, bad);
        double db = max_diff_d(bad, want, (size_t)PROMPT * V);
        CHECK_MSG(db > 100 * TOL, "%s: reference variant %d moves logits by only %g: the test could not see it", path,
                  (int)bugs[b], db);
    }
    free(want), free(bad), free(rows), free(step);
}

static void random_prompt(int32_t *tok, int vocab) {
    for (int t = 0; t < PROMPT; t++) tok[t] = (int32_t)((urand() + 1.0) * 0.5 * (vocab - 1));
}

static spec tiny(void) {
    return (spec){.layers = 2, .hidden = 64, .heads = 4, .kv_heads = 2, .head_dim = 32, .ffn = 96, .vocab = 160,
                  .max_pos = 64, .theta = 100, .eps = 1e-6, .factor = 4, .orig = 64};
}

/* Both files against the reference: the table, then the forward. */
static void check_model(const spec *s, const char *name, uint64_t seed, bool check_gguf_forward) {
    weights w = make_weights(s, seed);
    char *hf = NULL, *gg = NULL;
    write_model(s, &w, name, &hf, &gg);
    int32_t prompt[PROMPT];
    random_prompt(prompt, s->vocab);
    yarn_params ph = hf_params(s), pg = gguf_params(s);
    check_table(hf, s, &ph);
    check_table(gg, s, &pg);
    check_forward(hf, s, &w, &ph, prompt);
    if (check_gguf_forward) check_forward(gg, s, &w, &pg, prompt);
    free(hf), free(gg);
    free_weights(s, &w);
}

/* Qwen3 with betas 4 / 0.5 over 16 pairs of base 100: pairs 0-3 kept,
 * 4-10 on the ramp, 11-15 divided by 4; attention factor 0.1 ln 4 + 1.
 * max_position_embeddings says 64: the context in effect is 256. */
static void test_qwen3_yarn_matches_float64_reference(void) {
    spec s = tiny();
    s.beta_fast = 4, s.beta_slow = 0.5;
    check_model(&s, "yarn-qwen3", 0x9E3779B97F4A7C15ull, true);
}

/* As Qwen's model cards say to write it: rope_type, factor and the
 * original context only (betas 32 / 1 by default: the ramp over pairs 0-5
 * at base 10000), here as transformers 5's rope_parameters; the GGUF with
 * the converter's three keys. */
static void test_qwen3_yarn_defaults_as_published(void) {
    spec s = tiny();
    s.theta = 10000, s.rope_parameters = true;
    check_model(&s, "yarn-qwen3-defaults", 0x2545F4914F6CDD1Dull, true);
}

/* gpt-oss's rope_scaling: truncate false keeps the ramp's ends fractional
 * (pairs 3.25 .. 10.47 here) and an explicit attention factor. The GGUF
 * cannot say truncate (llama.cpp always rounds): its table is checked as
 * llama.cpp reads it, its forward is the HF one's but for the rounding. */
static void test_yarn_untruncated_with_attention_factor(void) {
    spec s = tiny();
    s.beta_fast = 4, s.beta_slow = 0.5, s.no_truncate = true, s.attn = 1.3, s.old_type_key = true;
    check_model(&s, "yarn-untruncated", 0x5DEECE66Dull, true);
}

/* The other ways the attention factor and the ramp are given: DeepSeek's
 * mscale / mscale_all_dim ratio and a factor left to max_position_embeddings
 * / original (HF); llama.cpp's yarn_log_multiplier, yarn_ext_factor and the
 * extra rope.scaling.attn_factor (GGUF). Tables only. */
static void test_yarn_attention_factor_variants(void) {
    spec s = tiny();
    s.beta_fast = 4, s.beta_slow = 0.5, s.mscale = 1.0, s.mscale_all = 0.5;
    s.gguf_log_mul = 0.5, s.gguf_ext = 0.5, s.gguf_attn_mult = 1.1;
    weights w = make_weights(&s, 11);
    char *hf = NULL, *gg = NULL;
    write_model(&s, &w, "yarn-variants", &hf, &gg);
    yarn_params ph = hf_params(&s), pg = gguf_params(&s);
    CHECK(fabs(ph.attn - (0.1 * log(4.0) + 1) / (0.05 * log(4.0) + 1)) < 1e-12);
    CHECK(fabs(pg.attn - 1.1 * (0.1 * log(4.0) + 1) / (0.05 * log(4.0) + 1)) < 1e-12);
    check_table(hf, &s, &ph);
    check_table(gg, &s, &pg);
    free(hf), free(gg);
    /* no factor: max_position_embeddings 256 over the original 64 */
    spec nf = tiny();
    nf.factor = 0, nf.max_pos = 256;
    write_model(&nf, &w, "yarn-no-factor", &hf, &gg);
    yarn_params pn = hf_params(&nf);
    CHECK(fabs(pn.factor - 4.0) < 1e-12);
    check_table(hf, &nf, &pn);
    free(hf), free(gg);
    free_weights(&s, &w);
}

static void expect_load_error(const char *path, const char *part1, const char *part2) {
    pdl_model *m = NULL;
    pdl_error err;
    CHECK_MSG(pdl_model_load(&m, path, NULL, &err) != 0, "%s loaded", path);
    CHECK_CONTAINS(err.message, part1);
    if (part2) CHECK_CONTAINS(err.message, part2);
    pdl_model_free(m);
}

/* Broken YaRN descriptions are refused with what is wrong named. */
static void test_broken_yarn_files_are_named(void) {
    spec s = tiny();
    s.beta_fast = 0.5, s.beta_slow = 4; /* swapped */
    weights w = make_weights(&s, 5);
    char *hf = NULL, *gg = NULL;
    write_model(&s, &w, "yarn-broken", &hf, &gg);
    expect_load_error(hf, "beta_fast 0.5, beta_slow 4", "beta_fast > beta_slow");
    expect_load_error(gg, "beta_fast 0.5, beta_slow 4", "beta_fast > beta_slow");
    free(hf), free(gg);
    s = tiny();
    s.attn = -2;
    write_model(&s, &w, "yarn-broken-attn", &hf, &gg);
    expect_load_error(hf, "attention_factor", "positive");
    expect_load_error(gg, "yarn_attn_factor -2", NULL);
    free(hf), free(gg);
    free_weights(&s, &w);
}

int main(void) {
    /* exact products: the float64 reference multiplies unrounded activations */
    setenv("PAGEDLM_BF16_ACTIVATIONS", "0", 1);
    pdl_error kerr;
    REQUIRE(pdl_set_kernels(NULL, 0, &kerr) == 0);
    RUN(test_qwen3_yarn_matches_float64_reference);
    RUN(test_qwen3_yarn_defaults_as_published);
    RUN(test_yarn_untruncated_with_attention_factor);
    RUN(test_yarn_attention_factor_variants);
    RUN(test_broken_yarn_files_are_named);
    return test_summary();
}
