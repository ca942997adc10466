/*
 * test_arch_reference.c - Gemma 3, Phi-3 and Cohere2 against a float64
 * forward written from their published descriptions (transformers'
 * modeling_gemma3.py, modeling_phi3.py and modeling_cohere2.py, and the
 * papers' RoPE/LongRoPE definitions).
 *
 * ../shared holds no reference data for these families, so each test makes
 * a random-weight model, writes it as a Hugging Face folder and as a GGUF
 * file laid out as llama.cpp's converter lays it out (Gemma norms stored as
 * 1 + w, Phi-3's fused qkv and gate_up matrices, LongRoPE factor tensors),
 * and compares the engine's all-row logits from both with the reference
 * below. The reference is deliberately plain: one sequence, every position
 * against every earlier one, each family's differences written out where its
 * description puts them, no code shared with src/.
 *
 * OLMo 2 is the table's proof: a Llama-like family added as one row of
 * src/model/arch.c (norms after each branch only, q/k RMSNorm over the
 * whole projection), checked here like the others (modeling_olmo2.py).
 *
 * Tolerance: 1e-5 absolute on logits of magnitude ~1-5. The engine computes
 * in float32 (F32 weights, F32 KV cache); over these 4-6 layer models the
 * observed difference from float64 is at most 1.7e-6. Each test also runs the
 * reference with one easy-to-miss detail wrong (windowed layers on the global
 * RoPE base, the global layer one off, RoPE on Cohere2's global layers,
 * LongRoPE's other factor set or no attention factor) and requires that
 * variant to land far outside the tolerance, so the comparison can fail.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/fp16.h"
#include "pagedlm.h"
#include "support/gguf_writer.h"
#include "support/st_writer.h"
#include "test_util.h"

#define TOL 1e-5

typedef enum ref_arch { A_GEMMA3, A_PHI3, A_COHERE2, A_OLMO2 } ref_arch;

/* One deliberate mistake in the reference, to show the comparison can fail. */
typedef enum ref_bug {
    BUG_NONE,
    BUG_LOCAL_BASE,     /* Gemma 3: windowed layers on the global RoPE base */
    BUG_PATTERN_SHIFT,  /* the global layer one earlier */
    BUG_ROPE_ON_GLOBAL, /* Cohere2: RoPE on the global layers too */
    BUG_OTHER_FACTORS,  /* LongRoPE: the other factor set */
    BUG_NO_MSCALE,      /* LongRoPE: no attention factor on cos and sin */
    BUG_QK_NORM_NO_ONE, /* Gemma 3: q/k norms as w instead of (1 + w) */
    BUG_QK_NORM_PER_HEAD, /* OLMo 2: q/k norms per head instead of over the whole projection */
    BUG_NORM_BEFORE,    /* OLMo 2: its norms before each branch (Llama's place) instead of after */
} ref_bug;

typedef struct spec {
    ref_arch arch;
    int layers, hidden, heads, kv_heads, head_dim, ffn, vocab, ctx;
    int window, pattern; /* pattern p: layer l is global when (l + 1) % p == 0 */
    int rot;             /* rotary dimensions per head */
    double theta, theta_local, eps;
    double qpas;          /* Gemma 3 query_pre_attn_scalar */
    double linear_factor; /* Gemma 3 global layers' linear RoPE scaling; 0 = none */
    double logit_scale;   /* Cohere2 */
    int orig_ctx;         /* Phi-3 LongRoPE original context; 0 = no LongRoPE */
    bool multimodal;      /* Gemma 3: the Hugging Face folder of Gemma3ForConditionalGeneration */
    bool rope_parameters; /* Gemma 3: RoPE as transformers 5 writes it (rope_parameters per layer type) */
    bool bf16_embed;      /* the HF embedding stored as BF16 (values BF16-exact in both files) */
    bool drop_short;      /* broken files: the GGUF lacks rope_factors_short */
    bool bad_pattern;     /* broken files: GGUF window pattern array with layer 0 flipped */
} spec;

typedef struct layer_w {
    float *in_norm, *post_attn_norm, *pre_ffn_norm, *post_ffn_norm, *q_norm, *k_norm;
    float *wq, *wk, *wv, *wo, *wg, *wu, *wd;
} layer_w;

/* Weights as Hugging Face holds them (Gemma norms as w, applied as 1 + w). */
typedef struct weights {
    float *embed, *final_norm, *lm_head; /* lm_head NULL: tied */
    layer_w *l;
    float *long_f, *short_f; /* LongRoPE factors [rot / 2] */
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
    bool gemma = s->arch == A_GEMMA3;
    double nc = gemma ? 0.0 : 1.0; /* norm weights around 1 as applied */
    w.embed = rand_vec((size_t)s->vocab * s->hidden, 0.0, gemma ? 0.15 : 1.0);
    w.final_norm = rand_vec((size_t)s->hidden, nc, 0.3);
    bool olmo = s->arch == A_OLMO2;
    if (s->arch == A_PHI3 || olmo) w.lm_head = rand_mat(s->vocab, s->hidden);
    w.l = calloc((size_t)s->layers, sizeof *w.l);
    for (int l = 0; l < s->layers; l++) {
        layer_w *L = &w.l[l];
        if (!olmo) L->in_norm = rand_vec((size_t)s->hidden, nc, 0.3);
        L->wq = rand_mat(q, s->hidden), L->wk = rand_mat(kv, s->hidden), L->wv = rand_mat(kv, s->hidden);
        L->wo = rand_mat(s->hidden, q);
        L->wg = rand_mat(s->ffn, s->hidden), L->wu = rand_mat(s->ffn, s->hidden), L->wd = rand_mat(s->hidden, s->ffn);
        if (s->arch != A_COHERE2) L->post_attn_norm = rand_vec((size_t)s->hidden, nc, 0.3);
        if (gemma) {
            L->pre_ffn_norm = rand_vec((size_t)s->hidden, nc, 0.3);
            L->post_ffn_norm = rand_vec((size_t)s->hidden, nc, 0.3);
            L->q_norm = rand_vec((size_t)s->head_dim, 0.0, 0.5);
            L->k_norm = rand_vec((size_t)s->head_dim, 0.0, 0.5);
        }
        if (olmo) { /* post-branch norms and whole-projection q/k norms, around 1 */
            L->post_ffn_norm = rand_vec((size_t)s->hidden, 1.0, 0.3);
            L->q_norm = rand_vec((size_t)q, 1.0, 0.5);
            L->k_norm = rand_vec((size_t)kv, 1.0, 0.5);
        }
    }
    if (s->orig_ctx > 0) {
        w.long_f = rand_vec((size_t)s->rot / 2, 6.0, 4.0);  /* 2 .. 10: long contexts stretch */
        w.short_f = rand_vec((size_t)s->rot / 2, 1.1, 0.1); /* ~1 */
    }
    return w;
}

static void free_weights(const spec *s, weights *w) {
    free(w->embed), free(w->final_norm), free(w->lm_head), free(w->long_f), free(w->short_f);
    for (int l = 0; l < s->layers; l++) {
        layer_w *L = &w->l[l];
        free(L->in_norm), free(L->post_attn_norm), free(L->pre_ffn_norm), free(L->post_ffn_norm);
        free(L->q_norm), free(L->k_norm), free(L->wq), free(L->wk), free(L->wv), free(L->wo);
        free(L->wg), free(L->wu), free(L->wd);
    }
    free(w->l);
}

/* ---- the float64 reference -------------------------------------------------- */

/* y[o] = sum_i W[o][i] x[i], W (out, in) as nn.Linear holds it */
static void linear(double *y, const float *W, const double *x, int out, int in) {
    for (int o = 0; o < out; o++) {
        double s = 0;
        for (int i = 0; i < in; i++) s += (double)W[(size_t)o * in + i] * x[i];
        y[o] = s;
    }
}

/* RMSNorm; Gemma's multiplies by (1 + w) */
static void rmsnorm(double *y, const double *x, const float *w, int n, double eps, bool plus_one) {
    double ss = 0;
    for (int i = 0; i < n; i++) ss += x[i] * x[i];
    double r = 1.0 / sqrt(ss / n + eps);
    for (int i = 0; i < n; i++) y[i] = x[i] * r * (plus_one ? 1.0 + w[i] : (double)w[i]);
}

/* Cohere's LayerNorm without bias */
static void layernorm(double *y, const double *x, const float *w, int n, double eps) {
    double mean = 0, var = 0;
    for (int i = 0; i < n; i++) mean += x[i];
    mean /= n;
    for (int i = 0; i < n; i++) var += (x[i] - mean) * (x[i] - mean);
    var /= n;
    double r = 1.0 / sqrt(var + eps);
    for (int i = 0; i < n; i++) y[i] = (x[i] - mean) * r * w[i];
}

static bool ref_windowed(const spec *s, int l, ref_bug bug) {
    if (s->window <= 0) return false;
    if (s->pattern <= 0) return true;
    int k = bug == BUG_PATTERN_SHIFT ? l + 2 : l + 1;
    return k % s->pattern != 0;
}

/* Rotates the first `rot` dims of one head at position pos. Interleaved
 * (Cohere: pairs 2i, 2i+1) or rotate-half (pairs i, i + rot/2); frequency i
 * is 1 / (ext_i * theta^(2i/rot)); cos and sin times mscale. */
static void rope(double *x, int rot, int pos, double theta, const float *ext, double lin, double mscale,
                 bool interleaved) {
    int half = rot / 2;
    double out[512];
    memcpy(out, x, (size_t)rot * sizeof *x);
    for (int i = 0; i < half; i++) {
        double inv = 1.0 / pow(theta, 2.0 * i / rot);
        if (ext) inv /= ext[i];
        if (lin > 0) inv /= lin;
        double c = cos(pos * inv) * mscale, sn = sin(pos * inv) * mscale;
        int a = interleaved ? 2 * i : i, b = interleaved ? 2 * i + 1 : i + half;
        out[a] = x[a] * c - x[b] * sn;
        out[b] = x[b] * c + x[a] * sn;
    }
    memcpy(x, out, (size_t)rot * sizeof *x);
}

static double gelu_tanh(double g) { return 0.5 * g * (1.0 + tanh(0.79788456080286535588 /* sqrt(2 / pi) */ * (g + 0.044715 * g * g * g))); }

/* logits[T][vocab] of tokens[T]; use_long: LongRoPE's long factors;
 * bf16_scale: Gemma's sqrt(hidden) rounded to BF16, as transformers does for
 * BF16 embeddings. */
static void ref_forward_scaled(const spec *s, const weights *w, const int32_t *tok, int T, bool use_long, ref_bug bug,
                               bool bf16_scale, double *logits) {
    int H = s->hidden, q_dim = s->heads * s->head_dim, kv_dim = s->kv_heads * s->head_dim, hd = s->head_dim;
    bool gemma = s->arch == A_GEMMA3, phi = s->arch == A_PHI3, cohere = s->arch == A_COHERE2;
    bool olmo = s->arch == A_OLMO2;
    double *x = calloc((size_t)T * H, sizeof *x), *h = calloc((size_t)H, sizeof *h);
    double *q = calloc((size_t)T * q_dim, sizeof *q), *k = calloc((size_t)T * kv_dim, sizeof *k);
    double *v = calloc((size_t)T * kv_dim, sizeof *v), *att = calloc((size_t)q_dim, sizeof *att);
    double *o = calloc((size_t)H, sizeof *o), *m = calloc((size_t)H, sizeof *m);
    double *g = calloc((size_t)s->ffn, sizeof *g), *u = calloc((size_t)s->ffn, sizeof *u);
    double *p = calloc((size_t)T, sizeof *p), *hn = calloc((size_t)T * H, sizeof *hn);
    /* Gemma: embeddings times sqrt(hidden) as a float32 number */
    double es = gemma ? (double)(float)sqrt((double)H) : 1.0;
    if (gemma && bf16_scale) es = fp16_bf16_to_f32(fp16_f32_to_bf16((float)es));
    for (int t = 0; t < T; t++)
        for (int i = 0; i < H; i++) x[(size_t)t * H + i] = w->embed[(size_t)tok[t] * H + i] * es;
    double mscale = 1.0;
    if (s->orig_ctx > 0 && bug != BUG_NO_MSCALE)
        mscale = sqrt(1.0 + log((double)s->ctx / s->orig_ctx) / log((double)s->orig_ctx));
    const float *ext = NULL;
    if (s->orig_ctx > 0) ext = (use_long != (bug == BUG_OTHER_FACTORS)) ? w->long_f : w->short_f;
    double scale = gemma ? 1.0 / sqrt(s->qpas) : 1.0 / sqrt((double)hd);

    for (int l = 0; l < s->layers; l++) {
        const layer_w *L = &w->l[l];
        bool win = ref_windowed(s, l, bug);
        /* input norm and projections, all positions */
        for (int t = 0; t < T; t++) {
            double *ht = hn + (size_t)t * H;
            if (cohere) layernorm(ht, x + (size_t)t * H, L->in_norm, H, s->eps);
            else if (olmo && bug == BUG_NORM_BEFORE) rmsnorm(ht, x + (size_t)t * H, L->post_attn_norm, H, s->eps, false);
            else if (olmo) memcpy(ht, x + (size_t)t * H, (size_t)H * sizeof *ht); /* no norm before the branch */
            else rmsnorm(ht, x + (size_t)t * H, L->in_norm, H, s->eps, gemma);
            linear(q + (size_t)t * q_dim, L->wq, ht, q_dim, H);
            linear(k + (size_t)t * kv_dim, L->wk, ht, kv_dim, H);
            linear(v + (size_t)t * kv_dim, L->wv, ht, kv_dim, H);
            if (olmo && bug != BUG_QK_NORM_PER_HEAD) { /* q_norm over all heads' q, k_norm over all k */
                rmsnorm(q + (size_t)t * q_dim, q + (size_t)t * q_dim, L->q_norm, q_dim, s->eps, false);
                rmsnorm(k + (size_t)t * kv_dim, k + (size_t)t * kv_dim, L->k_norm, kv_dim, s->eps, false);
            }
            for (int hh = 0; hh < s->heads + s->kv_heads; hh++) {
                bool isq = hh < s->heads;
                double *vec = isq ? q + (size_t)t * q_dim + hh * hd : k + (size_t)t * kv_dim + (hh - s->heads) * hd;
                if (gemma) { /* q_norm / k_norm over head_dim, (1 + w) */
                    const float *nw = isq ? L->q_norm : L->k_norm;
                    rmsnorm(vec, vec, nw, hd, s->eps, bug != BUG_QK_NORM_NO_ONE);
                }
                if (olmo && bug == BUG_QK_NORM_PER_HEAD) { /* the mistake: each head alone */
                    const float *nw = isq ? L->q_norm + hh * hd : L->k_norm + (hh - s->heads) * hd;
                    rmsnorm(vec, vec, nw, hd, s->eps, false);
                }
                if (cohere) { /* RoPE only where the window applies */
                    if (win || bug == BUG_ROPE_ON_GLOBAL) rope(vec, s->rot, t, s->theta, NULL, 0, 1.0, true);
                } else if (gemma) { /* local layers: their base, unscaled; global: scaled */
                    if (win) rope(vec, s->rot, t, bug == BUG_LOCAL_BASE ? s->theta : s->theta_local, NULL, 0, 1.0, false);
                    else rope(vec, s->rot, t, s->theta, NULL, s->linear_factor, 1.0, false);
                } else {
                    rope(vec, s->rot, t, s->theta, ext, 0, mscale, false);
                }
            }
        }
        /* attention, causal with the window, then the block's adds */
        for (int t = 0; t < T; t++) {
            for (int hh = 0; hh < s->heads; hh++) {
                int kvh = hh / (s->heads / s->kv_heads);
                const double *qh = q + (size_t)t * q_dim + hh * hd;
                double mx = -INFINITY;
                for (int j = 0; j <= t; j++) {
                    if (win && t - j >= s->window) {
                        p[j] = -INFINITY;
                        continue;
                    }
                    double d = 0;
                    for (int i = 0; i < hd; i++) d += qh[i] * k[(size_t)j * kv_dim + kvh * hd + i];
                    p[j] = d * scale;
                    if (p[j] > mx) mx = p[j];
                }
                double sum = 0;
                for (int j = 0; j <= t; j++) sum += (p[j] = isinf(p[j]) ? 0.0 : exp(p[j] - mx));
                for (int i = 0; i < hd; i++) {
                    double a = 0;
                    for (int j = 0; j <= t; j++) a += p[j] * v[(size_t)j * kv_dim + kvh * hd + i];
                    att[hh * hd + i] = a / sum;
                }
            }
            linear(o, L->wo, att, H, q_dim);
            double *xt = x + (size_t)t * H;
            if (cohere) { /* parallel: x + attn(n(x)) + mlp(n(x)) */
                const double *ht = hn + (size_t)t * H;
                linear(g, L->wg, ht, s->ffn, H);
                linear(u, L->wu, ht, s->ffn, H);
                for (int i = 0; i < s->ffn; i++) g[i] = g[i] / (1.0 + exp(-g[i])) * u[i];
                linear(m, L->wd, g, H, s->ffn);
                for (int i = 0; i < H; i++) xt[i] += o[i] + m[i];
                continue;
            }
            if (olmo) { /* x += n_post(attn(x)); x += n_post(mlp(x)) */
                if (bug != BUG_NORM_BEFORE) rmsnorm(o, o, L->post_attn_norm, H, s->eps, false);
                for (int i = 0; i < H; i++) xt[i] += o[i];
                if (bug == BUG_NORM_BEFORE) rmsnorm(h, xt, L->post_ffn_norm, H, s->eps, false);
                else memcpy(h, xt, (size_t)H * sizeof *h);
                linear(g, L->wg, h, s->ffn, H);
                linear(u, L->wu, h, s->ffn, H);
                for (int i = 0; i < s->ffn; i++) g[i] = g[i] / (1.0 + exp(-g[i])) * u[i];
                linear(m, L->wd, g, H, s->ffn);
                if (bug != BUG_NORM_BEFORE) rmsnorm(m, m, L->post_ffn_norm, H, s->eps, false);
                for (int i = 0; i < H; i++) xt[i] += m[i];
                continue;
            }
            if (gemma) rmsnorm(o, o, L->post_attn_norm, H, s->eps, true);
            for (int i = 0; i < H; i++) xt[i] += o[i];
            rmsnorm(h, xt, gemma ? L->pre_ffn_norm : L->post_attn_norm, H, s->eps, gemma);
            linear(g, L->wg, h, s->ffn, H);
            linear(u, L->wu, h, s->ffn, H);
            for (int i = 0; i < s->ffn; i++) g[i] = (gemma ? gelu_tanh(g[i]) : g[i] / (1.0 + exp(-g[i]))) * u[i];
            linear(m, L->wd, g, H, s->ffn);
            if (gemma) rmsnorm(m, m, L->post_ffn_norm, H, s->eps, true);
            for (int i = 0; i < H; i++) xt[i] += m[i];
        }
    }
    (void)phi;
    const float *head = w->lm_head ? w->lm_head : w->embed;
    for (int t = 0; t < T; t++) {
        if (cohere) layernorm(h, x + (size_t)t * H, w->final_norm, H, s->eps);
        else rmsnorm(h, x + (size_t)t * H, w->final_norm, H, s->eps, gemma);
        double *lt = logits + (size_t)t * s->vocab;
        linear(lt, head, h, s->vocab, H);
        if (cohere)
            for (int i = 0; i < s->vocab; i++) lt[i] *= s->logit_scale;
    }
    free(x), free(h), free(q), free(k), free(v), free(att), free(o), free(m), free(g), free(u), free(p), free(hn);
}

static void ref_forward(const spec *s, const weights *w, const int32_t *tok, int T, bool use_long, ref_bug bug,
                        double *logits) {
    ref_forward_scaled(s, w, tok, T, use_long, bug, false, logits);
}

/* ---- writing the model files ------------------------------------------------ */

static void put_mat(stw_writer *st, gguf_writer *gw, const char *hf, const char *gg, int rows, int cols,
                    const float *data) {
    int64_t shape[2] = {rows, cols};
    if (st) stw_add_f32(st, hf, cols > 0 ? 2 : 1, cols > 0 ? shape : (int64_t[]){rows}, data);
    if (gw) gguf_writer_add_tensor_f32(gw, gg, cols > 0 ? 2 : 1, cols > 0 ? shape : (int64_t[]){rows}, data);
}

/* A norm vector: GGUF Gemma holds 1 + w (as llama.cpp's converter writes it). */
static void put_norm(stw_writer *st, gguf_writer *gw, const spec *s, const char *hf, const char *gg, int n,
                     const float *w) {
    put_mat(st, NULL, hf, gg, n, 0, w);
    float *g = malloc((size_t)n * sizeof *g);
    for (int i = 0; i < n; i++) g[i] = s->arch == A_GEMMA3 ? 1.0f + w[i] : w[i];
    put_mat(NULL, gw, hf, gg, n, 0, g);
    free(g);
}

/* rows of a then rows of b (and c): a fused matrix */
static float *concat_rows(const float *a, int ra, const float *b, int rb, const float *c, int rc, int cols) {
    float *f = malloc((size_t)(ra + rb + rc) * cols * sizeof *f);
    memcpy(f, a, (size_t)ra * cols * sizeof *f);
    memcpy(f + (size_t)ra * cols, b, (size_t)rb * cols * sizeof *f);
    if (c) memcpy(f + (size_t)(ra + rb) * cols, c, (size_t)rc * cols * sizeof *f);
    return f;
}

static void json_floats(char *buf, size_t cap, const float *v, int n) {
    size_t off = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < n; i++) off += (size_t)snprintf(buf + off, cap - off, "%s%.9g", i ? ", " : "", v[i]);
    snprintf(buf + off, cap - off, "]");
}

static void write_config(const spec *s, const weights *w, const char *dir) {
    char cfg[24576], extra[12288] = "", lt[2048] = "";
    size_t off = 0;
    if (s->window > 0) {
        off += (size_t)snprintf(lt + off, sizeof lt - off, ",\n  \"layer_types\": [");
        for (int l = 0; l < s->layers; l++)
            off += (size_t)snprintf(lt + off, sizeof lt - off, "%s\"%s\"", l ? ", " : "",
                                    ref_windowed(s, l, BUG_NONE) ? "sliding_attention" : "full_attention");
        snprintf(lt + off, sizeof lt - off, "]");
    }
    const char *type = s->arch == A_GEMMA3 ? "gemma3_text" : s->arch == A_PHI3 ? "phi3"
                       : s->arch == A_OLMO2 ? "olmo2" : "cohere2";
    if (s->arch == A_GEMMA3 && s->rope_parameters) {
        snprintf(extra, sizeof extra,
                 "  \"rms_norm_eps\": %g, \"query_pre_attn_scalar\": %g,\n"
                 "  \"sliding_window\": %d, \"sliding_window_pattern\": %d, \"hidden_activation\": "
                 "\"gelu_pytorch_tanh\",\n  \"final_logit_softcapping\": null, \"attn_logit_softcapping\": null,\n"
                 "  \"rope_parameters\": {\"full_attention\": {\"rope_type\": \"linear\", \"factor\": %g, "
                 "\"rope_theta\": %g},\n    \"sliding_attention\": {\"rope_type\": \"default\", \"rope_theta\": %g}}%s",
                 s->eps, s->qpas, s->window, s->pattern, s->linear_factor, s->theta, s->theta_local, lt);
    } else if (s->arch == A_GEMMA3) {
        snprintf(extra, sizeof extra,
                 "  \"rms_norm_eps\": %g, \"rope_local_base_freq\": %g, \"query_pre_attn_scalar\": %g,\n"
                 "  \"sliding_window\": %d, \"sliding_window_pattern\": %d, \"hidden_activation\": "
                 "\"gelu_pytorch_tanh\",\n  \"final_logit_softcapping\": null, \"attn_logit_softcapping\": null,\n"
                 "  \"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": %g}%s",
                 s->eps, s->theta_local, s->qpas, s->window, s->pattern, s->linear_factor, lt);
    } else if (s->arch == A_PHI3) {
        char lf[4096] = "", sf[4096] = "", rs[9000] = "null";
        if (s->orig_ctx > 0) {
            json_floats(lf, sizeof lf, w->long_f, s->rot / 2);
            json_floats(sf, sizeof sf, w->short_f, s->rot / 2);
            snprintf(rs, sizeof rs, "{\"type\": \"longrope\", \"long_factor\": %s, \"short_factor\": %s}", lf, sf);
        }
        snprintf(extra, sizeof extra,
                 "  \"rms_norm_eps\": %g, \"partial_rotary_factor\": %g, \"sliding_window\": %d,\n"
                 "  \"original_max_position_embeddings\": %d, \"hidden_act\": \"silu\", \"tie_word_embeddings\": "
                 "false,\n  \"rope_scaling\": %s",
                 s->eps, (double)s->rot / s->head_dim, s->window, s->orig_ctx > 0 ? s->orig_ctx : s->ctx, rs);
    } else if (s->arch == A_OLMO2) {
        snprintf(extra, sizeof extra, "  \"rms_norm_eps\": %g, \"hidden_act\": \"silu\", \"attention_bias\": false",
                 s->eps);
    } else {
        snprintf(extra, sizeof extra,
                 "  \"layer_norm_eps\": %g, \"logit_scale\": %g, \"sliding_window\": %d, \"sliding_window_pattern\": "
                 "%d,\n  \"hidden_act\": \"silu\"%s",
                 s->eps, s->logit_scale, s->window, s->pattern, lt);
    }
    snprintf(cfg, sizeof cfg,
             "{\n  \"model_type\": \"%s\",\n  \"hidden_size\": %d, \"intermediate_size\": %d, \"num_hidden_layers\": "
             "%d,\n  \"num_attention_heads\": %d, \"num_key_value_heads\": %d, \"head_dim\": %d, \"vocab_size\": "
             "%d,\n  \"max_position_embeddings\": %d, \"rope_theta\": %g, \"bos_token_id\": 2, \"eos_token_id\": "
             "1,\n%s\n}\n",
             type, s->hidden, s->ffn, s->layers, s->heads, s->kv_heads, s->head_dim, s->vocab, s->ctx,
             s->rope_parameters ? 1234.0 : s->theta, /* a stale top-level value must lose */
             extra);
    if (s->multimodal) { /* the text model inside, as published multimodal checkpoints hold it */
        static char outer[sizeof cfg + 512];
        snprintf(outer, sizeof outer,
                 "{\"model_type\": \"gemma3\", \"architectures\": [\"Gemma3ForConditionalGeneration\"],\n"
                 " \"eos_token_id\": [1, 106], \"text_config\": %s, \"vision_config\": {\"model_type\": "
                 "\"siglip_vision_model\"}}\n",
                 cfg);
        REQUIRE(strlen(outer) < sizeof cfg);
        memcpy(cfg, outer, strlen(outer) + 1);
        /* the inner object must not carry the ids: they are at the top */
        char *p = strstr(cfg, "\"bos_token_id\": 2, \"eos_token_id\": 1,");
        if (p) memset(p, ' ', strlen("\"bos_token_id\": 2, \"eos_token_id\": 1,"));
    }
    char *path = test_join(dir, "config.json");
    test_write_file(path, cfg, strlen(cfg));
    free(path);
}

static void write_gguf_keys(const spec *s, gguf_writer *gw) {
    const char *a = s->arch == A_GEMMA3 ? "gemma3" : s->arch == A_PHI3 ? "phi3" : s->arch == A_OLMO2 ? "olmo2"
                    : "cohere2";
    char k[128];
#define KEY(name) (snprintf(k, sizeof k, "%s.%s", a, name), k)
    gguf_writer_add_str(gw, "general.architecture", a);
    gguf_writer_add_u32(gw, KEY("context_length"), (uint32_t)s->ctx);
    gguf_writer_add_u32(gw, KEY("embedding_length"), (uint32_t)s->hidden);
    gguf_writer_add_u32(gw, KEY("feed_forward_length"), (uint32_t)s->ffn);
    gguf_writer_add_u32(gw, KEY("block_count"), (uint32_t)s->layers);
    gguf_writer_add_u32(gw, KEY("attention.head_count"), (uint32_t)s->heads);
    gguf_writer_add_u32(gw, KEY("attention.head_count_kv"), (uint32_t)s->kv_heads);
    gguf_writer_add_u32(gw, KEY("attention.key_length"), (uint32_t)s->head_dim);
    gguf_writer_add_u32(gw, KEY("attention.value_length"), (uint32_t)s->head_dim);
    gguf_writer_add_u32(gw, KEY("rope.dimension_count"), (uint32_t)s->rot);
    gguf_writer_add_f32(gw, KEY("rope.freq_base"), (float)s->theta);
    if (s->window > 0) gguf_writer_add_u32(gw, KEY("attention.sliding_window"), (uint32_t)s->window);
    if (s->arch == A_COHERE2) {
        gguf_writer_add_f32(gw, KEY("attention.layer_norm_epsilon"), (float)s->eps);
        gguf_writer_add_f32(gw, KEY("logit_scale"), (float)s->logit_scale);
        if (s->pattern != 4) { /* one BOOL per layer, as newer converters write it */
            bool sw[64];
            for (int l = 0; l < s->layers; l++) sw[l] = ref_windowed(s, l, BUG_NONE);
            if (s->bad_pattern) sw[0] = !sw[0];
            gguf_writer_add_arr(gw, KEY("attention.sliding_window_pattern"), GGUF_TYPE_BOOL, sw, (size_t)s->layers);
        }
    } else {
        gguf_writer_add_f32(gw, KEY("attention.layer_norm_rms_epsilon"), (float)s->eps);
    }
    if (s->arch == A_GEMMA3) {
        /* llama.cpp's defaults: pattern 6, local base 10000; another period as a number */
        if (s->pattern != 6) gguf_writer_add_u32(gw, KEY("attention.sliding_window_pattern"), (uint32_t)s->pattern);
        gguf_writer_add_f32(gw, KEY("attention.scale"), (float)(1.0 / sqrt(s->qpas)));
        gguf_writer_add_str(gw, KEY("rope.scaling.type"), "linear");
        gguf_writer_add_f32(gw, KEY("rope.scaling.factor"), (float)s->linear_factor);
    }
    if (s->arch == A_PHI3 && s->orig_ctx > 0) {
        gguf_writer_add_u32(gw, KEY("rope.scaling.original_context_length"), (uint32_t)s->orig_ctx);
        double f = (double)s->ctx / s->orig_ctx;
        gguf_writer_add_f32(gw, KEY("rope.scaling.attn_factor"), (float)sqrt(1.0 + log(f) / log((double)s->orig_ctx)));
    }
#undef KEY
}

/* Writes dir/hf (config.json + model.safetensors) and dir/model.gguf; the
 * hyperparameters are cfg's, the tensors s's (the same but in the tests of
 * mismatches). */
static void write_model(const spec *s, const spec *cfg, const weights *w, const char *name, char **hf_dir,
                        char **gguf_path) {
    char *dir = test_make_dir(name);
    *hf_dir = test_join(dir, "hf");
    *gguf_path = test_join(dir, "model.gguf");
    char sub[256];
    snprintf(sub, sizeof sub, "%s/hf", name);
    free(test_make_dir(sub));
    write_config(cfg, w, *hf_dir);
    stw_writer *st = stw_new();
    gguf_writer *gw = gguf_writer_new(3);
    write_gguf_keys(cfg, gw);
    int H = s->hidden, q = s->heads * s->head_dim, kv = s->kv_heads * s->head_dim, F = s->ffn;
    char top[128];
    snprintf(top, sizeof top, "%sembed_tokens.weight", s->multimodal ? "language_model.model." : "model.");
    if (s->bf16_embed) {
        size_t n = (size_t)s->vocab * H;
        uint16_t *b = malloc(n * sizeof *b);
        for (size_t i = 0; i < n; i++) b[i] = fp16_f32_to_bf16(w->embed[i]);
        stw_add_bytes(st, top, "BF16", 2, (const int64_t[]){s->vocab, H}, b, n * 2);
        free(b);
        put_mat(NULL, gw, top, "token_embd.weight", s->vocab, H, w->embed);
    } else {
        put_mat(st, gw, top, "token_embd.weight", s->vocab, H, w->embed);
    }
    snprintf(top, sizeof top, "%snorm.weight", s->multimodal ? "language_model.model." : "model.");
    put_norm(st, gw, s, top, "output_norm.weight", H, w->final_norm);
    if (s->multimodal) /* a vision tower tensor the text model ignores */
        put_mat(st, NULL, "vision_tower.vision_model.post_layernorm.weight", "", H, 0, w->final_norm);
    if (w->lm_head) put_mat(st, gw, "lm_head.weight", "output.weight", s->vocab, H, w->lm_head);
    if (w->long_f) {
        put_mat(NULL, gw, "", "rope_factors_long.weight", s->rot / 2, 0, w->long_f);
        if (!s->drop_short) put_mat(NULL, gw, "", "rope_factors_short.weight", s->rot / 2, 0, w->short_f);
    }
    char hn[256], gn[256];
    const char *pre = s->multimodal ? "language_model.model." : "model.";
#define HF(x) (snprintf(hn, sizeof hn, "%slayers.%d.%s", pre, l, x), hn)
#define GG(x) (snprintf(gn, sizeof gn, "blk.%d.%s", l, x), gn)
    for (int l = 0; l < s->layers; l++) {
        const layer_w *L = &w->l[l];
        if (L->in_norm) put_norm(st, gw, s, HF("input_layernorm.weight"), GG("attn_norm.weight"), H, L->in_norm);
        if (s->arch == A_PHI3) {
            float *qkv = concat_rows(L->wq, q, L->wk, kv, L->wv, kv, H);
            put_mat(st, gw, HF("self_attn.qkv_proj.weight"), GG("attn_qkv.weight"), q + 2 * kv, H, qkv);
            free(qkv);
            float *gu = concat_rows(L->wg, F, L->wu, F, NULL, 0, H);
            put_mat(st, gw, HF("mlp.gate_up_proj.weight"), GG("ffn_up.weight"), 2 * F, H, gu);
            free(gu);
            put_norm(st, gw, s, HF("post_attention_layernorm.weight"), GG("ffn_norm.weight"), H, L->post_attn_norm);
        } else {
            put_mat(st, gw, HF("self_attn.q_proj.weight"), GG("attn_q.weight"), q, H, L->wq);
            put_mat(st, gw, HF("self_attn.k_proj.weight"), GG("attn_k.weight"), kv, H, L->wk);
            put_mat(st, gw, HF("self_attn.v_proj.weight"), GG("attn_v.weight"), kv, H, L->wv);
            put_mat(st, gw, HF("mlp.gate_proj.weight"), GG("ffn_gate.weight"), F, H, L->wg);
            put_mat(st, gw, HF("mlp.up_proj.weight"), GG("ffn_up.weight"), F, H, L->wu);
        }
        put_mat(st, gw, HF("self_attn.o_proj.weight"), GG("attn_output.weight"), H, q, L->wo);
        put_mat(st, gw, HF("mlp.down_proj.weight"), GG("ffn_down.weight"), H, F, L->wd);
        if (s->arch == A_GEMMA3) {
            put_norm(st, gw, s, HF("post_attention_layernorm.weight"), GG("post_attention_norm.weight"), H,
                     L->post_attn_norm);
            put_norm(st, gw, s, HF("pre_feedforward_layernorm.weight"), GG("ffn_norm.weight"), H, L->pre_ffn_norm);
            put_norm(st, gw, s, HF("post_feedforward_layernorm.weight"), GG("post_ffw_norm.weight"), H,
                     L->post_ffn_norm);
            put_norm(st, gw, s, HF("self_attn.q_norm.weight"), GG("attn_q_norm.weight"), s->head_dim, L->q_norm);
            put_norm(st, gw, s, HF("self_attn.k_norm.weight"), GG("attn_k_norm.weight"), s->head_dim, L->k_norm);
        }
        if (s->arch == A_OLMO2) {
            put_norm(st, gw, s, HF("post_attention_layernorm.weight"), GG("post_attention_norm.weight"), H,
                     L->post_attn_norm);
            put_norm(st, gw, s, HF("post_feedforward_layernorm.weight"), GG("post_ffw_norm.weight"), H,
                     L->post_ffn_norm);
            put_norm(st, gw, s, HF("self_attn.q_norm.weight"), GG("attn_q_norm.weight"), q, L->q_norm);
            put_norm(st, gw, s, HF("self_attn.k_norm.weight"), GG("attn_k_norm.weight"), kv, L->k_norm);
        }
    }
#undef HF
#undef GG
    char *st_path = test_join(*hf_dir, "model.safetensors");
    REQUIRE_MSG(stw_write(st, st_path) == 0, "cannot write %s", st_path);
    REQUIRE_MSG(gguf_writer_write(gw, *gguf_path) == 0, "cannot write %s", *gguf_path);
    free(st_path);
    stw_free(st);
    gguf_writer_free(gw);
    free(dir);
}

/* ---- comparing ------------------------------------------------------------- */

static float *engine_logits(const char *path, int ctx_size, const int32_t *tok, int T) {
    pdl_model *m = NULL;
    pdl_error err;
    pdl_model_options o = {.n_threads = 2, .ctx_size = ctx_size, .log = test_log_no_unused_tensors,
                           .log_user = (void *)path};
    REQUIRE_MSG(pdl_model_load(&m, path, &o, &err) == 0, "%s: %s", path, err.message);
    float *logits = test_all_row_logits(m, tok, (size_t)T);
    /* the selective head is exact for these heads: the probe must accept */
    bool ok = false;
    char why[256] = "";
    pdl_error perr;
    CHECK_MSG(pdl_model_probe_selective_logits(m, &ok, why, sizeof why, &perr) == 0 && ok, "%s: probe: %s", path,
              why);
    pdl_model_free(m);
    return logits;
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

/* Engine (HF and GGUF) vs the reference; each bug must move the reference
 * by more than 100x the tolerance. */
static void check_arch(const spec *s, const char *name, int T, int ctx_size, bool use_long, const ref_bug *bugs,
                       int n_bugs) {
    weights w = make_weights(s, 0x9E3779B97F4A7C15ull ^ (uint64_t)s->arch);
    if (s->bf16_embed) /* values both files hold exactly */
        for (size_t i = 0; i < (size_t)s->vocab * s->hidden; i++) w.embed[i] = fp16_bf16_to_f32(fp16_f32_to_bf16(w.embed[i]));
    char *hf = NULL, *gg = NULL;
    write_model(s, s, &w, name, &hf, &gg);
    int32_t *tok = malloc((size_t)T * sizeof *tok);
    for (int t = 0; t < T; t++) tok[t] = (int32_t)((urand() + 1.0) * 0.5 * (s->vocab - 1));
    size_t n = (size_t)T * s->vocab;
    double *want = malloc(n * sizeof *want), *bad = malloc(n * sizeof *bad);
    ref_forward(s, &w, tok, T, use_long, BUG_NONE, want);
    const char *paths[2] = {hf, gg};
    for (int i = 0; i < 2; i++) {
        /* a BF16 HF embedding: transformers' scale is rounded to BF16 (the
         * GGUF keeps llama.cpp's F32 sqrt) */
        if (s->bf16_embed) ref_forward_scaled(s, &w, tok, T, use_long, BUG_NONE, i == 0, want);
        float *got = engine_logits(paths[i], ctx_size, tok, T);
        double d = max_diff(got, want, n);
        fprintf(stderr, "  %s %s: max |engine - float64| = %.3g\n", name, i ? "gguf" : "hf", d);
        CHECK_MSG(d <= TOL, "%s (%s): logits differ from the float64 reference by %g (tolerance %g)", name,
                  i ? "GGUF" : "HF", d, TOL);
        free(got);
        /* what a user sees: the probe's decision under --verbose */
        char args[4096];
        snprintf(args, sizeof args, "run -m '%s' --tokens 1,2,3 -n 2 --temp 0 --verbose", paths[i]);
        cmd_result r = test_pagedlm(args);
        CHECK_EQ_INT(r.status, 0);
        CHECK_CONTAINS(r.err, "selective-logits probe: accepted");
        test_free_result(&r);
    }
    if (s->bf16_embed) { /* the rounding matters: an unrounded scale is outside the tolerance */
        ref_forward_scaled(s, &w, tok, T, use_long, BUG_NONE, true, bad);
        ref_forward_scaled(s, &w, tok, T, use_long, BUG_NONE, false, want);
        double d = max_diff_d(bad, want, n);
        CHECK_MSG(d > 100 * TOL, "%s: BF16 rounding of the embedding scale moves logits by only %g", name, d);
    }
    for (int b = 0; b < n_bugs; b++) {
        ref_forward(s, &w, tok, T, use_long, bugs[b], bad);
        double d = max_diff_d(bad, want, n);
        CHECK_MSG(d > 100 * TOL, "%s: reference variant %d moves logits by only %g: the test could not see it",
                  name, (int)bugs[b], d);
    }
    free(want), free(bad), free(tok), free(hf), free(gg);
    free_weights(s, &w);
}

/* Gemma 3: 6 layers, the 6th global (the default pattern); local base 10000
 * vs global 1e6 with linear scaling 8; query_pre_attn_scalar differs from
 * head_dim; head_dim 32 x 4 heads > hidden 64. */
static void test_gemma3_matches_float64_reference(void) {
    spec s = {.arch = A_GEMMA3, .layers = 6, .hidden = 64, .heads = 4, .kv_heads = 2, .head_dim = 32, .ffn = 96,
              .vocab = 160, .ctx = 256, .window = 5, .pattern = 6, .rot = 32, .theta = 1e6, .theta_local = 10000,
              .eps = 1e-6, .qpas = 48, .linear_factor = 8};
    ref_bug bugs[] = {BUG_LOCAL_BASE, BUG_PATTERN_SHIFT, BUG_QK_NORM_NO_ONE};
    check_arch(&s, "gemma3", 20, 0, false, bugs, 3);
}

/* Phi-3: fused projections, RoPE on half of each head, LongRoPE with the
 * context (64) beyond the original (16): long factors and the attention
 * factor sqrt(1 + ln 4 / ln 16); a 7-token window on every layer. */
static void test_phi3_longrope_matches_float64_reference(void) {
    spec s = {.arch = A_PHI3, .layers = 4, .hidden = 64, .heads = 4, .kv_heads = 2, .head_dim = 16, .ffn = 96,
              .vocab = 160, .ctx = 64, .window = 7, .rot = 8, .theta = 10000, .eps = 1e-5, .orig_ctx = 16};
    ref_bug bugs[] = {BUG_OTHER_FACTORS, BUG_NO_MSCALE};
    check_arch(&s, "phi3-long", 24, 0, true, bugs, 2);
}

/* The same model run with a context that fits the original one: short
 * factors (llama.cpp's choice, per model, so never per batch). */
static void test_phi3_short_context_uses_short_factors(void) {
    spec s = {.arch = A_PHI3, .layers = 4, .hidden = 64, .heads = 4, .kv_heads = 2, .head_dim = 16, .ffn = 96,
              .vocab = 160, .ctx = 64, .window = 7, .rot = 8, .theta = 10000, .eps = 1e-5, .orig_ctx = 16};
    ref_bug bugs[] = {BUG_OTHER_FACTORS};
    check_arch(&s, "phi3-short", 14, 16, false, bugs, 1);
}

/* Cohere2: every 2nd layer global (pattern given in both files), no RoPE
 * there; interleaved RoPE on windowed layers; LayerNorm; parallel block;
 * logit_scale. */
static void test_cohere2_matches_float64_reference(void) {
    spec s = {.arch = A_COHERE2, .layers = 4, .hidden = 64, .heads = 4, .kv_heads = 2, .head_dim = 16, .ffn = 96,
              .vocab = 160, .ctx = 256, .window = 5, .pattern = 2, .rot = 16, .theta = 50000, .eps = 1e-5,
              .logit_scale = 0.25};
    ref_bug bugs[] = {BUG_ROPE_ON_GLOBAL, BUG_PATTERN_SHIFT};
    check_arch(&s, "cohere2", 20, 0, false, bugs, 2);
}

/* OLMo 2: no norm before either branch, each branch's output normed
 * before its add, q and k RMS-normed over the whole projection (4 heads,
 * 2 KV heads) before rotate-half RoPE; untied head. */
static void test_olmo2_matches_float64_reference(void) {
    spec s = {.arch = A_OLMO2, .layers = 4, .hidden = 64, .heads = 4, .kv_heads = 2, .head_dim = 16, .ffn = 96,
              .vocab = 160, .ctx = 256, .rot = 16, .theta = 500000, .eps = 1e-6};
    ref_bug bugs[] = {BUG_QK_NORM_PER_HEAD, BUG_NORM_BEFORE};
    check_arch(&s, "olmo2", 20, 0, false, bugs, 2);
}

/* A fused qkv matrix of the wrong height is refused with its name. */
static void test_fused_qkv_of_wrong_height_is_refused(void) {
    spec s = {.arch = A_PHI3, .layers = 1, .hidden = 64, .heads = 4, .kv_heads = 2, .head_dim = 16, .ffn = 96,
              .vocab = 160, .ctx = 64, .rot = 8, .theta = 10000, .eps = 1e-5};
    weights w = make_weights(&s, 7);
    char *hf = NULL, *gg = NULL;
    spec cfg = s;
    cfg.kv_heads = 4; /* the files say 4 KV heads; the matrices hold 2 */
    write_model(&s, &cfg, &w, "phi3-bad", &hf, &gg);
    const char *paths[2] = {hf, gg};
    for (int i = 0; i < 2; i++) {
        pdl_model *m = NULL;
        pdl_error err;
        CHECK(pdl_model_load(&m, paths[i], NULL, &err) != 0);
        CHECK_CONTAINS(err.message, i ? "blk.0.attn_qkv.weight" : "model.layers.0.self_attn.qkv_proj.weight");
        CHECK_CONTAINS(err.message, "q + k + v");
        pdl_model_free(m);
    }
    free(hf), free(gg);
    free_weights(&s, &w);
}

/* The same through a multimodal checkpoint's folder: text_config, tensors
 * under language_model.model., a vision tower beside them, the token ids at
 * the top level; RoPE given as transformers 5 writes it (rope_parameters per
 * layer type). */
static void test_gemma3_multimodal_folder_runs_its_text_model(void) {
    spec s = {.arch = A_GEMMA3, .layers = 6, .hidden = 64, .heads = 4, .kv_heads = 2, .head_dim = 32, .ffn = 96,
              .vocab = 160, .ctx = 256, .window = 5, .pattern = 6, .rot = 32, .theta = 1e6, .theta_local = 10000,
              .eps = 1e-6, .qpas = 48, .linear_factor = 8, .multimodal = true, .rope_parameters = true};
    check_arch(&s, "gemma3-mm", 12, 0, false, NULL, 0);
    char *hf = test_tmp_path("gemma3-mm/hf");
    pdl_model *m = NULL;
    pdl_error err;
    REQUIRE_MSG(pdl_model_load(&m, hf, NULL, &err) == 0, "%s", err.message);
    pdl_model_info info;
    pdl_model_get_info(m, &info);
    CHECK_EQ_INT(info.eos_id, 1);
    CHECK(strcmp(info.arch, "gemma3") == 0);
    pdl_model_free(m);
    free(hf);
}

/* A BF16 checkpoint: hidden 80, sqrt(80) = 8.944 is 8.9375 in BF16, the
 * number transformers (and Gemma's training) multiplies by. */
static void test_gemma3_bf16_embedding_scale_is_rounded(void) {
    spec s = {.arch = A_GEMMA3, .layers = 2, .hidden = 80, .heads = 4, .kv_heads = 2, .head_dim = 32, .ffn = 96,
              .vocab = 160, .ctx = 256, .window = 5, .pattern = 2, .rot = 32, .theta = 1e6, .theta_local = 10000,
              .eps = 1e-6, .qpas = 32, .linear_factor = 1, .bf16_embed = true};
    check_arch(&s, "gemma3-bf16", 10, 0, false, NULL, 0);
}

static void expect_load_error(const char *path, const char *part1, const char *part2) {
    pdl_model *m = NULL;
    pdl_error err;
    CHECK_MSG(pdl_model_load(&m, path, NULL, &err) != 0, "%s loaded", path);
    CHECK_CONTAINS(err.message, part1);
    if (part2) CHECK_CONTAINS(err.message, part2);
    pdl_model_free(m);
}

/* config.json with `from` replaced by `to` (which must be there) */
static void edit_config(const char *dir, const char *from, const char *to) {
    char *path = test_join(dir, "config.json");
    char *text = test_slurp(path, NULL), *at = strstr(text, from);
    REQUIRE_MSG(at != NULL, "'%s' not in %s", from, path);
    size_t n = strlen(text) - strlen(from) + strlen(to) + 1;
    char *out = malloc(n);
    snprintf(out, n, "%.*s%s%s", (int)(at - text), text, to, at + strlen(from));
    test_write_file(path, out, strlen(out));
    free(path), free(text), free(out);
}

/* Broken descriptions of these families: each refused with the field named. */
static void test_broken_family_files_are_named(void) {
    spec phi = {.arch = A_PHI3, .layers = 2, .hidden = 64, .heads = 4, .kv_heads = 2, .head_dim = 16, .ffn = 96,
                .vocab = 160, .ctx = 64, .window = 7, .rot = 8, .theta = 10000, .eps = 1e-5, .orig_ctx = 16,
                .drop_short = true};
    weights w = make_weights(&phi, 3);
    char *hf = NULL, *gg = NULL;
    write_model(&phi, &phi, &w, "broken-phi3", &hf, &gg);
    expect_load_error(gg, "rope_factors_long.weight and rope_factors_short.weight", NULL);
    edit_config(hf, "\"long_factor\": [", "\"long_factor\": [1.5, ");
    expect_load_error(hf, "rope_scaling.long_factor", "list of 4 numbers");
    edit_config(hf, "\"long_factor\": [1.5, ", "\"long_factor\": [");
    edit_config(hf, "\"longrope\"", "\"dynamic\"");
    expect_load_error(hf, "rope_scaling type 'dynamic' is not supported", NULL);
    free(hf), free(gg);
    free_weights(&phi, &w);

    spec co = {.arch = A_COHERE2, .layers = 4, .hidden = 64, .heads = 4, .kv_heads = 2, .head_dim = 16, .ffn = 96,
               .vocab = 160, .ctx = 256, .window = 5, .pattern = 2, .rot = 16, .theta = 50000, .eps = 1e-5,
               .logit_scale = 0.25, .bad_pattern = true};
    w = make_weights(&co, 4);
    write_model(&co, &co, &w, "broken-cohere2", &hf, &gg);
    expect_load_error(gg, "cohere2.attention.sliding_window_pattern", "do not repeat with a period");
    edit_config(hf, "\"layer_types\": [\"sliding_attention\"", "\"layer_types\": [\"full_attention\"");
    expect_load_error(hf, "layer_types[0] must be \"sliding_attention\"", NULL);
    free(hf), free(gg);
    free_weights(&co, &w);
}

/* The names a loader accepts and `pagedlm info --architectures` both come
 * from the architecture table: an unknown family is refused with every
 * name of its format listed (GGUF `llama` once, though Llama and Mixtral
 * share it), and the listing shows every row. */
static void test_supported_names_come_from_the_table(void) {
    char *dir = test_make_dir("unknown-family");
    char *gg = test_join(dir, "bogus.gguf");
    gguf_writer *gw = gguf_writer_new(3);
    gguf_writer_add_str(gw, "general.architecture", "bogus");
    REQUIRE(gguf_writer_write(gw, gg) == 0);
    gguf_writer_free(gw);
    char *hf = test_join(dir, "hf");
    free(test_make_dir("unknown-family/hf"));
    char *cfg = test_join(hf, "config.json");
    test_write_file(cfg, "{\"model_type\": \"bogus\"}", 23);
    pdl_model *m = NULL;
    pdl_error err, err_hf;
    CHECK(pdl_model_load(&m, gg, NULL, &err) != 0);
    CHECK_CONTAINS(err.message, "general.architecture 'bogus' is not supported");
    CHECK(pdl_model_load(&m, hf, NULL, &err_hf) != 0);
    CHECK_CONTAINS(err_hf.message, "model_type 'bogus' is not supported");
    cmd_result r = test_pagedlm("info --architectures");
    CHECK_EQ_INT(r.status, 0);
    pdl_arch_info a;
    size_t n = 0;
    for (; pdl_architecture(n, &a); n++) {
        char want[160];
        snprintf(want, sizeof want, "\"name\": \"%s\"", a.name);
        CHECK_CONTAINS(r.out, want);
        if (a.gguf_arch) {
            char names[128], *save = NULL;
            snprintf(names, sizeof names, "%s", a.gguf_arch);
            for (char *t = strtok_r(names, " ", &save); t; t = strtok_r(NULL, " ", &save)) {
                snprintf(want, sizeof want, " %s,", t); /* ", name," or ": name," in the list */
                char list[1024];
                snprintf(list, sizeof list, " %s,", strstr(err.message, "supported:") + 10);
                char *close = strrchr(list, ')');
                if (close) *close = ','; /* the last name ends with ")" */
                CHECK_MSG(strstr(list, want) != NULL, "GGUF list lacks %s: %s", t, err.message);
            }
        }
        if (a.hf_model_types) {
            char types[128], *save = NULL;
            snprintf(types, sizeof types, "%s", a.hf_model_types);
            for (char *t = strtok_r(types, " ", &save); t; t = strtok_r(NULL, " ", &save)) {
                char list[1024];
                snprintf(list, sizeof list, " %s", strstr(err_hf.message, "supported:") + 10);
                char *close = strrchr(list, ')');
                if (close) *close = ',';
                snprintf(want, sizeof want, " %s,", t);
                CHECK_MSG(strstr(list, want) != NULL, "HF list lacks %s: %s", t, err_hf.message);
            }
        }
    }
    CHECK(n >= 15);
    CHECK_CONTAINS(r.out, "\"name\": \"olmo2\"");
    /* `llama` once in the GGUF list */
    const char *first = strstr(err.message, " llama,");
    CHECK(first != NULL && strstr(first + 1, " llama,") == NULL && strstr(first + 1, " llama)") == NULL);
    test_free_result(&r);
    free(dir), free(gg), free(hf), free(cfg);
}

int main(void) {
    /* exact products: the float64 reference multiplies unrounded
     * activations, and the BF16 checkpoint's tied head is BF16 (with BF16
     * activations, the default where the CPU has VDPBF16PS, its logits move
     * by ~5e-3 here) */
    setenv("PAGEDLM_BF16_ACTIVATIONS", "0", 1); /* for the pagedlm runs */
    pdl_error kerr;
    REQUIRE(pdl_set_kernels(NULL, 0, &kerr) == 0);
    RUN(test_gemma3_matches_float64_reference);
    RUN(test_gemma3_bf16_embedding_scale_is_rounded);
    RUN(test_gemma3_multimodal_folder_runs_its_text_model);
    RUN(test_phi3_longrope_matches_float64_reference);
    RUN(test_phi3_short_context_uses_short_factors);
    RUN(test_cohere2_matches_float64_reference);
    RUN(test_olmo2_matches_float64_reference);
    RUN(test_supported_names_come_from_the_table);
    RUN(test_fused_qkv_of_wrong_height_is_refused);
    RUN(test_broken_family_files_are_named);
    return test_summary();
}
