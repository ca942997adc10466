/*
 * cpu_features.c - CPUID through the compiler's builtins, and the kernel
 * family choice.
 */
#include "kernels/cpu_features.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static pdl_cpu_features features;
static pdl_isa active;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static pdl_isa best_of(const pdl_cpu_features *f) {
    if (f->avx512f && f->avx512bw && f->avx512vl && f->f16c && f->fma) return PDL_ISA_AVX512;
    if (f->avx2 && f->fma && f->f16c) return PDL_ISA_AVX2;
    return PDL_ISA_SCALAR;
}

static void detect(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    features.avx2 = __builtin_cpu_supports("avx2");
    features.fma = __builtin_cpu_supports("fma");
    features.f16c = __builtin_cpu_supports("f16c");
    features.avx512f = __builtin_cpu_supports("avx512f");
    features.avx512bw = __builtin_cpu_supports("avx512bw");
    features.avx512vl = __builtin_cpu_supports("avx512vl");
    features.avx512bf16 = __builtin_cpu_supports("avx512bf16");
    features.avx512vnni = __builtin_cpu_supports("avx512vnni");
#endif
    active = best_of(&features);
    const char *env = getenv("PAGEDLM_ISA");
    if (env) {
        pdl_isa want = strcmp(env, "scalar") == 0 ? PDL_ISA_SCALAR
                       : strcmp(env, "avx2") == 0 ? PDL_ISA_AVX2
                                                  : PDL_ISA_AVX512;
        if (want < active) active = want;
    }
}

const pdl_cpu_features *pdl_cpu_features_get(void) {
    pthread_once(&once, detect);
    return &features;
}

pdl_isa pdl_isa_best(void) {
    pthread_once(&once, detect); /* the flags are read once, whoever asks first */
    return best_of(&features);
}

pdl_isa pdl_isa_active(void) {
    pthread_once(&once, detect);
    return active;
}

pdl_isa pdl_isa_set(pdl_isa isa) {
    pdl_isa best = pdl_isa_best();
    active = isa <= best ? isa : best;
    return active;
}

const char *pdl_isa_name(pdl_isa isa) {
    switch (isa) {
    case PDL_ISA_AVX512: return "avx512";
    case PDL_ISA_AVX2: return "avx2";
    default: return "scalar";
    }
}
