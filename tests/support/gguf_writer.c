/*
 * gguf_writer.c - the in-memory GGUF builder behind tests/support/gguf_writer.h.
 *
 * Key/values are serialized when added (key and value bytes); tensors keep
 * their header fields and data. gguf_writer_bytes lays the whole file out
 * again each time, recording where each piece went.
 */
#include "support/gguf_writer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GW_MAX_DIMS 8

typedef struct gw_buf {
    uint8_t *p;
    size_t len, cap;
} gw_buf;

typedef struct gw_kv {
    char *key;
    size_t key_len;
    uint32_t type;
    gw_buf value;         /* serialized value, after the type field */
} gw_kv;

typedef struct gw_tensor {
    char *name;
    uint32_t type;
    int n_dims;
    uint64_t ne[GW_MAX_DIMS];
    uint8_t *data;
    size_t nbytes;
    size_t info_off, type_field, offset_field, data_off; /* set by the layout */
} gw_tensor;

struct gguf_writer {
    uint32_t version;
    uint32_t alignment;   /* used for the layout */
    gw_kv *kvs;
    size_t n_kvs, cap_kvs;
    size_t *kv_off;       /* [n_kvs], set by the layout */
    gw_tensor *tensors;
    size_t n_tensors, cap_tensors;
    gw_buf image;
    size_t data_start;
};

static void *xrealloc(void *p, size_t n) {
    void *q = realloc(p, n ? n : 1);
    if (!q) {
        fprintf(stderr, "gguf_writer: out of memory (%zu bytes)\n", n);
        abort();
    }
    return q;
}

static void buf_put(gw_buf *b, const void *src, size_t n) {
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n) cap *= 2;
        b->p = xrealloc(b->p, cap);
        b->cap = cap;
    }
    if (n) {
        if (src) memcpy(b->p + b->len, src, n);
        else memset(b->p + b->len, 0, n);
    }
    b->len += n;
}

static void buf_le(gw_buf *b, uint64_t v, size_t n) {
    uint8_t tmp[8];
    for (size_t i = 0; i < n; i++) tmp[i] = (uint8_t)(v >> (8 * i));
    buf_put(b, tmp, n);
}

static void buf_str(gw_buf *b, const char *s, size_t len) {
    buf_le(b, len, 8);
    buf_put(b, s, len);
}

gguf_writer *gguf_writer_new(uint32_t version) {
    gguf_writer *w = xrealloc(NULL, sizeof *w);
    memset(w, 0, sizeof *w);
    w->version = version;
    w->alignment = 32;
    return w;
}

void gguf_writer_free(gguf_writer *w) {
    if (!w) return;
    for (size_t i = 0; i < w->n_kvs; i++) {
        free(w->kvs[i].key);
        free(w->kvs[i].value.p);
    }
    for (size_t i = 0; i < w->n_tensors; i++) {
        free(w->tensors[i].name);
        free(w->tensors[i].data);
    }
    free(w->kvs);
    free(w->kv_off);
    free(w->tensors);
    free(w->image.p);
    free(w);
}

/* Appends a kv and returns its value buffer to fill. */
static gw_buf *new_kv(gguf_writer *w, const char *key, uint32_t type) {
    if (w->n_kvs == w->cap_kvs) {
        w->cap_kvs = w->cap_kvs ? w->cap_kvs * 2 : 16;
        w->kvs = xrealloc(w->kvs, w->cap_kvs * sizeof *w->kvs);
        w->kv_off = xrealloc(w->kv_off, w->cap_kvs * sizeof *w->kv_off);
    }
    gw_kv *kv = &w->kvs[w->n_kvs];
    w->kv_off[w->n_kvs] = 0;
    w->n_kvs++;
    memset(kv, 0, sizeof *kv);
    kv->key_len = strlen(key);
    kv->key = xrealloc(NULL, kv->key_len + 1);
    memcpy(kv->key, key, kv->key_len + 1);
    kv->type = type;
    return &kv->value;
}

/* Serializes one numeric element given in host representation. */
static void put_elem(gw_buf *b, gguf_type t, const void *p) {
    switch (t) {
    case GGUF_TYPE_UINT8: buf_le(b, *(const uint8_t *)p, 1); break;
    case GGUF_TYPE_INT8: buf_le(b, (uint8_t) * (const int8_t *)p, 1); break;
    case GGUF_TYPE_BOOL: buf_le(b, *(const bool *)p ? 1 : 0, 1); break;
    case GGUF_TYPE_UINT16: buf_le(b, *(const uint16_t *)p, 2); break;
    case GGUF_TYPE_INT16: buf_le(b, (uint16_t) * (const int16_t *)p, 2); break;
    case GGUF_TYPE_UINT32: buf_le(b, *(const uint32_t *)p, 4); break;
    case GGUF_TYPE_INT32: buf_le(b, (uint32_t) * (const int32_t *)p, 4); break;
    case GGUF_TYPE_FLOAT32: {
        uint32_t bits;
        memcpy(&bits, p, 4);
        buf_le(b, bits, 4);
        break;
    }
    case GGUF_TYPE_UINT64: buf_le(b, *(const uint64_t *)p, 8); break;
    case GGUF_TYPE_INT64: buf_le(b, (uint64_t) * (const int64_t *)p, 8); break;
    case GGUF_TYPE_FLOAT64: {
        uint64_t bits;
        memcpy(&bits, p, 8);
        buf_le(b, bits, 8);
        break;
    }
    default:
        fprintf(stderr, "gguf_writer: %d is not a numeric type\n", (int)t);
        abort();
    }
}

#define GW_SCALAR(fn, ctype, gtype)                                  \
    void fn(gguf_writer *w, const char *key, ctype v) {              \
        put_elem(new_kv(w, key, gtype), gtype, &v);                  \
    }
GW_SCALAR(gguf_writer_add_u8, uint8_t, GGUF_TYPE_UINT8)
GW_SCALAR(gguf_writer_add_i8, int8_t, GGUF_TYPE_INT8)
GW_SCALAR(gguf_writer_add_u16, uint16_t, GGUF_TYPE_UINT16)
GW_SCALAR(gguf_writer_add_i16, int16_t, GGUF_TYPE_INT16)
GW_SCALAR(gguf_writer_add_u32, uint32_t, GGUF_TYPE_UINT32)
GW_SCALAR(gguf_writer_add_i32, int32_t, GGUF_TYPE_INT32)
GW_SCALAR(gguf_writer_add_f32, float, GGUF_TYPE_FLOAT32)
GW_SCALAR(gguf_writer_add_bool, bool, GGUF_TYPE_BOOL)
GW_SCALAR(gguf_writer_add_u64, uint64_t, GGUF_TYPE_UINT64)
GW_SCALAR(gguf_writer_add_i64, int64_t, GGUF_TYPE_INT64)
GW_SCALAR(gguf_writer_add_f64, double, GGUF_TYPE_FLOAT64)

void gguf_writer_add_str(gguf_writer *w, const char *key, const char *v) {
    gguf_writer_add_strn(w, key, v, strlen(v));
}

void gguf_writer_add_strn(gguf_writer *w, const char *key, const char *v, size_t len) {
    buf_str(new_kv(w, key, GGUF_TYPE_STRING), v, len);
}

void gguf_writer_add_arr(gguf_writer *w, const char *key, gguf_type elem_type,
                         const void *elems, size_t count) {
    gw_buf *b = new_kv(w, key, GGUF_TYPE_ARRAY);
    buf_le(b, (uint32_t)elem_type, 4);
    buf_le(b, count, 8);
    size_t es = gguf_type_size(elem_type);
    for (size_t i = 0; i < count; i++) put_elem(b, elem_type, (const uint8_t *)elems + i * es);
}

void gguf_writer_add_str_arr(gguf_writer *w, const char *key, const char *const *strs,
                             size_t count) {
    gw_buf *b = new_kv(w, key, GGUF_TYPE_ARRAY);
    buf_le(b, GGUF_TYPE_STRING, 4);
    buf_le(b, count, 8);
    for (size_t i = 0; i < count; i++) buf_str(b, strs[i], strlen(strs[i]));
}

void gguf_writer_add_raw_kv(gguf_writer *w, const char *key, uint32_t type, const void *value,
                            size_t len) {
    buf_put(new_kv(w, key, type), value, len);
}

void gguf_writer_set_alignment(gguf_writer *w, uint32_t alignment) {
    gguf_writer_add_u32(w, "general.alignment", alignment);
    if (alignment != 0 && (alignment & (alignment - 1)) == 0) w->alignment = alignment;
}

size_t gguf_writer_tensor_nbytes(uint32_t ggml_type, int n_dims, const uint64_t *ne) {
    size_t block = 1, bytes;
    switch (ggml_type) {
    case GW_GGML_F32: case GW_GGML_I32: bytes = 4; break;
    case GW_GGML_F16: case GW_GGML_BF16: bytes = 2; break;
    case GW_GGML_F64: bytes = 8; break;
    case GW_GGML_I8: bytes = 1; break;
    case GW_GGML_Q8_0: block = 32; bytes = 34; break;
    case GW_GGML_Q4_0: block = 32; bytes = 18; break;
    case GW_GGML_Q4_1: block = 32; bytes = 20; break;
    case GW_GGML_Q4_K: block = 256; bytes = 144; break;
    case GW_GGML_Q6_K: block = 256; bytes = 210; break;
    default: return 0;
    }
    uint64_t n = 1;
    for (int i = 0; i < n_dims; i++) n *= ne[i];
    return (size_t)(n / block * bytes);
}

void gguf_writer_add_tensor(gguf_writer *w, const char *name, uint32_t ggml_type, int n_dims,
                            const uint64_t *ne, const void *data, size_t nbytes) {
    if (n_dims < 0 || n_dims > GW_MAX_DIMS) {
        fprintf(stderr, "gguf_writer: n_dims %d out of 0..%d\n", n_dims, GW_MAX_DIMS);
        abort();
    }
    if (w->n_tensors == w->cap_tensors) {
        w->cap_tensors = w->cap_tensors ? w->cap_tensors * 2 : 16;
        w->tensors = xrealloc(w->tensors, w->cap_tensors * sizeof *w->tensors);
    }
    gw_tensor *t = &w->tensors[w->n_tensors++];
    memset(t, 0, sizeof *t);
    size_t nl = strlen(name);
    t->name = xrealloc(NULL, nl + 1);
    memcpy(t->name, name, nl + 1);
    t->type = ggml_type;
    t->n_dims = n_dims;
    for (int i = 0; i < n_dims; i++) t->ne[i] = ne[i];
    t->nbytes = nbytes;
    t->data = xrealloc(NULL, nbytes);
    if (data) memcpy(t->data, data, nbytes);
    else memset(t->data, 0, nbytes);
}

void gguf_writer_add_tensor_f32(gguf_writer *w, const char *name, int n_dims,
                                const int64_t *shape, const float *data) {
    uint64_t ne[GW_MAX_DIMS];
    size_t n = 1;
    for (int i = 0; i < n_dims; i++) {
        ne[i] = (uint64_t)shape[n_dims - 1 - i];
        n *= (size_t)shape[i];
    }
    gguf_writer_add_tensor(w, name, GW_GGML_F32, n_dims, ne, data, n * sizeof(float));
}

static size_t align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

/* Lays the file out into w->image, recording positions. */
static void layout(gguf_writer *w) {
    gw_buf *b = &w->image;
    b->len = 0;
    buf_put(b, "GGUF", 4);
    buf_le(b, w->version, 4);
    buf_le(b, w->n_tensors, 8);
    buf_le(b, w->n_kvs, 8);
    for (size_t i = 0; i < w->n_kvs; i++) {
        const gw_kv *kv = &w->kvs[i];
        w->kv_off[i] = b->len;
        buf_str(b, kv->key, kv->key_len);
        buf_le(b, kv->type, 4);
        buf_put(b, kv->value.p, kv->value.len);
    }
    size_t rel = 0;
    for (size_t i = 0; i < w->n_tensors; i++) {
        gw_tensor *t = &w->tensors[i];
        t->info_off = b->len;
        buf_str(b, t->name, strlen(t->name));
        buf_le(b, (uint32_t)t->n_dims, 4);
        for (int d = 0; d < t->n_dims; d++) buf_le(b, t->ne[d], 8);
        t->type_field = b->len;
        buf_le(b, t->type, 4);
        t->offset_field = b->len;
        rel = align_up(rel, w->alignment);
        buf_le(b, rel, 8);
        t->data_off = rel; /* relative for now */
        rel += t->nbytes;
    }
    w->data_start = align_up(b->len, w->alignment);
    buf_put(b, NULL, w->data_start - b->len);
    for (size_t i = 0; i < w->n_tensors; i++) {
        gw_tensor *t = &w->tensors[i];
        t->data_off += w->data_start;
        buf_put(b, NULL, t->data_off - b->len); /* padding between tensors */
        buf_put(b, t->data, t->nbytes);
    }
}

const uint8_t *gguf_writer_bytes(gguf_writer *w, size_t *size) {
    layout(w);
    *size = w->image.len;
    return w->image.p;
}

uint8_t *gguf_writer_copy(gguf_writer *w, size_t *size) {
    const uint8_t *p = gguf_writer_bytes(w, size);
    uint8_t *c = xrealloc(NULL, *size);
    memcpy(c, p, *size);
    return c;
}

int gguf_writer_write(gguf_writer *w, const char *path) {
    size_t n;
    const uint8_t *p = gguf_writer_bytes(w, &n);
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t put = fwrite(p, 1, n, f);
    if (fclose(f) != 0 || put != n) return -1;
    return 0;
}

size_t gguf_writer_kv_offset(const gguf_writer *w, size_t i) { return w->kv_off[i]; }

size_t gguf_writer_kv_value_offset(const gguf_writer *w, size_t i) {
    return w->kv_off[i] + 8 + w->kvs[i].key_len + 4;
}

size_t gguf_writer_tensor_info_offset(const gguf_writer *w, size_t i) {
    return w->tensors[i].info_off;
}

size_t gguf_writer_tensor_type_field(const gguf_writer *w, size_t i) {
    return w->tensors[i].type_field;
}

size_t gguf_writer_tensor_offset_field(const gguf_writer *w, size_t i) {
    return w->tensors[i].offset_field;
}

size_t gguf_writer_tensor_data_offset(const gguf_writer *w, size_t i) {
    return w->tensors[i].data_off;
}

size_t gguf_writer_data_start(const gguf_writer *w) { return w->data_start; }
