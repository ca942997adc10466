/*
 * test_iq4_xs_model.c - a whole model with IQ4_XS weights (GGUF type 23:
 * super-blocks of 256, an f16 d and eight 6-bit sub-block scales, 4-bit
 * codes indexing IQ4_NL's 16 non-linear int8 values) against its F32 twin
 * holding exactly the dequantized values, and its batch invariance.
 *
 * A tiny llama whose every layer matrix and output head is IQ4_XS (random
 * bytes, halves d near the size of trained weights); the twin is made with
 * ops_dequant_row, which tests/test_dequant.c checks bit for bit against
 * the format's definition. The only difference left between the two models
 * is the activations: IQ4_XS weights multiply activations quantized per
 * 256-block to 8 bits (Q8_K, kernels/kquant.h), as llama.cpp does. The
 * tolerance, 5% of the largest logit, is far below what a misread layout
 * does: a twin whose 4-bit scale halves are read from the wrong nibble of
 * scales_l (sub-block 2i's from the high one) lands far away, and the test
 * checks that it would fail. No matrix is expanded to F32 (IQ4_XS has its
 * own dot kernels). On each instruction set, with weight panels and with
 * the row-major kernels, the thread count does not change a byte, and
 * sequences packed into one forward give the bytes each gets alone
 * (tests/support/quant_twin.c).
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

/* rows x cols of IQ4_XS blocks: random bytes, then halves d such that the
 * largest magnitude (d * 32 * 127) is about amp */
static uint8_t *random_iq4_xs(int rows, int cols, float amp, size_t *nbytes) {
    size_t nb = (size_t)rows * cols / 256;
    uint8_t *b = malloc(nb * 136);
    REQUIRE(b);
    for (size_t i = 0; i < nb * 136; i++) b[i] = (uint8_t)qt_next();
    for (size_t k = 0; k < nb; k++) {
        uint16_t d = fp16_f32_to_f16(amp * (0.5f + qt_urand()) / (32.0f * 127.0f / 2.0f));
        memcpy(b + k * 136, &d, 2);
    }
    *nbytes = nb * 136;
    return b;
}

/* scales_l's nibbles swapped: sub-block 2i's low 4 scale bits from the high
 * nibble of byte i, 2i + 1's from the low */
static void swapped_scale_nibbles(const pdl_tensor *view, uint8_t *blocks, int rows, int cols, float *f) {
    for (size_t k = 0; k < view->nbytes / 136; k++)
        for (int i = 0; i < 4; i++) {
            uint8_t v = blocks[k * 136 + 4 + i];
            blocks[k * 136 + 4 + i] = (uint8_t)(v >> 4 | v << 4);
        }
    for (int r = 0; r < rows; r++) ops_dequant_row(view, r, f + (size_t)r * cols, cols);
}

static const qt_format FORMAT = {
    .name = "IQ4_XS", .file = "iq4_xs", .ggml_type = GW_GGML_IQ4_XS, .dtype = PDL_DTYPE_IQ4_XS,
    .random = random_iq4_xs, .misread = swapped_scale_nibbles, .misread_what = "scale nibbles swapped",
    .misread_file = "swapped",
};

static void test_iq4_xs_model_matches_its_f32_twin(void) { qt_test_matches_its_f32_twin(&FORMAT); }
static void test_iq4_xs_model_on_every_isa_is_batch_invariant(void) { qt_test_batch_invariant_on_every_isa(&FORMAT); }

int main(void) {
    RUN(test_iq4_xs_model_matches_its_f32_twin);
    RUN(test_iq4_xs_model_on_every_isa_is_batch_invariant);
    return test_summary();
}
