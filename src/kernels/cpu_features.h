/*
 * cpu_features.h - which instruction sets this CPU has, and which kernel
 * family the process uses (chosen once, at run time).
 *
 * PAGEDLM_ISA=scalar|avx2|avx512 forces a family (for tests and A/B
 * measurements); a family the CPU lacks falls back to the best it has.
 */
#ifndef PDL_KERNELS_CPU_FEATURES_H
#define PDL_KERNELS_CPU_FEATURES_H

#include <stdbool.h>

typedef enum pdl_isa {
    PDL_ISA_SCALAR = 0,  /* portable C, the reference */
    PDL_ISA_AVX2,        /* AVX2 + FMA + F16C */
    PDL_ISA_AVX512,      /* AVX-512 F/BW/VL + F16C */
} pdl_isa;

typedef struct pdl_cpu_features {
    bool avx2, fma, f16c, avx512f, avx512bw, avx512vl, avx512bf16, avx512vnni;
} pdl_cpu_features;

const pdl_cpu_features *pdl_cpu_features_get(void);
/* The best family the CPU supports. */
pdl_isa pdl_isa_best(void);
/* The family in effect (PAGEDLM_ISA or the best). */
pdl_isa pdl_isa_active(void);
/* Overrides the family (tests); returns the one actually set. */
pdl_isa pdl_isa_set(pdl_isa isa);
const char *pdl_isa_name(pdl_isa isa);

#endif
