/*
 * test_vision_image.c - image decoding (src/vision/image_decode.c), image
 * URLs (media_url.c) and the image processors (image_preprocess.c) against
 * reference pixels made by scripts/vision-reference-pixels with PIL and
 * numpy, the libraries transformers' processors run on (Debian's
 * python3-pil and python3-numpy, installed by scripts/install-deps).
 *
 * Tolerance: none. Decoding goes through the same libpng / libjpeg-turbo /
 * libwebp as PIL's, and PIL's resampling is integer arithmetic (22-bit
 * fixed-point weights, 8-bit between passes), so every RGB byte must be the
 * same; rescale and normalise are the same float64 and float32 operations
 * as numpy's, so every float must be the same bits.
 *
 * Bad input is tested for its message: corrupt and truncated files of each
 * format, a decompression bomb refused from its header, base64 errors with
 * their offset, http URLs refused, file:// URLs outside the allowed folder.
 */
#define _POSIX_C_SOURCE 200809L
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
            size_t wn = 0;
            float *want = read_ref(json_string_value(json_object_get(c, "out")), &wn);
            size_t tile = p.patch ? (size_t)3 * p.temporal * p.patch * p.patch : (size_t)3 * p.crop_h * p.crop_w;
            int tiles = jint(c, "tiles");
            CHECK_MSG(wn == tiles * tile * sizeof(float), "%s: reference of %zu bytes", what, wn);
            pdl_error err = {0};
            if (p.patch) { /* Qwen2-VL: one row per patch */
                float *got = NULL;
                int gh = 0, gw = 0;
                int rc = pdl_qwen_patches(&p, rgb, w, h, &got, &gh, &gw, &err);
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
                int rc = pdl_anyres_tiles(&p, rgb, w, h, &got, &nt, &gh, &gw, &err);
                CHECK_MSG(rc == 0, "%s: %s", what, err.message);
                json_t *grid = json_object_get(c, "grid");
                CHECK_MSG(nt == tiles && gh == (int)json_integer_value(json_array_get(grid, 0)) &&
                              gw == (int)json_integer_value(json_array_get(grid, 1)),
                          "%s: %d tiles in a %d x %d grid", what, nt, gh, gw);
                if (rc == 0 && nt == tiles) compare_pixels(what, got, want, (size_t)tiles * tile);
                free(got);
            } else {
                float *got = malloc(tile * sizeof *got);
                int rc = pdl_preprocess_tile(&p, rgb, w, h, got, &err);
                CHECK_MSG(rc == 0, "%s: %s", what, err.message);
                if (rc == 0) compare_pixels(what, got, want, tile);
                free(got);
            }
            free(want);
            n_cases++;
        }
        free(rgb);
    }
    /* 16 images x 7 settings + LLaVA 1.5's 336 and Qwen2-VL's 14-pixel patches on two */
    CHECK_EQ_INT(n_cases, 116);
}

int main(void) {
    RUN(test_every_format_decodes_to_pils_rgb_bytes);
    RUN(test_the_image_hash_is_of_the_encoded_bytes);
    RUN(test_truncated_and_corrupt_images_fail_with_the_reason);
    RUN(test_a_decompression_bomb_is_refused_from_its_header);
    RUN(test_data_urls_decode_and_bad_ones_say_where);
    RUN(test_http_urls_are_refused_and_file_urls_need_the_allowed_folder);
    RUN(test_file_urls_outside_the_folder_get_one_answer_whatever_exists);
    RUN(test_processors_give_the_reference_pixel_values);
    json_decref(manifest);
    free(ref_dir);
    return test_summary();
}
