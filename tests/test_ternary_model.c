/*
 * test_ternary_model.c - whole models with TQ2_0 and with TQ1_0 weights
 * (GGUF types 35 and 34: super-blocks of 256 values -1, 0, 1 times a half
 * d; TQ2_0 as 2-bit codes, TQ1_0 as five trits a byte) against their F32
 * twins holding exactly the dequantized values, and their batch invariance.
 *
 * A tiny llama whose every layer matrix and output head is of the type
 * (random codes, d near the size of trained weights); the twin is made with
 * ops_dequant_row, which tests/test_dequant.c checks bit for bit against
 * the format's definition. The only difference left between the two models
 * is the activations: ternary weights multiply activations quantized per
 * 256-block to 8 bits (Q8_K, kernels/kquant.h). The tolerance, 5% of the
 * largest logit, is far below what a misread layout does: a TQ2_0 twin
 * reading the codes in byte order, or a TQ1_0 twin reading a byte's trits
 * last first, lands far away, and the test checks that it would fail. No
 * matrix is expanded to F32 (both types have their own dot kernels). On
 * each instruction set, with weight panels and with the row-major tiles,
 * the thread count does not change a byte, and sequences packed into one
 * forward give the bytes each gets alone.
 */

#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu_ops.h"
#include "kernels/fp16.h"
#include "kernels/kquant.h"
#include "support/gguf_writer.h"
#include "support/quant_twin.h"
#include "test_util.h"

/* A random half d with |value| = d about amp. */
static void put_d(uint8_t *at, float amp) {
    uint16_t d = fp16_f32_to_f16(amp * (0.5f + qt_urand()));
    memcpy(at, &d, 2);
}

/* rows x cols of TQ2_0 blocks: every code 0..2 (value -1..1), at random */
static uint8_t *random_tq2_0(int rows, int cols, float amp, size_t *nbytes) {
    size_t nb = (size_t)rows * cols / 256;
    uint8_t *b = malloc(nb * 66);
    REQUIRE(b);
    for (size_t k = 0; k < nb; k++) {
        for (int i = 0; i < 64; i++) {
            uint8_t v = 0;
            for (int l = 0; l < 4; l++) v |= (uint8_t)(qt_next() % 3 << (2 * l));
            b[k * 66 + i] = v;
        }
        put_d(b + k * 66 + 64, amp);
    }
    *nbytes = nb * 66;
    return b;
}

/* rows x cols of TQ1_0 blocks: each byte the base-3 fraction of random
 * trits rounded up to 8 bits, as writers make it (the last 4 bytes hold 4
 * trits and a zero fifth) */
static uint8_t *random_tq1_0(int rows, int cols, float amp, size_t *nbytes) {
    size_t nb = (size_t)rows * cols / 256;
    uint8_t *b = malloc(nb * 54);
    REQUIRE(b);
    for (size_t k = 0; k < nb; k++) {
        for (int i = 0; i < 52; i++) {
            int q = 0;
            for (int n = 0; n < 5; n++) q = 3 * q + (i < 48 || n < 4 ? (int)(qt_next() % 3) : 0);
            b[k * 54 + i] = (uint8_t)((q * 256 + 242) / 243);
        }
        put_d(b + k * 54 + 52, amp);
    }
    *nbytes = nb * 54;
    return b;
}

/* TQ2_0 codes read in byte order: element 4 i + l from bits 2l of byte i */
static void tq2_0_byte_order(const pdl_tensor *view, uint8_t *blocks, int rows, int cols, float *f) {
    (void)view;
    for (int r = 0; r < rows; r++)
        for (int k = 0; k < cols / 256; k++) {
            const uint8_t *blk = blocks + ((size_t)r * (cols / 256) + k) * 66;
            uint16_t h;
            memcpy(&h, blk + 64, 2);
            float d = fp16_f16_to_f32(h);
            for (int i = 0; i < 64; i++)
                for (int l = 0; l < 4; l++)
                    f[(size_t)r * cols + 256 * k + 4 * i + l] = (float)(((blk[i] >> (2 * l)) & 3) - 1) * d;
        }
}

/* TQ1_0 bytes 0..47 read with their five trits last first (trit 4 - n
 * where the format has trit n) */
static void tq1_0_trits_reversed(const pdl_tensor *view, uint8_t *blocks, int rows, int cols, float *f) {
    (void)view;
    for (int r = 0; r < rows; r++)
        for (int k = 0; k < cols / 256; k++) {
            const uint8_t *blk = blocks + ((size_t)r * (cols / 256) + k) * 54;
            uint16_t h;
            memcpy(&h, blk + 52, 2);
            float d = fp16_f16_to_f32(h);
            float *fo = f + (size_t)r * cols + 256 * k;
            for (int n = 0; n < 5; n++) {
                for (int m = 0; m < 32; m++) fo[32 * n + m] = (float)(kquant_tq1_0_trit(blk[m], 4 - n) - 1) * d;
                for (int m = 0; m < 16; m++)
                    fo[160 + 16 * n + m] = (float)(kquant_tq1_0_trit(blk[32 + m], 4 - n) - 1) * d;
            }
        }
}

static const qt_format TQ2_0 = {
    .name = "TQ2_0", .file = "tq2_0", .ggml_type = GW_GGML_TQ2_0, .dtype = PDL_DTYPE_TQ2_0,
    .random = random_tq2_0, .misread = tq2_0_byte_order, .misread_what = "codes read in byte order",
    .misread_file = "byte-order",
};

static const qt_format TQ1_0 = {
    .name = "TQ1_0", .file = "tq1_0", .ggml_type = GW_GGML_TQ1_0, .dtype = PDL_DTYPE_TQ1_0,
    .random = random_tq1_0, .misread = tq1_0_trits_reversed, .misread_what = "trits read last first",
    .misread_file = "reversed",
};

static void test_tq2_0_model_matches_its_f32_twin(void) { qt_test_matches_its_f32_twin(&TQ2_0); }
static void test_tq2_0_model_on_every_isa_is_batch_invariant(void) { qt_test_batch_invariant_on_every_isa(&TQ2_0); }
static void test_tq1_0_model_matches_its_f32_twin(void) { qt_test_matches_its_f32_twin(&TQ1_0); }
static void test_tq1_0_model_on_every_isa_is_batch_invariant(void) { qt_test_batch_invariant_on_every_isa(&TQ1_0); }

int main(void) {
    RUN(test_tq2_0_model_matches_its_f32_twin);
    RUN(test_tq2_0_model_on_every_isa_is_batch_invariant);
    RUN(test_tq1_0_model_matches_its_f32_twin);
    RUN(test_tq1_0_model_on_every_isa_is_batch_invariant);
    return test_summary();
}
