/*
 * vision_test.h - what the vision model tests (test_vision_llava.c,
 * test_vision_gemma3.c, test_vision_qwen25vl.c) share: the seeded random
 * weights of their tiny models and the registry that holds them by
 * Hugging Face name, the float64 building blocks of their references, the
 * reference pixels, loading a text + vision pair, and running requests
 * through the engine while collecting each one's tokens and sampled rows.
 * What differs per model (its weights' names and shapes, its forward, its
 * prompt layout, its GGUF form) stays in the test.
 */
#ifndef PDL_TEST_VISION_TEST_H
#define PDL_TEST_VISION_TEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf_writer.h"
#include "pagedlm.h"
#include "st_writer.h"

/* ---- random weights ---------------------------------------------------------------- */

/* Restarts the generator (an LCG; each test fixes its seed, so its model
 * is the same every run). */
void vt_seed(uint64_t seed);
/* Uniform in [-0.5, 0.5), 24 bits. */
float vt_frand(void);

/* One tensor of the test's model: Hugging Face name, shape (row-major,
 * outermost first), F32 data. */
typedef struct vt_tensor {
    char name[160];
    int n_dims;
    int64_t shape[4];
    float *data;
} vt_tensor;

/* How vt_add fills a tensor: uniform [-0.5, 0.5) * scale, around one (1 +
 * 0.2 u: norm weights), or small (0.2 u: biases, Gemma's 1 + w norms). */
typedef enum vt_init { VT_UNIFORM, VT_NEAR_ONE, VT_SMALL } vt_init;

/* Adds a tensor of n_dims dimensions (sizes d0, d1, ...), filled from vt_frand in
 * order; returns its index (the registry holds at most 256). */
int vt_add(const char *name, int n_dims, int64_t d0, int64_t d1, int64_t d2, int64_t d3, vt_init init, double scale);
int vt_count(void);
vt_tensor *vt_at(int i);
/* The tensor of that name, or NULL. */
vt_tensor *vt_find(const char *name);
/* Its data; aborts naming it when there is none (a typo in a reference). */
float *vt_w(const char *name);
void vt_free_weights(void);

/* Every tensor, as it is, into a safetensors file. */
void vt_put_all_st(stw_writer *w);
/* Tensor hf under the GGUF name gg; REQUIREs that it exists. */
void vt_put_gguf(gguf_writer *g, const char *gg, const char *hf);

/* ---- float64 reference blocks ----------------------------------------------------- */

/* x (n) <- (x - mean) / sqrt(var + eps) * w + b, in place. */
void vt_layernorm(double *x, int n, const float *w, const float *b, double eps);
/* o (n) = x / sqrt(mean(x^2) + eps) * w; o may be x. */
void vt_rmsnorm(double *o, const double *x, const float *w, int n, double eps);
/* The same times (1 + w): Gemma's RMSNorm. */
void vt_rmsnorm_plus_one(double *o, const double *x, const float *w, int n, double eps);
/* y (rows) = W (rows, cols) x + b (b may be NULL). */
void vt_linear(double *y, const float *w, const float *b, const double *x, int rows, int cols);
/* GELU with erf (PyTorch's exact gelu). */
double vt_gelu_erf(double x);
/* x * sigmoid(x). */
double vt_silu(double x);
/* One pre-norm ViT encoder layer as CLIP and SigLIP write it, on x (n,
 * hidden) in place: x += out_proj(attention(LayerNorm1(x))) over all n rows
 * (heads of hidden / heads, biased q/k/v/out projections), then x +=
 * fc2(act(fc1(LayerNorm2(x)))); the weights are prefix.layer_norm1.weight
 * and so on (transformers' names under one encoder layer). */
void vt_vit_layer(double *x, int n, int hidden, int heads, int ffn, const char *prefix, double eps,
                  double (*act)(double));
/* max |a - b| over n; a NaN in either counts as infinitely far. */
double vt_max_diff(const float *a, const double *b, size_t n);
double vt_max_diff_d(const double *a, const double *b, size_t n);

/* ---- reference pixels and the engine's inputs -------------------------------------- */

/* A fresh folder with scripts/vision-reference-pixels' output (PIL and
 * numpy's preprocessing of the test images, the images themselves);
 * malloc'ed; REQUIREs the script to succeed. */
char *vt_reference_dir(void);
/* dir/name, which must hold exactly bytes of float32, into out. */
void vt_read_f32(const char *dir, const char *name, float *out, size_t bytes);
/* stories260K's tokenizer.json and tokenizer_config.json (the Hugging Face
 * form, from the test data) into dir, with the special tokens added[0, n)
 * added as ids first_id, first_id + 1, ... */
void vt_write_tokenizer(const char *dir, int first_id, const char *const *added, int n);
/* dir/name decoded; REQUIREs success. */
pdl_image *vt_load_image(const char *dir, const char *name);
/* The text model at text_path and the vision model at vision_path (a
 * folder or GGUF each); REQUIREs both. mo NULL: two threads. */
void vt_load(pdl_model **m, pdl_vision **v, const char *text_path, const char *vision_path,
             const pdl_model_options *mo);

/* ---- requests through the engine ---------------------------------------------------- */

/* A text-only prompt of n ids below modulus, different for each salt. */
void vt_text_ids(int32_t *ids, int n, int salt, int modulus);

enum { VT_MAX_REQ = 8, VT_MAX_GEN = 8, VT_MAX_VOCAB = 520 };

/* What each request (r = its id - 1) gave: its greedy tokens, the logits
 * of its sampled rows in order (the first: the prompt's last row), how
 * many prompt tokens came from the prefix cache, whether the engine
 * refused it; and the engine's statistics at the end. */
typedef struct vt_collected {
    int gen, vocab; /* tokens per request; the rows' length */
    int32_t tokens[VT_MAX_REQ][VT_MAX_GEN];
    int n[VT_MAX_REQ];
    float logits[VT_MAX_REQ][VT_MAX_GEN][VT_MAX_VOCAB]; /* [r][k][0, vocab): sampled row k */
    int n_logits[VT_MAX_REQ];
    int cached[VT_MAX_REQ];
    bool failed[VT_MAX_REQ];
    pdl_engine_stats stats;
} vt_collected;

/* One request: prompt ids, and an image (a file of the run's image_dir,
 * NULL: text only) whose rows start at position. */
typedef struct vt_request {
    const int32_t *ids;
    int n_ids;
    const char *image;
    int position;
} vt_request;

typedef struct vt_run {
    int gen, vocab;         /* greedy tokens per request (ignore_eos); the model's vocabulary */
    const char *image_dir;  /* where the requests' images are */
    bool sequential;        /* each request run to its end before the next is added */
    const char *may_refuse; /* non-NULL: a refused request is marked failed, its error naming this */
} vt_run;

/* Runs the requests through one engine made with eo (its logits hook set
 * here) over m: all added before the first step, or one after another.
 * Each image is decoded for its request and freed once added (the engine
 * keeps the rows, not the image). */
void vt_run_engine(pdl_model *m, const pdl_engine_options *eo, const vt_request *reqs, int n, const vt_run *run,
                   vt_collected *out);

/* Batch invariance: request 0 of alone and request r of batch (n_batch
 * requests, each to give gen tokens) gave the same tokens and the same
 * bytes in their first `rows` sampled rows. */
void vt_check_same_output(const vt_collected *alone, const vt_collected *batch, int r, int n_batch, int rows);

#endif
