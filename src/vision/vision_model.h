/*
 * vision_model.h - the vision half of a vision-language model as the
 * loaders fill it and the encoder reads it: the tower's hyperparameters and
 * weights (CLIP ViT for LLaVA, SigLIP for Gemma 3), the projector into the
 * text model's embedding space, the image processor's settings, and how an
 * image's rows sit in the prompt.
 *
 * Families differ here by data (pdl_vision_config), not by copied code:
 * the encoder (vision_encoder.c) and the projectors (projector.c) read only
 * this struct. Matrices are (out, in) views into the mapped files, as for
 * the text model; vectors are F32 (copied at load when stored otherwise).
 */
#ifndef PDL_VISION_VISION_MODEL_H
#define PDL_VISION_VISION_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "format/gguf.h"
#include "format/safetensors.h"
#include "format/tensor.h"
#include "kernels/matmul_table.h"
#include "kernels/scratch.h"
#include "kernels/threadpool.h"
#include "pagedlm.h"
#include "vision/image_preprocess.h"

struct json_t;

typedef enum pdl_vision_family {
    PDL_VLM_LLAVA = 0,   /* LLaVA 1.5: CLIP ViT, class token, 2-layer MLP projector */
    PDL_VLM_LLAVA_NEXT,  /* LLaVA 1.6: LLaVA 1.5's tower and projector over any-resolution tiles */
    PDL_VLM_GEMMA3,      /* Gemma 3: SigLIP, average pool to mm_tokens, soft-embedding norm, projection */
    PDL_VLM_QWEN25VL,    /* Qwen2.5-VL: dynamic-resolution ViT with 2-D RoPE and window attention, the
                          * patch merger; rows per image follow its size (qwen_vision.c) */
} pdl_vision_family;

typedef enum pdl_vision_act {
    PDL_VACT_QUICK_GELU = 0, /* x sigmoid(1.702 x): CLIP (hidden_act quick_gelu) */
    PDL_VACT_GELU_TANH,      /* GELU, tanh approximation: SigLIP (gelu_pytorch_tanh) */
    PDL_VACT_GELU_ERF,       /* GELU, exact: LLaVA's projector (projector_hidden_act gelu) */
    PDL_VACT_SILU,           /* SwiGLU's gate: Qwen2.5-VL's tower */
} pdl_vision_act;

typedef struct pdl_vision_config {
    pdl_vision_family family;
    int image_size;        /* tile side in pixels (336, 896) */
    int patch_size;        /* 14 */
    int channels;          /* 3 */
    int hidden;            /* 1024 (CLIP-L), 1152 (SigLIP So400m) */
    int n_layers;          /* layers in the file */
    int n_layers_run;      /* layers run: the feature layer (LLaVA's vision_feature_layer -2: n_layers - 1) */
    int n_heads;
    int ffn;
    float ln_eps;
    pdl_vision_act act;    /* the tower's MLP activation */
    bool class_token;      /* CLIP: a class embedding first, position 0; dropped after the feature layer */
    bool pre_ln;           /* CLIP's pre_layrnorm on the embeddings */
    bool post_ln;          /* SigLIP's post_layernorm on the last layer's output (Gemma 3 uses it) */
    bool patch_bias;       /* the patch convolution has a bias (SigLIP) */
    /* projector */
    int text_hidden;       /* the text model's embedding width */
    int proj_hidden;       /* LLaVA: linear_1's width (= text_hidden as published) */
    pdl_vision_act proj_act;
    int mm_tokens;         /* Gemma 3: rows per image after pooling (256); LLaVA: patches */
    float mm_norm_eps;     /* Gemma 3: the soft-embedding RMSNorm's epsilon */
    /* prompt layout */
    int32_t image_token_id;   /* the placeholder id of image rows (LLaVA <image>, Gemma 3 <image_soft_token>); -1 none */
    int32_t boi_id, eoi_id;   /* Gemma 3: <start_of_image>, <end_of_image>; -1 none */
    char placeholder[64];     /* what a chat template writes per image ("<image>", "<start_of_image>") */
    char image_token_text[64];/* the placeholder token's text ("<image>", "<image_soft_token>") */
    bool bidirectional;       /* Gemma 3: an image's rows attend to each other both ways in the text model */
    pdl_image_proc proc;
    /* Qwen2.5-VL (proc.patch, proc.merge, proc.temporal give the patch
     * layout): window attention over window_cells x window_cells merged
     * cells except in the layers whose bit is set in full_attn */
    int window_cells;         /* window_size / merge / patch (112 / 2 / 14 = 4) */
    uint64_t full_attn[2];    /* fullatt_block_indexes as bits (layers < 128) */
    float rope_theta;         /* the tower's 2-D RoPE base (10000) */
} pdl_vision_config;

typedef struct pdl_vision_layer {
    pdl_tensor ln1_w, ln1_b;      /* (hidden) */
    pdl_tensor wq, wk, wv, wo;    /* (hidden, hidden) */
    pdl_tensor bq, bk, bv, bo;    /* (hidden) */
    pdl_tensor ln2_w, ln2_b;      /* (hidden) */
    pdl_tensor fc1_w, fc1_b;      /* (ffn, hidden), (ffn) */
    pdl_tensor fc2_w, fc2_b;      /* (hidden, ffn), (hidden) */
    pdl_tensor up_w, up_b;        /* Qwen2.5-VL's SwiGLU: fc1 the gate, up, fc2 down (RMSNorms: ln1_w, ln2_w) */
} pdl_vision_layer;

typedef struct pdl_vision_weights {
    pdl_tensor patch_w;           /* (hidden, channels * patch * patch): the convolution, flattened (c, y, x) */
    pdl_tensor patch_b;           /* (hidden): patch_bias */
    pdl_tensor class_embd;        /* (hidden): class_token */
    pdl_tensor pos_embd;          /* (n_positions, hidden): class token (if any) first, patches row-major */
    pdl_tensor pre_ln_w, pre_ln_b;
    pdl_tensor post_ln_w, post_ln_b;
    pdl_vision_layer *layers;     /* [n_layers_run] */
    /* LLaVA */
    pdl_tensor mm1_w, mm1_b;      /* (proj_hidden, hidden), (proj_hidden) */
    pdl_tensor mm2_w, mm2_b;      /* (text_hidden, proj_hidden), (text_hidden) */
    pdl_tensor image_newline;     /* (text_hidden): LLaVA 1.6's row end */
    /* Gemma 3 */
    pdl_tensor mm_norm_w;         /* (hidden): soft_emb_norm as applied (1 + w folded in) */
    pdl_tensor mm_proj_w;         /* (text_hidden, hidden): the projection as (out, in), transposed at load */
    /* Qwen2.5-VL's merger: ln_q (RMSNorm over hidden) in mm_norm_w, then mm1 (4 hidden, 4 hidden) and mm2
     * (text_hidden, 4 hidden) with biases, GELU between */
    pdl_tensor qkv_w, qkv_b;      /* per layer views come from these at load (unused after) */
} pdl_vision_weights;

/* Scratch of the encoder, grown on demand. */
typedef struct pdl_vision_scratch {
    size_t rows_cap;
    float *patches;   /* (rows, channels * patch * patch) */
    float *x;         /* (rows, hidden) residual stream */
    float *xn;        /* (rows, hidden) */
    float *q, *k, *v; /* (rows, hidden) */
    float *attn;      /* (rows, hidden) */
    float *ff;        /* (rows, ffn) */
    void *kv_k, *kv_v;/* F32 K/V of one image in the attention kernel's block layout */
    int32_t *blocks;  /* [rows / 16 + 1] the identity block table */
    float *scores;    /* (threads, span) */
    size_t scores_cap;
    pdl_scratch kernel; /* the matmuls' (scratch.h), reserved for rows_cap rows */
    pdl_scratch image;  /* the image processor's working memory (image_preprocess.h), released after each
                         * image: it grows with the image (Qwen2.5-VL's up to max_pixels x 15 bytes) */
} pdl_vision_scratch;

struct pdl_vision {
    pdl_vision_config cfg;
    pdl_vision_weights w;
    char source[16];        /* "safetensors" or "gguf" */
    gguf_file *gguf;        /* exactly one backing file set */
    st_model *st;
    pdl_threadpool *pool;   /* its own workers (owned), as many as the text model's default: the
                             * vision model and the text model's contexts share nothing they write */
    pdl_kernels kernels;    /* the matmul kernels, of the family in effect when it was loaded */
    pdl_vision_scratch scratch;
    void **owned;           /* buffers the loader allocated (F32 vectors, transposed projection) */
    size_t n_owned;
};

/* Loaders: fill cfg and w; text is the text model (its hidden size and
 * tokenizer). vis_finish checks shapes and makes vectors F32. */
int vis_load_hf(pdl_vision *v, const char *dir, const pdl_model *text, pdl_error *err);
int vis_load_gguf(pdl_vision *v, const char *path, const pdl_model *text, pdl_error *err);
int vis_finish(pdl_vision *v, pdl_error *err);
/* Keeps p to free with the model; -1 when out of memory (p freed). */
int vis_own(pdl_vision *v, void *p);
/* The loaders' shared readers (vision_load.c): the tensor named by fmt
 * (model_take_tensor's rules, `where` the file or folder in its
 * messages); a u32 key of an mmproj GGUF (required: missing is an error;
 * else absent keeps *out; over 2^30 is refused); a token's id by its text
 * in the text model's vocabulary, or -1; and id's text there into out (n
 * bytes), or "" when the vocabulary lacks it or it does not fit. */
int vis_take(const pdl_tensor_set *ts, const char *where, bool required, pdl_tensor *dst, pdl_error *err,
             const char *fmt, ...) __attribute__((format(printf, 6, 7)));
/* The weights table (vision_load_tensors.c). take_all allocates the
 * n_layers_run layers and takes every tensor of the family from ts under
 * its GGUF name (gguf) or its Hugging Face name after hf_prefix ("" or
 * "model."); a tensor the config needs is required (a message naming it and
 * `where`), one it does not is taken when present. qkv_apart: Qwen2.5-VL's
 * q, k and v as three tensors (llama.cpp's converter) instead of one.
 * check_all checks the shape of every tensor the table gives one for and
 * makes it F32 (vectors) or aligned (matrices), as vis_vector and
 * vis_matrix; the rest (patch and position embeddings, Gemma 3's
 * projection) vis_finish checks itself. */
int vis_take_all(pdl_vision *v, const pdl_tensor_set *ts, bool gguf, const char *hf_prefix, bool qkv_apart,
                 const char *where, pdl_error *err);
int vis_check_all(pdl_vision *v, bool qkv_apart, pdl_error *err);
/* Shape checks naming `what` (a role, or "vision layer N") in their
 * message: a vector of n made F32 (an owned copy when stored otherwise);
 * a (rows, cols) matrix of a type the encoder's matmuls take, aligned. */
int vis_vector(pdl_vision *v, pdl_tensor *t, int64_t n, const char *what, pdl_error *err);
int vis_matrix(pdl_vision *v, pdl_tensor *t, int64_t rows, int64_t cols, const char *what, pdl_error *err);
int vis_gguf_u32(const gguf_file *g, bool required, const char *key, int *out, pdl_error *err);
int32_t vis_token_id(const pdl_model *text, const char *s);
void vis_token_text(const pdl_model *text, int32_t id, char *out, size_t n);

/* Patches per tile side (image_size / patch_size). */
static inline int vis_side(const pdl_vision_config *c) { return c->image_size / c->patch_size; }

/* The tower over one preprocessed tile (3, image_size, image_size): the
 * feature rows it hands the projector, (n_out, hidden), class token
 * dropped; n_out = side^2. out is caller-sized. */
int vis_tower(pdl_vision *v, const float *pixels, float *out, pdl_error *err);

/* Qwen2.5-VL (qwen_vision.c): the loader of its vision half, its checks,
 * and an image through processor, tower and merger: *rows (n_rows,
 * text_hidden) in the merged grid's row-major order; *grid_h, *grid_w the
 * merged grid. */
int vis_load_qwen_hf(pdl_vision *v, struct json_t *cfg, const char *path, const char *dir, const pdl_model *text,
                     pdl_error *err);
int vis_finish_qwen(pdl_vision *v, pdl_error *err);
/* From llama.cpp's mmproj (projector type qwen2.5vl_merger), v->gguf open. */
int vis_load_qwen_gguf(pdl_vision *v, const char *path, const pdl_model *text, pdl_error *err);
int vis_qwen_encode(pdl_vision *v, const pdl_image *img, float **rows, int *n_rows, pdl_error *err);
/* The merged grid an image gets (rows = grid_h * grid_w), or -1 (an image
 * smart_resize refuses). */
int vis_qwen_grid(const pdl_vision *v, const pdl_image *img, int *grid_h, int *grid_w);

/* The projector over n rows of tower features (n, hidden) -> rows of the
 * text model (n_out, text_hidden): LLaVA n_out = n, Gemma 3 mm_tokens. */
int vis_project(pdl_vision *v, const float *features, int n, float *out, int *n_out, pdl_error *err);

#endif
