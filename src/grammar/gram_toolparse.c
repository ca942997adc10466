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
 *   qwen3_coder  content <tool_call>\n<function=NAME>\n<parameter=P>\nVALUE\n
 *                </parameter>\n</function>\n</tool_call> (Qwen3-Coder, Qwen3.5)
 *   glm45        content <tool_call>NAME\n<arg_key>P</arg_key>\n<arg_value>VALUE
 *                </arg_value>\n</tool_call> (GLM-4.5/4.6/4.7)
 *   pythonic     [f(a=1, b="x"), g()] (Llama 3.2, Llama 4; the whole output is
 *                calls, or it is all content)
 *   deepseek_v3  content <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>
 *                NAME\n```json\n{...}\n```<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>
 *                (DeepSeek-V3, R1; V3.1's NAME<｜tool▁sep｜>{...} too)
 *   kimi_k2      content <|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:0
 *                <|tool_call_argument_begin|>{...}<|tool_call_end|>...
 *                <|tool_calls_section_end|> (Kimi-K2; that id is the call's id)
 *   openai       the harmony format's messages (gpt-oss): gram_harmony.c
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
 * The XML-like formats (qwen3_coder, glm45) carry each parameter as text;
 * its JSON value comes from the parameter's type in the request's tools, as
 * vLLM converts it (gram_xml_value_kind, gram_pyvalue.c), and the arguments
 * stream one parameter at a time as json.dumps writes them. Pythonic calls
 * are Python literals, written the same way; a pythonic call is reported
 * whole at its ")", so a list that is not calls stays content.
 *
 * What it is not for: forcing calls (gram_tools.c builds that grammar).
 */
#define _POSIX_C_SOURCE 200809L /* strdup, clock_gettime */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/gram_internal.h"

typedef gram_text buf;

static bool buf_put(buf *b, const char *s, size_t n) { return gram_text_put(b, s, n); }
static bool buf_byte(buf *b, char c) { return gram_text_put(b, &c, 1); }

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
       M_NAME, M_ARGS_TAG,
       /* qwen3_coder */
       M_Q_OPEN, M_Q_NAME, M_Q_BODY, M_Q_PNAME, M_Q_VALUE, M_Q_CLOSE,
       /* glm45 */
       M_G_NAME, M_G_BODY, M_G_KEY, M_G_BETWEEN, M_G_VALUE,
       /* pythonic */
       M_P_LIST, M_P_NAME, M_P_PAREN, M_P_ARGS, M_P_KW, M_P_EQ, M_P_VALUE, M_P_AFTER_CALL, M_P_END,
       /* deepseek_v3 */
       M_D_SECTION, M_D_TYPE, M_D_AFTER_SEP, M_D_NAME, M_D_FENCE, M_D_ARGS, M_D_CLOSE,
       /* kimi_k2 */
       M_K_SECTION, M_K_ID, M_K_ARGS, M_K_CLOSE };

/* Where a Python value ends (pythonic): brackets and strings. */
typedef struct py_scan {
    int depth;
    char q;       /* the quote of the string being read, or of the quotes just seen */
    int open;     /* 1 or 2 quotes seen outside a string (a third opens a triple-quoted one) */
    bool in_str, triple, esc;
    int run;      /* quotes in a row inside a triple-quoted string */
} py_scan;

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
    char id[264];       /* the current call's id (Kimi-K2 writes its own, up to 255 bytes) */
    bool own_id;        /* id is the model's (kimi_k2), not made */
    /* the XML-like and pythonic formats */
    json_t *tools;      /* the request's tools (parameter types), or NULL */
    buf key, val;       /* the parameter being read */
    buf call_args;      /* pythonic: the arguments of the call being read (reported whole) */
    int n_args;         /* arguments written in the current call */
    py_scan py;
    bool tag_seen;      /* pythonic: <|python_start|> / <|python_end|> read */
    gram_harmony *harmony; /* openai: the harmony reader does all the work */
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

static void id_chars(uint64_t seed, int n_calls, int n, char *out) {
    static const char alnum[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    uint64_t x = seed ^ ((uint64_t)(n_calls + 1) * 0xD1B54A32D192ED03ULL);
    for (int i = 0; i < n; i++) out[i] = alnum[splitmix(&x) % 62];
    out[n] = 0;
}

void gram_call_id(uint64_t seed, int n_calls, char *out) {
    memcpy(out, "call_", 5);
    id_chars(seed, n_calls, 24, out + 5);
}

static void make_id(gram_tool_parser *p) {
    if (p->own_id) return; /* the model wrote it (kimi_k2) */
    if (p->fmt == GRAM_TOOLS_MISTRAL) id_chars(p->seed, p->n_calls, 9, p->id); /* as its templates require */
    else gram_call_id(p->seed, p->n_calls, p->id);
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

/* After a complete call, text other than what may follow it (held in
 * pend, c included): it is content. */
static void refeed_held(gram_tool_parser *p) {
    size_t n = p->pend.n;
    char *held = malloc(n ? n : 1);
    if (!held) {
        p->oom = true;
        return;
    }
    memcpy(held, p->pend.p, n);
    p->pend.n = 0;
    p->raw.n = 0;
    p->after_call = false;
    p->mode = M_CONTENT;
    for (size_t i = 0; i < n; i++) feed_byte(p, held[i]);
    free(held);
}

/* After a call: whitespace, then its closing tag; anything else is content. */
static void feed_close(gram_tool_parser *p, char c, const char *tag) {
    if (p->pend.n == 0 && is_ws(c)) return;
    if (!buf_byte(&p->pend, c)) p->oom = true;
    size_t tl = strlen(tag);
    if (p->pend.n <= tl && memcmp(p->pend.p, tag, p->pend.n) == 0) {
        if (p->pend.n == tl) {
            p->pend.n = 0;
            p->raw.n = 0;
            p->after_call = true;
            p->mode = M_CONTENT;
        }
        return;
    }
    refeed_held(p); /* no closing tag: what was held is content */
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
    case M_CLOSE: feed_close(p, c, TAG_HERMES_END); break;
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

/* ---------------------------------------------------------------------------
 * What the newer formats share: literal markers, arguments written one by
 * one, parameter types from the request's tools
 * ------------------------------------------------------------------------- */

enum { LIT_WAIT = -1, LIT_FAIL = -2 };

/* The held bytes (pend, c appended) against tags[0..n): the index of the
 * tag they complete, LIT_WAIT while they begin one, else LIT_FAIL. */
static int expect_lit(gram_tool_parser *p, char c, const char *const *tags, int n) {
    if (!buf_byte(&p->pend, c)) p->oom = true;
    bool prefix = false;
    for (int i = 0; i < n; i++) {
        size_t tl = strlen(tags[i]);
        if (p->pend.n <= tl && memcmp(p->pend.p, tags[i], p->pend.n) == 0) {
            if (p->pend.n == tl) {
                p->pend.n = 0;
                return i;
            }
            prefix = true;
        }
    }
    return prefix ? LIT_WAIT : LIT_FAIL;
}

/* Text up to the first of tags[0..n): bytes that cannot begin a tag go to
 * sink. The index of the tag completed by c, else LIT_WAIT. */
static int text_until(gram_tool_parser *p, char c, const char *const *tags, int n, buf *sink) {
    if (!buf_byte(&p->pend, c)) p->oom = true;
    for (;;) {
        bool prefix = false;
        for (int i = 0; i < n; i++) {
            size_t tl = strlen(tags[i]);
            if (p->pend.n <= tl && memcmp(p->pend.p, tags[i], p->pend.n) == 0) {
                if (p->pend.n == tl) {
                    p->pend.n = 0;
                    return i;
                }
                prefix = true;
            }
        }
        if (prefix || p->pend.n == 0) return LIT_WAIT;
        if (!buf_byte(sink, p->pend.p[0])) p->oom = true;
        memmove(p->pend.p, p->pend.p + 1, p->pend.n - 1);
        p->pend.n--;
    }
}

/* c (the last byte of raw) made the call being read malformed: it is given
 * back as content, or ends incomplete when begun, and c is read again. */
static void malformed(gram_tool_parser *p, char c, int mode) {
    p->pend.n = 0;
    if (p->raw.n) p->raw.n--;
    give_back(p, mode);
    feed_byte(p, c);
}

/* Whitespace off both ends, in place. */
static void trim_buf(buf *b) {
    size_t a = 0, n = b->n;
    while (a < n && is_ws(b->p[a])) a++;
    while (n > a && is_ws(b->p[n - 1])) n--;
    if (a) memmove(b->p, b->p + a, n - a);
    b->n = n - a;
    if (b->p) b->p[b->n] = 0;
}

static bool is_ident_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static bool is_ident_char(char c) { return is_ident_start(c) || (c >= '0' && c <= '9'); }

/* Names longer than this are not names (the text is given back). */
#define NAME_MAX_BYTES 256

/* The schema of parameter pname of function fname in the request's tools
 * (NULL: no tools, no such function or parameter). */
static json_t *tool_param(const gram_tool_parser *p, const char *fname, const char *pname) {
    for (size_t i = 0; p->tools && i < json_array_size(p->tools); i++) {
        json_t *t = json_array_get(p->tools, i), *f = json_object_get(t, "function");
        if (!json_is_object(f)) f = t;
        json_t *name = json_object_get(f, "name");
        if (!json_is_string(name) || strcmp(json_string_value(name), fname) != 0) continue;
        return json_object_get(json_object_get(json_object_get(f, "parameters"), "properties"), pname);
    }
    return NULL;
}

gram_xml_kind gram_xml_value_kind(gram_tool_format fmt, json_t *prop, bool *allows_null, json_t **str_branch) {
    *allows_null = false;
    *str_branch = prop;
    if (fmt != GRAM_TOOLS_QWEN3_CODER) {
        /* glm45: only a schema of type "string" keeps the text as it is */
        json_t *t = json_object_get(prop, "type");
        return json_is_string(t) && strcmp(json_string_value(t), "string") == 0 ? GRAM_XML_STRING : GRAM_XML_JSON;
    }
    if (!json_is_object(prop)) return GRAM_XML_STRING; /* not described: the text */
    /* Python's str(type).strip().lower(); a list of types is none of the names below */
    char type[32] = "string";
    json_t *t = json_object_get(prop, "type"), *any = json_object_get(prop, "anyOf");
    if (t) {
        snprintf(type, sizeof type, "%s", json_is_string(t) ? json_string_value(t) : "[?]");
        *allows_null = strcmp(type, "null") == 0;
    } else if (json_is_array(any)) {
        /* the first member that is not null decides; a null member allows null */
        bool picked = false;
        for (size_t i = 0; i < json_array_size(any); i++) {
            json_t *m = json_array_get(any, i), *mt = json_object_get(m, "type");
            if (!mt) continue;
            const char *name = json_is_string(mt) ? json_string_value(mt) : "[?]";
            if (strcmp(name, "null") == 0) {
                *allows_null = true;
            } else if (!picked) {
                snprintf(type, sizeof type, "%s", name);
                *str_branch = m;
                picked = true;
            }
        }
    }
    for (char *c = type; *c; c++)
        if (*c >= 'A' && *c <= 'Z') *c |= 0x20;
    static const char *const strings[] = {"string", "str", "text", "varchar", "char", "enum"};
    for (size_t i = 0; i < sizeof strings / sizeof strings[0]; i++)
        if (strcmp(type, strings[i]) == 0) return GRAM_XML_STRING;
    static const char *const ints[] = {"int", "uint", "long", "short", "unsigned"};
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
        if (strncmp(type, ints[i], strlen(ints[i])) == 0) return GRAM_XML_INT;
    if (strncmp(type, "num", 3) == 0 || strncmp(type, "float", 5) == 0) return GRAM_XML_NUMBER;
    if (strcmp(type, "boolean") == 0 || strcmp(type, "bool") == 0 || strcmp(type, "binary") == 0) return GRAM_XML_BOOL;
    if (strcmp(type, "object") == 0 || strcmp(type, "array") == 0 || strcmp(type, "arr") == 0 ||
        strncmp(type, "dict", 4) == 0 || strncmp(type, "list", 4) == 0)
        return GRAM_XML_JSON;
    return GRAM_XML_LITERAL;
}

static bool lower_is(const char *s, size_t n, const char *w) {
    if (strlen(w) != n) return false;
    for (size_t i = 0; i < n; i++)
        if ((s[i] >= 'A' && s[i] <= 'Z' ? s[i] | 0x20 : s[i]) != w[i]) return false;
    return true;
}

/* A value read as a JSON string that holds a Python literal (a container
 * written as json.dumps(str(value))) is read once more, as vLLM does. */
static void literal_inside(gram_text *out, size_t mark) {
    if (out->n <= mark || out->p[mark] != '"') return;
    json_t *s = json_loadb(out->p + mark, out->n - mark, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
    gram_text again = {0};
    if (json_is_string(s) && gram_py_literal(json_string_value(s), json_string_length(s), &again) == 0) {
        out->n = mark;
        gram_text_put(out, again.p, again.n);
    }
    gram_text_free(&again);
    json_decref(s);
}

/* qwen3_coder: a parameter's text as vLLM's Qwen3CoderToolParser converts
 * it by the parameter's schema type (a string stays the text; "null" /
 * "None" is null unless the type is a string; numbers, booleans, objects
 * and arrays parsed; what does not parse stays a string). */
static void qwen3_value(gram_tool_parser *p, const char *v, size_t n, gram_text *out) {
    bool nullable;
    json_t *branch;
    gram_xml_kind k = gram_xml_value_kind(GRAM_TOOLS_QWEN3_CODER, tool_param(p, p->name.p, p->key.p ? p->key.p : ""),
                                          &nullable, &branch);
    bool is_null = lower_is(v, n, "null") || lower_is(v, n, "none");
    if (is_null && (nullable || k != GRAM_XML_STRING)) {
        gram_text_put(out, "null", 4);
        return;
    }
    size_t mark = out->n;
    switch (k) {
    case GRAM_XML_STRING: break;
    case GRAM_XML_INT:
        if (gram_py_int(v, n, out) == 0) return;
        break;
    case GRAM_XML_NUMBER:
        if (gram_py_number(v, n, out) == 0) return;
        break;
    case GRAM_XML_BOOL: gram_text_put(out, lower_is(v, n, "true") ? "true" : "false", lower_is(v, n, "true") ? 4 : 5); return;
    case GRAM_XML_JSON:
        if (gram_py_json(v, n, out) == 0 || gram_py_literal(v, n, out) == 0) {
            literal_inside(out, mark);
            return;
        }
        break;
    case GRAM_XML_LITERAL:
        if (gram_py_literal(v, n, out) == 0) return;
        break;
    }
    gram_py_json_string(out, v, n);
}

/* glm45: vLLM's Glm4MoeModelToolParser: a parameter whose schema type is
 * "string" is the text; any other is json.loads, else ast.literal_eval,
 * else the text, all of the text without its outer whitespace. */
static void glm45_value(gram_tool_parser *p, const char *v, size_t n, gram_text *out) {
    bool nullable;
    json_t *branch;
    if (gram_xml_value_kind(GRAM_TOOLS_GLM45, tool_param(p, p->name.p, p->key.p ? p->key.p : ""), &nullable, &branch) ==
        GRAM_XML_STRING) {
        gram_py_json_string(out, v, n);
        return;
    }
    while (n && is_ws(*v)) v++, n--;
    while (n && is_ws(v[n - 1])) n--;
    if (gram_py_json(v, n, out) == 0 || gram_py_literal(v, n, out) == 0) return;
    gram_py_json_string(out, v, n);
}

/* Appends `"key": value` (after ", " past the first) to the arguments. */
static void put_arg(gram_tool_parser *p, gram_text *to, const char *k, size_t kn, const gram_text *val) {
    gram_text piece = {0};
    if (p->n_args++) gram_text_put(&piece, ", ", 2);
    gram_py_json_string(&piece, k, kn);
    gram_text_put(&piece, ": ", 2);
    gram_text_put(&piece, val->p, val->n);
    if (piece.oom || val->oom) p->oom = true;
    if (to) {
        if (!gram_text_put(to, piece.p, piece.n)) p->oom = true;
    } else {
        args_bytes(p, piece.p, piece.n);
    }
    gram_text_free(&piece);
}

/* The parameter in key / val is read: its value is written as an argument. */
static void xml_arg(gram_tool_parser *p) {
    trim_buf(&p->key);
    const char *v = p->val.p ? p->val.p : "";
    size_t n = p->val.n;
    gram_text j = {0};
    if (p->fmt == GRAM_TOOLS_QWEN3_CODER) {
        /* the template writes "\n" VALUE "\n": one newline off each end */
        if (n && v[0] == '\n') v++, n--;
        if (n && v[n - 1] == '\n') n--;
        qwen3_value(p, v, n, &j);
    } else {
        glm45_value(p, v, n, &j);
    }
    put_arg(p, NULL, p->key.p ? p->key.p : "", p->key.n, &j);
    gram_text_free(&j);
    p->key.n = p->val.n = 0;
}

static void xml_call_begin(gram_tool_parser *p) {
    cs_reset(p, true);
    begin_call(p);
    args_bytes(p, "{", 1);
    p->n_args = 0;
    p->raw.n = 0; /* a begun call is never given back */
}

static void xml_call_end(gram_tool_parser *p) {
    args_bytes(p, "}", 1);
    end_call(p, true);
    p->raw.n = 0;
    p->pend.n = 0;
}

/* ---------------------------------------------------------------------------
 * qwen3_coder: <tool_call>\n<function=NAME>\n<parameter=P>\nVALUE\n</parameter>\n
 * </function>\n</tool_call> (Qwen3-Coder, Qwen3.5). A value ends at
 * </parameter>, or where the next <parameter= or </function> begins.
 * ------------------------------------------------------------------------- */

static const char Q_FUNC[] = "<function=", Q_FUNC_END[] = "</function>", Q_PARAM[] = "<parameter=",
                  Q_PARAM_END[] = "</parameter>";

static void feed_qwen3(gram_tool_parser *p, char c) {
    static const char *const open_tags[] = {Q_FUNC}, *const body_tags[] = {Q_PARAM, Q_FUNC_END},
                             *const value_tags[] = {Q_PARAM_END, Q_PARAM, Q_FUNC_END};
    if (p->mode != M_CONTENT && p->mode != M_Q_CLOSE && !buf_byte(&p->raw, c)) p->oom = true;
    switch (p->mode) {
    case M_CONTENT:
        if (scan_marker(p, c, TAG_HERMES)) {
            cs_reset(p, false);
            p->mode = M_Q_OPEN;
        }
        break;
    case M_Q_OPEN:
        if (p->pend.n == 0 && is_ws(c)) break;
        switch (expect_lit(p, c, open_tags, 1)) {
        case LIT_WAIT: break;
        case LIT_FAIL: malformed(p, c, M_CONTENT); break;
        default: p->mode = M_Q_NAME;
        }
        break;
    case M_Q_NAME:
        if (c == '>') {
            trim_buf(&p->name);
            if (p->name.n == 0) {
                malformed(p, c, M_CONTENT);
                break;
            }
            xml_call_begin(p);
            p->mode = M_Q_BODY;
        } else if (c == '\n' || c == '<' || p->name.n >= NAME_MAX_BYTES) {
            malformed(p, c, M_CONTENT);
        } else if (!buf_byte(&p->name, c)) {
            p->oom = true;
        }
        break;
    case M_Q_BODY:
        if (p->pend.n == 0 && is_ws(c)) break;
        switch (expect_lit(p, c, body_tags, 2)) {
        case LIT_WAIT: break;
        case LIT_FAIL: malformed(p, c, M_CONTENT); break;
        case 0: p->mode = M_Q_PNAME; break;
        default:
            xml_call_end(p);
            p->mode = M_Q_CLOSE;
        }
        break;
    case M_Q_PNAME:
        if (c == '>') p->mode = M_Q_VALUE;
        else if (c == '\n' || c == '<' || p->key.n >= NAME_MAX_BYTES) malformed(p, c, M_CONTENT);
        else if (!buf_byte(&p->key, c)) p->oom = true;
        break;
    case M_Q_VALUE: {
        int t = text_until(p, c, value_tags, 3, &p->val);
        if (t == LIT_WAIT) break;
        xml_arg(p);
        if (t == 0) {
            p->mode = M_Q_BODY;
        } else if (t == 1) {
            p->mode = M_Q_PNAME;
        } else {
            xml_call_end(p);
            p->mode = M_Q_CLOSE;
        }
        break;
    }
    case M_Q_CLOSE: feed_close(p, c, TAG_HERMES_END); break;
    }
}

/* ---------------------------------------------------------------------------
 * glm45: <tool_call>NAME\n<arg_key>K</arg_key>\n<arg_value>V</arg_value>\n
 * </tool_call> (GLM-4.5, 4.6; 4.7 writes no newlines, also read). Space
 * before the first call is dropped with it (vLLM gives no content then).
 * ------------------------------------------------------------------------- */

static const char G_KEY[] = "<arg_key>", G_KEY_END[] = "</arg_key>", G_VAL[] = "<arg_value>", G_VAL_END[] = "</arg_value>";

static void glm45_name_done(gram_tool_parser *p, char c) {
    trim_buf(&p->name);
    if (p->name.n == 0) {
        malformed(p, c, M_CONTENT);
        return;
    }
    xml_call_begin(p);
}

static void feed_glm45(gram_tool_parser *p, char c) {
    static const char *const name_tags[] = {G_KEY, TAG_HERMES_END}, *const key_end[] = {G_KEY_END},
                             *const val_open[] = {G_VAL}, *const val_end[] = {G_VAL_END};
    if (p->mode != M_CONTENT && !buf_byte(&p->raw, c)) p->oom = true;
    switch (p->mode) {
    case M_CONTENT:
        if (scan_marker(p, c, TAG_HERMES)) {
            cs_reset(p, false);
            p->mode = M_G_NAME;
        }
        break;
    case M_G_NAME: {
        if (c == '\n') { /* the name's line ends */
            if (!buf_put(&p->name, p->pend.p, p->pend.n)) p->oom = true;
            p->pend.n = 0;
            glm45_name_done(p, c);
            if (p->begun) p->mode = M_G_BODY;
            break;
        }
        int t = text_until(p, c, name_tags, 2, &p->name);
        if (t == LIT_WAIT) {
            if (p->name.n >= NAME_MAX_BYTES) malformed(p, c, M_CONTENT);
            break;
        }
        glm45_name_done(p, c);
        if (!p->begun) break;
        if (t == 0) {
            p->mode = M_G_KEY;
        } else {
            xml_call_end(p);
            p->after_call = true;
            p->mode = M_CONTENT;
        }
        break;
    }
    case M_G_BODY:
        if (p->pend.n == 0 && is_ws(c)) break;
        switch (expect_lit(p, c, name_tags, 2)) {
        case LIT_WAIT: break;
        case LIT_FAIL: malformed(p, c, M_CONTENT); break;
        case 0: p->mode = M_G_KEY; break;
        default:
            xml_call_end(p);
            p->after_call = true;
            p->mode = M_CONTENT;
        }
        break;
    case M_G_KEY:
        if (text_until(p, c, key_end, 1, &p->key) == 0) p->mode = M_G_BETWEEN;
        else if (p->key.n >= NAME_MAX_BYTES) malformed(p, c, M_CONTENT);
        break;
    case M_G_BETWEEN:
        if (p->pend.n == 0 && is_ws(c)) break;
        switch (expect_lit(p, c, val_open, 1)) {
        case LIT_WAIT: break;
        case LIT_FAIL: malformed(p, c, M_CONTENT); break;
        default: p->mode = M_G_VALUE;
        }
        break;
    case M_G_VALUE:
        if (text_until(p, c, val_end, 1, &p->val) == 0) {
            xml_arg(p);
            p->mode = M_G_BODY;
        }
        break;
    }
}

/* ---------------------------------------------------------------------------
 * pythonic: [f(a=1, b="x"), g()] (Llama 3.2, Llama 4 with an optional
 * <|python_start|> ... <|python_end|>). The whole output is calls, or it
 * is content, as in vLLM; arguments are Python literals (read as
 * ast.literal_eval does, a sign on a number allowed). A call is reported
 * whole once its ")" is read, so a malformed one is still content.
 * ------------------------------------------------------------------------- */

static const char TAG_PY_START[] = "<|python_start|>", TAG_PY_END[] = "<|python_end|>";

/* Feeds c to the value being read; true when c ends it (a ',' or ')'
 * outside brackets and strings; c is then not part of it). */
static bool py_value_byte(gram_tool_parser *p, char c) {
    py_scan *s = &p->py;
    for (;;) {
        if (s->open) { /* quotes seen outside a string */
            if (c == s->q) {
                if (++s->open == 3) {
                    s->open = 0;
                    s->in_str = s->triple = true;
                    s->run = 0;
                    s->esc = false;
                }
                break;
            }
            bool empty = s->open == 2; /* "" then something else */
            s->open = 0;
            if (!empty) {
                s->in_str = true;
                s->triple = s->esc = false;
            }
            continue; /* c read again, inside or after the string */
        }
        if (s->in_str) {
            if (s->esc) {
                s->esc = false;
                s->run = 0;
            } else if (c == '\\') {
                s->esc = true;
                s->run = 0;
            } else if (c == s->q) {
                if (!s->triple || ++s->run == 3) s->in_str = false;
            } else {
                s->run = 0;
            }
            break;
        }
        if (s->depth == 0 && (c == ',' || c == ')')) return true;
        if (c == '"' || c == '\'') {
            s->q = c;
            s->open = 1;
        } else if (c == '(' || c == '[' || c == '{') {
            s->depth++;
        } else if ((c == ')' || c == ']' || c == '}') && s->depth > 0) {
            s->depth--;
        }
        break;
    }
    if (!buf_byte(&p->val, c)) p->oom = true;
    return false;
}

/* Not a call after all: what was held (raw) is content, and so is the rest. */
static void py_fail(gram_tool_parser *p) {
    p->pend.n = 0;
    give_back(p, M_CONTENT_ONLY);
}

static void py_call_done(gram_tool_parser *p) {
    cs_reset(p, true);
    begin_call(p);
    args_bytes(p, "{", 1);
    args_bytes(p, p->call_args.p, p->call_args.n);
    args_bytes(p, "}", 1);
    end_call(p, true);
    p->raw.n = 0;
    p->mode = M_P_AFTER_CALL;
}

static void feed_pythonic(gram_tool_parser *p, char c) {
    if (p->mode == M_CONTENT_ONLY) {
        emit(p, OUT_CONTENT, &c, 1);
        return;
    }
    if (!buf_byte(&p->raw, c)) p->oom = true;
    switch (p->mode) {
    case M_START: {
        /* whitespace, an optional <|python_start|>, then '[' */
        const char *r = p->raw.p;
        size_t n = p->raw.n, i = 0, tl = sizeof TAG_PY_START - 1;
        while (i < n && is_ws(r[i])) i++;
        size_t m = n - i < tl ? n - i : tl;
        if (m > 0 && memcmp(r + i, TAG_PY_START, m) == 0) {
            if (n - i < tl) break; /* still a prefix */
            i += tl;
            while (i < n && is_ws(r[i])) i++;
        }
        if (i == n) break;
        if (r[i] == '[' && i == n - 1) {
            p->mode = M_P_LIST;
            break;
        }
        py_fail(p);
        break;
    }
    case M_P_LIST:
        if (is_ws(c)) break;
        if (!is_ident_start(c)) {
            py_fail(p);
            break;
        }
        p->name.n = 0;
        if (!buf_byte(&p->name, c)) p->oom = true;
        p->mode = M_P_NAME;
        break;
    case M_P_NAME:
    case M_P_PAREN:
        if (p->mode == M_P_NAME && is_ident_char(c) && p->name.n < NAME_MAX_BYTES) {
            if (!buf_byte(&p->name, c)) p->oom = true;
        } else if (is_ws(c)) {
            p->mode = M_P_PAREN;
        } else if (c == '(') {
            p->call_args.n = 0;
            p->n_args = 0;
            p->mode = M_P_ARGS;
        } else {
            py_fail(p);
        }
        break;
    case M_P_ARGS:
        if (is_ws(c)) break;
        if (c == ')') {
            py_call_done(p);
        } else if (is_ident_start(c)) {
            /* keywords only: vLLM drops positional arguments, which have no name */
            p->key.n = 0;
            if (!buf_byte(&p->key, c)) p->oom = true;
            p->mode = M_P_KW;
        } else {
            py_fail(p);
        }
        break;
    case M_P_KW:
    case M_P_EQ:
        if (p->mode == M_P_KW && is_ident_char(c) && p->key.n < NAME_MAX_BYTES) {
            if (!buf_byte(&p->key, c)) p->oom = true;
        } else if (is_ws(c)) {
            p->mode = M_P_EQ;
        } else if (c == '=') {
            p->val.n = 0;
            memset(&p->py, 0, sizeof p->py);
            p->mode = M_P_VALUE;
        } else {
            py_fail(p);
        }
        break;
    case M_P_VALUE: {
        if (!py_value_byte(p, c)) break;
        gram_text j = {0};
        if (gram_py_literal(p->val.p ? p->val.p : "", p->val.n, &j) != 0) {
            gram_text_free(&j);
            py_fail(p);
            break;
        }
        put_arg(p, &p->call_args, p->key.p, p->key.n, &j);
        gram_text_free(&j);
        if (c == ',') p->mode = M_P_ARGS;
        else py_call_done(p);
        break;
    }
    case M_P_AFTER_CALL:
        if (is_ws(c)) break;
        if (c == ',') {
            p->mode = M_P_LIST;
        } else if (c == ']') {
            p->raw.n = 0;
            p->tag_seen = false;
            p->mode = M_P_END;
        } else {
            /* not a list of calls after all: the rest is content (the calls stay) */
            const char *r = p->raw.p;
            size_t n = p->raw.n;
            while (n && is_ws(*r)) r++, n--;
            emit(p, OUT_CONTENT, r, n);
            p->raw.n = 0;
            p->mode = M_CONTENT_ONLY;
        }
        break;
    case M_P_END: {
        /* after the list: whitespace and one <|python_end|> are dropped;
         * anything else is content from there on */
        const char *r = p->raw.p;
        size_t n = p->raw.n, i = 0, tl = sizeof TAG_PY_END - 1;
        while (i < n && is_ws(r[i])) i++;
        if (i == n) break;
        size_t m = n - i < tl ? n - i : tl;
        if (!p->tag_seen && memcmp(r + i, TAG_PY_END, m) == 0) {
            if (n - i == tl) {
                p->tag_seen = true;
                p->raw.n = 0;
            }
            break;
        }
        emit(p, OUT_CONTENT, r + i, n - i);
        p->raw.n = 0;
        p->mode = M_CONTENT_ONLY;
        break;
    }
    }
}

/* ---------------------------------------------------------------------------
 * deepseek_v3: <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME
 * \n```json\n{...}\n```<｜tool▁call▁end｜>...<｜tool▁calls▁end｜> (DeepSeek-V3,
 * R1); also DeepSeek-V3.1's <｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}
 * <｜tool▁call▁end｜>: after the separator, a '{' says the text before it
 * was the name.
 * ------------------------------------------------------------------------- */

static const char D_CALLS[] = GRAM_DS_CALLS, D_CALLS_END[] = GRAM_DS_CALLS_END, D_CALL[] = GRAM_DS_CALL,
                  D_CALL_END[] = GRAM_DS_CALL_END, D_SEP[] = GRAM_DS_SEP;

/* The calls section ended: back to content. */
static void section_done(gram_tool_parser *p) {
    p->raw.n = 0;
    p->pend.n = 0;
    p->after_call = true;
    p->mode = M_CONTENT;
}

/* The arguments' JSON (a call begun): -1 malformed, 1 done, 0 more. */
static int args_byte(gram_tool_parser *p, char c) {
    int st = cs_feed(p, c);
    if (st == CS_BAD) return -1;
    if (st != CS_DONE) return 0;
    call_finished(p);
    p->raw.n = 0;
    p->pend.n = 0;
    return 1;
}

static void feed_deepseek(gram_tool_parser *p, char c) {
    static const char *const section_tags[] = {D_CALL, D_CALLS_END}, *const close_tags[] = {D_CALL_END, D_CALLS_END},
                             *const sep[] = {D_SEP};
    if (p->mode != M_CONTENT && !buf_byte(&p->raw, c)) p->oom = true;
    switch (p->mode) {
    case M_CONTENT:
        if (scan_marker(p, c, D_CALLS)) p->mode = M_D_SECTION;
        break;
    case M_D_SECTION:
    case M_D_CLOSE:
        /* between calls: whitespace (after a call also its closing fence) */
        if (p->pend.n == 0 && (is_ws(c) || (p->mode == M_D_CLOSE && c == '`'))) break;
        switch (expect_lit(p, c, p->mode == M_D_CLOSE ? close_tags : section_tags, 2)) {
        case LIT_WAIT: break;
        case LIT_FAIL:
            if (p->mode == M_D_CLOSE) refeed_held(p); /* the call is complete: the rest is content */
            else malformed(p, c, M_CONTENT);
            break;
        case 0:
            if (p->mode == M_D_CLOSE) {
                p->raw.n = 0;
                p->mode = M_D_SECTION;
            } else {
                cs_reset(p, false);
                p->mode = M_D_TYPE;
            }
            break;
        default: section_done(p);
        }
        break;
    case M_D_TYPE:
        if (c == '\n' || p->name.n >= NAME_MAX_BYTES) {
            malformed(p, c, M_CONTENT);
            break;
        }
        if (text_until(p, c, sep, 1, &p->name) == 0) p->mode = M_D_AFTER_SEP;
        break;
    case M_D_AFTER_SEP:
        if (c == '{') { /* V3.1: the name came before the separator */
            trim_buf(&p->name);
            if (p->name.n == 0) {
                malformed(p, c, M_CONTENT);
                break;
            }
            cs_reset(p, true);
            begin_call(p);
            p->mode = M_D_ARGS;
            if (args_byte(p, c) < 0) malformed(p, c, M_CONTENT);
            break;
        }
        if (c == '\n' || c == '<') {
            malformed(p, c, M_CONTENT);
            break;
        }
        p->name.n = 0; /* V3: that was the type ("function"); the name follows */
        if (!buf_byte(&p->name, c)) p->oom = true;
        p->mode = M_D_NAME;
        break;
    case M_D_NAME:
        if (c == '\n') {
            trim_buf(&p->name);
            cs_reset(p, true);
            begin_call(p);
            p->mode = M_D_FENCE;
        } else if (c == '<' || p->name.n >= NAME_MAX_BYTES) {
            malformed(p, c, M_CONTENT);
        } else if (!buf_byte(&p->name, c)) {
            p->oom = true;
        }
        break;
    case M_D_FENCE:
        /* ```json and the line's end before the arguments */
        if (c == '`' || is_ws(c) || (c >= 'a' && c <= 'z')) break;
        p->mode = M_D_ARGS;
        /* fall through */
    case M_D_ARGS: {
        int r = args_byte(p, c);
        if (r < 0) malformed(p, c, M_CONTENT);
        else if (r > 0) p->mode = M_D_CLOSE;
        break;
    }
    }
}

/* ---------------------------------------------------------------------------
 * kimi_k2: <|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:IDX
 * <|tool_call_argument_begin|>{...}<|tool_call_end|>...<|tool_calls_section_end|>
 * (Kimi-K2). The model's own "functions.NAME:IDX" is the call's id, as vLLM
 * sends it; the name is what lies between the last '.' and the ':'.
 * ------------------------------------------------------------------------- */

static const char K_SECTION[] = GRAM_KIMI_SECTION, K_SECTION_END[] = GRAM_KIMI_SECTION_END, K_CALL[] = GRAM_KIMI_CALL,
                  K_ARGS[] = GRAM_KIMI_ARGS, K_CALL_END[] = GRAM_KIMI_CALL_END;

/* The id read (key): NAME from "[PREFIX.]NAME:DIGITS"; false if it is not one. */
static bool kimi_id(gram_tool_parser *p) {
    trim_buf(&p->key);
    const char *id = p->key.p ? p->key.p : "";
    size_t n = p->key.n, d = n;
    while (d > 0 && id[d - 1] >= '0' && id[d - 1] <= '9') d--;
    if (d == n || d < 2 || id[d - 1] != ':' || n >= sizeof p->id) return false;
    const char *colon = memchr(id, ':', n), *start = id;
    for (const char *q = id; q < colon; q++)
        if (*q == '.') start = q + 1;
    if (colon == start) return false;
    p->name.n = 0;
    if (!buf_put(&p->name, start, (size_t)(colon - start))) p->oom = true;
    memcpy(p->id, id, n);
    p->id[n] = 0;
    return true;
}

static void feed_kimi(gram_tool_parser *p, char c) {
    static const char *const section_tags[] = {K_CALL, K_SECTION_END}, *const close_tags[] = {K_CALL_END, K_SECTION_END},
                             *const args_tag[] = {K_ARGS};
    if (p->mode != M_CONTENT && !buf_byte(&p->raw, c)) p->oom = true;
    switch (p->mode) {
    case M_CONTENT:
        if (scan_marker(p, c, K_SECTION)) p->mode = M_K_SECTION;
        break;
    case M_K_SECTION:
    case M_K_CLOSE:
        if (p->pend.n == 0 && is_ws(c)) break;
        switch (expect_lit(p, c, p->mode == M_K_CLOSE ? close_tags : section_tags, 2)) {
        case LIT_WAIT: break;
        case LIT_FAIL:
            if (p->mode == M_K_CLOSE) refeed_held(p);
            else malformed(p, c, M_CONTENT);
            break;
        case 0:
            if (p->mode == M_K_CLOSE) {
                p->raw.n = 0;
                p->mode = M_K_SECTION;
            } else {
                cs_reset(p, false);
                p->key.n = 0;
                p->mode = M_K_ID;
            }
            break;
        default: section_done(p);
        }
        break;
    case M_K_ID:
        if (text_until(p, c, args_tag, 1, &p->key) == 0) {
            if (!kimi_id(p)) {
                malformed(p, c, M_CONTENT);
                break;
            }
            cs_reset(p, true);
            p->own_id = true;
            begin_call(p);
            p->own_id = false;
            p->mode = M_K_ARGS;
        } else if (p->key.n >= sizeof p->id) {
            malformed(p, c, M_CONTENT);
        }
        break;
    case M_K_ARGS: {
        int r = args_byte(p, c);
        if (r < 0) malformed(p, c, M_CONTENT);
        else if (r > 0) p->mode = M_K_CLOSE;
        break;
    }
    }
}

static void feed_byte(gram_tool_parser *p, char c) {
    switch (p->fmt) {
    case GRAM_TOOLS_HERMES: feed_hermes(p, c); break;
    case GRAM_TOOLS_LLAMA3_JSON: feed_llama3(p, c); break;
    case GRAM_TOOLS_MISTRAL: feed_mistral(p, c); break;
    case GRAM_TOOLS_QWEN3_CODER: feed_qwen3(p, c); break;
    case GRAM_TOOLS_PYTHONIC: feed_pythonic(p, c); break;
    case GRAM_TOOLS_DEEPSEEK_V3: feed_deepseek(p, c); break;
    case GRAM_TOOLS_GLM45: feed_glm45(p, c); break;
    case GRAM_TOOLS_KIMI_K2: feed_kimi(p, c); break;
    case GRAM_TOOLS_OPENAI: break; /* gram_harmony.c */
    }
}

/* ---------------------------------------------------------------------------
 * Interface
 * ------------------------------------------------------------------------- */

gram_tool_parser *gram_tool_parser_new_with_tools(gram_tool_format fmt, uint64_t id_seed, const char *tools,
                                                  size_t tools_len) {
    gram_tool_parser *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->fmt = fmt;
    p->seed = id_seed;
    if (fmt == GRAM_TOOLS_OPENAI && !(p->harmony = gram_harmony_new(id_seed))) {
        free(p);
        return NULL;
    }
    p->mode = fmt == GRAM_TOOLS_LLAMA3_JSON || fmt == GRAM_TOOLS_PYTHONIC ? M_START : M_CONTENT;
    /* GLM: whitespace before the first call goes with it (vLLM's content is then null) */
    p->after_call = fmt == GRAM_TOOLS_GLM45;
    if (tools && (fmt == GRAM_TOOLS_QWEN3_CODER || fmt == GRAM_TOOLS_GLM45)) {
        p->tools = json_loadb(tools, tools_len ? tools_len : strlen(tools), 0, NULL);
        if (!json_is_array(p->tools)) { /* unreadable: parameters are read without their types */
            json_decref(p->tools);
            p->tools = NULL;
        }
    }
    return p;
}

gram_tool_parser *gram_tool_parser_new(gram_tool_format fmt, uint64_t id_seed) {
    return gram_tool_parser_new_with_tools(fmt, id_seed, NULL, 0);
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
    free(p->key.p);
    free(p->val.p);
    free(p->call_args.p);
    json_decref(p->tools);
    gram_harmony_free(p->harmony);
    free(p);
}

int gram_tool_parser_feed(gram_tool_parser *p, const char *text, size_t len, gram_tool_event_fn fn, void *user) {
    if (p->harmony) return gram_harmony_feed(p->harmony, text, len, fn, user);
    p->fn = fn;
    p->user = user;
    for (size_t i = 0; i < len; i++) feed_byte(p, text[i]);
    flush_out(p);
    return p->oom ? -1 : 0;
}

int gram_tool_parser_finish(gram_tool_parser *p, gram_tool_event_fn fn, void *user) {
    if (p->harmony) return gram_harmony_finish(p->harmony, fn, user);
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
    case M_ARGS_TAG:
    case M_Q_OPEN:
    case M_Q_NAME:
    case M_Q_BODY:
    case M_Q_PNAME:
    case M_Q_VALUE:
    case M_G_NAME:
    case M_G_BODY:
    case M_G_KEY:
    case M_G_BETWEEN:
    case M_G_VALUE:
    case M_D_SECTION:
    case M_D_TYPE:
    case M_D_AFTER_SEP:
    case M_D_NAME:
    case M_D_FENCE:
    case M_D_ARGS:
    case M_K_SECTION:
    case M_K_ID:
    case M_K_ARGS: drop_unfinished(p); break;
    default: break; /* after complete calls: held whitespace or a partial closing tag is dropped */
    }
    p->pend.n = 0;
    p->raw.n = 0;
    flush_out(p);
    return p->oom ? -1 : 0;
}
