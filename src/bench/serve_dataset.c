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

#include "net/http_client.h"
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
    if (!v) return err_fail(err, "out of memory");
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
        return err_fail(err, "the tokenizer has no normal tokens");
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
        return err_fail(err, "out of memory");
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

/* ---- the random dataset through the server's tokenizer ------------------------ */

typedef struct body_buf {
    char *data;
    size_t len, cap;
} body_buf;

static int collect_body(const char *data, size_t len, void *user) {
    body_buf *b = user;
    if (b->len + len + 1 > b->cap) {
        size_t cap = (b->len + len + 1) * 2;
        char *p = realloc(b->data, cap);
        if (!p) return 1;
        b->data = p;
        b->cap = cap;
    }
    memcpy(b->data + b->len, data, len);
    b->len += len;
    b->data[b->len] = '\0';
    return 0;
}

/* POSTs a JSON body to the server's `path`; *reply gets the JSON answer
 * (status 200) or NULL (*status says why). -1 on a connection error. */
static int post_json(const http_url *url, const char *auth, const char *path, json_t *body, json_t **reply,
                     int *status, pdl_error *err) {
    *reply = NULL;
    char *text = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    if (!text) return err_fail(err, "out of memory");
    body_buf b = {0};
    char msg[256] = "";
    int rc = http_post(url, path, auth, text, strlen(text), collect_body, &b, status, msg, sizeof msg);
    free(text);
    if (rc) {
        free(b.data);
        return err_fail(err, "%s: %s", path, msg);
    }
    if (*status == 200) *reply = json_loadb(b.data ? b.data : "", b.len, JSON_ALLOW_NUL, NULL);
    free(b.data);
    if (*status == 200 && !*reply) return err_fail(err, "%s: the answer is not JSON", path);
    return 0;
}

static json_t *ids_json(const int32_t *ids, size_t n) {
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++) json_array_append_new(a, json_integer(ids[i]));
    return a;
}

/* /detokenize of ids: *text malloc'ed; status 400 (an id outside the
 * vocabulary) gives 1. */
static int remote_decode(const http_url *url, const char *auth, const int32_t *ids, size_t n, char **text,
                         pdl_error *err) {
    json_t *reply;
    int status;
    if (post_json(url, auth, "/detokenize", json_pack("{s:o}", "tokens", ids_json(ids, n)), &reply, &status, err))
        return -1;
    if (status == 400) return 1;
    if (status != 200)
        return err_fail(err, "/detokenize answered HTTP %d (the server offers no tokenizer? give --tokenizer)", status);
    const json_t *p = json_object_get(reply, "prompt");
    *text = json_is_string(p) ? strndup(json_string_value(p), json_string_length(p)) : NULL;
    json_decref(reply);
    return *text ? 0 : err_fail(err, "/detokenize: no 'prompt' string in the answer");
}

/* /tokenize of text without special tokens: *ids malloc'ed. */
static int remote_encode(const http_url *url, const char *auth, const char *text, int32_t **ids, size_t *n,
                         pdl_error *err) {
    json_t *reply;
    int status;
    if (post_json(url, auth, "/tokenize", json_pack("{s:s, s:b}", "prompt", text, "add_special_tokens", 0), &reply,
                  &status, err))
        return -1;
    if (status != 200)
        return err_fail(err, "/tokenize answered HTTP %d (the server offers no tokenizer? give --tokenizer)", status);
    const json_t *t = json_object_get(reply, "tokens");
    size_t len = json_array_size(t);
    *ids = malloc((len ? len : 1) * sizeof **ids);
    if (!*ids) {
        json_decref(reply);
        return err_fail(err, "out of memory");
    }
    for (size_t i = 0; i < len; i++) (*ids)[i] = (int32_t)json_integer_value(json_array_get(t, i));
    *n = len;
    json_decref(reply);
    return 0;
}

/* The vocabulary size: the first id /detokenize refuses (binary search). */
static int remote_vocab(const http_url *url, const char *auth, int32_t *vocab, pdl_error *err) {
    int32_t lo = 0, hi = 1; /* lo valid, hi unknown */
    for (;;) {
        char *t = NULL;
        int r = remote_decode(url, auth, &hi, 1, &t, err);
        free(t);
        if (r < 0) return -1;
        if (r == 1) break;
        lo = hi;
        if (hi > (1 << 24)) return err_fail(err, "/detokenize accepts every id up to %d: cannot find the vocabulary", hi);
        hi *= 2;
    }
    while (hi - lo > 1) {
        int32_t mid = lo + (hi - lo) / 2;
        char *t = NULL;
        int r = remote_decode(url, auth, &mid, 1, &t, err);
        free(t);
        if (r < 0) return -1;
        if (r == 1) hi = mid;
        else lo = mid;
    }
    *vocab = hi;
    return 0;
}

int dataset_random_remote(const http_url *url, const char *auth, int n, int input_len, int output_len,
                          double range_ratio, int prefix_len, uint64_t seed, bench_prompt **out, pdl_error *err) {
    int32_t vocab = 0;
    if (remote_vocab(url, auth, &vocab, err)) return -1;
    bench_prompt *p = calloc((size_t)n, sizeof *p);
    int in_lo, in_hi, out_lo, out_hi;
    dataset_length_range(input_len, range_ratio, &in_lo, &in_hi);
    dataset_length_range(output_len, range_ratio, &out_lo, &out_hi);
    int32_t *ids = malloc((size_t)(prefix_len + in_hi) * 2 * sizeof *ids + 64);
    if (!p || !ids) {
        free(p), free(ids);
        return err_fail(err, "out of memory");
    }
    uint64_t s = seed;
    for (int i = 0; i < prefix_len; i++) ids[i] = (int32_t)(bench_rng(&s) % (uint64_t)vocab); /* shared by all */
    int rc = 0;
    for (int k = 0; k < n && rc == 0; k++) {
        int len = in_lo + (int)(bench_rng(&s) % (uint64_t)(in_hi - in_lo + 1)), target = prefix_len + len;
        p[k].output_len = out_lo + (int)(bench_rng(&s) % (uint64_t)(out_hi - out_lo + 1));
        size_t have = (size_t)prefix_len;
        char *text = NULL;
        /* draw, decode, encode again: special or partial tokens vanish or
         * merge, so grow and cut until the server counts the target */
        for (int round = 0; round < 8 && rc == 0; round++) {
            while ((int)have < target) ids[have++] = (int32_t)(bench_rng(&s) % (uint64_t)vocab);
            free(text);
            text = NULL;
            int r = remote_decode(url, auth, ids, have, &text, err);
            if (r) {
                rc = r < 0 ? -1 : err_fail(err, "/detokenize refused ids below the vocabulary size %d", vocab);
                break;
            }
            int32_t *re = NULL;
            size_t n_re = 0;
            if ((rc = remote_encode(url, auth, text, &re, &n_re, err))) break;
            if ((int)n_re == target) {
                free(re);
                break;
            }
            have = n_re < (size_t)target ? n_re : (size_t)target;
            memcpy(ids, re, have * sizeof *ids);
            free(re);
        }
        p[k].text = text;
        p[k].prompt_len = target;
    }
    free(ids);
    if (rc) {
        dataset_free(p, n);
        return -1;
    }
    *out = p;
    return 0;
}

int dataset_jsonl(const char *path, int n, int output_len, bench_prompt **out, pdl_error *err) {
    FILE *f = file_open_regular(path, err);
    if (!f) return -1;
    bench_prompt *all = NULL;
    int count = 0, cap = 0, line_no = 0;
    char *line = NULL;
    size_t lcap = 0;
    int rc = 0;
    long long got;
    while ((got = file_read_line(f, &line, &lcap, PDL_READ_MAX_LINE)) != 0) {
        line_no++;
        if (got < 0) {
            rc = err_fail(err, "%s:%d: the line is longer than %zu bytes", path, line_no, (size_t)PDL_READ_MAX_LINE);
            break;
        }
        if (strspn(line, " \t\r\n") == strlen(line)) continue;
        json_error_t je;
        json_t *o = json_loads(line, 0, &je);
        json_t *pr = o ? json_object_get(o, "prompt") : NULL;
        if (!json_is_string(pr)) {
            rc = err_fail(err, "%s:%d: each line must be an object with a string \"prompt\"", path, line_no);
            json_decref(o);
            break;
        }
        if (count == cap) {
            cap = cap ? cap * 2 : 64;
            bench_prompt *q = realloc(all, (size_t)cap * sizeof *q);
            if (!q) {
                json_decref(o);
                rc = err_fail(err, "out of memory");
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
    if (rc == 0 && count == 0) rc = err_fail(err, "%s: no prompts", path);
    bench_prompt *p = rc ? NULL : calloc((size_t)n, sizeof *p);
    if (rc == 0 && !p) rc = err_fail(err, "out of memory");
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
