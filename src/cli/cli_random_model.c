/*
 * cli_random_model.c - `pagedlm make-random-model`: writes a GGUF with
 * random weights in the exact shape of a real model, so speed can be
 * measured and compared (with llama.cpp on the same file) without
 * downloading weights. The text such a model writes is noise.
 */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli_args.h"
#include "format/gguf_write.h"
#include "kernels/fp16.h"

typedef struct shape_preset {
    const char *name;
    int hidden, layers, heads, kv_heads, head_dim, ffn, vocab;
    float rope_theta, eps;
} shape_preset;

static const shape_preset PRESETS[] = {
    {"qwen3-0.6b", 1024, 28, 16, 8, 128, 3072, 151936, 1000000.0f, 1e-6f},
    {"qwen3-1.7b", 2048, 28, 16, 8, 128, 6144, 151936, 1000000.0f, 1e-6f},
};

static void usage(FILE *f) {
    fprintf(f, "usage: pagedlm make-random-model --preset NAME -o FILE.gguf [--dtype f32|f16|bf16|q8_0]\n"
               "       [--layers N] [--vocab N] [--seed S]\n"
               "presets: qwen3-0.6b, qwen3-1.7b (qwen3 architecture, tied embeddings)\n");
}

static uint64_t mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t g_seed;

/* Uniform in [-0.0346, 0.0346): standard deviation 0.02, as initializers use;
 * norm weights are 1. */
static void fill(const pdl_tensor *t, int64_t row0, int64_t rows, void *buf, void *user) {
    (void)user;
    int64_t cols = t->shape[t->n_dims - 1];
    uint64_t h = g_seed;
    for (const char *c = t->name; *c; c++) h = mix(h ^ (uint8_t)*c);
    bool norm = strstr(t->name, "norm") != NULL;
    float *row = malloc((size_t)cols * sizeof *row);
    for (int64_t r = 0; r < rows; r++) {
        uint64_t s = mix(h ^ (uint64_t)(row0 + r) * 0x9e3779b97f4a7c15ull);
        for (int64_t i = 0; i < cols; i++) {
            s = mix(s + 0x9e3779b97f4a7c15ull);
            row[i] = norm ? 1.0f : (float)((double)(s >> 11) / 9007199254740992.0 * 0.0692 - 0.0346);
        }
        uint8_t *dst = (uint8_t *)buf + (size_t)r * pdl_dtype_row_bytes(t->dtype, cols);
        switch (t->dtype) {
        case PDL_DTYPE_F32: memcpy(dst, row, (size_t)cols * 4); break;
        case PDL_DTYPE_F16:
            for (int64_t i = 0; i < cols; i++) {
                uint16_t v = pdl_f32_to_f16(row[i]);
                memcpy(dst + 2 * i, &v, 2);
            }
            break;
        case PDL_DTYPE_BF16:
            for (int64_t i = 0; i < cols; i++) {
                uint32_t b = pdl_f32_to_bits(row[i]);
                uint16_t v = (uint16_t)((b + 0x7fff + ((b >> 16) & 1)) >> 16); /* round to nearest even */
                memcpy(dst + 2 * i, &v, 2);
            }
            break;
        case PDL_DTYPE_Q8_0:
            for (int64_t b = 0; b < cols / 32; b++) {
                float amax = 0;
                for (int j = 0; j < 32; j++) amax = fabsf(row[b * 32 + j]) > amax ? fabsf(row[b * 32 + j]) : amax;
                float d = amax / 127.0f, id = d ? 1.0f / d : 0.0f;
                uint16_t d16 = pdl_f32_to_f16(d);
                uint8_t *blk = dst + b * 34;
                memcpy(blk, &d16, 2);
                for (int j = 0; j < 32; j++) blk[2 + j] = (uint8_t)(int8_t)lrintf(row[b * 32 + j] * id);
            }
            break;
        default: break;
        }
    }
    free(row);
}

int cli_make_random_model(int argc, char **argv) {
    const char *preset = NULL, *out = NULL, *dtype_s = "bf16";
    long layers = 0, vocab = 0;
    uint64_t seed = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return CLI_OK;
        }
        if (!(v = cli_value(argc, argv, &i))) return CLI_USAGE;
        if (strcmp(a, "--preset") == 0) preset = v;
        else if (strcmp(a, "-o") == 0 || strcmp(a, "--output") == 0) out = v;
        else if (strcmp(a, "--dtype") == 0) dtype_s = v;
        else if (strcmp(a, "--layers") == 0) {
            if (cli_int(a, v, 1, 1000, &layers)) return CLI_USAGE;
        } else if (strcmp(a, "--vocab") == 0) {
            if (cli_int(a, v, 2, 1 << 24, &vocab)) return CLI_USAGE;
        } else if (strcmp(a, "--seed") == 0) {
            if (cli_u64(a, v, &seed)) return CLI_USAGE;
        } else {
            fprintf(stderr, "error: unknown option '%s' for make-random-model\n", a);
            usage(stderr);
            return CLI_USAGE;
        }
    }
    const shape_preset *p = NULL;
    for (size_t i = 0; preset && i < sizeof PRESETS / sizeof PRESETS[0]; i++)
        if (strcmp(PRESETS[i].name, preset) == 0) p = &PRESETS[i];
    if (!p || !out) {
        fprintf(stderr, "error: make-random-model needs --preset (qwen3-0.6b or qwen3-1.7b) and -o FILE\n");
        return CLI_USAGE;
    }
    pdl_dtype dt;
    if (strcmp(dtype_s, "f32") == 0) dt = PDL_DTYPE_F32;
    else if (strcmp(dtype_s, "f16") == 0) dt = PDL_DTYPE_F16;
    else if (strcmp(dtype_s, "bf16") == 0) dt = PDL_DTYPE_BF16;
    else if (strcmp(dtype_s, "q8_0") == 0) dt = PDL_DTYPE_Q8_0;
    else {
        fprintf(stderr, "error: --dtype expects f32, f16, bf16 or q8_0, got '%s'\n", dtype_s);
        return CLI_USAGE;
    }
    int L = layers ? (int)layers : p->layers, V = vocab ? (int)vocab : p->vocab;
    g_seed = seed;
    pdl_fp16_init();
    gguf_out *g = gguf_out_new();
    char key[128];
    gguf_out_str(g, "general.architecture", "qwen3");
    gguf_out_str(g, "general.name", p->name);
#define K(s) (snprintf(key, sizeof key, "qwen3.%s", s), key)
    gguf_out_u32(g, K("block_count"), (uint32_t)L);
    gguf_out_u32(g, K("context_length"), 40960);
    gguf_out_u32(g, K("embedding_length"), (uint32_t)p->hidden);
    gguf_out_u32(g, K("feed_forward_length"), (uint32_t)p->ffn);
    gguf_out_u32(g, K("attention.head_count"), (uint32_t)p->heads);
    gguf_out_u32(g, K("attention.head_count_kv"), (uint32_t)p->kv_heads);
    gguf_out_u32(g, K("attention.key_length"), (uint32_t)p->head_dim);
    gguf_out_u32(g, K("attention.value_length"), (uint32_t)p->head_dim);
    gguf_out_f32(g, K("rope.freq_base"), p->rope_theta);
    gguf_out_f32(g, K("attention.layer_norm_rms_epsilon"), p->eps);
#undef K
    int64_t qd = (int64_t)p->heads * p->head_dim, kd = (int64_t)p->kv_heads * p->head_dim;
    int64_t emb[2] = {V, p->hidden}, hid[1] = {p->hidden}, hd[1] = {p->head_dim};
    gguf_out_tensor(g, "token_embd.weight", dt, 2, emb);
    gguf_out_tensor(g, "output_norm.weight", PDL_DTYPE_F32, 1, hid);
    for (int l = 0; l < L; l++) {
        char n[96];
        struct {
            const char *suffix;
            int64_t rows, cols;
        } mats[] = {{"attn_q.weight", qd, p->hidden},     {"attn_k.weight", kd, p->hidden},
                    {"attn_v.weight", kd, p->hidden},     {"attn_output.weight", p->hidden, qd},
                    {"ffn_gate.weight", p->ffn, p->hidden}, {"ffn_up.weight", p->ffn, p->hidden},
                    {"ffn_down.weight", p->hidden, p->ffn}};
        for (size_t i = 0; i < sizeof mats / sizeof mats[0]; i++) {
            snprintf(n, sizeof n, "blk.%d.%s", l, mats[i].suffix);
            int64_t sh[2] = {mats[i].rows, mats[i].cols};
            gguf_out_tensor(g, n, dt, 2, sh);
        }
        const char *vecs[] = {"attn_norm.weight", "ffn_norm.weight"};
        for (int i = 0; i < 2; i++) {
            snprintf(n, sizeof n, "blk.%d.%s", l, vecs[i]);
            gguf_out_tensor(g, n, PDL_DTYPE_F32, 1, hid);
        }
        const char *hvecs[] = {"attn_q_norm.weight", "attn_k_norm.weight"};
        for (int i = 0; i < 2; i++) {
            snprintf(n, sizeof n, "blk.%d.%s", l, hvecs[i]);
            gguf_out_tensor(g, n, PDL_DTYPE_F32, 1, hd);
        }
    }
    pdl_error err;
    int rc = gguf_out_write(g, out, fill, NULL, &err);
    gguf_out_free(g);
    if (rc) {
        fprintf(stderr, "error: %s\n", err.message);
        return CLI_FAIL;
    }
    fprintf(stderr, "pagedlm: wrote %s (%s shape, %d layers, vocab %d, %s)\n", out, p->name, L, V, dtype_s);
    return CLI_OK;
}
