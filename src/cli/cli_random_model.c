/*
 * cli_random_model.c - `pagedlm make-random-model`: writes a GGUF with
 * random weights in the exact shape of a real model, so speed can be
 * measured and compared (with llama.cpp on the same file) without
 * downloading weights. The text such a model writes is noise. Presets of
 * mixture-of-experts models (Qwen3-30B-A3B, OLMoE-1B-7B) write GGUF's
 * stacked experts (ffn_{gate,up,down}_exps) and an F32 router; their layer
 * count is usually cut with --layers to fit memory; gpt-oss-20b's as
 * llama.cpp's converter writes it (biases, attention sinks, the window and
 * YaRN keys). The Qwen3.5 presets
 * write the hybrid layout of llama.cpp's converter (GGUF `qwen35` /
 * `qwen35moe`, the multi-token-prediction block left out as its --no-mtp
 * does, or written with --mtp as its default does: one more full-attention
 * layer blk.N and its nextn.* tensors): three Gated DeltaNet layers for
 * each gated full-attention layer.
 * Not a converter: nothing here reads real weights.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <sys/stat.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli_args.h"
#include "format/gguf_write.h"
#include "format/safetensors_write.h"
#include "util/file_map.h"
#include "util/json_file.h"
#include "kernels/fp16.h"
#include "kernels/iq4nl.h"
#include "kernels/mxfp4.h"

typedef struct shape_preset {
    const char *name;
    const char *arch; /* GGUF general.architecture */
    int hidden, layers, heads, kv_heads, head_dim, ffn, vocab;
    float rope_theta, eps;
    int n_experts, n_experts_used, ffn_expert; /* 0 experts: a dense MLP */
    bool untied;      /* its own output.weight */
    bool qk_whole;    /* q/k norms over the whole projection (OLMoE), else per head */
    int context;      /* context_length written (0: 40960) */
    /* Hybrid models (Qwen3.5): layer l is full attention when (l + 1) %
     * attn_interval == 0, else Gated DeltaNet; 0: every layer attention. */
    int attn_interval;
    int lin_k_heads, lin_v_heads, lin_head_dim, lin_conv; /* the linear layers' heads, their width, conv kernel */
    int rope_dims;    /* rotated dimensions of a head (0: all of head_dim) */
    int ffn_shared;   /* the shared expert's width (0: none) */
    /* gpt-oss: Q/K/V/O biases, sinks, router and expert biases, every 2nd layer windowed, YaRN */
    bool gptoss;
    int window;       /* attention.sliding_window */
    float yarn_factor;
    int yarn_orig;    /* YaRN's original context */
} shape_preset;

/* Widths from each model's published config.json; a ffn of 0 writes no
 * feed_forward_length (the Qwen3.5 MoE config has no intermediate_size, so
 * the converter writes none). */
static const shape_preset PRESETS[] = {
    {.name = "qwen3-0.6b", .arch = "qwen3", .hidden = 1024, .layers = 28, .heads = 16, .kv_heads = 8, .head_dim = 128,
     .ffn = 3072, .vocab = 151936, .rope_theta = 1000000.0f, .eps = 1e-6f},
    {.name = "qwen3-1.7b", .arch = "qwen3", .hidden = 2048, .layers = 28, .heads = 16, .kv_heads = 8, .head_dim = 128,
     .ffn = 6144, .vocab = 151936, .rope_theta = 1000000.0f, .eps = 1e-6f},
    /* Qwen3's architecture and vocabulary, tiny: for end-to-end tests of what needs its tokenizer and template */
    {.name = "qwen3-test", .arch = "qwen3", .hidden = 64, .layers = 2, .heads = 4, .kv_heads = 2, .head_dim = 16,
     .ffn = 128, .vocab = 151936, .rope_theta = 1000000.0f, .eps = 1e-6f},
    {.name = "qwen3-30b-a3b", .arch = "qwen3moe", .hidden = 2048, .layers = 48, .heads = 32, .kv_heads = 4,
     .head_dim = 128, .ffn = 6144, .vocab = 151936, .rope_theta = 1000000.0f, .eps = 1e-6f, .n_experts = 128,
     .n_experts_used = 8, .ffn_expert = 768, .untied = true},
    {.name = "olmoe-1b-7b", .arch = "olmoe", .hidden = 2048, .layers = 16, .heads = 16, .kv_heads = 16, .head_dim = 128,
     .ffn = 1024, .vocab = 50304, .rope_theta = 10000.0f, .eps = 1e-5f, .n_experts = 64, .n_experts_used = 8,
     .ffn_expert = 1024, .untied = true, .qk_whole = true},
    /* openai/gpt-oss-20b: 32 experts of 2880 (4 per token), 64 query / 8 KV heads of 64, window 128 on
     * every 2nd layer, YaRN factor 32 over 4096 */
    {.name = "gpt-oss-20b", .arch = "gpt-oss", .hidden = 2880, .layers = 24, .heads = 64, .kv_heads = 8,
     .head_dim = 64, .ffn = 2880, .vocab = 201088, .rope_theta = 150000.0f, .eps = 1e-5f, .n_experts = 32,
     .n_experts_used = 4, .ffn_expert = 2880, .untied = true, .context = 131072, .gptoss = true, .window = 128,
     .yarn_factor = 32.0f, .yarn_orig = 4096},
    /* gpt-oss's architecture, tiny: for end-to-end tests (with --tokenizer and --vocab) */
    {.name = "gpt-oss-test", .arch = "gpt-oss", .hidden = 64, .layers = 2, .heads = 4, .kv_heads = 2, .head_dim = 16,
     .ffn = 64, .vocab = 4096, .rope_theta = 150000.0f, .eps = 1e-5f, .n_experts = 4, .n_experts_used = 2,
     .ffn_expert = 64, .untied = true, .context = 4096, .gptoss = true, .window = 16, .yarn_factor = 4.0f,
     .yarn_orig = 1024},
    /* Qwen/Qwen3.5-0.8B: attention 8 heads / 2 KV of 256 with a quarter rotated, linear 16 key and 16 value
     * heads of 128, tied embeddings */
    {.name = "qwen3.5-0.8b", .arch = "qwen35", .hidden = 1024, .layers = 24, .heads = 8, .kv_heads = 2, .head_dim = 256,
     .ffn = 3584, .vocab = 248320, .rope_theta = 10000000.0f, .eps = 1e-6f, .context = 262144, .attn_interval = 4,
     .lin_k_heads = 16, .lin_v_heads = 16, .lin_head_dim = 128, .lin_conv = 4, .rope_dims = 64},
    /* Qwen/Qwen3.5-35B-A3B: 256 experts of 512 (8 per token) and a gated shared expert of 512; linear 16 key
     * and 32 value heads */
    {.name = "qwen3.5-35b-a3b", .arch = "qwen35moe", .hidden = 2048, .layers = 40, .heads = 16, .kv_heads = 2,
     .head_dim = 256, .ffn = 0, .vocab = 248320, .rope_theta = 10000000.0f, .eps = 1e-6f, .n_experts = 256,
     .n_experts_used = 8, .ffn_expert = 512, .untied = true, .context = 262144, .attn_interval = 4,
     .lin_k_heads = 16, .lin_v_heads = 32, .lin_head_dim = 128, .lin_conv = 4, .rope_dims = 64, .ffn_shared = 512},
};

/* The byte-level BPE tokenizer of DIR/tokenizer.json as GGUF metadata, the
 * way llama.cpp's converter writes it (ids past the tokenizer are "[PADn]",
 * unused). */
static int add_gguf_tokenizer(gguf_out *g, const char *dir, const char *pre, int vocab) {
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    json_t *tj = NULL, *cfg = NULL;
    pdl_error err;
    if (json_file_load(path, 0, &tj, &err)) {
        fprintf(stderr, "error: %s\n", err.message);
        return -1;
    }
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    if (json_file_load(path, JSON_DECODE_INT_AS_REAL, &cfg, &err)) cfg = NULL;
    json_t *model = json_object_get(tj, "model"), *vocab_j = json_object_get(model, "vocab");
    json_t *merges = json_object_get(model, "merges"), *added = json_object_get(tj, "added_tokens");
    int rc = -1;
    char **tokens = calloc((size_t)vocab, sizeof *tokens);
    int32_t *types = calloc((size_t)vocab, sizeof *types);
    size_t n_merges = json_array_size(merges);
    char **mstr = calloc(n_merges ? n_merges : 1, sizeof *mstr);
    if (!json_is_object(vocab_j) || !tokens || !types || !mstr) {
        fprintf(stderr, "error: %s/tokenizer.json: no model.vocab\n", dir);
        goto done;
    }
    const char *key;
    json_t *v;
    json_object_foreach(vocab_j, key, v) {
        json_int_t id = json_integer_value(v);
        if (id < 0 || id >= vocab) {
            fprintf(stderr, "error: %s/tokenizer.json: token id %lld does not fit a vocabulary of %d\n", dir,
                    (long long)id, vocab);
            goto done;
        }
        tokens[id] = strdup(key);
        types[id] = 1; /* normal */
    }
    size_t i;
    json_array_foreach(added, i, v) {
        json_int_t id = json_integer_value(json_object_get(v, "id"));
        const char *content = json_string_value(json_object_get(v, "content"));
        if (id < 0 || id >= vocab || !content) continue;
        free(tokens[id]);
        tokens[id] = strdup(content);
        types[id] = json_is_true(json_object_get(v, "special")) ? 3 : 4; /* control : user-defined */
    }
    for (int k = 0; k < vocab; k++)
        if (!tokens[k]) {
            char pad[32];
            snprintf(pad, sizeof pad, "[PAD%d]", k);
            tokens[k] = strdup(pad);
            types[k] = 5; /* unused */
        }
    json_array_foreach(merges, i, v) {
        if (json_is_string(v)) {
            mstr[i] = strdup(json_string_value(v));
        } else {
            const char *a = json_string_value(json_array_get(v, 0)), *b = json_string_value(json_array_get(v, 1));
            size_t n = (a ? strlen(a) : 0) + (b ? strlen(b) : 0) + 2;
            mstr[i] = malloc(n);
            if (mstr[i]) snprintf(mstr[i], n, "%s %s", a ? a : "", b ? b : "");
        }
    }
    /* special ids by their text in tokenizer_config.json */
    int32_t eos = -1, bos = -1;
    const char *eos_s = json_string_value(json_object_get(cfg, "eos_token"));
    const char *bos_s = json_string_value(json_object_get(cfg, "bos_token"));
    for (int k = 0; k < vocab; k++) {
        if (eos_s && strcmp(tokens[k], eos_s) == 0) eos = k;
        if (bos_s && strcmp(tokens[k], bos_s) == 0) bos = k;
    }
    gguf_out_str(g, "tokenizer.ggml.model", "gpt2");
    gguf_out_str(g, "tokenizer.ggml.pre", pre);
    gguf_out_str_arr(g, "tokenizer.ggml.tokens", (const char *const *)tokens, (size_t)vocab);
    gguf_out_i32_arr(g, "tokenizer.ggml.token_type", types, (size_t)vocab);
    gguf_out_str_arr(g, "tokenizer.ggml.merges", (const char *const *)mstr, n_merges);
    if (eos >= 0) gguf_out_u32(g, "tokenizer.ggml.eos_token_id", (uint32_t)eos);
    if (bos >= 0 || eos >= 0) gguf_out_u32(g, "tokenizer.ggml.bos_token_id", (uint32_t)(bos >= 0 ? bos : eos));
    gguf_out_bool(g, "tokenizer.ggml.add_bos_token", json_is_true(json_object_get(cfg, "add_bos_token")));
    rc = 0;
done:
    for (int k = 0; tokens && k < vocab; k++) free(tokens[k]);
    for (size_t k = 0; mstr && k < n_merges; k++) free(mstr[k]);
    free(tokens), free(types), free(mstr);
    json_decref(tj);
    json_decref(cfg);
    return rc;
}

static int copy_file(const char *from, const char *to) {
    char *data;
    size_t len;
    pdl_error err;
    if (file_read(from, PDL_READ_MAX_TOKENIZER, &data, &len, &err)) {
        fprintf(stderr, "error: %s\n", err.message);
        return -1;
    }
    FILE *f = fopen(to, "wb");
    int bad = !f || fwrite(data, 1, len, f) != len;
    if (f && fclose(f) != 0) bad = 1;
    free(data);
    if (bad) fprintf(stderr, "error: %s: cannot write\n", to);
    return bad ? -1 : 0;
}

/* Every tensor under both names: values are drawn from the GGUF name, so
 * both formats hold the same weights. */
typedef struct tensor_names {
    char gguf[96], hf[96];
    int n_dims;
    int64_t shape[3];
    bool vector; /* kept in F32: norm weights, a MoE router */
} tensor_names;

static tensor_names *g_names;
static int g_n_names;

static const char *gguf_name_of(const char *name) {
    for (int i = 0; i < g_n_names; i++)
        if (strcmp(g_names[i].hf, name) == 0) return g_names[i].gguf;
    return name;
}

static uint64_t mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t g_seed;

static bool ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* Uniform in [-0.0346, 0.0346): standard deviation 0.02, as initializers use;
 * norm weights are 1 (a GGUF holds Qwen3.5's 1 + w, and the gated norm's w,
 * which starts at 1). The Gated DeltaNet's parameters start as Hugging Face's
 * Qwen3.5 initializes them, so the decay and the convolution are in the
 * range a trained model has: ssm_a = -exp(A_log) = -A with A uniform in
 * (0, 16], dt bias 1, and the convolution PyTorch's Conv1d default, uniform
 * in +-1/sqrt(kernel) = +-0.5 (at +-0.035 it would shrink v 15-fold). */
/* One Q4_K (five: Q5_K) super-block of 256 values (the format in
 * kernels/kquant.c): per sub-block of 32 a scale (max - min) / 15 (31) and
 * a min (min, not above 0), the super-block's d and dmin the largest of
 * them over 63, the six-bit codes and the quants nearest (a plain
 * starting point: llama.cpp's quantizer searches for better scales). */
static void quantize_k_block(const float *x, uint8_t *blk, bool five) {
    int top = five ? 31 : 15;
    float scale[8], mins[8], smax = 0, mmax = 0;
    for (int j = 0; j < 8; j++) {
        float lo = 0, hi = 0;
        for (int l = 0; l < 32; l++) lo = fminf(lo, x[32 * j + l]), hi = fmaxf(hi, x[32 * j + l]);
        scale[j] = (hi - lo) / (float)top, mins[j] = -lo;
        smax = fmaxf(smax, scale[j]), mmax = fmaxf(mmax, mins[j]);
    }
    uint16_t d16 = fp16_f32_to_f16(smax / 63.0f), m16 = fp16_f32_to_f16(mmax / 63.0f);
    float d = fp16_f16_to_f32(d16), dmin = fp16_f16_to_f32(m16);
    uint8_t sc[8], mn[8];
    for (int j = 0; j < 8; j++) {
        long s = d > 0 ? lrintf(scale[j] / d) : 0, m = dmin > 0 ? lrintf(mins[j] / dmin) : 0;
        sc[j] = (uint8_t)(s > 63 ? 63 : s), mn[j] = (uint8_t)(m > 63 ? 63 : m);
    }
    memset(blk, 0, five ? 176 : 144);
    memcpy(blk, &d16, 2), memcpy(blk + 2, &m16, 2);
    for (int j = 0; j < 4; j++) {
        blk[4 + j] = (uint8_t)((sc[j] & 63) | (sc[j + 4] >> 4) << 6);
        blk[8 + j] = (uint8_t)((mn[j] & 63) | (mn[j + 4] >> 4) << 6);
        blk[12 + j] = (uint8_t)((sc[j + 4] & 0xF) | (mn[j + 4] & 0xF) << 4);
    }
    uint8_t *qh = blk + 16, *qs = blk + (five ? 48 : 16);
    for (int j = 0; j < 8; j++) {
        float step = d * sc[j], off = dmin * mn[j];
        for (int l = 0; l < 32; l++) {
            long q = step > 0 ? lrintf((x[32 * j + l] + off) / step) : 0;
            q = q < 0 ? 0 : q > top ? top : q;
            qs[32 * (j / 2) + l] |= (uint8_t)((q & 0xF) << (4 * (j % 2)));
            if (five) qh[l] |= (uint8_t)((q >> 4) << j);
        }
    }
}

/* Per group of 16 of a super-block's 256 values a signed scale: the value
 * of largest magnitude / -low (so that it becomes the code -low); returns
 * the largest magnitude of the 16 scales. */
static float signed_group_scales(const float *x, float low, float scale[16]) {
    float smax = 0;
    for (int g = 0; g < 16; g++) {
        float m = 0;
        for (int i = 0; i < 16; i++)
            if (fabsf(x[16 * g + i]) > fabsf(m)) m = x[16 * g + i];
        scale[g] = m / -low, smax = fmaxf(smax, fabsf(scale[g]));
    }
    return smax;
}

/* One Q3_K super-block of 256 values (the format in kernels/kquant.c): per
 * group of 16 a signed scale (the value of largest magnitude) / -4, the
 * super-block's d the largest magnitude of them over 31, the six-bit
 * codes (minus 32) and the quants -4..3 nearest (a plain starting point:
 * llama.cpp's quantizer searches for better scales). */
static void quantize_q3_k_block(const float *x, uint8_t *blk) {
    float scale[16], smax = signed_group_scales(x, 4.0f, scale);
    uint16_t d16 = fp16_f32_to_f16(smax / 31.0f);
    float d = fp16_f16_to_f32(d16);
    memset(blk, 0, 110);
    uint8_t *hm = blk, *qs = blk + 32, *sb = blk + 96;
    for (int g = 0; g < 16; g++) {
        long c = d > 0 ? lrintf(scale[g] / d) : 0;
        c = c < -32 ? -32 : c > 31 ? 31 : c;
        int raw = (int)c + 32;
        sb[g % 8] |= (uint8_t)((raw & 0xF) << (4 * (g / 8)));
        sb[8 + g % 4] |= (uint8_t)((raw >> 4) << (2 * (g / 4)));
        float step = d * (float)c;
        for (int i = 0; i < 16; i++) {
            int e = 16 * g + i, h = e / 128, k = (e % 128) / 32, l = e % 32;
            long q = step != 0 ? lrintf(x[e] / step) : 0;
            q = q < -4 ? -4 : q > 3 ? 3 : q;
            qs[32 * h + l] |= (uint8_t)((q < 0 ? q + 4 : q) << (2 * k));
            if (q >= 0) hm[l] |= (uint8_t)(1 << (4 * h + k));
        }
    }
    memcpy(blk + 108, &d16, 2);
}

/* One Q6_K super-block of 256 values (the format in kernels/kquant.c): per
 * group of 16 a signed scale (the value of largest magnitude) / -32, the
 * super-block's d the largest magnitude of them over 127, the int8 scales
 * and the quants -32..31 nearest (a plain starting point, as
 * quantize_q3_k_block). */
static void quantize_q6_k_block(const float *x, uint8_t *blk) {
    float scale[16], smax = signed_group_scales(x, 32.0f, scale);
    uint16_t d16 = fp16_f32_to_f16(smax / 127.0f);
    float d = fp16_f16_to_f32(d16);
    memset(blk, 0, 210);
    uint8_t *ql = blk, *qh = blk + 128;
    for (int g = 0; g < 16; g++) {
        long c = d > 0 ? lrintf(scale[g] / d) : 0;
        c = c < -128 ? -128 : c > 127 ? 127 : c;
        blk[192 + g] = (uint8_t)(int8_t)c;
        float step = d * (float)c;
        for (int i = 0; i < 16; i++) {
            int e = 16 * g + i, h = e / 128, k = (e % 128) / 32, l = e % 32;
            long q = step != 0 ? lrintf(x[e] / step) : 0;
            q = (q < -32 ? -32 : q > 31 ? 31 : q) + 32;
            ql[64 * h + l + 32 * (k % 2)] |= (uint8_t)((q & 0xF) << (4 * (k / 2)));
            qh[32 * h + l] |= (uint8_t)((q >> 4) << (2 * k));
        }
    }
    memcpy(blk + 208, &d16, 2);
}

/* One Q2_K super-block of 256 values (the format in kernels/kquant.c): per
 * group of 16 a scale (max - min) / 3 and a min (min, not above 0), d and
 * dmin the largest of them over 15, the four-bit codes and the quants
 * 0..3 nearest (a plain starting point, as quantize_k_block). */
static void quantize_q2_k_block(const float *x, uint8_t *blk) {
    float scale[16], mins[16], smax = 0, mmax = 0;
    for (int g = 0; g < 16; g++) {
        float lo = 0, hi = 0;
        for (int i = 0; i < 16; i++) lo = fminf(lo, x[16 * g + i]), hi = fmaxf(hi, x[16 * g + i]);
        scale[g] = (hi - lo) / 3.0f, mins[g] = -lo;
        smax = fmaxf(smax, scale[g]), mmax = fmaxf(mmax, mins[g]);
    }
    uint16_t d16 = fp16_f32_to_f16(smax / 15.0f), m16 = fp16_f32_to_f16(mmax / 15.0f);
    float d = fp16_f16_to_f32(d16), dmin = fp16_f16_to_f32(m16);
    memset(blk, 0, 84);
    uint8_t *qs = blk + 16;
    for (int g = 0; g < 16; g++) {
        long sc = d > 0 ? lrintf(scale[g] / d) : 0, mn = dmin > 0 ? lrintf(mins[g] / dmin) : 0;
        sc = sc > 15 ? 15 : sc, mn = mn > 15 ? 15 : mn;
        blk[g] = (uint8_t)(sc | mn << 4);
        float step = d * (float)sc, off = dmin * (float)mn;
        for (int i = 0; i < 16; i++) {
            int e = 16 * g + i, h = e / 128, k = (e % 128) / 32, l = e % 32;
            long q = step > 0 ? lrintf((x[e] + off) / step) : 0;
            q = q < 0 ? 0 : q > 3 ? 3 : q;
            qs[32 * h + l] |= (uint8_t)(q << (2 * k));
        }
    }
    memcpy(blk + 80, &d16, 2), memcpy(blk + 82, &m16, 2);
}

/* One IQ4_XS super-block of 256 values (the format in kernels/kquant.c):
 * per sub-block of 32 a scale s_j = (its value of largest magnitude) / -127
 * (IQ4_NL's), d = (the s_j of largest magnitude) / -32 so that it gets the
 * six-bit scale 0 (-32), the others ls_j - 32 = nearest(s_j / d) (at most
 * 31), and each element the nearest of d (ls_j - 32) times the 16 values
 * (a plain starting point: llama.cpp's quantizer searches for better
 * scales). */
static void quantize_iq4_xs_block(const float *x, uint8_t *blk) {
    float s[8], smax = 0, sbig = 0;
    for (int j = 0; j < 8; j++) {
        float amax = 0, max = 0;
        for (int l = 0; l < 32; l++)
            if (fabsf(x[32 * j + l]) > amax) amax = fabsf(x[32 * j + l]), max = x[32 * j + l];
        s[j] = max / -127.0f;
        if (fabsf(s[j]) > smax) smax = fabsf(s[j]), sbig = s[j];
    }
    uint16_t d16 = fp16_f32_to_f16(sbig / -32.0f);
    float d = fp16_f16_to_f32(d16);
    memset(blk, 0, 136);
    memcpy(blk, &d16, 2);
    uint16_t sh = 0;
    for (int j = 0; j < 8; j++) {
        long l = d != 0 ? lrintf(s[j] / d) : 0;
        l = l < -32 ? -32 : l > 31 ? 31 : l;
        int ls = (int)l + 32;
        blk[4 + j / 2] |= (uint8_t)((ls & 0xF) << (4 * (j % 2)));
        sh |= (uint16_t)((ls >> 4) << (2 * j));
        float step = d * (float)l;
        for (int k = 0; k < 32; k++) {
            int best = 0;
            for (int c = 1; c < 16; c++)
                if (fabsf(iq4nl_values[c] * step - x[32 * j + k]) < fabsf(iq4nl_values[best] * step - x[32 * j + k]))
                    best = c;
            blk[8 + 16 * j + k % 16] |= (uint8_t)(best << (4 * (k / 16)));
        }
    }
    memcpy(blk + 2, &sh, 2);
}

/* One TQ2_0 or TQ1_0 (tq1) super-block of 256 values (the formats in
 * kernels/kquant.h): d = the mean of |x| (BitNet b1.58's absmean), each
 * value the nearest of -d, 0, d; TQ2_0 stores t + 1 in 2 bits, TQ1_0 five
 * (four in the last 4 bytes, times 3) base-3 digits t + 1, most significant
 * first, as the byte ceil(q 256 / 243). */
static void quantize_tq_block(const float *x, uint8_t *blk, bool tq1) {
    float sum = 0;
    for (int i = 0; i < 256; i++) sum += fabsf(x[i]);
    uint16_t d16 = fp16_f32_to_f16(sum / 256.0f);
    float d = fp16_f16_to_f32(d16);
    int c[256];
    for (int i = 0; i < 256; i++) {
        long t = d > 0 ? lrintf(x[i] / d) : 0;
        c[i] = (int)(t < -1 ? -1 : t > 1 ? 1 : t) + 1;
    }
    if (!tq1) {
        memset(blk, 0, 64);
        for (int e = 0; e < 256; e++) blk[32 * (e / 128) + e % 32] |= (uint8_t)(c[e] << (2 * ((e % 128) / 32)));
        memcpy(blk + 64, &d16, 2);
        return;
    }
    for (int m = 0; m < 52; m++) {
        int q = 0;
        for (int n = 0; n < 5; n++) {
            int e = m < 32 ? 32 * n + m : m < 48 ? 160 + 16 * n + (m - 32) : 240 + 4 * n + (m - 48);
            q = 3 * q + (m < 48 || n < 4 ? c[e] : 0);
        }
        blk[m] = (uint8_t)((q * 256 + 242) / 243);
    }
    memcpy(blk + 52, &d16, 2);
}

static void fill(const pdl_tensor *t, int64_t row0, int64_t rows, void *buf, void *user) {
    (void)user;
    int64_t cols = t->shape[t->n_dims - 1];
    const char *gname = gguf_name_of(t->name);
    uint64_t h = g_seed;
    for (const char *c = gname; *c; c++) h = mix(h ^ (uint8_t)*c);
    bool norm = strstr(t->name, "norm") != NULL, decay = ends_with(gname, ".ssm_a");
    bool dt_bias = ends_with(gname, ".ssm_dt.bias"), conv = ends_with(gname, ".ssm_conv1d.weight");
    float *row = malloc((size_t)cols * sizeof *row);
    for (int64_t r = 0; r < rows; r++) {
        uint64_t s = mix(h ^ (uint64_t)(row0 + r) * 0x9e3779b97f4a7c15ull);
        for (int64_t i = 0; i < cols; i++) {
            s = mix(s + 0x9e3779b97f4a7c15ull);
            double u = (double)(s >> 11) / 9007199254740992.0; /* [0, 1) */
            row[i] = norm || dt_bias ? 1.0f
                     : decay         ? (float)(-16.0 * (1.0 - u))
                     : conv          ? (float)(u - 0.5)
                                     : (float)(u * 0.0692 - 0.0346);
        }
        uint8_t *dst = (uint8_t *)buf + (size_t)r * dtype_row_bytes(t->dtype, cols);
        switch (t->dtype) {
        case PDL_DTYPE_F32: memcpy(dst, row, (size_t)cols * 4); break;
        case PDL_DTYPE_F16:
            for (int64_t i = 0; i < cols; i++) {
                uint16_t v = fp16_f32_to_f16(row[i]);
                memcpy(dst + 2 * i, &v, 2);
            }
            break;
        case PDL_DTYPE_BF16:
            for (int64_t i = 0; i < cols; i++) {
                uint32_t b = fp16_f32_to_bits(row[i]);
                uint16_t v = (uint16_t)((b + 0x7fff + ((b >> 16) & 1)) >> 16); /* round to nearest even */
                memcpy(dst + 2 * i, &v, 2);
            }
            break;
        case PDL_DTYPE_Q8_0:
            for (int64_t b = 0; b < cols / 32; b++) {
                float amax = 0;
                for (int j = 0; j < 32; j++) amax = fabsf(row[b * 32 + j]) > amax ? fabsf(row[b * 32 + j]) : amax;
                float d = amax / 127.0f, id = d ? 1.0f / d : 0.0f;
                uint16_t d16 = fp16_f32_to_f16(d);
                uint8_t *blk = dst + b * 34;
                memcpy(blk, &d16, 2);
                for (int j = 0; j < 32; j++) blk[2 + j] = (uint8_t)(int8_t)lrintf(row[b * 32 + j] * id);
            }
            break;
        case PDL_DTYPE_Q4_0: /* as llama.cpp's quantize_row_q4_0_ref: d = (the value of largest magnitude) / -8 */
            for (int64_t b = 0; b < cols / 32; b++) {
                const float *xb = row + b * 32;
                float amax = 0, max = 0;
                for (int j = 0; j < 32; j++)
                    if (fabsf(xb[j]) > amax) amax = fabsf(xb[j]), max = xb[j];
                float d = max / -8.0f, id = d ? 1.0f / d : 0.0f;
                uint16_t d16 = fp16_f32_to_f16(d);
                uint8_t *blk = dst + b * 18;
                memcpy(blk, &d16, 2);
                for (int j = 0; j < 16; j++) {
                    int lo = (int)(xb[j] * id + 8.5f), hi = (int)(xb[j + 16] * id + 8.5f);
                    blk[2 + j] = (uint8_t)((lo > 15 ? 15 : lo) | (hi > 15 ? 15 : hi) << 4);
                }
            }
            break;
        case PDL_DTYPE_MXFP4: /* as llama.cpp's quantize_row_mxfp4_ref: e = floor(log2(amax)) - 2 + 127, nearest code */
            for (int64_t b = 0; b < cols / 32; b++) {
                const float *xb = row + b * 32;
                float amax = 0;
                for (int j = 0; j < 32; j++) amax = fabsf(xb[j]) > amax ? fabsf(xb[j]) : amax;
                int e = amax > 0 ? (int)floorf(log2f(amax)) - 2 + 127 : 0;
                e = e < 0 ? 0 : e > 254 ? 254 : e;
                float d = mxfp4_scale_half((uint8_t)e);
                uint8_t *blk = dst + b * 17, code[32];
                blk[0] = (uint8_t)e;
                for (int j = 0; j < 32; j++) {
                    int best = 0;
                    for (int c = 1; c < 16; c++)
                        if (fabsf(mxfp4_code2[c] * d - xb[j]) < fabsf(mxfp4_code2[best] * d - xb[j])) best = c;
                    code[j] = (uint8_t)best;
                }
                for (int j = 0; j < 16; j++) blk[1 + j] = (uint8_t)(code[j] | code[j + 16] << 4);
            }
            break;
        case PDL_DTYPE_Q4_K:
        case PDL_DTYPE_Q5_K:
            for (int64_t b = 0; b < cols / 256; b++)
                quantize_k_block(row + b * 256, dst + b * dtype_block_bytes(t->dtype), t->dtype == PDL_DTYPE_Q5_K);
            break;
        case PDL_DTYPE_Q3_K:
            for (int64_t b = 0; b < cols / 256; b++) quantize_q3_k_block(row + b * 256, dst + b * 110);
            break;
        case PDL_DTYPE_Q2_K:
            for (int64_t b = 0; b < cols / 256; b++) quantize_q2_k_block(row + b * 256, dst + b * 84);
            break;
        case PDL_DTYPE_Q6_K:
            for (int64_t b = 0; b < cols / 256; b++) quantize_q6_k_block(row + b * 256, dst + b * 210);
            break;
        case PDL_DTYPE_IQ4_XS:
            for (int64_t b = 0; b < cols / 256; b++) quantize_iq4_xs_block(row + b * 256, dst + b * 136);
            break;
        case PDL_DTYPE_TQ2_0:
        case PDL_DTYPE_TQ1_0:
            for (int64_t b = 0; b < cols / 256; b++)
                quantize_tq_block(row + b * 256, dst + b * dtype_block_bytes(t->dtype), t->dtype == PDL_DTYPE_TQ1_0);
            break;
        case PDL_DTYPE_IQ4_NL: /* d = (the value of largest magnitude) / -127 (llama.cpp's starting point, without
                                * its search for a better d), each element the nearest of the 16 values */
            for (int64_t b = 0; b < cols / 32; b++) {
                const float *xb = row + b * 32;
                float amax = 0, max = 0;
                for (int j = 0; j < 32; j++)
                    if (fabsf(xb[j]) > amax) amax = fabsf(xb[j]), max = xb[j];
                uint16_t d16 = fp16_f32_to_f16(max / -127.0f);
                float d = fp16_f16_to_f32(d16);
                uint8_t *blk = dst + b * 18, code[32];
                memcpy(blk, &d16, 2);
                for (int j = 0; j < 32; j++) {
                    int best = 0;
                    for (int c = 1; c < 16; c++)
                        if (fabsf(iq4nl_values[c] * d - xb[j]) < fabsf(iq4nl_values[best] * d - xb[j])) best = c;
                    code[j] = (uint8_t)best;
                }
                for (int j = 0; j < 16; j++) blk[2 + j] = (uint8_t)(code[j] | code[j + 16] << 4);
            }
            break;
        case PDL_DTYPE_Q5_0: /* d = (the value of largest magnitude) / -16, codes x / d + 16 rounded, at most 31 */
        case PDL_DTYPE_Q4_1: /* d = (max - min) / 15, m = min, codes (x - min) / d rounded */
        case PDL_DTYPE_Q5_1: /* the same over 31 codes */
            for (int64_t b = 0; b < cols / 32; b++) {
                const float *xb = row + b * 32;
                bool with_min = t->dtype != PDL_DTYPE_Q5_0;
                int top = t->dtype == PDL_DTYPE_Q4_1 ? 15 : 31;
                size_t bb = t->dtype == PDL_DTYPE_Q5_0 ? 22 : t->dtype == PDL_DTYPE_Q4_1 ? 20 : 24;
                float amax = 0, max = 0, lo = xb[0], hi = xb[0];
                for (int j = 0; j < 32; j++) {
                    if (fabsf(xb[j]) > amax) amax = fabsf(xb[j]), max = xb[j];
                    lo = xb[j] < lo ? xb[j] : lo, hi = xb[j] > hi ? xb[j] : hi;
                }
                float d = with_min ? (hi - lo) / (float)top : max / -16.0f, id = d ? 1.0f / d : 0.0f;
                uint16_t d16 = fp16_f32_to_f16(d), m16 = fp16_f32_to_f16(lo);
                uint8_t *blk = dst + b * bb, *qh_at = blk + (t->dtype == PDL_DTYPE_Q5_1 ? 4 : 2);
                uint8_t *qs = blk + (t->dtype == PDL_DTYPE_Q5_0 ? 6 : t->dtype == PDL_DTYPE_Q4_1 ? 4 : 8);
                memcpy(blk, &d16, 2);
                if (with_min) memcpy(blk + 2, &m16, 2);
                uint32_t qh = 0;
                int code[32];
                for (int j = 0; j < 32; j++) {
                    int q = with_min ? (int)((xb[j] - lo) * id + 0.5f) : (int)(xb[j] * id + 16.5f);
                    code[j] = q < 0 ? 0 : q > top ? top : q;
                    qh |= (uint32_t)(code[j] >> 4) << j;
                }
                for (int j = 0; j < 16; j++) qs[j] = (uint8_t)((code[j] & 0xF) | (code[j + 16] & 0xF) << 4);
                if (t->dtype != PDL_DTYPE_Q4_1) memcpy(qh_at, &qh, 4);
            }
            break;
        default: break;
        }
    }
    free(row);
}

/* The type a tensor is written in: F32 for vectors (norms, routers, ...);
 * for --dtype mxfp4 llama.cpp's MXFP4_MOE mix (the experts MXFP4, every
 * other matrix Q8_0) where the model has experts, MXFP4 for every matrix
 * of a dense one; Q8_0 for a q2_k / q3_k / q4_k / q5_k / q6_k / iq4_xs / tq2_0 /
 * tq1_0 matrix whose rows are not whole super-blocks of 256; else the
 * --dtype asked for. */
static pdl_dtype tensor_dtype(const tensor_names *tn, pdl_dtype dt, bool moe) {
    if (tn->vector) return PDL_DTYPE_F32;
    if (dt == PDL_DTYPE_MXFP4 && moe && !strstr(tn->gguf, "_exps.")) return PDL_DTYPE_Q8_0;
    if ((dt == PDL_DTYPE_Q4_K || dt == PDL_DTYPE_Q5_K || dt == PDL_DTYPE_Q3_K || dt == PDL_DTYPE_Q2_K ||
         dt == PDL_DTYPE_Q6_K ||
         dt == PDL_DTYPE_IQ4_XS || dt == PDL_DTYPE_TQ2_0 || dt == PDL_DTYPE_TQ1_0) &&
        tn->shape[tn->n_dims - 1] % 256)
        return PDL_DTYPE_Q8_0;
    return dt;
}

/* What the command line asks for. */
typedef struct random_model_args {
    const char *preset, *out, *dtype_s, *format, *tok_dir, *tok_pre;
    int layers, vocab, experts;  /* 0: the preset's */
    uint64_t seed;
    bool mtp;
} random_model_args;

#define A(f) offsetof(random_model_args, f)
static const cli_option RANDOM_MODEL_OPTIONS[] = {
    {"--preset", NULL, CLI_OPT_STRING, A(preset), .value = "NAME",
     .help = "qwen3-0.6b, qwen3-1.7b (qwen3 architecture, tied embeddings); qwen3-test (the same\n"
             "architecture and vocabulary, width 64 and 2 layers: for tests);\n"
             "qwen3-30b-a3b (qwen3moe: 128 experts, 8 per token), olmoe-1b-7b (olmoe: 64 experts, 8 per\n"
             "token), gpt-oss-20b (gpt-oss: 32 experts, 4 per token, sinks, window 128 on every 2nd\n"
             "layer, YaRN): mixtures of experts, GGUF only, usually with fewer --layers; gpt-oss-test\n"
             "(gpt-oss, width 64, 2 layers, 4 experts: for tests);\n"
             "qwen3.5-0.8b (qwen35), qwen3.5-35b-a3b (qwen35moe: 256 experts, 8 per token, and a shared\n"
             "one): hybrid Gated DeltaNet + gated attention (every 4th layer), GGUF only"},
    {"--output", "-o", CLI_OPT_STRING, A(out), .value = "OUT", .help = "the file (or folder, --format hf) written"},
    {"--format", NULL, CLI_OPT_STRING, A(format), .value = "gguf|hf",
     .help = "hf writes a Hugging Face folder OUT (config.json + model.safetensors; f32/f16/bf16)\n"
             "holding exactly the weights the GGUF of the same preset, dtype and seed holds (default gguf)"},
    {"--dtype", NULL, CLI_OPT_STRING, A(dtype_s),
     .value = "f32|f16|bf16|q8_0|q4_0|q4_1|q5_0|q5_1|mxfp4|iq4_nl|q2_k|q3_k|q4_k|q5_k|q6_k|iq4_xs|tq2_0|tq1_0",
     .help = "default bf16; mxfp4: a model with experts gets llama.cpp's MXFP4_MOE mix (experts MXFP4, the other\n"
             "matrices Q8_0), a dense one MXFP4 matrices; q2_k / q3_k / q4_k / q5_k / q6_k / iq4_xs: every\n"
             "matrix (Q8_0 where a row is not whole super-blocks of 256); tq2_0 / tq1_0: the same, every\n"
             "matrix ternary (-d, 0, d with d the block's mean |x|); the quantized types are GGUF only"},
    {"--layers", NULL, CLI_OPT_INT, A(layers), .min = 1, .max = 1000, .value = "N",
     .help = "layers (default: the preset's)"},
    {"--vocab", NULL, CLI_OPT_INT, A(vocab), .min = 2, .max = 1 << 24, .value = "N",
     .help = "vocabulary size (default: the preset's)"},
    {"--experts", NULL, CLI_OPT_INT, A(experts), .min = 1, .max = 4096, .value = "N",
     .help = "routed experts of a mixture-of-experts preset (default: the preset's; experts per\n"
             "token at most N): a small file of the same layout, for tests"},
    {"--seed", NULL, CLI_OPT_U64, A(seed), .value = "S", .help = "random seed (default 1)"},
    {"--mtp", NULL, CLI_OPT_FLAG, A(mtp),
     .help = "Qwen3.5 presets: write the multi-token-prediction block (one more full-attention layer\n"
             "and its nextn.* tensors, nextn_predict_layers 1), as llama.cpp's converter does by default"},
    {"--tokenizer", NULL, CLI_OPT_STRING, A(tok_dir), .value = "DIR",
     .help = "a real byte-level BPE tokenizer (DIR/tokenizer.json, e.g. Qwen3's): copied into\n"
             "the folder, or written as tokenizer.ggml.* metadata; without it a GGUF is llama.cpp's\n"
             "no-vocabulary model (tokenizer.ggml.model \"none\"), for benchmarks"},
    {"--tokenizer-pre", NULL, CLI_OPT_STRING, A(tok_pre), .value = "NAME",
     .help = "tokenizer.ggml.pre of --tokenizer in a GGUF (default qwen2)"},
};
#undef A

static const cli_command RANDOM_MODEL_COMMAND = {
    .name = "make-random-model",
    .usage = "usage: pagedlm make-random-model --preset NAME -o OUT [--format gguf|hf]\n"
             "       [--dtype f32|f16|bf16|q8_0|q4_0|q4_1|q5_0|q5_1|mxfp4|iq4_nl|q2_k|q3_k|q4_k|q5_k|q6_k|iq4_xs|\n"
             "                tq2_0|tq1_0]\n"
             "       [--layers N] [--vocab N] [--experts N] [--seed S] [--mtp]\n",
    .options = RANDOM_MODEL_OPTIONS,
    .n_options = sizeof RANDOM_MODEL_OPTIONS / sizeof RANDOM_MODEL_OPTIONS[0],
};

int cli_make_random_model(int argc, char **argv) {
    random_model_args args = {.dtype_s = "bf16", .format = "gguf", .tok_pre = "qwen2", .seed = 1};
    int prc = cli_parse(&RANDOM_MODEL_COMMAND, argc, argv, &args);
    if (prc) return prc > 0 ? CLI_OK : CLI_USAGE;
    const shape_preset *p = NULL;
    for (size_t i = 0; args.preset && i < sizeof PRESETS / sizeof PRESETS[0]; i++)
        if (strcmp(PRESETS[i].name, args.preset) == 0) p = &PRESETS[i];
    if (!p || !args.out) {
        fprintf(stderr, "error: make-random-model needs --preset (qwen3-0.6b, qwen3-1.7b, qwen3-test, qwen3-30b-a3b, "
                        "olmoe-1b-7b, gpt-oss-20b, gpt-oss-test, qwen3.5-0.8b or qwen3.5-35b-a3b) and -o FILE\n");
        return CLI_USAGE;
    }
    shape_preset cut = *p; /* the preset with --experts applied */
    if (args.experts) {
        if (p->n_experts == 0) {
            fprintf(stderr, "error: --experts: the %s preset has no experts\n", p->name);
            return CLI_USAGE;
        }
        cut.n_experts = args.experts;
        cut.n_experts_used = cut.n_experts_used < args.experts ? cut.n_experts_used : args.experts;
        p = &cut;
    }
    pdl_dtype dt;
    if (strcmp(args.dtype_s, "f32") == 0) dt = PDL_DTYPE_F32;
    else if (strcmp(args.dtype_s, "f16") == 0) dt = PDL_DTYPE_F16;
    else if (strcmp(args.dtype_s, "bf16") == 0) dt = PDL_DTYPE_BF16;
    else if (strcmp(args.dtype_s, "q8_0") == 0) dt = PDL_DTYPE_Q8_0;
    else if (strcmp(args.dtype_s, "q4_0") == 0) dt = PDL_DTYPE_Q4_0;
    else if (strcmp(args.dtype_s, "mxfp4") == 0) dt = PDL_DTYPE_MXFP4;
    else if (strcmp(args.dtype_s, "iq4_nl") == 0) dt = PDL_DTYPE_IQ4_NL;
    else if (strcmp(args.dtype_s, "q5_0") == 0) dt = PDL_DTYPE_Q5_0;
    else if (strcmp(args.dtype_s, "q4_1") == 0) dt = PDL_DTYPE_Q4_1;
    else if (strcmp(args.dtype_s, "q5_1") == 0) dt = PDL_DTYPE_Q5_1;
    else if (strcmp(args.dtype_s, "q4_k") == 0) dt = PDL_DTYPE_Q4_K;
    else if (strcmp(args.dtype_s, "q5_k") == 0) dt = PDL_DTYPE_Q5_K;
    else if (strcmp(args.dtype_s, "q3_k") == 0) dt = PDL_DTYPE_Q3_K;
    else if (strcmp(args.dtype_s, "q2_k") == 0) dt = PDL_DTYPE_Q2_K;
    else if (strcmp(args.dtype_s, "q6_k") == 0) dt = PDL_DTYPE_Q6_K;
    else if (strcmp(args.dtype_s, "iq4_xs") == 0) dt = PDL_DTYPE_IQ4_XS;
    else if (strcmp(args.dtype_s, "tq2_0") == 0) dt = PDL_DTYPE_TQ2_0;
    else if (strcmp(args.dtype_s, "tq1_0") == 0) dt = PDL_DTYPE_TQ1_0;
    else {
        fprintf(stderr,
                "error: --dtype expects f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, mxfp4, iq4_nl, q2_k, q3_k, "
                "q4_k, q5_k, q6_k, iq4_xs, tq2_0 or tq1_0, got '%s'\n",
                args.dtype_s);
        return CLI_USAGE;
    }
    bool hf = strcmp(args.format, "hf") == 0;
    if (!hf && strcmp(args.format, "gguf") != 0) {
        fprintf(stderr, "error: --format expects gguf or hf, got '%s'\n", args.format);
        return CLI_USAGE;
    }
    if (hf && (p->n_experts > 0 || p->attn_interval > 0)) {
        fprintf(stderr, "error: the %s preset is written as GGUF only\n", p->name);
        return CLI_USAGE;
    }
    if (args.mtp && p->attn_interval == 0) {
        fprintf(stderr, "error: --mtp: the %s preset has no multi-token-prediction block\n", p->name);
        return CLI_USAGE;
    }
    if (hf && dtype_is_quantized(dt)) {
        fprintf(stderr, "error: safetensors has no %s: use --dtype f32, f16 or bf16 with --format hf\n", dtype_name(dt));
        return CLI_USAGE;
    }
    int L = args.layers ? (int)args.layers : p->layers, V = args.vocab ? (int)args.vocab : p->vocab;
    g_seed = args.seed;
    fp16_init();
    /* the tensor list, under both names */
    int M = args.mtp ? 1 : 0; /* the MTP block: layer L, and 4 tensors of its own */
    g_names = calloc((size_t)(3 + 20 * (L + M) + 4 * M), sizeof *g_names); /* at most 19 a layer */
    if (!g_names) return CLI_FAIL;
    g_n_names = 0;
    int64_t qd = (int64_t)p->heads * p->head_dim, kd = (int64_t)p->kv_heads * p->head_dim;
#define ADD(G, H, D0, D1, VEC)                                                                     \
    do {                                                                                          \
        tensor_names *tn = &g_names[g_n_names++];                                                 \
        snprintf(tn->gguf, sizeof tn->gguf, "%s", G);                                             \
        snprintf(tn->hf, sizeof tn->hf, "%s", H);                                                 \
        tn->n_dims = (D1) ? 2 : 1, tn->shape[0] = (D0), tn->shape[1] = (D1), tn->vector = (VEC);   \
    } while (0)
    ADD("token_embd.weight", "model.embed_tokens.weight", V, p->hidden, false);
    ADD("output_norm.weight", "model.norm.weight", p->hidden, 0, true);
    if (p->untied) ADD("output.weight", "lm_head.weight", V, p->hidden, false);
    for (int l = 0; p->gptoss && l < L; l++) {
        /* gpt-oss as llama.cpp's converter writes it (GptOssModel): biases on every projection, one sink
         * per query head, the MLP's input norm named post_attention_norm, the router's and the experts'
         * biases F32 beside them */
        int64_t E = p->n_experts, F = p->ffn_expert, H = p->hidden;
        struct {
            const char *gs;
            int64_t d0, d1, d2;
            bool vec;
        } items[] = {{"attn_norm.weight", H, 0, 0, true},
                     {"post_attention_norm.weight", H, 0, 0, true},
                     {"attn_q.weight", qd, H, 0, false},
                     {"attn_q.bias", qd, 0, 0, true},
                     {"attn_k.weight", kd, H, 0, false},
                     {"attn_k.bias", kd, 0, 0, true},
                     {"attn_v.weight", kd, H, 0, false},
                     {"attn_v.bias", kd, 0, 0, true},
                     {"attn_output.weight", H, qd, 0, false},
                     {"attn_output.bias", H, 0, 0, true},
                     {"attn_sinks.weight", p->heads, 0, 0, true},
                     {"ffn_gate_inp.weight", E, H, 0, true},
                     {"ffn_gate_inp.bias", E, 0, 0, true},
                     {"ffn_gate_exps.weight", E, F, H, false},
                     {"ffn_up_exps.weight", E, F, H, false},
                     {"ffn_down_exps.weight", E, H, F, false},
                     {"ffn_gate_exps.bias", E, F, 0, true},
                     {"ffn_up_exps.bias", E, F, 0, true},
                     {"ffn_down_exps.bias", E, H, 0, true}};
        for (size_t i = 0; i < sizeof items / sizeof items[0]; i++) {
            tensor_names *tn = &g_names[g_n_names++];
            snprintf(tn->gguf, sizeof tn->gguf, "blk.%d.%s", l, items[i].gs);
            snprintf(tn->hf, sizeof tn->hf, "%s", tn->gguf);
            tn->n_dims = items[i].d2 ? 3 : items[i].d1 ? 2 : 1;
            tn->shape[0] = items[i].d0, tn->shape[1] = items[i].d1, tn->shape[2] = items[i].d2;
            tn->vector = items[i].vec;
        }
    }
    for (int l = 0; p->n_experts > 0 && !p->gptoss && p->attn_interval == 0 && l < L; l++) {
        /* a mixture of experts: attention as qwen3's, then router and stacked experts */
        int64_t E = p->n_experts, F = p->ffn_expert, H = p->hidden;
        struct {
            const char *gs;
            int64_t d0, d1, d2;
            bool vec;
        } items[] = {{"attn_norm.weight", H, 0, 0, true},
                     {"attn_q.weight", qd, H, 0, false},
                     {"attn_k.weight", kd, H, 0, false},
                     {"attn_v.weight", kd, H, 0, false},
                     {"attn_output.weight", H, qd, 0, false},
                     {"attn_q_norm.weight", p->qk_whole ? qd : p->head_dim, 0, 0, true},
                     {"attn_k_norm.weight", p->qk_whole ? kd : p->head_dim, 0, 0, true},
                     {"ffn_norm.weight", H, 0, 0, true},
                     {"ffn_gate_inp.weight", E, H, 0, true},
                     {"ffn_gate_exps.weight", E, F, H, false},
                     {"ffn_up_exps.weight", E, F, H, false},
                     {"ffn_down_exps.weight", E, H, F, false}};
        for (size_t i = 0; i < sizeof items / sizeof items[0]; i++) {
            tensor_names *tn = &g_names[g_n_names++];
            snprintf(tn->gguf, sizeof tn->gguf, "blk.%d.%s", l, items[i].gs);
            snprintf(tn->hf, sizeof tn->hf, "%s", tn->gguf);
            tn->n_dims = items[i].d2 ? 3 : items[i].d1 ? 2 : 1;
            tn->shape[0] = items[i].d0, tn->shape[1] = items[i].d1, tn->shape[2] = items[i].d2;
            tn->vector = items[i].vec;
        }
    }
    for (int l = 0; p->attn_interval > 0 && l < L + M; l++) {
        /* Qwen3.5, in GGUF's names and llama.cpp's converter's layout (shapes outermost first, as the other
         * lists; GGUF stores them reversed). Full-attention layers: attn_q holds per head the query then its
         * output gate (2 * heads * head_dim rows). Linear layers: attn_qkv is q, k, v before the convolution
         * (conv_dim rows: key heads of q, of k, then value heads of v), attn_gate the gated norm's z,
         * ssm_beta / ssm_alpha a row per value head, ssm_conv1d a kernel per channel, oldest tap first. */
        int64_t H = p->hidden, kd_lin = (int64_t)p->lin_k_heads * p->lin_head_dim;
        int64_t vd_lin = (int64_t)p->lin_v_heads * p->lin_head_dim, conv_dim = 2 * kd_lin + vd_lin;
        int64_t E = p->n_experts, F = p->ffn_expert, S = p->ffn_shared, NV = p->lin_v_heads;
        bool full = (l + 1) % p->attn_interval == 0 || l == L;
        struct {
            const char *gs;
            int64_t d0, d1, d2;
            bool vec; /* F32, as the converter keeps 1-D tensors, norms, routers and the convolution */
        } all[] = {{"attn_norm.weight", H, 0, 0, true},
                   {"post_attention_norm.weight", H, 0, 0, true},
                   {full ? "attn_q.weight" : NULL, 2 * qd, H, 0, false},
                   {full ? "attn_k.weight" : NULL, kd, H, 0, false},
                   {full ? "attn_v.weight" : NULL, kd, H, 0, false},
                   {full ? "attn_output.weight" : NULL, H, qd, 0, false},
                   {full ? "attn_q_norm.weight" : NULL, p->head_dim, 0, 0, true},
                   {full ? "attn_k_norm.weight" : NULL, p->head_dim, 0, 0, true},
                   {full ? NULL : "attn_qkv.weight", conv_dim, H, 0, false},
                   {full ? NULL : "attn_gate.weight", vd_lin, H, 0, false},
                   {full ? NULL : "ssm_conv1d.weight", conv_dim, p->lin_conv, 0, true},
                   {full ? NULL : "ssm_dt.bias", NV, 0, 0, true},
                   {full ? NULL : "ssm_a", NV, 0, 0, true},
                   {full ? NULL : "ssm_beta.weight", NV, H, 0, false},
                   {full ? NULL : "ssm_alpha.weight", NV, H, 0, false},
                   {full ? NULL : "ssm_norm.weight", p->lin_head_dim, 0, 0, true},
                   {full ? NULL : "ssm_out.weight", H, vd_lin, 0, false},
                   {E ? NULL : "ffn_gate.weight", p->ffn, H, 0, false},
                   {E ? NULL : "ffn_up.weight", p->ffn, H, 0, false},
                   {E ? NULL : "ffn_down.weight", H, p->ffn, 0, false},
                   {E ? "ffn_gate_inp.weight" : NULL, E, H, 0, true},
                   {E ? "ffn_gate_exps.weight" : NULL, E, F, H, false},
                   {E ? "ffn_up_exps.weight" : NULL, E, F, H, false},
                   {E ? "ffn_down_exps.weight" : NULL, E, H, F, false},
                   /* the shared expert's sigmoid gate: (hidden), as published Qwen3.5-MoE GGUFs hold it
                    * and llama.cpp's loader declares it */
                   {S ? "ffn_gate_inp_shexp.weight" : NULL, H, 0, 0, true},
                   {S ? "ffn_gate_shexp.weight" : NULL, S, H, 0, false},
                   {S ? "ffn_up_shexp.weight" : NULL, S, H, 0, false},
                   {S ? "ffn_down_shexp.weight" : NULL, H, S, 0, false}};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
            if (!all[i].gs) continue;
            tensor_names *tn = &g_names[g_n_names++];
            snprintf(tn->gguf, sizeof tn->gguf, "blk.%d.%s", l, all[i].gs);
            snprintf(tn->hf, sizeof tn->hf, "%s", tn->gguf);
            tn->n_dims = all[i].d2 ? 3 : all[i].d1 ? 2 : 1;
            tn->shape[0] = all[i].d0, tn->shape[1] = all[i].d1, tn->shape[2] = all[i].d2;
            tn->vector = all[i].vec;
        }
        if (l == L) { /* the MTP block's input projection over [embedding, hidden] and its norms */
            char n[64];
            int64_t H2 = 2 * H;
            snprintf(n, sizeof n, "blk.%d.nextn.eh_proj.weight", l);
            ADD(n, n, H, H2, false);
            static const char *const norms[3] = {"enorm", "hnorm", "shared_head_norm"};
            for (int i = 0; i < 3; i++) {
                snprintf(n, sizeof n, "blk.%d.nextn.%s.weight", l, norms[i]);
                ADD(n, n, H, 0, true);
            }
        }
    }
    for (int l = 0; p->n_experts == 0 && p->attn_interval == 0 && l < L; l++) {
        char g[96], h[96];
        struct {
            const char *gs, *hs;
            int64_t d0, d1;
            bool vec;
        } items[] = {{"attn_norm.weight", "input_layernorm.weight", p->hidden, 0, true},
                     {"attn_q.weight", "self_attn.q_proj.weight", qd, p->hidden, false},
                     {"attn_k.weight", "self_attn.k_proj.weight", kd, p->hidden, false},
                     {"attn_v.weight", "self_attn.v_proj.weight", kd, p->hidden, false},
                     {"attn_output.weight", "self_attn.o_proj.weight", p->hidden, qd, false},
                     {"attn_q_norm.weight", "self_attn.q_norm.weight", p->head_dim, 0, true},
                     {"attn_k_norm.weight", "self_attn.k_norm.weight", p->head_dim, 0, true},
                     {"ffn_norm.weight", "post_attention_layernorm.weight", p->hidden, 0, true},
                     {"ffn_gate.weight", "mlp.gate_proj.weight", p->ffn, p->hidden, false},
                     {"ffn_up.weight", "mlp.up_proj.weight", p->ffn, p->hidden, false},
                     {"ffn_down.weight", "mlp.down_proj.weight", p->hidden, p->ffn, false}};
        for (size_t i = 0; i < sizeof items / sizeof items[0]; i++) {
            snprintf(g, sizeof g, "blk.%d.%s", l, items[i].gs);
            snprintf(h, sizeof h, "model.layers.%d.%s", l, items[i].hs);
            ADD(g, h, items[i].d0, items[i].d1, items[i].vec);
        }
    }
#undef ADD
    pdl_error err;
    int rc;
    if (hf) {
        if (mkdir(args.out, 0755) != 0 && errno != EEXIST) {
            fprintf(stderr, "error: %s: cannot create the folder: %s\n", args.out, strerror(errno));
            free(g_names);
            return CLI_FAIL;
        }
        char path[4096];
        snprintf(path, sizeof path, "%s/config.json", args.out);
        FILE *cf = fopen(path, "w");
        if (!cf) {
            fprintf(stderr, "error: %s: cannot create\n", path);
            free(g_names);
            return CLI_FAIL;
        }
        fprintf(cf,
                "{\n  \"architectures\": [\"Qwen3ForCausalLM\"],\n  \"model_type\": \"qwen3\",\n"
                "  \"hidden_size\": %d,\n  \"intermediate_size\": %d,\n  \"num_hidden_layers\": %d,\n"
                "  \"num_attention_heads\": %d,\n  \"num_key_value_heads\": %d,\n  \"head_dim\": %d,\n"
                "  \"vocab_size\": %d,\n  \"max_position_embeddings\": 40960,\n  \"rms_norm_eps\": %g,\n"
                "  \"rope_theta\": %.1f,\n  \"rope_scaling\": null,\n  \"tie_word_embeddings\": true,\n"
                "  \"hidden_act\": \"silu\",\n  \"attention_bias\": false,\n  \"torch_dtype\": \"%s\"\n}\n",
                p->hidden, p->ffn, L, p->heads, p->kv_heads, p->head_dim, V, p->eps, p->rope_theta,
                dt == PDL_DTYPE_F32 ? "float32" : dt == PDL_DTYPE_F16 ? "float16" : "bfloat16");
        fclose(cf);
        st_out *so = st_out_new();
        for (int i = 0; i < g_n_names; i++)
            st_out_tensor(so, g_names[i].hf, g_names[i].vector ? PDL_DTYPE_F32 : dt, g_names[i].n_dims, g_names[i].shape);
        snprintf(path, sizeof path, "%s/model.safetensors", args.out);
        rc = st_out_write(so, path, fill, NULL, &err);
        st_out_free(so);
        const char *tok_files[] = {"tokenizer.json", "tokenizer_config.json"};
        for (int i = 0; rc == 0 && args.tok_dir && i < 2; i++) {
            char from[4096];
            snprintf(from, sizeof from, "%s/%s", args.tok_dir, tok_files[i]);
            snprintf(path, sizeof path, "%s/%s", args.out, tok_files[i]);
            if (copy_file(from, path)) {
                free(g_names);
                return CLI_FAIL;
            }
        }
    } else {
        gguf_out *g = gguf_out_new();
        char key[128];
        gguf_out_str(g, "general.architecture", p->arch);
        gguf_out_str(g, "general.name", p->name);
#define K(s) (snprintf(key, sizeof key, "%s.%s", p->arch, s), key)
        gguf_out_u32(g, K("block_count"), (uint32_t)(L + M));
        if (M) gguf_out_u32(g, K("nextn_predict_layers"), (uint32_t)M);
        gguf_out_u32(g, K("context_length"), (uint32_t)(p->context ? p->context : 40960));
        gguf_out_u32(g, K("embedding_length"), (uint32_t)p->hidden);
        if (p->ffn) gguf_out_u32(g, K("feed_forward_length"), (uint32_t)p->ffn);
        gguf_out_u32(g, K("attention.head_count"), (uint32_t)p->heads);
        gguf_out_u32(g, K("attention.head_count_kv"), (uint32_t)p->kv_heads);
        gguf_out_u32(g, K("attention.key_length"), (uint32_t)p->head_dim);
        gguf_out_u32(g, K("attention.value_length"), (uint32_t)p->head_dim);
        gguf_out_f32(g, K("rope.freq_base"), p->rope_theta);
        gguf_out_f32(g, K("attention.layer_norm_rms_epsilon"), p->eps);
        gguf_out_u32(g, K("rope.dimension_count"), (uint32_t)(p->rope_dims ? p->rope_dims : p->head_dim));
        if (p->n_experts > 0) {
            gguf_out_u32(g, K("expert_count"), (uint32_t)p->n_experts);
            gguf_out_u32(g, K("expert_used_count"), (uint32_t)p->n_experts_used);
            gguf_out_u32(g, K("expert_feed_forward_length"), (uint32_t)p->ffn_expert);
        }
        if (p->ffn_shared) gguf_out_u32(g, K("expert_shared_feed_forward_length"), (uint32_t)p->ffn_shared);
        if (p->gptoss) {
            gguf_out_u32(g, K("attention.sliding_window"), (uint32_t)p->window);
            gguf_out_str(g, K("rope.scaling.type"), "yarn");
            gguf_out_f32(g, K("rope.scaling.factor"), p->yarn_factor);
            gguf_out_u32(g, K("rope.scaling.original_context_length"), (uint32_t)p->yarn_orig);
        }
        if (p->attn_interval > 0) {
            /* the converter's Gated DeltaNet keys: ssm.state_size is a head's width (keys and values alike),
             * group_count the key heads, time_step_rank the value heads, inner_size their total width;
             * M-RoPE sections [11, 11, 10, 0] (text rows use one position on all of them) */
            const int32_t sections[4] = {11, 11, 10, 0};
            gguf_out_u32(g, K("ssm.conv_kernel"), (uint32_t)p->lin_conv);
            gguf_out_u32(g, K("ssm.state_size"), (uint32_t)p->lin_head_dim);
            gguf_out_u32(g, K("ssm.group_count"), (uint32_t)p->lin_k_heads);
            gguf_out_u32(g, K("ssm.time_step_rank"), (uint32_t)p->lin_v_heads);
            gguf_out_u32(g, K("ssm.inner_size"), (uint32_t)(p->lin_v_heads * p->lin_head_dim));
            gguf_out_u32(g, K("full_attention_interval"), (uint32_t)p->attn_interval);
            gguf_out_i32_arr(g, K("rope.dimension_sections"), sections, 4);
        }
        /* no tokenizer: llama.cpp's "no vocabulary" model (its tokenizer
         * model "none" and the vocabulary's size), which llama-bench runs
         * with the preset's own vocabulary; pagedlm loads it without text */
        if (!args.tok_dir) {
            gguf_out_str(g, "tokenizer.ggml.model", "none");
            gguf_out_u32(g, K("vocab_size"), (uint32_t)V);
        }
#undef K
        if (args.tok_dir && add_gguf_tokenizer(g, args.tok_dir, args.tok_pre, V)) {
            gguf_out_free(g);
            free(g_names);
            return CLI_FAIL;
        }
        for (int i = 0; i < g_n_names; i++)
            gguf_out_tensor(g, g_names[i].gguf, tensor_dtype(&g_names[i], dt, p->n_experts > 0), g_names[i].n_dims,
                            g_names[i].shape);
        rc = gguf_out_write(g, args.out, fill, NULL, &err);
        gguf_out_free(g);
    }
    free(g_names);
    g_names = NULL;
    g_n_names = 0;
    if (rc) {
        fprintf(stderr, "error: %s\n", err.message);
        return CLI_FAIL;
    }
    fprintf(stderr, "pagedlm: wrote %s (%s shape, %d layers, vocab %d, %s)\n", args.out, p->name, L, V, args.dtype_s);
    return CLI_OK;
}
