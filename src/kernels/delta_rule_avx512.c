/*
 * delta_rule_avx512.c - the gated delta rule (delta_rule.h) compiled for
 * AVX-512: delta_rule_body.h with this file's flags (CMakeLists.txt);
 * called only when the CPU has them.
 */
#include "kernels/delta_rule.h"

#if defined(__AVX512F__)
#define DR_NAME delta_rule_avx512
#define DR_DOT dr_dot_avx512
#define DR_PROJECT dr_project_avx512
#include "kernels/delta_rule_body.h"
#endif
