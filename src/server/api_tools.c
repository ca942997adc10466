/*
 * api_tools.c - one chat choice's generated text read for tool calls:
 * content and calls, as whole messages and as stream deltas (api_tools.h).
 */
#define _POSIX_C_SOURCE 200809L
#include "server/api_tools.h"

#include <stdlib.h>
#include <string.h>

#include "server/api_format.h"
#include "server/sbuf.h"

typedef struct tool_call {
    char *id, *name;
    sbuf args;
    bool complete;
} tool_call;

struct srv_tool_output {
    gram_tool_parser *parser;
    gram_tool_format format;
    const gram_vocab *vocab;  /* control tokens' text (the format's markers) */
    bool finish_tool_calls;   /* the request's tool_calls_finish */
    bool harmony;             /* the format has reasoning (openai): the message's reasoning fields */
    bool include_reasoning;   /* reasoning is returned (the request's include_reasoning) */
    sbuf content;
    sbuf reasoning;
    tool_call *calls;
    int n_calls, cap_calls;
    bool finished;
    bool oom;
    json_t *deltas;           /* where the feed in progress puts its deltas (or NULL) */
};

srv_tool_output *srv_tool_output_new(const srv_gen_request *req, uint64_t id_seed) {
    srv_tool_output *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    t->format = req->tool_format;
    t->vocab = req->tool_vocab;
    t->finish_tool_calls = req->tool_calls_finish;
    t->harmony = req->tool_format == GRAM_TOOLS_OPENAI;
    t->include_reasoning = req->include_reasoning;
    t->parser = gram_tool_parser_new_with_tools(req->tool_format, id_seed, req->tools_json, 0);
    if (!t->parser) {
        free(t);
        return NULL;
    }
    return t;
}

void srv_tool_output_free(srv_tool_output *t) {
    if (!t) return;
    gram_tool_parser_free(t->parser);
    sbuf_free(&t->content);
    sbuf_free(&t->reasoning);
    for (int i = 0; i < t->n_calls; i++) {
        free(t->calls[i].id);
        free(t->calls[i].name);
        sbuf_free(&t->calls[i].args);
    }
    free(t->calls);
    free(t);
}

static json_t *jstrn(const char *s, size_t n) { return srv_json_text(s ? s : "", s ? n : 0); }

/* A delta {"tool_calls": [call]}. */
static json_t *call_delta(json_t *call) {
    json_t *d = json_object(), *a = json_array();
    json_array_append_new(a, call);
    json_object_set_new(d, "tool_calls", a);
    return d;
}

static tool_call *new_call(srv_tool_output *t) {
    if (t->n_calls == t->cap_calls) {
        int cap = t->cap_calls ? t->cap_calls * 2 : 4;
        tool_call *c = realloc(t->calls, (size_t)cap * sizeof *c);
        if (!c) return NULL;
        t->calls = c;
        t->cap_calls = cap;
    }
    tool_call *c = &t->calls[t->n_calls++];
    memset(c, 0, sizeof *c);
    return c;
}

static void on_event(const gram_tool_event *ev, void *user) {
    srv_tool_output *t = user;
    json_t *d = NULL;
    switch (ev->kind) {
    case GRAM_TOOL_CONTENT:
        sbuf_append(&t->content, ev->text, ev->len);
        if (t->deltas) d = json_pack("{s:o}", "content", jstrn(ev->text, ev->len));
        break;
    case GRAM_TOOL_CALL_BEGIN: {
        tool_call *c = new_call(t);
        if (!c || !(c->id = strdup(ev->id)) || !(c->name = strdup(ev->name))) {
            t->oom = true;
            return;
        }
        if (t->deltas)
            d = call_delta(json_pack("{s:i, s:s, s:s, s:{s:s, s:s}}", "index", ev->index, "id", ev->id, "type",
                                     "function", "function", "name", ev->name, "arguments", ""));
        break;
    }
    case GRAM_TOOL_CALL_ARGS:
        if (ev->index < 0 || ev->index >= t->n_calls) return;
        sbuf_append(&t->calls[ev->index].args, ev->text, ev->len);
        if (t->deltas)
            d = call_delta(json_pack("{s:i, s:{s:o}}", "index", ev->index, "function", "arguments",
                                     jstrn(ev->text, ev->len)));
        break;
    case GRAM_TOOL_CALL_END:
        if (ev->index >= 0 && ev->index < t->n_calls) t->calls[ev->index].complete = ev->complete;
        break;
    case GRAM_TOOL_REASONING: /* vLLM's field, and llama.cpp's / DeepSeek's name for it */
        if (!t->include_reasoning) break;
        sbuf_append(&t->reasoning, ev->text, ev->len);
        if (t->deltas)
            d = json_pack("{s:o, s:o}", "reasoning", jstrn(ev->text, ev->len), "reasoning_content",
                          jstrn(ev->text, ev->len));
        break;
    }
    if (d && json_array_append_new(t->deltas, d)) t->oom = true;
}

int srv_tool_output_feed(srv_tool_output *t, int32_t token, const char *text, size_t len, json_t *deltas) {
    if (t->finished) return 0;
    if (len == 0 && t->vocab) {
        /* a format's markers may be control tokens (Mistral's [TOOL_CALLS],
         * DeepSeek's and Kimi-K2's call markers): the decoded text skips them */
        size_t n = 0;
        const char *s = gram_vocab_token(t->vocab, token, &n);
        for (const char *const *m = gram_tool_format_markers(t->format); s && *m; m++) {
            if (strlen(*m) == n && memcmp(s, *m, n) == 0) {
                text = s;
                len = n;
                break;
            }
        }
    }
    t->deltas = deltas;
    int rc = len ? gram_tool_parser_feed(t->parser, text, len, on_event, t) : 0;
    t->deltas = NULL;
    return rc || t->oom || t->content.oom ? -1 : 0;
}

int srv_tool_output_finish(srv_tool_output *t, json_t *deltas) {
    if (t->finished) return 0;
    t->finished = true;
    t->deltas = deltas;
    int rc = gram_tool_parser_finish(t->parser, on_event, t);
    t->deltas = NULL;
    return rc || t->oom || t->content.oom ? -1 : 0;
}

static int complete_calls(const srv_tool_output *t) {
    int n = 0;
    for (int i = 0; i < t->n_calls; i++) n += t->calls[i].complete;
    return n;
}

const char *srv_tool_output_finish_reason(const srv_tool_output *t, const char *engine_reason) {
    /* "length" (or "abort") says the output was cut, whatever calls came before */
    if (!t->finish_tool_calls || !engine_reason || strcmp(engine_reason, "stop") != 0) return engine_reason;
    return complete_calls(t) > 0 ? "tool_calls" : engine_reason;
}

void srv_tool_output_message(const srv_tool_output *t, json_t *msg) {
    int n_complete = complete_calls(t);
    if (t->harmony) {
        bool have = t->reasoning.len > 0;
        json_object_set_new(msg, "reasoning", have ? jstrn(t->reasoning.data, t->reasoning.len) : json_null());
        json_object_set_new(msg, "reasoning_content", have ? jstrn(t->reasoning.data, t->reasoning.len) : json_null());
    }
    if (t->content.len || n_complete == 0)
        json_object_set_new(msg, "content", jstrn(t->content.data, t->content.len));
    else
        json_object_set_new(msg, "content", json_null());
    if (n_complete == 0) return;
    json_t *calls = json_array();
    for (int i = 0; i < t->n_calls; i++) {
        const tool_call *c = &t->calls[i];
        if (!c->complete) continue; /* cut off: its arguments are not JSON */
        json_array_append_new(calls, json_pack("{s:s, s:s, s:{s:s, s:o}}", "id", c->id, "type", "function",
                                               "function", "name", c->name, "arguments",
                                               jstrn(c->args.data, c->args.len)));
    }
    json_object_set_new(msg, "tool_calls", calls);
}
