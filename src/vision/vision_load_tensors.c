/*
 * vision_load_tensors.c - the vision weights table: one row per tensor role
 * and family, naming it in both formats (llama.cpp's mmproj GGUF, a Hugging
 * Face checkpoint), saying when it is required and what shape it must have;
 * and the two passes every loader shares over it: taking the tensors from
 * the file (vis_take_all) and checking their shapes against the
 * config (vis_check_all).
 *
 * As the text model's LAYER_TENSORS (model_load.c), a family's loader only
 * reads its numbers and picks the prefix; which tensors exist and how they
 * are called lives here. Adding a tensor is one row.
 *
 * What it is not for: tensors whose reading is more than a name (Qwen2.5-VL's
 * patch embedding stored as two GGUF kernels, the old converters' swapped
 * ffn_up / ffn_down), shapes that need more than two dimensions (the patch
 * convolution, the position table) or a transposition (Gemma 3's
 * projection): those stay with their loader or with vis_finish.
 */
#define _POSIX_C_SOURCE 200809L
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "util/error.h"
#include "vision/vision_model.h"

/* Families a row belongs to (bits of pdl_vision_family). CLIP (LLaVA 1.5
 * and 1.6) and SigLIP (Gemma 3) towers share their names in both formats. */
enum {
    VF_LLAVA = 1u << PDL_VLM_LLAVA,
    VF_NEXT = 1u << PDL_VLM_LLAVA_NEXT,
    VF_GEMMA3 = 1u << PDL_VLM_GEMMA3,
    VF_QWEN = 1u << PDL_VLM_QWEN25VL,
    VF_CLIP = VF_LLAVA | VF_NEXT,
    VF_TOWER = VF_CLIP | VF_GEMMA3,
};

/* When a row is taken: before the layers, in each layer, after them (the
 * order the loaders always took them in, so the first missing tensor named
 * is the same). */
typedef enum vt_stage { VT_BEFORE_LAYERS, VT_LAYER, VT_AFTER_LAYERS } vt_stage;

/* When a row is required. The config's flags make a tensor required when
 * on and optional (taken when present) when off; the attention layout
 * skips the rows of the other layout altogether. */
typedef enum vt_need {
    VT_ALWAYS,
    VT_IF_PATCH_BIAS,
    VT_IF_CLASS_TOKEN,
    VT_IF_PRE_LN,
    VT_IF_POST_LN,
    VT_IF_QKV_FUSED, /* Qwen2.5-VL: one (3 hidden, hidden) qkv (Hugging Face; some GGUFs) */
    VT_IF_QKV_APART, /* Qwen2.5-VL: q, k and v apart (llama.cpp's converter) */
} vt_need;

/* A dimension of an expected shape, in the config's terms. */
typedef enum vt_dim {
    VD_NONE = 0,  /* no such dimension (a vector's second); as the first: the shape is checked elsewhere */
    VD_HIDDEN,    /* the tower's width */
    VD_3HIDDEN,   /* q, k and v rows together */
    VD_FFN,       /* the tower's MLP width */
    VD_PROJ,      /* proj_hidden: LLaVA's linear_1 width, Qwen2.5-VL's merged 4 hidden */
    VD_TEXT,      /* the text model's hidden size */
} vt_dim;

typedef struct vision_tensor_row {
    unsigned families;     /* VF_* */
    vt_stage stage;
    size_t offset;         /* in pdl_vision_weights, or in pdl_vision_layer for VT_LAYER */
    const char *gguf;      /* the name, after "v.blk.N." in a layer; NULL: not taken from a GGUF here */
    const char *hf;        /* after the checkpoint's prefix ("" or "model."), after the family's layer
                            * prefix in a layer; NULL: not in a Hugging Face checkpoint */
    vt_need need;
    vt_dim rows, cols;     /* the expected (rows, cols) or (rows) shape; rows VD_NONE: checked by code */
    const char *what;      /* the role in a shape error (layers: "vision layer N") */
    const char *gguf_alt;  /* an older converter's name, tried when gguf is absent */
    const char *about;     /* when set, said with a missing tensor's name */
} vision_tensor_row;

#define W(f) offsetof(pdl_vision_weights, f)
#define L(f) offsetof(pdl_vision_layer, f)
/* A row without an older GGUF name or a note on its absence. */
#define ROW(families, stage, offset, gguf, hf, need, rows, cols, what) \
    {families, stage, offset, gguf, hf, need, rows, cols, what, NULL, NULL}
#define CLIP_VM "vision_tower.vision_model."
#define CLIP_MP "multi_modal_projector."

static const vision_tensor_row ROWS[] = {
    /* CLIP / SigLIP embeddings */
    ROW(VF_TOWER, VT_BEFORE_LAYERS, W(patch_w), "v.patch_embd.weight", CLIP_VM "embeddings.patch_embedding.weight",
        VT_ALWAYS, VD_NONE, VD_NONE, "the patch embedding"),
    ROW(VF_TOWER, VT_BEFORE_LAYERS, W(patch_b), "v.patch_embd.bias", CLIP_VM "embeddings.patch_embedding.bias",
        VT_IF_PATCH_BIAS, VD_HIDDEN, VD_NONE, "the patch embedding bias"),
    ROW(VF_TOWER, VT_BEFORE_LAYERS, W(class_embd), "v.class_embd", CLIP_VM "embeddings.class_embedding",
        VT_IF_CLASS_TOKEN, VD_HIDDEN, VD_NONE, "the class embedding"),
    ROW(VF_TOWER, VT_BEFORE_LAYERS, W(pos_embd), "v.position_embd.weight",
        CLIP_VM "embeddings.position_embedding.weight", VT_ALWAYS, VD_NONE, VD_NONE, "the position embedding"),
    ROW(VF_TOWER, VT_BEFORE_LAYERS, W(pre_ln_w), "v.pre_ln.weight", CLIP_VM "pre_layrnorm.weight", VT_IF_PRE_LN,
        VD_HIDDEN, VD_NONE, "pre_layrnorm"),
    ROW(VF_TOWER, VT_BEFORE_LAYERS, W(pre_ln_b), "v.pre_ln.bias", CLIP_VM "pre_layrnorm.bias", VT_IF_PRE_LN, VD_HIDDEN,
        VD_NONE, "pre_layrnorm bias"),
    ROW(VF_TOWER, VT_BEFORE_LAYERS, W(post_ln_w), "v.post_ln.weight", CLIP_VM "post_layernorm.weight", VT_IF_POST_LN,
        VD_HIDDEN, VD_NONE, "post_layernorm"),
    ROW(VF_TOWER, VT_BEFORE_LAYERS, W(post_ln_b), "v.post_ln.bias", CLIP_VM "post_layernorm.bias", VT_IF_POST_LN,
        VD_HIDDEN, VD_NONE, "post_layernorm bias"),
    /* Qwen2.5-VL: the patch Conv3d (a GGUF stores two kernels: vision_load_qwen_gguf.c), then the merger */
    ROW(VF_QWEN, VT_BEFORE_LAYERS, W(patch_w), NULL, "visual.patch_embed.proj.weight", VT_ALWAYS, VD_NONE, VD_NONE,
        "the patch embedding (Conv3d)"),
    ROW(VF_QWEN, VT_BEFORE_LAYERS, W(mm_norm_w), "v.post_ln.weight", "visual.merger.ln_q.weight", VT_ALWAYS, VD_HIDDEN,
        VD_NONE, "the merger's ln_q"),
    ROW(VF_QWEN, VT_BEFORE_LAYERS, W(mm1_w), "mm.0.weight", "visual.merger.mlp.0.weight", VT_ALWAYS, VD_PROJ, VD_PROJ,
        "the merger's mlp.0"),
    ROW(VF_QWEN, VT_BEFORE_LAYERS, W(mm1_b), "mm.0.bias", "visual.merger.mlp.0.bias", VT_ALWAYS, VD_PROJ, VD_NONE,
        "the merger's mlp.0"),
    ROW(VF_QWEN, VT_BEFORE_LAYERS, W(mm2_w), "mm.2.weight", "visual.merger.mlp.2.weight", VT_ALWAYS, VD_TEXT, VD_PROJ,
        "the merger's mlp.2"),
    ROW(VF_QWEN, VT_BEFORE_LAYERS, W(mm2_b), "mm.2.bias", "visual.merger.mlp.2.bias", VT_ALWAYS, VD_TEXT, VD_NONE,
        "the merger's mlp.2"),

    /* CLIP / SigLIP layers (llama.cpp's LLaVA converter swaps ffn_up and ffn_down: vision_load_gguf.c) */
    ROW(VF_TOWER, VT_LAYER, L(ln1_w), "ln1.weight", "layer_norm1.weight", VT_ALWAYS, VD_HIDDEN, VD_NONE, NULL),
    ROW(VF_TOWER, VT_LAYER, L(ln1_b), "ln1.bias", "layer_norm1.bias", VT_ALWAYS, VD_HIDDEN, VD_NONE, NULL),
    ROW(VF_TOWER, VT_LAYER, L(wq), "attn_q.weight", "self_attn.q_proj.weight", VT_ALWAYS, VD_HIDDEN, VD_HIDDEN, NULL),
    ROW(VF_TOWER, VT_LAYER, L(bq), "attn_q.bias", "self_attn.q_proj.bias", VT_ALWAYS, VD_HIDDEN, VD_NONE, NULL),
    ROW(VF_TOWER, VT_LAYER, L(wk), "attn_k.weight", "self_attn.k_proj.weight", VT_ALWAYS, VD_HIDDEN, VD_HIDDEN, NULL),
    ROW(VF_TOWER, VT_LAYER, L(bk), "attn_k.bias", "self_attn.k_proj.bias", VT_ALWAYS, VD_HIDDEN, VD_NONE, NULL),
    ROW(VF_TOWER, VT_LAYER, L(wv), "attn_v.weight", "self_attn.v_proj.weight", VT_ALWAYS, VD_HIDDEN, VD_HIDDEN, NULL),
    ROW(VF_TOWER, VT_LAYER, L(bv), "attn_v.bias", "self_attn.v_proj.bias", VT_ALWAYS, VD_HIDDEN, VD_NONE, NULL),
    ROW(VF_TOWER, VT_LAYER, L(wo), "attn_out.weight", "self_attn.out_proj.weight", VT_ALWAYS, VD_HIDDEN, VD_HIDDEN,
        NULL),
    ROW(VF_TOWER, VT_LAYER, L(bo), "attn_out.bias", "self_attn.out_proj.bias", VT_ALWAYS, VD_HIDDEN, VD_NONE, NULL),
    ROW(VF_TOWER, VT_LAYER, L(ln2_w), "ln2.weight", "layer_norm2.weight", VT_ALWAYS, VD_HIDDEN, VD_NONE, NULL),
    ROW(VF_TOWER, VT_LAYER, L(ln2_b), "ln2.bias", "layer_norm2.bias", VT_ALWAYS, VD_HIDDEN, VD_NONE, NULL),
    ROW(VF_TOWER, VT_LAYER, L(fc1_w), "ffn_up.weight", "mlp.fc1.weight", VT_ALWAYS, VD_FFN, VD_HIDDEN, NULL),
    ROW(VF_TOWER, VT_LAYER, L(fc1_b), "ffn_up.bias", "mlp.fc1.bias", VT_ALWAYS, VD_FFN, VD_NONE, NULL),
    ROW(VF_TOWER, VT_LAYER, L(fc2_w), "ffn_down.weight", "mlp.fc2.weight", VT_ALWAYS, VD_HIDDEN, VD_FFN, NULL),
    ROW(VF_TOWER, VT_LAYER, L(fc2_b), "ffn_down.bias", "mlp.fc2.bias", VT_ALWAYS, VD_HIDDEN, VD_NONE, NULL),

    /* Qwen2.5-VL layers: RMSNorms without bias, a SwiGLU MLP (fc1 the gate, up, fc2 down) */
    ROW(VF_QWEN, VT_LAYER, L(ln1_w), "ln1.weight", "norm1.weight", VT_ALWAYS, VD_HIDDEN, VD_NONE, NULL),
    ROW(VF_QWEN, VT_LAYER, L(ln2_w), "ln2.weight", "norm2.weight", VT_ALWAYS, VD_HIDDEN, VD_NONE, NULL),
    ROW(VF_QWEN, VT_LAYER, L(wq), "attn_qkv.weight", "attn.qkv.weight", VT_IF_QKV_FUSED, VD_3HIDDEN, VD_HIDDEN, NULL),
    ROW(VF_QWEN, VT_LAYER, L(bq), "attn_qkv.bias", "attn.qkv.bias", VT_IF_QKV_FUSED, VD_3HIDDEN, VD_NONE, NULL),
    ROW(VF_QWEN, VT_LAYER, L(wq), "attn_q.weight", NULL, VT_IF_QKV_APART, VD_HIDDEN, VD_HIDDEN, NULL),
    ROW(VF_QWEN, VT_LAYER, L(bq), "attn_q.bias", NULL, VT_IF_QKV_APART, VD_HIDDEN, VD_NONE, NULL),
    ROW(VF_QWEN, VT_LAYER, L(wk), "attn_k.weight", NULL, VT_IF_QKV_APART, VD_HIDDEN, VD_HIDDEN, NULL),
    ROW(VF_QWEN, VT_LAYER, L(bk), "attn_k.bias", NULL, VT_IF_QKV_APART, VD_HIDDEN, VD_NONE, NULL),
    ROW(VF_QWEN, VT_LAYER, L(wv), "attn_v.weight", NULL, VT_IF_QKV_APART, VD_HIDDEN, VD_HIDDEN, NULL),
    ROW(VF_QWEN, VT_LAYER, L(bv), "attn_v.bias", NULL, VT_IF_QKV_APART, VD_HIDDEN, VD_NONE, NULL),
    ROW(VF_QWEN, VT_LAYER, L(wo), "attn_out.weight", "attn.proj.weight", VT_ALWAYS, VD_HIDDEN, VD_HIDDEN, NULL),
    ROW(VF_QWEN, VT_LAYER, L(bo), "attn_out.bias", "attn.proj.bias", VT_ALWAYS, VD_HIDDEN, VD_NONE, NULL),
    ROW(VF_QWEN, VT_LAYER, L(fc1_w), "ffn_gate.weight", "mlp.gate_proj.weight", VT_ALWAYS, VD_FFN, VD_HIDDEN, NULL),
    ROW(VF_QWEN, VT_LAYER, L(fc1_b), "ffn_gate.bias", "mlp.gate_proj.bias", VT_ALWAYS, VD_FFN, VD_NONE, NULL),
    ROW(VF_QWEN, VT_LAYER, L(up_w), "ffn_up.weight", "mlp.up_proj.weight", VT_ALWAYS, VD_FFN, VD_HIDDEN, NULL),
    ROW(VF_QWEN, VT_LAYER, L(up_b), "ffn_up.bias", "mlp.up_proj.bias", VT_ALWAYS, VD_FFN, VD_NONE, NULL),
    ROW(VF_QWEN, VT_LAYER, L(fc2_w), "ffn_down.weight", "mlp.down_proj.weight", VT_ALWAYS, VD_HIDDEN, VD_FFN, NULL),
    ROW(VF_QWEN, VT_LAYER, L(fc2_b), "ffn_down.bias", "mlp.down_proj.bias", VT_ALWAYS, VD_HIDDEN, VD_NONE, NULL),

    /* projectors */
    ROW(VF_GEMMA3, VT_AFTER_LAYERS, W(mm_norm_w), "mm.soft_emb_norm.weight", CLIP_MP "mm_soft_emb_norm.weight",
        VT_ALWAYS, VD_HIDDEN, VD_NONE, "the soft-embedding norm"),
    ROW(VF_GEMMA3, VT_AFTER_LAYERS, W(mm_proj_w), "mm.input_projection.weight", CLIP_MP "mm_input_projection_weight",
        VT_ALWAYS, VD_NONE, VD_NONE, "the input projection"),
    ROW(VF_CLIP, VT_AFTER_LAYERS, W(mm1_w), "mm.0.weight", CLIP_MP "linear_1.weight", VT_ALWAYS, VD_PROJ, VD_HIDDEN,
        "the projector's linear_1"),
    ROW(VF_CLIP, VT_AFTER_LAYERS, W(mm1_b), "mm.0.bias", CLIP_MP "linear_1.bias", VT_ALWAYS, VD_PROJ, VD_NONE,
        "the projector's linear_1 bias"),
    ROW(VF_CLIP, VT_AFTER_LAYERS, W(mm2_w), "mm.2.weight", CLIP_MP "linear_2.weight", VT_ALWAYS, VD_TEXT, VD_PROJ,
        "the projector's linear_2"),
    ROW(VF_CLIP, VT_AFTER_LAYERS, W(mm2_b), "mm.2.bias", CLIP_MP "linear_2.bias", VT_ALWAYS, VD_TEXT, VD_NONE,
        "the projector's linear_2 bias"),
    /* llama.cpp reads v.image_newline; its legacy converter wrote model.image_newline */
    {VF_NEXT, VT_AFTER_LAYERS, W(image_newline), "v.image_newline", "image_newline", VT_ALWAYS, VD_TEXT, VD_NONE,
        "image_newline", "model.image_newline", "LLaVA 1.6's row end"},
};

#undef W
#undef L
#undef ROW

#define N_ROWS (sizeof ROWS / sizeof ROWS[0])

/* The layer prefix of a family's Hugging Face names (after the checkpoint's "" or "model."). */
static const char *hf_layer_prefix(pdl_vision_family f) {
    return f == PDL_VLM_QWEN25VL ? "visual.blocks." : CLIP_VM "encoder.layers.";
}

static bool row_in_family(const vision_tensor_row *r, pdl_vision_family f) { return (r->families >> f) & 1u; }

/* Whether a row is read at all (the other attention layout's rows are not). */
static bool row_applies(const vision_tensor_row *r, bool qkv_apart) {
    if (r->need == VT_IF_QKV_FUSED) return !qkv_apart;
    if (r->need == VT_IF_QKV_APART) return qkv_apart;
    return true;
}

/* Whether a row the family reads is part of the model its config describes. */
static bool row_required(const vision_tensor_row *r, const pdl_vision_config *c) {
    switch (r->need) {
    case VT_ALWAYS: return true;
    case VT_IF_PATCH_BIAS: return c->patch_bias;
    case VT_IF_CLASS_TOKEN: return c->class_token;
    case VT_IF_PRE_LN: return c->pre_ln;
    case VT_IF_POST_LN: return c->post_ln;
    case VT_IF_QKV_FUSED:
    case VT_IF_QKV_APART: return true;
    }
    return true;
}

static pdl_tensor *row_tensor(const vision_tensor_row *r, pdl_vision_weights *w, int layer) {
    char *base = r->stage == VT_LAYER ? (char *)&w->layers[layer] : (char *)w;
    return (pdl_tensor *)(base + r->offset);
}

/* One row of one layer (-1: not a layer) from the file. */
static int take_row(pdl_vision *v, const vision_tensor_row *r, const pdl_tensor_set *ts, bool gguf,
                    const char *hf_prefix, int layer, const char *where, pdl_error *err) {
    const pdl_vision_config *c = &v->cfg;
    pdl_tensor *dst = row_tensor(r, &v->w, layer);
    bool required = row_required(r, c);
    const char *name = gguf ? r->gguf : r->hf;
    char full[PDL_TENSOR_NAME_MAX];
    if (gguf && layer >= 0) snprintf(full, sizeof full, "v.blk.%d.%s", layer, name);
    else if (gguf) snprintf(full, sizeof full, "%s", name);
    else if (layer >= 0) snprintf(full, sizeof full, "%s%s%d.%s", hf_prefix, hf_layer_prefix(c->family), layer, name);
    else snprintf(full, sizeof full, "%s%s", hf_prefix, name);
    bool try_alt = gguf && r->gguf_alt;
    if (model_take_tensor(ts, full, required && !r->about && !try_alt, where, dst, err)) return -1;
    if (!dst->data && try_alt && model_take_tensor(ts, r->gguf_alt, false, where, dst, err)) return -1;
    if (!dst->data && required && (r->about || try_alt))
        return r->about ? err_fail(err, "%s: missing tensor '%s' (%s)", where, full, r->about)
                        : err_fail(err, "%s: missing tensor '%s'", where, full);
    return 0;
}

int vis_take_all(pdl_vision *v, const pdl_tensor_set *ts, bool gguf, const char *hf_prefix, bool qkv_apart,
                 const char *where, pdl_error *err) {
    pdl_vision_config *c = &v->cfg;
    pdl_vision_weights *w = &v->w;
    w->layers = calloc(c->n_layers_run > 0 ? (size_t)c->n_layers_run : 1, sizeof *w->layers);
    if (!w->layers) return err_fail(err, "out of memory");
    for (int stage = VT_BEFORE_LAYERS; stage <= VT_AFTER_LAYERS; stage++) {
        int n_layers = stage == VT_LAYER ? c->n_layers_run : 1;
        for (int l = 0; l < n_layers; l++)
            for (size_t i = 0; i < N_ROWS; i++) {
                const vision_tensor_row *r = &ROWS[i];
                if ((int)r->stage != stage || !row_in_family(r, c->family) || !row_applies(r, qkv_apart) ||
                    !(gguf ? r->gguf : r->hf))
                    continue;
                if (take_row(v, r, ts, gguf, hf_prefix, stage == VT_LAYER ? l : -1, where, err)) return -1;
            }
    }
    return 0;
}

static int64_t dim_value(vt_dim d, const pdl_vision_config *c) {
    switch (d) {
    case VD_NONE: return 0;
    case VD_HIDDEN: return c->hidden;
    case VD_3HIDDEN: return 3 * (int64_t)c->hidden;
    case VD_FFN: return c->ffn;
    case VD_PROJ: return c->proj_hidden;
    case VD_TEXT: return c->text_hidden;
    }
    return 0;
}

int vis_check_all(pdl_vision *v, bool qkv_apart, pdl_error *err) {
    const pdl_vision_config *c = &v->cfg;
    for (int stage = VT_BEFORE_LAYERS; stage <= VT_AFTER_LAYERS; stage++) {
        int n_layers = stage == VT_LAYER ? c->n_layers_run : 1;
        for (int l = 0; l < n_layers; l++) {
            char layer_what[64];
            snprintf(layer_what, sizeof layer_what, "vision layer %d", l);
            for (size_t i = 0; i < N_ROWS; i++) {
                const vision_tensor_row *r = &ROWS[i];
                if ((int)r->stage != stage || !row_in_family(r, c->family) || !row_applies(r, qkv_apart) ||
                    r->rows == VD_NONE || !row_required(r, c))
                    continue;
                pdl_tensor *t = row_tensor(r, &v->w, stage == VT_LAYER ? l : -1);
                const char *what = stage == VT_LAYER ? layer_what : r->what;
                int64_t rows = dim_value(r->rows, c), cols = dim_value(r->cols, c);
                if (r->cols == VD_NONE ? vis_vector(v, t, rows, what, err)
                                       : vis_matrix(v, t, rows, cols, what, err))
                    return -1;
            }
        }
    }
    return 0;
}
