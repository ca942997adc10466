/*
 * test_util.h - the tiny test harness every tests/test_*.c uses.
 *
 * A test file defines `static void test_xxx(void)` functions and lists them
 * in main() with RUN(test_xxx). CHECK* record a failure and go on; REQUIRE*
 * stop the current test. Test data comes from PAGEDLM_TESTDATA; a missing
 * file fails the test with the path (it never passes silently). Scratch files
 * go to a fresh temporary folder (test_tmpdir()).
 */
#ifndef PDL_TEST_UTIL_H
#define PDL_TEST_UTIL_H

#include <math.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern int test_failures;      /* failed checks in the current test */
extern jmp_buf test_abort_jmp; /* REQUIRE jumps here */

#define CHECK(cond)                                                                    \
    do {                                                                               \
        if (!(cond)) {                                                                 \
            fprintf(stderr, "  %s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
            test_failures++;                                                           \
        }                                                                              \
    } while (0)

#define CHECK_MSG(cond, ...)                                                  \
    do {                                                                      \
        if (!(cond)) {                                                        \
            fprintf(stderr, "  %s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                     \
            fputc('\n', stderr);                                              \
            test_failures++;                                                  \
        }                                                                     \
    } while (0)

#define REQUIRE(cond)                                                                    \
    do {                                                                                 \
        if (!(cond)) {                                                                   \
            fprintf(stderr, "  %s:%d: REQUIRE failed: %s\n", __FILE__, __LINE__, #cond); \
            test_failures++;                                                             \
            longjmp(test_abort_jmp, 1);                                                  \
        }                                                                                \
    } while (0)

#define REQUIRE_MSG(cond, ...)                                                  \
    do {                                                                        \
        if (!(cond)) {                                                          \
            fprintf(stderr, "  %s:%d: REQUIRE failed: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                       \
            fputc('\n', stderr);                                                \
            test_failures++;                                                    \
            longjmp(test_abort_jmp, 1);                                         \
        }                                                                       \
    } while (0)

#define CHECK_EQ_INT(a, b)                                                              \
    do {                                                                                \
        long long va_ = (long long)(a), vb_ = (long long)(b);                           \
        if (va_ != vb_) {                                                               \
            fprintf(stderr, "  %s:%d: CHECK failed: %s == %s (%lld != %lld)\n", __FILE__, \
                    __LINE__, #a, #b, va_, vb_);                                        \
            test_failures++;                                                            \
        }                                                                               \
    } while (0)

/* The message must contain every given substring. */
#define CHECK_CONTAINS(haystack, needle)                                                  \
    do {                                                                                  \
        const char *h_ = (haystack), *n_ = (needle);                                      \
        if (!h_ || !strstr(h_, n_)) {                                                     \
            fprintf(stderr, "  %s:%d: CHECK failed: \"%s\" does not contain \"%s\"\n",    \
                    __FILE__, __LINE__, h_ ? h_ : "(null)", n_);                          \
            test_failures++;                                                              \
        }                                                                                 \
    } while (0)

#define RUN(fn) test_run(#fn, fn)

void test_run(const char *name, void (*fn)(void));
/* Prints "N passed, N failed" and returns the process exit code. */
int test_summary(void);

/* PAGEDLM_TESTDATA/rel, malloc'ed. REQUIREs that it exists. */
char *test_data_path(const char *rel);
/* A fresh temporary folder for this process (created once). */
const char *test_tmpdir(void);
/* A file of the source tree (e.g. "tests/e2e/fixtures/x"), malloc'ed. */
char *test_source_path(const char *rel);
/* test_tmpdir()/name, malloc'ed. */
char *test_tmp_path(const char *name);
/* dir/name, malloc'ed. */
char *test_join(const char *dir, const char *name);
/* A fresh folder test_tmpdir()/name (malloc'ed path); REQUIREs success. */
char *test_make_dir(const char *name);
/* A whole file, malloc'ed and NUL-terminated ("" when it cannot be read);
 * *len (when len != NULL) gets its size. */
char *test_slurp(const char *path, size_t *len);

/* What `pagedlm ARGS` did: exit status, stdout (out_len bytes), stderr. */
typedef struct cmd_result {
    int status;
    char *out, *err;
    size_t out_len;
} cmd_result;

/* Runs `$PAGEDLM_BIN ARGS` through the shell (ARGS quoted by the caller);
 * REQUIREs PAGEDLM_BIN, which ctest sets to the built program. */
cmd_result test_pagedlm(const char *args);
/* The same, killed after `seconds` (status 137 then): for what could hang. */
cmd_result test_pagedlm_within(int seconds, const char *args);
void test_free_result(cmd_result *r);

/* Writes len bytes to path; REQUIREs success. */
void test_write_file(const char *path, const void *data, size_t len);

struct pdl_model;
struct pdl_context;
/* A context over m with the model's default threads (the test fails when
 * none can be made); pdl_context_free it. */
struct pdl_context *test_context(const struct pdl_model *m);
/* The logits of every row of tokens[n] run as one sequence from position 0
 * (F32 KV cache) on a context of its own, malloc'ed [n x vocab]; REQUIREs
 * success. */
float *test_all_row_logits(struct pdl_model *m, const int32_t *tokens, size_t n);
/* The same on a context of the caller's (its counters, its scratch). */
float *test_context_row_logits(struct pdl_context *ctx, const int32_t *tokens, size_t n);

/* Every take of the kernels' scratch in a prefill of tokens[0, n - 1) and
 * then in a decode of tokens[n - 1] fails in turn (ctx's scratch
 * hook, kernels/scratch.h): each such forward must return an error naming
 * the kernel scratch and leave the logits buffer as it was, and the same
 * forward run again gives the clean run's logits byte for byte. Returns
 * how many failing forwards were checked (0 fails the test: nothing took
 * scratch). */
int test_forward_fails_at_every_scratch_take(struct pdl_context *ctx, const int32_t *tokens, size_t n);

/* A pdl_model_options log that fails the test on the loader's notice of
 * tensors the model does not use (user: the path, for the message): a
 * reference model's loader must take every tensor it wrote. */
void test_log_no_unused_tensors(const char *line, void *user);

#endif
