/*
 * test_rerank_reference.c - a yes/no reranker's scores and order (what
 * `serve --task rerank` computes for /v1/rerank and /v1/score: an
 * embedding request keeping the last row's final-normed hidden state, then
 * logit(yes) - logit(no) from the LM head's two rows,
 * pdl_model_token_logits) against reference logits.
 *
 * The model is qwen3-tiny, whose ../shared refs.json holds the logits of
 * every row of a 40-token prompt from llama.cpp, cross-checked against an
 * independent float64 forward (agreement within 4e-7). Row k - 1's logits
 * are the last row's of the prompt's first k tokens, so each prefix is a
 * "document" whose reference score is ref[k - 1][yes] - ref[k - 1][no].
 * The documents go through one engine together, as the server sends a
 * rerank request's pairs, and the engine's ranking must be the
 * reference's.
 *
 * Tolerance: 2e-5 on a score (two logits, each within the 1e-5 that
 * test_model_refs holds qwen3-tiny's logits to; observed 1e-7). Scoring the
 * row before the last instead lands at least 2.3e-3 (over 100 tolerances)
 * away on every document, so a pooled row one off is caught.
 */
#include <jansson.h>
#include <math.h>
#include <string.h>

#include "pagedlm.h"
#include "test_util.h"

#define TOL 2e-5

enum { N_DOCS = 9, NO_ID = 17, YES_ID = 301 };

typedef struct got {
    float vec[1024];
    int n, embeddings;
} got;

static void on_event(const pdl_event *ev, void *user) {
    got *g = user;
    if (ev->kind == PDL_EVENT_EMBEDDING && ev->n_embedding <= 1024) {
        g->embeddings++;
        g->n = ev->n_embedding;
        memcpy(g->vec, ev->embedding, (size_t)ev->n_embedding * sizeof *g->vec);
    }
}

static double ref_score(json_t *rows, int row) {
    json_t *r = json_array_get(rows, (size_t)row);
    return json_number_value(json_array_get(r, YES_ID)) - json_number_value(json_array_get(r, NO_ID));
}

static void test_scores_and_order_match_the_reference(void) {
    char *refs_path = test_data_path("models/qwen3-tiny/refs.json");
    char *model_path = test_data_path("models/qwen3-tiny/model-f32.gguf");
    json_error_t je;
    json_t *refs = json_load_file(refs_path, 0, &je);
    REQUIRE_MSG(refs, "%s: %s", refs_path, je.text);
    json_t *c = json_array_get(json_object_get(refs, "cases"), 1);
    json_t *tok = json_object_get(c, "tokens"), *rows = json_object_get(c, "logits_all_rows");
    REQUIRE(json_array_size(tok) == 40 && json_array_size(rows) == 40);
    int32_t ids[40];
    for (int i = 0; i < 40; i++) ids[i] = (int32_t)json_integer_value(json_array_get(tok, (size_t)i));

    pdl_model *m = NULL;
    pdl_error err;
    pdl_model_options mo = {.n_threads = 2};
    REQUIRE_MSG(pdl_model_load(&m, model_path, &mo, &err) == 0, "%s", err.message);
    pdl_engine_options eo = {.block_size = 16, .max_prefill_chunk = 16, .kv_dtype = PDL_KV_F32,
                             .max_num_batched_tokens = 64};
    pdl_engine *e = NULL;
    REQUIRE_MSG(pdl_engine_create(&e, m, &eo, &err) == 0, "%s", err.message);
    got g[N_DOCS];
    int len[N_DOCS];
    memset(g, 0, sizeof g);
    for (int d = 0; d < N_DOCS; d++) {
        len[d] = 40 - 4 * d; /* 40, 36, ..., 8: they share prefixes, as pairs share their query */
        pdl_request_params p = {.logprobs = -1, .prompt_logprobs = -1, .pooling = PDL_POOLING_LAST,
                                .normalize = false, .max_tokens = 1};
        REQUIRE_MSG(pdl_engine_add_request(e, ids, (size_t)len[d], &p, on_event, &g[d], NULL, &err) == 0, "%s",
                    err.message);
    }
    REQUIRE_MSG(pdl_engine_run_until_idle(e, &err) == 0, "%s", err.message);

    double score[N_DOCS], want[N_DOCS], worst = 0, off_by_one = INFINITY;
    for (int d = 0; d < N_DOCS; d++) {
        REQUIRE(g[d].embeddings == 1);
        int32_t pair[2] = {NO_ID, YES_ID};
        float lg[2];
        REQUIRE_MSG(pdl_model_token_logits(m, g[d].vec, pair, 2, lg, &err) == 0, "%s", err.message);
        score[d] = (double)lg[1] - lg[0];
        want[d] = ref_score(rows, len[d] - 1);
        worst = fmax(worst, fabs(score[d] - want[d]));
        off_by_one = fmin(off_by_one, fabs(score[d] - ref_score(rows, len[d] - 2)));
        fprintf(stderr, "  document of %2d tokens: score %+.6f, reference %+.6f\n", len[d], score[d], want[d]);
    }
    CHECK_MSG(worst <= TOL, "scores %.3g from the reference", worst);
    CHECK_MSG(off_by_one > 50 * TOL, "the row before the last scores only %.3g away: the test cannot see it",
              off_by_one);
    /* the ranking: every pair the reference orders clearly, the engine orders alike */
    int ordered = 0;
    for (int a = 0; a < N_DOCS; a++)
        for (int b = 0; b < N_DOCS; b++)
            if (want[a] - want[b] > 2 * TOL) {
                CHECK_MSG(score[a] > score[b], "documents %d and %d ranked apart from the reference", a, b);
                ordered++;
            }
    CHECK_MSG(ordered >= N_DOCS, "only %d ordered pairs: the documents' scores are too close to rank", ordered);
    pdl_engine_free(e);
    pdl_model_free(m);
    json_decref(refs);
    free(refs_path), free(model_path);
}

int main(void) {
    RUN(test_scores_and_order_match_the_reference);
    return test_summary();
}
