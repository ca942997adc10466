/*
 * kv_cache.c - the K/V storage: its memory, and copying a block.
 *
 * The K and V pools are huge-page buffers (util/huge_alloc.h): attention
 * reads them in long runs, and their pages are only backed once used.
 */
#include "model/kv_cache.h"

#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "util/error.h"
#include "util/huge_alloc.h"

int pdl_kv_cache_create(pdl_kv_cache **out, const pdl_model *model, pdl_kv_dtype dtype,
                        int block_size, int n_blocks, pdl_error *err) {
    *out = NULL;
    if (block_size <= 0 || n_blocks <= 0)
        return err_fail(err, "kv cache: block size (%d) and block count (%d) must be positive",
                        block_size, n_blocks);
    if (dtype != PDL_KV_F16 && dtype != PDL_KV_F32)
        return err_fail(err, "kv cache: unknown dtype %d", (int)dtype);
    pdl_kv_cache *kv = calloc(1, sizeof *kv);
    if (!kv) return err_fail(err, "kv cache: out of memory");
    kv->dtype = dtype;
    kv->n_layers = model->cfg.n_layers;
    kv->kv_dim = model->cfg.n_kv_heads * model->cfg.head_dim;
    kv->head_dim = model->cfg.head_dim;
    kv->block_size = block_size;
    kv->n_blocks = n_blocks;
    kv->elem_bytes = dtype == PDL_KV_F16 ? 2 : 4;
    size_t bytes = (size_t)kv->n_layers * (size_t)n_blocks * (size_t)block_size * (size_t)kv->kv_dim *
                   kv->elem_bytes;
    kv->k = huge_alloc(bytes);
    kv->v = huge_alloc(bytes);
    if (!kv->k || !kv->v) {
        pdl_kv_cache_free(kv);
        return err_fail(err, "kv cache: out of memory for %d blocks of %d tokens (%zu bytes each for K and V)",
                        n_blocks, block_size, bytes);
    }
    *out = kv;
    return 0;
}

void pdl_kv_cache_free(pdl_kv_cache *kv) {
    if (!kv) return;
    huge_free(kv->k);
    huge_free(kv->v);
    free(kv);
}

void pdl_kv_cache_copy_block(pdl_kv_cache *kv, int32_t src, int32_t dst, int n_slots) {
    size_t block = (size_t)kv->kv_dim * (size_t)kv->block_size * kv->elem_bytes;
    size_t head = (size_t)kv->head_dim * (size_t)kv->block_size * kv->elem_bytes; /* one head of V */
    size_t rows = (size_t)kv->head_dim * (size_t)n_slots * kv->elem_bytes;
    for (int l = 0; l < kv->n_layers; l++) {
        /* K is dimension-major within a block: the whole block (slots past
         * n_slots are written before they are read); V is slot-major within
         * each head: each head's first n_slots rows */
        char *k = kv_k_pool(kv, l), *v = kv_v_pool(kv, l);
        memcpy(k + (size_t)dst * block, k + (size_t)src * block, block);
        for (int h = 0; h < kv->kv_dim / kv->head_dim; h++)
            memcpy(v + (size_t)dst * block + (size_t)h * head, v + (size_t)src * block + (size_t)h * head, rows);
    }
}

size_t pdl_kv_cache_block_bytes(const pdl_model *model, pdl_kv_dtype dtype, int block_size) {
    size_t kv_dim = (size_t)model->cfg.n_kv_heads * (size_t)model->cfg.head_dim;
    return 2 * (size_t)model->cfg.n_layers * (size_t)block_size * kv_dim * (dtype == PDL_KV_F16 ? 2 : 4);
}
