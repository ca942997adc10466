/*
 * st_writer.c - the safetensors test writer behind tests/support/st_writer.h.
 *
 * The header JSON is written by hand, not through jansson, so that tests can
 * put arbitrary (even invalid) JSON text into an entry.
 */
#define _POSIX_C_SOURCE 200809L
#include "support/st_writer.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STW_MAX_DIMS 16

typedef struct stw_entry {
    char *name;
    char *raw;                      /* verbatim JSON value, or NULL for a tensor */
    char *dtype;
    int n_dims;
    int64_t shape[STW_MAX_DIMS];
    uint8_t *data;                  /* [nbytes] */
    size_t nbytes;
    bool has_override;
    uint64_t over_begin, over_end;  /* data_offsets written instead of the real ones */
} stw_entry;

struct stw_writer {
    stw_entry *entries;
    size_t n_entries, cap_entries;
    char **md_keys, **md_values;
    size_t n_md, cap_md;
};

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "st_writer: out of memory (%zu bytes)\n", n);
        abort();
    }
    return p;
}

static void *xrealloc(void *p, size_t n) {
    p = realloc(p, n ? n : 1);
    if (!p) {
        fprintf(stderr, "st_writer: out of memory (%zu bytes)\n", n);
        abort();
    }
    return p;
}

static char *xstrdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *p = xmalloc(n);
    memcpy(p, s, n);
    return p;
}

/* ---------------------------------------------------------------------------
 * A growable string
 * ------------------------------------------------------------------------- */

typedef struct sbuf {
    char *p;
    size_t n, cap;
} sbuf;

static void sb_put(sbuf *s, const char *text, size_t len) {
    if (s->n + len + 1 > s->cap) {
        size_t cap = s->cap ? s->cap : 256;
        while (s->n + len + 1 > cap) cap *= 2;
        s->p = xrealloc(s->p, cap);
        s->cap = cap;
    }
    memcpy(s->p + s->n, text, len);
    s->n += len;
    s->p[s->n] = '\0';
}

static void sb_puts(sbuf *s, const char *text) { sb_put(s, text, strlen(text)); }

static void sb_printf(sbuf *s, const char *fmt, ...) {
    char tmp[128];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof tmp) {
        fprintf(stderr, "st_writer: formatted piece too long\n");
        abort();
    }
    sb_put(s, tmp, (size_t)n);
}

/* A JSON string literal; bytes >= 0x80 pass through (UTF-8 stays UTF-8). */
static void sb_json_string(sbuf *s, const char *text) {
    sb_puts(s, "\"");
    for (const unsigned char *c = (const unsigned char *)text; *c; c++) {
        if (*c == '"') sb_puts(s, "\\\"");
        else if (*c == '\\') sb_puts(s, "\\\\");
        else if (*c < 0x20) sb_printf(s, "\\u%04x", *c);
        else sb_put(s, (const char *)c, 1);
    }
    sb_puts(s, "\"");
}

/* ---------------------------------------------------------------------------
 * Building
 * ------------------------------------------------------------------------- */

stw_writer *stw_new(void) {
    stw_writer *w = xmalloc(sizeof *w);
    memset(w, 0, sizeof *w);
    return w;
}

void stw_free(stw_writer *w) {
    if (!w) return;
    for (size_t i = 0; i < w->n_entries; i++) {
        free(w->entries[i].name);
        free(w->entries[i].raw);
        free(w->entries[i].dtype);
        free(w->entries[i].data);
    }
    free(w->entries);
    for (size_t i = 0; i < w->n_md; i++) {
        free(w->md_keys[i]);
        free(w->md_values[i]);
    }
    free(w->md_keys);
    free(w->md_values);
    free(w);
}

size_t stw_dtype_size(const char *dtype) {
    static const struct { const char *name; size_t size; } table[] = {
        {"F64", 8}, {"I64", 8}, {"U64", 8}, {"F32", 4}, {"I32", 4}, {"U32", 4},
        {"F16", 2}, {"BF16", 2}, {"I16", 2}, {"U16", 2},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (strcmp(dtype, table[i].name) == 0) return table[i].size;
    return 1;
}

static stw_entry *new_entry(stw_writer *w, const char *name) {
    if (w->n_entries == w->cap_entries) {
        w->cap_entries = w->cap_entries ? w->cap_entries * 2 : 16;
        w->entries = xrealloc(w->entries, w->cap_entries * sizeof *w->entries);
    }
    stw_entry *e = &w->entries[w->n_entries++];
    memset(e, 0, sizeof *e);
    e->name = xstrdup(name);
    return e;
}

void stw_add_bytes(stw_writer *w, const char *name, const char *dtype, int n_dims,
                   const int64_t *shape, const void *data, size_t nbytes) {
    if (n_dims < 0 || n_dims > STW_MAX_DIMS) {
        fprintf(stderr, "st_writer: tensor '%s': %d dimensions\n", name, n_dims);
        abort();
    }
    stw_entry *e = new_entry(w, name);
    e->dtype = xstrdup(dtype);
    e->n_dims = n_dims;
    for (int i = 0; i < n_dims; i++) e->shape[i] = shape[i];
    e->nbytes = nbytes;
    e->data = xmalloc(nbytes);
    if (data) {
        if (nbytes) memcpy(e->data, data, nbytes);
    } else {
        for (size_t i = 0; i < nbytes; i++) e->data[i] = (uint8_t)(i * 31 + 7);
    }
}

void stw_add(stw_writer *w, const char *name, const char *dtype, int n_dims,
             const int64_t *shape, const void *data) {
    size_t n = stw_dtype_size(dtype);
    for (int i = 0; i < n_dims; i++) {
        if (shape[i] < 0 || (shape[i] > 0 && n > SIZE_MAX / (size_t)shape[i])) {
            fprintf(stderr, "st_writer: tensor '%s': shape not writable; use stw_add_bytes\n",
                    name);
            abort();
        }
        n *= (size_t)shape[i];
    }
    stw_add_bytes(w, name, dtype, n_dims, shape, data, n);
}

void stw_add_f32(stw_writer *w, const char *name, int n_dims, const int64_t *shape,
                 const float *data) {
    stw_add(w, name, "F32", n_dims, shape, data);
}

void stw_add_raw_entry(stw_writer *w, const char *name, const char *json_value) {
    stw_entry *e = new_entry(w, name);
    e->raw = xstrdup(json_value);
}

void stw_set_offsets(stw_writer *w, const char *name, uint64_t begin, uint64_t end) {
    for (size_t i = 0; i < w->n_entries; i++) {
        stw_entry *e = &w->entries[i];
        if (!e->raw && strcmp(e->name, name) == 0) {
            e->has_override = true;
            e->over_begin = begin;
            e->over_end = end;
            return;
        }
    }
    fprintf(stderr, "st_writer: stw_set_offsets: no tensor '%s'\n", name);
    abort();
}

void stw_metadata(stw_writer *w, const char *key, const char *value) {
    if (w->n_md == w->cap_md) {
        w->cap_md = w->cap_md ? w->cap_md * 2 : 8;
        w->md_keys = xrealloc(w->md_keys, w->cap_md * sizeof *w->md_keys);
        w->md_values = xrealloc(w->md_values, w->cap_md * sizeof *w->md_values);
    }
    w->md_keys[w->n_md] = xstrdup(key);
    w->md_values[w->n_md] = xstrdup(value);
    w->n_md++;
}

/* ---------------------------------------------------------------------------
 * Serializing
 * ------------------------------------------------------------------------- */

/* begins[i]: where entry i's data starts in the data section (widest dtype
 * first, insertion order within a width). Returns the data section size. */
static uint64_t layout(const stw_writer *w, uint64_t *begins) {
    static const size_t widths[] = {8, 4, 2, 1};
    uint64_t cur = 0;
    for (size_t k = 0; k < sizeof widths / sizeof widths[0]; k++) {
        for (size_t i = 0; i < w->n_entries; i++) {
            const stw_entry *e = &w->entries[i];
            if (e->raw || stw_dtype_size(e->dtype) != widths[k]) continue;
            begins[i] = cur;
            cur += e->nbytes;
        }
    }
    return cur;
}

static bool has_raw_metadata(const stw_writer *w) {
    for (size_t i = 0; i < w->n_entries; i++)
        if (w->entries[i].raw && strcmp(w->entries[i].name, "__metadata__") == 0) return true;
    return false;
}

char *stw_header(const stw_writer *w, size_t *len) {
    uint64_t *begins = xmalloc(w->n_entries * sizeof *begins);
    layout(w, begins);
    sbuf s = {0};
    sb_puts(&s, "{");
    bool first = true;
    if (w->n_md > 0 && !has_raw_metadata(w)) {
        sb_puts(&s, "\"__metadata__\":{");
        for (size_t i = 0; i < w->n_md; i++) {
            if (i) sb_puts(&s, ",");
            sb_json_string(&s, w->md_keys[i]);
            sb_puts(&s, ":");
            sb_json_string(&s, w->md_values[i]);
        }
        sb_puts(&s, "}");
        first = false;
    }
    for (size_t i = 0; i < w->n_entries; i++) {
        const stw_entry *e = &w->entries[i];
        if (!first) sb_puts(&s, ",");
        first = false;
        sb_json_string(&s, e->name);
        sb_puts(&s, ":");
        if (e->raw) {
            sb_puts(&s, e->raw);
            continue;
        }
        sb_puts(&s, "{\"dtype\":");
        sb_json_string(&s, e->dtype);
        sb_puts(&s, ",\"shape\":[");
        for (int d = 0; d < e->n_dims; d++) sb_printf(&s, d ? ",%lld" : "%lld", (long long)e->shape[d]);
        uint64_t b = e->has_override ? e->over_begin : begins[i];
        uint64_t en = e->has_override ? e->over_end : begins[i] + e->nbytes;
        sb_printf(&s, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)b,
                  (unsigned long long)en);
    }
    sb_puts(&s, "}");
    while ((8 + s.n) % 8 != 0) sb_puts(&s, " ");
    free(begins);
    *len = s.n;
    return s.p;
}

uint8_t *stw_raw_bytes(const char *header, size_t header_len, const void *data, size_t data_len,
                       size_t *len) {
    size_t n = 8 + header_len + data_len;
    uint8_t *buf = xmalloc(n);
    for (int i = 0; i < 8; i++) buf[i] = (uint8_t)((uint64_t)header_len >> (8 * i));
    if (header_len) memcpy(buf + 8, header, header_len);
    if (data_len) memcpy(buf + 8 + header_len, data, data_len);
    *len = n;
    return buf;
}

uint8_t *stw_serialize(const stw_writer *w, size_t *len) {
    size_t hlen;
    char *header = stw_header(w, &hlen);
    uint64_t *begins = xmalloc(w->n_entries * sizeof *begins);
    uint64_t data_len = layout(w, begins);
    uint8_t *data = xmalloc((size_t)data_len);
    for (size_t i = 0; i < w->n_entries; i++) {
        const stw_entry *e = &w->entries[i];
        if (!e->raw && e->nbytes) memcpy(data + begins[i], e->data, e->nbytes);
    }
    uint8_t *out = stw_raw_bytes(header, hlen, data, (size_t)data_len, len);
    free(data);
    free(begins);
    free(header);
    return out;
}

int stw_offsets(const stw_writer *w, const char *name, uint64_t *begin, uint64_t *end,
                uint64_t *data_start) {
    int rc = -1;
    uint64_t *begins = xmalloc(w->n_entries * sizeof *begins);
    layout(w, begins);
    for (size_t i = 0; i < w->n_entries; i++) {
        const stw_entry *e = &w->entries[i];
        if (e->raw || strcmp(e->name, name) != 0) continue;
        size_t hlen;
        free(stw_header(w, &hlen));
        if (begin) *begin = begins[i];
        if (end) *end = begins[i] + e->nbytes;
        if (data_start) *data_start = 8 + hlen;
        rc = 0;
        break;
    }
    free(begins);
    return rc;
}

static int write_all(const char *path, const void *data, size_t len) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t put = len ? fwrite(data, 1, len, f) : 0;
    int rc = (put == len) ? 0 : -1;
    if (fclose(f) != 0) rc = -1;
    return rc;
}

int stw_write(const stw_writer *w, const char *path) {
    size_t len;
    uint8_t *bytes = stw_serialize(w, &len);
    int rc = write_all(path, bytes, len);
    free(bytes);
    return rc;
}

int stw_write_raw(const char *path, const char *header, size_t header_len, const void *data,
                  size_t data_len) {
    size_t len;
    uint8_t *bytes = stw_raw_bytes(header, header_len, data, data_len, &len);
    int rc = write_all(path, bytes, len);
    free(bytes);
    return rc;
}

int stw_write_index(const char *path, size_t n, const char *const *names,
                    const char *const *shards) {
    sbuf s = {0};
    sb_puts(&s, "{\"metadata\": {\"total_size\": 0}, \"weight_map\": {");
    for (size_t i = 0; i < n; i++) {
        if (i) sb_puts(&s, ", ");
        sb_json_string(&s, names[i]);
        sb_puts(&s, ": ");
        sb_json_string(&s, shards[i]);
    }
    sb_puts(&s, "}}\n");
    int rc = write_all(path, s.p, s.n);
    free(s.p);
    return rc;
}
