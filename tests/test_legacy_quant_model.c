/*
 * test_legacy_quant_model.c - whole models with GGUF's legacy Q5_0 (type
 * 6), Q4_1 (type 3) and Q5_1 (type 7) weights against their F32 twins
 * holding exactly the dequantized values, and their batch invariance.
 *
 * For each type a tiny llama whose every layer matrix and output head is of
 * the type (random codes and fifth bits, halves d and m near the size of
 * trained weights); the twin is made with ops_dequant_row, which
 * tests/test_dequant.c checks against the format's definition. The only
 * difference left between the two models is the activations: these weights
 * multiply activations quantized per 32-block to 8 bits (Q8_0), as
 * llama.cpp does, which moves the logits by about 1% of the largest one
 * (printed). The tolerance, 5% of the largest logit, is far below what a
 * misread layout does: Q5_0 and Q5_1 twins with their fifth bits reversed
 * (element k's from bit 31 - k of qh), a Q4_1 twin with its min ignored,
 * land far away, and the test checks that they would fail. No matrix is
 * expanded to F32 (the types have their own dot kernels). On each
 * instruction set the thread count does not change a byte, and sequences
 * packed into one forward give the bytes each gets alone.
 */

#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu_ops.h"
#include "kernels/fp16.h"
#include "support/gguf_writer.h"
#include "support/quant_twin.h"
#include "test_util.h"

/* rows x cols of blocks of bb bytes: random bytes, then d (and m) such
 * that the values span about [-amp, amp]: Q5_0 d (code - 16) with d about
 * amp / 16; Q4_1 / Q5_1 d code + m with m about -amp and d 2 |m| / (top
 * code). */
static uint8_t *random_legacy(pdl_dtype dt, int rows, int cols, float amp, size_t *nbytes) {
    size_t bb = dt == PDL_DTYPE_Q5_0 ? 22 : dt == PDL_DTYPE_Q4_1 ? 20 : 24;
    size_t nb = (size_t)rows * cols / 32;
    uint8_t *b = malloc(nb * bb);
    REQUIRE(b);
    for (size_t i = 0; i < nb * bb; i++) b[i] = (uint8_t)qt_next();
    for (size_t k = 0; k < nb; k++) {
        float a = amp * (0.5f + 0.5f * qt_urand());
        if (dt == PDL_DTYPE_Q5_0) {
            uint16_t d = fp16_f32_to_f16(a / 16.0f);
            memcpy(b + k * bb, &d, 2);
        } else {
            uint16_t d = fp16_f32_to_f16(2.0f * a / (dt == PDL_DTYPE_Q4_1 ? 15.0f : 31.0f)), m = fp16_f32_to_f16(-a);
            memcpy(b + k * bb, &d, 2), memcpy(b + k * bb + 2, &m, 2);
        }
    }
    *nbytes = nb * bb;
    return b;
}

static uint8_t *random_q5_0(int rows, int cols, float amp, size_t *nbytes) {
    return random_legacy(PDL_DTYPE_Q5_0, rows, cols, amp, nbytes);
}
static uint8_t *random_q4_1(int rows, int cols, float amp, size_t *nbytes) {
    return random_legacy(PDL_DTYPE_Q4_1, rows, cols, amp, nbytes);
}
static uint8_t *random_q5_1(int rows, int cols, float amp, size_t *nbytes) {
    return random_legacy(PDL_DTYPE_Q5_1, rows, cols, amp, nbytes);
}

/* the fifth bits in reverse order: element k's from bit 31 - k of qh (at
 * byte qh_at of each block of bb bytes) */
static void reverse_qh(const pdl_tensor *view, uint8_t *blocks, int rows, int cols, float *f, size_t bb,
                       size_t qh_at) {
    for (size_t k = 0; k < view->nbytes / bb; k++) {
        uint32_t qh, rv = 0;
        memcpy(&qh, blocks + k * bb + qh_at, 4);
        for (int j = 0; j < 32; j++) rv |= ((qh >> j) & 1u) << (31 - j);
        memcpy(blocks + k * bb + qh_at, &rv, 4);
    }
    for (int r = 0; r < rows; r++) ops_dequant_row(view, r, f + (size_t)r * cols, cols);
}

static void reversed_q5_0(const pdl_tensor *view, uint8_t *blocks, int rows, int cols, float *f) {
    reverse_qh(view, blocks, rows, cols, f, 22, 2);
}
static void reversed_q5_1(const pdl_tensor *view, uint8_t *blocks, int rows, int cols, float *f) {
    reverse_qh(view, blocks, rows, cols, f, 24, 4);
}

/* the min ignored: m read as 0 */
static void min_ignored_q4_1(const pdl_tensor *view, uint8_t *blocks, int rows, int cols, float *f) {
    for (size_t k = 0; k < view->nbytes / 20; k++) memset(blocks + k * 20 + 2, 0, 2);
    for (int r = 0; r < rows; r++) ops_dequant_row(view, r, f + (size_t)r * cols, cols);
}

static const qt_format Q5_0 = {
    .name = "Q5_0", .file = "q5_0", .ggml_type = GW_GGML_Q5_0, .dtype = PDL_DTYPE_Q5_0,
    .random = random_q5_0, .misread = reversed_q5_0, .misread_what = "fifth bits reversed",
    .misread_file = "reversed",
};
static const qt_format Q4_1 = {
    .name = "Q4_1", .file = "q4_1", .ggml_type = GW_GGML_Q4_1, .dtype = PDL_DTYPE_Q4_1,
    .random = random_q4_1, .misread = min_ignored_q4_1, .misread_what = "min ignored",
    .misread_file = "nomin",
};
static const qt_format Q5_1 = {
    .name = "Q5_1", .file = "q5_1", .ggml_type = GW_GGML_Q5_1, .dtype = PDL_DTYPE_Q5_1,
    .random = random_q5_1, .misread = reversed_q5_1, .misread_what = "fifth bits reversed",
    .misread_file = "reversed",
};

static void test_q5_0_model_matches_its_f32_twin(void) { qt_test_matches_its_f32_twin(&Q5_0); }
static void test_q4_1_model_matches_its_f32_twin(void) { qt_test_matches_its_f32_twin(&Q4_1); }
static void test_q5_1_model_matches_its_f32_twin(void) { qt_test_matches_its_f32_twin(&Q5_1); }
static void test_q5_0_model_on_every_isa_is_batch_invariant(void) { qt_test_batch_invariant_on_every_isa(&Q5_0); }
static void test_q4_1_model_on_every_isa_is_batch_invariant(void) { qt_test_batch_invariant_on_every_isa(&Q4_1); }
static void test_q5_1_model_on_every_isa_is_batch_invariant(void) { qt_test_batch_invariant_on_every_isa(&Q5_1); }

int main(void) {
    RUN(test_q5_0_model_matches_its_f32_twin);
    RUN(test_q4_1_model_matches_its_f32_twin);
    RUN(test_q5_1_model_matches_its_f32_twin);
    RUN(test_q5_0_model_on_every_isa_is_batch_invariant);
    RUN(test_q4_1_model_on_every_isa_is_batch_invariant);
    RUN(test_q5_1_model_on_every_isa_is_batch_invariant);
    return test_summary();
}
