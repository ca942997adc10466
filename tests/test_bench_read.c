/*
 * test_bench_read.c - the loops `bench --roofline` measures read bandwidth
 * with read exactly the bytes they are given: each one's sum of 32-bit
 * words equals an independent sum over the same range (and the words after
 * the range, which are not zero, are not read), so a loop that skipped part
 * of the buffer, and so reported more bandwidth than the memory gives,
 * fails here.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cli/bench_roofline.h"
#include "kernels/cpu_features.h"
#include "test_util.h"

/* The reference: the words' sum mod 2^32, accumulated in 64 bits. */
static uint32_t words_sum(const uint8_t *p, size_t bytes) {
    uint64_t s = 0;
    for (size_t i = 0; i + 4 <= bytes; i += 4) {
        uint32_t w;
        memcpy(&w, p + i, 4);
        s += w;
    }
    return (uint32_t)s;
}

static void test_every_read_loop_sums_exactly_its_range(void) {
    size_t cap = (size_t)64 << 10;
    uint8_t *buf = aligned_alloc(64, cap + 4096);
    REQUIRE(buf != NULL);
    uint64_t x = 0x243f6a8885a308d3ull;
    for (size_t i = 0; i < cap + 4096; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        buf[i] = (uint8_t)(x >> 56) | 1; /* no zero bytes: every word read counts */
    }
    size_t lengths[] = {BENCH_READ_ALIGN, 3 * BENCH_READ_ALIGN, 17 * BENCH_READ_ALIGN, cap};
    size_t offsets[] = {0, 64, 4096 - 64}; /* 64-byte aligned starts */
    pdl_isa isa = cpu_isa_best();
    int vector_loops = 0;
    for (int m = 0; m < BENCH_READ_METHODS; m++) {
        if (!bench_read_method_available(m, isa)) continue;
        vector_loops += m != BENCH_READ_PORTABLE;
        for (size_t l = 0; l < sizeof lengths / sizeof lengths[0]; l++)
            for (size_t o = 0; o < sizeof offsets / sizeof offsets[0]; o++) {
                const uint8_t *p = buf + offsets[o];
                CHECK_MSG(bench_read_sum(m, p, lengths[l]) == words_sum(p, lengths[l]), "%s over %zu bytes at +%zu",
                          bench_read_method_name(m), lengths[l], offsets[o]);
            }
    }
    /* the widest loads the CPU's best family has are among those measured */
    if (isa != PDL_ISA_SCALAR) CHECK(vector_loops > 0);
    if (isa == PDL_ISA_AVX512) CHECK(bench_read_method_available(BENCH_READ_ZMM_NT, isa));
    CHECK(bench_read_method_available(BENCH_READ_PORTABLE, PDL_ISA_SCALAR));
    free(buf);
}

int main(void) {
    RUN(test_every_read_loop_sums_exactly_its_range);
    return test_summary();
}
