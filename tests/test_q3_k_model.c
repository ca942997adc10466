/*
 * test_q3_k_model.c - a whole model with Q3_K weights (GGUF type 11: super-
 * blocks of 256, 2-bit values with a third bit in 32 bytes hmask, 16 six-
 * bit scales minus 32) against its F32 twin holding exactly the
 * dequantized values, and its batch invariance.
 *
 * A tiny llama whose every layer matrix and output head is Q3_K (random
 * bytes, half d near the size of trained weights); the twin is made with
 * ops_dequant_row, which tests/test_dequant.c checks bit for bit against
 * the format's definition. The only difference left between the two
 * models is the activations: Q3_K weights multiply activations quantized
 * per 256-block to 8 bits (Q8_K), as llama.cpp does. The tolerance, 5% of
 * the largest logit, is far below what a misread layout does: a twin whose
 * hmask bits are inverted (a set bit read as "minus 4") lands far away,
 * and the test checks that it would fail. No matrix is expanded to F32
 * (Q3_K has its own dot kernels). On each instruction set the thread
 * count does not change a byte, and sequences packed into one forward
 * give the bytes each gets alone.
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

/* rows x cols of Q3_K blocks: random bytes, then half d such that the
 * largest magnitude (d * 32 * 4) is about amp */
static uint8_t *random_q3_k(int rows, int cols, float amp, size_t *nbytes) {
    size_t nb = (size_t)rows * cols / 256;
    uint8_t *b = malloc(nb * 110);
    REQUIRE(b);
    for (size_t i = 0; i < nb * 110; i++) b[i] = (uint8_t)qt_next();
    for (size_t k = 0; k < nb; k++) {
        uint16_t d = fp16_f32_to_f16(amp * (0.5f + qt_urand()) / (32.0f * 4.0f / 2.0f));
        memcpy(b + k * 110 + 108, &d, 2);
    }
    *nbytes = nb * 110;
    return b;
}

/* the hmask bits inverted: a set bit read as "minus 4", a clear one not */
static void inverted_hmask(const pdl_tensor *view, uint8_t *blocks, int rows, int cols, float *f) {
    for (size_t k = 0; k < view->nbytes / 110; k++)
        for (int l = 0; l < 32; l++) blocks[k * 110 + l] ^= 0xFF;
    for (int r = 0; r < rows; r++) ops_dequant_row(view, r, f + (size_t)r * cols, cols);
}

static const qt_format FORMAT = {
    .name = "Q3_K", .file = "q3_k", .ggml_type = GW_GGML_Q3_K, .dtype = PDL_DTYPE_Q3_K,
    .random = random_q3_k, .misread = inverted_hmask, .misread_what = "hmask inverted",
    .misread_file = "inverted",
};

static void test_q3_k_model_matches_its_f32_twin(void) { qt_test_matches_its_f32_twin(&FORMAT); }
static void test_q3_k_model_on_every_isa_is_batch_invariant(void) { qt_test_batch_invariant_on_every_isa(&FORMAT); }

int main(void) {
    RUN(test_q3_k_model_matches_its_f32_twin);
    RUN(test_q3_k_model_on_every_isa_is_batch_invariant);
    return test_summary();
}
