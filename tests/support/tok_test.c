/*
 * tok_test.c - the shared tokenizer test helpers (tok_test.h).
 */
#include "tok_test.h"

#include "format/gguf.h"
#include "gguf_writer.h"
#include "test_util.h"

tok_tokenizer *tt_load_gguf(const char *rel) {
    pdl_error err;
    char *path = test_data_path(rel);
    gguf_file *g = NULL;
    int rc = gguf_open(&g, path, &err);
    free(path);
    REQUIRE_MSG(rc == 0, "%s", err.message);
    tok_tokenizer *t = NULL;
    rc = tok_load_gguf(&t, g, &err);
    gguf_close(g);
    REQUIRE_MSG(rc == 0, "%s: %s", rel, err.message);
    return t;
}

int tt_load_written_gguf(gguf_writer *w, const char *name, tok_tokenizer **out, pdl_error *err) {
    char *path = test_tmp_path(name);
    REQUIRE(gguf_writer_write(w, path) == 0);
    gguf_writer_free(w);
    gguf_file *g = NULL;
    REQUIRE_MSG(gguf_open(&g, path, err) == 0, "%s", err->message);
    free(path);
    *out = NULL;
    int rc = tok_load_gguf(out, g, err);
    gguf_close(g);
    return rc;
}

tok_tokenizer *tt_load_hf(const char *rel) {
    pdl_error err;
    char *dir = test_data_path(rel);
    tok_tokenizer *t = NULL;
    int rc = tok_load_hf_dir(&t, dir, &err);
    free(dir);
    REQUIRE_MSG(rc == 0, "%s: %s", rel, err.message);
    return t;
}

bool tt_ids_equal(const int32_t *a, size_t na, const int32_t *b, size_t nb) {
    return na == nb && (na == 0 || memcmp(a, b, na * sizeof *a) == 0);
}

void tt_print_ids(const char *label, const int32_t *ids, size_t n) {
    fprintf(stderr, "    %s:", label);
    for (size_t i = 0; i < n; i++) fprintf(stderr, " %d", (int)ids[i]);
    fputc('\n', stderr);
}
