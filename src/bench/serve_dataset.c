/*
 * serve_dataset.c - random and JSONL prompt sets and Poisson arrivals.
 */
#define _POSIX_C_SOURCE 200809L
#include "bench/serve_dataset.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/error.h"
#include "util/file_map.h"

uint64_t bench_rng(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double uniform01(uint64_t *s) { return (double)(bench_rng(s) >> 11) * (1.0 / 9007199254740992.0); }

void dataset_length_range(int len, double r, int *lo, int *hi) {
    *lo = (int)floor(len * (1.0 - r));
    *hi = (int)floor(len * (1.0 + r));
    if (*lo < 1) *lo = 1;
    if (*hi < *lo) *hi = *lo;
}

int dataset_normal_vocab(const pdl_model *tok, int32_t **ids, size_t *n, pdl_error *err) {
    pdl_model_info info;
    pdl_model_get_info(tok, &info);
    int32_t *v = malloc((size_t)info.vocab * sizeof *v);
    if (!v) return pdl_fail(err, "out of memory");
    size_t k = 0;
    for (int32_t id = 0; id < info.vocab; id++) {
        char *text = NULL;
        if (pdl_detokenize(tok, &id, 1, &text, NULL, err)) {
            free(v);
            return -1;
        }
        /* U+FFFD: a lone byte token; empty: special or control */
        if (text[0] && !strstr(text, "\xef\xbf\xbd")) v[k++] = id;
        free(text);
    }
    if (k == 0) {
        free(v);
        return pdl_fail(err, "the tokenizer has no normal tokens");
    }
    *ids = v;
    *n = k;
    return 0;
}

int dataset_random(const pdl_model *tok, int n, int input_len, int output_len, double range_ratio, int prefix_len,
                   uint64_t seed, bench_prompt **out, pdl_error *err) {
    int32_t *vocab;
    size_t nv;
    if (dataset_normal_vocab(tok, &vocab, &nv, err)) return -1;
    bench_prompt *p = calloc((size_t)n, sizeof *p);
    int in_lo, in_hi, out_lo, out_hi;
    dataset_length_range(input_len, range_ratio, &in_lo, &in_hi);
    dataset_length_range(output_len, range_ratio, &out_lo, &out_hi);
    int32_t *ids = malloc((size_t)(prefix_len + in_hi + 1) * sizeof *ids);
    if (!p || !ids) {
        free(p), free(ids), free(vocab);
        return pdl_fail(err, "out of memory");
    }
    uint64_t s = seed;
    for (int i = 0; i < prefix_len; i++) ids[i] = vocab[bench_rng(&s) % nv]; /* shared by all */
    int rc = 0;
    for (int k = 0; k < n && rc == 0; k++) {
        int len = in_lo + (int)(bench_rng(&s) % (uint64_t)(in_hi - in_lo + 1));
        p[k].output_len = out_lo + (int)(bench_rng(&s) % (uint64_t)(out_hi - out_lo + 1));
        for (int i = 0; i < len; i++) ids[prefix_len + i] = vocab[bench_rng(&s) % nv];
        p[k].prompt_len = prefix_len + len;
        rc = pdl_detokenize(tok, ids, (size_t)(prefix_len + len), &p[k].text, NULL, err);
    }
    free(ids);
    free(vocab);
    if (rc) {
        dataset_free(p, n);
        return -1;
    }
    *out = p;
    return 0;
}

int dataset_jsonl(const char *path, int n, int output_len, bench_prompt **out, pdl_error *err) {
    FILE *f = pdl_fopen_regular(path, err);
    if (!f) return -1;
    bench_prompt *all = NULL;
    int count = 0, cap = 0, line_no = 0;
    char *line = NULL;
    size_t lcap = 0;
    int rc = 0;
    long long got;
    while ((got = pdl_read_line(f, &line, &lcap, PDL_READ_MAX_LINE)) != 0) {
        line_no++;
        if (got < 0) {
            rc = pdl_fail(err, "%s:%d: the line is longer than %zu bytes", path, line_no, (size_t)PDL_READ_MAX_LINE);
            break;
        }
        if (strspn(line, " \t\r\n") == strlen(line)) continue;
        json_error_t je;
        json_t *o = json_loads(line, 0, &je);
        json_t *pr = o ? json_object_get(o, "prompt") : NULL;
        if (!json_is_string(pr)) {
            rc = pdl_fail(err, "%s:%d: each line must be an object with a string \"prompt\"", path, line_no);
            json_decref(o);
            break;
        }
        if (count == cap) {
            cap = cap ? cap * 2 : 64;
            bench_prompt *q = realloc(all, (size_t)cap * sizeof *q);
            if (!q) {
                json_decref(o);
                rc = pdl_fail(err, "out of memory");
                break;
            }
            all = q;
        }
        json_t *ol = json_object_get(o, "output_len");
        all[count].text = strdup(json_string_value(pr));
        all[count].prompt_len = 0;
        all[count].output_len = json_is_integer(ol) && json_integer_value(ol) > 0 ? (int)json_integer_value(ol)
                                                                                   : output_len;
        count++;
        json_decref(o);
    }
    free(line);
    fclose(f);
    if (rc == 0 && count == 0) rc = pdl_fail(err, "%s: no prompts", path);
    bench_prompt *p = rc ? NULL : calloc((size_t)n, sizeof *p);
    if (rc == 0 && !p) rc = pdl_fail(err, "out of memory");
    for (int k = 0; rc == 0 && k < n; k++) {
        p[k] = all[k % count];
        p[k].text = strdup(all[k % count].text);
    }
    dataset_free(all, count);
    if (rc) return -1;
    *out = p;
    return 0;
}

void dataset_free(bench_prompt *p, int n) {
    if (!p) return;
    for (int i = 0; i < n; i++) free(p[i].text);
    free(p);
}

void arrivals_poisson(double rate, int n, uint64_t seed, double *offsets) {
    uint64_t s = seed;
    double t = 0;
    for (int i = 0; i < n; i++) {
        if (rate > 0 && isfinite(rate)) t += -log(1.0 - uniform01(&s)) / rate;
        offsets[i] = rate > 0 && isfinite(rate) ? t : 0.0;
    }
}
