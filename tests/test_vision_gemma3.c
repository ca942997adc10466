/*
 * test_vision_gemma3.c - Gemma 3 with an image (SigLIP tower, Gemma 3's
 * pooling projector, the Gemma 3 text model with its two-way attention
 * among an image's rows) against a float64 forward written from the
 * published descriptions (transformers' modeling_siglip.py,
 * modeling_gemma3.py: Gemma3MultiModalProjector and the token_type_ids
 * mask, Gemma3ImageProcessor), image preprocessing included.
 *
 * The model is a tiny random-weight Gemma3ForConditionalGeneration folder
 * written here: SigLIP of width 32, 2 layers, 32 x 32 pixels in 4 x 4
 * patches (8 x 8 patches, average-pooled 2 x 2 into 16 image rows); the
 * text model 3 layers of width 48, the first two windowed with a window of
 * 4 rows (smaller than the image's 16 rows, so the mask's rule for windowed
 * layers is seen: transformers ORs "both rows in the same image" onto the
 * windowed causal mask, so an image row sees its whole image and the
 * window's keys before it).
 *
 * The same weights are also written as llama.cpp's pair (a gemma3 text
 * GGUF with Gemma's norms stored as 1 + w, and an mmproj GGUF with projector
 * type gemma3, SigLIP's tensors under v.*, mm.soft_emb_norm as 1 + w).
 *
 * The reference starts from pixel values made by PIL and numpy
 * (scripts/vision-reference-pixels: Gemma3ImageProcessor's bilinear resize
 * to 32 x 32, rescale, normalise with mean = std = 0.5) and runs the rest in
 * float64.
 *
 * Tolerance: 1e-4 absolute on logits of magnitude ~1-5. The engine runs in
 * float32 (F32 weights and KV cache); the observed difference is ~1e-6. The
 * reference variants with the image rows causal among themselves, with the
 * window clipping the image, or with the pooling windows one patch off land
 * far outside it, so the comparison sees each of them.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf_writer.h"
#include "pagedlm.h"
#include "st_writer.h"
#include "test_util.h"
#include "vision_test.h"

#define TOL 1e-4

/* tower */
enum { VH = 32, VNH = 2, VHD = VH / VNH, VFFN = 64, VL = 2, IMG = 32, PATCH = 4, SIDE = IMG / PATCH };
enum { NP = SIDE * SIDE, PP = 3 * PATCH * PATCH, MM = 16, TPS = 4, POOL = SIDE / TPS };
/* text */
enum { TH = 48, NH = 2, NKV = 1, HD = 16, FFN = 96, VOC = 128, NL = 3, WINDOW = 4, PATTERN = 3 };
enum { BOI = 100, EOI = 101, IMAGE_TOKEN = 102 };
static const double VEPS = 1e-6, TEPS = 1e-6, THETA = 1e6, THETA_LOCAL = 10000.0, QPAS = 24.0, LINEAR = 2.0;

/* ---- random weights ------------------------------------------------------------ */

static void make_weights(void) {
    if (vt_count()) return;
    vt_seed(3333);
    char n[160];
    const char *vm = "vision_tower.vision_model";
#define V(fmt, ...) (snprintf(n, sizeof n, "%s." fmt, vm, __VA_ARGS__), n)
    vt_add(V("%s", "embeddings.patch_embedding.weight"), 4, VH, 3, PATCH, PATCH, VT_UNIFORM, 0.5);
    vt_add(V("%s", "embeddings.patch_embedding.bias"), 1, VH, 0, 0, 0, VT_SMALL, 0);
    vt_add(V("%s", "embeddings.position_embedding.weight"), 2, NP, VH, 0, 0, VT_UNIFORM, 1.0);
    for (int l = 0; l < VL; l++) {
        vt_add(V("encoder.layers.%d.layer_norm1.weight", l), 1, VH, 0, 0, 0, VT_NEAR_ONE, 0);
        vt_add(V("encoder.layers.%d.layer_norm1.bias", l), 1, VH, 0, 0, 0, VT_SMALL, 0);
        const char *proj[4] = {"q_proj", "k_proj", "v_proj", "out_proj"};
        for (int p = 0; p < 4; p++) {
            vt_add(V("encoder.layers.%d.self_attn.%s.weight", l, proj[p]), 2, VH, VH, 0, 0, VT_UNIFORM, 0.6);
            vt_add(V("encoder.layers.%d.self_attn.%s.bias", l, proj[p]), 1, VH, 0, 0, 0, VT_SMALL, 0);
        }
        vt_add(V("encoder.layers.%d.layer_norm2.weight", l), 1, VH, 0, 0, 0, VT_NEAR_ONE, 0);
        vt_add(V("encoder.layers.%d.layer_norm2.bias", l), 1, VH, 0, 0, 0, VT_SMALL, 0);
        vt_add(V("encoder.layers.%d.mlp.fc1.weight", l), 2, VFFN, VH, 0, 0, VT_UNIFORM, 0.6);
        vt_add(V("encoder.layers.%d.mlp.fc1.bias", l), 1, VFFN, 0, 0, 0, VT_SMALL, 0);
        vt_add(V("encoder.layers.%d.mlp.fc2.weight", l), 2, VH, VFFN, 0, 0, VT_UNIFORM, 0.4);
        vt_add(V("encoder.layers.%d.mlp.fc2.bias", l), 1, VH, 0, 0, 0, VT_SMALL, 0);
    }
    vt_add(V("%s", "post_layernorm.weight"), 1, VH, 0, 0, 0, VT_NEAR_ONE, 0);
    vt_add(V("%s", "post_layernorm.bias"), 1, VH, 0, 0, 0, VT_SMALL, 0);
#undef V
    /* Gemma3RMSNorm weights are applied as 1 + w: around 0 */
    vt_add("multi_modal_projector.mm_soft_emb_norm.weight", 1, VH, 0, 0, 0, VT_SMALL, 0);
    vt_add("multi_modal_projector.mm_input_projection_weight", 2, VH, TH, 0, 0, VT_UNIFORM, 0.8);
    vt_add("language_model.model.embed_tokens.weight", 2, VOC, TH, 0, 0, VT_UNIFORM, 0.3);
    vt_add("language_model.model.norm.weight", 1, TH, 0, 0, 0, VT_SMALL, 0);
    for (int l = 0; l < NL; l++) {
#define T(fmt) (snprintf(n, sizeof n, "language_model.model.layers.%d." fmt, l), n)
        vt_add(T("input_layernorm.weight"), 1, TH, 0, 0, 0, VT_SMALL, 0);
        vt_add(T("self_attn.q_proj.weight"), 2, NH * HD, TH, 0, 0, VT_UNIFORM, 0.5);
        vt_add(T("self_attn.k_proj.weight"), 2, NKV * HD, TH, 0, 0, VT_UNIFORM, 0.5);
        vt_add(T("self_attn.v_proj.weight"), 2, NKV * HD, TH, 0, 0, VT_UNIFORM, 0.5);
        vt_add(T("self_attn.o_proj.weight"), 2, TH, NH * HD, 0, 0, VT_UNIFORM, 0.5);
        vt_add(T("self_attn.q_norm.weight"), 1, HD, 0, 0, 0, VT_SMALL, 0);
        vt_add(T("self_attn.k_norm.weight"), 1, HD, 0, 0, 0, VT_SMALL, 0);
        vt_add(T("post_attention_layernorm.weight"), 1, TH, 0, 0, 0, VT_SMALL, 0);
        vt_add(T("pre_feedforward_layernorm.weight"), 1, TH, 0, 0, 0, VT_SMALL, 0);
        vt_add(T("post_feedforward_layernorm.weight"), 1, TH, 0, 0, 0, VT_SMALL, 0);
        vt_add(T("mlp.gate_proj.weight"), 2, FFN, TH, 0, 0, VT_UNIFORM, 0.5);
        vt_add(T("mlp.up_proj.weight"), 2, FFN, TH, 0, 0, VT_UNIFORM, 0.5);
        vt_add(T("mlp.down_proj.weight"), 2, TH, FFN, 0, 0, VT_UNIFORM, 0.5);
#undef T
    }
}

/* ---- the folder ---------------------------------------------------------------- */

static const char *CONFIG =
    "{\"architectures\": [\"Gemma3ForConditionalGeneration\"], \"model_type\": \"gemma3\",\n"
    " \"mm_tokens_per_image\": 16, \"boi_token_index\": 100, \"eoi_token_index\": 101, \"image_token_index\": 102,\n"
    " \"bos_token_id\": 2, \"eos_token_id\": [1, 106],\n"
    " \"text_config\": {\"model_type\": \"gemma3_text\", \"hidden_size\": 48, \"intermediate_size\": 96,\n"
    "  \"num_hidden_layers\": 3, \"num_attention_heads\": 2, \"num_key_value_heads\": 1, \"head_dim\": 16,\n"
    "  \"vocab_size\": 128, \"max_position_embeddings\": 256, \"rope_theta\": 1000000.0,\n"
    "  \"rope_local_base_freq\": 10000.0, \"rms_norm_eps\": 1e-06, \"query_pre_attn_scalar\": 24,\n"
    "  \"sliding_window\": 4, \"sliding_window_pattern\": 3, \"hidden_activation\": \"gelu_pytorch_tanh\",\n"
    "  \"final_logit_softcapping\": null, \"attn_logit_softcapping\": null,\n"
    "  \"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": 2.0},\n"
    "  \"layer_types\": [\"sliding_attention\", \"sliding_attention\", \"full_attention\"]},\n"
    " \"vision_config\": {\"model_type\": \"siglip_vision_model\", \"hidden_size\": 32, \"intermediate_size\": 64,\n"
    "  \"num_hidden_layers\": 2, \"num_attention_heads\": 2, \"image_size\": 32, \"patch_size\": 4,\n"
    "  \"layer_norm_eps\": 1e-06, \"hidden_act\": \"gelu_pytorch_tanh\", \"vision_use_head\": false}}\n";

static const char *PREPROCESSOR =
    "{\"image_processor_type\": \"Gemma3ImageProcessor\", \"do_resize\": true,"
    " \"size\": {\"height\": 32, \"width\": 32}, \"resample\": 2, \"do_rescale\": true,"
    " \"rescale_factor\": 0.00392156862745098, \"do_normalize\": true, \"image_mean\": [0.5, 0.5, 0.5],"
    " \"image_std\": [0.5, 0.5, 0.5], \"do_convert_rgb\": null, \"do_pan_and_scan\": null}";

static char *hf_dir, *ref_dir;
static float ref_pixels[3 * IMG * IMG];

static void need_files(void) {
    if (hf_dir) return;
    make_weights();
    ref_dir = vt_reference_dir();
    /* rgb_png through Gemma3ImageProcessor's steps at 32 x 32 (bilinear, mean = std = 0.5) */
    vt_read_f32(ref_dir, "rgb_png.fixed32.f32", ref_pixels, sizeof ref_pixels);

    hf_dir = test_make_dir("gemma3-vlm");
    char *p = test_join(hf_dir, "config.json");
    test_write_file(p, CONFIG, strlen(CONFIG));
    free(p);
    p = test_join(hf_dir, "preprocessor_config.json");
    test_write_file(p, PREPROCESSOR, strlen(PREPROCESSOR));
    free(p);
    stw_writer *w = stw_new();
    vt_put_all_st(w);
    p = test_join(hf_dir, "model.safetensors");
    REQUIRE(stw_write(w, p) == 0);
    free(p);
    stw_free(w);
}

/* ---- the float64 reference ------------------------------------------------------------ */

typedef enum ref_bug {
    BUG_NONE,
    BUG_CAUSAL_IMAGE,   /* the image's rows causal among themselves (no two-way attention) */
    BUG_WINDOW_CLIPS,   /* the window applied to the image's rows too (window AND (causal OR same image)) */
    BUG_POOL_SHIFT,     /* the pooling windows one patch to the right (wrapping) */
} ref_bug;

static double gelu_tanh(double g) {
    return 0.5 * g * (1.0 + tanh(0.79788456080286535588 * (g + 0.044715 * g * g * g)));
}

/* SigLIP + the projector over the reference pixels: (MM, TH) image rows. */
static void ref_image_rows(ref_bug bug, double *rows) {
    const char *vm = "vision_tower.vision_model";
    char n[160];
#define VW(fmt, ...) (snprintf(n, sizeof n, "%s." fmt, vm, __VA_ARGS__), vt_w(n))
    static double x[NP][VH];
    const float *conv = VW("%s", "embeddings.patch_embedding.weight");
    const float *cb = VW("%s", "embeddings.patch_embedding.bias");
    const float *pos = VW("%s", "embeddings.position_embedding.weight");
    /* the patch convolution (stride = kernel = PATCH) with its bias, then positions; no class token */
    for (int p = 0; p < NP; p++) {
        int py = p / SIDE, px = p % SIDE;
        for (int o = 0; o < VH; o++) {
            double s = cb[o];
            for (int c = 0; c < 3; c++)
                for (int ky = 0; ky < PATCH; ky++)
                    for (int kx = 0; kx < PATCH; kx++)
                        s += (double)conv[((o * 3 + c) * PATCH + ky) * PATCH + kx] *
                             ref_pixels[(c * IMG + py * PATCH + ky) * IMG + px * PATCH + kx];
            x[p][o] = s + pos[p * VH + o];
        }
    }
    for (int l = 0; l < VL; l++) {
        char layer[160];
        snprintf(layer, sizeof layer, "%s.encoder.layers.%d", vm, l);
        vt_vit_layer(&x[0][0], NP, VH, VNH, VFFN, layer, VEPS, gelu_tanh);
    }
    for (int r = 0; r < NP; r++)
        vt_layernorm(x[r], VH, VW("%s", "post_layernorm.weight"), VW("%s", "post_layernorm.bias"), VEPS);
#undef VW
    /* Gemma3MultiModalProjector: (hidden, SIDE, SIDE) -> AvgPool2d(POOL) -> (hidden, TPS, TPS) -> flatten, transpose
     * -> RMSNorm (1 + w) -> x @ mm_input_projection_weight (VH, TH) */
    const float *nw = vt_w("multi_modal_projector.mm_soft_emb_norm.weight");
    const float *pw = vt_w("multi_modal_projector.mm_input_projection_weight");
    int shift = bug == BUG_POOL_SHIFT ? 1 : 0;
    for (int ty = 0; ty < TPS; ty++)
        for (int tx = 0; tx < TPS; tx++) {
            double pooled[VH] = {0}, normed[VH];
            for (int y = 0; y < POOL; y++)
                for (int xx = 0; xx < POOL; xx++) {
                    int py = ty * POOL + y, px = (tx * POOL + xx + shift) % SIDE;
                    for (int d = 0; d < VH; d++) pooled[d] += x[py * SIDE + px][d] / (POOL * POOL);
                }
            vt_rmsnorm_plus_one(normed, pooled, nw, VH, VEPS);
            double *o = rows + (size_t)(ty * TPS + tx) * TH;
            for (int c = 0; c < TH; c++) {
                double s = 0;
                for (int d = 0; d < VH; d++) s += normed[d] * pw[(size_t)d * TH + c];
                o[c] = s;
            }
        }
}

static bool windowed(int l) { return (l + 1) % PATTERN != 0; }

/* rotate-half RoPE at pos with base theta and linear factor lin */
static void rope(double *x, int pos, double theta, double lin) {
    for (int i = 0; i < HD / 2; i++) {
        double ang = pos / pow(theta, 2.0 * i / HD) / lin, c = cos(ang), s = sin(ang);
        double x0 = x[i], x1 = x[i + HD / 2];
        x[i] = x0 * c - x1 * s;
        x[i + HD / 2] = x1 * c + x0 * s;
    }
}

/* The Gemma 3 text model over n rows; image rows (embd[i] != NULL) take
 * their vector (not scaled: transformers scatters the image features after
 * the embedding's sqrt(hidden)); group[i] >= 0 names the image of an image
 * row (the token_type_ids mask: row t sees key j when j <= t and, on a
 * windowed layer, t - j < WINDOW; or when both are rows of one image). */
static void ref_text_logits(ref_bug bug, const int32_t *ids, const double *const *embd, const int *group, int n,
                            double *logits) {
    double (*x)[TH] = calloc((size_t)n, sizeof *x), (*xn)[TH] = calloc((size_t)n, sizeof *xn);
    double (*q)[NH * HD] = calloc((size_t)n, sizeof *q), (*k)[NKV * HD] = calloc((size_t)n, sizeof *k);
    double (*v)[NKV * HD] = calloc((size_t)n, sizeof *v), (*a)[NH * HD] = calloc((size_t)n, sizeof *a);
    double *s = malloc((size_t)n * sizeof *s);
    const float *emb = vt_w("language_model.model.embed_tokens.weight");
    double es = (double)(float)sqrt((double)TH); /* Gemma's embedding scale, a float32 number */
    for (int r = 0; r < n; r++)
        for (int i = 0; i < TH; i++) x[r][i] = embd[r] ? embd[r][i] : emb[(size_t)ids[r] * TH + i] * es;
    char nm[128];
#define TW(fmt) (snprintf(nm, sizeof nm, "language_model.model.layers.%d." fmt, l), vt_w(nm))
    for (int l = 0; l < NL; l++) {
        bool win = windowed(l);
        for (int r = 0; r < n; r++) {
            vt_rmsnorm_plus_one(xn[r], x[r], TW("input_layernorm.weight"), TH, TEPS);
            vt_linear(q[r], TW("self_attn.q_proj.weight"), NULL, xn[r], NH * HD, TH);
            vt_linear(k[r], TW("self_attn.k_proj.weight"), NULL, xn[r], NKV * HD, TH);
            vt_linear(v[r], TW("self_attn.v_proj.weight"), NULL, xn[r], NKV * HD, TH);
            for (int hh = 0; hh < NH + NKV; hh++) {
                double *vec = hh < NH ? q[r] + hh * HD : k[r] + (hh - NH) * HD;
                const float *nw = hh < NH ? TW("self_attn.q_norm.weight") : TW("self_attn.k_norm.weight");
                vt_rmsnorm_plus_one(vec, vec, nw, HD, TEPS);
                if (win) rope(vec, r, THETA_LOCAL, 1.0);
                else rope(vec, r, THETA, LINEAR);
            }
        }
        for (int r = 0; r < n; r++)
            for (int hh = 0; hh < NH; hh++) {
                int kh = hh / (NH / NKV);
                double mx = -INFINITY, z = 0;
                for (int j = 0; j < n; j++) {
                    bool causal = j <= r && !(win && r - j >= WINDOW);
                    bool same_image = bug != BUG_CAUSAL_IMAGE && group[r] >= 0 && group[j] == group[r];
                    bool ok = causal || same_image;
                    if (bug == BUG_WINDOW_CLIPS)
                        ok = (j <= r || same_image) && !(win && abs(r - j) >= WINDOW);
                    if (!ok) {
                        s[j] = -INFINITY;
                        continue;
                    }
                    double d = 0;
                    for (int i = 0; i < HD; i++) d += q[r][hh * HD + i] * k[j][kh * HD + i];
                    s[j] = d / sqrt(QPAS);
                    mx = fmax(mx, s[j]);
                }
                for (int j = 0; j < n; j++) z += s[j] = isinf(s[j]) ? 0.0 : exp(s[j] - mx);
                for (int i = 0; i < HD; i++) {
                    double o = 0;
                    for (int j = 0; j < n; j++) o += s[j] / z * v[j][kh * HD + i];
                    a[r][hh * HD + i] = o;
                }
            }
        for (int r = 0; r < n; r++) {
            double t[TH], g[FFN], u[FFN], h[TH];
            vt_linear(t, TW("self_attn.o_proj.weight"), NULL, a[r], TH, NH * HD);
            vt_rmsnorm_plus_one(t, t, TW("post_attention_layernorm.weight"), TH, TEPS);
            for (int i = 0; i < TH; i++) x[r][i] += t[i];
            vt_rmsnorm_plus_one(h, x[r], TW("pre_feedforward_layernorm.weight"), TH, TEPS);
            vt_linear(g, TW("mlp.gate_proj.weight"), NULL, h, FFN, TH);
            vt_linear(u, TW("mlp.up_proj.weight"), NULL, h, FFN, TH);
            for (int i = 0; i < FFN; i++) g[i] = gelu_tanh(g[i]) * u[i];
            vt_linear(t, TW("mlp.down_proj.weight"), NULL, g, TH, FFN);
            vt_rmsnorm_plus_one(t, t, TW("post_feedforward_layernorm.weight"), TH, TEPS);
            for (int i = 0; i < TH; i++) x[r][i] += t[i];
        }
    }
#undef TW
    for (int r = 0; r < n; r++) { /* tied head */
        vt_rmsnorm_plus_one(xn[r], x[r], vt_w("language_model.model.norm.weight"), TH, TEPS);
        vt_linear(logits + (size_t)r * VOC, emb, NULL, xn[r], VOC, TH);
    }
    free(x), free(xn), free(q), free(k), free(v), free(a), free(s);
}

/* The prompt, as the processor lays it out: text, "\n\n" <start_of_image>, the
 * 16 image rows, <end_of_image> "\n\n", text (token ids of this vocabulary). */
enum { IMG_AT = 5, N_PROMPT = IMG_AT + MM + 5 };
static const int32_t BEFORE[IMG_AT] = {2, 17, 40, 9, BOI}, AFTER[5] = {EOI, 9, 33, 21, 51};

static void prompt_ids(int32_t *ids) {
    memcpy(ids, BEFORE, sizeof BEFORE);
    for (int i = 0; i < MM; i++) ids[IMG_AT + i] = IMAGE_TOKEN;
    memcpy(ids + IMG_AT + MM, AFTER, sizeof AFTER);
}

static double *reference_logits(ref_bug bug) {
    static double rows[MM * TH];
    ref_image_rows(bug, rows);
    int32_t ids[N_PROMPT];
    prompt_ids(ids);
    const double *embd[N_PROMPT] = {0};
    int group[N_PROMPT];
    for (int i = 0; i < N_PROMPT; i++) group[i] = -1;
    for (int i = 0; i < MM; i++) embd[IMG_AT + i] = rows + (size_t)i * TH, group[IMG_AT + i] = 0;
    double *logits = malloc((size_t)N_PROMPT * VOC * sizeof *logits);
    ref_text_logits(bug, ids, embd, group, N_PROMPT, logits);
    return logits;
}

/* ---- the engine ---------------------------------------------------------------- */

/* ---- llama.cpp's pair: the text GGUF and the gemma3 mmproj ------------------------------ */

static char *text_gguf, *mmproj_gguf;

/* a norm Gemma applies as (1 + w): llama.cpp's converters store 1 + w */
static void put_plus_one(gguf_writer *g, const char *gg, const char *hf) {
    const vt_tensor *t = vt_find(hf);
    REQUIRE_MSG(t, "no weight %s", hf);
    float *d = malloc((size_t)t->shape[0] * sizeof *d);
    for (int64_t i = 0; i < t->shape[0]; i++) d[i] = 1.0f + t->data[i];
    gguf_writer_add_tensor_f32(g, gg, 1, t->shape, d);
    free(d);
}

static void write_ggufs(void) {
    if (text_gguf) return;
    need_files();
    gguf_writer *t = gguf_writer_new(3);
    gguf_writer_add_str(t, "general.architecture", "gemma3");
    gguf_writer_add_u32(t, "gemma3.context_length", 256);
    gguf_writer_add_u32(t, "gemma3.embedding_length", TH);
    gguf_writer_add_u32(t, "gemma3.feed_forward_length", FFN);
    gguf_writer_add_u32(t, "gemma3.block_count", NL);
    gguf_writer_add_u32(t, "gemma3.attention.head_count", NH);
    gguf_writer_add_u32(t, "gemma3.attention.head_count_kv", NKV);
    gguf_writer_add_u32(t, "gemma3.attention.key_length", HD);
    gguf_writer_add_u32(t, "gemma3.attention.value_length", HD);
    gguf_writer_add_u32(t, "gemma3.rope.dimension_count", HD);
    gguf_writer_add_f32(t, "gemma3.rope.freq_base", (float)THETA);
    gguf_writer_add_u32(t, "gemma3.attention.sliding_window", WINDOW);
    gguf_writer_add_f32(t, "gemma3.attention.layer_norm_rms_epsilon", (float)TEPS);
    gguf_writer_add_u32(t, "gemma3.attention.sliding_window_pattern", PATTERN);
    gguf_writer_add_f32(t, "gemma3.attention.scale", (float)(1.0 / sqrt(QPAS)));
    gguf_writer_add_str(t, "gemma3.rope.scaling.type", "linear");
    gguf_writer_add_f32(t, "gemma3.rope.scaling.factor", (float)LINEAR);
    vt_put_gguf(t, "token_embd.weight", "language_model.model.embed_tokens.weight");
    put_plus_one(t, "output_norm.weight", "language_model.model.norm.weight");
    char hf[160], gg[64];
    static const char *const mats[][2] = {
        {"self_attn.q_proj.weight", "attn_q.weight"}, {"self_attn.k_proj.weight", "attn_k.weight"},
        {"self_attn.v_proj.weight", "attn_v.weight"}, {"self_attn.o_proj.weight", "attn_output.weight"},
        {"mlp.gate_proj.weight", "ffn_gate.weight"},  {"mlp.up_proj.weight", "ffn_up.weight"},
        {"mlp.down_proj.weight", "ffn_down.weight"}};
    static const char *const norms[][2] = {
        {"input_layernorm.weight", "attn_norm.weight"}, {"self_attn.q_norm.weight", "attn_q_norm.weight"},
        {"self_attn.k_norm.weight", "attn_k_norm.weight"},
        {"post_attention_layernorm.weight", "post_attention_norm.weight"},
        {"pre_feedforward_layernorm.weight", "ffn_norm.weight"},
        {"post_feedforward_layernorm.weight", "post_ffw_norm.weight"}};
    for (int l = 0; l < NL; l++) {
        for (size_t i = 0; i < sizeof mats / sizeof mats[0]; i++) {
            snprintf(hf, sizeof hf, "language_model.model.layers.%d.%s", l, mats[i][0]);
            snprintf(gg, sizeof gg, "blk.%d.%s", l, mats[i][1]);
            vt_put_gguf(t, gg, hf);
        }
        for (size_t i = 0; i < sizeof norms / sizeof norms[0]; i++) {
            snprintf(hf, sizeof hf, "language_model.model.layers.%d.%s", l, norms[i][0]);
            snprintf(gg, sizeof gg, "blk.%d.%s", l, norms[i][1]);
            put_plus_one(t, gg, hf);
        }
    }
    gguf_writer *v = gguf_writer_new(3);
    static const float half[3] = {0.5f, 0.5f, 0.5f};
    gguf_writer_add_str(v, "general.architecture", "clip");
    gguf_writer_add_bool(v, "clip.has_vision_encoder", true);
    gguf_writer_add_str(v, "clip.projector_type", "gemma3");
    gguf_writer_add_u32(v, "clip.vision.image_size", IMG);
    gguf_writer_add_u32(v, "clip.vision.patch_size", PATCH);
    gguf_writer_add_u32(v, "clip.vision.embedding_length", VH);
    gguf_writer_add_u32(v, "clip.vision.feed_forward_length", VFFN);
    gguf_writer_add_u32(v, "clip.vision.block_count", VL);
    gguf_writer_add_u32(v, "clip.vision.attention.head_count", VNH);
    gguf_writer_add_f32(v, "clip.vision.attention.layer_norm_epsilon", (float)VEPS);
    gguf_writer_add_arr(v, "clip.vision.image_mean", GGUF_TYPE_FLOAT32, half, 3);
    gguf_writer_add_arr(v, "clip.vision.image_std", GGUF_TYPE_FLOAT32, half, 3);
    gguf_writer_add_bool(v, "clip.use_gelu", true);
    gguf_writer_add_u32(v, "clip.vision.projector.scale_factor", POOL);
    const char *vm = "vision_tower.vision_model";
#define VN(fmt, ...) (snprintf(hf, sizeof hf, "%s." fmt, vm, __VA_ARGS__), hf)
    vt_put_gguf(v, "v.patch_embd.weight", VN("%s", "embeddings.patch_embedding.weight"));
    vt_put_gguf(v, "v.patch_embd.bias", VN("%s", "embeddings.patch_embedding.bias"));
    vt_put_gguf(v, "v.position_embd.weight", VN("%s", "embeddings.position_embedding.weight"));
    static const char *const blk[][2] = {
        {"layer_norm1", "ln1"}, {"self_attn.q_proj", "attn_q"}, {"self_attn.k_proj", "attn_k"},
        {"self_attn.v_proj", "attn_v"}, {"self_attn.out_proj", "attn_out"}, {"layer_norm2", "ln2"},
        {"mlp.fc1", "ffn_up"}, {"mlp.fc2", "ffn_down"}}; /* convert_hf_to_gguf's names for SigLIP */
    for (int l = 0; l < VL; l++)
        for (size_t i = 0; i < sizeof blk / sizeof blk[0]; i++)
            for (int b = 0; b < 2; b++) {
                snprintf(gg, sizeof gg, "v.blk.%d.%s.%s", l, blk[i][1], b ? "bias" : "weight");
                vt_put_gguf(v, gg, VN("encoder.layers.%d.%s.%s", l, blk[i][0], b ? "bias" : "weight"));
            }
    vt_put_gguf(v, "v.post_ln.weight", VN("%s", "post_layernorm.weight"));
    vt_put_gguf(v, "v.post_ln.bias", VN("%s", "post_layernorm.bias"));
#undef VN
    put_plus_one(v, "mm.soft_emb_norm.weight", "multi_modal_projector.mm_soft_emb_norm.weight");
    vt_put_gguf(v, "mm.input_projection.weight", "multi_modal_projector.mm_input_projection_weight");
    text_gguf = test_tmp_path("gemma3-text.gguf");
    mmproj_gguf = test_tmp_path("gemma3-mmproj.gguf");
    REQUIRE(gguf_writer_write(t, text_gguf) == 0);
    REQUIRE(gguf_writer_write(v, mmproj_gguf) == 0);
    gguf_writer_free(t), gguf_writer_free(v);
}

static const char *load_text_path, *load_vision_path; /* NULL: the HF folder */

static void load(pdl_model **m, pdl_vision **v) {
    vt_load(m, v, load_text_path ? load_text_path : hf_dir, load_vision_path ? load_vision_path : hf_dir, NULL);
}

/* All-row logits of the prompt through pdl_seq_forward in chunks of
 * `chunk` rows (0: one call). */
static float *engine_logits(bool spans) {
    pdl_model *m = NULL;
    pdl_vision *v = NULL;
    load(&m, &v);
    pdl_context *ctx = test_context(m);
    pdl_vision_info info;
    pdl_vision_get_info(v, &info);
    CHECK(strcmp(info.family, "gemma3") == 0 && strcmp(info.tower, "siglip") == 0);
    CHECK(info.bidirectional);
    CHECK_EQ_INT(info.rows_per_image, MM);
    if (!load_text_path) CHECK_EQ_INT(info.image_token_id, IMAGE_TOKEN); /* the GGUF has no vocabulary here */
    pdl_error err = {0};
    pdl_image *img = vt_load_image(ref_dir, "rgb_png.png");
    float *rows = NULL;
    int n_rows = 0;
    REQUIRE_MSG(pdl_vision_encode(v, img, &rows, &n_rows, &err) == 0, "%s", err.message);
    CHECK_EQ_INT(n_rows, MM);
    int32_t ids[N_PROMPT], first[N_PROMPT], last[N_PROMPT];
    prompt_ids(ids);
    const float *embd[N_PROMPT] = {0};
    for (int i = 0; i < MM; i++) embd[IMG_AT + i] = rows + (size_t)i * TH;
    pdl_mm_input in = {.image = img, .position = IMG_AT};
    CHECK(pdl_mm_spans(v, &in, 1, N_PROMPT, first, last));
    CHECK_EQ_INT(first[IMG_AT + 3], IMG_AT);
    CHECK_EQ_INT(last[IMG_AT + 3], IMG_AT + MM - 1);
    CHECK_EQ_INT(first[IMG_AT - 1], IMG_AT - 1); /* <start_of_image> is text */
    CHECK_EQ_INT(last[IMG_AT + MM], IMG_AT + MM);
    pdl_kv_cache *kv = NULL;
    REQUIRE(pdl_kv_cache_create(&kv, m, PDL_KV_F32, 16, 4, &err) == 0);
    float *logits = malloc((size_t)N_PROMPT * VOC * sizeof *logits);
    pdl_seq seq = {0};
    pdl_row_inputs rows_in = {.embd = embd, .span_first = spans ? first : NULL, .span_last = spans ? last : NULL};
    int rc = pdl_seq_forward(ctx, kv, &seq, ids, &rows_in, N_PROMPT, PDL_LOGITS_ALL, logits, &err);
    CHECK_MSG(rc == 0, "%s", err.message);
    pdl_seq_release(kv, &seq);
    /* a span cut by the end of a call is refused, never run half-seen */
    if (spans) {
        pdl_seq s2 = {0};
        CHECK(pdl_seq_forward(ctx, kv, &s2, ids, &rows_in, IMG_AT + 3, PDL_LOGITS_LAST, logits + 0, &err) != 0);
        CHECK_CONTAINS(err.message, "two-way span");
        pdl_seq_release(kv, &s2);
        rc |= pdl_seq_forward(ctx, kv, &s2, ids, &rows_in, N_PROMPT, PDL_LOGITS_ALL, logits, &err);
        pdl_seq_release(kv, &s2);
    }
    pdl_kv_cache_free(kv);
    free(rows);
    pdl_image_free(img);
    pdl_vision_free(v);
    pdl_context_free(ctx);
    pdl_model_free(m);
    if (rc) free(logits), logits = NULL;
    return logits;
}

static void test_gemma3_image_prompt_matches_the_float64_reference(void) {
    need_files();
    float *got = engine_logits(true);
    REQUIRE(got);
    double *want = reference_logits(BUG_NONE);
    double d = vt_max_diff(got, want, (size_t)N_PROMPT * VOC);
    fprintf(stderr, "  Gemma 3 + image: max |engine - float64 reference| = %.3g over %d rows\n", d, N_PROMPT);
    CHECK_MSG(d < TOL, "%.3g", d);
    /* without the spans the image rows are causal: far off from the image on */
    float *causal = engine_logits(false);
    REQUIRE(causal);
    double dc = vt_max_diff(causal, want, (size_t)N_PROMPT * VOC);
    double before = vt_max_diff(causal, want, (size_t)IMG_AT * VOC);
    CHECK_MSG(dc > 100 * TOL, "a causal image moves logits by %.3g only", dc);
    CHECK(before < TOL); /* the rows before the image do not see it either way */
    free(got), free(causal), free(want);
}

/* Each detail the comparison guards moves the reference far outside the
 * tolerance. */
static void test_the_reference_tells_the_mask_and_the_pooling(void) {
    need_files();
    double *good = reference_logits(BUG_NONE);
    static const struct {
        ref_bug bug;
        const char *name;
    } bugs[] = {{BUG_CAUSAL_IMAGE, "image rows causal"},
                {BUG_WINDOW_CLIPS, "window clips the image"},
                {BUG_POOL_SHIFT, "pooling one patch off"}};
    for (size_t i = 0; i < sizeof bugs / sizeof bugs[0]; i++) {
        double *bad = reference_logits(bugs[i].bug);
        double d = 0;
        for (size_t j = 0; j < (size_t)N_PROMPT * VOC; j++) d = fmax(d, fabs(bad[j] - good[j]));
        fprintf(stderr, "  reference with %s: moves logits by %.3g\n", bugs[i].name, d);
        CHECK_MSG(d > 100 * TOL, "%s: %.3g", bugs[i].name, d);
        free(bad);
    }
    free(good);
}

/* ---- through the engine ------------------------------------------------------------- */

enum { GEN = 6 };

typedef struct run_opts {
    bool prefix_caching, sequential, no_encoder_cache;
    int max_prefill_chunk, max_num_batched_tokens;
    size_t encoder_cache_bytes;
} run_opts;

/* Requests with n_text == 0 carry the image prompt with rgb_png.png, -1 the
 * same prompt with big_jpeg.jpg; others n_text text ids. A request the
 * engine refuses must say max_num_batched_tokens. */
static void run_engine(const int *n_text, int n, const run_opts *o, vt_collected *out) {
    pdl_model *m = NULL;
    pdl_vision *v = NULL;
    load(&m, &v);
    pdl_engine_options eo = {.kv_dtype = PDL_KV_F32, .vision = v, .no_prefix_caching = !o->prefix_caching,
                             .max_model_len = 64, .max_prefill_chunk = o->max_prefill_chunk,
                             .max_num_batched_tokens = o->max_num_batched_tokens,
                             .encoder_cache_bytes = o->encoder_cache_bytes, .no_encoder_cache = o->no_encoder_cache};
    int32_t ids[VT_MAX_REQ][64];
    vt_request reqs[VT_MAX_REQ];
    for (int i = 0; i < n; i++) {
        reqs[i] = (vt_request){.ids = ids[i], .n_ids = n_text[i]};
        if (n_text[i] <= 0) {
            prompt_ids(ids[i]);
            reqs[i].n_ids = N_PROMPT;
            reqs[i].image = n_text[i] < 0 ? "big_jpeg.jpg" : "rgb_png.png", reqs[i].position = IMG_AT;
        } else {
            vt_text_ids(ids[i], n_text[i], i, 96);
        }
    }
    vt_run run = {.gen = GEN, .vocab = VOC, .image_dir = ref_dir, .sequential = o->sequential,
                  .may_refuse = "max_num_batched_tokens"};
    vt_run_engine(m, &eo, reqs, n, &run, out);
    pdl_vision_free(v);
    pdl_model_free(m);
}

static double last_row_diff(const float *row, const double *want) {
    double d = 0;
    for (int j = 0; j < VOC; j++) d = fmax(d, fabs(row[j] - want[(size_t)(N_PROMPT - 1) * VOC + j]));
    return d;
}

/* The engine's first sampled row is the reference's last; with prefill
 * chunks of 3 rows the scheduler still computes the image's 16 rows in one
 * step (a chunk ending inside them ends before them; one starting at them
 * runs to their end). */
static void test_the_engine_keeps_an_image_whole_across_chunks(void) {
    need_files();
    double *want = reference_logits(BUG_NONE);
    int text[1] = {0};
    int chunks[3] = {0, 3, 7};
    for (int c = 0; c < 3; c++) {
        run_opts o = {.max_prefill_chunk = chunks[c]};
        vt_collected got;
        run_engine(text, 1, &o, &got);
        REQUIRE(got.n_logits[0] > 0);
        double d = last_row_diff(got.logits[0][0], want);
        fprintf(stderr, "  engine, prefill chunk %d: last row vs reference %.3g\n", chunks[c], d);
        CHECK_MSG(d < TOL, "chunk %d: %.3g", chunks[c], d);
        CHECK_EQ_INT(got.n[0], GEN);
    }
    /* a step too small for the image: refused with a reason */
    run_opts small = {.max_num_batched_tokens = MM - 1};
    vt_collected r;
    run_engine(text, 1, &small, &r);
    CHECK(r.failed[0]);
    free(want);
}

/* Batch invariance with a two-way image: the same tokens and logits bytes
 * alone and beside text-only requests. */
static void test_an_image_prompt_gives_the_same_output_alone_and_in_a_batch(void) {
    need_files();
    int alone[1] = {0}, batch[4] = {5, 0, 19, 2};
    run_opts o = {0};
    vt_collected a, b;
    run_engine(alone, 1, &o, &a);
    run_engine(batch, 4, &o, &b);
    vt_check_same_output(&a, &b, 1, 4, 1);
}

/* A prefix-cache hit ending inside the image (its first block holds rows 5
 * .. 15 of the image's 5 .. 20): the rest of the image is computed with the
 * cached rows, and the output is the same bytes as the first time. */
static void test_a_cache_hit_inside_the_image_gives_the_same_bytes(void) {
    need_files();
    int two[2] = {0, 0};
    run_opts o = {.prefix_caching = true, .sequential = true};
    vt_collected c;
    run_engine(two, 2, &o, &c);
    CHECK_EQ_INT(c.cached[0], 0);
    CHECK_EQ_INT(c.cached[1], 16);
    CHECK(c.n_logits[0] > 0 && c.n_logits[1] > 0 && memcmp(c.logits[0][0], c.logits[1][0], sizeof(float) * VOC) == 0);
    CHECK(memcmp(c.tokens[0], c.tokens[1], sizeof c.tokens[0]) == 0);
}

/* The encoder cache: the same image again is found (its tower run saved)
 * and gives the same bytes as encoding it; with room for one image only,
 * a second image evicts the first, which is then encoded again; with the
 * cache off every image is encoded. */
static void test_the_encoder_cache_hits_misses_and_evicts(void) {
    need_files();
    int same[2] = {0, 0}, abab[3] = {0, -1, 0};
    run_opts o = {.sequential = true};
    vt_collected c, d;
    run_engine(same, 2, &o, &c);
    CHECK_EQ_INT(c.stats.encoder_cache_queries, 2);
    CHECK_EQ_INT(c.stats.encoder_cache_hits, 1);
    CHECK_EQ_INT(c.stats.images_encoded, 1); /* the tower ran once */
    CHECK_EQ_INT(c.stats.encoder_cache_bytes, (size_t)MM * TH * sizeof(float));
    CHECK(c.n_logits[0] > 0 && c.n_logits[1] > 0 && memcmp(c.logits[0][0], c.logits[1][0], sizeof(float) * VOC) == 0);
    run_opts off = {.sequential = true, .no_encoder_cache = true};
    run_engine(same, 2, &off, &d);
    CHECK_EQ_INT(d.stats.encoder_cache_hits, 0);
    CHECK_EQ_INT(d.stats.images_encoded, 2);
    CHECK_EQ_INT(d.stats.encoder_cache_bytes, 0);
    CHECK(memcmp(c.logits[1][0], d.logits[1][0], sizeof(float) * VOC) == 0);
    /* room for one image's rows (and a byte): png, jpeg (evicts png), png (a miss, evicts jpeg) */
    run_opts one = {.sequential = true, .encoder_cache_bytes = (size_t)MM * TH * sizeof(float) + 1};
    run_engine(abab, 3, &one, &c);
    CHECK_EQ_INT(c.stats.encoder_cache_queries, 3);
    CHECK_EQ_INT(c.stats.encoder_cache_hits, 0);
    CHECK_EQ_INT(c.stats.encoder_cache_evictions, 2);
    CHECK_EQ_INT(c.stats.images_encoded, 3);
    CHECK(memcmp(c.logits[0][0], c.logits[2][0], sizeof(float) * VOC) == 0);
    CHECK(memcmp(c.logits[0][0], c.logits[1][0], sizeof(float) * VOC) != 0);
    /* room for both: the third is a hit */
    run_opts two = {.sequential = true, .encoder_cache_bytes = (size_t)2 * MM * TH * sizeof(float)};
    run_engine(abab, 3, &two, &c);
    CHECK_EQ_INT(c.stats.encoder_cache_hits, 1);
    CHECK_EQ_INT(c.stats.encoder_cache_evictions, 0);
    CHECK_EQ_INT(c.stats.images_encoded, 2);
}

/* The same model as llama.cpp's pair (text GGUF with Gemma's norms as
 * 1 + w, mmproj with projector type gemma3 and scale factor 2). */
static void test_gemma3_gguf_and_mmproj_match_the_float64_reference(void) {
    write_ggufs();
    load_text_path = text_gguf, load_vision_path = mmproj_gguf;
    float *got = engine_logits(true);
    load_text_path = load_vision_path = NULL;
    REQUIRE(got);
    double *want = reference_logits(BUG_NONE);
    double d = vt_max_diff(got, want, (size_t)N_PROMPT * VOC);
    fprintf(stderr, "  Gemma 3 GGUF + mmproj: max |engine - float64 reference| = %.3g\n", d);
    CHECK_MSG(d < TOL, "%.3g", d);
    free(got), free(want);
}

/* A processor asking for pan and scan (not implemented) is refused by name. */
static void test_pan_and_scan_is_refused(void) {
    need_files();
    char *dir = test_make_dir("gemma3-pan");
    const char *files[] = {"config.json", "model.safetensors"};
    for (int i = 0; i < 2; i++) {
        char *from = test_join(hf_dir, files[i]), *to = test_join(dir, files[i]);
        size_t n = 0;
        char *d = test_slurp(from, &n);
        test_write_file(to, d, n);
        free(d), free(from), free(to);
    }
    char pre[1024];
    snprintf(pre, sizeof pre, "%s", PREPROCESSOR);
    char *at = strstr(pre, "\"do_pan_and_scan\": null");
    REQUIRE(at);
    memcpy(at + strlen("\"do_pan_and_scan\": "), "true}", 6);
    char *p = test_join(dir, "preprocessor_config.json");
    test_write_file(p, pre, strlen(pre));
    free(p);
    pdl_model *m = NULL;
    pdl_vision *v = NULL;
    pdl_error err = {0};
    pdl_model_options mo = {.n_threads = 2};
    REQUIRE_MSG(pdl_model_load(&m, dir, &mo, &err) == 0, "%s", err.message);
    CHECK(pdl_vision_load(&v, dir, m, &err) != 0);
    CHECK_CONTAINS(err.message, "do_pan_and_scan");
    CHECK_CONTAINS(err.message, "preprocessor_config.json");
    pdl_vision_free(v);
    pdl_model_free(m);
    free(dir);
}

int main(void) {
    RUN(test_gemma3_image_prompt_matches_the_float64_reference);
    RUN(test_the_reference_tells_the_mask_and_the_pooling);
    RUN(test_gemma3_gguf_and_mmproj_match_the_float64_reference);
    RUN(test_the_engine_keeps_an_image_whole_across_chunks);
    RUN(test_an_image_prompt_gives_the_same_output_alone_and_in_a_batch);
    RUN(test_a_cache_hit_inside_the_image_gives_the_same_bytes);
    RUN(test_the_encoder_cache_hits_misses_and_evicts);
    RUN(test_pan_and_scan_is_refused);
    vt_free_weights();
    free(ref_dir), free(hf_dir), free(text_gguf), free(mmproj_gguf);
    return test_summary();
}
