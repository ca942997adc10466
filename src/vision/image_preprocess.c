/*
 * image_preprocess.c - image processors as transformers runs them with PIL:
 * PIL's resampling (Resample.c's algorithm: per output pixel a window of
 * filter weights centred on (x + 0.5) * scale, support widened by the scale
 * when shrinking, weights normalised to sum 1 and stored in 22-bit fixed
 * point; horizontal pass first, 8-bit between the passes), LLaVA 1.5's pad
 * to a square, center crop, rescale and normalise, LLaVA 1.6's
 * any-resolution tiling, and Qwen2-VL's dynamic resolution (smart_resize
 * and its flattened patches).
 *
 * Every output pixel of PIL's resize depends on its own weights and input
 * window only, so a center crop resizes just the crop's window (the same
 * bytes as resizing the whole image, then cropping), and a pad's pixels,
 * all one colour, enter each sum as the colour times their weights' sum
 * (integer sums are exact in any order): the work and memory follow the
 * crop and the image, never the resized or padded area.
 */
#include "vision/image_preprocess.h"

#include <limits.h>
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

/* One axis of a resize, in_size -> out_size, as PIL's precompute_coeffs
 * sees it: the filter's support widened by the scale when shrinking, and
 * ksize taps at most per output. */
typedef struct axis {
    int in_size, out_size, ksize;
    double scale, support, filterscale;
    double (*filter)(double);
} axis;

static axis axis_of(int in_size, int out_size, pdl_resample f) {
    axis a = {.in_size = in_size, .out_size = out_size};
    a.filter = f == PDL_RESAMPLE_BICUBIC ? filter_bicubic : filter_bilinear;
    a.scale = (double)in_size / out_size;
    a.filterscale = a.scale < 1.0 ? 1.0 : a.scale;
    a.support = (f == PDL_RESAMPLE_BICUBIC ? 2.0 : 1.0) * a.filterscale;
    a.ksize = (int)ceil(a.support) * 2 + 1;
    return a;
}

/* The inputs output xx reads: [*first, *first + *n). */
static void axis_span(const axis *a, int xx, int *first, int *n) {
    double center = (xx + 0.5) * a->scale;
    int xmin = (int)(center - a->support + 0.5), xmax = (int)(center + a->support + 0.5);
    if (xmin < 0) xmin = 0;
    if (xmax > a->in_size) xmax = a->in_size;
    *first = xmin, *n = xmax - xmin;
}

/* Fixed-point weights of outputs [first, first + count): output first + i
 * reads inputs bounds[2i] .. + bounds[2i+1] with weights k[i * ksize ..];
 * w is room for ksize doubles. Each output's weights depend on it alone,
 * so any window of outputs gets PIL's numbers. */
static void coefficients(const axis *a, int first, int count, int *bounds, int32_t *kk, double *w) {
    double ss = 1.0 / a->filterscale;
    for (int i = 0; i < count; i++) {
        int xx = first + i, xmin, n;
        double center = (xx + 0.5) * a->scale, ww = 0;
        axis_span(a, xx, &xmin, &n);
        for (int x = 0; x < n; x++) {
            w[x] = a->filter((x + xmin - center + 0.5) * ss);
            ww += w[x];
        }
        for (int x = 0; x < n; x++) {
            double v = ww != 0.0 ? w[x] / ww : w[x];
            kk[(size_t)i * a->ksize + x] =
                (int32_t)(v < 0 ? v * (1 << PRECISION_BITS) - 0.5 : v * (1 << PRECISION_BITS) + 0.5);
        }
        bounds[2 * i] = xmin, bounds[2 * i + 1] = n;
    }
}

static uint8_t clip8(int32_t v) {
    v >>= PRECISION_BITS;
    return v < 0 ? 0 : v > 255 ? 255 : (uint8_t)v;
}

/* What a resize reads: an image of w x h 8-bit RGB pixels at (x0, y0) on a
 * canvas of cw x ch whose other pixels are `fill` (LLaVA's pad to a
 * square); without padding the canvas is the image. */
typedef struct canvas {
    const uint8_t *rgb; /* (h, w, 3) */
    int w, h;
    int cw, ch, x0, y0;
    uint8_t fill[3];
} canvas;

static canvas canvas_of(const uint8_t *rgb, int w, int h) {
    return (canvas){.rgb = rgb, .w = w, .h = h, .cw = w, .ch = h};
}

static bool canvas_padded(const canvas *c) { return c->cw != c->w || c->ch != c->h; }

/* What part of the canvas resized to ow x oh is wanted: columns
 * [wx, wx + ww), rows [wy, wy + wh). A center crop needs only its window,
 * so a shortest-edge resize of a thin strip (300000 x 1 to 100800000 x 336
 * for a crop of 336) costs what the crop costs. */
typedef struct window {
    int ow, oh, wx, wy, ww, wh;
} window;

/* A resize's working memory, each piece on its own cache lines. Its size
 * grows with the window and the filter's taps (4 times the shrink factor
 * of each axis: the canvas's sides over the output's), never with the
 * canvas's area: the horizontal pass keeps only the image rows that the
 * vertical pass's current taps read (a ring of at most ksize rows), and the
 * pad's rows and columns, all alike, enter the sums as one weight each. */
typedef struct resize_plan {
    axis ax, ay;
    bool need_h, need_v;      /* PIL resamples an axis only when its size changes */
    int ring_rows, ring_first;/* image rows held at once; the canvas row of the first one the window reads */
    size_t bx, kx, kfx;       /* horizontal: bounds, weights, weight on the pad per output (bytes) */
    size_t by, ky, kfy;       /* vertical: the same */
    size_t w, ring, fill;     /* the filter's doubles, the ring of image rows, a pad row's result */
} resize_plan;

static resize_plan plan_resize(const canvas *c, const window *win, pdl_resample f) {
    resize_plan p = {.need_h = win->ow != c->cw, .need_v = win->oh != c->ch};
    p.ax = axis_of(c->cw, win->ow, f), p.ay = axis_of(c->ch, win->oh, f);
    size_t ks = 0, line = (size_t)win->ww * 3;
    if (p.need_h) {
        p.bx = scratch_piece((size_t)win->ww * 2 * sizeof(int));
        p.kx = scratch_piece((size_t)win->ww * p.ax.ksize * sizeof(int32_t));
        p.kfx = scratch_piece((size_t)win->ww * sizeof(int32_t));
        ks = (size_t)p.ax.ksize;
    }
    if (p.need_v) {
        p.by = scratch_piece((size_t)win->wh * 2 * sizeof(int));
        p.ky = scratch_piece((size_t)win->wh * p.ay.ksize * sizeof(int32_t));
        p.kfy = scratch_piece((size_t)win->wh * sizeof(int32_t));
        if ((size_t)p.ay.ksize > ks) ks = (size_t)p.ay.ksize;
        /* the image rows the window's taps read: [a, b + m) on the canvas, cut to the image */
        int a, n, b, m;
        axis_span(&p.ay, win->wy, &a, &n);
        axis_span(&p.ay, win->wy + win->wh - 1, &b, &m);
        int lo = a > c->y0 ? a : c->y0, hi = b + m < c->y0 + c->h ? b + m : c->y0 + c->h;
        p.ring_first = lo;
        p.ring_rows = hi > lo ? (hi - lo < p.ay.ksize ? hi - lo : p.ay.ksize) : 0;
        p.ring = scratch_piece((size_t)p.ring_rows * line);
    }
    p.w = scratch_piece(ks * sizeof(double));
    if (canvas_padded(c)) p.fill = scratch_piece(line);
    return p;
}

static size_t plan_bytes(const resize_plan *p) {
    return p->bx + p->kx + p->kfx + p->by + p->ky + p->kfy + p->w + p->ring + p->fill;
}

/* Each output's weight on taps outside [first, first + n) (the pad). */
static void pad_weights(const int *bounds, const int32_t *kk, int ksize, int count, int first, int n, int32_t *kf) {
    for (int i = 0; i < count; i++) {
        int32_t sum = 0;
        for (int t = 0; t < bounds[2 * i + 1]; t++) {
            int at = bounds[2 * i] + t;
            if (at < first || at >= first + n) sum += kk[(size_t)i * ksize + t];
        }
        kf[i] = sum;
    }
}

/* The resize's state over its working memory. */
typedef struct resizer {
    const canvas *c;
    const window *win;
    resize_plan p;
    int *bx, *by;
    int32_t *kx, *ky, *kfx, *kfy;
    uint8_t *ring, *fill; /* fill: a pad row through the horizontal pass (ww, 3) */
    int next;             /* the next canvas row to enter the ring */
} resizer;

/* Canvas row y, an image row, through the horizontal pass into out (ww, 3).
 * Integer sums are exact in any order, so the pad's taps enter as
 * fill * (their weights' sum), as PIL's per-tap sum would have it. */
static void horizontal_row(const resizer *r, int y, uint8_t *out) {
    const canvas *c = r->c;
    const window *win = r->win;
    const uint8_t *src = c->rgb + (size_t)(y - c->y0) * c->w * 3;
    for (int x = 0; x < win->ww; x++) {
        uint8_t *o = out + (size_t)x * 3;
        if (!r->p.need_h) {
            int col = win->wx + x - c->x0;
            memcpy(o, col >= 0 && col < c->w ? src + (size_t)col * 3 : c->fill, 3);
            continue;
        }
        int b = r->bx[2 * x], n = r->bx[2 * x + 1];
        int lo = b > c->x0 ? b : c->x0, hi = b + n < c->x0 + c->w ? b + n : c->x0 + c->w;
        if (lo >= hi) { /* all pad */
            memcpy(o, r->fill + (size_t)x * 3, 3);
            continue;
        }
        const int32_t *k = r->kx + (size_t)x * r->p.ax.ksize + (lo - b);
        const uint8_t *in = src + (size_t)(lo - c->x0) * 3;
        for (int ch = 0; ch < 3; ch++) {
            int32_t ss = (1 << (PRECISION_BITS - 1)) + c->fill[ch] * r->kfx[x];
            for (int i = 0; i < hi - lo; i++) ss += in[(size_t)i * 3 + ch] * k[i];
            o[ch] = clip8(ss);
        }
    }
}

static uint8_t *ring_row(const resizer *r, int y) {
    return r->ring + (size_t)((y - r->p.ring_first) % r->p.ring_rows) * r->win->ww * 3;
}

/* The window of PIL's Image.resize of the canvas into dst (wh, ww, 3), with
 * working memory `work` of plan_bytes: the horizontal pass first, over the
 * rows the vertical pass reads (as PIL does), 8-bit between the passes. */
static void resize_window(const canvas *c, const window *win, pdl_resample f, uint8_t *dst, uint8_t *work) {
    resizer r = {.c = c, .win = win, .p = plan_resize(c, win, f)};
    uint8_t *at = work;
    r.bx = (int *)at, at += r.p.bx;
    r.kx = (int32_t *)at, at += r.p.kx;
    r.kfx = (int32_t *)at, at += r.p.kfx;
    r.by = (int *)at, at += r.p.by;
    r.ky = (int32_t *)at, at += r.p.ky;
    r.kfy = (int32_t *)at, at += r.p.kfy;
    double *w = (double *)at;
    at += r.p.w;
    r.ring = at, at += r.p.ring;
    r.fill = at;
    size_t line = (size_t)win->ww * 3;
    if (r.p.need_h) {
        coefficients(&r.p.ax, win->wx, win->ww, r.bx, r.kx, w);
        pad_weights(r.bx, r.kx, r.p.ax.ksize, win->ww, c->x0, c->w, r.kfx);
    }
    if (r.p.need_v) {
        coefficients(&r.p.ay, win->wy, win->wh, r.by, r.ky, w);
        pad_weights(r.by, r.ky, r.p.ay.ksize, win->wh, c->y0, c->h, r.kfy);
    }
    if (canvas_padded(c)) /* a pad row: every tap the fill */
        for (int x = 0; x < win->ww; x++)
            for (int ch = 0; ch < 3; ch++) {
                int32_t all = 0;
                for (int t = 0; r.p.need_h && t < r.bx[2 * x + 1]; t++) all += r.kx[(size_t)x * r.p.ax.ksize + t];
                r.fill[(size_t)x * 3 + ch] =
                    r.p.need_h ? clip8((1 << (PRECISION_BITS - 1)) + c->fill[ch] * all) : c->fill[ch];
            }
    if (!r.p.need_v) { /* the window's canvas rows, horizontally resampled */
        for (int y = 0; y < win->wh; y++) {
            int cy = win->wy + y;
            if (cy >= c->y0 && cy < c->y0 + c->h) horizontal_row(&r, cy, dst + (size_t)y * line);
            else memcpy(dst + (size_t)y * line, r.fill, line);
        }
        return;
    }
    r.next = r.p.ring_first;
    for (int y = 0; y < win->wh; y++) {
        const int32_t *k = r.ky + (size_t)y * r.p.ay.ksize;
        int b = r.by[2 * y], n = r.by[2 * y + 1];
        int lo = b > c->y0 ? b : c->y0, hi = b + n < c->y0 + c->h ? b + n : c->y0 + c->h;
        uint8_t *o = dst + (size_t)y * line;
        if (lo >= hi) { /* all pad */
            for (size_t i = 0; i < line; i++)
                o[i] = clip8((1 << (PRECISION_BITS - 1)) + r.fill[i] * r.kfy[y]);
            continue;
        }
        for (; r.next < hi; r.next++) horizontal_row(&r, r.next, ring_row(&r, r.next));
        for (size_t i = 0; i < line; i++) {
            int32_t ss = 1 << (PRECISION_BITS - 1);
            if (r.kfy[y]) ss += r.fill[i] * r.kfy[y];
            for (int t = lo; t < hi; t++) ss += ring_row(&r, t)[i] * k[t - b];
            o[i] = clip8(ss);
        }
    }
}

/* A whole resize of a canvas: its window is everything. */
static window whole(int ow, int oh) { return (window){.ow = ow, .oh = oh, .ww = ow, .wh = oh}; }

/* Takes `need` bytes of s, or fails saying what they were for. */
static uint8_t *take(pdl_scratch *s, size_t need, const char *what, int w, int h, pdl_error *err) {
    uint8_t *p = scratch_take(s, need);
    if (!p)
        err_fail(err, "image of %d x %d pixels: out of memory for %zu bytes of image scratch (%s)", w, h, need, what);
    return p;
}

int img_resize_rgb8(const uint8_t *src, int w, int h, uint8_t *dst, int ow, int oh, pdl_resample f, pdl_scratch *s,
                    pdl_error *err) {
    canvas c = canvas_of(src, w, h);
    window win = whole(ow, oh);
    resize_plan p = plan_resize(&c, &win, f);
    uint8_t *work = take(s, plan_bytes(&p), "resize", w, h, err);
    if (!work) return -1;
    resize_window(&c, &win, f, dst, work);
    return 0;
}

/* ---- one tile ---------------------------------------------------------------- */

void img_shortest_edge_size(int w, int h, int size, int *ow, int *oh) {
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

void img_pad_color_of_mean(const float mean[3], uint8_t color[3]) {
    for (int c = 0; c < 3; c++) {
        double v = (double)mean[c] * 255.0;
        color[c] = (uint8_t)(v <= 0 ? 0 : v >= 255 ? 255 : (int)v);
    }
}

/* transformers' center_crop origin: (size - crop) // 2, floor also when
 * negative (the crop is larger: padding). */
static int crop_origin(int size, int crop) {
    int d = size - crop;
    return d >= 0 ? d / 2 : -((-d + 1) / 2);
}

int img_preprocess_tile(const pdl_image_proc *p, const uint8_t *rgb, int w, int h, float *out, pdl_scratch *s,
                        pdl_error *err) {
    if (w <= 0 || h <= 0) return err_fail(err, "image of %d x %d pixels is empty", w, h);
    canvas c = canvas_of(rgb, w, h);
    if (p->pad_square && w != h) { /* pad_to_square / expand2square: centred on the longer side's square */
        int side = w > h ? w : h;
        c.cw = c.ch = side, c.x0 = (side - w) / 2, c.y0 = (side - h) / 2;
        memcpy(c.fill, p->pad_color, 3);
    }
    int rw, rh;
    if (p->shortest_edge) {
        int shorter = c.cw <= c.ch ? c.cw : c.ch, longer = c.cw <= c.ch ? c.ch : c.cw;
        if ((double)p->size * longer / shorter > (double)(INT_MAX / 4))
            return err_fail(err, "image of %d x %d pixels: its shortest-edge resize to %d is too large", w, h, p->size);
        img_shortest_edge_size(c.cw, c.ch, p->size, &rw, &rh);
    } else {
        rw = p->crop_w, rh = p->crop_h;
    }
    if (rw <= 0 || rh <= 0) return err_fail(err, "image of %d x %d pixels resizes to nothing", w, h);
    /* only the crop's part of the resized image is computed */
    int top = crop_origin(rh, p->crop_h), left = crop_origin(rw, p->crop_w);
    int x0 = left > 0 ? left : 0, y0 = top > 0 ? top : 0;
    int x1 = left + p->crop_w < rw ? left + p->crop_w : rw, y1 = top + p->crop_h < rh ? top + p->crop_h : rh;
    window win = {.ow = rw, .oh = rh, .wx = x0, .wy = y0, .ww = x1 - x0, .wh = y1 - y0};
    resize_plan plan = plan_resize(&c, &win, p->resample);
    size_t region = scratch_piece((size_t)win.ww * win.wh * 3);
    uint8_t *r = take(s, region + plan_bytes(&plan), "resize and crop", w, h, err);
    if (!r) return -1;
    resize_window(&c, &win, p->resample, r, r + region);
    normalize_tile(p, r, win.ww, win.wh, left - x0, top - y0, p->crop_w, p->crop_h, out);
    return 0;
}

/* ---- LLaVA 1.6 any-resolution ------------------------------------------------ */

void img_anyres_best(const pdl_image_proc *p, int h, int w, int *best_h, int *best_w) {
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

int img_anyres_tiles(const pdl_image_proc *p, const uint8_t *rgb, int w, int h, float **tiles, int *n_tiles,
                     int *grid_h, int *grid_w, pdl_scratch *s, pdl_error *err) {
    *tiles = NULL;
    int th, tw;
    img_anyres_best(p, h, w, &th, &tw);
    int gh = th / p->crop_h, gw = tw / p->crop_w;
    size_t tile = (size_t)3 * p->crop_h * p->crop_w;
    int n = 1 + gh * gw;
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
    canvas c = canvas_of(rgb, w, h);
    window to_tile = whole(p->crop_w, p->crop_h), to_grid = whole(nw, nh);
    resize_plan a = plan_resize(&c, &to_tile, p->resample), b = plan_resize(&c, &to_grid, p->resample);
    size_t work = plan_bytes(&a) > plan_bytes(&b) ? plan_bytes(&a) : plan_bytes(&b);
    size_t square_bytes = scratch_piece(tile), resized_bytes = scratch_piece((size_t)nw * nh * 3);
    size_t padded_bytes = scratch_piece((size_t)tw * th * 3);
    uint8_t *square = take(s, square_bytes + resized_bytes + padded_bytes + work, "any-resolution tiles", w, h, err);
    if (!square) return -1;
    uint8_t *resized = square + square_bytes, *padded = resized + resized_bytes, *scratch = padded + padded_bytes;
    float *out = malloc((size_t)n * tile * sizeof *out);
    if (!out) return err_fail(err, "out of memory for the %d x %d tiles of an image", gh, gw);
    /* tile 0: the whole image squashed to one tile (resize to (size, size)),
     * then the processor's own resize (a no-op at that size) and crop */
    resize_window(&c, &to_tile, p->resample, square, scratch);
    normalize_tile(p, square, p->crop_w, p->crop_h, 0, 0, p->crop_w, p->crop_h, out);
    resize_window(&c, &to_grid, p->resample, resized, scratch);
    memset(padded, 0, (size_t)tw * th * 3);
    int px = (tw - nw) / 2, py = (th - nh) / 2;
    for (int y = 0; y < nh; y++)
        memcpy(padded + ((size_t)(py + y) * tw + px) * 3, resized + (size_t)y * nw * 3, (size_t)nw * 3);
    for (int i = 0; i < gh; i++)
        for (int j = 0; j < gw; j++)
            normalize_tile(p, padded, tw, th, j * p->crop_w, i * p->crop_h, p->crop_w, p->crop_h,
                           out + (size_t)(1 + i * gw + j) * tile);
    *tiles = out;
    *n_tiles = n;
    *grid_h = gh, *grid_w = gw;
    return 0;
}

/* Python's int(round(x, 7)) for the positive values here. */
static int round7_int(double x) { return (int)(floor(x * 1e7 + 0.5) / 1e7); }

void img_anyres_unpadded(int h, int w, int grid_h, int grid_w, int patches, int *rows, int *cols, int *row0,
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

int img_smart_resize(int h, int w, int factor, long min_pixels, long max_pixels, int *out_h, int *out_w,
                     pdl_error *err) {
    if (h <= 0 || w <= 0 || factor <= 0) return err_fail(err, "image of %d x %d pixels: nothing to resize", w, h);
    double big = h > w ? h : w, small = h > w ? w : h;
    if (big / small > 200)
        return err_fail(err, "image of %d x %d pixels: aspect ratio %.1f is over 200 (Qwen2-VL's limit)", w, h,
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
        return err_fail(err, "image of %d x %d pixels resizes to %.0f x %.0f: too large", w, h, wb, hb);
    *out_h = (int)hb, *out_w = (int)wb;
    return 0;
}

int img_qwen_patches(const pdl_image_proc *p, const uint8_t *rgb, int w, int h, float **patches, int *grid_h,
                     int *grid_w, pdl_scratch *s, pdl_error *err) {
    *patches = NULL;
    int ps = p->patch, m = p->merge, tp = p->temporal, rh, rw;
    if (ps <= 0 || m <= 0 || tp <= 0) return err_fail(err, "Qwen2-VL processor: patch, merge and temporal sizes must be positive");
    if (img_smart_resize(h, w, ps * m, p->min_pixels, p->max_pixels, &rh, &rw, err)) return -1;
    canvas c = canvas_of(rgb, w, h);
    window win = whole(rw, rh);
    resize_plan plan = plan_resize(&c, &win, p->resample);
    size_t r_bytes = scratch_piece((size_t)rw * rh * 3);
    size_t norm_bytes = scratch_piece((size_t)rw * rh * 3 * sizeof(float));
    uint8_t *r = take(s, r_bytes + norm_bytes + plan_bytes(&plan), "dynamic resolution", w, h, err);
    if (!r) return -1;
    float *norm = (float *)(r + r_bytes);
    int gh = rh / ps, gw = rw / ps;
    size_t row = (size_t)3 * tp * ps * ps;
    float *out = malloc((size_t)gh * gw * row * sizeof *out);
    if (!out) return err_fail(err, "out of memory for the %d x %d patches of an image", gw, gh);
    resize_window(&c, &win, p->resample, r, r + r_bytes + norm_bytes);
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
    *patches = out, *grid_h = gh, *grid_w = gw;
    return 0;
}
