/*
 * tensor.c - dtype sizes and the name-indexed tensor set.
 */
#include "format/tensor.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/error.h"

/* Name, elements per block and bytes per block of each dtype. */
static const struct {
    const char *name;
    size_t elems, bytes;
} dtype_info[PDL_DTYPE_COUNT] = {
    [PDL_DTYPE_F32] = {"F32", 1, 4},      [PDL_DTYPE_F16] = {"F16", 1, 2},
    [PDL_DTYPE_BF16] = {"BF16", 1, 2},    [PDL_DTYPE_Q8_0] = {"Q8_0", 32, 34},
    [PDL_DTYPE_Q4_0] = {"Q4_0", 32, 18},  [PDL_DTYPE_Q4_1] = {"Q4_1", 32, 20},
    [PDL_DTYPE_Q5_0] = {"Q5_0", 32, 22},  [PDL_DTYPE_Q5_1] = {"Q5_1", 32, 24},
    [PDL_DTYPE_Q2_K] = {"Q2_K", 256, 84}, [PDL_DTYPE_Q3_K] = {"Q3_K", 256, 110},
    [PDL_DTYPE_Q4_K] = {"Q4_K", 256, 144}, [PDL_DTYPE_Q5_K] = {"Q5_K", 256, 176},
    [PDL_DTYPE_Q6_K] = {"Q6_K", 256, 210},
    [PDL_DTYPE_U32] = {"U32", 1, 4},      [PDL_DTYPE_MLX_Q4] = {"MLX_Q4", 8, 4},
    [PDL_DTYPE_MLX_Q8] = {"MLX_Q8", 4, 4},   [PDL_DTYPE_MXFP4] = {"MXFP4", 32, 17},
    [PDL_DTYPE_IQ4_NL] = {"IQ4_NL", 32, 18}, [PDL_DTYPE_IQ4_XS] = {"IQ4_XS", 256, 136},
    [PDL_DTYPE_TQ1_0] = {"TQ1_0", 256, 54}, [PDL_DTYPE_TQ2_0] = {"TQ2_0", 256, 66},
    [PDL_DTYPE_U8] = {"U8", 1, 1},
};

static int dtype_ok(pdl_dtype t) { return (unsigned)t < PDL_DTYPE_COUNT; }

const char *dtype_name(pdl_dtype t) { return dtype_ok(t) ? dtype_info[t].name : "?"; }

size_t dtype_block_elems(pdl_dtype t) { return dtype_ok(t) ? dtype_info[t].elems : 1; }

size_t dtype_block_bytes(pdl_dtype t) { return dtype_ok(t) ? dtype_info[t].bytes : 0; }

int dtype_is_quantized(pdl_dtype t) { return dtype_block_elems(t) > 1; }

int dtype_is_mlx(pdl_dtype t) { return t == PDL_DTYPE_MLX_Q4 || t == PDL_DTYPE_MLX_Q8; }

size_t dtype_row_bytes(pdl_dtype t, int64_t n) {
    return (size_t)n / dtype_block_elems(t) * dtype_block_bytes(t);
}

static int by_data(const void *a, const void *b) {
    const pdl_tensor *x = *(const pdl_tensor *const *)a, *y = *(const pdl_tensor *const *)b;
    uintptr_t p = (uintptr_t)x->data, q = (uintptr_t)y->data;
    return (p > q) - (p < q);
}

int tensor_set_check_disjoint(const pdl_tensor_set *set, pdl_error *err) {
    if (set->count < 2) return 0;
    const pdl_tensor **order = malloc(set->count * sizeof *order);
    if (!order) return err_fail(err, "out of memory checking %zu tensors", set->count);
    size_t n = 0;
    for (size_t i = 0; i < set->count; i++)
        if (set->items[i].nbytes > 0) order[n++] = &set->items[i];
    qsort(order, n, sizeof *order, by_data);
    int rc = 0;
    for (size_t i = 1; i < n && rc == 0; i++) {
        const pdl_tensor *a = order[i - 1], *b = order[i];
        /* different files are different mappings: their ranges never meet */
        if ((const char *)a->data + a->nbytes > (const char *)b->data)
            rc = err_fail(err, "%s: tensors '%s' (bytes %llu..%llu) and '%s' (bytes %llu..%llu) overlap",
                          a->file ? a->file : "model", a->name, (unsigned long long)a->file_offset,
                          (unsigned long long)(a->file_offset + a->nbytes), b->name,
                          (unsigned long long)b->file_offset, (unsigned long long)(b->file_offset + b->nbytes));
    }
    free(order);
    return rc;
}

int64_t tensor_nelems(const pdl_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->n_dims; i++) n *= t->shape[i];
    return n;
}

const char *tensor_type_name(const pdl_tensor *t, char *buf, size_t n) {
    if (dtype_is_mlx(t->dtype))
        snprintf(buf, n, "%s(g%d)", dtype_name(t->dtype), (int)t->mlx.group);
    else
        snprintf(buf, n, "%s", dtype_name(t->dtype));
    return buf;
}

void tensor_mlx_skip_rows(pdl_tensor *t, int64_t r0) {
    if (!dtype_is_mlx(t->dtype) || t->n_dims != 2 || t->mlx.group <= 0) return;
    size_t row = (size_t)(t->shape[1] / t->mlx.group) * dtype_block_bytes(t->mlx.dtype);
    t->mlx.scales = (const uint8_t *)t->mlx.scales + (size_t)r0 * row;
    t->mlx.biases = (const uint8_t *)t->mlx.biases + (size_t)r0 * row;
}

static uint64_t name_hash(const char *s) { /* FNV-1a */
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

static int index_rebuild(pdl_tensor_set *set, size_t cap) {
    uint32_t *idx = calloc(cap, sizeof *idx);
    if (!idx) return -1;
    for (size_t i = 0; i < set->count; i++) {
        size_t slot = name_hash(set->items[i].name) & (cap - 1);
        while (idx[slot]) slot = (slot + 1) & (cap - 1);
        idx[slot] = (uint32_t)i + 1;
    }
    free(set->index);
    set->index = idx;
    set->index_cap = cap;
    return 0;
}

int tensor_set_add(pdl_tensor_set *set, const pdl_tensor *t, pdl_error *err) {
    const pdl_tensor *dup = tensor_set_find(set, t->name);
    if (dup)
        return err_fail(err, "%s: duplicate tensor '%s' (first at offset %llu of %s)", t->file,
                        t->name, (unsigned long long)dup->file_offset, dup->file);
    if (set->count >= UINT32_MAX - 1) return err_fail(err, "%s: too many tensors", t->file);
    if (set->count == set->cap) {
        size_t cap = set->cap ? set->cap * 2 : 64;
        pdl_tensor *items = realloc(set->items, cap * sizeof *items);
        if (!items) return err_fail(err, "out of memory adding tensor '%s'", t->name);
        set->items = items;
        bool *taken = realloc(set->taken, cap * sizeof *taken);
        if (!taken) return err_fail(err, "out of memory adding tensor '%s'", t->name);
        memset(taken + set->cap, 0, (cap - set->cap) * sizeof *taken);
        set->taken = taken;
        set->cap = cap;
    }
    set->items[set->count++] = *t;
    if (set->count * 2 > set->index_cap) {
        if (index_rebuild(set, set->index_cap ? set->index_cap * 2 : 128)) {
            set->count--;
            return err_fail(err, "out of memory adding tensor '%s'", t->name);
        }
    } else {
        size_t slot = name_hash(t->name) & (set->index_cap - 1);
        while (set->index[slot]) slot = (slot + 1) & (set->index_cap - 1);
        set->index[slot] = (uint32_t)set->count;
    }
    return 0;
}

const pdl_tensor *tensor_set_find(const pdl_tensor_set *set, const char *name) {
    if (!set->index_cap) return NULL;
    size_t slot = name_hash(name) & (set->index_cap - 1);
    while (set->index[slot]) {
        const pdl_tensor *t = &set->items[set->index[slot] - 1];
        if (strcmp(t->name, name) == 0) return t;
        slot = (slot + 1) & (set->index_cap - 1);
    }
    return NULL;
}

const pdl_tensor *tensor_set_take(const pdl_tensor_set *set, const char *name) {
    const pdl_tensor *t = tensor_set_find(set, name);
    if (t) set->taken[t - set->items] = true;
    return t;
}

void tensor_set_free(pdl_tensor_set *set) {
    free(set->items);
    free(set->taken);
    free(set->index);
    memset(set, 0, sizeof *set);
}
