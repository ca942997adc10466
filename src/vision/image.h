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

/* Largest image accepted, in pixels (a decompression bomb is refused before
 * its pixels are allocated): 8192 x 8192. */
#define PDL_IMAGE_MAX_PIXELS ((int64_t)8192 * 8192)

#endif
