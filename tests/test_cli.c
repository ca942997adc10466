/*
 * test_cli.c - the pagedlm program as a user runs it: `run` prints the
 * reference continuation for both model formats, `--json` and `logits`
 * print well-formed JSON, --help lists every option of the command's table,
 * and bad input gives a message and a non-zero exit status (2 for usage,
 * 1 for a model or runtime failure).
 */
#define _POSIX_C_SOURCE 200809L
#include <jansson.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_util.h"

static char *data(const char *rel) { return test_data_path(rel); }

/* The reference continuation: llama2.c printed prompt + 60 tokens + "\n". */
static char *reference_continuation(void) {
    char *p = data("reference/stories260K-greedy.json");
    json_t *j = json_load_file(p, 0, NULL);
    REQUIRE(j != NULL);
    json_t *c = json_array_get(json_object_get(j, "cases"), 1);
    REQUIRE(strcmp(json_string_value(json_object_get(c, "prompt")), "Once upon a time") == 0);
    const char *text = json_string_value(json_object_get(c, "text"));
    const char *prompt = "Once upon a time";
    REQUIRE(strncmp(text, prompt, strlen(prompt)) == 0);
    char *cont = strdup(text + strlen(prompt)); /* ends with llama2.c's final "\n", as ours does */
    json_decref(j);
    free(p);
    return cont;
}

static void check_run_prints_reference(const char *model_rel) {
    char *model = data(model_rel), args[4096];
    char *want = reference_continuation();
    snprintf(args, sizeof args, "run -m '%s' -p 'Once upon a time' -n 60 --temp 0", model);
    cmd_result r = test_pagedlm(args);
    CHECK_EQ_INT(r.status, 0);
    CHECK_MSG(strcmp(r.out, want) == 0, "%s: got\n%s\nwant\n%s", model_rel, r.out, want);
    test_free_result(&r);
    /* -n 64 continues past the reference's 60 tokens: its start is the same */
    snprintf(args, sizeof args, "run -m '%s' -p 'Once upon a time' -n 64 --temp 0", model);
    r = test_pagedlm(args);
    CHECK_EQ_INT(r.status, 0);
    CHECK(strncmp(r.out, want, strlen(want) - 1) == 0);
    test_free_result(&r);
    free(want), free(model);
}

static void test_run_gguf_prints_reference_continuation(void) {
    check_run_prints_reference("models/stories260K/stories260K.gguf");
}

static void test_run_hf_prints_reference_continuation(void) { check_run_prints_reference("models/stories260K-hf"); }

static void test_run_json_has_tokens_and_text(void) {
    char *model = data("models/stories260K-hf"), args[4096];
    snprintf(args, sizeof args, "run -m '%s' -p 'Once upon a time' -n 60 --temp 0 --json --threads 1", model);
    cmd_result r = test_pagedlm(args);
    CHECK_EQ_INT(r.status, 0);
    json_error_t je;
    json_t *j = json_loads(r.out, 0, &je);
    REQUIRE_MSG(j != NULL, "not JSON: %s", r.out);
    json_t *pt = json_object_get(j, "prompt_tokens"), *tk = json_object_get(j, "tokens");
    CHECK_EQ_INT(json_array_size(pt), 5);
    CHECK_EQ_INT(json_integer_value(json_array_get(pt, 0)), 1);
    CHECK_EQ_INT(json_array_size(tk), 60);
    CHECK_EQ_INT(json_integer_value(json_array_get(tk, 0)), 432);
    CHECK_EQ_INT(json_integer_value(json_array_get(tk, 59)), 310);
    char *want = reference_continuation();
    want[strlen(want) - 1] = '\0'; /* no trailing newline inside the JSON text */
    CHECK(strcmp(json_string_value(json_object_get(j, "text")), want) == 0);
    json_decref(j);
    free(want), free(model);
    test_free_result(&r);
}

/* run --reasoning-parser on a tiny Qwen3 (real vocabulary): a prompt that
 * ends with <think> opens the block, the budget closes it (</think>,
 * 151668, forced as the 4th token), --json gives the thinking apart, and
 * --hide-reasoning prints the answer only. */
static void test_run_reasoning_parser_budget_and_hide(void) {
    char *dir = test_make_dir("run-qwen3-test"), *tok = data("tokenizers/qwen3"), args[4096];
    snprintf(args, sizeof args, "make-random-model --preset qwen3-test --format hf --dtype bf16 --tokenizer '%s' -o '%s'",
             tok, dir);
    cmd_result made = test_pagedlm(args);
    REQUIRE_MSG(made.status == 0, "%s", made.err);
    test_free_result(&made);
    const char *common = "-p 'Question: 2+2?<think>' -n 10 --temp 1 --seed 3 --threads 1 --reasoning-parser qwen3 "
                         "--reasoning-budget 3";
    snprintf(args, sizeof args, "run -m '%s' %s --json", dir, common);
    cmd_result r = test_pagedlm(args);
    REQUIRE_MSG(r.status == 0, "%s", r.err);
    json_t *j = json_loads(r.out, 0, NULL);
    REQUIRE_MSG(j, "not JSON: %s", r.out);
    CHECK_EQ_INT(json_integer_value(json_array_get(json_object_get(j, "tokens"), 3)), 151668);
    const char *reasoning = json_string_value(json_object_get(j, "reasoning"));
    const char *text = json_string_value(json_object_get(j, "text"));
    CHECK(reasoning && strlen(reasoning) > 0 && !strstr(reasoning, "</think>"));
    CHECK(text && !strstr(text, "</think>"));
    snprintf(args, sizeof args, "run -m '%s' %s --hide-reasoning", dir, common);
    cmd_result h = test_pagedlm(args);
    CHECK_EQ_INT(h.status, 0);
    CHECK_MSG(text && strncmp(h.out, text, strlen(text)) == 0 && !strstr(h.out, reasoning ? reasoning : "\x01"),
              "--hide-reasoning printed '%s' (answer '%s')", h.out, text ? text : "");
    json_decref(j);
    test_free_result(&r), test_free_result(&h);
    free(dir), free(tok);
}

/* Sampling with a seed is reproducible; another seed changes the text. */
static void test_run_seed_is_reproducible(void) {
    char *model = data("models/stories260K/stories260K.gguf"), args[4096];
    snprintf(args, sizeof args, "run -m '%s' -p 'Once' -n 40 --temp 1 --seed 7", model);
    cmd_result a = test_pagedlm(args), b = test_pagedlm(args);
    snprintf(args, sizeof args, "run -m '%s' -p 'Once' -n 40 --temp 1 --seed 8", model);
    cmd_result c = test_pagedlm(args);
    CHECK(a.status == 0 && b.status == 0 && c.status == 0);
    CHECK(strcmp(a.out, b.out) == 0);
    CHECK(strcmp(a.out, c.out) != 0);
    test_free_result(&a), test_free_result(&b), test_free_result(&c);
    free(model);
}

/* --verbose prints the selective-logits probe's decision on stderr; the
 * output itself is unchanged. */
static void test_run_verbose_prints_probe_decision(void) {
    const char *models[] = {"models/granite-tiny/model-f32.gguf", "models/cohere-tiny/hf",
                            "models/gemma2-softcap-tiny/model-f32.gguf"};
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
        char *model = data(models[i]), args[4096];
        snprintf(args, sizeof args, "run -m '%s' --tokens 1,2,3 -n 4 --temp 0 --verbose", model);
        cmd_result r = test_pagedlm(args);
        CHECK_EQ_INT(r.status, 0);
        CHECK_CONTAINS(r.err, "selective-logits probe: accepted");
        snprintf(args, sizeof args, "run -m '%s' --tokens 1,2,3 -n 4 --temp 0", model);
        cmd_result q = test_pagedlm(args);
        CHECK_EQ_INT(q.status, 0);
        CHECK(strstr(q.err, "probe") == NULL);
        CHECK(strcmp(q.out, r.out) == 0);
        test_free_result(&r), test_free_result(&q);
        free(model);
    }
}

static void test_logits_prints_rows_as_json(void) {
    char *model = data("models/stories260K/stories260K.gguf"), args[4096];
    snprintf(args, sizeof args, "logits -m '%s' --tokens 1,403,407,261,378 --all-rows --kv-cache-dtype f32", model);
    cmd_result r = test_pagedlm(args);
    CHECK_EQ_INT(r.status, 0);
    json_t *j = json_loads(r.out, 0, NULL);
    REQUIRE_MSG(j != NULL, "not JSON");
    json_t *rows = json_object_get(j, "logits");
    CHECK_EQ_INT(json_array_size(rows), 5);
    CHECK_EQ_INT(json_array_size(json_array_get(rows, 0)), 512);
    /* row 0's argmax is 403 ("Once" -> " upon"), per the float64 reference */
    json_t *r0 = json_array_get(rows, 0);
    size_t best = 0;
    for (size_t i = 1; i < 512; i++)
        if (json_number_value(json_array_get(r0, i)) > json_number_value(json_array_get(r0, best))) best = i;
    CHECK_EQ_INT(best, 403);
    json_decref(j);
    test_free_result(&r);
    snprintf(args, sizeof args, "logits -m '%s' --tokens 1,403", model);
    r = test_pagedlm(args);
    j = json_loads(r.out, 0, NULL);
    REQUIRE(j != NULL);
    CHECK_EQ_INT(json_array_size(json_object_get(j, "logits")), 1);
    json_decref(j);
    test_free_result(&r);
    free(model);
}

/* Every KV cache type the option names runs a model from the command line
 * (stories260K's 8-wide heads: one Q8_0 / Q4_0 group per head), and each
 * writes the prompt's greedy continuation; F32 and F16 agree on it. */
static void test_run_takes_every_kv_cache_dtype(void) {
    char *model = data("models/stories260K/stories260K.gguf"), args[4096];
    const char *dtypes[] = {"f32", "f16", "q8_0", "q4_0"};
    char *f32_out = NULL;
    for (int i = 0; i < 4; i++) {
        snprintf(args, sizeof args, "run -m '%s' -p 'Once upon a time' -n 12 --temp 0 --kv-cache-dtype %s", model,
                 dtypes[i]);
        cmd_result r = test_pagedlm(args);
        CHECK_MSG(r.status == 0, "--kv-cache-dtype %s: exit %d: %s", dtypes[i], r.status, r.err);
        CHECK_MSG(strlen(r.out) > strlen("Once upon a time"), "--kv-cache-dtype %s wrote '%s'", dtypes[i], r.out);
        if (i == 0) f32_out = strdup(r.out);
        if (i == 1) CHECK_MSG(f32_out && strcmp(r.out, f32_out) == 0, "f16 '%s' vs f32 '%s'", r.out, f32_out);
        test_free_result(&r);
    }
    free(f32_out);
    free(model);
}

/* Structured output on the command line: the sampled output is one of the
 * choices, a JSON Schema from a file gives JSON that parses with the
 * required keys; a grammar that does not compile exits 1 naming its line;
 * two constraints exit 2. */
static void test_run_structured_output(void) {
    char *model = data("models/stories260K/stories260K.gguf"), args[4096];
    for (int seed = 1; seed <= 3; seed++) {
        snprintf(args, sizeof args, "run -m '%s' -p 'Once' -n 30 --temp 1 --seed %d --json --choice "
                 "'[\"a red ball\", \"the park\"]'", model, seed);
        cmd_result r = test_pagedlm(args);
        CHECK_EQ_INT(r.status, 0);
        json_t *j = json_loads(r.out, 0, NULL);
        REQUIRE_MSG(j, "not JSON: %s", r.out);
        const char *t = json_string_value(json_object_get(j, "text"));
        CHECK_MSG(t && (strcmp(t, "a red ball") == 0 || strcmp(t, "the park") == 0), "'%s'", t ? t : "");
        CHECK(strcmp(json_string_value(json_object_get(j, "finish_reason")), "stop") == 0);
        json_decref(j);
        test_free_result(&r);
    }
    char dir[] = "/tmp/pdl-cli-XXXXXX", schema[256];
    REQUIRE(mkdtemp(dir));
    snprintf(schema, sizeof schema, "%s/schema.json", dir);
    FILE *f = fopen(schema, "w");
    REQUIRE(f);
    fputs("{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\",\"minimum\":3,\"maximum\":7},"
          "\"ok\":{\"type\":\"boolean\"}},\"required\":[\"n\",\"ok\"],\"additionalProperties\":false}", f);
    fclose(f);
    snprintf(args, sizeof args, "run -m '%s' -p 'Once' -n 100 --temp 1 --seed 4 --json --json-schema-file '%s'", model,
             schema);
    cmd_result r = test_pagedlm(args);
    CHECK_EQ_INT(r.status, 0);
    json_t *j = json_loads(r.out, 0, NULL);
    REQUIRE(j);
    json_t *v = json_loads(json_string_value(json_object_get(j, "text")), 0, NULL);
    CHECK_MSG(v && json_is_integer(json_object_get(v, "n")) && json_is_boolean(json_object_get(v, "ok")) &&
                  json_object_size(v) == 2,
              "%s", json_string_value(json_object_get(j, "text")));
    long long n = json_integer_value(json_object_get(v, "n"));
    CHECK(n >= 3 && n <= 7);
    json_decref(v), json_decref(j);
    test_free_result(&r);
    remove(schema);
    rmdir(dir);
    snprintf(args, sizeof args, "run -m '%s' -p 'Once' -n 5 --grammar 'root ::= \"a\" missing'", model);
    r = test_pagedlm(args);
    CHECK_EQ_INT(r.status, 1);
    CHECK_CONTAINS(r.err, "line 1");
    CHECK_CONTAINS(r.err, "missing");
    test_free_result(&r);
    snprintf(args, sizeof args, "run -m '%s' -p 'Once' --regex a --choice '[\"a\"]'", model);
    r = test_pagedlm(args);
    CHECK_EQ_INT(r.status, 2);
    CHECK_CONTAINS(r.err, "one structured-output option");
    test_free_result(&r);
    free(model);
}

static void test_bad_usage_exits_2_with_message(void) {
    cmd_result r = test_pagedlm("run -p hello");
    CHECK_EQ_INT(r.status, 2);
    CHECK_CONTAINS(r.err, "-m MODEL");
    test_free_result(&r);
    r = test_pagedlm("run -m x -p y --bogus");
    CHECK_EQ_INT(r.status, 2);
    CHECK_CONTAINS(r.err, "--bogus");
    test_free_result(&r);
    r = test_pagedlm("run -m x -p y -n lots");
    CHECK_EQ_INT(r.status, 2);
    CHECK_CONTAINS(r.err, "-n");
    test_free_result(&r);
    r = test_pagedlm("logits -m x --tokens 1,a");
    CHECK_EQ_INT(r.status, 2);
    CHECK_CONTAINS(r.err, "token ids");
    test_free_result(&r);
    r = test_pagedlm("frobnicate");
    CHECK_EQ_INT(r.status, 2);
    CHECK_CONTAINS(r.err, "unknown command");
    test_free_result(&r);
}

static void test_missing_or_bad_model_exits_1(void) {
    cmd_result r = test_pagedlm("run -m /nonexistent/model.gguf -p hi");
    CHECK_EQ_INT(r.status, 1);
    CHECK_CONTAINS(r.err, "/nonexistent/model.gguf");
    test_free_result(&r);
    char *bad = test_tmp_path("not-a-model.gguf");
    test_write_file(bad, "hello world, not gguf", 21);
    char args[1024];
    snprintf(args, sizeof args, "run -m '%s' -p hi", bad);
    r = test_pagedlm(args);
    CHECK_EQ_INT(r.status, 1);
    CHECK_CONTAINS(r.err, bad);
    CHECK(r.out[0] == '\0');
    test_free_result(&r);
    free(bad);
}

/* A context past the model's own (what its file declares) is refused by
 * every command that takes one, naming both numbers and the way to allow
 * it; PAGEDLM_ALLOW_LONG_MAX_MODEL_LEN=1 allows it, with a warning. As
 * vLLM does with VLLM_ALLOW_LONG_MAX_MODEL_LEN. */
static void test_context_past_the_models_own_needs_an_explicit_override(void) {
    unsetenv("PAGEDLM_ALLOW_LONG_MAX_MODEL_LEN");
    char *gguf = data("models/stories260K/stories260K.gguf"), *hf = data("models/stories260K-hf"), args[4096];
    const char *forms[] = {"run -m '%s' -p Once -n 1 -c 1000000", "run -m '%s' -p Once -n 1 --ctx-size 1000000",
                           "logits -m '%s' --tokens 1,403 -c 1000000", "chat -m '%s' -c 1000000 </dev/null",
                           "serve -m '%s' --port 0 --max-model-len 1000000",
                           "run -m '%s' -p Once -n 1 -c 129"};
    for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
        snprintf(args, sizeof args, forms[i], gguf);
        cmd_result r = test_pagedlm_within(60, args);
        CHECK_MSG(r.status == 1, "%s: status %d", args, r.status);
        CHECK_CONTAINS(r.err, i == 5 ? "asked for, 129, is longer than the model's own, 128 (its GGUF "
                                       "context_length)"
                                     : "asked for, 1000000, is longer than the model's own, 128");
        CHECK_CONTAINS(r.err, "positions past 128 were not trained");
        CHECK_CONTAINS(r.err, "PAGEDLM_ALLOW_LONG_MAX_MODEL_LEN=1");
        CHECK(r.out[0] == '\0');
        test_free_result(&r);
    }
    /* the Hugging Face folder declares 512 in config.json */
    snprintf(args, sizeof args, "run -m '%s' -p Once -n 1 -c 513", hf);
    cmd_result r = test_pagedlm(args);
    CHECK_EQ_INT(r.status, 1);
    CHECK_CONTAINS(r.err, "513, is longer than the model's own, 512 (max_position_embeddings in its config.json)");
    test_free_result(&r);
    /* up to the model's own: no word said */
    snprintf(args, sizeof args, "run -m '%s' -p Once -n 4 --temp 0 -c 128", gguf);
    r = test_pagedlm(args);
    CHECK_EQ_INT(r.status, 0);
    CHECK(strstr(r.err, "untested") == NULL);
    test_free_result(&r);
    /* allowed: it runs, and says what it risks */
    const char *yes[] = {"1", "true", " TRUE "};
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) {
        setenv("PAGEDLM_ALLOW_LONG_MAX_MODEL_LEN", yes[i], 1);
        snprintf(args, sizeof args, "run -m '%s' -p Once -n 4 --temp 0 -c 512", gguf);
        r = test_pagedlm(args);
        CHECK_MSG(r.status == 0, "'%s': %s", yes[i], r.err);
        CHECK_CONTAINS(r.err, "context length 512 is longer than the model's own, 128 (allowed): positions past 128 "
                              "were not trained, and what the model does there is untested");
        test_free_result(&r);
    }
    setenv("PAGEDLM_ALLOW_LONG_MAX_MODEL_LEN", "0", 1);
    snprintf(args, sizeof args, "logits -m '%s' --tokens 1,403 -c 512", gguf);
    r = test_pagedlm(args);
    CHECK_EQ_INT(r.status, 1);
    test_free_result(&r);
    unsetenv("PAGEDLM_ALLOW_LONG_MAX_MODEL_LEN");
    free(gguf), free(hf);
}

/* Paths given by the operator must name regular files: a FIFO used to hang
 * in open(), /dev/zero to be read until the kernel killed the process. */
static void test_non_regular_files_are_refused_without_hanging(void) {
    char *fifo = test_tmp_path("model.fifo"), args[4096];
    unlink(fifo);
    REQUIRE(mkfifo(fifo, 0600) == 0);
    snprintf(args, sizeof args, "info -m '%s'", fifo);
    cmd_result r = test_pagedlm_within(20, args);
    CHECK_EQ_INT(r.status, 1);
    CHECK_CONTAINS(r.err, "not a regular file (a FIFO)");
    test_free_result(&r);
    char *model = data("models/stories260K/stories260K.gguf");
    snprintf(args, sizeof args, "run -m '%s' --batch-file /dev/zero", model);
    r = test_pagedlm_within(20, args);
    CHECK_EQ_INT(r.status, 1);
    CHECK_CONTAINS(r.err, "/dev/zero: not a regular file (a device)");
    test_free_result(&r);
    snprintf(args, sizeof args, "template -m '%s' --context /dev/zero", model);
    r = test_pagedlm_within(20, args);
    CHECK_EQ_INT(r.status, 1);
    CHECK_CONTAINS(r.err, "not a regular file");
    test_free_result(&r);
    snprintf(args, sizeof args, "serve -m '%s' --port 0 --chat-template '%s'", model, fifo);
    r = test_pagedlm_within(20, args);
    CHECK_EQ_INT(r.status, 1);
    CHECK_CONTAINS(r.err, "not a regular file (a FIFO)");
    test_free_result(&r);
    unlink(fifo);
    free(fifo), free(model);
}

/* What is read into memory has a limit per kind of file (sparse files:
 * nothing is written to disk). */
static void test_oversized_files_are_refused_by_size(void) {
    char *model = data("models/stories260K/stories260K.gguf"), args[4096];
    char *big = test_tmp_path("big.jinja");
    FILE *f = fopen(big, "wb");
    REQUIRE(f && ftruncate(fileno(f), (4 << 20) + 1) == 0);
    fclose(f);
    snprintf(args, sizeof args, "serve -m '%s' --port 0 --chat-template '%s'", model, big);
    cmd_result r = test_pagedlm_within(20, args);
    CHECK_EQ_INT(r.status, 1);
    CHECK_CONTAINS(r.err, "4194305 bytes; a file of this kind may have at most 4194304");
    test_free_result(&r);
    snprintf(args, sizeof args, "template -m '%s' --context '%s'", model, big); /* contexts: 8 MiB */
    f = fopen(big, "r+b");
    REQUIRE(f && ftruncate(fileno(f), (8 << 20) + 1) == 0);
    fclose(f);
    r = test_pagedlm_within(20, args);
    CHECK_EQ_INT(r.status, 1);
    CHECK_CONTAINS(r.err, "at most 8388608");
    test_free_result(&r);
    /* a batch file is read line by line: one endless line is an error at line 1 */
    char *lines = test_tmp_path("long.jsonl");
    f = fopen(lines, "wb");
    REQUIRE(f && ftruncate(fileno(f), (64 << 20) + 2) == 0);
    fclose(f);
    snprintf(args, sizeof args, "run -m '%s' --batch-file '%s'", model, lines);
    r = test_pagedlm_within(60, args);
    CHECK_EQ_INT(r.status, 1);
    CHECK_CONTAINS(r.err, ":1: the line is longer than 67108864 bytes");
    test_free_result(&r);
    unlink(big), unlink(lines);
    free(big), free(lines), free(model);
}

static void test_out_of_range_token_is_an_error(void) {
    char *model = data("models/stories260K/stories260K.gguf"), args[4096];
    snprintf(args, sizeof args, "logits -m '%s' --tokens 1,512", model);
    cmd_result r = test_pagedlm(args);
    CHECK_EQ_INT(r.status, 1);
    CHECK_CONTAINS(r.err, "512");
    test_free_result(&r);
    free(model);
}

/* --help is printed from each command's option table: every option of run
 * and bench is listed, on stdout, with exit status 0. */
static void test_help_lists_every_option(void) {
    static const char *const run_options[] = {
        "-m, --model", "-p, --prompt", "--tokens", "--image", "--mmproj", "-n, --n-predict", "--temp", "--top-k",
        "--top-p", "--min-p", "--seed", "--stop", "--samples", "--logprobs", "-t, --threads", "-c, --ctx-size",
        "--kv-cache-dtype", "--no-enable-prefix-caching", "--enable-prefix-caching", "--speculative-config",
        "--ignore-eos", "--reasoning-parser", "--hide-reasoning", "--reasoning-budget", "--json ", "--verbose",
        "-j, --json-schema", "--json-schema-file", "--grammar ", "--grammar-file", "--regex", "--choice",
        "--batch-file", "--max-num-seqs", "--max-num-batched-tokens", "--max-prefill-chunk", "--block-size",
        "--kv-cache-memory", "--logits", "-h, --help"};
    static const char *const bench_options[] = {
        "-m, --model", "-p LIST", "-n N", "-r N", "--batch", "-t, --threads", "--logits", "--kv-cache-dtype",
        "--roofline", "--spec-ngram", "--spec-model", "--spec-mtp", "--spec-k", "--spec-temp", "--json", "--csv", "-h, --help"};
    cmd_result r = test_pagedlm("run --help");
    CHECK_EQ_INT(r.status, 0);
    for (size_t i = 0; i < sizeof run_options / sizeof run_options[0]; i++)
        CHECK_MSG(strstr(r.out, run_options[i]) != NULL, "run --help lacks '%s'", run_options[i]);
    test_free_result(&r);
    r = test_pagedlm("bench --help");
    CHECK_EQ_INT(r.status, 0);
    for (size_t i = 0; i < sizeof bench_options / sizeof bench_options[0]; i++)
        CHECK_MSG(strstr(r.out, bench_options[i]) != NULL, "bench --help lacks '%s'", bench_options[i]);
    test_free_result(&r);
}

/* A bad value is refused before anything loads, naming the option as typed
 * and the range it takes; exit status 2. */
static void test_bad_option_values_exit_2_naming_the_option(void) {
    static const struct {
        const char *args, *message;
    } cases[] = {
        {"run -m x -p y --temp -1", "--temp must not be negative"},
        {"run -m x -p y --top-p 2", "--top-p must be in [0, 1]"},
        {"run -m x -p y --samples 65", "--samples expects an integer in [1, 64], got '65'"},
        {"run -m x -p y --kv-cache-dtype q4", "--kv-cache-dtype expects f16, f32, q8_0 or q4_0, got 'q4'"},
        {"serve -m x --kv-cache-dtype fp8_e4m3", "--kv-cache-dtype fp8_e4m3 is not supported: a CPU has no FP8"},
        {"bench -m x --kv-cache-dtype fp8", "--kv-cache-dtype fp8 is not supported: a CPU has no FP8"},
        {"run -m x -p y --kv-cache-memory lots", "--kv-cache-memory expects a size"},
        {"run -m x -p y --logits some", "--logits expects auto, full or selective, got 'some'"},
        {"run -m x -p y -n", "option -n needs a value"},
        {"run -m x -p y --stop ''", "--stop takes a non-empty string"},
        {"bench -m x --batch 0", "--batch values must be in [1, 256]"},
        {"bench -m x -r 0", "-r expects an integer in [1, 64], got '0'"},
        {"serve -m x --port 70000", "--port expects an integer in [0, 65535], got '70000'"},
        {"serve -m x --grammar-timeout 0", "--grammar-timeout must be positive"},
        {"chat -m x --top-p -0.5", "--top-p must be in [0, 1]"},
        {"run -m x -p y --speculative-config '{\"method\": \"mtp\", \"model\": \"d\", \"num_speculative_tokens\": 2}'",
         "method 'mtp' does not take a model"},
        {"run -m x -p y --speculative-config '{\"method\": \"mtp\"}'", "num_speculative_tokens must be in [1, 16]"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cmd_result r = test_pagedlm(cases[i].args);
        CHECK_MSG(r.status == 2, "%s: status %d", cases[i].args, r.status);
        CHECK_MSG(strstr(r.err, cases[i].message) != NULL, "%s: got '%s'", cases[i].args, r.err);
        test_free_result(&r);
    }
}

/* The MTP method on a model without the block: a clear error, status 1. */
static void test_mtp_speculation_needs_the_models_block(void) {
    char *model = data("models/stories260K/stories260K.gguf"), args[4096];
    snprintf(args, sizeof args, "run -m '%s' -p 'Once' -n 4 --speculative-config "
             "'{\"method\": \"mtp\", \"num_speculative_tokens\": 2}'", model);
    cmd_result r = test_pagedlm(args);
    CHECK_EQ_INT(r.status, 1);
    CHECK_CONTAINS(r.err, "multi-token-prediction block");
    test_free_result(&r);
    free(model);
}

int main(void) {
    RUN(test_run_gguf_prints_reference_continuation);
    RUN(test_run_hf_prints_reference_continuation);
    RUN(test_run_json_has_tokens_and_text);
    RUN(test_run_seed_is_reproducible);
    RUN(test_run_reasoning_parser_budget_and_hide);
    RUN(test_run_verbose_prints_probe_decision);
    RUN(test_logits_prints_rows_as_json);
    RUN(test_run_takes_every_kv_cache_dtype);
    RUN(test_run_structured_output);
    RUN(test_bad_usage_exits_2_with_message);
    RUN(test_help_lists_every_option);
    RUN(test_bad_option_values_exit_2_naming_the_option);
    RUN(test_mtp_speculation_needs_the_models_block);
    RUN(test_missing_or_bad_model_exits_1);
    RUN(test_context_past_the_models_own_needs_an_explicit_override);
    RUN(test_out_of_range_token_is_an_error);
    RUN(test_non_regular_files_are_refused_without_hanging);
    RUN(test_oversized_files_are_refused_by_size);
    return test_summary();
}
