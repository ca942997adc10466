/*
 * model_load_hf.c - a model description from a Hugging Face folder:
 * config.json (+ generation_config.json) for the hyperparameters and
 * safetensors weights with transformers' names (model.layers.N.self_attn...).
 *
 * The family and its traits come from the architecture table (arch.c),
 * looked up by model_type; here are transformers' names and defaults for
 * the numbers. Hugging Face keeps Q/K in the rotate-half layout (Cohere's
 * RoPE is interleaved: the table says so). Gemma 2 and 3 apply their norms
 * as (1 + w): model_finish folds the 1 in. Experts are one tensor each
 * (mlp.experts.E.gate_proj, Mixtral's block_sparse_moe.experts.E.w1, ...).
 * Qwen3-Next's fused linear-attention projections (in_proj_qkvz,
 * in_proj_ba) are regrouped into the layer's own at load (model_load.c).
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "format/mlx_quant.h"
#include "kernels/cpu_ops.h"
#include "kernels/fp16.h"
#include "model/model.h"
#include "util/error.h"
#include "util/json_file.h"

/* Parses a JSON object file into *out. */
static int load_json_file(const char *path, json_t **out, pdl_error *err) {
    if (json_file_load(path, JSON_REJECT_DUPLICATES, out, err)) return -1;
    if (!json_is_object(*out)) {
        json_decref(*out);
        *out = NULL;
        return err_fail(err, "%s: top level is not a JSON object", path);
    }
    return 0;
}

/* Integer field: absent or null keeps *out (an error when required). */
static int cfg_int(json_t *cfg, const char *path, const char *key, bool required, int *out, pdl_error *err) {
    json_t *v = json_object_get(cfg, key);
    if (!v || json_is_null(v)) {
        if (required) return err_fail(err, "%s: missing field '%s'", path, key);
        return 0;
    }
    if (!json_is_integer(v)) return err_fail(err, "%s: field '%s' must be an integer", path, key);
    json_int_t x = json_integer_value(v);
    if (x < 0 || x > INT32_MAX) return err_fail(err, "%s: field '%s' = %lld is out of range", path, key, (long long)x);
    *out = (int)x;
    return 0;
}

static int cfg_float(json_t *cfg, const char *path, const char *key, float *out, pdl_error *err) {
    json_t *v = json_object_get(cfg, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_number(v)) return err_fail(err, "%s: field '%s' must be a number", path, key);
    *out = (float)json_number_value(v);
    return 0;
}

static int cfg_bool(json_t *cfg, const char *path, const char *key, bool *out, pdl_error *err) {
    json_t *v = json_object_get(cfg, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_boolean(v)) return err_fail(err, "%s: field '%s' must be true or false", path, key);
    *out = json_is_true(v);
    return 0;
}

/* One token id of a config: a vocabulary entry (c->vocab is known by now). */
static int cfg_token_id(const json_t *v, const char *path, const char *key, const pdl_model_config *c, int32_t *out,
                        pdl_error *err) {
    if (!json_is_integer(v)) return err_fail(err, "%s: field '%s' must be an integer", path, key);
    json_int_t id = json_integer_value(v);
    if (id < 0 || (c->vocab > 0 && id >= c->vocab))
        return err_fail(err, "%s: field '%s' is %lld, outside the vocabulary [0, %d)", path, key, (long long)id,
                        c->vocab);
    *out = (int32_t)id;
    return 0;
}

/* eos_token_id may be an integer or a list of integers. */
static int cfg_eos(json_t *cfg, const char *path, pdl_model_config *c, pdl_error *err) {
    json_t *v = json_object_get(cfg, "eos_token_id");
    if (!v || json_is_null(v)) return 0;
    c->n_eos = 0;
    if (json_is_integer(v)) return cfg_token_id(v, path, "eos_token_id", c, &c->eos_ids[c->n_eos++], err);
    if (!json_is_array(v)) return err_fail(err, "%s: field 'eos_token_id' must be an integer or a list", path);
    size_t i;
    json_t *e;
    json_array_foreach(v, i, e) {
        char key[48];
        snprintf(key, sizeof key, "eos_token_id[%zu]", i);
        int32_t id = -1;
        if (cfg_token_id(e, path, key, c, &id, err)) return -1;
        if (c->n_eos < PDL_MAX_EOS) c->eos_ids[c->n_eos++] = id;
    }
    return 0;
}

/* transformers' get_mscale: YaRN's attention factor for a scale factor. */
static double yarn_mscale(double factor, double mscale) {
    return factor <= 1.0 ? 1.0 : 0.1 * mscale * log(factor) + 1.0;
}

/* YaRN as transformers reads it (_compute_yarn_parameters, 4.56 and 5.x):
 * the factor as given (or, absent, max_position_embeddings over the
 * original context); the original context from the scaling object, the
 * config's top level, or max_position_embeddings; beta_fast / beta_slow 32
 * / 1 when absent or 0; the attention factor as given, else DeepSeek's
 * ratio get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim) when
 * both are given and non-zero, else 0.1 ln(factor) + 1; `truncate` (default
 * true) rounds the ramp's ends out to whole pairs. */
static int read_yarn(json_t *cfg, json_t *rs, const char *path, const char *field, pdl_model_config *c,
                     pdl_error *err) {
    c->rope_scaling = PDL_ROPE_SCALING_YARN;
    c->rope_orig_ctx = c->ctx_len;
    if (cfg_int(cfg, path, "original_max_position_embeddings", false, &c->rope_orig_ctx, err) ||
        cfg_int(rs, path, "original_max_position_embeddings", false, &c->rope_orig_ctx, err))
        return -1;
    if (c->rope_orig_ctx <= 0)
        return err_fail(err, "%s: YaRN needs '%s.original_max_position_embeddings' (or max_position_embeddings)", path,
                        field);
    json_t *f = json_object_get(rs, "factor");
    if (!f || json_is_null(f)) c->rope_factor = (float)((double)c->ctx_len / c->rope_orig_ctx);
    float beta_fast = 0, beta_slow = 0, mscale = 0, mscale_all = 0, attn = -1;
    c->rope_yarn_truncate = true;
    c->rope_yarn_ext = 1.0f;
    if (cfg_float(rs, path, "beta_fast", &beta_fast, err) || cfg_float(rs, path, "beta_slow", &beta_slow, err) ||
        cfg_float(rs, path, "mscale", &mscale, err) || cfg_float(rs, path, "mscale_all_dim", &mscale_all, err) ||
        cfg_float(rs, path, "attention_factor", &attn, err) || cfg_bool(rs, path, "truncate", &c->rope_yarn_truncate, err))
        return -1;
    c->rope_yarn_beta_fast = beta_fast != 0 ? beta_fast : 32.0f; /* Python's `or`: 0 takes the default too */
    c->rope_yarn_beta_slow = beta_slow != 0 ? beta_slow : 1.0f;
    if (!(c->rope_factor > 0) || !isfinite(c->rope_factor))
        return err_fail(err, "%s: field '%s.factor' must be a positive number", path, field);
    if (json_object_get(rs, "attention_factor") && !json_is_null(json_object_get(rs, "attention_factor"))) {
        if (!(attn > 0 && isfinite(attn)))
            return err_fail(err, "%s: field '%s.attention_factor' must be a positive number", path, field);
        c->rope_mscale = attn;
    } else if (mscale != 0 && mscale_all != 0) {
        c->rope_mscale = (float)(yarn_mscale(c->rope_factor, mscale) / yarn_mscale(c->rope_factor, mscale_all));
    } else {
        c->rope_mscale = (float)yarn_mscale(c->rope_factor, 1.0);
    }
    return 0;
}

/* RoPE as transformers 4.x writes it (rope_theta + rope_scaling) or as 5.x
 * does (rope_parameters holding rope_theta and the scaling; per layer type,
 * full_attention / sliding_attention, for Gemma 3). */
static int read_rope_scaling(json_t *cfg, const char *path, pdl_model *m, pdl_error *err) {
    pdl_model_config *c = &m->cfg;
    const char *field = "rope_scaling";
    json_t *rs = json_object_get(cfg, "rope_scaling");
    json_t *rp = json_object_get(cfg, "rope_parameters");
    if (rp && !json_is_null(rp)) {
        if (!json_is_object(rp)) return err_fail(err, "%s: field 'rope_parameters' must be an object", path);
        field = "rope_parameters";
        json_t *full = json_object_get(rp, "full_attention"), *slide = json_object_get(rp, "sliding_attention");
        if (slide) {
            if (!json_is_object(slide)) return err_fail(err, "%s: 'rope_parameters.sliding_attention' must be an object", path);
            json_t *st = json_object_get(slide, "rope_type");
            if (st && !(json_is_string(st) && strcmp(json_string_value(st), "default") == 0))
                return err_fail(err, "%s: 'rope_parameters.sliding_attention.rope_type' must be \"default\"", path);
            if (c->rope_theta_local <= 0)
                return err_fail(err, "%s: 'rope_parameters.sliding_attention' is only supported for gemma3", path);
            if (cfg_float(slide, path, "rope_theta", &c->rope_theta_local, err)) return -1;
        }
        if (full) {
            if (!json_is_object(full)) return err_fail(err, "%s: 'rope_parameters.full_attention' must be an object", path);
            rp = full;
            field = "rope_parameters.full_attention";
        }
        float partial = 0;
        if (cfg_float(rp, path, "rope_theta", &c->rope_theta, err) ||
            cfg_float(rp, path, "partial_rotary_factor", &partial, err))
            return -1;
        if (partial > 0 && partial <= 1) c->rope_dim = (int)((float)c->head_dim * partial);
        rs = rp;
    }
    if (!rs || json_is_null(rs)) return 0;
    if (!json_is_object(rs)) return err_fail(err, "%s: field '%s' must be an object or null", path, field);
    json_t *t = json_object_get(rs, "rope_type");
    if (!t) t = json_object_get(rs, "type");
    if (!t && rs == rp) return 0; /* rope_parameters with only rope_theta */
    if (!t || !json_is_string(t)) return err_fail(err, "%s: field '%s.rope_type' must be a string", path, field);
    const char *type = json_string_value(t);
    /* M-RoPE: Qwen2-VL's configs say type "mrope"; transformers rewrites it
     * to "default" and keeps mrope_section */
    json_t *ms = json_object_get(rs, "mrope_section");
    if (ms) {
        if (!json_is_array(ms) || json_array_size(ms) != 3)
            return err_fail(err, "%s: field '%s.mrope_section' must be a list of 3 integers", path, field);
        for (int i = 0; i < 3; i++) {
            json_t *e = json_array_get(ms, (size_t)i);
            if (!json_is_integer(e) || json_integer_value(e) < 0 || json_integer_value(e) > 4096)
                return err_fail(err, "%s: field '%s.mrope_section[%d]' must be a non-negative integer", path, field, i);
            c->mrope_section[i] = (int)json_integer_value(e);
        }
    } else if (strcmp(type, "mrope") == 0) {
        return err_fail(err, "%s: rope_scaling type 'mrope' needs 'mrope_section'", path);
    }
    c->rope_factor = 1.0f;
    if (strcmp(type, "mrope") == 0) return 0;
    if (cfg_float(rs, path, "factor", &c->rope_factor, err)) return -1;
    if (!(c->rope_factor > 0)) return err_fail(err, "%s: field 'rope_scaling.factor' must be positive", path);
    if (strcmp(type, "default") == 0) return 0;
    if (strcmp(type, "linear") == 0) {
        c->rope_scaling = PDL_ROPE_SCALING_LINEAR;
        return 0;
    }
    if (strcmp(type, "llama3") == 0) {
        c->rope_scaling = PDL_ROPE_SCALING_LLAMA3;
        c->rope_low_freq_factor = 1.0f;
        c->rope_high_freq_factor = 4.0f;
        c->rope_orig_ctx = 8192;
        if (cfg_float(rs, path, "low_freq_factor", &c->rope_low_freq_factor, err) ||
            cfg_float(rs, path, "high_freq_factor", &c->rope_high_freq_factor, err) ||
            cfg_int(rs, path, "original_max_position_embeddings", false, &c->rope_orig_ctx, err))
            return -1;
        if (!(c->rope_high_freq_factor > c->rope_low_freq_factor) || c->rope_orig_ctx <= 0)
            return err_fail(err, "%s: rope_scaling: need high_freq_factor > low_freq_factor and a positive "
                            "original_max_position_embeddings", path);
        return 0;
    }
    if (strcmp(type, "yarn") == 0) return read_yarn(cfg, rs, path, field, c, err);
    if (strcmp(type, "longrope") == 0 || strcmp(type, "su") == 0) {
        /* Phi-3: factors per frequency pair, long beyond the original context */
        c->rope_scaling = PDL_ROPE_SCALING_LONGROPE;
        int half = c->rope_dim / 2;
        const char *keys[2] = {"long_factor", "short_factor"};
        float **dst[2] = {&m->rope_factors, &m->rope_factors_short};
        for (int k = 0; k < 2; k++) {
            json_t *a = json_object_get(rs, keys[k]);
            if (!json_is_array(a) || (int)json_array_size(a) != half)
                return err_fail(err, "%s: field 'rope_scaling.%s' must be a list of %d numbers (rope dimension / 2)",
                                path, keys[k], half);
            float *f = malloc((size_t)(half ? half : 1) * sizeof *f);
            if (!f) return err_fail(err, "out of memory");
            *dst[k] = f;
            for (int i = 0; i < half; i++) {
                json_t *e = json_array_get(a, (size_t)i);
                if (!json_is_number(e) || !(json_number_value(e) > 0))
                    return err_fail(err, "%s: field 'rope_scaling.%s[%d]' must be a positive number", path, keys[k], i);
                f[i] = (float)json_number_value(e);
            }
        }
        /* transformers: the attention factor from max / original context
         * (Phi-3 keeps both), unless given */
        c->rope_orig_ctx = c->ctx_len;
        if (cfg_int(cfg, path, "original_max_position_embeddings", false, &c->rope_orig_ctx, err)) return -1;
        if (c->rope_orig_ctx <= 0) return err_fail(err, "%s: LongRoPE needs original_max_position_embeddings", path);
        double factor = (double)c->ctx_len / c->rope_orig_ctx;
        if (json_object_get(rs, "factor") && !json_object_get(cfg, "original_max_position_embeddings"))
            factor = c->rope_factor;
        c->rope_mscale = factor <= 1.0 ? 1.0f : (float)sqrt(1.0 + log(factor) / log((double)c->rope_orig_ctx));
        return cfg_float(rs, path, "attention_factor", &c->rope_mscale, err);
    }
    return err_fail(err, "%s: rope_scaling type '%s' is not supported (supported: default, linear, llama3, longrope, "
                    "mrope, yarn)", path, type);
}

/* A soft-cap field: a number, or null for none. */
static int cfg_softcap(json_t *cfg, const char *path, const char *key, float *out, pdl_error *err) {
    json_t *v = json_object_get(cfg, key);
    if (v && json_is_null(v)) {
        *out = 0.0f;
        return 0;
    }
    if (cfg_float(cfg, path, key, out, err)) return -1;
    if (!(*out >= 0)) return err_fail(err, "%s: field '%s' must not be negative", path, key);
    return 0;
}

/* The multipliers, scales and soft-caps a family has (its table row's
 * scalings), with transformers' defaults. */
static int read_arch_numbers(json_t *cfg, const char *path, pdl_model_config *c, pdl_error *err) {
    const pdl_arch_desc *a = c->arch;
    c->attn_scale = 1.0f / sqrtf((float)c->head_dim);
    if (a->scalings & PDL_SCALE_MULTIPLIERS) {
        c->attn_scale = 1.0f;
        if (cfg_float(cfg, path, "attention_multiplier", &c->attn_scale, err) ||
            cfg_float(cfg, path, "embedding_multiplier", &c->embed_scale, err) ||
            cfg_float(cfg, path, "residual_multiplier", &c->residual_scale, err) ||
            cfg_float(cfg, path, "logits_scaling", &c->logit_div, err))
            return -1;
    }
    if (a->scalings & PDL_SCALE_LOGIT) {
        c->logit_scale = 0.0625f;
        if (cfg_float(cfg, path, "logit_scale", &c->logit_scale, err)) return -1;
    }
    if (a->scalings & PDL_SCALE_GEMMA) {
        int qpas = 256;
        if (cfg_int(cfg, path, "query_pre_attn_scalar", false, &qpas, err)) return -1;
        if (qpas <= 0) return err_fail(err, "%s: field 'query_pre_attn_scalar' must be positive", path);
        c->attn_scale = (float)pow((double)qpas, -0.5);
        /* normalizer = hidden ** 0.5 as a tensor of the activations' dtype (F32) */
        c->embed_scale = (float)sqrt((double)c->hidden);
        c->attn_softcap = a->hf_attn_softcap;
        c->final_softcap = a->hf_final_softcap;
        if (cfg_softcap(cfg, path, "attn_logit_softcapping", &c->attn_softcap, err) ||
            cfg_softcap(cfg, path, "final_logit_softcapping", &c->final_softcap, err))
            return -1;
    }
    if (c->rope_theta_local > 0 && cfg_float(cfg, path, "rope_local_base_freq", &c->rope_theta_local, err))
        return -1; /* windowed layers' RoPE: their own base, never scaled */
    if (!(c->attn_scale > 0) || !(c->embed_scale > 0) || !(c->residual_scale > 0) || !(c->logit_div > 0))
        return err_fail(err, "%s: invalid scales: attention %g, embedding %g, residual %g, logits_scaling %g", path,
                        c->attn_scale, c->embed_scale, c->residual_scale, c->logit_div);
    return 0;
}

/* The experts of a MoE family: transformers' names for their count, k and
 * sizes (num_experts or Mixtral's num_local_experts; moe_intermediate_size,
 * else intermediate_size), norm_topk_prob, and the layouts it cannot run
 * (dense layers between sparse ones). */
static int read_experts(json_t *cfg, const char *path, pdl_model_config *c, pdl_error *err) {
    if (c->arch->moe == PDL_MOE_NONE) return 0;
    if (cfg_int(cfg, path, "num_experts", false, &c->n_experts, err) ||
        cfg_int(cfg, path, "num_local_experts", false, &c->n_experts, err) ||
        cfg_int(cfg, path, "num_experts_per_tok", true, &c->n_experts_used, err))
        return -1;
    if (c->n_experts <= 0) return err_fail(err, "%s: field 'num_experts' (or 'num_local_experts') missing or 0", path);
    c->ffn_expert = c->ffn;
    if (cfg_int(cfg, path, "moe_intermediate_size", false, &c->ffn_expert, err) ||
        cfg_bool(cfg, path, "norm_topk_prob", &c->router_norm, err))
        return -1;
    if (c->arch->shared_expert_gate &&
        cfg_int(cfg, path, "shared_expert_intermediate_size", true, &c->ffn_shared, err))
        return -1;
    int step = 1;
    if (cfg_int(cfg, path, "decoder_sparse_step", false, &step, err)) return -1;
    json_t *dense = json_object_get(cfg, "mlp_only_layers");
    if (step != 1 || (dense && !json_is_null(dense) && (!json_is_array(dense) || json_array_size(dense) > 0)))
        return err_fail(err, "%s: dense layers between sparse ones (decoder_sparse_step %d, mlp_only_layers) are not "
                        "supported", path, step);
    return 0;
}

/* The window layout: sliding_window, sliding_window_pattern (Gemma 3,
 * Cohere2: every p-th layer global), and layer_types when listed, which must
 * say exactly what the pattern says (other layouts are not supported). */
static int read_window(json_t *cfg, const char *path, pdl_model_config *c, int default_window, pdl_error *err) {
    c->sliding_window = default_window;
    if (cfg_int(cfg, path, "sliding_window", false, &c->sliding_window, err) ||
        cfg_int(cfg, path, "sliding_window_pattern", false, &c->swa_pattern, err))
        return -1;
    json_t *lt = json_object_get(cfg, "layer_types");
    if (!lt || json_is_null(lt)) return 0;
    if (!json_is_array(lt) || (int)json_array_size(lt) != c->n_layers)
        return err_fail(err, "%s: field 'layer_types' must list %d layers", path, c->n_layers);
    for (int l = 0; l < c->n_layers; l++) {
        json_t *e = json_array_get(lt, (size_t)l);
        const char *want = model_layer_windowed(c, l) ? "sliding_attention" : "full_attention";
        if (!json_is_string(e) || strcmp(json_string_value(e), want) != 0)
            return err_fail(err,
                            "%s: layer_types[%d] must be \"%s\" (supported: every %d-th layer global, window %d)",
                            path, l, want, c->swa_pattern, c->sliding_window);
    }
    return 0;
}

/* A hybrid family (Qwen3.5, Qwen3-Next): the Gated DeltaNet's shape
 * (transformers' Qwen3_5TextConfig / Qwen3NextConfig defaults, the same,
 * for fields left out), and which layers are
 * linear: layer_types ("linear_attention" / "full_attention"), else every
 * full_attention_interval-th layer attends fully. Text rows turn every
 * M-RoPE section by the same position: plain RoPE, so the sections are
 * dropped. */
static int read_hybrid(json_t *cfg, const char *path, pdl_model_config *c, pdl_error *err) {
    if (!c->arch->hybrid) return 0;
    c->lin_conv = 4, c->lin_k_dim = 128, c->lin_v_dim = 128, c->lin_k_heads = 16, c->lin_v_heads = 32;
    int interval = 4;
    if (cfg_int(cfg, path, "linear_conv_kernel_dim", false, &c->lin_conv, err) ||
        cfg_int(cfg, path, "linear_key_head_dim", false, &c->lin_k_dim, err) ||
        cfg_int(cfg, path, "linear_value_head_dim", false, &c->lin_v_dim, err) ||
        cfg_int(cfg, path, "linear_num_key_heads", false, &c->lin_k_heads, err) ||
        cfg_int(cfg, path, "linear_num_value_heads", false, &c->lin_v_heads, err) ||
        cfg_int(cfg, path, "full_attention_interval", false, &interval, err) ||
        cfg_int(cfg, path, "mtp_num_hidden_layers", false, &c->n_mtp_layers, err))
        return -1;
    if (c->n_mtp_layers < 0) return err_fail(err, "%s: mtp_num_hidden_layers %d is negative", path, c->n_mtp_layers);
    if (c->lin_k_heads <= 0 || c->lin_v_heads <= 0 || c->lin_v_heads % c->lin_k_heads || c->lin_k_dim <= 0 ||
        c->lin_v_dim <= 0 || c->lin_conv < 2 || c->lin_conv > 8)
        return err_fail(err, "%s: invalid linear attention: %d key heads of %d, %d value heads of %d, kernel %d (value "
                        "heads must be a multiple of key heads; kernel 2..8)", path, c->lin_k_heads, c->lin_k_dim,
                        c->lin_v_heads, c->lin_v_dim, c->lin_conv);
    c->lin_a_log = true;
    memset(c->mrope_section, 0, sizeof c->mrope_section);
    json_t *lt = json_object_get(cfg, "layer_types");
    if (!lt || json_is_null(lt)) return model_set_layer_kinds(c, NULL, interval, path, err);
    if (!json_is_array(lt) || (int)json_array_size(lt) != c->n_layers)
        return err_fail(err, "%s: field 'layer_types' must list %d layers", path, c->n_layers);
    bool *rec = calloc((size_t)c->n_layers, sizeof *rec);
    if (!rec) return err_fail(err, "out of memory");
    for (int l = 0; l < c->n_layers; l++) {
        const char *t = json_string_value(json_array_get(lt, (size_t)l));
        rec[l] = t && strcmp(t, "linear_attention") == 0;
        if (!t || (!rec[l] && strcmp(t, "full_attention") != 0)) {
            free(rec);
            return err_fail(err, "%s: layer_types[%d] must be \"linear_attention\" or \"full_attention\"", path, l);
        }
    }
    int rc = model_set_layer_kinds(c, rec, 0, path, err);
    free(rec);
    return rc;
}

static int read_config(pdl_model *m, json_t *cfg, const char *path, pdl_error *err) {
    pdl_model_config *c = &m->cfg;
    json_t *mt = json_object_get(cfg, "model_type");
    if (!mt || !json_is_string(mt)) return err_fail(err, "%s: field 'model_type' missing or not a string", path);
    const char *type = json_string_value(mt);
    const pdl_arch_desc *a = arch_by_hf(type);
    if (!a) {
        char list[512];
        arch_supported(false, list, sizeof list);
        return err_fail(err, "%s: model_type '%s' is not supported (supported: %s)", path, type, list);
    }
    arch_apply(a, false, c);
    /* a family whose configs may leave sizes out (Gemma 3's text_config)
     * starts from transformers' defaults; the others must give them */
    const pdl_hf_defaults *d = a->hf_defaults;
    if (d) {
        c->hidden = d->hidden, c->n_layers = d->n_layers, c->n_heads = d->n_heads, c->ffn = d->ffn;
        c->vocab = d->vocab, c->n_kv_heads = d->n_kv_heads, c->head_dim = d->head_dim, c->ctx_len = d->ctx_len;
    }
    if (cfg_int(cfg, path, "hidden_size", !d, &c->hidden, err) ||
        cfg_int(cfg, path, "num_hidden_layers", !d, &c->n_layers, err) ||
        cfg_int(cfg, path, "num_attention_heads", !d, &c->n_heads, err) ||
        /* Qwen3.5-MoE's config has no dense width (transformers deletes it) */
        cfg_int(cfg, path, "intermediate_size", !d && !(a->hybrid && a->moe != PDL_MOE_NONE), &c->ffn, err) ||
        cfg_int(cfg, path, "vocab_size", !d, &c->vocab, err))
        return -1;
    if (c->n_heads <= 0) return err_fail(err, "%s: field 'num_attention_heads' must be positive", path);
    if (!d) {
        c->n_kv_heads = c->n_heads;
        c->head_dim = c->hidden / c->n_heads;
        c->ctx_len = 0;
    }
    if (cfg_int(cfg, path, "num_key_value_heads", false, &c->n_kv_heads, err) ||
        cfg_int(cfg, path, "head_dim", false, &c->head_dim, err) ||
        cfg_int(cfg, path, "max_position_embeddings", false, &c->ctx_len, err))
        return -1;
    c->rope_dim = c->head_dim;
    /* Qwen3NextConfig (and Qwen3.5's configs, derived from it) turn a
     * quarter of each head unless told otherwise */
    float partial = a->hybrid ? 0.25f : 1.0f;
    if (cfg_float(cfg, path, "partial_rotary_factor", &partial, err)) return -1;
    if (!(partial > 0 && partial <= 1))
        return err_fail(err, "%s: field 'partial_rotary_factor' must be in (0, 1], got %g", path, partial);
    c->rope_dim = (int)((float)c->head_dim * partial); /* int(head_dim * factor), as transformers */
    c->rms_eps = a->hf_eps > 0 ? a->hf_eps : c->norm == PDL_NORM_LAYER ? 1e-5f : 1e-6f;
    c->rope_theta = d ? d->rope_theta : 10000.0f;
    if (cfg_float(cfg, path, c->norm == PDL_NORM_LAYER ? "layer_norm_eps" : "rms_norm_eps", &c->rms_eps, err) ||
        cfg_float(cfg, path, "rope_theta", &c->rope_theta, err))
        return -1;
    /* the table holds transformers' default of tie_word_embeddings */
    if (cfg_bool(cfg, path, "tie_word_embeddings", &c->tied_embeddings, err)) return -1;
    if (read_arch_numbers(cfg, path, c, err) || read_experts(cfg, path, c, err)) return -1;
    if (c->ffn <= 0) c->ffn = c->ffn_expert; /* no dense width given: only the experts' is used */
    if (!a->qkv_bias) {
        bool bias = false;
        if (cfg_bool(cfg, path, "attention_bias", &bias, err)) return -1;
        c->qkv_bias = bias;
    }
    bool flag = false;
    if (cfg_bool(cfg, path, "mlp_bias", &flag, err)) return -1;
    if (flag) return err_fail(err, "%s: mlp_bias = true is not supported", path);
    flag = false;
    if (cfg_bool(cfg, path, "use_qk_norm", &flag, err)) return -1;
    if (flag && c->qk_norm == PDL_QK_NORM_NONE)
        return err_fail(err, "%s: use_qk_norm = true is not supported for %s", path, type);
    json_t *clip = json_object_get(cfg, "clip_qkv");
    if (clip && !json_is_null(clip)) return err_fail(err, "%s: clip_qkv is not supported", path);
    /* Gemma's hidden_activation wins over its (legacy) hidden_act */
    const char *want_act = c->act == PDL_ACT_GELU_TANH ? "gelu_pytorch_tanh" : c->act == PDL_ACT_GELU_ERF ? "gelu"
                                                                                                       : "silu";
    if (a->encoder) {
        json_t *pe = json_object_get(cfg, "position_embedding_type");
        if (pe && !json_is_null(pe) && !(json_is_string(pe) && strcmp(json_string_value(pe), "absolute") == 0))
            return err_fail(err, "%s: position_embedding_type must be \"absolute\" for %s", path, type);
    }
    json_t *act = json_object_get(cfg, "hidden_activation");
    if (!act || json_is_null(act)) act = json_object_get(cfg, "hidden_act");
    if (act && !(json_is_string(act) && strcmp(json_string_value(act), want_act) == 0))
        return err_fail(err, "%s: the activation must be \"%s\" for %s", path, want_act, type);
    /* gpt-oss's clamped SwiGLU: the limit 7 and alpha 1.702 are fixed, as llama.cpp fixes them */
    if (c->act == PDL_ACT_SWIGLU_OAI) {
        float limit = PDL_SWIGLU_OAI_LIMIT;
        if (cfg_float(cfg, path, "swiglu_limit", &limit, err)) return -1;
        if (limit != PDL_SWIGLU_OAI_LIMIT)
            return err_fail(err, "%s: swiglu_limit %g is not supported (gpt-oss's is 7)", path, limit);
    }
    c->sliding_window = 0;
    if (a->window == PDL_WINDOW_PATTERN) {
        if (read_window(cfg, path, c, 4096, err)) return -1;
    } else if (a->window == PDL_WINDOW_UNIFORM) {
        if (cfg_int(cfg, path, "sliding_window", false, &c->sliding_window, err)) return -1;
    } else if (a->window == PDL_WINDOW_REFUSED) {
        bool use = false;
        if (cfg_bool(cfg, path, "use_sliding_window", &use, err)) return -1;
        if (use) return err_fail(err, "%s: use_sliding_window = true is not supported for %s", path, type);
    }
    if (read_rope_scaling(cfg, path, m, err) || read_hybrid(cfg, path, c, err)) return -1;
    c->bos_id = -1;
    c->n_eos = 0;
    if (cfg_int(cfg, path, "bos_token_id", false, &c->bos_id, err) || cfg_eos(cfg, path, c, err)) return -1;
    return 0;
}

static int read_weights(pdl_model *m, const char *dir, pdl_error *err) {
    pdl_model_config *c = &m->cfg;
    const pdl_tensor_set *ts = st_tensors(m->st);
    if (c->arch->encoder) return model_take_bert(m, ts, false, dir, err);
    pdl_model_weights *w = &m->w;
    /* the text model's tensors: "model.", or inside a multimodal checkpoint
     * (Gemma 3): "language_model.model." as published, "model.language_model."
     * as newer transformers save it */
    static const char *const prefixes[][2] = {
        {"model.", "lm_head.weight"},
        {"language_model.model.", "language_model.lm_head.weight"},
        {"model.language_model.", "lm_head.weight"},
    };
    size_t p = 0;
    char name[PDL_TENSOR_NAME_MAX];
    for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++) {
        snprintf(name, sizeof name, "%sembed_tokens.weight", prefixes[i][0]);
        if (tensor_set_find(ts, name)) {
            p = i;
            break;
        }
    }
    const char *prefix = prefixes[p][0];
    snprintf(name, sizeof name, "%sembed_tokens.weight", prefix);
    if (model_take_tensor(ts, name, true, dir, &w->tok_embd, err)) return -1;
    snprintf(name, sizeof name, "%snorm.weight", prefix);
    if (model_take_tensor(ts, name, true, dir, &w->output_norm, err) ||
        model_take_tensor(ts, prefixes[p][1], !c->tied_embeddings, dir, &w->output, err))
        return -1;
    return model_take_layers(m, ts, prefix, dir, err);
}

static bool file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* LLaVA's text_config as llava-hf publishes it lists only what differs
 * from transformers' LlamaConfig / MistralConfig (llava-1.5-7b-hf: model
 * type, vocabulary, context, epsilon): the defaults those classes fill in,
 * for the fields left out. */
static void llava_text_defaults(json_t *tc) {
    const char *type = json_string_value(json_object_get(tc, "model_type"));
    bool mistral = type && strcmp(type, "mistral") == 0;
    if (!mistral && !(type && strcmp(type, "llama") == 0)) return; /* other text models must be complete */
    static const struct {
        const char *key;
        long llama, mistral; /* -1: no default here (the loader's own applies) */
    } ints[] = {
        {"vocab_size", 32000, 32000},           {"hidden_size", 4096, 4096},
        {"intermediate_size", 11008, 14336},    {"num_hidden_layers", 32, 32},
        {"num_attention_heads", 32, 32},        {"num_key_value_heads", -1, 8}, /* llama: = heads */
        {"max_position_embeddings", 2048, 4096 * 32}, {"sliding_window", -1, 4096},
    };
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        long v = mistral ? ints[i].mistral : ints[i].llama;
        if (v >= 0 && !json_object_get(tc, ints[i].key)) json_object_set_new(tc, ints[i].key, json_integer(v));
    }
    if (!json_object_get(tc, "rms_norm_eps")) json_object_set_new(tc, "rms_norm_eps", json_real(1e-6));
    if (!json_object_get(tc, "rope_theta")) json_object_set_new(tc, "rope_theta", json_real(10000.0));
    if (!json_object_get(tc, "hidden_act")) json_object_set_new(tc, "hidden_act", json_string("silu"));
    if (!json_object_get(tc, "tie_word_embeddings")) json_object_set_new(tc, "tie_word_embeddings", json_false());
}

/* A sentence-transformers folder's pooling: modules.json names a Pooling
 * module's folder (1_Pooling) whose config.json sets one pooling_mode_*
 * (lasttoken, mean_tokens or cls_token), and a Normalize module. No
 * modules.json: nothing declared. */
static int read_pooling(pdl_model_config *c, const char *dir, pdl_error *err) {
    char path[4096];
    snprintf(path, sizeof path, "%s/modules.json", dir);
    if (!file_exists(path)) return 0;
    json_t *mods = NULL;
    if (json_file_load(path, JSON_REJECT_DUPLICATES, &mods, err)) return -1;
    if (!json_is_array(mods)) {
        json_decref(mods);
        return err_fail(err, "%s: expected a list of modules", path);
    }
    size_t i;
    json_t *mod;
    const char *pool_dir = NULL;
    json_array_foreach(mods, i, mod) {
        const char *type = json_string_value(json_object_get(mod, "type"));
        if (!type) continue;
        if (strstr(type, "Normalize")) c->pool_normalize = true;
        if (strstr(type, "Pooling")) pool_dir = json_string_value(json_object_get(mod, "path"));
    }
    int rc = 0;
    if (pool_dir && !strstr(pool_dir, "..")) {
        snprintf(path, sizeof path, "%s/%s/config.json", dir, pool_dir);
        json_t *pc = NULL;
        if (file_exists(path) && (rc = load_json_file(path, &pc, err)) == 0) {
            c->pooling = json_is_true(json_object_get(pc, "pooling_mode_lasttoken"))  ? PDL_POOLING_LAST
                         : json_is_true(json_object_get(pc, "pooling_mode_mean_tokens")) ? PDL_POOLING_MEAN
                         : json_is_true(json_object_get(pc, "pooling_mode_cls_token"))   ? PDL_POOLING_CLS
                                                                                         : PDL_POOLING_NONE;
            json_decref(pc);
        }
    }
    json_decref(mods);
    return rc;
}

int model_load_hf(pdl_model *m, const char *dir, pdl_error *err) {
    char path[4096];
    snprintf(m->source, sizeof m->source, "safetensors");
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (!file_exists(path))
        return err_fail(err, "%s: not a model: no config.json in this folder (expected a Hugging Face folder or a .gguf file)",
                        dir);
    json_t *cfg = NULL;
    if (load_json_file(path, &cfg, err)) return -1;
    /* multimodal folders (Gemma3ForConditionalGeneration,
     * LlavaForConditionalGeneration, LlavaNextForConditionalGeneration): the
     * text model is text_config (LlavaConfig's default type: llama); token
     * ids may stay at the top level. The vision half: src/vision/. */
    json_t *mt = json_object_get(cfg, "model_type"), *tc = json_object_get(cfg, "text_config");
    json_t *use = cfg;
    const char *mts = json_is_string(mt) ? json_string_value(mt) : "";
    bool gemma3 = strcmp(mts, "gemma3") == 0, llava = strcmp(mts, "llava") == 0 || strcmp(mts, "llava_next") == 0;
    /* Qwen3.5 (Qwen3_5ForConditionalGeneration): the text model is
     * text_config (qwen3_5_text); its vision tower is left for later */
    bool qwen35 = strcmp(mts, "qwen3_5") == 0 || strcmp(mts, "qwen3_5_moe") == 0;
    /* Qwen2.5-VL: the text model's fields at the top level (transformers
     * 4.49-4.51), or also in text_config (later versions); either is read */
    if (strcmp(mts, "qwen2_5_vl") == 0 && json_is_object(tc)) {
        use = tc;
        json_object_set_new(tc, "model_type", json_string("qwen2_5_vl_text"));
        const char *keep[] = {"bos_token_id", "eos_token_id", "rope_scaling", "rope_theta", "tie_word_embeddings"};
        for (size_t i = 0; i < sizeof keep / sizeof *keep; i++)
            if (!json_object_get(tc, keep[i]) && json_object_get(cfg, keep[i]))
                json_object_set(tc, keep[i], json_object_get(cfg, keep[i]));
    }
    if (gemma3 || llava || qwen35) {
        if (!json_is_object(tc)) {
            json_decref(cfg);
            return err_fail(err, "%s: model_type '%s' needs a 'text_config' object", path, mts);
        }
        use = tc;
        if (gemma3) json_object_set_new(tc, "model_type", json_string("gemma3_text"));
        else if (qwen35 && !json_is_string(json_object_get(tc, "model_type")))
            json_object_set_new(tc, "model_type", json_string(strcmp(mts, "qwen3_5") == 0 ? "qwen3_5_text"
                                                                                        : "qwen3_5_moe_text"));
        else if (!json_is_string(json_object_get(tc, "model_type"))) json_object_set_new(tc, "model_type", json_string("llama"));
        if (llava) llava_text_defaults(tc);
        const char *ids[] = {"bos_token_id", "eos_token_id", "tie_word_embeddings"}; /* the last: Qwen3.5's */
        for (int i = 0; i < (qwen35 ? 3 : 2); i++)
            if (!json_object_get(tc, ids[i]) && json_object_get(cfg, ids[i]))
                json_object_set(tc, ids[i], json_object_get(cfg, ids[i]));
    }
    int rc = read_config(m, use, path, err);
    m->cfg.matryoshka = json_is_true(json_object_get(cfg, "is_matryoshka")) ||
                        json_is_array(json_object_get(cfg, "matryoshka_dimensions"));
    json_decref(cfg);
    if (rc || read_pooling(&m->cfg, dir, err)) return -1;

    /* generation_config.json overrides bos/eos when present. */
    snprintf(path, sizeof path, "%s/generation_config.json", dir);
    if (file_exists(path)) {
        json_t *gen = NULL;
        if (load_json_file(path, &gen, err)) return -1;
        rc = cfg_int(gen, path, "bos_token_id", false, &m->cfg.bos_id, err) || cfg_eos(gen, path, &m->cfg, err);
        json_decref(gen);
        if (rc) return -1;
    }

    /* MLX-quantized folders: config.json's quantization block folds each
     * X.weight/.scales/.biases triple into one tensor (format/mlx_quant.c) */
    if (mlx_open_dir(&m->st, dir, err) || read_weights(m, dir, err)) return -1;
    if (m->cfg.arch->scalings & PDL_SCALE_GEMMA) {
        /* transformers multiplies by sqrt(hidden) as a tensor of the
         * embeddings' dtype (as Gemma was trained): rounded to BF16 or F16
         * with such weights (sqrt(2560) = 50.596 becomes 50.5) */
        float sc = m->cfg.embed_scale;
        pdl_dtype dt = m->w.tok_embd.dtype;
        if (dtype_is_mlx(dt)) dt = m->w.tok_embd.mlx.dtype; /* mlx-lm rounds it to the scales' type */
        if (dt == PDL_DTYPE_BF16) m->cfg.embed_scale = fp16_bf16_to_f32(fp16_f32_to_bf16(sc));
        else if (dt == PDL_DTYPE_F16) m->cfg.embed_scale = fp16_f16_to_f32(fp16_f32_to_f16(sc));
    }
    if (model_finish(m, err)) return -1;

    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    if (file_exists(path)) {
        pdl_error terr;
        if (tok_load_hf_dir(&m->tok, dir, &terr)) {
            m->tok = NULL;
            snprintf(m->tok_error, sizeof m->tok_error, "%s", terr.message);
        }
    } else {
        snprintf(m->tok_error, sizeof m->tok_error, "%s: no tokenizer.json", dir);
    }
    return 0;
}
