/*
 * engine_hooks.c - test hooks (engine_hooks.h): the engine's block pool,
 * and the poisoning of the K/V slots no sequence has computed. Nothing in
 * the engine calls these; only tests do.
 */
#include <string.h>

#include "engine/engine_hooks.h"
#include "engine/engine_internal.h"
#include "kernels/attention.h"

block_pool *eng_block_pool(pdl_engine *e) { return &e->pool; }

void eng_poison_uncomputed_kv(pdl_engine *e) {
    pdl_kv_cache *kv = e->kv;
    int bs = kv->block_size;
    for (int i = 0; i < e->n_seqs; i++) {
        const eng_seq *q = e->seqs[i];
        for (int pos = q->cache.n_computed; pos < q->cache.n_blocks * bs; pos++) {
            int32_t b = q->cache.blocks[pos / bs];
            for (int l = 0; l < kv->n_layers; l++) {
                char *kpool = kv_k_pool(kv, l), *vpool = kv_v_pool(kv, l);
                int64_t slot = (int64_t)b * bs + pos % bs;
                int q4 = kv->dtype == PDL_KV_Q4_0, quant = q4 || kv->dtype == PDL_KV_Q8_0;
                for (int d = 0; quant && d < kv->kv_dim; d += attn_q8_group(kv->head_dim)) {
                    const uint16_t nan = 0x7e00u; /* every group's scale */
                    memcpy(kpool + attn_kvq_k_scale(slot, bs, kv->kv_dim, kv->head_dim, d, q4), &nan, 2);
                    memcpy(vpool + attn_kvq_v_byte(slot, bs, kv->kv_dim, kv->head_dim, d, q4), &nan, 2);
                }
                for (int d = 0; !quant && d < kv->kv_dim; d++) {
                    char *k = kpool + attn_k_index(slot, bs, kv->kv_dim, d) * kv->elem_bytes;
                    char *v = vpool + attn_v_index(slot, bs, kv->kv_dim, kv->head_dim, d) * kv->elem_bytes;
                    if (kv->elem_bytes == 4) {
                        const uint32_t nan = 0x7fc00000u;
                        memcpy(k, &nan, 4), memcpy(v, &nan, 4);
                    } else {
                        const uint16_t nan = 0x7e00u;
                        memcpy(k, &nan, 2), memcpy(v, &nan, 2);
                    }
                }
            }
        }
    }
}

