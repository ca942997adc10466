/*
 * gguf_write.c - the GGUF v3 writer: metadata and tensor infos in memory,
 * tensor data streamed to the file in row blocks.
 */
#define _POSIX_C_SOURCE 200809L
#include "format/gguf_write.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "format/gguf.h"
#include "util/error.h"

#define ALIGN 32

typedef struct out_kv {
    char *key;
    uint32_t type;
    uint64_t u;   /* u32 / bool */
    float f;
    char *s;
    uint32_t elem_type; /* arrays */
    size_t n;
    char **strs;        /* [n] string arrays */
    void *nums;         /* [n] 4-byte numbers */
} out_kv;

typedef struct out_tensor {
    pdl_tensor t;
    uint64_t offset; /* within the data section */
} out_tensor;

struct gguf_out {
    out_kv *kvs;
    int n_kvs, cap_kvs;
    out_tensor *tensors;
    int n_tensors, cap_tensors;
};

gguf_out *gguf_out_new(void) { return calloc(1, sizeof(gguf_out)); }

void gguf_out_free(gguf_out *g) {
    if (!g) return;
    for (int i = 0; i < g->n_kvs; i++) {
        out_kv *kv = &g->kvs[i];
        free(kv->key), free(kv->s), free(kv->nums);
        for (size_t j = 0; kv->strs && j < kv->n; j++) free(kv->strs[j]);
        free(kv->strs);
    }
    free(g->kvs);
    free(g->tensors);
    free(g);
}

static out_kv *add_kv(gguf_out *g, const char *key, uint32_t type) {
    if (g->n_kvs == g->cap_kvs) {
        int cap = g->cap_kvs ? g->cap_kvs * 2 : 32;
        out_kv *p = realloc(g->kvs, (size_t)cap * sizeof *p);
        if (!p) return NULL;
        g->kvs = p;
        g->cap_kvs = cap;
    }
    out_kv *kv = &g->kvs[g->n_kvs];
    memset(kv, 0, sizeof *kv);
    kv->key = strdup(key);
    if (!kv->key) return NULL;
    kv->type = type;
    g->n_kvs++;
    return kv;
}

int gguf_out_u32(gguf_out *g, const char *key, uint32_t v) {
    out_kv *kv = add_kv(g, key, GGUF_TYPE_UINT32);
    if (!kv) return -1;
    kv->u = v;
    return 0;
}

int gguf_out_f32(gguf_out *g, const char *key, float v) {
    out_kv *kv = add_kv(g, key, GGUF_TYPE_FLOAT32);
    if (!kv) return -1;
    kv->f = v;
    return 0;
}

int gguf_out_bool(gguf_out *g, const char *key, int v) {
    out_kv *kv = add_kv(g, key, GGUF_TYPE_BOOL);
    if (!kv) return -1;
    kv->u = v != 0;
    return 0;
}

int gguf_out_str(gguf_out *g, const char *key, const char *v) {
    out_kv *kv = add_kv(g, key, GGUF_TYPE_STRING);
    if (!kv || !(kv->s = strdup(v))) return -1;
    return 0;
}

int gguf_out_str_arr(gguf_out *g, const char *key, const char *const *v, size_t n) {
    out_kv *kv = add_kv(g, key, GGUF_TYPE_ARRAY);
    if (!kv) return -1;
    kv->elem_type = GGUF_TYPE_STRING;
    kv->strs = calloc(n ? n : 1, sizeof *kv->strs);
    if (!kv->strs) return -1;
    kv->n = n;
    for (size_t i = 0; i < n; i++)
        if (!(kv->strs[i] = strdup(v[i]))) return -1;
    return 0;
}

static int num_arr(gguf_out *g, const char *key, uint32_t type, const void *v, size_t n) {
    out_kv *kv = add_kv(g, key, GGUF_TYPE_ARRAY);
    if (!kv) return -1;
    kv->elem_type = type;
    kv->nums = malloc(n ? n * 4 : 1);
    if (!kv->nums) return -1;
    memcpy(kv->nums, v, n * 4);
    kv->n = n;
    return 0;
}

int gguf_out_i32_arr(gguf_out *g, const char *key, const int32_t *v, size_t n) {
    return num_arr(g, key, GGUF_TYPE_INT32, v, n);
}

int gguf_out_tensor(gguf_out *g, const char *name, pdl_dtype dtype, int n_dims, const int64_t *shape) {
    if (n_dims < 1 || n_dims > PDL_GGUF_MAX_DIMS || strlen(name) >= PDL_TENSOR_NAME_MAX) return -1;
    if (g->n_tensors == g->cap_tensors) {
        int cap = g->cap_tensors ? g->cap_tensors * 2 : 64;
        out_tensor *p = realloc(g->tensors, (size_t)cap * sizeof *p);
        if (!p) return -1;
        g->tensors = p;
        g->cap_tensors = cap;
    }
    out_tensor *o = &g->tensors[g->n_tensors++];
    memset(o, 0, sizeof *o);
    snprintf(o->t.name, sizeof o->t.name, "%s", name);
    o->t.dtype = dtype;
    o->t.n_dims = n_dims;
    for (int i = 0; i < n_dims; i++) o->t.shape[i] = shape[i];
    o->t.nbytes = dtype_row_bytes(dtype, shape[n_dims - 1]) * (size_t)(tensor_nelems(&o->t) / shape[n_dims - 1]);
    return 0;
}

static uint32_t ggml_type_of(pdl_dtype t) {
    switch (t) {
    case PDL_DTYPE_F32: return 0;
    case PDL_DTYPE_F16: return 1;
    case PDL_DTYPE_Q4_0: return 2;
    case PDL_DTYPE_Q4_1: return 3;
    case PDL_DTYPE_Q5_0: return 6;
    case PDL_DTYPE_Q5_1: return 7;
    case PDL_DTYPE_Q8_0: return 8;
    case PDL_DTYPE_Q2_K: return 10;
    case PDL_DTYPE_Q3_K: return 11;
    case PDL_DTYPE_Q4_K: return 12;
    case PDL_DTYPE_Q5_K: return 13;
    case PDL_DTYPE_Q6_K: return 14;
    case PDL_DTYPE_BF16: return 30;
    case PDL_DTYPE_MXFP4: return 39;
    case PDL_DTYPE_IQ4_NL: return 20;
    case PDL_DTYPE_IQ4_XS: return 23;
    case PDL_DTYPE_TQ1_0: return 34;
    case PDL_DTYPE_TQ2_0: return 35;
    default: return 0;
    }
}

static int put(FILE *f, const void *p, size_t n) { return fwrite(p, 1, n, f) == n ? 0 : -1; }
static int put_u32(FILE *f, uint32_t v) { return put(f, &v, 4); }
static int put_u64(FILE *f, uint64_t v) { return put(f, &v, 8); }
static int put_str(FILE *f, const char *s) {
    uint64_t n = strlen(s);
    return put_u64(f, n) || put(f, s, n);
}

int gguf_write_tensor_rows(FILE *f, const pdl_tensor *t, gguf_fill_fn fill, void *user) {
    int64_t cols = t->shape[t->n_dims - 1], rows = tensor_nelems(t) / cols;
    size_t row_bytes = dtype_row_bytes(t->dtype, cols);
    int64_t step = (int64_t)((16u << 20) / (row_bytes ? row_bytes : 1)); /* ~16 MB at a time */
    if (step < 1) step = 1;
    void *buf = malloc((size_t)(step < rows ? step : rows) * row_bytes + 1);
    if (!buf) return -1;
    int bad = 0;
    for (int64_t r = 0; !bad && r < rows; r += step) {
        int64_t n = rows - r < step ? rows - r : step;
        fill(t, r, n, buf, user);
        bad = put(f, buf, (size_t)n * row_bytes);
    }
    free(buf);
    return bad ? -1 : 0;
}

int gguf_out_write(gguf_out *g, const char *path, gguf_fill_fn fill, void *user, pdl_error *err) {
    FILE *f = fopen(path, "wb");
    if (!f) return err_fail(err, "%s: cannot create: %s", path, strerror(errno));
    int bad = put(f, "GGUF", 4) || put_u32(f, 3) || put_u64(f, (uint64_t)g->n_tensors) || put_u64(f, (uint64_t)g->n_kvs);
    for (int i = 0; !bad && i < g->n_kvs; i++) {
        const out_kv *kv = &g->kvs[i];
        bad = put_str(f, kv->key) || put_u32(f, kv->type);
        if (bad) break;
        if (kv->type == GGUF_TYPE_UINT32) bad = put_u32(f, (uint32_t)kv->u);
        else if (kv->type == GGUF_TYPE_FLOAT32) bad = put(f, &kv->f, 4);
        else if (kv->type == GGUF_TYPE_BOOL) bad = put(f, &(uint8_t){(uint8_t)kv->u}, 1);
        else if (kv->type == GGUF_TYPE_ARRAY) {
            bad = put_u32(f, kv->elem_type) || put_u64(f, kv->n);
            if (kv->elem_type == GGUF_TYPE_STRING)
                for (size_t j = 0; !bad && j < kv->n; j++) bad = put_str(f, kv->strs[j]);
            else if (!bad)
                bad = put(f, kv->nums, kv->n * 4);
        } else
            bad = put_str(f, kv->s);
    }
    uint64_t off = 0;
    for (int i = 0; !bad && i < g->n_tensors; i++) {
        out_tensor *o = &g->tensors[i];
        o->offset = off;
        bad = put_str(f, o->t.name) || put_u32(f, (uint32_t)o->t.n_dims);
        for (int d = o->t.n_dims - 1; !bad && d >= 0; d--) bad = put_u64(f, (uint64_t)o->t.shape[d]); /* ne[] order */
        bad = bad || put_u32(f, ggml_type_of(o->t.dtype)) || put_u64(f, o->offset);
        off += (o->t.nbytes + ALIGN - 1) / ALIGN * ALIGN;
    }
    long pos = ftell(f);
    static const char zeros[ALIGN];
    if (!bad && pos % ALIGN) bad = put(f, zeros, (size_t)(ALIGN - pos % ALIGN));
    /* data, in blocks of rows */
    for (int i = 0; !bad && i < g->n_tensors; i++) {
        const pdl_tensor *t = &g->tensors[i].t;
        bad = gguf_write_tensor_rows(f, t, fill, user) != 0;
        if (!bad && t->nbytes % ALIGN) bad = put(f, zeros, ALIGN - t->nbytes % ALIGN);
    }
    if (fclose(f) != 0) bad = 1;
    if (bad) {
        remove(path);
        return err_fail(err, "%s: write failed (disk full?)", path);
    }
    return 0;
}
