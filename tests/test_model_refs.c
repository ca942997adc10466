/*
 * test_model_refs.c - the forward pass against independent references.
 *
 * stories260K: all-row logits from a float64 Hugging Face-semantics forward
 * and greedy tokens from llama2.c. qwen3-tiny, llama31-tiny, qwen2-tiny:
 * all-row logits, greedy continuations and per-step logits from llama.cpp
 * (cross-checked in float64), for the GGUF and the Hugging Face copy.
 *
 * granite-tiny, cohere-tiny, gemma2-tiny, gemma2-softcap-tiny: the same
 * checks for the families whose differences are data in pdl_model_config.
 * Granite at 1e-6 (its 1/128 attention scale makes attention nearly uniform:
 * a RoPE bug moves logits by only 5e-6). Gemma 2 at 1e-3 against llama.cpp,
 * whose GELU goes through an fp16 table (up to 4e-4 from exact), and at 1e-5
 * against the exact float64 Hugging Face-semantics logits of the references.
 *
 * Tolerances (F32 KV cache, F32 activations): 1e-5 absolute for the tiny
 * models, whose references agree with float64 within 4e-7 and whose known
 * subtle bugs move logits by more (missing Llama-3.1 RoPE scaling: 1.2e-4);
 * 1e-4 for stories260K, whose logits are ~10x larger (observed 8e-6).
 * Q8_0 weights: activations are quantized per 32-block exactly as llama.cpp
 * does, so the logits land within ~5e-9 of its references when every float
 * operation upstream rounds as llama.cpp's do; since the next layer rounds
 * activations to integers, a last-bit difference elsewhere (e.g. attention
 * summed in another order) can flip one quantized value and move logits by
 * ~2e-3. Checked at 5e-3: F32 activations would land ~0.012 away. Q4_0
 * weights: the same activations and order; tolerances at the test.
 */
#include <jansson.h>

#include "pagedlm.h"
#include "test_util.h"

static json_t *load_json(const char *rel) {
    char *path = test_data_path(rel);
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    REQUIRE_MSG(j != NULL, "%s: %s", path, je.text);
    free(path);
    return j;
}

static pdl_model *load_model(const char *rel, int threads) {
    char *path = test_data_path(rel);
    pdl_model *m = NULL;
    pdl_error err;
    pdl_model_options o = {.n_threads = threads, .log = test_log_no_unused_tensors, .log_user = (void *)path};
    int rc = pdl_model_load(&m, path, &o, &err);
    REQUIRE_MSG(rc == 0, "%s: %s", path, err.message);
    free(path);
    return m;
}

static int32_t *json_ids(json_t *arr, size_t *n) {
    *n = json_array_size(arr);
    int32_t *ids = malloc(*n * sizeof *ids);
    for (size_t i = 0; i < *n; i++) ids[i] = (int32_t)json_integer_value(json_array_get(arr, i));
    return ids;
}

static double max_diff_rows(const float *got, json_t *want_rows, int vocab) {
    double md = 0;
    for (size_t r = 0; r < json_array_size(want_rows); r++) {
        json_t *row = json_array_get(want_rows, r);
        REQUIRE((int)json_array_size(row) == vocab);
        for (int j = 0; j < vocab; j++) {
            double d = fabs(got[r * vocab + j] - json_number_value(json_array_get(row, j)));
            if (d > md) md = d;
        }
    }
    return md;
}

static void check_logits_case(const char *model_rel, json_t *tokens_j, json_t *rows_j, double tol) {
    pdl_model *m = load_model(model_rel, 0);
    pdl_model_info info;
    pdl_model_get_info(m, &info);
    size_t n;
    int32_t *tokens = json_ids(tokens_j, &n);
    float *logits = test_all_row_logits(m, tokens, n);
    double md = max_diff_rows(logits, rows_j, info.vocab);
    CHECK_MSG(md <= tol, "%s: %zu tokens: max |diff| %.3g > %.3g", model_rel, n, md, tol);
    fprintf(stderr, "  %s: %zu rows, max |diff| %.3g (tolerance %.0e)\n", model_rel, n, md, tol);
    free(logits);
    free(tokens);
    pdl_model_free(m);
}

/* Greedy continuation through the incremental (decode) path: each step's
 * logits against the reference's, and the tokens themselves. */
static void check_greedy_case(const char *model_rel, json_t *c, double tol) {
    pdl_model *m = load_model(model_rel, 0);
    pdl_context *ctx = test_context(m);
    pdl_model_info info;
    pdl_model_get_info(m, &info);
    size_t n;
    int32_t *tokens = json_ids(json_object_get(c, "tokens"), &n);
    json_t *next = json_object_get(c, "greedy_next_32"), *steps = json_object_get(c, "greedy_step_logits");
    size_t n_steps = json_array_size(next);
    REQUIRE(n_steps > 0 && json_array_size(steps) == n_steps);
    pdl_kv_cache *kv = NULL;
    pdl_error err;
    REQUIRE(pdl_kv_cache_create(&kv, m, PDL_KV_F32, 16, (int)((n + n_steps) / 16 + 1), &err) == 0);
    float *logits = malloc((size_t)info.vocab * sizeof *logits);
    pdl_seq seq = {0};
    REQUIRE_MSG(pdl_seq_forward(ctx, kv, &seq, tokens, NULL, (int)n, PDL_LOGITS_LAST, logits, &err) == 0, "%s", err.message);
    double md = 0;
    int mismatched = -1;
    for (size_t s = 0; s < n_steps; s++) {
        json_t *row = json_array_get(steps, s);
        for (int j = 0; j < info.vocab; j++) {
            double d = fabs(logits[j] - json_number_value(json_array_get(row, j)));
            if (d > md) md = d;
        }
        int32_t best = 0;
        for (int j = 1; j < info.vocab; j++)
            if (logits[j] > logits[best]) best = j;
        int32_t want = (int32_t)json_integer_value(json_array_get(next, s));
        if (best != want && mismatched < 0) mismatched = (int)s;
        int32_t tok = want; /* follow the reference so every step's logits compare */
        if (s + 1 < n_steps)
            REQUIRE_MSG(pdl_seq_forward(ctx, kv, &seq, &tok, NULL, 1, PDL_LOGITS_LAST, logits, &err) == 0, "%s", err.message);
    }
    CHECK_MSG(mismatched < 0, "%s: greedy token differs at step %d", model_rel, mismatched);
    CHECK_MSG(md <= tol, "%s: per-step logits max |diff| %.3g > %.3g", model_rel, md, tol);
    pdl_seq_release(kv, &seq);
    pdl_kv_cache_free(kv);
    free(logits);
    free(tokens);
    pdl_context_free(ctx);
    pdl_model_free(m);
}

/* Both forms of models/NAME: all-row logits against llama.cpp (tol) and,
 * where the references have them, against exact float64 logits (f64_tol);
 * greedy per-step logits against llama.cpp (tol). */
static void check_tiny_model_tol(const char *name, double tol, double f64_tol) {
    char rel[256];
    snprintf(rel, sizeof rel, "models/%s/refs.json", name);
    json_t *refs = load_json(rel);
    const char *forms[] = {"model-f32.gguf", "hf"};
    for (int f = 0; f < 2; f++) {
        char model_rel[256];
        snprintf(model_rel, sizeof model_rel, "models/%s/%s", name, forms[f]);
        json_t *cases = json_object_get(refs, "cases");
        REQUIRE(json_array_size(cases) >= 2);
        for (size_t i = 0; i < json_array_size(cases); i++) {
            json_t *c = json_array_get(cases, i);
            check_logits_case(model_rel, json_object_get(c, "tokens"), json_object_get(c, "logits_all_rows"), tol);
            json_t *f64 = json_object_get(c, "numpy_hf_f64_logits_all_rows");
            if (f64) check_logits_case(model_rel, json_object_get(c, "tokens"), f64, f64_tol);
            check_greedy_case(model_rel, c, tol);
        }
    }
    json_decref(refs);
}

static void check_tiny_model(const char *name) { check_tiny_model_tol(name, 1e-5, 1e-5); }

static void test_qwen3_tiny_matches_llama_cpp(void) { check_tiny_model("qwen3-tiny"); }
static void test_llama31_tiny_matches_llama_cpp(void) { check_tiny_model("llama31-tiny"); }
static void test_qwen2_tiny_matches_llama_cpp(void) { check_tiny_model("qwen2-tiny"); }
static void test_granite_tiny_matches_llama_cpp(void) { check_tiny_model_tol("granite-tiny", 1e-6, 1e-6); }
static void test_cohere_tiny_matches_llama_cpp(void) { check_tiny_model("cohere-tiny"); }
static void test_gemma2_tiny_matches_llama_cpp_and_float64(void) { check_tiny_model_tol("gemma2-tiny", 1e-3, 1e-5); }
static void test_gemma2_softcap_tiny_matches_llama_cpp_and_float64(void) {
    check_tiny_model_tol("gemma2-softcap-tiny", 1e-3, 1e-5);
}

/* The model-<kind>.gguf copy against refs.json "quantized" -> kind. */
static void check_quantized(const char *name, const char *kind, double tol) {
    char rel[256], model_rel[256];
    snprintf(rel, sizeof rel, "models/%s/refs.json", name);
    json_t *refs = load_json(rel);
    json_t *q = json_object_get(json_object_get(refs, "quantized"), kind);
    REQUIRE_MSG(q != NULL, "%s: no quantized %s reference", rel, kind);
    snprintf(model_rel, sizeof model_rel, "models/%s/model-%s.gguf", name, kind);
    check_logits_case(model_rel, json_object_get(q, "tokens"), json_object_get(q, "logits_all_rows"), tol);
    json_decref(refs);
}

static void test_q8_0_weights_match_llama_cpp(void) {
    check_quantized("qwen3-tiny", "q8_0", 5e-3);
    check_quantized("llama31-tiny", "q8_0", 5e-3);
}

/* Q4_0 weights take the same Q8_0 activations, in llama.cpp's x86 order:
 * llama31-tiny lands 1.2e-7 away (F32 activations: 9.5e-3). qwen3-tiny
 * carries the upstream last-bit difference that costs its Q8_0 copy 2.2e-3;
 * with 4-bit weights the flipped activations move logits by 8.9e-3 (F32
 * activations: 1.3e-2), hence its wider 1.1e-2. */
static void test_q4_0_weights_match_llama_cpp(void) {
    check_quantized("qwen3-tiny", "q4_0", 1.1e-2);
    check_quantized("llama31-tiny", "q4_0", 5e-3);
}

static void test_stories_logits_match_float64_reference(void) {
    json_t *ref = load_json("reference/stories260K-logits-once-upon-a-time.json");
    check_logits_case("models/stories260K/stories260K.gguf", json_object_get(ref, "input_ids"),
                      json_object_get(ref, "logits"), 1e-4);
    check_logits_case("models/stories260K-hf", json_object_get(ref, "input_ids"), json_object_get(ref, "logits"),
                      1e-4);
    json_decref(ref);
}

typedef struct greedy_out {
    int32_t tokens[512];
    size_t n;
} greedy_out;

static void on_greedy(const pdl_event *ev, void *user) {
    greedy_out *g = user;
    if (ev->kind == PDL_EVENT_TOKEN && g->n < 512) g->tokens[g->n++] = ev->token;
}

/* Greedy generation through the engine (`pagedlm run`'s path; F16 KV, the
 * default, and F32) against llama2.c's tokens: the prompt case (60 new
 * tokens) and 200 from BOS. */
static void check_stories_greedy(const char *model_rel) {
    json_t *ref = load_json("reference/stories260K-greedy.json");
    json_t *cases = json_object_get(ref, "cases");
    for (size_t i = 0; i < json_array_size(cases); i++) {
        json_t *c = json_array_get(cases, i);
        size_t n_prompt, n_all;
        int32_t *prompt = json_ids(json_object_get(c, "prompt_tokens"), &n_prompt);
        int32_t *all = json_ids(json_object_get(c, "sequence_including_prompt"), &n_all);
        pdl_model *m = NULL;
        pdl_error err;
        char *path = test_data_path(model_rel);
        /* llama2.c trained it with 512 positions; the GGUF says 128 */
        pdl_model_options o = {.ctx_size = 512, .allow_long_context = true};
        REQUIRE_MSG(pdl_model_load(&m, path, &o, &err) == 0, "%s", err.message);
        for (int kvt = 0; kvt < 2; kvt++) {
            pdl_engine_options eo = {.kv_dtype = kvt ? PDL_KV_F32 : PDL_KV_F16, .max_num_seqs = 1};
            pdl_engine *e = NULL;
            REQUIRE_MSG(pdl_engine_create(&e, m, &eo, &err) == 0, "%s", err.message);
            pdl_request_params rp = {.max_tokens = (int)(n_all - n_prompt), .logprobs = -1, .prompt_logprobs = -1};
            static greedy_out out;
            out.n = 0;
            REQUIRE_MSG(pdl_engine_add_request(e, prompt, n_prompt, &rp, on_greedy, &out, NULL, &err) == 0, "%s",
                        err.message);
            REQUIRE_MSG(pdl_engine_run_until_idle(e, &err) == 0, "%s", err.message);
            pdl_engine_free(e);
            const int32_t *gen = out.tokens;
            size_t n_gen = out.n;
            CHECK_EQ_INT(n_gen, n_all - n_prompt);
            size_t first_diff = n_gen;
            for (size_t k = 0; k < n_gen && k < n_all - n_prompt; k++)
                if (gen[k] != all[n_prompt + k]) {
                    first_diff = k;
                    break;
                }
            CHECK_MSG(first_diff == n_gen, "%s (%s KV): %zu-token prompt: first differing token at %zu", model_rel,
                      kvt ? "F32" : "F16", n_prompt, first_diff);
        }
        pdl_model_free(m);
        free(path);
        free(prompt);
        free(all);
    }
    json_decref(ref);
}

static void test_stories_gguf_greedy_matches_llama2c(void) {
    check_stories_greedy("models/stories260K/stories260K.gguf");
}
static void test_stories_hf_greedy_matches_llama2c(void) { check_stories_greedy("models/stories260K-hf"); }

int main(void) {
    RUN(test_stories_logits_match_float64_reference);
    RUN(test_stories_gguf_greedy_matches_llama2c);
    RUN(test_stories_hf_greedy_matches_llama2c);
    RUN(test_qwen3_tiny_matches_llama_cpp);
    RUN(test_llama31_tiny_matches_llama_cpp);
    RUN(test_qwen2_tiny_matches_llama_cpp);
    RUN(test_granite_tiny_matches_llama_cpp);
    RUN(test_cohere_tiny_matches_llama_cpp);
    RUN(test_gemma2_tiny_matches_llama_cpp_and_float64);
    RUN(test_gemma2_softcap_tiny_matches_llama_cpp_and_float64);
    RUN(test_q8_0_weights_match_llama_cpp);
    RUN(test_q4_0_weights_match_llama_cpp);
    return test_summary();
}
