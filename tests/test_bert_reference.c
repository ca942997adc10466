/*
 * test_bert_reference.c - BERT encoder embeddings (bge, all-MiniLM and the
 * other sentence-transformers encoders) against a float64 forward written
 * from the published description (transformers' modeling_bert.py:
 * BertEmbeddings, BertSelfAttention with no mask, BertSelfOutput /
 * BertOutput's LayerNorm(x + dense(h)), BertIntermediate's exact GELU).
 *
 * ../shared holds no encoder, so the test makes a random-weight BERT,
 * writes it as a Hugging Face folder (BertModel's names, and a BertFor*
 * checkpoint's "bert." prefix) and as a GGUF file with llama.cpp's `bert`
 * names, and runs embedding requests through the engine (CLS and mean
 * pooling, normalized or not). The reference is deliberately plain: one
 * sequence, every row against every row, nothing shared with src/.
 *
 * Tolerance: 5e-6 absolute on the pooled vector (LayerNorm keeps the
 * hidden values ~1; float32 over 3 layers of width 48 lands at most 7e-7
 * from float64). The reference is also run with one detail wrong (a causal
 * mask, positions one off as RoBERTa counts them, no token-type row, the
 * norm before the add, GELU's tanh form) and each must land at least ten
 * tolerances away (the tanh form, the closest, 1.2e-4), so the comparison
 * can fail.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "pagedlm.h"
#include "support/gguf_writer.h"
#include "support/st_writer.h"
#include "test_util.h"

#define TOL 5e-6

enum { L = 3, H = 48, NH = 4, HD = H / NH, F = 96, V = 64, P = 40, TYPES = 2 };
static const double EPS = 1e-12;

typedef enum bug { BUG_NONE, BUG_CAUSAL, BUG_POS_SHIFT, BUG_NO_TYPE, BUG_PRE_NORM, BUG_GELU_TANH } bug;

typedef struct layer_w {
    float *wq, *bq, *wk, *bk, *wv, *bv, *wo, *bo, *ln1_g, *ln1_b, *wi, *bi, *wd, *bd, *ln2_g, *ln2_b;
} layer_w;

typedef struct weights {
    float *word, *pos, *type, *ln_g, *ln_b;
    layer_w l[L];
} weights;

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static double urand(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0;
}
static float *rnd(size_t n, double scale, double center) {
    float *p = malloc(n * sizeof *p);
    for (size_t i = 0; i < n; i++) p[i] = (float)(center + scale * (2 * urand() - 1));
    return p;
}

static weights make_weights(void) {
    weights w;
    w.word = rnd((size_t)V * H, 1.0, 0), w.pos = rnd((size_t)P * H, 0.5, 0), w.type = rnd((size_t)TYPES * H, 0.5, 0);
    w.ln_g = rnd(H, 0.2, 1), w.ln_b = rnd(H, 0.2, 0);
    double s = 1.0 / sqrt(H);
    for (int l = 0; l < L; l++) {
        layer_w *x = &w.l[l];
        x->wq = rnd((size_t)H * H, 2 * s, 0), x->bq = rnd(H, 0.1, 0);
        x->wk = rnd((size_t)H * H, 2 * s, 0), x->bk = rnd(H, 0.1, 0);
        x->wv = rnd((size_t)H * H, s, 0), x->bv = rnd(H, 0.1, 0);
        x->wo = rnd((size_t)H * H, s, 0), x->bo = rnd(H, 0.1, 0);
        x->ln1_g = rnd(H, 0.2, 1), x->ln1_b = rnd(H, 0.2, 0);
        x->wi = rnd((size_t)F * H, 2 * s, 0), x->bi = rnd(F, 0.3, 0);
        x->wd = rnd((size_t)H * F, 1.0 / sqrt(F), 0), x->bd = rnd(H, 0.1, 0);
        x->ln2_g = rnd(H, 0.2, 1), x->ln2_b = rnd(H, 0.2, 0);
    }
    return w;
}

/* ---- the float64 reference ------------------------------------------------ */

static void layer_norm(double *x, const float *g, const float *b) {
    double mean = 0, var = 0;
    for (int i = 0; i < H; i++) mean += x[i];
    mean /= H;
    for (int i = 0; i < H; i++) var += (x[i] - mean) * (x[i] - mean);
    var /= H;
    for (int i = 0; i < H; i++) x[i] = (x[i] - mean) / sqrt(var + EPS) * g[i] + b[i];
}

/* y[out] = W x + b, W (out, in) row-major. */
static void linear(double *y, const float *w, const float *b, const double *x, int out, int in) {
    for (int o = 0; o < out; o++) {
        double s = b[o];
        for (int i = 0; i < in; i++) s += (double)w[(size_t)o * in + i] * x[i];
        y[o] = s;
    }
}

/* The last layer's hidden states of ids[n] (n x H). */
static double *reference(const weights *w, const int32_t *ids, int n, bug b) {
    double *x = calloc((size_t)n * H, sizeof *x);
    for (int r = 0; r < n; r++) {
        int p = b == BUG_POS_SHIFT ? r + 1 : r;
        for (int i = 0; i < H; i++)
            x[r * H + i] = (double)w->word[ids[r] * H + i] + w->pos[p * H + i] + (b == BUG_NO_TYPE ? 0 : w->type[i]);
        layer_norm(x + r * H, w->ln_g, w->ln_b);
    }
    double *q = malloc(sizeof *q * n * H), *k = malloc(sizeof *k * n * H), *v = malloc(sizeof *v * n * H);
    double *a = malloc(sizeof *a * n * H), *t = malloc(sizeof *t * H), *hi = malloc(sizeof *hi * F);
    double *sc = malloc(sizeof *sc * n);
    for (int l = 0; l < L; l++) {
        const layer_w *lw = &w->l[l];
        for (int r = 0; r < n; r++) {
            linear(q + r * H, lw->wq, lw->bq, x + r * H, H, H);
            linear(k + r * H, lw->wk, lw->bk, x + r * H, H, H);
            linear(v + r * H, lw->wv, lw->bv, x + r * H, H, H);
        }
        for (int r = 0; r < n; r++)
            for (int h = 0; h < NH; h++) {
                int last = b == BUG_CAUSAL ? r : n - 1;
                double m = -INFINITY, sum = 0;
                for (int j = 0; j <= last; j++) {
                    double s = 0;
                    for (int d = 0; d < HD; d++) s += q[r * H + h * HD + d] * k[j * H + h * HD + d];
                    sc[j] = s / sqrt(HD);
                    m = fmax(m, sc[j]);
                }
                for (int j = 0; j <= last; j++) sum += sc[j] = exp(sc[j] - m);
                for (int d = 0; d < HD; d++) {
                    double o = 0;
                    for (int j = 0; j <= last; j++) o += sc[j] / sum * v[j * H + h * HD + d];
                    a[r * H + h * HD + d] = o;
                }
            }
        for (int r = 0; r < n; r++) {
            double *xr = x + r * H;
            linear(t, lw->wo, lw->bo, a + r * H, H, H);
            if (b == BUG_PRE_NORM) layer_norm(t, lw->ln1_g, lw->ln1_b);
            for (int i = 0; i < H; i++) xr[i] += t[i];
            if (b != BUG_PRE_NORM) layer_norm(xr, lw->ln1_g, lw->ln1_b);
            linear(hi, lw->wi, lw->bi, xr, F, H);
            for (int i = 0; i < F; i++)
                hi[i] = b == BUG_GELU_TANH
                            ? 0.5 * hi[i] * (1 + tanh(sqrt(2 / 3.14159265358979323846) * (hi[i] + 0.044715 * hi[i] * hi[i] * hi[i])))
                            : 0.5 * hi[i] * (1 + erf(hi[i] / sqrt(2.0)));
            linear(t, lw->wd, lw->bd, hi, H, F);
            if (b == BUG_PRE_NORM) layer_norm(t, lw->ln2_g, lw->ln2_b);
            for (int i = 0; i < H; i++) xr[i] += t[i];
            if (b != BUG_PRE_NORM) layer_norm(xr, lw->ln2_g, lw->ln2_b);
        }
    }
    free(q), free(k), free(v), free(a), free(t), free(hi), free(sc);
    return x;
}

/* The pooled (and optionally normalized) vector of the reference. */
static void pool(const double *x, int n, pdl_pooling kind, bool normalize, double *out) {
    for (int i = 0; i < H; i++) {
        double s = 0;
        if (kind == PDL_POOLING_CLS) s = x[i];
        else if (kind == PDL_POOLING_LAST) s = x[(n - 1) * H + i];
        else
            for (int r = 0; r < n; r++) s += x[r * H + i] / n;
        out[i] = s;
    }
    if (!normalize) return;
    double nn = 0;
    for (int i = 0; i < H; i++) nn += out[i] * out[i];
    for (int i = 0; i < H; i++) out[i] /= sqrt(nn);
}

/* ---- the files ------------------------------------------------------------- */

static void add_hf(stw_writer *s, const char *prefix, const char *name, const float *d, int rows, int cols) {
    char full[256];
    snprintf(full, sizeof full, "%s%s", prefix, name);
    int64_t shape[2] = {rows, cols};
    stw_add_f32(s, full, cols ? 2 : 1, shape, d);
}

static char *write_hf(const weights *w, const char *dirname, const char *prefix, const char *pooling) {
    char *dir = test_make_dir(dirname);
    stw_writer *s = stw_new();
    add_hf(s, prefix, "embeddings.word_embeddings.weight", w->word, V, H);
    add_hf(s, prefix, "embeddings.position_embeddings.weight", w->pos, P, H);
    add_hf(s, prefix, "embeddings.token_type_embeddings.weight", w->type, TYPES, H);
    add_hf(s, prefix, "embeddings.LayerNorm.weight", w->ln_g, H, 0);
    add_hf(s, prefix, "embeddings.LayerNorm.bias", w->ln_b, H, 0);
    for (int l = 0; l < L; l++) {
        const layer_w *x = &w->l[l];
        char n[160];
#define T(suffix, data, r, c) (snprintf(n, sizeof n, "encoder.layer.%d.%s", l, suffix), add_hf(s, prefix, n, data, r, c))
        T("attention.self.query.weight", x->wq, H, H), T("attention.self.query.bias", x->bq, H, 0);
        T("attention.self.key.weight", x->wk, H, H), T("attention.self.key.bias", x->bk, H, 0);
        T("attention.self.value.weight", x->wv, H, H), T("attention.self.value.bias", x->bv, H, 0);
        T("attention.output.dense.weight", x->wo, H, H), T("attention.output.dense.bias", x->bo, H, 0);
        T("attention.output.LayerNorm.weight", x->ln1_g, H, 0), T("attention.output.LayerNorm.bias", x->ln1_b, H, 0);
        T("intermediate.dense.weight", x->wi, F, H), T("intermediate.dense.bias", x->bi, F, 0);
        T("output.dense.weight", x->wd, H, F), T("output.dense.bias", x->bd, H, 0);
        T("output.LayerNorm.weight", x->ln2_g, H, 0), T("output.LayerNorm.bias", x->ln2_b, H, 0);
#undef T
    }
    size_t len;
    uint8_t *bytes = stw_serialize(s, &len);
    char *path = test_join(dir, "model.safetensors");
    test_write_file(path, bytes, len);
    free(path), free(bytes), stw_free(s);
    char cfg[1024];
    int n = snprintf(cfg, sizeof cfg,
                     "{\"architectures\": [\"BertModel\"], \"model_type\": \"bert\", \"hidden_size\": %d, "
                     "\"num_hidden_layers\": %d, \"num_attention_heads\": %d, \"intermediate_size\": %d, "
                     "\"vocab_size\": %d, \"max_position_embeddings\": %d, \"type_vocab_size\": %d, "
                     "\"layer_norm_eps\": 1e-12, \"hidden_act\": \"gelu\", \"position_embedding_type\": "
                     "\"absolute\", \"pad_token_id\": 0}",
                     H, L, NH, F, V, P, TYPES);
    path = test_join(dir, "config.json");
    test_write_file(path, cfg, (size_t)n);
    free(path);
    if (pooling) { /* sentence-transformers: Transformer, Pooling, Normalize */
        static const char mods[] =
            "[{\"idx\": 0, \"name\": \"0\", \"path\": \"\", \"type\": \"sentence_transformers.models.Transformer\"},"
            " {\"idx\": 1, \"name\": \"1\", \"path\": \"1_Pooling\", \"type\": \"sentence_transformers.models.Pooling\"},"
            " {\"idx\": 2, \"name\": \"2\", \"path\": \"2_Normalize\", \"type\": "
            "\"sentence_transformers.models.Normalize\"}]";
        path = test_join(dir, "modules.json");
        test_write_file(path, mods, strlen(mods));
        free(path);
        char *pd = test_join(dir, "1_Pooling");
        REQUIRE(mkdir(pd, 0755) == 0);
        n = snprintf(cfg, sizeof cfg,
                     "{\"word_embedding_dimension\": %d, \"pooling_mode_cls_token\": %s, "
                     "\"pooling_mode_mean_tokens\": %s, \"pooling_mode_max_tokens\": false}",
                     H, strcmp(pooling, "cls") == 0 ? "true" : "false", strcmp(pooling, "mean") == 0 ? "true" : "false");
        path = test_join(pd, "config.json");
        test_write_file(path, cfg, (size_t)n);
        free(path), free(pd);
    }
    return dir;
}

static void add_gg(gguf_writer *g, const char *name, const float *d, int rows, int cols) {
    int64_t ne[2] = {rows, cols};
    gguf_writer_add_tensor_f32(g, name, cols ? 2 : 1, ne, d);
}

static char *write_gguf(const weights *w, const char *fname, uint32_t pooling_type) {
    gguf_writer *g = gguf_writer_new(3);
    gguf_writer_add_str(g, "general.architecture", "bert");
    gguf_writer_add_u32(g, "bert.block_count", L);
    gguf_writer_add_u32(g, "bert.context_length", P);
    gguf_writer_add_u32(g, "bert.embedding_length", H);
    gguf_writer_add_u32(g, "bert.feed_forward_length", F);
    gguf_writer_add_u32(g, "bert.attention.head_count", NH);
    gguf_writer_add_f32(g, "bert.attention.layer_norm_epsilon", 1e-12f);
    gguf_writer_add_bool(g, "bert.attention.causal", false);
    gguf_writer_add_u32(g, "bert.pooling_type", pooling_type);
    add_gg(g, "token_embd.weight", w->word, V, H);
    add_gg(g, "position_embd.weight", w->pos, P, H);
    add_gg(g, "token_types.weight", w->type, TYPES, H);
    add_gg(g, "token_embd_norm.weight", w->ln_g, H, 0);
    add_gg(g, "token_embd_norm.bias", w->ln_b, H, 0);
    for (int l = 0; l < L; l++) {
        const layer_w *x = &w->l[l];
        char n[96];
#define T(suffix, data, r, c) (snprintf(n, sizeof n, "blk.%d.%s", l, suffix), add_gg(g, n, data, r, c))
        T("attn_q.weight", x->wq, H, H), T("attn_q.bias", x->bq, H, 0);
        T("attn_k.weight", x->wk, H, H), T("attn_k.bias", x->bk, H, 0);
        T("attn_v.weight", x->wv, H, H), T("attn_v.bias", x->bv, H, 0);
        T("attn_output.weight", x->wo, H, H), T("attn_output.bias", x->bo, H, 0);
        T("attn_output_norm.weight", x->ln1_g, H, 0), T("attn_output_norm.bias", x->ln1_b, H, 0);
        T("ffn_up.weight", x->wi, F, H), T("ffn_up.bias", x->bi, F, 0);
        T("ffn_down.weight", x->wd, H, F), T("ffn_down.bias", x->bd, H, 0);
        T("layer_output_norm.weight", x->ln2_g, H, 0), T("layer_output_norm.bias", x->ln2_b, H, 0);
#undef T
    }
    char *path = test_tmp_path(fname);
    REQUIRE(gguf_writer_write(g, path) == 0);
    gguf_writer_free(g);
    return path;
}

/* ---- the engine -------------------------------------------------------------- */

typedef struct got {
    float vec[H];
    int n, embeddings, finished, tokens;
} got;

static void on_event(const pdl_event *ev, void *user) {
    got *g = user;
    if (ev->kind == PDL_EVENT_EMBEDDING) {
        g->embeddings++;
        g->n = ev->n_embedding;
        memcpy(g->vec, ev->embedding, (size_t)(ev->n_embedding < H ? ev->n_embedding : H) * sizeof *g->vec);
    } else if (ev->kind == PDL_EVENT_FINISHED) {
        g->finished++;
    } else if (ev->kind == PDL_EVENT_TOKEN) {
        g->tokens++;
    }
}

static pdl_model *load(const char *path) {
    pdl_model *m = NULL;
    pdl_error err;
    pdl_model_options o = {.n_threads = 2};
    REQUIRE_MSG(pdl_model_load(&m, path, &o, &err) == 0, "%s: %s", path, err.message);
    return m;
}

static pdl_engine *engine(pdl_model *m, int chunk, int budget) {
    pdl_engine_options o = {.block_size = 16, .max_prefill_chunk = chunk, .kv_dtype = PDL_KV_F32,
                            .max_num_batched_tokens = budget};
    pdl_engine *e = NULL;
    pdl_error err;
    REQUIRE_MSG(pdl_engine_create(&e, m, &o, &err) == 0, "%s", err.message);
    return e;
}

static int add(pdl_engine *e, const int32_t *ids, int n, pdl_pooling kind, bool normalize, got *g, pdl_error *err) {
    pdl_request_params p = {.logprobs = -1, .prompt_logprobs = -1, .pooling = kind, .normalize = normalize};
    return pdl_engine_add_request(e, ids, (size_t)n, &p, on_event, g, NULL, err);
}

static void run(pdl_engine *e) {
    pdl_error err;
    REQUIRE_MSG(pdl_engine_run_until_idle(e, &err) == 0, "%s", err.message);
}

static void prompt_of(int32_t *ids, int n, int salt) {
    for (int i = 0; i < n; i++) ids[i] = (int32_t)((i * 29 + salt * 13 + 5) % V);
}

static double diff(const float *got, const double *want) {
    double d = 0;
    for (int i = 0; i < H; i++) d = fmax(d, fabs(got[i] - want[i]));
    return d;
}

/* One request alone through a fresh engine. */
static void embed_alone(pdl_model *m, const int32_t *ids, int n, pdl_pooling kind, bool normalize, got *g) {
    pdl_engine *e = engine(m, 256, 256);
    pdl_error err;
    memset(g, 0, sizeof *g);
    REQUIRE_MSG(add(e, ids, n, kind, normalize, g, &err) == 0, "%s", err.message);
    run(e);
    pdl_engine_free(e);
    REQUIRE(g->embeddings == 1 && g->finished == 1 && g->tokens == 0 && g->n == H);
}

static weights W;

static void test_hf_and_gguf_match_the_float64_forward(void) {
    char *hf = write_hf(&W, "bert-hf", "", NULL);
    char *hfp = write_hf(&W, "bert-hf-prefixed", "bert.", NULL);
    char *gg = write_gguf(&W, "bert.gguf", 2);
    const char *paths[3] = {hf, hfp, gg};
    enum { N = 23 };
    int32_t ids[N];
    prompt_of(ids, N, 1);
    double *x = reference(&W, ids, N, BUG_NONE);
    got first[4];
    for (int f = 0; f < 3; f++) {
        pdl_model *m = load(paths[f]);
        pdl_model_info info;
        pdl_model_get_info(m, &info);
        CHECK(info.encoder);
        CHECK(strcmp(info.arch, "bert") == 0);
        CHECK_EQ_INT(info.ctx_len, P);
        if (f == 2) CHECK_EQ_INT(info.pooling, PDL_POOLING_CLS); /* GGUF pooling_type 2 */
        static const pdl_pooling kinds[2] = {PDL_POOLING_CLS, PDL_POOLING_MEAN};
        for (int k = 0; k < 2; k++)
            for (int nz = 0; nz < 2; nz++) {
                double want[H];
                pool(x, N, kinds[k], nz, want);
                got g;
                embed_alone(m, ids, N, kinds[k], nz, &g);
                double d = diff(g.vec, want);
                fprintf(stderr, "  %s %s%s: max diff %.3g\n", f == 2 ? "gguf" : f ? "hf(bert.)" : "hf",
                        k ? "mean" : "cls", nz ? " normalized" : "", d);
                CHECK_MSG(d <= TOL, "%s pooling from %s: %.3g from the float64 forward", k ? "mean" : "cls",
                          paths[f], d);
                if (k == 1 && nz == 0) first[f] = g;
            }
        pdl_model_free(m);
    }
    /* the same weights in three files: the same bits */
    CHECK(memcmp(first[0].vec, first[1].vec, sizeof first[0].vec) == 0);
    CHECK(memcmp(first[0].vec, first[2].vec, sizeof first[0].vec) == 0);
    /* every detail the reference spells out matters: each mistake lands far away */
    static const char *const names[] = {"", "causal mask", "positions one off", "no token-type row",
                                        "norm before the add", "GELU's tanh form"};
    for (int b = BUG_CAUSAL; b <= BUG_GELU_TANH; b++) {
        double *xb = reference(&W, ids, N, (bug)b), want[H];
        pool(xb, N, PDL_POOLING_MEAN, false, want);
        double d = diff(first[0].vec, want);
        fprintf(stderr, "  reference with %s: %.3g away\n", names[b], d);
        CHECK_MSG(d > 10 * TOL, "the reference with %s is only %.3g away: the test cannot see it", names[b], d);
        free(xb);
    }
    free(x), free(hf), free(hfp), free(gg);
}

/* A prompt's vector is the same alone, packed with others of every length
 * (several prompts in one step), under a small prefill chunk (an encoder's
 * prompt is one span: computed whole), and repeated (no prefix-cache hit
 * may give a row the K/V of another prompt's continuation: last-row
 * pooling, the one that would take cached blocks in a decoder). */
static void test_batch_invariance_and_no_cache_reuse(void) {
    char *hf = write_hf(&W, "bert-inv", "", NULL);
    pdl_model *m = load(hf);
    enum { NQ = 5 };
    int lens[NQ] = {P, 17, 1, 33, 32};
    int32_t ids[NQ][P];
    got alone[NQ], packed[NQ], again[NQ];
    for (int q = 0; q < NQ; q++) {
        prompt_of(ids[q], lens[q], q + 2);
        embed_alone(m, ids[q], lens[q], PDL_POOLING_LAST, true, &alone[q]);
    }
    /* prompts 3 and 4 share their first 32 tokens: a cache hit would hand 3
     * the K/V 4 computed with another continuation */
    memcpy(ids[3], ids[4], 32 * sizeof ids[3][0]);
    embed_alone(m, ids[3], lens[3], PDL_POOLING_LAST, true, &alone[3]);
    pdl_engine *e = engine(m, 8, 128);
    pdl_error err;
    memset(packed, 0, sizeof packed), memset(again, 0, sizeof again);
    for (int q = 0; q < NQ; q++) REQUIRE_MSG(add(e, ids[q], lens[q], PDL_POOLING_LAST, true, &packed[q], &err) == 0, "%s", err.message);
    run(e);
    for (int q = NQ - 1; q >= 0; q--) REQUIRE_MSG(add(e, ids[q], lens[q], PDL_POOLING_LAST, true, &again[q], &err) == 0, "%s", err.message);
    run(e);
    for (int q = 0; q < NQ; q++) {
        CHECK_MSG(memcmp(alone[q].vec, packed[q].vec, sizeof alone[q].vec) == 0, "prompt %d packed differs", q);
        CHECK_MSG(memcmp(alone[q].vec, again[q].vec, sizeof alone[q].vec) == 0, "prompt %d repeated differs", q);
    }
    /* and the float64 reference agrees with the one that shares a prefix */
    double *x = reference(&W, ids[3], lens[3], BUG_NONE), want[H];
    pool(x, lens[3], PDL_POOLING_LAST, true, want);
    CHECK(diff(again[3].vec, want) <= TOL);
    free(x);
    pdl_engine_free(e);
    pdl_model_free(m);
    free(hf);
}

/* What an encoder refuses, with a message that says why. */
static void test_refusals(void) {
    char *hf = write_hf(&W, "bert-ref", "", "mean");
    pdl_model *m = load(hf);
    pdl_model_info info;
    pdl_model_get_info(m, &info);
    CHECK_EQ_INT(info.pooling, PDL_POOLING_MEAN); /* 1_Pooling/config.json */
    CHECK(info.pool_normalize);                  /* 2_Normalize in modules.json */
    pdl_engine *e = engine(m, 256, 32);
    int32_t ids[P + 1];
    prompt_of(ids, P + 1, 9);
    got g = {0};
    pdl_error err;
    CHECK(add(e, ids, 8, PDL_POOLING_NONE, false, &g, &err) != 0);
    CHECK_MSG(strstr(err.message, "encoder"), "generation: %s", err.message);
    CHECK(add(e, ids, P + 1, PDL_POOLING_CLS, false, &g, &err) != 0);
    CHECK_MSG(strstr(err.message, "at most"), "too long: %s", err.message);
    CHECK(add(e, ids, 33, PDL_POOLING_CLS, false, &g, &err) != 0); /* more than a step's 32 tokens */
    CHECK_MSG(strstr(err.message, "max_num_batched_tokens"), "too long for a step: %s", err.message);
    int32_t one = 3;
    float h[H] = {0}, logit;
    CHECK(pdl_model_token_logits(m, h, &one, 1, &logit, &err) != 0);
    CHECK(strstr(err.message, "no LM head") != NULL);
    pdl_engine_free(e);
    pdl_model_free(m);
    free(hf);
}

int main(void) {
    W = make_weights();
    RUN(test_hf_and_gguf_match_the_float64_forward);
    RUN(test_batch_invariance_and_no_cache_reuse);
    RUN(test_refusals);
    return test_summary();
}
