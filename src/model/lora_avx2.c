/*
 * lora_avx2.c - lora_row_body.h built for AVX2 (CMakeLists.txt gives the
 * flags): the portable operations on 8-lane vectors.
 */
#define LORA_ROW_NAME lora_row_avx2
#include "model/lora_row_body.h"
