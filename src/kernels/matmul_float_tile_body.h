/*
 * matmul_float_tile_body.h - the float-weight tile (F32, F16, BF16 widened to
 * F32 as they are loaded) written once for any vector width and included
 * by matmul_avx2.c (8 lanes) and matmul_neon.c (4 lanes); the AVX-512 tile
 * (masked tails, a streaming variant) is its own, in matmul_avx512.c.
 *
 * Tile: TR rows x TC weight rows, one accumulator of MT_W lanes per
 * element carried over k in steps of MT_W, a ragged end of k through a
 * zero-padded copy, then a horizontal sum: the same instruction sequence
 * per element whatever the tile's shape, so a row gives the same bits alone
 * or in a batch. Tiles of fewer than TR rows (decode) stream their weights
 * once per token: every 64 bytes of a weight row also prefetch the same
 * bytes of the row PF_ROWS ahead.
 *
 * The including file defines the vector type mt_v, MT_W, TR, TC, PF_ROWS
 * and mt_zero, mt_loadx (MT_W floats), mt_fmadd (a * b + c, fused),
 * mt_hsum and mt_prefetch (inlined: GCC deletes calls to a function that
 * only prefetches); each DEFINE_TILE(NAME, LOAD, ELEM) then takes a loader
 * LOAD(w, k) of MT_W weights of type ELEM from element k, widened to F32.
 */
#include <string.h>

#define DEFINE_TILE(NAME, LOAD, ELEM)                                                                            \
    static inline __attribute__((always_inline)) void NAME##_body(const float *x, int64_t ldx, int nr,           \
                                                                  const uint8_t *w, size_t wrb, int nc,          \
                                                                  int64_t in, float *out, int64_t ldo) {         \
        mt_v acc[TR][TC];                                                                                       \
        for (int r = 0; r < TR; r++)                                                                            \
            for (int c = 0; c < TC; c++) acc[r][c] = mt_zero();                                                 \
        int64_t kf = in & ~(int64_t)(MT_W - 1);                                                                 \
        const uint8_t *pf = w + PF_ROWS * wrb;                                                                  \
        for (int64_t k = 0; k < kf; k += MT_W) {                                                                \
            mt_v v[TC];                                                                                         \
            if (nr < TR && (k * sizeof(ELEM)) % 64 == 0) /* decode: once per cache line of each row */          \
                for (int c = 0; c < nc; c++) mt_prefetch(pf + c * wrb + k * sizeof(ELEM));                      \
            for (int c = 0; c < nc; c++) v[c] = LOAD(w + c * wrb, k);                                           \
            for (int r = 0; r < nr; r++) {                                                                      \
                mt_v b = mt_loadx(x + r * ldx + k);                                                             \
                for (int c = 0; c < nc; c++) acc[r][c] = mt_fmadd(v[c], b, acc[r][c]);                          \
            }                                                                                                   \
        }                                                                                                       \
        if (kf < in) { /* zero-padded last step */                                                              \
            uint8_t wt[TC][MT_W * sizeof(ELEM)];                                                                \
            float xt[MT_W];                                                                                     \
            for (int c = 0; c < nc; c++) {                                                                      \
                memset(wt[c], 0, sizeof wt[c]);                                                                 \
                memcpy(wt[c], w + c * wrb + kf * sizeof(ELEM), (size_t)(in - kf) * sizeof(ELEM));              \
            }                                                                                                   \
            for (int r = 0; r < nr; r++) {                                                                      \
                memset(xt, 0, sizeof xt);                                                                       \
                memcpy(xt, x + r * ldx + kf, (size_t)(in - kf) * sizeof(float));                               \
                mt_v b = mt_loadx(xt);                                                                          \
                for (int c = 0; c < nc; c++) acc[r][c] = mt_fmadd(LOAD(wt[c], 0), b, acc[r][c]);                \
            }                                                                                                   \
        }                                                                                                       \
        for (int r = 0; r < nr; r++)                                                                            \
            for (int c = 0; c < nc; c++) out[r * ldo + c] = mt_hsum(acc[r][c]);                                 \
    }                                                                                                           \
    static void NAME(const float *x, int64_t ldx, int rows, const uint8_t *w, size_t wrb, int cols, int64_t in, \
                     float *out, int64_t ldo, bool stream) {                                                    \
        (void)stream; /* these tiles do not prefetch */                                                         \
        if (rows == TR && cols == TC) NAME##_body(x, ldx, TR, w, wrb, TC, in, out, ldo);                        \
        else if (rows == 1 && cols == TC) NAME##_body(x, ldx, 1, w, wrb, TC, in, out, ldo);                     \
        else NAME##_body(x, ldx, rows, w, wrb, cols, in, out, ldo);                                             \
    }
