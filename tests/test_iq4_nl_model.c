/*
 * test_iq4_nl_model.c - a whole model with IQ4_NL weights (GGUF type 20:
 * Q4_0's block, its 4-bit codes indexing 16 non-linear int8 values) against
 * its F32 twin holding exactly the dequantized values, and its batch
 * invariance.
 *
 * A tiny llama whose every layer matrix and output head is IQ4_NL (random
 * codes, halves near the size of trained weights); the twin is made with
 * ops_dequant_row, which tests/test_dequant.c checks bit for bit against
 * the format's definition. The only difference left between the two models
 * is the activations: IQ4_NL weights multiply activations quantized per
 * 32-block to 8 bits (Q8_0), as llama.cpp does, so each activation moves
 * by up to amax/254 of its block. Through this 2-layer model that moves the
 * logits by about 1% of the largest one (observed; printed). The
 * tolerance, 5% of the largest logit, is far below what a misread layout
 * does: a twin whose blocks are read with the nibbles interleaved (byte j
 * holding elements 2j and 2j + 1) lands far away, and the test checks that
 * it would fail. No matrix is expanded to F32 (IQ4_NL has its own dot
 * kernels). On each instruction set the thread count does not change a
 * byte, and sequences packed into one forward give the bytes each gets
 * alone.
 */

#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/fp16.h"
#include "support/gguf_writer.h"
#include "support/quant_twin.h"
#include "test_util.h"

/* rows x cols of IQ4_NL blocks: random codes, halves d such that the
 * largest magnitude (127 d) is between amp / 2 and amp */
static uint8_t *random_iq4_nl(int rows, int cols, float amp, size_t *nbytes) {
    size_t nb = (size_t)rows * cols / 32;
    uint8_t *b = malloc(nb * 18);
    REQUIRE(b);
    for (size_t k = 0; k < nb; k++) {
        uint16_t d = fp16_f32_to_f16(amp / 127.0f * (0.5f + 0.5f * qt_urand()));
        memcpy(b + k * 18, &d, 2);
        for (int j = 2; j < 18; j++) b[k * 18 + j] = (uint8_t)qt_next();
    }
    *nbytes = nb * 18;
    return b;
}

static const qt_format FORMAT = {
    .name = "IQ4_NL", .file = "iq4_nl", .ggml_type = GW_GGML_IQ4_NL, .dtype = PDL_DTYPE_IQ4_NL,
    .random = random_iq4_nl, .misread = qt_misread_interleaved, .misread_what = "nibbles interleaved",
    .misread_file = "interleaved",
};

static void test_iq4_nl_model_matches_its_f32_twin(void) { qt_test_matches_its_f32_twin(&FORMAT); }
static void test_iq4_nl_model_on_every_isa_is_batch_invariant(void) { qt_test_batch_invariant_on_every_isa(&FORMAT); }

int main(void) {
    RUN(test_iq4_nl_model_matches_its_f32_twin);
    RUN(test_iq4_nl_model_on_every_isa_is_batch_invariant);
    return test_summary();
}
