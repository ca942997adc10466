/*
 * vocab_vectors.c - reading llama.cpp's tokenizer test vectors (see the header).
 */
#include "vocab_vectors.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"
#include "util/file_map.h"

void vocab_vectors_free(vocab_vectors *v) {
    for (size_t i = 0; i < v->n; i++) free(v->ids[i]);
    free(v->text);
    free(v->text_len);
    free(v->ids);
    free(v->n_ids);
    free(v->inp);
    free(v->out);
    memset(v, 0, sizeof *v);
}

void vocab_vectors_load(vocab_vectors *v, const char *name) {
    memset(v, 0, sizeof *v);
    char rel_inp[256], rel_out[256];
    snprintf(rel_inp, sizeof rel_inp, "tokenizers/llama.cpp-vectors/ggml-vocab-%s.gguf.inp", name);
    snprintf(rel_out, sizeof rel_out, "tokenizers/llama.cpp-vectors/ggml-vocab-%s.gguf.out", name);
    char *pi = test_data_path(rel_inp), *po = test_data_path(rel_out);
    size_t li, lo;
    pdl_error err;
    REQUIRE_MSG(file_read(pi, PDL_READ_MAX_JSON, &v->inp, &li, &err) == 0, "%s", err.message);
    REQUIRE_MSG(file_read(po, PDL_READ_MAX_JSON, &v->out, &lo, &err) == 0, "%s", err.message);
    free(pi);
    free(po);
    static const char sep[] = "\n__ggml_vocab_test__\n";
    size_t cap = 256;
    v->text = calloc(cap, sizeof *v->text);
    v->text_len = calloc(cap, sizeof *v->text_len);
    v->ids = calloc(cap, sizeof *v->ids);
    v->n_ids = calloc(cap, sizeof *v->n_ids);
    REQUIRE(v->text && v->text_len && v->ids && v->n_ids);
    char *p = v->inp, *end = v->inp + li;
    while (p < end) {
        char *s = strstr(p, sep);
        REQUIRE_MSG(s != NULL, "%s: text after the last separator", rel_inp);
        REQUIRE(v->n < cap);
        *s = '\0';
        v->text[v->n] = p;
        v->text_len[v->n] = (size_t)(s - p);
        v->n++;
        p = s + strlen(sep);
    }
    size_t line = 0;
    char *q = v->out;
    while (*q) {
        char *nl = strchr(q, '\n');
        if (nl) *nl = '\0';
        REQUIRE_MSG(line < v->n, "%s has more lines than %s has strings", rel_out, rel_inp);
        int32_t *ids = malloc((strlen(q) / 2 + 1) * sizeof *ids);
        REQUIRE(ids != NULL);
        size_t k = 0;
        char *tokp = q, *endp;
        for (;;) {
            long val = strtol(tokp, &endp, 10);
            if (endp == tokp) break;
            ids[k++] = (int32_t)val;
            tokp = endp;
        }
        v->ids[line] = ids;
        v->n_ids[line] = k;
        line++;
        if (!nl) break;
        q = nl + 1;
    }
    REQUIRE_MSG(line == v->n, "%s: %zu lines for %zu strings", rel_out, line, v->n);
}
