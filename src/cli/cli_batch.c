/*
 * cli_batch.c - `pagedlm run --batch-file FILE.jsonl`: every line is a
 * request; all are submitted at once and served concurrently by the engine;
 * one JSON line per request (per sequence when n > 1) is printed in input
 * order when all are done.
 */
#define _POSIX_C_SOURCE 200809L
#include "cli/cli_batch.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/file_map.h"

/* What one request line asked for and what came back. */
typedef struct batch_item {
    json_t *id;
    int32_t *prompt;
    size_t n_prompt;
    pdl_request_params params;
    char **stop;
    int32_t *stop_ids;
    int n;                    /* sequences */
    json_t **tokens;          /* [n] arrays of ids */
    json_t **logprobs;        /* [n] arrays (when asked) */
    json_t *prompt_logprobs;  /* array (when asked) */
    char **text;              /* [n] */
    size_t *text_len;
    const char **finish;      /* [n] */
    int cached_tokens;        /* prompt tokens the prefix cache gave */
    char *cache_salt;
} batch_item;

static void item_free(batch_item *it) {
    json_decref(it->id);
    free(it->prompt);
    free(it->cache_salt);
    for (int i = 0; i < it->params.n_stop; i++) free(it->stop[i]);
    free(it->stop);
    free(it->stop_ids);
    for (int i = 0; i < it->n; i++) {
        if (it->tokens) json_decref(it->tokens[i]);
        if (it->logprobs) json_decref(it->logprobs[i]);
        if (it->text) free(it->text[i]);
    }
    free(it->tokens), free(it->logprobs), free(it->text), free(it->text_len), free(it->finish);
    json_decref(it->prompt_logprobs);
}

static json_t *logprob_entry(int32_t token, float lp, const pdl_logprob *top, int n_top) {
    json_t *o = json_pack("{s:i, s:f}", "token", (json_int_t)token, "logprob", (double)lp);
    json_t *arr = json_array();
    for (int i = 0; i < n_top; i++)
        json_array_append_new(arr, json_pack("{s:i, s:f}", "token", (json_int_t)top[i].token, "logprob",
                                             (double)top[i].logprob));
    json_object_set_new(o, "top", arr);
    return o;
}

static void on_event(const pdl_event *ev, void *user) {
    batch_item *it = user;
    int i = ev->index;
    if (i < 0 || i >= it->n) return;
    if (ev->kind == PDL_EVENT_PROMPT_LOGPROB) {
        json_array_append_new(it->prompt_logprobs, logprob_entry(ev->token, ev->logprob, ev->top, ev->n_top));
        return;
    }
    if (ev->kind == PDL_EVENT_TOKEN) {
        json_array_append_new(it->tokens[i], json_integer(ev->token));
        if (it->logprobs) json_array_append_new(it->logprobs[i], logprob_entry(ev->token, ev->logprob, ev->top, ev->n_top));
    } else {
        it->finish[i] = ev->finish_reason; /* static strings */
        if (i == 0) it->cached_tokens = ev->cached_tokens;
    }
    size_t n = ev->text ? ev->text_len : 0;
    if (n) {
        char *p = realloc(it->text[i], it->text_len[i] + n + 1);
        if (!p) return;
        memcpy(p + it->text_len[i], ev->text, n + 1);
        it->text[i] = p;
        it->text_len[i] += n;
    }
}

/* ---- parsing one line ----------------------------------------------------- */

#define LINE_ERR(...) (fprintf(stderr, "error: %s:%d: ", path, line), fprintf(stderr, __VA_ARGS__), fputc('\n', stderr), -1)

static int get_number(json_t *o, const char *key, double *out, const char *path, int line) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_number(v)) return LINE_ERR("field '%s' must be a number", key);
    *out = json_number_value(v);
    return 1;
}

static int get_int(json_t *o, const char *key, long lo, long hi, int *out, const char *path, int line) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
        return LINE_ERR("field '%s' must be an integer in [%ld, %ld]", key, lo, hi);
    *out = (int)json_integer_value(v);
    return 1;
}

static const char *const KNOWN_FIELDS[] = {
    "id", "prompt", "max_tokens", "temperature", "top_k", "top_p", "min_p", "seed", "repetition_penalty",
    "presence_penalty", "frequency_penalty", "stop", "stop_token_ids", "ignore_eos", "logprobs",
    "prompt_logprobs", "n", "cache_salt", NULL};

static int parse_item(pdl_model *model, json_t *o, int default_max_tokens, batch_item *it, const char *path,
                      int line) {
    memset(it, 0, sizeof *it);
    it->params.logprobs = it->params.prompt_logprobs = -1;
    if (!json_is_object(o)) return LINE_ERR("a request must be a JSON object");
    const char *key;
    json_t *v;
    json_object_foreach(o, key, v) {
        bool known = false;
        for (int i = 0; KNOWN_FIELDS[i]; i++) known |= strcmp(key, KNOWN_FIELDS[i]) == 0;
        if (!known) return LINE_ERR("unknown field '%s'", key);
    }
    v = json_object_get(o, "id");
    it->id = v ? json_incref(v) : json_integer(line);
    /* prompt: text (tokenized with the model's special tokens) or ids */
    json_t *p = json_object_get(o, "prompt");
    pdl_error err;
    if (json_is_string(p)) {
        if (pdl_tokenize(model, json_string_value(p), json_string_length(p), true, &it->prompt, &it->n_prompt, &err))
            return LINE_ERR("%s", err.message);
    } else if (json_is_array(p) && json_array_size(p) > 0) {
        it->n_prompt = json_array_size(p);
        it->prompt = malloc(it->n_prompt * sizeof *it->prompt);
        if (!it->prompt) return LINE_ERR("out of memory");
        for (size_t i = 0; i < it->n_prompt; i++) {
            json_t *t = json_array_get(p, i);
            if (!json_is_integer(t) || json_integer_value(t) < 0 || json_integer_value(t) > INT32_MAX)
                return LINE_ERR("prompt[%zu] must be a token id", i);
            it->prompt[i] = (int32_t)json_integer_value(t);
        }
    } else {
        return LINE_ERR("field 'prompt' must be a string or a non-empty array of token ids");
    }
    pdl_request_params *rp = &it->params;
    rp->max_tokens = default_max_tokens;
    double d;
    int r;
    if (get_int(o, "max_tokens", 1, 1 << 30, &rp->max_tokens, path, line) < 0) return -1;
    if ((r = get_number(o, "temperature", &d, path, line)) < 0) return -1;
    if (r) rp->sampling.temperature = (float)d;
    if (get_int(o, "top_k", -1, 1 << 30, &rp->sampling.top_k, path, line) < 0) return -1;
    if (rp->sampling.top_k < 0) rp->sampling.top_k = 0; /* -1 = off, as vLLM */
    if ((r = get_number(o, "top_p", &d, path, line)) < 0) return -1;
    if (r) rp->sampling.top_p = (float)d;
    if ((r = get_number(o, "min_p", &d, path, line)) < 0) return -1;
    if (r) rp->sampling.min_p = (float)d;
    if ((r = get_number(o, "repetition_penalty", &d, path, line)) < 0) return -1;
    if (r) rp->sampling.repetition_penalty = (float)d;
    if ((r = get_number(o, "presence_penalty", &d, path, line)) < 0) return -1;
    if (r) rp->sampling.presence_penalty = (float)d;
    if ((r = get_number(o, "frequency_penalty", &d, path, line)) < 0) return -1;
    if (r) rp->sampling.frequency_penalty = (float)d;
    v = json_object_get(o, "seed");
    if (v && !json_is_null(v)) {
        if (!json_is_integer(v)) return LINE_ERR("field 'seed' must be an integer");
        rp->sampling.seed = (uint64_t)json_integer_value(v);
    }
    if (get_int(o, "logprobs", 0, 20, &rp->logprobs, path, line) < 0) return -1;
    if (get_int(o, "prompt_logprobs", 0, 20, &rp->prompt_logprobs, path, line) < 0) return -1;
    it->n = 1;
    if (get_int(o, "n", 1, 64, &it->n, path, line) < 0) return -1;
    rp->n = it->n;
    v = json_object_get(o, "cache_salt");
    if (v && !json_is_null(v)) {
        if (!json_is_string(v) || json_string_length(v) == 0) return LINE_ERR("field 'cache_salt' must be a non-empty string");
        if (!(it->cache_salt = strdup(json_string_value(v)))) return LINE_ERR("out of memory");
        rp->cache_salt = it->cache_salt;
    }
    v = json_object_get(o, "ignore_eos");
    if (v && !json_is_null(v)) {
        if (!json_is_boolean(v)) return LINE_ERR("field 'ignore_eos' must be true or false");
        rp->ignore_eos = json_is_true(v);
    }
    v = json_object_get(o, "stop");
    if (v && !json_is_null(v)) {
        size_t n = json_is_string(v) ? 1 : json_is_array(v) ? json_array_size(v) : (size_t)-1;
        if (n == (size_t)-1) return LINE_ERR("field 'stop' must be a string or a list of strings");
        it->stop = calloc(n ? n : 1, sizeof *it->stop);
        if (!it->stop) return LINE_ERR("out of memory");
        for (size_t i = 0; i < n; i++) {
            json_t *s = json_is_string(v) ? v : json_array_get(v, i);
            if (!json_is_string(s) || json_string_length(s) == 0) return LINE_ERR("stop[%zu] must be a non-empty string", i);
            it->stop[i] = strdup(json_string_value(s));
            rp->n_stop = (int)i + 1;
        }
        rp->stop = (const char *const *)it->stop;
    }
    v = json_object_get(o, "stop_token_ids");
    if (v && !json_is_null(v)) {
        if (!json_is_array(v)) return LINE_ERR("field 'stop_token_ids' must be a list of token ids");
        size_t n = json_array_size(v);
        it->stop_ids = malloc((n ? n : 1) * sizeof *it->stop_ids);
        if (!it->stop_ids) return LINE_ERR("out of memory");
        for (size_t i = 0; i < n; i++) {
            json_t *t = json_array_get(v, i);
            if (!json_is_integer(t)) return LINE_ERR("stop_token_ids[%zu] must be a token id", i);
            it->stop_ids[i] = (int32_t)json_integer_value(t);
        }
        rp->stop_ids = it->stop_ids;
        rp->n_stop_ids = (int)n;
    }
    it->tokens = calloc((size_t)it->n, sizeof *it->tokens);
    it->text = calloc((size_t)it->n, sizeof *it->text);
    it->text_len = calloc((size_t)it->n, sizeof *it->text_len);
    it->finish = calloc((size_t)it->n, sizeof *it->finish);
    if (rp->logprobs >= 0) it->logprobs = calloc((size_t)it->n, sizeof *it->logprobs);
    if (!it->tokens || !it->text || !it->text_len || !it->finish || (rp->logprobs >= 0 && !it->logprobs))
        return LINE_ERR("out of memory");
    for (int i = 0; i < it->n; i++) {
        it->tokens[i] = json_array();
        if (it->logprobs) it->logprobs[i] = json_array();
    }
    if (rp->prompt_logprobs >= 0) it->prompt_logprobs = json_array();
    return 0;
}

/* ---- the command ------------------------------------------------------------ */

int cli_run_batch(pdl_model *model, const char *path, const pdl_engine_options *eo, int default_max_tokens) {
    pdl_error ferr;
    FILE *f = pdl_fopen_regular(path, &ferr);
    if (!f) {
        fprintf(stderr, "error: %s\n", ferr.message);
        return CLI_FAIL;
    }
    batch_item *items = NULL;
    int n_items = 0, cap = 0, rc = CLI_OK, line = 0;
    char *buf = NULL;
    size_t buf_cap = 0;
    long long len;
    while (rc == CLI_OK && (len = pdl_read_line(f, &buf, &buf_cap, PDL_READ_MAX_LINE)) != 0) {
        line++;
        if (len < 0) {
            fprintf(stderr, "error: %s:%d: the line is longer than %zu bytes (or memory ran out)\n", path, line,
                    (size_t)PDL_READ_MAX_LINE);
            rc = CLI_FAIL;
            break;
        }
        size_t i = 0;
        while (i < (size_t)len && (buf[i] == ' ' || buf[i] == '\t' || buf[i] == '\r' || buf[i] == '\n')) i++;
        if (i == (size_t)len) continue; /* blank */
        json_error_t je;
        json_t *o = json_loadb(buf, (size_t)len, 0, &je);
        if (!o) {
            fprintf(stderr, "error: %s:%d: invalid JSON at column %d: %s\n", path, line, je.column, je.text);
            rc = CLI_FAIL;
            break;
        }
        if (n_items == cap) {
            cap = cap ? cap * 2 : 16;
            batch_item *p = realloc(items, (size_t)cap * sizeof *p);
            if (!p) {
                json_decref(o);
                rc = CLI_FAIL;
                break;
            }
            items = p;
        }
        if (parse_item(model, o, default_max_tokens, &items[n_items], path, line)) rc = CLI_FAIL;
        n_items++;
        json_decref(o);
    }
    free(buf);
    fclose(f);
    if (rc == CLI_OK && n_items == 0) {
        fprintf(stderr, "error: %s: no requests\n", path);
        rc = CLI_FAIL;
    }
    pdl_engine *engine = NULL;
    pdl_error err;
    if (rc == CLI_OK && pdl_engine_create(&engine, model, eo, &err)) {
        fprintf(stderr, "error: %s\n", err.message);
        rc = CLI_FAIL;
    }
    for (int k = 0; rc == CLI_OK && k < n_items; k++)
        if (pdl_engine_add_request(engine, items[k].prompt, items[k].n_prompt, &items[k].params, on_event, &items[k],
                                   NULL, &err)) {
            char *id = json_dumps(items[k].id, JSON_ENCODE_ANY);
            fprintf(stderr, "error: %s: request %s: %s\n", path, id ? id : "?", err.message);
            free(id);
            rc = CLI_FAIL;
        }
    if (rc == CLI_OK && pdl_engine_run_until_idle(engine, &err)) {
        fprintf(stderr, "error: %s\n", err.message);
        rc = CLI_FAIL;
    }
    if (rc == CLI_OK) {
        pdl_engine_stats st;
        pdl_engine_get_stats(engine, &st);
        fprintf(stderr, "pagedlm: %d requests, %llu prompt + %llu generated tokens in %llu steps, %llu preemptions, "
                "%s logits, %llu of %llu prompt tokens from the prefix cache\n", n_items,
                (unsigned long long)st.prompt_tokens, (unsigned long long)st.generation_tokens,
                (unsigned long long)st.steps, (unsigned long long)st.preemptions,
                st.selective_logits ? "selective" : "full", (unsigned long long)st.prefix_cache_hits,
                (unsigned long long)st.prefix_cache_queries);
        for (int k = 0; k < n_items; k++) {
            batch_item *it = &items[k];
            for (int i = 0; i < it->n; i++) {
                json_t *o = json_object();
                json_object_set(o, "id", it->id);
                if (it->n > 1) json_object_set_new(o, "index", json_integer(i));
                json_t *pt = json_array();
                for (size_t j = 0; j < it->n_prompt; j++) json_array_append_new(pt, json_integer(it->prompt[j]));
                json_object_set_new(o, "prompt_tokens", pt);
                json_object_set(o, "tokens", it->tokens[i]);
                json_object_set_new(o, "text", json_stringn(it->text[i] ? it->text[i] : "", it->text_len[i]));
                json_object_set_new(o, "finish_reason", json_string(it->finish[i] ? it->finish[i] : "abort"));
                json_object_set_new(o, "cached_tokens", json_integer(it->cached_tokens));
                if (it->logprobs) json_object_set(o, "logprobs", it->logprobs[i]);
                if (it->prompt_logprobs && i == 0) json_object_set(o, "prompt_logprobs", it->prompt_logprobs);
                char *s = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(9));
                if (s) printf("%s\n", s);
                free(s);
                json_decref(o);
            }
        }
    }
    pdl_engine_free(engine);
    for (int k = 0; k < n_items; k++) item_free(&items[k]);
    free(items);
    return rc;
}
