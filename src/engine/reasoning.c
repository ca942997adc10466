/*
 * reasoning.c - the thinking block's formats, its token ids for the engine,
 * and the streaming split of text into reasoning and content (reasoning.h
 * gives the rules).
 *
 * The split is a byte-at-a-time state machine over three states (before the
 * block, inside it, after it) with two held buffers: the bytes that may
 * still be a marker, and inside the block a run of whitespace that is
 * dropped if the end marker follows it. Released bytes are gathered into
 * runs of one kind and handed out once per run.
 */
#include "engine/reasoning.h"

#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"

static const reasoning_format FORMATS[] = {
    {"qwen3", "<think>", "</think>", false},
    {"deepseek_r1", "<think>", "</think>", false},
    {"openai", "<|channel|>analysis<|message|>", "<|end|>", true},
};

const reasoning_format *reasoning_format_find(const char *name) {
    for (size_t i = 0; i < sizeof FORMATS / sizeof FORMATS[0]; i++)
        if (strcmp(FORMATS[i].name, name) == 0) return &FORMATS[i];
    return NULL;
}

const char *reasoning_format_names(void) { return "qwen3, deepseek_r1, openai"; }

static bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

bool reasoning_prompt_opens(const reasoning_format *f, const char *text, size_t len) {
    if (f->harmony) return false; /* the output starts with its message's header */
    while (len > 0 && is_ws(text[len - 1])) len--;
    size_t n = strlen(f->start);
    return len >= n && memcmp(text + len - n, f->start, n) == 0;
}

static int32_t single_token(const pdl_model *m, const char *text) {
    int32_t *ids = NULL;
    size_t n = 0;
    pdl_error e;
    int32_t id = -1;
    if (pdl_tokenize_ex(m, text, strlen(text), PDL_TOK_PARSE_SPECIAL, &ids, &n, &e) == 0 && n == 1) id = ids[0];
    free(ids);
    return id;
}

const reasoning_format *reasoning_format_of_model(const pdl_model *m) {
    if (single_token(m, "<|channel|>") >= 0) return reasoning_format_find("openai");
    if (single_token(m, "<think>") >= 0 && single_token(m, "</think>") >= 0) return reasoning_format_find("qwen3");
    return NULL;
}

void reasoning_params(const reasoning_format *f, const pdl_model *m, bool starts_inside, int budget,
                      pdl_reasoning *out) {
    *out = (pdl_reasoning){.start_token = single_token(m, f->start), .end_token = single_token(m, f->end),
                           .starts_inside = starts_inside, .budget = budget};
    out->enabled = out->end_token >= 0 && (out->start_token >= 0 || starts_inside);
}

/* ---- the text split ---------------------------------------------------- */

enum { R_BEFORE = 0, R_INSIDE, R_AFTER };

typedef struct bytes {
    char *p;
    size_t n, cap;
} bytes;

static bool bytes_put(bytes *b, const char *s, size_t n) {
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 64;
        while (cap < b->n + n) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) return false;
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    return true;
}

struct reasoning_split {
    const reasoning_format *f;
    int state;
    bool skip_ws;    /* drop whitespace now: at the start of the reasoning, or of the answer after it */
    bytes pend;      /* bytes that may still be a marker (before: with the whitespace before it) */
    bytes ws;        /* inside: whitespace held until text follows it (dropped before the end marker) */
    bytes run;       /* released bytes not handed out yet, all of kind run_reasoning */
    bool run_reasoning;
    bool oom;
    gram_tool_parser *harmony; /* openai: the harmony reader does the split */
    reasoning_out_fn fn;       /* the feed in progress (harmony) */
    void *user;
};

reasoning_split *reasoning_split_new(const reasoning_format *f, bool starts_inside) {
    reasoning_split *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->f = f;
    if (f->harmony && !(s->harmony = gram_tool_parser_new(GRAM_TOOLS_OPENAI, 0))) {
        free(s);
        return NULL;
    }
    s->state = starts_inside ? R_INSIDE : R_BEFORE;
    s->skip_ws = starts_inside;
    return s;
}

void reasoning_split_free(reasoning_split *s) {
    if (!s) return;
    free(s->pend.p);
    free(s->ws.p);
    free(s->run.p);
    gram_tool_parser_free(s->harmony);
    free(s);
}


static void flush(reasoning_split *s, reasoning_out_fn fn, void *user) {
    if (s->run.n) fn(user, s->run_reasoning, s->run.p, s->run.n);
    s->run.n = 0;
}

static void out(reasoning_split *s, bool reasoning, const char *t, size_t n, reasoning_out_fn fn, void *user) {
    if (n == 0) return;
    if (s->run.n && s->run_reasoning != reasoning) flush(s, fn, user);
    s->run_reasoning = reasoning;
    if (!bytes_put(&s->run, t, n)) s->oom = true;
}

static void feed_before(reasoning_split *s, char c, reasoning_out_fn fn, void *user) {
    if (!bytes_put(&s->pend, &c, 1)) {
        s->oom = true;
        return;
    }
    size_t rest = s->pend.n, n = strlen(s->f->start);
    if (rest <= n && memcmp(s->pend.p, s->f->start, rest) == 0) {
        if (rest == n) { /* the block opens */
            s->state = R_INSIDE;
            s->skip_ws = true;
            s->pend.n = 0;
        }
        return;
    }
    s->state = R_AFTER; /* no block: the text so far is the answer's */
    out(s, false, s->pend.p, s->pend.n, fn, user);
    s->pend.n = 0;
}

static void feed_inside(reasoning_split *s, char c, reasoning_out_fn fn, void *user) {
    if (s->skip_ws && is_ws(c)) return;
    s->skip_ws = false;
    if (!bytes_put(&s->pend, &c, 1)) {
        s->oom = true;
        return;
    }
    const char *end = s->f->end;
    size_t n = strlen(end);
    for (;;) {
        if (s->pend.n <= n && memcmp(s->pend.p, end, s->pend.n) == 0) {
            if (s->pend.n == n) { /* the block ends: its trailing whitespace is dropped */
                s->state = R_AFTER;
                s->skip_ws = true;
                s->pend.n = s->ws.n = 0;
            }
            return;
        }
        /* the first held byte cannot begin the end marker: it is reasoning */
        char b = s->pend.p[0];
        if (is_ws(b)) {
            if (!bytes_put(&s->ws, &b, 1)) s->oom = true;
        } else {
            out(s, true, s->ws.p, s->ws.n, fn, user);
            s->ws.n = 0;
            out(s, true, &b, 1, fn, user);
        }
        memmove(s->pend.p, s->pend.p + 1, s->pend.n - 1);
        s->pend.n--;
        if (s->pend.n == 0) return;
    }
}

/* The harmony reader's events as reasoning and answer text. */
static void on_harmony(const gram_tool_event *ev, void *user) {
    reasoning_split *s = user;
    switch (ev->kind) {
    case GRAM_TOOL_REASONING: out(s, true, ev->text, ev->len, s->fn, s->user); return;
    case GRAM_TOOL_CONTENT:
    case GRAM_TOOL_CALL_ARGS: out(s, false, ev->text, ev->len, s->fn, s->user); break;
    case GRAM_TOOL_CALL_BEGIN:
        out(s, false, "[tool call ", 11, s->fn, s->user);
        out(s, false, ev->name, strlen(ev->name), s->fn, s->user);
        out(s, false, " ", 1, s->fn, s->user);
        break;
    case GRAM_TOOL_CALL_END: out(s, false, "]", 1, s->fn, s->user); break;
    }
    s->state = R_AFTER; /* the answer began */
}

static int harmony_feed(reasoning_split *s, const char *text, size_t len, bool finish, reasoning_out_fn fn,
                        void *user) {
    s->fn = fn, s->user = user;
    int rc = finish ? gram_tool_parser_finish(s->harmony, on_harmony, s)
                    : gram_tool_parser_feed(s->harmony, text, len, on_harmony, s);
    flush(s, fn, user);
    return rc || s->oom ? -1 : 0;
}

int reasoning_split_feed(reasoning_split *s, const char *text, size_t len, reasoning_out_fn fn, void *user) {
    if (s->harmony) return harmony_feed(s, text, len, false, fn, user);
    for (size_t i = 0; i < len; i++) {
        char c = text[i];
        switch (s->state) {
        case R_BEFORE: feed_before(s, c, fn, user); break;
        case R_INSIDE: feed_inside(s, c, fn, user); break;
        default:
            if (s->skip_ws && is_ws(c)) break;
            s->skip_ws = false;
            out(s, false, text + i, len - i, fn, user); /* the answer: the rest as it is */
            i = len;
            break;
        }
    }
    flush(s, fn, user);
    return s->oom ? -1 : 0;
}

int reasoning_split_finish(reasoning_split *s, reasoning_out_fn fn, void *user) {
    if (s->harmony) return harmony_feed(s, NULL, 0, true, fn, user);
    if (s->state == R_BEFORE) {
        out(s, false, s->pend.p, s->pend.n, fn, user);
    } else if (s->state == R_INSIDE && s->pend.n) { /* cut inside the block: a partial marker is reasoning */
        out(s, true, s->ws.p, s->ws.n, fn, user);
        out(s, true, s->pend.p, s->pend.n, fn, user);
    }
    s->pend.n = s->ws.n = 0;
    flush(s, fn, user);
    return s->oom ? -1 : 0;
}

bool reasoning_split_in_answer(const reasoning_split *s) { return s->state == R_AFTER; }

int reasoning_split_feed_token(reasoning_split *s, const pdl_model *m, int32_t token, const char *text, size_t len,
                               reasoning_out_fn fn, void *user) {
    if (!s->harmony || len > 0 || token < 0) return reasoning_split_feed(s, text, len, fn, user);
    char *own = NULL;
    size_t n = 0;
    pdl_error e;
    if (pdl_detokenize_ex(m, &token, 1, PDL_TOK_KEEP_SPECIAL, &own, &n, &e)) return 0; /* no text: nothing */
    int rc = reasoning_split_feed(s, own, n, fn, user);
    free(own);
    return rc;
}
