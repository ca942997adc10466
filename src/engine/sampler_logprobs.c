/*
 * sampler_logprobs.c - log-probabilities of one row of raw logits: the
 * chosen token's and the n most likely tokens' (OpenAI's logprobs and
 * top_logprobs).
 *
 * log p_i = l_i - (max + log sum_j exp(l_j - max)), in float64 (four running
 * sums, over ids 0, 1, 2, 3 mod 4). The n most likely: for n <= 256, those
 * above a chunk-maxima bound (found in the max pass) are copied to the stack
 * and cut there; otherwise, or when too many clear the bound, a radix select
 * over the row (sampler_rank.h). Then a heap sort of the n: O(V + n log n),
 * no allocation, under 32 KB of stack. Not for: the distribution after
 * sampling parameters (vLLM's "processed" logprobs); these are the model's own.
 */
#include <math.h>

#include "engine/sampler_rank.h"
#include "pagedlm.h"

/* a ranks before b: larger logit, ties -> lower id. Logits are still in the
 * logprob field while sorting. */
static bool ranks_before(pdl_logprob a, pdl_logprob b) {
    uint32_t ka = rank_key(a.logprob), kb = rank_key(b.logprob);
    return ka > kb || (ka == kb && a.token < b.token);
}

/* Restores the heap property below i; the root is the element ranking last. */
static void sift_down(pdl_logprob *h, size_t n, size_t i) {
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) return;
        if (c + 1 < n && ranks_before(h[c], h[c + 1])) c++;
        if (!ranks_before(h[i], h[c])) return;
        pdl_logprob t = h[i];
        h[i] = h[c];
        h[c] = t;
        i = c;
    }
}

/* Heap sort into ranking order (best first). */
static void sort_ranked(pdl_logprob *a, size_t n) {
    for (size_t i = n / 2; i-- > 0;) sift_down(a, n, i);
    for (size_t end = n; end-- > 1;) {
        pdl_logprob t = a[0];
        a[0] = a[end];
        a[end] = t;
        sift_down(a, end, 0);
    }
}

enum {
    CHUNKED_MAX_N = 256, /* n up to which the chunk bound is tried */
    NEAR_CAP = 1024,     /* candidates above the bound held on the stack */
};

/* The n (<= CHUNKED_MAX_N) most likely into top[0..n), unsorted, from the
 * elements >= bound (which hold them); returns how many were found, 0 when
 * they overflow NEAR_CAP. */
static size_t top_above(const float *logits, size_t v, float bound, size_t n, pdl_logprob *top) {
    float val[NEAR_CAP];
    int32_t ids[NEAR_CAP];
    size_t count = 0;
    for (size_t i = 0; i < v; i++) {
        if (!(logits[i] >= bound)) continue;
        if (count == NEAR_CAP) return 0;
        val[count] = logits[i];
        ids[count] = (int32_t)i;
        count++;
    }
    count = rank_keep(val, ids, count, false, (double)n);
    for (size_t i = 0; i < count; i++) top[i] = (pdl_logprob){ids[i], val[i]};
    return count;
}

/* Entries beyond the vocabulary (n > vocab) are {-1, -inf}; a chosen id
 * outside it gets NaN. chosen_logprob may be NULL, top too when n is 0. */
void pdl_logprobs(const float *logits, int vocab, int32_t chosen, float *chosen_logprob, pdl_logprob *top, int n) {
    size_t v = vocab > 0 ? (size_t)vocab : 0;
    size_t k = n > 0 ? (size_t)n : 0;
    if (k > v) {
        for (size_t i = v; i < k; i++) top[i] = (pdl_logprob){-1, -INFINITY};
        k = v;
    }
    if (v == 0) {
        if (chosen_logprob) *chosen_logprob = NAN;
        return;
    }
    /* the top-n usually lie above a bound from chunk maxima, found in the
     * same pass as the max; else (large n, long tie runs, sorted rows) a
     * radix select over the whole row */
    float chunk_max[2 * CHUNKED_MAX_N], row_max, bound = -INFINITY;
    bool chunked = k > 0 && k <= CHUNKED_MAX_N && 2 * k <= v / 64;
    if (chunked)
        bound = rank_chunk_bound(logits, v, k, chunk_max, &row_max);
    else
        row_max = rank_max(logits, v);
    double max = row_max;
    /* four running sums in a fixed order: deterministic, and not one chain
     * of dependent adds */
    double lane_sum[4] = {0.0, 0.0, 0.0, 0.0};
    for (size_t i = 0; i < v; i++) lane_sum[i & 3] += exp((double)logits[i] - max);
    double log_z = max + log((lane_sum[0] + lane_sum[1]) + (lane_sum[2] + lane_sum[3]));
    if (chosen_logprob) *chosen_logprob = chosen >= 0 && (size_t)chosen < v ? (float)(logits[chosen] - log_z) : NAN;
    if (k == 0) return;

    size_t got = chunked ? top_above(logits, v, bound, k, top) : 0;
    if (got < k) {
        pdl_rank_cut cut = rank_find_cut(logits, v, false, (double)k);
        double ties = 0.0;
        got = 0;
        for (size_t i = 0; i < v && got < k; i++)
            if (rank_in_prefix(cut, rank_key(logits[i]), 1.0, (double)k, &ties))
                top[got++] = (pdl_logprob){(int32_t)i, logits[i]};
    }
    sort_ranked(top, got);
    for (size_t i = 0; i < got; i++) top[i].logprob = (float)(top[i].logprob - log_z);
    for (size_t i = got; i < k; i++) top[i] = (pdl_logprob){-1, -INFINITY};
}
