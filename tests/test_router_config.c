/*
 * test_router_config.c - the pure parts of the multi-model router
 * (src/server/router_config.c): which entries of a --models-dir become
 * models and under which names, --model NAME=PATH, the --models-config
 * JSON (both forms, its refusals), model names, and the LRU choice of the
 * model to stop. The processes and the proxy are tested end to end
 * (tests/e2e/router.test.mjs).
 */
#define _POSIX_C_SOURCE 200809L
#include <string.h>
#include <sys/stat.h>

#include "server/router_config.h"
#include "test_util.h"

static void touch(const char *dir, const char *name) {
    char *p = test_join(dir, name);
    test_write_file(p, "x", 1);
    free(p);
}

static char *subdir(const char *dir, const char *name) {
    char *p = test_join(dir, name);
    REQUIRE(mkdir(p, 0755) == 0);
    return p;
}

static void test_scan_models_dir(void) {
    char *dir = test_make_dir("models");
    touch(dir, "b-model.gguf");
    touch(dir, "a.gguf");
    touch(dir, "notes.txt");      /* not a model */
    touch(dir, ".hidden.gguf");   /* hidden: skipped */
    touch(dir, "x.gguf.part");    /* not ending in .gguf */
    char *hf = subdir(dir, "hf-model");
    touch(hf, "config.json");
    char *empty = subdir(dir, "no-config"); /* a folder without config.json */
    touch(empty, "model.safetensors");
    char *named = subdir(dir, "dir.gguf"); /* a folder named like a file, without config.json */
    rt_spec_list l = {0};
    pdl_error err;
    REQUIRE_MSG(rt_scan_models_dir(dir, &l, &err) == 0, "%s", err.message);
    REQUIRE(l.n == 3);
    /* name order, whatever readdir's */
    CHECK(strcmp(l.v[0].name, "a") == 0);
    CHECK(strcmp(l.v[1].name, "b-model") == 0);
    CHECK(strcmp(l.v[2].name, "hf-model") == 0);
    char *want = test_join(dir, "b-model.gguf");
    CHECK(strcmp(l.v[1].path, want) == 0);
    free(want);
    CHECK(strcmp(l.v[2].path, hf) == 0);
    CHECK(l.v[0].n_args == 0 && l.v[0].args == NULL);
    /* a second scan of the same folder: every name twice */
    CHECK(rt_scan_models_dir(dir, &l, &err) != 0);
    CHECK_CONTAINS(err.message, "given twice");
    rt_spec_list_free(&l);
    CHECK(rt_scan_models_dir("/nonexistent-folder-of-models", &l, &err) != 0);
    CHECK_CONTAINS(err.message, "cannot open");
    free(hf);
    free(empty);
    free(named);
    free(dir);
}

static void test_model_args(void) {
    rt_spec_list l = {0};
    pdl_error err;
    REQUIRE(rt_add_model(&l, "small=/m/small.gguf", &err) == 0);
    CHECK(strcmp(l.v[0].name, "small") == 0 && strcmp(l.v[0].path, "/m/small.gguf") == 0);
    CHECK(rt_add_model(&l, "small=/m/other.gguf", &err) != 0); /* a name twice */
    CHECK(rt_add_model(&l, "=/m/x.gguf", &err) != 0);
    CHECK(rt_add_model(&l, "bad name=/m/x.gguf", &err) != 0);
    CHECK(rt_add_model(&l, "noequals", &err) != 0);
    CHECK(rt_add_model(&l, "org/model:Q4_K_M=/m/x.gguf", &err) == 0); /* llama-server style names */
    CHECK_EQ_INT(l.n, 2);
    rt_spec_list_free(&l);

    CHECK(rt_is_name_eq_path("a=/m/a.gguf"));
    CHECK(!rt_is_name_eq_path("/m/a.gguf"));
    CHECK(!rt_is_name_eq_path("a="));
    CHECK(!rt_is_name_eq_path("bad name=/x"));
    /* a file really named NAME=PATH stays a path */
    char *odd = test_tmp_path("odd=name.gguf");
    test_write_file(odd, "x", 1);
    CHECK(!rt_is_name_eq_path(odd));
    free(odd);

    CHECK(rt_check_name("Qwen3-0.6B", NULL) == 0);
    CHECK(rt_check_name("", NULL) != 0);
    CHECK(rt_check_name("-x", NULL) != 0);
    CHECK(rt_check_name(".x", NULL) != 0);
    CHECK(rt_check_name("a\"b", NULL) != 0); /* would break the metrics label */
    CHECK(rt_check_name("a\nb", NULL) != 0);
    char longname[RT_MAX_NAME + 2];
    memset(longname, 'a', sizeof longname - 1);
    longname[RT_MAX_NAME + 1] = '\0';
    CHECK(rt_check_name(longname, NULL) != 0);
    longname[RT_MAX_NAME] = '\0';
    CHECK(rt_check_name(longname, NULL) == 0);
}

static void test_config(void) {
    rt_spec_list l = {0};
    pdl_error err;
    REQUIRE(rt_add_model(&l, "a=/m/a.gguf", &err) == 0);
    REQUIRE(rt_add_model(&l, "b=/m/b.gguf", &err) == 0);
    const char *cfg = "{\"a\": [\"--ctx-size\", 256, \"--threads\", \"1\"],"
                      " \"c\": {\"path\": \"/m/c\", \"args\": [\"--kv-cache-memory\", \"64MiB\"]},"
                      " \"b\": {\"args\": []}}";
    REQUIRE_MSG(rt_load_config_text(cfg, "cfg.json", &l, &err) == 0, "%s", err.message);
    REQUIRE(l.n == 3);
    REQUIRE(l.v[0].n_args == 4);
    CHECK(strcmp(l.v[0].args[0], "--ctx-size") == 0);
    CHECK(strcmp(l.v[0].args[1], "256") == 0); /* a number, written as given */
    CHECK(strcmp(l.v[0].args[3], "1") == 0);
    CHECK(l.v[1].n_args == 0);
    CHECK(strcmp(l.v[2].name, "c") == 0 && strcmp(l.v[2].path, "/m/c") == 0);
    CHECK(l.v[2].n_args == 2 && strcmp(l.v[2].args[1], "64MiB") == 0);
    /* configured twice (a second file) */
    CHECK(rt_load_config_text("{\"a\": [\"--threads\", \"2\"]}", "cfg2", &l, &err) != 0);
    CHECK_CONTAINS(err.message, "configured twice");
    rt_spec_list_free(&l);

    static const struct {
        const char *text, *why;
    } bad[] = {
        {"[1]", "expected a JSON object"},
        {"{\"zz\": []}", "has no path"},
        {"{\"a\": 3}", "expected an array"},
        {"{\"a\": [true]}", "not a string or a number"},
        {"{\"a\": {\"args\": [], \"ctx\": 1}}", "unknown key"},
        {"{\"a\": {\"path\": \"/x\"}}", "path may only name a new model"},
        {"{\"new\": {\"path\": 1}}", "path must be a string"},
        {"{\"a\": [], \"a\": []}", "duplicate"},
        {"{\"a\": [", "line 1"},
        {"{\"bad name\": {\"path\": \"/x\"}}", "only letters"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        rt_spec_list m = {0};
        REQUIRE(rt_add_model(&m, "a=/m/a.gguf", &err) == 0);
        CHECK_MSG(rt_load_config_text(bad[i].text, "cfg", &m, &err) != 0, "accepted %s", bad[i].text);
        CHECK_CONTAINS(err.message, bad[i].why);
        rt_spec_list_free(&m);
    }
    /* from a file; a missing file */
    char *p = test_tmp_path("models.json");
    test_write_file(p, "{\"a\": [\"-c\", \"64\"]}", strlen("{\"a\": [\"-c\", \"64\"]}"));
    REQUIRE(rt_add_model(&l, "a=/m/a.gguf", &err) == 0);
    CHECK_MSG(rt_load_config(p, &l, &err) == 0, "%s", err.message);
    CHECK(l.v[0].n_args == 2);
    rt_spec_list_free(&l);
    CHECK(rt_load_config("/nonexistent/models.json", &l, &err) != 0);
    free(p);
}

static void test_lru(void) {
    rt_lru_entry e[4] = {
        {.running = true, .loaded = true, .in_flight = 0, .last_used = 5},
        {.running = true, .loaded = true, .in_flight = 0, .last_used = 3},
        {.running = true, .loaded = true, .in_flight = 1, .last_used = 1},  /* busy: never stopped */
        {.running = false, .loaded = false, .in_flight = 0, .last_used = 0}, /* not running */
    };
    CHECK_EQ_INT(rt_pick_lru(e, 4, -1), 1);
    CHECK_EQ_INT(rt_pick_lru(e, 4, 1), 0); /* the one being loaded is never the victim */
    e[1].in_flight = 2;
    CHECK_EQ_INT(rt_pick_lru(e, 4, -1), 0);
    e[0].loaded = false; /* still loading: not idle yet */
    CHECK_EQ_INT(rt_pick_lru(e, 4, -1), -1);
    CHECK_EQ_INT(rt_count_running(e, 4), 3);
    /* ties: the lower index */
    rt_lru_entry t[2] = {{.running = true, .loaded = true, .last_used = 2},
                         {.running = true, .loaded = true, .last_used = 2}};
    CHECK_EQ_INT(rt_pick_lru(t, 2, -1), 0);
    CHECK_EQ_INT(rt_pick_lru(t, 2, 0), 1);
}

int main(void) {
    RUN(test_scan_models_dir);
    RUN(test_model_args);
    RUN(test_config);
    RUN(test_lru);
    return test_summary();
}
