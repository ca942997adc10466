/*
 * test_vision_qwen25vl.c - Qwen2.5-VL (Qwen2_5_VLForConditionalGeneration)
 * against a float64 forward written from the published description
 * (transformers' modeling_qwen2_5_vl.py: the vision tower with its 2-D
 * rotary embedding, window attention and fullatt_block_indexes, the patch
 * merger, get_rope_index, the Qwen2 decoder with
 * apply_multimodal_rotary_pos_emb; vLLM's mrope_position_delta for the
 * decode rows), image preprocessing included.
 *
 * The model is a tiny random-weight folder written here: the text part 2
 * layers of width 48, 3 query heads and one KV head of 16, Q/K/V biases,
 * mrope_section [2, 3, 3] over the 8 frequency pairs (as [16, 24, 24] cuts
 * Qwen2.5-VL's 64); the tower 3 layers of width 32 (layer 1 full
 * attention, 0 and 2 in windows of 2 x 2 merged cells), patches of 4 px,
 * merged 2 x 2. The image is rgb_png (131 x 90, not square) from
 * scripts/vision-reference-pixels, whose PIL/numpy Qwen2VLImageProcessor
 * steps (smart_resize to 56 x 40 under the [256, 2560] pixel budget,
 * bicubic, rescale, normalise, the flattened patches) give the reference's
 * input: 14 x 10 patches, 7 x 5 merged cells, windows cut by the grid's
 * right and bottom edges.
 *
 * The references follow transformers' layouts literally and share no code
 * with src/: M-RoPE as cos/sin of cat(freqs, freqs) cut into mrope_section
 * * 2 chunks, chunk j from component j % 3; the tower in the processor's
 * row order with windows as a mask (rows of the same window see each
 * other) where the engine regroups rows by window and attends over ranges.
 *
 * The same model is also written as llama.cpp's pair (text GGUF with
 * architecture qwen2vl, mmproj with projector type qwen2.5vl_merger, as
 * convert_hf_to_gguf.py lays them out) and must give the folder's logits to
 * the bit; malformed pairs are refused by name.
 *
 * Tolerance: 1e-4 absolute on logits of magnitude ~1-5. The engine runs in
 * float32 (F32 weights and KV cache); the observed difference from float64
 * is ~3e-6. The reference variants with the text's height and width
 * sections swapped, with plain RoPE, with the decode rows' delta one off,
 * without the tower's windows, or with the tower's rotary halves swapped
 * land far outside it (each printed), so the comparison sees each.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "format/gguf.h"
#include "gguf_writer.h"
#include "pagedlm.h"
#include "st_writer.h"
#include "test_util.h"
#include "vision/image.h"
#include "vision/vision_model.h"
#include "vision_test.h"

#define TOL 1e-4

/* tower: 32 wide, 2 heads of 16, 3 layers (layer 1 full attention, 0 and 2
 * in windows of 2 x 2 merged cells = 16 px), patches of 4 px merged 2 x 2 */
enum { VH = 32, VNH = 2, VHD = VH / VNH, VFFN = 48, VL = 3, FULL_LAYER = 1, PATCH = 4, MERGE = 2, TEMP = 2, WIN = 2 };
enum { PP = 3 * TEMP * PATCH * PATCH, MHID = VH * MERGE * MERGE };
/* text */
enum { TH = 48, NH = 3, NKV = 1, HD = 16, FFN = 96, VOC = 520, NL = 2 };
/* stories260K's 512 tokens, then the image tokens the test's tokenizer adds */
enum { VSTART = 512, VEND = 513, IMAGE_TOKEN = 514 };
static const int SECTION[3] = {2, 3, 3}; /* frequency pairs per t, h, w: sum HD / 2 */
static const double TEPS = 1e-6, THETA = 1e6;

/* ---- random weights ------------------------------------------------------------ */

static void make_weights(void) {
    if (vt_count()) return;
    vt_seed(2525);
    char n[160];
    /* the Conv3d (VH, 3, TEMP, PATCH, PATCH): made 2-D here, written 5-D */
    vt_add("visual.patch_embed.proj.weight", 2, VH, PP, 0, 0, VT_UNIFORM, 0.5);
    for (int l = 0; l < VL; l++) {
#define B(fmt) (snprintf(n, sizeof n, "visual.blocks.%d." fmt, l), n)
        vt_add(B("norm1.weight"), 1, VH, 0, 0, 0, VT_NEAR_ONE, 0);
        vt_add(B("norm2.weight"), 1, VH, 0, 0, 0, VT_NEAR_ONE, 0);
        vt_add(B("attn.qkv.weight"), 2, 3 * VH, VH, 0, 0, VT_UNIFORM, 0.8);
        vt_add(B("attn.qkv.bias"), 1, 3 * VH, 0, 0, 0, VT_SMALL, 0);
        vt_add(B("attn.proj.weight"), 2, VH, VH, 0, 0, VT_UNIFORM, 0.6);
        vt_add(B("attn.proj.bias"), 1, VH, 0, 0, 0, VT_SMALL, 0);
        vt_add(B("mlp.gate_proj.weight"), 2, VFFN, VH, 0, 0, VT_UNIFORM, 0.6);
        vt_add(B("mlp.gate_proj.bias"), 1, VFFN, 0, 0, 0, VT_SMALL, 0);
        vt_add(B("mlp.up_proj.weight"), 2, VFFN, VH, 0, 0, VT_UNIFORM, 0.6);
        vt_add(B("mlp.up_proj.bias"), 1, VFFN, 0, 0, 0, VT_SMALL, 0);
        vt_add(B("mlp.down_proj.weight"), 2, VH, VFFN, 0, 0, VT_UNIFORM, 0.5);
        vt_add(B("mlp.down_proj.bias"), 1, VH, 0, 0, 0, VT_SMALL, 0);
#undef B
    }
    vt_add("visual.merger.ln_q.weight", 1, VH, 0, 0, 0, VT_NEAR_ONE, 0);
    vt_add("visual.merger.mlp.0.weight", 2, MHID, MHID, 0, 0, VT_UNIFORM, 0.3);
    vt_add("visual.merger.mlp.0.bias", 1, MHID, 0, 0, 0, VT_SMALL, 0);
    vt_add("visual.merger.mlp.2.weight", 2, TH, MHID, 0, 0, VT_UNIFORM, 0.3);
    vt_add("visual.merger.mlp.2.bias", 1, TH, 0, 0, 0, VT_SMALL, 0);
    vt_add("model.embed_tokens.weight", 2, VOC, TH, 0, 0, VT_UNIFORM, 1.0);
    vt_add("model.norm.weight", 1, TH, 0, 0, 0, VT_NEAR_ONE, 0);
    vt_add("lm_head.weight", 2, VOC, TH, 0, 0, VT_UNIFORM, 0.6);
    for (int l = 0; l < NL; l++) {
#define T(fmt) (snprintf(n, sizeof n, "model.layers.%d." fmt, l), n)
        vt_add(T("input_layernorm.weight"), 1, TH, 0, 0, 0, VT_NEAR_ONE, 0);
        vt_add(T("self_attn.q_proj.weight"), 2, NH * HD, TH, 0, 0, VT_UNIFORM, 0.6);
        vt_add(T("self_attn.q_proj.bias"), 1, NH * HD, 0, 0, 0, VT_SMALL, 0);
        vt_add(T("self_attn.k_proj.weight"), 2, NKV * HD, TH, 0, 0, VT_UNIFORM, 0.6);
        vt_add(T("self_attn.k_proj.bias"), 1, NKV * HD, 0, 0, 0, VT_SMALL, 0);
        vt_add(T("self_attn.v_proj.weight"), 2, NKV * HD, TH, 0, 0, VT_UNIFORM, 0.6);
        vt_add(T("self_attn.v_proj.bias"), 1, NKV * HD, 0, 0, 0, VT_SMALL, 0);
        vt_add(T("self_attn.o_proj.weight"), 2, TH, NH * HD, 0, 0, VT_UNIFORM, 0.5);
        vt_add(T("post_attention_layernorm.weight"), 1, TH, 0, 0, 0, VT_NEAR_ONE, 0);
        vt_add(T("mlp.gate_proj.weight"), 2, FFN, TH, 0, 0, VT_UNIFORM, 0.5);
        vt_add(T("mlp.up_proj.weight"), 2, FFN, TH, 0, 0, VT_UNIFORM, 0.5);
        vt_add(T("mlp.down_proj.weight"), 2, TH, FFN, 0, 0, VT_UNIFORM, 0.5);
#undef T
    }
}

/* ---- the folder ---------------------------------------------------------------- */

/* transformers 4.49's layout: the text model's fields at the top level,
 * rope_scaling as the published checkpoints write it */
static const char *CONFIG =
    "{\"architectures\": [\"Qwen2_5_VLForConditionalGeneration\"], \"model_type\": \"qwen2_5_vl\","
    " \"hidden_size\": 48, \"intermediate_size\": 96, \"num_hidden_layers\": 2, \"num_attention_heads\": 3,"
    " \"num_key_value_heads\": 1, \"vocab_size\": 520, \"max_position_embeddings\": 256,"
    " \"rms_norm_eps\": 1e-06, \"rope_theta\": 1000000.0, \"hidden_act\": \"silu\","
    " \"tie_word_embeddings\": false, \"use_sliding_window\": false, \"sliding_window\": 32768,"
    " \"bos_token_id\": 1, \"eos_token_id\": 2,"
    " \"rope_scaling\": {\"type\": \"mrope\", \"mrope_section\": [2, 3, 3]},"
    " \"torch_dtype\": \"float32\"}";

/* the same with the vision half (transformers 4.5x's layout: text_config
 * too) and Qwen2VLImageProcessor's settings, small: patches of 4 px, the
 * pixel budget [256, 2560] */
static const char *CONFIG_VL =
    "{\"architectures\": [\"Qwen2_5_VLForConditionalGeneration\"], \"model_type\": \"qwen2_5_vl\","
    " \"image_token_id\": 514, \"video_token_id\": 515, \"vision_start_token_id\": 512,"
    " \"vision_end_token_id\": 513, \"bos_token_id\": 1, \"eos_token_id\": 2,"
    " \"text_config\": {\"model_type\": \"qwen2_5_vl_text\", \"hidden_size\": 48, \"intermediate_size\": 96,"
    "   \"num_hidden_layers\": 2, \"num_attention_heads\": 3, \"num_key_value_heads\": 1, \"vocab_size\": 520,"
    "   \"max_position_embeddings\": 256, \"rms_norm_eps\": 1e-06, \"rope_theta\": 1000000.0,"
    "   \"hidden_act\": \"silu\", \"tie_word_embeddings\": false, \"use_sliding_window\": false,"
    "   \"rope_scaling\": {\"rope_type\": \"default\", \"type\": \"default\", \"mrope_section\": [2, 3, 3]}},"
    " \"vision_config\": {\"model_type\": \"qwen2_5_vl\", \"depth\": 3, \"hidden_size\": 32,"
    "   \"intermediate_size\": 48, \"num_heads\": 2, \"in_chans\": 3, \"patch_size\": 4,"
    "   \"spatial_merge_size\": 2, \"temporal_patch_size\": 2, \"window_size\": 16,"
    "   \"fullatt_block_indexes\": [1], \"out_hidden_size\": 48, \"hidden_act\": \"silu\","
    "   \"tokens_per_second\": 2},"
    " \"torch_dtype\": \"float32\"}";

static const char *PREPROCESSOR =
    "{\"image_processor_type\": \"Qwen2VLImageProcessor\", \"min_pixels\": 256, \"max_pixels\": 2560,"
    " \"patch_size\": 4, \"temporal_patch_size\": 2, \"merge_size\": 2, \"do_resize\": true,"
    " \"resample\": 3, \"do_rescale\": true, \"rescale_factor\": 0.00392156862745098, \"do_normalize\": true,"
    " \"image_mean\": [0.48145466, 0.4578275, 0.40821073], \"image_std\": [0.26862954, 0.26130258, 0.27577711],"
    " \"processor_class\": \"Qwen2_5_VLProcessor\"}";

static char *hf_dir;

static void write_folder(const char *dir, const char *config) {
    char *p = test_join(dir, "config.json");
    test_write_file(p, config, strlen(config));
    free(p);
    stw_writer *w = stw_new();
    for (int i = 0; i < vt_count(); i++) {
        const vt_tensor *t = vt_at(i);
        if (strcmp(t->name, "visual.patch_embed.proj.weight") == 0) { /* as PyTorch stores a Conv3d */
            int64_t conv[5] = {VH, 3, TEMP, PATCH, PATCH};
            stw_add_f32(w, t->name, 5, conv, t->data);
            continue;
        }
        stw_add_f32(w, t->name, t->n_dims, t->shape, t->data);
    }
    p = test_join(dir, "model.safetensors");
    REQUIRE(stw_write(w, p) == 0);
    free(p);
    stw_free(w);
}

static void need_files(void) {
    if (hf_dir) return;
    make_weights();
    hf_dir = test_make_dir("qwen25vl");
    write_folder(hf_dir, CONFIG);
}

/* ---- the float64 reference ------------------------------------------------------------ */

typedef enum ref_bug {
    BUG_NONE,
    BUG_SWAP_HW,     /* the height and width sections' components swapped */
    BUG_PLAIN_ROPE,  /* every row turned by its index (no M-RoPE) */
} ref_bug;

/* apply_multimodal_rotary_pos_emb on one head: cos/sin of each component
 * as cat(freqs, freqs) over head_dim, the head_dim cut into chunks
 * mrope_section * 2 = [s0, s1, s2, s0, s1, s2], chunk j from component
 * j % 3; then x * cos + rotate_half(x) * sin. */
static void mrope(double *x, const int32_t pos3[3], ref_bug bug) {
    double cosv[HD], sinv[HD], out[HD];
    int chunk[6] = {SECTION[0], SECTION[1], SECTION[2], SECTION[0], SECTION[1], SECTION[2]};
    int d = 0;
    for (int j = 0; j < 6; j++) {
        int comp = j % 3;
        if (bug == BUG_SWAP_HW && comp) comp = 3 - comp;
        for (int k = 0; k < chunk[j]; k++, d++) {
            int i = d % (HD / 2); /* cat(freqs, freqs): index d holds frequency d mod HD/2 */
            double ang = pos3[comp] * pow(THETA, -2.0 * i / HD);
            cosv[d] = cos(ang), sinv[d] = sin(ang);
        }
    }
    for (int e = 0; e < HD; e++) {
        double rot = e < HD / 2 ? -x[e + HD / 2] : x[e - HD / 2];
        out[e] = x[e] * cosv[e] + rot * sinv[e];
    }
    memcpy(x, out, sizeof out);
}

/* The Qwen2 decoder over n rows (row i: token ids[i], or the vector embd[i]
 * when given), causal, rows turned by pos3[i]; logits of every row. With
 * BUG_PLAIN_ROPE every row turns by its index instead. */
static void ref_text_logits(ref_bug bug, const int32_t *ids, const double *const *embd, const int32_t *pos3, int n,
                            double *logits) {
    double *x = calloc((size_t)n * TH, sizeof *x), *xn = malloc(sizeof(double) * TH);
    double *q = malloc(sizeof(double) * (size_t)n * NH * HD), *k = malloc(sizeof(double) * (size_t)n * NKV * HD);
    double *v = malloc(sizeof(double) * (size_t)n * NKV * HD), *att = malloc(sizeof(double) * NH * HD);
    double *g = malloc(sizeof(double) * FFN), *u = malloc(sizeof(double) * FFN), *o = malloc(sizeof(double) * TH);
    double *sc = malloc(sizeof(double) * (size_t)n);
    const float *emb = vt_w("model.embed_tokens.weight");
    for (int i = 0; i < n; i++)
        for (int c = 0; c < TH; c++) x[(size_t)i * TH + c] = embd && embd[i] ? embd[i][c] : emb[(size_t)ids[i] * TH + c];
    char nm[160];
    for (int l = 0; l < NL; l++) {
#define L(s) (snprintf(nm, sizeof nm, "model.layers.%d.%s", l, s), vt_w(nm))
        for (int i = 0; i < n; i++) {
            vt_rmsnorm(xn, x + (size_t)i * TH, L("input_layernorm.weight"), TH, TEPS);
            vt_linear(q + (size_t)i * NH * HD, L("self_attn.q_proj.weight"), L("self_attn.q_proj.bias"), xn,
                      NH * HD, TH);
            vt_linear(k + (size_t)i * NKV * HD, L("self_attn.k_proj.weight"), L("self_attn.k_proj.bias"), xn,
                      NKV * HD, TH);
            vt_linear(v + (size_t)i * NKV * HD, L("self_attn.v_proj.weight"), L("self_attn.v_proj.bias"), xn,
                      NKV * HD, TH);
            int32_t idx3[3] = {i, i, i};
            const int32_t *p = bug == BUG_PLAIN_ROPE ? idx3 : pos3 + 3 * i;
            ref_bug b = bug == BUG_PLAIN_ROPE ? BUG_NONE : bug;
            for (int h = 0; h < NH; h++) mrope(q + ((size_t)i * NH + h) * HD, p, b);
            for (int h = 0; h < NKV; h++) mrope(k + ((size_t)i * NKV + h) * HD, p, b);
        }
        for (int i = 0; i < n; i++) {
            for (int h = 0; h < NH; h++) {
                const double *qh = q + ((size_t)i * NH + h) * HD;
                int kvh = h / (NH / NKV);
                double mx = -1e300, sum = 0;
                for (int j = 0; j <= i; j++) {
                    double s = 0;
                    for (int e = 0; e < HD; e++) s += qh[e] * k[((size_t)j * NKV + kvh) * HD + e];
                    sc[j] = s / sqrt((double)HD);
                    if (sc[j] > mx) mx = sc[j];
                }
                for (int j = 0; j <= i; j++) sum += sc[j] = exp(sc[j] - mx);
                for (int e = 0; e < HD; e++) {
                    double a = 0;
                    for (int j = 0; j <= i; j++) a += sc[j] * v[((size_t)j * NKV + kvh) * HD + e];
                    att[h * HD + e] = a / sum;
                }
            }
            vt_linear(o, L("self_attn.o_proj.weight"), NULL, att, TH, NH * HD);
            for (int c = 0; c < TH; c++) x[(size_t)i * TH + c] += o[c];
        }
        for (int i = 0; i < n; i++) {
            double *xi = x + (size_t)i * TH;
            vt_rmsnorm(xn, xi, L("post_attention_layernorm.weight"), TH, TEPS);
            vt_linear(g, L("mlp.gate_proj.weight"), NULL, xn, FFN, TH);
            vt_linear(u, L("mlp.up_proj.weight"), NULL, xn, FFN, TH);
            for (int f = 0; f < FFN; f++) g[f] = vt_silu(g[f]) * u[f];
            vt_linear(o, L("mlp.down_proj.weight"), NULL, g, TH, FFN);
            for (int c = 0; c < TH; c++) xi[c] += o[c];
        }
#undef L
    }
    for (int i = 0; i < n; i++) {
        vt_rmsnorm(xn, x + (size_t)i * TH, vt_w("model.norm.weight"), TH, TEPS);
        vt_linear(logits + (size_t)i * VOC, vt_w("lm_head.weight"), NULL, xn, VOC, TH);
    }
    free(x), free(xn), free(q), free(k), free(v), free(att), free(g), free(u), free(o), free(sc);
}

/* ---- stage 1: M-RoPE through the batch ---------------------------------------------- */

/* Made-up positions as an image prompt lays them out: 3 text rows, a
 * 2 x 3 grid of image rows at start 3 ((3, 3 + row, 3 + col)), then text
 * from max + 1 = 6; then 3 decode rows at index + delta (delta = 6 - 9). */
enum { N_PRE = 12, N_DEC = 3, N_ALL = N_PRE + N_DEC };
static void made_up_positions(int32_t *pos3, int32_t *delta) {
    int i = 0;
    for (; i < 3; i++) pos3[3 * i] = pos3[3 * i + 1] = pos3[3 * i + 2] = i;
    for (int r = 0; r < 2; r++)
        for (int c = 0; c < 3; c++, i++) pos3[3 * i] = 3, pos3[3 * i + 1] = 3 + r, pos3[3 * i + 2] = 3 + c;
    int next = 3 + 2 + 1; /* the image's largest component (3 + col 2) + 1 */
    for (int t = 0; i < N_PRE; i++, t++) pos3[3 * i] = pos3[3 * i + 1] = pos3[3 * i + 2] = next + t;
    *delta = next - 9; /* row 9 (the first text row after the image) is at position 6 */
    for (; i < N_ALL; i++) pos3[3 * i] = pos3[3 * i + 1] = pos3[3 * i + 2] = i + *delta;
}

static void stage1_ids(int32_t *ids) {
    for (int i = 0; i < N_ALL; i++) ids[i] = (int32_t)((i * 37 + 11) % 150);
}

/* The engine's logits of all N_ALL rows: the prompt in one call with its
 * positions, then each decode row alone at index + delta. */
static float *stage1_engine_logits(int32_t delta_error) {
    pdl_error err = {0};
    pdl_model *m = NULL;
    pdl_model_options mo = {.n_threads = 2};
    REQUIRE_MSG(pdl_model_load(&m, hf_dir, &mo, &err) == 0, "%s", err.message);
    pdl_context *ctx = test_context(m);
    pdl_kv_cache *kv = NULL;
    REQUIRE(pdl_kv_cache_create(&kv, m, PDL_KV_F32, 16, 4, &err) == 0);
    int32_t ids[N_ALL], pos3[3 * N_ALL], delta;
    stage1_ids(ids);
    made_up_positions(pos3, &delta);
    float *logits = malloc((size_t)N_ALL * VOC * sizeof *logits);
    pdl_seq seq = {0};
    pdl_row_inputs in = {.rope_pos3 = pos3};
    int rc = pdl_seq_forward(ctx, kv, &seq, ids, &in, N_PRE, PDL_LOGITS_ALL, logits, &err);
    CHECK_MSG(rc == 0, "%s", err.message);
    for (int i = N_PRE; rc == 0 && i < N_ALL; i++) {
        int32_t p3[3] = {i + delta + delta_error, i + delta + delta_error, i + delta + delta_error};
        pdl_row_inputs d = {.rope_pos3 = p3};
        rc = pdl_seq_forward(ctx, kv, &seq, ids + i, &d, 1, PDL_LOGITS_ALL, logits + (size_t)i * VOC, &err);
        CHECK_MSG(rc == 0, "%s", err.message);
    }
    pdl_seq_release(kv, &seq);
    pdl_kv_cache_free(kv);
    pdl_context_free(ctx);
    pdl_model_free(m);
    if (rc) free(logits), logits = NULL;
    return logits;
}

static void test_mrope_rows_match_the_float64_reference(void) {
    need_files();
    int32_t ids[N_ALL], pos3[3 * N_ALL], delta;
    stage1_ids(ids);
    made_up_positions(pos3, &delta);
    double *want = malloc(sizeof(double) * N_ALL * VOC), *bad = malloc(sizeof(double) * N_ALL * VOC);
    ref_text_logits(BUG_NONE, ids, NULL, pos3, N_ALL, want);
    float *got = stage1_engine_logits(0);
    REQUIRE(got);
    double d = vt_max_diff(got, want, (size_t)N_ALL * VOC);
    fprintf(stderr, "  M-RoPE text model: max |engine - float64 reference| = %.3g over %d rows\n", d, N_ALL);
    CHECK_MSG(d < TOL, "%.3g", d);
    /* the reference can tell: h/w swapped, plain RoPE, the delta one off */
    ref_text_logits(BUG_SWAP_HW, ids, NULL, pos3, N_ALL, bad);
    double d_swap = vt_max_diff(got, bad, (size_t)N_ALL * VOC);
    ref_text_logits(BUG_PLAIN_ROPE, ids, NULL, pos3, N_ALL, bad);
    double d_plain = vt_max_diff(got, bad, (size_t)N_ALL * VOC);
    fprintf(stderr, "  variants: h/w swapped %.3g, plain RoPE %.3g\n", d_swap, d_plain);
    CHECK_MSG(d_swap > 100 * TOL, "%.3g", d_swap);
    CHECK_MSG(d_plain > 100 * TOL, "%.3g", d_plain);
    free(got);
    got = stage1_engine_logits(1);
    REQUIRE(got);
    /* the prompt rows agree, the decode rows do not */
    CHECK(vt_max_diff(got, want, (size_t)N_PRE * VOC) < TOL);
    double d_delta = vt_max_diff(got + (size_t)N_PRE * VOC, want + (size_t)N_PRE * VOC, (size_t)N_DEC * VOC);
    fprintf(stderr, "  decode rows with the delta one off: %.3g\n", d_delta);
    CHECK_MSG(d_delta > 100 * TOL, "%.3g", d_delta);
    free(got), free(want), free(bad);
}

/* Equal components are plain RoPE, to the bit; a model without M-RoPE
 * refuses 3-component positions. */
static void test_equal_components_are_plain_rope(void) {
    need_files();
    pdl_error err = {0};
    pdl_model *m = NULL;
    pdl_model_options mo = {.n_threads = 2};
    REQUIRE_MSG(pdl_model_load(&m, hf_dir, &mo, &err) == 0, "%s", err.message);
    pdl_context *ctx = test_context(m);
    pdl_kv_cache *kv = NULL;
    REQUIRE(pdl_kv_cache_create(&kv, m, PDL_KV_F32, 16, 4, &err) == 0);
    int32_t ids[N_ALL], pos3[3 * N_PRE];
    stage1_ids(ids);
    for (int i = 0; i < N_PRE; i++) pos3[3 * i] = pos3[3 * i + 1] = pos3[3 * i + 2] = i;
    float *a = malloc(sizeof(float) * N_PRE * VOC), *b = malloc(sizeof(float) * N_PRE * VOC);
    pdl_seq s1 = {0}, s2 = {0};
    pdl_row_inputs in = {.rope_pos3 = pos3};
    CHECK(pdl_seq_forward(ctx, kv, &s1, ids, NULL, N_PRE, PDL_LOGITS_ALL, a, &err) == 0);
    CHECK(pdl_seq_forward(ctx, kv, &s2, ids, &in, N_PRE, PDL_LOGITS_ALL, b, &err) == 0);
    CHECK(memcmp(a, b, sizeof(float) * N_PRE * VOC) == 0);
    /* shifted by one in one component: different */
    pdl_seq_release(kv, &s2);
    pos3[3 * 5 + 2] += 1;
    CHECK(pdl_seq_forward(ctx, kv, &s2, ids, &in, N_PRE, PDL_LOGITS_ALL, b, &err) == 0);
    CHECK(memcmp(a + 5 * VOC, b + 5 * VOC, sizeof(float) * VOC) != 0);
    CHECK(memcmp(a, b, sizeof(float) * 5 * VOC) == 0);
    pdl_seq_release(kv, &s1), pdl_seq_release(kv, &s2);
    /* negative components are refused */
    pos3[3 * 2 + 1] = -1;
    CHECK(pdl_seq_forward(ctx, kv, &s2, ids, &in, N_PRE, PDL_LOGITS_ALL, b, &err) != 0);
    CHECK_CONTAINS(err.message, "row 2: M-RoPE position -1 of component 1 is negative");
    pdl_seq_release(kv, &s2);
    pdl_kv_cache_free(kv);
    pdl_context_free(ctx);
    pdl_model_free(m);

    /* a plain Qwen2 folder (no mrope_section) refuses them */
    char *dir = test_make_dir("qwen2-plain");
    char cfg[2048];
    snprintf(cfg, sizeof cfg, "%s", CONFIG);
    char *at = strstr(cfg, "\"rope_scaling\"");
    REQUIRE(at);
    memcpy(at, "\"rope_scalinX\"", 14); /* an unknown key: no rope scaling */
    write_folder(dir, cfg);
    REQUIRE_MSG(pdl_model_load(&m, dir, &mo, &err) == 0, "%s", err.message);
    ctx = test_context(m);
    REQUIRE(pdl_kv_cache_create(&kv, m, PDL_KV_F32, 16, 4, &err) == 0);
    for (int i = 0; i < N_PRE; i++) pos3[3 * i] = pos3[3 * i + 1] = pos3[3 * i + 2] = i;
    CHECK(pdl_seq_forward(ctx, kv, &s1, ids, &in, N_PRE, PDL_LOGITS_ALL, b, &err) != 0);
    CHECK_CONTAINS(err.message, "no M-RoPE sections");
    pdl_seq_release(kv, &s1);
    pdl_kv_cache_free(kv);
    pdl_context_free(ctx);
    pdl_model_free(m);
    free(dir), free(a), free(b);
}

/* Sections that do not sum to rope_dim / 2 are refused at load, naming them. */
static void test_bad_sections_are_refused(void) {
    need_files();
    char *dir = test_make_dir("qwen25vl-bad-sections");
    char cfg[2048];
    snprintf(cfg, sizeof cfg, "%s", CONFIG);
    char *at = strstr(cfg, "[2, 3, 3]");
    REQUIRE(at);
    memcpy(at, "[2, 3, 4]", 9);
    write_folder(dir, cfg);
    pdl_error err = {0};
    pdl_model *m = NULL;
    pdl_model_options mo = {.n_threads = 1};
    CHECK(pdl_model_load(&m, dir, &mo, &err) != 0);
    CHECK_CONTAINS(err.message, "M-RoPE sections [2, 3, 4]");
    free(dir);
}

/* ---- stages 3 and 4: the image ------------------------------------------------------ */

/* rgb_png (131 x 90) through the processor: smart_resize to 56 x 40, a
 * grid of 14 x 10 patches, 7 x 5 merged cells (windows of 2 x 2 cells cut
 * by the right and bottom edges) */
enum { GW = 14, GH = 10, NPATCH = GW * GH, MW = GW / MERGE, MH = GH / MERGE, CELLS = MW * MH };
enum { IMG_AT = 5, N_BEFORE = 4, N_AFTER = 5, N_PROMPT = N_BEFORE + 1 + CELLS + 1 + N_AFTER };
static const int32_t BEFORE[N_BEFORE] = {2, 17, 40, 9}, AFTER[N_AFTER] = {9, 33, 21, 51, 7};

static char *vl_dir, *ref_dir;
static float ref_patches[NPATCH * PP];

static void need_vl_files(void) {
    if (vl_dir) return;
    need_files();
    ref_dir = vt_reference_dir();
    /* rgb_png through Qwen2VLImageProcessor's steps (patch 4, merge 2, budget [256, 2560]) */
    vt_read_f32(ref_dir, "rgb_png.qwen8.f32", ref_patches, sizeof ref_patches);
    vl_dir = test_make_dir("qwen25vl-vlm");
    write_folder(vl_dir, CONFIG_VL);
    char *p = test_join(vl_dir, "preprocessor_config.json");
    test_write_file(p, PREPROCESSOR, strlen(PREPROCESSOR));
    free(p);
    /* stories260K's tokenizer with Qwen2.5-VL's image tokens added after it */
    const char *names[3] = {"<|vision_start|>", "<|vision_end|>", "<|image_pad|>"};
    vt_write_tokenizer(vl_dir, VSTART, names, 3);
}


/* ---- llama.cpp's pair: the text GGUF (qwen2vl) and the qwen2.5vl_merger mmproj ---------------- */

/* What a malformed pair lacks or gets wrong (each refused by name). */
typedef enum gguf_fault {
    GF_NONE,
    GF_NO_SECOND_FRAME,  /* v.patch_embd.weight.1 missing */
    GF_NO_WA_PATTERN,    /* clip.vision.n_wa_pattern missing */
    GF_WA_PATTERN_ZERO,  /* clip.vision.n_wa_pattern = 0 */
    GF_BAD_WINDOW,       /* clip.vision.window_size 12 px: not a multiple of 4 * 2 */
    GF_NO_SECTIONS,      /* qwen2vl.rope.dimension_sections missing */
    GF_FOURTH_SECTION,   /* sections [2, 3, 3, 1] */
} gguf_fault;

/* rows [r0, r0 + rows) of a matrix or vector, as llama.cpp's converter
 * splits the fused qkv */
static void put_rows(gguf_writer *g, const char *gg, const char *hf, int64_t r0, int64_t rows) {
    const vt_tensor *t = vt_find(hf);
    REQUIRE_MSG(t, "no weight %s", hf);
    int64_t cols = t->n_dims == 2 ? t->shape[1] : 1, shape[2] = {rows, cols};
    gguf_writer_add_tensor_f32(g, gg, t->n_dims, shape, t->data + r0 * cols);
}

/* stories260K's vocabulary (llama.cpp's llama tokenizer keys) with the
 * three image tokens after it, as control tokens */
static void put_tokenizer(gguf_writer *t) {
    char *src = test_data_path("models/stories260K/stories260K.gguf");
    gguf_file *g = NULL;
    pdl_error err = {0};
    REQUIRE_MSG(gguf_open(&g, src, &err) == 0, "%s", err.message);
    gguf_array toks, scores, types;
    REQUIRE(gguf_get_arr(g, "tokenizer.ggml.tokens", &toks, &err) > 0 && toks.count == VSTART);
    REQUIRE(gguf_get_arr(g, "tokenizer.ggml.scores", &scores, &err) > 0 && scores.count == VSTART);
    REQUIRE(gguf_get_arr(g, "tokenizer.ggml.token_type", &types, &err) > 0 && types.count == VSTART);
    enum { NT = VSTART + 3 };
    char *names[NT];
    float sc[NT];
    int32_t ty[NT];
    for (int i = 0; i < VSTART; i++) {
        names[i] = malloc(toks.strings[i].len + 1);
        memcpy(names[i], toks.strings[i].ptr, toks.strings[i].len), names[i][toks.strings[i].len] = 0;
        sc[i] = (float)gguf_arr_f64(&scores, (uint64_t)i), ty[i] = (int32_t)gguf_arr_i64(&types, (uint64_t)i);
    }
    const char *extra[3] = {"<|vision_start|>", "<|vision_end|>", "<|image_pad|>"};
    for (int i = 0; i < 3; i++) names[VSTART + i] = strdup(extra[i]), sc[VSTART + i] = 0, ty[VSTART + i] = 3;
    gguf_writer_add_str(t, "tokenizer.ggml.model", "llama");
    gguf_writer_add_str_arr(t, "tokenizer.ggml.tokens", (const char *const *)names, NT);
    gguf_writer_add_arr(t, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, sc, NT);
    gguf_writer_add_arr(t, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, ty, NT);
    gguf_writer_add_u32(t, "tokenizer.ggml.bos_token_id", 1);
    gguf_writer_add_u32(t, "tokenizer.ggml.eos_token_id", 2);
    for (int i = 0; i < NT; i++) free(names[i]);
    gguf_close(g);
    free(src);
}

/* The test's model as the pair llama.cpp's convert_hf_to_gguf.py writes
 * (--mmproj for the vision half): names, shapes and keys as it gives them;
 * the Conv3d as two Conv2d kernels (frame 0, frame 1), the qkv split in
 * q, k, v, the merger's ln_q as v.post_ln. The window size and pixel budget,
 * which that converter does not write (llama.cpp assumes 112 px and its own
 * budget), are given as keys llama.cpp's clip loader knows, since this
 * test's model differs from the published sizes. */
static void write_ggufs(gguf_fault fault, const char *text_path, const char *mmproj_path) {
    need_vl_files();
    gguf_writer *t = gguf_writer_new(3);
    gguf_writer_add_str(t, "general.architecture", "qwen2vl");
    gguf_writer_add_u32(t, "qwen2vl.context_length", 256);
    gguf_writer_add_u32(t, "qwen2vl.embedding_length", TH);
    gguf_writer_add_u32(t, "qwen2vl.feed_forward_length", FFN);
    gguf_writer_add_u32(t, "qwen2vl.block_count", NL);
    gguf_writer_add_u32(t, "qwen2vl.attention.head_count", NH);
    gguf_writer_add_u32(t, "qwen2vl.attention.head_count_kv", NKV);
    gguf_writer_add_f32(t, "qwen2vl.rope.freq_base", (float)THETA);
    gguf_writer_add_f32(t, "qwen2vl.attention.layer_norm_rms_epsilon", (float)TEPS);
    int32_t sections[4] = {SECTION[0], SECTION[1], SECTION[2], fault == GF_FOURTH_SECTION ? 1 : 0};
    if (fault != GF_NO_SECTIONS) gguf_writer_add_arr(t, "qwen2vl.rope.dimension_sections", GGUF_TYPE_INT32, sections, 4);
    put_tokenizer(t);
    vt_put_gguf(t, "token_embd.weight", "model.embed_tokens.weight");
    vt_put_gguf(t, "output_norm.weight", "model.norm.weight");
    vt_put_gguf(t, "output.weight", "lm_head.weight");
    char hf[160], gg[64];
    static const char *const names[][2] = {
        {"input_layernorm.weight", "attn_norm.weight"},  {"self_attn.q_proj.weight", "attn_q.weight"},
        {"self_attn.q_proj.bias", "attn_q.bias"},        {"self_attn.k_proj.weight", "attn_k.weight"},
        {"self_attn.k_proj.bias", "attn_k.bias"},        {"self_attn.v_proj.weight", "attn_v.weight"},
        {"self_attn.v_proj.bias", "attn_v.bias"},        {"self_attn.o_proj.weight", "attn_output.weight"},
        {"post_attention_layernorm.weight", "ffn_norm.weight"}, {"mlp.gate_proj.weight", "ffn_gate.weight"},
        {"mlp.up_proj.weight", "ffn_up.weight"},         {"mlp.down_proj.weight", "ffn_down.weight"}};
    for (int l = 0; l < NL; l++)
        for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
            snprintf(hf, sizeof hf, "model.layers.%d.%s", l, names[i][0]);
            snprintf(gg, sizeof gg, "blk.%d.%s", l, names[i][1]);
            vt_put_gguf(t, gg, hf);
        }

    gguf_writer *v = gguf_writer_new(3);
    static const float mean[3] = {0.48145466f, 0.4578275f, 0.40821073f}, stdv[3] = {0.26862954f, 0.26130258f, 0.27577711f};
    gguf_writer_add_str(v, "general.architecture", "clip");
    gguf_writer_add_bool(v, "clip.has_vision_encoder", true);
    gguf_writer_add_str(v, "clip.projector_type", "qwen2.5vl_merger");
    gguf_writer_add_u32(v, "clip.vision.projection_dim", TH);
    gguf_writer_add_u32(v, "clip.vision.image_size", 560);
    gguf_writer_add_u32(v, "clip.vision.patch_size", PATCH);
    gguf_writer_add_u32(v, "clip.vision.embedding_length", VH);
    gguf_writer_add_u32(v, "clip.vision.feed_forward_length", VFFN);
    gguf_writer_add_u32(v, "clip.vision.block_count", VL);
    gguf_writer_add_u32(v, "clip.vision.attention.head_count", VNH);
    gguf_writer_add_arr(v, "clip.vision.image_mean", GGUF_TYPE_FLOAT32, mean, 3);
    gguf_writer_add_arr(v, "clip.vision.image_std", GGUF_TYPE_FLOAT32, stdv, 3);
    gguf_writer_add_bool(v, "clip.use_silu", true);
    /* fullatt_block_indexes [1]: n_wa_pattern = 1 + 1 */
    if (fault != GF_NO_WA_PATTERN) gguf_writer_add_u32(v, "clip.vision.n_wa_pattern", fault == GF_WA_PATTERN_ZERO ? 0 : FULL_LAYER + 1);
    gguf_writer_add_f32(v, "clip.vision.attention.layer_norm_epsilon", 1e-6f);
    gguf_writer_add_u32(v, "clip.vision.window_size", fault == GF_BAD_WINDOW ? 12 : WIN * PATCH * MERGE);
    gguf_writer_add_u32(v, "clip.vision.spatial_merge_size", MERGE);
    gguf_writer_add_u32(v, "clip.vision.image_min_pixels", 256);
    gguf_writer_add_u32(v, "clip.vision.image_max_pixels", 2560);
    /* the Conv3d (VH, 3, TEMP, PATCH, PATCH) as two (VH, 3, PATCH, PATCH) kernels */
    const float *conv = vt_w("visual.patch_embed.proj.weight");
    float *kern = malloc(sizeof(float) * VH * 3 * PATCH * PATCH);
    for (int f = 0; f < TEMP; f++) {
        if (f == 1 && fault == GF_NO_SECOND_FRAME) break;
        for (int o = 0; o < VH * 3; o++)
            memcpy(kern + (size_t)o * PATCH * PATCH, conv + ((size_t)o * TEMP + f) * PATCH * PATCH,
                   sizeof(float) * PATCH * PATCH);
        int64_t shape[4] = {VH, 3, PATCH, PATCH};
        gguf_writer_add_tensor_f32(v, f ? "v.patch_embd.weight.1" : "v.patch_embd.weight", 4, shape, kern);
    }
    free(kern);
    static const char *const blk[][2] = {
        {"norm1.weight", "ln1.weight"}, {"norm2.weight", "ln2.weight"},
        {"attn.proj.weight", "attn_out.weight"}, {"attn.proj.bias", "attn_out.bias"},
        {"mlp.gate_proj.weight", "ffn_gate.weight"}, {"mlp.gate_proj.bias", "ffn_gate.bias"},
        {"mlp.up_proj.weight", "ffn_up.weight"}, {"mlp.up_proj.bias", "ffn_up.bias"},
        {"mlp.down_proj.weight", "ffn_down.weight"}, {"mlp.down_proj.bias", "ffn_down.bias"}};
    for (int l = 0; l < VL; l++) {
        for (size_t i = 0; i < sizeof blk / sizeof blk[0]; i++) {
            snprintf(hf, sizeof hf, "visual.blocks.%d.%s", l, blk[i][0]);
            snprintf(gg, sizeof gg, "v.blk.%d.%s", l, blk[i][1]);
            vt_put_gguf(v, gg, hf);
        }
        const char *part[3] = {"q", "k", "v"};
        for (int k = 0; k < 3; k++)
            for (int b = 0; b < 2; b++) {
                snprintf(hf, sizeof hf, "visual.blocks.%d.attn.qkv.%s", l, b ? "bias" : "weight");
                snprintf(gg, sizeof gg, "v.blk.%d.attn_%s.%s", l, part[k], b ? "bias" : "weight");
                put_rows(v, gg, hf, (int64_t)k * VH, VH);
            }
    }
    vt_put_gguf(v, "v.post_ln.weight", "visual.merger.ln_q.weight");
    vt_put_gguf(v, "mm.0.weight", "visual.merger.mlp.0.weight");
    vt_put_gguf(v, "mm.0.bias", "visual.merger.mlp.0.bias");
    vt_put_gguf(v, "mm.2.weight", "visual.merger.mlp.2.weight");
    vt_put_gguf(v, "mm.2.bias", "visual.merger.mlp.2.bias");
    REQUIRE(gguf_writer_write(t, text_path) == 0);
    REQUIRE(gguf_writer_write(v, mmproj_path) == 0);
    gguf_writer_free(t), gguf_writer_free(v);
}

static char *text_gguf, *mmproj_gguf;

static void need_ggufs(void) {
    if (text_gguf) return;
    text_gguf = test_tmp_path("qwen25vl-text.gguf");
    mmproj_gguf = test_tmp_path("qwen25vl-mmproj.gguf");
    write_ggufs(GF_NONE, text_gguf, mmproj_gguf);
}

typedef enum vbug {
    VBUG_NONE,
    VBUG_NO_WINDOWS,   /* every layer over the whole image (windows skipped) */
    VBUG_ROPE_HW_SWAP, /* the tower's rotary halves by (col, row) instead of (row, col) */
} vbug;

/* Qwen2_5_VisionTransformerPretrainedModel over the processor's patches, in
 * float64, in the processor's row order: window attention as a mask (two
 * rows see each other when their merged cells lie in the same
 * WIN x WIN window of the merged grid), full attention in FULL_LAYER;
 * then the merger. rows: (CELLS, TH), row-major over the merged grid. */
static void ref_image_rows(vbug bug, double *rows) {
    double *x = calloc((size_t)NPATCH * VH, sizeof *x), *xn = malloc(sizeof(double) * NPATCH * VH);
    double *q = malloc(sizeof(double) * NPATCH * VH), *k = malloc(sizeof(double) * NPATCH * VH);
    double *v = malloc(sizeof(double) * NPATCH * VH), *att = malloc(sizeof(double) * VH);
    double *g = malloc(sizeof(double) * VFFN), *u = malloc(sizeof(double) * VFFN), *o = malloc(sizeof(double) * VH);
    double *sc = malloc(sizeof(double) * NPATCH), *pat = malloc(sizeof(double) * PP);
    int hpos[NPATCH], wpos[NPATCH], win[NPATCH];
    for (int r = 0; r < NPATCH; r++) {
        /* rot_pos_emb: the row and column of patch r in the processor's order */
        int cell = r / (MERGE * MERGE), j = r % (MERGE * MERGE), cy = cell / MW, cx = cell % MW;
        hpos[r] = cy * MERGE + j / MERGE, wpos[r] = cx * MERGE + j % MERGE;
        win[r] = (cy / WIN) * ((MW + WIN - 1) / WIN) + cx / WIN;
        for (int i = 0; i < PP; i++) pat[i] = ref_patches[(size_t)r * PP + i];
        vt_linear(x + (size_t)r * VH, vt_w("visual.patch_embed.proj.weight"), NULL, pat, VH, PP);
    }
    char nm[160];
    for (int l = 0; l < VL; l++) {
#define L(s_) (snprintf(nm, sizeof nm, "visual.blocks.%d.%s", l, s_), vt_w(nm))
        const float *wqkv = L("attn.qkv.weight"), *bqkv = L("attn.qkv.bias");
        for (int r = 0; r < NPATCH; r++) {
            vt_rmsnorm(xn, x + (size_t)r * VH, L("norm1.weight"), VH, 1e-6);
            vt_linear(q + (size_t)r * VH, wqkv, bqkv, xn, VH, VH);
            vt_linear(k + (size_t)r * VH, wqkv + VH * VH, bqkv + VH, xn, VH, VH);
            vt_linear(v + (size_t)r * VH, wqkv + 2 * VH * VH, bqkv + 2 * VH, xn, VH, VH);
            /* emb = cat(freqs(hpos), freqs(wpos)), freqs over dim = VHD / 2:
             * inv_freq_j = 10000^(-2j / dim); cos/sin of cat(emb, emb) */
            double ang[VHD / 2];
            int a = bug == VBUG_ROPE_HW_SWAP ? wpos[r] : hpos[r], b = bug == VBUG_ROPE_HW_SWAP ? hpos[r] : wpos[r];
            for (int j = 0; j < VHD / 4; j++) {
                double inv = pow(10000.0, -2.0 * j / (VHD / 2));
                ang[j] = a * inv, ang[VHD / 4 + j] = b * inv;
            }
            for (int hh = 0; hh < VNH; hh++) {
                double *vecs[2] = {q + (size_t)r * VH + hh * VHD, k + (size_t)r * VH + hh * VHD};
                for (int z = 0; z < 2; z++) { /* x cos + rotate_half(x) sin */
                    double *xx = vecs[z], out[VHD];
                    for (int e = 0; e < VHD; e++) {
                        double rot = e < VHD / 2 ? -xx[e + VHD / 2] : xx[e - VHD / 2];
                        out[e] = xx[e] * cos(ang[e % (VHD / 2)]) + rot * sin(ang[e % (VHD / 2)]);
                    }
                    memcpy(xx, out, sizeof out);
                }
            }
        }
        bool full = l == FULL_LAYER || bug == VBUG_NO_WINDOWS;
        double *add = calloc((size_t)NPATCH * VH, sizeof *add);
        for (int r = 0; r < NPATCH; r++) {
            for (int hh = 0; hh < VNH; hh++) {
                double mx = -1e300, sum = 0;
                for (int j = 0; j < NPATCH; j++) {
                    sc[j] = -1e300;
                    if (!full && win[j] != win[r]) continue;
                    double d = 0;
                    for (int e = 0; e < VHD; e++) d += q[(size_t)r * VH + hh * VHD + e] * k[(size_t)j * VH + hh * VHD + e];
                    sc[j] = d / sqrt((double)VHD);
                    if (sc[j] > mx) mx = sc[j];
                }
                for (int j = 0; j < NPATCH; j++) sum += sc[j] = sc[j] > -1e299 ? exp(sc[j] - mx) : 0.0;
                for (int e = 0; e < VHD; e++) {
                    double acc = 0;
                    for (int j = 0; j < NPATCH; j++) acc += sc[j] * v[(size_t)j * VH + hh * VHD + e];
                    att[hh * VHD + e] = acc / sum;
                }
            }
            vt_linear(add + (size_t)r * VH, L("attn.proj.weight"), L("attn.proj.bias"), att, VH, VH);
        }
        for (size_t i = 0; i < (size_t)NPATCH * VH; i++) x[i] += add[i];
        free(add);
        for (int r = 0; r < NPATCH; r++) {
            double *xr = x + (size_t)r * VH;
            vt_rmsnorm(xn, xr, L("norm2.weight"), VH, 1e-6);
            vt_linear(g, L("mlp.gate_proj.weight"), L("mlp.gate_proj.bias"), xn, VFFN, VH);
            vt_linear(u, L("mlp.up_proj.weight"), L("mlp.up_proj.bias"), xn, VFFN, VH);
            for (int f = 0; f < VFFN; f++) g[f] = vt_silu(g[f]) * u[f];
            vt_linear(o, L("mlp.down_proj.weight"), L("mlp.down_proj.bias"), g, VH, VFFN);
            for (int c = 0; c < VH; c++) xr[c] += o[c];
        }
#undef L
    }
    /* the merger: ln_q per row, a cell's 4 rows (consecutive) side by side */
    double cat[MHID], mid[MHID];
    for (int cell = 0; cell < CELLS; cell++) {
        for (int j = 0; j < MERGE * MERGE; j++)
            vt_rmsnorm(cat + j * VH, x + ((size_t)cell * MERGE * MERGE + j) * VH, vt_w("visual.merger.ln_q.weight"), VH,
                       1e-6);
        vt_linear(mid, vt_w("visual.merger.mlp.0.weight"), vt_w("visual.merger.mlp.0.bias"), cat, MHID, MHID);
        for (int i = 0; i < MHID; i++) mid[i] = vt_gelu_erf(mid[i]);
        vt_linear(rows + (size_t)cell * TH, vt_w("visual.merger.mlp.2.weight"), vt_w("visual.merger.mlp.2.bias"), mid, TH,
                  MHID);
    }
    free(x), free(xn), free(q), free(k), free(v), free(att), free(g), free(u), free(o), free(sc), free(pat);
}

static void prompt_ids(int32_t *ids) {
    int i = 0;
    for (int j = 0; j < N_BEFORE; j++) ids[i++] = BEFORE[j];
    ids[i++] = VSTART;
    for (int j = 0; j < CELLS; j++) ids[i++] = IMAGE_TOKEN;
    ids[i++] = VEND;
    for (int j = 0; j < N_AFTER; j++) ids[i++] = AFTER[j];
}

/* get_rope_index for one image at `at` over n rows (rows from n_prompt on
 * continue as text); delta_bug shifts those by one. */
static void ref_positions_at(int32_t *pos3, int n, int at, int n_prompt, int delta_bug) {
    int i = 0;
    for (; i < at; i++) pos3[3 * i] = pos3[3 * i + 1] = pos3[3 * i + 2] = i;
    int st = at;
    for (int r = 0; r < MH; r++)
        for (int c = 0; c < MW; c++, i++) pos3[3 * i] = st, pos3[3 * i + 1] = st + r, pos3[3 * i + 2] = st + c;
    int next = st + (MH > MW ? MH : MW); /* the image's largest position + 1 */
    for (int t = 0; i < n; i++, t++) {
        int pp = next + t + (i >= n_prompt ? delta_bug : 0);
        pos3[3 * i] = pos3[3 * i + 1] = pos3[3 * i + 2] = pp;
    }
}

static void ref_positions(int32_t *pos3, int n, int delta_bug) { ref_positions_at(pos3, n, IMG_AT, N_PROMPT, delta_bug); }

/* Reference logits of ids with the image's rows at `at` (n rows: the
 * prompt of n_prompt, then any generated tokens). */
static double *reference_logits_at(vbug bug, const int32_t *ids, int n, int at, int n_prompt, int delta_bug) {
    double *img = malloc(sizeof(double) * CELLS * TH), *logits = malloc(sizeof(double) * (size_t)n * VOC);
    ref_image_rows(bug, img);
    const double **embd = calloc((size_t)n, sizeof *embd);
    for (int c = 0; c < CELLS; c++) embd[at + c] = img + (size_t)c * TH;
    int32_t *pos3 = malloc(sizeof(int32_t) * 3 * (size_t)n);
    ref_positions_at(pos3, n, at, n_prompt, delta_bug);
    ref_text_logits(BUG_NONE, ids, embd, pos3, n, logits);
    free(img), free(embd), free(pos3);
    return logits;
}

static double *reference_logits(vbug bug, const int32_t *ids, int n, int delta_bug) {
    return reference_logits_at(bug, ids, n, IMG_AT, N_PROMPT, delta_bug);
}

static const char *load_text_path, *load_vision_path; /* NULL: the Hugging Face folder */

static void load_vl(pdl_model **m, pdl_vision **v) {
    vt_load(m, v, load_text_path ? load_text_path : vl_dir, load_vision_path ? load_vision_path : vl_dir, NULL);
}

/* The prompt's all-row logits through pdl_seq_forward, with the
 * positions pdl_mm_rope_positions gives. */
static float *engine_prompt_logits(void) {
    pdl_model *m = NULL;
    pdl_vision *v = NULL;
    load_vl(&m, &v);
    pdl_context *ctx = test_context(m);
    pdl_vision_info info;
    pdl_vision_get_info(v, &info);
    CHECK(strcmp(info.family, "qwen2_5_vl") == 0 && strcmp(info.tower, "qwen2_5_vit") == 0);
    CHECK_EQ_INT(info.rows_per_image, -1);
    pdl_error err = {0};
    pdl_image *img = vt_load_image(ref_dir, "rgb_png.png");
    CHECK_EQ_INT(pdl_vision_image_rows(v, img), CELLS);
    float *rows = NULL;
    int n_rows = 0;
    REQUIRE_MSG(pdl_vision_encode(v, img, &rows, &n_rows, &err) == 0, "%s", err.message);
    REQUIRE(n_rows == CELLS);
    int32_t ids[N_PROMPT], pos3[3 * N_PROMPT], want3[3 * N_PROMPT], delta = 0;
    prompt_ids(ids);
    const float *embd[N_PROMPT] = {0};
    for (int i = 0; i < CELLS; i++) embd[IMG_AT + i] = rows + (size_t)i * TH;
    pdl_mm_input in = {.image = img, .position = IMG_AT};
    CHECK(pdl_mm_rope_positions(v, &in, 1, N_PROMPT, pos3, &delta));
    ref_positions(want3, N_PROMPT, 0);
    CHECK(memcmp(pos3, want3, sizeof pos3) == 0);
    CHECK_EQ_INT(delta, IMG_AT + MW - (IMG_AT + CELLS)); /* the text after the image starts at 5 + 7, row 40 */
    pdl_kv_cache *kv = NULL;
    REQUIRE(pdl_kv_cache_create(&kv, m, PDL_KV_F32, 16, 8, &err) == 0);
    float *logits = malloc((size_t)N_PROMPT * VOC * sizeof *logits);
    pdl_seq seq = {0};
    pdl_row_inputs ri = {.embd = embd, .rope_pos3 = pos3};
    int rc = pdl_seq_forward(ctx, kv, &seq, ids, &ri, N_PROMPT, PDL_LOGITS_ALL, logits, &err);
    CHECK_MSG(rc == 0, "%s", err.message);
    pdl_seq_release(kv, &seq);
    pdl_kv_cache_free(kv);
    free(rows);
    pdl_image_free(img);
    pdl_vision_free(v);
    pdl_context_free(ctx);
    pdl_model_free(m);
    if (rc) free(logits), logits = NULL;
    return logits;
}

static void test_image_prompt_matches_the_float64_reference(void) {
    need_vl_files();
    int32_t ids[N_PROMPT];
    prompt_ids(ids);
    float *got = engine_prompt_logits();
    REQUIRE(got);
    double *want = reference_logits(VBUG_NONE, ids, N_PROMPT, 0);
    double d = vt_max_diff(got, want, (size_t)N_PROMPT * VOC);
    fprintf(stderr, "  Qwen2.5-VL + image: max |engine - float64 reference| = %.3g over %d rows\n", d, N_PROMPT);
    CHECK_MSG(d < TOL, "%.3g", d);
    /* the reference tells the windows and the tower's rotary order apart */
    vbug bugs[2] = {VBUG_NO_WINDOWS, VBUG_ROPE_HW_SWAP};
    for (int b = 0; b < 2; b++) {
        double *bad = reference_logits(bugs[b], ids, N_PROMPT, 0);
        double db = vt_max_diff(got, bad, (size_t)N_PROMPT * VOC);
        fprintf(stderr, "  variant %d: %.3g\n", b, db);
        CHECK_MSG(db > 100 * TOL, "variant %d: %.3g", b, db);
        free(bad);
    }
    free(got), free(want);
}

/* ---- through the engine ------------------------------------------------------------- */

enum { GEN = 5 };

/* Requests with n_text[i] == 0 carry the image prompt; others n_text text ids. */
static void run_engine(const int *n_text, int n, int max_prefill_chunk, vt_collected *out) {
    pdl_model *m = NULL;
    pdl_vision *v = NULL;
    load_vl(&m, &v);
    pdl_engine_options eo = {.kv_dtype = PDL_KV_F32, .vision = v, .max_model_len = 96,
                             .max_prefill_chunk = max_prefill_chunk};
    int32_t ids[VT_MAX_REQ][N_PROMPT];
    vt_request reqs[VT_MAX_REQ];
    for (int i = 0; i < n; i++) {
        reqs[i] = (vt_request){.ids = ids[i], .n_ids = n_text[i]};
        if (n_text[i] == 0) {
            prompt_ids(ids[i]);
            reqs[i].n_ids = N_PROMPT, reqs[i].image = "rgb_png.png", reqs[i].position = IMG_AT;
        } else {
            vt_text_ids(ids[i], n_text[i], i, 140);
        }
    }
    vt_run run = {.gen = GEN, .vocab = VOC, .image_dir = ref_dir};
    vt_run_engine(m, &eo, reqs, n, &run, out);
    pdl_vision_free(v);
    pdl_model_free(m);
}

/* The engine's sampled rows (the prompt's last, then each decode row at
 * index + delta) against the reference over the prompt and the generated
 * tokens; with the decode rows' delta one off the reference lands far. */
static void test_decode_rows_match_the_float64_reference(void) {
    need_vl_files();
    int text[1] = {0};
    int chunks[2] = {0, 7};
    for (int c = 0; c < 2; c++) {
        vt_collected got;
        run_engine(text, 1, chunks[c], &got);
        REQUIRE(got.n[0] == GEN && got.n_logits[0] == GEN);
        int32_t ids[N_PROMPT + GEN];
        prompt_ids(ids);
        for (int g = 0; g < GEN - 1; g++) ids[N_PROMPT + g] = got.tokens[0][g];
        int n = N_PROMPT + GEN - 1;
        double *want = reference_logits(VBUG_NONE, ids, n, 0), *off = reference_logits(VBUG_NONE, ids, n, 1);
        double d = 0, d_off = 0;
        for (int g = 0; g < GEN; g++) {
            d = fmax(d, vt_max_diff(got.logits[0][g], want + (size_t)(N_PROMPT - 1 + g) * VOC, VOC));
            d_off = fmax(d_off, vt_max_diff(got.logits[0][g], off + (size_t)(N_PROMPT - 1 + g) * VOC, VOC));
        }
        fprintf(stderr, "  engine (prefill chunk %d): %d sampled rows vs reference %.3g; delta one off %.3g\n",
                chunks[c], GEN, d, d_off);
        CHECK_MSG(d < TOL, "%.3g", d);
        CHECK_MSG(d_off > 100 * TOL, "%.3g", d_off);
        free(want), free(off);
    }
}

/* Batch invariance with the image: the same tokens and logits bytes alone
 * and beside text-only requests. */
static void test_an_image_prompt_gives_the_same_output_alone_and_in_a_batch(void) {
    need_vl_files();
    int alone[1] = {0}, batch[4] = {5, 0, 19, 2};
    vt_collected a, b;
    run_engine(alone, 1, 0, &a);
    run_engine(batch, 4, 0, &b);
    vt_check_same_output(&a, &b, 1, 4, GEN);
}

/* ---- the command line ---------------------------------------------------------- */

/* `pagedlm logits --all-rows` with the image where -p has <__media__>:
 * <|vision_start|>, one <|image_pad|> per merged cell, <|vision_end|>, and
 * every row's logits against the reference over the ids it reports; `run`
 * generates from the same prompt. */
static void command_line_image_logits(const char *model_args) {
    char args[8192];
    snprintf(args, sizeof args, "logits %s --image '%s/rgb_png.png' -p 'Once upon a time <__media__> there was a "
             "cat' --all-rows --kv-cache-dtype f32 -t 2", model_args, ref_dir);
    cmd_result r = test_pagedlm(args);
    CHECK_MSG(r.status == 0, "%s", r.err);
    json_error_t je;
    json_t *o = r.status == 0 ? json_loads(r.out, 0, &je) : NULL;
    CHECK(o != NULL);
    if (o) {
        json_t *toks = json_object_get(o, "tokens"), *imgs = json_object_get(o, "images"), *lg = json_object_get(o, "logits");
        int n = (int)json_array_size(toks);
        int at = (int)json_integer_value(json_object_get(json_array_get(imgs, 0), "position"));
        CHECK_EQ_INT(json_integer_value(json_object_get(json_array_get(imgs, 0), "rows")), CELLS);
        int32_t *ids = malloc((size_t)n * sizeof *ids);
        for (int i = 0; i < n; i++) ids[i] = (int32_t)json_integer_value(json_array_get(toks, (size_t)i));
        bool laid_out = at > 1 && at + CELLS < n && ids[at - 1] == VSTART && ids[at + CELLS] == VEND;
        for (int i = 0; laid_out && i < CELLS; i++) laid_out = ids[at + i] == IMAGE_TOKEN;
        CHECK_MSG(laid_out, "image at %d of %d tokens", at, n);
        REQUIRE((int)json_array_size(lg) == n);
        if (laid_out) {
            double *want = reference_logits_at(VBUG_NONE, ids, n, at, n, 0), d = 0;
            for (int i = 0; i < n; i++)
                for (int j = 0; j < VOC; j++)
                    d = fmax(d, fabs(json_number_value(json_array_get(json_array_get(lg, (size_t)i), (size_t)j)) -
                                     want[(size_t)i * VOC + j]));
            fprintf(stderr, "  pagedlm logits: %d rows vs reference %.3g\n", n, d);
            CHECK_MSG(d < TOL, "%.3g", d);
            free(want);
        }
        free(ids);
        json_decref(o);
    }
    test_free_result(&r);
    snprintf(args, sizeof args, "run %s --image '%s/rgb_png.png' -p 'Once upon a time <__media__> there' -n 4 "
             "--temp 0 -t 2", model_args, ref_dir);
    r = test_pagedlm(args);
    CHECK_MSG(r.status == 0, "%s", r.err);
    test_free_result(&r);
}

static void test_the_command_line_takes_an_image(void) {
    need_vl_files();
    char model[4200];
    snprintf(model, sizeof model, "-m '%s'", vl_dir);
    command_line_image_logits(model);
}

/* The same model as llama.cpp's pair gives the folder's logits to the bit
 * (both F32, the same kernels: the two temporal kernels joined back into
 * the Conv3d, q/k/v apart instead of views of one qkv) and so the float64
 * reference's; through the API and the command line. */
static void test_the_gguf_pair_matches_the_folder_and_the_reference(void) {
    need_vl_files();
    need_ggufs();
    float *hf = engine_prompt_logits();
    load_text_path = text_gguf, load_vision_path = mmproj_gguf;
    float *gg = engine_prompt_logits();
    pdl_model *m = NULL, *hm = NULL;
    pdl_vision *v = NULL, *hv = NULL;
    load_vl(&m, &v);
    pdl_vision_info info;
    pdl_vision_get_info(v, &info);
    CHECK(strcmp(info.placeholder, "<|vision_start|><|image_pad|><|vision_end|>") == 0);
    CHECK(strcmp(info.family, "qwen2_5_vl") == 0);
    CHECK_EQ_INT(v->cfg.image_token_id, IMAGE_TOKEN);
    CHECK_EQ_INT(v->cfg.boi_id, VSTART);
    CHECK_EQ_INT(v->cfg.eoi_id, VEND);
    load_text_path = load_vision_path = NULL;
    /* For an image both temporal frames are the same picture, so only the
     * sum of the two kernels reaches the logits: the joined Conv3d is
     * compared with the folder's byte for byte (frames in order), as are
     * q, k and v */
    load_vl(&hm, &hv);
    const pdl_tensor *a = &v->w.patch_w, *b = &hv->w.patch_w;
    CHECK(a->n_dims == b->n_dims && memcmp(a->shape, b->shape, sizeof a->shape) == 0 && a->nbytes == b->nbytes);
    CHECK(a->nbytes == b->nbytes && memcmp(a->data, b->data, a->nbytes) == 0);
    for (int l = 0; l < VL; l++) {
        const pdl_vision_layer *x = &v->w.layers[l], *y = &hv->w.layers[l];
        CHECK(memcmp(x->wq.data, y->wq.data, sizeof(float) * VH * VH) == 0);
        CHECK(memcmp(x->wk.data, y->wk.data, sizeof(float) * VH * VH) == 0);
        CHECK(memcmp(x->wv.data, y->wv.data, sizeof(float) * VH * VH) == 0);
        CHECK(memcmp(x->bk.data, y->bk.data, sizeof(float) * VH) == 0);
        CHECK_EQ_INT((int)((v->cfg.full_attn[0] >> l) & 1), (int)((hv->cfg.full_attn[0] >> l) & 1));
    }
    CHECK_EQ_INT(v->cfg.window_cells, hv->cfg.window_cells);
    pdl_vision_free(v), pdl_vision_free(hv);
    pdl_model_free(m), pdl_model_free(hm);
    REQUIRE(hf && gg);
    CHECK(memcmp(hf, gg, sizeof(float) * N_PROMPT * VOC) == 0);
    int32_t ids[N_PROMPT];
    prompt_ids(ids);
    double *want = reference_logits(VBUG_NONE, ids, N_PROMPT, 0);
    double d = vt_max_diff(gg, want, (size_t)N_PROMPT * VOC), dh = 0;
    for (size_t i = 0; i < (size_t)N_PROMPT * VOC; i++) dh = fmax(dh, fabs((double)hf[i] - gg[i]));
    fprintf(stderr, "  GGUF pair: max |engine - float64 reference| = %.3g, |GGUF - folder| = %.3g\n", d, dh);
    CHECK_MSG(d < TOL, "%.3g", d);
    free(hf), free(gg), free(want);
    char model[8400];
    snprintf(model, sizeof model, "-m '%s' --mmproj '%s'", text_gguf, mmproj_gguf);
    command_line_image_logits(model);
}

/* A pair with a part missing or wrong is refused, naming the file and what. */
static void test_a_malformed_gguf_pair_is_refused(void) {
    need_vl_files();
    struct {
        gguf_fault fault;
        bool text; /* the text GGUF is the one refused */
        const char *says;
    } cases[] = {
        {GF_NO_SECOND_FRAME, false, "missing tensor 'v.patch_embd.weight.1' (the Conv3d's second temporal frame"},
        {GF_NO_WA_PATTERN, false, "missing key 'clip.vision.n_wa_pattern'"},
        {GF_WA_PATTERN_ZERO, false, "clip.vision.n_wa_pattern = 0 must be between 1 and the 3 layers"},
        {GF_BAD_WINDOW, false, "clip.vision.window_size 12 px is not a positive multiple of patch_size * "
                               "spatial_merge_size (4 * 2)"},
        {GF_NO_SECTIONS, true, "missing metadata key 'qwen2vl.rope.dimension_sections'"},
        {GF_FOURTH_SECTION, true, "'qwen2vl.rope.dimension_sections'[3] = 1: a fourth M-RoPE section is not supported"},
    };
    char *tp = test_tmp_path("qwen25vl-bad-text.gguf"), *vp = test_tmp_path("qwen25vl-bad-mmproj.gguf");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_ggufs(cases[i].fault, tp, vp);
        pdl_model *m = NULL;
        pdl_vision *v = NULL;
        pdl_error err = {0};
        pdl_model_options mo = {.n_threads = 1};
        int rc = pdl_model_load(&m, tp, &mo, &err);
        if (!cases[i].text) {
            REQUIRE_MSG(rc == 0, "%s", err.message);
            rc = pdl_vision_load(&v, vp, m, &err);
            pdl_vision_free(v);
            pdl_model_free(m);
        }
        CHECK_MSG(rc != 0, "case %zu loaded", i);
        CHECK_CONTAINS(err.message, cases[i].says);
        CHECK_CONTAINS(err.message, cases[i].text ? tp : vp);
    }
    free(tp), free(vp);
}

/* The server's path: an image part becomes the placeholder the chat
 * template writes (<|vision_start|><|image_pad|><|vision_end|>), which
 * expands to the same ids as <__media__> does. */
static void test_the_template_placeholder_expands_like_the_marker(void) {
    need_vl_files();
    pdl_model *m = NULL;
    pdl_vision *v = NULL;
    load_vl(&m, &v);
    pdl_vision_info info;
    pdl_vision_get_info(v, &info);
    CHECK(strcmp(info.placeholder, "<|vision_start|><|image_pad|><|vision_end|>") == 0);
    pdl_image *img = vt_load_image(ref_dir, "rgb_png.png");
    const pdl_image *imgs[1] = {img};
    char text[256];
    snprintf(text, sizeof text, "Once upon a time %s there", info.placeholder);
    const char *media = "Once upon a time <__media__> there";
    pdl_mm_prompt a, b;
    pdl_error err = {0};
    REQUIRE_MSG(pdl_mm_tokenize(m, v, text, strlen(text), info.placeholder, imgs, 1, 0, &a, &err) == 0, "%s",
                err.message);
    REQUIRE_MSG(pdl_mm_tokenize(m, v, media, strlen(media), "<__media__>", imgs, 1, 0, &b, &err) == 0, "%s",
                err.message);
    CHECK(a.n_ids == b.n_ids && memcmp(a.ids, b.ids, a.n_ids * sizeof *a.ids) == 0);
    CHECK_EQ_INT(a.images[0].position, b.images[0].position);
    int at = a.images[0].position;
    CHECK(at > 0 && a.ids[at - 1] == VSTART && (size_t)(at + CELLS) < a.n_ids && a.ids[at + CELLS] == VEND);
    pdl_mm_prompt_free(&a), pdl_mm_prompt_free(&b);
    pdl_image_free(img);
    pdl_vision_free(v);
    pdl_model_free(m);
}

/* An image smart_resize refuses (aspect ratio over 200) is refused from
 * its header by the decoder (for every family); one that reaches the
 * prompt builder or the engine all the same (made by hand here) is refused
 * there with the reason. */
static void test_an_image_too_thin_is_refused(void) {
    need_vl_files();
    char *png = test_join(ref_dir, "thin.png"), cmd[4096];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 -c \"from PIL import Image; Image.new('RGB', (402, 2), (9, 8, 7))"
             ".save('%s')\"", png);
    REQUIRE(system(cmd) == 0);
    pdl_image *img = NULL;
    pdl_error err = {0};
    CHECK(pdl_image_load(&img, png, &err) != 0 && img == NULL);
    CHECK_CONTAINS(err.message, "PNG image of 402 x 2 pixels: its aspect ratio 201.0:1 is over the limit of 200:1");
    img = calloc(1, sizeof *img);
    REQUIRE(img);
    img->width = 402, img->height = 2;
    img->rgb = malloc(402 * 2 * 3);
    REQUIRE(img->rgb);
    memset(img->rgb, 9, 402 * 2 * 3);
    pdl_model *m = NULL;
    pdl_vision *v = NULL;
    load_vl(&m, &v);
    const pdl_image *imgs[1] = {img};
    pdl_mm_prompt mm;
    CHECK(pdl_mm_tokenize(m, v, "a <__media__>", 13, "<__media__>", imgs, 1, 0, &mm, &err) != 0);
    CHECK_CONTAINS(err.message, "image 0 (402 x 2 pixels) has an aspect ratio over 200");
    pdl_engine_options eo = {.kv_dtype = PDL_KV_F32, .vision = v, .max_model_len = 96};
    pdl_engine *e = NULL;
    REQUIRE_MSG(pdl_engine_create(&e, m, &eo, &err) == 0, "%s", err.message);
    int32_t ids[8] = {3, 4, IMAGE_TOKEN, 5};
    pdl_mm_input in = {.image = img, .position = 2};
    pdl_request_params rp = {.max_tokens = 2, .logprobs = -1, .prompt_logprobs = -1, .images = &in, .n_images = 1};
    uint64_t id = 0;
    CHECK(pdl_engine_add_request(e, ids, 4, &rp, NULL, NULL, &id, &err) != 0);
    CHECK_CONTAINS(err.message, "image 0 (402 x 2 pixels) has an aspect ratio over 200");
    pdl_engine_free(e);
    pdl_vision_free(v);
    pdl_model_free(m);
    pdl_image_free(img);
    free(png);
}

int main(void) {
    RUN(test_mrope_rows_match_the_float64_reference);
    RUN(test_equal_components_are_plain_rope);
    RUN(test_bad_sections_are_refused);
    RUN(test_image_prompt_matches_the_float64_reference);
    RUN(test_decode_rows_match_the_float64_reference);
    RUN(test_an_image_prompt_gives_the_same_output_alone_and_in_a_batch);
    RUN(test_the_command_line_takes_an_image);
    RUN(test_the_gguf_pair_matches_the_folder_and_the_reference);
    RUN(test_a_malformed_gguf_pair_is_refused);
    RUN(test_the_template_placeholder_expands_like_the_marker);
    RUN(test_an_image_too_thin_is_refused);
    vt_free_weights();
    free(hf_dir), free(vl_dir), free(ref_dir), free(text_gguf), free(mmproj_gguf);
    return test_summary();
}
