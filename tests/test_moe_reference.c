/*
 * test_moe_reference.c - mixture-of-experts models (Qwen3-MoE, Mixtral,
 * OLMoE, Qwen2-MoE) against a float64 forward written from their published
 * descriptions (transformers' modeling_qwen3_moe.py, modeling_mixtral.py,
 * modeling_olmoe.py, modeling_qwen2_moe.py), the batch contract of the
 * experts' layer, and the work it does per step.
 *
 * ../shared holds no MoE models, so each test makes a random-weight one and
 * writes it twice: as a Hugging Face folder (one tensor per expert and
 * projection, under each family's names) and as a GGUF file laid out as
 * llama.cpp's converter lays it out (each projection of all experts stacked
 * in one (experts, rows, columns) tensor; Mixtral as GGUF `llama` with its
 * Q/K rows permuted for adjacent-pair RoPE). The reference is plain: one
 * sequence, every position against every earlier one; the router as each
 * family's description has it: softmax over all experts, the k largest
 * probabilities, renormalized to sum 1 where the family does (Mixtral;
 * Qwen3-MoE with norm_topk_prob), the chosen experts' SwiGLU outputs summed
 * with those weights, Qwen2-MoE's shared expert added times
 * sigmoid(w . x). No code is shared with src/.
 *
 * Tolerance: 1e-5 absolute on logits of magnitude ~1-5: the engine runs in
 * float32 with F32 weights and KV cache; observed differences are ~2e-6.
 * The routing itself must not be a coin toss: the test requires every
 * row's k-th and (k+1)-th router logits to differ by more than 1e-4 in the
 * reference (float32 router logits of magnitude ~1 are off by ~1e-6), so
 * the engine picks the same experts. Each family's check also
 * runs the reference with one detail wrong (not renormalizing, or
 * renormalizing where the family does not, the ranks shifted by one, the
 * shared expert ungated) and requires that to land far outside the
 * tolerance.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/fp16.h"
#include "kernels/matmul.h"
#include "model/model.h"
#include "pagedlm.h"
#include "support/gguf_writer.h"
#include "support/st_writer.h"
#include "test_util.h"

#define TOL 1e-5
#define MAX_E 16

typedef enum fam { F_QWEN3MOE, F_MIXTRAL, F_OLMOE, F_QWEN2MOE } fam;

typedef enum bug {
    BUG_NONE,
    BUG_FLIP_NORM,      /* renormalize the k weights where the family does not, or the reverse */
    BUG_RANK_SHIFT,     /* the experts ranked 2..k+1 instead of 1..k */
    BUG_SHARED_UNGATED, /* Qwen2-MoE: the shared expert added without its sigmoid gate */
} bug;

typedef struct spec {
    fam f;
    int layers, hidden, heads, kv_heads, head_dim, vocab, ctx;
    int E, k, F, S; /* experts, used per token, expert and shared-expert intermediate sizes */
    double theta, eps;
} spec;

typedef struct layer_w {
    float *in_norm, *ffn_norm, *q_norm, *k_norm, *bq, *bk, *bv, *wq, *wk, *wv, *wo, *router;
    float *eg[MAX_E], *eu[MAX_E], *ed[MAX_E];
    float *sg, *su, *sd, *sgate; /* shared expert (Qwen2-MoE) */
} layer_w;

typedef struct weights {
    float *embed, *final_norm, *lm_head;
    layer_w *l;
} weights;

static bool fam_norm(fam f) { return f == F_QWEN3MOE || f == F_MIXTRAL; }
static bool fam_whole_qk(fam f) { return f == F_OLMOE; }
static bool fam_head_qk(fam f) { return f == F_QWEN3MOE; }

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
    int H = s->hidden, q = s->heads * s->head_dim, kv = s->kv_heads * s->head_dim;
    w.embed = rand_vec((size_t)s->vocab * H, 0.0, 1.0);
    w.final_norm = rand_vec((size_t)H, 1.0, 0.3);
    w.lm_head = rand_mat(s->vocab, H);
    w.l = calloc((size_t)s->layers, sizeof *w.l);
    for (int l = 0; l < s->layers; l++) {
        layer_w *L = &w.l[l];
        L->in_norm = rand_vec((size_t)H, 1.0, 0.3);
        L->ffn_norm = rand_vec((size_t)H, 1.0, 0.3);
        L->wq = rand_mat(q, H), L->wk = rand_mat(kv, H), L->wv = rand_mat(kv, H), L->wo = rand_mat(H, q);
        if (fam_head_qk(s->f)) L->q_norm = rand_vec((size_t)s->head_dim, 1.0, 0.5), L->k_norm = rand_vec((size_t)s->head_dim, 1.0, 0.5);
        if (fam_whole_qk(s->f)) L->q_norm = rand_vec((size_t)q, 1.0, 0.5), L->k_norm = rand_vec((size_t)kv, 1.0, 0.5);
        if (s->f == F_QWEN2MOE) L->bq = rand_vec((size_t)q, 0, 0.5), L->bk = rand_vec((size_t)kv, 0, 0.5), L->bv = rand_vec((size_t)kv, 0, 0.5);
        L->router = rand_vec((size_t)s->E * H, 0.0, 3.0 / sqrt((double)H)); /* logits spread ~1 */
        for (int e = 0; e < s->E; e++)
            L->eg[e] = rand_mat(s->F, H), L->eu[e] = rand_mat(s->F, H), L->ed[e] = rand_mat(H, s->F);
        if (s->S > 0) {
            L->sg = rand_mat(s->S, H), L->su = rand_mat(s->S, H), L->sd = rand_mat(H, s->S);
            L->sgate = rand_vec((size_t)H, 0.0, 2.0 / sqrt((double)H));
        }
    }
    return w;
}

static void free_weights(const spec *s, weights *w) {
    free(w->embed), free(w->final_norm), free(w->lm_head);
    for (int l = 0; l < s->layers; l++) {
        layer_w *L = &w->l[l];
        free(L->in_norm), free(L->ffn_norm), free(L->q_norm), free(L->k_norm), free(L->bq), free(L->bk), free(L->bv);
        free(L->wq), free(L->wk), free(L->wv), free(L->wo), free(L->router);
        for (int e = 0; e < s->E; e++) free(L->eg[e]), free(L->eu[e]), free(L->ed[e]);
        free(L->sg), free(L->su), free(L->sd), free(L->sgate);
    }
    free(w->l);
}

/* ---- the float64 reference -------------------------------------------------- */

static void linear(double *y, const float *W, const double *x, int out, int in) {
    for (int o = 0; o < out; o++) {
        double s = 0;
        for (int i = 0; i < in; i++) s += (double)W[(size_t)o * in + i] * x[i];
        y[o] = s;
    }
}

static void rmsnorm(double *y, const double *x, const float *w, int n, double eps) {
    double ss = 0;
    for (int i = 0; i < n; i++) ss += x[i] * x[i];
    double r = 1.0 / sqrt(ss / n + eps);
    for (int i = 0; i < n; i++) y[i] = x[i] * r * w[i];
}

/* rotate-half RoPE over a whole head: pairs (i, i + hd/2) */
static void rope(double *x, int hd, int pos, double theta) {
    int half = hd / 2;
    for (int i = 0; i < half; i++) {
        double a = pos / pow(theta, 2.0 * i / hd), c = cos(a), s = sin(a);
        double x0 = x[i], x1 = x[i + half];
        x[i] = x0 * c - x1 * s;
        x[i + half] = x1 * c + x0 * s;
    }
}

static double silu(double g) { return g / (1.0 + exp(-g)); }

/* y += wt * W_down (silu(W_gate h) * W_up h) */
static void swiglu_add(double *y, double wt, const float *wg, const float *wu, const float *wd, const double *h, int H,
                       int F) {
    double *g = malloc((size_t)F * sizeof *g), *u = malloc((size_t)F * sizeof *u), *o = malloc((size_t)H * sizeof *o);
    linear(g, wg, h, F, H);
    linear(u, wu, h, F, H);
    for (int i = 0; i < F; i++) g[i] = silu(g[i]) * u[i];
    linear(o, wd, g, H, F);
    for (int i = 0; i < H; i++) y[i] += wt * o[i];
    free(g), free(u), free(o);
}

/* What the reference saw of the routing: the smallest gap between a row's
 * k-th and (k+1)-th router logits, and how many distinct experts each layer
 * chose over the rows. */
typedef struct routing {
    double min_gap;
    int distinct[64];
} routing;

/* The MoE MLP of one row: router softmax over all E, top k (ties: lower id),
 * weights renormalized per the family, the shared expert gated. */
static void moe_mlp(const spec *s, const layer_w *L, const double *h, double *y, bug b, bool *chosen, double *gap) {
    int H = s->hidden, E = s->E, k = s->k;
    double lg[MAX_E], p[MAX_E], mx = -INFINITY, sum = 0;
    linear(lg, L->router, h, E, H);
    for (int e = 0; e < E; e++) mx = fmax(mx, lg[e]);
    for (int e = 0; e < E; e++) sum += (p[e] = exp(lg[e] - mx));
    for (int e = 0; e < E; e++) p[e] /= sum;
    int order[MAX_E];
    for (int e = 0; e < E; e++) order[e] = e;
    for (int i = 1; i < E; i++) { /* insertion sort, descending; equal logits keep id order */
        int e = order[i], j = i;
        for (; j > 0 && lg[order[j - 1]] < lg[e]; j--) order[j] = order[j - 1];
        order[j] = e;
    }
    *gap = fmin(*gap, lg[order[k - 1]] - lg[order[k]]);
    int first = b == BUG_RANK_SHIFT ? 1 : 0;
    double wsum = 0;
    for (int j = first; j < first + k; j++) wsum += p[order[j]];
    bool norm = fam_norm(s->f) != (b == BUG_FLIP_NORM);
    for (int i = 0; i < H; i++) y[i] = 0;
    for (int j = first; j < first + k; j++) {
        int e = order[j];
        chosen[e] = true;
        swiglu_add(y, norm ? p[e] / wsum : p[e], L->eg[e], L->eu[e], L->ed[e], h, H, s->F);
    }
    if (s->S > 0) {
        double d = 0;
        for (int i = 0; i < H; i++) d += (double)L->sgate[i] * h[i];
        swiglu_add(y, b == BUG_SHARED_UNGATED ? 1.0 : 1.0 / (1.0 + exp(-d)), L->sg, L->su, L->sd, h, H, s->S);
    }
}

static void ref_forward(const spec *s, const weights *w, const int32_t *tok, int T, bug b, double *logits,
                        routing *rt) {
    int H = s->hidden, hd = s->head_dim, q_dim = s->heads * hd, kv_dim = s->kv_heads * hd;
    double *x = calloc((size_t)T * H, sizeof *x), *hn = calloc((size_t)H, sizeof *hn);
    double *q = calloc((size_t)T * q_dim, sizeof *q), *k = calloc((size_t)T * kv_dim, sizeof *k);
    double *v = calloc((size_t)T * kv_dim, sizeof *v), *att = calloc((size_t)q_dim, sizeof *att);
    double *o = calloc((size_t)H, sizeof *o), *y = calloc((size_t)H, sizeof *y), *p = calloc((size_t)T, sizeof *p);
    rt->min_gap = INFINITY;
    for (int t = 0; t < T; t++)
        for (int i = 0; i < H; i++) x[(size_t)t * H + i] = w->embed[(size_t)tok[t] * H + i];
    for (int l = 0; l < s->layers; l++) {
        const layer_w *L = &w->l[l];
        for (int t = 0; t < T; t++) {
            double *qt = q + (size_t)t * q_dim, *kt = k + (size_t)t * kv_dim, *vt = v + (size_t)t * kv_dim;
            rmsnorm(hn, x + (size_t)t * H, L->in_norm, H, s->eps);
            linear(qt, L->wq, hn, q_dim, H);
            linear(kt, L->wk, hn, kv_dim, H);
            linear(vt, L->wv, hn, kv_dim, H);
            if (L->bq)
                for (int i = 0; i < q_dim; i++) qt[i] += L->bq[i];
            if (L->bk)
                for (int i = 0; i < kv_dim; i++) kt[i] += L->bk[i], vt[i] += L->bv[i];
            if (fam_whole_qk(s->f)) { /* OLMoE: over the whole projection */
                rmsnorm(qt, qt, L->q_norm, q_dim, s->eps);
                rmsnorm(kt, kt, L->k_norm, kv_dim, s->eps);
            }
            for (int hh = 0; hh < s->heads; hh++) {
                if (fam_head_qk(s->f)) rmsnorm(qt + hh * hd, qt + hh * hd, L->q_norm, hd, s->eps);
                rope(qt + hh * hd, hd, t, s->theta);
            }
            for (int hh = 0; hh < s->kv_heads; hh++) {
                if (fam_head_qk(s->f)) rmsnorm(kt + hh * hd, kt + hh * hd, L->k_norm, hd, s->eps);
                rope(kt + hh * hd, hd, t, s->theta);
            }
        }
        bool chosen[MAX_E] = {false};
        for (int t = 0; t < T; t++) {
            for (int hh = 0; hh < s->heads; hh++) {
                int kvh = hh / (s->heads / s->kv_heads);
                double mx = -INFINITY, sum = 0;
                for (int j = 0; j <= t; j++) {
                    double d = 0;
                    for (int i = 0; i < hd; i++) d += q[(size_t)t * q_dim + hh * hd + i] * k[(size_t)j * kv_dim + kvh * hd + i];
                    p[j] = d / sqrt((double)hd);
                    mx = fmax(mx, p[j]);
                }
                for (int j = 0; j <= t; j++) sum += (p[j] = exp(p[j] - mx));
                for (int i = 0; i < hd; i++) {
                    double a = 0;
                    for (int j = 0; j <= t; j++) a += p[j] * v[(size_t)j * kv_dim + kvh * hd + i];
                    att[hh * hd + i] = a / sum;
                }
            }
            double *xt = x + (size_t)t * H;
            linear(o, L->wo, att, H, q_dim);
            for (int i = 0; i < H; i++) xt[i] += o[i];
            rmsnorm(hn, xt, L->ffn_norm, H, s->eps);
            moe_mlp(s, L, hn, y, b, chosen, &rt->min_gap);
            for (int i = 0; i < H; i++) xt[i] += y[i];
        }
        rt->distinct[l] = 0;
        for (int e = 0; e < s->E; e++) rt->distinct[l] += chosen[e];
    }
    for (int t = 0; t < T; t++) {
        rmsnorm(hn, x + (size_t)t * H, w->final_norm, H, s->eps);
        linear(logits + (size_t)t * s->vocab, w->lm_head, hn, s->vocab, H);
    }
    free(x), free(hn), free(q), free(k), free(v), free(att), free(o), free(y), free(p);
}

/* ---- writing the model files ------------------------------------------------ */

/* GGUF matrices in Q8_0 (every matmul then quantizes its activations into
 * the kernels' scratch: the failing-scratch test) */
static bool g_gguf_q8_0;

/* data (rows, in) as Q8_0 blocks: a half scale, then 32 int8 */
static void add_q8_0(gguf_writer *gw, const char *name, int n_dims, const int64_t *shape, const float *data) {
    int64_t in = shape[n_dims - 1], rows = 1;
    for (int i = 0; i < n_dims - 1; i++) rows *= shape[i];
    REQUIRE(in % 32 == 0);
    size_t nb = (size_t)(rows * in / 32);
    uint8_t *blocks = malloc(nb * 34);
    int8_t qs[32];
    for (size_t b = 0; b < nb; b++) {
        float d;
        matmul_quantize_row_q8_0(data + b * 32, 32, qs, &d);
        uint16_t h = fp16_f32_to_f16(d);
        memcpy(blocks + b * 34, &h, 2);
        memcpy(blocks + b * 34 + 2, qs, 32);
    }
    uint64_t ne[3];
    for (int i = 0; i < n_dims; i++) ne[i] = (uint64_t)shape[n_dims - 1 - i];
    gguf_writer_add_tensor(gw, name, GW_GGML_Q8_0, (uint32_t)n_dims, ne, blocks, nb * 34);
    free(blocks);
}

static void put(stw_writer *st, gguf_writer *gw, const char *hf, const char *gg, int n_dims, const int64_t *shape,
                const float *data) {
    if (st && hf) stw_add_f32(st, hf, n_dims, shape, data);
    if (gw && gg && g_gguf_q8_0 && n_dims >= 2) add_q8_0(gw, gg, n_dims, shape, data);
    else if (gw && gg) gguf_writer_add_tensor_f32(gw, gg, n_dims, shape, data);
}

/* llama.cpp's permutation of Q/K rows for GGUF `llama`: within each head,
 * row 2i <- i and 2i+1 <- i + hd/2. */
static float *permuted(const float *w, int heads, int hd, int cols) {
    float *p = malloc((size_t)heads * hd * cols * sizeof *p);
    for (int h = 0; h < heads; h++)
        for (int i = 0; i < hd / 2; i++)
            for (int s = 0; s < 2; s++)
                memcpy(p + ((size_t)h * hd + 2 * i + s) * cols, w + ((size_t)h * hd + i + s * hd / 2) * cols,
                       (size_t)cols * sizeof *p);
    return p;
}

/* the E matrices of (rows, cols) one after another: GGUF's stacked tensor */
static float *stacked(float *const *m, int E, int rows, int cols) {
    float *p = malloc((size_t)E * rows * cols * sizeof *p);
    for (int e = 0; e < E; e++) memcpy(p + (size_t)e * rows * cols, m[e], (size_t)rows * cols * sizeof *p);
    return p;
}

static const char *hf_type(fam f) {
    return f == F_QWEN3MOE ? "qwen3_moe" : f == F_MIXTRAL ? "mixtral" : f == F_OLMOE ? "olmoe" : "qwen2_moe";
}
static const char *gguf_arch(fam f) {
    return f == F_QWEN3MOE ? "qwen3moe" : f == F_MIXTRAL ? "llama" : f == F_OLMOE ? "olmoe" : "qwen2moe";
}

static void write_config(const spec *s, const char *dir) {
    char cfg[4096], extra[1024];
    if (s->f == F_MIXTRAL)
        snprintf(extra, sizeof extra, "\"num_local_experts\": %d, \"intermediate_size\": %d, \"sliding_window\": null",
                 s->E, s->F);
    else if (s->f == F_QWEN2MOE)
        snprintf(extra, sizeof extra,
                 "\"num_experts\": %d, \"moe_intermediate_size\": %d, \"intermediate_size\": 999, "
                 "\"shared_expert_intermediate_size\": %d, \"norm_topk_prob\": false, \"decoder_sparse_step\": 1, "
                 "\"mlp_only_layers\": [], \"use_sliding_window\": false",
                 s->E, s->F, s->S);
    else if (s->f == F_QWEN3MOE)
        snprintf(extra, sizeof extra,
                 "\"num_experts\": %d, \"moe_intermediate_size\": %d, \"intermediate_size\": 999, \"norm_topk_prob\": "
                 "true, \"decoder_sparse_step\": 1, \"mlp_only_layers\": [], \"head_dim\": %d",
                 s->E, s->F, s->head_dim);
    else /* OLMoE: norm_topk_prob left to its default (false) */
        snprintf(extra, sizeof extra, "\"num_experts\": %d, \"intermediate_size\": %d, \"clip_qkv\": null", s->E, s->F);
    snprintf(cfg, sizeof cfg,
             "{\"model_type\": \"%s\", \"hidden_size\": %d, \"num_hidden_layers\": %d, \"num_attention_heads\": %d,\n"
             " \"num_key_value_heads\": %d, \"vocab_size\": %d, \"max_position_embeddings\": %d, \"rope_theta\": %g,\n"
             " \"rms_norm_eps\": %g, \"num_experts_per_tok\": %d, \"tie_word_embeddings\": false, \"hidden_act\": "
             "\"silu\",\n \"bos_token_id\": 1, \"eos_token_id\": 2, %s}\n",
             hf_type(s->f), s->hidden, s->layers, s->heads, s->kv_heads, s->vocab, s->ctx, s->theta, s->eps, s->k,
             extra);
    char *path = test_join(dir, "config.json");
    test_write_file(path, cfg, strlen(cfg));
    free(path);
}

static void write_gguf_keys(const spec *s, gguf_writer *gw) {
    const char *a = gguf_arch(s->f);
    char k[128];
#define KEY(name) (snprintf(k, sizeof k, "%s.%s", a, name), k)
    gguf_writer_add_str(gw, "general.architecture", a);
    gguf_writer_add_u32(gw, KEY("context_length"), (uint32_t)s->ctx);
    gguf_writer_add_u32(gw, KEY("embedding_length"), (uint32_t)s->hidden);
    gguf_writer_add_u32(gw, KEY("feed_forward_length"), (uint32_t)(s->f == F_MIXTRAL ? s->F : 999));
    gguf_writer_add_u32(gw, KEY("block_count"), (uint32_t)s->layers);
    gguf_writer_add_u32(gw, KEY("attention.head_count"), (uint32_t)s->heads);
    gguf_writer_add_u32(gw, KEY("attention.head_count_kv"), (uint32_t)s->kv_heads);
    gguf_writer_add_u32(gw, KEY("attention.key_length"), (uint32_t)s->head_dim);
    gguf_writer_add_u32(gw, KEY("attention.value_length"), (uint32_t)s->head_dim);
    gguf_writer_add_u32(gw, KEY("rope.dimension_count"), (uint32_t)s->head_dim);
    gguf_writer_add_f32(gw, KEY("rope.freq_base"), (float)s->theta);
    gguf_writer_add_f32(gw, KEY("attention.layer_norm_rms_epsilon"), (float)s->eps);
    gguf_writer_add_u32(gw, KEY("expert_count"), (uint32_t)s->E);
    gguf_writer_add_u32(gw, KEY("expert_used_count"), (uint32_t)s->k);
    if (s->f != F_MIXTRAL) gguf_writer_add_u32(gw, KEY("expert_feed_forward_length"), (uint32_t)s->F);
    if (s->S > 0) gguf_writer_add_u32(gw, KEY("expert_shared_feed_forward_length"), (uint32_t)s->S);
#undef KEY
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
    int H = s->hidden, hd = s->head_dim, q = s->heads * hd, kv = s->kv_heads * hd, E = s->E, F = s->F;
    bool mixtral = s->f == F_MIXTRAL;
    put(st, gw, "model.embed_tokens.weight", "token_embd.weight", 2, (int64_t[]){s->vocab, H}, w->embed);
    put(st, gw, "model.norm.weight", "output_norm.weight", 1, (int64_t[]){H}, w->final_norm);
    put(st, gw, "lm_head.weight", "output.weight", 2, (int64_t[]){s->vocab, H}, w->lm_head);
    char hn[256], gn[256];
#define HF(...) (snprintf(hn, sizeof hn, __VA_ARGS__), hn)
#define GG(x) (snprintf(gn, sizeof gn, "blk.%d.%s", l, x), gn)
    for (int l = 0; l < s->layers; l++) {
        const layer_w *L = &w->l[l];
        put(st, gw, HF("model.layers.%d.input_layernorm.weight", l), GG("attn_norm.weight"), 1, (int64_t[]){H}, L->in_norm);
        put(st, gw, HF("model.layers.%d.post_attention_layernorm.weight", l), GG("ffn_norm.weight"), 1, (int64_t[]){H},
            L->ffn_norm);
        float *pq = mixtral ? permuted(L->wq, s->heads, hd, H) : NULL, *pk = mixtral ? permuted(L->wk, s->kv_heads, hd, H) : NULL;
        put(st, NULL, HF("model.layers.%d.self_attn.q_proj.weight", l), NULL, 2, (int64_t[]){q, H}, L->wq);
        put(st, NULL, HF("model.layers.%d.self_attn.k_proj.weight", l), NULL, 2, (int64_t[]){kv, H}, L->wk);
        put(NULL, gw, NULL, GG("attn_q.weight"), 2, (int64_t[]){q, H}, mixtral ? pq : L->wq);
        put(NULL, gw, NULL, GG("attn_k.weight"), 2, (int64_t[]){kv, H}, mixtral ? pk : L->wk);
        free(pq), free(pk);
        put(st, gw, HF("model.layers.%d.self_attn.v_proj.weight", l), GG("attn_v.weight"), 2, (int64_t[]){kv, H}, L->wv);
        put(st, gw, HF("model.layers.%d.self_attn.o_proj.weight", l), GG("attn_output.weight"), 2, (int64_t[]){H, q},
            L->wo);
        if (L->bq) {
            put(st, gw, HF("model.layers.%d.self_attn.q_proj.bias", l), GG("attn_q.bias"), 1, (int64_t[]){q}, L->bq);
            put(st, gw, HF("model.layers.%d.self_attn.k_proj.bias", l), GG("attn_k.bias"), 1, (int64_t[]){kv}, L->bk);
            put(st, gw, HF("model.layers.%d.self_attn.v_proj.bias", l), GG("attn_v.bias"), 1, (int64_t[]){kv}, L->bv);
        }
        if (L->q_norm) {
            int nq = fam_whole_qk(s->f) ? q : hd, nk = fam_whole_qk(s->f) ? kv : hd;
            put(st, gw, HF("model.layers.%d.self_attn.q_norm.weight", l), GG("attn_q_norm.weight"), 1, (int64_t[]){nq},
                L->q_norm);
            put(st, gw, HF("model.layers.%d.self_attn.k_norm.weight", l), GG("attn_k_norm.weight"), 1, (int64_t[]){nk},
                L->k_norm);
        }
        const char *blk = mixtral ? "block_sparse_moe" : "mlp";
        put(st, gw, HF("model.layers.%d.%s.gate.weight", l, blk), GG("ffn_gate_inp.weight"), 2, (int64_t[]){E, H},
            L->router);
        for (int e = 0; e < E; e++) {
            put(st, NULL, HF("model.layers.%d.%s.experts.%d.%s.weight", l, blk, e, mixtral ? "w1" : "gate_proj"), NULL, 2,
                (int64_t[]){F, H}, L->eg[e]);
            put(st, NULL, HF("model.layers.%d.%s.experts.%d.%s.weight", l, blk, e, mixtral ? "w3" : "up_proj"), NULL, 2,
                (int64_t[]){F, H}, L->eu[e]);
            put(st, NULL, HF("model.layers.%d.%s.experts.%d.%s.weight", l, blk, e, mixtral ? "w2" : "down_proj"), NULL,
                2, (int64_t[]){H, F}, L->ed[e]);
        }
        float *g = stacked(L->eg, E, F, H), *u = stacked(L->eu, E, F, H), *d = stacked(L->ed, E, H, F);
        put(NULL, gw, NULL, GG("ffn_gate_exps.weight"), 3, (int64_t[]){E, F, H}, g);
        put(NULL, gw, NULL, GG("ffn_up_exps.weight"), 3, (int64_t[]){E, F, H}, u);
        put(NULL, gw, NULL, GG("ffn_down_exps.weight"), 3, (int64_t[]){E, H, F}, d);
        free(g), free(u), free(d);
        if (s->S > 0) {
            put(st, gw, HF("model.layers.%d.mlp.shared_expert.gate_proj.weight", l), GG("ffn_gate_shexp.weight"), 2,
                (int64_t[]){s->S, H}, L->sg);
            put(st, gw, HF("model.layers.%d.mlp.shared_expert.up_proj.weight", l), GG("ffn_up_shexp.weight"), 2,
                (int64_t[]){s->S, H}, L->su);
            put(st, gw, HF("model.layers.%d.mlp.shared_expert.down_proj.weight", l), GG("ffn_down_shexp.weight"), 2,
                (int64_t[]){H, s->S}, L->sd);
            /* a (1, hidden) Linear in transformers, a (hidden) vector in GGUF */
            put(st, NULL, HF("model.layers.%d.mlp.shared_expert_gate.weight", l), NULL, 2, (int64_t[]){1, H}, L->sgate);
            put(NULL, gw, NULL, GG("ffn_gate_inp_shexp.weight"), 1, (int64_t[]){H}, L->sgate);
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

static pdl_model *load(const char *path, int threads) {
    pdl_model *m = NULL;
    pdl_error err;
    pdl_model_options o = {.n_threads = threads, .log = test_log_no_unused_tensors, .log_user = (void *)path};
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

static spec family_spec(fam f) {
    spec s = {.f = f, .layers = 3, .hidden = 64, .heads = 4, .kv_heads = 2, .head_dim = 16, .vocab = 128, .ctx = 256,
              .E = 8, .k = 2, .F = 32, .theta = 10000, .eps = 1e-6};
    if (f == F_OLMOE) s.k = 3, s.E = 10;
    if (f == F_QWEN2MOE) s.k = 3, s.S = 48;
    return s;
}

static void make_tokens(const spec *s, int32_t *tok, int T, uint64_t seed) {
    rng_state = seed * 0x9E3779B97F4A7C15ull + 1; /* spread small seeds over the state */
    for (int t = 0; t < T; t++) tok[t] = (int32_t)((urand() + 1.0) * 0.5 * (s->vocab - 1));
}

/* Engine (HF and GGUF) vs the reference; the engine runs each chosen expert
 * once per layer over all its rows (moe_expert_runs); each listed mistake
 * must move the reference by more than 100x the tolerance. */
static void check_family(fam f, const char *name, const bug *bugs, int n_bugs) {
    spec s = family_spec(f);
    weights w = make_weights(&s, 0x5851F42D4C957F2Dull ^ (uint64_t)f);
    char *hf = NULL, *gg = NULL;
    write_model(&s, &w, name, &hf, &gg);
    enum { T = 24 };
    int32_t tok[T];
    make_tokens(&s, tok, T, 177 + f);
    size_t n = (size_t)T * s.vocab;
    double *want = malloc(n * sizeof *want), *bad = malloc(n * sizeof *bad);
    routing rt;
    ref_forward(&s, &w, tok, T, BUG_NONE, want, &rt);
    REQUIRE_MSG(rt.min_gap > 1e-4, "%s: a router near-tie (gap %g): pick another seed", name, rt.min_gap);
    int want_runs = 0;
    for (int l = 0; l < s.layers; l++) want_runs += rt.distinct[l];
    const char *paths[2] = {hf, gg};
    for (int i = 0; i < 2; i++) {
        pdl_model *m = load(paths[i], 2);
        pdl_model_info info;
        pdl_model_get_info(m, &info);
        CHECK_EQ_INT(info.n_experts, s.E);
        CHECK_EQ_INT(info.n_experts_used, s.k);
        CHECK_EQ_INT(info.ffn, s.F);
        pdl_context *ctx = test_context(m);
        float *got = test_context_row_logits(ctx, tok, T);
        double d = max_diff(got, want, n);
        fprintf(stderr, "  %s %s: max |engine - float64| = %.3g (router gap >= %.3g)\n", name, i ? "gguf" : "hf", d,
                rt.min_gap);
        CHECK_MSG(d <= TOL, "%s (%s): logits differ from the float64 reference by %g (tolerance %g)", name,
                  i ? "GGUF" : "HF", d, TOL);
        /* one prefill of T rows: every chosen expert ran exactly once per layer */
        int runs = (int)pdl_context_expert_runs(ctx);
        pdl_context_free(ctx);
        CHECK_MSG(runs == want_runs, "%s: %d expert runs for a %d-row prefill, want %d", name, runs, T, want_runs);
        bool ok = false;
        char why[256] = "";
        pdl_error perr;
        CHECK_MSG(pdl_model_probe_selective_logits(m, &ok, why, sizeof why, &perr) == 0 && ok, "%s: probe: %s", name, why);
        free(got);
        pdl_model_free(m);
    }
    for (int b = 0; b < n_bugs; b++) {
        routing r2;
        ref_forward(&s, &w, tok, T, bugs[b], bad, &r2);
        double d = max_diff_d(bad, want, n);
        CHECK_MSG(d > 100 * TOL, "%s: reference variant %d moves logits by only %g: the test could not see it", name,
                  (int)bugs[b], d);
    }
    free(want), free(bad), free(hf), free(gg);
    free_weights(&s, &w);
}

/* Qwen3-MoE: per-head q/k RMSNorm, softmax top-2 of 8 renormalized
 * (norm_topk_prob, which llama.cpp always applies for qwen3moe). */
static void test_qwen3moe_matches_float64_reference(void) {
    bug bugs[] = {BUG_FLIP_NORM, BUG_RANK_SHIFT};
    check_family(F_QWEN3MOE, "qwen3moe", bugs, 2);
}

/* Mixtral: Hugging Face block_sparse_moe w1/w3/w2; GGUF `llama` with
 * experts and permuted Q/K; top-2 of 8, renormalized. */
static void test_mixtral_matches_float64_reference(void) {
    bug bugs[] = {BUG_FLIP_NORM, BUG_RANK_SHIFT};
    check_family(F_MIXTRAL, "mixtral", bugs, 2);
}

/* OLMoE: q/k RMSNorm over the whole projection; top-3 of 10 softmax
 * probabilities, not renormalized. */
static void test_olmoe_matches_float64_reference(void) {
    bug bugs[] = {BUG_FLIP_NORM, BUG_RANK_SHIFT};
    check_family(F_OLMOE, "olmoe", bugs, 2);
}

/* Qwen2-MoE: QKV biases, top-3 of 8 not renormalized, and a shared expert
 * times sigmoid(w . x). */
static void test_qwen2moe_shared_expert_matches_float64_reference(void) {
    bug bugs[] = {BUG_FLIP_NORM, BUG_SHARED_UNGATED};
    check_family(F_QWEN2MOE, "qwen2moe", bugs, 2);
}

/* ---- the batch contract ------------------------------------------------------ */

#define BS 16

/* One forward over n_seqs sequences, each given its own blocks (seq s owns
 * blocks [s * 8, s * 8 + 8)), each at its own cached length; every row's
 * logits, in order. */
static void run_packed(pdl_context *ctx, pdl_kv_cache *kv, int n_seqs, const int32_t *const *toks, const int *n,
                       const int *cached, const int *blockbase, float *out) {
    int32_t ids[256], pos[256], slots[256], cu[9], lidx[256], tables[8][8];
    const int32_t *tp[8];
    int r = 0;
    cu[0] = 0;
    for (int s = 0; s < n_seqs; s++) {
        for (int b = 0; b < 8; b++) tables[s][b] = blockbase[s] + b;
        tp[s] = tables[s];
        for (int i = 0; i < n[s]; i++, r++) {
            int p = cached[s] + i;
            ids[r] = toks[s][i], pos[r] = p, slots[r] = tables[s][p / BS] * BS + p % BS, lidx[r] = r;
        }
        cu[s + 1] = r;
    }
    pdl_batch b = {.n_tokens = r, .token_ids = ids, .positions = pos, .slot_mapping = slots, .n_seqs = n_seqs,
                   .cu_seqlens = cu, .block_tables = tp, .n_logits = r, .logits_indices = lidx};
    pdl_error err;
    REQUIRE_MSG(pdl_forward(ctx, kv, &b, out, &err) == 0, "%s", err.message);
}

/* Three prompts alone, then packed in one batch in two orders: each row's
 * logits are the same bytes (a row's expert sums keep their own order
 * whichever other rows chose the same experts); then one decode row beside
 * another sequence's prefill (experts run one by one) or beside another
 * decode row (experts grouped in one region) equals that decode row alone
 * (grouped too), and a decode step runs exactly k experts per layer. */
static void check_batch_invariance(const char *path, const spec *s) {
    pdl_model *m = load(path, 2);
    pdl_context *ctx = test_context(m);
    int V = s->vocab;
    int32_t all[64];
    make_tokens(s, all, 64, 4242);
    const int32_t *toks[3] = {all, all + 5, all + 20};
    int n[3] = {7, 13, 30}, zero[3] = {0, 0, 0}, base_alone[3] = {0, 0, 0};
    float *alone[3], *packed = malloc((size_t)50 * V * sizeof *packed);
    pdl_error err;
    for (int i = 0; i < 3; i++) {
        pdl_kv_cache *kv = NULL;
        REQUIRE_MSG(pdl_kv_cache_create(&kv, m, PDL_KV_F32, BS, 32, &err) == 0, "%s", err.message);
        alone[i] = malloc((size_t)n[i] * V * sizeof(float));
        run_packed(ctx, kv, 1, &toks[i], &n[i], zero, base_alone, alone[i]);
        pdl_kv_cache_free(kv);
    }
    for (int order = 0; order < 2; order++) {
        int idx[3] = {0, 1, 2};
        if (order) idx[0] = 2, idx[1] = 0, idx[2] = 1;
        const int32_t *t3[3];
        int n3[3], base[3] = {0, 8, 16};
        for (int j = 0; j < 3; j++) t3[j] = toks[idx[j]], n3[j] = n[idx[j]];
        pdl_kv_cache *kv = NULL;
        REQUIRE_MSG(pdl_kv_cache_create(&kv, m, PDL_KV_F32, BS, 32, &err) == 0, "%s", err.message);
        run_packed(ctx, kv, 3, t3, n3, zero, base, packed);
        size_t off = 0;
        for (int j = 0; j < 3; j++) {
            CHECK_MSG(memcmp(packed + off * V, alone[idx[j]], (size_t)n3[j] * V * sizeof(float)) == 0,
                      "%s order %d: sequence %d packed differs from alone", path, order, idx[j]);
            off += (size_t)n3[j];
        }
        pdl_kv_cache_free(kv);
    }
    /* decode: sequence 0's 7 cached, its 8th token alone, then beside
     * sequence 2's prefill */
    float *dec_alone = malloc((size_t)V * sizeof(float)), *dec_mixed = malloc((size_t)31 * V * sizeof(float));
    for (int mixed = 0; mixed < 3; mixed++) {
        pdl_kv_cache *kv = NULL;
        REQUIRE_MSG(pdl_kv_cache_create(&kv, m, PDL_KV_F32, BS, 32, &err) == 0, "%s", err.message);
        int base[2] = {0, 8}, one = 1, cached[2] = {7, 0};
        run_packed(ctx, kv, 1, &toks[0], &n[0], zero, base, packed);
        const int32_t *dec_tok = all + 7;
        if (mixed == 2) {
            /* two decode rows in one step (the grouped experts' path with
             * gathered rows): sequence 0's row as alone */
            run_packed(ctx, kv, 1, &toks[1], &n[1], zero, base + 1, packed);
            const int32_t *t2[2] = {dec_tok, all + 40};
            int n2[2] = {1, 1}, cached2[2] = {7, n[1]};
            run_packed(ctx, kv, 2, t2, n2, cached2, base, dec_mixed);
            CHECK_MSG(memcmp(dec_mixed, dec_alone, (size_t)V * sizeof(float)) == 0,
                      "%s: a decode row beside another decode row differs from the row alone", path);
        } else if (!mixed) {
            uint64_t runs0 = pdl_context_expert_runs(ctx);
            run_packed(ctx, kv, 1, &dec_tok, &one, cached, base, dec_alone);
            CHECK_EQ_INT((int)(pdl_context_expert_runs(ctx) - runs0), s->layers * s->k);
        } else {
            const int32_t *t2[2] = {dec_tok, toks[2]};
            int n2[2] = {1, n[2]};
            run_packed(ctx, kv, 2, t2, n2, cached, base, dec_mixed);
            CHECK_MSG(memcmp(dec_mixed, dec_alone, (size_t)V * sizeof(float)) == 0,
                      "%s: a decode row beside a prefill differs from the row alone", path);
            CHECK_MSG(memcmp(dec_mixed + V, alone[2], (size_t)n[2] * V * sizeof(float)) == 0,
                      "%s: a prefill beside a decode row differs from the prefill alone", path);
        }
        pdl_kv_cache_free(kv);
    }
    free(dec_alone), free(dec_mixed), free(packed);
    for (int i = 0; i < 3; i++) free(alone[i]);
    pdl_context_free(ctx);
    pdl_model_free(m);
}

static void test_moe_rows_are_batch_invariant(void) {
    spec s = family_spec(F_QWEN2MOE); /* experts, shared expert and its gate */
    weights w = make_weights(&s, 99);
    char *hf = NULL, *gg = NULL;
    write_model(&s, &w, "moe-batch", &hf, &gg);
    check_batch_invariance(gg, &s);
    check_batch_invariance(hf, &s);
    free(hf), free(gg);
    free_weights(&s, &w);
}

/* A MoE forward whose matmuls cannot have their scratch returns an error
 * and reports no logits, at every matmul of the layer (router, experts run
 * one by one in a prefill and grouped in a decode, the shared expert) and
 * of attention and the head (test_util.h). Q8_0 weights, so that every
 * matmul takes scratch on every instruction set. */
static void test_moe_forward_reports_scratch_failure(void) {
    fp16_init();
    spec s = family_spec(F_QWEN2MOE);
    s.S = 64; /* Q8_0 rows are whole blocks of 32 */
    weights w = make_weights(&s, 7);
    char *hf = NULL, *gg = NULL;
    g_gguf_q8_0 = true;
    write_model(&s, &w, "moe-scratch", &hf, &gg);
    g_gguf_q8_0 = false;
    pdl_model *m = load(gg, 2);
    pdl_model_info info;
    pdl_model_get_info(m, &info);
    CHECK_CONTAINS(info.weight_types, "Q8_0");
    int32_t tok[24];
    make_tokens(&s, tok, 24, 31);
    pdl_context *ctx = test_context(m);
    int n = test_forward_fails_at_every_scratch_take(ctx, tok, 24);
    fprintf(stderr, "  %d failing forwards checked\n", n);
    CHECK(pdl_context_expert_runs(ctx) > 0);
    pdl_context_free(ctx);
    pdl_model_free(m);
    free(hf), free(gg);
    free_weights(&s, &w);
}

/* ---- routing ------------------------------------------------------------------ */

/* moe_route on hand-made logits: the order, ties to the lower id, the
 * softmax over all experts, renormalization, sigmoid, the scale. */
static void test_route_orders_ties_and_weights(void) {
    pdl_model_config c = {.n_experts = 6, .n_experts_used = 3, .router = PDL_ROUTER_SOFTMAX, .router_scale = 1.0f};
    const float lg[6] = {0.5f, 2.0f, -1.0f, 2.0f, 1.0f, 0.5f};
    int32_t sel[3];
    float w[3];
    moe_route(&c, lg, sel, w);
    CHECK_EQ_INT(sel[0], 1);
    CHECK_EQ_INT(sel[1], 3);
    CHECK_EQ_INT(sel[2], 4);
    double z = 0;
    for (int e = 0; e < 6; e++) z += exp(lg[e] - 2.0);
    CHECK(fabs(w[0] - 1.0 / z) < 1e-6 && fabs(w[1] - 1.0 / z) < 1e-6 && fabs(w[2] - exp(-1.0) / z) < 1e-6);
    c.router_norm = true;
    c.router_scale = 2.5f;
    moe_route(&c, lg, sel, w);
    double s3 = 2.0 + exp(-1.0);
    CHECK(fabs(w[0] - 2.5 / s3) < 1e-6 && fabs(w[2] - 2.5 * exp(-1.0) / s3) < 1e-6);
    c.router = PDL_ROUTER_SIGMOID, c.router_norm = false, c.router_scale = 1.0f;
    moe_route(&c, lg, sel, w);
    CHECK(fabs(w[0] - 1.0 / (1.0 + exp(-2.0))) < 1e-6 && fabs(w[2] - 1.0 / (1.0 + exp(-1.0))) < 1e-6);
    c.n_experts_used = 1; /* the tie of 0.5 and 0.5 below 2.0: k = 5 takes expert 0 before 5 */
    moe_route(&c, lg, sel, w);
    CHECK_EQ_INT(sel[0], 1);
    int32_t sel5[5];
    float w5[5];
    c.n_experts_used = 5;
    moe_route(&c, lg, sel5, w5);
    CHECK_EQ_INT(sel5[3], 0);
    CHECK_EQ_INT(sel5[4], 5);
}

/* Broken MoE descriptions are refused with the field or tensor named. */
static void test_broken_moe_files_are_named(void) {
    spec s = family_spec(F_QWEN3MOE);
    s.layers = 1;
    weights w = make_weights(&s, 5);
    char *hf = NULL, *gg = NULL;
    write_model(&s, &w, "moe-broken", &hf, &gg);
    spec bad = s;
    bad.k = 9; /* more experts per token than experts */
    write_config(&bad, hf);
    pdl_model *m = NULL;
    pdl_error err;
    CHECK(pdl_model_load(&m, hf, NULL, &err) != 0);
    CHECK_CONTAINS(err.message, "9 used per token");
    bad = s;
    bad.E = 7; /* the files hold 8 */
    write_config(&bad, hf);
    CHECK(pdl_model_load(&m, hf, NULL, &err) != 0);
    CHECK_CONTAINS(err.message, "model.layers.0.mlp.gate.weight");
    /* a GGUF whose stacked experts disagree with expert_count */
    gguf_writer *gw = gguf_writer_new(3);
    write_gguf_keys(&bad, gw);
    int64_t sh[3] = {8, s.F, s.hidden};
    float *z = calloc((size_t)8 * s.F * s.hidden, sizeof *z);
    gguf_writer_add_tensor_f32(gw, "blk.0.ffn_gate_exps.weight", 3, sh, z);
    free(z);
    char *g2 = test_tmp_path("moe-broken/stack.gguf");
    REQUIRE(gguf_writer_write(gw, g2) == 0);
    gguf_writer_free(gw);
    CHECK(pdl_model_load(&m, g2, NULL, &err) != 0);
    CHECK_CONTAINS(err.message, g2);
    free(g2), free(hf), free(gg);
    free_weights(&s, &w);
}

int main(void) {
    /* exact F32 products: the reference multiplies unrounded activations */
    setenv("PAGEDLM_BF16_ACTIVATIONS", "0", 1); /* for the pagedlm runs */
    pdl_error kerr;
    REQUIRE(pdl_set_kernels(NULL, 0, &kerr) == 0);
    RUN(test_route_orders_ties_and_weights);
    RUN(test_qwen3moe_matches_float64_reference);
    RUN(test_mixtral_matches_float64_reference);
    RUN(test_olmoe_matches_float64_reference);
    RUN(test_qwen2moe_shared_expert_matches_float64_reference);
    RUN(test_moe_rows_are_batch_invariant);
    RUN(test_moe_forward_reports_scratch_failure);
    RUN(test_broken_moe_files_are_named);
    return test_summary();
}
