/*
 * gguf.c - the GGUF (v2, v3) reader: header, metadata, tensor infos, data.
 *
 * What it is for: turning an untrusted .gguf file into a validated gguf_file
 * whose metadata and tensors can be used without further bounds checks. Every
 * read is checked against the file size before it happens, every count is
 * checked against the bytes left before anything is allocated for it, every
 * string is validated as UTF-8, and every tensor's data range is checked to
 * lie inside the file. A failure gives one message naming the file, the byte
 * offset, and the key or tensor at fault.
 *
 * What it is not for: the meaning of keys (model_load_gguf.c, tokenizer) or
 * dequantization (kernels). Tensor data is never copied: pdl_tensor.data
 * points into the read-only mapping, which lives until gguf_close().
 *
 * Layout (all little-endian):
 *   "GGUF" u32 version u64 tensor_count u64 kv_count
 *   kv_count x { str key, u32 type, value }
 *   tensor_count x { str name, u32 n_dims, u64 ne[n_dims], u32 ggml_type, u64 offset }
 *   padding to general.alignment, then the data section
 * where str = u64 length + bytes (no NUL) and an array value is
 * u32 element type + u64 count + elements.
 */
#include "format/gguf.h"

#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/error.h"
#include "util/file_map.h"

#define GGUF_HEADER_BYTES 24u        /* magic, version, tensor_count, kv_count */
#define GGUF_DEFAULT_ALIGNMENT 32u
#define GGUF_MIN_KV_BYTES 13u        /* key length (8) + type (4) + smallest value (1) */
#define GGUF_MIN_TENSOR_INFO_BYTES 32u /* name length, n_dims, one ne, type, offset */
#define GGUF_NAME_SHOWN_MAX 160      /* bytes of a key/tensor name quoted in messages */

struct gguf_file {
    pdl_file_map map;
    uint32_t version;
    uint64_t alignment;
    uint64_t data_offset;       /* absolute start of the data section */

    gguf_kv *kvs;               /* [n_kv] */
    size_t n_kv;
    const char **kv_cstr;       /* [n_kv]: NUL-terminated copy of STRING values, else NULL */
    char *cstr_buf;             /* the storage behind kv_cstr */
    uint32_t *key_slots;        /* open-addressing hash of keys: kv index + 1, 0 = empty */
    size_t key_mask;            /* slots - 1 (a power of two minus one) */

    pdl_tensor_set tensors;
};

/* ---------------------------------------------------------------------------
 * Names of types
 * ------------------------------------------------------------------------- */

const char *gguf_type_name(gguf_type t) {
    switch (t) {
    case GGUF_TYPE_UINT8: return "UINT8";
    case GGUF_TYPE_INT8: return "INT8";
    case GGUF_TYPE_UINT16: return "UINT16";
    case GGUF_TYPE_INT16: return "INT16";
    case GGUF_TYPE_UINT32: return "UINT32";
    case GGUF_TYPE_INT32: return "INT32";
    case GGUF_TYPE_FLOAT32: return "FLOAT32";
    case GGUF_TYPE_BOOL: return "BOOL";
    case GGUF_TYPE_STRING: return "STRING";
    case GGUF_TYPE_ARRAY: return "ARRAY";
    case GGUF_TYPE_UINT64: return "UINT64";
    case GGUF_TYPE_INT64: return "INT64";
    case GGUF_TYPE_FLOAT64: return "FLOAT64";
    }
    return "UNKNOWN";
}

/* ggml tensor type ids, as numbered by ggml.h (gaps are ids ggml removed). */
static const char *const ggml_type_names[] = {
    [0] = "F32",       [1] = "F16",        [2] = "Q4_0",       [3] = "Q4_1",
    [4] = "Q4_2",      [5] = "Q4_3",       [6] = "Q5_0",       [7] = "Q5_1",
    [8] = "Q8_0",      [9] = "Q8_1",       [10] = "Q2_K",      [11] = "Q3_K",
    [12] = "Q4_K",     [13] = "Q5_K",      [14] = "Q6_K",      [15] = "Q8_K",
    [16] = "IQ2_XXS",  [17] = "IQ2_XS",    [18] = "IQ3_XXS",   [19] = "IQ1_S",
    [20] = "IQ4_NL",   [21] = "IQ3_S",     [22] = "IQ2_S",     [23] = "IQ4_XS",
    [24] = "I8",       [25] = "I16",       [26] = "I32",       [27] = "I64",
    [28] = "F64",      [29] = "IQ1_M",     [30] = "BF16",      [31] = "Q4_0_4_4",
    [32] = "Q4_0_4_8", [33] = "Q4_0_8_8",  [34] = "TQ1_0",     [35] = "TQ2_0",
    [36] = "IQ4_NL_4_4", [37] = "IQ4_NL_4_8", [38] = "IQ4_NL_8_8", [39] = "MXFP4",
};

static const char *ggml_type_name(uint32_t id) {
    if (id < sizeof ggml_type_names / sizeof ggml_type_names[0] && ggml_type_names[id])
        return ggml_type_names[id];
    return NULL;
}

/* The ggml types the engine can use, mapped to pdl_dtype; -1 otherwise. */
static int ggml_to_pdl_dtype(uint32_t id) {
    switch (id) {
    case 0: return PDL_DTYPE_F32;
    case 1: return PDL_DTYPE_F16;
    case 2: return PDL_DTYPE_Q4_0;
    case 3: return PDL_DTYPE_Q4_1;
    case 6: return PDL_DTYPE_Q5_0;
    case 7: return PDL_DTYPE_Q5_1;
    case 20: return PDL_DTYPE_IQ4_NL;
    case 23: return PDL_DTYPE_IQ4_XS;
    case 34: return PDL_DTYPE_TQ1_0;
    case 35: return PDL_DTYPE_TQ2_0;
    case 8: return PDL_DTYPE_Q8_0;
    case 10: return PDL_DTYPE_Q2_K;
    case 11: return PDL_DTYPE_Q3_K;
    case 12: return PDL_DTYPE_Q4_K;
    case 13: return PDL_DTYPE_Q5_K;
    case 14: return PDL_DTYPE_Q6_K;
    case 30: return PDL_DTYPE_BF16;
    case 39: return PDL_DTYPE_MXFP4;
    default: return -1;
    }
}

/* Bytes of one scalar value of type t; 0 for STRING, ARRAY and unknown types. */
size_t gguf_type_size(uint32_t t) {
    switch (t) {
    case GGUF_TYPE_UINT8: case GGUF_TYPE_INT8: case GGUF_TYPE_BOOL: return 1;
    case GGUF_TYPE_UINT16: case GGUF_TYPE_INT16: return 2;
    case GGUF_TYPE_UINT32: case GGUF_TYPE_INT32: case GGUF_TYPE_FLOAT32: return 4;
    case GGUF_TYPE_UINT64: case GGUF_TYPE_INT64: case GGUF_TYPE_FLOAT64: return 8;
    default: return 0;
    }
}

static bool is_known_type(uint32_t t) { return t <= GGUF_TYPE_FLOAT64; }

static bool is_unsigned_type(gguf_type t) {
    return t == GGUF_TYPE_UINT8 || t == GGUF_TYPE_UINT16 || t == GGUF_TYPE_UINT32 ||
           t == GGUF_TYPE_UINT64;
}

static bool is_signed_type(gguf_type t) {
    return t == GGUF_TYPE_INT8 || t == GGUF_TYPE_INT16 || t == GGUF_TYPE_INT32 ||
           t == GGUF_TYPE_INT64;
}

/* ---------------------------------------------------------------------------
 * Little-endian decoding (independent of the host's byte order)
 * ------------------------------------------------------------------------- */

static uint64_t load_le(const uint8_t *p, size_t n) {
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static uint32_t load_u32(const uint8_t *p) { return (uint32_t)load_le(p, 4); }
static uint64_t load_u64(const uint8_t *p) { return load_le(p, 8); }

static float load_f32(const uint8_t *p) {
    uint32_t bits = load_u32(p);
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static double load_f64(const uint8_t *p) {
    uint64_t bits = load_u64(p);
    double d;
    memcpy(&d, &bits, sizeof d);
    return d;
}

static int64_t sign_extend(uint64_t v, size_t bytes) {
    if (bytes >= 8) return (int64_t)v;
    uint64_t sign = (uint64_t)1 << (8 * bytes - 1);
    uint64_t mask = (sign << 1) - 1;
    v &= mask;
    /* (v ^ sign) - sign sign-extends without implementation-defined casts. */
    return (int64_t)(v ^ sign) - (int64_t)sign;
}

/* ---------------------------------------------------------------------------
 * UTF-8 validation
 * ------------------------------------------------------------------------- */

/* Returns the index of the first byte that is not part of a well-formed
 * UTF-8 sequence (overlongs, surrogates and code points above U+10FFFF are
 * ill-formed), or len when the whole string is valid. */
static uint64_t utf8_invalid_at(const uint8_t *s, uint64_t len) {
    uint64_t i = 0;
    while (i < len) {
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        uint8_t lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
        int n;                        /* continuation bytes */
        if (c >= 0xC2 && c <= 0xDF) {
            n = 1;
        } else if (c >= 0xE0 && c <= 0xEF) {
            n = 2;
            if (c == 0xE0) lo = 0xA0;        /* overlong */
            else if (c == 0xED) hi = 0x9F;   /* surrogates */
        } else if (c >= 0xF0 && c <= 0xF4) {
            n = 3;
            if (c == 0xF0) lo = 0x90;        /* overlong */
            else if (c == 0xF4) hi = 0x8F;   /* above U+10FFFF */
        } else {
            return i; /* continuation byte, C0/C1 overlong lead, or F5..FF */
        }
        if ((uint64_t)n > len - i - 1) return i;
        if (s[i + 1] < lo || s[i + 1] > hi) return i;
        for (int k = 2; k <= n; k++)
            if ((s[i + k] & 0xC0) != 0x80) return i;
        i += (uint64_t)n + 1;
    }
    return len;
}

/* ---------------------------------------------------------------------------
 * The bounds-checked reader
 * ------------------------------------------------------------------------- */

typedef struct reader {
    const uint8_t *base;
    uint64_t size;
    uint64_t pos;
    const char *path;
    pdl_error *err;
    char ctx[GGUF_NAME_SHOWN_MAX + 64]; /* "key 'x'", "tensor 'y'", "header", ... */
} reader;

/* Formats "<path>: offset <off>: <ctx>: <message>" and returns -1. */
static int rfail(reader *r, uint64_t off, const char *fmt, ...) PDL_PRINTF(3, 4);
static int rfail(reader *r, uint64_t off, const char *fmt, ...) {
    char msg[PDL_ERROR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (r->ctx[0])
        return err_fail(r->err, "%s: offset %llu: %s: %s", r->path, (unsigned long long)off,
                        r->ctx, msg);
    return err_fail(r->err, "%s: offset %llu: %s", r->path, (unsigned long long)off, msg);
}

static uint64_t left(const reader *r) { return r->size - r->pos; }

static int need(reader *r, uint64_t n, const char *what) {
    if (n > left(r))
        return rfail(r, r->pos,
                     "truncated file: %s needs %llu bytes, only %llu left (file size %llu)", what,
                     (unsigned long long)n, (unsigned long long)left(r),
                     (unsigned long long)r->size);
    return 0;
}

static int rd_u32(reader *r, uint32_t *v, const char *what) {
    if (need(r, 4, what)) return -1;
    *v = load_u32(r->base + r->pos);
    r->pos += 4;
    return 0;
}

static int rd_u64(reader *r, uint64_t *v, const char *what) {
    if (need(r, 8, what)) return -1;
    *v = load_u64(r->base + r->pos);
    r->pos += 8;
    return 0;
}

/* Reads a gguf string and validates it as UTF-8. `what` names it in messages
 * ("key", "string value", "array element"); elem is the element index for
 * array elements, UINT64_MAX otherwise. */
static int rd_str(reader *r, gguf_str *s, const char *what, uint64_t elem) {
    char label[64];
    if (elem == UINT64_MAX) snprintf(label, sizeof label, "%s", what);
    else snprintf(label, sizeof label, "%s %llu", what, (unsigned long long)elem);
    uint64_t at = r->pos;
    if (left(r) < 8)
        return rfail(r, at, "truncated file: the length of %s needs 8 bytes, only %llu left (file size %llu)",
                     label, (unsigned long long)left(r), (unsigned long long)r->size);
    uint64_t len = load_u64(r->base + at);
    r->pos += 8;
    if (len > left(r))
        return rfail(r, at, "%s length %llu exceeds the %llu bytes left in the file (file size %llu)",
                     label, (unsigned long long)len, (unsigned long long)left(r),
                     (unsigned long long)r->size);
    const uint8_t *p = r->base + r->pos;
    uint64_t bad = utf8_invalid_at(p, len);
    if (bad != len)
        return rfail(r, at, "%s is not valid UTF-8 (byte 0x%02X at position %llu of %llu)", label,
                     p[bad], (unsigned long long)bad, (unsigned long long)len);
    s->ptr = (const char *)p;
    s->len = len;
    r->pos += len;
    return 0;
}

/* Sets r->ctx to `kind 'name'`, cutting long names at a character boundary. */
static void set_ctx_name(reader *r, const char *kind, gguf_str name) {
    uint64_t n = name.len;
    const char *more = "";
    if (n > GGUF_NAME_SHOWN_MAX) {
        n = GGUF_NAME_SHOWN_MAX;
        while (n > 0 && ((uint8_t)name.ptr[n] & 0xC0) == 0x80) n--;
        more = "...";
    }
    snprintf(r->ctx, sizeof r->ctx, "%s '%.*s'%s", kind, (int)n, name.ptr, more);
}

/* ---------------------------------------------------------------------------
 * Metadata
 * ------------------------------------------------------------------------- */

static int parse_array(reader *r, gguf_kv *kv) {
    uint64_t at = r->pos;
    uint32_t et;
    if (rd_u32(r, &et, "the array element type")) return -1;
    if (et == GGUF_TYPE_ARRAY) return rfail(r, at, "nested arrays are not supported");
    if (!is_known_type(et)) return rfail(r, at, "unknown array element type %u", et);
    uint64_t count_at = r->pos;
    uint64_t count;
    if (rd_u64(r, &count, "the array count")) return -1;

    gguf_array *a = &kv->v.arr;
    a->elem_type = (gguf_type)et;
    a->count = count;
    a->data = r->base + r->pos;
    a->strings = NULL;

    if (et == GGUF_TYPE_STRING) {
        /* Each element takes at least its 8-byte length: this bounds the
         * allocation by the file size before it is made. */
        if (count > left(r) / 8)
            return rfail(r, count_at,
                         "array count %llu cannot fit in the %llu bytes left in the file "
                         "(a string element takes at least 8 bytes)",
                         (unsigned long long)count, (unsigned long long)left(r));
        if (count == 0) return 0;
        if (count > SIZE_MAX / sizeof(gguf_str))
            return rfail(r, count_at, "array count %llu is too large", (unsigned long long)count);
        gguf_str *strs = malloc((size_t)count * sizeof *strs);
        if (!strs)
            return rfail(r, count_at, "out of memory for %llu array strings",
                         (unsigned long long)count);
        a->strings = strs; /* owned by kv from here on, freed by gguf_close */
        for (uint64_t i = 0; i < count; i++)
            if (rd_str(r, &strs[i], "array element", i)) return -1;
        return 0;
    }

    size_t es = gguf_type_size(et);
    if (count > left(r) / es)
        return rfail(r, count_at,
                     "array count %llu of %s (%zu bytes each) cannot fit in the %llu bytes left "
                     "in the file",
                     (unsigned long long)count, gguf_type_name((gguf_type)et), es,
                     (unsigned long long)left(r));
    if (et == GGUF_TYPE_BOOL) {
        for (uint64_t i = 0; i < count; i++) {
            uint8_t b = r->base[r->pos + i];
            if (b > 1)
                return rfail(r, r->pos + i, "BOOL array element %llu is %u, not 0 or 1",
                             (unsigned long long)i, b);
        }
    }
    r->pos += count * es;
    return 0;
}

static int parse_value(reader *r, gguf_kv *kv) {
    uint64_t at = r->pos;
    switch (kv->type) {
    case GGUF_TYPE_STRING: return rd_str(r, &kv->v.str, "string value", UINT64_MAX);
    case GGUF_TYPE_ARRAY: return parse_array(r, kv);
    default: break;
    }
    size_t n = gguf_type_size(kv->type);
    char what[48];
    snprintf(what, sizeof what, "the %s value", gguf_type_name(kv->type));
    if (need(r, n, what)) return -1;
    const uint8_t *p = r->base + at;
    uint64_t raw = load_le(p, n);
    if (is_unsigned_type(kv->type)) {
        kv->v.u64 = raw;
    } else if (is_signed_type(kv->type)) {
        kv->v.i64 = sign_extend(raw, n);
    } else if (kv->type == GGUF_TYPE_FLOAT32) {
        kv->v.f64 = load_f32(p);
    } else if (kv->type == GGUF_TYPE_FLOAT64) {
        kv->v.f64 = load_f64(p);
    } else { /* BOOL */
        if (raw > 1) return rfail(r, at, "BOOL value is %u, not 0 or 1", (unsigned)raw);
        kv->v.b = raw != 0;
    }
    r->pos += n;
    return 0;
}

static uint64_t hash_bytes(const char *s, uint64_t n) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (uint64_t i = 0; i < n; i++) {
        h ^= (uint8_t)s[i];
        h *= 1099511628211ull;
    }
    return h;
}

/* Index of key (ptr, len) in f->kvs, or -1. */
static long find_key(const gguf_file *f, const char *key, uint64_t len) {
    if (!f->key_slots) return -1;
    for (size_t s = (size_t)hash_bytes(key, len) & f->key_mask;; s = (s + 1) & f->key_mask) {
        uint32_t slot = f->key_slots[s];
        if (slot == 0) return -1;
        const gguf_str *k = &f->kvs[slot - 1].key;
        if (k->len == len && memcmp(k->ptr, key, (size_t)len) == 0) return (long)(slot - 1);
    }
}

/* Builds the key hash, failing on the first duplicate key. */
static int index_keys(gguf_file *f, reader *r) {
    if (f->n_kv > UINT32_MAX / 4)
        return err_fail(r->err, "%s: %zu keys are too many", r->path, f->n_kv);
    size_t slots = 16;
    while (slots < 2 * f->n_kv) slots *= 2;
    f->key_slots = calloc(slots, sizeof *f->key_slots);
    if (!f->key_slots) return err_fail(r->err, "%s: out of memory indexing %zu keys", r->path, f->n_kv);
    f->key_mask = slots - 1;
    for (size_t i = 0; i < f->n_kv; i++) {
        const gguf_kv *kv = &f->kvs[i];
        size_t s = (size_t)hash_bytes(kv->key.ptr, kv->key.len) & f->key_mask;
        for (;; s = (s + 1) & f->key_mask) {
            uint32_t slot = f->key_slots[s];
            if (slot == 0) break;
            const gguf_kv *other = &f->kvs[slot - 1];
            if (other->key.len == kv->key.len &&
                memcmp(other->key.ptr, kv->key.ptr, (size_t)kv->key.len) == 0) {
                set_ctx_name(r, "key", kv->key);
                return rfail(r, kv->offset, "duplicate key (first at offset %llu)",
                             (unsigned long long)other->offset);
            }
        }
        f->key_slots[s] = (uint32_t)(i + 1);
    }
    return 0;
}

/* Makes the NUL-terminated copies gguf_get_str hands out, in one buffer. */
static int copy_strings(gguf_file *f, reader *r) {
    size_t total = 0;
    for (size_t i = 0; i < f->n_kv; i++)
        if (f->kvs[i].type == GGUF_TYPE_STRING) total += (size_t)f->kvs[i].v.str.len + 1;
    f->kv_cstr = calloc(f->n_kv ? f->n_kv : 1, sizeof *f->kv_cstr);
    f->cstr_buf = malloc(total ? total : 1);
    if (!f->kv_cstr || !f->cstr_buf)
        return err_fail(r->err, "%s: out of memory copying %zu bytes of string values", r->path, total);
    char *p = f->cstr_buf;
    for (size_t i = 0; i < f->n_kv; i++) {
        const gguf_kv *kv = &f->kvs[i];
        if (kv->type != GGUF_TYPE_STRING) continue;
        memcpy(p, kv->v.str.ptr, (size_t)kv->v.str.len);
        p[kv->v.str.len] = '\0';
        f->kv_cstr[i] = p;
        p += kv->v.str.len + 1;
    }
    return 0;
}

static int parse_kvs(gguf_file *f, reader *r, uint64_t kv_count) {
    size_t cap = kv_count < 256 ? (size_t)kv_count : 256;
    f->kvs = malloc((cap ? cap : 1) * sizeof *f->kvs);
    if (!f->kvs) return err_fail(r->err, "%s: out of memory", r->path);
    for (uint64_t i = 0; i < kv_count; i++) {
        if (f->n_kv == cap) {
            size_t ncap = cap * 2;
            gguf_kv *nk = realloc(f->kvs, ncap * sizeof *nk);
            if (!nk) return err_fail(r->err, "%s: out of memory reading key %llu", r->path, (unsigned long long)i);
            f->kvs = nk;
            cap = ncap;
        }
        gguf_kv *kv = &f->kvs[f->n_kv];
        memset(kv, 0, sizeof *kv);
        kv->offset = r->pos;
        snprintf(r->ctx, sizeof r->ctx, "key #%llu of %llu", (unsigned long long)i,
                 (unsigned long long)kv_count);
        if (rd_str(r, &kv->key, "key", UINT64_MAX)) return -1;
        if (memchr(kv->key.ptr, '\0', (size_t)kv->key.len))
            return rfail(r, kv->offset, "key contains a NUL byte");
        set_ctx_name(r, "key", kv->key);
        uint64_t type_at = r->pos;
        uint32_t type;
        if (rd_u32(r, &type, "the value type")) return -1;
        if (!is_known_type(type)) return rfail(r, type_at, "unknown value type %u", type);
        kv->type = (gguf_type)type;
        f->n_kv++; /* counted before the value so that gguf_close frees its strings */
        if (parse_value(r, kv)) return -1;
    }
    r->ctx[0] = '\0';
    return 0;
}

static int read_alignment(gguf_file *f, reader *r) {
    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    long i = find_key(f, "general.alignment", strlen("general.alignment"));
    if (i < 0) return 0;
    const gguf_kv *kv = &f->kvs[i];
    snprintf(r->ctx, sizeof r->ctx, "key 'general.alignment'");
    if (kv->type != GGUF_TYPE_UINT32)
        return rfail(r, kv->offset, "type %s, expected UINT32", gguf_type_name(kv->type));
    uint64_t a = kv->v.u64;
    if (a == 0 || (a & (a - 1)) != 0)
        return rfail(r, kv->offset, "alignment %llu is not a nonzero power of two",
                     (unsigned long long)a);
    f->alignment = a;
    r->ctx[0] = '\0';
    return 0;
}

/* ---------------------------------------------------------------------------
 * Tensor infos
 * ------------------------------------------------------------------------- */

static int parse_tensor_info(gguf_file *f, reader *r, uint64_t i, uint64_t n_tensors,
                             pdl_tensor *t) {
    uint64_t at = r->pos;
    snprintf(r->ctx, sizeof r->ctx, "tensor #%llu of %llu", (unsigned long long)i,
             (unsigned long long)n_tensors);
    gguf_str name;
    if (rd_str(r, &name, "tensor name", UINT64_MAX)) return -1;
    if (memchr(name.ptr, '\0', (size_t)name.len))
        return rfail(r, at, "tensor name contains a NUL byte");
    set_ctx_name(r, "tensor", name);
    if (name.len >= PDL_TENSOR_NAME_MAX)
        return rfail(r, at, "name is %llu bytes long; the limit is %d", (unsigned long long)name.len,
                     PDL_TENSOR_NAME_MAX - 1);
    memset(t, 0, sizeof *t);
    memcpy(t->name, name.ptr, (size_t)name.len);
    t->name[name.len] = '\0';

    uint64_t field = r->pos;
    uint32_t n_dims;
    if (rd_u32(r, &n_dims, "n_dims")) return -1;
    if (n_dims < 1 || n_dims > PDL_GGUF_MAX_DIMS)
        return rfail(r, field, "n_dims %u is not in 1..%d", n_dims, PDL_GGUF_MAX_DIMS);
    uint64_t ne[PDL_GGUF_MAX_DIMS];
    uint64_t nelems = 1;
    for (uint32_t d = 0; d < n_dims; d++) {
        field = r->pos;
        if (rd_u64(r, &ne[d], "a dimension")) return -1;
        if (ne[d] == 0) return rfail(r, field, "dimension ne[%u] is 0", d);
        if (ne[d] > (uint64_t)INT64_MAX / nelems)
            return rfail(r, field, "element count overflows at dimension ne[%u] = %llu", d,
                         (unsigned long long)ne[d]);
        nelems *= ne[d];
    }

    field = r->pos;
    uint32_t type;
    if (rd_u32(r, &type, "the tensor type")) return -1;
    int dt = ggml_to_pdl_dtype(type);
    if (dt < 0) {
        const char *tn = ggml_type_name(type);
        if (!tn) return rfail(r, field, "unknown ggml type %u", type);
        return rfail(r, field, "type %s (ggml type %u) is not supported yet (supported: F32, F16, BF16, Q4_0, Q4_1, "
                     "Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, MXFP4, IQ4_NL, IQ4_XS, TQ1_0, TQ2_0)",
                     tn, type);
    }
    t->dtype = (pdl_dtype)dt;
    uint64_t be = dtype_block_elems(t->dtype), bb = dtype_block_bytes(t->dtype);
    if (ne[0] % be != 0)
        return rfail(r, field, "%s row length ne[0] = %llu is not a multiple of the block size %llu",
                     dtype_name(t->dtype), (unsigned long long)ne[0], (unsigned long long)be);
    uint64_t blocks = nelems / be;
    if (blocks > UINT64_MAX / bb || blocks * bb > SIZE_MAX)
        return rfail(r, field, "data size of %llu elements overflows", (unsigned long long)nelems);
    t->nbytes = (size_t)(blocks * bb);

    field = r->pos;
    uint64_t offset;
    if (rd_u64(r, &offset, "the data offset")) return -1;
    if (offset % f->alignment != 0)
        return rfail(r, field, "data offset %llu is not a multiple of the alignment %llu",
                     (unsigned long long)offset, (unsigned long long)f->alignment);

    t->n_dims = (int)n_dims;
    for (uint32_t d = 0; d < n_dims; d++) t->shape[n_dims - 1 - d] = (int64_t)ne[d];
    t->file = f->map.path;
    t->file_offset = offset; /* relative until the data section start is known */
    return 0;
}

/* Places every tensor in the data section and checks it lies in the file. */
static int place_tensors(gguf_file *f, reader *r, const uint64_t *info_at) {
    for (size_t i = 0; i < f->tensors.count; i++) {
        pdl_tensor *t = &f->tensors.items[i];
        gguf_str name = {t->name, strlen(t->name)};
        set_ctx_name(r, "tensor", name);
        uint64_t rel = t->file_offset;
        if (rel > UINT64_MAX - f->data_offset)
            return rfail(r, info_at[i], "data offset %llu overflows", (unsigned long long)rel);
        uint64_t start = f->data_offset + rel;
        if ((uint64_t)t->nbytes > UINT64_MAX - start)
            return rfail(r, info_at[i], "data of %zu bytes at %llu overflows", t->nbytes,
                         (unsigned long long)start);
        uint64_t end = start + t->nbytes;
        if (end > r->size)
            return rfail(r, info_at[i], "data [%llu, %llu) past end of file (size %llu)",
                         (unsigned long long)start, (unsigned long long)end,
                         (unsigned long long)r->size);
        /* Kernels read elements through typed pointers: the data must be
         * aligned to its element (or block scale) size. Only alignments below
         * that (1, or 2 for F32) can break this. */
        size_t elem_align = t->dtype == PDL_DTYPE_F32 ? 4 : 2;
        if (start % elem_align != 0)
            return rfail(r, info_at[i], "data at file offset %llu is not aligned to %zu bytes for %s",
                         (unsigned long long)start, elem_align, dtype_name(t->dtype));
        t->file_offset = start;
        t->data = r->base + start;
    }
    r->ctx[0] = '\0';
    return 0;
}

static int parse_tensors(gguf_file *f, reader *r, uint64_t n_tensors) {
    uint64_t *info_at = NULL;
    size_t cap = 0;
    int rc = -1;
    for (uint64_t i = 0; i < n_tensors; i++) {
        if (f->tensors.count == cap) {
            size_t ncap = cap ? cap * 2 : 64;
            uint64_t *n = realloc(info_at, ncap * sizeof *n);
            if (!n) {
                err_fail(r->err, "%s: out of memory reading tensor %llu", r->path, (unsigned long long)i);
                goto done;
            }
            info_at = n;
            cap = ncap;
        }
        uint64_t at = r->pos;
        pdl_tensor t;
        if (parse_tensor_info(f, r, i, n_tensors, &t)) goto done;
        if (tensor_set_add(&f->tensors, &t, r->err)) {
            const pdl_tensor *first = tensor_set_find(&f->tensors, t.name);
            if (first)
                rfail(r, at, "duplicate tensor name (first at offset %llu)",
                      (unsigned long long)info_at[first - f->tensors.items]);
            else
                err_fail_prefix(r->err, "%s: offset %llu", r->path, (unsigned long long)at);
            goto done;
        }
        info_at[f->tensors.count - 1] = at;
    }
    r->ctx[0] = '\0';

    /* The data section starts at the end of the infos rounded up to the
     * alignment. It may lie past the end of a file without tensors (llama.cpp
     * writes vocab-only files without the final padding). */
    f->data_offset = (r->pos + f->alignment - 1) / f->alignment * f->alignment;
    rc = place_tensors(f, r, info_at);
    if (rc == 0) rc = tensor_set_check_disjoint(&f->tensors, r->err);
done:
    free(info_at);
    return rc;
}

/* ---------------------------------------------------------------------------
 * Opening and closing
 * ------------------------------------------------------------------------- */

static int parse_header(gguf_file *f, reader *r, uint64_t *n_tensors, uint64_t *n_kv) {
    snprintf(r->ctx, sizeof r->ctx, "header");
    if (r->size < 4)
        return rfail(r, 0, "truncated file: %llu bytes, too short for the GGUF magic",
                     (unsigned long long)r->size);
    const uint8_t *m = r->base;
    if (memcmp(m, "GGUF", 4) != 0)
        return rfail(r, 0, "bad magic %02X %02X %02X %02X (expected \"GGUF\"): not a GGUF file",
                     m[0], m[1], m[2], m[3]);
    r->pos = 4;
    if (rd_u32(r, &f->version, "the version")) return -1;
    if (f->version != 2 && f->version != 3) {
        const char *hint = "";
        if (f->version == 1) hint = " (GGUF v1 is obsolete; reconvert the model)";
        else if ((f->version & 0xFFFF) == 0 && f->version != 0) hint = " (a big-endian file?)";
        return rfail(r, 4, "unsupported GGUF version %u; only versions 2 and 3 are supported%s",
                     f->version, hint);
    }
    if (rd_u64(r, n_tensors, "the tensor count")) return -1;
    if (rd_u64(r, n_kv, "the key/value count")) return -1;
    if (*n_kv > left(r) / GGUF_MIN_KV_BYTES)
        return rfail(r, 16,
                     "kv_count %llu cannot fit in the %llu bytes after the header (a key/value "
                     "takes at least %u bytes)",
                     (unsigned long long)*n_kv, (unsigned long long)left(r), GGUF_MIN_KV_BYTES);
    if (*n_tensors > left(r) / GGUF_MIN_TENSOR_INFO_BYTES)
        return rfail(r, 8,
                     "tensor_count %llu cannot fit in the %llu bytes after the header (a tensor "
                     "info takes at least %u bytes)",
                     (unsigned long long)*n_tensors, (unsigned long long)left(r),
                     GGUF_MIN_TENSOR_INFO_BYTES);
    r->ctx[0] = '\0';
    return 0;
}

int gguf_open(gguf_file **out, const char *path, pdl_error *err) {
    *out = NULL;
    gguf_file *f = calloc(1, sizeof *f);
    if (!f) return err_fail(err, "%s: out of memory", path);
    if (file_map_open(&f->map, path, err)) {
        free(f);
        return -1;
    }
    reader r = {.base = f->map.data, .size = f->map.size, .path = f->map.path, .err = err};
    uint64_t n_tensors = 0, n_kv = 0;
    if (parse_header(f, &r, &n_tensors, &n_kv) || parse_kvs(f, &r, n_kv) ||
        index_keys(f, &r) || read_alignment(f, &r) || copy_strings(f, &r) ||
        parse_tensors(f, &r, n_tensors)) {
        gguf_close(f);
        return -1;
    }
    *out = f;
    return 0;
}

void gguf_release(gguf_file *f, const void *data, size_t n) { file_map_release(&f->map, data, n); }

void gguf_close(gguf_file *f) {
    if (!f) return;
    for (size_t i = 0; i < f->n_kv; i++)
        if (f->kvs[i].type == GGUF_TYPE_ARRAY) free((void *)f->kvs[i].v.arr.strings);
    free(f->kvs);
    free(f->kv_cstr);
    free(f->cstr_buf);
    free(f->key_slots);
    tensor_set_free(&f->tensors);
    file_map_close(&f->map);
    free(f);
}

/* ---------------------------------------------------------------------------
 * Lookups and typed getters
 * ------------------------------------------------------------------------- */

const char *gguf_path(const gguf_file *f) { return f->map.path; }
uint32_t gguf_version(const gguf_file *f) { return f->version; }
uint64_t gguf_alignment(const gguf_file *f) { return f->alignment; }
size_t gguf_kv_count(const gguf_file *f) { return f->n_kv; }

const gguf_kv *gguf_kv_at(const gguf_file *f, size_t i) {
    return i < f->n_kv ? &f->kvs[i] : NULL;
}

const gguf_kv *gguf_find_kv(const gguf_file *f, const char *key) {
    long i = find_key(f, key, strlen(key));
    return i < 0 ? NULL : &f->kvs[i];
}

const pdl_tensor_set *gguf_tensors(const gguf_file *f) { return &f->tensors; }

static int kv_fail(const gguf_file *f, const gguf_kv *kv, pdl_error *err, const char *fmt, ...)
    PDL_PRINTF(4, 5);
static int kv_fail(const gguf_file *f, const gguf_kv *kv, pdl_error *err, const char *fmt, ...) {
    char msg[PDL_ERROR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return err_fail(err, "%s: offset %llu: key '%.*s' (%s): %s", f->map.path,
                    (unsigned long long)kv->offset, (int)(kv->key.len > 200 ? 200 : kv->key.len),
                    kv->key.ptr, gguf_type_name(kv->type), msg);
}

/* Reads an integer kv into [lo, hi]. Returns 1, 0 (absent) or -1. */
static int get_int(const gguf_file *f, const char *key, int64_t lo, uint64_t hi, const char *want,
                   int64_t *is, uint64_t *us, pdl_error *err) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv) return 0;
    if (is_unsigned_type(kv->type)) {
        if (kv->v.u64 > hi)
            return kv_fail(f, kv, err, "value %llu does not fit in %s", (unsigned long long)kv->v.u64, want);
        *us = kv->v.u64;
        *is = (int64_t)kv->v.u64; /* only used when it fits, as checked above */
        return 1;
    }
    if (is_signed_type(kv->type)) {
        int64_t v = kv->v.i64;
        if (v < lo || (v > 0 && (uint64_t)v > hi))
            return kv_fail(f, kv, err, "value %lld does not fit in %s", (long long)v, want);
        *is = v;
        *us = (uint64_t)v;
        return 1;
    }
    return kv_fail(f, kv, err, "expected an integer (%s)", want);
}

int gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out, pdl_error *err) {
    int64_t is = 0;
    uint64_t us = 0;
    int rc = get_int(f, key, 0, UINT32_MAX, "u32", &is, &us, err);
    if (rc == 1) *out = (uint32_t)us;
    return rc;
}

int gguf_get_i32(const gguf_file *f, const char *key, int32_t *out, pdl_error *err) {
    int64_t is = 0;
    uint64_t us = 0;
    int rc = get_int(f, key, INT32_MIN, INT32_MAX, "i32", &is, &us, err);
    if (rc == 1) *out = (int32_t)is;
    return rc;
}

int gguf_get_f32(const gguf_file *f, const char *key, float *out, pdl_error *err) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv) return 0;
    double v;
    if (kv->type == GGUF_TYPE_FLOAT32 || kv->type == GGUF_TYPE_FLOAT64) v = kv->v.f64;
    else if (is_unsigned_type(kv->type)) v = (double)kv->v.u64;
    else if (is_signed_type(kv->type)) v = (double)kv->v.i64;
    else return kv_fail(f, kv, err, "expected a number");
    if ((v > FLT_MAX || v < -FLT_MAX) && !isinf(v))
        return kv_fail(f, kv, err, "value %g does not fit in f32", v);
    *out = (float)v;
    return 1;
}

int gguf_get_bool(const gguf_file *f, const char *key, bool *out, pdl_error *err) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv) return 0;
    if (kv->type != GGUF_TYPE_BOOL) return kv_fail(f, kv, err, "expected BOOL");
    *out = kv->v.b;
    return 1;
}

int gguf_get_str(const gguf_file *f, const char *key, const char **out, pdl_error *err) {
    long i = find_key(f, key, strlen(key));
    if (i < 0) return 0;
    const gguf_kv *kv = &f->kvs[i];
    if (kv->type != GGUF_TYPE_STRING) return kv_fail(f, kv, err, "expected STRING");
    const char *nul = memchr(kv->v.str.ptr, '\0', (size_t)kv->v.str.len);
    if (nul)
        return kv_fail(f, kv, err, "string contains a NUL byte at position %lld",
                       (long long)(nul - kv->v.str.ptr));
    *out = f->kv_cstr[i];
    return 1;
}

int gguf_get_arr(const gguf_file *f, const char *key, gguf_array *out, pdl_error *err) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv) return 0;
    if (kv->type != GGUF_TYPE_ARRAY) return kv_fail(f, kv, err, "expected ARRAY");
    *out = kv->v.arr;
    return 1;
}

/* ---------------------------------------------------------------------------
 * Array elements
 * ------------------------------------------------------------------------- */

int64_t gguf_arr_i64(const gguf_array *a, uint64_t i) {
    size_t n = gguf_type_size(a->elem_type);
    if (i >= a->count || n == 0) return 0;
    const uint8_t *p = a->data + i * n;
    uint64_t raw = load_le(p, n);
    if (is_signed_type(a->elem_type)) return sign_extend(raw, n);
    if (is_unsigned_type(a->elem_type)) return raw > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)raw;
    if (a->elem_type == GGUF_TYPE_BOOL) return raw != 0;
    double d = a->elem_type == GGUF_TYPE_FLOAT32 ? load_f32(p) : load_f64(p);
    if (d != d) return 0;
    if (d >= 9223372036854775807.0) return INT64_MAX;
    if (d <= -9223372036854775808.0) return INT64_MIN;
    return (int64_t)d;
}

double gguf_arr_f64(const gguf_array *a, uint64_t i) {
    size_t n = gguf_type_size(a->elem_type);
    if (i >= a->count || n == 0) return 0.0;
    const uint8_t *p = a->data + i * n;
    if (a->elem_type == GGUF_TYPE_FLOAT32) return load_f32(p);
    if (a->elem_type == GGUF_TYPE_FLOAT64) return load_f64(p);
    uint64_t raw = load_le(p, n);
    if (is_signed_type(a->elem_type)) return (double)sign_extend(raw, n);
    return (double)raw;
}
