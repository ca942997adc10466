/*
 * test_sampler.c - the sampling API (pdl_sampler_*, pdl_sampling_validate,
 * pdl_logprobs) as a specification: greedy ties, the drawn distribution,
 * top-k / top-p / min-p cuts including their boundaries, each penalty on
 * exactly its tokens, per-request seeds, log-probabilities against a float64
 * reference, parameter validation, and a full-size vocabulary smoke test.
 * Draws use fixed seeds, so the statistical checks are deterministic.
 *
 * PAGEDLM_BENCH=1 also prints the time per sample call at V = 151936 (no
 * assertion on it).
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, for the benchmark's CPU time */
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "kernels/fast_exp.h"
#include "engine/sampler_rank.h"
#include "pagedlm.h"
#include "test_util.h"

enum { BIG_VOCAB = 151936 };

static uint64_t rng_state = 0x5eed;
static double urand(void) { /* uniform in [0, 1) */
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(rng_state >> 11) * (1.0 / 9007199254740992.0);
}
static float nrand(void) { /* roughly standard normal (Irwin-Hall of 12) */
    double s = 0.0;
    for (int i = 0; i < 12; i++) s += urand();
    return (float)(s - 6.0);
}

static pdl_sampler *new_sampler(pdl_sampling p, int vocab) {
    pdl_sampler *s = pdl_sampler_new(&p, vocab);
    REQUIRE(s != NULL);
    return s;
}

/* counts[token] over n draws with params p from the same logits. */
static void draw_counts(pdl_sampling p, const float *logits, int vocab, int n, int *counts) {
    pdl_sampler *s = new_sampler(p, vocab);
    memset(counts, 0, (size_t)vocab * sizeof *counts);
    for (int i = 0; i < n; i++) {
        int32_t t = pdl_sampler_sample(s, logits);
        REQUIRE(t >= 0 && t < vocab);
        counts[t]++;
    }
    pdl_sampler_free(s);
}

/* Each count is within 5 standard deviations of n * want[i]; 0 stays 0. */
static void check_frequencies(const int *counts, const double *want, int vocab, int n) {
    for (int i = 0; i < vocab; i++) {
        double mean = n * want[i], sd = sqrt(n * want[i] * (1.0 - want[i]));
        if (want[i] == 0.0)
            CHECK_MSG(counts[i] == 0, "token %d drawn %d times, expected never", i, counts[i]);
        else
            CHECK_MSG(fabs(counts[i] - mean) <= 5.0 * sd, "token %d drawn %d times, expected %.1f +- %.1f", i,
                      counts[i], mean, sd);
    }
}

static void logits_of(const double *probs, float *logits, int vocab) {
    for (int i = 0; i < vocab; i++) logits[i] = probs[i] > 0 ? (float)log(probs[i]) : -INFINITY;
}

/* -------------------------------------------------------------------------
 * Greedy
 * ------------------------------------------------------------------------- */

static void test_greedy_picks_the_argmax_and_ties_go_to_the_lowest_id(void) {
    float logits[6] = {0.5f, 3.0f, -1.0f, 3.0f, 2.9f, 3.0f};
    pdl_sampler *s = new_sampler((pdl_sampling){0}, 6);
    CHECK_EQ_INT(pdl_sampler_sample(s, logits), 1);
    CHECK_EQ_INT(pdl_sampler_sample(s, logits), 1); /* no penalties: the same again */
    pdl_sampler_free(s);
    float all_equal[4] = {-2.0f, -2.0f, -2.0f, -2.0f};
    s = new_sampler((pdl_sampling){0}, 4);
    CHECK_EQ_INT(pdl_sampler_sample(s, all_equal), 0);
    pdl_sampler_free(s);
}

static void test_sampling_leaves_the_logits_unchanged(void) {
    float logits[5] = {1.0f, -2.0f, 0.5f, 3.0f, 0.0f}, copy[5];
    memcpy(copy, logits, sizeof logits);
    pdl_sampling p = {.temperature = 0.7f, .top_k = 3, .top_p = 0.9f, .min_p = 0.05f, .repetition_penalty = 1.3f,
                      .presence_penalty = 0.5f, .frequency_penalty = 0.25f, .seed = 1};
    pdl_sampler *s = new_sampler(p, 5);
    int32_t prompt[] = {0, 3};
    pdl_sampler_add_prompt(s, prompt, 2);
    for (int i = 0; i < 20; i++) pdl_sampler_sample(s, logits);
    CHECK(memcmp(logits, copy, sizeof logits) == 0);
    pdl_sampler_free(s);
}

/* NaN and -inf logits are never drawn, under any filter; a row with no
 * finite logit still gives an id in range. */
static void test_nan_and_minus_infinity_logits_are_never_drawn(void) {
    float logits[6] = {NAN, -INFINITY, 1.0f, 0.5f, -INFINITY, NAN};
    pdl_sampling params[] = {
        {.temperature = 0.0f},
        {.temperature = 1.0f, .seed = 1},
        {.temperature = 1.0f, .top_k = 2, .seed = 2},
        {.temperature = 1.0f, .top_p = 0.99f, .seed = 3},
        {.temperature = 1.0f, .min_p = 0.01f, .seed = 4},
        {.temperature = 1.0f, .repetition_penalty = 1.5f, .frequency_penalty = 0.1f, .seed = 5},
    };
    int counts[6];
    for (size_t c = 0; c < sizeof params / sizeof params[0]; c++) {
        draw_counts(params[c], logits, 6, 500, counts);
        CHECK_MSG(counts[2] + counts[3] == 500, "params %zu: %d of 500 draws on NaN or -inf", c,
                  500 - counts[2] - counts[3]);
    }
    float none[3] = {-INFINITY, NAN, -INFINITY};
    for (size_t c = 0; c < sizeof params / sizeof params[0]; c++) {
        pdl_sampler *s = new_sampler(params[c], 3);
        int32_t t = pdl_sampler_sample(s, none);
        CHECK(t >= 0 && t < 3);
        pdl_sampler_free(s);
    }
}

/* -------------------------------------------------------------------------
 * Temperature and the draw
 * ------------------------------------------------------------------------- */

static void test_same_seed_same_tokens_other_seed_other_tokens(void) {
    enum { V = 50, N = 200 };
    float logits[V];
    for (int i = 0; i < V; i++) logits[i] = nrand();
    int32_t a[N], b[N], c[N];
    pdl_sampling p = {.temperature = 1.0f, .seed = 42};
    pdl_sampler *sa = new_sampler(p, V), *sb = new_sampler(p, V);
    p.seed = 43;
    pdl_sampler *sc = new_sampler(p, V);
    for (int i = 0; i < N; i++) {
        a[i] = pdl_sampler_sample(sa, logits);
        b[i] = pdl_sampler_sample(sb, logits);
        c[i] = pdl_sampler_sample(sc, logits);
    }
    CHECK(memcmp(a, b, sizeof a) == 0);
    CHECK(memcmp(a, c, sizeof a) != 0);
    pdl_sampler_free(sa);
    pdl_sampler_free(sb);
    pdl_sampler_free(sc);
}

static void test_temperature_one_draws_the_softmax_distribution(void) {
    double want[4] = {0.1, 0.2, 0.3, 0.4};
    float logits[4];
    int counts[4];
    logits_of(want, logits, 4);
    draw_counts((pdl_sampling){.temperature = 1.0f, .seed = 7}, logits, 4, 20000, counts);
    check_frequencies(counts, want, 4, 20000);
}

/* T = 2 turns p_i into sqrt(p_i) / sum sqrt(p_j). */
static void test_temperature_divides_the_logits(void) {
    double p[4] = {0.04, 0.16, 0.36, 0.44}, want[4], sum = 0.0;
    for (int i = 0; i < 4; i++) sum += sqrt(p[i]);
    for (int i = 0; i < 4; i++) want[i] = sqrt(p[i]) / sum;
    float logits[4];
    int counts[4];
    logits_of(p, logits, 4);
    draw_counts((pdl_sampling){.temperature = 2.0f, .seed = 8}, logits, 4, 20000, counts);
    check_frequencies(counts, want, 4, 20000);
}

/* Over many candidates (the draw searches by blocks): weights 1..7 cycling
 * over 1000 tokens; both the id range and the weight class of the drawn
 * tokens follow the distribution. */
static void test_draws_over_many_candidates_follow_the_distribution(void) {
    enum { V = 1000, N = 50000 };
    static float logits[V];
    static int counts[V];
    double total = 0.0;
    for (int i = 0; i < V; i++) {
        logits[i] = logf((float)(i % 7 + 1));
        total += i % 7 + 1;
    }
    draw_counts((pdl_sampling){.temperature = 1.0f, .seed = 14}, logits, V, N, counts);
    int range[10] = {0}, cls[7] = {0};
    double want_range[10] = {0}, want_cls[7] = {0};
    for (int i = 0; i < V; i++) {
        range[i / 100] += counts[i];
        cls[i % 7] += counts[i];
        want_range[i / 100] += (i % 7 + 1) / total;
        want_cls[i % 7] += (i % 7 + 1) / total;
    }
    check_frequencies(range, want_range, 10, N);
    check_frequencies(cls, want_cls, 7, N);
}

/* Interleaving two requests gives each the tokens it gets alone. */
static void test_samplers_draw_independently_of_each_other(void) {
    enum { V = 64, N = 100 };
    float logits[V];
    for (int i = 0; i < V; i++) logits[i] = nrand();
    pdl_sampling pa = {.temperature = 0.8f, .top_p = 0.95f, .frequency_penalty = 0.3f, .seed = 1};
    pdl_sampling pb = {.temperature = 1.2f, .top_k = 20, .repetition_penalty = 1.1f, .seed = 2};
    int32_t alone_a[N], alone_b[N], mixed_a[N], mixed_b[N];
    pdl_sampler *a = new_sampler(pa, V);
    for (int i = 0; i < N; i++) alone_a[i] = pdl_sampler_sample(a, logits);
    pdl_sampler_free(a);
    pdl_sampler *b = new_sampler(pb, V);
    for (int i = 0; i < N; i++) alone_b[i] = pdl_sampler_sample(b, logits);
    pdl_sampler_free(b);
    a = new_sampler(pa, V);
    b = new_sampler(pb, V);
    for (int i = 0; i < N; i++) {
        mixed_b[i] = pdl_sampler_sample(b, logits);
        mixed_a[i] = pdl_sampler_sample(a, logits);
    }
    CHECK(memcmp(alone_a, mixed_a, sizeof alone_a) == 0);
    CHECK(memcmp(alone_b, mixed_b, sizeof alone_b) == 0);
    pdl_sampler_free(a);
    pdl_sampler_free(b);
}

/* -------------------------------------------------------------------------
 * top-k
 * ------------------------------------------------------------------------- */

static void test_top_k_1_is_greedy(void) {
    enum { V = 300 };
    float logits[V];
    pdl_sampler *s = new_sampler((pdl_sampling){.temperature = 1.5f, .top_k = 1, .seed = 3}, V);
    for (int step = 0; step < 50; step++) {
        for (int i = 0; i < V; i++) logits[i] = nrand();
        int32_t best = 0;
        for (int i = 1; i < V; i++)
            if (logits[i] > logits[best]) best = i;
        CHECK_EQ_INT(pdl_sampler_sample(s, logits), best);
    }
    pdl_sampler_free(s);
}

/* Renormalised over the top 2 only: 0.3 / 0.7 and 0.4 / 0.7. */
static void test_top_k_2_draws_only_from_the_top_2(void) {
    double p[5] = {0.1, 0.3, 0.05, 0.4, 0.15}, want[5] = {0, 0.3 / 0.7, 0, 0.4 / 0.7, 0};
    float logits[5];
    int counts[5];
    logits_of(p, logits, 5);
    draw_counts((pdl_sampling){.temperature = 1.0f, .top_k = 2, .seed = 4}, logits, 5, 20000, counts);
    check_frequencies(counts, want, 5, 20000);
}

/* Three tokens tie at 4.0 for the last two places: ids 2 and 3 get them. */
static void test_top_k_ties_at_the_boundary_keep_the_lower_ids(void) {
    float logits[6] = {1.0f, 5.0f, 4.0f, 4.0f, 4.0f, 0.0f};
    bool kept[6] = {false, true, true, true, false, false};
    int counts[6];
    draw_counts((pdl_sampling){.temperature = 100.0f, .top_k = 3, .seed = 5}, logits, 6, 6000, counts);
    for (int i = 0; i < 6; i++) CHECK_MSG((counts[i] > 0) == kept[i], "token %d drawn %d times", i, counts[i]);
}

/* Rows long enough for the chunk-maxima bound, shaped against it: rising,
 * falling, all equal (ties -> the k lowest ids), random, and the top k
 * spread one per chunk. At T = 1000 every kept token shows up in 4000
 * draws, and nothing else ever does. */
static void test_top_k_on_long_rows_keeps_exactly_the_top_k(void) {
    enum { V = 4096, K = 5, N = 4000 };
    static float logits[V];
    static int counts[V];
    for (int shape = 0; shape < 5; shape++) {
        for (int i = 0; i < V; i++)
            logits[i] = shape == 0 ? (float)i * 0.01f : shape == 1 ? (float)-i * 0.01f : shape == 2 ? 1.0f : nrand();
        if (shape == 4)
            for (int i = 0; i < V; i++) logits[i] = i % 820 == 0 ? (float)(5 - i / 820) : -1.0f;
        bool kept[V] = {false};
        for (int r = 0; r < K; r++) { /* reference: the best not yet kept, ties -> lowest id */
            int best = -1;
            for (int i = 0; i < V; i++)
                if (!kept[i] && (best < 0 || logits[i] > logits[best])) best = i;
            kept[best] = true;
        }
        draw_counts((pdl_sampling){.temperature = 1000.0f, .top_k = K, .seed = 16}, logits, V, N, counts);
        int bad = 0;
        for (int i = 0; i < V; i++) bad += (counts[i] > 0) != kept[i];
        CHECK_MSG(bad == 0, "shape %d: %d tokens drawn or missed wrongly", shape, bad);
    }
}

static void test_top_k_at_least_the_vocabulary_is_off(void) {
    double want[3] = {0.2, 0.3, 0.5};
    float logits[3];
    int counts[3];
    logits_of(want, logits, 3);
    draw_counts((pdl_sampling){.temperature = 1.0f, .top_k = 3, .seed = 6}, logits, 3, 20000, counts);
    check_frequencies(counts, want, 3, 20000);
    draw_counts((pdl_sampling){.temperature = 1.0f, .top_k = 1000, .seed = 6}, logits, 3, 20000, counts);
    check_frequencies(counts, want, 3, 20000);
}

/* -------------------------------------------------------------------------
 * top-p
 * ------------------------------------------------------------------------- */

/* Probabilities 0.05 0.3 0.15 0.5 (ids shuffled against the ranking): the
 * nucleus of 0.79 is {3, 1}, of 0.81 {3, 1, 2}, of 0.4 {3}. */
static void test_top_p_keeps_exactly_the_nucleus(void) {
    double p[4] = {0.05, 0.3, 0.15, 0.5};
    float logits[4];
    int counts[4];
    logits_of(p, logits, 4);
    double want79[4] = {0, 0.3 / 0.8, 0, 0.5 / 0.8};
    draw_counts((pdl_sampling){.temperature = 1.0f, .top_p = 0.79f, .seed = 9}, logits, 4, 20000, counts);
    check_frequencies(counts, want79, 4, 20000);
    double want81[4] = {0, 0.3 / 0.95, 0.15 / 0.95, 0.5 / 0.95};
    draw_counts((pdl_sampling){.temperature = 1.0f, .top_p = 0.81f, .seed = 9}, logits, 4, 20000, counts);
    check_frequencies(counts, want81, 4, 20000);
    double want40[4] = {0, 0, 0, 1};
    draw_counts((pdl_sampling){.temperature = 1.0f, .top_p = 0.4f, .seed = 9}, logits, 4, 2000, counts);
    check_frequencies(counts, want40, 4, 2000);
}

/* Eight equal logits: every probability is exactly 1/8, so a top_p of k/8
 * is reached exactly after k tokens; the smallest such set is kept, and the
 * tie goes to the lowest ids. */
static void test_top_p_boundary_mass_equal_to_p_and_ties_to_lower_ids(void) {
    float logits[8] = {0};
    int counts[8];
    for (int k = 1; k <= 7; k++) {
        double want[8] = {0};
        for (int i = 0; i < k; i++) want[i] = 1.0 / k;
        draw_counts((pdl_sampling){.temperature = 1.0f, .top_p = (float)k / 8.0f, .seed = 10}, logits, 8, 8000,
                    counts);
        for (int i = 0; i < 8; i++)
            CHECK_MSG((counts[i] > 0) == (want[i] > 0), "top_p %d/8: token %d drawn %d times", k, i, counts[i]);
    }
    /* just above 3/8 needs a fourth token */
    draw_counts((pdl_sampling){.temperature = 1.0f, .top_p = 0.376f, .seed = 10}, logits, 8, 8000, counts);
    for (int i = 0; i < 8; i++) CHECK_MSG((counts[i] > 0) == (i < 4), "token %d drawn %d times", i, counts[i]);
}

static void test_top_p_always_keeps_the_most_likely_token(void) {
    float logits[5] = {0.0f, 0.1f, 0.2f, 0.3f, 0.25f};
    int counts[5];
    draw_counts((pdl_sampling){.temperature = 1.0f, .top_p = 1e-6f, .seed = 11}, logits, 5, 500, counts);
    CHECK_EQ_INT(counts[3], 500);
}

/* -------------------------------------------------------------------------
 * min-p
 * ------------------------------------------------------------------------- */

/* p = 0.48 0.2 0.05 0.25 0.02 and min_p 0.3: at T = 1 the cut is 0.144,
 * keeping tokens 0, 1, 3. At T = 2 the ratios to the max become sqrt(p_i /
 * 0.48) = 1, 0.65, 0.32, 0.72, 0.20: token 2 comes back, token 4 stays out. */
static void test_min_p_drops_tokens_below_a_fraction_of_the_max_after_temperature(void) {
    double p[5] = {0.48, 0.2, 0.05, 0.25, 0.02};
    float logits[5];
    int counts[5];
    logits_of(p, logits, 5);
    double want[5] = {0.48 / 0.93, 0.2 / 0.93, 0, 0.25 / 0.93, 0};
    draw_counts((pdl_sampling){.temperature = 1.0f, .min_p = 0.3f, .seed = 12}, logits, 5, 20000, counts);
    check_frequencies(counts, want, 5, 20000);
    double want_t2[5], sum = 0.0;
    for (int i = 0; i < 4; i++) sum += sqrt(p[i]);
    for (int i = 0; i < 5; i++) want_t2[i] = i < 4 ? sqrt(p[i]) / sum : 0.0;
    draw_counts((pdl_sampling){.temperature = 2.0f, .min_p = 0.3f, .seed = 12}, logits, 5, 20000, counts);
    check_frequencies(counts, want_t2, 5, 20000);
    draw_counts((pdl_sampling){.temperature = 1.0f, .min_p = 1.0f, .seed = 12}, logits, 5, 500, counts);
    CHECK_EQ_INT(counts[0], 500);
}

/* The min-p cut is exact at float resolution: with max 0 and T = 1, the
 * smallest float l with l >= ln(min_p) stays, the float just below goes. */
static void test_min_p_boundary_is_exact(void) {
    double cut = log(0.3f);
    float l = (float)cut;
    while ((double)nextafterf(l, -INFINITY) >= cut) l = nextafterf(l, -INFINITY);
    while ((double)l < cut) l = nextafterf(l, INFINITY);
    float logits[3] = {0.0f, l, nextafterf(l, -INFINITY)};
    int counts[3];
    draw_counts((pdl_sampling){.temperature = 1.0f, .min_p = 0.3f, .seed = 15}, logits, 3, 2000, counts);
    CHECK(counts[1] > 0);
    CHECK_EQ_INT(counts[2], 0);
}

/* top-p takes its share of the mass left by min-p and top-k. p = 0.06 0.3
 * 0.04 0.4 0.2; min_p 0.125 cuts below 0.05 (token 2), leaving 0.96, of
 * which top_p 0.72 (0.6912) is reached by 0.4 + 0.3; of the full 1.0 it
 * would take token 4 too. Adding top_k 3 leaves 0.9, of which top_p 0.75
 * (0.675) is again 0.4 + 0.3 (0.75 of 0.96, 0.72, would not be). */
static void test_top_p_applies_to_what_min_p_and_top_k_leave(void) {
    double p[5] = {0.06, 0.3, 0.04, 0.4, 0.2};
    float logits[5];
    int counts[5];
    logits_of(p, logits, 5);
    double want[5] = {0, 0.3 / 0.7, 0, 0.4 / 0.7, 0};
    draw_counts((pdl_sampling){.temperature = 1.0f, .min_p = 0.125f, .top_p = 0.72f, .seed = 13}, logits, 5, 20000,
                counts);
    check_frequencies(counts, want, 5, 20000);
    draw_counts((pdl_sampling){.temperature = 1.0f, .min_p = 0.125f, .top_k = 3, .top_p = 0.75f, .seed = 13}, logits,
                5, 20000, counts);
    check_frequencies(counts, want, 5, 20000);
}

/* -------------------------------------------------------------------------
 * Penalties (greedy, on logits crafted so each penalty flips the choice
 * exactly when it applies)
 * ------------------------------------------------------------------------- */

static void test_repetition_penalty_divides_positive_and_multiplies_negative_logits(void) {
    /* 2.0 / 1.25 = 1.6 < 1.7 flips to token 1; token 2 is in the prompt too
     * but is far below, and token 3 (not seen) keeps its 1.65 */
    float pos[4] = {2.0f, 1.7f, -5.0f, 1.65f};
    pdl_sampler *s = new_sampler((pdl_sampling){.repetition_penalty = 1.25f}, 4);
    int32_t prompt[] = {0, 2};
    pdl_sampler_add_prompt(s, prompt, 2);
    CHECK_EQ_INT(pdl_sampler_sample(s, pos), 1);
    pdl_sampler_free(s);
    /* -1.0 * 1.25 = -1.25 < -1.2; before the penalty token 0 wins */
    float neg[3] = {-1.0f, -1.2f, -3.0f};
    s = new_sampler((pdl_sampling){.repetition_penalty = 1.25f}, 3);
    CHECK_EQ_INT(pdl_sampler_sample(s, neg), 0); /* generated now */
    CHECK_EQ_INT(pdl_sampler_sample(s, neg), 1);
    pdl_sampler_free(s);
    /* r < 1 rewards repeats: 1.0 / 0.5 = 2 > 1.5 */
    float low[2] = {1.0f, 1.5f};
    s = new_sampler((pdl_sampling){.repetition_penalty = 0.5f}, 2);
    int32_t seen[] = {0};
    pdl_sampler_add_prompt(s, seen, 1);
    CHECK_EQ_INT(pdl_sampler_sample(s, low), 0);
    pdl_sampler_free(s);
}

/* Applied once per token however often it occurred: 2 / 1.25 = 1.6 > 1.55
 * stays the choice even after many repeats. */
static void test_repetition_penalty_does_not_compound(void) {
    float logits[2] = {2.0f, 1.55f};
    pdl_sampler *s = new_sampler((pdl_sampling){.repetition_penalty = 1.25f}, 2);
    int32_t prompt[] = {0, 0, 0};
    pdl_sampler_add_prompt(s, prompt, 3);
    for (int i = 0; i < 5; i++) CHECK_EQ_INT(pdl_sampler_sample(s, logits), 0);
    pdl_sampler_free(s);
}

static void test_repetition_penalty_1_or_0_is_off(void) {
    float logits[2] = {2.0f, 1.9f};
    int32_t prompt[] = {0};
    for (int i = 0; i < 2; i++) {
        pdl_sampler *s = new_sampler((pdl_sampling){.repetition_penalty = i ? 1.0f : 0.0f}, 2);
        pdl_sampler_add_prompt(s, prompt, 1);
        CHECK_EQ_INT(pdl_sampler_sample(s, logits), 0);
        CHECK_EQ_INT(pdl_sampler_sample(s, logits), 0);
        pdl_sampler_free(s);
    }
}

/* Presence and frequency look at generated tokens only: a prompt token is
 * not penalised, the same token once generated is. */
static void test_presence_and_frequency_ignore_the_prompt(void) {
    float logits[2] = {2.0f, 1.5f};
    int32_t prompt[] = {0, 0, 0, 0};
    pdl_sampling params[2] = {{.presence_penalty = 1.0f}, {.frequency_penalty = 1.0f}};
    for (int i = 0; i < 2; i++) {
        pdl_sampler *s = new_sampler(params[i], 2);
        pdl_sampler_add_prompt(s, prompt, 4);
        CHECK_EQ_INT(pdl_sampler_sample(s, logits), 0); /* 2.0: the prompt does not count */
        CHECK_EQ_INT(pdl_sampler_sample(s, logits), 1); /* 2.0 - 1 = 1.0 < 1.5 */
        pdl_sampler_free(s);
    }
    /* with the repetition penalty on as well, a prompt token gets only that:
     * 2.0 / 1.25 = 1.6 > 1.5 */
    pdl_sampler *s =
        new_sampler((pdl_sampling){.repetition_penalty = 1.25f, .presence_penalty = 1.0f, .frequency_penalty = 1.0f}, 2);
    pdl_sampler_add_prompt(s, prompt, 4);
    CHECK_EQ_INT(pdl_sampler_sample(s, logits), 0);
    CHECK_EQ_INT(pdl_sampler_sample(s, logits), 1); /* generated now: 1.6 - 1 - 1 */
    pdl_sampler_free(s);
}

/* Presence subtracts once; frequency once per occurrence. Logits 3.0 vs
 * 1.5: with presence 1, token 0 stays at 2.0 and keeps winning; with
 * frequency 1 it drops to 2.0, then 1.0 after its second occurrence. */
static void test_presence_counts_once_frequency_counts_each_occurrence(void) {
    float logits[3] = {3.0f, 1.5f, -4.0f};
    pdl_sampler *s = new_sampler((pdl_sampling){.presence_penalty = 1.0f}, 3);
    for (int i = 0; i < 5; i++) CHECK_EQ_INT(pdl_sampler_sample(s, logits), 0);
    pdl_sampler_free(s);
    s = new_sampler((pdl_sampling){.frequency_penalty = 1.0f}, 3);
    CHECK_EQ_INT(pdl_sampler_sample(s, logits), 0); /* 3.0 */
    CHECK_EQ_INT(pdl_sampler_sample(s, logits), 0); /* 2.0 */
    CHECK_EQ_INT(pdl_sampler_sample(s, logits), 1); /* 1.0 < 1.5 */
    CHECK_EQ_INT(pdl_sampler_sample(s, logits), 0); /* 1.0 vs 1.5 - 1 = 0.5 */
    pdl_sampler_free(s);
    /* a negative penalty encourages repeats */
    float close[2] = {1.0f, 1.2f};
    s = new_sampler((pdl_sampling){.presence_penalty = -0.5f}, 2);
    CHECK_EQ_INT(pdl_sampler_sample(s, close), 1);
    CHECK_EQ_INT(pdl_sampler_sample(s, close), 1);
    pdl_sampler_free(s);
}

/* All three in vLLM's order on one token: (2.0 / 1.25) - 0.1 * 2 - 0.3 =
 * 1.1, between 1.05 and 1.15. */
static void test_penalties_combine_repetition_then_frequency_then_presence(void) {
    float first[3] = {5.0f, -9.0f, -9.0f}, probe_hi[3] = {2.0f, 1.15f, -9.0f}, probe_lo[3] = {2.0f, 1.05f, -9.0f};
    pdl_sampling p = {.repetition_penalty = 1.25f, .frequency_penalty = 0.1f, .presence_penalty = 0.3f};
    pdl_sampler *s = new_sampler(p, 3);
    CHECK_EQ_INT(pdl_sampler_sample(s, first), 0);
    CHECK_EQ_INT(pdl_sampler_sample(s, first), 0); /* token 0 generated twice */
    pdl_sampler *t = new_sampler(p, 3);
    CHECK_EQ_INT(pdl_sampler_sample(t, first), 0);
    CHECK_EQ_INT(pdl_sampler_sample(t, first), 0);
    CHECK_EQ_INT(pdl_sampler_sample(s, probe_hi), 1); /* 1.1 < 1.15 */
    CHECK_EQ_INT(pdl_sampler_sample(t, probe_lo), 0); /* 1.1 > 1.05 */
    pdl_sampler_free(s);
    pdl_sampler_free(t);
}

/* Prompt ids outside the vocabulary are ignored. */
static void test_add_prompt_ignores_out_of_range_ids(void) {
    float logits[3] = {1.0f, 0.9f, 0.0f};
    pdl_sampler *s = new_sampler((pdl_sampling){.repetition_penalty = 2.0f}, 3);
    int32_t prompt[] = {-1, 3, 1000000};
    pdl_sampler_add_prompt(s, prompt, 3);
    CHECK_EQ_INT(pdl_sampler_sample(s, logits), 0);
    pdl_sampler_free(s);
}

/* Many distinct tokens (the count table grows) keep their own counts. */
static void test_penalties_track_many_distinct_tokens(void) {
    enum { V = 5000 };
    static float logits[V];
    for (int i = 0; i < V; i++) logits[i] = (float)(V - i) * 0.001f; /* 5.0 down to 0.001 */
    pdl_sampler *s = new_sampler((pdl_sampling){.presence_penalty = 100.0f}, V);
    /* each step takes the best token not yet generated */
    for (int i = 0; i < 3000; i++) {
        int32_t t = pdl_sampler_sample(s, logits);
        if (t != i) {
            CHECK_EQ_INT(t, i);
            break;
        }
    }
    pdl_sampler_free(s);
}

/* -------------------------------------------------------------------------
 * Log-probabilities
 * ------------------------------------------------------------------------- */

/* Against l_i - log(sum exp l_j) in float64 without the max shift, summed in
 * reverse; the result is a float, so the tolerance is 1e-6 relative to
 * max(1, |logprob|) (a float's rounding is 6e-8 relative). */
static void test_logprobs_match_a_float64_reference(void) {
    enum { V = 1000 };
    float logits[V];
    for (int i = 0; i < V; i++) logits[i] = 4.0f * nrand();
    double sum = 0.0;
    for (int i = V; i-- > 0;) sum += exp((double)logits[i]);
    double log_z = log(sum);
    for (int chosen = 0; chosen < V; chosen += 37) {
        float lp = 0.0f;
        pdl_logprobs(logits, V, chosen, &lp, NULL, 0);
        double want = logits[chosen] - log_z;
        CHECK_MSG(fabs(lp - want) <= 1e-6 * fmax(1.0, fabs(want)), "token %d: %.9g vs %.9g", chosen, lp, want);
    }
    pdl_logprob top[20];
    pdl_logprobs(logits, V, 0, NULL, top, 20);
    for (int i = 0; i < 20; i++) {
        double want = logits[top[i].token] - log_z;
        CHECK(fabs(top[i].logprob - want) <= 1e-6 * fmax(1.0, fabs(want)));
    }
    /* large logits do not overflow (max-shifted) */
    float big[3] = {1000.0f, 999.0f, 998.0f};
    float lp;
    pdl_logprobs(big, 3, 0, &lp, NULL, 0);
    double want = -log(1.0 + exp(-1.0) + exp(-2.0));
    CHECK(fabs(lp - want) <= 1e-6);
}

static void test_logprobs_top_n_descending_with_ties_to_the_lower_id(void) {
    float logits[8] = {0.5f, 2.0f, -1.0f, 2.0f, 3.0f, 0.5f, 0.5f, -INFINITY};
    pdl_logprob top[10];
    float lp;
    pdl_logprobs(logits, 8, 2, &lp, top, 5);
    int32_t want[5] = {4, 1, 3, 0, 5};
    for (int i = 0; i < 5; i++) CHECK_EQ_INT(top[i].token, want[i]);
    for (int i = 1; i < 5; i++) CHECK(top[i].logprob <= top[i - 1].logprob);
    CHECK(top[1].logprob == top[2].logprob);
    CHECK(fabsf(top[0].logprob - lp - 4.0f) < 1e-5f); /* l_4 - l_2 = 4 */
    /* n beyond the vocabulary: the rest are {-1, -inf}; -inf logits rank last */
    pdl_logprobs(logits, 8, 7, &lp, top, 10);
    CHECK(lp == -INFINITY);
    CHECK_EQ_INT(top[7].token, 7);
    CHECK_EQ_INT(top[8].token, -1);
    CHECK(top[9].logprob == -INFINITY);
    /* n = 0 writes nothing */
    top[0] = (pdl_logprob){123, 1.0f};
    pdl_logprobs(logits, 8, 0, &lp, top, 0);
    CHECK_EQ_INT(top[0].token, 123);
}

/* The top-n of full-size rows against a selection by brute force: a row
 * with many ties, and an all-equal row (too many candidates near the top
 * for the stack: the radix path). */
static void test_logprobs_top_n_on_full_size_rows(void) {
    static float logits[BIG_VOCAB];
    for (int row = 0; row < 2; row++) {
        for (int i = 0; i < BIG_VOCAB; i++) logits[i] = row ? 0.25f : (float)(int)(nrand() * 8.0f) * 0.5f;
        pdl_logprob top[64];
        pdl_logprobs(logits, BIG_VOCAB, 0, NULL, top, 64);
        /* reference: repeatedly the best (value, then lowest id) not taken yet */
        int32_t prev = -1;
        int bad = 0;
        for (int r = 0; r < 64; r++) {
            int32_t best = -1;
            for (int32_t i = 0; i < BIG_VOCAB; i++) {
                bool after_prev = prev < 0 || logits[i] < logits[prev] || (logits[i] == logits[prev] && i > prev);
                if (after_prev && (best < 0 || logits[i] > logits[best])) best = i;
            }
            bad += top[r].token != best;
            prev = best;
        }
        CHECK_MSG(bad == 0, "row %d: %d of 64 differ", row, bad);
    }
}

/* -------------------------------------------------------------------------
 * The prefix cut behind top-k, top-p and top-n
 * ------------------------------------------------------------------------- */

/* rank_keep against "sort by (value desc, position asc), take while
 * short of need", on rows with many ties, negatives and zeros; need sits
 * halfway between two reference prefix sums so rounding cannot move it. */
static void test_rank_keep_matches_a_full_sort(void) {
    enum { N = 2000 };
    static float x[N], y[N];
    static int32_t ids[N], order[N];
    for (int round = 0; round < 40; round++) {
        bool weighted = round % 2;
        for (int i = 0; i < N; i++) {
            float v = (float)(int)(nrand() * 20.0f) * 0.25f; /* ties */
            if (round % 4 == 2) v = nrand() * 1e-3f;           /* no ties, tiny */
            x[i] = weighted ? expf(v * 0.3f) : v;
            if (!weighted && i % 97 == 0) x[i] = (i % 2) ? -0.0f : 0.0f;
            order[i] = i;
        }
        /* reference ranking: insertion sort by (value desc, index asc) */
        for (int i = 1; i < N; i++) {
            int32_t t = order[i];
            int j = i;
            while (j > 0 && (x[order[j - 1]] < x[t] || (x[order[j - 1]] == x[t] && order[j - 1] > t))) {
                order[j] = order[j - 1];
                j--;
            }
            order[j] = t;
        }
        int len = 1 + (int)(urand() * (N - 1)); /* the reference prefix length */
        double before = 0.0, through = 0.0;
        for (int i = 0; i < len; i++) through += weighted ? x[order[i]] : 1.0;
        before = through - (weighted ? x[order[len - 1]] : 1.0);
        double need = 0.5 * (before + through);
        memcpy(y, x, sizeof x);
        for (int i = 0; i < N; i++) ids[i] = i;
        size_t kept = rank_keep(y, ids, N, weighted, need);
        CHECK_EQ_INT(kept, len);
        /* the same set, in index order */
        static bool in_ref[N];
        memset(in_ref, 0, sizeof in_ref);
        for (int i = 0; i < len; i++) in_ref[order[i]] = true;
        int bad = 0;
        for (size_t i = 0; i < kept; i++)
            if (!in_ref[ids[i]] || (i > 0 && ids[i] <= ids[i - 1]) || y[i] != x[ids[i]]) bad++;
        CHECK_EQ_INT(bad, 0);
    }
}

/* The sampler's e^z against float64 exp: every 1e-4 over [-87, 0] and at
 * -2^-k near 0, relative error within 1e-7 (an exhaustive run over every
 * float in [-87, 0) measured 8.2e-8); exactly 1 at 0; 0 below -87. */
static void test_exp_nonpos_is_within_1e_7_of_float64(void) {
    double worst = 0.0;
    float worst_z = 0.0f;
    for (int i = 0; i <= 870000; i++) {
        float z = (float)(-i * 1e-4);
        double want = exp((double)z), err = fabs(fexp_nonpos(z) - want) / want;
        if (err > worst) worst = err, worst_z = z;
    }
    for (float z = -1.0f; z < -1e-30f; z *= 0.5f) {
        double want = exp((double)z), err = fabs(fexp_nonpos(z) - want) / want;
        if (err > worst) worst = err, worst_z = z;
    }
    CHECK_MSG(worst <= 1e-7, "relative error %.3g at z = %.9g", worst, worst_z);
    CHECK(fexp_nonpos(0.0f) == 1.0f);
    CHECK(fexp_nonpos(-0.0f) == 1.0f);
    CHECK(fexp_nonpos(-88.0f) == 0.0f);
    CHECK(fexp_nonpos(-INFINITY) == 0.0f);
}

/* -------------------------------------------------------------------------
 * Validation
 * ------------------------------------------------------------------------- */

static void check_rejected(pdl_sampling p, const char *field, const char *range) {
    pdl_error err = {{0}};
    CHECK(pdl_sampling_validate(&p, 0, &err) != 0);
    CHECK_CONTAINS(err.message, field);
    CHECK_CONTAINS(err.message, range);
    CHECK(pdl_sampler_new(&p, 10) == NULL);
}

static void test_validation_names_the_field_and_the_allowed_range(void) {
    check_rejected((pdl_sampling){.temperature = -0.1f}, "temperature", ">= 0");
    check_rejected((pdl_sampling){.temperature = INFINITY}, "temperature", "finite");
    check_rejected((pdl_sampling){.temperature = NAN}, "temperature", ">= 0");
    check_rejected((pdl_sampling){.top_k = -1}, "top_k", ">= 0");
    check_rejected((pdl_sampling){.top_p = 1.5f}, "top_p", "[0, 1]");
    check_rejected((pdl_sampling){.top_p = -0.5f}, "top_p", "[0, 1]");
    check_rejected((pdl_sampling){.min_p = 2.0f}, "min_p", "[0, 1]");
    check_rejected((pdl_sampling){.min_p = NAN}, "min_p", "[0, 1]");
    check_rejected((pdl_sampling){.repetition_penalty = -1.0f}, "repetition_penalty", ">= 0");
    check_rejected((pdl_sampling){.presence_penalty = INFINITY}, "presence_penalty", "finite");
    check_rejected((pdl_sampling){.frequency_penalty = NAN}, "frequency_penalty", "finite");

    pdl_error err = {{0}};
    CHECK(pdl_sampling_validate(NULL, 0, &err) != 0);
    pdl_sampling edges[] = {
        {0},
        {.temperature = 1e-6f, .top_k = 1, .top_p = 1.0f, .min_p = 1.0f},
        {.temperature = 100.0f, .repetition_penalty = 0.0f, .presence_penalty = -2.5f, .frequency_penalty = 3.0f},
    };
    for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++) {
        CHECK(pdl_sampling_validate(&edges[i], 0, &err) == 0);
        pdl_sampler *s = pdl_sampler_new(&edges[i], 10);
        CHECK(s != NULL);
        pdl_sampler_free(s);
    }
    pdl_sampling ok = {0};
    CHECK(pdl_sampler_new(&ok, 0) == NULL);
}

/* -------------------------------------------------------------------------
 * Full size
 * ------------------------------------------------------------------------- */

static void test_full_vocabulary_with_every_feature(void) {
    static float logits[BIG_VOCAB];
    pdl_sampling p = {.temperature = 0.8f, .top_k = 40, .top_p = 0.9f, .min_p = 0.02f, .repetition_penalty = 1.1f,
                      .presence_penalty = 0.4f, .frequency_penalty = 0.2f, .seed = 99};
    pdl_sampler *s = new_sampler(p, BIG_VOCAB);
    int32_t prompt[512];
    for (int i = 0; i < 512; i++) prompt[i] = (int32_t)(urand() * BIG_VOCAB);
    pdl_sampler_add_prompt(s, prompt, 512);
    for (int step = 0; step < 30; step++) {
        for (int i = 0; i < BIG_VOCAB; i++) logits[i] = 3.0f * nrand();
        int32_t t = pdl_sampler_sample(s, logits);
        REQUIRE(t >= 0 && t < BIG_VOCAB);
        /* in the top 40 of the raw logits, give or take the penalties' shifts
         * (under 2.5 at these logits) */
        int above = 0;
        for (int i = 0; i < BIG_VOCAB; i++) above += logits[i] > logits[t] + 2.5f;
        CHECK_MSG(above < 40, "step %d: token %d has %d logits well above it", step, t, above);
    }
    pdl_sampler_free(s);
}

/* -------------------------------------------------------------------------
 * Timings (PAGEDLM_BENCH=1): printed, never asserted
 * ------------------------------------------------------------------------- */

/* This thread's CPU time: time spent descheduled on a busy machine does not
 * count. */
static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Best of 5 rounds of `steps` calls, each round with a fresh sampler (the
 * penalties' history restarts), in microseconds per call. */
static double bench_case(const pdl_sampling *p, const float *logits, const int32_t *prompt, size_t n_prompt,
                         int steps) {
    double best = INFINITY; /* other processes only ever add time */
    for (int round = 0; round < 5; round++) {
        pdl_sampler *s = pdl_sampler_new(p, BIG_VOCAB);
        if (!s) return NAN;
        pdl_sampler_add_prompt(s, prompt, n_prompt);
        double t0 = now_s();
        for (int i = 0; i < steps; i++) pdl_sampler_sample(s, logits);
        best = fmin(best, (now_s() - t0) / steps);
        pdl_sampler_free(s);
    }
    return best * 1e6;
}

static void bench_sampler(void) {
    /* peaked, LLM-like: a broad normal body and 30 strong candidates;
     * flat: a normal body only, where the nucleus is a large share of V */
    static float peaked[BIG_VOCAB], flat[BIG_VOCAB];
    for (int i = 0; i < BIG_VOCAB; i++) peaked[i] = 2.0f * nrand(), flat[i] = nrand();
    for (int i = 0; i < 30; i++) peaked[(int)(urand() * BIG_VOCAB)] = 12.0f + 4.0f * (float)urand();
    struct {
        const char *name;
        pdl_sampling p;
    } cases[] = {
        {"greedy", {.temperature = 0.0f}},
        {"temperature 0.8", {.temperature = 0.8f}},
        {"top_k 50", {.temperature = 0.8f, .top_k = 50}},
        {"top_p 0.9", {.temperature = 0.8f, .top_p = 0.9f}},
        {"min_p 0.05", {.temperature = 0.8f, .min_p = 0.05f}},
        {"penalties + top_p 0.9",
         {.temperature = 0.8f, .top_p = 0.9f, .repetition_penalty = 1.1f, .presence_penalty = 0.5f,
          .frequency_penalty = 0.5f}},
        {"all: k 50 p 0.9 min_p", {.temperature = 0.8f, .top_k = 50, .top_p = 0.9f, .min_p = 0.05f,
                                   .repetition_penalty = 1.1f, .presence_penalty = 0.5f, .frequency_penalty = 0.5f}},
    };
    int32_t prompt[1000];
    for (int i = 0; i < 1000; i++) prompt[i] = (int32_t)(urand() * BIG_VOCAB);
    fprintf(stderr, "  bench V=%d, us per call (1000-token prompt, 100 steps)   peaked     flat\n", BIG_VOCAB);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        fprintf(stderr, "  bench %-52s %8.1f %8.1f\n", cases[c].name, bench_case(&cases[c].p, peaked, prompt, 1000, 100),
                bench_case(&cases[c].p, flat, prompt, 1000, 100));
    pdl_logprob top[20];
    float lp;
    double best[2] = {INFINITY, INFINITY};
    for (int round = 0; round < 5; round++) {
        for (int r = 0; r < 2; r++) {
            double t0 = now_s();
            for (int i = 0; i < 100; i++) pdl_logprobs(r ? flat : peaked, BIG_VOCAB, i, &lp, top, 20);
            best[r] = fmin(best[r], (now_s() - t0) / 100);
        }
    }
    fprintf(stderr, "  bench %-52s %8.1f %8.1f\n", "pdl_logprobs, top 20", best[0] * 1e6, best[1] * 1e6);
}

int main(void) {
    RUN(test_greedy_picks_the_argmax_and_ties_go_to_the_lowest_id);
    RUN(test_sampling_leaves_the_logits_unchanged);
    RUN(test_nan_and_minus_infinity_logits_are_never_drawn);
    RUN(test_same_seed_same_tokens_other_seed_other_tokens);
    RUN(test_temperature_one_draws_the_softmax_distribution);
    RUN(test_temperature_divides_the_logits);
    RUN(test_draws_over_many_candidates_follow_the_distribution);
    RUN(test_samplers_draw_independently_of_each_other);
    RUN(test_top_k_1_is_greedy);
    RUN(test_top_k_2_draws_only_from_the_top_2);
    RUN(test_top_k_ties_at_the_boundary_keep_the_lower_ids);
    RUN(test_top_k_on_long_rows_keeps_exactly_the_top_k);
    RUN(test_top_k_at_least_the_vocabulary_is_off);
    RUN(test_top_p_keeps_exactly_the_nucleus);
    RUN(test_top_p_boundary_mass_equal_to_p_and_ties_to_lower_ids);
    RUN(test_top_p_always_keeps_the_most_likely_token);
    RUN(test_min_p_drops_tokens_below_a_fraction_of_the_max_after_temperature);
    RUN(test_min_p_boundary_is_exact);
    RUN(test_top_p_applies_to_what_min_p_and_top_k_leave);
    RUN(test_repetition_penalty_divides_positive_and_multiplies_negative_logits);
    RUN(test_repetition_penalty_does_not_compound);
    RUN(test_repetition_penalty_1_or_0_is_off);
    RUN(test_presence_and_frequency_ignore_the_prompt);
    RUN(test_presence_counts_once_frequency_counts_each_occurrence);
    RUN(test_penalties_combine_repetition_then_frequency_then_presence);
    RUN(test_add_prompt_ignores_out_of_range_ids);
    RUN(test_penalties_track_many_distinct_tokens);
    RUN(test_logprobs_match_a_float64_reference);
    RUN(test_logprobs_top_n_descending_with_ties_to_the_lower_id);
    RUN(test_logprobs_top_n_on_full_size_rows);
    RUN(test_rank_keep_matches_a_full_sort);
    RUN(test_exp_nonpos_is_within_1e_7_of_float64);
    RUN(test_validation_names_the_field_and_the_allowed_range);
    RUN(test_full_vocabulary_with_every_feature);
    if (getenv("PAGEDLM_BENCH")) bench_sampler();
    return test_summary();
}
