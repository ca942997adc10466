/*
 * attention_neon.c - attention with aarch64 Advanced SIMD: the register
 * tiles of attention_tiles_body.h at 4 lanes (8 queries x 3 groups of 4 keys
 * per score tile; 6 queries x 4 vectors per value tile: 24 of the 32
 * vector registers), the portable body (attention_body.h) built here for
 * the shapes they do not take, and the F16 cache write. F16 caches are
 * widened with FCVTL, exact. Same bits as every build.
 */
#include "kernels/attention.h"

#if defined(__aarch64__)
#include <arm_neon.h>

#include <string.h>

#include "kernels/fp16.h"

#define ATTN_STORAGE static
#define ATTN_QUERIES_FN attention_queries_neon_generic
#define ATTN_F16(h) fp16_f16_to_f32_hw(h)
#include "kernels/attention_body.h"

typedef float32x4_t at_v;
#define AT_W 4
#define AT_SR 8
#define AT_SG 3
#define AT_SG1 4
#define AT_VR 6
#define AT_VACC 24
#define AT_FN attn_queries_neon
#define AT_GENERIC attention_queries_neon_generic
static inline at_v at_zero(void) { return vdupq_n_f32(0.0f); }
static inline at_v at_set1(float x) { return vdupq_n_f32(x); }
static inline at_v at_fmadd(at_v a, at_v b, at_v c) { return vfmaq_f32(c, a, b); }
static inline at_v at_mul(at_v a, at_v b) { return vmulq_f32(a, b); }
static inline at_v at_loadu(const float *p) { return vld1q_f32(p); }
static inline void at_storeu(float *p, at_v v) { vst1q_f32(p, v); }
static inline at_v at_max(at_v a, at_v b) { return vmaxq_f32(a, b); }
static inline float at_hmax(at_v v) { return vmaxvq_f32(v); }
static inline at_v at_load_kv(const uint8_t *p, int f16) {
    if (f16) return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16((const uint16_t *)(const void *)p)));
    return vld1q_f32((const float *)(const void *)p);
}
static inline at_v at_load_i8(const uint8_t *p) {
    int32_t w;
    memcpy(&w, p, 4);
    int16x8_t h = vmovl_s8(vreinterpret_s8_s32(vdup_n_s32(w)));
    return vcvtq_f32_s32(vmovl_s16(vget_low_s16(h)));
}
static inline at_v at_load_u4(const uint8_t *p, int high) {
    uint32_t w;
    memcpy(&w, p, 4);
    uint8x8_t b = vreinterpret_u8_u32(vdup_n_u32(w));
    b = high ? vshr_n_u8(b, 4) : vand_u8(b, vdup_n_u8(15));
    int16x8_t h = vsubq_s16(vreinterpretq_s16_u16(vmovl_u8(b)), vdupq_n_s16(8));
    return vcvtq_f32_s32(vmovl_s16(vget_low_s16(h)));
}
/* FCVTN in the default rounding mode (nearest even) */
static inline void at_to_f16(const float *src, uint16_t *dst) {
    vst1_u16(dst, vreinterpret_u16_f16(vcvt_f16_f32(vld1q_f32(src))));
}
#define AT_STORE_FN attn_store_neon
#include "kernels/attention_tiles_body.h"
#else
void attn_store_neon(void *kpool, void *vpool, int kv_is_f16, int kv_dim, int head_dim, int block_size,
                     int64_t slot, const float *k, const float *v) {
    attn_store_scalar(kpool, vpool, kv_is_f16, kv_dim, head_dim, block_size, slot, k, v);
}
void attn_queries_neon(float *const *out, const float *const *q, const int *pos, int n_q, int head_dim,
                       int kv_head, float scale, float softcap, const float *sinks, int window, const pdl_attn_kv *kv,
                       float *scratch) {
    attn_queries_scalar(out, q, pos, n_q, head_dim, kv_head, scale, softcap, sinks, window, kv, scratch);
}
void attn_queries_neon_ranges(float *const *out, const float *const *q, const int *first, const int *last,
                                     int n_q, int head_dim, int kv_head, float scale, float softcap,
                                     const float *sinks, const pdl_attn_kv *kv, float *scratch) {
    attn_queries_scalar_ranges(out, q, first, last, n_q, head_dim, kv_head, scale, softcap, sinks, kv, scratch);
}
#endif
