/*
 * test_q5_k_model.c - a whole model with Q5_K weights (GGUF type 13: super-
 * blocks of 256, Q4_K's six-bit scales and mins with a fifth bit per
 * value in 32 bytes qh) against its F32 twin holding exactly the
 * dequantized values, and its batch invariance.
 *
 * A tiny llama whose every layer matrix and output head is Q5_K (random
 * bytes, halves d and dmin near the size of trained weights); the twin is
 * made with ops_dequant_row, which tests/test_dequant.c checks bit for bit
 * against the format's definition. The only difference left between the
 * two models is the activations: Q5_K weights multiply activations
 * quantized per 256-block to 8 bits (Q8_K), as llama.cpp does. The
 * tolerance, 5% of the largest logit, is far below what a misread layout
 * does: a twin whose fifth bits are taken in the wrong order (sub-block j
 * from bit 7 - j of qh) lands far away, and the test checks that it would
 * fail. No matrix is expanded to F32 (Q5_K has its own dot kernels). On
 * each instruction set the thread count does not change a byte, and
 * sequences packed into one forward give the bytes each gets alone.
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

/* rows x cols of Q5_K blocks: random bytes, then halves d and dmin such
 * that the largest magnitude (d * 63 * 31, dmin * 63) is about amp */
static uint8_t *random_q5_k(int rows, int cols, float amp, size_t *nbytes) {
    size_t nb = (size_t)rows * cols / 256;
    uint8_t *b = malloc(nb * 176);
    REQUIRE(b);
    for (size_t i = 0; i < nb * 176; i++) b[i] = (uint8_t)qt_next();
    for (size_t k = 0; k < nb; k++) {
        uint16_t d = fp16_f32_to_f16(amp * (0.5f + qt_urand()) / (63.0f * 31.0f / 2.0f));
        uint16_t m = fp16_f32_to_f16(amp * (0.5f + qt_urand()) / 63.0f);
        memcpy(b + k * 176, &d, 2), memcpy(b + k * 176 + 2, &m, 2);
    }
    *nbytes = nb * 176;
    return b;
}


/* the fifth bits in reverse order: sub-block j's from bit 7 - j of qh */
static void reversed_fifth_bits(const pdl_tensor *view, uint8_t *blocks, int rows, int cols, float *f) {
    for (size_t k = 0; k < view->nbytes / 176; k++)
        for (int l = 0; l < 32; l++) {
            uint8_t v = blocks[k * 176 + 16 + l], rv = 0;
            for (int j = 0; j < 8; j++) rv |= (uint8_t)(((v >> j) & 1) << (7 - j));
            blocks[k * 176 + 16 + l] = rv;
        }
    for (int r = 0; r < rows; r++) ops_dequant_row(view, r, f + (size_t)r * cols, cols);
}

static const qt_format FORMAT = {
    .name = "Q5_K", .file = "q5_k", .ggml_type = GW_GGML_Q5_K, .dtype = PDL_DTYPE_Q5_K,
    .random = random_q5_k, .misread = reversed_fifth_bits, .misread_what = "fifth bits reversed",
    .misread_file = "reversed",
};

static void test_q5_k_model_matches_its_f32_twin(void) { qt_test_matches_its_f32_twin(&FORMAT); }
static void test_q5_k_model_on_every_isa_is_batch_invariant(void) { qt_test_batch_invariant_on_every_isa(&FORMAT); }

int main(void) {
    RUN(test_q5_k_model_matches_its_f32_twin);
    RUN(test_q5_k_model_on_every_isa_is_batch_invariant);
    return test_summary();
}
