/*
 * test_cli_tokenize.c - `pagedlm tokenize`, `detokenize` and
 * `bench-tokenizer` as a user runs them: ids as Hugging Face gives them
 * (plain and --json), BOS only when the tokenizer adds one and never with
 * --no-add-special, special tokens parsed only with --parse-special and
 * printed only with --keep-special, -m taking a tokenizer folder, a model
 * folder, a model .gguf or a vocab-only .gguf; bad input exits with 2
 * (usage) or 1 (failure) and a message.
 */
#define _POSIX_C_SOURCE 200809L
#include <sys/wait.h>

#include "test_util.h"

/* Runs `pagedlm ARGS` through the shell (with stdin from /dev/null unless
 * ARGS redirects it). */
/* Runs `pagedlm CMD -m '<data>/MODEL' REST` and checks status and stdout. */
static void expect(const char *cmd, const char *model_rel, const char *rest, int status, const char *out) {
    char *model = test_data_path(model_rel), args[4096];
    snprintf(args, sizeof args, "%s -m '%s' %s", cmd, model, rest);
    cmd_result r = test_pagedlm(args);
    CHECK_MSG(r.status == status, "%s %s: exit %d (want %d), stderr: %s", cmd, rest, r.status, status, r.err);
    if (out) CHECK_MSG(strcmp(r.out, out) == 0, "%s %s: got \"%s\", want \"%s\"", cmd, rest, r.out, out);
    if (status != 0) CHECK_CONTAINS(r.err, "error: ");
    test_free_result(&r);
    free(model);
}

static void test_tokenize_prints_hf_ids(void) {
    expect("tokenize", "tokenizers/qwen3", "'Hello world'", 0, "9707 1879\n");
    expect("tokenize", "tokenizers/qwen3", "--json 'Hello world'", 0, "[9707, 1879]\n");
    expect("tokenize", "tokenizers/qwen3", "' this is \xf0\x9f\xa6\x99.cpp'", 0, "419 374 11162 99 247 13 10821\n");
    expect("tokenize", "tokenizers/llama.cpp-vectors/ggml-vocab-gpt-2.gguf", "'Hello world'", 0, "15496 995\n");
    expect("tokenize", "tokenizers/qwen3", "''", 0, "\n");
    expect("tokenize", "tokenizers/qwen3", "--json ''", 0, "[]\n");
}

static void test_tokenize_reads_stdin(void) {
    char *model = test_data_path("tokenizers/qwen3"), args[4096];
    snprintf(args, sizeof args, "tokenize -m '%s' - < /dev/null", model);
    cmd_result r = test_pagedlm(args);
    CHECK_EQ_INT(r.status, 0);
    CHECK(strcmp(r.out, "\n") == 0);
    test_free_result(&r);
    char *in = test_tmp_path("stdin.txt");
    test_write_file(in, "Hello world", 11);
    snprintf(args, sizeof args, "tokenize -m '%s' - < '%s'", model, in);
    r = test_pagedlm(args);
    CHECK_EQ_INT(r.status, 0);
    CHECK(strcmp(r.out, "9707 1879\n") == 0);
    test_free_result(&r);
    free(in);
    free(model);
}

/* BOS as HF encode(text) adds it: llama31-tiny yes (folder and GGUF), Qwen3 no. */
static void test_tokenize_adds_what_the_tokenizer_adds(void) {
    expect("tokenize", "models/llama31-tiny/hf", "'Hello world'", 0, "2045 39 515 952 220 86 1141 941\n");
    expect("tokenize", "models/llama31-tiny/model-f32.gguf", "'Hello world'", 0,
           "2045 39 515 952 220 86 1141 941\n");
    expect("tokenize", "models/llama31-tiny/hf", "--no-add-special 'Hello world'", 0, "39 515 952 220 86 1141 941\n");
    expect("tokenize", "models/qwen3-tiny/model-f32.gguf", "'Hello world'", 0, "39 515 952 220 86 1141 941\n");
}

static void test_tokenize_parses_special_only_when_asked(void) {
    expect("tokenize", "tokenizers/qwen3", "--parse-special '<|im_start|>user'", 0, "151644 872\n");
    expect("tokenize", "tokenizers/qwen3", "'<|im_start|>user'", 0, "27 91 318 4906 91 29 872\n");
}

static void test_detokenize_prints_text(void) {
    expect("detokenize", "tokenizers/qwen3", "9707 1879", 0, "Hello world\n");
    expect("detokenize", "tokenizers/qwen3", "9707,1879", 0, "Hello world\n");
    expect("detokenize", "tokenizers/qwen3", "'419 374 11162 99 247 13 10821'", 0, " this is \xf0\x9f\xa6\x99.cpp\n");
    expect("detokenize", "tokenizers/qwen3", "151644 872", 0, "user\n");
    expect("detokenize", "tokenizers/qwen3", "--keep-special 151644 872", 0, "<|im_start|>user\n");
    expect("detokenize", "tokenizers/llama.cpp-vectors/ggml-vocab-llama-spm.gguf", "1 15043 3186", 0,
           "Hello world\n");
}

static void test_bad_input_exit_codes(void) {
    cmd_result r = test_pagedlm("tokenize 'Hello'");
    CHECK_EQ_INT(r.status, 2);
    CHECK_CONTAINS(r.err, "-m");
    test_free_result(&r);
    expect("tokenize", "tokenizers/qwen3", "", 2, NULL);
    expect("tokenize", "tokenizers/qwen3", "--frobnicate 'x'", 2, NULL);
    expect("tokenize", "tokenizers/qwen3", "'a' 'b'", 2, NULL);
    expect("detokenize", "tokenizers/qwen3", "", 2, NULL);
    expect("detokenize", "tokenizers/qwen3", "12 abc", 2, NULL);
    expect("detokenize", "tokenizers/qwen3", "999999999", 1, NULL);
    expect("tokenize", "models/stories260K", "'x'", 1, NULL); /* a folder without tokenizer.json */
    r = test_pagedlm("tokenize -m /nonexistent/tokenizer 'x'");
    CHECK_EQ_INT(r.status, 1);
    CHECK_CONTAINS(r.err, "/nonexistent/tokenizer");
    test_free_result(&r);
    expect("bench-tokenizer", "tokenizers/qwen3", "--repeat 0", 2, NULL);
}

static void test_bench_tokenizer_reports_speeds(void) {
    char *model = test_data_path("tokenizers/qwen3"), args[4096];
    snprintf(args, sizeof args, "bench-tokenizer -m '%s' --repeat 1 --size 20000", model);
    cmd_result r = test_pagedlm(args);
    CHECK_EQ_INT(r.status, 0);
    CHECK_CONTAINS(r.out, "load:");
    CHECK_CONTAINS(r.out, "encode:");
    CHECK_CONTAINS(r.out, "MB/s");
    CHECK_CONTAINS(r.out, "decode:");
    test_free_result(&r);
    free(model);
}

int main(void) {
    RUN(test_tokenize_prints_hf_ids);
    RUN(test_tokenize_reads_stdin);
    RUN(test_tokenize_adds_what_the_tokenizer_adds);
    RUN(test_tokenize_parses_special_only_when_asked);
    RUN(test_detokenize_prints_text);
    RUN(test_bad_input_exit_codes);
    RUN(test_bench_tokenizer_reports_speeds);
    return test_summary();
}
