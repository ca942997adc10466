/*
 * delta_rule_body.h - the body of delta_rule.h's kernel, included once per
 * instruction set with DR_NAME defined (delta_rule.c: portable; the
 * _avx2/_avx512/_neon files: the same C compiled with their flags, the
 * loops over v_dim and the 8-lane dot products vectorised by the
 * compiler). Every sum runs in a fixed order (see delta_rule.h).
 */
#include <math.h>
#include <string.h>

/* a . b over n floats: 8 partial sums (lane j takes elements j, j + 8,
 * ...), then added in order; n need not be a multiple of 8. */
static inline float DR_DOT(const float *a, const float *b, int n) {
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) acc[j] += a[i + j] * b[i + j];
    for (; i < n; i++) acc[i & 7] += a[i] * b[i];
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

/* S_B^T k and S_B^T q of rows [r0, r0 + m) (one chunk's), 8 rows per pass
 * over S: each output sums over S's rows in ascending order, as a single
 * row's would. kS, qS: (m, V). */
static void DR_PROJECT(const delta_rule_seg *s, int r0, int m, float *kS, float *qS) {
    const int K = s->k_dim, V = s->v_dim;
    for (int b0 = 0; b0 < m; b0 += 8) {
        int b1 = b0 + 8 < m ? b0 + 8 : m;
        for (int rr = b0; rr < b1; rr++)
            for (int c = 0; c < V; c++) kS[(size_t)rr * V + c] = 0.0f, qS[(size_t)rr * V + c] = 0.0f;
        for (int a = 0; a < K; a++) {
            const float *row = s->S + (size_t)a * V;
            for (int rr = b0; rr < b1; rr++) {
                const float ka = s->k[(size_t)(r0 + rr) * s->qkv_stride + a];
                const float qa = s->q[(size_t)(r0 + rr) * s->qkv_stride + a];
                float *ks = kS + (size_t)rr * V, *qs = qS + (size_t)rr * V;
                for (int c = 0; c < V; c++) {
                    ks[c] += ka * row[c];
                    qs[c] += qa * row[c];
                }
            }
        }
    }
}

void DR_NAME(const delta_rule_seg *s) {
    const int C = s->chunk, K = s->k_dim, V = s->v_dim;
    float *ew = s->scratch, *kk = ew + C, *qk = kk + C, *kS_all = qk + C, *qS_all = kS_all + (size_t)C * V;
    float *S = s->S;
    for (int r0 = 0; r0 < s->n;) {
        const int p0 = s->first_pos + r0, i0 = p0 % C, m = C - i0 < s->n - r0 ? C - i0 : s->n - r0;
        if (p0 == 0) memset(S, 0, (size_t)K * V * sizeof *S); /* a sequence starts from zero state */
        DR_PROJECT(s, r0, m, kS_all, qS_all); /* every row of this chunk reads the same S_B */
        for (int rr = 0; rr < m; rr++) {
            const int r = r0 + rr, p = p0 + rr, i = i0 + rr, B = p - i;
            const float *q = s->q + (size_t)r * s->qkv_stride, *k = s->k + (size_t)r * s->qkv_stride,
                        *v = s->v + (size_t)r * s->qkv_stride;
            const float *kS = kS_all + (size_t)rr * V, *qS = qS_all + (size_t)rr * V;
            const float beta = s->beta[(size_t)r * s->gate_stride], g = s->g[(size_t)r * s->gate_stride];
            const float G = i == 0 ? g : s->chunk_decay[(size_t)(i - 1) * s->decay_stride] + g;
            const float eG = expf(G);
            /* the chunk's earlier rows, weighted by their decay since */
            for (int j = 0; j < i; j++) {
                const float *kj = B + j >= s->first_pos ? s->k + (size_t)(B + j - s->first_pos) * s->qkv_stride
                                                        : s->chunk_keys + (size_t)j * s->keys_stride;
                const float w = expf(G - s->chunk_decay[(size_t)j * s->decay_stride]);
                kk[j] = w * DR_DOT(k, kj, K);
                qk[j] = w * DR_DOT(q, kj, K);
            }
            float *d = s->chunk_delta + (size_t)i * s->delta_stride;
            for (int c = 0; c < V; c++) d[c] = v[c] - eG * kS[c];
            for (int j = 0; j < i; j++) {
                const float *dj = s->chunk_delta + (size_t)j * s->delta_stride, w = kk[j];
                for (int c = 0; c < V; c++) d[c] -= w * dj[c];
            }
            for (int c = 0; c < V; c++) d[c] *= beta;
            float *o = s->o + (size_t)r * s->o_stride;
            for (int c = 0; c < V; c++) o[c] = eG * qS[c];
            for (int j = 0; j < i; j++) {
                const float *dj = s->chunk_delta + (size_t)j * s->delta_stride, w = qk[j];
                for (int c = 0; c < V; c++) o[c] += w * dj[c];
            }
            const float qki = DR_DOT(q, k, K);
            for (int c = 0; c < V; c++) o[c] += qki * d[c];
            s->chunk_decay[(size_t)i * s->decay_stride] = G;
        }
        r0 += m;
        if (i0 + m != C) continue;
        /* the chunk is complete: S moves to its end, a rank-C update */
        const int B = p0 - i0;
        const float G = s->chunk_decay[(size_t)(C - 1) * s->decay_stride], eG = expf(G);
        for (int j = 0; j < C; j++) ew[j] = expf(G - s->chunk_decay[(size_t)j * s->decay_stride]);
        for (int a = 0; a < K; a++) {
            float *row = S + (size_t)a * V;
            for (int c = 0; c < V; c++) row[c] *= eG;
            for (int j = 0; j < C; j++) {
                const float *kj = B + j >= s->first_pos ? s->k + (size_t)(B + j - s->first_pos) * s->qkv_stride
                                                        : s->chunk_keys + (size_t)j * s->keys_stride;
                const float *dj = s->chunk_delta + (size_t)j * s->delta_stride, w = ew[j] * kj[a];
                for (int c = 0; c < V; c++) row[c] += w * dj[c];
            }
        }
    }
}
