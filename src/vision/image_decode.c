/*
 * image_decode.c - PNG, JPEG and WebP bytes -> pdl_image (8-bit RGB), with
 * Debian's libpng, libjpeg-turbo and libwebp.
 *
 * The format is told by its signature, never by a name or a MIME type.
 * Corrupt or truncated input fails with the library's reason and, where the
 * reader knows it, the byte offset; a truncated JPEG (which libjpeg would
 * finish in grey with a warning) is an error, as in PIL. Pixels with alpha
 * are composited onto white, as transformers' convert_to_rgb does; 16-bit
 * channels keep their high byte (PIL's conversion to 8-bit RGB).
 *
 * Memory is bounded from the header. Images outside image.h's limits
 * (pixels, side, aspect ratio) are refused before anything is allocated for
 * their pixels. Pixels without alpha are decoded straight into the image's
 * RGB; pixels with alpha into an RGBA buffer that is composited in place and
 * shrunk to RGB, so the peak is 4 bytes a pixel. libpng is held to the side
 * limit and 8 MB per ancillary chunk; libjpeg's one large allocation (the
 * coefficients of a progressive file) to what three components of the
 * header's size need; every allocation is checked and fails as an error.
 *
 * What it is not for: resizing or normalising (image_preprocess.c).
 */
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdbool.h>
#include <stdio.h> /* before jpeglib.h, which needs FILE and size_t */
#include <stdlib.h>
#include <jpeglib.h>
#include <jerror.h>
#include <png.h>
#include <string.h>
#include <webp/decode.h>
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include "util/error.h"
#include "util/file_map.h"
#include "vision/image.h"

/* Largest encoded image read from a file or a URL. */
#define IMAGE_MAX_BYTES ((size_t)64 << 20)

void pdl_image_free(pdl_image *img) {
    if (!img) return;
    free(img->rgb);
    free(img);
}

int pdl_image_width(const pdl_image *img) { return img->width; }
int pdl_image_height(const pdl_image *img) { return img->height; }

/* image.h's limits on a size read from a header. */
static int check_size(const char *what, const char *fmt, long long w, long long h, pdl_error *err) {
    if (w <= 0 || h <= 0) return err_fail(err, "%s: %s image of %lld x %lld pixels is empty", what, fmt, w, h);
    if (w * h > PDL_IMAGE_MAX_PIXELS)
        return err_fail(err, "%s: %s image of %lld x %lld pixels exceeds the limit of %lld pixels", what, fmt, w, h,
                        (long long)PDL_IMAGE_MAX_PIXELS);
    long long lo = w < h ? w : h, hi = w < h ? h : w;
    if (hi > (long long)PDL_IMAGE_MAX_ASPECT * lo)
        return err_fail(err, "%s: %s image of %lld x %lld pixels: its aspect ratio %.1f:1 is over the limit of %d:1",
                        what, fmt, w, h, (double)hi / (double)lo, PDL_IMAGE_MAX_ASPECT);
    if (hi > PDL_IMAGE_MAX_SIDE)
        return err_fail(err, "%s: %s image of %lld x %lld pixels: a side of %lld pixels exceeds the limit of %d", what,
                        fmt, w, h, hi, PDL_IMAGE_MAX_SIDE);
    return 0;
}

/* An image of w x h pixels with room for `channels` bytes a pixel (4: RGBA
 * to be composited in place by image_rgba_to_rgb). NULL when out of memory. */
static pdl_image *image_new(int w, int h, int channels) {
    pdl_image *img = calloc(1, sizeof *img);
    if (!img) return NULL;
    img->width = w;
    img->height = h;
    img->rgb = malloc((size_t)w * (size_t)h * (size_t)channels);
    if (!img->rgb) {
        free(img);
        return NULL;
    }
    return img;
}

/* The image's RGBA pixels -> RGB over white (c a / 255 + 255 (1 - a / 255),
 * rounded), in place: pixel i is read whole before bytes [3i, 3i + 3) are
 * written, and later pixels lie at 4j > 3i + 2. Then the buffer shrinks to
 * RGB. */
static void image_rgba_to_rgb(pdl_image *img) {
    uint8_t *p = img->rgb;
    size_t n = (size_t)img->width * (size_t)img->height;
    for (size_t i = 0; i < n; i++) {
        unsigned r = p[4 * i], g = p[4 * i + 1], b = p[4 * i + 2], a = p[4 * i + 3], bg = 255u * (255u - a) + 127u;
        p[3 * i] = (uint8_t)((r * a + bg) / 255u);
        p[3 * i + 1] = (uint8_t)((g * a + bg) / 255u);
        p[3 * i + 2] = (uint8_t)((b * a + bg) / 255u);
    }
    uint8_t *shrunk = realloc(p, n * 3); /* a shrink: when it fails, the larger buffer is as good */
    if (shrunk) img->rgb = shrunk;
}

/* ---- PNG ------------------------------------------------------------------ */

typedef struct png_reader {
    const uint8_t *data;
    size_t size, pos;
    char message[512];
    jmp_buf jmp;
} png_reader;

static void png_read_mem(png_structp png, png_bytep out, png_size_t n) {
    png_reader *r = png_get_io_ptr(png);
    if (n > r->size - r->pos) {
        snprintf(r->message, sizeof r->message, "truncated: %zu bytes needed at offset %zu, the data ends at %zu",
                 (size_t)n, r->pos, r->size);
        longjmp(r->jmp, 1);
    }
    memcpy(out, r->data + r->pos, n);
    r->pos += n;
}

static void png_on_error(png_structp png, png_const_charp msg) {
    png_reader *r = png_get_error_ptr(png);
    if (!r->message[0]) snprintf(r->message, sizeof r->message, "%s (near offset %zu)", msg, r->pos);
    longjmp(r->jmp, 1);
}

static void png_on_warning(png_structp png, png_const_charp msg) { (void)png, (void)msg; }

/* Ancillary chunks (iCCP, zTXt, ...) are read into memory whole: at most
 * this many bytes each, and this many of them. */
#define PNG_CHUNK_MAX_BYTES ((png_alloc_size_t)8 << 20)
#define PNG_CHUNK_MAX_COUNT 1000

static int decode_png(pdl_image **out, const uint8_t *data, size_t n, const char *what, pdl_error *err) {
    /* the size from IHDR (always the first chunk) before libpng reads on */
    if (n >= 24 && memcmp(data + 12, "IHDR", 4) == 0) {
        uint32_t w = (uint32_t)data[16] << 24 | (uint32_t)data[17] << 16 | (uint32_t)data[18] << 8 | data[19];
        uint32_t h = (uint32_t)data[20] << 24 | (uint32_t)data[21] << 16 | (uint32_t)data[22] << 8 | data[23];
        if (check_size(what, "PNG", (long long)w, (long long)h, err)) return -1;
    }
    png_reader r = {.data = data, .size = n};
    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &r, png_on_error, png_on_warning);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    if (!png || !info) {
        png_destroy_read_struct(&png, NULL, NULL);
        return err_fail(err, "%s: out of memory for the PNG decoder", what);
    }
    /* volatile: changed after setjmp, read after a longjmp */
    png_bytep *volatile rows = NULL;
    pdl_image *volatile img = NULL;
    if (setjmp(r.jmp)) {
        png_destroy_read_struct(&png, &info, NULL);
        free(rows);
        pdl_image_free(img);
        return err_fail(err, "%s: corrupt PNG: %s", what, r.message);
    }
    png_set_read_fn(png, &r, png_read_mem);
    png_set_crc_action(png, PNG_CRC_ERROR_QUIT, PNG_CRC_ERROR_QUIT);
    png_set_user_limits(png, PDL_IMAGE_MAX_SIDE, PDL_IMAGE_MAX_SIDE);
    png_set_chunk_malloc_max(png, PNG_CHUNK_MAX_BYTES);
    png_set_chunk_cache_max(png, PNG_CHUNK_MAX_COUNT);
    png_read_info(png, info);
    png_uint_32 w = png_get_image_width(png, info), h = png_get_image_height(png, info);
    if (check_size(what, "PNG", (long long)w, (long long)h, err)) {
        png_destroy_read_struct(&png, &info, NULL);
        return -1;
    }
    int color = png_get_color_type(png, info), depth = png_get_bit_depth(png, info);
    bool alpha = (color & PNG_COLOR_MASK_ALPHA) || png_get_valid(png, info, PNG_INFO_tRNS);
    /* everything to 8-bit RGB, or RGBA when there is alpha to composite */
    if (depth == 16) png_set_strip_16(png);
    if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
    if (color == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
    if (png_get_valid(png, info, PNG_INFO_tRNS)) png_set_tRNS_to_alpha(png);
    if (color == PNG_COLOR_TYPE_GRAY || color == PNG_COLOR_TYPE_GRAY_ALPHA) png_set_gray_to_rgb(png);
    png_set_interlace_handling(png);
    png_read_update_info(png, info);
    int channels = alpha ? 4 : 3;
    if (png_get_rowbytes(png, info) != (size_t)w * channels) {
        snprintf(r.message, sizeof r.message, "unexpected row size %zu after conversion to %s",
                 (size_t)png_get_rowbytes(png, info), alpha ? "RGBA" : "RGB");
        longjmp(r.jmp, 1);
    }
    rows = malloc((size_t)h * sizeof *rows);
    img = image_new((int)w, (int)h, channels);
    if (!rows || !img) {
        snprintf(r.message, sizeof r.message, "out of memory for %u x %u pixels", (unsigned)w, (unsigned)h);
        longjmp(r.jmp, 1);
    }
    for (png_uint_32 y = 0; y < h; y++) rows[y] = img->rgb + (size_t)y * w * channels;
    png_read_image(png, rows);
    png_read_end(png, NULL);
    png_destroy_read_struct(&png, &info, NULL);
    free(rows);
    if (alpha) image_rgba_to_rgb(img);
    *out = img;
    return 0;
}

/* ---- JPEG ----------------------------------------------------------------- */

typedef struct jpeg_err {
    struct jpeg_error_mgr mgr;
    jmp_buf jmp;
    char message[JMSG_LENGTH_MAX + 64];
    bool truncated;
} jpeg_err;

static void jpeg_on_error(j_common_ptr cinfo) {
    jpeg_err *e = (jpeg_err *)cinfo->err;
    char buf[JMSG_LENGTH_MAX];
    e->mgr.format_message(cinfo, buf);
    snprintf(e->message, sizeof e->message, "%s", buf);
    longjmp(e->jmp, 1);
}

/* Warnings: a premature end of data is a truncated file (libjpeg would
 * finish it in grey); other warnings (extraneous bytes) pass, as in PIL. */
static void jpeg_on_message(j_common_ptr cinfo, int level) {
    jpeg_err *e = (jpeg_err *)cinfo->err;
    if (level < 0 && e->mgr.msg_code == JWRN_JPEG_EOF) e->truncated = true;
}

static int decode_jpeg(pdl_image **out, const uint8_t *data, size_t n, const char *what, pdl_error *err) {
    struct jpeg_decompress_struct cinfo;
    jpeg_err je;
    memset(&je, 0, sizeof je);
    cinfo.err = jpeg_std_error(&je.mgr);
    je.mgr.error_exit = jpeg_on_error;
    je.mgr.emit_message = jpeg_on_message;
    pdl_image *volatile img = NULL;
    if (setjmp(je.jmp)) {
        jpeg_destroy_decompress(&cinfo);
        pdl_image_free(img);
        return err_fail(err, "%s: corrupt JPEG: %s", what, je.message);
    }
    jpeg_create_decompress(&cinfo);
    jpeg_mem_src(&cinfo, data, (unsigned long)n);
    jpeg_read_header(&cinfo, TRUE);
    if (je.truncated) {
        jpeg_destroy_decompress(&cinfo);
        return err_fail(err, "%s: truncated JPEG: the data (%zu bytes) ends inside the header", what, n);
    }
    if (check_size(what, "JPEG", cinfo.image_width, cinfo.image_height, err)) {
        jpeg_destroy_decompress(&cinfo);
        return -1;
    }
    if (cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK) {
        jpeg_destroy_decompress(&cinfo);
        return err_fail(err, "%s: CMYK JPEG images are not supported; convert it to RGB", what);
    }
    /* libjpeg's large allocation is the whole-image coefficient buffer of a
     * progressive (or multi-scan) file: 2 bytes a sample, 3 components at
     * full resolution at most, plus MCU padding. Beyond that it stops with
     * "Backing store not supported" instead of allocating. */
    cinfo.mem->max_memory_to_use = (long)((size_t)cinfo.image_width * cinfo.image_height * 6 + ((size_t)16 << 20));
    cinfo.out_color_space = JCS_RGB;
    jpeg_start_decompress(&cinfo);
    int w = (int)cinfo.output_width, h = (int)cinfo.output_height;
    if (cinfo.output_components != 3) {
        snprintf(je.message, sizeof je.message, "%d output components, expected 3", cinfo.output_components);
        longjmp(je.jmp, 1);
    }
    img = image_new(w, h, 3);
    if (!img) {
        snprintf(je.message, sizeof je.message, "out of memory for %d x %d pixels", w, h);
        longjmp(je.jmp, 1);
    }
    while (cinfo.output_scanline < cinfo.output_height) {
        JSAMPROW row = img->rgb + (size_t)cinfo.output_scanline * (size_t)w * 3;
        jpeg_read_scanlines(&cinfo, &row, 1);
        if (je.truncated) break;
    }
    if (je.truncated) {
        int line = (int)cinfo.output_scanline;
        jpeg_destroy_decompress(&cinfo);
        pdl_image_free(img);
        return err_fail(err, "%s: truncated JPEG: the data (%zu bytes) ends at pixel row %d of %d", what, n, line, h);
    }
    jpeg_finish_decompress(&cinfo);
    jpeg_destroy_decompress(&cinfo);
    *out = img;
    return 0;
}

/* ---- WebP ----------------------------------------------------------------- */

static const char *webp_status(VP8StatusCode s) {
    switch (s) {
    case VP8_STATUS_OUT_OF_MEMORY: return "out of memory";
    case VP8_STATUS_INVALID_PARAM: return "invalid parameter";
    case VP8_STATUS_BITSTREAM_ERROR: return "bitstream error";
    case VP8_STATUS_UNSUPPORTED_FEATURE: return "unsupported feature";
    case VP8_STATUS_SUSPENDED: return "suspended";
    case VP8_STATUS_USER_ABORT: return "aborted";
    case VP8_STATUS_NOT_ENOUGH_DATA: return "truncated: not enough data";
    default: return "error";
    }
}

static int decode_webp(pdl_image **out, const uint8_t *data, size_t n, const char *what, pdl_error *err) {
    WebPBitstreamFeatures f;
    VP8StatusCode st = WebPGetFeatures(data, n, &f);
    if (st != VP8_STATUS_OK) return err_fail(err, "%s: corrupt WebP: %s (in the header)", what, webp_status(st));
    if (f.has_animation) return err_fail(err, "%s: animated WebP images are not supported", what);
    if (check_size(what, "WebP", f.width, f.height, err)) return -1;
    WebPDecoderConfig cfg;
    if (!WebPInitDecoderConfig(&cfg)) return err_fail(err, "%s: WebP decoder version mismatch", what);
    int channels = f.has_alpha ? 4 : 3;
    pdl_image *img = image_new(f.width, f.height, channels);
    if (!img) return err_fail(err, "%s: out of memory for %d x %d pixels", what, f.width, f.height);
    cfg.output.colorspace = f.has_alpha ? MODE_RGBA : MODE_RGB;
    cfg.output.is_external_memory = 1;
    cfg.output.u.RGBA.rgba = img->rgb;
    cfg.output.u.RGBA.stride = f.width * channels;
    cfg.output.u.RGBA.size = (size_t)f.width * (size_t)f.height * (size_t)channels;
    st = WebPDecode(data, n, &cfg);
    WebPFreeDecBuffer(&cfg.output);
    if (st != VP8_STATUS_OK) {
        pdl_image_free(img);
        return err_fail(err, "%s: corrupt WebP: %s (%zu bytes)", what, webp_status(st), n);
    }
    if (f.has_alpha) image_rgba_to_rgb(img);
    *out = img;
    return 0;
}

/* ---- the entry points ------------------------------------------------------- */

int pdl_image_decode(pdl_image **out, const void *bytes, size_t n, const char *what, pdl_error *err) {
    *out = NULL;
    const uint8_t *d = bytes;
    if (!what) what = "image";
    static const uint8_t png_sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    int rc;
    if (n >= 8 && memcmp(d, png_sig, 8) == 0) rc = decode_png(out, d, n, what, err);
    else if (n >= 3 && d[0] == 0xff && d[1] == 0xd8 && d[2] == 0xff) rc = decode_jpeg(out, d, n, what, err);
    else if (n >= 12 && memcmp(d, "RIFF", 4) == 0 && memcmp(d + 8, "WEBP", 4) == 0) rc = decode_webp(out, d, n, what, err);
    else if (n == 0) return err_fail(err, "%s: the image is empty (0 bytes)", what);
    else
        return err_fail(err, "%s: not a PNG, JPEG or WebP image (the first bytes are %02x %02x %02x %02x)", what,
                        d[0], n > 1 ? d[1] : 0, n > 2 ? d[2] : 0, n > 3 ? d[3] : 0);
    if (rc) return -1;
    XXH128_hash_t h = XXH3_128bits(bytes, n);
    (*out)->hash_lo = h.low64;
    (*out)->hash_hi = h.high64;
    return 0;
}

int pdl_image_load(pdl_image **out, const char *path, pdl_error *err) {
    *out = NULL;
    char *data = NULL;
    size_t len = 0;
    if (file_read(path, IMAGE_MAX_BYTES, &data, &len, err)) return -1;
    int rc = pdl_image_decode(out, data, len, path, err);
    free(data);
    return rc;
}
