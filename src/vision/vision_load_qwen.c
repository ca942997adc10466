/*
 * vision_load_qwen.c - the vision half of a Hugging Face Qwen2.5-VL folder
 * (Qwen2_5_VLForConditionalGeneration): config.json's vision_config
 * (Qwen2_5_VLVisionConfig), the token ids of the prompt layout,
 * preprocessor_config.json (Qwen2VLImageProcessor's pixel budget and patch
 * layout), and the visual.* tensors under either prefix transformers uses
 * ("visual." as published, "model.visual." in newer saves).
 *
 * Tensors (shapes as stored, (out, in)):
 *   patch_embed.proj.weight       (hidden, 3, temporal, patch, patch): a Conv3d without bias
 *   blocks.L.norm1/norm2.weight   (hidden): RMSNorms
 *   blocks.L.attn.qkv.weight/bias (3 hidden, hidden), (3 hidden): q, k, v rows in that order
 *   blocks.L.attn.proj.weight/bias
 *   blocks.L.mlp.{gate,up,down}_proj.weight/bias
 *   merger.ln_q.weight (hidden), merger.mlp.0 (4 hidden, 4 hidden), merger.mlp.2 (text hidden, 4 hidden)
 */
#define _POSIX_C_SOURCE 200809L
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"
#include "util/json_file.h"
#include "vision/vision_model.h"

static int jint(json_t *o, const char *path, const char *key, int *out, pdl_error *err) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > (1 << 30))
        return err_fail(err, "%s: field '%s' must be a non-negative integer", path, key);
    *out = (int)json_integer_value(v);
    return 0;
}

static int jlong(json_t *o, const char *path, const char *key, long *out, pdl_error *err) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_integer(v) || json_integer_value(v) <= 0)
        return err_fail(err, "%s: field '%s' must be a positive integer", path, key);
    *out = (long)json_integer_value(v);
    return 0;
}

static int jfloat3(json_t *o, const char *path, const char *key, float *out, pdl_error *err) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_array(v) || json_array_size(v) != 3) return err_fail(err, "%s: field '%s' must be 3 numbers", path, key);
    for (int i = 0; i < 3; i++) {
        json_t *e = json_array_get(v, (size_t)i);
        if (!json_is_number(e)) return err_fail(err, "%s: field '%s[%d]' must be a number", path, key, i);
        out[i] = (float)json_number_value(e);
    }
    return 0;
}

/* Qwen2VLImageProcessor: defaults, then preprocessor_config.json. */
static int read_processor(pdl_vision *v, const char *dir, pdl_error *err) {
    pdl_image_proc *p = &v->cfg.proc;
    static const float clip_mean[3] = {0.48145466f, 0.4578275f, 0.40821073f};
    static const float clip_std[3] = {0.26862954f, 0.26130258f, 0.27577711f};
    p->resample = PDL_RESAMPLE_BICUBIC;
    p->rescale = 1.0 / 255.0;
    memcpy(p->mean, clip_mean, sizeof clip_mean), memcpy(p->std, clip_std, sizeof clip_std);
    p->min_pixels = 56 * 56, p->max_pixels = 28 * 28 * 1280;
    char path[4096];
    snprintf(path, sizeof path, "%s/preprocessor_config.json", dir);
    struct stat st;
    if (stat(path, &st) != 0) return 0;
    json_t *j = NULL;
    if (json_file_load(path, 0, &j, err)) return -1;
    int rc = -1, resample = p->resample, patch = p->patch, merge = p->merge, temporal = p->temporal;
    if (!json_is_object(j)) {
        err_fail(err, "%s: top level is not a JSON object", path);
        goto done;
    }
    /* newer files give the budget as size {shortest_edge, longest_edge} */
    json_t *size = json_object_get(j, "size");
    if (json_is_object(size) && (jlong(size, path, "shortest_edge", &p->min_pixels, err) ||
                                 jlong(size, path, "longest_edge", &p->max_pixels, err)))
        goto done;
    if (jlong(j, path, "min_pixels", &p->min_pixels, err) || jlong(j, path, "max_pixels", &p->max_pixels, err) ||
        jint(j, path, "patch_size", &patch, err) || jint(j, path, "merge_size", &merge, err) ||
        jint(j, path, "temporal_patch_size", &temporal, err) || jint(j, path, "resample", &resample, err) ||
        jfloat3(j, path, "image_mean", p->mean, err) || jfloat3(j, path, "image_std", p->std, err))
        goto done;
    json_t *rf = json_object_get(j, "rescale_factor");
    if (json_is_number(rf) && (float)json_number_value(rf) != (float)(1.0 / 255.0)) p->rescale = json_number_value(rf);
    if (resample != PDL_RESAMPLE_BILINEAR && resample != PDL_RESAMPLE_BICUBIC) {
        err_fail(err, "%s: resample %d is not supported (2 bilinear, 3 bicubic)", path, resample);
        goto done;
    }
    if (patch != p->patch || merge != p->merge || temporal != p->temporal) {
        err_fail(err, "%s: patch_size %d, merge_size %d, temporal_patch_size %d disagree with config.json's "
                 "vision_config (%d, %d, %d)", path, patch, merge, temporal, p->patch, p->merge, p->temporal);
        goto done;
    }
    p->resample = (pdl_resample)resample;
    rc = 0;
done:
    json_decref(j);
    return rc;
}

int vis_load_qwen_hf(pdl_vision *v, struct json_t *cfg, const char *path, const char *dir,
                     const pdl_model *text, pdl_error *err) {
    pdl_vision_config *c = &v->cfg;
    json_t *vc = json_object_get(cfg, "vision_config");
    if (!json_is_object(vc)) return err_fail(err, "%s: model_type 'qwen2_5_vl' needs a 'vision_config' object", path);
    c->family = PDL_VLM_QWEN25VL;
    /* Qwen2_5_VLVisionConfig's defaults */
    c->n_layers = 32, c->hidden = 3584, c->ffn = 3420, c->n_heads = 16, c->channels = 3, c->patch_size = 14;
    c->proc.patch = 14, c->proc.merge = 2, c->proc.temporal = 2;
    int window_size = 112, out_hidden = 3584;
    c->ln_eps = 1e-6f; /* Qwen2RMSNorm(dim, eps=1e-6) in the tower and the merger */
    c->rope_theta = 10000.0f;
    c->act = PDL_VACT_SILU, c->proj_act = PDL_VACT_GELU_ERF;
    json_t *act = json_object_get(vc, "hidden_act");
    if (act && !(json_is_string(act) && strcmp(json_string_value(act), "silu") == 0))
        return err_fail(err, "%s: vision_config.hidden_act must be \"silu\" (Qwen2.5-VL's SwiGLU)", path);
    if (jint(vc, path, "depth", &c->n_layers, err) || jint(vc, path, "hidden_size", &c->hidden, err) ||
        jint(vc, path, "intermediate_size", &c->ffn, err) || jint(vc, path, "num_heads", &c->n_heads, err) ||
        jint(vc, path, "in_chans", &c->channels, err) || jint(vc, path, "in_channels", &c->channels, err) ||
        jint(vc, path, "patch_size", &c->proc.patch, err) || jint(vc, path, "spatial_merge_size", &c->proc.merge, err) ||
        jint(vc, path, "temporal_patch_size", &c->proc.temporal, err) ||
        jint(vc, path, "window_size", &window_size, err) || jint(vc, path, "out_hidden_size", &out_hidden, err))
        return -1;
    c->patch_size = c->proc.patch;
    c->n_layers_run = c->n_layers;
    if (c->proc.patch <= 0 || c->proc.merge <= 0 || window_size % (c->proc.patch * c->proc.merge) != 0)
        return err_fail(err, "%s: vision_config.window_size %d is not a multiple of patch_size * spatial_merge_size "
                        "(%d * %d)", path, window_size, c->proc.patch, c->proc.merge);
    c->window_cells = window_size / (c->proc.patch * c->proc.merge);
    json_t *full = json_object_get(vc, "fullatt_block_indexes");
    if (full) {
        size_t i;
        json_t *e;
        if (!json_is_array(full)) return err_fail(err, "%s: vision_config.fullatt_block_indexes must be a list", path);
        json_array_foreach(full, i, e) {
            if (!json_is_integer(e) || json_integer_value(e) < 0 || json_integer_value(e) >= 128)
                return err_fail(err, "%s: vision_config.fullatt_block_indexes[%zu] must be a layer index below 128",
                                path, i);
            int l = (int)json_integer_value(e);
            c->full_attn[l / 64] |= 1ull << (l % 64);
        }
    } else {
        const int dflt[4] = {7, 15, 23, 31};
        for (int i = 0; i < 4; i++) c->full_attn[0] |= 1ull << dflt[i];
    }
    pdl_model_info ti;
    pdl_model_get_info(text, &ti);
    c->text_hidden = ti.hidden;
    if (out_hidden != ti.hidden)
        return err_fail(err, "%s: vision_config.out_hidden_size %d differs from the text model's hidden size %d", path,
                        out_hidden, ti.hidden);
    c->proj_hidden = c->hidden * c->proc.merge * c->proc.merge;
    /* the prompt: <|vision_start|> <|image_pad|> x rows <|vision_end|> */
    int image_id = 151655, start_id = 151652, end_id = 151653;
    if (jint(cfg, path, "image_token_id", &image_id, err) || jint(cfg, path, "vision_start_token_id", &start_id, err) ||
        jint(cfg, path, "vision_end_token_id", &end_id, err))
        return -1;
    c->image_token_id = image_id, c->boi_id = start_id, c->eoi_id = end_id;
    vis_token_text(text, c->image_token_id, c->image_token_text, sizeof c->image_token_text);
    /* what the chat template writes per image (an image part of a message) */
    char start[24], end[24];
    vis_token_text(text, c->boi_id, start, sizeof start);
    vis_token_text(text, c->eoi_id, end, sizeof end);
    const char *parts[3] = {start[0] ? start : "<|vision_start|>",
                            c->image_token_text[0] ? c->image_token_text : "<|image_pad|>", end[0] ? end : "<|vision_end|>"};
    c->placeholder[0] = 0;
    for (int i = 0; i < 3; i++)
        if (strlen(c->placeholder) + strlen(parts[i]) < sizeof c->placeholder) strcat(c->placeholder, parts[i]);
    if (read_processor(v, dir, err)) return -1;

    if (st_open_dir(&v->st, dir, err)) return -1;
    const pdl_tensor_set *ts = st_tensors(v->st);
    const char *pre = tensor_set_find(ts, "model.visual.patch_embed.proj.weight") ? "model." : "";
    return vis_take_all(v, ts, false, pre, false, dir, err);
}
