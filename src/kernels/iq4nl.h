/*
 * iq4nl.h - the 16 values behind GGUF's IQ4_NL (and IQ4_XS) codes
 * (format/tensor.h's PDL_DTYPE_IQ4_NL): ggml's kvalues_iq4nl, in the form
 * every IQ4_NL kernel here multiplies them.
 *
 * An IQ4_NL block is Q4_0's layout (an f16 scale d, then 16 bytes: byte j
 * holds code j in the low nibble and code j + 16 in the high); element k is
 * d * iq4nl_values[code k]. The values are int8, so an integer dot product
 * with Q8_0 activations is exact, as for Q4_0.
 */
#ifndef PDL_KERNELS_IQ4NL_H
#define PDL_KERNELS_IQ4NL_H

#include <stdint.h>

/* The value of each 4-bit code (ggml-common.h's kvalues_iq4nl). */
static const int8_t iq4nl_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

/* The same plus 128 (1..241): the unsigned bytes VPDPBUSD multiplies (u8 x
 * s8; the kernels take 128 x the activation sum back off). VPMADDUBSW
 * cannot take them (241 x 127 x 2 overflows its int16 pairs): the AVX2
 * kernels take the sign trick instead (|value| times x with the value's
 * sign, as Q8_0's). */
#define PDL_IQ4NL_OFFSET 128

#endif
