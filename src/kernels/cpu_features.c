/*
 * cpu_features.c - CPUID through the compiler's builtins (x86), the
 * kernel's hardware capability bits (aarch64), and the kernel family choice.
 */
#define _DEFAULT_SOURCE /* syscall(2) */
#include "kernels/cpu_features.h"

#include <pthread.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#if defined(__x86_64__) && defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#define PDL_ARCH_REQ_XCOMP_PERM 0x1023 /* asm/prctl.h */
#define PDL_XFEATURE_XTILEDATA 18
#endif
#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1UL << 20) /* the kernel's bit for SDOT/UDOT */
#endif
#endif

#include "kernels/matmul_table.h"
#include "pagedlm.h"
#include "util/error.h"

static pdl_cpu_features features;
static pdl_isa active;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static pdl_isa best_of(const pdl_cpu_features *f) {
    if (f->neon) return PDL_ISA_NEON;
    if (f->avx512f && f->avx512bw && f->avx512vl && f->f16c && f->fma) return PDL_ISA_AVX512;
    if (f->avx2 && f->fma && f->f16c) return PDL_ISA_AVX2;
    return PDL_ISA_SCALAR;
}

static bool supported(const pdl_cpu_features *f, pdl_isa isa) {
    switch (isa) {
    case PDL_ISA_SCALAR: return true;
    case PDL_ISA_AVX2: return f->avx2 && f->fma && f->f16c;
    case PDL_ISA_AVX512: return best_of(f) == PDL_ISA_AVX512;
    case PDL_ISA_NEON: return f->neon;
    default: return false;
    }
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
    /* AVX-VNNI is leaf 7 subleaf 1 (EAX bit 4), which this compiler's
     * __builtin_cpu_supports may not know; its ymm state is AVX2's */
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (features.avx2 && __get_cpuid_count(7, 1, &a, &b, &c, &d)) features.avxvnni = (a >> 4) & 1;
    /* AMX: the instructions (leaf 7 EDX), and the OS saving their state
     * (XCR0 bits 17 and 18, read with XGETBV once OSXSAVE says it may be) */
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d) && ((d >> 22) & 1) && ((d >> 24) & 1)) {
        unsigned a1 = 0, b1 = 0, c1 = 0, d1 = 0;
        if (__get_cpuid(1, &a1, &b1, &c1, &d1) && ((c1 >> 27) & 1)) {
            unsigned lo, hi;
            __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
            features.amx_bf16 = ((lo >> 17) & 3) == 3;
        }
    }
#endif
#if defined(__aarch64__)
    features.neon = true; /* Advanced SIMD is part of the aarch64 base */
#if defined(__linux__)
    features.neon_dotprod = (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) != 0;
#endif
#endif
    active = best_of(&features);
}

int cpu_isa_named(const char *name, pdl_isa *isa, pdl_error *err) {
    pthread_once(&once, detect);
    pdl_isa want = PDL_ISA_COUNT; /* unknown */
    for (int i = 0; i < PDL_ISA_COUNT; i++)
        if (strcmp(name, cpu_isa_name((pdl_isa)i)) == 0) want = (pdl_isa)i;
    if (want != PDL_ISA_COUNT && supported(&features, want)) {
        *isa = want;
        return 0;
    }
    /* a typo or another machine's family: the best, and the caller says so */
    *isa = best_of(&features);
    return err_fail(err, "%s is %s; using %s", name,
                    want == PDL_ISA_COUNT ? "not one of scalar, avx2, avx512, neon" : "not supported by this CPU",
                    cpu_isa_name(*isa));
}

int pdl_set_kernels(const char *isa, int bf16_activations, pdl_error *err) {
    pthread_once(&once, detect);
    if (bf16_activations >= 0) matmul_set_bf16_activations(bf16_activations != 0);
    if (!isa) return 0;
    pdl_isa chosen;
    int rc = cpu_isa_named(isa, &chosen, err);
    active = chosen;
    return rc;
}

static bool amx_granted;
static pthread_once_t amx_once = PTHREAD_ONCE_INIT;

static void amx_request(void) {
#if defined(__x86_64__) && defined(__linux__)
    amx_granted = features.amx_bf16 && syscall(SYS_arch_prctl, PDL_ARCH_REQ_XCOMP_PERM, PDL_XFEATURE_XTILEDATA) == 0;
#endif
}

bool cpu_amx_bf16_ready(void) {
    pthread_once(&once, detect);
    pthread_once(&amx_once, amx_request);
    return amx_granted;
}

const pdl_cpu_features *cpu_features_get(void) {
    pthread_once(&once, detect);
    return &features;
}

pdl_isa cpu_isa_best(void) {
    pthread_once(&once, detect); /* the flags are read once, whoever asks first */
    return best_of(&features);
}

pdl_isa cpu_isa_active(void) {
    pthread_once(&once, detect);
    return active;
}

bool cpu_isa_supported(pdl_isa isa) {
    pthread_once(&once, detect);
    return supported(&features, isa);
}

pdl_isa cpu_isa_set(pdl_isa isa) {
    active = cpu_isa_supported(isa) ? isa : cpu_isa_best();
    return active;
}

const char *cpu_isa_name(pdl_isa isa) {
    switch (isa) {
    case PDL_ISA_AVX512: return "avx512";
    case PDL_ISA_AVX2: return "avx2";
    case PDL_ISA_NEON: return "neon";
    default: return "scalar";
    }
}
