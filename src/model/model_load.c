/*
 * model_load.c - pdl_model_load and what every format shares after parsing:
 * choosing the loader, checking weights against the config, RoPE
 * frequencies, model info, and freeing.
 *
 * Format-specific parsing lives in model_load_gguf.c and model_load_hf.c;
 * both only fill pdl_model_config and weight views, then call
 * model_finish.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "kernels/fp16.h"
#include "kernels/matmul.h"
#include "kernels/cpu_ops.h"
#include "kernels/weight_panels.h"
#include "model/context.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "util/error.h"
#include "util/huge_alloc.h"

/* Takes t from the set and, for an MLX-quantized "X.weight", the X.scales
 * and X.biases folded into it (mlx_quant.h), so none is reported unused. */
static const pdl_tensor *take_with_parts(const pdl_tensor_set *set, const char *name) {
    const pdl_tensor *t = tensor_set_take(set, name);
    size_t n = strlen(name);
    if (t && (t->dtype == PDL_DTYPE_MLX_Q4 || t->dtype == PDL_DTYPE_MLX_Q8) && n > 7 &&
        strcmp(name + n - 7, ".weight") == 0) {
        char part[PDL_TENSOR_NAME_MAX + 8];
        snprintf(part, sizeof part, "%.*s.scales", (int)(n - 7), name);
        tensor_set_take(set, part);
        snprintf(part, sizeof part, "%.*s.biases", (int)(n - 7), name);
        tensor_set_take(set, part);
    }
    return t;
}

int model_take_tensor(const pdl_tensor_set *set, const char *name, bool required, const char *where,
                      pdl_tensor *dst, pdl_error *err) {
    const pdl_tensor *t = take_with_parts(set, name);
    if (!t) {
        memset(dst, 0, sizeof *dst);
        if (required) return err_fail(err, "%s: missing tensor '%s'", where, name);
        return 0;
    }
    *dst = *t;
    return 0;
}

void model_tensor_rows(const pdl_tensor *t, int64_t r0, int64_t rows, const char *what, pdl_tensor *out) {
    *out = *t;
    size_t row_bytes = dtype_row_bytes(t->dtype, t->shape[t->n_dims - 1]);
    out->data = (const uint8_t *)t->data + (size_t)r0 * row_bytes;
    out->file_offset = t->file_offset + (uint64_t)r0 * row_bytes;
    out->nbytes = (size_t)rows * row_bytes;
    out->shape[0] = rows;
    tensor_mlx_skip_rows(out, r0); /* MLX: the scales and biases of those rows */
    snprintf(out->name, sizeof out->name, "%.200s[%s]", t->name, what);
}

/* A fused matrix `name` split by rows into parts (each rows[i] long, named
 * what[i]); its row count must be their sum. Absent: *found = false. */
static int take_fused(const pdl_tensor_set *set, const char *name, const char *where, int n_parts,
                      const int64_t *rows, const char *const *what, pdl_tensor *const *dst, bool *found,
                      pdl_error *err) {
    const pdl_tensor *t = take_with_parts(set, name);
    *found = t != NULL;
    if (!t) return 0;
    int64_t total = 0;
    for (int i = 0; i < n_parts; i++) total += rows[i];
    if (t->n_dims != 2 || t->shape[0] != total)
        return err_fail(err, "%s: fused tensor '%s' must have %lld rows (%s), got shape [%lld%s]", where, name,
                        (long long)total, n_parts == 3 ? "q + k + v" : "gate + up", (long long)t->shape[0],
                        t->n_dims == 2 ? ", ..." : "");
    int64_t r0 = 0;
    for (int i = 0; i < n_parts; i++) {
        model_tensor_rows(t, r0, rows[i], what[i], dst[i]);
        r0 += rows[i];
    }
    return 0;
}

/* Where each per-layer weight is found in each format. */
typedef enum layer_need {
    NEED_ALWAYS,
    NEED_IF_BIAS,
    NEED_IF_QK_NORM,
    NEED_IF_PRE_NORM,     /* attn_norm: unless norms come after the branches only */
    NEED_IF_FFN_NORM,     /* ffn_norm: pre-norm and sandwich blocks */
    NEED_IF_POST_NORMS,   /* sandwich and post-norm blocks */
    NEED_UNLESS_FUSED_QKV,     /* wq, wk, wv: unless one fused qkv matrix holds them */
    NEED_IF_DENSE,             /* w_down: a dense MLP */
    NEED_IF_DENSE_UNFUSED,     /* w_gate, w_up: a dense MLP, unless cfg.fused_gate_up */
    NEED_IF_PRESENT,           /* bo: used when the files hold it */
    NEED_IF_SINKS,             /* sinks: cfg.attn_sinks */
} layer_need;

/* Hugging Face's post_attention_layernorm is the MLP's input norm in Llama
 * but the attention output's norm in Gemma 2 and OLMo 2, whose MLP input
 * norm (Gemma) is pre_feedforward_layernorm: hf_post names the tensor there. */
static const struct layer_tensor_name {
    size_t offset;    /* offsetof(pdl_layer_weights, field) */
    const char *gguf; /* after "blk.N." */
    const char *hf;   /* after "model.layers.N." */
    layer_need need;
    const char *hf_post; /* the Hugging Face name with post norms, when different */
} LAYER_TENSORS[] = {
    {offsetof(pdl_layer_weights, attn_norm), "attn_norm.weight", "input_layernorm.weight", NEED_IF_PRE_NORM, NULL},
    {offsetof(pdl_layer_weights, wq), "attn_q.weight", "self_attn.q_proj.weight", NEED_UNLESS_FUSED_QKV, NULL},
    {offsetof(pdl_layer_weights, wk), "attn_k.weight", "self_attn.k_proj.weight", NEED_UNLESS_FUSED_QKV, NULL},
    {offsetof(pdl_layer_weights, wv), "attn_v.weight", "self_attn.v_proj.weight", NEED_UNLESS_FUSED_QKV, NULL},
    {offsetof(pdl_layer_weights, wo), "attn_output.weight", "self_attn.o_proj.weight", NEED_ALWAYS, NULL},
    {offsetof(pdl_layer_weights, ffn_norm), "ffn_norm.weight", "post_attention_layernorm.weight", NEED_IF_FFN_NORM,
     "pre_feedforward_layernorm.weight"},
    {offsetof(pdl_layer_weights, post_attn_norm), "post_attention_norm.weight", "post_attention_layernorm.weight",
     NEED_IF_POST_NORMS, NULL},
    {offsetof(pdl_layer_weights, post_ffn_norm), "post_ffw_norm.weight", "post_feedforward_layernorm.weight",
     NEED_IF_POST_NORMS, NULL},
    {offsetof(pdl_layer_weights, w_gate), "ffn_gate.weight", "mlp.gate_proj.weight", NEED_IF_DENSE_UNFUSED, NULL},
    {offsetof(pdl_layer_weights, w_up), "ffn_up.weight", "mlp.up_proj.weight", NEED_IF_DENSE_UNFUSED, NULL},
    {offsetof(pdl_layer_weights, w_down), "ffn_down.weight", "mlp.down_proj.weight", NEED_IF_DENSE, NULL},
    {offsetof(pdl_layer_weights, bq), "attn_q.bias", "self_attn.q_proj.bias", NEED_IF_BIAS, NULL},
    {offsetof(pdl_layer_weights, bk), "attn_k.bias", "self_attn.k_proj.bias", NEED_IF_BIAS, NULL},
    {offsetof(pdl_layer_weights, bv), "attn_v.bias", "self_attn.v_proj.bias", NEED_IF_BIAS, NULL},
    {offsetof(pdl_layer_weights, q_norm), "attn_q_norm.weight", "self_attn.q_norm.weight", NEED_IF_QK_NORM, NULL},
    {offsetof(pdl_layer_weights, bo), "attn_output.bias", "self_attn.o_proj.bias", NEED_IF_PRESENT, NULL},
    {offsetof(pdl_layer_weights, sinks), "attn_sinks.weight", "self_attn.sinks", NEED_IF_SINKS, NULL},
    {offsetof(pdl_layer_weights, k_norm), "attn_k_norm.weight", "self_attn.k_norm.weight", NEED_IF_QK_NORM, NULL},
};

/* Whether a weight of this kind is part of the model the config describes. */
static bool layer_needs(const pdl_model_config *c, layer_need need) {
    bool dense = c->n_experts == 0;
    switch (need) {
    case NEED_ALWAYS: return true;
    case NEED_IF_BIAS: return c->qkv_bias;
    case NEED_IF_QK_NORM: return c->qk_norm != PDL_QK_NORM_NONE;
    case NEED_IF_PRE_NORM: return c->block != PDL_BLOCK_POST_NORM;
    case NEED_IF_FFN_NORM: return c->block == PDL_BLOCK_PRE_NORM || c->block == PDL_BLOCK_SANDWICH;
    case NEED_IF_POST_NORMS: return c->block == PDL_BLOCK_SANDWICH || c->block == PDL_BLOCK_POST_NORM;
    case NEED_UNLESS_FUSED_QKV: return true;
    case NEED_IF_DENSE: return dense;
    case NEED_IF_DENSE_UNFUSED: return dense && !c->fused_gate_up;
    case NEED_IF_PRESENT: return false;
    case NEED_IF_SINKS: return c->attn_sinks;
    }
    return false;
}

/* Layer l's tensor: GGUF "blk.N.<gguf>" (hf_prefix NULL) or Hugging Face
 * "<hf_prefix>layers.N.<hf>". */
static void layer_name(char *buf, size_t n, const char *hf_prefix, int l, const char *hf, const char *gguf) {
    if (hf_prefix) snprintf(buf, n, "%slayers.%d.%s", hf_prefix, l, hf);
    else snprintf(buf, n, "blk.%d.%s", l, gguf);
}

/* A layer's tensor beyond the layer count means the count is wrong (a
 * 5-layer file read as 4 layers would run without its last layer). */
static int check_no_stray_layers(const pdl_model_config *c, const pdl_tensor_set *set, const char *hf_prefix,
                                 const char *where, pdl_error *err) {
    char prefix[PDL_TENSOR_NAME_MAX];
    if (hf_prefix) snprintf(prefix, sizeof prefix, "%slayers.", hf_prefix);
    else snprintf(prefix, sizeof prefix, "blk.");
    size_t pl = strlen(prefix);
    for (size_t i = 0; i < set->count; i++) {
        const char *name = set->items[i].name;
        if (strncmp(name, prefix, pl) != 0 || name[pl] < '0' || name[pl] > '9') continue;
        char *end;
        long l = strtol(name + pl, &end, 10);
        if (*end == '.' && l >= c->n_layers + c->n_mtp_layers)
            return err_fail(err, "%s: tensor '%s' belongs to layer %ld, but the model declares %d layers (%s)", where,
                            name, l, c->n_layers, hf_prefix ? "num_hidden_layers" : "block_count");
    }
    return 0;
}

/* Expert e of a stacked (n_experts, rows, cols) GGUF tensor as a (rows,
 * cols) view, named "<name>[e<e>]". */
static void expert_view(const pdl_tensor *stack, int e, pdl_tensor *out) {
    pdl_tensor flat = *stack;
    flat.n_dims = 2;
    flat.shape[0] = stack->shape[0] * stack->shape[1];
    flat.shape[1] = stack->shape[2];
    char what[24];
    snprintf(what, sizeof what, "e%d", e);
    model_tensor_rows(&flat, (int64_t)e * stack->shape[1], stack->shape[1], what, out);
}

/* Transformers 5's stacked experts (Qwen3.5-MoE checkpoints):
 * mlp.experts.gate_up_proj (n_experts, 2 * ffn_expert, hidden), each
 * expert's gate rows then its up rows, and mlp.experts.down_proj
 * (n_experts, hidden, ffn_expert), as per-expert views. Returns 0 when
 * taken or absent (dst left empty), -1 on a bad shape. */
static int take_fused_experts(const pdl_model_config *c, const pdl_tensor_set *set, const char *hf_prefix, int l,
                              const char *where, pdl_tensor *const dst[3], pdl_error *err) {
    char gu_name[PDL_TENSOR_NAME_MAX], d_name[PDL_TENSOR_NAME_MAX];
    layer_name(gu_name, sizeof gu_name, hf_prefix, l, "mlp.experts.gate_up_proj", NULL);
    layer_name(d_name, sizeof d_name, hf_prefix, l, "mlp.experts.down_proj", NULL);
    if (!tensor_set_find(set, gu_name)) return 0;
    pdl_tensor gu, down;
    if (model_take_tensor(set, gu_name, true, where, &gu, err) ||
        model_take_tensor(set, d_name, true, where, &down, err))
        return -1;
    int E = c->n_experts, I = c->ffn_expert, H = c->hidden;
    if (gu.n_dims != 3 || gu.shape[0] != E || gu.shape[1] != 2 * (int64_t)I || gu.shape[2] != H ||
        down.n_dims != 3 || down.shape[0] != E || down.shape[1] != H || down.shape[2] != I)
        return err_fail(err, "%s: stacked experts '%s' / '%s' must be [%d, %d, %d] and [%d, %d, %d] (experts, rows, "
                        "columns)", where, gu_name, d_name, E, 2 * I, H, E, H, I);
    pdl_tensor flat = gu;
    flat.n_dims = 2;
    flat.shape[0] = gu.shape[0] * gu.shape[1];
    flat.shape[1] = gu.shape[2];
    for (int e = 0; e < E; e++) {
        char what[32];
        snprintf(what, sizeof what, "e%d.gate", e);
        model_tensor_rows(&flat, (int64_t)e * 2 * I, I, what, &dst[0][e]);
        snprintf(what, sizeof what, "e%d.up", e);
        model_tensor_rows(&flat, (int64_t)e * 2 * I + I, I, what, &dst[1][e]);
        expert_view(&down, e, &dst[2][e]);
    }
    return 0;
}

static int own(pdl_model *m, void *p);

/* A fused (E, 2F) gate/up bias as F32 lw->exp_gate_b and exp_up_b (E, F)
 * each: gate and up alternating within an expert's 2F values (Hugging Face
 * gpt-oss's gate_up_proj_bias), or gate's F then up's F (GGUF
 * ffn_gate_up_exps.bias). */
static int split_gate_up_bias(pdl_model *m, const pdl_tensor *b, int64_t E, int64_t F, bool interleaved,
                              pdl_layer_weights *lw, const char *where, pdl_error *err) {
    if (tensor_nelems(b) != E * 2 * F || dtype_is_quantized(b->dtype))
        return err_fail(err, "%s: tensor '%s' must hold %lld float values (%lld experts x 2 x %lld)", where, b->name,
                        (long long)(E * 2 * F), (long long)E, (long long)F);
    float *all = malloc((size_t)(E * 2 * F) * sizeof *all), *split = malloc((size_t)(E * 2 * F) * sizeof *split);
    if (!all || !split || own(m, split)) {
        free(all), free(split);
        return err_fail(err, "out of memory for the expert biases '%s'", b->name);
    }
    pdl_tensor flat = *b;
    flat.n_dims = 1, flat.shape[0] = E * 2 * F;
    if (ops_dequant_row(&flat, 0, all, E * 2 * F)) {
        free(all);
        return err_fail(err, "%s: tensor '%s': %s cannot be converted to F32", where, b->name, dtype_name(b->dtype));
    }
    for (int64_t e = 0; e < E; e++)
        for (int64_t f = 0; f < F; f++) {
            split[e * F + f] = all[e * 2 * F + (interleaved ? 2 * f : f)];
            split[E * F + e * F + f] = all[e * 2 * F + (interleaved ? 2 * f + 1 : F + f)];
        }
    free(all);
    static const char *const what[2] = {"gate", "up"};
    pdl_tensor *bias[2] = {&lw->exp_gate_b, &lw->exp_up_b};
    for (int p = 0; p < 2; p++) {
        *bias[p] = *b;
        bias[p]->dtype = PDL_DTYPE_F32, bias[p]->n_dims = 2, bias[p]->shape[0] = E, bias[p]->shape[1] = F;
        bias[p]->data = split + (size_t)(p * E * F), bias[p]->nbytes = (size_t)(E * F) * sizeof(float);
        bias[p]->file_offset = 0;
        snprintf(bias[p]->name, sizeof bias[p]->name, "%.200s[%s]", b->name, what[p]);
    }
    return 0;
}

/* One MXFP4 row of Hugging Face's layout as ggml's blocks (17 bytes per 32
 * values: the E8M0 scale byte, then byte j = codes j | j + 16 << 4). The
 * checkpoint's byte j of a block holds values 2j (low nibble) and 2j + 1
 * (high), as transformers' convert_moe_packed_tensors reads them; the scale
 * byte is the same E8M0 exponent in both. */
static void mxfp4_row_from_hf(uint8_t *dst, const uint8_t *blocks, const uint8_t *scales, int64_t n_blocks) {
    for (int64_t b = 0; b < n_blocks; b++) {
        const uint8_t *q = blocks + b * 16;
        uint8_t code[32];
        for (int j = 0; j < 16; j++) code[2 * j] = q[j] & 15, code[2 * j + 1] = q[j] >> 4;
        uint8_t *o = dst + b * 17;
        o[0] = scales[b];
        for (int j = 0; j < 16; j++) o[1 + j] = (uint8_t)(code[j] | code[j + 16] << 4);
    }
}

/* The published gpt-oss checkpoints' experts: mlp.experts.gate_up_proj_blocks
 * (E, 2F, hidden / 32, 16) and _scales (E, 2F, hidden / 32), U8, rows the
 * outputs (gate 2f, up 2f + 1) over the hidden inputs; down_proj_blocks
 * (E, hidden, F / 32, 16) and _scales likewise over the expert width. Made
 * into owned MXFP4 matrices (gate, up, down per expert) in ggml's layout,
 * as llama.cpp's converter repacks them; the file's pages are given back. */
static int take_gptoss_mxfp4(pdl_model *m, const pdl_tensor_set *set, const char *hf_prefix, int l,
                             const char *where, pdl_tensor *const dst[3], pdl_error *err) {
    const pdl_model_config *c = &m->cfg;
    int64_t E = c->n_experts, F = c->ffn_expert, H = c->hidden;
    static const char *const part[2][2] = {{"mlp.experts.gate_up_proj_blocks", "mlp.experts.gate_up_proj_scales"},
                                           {"mlp.experts.down_proj_blocks", "mlp.experts.down_proj_scales"}};
    pdl_tensor t[2][2];
    for (int p = 0; p < 2; p++)
        for (int k = 0; k < 2; k++) {
            char name[PDL_TENSOR_NAME_MAX];
            layer_name(name, sizeof name, hf_prefix, l, part[p][k], NULL);
            if (model_take_tensor(set, name, true, where, &t[p][k], err)) return -1;
        }
    if (H % 32 || F % 32)
        return err_fail(err, "%s: MXFP4 experts need hidden_size (%lld) and intermediate_size (%lld) to be multiples of "
                        "32", where, (long long)H, (long long)F);
    for (int p = 0; p < 2; p++) {
        int64_t rows = p ? H : 2 * F, nb = (p ? F : H) / 32;
        const pdl_tensor *b = &t[p][0], *sc = &t[p][1];
        if (b->dtype != PDL_DTYPE_U8 || sc->dtype != PDL_DTYPE_U8 || b->n_dims != 4 || b->shape[0] != E ||
            b->shape[1] != rows || b->shape[2] != nb || b->shape[3] != 16 || sc->n_dims != 3 || sc->shape[0] != E ||
            sc->shape[1] != rows || sc->shape[2] != nb)
            return err_fail(err, "%s: MXFP4 experts of layer %d: '%s' must be U8 [%lld, %lld, %lld, 16] and '%s' U8 "
                            "[%lld, %lld, %lld]", where, l, b->name, (long long)E, (long long)rows, (long long)nb,
                            sc->name, (long long)E, (long long)rows, (long long)nb);
    }
    size_t row_bytes[3] = {dtype_row_bytes(PDL_DTYPE_MXFP4, H), dtype_row_bytes(PDL_DTYPE_MXFP4, H),
                           dtype_row_bytes(PDL_DTYPE_MXFP4, F)};
    int64_t n_rows[3] = {F, F, H};
    static const char *const what[3] = {"gate", "up", "down"};
    for (int p = 0; p < 3; p++) {
        uint8_t *buf = malloc((size_t)(E * n_rows[p]) * row_bytes[p]);
        if (!buf || own(m, buf)) {
            free(buf);
            return err_fail(err, "out of memory repacking the MXFP4 experts of layer %d", l);
        }
        const pdl_tensor *b = &t[p == 2][0], *sc = &t[p == 2][1];
        int64_t nb = (p == 2 ? F : H) / 32, src_rows = p == 2 ? H : 2 * F;
        for (int64_t e = 0; e < E; e++) {
            for (int64_t r = 0; r < n_rows[p]; r++) {
                int64_t src = e * src_rows + (p == 2 ? r : 2 * r + p); /* gate 2f, up 2f + 1 */
                mxfp4_row_from_hf(buf + (size_t)(e * n_rows[p] + r) * row_bytes[p],
                                  (const uint8_t *)b->data + (size_t)(src * nb * 16), (const uint8_t *)sc->data + src * nb,
                                  nb);
            }
            pdl_tensor *o = &dst[p][e];
            *o = *b;
            o->dtype = PDL_DTYPE_MXFP4, o->n_dims = 2, o->shape[0] = n_rows[p], o->shape[1] = p == 2 ? F : H;
            o->data = buf + (size_t)(e * n_rows[p]) * row_bytes[p];
            o->nbytes = (size_t)n_rows[p] * row_bytes[p];
            o->file_offset = 0; /* no longer in the file */
            snprintf(o->name, sizeof o->name, "%.200s[e%lld.%s]", b->name, (long long)e, what[p]);
        }
    }
    for (int p = 0; p < 2; p++)
        for (int k = 0; k < 2; k++)
            if (m->st) st_release(m->st, t[p][k].data, t[p][k].nbytes);
    return 0;
}

/* gpt-oss's Hugging Face experts (modeling_gpt_oss.py, GptOssExperts):
 * mlp.experts.gate_up_proj (E, hidden, 2 * ffn) multiplied as x W, gate
 * and up in alternate columns (gate 2f, up 2f + 1), and down_proj (E, ffn,
 * hidden), likewise x W; the biases gate_up_proj_bias (E, 2 * ffn), gate and
 * up alternating, and down_proj_bias (E, hidden). The loader wants (rows =
 * outputs, columns = inputs) per expert: owned transposed copies in the
 * file's float type (as llama.cpp's converter makes of a BF16 checkpoint),
 * and F32 biases split into gate and up. The published checkpoints hold the
 * experts as MXFP4 (_blocks / _scales): take_gptoss_mxfp4. */
static int take_gptoss_experts(pdl_model *m, const pdl_tensor_set *set, const char *hf_prefix, int l,
                               const char *where, pdl_tensor *const dst[3], pdl_error *err) {
    pdl_model_config *c = &m->cfg;
    pdl_layer_weights *lw = &m->w.layers[l];
    char name[PDL_TENSOR_NAME_MAX];
    pdl_tensor gu, gub, down, downb;
    layer_name(name, sizeof name, hf_prefix, l, "mlp.experts.gate_up_proj_bias", NULL);
    if (model_take_tensor(set, name, true, where, &gub, err)) return -1;
    layer_name(name, sizeof name, hf_prefix, l, "mlp.experts.down_proj_bias", NULL);
    if (model_take_tensor(set, name, true, where, &downb, err)) return -1;
    int64_t E = c->n_experts, F = c->ffn_expert, H = c->hidden;
    if (tensor_nelems(&downb) != E * H)
        return err_fail(err, "%s: '%s' must hold %lld values (%lld experts x %lld)", where, downb.name,
                        (long long)(E * H), (long long)E, (long long)H);
    layer_name(name, sizeof name, hf_prefix, l, "mlp.experts.gate_up_proj_blocks", NULL);
    if (tensor_set_find(set, name)) { /* the published MXFP4 checkpoints */
        if (take_gptoss_mxfp4(m, set, hf_prefix, l, where, dst, err) ||
            split_gate_up_bias(m, &gub, E, F, true, lw, where, err))
            return -1;
        lw->exp_down_b = downb;
        return 0;
    }
    char gu_name[PDL_TENSOR_NAME_MAX];
    layer_name(gu_name, sizeof gu_name, hf_prefix, l, "mlp.experts.gate_up_proj", NULL);
    if (model_take_tensor(set, gu_name, true, where, &gu, err)) return -1;
    layer_name(name, sizeof name, hf_prefix, l, "mlp.experts.down_proj", NULL);
    if (model_take_tensor(set, name, true, where, &down, err)) return -1;
    if (gu.n_dims != 3 || gu.shape[0] != E || gu.shape[1] != H || gu.shape[2] != 2 * F || down.n_dims != 3 ||
        down.shape[0] != E || down.shape[1] != F || down.shape[2] != H || tensor_nelems(&gub) != E * 2 * F ||
        tensor_nelems(&downb) != E * H)
        return err_fail(err, "%s: gpt-oss experts of layer %d must be gate_up_proj [%lld, %lld, %lld], down_proj "
                        "[%lld, %lld, %lld] and biases of %lld and %lld values", where, l, (long long)E, (long long)H,
                        (long long)(2 * F), (long long)E, (long long)F, (long long)H, (long long)(E * 2 * F),
                        (long long)(E * H));
    if (gu.dtype != down.dtype || dtype_is_quantized(gu.dtype))
        return err_fail(err, "%s: '%s': gpt-oss experts must be F32, F16 or BF16 (got %s and %s)", where, gu_name,
                        dtype_name(gu.dtype), dtype_name(down.dtype));
    size_t es = dtype_row_bytes(gu.dtype, 1);
    /* one owned buffer per projection: expert e's (rows, cols) matrix after the others' */
    uint8_t *bufs[3];
    for (int p = 0; p < 3; p++) {
        bufs[p] = malloc((size_t)(E * F * H) * es);
        if (!bufs[p] || own(m, bufs[p])) {
            free(bufs[p]);
            return err_fail(err, "out of memory transposing the experts of layer %d", l);
        }
    }
    const uint8_t *src = gu.data, *dsrc = down.data;
    for (int64_t e = 0; e < E; e++) {
        for (int64_t f = 0; f < F; f++)
            for (int64_t h = 0; h < H; h++) {
                const uint8_t *at = src + (size_t)((e * H + h) * 2 * F + 2 * f) * es;
                memcpy(bufs[0] + (size_t)((e * F + f) * H + h) * es, at, es);
                memcpy(bufs[1] + (size_t)((e * F + f) * H + h) * es, at + es, es);
            }
        for (int64_t h = 0; h < H; h++)
            for (int64_t f = 0; f < F; f++)
                memcpy(bufs[2] + (size_t)((e * H + h) * F + f) * es, dsrc + (size_t)((e * F + f) * H + h) * es, es);
    }
    static const char *const what[3] = {"gate", "up", "down"};
    for (int p = 0; p < 3; p++)
        for (int64_t e = 0; e < E; e++) {
            pdl_tensor *t = &dst[p][e];
            int64_t rows = p < 2 ? F : H, cols = p < 2 ? H : F;
            *t = p < 2 ? gu : down;
            t->n_dims = 2, t->shape[0] = rows, t->shape[1] = cols;
            t->data = bufs[p] + (size_t)(e * rows * cols) * es;
            t->nbytes = (size_t)(rows * cols) * es;
            t->file_offset = 0; /* no longer in the file */
            snprintf(t->name, sizeof t->name, "%.200s[e%lld.%s]", p < 2 ? gu.name : down.name, (long long)e, what[p]);
        }
    if (split_gate_up_bias(m, &gub, E, F, true, lw, where, err)) return -1;
    lw->exp_down_b = downb;
    return 0;
}

/* The router, the experts and the shared expert of layer l. GGUF stacks
 * each projection of every expert in one (n_experts, rows, cols) tensor;
 * Hugging Face keeps one tensor per expert and projection, under the
 * family's names (arch.h: pdl_moe_layout). */
static int take_experts(pdl_model *m, const pdl_tensor_set *set, const char *hf_prefix, int name_l, int l,
                        const char *where, pdl_error *err) {
    pdl_model_config *c = &m->cfg;
    pdl_layer_weights *lw = &m->w.layers[l];
    int E = c->n_experts;
    pdl_tensor *base = m->w.experts + (size_t)l * 3 * E;
    lw->exp_gate = base, lw->exp_up = base + E, lw->exp_down = base + 2 * E;
    pdl_tensor *const dst[3] = {lw->exp_gate, lw->exp_up, lw->exp_down};
    char name[PDL_TENSOR_NAME_MAX];
    bool mixtral = c->arch->moe == PDL_MOE_BLOCK_SPARSE, gptoss = c->arch->moe == PDL_MOE_GPT_OSS;
    const char *hf_router = mixtral ? "block_sparse_moe.gate" : gptoss ? "mlp.router" : "mlp.gate";
    char hf[96];
    snprintf(hf, sizeof hf, "%s.weight", hf_router);
    layer_name(name, sizeof name, hf_prefix, name_l, hf, "ffn_gate_inp.weight");
    if (model_take_tensor(set, name, true, where, &lw->router, err)) return -1;
    /* biases: the router's and the experts' (gpt-oss), when the files hold them */
    snprintf(hf, sizeof hf, "%s.bias", hf_router);
    layer_name(name, sizeof name, hf_prefix, name_l, hf, "ffn_gate_inp.bias");
    if (model_take_tensor(set, name, gptoss, where, &lw->router_b, err)) return -1;
    /* llama.cpp's converter with --fuse-gate-up-exps: one (E, 2F, hidden)
     * ffn_gate_up_exps, each expert's gate rows then its up rows (and its
     * bias likewise) */
    char fused_name[PDL_TENSOR_NAME_MAX];
    layer_name(fused_name, sizeof fused_name, NULL, name_l, NULL, "ffn_gate_up_exps.weight");
    bool fused = !hf_prefix && tensor_set_find(set, fused_name);
    if (!hf_prefix) {
        static const char *const biases[3] = {"ffn_gate_exps.bias", "ffn_up_exps.bias", "ffn_down_exps.bias"};
        pdl_tensor *const bdst[3] = {&lw->exp_gate_b, &lw->exp_up_b, &lw->exp_down_b};
        for (int p = fused ? 2 : 0; p < 3; p++) {
            layer_name(name, sizeof name, NULL, name_l, NULL, biases[p]);
            if (model_take_tensor(set, name, gptoss, where, bdst[p], err)) return -1;
        }
        pdl_tensor fb;
        layer_name(name, sizeof name, NULL, name_l, NULL, "ffn_gate_up_exps.bias");
        if (fused && (model_take_tensor(set, name, gptoss, where, &fb, err) ||
                      (fb.data && split_gate_up_bias(m, &fb, E, c->ffn_expert, false, lw, where, err))))
            return -1;
    }
    if (fused) {
        pdl_tensor t;
        if (model_take_tensor(set, fused_name, true, where, &t, err)) return -1;
        int64_t F = c->ffn_expert;
        if (t.n_dims != 3 || t.shape[0] != E || t.shape[1] != 2 * F || t.shape[2] != c->hidden)
            return err_fail(err, "%s: tensor '%s' must be [%d, %lld, %d] (experts, gate + up rows, columns)", where,
                            fused_name, E, (long long)(2 * F), c->hidden);
        pdl_tensor flat = t;
        flat.n_dims = 2, flat.shape[0] = t.shape[0] * t.shape[1], flat.shape[1] = t.shape[2];
        for (int e = 0; e < E; e++) {
            char what[32];
            snprintf(what, sizeof what, "e%d.gate", e);
            model_tensor_rows(&flat, (int64_t)e * 2 * F, F, what, &dst[0][e]);
            snprintf(what, sizeof what, "e%d.up", e);
            model_tensor_rows(&flat, (int64_t)e * 2 * F + F, F, what, &dst[1][e]);
        }
    }
    if (hf_prefix && gptoss) {
        if (take_gptoss_experts(m, set, hf_prefix, name_l, where, dst, err)) return -1;
    } else if (!hf_prefix) {
        static const char *const stacked[3] = {"ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_down_exps.weight"};
        for (int p = fused ? 2 : 0; p < 3; p++) {
            pdl_tensor t;
            layer_name(name, sizeof name, NULL, name_l, NULL, stacked[p]);
            if (model_take_tensor(set, name, true, where, &t, err)) return -1;
            int64_t rows = p < 2 ? c->ffn_expert : c->hidden, cols = p < 2 ? c->hidden : c->ffn_expert;
            if (t.n_dims != 3 || t.shape[0] != E || t.shape[1] != rows || t.shape[2] != cols)
                return err_fail(err, "%s: tensor '%s' must be [%d, %lld, %lld] (experts, rows, columns) for %d experts "
                                "of intermediate size %d", where, name, E, (long long)rows, (long long)cols, E,
                                c->ffn_expert);
            for (int e = 0; e < E; e++) expert_view(&t, e, &dst[p][e]);
        }
    } else if (!mixtral && take_fused_experts(c, set, hf_prefix, name_l, where, dst, err)) {
        return -1;
    } else if (!lw->exp_gate[0].data) { /* one tensor per expert and projection */
        static const char *const per_expert[2][3] = {{"gate_proj", "up_proj", "down_proj"}, {"w1", "w3", "w2"}};
        for (int e = 0; e < E; e++)
            for (int p = 0; p < 3; p++) {
                snprintf(hf, sizeof hf, "%s.experts.%d.%s.weight", mixtral ? "block_sparse_moe" : "mlp", e,
                         per_expert[mixtral][p]);
                layer_name(name, sizeof name, hf_prefix, name_l, hf, NULL);
                if (model_take_tensor(set, name, true, where, &dst[p][e], err)) return -1;
            }
    }
    if (c->ffn_shared <= 0) return 0;
    static const struct {
        size_t offset;
        const char *gguf, *hf;
    } shared[] = {
        {offsetof(pdl_layer_weights, sh_gate), "ffn_gate_shexp.weight", "mlp.shared_expert.gate_proj.weight"},
        {offsetof(pdl_layer_weights, sh_up), "ffn_up_shexp.weight", "mlp.shared_expert.up_proj.weight"},
        {offsetof(pdl_layer_weights, sh_down), "ffn_down_shexp.weight", "mlp.shared_expert.down_proj.weight"},
        {offsetof(pdl_layer_weights, sh_gate_w), "ffn_gate_inp_shexp.weight", "mlp.shared_expert_gate.weight"},
    };
    for (size_t i = 0; i < sizeof shared / sizeof shared[0]; i++) {
        if (i == 3 && !c->shared_gate) continue;
        layer_name(name, sizeof name, hf_prefix, name_l, shared[i].hf, shared[i].gguf);
        pdl_tensor *t = (pdl_tensor *)((char *)lw + shared[i].offset);
        if (model_take_tensor(set, name, true, where, t, err)) return -1;
    }
    /* Hugging Face's gate is a (1, hidden) Linear; GGUF's a (hidden) vector */
    if (lw->sh_gate_w.n_dims == 2 && lw->sh_gate_w.shape[0] == 1) {
        lw->sh_gate_w.n_dims = 1;
        lw->sh_gate_w.shape[0] = lw->sh_gate_w.shape[1];
    }
    return 0;
}

int model_set_layer_kinds(pdl_model_config *c, const bool *recurrent, int full_interval, const char *where,
                          pdl_error *err) {
    if (c->n_layers <= 0 || c->n_layers > 4096) return err_fail(err, "%s: %d layers (must be 1 to 4096)", where, c->n_layers);
    if (!recurrent && full_interval <= 0)
        return err_fail(err, "%s: full_attention_interval must be positive, got %d", where, full_interval);
    free(c->layer_kind), free(c->kind_index);
    c->layer_kind = malloc((size_t)c->n_layers);
    c->kind_index = malloc((size_t)c->n_layers * sizeof *c->kind_index);
    if (!c->layer_kind || !c->kind_index) return err_fail(err, "out of memory");
    c->n_attn_layers = c->n_rec_layers = 0;
    for (int l = 0; l < c->n_layers; l++) {
        bool rec = recurrent ? recurrent[l] : (l + 1) % full_interval != 0;
        c->layer_kind[l] = rec ? PDL_LAYER_DELTANET : PDL_LAYER_ATTENTION;
        c->kind_index[l] = rec ? c->n_rec_layers++ : c->n_attn_layers++;
    }
    if (c->n_attn_layers == 0)
        return err_fail(err, "%s: every layer is linear attention (at least one full-attention layer is needed)", where);
    return 0;
}

static int own(pdl_model *m, void *p);

/* A matrix of n_rows rows of src, row i being src's row row_of[i], as an
 * owned copy named "<src>[what]" (which copy_matrices then treats as any
 * matrix). Rows are independent in every block type (a block never spans
 * two rows), so whole rows' bytes are copied; MLX's scales and biases sit
 * in other tensors and cannot follow, so those are refused. */
static int gather_rows(pdl_model *m, const pdl_tensor *src, const int64_t *row_of, int64_t n_rows, const char *what,
                       pdl_tensor *out, pdl_error *err) {
    if (src->n_dims != 2 || dtype_is_mlx(src->dtype))
        return err_fail(err, "%s: tensor '%s': its rows cannot be regrouped (%s; a 2-D matrix of a GGUF or safetensors "
                        "type is needed)", src->file, src->name,
                        src->n_dims != 2 ? "not 2-D" : "MLX-quantized Qwen3-Next files are not supported");
    int64_t cols = src->shape[1];
    if (cols <= 0 || cols % (int64_t)dtype_block_elems(src->dtype) != 0)
        return err_fail(err, "%s: tensor '%s': %lld columns is not a multiple of the %s block (%zu)", src->file,
                        src->name, (long long)cols, dtype_name(src->dtype), dtype_block_elems(src->dtype));
    size_t row_bytes = dtype_row_bytes(src->dtype, cols);
    if (row_bytes == 0 || (size_t)src->shape[0] * row_bytes > src->nbytes)
        return err_fail(err, "%s: tensor '%s': %lld rows of %zu bytes exceed its %zu bytes", src->file, src->name,
                        (long long)src->shape[0], row_bytes, src->nbytes);
    uint8_t *buf = malloc((size_t)n_rows * row_bytes);
    if (!buf || own(m, buf)) {
        free(buf);
        return err_fail(err, "out of memory regrouping the rows of '%s'", src->name);
    }
    const uint8_t *from = src->data;
    for (int64_t i = 0; i < n_rows; i++)
        memcpy(buf + (size_t)i * row_bytes, from + (size_t)row_of[i] * row_bytes, row_bytes);
    *out = *src;
    out->data = buf;
    out->nbytes = (size_t)n_rows * row_bytes;
    out->shape[0] = n_rows;
    out->file_offset = 0; /* no longer in the file */
    snprintf(out->name, sizeof out->name, "%.200s[%s]", src->name, what);
    return 0;
}

/* Qwen3-Next's fused input projections (Hugging Face linear_attn.in_proj_qkvz
 * and in_proj_ba; GGUF ssm_in of early converters, and ssm_ba) hold per key
 * head, one head after another, [q (k_dim), k (k_dim), v (r * v_dim),
 * z (r * v_dim)] and [b (r), a (r)], r = value heads per key head
 * (transformers' fix_query_key_value_ordering). The layer wants lin_qkv as
 * all heads' q, then k, then v (value heads grouped by key head), lin_z
 * likewise, and lin_b / lin_a one row per value head: owned copies with
 * the rows so regrouped. qkvz or ba may be NULL (not in the file). */
static int split_qwen3next(pdl_model *m, const pdl_tensor *qkvz, const pdl_tensor *ba, pdl_layer_weights *lw,
                           pdl_error *err) {
    const pdl_model_config *c = &m->cfg;
    int64_t kh = c->lin_k_heads, r = c->lin_v_heads / c->lin_k_heads, dk = c->lin_k_dim, dv = c->lin_v_dim;
    int64_t kd = kh * dk, vd = kh * r * dv, chunk = 2 * dk + 2 * r * dv;
    if (qkvz && qkvz->shape[0] != 2 * kd + 2 * vd)
        return err_fail(err, "%s: tensor '%s' has %lld rows but %lld key heads of %lld and %lld value heads of %lld "
                        "need %lld (q, k, v, z)", qkvz->file, qkvz->name, (long long)qkvz->shape[0], (long long)kh,
                        (long long)dk, (long long)(kh * r), (long long)dv, (long long)(2 * kd + 2 * vd));
    if (ba && ba->shape[0] != 2 * kh * r)
        return err_fail(err, "%s: tensor '%s' has %lld rows but %lld value heads need %lld (b, a)", ba->file, ba->name,
                        (long long)ba->shape[0], (long long)(kh * r), (long long)(2 * kh * r));
    int64_t n = qkvz ? 2 * kd + vd : 2 * kh * r;
    int64_t *rows = malloc((size_t)n * sizeof *rows);
    if (!rows) return err_fail(err, "out of memory");
    int rc = 0;
    if (qkvz) {
        int64_t at = 0;
        for (int part = 0; part < 2; part++) /* q, then k */
            for (int64_t h = 0; h < kh; h++)
                for (int64_t i = 0; i < dk; i++) rows[at++] = h * chunk + part * dk + i;
        for (int64_t h = 0; h < kh; h++)
            for (int64_t i = 0; i < r * dv; i++) rows[at++] = h * chunk + 2 * dk + i;
        rc = gather_rows(m, qkvz, rows, at, "qkv", &lw->lin_qkv, err);
        for (int64_t h = 0, z = 0; rc == 0 && h < kh; h++)
            for (int64_t i = 0; i < r * dv; i++) rows[z++] = h * chunk + 2 * dk + r * dv + i;
        if (rc == 0) rc = gather_rows(m, qkvz, rows, vd, "z", &lw->lin_z, err);
    }
    for (int part = 0; rc == 0 && ba && part < 2; part++) { /* b, then a */
        for (int64_t h = 0, at = 0; h < kh; h++)
            for (int64_t j = 0; j < r; j++) rows[at++] = h * 2 * r + part * r + j;
        rc = gather_rows(m, ba, rows, kh * r, part ? "a" : "b", part ? &lw->lin_a : &lw->lin_b, err);
    }
    free(rows);
    /* the fused originals are not read again: their file pages may go (an
     * 80B model's in_proj_qkvz are 1.8 GB of BF16) */
    for (int i = 0; rc == 0 && i < 2; i++) {
        const pdl_tensor *t = i ? ba : qkvz;
        if (t && m->gguf) gguf_release(m->gguf, t->data, t->nbytes);
        if (t && m->st) st_release(m->st, t->data, t->nbytes);
    }
    return rc;
}

/* A Gated DeltaNet layer's tensors (Hugging Face linear_attn.*, GGUF as
 * llama.cpp's converter names them). Qwen3-Next's fused projections, where
 * the files have them, take the place of the separate ones. */
static int take_deltanet(pdl_model *m, const pdl_tensor_set *set, const char *hf_prefix, int l, const char *where,
                         pdl_error *err) {
    pdl_layer_weights *lw = &m->w.layers[l];
    char name[PDL_TENSOR_NAME_MAX];
    pdl_tensor qkvz = {0}, ba = {0};
    layer_name(name, sizeof name, hf_prefix, l, "linear_attn.in_proj_qkvz.weight", "ssm_in.weight");
    if (tensor_set_find(set, name) && model_take_tensor(set, name, true, where, &qkvz, err)) return -1;
    layer_name(name, sizeof name, hf_prefix, l, "linear_attn.in_proj_ba.weight", "ssm_ba.weight");
    if (tensor_set_find(set, name) && model_take_tensor(set, name, true, where, &ba, err)) return -1;
    if ((qkvz.data || ba.data) &&
        split_qwen3next(m, qkvz.data ? &qkvz : NULL, ba.data ? &ba : NULL, lw, err))
        return -1;
    static const struct {
        size_t offset;
        const char *gguf, *hf;
    } names[] = {
        {offsetof(pdl_layer_weights, lin_qkv), "attn_qkv.weight", "linear_attn.in_proj_qkv.weight"},
        {offsetof(pdl_layer_weights, lin_z), "attn_gate.weight", "linear_attn.in_proj_z.weight"},
        {offsetof(pdl_layer_weights, lin_b), "ssm_beta.weight", "linear_attn.in_proj_b.weight"},
        {offsetof(pdl_layer_weights, lin_a), "ssm_alpha.weight", "linear_attn.in_proj_a.weight"},
        {offsetof(pdl_layer_weights, lin_conv1d), "ssm_conv1d.weight", "linear_attn.conv1d.weight"},
        {offsetof(pdl_layer_weights, lin_dt_bias), "ssm_dt.bias", "linear_attn.dt_bias"},
        {offsetof(pdl_layer_weights, lin_a_neg), "ssm_a", "linear_attn.A_log"},
        {offsetof(pdl_layer_weights, lin_norm), "ssm_norm.weight", "linear_attn.norm.weight"},
        {offsetof(pdl_layer_weights, lin_out), "ssm_out.weight", "linear_attn.out_proj.weight"},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if ((i < 2 && qkvz.data) || (i >= 2 && i < 4 && ba.data)) continue; /* regrouped above */
        layer_name(name, sizeof name, hf_prefix, l, names[i].hf, names[i].gguf);
        if (model_take_tensor(set, name, true, where, (pdl_tensor *)((char *)lw + names[i].offset), err)) return -1;
    }
    /* Hugging Face's Conv1d weight is (channels, 1, kernel) */
    pdl_tensor *cw = &lw->lin_conv1d;
    if (cw->n_dims == 3 && cw->shape[1] == 1) {
        cw->n_dims = 2;
        cw->shape[1] = cw->shape[2];
    }
    return 0;
}

/* One layer's weights into slot l, named as layer name_l under hf_prefix
 * (they differ for the MTP block: Hugging Face's mtp.layers.0). */
static int take_layer(pdl_model *m, const pdl_tensor_set *set, const char *hf_prefix, int name_l, int l,
                      const char *where, pdl_error *err) {
    pdl_model_config *c = &m->cfg;
    pdl_layer_weights *lw = &m->w.layers[l];
    char name[PDL_TENSOR_NAME_MAX];
    int64_t q_dim = (int64_t)c->n_heads * c->head_dim, kv_dim = (int64_t)c->n_kv_heads * c->head_dim;
    if (c->attn_out_gate) q_dim *= 2; /* q_proj: per head the query, then its gate */
    bool recurrent = model_layer_recurrent(c, l);
    if (recurrent && take_deltanet(m, set, hf_prefix, l, where, err)) return -1;
    /* fused projections (Phi-3; GGUF attn_qkv), split into row views;
     * a Gated DeltaNet layer's attn_qkv is its own (take_deltanet) */
    bool fused_qkv = recurrent, fused_gate_up = false;
    layer_name(name, sizeof name, hf_prefix, name_l, "self_attn.qkv_proj.weight", "attn_qkv.weight");
    if (!recurrent && take_fused(set, name, where, 3, (const int64_t[]){q_dim, kv_dim, kv_dim},
                   (const char *const[]){"q", "k", "v"}, (pdl_tensor *const[]){&lw->wq, &lw->wk, &lw->wv},
                   &fused_qkv, err))
        return -1;
    if (c->fused_gate_up) {
        layer_name(name, sizeof name, hf_prefix, name_l, "mlp.gate_up_proj.weight", "ffn_up.weight");
        if (take_fused(set, name, where, 2, (const int64_t[]){c->ffn, c->ffn},
                       (const char *const[]){"gate", "up"}, (pdl_tensor *const[]){&lw->w_gate, &lw->w_up},
                       &fused_gate_up, err))
            return -1;
        if (!fused_gate_up) return err_fail(err, "%s: missing tensor '%s'", where, name);
    }
    for (size_t i = 0; i < sizeof LAYER_TENSORS / sizeof LAYER_TENSORS[0]; i++) {
        const struct layer_tensor_name *t = &LAYER_TENSORS[i];
        if ((t->need == NEED_UNLESS_FUSED_QKV && fused_qkv) ||
            (t->need == NEED_IF_DENSE_UNFUSED && fused_gate_up))
            continue;
        bool attention_part = t->need == NEED_UNLESS_FUSED_QKV || t->need == NEED_IF_BIAS ||
                              t->need == NEED_IF_QK_NORM || t->need == NEED_IF_PRESENT || t->need == NEED_IF_SINKS ||
                              t->offset == offsetof(pdl_layer_weights, wo);
        if (recurrent && attention_part) continue;
        bool required = layer_needs(c, t->need);
        /* a norm or MLP matrix the config does not use is not taken (a
         * Gemma 2 HF post_attention_layernorm is not an ffn_norm); an
         * optional bias or q/k norm is */
        if (!required && t->need != NEED_IF_BIAS && t->need != NEED_IF_QK_NORM && t->need != NEED_IF_PRESENT) continue;
        const char *hf = c->block == PDL_BLOCK_SANDWICH && t->hf_post ? t->hf_post : t->hf;
        /* llama.cpp names Qwen3.5's and gpt-oss's MLP input norm post_attention_norm */
        const char *gguf = (c->arch->hybrid || c->arch->moe == PDL_MOE_GPT_OSS) &&
                                   t->offset == offsetof(pdl_layer_weights, ffn_norm)
                               ? "post_attention_norm.weight" : t->gguf;
        layer_name(name, sizeof name, hf_prefix, name_l, hf, gguf);
        if (model_take_tensor(set, name, required, where, (pdl_tensor *)((char *)lw + t->offset), err))
            return -1;
    }
    if (c->n_experts > 0 && take_experts(m, set, hf_prefix, name_l, l, where, err)) return -1;
    return 0;
}

/* The first MTP block, when the file has it (cfg.n_mtp_layers; GGUF
 * blk.<n_layers>.* with its nextn.* tensors, as llama.cpp's converter
 * writes Qwen3.5's; Hugging Face mtp.*): an attention layer in slot
 * n_layers and the block's input projection and norms. A file that
 * declares the block but lacks its projection runs without it. */
static int take_mtp(pdl_model *m, const pdl_tensor_set *set, const char *hf_prefix, const char *where,
                    pdl_error *err) {
    pdl_model_config *c = &m->cfg;
    char name[PDL_TENSOR_NAME_MAX];
    int n = c->n_layers;
    if (hf_prefix) snprintf(name, sizeof name, "mtp.fc.weight");
    else snprintf(name, sizeof name, "blk.%d.nextn.eh_proj.weight", n);
    if (!tensor_set_find(set, name)) return 0;
    /* Qwen3-Next's config may not count the block its folder holds */
    if (hf_prefix && c->n_mtp_layers <= 0) c->n_mtp_layers = 1;
    if (c->n_mtp_layers <= 0) return 0;
    pdl_model_weights *w = &m->w;
    if (model_take_tensor(set, name, true, where, &w->mtp_fc, err)) return -1;
    static const char *const hf_norms[3] = {"mtp.pre_fc_norm_embedding.weight", "mtp.pre_fc_norm_hidden.weight",
                                            "mtp.norm.weight"};
    static const char *const gguf_norms[3] = {"enorm", "hnorm", "shared_head_norm"};
    pdl_tensor *norms[3] = {&w->mtp_enorm, &w->mtp_hnorm, &w->mtp_norm};
    for (int i = 0; i < 3; i++) {
        if (hf_prefix) snprintf(name, sizeof name, "%s", hf_norms[i]);
        else snprintf(name, sizeof name, "blk.%d.nextn.%s.weight", n, gguf_norms[i]);
        if (model_take_tensor(set, name, true, where, norms[i], err)) return -1;
    }
    c->mtp_loaded = true; /* before take_layer: slot n_layers is an attention layer */
    return take_layer(m, set, hf_prefix ? "mtp." : NULL, hf_prefix ? 0 : n, n, where, err);
}

int model_take_layers(pdl_model *m, const pdl_tensor_set *set, const char *hf_prefix, const char *where,
                      pdl_error *err) {
    pdl_model_config *c = &m->cfg;
    if (c->n_layers <= 0 || c->n_layers > 4096)
        return err_fail(err, "%s: %d layers (must be 1 to 4096)", where, c->n_layers);
    if (c->n_experts > 0 && (c->n_experts > 4096 || c->n_experts_used < 1 || c->n_experts_used > c->n_experts ||
                             c->ffn_expert <= 0 || c->ffn_shared < 0))
        return err_fail(err, "%s: invalid experts: %d experts, %d used per token, intermediate size %d, shared %d "
                        "(need 1 <= used <= experts <= 4096 and positive sizes)", where, c->n_experts,
                        c->n_experts_used, c->ffn_expert, c->ffn_shared);
    size_t slots = (size_t)c->n_layers + 1; /* the MTP block's layer, if any, last */
    m->w.layers = calloc(slots, sizeof *m->w.layers);
    if (!m->w.layers) return err_fail(err, "out of memory");
    if (c->n_experts > 0) {
        m->w.experts = calloc(slots * 3 * (size_t)c->n_experts, sizeof *m->w.experts);
        if (!m->w.experts) return err_fail(err, "out of memory for %d layers of %d experts", c->n_layers, c->n_experts);
    }
    /* Biases present in the files are used even where the config is silent
     * (some llama conversions carry them). */
    char name[PDL_TENSOR_NAME_MAX];
    layer_name(name, sizeof name, hf_prefix, 0, "self_attn.q_proj.bias", "attn_q.bias");
    if (tensor_set_find(set, name)) c->qkv_bias = true;
    for (int l = 0; l < c->n_layers; l++)
        if (take_layer(m, set, hf_prefix, l, l, where, err)) return -1;
    if (take_mtp(m, set, hf_prefix, where, err)) return -1;
    return check_no_stray_layers(c, set, hf_prefix, where, err);
}

/* ---- shape checks ------------------------------------------------------- */

static void shape_str(const pdl_tensor *t, char *buf, size_t n) {
    size_t off = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < t->n_dims && off < n; i++)
        off += (size_t)snprintf(buf + off, n - off, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
    if (off < n) snprintf(buf + off, n - off, "]");
}

static int check_shape(const pdl_tensor *t, int64_t d0, int64_t d1, const char *why, pdl_error *err) {
    int want_dims = d1 < 0 ? 1 : 2;
    bool ok = t->n_dims == want_dims && t->shape[0] == d0 && (want_dims == 1 || t->shape[1] == d1);
    if (ok) return 0;
    char got[96];
    shape_str(t, got, sizeof got);
    if (want_dims == 1)
        return err_fail(err, "%s: tensor '%s' has shape %s but the config (%s) needs [%lld]", t->file, t->name, got,
                        why, (long long)d0);
    return err_fail(err, "%s: tensor '%s' has shape %s but the config (%s) needs [%lld, %lld]", t->file, t->name,
                    got, why, (long long)d0, (long long)d1);
}

static int own(pdl_model *m, void *p) {
    void **o = realloc(m->owned, (m->n_owned + 1) * sizeof *o);
    if (!o) return -1;
    m->owned = o;
    m->owned[m->n_owned++] = p;
    return 0;
}

/* Norm weights and biases are read as float*: make them F32 and aligned. */
static int make_f32_vector(pdl_model *m, pdl_tensor *t, pdl_error *err) {
    if (!t->data) return 0;
    if (t->dtype == PDL_DTYPE_F32 && ((uintptr_t)t->data % sizeof(float)) == 0) return 0;
    int64_t n = tensor_nelems(t);
    if (t->dtype == PDL_DTYPE_Q8_0 && n % 32 != 0)
        return err_fail(err, "%s: tensor '%s': Q8_0 vector of %lld elements", t->file, t->name, (long long)n);
    float *buf = malloc((size_t)n * sizeof *buf);
    if (!buf || own(m, buf)) {
        free(buf);
        return err_fail(err, "out of memory converting '%s'", t->name);
    }
    if (((uintptr_t)t->data % 2) != 0 && t->dtype != PDL_DTYPE_Q8_0) {
        /* byte-aligned only: go through an aligned copy */
        void *tmp = malloc(t->nbytes);
        if (!tmp) return err_fail(err, "out of memory converting '%s'", t->name);
        memcpy(tmp, t->data, t->nbytes);
        pdl_tensor c = *t;
        c.data = tmp;
        int drc = ops_dequant_row(&c, 0, buf, n);
        free(tmp);
        if (drc) return err_fail(err, "%s: tensor '%s': %s cannot be converted to F32", t->file, t->name,
                                 dtype_name(t->dtype));
    } else if (ops_dequant_row(t, 0, buf, n)) {
        return err_fail(err, "%s: tensor '%s': %s cannot be converted to F32", t->file, t->name,
                        dtype_name(t->dtype));
    }
    t->data = buf;
    t->dtype = PDL_DTYPE_F32;
    t->nbytes = (size_t)n * sizeof(float);
    return 0;
}

/* Matrices are used in place; only a misaligned one (possible in a
 * hand-made safetensors file) is copied to aligned memory. */
static int align_matrix(pdl_model *m, pdl_tensor *t, pdl_error *err) {
    size_t need = t->dtype == PDL_DTYPE_F32 ? 4 : t->dtype == PDL_DTYPE_Q8_0 ? 1 : 2;
    if (((uintptr_t)t->data % need) == 0) return 0;
    void *buf = malloc(t->nbytes ? t->nbytes : 1);
    if (!buf || own(m, buf)) {
        free(buf);
        return err_fail(err, "out of memory aligning '%s'", t->name);
    }
    memcpy(buf, t->data, t->nbytes);
    t->data = buf;
    return 0;
}

/* An F32 norm vector w applied as (1 + w) becomes an owned copy holding
 * 1 + w (rounded to F32, as Hugging Face's (1.0 + w.float()) is). */
static int fold_plus_one(pdl_model *m, pdl_tensor *t, pdl_error *err) {
    if (!t->data) return 0;
    int64_t n = tensor_nelems(t);
    float *buf = malloc((size_t)n * sizeof *buf);
    if (!buf || own(m, buf)) {
        free(buf);
        return err_fail(err, "out of memory converting '%s'", t->name);
    }
    const float *src = t->data;
    for (int64_t i = 0; i < n; i++) buf[i] = 1.0f + src[i];
    t->data = buf;
    return 0;
}

static int check_matrix(pdl_model *m, pdl_tensor *t, int64_t rows, int64_t cols, const char *why, pdl_error *err) {
    if (check_shape(t, rows, cols, why, err)) return -1;
    if (!matmul_supports(t->dtype))
        return err_fail(err, "%s: tensor '%s': no kernel multiplies %s weights", t->file, t->name,
                        dtype_name(t->dtype));
    if (cols % (int64_t)dtype_block_elems(t->dtype) != 0)
        return err_fail(err, "%s: tensor '%s': %lld columns is not a multiple of the %s block (%zu)", t->file,
                        t->name, (long long)cols, dtype_name(t->dtype), dtype_block_elems(t->dtype));
    return align_matrix(m, t, err);
}

static int check_vector(pdl_model *m, pdl_tensor *t, int64_t n, const char *why, pdl_error *err) {
    if (check_shape(t, n, -1, why, err)) return -1;
    return make_f32_vector(m, t, err);
}

/* ---- RoPE ---------------------------------------------------------------- */

int model_vector_copy(const pdl_tensor *t, int64_t n, float **out, pdl_error *err) {
    *out = NULL;
    if (tensor_nelems(t) != n || dtype_is_quantized(t->dtype))
        return err_fail(err, "%s: tensor '%s' must be a float vector of %lld elements (%s x %lld)", t->file, t->name,
                        (long long)n, dtype_name(t->dtype), (long long)tensor_nelems(t));
    float *buf = malloc((size_t)(n ? n : 1) * sizeof *buf);
    if (!buf) return err_fail(err, "out of memory reading '%s'", t->name);
    if (ops_dequant_row(t, 0, buf, n)) { /* float types are read bytewise: no alignment needed */
        free(buf);
        return err_fail(err, "%s: tensor '%s': %s cannot be converted to F32", t->file, t->name,
                        dtype_name(t->dtype));
    }
    *out = buf;
    return 0;
}

/* YaRN's weight of pair i's own (unscaled) frequency, 1 for the fast
 * pairs, 0 for the slow ones: the paper's ramp gamma. The pair turning
 * `turns` times over the original context sits at d ln(L / (2 pi turns)) /
 * (2 ln theta) (a fractional pair); the ramp runs linearly from the
 * beta_fast pair down to the beta_slow pair, rounded out to whole pairs when
 * truncating, clamped to [0, d - 1] as transformers and llama.cpp do. */
static double yarn_keep_weight(const pdl_model_config *c, double theta, int i) {
    double d = c->rope_dim, two_pi = 2.0 * 3.14159265358979323846;
    double lo = d * log(c->rope_orig_ctx / (two_pi * c->rope_yarn_beta_fast)) / (2.0 * log(theta));
    double hi = d * log(c->rope_orig_ctx / (two_pi * c->rope_yarn_beta_slow)) / (2.0 * log(theta));
    if (c->rope_yarn_truncate) lo = floor(lo), hi = ceil(hi);
    lo = fmax(lo, 0.0), hi = fmin(hi, d - 1.0);
    if (hi - lo < 0.001) hi = lo + 0.001; /* one pair wide: no division by zero */
    double ramp = fmin(fmax((i - lo) / (hi - lo), 0.0), 1.0); /* 0 below lo, 1 above hi */
    return (1.0 - ramp) * c->rope_yarn_ext;
}

/* theta^(-2i/d) in float32 for each pair, as Hugging Face and llama.cpp
 * compute it, then the model's scaling. */
static void rope_frequencies(const pdl_model_config *c, float theta, pdl_rope_scaling scaling, const float *ff,
                             float *inv_freq) {
    int half = c->rope_dim / 2;
    for (int i = 0; i < half; i++) {
        float freq = 1.0f / powf(theta, (float)(2 * i) / (float)c->rope_dim);
        switch (scaling) {
        case PDL_ROPE_SCALING_NONE: break;
        case PDL_ROPE_SCALING_LINEAR: freq /= c->rope_factor; break;
        case PDL_ROPE_SCALING_FREQS:
        case PDL_ROPE_SCALING_LONGROPE: freq /= ff[i]; break;
        case PDL_ROPE_SCALING_YARN: {
            double keep = yarn_keep_weight(c, theta, i);
            freq = (float)(keep * freq + (1.0 - keep) * freq / c->rope_factor);
            break;
        }
        case PDL_ROPE_SCALING_LLAMA3: {
            double low_wavelen = c->rope_orig_ctx / c->rope_low_freq_factor;
            double high_wavelen = c->rope_orig_ctx / c->rope_high_freq_factor;
            double wavelen = 2.0 * 3.14159265358979323846 / freq;
            if (wavelen < high_wavelen) {
                /* high frequencies unchanged */
            } else if (wavelen > low_wavelen) {
                freq = freq / c->rope_factor;
            } else {
                double smooth = (c->rope_orig_ctx / wavelen - c->rope_low_freq_factor) /
                                (c->rope_high_freq_factor - c->rope_low_freq_factor);
                freq = (float)((1.0 - smooth) * freq / c->rope_factor + smooth * freq);
            }
            break;
        }
        }
        inv_freq[i] = freq;
    }
}

/* Once the context in effect is known: LongRoPE uses its long factors when
 * the context exceeds the original one (as llama.cpp decides, per model, so a
 * sequence's RoPE never depends on its length or on the batch). */
static int rope_init(pdl_model *m, pdl_error *err) {
    pdl_model_config *c = &m->cfg;
    int half = c->rope_dim / 2;
    m->rope_inv_freq = malloc((size_t)(half ? half : 1) * sizeof *m->rope_inv_freq);
    if (!m->rope_inv_freq) return err_fail(err, "out of memory");
    const float *ff = m->rope_factors;
    if (c->rope_scaling == PDL_ROPE_SCALING_LONGROPE && m->rope_factors_short && m->ctx_size <= c->rope_orig_ctx)
        ff = m->rope_factors_short;
    if ((c->rope_scaling == PDL_ROPE_SCALING_FREQS || c->rope_scaling == PDL_ROPE_SCALING_LONGROPE) && !ff)
        return err_fail(err, "RoPE scaling needs frequency factors and the model has none");
    rope_frequencies(c, c->rope_theta, c->rope_scaling, ff, m->rope_inv_freq);
    if (c->rope_theta_local > 0) {
        m->rope_inv_freq_local = malloc((size_t)(half ? half : 1) * sizeof *m->rope_inv_freq_local);
        if (!m->rope_inv_freq_local) return err_fail(err, "out of memory");
        rope_frequencies(c, c->rope_theta_local, PDL_ROPE_SCALING_NONE, NULL, m->rope_inv_freq_local);
    }
    return 0;
}

/* A Gated DeltaNet layer's weights against the config; A_log (Hugging
 * Face) becomes -exp(A_log), in float32 as transformers computes it. */
static int check_deltanet(pdl_model *m, pdl_layer_weights *lw, pdl_error *err) {
    const pdl_model_config *c = &m->cfg;
    int64_t kd = (int64_t)c->lin_k_heads * c->lin_k_dim, vd = (int64_t)c->lin_v_heads * c->lin_v_dim;
    char why[192];
    snprintf(why, sizeof why, "hidden %d, linear attention %d key heads of %d, %d value heads of %d, kernel %d",
             c->hidden, c->lin_k_heads, c->lin_k_dim, c->lin_v_heads, c->lin_v_dim, c->lin_conv);
    if (check_matrix(m, &lw->lin_qkv, 2 * kd + vd, c->hidden, why, err) ||
        check_matrix(m, &lw->lin_z, vd, c->hidden, why, err) ||
        check_matrix(m, &lw->lin_b, c->lin_v_heads, c->hidden, why, err) ||
        check_matrix(m, &lw->lin_a, c->lin_v_heads, c->hidden, why, err) ||
        check_matrix(m, &lw->lin_out, c->hidden, vd, why, err) ||
        check_vector(m, &lw->lin_dt_bias, c->lin_v_heads, why, err) ||
        check_vector(m, &lw->lin_a_neg, c->lin_v_heads, why, err) ||
        check_vector(m, &lw->lin_norm, c->lin_v_dim, why, err) ||
        check_shape(&lw->lin_conv1d, 2 * kd + vd, c->lin_conv, why, err))
        return -1;
    /* the kernel as F32, transposed to (kernel, channels): tap i of every
     * channel is one row, which the convolution reads with its inputs */
    int64_t cd = 2 * kd + vd;
    pdl_tensor flat = lw->lin_conv1d;
    flat.n_dims = 1;
    flat.shape[0] = cd * c->lin_conv;
    float *taps = malloc((size_t)flat.shape[0] * sizeof *taps);
    if (!taps || own(m, taps)) {
        free(taps);
        return err_fail(err, "out of memory converting '%s'", lw->lin_conv1d.name);
    }
    if (make_f32_vector(m, &flat, err)) return -1;
    const float *src = flat.data;
    for (int64_t ch = 0; ch < cd; ch++)
        for (int i = 0; i < c->lin_conv; i++) taps[(size_t)i * cd + ch] = src[ch * c->lin_conv + i];
    lw->lin_conv1d.data = taps, lw->lin_conv1d.dtype = PDL_DTYPE_F32, lw->lin_conv1d.nbytes = flat.nbytes;
    lw->lin_conv1d.shape[0] = c->lin_conv, lw->lin_conv1d.shape[1] = cd;
    if (c->lin_a_log) {
        float *neg = malloc((size_t)c->lin_v_heads * sizeof *neg);
        if (!neg || own(m, neg)) {
            free(neg);
            return err_fail(err, "out of memory converting '%s'", lw->lin_a_neg.name);
        }
        const float *a = lw->lin_a_neg.data;
        for (int h = 0; h < c->lin_v_heads; h++) neg[h] = -expf(a[h]);
        lw->lin_a_neg.data = neg;
    }
    return 0;
}

/* A MoE layer's router, experts and shared expert against the config. */
static int check_experts(pdl_model *m, pdl_layer_weights *lw, pdl_error *err) {
    const pdl_model_config *c = &m->cfg;
    char why[160];
    snprintf(why, sizeof why, "hidden %d, %d experts of intermediate size %d, shared %d", c->hidden, c->n_experts,
             c->ffn_expert, c->ffn_shared);
    if (check_matrix(m, &lw->router, c->n_experts, c->hidden, why, err)) return -1;
    for (int e = 0; e < c->n_experts; e++)
        if (check_matrix(m, &lw->exp_gate[e], c->ffn_expert, c->hidden, why, err) ||
            check_matrix(m, &lw->exp_up[e], c->ffn_expert, c->hidden, why, err) ||
            check_matrix(m, &lw->exp_down[e], c->hidden, c->ffn_expert, why, err))
            return -1;
    if (c->ffn_shared > 0 && (check_matrix(m, &lw->sh_gate, c->ffn_shared, c->hidden, why, err) ||
                              check_matrix(m, &lw->sh_up, c->ffn_shared, c->hidden, why, err) ||
                              check_matrix(m, &lw->sh_down, c->hidden, c->ffn_shared, why, err)))
        return -1;
    if (c->shared_gate && check_vector(m, &lw->sh_gate_w, c->hidden, why, err)) return -1;
    /* biases (gpt-oss): one row per expert */
    pdl_tensor *biases[] = {&lw->router_b, &lw->exp_gate_b, &lw->exp_up_b, &lw->exp_down_b};
    int64_t want[] = {c->n_experts, (int64_t)c->n_experts * c->ffn_expert, (int64_t)c->n_experts * c->ffn_expert,
                      (int64_t)c->n_experts * c->hidden};
    for (int i = 0; i < 4; i++) {
        if (!biases[i]->data) continue;
        if (tensor_nelems(biases[i]) != want[i] || dtype_is_quantized(biases[i]->dtype))
            return err_fail(err, "%s: tensor '%s' must hold %lld float values (%s), got %lld of %s", biases[i]->file,
                            biases[i]->name, (long long)want[i], why, (long long)tensor_nelems(biases[i]),
                            dtype_name(biases[i]->dtype));
        if (make_f32_vector(m, biases[i], err)) return -1;
    }
    return 0;
}

/* ---- finish -------------------------------------------------------------- */

int model_finish(pdl_model *m, pdl_error *err) {
    pdl_model_config *c = &m->cfg;
    if (!c->layer_kind) c->n_attn_layers = c->n_layers, c->n_rec_layers = 0;
    if (c->n_layers <= 0 || c->hidden <= 0 || c->n_heads <= 0 || c->n_kv_heads <= 0 || c->head_dim <= 0 ||
        c->ffn <= 0 || c->vocab <= 0)
        return err_fail(err, "invalid hyperparameters: layers %d, hidden %d, heads %d, kv heads %d, head_dim %d, "
                        "ffn %d, vocab %d (all must be positive)",
                        c->n_layers, c->hidden, c->n_heads, c->n_kv_heads, c->head_dim, c->ffn, c->vocab);
    if (c->n_heads % c->n_kv_heads != 0)
        return err_fail(err, "invalid hyperparameters: %d heads is not a multiple of %d KV heads", c->n_heads,
                        c->n_kv_heads);
    if ((c->encoder ? c->rope_dim != 0 : c->rope_dim <= 0) || c->rope_dim > c->head_dim || c->rope_dim % 2)
        return err_fail(err, "invalid RoPE dimension %d for head_dim %d", c->rope_dim, c->head_dim);
    if (c->rope_dim > 1024) return err_fail(err, "RoPE dimension %d is larger than 1024 (not supported)", c->rope_dim);
    if (!(c->rope_theta > 0 && isfinite(c->rope_theta)) || !(c->rope_theta_local >= 0 && isfinite(c->rope_theta_local)))
        return err_fail(err, "invalid RoPE theta %g (local %g): rope.freq_base / rope_theta must be a finite positive "
                        "number", c->rope_theta, c->rope_theta_local);
    if (!(c->rope_mscale > 0 && isfinite(c->rope_mscale)))
        return err_fail(err, "invalid RoPE attention factor %g", c->rope_mscale);
    if (!isfinite(c->rope_factor) || !isfinite(c->rope_low_freq_factor) || !isfinite(c->rope_high_freq_factor))
        return err_fail(err, "invalid RoPE scaling factors %g / %g / %g (must be finite)", c->rope_factor,
                        c->rope_low_freq_factor, c->rope_high_freq_factor);
    const float scales[] = {c->embed_scale, c->residual_scale, c->attn_scale, c->attn_softcap,
                            c->logit_div, c->logit_scale, c->final_softcap};
    for (size_t i = 0; i < sizeof scales / sizeof scales[0]; i++)
        if (!isfinite(scales[i]))
            return err_fail(err, "invalid scales: embedding %g, residual %g, attention %g, attention soft-cap %g, logit "
                            "divisor %g, logit scale %g, final soft-cap %g (all must be finite)", c->embed_scale,
                            c->residual_scale, c->attn_scale, c->attn_softcap, c->logit_div, c->logit_scale,
                            c->final_softcap);
    int mrope = c->mrope_section[0] + c->mrope_section[1] + c->mrope_section[2];
    if (mrope && (mrope != c->rope_dim / 2 || c->mrope_section[0] < 0 || c->mrope_section[1] < 0 ||
                  c->mrope_section[2] < 0 || c->rope_theta_local > 0 || c->rope_scaling != PDL_ROPE_SCALING_NONE))
        return err_fail(err, "invalid M-RoPE sections [%d, %d, %d]: they must be non-negative and sum to rope "
                        "dimension / 2 = %d, without other RoPE scaling or a local base", c->mrope_section[0],
                        c->mrope_section[1], c->mrope_section[2], c->rope_dim / 2);
    if (c->rope_scaling == PDL_ROPE_SCALING_LONGROPE && c->rope_orig_ctx <= 0)
        return err_fail(err, "LongRoPE needs a positive original context length, got %d", c->rope_orig_ctx);
    if (c->rope_scaling == PDL_ROPE_SCALING_YARN) {
        if (c->rope_orig_ctx <= 0 || !(c->rope_factor > 0))
            return err_fail(err, "YaRN needs a positive factor and original context length, got factor %g over %d",
                            c->rope_factor, c->rope_orig_ctx);
        if (!(c->rope_yarn_beta_slow > 0 && c->rope_yarn_beta_fast > c->rope_yarn_beta_slow &&
              isfinite(c->rope_yarn_beta_fast)) || !(c->rope_yarn_ext >= 0 && c->rope_yarn_ext <= 1))
            return err_fail(err, "invalid YaRN parameters: beta_fast %g, beta_slow %g, extrapolation factor %g "
                            "(need beta_fast > beta_slow > 0 and the extrapolation factor in [0, 1])",
                            c->rope_yarn_beta_fast, c->rope_yarn_beta_slow, c->rope_yarn_ext);
        /* the declared context is the scaled one (vLLM's reading: Qwen3 keeps
         * max_position_embeddings 40960 with factor 4 over 32768) */
        double scaled = (double)c->rope_orig_ctx * c->rope_factor;
        if (c->ctx_len > 0 && scaled > c->ctx_len) c->ctx_len = scaled < INT32_MAX ? (int)scaled : INT32_MAX;
    }
    if (!(c->rms_eps > 0 && isfinite(c->rms_eps)))
        return err_fail(err, "invalid norm epsilon %g (rms_norm_eps / layer_norm_rms_epsilon must be a finite positive "
                        "number)", c->rms_eps);
    for (int i = 0; i < c->n_eos; i++)
        if (c->eos_ids[i] < 0 || c->eos_ids[i] >= c->vocab)
            return err_fail(err, "end-of-sequence token id %d (eos_token_id, or tokenizer.ggml.eos_token_id / "
                            "eot_token_id) is outside the vocabulary [0, %d)", c->eos_ids[i], c->vocab);
    if (c->bos_id < -1 || c->bos_id >= c->vocab)
        return err_fail(err, "beginning-of-sequence token id %d (bos_token_id) is outside the vocabulary [0, %d)",
                        c->bos_id, c->vocab);
    c->ctx_len_declared = c->ctx_len > 0;
    if (c->ctx_len <= 0) c->ctx_len = 2048;

    char why[160];
    snprintf(why, sizeof why, "hidden %d, heads %d, kv heads %d, head_dim %d, ffn %d, vocab %d", c->hidden,
             c->n_heads, c->n_kv_heads, c->head_dim, c->ffn, c->vocab);
    int64_t q_dim = (int64_t)c->n_heads * c->head_dim, kv_dim = (int64_t)c->n_kv_heads * c->head_dim;
    pdl_model_weights *w = &m->w;
    if (check_matrix(m, &w->tok_embd, c->vocab, c->hidden, why, err)) return -1;
    if (c->encoder) { /* no head; the embeddings' sum and its norm (model_load_bert.c) */
        int64_t types = w->type_embd.n_dims == 2 && w->type_embd.shape[0] >= 1 ? w->type_embd.shape[0] : 1;
        if (c->n_positions <= 0) return err_fail(err, "an encoder needs position embeddings");
        if (check_matrix(m, &w->pos_embd, c->n_positions, c->hidden, why, err) ||
            check_matrix(m, &w->type_embd, types, c->hidden, why, err) ||
            check_vector(m, &w->embd_norm, c->hidden, why, err) || check_vector(m, &w->embd_norm_b, c->hidden, why, err))
            return -1;
    } else {
        if (check_vector(m, &w->output_norm, c->hidden, why, err)) return -1;
        if (c->tied_embeddings) w->output = w->tok_embd;
        else if (check_matrix(m, &w->output, c->vocab, c->hidden, why, err)) return -1;
    }

    int64_t qn = c->qk_norm == PDL_QK_NORM_WHOLE ? q_dim : c->head_dim;
    int64_t kn = c->qk_norm == PDL_QK_NORM_WHOLE ? kv_dim : c->head_dim;
    bool pre = c->block != PDL_BLOCK_POST_NORM && c->block != PDL_BLOCK_POST_ADD;
    bool ffn_norm = c->block == PDL_BLOCK_PRE_NORM || c->block == PDL_BLOCK_SANDWICH;
    bool post = c->block == PDL_BLOCK_SANDWICH || c->block == PDL_BLOCK_POST_NORM || c->block == PDL_BLOCK_POST_ADD;
    bool gated = c->act != PDL_ACT_GELU_ERF;
    if (c->mtp_loaded) {
        pdl_tensor *norms[] = {&w->mtp_enorm, &w->mtp_hnorm, &w->mtp_norm};
        if (check_matrix(m, &w->mtp_fc, c->hidden, 2 * (int64_t)c->hidden, "the MTP block's input projection", err))
            return -1;
        for (size_t i = 0; i < sizeof norms / sizeof norms[0]; i++)
            if (check_vector(m, norms[i], c->hidden, why, err) || (c->norm_plus_one && fold_plus_one(m, norms[i], err)))
                return -1;
    }
    for (int l = 0; l < model_weight_layers(c); l++) {
        pdl_layer_weights *lw = &w->layers[l];
        bool recurrent = model_layer_recurrent(c, l);
        if (recurrent) {
            if (check_vector(m, &lw->attn_norm, c->hidden, why, err) || check_deltanet(m, lw, err) ||
                check_vector(m, &lw->ffn_norm, c->hidden, why, err))
                return -1;
        } else if ((pre && check_vector(m, &lw->attn_norm, c->hidden, why, err)) ||
            check_matrix(m, &lw->wq, c->attn_out_gate ? 2 * q_dim : q_dim, c->hidden, why, err) ||
            check_matrix(m, &lw->wk, kv_dim, c->hidden, why, err) ||
            check_matrix(m, &lw->wv, kv_dim, c->hidden, why, err) ||
            check_matrix(m, &lw->wo, c->hidden, q_dim, why, err) ||
            (ffn_norm && check_vector(m, &lw->ffn_norm, c->hidden, why, err)))
            return -1;
        if (c->n_experts == 0 && ((gated && check_matrix(m, &lw->w_gate, c->ffn, c->hidden, why, err)) ||
                                  check_matrix(m, &lw->w_up, c->ffn, c->hidden, why, err) ||
                                  check_matrix(m, &lw->w_down, c->hidden, c->ffn, why, err)))
            return -1;
        if (!gated && (check_vector(m, &lw->b_up, c->ffn, why, err) || check_vector(m, &lw->b_down, c->hidden, why, err)))
            return -1;
        if (c->block == PDL_BLOCK_POST_ADD && (check_vector(m, &lw->post_attn_norm_b, c->hidden, why, err) ||
                                               check_vector(m, &lw->post_ffn_norm_b, c->hidden, why, err)))
            return -1;
        if (c->n_experts > 0 && check_experts(m, lw, err)) return -1;
        if (!recurrent && c->qkv_bias && (check_vector(m, &lw->bq, q_dim, why, err) || check_vector(m, &lw->bk, kv_dim, why, err) ||
                            check_vector(m, &lw->bv, kv_dim, why, err)))
            return -1;
        if (!recurrent && ((lw->bo.data && check_vector(m, &lw->bo, c->hidden, why, err)) ||
                           (c->attn_sinks && check_vector(m, &lw->sinks, c->n_heads, why, err))))
            return -1;
        if (!recurrent && c->qk_norm != PDL_QK_NORM_NONE &&
            (check_vector(m, &lw->q_norm, qn, why, err) || check_vector(m, &lw->k_norm, kn, why, err)))
            return -1;
        if (post && (check_vector(m, &lw->post_attn_norm, c->hidden, why, err) ||
                     check_vector(m, &lw->post_ffn_norm, c->hidden, why, err)))
            return -1;
        if (c->norm_plus_one) {
            pdl_tensor *norms[] = {&lw->attn_norm, &lw->ffn_norm, &lw->post_attn_norm, &lw->post_ffn_norm,
                                   &lw->q_norm, &lw->k_norm};
            for (size_t i = 0; i < sizeof norms / sizeof norms[0]; i++)
                if (fold_plus_one(m, norms[i], err)) return -1;
        }
    }
    if (c->norm_plus_one) {
        if (fold_plus_one(m, &w->output_norm, err)) return -1;
        c->norm_plus_one = false; /* done: the weights now hold 1 + w */
    }
    c->lin_a_log = false; /* done: lin_a_neg holds -exp(A_log) */

    /* Record the distinct matrix dtypes, e.g. "F32" or "F16,F32"; MLX types
     * with their group sizes, e.g. "MLX_Q4(g64)" or "MLX_Q8(g32/g64)". */
    unsigned seen[PDL_DTYPE_COUNT] = {0}; /* bit 0: seen; MLX: | group (32, 64, 128) */
#define SEEN(t) (void)((t).data && (seen[(t).dtype] |= 1u | (dtype_is_mlx((t).dtype) ? (unsigned)(t).mlx.group : 0u)))
    SEEN(w->tok_embd), SEEN(w->output), SEEN(w->mtp_fc);
    for (int l = 0; l < model_weight_layers(c); l++) {
        const pdl_layer_weights *lw = &w->layers[l];
        SEEN(lw->wq), SEEN(lw->wk), SEEN(lw->wv), SEEN(lw->wo), SEEN(lw->lin_qkv), SEEN(lw->lin_z), SEEN(lw->lin_out);
        if (c->n_experts == 0) SEEN(lw->w_gate), SEEN(lw->w_up), SEEN(lw->w_down);
        if (c->n_experts > 0) SEEN(lw->router);
        for (int e = 0; e < c->n_experts; e++) SEEN(lw->exp_gate[e]), SEEN(lw->exp_up[e]), SEEN(lw->exp_down[e]);
        if (c->ffn_shared > 0) SEEN(lw->sh_gate), SEEN(lw->sh_up), SEEN(lw->sh_down);
    }
#undef SEEN
    m->weight_types[0] = '\0';
    for (int t = 0; t < PDL_DTYPE_COUNT; t++) {
        if (!seen[t]) continue;
        size_t len = strlen(m->weight_types);
        snprintf(m->weight_types + len, sizeof m->weight_types - len, "%s%s", len ? "," : "",
                 dtype_name((pdl_dtype)t));
        for (unsigned g = 32, first = 1; dtype_is_mlx((pdl_dtype)t) && g <= 128; g *= 2) {
            if (!(seen[t] & g)) continue;
            len = strlen(m->weight_types);
            snprintf(m->weight_types + len, sizeof m->weight_types - len, "%sg%u", first ? "(" : "/", g);
            first = 0;
        }
        if (dtype_is_mlx((pdl_dtype)t)) {
            len = strlen(m->weight_types);
            snprintf(m->weight_types + len, sizeof m->weight_types - len, ")");
        }
    }
    return 0;
}

/* The matrices the forward pass multiplies by are copied once, here, with
 * the model's threads, into one buffer that the kernel may back with huge
 * pages (util/huge_alloc.h; a decode step streams all of them, and 4 KiB
 * file pages cost a TLB miss every 4 KiB): into panels where this
 * machine's kernels read them (kernels/weight_panels.h), byte for byte
 * otherwise. The mapped originals' pages then leave the resident set (a
 * tied embedding's few looked-up rows come back from the page cache).
 * opts->weights_mapped leaves every matrix in the file mapping (shared with
 * other processes using the file) and the row-major kernels, and so does a
 * model whose copies would not fit in the memory available (the mapping can
 * page; anonymous copies cannot without swap; opts->log says so). */
static int copy_matrices(pdl_model *m, pdl_threadpool *pool, const pdl_model_options *opts, pdl_error *err) {
    if (opts && opts->weights_mapped) return 0;
    pdl_load_progress_fn progress = opts ? opts->progress : NULL;
    pdl_model_weights *w = &m->w;
    const pdl_model_config *c = &m->cfg;
    /* every matrix: the head, then each layer's (absent ones have no data) */
    size_t per_layer = 16 + 3 * (size_t)c->n_experts, n_mats = 2 + (size_t)model_weight_layers(c) * per_layer, k = 0;
    pdl_tensor **mats = malloc(n_mats * sizeof *mats);
    if (!mats) return err_fail(err, "out of memory");
    mats[k++] = &w->output;
    mats[k++] = &w->mtp_fc;
    for (int l = 0; l < model_weight_layers(c); l++) {
        pdl_layer_weights *lw = &w->layers[l];
        pdl_tensor *fixed[] = {&lw->wq,     &lw->wk,     &lw->wv,      &lw->wo,    &lw->w_gate, &lw->w_up,
                               &lw->w_down, &lw->router, &lw->sh_gate, &lw->sh_up, &lw->sh_down, &lw->lin_qkv,
                               &lw->lin_z,  &lw->lin_b,  &lw->lin_a,   &lw->lin_out};
        for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) mats[k++] = fixed[i];
        for (int e = 0; e < c->n_experts; e++)
            mats[k++] = &lw->exp_gate[e], mats[k++] = &lw->exp_up[e], mats[k++] = &lw->exp_down[e];
    }
    size_t total = 0;
    uint8_t *at = NULL;
    int rc = 0;
    for (int pass = 0; pass < 2 && rc == 0; pass++) { /* sizes, then copies */
        if (pass == 1) {
            if (total == 0) break;
            size_t avail = huge_available_memory();
            if (avail && total > avail - avail / 8) { /* the mapping pages in what it needs; copies could not */
                if (opts && opts->log) {
                    char line[256];
                    snprintf(line, sizeof line, "weights used from the file mapping: copying %.2f GiB of matrices "
                             "would leave too little of the %.2f GiB available",
                             total / 1073741824.0, avail / 1073741824.0);
                    opts->log(line, opts->log_user);
                }
                break;
            }
            if (!(m->matrices = huge_alloc(total))) {
                rc = err_fail(err, "out of memory copying %zu bytes of weight matrices", total);
                break;
            }
            at = m->matrices;
        }
        for (size_t i = 0; i < k; i++) {
            pdl_tensor *t = mats[i];
            if (!t->data) continue;
            bool panels = panels_wanted(&m->kernels, t);
            size_t bytes = panels ? panels_size(t) : (t->nbytes + 63) / 64 * 64;
            if (pass == 0) {
                total += bytes;
                continue;
            }
            const void *mapped = t->data;
            if (panels) {
                panels_fill(pool, t, at);
            } else {
                memcpy(at, mapped, t->nbytes);
                t->data = at;
            }
            at += bytes;
            if (m->gguf) gguf_release(m->gguf, mapped, t->nbytes);
            if (m->st) st_release(m->st, mapped, t->nbytes);
            if (progress && at < (uint8_t *)m->matrices + total)
                progress((double)(at - (uint8_t *)m->matrices) / (double)total, opts->progress_user);
        }
    }
    free(mats);
    return rc;
}

/* Whether a tensor of a multimodal checkpoint belongs to its vision half,
 * which pdl_vision_load takes from the same folder (vision_load_hf.c), not
 * the text model. */
static bool vision_tensor(const char *name) {
    return strstr(name, "vision_tower.") || strstr(name, "multi_modal_projector.") || strstr(name, "image_newline");
}

/* Says through the log how many of the file's tensors the model did not
 * take (every weight it uses is looked up with tensor_set_take), and
 * the first few: a tensor the architecture does not know, or a name the
 * loader misses, would otherwise be ignored without a word. */
static void log_unused_tensors(const pdl_model *m, const char *path, const pdl_model_options *opts) {
    if (!opts || !opts->log) return;
    const pdl_tensor_set *set = m->gguf ? gguf_tensors(m->gguf) : st_tensors(m->st);
    enum { SHOWN = 4 };
    const char *shown[SHOWN];
    size_t n = 0, n_vision = 0;
    for (size_t i = 0; i < set->count; i++) {
        if (set->taken[i]) continue;
        if (vision_tensor(set->items[i].name)) {
            n_vision++;
            continue;
        }
        if (n < SHOWN) shown[n] = set->items[i].name;
        n++;
    }
    if (n == 0) return;
    char line[1024];
    int at = snprintf(line, sizeof line, "%s: %zu of its %zu tensors are not used by the model:", path, n,
                      set->count - n_vision);
    for (size_t i = 0; i < n && i < SHOWN && at > 0 && (size_t)at < sizeof line; i++)
        at += snprintf(line + at, sizeof line - (size_t)at, "%s %s", i ? "," : "", shown[i]);
    if (n > SHOWN && at > 0 && (size_t)at < sizeof line) snprintf(line + at, sizeof line - (size_t)at, ", ...");
    opts->log(line, opts->log_user);
}

/* The context in effect: the model's own unless asked for. Longer than
 * what the model declares (positions it was never trained on) only when
 * allowed explicitly, as vLLM does; RoPE scaling in the model's
 * configuration is the way to a longer context, and its declared length is
 * then the scaled one. A model that declares none takes any length. */
static int settle_ctx_size(pdl_model *m, const char *path, const pdl_model_options *opts, pdl_error *err) {
    const pdl_model_config *c = &m->cfg;
    int req = opts ? opts->ctx_size : 0;
    if (req < 0) return err_fail(err, "context size %d must not be negative", req);
    m->ctx_size = req > 0 ? req : c->ctx_len;
    if (req <= c->ctx_len || !c->ctx_len_declared) return 0;
    const char *key = m->gguf ? "its GGUF context_length" : "max_position_embeddings in its config.json";
    if (!opts->allow_long_context)
        return err_fail(err, "%s: the context length asked for, %d, is longer than the model's own, %d (%s): "
                        "positions past %d were not trained. Use a model whose configuration scales RoPE to the "
                        "length wanted, or allow it anyway (allow_long_context; for the pagedlm commands, "
                        "PAGEDLM_ALLOW_LONG_MAX_MODEL_LEN=1)", path, req, c->ctx_len, key, c->ctx_len);
    if (opts->log) {
        char line[512];
        snprintf(line, sizeof line, "%s: context length %d is longer than the model's own, %d (allowed): positions "
                 "past %d were not trained, and what the model does there is untested", path, req, c->ctx_len,
                 c->ctx_len);
        opts->log(line, opts->log_user);
    }
    return 0;
}

/* ---- public -------------------------------------------------------------- */

int pdl_model_load(pdl_model **out, const char *path, const pdl_model_options *opts, pdl_error *err) {
    *out = NULL;
    fp16_init();
    pdl_model *m = calloc(1, sizeof *m);
    if (!m) return err_fail(err, "out of memory");
    m->probe_state = -1;
    if (opts && (opts->kernels || opts->bf16_activations)) {
        /* this model's own family: its panels and its contexts follow it */
        pdl_isa isa = cpu_isa_active();
        pdl_error why = {0};
        if (opts->kernels && cpu_isa_named(opts->kernels, &isa, &why) && opts->log) {
            /* pdl_set_kernels' rule: the best family runs, and the log says so */
            char line[PDL_ERROR_MAX + 16];
            snprintf(line, sizeof line, "kernels: %s", why.message);
            opts->log(line, opts->log_user);
        }
        bool bf16 = opts->bf16_activations == PDL_BF16_ACT_DEFAULT ? matmul_bf16_activations()
                                                                 : opts->bf16_activations == PDL_BF16_ACT_ROUND;
        matmul_kernels_for(isa, bf16, &m->kernels);
        m->kernels_chosen = true;
    } else {
        m->kernels = *matmul_kernels_active();
    }
    m->cfg.logit_scale = 1.0f;
    m->cfg.logit_div = 1.0f;
    m->cfg.embed_scale = 1.0f;
    m->cfg.residual_scale = 1.0f;
    m->cfg.rope_mscale = 1.0f;
    m->cfg.router_scale = 1.0f;
    struct stat st;
    int rc;
    if (stat(path, &st) != 0) {
        rc = err_fail(err, "%s: no such file or folder", path);
    } else if (S_ISDIR(st.st_mode)) {
        rc = model_load_hf(m, path, err);
    } else {
        rc = model_load_gguf(m, path, err);
    }
    if (rc == 0) log_unused_tensors(m, path, opts);
    if (rc == 0) rc = settle_ctx_size(m, path, opts, err);
    if (rc == 0) rc = rope_init(m, err);
    m->default_threads = opts && opts->n_threads > 0 ? opts->n_threads : 0;
    /* the load's own run state: its threads lay out the weight panels, and
     * the selective-logits probe runs on it once the weights are in place
     * (its verdict is the last thing written into the model) */
    pdl_context *ctx = NULL;
    if (rc == 0) rc = pdl_context_create(&ctx, m, NULL, err);
    if (rc == 0) rc = copy_matrices(m, ctx->pool, opts, err);
    if (rc == 0) {
        bool ok = false;
        rc = probe_run(ctx, &ok, NULL, 0, err);
        m->probe_state = ok ? 1 : 0;
    }
    pdl_context_free(ctx);
    if (rc != 0) {
        pdl_model_free(m);
        return -1;
    }
    if (opts && opts->progress) opts->progress(1.0, opts->progress_user);
    *out = m;
    return 0;
}

void pdl_model_free(pdl_model *m) {
    if (!m) return;
    free(m->w.layers);
    free(m->w.experts);
    free(m->cfg.layer_kind), free(m->cfg.kind_index);
    free(m->rope_inv_freq), free(m->rope_inv_freq_local), free(m->rope_factors), free(m->rope_factors_short);
    for (size_t i = 0; i < m->n_owned; i++) free(m->owned[i]);
    free(m->owned);
    huge_free(m->matrices);
    if (m->tok) tok_free(m->tok);
    if (m->gguf) gguf_close(m->gguf);
    if (m->st) st_close(m->st);
    free(m);
}

void pdl_model_get_info(const pdl_model *m, pdl_model_info *info) {
    const pdl_model_config *c = &m->cfg;
    info->arch = c->arch->name;
    info->source = m->source;
    info->n_layers = c->n_layers;
    info->hidden = c->hidden;
    info->n_heads = c->n_heads;
    info->n_kv_heads = c->n_kv_heads;
    info->head_dim = c->head_dim;
    info->ffn = c->n_experts > 0 ? c->ffn_expert : c->ffn;
    info->n_experts = c->n_experts;
    info->n_experts_used = c->n_experts_used;
    info->vocab = c->vocab;
    info->ctx_len = m->ctx_size;
    info->bos_id = c->bos_id;
    info->eos_id = c->n_eos > 0 ? c->eos_ids[0] : -1;
    info->add_bos = m->tok ? tok_add_bos(m->tok) : c->bos_id >= 0;
    /* a FIM token the embeddings do not have is no token of this model */
    int32_t *fim[TOK_FIM_COUNT] = {&info->fim.pre, &info->fim.suf, &info->fim.mid,
                                   &info->fim.pad, &info->fim.rep, &info->fim.sep};
    for (int k = 0; k < TOK_FIM_COUNT; k++) {
        int32_t id = m->tok ? tok_fim_id(m->tok, (tok_fim)k) : -1;
        *fim[k] = id < c->vocab ? id : -1;
    }
    info->weight_types = m->weight_types;
    info->probe_state = m->probe_state;
    info->n_recurrent_layers = m->cfg.n_rec_layers;
    info->state_bytes = kv_state_slot_bytes(&m->cfg);
    info->state_chunk = m->cfg.n_rec_layers > 0 ? PDL_STATE_CHUNK : 0;
    info->state_max_rows = m->cfg.n_rec_layers > 0 ? PDL_STATE_RING - m->cfg.lin_conv : 0;
    info->n_mtp_layers = m->cfg.mtp_loaded ? 1 : 0;
    info->pooling = m->cfg.pooling;
    info->pool_normalize = m->cfg.pool_normalize;
    info->matryoshka = m->cfg.matryoshka;
    info->encoder = m->cfg.encoder;
}

int pdl_model_tensor_types(const pdl_model *m, pdl_tensor_type_stats *out, int max) {
    const pdl_tensor_set *set = m->gguf ? gguf_tensors(m->gguf) : st_tensors(m->st);
    pdl_tensor_type_stats all[PDL_DTYPE_COUNT] = {{0}};
    for (size_t i = 0; i < set->count; i++) {
        const pdl_tensor *t = &set->items[i];
        if ((unsigned)t->dtype >= PDL_DTYPE_COUNT) continue;
        pdl_tensor_type_stats *s = &all[t->dtype];
        bool expanded = t->n_dims >= 2 && !matmul_has_dot(t->dtype);
        s->type = dtype_name(t->dtype);
        s->n_tensors++;
        s->bytes += t->nbytes;
        s->n_expanded += expanded;
        if (!s->example || (expanded && s->n_expanded == 1)) s->example = t->name;
    }
    int n = 0;
    for (int d = 0; d < PDL_DTYPE_COUNT; d++) {
        if (!all[d].n_tensors) continue;
        int at = n < max ? n : max; /* insertion by bytes, largest first, into the first max */
        while (at > 0 && all[d].bytes > out[at - 1].bytes) {
            if (at < max) out[at] = out[at - 1];
            at--;
        }
        if (at < max) out[at] = all[d];
        n++;
    }
    return n;
}
