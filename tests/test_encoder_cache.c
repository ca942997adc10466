/*
 * test_encoder_cache.c - the encoder cache's bookkeeping (src/vision/
 * encoder_cache.c): hits and misses by the full 128-bit hash, copies kept,
 * least recently *used* (not added) evicted first, the byte budget held,
 * rows larger than the budget not kept, the same image put twice counted
 * once. The engine's use of it: tests/test_vision_gemma3.c.
 */
#include <stdlib.h>
#include <string.h>

#include "test_util.h"
#include "vision/encoder_cache.h"

enum { ROWS = 4, WIDTH = 8, ONE = ROWS * WIDTH * (int)sizeof(float) };

static float *rows_of(float v) {
    static float r[ROWS * WIDTH];
    for (int i = 0; i < ROWS * WIDTH; i++) r[i] = v + (float)i;
    return r;
}

static void test_lru_by_use_within_the_budget(void) {
    enc_cache c;
    enc_cache_init(&c, 2 * ONE);
    CHECK(enc_cache_get(&c, (enc_key){1, 1}) == NULL);
    CHECK(enc_cache_put(&c, (enc_key){1, 1}, rows_of(10), ROWS, WIDTH) == 0);
    CHECK(enc_cache_put(&c, (enc_key){2, 2}, rows_of(20), ROWS, WIDTH) == 0);
    CHECK_EQ_INT(c.bytes, 2 * ONE);
    /* the same low half, another high half: a miss */
    CHECK(enc_cache_get(&c, (enc_key){1, 2}) == NULL);
    const enc_entry *a = enc_cache_get(&c, (enc_key){1, 1}); /* A is now the most recently used */
    REQUIRE(a);
    CHECK(memcmp(a->rows, rows_of(10), ONE) == 0 && a->n_rows == ROWS && a->width == WIDTH);
    CHECK(enc_cache_put(&c, (enc_key){3, 3}, rows_of(30), ROWS, WIDTH) == 0); /* evicts B, the least recently used */
    CHECK_EQ_INT(c.evictions, 1);
    CHECK_EQ_INT(c.bytes, 2 * ONE);
    CHECK(enc_cache_get(&c, (enc_key){2, 2}) == NULL);
    CHECK(enc_cache_get(&c, (enc_key){1, 1}) != NULL);
    const enc_entry *e3 = enc_cache_get(&c, (enc_key){3, 3});
    CHECK(e3 && memcmp(e3->rows, rows_of(30), ONE) == 0);
    CHECK_EQ_INT(c.queries, 6);
    CHECK_EQ_INT(c.hits, 3);
    /* too large for the whole budget: not kept, nothing evicted */
    float *big = calloc(3 * ROWS * WIDTH, sizeof *big);
    CHECK(enc_cache_put(&c, (enc_key){4, 4}, big, 3 * ROWS, WIDTH) == 0);
    CHECK(enc_cache_get(&c, (enc_key){4, 4}) == NULL);
    CHECK_EQ_INT(c.n_entries, 2);
    free(big);
    /* the same image again replaces its copy */
    CHECK(enc_cache_put(&c, (enc_key){3, 3}, rows_of(31), ROWS, WIDTH) == 0);
    CHECK_EQ_INT(c.n_entries, 2);
    CHECK_EQ_INT(c.bytes, 2 * ONE);
    enc_cache_free(&c);
    /* a zero budget keeps nothing */
    enc_cache_init(&c, 0);
    CHECK(enc_cache_put(&c, (enc_key){1, 1}, rows_of(1), ROWS, WIDTH) == 0);
    CHECK(enc_cache_get(&c, (enc_key){1, 1}) == NULL);
    enc_cache_free(&c);
}

int main(void) {
    RUN(test_lru_by_use_within_the_budget);
    return test_summary();
}
