/*
 * delta_rule_neon.c - the gated delta rule (delta_rule.h) compiled for
 * aarch64 Advanced SIMD: delta_rule_body.h with this file's flags (CMakeLists.txt);
 * called only when the CPU has them.
 */
#include "kernels/delta_rule.h"

#if defined(__aarch64__)
#define DR_NAME delta_rule_neon
#define DR_DOT dr_dot_neon
#define DR_PROJECT dr_project_neon
#include "kernels/delta_rule_body.h"
#endif
