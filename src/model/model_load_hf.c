/*
 * model_load_hf.c - a model description from a Hugging Face folder:
 * config.json (+ generation_config.json) for the hyperparameters and
 * safetensors weights with transformers' names (model.layers.N.self_attn...).
 *
 * Hugging Face keeps Q/K in the rotate-half layout, so every architecture
 * loaded from here runs with PDL_ROPE_NEOX, except Cohere, whose RoPE is
 * interleaved (adjacent pairs, PDL_ROPE_NORM). Gemma 2 applies its norms as
 * (1 + w): the loader asks pdl_model_finish to fold the 1 in.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "model/model.h"
#include "util/error.h"
#include "util/json_file.h"

/* Parses a JSON object file into *out. */
static int load_json_file(const char *path, json_t **out, pdl_error *err) {
    if (pdl_json_load_file(path, JSON_REJECT_DUPLICATES, out, err)) return -1;
    if (!json_is_object(*out)) {
        json_decref(*out);
        *out = NULL;
        return pdl_fail(err, "%s: top level is not a JSON object", path);
    }
    return 0;
}

/* Integer field: absent or null keeps *out (an error when required). */
static int cfg_int(json_t *cfg, const char *path, const char *key, bool required, int *out, pdl_error *err) {
    json_t *v = json_object_get(cfg, key);
    if (!v || json_is_null(v)) {
        if (required) return pdl_fail(err, "%s: missing field '%s'", path, key);
        return 0;
    }
    if (!json_is_integer(v)) return pdl_fail(err, "%s: field '%s' must be an integer", path, key);
    json_int_t x = json_integer_value(v);
    if (x < 0 || x > INT32_MAX) return pdl_fail(err, "%s: field '%s' = %lld is out of range", path, key, (long long)x);
    *out = (int)x;
    return 0;
}

static int cfg_float(json_t *cfg, const char *path, const char *key, float *out, pdl_error *err) {
    json_t *v = json_object_get(cfg, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_number(v)) return pdl_fail(err, "%s: field '%s' must be a number", path, key);
    *out = (float)json_number_value(v);
    return 0;
}

static int cfg_bool(json_t *cfg, const char *path, const char *key, bool *out, pdl_error *err) {
    json_t *v = json_object_get(cfg, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_boolean(v)) return pdl_fail(err, "%s: field '%s' must be true or false", path, key);
    *out = json_is_true(v);
    return 0;
}

/* eos_token_id may be an integer or a list of integers. */
static int cfg_eos(json_t *cfg, const char *path, pdl_model_config *c, pdl_error *err) {
    json_t *v = json_object_get(cfg, "eos_token_id");
    if (!v || json_is_null(v)) return 0;
    c->n_eos = 0;
    if (json_is_integer(v)) {
        c->eos_ids[c->n_eos++] = (int32_t)json_integer_value(v);
        return 0;
    }
    if (!json_is_array(v)) return pdl_fail(err, "%s: field 'eos_token_id' must be an integer or a list", path);
    size_t i;
    json_t *e;
    json_array_foreach(v, i, e) {
        if (!json_is_integer(e)) return pdl_fail(err, "%s: field 'eos_token_id[%zu]' must be an integer", path, i);
        if (c->n_eos < PDL_MAX_EOS) c->eos_ids[c->n_eos++] = (int32_t)json_integer_value(e);
    }
    return 0;
}

static int read_rope_scaling(json_t *cfg, const char *path, pdl_model_config *c, pdl_error *err) {
    json_t *rs = json_object_get(cfg, "rope_scaling");
    if (!rs || json_is_null(rs)) return 0;
    if (!json_is_object(rs)) return pdl_fail(err, "%s: field 'rope_scaling' must be an object or null", path);
    json_t *t = json_object_get(rs, "rope_type");
    if (!t) t = json_object_get(rs, "type");
    if (!t || !json_is_string(t)) return pdl_fail(err, "%s: field 'rope_scaling.rope_type' must be a string", path);
    const char *type = json_string_value(t);
    c->rope_factor = 1.0f;
    if (cfg_float(rs, path, "factor", &c->rope_factor, err)) return -1;
    if (!(c->rope_factor > 0)) return pdl_fail(err, "%s: field 'rope_scaling.factor' must be positive", path);
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
            return pdl_fail(err, "%s: rope_scaling: need high_freq_factor > low_freq_factor and a positive "
                            "original_max_position_embeddings", path);
        return 0;
    }
    return pdl_fail(err, "%s: rope_scaling type '%s' is not supported (supported: default, linear, llama3)", path,
                    type);
}

/* A soft-cap field: a number, or null for none. */
static int cfg_softcap(json_t *cfg, const char *path, const char *key, float *out, pdl_error *err) {
    json_t *v = json_object_get(cfg, key);
    if (v && json_is_null(v)) {
        *out = 0.0f;
        return 0;
    }
    if (cfg_float(cfg, path, key, out, err)) return -1;
    if (!(*out >= 0)) return pdl_fail(err, "%s: field '%s' must not be negative", path, key);
    return 0;
}

/* The multipliers, scales and soft-caps of Granite, Cohere and Gemma 2, with
 * transformers' defaults. */
static int read_arch_numbers(json_t *cfg, const char *path, pdl_model_config *c, pdl_error *err) {
    c->attn_scale = 1.0f / sqrtf((float)c->head_dim);
    if (c->arch == PDL_ARCH_GRANITE) {
        c->attn_scale = 1.0f;
        if (cfg_float(cfg, path, "attention_multiplier", &c->attn_scale, err) ||
            cfg_float(cfg, path, "embedding_multiplier", &c->embed_scale, err) ||
            cfg_float(cfg, path, "residual_multiplier", &c->residual_scale, err) ||
            cfg_float(cfg, path, "logits_scaling", &c->logit_div, err))
            return -1;
    } else if (c->arch == PDL_ARCH_COHERE) {
        c->logit_scale = 0.0625f;
        if (cfg_float(cfg, path, "logit_scale", &c->logit_scale, err)) return -1;
        bool qk_norm = false;
        if (cfg_bool(cfg, path, "use_qk_norm", &qk_norm, err)) return -1;
        if (qk_norm) return pdl_fail(err, "%s: use_qk_norm = true is not supported for cohere", path);
    } else if (c->arch == PDL_ARCH_GEMMA2) {
        int qpas = 256;
        if (cfg_int(cfg, path, "query_pre_attn_scalar", false, &qpas, err)) return -1;
        if (qpas <= 0) return pdl_fail(err, "%s: field 'query_pre_attn_scalar' must be positive", path);
        c->attn_scale = (float)pow((double)qpas, -0.5);
        /* normalizer = hidden ** 0.5 as a tensor of the activations' dtype (F32) */
        c->embed_scale = (float)sqrt((double)c->hidden);
        c->attn_softcap = 50.0f;
        c->final_softcap = 30.0f;
        if (cfg_softcap(cfg, path, "attn_logit_softcapping", &c->attn_softcap, err) ||
            cfg_softcap(cfg, path, "final_logit_softcapping", &c->final_softcap, err))
            return -1;
    }
    if (!(c->attn_scale > 0) || !(c->embed_scale > 0) || !(c->residual_scale > 0) || !(c->logit_div > 0))
        return pdl_fail(err, "%s: invalid scales: attention %g, embedding %g, residual %g, logits_scaling %g", path,
                        c->attn_scale, c->embed_scale, c->residual_scale, c->logit_div);
    return 0;
}

/* Gemma 2 alternates windowed (even) and global (odd) layers; a config that
 * lists layer_types must say exactly that. */
static int check_gemma2_layer_types(json_t *cfg, const char *path, const pdl_model_config *c, pdl_error *err) {
    json_t *lt = json_object_get(cfg, "layer_types");
    if (!lt || json_is_null(lt)) return 0;
    if (!json_is_array(lt) || (int)json_array_size(lt) != c->n_layers)
        return pdl_fail(err, "%s: field 'layer_types' must list %d layers", path, c->n_layers);
    for (int l = 0; l < c->n_layers; l++) {
        json_t *e = json_array_get(lt, (size_t)l);
        const char *want = l % 2 == 0 ? "sliding_attention" : "full_attention";
        if (!json_is_string(e) || strcmp(json_string_value(e), want) != 0)
            return pdl_fail(err, "%s: layer_types[%d] must be \"%s\" (only Gemma 2's alternation is supported)",
                            path, l, want);
    }
    return 0;
}

static int read_config(pdl_model *m, json_t *cfg, const char *path, pdl_error *err) {
    pdl_model_config *c = &m->cfg;
    json_t *mt = json_object_get(cfg, "model_type");
    if (!mt || !json_is_string(mt)) return pdl_fail(err, "%s: field 'model_type' missing or not a string", path);
    const char *type = json_string_value(mt);
    c->rope_style = PDL_ROPE_NEOX;
    if (strcmp(type, "llama") == 0) {
        c->arch = PDL_ARCH_LLAMA;
    } else if (strcmp(type, "mistral") == 0) {
        c->arch = PDL_ARCH_MISTRAL;
    } else if (strcmp(type, "qwen2") == 0) {
        c->arch = PDL_ARCH_QWEN2;
        c->qkv_bias = true;
    } else if (strcmp(type, "qwen3") == 0) {
        c->arch = PDL_ARCH_QWEN3;
        c->qk_norm = true;
    } else if (strcmp(type, "granite") == 0) {
        c->arch = PDL_ARCH_GRANITE;
    } else if (strcmp(type, "cohere") == 0) {
        c->arch = PDL_ARCH_COHERE;
        c->rope_style = PDL_ROPE_NORM;
        c->norm = PDL_NORM_LAYER;
        c->parallel_block = true;
    } else if (strcmp(type, "gemma2") == 0) {
        c->arch = PDL_ARCH_GEMMA2;
        c->post_norms = true;
        c->norm_plus_one = true;
        c->act = PDL_ACT_GELU_TANH;
        c->swa_pattern = 2;
    } else {
        return pdl_fail(err,
                        "%s: model_type '%s' is not supported (supported: llama, mistral, qwen2, qwen3, granite, "
                        "cohere, gemma2)",
                        path, type);
    }
    if (cfg_int(cfg, path, "hidden_size", true, &c->hidden, err) ||
        cfg_int(cfg, path, "num_hidden_layers", true, &c->n_layers, err) ||
        cfg_int(cfg, path, "num_attention_heads", true, &c->n_heads, err) ||
        cfg_int(cfg, path, "intermediate_size", true, &c->ffn, err) ||
        cfg_int(cfg, path, "vocab_size", true, &c->vocab, err))
        return -1;
    if (c->n_heads <= 0) return pdl_fail(err, "%s: field 'num_attention_heads' must be positive", path);
    c->n_kv_heads = c->n_heads;
    c->head_dim = c->hidden / c->n_heads;
    c->ctx_len = 0;
    if (cfg_int(cfg, path, "num_key_value_heads", false, &c->n_kv_heads, err) ||
        cfg_int(cfg, path, "head_dim", false, &c->head_dim, err) ||
        cfg_int(cfg, path, "max_position_embeddings", false, &c->ctx_len, err))
        return -1;
    c->rope_dim = c->head_dim;
    c->rms_eps = c->arch == PDL_ARCH_COHERE ? 1e-5f : 1e-6f;
    c->rope_theta = 10000.0f;
    if (cfg_float(cfg, path, c->norm == PDL_NORM_LAYER ? "layer_norm_eps" : "rms_norm_eps", &c->rms_eps, err) ||
        cfg_float(cfg, path, "rope_theta", &c->rope_theta, err))
        return -1;
    /* transformers' LlamaConfig, MistralConfig, Qwen2Config, Qwen3Config and
     * GraniteConfig default tie_word_embeddings to false, CohereConfig and
     * Gemma2Config to true */
    c->tied_embeddings = c->arch == PDL_ARCH_COHERE || c->arch == PDL_ARCH_GEMMA2;
    if (cfg_bool(cfg, path, "tie_word_embeddings", &c->tied_embeddings, err)) return -1;
    if (read_arch_numbers(cfg, path, c, err)) return -1;
    if (c->arch != PDL_ARCH_QWEN2) {
        bool bias = false;
        if (cfg_bool(cfg, path, "attention_bias", &bias, err)) return -1;
        c->qkv_bias = bias;
        bool mlp_bias = false;
        if (cfg_bool(cfg, path, "mlp_bias", &mlp_bias, err)) return -1;
        if (mlp_bias) return pdl_fail(err, "%s: mlp_bias = true is not supported", path);
    }
    /* Gemma's hidden_activation wins over its (legacy) hidden_act */
    const char *want_act = c->act == PDL_ACT_GELU_TANH ? "gelu_pytorch_tanh" : "silu";
    json_t *act = json_object_get(cfg, "hidden_activation");
    if (!act || json_is_null(act)) act = json_object_get(cfg, "hidden_act");
    if (act && !(json_is_string(act) && strcmp(json_string_value(act), want_act) == 0))
        return pdl_fail(err, "%s: the activation must be \"%s\" for %s", path, want_act, type);
    c->sliding_window = 0;
    if (c->arch == PDL_ARCH_GEMMA2) {
        c->sliding_window = 4096;
        if (cfg_int(cfg, path, "sliding_window", false, &c->sliding_window, err) ||
            check_gemma2_layer_types(cfg, path, c, err))
            return -1;
    } else if (c->arch == PDL_ARCH_MISTRAL) {
        if (cfg_int(cfg, path, "sliding_window", false, &c->sliding_window, err)) return -1;
    } else if (c->arch == PDL_ARCH_QWEN2 || c->arch == PDL_ARCH_QWEN3) {
        bool use = false;
        if (cfg_bool(cfg, path, "use_sliding_window", &use, err)) return -1;
        if (use) return pdl_fail(err, "%s: use_sliding_window = true is not supported for %s", path, type);
    }
    if (read_rope_scaling(cfg, path, c, err)) return -1;
    c->bos_id = -1;
    c->n_eos = 0;
    if (cfg_int(cfg, path, "bos_token_id", false, &c->bos_id, err) || cfg_eos(cfg, path, c, err)) return -1;
    return 0;
}

static int read_weights(pdl_model *m, const char *dir, pdl_error *err) {
    pdl_model_config *c = &m->cfg;
    const pdl_tensor_set *ts = st_tensors(m->st);
    pdl_model_weights *w = &m->w;
    if (pdl_model_take_tensor(ts, "model.embed_tokens.weight", true, dir, &w->tok_embd, err) ||
        pdl_model_take_tensor(ts, "model.norm.weight", true, dir, &w->output_norm, err) ||
        pdl_model_take_tensor(ts, "lm_head.weight", !c->tied_embeddings, dir, &w->output, err))
        return -1;
    return pdl_model_take_layers(m, ts, true, dir, err);
}

static bool file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

int pdl_model_load_hf(pdl_model *m, const char *dir, pdl_error *err) {
    char path[4096];
    snprintf(m->source, sizeof m->source, "safetensors");
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (!file_exists(path))
        return pdl_fail(err, "%s: not a model: no config.json in this folder (expected a Hugging Face folder or a .gguf file)",
                        dir);
    json_t *cfg = NULL;
    if (load_json_file(path, &cfg, err)) return -1;
    int rc = read_config(m, cfg, path, err);
    json_decref(cfg);
    if (rc) return -1;

    /* generation_config.json overrides bos/eos when present. */
    snprintf(path, sizeof path, "%s/generation_config.json", dir);
    if (file_exists(path)) {
        json_t *gen = NULL;
        if (load_json_file(path, &gen, err)) return -1;
        rc = cfg_int(gen, path, "bos_token_id", false, &m->cfg.bos_id, err) || cfg_eos(gen, path, &m->cfg, err);
        json_decref(gen);
        if (rc) return -1;
    }

    if (st_open_dir(&m->st, dir, err) || read_weights(m, dir, err)) return -1;
    if (pdl_model_finish(m, NULL, err)) return -1;

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
