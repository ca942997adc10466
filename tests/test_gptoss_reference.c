/*
 * test_gptoss_reference.c - gpt-oss against a float64 forward written from
 * the published description (OpenAI's gpt-oss model card and reference
 * code, as transformers' modeling_gpt_oss.py states it), no code shared
 * with src/:
 *
 *   every layer: x += o(attn(q, k, v)) + b_o of RMSNorm(x), q/k/v with biases,
 *     GQA, rotate-half RoPE with YaRN (per-pair ramp between beta_fast and
 *     beta_slow over the original context, cos and sin times
 *     0.1 ln(factor) + 1; Hugging Face's truncate: false keeps the ramp's
 *     ends fractional, llama.cpp's GGUF reading rounds them), scores scaled by
 *     1/sqrt(head_dim), softmax over the keys and one learned sink logit per
 *     head (in the denominator, no value), layers 0, 2, 4, ... over the last
 *     `window` positions only, the others over all;
 *   then x += sum over the top-k experts of the router (logits W_r x + b_r,
 *     softmax over the k chosen logits only) of
 *     w_e * (down_e((u + 1) * g * sigmoid(1.702 g)) + b_down), with
 *     [gate, up] = x GU_e + b (alternate columns), g = min(gate, 7),
 *     u = clamp(up, -7, 7);
 *   final RMSNorm, lm_head.
 *
 * A tiny random gpt-oss (tests/support/gptoss_writer.h: 4 layers, window
 * 16, YaRN factor 4 over an original context of 64) as a Hugging Face folder
 * and as the GGUF llama.cpp's converter makes of it; all-row logits of a
 * 200-token prompt (past the window and 3x past the original context), then
 * greedy tokens through the decode path.
 *
 * Tolerance: 5e-5 absolute on logits of magnitude ~1-5. The engine computes
 * in float32 (RoPE table in float32, as transformers) and the expert
 * products reach ~20 before the clamp, so float32 rounding of order 1e-6
 * relative grows through 4 layers; the largest difference observed is
 * 5.5e-6 (printed each run). Each
 * comparison also runs the reference with one thing wrong (the sink dropped
 * from the denominator, the window on the odd layers, the YaRN ramp
 * reversed, the clamp missing, the router's softmax over all experts) and
 * requires it to land over 100x the tolerance away.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/fp16.h"
#include "model/model.h"
#include "pagedlm.h"
#include "support/gptoss_writer.h"
#include "test_util.h"

#define TOL 5e-5
#define PROMPT 200
#define STEPS 6

typedef enum ref_bug {
    BUG_NONE,
    BUG_NO_SINK,        /* the sink left out of the softmax's denominator */
    BUG_WINDOW_ODD,     /* the window on layers 1, 3, ... instead of 0, 2, ... */
    BUG_RAMP_REVERSED,  /* YaRN: the slow pairs kept and the fast ones divided */
    BUG_NO_CLAMP,       /* SwiGLU without the clamps */
    BUG_ROUTER_ALL,     /* the router's softmax over all experts (not renormalized over the k) */
    N_BUGS
} ref_bug;

/* inv[d / 2] and the cos/sin factor: YaRN as the YaRN paper's code (and
 * transformers' _compute_yarn_parameters) states it. */
static void yarn_table(const gpo_spec *s, bool truncate, ref_bug bug, double *inv, double *attn) {
    int d = s->head_dim;
    const double two_pi = 6.283185307179586476925;
    double lo = d * log(s->orig / (two_pi * s->beta_fast)) / (2.0 * log(s->theta));
    double hi = d * log(s->orig / (two_pi * s->beta_slow)) / (2.0 * log(s->theta));
    if (truncate) lo = floor(lo), hi = ceil(hi);
    if (lo < 0) lo = 0;
    if (hi > d - 1) hi = d - 1;
    for (int i = 0; i < d / 2; i++) {
        double b = pow(s->theta, -2.0 * i / d), r = (i - lo) / (hi - lo);
        r = r < 0 ? 0 : r > 1 ? 1 : r;
        if (bug == BUG_RAMP_REVERSED) r = 1 - r;
        inv[i] = b * (1 - r) + b / s->factor * r;
    }
    *attn = 0.1 * log(s->factor) + 1.0;
}

static void rmsnorm(double *y, const double *x, const float *w, int n, double eps) {
    double ss = 0;
    for (int i = 0; i < n; i++) ss += x[i] * x[i];
    double r = 1.0 / sqrt(ss / n + eps);
    for (int i = 0; i < n; i++) y[i] = x[i] * r * w[i];
}

/* y = W x + b, W (out, in) */
static void linear(double *y, const float *W, const float *b, const double *x, int out, int in) {
    for (int o = 0; o < out; o++) {
        double acc = b ? b[o] : 0;
        for (int i = 0; i < in; i++) acc += (double)W[(size_t)o * in + i] * x[i];
        y[o] = acc;
    }
}

static void rope(double *x, int d, int pos, const double *inv, double attn) {
    for (int i = 0; i < d / 2; i++) {
        double c = cos(pos * inv[i]) * attn, sn = sin(pos * inv[i]) * attn, a = x[i], b = x[i + d / 2];
        x[i] = a * c - b * sn;
        x[i + d / 2] = b * c + a * sn;
    }
}

/* Q8_0 experts (test_gptoss_q8_0_experts): the reference quantizes each
 * expert's input as a Q8_0 matmul does (ggml's quantize_row_q8_0: per 32
 * values d = amax / 127, q = nearest(x / d) ties to even, d stored as a
 * half) and multiplies weights already rounded so (q8_roundtrip). */
static bool g_ref_q8;

static void q8_roundtrip(double *x, int n) {
    for (int b = 0; b + 32 <= n; b += 32) {
        float amax = 0;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf((float)x[b + j]));
        float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        double dh = fp16_f16_to_f32(fp16_f32_to_f16(d));
        for (int j = 0; j < 32; j++) x[b + j] = nearbyintf((float)x[b + j] * id) * dh;
    }
}

static void ref_forward(const gpo_spec *s, const gpo_weights *w, bool truncate, ref_bug bug, const int32_t *tok, int T,
                        double *logits) {
    int H = s->hidden, hd = s->head_dim, qd = s->heads * hd, kvd = s->kv_heads * hd, E = s->experts, F = s->ffn;
    int K = s->experts_used;
    double inv[64], attn_f;
    yarn_table(s, truncate, bug, inv, &attn_f);
    double *x = calloc((size_t)T * H, sizeof *x), *h = calloc((size_t)H, sizeof *h);
    double *q = calloc((size_t)T * qd, sizeof *q), *k = calloc((size_t)T * kvd, sizeof *k);
    double *v = calloc((size_t)T * kvd, sizeof *v), *att = calloc((size_t)qd, sizeof *att);
    double *o = calloc((size_t)H, sizeof *o), *pr = calloc((size_t)T, sizeof *pr), *lg = calloc((size_t)E, sizeof *lg);
    double *gu = calloc((size_t)2 * F, sizeof *gu), *act = calloc((size_t)F, sizeof *act);
    for (int t = 0; t < T; t++)
        for (int i = 0; i < H; i++) x[(size_t)t * H + i] = w->embed[(size_t)tok[t] * H + i];
    double L = 7.0; /* gpt-oss's swiglu_limit */
    for (int l = 0; l < s->layers; l++) {
        const gpo_layer *W = &w->l[l];
        bool windowed = (l % 2 == 0) != (bug == BUG_WINDOW_ODD);
        for (int t = 0; t < T; t++) {
            rmsnorm(h, x + (size_t)t * H, W->in_norm, H, s->eps);
            linear(q + (size_t)t * qd, W->wq, W->bq, h, qd, H);
            linear(k + (size_t)t * kvd, W->wk, W->bk, h, kvd, H);
            linear(v + (size_t)t * kvd, W->wv, W->bv, h, kvd, H);
            for (int hh = 0; hh < s->heads; hh++) rope(q + (size_t)t * qd + hh * hd, hd, t, inv, attn_f);
            for (int hh = 0; hh < s->kv_heads; hh++) rope(k + (size_t)t * kvd + hh * hd, hd, t, inv, attn_f);
        }
        for (int t = 0; t < T; t++) {
            int first = windowed && t - s->window + 1 > 0 ? t - s->window + 1 : 0;
            for (int hh = 0; hh < s->heads; hh++) {
                int kh = hh / (s->heads / s->kv_heads);
                const double *qh = q + (size_t)t * qd + hh * hd;
                double sink = W->sinks[hh], mx = sink;
                for (int j = first; j <= t; j++) {
                    double dot = 0;
                    for (int i = 0; i < hd; i++) dot += qh[i] * k[(size_t)j * kvd + kh * hd + i];
                    pr[j] = dot / sqrt((double)hd);
                    if (pr[j] > mx) mx = pr[j];
                }
                double sum = bug == BUG_NO_SINK ? 0 : exp(sink - mx);
                for (int j = first; j <= t; j++) sum += (pr[j] = exp(pr[j] - mx));
                for (int i = 0; i < hd; i++) {
                    double a = 0;
                    for (int j = first; j <= t; j++) a += pr[j] * v[(size_t)j * kvd + kh * hd + i];
                    att[hh * hd + i] = a / sum;
                }
            }
            linear(o, W->wo, W->bo, att, H, qd);
            double *xt = x + (size_t)t * H;
            for (int i = 0; i < H; i++) xt[i] += o[i];
            /* the experts */
            rmsnorm(h, xt, W->post_norm, H, s->eps);
            linear(lg, W->router, W->router_b, h, E, H);
            int sel[16];
            bool used[64] = {false};
            for (int j = 0; j < K; j++) { /* top k, the lower id on a tie */
                int best = -1;
                for (int e = 0; e < E; e++)
                    if (!used[e] && (best < 0 || lg[e] > lg[best])) best = e;
                sel[j] = best, used[best] = true;
            }
            double wsum = 0, wts[16];
            if (bug == BUG_ROUTER_ALL) {
                for (int e = 0; e < E; e++) wsum += exp(lg[e] - lg[sel[0]]);
            } else {
                for (int j = 0; j < K; j++) wsum += exp(lg[sel[j]] - lg[sel[0]]);
            }
            for (int j = 0; j < K; j++) wts[j] = exp(lg[sel[j]] - lg[sel[0]]) / wsum;
            double hq[512];
            memcpy(hq, h, (size_t)H * sizeof *hq);
            if (g_ref_q8) q8_roundtrip(hq, H);
            for (int j = 0; j < K; j++) {
                int e = sel[j];
                const float *GU = W->gate_up + (size_t)e * H * 2 * F, *GB = W->gate_up_b + (size_t)e * 2 * F;
                for (int c = 0; c < 2 * F; c++) { /* x GU + b: GU is (hidden, 2F) */
                    double acc = GB[c];
                    for (int i = 0; i < H; i++) acc += hq[i] * GU[(size_t)i * 2 * F + c];
                    gu[c] = acc;
                }
                for (int f = 0; f < F; f++) {
                    double g = gu[2 * f], u = gu[2 * f + 1];
                    if (bug != BUG_NO_CLAMP) g = fmin(g, L), u = fmax(fmin(u, L), -L);
                    act[f] = (u + 1) * g / (1 + exp(-1.702 * g));
                }
                if (g_ref_q8) q8_roundtrip(act, F);
                const float *D = W->down + (size_t)e * F * H, *DB = W->down_b + (size_t)e * H;
                for (int i = 0; i < H; i++) { /* act D + b: D is (F, hidden) */
                    double acc = DB[i];
                    for (int f = 0; f < F; f++) acc += act[f] * D[(size_t)f * H + i];
                    xt[i] += wts[j] * acc;
                }
            }
        }
    }
    for (int t = 0; t < T; t++) {
        rmsnorm(h, x + (size_t)t * H, w->final_norm, H, s->eps);
        linear(logits + (size_t)t * s->vocab, w->lm_head, NULL, h, s->vocab, H);
    }
    free(x), free(h), free(q), free(k), free(v), free(att), free(o), free(pr), free(lg), free(gu), free(act);
}

static double max_diff(const float *got, const double *want, size_t n) {
    double d = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - want[i]);
        if (!(e <= d)) d = e;
    }
    return d;
}

static void check_forward(const char *path, const gpo_spec *s, const gpo_weights *w, bool truncate,
                          const int32_t *prompt) {
    pdl_model *m = NULL;
    pdl_error err;
    pdl_model_options o = {.n_threads = 2, .log = test_log_no_unused_tensors, .log_user = (void *)path};
    REQUIRE_MSG(pdl_model_load(&m, path, &o, &err) == 0, "%s: %s", path, err.message);
    pdl_model_info info;
    pdl_model_get_info(m, &info);
    CHECK_MSG(strcmp(info.arch, "gpt-oss") == 0, "%s: arch %s", path, info.arch);
    int V = s->vocab, N = PROMPT + STEPS;
    float *rows = test_all_row_logits(m, prompt, PROMPT);
    int32_t seq_tok[PROMPT + STEPS];
    memcpy(seq_tok, prompt, sizeof(int32_t) * PROMPT);
    pdl_context *ctx = test_context(m);
    pdl_kv_cache *kv = NULL;
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
    /* batch invariance: each decode step's bytes are its row's in one
     * prefill of the whole sequence (experts grouped per step vs run expert
     * by expert, attention sinks in query groups of other sizes) */
    float *whole = test_all_row_logits(m, seq_tok, PROMPT + STEPS - 1);
    for (int k = 0; k < STEPS; k++)
        CHECK_MSG(memcmp(whole + (size_t)(PROMPT - 1 + k) * V, step + (size_t)k * V, (size_t)V * sizeof(float)) == 0,
                  "%s: decode step %d differs from its row of a whole prefill", path, k);
    free(whole);
    pdl_model_free(m);

    double *want = malloc((size_t)N * V * sizeof *want), *bad = malloc((size_t)PROMPT * V * sizeof *bad);
    ref_forward(s, w, truncate, BUG_NONE, seq_tok, N, want);
    double d = max_diff(rows, want, (size_t)PROMPT * V);
    double ds = max_diff(step, want + (size_t)(PROMPT - 1) * V, (size_t)STEPS * V);
    double mag = 0;
    for (size_t i = 0; i < (size_t)PROMPT * V; i++) mag = fmax(mag, fabs(want[i]));
    fprintf(stderr, "  %s: max |engine - float64|: prompt rows %.3g, greedy steps %.3g (largest logit %.3g)\n", path,
            d, ds, mag);
    CHECK_MSG(d <= TOL, "%s: prompt logits differ from the float64 reference by %g (tolerance %g)", path, d, TOL);
    CHECK_MSG(ds <= TOL, "%s: decode logits differ from the float64 reference by %g (tolerance %g)", path, ds, TOL);
    for (int k = 0; k < STEPS; k++) {
        const double *r = want + (size_t)(PROMPT - 1 + k) * V;
        int best = 0;
        for (int j = 1; j < V; j++)
            if (r[j] > r[best]) best = j;
        CHECK_MSG(best == seq_tok[PROMPT + k], "%s: greedy step %d: engine %d, reference %d", path, k,
                  seq_tok[PROMPT + k], best);
    }
    for (int b = BUG_NONE + 1; b < N_BUGS; b++) {
        ref_forward(s, w, truncate, (ref_bug)b, seq_tok, PROMPT, bad);
        double db = 0;
        for (size_t i = 0; i < (size_t)PROMPT * V; i++) db = fmax(db, fabs(bad[i] - want[i]));
        fprintf(stderr, "  %s: reference variant %d moves logits by %.3g\n", path, b, db);
        CHECK_MSG(db > 100 * TOL, "%s: reference variant %d moves logits by only %g: the test could not see it", path,
                  b, db);
    }
    free(want), free(bad), free(rows), free(step);
}

static void check_model(const gpo_spec *s_in, const char *name, uint64_t seed) {
    gpo_spec s = *s_in;
    gpo_weights w = gpo_make_weights(&s, seed);
    char *dir = test_make_dir(name), sub[128];
    char *hf = test_join(dir, "hf"), *gg = test_join(dir, "model.gguf");
    snprintf(sub, sizeof sub, "%s/hf", name);
    free(test_make_dir(sub));
    gpo_write_hf(&s, &w, hf);
    gpo_write_gguf(&s, &w, gg);
    int32_t prompt[PROMPT];
    uint64_t r = 77;
    for (int t = 0; t < PROMPT; t++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        prompt[t] = (int32_t)((r >> 33) % (uint64_t)s.vocab);
    }
    check_forward(hf, &s, &w, false, prompt); /* config.json: truncate false */
    check_forward(gg, &s, &w, true, prompt);  /* llama.cpp always rounds the ramp's ends */
    free(hf), free(gg), free(dir);
    gpo_free_weights(&s, &w);
}

static void test_gptoss_matches_float64_reference(void) {
    gpo_spec s = gpo_tiny_spec();
    check_model(&s, "gptoss-ref", 0x243F6A8885A308D3ull);
}

/* BF16 experts, as a BF16 checkpoint (transposed at load from Hugging
 * Face's (E, hidden, 2F) layout, 2-byte elements) and its conversion hold
 * them; the reference multiplies the same BF16 values exactly. */
static void test_gptoss_bf16_experts_match_float64_reference(void) {
    gpo_spec s = gpo_tiny_spec();
    s.bf16_experts = true;
    check_model(&s, "gptoss-bf16", 0x13198A2E03707344ull);
}

/* The published checkpoints' MXFP4 experts (_blocks / _scales, U8, byte j
 * of a block holding values 2j and 2j + 1), repacked at load into ggml's
 * MXFP4 blocks: all-row logits within TOL of the float64 forward (the
 * experts' inputs quantized per 32 as the MXFP4 matmul does), and the same
 * bytes as the GGUF llama.cpp's converter makes of the folder (YaRN's
 * truncate set in both, so they hold one model). The byte equality is
 * what pins the repacking: the float64 comparison can move by ~1e-2 when
 * an activation sits on an int8 rounding boundary (float32 and float64 then
 * round it apart), which this seed's prompt does not hit. */
static void test_gptoss_mxfp4_hf_experts(void) {
    gpo_spec s = gpo_tiny_spec();
    s.mxfp4_experts = true, s.hf_mxfp4 = true, s.hf_truncate = true;
    gpo_weights w = gpo_make_weights(&s, 0xBE5466CF34E90C6Cull);
    char *dir = test_make_dir("gptoss-mxfp4-hf"), *gg = test_join(dir, "model.gguf");
    gpo_write_hf(&s, &w, dir);
    gpo_write_gguf(&s, &w, gg);
    pdl_model *m = NULL, *mg = NULL;
    pdl_error err;
    pdl_model_options o = {.n_threads = 2};
    REQUIRE_MSG(pdl_model_load(&m, dir, &o, &err) == 0, "%s", err.message);
    REQUIRE_MSG(pdl_model_load(&mg, gg, &o, &err) == 0, "%s", err.message);
    pdl_model_info info;
    pdl_model_get_info(m, &info);
    CHECK_CONTAINS(info.weight_types, "MXFP4");
    int32_t tok[64];
    for (int t = 0; t < 64; t++) tok[t] = (int32_t)((t * 29 + 3) % s.vocab);
    float *rows = test_all_row_logits(m, tok, 64), *rows_gguf = test_all_row_logits(mg, tok, 64);
    CHECK_MSG(memcmp(rows, rows_gguf, (size_t)64 * s.vocab * sizeof *rows) == 0,
              "the HF folder's MXFP4 experts and the GGUF's give different logits");
    double *want = malloc((size_t)64 * s.vocab * sizeof *want);
    g_ref_q8 = true;
    ref_forward(&s, &w, true, BUG_NONE, tok, 64, want);
    g_ref_q8 = false;
    double d = max_diff(rows, want, (size_t)64 * s.vocab);
    fprintf(stderr, "  MXFP4 experts from the HF folder: max |engine - float64| %.3g\n", d);
    CHECK_MSG(d <= TOL, "HF MXFP4 experts: %.3g from the float64 forward (tolerance %g)", d, TOL);
    pdl_model_free(m), pdl_model_free(mg);
    free(rows), free(rows_gguf), free(want), free(gg), free(dir);
    gpo_free_weights(&s, &w);
}

/* Q8_0 experts, as llama.cpp quantizes them: every expert input is then
 * quantized to Q8_0 too, which the reference does as well (g_ref_q8) over
 * the weights the file holds: all-row logits within TOL (1.3e-6 seen); the
 * reference without the activations' quantization lands far off (> 100x
 * TOL), so the Q8_0 path is what is compared. And a scratch take that fails
 * anywhere (the experts' separate gate and up products, grouped in a decode
 * and one by one in a prefill) is an error naming it, the rerun clean. */
static void test_gptoss_q8_0_experts(void) {
    gpo_spec s = gpo_tiny_spec();
    s.gguf_q8_0_experts = true;
    gpo_weights w = gpo_make_weights(&s, 0xA4093822299F31D0ull);
    char *dir = test_make_dir("gptoss-q8"), *gg = test_join(dir, "model.gguf");
    gpo_write_gguf(&s, &w, gg);
    /* the reference's weights: what the file holds, rows of the converter's
     * layout (gate and up over hidden, down over the expert width) in Q8_0 */
    int H = s.hidden, F = s.ffn;
    double *row = malloc((size_t)(H > F ? H : F) * sizeof *row);
    for (int l = 0; l < s.layers; l++)
        for (int e = 0; e < s.experts; e++) {
            float *gu = w.l[l].gate_up + (size_t)e * H * 2 * F, *dn = w.l[l].down + (size_t)e * F * H;
            for (int c = 0; c < 2 * F; c++) {
                for (int i = 0; i < H; i++) row[i] = gu[(size_t)i * 2 * F + c];
                q8_roundtrip(row, H);
                for (int i = 0; i < H; i++) gu[(size_t)i * 2 * F + c] = (float)row[i];
            }
            for (int i = 0; i < H; i++) {
                for (int f = 0; f < F; f++) row[f] = dn[(size_t)f * H + i];
                q8_roundtrip(row, F);
                for (int f = 0; f < F; f++) dn[(size_t)f * H + i] = (float)row[f];
            }
        }
    free(row);
    pdl_model *m = NULL;
    pdl_error err;
    pdl_model_options o = {.n_threads = 2};
    REQUIRE_MSG(pdl_model_load(&m, gg, &o, &err) == 0, "%s", err.message);
    pdl_model_info info;
    pdl_model_get_info(m, &info);
    CHECK_CONTAINS(info.weight_types, "Q8_0");
    int32_t tok[64];
    for (int t = 0; t < 64; t++) tok[t] = (int32_t)((t * 37 + 11) % s.vocab);
    float *rows = test_all_row_logits(m, tok, 64);
    double *want = malloc((size_t)64 * s.vocab * sizeof *want);
    g_ref_q8 = true;
    ref_forward(&s, &w, true, BUG_NONE, tok, 64, want);
    g_ref_q8 = false;
    double d = max_diff(rows, want, (size_t)64 * s.vocab);
    ref_forward(&s, &w, true, BUG_NONE, tok, 64, want);
    double dplain = max_diff(rows, want, (size_t)64 * s.vocab);
    fprintf(stderr, "  Q8_0 experts: max |engine - float64| %.3g (%.3g without quantized activations)\n", d, dplain);
    CHECK_MSG(d <= TOL, "Q8_0 experts: %.3g from the float64 forward (tolerance %g)", d, TOL);
    CHECK(dplain > 100 * TOL);
    pdl_context *ctx = test_context(m);
    CHECK(test_forward_fails_at_every_scratch_take(ctx, tok, 24) > 0);
    pdl_context_free(ctx);
    pdl_model_free(m);
    free(rows), free(want), free(gg), free(dir);
    gpo_free_weights(&s, &w);
}

/* MXFP4 experts (GGUF type 39, as the published gpt-oss GGUFs hold them):
 * the weights the file holds are exact in the reference, the experts'
 * inputs quantized per 32 to 8 bits as the MXFP4 matmul does (g_ref_q8);
 * all-row logits within TOL. */
static void test_gptoss_mxfp4_experts(void) {
    gpo_spec s = gpo_tiny_spec();
    s.mxfp4_experts = true;
    gpo_weights w = gpo_make_weights(&s, 0xBE5466CF34E90C6Cull);
    char *dir = test_make_dir("gptoss-mxfp4-gguf"), *gg = test_join(dir, "model.gguf");
    gpo_write_gguf(&s, &w, gg);
    pdl_model *m = NULL;
    pdl_error err;
    pdl_model_options o = {.n_threads = 2};
    REQUIRE_MSG(pdl_model_load(&m, gg, &o, &err) == 0, "%s", err.message);
    pdl_model_info info;
    pdl_model_get_info(m, &info);
    CHECK_CONTAINS(info.weight_types, "MXFP4");
    int32_t tok[64];
    for (int t = 0; t < 64; t++) tok[t] = (int32_t)((t * 41 + 5) % s.vocab);
    float *rows = test_all_row_logits(m, tok, 64);
    double *want = malloc((size_t)64 * s.vocab * sizeof *want);
    g_ref_q8 = true;
    ref_forward(&s, &w, true, BUG_NONE, tok, 64, want);
    g_ref_q8 = false;
    double d = max_diff(rows, want, (size_t)64 * s.vocab);
    fprintf(stderr, "  MXFP4 experts: max |engine - float64| %.3g\n", d);
    CHECK_MSG(d <= TOL, "MXFP4 experts: %.3g from the float64 forward (tolerance %g)", d, TOL);
    pdl_model_free(m);
    free(rows), free(want), free(gg), free(dir);
    gpo_free_weights(&s, &w);
}

/* llama.cpp's converter with --fuse-gate-up-exps: one ffn_gate_up_exps
 * tensor (gate rows, then up rows, per expert) and its bias, split at load
 * into the same views. */
static void test_gptoss_fused_gate_up_gguf(void) {
    gpo_spec s = gpo_tiny_spec();
    s.gguf_fused_gate_up = true;
    gpo_weights w = gpo_make_weights(&s, 0x082EFA98EC4E6C89ull);
    char *dir = test_make_dir("gptoss-fused"), *gg = test_join(dir, "model.gguf");
    gpo_write_gguf(&s, &w, gg);
    int32_t prompt[PROMPT];
    for (int t = 0; t < PROMPT; t++) prompt[t] = (int32_t)((t * 53 + 7) % s.vocab);
    check_forward(gg, &s, &w, true, prompt);
    free(gg), free(dir);
    gpo_free_weights(&s, &w);
}

/* llama.cpp's converter writes <|return|> as a gpt-oss GGUF's only EOS; a
 * tool call ends with <|call|>, which must end generation too (as llama.cpp
 * stops at both): both are among the model's end tokens. */
static void test_gptoss_gguf_ends_at_return_and_call(void) {
    gpo_spec s = gpo_tiny_spec();
    s.gguf_harmony_vocab = true;
    gpo_weights w = gpo_make_weights(&s, 77);
    char *dir = test_make_dir("gptoss-harmony-vocab"), *gg = test_join(dir, "model.gguf");
    gpo_write_gguf(&s, &w, gg);
    pdl_model *m = NULL;
    pdl_error err;
    REQUIRE_MSG(pdl_model_load(&m, gg, NULL, &err) == 0, "%s", err.message);
    bool ret = false, call = false;
    for (int i = 0; i < m->cfg.n_eos; i++)
        ret = ret || m->cfg.eos_ids[i] == s.vocab - 2, call = call || m->cfg.eos_ids[i] == s.vocab - 1;
    CHECK_MSG(ret && call, "end tokens: <|return|> %d, <|call|> %d (of %d)", ret, call, m->cfg.n_eos);
    pdl_model_free(m);
    free(gg), free(dir);
    gpo_free_weights(&s, &w);
}

/* A gpt-oss GGUF without its sinks is refused naming the tensor. */
static void test_missing_sinks_are_named(void) {
    gpo_spec s = gpo_tiny_spec();
    s.gguf_no_sinks = true;
    gpo_weights w = gpo_make_weights(&s, 9);
    char *dir = test_make_dir("gptoss-nosinks"), *gg = test_join(dir, "model.gguf");
    gpo_write_gguf(&s, &w, gg);
    pdl_model *m = NULL;
    pdl_error err;
    CHECK_MSG(pdl_model_load(&m, gg, NULL, &err) != 0, "%s loaded", gg);
    CHECK_CONTAINS(err.message, "blk.0.attn_sinks.weight");
    pdl_model_free(m);
    free(gg), free(dir);
    gpo_free_weights(&s, &w);
}

int main(void) {
    setenv("PAGEDLM_BF16_ACTIVATIONS", "0", 1);
    pdl_error kerr;
    REQUIRE(pdl_set_kernels(NULL, 0, &kerr) == 0);
    RUN(test_gptoss_matches_float64_reference);
    RUN(test_gptoss_bf16_experts_match_float64_reference);
    RUN(test_gptoss_mxfp4_hf_experts);
    RUN(test_gptoss_gguf_ends_at_return_and_call);
    RUN(test_gptoss_fused_gate_up_gguf);
    RUN(test_gptoss_q8_0_experts);
    RUN(test_gptoss_mxfp4_experts);
    RUN(test_missing_sinks_are_named);
    return test_summary();
}
