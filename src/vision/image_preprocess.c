/*
 * image_preprocess.c - image processors as transformers runs them with PIL:
 * PIL's resampling (Resample.c's algorithm: per output pixel a window of
 * filter weights centred on (x + 0.5) * scale, support widened by the scale
 * when shrinking, weights normalised to sum 1 and stored in 22-bit fixed
 * point; horizontal pass first, 8-bit between the passes), center crop,
 * rescale and normalise, LLaVA 1.6's any-resolution tiling, and Qwen2-VL's
 * dynamic resolution (smart_resize and its flattened patches).
 */
#include "vision/image_preprocess.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util/error.h"

/* ---- PIL's resampling ------------------------------------------------------ */

#define PRECISION_BITS (32 - 8 - 2)

static double filter_bilinear(double x) {
    if (x < 0) x = -x;
    return x < 1 ? 1 - x : 0;
}

static double filter_bicubic(double x) {
    const double a = -0.5;
    if (x < 0) x = -x;
    if (x < 1) return ((a + 2) * x - (a + 3)) * x * x + 1;
    if (x < 2) return (((x - 5) * x + 8) * x - 4) * a;
    return 0;
}

/* Fixed-point weights of out_size outputs over in_size inputs: output i
 * reads inputs bounds[2i] .. + bounds[2i+1] with weights k[i * ksize ..].
 * Returns ksize (0 when out of memory). */
static int coefficients(int in_size, int out_size, pdl_resample f, int **bounds_out, int32_t **k_out) {
    double support = f == PDL_RESAMPLE_BICUBIC ? 2.0 : 1.0;
    double (*filter)(double) = f == PDL_RESAMPLE_BICUBIC ? filter_bicubic : filter_bilinear;
    double scale = (double)in_size / out_size, filterscale = scale < 1.0 ? 1.0 : scale;
    support *= filterscale;
    int ksize = (int)ceil(support) * 2 + 1;
    int *bounds = malloc((size_t)out_size * 2 * sizeof *bounds);
    int32_t *kk = calloc((size_t)out_size * (size_t)ksize, sizeof *kk);
    double *w = malloc((size_t)ksize * sizeof *w);
    if (!bounds || !kk || !w) {
        free(bounds), free(kk), free(w);
        return 0;
    }
    for (int xx = 0; xx < out_size; xx++) {
        double center = (xx + 0.5) * scale, ww = 0, ss = 1.0 / filterscale;
        int xmin = (int)(center - support + 0.5), xmax = (int)(center + support + 0.5);
        if (xmin < 0) xmin = 0;
        if (xmax > in_size) xmax = in_size;
        xmax -= xmin;
        for (int x = 0; x < xmax; x++) {
            w[x] = filter((x + xmin - center + 0.5) * ss);
            ww += w[x];
        }
        for (int x = 0; x < xmax; x++) {
            double v = ww != 0.0 ? w[x] / ww : w[x];
            kk[(size_t)xx * ksize + x] = (int32_t)(v < 0 ? v * (1 << PRECISION_BITS) - 0.5 : v * (1 << PRECISION_BITS) + 0.5);
        }
        bounds[2 * xx] = xmin, bounds[2 * xx + 1] = xmax;
    }
    free(w);
    *bounds_out = bounds;
    *k_out = kk;
    return ksize;
}

static uint8_t clip8(int32_t v) {
    v >>= PRECISION_BITS;
    return v < 0 ? 0 : v > 255 ? 255 : (uint8_t)v;
}

void pdl_resize_rgb8(const uint8_t *src, int w, int h, uint8_t *dst, int ow, int oh, pdl_resample f) {
    if (ow == w && oh == h) { /* PIL returns a copy */
        memcpy(dst, src, (size_t)w * h * 3);
        return;
    }
    int *bx = NULL, *by = NULL;
    int32_t *kx = NULL, *ky = NULL;
    int ksx = ow != w ? coefficients(w, ow, f, &bx, &kx) : 0;
    int ksy = oh != h ? coefficients(h, oh, f, &by, &ky) : 0;
    /* horizontal first (over every input row: PIL limits it to the rows
     * the vertical pass reads, which gives the same pixels) */
    const uint8_t *mid = src;
    uint8_t *tmp = NULL;
    if (ow != w) {
        tmp = malloc((size_t)ow * h * 3);
        if (!tmp) goto done;
        for (int y = 0; y < h; y++)
            for (int x = 0; x < ow; x++) {
                const int32_t *k = kx + (size_t)x * ksx;
                int x0 = bx[2 * x], n = bx[2 * x + 1];
                for (int c = 0; c < 3; c++) {
                    int32_t ss = 1 << (PRECISION_BITS - 1);
                    for (int i = 0; i < n; i++) ss += src[((size_t)y * w + x0 + i) * 3 + c] * k[i];
                    tmp[((size_t)y * ow + x) * 3 + c] = clip8(ss);
                }
            }
        mid = tmp;
    }
    if (oh != h) {
        for (int y = 0; y < oh; y++) {
            const int32_t *k = ky + (size_t)y * ksy;
            int y0 = by[2 * y], n = by[2 * y + 1];
            for (int x = 0; x < ow; x++)
                for (int c = 0; c < 3; c++) {
                    int32_t ss = 1 << (PRECISION_BITS - 1);
                    for (int i = 0; i < n; i++) ss += mid[((size_t)(y0 + i) * ow + x) * 3 + c] * k[i];
                    dst[((size_t)y * ow + x) * 3 + c] = clip8(ss);
                }
        }
    } else {
        memcpy(dst, mid, (size_t)ow * oh * 3);
    }
done:
    free(tmp), free(bx), free(by), free(kx), free(ky);
}

/* ---- one tile ---------------------------------------------------------------- */

void pdl_shortest_edge_size(int w, int h, int size, int *ow, int *oh) {
    int shorter = w <= h ? w : h, longer = w <= h ? h : w;
    int new_long = (int)((double)size * longer / shorter);
    if (w <= h) *ow = size, *oh = new_long;
    else *oh = size, *ow = new_long;
}

/* Rescale and normalise an 8-bit (h, w, 3) region at (x0, y0) of width
 * stride into (3, ch, cw); pixels outside the image are 0 (the crop's
 * padding). */
static void normalize_tile(const pdl_image_proc *p, const uint8_t *rgb, int w, int h, int x0, int y0, int cw, int ch,
                           float *out) {
    for (int c = 0; c < 3; c++)
        for (int y = 0; y < ch; y++)
            for (int x = 0; x < cw; x++) {
                int sx = x0 + x, sy = y0 + y;
                double v = sx >= 0 && sx < w && sy >= 0 && sy < h ? rgb[((size_t)sy * w + sx) * 3 + c] : 0;
                /* transformers: x * scale in float64, then (x - mean) / std in float32 */
                float r = (float)(v * p->rescale);
                out[((size_t)c * ch + y) * cw + x] = (r - p->mean[c]) / p->std[c];
            }
}

int pdl_preprocess_tile(const pdl_image_proc *p, const uint8_t *rgb, int w, int h, float *out, pdl_error *err) {
    int rw, rh;
    if (p->shortest_edge) pdl_shortest_edge_size(w, h, p->size, &rw, &rh);
    else rw = p->crop_w, rh = p->crop_h;
    if (rw <= 0 || rh <= 0) return pdl_fail(err, "image of %d x %d pixels resizes to nothing", w, h);
    uint8_t *r = malloc((size_t)rw * rh * 3);
    if (!r) return pdl_fail(err, "out of memory resizing an image to %d x %d", rw, rh);
    pdl_resize_rgb8(rgb, w, h, r, rw, rh, p->resample);
    /* transformers' center_crop: top = (h - crop_h) // 2 (floor, also when negative: padding) */
    int top = rh - p->crop_h, left = rw - p->crop_w;
    top = top >= 0 ? top / 2 : -((-top + 1) / 2);
    left = left >= 0 ? left / 2 : -((-left + 1) / 2);
    normalize_tile(p, r, rw, rh, left, top, p->crop_w, p->crop_h, out);
    free(r);
    return 0;
}

/* ---- LLaVA 1.6 any-resolution ------------------------------------------------ */

void pdl_anyres_best(const pdl_image_proc *p, int h, int w, int *best_h, int *best_w) {
    long long max_eff = -1, min_waste = -1;
    *best_h = p->pinpoints[0][0], *best_w = p->pinpoints[0][1];
    for (int i = 0; i < p->n_pinpoints; i++) {
        int ph = p->pinpoints[i][0], pw = p->pinpoints[i][1];
        double sw = (double)pw / w, sh = (double)ph / h, s = sw < sh ? sw : sh;
        long long dw = (long long)(w * s), dh = (long long)(h * s);
        long long eff = dw * dh, orig = (long long)w * h;
        if (eff > orig) eff = orig;
        long long waste = (long long)pw * ph - eff;
        if (eff > max_eff || (eff == max_eff && waste < min_waste)) {
            max_eff = eff, min_waste = waste;
            *best_h = ph, *best_w = pw;
        }
    }
}

int pdl_anyres_tiles(const pdl_image_proc *p, const uint8_t *rgb, int w, int h, float **tiles, int *n_tiles,
                     int *grid_h, int *grid_w, pdl_error *err) {
    *tiles = NULL;
    int th, tw;
    pdl_anyres_best(p, h, w, &th, &tw);
    int gh = th / p->crop_h, gw = tw / p->crop_w;
    size_t tile = (size_t)3 * p->crop_h * p->crop_w;
    int n = 1 + gh * gw;
    float *out = malloc((size_t)n * tile * sizeof *out);
    /* _get_patch_output_size: fit inside the grid, the other side rounded up */
    double sw = (double)tw / w, sh = (double)th / h;
    int nw, nh;
    if (sw < sh) {
        nw = tw;
        nh = (int)ceil(h * sw);
        if (nh > th) nh = th;
    } else {
        nh = th;
        nw = (int)ceil(w * sh);
        if (nw > tw) nw = tw;
    }
    uint8_t *resized = malloc((size_t)nw * nh * 3), *square = malloc(tile);
    uint8_t *padded = calloc((size_t)tw * th * 3, 1);
    if (!out || !resized || !square || !padded) {
        free(out), free(resized), free(square), free(padded);
        return pdl_fail(err, "out of memory for the %d x %d tiles of an image", gh, gw);
    }
    /* tile 0: the whole image squashed to one tile (resize to (size, size)),
     * then the processor's own resize (a no-op at that size) and crop */
    pdl_resize_rgb8(rgb, w, h, square, p->crop_w, p->crop_h, p->resample);
    normalize_tile(p, square, p->crop_w, p->crop_h, 0, 0, p->crop_w, p->crop_h, out);
    pdl_resize_rgb8(rgb, w, h, resized, nw, nh, p->resample);
    int px = (tw - nw) / 2, py = (th - nh) / 2;
    for (int y = 0; y < nh; y++) memcpy(padded + ((size_t)(py + y) * tw + px) * 3, resized + (size_t)y * nw * 3, (size_t)nw * 3);
    for (int i = 0; i < gh; i++)
        for (int j = 0; j < gw; j++)
            normalize_tile(p, padded, tw, th, j * p->crop_w, i * p->crop_h, p->crop_w, p->crop_h,
                           out + (size_t)(1 + i * gw + j) * tile);
    free(resized), free(square), free(padded);
    *tiles = out;
    *n_tiles = n;
    *grid_h = gh, *grid_w = gw;
    return 0;
}

/* Python's int(round(x, 7)) for the positive values here. */
static int round7_int(double x) { return (int)(floor(x * 1e7 + 0.5) / 1e7); }

void pdl_anyres_unpadded(int h, int w, int grid_h, int grid_w, int patches, int *rows, int *cols, int *row0,
                         int *col0) {
    int ch = grid_h * patches, cw = grid_w * patches;
    double orig_aspect = (double)w / h, cur_aspect = (double)cw / ch;
    *row0 = *col0 = 0;
    *rows = ch, *cols = cw;
    if (orig_aspect > cur_aspect) {
        int nh = round7_int(h * ((double)cw / w));
        int pad = (ch - nh) / 2;
        *row0 = pad, *rows = ch - 2 * pad;
    } else {
        int nw = round7_int(w * ((double)ch / h));
        int pad = (cw - nw) / 2;
        *col0 = pad, *cols = cw - 2 * pad;
    }
}

/* ---- Qwen2-VL dynamic resolution ----------------------------------------------- */

int pdl_smart_resize(int h, int w, int factor, long min_pixels, long max_pixels, int *out_h, int *out_w,
                     pdl_error *err) {
    if (h <= 0 || w <= 0 || factor <= 0) return pdl_fail(err, "image of %d x %d pixels: nothing to resize", w, h);
    double big = h > w ? h : w, small = h > w ? w : h;
    if (big / small > 200)
        return pdl_fail(err, "image of %d x %d pixels: aspect ratio %.1f is over 200 (Qwen2-VL's limit)", w, h,
                        big / small);
    /* nearbyint in the default rounding mode: half to even, as Python's round */
    double hb = nearbyint((double)h / factor) * factor, wb = nearbyint((double)w / factor) * factor;
    if (hb * wb > (double)max_pixels) {
        double beta = sqrt((double)h * w / (double)max_pixels);
        hb = floor((double)h / beta / factor) * factor;
        wb = floor((double)w / beta / factor) * factor;
        if (hb < factor) hb = factor;
        if (wb < factor) wb = factor;
    } else if (hb * wb < (double)min_pixels) {
        double beta = sqrt((double)min_pixels / ((double)h * w));
        hb = ceil((double)h * beta / factor) * factor;
        wb = ceil((double)w * beta / factor) * factor;
    }
    if (hb > 65536 || wb > 65536)
        return pdl_fail(err, "image of %d x %d pixels resizes to %.0f x %.0f: too large", w, h, wb, hb);
    *out_h = (int)hb, *out_w = (int)wb;
    return 0;
}

int pdl_qwen_patches(const pdl_image_proc *p, const uint8_t *rgb, int w, int h, float **patches, int *grid_h,
                     int *grid_w, pdl_error *err) {
    *patches = NULL;
    int ps = p->patch, m = p->merge, tp = p->temporal, rh, rw;
    if (ps <= 0 || m <= 0 || tp <= 0) return pdl_fail(err, "Qwen2-VL processor: patch, merge and temporal sizes must be positive");
    if (pdl_smart_resize(h, w, ps * m, p->min_pixels, p->max_pixels, &rh, &rw, err)) return -1;
    uint8_t *r = malloc((size_t)rw * rh * 3);
    float *norm = malloc((size_t)rw * rh * 3 * sizeof *norm);
    int gh = rh / ps, gw = rw / ps;
    size_t row = (size_t)3 * tp * ps * ps;
    float *out = malloc((size_t)gh * gw * row * sizeof *out);
    if (!r || !norm || !out) {
        free(r), free(norm), free(out);
        return pdl_fail(err, "out of memory resizing an image to %d x %d", rw, rh);
    }
    pdl_resize_rgb8(rgb, w, h, r, rw, rh, p->resample);
    normalize_tile(p, r, rw, rh, 0, 0, rw, rh, norm); /* (3, rh, rw) */
    /* the processor's reshape (t, T, c, gh/m, m, ps, gw/m, m, ps) permuted to
     * (t, gh/m, gw/m, m, m, c, T, ps, ps) */
    float *o = out;
    for (int bh = 0; bh < gh / m; bh++)
        for (int bw = 0; bw < gw / m; bw++)
            for (int mh = 0; mh < m; mh++)
                for (int mw = 0; mw < m; mw++) {
                    int y0 = (bh * m + mh) * ps, x0 = (bw * m + mw) * ps;
                    for (int c = 0; c < 3; c++)
                        for (int t = 0; t < tp; t++)
                            for (int y = 0; y < ps; y++, o += ps)
                                memcpy(o, norm + ((size_t)c * rh + y0 + y) * rw + x0, (size_t)ps * sizeof *o);
                }
    free(r), free(norm);
    *patches = out, *grid_h = gh, *grid_w = gw;
    return 0;
}
