/*
 * vision_load_hf.c - the vision half of a Hugging Face vision-language
 * folder: config.json's vision_config and top-level fields
 * (LlavaForConditionalGeneration, LlavaNextForConditionalGeneration,
 * Gemma3ForConditionalGeneration), preprocessor_config.json for the image
 * processor (defaults per family when absent), and the vision_tower.* and
 * multi_modal_projector.* tensors, under either prefix transformers uses
 * (published checkpoints: "vision_tower.", newer saves: "model.vision_tower.").
 */
#define _POSIX_C_SOURCE 200809L
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "kernels/cpu_ops.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"
#include "util/json_file.h"
#include "vision/vision_model.h"

static int jint(json_t *o, const char *path, const char *key, int *out, bool required, pdl_error *err) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return required ? err_fail(err, "%s: missing field '%s'", path, key) : 0;
    if (!json_is_integer(v) || json_integer_value(v) < -(1 << 30) || json_integer_value(v) > (1 << 30))
        return err_fail(err, "%s: field '%s' must be an integer", path, key);
    *out = (int)json_integer_value(v);
    return 0;
}

static int jfloat(json_t *o, const char *path, const char *key, float *out, pdl_error *err) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_number(v)) return err_fail(err, "%s: field '%s' must be a number", path, key);
    *out = (float)json_number_value(v);
    return 0;
}

static int jfloat3(json_t *o, const char *path, const char *key, float *out, pdl_error *err) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (json_is_number(v)) {
        for (int i = 0; i < 3; i++) out[i] = (float)json_number_value(v);
        return 0;
    }
    if (!json_is_array(v) || json_array_size(v) != 3) return err_fail(err, "%s: field '%s' must be 3 numbers", path, key);
    for (int i = 0; i < 3; i++) {
        json_t *e = json_array_get(v, (size_t)i);
        if (!json_is_number(e)) return err_fail(err, "%s: field '%s[%d]' must be a number", path, key, i);
        out[i] = (float)json_number_value(e);
    }
    return 0;
}

static int act_of(json_t *o, const char *path, const char *key, const char *dflt, pdl_vision_act *out, pdl_error *err) {
    json_t *v = json_object_get(o, key);
    const char *s = json_is_string(v) ? json_string_value(v) : dflt;
    if (v && !json_is_null(v) && !json_is_string(v)) return err_fail(err, "%s: field '%s' must be a string", path, key);
    if (strcmp(s, "quick_gelu") == 0) *out = PDL_VACT_QUICK_GELU;
    else if (strcmp(s, "gelu_pytorch_tanh") == 0 || strcmp(s, "gelu_new") == 0) *out = PDL_VACT_GELU_TANH;
    else if (strcmp(s, "gelu") == 0) *out = PDL_VACT_GELU_ERF;
    else return err_fail(err, "%s: %s '%s' is not supported (quick_gelu, gelu, gelu_pytorch_tanh)", path, key, s);
    return 0;
}

/* The image processor: preprocessor_config.json over the family's defaults. */
static int read_processor(pdl_vision *v, const char *dir, pdl_error *err) {
    pdl_vision_config *c = &v->cfg;
    pdl_image_proc *p = &c->proc;
    static const float clip_mean[3] = {0.48145466f, 0.4578275f, 0.40821073f};
    static const float clip_std[3] = {0.26862954f, 0.26130258f, 0.27577711f};
    p->rescale = 1.0 / 255.0;
    p->crop_w = p->crop_h = c->image_size;
    if (c->family == PDL_VLM_GEMMA3) {
        p->shortest_edge = false;
        p->resample = PDL_RESAMPLE_BILINEAR;
        for (int i = 0; i < 3; i++) p->mean[i] = 0.5f, p->std[i] = 0.5f;
    } else {
        p->shortest_edge = true;
        p->size = c->image_size;
        p->resample = PDL_RESAMPLE_BICUBIC;
        memcpy(p->mean, clip_mean, sizeof clip_mean);
        memcpy(p->std, clip_std, sizeof clip_std);
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/preprocessor_config.json", dir);
    struct stat st;
    if (stat(path, &st) != 0) return 0;
    json_t *j = NULL;
    if (json_file_load(path, 0, &j, err)) return -1;
    int rc = -1;
    if (!json_is_object(j)) {
        err_fail(err, "%s: top level is not a JSON object", path);
        goto done;
    }
    json_t *size = json_object_get(j, "size"), *crop = json_object_get(j, "crop_size");
    if (json_is_object(size)) {
        if (json_object_get(size, "shortest_edge")) {
            p->shortest_edge = true;
            if (jint(size, path, "shortest_edge", &p->size, true, err)) goto done;
        } else {
            p->shortest_edge = false;
            if (jint(size, path, "height", &p->crop_h, true, err) || jint(size, path, "width", &p->crop_w, true, err))
                goto done;
        }
    } else if (size && !json_is_null(size)) {
        err_fail(err, "%s: field 'size' must be an object", path);
        goto done;
    }
    /* Gemma3ImageProcessor's pan and scan (extra crops of a wide image, each
     * its own image sequence in the prompt) is not implemented: refused
     * rather than silently left out */
    if (json_is_true(json_object_get(j, "do_pan_and_scan"))) {
        err_fail(err, "%s: do_pan_and_scan = true is not supported (Gemma 3's pan-and-scan crops)", path);
        goto done;
    }
    /* LLaVA 1.5's pad to a square, where the processor asks for it:
     * LlavaImageProcessor's do_pad, or the original LLaVA's
     * image_aspect_ratio "pad" (CLIPImageProcessor crops). Other families'
     * do_pad means something else (LLaVA 1.6's tiles batch). */
    json_t *do_pad = json_object_get(j, "do_pad"), *aspect = json_object_get(j, "image_aspect_ratio");
    if (do_pad && !json_is_boolean(do_pad) && !json_is_null(do_pad)) {
        err_fail(err, "%s: field 'do_pad' must be true or false", path);
        goto done;
    }
    if (aspect && !json_is_string(aspect) && !json_is_null(aspect)) {
        err_fail(err, "%s: field 'image_aspect_ratio' must be a string", path);
        goto done;
    }
    bool aspect_pad = json_is_string(aspect) && strcmp(json_string_value(aspect), "pad") == 0;
    p->pad_square = c->family == PDL_VLM_LLAVA && (json_is_true(do_pad) || aspect_pad);
    json_t *dcc = json_object_get(j, "do_center_crop");
    bool center_crop = p->shortest_edge && !(dcc && json_is_false(dcc));
    if (p->shortest_edge && !center_crop && p->pad_square) {
        /* a square resized by its shortest edge is size x size: the tile */
        p->crop_w = p->crop_h = p->size;
    } else if (p->shortest_edge && !center_crop) {
        err_fail(err, "%s: a shortest-edge resize without center crop gives tiles of varying size (not supported)",
                 path);
        goto done;
    }
    if (center_crop && json_is_object(crop) &&
        (jint(crop, path, "height", &p->crop_h, true, err) || jint(crop, path, "width", &p->crop_w, true, err)))
        goto done;
    int resample = (int)p->resample;
    if (jint(j, path, "resample", &resample, false, err)) goto done;
    if (resample != PDL_RESAMPLE_BILINEAR && resample != PDL_RESAMPLE_BICUBIC) {
        err_fail(err, "%s: resample %d is not supported (2 bilinear, 3 bicubic)", path, resample);
        goto done;
    }
    p->resample = (pdl_resample)resample;
    float rescale = (float)p->rescale;
    if (jfloat(j, path, "rescale_factor", &rescale, err) || jfloat3(j, path, "image_mean", p->mean, err) ||
        jfloat3(j, path, "image_std", p->std, err))
        goto done;
    /* keep 1/255 exact unless the file says something else */
    if (rescale != (float)(1.0 / 255.0)) p->rescale = rescale;
    img_pad_color_of_mean(p->mean, p->pad_color); /* the file's own image_mean, as LlavaImageProcessor takes it */
    json_t *pins = json_object_get(j, "image_grid_pinpoints");
    if (c->family == PDL_VLM_LLAVA_NEXT && json_is_array(pins)) {
        size_t i;
        json_t *e;
        p->n_pinpoints = 0;
        json_array_foreach(pins, i, e) {
            if (i >= PDL_MAX_PINPOINTS || !json_is_array(e) || json_array_size(e) != 2 ||
                !json_is_integer(json_array_get(e, 0)) || !json_is_integer(json_array_get(e, 1))) {
                err_fail(err, "%s: image_grid_pinpoints[%zu] must be [height, width] (at most %d entries)", path, i,
                         PDL_MAX_PINPOINTS);
                goto done;
            }
            p->pinpoints[i][0] = (int)json_integer_value(json_array_get(e, 0));
            p->pinpoints[i][1] = (int)json_integer_value(json_array_get(e, 1));
            p->n_pinpoints = (int)i + 1;
        }
    }
    rc = 0;
done:
    json_decref(j);
    return rc;
}

static const char *tensor_prefix(const pdl_tensor_set *ts) {
    if (tensor_set_find(ts, "model.vision_tower.vision_model.encoder.layers.0.layer_norm1.weight"))
        return "model.";
    return "";
}

int vis_load_hf(pdl_vision *v, const char *dir, const pdl_model *text, pdl_error *err) {
    pdl_vision_config *c = &v->cfg;
    snprintf(v->source, sizeof v->source, "safetensors");
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    json_t *cfg = NULL;
    if (json_file_load(path, JSON_REJECT_DUPLICATES, &cfg, err)) return -1;
    int rc = -1;
    json_t *mt = json_object_get(cfg, "model_type"), *vc = json_object_get(cfg, "vision_config");
    const char *type = json_is_string(mt) ? json_string_value(mt) : "";
    if (strcmp(type, "llava") == 0) c->family = PDL_VLM_LLAVA;
    else if (strcmp(type, "llava_next") == 0) c->family = PDL_VLM_LLAVA_NEXT;
    else if (strcmp(type, "gemma3") == 0) c->family = PDL_VLM_GEMMA3;
    else if (strcmp(type, "qwen2_5_vl") == 0) {
        rc = vis_load_qwen_hf(v, cfg, path, dir, text, err);
        goto done;
    } else {
        err_fail(err, "%s: model_type '%s' has no vision model here (supported: llava, llava_next, gemma3, qwen2_5_vl)",
                 path, type);
        goto done;
    }
    if (!json_is_object(vc)) {
        err_fail(err, "%s: model_type '%s' needs a 'vision_config' object", path, type);
        goto done;
    }
    bool gemma = c->family == PDL_VLM_GEMMA3;
    /* CLIPVisionConfig / SiglipVisionConfig defaults */
    c->hidden = 768, c->ffn = 3072, c->n_layers = 12, c->n_heads = 12, c->image_size = gemma ? 224 : 224;
    c->patch_size = gemma ? 16 : 32, c->ln_eps = gemma ? 1e-6f : 1e-5f, c->channels = 3;
    if (jint(vc, path, "hidden_size", &c->hidden, false, err) ||
        jint(vc, path, "intermediate_size", &c->ffn, false, err) ||
        jint(vc, path, "num_hidden_layers", &c->n_layers, false, err) ||
        jint(vc, path, "num_attention_heads", &c->n_heads, false, err) ||
        jint(vc, path, "image_size", &c->image_size, false, err) ||
        jint(vc, path, "patch_size", &c->patch_size, false, err) ||
        jint(vc, path, "num_channels", &c->channels, false, err) ||
        jfloat(vc, path, "layer_norm_eps", &c->ln_eps, err) ||
        act_of(vc, path, "hidden_act", gemma ? "gelu_pytorch_tanh" : "quick_gelu", &c->act, err))
        goto done;
    pdl_model_info ti;
    pdl_model_get_info(text, &ti);
    c->text_hidden = ti.hidden;
    c->boi_id = c->eoi_id = -1;
    if (gemma) {
        c->class_token = false, c->pre_ln = false, c->post_ln = true, c->patch_bias = true;
        c->n_layers_run = c->n_layers;
        c->mm_tokens = 256;
        c->mm_norm_eps = c->ln_eps;
        c->bidirectional = true;
        c->image_token_id = 262144, c->boi_id = 255999, c->eoi_id = 256000;
        if (jint(cfg, path, "mm_tokens_per_image", &c->mm_tokens, false, err) ||
            jint(cfg, path, "image_token_index", &c->image_token_id, false, err) ||
            jint(cfg, path, "boi_token_index", &c->boi_id, false, err) ||
            jint(cfg, path, "eoi_token_index", &c->eoi_id, false, err))
            goto done;
        vis_token_text(text, c->boi_id, c->placeholder, sizeof c->placeholder);
        if (!c->placeholder[0]) snprintf(c->placeholder, sizeof c->placeholder, "<start_of_image>");
    } else {
        c->class_token = true, c->pre_ln = true, c->post_ln = false, c->patch_bias = false;
        int layer = -2;
        c->image_token_id = 32000;
        if (jint(cfg, path, "vision_feature_layer", &layer, false, err) ||
            jint(cfg, path, "image_token_index", &c->image_token_id, false, err) ||
            act_of(cfg, path, "projector_hidden_act", "gelu", &c->proj_act, err))
            goto done;
        json_t *sel = json_object_get(cfg, "vision_feature_select_strategy");
        if (sel && !(json_is_string(sel) && strcmp(json_string_value(sel), "default") == 0)) {
            err_fail(err, "%s: vision_feature_select_strategy must be \"default\" (the class token dropped)", path);
            goto done;
        }
        json_t *bias = json_object_get(cfg, "multimodal_projector_bias");
        if (bias && json_is_false(bias)) {
            err_fail(err, "%s: a projector without bias (multimodal_projector_bias false) is not supported", path);
            goto done;
        }
        /* hidden_states[layer]: 0 is the embeddings, -1 the last layer */
        c->n_layers_run = layer < 0 ? c->n_layers + 1 + layer : layer;
        snprintf(c->placeholder, sizeof c->placeholder, "<image>");
    }
    vis_token_text(text, c->image_token_id, c->image_token_text, sizeof c->image_token_text);
    if (read_processor(v, dir, err)) goto done;
    if (c->family == PDL_VLM_LLAVA_NEXT && c->proc.n_pinpoints == 0) {
        json_t *pins = json_object_get(cfg, "image_grid_pinpoints");
        size_t i;
        json_t *e;
        json_array_foreach(pins, i, e) {
            if (i >= PDL_MAX_PINPOINTS || json_array_size(e) != 2) break;
            c->proc.pinpoints[i][0] = (int)json_integer_value(json_array_get(e, 0));
            c->proc.pinpoints[i][1] = (int)json_integer_value(json_array_get(e, 1));
            c->proc.n_pinpoints = (int)i + 1;
        }
    }

    if (st_open_dir(&v->st, dir, err)) goto done;
    const pdl_tensor_set *ts = st_tensors(v->st);
    const char *pre = tensor_prefix(ts);
    pdl_vision_weights *w = &v->w;
    if (c->n_layers_run <= 0 || c->n_layers_run > c->n_layers) {
        err_fail(err, "%s: vision_feature_layer selects %d of %d layers", path, c->n_layers_run, c->n_layers);
        goto done;
    }
    if (vis_take_all(v, ts, false, pre, false, dir, err)) goto done;
    if (!gemma && w->mm1_w.n_dims == 2) c->proj_hidden = (int)w->mm1_w.shape[0];
    rc = 0;
    if (gemma) {
        /* Gemma3RMSNorm applies (1 + w): fold the 1 in (an owned F32 copy) */
        pdl_tensor *t = &w->mm_norm_w;
        int64_t n = tensor_nelems(t);
        float *buf = malloc((size_t)n * sizeof *buf);
        void *tmp = malloc(t->nbytes ? t->nbytes : 1);
        if (!buf || !tmp || vis_own(v, buf)) {
            free(tmp);
            rc = err_fail(err, "out of memory");
        } else {
            memcpy(tmp, t->data, t->nbytes);
            pdl_tensor cp = *t;
            cp.data = tmp;
            if (ops_dequant_row(&cp, 0, buf, n))
                rc = err_fail(err, "%s: tensor '%s': %s cannot be converted to F32", t->file, t->name,
                              dtype_name(t->dtype));
            for (int64_t i = 0; rc == 0 && i < n; i++) buf[i] += 1.0f;
            free(tmp);
            t->data = buf, t->dtype = PDL_DTYPE_F32, t->nbytes = (size_t)n * 4, t->n_dims = 1, t->shape[0] = n;
        }
    }
done:
    json_decref(cfg);
    return rc;
}
