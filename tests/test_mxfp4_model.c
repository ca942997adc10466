/*
 * test_mxfp4_model.c - a whole model with MXFP4 weights (GGUF type 39, as
 * gpt-oss and llama.cpp's MXFP4_MOE files hold them) against its F32 twin
 * holding exactly the dequantized values, and its batch invariance.
 *
 * A tiny llama whose every layer matrix and output head is MXFP4 (random
 * codes, scales near the size of trained weights); the twin is made with
 * ops_dequant_row, which tests/test_dequant.c checks bit for bit against the
 * OCP definition. The only difference left between the two models is the
 * activations: MXFP4 weights multiply activations quantized per 32-block to
 * 8 bits (Q8_0), as llama.cpp does, so each activation moves by up to
 * amax/254 of its block. Through this 2-layer model that moves the logits by
 * about 1% of the largest one (observed; printed). The tolerance, 5% of the
 * largest logit, is far below what a misread layout does: a twin whose
 * blocks are read with the nibbles interleaved (byte j holding elements 2j
 * and 2j + 1, the mistake ggml's split layout invites) lands far away, and
 * the test checks that it would fail. On each instruction set the thread
 * count does not change a byte, and sequences packed into one forward give
 * the bytes each gets alone.
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

/* rows x cols of MXFP4 blocks: random codes, scales such that the largest
 * code (6) is between amp / 2 and amp */
static uint8_t *random_mxfp4(int rows, int cols, float amp, size_t *nbytes) {
    size_t nb = (size_t)rows * cols / 32;
    uint8_t *b = malloc(nb * 17);
    REQUIRE(b);
    int e_top = 127 + (int)floor(log2(amp / 6.0));
    for (size_t k = 0; k < nb; k++) {
        b[k * 17] = (uint8_t)(e_top - (int)(qt_next() % 2));
        for (int j = 1; j < 17; j++) b[k * 17 + j] = (uint8_t)qt_next();
    }
    *nbytes = nb * 17;
    return b;
}

static const qt_format FORMAT = {
    .name = "MXFP4", .file = "mxfp4", .ggml_type = GW_GGML_MXFP4, .dtype = PDL_DTYPE_MXFP4,
    .random = random_mxfp4, .misread = qt_misread_interleaved, .misread_what = "nibbles interleaved",
    .misread_file = "interleaved",
};

static void test_mxfp4_model_matches_its_f32_twin(void) { qt_test_matches_its_f32_twin(&FORMAT); }
static void test_mxfp4_model_on_every_isa_is_batch_invariant(void) { qt_test_batch_invariant_on_every_isa(&FORMAT); }

int main(void) {
    RUN(test_mxfp4_model_matches_its_f32_twin);
    RUN(test_mxfp4_model_on_every_isa_is_batch_invariant);
    return test_summary();
}
