/*
 * fp16.c - the half -> float lookup table.
 */
#include "kernels/fp16.h"

#include <pthread.h>

float fp16_f16_table[65536];
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

static void fill_table(void) {
    for (uint32_t i = 0; i < 65536; i++) fp16_f16_table[i] = fp16_f16_to_f32_exact((uint16_t)i);
}

void fp16_init(void) { pthread_once(&table_once, fill_table); }
