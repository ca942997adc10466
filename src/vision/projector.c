/*
 * projector.c - tower features -> rows of the text model's embedding
 * space.
 *
 * LLaVA (modeling_llava.py, LlavaMultiModalProjector): per feature row,
 *   y = W2 gelu(W1 x + b1) + b2,  W1 (proj_hidden, hidden), W2 (text_hidden, proj_hidden).
 * Gemma 3 (modeling_gemma3.py, Gemma3MultiModalProjector): the side x side
 * patch features as a (hidden, side, side) map, averaged over k x k
 * windows (k = side / sqrt(mm_tokens)) into mm_tokens rows (row-major over
 * the pooled grid), each RMS-normed with (1 + w) and multiplied by the
 * (hidden, text_hidden) projection.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu_ops.h"
#include "kernels/matmul.h"
#include "util/error.h"
#include "vision/vision_model.h"

void pdl_vision_activation(pdl_vision *v, float *x, int rows, int width, pdl_vision_act act);

static const float *bias_of(const pdl_tensor *t) { return t->data ? t->data : NULL; }

static int project_llava(pdl_vision *v, const float *x, int n, float *out, pdl_error *err) {
    const pdl_vision_config *c = &v->cfg;
    float *mid = malloc((size_t)n * c->proj_hidden * sizeof *mid);
    if (!mid) return err_fail(err, "projector: out of memory for %d rows", n);
    pdl_scratch *ks = &v->scratch.kernel;
    int rc = matmul_run(&v->kernels, v->pool, ks, mid, c->proj_hidden, x, n, &v->w.mm1_w, bias_of(&v->w.mm1_b), false);
    if (!rc) {
        pdl_vision_activation(v, mid, n, c->proj_hidden, c->proj_act);
        rc = matmul_run(&v->kernels, v->pool, ks, out, c->text_hidden, mid, n, &v->w.mm2_w, bias_of(&v->w.mm2_b),
                        false);
    }
    free(mid);
    if (rc) return err_fail(err, "projector: out of memory for %zu bytes of kernel scratch", ks->failed);
    return 0;
}

static int project_gemma3(pdl_vision *v, const float *x, int n, float *out, pdl_error *err) {
    const pdl_vision_config *c = &v->cfg;
    int side = vis_side(c), tps = (int)lround(sqrt((double)c->mm_tokens)), k = side / tps, h = c->hidden;
    if (n != side * side) return err_fail(err, "projector: %d feature rows, expected %d", n, side * side);
    float *pooled = malloc((size_t)c->mm_tokens * h * sizeof *pooled);
    if (!pooled) return err_fail(err, "projector: out of memory");
    for (int ty = 0; ty < tps; ty++)
        for (int tx = 0; tx < tps; tx++) {
            float *o = pooled + ((size_t)ty * tps + tx) * h;
            for (int d = 0; d < h; d++) {
                double s = 0;
                for (int y = 0; y < k; y++)
                    for (int xx = 0; xx < k; xx++) s += x[((size_t)(ty * k + y) * side + tx * k + xx) * h + d];
                o[d] = (float)(s / (k * k));
            }
            ops_rmsnorm(o, o, v->w.mm_norm_w.data, h, c->mm_norm_eps);
        }
    pdl_scratch *ks = &v->scratch.kernel;
    int rc = matmul_run(&v->kernels, v->pool, ks, out, c->text_hidden, pooled, c->mm_tokens, &v->w.mm_proj_w, NULL,
                        false);
    free(pooled);
    if (rc) return err_fail(err, "projector: out of memory for %zu bytes of kernel scratch", ks->failed);
    return 0;
}

int vis_project(pdl_vision *v, const float *features, int n, float *out, int *n_out, pdl_error *err) {
    if (v->cfg.family == PDL_VLM_GEMMA3) {
        *n_out = v->cfg.mm_tokens;
        return project_gemma3(v, features, n, out, err);
    }
    *n_out = n;
    return project_llava(v, features, n, out, err);
}
