/*
 * safetensors_write.c - the safetensors writer: header JSON with
 * data_offsets, then each tensor's data in row blocks.
 */
#define _POSIX_C_SOURCE 200809L
#include "format/safetensors_write.h"

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "util/error.h"

struct st_out {
    pdl_tensor *t;
    int n, cap;
};

st_out *st_out_new(void) { return calloc(1, sizeof(st_out)); }

void st_out_free(st_out *s) {
    if (!s) return;
    free(s->t);
    free(s);
}

int st_out_tensor(st_out *s, const char *name, pdl_dtype dtype, int n_dims, const int64_t *shape) {
    if (dtype_is_quantized(dtype) || n_dims < 1 || n_dims > PDL_MAX_DIMS || strlen(name) >= PDL_TENSOR_NAME_MAX)
        return -1;
    if (s->n == s->cap) {
        int cap = s->cap ? s->cap * 2 : 64;
        pdl_tensor *p = realloc(s->t, (size_t)cap * sizeof *p);
        if (!p) return -1;
        s->t = p;
        s->cap = cap;
    }
    pdl_tensor *t = &s->t[s->n++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->dtype = dtype;
    t->n_dims = n_dims;
    for (int i = 0; i < n_dims; i++) t->shape[i] = shape[i];
    t->nbytes = (size_t)tensor_nelems(t) * dtype_block_bytes(dtype);
    return 0;
}

int st_out_write(st_out *s, const char *path, gguf_fill_fn fill, void *user, pdl_error *err) {
    json_t *h = json_object();
    json_object_set_new(h, "__metadata__", json_pack("{s:s}", "format", "pt"));
    size_t off = 0;
    for (int i = 0; i < s->n; i++) {
        const pdl_tensor *t = &s->t[i];
        json_t *shape = json_array();
        for (int d = 0; d < t->n_dims; d++) json_array_append_new(shape, json_integer(t->shape[d]));
        json_object_set_new(h, t->name,
                            json_pack("{s:s, s:o, s:[I, I]}", "dtype", dtype_name(t->dtype), "shape", shape,
                                      "data_offsets", (json_int_t)off, (json_int_t)(off + t->nbytes)));
        off += t->nbytes;
    }
    char *js = json_dumps(h, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(h);
    if (!js) return err_fail(err, "%s: out of memory", path);
    size_t len = strlen(js), padded = (len + 7) / 8 * 8;
    FILE *f = fopen(path, "wb");
    if (!f) {
        free(js);
        return err_fail(err, "%s: cannot create: %s", path, strerror(errno));
    }
    uint64_t hl = padded;
    int bad = fwrite(&hl, 8, 1, f) != 1 || fwrite(js, 1, len, f) != len;
    for (size_t i = len; !bad && i < padded; i++) bad = fputc(' ', f) == EOF;
    free(js);
    for (int i = 0; !bad && i < s->n; i++) {
        const pdl_tensor *t = &s->t[i];
        bad = gguf_write_tensor_rows(f, t, fill, user) != 0;
    }
    if (fclose(f) != 0) bad = 1;
    if (bad) {
        remove(path);
        return err_fail(err, "%s: write failed (disk full?)", path);
    }
    return 0;
}
