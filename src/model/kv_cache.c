/*
 * kv_cache.c - the K/V storage: its memory, and copying a block.
 *
 * The K and V pools are huge-page buffers (util/huge_alloc.h): attention
 * reads them in long runs, and their pages are only backed once used.
 */
#include "model/kv_cache.h"

#include <stdlib.h>
#include <string.h>

#include "kernels/attention.h"
#include "model/model.h"
#include "util/error.h"
#include "util/huge_alloc.h"

int pdl_kv_cache_create(pdl_kv_cache **out, const pdl_model *model, pdl_kv_dtype dtype,
                        int block_size, int n_blocks, pdl_error *err) {
    return pdl_kv_cache_create_hybrid(out, model, dtype, block_size, n_blocks, model->cfg.n_rec_layers > 0 ? 1 : 0,
                                      err);
}

/* Floats of one recurrent layer's region of a state slot (kv_cache.h). */
static size_t state_layer_floats(const pdl_model_config *c) {
    size_t conv_dim = 2 * (size_t)c->lin_k_heads * c->lin_k_dim + (size_t)c->lin_v_heads * c->lin_v_dim;
    return (size_t)c->lin_v_heads * c->lin_k_dim * c->lin_v_dim + (size_t)PDL_STATE_RING * conv_dim +
           (size_t)PDL_STATE_CHUNK * ((size_t)c->lin_k_heads * c->lin_k_dim + (size_t)c->lin_v_heads * c->lin_v_dim +
                                      (size_t)c->lin_v_heads);
}

size_t kv_state_slot_bytes(const pdl_model_config *c) {
    return (size_t)c->n_rec_layers * state_layer_floats(c) * sizeof(float);
}

int pdl_kv_cache_create_hybrid(pdl_kv_cache **out, const pdl_model *model, pdl_kv_dtype dtype, int block_size,
                               int n_blocks, int n_state_slots, pdl_error *err) {
    return kv_cache_create(out, model, dtype, block_size, n_blocks, n_state_slots, false, err);
}

int kv_cache_create(pdl_kv_cache **out, const pdl_model *model, pdl_kv_dtype dtype, int block_size, int n_blocks,
                    int n_state_slots, bool with_mtp, pdl_error *err) {
    *out = NULL;
    if (with_mtp && !model->cfg.mtp_loaded)
        return err_fail(err, "kv cache: the model has no MTP block to keep K/V for");
    const pdl_model_config *c = &model->cfg;
    if (n_state_slots < 0 || (c->n_rec_layers > 0 && n_state_slots < 1))
        return err_fail(err, "kv cache: a hybrid model needs at least one recurrent state slot (got %d)",
                        n_state_slots);
    if (block_size <= 0 || n_blocks <= 0)
        return err_fail(err, "kv cache: block size (%d) and block count (%d) must be positive",
                        block_size, n_blocks);
    if (dtype != PDL_KV_F16 && dtype != PDL_KV_F32 && dtype != PDL_KV_Q8_0 && dtype != PDL_KV_Q4_0)
        return err_fail(err, "kv cache: unknown dtype %d", (int)dtype);
    if (dtype == PDL_KV_Q8_0 && (c->head_dim <= 0 || (c->head_dim > 32 && c->head_dim % 32 != 0)))
        return err_fail(err, "kv cache: a q8_0 KV cache needs a head dimension that is a multiple of 32 (or below "
                        "32); this model's is %d: use --kv-cache-dtype f16", c->head_dim);
    if (dtype == PDL_KV_Q4_0 && (c->head_dim <= 0 || c->head_dim % 2 || (c->head_dim > 32 && c->head_dim % 32)))
        return err_fail(err, "kv cache: a q4_0 KV cache needs a head dimension that is a multiple of 32 (or even "
                        "and below 32); this model's is %d: use --kv-cache-dtype f16", c->head_dim);
    pdl_kv_cache *kv = calloc(1, sizeof *kv);
    if (!kv) return err_fail(err, "kv cache: out of memory");
    kv->dtype = dtype;
    kv->n_layers = model->cfg.n_attn_layers + (with_mtp ? 1 : 0);
    kv->kv_dim = model->cfg.n_kv_heads * model->cfg.head_dim;
    kv->head_dim = model->cfg.head_dim;
    kv->block_size = block_size;
    kv->n_blocks = n_blocks;
    kv->elem_bytes = dtype == PDL_KV_F16 ? 2 : dtype == PDL_KV_Q8_0 || dtype == PDL_KV_Q4_0 ? 1 : 4;
    kv->block_bytes = kv_layer_block_bytes(dtype, kv->kv_dim, kv->head_dim, block_size);
    size_t bytes = (size_t)kv->n_layers * (size_t)n_blocks * kv->block_bytes;
    kv->k = huge_alloc(bytes);
    kv->v = huge_alloc(bytes);
    if (!kv->k || !kv->v) {
        pdl_kv_cache_free(kv);
        return err_fail(err, "kv cache: out of memory for %d blocks of %d tokens (%zu bytes each for K and V)",
                        n_blocks, block_size, bytes);
    }
    if (c->n_rec_layers > 0 && n_state_slots > 0) {
        kv->n_state_slots = n_state_slots;
        kv->n_rec_layers = c->n_rec_layers;
        kv->st_k_heads = c->lin_k_heads, kv->st_v_heads = c->lin_v_heads;
        kv->st_k_dim = c->lin_k_dim, kv->st_v_dim = c->lin_v_dim;
        kv->st_conv_dim = 2 * c->lin_k_heads * c->lin_k_dim + c->lin_v_heads * c->lin_v_dim;
        kv->state_layer_floats = state_layer_floats(c);
        size_t sbytes = (size_t)n_state_slots * kv_state_slot_bytes(c);
        kv->state = huge_alloc(sbytes);
        if (!kv->state) {
            pdl_kv_cache_free(kv);
            return err_fail(err, "kv cache: out of memory for %d recurrent state slots (%zu bytes)", n_state_slots,
                            sbytes);
        }
    }
    *out = kv;
    return 0;
}

int pdl_kv_cache_state_slots(const pdl_kv_cache *kv) { return kv->n_state_slots; }

void pdl_kv_cache_copy_state(pdl_kv_cache *kv, int32_t src, int32_t dst, int position) {
    if (src == dst || src < 0 || dst < 0 || src >= kv->n_state_slots || dst >= kv->n_state_slots) return;
    int first = position - position % PDL_STATE_CHUNK; /* the chunk's boundary: S holds the state there */
    size_t kw = (size_t)kv->st_k_heads * kv->st_k_dim, vw = (size_t)kv->st_v_heads * kv->st_v_dim;
    for (int l = 0; l < kv->n_rec_layers; l++) {
        kv_state_view a = kv_state(kv, src, l), b = kv_state(kv, dst, l);
        memcpy(b.S, a.S, (size_t)kv->st_v_heads * kv->st_k_dim * kv->st_v_dim * sizeof(float));
        for (int p = position - (PDL_STATE_RING - 1); p < position; p++) { /* the convolution's window and more */
            if (p < 0) continue;
            size_t at = (size_t)(p % PDL_STATE_RING) * kv->st_conv_dim;
            memcpy(b.ring + at, a.ring + at, (size_t)kv->st_conv_dim * sizeof(float));
        }
        for (int p = first; p < position; p++) {
            size_t i = (size_t)(p - first);
            memcpy(b.keys + i * kw, a.keys + i * kw, kw * sizeof(float));
            memcpy(b.delta + i * vw, a.delta + i * vw, vw * sizeof(float));
            memcpy(b.decay + i * kv->st_v_heads, a.decay + i * kv->st_v_heads, (size_t)kv->st_v_heads * sizeof(float));
        }
    }
}

void pdl_kv_cache_free(pdl_kv_cache *kv) {
    if (!kv) return;
    huge_free(kv->k);
    huge_free(kv->v);
    huge_free(kv->state);
    free(kv);
}

void pdl_kv_cache_copy_block(pdl_kv_cache *kv, int32_t src, int32_t dst, int n_slots) {
    int n_heads = kv->kv_dim / kv->head_dim;
    size_t block = kv->block_bytes;
    size_t head = block / (size_t)n_heads;                   /* one head of V */
    size_t rows = head / (size_t)kv->block_size * (size_t)n_slots; /* its first n_slots rows */
    for (int l = 0; l < kv->n_layers; l++) {
        /* K is dimension-major within a block: the whole block (slots past
         * n_slots are written before they are read); V is slot-major within
         * each head: each head's first n_slots rows */
        char *k = kv_k_pool(kv, l), *v = kv_v_pool(kv, l);
        memcpy(k + (size_t)dst * block, k + (size_t)src * block, block);
        for (int h = 0; h < n_heads; h++)
            memcpy(v + (size_t)dst * block + (size_t)h * head, v + (size_t)src * block + (size_t)h * head, rows);
    }
}

size_t pdl_kv_cache_block_bytes(const pdl_model *model, pdl_kv_dtype dtype, int block_size) {
    return kv_cache_block_bytes(model, dtype, block_size, false);
}

size_t kv_layer_block_bytes(pdl_kv_dtype dtype, int kv_dim, int head_dim, int block_size) {
    if (dtype == PDL_KV_Q8_0 || dtype == PDL_KV_Q4_0) { /* a head_dim off the groups is refused at creation;
                                                          sized as if rounded up */
        int hd = head_dim > 0 ? head_dim : 1, gs = attn_q8_group(hd), groups = (kv_dim + gs - 1) / gs;
        return (size_t)groups * (size_t)((dtype == PDL_KV_Q4_0 ? (gs + 1) / 2 : gs) + 2) * (size_t)block_size;
    }
    return (size_t)block_size * (size_t)kv_dim * (dtype == PDL_KV_F16 ? 2 : 4);
}

size_t kv_cache_block_bytes(const pdl_model *model, pdl_kv_dtype dtype, int block_size, bool with_mtp) {
    int kv_dim = model->cfg.n_kv_heads * model->cfg.head_dim;
    size_t layers = (size_t)model->cfg.n_attn_layers + (with_mtp ? 1 : 0);
    return 2 * layers * kv_layer_block_bytes(dtype, kv_dim, model->cfg.head_dim, block_size);
}
