/*
 * vision_load_qwen_gguf.c - Qwen2.5-VL's vision half from llama.cpp's mmproj
 * GGUF (clip.projector_type "qwen2.5vl_merger"), into the structures the
 * Hugging Face loader (vision_load_qwen.c) fills, so qwen_vision.c runs
 * either unchanged.
 *
 * What llama.cpp's converter (Qwen2VLVisionModel) writes, and how it maps:
 *   clip.vision.embedding_length / feed_forward_length / block_count /
 *   attention.head_count / patch_size / attention.layer_norm_epsilon
 *   clip.vision.n_wa_pattern p: layers l with (l + 1) % p == 0 attend over
 *     the whole image (fullatt_block_indexes must be evenly spaced for the
 *     converter to write it); required, as by llama.cpp
 *   clip.vision.window_size (pixels), clip.vision.spatial_merge_size,
 *   clip.vision.image_min_pixels / image_max_pixels: read when present;
 *     the converter writes none of them and llama.cpp then uses 112 px and
 *     merge 2 (every published Qwen2.5-VL), as we do; the pixel budget
 *     defaults to the published preprocessor_config.json's [3136, 12845056]
 *   clip.vision.image_mean / image_std
 *   v.patch_embd.weight, v.patch_embd.weight.1 (hidden, 3, patch, patch):
 *     the Conv3d's two temporal slices, put back together here as
 *     (hidden, 3, 2, patch, patch)
 *   v.blk.L.ln1 / ln2 (RMSNorm weights), attn_q / attn_k / attn_v (the
 *     fused qkv split by the converter; a fused attn_qkv is taken too),
 *     attn_out, ffn_gate / ffn_up / ffn_down, all with biases
 *   v.post_ln.weight: the merger's ln_q; mm.0 / mm.2: the merger's MLP
 * Resampling is bicubic, as Qwen2VLImageProcessor does (llama.cpp
 * resizes bilinearly): the published model's processor, not llama.cpp's.
 * Image tokens are found by their text in the text model's vocabulary.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "util/error.h"
#include "vision/vision_model.h"

/* The two Conv2d kernels (hidden, 3, p, p) as one Conv3d (hidden, 3, 2, p, p):
 * each (row, channel)'s p * p slice of frame 0, then of frame 1. */
static int join_patch_kernels(pdl_vision *v, const pdl_tensor *k0, const pdl_tensor *k1, int hidden, int patch,
                              pdl_error *err) {
    int64_t want[4] = {hidden, 3, patch, patch};
    const pdl_tensor *k[2] = {k0, k1};
    for (int f = 0; f < 2; f++) {
        bool ok = k[f]->n_dims == 4;
        for (int i = 0; ok && i < 4; i++) ok = k[f]->shape[i] == want[i];
        if (!ok)
            return err_fail(err, "%s: tensor '%s' (temporal frame %d of the patch embedding) must have shape [%d, 3, "
                            "%d, %d]", k[f]->file, k[f]->name, f, hidden, patch, patch);
        if (k[f]->dtype != PDL_DTYPE_F32 && k[f]->dtype != PDL_DTYPE_F16 && k[f]->dtype != PDL_DTYPE_BF16)
            return err_fail(err, "%s: tensor '%s' is %s; the patch embedding must be F32, F16 or BF16", k[f]->file,
                            k[f]->name, dtype_name(k[f]->dtype));
    }
    if (k0->dtype != k1->dtype)
        return err_fail(err, "%s: tensors '%s' (%s) and '%s' (%s) differ in type", k0->file, k0->name,
                        dtype_name(k0->dtype), k1->name, dtype_name(k1->dtype));
    size_t el = k0->dtype == PDL_DTYPE_F32 ? 4 : 2, slice = (size_t)patch * patch * el;
    char *buf = malloc(2 * k0->nbytes);
    if (!buf || vis_own(v, buf)) return err_fail(err, "out of memory joining the patch embedding");
    for (size_t rc = 0; rc < (size_t)hidden * 3; rc++)
        for (int f = 0; f < 2; f++) memcpy(buf + (2 * rc + (size_t)f) * slice, (const char *)k[f]->data + rc * slice, slice);
    pdl_tensor *w = &v->w.patch_w;
    *w = *k0;
    w->data = buf, w->nbytes = 2 * k0->nbytes, w->n_dims = 5;
    int64_t shape[5] = {hidden, 3, 2, patch, patch};
    memcpy(w->shape, shape, sizeof shape);
    return 0;
}

int vis_load_qwen_gguf(pdl_vision *v, const char *path, const pdl_model *text, pdl_error *err) {
    const gguf_file *g = v->gguf;
    pdl_vision_config *c = &v->cfg;
    pdl_image_proc *p = &c->proc;
    c->family = PDL_VLM_QWEN25VL;
    c->channels = 3;
    p->merge = 2, p->temporal = 2;
    int window_px = 112, wa_pattern = 0;
    const char *keys[] = {"clip.vision.embedding_length", "clip.vision.feed_forward_length", "clip.vision.block_count",
                          "clip.vision.attention.head_count", "clip.vision.patch_size", "clip.vision.n_wa_pattern"};
    int *outs[] = {&c->hidden, &c->ffn, &c->n_layers, &c->n_heads, &p->patch, &wa_pattern};
    for (int i = 0; i < 6; i++) {
        uint32_t val;
        int rc = gguf_get_u32(g, keys[i], &val, err);
        if (rc < 0) return -1;
        if (rc == 0)
            return err_fail(err, "%s: missing key '%s'%s", path, keys[i],
                            i == 5 ? " (Qwen2.5-VL's window attention: every n-th layer attends over the whole image)"
                                   : "");
        if (val > (1u << 30)) return err_fail(err, "%s: key '%s' = %u is out of range", path, keys[i], val);
        *outs[i] = (int)val;
    }
    c->patch_size = p->patch;
    c->n_layers_run = c->n_layers;
    if (wa_pattern <= 0 || wa_pattern > c->n_layers)
        return err_fail(err, "%s: clip.vision.n_wa_pattern = %d must be between 1 and the %d layers (every n-th layer "
                        "attends over the whole image)", path, wa_pattern, c->n_layers);
    if (c->n_layers > 128) return err_fail(err, "%s: clip.vision.block_count = %d is over 128", path, c->n_layers);
    for (int l = 0; l < c->n_layers; l++)
        if ((l + 1) % wa_pattern == 0) c->full_attn[l / 64] |= 1ull << (l % 64);
    long min_px = 3136, max_px = 12845056;
    int min_i = -1, max_i = -1;
    if (vis_gguf_u32(g, false, "clip.vision.window_size", &window_px, err) ||
        vis_gguf_u32(g, false, "clip.vision.spatial_merge_size", &p->merge, err) ||
        vis_gguf_u32(g, false, "clip.vision.image_min_pixels", &min_i, err) ||
        vis_gguf_u32(g, false, "clip.vision.image_max_pixels", &max_i, err))
        return -1;
    if (min_i >= 0) min_px = min_i;
    if (max_i >= 0) max_px = max_i;
    if (p->patch <= 0 || p->merge <= 0 || window_px <= 0 || window_px % (p->patch * p->merge) != 0)
        return err_fail(err, "%s: clip.vision.window_size %d px is not a positive multiple of patch_size * "
                        "spatial_merge_size (%d * %d)", path, window_px, p->patch, p->merge);
    c->window_cells = window_px / (p->patch * p->merge);
    p->min_pixels = min_px, p->max_pixels = max_px;
    int rc = gguf_get_f32(g, "clip.vision.attention.layer_norm_epsilon", &c->ln_eps, err);
    if (rc < 0) return -1;
    if (rc == 0) c->ln_eps = 1e-6f;
    c->rope_theta = 10000.0f;
    c->act = PDL_VACT_SILU, c->proj_act = PDL_VACT_GELU_ERF;
    p->resample = PDL_RESAMPLE_BICUBIC;
    p->rescale = 1.0 / 255.0;
    gguf_array a;
    const char *ms[2] = {"clip.vision.image_mean", "clip.vision.image_std"};
    float *dst[2] = {p->mean, p->std};
    for (int k = 0; k < 2; k++) {
        rc = gguf_get_arr(g, ms[k], &a, err);
        if (rc < 0) return -1;
        if (rc == 0) return err_fail(err, "%s: missing key '%s'", path, ms[k]);
        if (a.count != 3 || (a.elem_type != GGUF_TYPE_FLOAT32 && a.elem_type != GGUF_TYPE_FLOAT64))
            return err_fail(err, "%s: key '%s' must be an array of 3 floats", path, ms[k]);
        for (int i = 0; i < 3; i++) dst[k][i] = (float)gguf_arr_f64(&a, (uint64_t)i);
    }
    pdl_model_info ti;
    pdl_model_get_info(text, &ti);
    c->text_hidden = ti.hidden;
    int proj_dim = ti.hidden;
    if (vis_gguf_u32(g, false, "clip.vision.projection_dim", &proj_dim, err)) return -1;
    if (proj_dim != ti.hidden)
        return err_fail(err, "%s: clip.vision.projection_dim %d differs from the text model's hidden size %d", path,
                        proj_dim, ti.hidden);
    c->proj_hidden = c->hidden * p->merge * p->merge;
    /* the prompt: <|vision_start|> <|image_pad|> x rows <|vision_end|> */
    snprintf(c->image_token_text, sizeof c->image_token_text, "<|image_pad|>");
    snprintf(c->placeholder, sizeof c->placeholder, "<|vision_start|><|image_pad|><|vision_end|>");
    c->image_token_id = vis_token_id(text, "<|image_pad|>");
    c->boi_id = vis_token_id(text, "<|vision_start|>");
    c->eoi_id = vis_token_id(text, "<|vision_end|>");

    const pdl_tensor_set *ts = gguf_tensors(g);
    pdl_vision_weights *w = &v->w;
    pdl_tensor k0 = {0}, k1 = {0};
    if (vis_take(ts, path, true, &k0, err, "v.patch_embd.weight") ||
        vis_take(ts, path, false, &k1, err, "v.patch_embd.weight.1"))
        return -1;
    if (!k1.data)
        return err_fail(err, "%s: missing tensor 'v.patch_embd.weight.1' (the Conv3d's second temporal frame; "
                        "Qwen2.5-VL's patch embedding is stored as two kernels)", path);
    if (join_patch_kernels(v, &k0, &k1, c->hidden, p->patch, err)) return -1;
    bool fused = tensor_set_find(ts, "v.blk.0.attn_qkv.weight") != NULL;
    if (vis_take_all(v, ts, true, NULL, !fused, path, err)) return -1;
    for (int l = 0; l < c->n_layers; l++) {
        pdl_vision_layer *L = &w->layers[l];
        /* old files name up "ffn_down" and down "ffn_up" (llama.cpp swaps them back by shape) */
        if (L->fc2_w.n_dims == 2 && L->fc2_w.shape[0] == c->ffn && L->fc2_w.shape[1] == c->hidden &&
            c->ffn != c->hidden) {
            pdl_tensor t = L->up_w;
            L->up_w = L->fc2_w, L->fc2_w = t;
            t = L->up_b, L->up_b = L->fc2_b, L->fc2_b = t;
        }
    }
    return 0;
}
