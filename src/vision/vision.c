/*
 * vision.c - an image to the rows it takes in the text model's prompt:
 * the processor's tiles, the tower and the projector per tile, and (LLaVA
 * 1.6) the tiles' features laid out as modeling_llava_next.py's
 * pack_image_features lays them out.
 *
 * LLaVA 1.6's rows: the whole-image tile's rows first, then the grid's
 * features as one (grid_h * side) x (grid_w * side) map, cut back to the
 * image's aspect (unpad_image), row by row, each row followed by
 * image_newline.
 *
 * Qwen2.5-VL's rows come from qwen_vision.c, one per merged cell, and turn
 * by 3-component positions in the text model (pdl_mm_rope_positions).
 *
 * Gemma 3's rows of one image attend to each other both ways in the text
 * model (transformers' token_type_ids mask: causal, or both rows image rows
 * of the same run): pdl_mm_spans marks them.
 */
#include <stdlib.h>
#include <string.h>

#include "util/error.h"
#include "vision/image.h"
#include "vision/vision_model.h"

int pdl_vision_image_rows(const pdl_vision *v, const pdl_image *img) {
    const pdl_vision_config *c = &v->cfg;
    if (c->family == PDL_VLM_QWEN25VL) {
        int gh, gw;
        return vis_qwen_grid(v, img, &gh, &gw) ? -1 : gh * gw;
    }
    if (c->family != PDL_VLM_LLAVA_NEXT) return c->mm_tokens;
    int bh, bw, rows, cols, r0, c0, side = vis_side(c);
    img_anyres_best(&c->proc, img->height, img->width, &bh, &bw);
    img_anyres_unpadded(img->height, img->width, bh / c->proc.crop_h, bw / c->proc.crop_w, side, &rows, &cols, &r0, &c0);
    return side * side + rows * (cols + 1);
}

bool pdl_mm_spans(const pdl_vision *v, const pdl_mm_input *images, int n_images, int n, int32_t *span_first,
                  int32_t *span_last) {
    for (int i = 0; i < n; i++) span_first[i] = span_last[i] = i;
    if (!v->cfg.bidirectional) return false;
    bool any = false;
    for (int k = 0; k < n_images; k++) {
        int at = images[k].position, rows = pdl_vision_image_rows(v, images[k].image);
        if (at < 0 || rows <= 0 || at + rows > n) continue; /* the caller's layout checks say why */
        for (int i = at; i < at + rows; i++) span_first[i] = at, span_last[i] = at + rows - 1;
        any |= rows > 1;
    }
    return any;
}

bool pdl_mm_rope_positions(const pdl_vision *v, const pdl_mm_input *images, int n_images, int n, int32_t *pos3,
                           int32_t *delta) {
    *delta = 0;
    if (v->cfg.family != PDL_VLM_QWEN25VL) return false;
    /* get_rope_index: text rows count on from the last position + 1; an
     * image's rows are (start, start + row, start + col) over its merged
     * grid, and the text after it starts at start + max(rows, cols) */
    int i = 0, next = 0;
    for (int k = 0; k <= n_images; k++) {
        int at = n, gh = 0, gw = 0;
        if (k < n_images) {
            at = images[k].position;
            if (vis_qwen_grid(v, images[k].image, &gh, &gw) || at < i || at + gh * gw > n) continue;
        }
        for (; i < at; i++, next++) pos3[3 * i] = pos3[3 * i + 1] = pos3[3 * i + 2] = next;
        if (k == n_images) break;
        for (int r = 0; r < gh * gw; r++, i++)
            pos3[3 * i] = next, pos3[3 * i + 1] = next + r / gw, pos3[3 * i + 2] = next + r % gw;
        next += gh > gw ? gh : gw;
    }
    *delta = next - n;
    return true;
}

static int vision_preprocess(pdl_vision *v, const pdl_image *img, float **tiles, int *n_tiles, int *grid_h,
                             int *grid_w, pdl_error *err) {
    const pdl_vision_config *c = &v->cfg;
    *tiles = NULL;
    *grid_h = *grid_w = 0;
    if (c->family == PDL_VLM_LLAVA_NEXT)
        return img_anyres_tiles(&c->proc, img->rgb, img->width, img->height, tiles, n_tiles, grid_h, grid_w,
                                &v->scratch.image, err);
    float *t = malloc((size_t)3 * c->proc.crop_w * c->proc.crop_h * sizeof *t);
    if (!t) return err_fail(err, "out of memory for an image tile");
    if (img_preprocess_tile(&c->proc, img->rgb, img->width, img->height, t, &v->scratch.image, err)) {
        free(t);
        return -1;
    }
    *tiles = t;
    *n_tiles = 1;
    return 0;
}

int pdl_vision_encode(pdl_vision *v, const pdl_image *img, float **rows_out, int *n_rows_out, pdl_error *err) {
    const pdl_vision_config *c = &v->cfg;
    if (c->family == PDL_VLM_QWEN25VL) {
        int rc = vis_qwen_encode(v, img, rows_out, n_rows_out, err);
        scratch_free(&v->scratch.image); /* the processor's working memory: not kept between images */
        return rc;
    }
    *rows_out = NULL;
    *n_rows_out = 0;
    float *tiles = NULL, *feat = NULL, *proj = NULL, *rows = NULL;
    int n_tiles = 0, gh = 0, gw = 0, side = vis_side(c), np = side * side, th = c->text_hidden;
    int rc = -1;
    int pre = vision_preprocess(v, img, &tiles, &n_tiles, &gh, &gw, err);
    scratch_free(&v->scratch.image); /* the processor's working memory: not kept between images */
    if (pre) return -1;
    size_t tile = (size_t)3 * c->image_size * c->image_size;
    feat = malloc((size_t)np * c->hidden * sizeof *feat);
    int per_tile = c->family == PDL_VLM_GEMMA3 ? c->mm_tokens : np;
    proj = malloc((size_t)n_tiles * per_tile * th * sizeof *proj);
    if (!feat || !proj) {
        err_fail(err, "out of memory encoding an image of %d tiles", n_tiles);
        goto done;
    }
    for (int t = 0; t < n_tiles; t++) {
        int n_out;
        if (vis_tower(v, tiles + (size_t)t * tile, feat, err) ||
            vis_project(v, feat, np, proj + (size_t)t * per_tile * th, &n_out, err))
            goto done;
    }
    if (c->family != PDL_VLM_LLAVA_NEXT) {
        rows = proj, proj = NULL;
        *n_rows_out = per_tile;
    } else {
        int nr, nc, r0, c0;
        img_anyres_unpadded(img->height, img->width, gh, gw, side, &nr, &nc, &r0, &c0);
        int total = np + nr * (nc + 1);
        rows = malloc((size_t)total * th * sizeof *rows);
        if (!rows) {
            err_fail(err, "out of memory for %d image rows", total);
            goto done;
        }
        memcpy(rows, proj, (size_t)np * th * sizeof *rows); /* the whole-image tile first */
        float *o = rows + (size_t)np * th;
        for (int y = r0; y < r0 + nr; y++) {
            for (int x = c0; x < c0 + nc; x++) {
                /* map position (y, x) is patch (y % side, x % side) of grid tile (y / side, x / side) */
                int tile_i = 1 + (y / side) * gw + x / side, patch = (y % side) * side + x % side;
                memcpy(o, proj + ((size_t)tile_i * np + patch) * th, (size_t)th * sizeof *o);
                o += th;
            }
            memcpy(o, v->w.image_newline.data, (size_t)th * sizeof *o);
            o += th;
        }
        *n_rows_out = total;
    }
    *rows_out = rows;
    rows = NULL;
    rc = 0;
done:
    free(tiles), free(feat), free(proj), free(rows);
    return rc;
}
