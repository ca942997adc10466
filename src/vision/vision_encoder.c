/*
 * vision_encoder.c - the vision tower over one preprocessed tile: CLIP ViT
 * (LLaVA) and SigLIP (Gemma 3), on the text model's kernels.
 *
 * Shapes for CLIP ViT-L/14-336: pixels (3, 336, 336) -> 576 patches of
 * 3 * 14 * 14 = 588 values -> the patch convolution as one matmul (576,
 * 1024) -> rows = [class token, patches] (577, 1024) + position embeddings
 * -> pre-LayerNorm -> n_layers_run encoder layers -> rows 1.. (the class
 * token dropped: LLaVA's feature select "default"). SigLIP: no class token,
 * a bias on the convolution, post-LayerNorm after the last layer.
 *
 * An encoder layer (pre-norm, as published for both):
 *   x += Wo attn(Wq LN1(x) + bq, Wk LN1(x) + bk, Wv LN1(x) + bv) + bo
 *   x += W2 act(W1 LN2(x) + b1) + b2
 * Attention is over all rows of the tile both ways (no mask): every row's
 * K and V go into a small F32 cache in the attention kernel's block
 * layout, and every query is asked at the last position, so the kernel's
 * causal bound covers all of them. Each row's result depends only on the
 * tile, never on the thread count.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/attention.h"
#include "kernels/cpu_ops.h"
#include "kernels/matmul.h"
#include "util/error.h"
#include "vision/vision_model.h"

#define KV_BLOCK 16

static int grow(void **buf, size_t bytes) {
    size_t cap = 0;
    return scratch_grow(buf, &cap, bytes) ? 0 : -1;
}

/* The kernels' scratch the tower's matmuls take for `rows` rows. */
static size_t matmul_scratch(const pdl_vision *v, size_t rows) {
    size_t most = matmul_scratch_bytes(&v->kernels, v->pool, &v->w.patch_w, (int64_t)rows);
    for (int l = 0; l < v->cfg.n_layers_run; l++) {
        const pdl_vision_layer *L = &v->w.layers[l];
        const pdl_tensor *ws[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->fc1_w, &L->fc2_w};
        for (size_t i = 0; i < sizeof ws / sizeof *ws; i++) {
            size_t b = matmul_scratch_bytes(&v->kernels, v->pool, ws[i], (int64_t)rows);
            most = b > most ? b : most;
        }
    }
    return most;
}

static int kernel_failed(pdl_vision *v, int layer, const char *what, pdl_error *err) {
    return err_fail(err, "vision encoder: layer %d: %s: out of memory for %zu bytes of kernel scratch", layer, what,
                    v->scratch.kernel.failed);
}

static int scratch_reserve(pdl_vision *v, int rows, pdl_error *err) {
    pdl_vision_scratch *s = &v->scratch;
    const pdl_vision_config *c = &v->cfg;
    if ((size_t)rows <= s->rows_cap) return 0;
    size_t r = (size_t)rows, h = (size_t)c->hidden, pp = (size_t)c->channels * c->patch_size * c->patch_size;
    size_t blocks = (r + KV_BLOCK - 1) / KV_BLOCK;
    int threads = threadpool_size(v->pool);
    size_t ff = (size_t)c->ffn > h ? (size_t)c->ffn : h;
    s->scores_cap = attn_queries_scratch(16, rows, c->hidden / c->n_heads);
    if (grow((void **)&s->patches, r * pp * 4) || grow((void **)&s->x, r * h * 4) || grow((void **)&s->xn, r * h * 4) ||
        grow((void **)&s->q, r * h * 4) || grow((void **)&s->k, r * h * 4) || grow((void **)&s->v, r * h * 4) ||
        grow((void **)&s->attn, r * h * 4) || grow((void **)&s->ff, r * ff * 4) ||
        grow(&s->kv_k, blocks * KV_BLOCK * h * 4) || grow(&s->kv_v, blocks * KV_BLOCK * h * 4) ||
        grow((void **)&s->blocks, blocks * sizeof *s->blocks) ||
        grow((void **)&s->scores, (size_t)threads * s->scores_cap * 4) ||
        scratch_reserve_bytes(&s->kernel, matmul_scratch(v, r)))
        return err_fail(err, "vision encoder: out of memory for %d rows", rows);
    for (size_t b = 0; b < blocks; b++) s->blocks[b] = (int32_t)b;
    s->rows_cap = r;
    return 0;
}

/* ---- per-row stages ------------------------------------------------------------- */

typedef struct vtask {
    pdl_vision *v;
    const float *pixels;
    int rows;           /* rows of the tile (class token included) */
    const pdl_tensor *w, *b; /* a LayerNorm's weight and bias */
    const float *src;
    float *dst;
    int width;          /* floats per row of src / dst */
    pdl_vision_act act;
} vtask;

/* Patch p = (py, px) of the tile as (c, y, x) values, the convolution
 * weight's order. */
static void gather_patches(void *p, int ith, int nth) {
    vtask *t = p;
    const pdl_vision_config *c = &t->v->cfg;
    int side = vis_side(c), P = c->patch_size, S = c->image_size;
    long n = (long)side * side, r0, r1;
    threadpool_split_range(n, ith, nth, &r0, &r1);
    for (long i = r0; i < r1; i++) {
        int py = (int)(i / side), px = (int)(i % side);
        float *out = t->v->scratch.patches + (size_t)i * c->channels * P * P;
        for (int ch = 0; ch < c->channels; ch++)
            for (int y = 0; y < P; y++)
                memcpy(out + ((size_t)ch * P + y) * P, t->pixels + ((size_t)ch * S + py * P + y) * S + px * P,
                       (size_t)P * sizeof *out);
    }
}

static void layernorm_rows(void *p, int ith, int nth) {
    vtask *t = p;
    int n = t->v->cfg.hidden;
    long r0, r1;
    threadpool_split_range(t->rows, ith, nth, &r0, &r1);
    const float *w = t->w->data, *b = t->b->data;
    for (long r = r0; r < r1; r++) {
        float *o = t->dst + (size_t)r * n;
        ops_layernorm(o, t->src + (size_t)r * n, w, n, t->v->cfg.ln_eps);
        for (int i = 0; i < n; i++) o[i] += b[i];
    }
}

/* In place over dst (rows, width). GELU-tanh and quick GELU run on the
 * text model's vectorised gates: gelu_tanh(x) = gelu_tanh(x) * 1, and
 * quick_gelu(x) = x sigmoid(1.702 x) = silu(1.702 x) / 1.702. */
static void activation_rows(void *p, int ith, int nth) {
    vtask *t = p;
    long r0, r1;
    threadpool_split_range(t->rows, ith, nth, &r0, &r1);
    enum { CHUNK = 512 };
    float cst[CHUNK];
    if (t->act == PDL_VACT_GELU_TANH)
        for (int i = 0; i < CHUNK; i++) cst[i] = 1.0f;
    else if (t->act == PDL_VACT_QUICK_GELU)
        for (int i = 0; i < CHUNK; i++) cst[i] = 1.0f / 1.702f;
    for (long r = r0; r < r1; r++) {
        float *x = t->dst + (size_t)r * t->width;
        if (t->act == PDL_VACT_GELU_ERF) {
            for (int i = 0; i < t->width; i++) x[i] = 0.5f * x[i] * (1.0f + erff(x[i] * 0.70710678118654752f));
            continue;
        }
        for (int i0 = 0; i0 < t->width; i0 += CHUNK) {
            int n = t->width - i0 < CHUNK ? t->width - i0 : CHUNK;
            if (t->act == PDL_VACT_GELU_TANH) {
                ops_gelu_tanh_mul(x + i0, cst, n);
            } else {
                for (int i = 0; i < n; i++) x[i0 + i] *= 1.702f;
                ops_silu_mul(x + i0, cst, n);
            }
        }
    }
}

void pdl_vision_activation(pdl_vision *v, float *x, int rows, int width, pdl_vision_act act) {
    vtask t = {.v = v, .rows = rows, .dst = x, .width = width, .act = act};
    threadpool_run_n(v->pool, threadpool_threads_for(v->pool, (double)rows * width, 16384.0), activation_rows, &t);
}

static void store_kv_rows(void *p, int ith, int nth) {
    vtask *t = p;
    pdl_vision_scratch *s = &t->v->scratch;
    int h = t->v->cfg.hidden, hd = h / t->v->cfg.n_heads;
    long r0, r1;
    threadpool_split_range(t->rows, ith, nth, &r0, &r1);
    for (long r = r0; r < r1; r++)
        attn_store(s->kv_k, s->kv_v, 0, h, hd, KV_BLOCK, r, s->k + (size_t)r * h, s->v + (size_t)r * h);
}

/* Tasks are (block of up to 16 rows, head), dealt round-robin. */
static void attention_rows(void *p, int ith, int nth) {
    vtask *t = p;
    pdl_vision_scratch *s = &t->v->scratch;
    const pdl_vision_config *c = &t->v->cfg;
    int hd = c->hidden / c->n_heads, n = t->rows;
    pdl_attn_kv akv = {.k = s->kv_k, .v = s->kv_v, .kv_is_f16 = 0, .kv_dim = c->hidden,
                       .block_table = s->blocks, .block_size = KV_BLOCK};
    float scale = 1.0f / sqrtf((float)hd);
    float *scratch = s->scores + (size_t)ith * s->scores_cap;
    float *outs[16];
    const float *qs[16];
    int poss[16];
    long task = 0;
    for (int rb = 0; rb < n; rb += 16)
        for (int h = 0; h < c->n_heads; h++, task++) {
            if (task % nth != ith) continue;
            int nq = 0;
            for (int r = rb; r < n && r < rb + 16; r++, nq++) {
                outs[nq] = s->attn + (size_t)r * c->hidden + (size_t)h * hd;
                qs[nq] = s->q + (size_t)r * c->hidden + (size_t)h * hd;
                poss[nq] = n - 1; /* every key: no mask */
            }
            attn_queries(outs, qs, poss, nq, hd, h, scale, 0.0f, NULL, 0, &akv, scratch);
        }
}

static const float *bias_of(const pdl_tensor *t) { return t->data ? t->data : NULL; }

static void layernorm(pdl_vision *v, const pdl_tensor *w, const pdl_tensor *b, const float *src, float *dst, int rows) {
    vtask t = {.v = v, .rows = rows, .w = w, .b = b, .src = src, .dst = dst};
    threadpool_run_n(v->pool, threadpool_threads_for(v->pool, (double)rows * v->cfg.hidden, 16384.0), layernorm_rows, &t);
}

/* ---- the tower ---------------------------------------------------------------- */

int vis_tower(pdl_vision *v, const float *pixels, float *out, pdl_error *err) {
    const pdl_vision_config *c = &v->cfg;
    const pdl_vision_weights *w = &v->w;
    int side = vis_side(c), n_patches = side * side, cls = c->class_token ? 1 : 0;
    int rows = n_patches + cls, h = c->hidden;
    if (scratch_reserve(v, rows, err)) return -1;
    pdl_vision_scratch *s = &v->scratch;
    pdl_threadpool *pool = v->pool;
    int row_threads = threadpool_threads_for(pool, (double)rows * h, 16384.0);

    /* embeddings: [class, patches] + positions */
    vtask t = {.v = v, .pixels = pixels, .rows = rows};
    threadpool_run_n(pool, row_threads, gather_patches, &t);
    if (matmul_run(&v->kernels, pool, &s->kernel, s->x + (size_t)cls * h, h, s->patches, n_patches, &w->patch_w,
                   bias_of(&w->patch_b), false))
        return kernel_failed(v, -1, "patch embedding", err);
    if (cls) memcpy(s->x, w->class_embd.data, (size_t)h * sizeof *s->x);
    const float *pos = w->pos_embd.data;
    for (size_t i = 0; i < (size_t)rows * h; i++) s->x[i] += pos[i];
    if (c->pre_ln) layernorm(v, &w->pre_ln_w, &w->pre_ln_b, s->x, s->x, rows);

    for (int l = 0; l < c->n_layers_run; l++) {
        const pdl_vision_layer *L = &w->layers[l];
        layernorm(v, &L->ln1_w, &L->ln1_b, s->x, s->xn, rows);
        pdl_matmul_out qkv[3] = {
            {.y = s->q, .ldy = h, .w = &L->wq, .bias = bias_of(&L->bq)},
            {.y = s->k, .ldy = h, .w = &L->wk, .bias = bias_of(&L->bk)},
            {.y = s->v, .ldy = h, .w = &L->wv, .bias = bias_of(&L->bv)},
        };
        if (matmul_shared(&v->kernels, pool, &s->kernel, s->xn, rows, qkv, 3)) return kernel_failed(v, l, "q/k/v",
                              err);
        threadpool_run_n(pool, row_threads, store_kv_rows, &t);
        double attn_work = (double)rows * rows * h;
        threadpool_run_n(pool, threadpool_threads_for(pool, attn_work, 65536.0), attention_rows, &t);
        if (matmul_run(&v->kernels, pool, &s->kernel, s->x, h, s->attn, rows, &L->wo, bias_of(&L->bo), true))
            return kernel_failed(v, l, "attention output", err);

        layernorm(v, &L->ln2_w, &L->ln2_b, s->x, s->xn, rows);
        if (matmul_run(&v->kernels, pool, &s->kernel, s->ff, c->ffn, s->xn, rows, &L->fc1_w, bias_of(&L->fc1_b), false))
            return kernel_failed(v, l, "MLP fc1", err);
        pdl_vision_activation(v, s->ff, rows, c->ffn, c->act);
        if (matmul_run(&v->kernels, pool, &s->kernel, s->x, h, s->ff, rows, &L->fc2_w, bias_of(&L->fc2_b), true))
            return kernel_failed(v, l, "MLP fc2", err);
    }
    if (c->post_ln) layernorm(v, &w->post_ln_w, &w->post_ln_b, s->x, s->x, rows);
    memcpy(out, s->x + (size_t)cls * h, (size_t)n_patches * h * sizeof *out);
    return 0;
}

void pdl_vision_scratch_free(pdl_vision_scratch *s) {
    free(s->patches), free(s->x), free(s->xn), free(s->q), free(s->k), free(s->v), free(s->attn), free(s->ff);
    free(s->kv_k), free(s->kv_v), free(s->blocks), free(s->scores);
    scratch_free(&s->kernel);
    scratch_free(&s->image);
    memset(s, 0, sizeof *s);
}
