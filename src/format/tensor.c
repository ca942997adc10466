/*
 * tensor.c - dtype sizes and the name-indexed tensor set.
 */
#include "format/tensor.h"

#include <stdlib.h>
#include <string.h>

#include "util/error.h"

const char *pdl_dtype_name(pdl_dtype t) {
    switch (t) {
    case PDL_DTYPE_F32: return "F32";
    case PDL_DTYPE_F16: return "F16";
    case PDL_DTYPE_BF16: return "BF16";
    case PDL_DTYPE_Q8_0: return "Q8_0";
    default: return "?";
    }
}

size_t pdl_dtype_block_elems(pdl_dtype t) { return t == PDL_DTYPE_Q8_0 ? 32 : 1; }

size_t pdl_dtype_block_bytes(pdl_dtype t) {
    switch (t) {
    case PDL_DTYPE_F32: return 4;
    case PDL_DTYPE_F16: return 2;
    case PDL_DTYPE_BF16: return 2;
    case PDL_DTYPE_Q8_0: return 34;
    default: return 0;
    }
}

size_t pdl_dtype_row_bytes(pdl_dtype t, int64_t n) {
    return (size_t)n / pdl_dtype_block_elems(t) * pdl_dtype_block_bytes(t);
}

int64_t pdl_tensor_nelems(const pdl_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->n_dims; i++) n *= t->shape[i];
    return n;
}

int pdl_tensor_set_add(pdl_tensor_set *set, const pdl_tensor *t, pdl_error *err) {
    const pdl_tensor *dup = pdl_tensor_set_find(set, t->name);
    if (dup)
        return pdl_fail(err, "%s: duplicate tensor '%s' (first at offset %llu of %s)", t->file,
                        t->name, (unsigned long long)dup->file_offset, dup->file);
    if (set->count == set->cap) {
        size_t cap = set->cap ? set->cap * 2 : 64;
        pdl_tensor *items = realloc(set->items, cap * sizeof *items);
        if (!items) return pdl_fail(err, "out of memory adding tensor '%s'", t->name);
        set->items = items;
        set->cap = cap;
    }
    set->items[set->count++] = *t;
    return 0;
}

const pdl_tensor *pdl_tensor_set_find(const pdl_tensor_set *set, const char *name) {
    /* Linear scan: models have at most a few thousand tensors and lookups
     * happen once per weight at load time. */
    for (size_t i = 0; i < set->count; i++)
        if (strcmp(set->items[i].name, name) == 0) return &set->items[i];
    return NULL;
}

void pdl_tensor_set_free(pdl_tensor_set *set) {
    free(set->items);
    memset(set, 0, sizeof *set);
}
