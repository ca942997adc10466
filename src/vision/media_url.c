/*
 * media_url.c - an image given as a URL (OpenAI's image_url.url): a data:
 * URL with base64 bytes, or a file:// URL under the one folder the server
 * was told to allow (vLLM's --allowed-local-media-path).
 *
 * Nothing is fetched from the network: http and https URLs are refused with
 * a message saying so. A file:// path is resolved (symbolic links and ".."
 * followed) before it is checked against the allowed folder, so a link out
 * of it is refused too.
 */
#define _DEFAULT_SOURCE
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "util/error.h"
#include "vision/image.h"

/* The value of one base64 character, or -1. */
static int b64_value(unsigned char c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

int pdl_base64_decode(const char *s, size_t n, uint8_t **out, size_t *out_len, pdl_error *err) {
    *out = NULL;
    *out_len = 0;
    /* padding: at most two '=' at the very end */
    size_t data_n = n;
    while (data_n > 0 && n - data_n < 2 && s[data_n - 1] == '=') data_n--;
    if (n % 4 != 0)
        return pdl_fail(err, "bad base64: length %zu is not a multiple of 4", n);
    uint8_t *buf = malloc(n / 4 * 3 + 1);
    if (!buf) return pdl_fail(err, "out of memory for %zu bytes of base64", n);
    size_t o = 0;
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < data_n; i++) {
        int v = b64_value((unsigned char)s[i]);
        if (v < 0) {
            free(buf);
            unsigned char c = (unsigned char)s[i];
            if (c >= 0x20 && c < 0x7f)
                return pdl_fail(err, "bad base64: character '%c' at offset %zu", c, i);
            return pdl_fail(err, "bad base64: byte 0x%02x at offset %zu", c, i);
        }
        acc = acc << 6 | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            buf[o++] = (uint8_t)(acc >> bits);
        }
    }
    *out = buf;
    *out_len = o;
    return 0;
}

/* %XX escapes of a file URL's path. */
static char *percent_decode(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (!d) return NULL;
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '%' && i + 2 < n) {
            char hex[3] = {s[i + 1], s[i + 2], 0};
            char *end;
            long v = strtol(hex, &end, 16);
            if (*end == 0 && v > 0) {
                d[o++] = (char)v;
                i += 2;
                continue;
            }
        }
        d[o++] = s[i];
    }
    d[o] = 0;
    return d;
}

int pdl_image_from_url(pdl_image **out, const char *url, size_t len, const char *allowed_dir, pdl_error *err) {
    *out = NULL;
    if (len >= 5 && strncasecmp(url, "data:", 5) == 0) {
        const char *comma = memchr(url, ',', len);
        if (!comma) return pdl_fail(err, "image data URL has no ',' before its data");
        size_t head = (size_t)(comma - url);
        char meta[128];
        snprintf(meta, sizeof meta, "%.*s", (int)(head - 5 < 120 ? head - 5 : 120), url + 5);
        char *b64 = strstr(meta, ";base64");
        if (!b64 || strcmp(b64, ";base64") != 0)
            return pdl_fail(err, "image data URL 'data:%s,...': only base64 data URLs are accepted "
                            "(data:image/png;base64,...)", meta);
        *b64 = 0;
        if (meta[0] && strncasecmp(meta, "image/", 6) != 0)
            return pdl_fail(err, "image data URL has media type '%s'; expected image/png, image/jpeg or image/webp",
                            meta);
        uint8_t *bytes;
        size_t n;
        if (pdl_base64_decode(comma + 1, len - head - 1, &bytes, &n, err))
            return pdl_fail_prefix(err, "image data URL");
        int rc = pdl_image_decode(out, bytes, n, "image data URL", err);
        free(bytes);
        return rc;
    }
    if (len >= 7 && strncasecmp(url, "file://", 7) == 0) {
        if (!allowed_dir)
            return pdl_fail(err, "file:// image URLs are refused: the server was not started with "
                            "--allowed-local-media-path DIR; send the image as a data URL "
                            "(data:image/png;base64,...)");
        char *path = percent_decode(url + 7, len - 7);
        if (!path) return pdl_fail(err, "out of memory");
        if (path[0] != '/') {
            free(path);
            return pdl_fail(err, "file:// image URL must hold an absolute path (file:///...)");
        }
        char real[PATH_MAX], allowed[PATH_MAX];
        if (!realpath(allowed_dir, allowed)) {
            free(path);
            return pdl_fail(err, "the allowed local media path '%s' does not exist", allowed_dir);
        }
        if (!realpath(path, real)) {
            int rc = pdl_fail(err, "file:// image URL: '%s' does not exist", path);
            free(path);
            return rc;
        }
        size_t al = strlen(allowed);
        bool inside = strncmp(real, allowed, al) == 0 && (real[al] == '/' || (al == 1 && allowed[0] == '/'));
        if (!inside) {
            int rc = pdl_fail(err, "file:// image URL: '%s' is outside the allowed local media path '%s'", path,
                              allowed_dir);
            free(path);
            return rc;
        }
        free(path);
        return pdl_image_load(out, real, err);
    }
    if ((len >= 7 && strncasecmp(url, "http://", 7) == 0) || (len >= 8 && strncasecmp(url, "https://", 8) == 0))
        return pdl_fail(err, "image URLs over http(s) are not fetched: only data URLs (data:image/png;base64,...) "
                        "are accepted%s", allowed_dir ? ", and file:// URLs under the allowed local media path" : "");
    return pdl_fail(err, "unsupported image URL '%.32s%s': only data URLs (data:image/png;base64,...) are accepted",
                    url, len > 32 ? "..." : "");
}
