/*
 * test_vision_image.c - image decoding (src/vision/image_decode.c), image
 * URLs (media_url.c) and the image processors (image_preprocess.c) against
 * reference pixels made by scripts/vision-reference-pixels with PIL and
 * numpy, the libraries transformers' processors run on (Debian's
 * python3-pil and python3-numpy, installed by scripts/install-deps --test).
 *
 * Tolerance: none. Decoding goes through the same libpng / libjpeg-turbo /
 * libwebp as PIL's, and PIL's resampling is integer arithmetic (22-bit
 * fixed-point weights, 8-bit between passes), so every RGB byte must be the
 * same; rescale and normalise are the same float64 and float32 operations
 * as numpy's, so every float must be the same bits.
 *
 * Bad input is tested for its message: corrupt and truncated files of each
 * format, a decompression bomb refused from its header, thin strips (over
 * 200:1) and sides over 16384 refused from their headers in every format,
 * base64 errors with their offset, http URLs refused, file:// URLs outside
 * the allowed folder. The processors' memory is tested for its bound (a
 * center crop of a 300000 x 1 strip computes only its window) and for
 * failure: every take of their scratch made to fail in turn is an error,
 * never a crash. CTest also runs this test under a 1 GiB address-space
 * limit (test_vision_image_ulimit, CMakeLists.txt).
 */
#define _POSIX_C_SOURCE 200809L
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "pagedlm.h"
#include "test_util.h"
#include "vision/image.h"
#include "vision/image_preprocess.h"
#include "vision_test.h"

/* PNG's CRC-32 (ISO 3309), for hand-made chunks. */
static uint32_t crc32(uint32_t crc, const uint8_t *p, size_t n) {
    crc = ~crc;
    for (size_t i = 0; i < n; i++) {
        crc ^= p[i];
        for (int k = 0; k < 8; k++) crc = crc >> 1 ^ (0xedb88320u & -(crc & 1));
    }
    return ~crc;
}

/* Adler-32 (RFC 1950), for hand-made zlib streams. */
static uint32_t adler32(const uint8_t *p, size_t n) {
    uint32_t a = 1, b = 0;
    for (size_t i = 0; i < n; i++) a = (a + p[i]) % 65521, b = (b + a) % 65521;
    return b << 16 | a;
}

static void put_be32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8), p[3] = (uint8_t)v;
}

/* A valid 8-bit greyscale PNG of w x h pixels all of value `grey`, its
 * IDAT a zlib stream of stored (uncompressed) deflate blocks. */
static uint8_t *grey_png(uint32_t w, uint32_t h, uint8_t grey, size_t *len) {
    size_t raw_n = (size_t)h * (w + 1), blocks = (raw_n + 65534) / 65535;
    uint8_t *raw = malloc(raw_n);
    REQUIRE(raw);
    for (size_t y = 0; y < h; y++) {
        raw[y * (w + 1)] = 0; /* filter: none */
        memset(raw + y * (w + 1) + 1, grey, w);
    }
    size_t z_n = 2 + raw_n + 5 * blocks + 4, n = 8 + 25 + 12 + z_n + 12;
    uint8_t *png = malloc(n), *p = png;
    REQUIRE(png);
    static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    memcpy(p, sig, 8), p += 8;
    put_be32(p, 13), memcpy(p + 4, "IHDR", 4), put_be32(p + 8, w), put_be32(p + 12, h);
    p[16] = 8, p[17] = 0, p[18] = p[19] = p[20] = 0; /* 8-bit grey, deflate, no filter, no interlace */
    put_be32(p + 21, crc32(0, p + 4, 17)), p += 25;
    put_be32(p, (uint32_t)z_n), memcpy(p + 4, "IDAT", 4);
    uint8_t *z = p + 8, *q = z;
    *q++ = 0x78, *q++ = 0x01;
    for (size_t b = 0, at = 0; b < blocks; b++) {
        size_t len_b = raw_n - at < 65535 ? raw_n - at : 65535;
        *q++ = b + 1 == blocks; /* BFINAL, BTYPE 00: stored */
        q[0] = (uint8_t)len_b, q[1] = (uint8_t)(len_b >> 8), q[2] = (uint8_t)~len_b, q[3] = (uint8_t)(~len_b >> 8);
        q += 4;
        memcpy(q, raw + at, len_b), q += len_b, at += len_b;
    }
    put_be32(q, adler32(raw, raw_n)), q += 4;
    put_be32(q, crc32(0, p + 4, 4 + z_n)), q += 4;
    put_be32(q, 0), memcpy(q + 4, "IEND", 4), put_be32(q + 8, crc32(0, q + 4, 4)), q += 12;
    REQUIRE((size_t)(q - png) == n);
    free(raw);
    *len = n;
    return png;
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static char *ref_dir;
static json_t *manifest;

/* Makes the reference data once per process. */
static void need_reference(void) {
    if (manifest) return;
    ref_dir = vt_reference_dir();
    char *mpath = test_join(ref_dir, "manifest.json");
    json_error_t je;
    manifest = json_load_file(mpath, 0, &je);
    free(mpath);
    REQUIRE_MSG(manifest != NULL, "manifest.json: %s", je.text);
}

static void *read_ref(const char *name, size_t *len) {
    char *p = test_join(ref_dir, name);
    void *d = test_slurp(p, len);
    free(p);
    return d;
}

static int jint(json_t *o, const char *k) { return (int)json_integer_value(json_object_get(o, k)); }

static void proc_of(json_t *c, pdl_image_proc *p) {
    memset(p, 0, sizeof *p);
    const char *kind = json_string_value(json_object_get(c, "kind"));
    p->shortest_edge = strcmp(kind, "fixed") != 0;
    p->size = jint(c, "size");
    p->crop_h = jint(c, "crop_h"), p->crop_w = jint(c, "crop_w");
    p->resample = (pdl_resample)jint(c, "resample");
    p->rescale = 1.0 / 255.0;
    for (int i = 0; i < 3; i++) {
        p->mean[i] = (float)json_number_value(json_array_get(json_object_get(c, "mean"), (size_t)i));
        p->std[i] = (float)json_number_value(json_array_get(json_object_get(c, "std"), (size_t)i));
    }
    p->pad_square = json_is_true(json_object_get(c, "pad_square"));
    for (int i = 0; p->pad_square && i < 3; i++)
        p->pad_color[i] = (uint8_t)json_integer_value(json_array_get(json_object_get(c, "pad_color"), (size_t)i));
    if (strcmp(kind, "qwen") == 0) {
        p->patch = jint(c, "patch"), p->merge = jint(c, "merge"), p->temporal = jint(c, "temporal");
        p->min_pixels = jint(c, "min_pixels"), p->max_pixels = jint(c, "max_pixels");
    }
    json_t *pins = json_object_get(c, "pinpoints");
    for (size_t i = 0; pins && i < json_array_size(pins); i++) {
        p->pinpoints[i][0] = (int)json_integer_value(json_array_get(json_array_get(pins, i), 0));
        p->pinpoints[i][1] = (int)json_integer_value(json_array_get(json_array_get(pins, i), 1));
        p->n_pinpoints = (int)i + 1;
    }
}

/* ---- decoding ------------------------------------------------------------- */

static void test_every_format_decodes_to_pils_rgb_bytes(void) {
    need_reference();
    json_t *images = json_object_get(manifest, "images");
    REQUIRE(json_array_size(images) == 16);
    size_t i;
    json_t *e;
    json_array_foreach(images, i, e) {
        const char *name = json_string_value(json_object_get(e, "name"));
        char *path = test_join(ref_dir, json_string_value(json_object_get(e, "file")));
        pdl_image *img = NULL;
        pdl_error err = {0};
        int rc = pdl_image_load(&img, path, &err);
        free(path);
        CHECK_MSG(rc == 0, "%s: %s", name, err.message);
        if (rc) continue;
        int w = jint(e, "width"), h = jint(e, "height");
        CHECK_EQ_INT(pdl_image_width(img), w);
        CHECK_EQ_INT(pdl_image_height(img), h);
        char rgbname[256];
        snprintf(rgbname, sizeof rgbname, "%s.rgb", name);
        size_t n = 0;
        uint8_t *want = read_ref(rgbname, &n);
        if (pdl_image_width(img) == w && pdl_image_height(img) == h && n == (size_t)w * h * 3) {
            size_t bad = 0, first = 0;
            for (size_t k = 0; k < n; k++)
                if (img->rgb[k] != want[k] && bad++ == 0) first = k;
            CHECK_MSG(bad == 0, "%s: %zu of %zu bytes differ from PIL's, first at pixel %zu channel %zu (%d, PIL %d)",
                      name, bad, n, first / 3, first % 3, img->rgb[first], want[first]);
        } else {
            CHECK_MSG(0, "%s: reference of %zu bytes for %d x %d", name, n, w, h);
        }
        free(want);
        pdl_image_free(img);
    }
}

static void test_the_image_hash_is_of_the_encoded_bytes(void) {
    need_reference();
    char *path = test_join(ref_dir, "rgb_png.png");
    size_t n = 0;
    uint8_t *bytes = (uint8_t *)test_slurp(path, &n);
    pdl_image *a = NULL, *b = NULL, *c = NULL;
    pdl_error err = {0};
    REQUIRE(pdl_image_decode(&a, bytes, n, "a", &err) == 0);
    REQUIRE(pdl_image_load(&b, path, &err) == 0);
    CHECK(a->hash_lo == b->hash_lo && a->hash_hi == b->hash_hi);
    /* one byte of an ancillary chunk changed: same pixels, another image key */
    uint8_t *copy = malloc(n + 20);
    /* insert a tEXt chunk after IHDR (8 + 25 bytes) */
    static const uint8_t text_chunk[] = {0, 0, 0, 1, 't', 'E', 'X', 't', 'x', 0, 0, 0, 0};
    memcpy(copy, bytes, 33);
    memcpy(copy + 33, text_chunk, sizeof text_chunk);
    uint32_t crc = crc32(0, copy + 37, 5);
    copy[33 + 9] = (uint8_t)(crc >> 24), copy[33 + 10] = (uint8_t)(crc >> 16);
    copy[33 + 11] = (uint8_t)(crc >> 8), copy[33 + 12] = (uint8_t)crc;
    memcpy(copy + 33 + sizeof text_chunk, bytes + 33, n - 33);
    int rc = pdl_image_decode(&c, copy, n + sizeof text_chunk, "c", &err);
    CHECK_MSG(rc == 0, "%s", err.message);
    if (rc == 0) {
        CHECK(memcmp(a->rgb, c->rgb, (size_t)a->width * a->height * 3) == 0);
        CHECK(a->hash_lo != c->hash_lo || a->hash_hi != c->hash_hi);
    }
    pdl_image_free(a), pdl_image_free(b), pdl_image_free(c);
    free(copy), free(bytes), free(path);
}

/* ---- bad input --------------------------------------------------------------- */

static void expect_decode_error(const void *bytes, size_t n, const char *what, const char *needle) {
    pdl_image *img = NULL;
    pdl_error err = {0};
    int rc = pdl_image_decode(&img, bytes, n, what, &err);
    CHECK_MSG(rc != 0 && img == NULL, "%s decoded", what);
    CHECK_CONTAINS(err.message, what);
    CHECK_CONTAINS(err.message, needle);
    pdl_image_free(img);
}

static void test_truncated_and_corrupt_images_fail_with_the_reason(void) {
    need_reference();
    static const struct {
        const char *file, *trunc_msg;
    } cases[] = {
        {"rgb_png.png", "truncated"},
        {"big_jpeg.jpg", "truncated JPEG"},
        {"lossy_webp.webp", "corrupt WebP"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t n = 0;
        uint8_t *d = read_ref(cases[i].file, &n);
        REQUIRE(n > 200);
        expect_decode_error(d, n / 2, cases[i].file, cases[i].trunc_msg);
        expect_decode_error(d, 40, cases[i].file, cases[i].trunc_msg[0] == 't' ? "" : "WebP");
        free(d);
    }
    /* a PNG whose pixel data is damaged: libpng's CRC check names it */
    size_t n = 0;
    uint8_t *d = read_ref("rgb_png.png", &n);
    d[n / 2] ^= 0x55;
    expect_decode_error(d, n, "damaged.png", "corrupt PNG");
    free(d);
    /* JPEG with a damaged start-of-frame marker length */
    d = read_ref("rgb_jpeg.jpg", &n);
    for (size_t k = 2; k + 4 < n; k++)
        if (d[k] == 0xff && d[k + 1] == 0xc0) {
            d[k + 2] = 0, d[k + 3] = 3; /* a frame header of 3 bytes */
            break;
        }
    expect_decode_error(d, n, "damaged.jpg", "corrupt JPEG");
    free(d);
    expect_decode_error("GIF89a......", 12, "anim.gif", "not a PNG, JPEG or WebP image (the first bytes are 47 49 46 38)");
    expect_decode_error("", 0, "empty.png", "empty (0 bytes)");
}

/* A PNG header claiming 20000 x 20000 pixels (with a valid CRC) and no data. */
static void test_a_decompression_bomb_is_refused_from_its_header(void) {
    uint8_t png[8 + 25] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n', 0, 0, 0, 13, 'I', 'H', 'D', 'R'};
    uint32_t wh = 20000;
    for (int k = 0; k < 2; k++) {
        png[16 + 4 * k] = (uint8_t)(wh >> 24), png[17 + 4 * k] = (uint8_t)(wh >> 16);
        png[18 + 4 * k] = (uint8_t)(wh >> 8), png[19 + 4 * k] = (uint8_t)wh;
    }
    png[24] = 8, png[25] = 2; /* 8-bit RGB */
    uint32_t crc = crc32(0, png + 12, 17);
    png[29] = (uint8_t)(crc >> 24), png[30] = (uint8_t)(crc >> 16), png[31] = (uint8_t)(crc >> 8), png[32] = (uint8_t)crc;
    expect_decode_error(png, sizeof png, "bomb.png", "20000 x 20000 pixels exceeds the limit");
}

/* A strip over 200:1 has nothing a square tile could show, and every
 * family's resize of it is all intermediate (CLIP's shortest edge of 336
 * makes 300000 x 1 a 100800000 x 336 image): refused from the header, fast,
 * naming the sizes, in every format. */
static void test_thin_and_oversized_images_are_refused_from_their_header(void) {
    need_reference();
    static const struct {
        uint32_t w, h;
        const char *needle;
    } thin[] = {
        {300000, 1, "PNG image of 300000 x 1 pixels: its aspect ratio 300000.0:1 is over the limit of 200:1"},
        {1, 300000, "PNG image of 1 x 300000 pixels: its aspect ratio 300000.0:1 is over the limit of 200:1"},
        {1, 30000, "PNG image of 1 x 30000 pixels: its aspect ratio 30000.0:1 is over the limit of 200:1"},
        {201, 1, "PNG image of 201 x 1 pixels: its aspect ratio 201.0:1 is over the limit of 200:1"},
        {16385, 100, "PNG image of 16385 x 100 pixels: a side of 16385 pixels exceeds the limit of 16384"},
    };
    for (size_t i = 0; i < sizeof thin / sizeof thin[0]; i++) {
        size_t n = 0;
        uint8_t *png = grey_png(thin[i].w, thin[i].h, 77, &n);
        double t0 = now_s();
        expect_decode_error(png, n, "thin.png", thin[i].needle);
        double dt = now_s() - t0;
        CHECK_MSG(dt < 0.5, "%u x %u: refused after %.2f s", thin[i].w, thin[i].h, dt);
        free(png);
    }
    /* at the limits: 200:1, and 16384 on a side */
    static const uint32_t fine[][2] = {{200, 1}, {1, 200}, {16384, 82}};
    for (size_t i = 0; i < sizeof fine / sizeof fine[0]; i++) {
        size_t n = 0;
        uint8_t *png = grey_png(fine[i][0], fine[i][1], 77, &n);
        pdl_image *img = NULL;
        pdl_error err = {0};
        int rc = pdl_image_decode(&img, png, n, "strip.png", &err);
        CHECK_MSG(rc == 0, "%u x %u: %s", fine[i][0], fine[i][1], err.message);
        if (rc == 0) {
            size_t bytes = (size_t)img->width * img->height * 3, bad = 0;
            for (size_t k = 0; k < bytes; k++) bad += img->rgb[k] != 77;
            CHECK_MSG(img->width == (int)fine[i][0] && img->height == (int)fine[i][1] && bad == 0,
                      "%u x %u: decoded to %d x %d with %zu wrong bytes", fine[i][0], fine[i][1], img->width,
                      img->height, bad);
        }
        pdl_image_free(img);
        free(png);
    }
    /* JPEG: the frame header of a real file claiming 30000 x 100 */
    size_t n = 0;
    uint8_t *d = read_ref("rgb_jpeg.jpg", &n);
    bool patched = false;
    for (size_t k = 2; k + 9 < n && !patched; k++)
        if (d[k] == 0xff && d[k + 1] == 0xc0) { /* SOF0: length, precision, height, width */
            d[k + 5] = 0, d[k + 6] = 100, d[k + 7] = 30000 >> 8, d[k + 8] = 30000 & 0xff;
            patched = true;
        }
    REQUIRE(patched);
    expect_decode_error(d, n, "thin.jpg", "JPEG image of 30000 x 100 pixels: its aspect ratio 300.0:1 is over");
    free(d);
    /* WebP: a simple-format (VP8) file's frame header claiming 16000 x 50 */
    d = read_ref("lossy_webp.webp", &n);
    REQUIRE(n > 30 && memcmp(d + 12, "VP8 ", 4) == 0 && d[23] == 0x9d && d[24] == 0x01 && d[25] == 0x2a);
    d[26] = 16000 & 0xff, d[27] = 16000 >> 8, d[28] = 50, d[29] = 0;
    expect_decode_error(d, n, "thin.webp", "WebP image of 16000 x 50 pixels: its aspect ratio 320.0:1 is over");
    free(d);
}

/* ---- URLs ------------------------------------------------------------------------ */

static char *base64(const uint8_t *d, size_t n) {
    static const char al[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char *o = malloc(n / 3 * 4 + 8), *p = o;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)d[i] << 16 | (i + 1 < n ? (uint32_t)d[i + 1] << 8 : 0) | (i + 2 < n ? d[i + 2] : 0);
        *p++ = al[v >> 18], *p++ = al[(v >> 12) & 63];
        *p++ = i + 1 < n ? al[(v >> 6) & 63] : '=';
        *p++ = i + 2 < n ? al[v & 63] : '=';
    }
    *p = 0;
    return o;
}

static void expect_url_error(const char *url, const char *allowed, const char *needle) {
    pdl_image *img = NULL;
    pdl_error err = {0};
    CHECK_MSG(pdl_image_from_url(&img, url, strlen(url), allowed, &err) != 0, "%.60s accepted", url);
    CHECK_CONTAINS(err.message, needle);
    pdl_image_free(img);
}

static void test_data_urls_decode_and_bad_ones_say_where(void) {
    need_reference();
    /* every length modulo 3 (padding "", "=", "==") */
    const char *files[] = {"rgb_png.png", "lossy_webp.webp", "grey_jpeg.jpg"};
    for (int f = 0; f < 3; f++) {
        size_t n = 0;
        uint8_t *d = read_ref(files[f], &n);
        pdl_image *direct = NULL;
        pdl_error err = {0};
        REQUIRE(pdl_image_decode(&direct, d, n, files[f], &err) == 0);
        for (int cut = 0; cut < 3; cut++) {
            /* trailing bytes after the image end: decoders ignore them, the hash does not */
            size_t m = n + (size_t)cut;
            uint8_t *dd = calloc(m, 1);
            memcpy(dd, d, n);
            char *b64 = base64(dd, m);
            size_t ul = strlen(b64) + 64;
            char *url = malloc(ul);
            snprintf(url, ul, "data:image/png;base64,%s", b64);
            pdl_image *img = NULL;
            int rc = pdl_image_from_url(&img, url, strlen(url), NULL, &err);
            CHECK_MSG(rc == 0, "%s + %d: %s", files[f], cut, err.message);
            if (rc == 0) {
                CHECK(img->width == direct->width && img->height == direct->height);
                CHECK(memcmp(img->rgb, direct->rgb, (size_t)img->width * img->height * 3) == 0);
                CHECK((cut == 0) == (img->hash_lo == direct->hash_lo && img->hash_hi == direct->hash_hi));
            }
            pdl_image_free(img);
            free(url), free(b64), free(dd);
        }
        pdl_image_free(direct);
        free(d);
    }
    expect_url_error("data:image/png;base64,iVBO*w0KGgo=", NULL, "character '*' at offset 4");
    expect_url_error("data:image/png;base64,iVBORw0KGgo", NULL, "length 11 is not a multiple of 4");
    expect_url_error("data:image/png,rawbytes", NULL, "only base64 data URLs");
    expect_url_error("data:text/plain;base64,aGVsbG8=", NULL, "media type 'text/plain'");
    expect_url_error("data:image/png;base64", NULL, "no ','");
    expect_url_error("data:image/png;base64,aGVsbG8h", NULL, "not a PNG, JPEG or WebP image");
}

static void test_http_urls_are_refused_and_file_urls_need_the_allowed_folder(void) {
    need_reference();
    expect_url_error("https://example.com/cat.png", NULL, "only data URLs");
    expect_url_error("http://example.com/cat.png", ref_dir, "not fetched");
    expect_url_error("ftp://example.com/cat.png", NULL, "unsupported image URL");
    char url[4200];
    snprintf(url, sizeof url, "file://%s/rgb_png.png", ref_dir);
    expect_url_error(url, NULL, "--allowed-local-media-path");
    /* allowed: the folder itself */
    pdl_image *img = NULL;
    pdl_error err = {0};
    int rc = pdl_image_from_url(&img, url, strlen(url), ref_dir, &err);
    CHECK_MSG(rc == 0, "%s", err.message);
    if (rc == 0) CHECK_EQ_INT(img->width, 131);
    pdl_image_free(img);
    /* a sibling folder whose name starts with the allowed one's is outside */
    char *sibling = test_make_dir("ref-other");
    char *outside = test_join(sibling, "x.png");
    char *src = test_join(ref_dir, "rgb_png.png");
    size_t n = 0;
    char *d = test_slurp(src, &n);
    test_write_file(outside, d, n);
    snprintf(url, sizeof url, "file://%s", outside);
    expect_url_error(url, ref_dir, "outside the allowed local media path");
    /* so is a path that climbs out with .. and a link that points out */
    snprintf(url, sizeof url, "file://%s/../ref-other/x.png", ref_dir);
    expect_url_error(url, ref_dir, "outside the allowed local media path");
    char *link = test_join(ref_dir, "link.png");
    CHECK(symlink(outside, link) == 0);
    snprintf(url, sizeof url, "file://%s", link);
    expect_url_error(url, ref_dir, "outside the allowed local media path");
    snprintf(url, sizeof url, "file://%s/missing.png", ref_dir);
    expect_url_error(url, ref_dir, "does not exist");
    unlink(link);
    free(link), free(d), free(src), free(outside), free(sibling);
}

/* Outside the allowed folder, by the path's text or once it is resolved,
 * every file:// URL gets one answer, the same message and status, whether
 * or not anything exists there: a client cannot probe which paths exist on
 * the host. Only a missing file under the folder is told so. */
static void test_file_urls_outside_the_folder_get_one_answer_whatever_exists(void) {
    need_reference();
    char *outside_dir = test_make_dir("probe-outside");
    char *outside = test_join(outside_dir, "x.png");
    char *src = test_join(ref_dir, "rgb_png.png");
    size_t n = 0;
    char *d = test_slurp(src, &n);
    test_write_file(outside, d, n);
    char *link_file = test_join(ref_dir, "out-file.png"), *link_dir = test_join(ref_dir, "out-dir");
    char *link_gone = test_join(ref_dir, "out-gone.png");
    char *gone = test_join(outside_dir, "gone.png");
    CHECK(symlink(outside, link_file) == 0);
    CHECK(symlink(outside_dir, link_dir) == 0);
    CHECK(symlink(gone, link_gone) == 0);
    char want[4400];
    snprintf(want, sizeof want, "file:// image URL: the path is outside the allowed local media path '%s'", ref_dir);
    char urls[11][4200];
    int k = 0;
    snprintf(urls[k++], sizeof urls[0], "file:///etc/passwd");
    snprintf(urls[k++], sizeof urls[0], "file:///etc/pagedlm-no-such-file");
    snprintf(urls[k++], sizeof urls[0], "file:///");
    snprintf(urls[k++], sizeof urls[0], "file://%s", outside);
    snprintf(urls[k++], sizeof urls[0], "file://%s", gone);
    /* climbing out with "..", also through "." and doubled slashes, to what exists and what does not */
    snprintf(urls[k++], sizeof urls[0], "file://%s/../probe-outside/x.png", ref_dir);
    snprintf(urls[k++], sizeof urls[0], "file://%s/.//..//probe-outside/./gone.png", ref_dir);
    /* links out of the folder: to a file, to a missing file, into a folder outside */
    snprintf(urls[k++], sizeof urls[0], "file://%s", link_file);
    snprintf(urls[k++], sizeof urls[0], "file://%s/out-dir/x.png", ref_dir);
    snprintf(urls[k++], sizeof urls[0], "file://%s/out-dir/gone.png", ref_dir);
    snprintf(urls[k++], sizeof urls[0], "file://%s/out-dir/../../etc/passwd", ref_dir);
    for (int i = 0; i < k; i++) {
        pdl_image *img = NULL;
        pdl_error err = {0};
        CHECK_MSG(pdl_image_from_url(&img, urls[i], strlen(urls[i]), ref_dir, &err) != 0, "%s accepted", urls[i]);
        CHECK_MSG(strcmp(err.message, want) == 0, "%s: '%s'", urls[i], err.message);
        pdl_image_free(img);
    }
    /* under the folder: a missing file says so (a dangling link included), and
     * ".." that stays inside is fine */
    char url[4200];
    snprintf(url, sizeof url, "file://%s/missing.png", ref_dir);
    expect_url_error(url, ref_dir, "does not exist");
    snprintf(url, sizeof url, "file://%s", link_gone);
    expect_url_error(url, ref_dir, "does not exist");
    snprintf(url, sizeof url, "file://%s/out-dir/../rgb_png.png", ref_dir);
    pdl_image *img = NULL;
    pdl_error err = {0};
    CHECK_MSG(pdl_image_from_url(&img, url, strlen(url), ref_dir, &err) == 0, "%s", err.message);
    pdl_image_free(img);
    unlink(link_file), unlink(link_dir), unlink(link_gone);
    free(link_file), free(link_dir), free(link_gone), free(gone);
    free(d), free(src), free(outside), free(outside_dir);
}

/* ---- processors ---------------------------------------------------------------- */

static void compare_pixels(const char *what, const float *got, const float *want, size_t n) {
    size_t bad = 0, first = 0;
    for (size_t k = 0; k < n; k++)
        if (memcmp(&got[k], &want[k], sizeof(float)) != 0 && bad++ == 0) first = k;
    CHECK_MSG(bad == 0, "%s: %zu of %zu values differ from the reference, first at %zu: %.9g vs %.9g", what, bad, n,
              first, got[first], want[first]);
}

static void test_processors_give_the_reference_pixel_values(void) {
    need_reference();
    json_t *images = json_object_get(manifest, "images");
    size_t i, j;
    json_t *e, *c;
    int n_cases = 0;
    pdl_scratch scratch = {0};
    json_array_foreach(images, i, e) {
        const char *name = json_string_value(json_object_get(e, "name"));
        char rgbname[256];
        snprintf(rgbname, sizeof rgbname, "%s.rgb", name);
        size_t rn = 0;
        uint8_t *rgb = read_ref(rgbname, &rn);
        int w = jint(e, "width"), h = jint(e, "height");
        REQUIRE(rn == (size_t)w * h * 3);
        json_array_foreach(json_object_get(e, "cases"), j, c) {
            pdl_image_proc p;
            proc_of(c, &p);
            char what[300];
            snprintf(what, sizeof what, "%s %s", name, json_string_value(json_object_get(c, "name")));
            if (p.pad_square) { /* the loaders' colour from the mean: Python's int(x * 255) */
                uint8_t mine[3];
                img_pad_color_of_mean(p.mean, mine);
                CHECK_MSG(memcmp(mine, p.pad_color, 3) == 0, "%s: pad colour (%d, %d, %d), the script's (%d, %d, %d)",
                          what, mine[0], mine[1], mine[2], p.pad_color[0], p.pad_color[1], p.pad_color[2]);
            }
            size_t wn = 0;
            float *want = read_ref(json_string_value(json_object_get(c, "out")), &wn);
            size_t tile = p.patch ? (size_t)3 * p.temporal * p.patch * p.patch : (size_t)3 * p.crop_h * p.crop_w;
            int tiles = jint(c, "tiles");
            CHECK_MSG(wn == tiles * tile * sizeof(float), "%s: reference of %zu bytes", what, wn);
            pdl_error err = {0};
            if (p.patch) { /* Qwen2-VL: one row per patch */
                float *got = NULL;
                int gh = 0, gw = 0;
                int rc = img_qwen_patches(&p, rgb, w, h, &got, &gh, &gw, &scratch, &err);
                CHECK_MSG(rc == 0, "%s: %s", what, err.message);
                json_t *grid = json_object_get(c, "grid");
                CHECK_MSG(gh == (int)json_integer_value(json_array_get(grid, 0)) &&
                              gw == (int)json_integer_value(json_array_get(grid, 1)),
                          "%s: a %d x %d grid of patches", what, gh, gw);
                if (rc == 0 && gh * gw == tiles) compare_pixels(what, got, want, (size_t)tiles * tile);
                free(got);
            } else if (p.n_pinpoints) {
                float *got = NULL;
                int nt = 0, gh = 0, gw = 0;
                int rc = img_anyres_tiles(&p, rgb, w, h, &got, &nt, &gh, &gw, &scratch, &err);
                CHECK_MSG(rc == 0, "%s: %s", what, err.message);
                json_t *grid = json_object_get(c, "grid");
                CHECK_MSG(nt == tiles && gh == (int)json_integer_value(json_array_get(grid, 0)) &&
                              gw == (int)json_integer_value(json_array_get(grid, 1)),
                          "%s: %d tiles in a %d x %d grid", what, nt, gh, gw);
                if (rc == 0 && nt == tiles) compare_pixels(what, got, want, (size_t)tiles * tile);
                free(got);
            } else {
                float *got = malloc(tile * sizeof *got);
                int rc = img_preprocess_tile(&p, rgb, w, h, got, &scratch, &err);
                CHECK_MSG(rc == 0, "%s: %s", what, err.message);
                if (rc == 0) compare_pixels(what, got, want, tile);
                free(got);
            }
            free(want);
            n_cases++;
        }
        free(rgb);
    }
    /* 16 images x 9 settings + LLaVA 1.5's 336 (cropped and padded) and
     * Qwen2-VL's 14-pixel patches on two */
    CHECK_EQ_INT(n_cases, 150);
    scratch_free(&scratch);
}

/* LLaVA 1.5's processor at its real size, cropping or padding. */
static pdl_image_proc llava_proc(bool pad) {
    pdl_image_proc p = {.shortest_edge = true, .size = 336, .crop_w = 336, .crop_h = 336,
                        .resample = PDL_RESAMPLE_BICUBIC, .rescale = 1.0 / 255.0, .pad_square = pad,
                        .mean = {0.48145466f, 0.4578275f, 0.40821073f}, .std = {0.26862954f, 0.26130258f, 0.27577711f}};
    img_pad_color_of_mean(p.mean, p.pad_color);
    return p;
}

/* What the processor makes of one 8-bit value of channel c. */
static float normalized(const pdl_image_proc *p, int c, uint8_t v) {
    float r = (float)(v * p->rescale);
    return (r - p->mean[c]) / p->std[c];
}

/* How many of the tile's values are not `v` (per channel) in rows
 * [y0, y1), columns [x0, x1). */
static size_t tile_differs(const pdl_image_proc *p, const float *t, int x0, int x1, int y0, int y1, const uint8_t v[3]) {
    size_t bad = 0;
    for (int c = 0; c < 3; c++)
        for (int y = y0; y < y1; y++)
            for (int x = x0; x < x1; x++) bad += t[((size_t)c * p->crop_h + y) * p->crop_w + x] != normalized(p, c, v[c]);
    return bad;
}

/* The processor is a library function any caller may hand a strip the
 * decoder would refuse: a center crop computes only its window of the
 * resize, so 300000 x 1 (resized to 100800000 x 336 before) costs the
 * 336 x 336 crop, not 101 GB, and 16384 x 82 not 67 MB; padded to a square,
 * a strip costs its own rows, not the square's. Memory grows with the
 * canvas's side (the filter's taps), never with an area. The resize of a
 * single colour is that colour, so every value is known. */
static void test_a_center_crop_resizes_only_its_window(void) {
    static const int shapes[][2] = {{300000, 1}, {1, 300000}, {16384, 82}, {82, 16384}};
    const uint8_t colour[3] = {200, 100, 50};
    for (int pad = 0; pad < 2; pad++)
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
            int w = shapes[i][0], h = shapes[i][1];
            if (pad && w == 1) continue; /* (its every row an image row: a second of PIL's arithmetic) */
            size_t npx = (size_t)w * h;
            uint8_t *rgb = malloc(npx * 3);
            REQUIRE(rgb);
            for (size_t k = 0; k < npx; k++) memcpy(rgb + 3 * k, colour, 3);
            pdl_image_proc p = llava_proc(pad);
            float *out = malloc((size_t)3 * 336 * 336 * sizeof *out);
            pdl_scratch s = {0};
            pdl_error err = {0};
            double t0 = now_s();
            int rc = img_preprocess_tile(&p, rgb, w, h, out, &s, &err);
            double dt = now_s() - t0;
            CHECK_MSG(rc == 0, "%d x %d%s: %s", w, h, pad ? " padded" : "", err.message);
            /* the crop's 339 KB, and the filter weights: 4 x (canvas side / 336) taps for 336 outputs on
             * each axis, 4 bytes each */
            int side = w > h ? w : h;
            size_t bound = ((size_t)1 << 20) + (size_t)40 * side;
            fprintf(stderr, "  %d x %d%s: %.3f s, %zu bytes of scratch\n", w, h, pad ? " padded" : "", dt, s.cap);
            CHECK_MSG(s.cap <= bound, "%d x %d%s: %zu bytes of scratch, over %zu", w, h, pad ? " padded" : "", s.cap,
                      bound);
            if (rc == 0 && !pad) CHECK_EQ_INT((int)tile_differs(&p, out, 0, 336, 0, 336, colour), 0);
            if (rc == 0 && pad) {
                /* the square's bands away from the strip are the pad's colour; the strip (1.7 pixels wide
                 * at 336 for 82 of 16384) shows in the middle */
                bool wide = w > h;
                CHECK_EQ_INT((int)tile_differs(&p, out, 0, wide ? 336 : 160, 0, wide ? 160 : 336, p.pad_color), 0);
                CHECK_EQ_INT((int)tile_differs(&p, out, wide ? 0 : 176, 336, wide ? 176 : 0, 336, p.pad_color), 0);
                if (side < 100000) CHECK(out[168 * 336 + 168] != normalized(&p, 0, p.pad_color[0]));
            }
            scratch_free(&s);
            free(out), free(rgb);
        }
}

/* Every processor takes its working memory in one take of the caller's
 * scratch; each take made to fail is an error naming the image and the
 * bytes, hands back nothing, and the same call then succeeds with the same
 * values. */
static void test_processor_scratch_failures_are_errors(void) {
    need_reference();
    size_t rn = 0;
    uint8_t *rgb = read_ref("rgb_png.rgb", &rn);
    const int w = 131, h = 90;
    REQUIRE(rn == (size_t)w * h * 3);
    json_t *cases = json_object_get(json_array_get(json_object_get(manifest, "images"), 0), "cases");
    int tested = 0;
    for (size_t j = 0; j < json_array_size(cases); j++) {
        json_t *c = json_array_get(cases, j);
        const char *cname = json_string_value(json_object_get(c, "name"));
        pdl_image_proc p;
        proc_of(c, &p);
        size_t tile = p.patch ? (size_t)3 * p.temporal * p.patch * p.patch : (size_t)3 * p.crop_h * p.crop_w;
        pdl_scratch s = {0};
        float *runs[3] = {0};
        int rcs[3], n_values = 0;
        for (int run = 0; run < 3; run++) { /* succeeds; its one take fails; succeeds again */
            s.fail_in = run == 1;
            long t0 = s.takes;
            pdl_error err = {0};
            float *got = NULL, *one = malloc(tile * sizeof *one);
            int gh = 0, gw = 0, nt = 0;
            if (p.patch) rcs[run] = img_qwen_patches(&p, rgb, w, h, &got, &gh, &gw, &s, &err), n_values = gh * gw;
            else if (p.n_pinpoints) rcs[run] = img_anyres_tiles(&p, rgb, w, h, &got, &nt, &gh, &gw, &s, &err), n_values = nt;
            else rcs[run] = img_preprocess_tile(&p, rgb, w, h, one, &s, &err), got = one, one = NULL, n_values = 1;
            free(one);
            runs[run] = got;
            CHECK_MSG(s.takes - t0 == 1, "%s: %ld takes", cname, s.takes - t0);
            if (run != 1) {
                CHECK_MSG(rcs[run] == 0, "%s: %s", cname, err.message);
                continue;
            }
            CHECK_MSG(rcs[1] != 0, "%s: the take failed, yet the processor reported success", cname);
            CHECK_MSG(p.patch == 0 && p.n_pinpoints == 0 ? true : got == NULL, "%s: a failed call handed back tiles",
                      cname);
            CHECK_CONTAINS(err.message, "image of 131 x 90 pixels: out of memory for");
            CHECK_CONTAINS(err.message, "bytes of image scratch");
            CHECK_MSG(s.fail_in == 0, "%s: the failure was not reached", cname);
        }
        if (rcs[0] == 0 && rcs[2] == 0)
            CHECK_MSG(memcmp(runs[0], runs[2], (size_t)n_values * tile * sizeof(float)) == 0,
                      "%s: after the failure the values differ", cname);
        tested += rcs[1] != 0;
        for (int run = 0; run < 3; run++) free(runs[run]);
        scratch_free(&s);
    }
    CHECK_EQ_INT(tested, (int)json_array_size(cases));
    /* the plain resize too */
    pdl_scratch s = {.fail_in = 1};
    pdl_error err = {0};
    uint8_t small[10 * 10 * 3];
    CHECK(img_resize_rgb8(rgb, w, h, small, 10, 10, PDL_RESAMPLE_BICUBIC, &s, &err) != 0);
    CHECK_CONTAINS(err.message, "bytes of image scratch (resize)");
    CHECK(img_resize_rgb8(rgb, w, h, small, 10, 10, PDL_RESAMPLE_BICUBIC, &s, &err) == 0);
    scratch_free(&s);
    free(rgb);
}

int main(void) {
    RUN(test_every_format_decodes_to_pils_rgb_bytes);
    RUN(test_the_image_hash_is_of_the_encoded_bytes);
    RUN(test_truncated_and_corrupt_images_fail_with_the_reason);
    RUN(test_a_decompression_bomb_is_refused_from_its_header);
    RUN(test_thin_and_oversized_images_are_refused_from_their_header);
    RUN(test_data_urls_decode_and_bad_ones_say_where);
    RUN(test_http_urls_are_refused_and_file_urls_need_the_allowed_folder);
    RUN(test_file_urls_outside_the_folder_get_one_answer_whatever_exists);
    RUN(test_processors_give_the_reference_pixel_values);
    RUN(test_a_center_crop_resizes_only_its_window);
    RUN(test_processor_scratch_failures_are_errors);
    json_decref(manifest);
    free(ref_dir);
    return test_summary();
}
