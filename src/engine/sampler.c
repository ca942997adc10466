/*
 * sampler.c - picking the next token from a row of logits.
 *
 * Greedy is argmax with ties to the lowest id (as llama.cpp and llama2.c).
 * With a temperature, a softmax over logits / T is sampled with the
 * request's own random stream (splitmix64-seeded xoshiro256**), so the same
 * seed gives the same tokens whatever else runs. Top-k/p, min-p and
 * penalties come with the engine issue.
 */
#include <math.h>
#include <stdlib.h>

#include "pagedlm.h"

struct pdl_sampler {
    pdl_sampling params;
    int vocab;
    uint64_t rng[4];
    float *probs; /* [vocab] scratch */
};

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t xoshiro_next(uint64_t s[4]) {
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

/* Uniform in [0, 1) with 53 random bits. */
static double uniform01(uint64_t s[4]) { return (double)(xoshiro_next(s) >> 11) * (1.0 / 9007199254740992.0); }

pdl_sampler *pdl_sampler_new(const pdl_sampling *params, int vocab) {
    pdl_sampler *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->params = *params;
    s->vocab = vocab;
    uint64_t seed = params->seed;
    for (int i = 0; i < 4; i++) s->rng[i] = splitmix64(&seed);
    s->probs = malloc((size_t)vocab * sizeof *s->probs);
    if (!s->probs) {
        free(s);
        return NULL;
    }
    return s;
}

void pdl_sampler_free(pdl_sampler *s) {
    if (!s) return;
    free(s->probs);
    free(s);
}

static int32_t argmax(const float *x, int n) {
    int32_t best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

int32_t pdl_sampler_sample(pdl_sampler *s, const float *logits) {
    if (!(s->params.temperature > 0.0f)) return argmax(logits, s->vocab);
    int32_t top = argmax(logits, s->vocab);
    double max = logits[top], sum = 0.0;
    double inv_t = 1.0 / s->params.temperature;
    for (int i = 0; i < s->vocab; i++) {
        s->probs[i] = (float)exp((logits[i] - max) * inv_t);
        sum += s->probs[i];
    }
    double r = uniform01(s->rng) * sum, acc = 0.0;
    for (int i = 0; i < s->vocab; i++) {
        acc += s->probs[i];
        if (r < acc) return i;
    }
    return top; /* rounding left r at the very end */
}
