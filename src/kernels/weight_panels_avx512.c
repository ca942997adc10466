/*
 * weight_panels_avx512.c - AVX-512 panel tiles for F32, F16 (F16C) and BF16
 * weights with F32 activations (the body is weight_panels_avx512_body.h).
 * Compiled with AVX-512 flags (see CMakeLists.txt); called only when the
 * CPU has them.
 */
#include "kernels/weight_panels.h"

#if defined(__AVX512F__)
#include "kernels/weight_panels_avx512_body.h"

DEFINE_PANEL_TILE(panel_f32, 0)
DEFINE_PANEL_TILE(panel_f16, 1)
DEFINE_PANEL_TILE(panel_bf16, 2)

const pdl_panel_fn panels_tiles_avx512[PDL_DTYPE_COUNT] = {
    [PDL_DTYPE_F32] = panel_f32,
    [PDL_DTYPE_F16] = panel_f16,
    [PDL_DTYPE_BF16] = panel_bf16,
};
#else
const pdl_panel_fn panels_tiles_avx512[PDL_DTYPE_COUNT] = {0};
#endif
