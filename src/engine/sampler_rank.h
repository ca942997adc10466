/*
 * sampler_rank.h - cutting the most likely prefix off a row without sorting it.
 *
 * top-k, top-p and the top-n logprobs all ask the same question: "which
 * elements make up the smallest descending prefix whose measure reaches
 * `need`", where the measure of an element is 1 (top-k, top-n) or its own
 * value (top-p over unnormalised probabilities). Ranking is by value,
 * descending, ties -> earlier position; callers keep arrays in id order, so
 * ties go to the lower id. NaN ranks below -inf.
 *
 * The answer is found by a radix select on the float bit patterns: three
 * histogram passes (11, 11, 10 bits) narrow the boundary down to one exact
 * value, with no pivots, no sort and no scratch beyond a stack histogram,
 * so it is O(n) whatever the data. Cheap bounds (the top-level bucket, or
 * the maxima of chunks for small k) let callers copy out only the elements
 * that can be in the prefix before the exact select. Not for: full sorts
 * (sampler_logprobs.c heap-sorts the few it reports).
 */
#ifndef PDL_ENGINE_SAMPLER_RANK_H
#define PDL_ENGINE_SAMPLER_RANK_H

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Where a descending prefix ends: every element above `key` is in it, and
 * elements equal to `key` join it in order while the measure so far, starting
 * from `above`, is still below the target. */
typedef struct pdl_rank_cut {
    uint32_t key; /* rank_key of the boundary value */
    double above; /* measure of the elements strictly above the boundary */
} pdl_rank_cut;

/* A uint32 that orders like the float: -inf < ... < -0 = +0 < ... < +inf;
 * NaN -> 0, below everything. */
static inline uint32_t rank_key(float f) {
    f += 0.0f; /* -0 -> +0, so equal floats get equal keys */
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    /* negative: flip all bits; positive: set the sign bit. Branch-free: the
     * sign of logits is a coin toss, so a branch here mispredicts half the time */
    uint32_t key = u ^ ((0u - (u >> 31)) | 0x80000000u);
    return (u & 0x7fffffffu) > 0x7f800000u ? 0 : key;
}

/* The float of a key (NaN for 0). */
static inline float rank_value(uint32_t key) {
    uint32_t u = (key & 0x80000000u) ? key ^ 0x80000000u : ~key;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* The largest of x[0..n), NaNs skipped; -inf when there is none. In 8
 * independent lanes, which the compiler vectorises. */
static inline float rank_max(const float *x, size_t n) {
    float lane[8];
    for (int j = 0; j < 8; j++) lane[j] = -INFINITY;
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) lane[j] = x[i + j] > lane[j] ? x[i + j] : lane[j];
    for (; i < n; i++) lane[0] = x[i] > lane[0] ? x[i] : lane[0];
    float best = lane[0];
    for (int j = 1; j < 8; j++) best = lane[j] > best ? lane[j] : best;
    return best;
}

/* A lower bound on the k-th largest of x[0..n) (1 <= k, 2k <= n): the
 * k-th largest of the maxima of about 2k chunks; those are distinct
 * elements, so at least k are >= it. One vectorisable pass, which also gives
 * the row's max (*row_max). On real logits a few times k elements clear it;
 * adversarial rows (sorted ones) let more through, which costs time, never
 * the answer. chunk_max: scratch for 2k floats. */
float rank_chunk_bound(const float *x, size_t n, size_t k, float *chunk_max, float *row_max);

/* The boundary of the smallest descending prefix of x[0..n) (n >= 1) whose
 * measure reaches need. weighted: the measure of x[i] is x[i] (which must be
 * >= 0), else 1. When the whole row falls short, the cut keeps everything. */
pdl_rank_cut rank_find_cut(const float *x, size_t n, bool weighted, double need);

/* A lower bound on the keys of the prefix from one histogram pass: the
 * smallest key of the top-level bucket the cut falls in. Cheap narrowing
 * before copying candidates out of a large row. */
uint32_t rank_coarse_bound(const float *x, size_t n, bool weighted, double need);

/* Copies the elements of x[0..n) with keys >= min_key, and their indices,
 * to (val, ids), in order; returns how many. val may be x. */
size_t rank_gather(const float *x, size_t n, uint32_t min_key, float *val, int32_t *ids);

/* Whether the element with key k is in the prefix, given the measure of the
 * boundary ties already taken (*ties, updated). Call in array order. */
static inline bool rank_in_prefix(pdl_rank_cut cut, uint32_t k, double measure, double need, double *ties) {
    if (k > cut.key) return true;
    if (k < cut.key || cut.above + *ties >= need) return false;
    *ties += measure;
    return true;
}

/* Keeps the prefix of (x, ids)[0..n) in place, in its original order;
 * returns its length. */
size_t rank_keep(float *x, int32_t *ids, size_t n, bool weighted, double need);

#endif
