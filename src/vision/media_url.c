/*
 * media_url.c - an image given as a URL (OpenAI's image_url.url): a data:
 * URL with base64 bytes, or a file:// URL under the one folder the server
 * was told to allow (vLLM's --allowed-local-media-path).
 *
 * Nothing is fetched from the network: http and https URLs are refused with
 * a message saying so. A file:// path is checked twice against the allowed
 * folder: first by its text (".", ".." and repeated slashes taken out, as a
 * URL's dot segments are), before the file system is asked anything, then
 * resolved (symbolic links followed), so a link out of the folder is refused
 * too. Everything outside gets one message whatever exists there, so a
 * client cannot learn which paths exist on the host; only a path under the
 * folder may be told that it does not exist.
 */
#define _DEFAULT_SOURCE
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

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
        return err_fail(err, "bad base64: length %zu is not a multiple of 4", n);
    uint8_t *buf = malloc(n / 4 * 3 + 1);
    if (!buf) return err_fail(err, "out of memory for %zu bytes of base64", n);
    size_t o = 0;
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < data_n; i++) {
        int v = b64_value((unsigned char)s[i]);
        if (v < 0) {
            free(buf);
            unsigned char c = (unsigned char)s[i];
            if (c >= 0x20 && c < 0x7f)
                return err_fail(err, "bad base64: character '%c' at offset %zu", c, i);
            return err_fail(err, "bad base64: byte 0x%02x at offset %zu", c, i);
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

/* An absolute path with ".", ".." and repeated slashes taken out by its
 * text alone, the file system not asked (RFC 3986's removal of dot
 * segments): "/a/./b//../c" -> "/a/c"; ".." at the root stays there. A
 * relative path is taken from the working folder. NULL when out of memory
 * or the working folder is unknown. */
static char *lexical_path(const char *p) {
    char cwd[PATH_MAX] = "";
    if (p[0] != '/' && !getcwd(cwd, sizeof cwd)) return NULL;
    size_t cl = strlen(cwd), n = cl + strlen(p) + 3;
    char *joined = malloc(n), *out = malloc(n);
    if (!joined || !out) {
        free(joined), free(out);
        return NULL;
    }
    snprintf(joined, n, "%s/%s", cwd, p);
    size_t o = 0;
    for (const char *s = joined; *s;) {
        while (*s == '/') s++;
        const char *e = s;
        while (*e && *e != '/') e++;
        size_t len = (size_t)(e - s);
        if (len == 2 && s[0] == '.' && s[1] == '.') {
            while (o > 0 && out[o - 1] != '/') o--; /* drop the last component and its slash */
            if (o > 0) o--;
        } else if (len > 0 && !(len == 1 && s[0] == '.')) {
            out[o++] = '/';
            memcpy(out + o, s, len);
            o += len;
        }
        s = e;
    }
    if (o == 0) out[o++] = '/';
    out[o] = '\0';
    free(joined);
    return out;
}

/* Whether the normalized absolute path lies under the folder dir (also
 * normalized): strictly below it, or, with or_equal, dir itself. */
static bool path_under(const char *path, const char *dir, bool or_equal) {
    size_t dl = strlen(dir);
    if (dl == 1 && dir[0] == '/') return or_equal || path[1] != '\0';
    return strncmp(path, dir, dl) == 0 && (path[dl] == '/' || (or_equal && path[dl] == '\0'));
}

/* A path that did not resolve, under the folder by its text: whether its
 * deepest ancestor that does resolve lies under the resolved folder (or is
 * it); a missing file beside a link out of the folder is then outside too. */
static bool missing_path_inside(const char *lexical, const char *real_dir) {
    char *p = strdup(lexical);
    if (!p) return false;
    bool inside = false;
    for (;;) {
        char *slash = strrchr(p, '/');
        if (!slash) break;
        if (slash == p) slash[1] = '\0'; /* up to the root */
        else *slash = '\0';
        char real[PATH_MAX];
        if (realpath(p, real)) {
            inside = path_under(real, real_dir, true);
            break;
        }
        if (strcmp(p, "/") == 0) break;
    }
    free(p);
    return inside;
}

/* A file:// URL's path (percent escapes decoded) -> the image, when the
 * path lies under allowed_dir both by its text and once resolved. */
static int image_from_file_url(pdl_image **out, const char *path, const char *allowed_dir, pdl_error *err) {
    char real_dir[PATH_MAX];
    if (!realpath(allowed_dir, real_dir))
        return err_fail(err, "the allowed local media path '%s' does not exist", allowed_dir);
    char *lex = lexical_path(path), *lex_dir = lexical_path(allowed_dir);
    if (!lex || !lex_dir) {
        free(lex), free(lex_dir);
        return err_fail(err, "out of memory");
    }
    /* the folder as given or as resolved, so that a folder named through a
     * link may be addressed either way */
    bool inside = path_under(lex, lex_dir, false) || path_under(lex, real_dir, false);
    char real[PATH_MAX];
    bool exists = false;
    if (inside) {
        exists = realpath(lex, real) != NULL;
        inside = exists ? path_under(real, real_dir, false) : missing_path_inside(lex, real_dir);
    }
    int rc;
    if (!inside)
        rc = err_fail(err, "file:// image URL: the path is outside the allowed local media path '%s'", allowed_dir);
    else if (!exists)
        rc = err_fail(err, "file:// image URL: '%s' does not exist", path);
    else
        rc = pdl_image_load(out, real, err);
    free(lex), free(lex_dir);
    return rc;
}

int pdl_image_from_url(pdl_image **out, const char *url, size_t len, const char *allowed_dir, pdl_error *err) {
    *out = NULL;
    if (len >= 5 && strncasecmp(url, "data:", 5) == 0) {
        const char *comma = memchr(url, ',', len);
        if (!comma) return err_fail(err, "image data URL has no ',' before its data");
        size_t head = (size_t)(comma - url);
        char meta[128];
        snprintf(meta, sizeof meta, "%.*s", (int)(head - 5 < 120 ? head - 5 : 120), url + 5);
        char *b64 = strstr(meta, ";base64");
        if (!b64 || strcmp(b64, ";base64") != 0)
            return err_fail(err, "image data URL 'data:%s,...': only base64 data URLs are accepted "
                            "(data:image/png;base64,...)", meta);
        *b64 = 0;
        if (meta[0] && strncasecmp(meta, "image/", 6) != 0)
            return err_fail(err, "image data URL has media type '%s'; expected image/png, image/jpeg or image/webp",
                            meta);
        uint8_t *bytes;
        size_t n;
        if (pdl_base64_decode(comma + 1, len - head - 1, &bytes, &n, err))
            return err_fail_prefix(err, "image data URL");
        int rc = pdl_image_decode(out, bytes, n, "image data URL", err);
        free(bytes);
        return rc;
    }
    if (len >= 7 && strncasecmp(url, "file://", 7) == 0) {
        if (!allowed_dir)
            return err_fail(err, "file:// image URLs are refused: the server was not started with "
                            "--allowed-local-media-path DIR; send the image as a data URL "
                            "(data:image/png;base64,...)");
        char *path = percent_decode(url + 7, len - 7);
        if (!path) return err_fail(err, "out of memory");
        if (path[0] != '/') {
            free(path);
            return err_fail(err, "file:// image URL must hold an absolute path (file:///...)");
        }
        int rc = image_from_file_url(out, path, allowed_dir, err);
        free(path);
        return rc;
    }
    if ((len >= 7 && strncasecmp(url, "http://", 7) == 0) || (len >= 8 && strncasecmp(url, "https://", 8) == 0))
        return err_fail(err, "image URLs over http(s) are not fetched: only data URLs (data:image/png;base64,...) "
                        "are accepted%s", allowed_dir ? ", and file:// URLs under the allowed local media path" : "");
    return err_fail(err, "unsupported image URL '%.32s%s': only data URLs (data:image/png;base64,...) are accepted",
                    url, len > 32 ? "..." : "");
}
