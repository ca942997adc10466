/*
 * delta_rule.c - the portable gated delta rule (delta_rule.h), and the
 * choice of a family's build.
 */
#include "kernels/delta_rule.h"

#define DR_NAME delta_rule_portable
#define DR_DOT dr_dot_portable
#define DR_PROJECT dr_project_portable
#include "kernels/delta_rule_body.h"

delta_rule_fn delta_rule_for(pdl_isa isa) {
    switch (isa) {
#if defined(__x86_64__) || defined(__i386__)
    case PDL_ISA_AVX512: return delta_rule_avx512;
    case PDL_ISA_AVX2: return delta_rule_avx2;
#endif
#if defined(__aarch64__)
    case PDL_ISA_NEON: return delta_rule_neon;
#endif
    default: return delta_rule_portable;
    }
}
