/*
 * test_util.c - the harness behind tests/test_util.h (all but the model
 * helper, test_model_util.c, so kernel tests link with the kernels alone).
 */
#define _XOPEN_SOURCE 700
#include "test_util.h"

#include "pagedlm.h"

#include <ftw.h>
#include <sys/wait.h>

#include <sys/stat.h>
#include <unistd.h>

/* The environment the programs read, applied before a test's main (the
 * library reads none): ctest runs the model tests once per kernel family
 * with PAGEDLM_ISA set. */
__attribute__((constructor)) static void apply_kernel_env(void) {
    const char *isa = getenv("PAGEDLM_ISA"), *bf16 = getenv("PAGEDLM_BF16_ACTIVATIONS");
    pdl_error err;
    if ((isa || bf16) && pdl_set_kernels(isa, bf16 && *bf16 ? strcmp(bf16, "0") != 0 : -1, &err) != 0)
        fprintf(stderr, "PAGEDLM_ISA=%s\n", err.message);
}

int test_failures;
jmp_buf test_abort_jmp;
static int n_passed, n_failed;
static char tmpdir_buf[512];

void test_run(const char *name, void (*fn)(void)) {
    test_failures = 0;
    if (setjmp(test_abort_jmp) == 0) fn();
    if (test_failures == 0) {
        n_passed++;
        fprintf(stderr, "PASS %s\n", name);
    } else {
        n_failed++;
        fprintf(stderr, "FAIL %s\n", name);
    }
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

int test_summary(void) {
    /* scratch files are removed unless PAGEDLM_KEEP_TMP is set */
    if (tmpdir_buf[0] && !getenv("PAGEDLM_KEEP_TMP")) nftw(tmpdir_buf, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    printf("%d passed, %d failed\n", n_passed, n_failed);
    return n_failed ? 1 : 0;
}

char *test_data_path(const char *rel) {
    const char *root = getenv("PAGEDLM_TESTDATA");
    if (!root || !*root) root = "../shared";
    size_t n = strlen(root) + strlen(rel) + 2;
    char *p = malloc(n);
    REQUIRE(p != NULL);
    snprintf(p, n, "%s/%s", root, rel);
    struct stat st;
    if (stat(p, &st) != 0) {
        fprintf(stderr, "  missing test data: %s (set PAGEDLM_TESTDATA to the shared data folder)\n", p);
        free(p);
        test_failures++;
        longjmp(test_abort_jmp, 1);
    }
    return p;
}

const char *test_tmpdir(void) {
    if (!tmpdir_buf[0]) {
        const char *base = getenv("TMPDIR");
        if (!base || !*base) base = "/tmp";
        snprintf(tmpdir_buf, sizeof tmpdir_buf, "%s/pagedlm-test-XXXXXX", base);
        if (!mkdtemp(tmpdir_buf)) {
            fprintf(stderr, "cannot create a temporary folder under %s\n", base);
            exit(2);
        }
    }
    return tmpdir_buf;
}

char *test_join(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    REQUIRE(p != NULL);
    snprintf(p, n, "%s/%s", dir, name);
    return p;
}

char *test_tmp_path(const char *name) { return test_join(test_tmpdir(), name); }

char *test_make_dir(const char *name) {
    char *p = test_tmp_path(name);
    REQUIRE_MSG(mkdir(p, 0755) == 0, "mkdir %s", p);
    return p;
}

void test_write_file(const char *path, const void *data, size_t len) {
    FILE *f = fopen(path, "wb");
    REQUIRE_MSG(f != NULL, "cannot write %s", path);
    REQUIRE(fwrite(data, 1, len, f) == len);
    REQUIRE(fclose(f) == 0);
}

char *test_slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    size_t got = 0;
    if (f && fseek(f, 0, SEEK_END) == 0) {
        long n = ftell(f);
        fseek(f, 0, SEEK_SET);
        buf = malloc(n > 0 ? (size_t)n + 1 : 1);
        if (buf && n > 0) got = fread(buf, 1, (size_t)n, f);
    }
    if (f) fclose(f);
    if (!buf) buf = malloc(1);
    REQUIRE(buf != NULL);
    buf[got] = '\0';
    if (len) *len = got;
    return buf;
}

cmd_result test_pagedlm(const char *args) { return test_pagedlm_within(0, args); }

cmd_result test_pagedlm_within(int seconds, const char *args) {
    const char *bin = getenv("PAGEDLM_BIN");
    REQUIRE_MSG(bin && *bin, "PAGEDLM_BIN is not set (run the tests through ctest)");
    char *out_path = test_tmp_path("cmd-stdout"), *err_path = test_tmp_path("cmd-stderr");
    size_t n = strlen(bin) + strlen(args) + strlen(out_path) + strlen(err_path) + 64;
    char *cmd = malloc(n);
    REQUIRE(cmd != NULL);
    char limit[32] = "";
    if (seconds > 0) snprintf(limit, sizeof limit, "timeout -s KILL %d ", seconds);
    snprintf(cmd, n, "%s'%s' %s >'%s' 2>'%s'", limit, bin, args, out_path, err_path);
    int st = system(cmd);
    cmd_result r = {.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128};
    r.out = test_slurp(out_path, &r.out_len);
    r.err = test_slurp(err_path, NULL);
    free(cmd), free(out_path), free(err_path);
    return r;
}

void test_free_result(cmd_result *r) {
    free(r->out), free(r->err);
    r->out = r->err = NULL;
}

#ifndef PDL_SOURCE_DIR /* builds outside CMake (scripts/test-aarch64) run from the source tree */
#define PDL_SOURCE_DIR "."
#endif

char *test_source_path(const char *rel) {
    size_t n = strlen(PDL_SOURCE_DIR) + strlen(rel) + 2;
    char *p = malloc(n);
    REQUIRE(p != NULL);
    snprintf(p, n, "%s/%s", PDL_SOURCE_DIR, rel);
    return p;
}
