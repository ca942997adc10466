/*
 * gptoss_writer.c - tiny random-weight gpt-oss models as a Hugging Face
 * folder and a GGUF file (see gptoss_writer.h).
 */
#define _POSIX_C_SOURCE 200809L
#include "gptoss_writer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf_writer.h"
#include "kernels/fp16.h"
#include "kernels/matmul.h"
#include "st_writer.h"
#include "test_util.h"

static uint64_t rng;
static double urand(void) { /* uniform in [-1, 1) */
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

static float *vec(size_t n, double center, double spread) {
    float *v = malloc(n * sizeof *v);
    REQUIRE(v != NULL);
    for (size_t i = 0; i < n; i++) v[i] = (float)(center + spread * urand());
    return v;
}

/* E2M1: the values of codes 0-7 (bit 3 the sign) */
static const float E2M1[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

/* n strided values (x[i * stride]) as one MXFP4 block: *e the shared
 * exponent byte, codes[32]; x rewritten to the values the block holds. */
static void mxfp4_snap(float *x, size_t stride, uint8_t *e_out, uint8_t *codes) {
    float amax = 0;
    for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[j * stride]));
    int e = amax > 0 ? (int)floorf(log2f(amax)) - 2 + 127 : 0;
    if (e < 1) e = 1;
    float d = ldexpf(1.0f, e - 127);
    for (int j = 0; j < 32; j++) {
        float v = x[j * stride];
        int best = 0;
        for (int c = 1; c < 8; c++)
            if (fabsf(E2M1[c] * d - fabsf(v)) < fabsf(E2M1[best] * d - fabsf(v))) best = c;
        codes[j] = (uint8_t)(best | (v < 0 && best ? 8 : 0));
        x[j * stride] = (v < 0 ? -1.0f : 1.0f) * E2M1[best] * d;
    }
    *e_out = (uint8_t)e;
}

gpo_spec gpo_tiny_spec(void) {
    return (gpo_spec){.hidden = 64, .layers = 4, .heads = 4, .kv_heads = 2, .head_dim = 16, .vocab = 96,
                      .experts = 8, .experts_used = 4, .ffn = 32, .window = 16, .max_pos = 256, .orig = 64,
                      .factor = 4, .beta_fast = 8, .beta_slow = 0.5, .theta = 100, .eps = 1e-5};
}

gpo_weights gpo_make_weights(const gpo_spec *s, uint64_t seed) {
    rng = seed | 1;
    int H = s->hidden, q = s->heads * s->head_dim, kv = s->kv_heads * s->head_dim, E = s->experts, F = s->ffn;
    double in = 1.7 / sqrt((double)H);
    gpo_weights w = {0};
    w.embed = vec((size_t)s->vocab * H, 0, 1);
    w.final_norm = vec((size_t)H, 1, 0.3);
    w.lm_head = vec((size_t)s->vocab * H, 0, in);
    w.l = calloc((size_t)s->layers, sizeof *w.l);
    REQUIRE(w.l != NULL);
    for (int l = 0; l < s->layers; l++) {
        gpo_layer *L = &w.l[l];
        L->in_norm = vec((size_t)H, 1, 0.3), L->post_norm = vec((size_t)H, 1, 0.3);
        L->wq = vec((size_t)q * H, 0, in), L->bq = vec((size_t)q, 0, 0.3);
        L->wk = vec((size_t)kv * H, 0, in), L->bk = vec((size_t)kv, 0, 0.3);
        L->wv = vec((size_t)kv * H, 0, in), L->bv = vec((size_t)kv, 0, 0.3);
        L->wo = vec((size_t)H * q, 0, 1.7 / sqrt((double)q)), L->bo = vec((size_t)H, 0, 0.3);
        L->sinks = vec((size_t)s->heads, 1.0, 2.0);
        L->router = vec((size_t)E * H, 0, in), L->router_b = vec((size_t)E, 0, 0.5);
        /* large enough that gate and up often leave [-7, 7] */
        L->gate_up = vec((size_t)E * H * 2 * F, 0, 10.0 / sqrt((double)H));
        L->gate_up_b = vec((size_t)E * 2 * F, 0, 1.0);
        L->down = vec((size_t)E * F * H, 0, 0.15 / sqrt((double)F)), L->down_b = vec((size_t)E * H, 0, 0.3);
        if (s->mxfp4_experts) { /* the values an MXFP4 file holds: rows of the converter's layout */
            uint8_t e8, codes[32];
            for (int e = 0; e < E; e++) {
                for (int c = 0; c < 2 * F; c++) /* gate / up row c / 2: column c over hidden */
                    for (int h0 = 0; h0 < H; h0 += 32)
                        mxfp4_snap(L->gate_up + ((size_t)e * H + h0) * 2 * F + c, (size_t)2 * F, &e8, codes);
                for (int h = 0; h < H; h++) /* down row h: over the expert width */
                    for (int f0 = 0; f0 < F; f0 += 32)
                        mxfp4_snap(L->down + ((size_t)e * F + f0) * H + h, (size_t)H, &e8, codes);
            }
        }
        if (s->bf16_experts) { /* the values a BF16 file holds, for the reference too */
            for (size_t i = 0; i < (size_t)E * H * 2 * F; i++)
                L->gate_up[i] = fp16_bf16_to_f32(fp16_f32_to_bf16(L->gate_up[i]));
            for (size_t i = 0; i < (size_t)E * F * H; i++) L->down[i] = fp16_bf16_to_f32(fp16_f32_to_bf16(L->down[i]));
        }
    }
    return w;
}

void gpo_free_weights(const gpo_spec *s, gpo_weights *w) {
    free(w->embed), free(w->final_norm), free(w->lm_head);
    for (int l = 0; l < s->layers; l++) {
        gpo_layer *L = &w->l[l];
        free(L->in_norm), free(L->post_norm), free(L->wq), free(L->bq), free(L->wk), free(L->bk), free(L->wv);
        free(L->bv), free(L->wo), free(L->bo), free(L->sinks), free(L->router), free(L->router_b);
        free(L->gate_up), free(L->gate_up_b), free(L->down), free(L->down_b);
    }
    free(w->l);
    memset(w, 0, sizeof *w);
}

/* n floats as BF16 (exact: they hold BF16 values), malloc'ed */
static uint16_t *to_bf16(const float *x, size_t n) {
    uint16_t *b = malloc(n * sizeof *b);
    REQUIRE(b != NULL);
    for (size_t i = 0; i < n; i++) b[i] = fp16_f32_to_bf16(x[i]);
    return b;
}

void gpo_write_hf(const gpo_spec *s, const gpo_weights *w, const char *dir) {
    char types[1024] = "";
    size_t off = 0;
    for (int l = 0; l < s->layers; l++)
        off += (size_t)snprintf(types + off, sizeof types - off, "%s\"%s\"", l ? ", " : "",
                                l % 2 == 0 ? "sliding_attention" : "full_attention");
    char cfg[4096];
    snprintf(cfg, sizeof cfg,
             "{\n  \"model_type\": \"gpt_oss\", \"architectures\": [\"GptOssForCausalLM\"],\n"
             "  \"hidden_size\": %d, \"intermediate_size\": %d, \"num_hidden_layers\": %d,\n"
             "  \"num_attention_heads\": %d, \"num_key_value_heads\": %d, \"head_dim\": %d, \"vocab_size\": %d,\n"
             "  \"num_local_experts\": %d, \"num_experts_per_tok\": %d, \"experts_per_token\": %d,\n"
             "  \"max_position_embeddings\": %d, \"rms_norm_eps\": %g, \"rope_theta\": %.17g,\n"
             "  \"sliding_window\": %d, \"layer_types\": [%s], \"attention_bias\": true,\n"
             "  \"swiglu_limit\": 7.0, \"hidden_act\": \"silu\", \"tie_word_embeddings\": false,\n"
             "  \"bos_token_id\": 2, \"eos_token_id\": 1,\n"
             "  \"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": %.17g, \"beta_fast\": %.17g,\n"
             "    \"beta_slow\": %.17g, \"original_max_position_embeddings\": %d, \"truncate\": %s}%s\n}\n",
             s->hidden, s->ffn, s->layers, s->heads, s->kv_heads, s->head_dim, s->vocab, s->experts, s->experts_used,
             s->experts_used, s->max_pos, s->eps, s->theta, s->window, types, s->factor,
             s->beta_fast, s->beta_slow, s->orig, s->hf_truncate ? "true" : "false",
             s->hf_mxfp4 ? ",\n  \"quantization_config\": {\"quant_method\": \"mxfp4\", \"modules_to_not_convert\": "
                           "[\"model.layers.*.self_attn\", \"model.layers.*.mlp.router\", \"model.embed_tokens\", "
                           "\"lm_head\"]}" : "");
    char *path = test_join(dir, "config.json");
    test_write_file(path, cfg, strlen(cfg));
    free(path);
    int H = s->hidden, q = s->heads * s->head_dim, kv = s->kv_heads * s->head_dim, E = s->experts, F = s->ffn;
    stw_writer *st = stw_new();
#define PUT(name, nd, ...) stw_add_f32(st, name, nd, (const int64_t[]){__VA_ARGS__}, data)
    const float *data;
    char n[160];
    data = w->embed, PUT("model.embed_tokens.weight", 2, s->vocab, H);
    data = w->final_norm, PUT("model.norm.weight", 1, H);
    data = w->lm_head, PUT("lm_head.weight", 2, s->vocab, H);
    for (int l = 0; l < s->layers; l++) {
        const gpo_layer *L = &w->l[l];
#define NAME(x) (snprintf(n, sizeof n, "model.layers.%d.%s", l, x), n)
        data = L->in_norm, PUT(NAME("input_layernorm.weight"), 1, H);
        data = L->post_norm, PUT(NAME("post_attention_layernorm.weight"), 1, H);
        data = L->wq, PUT(NAME("self_attn.q_proj.weight"), 2, q, H);
        data = L->bq, PUT(NAME("self_attn.q_proj.bias"), 1, q);
        data = L->wk, PUT(NAME("self_attn.k_proj.weight"), 2, kv, H);
        data = L->bk, PUT(NAME("self_attn.k_proj.bias"), 1, kv);
        data = L->wv, PUT(NAME("self_attn.v_proj.weight"), 2, kv, H);
        data = L->bv, PUT(NAME("self_attn.v_proj.bias"), 1, kv);
        data = L->wo, PUT(NAME("self_attn.o_proj.weight"), 2, H, q);
        data = L->bo, PUT(NAME("self_attn.o_proj.bias"), 1, H);
        data = L->sinks, PUT(NAME("self_attn.sinks"), 1, s->heads);
        data = L->router, PUT(NAME("mlp.router.weight"), 2, E, H);
        data = L->router_b, PUT(NAME("mlp.router.bias"), 1, E);
        if (s->hf_mxfp4) { /* the experts' values are MXFP4's already (mxfp4_experts): re-snapping finds them */
            for (int p = 0; p < 2; p++) { /* gate_up: row c is column c over hidden; down: row h over the width */
                int rows = p ? H : 2 * F, cols = p ? F : H;
                size_t nb = (size_t)E * rows * (cols / 32);
                uint8_t *blocks = malloc(nb * 16), *scales = malloc(nb), codes[32];
                REQUIRE(blocks && scales);
                float *vals = malloc((size_t)cols * sizeof *vals);
                REQUIRE(vals != NULL);
                for (int e = 0; e < E; e++)
                    for (int r = 0; r < rows; r++) {
                        for (int i = 0; i < cols; i++)
                            vals[i] = p ? L->down[((size_t)e * F + i) * H + r] : L->gate_up[((size_t)e * H + i) * 2 * F + r];
                        for (int b0 = 0; b0 < cols; b0 += 32) {
                            size_t b = ((size_t)e * rows + r) * (cols / 32) + b0 / 32;
                            mxfp4_snap(vals + b0, 1, &scales[b], codes);
                            for (int j = 0; j < 16; j++) /* byte j: values 2j (low nibble) and 2j + 1 */
                                blocks[b * 16 + j] = (uint8_t)(codes[2 * j] | codes[2 * j + 1] << 4);
                        }
                    }
                stw_add(st, NAME(p ? "mlp.experts.down_proj_blocks" : "mlp.experts.gate_up_proj_blocks"), "U8", 4,
                        (const int64_t[]){E, rows, cols / 32, 16}, blocks);
                stw_add(st, NAME(p ? "mlp.experts.down_proj_scales" : "mlp.experts.gate_up_proj_scales"), "U8", 3,
                        (const int64_t[]){E, rows, cols / 32}, scales);
                free(blocks), free(scales), free(vals);
            }
        } else if (s->bf16_experts) {
            uint16_t *b = to_bf16(L->gate_up, (size_t)E * H * 2 * F);
            stw_add(st, NAME("mlp.experts.gate_up_proj"), "BF16", 3, (const int64_t[]){E, H, 2 * F}, b);
            free(b);
            b = to_bf16(L->down, (size_t)E * F * H);
            stw_add(st, NAME("mlp.experts.down_proj"), "BF16", 3, (const int64_t[]){E, F, H}, b);
            free(b);
        } else {
            data = L->gate_up, PUT(NAME("mlp.experts.gate_up_proj"), 3, E, H, 2 * F);
            data = L->down, PUT(NAME("mlp.experts.down_proj"), 3, E, F, H);
        }
        data = L->gate_up_b, PUT(NAME("mlp.experts.gate_up_proj_bias"), 2, E, 2 * F);
        data = L->down_b, PUT(NAME("mlp.experts.down_proj_bias"), 2, E, H);
#undef NAME
    }
#undef PUT
    path = test_join(dir, "model.safetensors");
    REQUIRE_MSG(stw_write(st, path) == 0, "cannot write %s", path);
    free(path);
    stw_free(st);
}

/* rows x cols floats (cols a multiple of 32) as Q8_0 blocks, malloc'ed:
 * a half scale, then 32 int8, quantized as llama.cpp does */
static uint8_t *to_q8_0(const float *x, size_t n, size_t *bytes) {
    size_t nb = n / 32;
    uint8_t *blocks = malloc(nb * 34);
    REQUIRE(blocks != NULL);
    int8_t qs[32];
    for (size_t b = 0; b < nb; b++) {
        float d;
        matmul_quantize_row_q8_0(x + b * 32, 32, qs, &d);
        uint16_t h = fp16_f32_to_f16(d);
        memcpy(blocks + b * 34, &h, 2);
        memcpy(blocks + b * 34 + 2, qs, 32);
    }
    *bytes = nb * 34;
    return blocks;
}

void gpo_write_gguf(const gpo_spec *s, const gpo_weights *w, const char *path) {
    gguf_writer *gw = gguf_writer_new(3);
    const char *a = "gpt-oss";
    char k[160];
#define KEY(x) (snprintf(k, sizeof k, "%s.%s", a, x), k)
    gguf_writer_add_str(gw, "general.architecture", a);
    gguf_writer_add_u32(gw, KEY("context_length"), (uint32_t)s->max_pos);
    gguf_writer_add_u32(gw, KEY("embedding_length"), (uint32_t)s->hidden);
    gguf_writer_add_u32(gw, KEY("feed_forward_length"), (uint32_t)s->ffn);
    gguf_writer_add_u32(gw, KEY("block_count"), (uint32_t)s->layers);
    gguf_writer_add_u32(gw, KEY("attention.head_count"), (uint32_t)s->heads);
    gguf_writer_add_u32(gw, KEY("attention.head_count_kv"), (uint32_t)s->kv_heads);
    gguf_writer_add_u32(gw, KEY("attention.key_length"), (uint32_t)s->head_dim);
    gguf_writer_add_u32(gw, KEY("attention.value_length"), (uint32_t)s->head_dim);
    gguf_writer_add_f32(gw, KEY("rope.freq_base"), (float)s->theta);
    gguf_writer_add_f32(gw, KEY("attention.layer_norm_rms_epsilon"), (float)s->eps);
    gguf_writer_add_u32(gw, KEY("expert_count"), (uint32_t)s->experts);
    gguf_writer_add_u32(gw, KEY("expert_used_count"), (uint32_t)s->experts_used);
    gguf_writer_add_u32(gw, KEY("expert_feed_forward_length"), (uint32_t)s->ffn);
    gguf_writer_add_u32(gw, KEY("attention.sliding_window"), (uint32_t)s->window);
    gguf_writer_add_str(gw, KEY("rope.scaling.type"), "yarn");
    gguf_writer_add_f32(gw, KEY("rope.scaling.factor"), (float)s->factor);
    gguf_writer_add_u32(gw, KEY("rope.scaling.original_context_length"), (uint32_t)s->orig);
    gguf_writer_add_f32(gw, KEY("rope.scaling.yarn_beta_fast"), (float)s->beta_fast);
    gguf_writer_add_f32(gw, KEY("rope.scaling.yarn_beta_slow"), (float)s->beta_slow);
    gguf_writer_add_u32(gw, "tokenizer.ggml.bos_token_id", 2);
    if (s->gguf_harmony_vocab) { /* as llama.cpp's converter: <|return|> the only EOS */
        char **toks = malloc((size_t)s->vocab * sizeof *toks);
        int32_t *types = malloc((size_t)s->vocab * sizeof *types);
        REQUIRE(toks && types);
        for (int i = 0; i < s->vocab; i++) {
            toks[i] = malloc(16);
            REQUIRE(toks[i] != NULL);
            snprintf(toks[i], 16, "t%d", i);
            types[i] = 1;
        }
        snprintf(toks[s->vocab - 2], 16, "<|return|>"), snprintf(toks[s->vocab - 1], 16, "<|call|>");
        types[s->vocab - 2] = types[s->vocab - 1] = 3; /* control */
        gguf_writer_add_str(gw, "tokenizer.ggml.model", "gpt2");
        gguf_writer_add_str(gw, "tokenizer.ggml.pre", "gpt-4o");
        gguf_writer_add_str_arr(gw, "tokenizer.ggml.tokens", (const char *const *)toks, (size_t)s->vocab);
        gguf_writer_add_arr(gw, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, types, (size_t)s->vocab);
        gguf_writer_add_str_arr(gw, "tokenizer.ggml.merges", NULL, 0);
        gguf_writer_add_u32(gw, "tokenizer.ggml.eos_token_id", (uint32_t)(s->vocab - 2));
        for (int i = 0; i < s->vocab; i++) free(toks[i]);
        free(toks), free(types);
    } else {
        gguf_writer_add_u32(gw, "tokenizer.ggml.eos_token_id", 1);
    }
#undef KEY
    int H = s->hidden, q = s->heads * s->head_dim, kv = s->kv_heads * s->head_dim, E = s->experts, F = s->ffn;
    char n[160];
#define PUT(name, nd, ...) gguf_writer_add_tensor_f32(gw, name, nd, (const int64_t[]){__VA_ARGS__}, data)
    const float *data;
    data = w->embed, PUT("token_embd.weight", 2, s->vocab, H);
    data = w->final_norm, PUT("output_norm.weight", 1, H);
    data = w->lm_head, PUT("output.weight", 2, s->vocab, H);
    float *gate = malloc((size_t)E * F * H * sizeof *gate), *up = malloc((size_t)E * F * H * sizeof *up);
    float *down = malloc((size_t)E * H * F * sizeof *down);
    float *gb = malloc((size_t)E * F * sizeof *gb), *ub = malloc((size_t)E * F * sizeof *ub);
    REQUIRE(gate && up && down && gb && ub);
    for (int l = 0; l < s->layers; l++) {
        const gpo_layer *L = &w->l[l];
#define NAME(x) (snprintf(n, sizeof n, "blk.%d.%s", l, x), n)
        data = L->in_norm, PUT(NAME("attn_norm.weight"), 1, H);
        data = L->post_norm, PUT(NAME("post_attention_norm.weight"), 1, H);
        data = L->wq, PUT(NAME("attn_q.weight"), 2, q, H);
        data = L->bq, PUT(NAME("attn_q.bias"), 1, q);
        data = L->wk, PUT(NAME("attn_k.weight"), 2, kv, H);
        data = L->bk, PUT(NAME("attn_k.bias"), 1, kv);
        data = L->wv, PUT(NAME("attn_v.weight"), 2, kv, H);
        data = L->bv, PUT(NAME("attn_v.bias"), 1, kv);
        data = L->wo, PUT(NAME("attn_output.weight"), 2, H, q);
        data = L->bo, PUT(NAME("attn_output.bias"), 1, H);
        if (!s->gguf_no_sinks) data = L->sinks, PUT(NAME("attn_sinks.weight"), 1, s->heads);
        data = L->router, PUT(NAME("ffn_gate_inp.weight"), 2, E, H);
        data = L->router_b, PUT(NAME("ffn_gate_inp.bias"), 1, E);
        /* the converter: gate_up_proj transposed to (E, 2F, H), even rows gate, odd up */
        for (int e = 0; e < E; e++) {
            for (int f = 0; f < F; f++) {
                for (int h = 0; h < H; h++) {
                    const float *at = L->gate_up + ((size_t)e * H + h) * 2 * F + 2 * f;
                    gate[((size_t)e * F + f) * H + h] = at[0];
                    up[((size_t)e * F + f) * H + h] = at[1];
                }
                gb[(size_t)e * F + f] = L->gate_up_b[(size_t)e * 2 * F + 2 * f];
                ub[(size_t)e * F + f] = L->gate_up_b[(size_t)e * 2 * F + 2 * f + 1];
            }
            for (int h = 0; h < H; h++)
                for (int f = 0; f < F; f++)
                    down[((size_t)e * H + h) * F + f] = L->down[((size_t)e * F + f) * H + h];
        }
        if (s->mxfp4_experts) { /* values already MXFP4's: re-snapping finds the same codes */
            float *mats[3] = {gate, up, down};
            const char *names[3] = {"ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_down_exps.weight"};
            for (int p = 0; p < 3; p++) {
                int cols = p < 2 ? H : F;
                size_t nb = (size_t)E * F * H / 32;
                uint8_t *blocks = malloc(nb * 17), codes[32];
                REQUIRE(blocks != NULL);
                for (size_t b = 0; b < nb; b++) {
                    uint8_t *blk = blocks + b * 17;
                    mxfp4_snap(mats[p] + b * 32, 1, &blk[0], codes);
                    for (int j = 0; j < 16; j++) blk[1 + j] = (uint8_t)(codes[j] | codes[j + 16] << 4);
                }
                uint64_t ne[3] = {(uint64_t)cols, (uint64_t)(p < 2 ? F : H), (uint64_t)E};
                gguf_writer_add_tensor(gw, NAME(names[p]), 39 /* MXFP4 */, 3, ne, blocks, nb * 17);
                free(blocks);
            }
        } else if (s->gguf_fused_gate_up) {
            float *gu = malloc((size_t)E * 2 * F * H * sizeof *gu), *gub = malloc((size_t)E * 2 * F * sizeof *gub);
            REQUIRE(gu && gub);
            for (int e = 0; e < E; e++) {
                memcpy(gu + (size_t)e * 2 * F * H, gate + (size_t)e * F * H, (size_t)F * H * sizeof *gu);
                memcpy(gu + (size_t)e * 2 * F * H + (size_t)F * H, up + (size_t)e * F * H, (size_t)F * H * sizeof *gu);
                memcpy(gub + (size_t)e * 2 * F, gb + (size_t)e * F, (size_t)F * sizeof *gub);
                memcpy(gub + (size_t)e * 2 * F + F, ub + (size_t)e * F, (size_t)F * sizeof *gub);
            }
            data = gu, PUT(NAME("ffn_gate_up_exps.weight"), 3, E, 2 * F, H);
            data = gub, PUT(NAME("ffn_gate_up_exps.bias"), 2, E, 2 * F);
            data = down, PUT(NAME("ffn_down_exps.weight"), 3, E, H, F);
            free(gu), free(gub);
        } else if (s->gguf_q8_0_experts) {
            const float *mats[3] = {gate, up, down};
            const char *names[3] = {"ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_down_exps.weight"};
            for (int p = 0; p < 3; p++) {
                uint64_t ne[3] = {(uint64_t)(p < 2 ? H : F), (uint64_t)(p < 2 ? F : H), (uint64_t)E};
                size_t bytes;
                uint8_t *b = to_q8_0(mats[p], (size_t)E * F * H, &bytes);
                gguf_writer_add_tensor(gw, NAME(names[p]), GW_GGML_Q8_0, 3, ne, b, bytes);
                free(b);
            }
        } else if (s->bf16_experts) {
            const float *mats[3] = {gate, up, down};
            const char *names[3] = {"ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_down_exps.weight"};
            for (int p = 0; p < 3; p++) {
                uint64_t ne[3] = {(uint64_t)(p < 2 ? H : F), (uint64_t)(p < 2 ? F : H), (uint64_t)E};
                uint16_t *b = to_bf16(mats[p], (size_t)E * F * H);
                gguf_writer_add_tensor(gw, NAME(names[p]), GW_GGML_BF16, 3, ne, b, (size_t)E * F * H * 2);
                free(b);
            }
        } else {
            data = gate, PUT(NAME("ffn_gate_exps.weight"), 3, E, F, H);
            data = up, PUT(NAME("ffn_up_exps.weight"), 3, E, F, H);
            data = down, PUT(NAME("ffn_down_exps.weight"), 3, E, H, F);
        }
        if (!s->gguf_fused_gate_up) {
            data = gb, PUT(NAME("ffn_gate_exps.bias"), 2, E, F);
            data = ub, PUT(NAME("ffn_up_exps.bias"), 2, E, F);
        }
        data = L->down_b, PUT(NAME("ffn_down_exps.bias"), 2, E, H);
#undef NAME
    }
#undef PUT
    REQUIRE_MSG(gguf_writer_write(gw, path) == 0, "cannot write %s", path);
    free(gate), free(up), free(down), free(gb), free(ub);
    gguf_writer_free(gw);
}
