/*
 * test_cli_batch.c - `pagedlm run --batch-file` as a user runs it: 16
 * different requests served together give exactly the tokens each gives
 * alone, for chunk sizes 1, 7 and 64 and block sizes 16 and 32, on
 * stories260K and on qwen3-tiny; a pool too small for all at once still
 * completes every request with the same output; bad lines are refused with
 * the file, line and field.
 */
#define _POSIX_C_SOURCE 200809L
#include <jansson.h>
#include <stdint.h>
#include <sys/wait.h>

#include "test_util.h"

/* Runs pagedlm with args; returns its exit status, stdout and stderr. */
static int pagedlm(const char *args, char **out, char **errs) {
    cmd_result r = test_pagedlm(args);
    *out = r.out;
    *errs = r.err;
    return r.status;
}

static const int32_t STORY[65] = {1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338,
                                  401, 396, 267, 337, 410, 408, 419, 292, 411, 322, 265, 282, 295, 433, 426, 385, 328,
                                  432, 358, 394, 261, 370, 432, 352, 266, 268, 388, 426, 338, 391, 266, 267, 337, 335,
                                  312, 432, 398, 312, 286, 267, 414, 270, 333, 415, 426, 13, 438, 310};

/* Request k as a JSON line: prompt ids of varied lengths, some sampled. */
static void request_line(int k, int vocab, char *buf, size_t cap) {
    int len = 1 + (k * 7) % 45, start = (k * 5) % 20;
    size_t off = (size_t)snprintf(buf, cap, "{\"id\": %d, \"prompt\": [", k);
    for (int i = 0; i < len; i++)
        off += (size_t)snprintf(buf + off, cap - off, "%s%d", i ? ", " : "", (STORY[(start + i) % 65] * (k % 3 + 1)) % vocab);
    off += (size_t)snprintf(buf + off, cap - off, "], \"max_tokens\": %d", 10 + k % 6);
    if (k % 4 == 3) off += (size_t)snprintf(buf + off, cap - off, ", \"temperature\": 0.9, \"top_p\": 0.9, \"seed\": %d", 100 + k);
    if (k % 5 == 1) off += (size_t)snprintf(buf + off, cap - off, ", \"logprobs\": 2");
    snprintf(buf + off, cap - off, "}\n");
}

static char *write_batch(const char *name, const int *ks, int n, int vocab) {
    char *path = test_tmp_path(name);
    FILE *f = fopen(path, "w");
    REQUIRE(f != NULL);
    char line[2048];
    for (int i = 0; i < n; i++) {
        request_line(ks[i], vocab, line, sizeof line);
        fputs(line, f);
    }
    fclose(f);
    return path;
}

/* The "tokens" and "text" of each output line, keyed by id. */
static void parse_outputs(const char *out, json_t **by_id, int n) {
    const char *p = out;
    int lines = 0;
    while (*p) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        json_t *o = json_loadb(p, len, JSON_ALLOW_NUL, NULL);
        REQUIRE_MSG(o != NULL, "output line is not JSON: %.*s", (int)len, p);
        int id = (int)json_integer_value(json_object_get(o, "id"));
        REQUIRE(id >= 0 && id < n);
        by_id[id] = o;
        lines++;
        p += len + (nl ? 1 : 0);
    }
}

static void check_batch_invariance(const char *model_rel, int vocab) {
    char *model = test_data_path(model_rel);
    enum { N = 16 };
    json_t *alone[N] = {0};
    char args[4096], *out, *errs;
    for (int k = 0; k < N; k++) {
        char name[32];
        snprintf(name, sizeof name, "alone%d.jsonl", k);
        char *f = write_batch(name, &k, 1, vocab);
        snprintf(args, sizeof args, "run -m '%s' --batch-file '%s' --kv-cache-dtype f32", model, f);
        int st = pagedlm(args, &out, &errs);
        REQUIRE_MSG(st == 0, "alone %d: %s", k, errs);
        json_t *one[N] = {0};
        parse_outputs(out, one, N);
        REQUIRE(one[k] != NULL);
        alone[k] = one[k];
        free(out), free(errs), free(f);
    }
    int ks[N];
    for (int k = 0; k < N; k++) ks[k] = k;
    char *all = write_batch("all.jsonl", ks, N, vocab);
    int chunks[] = {1, 7, 64}, blocks[] = {16, 32};
    for (int ci = 0; ci < 3; ci++)
        for (int bi = 0; bi < 2; bi++) {
            snprintf(args, sizeof args,
                     "run -m '%s' --batch-file '%s' --kv-cache-dtype f32 --max-prefill-chunk %d --block-size %d", model,
                     all, chunks[ci], blocks[bi]);
            int st = pagedlm(args, &out, &errs);
            REQUIRE_MSG(st == 0, "%s", errs);
            json_t *together[N] = {0};
            parse_outputs(out, together, N);
            for (int k = 0; k < N; k++) {
                REQUIRE(together[k] != NULL);
                CHECK_MSG(json_equal(json_object_get(together[k], "tokens"), json_object_get(alone[k], "tokens")),
                          "%s: request %d: tokens differ with chunk %d, block %d", model_rel, k, chunks[ci], blocks[bi]);
                CHECK(json_equal(json_object_get(together[k], "logprobs"), json_object_get(alone[k], "logprobs")) ||
                      (!json_object_get(together[k], "logprobs") && !json_object_get(alone[k], "logprobs")));
                json_decref(together[k]);
            }
            free(out), free(errs);
        }
    for (int k = 0; k < N; k++) json_decref(alone[k]);
    free(all), free(model);
}

static void test_batch_file_invariance_stories(void) {
    check_batch_invariance("models/stories260K/stories260K.gguf", 512);
}

static void test_batch_file_invariance_qwen3(void) { check_batch_invariance("models/qwen3-tiny/model-f32.gguf", 1536); }

static void test_batch_file_small_pool_completes_everything(void) {
    char *model = test_data_path("models/stories260K/stories260K.gguf");
    enum { N = 10 };
    int ks[N];
    for (int k = 0; k < N; k++) ks[k] = k;
    char *all = write_batch("pool.jsonl", ks, N, 512);
    char args[4096], *out1, *err1, *out2, *err2;
    snprintf(args, sizeof args, "run -m '%s' --batch-file '%s' --kv-cache-dtype f32", model, all);
    REQUIRE(pagedlm(args, &out1, &err1) == 0);
    /* stories: 5 layers x 32 KV x 16 tokens x 2 x 4 bytes = 20 KiB a block; 8 blocks */
    snprintf(args, sizeof args, "run -m '%s' --batch-file '%s' --kv-cache-dtype f32 --kv-cache-memory 163840", model, all);
    REQUIRE(pagedlm(args, &out2, &err2) == 0);
    CHECK_CONTAINS(err2, "preemptions");
    CHECK(strstr(err2, " 0 preemptions") == NULL);
    CHECK(strcmp(out1, out2) == 0);
    free(out1), free(err1), free(out2), free(err2), free(all), free(model);
}

/* A line means what the same body means to POST /v1/completions (the
 * server's parser): logit_bias, min_tokens, structured output and the
 * server's field names work in batch lines too. */
static void test_batch_lines_take_the_server_fields(void) {
    char *model = test_data_path("models/stories260K/stories260K.gguf");
    const char *content =
        "{\"id\": 0, \"prompt\": [1, 403], \"max_tokens\": 1, \"logit_bias\": {\"261\": 100}}\n"
        "{\"id\": 1, \"prompt\": \"Once\", \"max_tokens\": 20, \"temperature\": 1, \"seed\": 3, "
        "\"structured_outputs\": {\"choice\": [\"a red ball\", \"the park\"]}}\n"
        "{\"id\": 2, \"prompt\": \"Once\", \"max_completion_tokens\": 80, \"temperature\": 1, \"seed\": 4, "
        "\"response_format\": {\"type\": \"json_schema\", \"json_schema\": {\"name\": \"x\", \"schema\": "
        "{\"type\": \"object\", \"properties\": {\"n\": {\"type\": \"integer\", \"minimum\": 1, \"maximum\": 9}}, "
        "\"required\": [\"n\"], \"additionalProperties\": false}}}}\n"
        "{\"id\": 3, \"prompt\": [1, 403], \"max_tokens\": 3, \"min_tokens\": 3, \"stop_token_ids\": [261], "
        "\"logit_bias\": {\"261\": 100}}\n";
    char *f = test_tmp_path("fields.jsonl");
    test_write_file(f, content, strlen(content));
    char args[4096], *out, *errs;
    snprintf(args, sizeof args, "run -m '%s' --batch-file '%s'", model, f);
    REQUIRE_MSG(pagedlm(args, &out, &errs) == 0, "%s", errs);
    json_t *lines[4] = {0};
    parse_outputs(out, lines, 4);
    for (int k = 0; k < 4; k++) REQUIRE(lines[k]);
    json_t *tk = json_object_get(lines[0], "tokens");
    CHECK(json_array_size(tk) == 1 && json_integer_value(json_array_get(tk, 0)) == 261);
    const char *t = json_string_value(json_object_get(lines[1], "text"));
    CHECK_MSG(strcmp(t, "a red ball") == 0 || strcmp(t, "the park") == 0, "'%s'", t);
    json_t *v = json_loads(json_string_value(json_object_get(lines[2], "text")), 0, NULL);
    CHECK_MSG(v && json_is_integer(json_object_get(v, "n")) && json_object_size(v) == 1, "%s",
              json_string_value(json_object_get(lines[2], "text")));
    json_decref(v);
    /* min_tokens: the stop id 261 is banned for 3 tokens, so the bias cannot end the sequence early */
    tk = json_object_get(lines[3], "tokens");
    CHECK_EQ_INT((int)json_array_size(tk), 3);
    for (size_t i = 0; i < json_array_size(tk); i++) CHECK(json_integer_value(json_array_get(tk, i)) != 261);
    for (int k = 0; k < 4; k++) json_decref(lines[k]);
    free(out), free(errs), free(f), free(model);
}

/* A prompt may hold NUL (\u0000), as a server request's may. */
static void test_batch_prompts_may_hold_nul(void) {
    char *model = test_data_path("models/stories260K/stories260K.gguf");
    const char *content = "{\"id\": 0, \"prompt\": \"Once\\u0000 upon\", \"max_tokens\": 2, \"temperature\": 0}\n";
    char *f = test_tmp_path("nul.jsonl");
    test_write_file(f, content, strlen(content));
    char args[4096], *out, *errs;
    snprintf(args, sizeof args, "run -m '%s' --batch-file '%s'", model, f);
    CHECK_MSG(pagedlm(args, &out, &errs) == 0, "%s", errs);
    json_t *line[1] = {0};
    parse_outputs(out, line, 1);
    CHECK(line[0] && json_array_size(json_object_get(line[0], "tokens")) == 2);
    json_decref(line[0]);
    free(out), free(errs), free(f), free(model);
}

static void test_batch_file_errors_name_line_and_field(void) {
    char *model = test_data_path("models/stories260K/stories260K.gguf");
    struct {
        const char *content, *expect;
    } cases[] = {
        {"{\"prompt\": [1, 2], \"max_tokens\": 4}\n{\"prompt\": [1], \"bogus\": 1}\n", ":2: unknown field 'bogus'"},
        {"{\"prompt\": [1, 2], \"temperature\": \"hot\"}\n", ":1: 'temperature' must be a number"},
        {"{\"prompt\": 7}\n", ":1: 'prompt' must be"},
        {"{\"prompt\": [\"a\", \"b\"]}\n", ":1: 'prompt' must be one prompt"},
        {"{\"prompt\": [1], \"logit_bias\": {\"7\": 500}}\n", ":1: 'logit_bias"},
        {"{\"prompt\": [1], \"response_format\": {\"type\": \"json_schema\", \"json_schema\": {\"name\": \"x\", "
         "\"schema\": {\"type\": \"string\", \"not\": {}}}}}\n", ":1: 'response_format': schema: unsupported keyword 'not'"},
        {"\n\n{\"prompt\": [1, 2]\n", ":3: invalid JSON"},
        {"{\"prompt\": [1, 2], \"top_p\": 3}\n", "top_p"},
        {"{\"prompt\": [1, 99999]}\n", "out of vocabulary"},
        {"{\"prompt\": \"a\\u0000\", \"stop\": [\"x\\u0000\"]}\n", ":1: 'stop[0]' holds a NUL character"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *f = test_tmp_path("bad.jsonl");
        test_write_file(f, cases[i].content, strlen(cases[i].content));
        char args[4096], *out, *errs;
        snprintf(args, sizeof args, "run -m '%s' --batch-file '%s'", model, f);
        CHECK_EQ_INT(pagedlm(args, &out, &errs), 1);
        CHECK_CONTAINS(errs, cases[i].expect);
        CHECK(out[0] == '\0');
        free(out), free(errs), free(f);
    }
    free(model);
}

int main(void) {
    RUN(test_batch_file_invariance_stories);
    RUN(test_batch_file_invariance_qwen3);
    RUN(test_batch_file_small_pool_completes_everything);
    RUN(test_batch_lines_take_the_server_fields);
    RUN(test_batch_prompts_may_hold_nul);
    RUN(test_batch_file_errors_name_line_and_field);
    return test_summary();
}
