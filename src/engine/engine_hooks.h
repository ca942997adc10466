/*
 * engine_hooks.h - the engine's insides that tests reach for: its block
 * pool, to replace the hash function and force collisions. Not for
 * programs (the public interface is include/pagedlm.h).
 */
#ifndef PDL_ENGINE_HOOKS_H
#define PDL_ENGINE_HOOKS_H

#include "engine/block_pool.h"
#include "pagedlm.h"

block_pool *eng_block_pool(pdl_engine *e);

#endif
