/*
 * qwen35_writer.c - tiny random-weight Qwen3.5 / Qwen3.5-MoE models in both
 * formats (see qwen35_writer.h). The Hugging Face side follows the
 * published checkpoints' names and shapes; the GGUF side follows llama.cpp's
 * conversion/qwen.py (Qwen3NextModel.modify_tensors,
 * _LinearAttentionVReorderBase, _Qwen35MtpMixin, Qwen2MoeModel's fused
 * expert split) and the tensor names its src/models/qwen35*.cpp load; with
 * q35_spec.next, transformers' Qwen3-Next checkpoints (fused in_proj_qkvz /
 * in_proj_ba, fix_query_key_value_ordering) and llama.cpp's
 * Qwen3NextModel and src/models/qwen3next.cpp.
 * Not shared with src/: a test built on these files checks the loaders
 * against an independent reading of those sources.
 */
#define _POSIX_C_SOURCE 200809L
#include "qwen35_writer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/fp16.h"
#include "kernels/matmul.h"
#include "support/gguf_writer.h"
#include "support/st_writer.h"
#include "test_util.h"

q35_spec q35_tiny_spec(bool moe) {
    q35_spec s = {.moe = moe, .hidden = 64, .layers = 8, .vocab = 128, .ctx = 256, .heads = 4, .kv_heads = 2,
                  .head_dim = 32, .ffn = 96, .lin_k_heads = 2, .lin_v_heads = 4, .lin_k_dim = 16, .lin_v_dim = 16,
                  .conv = 4, .full_attention_interval = 4, .partial_rotary = 0.25, .theta = 10000000.0,
                  .eps = 1e-6};
    if (moe) s.experts = 8, s.experts_used = 2, s.expert_ffn = 32, s.shared_ffn = 48, s.ffn = 0;
    return s;
}

bool q35_layer_is_linear(const q35_spec *s, int l) { return (l + 1) % s->full_attention_interval != 0; }
int q35_conv_dim(const q35_spec *s) { return 2 * s->lin_k_heads * s->lin_k_dim + s->lin_v_heads * s->lin_v_dim; }
int q35_rope_dim(const q35_spec *s) { return (int)(s->head_dim * s->partial_rotary); }

int q35_tiled_to_grouped(const q35_spec *s, int t) {
    int per_k = s->lin_v_heads / s->lin_k_heads;
    return (t % s->lin_k_heads) * per_k + t / s->lin_k_heads;
}

/* ---- random weights ---------------------------------------------------------- */

static uint64_t q35_rng;
static double q35_urand(void) { /* uniform in [-1, 1) */
    q35_rng ^= q35_rng << 13, q35_rng ^= q35_rng >> 7, q35_rng ^= q35_rng << 17;
    return (double)(q35_rng >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

static float *vec(size_t n, double center, double spread) {
    float *v = malloc(n * sizeof *v);
    REQUIRE(v != NULL);
    for (size_t i = 0; i < n; i++) v[i] = (float)(center + spread * q35_urand());
    return v;
}

/* uniform +-1.7/sqrt(cols): an output of about the input's magnitude */
static float *mat(size_t rows, size_t cols) { return vec(rows * cols, 0.0, 1.7 / sqrt((double)cols)); }

static void make_layer(const q35_spec *s, q35_layer *L, bool linear) {
    int H = s->hidden;
    L->linear = linear;
    L->in_norm = vec((size_t)H, 0.0, 0.3), L->post_norm = vec((size_t)H, 0.0, 0.3);
    /* both kinds' mixer weights, whatever the layer's kind: a test may run
     * the layer as the other kind (a layer kind off by one) */
    {
        int vh = s->lin_v_heads, vdim = vh * s->lin_v_dim, cd = q35_conv_dim(s);
        L->qkv = mat((size_t)cd, (size_t)H);
        L->z = mat((size_t)vdim, (size_t)H);
        L->b = mat((size_t)vh, (size_t)H);
        L->a = vec((size_t)vh * H, 0.0, 0.6 / sqrt((double)H));
        L->conv = vec((size_t)cd * s->conv, 0.0, 0.6);
        /* exp(A_log) in [0.02, 0.4] and softplus(a + dt_bias) about 0.1..1.2:
         * decays exp(g) from ~0.998 (a state kept over chunks of 64) to ~0.6 */
        L->A_log = malloc((size_t)vh * sizeof(float));
        REQUIRE(L->A_log != NULL);
        for (int h = 0; h < vh; h++) L->A_log[h] = (float)log(0.21 + 0.19 * q35_urand());
        L->dt_bias = vec((size_t)vh, -0.75, 1.25);
        L->lin_norm = vec((size_t)s->lin_v_dim, 1.0, 0.3);
        L->out = mat((size_t)H, (size_t)vdim);
    }
    {
        int hd = s->head_dim, q = s->heads * hd, kv = s->kv_heads * hd;
        L->wq = mat((size_t)2 * q, (size_t)H);
        L->wk = mat((size_t)kv, (size_t)H), L->wv = mat((size_t)kv, (size_t)H);
        L->wo = mat((size_t)H, (size_t)q);
        L->q_norm = vec((size_t)hd, 0.0, 0.3), L->k_norm = vec((size_t)hd, 0.0, 0.3);
    }
    if (s->moe) {
        size_t E = (size_t)s->experts, I = (size_t)s->expert_ffn, S = (size_t)s->shared_ffn;
        L->router = vec(E * H, 0.0, 3.0 / sqrt((double)H)); /* router logits spread ~1 */
        L->eg = vec(E * I * H, 0.0, 1.7 / sqrt((double)H));
        L->eu = vec(E * I * H, 0.0, 1.7 / sqrt((double)H));
        L->ed = vec(E * H * I, 0.0, 1.7 / sqrt((double)I));
        L->sg = mat(S, (size_t)H), L->su = mat(S, (size_t)H), L->sd = mat((size_t)H, S);
        L->sgate = vec((size_t)H, 0.0, 2.0 / sqrt((double)H));
    } else {
        L->gate = mat((size_t)s->ffn, (size_t)H), L->up = mat((size_t)s->ffn, (size_t)H);
        L->down = mat((size_t)H, (size_t)s->ffn);
    }
}

static void free_layer(q35_layer *L) {
    float **all[] = {&L->in_norm, &L->post_norm, &L->wq, &L->wk, &L->wv, &L->wo, &L->q_norm, &L->k_norm,
                     &L->qkv, &L->z, &L->b, &L->a, &L->conv, &L->dt_bias, &L->A_log, &L->lin_norm, &L->out,
                     &L->gate, &L->up, &L->down, &L->router, &L->eg, &L->eu, &L->ed, &L->sg, &L->su, &L->sd,
                     &L->sgate};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(*all[i]), *all[i] = NULL;
}

q35_mtp q35_make_mtp(const q35_spec *s, const q35_weights *w) {
    q35_mtp m = {0};
    q35_rng = w->seed ^ 0xA5A5A5A5DEADBEEFull;
    make_layer(s, &m.layer, false);
    int H = s->hidden;
    m.fc = mat((size_t)H, (size_t)2 * H);
    m.enorm = vec((size_t)H, 0.0, 0.3), m.hnorm = vec((size_t)H, 0.0, 0.3), m.norm = vec((size_t)H, 0.0, 0.3);
    return m;
}

void q35_free_mtp(q35_mtp *m) {
    free_layer(&m->layer);
    free(m->fc), free(m->enorm), free(m->hnorm), free(m->norm);
}

q35_weights q35_make_weights(const q35_spec *s, uint64_t seed) {
    REQUIRE(s->lin_v_heads % s->lin_k_heads == 0 && s->full_attention_interval > 0);
    q35_rng = seed ? seed : 0x9E3779B97F4A7C15ull;
    q35_weights w = {.seed = q35_rng};
    int H = s->hidden;
    w.embed = vec((size_t)s->vocab * H, 0.0, 1.0);
    w.final_norm = vec((size_t)H, 0.0, 0.3);
    w.lm_head = s->tied ? NULL : mat((size_t)s->vocab, (size_t)H);
    w.l = calloc((size_t)s->layers, sizeof *w.l);
    REQUIRE(w.l != NULL);
    for (int l = 0; l < s->layers; l++) make_layer(s, &w.l[l], q35_layer_is_linear(s, l));
    return w;
}

void q35_free_weights(const q35_spec *s, q35_weights *w) {
    free(w->embed), free(w->final_norm), free(w->lm_head);
    for (int l = 0; l < s->layers; l++) free_layer(&w->l[l]);
    free(w->l);
    memset(w, 0, sizeof *w);
}

/* ---- the Hugging Face folder --------------------------------------------------- */

/* Qwen3-Next-80B-A3B's config.json in this shape: flat (no text_config),
 * full_attention_interval instead of layer_types, partial_rotary_factor
 * left to Qwen3NextConfig's default (0.25) when it is that, per-expert and
 * shared widths, and a dense width (intermediate_size) no layer uses. */
static void write_config_next(const q35_spec *s, const char *dir) {
    size_t cap = 16384, at = 0;
    char *j = malloc(cap);
    REQUIRE(j != NULL && s->moe);
#define J(...)                                                 \
    do {                                                       \
        at += (size_t)snprintf(j + at, cap - at, __VA_ARGS__); \
        REQUIRE(at < cap);                                     \
    } while (0)
    J("{\n  \"architectures\": [\"Qwen3NextForCausalLM\"],\n  \"model_type\": \"qwen3_next\",\n");
    J("  \"hidden_size\": %d,\n  \"num_hidden_layers\": %d,\n  \"num_attention_heads\": %d,\n", s->hidden, s->layers,
      s->heads);
    J("  \"num_key_value_heads\": %d,\n  \"head_dim\": %d,\n  \"vocab_size\": %d,\n", s->kv_heads, s->head_dim,
      s->vocab);
    J("  \"intermediate_size\": %d,\n  \"rms_norm_eps\": %g,\n  \"hidden_act\": \"silu\",\n", 3 * s->hidden,
      s->eps);
    J("  \"max_position_embeddings\": %d,\n  \"tie_word_embeddings\": %s,\n", s->ctx, s->tied ? "true" : "false");
    J("  \"full_attention_interval\": %d,\n", s->full_attention_interval);
    J("  \"linear_conv_kernel_dim\": %d,\n  \"linear_key_head_dim\": %d,\n", s->conv, s->lin_k_dim);
    J("  \"linear_value_head_dim\": %d,\n  \"linear_num_key_heads\": %d,\n  \"linear_num_value_heads\": %d,\n",
      s->lin_v_dim, s->lin_k_heads, s->lin_v_heads);
    J("  \"rope_theta\": %.17g,\n  \"rope_scaling\": null,\n", s->theta);
    if (s->partial_rotary != 0.25) J("  \"partial_rotary_factor\": %g,\n", s->partial_rotary);
    J("  \"decoder_sparse_step\": 1,\n  \"mlp_only_layers\": [],\n  \"norm_topk_prob\": true,\n");
    J("  \"num_experts\": %d,\n  \"num_experts_per_tok\": %d,\n  \"moe_intermediate_size\": %d,\n"
      "  \"shared_expert_intermediate_size\": %d,\n  \"router_aux_loss_coef\": 0.001,\n",
      s->experts, s->experts_used, s->expert_ffn, s->shared_ffn);
    J("  \"bos_token_id\": 1,\n  \"eos_token_id\": 2\n}\n");
#undef J
    char *path = test_join(dir, "config.json");
    test_write_file(path, j, at);
    free(path), free(j);
}

static void write_config(const q35_spec *s, const char *dir) {
    if (s->next) {
        write_config_next(s, dir);
        return;
    }
    size_t cap = 16384, at = 0;
    char *j = malloc(cap);
    REQUIRE(j != NULL);
#define J(...)                                                 \
    do {                                                       \
        at += (size_t)snprintf(j + at, cap - at, __VA_ARGS__); \
        REQUIRE(at < cap);                                     \
    } while (0)
    const char *arch = s->moe ? "Qwen3_5MoeForConditionalGeneration" : "Qwen3_5ForConditionalGeneration";
    const char *type = s->moe ? "qwen3_5_moe" : "qwen3_5";
    /* mrope_section [11, 11, 10] of a 64-wide rotary part (32 pairs),
     * scaled to this one's pairs */
    int pairs = q35_rope_dim(s) / 2, s0 = (11 * pairs + 16) / 32, s2 = pairs - 2 * s0;
    J("{\n  \"architectures\": [\"%s\"],\n  \"model_type\": \"%s\",\n", arch, type);
    J("  \"image_token_id\": 248056,\n  \"video_token_id\": 248057,\n  \"tie_word_embeddings\": %s,\n",
      s->tied ? "true" : "false");
    J("  \"text_config\": {\n    \"model_type\": \"%s_text\",\n", type);
    J("    \"hidden_size\": %d,\n    \"num_hidden_layers\": %d,\n    \"num_attention_heads\": %d,\n", s->hidden,
      s->layers, s->heads);
    J("    \"num_key_value_heads\": %d,\n    \"head_dim\": %d,\n    \"vocab_size\": %d,\n", s->kv_heads, s->head_dim,
      s->vocab);
    if (!s->moe) J("    \"intermediate_size\": %d,\n", s->ffn);
    J("    \"rms_norm_eps\": %g,\n    \"hidden_act\": \"silu\",\n    \"attn_output_gate\": true,\n", s->eps);
    J("    \"max_position_embeddings\": %d,\n    \"tie_word_embeddings\": %s,\n", s->ctx, s->tied ? "true" : "false");
    J("    \"full_attention_interval\": %d,\n    \"layer_types\": [", s->full_attention_interval);
    for (int l = 0; l < s->layers; l++)
        J("%s\"%s\"", l ? ", " : "", q35_layer_is_linear(s, l) ? "linear_attention" : "full_attention");
    J("],\n    \"linear_conv_kernel_dim\": %d,\n    \"linear_key_head_dim\": %d,\n", s->conv, s->lin_k_dim);
    J("    \"linear_value_head_dim\": %d,\n    \"linear_num_key_heads\": %d,\n    \"linear_num_value_heads\": %d,\n",
      s->lin_v_dim, s->lin_k_heads, s->lin_v_heads);
    J("    \"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": %.17g, \"partial_rotary_factor\": %g, "
      "\"mrope_section\": [%d, %d, %d], \"mrope_interleaved\": true},\n",
      s->theta, s->partial_rotary, s0, s0, s2);
    if (s->moe)
        J("    \"num_experts\": %d,\n    \"num_experts_per_tok\": %d,\n    \"moe_intermediate_size\": %d,\n"
          "    \"shared_expert_intermediate_size\": %d,\n    \"router_aux_loss_coef\": 0.001,\n",
          s->experts, s->experts_used, s->expert_ffn, s->shared_ffn);
    J("    \"mtp_num_hidden_layers\": %d,\n    \"bos_token_id\": 1,\n    \"eos_token_id\": 2\n  },\n", s->mtp_layers);
    /* a vision tower the text loaders leave for later (reported, not used) */
    J("  \"vision_config\": {\"model_type\": \"%s\", \"depth\": 1, \"hidden_size\": 16, \"num_heads\": 2, "
      "\"patch_size\": 16, \"out_hidden_size\": %d}\n}\n",
      s->moe ? "qwen3_5_moe" : "qwen3_5", s->hidden);
#undef J
    char *path = test_join(dir, "config.json");
    test_write_file(path, j, at);
    free(path), free(j);
}

/* Qwen3-Next's in_proj_qkvz: per key head h its q rows, k rows, then the
 * v and z rows of its value heads (grouped order: value heads h * r ..
 * h * r + r - 1, r = v_heads / k_heads). A new [2 * kd + 2 * vd][hidden]. */
static float *fused_qkvz(const q35_spec *s, const q35_layer *L) {
    size_t H = (size_t)s->hidden, kh = (size_t)s->lin_k_heads, dk = (size_t)s->lin_k_dim;
    size_t rv = (size_t)(s->lin_v_heads / s->lin_k_heads) * s->lin_v_dim, kd = kh * dk;
    float *p = malloc((2 * kd + 2 * kh * rv) * H * sizeof *p), *at = p;
    REQUIRE(p != NULL);
    for (size_t h = 0; h < kh; h++) {
        const float *parts[4] = {L->qkv + h * dk * H, L->qkv + (kd + h * dk) * H, L->qkv + (2 * kd + h * rv) * H,
                                 L->z + h * rv * H};
        const size_t rows[4] = {dk, dk, rv, rv};
        for (int k = 0; k < 4; k++) {
            memcpy(at, parts[k], rows[k] * H * sizeof *p);
            at += rows[k] * H;
        }
    }
    return p;
}

/* Qwen3-Next's in_proj_ba: per key head the b rows of its value heads,
 * then their a rows. A new [2 * v_heads][hidden]. */
static float *fused_ba(const q35_spec *s, const q35_layer *L) {
    size_t H = (size_t)s->hidden, kh = (size_t)s->lin_k_heads, r = (size_t)(s->lin_v_heads / s->lin_k_heads);
    float *p = malloc(2 * kh * r * H * sizeof *p);
    REQUIRE(p != NULL);
    for (size_t h = 0; h < kh; h++) {
        memcpy(p + 2 * h * r * H, L->b + h * r * H, r * H * sizeof *p);
        memcpy(p + (2 * h + 1) * r * H, L->a + h * r * H, r * H * sizeof *p);
    }
    return p;
}

static void hf_layer(stw_writer *st, const q35_spec *s, const q35_layer *L, const char *prefix) {
    char n[256];
    int H = s->hidden;
#define N(x) (snprintf(n, sizeof n, "%s.%s", prefix, x), n)
    stw_add_f32(st, N("input_layernorm.weight"), 1, (int64_t[]){H}, L->in_norm);
    stw_add_f32(st, N("post_attention_layernorm.weight"), 1, (int64_t[]){H}, L->post_norm);
    if (L->linear) {
        int vh = s->lin_v_heads, vdim = vh * s->lin_v_dim, cd = q35_conv_dim(s);
        if (s->next) {
            float *qkvz = fused_qkvz(s, L), *ba = fused_ba(s, L);
            stw_add_f32(st, N("linear_attn.in_proj_qkvz.weight"), 2, (int64_t[]){cd + vdim, H}, qkvz);
            stw_add_f32(st, N("linear_attn.in_proj_ba.weight"), 2, (int64_t[]){2 * vh, H}, ba);
            free(qkvz), free(ba);
        } else {
            stw_add_f32(st, N("linear_attn.in_proj_qkv.weight"), 2, (int64_t[]){cd, H}, L->qkv);
            stw_add_f32(st, N("linear_attn.in_proj_z.weight"), 2, (int64_t[]){vdim, H}, L->z);
            stw_add_f32(st, N("linear_attn.in_proj_b.weight"), 2, (int64_t[]){vh, H}, L->b);
            stw_add_f32(st, N("linear_attn.in_proj_a.weight"), 2, (int64_t[]){vh, H}, L->a);
        }
        stw_add_f32(st, N("linear_attn.conv1d.weight"), 3, (int64_t[]){cd, 1, s->conv}, L->conv);
        stw_add_f32(st, N("linear_attn.dt_bias"), 1, (int64_t[]){vh}, L->dt_bias);
        stw_add_f32(st, N("linear_attn.A_log"), 1, (int64_t[]){vh}, L->A_log);
        stw_add_f32(st, N("linear_attn.norm.weight"), 1, (int64_t[]){s->lin_v_dim}, L->lin_norm);
        stw_add_f32(st, N("linear_attn.out_proj.weight"), 2, (int64_t[]){H, vdim}, L->out);
    } else {
        int hd = s->head_dim, q = s->heads * hd, kv = s->kv_heads * hd;
        stw_add_f32(st, N("self_attn.q_proj.weight"), 2, (int64_t[]){2 * q, H}, L->wq);
        stw_add_f32(st, N("self_attn.k_proj.weight"), 2, (int64_t[]){kv, H}, L->wk);
        stw_add_f32(st, N("self_attn.v_proj.weight"), 2, (int64_t[]){kv, H}, L->wv);
        stw_add_f32(st, N("self_attn.o_proj.weight"), 2, (int64_t[]){H, q}, L->wo);
        stw_add_f32(st, N("self_attn.q_norm.weight"), 1, (int64_t[]){hd}, L->q_norm);
        stw_add_f32(st, N("self_attn.k_norm.weight"), 1, (int64_t[]){hd}, L->k_norm);
    }
    if (s->moe) {
        int E = s->experts, I = s->expert_ffn, S = s->shared_ffn;
        stw_add_f32(st, N("mlp.gate.weight"), 2, (int64_t[]){E, H}, L->router);
        size_t m = (size_t)I * H;
        for (int e = 0; s->next && e < E; e++) { /* Qwen3-Next's checkpoints: one tensor per expert */
            char hf[96];
            snprintf(hf, sizeof hf, "mlp.experts.%d.gate_proj.weight", e);
            stw_add_f32(st, N(hf), 2, (int64_t[]){I, H}, L->eg + (size_t)e * m);
            snprintf(hf, sizeof hf, "mlp.experts.%d.up_proj.weight", e);
            stw_add_f32(st, N(hf), 2, (int64_t[]){I, H}, L->eu + (size_t)e * m);
            snprintf(hf, sizeof hf, "mlp.experts.%d.down_proj.weight", e);
            stw_add_f32(st, N(hf), 2, (int64_t[]){H, I}, L->ed + (size_t)e * m);
        }
        /* Qwen3.5-MoE's as the published checkpoints store them: per expert
         * its gate rows, then its up rows */
        float *gu = s->next ? NULL : malloc((size_t)E * 2 * m * sizeof *gu);
        REQUIRE(s->next || gu != NULL);
        for (int e = 0; !s->next && e < E; e++) {
            memcpy(gu + (size_t)e * 2 * m, L->eg + (size_t)e * m, m * sizeof *gu);
            memcpy(gu + (size_t)e * 2 * m + m, L->eu + (size_t)e * m, m * sizeof *gu);
        }
        if (!s->next) {
            stw_add_f32(st, N("mlp.experts.gate_up_proj"), 3, (int64_t[]){E, 2 * I, H}, gu);
            stw_add_f32(st, N("mlp.experts.down_proj"), 3, (int64_t[]){E, H, I}, L->ed);
        }
        free(gu);
        stw_add_f32(st, N("mlp.shared_expert.gate_proj.weight"), 2, (int64_t[]){S, H}, L->sg);
        stw_add_f32(st, N("mlp.shared_expert.up_proj.weight"), 2, (int64_t[]){S, H}, L->su);
        stw_add_f32(st, N("mlp.shared_expert.down_proj.weight"), 2, (int64_t[]){H, S}, L->sd);
        stw_add_f32(st, N("mlp.shared_expert_gate.weight"), 2, (int64_t[]){1, H}, L->sgate);
    } else {
        stw_add_f32(st, N("mlp.gate_proj.weight"), 2, (int64_t[]){s->ffn, H}, L->gate);
        stw_add_f32(st, N("mlp.up_proj.weight"), 2, (int64_t[]){s->ffn, H}, L->up);
        stw_add_f32(st, N("mlp.down_proj.weight"), 2, (int64_t[]){H, s->ffn}, L->down);
    }
#undef N
}

void q35_write_hf(const q35_spec *s, const q35_weights *w, const char *dir) {
    write_config(s, dir);
    stw_writer *st = stw_new();
    int H = s->hidden;
    /* Qwen3NextForCausalLM: the text model under model.; Qwen3.5's
     * conditional-generation checkpoints: under model.language_model. */
    const char *text = s->next ? "model" : "model.language_model";
    char name[128];
    snprintf(name, sizeof name, "%s.embed_tokens.weight", text);
    stw_add_f32(st, name, 2, (int64_t[]){s->vocab, H}, w->embed);
    char prefix[128];
    for (int l = 0; l < s->layers; l++) {
        snprintf(prefix, sizeof prefix, "%s.layers.%d", text, l);
        hf_layer(st, s, &w->l[l], prefix);
    }
    snprintf(name, sizeof name, "%s.norm.weight", text);
    stw_add_f32(st, name, 1, (int64_t[]){H}, w->final_norm);
    if (!s->tied) stw_add_f32(st, "lm_head.weight", 2, (int64_t[]){s->vocab, H}, w->lm_head);
    if (s->mtp_layers > 0) {
        q35_mtp m = q35_make_mtp(s, w);
        stw_add_f32(st, "mtp.fc.weight", 2, (int64_t[]){H, 2 * H}, m.fc);
        stw_add_f32(st, "mtp.pre_fc_norm_embedding.weight", 1, (int64_t[]){H}, m.enorm);
        stw_add_f32(st, "mtp.pre_fc_norm_hidden.weight", 1, (int64_t[]){H}, m.hnorm);
        stw_add_f32(st, "mtp.norm.weight", 1, (int64_t[]){H}, m.norm);
        hf_layer(st, s, &m.layer, "mtp.layers.0");
        q35_free_mtp(&m);
    }
    /* one tensor of the vision tower (Qwen3-Next has none) */
    float vis[16];
    for (int i = 0; i < 16; i++) vis[i] = 1.0f;
    if (!s->next) stw_add_f32(st, "model.visual.blocks.0.norm1.weight", 1, (int64_t[]){16}, vis);
    char *path = test_join(dir, "model.safetensors");
    REQUIRE_MSG(stw_write(st, path) == 0, "cannot write %s", path);
    free(path);
    stw_free(st);
}

/* ---- the GGUF file --------------------------------------------------------------- */

/* An F32 vector or small tensor, as the converter keeps norms, the conv
 * kernel and per-head parameters. */
static void g_f32(gguf_writer *gw, const char *name, int n_dims, const int64_t *shape, const float *data) {
    gguf_writer_add_tensor_f32(gw, name, n_dims, shape, data);
}

/* A projection matrix in the spec's GGUF type. */
static void g_mat(const q35_spec *s, gguf_writer *gw, const char *name, int n_dims, const int64_t *shape,
                  const float *data) {
    if (s->gguf_matrix_type == 0 || s->gguf_matrix_type == GW_GGML_F32) {
        gguf_writer_add_tensor_f32(gw, name, n_dims, shape, data);
        return;
    }
    int64_t in = shape[n_dims - 1], rows = 1;
    for (int i = 0; i < n_dims - 1; i++) rows *= shape[i];
    size_t n = (size_t)(rows * in), nbytes;
    uint8_t *buf;
    if (s->gguf_matrix_type == GW_GGML_F16) {
        nbytes = n * 2;
        buf = malloc(nbytes);
        REQUIRE(buf != NULL);
        for (size_t i = 0; i < n; i++) {
            uint16_t h = fp16_f32_to_f16(data[i]);
            memcpy(buf + 2 * i, &h, 2);
        }
    } else {
        REQUIRE_MSG(s->gguf_matrix_type == GW_GGML_Q8_0 && in % 32 == 0,
                    "%s: GGUF matrix type %d with rows of %lld", name, s->gguf_matrix_type, (long long)in);
        size_t nb = n / 32;
        nbytes = nb * 34;
        buf = malloc(nbytes);
        REQUIRE(buf != NULL);
        int8_t qs[32];
        for (size_t b = 0; b < nb; b++) {
            float d;
            matmul_quantize_row_q8_0(data + b * 32, 32, qs, &d);
            uint16_t h = fp16_f32_to_f16(d);
            memcpy(buf + b * 34, &h, 2);
            memcpy(buf + b * 34 + 2, qs, 32);
        }
    }
    uint64_t ne[4];
    for (int i = 0; i < n_dims; i++) ne[i] = (uint64_t)shape[n_dims - 1 - i];
    gguf_writer_add_tensor(gw, name, (uint32_t)s->gguf_matrix_type, n_dims, ne, buf, nbytes);
    free(buf);
}

/* a norm weight w as the converter writes it: 1 + w, in float32 */
static float *plus_one(const float *w, int n) {
    float *p = malloc((size_t)n * sizeof *p);
    REQUIRE(p != NULL);
    for (int i = 0; i < n; i++) p[i] = w[i] + 1.0f;
    return p;
}

/* Rows [first, first + v_heads * width) of m (rows of `cols`) with the
 * value heads (blocks of `width` rows) moved from grouped to tiled order;
 * the other rows kept. A new array of `rows` rows. */
static float *tiled_rows(const q35_spec *s, const float *m, int rows, int cols, int first, int width) {
    float *p = malloc((size_t)rows * cols * sizeof *p);
    REQUIRE(p != NULL);
    memcpy(p, m, (size_t)rows * cols * sizeof *p);
    if (s->next) return p; /* Qwen3NextModel keeps them grouped */
    size_t blk = (size_t)width * cols;
    for (int t = 0; t < s->lin_v_heads; t++)
        memcpy(p + (size_t)first * cols + t * blk, m + (size_t)first * cols + q35_tiled_to_grouped(s, t) * blk,
               blk * sizeof *p);
    return p;
}

static void gguf_layer(const q35_spec *s, gguf_writer *gw, const q35_layer *L, int blk) {
    char n[128];
    int H = s->hidden;
#define G(x) (snprintf(n, sizeof n, "blk.%d.%s", blk, x), n)
    float *t = plus_one(L->in_norm, H);
    g_f32(gw, G("attn_norm.weight"), 1, (int64_t[]){H}, t);
    free(t);
    t = plus_one(L->post_norm, H);
    g_f32(gw, G("post_attention_norm.weight"), 1, (int64_t[]){H}, t);
    free(t);
    if (L->linear) {
        int vh = s->lin_v_heads, vd = s->lin_v_dim, vdim = vh * vd, cd = q35_conv_dim(s);
        int qk = 2 * s->lin_k_heads * s->lin_k_dim; /* the q and k channels, not reordered */
        if (s->next && s->gguf_ssm_in) { /* early converters: in_proj_qkvz as it is */
            t = fused_qkvz(s, L);
            g_mat(s, gw, G("ssm_in.weight"), 2, (int64_t[]){cd + vdim, H}, t);
            free(t);
        } else {
            t = tiled_rows(s, L->qkv, cd, H, qk, vd);
            g_mat(s, gw, G("attn_qkv.weight"), 2, (int64_t[]){cd, H}, t);
            free(t);
            t = tiled_rows(s, L->z, vdim, H, 0, vd);
            g_mat(s, gw, G("attn_gate.weight"), 2, (int64_t[]){vdim, H}, t);
            free(t);
        }
        /* (conv_dim, 1, K) squeezed to (conv_dim, K) */
        t = tiled_rows(s, L->conv, cd, s->conv, qk, vd);
        g_f32(gw, G("ssm_conv1d.weight"), 2, (int64_t[]){cd, s->conv}, t);
        free(t);
        t = tiled_rows(s, L->dt_bias, vh, 1, 0, 1);
        g_f32(gw, G("ssm_dt.bias"), 1, (int64_t[]){vh}, t);
        free(t);
        t = tiled_rows(s, L->A_log, vh, 1, 0, 1);
        for (int h = 0; h < vh; h++) t[h] = -expf(t[h]);
        g_f32(gw, G("ssm_a"), 1, (int64_t[]){vh}, t);
        free(t);
        if (s->next) { /* in_proj_ba as it is */
            t = fused_ba(s, L);
            g_mat(s, gw, G("ssm_ba.weight"), 2, (int64_t[]){2 * vh, H}, t);
            free(t);
        } else {
            t = tiled_rows(s, L->b, vh, H, 0, 1);
            g_mat(s, gw, G("ssm_beta.weight"), 2, (int64_t[]){vh, H}, t);
            free(t);
            t = tiled_rows(s, L->a, vh, H, 0, 1);
            g_mat(s, gw, G("ssm_alpha.weight"), 2, (int64_t[]){vh, H}, t);
            free(t);
        }
        g_f32(gw, G("ssm_norm.weight"), 1, (int64_t[]){vd}, L->lin_norm); /* applied as w: no + 1 */
        /* out_proj's columns (its input) reordered */
        t = malloc((size_t)H * vdim * sizeof *t);
        REQUIRE(t != NULL);
        for (int r = 0; r < H; r++)
            for (int h = 0; h < vh; h++)
                memcpy(t + (size_t)r * vdim + h * vd,
                       L->out + (size_t)r * vdim + (s->next ? h : q35_tiled_to_grouped(s, h)) * vd,
                       (size_t)vd * sizeof *t);
        g_mat(s, gw, G("ssm_out.weight"), 2, (int64_t[]){H, vdim}, t);
        free(t);
    } else {
        int hd = s->head_dim, q = s->heads * hd, kv = s->kv_heads * hd;
        g_mat(s, gw, G("attn_q.weight"), 2, (int64_t[]){2 * q, H}, L->wq); /* per head query then gate, as HF */
        g_mat(s, gw, G("attn_k.weight"), 2, (int64_t[]){kv, H}, L->wk);
        g_mat(s, gw, G("attn_v.weight"), 2, (int64_t[]){kv, H}, L->wv);
        g_mat(s, gw, G("attn_output.weight"), 2, (int64_t[]){H, q}, L->wo);
        t = plus_one(L->q_norm, hd);
        g_f32(gw, G("attn_q_norm.weight"), 1, (int64_t[]){hd}, t);
        free(t);
        t = plus_one(L->k_norm, hd);
        g_f32(gw, G("attn_k_norm.weight"), 1, (int64_t[]){hd}, t);
        free(t);
    }
    if (s->moe) {
        int E = s->experts, I = s->expert_ffn, S = s->shared_ffn;
        g_mat(s, gw, G("ffn_gate_inp.weight"), 2, (int64_t[]){E, H}, L->router);
        g_mat(s, gw, G("ffn_gate_exps.weight"), 3, (int64_t[]){E, I, H}, L->eg);
        g_mat(s, gw, G("ffn_up_exps.weight"), 3, (int64_t[]){E, I, H}, L->eu);
        g_mat(s, gw, G("ffn_down_exps.weight"), 3, (int64_t[]){E, H, I}, L->ed);
        g_f32(gw, G("ffn_gate_inp_shexp.weight"), 1, (int64_t[]){H}, L->sgate); /* (1, H) squeezed to (H) */
        g_mat(s, gw, G("ffn_gate_shexp.weight"), 2, (int64_t[]){S, H}, L->sg);
        g_mat(s, gw, G("ffn_up_shexp.weight"), 2, (int64_t[]){S, H}, L->su);
        g_mat(s, gw, G("ffn_down_shexp.weight"), 2, (int64_t[]){H, S}, L->sd);
    } else {
        g_mat(s, gw, G("ffn_gate.weight"), 2, (int64_t[]){s->ffn, H}, L->gate);
        g_mat(s, gw, G("ffn_up.weight"), 2, (int64_t[]){s->ffn, H}, L->up);
        g_mat(s, gw, G("ffn_down.weight"), 2, (int64_t[]){H, s->ffn}, L->down);
    }
#undef G
}

void q35_write_gguf(const q35_spec *s, const q35_weights *w, const char *path) {
    gguf_writer *gw = gguf_writer_new(3);
    const char *a = s->next ? "qwen3next" : s->moe ? "qwen35moe" : "qwen35";
    int mtp = s->next ? 0 : s->mtp_layers; /* Qwen3NextModel drops the MTP block */
    char k[128];
#define KEY(name) (snprintf(k, sizeof k, "%s.%s", a, name), k)
    gguf_writer_add_str(gw, "general.architecture", a);
    gguf_writer_add_str(gw, "general.name", "qwen35 reference (random weights)");
    gguf_writer_add_u32(gw, KEY("block_count"), (uint32_t)(s->layers + mtp));
    gguf_writer_add_u32(gw, KEY("context_length"), (uint32_t)s->ctx);
    gguf_writer_add_u32(gw, KEY("embedding_length"), (uint32_t)s->hidden);
    if (!s->moe) gguf_writer_add_u32(gw, KEY("feed_forward_length"), (uint32_t)s->ffn);
    if (s->next) gguf_writer_add_u32(gw, KEY("feed_forward_length"), (uint32_t)(3 * s->hidden)); /* as the config */
    gguf_writer_add_u32(gw, KEY("attention.head_count"), (uint32_t)s->heads);
    gguf_writer_add_u32(gw, KEY("attention.head_count_kv"), (uint32_t)s->kv_heads);
    gguf_writer_add_u32(gw, KEY("attention.key_length"), (uint32_t)s->head_dim);
    gguf_writer_add_u32(gw, KEY("attention.value_length"), (uint32_t)s->head_dim);
    gguf_writer_add_f32(gw, KEY("attention.layer_norm_rms_epsilon"), (float)s->eps);
    gguf_writer_add_f32(gw, KEY("rope.freq_base"), (float)s->theta);
    gguf_writer_add_u32(gw, KEY("rope.dimension_count"), (uint32_t)q35_rope_dim(s));
    int pairs = q35_rope_dim(s) / 2, s0 = (11 * pairs + 16) / 32;
    int32_t sections[4] = {s0, s0, pairs - 2 * s0, 0};
    if (!s->next) gguf_writer_add_arr(gw, KEY("rope.dimension_sections"), GGUF_TYPE_INT32, sections, 4);
    gguf_writer_add_u32(gw, KEY("ssm.conv_kernel"), (uint32_t)s->conv);
    gguf_writer_add_u32(gw, KEY("ssm.state_size"), (uint32_t)s->lin_k_dim);
    gguf_writer_add_u32(gw, KEY("ssm.group_count"), (uint32_t)s->lin_k_heads);
    gguf_writer_add_u32(gw, KEY("ssm.time_step_rank"), (uint32_t)s->lin_v_heads);
    gguf_writer_add_u32(gw, KEY("ssm.inner_size"), (uint32_t)(s->lin_v_heads * s->lin_v_dim));
    gguf_writer_add_u32(gw, KEY("full_attention_interval"), (uint32_t)s->full_attention_interval);
    if (s->moe) {
        gguf_writer_add_u32(gw, KEY("expert_count"), (uint32_t)s->experts);
        gguf_writer_add_u32(gw, KEY("expert_used_count"), (uint32_t)s->experts_used);
        gguf_writer_add_u32(gw, KEY("expert_feed_forward_length"), (uint32_t)s->expert_ffn);
        gguf_writer_add_u32(gw, KEY("expert_shared_feed_forward_length"), (uint32_t)s->shared_ffn);
    }
    if (mtp > 0) gguf_writer_add_u32(gw, KEY("nextn_predict_layers"), (uint32_t)mtp);
#undef KEY
    int H = s->hidden;
    g_mat(s, gw, "token_embd.weight", 2, (int64_t[]){s->vocab, H}, w->embed);
    float *t = plus_one(w->final_norm, H);
    g_f32(gw, "output_norm.weight", 1, (int64_t[]){H}, t);
    free(t);
    if (!s->tied) g_mat(s, gw, "output.weight", 2, (int64_t[]){s->vocab, H}, w->lm_head);
    for (int l = 0; l < s->layers; l++) gguf_layer(s, gw, &w->l[l], l);
    if (mtp > 0) {
        /* _Qwen35MtpMixin: mtp.layers.0.* becomes layer n_layers; fc,
         * pre_fc_norm_embedding, pre_fc_norm_hidden and norm its nextn.*
         * tensors (their norms + 1 as every norm but the gated one) */
        q35_mtp m = q35_make_mtp(s, w);
        int blk = s->layers;
        gguf_layer(s, gw, &m.layer, blk);
        char n[128];
        snprintf(n, sizeof n, "blk.%d.nextn.eh_proj.weight", blk);
        g_mat(s, gw, n, 2, (int64_t[]){H, 2 * H}, m.fc);
        const float *norms[3] = {m.enorm, m.hnorm, m.norm};
        const char *names[3] = {"enorm", "hnorm", "shared_head_norm"};
        for (int i = 0; i < 3; i++) {
            t = plus_one(norms[i], H);
            snprintf(n, sizeof n, "blk.%d.nextn.%s.weight", blk, names[i]);
            g_f32(gw, n, 1, (int64_t[]){H}, t);
            free(t);
        }
        q35_free_mtp(&m);
    }
    REQUIRE_MSG(gguf_writer_write(gw, path) == 0, "cannot write %s", path);
    gguf_writer_free(gw);
}
