/*
 * image_preprocess.h - what a model's image processor does to an image
 * before the vision tower sees it: resize with the processor's filter,
 * center crop, rescale to [0, 1] and normalise with its mean and std, as
 * transformers' image processors (CLIPImageProcessor for LLaVA 1.5,
 * LlavaNextImageProcessor's any-resolution tiling for LLaVA 1.6,
 * Gemma3ImageProcessor) do it with PIL.
 *
 * Pixel tensors are float (3, height, width), channel-major, as the
 * processors return them (pixel_values).
 *
 * Working memory (filter weights, the resize's intermediate rows, the
 * resized pixels) is one take of a caller's scratch (kernels/scratch.h):
 * bounded by what the output needs, never by an intermediate size (a
 * center crop computes only its window of the resize), and a take that
 * fails is an error. Output tensors the functions return are malloc'ed.
 */
#ifndef PDL_VISION_IMAGE_PREPROCESS_H
#define PDL_VISION_IMAGE_PREPROCESS_H

#include <stdbool.h>
#include <stdint.h>

#include "kernels/scratch.h"
#include "pagedlm.h"

/* PIL's filters, with PIL's numbers (the processors' `resample`). */
typedef enum pdl_resample {
    PDL_RESAMPLE_BILINEAR = 2, /* triangle, support 1 */
    PDL_RESAMPLE_BICUBIC = 3,  /* Keys cubic with a = -0.5, support 2 */
} pdl_resample;

#define PDL_MAX_PINPOINTS 32

typedef struct pdl_image_proc {
    bool shortest_edge;    /* resize so the shorter side is `size` (aspect kept), then center crop to crop_w x
                            * crop_h (CLIP); else resize to crop_w x crop_h exactly (Gemma 3) */
    int size;              /* shortest_edge */
    int crop_w, crop_h;    /* the tile the tower takes */
    pdl_resample resample;
    /* LLaVA 1.5's pad to a square before the resize (the original's
     * image_aspect_ratio "pad", transformers' LlavaImageProcessor do_pad,
     * llama.cpp for mmproj LLaVA): the image centred on a square of its
     * longer side filled with pad_color (int(mean * 255) per channel) */
    bool pad_square;
    uint8_t pad_color[3];
    double rescale;        /* 1 / 255 */
    float mean[3], std[3];
    int n_pinpoints;       /* LLaVA 1.6 any-resolution: candidate (height, width) grids; 0 = one tile */
    int pinpoints[PDL_MAX_PINPOINTS][2];
    /* Qwen2-VL's dynamic resolution (Qwen2VLImageProcessor; patch > 0): the
     * image resized by smart_resize to multiples of patch * merge within
     * [min_pixels, max_pixels], cut into patch x patch patches repeated
     * `temporal` times in time */
    int patch, merge, temporal;
    long min_pixels, max_pixels;
} pdl_image_proc;

/* PIL's Image.resize of 8-bit RGB: separable convolution, horizontal pass
 * then vertical, each with PIL's filter support widened by the scale when
 * shrinking (antialiasing), coefficients in 22-bit fixed point, 8-bit
 * results between and after the passes. dst is (oh, ow, 3). -1 when the
 * scratch cannot be had. */
int img_resize_rgb8(const uint8_t *src, int w, int h, uint8_t *dst, int ow, int oh, pdl_resample filter,
                    pdl_scratch *s, pdl_error *err);

/* The processor's output size for a shortest-edge resize of w x h
 * (transformers' get_resize_output_image_size, default_to_square=False). */
void img_shortest_edge_size(int w, int h, int size, int *ow, int *oh);

/* The colour of LLaVA's square pad: int(x * 255) of each channel's mean, as
 * transformers and the original LLaVA write it (truncated; (122, 116, 104)
 * for CLIP's mean, llama.cpp's constant), held to [0, 255]. */
void img_pad_color_of_mean(const float mean[3], uint8_t color[3]);

/* One tile through the processor: pad to a square (pad_square), resize,
 * center crop (zero padding where the image is smaller than the crop),
 * rescale, normalise. out is (3, crop_h, crop_w). Only the crop's window
 * of the resize is computed. */
int img_preprocess_tile(const pdl_image_proc *p, const uint8_t *rgb, int w, int h, float *out, pdl_scratch *s,
                        pdl_error *err);

/* LLaVA 1.6: the grid (height, width) in pixels that select_best_resolution
 * picks for an image of h x w. */
void img_anyres_best(const pdl_image_proc *p, int h, int w, int *best_h, int *best_w);

/* LLaVA 1.6: the tiles of an image: first the whole image resized to a
 * square crop_h x crop_w tile, then the best grid's tiles in row-major order
 * (the image resized into the grid keeping its aspect, padded with black to
 * the grid's size, cut into crop-sized tiles). *tiles is malloc'ed,
 * n_tiles x (3, crop_h, crop_w); *grid_h, *grid_w the grid in tiles. */
int img_anyres_tiles(const pdl_image_proc *p, const uint8_t *rgb, int w, int h, float **tiles, int *n_tiles,
                     int *grid_h, int *grid_w, pdl_scratch *s, pdl_error *err);

/* LLaVA 1.6: rows and columns of patch features kept after unpadding the
 * grid of grid_h x grid_w tiles of side `patches` patches each (what
 * unpad_image keeps for an image of h x w). */
void img_anyres_unpadded(int h, int w, int grid_h, int grid_w, int patches, int *rows, int *cols, int *row0,
                         int *col0);

/* Qwen2-VL's smart_resize: height and width rounded (half to even, as
 * Python's round) to multiples of factor; when their product passes
 * max_pixels both are scaled down by sqrt(h * w / max_pixels) and floored
 * to multiples (at least factor), when it is under min_pixels scaled up by
 * sqrt(min_pixels / (h * w)) and ceiled. Fails for an aspect ratio over 200. */
int img_smart_resize(int h, int w, int factor, long min_pixels, long max_pixels, int *out_h, int *out_w,
                     pdl_error *err);

/* Qwen2-VL's pixel patches of an image: smart_resize (factor patch * merge),
 * PIL's resize with p->resample, rescale, normalise; then the patches in
 * the processor's flattened order: merge windows (merge x merge
 * neighbouring patches) in row-major order over the image, the patches of
 * a window row-major inside it, each patch (3, temporal, patch, patch) with
 * the still image repeated in time. *patches is malloc'ed,
 * (grid_h * grid_w, 3 * temporal * patch * patch); grid_h, grid_w count
 * patches. */
int img_qwen_patches(const pdl_image_proc *p, const uint8_t *rgb, int w, int h, float **patches, int *grid_h,
                     int *grid_w, pdl_scratch *s, pdl_error *err);

#endif
