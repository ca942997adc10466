/*
 * test_cli_bench.c - `pagedlm make-random-model` writes loadable models of
 * every weight type, and `pagedlm bench` measures them and reports what it
 * promises (JSON fields, the test names, positive speeds, the kernel family
 * PAGEDLM_ISA asked for, the depth -d puts in the cache); the Qwen3.5 presets are laid out as llama.cpp's
 * converter writes qwen35 / qwen35moe. Speeds are not asserted: benchmarks
 * are measured, not tested.
 */
#define _POSIX_C_SOURCE 200809L
#include <jansson.h>
#include <sys/wait.h>

#include "format/gguf.h"
#include "kernels/attention.h"
#include "kernels/cpu_ops.h"
#include "kernels/cpu_features.h"
#include "kernels/fp16.h"
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
    const char *dtypes[] = {"f32",  "f16",  "bf16", "q8_0",   "q4_0", "mxfp4", "iq4_nl", "q4_k",  "q5_k",
                            "q6_k", "q3_k", "q2_k", "iq4_xs", "q5_0", "q4_1",  "q5_1",   "tq2_0", "tq1_0"};
    const char *names[] = {"F32",  "F16",  "BF16", "Q8_0",   "Q4_0", "MXFP4", "IQ4_NL", "Q4_K",  "Q5_K",
                           "Q6_K", "Q3_K", "Q2_K", "IQ4_XS", "Q5_0", "Q4_1",  "Q5_1",   "TQ2_0", "TQ1_0"};
    for (int i = 0; i < (int)(sizeof dtypes / sizeof dtypes[0]); i++) {
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

/* The k-quant writers put each value where the format's definition
 * (kernels/kquant.c) reads it: a matrix of each, dequantized, is the same
 * seed's F32 matrix within its quantization error. The bounds are the
 * relative RMS error a uniform value rounded to the nearest of 2^bits
 * steps over its group's range has (step / sqrt(12)), with room for the
 * rounded scales; a value read from another element's bits (a shifted
 * nibble, a swapped half) is off by about the values' own RMS (~100%). */
static void test_random_k_quant_models_hold_the_f32_values(void) {
    fp16_init();
    const char *dtypes[] = {"q6_k", "q5_k", "q4_k", "q3_k", "q2_k"};
    const double bound[] = {0.03, 0.06, 0.12, 0.25, 0.45};
    char *fpath = random_model("rand-kq-f32.gguf", "f32", 640);
    gguf_file *ff = NULL;
    pdl_error err;
    REQUIRE_MSG(gguf_open(&ff, fpath, &err) == 0, "%s", err.message);
    const pdl_tensor *tf = tensor_set_find(gguf_tensors(ff), "blk.0.ffn_down.weight");
    REQUIRE(tf && tf->dtype == PDL_DTYPE_F32);
    int64_t rows = tf->shape[0], cols = tf->shape[1];
    float *a = malloc((size_t)cols * sizeof *a), *b = malloc((size_t)cols * sizeof *b);
    for (int i = 0; i < (int)(sizeof dtypes / sizeof dtypes[0]); i++) {
        char name[64];
        snprintf(name, sizeof name, "rand-kq-%s.gguf", dtypes[i]);
        char *path = random_model(name, dtypes[i], 640);
        gguf_file *fq = NULL;
        REQUIRE_MSG(gguf_open(&fq, path, &err) == 0, "%s", err.message);
        const pdl_tensor *tq = tensor_set_find(gguf_tensors(fq), "blk.0.ffn_down.weight");
        REQUIRE(tq && tq->shape[0] == rows && tq->shape[1] == cols && cols % 256 == 0);
        double se = 0, sv = 0;
        for (int64_t r = 0; r < rows; r += 7) {
            ops_dequant_row(tf, r, a, cols);
            ops_dequant_row(tq, r, b, cols);
            for (int64_t j = 0; j < cols; j++) se += (double)(b[j] - a[j]) * (b[j] - a[j]), sv += (double)a[j] * a[j];
        }
        double rel = sqrt(se / sv);
        CHECK_MSG(rel < bound[i], "%s: relative RMS error %.4f, bound %.2f", dtypes[i], rel, bound[i]);
        fprintf(stderr, "  %s: relative RMS error %.4f (bound %.2f)\n", dtypes[i], rel, bound[i]);
        gguf_close(fq);
        free(path);
    }
    free(a), free(b);
    gguf_close(ff);
    free(fpath);
}

/* --dtype tq2_0 and tq1_0 of one seed hold the same ternary values (one
 * quantizer, two encodings): a matrix dequantizes to the same floats from
 * both files, each -d, 0 or d of its block, all three present, and TQ2_0
 * never uses its code 3. */
static void test_random_ternary_models_hold_the_same_values(void) {
    fp16_init();
    gguf_file *f[2] = {NULL, NULL};
    const char *dtypes[2] = {"tq2_0", "tq1_0"};
    for (int i = 0; i < 2; i++) {
        char name[64];
        snprintf(name, sizeof name, "rand-same-%s.gguf", dtypes[i]);
        char *path = random_model(name, dtypes[i], 640);
        pdl_error err;
        REQUIRE_MSG(gguf_open(&f[i], path, &err) == 0, "%s", err.message);
        free(path);
    }
    const pdl_tensor *t2 = tensor_set_find(gguf_tensors(f[0]), "blk.0.attn_q.weight");
    const pdl_tensor *t1 = tensor_set_find(gguf_tensors(f[1]), "blk.0.attn_q.weight");
    REQUIRE(t2 && t1 && t2->dtype == PDL_DTYPE_TQ2_0 && t1->dtype == PDL_DTYPE_TQ1_0);
    int64_t rows = t2->shape[0], cols = t2->shape[1];
    float *a = malloc((size_t)cols * sizeof *a), *b = malloc((size_t)cols * sizeof *b);
    int64_t differ = 0, not_ternary = 0, code3 = 0, count[3] = {0, 0, 0};
    for (int64_t r = 0; r < rows; r++) {
        ops_dequant_row(t2, r, a, cols);
        ops_dequant_row(t1, r, b, cols);
        const uint8_t *row = (const uint8_t *)t2->data + (size_t)r * dtype_row_bytes(PDL_DTYPE_TQ2_0, cols);
        for (int64_t k = 0; k < cols / 256; k++) {
            uint16_t h;
            memcpy(&h, row + 66 * k + 64, 2);
            float d = fp16_f16_to_f32(h);
            for (int i = 0; i < 64; i++)
                for (int l = 0; l < 4; l++) code3 += ((row[66 * k + i] >> (2 * l)) & 3) == 3;
            for (int j = 0; j < 256; j++) {
                float v = a[256 * k + j];
                differ += memcmp(&v, &b[256 * k + j], sizeof v) != 0;
                if (v == -d) count[0]++;
                else if (v == 0.0f) count[1]++;
                else if (v == d) count[2]++;
                else not_ternary++;
            }
        }
    }
    CHECK_EQ_INT(differ, 0);
    CHECK_EQ_INT(not_ternary, 0);
    CHECK_EQ_INT(code3, 0);
    CHECK_MSG(count[0] > 0 && count[1] > 0 && count[2] > 0, "-d %lld, 0 %lld, d %lld", (long long)count[0],
              (long long)count[1], (long long)count[2]);
    free(a), free(b);
    gguf_close(f[0]), gguf_close(f[1]);
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

/* -d: the depth's tokens are in each sequence's cache before the timed part.
 * Nothing is timed here; what shows the depth was honoured is the prefix
 * cache having served exactly its whole blocks in every timed run (40
 * tokens: 2 blocks of 16, the remainder recomputed), the rows' names and
 * n_depth, and the length check against the model's context. */
static void test_bench_depth_is_in_the_cache_and_named(void) {
    char *model = test_data_path("models/stories260K/stories260K.gguf"), args[4096], *out;
    pdl_model *m = NULL;
    pdl_error err;
    REQUIRE_MSG(pdl_model_load(&m, model, NULL, &err) == 0, "%s", err.message);
    pdl_model_info info;
    pdl_model_get_info(m, &info);
    pdl_model_free(m);
    snprintf(args, sizeof args, "bench -m '%s' -p 16 -n 4 -d 0,40 -r 2 --batch 1,2 --json", model);
    CHECK_EQ_INT(sh(args, &out), 0);
    json_error_t je;
    json_t *j = json_loads(out, 0, &je);
    REQUIRE_MSG(j != NULL && json_is_array(j), "not a JSON array: %s", out);
    CHECK_EQ_INT(json_array_size(j), 6);
    const char *tests[] = {"pp16", "tg4", "tg4", "pp16 @ d40", "tg4 @ d40", "tg4 @ d40"};
    int depth[] = {0, 0, 0, 40, 40, 40}, batch[] = {1, 1, 2, 1, 1, 2};
    for (size_t i = 0; i < json_array_size(j) && i < 6; i++) {
        json_t *r = json_array_get(j, i);
        CHECK_MSG(strcmp(json_string_value(json_object_get(r, "test")), tests[i]) == 0, "row %zu: %s", i,
                  json_string_value(json_object_get(r, "test")));
        CHECK_EQ_INT(json_integer_value(json_object_get(r, "n_depth")), depth[i]);
        CHECK_EQ_INT(json_integer_value(json_object_get(r, "batch")), batch[i]);
        /* 2 timed runs x batch sequences x 32 cached depth tokens */
        CHECK_EQ_INT(json_integer_value(json_object_get(r, "cached_tokens")), depth[i] ? 2 * batch[i] * 32 : 0);
        CHECK(json_number_value(json_object_get(json_object_get(r, "tokens_per_s"), "median")) > 0);
    }
    json_decref(j);
    free(out);
    snprintf(args, sizeof args, "bench -m '%s' -p 16 -n 0 --depth 48 -r 1", model);
    CHECK_EQ_INT(sh(args, &out), 0);
    CHECK_CONTAINS(out, "| pp16 @ d48 |");
    free(out);
    snprintf(args, sizeof args, "bench -m '%s' -p 16 -n 0 -d 48 -r 1 --csv", model);
    CHECK_EQ_INT(sh(args, &out), 0);
    CHECK_CONTAINS(out, ",n_depth\n");
    CHECK_CONTAINS(out, ",48\n");
    free(out);
    /* the longest test (depth, prompt, its sampled token) exactly fills the
     * context: runs; one token more: refused */
    snprintf(args, sizeof args, "bench -m '%s' -p 16 -n 0 -d %d -r 1 --json", model, info.ctx_len - 17);
    CHECK_EQ_INT(sh(args, &out), 0);
    free(out);
    snprintf(args, sizeof args, "bench -m '%s' -p 16 -n 0 -d %d -r 1", model, info.ctx_len - 16);
    CHECK_EQ_INT(sh(args, &out), 2);
    CHECK_CONTAINS(out, "beyond the model's context length");
    free(out);
    snprintf(args, sizeof args, "bench -m '%s' -d -1", model);
    CHECK_EQ_INT(sh(args, &out), 2);
    free(out);
    free(model);
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
    /* and the attention order in effect, as PAGEDLM_BF16_ATTENTION asks
     * (0 and 1 for f32 and bf16): an order the family lacks is said and the
     * one it stands in with named (the AMX order by the BF16 order where
     * the CPU lacks AMX); an unknown name is said and the default runs */
    struct {
        const char *env;
        pdl_attn_order order;
    } asks[] = {{"amx", PDL_ATTN_AMX}, {"bf16", PDL_ATTN_BF16}, {"1", PDL_ATTN_BF16}, {"f32", PDL_ATTN_F32},
                {"bogus", PDL_ATTN_F32}};
    for (size_t i = 0; i < sizeof asks / sizeof asks[0]; i++) {
        pdl_attention_table t;
        attn_table_for(cpu_isa_best(), asks[i].order, &t);
        setenv("PAGEDLM_BF16_ATTENTION", asks[i].env, 1);
        CHECK_EQ_INT(sh(args, &out), 0);
        unsetenv("PAGEDLM_BF16_ATTENTION");
        char want[160];
        snprintf(want, sizeof want, "\"isa\": \"%s%s\"", best,
                 t.order == PDL_ATTN_AMX ? "+amx-attention" : t.order == PDL_ATTN_BF16 ? "+bf16-attention" : "");
        CHECK_CONTAINS(out, want);
        if (strcmp(asks[i].env, "bogus") == 0) {
            CHECK_CONTAINS(out, "PAGEDLM_BF16_ATTENTION: bogus is not one of f32, bf16, amx; attention stays in "
                                "the f32 order");
        } else if (t.order != asks[i].order) {
            snprintf(want, sizeof want, "PAGEDLM_BF16_ATTENTION: the %s order is not available to the %s kernels here; "
                     "they attend in the %s order", attn_order_name(asks[i].order), best, attn_order_name(t.order));
            CHECK_CONTAINS(out, want);
        } else {
            CHECK_MSG(strstr(out, "PAGEDLM_BF16_ATTENTION") == NULL, "%s: a notice for an order the family has: %s",
                      asks[i].env, out);
        }
        free(out);
    }
    free(path);
}

/* `bench --attention-kernel`: the kernel alone over the deepest -d's keys,
 * a decode step's queries (the GQA group: 16 heads over 8 KV heads here)
 * and a prefill call's (128), in the order the family takes for what
 * PAGEDLM_BF16_ATTENTION asks, in the JSON and the text. */
static void test_bench_times_the_attention_kernel(void) {
    char *path = random_model("attn.gguf", "q8_0", 512), args[1024], *out;
    const char *asks[] = {NULL, "amx"};
    const pdl_attn_order orders[] = {PDL_ATTN_F32, PDL_ATTN_AMX};
    for (int i = 0; i < 2; i++) {
        pdl_attention_table t;
        attn_table_for(cpu_isa_best(), orders[i], &t);
        const char *want = attn_order_name(t.order);
        if (asks[i]) setenv("PAGEDLM_BF16_ATTENTION", asks[i], 1);
        snprintf(args, sizeof args, "bench -m '%s' -p 8 -n 0 -d 0,200 -r 1 --attention-kernel --json", path);
        cmd_result r = test_pagedlm(args); /* stdout alone: a CPU without AMX says so on stderr */
        unsetenv("PAGEDLM_BF16_ATTENTION");
        CHECK_EQ_INT(r.status, 0);
        json_error_t je;
        json_t *j = json_loads(r.out, 0, &je);
        out = r.out, r.out = NULL;
        test_free_result(&r);
        REQUIRE_MSG(j != NULL && json_is_array(j) && json_array_size(j) > 0, "not a JSON array: %s", out);
        json_t *k = json_object_get(json_array_get(j, 0), "attention_kernel");
        CHECK_MSG(k && strcmp(json_string_value(json_object_get(k, "order")), want) == 0, "order: want %s in %s",
                  want, out);
        CHECK_EQ_INT(json_integer_value(json_object_get(k, "head_dim")), 128);
        CHECK_EQ_INT(json_integer_value(json_object_get(k, "keys")), 200);
        CHECK_EQ_INT(json_integer_value(json_array_get(json_object_get(k, "queries"), 0)), 2);
        CHECK_EQ_INT(json_integer_value(json_array_get(json_object_get(k, "queries"), 1)), 128);
        for (int c = 0; c < 2; c++)
            CHECK(json_number_value(json_array_get(json_object_get(k, "ns_per_query_key"), (size_t)c)) > 0);
        json_decref(j);
        free(out);
    }
    snprintf(args, sizeof args, "bench -m '%s' -p 8 -n 0 -r 1 --attention-kernel", path);
    CHECK_EQ_INT(sh(args, &out), 0);
    CHECK_CONTAINS(out, "attention kernel (");
    CHECK_CONTAINS(out, "f32 order, f16 cache, head_dim 128, 4096 keys, one thread): 2 queries a call");
    free(out);
    free(path);
}

/* A tensor of the file by name, with its shape (outermost first) and dtype;
 * NULL with a failed check if it is not there or differs. */
static const pdl_tensor *want_tensor(const gguf_file *f, const char *name, pdl_dtype dtype, int n_dims, int64_t d0,
                                     int64_t d1, int64_t d2) {
    const pdl_tensor *t = tensor_set_find(gguf_tensors(f), name);
    CHECK_MSG(t != NULL, "no tensor %s", name);
    if (!t) return NULL;
    int64_t want[3] = {d0, d1, d2};
    bool same = t->n_dims == n_dims && t->dtype == dtype;
    for (int i = 0; same && i < n_dims; i++) same = t->shape[i] == want[i];
    CHECK_MSG(same, "%s: dtype %d, %d dims (%lld, %lld, %lld); want dtype %d, %d dims (%lld, %lld, %lld)", name,
              (int)t->dtype, t->n_dims, (long long)t->shape[0], (long long)(t->n_dims > 1 ? t->shape[1] : 0),
              (long long)(t->n_dims > 2 ? t->shape[2] : 0), (int)dtype, n_dims, (long long)d0, (long long)d1,
              (long long)d2);
    return same ? t : NULL;
}

static void want_u32(const gguf_file *f, const char *key, uint32_t v) {
    uint32_t got = 0;
    pdl_error err;
    CHECK_MSG(gguf_get_u32(f, key, &got, &err) == 1 && got == v, "%s: %u, want %u", key, got, v);
}

static gguf_file *make_hybrid(const char *name, const char *preset_args) {
    char *path = test_tmp_path(name), args[1024], *out;
    snprintf(args, sizeof args, "make-random-model %s -o '%s'", preset_args, path);
    int st = sh(args, &out);
    REQUIRE_MSG(st == 0, "make-random-model %s: %s", preset_args, out);
    free(out);
    gguf_file *f = NULL;
    pdl_error err;
    REQUIRE_MSG(gguf_open(&f, path, &err) == 0, "%s", err.message);
    free(path);
    return f;
}

/* qwen3.5-0.8b with 4 layers: three Gated DeltaNet layers, then gated full
 * attention (attn_q twice the query width: query and gate per head), the
 * keys llama.cpp's qwen35 loader reads, F32 where the converter keeps F32,
 * and the DeltaNet parameters in their initial ranges: ssm_a = -A in
 * [-16, 0), dt bias 1, the convolution within +-0.5 (exact bounds: they are
 * drawn so). */
static void test_qwen35_preset_has_the_converters_layout(void) {
    gguf_file *f = make_hybrid("q35.gguf", "--preset qwen3.5-0.8b --layers 4 --vocab 512 --dtype bf16");
    const char *arch = NULL;
    pdl_error err;
    CHECK(gguf_get_str(f, "general.architecture", &arch, &err) == 1 && strcmp(arch, "qwen35") == 0);
    const struct {
        const char *key;
        uint32_t v;
    } keys[] = {{"qwen35.block_count", 4},           {"qwen35.embedding_length", 1024},
                {"qwen35.feed_forward_length", 3584}, {"qwen35.attention.head_count", 8},
                {"qwen35.attention.head_count_kv", 2}, {"qwen35.attention.key_length", 256},
                {"qwen35.rope.dimension_count", 64},  {"qwen35.ssm.conv_kernel", 4},
                {"qwen35.ssm.state_size", 128},       {"qwen35.ssm.group_count", 16},
                {"qwen35.ssm.time_step_rank", 16},    {"qwen35.ssm.inner_size", 2048},
                {"qwen35.full_attention_interval", 4}, {"qwen35.context_length", 262144}};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) want_u32(f, keys[i].key, keys[i].v);
    gguf_array sec;
    REQUIRE(gguf_get_arr(f, "qwen35.rope.dimension_sections", &sec, &err) == 1);
    CHECK_EQ_INT((int)sec.count, 4);
    const int sections[4] = {11, 11, 10, 0};
    for (int i = 0; i < 4 && i < (int)sec.count; i++) CHECK_EQ_INT((int)gguf_arr_i64(&sec, i), sections[i]);
    float theta = 0;
    CHECK(gguf_get_f32(f, "qwen35.rope.freq_base", &theta, &err) == 1 && theta == 10000000.0f);
    CHECK(tensor_set_find(gguf_tensors(f), "output.weight") == NULL); /* tied */
    for (int l = 0; l < 3; l++) {
        char n[96];
#define T(s) (snprintf(n, sizeof n, "blk.%d.%s", l, s), n)
        want_tensor(f, T("attn_qkv.weight"), PDL_DTYPE_BF16, 2, 6144, 1024, 0);
        want_tensor(f, T("attn_gate.weight"), PDL_DTYPE_BF16, 2, 2048, 1024, 0);
        want_tensor(f, T("ssm_beta.weight"), PDL_DTYPE_BF16, 2, 16, 1024, 0);
        want_tensor(f, T("ssm_alpha.weight"), PDL_DTYPE_BF16, 2, 16, 1024, 0);
        want_tensor(f, T("ssm_out.weight"), PDL_DTYPE_BF16, 2, 1024, 2048, 0);
        want_tensor(f, T("ssm_norm.weight"), PDL_DTYPE_F32, 1, 128, 0, 0);
        want_tensor(f, T("post_attention_norm.weight"), PDL_DTYPE_F32, 1, 1024, 0, 0);
        CHECK(tensor_set_find(gguf_tensors(f), T("attn_q.weight")) == NULL);
        const pdl_tensor *a = want_tensor(f, T("ssm_a"), PDL_DTYPE_F32, 1, 16, 0, 0);
        const pdl_tensor *dt = want_tensor(f, T("ssm_dt.bias"), PDL_DTYPE_F32, 1, 16, 0, 0);
        const pdl_tensor *conv = want_tensor(f, T("ssm_conv1d.weight"), PDL_DTYPE_F32, 2, 6144, 4, 0);
#undef T
        if (!a || !dt || !conv) continue;
        const float *av = a->data, *dv = dt->data, *cv = conv->data;
        int a_in = 0, dt_one = 0, conv_in = 0, conv_wide = 0;
        for (int i = 0; i < 16; i++) a_in += av[i] >= -16.0f && av[i] < 0.0f, dt_one += dv[i] == 1.0f;
        for (int i = 0; i < 6144 * 4; i++) conv_in += fabsf(cv[i]) <= 0.5f, conv_wide += fabsf(cv[i]) > 0.25f;
        CHECK_EQ_INT(a_in, 16);
        CHECK(av[0] != av[1]);
        CHECK_EQ_INT(dt_one, 16);
        CHECK_EQ_INT(conv_in, 6144 * 4);
        CHECK(conv_wide > 6144); /* about half: not the +-0.035 of the matrices */
    }
    want_tensor(f, "blk.3.attn_q.weight", PDL_DTYPE_BF16, 2, 4096, 1024, 0);
    want_tensor(f, "blk.3.attn_k.weight", PDL_DTYPE_BF16, 2, 512, 1024, 0);
    want_tensor(f, "blk.3.attn_v.weight", PDL_DTYPE_BF16, 2, 512, 1024, 0);
    want_tensor(f, "blk.3.attn_output.weight", PDL_DTYPE_BF16, 2, 1024, 2048, 0);
    want_tensor(f, "blk.3.attn_q_norm.weight", PDL_DTYPE_F32, 1, 256, 0, 0);
    want_tensor(f, "blk.3.ffn_down.weight", PDL_DTYPE_BF16, 2, 1024, 3584, 0);
    CHECK(tensor_set_find(gguf_tensors(f), "blk.3.attn_qkv.weight") == NULL);
    CHECK(tensor_set_find(gguf_tensors(f), "blk.3.ssm_a") == NULL);
    gguf_close(f);
}

/* qwen3.5-35b-a3b, its experts cut to 4 for a small file: 32 value heads
 * over 16 key heads, stacked experts, an F32 router, the shared expert and
 * its (hidden) sigmoid gate, its own output matrix, and no
 * feed_forward_length (the published config has no dense width, and
 * published GGUFs have no such key). */
static void test_qwen35moe_preset_has_the_converters_layout(void) {
    gguf_file *f = make_hybrid("q35moe.gguf", "--preset qwen3.5-35b-a3b --layers 4 --experts 4 --vocab 512 --dtype q8_0");
    const char *arch = NULL;
    pdl_error err;
    CHECK(gguf_get_str(f, "general.architecture", &arch, &err) == 1 && strcmp(arch, "qwen35moe") == 0);
    want_u32(f, "qwen35moe.ssm.time_step_rank", 32);
    want_u32(f, "qwen35moe.ssm.group_count", 16);
    want_u32(f, "qwen35moe.ssm.inner_size", 4096);
    want_u32(f, "qwen35moe.expert_count", 4);
    want_u32(f, "qwen35moe.expert_used_count", 4);
    want_u32(f, "qwen35moe.expert_feed_forward_length", 512);
    want_u32(f, "qwen35moe.expert_shared_feed_forward_length", 512);
    want_u32(f, "qwen35moe.attention.head_count", 16);
    uint32_t ff = 0;
    CHECK(gguf_get_u32(f, "qwen35moe.feed_forward_length", &ff, &err) == 0);
    want_tensor(f, "output.weight", PDL_DTYPE_Q8_0, 2, 512, 2048, 0);
    want_tensor(f, "blk.0.attn_qkv.weight", PDL_DTYPE_Q8_0, 2, 8192, 2048, 0);
    want_tensor(f, "blk.0.attn_gate.weight", PDL_DTYPE_Q8_0, 2, 4096, 2048, 0);
    want_tensor(f, "blk.0.ssm_conv1d.weight", PDL_DTYPE_F32, 2, 8192, 4, 0);
    want_tensor(f, "blk.0.ssm_beta.weight", PDL_DTYPE_Q8_0, 2, 32, 2048, 0);
    want_tensor(f, "blk.0.ssm_a", PDL_DTYPE_F32, 1, 32, 0, 0);
    want_tensor(f, "blk.0.ssm_out.weight", PDL_DTYPE_Q8_0, 2, 2048, 4096, 0);
    want_tensor(f, "blk.3.attn_q.weight", PDL_DTYPE_Q8_0, 2, 8192, 2048, 0);
    want_tensor(f, "blk.3.attn_k.weight", PDL_DTYPE_Q8_0, 2, 512, 2048, 0);
    for (int l = 0; l < 4; l += 3) {
        char n[96];
#define T(s) (snprintf(n, sizeof n, "blk.%d.%s", l, s), n)
        want_tensor(f, T("ffn_gate_inp.weight"), PDL_DTYPE_F32, 2, 4, 2048, 0);
        want_tensor(f, T("ffn_gate_exps.weight"), PDL_DTYPE_Q8_0, 3, 4, 512, 2048);
        want_tensor(f, T("ffn_up_exps.weight"), PDL_DTYPE_Q8_0, 3, 4, 512, 2048);
        want_tensor(f, T("ffn_down_exps.weight"), PDL_DTYPE_Q8_0, 3, 4, 2048, 512);
        want_tensor(f, T("ffn_gate_inp_shexp.weight"), PDL_DTYPE_F32, 1, 2048, 0, 0);
        want_tensor(f, T("ffn_gate_shexp.weight"), PDL_DTYPE_Q8_0, 2, 512, 2048, 0);
        want_tensor(f, T("ffn_down_shexp.weight"), PDL_DTYPE_Q8_0, 2, 2048, 512, 0);
        CHECK(tensor_set_find(gguf_tensors(f), T("ffn_gate.weight")) == NULL);
#undef T
    }
    gguf_close(f);
    char *out;
    CHECK_EQ_INT(sh("make-random-model --preset qwen3.5-0.8b --experts 4 -o x.gguf", &out), 2);
    CHECK_CONTAINS(out, "has no experts");
    free(out);
}

/* --dtype mxfp4 on a model with experts writes llama.cpp's MXFP4_MOE mix:
 * the stacked experts MXFP4, the other matrices Q8_0, vectors and the router
 * F32; the experts' blocks hold the random weights (uniform in +-0.0346)
 * to within MXFP4's rounding: every value inside the range, most of them
 * not zero, and a mean magnitude near the uniform's 0.0173. The file loads
 * and runs. */
static void test_mxfp4_preset_writes_the_mxfp4_moe_mix(void) {
    gguf_file *f = make_hybrid("moe-mxfp4.gguf", "--preset qwen3-30b-a3b --layers 1 --experts 4 --vocab 512 --dtype mxfp4");
    want_tensor(f, "blk.0.attn_q.weight", PDL_DTYPE_Q8_0, 2, 4096, 2048, 0);
    want_tensor(f, "blk.0.ffn_gate_inp.weight", PDL_DTYPE_F32, 2, 4, 2048, 0);
    want_tensor(f, "token_embd.weight", PDL_DTYPE_Q8_0, 2, 512, 2048, 0);
    want_tensor(f, "blk.0.ffn_up_exps.weight", PDL_DTYPE_MXFP4, 3, 4, 768, 2048);
    want_tensor(f, "blk.0.ffn_down_exps.weight", PDL_DTYPE_MXFP4, 3, 4, 2048, 768);
    const pdl_tensor *g = want_tensor(f, "blk.0.ffn_gate_exps.weight", PDL_DTYPE_MXFP4, 3, 4, 768, 2048);
    if (g) {
        float row[2048];
        int inside = 0, nonzero = 0;
        double sum = 0;
        for (int r = 0; r < 8; r++) {
            REQUIRE(ops_dequant_row(g, r * 97, row, 2048) == 0);
            for (int i = 0; i < 2048; i++) {
                inside += fabsf(row[i]) <= 0.0347f, nonzero += row[i] != 0.0f;
                sum += fabsf(row[i]);
            }
        }
        CHECK_EQ_INT(inside, 8 * 2048);
        CHECK(nonzero > 8 * 2048 * 3 / 4);
        double mean = sum / (8 * 2048);
        CHECK_MSG(mean > 0.015 && mean < 0.02, "mean |w| %.4f", mean);
    }
    gguf_close(f);
    char *path = test_tmp_path("moe-mxfp4.gguf"), args[1024], *out;
    snprintf(args, sizeof args, "logits -m '%s' --tokens 1,2,3", path);
    CHECK_EQ_INT(sh(args, &out), 0);
    CHECK_CONTAINS(out, "\"logits\"");
    free(out), free(path);
}

int main(void) {
    RUN(test_random_models_of_every_dtype_load_and_run);
    RUN(test_random_model_hf_form_holds_the_gguf_weights);
    RUN(test_random_ternary_models_hold_the_same_values);
    RUN(test_random_k_quant_models_hold_the_f32_values);
    RUN(test_bench_reports_json_results);
    RUN(test_bench_reports_the_kernel_family);
    RUN(test_bench_depth_is_in_the_cache_and_named);
    RUN(test_bench_times_the_attention_kernel);
    RUN(test_qwen35_preset_has_the_converters_layout);
    RUN(test_qwen35moe_preset_has_the_converters_layout);
    RUN(test_mxfp4_preset_writes_the_mxfp4_moe_mix);
    return test_summary();
}
