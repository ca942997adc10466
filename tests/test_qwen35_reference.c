/*
 * test_qwen35_reference.c - Qwen3.5 and Qwen3.5-MoE (hybrid Gated DeltaNet
 * linear attention + gated full attention) against a float64 forward written
 * from the published description: transformers' modeling_qwen3_5.py /
 * modeling_qwen3_next.py (Qwen3_5GatedDeltaNet with
 * torch_recurrent_gated_delta_rule, Qwen3_5Attention, Qwen3_5RMSNorm(Gated),
 * the Qwen3-Next sparse MoE block). No code is shared with src/.
 *
 * The models are tiny and random (tests/support/qwen35_writer.h), written as
 * a Hugging Face folder and as the GGUF llama.cpp's converter makes (value
 * heads reordered to tiled order, ssm_a = -exp(A_log), norms + 1), so both
 * loaders' reading of the layouts is checked too. Qwen3-Next is
 * Qwen3.5-MoE's math in other layouts (q, k, v, z and b, a fused per key
 * head; value heads grouped in its GGUF too): the same reference checks
 * its files. The reference is the
 * recurrent form, one token at a time: a causal depthwise conv of kernel 4
 * with SiLU over q, k, v (zeros before position 0); q and k L2-normalised
 * (eps 1e-6 inside the square root), q times 1/sqrt(k_dim); per value head
 * h (reading key head h / (v_heads / k_heads)): g = -exp(A_log) *
 * softplus(a + dt_bias), beta = sigmoid(b), S *= exp(g),
 * delta = beta (v - S^T k), S += k delta^T, o = S^T q; then
 * rmsnorm(o) * w * silu(z) and out_proj. Full attention: q_proj gives per
 * head its query then its gate, (1 + w) RMSNorm of q and k per head, NEOX
 * RoPE on the first quarter of head_dim (text rows: every M-RoPE section at
 * the same position, so plain partial RoPE), softmax attention, times
 * sigmoid(gate), o_proj. Blocks x + mixer(norm(x)), x + mlp(norm(x)); the
 * MoE MLP: softmax router, top k renormalised, plus the shared expert times
 * sigmoid(w . x).
 *
 * Tolerance: 3e-5 of the sequence's largest |logit| (logits reach ~4 with
 * the dense model's own head, ~20 with the MoE model's tied one): the
 * engine runs in float32 (F32 weights and K/V), and over 8 layers, a
 * recurrence of up to 150 positions and the chunked delta rule's matrix
 * products (another summation order than the reference's token by token)
 * float32 rounding adds up to 5e-6..7e-6 of that, 1.2e-5 for the
 * Qwen3-Next weights' 150 tokens (measured; each check prints its
 * numbers). Each mutation of the reference (conv reading the next position, decay sign flipped,
 * beta fixed at 1, the gate applied before the norm, the layer kinds shifted
 * by one, value heads read as tiled) must move the logits by more than 100x
 * the tolerance. However the rows are cut into calls (one call, token by
 * token, 7 at a time) each row's logits must be the same bytes (the state
 * is kept at absolute 64-position chunks). Routing must not be a coin toss: every row's k-th and
 * (k+1)-th router logits differ by more than 1e-4 in the reference.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/fp16.h"
#include "kernels/matmul.h"
#include "model/context.h"
#include "model/kv_cache.h"
#include "pagedlm.h"
#include "support/qwen35_writer.h"
#include "test_util.h"

#define TOL_REL 3e-5 /* of the largest |logit| of the sequence (at least 1) */
#define MAX_E 16

typedef enum bug {
    BUG_NONE,
    BUG_CONV_READS_NEXT, /* the conv window one position later: it reads the next position */
    BUG_DECAY_SIGN,      /* S *= exp(-g) */
    BUG_BETA_ONE,        /* beta left out (1) */
    BUG_GATE_BEFORE_NORM,/* rmsnorm(o * silu(z)) * w instead of rmsnorm(o) * w * silu(z) */
    BUG_KIND_SHIFT,      /* the full-attention layers one earlier: l % interval == interval - 2 */
    BUG_V_TILED,         /* value head h reads key head h % k_heads (the GGUF's order, on HF weights) */
    N_BUGS
} bug;

static const char *bug_name[N_BUGS] = {"none", "conv reads the next position", "decay sign flipped",
                                       "beta missing (1)", "gate before the norm", "layer kind off by one",
                                       "value heads read as tiled"};

/* ---- the float64 reference -------------------------------------------------- */

static void linear(double *y, const float *W, const double *x, int out, int in) {
    for (int o = 0; o < out; o++) {
        double s = 0;
        for (int i = 0; i < in; i++) s += (double)W[(size_t)o * in + i] * x[i];
        y[o] = s;
    }
}

/* Qwen3_5RMSNorm: x / rms(x) * (1 + w) */
static void rmsnorm_1p(double *y, const double *x, const float *w, int n, double eps) {
    double ss = 0;
    for (int i = 0; i < n; i++) ss += x[i] * x[i];
    double r = 1.0 / sqrt(ss / n + eps);
    for (int i = 0; i < n; i++) y[i] = x[i] * r * (1.0 + (double)w[i]);
}

static double silu(double g) { return g / (1.0 + exp(-g)); }
static double sigmoid(double g) { return 1.0 / (1.0 + exp(-g)); }
static double softplus(double x) { return x > 20 ? x : log1p(exp(x)); }

static void l2norm(double *x, int n) {
    double ss = 0;
    for (int i = 0; i < n; i++) ss += x[i] * x[i];
    double r = 1.0 / sqrt(ss + 1e-6);
    for (int i = 0; i < n; i++) x[i] *= r;
}

static bool ref_linear_kind(const q35_spec *s, int l, bug b) {
    if (b == BUG_KIND_SHIFT) return l % s->full_attention_interval != s->full_attention_interval - 2;
    return q35_layer_is_linear(s, l);
}

/* The Gated DeltaNet mixer over all T rows of one sequence: hn [T][H] in,
 * y [T][H] out. */
static void ref_deltanet(const q35_spec *s, const q35_layer *L, const double *hn, double *y, int T, bug b) {
    int H = s->hidden, K = s->conv, cd = q35_conv_dim(s);
    int kh = s->lin_k_heads, vh = s->lin_v_heads, dk = s->lin_k_dim, dv = s->lin_v_dim, vdim = vh * dv;
    double *mixed = calloc((size_t)T * cd, sizeof *mixed), *conv = calloc((size_t)cd, sizeof *conv);
    double *z = calloc((size_t)vdim, sizeof *z), *bb = calloc((size_t)vh, sizeof *bb), *aa = calloc((size_t)vh, sizeof *aa);
    double *S = calloc((size_t)vh * dk * dv, sizeof *S), *o = calloc((size_t)vdim, sizeof *o);
    double *q = calloc((size_t)dk, sizeof *q), *k = calloc((size_t)dk, sizeof *k), *mem = calloc((size_t)dv, sizeof *mem);
    for (int t = 0; t < T; t++) linear(mixed + (size_t)t * cd, L->qkv, hn + (size_t)t * H, cd, H);
    for (int t = 0; t < T; t++) {
        const double *x = hn + (size_t)t * H;
        /* causal depthwise conv, then SiLU: tap j reads position t - (K-1) + j */
        int shift = b == BUG_CONV_READS_NEXT ? 1 : 0;
        for (int c = 0; c < cd; c++) {
            double acc = 0;
            for (int j = 0; j < K; j++) {
                int p = t - (K - 1) + j + shift;
                if (p >= 0 && p < T) acc += (double)L->conv[(size_t)c * K + j] * mixed[(size_t)p * cd + c];
            }
            conv[c] = silu(acc);
        }
        linear(z, L->z, x, vdim, H);
        linear(bb, L->b, x, vh, H);
        linear(aa, L->a, x, vh, H);
        const double *cq = conv, *ck = conv + kh * dk, *cv = conv + 2 * kh * dk;
        for (int h = 0; h < vh; h++) {
            int khh = b == BUG_V_TILED ? h % kh : h / (vh / kh);
            for (int i = 0; i < dk; i++) q[i] = cq[khh * dk + i], k[i] = ck[khh * dk + i];
            l2norm(q, dk), l2norm(k, dk);
            for (int i = 0; i < dk; i++) q[i] /= sqrt((double)dk);
            double g = -exp((double)L->A_log[h]) * softplus(aa[h] + (double)L->dt_bias[h]);
            double beta = b == BUG_BETA_ONE ? 1.0 : sigmoid(bb[h]);
            double decay = exp(b == BUG_DECAY_SIGN ? -g : g);
            double *Sh = S + (size_t)h * dk * dv; /* [dk][dv] */
            for (size_t i = 0; i < (size_t)dk * dv; i++) Sh[i] *= decay;
            for (int j = 0; j < dv; j++) {
                double m = 0;
                for (int i = 0; i < dk; i++) m += Sh[(size_t)i * dv + j] * k[i];
                mem[j] = beta * (cv[h * dv + j] - m); /* delta */
            }
            for (int i = 0; i < dk; i++)
                for (int j = 0; j < dv; j++) Sh[(size_t)i * dv + j] += k[i] * mem[j];
            double *oh = o + h * dv, ss = 0;
            for (int j = 0; j < dv; j++) {
                double a = 0;
                for (int i = 0; i < dk; i++) a += Sh[(size_t)i * dv + j] * q[i];
                oh[j] = a;
            }
            /* gated RMSNorm over the head: rmsnorm(o) * w * silu(z) */
            if (b == BUG_GATE_BEFORE_NORM)
                for (int j = 0; j < dv; j++) oh[j] *= silu(z[h * dv + j]);
            for (int j = 0; j < dv; j++) ss += oh[j] * oh[j];
            double r = 1.0 / sqrt(ss / dv + s->eps);
            for (int j = 0; j < dv; j++) {
                oh[j] *= r * (double)L->lin_norm[j];
                if (b != BUG_GATE_BEFORE_NORM) oh[j] *= silu(z[h * dv + j]);
            }
        }
        linear(y + (size_t)t * H, L->out, o, H, vdim);
    }
    free(mixed), free(conv), free(z), free(bb), free(aa), free(S), free(o), free(q), free(k), free(mem);
}

/* NEOX RoPE on the first rot dims of a head: pairs (i, i + rot/2) */
static void rope_partial(double *x, int rot, int pos, double theta) {
    int half = rot / 2;
    for (int i = 0; i < half; i++) {
        double a = pos / pow(theta, 2.0 * i / rot), c = cos(a), sn = sin(a);
        double x0 = x[i], x1 = x[i + half];
        x[i] = x0 * c - x1 * sn;
        x[i + half] = x1 * c + x0 * sn;
    }
}

/* Gated full attention over all T rows. */
static void ref_attention(const q35_spec *s, const q35_layer *L, const double *hn, double *y, int T) {
    int H = s->hidden, hd = s->head_dim, nh = s->heads, nkv = s->kv_heads, rot = q35_rope_dim(s);
    int qd = nh * hd, kvd = nkv * hd;
    double *qg = calloc((size_t)2 * qd, sizeof *qg), *q = calloc((size_t)T * qd, sizeof *q);
    double *gate = calloc((size_t)T * qd, sizeof *gate), *k = calloc((size_t)T * kvd, sizeof *k);
    double *v = calloc((size_t)T * kvd, sizeof *v), *att = calloc((size_t)qd, sizeof *att), *p = calloc((size_t)T, sizeof *p);
    for (int t = 0; t < T; t++) {
        const double *x = hn + (size_t)t * H;
        linear(qg, L->wq, x, 2 * qd, H);
        double *qt = q + (size_t)t * qd, *kt = k + (size_t)t * kvd;
        for (int h = 0; h < nh; h++) {
            memcpy(qt + h * hd, qg + 2 * h * hd, (size_t)hd * sizeof *qt);
            memcpy(gate + (size_t)t * qd + h * hd, qg + 2 * h * hd + hd, (size_t)hd * sizeof *qt);
            rmsnorm_1p(qt + h * hd, qt + h * hd, L->q_norm, hd, s->eps);
            rope_partial(qt + h * hd, rot, t, s->theta);
        }
        linear(kt, L->wk, x, kvd, H);
        linear(v + (size_t)t * kvd, L->wv, x, kvd, H);
        for (int h = 0; h < nkv; h++) {
            rmsnorm_1p(kt + h * hd, kt + h * hd, L->k_norm, hd, s->eps);
            rope_partial(kt + h * hd, rot, t, s->theta);
        }
    }
    for (int t = 0; t < T; t++) {
        for (int h = 0; h < nh; h++) {
            int kvh = h / (nh / nkv);
            double mx = -INFINITY, sum = 0;
            for (int j = 0; j <= t; j++) {
                double d = 0;
                for (int i = 0; i < hd; i++) d += q[(size_t)t * qd + h * hd + i] * k[(size_t)j * kvd + kvh * hd + i];
                p[j] = d / sqrt((double)hd);
                mx = fmax(mx, p[j]);
            }
            for (int j = 0; j <= t; j++) sum += (p[j] = exp(p[j] - mx));
            for (int i = 0; i < hd; i++) {
                double a = 0;
                for (int j = 0; j <= t; j++) a += p[j] * v[(size_t)j * kvd + kvh * hd + i];
                att[h * hd + i] = a / sum * sigmoid(gate[(size_t)t * qd + h * hd + i]);
            }
        }
        linear(y + (size_t)t * H, L->wo, att, H, qd);
    }
    free(qg), free(q), free(gate), free(k), free(v), free(att), free(p);
}

/* y += wt * down(silu(gate x) * up x), the rows of one projection at
 * gate/up [F][H] and down [H][F] */
static void swiglu_add(double *y, double wt, const float *wg, const float *wu, const float *wd, const double *x, int H,
                       int F) {
    double *g = malloc((size_t)F * sizeof *g), *u = malloc((size_t)F * sizeof *u), *o = malloc((size_t)H * sizeof *o);
    linear(g, wg, x, F, H);
    linear(u, wu, x, F, H);
    for (int i = 0; i < F; i++) g[i] = silu(g[i]) * u[i];
    linear(o, wd, g, H, F);
    for (int i = 0; i < H; i++) y[i] += wt * o[i];
    free(g), free(u), free(o);
}

/* The MLP of one row; *gap gets the smallest k-th to (k+1)-th router
 * logit gap seen. */
static void ref_mlp(const q35_spec *s, const q35_layer *L, const double *x, double *y, double *gap) {
    int H = s->hidden;
    for (int i = 0; i < H; i++) y[i] = 0;
    if (!s->moe) {
        swiglu_add(y, 1.0, L->gate, L->up, L->down, x, H, s->ffn);
        return;
    }
    int E = s->experts, k = s->experts_used, I = s->expert_ffn;
    double lg[MAX_E], p[MAX_E], mx = -INFINITY, sum = 0;
    linear(lg, L->router, x, E, H);
    for (int e = 0; e < E; e++) mx = fmax(mx, lg[e]);
    for (int e = 0; e < E; e++) sum += (p[e] = exp(lg[e] - mx));
    int order[MAX_E];
    for (int e = 0; e < E; e++) order[e] = e;
    for (int i = 1; i < E; i++) { /* descending; equal logits keep id order */
        int e = order[i], j = i;
        for (; j > 0 && lg[order[j - 1]] < lg[e]; j--) order[j] = order[j - 1];
        order[j] = e;
    }
    *gap = fmin(*gap, lg[order[k - 1]] - lg[order[k]]);
    double wsum = 0;
    for (int j = 0; j < k; j++) wsum += p[order[j]];
    for (int j = 0; j < k; j++) {
        int e = order[j];
        size_t m = (size_t)I * H;
        swiglu_add(y, p[e] / wsum, L->eg + e * m, L->eu + e * m, L->ed + e * m, x, H, I); /* norm_topk_prob */
    }
    double d = 0;
    for (int i = 0; i < H; i++) d += (double)L->sgate[i] * x[i];
    swiglu_add(y, sigmoid(d), L->sg, L->su, L->sd, x, H, s->shared_ffn);
}

/* Every row's logits [T][vocab]; the smallest router gap in *gap (MoE). */
static void ref_forward_hidden(const q35_spec *s, const q35_weights *w, const int32_t *tok, int T, bug b,
                               double *logits, double *gap, double *normed_out, double *raw_out) {
    int H = s->hidden;
    double *x = calloc((size_t)T * H, sizeof *x), *hn = calloc((size_t)T * H, sizeof *hn);
    double *y = calloc((size_t)T * H, sizeof *y);
    *gap = INFINITY;
    for (int t = 0; t < T; t++)
        for (int i = 0; i < H; i++) x[(size_t)t * H + i] = w->embed[(size_t)tok[t] * H + i];
    for (int l = 0; l < s->layers; l++) {
        const q35_layer *L = &w->l[l];
        for (int t = 0; t < T; t++) rmsnorm_1p(hn + (size_t)t * H, x + (size_t)t * H, L->in_norm, H, s->eps);
        if (ref_linear_kind(s, l, b)) ref_deltanet(s, L, hn, y, T, b);
        else ref_attention(s, L, hn, y, T);
        for (size_t i = 0; i < (size_t)T * H; i++) x[i] += y[i];
        for (int t = 0; t < T; t++) {
            rmsnorm_1p(hn, x + (size_t)t * H, L->post_norm, H, s->eps);
            ref_mlp(s, L, hn, y, gap);
            for (int i = 0; i < H; i++) x[(size_t)t * H + i] += y[i];
        }
    }
    const float *head = s->tied ? w->embed : w->lm_head;
    for (int t = 0; t < T; t++) {
        rmsnorm_1p(hn, x + (size_t)t * H, w->final_norm, H, s->eps);
        if (normed_out) memcpy(normed_out + (size_t)t * H, hn, (size_t)H * sizeof *hn);
        if (raw_out) memcpy(raw_out + (size_t)t * H, x + (size_t)t * H, (size_t)H * sizeof *hn);
        linear(logits + (size_t)t * s->vocab, head, hn, s->vocab, H);
    }
    free(x), free(hn), free(y);
}

/* Every row's logits [T][vocab]; the smallest router gap in *gap (MoE). */
static void ref_forward(const q35_spec *s, const q35_weights *w, const int32_t *tok, int T, bug b, double *logits,
                        double *gap) {
    ref_forward_hidden(s, w, tok, T, b, logits, gap, NULL, NULL);
}

/* ---- the MTP block (vLLM's Qwen3.5 / Qwen3-Next MTP drafter) ------------------ */

typedef enum mtp_bug { MTP_OK, MTP_SWAPPED_CONCAT, MTP_RAW_HIDDEN, MTP_NO_HNORM, N_MTP_BUGS } mtp_bug;
static const char *mtp_bug_name[N_MTP_BUGS] = {"none", "[hidden, embedding] concatenated", "hidden state before the "
                                               "final norm", "hidden state without its own norm"};

/* T rows of the MTP block at positions 0 .. T-1: row i from token tok[i]
 * (the token after the hidden state's position) and hidden state hid[i]
 * (the main stack's after its final norm, or the block's own output):
 * e = norm_e(embed(tok)), h = norm_h(hid), x = fc [e, h], then one
 * full-attention decoder layer over the rows (causal), the block's final
 * norm (out[i]) and the model's head (logits[i]). raw[i] is the main
 * stack's row before its final norm (MTP_RAW_HIDDEN). */
static void ref_mtp(const q35_spec *s, const q35_weights *w, const q35_mtp *mt, const int32_t *tok, const double *hid,
                    int T, mtp_bug b, double *out, double *logits) {
    int H = s->hidden;
    double *x = calloc((size_t)T * H, sizeof *x), *hn = calloc((size_t)T * H, sizeof *hn);
    double *y = calloc((size_t)T * H, sizeof *y), *cat = calloc((size_t)2 * H, sizeof *cat), gap = INFINITY;
    double *e = calloc((size_t)H, sizeof *e);
    for (int t = 0; t < T; t++) {
        for (int i = 0; i < H; i++) e[i] = w->embed[(size_t)tok[t] * H + i];
        double *ce = cat + (b == MTP_SWAPPED_CONCAT ? H : 0), *ch = cat + (b == MTP_SWAPPED_CONCAT ? 0 : H);
        rmsnorm_1p(ce, e, mt->enorm, H, s->eps);
        if (b == MTP_NO_HNORM) memcpy(ch, hid + (size_t)t * H, (size_t)H * sizeof *ch);
        else rmsnorm_1p(ch, hid + (size_t)t * H, mt->hnorm, H, s->eps);
        linear(x + (size_t)t * H, mt->fc, cat, H, 2 * H);
    }
    const q35_layer *L = &mt->layer;
    for (int t = 0; t < T; t++) rmsnorm_1p(hn + (size_t)t * H, x + (size_t)t * H, L->in_norm, H, s->eps);
    ref_attention(s, L, hn, y, T);
    for (size_t i = 0; i < (size_t)T * H; i++) x[i] += y[i];
    for (int t = 0; t < T; t++) {
        rmsnorm_1p(hn, x + (size_t)t * H, L->post_norm, H, s->eps);
        ref_mlp(s, L, hn, y, &gap);
        for (int i = 0; i < H; i++) x[(size_t)t * H + i] += y[i];
    }
    const float *head = s->tied ? w->embed : w->lm_head;
    for (int t = 0; t < T; t++) {
        rmsnorm_1p(out + (size_t)t * H, x + (size_t)t * H, mt->norm, H, s->eps);
        linear(logits + (size_t)t * s->vocab, head, out + (size_t)t * H, s->vocab, H);
    }
    free(x), free(hn), free(y), free(cat), free(e);
}

/* ---- the engine --------------------------------------------------------------- */

/* The loader's notice of tensors it did not take ("PATH: N of its M
 * tensors are not used by the model: a, b, c, d, ...") may name only the
 * MTP block's and the vision tower's. */
typedef struct load_log {
    const char *path;
    int n_layers;
    int n_unused; /* N of the notice; 0 without one */
} load_log;

static bool ignorable(const char *name, int n_layers) {
    char blk[32];
    snprintf(blk, sizeof blk, "blk.%d.", n_layers);
    return !strncmp(name, "mtp.", 4) || !strncmp(name, "model.visual.", 13) || !strncmp(name, blk, strlen(blk));
}

static void check_unused(const char *line, void *user) {
    load_log *lg = user;
    const char *list = strstr(line, "not used by the model:");
    if (!list) return;
    fprintf(stderr, "  (%s)\n", line);
    const char *of = strstr(line, " of its "), *num = of;
    while (num && num > line && num[-1] >= '0' && num[-1] <= '9') num--;
    lg->n_unused = num && num < of ? atoi(num) : -1;
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", list + strlen("not used by the model:"));
    for (char *save = NULL, *name = strtok_r(buf, ", ", &save); name; name = strtok_r(NULL, ", ", &save))
        CHECK_MSG(!strcmp(name, "...") || ignorable(name, lg->n_layers), "%s: a tensor the model should use is not "
                  "used: %s", lg->path, name);
}

static pdl_model *load(const char *path, const q35_spec *s, load_log *lg) {
    *lg = (load_log){.path = path, .n_layers = s->layers};
    pdl_model *m = NULL;
    pdl_error err;
    pdl_model_options o = {.n_threads = 2, .log = check_unused, .log_user = lg};
    REQUIRE_MSG(pdl_model_load(&m, path, &o, &err) == 0, "%s: %s", path, err.message);
    return m;
}

/* Every row's logits of tok, fed to one sequence `step` tokens per call
 * (step >= T: one call). */
static float *engine_rows(pdl_model *m, const int32_t *tok, int T, int step, int vocab) {
    pdl_context *ctx = NULL;
    pdl_kv_cache *kv = NULL;
    pdl_error err;
    REQUIRE_MSG(pdl_context_create(&ctx, m, NULL, &err) == 0, "%s", err.message);
    REQUIRE_MSG(pdl_kv_cache_create(&kv, m, PDL_KV_F32, 16, T / 16 + 2, &err) == 0, "%s", err.message);
    float *out = malloc((size_t)T * vocab * sizeof *out);
    pdl_seq seq = {0};
    for (int at = 0; at < T; at += step) {
        int n = T - at < step ? T - at : step;
        int rc = pdl_seq_forward(ctx, kv, &seq, tok + at, NULL, n, PDL_LOGITS_ALL, out + (size_t)at * vocab, &err);
        REQUIRE_MSG(rc == 0, "rows %d..%d: %s", at, at + n, err.message);
    }
    pdl_seq_release(kv, &seq);
    pdl_kv_cache_free(kv);
    pdl_context_free(ctx);
    return out;
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
    for (size_t i = 0; i < n; i++) {
        double e = fabs(a[i] - b[i]);
        if (!(e <= d)) d = e;
    }
    return d;
}

static int argmax_f(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

/* the reference's choice, and the gap to the runner-up */
static int argmax_d(const double *x, int n, double *margin) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    double second = -INFINITY;
    for (int i = 0; i < n; i++)
        if (i != best) second = fmax(second, x[i]);
    *margin = x[best] - second;
    return best;
}

static void make_tokens(int vocab, int32_t *tok, int T, uint64_t seed) {
    uint64_t r = seed * 0x9E3779B97F4A7C15ull + 1;
    for (int t = 0; t < T; t++) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        tok[t] = (int32_t)((r >> 11) % (uint64_t)vocab);
    }
}

static const char *family(const q35_spec *s) { return s->next ? "qwen3next" : s->moe ? "qwen35moe" : "qwen35"; }

/* dir/name/hf and dir/name/model.gguf */
static void write_both(const q35_spec *s, const q35_weights *w, const char *name, char **hf, char **gg) {
    char *dir = test_make_dir(name);
    *hf = test_join(dir, "hf");
    *gg = test_join(dir, "model.gguf");
    char sub[256];
    snprintf(sub, sizeof sub, "%s/hf", name);
    free(test_make_dir(sub));
    q35_write_hf(s, w, *hf);
    q35_write_gguf(s, w, *gg);
    free(dir);
}

/* The engine (both files; one call, token by token, chunks of 7) against
 * the reference on T tokens; every row's greedy token where the reference's
 * choice is clear. */
static void check_model(const q35_spec *s, const q35_weights *w, const char *hf, const char *gg, int T, uint64_t seed) {
    int V = s->vocab;
    int32_t *tok = malloc((size_t)T * sizeof *tok);
    make_tokens(V, tok, T, seed);
    size_t n = (size_t)T * V;
    double *want = malloc(n * sizeof *want), gap;
    ref_forward(s, w, tok, T, BUG_NONE, want, &gap);
    if (s->moe) REQUIRE_MSG(gap > 1e-4, "a router near-tie (gap %g): pick another seed", gap);
    double big = 0;
    for (size_t i = 0; i < n; i++) big = fmax(big, fabs(want[i]));
    double tol = TOL_REL * fmax(1.0, big);
    const char *paths[2] = {hf, gg};
    const int steps[3] = {T, 1, 7};
    const char *step_name[3] = {"one call", "token by token", "chunks of 7"};
    for (int f = 0; f < 2; f++) {
        load_log lg;
        pdl_model *m = load(paths[f], s, &lg);
        pdl_model_info info;
        pdl_model_get_info(m, &info);
        CHECK_EQ_INT(info.vocab, V);
        CHECK_EQ_INT(info.n_layers, s->layers); /* the MTP block is not a layer of the main stack */
        CHECK_MSG(!strcmp(info.arch, family(s)), "%s loads as %s", paths[f], info.arch);
        /* without an MTP block, the HF folder's one vision tensor at most */
        if (!s->mtp_layers) CHECK_MSG(lg.n_unused <= (f == 0 ? 1 : 0), "%s: %d tensors unused", paths[f], lg.n_unused);
        float *got[3];
        for (int k = 0; k < 3; k++) {
            got[k] = engine_rows(m, tok, T, steps[k], V);
            double d = max_diff(got[k], want, n);
            fprintf(stderr, "  %s %d tokens %s %s: max |engine - float64| = %.3g (%.2g of the largest |logit| %.3g)\n",
                    family(s), T, f ? "gguf" : "hf", step_name[k], d, d / fmax(1.0, big), big);
            CHECK_MSG(d <= tol, "%s (%s, %d tokens, %s): logits differ from the float64 reference by %g (tolerance %g)",
                      family(s), f ? "GGUF" : "HF", T, step_name[k], d, tol);
            int clear = 0, same = 0;
            for (int t = 0; t < T; t++) {
                double margin;
                int want_tok = argmax_d(want + (size_t)t * V, V, &margin);
                if (margin < 10 * tol) continue;
                clear++;
                same += argmax_f(got[k] + (size_t)t * V, V) == want_tok;
            }
            CHECK_MSG(clear > T / 2 && same == clear, "%s %s: greedy token equal on %d of %d rows with a clear choice",
                      f ? "GGUF" : "HF", step_name[k], same, clear);
        }
        /* the state is chunk-canonical (pagedlm.h, state_chunk): however the
         * rows are cut into calls, each row's logits are the same bytes */
        for (int k = 1; k < 3; k++) {
            int t = 0;
            while (t < T && !memcmp(got[k] + (size_t)t * V, got[0] + (size_t)t * V, (size_t)V * sizeof(float))) t++;
            CHECK_MSG(t == T, "%s, %d tokens: %s gives other bytes than one call from row %d on", f ? "GGUF" : "HF", T,
                      step_name[k], t);
        }
        for (int k = 0; k < 3; k++) free(got[k]);
        pdl_model_free(m);
    }
    free(want), free(tok);
}

static void check_family(q35_spec s, const char *name, uint64_t seed) {
    q35_weights w = q35_make_weights(&s, seed);
    char *hf = NULL, *gg = NULL;
    write_both(&s, &w, name, &hf, &gg);
    check_model(&s, &w, hf, gg, 40, seed + 1);
    /* 150 positions: across the 64-position state chunks twice, and the
     * token-by-token and 7-row runs cross them at every offset */
    check_model(&s, &w, hf, gg, 150, seed + 2);
    free(hf), free(gg);
    q35_free_weights(&s, &w);
}

/* Qwen3.5 dense: 6 linear + 2 full layers, 4 value heads over 2 key heads,
 * untied head. */
static void test_qwen35_matches_float64_reference(void) { check_family(q35_tiny_spec(false), "qwen35", 0x3535); }

/* Qwen3.5-MoE: the same hybrid stack with routed experts and a gated shared
 * expert in every layer; tied head, and an MTP block after the main stack
 * (GGUF: block_count 9 with nextn_predict_layers 1) that the loaders must
 * leave alone. */
static void test_qwen35moe_matches_float64_reference(void) {
    q35_spec s = q35_tiny_spec(true);
    s.tied = true;
    s.mtp_layers = 1;
    check_family(s, "qwen35moe", 0x35E0);
}

/* Qwen3-Next: Qwen3.5-MoE's layers (untied head, MTP tensors in the
 * folder that the loaders leave alone) from its own layouts: the Hugging
 * Face folder's fused in_proj_qkvz / in_proj_ba and per-expert tensors,
 * and the GGUF's attn_qkv / attn_gate with grouped value heads and fused
 * ssm_ba (the value-head order is what the "value heads read as tiled"
 * mutation moves). */
static void test_qwen3next_matches_float64_reference(void) {
    q35_spec s = q35_tiny_spec(true);
    s.next = true;
    s.mtp_layers = 1;
    check_family(s, "qwen3next", 0x3E47);
}

/* Qwen3-Next's three files (the folder, the GGUF of current converters and
 * the GGUF of early ones, with the fused ssm_in) load to the same
 * matrices: each row's logits are the same bytes from all three (the
 * regrouped rows are copies of the same F32 values, and every other weight
 * is the same number in both formats). The early GGUF is also checked
 * against the reference. */
static void test_qwen3next_files_give_the_same_bytes(void) {
    q35_spec s = q35_tiny_spec(true);
    s.next = true;
    q35_weights w = q35_make_weights(&s, 0x3E47);
    char *hf = NULL, *gg = NULL;
    write_both(&s, &w, "qwen3next-layouts", &hf, &gg);
    q35_spec legacy = s;
    legacy.gguf_ssm_in = true;
    char *old = test_tmp_path("qwen3next-ssm_in.gguf");
    q35_write_gguf(&legacy, &w, old);
    enum { T = 70 };
    int32_t tok[T];
    make_tokens(s.vocab, tok, T, 9);
    const char *paths[3] = {hf, gg, old};
    float *got[3];
    for (int f = 0; f < 3; f++) {
        load_log lg;
        pdl_model *m = load(paths[f], &s, &lg);
        CHECK_MSG(lg.n_unused == 0, "%s: %d tensors unused", paths[f], lg.n_unused);
        got[f] = engine_rows(m, tok, T, T, s.vocab);
        pdl_model_free(m);
    }
    for (int f = 1; f < 3; f++) {
        int t = 0;
        while (t < T && !memcmp(got[f] + (size_t)t * s.vocab, got[0] + (size_t)t * s.vocab, (size_t)s.vocab * 4)) t++;
        CHECK_MSG(t == T, "%s gives other logits than the Hugging Face folder from row %d on", paths[f], t);
    }
    for (int f = 0; f < 3; f++) free(got[f]);
    check_model(&legacy, &w, hf, old, 40, 0x3E47 + 3);
    /* F16 (as a BF16 checkpoint's rows: whole rows of 2-byte values are
     * moved): the early GGUF's regrouped ssm_in rows are the current one's
     * attn_qkv and attn_gate rows, so again the same bytes */
    s.gguf_matrix_type = legacy.gguf_matrix_type = 1; /* GGML F16 */
    q35_write_gguf(&s, &w, gg);
    q35_write_gguf(&legacy, &w, old);
    for (int f = 1; f < 3; f++) {
        load_log lg;
        pdl_model *m = load(paths[f], &s, &lg);
        pdl_model_info info;
        pdl_model_get_info(m, &info);
        CHECK_CONTAINS(info.weight_types, "F16");
        got[f] = engine_rows(m, tok, T, T, s.vocab);
        pdl_model_free(m);
    }
    CHECK_MSG(!memcmp(got[1], got[2], (size_t)T * s.vocab * 4), "F16: the GGUF with ssm_in gives other logits than "
              "the one with attn_qkv and attn_gate");
    free(got[1]), free(got[2]);
    free(hf), free(gg), free(old);
    q35_free_weights(&s, &w);
}

/* A Qwen3-Next folder whose config does not fit its fused projections (one
 * value head per key head declared, two in the file) or that puts dense
 * layers between the sparse ones is refused, naming what is wrong. */
static void test_qwen3next_misfit_configs_are_refused(void) {
    q35_spec s = q35_tiny_spec(true);
    s.next = true;
    q35_weights w = q35_make_weights(&s, 0x3E47);
    char *dir = test_make_dir("qwen3next-misfit");
    q35_write_hf(&s, &w, dir);
    char *cfg = test_join(dir, "config.json");
    FILE *f = fopen(cfg, "rb");
    REQUIRE(f != NULL);
    char text[8192];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    static const struct {
        const char *from, *to, *want[2];
    } cases[] = {
        {"\"linear_num_value_heads\": 4", "\"linear_num_value_heads\": 2",
         {"linear_attn.in_proj_qkvz.weight' has 192 rows", "need 128"}},
        {"\"mlp_only_layers\": []", "\"mlp_only_layers\": [3]", {"dense layers between sparse ones", "mlp_only_layers"}},
        {"\"decoder_sparse_step\": 1", "\"decoder_sparse_step\": 2", {"decoder_sparse_step 2", "not supported"}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *at = strstr(text, cases[i].from);
        REQUIRE_MSG(at != NULL, "the writer's config lacks %s", cases[i].from);
        char edited[8300];
        snprintf(edited, sizeof edited, "%.*s%s%s", (int)(at - text), text, cases[i].to, at + strlen(cases[i].from));
        test_write_file(cfg, edited, strlen(edited));
        pdl_model *m = NULL;
        pdl_error err;
        CHECK(pdl_model_load(&m, dir, NULL, &err) != 0 && m == NULL);
        CHECK_CONTAINS(err.message, cases[i].want[0]);
        CHECK_CONTAINS(err.message, cases[i].want[1]);
    }
    free(cfg), free(dir);
    q35_free_weights(&s, &w);
}

/* Greedy decoding, the engine step by step after a 40-token prompt,
 * against the reference recomputed over the grown sequence: the same 24
 * tokens (while the reference's choice is clear). */
static void test_greedy_decode_matches_reference(void) {
    q35_spec s = q35_tiny_spec(false);
    q35_weights w = q35_make_weights(&s, 77);
    char *hf = NULL, *gg = NULL;
    write_both(&s, &w, "qwen35-greedy", &hf, &gg);
    enum { P = 40, G = 24 };
    int V = s.vocab;
    int32_t tok[P + G];
    make_tokens(V, tok, P, 5);
    load_log lg;
    pdl_model *m = load(gg, &s, &lg);
    pdl_context *ctx = NULL;
    pdl_kv_cache *kv = NULL;
    pdl_error err;
    REQUIRE_MSG(pdl_context_create(&ctx, m, NULL, &err) == 0, "%s", err.message);
    REQUIRE_MSG(pdl_kv_cache_create(&kv, m, PDL_KV_F32, 16, 8, &err) == 0, "%s", err.message);
    float *row = malloc((size_t)V * sizeof *row);
    double *want = malloc((size_t)(P + G) * V * sizeof *want), gap;
    pdl_seq seq = {0};
    REQUIRE_MSG(pdl_seq_forward(ctx, kv, &seq, tok, NULL, P, PDL_LOGITS_LAST, row, &err) == 0, "%s", err.message);
    int n = P, checked = 0;
    for (; n < P + G; n++) {
        ref_forward(&s, &w, tok, n, BUG_NONE, want, &gap);
        double margin;
        int want_tok = argmax_d(want + (size_t)(n - 1) * V, V, &margin);
        if (margin < 10 * TOL_REL * 4) break; /* a near-tie (this model's logits < 4): the sequences may part */
        CHECK_MSG(argmax_f(row, V) == want_tok, "greedy token %d: engine %d, reference %d", n - P, argmax_f(row, V),
                  want_tok);
        checked++;
        tok[n] = want_tok;
        REQUIRE_MSG(pdl_seq_forward(ctx, kv, &seq, &tok[n], NULL, 1, PDL_LOGITS_LAST, row, &err) == 0, "%s",
                    err.message);
    }
    fprintf(stderr, "  %d greedy tokens compared\n", checked);
    CHECK(checked >= G / 2);
    pdl_seq_release(kv, &seq);
    free(row), free(want), free(hf), free(gg);
    pdl_kv_cache_free(kv);
    pdl_context_free(ctx);
    pdl_model_free(m);
    q35_free_weights(&s, &w);
}

/* Each detail the reference could get wrong moves its logits far past the
 * tolerance (so the comparisons above would see the engine get it wrong),
 * on the 150-token sequence of both families. */
static void test_reference_mutations_are_caught(void) {
    for (int moe = 0; moe < 2; moe++) {
        q35_spec s = q35_tiny_spec(moe);
        q35_weights w = q35_make_weights(&s, moe ? 0x35E0 : 0x3535);
        enum { T = 150 };
        int32_t tok[T];
        make_tokens(s.vocab, tok, T, 11);
        size_t n = (size_t)T * s.vocab;
        double *want = malloc(n * sizeof *want), *bad = malloc(n * sizeof *bad), gap;
        ref_forward(&s, &w, tok, T, BUG_NONE, want, &gap);
        double big = 0;
        for (size_t i = 0; i < n; i++) big = fmax(big, fabs(want[i]));
        double tol = TOL_REL * fmax(1.0, big);
        for (int b = 1; b < N_BUGS; b++) {
            ref_forward(&s, &w, tok, T, (bug)b, bad, &gap);
            double d = max_diff_d(bad, want, n);
            fprintf(stderr, "  %s, %s: moves logits by %.3g (tolerance %.2g)\n", moe ? "qwen35moe" : "qwen35", bug_name[b],
                    d, tol);
            CHECK_MSG(d > 100 * tol, "%s: the reference with '%s' moves logits by only %g: the test could not see it",
                      moe ? "qwen35moe" : "qwen35", bug_name[b], d);
        }
        free(want), free(bad);
        q35_free_weights(&s, &w);
    }
}

/* w's n values as the GGUF holds them in `type` (F16, or Q8_0 blocks of
 * 32 with an F16 scale), back in F32. */
static void round_as_gguf(float *w, size_t n, int type) {
    for (size_t b = 0; type == 1 && b < n; b++) w[b] = fp16_f16_to_f32_exact(fp16_f32_to_f16(w[b]));
    for (size_t b = 0; type == 8 && b < n; b += 32) {
        int8_t qs[32];
        float d;
        matmul_quantize_row_q8_0(w + b, 32, qs, &d);
        float dh = fp16_f16_to_f32_exact(fp16_f32_to_f16(d));
        for (int i = 0; i < 32; i++) w[b + i] = dh * qs[i];
    }
}

/* Every matrix the writer writes in gguf_matrix_type, rounded so. */
static void round_matrices(const q35_spec *s, q35_weights *w, int type) {
    size_t H = (size_t)s->hidden;
    round_as_gguf(w->embed, (size_t)s->vocab * H, type);
    if (w->lm_head) round_as_gguf(w->lm_head, (size_t)s->vocab * H, type);
    for (int l = 0; l < s->layers; l++) {
        q35_layer *L = &w->l[l];
        size_t vd = (size_t)s->lin_v_heads * s->lin_v_dim, qd = (size_t)s->heads * s->head_dim;
        size_t kvd = (size_t)s->kv_heads * s->head_dim, vh = (size_t)s->lin_v_heads;
        if (L->linear) {
            round_as_gguf(L->qkv, (size_t)q35_conv_dim(s) * H, type);
            round_as_gguf(L->z, vd * H, type), round_as_gguf(L->b, vh * H, type), round_as_gguf(L->a, vh * H, type);
            round_as_gguf(L->out, H * vd, type);
        } else {
            round_as_gguf(L->wq, 2 * qd * H, type), round_as_gguf(L->wk, kvd * H, type);
            round_as_gguf(L->wv, kvd * H, type), round_as_gguf(L->wo, H * qd, type);
        }
        round_as_gguf(L->gate, (size_t)s->ffn * H, type), round_as_gguf(L->up, (size_t)s->ffn * H, type);
        round_as_gguf(L->down, H * s->ffn, type);
    }
}

/* The writer's F16 and Q8_0 GGUF (gguf_matrix_type) against the reference
 * run on the same weights rounded as the file holds them. F16: the engine
 * widens F16 weights to F32 products, so the tolerance is the F32 one
 * (measured 3.5e-6 of the largest |logit|; the unrounded weights' reference
 * is 5e-3 of it away, so the rounding is seen). Q8_0, a smoke check of the
 * layout only: the engine also quantises each activation row to 8 bits
 * before the integer products, which this random network amplifies about
 * tenfold over its 8 layers (measured 12% of the largest |logit|); 25%
 * still catches rows or blocks out of place (those move logits by over
 * 100%, see the reference mutations). */
static void test_quantised_gguf_matches_reference_of_rounded_weights(void) {
    fp16_init();
    q35_spec s = q35_tiny_spec(false);
    enum { T = 40 };
    int32_t tok[T];
    make_tokens(s.vocab, tok, T, 3);
    size_t n = (size_t)T * s.vocab;
    double *want = malloc(n * sizeof *want), gap;
    const int types[2] = {1 /* F16 */, 8 /* Q8_0 */};
    for (int i = 0; i < 2; i++) {
        q35_weights w = q35_make_weights(&s, 0x3535);
        s.gguf_matrix_type = types[i];
        char *path = test_tmp_path(i ? "qwen35-q8_0.gguf" : "qwen35-f16.gguf");
        q35_write_gguf(&s, &w, path);
        round_matrices(&s, &w, types[i]);
        ref_forward(&s, &w, tok, T, BUG_NONE, want, &gap);
        double big = 0;
        for (size_t k = 0; k < n; k++) big = fmax(big, fabs(want[k]));
        load_log lg;
        pdl_model *m = load(path, &s, &lg);
        pdl_model_info info;
        pdl_model_get_info(m, &info);
        CHECK_CONTAINS(info.weight_types, i ? "Q8_0" : "F16");
        float *got = engine_rows(m, tok, T, T, s.vocab);
        double d = max_diff(got, want, n), tol = (i ? 0.25 : TOL_REL) * fmax(1.0, big);
        fprintf(stderr, "  %s: max |engine - float64 of the rounded weights| = %.3g (%.2g of the largest |logit| %.3g)\n",
                i ? "Q8_0" : "F16", d, d / fmax(1.0, big), big);
        CHECK_MSG(d <= tol, "%s: %g from the reference of the rounded weights (tolerance %g)", i ? "Q8_0" : "F16", d, tol);
        free(got), free(path);
        pdl_model_free(m);
        q35_free_weights(&s, &w);
    }
    free(want);
}

/* ---- the MTP block ---------------------------------------------------------- */

/* One sequence's rows [start, start + n) over blocks 0, 1, ... in order,
 * every row a logits row. */
typedef struct seq_rows {
    int32_t pos[256], slot[256], rows[256], cu[2], table[32], state;
    pdl_batch b;
} seq_rows;

static void seq_rows_make(seq_rows *r, const int32_t *tok, int start, int n, int n_logits) {
    REQUIRE(n <= 256 && start + n <= 32 * 16);
    for (int i = 0; i < 32; i++) r->table[i] = i;
    for (int i = 0; i < n; i++) r->pos[i] = r->slot[i] = start + i;
    for (int i = 0; i < n_logits; i++) r->rows[i] = n - n_logits + i;
    r->cu[0] = 0, r->cu[1] = n, r->state = 0;
    static const int32_t *tables[1];
    tables[0] = r->table;
    r->b = (pdl_batch){.n_tokens = n, .token_ids = tok, .positions = r->pos, .slot_mapping = r->slot, .n_seqs = 1,
                       .cu_seqlens = r->cu, .block_tables = tables, .n_logits = n_logits, .logits_indices = r->rows,
                       .state_slots = &r->state};
}

/* The main stack over tok[0 .. T), then the MTP block over rows 0 .. T-2
 * (row p: token tok[p + 1], the stack's hidden state at p), in two calls
 * cut after `cut` rows, then one chained row at T - 1 (token `extra`, the
 * block's own output at T - 2): every MTP row's logits, [T][vocab]. */
static float *engine_mtp(pdl_model *m, const int32_t *tok, int T, int cut, int32_t extra, int V, int H) {
    pdl_context *ctx = NULL;
    pdl_kv_cache *kv = NULL;
    pdl_error err;
    REQUIRE_MSG(pdl_context_create(&ctx, m, NULL, &err) == 0, "%s", err.message);
    REQUIRE_MSG(kv_cache_create(&kv, m, PDL_KV_F32, 16, 32, 1, true, &err) == 0, "%s", err.message);
    float *logits = malloc((size_t)T * V * sizeof *logits), *hidden = malloc((size_t)T * H * sizeof *hidden);
    float *out = malloc((size_t)T * H * sizeof *out);
    seq_rows r;
    seq_rows_make(&r, tok, 0, T, 1);
    REQUIRE_MSG(pdl_forward(ctx, kv, &r.b, logits, &err) == 0, "%s", err.message);
    memcpy(hidden, model_forward_hidden(ctx), (size_t)T * H * sizeof *hidden);
    for (int at = 0; at < T - 1; at = at < cut ? cut : T - 1) {
        int n = (at < cut ? cut : T - 1) - at;
        seq_rows_make(&r, tok + at + 1, at, n, n);
        REQUIRE_MSG(model_forward_mtp(ctx, kv, &r.b, hidden + (size_t)at * H, true, out + (size_t)at * H,
                                      logits + (size_t)at * V, &err) == 0, "%s", err.message);
    }
    seq_rows_make(&r, &extra, T - 1, 1, 1);
    REQUIRE_MSG(model_forward_mtp(ctx, kv, &r.b, out + (size_t)(T - 2) * H, false, NULL, logits + (size_t)(T - 1) * V,
                                  &err) == 0, "%s", err.message);
    free(hidden), free(out);
    pdl_kv_cache_free(kv);
    pdl_context_free(ctx);
    return logits;
}

/* The reference's MTP logits of engine_mtp's rows; b applied. */
static double *ref_mtp_rows(const q35_spec *s, const q35_weights *w, const int32_t *tok, int T, int32_t extra,
                            mtp_bug b) {
    int H = s->hidden, V = s->vocab;
    double *main_logits = malloc((size_t)T * V * sizeof(double)), gap;
    double *normed = malloc((size_t)T * H * sizeof(double)), *raw = malloc((size_t)T * H * sizeof(double));
    ref_forward_hidden(s, w, tok, T, BUG_NONE, main_logits, &gap, normed, raw);
    q35_mtp mt = q35_make_mtp(s, w);
    double *out = malloc((size_t)T * H * sizeof(double)), *logits = malloc((size_t)T * V * sizeof(double));
    int32_t *toks = malloc((size_t)T * sizeof *toks);
    const double *hid = b == MTP_RAW_HIDDEN ? raw : normed;
    ref_mtp(s, w, &mt, tok + 1, hid, T - 1, b, out, logits); /* rows 0 .. T-2: the block's own outputs */
    /* all T rows, the last fed the block's output at T - 2 (causal: rows
     * before it are the same as above) */
    memcpy(toks, tok + 1, (size_t)(T - 1) * sizeof *toks);
    toks[T - 1] = extra;
    memcpy(normed + (size_t)(T - 1) * H, out + (size_t)(T - 2) * H, (size_t)H * sizeof(double));
    memcpy(raw + (size_t)(T - 1) * H, out + (size_t)(T - 2) * H, (size_t)H * sizeof(double));
    ref_mtp(s, w, &mt, toks, hid, T, b, out, logits);
    q35_free_mtp(&mt);
    free(main_logits), free(normed), free(raw), free(out), free(toks);
    return logits;
}

/* The MTP block (Qwen3.5 dense and MoE, both files) against the float64
 * reference: every row's logits within the forward's tolerance, the same
 * bytes however its rows are cut into calls; and each mutation of the
 * reference (the concatenation swapped, the main stack's hidden state
 * taken before its final norm, the hidden state's own norm dropped) moves
 * them by more than 100x the tolerance. */
static void test_mtp_block_matches_float64_reference(void) {
    for (int moe = 0; moe < 2; moe++) {
        q35_spec s = q35_tiny_spec(moe);
        s.mtp_layers = 1;
        s.tied = moe;
        q35_weights w = q35_make_weights(&s, moe ? 0x3501 : 0x3502);
        char *hf = NULL, *gg = NULL;
        write_both(&s, &w, moe ? "mtp_moe" : "mtp_dense", &hf, &gg);
        int T = 40, V = s.vocab;
        int32_t tok[40], extra = 7;
        make_tokens(V, tok, T, 0x77);
        double *want = ref_mtp_rows(&s, &w, tok, T, extra, MTP_OK);
        double big = 0;
        for (size_t i = 0; i < (size_t)T * V; i++) big = fmax(big, fabs(want[i]));
        double tol = TOL_REL * fmax(1.0, big);
        for (int b = 1; b < N_MTP_BUGS; b++) {
            double *bad = ref_mtp_rows(&s, &w, tok, T, extra, (mtp_bug)b);
            double d = max_diff_d(bad, want, (size_t)T * V);
            CHECK_MSG(d > 100 * tol, "MTP mutation '%s' moves the logits by only %g (tolerance %g)", mtp_bug_name[b], d,
                      tol);
            free(bad);
        }
        const char *paths[2] = {hf, gg};
        for (int f = 0; f < 2; f++) {
            load_log lg;
            pdl_model *m = load(paths[f], &s, &lg);
            CHECK_MSG(m->cfg.mtp_loaded, "%s: the MTP block was not loaded", paths[f]);
            CHECK_EQ_INT(lg.n_unused, f == 0 ? 1 : 0); /* the folder's vision tensor only */
            float *got = engine_mtp(m, tok, T, T - 1, extra, V, s.hidden);
            double d = max_diff(got, want, (size_t)T * V);
            fprintf(stderr, "  %s MTP %s: max |engine - float64| = %.3g (%.2g of the largest |logit| %.3g)\n",
                    family(&s), f ? "gguf" : "hf", d, d / fmax(1.0, big), big);
            CHECK_MSG(d <= tol, "%s MTP (%s): logits differ from the float64 reference by %g (tolerance %g)",
                      family(&s), f ? "GGUF" : "HF", d, tol);
            float *cut = engine_mtp(m, tok, T, 13, extra, V, s.hidden);
            CHECK_MSG(!memcmp(cut, got, (size_t)T * V * sizeof *got), "%s MTP: rows cut into two calls give other bytes",
                      f ? "GGUF" : "HF");
            free(got), free(cut);
            pdl_model_free(m);
        }
        free(want), free(hf), free(gg);
        q35_free_weights(&s, &w);
    }
}

int main(void) {
    /* exact F32 products: the reference multiplies unrounded activations */
    setenv("PAGEDLM_BF16_ACTIVATIONS", "0", 1);
    pdl_error kerr;
    REQUIRE(pdl_set_kernels(NULL, 0, &kerr) == 0);
    RUN(test_reference_mutations_are_caught);
    RUN(test_qwen35_matches_float64_reference);
    RUN(test_qwen35moe_matches_float64_reference);
    RUN(test_qwen3next_matches_float64_reference);
    RUN(test_qwen3next_files_give_the_same_bytes);
    RUN(test_qwen3next_misfit_configs_are_refused);
    RUN(test_greedy_decode_matches_reference);
    RUN(test_mtp_block_matches_float64_reference);
    RUN(test_quantised_gguf_matches_reference_of_rounded_weights);
    return test_summary();
}
