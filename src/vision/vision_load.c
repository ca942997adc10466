/*
 * vision_load.c - pdl_vision_load and what both formats share after
 * parsing: choosing the loader, checking every weight against the config
 * (one message naming the tensor, its file and the expected shape), F32
 * vectors, the Gemma 3 projection transposed to (out, in), info and freeing.
 *
 * Format-specific parsing lives in vision_load_hf.c (a Hugging Face folder)
 * and vision_load_gguf.c (llama.cpp's mmproj GGUF).
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "kernels/cpu_ops.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"
#include "vision/vision_model.h"

void pdl_vision_scratch_free(pdl_vision_scratch *s);

int vis_take(const pdl_tensor_set *ts, const char *where, bool required, pdl_tensor *dst, pdl_error *err,
             const char *fmt, ...) {
    char name[PDL_TENSOR_NAME_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    return model_take_tensor(ts, name, required, where, dst, err);
}

int vis_gguf_u32(const gguf_file *g, bool required, const char *key, int *out, pdl_error *err) {
    uint32_t v;
    int rc = gguf_get_u32(g, key, &v, err);
    if (rc < 0) return -1;
    if (rc == 0) return required ? err_fail(err, "%s: missing key '%s'", gguf_path(g), key) : 0;
    if (v > (1u << 30)) return err_fail(err, "%s: key '%s' = %u is out of range", gguf_path(g), key, v);
    *out = (int)v;
    return 0;
}

int32_t vis_token_id(const pdl_model *text, const char *s) {
    return text->tok ? tok_piece_to_id(text->tok, s, strlen(s)) : -1;
}

void vis_token_text(const pdl_model *text, int32_t id, char *out, size_t n) {
    out[0] = 0;
    if (!text->tok || id < 0 || id >= tok_vocab_size(text->tok)) return;
    size_t len = 0;
    const char *p = tok_id_to_piece(text->tok, id, &len);
    if (p && len < n) memcpy(out, p, len), out[len] = 0;
}

int vis_own(pdl_vision *v, void *p) {
    void **o = realloc(v->owned, (v->n_owned + 1) * sizeof *o);
    if (!o) {
        free(p);
        return -1;
    }
    v->owned = o;
    v->owned[v->n_owned++] = p;
    return 0;
}

static int check_tensor(const pdl_tensor *t, int n_dims, const int64_t *shape, const char *what, pdl_error *err) {
    if (!t->data) return err_fail(err, "vision model: missing tensor for %s", what);
    bool ok = t->n_dims == n_dims;
    for (int i = 0; ok && i < n_dims; i++) ok = t->shape[i] == shape[i];
    if (ok) return 0;
    char got[96] = "", want[96] = "";
    for (int i = 0; i < t->n_dims; i++)
        snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", i ? ", " : "", (long long)t->shape[i]);
    for (int i = 0; i < n_dims; i++)
        snprintf(want + strlen(want), sizeof want - strlen(want), "%s%lld", i ? ", " : "", (long long)shape[i]);
    return err_fail(err, "%s: tensor '%s' (%s) has shape [%s], expected [%s]", t->file, t->name, what, got, want);
}

int vis_vector(pdl_vision *v, pdl_tensor *t, int64_t n, const char *what, pdl_error *err) {
    if (check_tensor(t, 1, &n, what, err)) return -1;
    if (t->dtype == PDL_DTYPE_F32 && (uintptr_t)t->data % 4 == 0) return 0;
    float *buf = malloc((size_t)n * sizeof *buf);
    if (!buf || vis_own(v, buf)) return err_fail(err, "out of memory converting '%s'", t->name);
    if (dtype_is_quantized(t->dtype))
        return err_fail(err, "%s: tensor '%s' is %s; vision vectors must be F32, F16 or BF16", t->file, t->name,
                        dtype_name(t->dtype));
    void *tmp = malloc(t->nbytes ? t->nbytes : 1); /* the data may be unaligned */
    if (!tmp) return err_fail(err, "out of memory");
    memcpy(tmp, t->data, t->nbytes);
    pdl_tensor c = *t;
    c.data = tmp;
    int drc = ops_dequant_row(&c, 0, buf, n);
    free(tmp);
    if (drc) return err_fail(err, "vision model: tensor '%s': %s cannot be converted to F32", t->name,
                             dtype_name(t->dtype));
    t->data = buf, t->dtype = PDL_DTYPE_F32, t->nbytes = (size_t)n * 4;
    return 0;
}

int vis_matrix(pdl_vision *v, pdl_tensor *t, int64_t rows, int64_t cols, const char *what, pdl_error *err) {
    int64_t s[2] = {rows, cols};
    if (check_tensor(t, 2, s, what, err)) return -1;
    if (t->dtype != PDL_DTYPE_F32 && t->dtype != PDL_DTYPE_F16 && t->dtype != PDL_DTYPE_BF16 &&
        t->dtype != PDL_DTYPE_Q8_0)
        return err_fail(err, "%s: tensor '%s' is %s; vision matrices must be F32, F16, BF16 or Q8_0", t->file,
                        t->name, dtype_name(t->dtype));
    if (cols % (int64_t)dtype_block_elems(t->dtype) != 0)
        return err_fail(err, "%s: tensor '%s': %lld columns is not a multiple of the %s block", t->file, t->name,
                        (long long)cols, dtype_name(t->dtype));
    size_t need = t->dtype == PDL_DTYPE_F32 ? 4 : t->dtype == PDL_DTYPE_Q8_0 ? 1 : 2;
    if ((uintptr_t)t->data % need) {
        void *buf = malloc(t->nbytes);
        if (!buf || vis_own(v, buf)) return err_fail(err, "out of memory aligning '%s'", t->name);
        memcpy(buf, t->data, t->nbytes);
        t->data = buf;
    }
    return 0;
}

/* Row view [r0, r0 + rows) of a matrix (or of a vector as (n, 1)). */
static pdl_tensor rows_view(const pdl_tensor *t, int64_t r0, int64_t rows) {
    pdl_tensor v = *t;
    int64_t cols = t->n_dims == 2 ? t->shape[1] : 1;
    size_t row_bytes = dtype_row_bytes(t->dtype, cols);
    v.data = (char *)t->data + (size_t)r0 * row_bytes;
    v.shape[0] = rows;
    v.nbytes = (size_t)rows * row_bytes;
    return v;
}

int vis_finish_qwen(pdl_vision *v, pdl_error *err) {
    pdl_vision_config *c = &v->cfg;
    pdl_vision_weights *w = &v->w;
    const pdl_image_proc *p = &c->proc;
    if (c->hidden <= 0 || c->n_heads <= 0 || c->hidden % c->n_heads || (c->hidden / c->n_heads) % 4 ||
        c->ffn <= 0 || c->n_layers <= 0 || c->n_layers > 128 || c->channels != 3 || p->patch <= 0 || p->merge <= 0 ||
        p->temporal <= 0 || c->window_cells <= 0 || c->text_hidden <= 0)
        return err_fail(err, "vision model: invalid Qwen2.5-VL shape: hidden %d, heads %d (head dimension a multiple "
                        "of 4), ffn %d, layers %d (at most 128), channels %d, patch %d, merge %d, temporal %d, window "
                        "%d cells", c->hidden, c->n_heads, c->ffn, c->n_layers, c->channels, p->patch, p->merge,
                        p->temporal, c->window_cells);
    if (c->hidden / c->n_heads > 256) return err_fail(err, "vision model: head dimension %d is larger than 256", c->hidden / c->n_heads);
    if (p->min_pixels > p->max_pixels)
        return err_fail(err, "vision model: min_pixels %ld is above max_pixels %ld", p->min_pixels, p->max_pixels);
    for (int i = 0; i < 3; i++)
        if (!(p->std[i] > 0) || !isfinite(p->mean[i]))
            return err_fail(err, "vision model: invalid image_mean / image_std (channel %d: %g / %g)", i, p->mean[i],
                            p->std[i]);
    int64_t h = c->hidden, pp = (int64_t)c->channels * p->temporal * p->patch * p->patch;
    int64_t conv[5] = {h, c->channels, p->temporal, p->patch, p->patch};
    if (check_tensor(&w->patch_w, 5, conv, "the patch embedding (Conv3d)", err)) return -1;
    w->patch_w.n_dims = 2, w->patch_w.shape[1] = pp;
    if (vis_matrix(v, &w->patch_w, h, pp, "the patch embedding", err)) return -1;
    /* llama.cpp's mmproj may keep q, k and v apart; else the fused qkv (3 hidden, hidden) */
    bool qkv_apart = c->n_layers > 0 && w->layers[0].wk.data;
    if (vis_check_all(v, qkv_apart, err)) return -1;
    if (qkv_apart) return 0;
    for (int l = 0; l < c->n_layers; l++) {
        pdl_vision_layer *L = &w->layers[l];
        /* the fused qkv: q, k, v rows in that order */
        pdl_tensor qkv = L->wq, bqkv = L->bq;
        L->wq = rows_view(&qkv, 0, h), L->wk = rows_view(&qkv, h, h), L->wv = rows_view(&qkv, 2 * h, h);
        L->bq = rows_view(&bqkv, 0, h), L->bk = rows_view(&bqkv, h, h), L->bv = rows_view(&bqkv, 2 * h, h);
        L->bq.n_dims = L->bk.n_dims = L->bv.n_dims = 1;
    }
    return 0;
}

int vis_finish(pdl_vision *v, pdl_error *err) {
    pdl_vision_config *c = &v->cfg;
    pdl_vision_weights *w = &v->w;
    if (c->family == PDL_VLM_QWEN25VL) return vis_finish_qwen(v, err);
    if (c->channels <= 0) c->channels = 3;
    if (c->hidden <= 0 || c->n_heads <= 0 || c->hidden % c->n_heads || c->ffn <= 0 || c->n_layers <= 0 ||
        c->patch_size <= 0 || c->image_size <= 0 || c->image_size % c->patch_size || c->text_hidden <= 0)
        return err_fail(err, "vision model: invalid shape: hidden %d, heads %d, ffn %d, layers %d, image %d, patch %d, "
                        "text hidden %d", c->hidden, c->n_heads, c->ffn, c->n_layers, c->image_size, c->patch_size,
                        c->text_hidden);
    if (c->n_layers_run <= 0 || c->n_layers_run > c->n_layers)
        return err_fail(err, "vision model: the feature layer asks for %d of %d layers", c->n_layers_run, c->n_layers);
    if (!(c->ln_eps > 0 && isfinite(c->ln_eps))) return err_fail(err, "vision model: invalid layer norm epsilon %g", c->ln_eps);
    int hd = c->hidden / c->n_heads;
    if (hd > 256) return err_fail(err, "vision model: head dimension %d is larger than 256", hd);
    int side = vis_side(c);
    if (side * side + 1 > 65536) return err_fail(err, "vision model: %d patches per tile is too many", side * side);
    int64_t h = c->hidden, pp = (int64_t)c->channels * c->patch_size * c->patch_size;
    /* the convolution as a matrix (hidden, c * p * p) */
    int64_t conv[4] = {h, c->channels, c->patch_size, c->patch_size};
    if (check_tensor(&w->patch_w, 4, conv, "the patch embedding", err)) return -1;
    w->patch_w.n_dims = 2, w->patch_w.shape[1] = pp;
    if (vis_matrix(v, &w->patch_w, h, pp, "the patch embedding", err)) return -1;
    int64_t n_pos = side * side + (c->class_token ? 1 : 0);
    {
        int64_t s[2] = {n_pos, h};
        if (check_tensor(&w->pos_embd, 2, s, "the position embedding", err)) return -1;
        int64_t n = n_pos * h;
        pdl_tensor flat = w->pos_embd;
        flat.n_dims = 1, flat.shape[0] = n;
        if (vis_vector(v, &flat, n, "the position embedding", err)) return -1;
        w->pos_embd.data = flat.data, w->pos_embd.dtype = flat.dtype, w->pos_embd.nbytes = flat.nbytes;
    }
    if (c->family == PDL_VLM_GEMMA3) {
        int tps = (int)lround(sqrt((double)c->mm_tokens));
        if (c->mm_tokens <= 0 || tps * tps != c->mm_tokens || side % tps != 0)
            return err_fail(err, "vision model: %d image tokens (mm_tokens_per_image) do not pool a %d x %d patch grid "
                            "into a square", c->mm_tokens, side, side);
    } else if (c->proj_hidden <= 0) {
        c->proj_hidden = c->text_hidden;
    }
    /* every other weight's shape, as the table gives it (vision_load_tensors.c) */
    if (vis_check_all(v, false, err)) return -1;
    if (c->family == PDL_VLM_GEMMA3) {
        /* the projection, (hidden, text_hidden) used as x W, as (out, in) F32 */
        int64_t s[2] = {h, c->text_hidden};
        if (check_tensor(&w->mm_proj_w, 2, s, "the input projection", err)) return -1;
        if (dtype_is_quantized(w->mm_proj_w.dtype))
            return err_fail(err, "%s: tensor '%s' is %s; expected F32, F16 or BF16", w->mm_proj_w.file,
                            w->mm_proj_w.name, dtype_name(w->mm_proj_w.dtype));
        float *tr = malloc((size_t)h * c->text_hidden * sizeof *tr), *row = malloc((size_t)c->text_hidden * sizeof *row);
        void *src = malloc(w->mm_proj_w.nbytes);
        if (!tr || !row || !src || vis_own(v, tr)) {
            free(row), free(src);
            return err_fail(err, "out of memory transposing '%s'", w->mm_proj_w.name);
        }
        memcpy(src, w->mm_proj_w.data, w->mm_proj_w.nbytes);
        pdl_tensor a = w->mm_proj_w;
        a.data = src;
        int drc = 0;
        for (int64_t i = 0; i < h && drc == 0; i++) {
            drc = ops_dequant_row(&a, i, row, c->text_hidden);
            for (int64_t o = 0; o < c->text_hidden; o++) tr[(size_t)o * h + i] = row[o];
        }
        free(row), free(src);
        if (drc)
            return err_fail(err, "%s: tensor '%s': %s cannot be converted to F32", w->mm_proj_w.file,
                            w->mm_proj_w.name, dtype_name(w->mm_proj_w.dtype));
        w->mm_proj_w.data = tr, w->mm_proj_w.dtype = PDL_DTYPE_F32;
        w->mm_proj_w.shape[0] = c->text_hidden, w->mm_proj_w.shape[1] = h;
        w->mm_proj_w.nbytes = (size_t)h * c->text_hidden * 4;
    } else {
        c->mm_tokens = side * side;
        if (c->family == PDL_VLM_LLAVA_NEXT) {
            if (c->proc.n_pinpoints <= 0)
                return err_fail(err, "vision model: LLaVA-NeXT needs image_grid_pinpoints");
            for (int i = 0; i < c->proc.n_pinpoints; i++)
                if (c->proc.pinpoints[i][0] <= 0 || c->proc.pinpoints[i][1] <= 0 ||
                    c->proc.pinpoints[i][0] % c->proc.crop_h || c->proc.pinpoints[i][1] % c->proc.crop_w)
                    return err_fail(err, "vision model: grid pinpoint %d (%d x %d) is not a multiple of the tile %d x %d",
                                    i, c->proc.pinpoints[i][0], c->proc.pinpoints[i][1], c->proc.crop_h, c->proc.crop_w);
        }
    }
    if (c->proc.crop_w != c->image_size || c->proc.crop_h != c->image_size)
        return err_fail(err, "vision model: the processor makes %d x %d tiles but the tower takes %d x %d",
                        c->proc.crop_w, c->proc.crop_h, c->image_size, c->image_size);
    for (int i = 0; i < 3; i++)
        if (!(c->proc.std[i] > 0) || !isfinite(c->proc.mean[i]))
            return err_fail(err, "vision model: invalid image_mean / image_std (channel %d: %g / %g)", i,
                            c->proc.mean[i], c->proc.std[i]);
    return 0;
}

int pdl_vision_load(pdl_vision **out, const char *path, const pdl_model *text, pdl_error *err) {
    *out = NULL;
    pdl_vision *v = calloc(1, sizeof *v);
    if (!v) return err_fail(err, "out of memory");
    /* workers of its own, as many as the text model's contexts get: an
     * image is encoded while the text model's forwards run elsewhere */
    v->pool = threadpool_new(text->default_threads);
    v->kernels = text->kernels_chosen ? text->kernels : *matmul_kernels_active();
    struct stat st;
    int rc;
    if (!v->pool) rc = err_fail(err, "vision model: cannot start worker threads");
    else if (stat(path, &st) != 0) rc = err_fail(err, "%s: no such file or folder", path);
    else if (S_ISDIR(st.st_mode)) rc = vis_load_hf(v, path, text, err);
    else rc = vis_load_gguf(v, path, text, err);
    if (rc == 0) rc = vis_finish(v, err);
    if (rc) {
        pdl_vision_free(v);
        return -1;
    }
    *out = v;
    return 0;
}

void pdl_vision_free(pdl_vision *v) {
    if (!v) return;
    if (v->pool) threadpool_free(v->pool);
    pdl_vision_scratch_free(&v->scratch);
    free(v->w.layers);
    for (size_t i = 0; i < v->n_owned; i++) free(v->owned[i]);
    free(v->owned);
    if (v->gguf) gguf_close(v->gguf);
    if (v->st) st_close(v->st);
    free(v);
}

static const char *family_name(pdl_vision_family f) {
    switch (f) {
    case PDL_VLM_LLAVA: return "llava";
    case PDL_VLM_LLAVA_NEXT: return "llava_next";
    case PDL_VLM_GEMMA3: return "gemma3";
    case PDL_VLM_QWEN25VL: return "qwen2_5_vl";
    }
    return "?";
}

void pdl_vision_get_info(const pdl_vision *v, pdl_vision_info *info) {
    const pdl_vision_config *c = &v->cfg;
    memset(info, 0, sizeof *info);
    info->family = family_name(c->family);
    info->tower = c->family == PDL_VLM_GEMMA3 ? "siglip" : c->family == PDL_VLM_QWEN25VL ? "qwen2_5_vit" : "clip";
    info->source = v->source;
    info->image_size = c->image_size;
    info->patch_size = c->patch_size;
    info->hidden = c->hidden;
    info->n_layers = c->n_layers;
    info->n_layers_run = c->n_layers_run;
    info->n_heads = c->n_heads;
    info->ffn = c->ffn;
    info->rows_per_image = c->family == PDL_VLM_LLAVA_NEXT || c->family == PDL_VLM_QWEN25VL ? -1 : c->mm_tokens;
    info->image_token_id = c->image_token_id;
    info->placeholder = c->placeholder;
    info->bidirectional = c->bidirectional;
}
