/*
 * sampler.c - picking the next token of one request from a row of logits.
 *
 * The pipeline, in vLLM v1's order:
 *   0. the logit bias added to the raw logits, and the tokens the caller bans
 *      for this draw (EOS and stop tokens before min_tokens) made -inf;
 *   1. penalties (repetition over prompt + generated tokens, presence and
 *      frequency over generated tokens only);
 *   2. temperature 0: argmax, ties -> lowest id; otherwise
 *   3. logits / T, then min-p, top-k, top-p, and one draw from what is left
 *      with the request's own random stream (splitmix64-seeded xoshiro256**).
 * Every sampler owns its random state and its scratch, so the same seed and
 * history give the same tokens whatever else runs; nothing is global.
 *
 * Cost per call for a vocabulary V: a few O(V) passes (argmax, the
 * candidate copy, e^z, and for top-k / top-p one histogram each), no sort
 * and no allocation. Penalties touch only the tokens seen
 * (sampler_counts.h); top-k and top-p are radix selects (sampler_rank.h);
 * e^z is a vectorisable polynomial (kernels/fast_exp.h). Not for:
 * log-probabilities (sampler_logprobs.c), stop conditions (the caller's).
 */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/sampler_counts.h"
#include "kernels/fast_exp.h"
#include "engine/sampler_rank.h"
#include "pagedlm.h"
#include "util/error.h"

struct pdl_sampler {
    pdl_sampling params;
    int vocab;
    bool penalized;          /* some penalty is on: occurrences are counted */
    bool repetition;         /* repetition_penalty is on: prompt tokens count too */
    uint64_t rng[4];         /* xoshiro256** state */
    pdl_token_counts counts; /* token -> occurrences, when penalized */
    pdl_logit_bias *bias;    /* [params.n_logit_bias] own copy (params.logit_bias points here) */
    float *val;              /* [vocab] scratch: penalised logits, then candidates' logits or weights */
    int32_t *ids;            /* [vocab] scratch: the token of each candidate in val */
    double *block;           /* [vocab / 64 + 1] scratch: the draw's block sums */
    float *chunk_max;        /* [vocab / 64 + 1] scratch: top-k's chunk maxima */
};

/* -------------------------------------------------------------------------
 * Random stream
 * ------------------------------------------------------------------------- */

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

/* -------------------------------------------------------------------------
 * Parameters
 * ------------------------------------------------------------------------- */

int pdl_sampling_validate(const pdl_sampling *p, int vocab, pdl_error *err) {
    if (!p) return err_fail(err, "sampling parameters missing");
    if (p->n_logit_bias < 0 || (p->n_logit_bias > 0 && !p->logit_bias))
        return err_fail(err, "logit_bias: %d entries without an array", p->n_logit_bias);
    for (int i = 0; i < p->n_logit_bias; i++) {
        const pdl_logit_bias *b = &p->logit_bias[i];
        if (!isfinite(b->bias)) return err_fail(err, "logit_bias of token %d must be a finite number", b->token);
        if (b->token < 0 || (vocab > 0 && b->token >= vocab))
            return err_fail(err, "logit_bias names token %d, outside the vocabulary [0, %d)", b->token, vocab);
    }
    if (!(isfinite(p->temperature) && p->temperature >= 0.0f))
        return err_fail(err, "temperature %g must be a finite number >= 0 (0 = greedy)", p->temperature);
    if (p->top_k < 0) return err_fail(err, "top_k %d must be >= 0 (0 = off)", p->top_k);
    if (!(p->top_p >= 0.0f && p->top_p <= 1.0f))
        return err_fail(err, "top_p %g must be in [0, 1] (0 or 1 = off)", p->top_p);
    if (!(p->min_p >= 0.0f && p->min_p <= 1.0f))
        return err_fail(err, "min_p %g must be in [0, 1] (0 = off)", p->min_p);
    if (!(isfinite(p->repetition_penalty) && p->repetition_penalty >= 0.0f))
        return err_fail(err, "repetition_penalty %g must be a finite number >= 0 (0 or 1 = off)",
                        p->repetition_penalty);
    if (!isfinite(p->presence_penalty))
        return err_fail(err, "presence_penalty %g must be a finite number (0 = off; OpenAI uses -2 to 2)",
                        p->presence_penalty);
    if (!isfinite(p->frequency_penalty))
        return err_fail(err, "frequency_penalty %g must be a finite number (0 = off; OpenAI uses -2 to 2)",
                        p->frequency_penalty);
    return 0;
}

pdl_sampler *pdl_sampler_new(const pdl_sampling *params, int vocab) {
    if (vocab <= 0 || pdl_sampling_validate(params, vocab, NULL) != 0) return NULL;
    pdl_sampler *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->params = *params;
    if (params->n_logit_bias > 0) {
        s->bias = malloc((size_t)params->n_logit_bias * sizeof *s->bias);
        if (!s->bias) {
            free(s);
            return NULL;
        }
        memcpy(s->bias, params->logit_bias, (size_t)params->n_logit_bias * sizeof *s->bias);
    }
    s->params.logit_bias = s->bias;
    s->vocab = vocab;
    s->repetition = params->repetition_penalty > 0.0f && params->repetition_penalty != 1.0f;
    s->penalized = s->repetition || params->presence_penalty != 0.0f || params->frequency_penalty != 0.0f;
    uint64_t seed = params->seed;
    for (int i = 0; i < 4; i++) s->rng[i] = splitmix64(&seed);
    s->val = malloc((size_t)vocab * sizeof *s->val);
    s->ids = malloc((size_t)vocab * sizeof *s->ids);
    s->block = malloc(((size_t)vocab / 64 + 1) * sizeof *s->block);
    s->chunk_max = malloc(((size_t)vocab / 64 + 1) * sizeof *s->chunk_max);
    bool ok = s->val && s->ids && s->block && s->chunk_max;
    if (!ok || (s->penalized && token_counts_init(&s->counts, 256) != 0)) {
        pdl_sampler_free(s);
        return NULL;
    }
    return s;
}

void pdl_sampler_free(pdl_sampler *s) {
    if (!s) return;
    token_counts_free(&s->counts);
    free(s->bias);
    free(s->val);
    free(s->ids);
    free(s->block);
    free(s->chunk_max);
    free(s);
}

/* -------------------------------------------------------------------------
 * Penalties
 * ------------------------------------------------------------------------- */

/* Ids outside the vocabulary are ignored. Should the table fail to grow
 * (out of memory), a token goes uncounted rather than failing the request. */
void pdl_sampler_add_prompt(pdl_sampler *s, const int32_t *ids, size_t n) {
    if (!s->repetition) return; /* presence and frequency look at generated tokens only */
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= s->vocab) continue;
        pdl_token_count *c = token_counts_get(&s->counts, ids[i]);
        if (c) c->in_prompt = true;
    }
}

static void record_generated(pdl_sampler *s, int32_t token) {
    if (!s->penalized) return;
    pdl_token_count *c = token_counts_get(&s->counts, token);
    if (c) c->generated++;
}

/* The penalties applied to out in place, as vLLM's apply_penalties:
 * repetition (divide positive logits by r, multiply the others), then
 * - frequency * count, then - presence once. Only seen tokens change. */
static void apply_penalties(const pdl_sampler *s, float *out) {
    const pdl_sampling *p = &s->params;
    for (size_t i = 0; i < s->counts.cap; i++) {
        const pdl_token_count *c = &s->counts.slots[i];
        if (c->token < 0) continue;
        float v = out[c->token];
        if (s->repetition) v = v > 0.0f ? v / p->repetition_penalty : v * p->repetition_penalty;
        if (c->generated > 0) {
            v -= p->frequency_penalty * (float)c->generated;
            v -= p->presence_penalty;
        }
        out[c->token] = v;
    }
}

/* -------------------------------------------------------------------------
 * Choosing
 * ------------------------------------------------------------------------- */

/* Index of the largest value, ties -> lowest index; NaNs are skipped (0 when
 * all are NaN). */
static int32_t argmax(const float *x, int n) {
    float best = rank_max(x, (size_t)n);
    for (int i = 0; i < n; i++)
        if (x[i] == best) return i;
    return 0;
}

/* Sum of x[0..n) in 8 fixed lanes: a fixed order (deterministic) that the
 * compiler can vectorise, and no chain of dependent adds. */
static double lane_sum(const float *x, size_t n) {
    double lane[8] = {0};
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) lane[j] += x[i + j];
    for (; i < n; i++) lane[0] += x[i];
    return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}

/* The smallest logit l with (l - max) / T >= z_floor: min-p as a logit
 * threshold, exact for the float64 test below (found by stepping from the
 * rounded estimate). -FLT_MAX (drops only -inf) when min-p is off. */
static float min_p_logit(double max, double inv_t, double z_floor) {
    if (z_floor == -INFINITY) return -FLT_MAX;
#define PASSES(l) (((double)(l) - max) * inv_t >= z_floor)
    float l = (float)(max + z_floor / inv_t);
    if (!(l >= -FLT_MAX)) l = -FLT_MAX;
    while (l > -FLT_MAX && PASSES(nextafterf(l, -INFINITY))) l = nextafterf(l, -INFINITY);
    while (!PASSES(l)) l = nextafterf(l, INFINITY); /* ends by max, which passes */
#undef PASSES
    return l;
}

/* Where the draw lands: the first candidate whose running sum passes
 * u * total. Sums go by blocks of 64 (lane sums) so that the search is not
 * one long chain of dependent adds; the running sum inside the chosen block
 * may round short of the target, then its last positive weight is taken. */
static size_t draw_index(const float *w, size_t n, double u, double *block) {
    enum { BLOCK = 64 };
    size_t nb = (n + BLOCK - 1) / BLOCK;
    double total = 0.0;
    for (size_t b = 0; b < nb; b++) {
        size_t len = n - b * BLOCK < BLOCK ? n - b * BLOCK : BLOCK;
        block[b] = lane_sum(w + b * BLOCK, len);
        total += block[b];
    }
    double r = u * total, acc = 0.0;
    size_t b = 0;
    while (b + 1 < nb && !(r < acc + block[b])) acc += block[b++];
    size_t end = b * BLOCK + BLOCK < n ? b * BLOCK + BLOCK : n, last = b * BLOCK;
    for (size_t j = b * BLOCK; j < end; j++) {
        acc += w[j];
        if (r < acc) return j;
        if (w[j] > 0.0f) last = j;
    }
    return last;
}

/* Temperature, min-p, top-k, top-p and the draw; logits may be s->val. */
static int32_t sample_random(pdl_sampler *s, const float *logits) {
    const pdl_sampling *p = &s->params;
    double u = uniform01(s->rng); /* one draw per step whatever the logits, so the stream stays in step */
    size_t n = (size_t)s->vocab, k = p->top_k > 0 ? (size_t)p->top_k : 0;
    bool top_k = k > 0 && k < n;
    bool chunked = top_k && 2 * k <= n / 64;
    float row_max;
    uint32_t k_key = chunked ? rank_key(rank_chunk_bound(logits, n, k, s->chunk_max, &row_max)) : 0;
    if (!chunked) row_max = rank_max(logits, n);
    if (!isfinite(row_max)) return argmax(logits, s->vocab); /* all -inf or NaN, or a +inf */
    double max = row_max, inv_t = 1.0 / p->temperature;

    float *val = s->val;
    int32_t *ids = NULL; /* NULL: val[j] is token j's */
    if (top_k || p->min_p > 0.0f) {
        /* Candidates: the logits whose rank key clears min_key, copied in id
         * order to (val, ids). min-p keeps z = (l - max) / T >= ln(min_p),
         * i.e. p / p_max >= min_p, a logit threshold; top-k keeps a top slice
         * too, so the two commute, and a bound on top-k's slice (chunk
         * maxima, or for large k a histogram pass) cuts the copy short. */
        uint32_t min_key = rank_key(min_p_logit(max, inv_t, p->min_p > 0.0f ? log(p->min_p) : -INFINITY));
        if (top_k && !chunked) k_key = rank_coarse_bound(logits, n, false, (double)k);
        if (k_key > min_key) min_key = k_key;
        ids = s->ids;
        n = rank_gather(logits, n, min_key, val, ids);
        if (top_k && k < n) n = rank_keep(val, ids, n, false, (double)k);
        logits = val;
    }

    /* logits -> unnormalised probabilities e^z, z <= 0 (-inf and NaN -> 0) */
    for (size_t j = 0; j < n; j++) val[j] = fexp_nonpos((float)(((double)logits[j] - max) * inv_t));

    if (p->top_p > 0.0f && p->top_p < 1.0f) {
        double total = lane_sum(val, n), need = (double)p->top_p * total;
        /* The tokens at or below w_floor hold at most n * w_floor = (total -
         * need) / 2 together, so the others hold more than need: the nucleus
         * lies among them (a value threshold keeps whole tie groups). Dropping
         * the rest first leaves the radix select a short list on peaked
         * distributions, and changes nothing it computes above the cut.
         * Branch-free, as in sampler_rank.c. */
        float w_floor = (float)(0.5 * (total - need) / (double)n);
        size_t kept = 0;
        for (size_t j = 0; j < n; j++) {
            float w = val[j];
            int32_t id = ids ? ids[j] : (int32_t)j;
            val[kept] = w;
            s->ids[kept] = id;
            kept += w > w_floor;
        }
        ids = s->ids;
        n = rank_keep(val, ids, kept, true, need);
    }
    size_t j = draw_index(val, n, u, s->block);
    return ids ? ids[j] : (int32_t)j;
}

int32_t pdl_sampler_sample(pdl_sampler *s, const float *logits) { return pdl_sampler_sample_ex(s, logits, NULL, 0); }

int32_t pdl_sampler_sample_ex(pdl_sampler *s, const float *logits, const int32_t *banned, int n_banned) {
    const float *row = logits;
    bool penalize = s->penalized && s->counts.used > 0;
    if (penalize || s->params.n_logit_bias > 0 || n_banned > 0) {
        memcpy(s->val, logits, (size_t)s->vocab * sizeof *s->val);
        for (int i = 0; i < s->params.n_logit_bias; i++) s->val[s->bias[i].token] += s->bias[i].bias;
        if (penalize) apply_penalties(s, s->val);
        for (int i = 0; i < n_banned; i++)
            if (banned[i] >= 0 && banned[i] < s->vocab) s->val[banned[i]] = -INFINITY;
        row = s->val;
    }
    int32_t token = s->params.temperature > 0.0f ? sample_random(s, row) : argmax(row, s->vocab);
    record_generated(s, token);
    return token;
}
