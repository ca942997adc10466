/*
 * cli_batch.c - `pagedlm run --batch-file FILE.jsonl`: every line is a
 * request; all are submitted at once and served concurrently by the engine;
 * one JSON line per request (per sequence when n > 1) is printed in input
 * order when all are done. A line is read by the server's request parser
 * (src/server/api_parse.c), so it takes every completion field the server
 * takes, with the same checks and messages.
 */
#define _POSIX_C_SOURCE 200809L
#include "cli/cli_batch.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "server/api_parse.h"
#include "util/file_map.h"

/* What one request line asked for and what came back. */
typedef struct batch_item {
    json_t *id;
    srv_gen_request req;      /* the line parsed as a completion request (the server's parser) */
    int32_t *prompt;          /* req.prompts[0] */
    size_t n_prompt;
    int n;                    /* sequences */
    json_t **tokens;          /* [n] arrays of ids */
    json_t **logprobs;        /* [n] arrays (when asked) */
    json_t *prompt_logprobs;  /* array (when asked) */
    char **text;              /* [n] */
    size_t *text_len;
    const char **finish;      /* [n] */
    int cached_tokens;        /* prompt tokens the prefix cache gave */
} batch_item;

static void item_free(batch_item *it) {
    json_decref(it->id);
    srv_gen_request_free(&it->req);
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

/* The fields a line may have: the completion request's (parsed by the
 * server's parser, src/server/api_parse.c, so a line means what the same
 * body means to POST /v1/completions) and the line's "id". A field outside
 * the list is refused, naming it: a typo here would otherwise be a silently
 * different run. */
static const char *const KNOWN_FIELDS[] = {
    "id", "prompt", "max_tokens", "max_completion_tokens", "temperature", "top_k", "top_p", "min_p", "seed",
    "repetition_penalty", "presence_penalty", "frequency_penalty", "stop", "stop_token_ids", "ignore_eos",
    "logprobs", "prompt_logprobs", "n", "cache_salt", "logit_bias", "min_tokens", "response_format",
    "structured_outputs", "guided_json", "guided_regex", "guided_choice", "guided_grammar", "grammar", "json_schema",
    NULL};

/* The model's grammar vocabulary, made by the first line that needs one. */
typedef struct batch_grammar {
    const pdl_model *model;
    gram_vocab *vocab;
    bool tried;
    char error[PDL_ERROR_MAX];
} batch_grammar;

static const gram_vocab *batch_grammar_vocab(void *user, pdl_error *err) {
    batch_grammar *g = user;
    if (!g->tried) {
        g->tried = true;
        pdl_error e;
        if (pdl_model_grammar_vocab(g->model, &g->vocab, &e)) snprintf(g->error, sizeof g->error, "%s", e.message);
    }
    if (!g->vocab) snprintf(err->message, sizeof err->message, "%s", g->error);
    return g->vocab;
}

static int parse_item(const srv_parse_ctx *ctx, json_t *o, int default_max_tokens, batch_item *it, const char *path,
                      int line) {
    memset(it, 0, sizeof *it);
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
    srv_api_error e;
    if (srv_parse_completion(ctx, o, &it->req, &e)) return LINE_ERR("%s", e.message);
    if (it->req.n_prompts != 1) return LINE_ERR("'prompt' must be one prompt (a string or a list of token ids)");
    it->prompt = it->req.prompts[0].ids;
    it->n_prompt = it->req.prompts[0].n_ids;
    pdl_request_params *rp = &it->req.params;
    /* what a line leaves out: greedy, and -n tokens at most (the server's defaults are 1.0 and 16) */
    if (!json_object_get(o, "temperature")) rp->sampling.temperature = 0.0f;
    if (!json_object_get(o, "max_tokens") && !json_object_get(o, "max_completion_tokens"))
        rp->max_tokens = default_max_tokens;
    it->n = rp->n > 0 ? rp->n : 1;
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
    FILE *f = file_open_regular(path, &ferr);
    if (!f) {
        fprintf(stderr, "error: %s\n", ferr.message);
        return CLI_FAIL;
    }
    batch_item *items = NULL;
    int n_items = 0, cap = 0, rc = CLI_OK, line = 0;
    char *buf = NULL;
    size_t buf_cap = 0;
    long long len;
    pdl_model_info info;
    pdl_model_get_info(model, &info);
    batch_grammar grammar = {.model = model};
    srv_parse_ctx ctx = {.model = model, .model_name = "", .ctx_len = info.ctx_len, .vocab = info.vocab,
                         .grammar_vocab = batch_grammar_vocab, .grammar_user = &grammar};
    while (rc == CLI_OK && (len = file_read_line(f, &buf, &buf_cap, PDL_READ_MAX_LINE)) != 0) {
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
        json_t *o = json_loadb(buf, (size_t)len, JSON_ALLOW_NUL, &je);
        if (!o) {
            fprintf(stderr, "error: %s:%d: invalid JSON at column %d: %s\n", path, line, je.column, je.text);
            rc = CLI_FAIL;
            break;
        }
        srv_api_error nul;
        if (srv_check_nul(o, &nul)) { /* NUL only in prompt text, as the server takes it */
            fprintf(stderr, "error: %s:%d: %s\n", path, line, nul.message);
            json_decref(o);
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
        if (parse_item(&ctx, o, default_max_tokens, &items[n_items], path, line)) rc = CLI_FAIL;
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
        if (pdl_engine_add_request(engine, items[k].prompt, items[k].n_prompt, &items[k].req.params, on_event, &items[k],
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
    gram_vocab_free(grammar.vocab); /* after the requests' grammars */
    return rc;
}
