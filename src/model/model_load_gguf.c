/*
 * model_load_gguf.c - a model description from a GGUF file: the
 * `{arch}.*` hyperparameter keys and llama.cpp's tensor names
 * (token_embd, blk.N.attn_q, ...).
 *
 * The family and its traits (RoPE layout included: GGUF `llama` files hold
 * Q and K permuted for adjacent pairs) come from the architecture table
 * (arch.c), looked up by general.architecture and, for `llama`, by whether
 * the file has experts (Mixtral). Numbers llama.cpp hard-codes rather than
 * reads (Gemma 3's window pattern 6 and local RoPE base 10000, Cohere2's
 * pattern 4, a family's expert-weight normalization) are the table's
 * defaults, which the same keys override. Experts are stacked: one
 * (n_experts, rows, cols) tensor per projection, taken as per-expert views
 * (model_load.c).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "util/error.h"

/* Reads `{arch}.{key}` as u32 into *out; absent keeps *out unless required. */
static int arch_u32(const gguf_file *g, const char *arch, const char *key, bool required, int *out,
                    pdl_error *err) {
    char full[160];
    snprintf(full, sizeof full, "%s.%s", arch, key);
    uint32_t v;
    int rc = gguf_get_u32(g, full, &v, err);
    if (rc < 0) return -1;
    if (rc == 0) {
        if (required) return err_fail(err, "%s: missing metadata key '%s'", gguf_path(g), full);
        return 0;
    }
    if (v > (uint32_t)INT32_MAX) return err_fail(err, "%s: metadata key '%s' = %u is too large", gguf_path(g), full, v);
    *out = (int)v;
    return 0;
}

static int arch_f32(const gguf_file *g, const char *arch, const char *key, float *out, pdl_error *err) {
    char full[160];
    snprintf(full, sizeof full, "%s.%s", arch, key);
    return gguf_get_f32(g, full, out, err) < 0 ? -1 : 0;
}

/* attention.sliding_window_pattern: a period p (every p-th layer global) or,
 * as newer converters write it, one BOOL per layer (true = windowed), which
 * must follow some period. */
static int read_window_pattern(const gguf_file *g, const char *arch, pdl_model_config *c, pdl_error *err) {
    char key[160];
    snprintf(key, sizeof key, "%s.attention.sliding_window_pattern", arch);
    const gguf_kv *kv = gguf_find_kv(g, key);
    if (!kv) return 0;
    if (kv->type != GGUF_TYPE_ARRAY) return arch_u32(g, arch, "attention.sliding_window_pattern", false, &c->swa_pattern, err);
    gguf_array a;
    if (gguf_get_arr(g, key, &a, err) < 0) return -1;
    if (a.elem_type != GGUF_TYPE_BOOL || a.count != (uint64_t)c->n_layers)
        return err_fail(err, "%s: key '%s' must be %d BOOLs (one per layer) or a number", gguf_path(g), key,
                        c->n_layers);
    for (int p = 0; p <= c->n_layers + 1; p++) { /* p = 0: every layer windowed */
        pdl_model_config t = *c;
        t.swa_pattern = p;
        t.sliding_window = 1;
        bool ok = true;
        for (int l = 0; l < c->n_layers && ok; l++) ok = (gguf_arr_i64(&a, (uint64_t)l) != 0) == model_layer_windowed(&t, l);
        if (ok) {
            c->swa_pattern = p;
            return 0;
        }
    }
    return err_fail(err, "%s: key '%s': windowed layers that do not repeat with a period (not supported)",
                    gguf_path(g), key);
}

/* YaRN under llama.cpp's keys (rope.scaling.type = yarn, as its converter
 * writes Qwen3's and gpt-oss's rope_scaling): the original context
 * (rope.scaling.original_context_length, else context_length), yarn_beta_fast
 * / yarn_beta_slow (32 / 1), yarn_ext_factor (1; a negative one means unset,
 * as llama.cpp reads it). The attention factor: yarn_attn_factor where the
 * converter wrote one (transformers' attention_factor, which is the whole
 * factor), else llama.cpp's: get_mscale(factor) / get_mscale(factor,
 * yarn_log_multiplier) with a log multiplier, else 0.1 ln(factor) + 1 (1
 * with yarn_ext_factor 0, where llama.cpp scales nothing); times
 * rope.scaling.attn_factor when given. The ramp's ends are always rounded to
 * whole pairs (ggml_rope_yarn_corr_dims). Called once rope.scaling.factor is
 * read (c->rope_factor) and context_length (c->ctx_len). */
static int read_yarn(const gguf_file *g, const char *arch, pdl_model_config *c, pdl_error *err) {
    c->rope_orig_ctx = c->ctx_len;
    c->rope_yarn_beta_fast = 32.0f, c->rope_yarn_beta_slow = 1.0f, c->rope_yarn_ext = -1.0f;
    c->rope_yarn_truncate = true;
    float attn = 0, log_mul = 0, extra = 1.0f;
    if (arch_u32(g, arch, "rope.scaling.original_context_length", false, &c->rope_orig_ctx, err) ||
        arch_f32(g, arch, "rope.scaling.yarn_beta_fast", &c->rope_yarn_beta_fast, err) ||
        arch_f32(g, arch, "rope.scaling.yarn_beta_slow", &c->rope_yarn_beta_slow, err) ||
        arch_f32(g, arch, "rope.scaling.yarn_ext_factor", &c->rope_yarn_ext, err) ||
        arch_f32(g, arch, "rope.scaling.yarn_attn_factor", &attn, err) ||
        arch_f32(g, arch, "rope.scaling.yarn_log_multiplier", &log_mul, err) ||
        arch_f32(g, arch, "rope.scaling.attn_factor", &extra, err))
        return -1;
    if (c->rope_yarn_ext < 0) c->rope_yarn_ext = 1.0f;
    if (c->rope_orig_ctx <= 0)
        return err_fail(err, "%s: YaRN needs %s.rope.scaling.original_context_length (or context_length)",
                        gguf_path(g), arch);
    double f = c->rope_factor, mscale = f <= 1.0 || c->rope_yarn_ext == 0 ? 1.0 : 0.1 * log(f) + 1.0;
    if (attn > 0) mscale = attn;
    else if (log_mul != 0 && f > 1.0 && c->rope_yarn_ext != 0) mscale /= 0.1 * log_mul * log(f) + 1.0;
    if (!(attn >= 0 && isfinite(attn) && extra > 0 && isfinite(extra) && mscale > 0 && isfinite(mscale)))
        return err_fail(err, "%s: invalid YaRN attention factor (%s.rope.scaling.yarn_attn_factor %g, "
                        "yarn_log_multiplier %g, attn_factor %g)", gguf_path(g), arch, attn, log_mul, extra);
    c->rope_mscale = (float)(mscale * extra);
    return 0;
}

/* The experts of a MoE family: counts and sizes under llama.cpp's keys,
 * the router's gating function and normalization when the file says. */
static int read_experts(const gguf_file *g, const char *arch, pdl_model_config *c, pdl_error *err) {
    const char *path = gguf_path(g);
    if (c->arch->moe == PDL_MOE_NONE) {
        if (c->n_experts > 0)
            return err_fail(err, "%s: %s.expert_count = %d, but %s has no experts (not supported)", path, arch,
                            c->n_experts, arch);
        return 0;
    }
    if (c->n_experts <= 0) return err_fail(err, "%s: %s needs %s.expert_count", path, c->arch->name, arch);
    c->ffn_expert = c->ffn;
    if (arch_u32(g, arch, "expert_used_count", true, &c->n_experts_used, err) ||
        arch_u32(g, arch, "expert_feed_forward_length", false, &c->ffn_expert, err))
        return -1;
    if (c->arch->shared_expert_gate) {
        c->ffn_shared = c->ffn;
        if (arch_u32(g, arch, "expert_shared_feed_forward_length", false, &c->ffn_shared, err)) return -1;
    }
    int gating = 0;
    if (arch_u32(g, arch, "expert_gating_func", false, &gating, err)) return -1;
    if (gating > 2) return err_fail(err, "%s: %s.expert_gating_func = %d is not supported (1 softmax, 2 sigmoid)", path,
                                    arch, gating);
    if (gating) c->router = gating == 2 ? PDL_ROUTER_SIGMOID : PDL_ROUTER_SOFTMAX;
    char key[160];
    snprintf(key, sizeof key, "%s.expert_weights_norm", arch);
    bool norm = c->router_norm;
    int rc = gguf_get_bool(g, key, &norm, err);
    if (rc < 0) return -1;
    c->router_norm = norm;
    return arch_f32(g, arch, "expert_weights_scale", &c->router_scale, err);
}

/* M-RoPE (llama.cpp's qwen2vl): {arch}.rope.dimension_sections, 4 integers
 * (frequency pairs turned by the temporal, height and width positions, and
 * a fourth section llama.cpp's converter pads with 0); the files of a
 * gguf_mrope architecture must give it, others may. */
static int read_mrope_sections(const gguf_file *g, const char *arch, pdl_model_config *c, pdl_error *err) {
    char key[160];
    snprintf(key, sizeof key, "%s.rope.dimension_sections", arch);
    gguf_array a;
    int rc = gguf_get_arr(g, key, &a, err);
    if (rc < 0) return -1;
    if (rc == 0) {
        if (arch_gguf_mrope(c->arch, arch))
            return err_fail(err, "%s: missing metadata key '%s' (%s's M-RoPE sections)", gguf_path(g), key, arch);
        return 0;
    }
    if (a.count != 4 || (a.elem_type != GGUF_TYPE_INT32 && a.elem_type != GGUF_TYPE_UINT32))
        return err_fail(err, "%s: metadata key '%s' must be an array of 4 integers", gguf_path(g), key);
    for (int i = 0; i < 4; i++) {
        int64_t v = gguf_arr_i64(&a, (uint64_t)i);
        if (v < 0 || v > 4096)
            return err_fail(err, "%s: metadata key '%s'[%d] = %lld is out of range", gguf_path(g), key, i, (long long)v);
        if (i == 3 && v != 0)
            return err_fail(err, "%s: metadata key '%s'[3] = %lld: a fourth M-RoPE section is not supported (Qwen2-VL "
                            "and Qwen2.5-VL give 0)", gguf_path(g), key, (long long)v);
        if (i < 3) c->mrope_section[i] = (int)v;
    }
    return 0;
}

/* A hybrid family (Qwen3.5, Qwen3-Next): the Gated DeltaNet's shape under llama.cpp's
 * ssm.* keys (state_size: a key head's width, group_count: key heads,
 * time_step_rank: value heads, inner_size: all value heads' width), which
 * layers attend fully (every full_attention_interval-th, 4 unless given),
 * and the MTP blocks block_count includes (nextn_predict_layers), which
 * follow the main stack and are not run. Text rows turn every M-RoPE
 * section by the same position: plain RoPE, so the sections are dropped. */
static int read_hybrid(const gguf_file *g, const char *arch, pdl_model_config *c, pdl_error *err) {
    if (!c->arch->hybrid) return 0;
    const char *path = gguf_path(g);
    int inner = 0, interval = 4;
    if (arch_u32(g, arch, "nextn_predict_layers", false, &c->n_mtp_layers, err) ||
        arch_u32(g, arch, "ssm.conv_kernel", true, &c->lin_conv, err) ||
        arch_u32(g, arch, "ssm.state_size", true, &c->lin_k_dim, err) ||
        arch_u32(g, arch, "ssm.group_count", true, &c->lin_k_heads, err) ||
        arch_u32(g, arch, "ssm.time_step_rank", true, &c->lin_v_heads, err) ||
        arch_u32(g, arch, "ssm.inner_size", true, &inner, err) ||
        arch_u32(g, arch, "full_attention_interval", false, &interval, err))
        return -1;
    if (c->n_mtp_layers >= c->n_layers)
        return err_fail(err, "%s: %s.nextn_predict_layers %d must be less than block_count %d", path, arch,
                        c->n_mtp_layers, c->n_layers);
    c->n_layers -= c->n_mtp_layers;
    if (c->lin_k_heads <= 0 || c->lin_v_heads <= 0 || c->lin_v_heads % c->lin_k_heads || inner % c->lin_v_heads ||
        c->lin_k_dim <= 0 || inner <= 0 || c->lin_conv < 2 || c->lin_conv > 8)
        return err_fail(err, "%s: invalid linear attention: %d key heads of %d, %d value heads, inner size %d, kernel %d "
                        "(value heads must be a multiple of key heads and divide the inner size; kernel 2..8)", path,
                        c->lin_k_heads, c->lin_k_dim, c->lin_v_heads, inner, c->lin_conv);
    c->lin_v_dim = inner / c->lin_v_heads;
    /* llama.cpp's converter reorders the value heads to tiled order for
     * qwen35 / qwen35moe (_LinearAttentionVReorderBase) but keeps
     * Qwen3-Next's grouped by key head (Qwen3NextModel; its graph repeats
     * each key head for its value heads in turn) */
    if (strcmp(arch, "qwen3next") == 0) c->lin_v_tiled = false;
    memset(c->mrope_section, 0, sizeof c->mrope_section);
    return model_set_layer_kinds(c, NULL, interval, path, err);
}

/* One more token generation stops at (no repeats, at most PDL_MAX_EOS). */
static void add_eos(pdl_model_config *c, int32_t id) {
    for (int i = 0; i < c->n_eos; i++)
        if (c->eos_ids[i] == id) return;
    if (c->n_eos < PDL_MAX_EOS) c->eos_ids[c->n_eos++] = id;
}

/* The harmony format (gpt-oss) ends a turn with <|return|> and a tool call
 * with <|call|>; llama.cpp's converter writes only <|return|> as the EOS
 * and llama.cpp stops at both by their text. So does this: when the EOS is
 * <|return|>, <|call|> (when the vocabulary has it) ends generation too. */
static int harmony_call_ends(const gguf_file *g, pdl_model_config *c, pdl_error *err) {
    gguf_array toks;
    int rc = gguf_get_arr(g, "tokenizer.ggml.tokens", &toks, err);
    if (rc <= 0 || toks.elem_type != GGUF_TYPE_STRING || c->n_eos == 0) return rc < 0 ? -1 : 0;
    int32_t eos = c->eos_ids[0];
    static const char RET[] = "<|return|>", CALL[] = "<|call|>";
    if (eos < 0 || (uint64_t)eos >= toks.count || toks.strings[eos].len != sizeof RET - 1 ||
        memcmp(toks.strings[eos].ptr, RET, sizeof RET - 1) != 0)
        return 0;
    for (uint64_t i = 0; i < toks.count; i++)
        if (toks.strings[i].len == sizeof CALL - 1 && memcmp(toks.strings[i].ptr, CALL, sizeof CALL - 1) == 0) {
            add_eos(c, (int32_t)i);
            break;
        }
    return 0;
}

/* general.architecture as the file gives it (read_config checked it). */
static const char *file_arch(const gguf_file *g) {
    const char *arch = NULL;
    pdl_error err;
    return gguf_get_str(g, "general.architecture", &arch, &err) > 0 && arch ? arch : "";
}

static int read_config(pdl_model *m, const gguf_file *g, pdl_error *err) {
    pdl_model_config *c = &m->cfg;
    const char *path = gguf_path(g);
    const char *arch = NULL;
    int rc = gguf_get_str(g, "general.architecture", &arch, err);
    if (rc < 0) return -1;
    if (rc == 0) return err_fail(err, "%s: missing metadata key 'general.architecture'", path);
    if (arch_u32(g, arch, "expert_count", false, &c->n_experts, err)) return -1;
    const pdl_arch_desc *a = arch_by_gguf(arch, c->n_experts > 0);
    if (!a) {
        char list[512];
        arch_supported(true, list, sizeof list);
        return err_fail(err, "%s: general.architecture '%s' is not supported (supported: %s)", path, arch, list);
    }
    arch_apply(a, true, c);

    if (arch_u32(g, arch, "block_count", true, &c->n_layers, err) ||
        arch_u32(g, arch, "embedding_length", true, &c->hidden, err) ||
        /* llama.cpp's converter writes it only from a config's intermediate_size,
         * which Qwen3.5-MoE's has not */
        arch_u32(g, arch, "feed_forward_length", !(a->hybrid && a->moe != PDL_MOE_NONE), &c->ffn, err) ||
        arch_u32(g, arch, "attention.head_count", true, &c->n_heads, err))
        return -1;
    c->n_kv_heads = c->n_heads;
    if (arch_u32(g, arch, "attention.head_count_kv", false, &c->n_kv_heads, err)) return -1;
    if (c->n_heads <= 0) return err_fail(err, "%s: %s.attention.head_count must be positive", path, arch);
    c->head_dim = c->hidden / c->n_heads;
    if (arch_u32(g, arch, "attention.key_length", false, &c->head_dim, err)) return -1;
    int v_len = c->head_dim;
    if (arch_u32(g, arch, "attention.value_length", false, &v_len, err)) return -1;
    if (v_len != c->head_dim)
        return err_fail(err, "%s: %s.attention.value_length %d differs from key_length %d (not supported)", path,
                        arch, v_len, c->head_dim);
    c->rope_dim = c->head_dim;
    if (arch_u32(g, arch, "rope.dimension_count", false, &c->rope_dim, err)) return -1;
    c->ctx_len = 0;
    if (arch_u32(g, arch, "context_length", false, &c->ctx_len, err)) return -1;
    /* llama.cpp's pooling_type: 1 mean, 2 cls, 3 last (0 none, 4 rank); its embeddings are normalized */
    int pool = 0;
    if (arch_u32(g, arch, "pooling_type", false, &pool, err)) return -1;
    c->pooling = pool == 1 ? PDL_POOLING_MEAN : pool == 2 ? PDL_POOLING_CLS : pool == 3 ? PDL_POOLING_LAST
                                                                                       : PDL_POOLING_NONE;
    c->pool_normalize = c->pooling != PDL_POOLING_NONE;
    c->rms_eps = 1e-5f;
    const char *eps_key =
        c->norm == PDL_NORM_LAYER ? "attention.layer_norm_epsilon" : "attention.layer_norm_rms_epsilon";
    if (arch_f32(g, arch, eps_key, &c->rms_eps, err)) return -1;
    c->rope_theta = 10000.0f;
    if (arch_f32(g, arch, "rope.freq_base", &c->rope_theta, err)) return -1;

    char key[160];
    snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
    const char *scaling = NULL;
    if (gguf_get_str(g, key, &scaling, err) < 0) return -1;
    if (scaling && strcmp(scaling, "none") != 0) {
        if (strcmp(scaling, "linear") != 0 && strcmp(scaling, "yarn") != 0)
            return err_fail(err, "%s: %s = '%s' is not supported (supported: none, linear, yarn)", path, key, scaling);
        c->rope_scaling = strcmp(scaling, "yarn") == 0 ? PDL_ROPE_SCALING_YARN : PDL_ROPE_SCALING_LINEAR;
        c->rope_factor = 1.0f;
        if (arch_f32(g, arch, "rope.scaling.factor", &c->rope_factor, err)) return -1;
        if (!(c->rope_factor > 0 && isfinite(c->rope_factor)))
            return err_fail(err, "%s: %s.rope.scaling.factor must be positive", path, arch);
        if (c->rope_scaling == PDL_ROPE_SCALING_YARN && read_yarn(g, arch, c, err)) return -1;
    }
    c->sliding_window = 0;
    if (arch_u32(g, arch, "attention.sliding_window", false, &c->sliding_window, err) ||
        read_window_pattern(g, arch, c, err) ||
        arch_f32(g, arch, "rope.freq_base_swa", &c->rope_theta_local, err))
        return -1;
    if (a->gguf_window_required && c->sliding_window <= 0)
        return err_fail(err, "%s: %s needs %s.attention.sliding_window", path, a->name, arch);
    if (read_experts(g, arch, c, err) || read_mrope_sections(g, arch, c, err) || read_hybrid(g, arch, c, err))
        return -1;
    if (c->ffn <= 0) c->ffn = c->ffn_expert; /* no dense width given: only the experts' is used */
    /* 1/sqrt(head_dim) unless attention.scale says otherwise (Granite); llama.cpp
     * gives Gemma 2 (query_pre_attn_scalar = head_dim but for 27B) the same */
    c->attn_scale = 1.0f / sqrtf((float)c->head_dim);
    /* Gemma 3 27B (62 layers) has query_pre_attn_scalar = hidden / heads
     * (168), not head_dim (128); its GGUF files do not say so and llama.cpp
     * recognises it by its layer count: so do we */
    if (a->gguf_qpas_layers && c->n_layers == a->gguf_qpas_layers)
        c->attn_scale = 1.0f / sqrtf((float)(c->hidden / c->n_heads));
    if (arch_f32(g, arch, "attention.scale", &c->attn_scale, err)) return -1;
    if (a->scalings & PDL_SCALE_MULTIPLIERS) {
        if (arch_f32(g, arch, "embedding_scale", &c->embed_scale, err) ||
            arch_f32(g, arch, "residual_scale", &c->residual_scale, err) ||
            arch_f32(g, arch, "logit_scale", &c->logit_div, err)) /* Granite divides by it */
            return -1;
    }
    if ((a->scalings & PDL_SCALE_LOGIT) && arch_f32(g, arch, "logit_scale", &c->logit_scale, err)) return -1;
    if (a->scalings & PDL_SCALE_GEMMA) {
        c->embed_scale = sqrtf((float)c->hidden);
        if (arch_f32(g, arch, "attn_logit_softcapping", &c->attn_softcap, err) ||
            arch_f32(g, arch, "final_logit_softcapping", &c->final_softcap, err))
            return -1;
    }
    if (!(c->attn_scale > 0) || !(c->embed_scale > 0) || !(c->residual_scale > 0) || !(c->logit_div > 0) ||
        !(c->attn_softcap >= 0) || !(c->final_softcap >= 0))
        return err_fail(err,
                        "%s: invalid %s scales: attention %g, embedding %g, residual %g, logit %g, soft-caps %g / %g",
                        path, arch, c->attn_scale, c->embed_scale, c->residual_scale, c->logit_div, c->attn_softcap,
                        c->final_softcap);

    c->bos_id = -1;
    uint32_t id;
    rc = gguf_get_u32(g, "tokenizer.ggml.bos_token_id", &id, err);
    if (rc < 0) return -1;
    /* 0xFFFFFFFF is how converters write "no such token" */
    if (rc > 0 && id != UINT32_MAX) c->bos_id = (int32_t)id;
    rc = gguf_get_u32(g, "tokenizer.ggml.eos_token_id", &id, err);
    if (rc < 0) return -1;
    if (rc > 0 && id != UINT32_MAX) add_eos(c, (int32_t)id);
    rc = gguf_get_u32(g, "tokenizer.ggml.eot_token_id", &id, err);
    if (rc < 0) return -1;
    if (rc > 0 && id != UINT32_MAX) add_eos(c, (int32_t)id);
    /* Ollama's converters list them all */
    gguf_array ids;
    rc = gguf_get_arr(g, "tokenizer.ggml.eos_token_ids", &ids, err);
    if (rc < 0) return -1;
    for (uint64_t i = 0; rc > 0 && ids.elem_type != GGUF_TYPE_STRING && i < ids.count; i++) {
        int64_t v = gguf_arr_i64(&ids, i);
        if (v >= 0 && v < INT32_MAX) add_eos(c, (int32_t)v);
    }
    return harmony_call_ends(g, c, err);
}

/* RoPE frequency factors: rope_freqs (Llama 3.1), or LongRoPE's long and
 * short pairs (Phi-3 128k). */
static int read_rope_factors(pdl_model *m, const pdl_tensor_set *ts, pdl_error *err) {
    pdl_model_config *c = &m->cfg;
    const char *path = gguf_path(m->gguf);
    const pdl_tensor *freqs = tensor_set_take(ts, "rope_freqs.weight");
    const pdl_tensor *lng = tensor_set_take(ts, "rope_factors_long.weight");
    const pdl_tensor *shrt = tensor_set_take(ts, "rope_factors_short.weight");
    if (!freqs && !lng && !shrt) return 0;
    if (c->rope_scaling != PDL_ROPE_SCALING_NONE)
        return err_fail(err, "%s: both RoPE factor tensors and a rope.scaling.type are given", path);
    if (freqs && (lng || shrt))
        return err_fail(err, "%s: both rope_freqs.weight and rope_factors_long/short.weight are given", path);
    if (!freqs && !(lng && shrt))
        return err_fail(err, "%s: LongRoPE needs both rope_factors_long.weight and rope_factors_short.weight", path);
    int64_t half = c->rope_dim / 2;
    if (freqs) {
        c->rope_scaling = PDL_ROPE_SCALING_FREQS;
        return model_vector_copy(freqs, half, &m->rope_factors, err);
    }
    c->rope_scaling = PDL_ROPE_SCALING_LONGROPE;
    /* the original context and the attention factor (cos and sin times it) */
    const char *arch = file_arch(m->gguf);
    if (arch_u32(m->gguf, arch, "rope.scaling.original_context_length", false, &c->rope_orig_ctx, err) ||
        arch_f32(m->gguf, arch, "rope.scaling.attn_factor", &c->rope_mscale, err))
        return -1;
    if (c->rope_orig_ctx <= 0) c->rope_orig_ctx = c->ctx_len;
    return model_vector_copy(lng, half, &m->rope_factors, err) ||
           model_vector_copy(shrt, half, &m->rope_factors_short, err);
}

static int read_weights(pdl_model *m, const gguf_file *g, pdl_error *err) {
    pdl_model_config *c = &m->cfg;
    const pdl_tensor_set *ts = gguf_tensors(g);
    const char *path = gguf_path(g);
    pdl_model_weights *w = &m->w;
    if (c->arch->encoder) return model_take_bert(m, ts, true, path, err);
    if (model_take_tensor(ts, "token_embd.weight", true, path, &w->tok_embd, err) ||
        model_take_tensor(ts, "output_norm.weight", true, path, &w->output_norm, err) ||
        model_take_tensor(ts, "output.weight", false, path, &w->output, err))
        return -1;
    c->tied_embeddings = w->output.data == NULL;
    /* The vocabulary size is the embedding's row count unless a key says so. */
    c->vocab = w->tok_embd.n_dims == 2 ? (int)w->tok_embd.shape[0] : 0;
    char key[160];
    snprintf(key, sizeof key, "%s.vocab_size", file_arch(g));
    uint32_t vs;
    int rc = gguf_get_u32(g, key, &vs, err);
    if (rc < 0) return -1;
    if (rc > 0) c->vocab = (int)vs;

    if (c->qk_norm == PDL_QK_NORM_NONE && tensor_set_find(ts, "blk.0.attn_q_norm.weight"))
        return err_fail(err, "%s: %s with q/k norms (blk.0.attn_q_norm.weight) is not supported", path,
                        file_arch(g));
    if (model_take_layers(m, ts, NULL, path, err)) return -1;
    return read_rope_factors(m, ts, err);
}

int model_load_gguf(pdl_model *m, const char *path, pdl_error *err) {
    if (gguf_open(&m->gguf, path, err)) return -1;
    snprintf(m->source, sizeof m->source, "gguf");
    if (read_config(m, m->gguf, err) || read_weights(m, m->gguf, err)) return -1;
    if (model_finish(m, err)) return -1;
    pdl_error terr;
    if (tok_load_gguf(&m->tok, m->gguf, &terr)) {
        m->tok = NULL;
        snprintf(m->tok_error, sizeof m->tok_error, "%s", terr.message);
    }
    return 0;
}
