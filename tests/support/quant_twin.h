/*
 * quant_twin.h - the whole-model test of a quantized weight type, shared by
 * test_mxfp4_model.c, test_iq4_nl_model.c, test_q5_k_model.c,
 * test_q3_k_model.c, test_q2_k_model.c, test_iq4_xs_model.c,
 * test_ternary_model.c and test_legacy_quant_model.c: a tiny
 * llama whose every layer matrix and output head is of the type (random
 * blocks from the test's generator) against its F32 twin holding exactly the
 * dequantized values (ops_dequant_row, which test_dequant.c checks against
 * each format's definition), and a twin of a reader that misreads the
 * layout, which must land far outside the tolerance (5% of the largest
 * logit) so that the comparison can fail; no matrix of the type expanded to
 * F32; and on every instruction set, with weight panels and with the
 * row-major kernels, 1 and 2 threads giving the same bytes and sequences
 * packed into one forward giving each the bytes it gets alone.
 *
 * What it is not for: library code (it REQUIREs and aborts).
 */
#ifndef PDL_TEST_QUANT_TWIN_H
#define PDL_TEST_QUANT_TWIN_H

#include <stddef.h>
#include <stdint.h>

#include "format/tensor.h"

typedef struct qt_format {
    const char *name;       /* as pdl_model_info.weight_types and the type mix name it: "Q5_K" */
    const char *file;       /* file-name stem: "q5_k" */
    uint32_t ggml_type;     /* GW_GGML_* */
    pdl_dtype dtype;
    /* rows x cols of random blocks (malloc'ed, *nbytes long) whose largest
     * magnitude is about amp, drawn with qt_next / qt_urand */
    uint8_t *(*random)(int rows, int cols, float amp, size_t *nbytes);
    /* f holds the exact expansion of view (rows x cols; view->data is the
     * blocks, which it may change): turns it into what a reader that
     * misreads the layout would get */
    void (*misread)(const pdl_tensor *view, uint8_t *blocks, int rows, int cols, float *f);
    const char *misread_what; /* "nibbles interleaved" */
    const char *misread_file; /* file-name suffix of that twin: "interleaved" */
} qt_format;

/* The generator the models are drawn with (reset for every model, so the
 * same model every time). */
uint32_t qt_next(void);
float qt_urand(void); /* [0, 1) */

/* A misreading for 4-bit blocks of 32 with ggml's split nibbles (element j
 * low, j + 16 high): byte j read as elements 2j and 2j + 1. */
void qt_misread_interleaved(const pdl_tensor *view, uint8_t *blocks, int rows, int cols, float *f);

/* The two tests. */
void qt_test_matches_its_f32_twin(const qt_format *fmt);
void qt_test_batch_invariant_on_every_isa(const qt_format *fmt);

#endif
