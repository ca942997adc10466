/*
 * engine_hooks.h - the engine's insides that tests reach for: its block
 * pool (to replace the hash function and force collisions) and the K/V
 * slots no sequence has computed (to poison them). Test hooks only, kept
 * in engine_hooks.c apart from the engine's stages: nothing in the engine
 * calls them. Not for programs (the public interface is
 * include/pagedlm.h).
 */
#ifndef PDL_ENGINE_HOOKS_H
#define PDL_ENGINE_HOOKS_H

#include "engine/block_pool.h"
#include "pagedlm.h"

block_pool *eng_block_pool(pdl_engine *e);

/* Fills with NaN every K/V slot of a live sequence's blocks at or past what
 * it has computed (what the engine must never read before writing it: the
 * slots of rejected speculative drafts, of a partial block, ...). Shared
 * cached blocks are full and computed, so they are never touched. */
void eng_poison_uncomputed_kv(pdl_engine *e);

#endif
