/*
 * vision_load_gguf.c - the vision half from a llama.cpp multimodal
 * projector file (mmproj GGUF, general.architecture "clip"), as llama.cpp's
 * converters write it: clip.projector_type "mlp" (LLaVA 1.5; with
 * clip.vision.image_grid_pinpoints, flattened (height, width) pairs in the
 * order of the Hugging Face config, and v.image_newline or
 * model.image_newline, LLaVA 1.6) or
 * "gemma3"; hyperparameters under clip.vision.*; tensors v.* (tower) and
 * mm.* (projector). "qwen2.5vl_merger" (Qwen2.5-VL) is read by
 * vision_load_qwen_gguf.c.
 *
 * The text model comes from its own GGUF; an mmproj file says nothing
 * about image tokens, so those are looked up by their text in the text
 * model's vocabulary ("<image>", "<start_of_image>", "<image_soft_token>").
 * Conventions of llama.cpp's files honoured here: LLaVA's converter
 * (legacy-models/convert_image_encoder_to_gguf.py) already drops the tower's
 * last layer and writes block_count = layers - 1, so every stored block runs
 * and the result is transformers' hidden_states[-2] (llama.cpp's clip.cpp
 * subtracts one layer again and runs block_count - 1: we follow the
 * published model, not that); clip.vision.feature_layer, when present,
 * says how many blocks to run; that converter names fc1 "ffn_down" and fc2
 * "ffn_up" (told apart here by their shapes); Gemma 3's soft-embedding norm
 * is stored as 1 + w.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "util/error.h"
#include "vision/vision_model.h"

static int f32_triple(const gguf_file *g, const char *key, float *out, pdl_error *err) {
    gguf_array a;
    int rc = gguf_get_arr(g, key, &a, err);
    if (rc < 0) return -1;
    if (rc == 0) return err_fail(err, "%s: missing key '%s'", gguf_path(g), key);
    if (a.count != 3 || (a.elem_type != GGUF_TYPE_FLOAT32 && a.elem_type != GGUF_TYPE_FLOAT64))
        return err_fail(err, "%s: key '%s' must be an array of 3 floats", gguf_path(g), key);
    for (int i = 0; i < 3; i++) out[i] = (float)gguf_arr_f64(&a, (uint64_t)i);
    return 0;
}

int vis_load_gguf(pdl_vision *v, const char *path, const pdl_model *text, pdl_error *err) {
    pdl_vision_config *c = &v->cfg;
    snprintf(v->source, sizeof v->source, "gguf");
    if (gguf_open(&v->gguf, path, err)) return -1;
    const gguf_file *g = v->gguf;
    const char *arch = NULL, *proj = NULL;
    if (gguf_get_str(g, "general.architecture", &arch, err) < 0) return -1;
    if (!arch || strcmp(arch, "clip") != 0)
        return err_fail(err, "%s: general.architecture is '%s', expected 'clip' (a multimodal projector: --mmproj "
                        "takes llama.cpp's mmproj GGUF)", path, arch ? arch : "(none)");
    bool has_vision = false;
    if (gguf_get_bool(g, "clip.has_vision_encoder", &has_vision, err) < 0) return -1;
    if (!has_vision) return err_fail(err, "%s: clip.has_vision_encoder is not true: no vision encoder in this file", path);
    if (gguf_get_str(g, "clip.vision.projector_type", &proj, err) < 0) return -1;
    if (!proj && gguf_get_str(g, "clip.projector_type", &proj, err) < 0) return -1;
    if (!proj) return err_fail(err, "%s: missing key 'clip.projector_type'", path);
    if (strcmp(proj, "qwen2.5vl_merger") == 0) return vis_load_qwen_gguf(v, path, text, err);
    gguf_array pins = {0};
    int has_pins = gguf_get_arr(g, "clip.vision.image_grid_pinpoints", &pins, err);
    if (has_pins < 0) return -1;
    if (strcmp(proj, "mlp") == 0) c->family = has_pins ? PDL_VLM_LLAVA_NEXT : PDL_VLM_LLAVA;
    else if (strcmp(proj, "gemma3") == 0) c->family = PDL_VLM_GEMMA3;
    else return err_fail(err, "%s: projector type '%s' is not supported (supported: mlp (LLaVA), gemma3, qwen2.5vl_merger "
                             "(Qwen2.5-VL))", path, proj);
    bool gemma = c->family == PDL_VLM_GEMMA3;

    if (vis_gguf_u32(g, true, "clip.vision.embedding_length", &c->hidden, err) ||
        vis_gguf_u32(g, true, "clip.vision.feed_forward_length", &c->ffn, err) ||
        vis_gguf_u32(g, true, "clip.vision.block_count", &c->n_layers, err) ||
        vis_gguf_u32(g, true, "clip.vision.attention.head_count", &c->n_heads, err) ||
        vis_gguf_u32(g, true, "clip.vision.image_size", &c->image_size, err) ||
        vis_gguf_u32(g, true, "clip.vision.patch_size", &c->patch_size, err))
        return -1;
    int rc = gguf_get_f32(g, "clip.vision.attention.layer_norm_epsilon", &c->ln_eps, err);
    if (rc < 0) return -1;
    if (rc == 0) return err_fail(err, "%s: missing key 'clip.vision.attention.layer_norm_epsilon'", path);
    c->channels = 3;
    bool use_gelu = false, use_silu = false;
    if (gguf_get_bool(g, "clip.use_gelu", &use_gelu, err) < 0 || gguf_get_bool(g, "clip.use_silu", &use_silu, err) < 0)
        return -1;
    if (use_silu) return err_fail(err, "%s: clip.use_silu: a SiLU vision MLP is not supported", path);
    c->act = use_gelu ? PDL_VACT_GELU_TANH : PDL_VACT_QUICK_GELU;
    c->proj_act = PDL_VACT_GELU_ERF;
    pdl_model_info ti;
    pdl_model_get_info(text, &ti);
    c->text_hidden = ti.hidden;
    c->boi_id = c->eoi_id = -1;

    pdl_image_proc *p = &c->proc;
    if (f32_triple(g, "clip.vision.image_mean", p->mean, err) || f32_triple(g, "clip.vision.image_std", p->std, err))
        return -1;
    p->rescale = 1.0 / 255.0;
    p->crop_w = p->crop_h = c->image_size;
    if (gemma) {
        p->shortest_edge = false, p->resample = PDL_RESAMPLE_BILINEAR;
        c->class_token = false, c->pre_ln = false, c->post_ln = true, c->patch_bias = true;
        c->n_layers_run = c->n_layers;
        int k = 4;
        uint32_t sf;
        rc = gguf_get_u32(g, "clip.vision.projector.scale_factor", &sf, err);
        if (rc < 0) return -1;
        if (rc) k = (int)sf;
        int side = c->image_size / c->patch_size;
        if (k <= 0 || side % k) return err_fail(err, "%s: projector scale factor %d does not divide %d patches", path, k, side);
        c->mm_tokens = (side / k) * (side / k);
        c->mm_norm_eps = c->ln_eps;
        c->bidirectional = true;
        snprintf(c->placeholder, sizeof c->placeholder, "<start_of_image>");
        snprintf(c->image_token_text, sizeof c->image_token_text, "<image_soft_token>");
        c->boi_id = vis_token_id(text, "<start_of_image>");
        c->eoi_id = vis_token_id(text, "<end_of_image>");
    } else {
        p->shortest_edge = true, p->size = c->image_size, p->resample = PDL_RESAMPLE_BICUBIC;
        /* LLaVA 1.5 was trained on images padded to a square with the mean
         * colour (image_aspect_ratio "pad"), and llama.cpp pads them: so
         * does this route, as transformers' do_pad then the processor's
         * resize (1.6 tiles instead) */
        p->pad_square = c->family == PDL_VLM_LLAVA;
        img_pad_color_of_mean(p->mean, p->pad_color);
        c->class_token = true, c->pre_ln = true, c->patch_bias = false;
        c->post_ln = false; /* hidden_states[-2] is taken before the post-norm */
        c->n_layers_run = c->n_layers;
        gguf_array fl;
        rc = gguf_get_arr(g, "clip.vision.feature_layer", &fl, err);
        if (rc < 0) return -1;
        if (rc) {
            if (fl.count != 1)
                return err_fail(err, "%s: clip.vision.feature_layer lists %llu layers; one is supported", path,
                                (unsigned long long)fl.count);
            c->n_layers_run = (int)gguf_arr_i64(&fl, 0);
        }
        snprintf(c->placeholder, sizeof c->placeholder, "<image>");
        snprintf(c->image_token_text, sizeof c->image_token_text, "<image>");
        if (c->family == PDL_VLM_LLAVA_NEXT) {
            /* LLaVA 1.6 as modeling_llava_next.py packs it: unpadded, a newline per row */
            const char *merge = NULL;
            if (gguf_get_str(g, "clip.vision.mm_patch_merge_type", &merge, err) < 0) return -1;
            if (merge && strcmp(merge, "spatial_unpad") != 0)
                return err_fail(err, "%s: clip.vision.mm_patch_merge_type '%s' is not supported (spatial_unpad)", path,
                                merge);
            if (pins.count % 2 || pins.count / 2 > PDL_MAX_PINPOINTS)
                return err_fail(err, "%s: clip.vision.image_grid_pinpoints must hold (height, width) pairs, at most %d",
                                path, PDL_MAX_PINPOINTS);
            p->n_pinpoints = (int)(pins.count / 2);
            for (int i = 0; i < p->n_pinpoints; i++) {
                p->pinpoints[i][0] = (int)gguf_arr_i64(&pins, (uint64_t)(2 * i));
                p->pinpoints[i][1] = (int)gguf_arr_i64(&pins, (uint64_t)(2 * i + 1));
            }
        }
    }
    c->image_token_id = vis_token_id(text, c->image_token_text);
    if (c->n_layers_run <= 0 || c->n_layers_run > c->n_layers)
        return err_fail(err, "%s: the feature layer selects %d of %d layers", path, c->n_layers_run, c->n_layers);

    const pdl_tensor_set *ts = gguf_tensors(g);
    pdl_vision_weights *w = &v->w;
    if (vis_take_all(v, ts, true, NULL, false, path, err)) return -1;
    for (int l = 0; l < c->n_layers_run; l++) {
        pdl_vision_layer *L = &w->layers[l];
        /* old converters: "ffn_down" holds fc1 (ffn, hidden) and "ffn_up" fc2 */
        if (L->fc2_w.n_dims == 2 && L->fc2_w.shape[0] == c->ffn && L->fc2_w.shape[1] == c->hidden &&
            c->ffn != c->hidden) {
            pdl_tensor t = L->fc1_w;
            L->fc1_w = L->fc2_w, L->fc2_w = t;
            t = L->fc1_b, L->fc1_b = L->fc2_b, L->fc2_b = t;
        }
    }
    if (!gemma && w->mm1_w.n_dims == 2) c->proj_hidden = (int)w->mm1_w.shape[0];
    return 0;
}
