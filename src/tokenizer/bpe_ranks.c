/*
 * bpe_ranks.c - byte-level BPE merges derived from a vocabulary whose ids are
 * tiktoken ranks, for GGUF files that carry no tokenizer.ggml.merges
 * (llama.cpp accepts such a file for kimi-k2).
 *
 * What it is for: tiktoken keeps no merge list; its encoder merges, over a
 * word's bytes, the adjacent pair whose concatenation has the lowest rank.
 * The merge that makes token t (rank r) is found by running that procedure
 * on t's own bytes with only the tokens of rank < r: when it stops at
 * exactly two parts (a, b), (a, b) -> t is a merge of priority r (llama.cpp's
 * converter derives the merges it writes for Kimi-K2 the same way). Token id
 * order is rank order; only normal tokens take part (control, user-defined
 * and unused ids are not tiktoken ranks).
 *
 * Speed: each token is merged over its own characters (GPT-2's byte-level
 * characters, one per byte), keeping the rank of every adjacent pair and
 * looking up only the two pairs around a merge, as bpe.c's short words do:
 * O(L^2) comparisons and O(L) lookups for a token of L bytes, linear in the
 * vocabulary (Qwen3's 151k tokens, up to 128 bytes: about 65 ms of the
 * load, measured with farm-bench on a 2-core EPYC).
 *
 * What it is not for: encoding (bpe.c), reading merges a file has
 * (tok_gguf.c).
 */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"
#include "util/error.h"

/* The rank of the token spelled piece[a..b) when it is below max_rank and a
 * normal token; INT32_MAX otherwise. */
static int32_t rank_below(const tok_tokenizer *t, const char *piece, uint32_t a, uint32_t b, int32_t max_rank) {
    int32_t id = tok_strmap_get(&t->vocab, piece + a, b - a);
    return id >= 0 && id < max_rank && t->type[id] == TOK_TYPE_NORMAL ? id : INT32_MAX;
}

int tok_bpe_merges_from_ranks(tok_tokenizer *t, const char *path, pdl_error *err) {
    for (int b = 0; b < 256; b++)
        if (t->bl_byte_id[b] < 0)
            return err_fail(err, "%s: no tokenizer.ggml.merges, and tokenizer.ggml.tokens has no byte-level token for "
                            "byte 0x%02X, so merges cannot be derived from its ranks", path, b);
    uint32_t max_len = 0;
    for (int32_t i = 0; i < t->n_vocab; i++)
        if (t->piece_len[i] > max_len) max_len = t->piece_len[i];
    /* part k covers piece[start[k] .. start[k+1]); rank[k] is the pair (k, k+1) */
    uint32_t *start = malloc(((size_t)max_len + 1) * sizeof *start);
    int32_t *rank = malloc(((size_t)max_len + 1) * sizeof *rank);
    if (!start || !rank || !tok_pairmap_init(&t->merges, (size_t)t->n_vocab)) {
        free(start);
        free(rank);
        return err_fail(err, "%s: out of memory deriving merges from ranks", path);
    }
    for (int32_t r = 0; r < t->n_vocab; r++) {
        if (t->type[r] != TOK_TYPE_NORMAL) continue;
        const char *piece = t->pool + t->piece_off[r];
        uint32_t len = t->piece_len[r], n = 0;
        /* the parts start as the characters, each a byte's token */
        bool byte_level = true;
        for (uint32_t i = 0; i < len && byte_level;) {
            size_t cl = tok_utf8_char_len((const uint8_t *)piece + i, len - i);
            byte_level = cl > 0 && tok_bl_byte(tok_utf8_decode((const uint8_t *)piece + i, cl)) >= 0;
            start[n++] = i;
            i += cl ? (uint32_t)cl : 1;
        }
        if (!byte_level || n < 2) continue;
        start[n] = len;
        for (uint32_t k = 0; k + 1 < n; k++) rank[k] = rank_below(t, piece, start[k], start[k + 2], r);
        while (n > 2) {
            uint32_t best = 0;
            for (uint32_t k = 1; k + 1 < n; k++)
                if (rank[k] < rank[best]) best = k;
            if (rank[best] == INT32_MAX) break;
            /* parts best and best+1 become one: drop start[best+1] and rank[best+1] */
            memmove(start + best + 1, start + best + 2, (n - best - 1) * sizeof *start);
            if (best + 3 < n) memmove(rank + best + 1, rank + best + 2, (n - best - 3) * sizeof *rank);
            n--;
            if (best > 0) rank[best - 1] = rank_below(t, piece, start[best - 1], start[best + 1], r);
            if (best + 1 < n) rank[best] = rank_below(t, piece, start[best], start[best + 2], r);
        }
        if (n != 2) continue;
        int32_t left = tok_strmap_get(&t->vocab, piece, start[1]);
        int32_t right = tok_strmap_get(&t->vocab, piece + start[1], len - start[1]);
        if (left >= 0 && right >= 0 && !tok_pairmap_get(&t->merges, left, right))
            tok_pairmap_insert(&t->merges, left, right, r, r);
    }
    free(start);
    free(rank);
    return 0;
}
