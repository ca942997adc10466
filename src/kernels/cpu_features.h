/*
 * cpu_features.h - which instruction sets this CPU has, and which kernel
 * family the process uses (chosen once, at run time).
 *
 * pdl_set_kernels (pagedlm.h) forces a family (the programs pass
 * PAGEDLM_ISA=scalar|avx2|avx512|neon, for tests and A/B measurements); a
 * family the CPU lacks, or an unknown name, falls back to the best it has
 * (the error says so; the library itself reads no environment).
 * The x86 families (AVX2, AVX-512) and NEON never meet in one process:
 * loops over the families ask cpu_isa_supported, not the enum's order.
 */
#ifndef PDL_KERNELS_CPU_FEATURES_H
#define PDL_KERNELS_CPU_FEATURES_H

#include <stdbool.h>

#include "pagedlm.h"

typedef enum pdl_isa {
    PDL_ISA_SCALAR = 0,  /* portable C, the reference */
    PDL_ISA_AVX2,        /* AVX2 + FMA + F16C */
    PDL_ISA_AVX512,      /* AVX-512 F/BW/VL + F16C */
    PDL_ISA_NEON,        /* aarch64 Advanced SIMD (every aarch64 CPU has it) */
    PDL_ISA_COUNT
} pdl_isa;

typedef struct pdl_cpu_features {
    bool avx2, fma, f16c, avx512f, avx512bw, avx512vl, avx512bf16, avx512vnni;
    bool avxvnni; /* AVX-VNNI: 256-bit VPDPBUSD in VEX form (CPUID 7.1 EAX bit 4), used by the AVX2 family */
    bool amx_bf16; /* AMX-TILE and AMX-BF16 (CPUID 7.0 EDX bits 24, 22), their state enabled in XCR0 */
    bool neon, neon_dotprod; /* aarch64: Advanced SIMD; SDOT/UDOT (Armv8.2 DotProd) */
} pdl_cpu_features;

const pdl_cpu_features *cpu_features_get(void);
/* Whether this process may use AMX tiles: the CPU has AMX-BF16 and Linux
 * granted the tile data state (arch_prctl ARCH_REQ_XCOMP_PERM, asked once,
 * for every thread of the process). */
bool cpu_amx_bf16_ready(void);
/* The best family the CPU supports. */
pdl_isa cpu_isa_best(void);
/* Whether this CPU (and this build) can run the family. */
bool cpu_isa_supported(pdl_isa isa);
/* The family in effect (pdl_set_kernels' or the best). */
pdl_isa cpu_isa_active(void);
/* The family called `name` ("scalar", "avx2", "avx512", "neon") in *isa;
 * -1 with err "NAME is not ...; using BEST" and the best in *isa when the
 * name is unknown or the CPU lacks it (pdl_set_kernels' rule). */
int cpu_isa_named(const char *name, pdl_isa *isa, pdl_error *err);
/* Overrides the family (tests); returns the one actually set. */
pdl_isa cpu_isa_set(pdl_isa isa);
const char *cpu_isa_name(pdl_isa isa);

#endif
