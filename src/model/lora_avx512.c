/*
 * lora_avx512.c - lora_row_body.h built for AVX-512 (CMakeLists.txt gives
 * the flags): the portable operations on 16-lane vectors.
 */
#define LORA_ROW_NAME lora_row_avx512
#include "model/lora_row_body.h"
