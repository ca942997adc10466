/*
 * test_cli_bench.c - `pagedlm make-random-model` writes loadable models of
 * every weight type, and `pagedlm bench` measures them and reports what it
 * promises (JSON fields, the test names, positive speeds, the kernel family
 * PAGEDLM_ISA asked for). Speeds are not
 * asserted: benchmarks are measured, not tested.
 */
#define _POSIX_C_SOURCE 200809L
#include <jansson.h>
#include <sys/wait.h>

#include "kernels/cpu_features.h"
#include "pagedlm.h"
#include "test_util.h"

/* Runs pagedlm; *out gets stdout followed by stderr. */
static int sh(const char *args, char **out) {
    cmd_result r = test_pagedlm(args);
    size_t a = strlen(r.out), b = strlen(r.err);
    *out = malloc(a + b + 1);
    REQUIRE(*out != NULL);
    memcpy(*out, r.out, a);
    memcpy(*out + a, r.err, b + 1);
    int st = r.status;
    test_free_result(&r);
    return st;
}

/* A one-layer random model of Qwen3-0.6B's widths in the test folder. */
static char *random_model(const char *name, const char *dtype, int vocab) {
    char *path = test_tmp_path(name), args[1024], *out;
    snprintf(args, sizeof args, "make-random-model --preset qwen3-0.6b --layers 1 --vocab %d --dtype %s -o '%s'", vocab,
             dtype, path);
    int st = sh(args, &out);
    free(out);
    REQUIRE_MSG(st == 0, "make-random-model %s failed", dtype);
    return path;
}

static void test_random_models_of_every_dtype_load_and_run(void) {
    const char *dtypes[] = {"f32", "f16", "bf16", "q8_0"}, *names[] = {"F32", "F16", "BF16", "Q8_0"};
    for (int i = 0; i < 4; i++) {
        char name[64];
        snprintf(name, sizeof name, "rand-%s.gguf", dtypes[i]);
        char *path = random_model(name, dtypes[i], 640);
        pdl_model *m = NULL;
        pdl_error err;
        REQUIRE_MSG(pdl_model_load(&m, path, NULL, &err) == 0, "%s", err.message);
        pdl_context *ctx = test_context(m);
        pdl_model_info info;
        pdl_model_get_info(m, &info);
        CHECK(strcmp(info.weight_types, names[i]) == 0);
        CHECK_EQ_INT(info.hidden, 1024);
        CHECK_EQ_INT(info.head_dim, 128);
        CHECK_EQ_INT(info.vocab, 640);
        pdl_kv_cache *kv = NULL;
        REQUIRE(pdl_kv_cache_create(&kv, m, PDL_KV_F16, 16, 1, &err) == 0);
        int32_t toks[3] = {1, 2, 639};
        float *logits = malloc(640 * sizeof *logits);
        pdl_seq s = {0};
        REQUIRE_MSG(pdl_seq_forward(ctx, kv, &s, toks, NULL, 3, PDL_LOGITS_LAST, logits, &err) == 0, "%s", err.message);
        int finite = 0;
        for (int j = 0; j < 640; j++) finite += isfinite(logits[j]) && logits[j] != 0.0f;
        CHECK_EQ_INT(finite, 640);
        pdl_seq_release(kv, &s);
        pdl_kv_cache_free(kv);
        free(logits);
        pdl_context_free(ctx);
        pdl_model_free(m);
        free(path);
    }
}

/* --format hf writes the same weights as the GGUF: identical logits. */
static void test_random_model_hf_form_holds_the_gguf_weights(void) {
    char *g = test_tmp_path("same.gguf"), *h = test_tmp_path("same-hf"), args[2048], *out;
    snprintf(args, sizeof args, "make-random-model --preset qwen3-0.6b --layers 1 --vocab 300 --dtype bf16 --seed 9 -o '%s'",
             g);
    REQUIRE(sh(args, &out) == 0);
    free(out);
    snprintf(args, sizeof args,
             "make-random-model --preset qwen3-0.6b --layers 1 --vocab 300 --dtype bf16 --seed 9 --format hf -o '%s'", h);
    REQUIRE(sh(args, &out) == 0);
    free(out);
    char *la, *lb;
    snprintf(args, sizeof args, "logits -m '%s' --tokens 1,2,299 --all-rows --kv-cache-dtype f32", g);
    REQUIRE(sh(args, &la) == 0);
    snprintf(args, sizeof args, "logits -m '%s' --tokens 1,2,299 --all-rows --kv-cache-dtype f32", h);
    REQUIRE(sh(args, &lb) == 0);
    CHECK(strcmp(la, lb) == 0);
    CHECK(strstr(la, "\"logits\"") != NULL);
    free(la), free(lb);
    snprintf(args, sizeof args, "make-random-model --preset qwen3-0.6b --dtype q8_0 --format hf -o '%s'", h);
    CHECK_EQ_INT(sh(args, &out), 2);
    CHECK_CONTAINS(out, "Q8_0");
    free(out);
    free(g), free(h);
}

static void test_bench_reports_json_results(void) {
    char *path = random_model("bench.gguf", "f32", 512), args[1024], *out;
    snprintf(args, sizeof args, "bench -m '%s' -p 16,32 -n 4 -r 2 --batch 1,3 --json", path);
    int st = sh(args, &out);
    CHECK_EQ_INT(st, 0);
    json_error_t je;
    json_t *j = json_loads(out, 0, &je);
    REQUIRE_MSG(j != NULL && json_is_array(j), "not a JSON array: %s", out);
    CHECK_EQ_INT(json_array_size(j), 4);
    const char *tests[] = {"pp16", "pp32", "tg4", "tg4"};
    int batch[] = {1, 1, 1, 3};
    for (size_t i = 0; i < json_array_size(j) && i < 4; i++) {
        json_t *r = json_array_get(j, i);
        CHECK(strcmp(json_string_value(json_object_get(r, "test")), tests[i]) == 0);
        CHECK_EQ_INT(json_integer_value(json_object_get(r, "batch")), batch[i]);
        json_t *tps = json_object_get(r, "tokens_per_s");
        CHECK(json_number_value(json_object_get(tps, "median")) > 0);
        CHECK_EQ_INT(json_array_size(json_object_get(tps, "samples")), 2);
        const char *fields[] = {"commit", "cpu", "isa", "threads", "model", "weight_types", "n_prompt", "n_gen"};
        for (size_t f = 0; f < sizeof fields / sizeof fields[0]; f++)
            CHECK_MSG(json_object_get(r, fields[f]) != NULL, "missing field %s", fields[f]);
    }
    json_decref(j);
    free(out);
    CHECK_EQ_INT(sh("bench", &out), 2);
    CHECK_CONTAINS(out, "-m MODEL");
    free(out);
    free(path);
}

/* The kernel family named in the report: PAGEDLM_ISA=scalar is taken; an
 * unknown name, or a family of another architecture, is said on stderr and
 * the CPU's best family runs. */
static void test_bench_reports_the_kernel_family(void) {
    char *path = random_model("isa.gguf", "f16", 512), args[1024], *out;
    snprintf(args, sizeof args, "bench -m '%s' -p 8 -n 2 -r 1 --json", path);
    const char *best = cpu_isa_name(cpu_isa_best());
    const char *other = cpu_isa_supported(PDL_ISA_NEON) ? "avx512" : "neon"; /* another architecture's */
    struct {
        const char *env, *isa, *said;
    } cases[] = {
        {"scalar", "scalar", NULL},
        {"avx-512", best, "PAGEDLM_ISA=avx-512 is not one of scalar, avx2, avx512, neon"},
        {other, best, "is not supported by this CPU"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        setenv("PAGEDLM_ISA", cases[i].env, 1);
        int st = sh(args, &out);
        unsetenv("PAGEDLM_ISA");
        CHECK_EQ_INT(st, 0);
        char want[64];
        snprintf(want, sizeof want, "\"isa\": \"%s\"", cases[i].isa);
        CHECK_CONTAINS(out, want);
        if (cases[i].said) CHECK_CONTAINS(out, cases[i].said);
        else CHECK(strstr(out, "PAGEDLM_ISA") == NULL);
        free(out);
    }
    free(path);
}

int main(void) {
    RUN(test_random_models_of_every_dtype_load_and_run);
    RUN(test_random_model_hf_form_holds_the_gguf_weights);
    RUN(test_bench_reports_json_results);
    RUN(test_bench_reports_the_kernel_family);
    return test_summary();
}
