/*
 * image.h - a decoded image as the vision models take it: 8-bit RGB pixels,
 * row-major, plus a 128-bit hash of the bytes it was decoded from (the key
 * of the encoder cache and of prefix-cache blocks holding its rows).
 *
 * What it is for: image_decode.c fills it from PNG, JPEG or WebP bytes;
 * media_url.c from a data: or file:// URL; image_preprocess.c reads it.
 * What it is not for: pixel tensors (those are floats, per processor).
 */
#ifndef PDL_VISION_IMAGE_H
#define PDL_VISION_IMAGE_H

#include <stdint.h>

#include "pagedlm.h"

struct pdl_image {
    int width, height;
    uint8_t *rgb;           /* [height][width][3] */
    uint64_t hash_lo, hash_hi; /* XXH3-128 of the encoded bytes */
};

/* The images accepted, checked from the header before any pixel is
 * allocated (a decompression bomb or an absurd shape costs nothing):
 *   - at most 8192 x 8192 pixels in all;
 *   - at most 16384 pixels on a side (WebP's own limit is 16383);
 *   - the long side at most 200 times the short one, for every model family
 *     (Qwen2-VL's processor refuses more; a thinner strip has nothing a
 *     square tile could show, and its resize would be all intermediate).
 * So a decoded image holds at most 201 MB of RGB; decoding takes at most 4
 * bytes a pixel for it (RGBA before compositing), plus what a library needs
 * of its own: libjpeg's coefficients of a progressive JPEG (6 bytes a
 * pixel, held to that), libwebp's ARGB of a lossless WebP (4)
 * (image_decode.c). */
#define PDL_IMAGE_MAX_PIXELS ((int64_t)8192 * 8192)
#define PDL_IMAGE_MAX_SIDE 16384
#define PDL_IMAGE_MAX_ASPECT 200

#endif
