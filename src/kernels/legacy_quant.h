/*
 * legacy_quant.h - GGUF's legacy 32-element blocks with a fifth bit or a
 * min (format/tensor.h's PDL_DTYPE_Q5_0, _Q4_1, _Q5_1): their layouts and
 * the portable unpacking every kernel of theirs is checked against.
 *
 *   Q5_0 (22 bytes): f16 d; u32 qh (little-endian); 16 bytes qs. Element
 *        k < 16 has code (qs[k] & 15) | bit k of qh << 4, element 16 + k
 *        has (qs[k] >> 4) | bit 16 + k of qh << 4; value d (code - 16).
 *   Q4_1 (20 bytes): f16 d; f16 m; 16 bytes qs (Q4_0's nibbles); value
 *        d code + m (code 0..15).
 *   Q5_1 (24 bytes): f16 d; f16 m; u32 qh; 16 bytes qs (Q5_0's codes);
 *        value d code + m (code 0..31).
 *
 * Codes are at most 31, so a code times a Q8_0 activation is an exact
 * integer product, and sums of them are exact in int32 (matmul.c and
 * weight_panels.h give the float order).
 */
#ifndef PDL_KERNELS_LEGACY_QUANT_H
#define PDL_KERNELS_LEGACY_QUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "format/tensor.h"
#include "kernels/fp16.h"

static inline bool legacy_quant(pdl_dtype dt) {
    return dt == PDL_DTYPE_Q5_0 || dt == PDL_DTYPE_Q4_1 || dt == PDL_DTYPE_Q5_1;
}

/* Bytes of one block, and where its u32 qh (none for Q4_1) and its 16
 * nibble bytes start. */
static inline size_t legacy_block_bytes(pdl_dtype dt) {
    return dt == PDL_DTYPE_Q5_0 ? 22 : dt == PDL_DTYPE_Q4_1 ? 20 : 24;
}
static inline size_t legacy_qh_at(pdl_dtype dt) { return dt == PDL_DTYPE_Q5_1 ? 4 : 2; }
static inline size_t legacy_qs_at(pdl_dtype dt) { return dt == PDL_DTYPE_Q5_0 ? 6 : dt == PDL_DTYPE_Q4_1 ? 4 : 8; }

/* The block's d and (Q4_1 / Q5_1) m. */
static inline float legacy_d(const uint8_t *blk) {
    uint16_t h;
    memcpy(&h, blk, 2);
    return fp16_f16_to_f32(h);
}
static inline float legacy_m(const uint8_t *blk) {
    uint16_t h;
    memcpy(&h, blk + 2, 2);
    return fp16_f16_to_f32(h);
}

/* The block's 32 codes (0..31, Q4_1 0..15), element order. */
static inline void legacy_codes(pdl_dtype dt, const uint8_t *blk, int8_t q[32]) {
    const uint8_t *qs = blk + legacy_qs_at(dt);
    uint32_t qh = 0;
    if (dt != PDL_DTYPE_Q4_1) memcpy(&qh, blk + legacy_qh_at(dt), 4);
    for (int j = 0; j < 16; j++) {
        q[j] = (int8_t)((qs[j] & 0xF) | ((qh >> j) & 1) << 4);
        q[j + 16] = (int8_t)((qs[j] >> 4) | ((qh >> (j + 16)) & 1) << 4);
    }
}

/* A weight panel's fifth bits of one block (weight_panels.h): the 32-bit
 * word whose byte i bit j is the fifth bit of element 4 j + i, from the
 * file's qh (bit k: element k). */
static inline uint32_t legacy_panel_high(uint32_t qh) {
    uint32_t v = 0;
    for (int k = 0; k < 32; k++) v |= ((qh >> k) & 1u) << (8 * (k % 4) + k / 4);
    return v;
}

#endif
