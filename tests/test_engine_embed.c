/*
 * test_engine_embed.c - embedding requests through the engine
 * (pdl_request_params.pooling): what the pooled vector is, and that it
 * does not depend on the batch, the chunk size or the order of requests.
 *
 * What the vector must be is checked through the LM head, independently of
 * the pooling code: stories260K's logits are W h (no bias, no scaling) for a
 * row's final-normed hidden state h, so a LAST embedding (not normalized)
 * times W must give the last row's logits, a CLS one row 0's, and a MEAN one
 * the mean of every row's logits (the head is linear). Logits come from the
 * plain forward (test_all_row_logits); the products are taken in float64
 * here. Tolerance 2e-5 absolute on logits of magnitude ~10: float32
 * rounding of 64-term dot products, and of the mean's sum over up to 40
 * rows; a pooled row one position off lands ~1 away.
 */
#include <math.h>
#include <string.h>

#include "model/model.h"
#include "pagedlm.h"
#include "test_util.h"

#define TOL 2e-5

typedef struct got {
    float vec[4096];
    int n;
    int embeddings, finished, tokens;
    char finish[16];
} got;

static void on_event(const pdl_event *ev, void *user) {
    got *g = user;
    if (ev->kind == PDL_EVENT_EMBEDDING) {
        g->embeddings++;
        g->n = ev->n_embedding;
        memcpy(g->vec, ev->embedding, (size_t)ev->n_embedding * sizeof *g->vec);
    } else if (ev->kind == PDL_EVENT_FINISHED) {
        g->finished++;
        snprintf(g->finish, sizeof g->finish, "%s", ev->finish_reason);
    } else if (ev->kind == PDL_EVENT_TOKEN) {
        g->tokens++;
    }
}

static pdl_model *load_stories(void) {
    char *path = test_data_path("models/stories260K/stories260K.gguf");
    pdl_model *m = NULL;
    pdl_error err;
    pdl_model_options o = {.n_threads = 2};
    REQUIRE_MSG(pdl_model_load(&m, path, &o, &err) == 0, "%s", err.message);
    free(path);
    return m;
}

static pdl_engine *engine(pdl_model *m, int chunk) {
    pdl_engine_options o = {.block_size = 16, .max_prefill_chunk = chunk, .kv_dtype = PDL_KV_F32,
                            .max_num_batched_tokens = 256};
    pdl_engine *e = NULL;
    pdl_error err;
    REQUIRE_MSG(pdl_engine_create(&e, m, &o, &err) == 0, "%s", err.message);
    return e;
}

static void add(pdl_engine *e, const int32_t *prompt, int n, pdl_pooling pooling, bool normalize, got *g) {
    pdl_request_params p = {.logprobs = -1, .prompt_logprobs = -1, .pooling = pooling, .normalize = normalize};
    pdl_error err;
    REQUIRE_MSG(pdl_engine_add_request(e, prompt, (size_t)n, &p, on_event, g, NULL, &err) == 0, "%s", err.message);
}

static void run(pdl_engine *e) {
    pdl_error err;
    REQUIRE_MSG(pdl_engine_run_until_idle(e, &err) == 0, "%s", err.message);
}

static void prompt_of(int32_t *p, int n, int salt) {
    p[0] = 1; /* BOS */
    for (int i = 1; i < n; i++) p[i] = (int32_t)(3 + (i * 37 + salt * 11) % 500);
}

/* max |W v - want| over the vocabulary, W the model's output matrix (F32). */
static double head_diff(const pdl_model *m, const float *v, const double *want) {
    const pdl_tensor *w = &m->w.output;
    REQUIRE(w->dtype == PDL_DTYPE_F32);
    int H = m->cfg.hidden, V = m->cfg.vocab;
    double d = 0;
    for (int t = 0; t < V; t++) {
        const float *row = (const float *)w->data + (size_t)t * H;
        double s = 0;
        for (int h = 0; h < H; h++) s += (double)row[h] * v[h];
        d = fmax(d, fabs(s - want[t]));
    }
    return d;
}

static void test_pooled_vectors_are_the_heads_inputs(void) {
    pdl_model *m = load_stories();
    int H = m->cfg.hidden, V = m->cfg.vocab;
    enum { N = 40 };
    int32_t prompt[N];
    prompt_of(prompt, N, 1);
    float *logits = test_all_row_logits(m, prompt, N);
    double *want = malloc((size_t)V * sizeof *want);
    static const pdl_pooling kinds[3] = {PDL_POOLING_LAST, PDL_POOLING_CLS, PDL_POOLING_MEAN};
    static const char *const names[3] = {"last", "cls", "mean"};
    for (int k = 0; k < 3; k++) {
        for (int t = 0; t < V; t++) {
            if (kinds[k] == PDL_POOLING_MEAN) {
                double s = 0;
                for (int r = 0; r < N; r++) s += logits[(size_t)r * V + t];
                want[t] = s / N;
            } else {
                want[t] = logits[(size_t)(kinds[k] == PDL_POOLING_LAST ? N - 1 : 0) * V + t];
            }
        }
        pdl_engine *e = engine(m, 16); /* the prompt in three chunks */
        got g = {0};
        add(e, prompt, N, kinds[k], false, &g);
        run(e);
        CHECK_EQ_INT(g.embeddings, 1);
        CHECK_EQ_INT(g.finished, 1);
        CHECK_EQ_INT(g.tokens, 0);
        CHECK(strcmp(g.finish, "stop") == 0);
        CHECK_EQ_INT(g.n, H);
        double d = head_diff(m, g.vec, want);
        fprintf(stderr, "  %s: max |W v - logits| %.3g\n", names[k], d);
        CHECK_MSG(d <= TOL, "%s pooling: %.3g from the logits it must give", names[k], d);
        /* normalized: unit length, the same direction */
        got gn = {0};
        add(e, prompt, N, kinds[k], true, &gn);
        run(e);
        double norm = 0, nn = 0;
        for (int h = 0; h < H; h++) norm += (double)g.vec[h] * g.vec[h], nn += (double)gn.vec[h] * gn.vec[h];
        CHECK_MSG(fabs(nn - 1.0) < 1e-6, "normalized length^2 %.9g", nn);
        for (int h = 0; h < H; h++) CHECK(fabs(gn.vec[h] - g.vec[h] / sqrt(norm)) < 1e-6);
        pdl_engine_free(e);
    }
    /* the row next to the last is another vector: a position off is caught */
    for (int t = 0; t < V; t++) want[t] = logits[(size_t)(N - 2) * V + t];
    pdl_engine *e = engine(m, 256);
    got g = {0};
    add(e, prompt, N, PDL_POOLING_LAST, false, &g);
    run(e);
    CHECK(head_diff(m, g.vec, want) > 1000 * TOL);
    pdl_engine_free(e);
    free(logits), free(want);
    pdl_model_free(m);
}

/* Alone, or among generation and other embedding requests at another chunk
 * size, the bytes of each embedding are the same. */
static void test_embeddings_do_not_depend_on_the_batch(void) {
    pdl_model *m = load_stories();
    int H = m->cfg.hidden;
    static const pdl_pooling kinds[3] = {PDL_POOLING_LAST, PDL_POOLING_MEAN, PDL_POOLING_CLS};
    int32_t prompts[3][60];
    int lens[3] = {60, 23, 41};
    got alone[3];
    for (int k = 0; k < 3; k++) {
        prompt_of(prompts[k], lens[k], k + 5);
        pdl_engine *e = engine(m, 256);
        memset(&alone[k], 0, sizeof alone[k]);
        add(e, prompts[k], lens[k], kinds[k], true, &alone[k]);
        run(e);
        pdl_engine_free(e);
    }
    pdl_engine *e = engine(m, 8); /* chunks of 8, everything at once */
    got mixed[3], gen = {0};
    memset(mixed, 0, sizeof mixed);
    int32_t other[30];
    prompt_of(other, 30, 9);
    pdl_request_params p = {.logprobs = -1, .prompt_logprobs = -1, .max_tokens = 20};
    pdl_error err;
    REQUIRE(pdl_engine_add_request(e, other, 30, &p, on_event, &gen, NULL, &err) == 0);
    for (int k = 2; k >= 0; k--) add(e, prompts[k], lens[k], kinds[k], true, &mixed[k]);
    run(e);
    CHECK_EQ_INT(gen.tokens, 20);
    for (int k = 0; k < 3; k++) {
        CHECK_EQ_INT(mixed[k].n, H);
        CHECK_MSG(memcmp(mixed[k].vec, alone[k].vec, (size_t)H * sizeof(float)) == 0,
                  "embedding %d differs in a batch", k);
    }
    pdl_engine_free(e);
    pdl_model_free(m);
}

/* A pool too small for everything at once: the newest sequences are
 * preempted and recomputed, an embedding request among them; its mean
 * counts each row once (the recompute adds none twice) and its bytes are
 * those it gets alone. */
static void test_a_preempted_embedding_is_unchanged(void) {
    pdl_model *m = load_stories();
    enum { N = 100 };
    int32_t prompt[N], other[3][40];
    prompt_of(prompt, N, 4);
    pdl_engine *e = engine(m, 8);
    got alone = {0};
    add(e, prompt, N, PDL_POOLING_MEAN, true, &alone);
    run(e);
    pdl_engine_free(e);
    size_t block_bytes = pdl_kv_cache_block_bytes(m, PDL_KV_F32, 16);
    pdl_engine_options o = {.block_size = 16, .max_prefill_chunk = 8, .kv_dtype = PDL_KV_F32,
                            .max_num_batched_tokens = 256, .kv_cache_memory = block_bytes * 14};
    pdl_error err;
    REQUIRE_MSG(pdl_engine_create(&e, m, &o, &err) == 0, "%s", err.message);
    got gen[3], mixed = {0};
    memset(gen, 0, sizeof gen);
    pdl_request_params p = {.logprobs = -1, .prompt_logprobs = -1, .max_tokens = 80};
    for (int k = 0; k < 3; k++) {
        prompt_of(other[k], 40, 20 + k);
        REQUIRE(pdl_engine_add_request(e, other[k], 40, &p, on_event, &gen[k], NULL, &err) == 0);
    }
    add(e, prompt, N, PDL_POOLING_MEAN, true, &mixed);
    run(e);
    pdl_engine_stats st;
    pdl_engine_get_stats(e, &st);
    CHECK_MSG(st.preemptions > 0, "the pool was meant to force preemption");
    fprintf(stderr, "  %llu preemptions\n", (unsigned long long)st.preemptions);
    CHECK_EQ_INT(mixed.embeddings, 1);
    /* each prompt counted once, when its prefill completed (a recompute adds none) */
    CHECK_EQ_INT((int)st.prompt_tokens, 3 * 40 + N);
    CHECK_MSG(memcmp(mixed.vec, alone.vec, (size_t)m->cfg.hidden * sizeof(float)) == 0,
              "the embedding differs after preemption");
    pdl_engine_free(e);
    pdl_model_free(m);
}

/* What an embedding request cannot take is refused when it is added. */
static void test_embedding_requests_refuse_generation_options(void) {
    pdl_model *m = load_stories();
    pdl_engine *e = engine(m, 256);
    int32_t prompt[8];
    prompt_of(prompt, 8, 3);
    pdl_request_params p = {.logprobs = -1, .prompt_logprobs = 2, .pooling = PDL_POOLING_LAST};
    pdl_error err;
    got g = {0};
    CHECK(pdl_engine_add_request(e, prompt, 8, &p, on_event, &g, NULL, &err) != 0);
    CHECK_CONTAINS(err.message, "embedding request");
    p.prompt_logprobs = -1, p.n = 2;
    CHECK(pdl_engine_add_request(e, prompt, 8, &p, on_event, &g, NULL, &err) != 0);
    p.n = 1, p.pooling = (pdl_pooling)7;
    CHECK(pdl_engine_add_request(e, prompt, 8, &p, on_event, &g, NULL, &err) != 0);
    CHECK_CONTAINS(err.message, "pooling");
    pdl_engine_free(e);
    pdl_model_free(m);
}

int main(void) {
    RUN(test_pooled_vectors_are_the_heads_inputs);
    RUN(test_embeddings_do_not_depend_on_the_batch);
    RUN(test_a_preempted_embedding_is_unchanged);
    RUN(test_embedding_requests_refuse_generation_options);
    return test_summary();
}
