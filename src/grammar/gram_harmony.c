/*
 * gram_harmony.c - reading OpenAI's harmony format (gpt-oss) out of
 * generated text, streaming: vLLM's --tool-call-parser / --reasoning-parser
 * "openai".
 *
 * The output after the prompt's "<|start|>assistant" is a run of messages,
 * each a header, <|message|>, a body, and <|end|> (then <|start|>assistant
 * and the next header), <|call|> or <|return|>:
 *
 *   <|channel|>analysis<|message|>thinking...<|end|>
 *   <|start|>assistant<|channel|>final<|message|>the answer<|return|>
 *   <|start|>assistant<|channel|>commentary to=functions.get_weather
 *       <|constrain|>json<|message|>{"city": "Paris"}<|call|>
 *
 * (the recipient "to=..." may also stand before <|channel|>). A body goes
 * by its header: the analysis channel is reasoning (GRAM_TOOL_REASONING),
 * a message to a recipient is a call (its name the recipient without
 * "functions.", its body the arguments), any other (final, or commentary
 * without a recipient: a preamble) is content. The markers are control
 * tokens, which a detokenizer skips: the caller feeds each one's own text
 * (gram_tool_format_markers). <|call|> and <|return|> end generation and
 * may never be fed: a call is complete when its arguments are JSON. Text that does not start as a header (a model not
 * writing harmony) is all content. Bytes that may begin a marker are held
 * until decided, so where the pieces are cut changes nothing.
 */
#define _POSIX_C_SOURCE 200809L
#include <jansson.h>
#include <string.h>

#include "grammar/gram_internal.h"

enum { H_START, H_HEAD, H_BODY, H_PLAIN };
enum { R_CONTENT, R_REASONING, R_CALL };

/* A header no longer than this ends in <|message|>, or it was not one. */
#define MAX_HEADER 1024

static const char MSG[] = "<|message|>";
static const char *const BODY_ENDS[] = {"<|end|>", "<|call|>", "<|return|>", "<|start|>", "<|channel|>"};
enum { N_BODY_ENDS = sizeof BODY_ENDS / sizeof BODY_ENDS[0] };

struct gram_harmony {
    uint64_t seed;
    int state, route;
    gram_text head;     /* the header so far */
    gram_text pend;     /* body bytes that may begin a marker */
    gram_text args;     /* the current call's arguments */
    gram_text run;      /* body text not handed out yet, all of kind run_kind (one event per run) */
    gram_tool_event_kind run_kind;
    int n_calls;
    char id[40];
    gram_tool_event_fn fn;
    void *user;
    bool oom;
};

gram_harmony *gram_harmony_new(uint64_t id_seed) {
    gram_harmony *h = calloc(1, sizeof *h);
    if (h) h->seed = id_seed;
    return h;
}

void gram_harmony_free(gram_harmony *h) {
    if (!h) return;
    gram_text_free(&h->head), gram_text_free(&h->pend), gram_text_free(&h->args), gram_text_free(&h->run);
    free(h);
}

static void event(gram_harmony *h, gram_tool_event_kind kind, const char *s, size_t n, bool complete) {
    if (kind != GRAM_TOOL_CALL_END && kind != GRAM_TOOL_CALL_BEGIN && n == 0) return;
    gram_tool_event ev = {.kind = kind, .index = h->n_calls - 1, .text = s, .len = n, .complete = complete,
                          .id = h->id};
    h->fn(&ev, h->user);
}

/* Hands out the body text gathered so far. */
static void flush_run(gram_harmony *h) {
    if (h->run.n) event(h, h->run_kind, h->run.p, h->run.n, false);
    h->run.n = 0;
}

/* Body text to where the message goes, gathered into runs. */
static void body(gram_harmony *h, const char *s, size_t n) {
    gram_tool_event_kind kind = h->route == R_CALL        ? GRAM_TOOL_CALL_ARGS
                                : h->route == R_REASONING ? GRAM_TOOL_REASONING
                                                          : GRAM_TOOL_CONTENT;
    if (h->route == R_CALL && !gram_text_put(&h->args, s, n)) h->oom = true;
    if (h->run.n && kind != h->run_kind) flush_run(h);
    h->run_kind = kind;
    if (!gram_text_put(&h->run, s, n)) h->oom = true;
}

/* The word after key in the header, up to whitespace or '<'. */
static size_t header_word(const gram_text *hd, const char *key, const char **at) {
    const char *p = NULL, *s = hd->p;
    for (const char *q = s; q && (q = strstr(q, key)); q += strlen(key)) p = q; /* the last one */
    if (!p) return 0;
    p += strlen(key);
    size_t n = 0;
    while (p + n < s + hd->n && !strchr(" \t\r\n<", p[n])) n++;
    *at = p;
    return n;
}

/* The header is complete: where its body goes. */
static void header_done(gram_harmony *h) {
    const char *ch = NULL, *to = NULL;
    size_t ch_n = header_word(&h->head, "<|channel|>", &ch), to_n = header_word(&h->head, "to=", &to);
    if (to_n > 0) {
        if (to_n > 10 && !memcmp(to, "functions.", 10)) to += 10, to_n -= 10;
        h->n_calls++;
        gram_call_id(h->seed, h->n_calls, h->id);
        gram_text name = {0};
        if (!gram_text_put(&name, to, to_n)) h->oom = true;
        gram_tool_event ev = {.kind = GRAM_TOOL_CALL_BEGIN, .index = h->n_calls - 1, .id = h->id,
                              .name = name.p ? name.p : ""};
        h->fn(&ev, h->user);
        gram_text_free(&name);
        h->route = R_CALL;
        h->args.n = 0;
    } else {
        h->route = ch_n == 8 && !memcmp(ch, "analysis", 8) ? R_REASONING : R_CONTENT;
    }
    h->head.n = 0;
    h->state = H_BODY;
}

/* The body ended (by its marker, or the text's end): a call is complete
 * when its arguments are JSON (a marker inside a string cut them short). */
static void body_done(gram_harmony *h) {
    flush_run(h);
    if (h->route == R_CALL) {
        json_t *j = json_loadb(h->args.p ? h->args.p : "", h->args.n, JSON_DECODE_ANY, NULL);
        event(h, GRAM_TOOL_CALL_END, NULL, 0, j != NULL);
        json_decref(j);
    }
    h->route = R_CONTENT;
    h->state = H_HEAD;
}

static void body_byte(gram_harmony *h, char c);

static void feed_byte(gram_harmony *h, char c) {
    switch (h->state) {
    case H_START: /* the first header: a marker or a recipient, else this is not harmony */
        if (c == ' ' || c == '\n' || c == '\t' || c == '\r') break;
        h->state = c == '<' || c == 't' ? H_HEAD : H_PLAIN;
        feed_byte(h, c);
        break;
    case H_HEAD:
        if (!gram_text_byte(&h->head, c)) h->oom = true;
        if ((h->head.p[0] == 't' && h->head.n <= 3 && memcmp(h->head.p, "to=", h->head.n)) ||
            (h->head.p[0] == '<' && h->head.n == 2 && h->head.p[1] != '|')) { /* no header: content */
            h->state = H_PLAIN;
            event(h, GRAM_TOOL_CONTENT, h->head.p, h->head.n, false);
            h->head.n = 0;
        } else if (h->head.n >= sizeof MSG - 1 && !memcmp(h->head.p + h->head.n - (sizeof MSG - 1), MSG, sizeof MSG - 1))
            header_done(h);
        else if (h->head.n > MAX_HEADER) { /* not a header: content from here on */
            h->state = H_PLAIN;
            event(h, GRAM_TOOL_CONTENT, h->head.p, h->head.n, false);
            h->head.n = 0;
        }
        break;
    case H_BODY: body_byte(h, c); break;
    case H_PLAIN: event(h, GRAM_TOOL_CONTENT, &c, 1, false); break;
    }
}

/* A body byte: held while it may begin a marker that ends the body. */
static void body_byte(gram_harmony *h, char c) {
    if (!gram_text_byte(&h->pend, c)) h->oom = true;
    for (;;) {
        bool prefix = false;
        for (int i = 0; i < N_BODY_ENDS; i++) {
            size_t m = strlen(BODY_ENDS[i]);
            if (h->pend.n > m || memcmp(h->pend.p, BODY_ENDS[i], h->pend.n)) continue;
            if (h->pend.n < m) {
                prefix = true;
                continue;
            }
            h->pend.n = 0;
            body_done(h);
            if (i >= 3 && !gram_text_put(&h->head, BODY_ENDS[i], m)) h->oom = true; /* the next header's */
            return;
        }
        if (prefix) return;
        /* the first held byte begins no marker: it is the body's */
        body(h, h->pend.p, 1);
        memmove(h->pend.p, h->pend.p + 1, h->pend.n - 1);
        if (--h->pend.n == 0) return;
    }
}

int gram_harmony_feed(gram_harmony *h, const char *text, size_t len, gram_tool_event_fn fn, void *user) {
    h->fn = fn, h->user = user;
    if (h->state == H_PLAIN) { /* the rest as it comes */
        event(h, GRAM_TOOL_CONTENT, text, len, false);
        return 0;
    }
    for (size_t i = 0; i < len; i++) {
        if (h->state == H_PLAIN) {
            flush_run(h);
            event(h, GRAM_TOOL_CONTENT, text + i, len - i, false);
            break;
        }
        feed_byte(h, text[i]);
    }
    flush_run(h);
    return h->oom || h->run.oom || h->head.oom || h->pend.oom || h->args.oom ? -1 : 0;
}

int gram_harmony_finish(gram_harmony *h, gram_tool_event_fn fn, void *user) {
    h->fn = fn, h->user = user;
    if (h->state == H_BODY) {
        body(h, h->pend.p, h->pend.n); /* a partial marker at the end is the body's */
        h->pend.n = 0;
        body_done(h);
    } else if (h->state == H_HEAD && h->head.n && !memchr(h->head.p, '<', h->head.n)) {
        event(h, GRAM_TOOL_CONTENT, h->head.p, h->head.n, false); /* text that never became a header */
    }
    h->head.n = 0;
    return h->oom ? -1 : 0;
}
