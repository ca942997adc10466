/*
 * mlx_quant.c - folding MLX affine-quantized safetensors triples
 * (X.weight U32 codes, X.scales, X.biases) into one MLX_Q4 / MLX_Q8 tensor,
 * after validating them against config.json's quantization block.
 *
 * Which modules are quantized follows mlx-lm's loader: a per-module entry
 * in the block decides (false: kept in float); otherwise a module is
 * quantized when its weight is stored as packed codes. The codes' layout is
 * mx.quantize's: element j of a row is bits B (j % (32 / B)) .. + B - 1 of
 * u32 word j / (32 / B), little-endian words.
 */
#include "format/mlx_quant.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "util/error.h"
#include "util/json_file.h"

/* ---- config.json ----------------------------------------------------------- */

static int get_param(const json_t *obj, const char *cfg_path, const char *where, const char *key, long long *out,
                     pdl_error *err) {
    const json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_integer(v)) return err_fail(err, "%s: field '%s.%s' must be an integer", cfg_path, where, key);
    *out = (long long)json_integer_value(v);
    return 0;
}

static int check_mode(const json_t *obj, const char *cfg_path, const char *where, pdl_error *err) {
    const json_t *v = json_object_get(obj, "mode");
    if (!v || json_is_null(v)) return 0;
    if (!json_is_string(v)) return err_fail(err, "%s: field '%s.mode' must be a string", cfg_path, where);
    if (strcmp(json_string_value(v), "affine") != 0)
        return err_fail(err, "%s: MLX quantization mode '%s' (%s.mode) is not supported (only affine)", cfg_path,
                        json_string_value(v), where);
    return 0;
}

int mlx_quant_parse(const json_t *cfg, const char *cfg_path, pdl_mlx_quant *q, pdl_error *err) {
    memset(q, 0, sizeof *q);
    snprintf(q->cfg_path, sizeof q->cfg_path, "%s", cfg_path);
    const json_t *qa = json_object_get(cfg, "quantization");
    const json_t *qc = json_object_get(cfg, "quantization_config");
    if (qa && json_is_null(qa)) qa = NULL;
    if (qc && json_is_null(qc)) qc = NULL;
    const json_t *obj = NULL;
    if (qa) {
        /* mlx-lm reads "quantization" and ignores "quantization_config" */
        if (!json_is_object(qa)) return err_fail(err, "%s: field 'quantization' must be an object", cfg_path);
        obj = qa;
        q->key = "quantization";
    } else if (qc) {
        if (!json_is_object(qc)) return err_fail(err, "%s: field 'quantization_config' must be an object", cfg_path);
        obj = qc;
        q->key = "quantization_config";
    } else {
        return 0;
    }
    const json_t *method = json_object_get(obj, "quant_method");
    if (method && !json_is_null(method)) {
        if (!json_is_string(method))
            return err_fail(err, "%s: field '%s.quant_method' must be a string", cfg_path, q->key);
        /* gpt-oss's published checkpoints: the MXFP4 tensors (*_blocks /
         * *_scales) say what they are, and the model loader repacks them */
        if (strcmp(json_string_value(method), "mxfp4") == 0) return 0;
        return err_fail(err,
                        "%s: %s.quant_method '%s' is not supported: pagedlm loads unquantized safetensors "
                        "and MLX affine quantization (\"quantization\": {\"group_size\", \"bits\"})",
                        cfg_path, q->key, json_string_value(method));
    }
    if (check_mode(obj, cfg_path, q->key, err)) return -1;
    if (!json_object_get(obj, "bits") || !json_object_get(obj, "group_size"))
        return err_fail(err, "%s: field '%s' needs \"bits\" and \"group_size\" (MLX quantization)", cfg_path, q->key);
    if (get_param(obj, cfg_path, q->key, "bits", &q->bits, err) ||
        get_param(obj, cfg_path, q->key, "group_size", &q->group, err))
        return -1;
    q->enabled = true;
    q->obj = json_incref((json_t *)obj);
    return 0;
}

void mlx_quant_free(pdl_mlx_quant *q) {
    json_decref(q->obj);
    q->obj = NULL;
}

/* ---- folding --------------------------------------------------------------- */

/* How one module is quantized: explicit < 0 when the block says false,
 * > 0 when it has an entry for it (true or an object), 0 otherwise. */
typedef struct module_quant {
    int explicit_;
    long long bits, group;
} module_quant;

static int module_params(const pdl_mlx_quant *q, const char *module, module_quant *mq, pdl_error *err) {
    mq->explicit_ = 0;
    mq->bits = q->bits;
    mq->group = q->group;
    const json_t *v = json_object_get(q->obj, module);
    if (!v || strcmp(module, "bits") == 0 || strcmp(module, "group_size") == 0 || strcmp(module, "mode") == 0)
        return 0;
    if (json_is_false(v)) {
        mq->explicit_ = -1;
        return 0;
    }
    mq->explicit_ = 1;
    if (json_is_true(v)) return 0;
    if (!json_is_object(v))
        return err_fail(err, "%s: %s entry for module '%s' must be an object {\"group_size\", \"bits\"} or false",
                        q->cfg_path, q->key, module);
    char where[PDL_TENSOR_NAME_MAX + 32];
    snprintf(where, sizeof where, "%s.%s", q->key, module);
    if (check_mode(v, q->cfg_path, where, err) || get_param(v, q->cfg_path, where, "bits", &mq->bits, err) ||
        get_param(v, q->cfg_path, where, "group_size", &mq->group, err))
        return -1;
    return 0;
}

static bool has_suffix(const char *s, const char *suffix, size_t *prefix_len) {
    size_t n = strlen(s), k = strlen(suffix);
    if (n <= k || strcmp(s + n - k, suffix) != 0) return false;
    *prefix_len = n - k;
    return true;
}

static bool is_float(pdl_dtype t) { return t == PDL_DTYPE_F32 || t == PDL_DTYPE_F16 || t == PDL_DTYPE_BF16; }

static void shape_str(const pdl_tensor *t, char *buf, size_t n) {
    size_t off = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < t->n_dims && off < n; i++)
        off += (size_t)snprintf(buf + off, n - off, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
    if (off < n) snprintf(buf + off, n - off, "]");
}

/* Checks one U32 X.weight against its scales and biases and folds it. */
static int fold_one(pdl_tensor *w, const char *module, const module_quant *mq, const pdl_tensor *sc,
                    const pdl_tensor *bi, const pdl_mlx_quant *q, pdl_error *err) {
    if (mq->explicit_ < 0)
        return err_fail(err,
                        "%s: tensor '%s' holds U32 packed codes but %s in %s says module '%s' is not quantized "
                        "(false)",
                        w->file, w->name, q->key, q->cfg_path, module);
    if (!sc)
        return err_fail(err, "%s: tensor '%s' holds U32 packed codes (MLX quantization) but '%s.scales' is missing",
                        w->file, w->name, module);
    if (!bi)
        return err_fail(err, "%s: tensor '%s' holds U32 packed codes (MLX quantization) but '%s.biases' is missing",
                        w->file, w->name, module);
    if (mq->bits != 4 && mq->bits != 8)
        return err_fail(err,
                        "%s: tensor '%s': MLX quantization with bits = %lld is not supported (only 4 and 8 bits; "
                        "%s in %s)",
                        w->file, w->name, mq->bits, q->key, q->cfg_path);
    if (mq->group != 32 && mq->group != 64 && mq->group != 128)
        return err_fail(err,
                        "%s: tensor '%s': MLX quantization group_size = %lld is not supported (only 32, 64 and "
                        "128; %s in %s)",
                        w->file, w->name, mq->group, q->key, q->cfg_path);
    if (!is_float(sc->dtype))
        return err_fail(err, "%s: tensor '%s' has dtype %s: MLX scales must be F32, F16 or BF16", sc->file, sc->name,
                        dtype_name(sc->dtype));
    if (bi->dtype != sc->dtype)
        return err_fail(err, "%s: tensor '%s' has dtype %s but '%s' has %s: MLX biases and scales must match",
                        bi->file, bi->name, dtype_name(bi->dtype), sc->name, dtype_name(sc->dtype));
    char ws[96], ss[96], bs[96];
    shape_str(w, ws, sizeof ws);
    shape_str(sc, ss, sizeof ss);
    shape_str(bi, bs, sizeof bs);
    if (w->n_dims != 2)
        return err_fail(err, "%s: tensor '%s' has shape %s: MLX packed codes must be 2-D [out, in * %lld / 32]",
                        w->file, w->name, ws, mq->bits);
    if (bi->n_dims != sc->n_dims || bi->shape[0] != sc->shape[0] || (sc->n_dims > 1 && bi->shape[1] != sc->shape[1]))
        return err_fail(err, "%s: tensor '%s' has shape %s but '%s' has %s: MLX biases and scales must match",
                        bi->file, bi->name, bs, sc->name, ss);
    int64_t packed = w->shape[1], per_word = 32 / mq->bits;
    if (packed > INT64_MAX / per_word)
        return err_fail(err, "%s: tensor '%s' has shape %s: too many columns", w->file, w->name, ws);
    int64_t in = packed * per_word;
    if (sc->n_dims != 2 || sc->shape[0] != w->shape[0] || in % mq->group != 0 || sc->shape[1] != in / mq->group)
        return err_fail(err,
                        "%s: tensor '%s' has shape %s but '%s' %s packs %lld columns at %lld bits, which need "
                        "scales of shape [%lld, %lld] for group_size %lld",
                        sc->file, sc->name, ss, w->name, ws, (long long)in, mq->bits, (long long)w->shape[0],
                        (long long)(in % mq->group == 0 ? in / mq->group : -1), mq->group);
    w->dtype = mq->bits == 4 ? PDL_DTYPE_MLX_Q4 : PDL_DTYPE_MLX_Q8;
    w->shape[1] = in;
    w->mlx.scales = sc->data;
    w->mlx.biases = bi->data;
    w->mlx.dtype = sc->dtype;
    w->mlx.group = (int32_t)mq->group;
    return 0;
}

int mlx_quant_fold(pdl_tensor_set *set, const pdl_mlx_quant *q, pdl_error *err) {
    if (!q->enabled) return 0;
    char module[PDL_TENSOR_NAME_MAX], other[PDL_TENSOR_NAME_MAX + 8];
    for (size_t i = 0; i < set->count; i++) {
        pdl_tensor *t = &set->items[i];
        size_t plen;
        if (has_suffix(t->name, ".scales", &plen) || has_suffix(t->name, ".biases", &plen)) {
            /* a stray scales/biases tensor would mean a weight was not folded */
            snprintf(other, sizeof other, "%.*s.weight", (int)plen, t->name);
            if (!tensor_set_find(set, other))
                return err_fail(err, "%s: tensor '%s' has no matching '%s' (MLX quantization)", t->file, t->name,
                                other);
            continue;
        }
        if (!has_suffix(t->name, ".weight", &plen)) {
            if (t->dtype == PDL_DTYPE_U32)
                return err_fail(err,
                                "%s: tensor '%s' has dtype U32, which is only supported for MLX-quantized weights "
                                "(X.weight with X.scales and X.biases)",
                                t->file, t->name);
            continue;
        }
        snprintf(module, sizeof module, "%.*s", (int)plen, t->name);
        module_quant mq;
        if (module_params(q, module, &mq, err)) return -1;
        snprintf(other, sizeof other, "%s.scales", module);
        const pdl_tensor *sc = tensor_set_find(set, other);
        snprintf(other, sizeof other, "%s.biases", module);
        const pdl_tensor *bi = tensor_set_find(set, other);
        if (t->dtype == PDL_DTYPE_U32) {
            if (fold_one(t, module, &mq, sc, bi, q, err)) return -1;
            continue;
        }
        if (sc || bi)
            return err_fail(err,
                            "%s: tensor '%s' has dtype %s but '%s' exists: an MLX-quantized weight holds U32 "
                            "packed codes",
                            t->file, t->name, dtype_name(t->dtype), sc ? sc->name : bi->name);
        if (mq.explicit_ > 0)
            return err_fail(err,
                            "%s: tensor '%s' has dtype %s but %s in %s lists module '%s' as quantized (U32 "
                            "packed codes with scales and biases)",
                            t->file, t->name, dtype_name(t->dtype), q->key, q->cfg_path, module);
    }
    return 0;
}

/* ---- a whole folder -------------------------------------------------------- */

int mlx_open_dir(st_model **out, const char *dir, pdl_error *err) {
    *out = NULL;
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    json_t *cfg = NULL;
    if (json_file_load(path, JSON_REJECT_DUPLICATES, &cfg, err)) return -1;
    pdl_mlx_quant q;
    int rc = json_is_object(cfg) ? mlx_quant_parse(cfg, path, &q, err)
                                 : err_fail(err, "%s: top level is not a JSON object", path);
    json_decref(cfg);
    if (rc) return -1;
    st_model *st = NULL;
    rc = st_open_dir_flags(&st, dir, q.enabled ? ST_ALLOW_U32 : 0, err);
    if (rc == 0) rc = mlx_quant_fold(st_tensors_mut(st), &q, err);
    mlx_quant_free(&q);
    if (rc) {
        st_close(st);
        return -1;
    }
    *out = st;
    return 0;
}
