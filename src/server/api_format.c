/*
 * api_format.c - OpenAI / vLLM response objects and SSE chunks from engine
 * events.
 *
 * Token strings: a generated token's string is the text the engine released
 * with it, so the strings of a choice's logprobs join to its text. Other
 * candidates (top_logprobs) and prompt tokens are decoded after the token
 * before them, so " the" keeps the space it has in running text.
 * Log-probabilities of -inf are written as -9999.0, as vLLM does (JSON has no
 * infinity). Offsets in text_offset count characters, as Python does.
 */
#define _POSIX_C_SOURCE 200809L
#include "server/api_format.h"
#include "server/api_rerank.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/reasoning.h"
#include "server/api_tools.h"
#include "util/clock.h"

#define JSON_FLAGS (JSON_COMPACT | JSON_REAL_PRECISION(9))

/* ---- small JSON helpers ------------------------------------------------------ */

json_t *srv_json_text(const char *s, size_t n) {
    json_t *j = json_stringn(s, n);
    if (j) return j;
    sbuf b = {0};
    size_t i = 0;
    while (i < n) {
        unsigned char c = (unsigned char)s[i];
        size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        bool ok = len > 0 && i + len <= n;
        for (size_t k = 1; ok && k < len; k++) ok = ((unsigned char)s[i + k] >> 6) == 2;
        if (ok && len > 1) {
            json_t *probe = json_stringn(s + i, len); /* overlong forms, surrogates */
            ok = probe != NULL;
            json_decref(probe);
        }
        if (ok) {
            sbuf_append(&b, s + i, len);
            i += len;
        } else {
            sbuf_puts(&b, "\xEF\xBF\xBD");
            i++;
        }
    }
    size_t len;
    char *t = sbuf_take(&b, &len);
    j = t ? json_stringn(t, len) : NULL;
    free(t);
    return j ? j : json_string("");
}

static json_t *jstrn(const char *s, size_t n) { return srv_json_text(s, n); }
static json_t *jstr(const char *s) { return jstrn(s, strlen(s)); }

static json_t *jlogprob(float lp) { return json_real(isfinite(lp) ? (double)lp : -9999.0); }

/* Characters (code points) in n bytes of UTF-8, as Python's len() counts. */
static size_t utf8_chars(const char *s, size_t n) {
    size_t c = 0;
    for (size_t i = 0; i < n; i++) c += ((unsigned char)s[i] >> 6) != 2;
    return c;
}

/* A JSON number as jansson writes a real (JSON_REAL_PRECISION(9)). */
static void put_real(sbuf *b, double v) {
    char t[40];
    int n = snprintf(t, sizeof t, "%.9g", v);
    if (n > 0 && !strpbrk(t, ".eEn")) sbuf_printf(b, "%s.0", t);
    else sbuf_puts(b, t);
}

/* n bytes as a quoted JSON string (invalid UTF-8 as U+FFFD). */
static void put_string(sbuf *b, const char *s, size_t n) {
    json_t *j = jstrn(s, n);
    char *t = j ? json_dumps(j, JSON_ENCODE_ANY | JSON_FLAGS) : NULL;
    json_decref(j);
    if (!t) {
        b->oom = true;
        return;
    }
    sbuf_puts(b, t);
    free(t);
}

static char *dump(json_t *o, size_t *len) {
    char *s = o ? json_dumps(o, JSON_FLAGS) : NULL;
    json_decref(o);
    if (len) *len = s ? strlen(s) : 0;
    return s;
}

char *srv_error_body(const srv_api_error *e, size_t *len) {
    json_t *err = json_object();
    json_object_set_new(err, "message", jstr(e->message));
    json_object_set_new(err, "type", json_string(e->type ? e->type : "invalid_request_error"));
    json_object_set_new(err, "param", e->param[0] ? jstr(e->param) : json_null());
    json_object_set_new(err, "code", e->code ? json_string(e->code) : json_null());
    json_t *o = json_object();
    json_object_set_new(o, "error", err);
    return dump(o, len);
}

/* ---- the response state ------------------------------------------------------ */

/* What the engine said about one prompt token (position >= 1). */
typedef struct prompt_lp {
    bool have;
    float logprob;
    int n_top;
    pdl_logprob *top;
} prompt_lp;

typedef struct prompt_state {
    size_t n;           /* prompt tokens */
    char **piece;       /* [n_ids] each prompt token's text in running decode (lazily) */
    size_t *piece_len;  /* [n_ids] its bytes */
    prompt_lp *lp;      /* [n_ids] */
} prompt_state;

typedef struct choice {
    int prompt;
    sbuf text;          /* generated text (non-streaming) */
    size_t chars;       /* characters of generated text so far (text_offset) */
    int n_tokens;
    int32_t prev;       /* the token before the next one (context for candidates) */
    const char *finish;
    char *stop_string;  /* what ended the choice (stop_reason): a stop string, */
    int32_t stop_token; /* or a stop token id (-1 = neither) */
    json_t *lp;         /* generated logprobs so far (non-streaming): completions {tokens, ...}; chat [..] */
    srv_tool_output *tools; /* chat with tool calls parsed out of the text (req->parse_tools), else NULL */
    reasoning_split *think; /* chat with a reasoning parser: the text split into reasoning and content */
    sbuf reasoning;     /* the reasoning (non-streaming) */
    bool started;       /* streaming: echo chunk sent */
    json_t *ids;        /* /infill with return_tokens: the generated ids (non-streaming) */
    bool has_new_line;  /* /infill: the text holds a newline */
    float *embedding;   /* /v1/embeddings: [n_embedding] (owned) */
    int n_embedding;
} choice;

struct srv_response {
    const pdl_model *model;
    const srv_gen_request *req;
    char *model_name, *id;
    char *fingerprint;   /* system_fingerprint: the replica's name; NULL = null */
    long long created;
    int n;               /* sequences per prompt */
    int n_prompts;
    int n_choices;
    choice *choices;
    prompt_state *prompts;
    int prompt_tokens;
    int completion_tokens;
    int cached_tokens;   /* prompt tokens whose K/V came from the prefix cache */
    double t_start;      /* /infill's timings: when the response began, */
    double t_first;      /* the first token came (0 = not yet), */
    double t_last;       /* and the last event */
};

srv_response *srv_response_new(const pdl_model *model, const srv_gen_request *req, const char *model_name,
                               const char *fingerprint, const char *id, long long created) {
    srv_response *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->model = model;
    r->req = req;
    r->created = created;
    r->t_start = clock_now_s();
    r->n = req->params.n > 0 ? req->params.n : 1;
    r->n_prompts = req->n_prompts;
    r->n_choices = req->n_prompts * r->n;
    r->model_name = strdup(model_name);
    r->id = strdup(id);
    r->fingerprint = fingerprint ? strdup(fingerprint) : NULL;
    r->choices = calloc((size_t)r->n_choices, sizeof *r->choices);
    r->prompts = calloc((size_t)req->n_prompts, sizeof *r->prompts);
    bool ok = r->model_name && r->id && (r->fingerprint || !fingerprint) && r->choices && r->prompts;
    for (int p = 0; ok && p < req->n_prompts; p++) {
        r->prompt_tokens += (int)req->prompts[p].n_ids;
        r->prompts[p].n = req->prompts[p].n_ids;
        r->prompts[p].piece = calloc(req->prompts[p].n_ids, sizeof *r->prompts[p].piece);
        r->prompts[p].piece_len = calloc(req->prompts[p].n_ids, sizeof *r->prompts[p].piece_len);
        r->prompts[p].lp = calloc(req->prompts[p].n_ids, sizeof *r->prompts[p].lp);
        ok = r->prompts[p].piece && r->prompts[p].piece_len && r->prompts[p].lp;
    }
    for (int i = 0; ok && i < r->n_choices; i++) {
        choice *c = &r->choices[i];
        c->prompt = i / r->n;
        const srv_prompt *sp = &req->prompts[c->prompt];
        c->prev = sp->n_ids ? sp->ids[sp->n_ids - 1] : -1;
        c->stop_token = -1;
        if ((req->parse_tools || req->harmony) && req->kind == SRV_API_CHAT) {
            uint64_t seed = 0xcbf29ce484222325ull; /* call ids from the response id and the choice (FNV-1a) */
            for (const char *q = id; *q; q++) seed = (seed ^ (unsigned char)*q) * 0x100000001b3ull;
            ok = (c->tools = srv_tool_output_new(req, seed + (uint64_t)i)) != NULL;
        }
        if (ok && req->reasoning && req->kind == SRV_API_CHAT)
            ok = (c->think = reasoning_split_new(req->reasoning, req->reasoning_starts_inside)) != NULL;
    }
    if (!ok) {
        srv_response_free(r);
        return NULL;
    }
    return r;
}

void srv_response_free(srv_response *r) {
    if (!r) return;
    for (int i = 0; r->choices && i < r->n_choices; i++) {
        sbuf_free(&r->choices[i].text);
        free(r->choices[i].stop_string);
        json_decref(r->choices[i].lp);
        json_decref(r->choices[i].ids);
        srv_tool_output_free(r->choices[i].tools);
        reasoning_split_free(r->choices[i].think);
        sbuf_free(&r->choices[i].reasoning);
        free(r->choices[i].embedding);
    }
    for (int p = 0; r->prompts && p < r->n_prompts; p++) {
        for (size_t k = 0; k < r->prompts[p].n; k++) {
            if (r->prompts[p].piece) free(r->prompts[p].piece[k]);
            if (r->prompts[p].lp) free(r->prompts[p].lp[k].top);
        }
        free(r->prompts[p].piece);
        free(r->prompts[p].piece_len);
        free(r->prompts[p].lp);
    }
    free(r->prompts);
    free(r->choices);
    free(r->model_name);
    free(r->id);
    free(r->fingerprint);
    free(r);
}

/* The text `id` adds after `prev` (prev < 0: at the start), malloc'ed
 * (*len bytes; NULL when out of memory). */
static char *token_text_after(const pdl_model *m, int32_t prev, int32_t id, size_t *len) {
    pdl_detok *d = pdl_detok_new(m, prev >= 0 ? &prev : NULL, prev >= 0 ? 1 : 0);
    sbuf b = {0};
    if (d) {
        const char *t = pdl_detok_push(d, id);
        sbuf_append(&b, t, pdl_detok_len(d));
        t = pdl_detok_flush(d);
        sbuf_append(&b, t, pdl_detok_len(d));
        pdl_detok_free(d);
    }
    return sbuf_take(&b, len);
}

/* Each prompt token's text as a running decode gives it (computed once). */
static void prompt_pieces(srv_response *r, int p) {
    prompt_state *ps = &r->prompts[p];
    const srv_prompt *sp = &r->req->prompts[p];
    if (sp->n_ids == 0 || ps->piece[0]) return;
    pdl_detok *d = pdl_detok_new(r->model, NULL, 0);
    for (size_t k = 0; k < sp->n_ids; k++) {
        sbuf b = {0};
        if (d) {
            const char *s = pdl_detok_push(d, sp->ids[k]);
            sbuf_append(&b, s, pdl_detok_len(d));
            if (k + 1 == sp->n_ids) {
                s = pdl_detok_flush(d);
                sbuf_append(&b, s, pdl_detok_len(d));
            }
        }
        ps->piece[k] = sbuf_take(&b, &ps->piece_len[k]);
        if (!ps->piece[k]) {
            ps->piece[k] = calloc(1, 1);
            ps->piece_len[k] = 0;
        }
    }
    pdl_detok_free(d);
}

static void add_prompt_logprob(srv_response *r, const srv_event *ev) {
    const srv_prompt *sp = &r->req->prompts[ev->prompt];
    if (ev->position < 1 || (size_t)ev->position >= sp->n_ids) return;
    prompt_lp *lp = &r->prompts[ev->prompt].lp[ev->position];
    if (lp->have) return;
    lp->have = true;
    lp->logprob = ev->logprob;
    if (ev->n_top > 0 && (lp->top = malloc((size_t)ev->n_top * sizeof *lp->top))) {
        memcpy(lp->top, ev->top, (size_t)ev->n_top * sizeof *lp->top);
        lp->n_top = ev->n_top;
    }
}

/* ---- logprobs in the two APIs' shapes ------------------------------------------ */

static json_t *utf8_bytes(const char *s, size_t n) {
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++) json_array_append_new(a, json_integer((unsigned char)s[i]));
    return a;
}

/* Completions: {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}. */
static json_t *completion_lp_new(void) {
    json_t *o = json_object();
    json_object_set_new(o, "text_offset", json_array());
    json_object_set_new(o, "token_logprobs", json_array());
    json_object_set_new(o, "tokens", json_array());
    json_object_set_new(o, "top_logprobs", json_array());
    return o;
}

/* A dict key for token text t (n bytes): keys are JSON strings, so bytes
 * that are not UTF-8 become U+FFFD as in values. */
static void dict_set_new(json_t *d, const char *t, size_t n, json_t *v, bool keep_first) {
    json_t *k = jstrn(t, n);
    const char *key = k ? json_string_value(k) : "";
    size_t kl = k ? json_string_length(k) : 0;
    if (!(keep_first && json_object_getn(d, key, kl))) json_object_setn_new(d, key, kl, v);
    else json_decref(v);
    json_decref(k);
}

/* One position: token text s (slen bytes) with logprob lp (have = false:
 * the first prompt token, which has none), top candidates decoded after
 * `prev`. */
static void completion_lp_add(const srv_response *r, json_t *o, const char *s, size_t slen, size_t offset, bool have,
                              int32_t token, float lp, const pdl_logprob *top, int n_top, int32_t prev) {
    json_array_append_new(json_object_get(o, "text_offset"), json_integer((json_int_t)offset));
    json_array_append_new(json_object_get(o, "token_logprobs"), have ? jlogprob(lp) : json_null());
    json_array_append_new(json_object_get(o, "tokens"), jstrn(s, slen));
    if (!have) {
        json_array_append_new(json_object_get(o, "top_logprobs"), json_null());
        return;
    }
    json_t *d = json_object();
    bool chosen_in = false;
    for (int k = 0; k < n_top; k++) {
        size_t tl;
        char *t = token_text_after(r->model, prev, top[k].token, &tl);
        if (t) dict_set_new(d, t, tl, jlogprob(top[k].logprob), true);
        chosen_in |= top[k].token == token;
        free(t);
    }
    if (!chosen_in) dict_set_new(d, s, slen, jlogprob(lp), true); /* vLLM: the chosen one too */
    json_array_append_new(json_object_get(o, "top_logprobs"), d);
}

static json_t *chat_lp_entry(const srv_response *r, const char *s, size_t slen, float lp, const pdl_logprob *top,
                             int n_top, int32_t prev) {
    json_t *e = json_object();
    json_object_set_new(e, "token", jstrn(s, slen));
    json_object_set_new(e, "logprob", jlogprob(lp));
    json_object_set_new(e, "bytes", utf8_bytes(s, slen));
    json_t *tops = json_array();
    for (int k = 0; k < n_top; k++) {
        size_t tl = 0;
        char *t = token_text_after(r->model, prev, top[k].token, &tl);
        json_t *c = json_object();
        json_object_set_new(c, "token", jstrn(t ? t : "", tl));
        json_object_set_new(c, "logprob", jlogprob(top[k].logprob));
        json_object_set_new(c, "bytes", utf8_bytes(t ? t : "", tl));
        json_array_append_new(tops, c);
        free(t);
    }
    json_object_set_new(e, "top_logprobs", tops);
    return e;
}

/* One entry of vLLM's prompt logprobs: "id": {"logprob", "rank", "decoded_token"}. */
static void put_prompt_entry(sbuf *b, bool first, int32_t id, float lp, int rank, const char *t, size_t tl) {
    sbuf_printf(b, "%s\"%d\":{\"logprob\":", first ? "" : ",", id);
    put_real(b, isfinite(lp) ? (double)lp : -9999.0);
    if (rank > 0) sbuf_printf(b, ",\"rank\":%d,\"decoded_token\":", rank);
    else sbuf_puts(b, ",\"rank\":null,\"decoded_token\":");
    put_string(b, t, tl);
    sbuf_puts(b, "}");
}

/* vLLM's prompt_logprobs: [null, {"<id>": {"logprob", "rank", "decoded_token"}, ...}, ...],
 * written as text straight into b: a long prompt's list would cost a JSON
 * tree of a few hundred bytes per entry. */
static void put_vllm_prompt_logprobs(srv_response *r, int p, sbuf *b) {
    const srv_prompt *sp = &r->req->prompts[p];
    prompt_pieces(r, p);
    int limit = r->req->prompt_logprobs;
    sbuf_puts(b, "[");
    for (size_t k = 0; k < sp->n_ids && !b->oom; k++) {
        const prompt_lp *lp = &r->prompts[p].lp[k];
        if (k) sbuf_puts(b, ",");
        if (k == 0 || !lp->have) {
            sbuf_puts(b, "null");
            continue;
        }
        int32_t tok = sp->ids[k], prev = sp->ids[k - 1];
        int rank = 0;
        for (int j = 0; j < lp->n_top && !rank; j++)
            if (lp->top[j].token == tok) rank = j + 1;
        sbuf_puts(b, "{");
        put_prompt_entry(b, true, tok, lp->logprob, rank, r->prompts[p].piece[k], r->prompts[p].piece_len[k]);
        for (int j = 0; j < lp->n_top && j < limit; j++) {
            if (lp->top[j].token == tok) continue;
            size_t tl = 0;
            char *t = token_text_after(r->model, prev, lp->top[j].token, &tl);
            put_prompt_entry(b, false, lp->top[j].token, lp->top[j].logprob, j + 1, t ? t : "", tl);
            free(t);
        }
        sbuf_puts(b, "}");
    }
    sbuf_puts(b, "]");
}

/* Completions with echo and logprobs: the prompt's positions first. */
static void echo_logprobs(srv_response *r, int p, json_t *o) {
    const srv_prompt *sp = &r->req->prompts[p];
    prompt_pieces(r, p);
    size_t offset = 0;
    int limit = r->req->logprobs;
    for (size_t k = 0; k < sp->n_ids; k++) {
        const prompt_lp *lp = &r->prompts[p].lp[k];
        const char *s = r->prompts[p].piece[k];
        size_t sl = r->prompts[p].piece_len[k];
        completion_lp_add(r, o, s, sl, offset, k > 0 && lp->have, sp->ids[k], lp->logprob, lp->top,
                          lp->n_top < limit ? lp->n_top : limit, k > 0 ? sp->ids[k - 1] : -1);
        offset += utf8_chars(s, sl);
    }
}

static json_t *usage_json(const srv_response *r) {
    json_t *u = json_object();
    json_object_set_new(u, "prompt_tokens", json_integer(r->prompt_tokens));
    json_object_set_new(u, "total_tokens", json_integer(r->prompt_tokens + r->completion_tokens));
    json_object_set_new(u, "completion_tokens", json_integer(r->completion_tokens));
    json_object_set_new(u, "prompt_tokens_details", json_pack("{s:i}", "cached_tokens", r->cached_tokens));
    return u;
}

/* vLLM's stop_reason: the stop string or stop token id that ended a
 * choice, null otherwise (EOS, length, abort). */
static json_t *stop_reason_json(const choice *c) {
    if (c->stop_string) return jstr(c->stop_string);
    if (c->stop_token >= 0) return json_integer(c->stop_token);
    return json_null();
}

static void take_stop_reason(choice *c, const srv_event *ev) {
    free(c->stop_string);
    c->stop_string = ev->stop_string ? strdup(ev->stop_string) : NULL;
    c->stop_token = ev->stop_token;
}

/* ---- a choice's text: reasoning, tool calls, content -------------------------------- */

/* Where one piece of a choice's text goes: to the reasoning, the tool-call
 * parser or the content; deltas (streaming) gets a chat delta per piece,
 * else the pieces gather in the choice. */
typedef struct text_route {
    const srv_response *r;
    choice *c;
    int32_t token;  /* the token the text came with (-1: the finish) */
    json_t *deltas; /* NULL: not streaming */
    bool oom;
} text_route;

static void route_piece(void *user, bool reasoning, const char *t, size_t n) {
    text_route *x = user;
    choice *c = x->c;
    if (reasoning) {
        if (!x->r->req->include_reasoning) return;
        if (x->deltas) {
            json_t *d = json_object();
            json_object_set_new(d, "reasoning", jstrn(t, n));
            json_object_set_new(d, "reasoning_content", jstrn(t, n));
            if (json_array_append_new(x->deltas, d)) x->oom = true;
        } else {
            sbuf_append(&c->reasoning, t, n);
        }
        return;
    }
    if (!x->deltas) sbuf_append(&c->text, t, n);
    if (c->tools) {
        if (srv_tool_output_feed(c->tools, x->token, t, n, x->deltas)) x->oom = true;
    } else if (x->deltas && n) {
        if (json_array_append_new(x->deltas, json_pack("{s:o}", "content", jstrn(t, n)))) x->oom = true;
    }
}

/* The text an event brings to choice c (finish: the event is the last).
 * Returns false when out of memory. */
static bool take_text(const srv_response *r, choice *c, int32_t token, const char *text, size_t len, bool finish,
                      json_t *deltas) {
    text_route x = {.r = r, .c = c, .token = token, .deltas = deltas};
    if (c->think) {
        /* a control token with no text (Mistral's markers) goes to the tool parser once the answer began */
        if (len == 0 && c->tools && reasoning_split_in_answer(c->think))
            route_piece(&x, false, text, 0);
        else if (reasoning_split_feed(c->think, text, len, route_piece, &x))
            x.oom = true;
        if (finish && reasoning_split_finish(c->think, route_piece, &x)) x.oom = true;
    } else {
        route_piece(&x, false, text, len);
    }
    if (finish && c->tools && srv_tool_output_finish(c->tools, deltas)) x.oom = true;
    return !x.oom;
}

/* ---- non-streaming ------------------------------------------------------------------ */

static size_t echo_chars(const srv_response *r, int p) {
    const srv_prompt *sp = &r->req->prompts[p];
    return r->req->echo && sp->text ? utf8_chars(sp->text, sp->text_len) : 0;
}

/* When a sequence's tokens come (/infill's timings). */
static void note_time(srv_response *r) {
    r->t_last = clock_now_s();
    if (r->t_first == 0) r->t_first = r->t_last;
}

void srv_response_add(srv_response *r, const srv_event *ev) {
    for (; ev; ev = ev->next) {
        if (ev->prompt < 0 || ev->prompt >= r->req->n_prompts) continue;
        if (ev->kind == PDL_EVENT_PROMPT_LOGPROB) {
            add_prompt_logprob(r, ev);
            continue;
        }
        note_time(r);
        choice *c = &r->choices[ev->prompt * r->n + ev->index];
        if (ev->kind == PDL_EVENT_EMBEDDING) {
            free(c->embedding);
            c->embedding = malloc((size_t)ev->n_embedding * sizeof *c->embedding);
            if (c->embedding) memcpy(c->embedding, ev->embedding, (size_t)ev->n_embedding * sizeof *c->embedding);
            c->n_embedding = c->embedding ? ev->n_embedding : 0;
            continue;
        }
        if (r->req->discard_output) {
            if (ev->kind == PDL_EVENT_FINISHED) {
                c->finish = "length";
                if (ev->index == 0) r->cached_tokens += ev->cached_tokens;
            }
            continue;
        }
        if (ev->kind == PDL_EVENT_TOKEN) {
            c->n_tokens++;
            r->completion_tokens++;
            if (r->req->logprobs >= 0) {
                if (!c->lp) c->lp = r->req->kind == SRV_API_CHAT ? json_array() : completion_lp_new();
                if (r->req->kind == SRV_API_CHAT)
                    json_array_append_new(c->lp, chat_lp_entry(r, ev->text, ev->text_len, ev->logprob, ev->top,
                                                               ev->n_top, c->prev));
                else
                    completion_lp_add(r, c->lp, ev->text, ev->text_len, echo_chars(r, c->prompt) + c->chars, true,
                                      ev->token, ev->logprob, ev->top, ev->n_top, c->prev);
            }
            c->prev = ev->token;
            if (r->req->return_tokens) {
                if (!c->ids) c->ids = json_array();
                json_array_append_new(c->ids, json_integer(ev->token));
            }
        } else {
            c->finish = ev->finish_reason;
            take_stop_reason(c, ev);
            if (ev->index == 0) r->cached_tokens += ev->cached_tokens; /* once per prompt */
        }
        if (memchr(ev->text, '\n', ev->text_len)) c->has_new_line = true;
        c->chars += utf8_chars(ev->text, ev->text_len);
        if (!take_text(r, c, ev->kind == PDL_EVENT_TOKEN ? ev->token : -1, ev->text, ev->text_len,
                       ev->kind == PDL_EVENT_FINISHED, NULL))
            c->text.oom = true;
    }
}

/* Appends o's JSON text to b without its closing brace, so that members
 * written as text can follow; o is consumed. */
static void put_object_open(sbuf *b, json_t *o) {
    char *t = o ? json_dumps(o, JSON_FLAGS) : NULL;
    json_decref(o);
    size_t n = t ? strlen(t) : 0;
    if (n < 2 || t[n - 1] != '}') {
        free(t);
        b->oom = true;
        return;
    }
    sbuf_append(b, t, n - 1);
    free(t);
}

/* ---- llama-server's /infill ------------------------------------------------------------ */

/* llama-server's stop_type: "eos" (EOS or a stop token), "word" (a stop
 * string), "limit" (n_predict or the context), "none". */
static const char *infill_stop_type(const choice *c) {
    if (!c->finish || strcmp(c->finish, "abort") == 0) return "none";
    if (strcmp(c->finish, "length") == 0) return "limit";
    return c->stop_string ? "word" : "eos";
}

/* What the request asked for (a seed the server drew is -1, llama-server's
 * "random"). */
static json_t *infill_settings(const srv_response *r) {
    const pdl_request_params *p = &r->req->params;
    json_t *stop = json_array();
    for (int i = 0; i < p->n_stop; i++) json_array_append_new(stop, jstr(p->stop[i]));
    return json_pack("{s:i, s:I, s:f, s:i, s:f, s:f, s:f, s:f, s:f, s:b, s:b, s:o, s:i, s:b}", "n_predict",
                     r->req->discard_output ? 0 : p->max_tokens > 0 ? p->max_tokens : -1, "seed",
                     r->req->seed_given ? (json_int_t)p->sampling.seed : (json_int_t)-1, "temperature",
                     (double)p->sampling.temperature, "top_k",
                     p->sampling.top_k, "top_p", (double)p->sampling.top_p, "min_p", (double)p->sampling.min_p,
                     "repeat_penalty", (double)p->sampling.repetition_penalty, "presence_penalty",
                     (double)p->sampling.presence_penalty, "frequency_penalty", (double)p->sampling.frequency_penalty,
                     "ignore_eos", p->ignore_eos, "stream", r->req->stream, "stop", stop, "n_probs", 0,
                     "return_tokens", r->req->return_tokens);
}

/* llama-server's timings, from when the events reached this response:
 * the prompt (tokens not from the prefix cache) until the first token,
 * then the tokens after it. */
static json_t *infill_timings(const srv_response *r, const choice *c) {
    double t1 = r->t_first ? r->t_first : r->t_start, t2 = r->t_last ? r->t_last : t1;
    int prompt_n = r->prompt_tokens - r->cached_tokens, pred_n = c->n_tokens;
    double prompt_ms = (t1 - r->t_start) * 1e3, pred_ms = (t2 - t1) * 1e3;
    return json_pack("{s:i, s:f, s:f, s:f, s:i, s:f, s:f, s:f}", "prompt_n", prompt_n, "prompt_ms", prompt_ms,
                     "prompt_per_token_ms", prompt_n ? prompt_ms / prompt_n : 0.0, "prompt_per_second",
                     prompt_ms > 0 ? 1e3 * prompt_n / prompt_ms : 0.0, "predicted_n", pred_n, "predicted_ms", pred_ms,
                     "predicted_per_token_ms", pred_n ? pred_ms / pred_n : 0.0, "predicted_per_second",
                     pred_ms > 0 ? 1e3 * pred_n / pred_ms : 0.0);
}

/* The whole answer (stream: the last event, its text and ids already sent). */
static json_t *infill_final(const srv_response *r, bool stream) {
    const choice *c = &r->choices[0];
    const srv_prompt *sp = &r->req->prompts[0];
    char *prompt = NULL;
    size_t prompt_len = 0;
    pdl_error pe;
    if (pdl_detokenize_ex(r->model, sp->ids, sp->n_ids, PDL_TOK_KEEP_SPECIAL, &prompt, &prompt_len, &pe))
        prompt = NULL, prompt_len = 0;
    json_t *o = json_object();
    json_object_set_new(o, "index", json_integer(0));
    json_object_set_new(o, "content", stream ? json_string("") : jstrn(c->text.data ? c->text.data : "", c->text.len));
    json_object_set_new(o, "tokens", !stream && c->ids ? json_incref(c->ids) : json_array());
    json_object_set_new(o, "id_slot", json_integer(0));
    json_object_set_new(o, "stop", json_true());
    json_object_set_new(o, "model", jstr(r->model_name));
    json_object_set_new(o, "tokens_predicted", json_integer(c->n_tokens));
    json_object_set_new(o, "tokens_evaluated", json_integer(r->prompt_tokens));
    json_object_set_new(o, "generation_settings", infill_settings(r));
    json_object_set_new(o, "prompt", jstrn(prompt ? prompt : "", prompt_len));
    json_object_set_new(o, "has_new_line", json_boolean(c->has_new_line));
    json_object_set_new(o, "truncated", json_boolean(r->req->fim_truncated));
    json_object_set_new(o, "stop_type", json_string(infill_stop_type(c)));
    json_object_set_new(o, "stopping_word", jstr(c->stop_string ? c->stop_string : ""));
    json_object_set_new(o, "tokens_cached", json_integer(r->cached_tokens));
    json_object_set_new(o, "timings", infill_timings(r, c));
    free(prompt);
    return o;
}

/* One SSE event "data: JSON" (o consumed). */
static void sse_data(json_t *o, sbuf *out) {
    char *s = o ? json_dumps(o, JSON_FLAGS) : NULL;
    json_decref(o);
    if (!s) {
        out->oom = true;
        return;
    }
    sbuf_puts(out, "data: ");
    sbuf_puts(out, s);
    sbuf_puts(out, "\n\n");
    free(s);
}

/* A streamed piece: llama-server's partial result. */
static void infill_chunk(const srv_response *r, const char *text, size_t len, json_t *ids, sbuf *out) {
    json_t *o = json_object();
    json_object_set_new(o, "index", json_integer(0));
    json_object_set_new(o, "content", jstrn(text, len));
    json_object_set_new(o, "tokens", ids ? ids : json_array());
    json_object_set_new(o, "stop", json_false());
    json_object_set_new(o, "id_slot", json_integer(0));
    json_object_set_new(o, "tokens_predicted", json_integer(r->choices[0].n_tokens));
    json_object_set_new(o, "tokens_evaluated", json_integer(r->prompt_tokens));
    sse_data(o, out);
}

static void infill_stream_events(srv_response *r, const srv_event *ev, sbuf *out) {
    choice *c = &r->choices[0];
    for (; ev; ev = ev->next) {
        if (ev->prompt != 0 || ev->index != 0 || ev->kind == PDL_EVENT_PROMPT_LOGPROB) continue;
        note_time(r);
        if (memchr(ev->text, '\n', ev->text_len)) c->has_new_line = true;
        if (ev->kind == PDL_EVENT_TOKEN) {
            if (r->req->discard_output) continue;
            c->n_tokens++;
            r->completion_tokens++;
            if (ev->text_len || r->req->return_tokens)
                infill_chunk(r, ev->text, ev->text_len, r->req->return_tokens ? json_pack("[i]", ev->token) : NULL,
                             out);
        } else {
            c->finish = r->req->discard_output ? "length" : ev->finish_reason;
            take_stop_reason(c, ev);
            r->cached_tokens += ev->cached_tokens;
            if (ev->text_len && !r->req->discard_output) infill_chunk(r, ev->text, ev->text_len, NULL, out);
        }
    }
}

/* n bytes as base64 (RFC 4648, padded), appended to b. */
static void put_base64(sbuf *b, const uint8_t *p, size_t n) {
    static const char A[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0) | (i + 2 < n ? p[i + 2] : 0);
        char q[4] = {A[v >> 18], A[(v >> 12) & 63], i + 1 < n ? A[(v >> 6) & 63] : '=', i + 2 < n ? A[v & 63] : '='};
        sbuf_append(b, q, 4);
    }
}

/* OpenAI's embeddings list: each input's vector (its first `dimensions`,
 * renormalized when the server normalizes), as floats (printed to round
 * trip: %.9g) or as base64 of little-endian float32; usage counts the
 * input tokens. */
static char *embeddings_body(srv_response *r, size_t *len) {
    sbuf b = {0};
    sbuf_puts(&b, "{\"object\":\"list\",\"data\":[");
    for (int i = 0; i < r->n_choices; i++) {
        const choice *c = &r->choices[i];
        int n = r->req->embed_dims > 0 && r->req->embed_dims < c->n_embedding ? r->req->embed_dims : c->n_embedding;
        float *v = malloc((size_t)(n ? n : 1) * sizeof *v);
        if (!v) {
            sbuf_free(&b);
            return NULL;
        }
        double norm = 0;
        for (int k = 0; k < n; k++) norm += (double)c->embedding[k] * c->embedding[k];
        bool renorm = n < c->n_embedding && r->req->params.normalize && norm > 0;
        for (int k = 0; k < n; k++) v[k] = renorm ? (float)(c->embedding[k] / sqrt(norm)) : c->embedding[k];
        char head[96];
        snprintf(head, sizeof head, "%s{\"object\":\"embedding\",\"index\":%d,\"embedding\":", i ? "," : "", i);
        sbuf_puts(&b, head);
        if (r->req->embed_base64) {
            uint8_t *bytes = malloc((size_t)(n ? n : 1) * 4);
            if (!bytes) {
                free(v);
                sbuf_free(&b);
                return NULL;
            }
            for (int k = 0; k < n; k++) {
                uint32_t u;
                memcpy(&u, &v[k], 4);
                for (int j = 0; j < 4; j++) bytes[4 * k + j] = (uint8_t)(u >> (8 * j));
            }
            sbuf_puts(&b, "\"");
            put_base64(&b, bytes, (size_t)n * 4);
            sbuf_puts(&b, "\"");
            free(bytes);
        } else {
            sbuf_puts(&b, "[");
            for (int k = 0; k < n; k++) {
                char num[32];
                snprintf(num, sizeof num, "%s%.9g", k ? "," : "", (double)v[k]);
                sbuf_puts(&b, num);
            }
            sbuf_puts(&b, "]");
        }
        sbuf_puts(&b, "}");
        free(v);
    }
    char tail[128];
    sbuf_puts(&b, "],\"model\":");
    json_t *model = jstr(r->model_name);
    char *name = json_dumps(model, JSON_ENCODE_ANY);
    json_decref(model);
    sbuf_puts(&b, name ? name : "null");
    free(name);
    snprintf(tail, sizeof tail, ",\"usage\":{\"prompt_tokens\":%d,\"total_tokens\":%d}}", r->prompt_tokens,
             r->prompt_tokens);
    sbuf_puts(&b, tail);
    return sbuf_take(&b, len);
}

const srv_gen_request *srv_response_request(const srv_response *r) { return r->req; }
const pdl_model *srv_response_model(const srv_response *r) { return r->model; }
const char *srv_response_id(const srv_response *r) { return r->id; }
const char *srv_response_model_name(const srv_response *r) { return r->model_name; }
int srv_response_prompt_tokens(const srv_response *r) { return r->prompt_tokens; }

const float *srv_response_embedding(const srv_response *r, int i, int *n) {
    const choice *c = i >= 0 && i < r->n_choices ? &r->choices[i] : NULL;
    *n = c ? c->n_embedding : 0;
    return c && c->n_embedding > 0 ? c->embedding : NULL;
}

char *srv_response_body(srv_response *r, size_t *len) {
    if (r->req->kind == SRV_API_INFILL) return dump(infill_final(r, false), len);
    if (r->req->kind == SRV_API_EMBEDDINGS) return embeddings_body(r, len);
    if (r->req->kind == SRV_API_RERANK || r->req->kind == SRV_API_SCORE) return srv_rerank_body(r, len);
    bool chat = r->req->kind == SRV_API_CHAT;
    json_t *o = json_object();
    json_object_set_new(o, "id", json_string(r->id));
    json_object_set_new(o, "object", json_string(chat ? "chat.completion" : "text_completion"));
    json_object_set_new(o, "created", json_integer(r->created));
    json_object_set_new(o, "model", jstr(r->model_name));
    json_object_set_new(o, "system_fingerprint", r->fingerprint ? jstr(r->fingerprint) : json_null());
    sbuf b = {0};
    put_object_open(&b, o);
    sbuf_puts(&b, ",\"choices\":[");
    for (int i = 0; i < r->n_choices; i++) {
        choice *c = &r->choices[i];
        json_t *ch = json_object();
        json_object_set_new(ch, "index", json_integer(i));
        const char *gen = c->text.data ? c->text.data : "";
        if (chat) {
            json_t *msg = json_object();
            json_object_set_new(msg, "role", json_string("assistant"));
            if (c->tools) srv_tool_output_message(c->tools, msg);
            else json_object_set_new(msg, "content", jstrn(gen, c->text.len));
            if (c->think) { /* vLLM's field, and llama.cpp's / DeepSeek's name for it */
                bool have = c->reasoning.len > 0;
                json_object_set_new(msg, "reasoning", have ? jstrn(c->reasoning.data, c->reasoning.len) : json_null());
                json_object_set_new(msg, "reasoning_content",
                                    have ? jstrn(c->reasoning.data, c->reasoning.len) : json_null());
            }
            json_object_set_new(ch, "message", msg);
            json_object_set_new(ch, "logprobs", r->req->logprobs >= 0 ? json_pack("{s:o}", "content",
                                c->lp ? json_incref(c->lp) : json_array()) : json_null());
        } else {
            const srv_prompt *sp = &r->req->prompts[c->prompt];
            sbuf t = {0};
            if (r->req->echo && sp->text) sbuf_append(&t, sp->text, sp->text_len);
            sbuf_append(&t, gen, c->text.len);
            size_t tl;
            char *text = sbuf_take(&t, &tl);
            json_object_set_new(ch, "text", text ? jstrn(text, tl) : json_string(""));
            free(text);
            json_t *lp = json_null();
            if (r->req->logprobs >= 0) {
                lp = completion_lp_new();
                if (r->req->echo) echo_logprobs(r, c->prompt, lp);
                if (c->lp) {
                    static const char *const keys[] = {"text_offset", "token_logprobs", "tokens", "top_logprobs"};
                    for (int k = 0; k < 4; k++)
                        json_array_extend(json_object_get(lp, keys[k]), json_object_get(c->lp, keys[k]));
                }
            }
            json_object_set_new(ch, "logprobs", lp);
        }
        const char *finish = c->finish ? c->finish : "abort";
        if (c->tools) finish = srv_tool_output_finish_reason(c->tools, finish);
        json_object_set_new(ch, "finish_reason", json_string(finish));
        json_object_set_new(ch, "stop_reason", stop_reason_json(c));
        if (i) sbuf_puts(&b, ",");
        put_object_open(&b, ch);
        if (!chat && r->req->prompt_logprobs >= 0 && i % r->n == 0) {
            sbuf_puts(&b, ",\"prompt_logprobs\":");
            put_vllm_prompt_logprobs(r, c->prompt, &b);
        }
        sbuf_puts(&b, "}");
    }
    sbuf_puts(&b, "],\"usage\":");
    char *u = dump(usage_json(r), NULL);
    if (u) sbuf_puts(&b, u);
    else b.oom = true;
    free(u);
    if (chat && r->req->prompt_logprobs >= 0) {
        sbuf_puts(&b, ",\"prompt_logprobs\":");
        put_vllm_prompt_logprobs(r, 0, &b);
    }
    sbuf_puts(&b, "}");
    return sbuf_take(&b, len);
}

/* ---- streaming ------------------------------------------------------------------------ */

static json_t *chunk_new(const srv_response *r) {
    bool chat = r->req->kind == SRV_API_CHAT;
    json_t *o = json_object();
    json_object_set_new(o, "id", json_string(r->id));
    json_object_set_new(o, "object", json_string(chat ? "chat.completion.chunk" : "text_completion"));
    json_object_set_new(o, "created", json_integer(r->created));
    json_object_set_new(o, "model", jstr(r->model_name));
    json_object_set_new(o, "system_fingerprint", r->fingerprint ? jstr(r->fingerprint) : json_null());
    return o;
}

static void sse_send(const srv_response *r, json_t *chunk, json_t *choice, sbuf *out) {
    json_t *choices = json_array();
    json_array_append_new(choices, choice);
    json_object_set_new(chunk, "choices", choices);
    if (r->req->include_usage)
        json_object_set_new(chunk, "usage", r->req->continuous_usage ? usage_json(r) : json_null());
    sse_data(chunk, out);
}

/* One chunk for choice i: a chat delta, or completion text (len bytes, may
 * be none), its logprobs (or NULL), and the finish reason (or NULL; then
 * stop_reason is null too). delta and lp are consumed. */
static void send_chunk(const srv_response *r, int i, json_t *delta, const char *text, size_t len, json_t *lp,
                       const char *finish, sbuf *out) {
    json_t *ch = json_object();
    json_object_set_new(ch, "index", json_integer(i));
    if (r->req->kind == SRV_API_CHAT) json_object_set_new(ch, "delta", delta ? delta : json_object());
    else json_object_set_new(ch, "text", jstrn(text, len));
    json_object_set_new(ch, "logprobs", lp ? lp : json_null());
    json_object_set_new(ch, "finish_reason", finish ? json_string(finish) : json_null());
    json_object_set_new(ch, "stop_reason", finish ? stop_reason_json(&r->choices[i]) : json_null());
    sse_send(r, chunk_new(r), ch, out);
}

static void send_choice(const srv_response *r, int i, const char *text, size_t len, json_t *lp, const char *finish,
                        sbuf *out) {
    json_t *delta = NULL;
    if (r->req->kind == SRV_API_CHAT) {
        delta = json_object();
        if (len || !finish) json_object_set_new(delta, "content", jstrn(text, len));
    }
    send_chunk(r, i, delta, text, len, lp, finish, out);
}

/* Tool-call parsing: the deltas one piece of text gave, one chunk each (the
 * first carries the token's logprobs; with none, a chunk with an empty delta
 * does). */
static void send_tool_deltas(srv_response *r, int i, json_t *deltas, json_t *lp, sbuf *out) {
    size_t n = json_array_size(deltas);
    for (size_t k = 0; k < n; k++) {
        send_chunk(r, i, json_incref(json_array_get(deltas, k)), NULL, 0, lp, NULL, out);
        lp = NULL;
    }
    if (lp) send_chunk(r, i, NULL, NULL, 0, lp, NULL, out);
    json_decref(deltas);
}

void srv_response_stream_begin(srv_response *r, sbuf *out) {
    if (r->req->kind != SRV_API_CHAT) return;
    for (int i = 0; i < r->n_choices; i++) {
        json_t *ch = json_object();
        json_object_set_new(ch, "index", json_integer(i));
        json_object_set_new(ch, "delta", json_pack("{s:s, s:s}", "role", "assistant", "content", ""));
        json_object_set_new(ch, "logprobs", json_null());
        json_object_set_new(ch, "finish_reason", json_null());
        sse_send(r, chunk_new(r), ch, out);
    }
}

/* Completions with echo: the prompt (and its logprobs) before the first token. */
static void stream_echo(srv_response *r, int i, sbuf *out) {
    choice *c = &r->choices[i];
    if (c->started) return;
    c->started = true;
    if (!r->req->echo || !r->req->prompts[c->prompt].text) return;
    json_t *lp = NULL;
    if (r->req->logprobs >= 0) {
        lp = completion_lp_new();
        echo_logprobs(r, c->prompt, lp);
    }
    send_choice(r, i, r->req->prompts[c->prompt].text, r->req->prompts[c->prompt].text_len, lp, NULL, out);
}

void srv_response_stream_events(srv_response *r, const srv_event *ev, sbuf *out) {
    if (r->req->kind == SRV_API_INFILL) {
        infill_stream_events(r, ev, out);
        return;
    }
    bool chat = r->req->kind == SRV_API_CHAT;
    for (; ev; ev = ev->next) {
        if (ev->prompt < 0 || ev->prompt >= r->req->n_prompts) continue;
        if (ev->kind == PDL_EVENT_PROMPT_LOGPROB) {
            add_prompt_logprob(r, ev);
            continue;
        }
        int i = ev->prompt * r->n + ev->index;
        choice *c = &r->choices[i];
        if (!chat) stream_echo(r, i, out);
        if (ev->kind == PDL_EVENT_TOKEN) {
            c->n_tokens++;
            r->completion_tokens++;
            json_t *lp = NULL;
            if (r->req->logprobs >= 0) {
                if (chat) {
                    lp = json_pack("{s:[o]}", "content",
                                   chat_lp_entry(r, ev->text, ev->text_len, ev->logprob, ev->top, ev->n_top, c->prev));
                } else {
                    lp = completion_lp_new();
                    completion_lp_add(r, lp, ev->text, ev->text_len, echo_chars(r, c->prompt) + c->chars, true,
                                      ev->token, ev->logprob, ev->top, ev->n_top, c->prev);
                }
            }
            c->prev = ev->token;
            c->chars += utf8_chars(ev->text, ev->text_len);
            if (c->tools || c->think) {
                json_t *deltas = json_array();
                if (!take_text(r, c, ev->token, ev->text, ev->text_len, false, deltas)) out->oom = true;
                send_tool_deltas(r, i, deltas, lp, out);
            } else if (ev->text_len || lp) {
                send_choice(r, i, ev->text, ev->text_len, lp, NULL, out);
            }
        } else {
            c->finish = ev->finish_reason;
            take_stop_reason(c, ev);
            if (ev->index == 0) r->cached_tokens += ev->cached_tokens; /* once per prompt */
            c->chars += utf8_chars(ev->text, ev->text_len);
            if (c->tools || c->think) {
                json_t *deltas = json_array();
                if (!take_text(r, c, -1, ev->text, ev->text_len, true, deltas)) out->oom = true;
                send_tool_deltas(r, i, deltas, NULL, out);
                const char *finish = c->tools ? srv_tool_output_finish_reason(c->tools, ev->finish_reason)
                                              : ev->finish_reason;
                send_chunk(r, i, NULL, NULL, 0, NULL, finish, out);
            } else {
                send_choice(r, i, ev->text, ev->text_len, NULL, ev->finish_reason, out);
            }
        }
    }
}

void srv_response_stream_end(srv_response *r, sbuf *out) {
    if (r->req->kind == SRV_API_INFILL) { /* the final result, and no [DONE] (llama-server) */
        sse_data(infill_final(r, true), out);
        return;
    }
    if (r->req->include_usage) {
        json_t *o = chunk_new(r);
        json_object_set_new(o, "choices", json_array());
        json_object_set_new(o, "usage", usage_json(r));
        sse_data(o, out);
    }
    sbuf_puts(out, "data: [DONE]\n\n");
}

void srv_stream_error(const srv_api_error *e, sbuf *out) {
    char *s = srv_error_body(e, NULL);
    if (!s) {
        out->oom = true;
        return;
    }
    sbuf_puts(out, "data: ");
    sbuf_puts(out, s);
    sbuf_puts(out, "\n\n");
    free(s);
}

/* ---- the small endpoints ------------------------------------------------------------ */

static json_t *model_card(const char *name, const char *root, int ctx_len, long long created) {
    json_t *m = json_object();
    json_object_set_new(m, "id", jstr(name));
    json_object_set_new(m, "object", json_string("model"));
    json_object_set_new(m, "created", json_integer(created));
    json_object_set_new(m, "owned_by", json_string("pagedlm"));
    json_object_set_new(m, "root", jstr(root));
    json_object_set_new(m, "parent", json_null());
    json_object_set_new(m, "max_model_len", json_integer(ctx_len));
    return m;
}

char *srv_models_body(const char *name, const char *root, int ctx_len, long long created, bool list, size_t *len) {
    json_t *m = model_card(name, root, ctx_len, created);
    if (!list) return dump(m, len);
    json_t *o = json_object();
    json_object_set_new(o, "object", json_string("list"));
    json_t *data = json_array();
    json_array_append_new(data, m);
    json_object_set_new(o, "data", data);
    return dump(o, len);
}

char *srv_tokenize_body(const pdl_model *model, const int32_t *ids, size_t n, int ctx_len, bool token_strs,
                        size_t *len) {
    json_t *o = json_object();
    json_object_set_new(o, "count", json_integer((json_int_t)n));
    json_object_set_new(o, "max_model_len", json_integer(ctx_len));
    json_t *t = json_array();
    for (size_t i = 0; i < n; i++) json_array_append_new(t, json_integer(ids[i]));
    json_object_set_new(o, "tokens", t);
    json_t *strs = json_null();
    if (token_strs) {
        strs = json_array();
        pdl_detok *d = pdl_detok_new(model, NULL, 0);
        for (size_t i = 0; i < n; i++) {
            const char *t = d ? pdl_detok_push(d, ids[i]) : "";
            json_array_append_new(strs, jstrn(t, pdl_detok_len(d)));
        }
        pdl_detok_free(d);
    }
    json_object_set_new(o, "token_strs", strs);
    return dump(o, len);
}

char *srv_detokenize_body(const char *text, size_t text_len, size_t *len) {
    json_t *o = json_object();
    json_object_set_new(o, "prompt", jstrn(text, text_len));
    return dump(o, len);
}
