/*
 * qwen_vision.c - Qwen2.5-VL's vision tower and patch merger
 * (Qwen2_5_VisionTransformerPretrainedModel as transformers'
 * modeling_qwen2_5_vl.py describes it), on the text model's kernels.
 *
 * Shapes for one image of grid_h x grid_w patches (n = grid_h * grid_w
 * rows, the processor's order: merge windows of merge x merge patches, the
 * windows row-major over the image):
 *   patches (n, 3 * temporal * patch * patch) -> x (n, hidden): the Conv3d
 *   as one matmul without bias.
 *   The rows are regrouped by attention window: the merged cells (a merge
 *   window's rows stay together) taken window by window, each window
 *   window_cells x window_cells cells row-major, the windows row-major
 *   (get_window_index; windows cut by the grid's edge are smaller).
 *   Each row's 2-D rotary angles: head_dim / 4 frequencies
 *   theta^(-4 j / head_dim); the first head_dim / 4 angles turn by the
 *   patch's row, the next head_dim / 4 by its column; rotate_half over the
 *   whole head (cat(angles, angles)).
 *   Layers (pre-norm): x += proj(attn(rope(q), rope(k), v)) with q, k, v
 *   from one qkv matrix with bias, attention both ways within the row's
 *   window, or over the whole image in the full_attn layers;
 *   x += down(silu(gate(xn)) * up(xn)), all with biases; RMSNorms eps 1e-6.
 *   The merger: RMSNorm ln_q per row, each merged cell's merge^2 rows as one
 *   vector (merge^2 hidden) -> Linear -> GELU -> Linear -> (text hidden);
 *   the cells back in the processor's order (row-major over the merged
 *   grid) for the prompt.
 * Each row's result depends only on the image, never on the thread count.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/attention.h"
#include "kernels/cpu_ops.h"
#include "kernels/matmul.h"
#include "util/error.h"
#include "vision/image.h"
#include "vision/vision_model.h"

#define KV_BLOCK 16

void pdl_vision_activation(pdl_vision *v, float *x, int rows, int width, pdl_vision_act act);

int vis_qwen_grid(const pdl_vision *v, const pdl_image *img, int *grid_h, int *grid_w) {
    const pdl_image_proc *p = &v->cfg.proc;
    int rh, rw;
    pdl_error err;
    if (img_smart_resize(img->height, img->width, p->patch * p->merge, p->min_pixels, p->max_pixels, &rh, &rw, &err))
        return -1;
    *grid_h = rh / (p->patch * p->merge), *grid_w = rw / (p->patch * p->merge);
    return 0;
}

typedef struct qtask {
    pdl_vision *v;
    int n;                    /* rows */
    const float *cs;          /* (n, head_dim) rotary cos | sin per row */
    const int32_t *first, *last; /* (n) each row's attention range (window or whole image) */
    float *x, *xn, *q, *k, *vv, *attn;
    void *kv_k, *kv_v;
    const int32_t *blocks;
    float *scores;
    size_t scores_cap;
    const float *norm_w;
} qtask;

static void rmsnorm_rows(void *p, int ith, int nth) {
    qtask *t = p;
    int h = t->v->cfg.hidden;
    long r0, r1;
    threadpool_split_range(t->n, ith, nth, &r0, &r1);
    for (long r = r0; r < r1; r++) ops_rmsnorm(t->xn + r * h, t->x + r * h, t->norm_w, h, t->v->cfg.ln_eps);
}

/* RoPE on q and k, then K and V into the block cache. */
static void rope_store_rows(void *p, int ith, int nth) {
    qtask *t = p;
    const pdl_vision_config *c = &t->v->cfg;
    int h = c->hidden, hd = h / c->n_heads;
    long r0, r1;
    threadpool_split_range(t->n, ith, nth, &r0, &r1);
    for (long r = r0; r < r1; r++) {
        for (int hh = 0; hh < c->n_heads; hh++) {
            ops_rope_apply(t->q + r * h + hh * hd, hd, t->cs + r * hd, 1);
            ops_rope_apply(t->k + r * h + hh * hd, hd, t->cs + r * hd, 1);
        }
        attn_store(t->kv_k, t->kv_v, 0, h, hd, KV_BLOCK, (int)r, t->k + r * h, t->vv + r * h);
    }
}

/* Tasks are (block of up to 16 rows, head), dealt round-robin; the rows of
 * a block may sit in different windows (each query has its own range). */
static void attention_rows(void *p, int ith, int nth) {
    qtask *t = p;
    const pdl_vision_config *c = &t->v->cfg;
    int h = c->hidden, hd = h / c->n_heads;
    pdl_attn_kv akv = {.k = t->kv_k, .v = t->kv_v, .kv_is_f16 = 0, .kv_dim = h, .block_table = t->blocks,
                       .block_size = KV_BLOCK};
    float scale = 1.0f / sqrtf((float)hd);
    float *scratch = t->scores + (size_t)ith * t->scores_cap;
    float *outs[16];
    const float *qs[16];
    int firsts[16], lasts[16];
    long task = 0;
    for (int rb = 0; rb < t->n; rb += 16)
        for (int hh = 0; hh < c->n_heads; hh++, task++) {
            if (task % nth != ith) continue;
            int nq = 0;
            for (int r = rb; r < t->n && r < rb + 16; r++, nq++) {
                outs[nq] = t->attn + (size_t)r * h + (size_t)hh * hd;
                qs[nq] = t->q + (size_t)r * h + (size_t)hh * hd;
                firsts[nq] = t->first[r], lasts[nq] = t->last[r];
            }
            attn_ranges(outs, qs, firsts, lasts, nq, hd, hh, scale, 0.0f, NULL, &akv, scratch);
        }
}

static int kernel_failed(pdl_vision *v, int layer, const char *what, pdl_error *err) {
    return err_fail(err, "vision encoder: layer %d: %s: out of memory for %zu bytes of kernel scratch", layer, what,
                    v->scratch.kernel.failed);
}

/* The merged cells in window order: order[k] is the k-th cell (index
 * row * mw + col over the mh x mw merged grid); wstart[k] the first k of
 * cell k's window, wend[k] one past its last. */
static void window_order(int mh, int mw, int win, int *order, int *wstart, int *wend) {
    int k = 0;
    for (int wy = 0; wy < mh; wy += win)
        for (int wx = 0; wx < mw; wx += win) {
            int k0 = k;
            for (int y = wy; y < wy + win && y < mh; y++)
                for (int x = wx; x < wx + win && x < mw; x++) order[k++] = y * mw + x;
            for (int j = k0; j < k; j++) wstart[j] = k0, wend[j] = k;
        }
}

int vis_qwen_encode(pdl_vision *v, const pdl_image *img, float **rows_out, int *n_rows_out, pdl_error *err) {
    const pdl_vision_config *c = &v->cfg;
    const pdl_vision_weights *w = &v->w;
    const pdl_image_proc *pr = &c->proc;
    *rows_out = NULL, *n_rows_out = 0;
    float *patches = NULL;
    int gh, gw;
    if (img_qwen_patches(pr, img->rgb, img->width, img->height, &patches, &gh, &gw, &v->scratch.image, err))
        return -1;
    int m = pr->merge, unit = m * m, mh = gh / m, mw = gw / m, cells = mh * mw, n = gh * gw;
    int h = c->hidden, hd = h / c->n_heads, th = c->text_hidden, mhid = c->proj_hidden;
    size_t blocks = ((size_t)n + KV_BLOCK - 1) / KV_BLOCK;
    int threads = threadpool_size(v->pool);
    size_t scores_cap = attn_queries_scratch(16, n, hd);
    size_t ffw = (size_t)(c->ffn > mhid / unit ? c->ffn : mhid / unit);
    /* one allocation per image (an encode, not a per-token path) */
    float *x = malloc((size_t)n * h * sizeof *x), *xn = malloc((size_t)n * h * sizeof *xn);
    float *q = malloc((size_t)n * h * sizeof *q), *k = malloc((size_t)n * h * sizeof *k);
    float *vv = malloc((size_t)n * h * sizeof *vv), *attn = malloc((size_t)n * h * sizeof *attn);
    float *gate = malloc((size_t)n * ffw * sizeof *gate), *up = malloc((size_t)n * ffw * sizeof *up);
    float *cs = malloc((size_t)n * hd * sizeof *cs), *tmp = malloc((size_t)n * h * sizeof *tmp);
    float *scores = malloc((size_t)threads * scores_cap * sizeof *scores);
    float *merged = malloc((size_t)cells * th * sizeof *merged), *rows = malloc((size_t)cells * th * sizeof *rows);
    float *mid = malloc((size_t)cells * mhid * sizeof *mid);
    void *kv_k = malloc(blocks * KV_BLOCK * (size_t)h * 4), *kv_v = malloc(blocks * KV_BLOCK * (size_t)h * 4);
    int32_t *bt = malloc(blocks * sizeof *bt), *wfirst = malloc((size_t)n * sizeof *wfirst);
    int32_t *wlast = malloc((size_t)n * sizeof *wlast), *all_first = malloc((size_t)n * sizeof *all_first);
    int32_t *all_last = malloc((size_t)n * sizeof *all_last);
    int *order = malloc((size_t)cells * sizeof *order), *ws = malloc((size_t)cells * sizeof *ws);
    int *we = malloc((size_t)cells * sizeof *we);
    int rc = -1;
    if (!x || !xn || !q || !k || !vv || !attn || !gate || !up || !cs || !tmp || !scores || !merged || !rows || !mid ||
        !kv_k || !kv_v || !bt || !wfirst || !wlast || !all_first || !all_last || !order || !ws || !we) {
        err_fail(err, "vision encoder: out of memory for an image of %d x %d patches", gw, gh);
        goto done;
    }
    for (size_t b = 0; b < blocks; b++) bt[b] = (int32_t)b;
    pdl_threadpool *pool = v->pool;
    pdl_scratch *ks = &v->scratch.kernel;
    int row_threads = threadpool_threads_for(pool, (double)n * h, 16384.0);

    /* the patch embedding, in the processor's row order */
    if (matmul_run(&v->kernels, pool, ks, tmp, h, patches, n, &w->patch_w, NULL, false)) {
        kernel_failed(v, -1, "patch embedding", err);
        goto done;
    }
    /* regroup by window; each row's rotary angles and attention ranges */
    window_order(mh, mw, c->window_cells, order, ws, we);
    int quarter = hd / 4;
    for (int kk = 0; kk < cells; kk++) {
        int cell = order[kk], cy = cell / mw, cx = cell % mw;
        for (int u = 0; u < unit; u++) {
            int r = kk * unit + u, src = cell * unit + u;
            memcpy(x + (size_t)r * h, tmp + (size_t)src * h, (size_t)h * sizeof *x);
            int py = cy * m + u / m, px = cx * m + u % m;
            float *c_s = cs + (size_t)r * hd;
            for (int j = 0; j < hd / 2; j++) {
                int f = j < quarter ? j : j - quarter;
                double inv = pow((double)c->rope_theta, -2.0 * f / (hd / 2)), ang = (j < quarter ? py : px) * inv;
                c_s[j] = (float)cos(ang), c_s[hd / 2 + j] = (float)sin(ang);
            }
            wfirst[r] = ws[kk] * unit, wlast[r] = we[kk] * unit - 1;
            all_first[r] = 0, all_last[r] = n - 1;
        }
    }

    qtask t = {.v = v, .n = n, .cs = cs, .x = x, .xn = xn, .q = q, .k = k, .vv = vv, .attn = attn, .kv_k = kv_k,
               .kv_v = kv_v, .blocks = bt, .scores = scores, .scores_cap = scores_cap};
    for (int l = 0; l < c->n_layers; l++) {
        const pdl_vision_layer *L = &w->layers[l];
        bool full = (c->full_attn[l / 64] >> (l % 64)) & 1;
        t.first = full ? all_first : wfirst, t.last = full ? all_last : wlast;
        t.norm_w = L->ln1_w.data;
        threadpool_run_n(pool, row_threads, rmsnorm_rows, &t);
        pdl_matmul_out qkv[3] = {
            {.y = q, .ldy = h, .w = &L->wq, .bias = L->bq.data},
            {.y = k, .ldy = h, .w = &L->wk, .bias = L->bk.data},
            {.y = vv, .ldy = h, .w = &L->wv, .bias = L->bv.data},
        };
        if (matmul_shared(&v->kernels, pool, ks, xn, n, qkv, 3)) {
            kernel_failed(v, l, "q/k/v", err);
            goto done;
        }
        threadpool_run_n(pool, row_threads, rope_store_rows, &t);
        double span = full ? n : (double)unit * c->window_cells * c->window_cells;
        threadpool_run_n(pool, threadpool_threads_for(pool, (double)n * span * h, 65536.0), attention_rows, &t);
        if (matmul_run(&v->kernels, pool, ks, x, h, attn, n, &L->wo, L->bo.data, true)) {
            kernel_failed(v, l, "attention output", err);
            goto done;
        }
        t.norm_w = L->ln2_w.data;
        threadpool_run_n(pool, row_threads, rmsnorm_rows, &t);
        if (matmul_run(&v->kernels, pool, ks, gate, c->ffn, xn, n, &L->fc1_w, L->fc1_b.data, false) ||
            matmul_run(&v->kernels, pool, ks, up, c->ffn, xn, n, &L->up_w, L->up_b.data, false)) {
            kernel_failed(v, l, "MLP gate/up", err);
            goto done;
        }
        for (size_t r = 0; r < (size_t)n; r++) ops_silu_mul(gate + r * c->ffn, up + r * c->ffn, c->ffn);
        if (matmul_run(&v->kernels, pool, ks, x, h, gate, n, &L->fc2_w, L->fc2_b.data, true)) {
            kernel_failed(v, l, "MLP down", err);
            goto done;
        }
    }
    /* the merger: a cell's rows side by side are one (unit * hidden) row */
    t.norm_w = w->mm_norm_w.data;
    threadpool_run_n(pool, row_threads, rmsnorm_rows, &t);
    if (matmul_run(&v->kernels, pool, ks, mid, mhid, xn, cells, &w->mm1_w, w->mm1_b.data, false)) {
        kernel_failed(v, -1, "merger mlp.0", err);
        goto done;
    }
    pdl_vision_activation(v, mid, cells, mhid, c->proj_act);
    if (matmul_run(&v->kernels, pool, ks, merged, th, mid, cells, &w->mm2_w, w->mm2_b.data, false)) {
        kernel_failed(v, -1, "merger mlp.2", err);
        goto done;
    }
    /* back to the processor's order: row-major over the merged grid */
    for (int kk = 0; kk < cells; kk++)
        memcpy(rows + (size_t)order[kk] * th, merged + (size_t)kk * th, (size_t)th * sizeof *rows);
    *rows_out = rows, *n_rows_out = cells;
    rows = NULL;
    rc = 0;
done:
    free(patches), free(x), free(xn), free(q), free(k), free(vv), free(attn), free(gate), free(up), free(cs);
    free(tmp), free(scores), free(merged), free(rows), free(mid), free(kv_k), free(kv_v), free(bt);
    free(wfirst), free(wlast), free(all_first), free(all_last), free(order), free(ws), free(we);
    return rc;
}
