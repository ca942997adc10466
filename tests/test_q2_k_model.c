/*
 * test_q2_k_model.c - a whole model with Q2_K weights (GGUF type 10: super-
 * blocks of 256, 2-bit values, 16 bytes of four-bit scales and mins, halves
 * d and dmin) against its F32 twin holding exactly the dequantized values,
 * and its batch invariance.
 *
 * A tiny llama whose every layer matrix and output head is Q2_K (random
 * bytes, halves d and dmin near the size of trained weights); the twin is
 * made with ops_dequant_row, which tests/test_dequant.c checks bit for bit
 * against the format's definition. The only difference left between the
 * two models is the activations: Q2_K weights multiply activations
 * quantized per 256-block to 8 bits (Q8_K), as llama.cpp does. The
 * tolerance, 5% of the largest logit, is far below what a misread layout
 * does: a twin whose scale and min nibbles are swapped lands far away, and
 * the test checks that it would fail. No matrix is expanded to F32 (Q2_K
 * has its own dot kernels). On each instruction set the thread count does
 * not change a byte, and sequences packed into one forward give the bytes
 * each gets alone.
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

/* rows x cols of Q2_K blocks: random bytes, then halves d and dmin such
 * that the largest magnitudes (d * 15 * 3, dmin * 15) are about amp */
static uint8_t *random_q2_k(int rows, int cols, float amp, size_t *nbytes) {
    size_t nb = (size_t)rows * cols / 256;
    uint8_t *b = malloc(nb * 84);
    REQUIRE(b);
    for (size_t i = 0; i < nb * 84; i++) b[i] = (uint8_t)qt_next();
    for (size_t k = 0; k < nb; k++) {
        uint16_t d = fp16_f32_to_f16(amp * (0.5f + qt_urand()) / (15.0f * 3.0f / 2.0f));
        uint16_t m = fp16_f32_to_f16(amp * (0.5f + qt_urand()) / 15.0f);
        memcpy(b + k * 84 + 80, &d, 2), memcpy(b + k * 84 + 82, &m, 2);
    }
    *nbytes = nb * 84;
    return b;
}

/* the scale and min nibbles swapped */
static void swapped_scales(const pdl_tensor *view, uint8_t *blocks, int rows, int cols, float *f) {
    for (size_t k = 0; k < view->nbytes / 84; k++)
        for (int g = 0; g < 16; g++) blocks[k * 84 + g] = (uint8_t)(blocks[k * 84 + g] << 4 | blocks[k * 84 + g] >> 4);
    for (int r = 0; r < rows; r++) ops_dequant_row(view, r, f + (size_t)r * cols, cols);
}

static const qt_format FORMAT = {
    .name = "Q2_K", .file = "q2_k", .ggml_type = GW_GGML_Q2_K, .dtype = PDL_DTYPE_Q2_K,
    .random = random_q2_k, .misread = swapped_scales, .misread_what = "scales and mins swapped",
    .misread_file = "swapped",
};

static void test_q2_k_model_matches_its_f32_twin(void) { qt_test_matches_its_f32_twin(&FORMAT); }
static void test_q2_k_model_on_every_isa_is_batch_invariant(void) { qt_test_batch_invariant_on_every_isa(&FORMAT); }

int main(void) {
    RUN(test_q2_k_model_matches_its_f32_twin);
    RUN(test_q2_k_model_on_every_isa_is_batch_invariant);
    return test_summary();
}
