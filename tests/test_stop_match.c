/*
 * test_stop_match.c - the stop-string automaton (src/engine/stop_match.c)
 * against a naive reference: where the first stop string completes, which
 * one wins, how much text must be held back, the same answers however the
 * text is cut into pieces, and work bounded by the text fed (64 stop
 * strings of 4096 bytes cost no more per byte than one short one).
 */
#include <stdlib.h>
#include <string.h>

#include "engine/stop_match.h"
#include "test_util.h"

/* The reference: the first end position e (bytes) at which some stop
 * string ends, the longest stop string ending there; -1 when none. */
static int naive_first_stop(const char *text, size_t n, const char *const *stops, int n_stops, size_t *end) {
    for (size_t e = 1; e <= n; e++) {
        int best = -1;
        size_t best_len = 0;
        for (int i = 0; i < n_stops; i++) {
            size_t l = strlen(stops[i]);
            if (l <= e && memcmp(text + e - l, stops[i], l) == 0 && l > best_len) {
                best = i;
                best_len = l;
            }
        }
        if (best >= 0) {
            *end = e;
            return best;
        }
    }
    return -1;
}

/* The reference hold: the longest tail of text that is a proper prefix of a stop string. */
static size_t naive_hold(const char *text, size_t n, const char *const *stops, int n_stops) {
    size_t hold = 0;
    for (int i = 0; i < n_stops; i++) {
        size_t l = strlen(stops[i]);
        for (size_t k = l - 1; k > hold; k--)
            if (k <= n && memcmp(text + n - k, stops[i], k) == 0) {
                hold = k;
                break;
            }
    }
    return hold;
}

static uint64_t rng = 12345;
static uint32_t next_u32(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)rng;
}

static void test_matches_the_naive_reference_on_random_text(void) {
    /* a 3-letter alphabet makes overlaps and near misses common */
    for (int round = 0; round < 2000; round++) {
        int n_stops = 1 + (int)(next_u32() % 5);
        char store[5][8];
        const char *stops[5];
        for (int i = 0; i < n_stops; i++) {
            int l = 1 + (int)(next_u32() % 6);
            for (int k = 0; k < l; k++) store[i][k] = (char)('a' + next_u32() % 3);
            store[i][l] = '\0';
            stops[i] = store[i];
        }
        char text[64];
        size_t n = 1 + next_u32() % 40;
        for (size_t k = 0; k < n; k++) text[k] = (char)('a' + next_u32() % 3);
        stop_matcher *m;
        pdl_error err;
        REQUIRE(stop_matcher_new(&m, stops, NULL, n_stops, &err) == 0);
        size_t want_end = 0;
        int want = naive_first_stop(text, n, stops, n_stops, &want_end);
        /* fed in random pieces: the answer must not depend on the cuts */
        int32_t state = STOP_STATE_START;
        size_t at = 0;
        int got = -1;
        size_t got_end = 0;
        while (at < n) {
            size_t piece = 1 + next_u32() % 4;
            if (piece > n - at) piece = n - at;
            stop_hit hit;
            if (stop_matcher_feed(m, &state, text + at, piece, &hit, NULL)) {
                got = hit.stop;
                got_end = at + hit.end;
                CHECK_EQ_INT(hit.len, strlen(stops[hit.stop]));
                break;
            }
            at += piece;
            /* between pieces, the hold is the longest tail that may begin a stop */
            CHECK_EQ_INT(stop_matcher_hold(m, state), naive_hold(text, at, stops, n_stops));
        }
        CHECK_MSG(got == want || (want >= 0 && got >= 0 && strcmp(stops[got], stops[want]) == 0),
                  "round %d: stop %d, expected %d", round, got, want);
        if (want >= 0) CHECK_EQ_INT(got_end, want_end);
        stop_matcher_free(m);
    }
}

static void test_longest_stop_wins_at_the_same_end_and_the_earliest_end_wins(void) {
    const char *stops[] = {"cd", "abcdef", "bcd"};
    stop_matcher *m;
    pdl_error err;
    REQUIRE(stop_matcher_new(&m, stops, NULL, 3, &err) == 0);
    int32_t st = STOP_STATE_START;
    stop_hit hit;
    /* "cd" and "bcd" both end at byte 4 of "abcdef": "bcd" (longer) wins there,
     * before "abcdef" ends at byte 6 */
    REQUIRE(stop_matcher_feed(m, &st, "abcdef", 6, &hit, NULL));
    CHECK_EQ_INT(hit.stop, 2);
    CHECK_EQ_INT(hit.end, 4);
    CHECK_EQ_INT(hit.len, 3);
    stop_matcher_free(m);
}

/* The trie is built from the strings in sorted order: a string that begins
 * another, strings given in any order, and a repeated string (which keeps
 * its first index) must come out as given. */
static void test_prefixes_order_and_repeats_do_not_change_the_answer(void) {
    const char *stops[] = {"abd", "ab", "zz", "abc", "ab", "a\xff", "a\x01"};
    stop_matcher *m;
    pdl_error err;
    REQUIRE(stop_matcher_new(&m, stops, NULL, 7, &err) == 0);
    CHECK_EQ_INT(stop_matcher_count(m), 7);
    static const struct {
        const char *text;
        int stop;
        size_t end;
    } cases[] = {{"xxab", 1, 4}, {"zabc", 1, 3}, {"xzz", 2, 3}, {"a\xff", 5, 2}, {"qa\x01", 6, 3}, {"aab", 1, 3}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int32_t st = STOP_STATE_START;
        stop_hit hit;
        REQUIRE_MSG(stop_matcher_feed(m, &st, cases[i].text, strlen(cases[i].text), &hit, NULL), "%zu", i);
        CHECK_MSG(hit.stop == cases[i].stop, "case %zu: stop %d", i, hit.stop);
        CHECK_EQ_INT(hit.end, cases[i].end);
    }
    /* "a" alone may begin four of them: held */
    int32_t st = STOP_STATE_START;
    stop_hit hit;
    CHECK(!stop_matcher_feed(m, &st, "xa", 2, &hit, NULL));
    CHECK_EQ_INT(stop_matcher_hold(m, st), 1);
    stop_matcher_free(m);
}

static void test_hold_follows_partial_matches_and_drops_on_a_mismatch(void) {
    const char *stops[] = {"</answer>", "\n\n"};
    stop_matcher *m;
    pdl_error err;
    REQUIRE(stop_matcher_new(&m, stops, NULL, 2, &err) == 0);
    int32_t st = STOP_STATE_START;
    stop_hit hit;
    CHECK(!stop_matcher_feed(m, &st, "x </an", 6, &hit, NULL));
    CHECK_EQ_INT(stop_matcher_hold(m, st), 4); /* "</an" may still become "</answer>" */
    CHECK(!stop_matcher_feed(m, &st, "d", 1, &hit, NULL));
    CHECK_EQ_INT(stop_matcher_hold(m, st), 0); /* "</and" cannot */
    CHECK(!stop_matcher_feed(m, &st, "\n", 1, &hit, NULL));
    CHECK_EQ_INT(stop_matcher_hold(m, st), 1);
    CHECK(stop_matcher_feed(m, &st, "\nrest", 5, &hit, NULL));
    CHECK_EQ_INT(hit.stop, 1);
    CHECK_EQ_INT(hit.end, 1);
    stop_matcher_free(m);
}

static void test_nul_and_high_bytes_are_ordinary_bytes(void) {
    const char stop[] = {'a', '\0', (char)0xff};
    const char *stops[] = {stop};
    size_t lens[] = {3};
    stop_matcher *m;
    pdl_error err;
    REQUIRE(stop_matcher_new(&m, stops, lens, 1, &err) == 0);
    int32_t st = STOP_STATE_START;
    stop_hit hit;
    const char text[] = {'x', 'a', '\0', 'a', '\0', (char)0xff, 'y'};
    REQUIRE(stop_matcher_feed(m, &st, text, sizeof text, &hit, NULL));
    CHECK_EQ_INT(hit.end, 6);
    stop_matcher_free(m);
    const char *empty[] = {""};
    CHECK(stop_matcher_new(&m, empty, NULL, 1, &err) != 0);
    CHECK_CONTAINS(err.message, "stop string 0 is empty");
}

/* The defect this automaton replaced: 64 stop strings of 60 KB made every
 * token scan all of them. Here 64 strings of 4096 bytes (the server's cap)
 * that share long prefixes with the text, fed token-sized pieces: at most 2
 * automaton moves per byte, whatever the strings. */
static void test_work_per_byte_is_bounded_whatever_the_stop_strings(void) {
    enum { N = 64, LEN = 4096 };
    char *store = malloc((size_t)N * (LEN + 1));
    const char *stops[N];
    for (int i = 0; i < N; i++) {
        char *s = store + (size_t)i * (LEN + 1);
        for (int k = 0; k < LEN; k++) s[k] = 'a';
        s[LEN - 1] = (char)('A' + i % 26); /* differs only at the end: every prefix is live */
        s[LEN] = '\0';
        stops[i] = s;
    }
    stop_matcher *m;
    pdl_error err;
    REQUIRE(stop_matcher_new(&m, stops, NULL, N, &err) == 0);
    int32_t st = STOP_STATE_START;
    uint64_t steps = 0;
    size_t fed = 0;
    char piece[7];
    for (int t = 0; t < 20000; t++) {
        /* mostly 'a' (stays deep in the trie), sometimes a miss that falls back */
        size_t len = 1 + next_u32() % 6;
        for (size_t k = 0; k < len; k++) piece[k] = next_u32() % 97 == 0 ? 'b' : 'a';
        stop_hit hit;
        CHECK(!stop_matcher_feed(m, &st, piece, len, &hit, &steps));
        fed += len;
    }
    CHECK_MSG(steps <= 2 * fed, "%llu moves for %zu bytes", (unsigned long long)steps, fed);
    stop_matcher_free(m);
    free(store);
}

int main(void) {
    RUN(test_matches_the_naive_reference_on_random_text);
    RUN(test_longest_stop_wins_at_the_same_end_and_the_earliest_end_wins);
    RUN(test_prefixes_order_and_repeats_do_not_change_the_answer);
    RUN(test_hold_follows_partial_matches_and_drops_on_a_mismatch);
    RUN(test_nul_and_high_bytes_are_ordinary_bytes);
    RUN(test_work_per_byte_is_bounded_whatever_the_stop_strings);
    return test_summary();
}
