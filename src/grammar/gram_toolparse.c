/*
 * gram_toolparse.c - reading tool calls out of generated text, streaming:
 * the text arrives in pieces (as detokenized), content and calls leave as
 * deltas the way OpenAI streams them. Formats:
 *
 *   hermes       content <tool_call>{"name": ..., "arguments": ...}</tool_call> ...
 *                (Qwen 2.5/3, Hermes; whitespace between calls is dropped)
 *   llama3_json  [<|python_tag|>]{"name": ..., "parameters": ...}[; {...}]
 *                (the whole output is calls, or it is all content)
 *   mistral      content [TOOL_CALLS][{"name": ..., "arguments": ...}, ...]
 *                or [TOOL_CALLS]name[ARGS]{...} (newer Mistral templates)
 *
 * The text is processed one byte at a time by a state machine, so where the
 * pieces are cut cannot change the result: text that may start a marker is
 * held until it is decided; a call's start is reported once its name is
 * read, then its arguments stream as their raw JSON text ("arguments" given
 * as a JSON string are decoded, as some models write them). A call that
 * turns out malformed before its start was reported is given back as
 * content; after that it ends incomplete. Deltas of one kind that follow
 * each other within one feed are merged.
 *
 * What it is not for: forcing calls (gram_tools.c builds that grammar).
 */
#define _POSIX_C_SOURCE 200809L /* strdup, clock_gettime */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/gram_internal.h"

typedef struct buf {
    char *p;
    size_t n, cap;
} buf;

static bool buf_put(buf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t c = b->cap ? b->cap * 2 : 64;
        while (c < b->n + n + 1) c *= 2;
        char *q = realloc(b->p, c);
        if (!q) return false;
        b->p = q;
        b->cap = c;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return true;
}

static bool buf_byte(buf *b, char c) { return buf_put(b, &c, 1); }

/* One JSON call object {"name": ..., "arguments"|"parameters": ...}, or
 * (args_only) a bare arguments value. */
enum { CS_OPEN, CS_KEY, CS_INKEY, CS_COLON, CS_VALUE, CS_INVAL, CS_AFTER, CS_DONE, CS_BAD };
enum { V_OTHER, V_NAME, V_ARGS };

typedef struct call_scan {
    int st;
    buf key, val;
    int vkind;
    int vtype;          /* '"' string, '{' / '[' container, 's' scalar */
    int depth;
    bool in_str, esc;
    bool args_only, have_args;
} call_scan;

enum { M_CONTENT, M_CALL, M_CLOSE, M_START, M_BETWEEN, M_CONTENT_ONLY, M_AFTER_TAG, M_ARRAY_ELEM, M_ARRAY_SEP,
       M_NAME, M_ARGS_TAG };

enum { OUT_NONE, OUT_CONTENT, OUT_ARGS };

struct gram_tool_parser {
    gram_tool_format fmt;
    uint64_t seed;
    int mode;
    buf pend;           /* held: a partial marker, whitespace after a call */
    bool after_call;    /* pend holds whitespace that follows a call */
    buf raw;            /* the current call's text from its marker on (given back if malformed) */
    call_scan cs;
    bool begun;         /* the current call's start was reported */
    buf name;
    buf args_wait;      /* arguments read before the name */
    int n_calls;
    char id[40];
    /* output of the current feed */
    int out_kind;
    buf out;
    gram_tool_event_fn fn;
    void *user;
    bool oom;
};

static const char TAG_HERMES[] = "<tool_call>", TAG_HERMES_END[] = "</tool_call>";
static const char TAG_MISTRAL[] = "[TOOL_CALLS]", TAG_ARGS[] = "[ARGS]", TAG_PYTHON[] = "<|python_tag|>";

/* ---------------------------------------------------------------------------
 * Events
 * ------------------------------------------------------------------------- */

static void flush_out(gram_tool_parser *p) {
    if (p->out_kind == OUT_NONE || p->out.n == 0) {
        p->out_kind = OUT_NONE;
        return;
    }
    gram_tool_event ev = {0};
    ev.kind = p->out_kind == OUT_CONTENT ? GRAM_TOOL_CONTENT : GRAM_TOOL_CALL_ARGS;
    ev.index = p->n_calls - 1;
    ev.text = p->out.p;
    ev.len = p->out.n;
    p->fn(&ev, p->user);
    p->out.n = 0;
    p->out_kind = OUT_NONE;
}

static void emit(gram_tool_parser *p, int kind, const char *s, size_t n) {
    if (n == 0) return;
    if (p->out_kind != kind) flush_out(p);
    p->out_kind = kind;
    if (!buf_put(&p->out, s, n)) p->oom = true;
}

static uint64_t splitmix(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static void make_id(gram_tool_parser *p) {
    static const char alnum[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    uint64_t x = p->seed ^ ((uint64_t)(p->n_calls + 1) * 0xD1B54A32D192ED03ULL);
    size_t w = 0;
    int n = 24;
    if (p->fmt == GRAM_TOOLS_MISTRAL) {
        n = 9;
    } else {
        memcpy(p->id, "call_", 5);
        w = 5;
    }
    for (int i = 0; i < n; i++) p->id[w++] = alnum[splitmix(&x) % 62];
    p->id[w] = 0;
}

static void begin_call(gram_tool_parser *p) {
    flush_out(p);
    p->n_calls++;
    make_id(p);
    gram_tool_event ev = {0};
    ev.kind = GRAM_TOOL_CALL_BEGIN;
    ev.index = p->n_calls - 1;
    ev.id = p->id;
    ev.name = p->name.p ? p->name.p : "";
    p->fn(&ev, p->user);
    p->begun = true;
    emit(p, OUT_ARGS, p->args_wait.p, p->args_wait.n);
    p->args_wait.n = 0;
}

static void end_call(gram_tool_parser *p, bool complete) {
    flush_out(p);
    gram_tool_event ev = {0};
    ev.kind = GRAM_TOOL_CALL_END;
    ev.index = p->n_calls - 1;
    ev.complete = complete;
    p->fn(&ev, p->user);
    p->begun = false;
}

static void args_bytes(gram_tool_parser *p, const char *s, size_t n) {
    if (p->begun) emit(p, OUT_ARGS, s, n);
    else if (!buf_put(&p->args_wait, s, n)) p->oom = true;
}

/* ---------------------------------------------------------------------------
 * The call object scanner
 * ------------------------------------------------------------------------- */

static bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

static void cs_reset(gram_tool_parser *p, bool args_only) {
    call_scan *cs = &p->cs;
    cs->st = args_only ? CS_VALUE : CS_OPEN;
    cs->key.n = cs->val.n = 0;
    cs->vkind = args_only ? V_ARGS : V_OTHER;
    cs->args_only = args_only;
    cs->have_args = false;
    cs->depth = 0;
    cs->in_str = cs->esc = false;
    if (!args_only) p->name.n = 0;
    p->args_wait.n = 0;
    p->begun = false;
}

/* A JSON string literal's text (quotes included) decoded; NULL if invalid. */
static char *decode_string(const char *raw, size_t n, size_t *len) {
    json_t *s = json_loadb(raw, n, JSON_DECODE_ANY, NULL);
    if (!json_is_string(s)) {
        json_decref(s);
        return NULL;
    }
    *len = json_string_length(s);
    char *out = malloc(*len + 1);
    if (out) memcpy(out, json_string_value(s), *len + 1);
    json_decref(s);
    return out;
}

/* The value just ended. false: the call is malformed. */
static bool value_done(gram_tool_parser *p) {
    call_scan *cs = &p->cs;
    if (cs->vkind == V_NAME) {
        size_t n;
        char *name = cs->vtype == '"' ? decode_string(cs->val.p, cs->val.n, &n) : NULL;
        if (!name) return false;
        p->name.n = 0;
        bool ok = buf_put(&p->name, name, n);
        free(name);
        if (!ok) p->oom = true;
        begin_call(p);
    } else if (cs->vkind == V_ARGS) {
        cs->have_args = true;
        if (cs->vtype == '"') {
            size_t n;
            char *a = decode_string(cs->val.p, cs->val.n, &n);
            if (!a) return false;
            args_bytes(p, a, n);
            free(a);
        }
    }
    cs->st = cs->args_only ? CS_DONE : CS_AFTER;
    return true;
}

/* Feeds one byte; returns the scanner state afterwards. */
static int cs_feed(gram_tool_parser *p, char c) {
    call_scan *cs = &p->cs;
    for (;;) {
        switch (cs->st) {
        case CS_OPEN:
            if (is_ws(c)) return cs->st;
            cs->st = c == '{' ? CS_KEY : CS_BAD;
            return cs->st;
        case CS_KEY:
            if (is_ws(c)) return cs->st;
            if (c == '"') {
                cs->key.n = 0;
                cs->esc = false;
                cs->st = CS_INKEY;
                return cs->st;
            }
            if (c == '}') return cs->st = CS_DONE;
            return cs->st = CS_BAD;
        case CS_INKEY:
            if (cs->esc) {
                cs->esc = false;
            } else if (c == '\\') {
                cs->esc = true;
            } else if (c == '"') {
                cs->st = CS_COLON;
                return cs->st;
            }
            if (!buf_byte(&cs->key, c)) p->oom = true;
            return cs->st;
        case CS_COLON:
            if (is_ws(c)) return cs->st;
            if (c != ':') return cs->st = CS_BAD;
            cs->st = CS_VALUE;
            if (cs->key.n == 4 && memcmp(cs->key.p, "name", 4) == 0) cs->vkind = p->name.n || p->begun ? V_OTHER : V_NAME;
            else if ((cs->key.n == 9 && memcmp(cs->key.p, "arguments", 9) == 0) ||
                     (cs->key.n == 10 && memcmp(cs->key.p, "parameters", 10) == 0))
                cs->vkind = cs->have_args ? V_OTHER : V_ARGS;
            else cs->vkind = V_OTHER;
            return cs->st;
        case CS_VALUE:
            if (is_ws(c)) return cs->st;
            cs->val.n = 0;
            cs->depth = 0;
            cs->in_str = cs->esc = false;
            if (c == '"') {
                cs->vtype = '"';
            } else if (c == '{' || c == '[') {
                cs->vtype = '{';
                cs->depth = 1;
            } else if (c == '-' || (c >= '0' && c <= '9') || c == 't' || c == 'f' || c == 'n') {
                cs->vtype = 's';
            } else {
                return cs->st = CS_BAD;
            }
            if (cs->vkind == V_NAME && cs->vtype != '"') return cs->st = CS_BAD;
            cs->st = CS_INVAL;
            if (!buf_byte(&cs->val, c)) p->oom = true;
            if (cs->vkind == V_ARGS && cs->vtype != '"') args_bytes(p, &c, 1);
            return cs->st;
        case CS_INVAL:
            if (cs->vtype == 's' && (c == ',' || c == '}' || c == ']' || is_ws(c))) {
                if (!value_done(p)) return cs->st = CS_BAD;
                if (cs->st == CS_DONE) return cs->st;
                continue; /* the delimiter belongs to what follows */
            }
            if (!buf_byte(&cs->val, c)) p->oom = true;
            if (cs->vkind == V_ARGS && cs->vtype != '"') args_bytes(p, &c, 1);
            if (cs->vtype == '"') {
                if (cs->esc) cs->esc = false;
                else if (c == '\\') cs->esc = true;
                else if (c == '"' && cs->val.n > 1 && !value_done(p)) return cs->st = CS_BAD;
            } else if (cs->vtype == '{') {
                if (cs->in_str) {
                    if (cs->esc) cs->esc = false;
                    else if (c == '\\') cs->esc = true;
                    else if (c == '"') cs->in_str = false;
                } else if (c == '"') {
                    cs->in_str = true;
                } else if (c == '{' || c == '[') {
                    cs->depth++;
                } else if ((c == '}' || c == ']') && --cs->depth == 0 && !value_done(p)) {
                    return cs->st = CS_BAD;
                }
            }
            return cs->st;
        case CS_AFTER:
            if (is_ws(c)) return cs->st;
            if (c == ',') return cs->st = CS_KEY;
            if (c == '}') return cs->st = CS_DONE;
            return cs->st = CS_BAD;
        default: return cs->st;
        }
    }
}

/* The call ended (its closing brace read). */
static void call_finished(gram_tool_parser *p) {
    if (!p->begun) return; /* no name: handled by the caller as malformed */
    if (!p->cs.have_args) emit(p, OUT_ARGS, "{}", 2);
    end_call(p, true);
}

/* ---------------------------------------------------------------------------
 * Formats
 * ------------------------------------------------------------------------- */

static void feed_byte(gram_tool_parser *p, char c);

/* Gives the held call text back as content and goes on as content. */
static void give_back(gram_tool_parser *p, int mode) {
    if (p->begun) {
        end_call(p, false);
    } else {
        emit(p, OUT_CONTENT, p->raw.p, p->raw.n);
    }
    p->raw.n = 0;
    p->mode = mode;
}

/* Content that may hold a marker: returns true when the marker completed.
 * Bytes that can no longer start the marker go out as content. */
static bool scan_marker(gram_tool_parser *p, char c, const char *tag) {
    size_t tl = strlen(tag);
    if (p->after_call && p->pend.n == 0 && is_ws(c)) {
        /* whitespace right after a call: held, dropped if another call follows */
        if (!buf_byte(&p->raw, c)) p->oom = true;
        return false;
    }
    if (p->after_call && p->raw.n && p->pend.n == 0 && c != tag[0]) {
        emit(p, OUT_CONTENT, p->raw.p, p->raw.n);
        p->raw.n = 0;
        p->after_call = false;
    }
    if (!buf_byte(&p->pend, c)) p->oom = true;
    for (;;) {
        if (p->pend.n <= tl && memcmp(p->pend.p, tag, p->pend.n) == 0) {
            if (p->pend.n == tl) {
                p->pend.n = 0;
                p->raw.n = 0;
                p->after_call = false;
                if (!buf_put(&p->raw, tag, tl)) p->oom = true;
                return true;
            }
            return false;
        }
        /* the first held byte cannot start the marker */
        if (p->after_call && p->raw.n) {
            emit(p, OUT_CONTENT, p->raw.p, p->raw.n);
            p->raw.n = 0;
        }
        p->after_call = false;
        emit(p, OUT_CONTENT, p->pend.p, 1);
        memmove(p->pend.p, p->pend.p + 1, p->pend.n - 1);
        p->pend.n--;
        if (p->pend.n == 0) return false;
    }
}

/* The text ended inside a call (max_tokens, or an end token the model
 * chose there): the call is dropped, neither a call nor content (a begun
 * one, whose start was reported, ends incomplete). */
static void drop_unfinished(gram_tool_parser *p) {
    if (p->begun) end_call(p, false);
    p->raw.n = 0;
    p->mode = M_CONTENT;
}

static void feed_call(gram_tool_parser *p, char c, int next_mode, int bad_mode) {
    if (!buf_byte(&p->raw, c)) p->oom = true;
    int st = cs_feed(p, c);
    if (st == CS_DONE) {
        if (!p->begun) {
            give_back(p, bad_mode);
            return;
        }
        call_finished(p);
        p->raw.n = 0;
        p->pend.n = 0;
        p->after_call = next_mode == M_CONTENT;
        p->mode = next_mode;
    } else if (st == CS_BAD) {
        p->raw.n--; /* c is not part of the call */
        give_back(p, bad_mode);
        feed_byte(p, c);
    }
}

static void feed_hermes(gram_tool_parser *p, char c) {
    switch (p->mode) {
    case M_CONTENT:
        if (scan_marker(p, c, TAG_HERMES)) {
            cs_reset(p, false);
            p->mode = M_CALL;
        }
        break;
    case M_CALL: feed_call(p, c, M_CLOSE, M_CONTENT); break;
    case M_CLOSE: {
        /* whitespace, then the closing tag; anything else is content */
        if (p->pend.n == 0 && is_ws(c)) break;
        if (!buf_byte(&p->pend, c)) p->oom = true;
        size_t tl = sizeof TAG_HERMES_END - 1;
        if (p->pend.n <= tl && memcmp(p->pend.p, TAG_HERMES_END, p->pend.n) == 0) {
            if (p->pend.n == tl) {
                p->pend.n = 0;
                p->raw.n = 0;
                p->after_call = true;
                p->mode = M_CONTENT;
            }
            break;
        }
        /* no closing tag: what was held is content */
        size_t n = p->pend.n;
        char *held = malloc(n);
        if (!held) {
            p->oom = true;
            break;
        }
        memcpy(held, p->pend.p, n);
        p->pend.n = 0;
        p->raw.n = 0;
        p->after_call = false;
        p->mode = M_CONTENT;
        for (size_t i = 0; i < n; i++) feed_byte(p, held[i]);
        free(held);
        break;
    }
    }
}

static void feed_llama3(gram_tool_parser *p, char c) {
    switch (p->mode) {
    case M_START:
    case M_BETWEEN: {
        /* whitespace, an optional <|python_tag|> (start only), ';' between calls, then '{' */
        if (!buf_byte(&p->raw, c)) p->oom = true;
        const char *r = p->raw.p;
        size_t n = p->raw.n, i = 0;
        while (i < n && is_ws(r[i])) i++;
        if (p->mode == M_START) {
            size_t tl = sizeof TAG_PYTHON - 1, m = n - i < tl ? n - i : tl;
            if (m > 0 && memcmp(r + i, TAG_PYTHON, m) == 0) {
                if (n - i < tl) break; /* still a prefix */
                i += tl;
                while (i < n && is_ws(r[i])) i++;
            }
        } else if (i < n && r[i] == ';') {
            i++;
            while (i < n && is_ws(r[i])) i++;
        }
        if (i == n) break;
        if (r[i] == '{' && i == n - 1) {
            /* a call starts: scan it from its brace */
            size_t keep = n;
            char *held = malloc(keep);
            if (!held) {
                p->oom = true;
                break;
            }
            memcpy(held, r, keep);
            cs_reset(p, false);
            p->raw.n = 0;
            if (!buf_put(&p->raw, held, keep - 1)) p->oom = true;
            free(held);
            p->mode = M_CALL;
            feed_call(p, c, M_BETWEEN, M_CONTENT_ONLY);
            break;
        }
        /* anything else: the rest of the output is content (after calls: dropped whitespace aside) */
        if (p->mode == M_BETWEEN) {
            while (n > 0 && is_ws(r[0])) r++, n--;
        }
        emit(p, OUT_CONTENT, r, n);
        p->raw.n = 0;
        p->mode = M_CONTENT_ONLY;
        break;
    }
    case M_CALL: feed_call(p, c, M_BETWEEN, M_CONTENT_ONLY); break;
    default: emit(p, OUT_CONTENT, &c, 1); break;
    }
}

static void feed_mistral(gram_tool_parser *p, char c) {
    switch (p->mode) {
    case M_CONTENT:
        if (scan_marker(p, c, TAG_MISTRAL)) p->mode = M_AFTER_TAG;
        break;
    case M_AFTER_TAG:
        if (!buf_byte(&p->raw, c)) p->oom = true;
        if (is_ws(c)) break;
        if (c == '[') {
            p->mode = M_ARRAY_ELEM;
        } else if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-') {
            p->name.n = 0;
            if (!buf_byte(&p->name, c)) p->oom = true;
            p->mode = M_NAME;
        } else {
            p->raw.n--;
            give_back(p, M_CONTENT);
            feed_byte(p, c);
        }
        break;
    case M_ARRAY_ELEM:
        if (is_ws(c)) {
            if (!buf_byte(&p->raw, c)) p->oom = true;
            break;
        }
        if (c == ']') {
            p->raw.n = 0;
            p->after_call = true;
            p->mode = M_CONTENT;
            break;
        }
        if (c == '{') {
            size_t n = p->raw.n;
            cs_reset(p, false);
            p->raw.n = n;
            p->mode = M_CALL;
            feed_call(p, c, M_ARRAY_SEP, M_CONTENT);
            break;
        }
        give_back(p, M_CONTENT);
        feed_byte(p, c);
        break;
    case M_CALL: feed_call(p, c, p->cs.args_only ? M_CONTENT : M_ARRAY_SEP, M_CONTENT); break;
    case M_ARRAY_SEP:
        if (is_ws(c)) break;
        if (c == ',') {
            p->raw.n = 0;
            p->mode = M_ARRAY_ELEM;
        } else if (c == ']') {
            p->raw.n = 0;
            p->after_call = true;
            p->mode = M_CONTENT;
        } else {
            p->after_call = false;
            p->mode = M_CONTENT;
            feed_byte(p, c);
        }
        break;
    case M_NAME:
        if (!buf_byte(&p->raw, c)) p->oom = true;
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '.') {
            if (!buf_byte(&p->name, c)) p->oom = true;
        } else if (c == '[') {
            p->pend.n = 0;
            if (!buf_byte(&p->pend, c)) p->oom = true;
            p->mode = M_ARGS_TAG;
        } else {
            p->raw.n--;
            give_back(p, M_CONTENT);
            feed_byte(p, c);
        }
        break;
    case M_ARGS_TAG: {
        if (!buf_byte(&p->raw, c)) p->oom = true;
        if (!buf_byte(&p->pend, c)) p->oom = true;
        size_t tl = sizeof TAG_ARGS - 1;
        if (p->pend.n <= tl && memcmp(p->pend.p, TAG_ARGS, p->pend.n) == 0) {
            if (p->pend.n == tl) {
                p->pend.n = 0;
                size_t n = p->raw.n;
                cs_reset(p, true);
                p->raw.n = n;
                begin_call(p);
                p->mode = M_CALL;
            }
            break;
        }
        p->pend.n = 0;
        p->raw.n--;
        give_back(p, M_CONTENT);
        feed_byte(p, c);
        break;
    }
    }
}

static void feed_byte(gram_tool_parser *p, char c) {
    switch (p->fmt) {
    case GRAM_TOOLS_HERMES: feed_hermes(p, c); break;
    case GRAM_TOOLS_LLAMA3_JSON: feed_llama3(p, c); break;
    case GRAM_TOOLS_MISTRAL: feed_mistral(p, c); break;
    }
}

/* ---------------------------------------------------------------------------
 * Interface
 * ------------------------------------------------------------------------- */

gram_tool_parser *gram_tool_parser_new(gram_tool_format fmt, uint64_t id_seed) {
    gram_tool_parser *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->fmt = fmt;
    p->seed = id_seed;
    p->mode = fmt == GRAM_TOOLS_LLAMA3_JSON ? M_START : M_CONTENT;
    return p;
}

void gram_tool_parser_free(gram_tool_parser *p) {
    if (!p) return;
    free(p->pend.p);
    free(p->raw.p);
    free(p->cs.key.p);
    free(p->cs.val.p);
    free(p->name.p);
    free(p->args_wait.p);
    free(p->out.p);
    free(p);
}

int gram_tool_parser_feed(gram_tool_parser *p, const char *text, size_t len, gram_tool_event_fn fn, void *user) {
    p->fn = fn;
    p->user = user;
    for (size_t i = 0; i < len; i++) feed_byte(p, text[i]);
    flush_out(p);
    return p->oom ? -1 : 0;
}

int gram_tool_parser_finish(gram_tool_parser *p, gram_tool_event_fn fn, void *user) {
    p->fn = fn;
    p->user = user;
    switch (p->mode) {
    case M_CONTENT:
        if (!p->after_call) emit(p, OUT_CONTENT, p->raw.p, p->raw.n);
        emit(p, OUT_CONTENT, p->pend.p, p->pend.n);
        break;
    case M_START: emit(p, OUT_CONTENT, p->raw.p, p->raw.n); break;
    case M_CALL:
        if (p->cs.st == CS_INVAL && p->cs.vtype == 's' && value_done(p) && p->cs.st == CS_DONE) {
            call_finished(p); /* bare scalar arguments ended by the text's end */
            break;
        }
        drop_unfinished(p);
        break;
    case M_AFTER_TAG:
    case M_ARRAY_ELEM:
    case M_NAME:
    case M_ARGS_TAG: drop_unfinished(p); break;
    default: break; /* after complete calls: held whitespace or a partial closing tag is dropped */
    }
    p->pend.n = 0;
    p->raw.n = 0;
    flush_out(p);
    return p->oom ? -1 : 0;
}
