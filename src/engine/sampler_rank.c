/*
 * sampler_rank.c - radix select of a descending prefix by count or by mass
 * (see sampler_rank.h).
 *
 * Keys are computed a block at a time into a small buffer (a loop the
 * compiler vectorises) before the scalar histogram or copy loop reads them:
 * on a 152k row the key arithmetic otherwise costs as much as the rest.
 * Copies are branch-free (write every element, advance when kept): on flat
 * distributions about half the elements pass, and a branch would mispredict.
 */
#include "engine/sampler_rank.h"

enum {
    RANK_MAX_BUCKETS = 1 << 11,
    KEY_BLOCK = 256, /* keys per buffered block */
};

/* Key bits examined at each level, from the top: 11 + 11 + 10 = 32. */
static const unsigned level_shift[3] = {21, 10, 0};
static const unsigned level_bits[3] = {11, 11, 10};

static void keys_of(const float *x, size_t n, uint32_t *keys) {
    for (size_t i = 0; i < n; i++) keys[i] = rank_key(x[i]);
}

/* Measure per bucket of the elements whose key matches prefix under mask. */
static void histogram(const float *x, size_t n, bool weighted, uint32_t prefix, uint32_t mask, unsigned shift,
                      uint32_t bucket_mask, double *hist) {
    uint32_t keys[KEY_BLOCK];
    for (size_t i0 = 0; i0 < n; i0 += KEY_BLOCK) {
        size_t m = n - i0 < KEY_BLOCK ? n - i0 : KEY_BLOCK;
        keys_of(x + i0, m, keys);
        if (weighted) {
            for (size_t j = 0; j < m; j++)
                if ((keys[j] & mask) == prefix) hist[(keys[j] >> shift) & bucket_mask] += x[i0 + j];
        } else {
            for (size_t j = 0; j < m; j++)
                if ((keys[j] & mask) == prefix) hist[(keys[j] >> shift) & bucket_mask] += 1.0;
        }
    }
}

/* Resolves the cut through levels [first, last), starting from `from`,
 * the cut already resolved through the levels before first (its key holds
 * their bits, the lower bits 0). */
static pdl_rank_cut find_cut(const float *x, size_t n, bool weighted, double need, int first, int last,
                             pdl_rank_cut from) {
    double hist[RANK_MAX_BUCKETS];
    uint32_t prefix = from.key, mask = first ? ~((1u << level_shift[first - 1]) - 1) : 0;
    double above = from.above;
    for (int level = first; level < last; level++) {
        size_t nb = (size_t)1 << level_bits[level];
        uint32_t bucket_mask = (uint32_t)nb - 1;
        unsigned shift = level_shift[level];
        memset(hist, 0, nb * sizeof *hist);
        histogram(x, n, weighted, prefix, mask, shift, bucket_mask, hist);
        /* walk down from the top bucket to the one where the measure reaches
         * need; when it never does (the row falls short, or rounding at a
         * finer level), stop at the lowest bucket with any measure */
        size_t pick = nb;
        double acc = above, pick_above = above;
        for (size_t b = nb; b-- > 0;) {
            if (!(hist[b] > 0.0)) continue;
            pick = b;
            pick_above = acc;
            if (acc + hist[b] >= need) break;
            acc += hist[b];
        }
        if (pick == nb) return (pdl_rank_cut){0, 0.0}; /* no measure at all: keep everything */
        above = pick_above;
        prefix |= (uint32_t)pick << shift;
        mask |= bucket_mask << shift;
    }
    return (pdl_rank_cut){prefix, above};
}

static const pdl_rank_cut no_cut = {0, 0.0};

pdl_rank_cut rank_find_cut(const float *x, size_t n, bool weighted, double need) {
    return find_cut(x, n, weighted, need, 0, 3, no_cut);
}

uint32_t rank_coarse_bound(const float *x, size_t n, bool weighted, double need) {
    return n ? find_cut(x, n, weighted, need, 0, 1, no_cut).key : 0;
}

float rank_chunk_bound(const float *x, size_t n, size_t k, float *chunk_max, float *row_max) {
    size_t len = (n + 2 * k - 1) / (2 * k), chunks = 0;
    for (size_t i0 = 0; i0 < n; i0 += len) chunk_max[chunks++] = rank_max(x + i0, n - i0 < len ? n - i0 : len);
    *row_max = rank_max(chunk_max, chunks);
    return rank_value(rank_find_cut(chunk_max, chunks, false, (double)k).key);
}

size_t rank_gather(const float *x, size_t n, uint32_t min_key, float *val, int32_t *ids) {
    uint32_t keys[KEY_BLOCK];
    size_t out = 0;
    for (size_t i0 = 0; i0 < n; i0 += KEY_BLOCK) {
        size_t m = n - i0 < KEY_BLOCK ? n - i0 : KEY_BLOCK;
        keys_of(x + i0, m, keys);
        for (size_t j = 0; j < m; j++) { /* branch-free: write always, advance when kept */
            val[out] = x[i0 + j];           /* out <= i0 + j: never ahead of the reads */
            ids[out] = (int32_t)(i0 + j);
            out += keys[j] >= min_key;
        }
    }
    return out;
}

/* Keeps the elements with keys >= min_key in place, in order; returns how
 * many. */
static size_t keep_from(float *x, int32_t *ids, size_t n, uint32_t min_key) {
    uint32_t keys[KEY_BLOCK];
    size_t out = 0;
    for (size_t i0 = 0; i0 < n; i0 += KEY_BLOCK) {
        size_t m = n - i0 < KEY_BLOCK ? n - i0 : KEY_BLOCK;
        keys_of(x + i0, m, keys);
        for (size_t j = 0; j < m; j++) {
            x[out] = x[i0 + j];
            ids[out] = ids[i0 + j];
            out += keys[j] >= min_key;
        }
    }
    return out;
}

size_t rank_keep(float *x, int32_t *ids, size_t n, bool weighted, double need) {
    if (n == 0) return 0;
    /* narrow the row to the top-level bucket of the cut first, so that the
     * finer levels run over the few elements left rather than all n */
    pdl_rank_cut coarse = find_cut(x, n, weighted, need, 0, 1, no_cut);
    n = keep_from(x, ids, n, coarse.key);
    /* what is left holds the same elements at and above the coarse bucket,
     * in the same order, so the top level's answer stands */
    pdl_rank_cut cut = find_cut(x, n, weighted, need, 1, 3, coarse);
    size_t out = 0;
    double ties = 0.0;
    for (size_t i = 0; i < n; i++) {
        bool in = rank_in_prefix(cut, rank_key(x[i]), weighted ? x[i] : 1.0, need, &ties);
        x[out] = x[i];
        ids[out] = ids[i];
        out += in;
    }
    return out;
}
