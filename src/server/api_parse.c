/*
 * api_parse.c - request bodies -> validated generation requests or
 * OpenAI-style errors.
 *
 * Defaults and limits follow vLLM's OpenAI server: completions default to
 * max_tokens 16, chat to "whatever the context leaves"; temperature defaults
 * to 1; a prompt that cannot fit the context with its max_tokens is a 400
 * with code context_length_exceeded. Every message names the field (param)
 * and the value that was refused.
 */
#define _POSIX_C_SOURCE 200809L
#include "server/api_parse.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/reasoning.h"
#include "engine/stop_match.h"

int srv_api_fail(srv_api_error *err, int status, const char *param, const char *fmt, ...) {
    if (!err) return -1;
    err->status = status;
    err->type = status >= 500 ? "server_error" : "invalid_request_error";
    err->code = NULL;
    snprintf(err->param, sizeof err->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    return -1;
}

#define BAD(param, ...) srv_api_fail(err, 400, param, __VA_ARGS__)

/* ---- JSON body ------------------------------------------------------------ */

int srv_check_body_size(size_t len, size_t limit, srv_api_error *err) {
    if (limit == 0) limit = SRV_MAX_BODY_DEFAULT;
    if (len <= limit) return 0;
    srv_api_fail(err, 413, NULL, "the request body has %zu bytes; the limit is %zu", len, limit);
    err->code = "request_too_large";
    return -1;
}

/* Where in a request a string may hold NUL (\u0000): the text a model
 * reads, which is carried with its length from here to the tokenizer, as
 * generated text holding NUL is carried back out (the server writes it as
 * \u0000, and vLLM takes it in, Python strings being counted). Elsewhere
 * (names, roles, ids, stop strings, schemas, ...) a C string is meant. */
typedef enum nul_place {
    NUL_NO = 0,   /* NUL refused */
    NUL_TOP,      /* the body */
    NUL_PROMPT,   /* "prompt": a string, or a list of them (or of ids) */
    NUL_PROMPTS,  /* "prompt"[i] */
    NUL_MESSAGES, /* "messages" */
    NUL_MESSAGE,  /* "messages"[i] */
    NUL_CONTENT,  /* "messages"[i]."content": a string, or a list of parts */
    NUL_PART,     /* "messages"[i]."content"[k] */
    NUL_TEXT,     /* "messages"[i]."content"[k]."text", "input_extra"[i]."text" */
    NUL_EXTRAS,   /* "input_extra" (/infill) */
    NUL_EXTRA,    /* "input_extra"[i] */
} nul_place;

static nul_place nul_child(nul_place at, const char *key) {
    switch (at) {
    case NUL_TOP:
        if (!key) return NUL_NO;
        /* the prompt, and the text around a hole (fill-in-the-middle) */
        if (strcmp(key, "prompt") == 0 || strcmp(key, "suffix") == 0 || strcmp(key, "input_prefix") == 0 ||
            strcmp(key, "input_suffix") == 0)
            return NUL_PROMPT;
        return strcmp(key, "messages") == 0 ? NUL_MESSAGES : strcmp(key, "input_extra") == 0 ? NUL_EXTRAS : NUL_NO;
    case NUL_EXTRAS: return key ? NUL_NO : NUL_EXTRA;
    case NUL_EXTRA: return key && strcmp(key, "text") == 0 ? NUL_TEXT : NUL_NO;
    case NUL_PROMPT: return key ? NUL_NO : NUL_PROMPTS;
    case NUL_MESSAGES: return key ? NUL_NO : NUL_MESSAGE;
    case NUL_MESSAGE: return key && strcmp(key, "content") == 0 ? NUL_CONTENT : NUL_NO;
    case NUL_CONTENT: return key ? NUL_NO : NUL_PART;
    case NUL_PART: return key && strcmp(key, "text") == 0 ? NUL_TEXT : NUL_NO;
    default: return NUL_NO;
    }
}

/* Whether a string under v holds NUL where text may not; path (cap bytes)
 * then names it ("messages[1].role"). */
static bool nul_misplaced(const json_t *v, nul_place at, char *path, size_t cap) {
    if (json_is_string(v)) {
        bool text = at == NUL_PROMPT || at == NUL_PROMPTS || at == NUL_CONTENT || at == NUL_TEXT;
        return !text && memchr(json_string_value(v), '\0', json_string_length(v)) != NULL;
    }
    size_t n = strlen(path);
    if (json_is_array(v)) {
        size_t i;
        const json_t *e;
        json_array_foreach(v, i, e) {
            snprintf(path + n, cap - n, "[%zu]", i);
            if (nul_misplaced(e, nul_child(at, NULL), path, cap)) return true;
        }
    } else if (json_is_object(v)) {
        const char *key;
        json_t *e;
        json_object_foreach((json_t *)v, key, e) {
            snprintf(path + n, cap - n, "%s%.64s", n ? "." : "", key);
            if (nul_misplaced(e, nul_child(at, key), path, cap)) return true;
        }
    }
    path[n] = '\0';
    return false;
}

int srv_check_nul(const json_t *body, srv_api_error *err) {
    char path[256] = "";
    if (!nul_misplaced(body, NUL_TOP, path, sizeof path)) return 0;
    return BAD(path, "'%s' holds a NUL character (\\u0000); only the text of a prompt, a suffix or a message may",
               path);
}

int srv_parse_json(const char *body, size_t len, size_t limit, json_t **out, srv_api_error *err) {
    *out = NULL;
    if (srv_check_body_size(len, limit, err)) return -1;
    if (len == 0) return BAD(NULL, "the request body is empty; expected a JSON object");
    json_error_t je;
    json_t *o = json_loadb(body, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &je);
    if (!o)
        return BAD(NULL, "the request body is not valid JSON: %s (line %d, column %d)", je.text, je.line, je.column);
    if (!json_is_object(o)) {
        json_decref(o);
        return BAD(NULL, "the request body must be a JSON object");
    }
    if (srv_check_nul(o, err)) {
        json_decref(o);
        return -1;
    }
    *out = o;
    return 0;
}

int srv_check_model(const srv_parse_ctx *c, const json_t *body, srv_api_error *err) {
    const json_t *m = json_object_get(body, "model");
    if (!m || json_is_null(m)) return 0;
    if (!json_is_string(m)) return BAD("model", "'model' must be a string");
    if (strcmp(json_string_value(m), c->model_name) == 0) return 0;
    if (c->model_known && c->model_known(c->model_known_user, json_string_value(m))) return 0;
    srv_api_fail(err, 404, "model", "The model `%.200s` does not exist. This server serves `%.200s`.",
                 json_string_value(m), c->model_name);
    err->code = "model_not_found";
    return -1;
}

/* ---- typed fields ----------------------------------------------------------
 * Each getter leaves *out alone when the field is absent or null, and
 * returns -1 with a 400 naming the field when it has the wrong type or lies
 * outside its range. */

static const char *type_name(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    default: return "null";
    }
}

static const json_t *field(const json_t *o, const char *key) {
    const json_t *v = json_object_get(o, key);
    return v && !json_is_null(v) ? v : NULL;
}

static int get_bool(const json_t *o, const char *key, bool *out, srv_api_error *err) {
    const json_t *v = field(o, key);
    if (!v) return 0;
    if (!json_is_boolean(v)) return BAD(key, "'%s' must be a boolean, got %s", key, type_name(v));
    *out = json_is_true(v);
    return 0;
}

/* An integer (a number with no fraction counts, as pydantic does). */
static int get_int(const json_t *o, const char *key, long long lo, long long hi, long long *out, bool *given,
                   srv_api_error *err) {
    const json_t *v = field(o, key);
    if (!v) return 0;
    long long x;
    if (json_is_integer(v)) {
        x = json_integer_value(v);
    } else if (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)) &&
               fabs(json_real_value(v)) < 9e18) {
        x = (long long)json_real_value(v);
    } else {
        return BAD(key, "'%s' must be an integer, got %s", key, type_name(v));
    }
    if (x < lo || x > hi) return BAD(key, "'%s' must be between %lld and %lld, got %lld", key, lo, hi, x);
    *out = x;
    if (given) *given = true;
    return 0;
}

static int get_num(const json_t *o, const char *key, double lo, double hi, bool lo_open, double *out,
                   srv_api_error *err) {
    const json_t *v = field(o, key);
    if (!v) return 0;
    if (!json_is_number(v)) return BAD(key, "'%s' must be a number, got %s", key, type_name(v));
    double x = json_number_value(v);
    if (!isfinite(x) || x < lo || x > hi || (lo_open && x == lo))
        return BAD(key, "'%s' must be %s %g and <= %g, got %g", key, lo_open ? ">" : ">=", lo, hi, x);
    *out = x;
    return 0;
}

/* ---- prompts -------------------------------------------------------------- */

static int tokenize_text(const srv_parse_ctx *c, const char *text, size_t len, bool add_special, int32_t **ids,
                         size_t *n, const char *param, srv_api_error *err) {
    pdl_error pe;
    /* special-token text ("<|im_start|>") is its token, as vLLM's and
     * llama-server's prompts are tokenized */
    unsigned flags = PDL_TOK_PARSE_SPECIAL | (add_special ? PDL_TOK_ADD_SPECIAL : 0);
    if (pdl_tokenize_ex(c->model, text, len, flags, ids, n, &pe)) return BAD(param, "%s", pe.message);
    return 0;
}

static int ids_from_array(const srv_parse_ctx *c, const json_t *a, int32_t **ids, size_t *n, const char *param,
                          srv_api_error *err) {
    size_t len = json_array_size(a);
    if (len == 0) return BAD(param, "'%s' holds an empty list of token ids", param);
    int32_t *v = malloc(len * sizeof *v);
    if (!v) return srv_api_fail(err, 500, NULL, "out of memory");
    for (size_t i = 0; i < len; i++) {
        const json_t *t = json_array_get(a, i);
        if (!json_is_integer(t)) {
            free(v);
            return BAD(param, "'%s' must be a string, a list of strings, a list of token ids or a list of lists of "
                       "token ids; item %zu is %s", param, i, type_name(t));
        }
        json_int_t x = json_integer_value(t);
        if (x < 0 || x >= c->vocab) {
            free(v);
            return BAD(param, "token id %lld at position %zu is out of vocabulary (size %d)", (long long)x, i,
                       c->vocab);
        }
        v[i] = (int32_t)x;
    }
    *ids = v;
    *n = len;
    return 0;
}

static int add_prompt(srv_gen_request *r, srv_api_error *err) {
    srv_prompt *p = realloc(r->prompts, (size_t)(r->n_prompts + 1) * sizeof *p);
    if (!p) return srv_api_fail(err, 500, NULL, "out of memory");
    r->prompts = p;
    memset(&p[r->n_prompts++], 0, sizeof *p);
    return 0;
}

/* The prompt's text, NUL bytes included. */
static int copy_text(const json_t *str, srv_prompt *sp) {
    size_t n = json_string_length(str);
    if (!(sp->text = malloc(n + 1))) return -1;
    memcpy(sp->text, json_string_value(str), n);
    sp->text[n] = '\0';
    sp->text_len = n;
    return 0;
}

/* "prompt" (or /v1/embeddings' "input", name): a string, a list of strings, a
 * list of ids, or a list of lists of ids. */
static int parse_prompts_named(const srv_parse_ctx *c, const json_t *body, const char *name, srv_gen_request *r,
                               srv_api_error *err) {
    const json_t *p = json_object_get(body, name);
    if (!p || json_is_null(p)) return BAD(name, "'%s' is required", name);
    if (json_is_string(p)) {
        if (add_prompt(r, err)) return -1;
        srv_prompt *sp = &r->prompts[0];
        if (copy_text(p, sp)) return srv_api_fail(err, 500, NULL, "out of memory");
        return tokenize_text(c, json_string_value(p), json_string_length(p), true, &sp->ids, &sp->n_ids, name,
                             err);
    }
    if (!json_is_array(p)) return BAD(name, "'%s' must be a string, a list of strings or token ids, got %s", name,
                                      type_name(p));
    size_t n = json_array_size(p);
    if (n == 0) return BAD(name, "'%s' must not be an empty list", name);
    const json_t *first = json_array_get(p, 0);
    if (json_is_integer(first)) {
        if (add_prompt(r, err)) return -1;
        return ids_from_array(c, p, &r->prompts[0].ids, &r->prompts[0].n_ids, name, err);
    }
    if (n > SRV_MAX_SEQS) return BAD(name, "'%s' holds %zu prompts; at most %d are allowed", name, n, SRV_MAX_SEQS);
    for (size_t i = 0; i < n; i++) {
        const json_t *e = json_array_get(p, i);
        if (add_prompt(r, err)) return -1;
        srv_prompt *sp = &r->prompts[r->n_prompts - 1];
        if (json_is_string(e) && json_is_string(first)) {
            if (copy_text(e, sp)) return srv_api_fail(err, 500, NULL, "out of memory");
            if (tokenize_text(c, json_string_value(e), json_string_length(e), true, &sp->ids, &sp->n_ids, name,
                              err))
                return -1;
        } else if (json_is_array(e) && json_is_array(first)) {
            if (ids_from_array(c, e, &sp->ids, &sp->n_ids, name, err)) return -1;
        } else {
            return BAD(name, "'%s' must be a string, a list of strings, a list of token ids or a list of lists "
                       "of token ids; item %zu is %s", name, i, type_name(e));
        }
    }
    return 0;
}

static int parse_prompts(const srv_parse_ctx *c, const json_t *body, srv_gen_request *r, srv_api_error *err) {
    return parse_prompts_named(c, body, "prompt", r, err);
}

/* ---- chat messages -------------------------------------------------------- */

/* An assistant message's tool_calls: each call's "arguments" JSON text
 * becomes the object it encodes, as chat templates expect (they write it
 * with tojson), as vLLM does. */
static int tool_call_arguments_as_objects(json_t *msg, const char *param, srv_api_error *err) {
    json_t *calls = json_object_get(msg, "tool_calls");
    if (!calls || json_is_null(calls)) return 0;
    if (!json_is_array(calls)) return BAD(param, "'%s.tool_calls' must be a list", param);
    size_t i;
    json_t *call;
    json_array_foreach(calls, i, call) {
        json_t *fn = json_is_object(call) ? json_object_get(call, "function") : NULL;
        if (!json_is_object(fn) || !json_is_string(json_object_get(fn, "name")))
            return BAD(param, "'%s.tool_calls[%zu]' must be {\"id\", \"type\": \"function\", \"function\": "
                       "{\"name\", \"arguments\"}}", param, i);
        json_t *args = json_object_get(fn, "arguments");
        if (!json_is_string(args)) continue;
        json_error_t je;
        json_t *obj = json_loadb(json_string_value(args), json_string_length(args), JSON_DECODE_ANY, &je);
        if (!obj)
            return BAD(param, "'%s.tool_calls[%zu].function.arguments' is not valid JSON: %s (column %d)", param, i,
                       je.text, je.column);
        json_object_set_new(fn, "arguments", obj);
    }
    return 0;
}

/* A harmony (gpt-oss) assistant message's reasoning, as an OpenAI client
 * sends it back ("reasoning_content", or vLLM's "reasoning"), goes to the
 * template as "thinking": the field gpt-oss's template renders as the
 * analysis message before a tool call, as llama.cpp passes it. A message
 * with its own "thinking" keeps it. */
static void harmony_thinking_field(json_t *msg) {
    const char *role = json_string_value(json_object_get(msg, "role"));
    if (!role || strcmp(role, "assistant") != 0 || json_object_get(msg, "thinking")) return;
    json_t *r = json_object_get(msg, "reasoning_content");
    if (!json_is_string(r)) r = json_object_get(msg, "reasoning");
    if (json_is_string(r)) json_object_set(msg, "thinking", r);
}

/* A tool message's tool_call_id must be the id of a call in an earlier
 * assistant message's tool_calls, as OpenAI requires: a result the model
 * cannot tie to a call is a client error, not something to render (vLLM
 * passes any id to the template). A tool message without one goes to the
 * template as it is; templates that need ids refuse it there. */
static int check_tool_call_ids(const json_t *msgs, srv_api_error *err) {
    json_t *seen = json_object(); /* ids of the calls so far, as keys */
    if (!seen) return srv_api_fail(err, 500, NULL, "out of memory");
    int rc = 0;
    size_t i;
    const json_t *m;
    json_array_foreach(msgs, i, m) {
        const char *role = json_string_value(json_object_get(m, "role"));
        const json_t *id = json_object_get(m, "tool_call_id");
        if (role && strcmp(role, "tool") == 0 && id && !json_is_null(id)) {
            char param[64];
            snprintf(param, sizeof param, "messages[%zu].tool_call_id", i);
            if (!json_is_string(id)) {
                rc = BAD(param, "'%s' must be a string, got %s", param, type_name(id));
                break;
            }
            if (!json_object_get(seen, json_string_value(id))) {
                rc = BAD(param, "'%s' is '%.64s%s', which is the id of no tool call in an earlier assistant message "
                         "(their 'tool_calls[].id')", param, json_string_value(id),
                         json_string_length(id) > 64 ? "..." : "");
                break;
            }
        }
        const json_t *calls = json_object_get(m, "tool_calls");
        if (!role || strcmp(role, "assistant") != 0 || !json_is_array(calls)) continue;
        size_t k;
        const json_t *call;
        json_array_foreach(calls, k, call) {
            const json_t *cid = json_object_get(call, "id");
            if (json_is_string(cid) && json_object_set(seen, json_string_value(cid), json_true()) != 0) {
                rc = srv_api_fail(err, 500, NULL, "out of memory");
                break;
            }
        }
        if (rc) break;
    }
    json_decref(seen);
    return rc;
}

/* The images of a chat request's image_url parts, in order. */
typedef struct chat_images {
    pdl_image **img;
    int n;
} chat_images;

static void chat_images_free(chat_images *ci) {
    for (int i = 0; i < ci->n; i++) pdl_image_free(ci->img[i]);
    free(ci->img);
    ci->img = NULL, ci->n = 0;
}

/* An image_url part: its image decoded into ci; the model's placeholder
 * text (what its chat template writes per image) in *placeholder. */
static int image_part(const srv_parse_ctx *c, const json_t *part, const char *param, size_t k, chat_images *ci,
                      const char **placeholder, srv_api_error *err) {
    if (!c->vision)
        return BAD(param, "'%s.content[%zu]': this model takes no images (start the server with a vision-language "
                   "model, or --mmproj FILE beside a GGUF model)", param, k);
    const json_t *iu = json_object_get(part, "image_url");
    const json_t *url = json_is_object(iu) ? json_object_get(iu, "url") : iu;
    if (!json_is_string(url))
        return BAD(param, "'%s.content[%zu].image_url' must be {\"url\": \"data:image/...;base64,...\"}", param, k);
    if (ci->n >= 16) return BAD(param, "'%s.content[%zu]': at most 16 images per request", param, k);
    pdl_image **grown = realloc(ci->img, (size_t)(ci->n + 1) * sizeof *grown);
    if (!grown) return srv_api_fail(err, 500, NULL, "out of memory");
    ci->img = grown;
    pdl_error pe;
    if (pdl_image_from_url(&ci->img[ci->n], json_string_value(url), json_string_length(url), c->allowed_media_path,
                           &pe))
        return BAD(param, "'%s.content[%zu].image_url': %s", param, k, pe.message);
    ci->n++;
    pdl_vision_info vi;
    pdl_vision_get_info(c->vision, &vi);
    *placeholder = vi.placeholder;
    return 0;
}

/* The messages with every content reduced to a string (text parts joined by
 * newlines, as vLLM's "string" content format), ready for a template; an
 * image_url part becomes the model's image placeholder ("<image>") in the
 * text and its image goes to ci (NULL: image parts are refused). */
static int normalize_messages(const srv_parse_ctx *c, const json_t *body, json_t **out, chat_images *ci,
                              srv_api_error *err) {
    const json_t *msgs = json_object_get(body, "messages");
    if (!msgs || json_is_null(msgs)) return BAD("messages", "'messages' is required");
    if (!json_is_array(msgs)) return BAD("messages", "'messages' must be a list, got %s", type_name(msgs));
    if (json_array_size(msgs) == 0) return BAD("messages", "'messages' must not be empty");
    json_t *norm = json_array();
    if (!norm) return srv_api_fail(err, 500, NULL, "out of memory");
    size_t i;
    const json_t *m;
    json_array_foreach(msgs, i, m) {
        char param[64];
        snprintf(param, sizeof param, "messages[%zu]", i);
        if (!json_is_object(m)) {
            json_decref(norm);
            return BAD(param, "'%s' must be an object with 'role' and 'content', got %s", param, type_name(m));
        }
        const json_t *role = json_object_get(m, "role");
        if (!json_is_string(role) || json_string_length(role) == 0) {
            json_decref(norm);
            return BAD(param, "'%s.role' must be a non-empty string", param);
        }
        json_t *copy = json_deep_copy(m);
        if (!copy) {
            json_decref(norm);
            return srv_api_fail(err, 500, NULL, "out of memory");
        }
        json_array_append_new(norm, copy);
        if (tool_call_arguments_as_objects(copy, param, err)) {
            json_decref(norm);
            return -1;
        }
        if (c->harmony) harmony_thinking_field(copy);
        const json_t *content = json_object_get(m, "content");
        if (!content || json_is_null(content) || json_is_string(content)) continue;
        if (!json_is_array(content)) {
            json_decref(norm);
            return BAD(param, "'%s.content' must be a string or a list of content parts, got %s", param,
                       type_name(content));
        }
        size_t k;
        const json_t *part;
        char *joined = NULL;
        size_t jl = 0;
        json_array_foreach(content, k, part) {
            const json_t *type = json_object_get(part, "type");
            const json_t *text = json_object_get(part, "text");
            if (!json_is_object(part) || !json_is_string(type)) {
                free(joined);
                json_decref(norm);
                return BAD(param, "'%s.content[%zu]' must be an object with a 'type'", param, k);
            }
            const char *placeholder = NULL;
            if (strcmp(json_string_value(type), "image_url") == 0 && ci) {
                if (image_part(c, part, param, k, ci, &placeholder, err)) {
                    free(joined);
                    json_decref(norm);
                    return -1;
                }
                text = NULL;
            } else if (strcmp(json_string_value(type), "text") != 0) {
                BAD(param, "'%s.content[%zu]': content parts of type '%.64s' are not supported; this server takes "
                    "text and image_url", param, k, json_string_value(type));
                free(joined);
                json_decref(norm);
                return -1;
            }
            if (!placeholder && !json_is_string(text)) {
                free(joined);
                json_decref(norm);
                return BAD(param, "'%s.content[%zu].text' must be a string", param, k);
            }
            const char *ts = placeholder ? placeholder : json_string_value(text);
            size_t tl = placeholder ? strlen(placeholder) : json_string_length(text);
            char *p = realloc(joined, jl + tl + 2);
            if (!p) {
                free(joined);
                json_decref(norm);
                return srv_api_fail(err, 500, NULL, "out of memory");
            }
            joined = p;
            if (jl) joined[jl++] = '\n';
            memcpy(joined + jl, ts, tl);
            jl += tl;
        }
        json_object_set_new(copy, "content", json_stringn(joined ? joined : "", jl));
        free(joined);
    }
    if (check_tool_call_ids(msgs, err)) {
        json_decref(norm);
        return -1;
    }
    *out = norm;
    return 0;
}

/* The chat prompt's ids; with images (ci not NULL), the rendered text is
 * tokenized again with each image's rows where its placeholder is, and
 * ci / positions get the images and where their rows start. */
static int chat_prompt(const srv_parse_ctx *c, const json_t *body, int32_t **ids, size_t *n, char **text,
                       size_t *text_len, chat_images *ci, pdl_mm_input **positions, srv_api_error *err) {
    bool add_gen = true, cont = false;
    if (get_bool(body, "add_generation_prompt", &add_gen, err) ||
        get_bool(body, "continue_final_message", &cont, err))
        return -1;
    if (add_gen && cont)
        return BAD("continue_final_message", "'continue_final_message' and 'add_generation_prompt' cannot both be "
                   "true");
    const json_t *kw = json_object_get(body, "chat_template_kwargs");
    if (kw && !json_is_null(kw) && !json_is_object(kw))
        return BAD("chat_template_kwargs", "'chat_template_kwargs' must be an object, got %s", type_name(kw));
    json_t *msgs = NULL;
    if (normalize_messages(c, body, &msgs, ci, err)) return -1;
    if (!c->chat_prompt) {
        json_decref(msgs);
        return BAD("messages", "this model has no chat template; start the server with --chat-template FILE");
    }
    int rc = c->chat_prompt(c->chat_user, msgs, body, ids, n, text, text_len, err);
    json_decref(msgs);
    if (rc || !ci || ci->n == 0) return rc;
    pdl_vision_info vi;
    pdl_vision_get_info(c->vision, &vi);
    pdl_mm_prompt mm;
    pdl_error pe;
    if (pdl_mm_tokenize(c->model, c->vision, *text, *text_len, vi.placeholder,
                        (const pdl_image *const *)ci->img, ci->n, 0, &mm, &pe))
        return BAD("messages", "%s", pe.message);
    free(*ids);
    *ids = mm.ids, *n = mm.n_ids;
    *positions = mm.images;
    return 0;
}

/* ---- the request ---------------------------------------------------------- */

static int parse_stop(const json_t *body, srv_gen_request *r, int vocab, srv_api_error *err) {
    const json_t *v = field(body, "stop");
    if (v) {
        size_t n = json_is_string(v) ? 1 : json_is_array(v) ? json_array_size(v) : 0;
        if (!json_is_string(v) && !json_is_array(v))
            return BAD("stop", "'stop' must be a string or a list of strings, got %s", type_name(v));
        if (n > SRV_MAX_STOP) return BAD("stop", "'stop' holds %zu strings; at most %d are allowed", n, SRV_MAX_STOP);
        r->stop = calloc(n ? n : 1, sizeof *r->stop);
        if (!r->stop) return srv_api_fail(err, 500, NULL, "out of memory");
        for (size_t i = 0; i < n; i++) {
            const json_t *s = json_is_string(v) ? v : json_array_get(v, i);
            if (!json_is_string(s)) return BAD("stop", "'stop[%zu]' must be a string, got %s", i, type_name(s));
            if (json_string_length(s) == 0 || strlen(json_string_value(s)) != json_string_length(s))
                return BAD("stop", "'stop[%zu]' must be a non-empty string without NUL characters", i);
            if (json_string_length(s) > SRV_MAX_STOP_LEN)
                return BAD("stop", "'stop[%zu]' has %zu bytes; stop strings are limited to %d bytes", i,
                           json_string_length(s), SRV_MAX_STOP_LEN);
            if (!(r->stop[i] = strdup(json_string_value(s)))) return srv_api_fail(err, 500, NULL, "out of memory");
            r->params.n_stop = (int)i + 1;
        }
        r->params.stop = (const char *const *)r->stop;
        /* the matcher is built here, on the connection's thread, not on the
         * engine's (64 stop strings of 4 KiB are 256k trie nodes) */
        pdl_error pe;
        if (n > 0 && stop_matcher_new(&r->params.stop_matcher, r->params.stop, NULL, r->params.n_stop, &pe))
            return srv_api_fail(err, 500, NULL, "%s", pe.message);
    }
    v = field(body, "stop_token_ids");
    if (v) {
        if (!json_is_array(v)) return BAD("stop_token_ids", "'stop_token_ids' must be a list of token ids");
        size_t n = json_array_size(v);
        if (n > SRV_MAX_STOP)
            return BAD("stop_token_ids", "'stop_token_ids' holds %zu ids; at most %d are allowed", n, SRV_MAX_STOP);
        r->stop_ids = malloc((n ? n : 1) * sizeof *r->stop_ids);
        if (!r->stop_ids) return srv_api_fail(err, 500, NULL, "out of memory");
        for (size_t i = 0; i < n; i++) {
            const json_t *t = json_array_get(v, i);
            if (!json_is_integer(t) || json_integer_value(t) < 0 || json_integer_value(t) >= vocab)
                return BAD("stop_token_ids", "'stop_token_ids[%zu]' must be a token id in [0, %d)", i, vocab);
            r->stop_ids[i] = (int32_t)json_integer_value(t);
        }
        r->params.stop_ids = r->stop_ids;
        r->params.n_stop_ids = (int)n;
    }
    return 0;
}

static int bias_cmp(const void *a, const void *b) {
    const pdl_logit_bias *x = a, *y = b;
    return (x->token > y->token) - (x->token < y->token);
}

/* "logit_bias": {"token id": bias in [-100, 100], ...} (OpenAI; an empty
 * object is no bias). */
static int parse_logit_bias(const json_t *body, srv_gen_request *r, int vocab, srv_api_error *err) {
    const json_t *v = field(body, "logit_bias");
    if (!v) return 0;
    if (!json_is_object(v)) return BAD("logit_bias", "'logit_bias' must be an object mapping token ids to biases, got %s",
                                       type_name(v));
    size_t n = json_object_size(v);
    if (n == 0) return 0;
    if (n > SRV_MAX_LOGIT_BIAS)
        return BAD("logit_bias", "'logit_bias' has %zu entries; at most %d are allowed", n, SRV_MAX_LOGIT_BIAS);
    r->logit_bias = malloc(n * sizeof *r->logit_bias);
    if (!r->logit_bias) return srv_api_fail(err, 500, NULL, "out of memory");
    const char *key;
    const json_t *val;
    size_t i = 0;
    json_object_foreach((json_t *)v, key, val) {
        char *end;
        long long id = strtoll(key, &end, 10);
        if (!key[0] || *end || key[0] == '+' || key[0] == '-' || key[0] == ' ' || id < 0 || id >= vocab)
            return BAD("logit_bias", "'logit_bias' key '%.64s' must be a token id in [0, %d)", key, vocab);
        if (!json_is_number(val))
            return BAD("logit_bias", "'logit_bias[\"%.64s\"]' must be a number, got %s", key, type_name(val));
        double b = json_number_value(val);
        if (!(b >= -100 && b <= 100))
            return BAD("logit_bias", "'logit_bias[\"%.64s\"]' must be between -100 and 100, got %g", key, b);
        r->logit_bias[i++] = (pdl_logit_bias){.token = (int32_t)id, .bias = (float)b};
    }
    qsort(r->logit_bias, n, sizeof *r->logit_bias, bias_cmp);
    for (size_t k = 1; k < n; k++)
        if (r->logit_bias[k].token == r->logit_bias[k - 1].token)
            return BAD("logit_bias", "'logit_bias' names token %d twice", r->logit_bias[k].token);
    r->params.sampling.logit_bias = r->logit_bias;
    r->params.sampling.n_logit_bias = (int)n;
    return 0;
}

/* Fields that vLLM and OpenAI accept but this engine cannot honour: refused
 * with a message rather than ignored. */
static int refuse_unsupported(const json_t *body, int n, srv_api_error *err) {
    long long best_of = n;
    if (get_int(body, "best_of", 1, SRV_MAX_N, &best_of, NULL, err)) return -1;
    if (best_of != n) return BAD("best_of", "'best_of' other than n is not supported");
    return 0;
}

static int check_context(const srv_parse_ctx *c, const srv_gen_request *r, bool max_tokens_given,
                         srv_api_error *err) {
    for (int i = 0; i < r->n_prompts; i++) {
        size_t np = r->prompts[i].n_ids;
        const char *param = r->kind == SRV_API_CHAT         ? "messages"
                            : r->kind == SRV_API_INFILL     ? "input_prefix"
                            : r->kind == SRV_API_EMBEDDINGS ? "input"
                                                            : "prompt";
        if (np == 0) return BAD(param, "the prompt is empty (it encodes to no tokens)");
        if (!max_tokens_given) {
            if (np >= (size_t)c->ctx_len) {
                srv_api_fail(err, 400, param, "This model's maximum context length is %d tokens. However, your request "
                             "has %zu input tokens. Please reduce the length of the input.", c->ctx_len, np);
                err->code = "context_length_exceeded";
                return -1;
            }
        } else if (np + (size_t)r->params.max_tokens > (size_t)c->ctx_len) {
            srv_api_fail(err, 400, param, "This model's maximum context length is %d tokens. However, you requested %zu "
                         "tokens (%zu in the %s, %d in the completion). Please reduce the length of the %s or "
                         "completion.", c->ctx_len, np + (size_t)r->params.max_tokens, np,
                         r->kind == SRV_API_CHAT ? "messages" : "prompt", r->params.max_tokens,
                         r->kind == SRV_API_CHAT ? "messages" : "prompt");
            err->code = "context_length_exceeded";
            return -1;
        }
    }
    return 0;
}

static int parse_common(const srv_parse_ctx *c, const json_t *body, srv_gen_request *r, srv_api_error *err) {
    if (srv_check_model(c, body, err)) return -1;
    if (c->encoder)
        return BAD("model", "`%.200s` is an encoder: it computes embeddings (/v1/embeddings) and generates no text",
                   c->model_name);
    pdl_request_params *p = &r->params;
    double d;
    long long ll;
    bool given = false;

    d = 1.0;
    if (get_num(body, "temperature", 0, 100, false, &d, err)) return -1;
    p->sampling.temperature = (float)d;
    d = 1.0;
    if (get_num(body, "top_p", 0, 1, true, &d, err)) return -1;
    p->sampling.top_p = (float)d;
    ll = -1;
    if (get_int(body, "top_k", -1, 1 << 30, &ll, NULL, err)) return -1;
    p->sampling.top_k = ll < 0 ? 0 : (int)ll; /* -1 = off (vLLM), 0 = off */
    d = 0;
    if (get_num(body, "min_p", 0, 1, false, &d, err)) return -1;
    p->sampling.min_p = (float)d;
    d = 0;
    if (get_num(body, "presence_penalty", -2, 2, false, &d, err)) return -1;
    p->sampling.presence_penalty = (float)d;
    d = 0;
    if (get_num(body, "frequency_penalty", -2, 2, false, &d, err)) return -1;
    p->sampling.frequency_penalty = (float)d;
    d = 1.0;
    if (get_num(body, "repetition_penalty", 0, 10, true, &d, err)) return -1;
    p->sampling.repetition_penalty = (float)d;
    ll = 0;
    if (get_int(body, "seed", INT64_MIN, INT64_MAX, &ll, &r->seed_given, err)) return -1;
    p->sampling.seed = (uint64_t)ll;
    ll = 1;
    if (get_int(body, "n", 1, SRV_MAX_N, &ll, NULL, err)) return -1;
    p->n = (int)ll;
    if (refuse_unsupported(body, p->n, err)) return -1;
    if (get_bool(body, "ignore_eos", &p->ignore_eos, err)) return -1;
    if (srv_parse_structured(c, body, r, err)) return -1;
    if (parse_stop(body, r, c->vocab, err)) return -1;
    if (parse_logit_bias(body, r, c->vocab, err)) return -1;
    ll = 0;
    if (get_int(body, "min_tokens", 0, 1 << 30, &ll, NULL, err)) return -1;
    p->min_tokens = (int)ll;

    /* accepted and ignored, as OpenAI's server does with them */
    const json_t *user = field(body, "user");
    if (user && !json_is_string(user)) return BAD("user", "'user' must be a string, got %s", type_name(user));
    const json_t *meta = field(body, "metadata");
    if (meta && !json_is_object(meta)) return BAD("metadata", "'metadata' must be an object, got %s", type_name(meta));
    /* OpenAI's routing hint: a load balancer in front reads it (see
     * deploy/haproxy/pagedlm.cfg); one replica has nothing to route */
    const json_t *pck = field(body, "prompt_cache_key");
    if (pck && !json_is_string(pck))
        return BAD("prompt_cache_key", "'prompt_cache_key' must be a string, got %s", type_name(pck));
    const json_t *salt = field(body, "cache_salt");
    if (salt) {
        if (!json_is_string(salt) || json_string_length(salt) == 0 ||
            strlen(json_string_value(salt)) != json_string_length(salt) || json_string_length(salt) > 1024)
            return BAD("cache_salt", "'cache_salt' must be a non-empty string of at most 1024 bytes without NUL");
        if (!(r->cache_salt = strdup(json_string_value(salt)))) return srv_api_fail(err, 500, NULL, "out of memory");
        p->cache_salt = r->cache_salt;
    }

    if (get_bool(body, "stream", &r->stream, err)) return -1;
    const json_t *so = field(body, "stream_options");
    if (so) {
        if (!json_is_object(so)) return BAD("stream_options", "'stream_options' must be an object, got %s", type_name(so));
        if (!r->stream) return BAD("stream_options", "'stream_options' is only allowed when 'stream' is true");
        const json_t *iu = field(so, "include_usage"), *cu = field(so, "continuous_usage_stats");
        if (iu && !json_is_boolean(iu)) return BAD("stream_options", "'stream_options.include_usage' must be a boolean");
        if (cu && !json_is_boolean(cu))
            return BAD("stream_options", "'stream_options.continuous_usage_stats' must be a boolean");
        r->include_usage = iu && json_is_true(iu);
        r->continuous_usage = cu && json_is_true(cu);
    }
    ll = -1;
    given = false;
    if (get_int(body, "prompt_logprobs", 0, SRV_MAX_LOGPROBS, &ll, &given, err)) return -1;
    r->prompt_logprobs = (int)ll;
    if (given && r->stream) return BAD("prompt_logprobs", "'prompt_logprobs' is not available when 'stream' is true");
    return 0;
}

static void init_request(srv_gen_request *r, srv_api_kind kind) {
    memset(r, 0, sizeof *r);
    r->kind = kind;
    r->logprobs = r->prompt_logprobs = -1;
    r->params.logprobs = r->params.prompt_logprobs = -1;
}

/* The sequence count and the engine's prompt logprobs, once everything is known. */
static int finish_request(const srv_parse_ctx *c, srv_gen_request *r, bool max_tokens_given, srv_api_error *err) {
    if ((long long)r->n_prompts * r->params.n > SRV_MAX_SEQS)
        return BAD("n", "%d prompts with n = %d ask for %d sequences; at most %d are allowed per request",
                   r->n_prompts, r->params.n, r->n_prompts * r->params.n, SRV_MAX_SEQS);
    if (check_context(c, r, max_tokens_given, err)) return -1;
    if (r->params.min_tokens > 0 && r->params.max_tokens > 0 && r->params.min_tokens > r->params.max_tokens)
        return BAD("min_tokens", "'min_tokens' (%d) must not exceed max_tokens (%d)", r->params.min_tokens,
                   r->params.max_tokens);
    r->params.logprobs = r->logprobs;
    int plp = r->prompt_logprobs;
    if (r->echo && r->logprobs > plp) plp = r->logprobs;
    r->params.prompt_logprobs = plp;
    if (plp >= 0) {
        /* every prompt position becomes up to plp + 1 entries of the response */
        size_t entries = 0;
        for (int i = 0; i < r->n_prompts; i++) entries += r->prompts[i].n_ids * (size_t)(plp + 1);
        if (entries > SRV_MAX_PROMPT_LOGPROBS)
            return BAD(r->prompt_logprobs >= 0 ? "prompt_logprobs" : "logprobs",
                       "prompt logprobs for %zu prompt tokens with %d alternatives each would be %zu entries; a "
                       "request may ask for at most %d (prompt tokens x (alternatives + 1))",
                       entries / (size_t)(plp + 1), plp, entries, SRV_MAX_PROMPT_LOGPROBS);
    }
    return 0;
}

/* ---- fill-in-the-middle ----------------------------------------------------- */

/* The 400 for a hole on a model that cannot fill one, naming the field. */
static int fim_check(const srv_parse_ctx *c, const char *param, srv_api_error *err) {
    pdl_model_info info;
    pdl_model_get_info(c->model, &info);
    if (info.fim.pre >= 0 && info.fim.suf >= 0 && info.fim.mid >= 0) return 0;
    char missing[32] = "";
    const char *names[] = {"prefix", "suffix", "middle"};
    const int32_t ids[] = {info.fim.pre, info.fim.suf, info.fim.mid};
    for (int k = 0; k < 3; k++)
        if (ids[k] < 0)
            snprintf(missing + strlen(missing), sizeof missing - strlen(missing), "%s%s", missing[0] ? "/" : "",
                     names[k]);
    return BAD(param, "'%s' needs fill-in-the-middle, and this model has no FIM tokens (its vocabulary lacks the "
               "FIM %s token: GGUF tokenizer.ggml.fim_*_token_id, or a token such as <|fim_prefix|>, <fim_prefix>, "
               "\u2581<PRE>); serve a model trained to fill in the middle (Qwen2.5-Coder, CodeLlama, StarCoder, ...)",
               param, missing);
}

/* FIM_PAD, FIM_REP and FIM_SEP end a fill-in-the-middle generation, as in
 * llama.cpp (they are end-of-generation tokens there): after the stop ids
 * the client gave. */
static int add_fim_stop_ids(const srv_parse_ctx *c, srv_gen_request *r, srv_api_error *err) {
    pdl_model_info info;
    pdl_model_get_info(c->model, &info);
    const int32_t ends[] = {info.fim.pad, info.fim.rep, info.fim.sep};
    int n = r->params.n_stop_ids;
    int32_t *ids = realloc(r->stop_ids, (size_t)(n + 3) * sizeof *ids);
    if (!ids) return srv_api_fail(err, 500, NULL, "out of memory");
    r->stop_ids = ids;
    for (int k = 0; k < 3; k++) {
        bool known = ends[k] < 0;
        for (int i = 0; i < n && !known; i++) known = ids[i] == ends[k];
        if (!known) ids[n++] = ends[k];
    }
    r->params.stop_ids = ids;
    r->params.n_stop_ids = n;
    return 0;
}

/* OpenAI's suffix on /v1/completions: every prompt becomes
 * [BOS] FIM_PRE prompt FIM_SUF suffix FIM_MID (pdl_fim_prompt, nothing cut:
 * a prompt too long is the usual 400). An empty suffix leaves a plain
 * completion (there is nothing after the hole), as Ollama does. */
static int apply_suffix(const srv_parse_ctx *c, const json_t *body, srv_gen_request *r, srv_api_error *err) {
    const json_t *v = field(body, "suffix");
    if (!v) return 0;
    if (!json_is_string(v)) return BAD("suffix", "'suffix' must be a string, got %s", type_name(v));
    if (json_string_length(v) == 0) return 0;
    if (fim_check(c, "suffix", err)) return -1;
    if (r->echo) return BAD("echo", "'echo' cannot be used with 'suffix'");
    int32_t *sids = NULL;
    size_t n_sids = 0;
    if (tokenize_text(c, json_string_value(v), json_string_length(v), false, &sids, &n_sids, "suffix", err))
        return -1;
    int rc = 0;
    for (int i = 0; rc == 0 && i < r->n_prompts; i++) {
        srv_prompt *sp = &r->prompts[i];
        int32_t *pre = NULL, *ids = NULL;
        size_t n_pre = 0, n = 0;
        /* a text prompt is the prefix without BOS; ids are taken as given */
        if (sp->text && tokenize_text(c, sp->text, sp->text_len, false, &pre, &n_pre, "prompt", err)) {
            rc = -1;
            break;
        }
        pdl_fim_input in = {.prefix = sp->text ? pre : sp->ids, .n_prefix = sp->text ? n_pre : sp->n_ids,
                            .suffix = sids, .n_suffix = n_sids};
        pdl_error pe;
        if (pdl_fim_prompt(c->model, &in, &ids, &n, NULL, &pe)) rc = BAD("suffix", "%s", pe.message);
        free(pre);
        if (rc == 0) {
            free(sp->ids);
            sp->ids = ids, sp->n_ids = n;
        }
    }
    free(sids);
    if (rc) return -1;
    r->fim = true;
    return add_fim_stop_ids(c, r, err);
}

/* input_prefix / input_suffix of /infill: a string, or token ids. */
static int infill_text(const srv_parse_ctx *c, const json_t *body, const char *key, int32_t **ids, size_t *n,
                       srv_api_error *err) {
    const json_t *v = field(body, key);
    if (!v) return BAD(key, "'%s' is required", key);
    if (json_is_array(v)) {
        if (json_array_size(v) == 0)
            return (*ids = malloc(sizeof **ids)) ? 0 : srv_api_fail(err, 500, NULL, "out of memory");
        return ids_from_array(c, v, ids, n, key, err);
    }
    if (!json_is_string(v)) return BAD(key, "'%s' must be a string, got %s", key, type_name(v));
    return tokenize_text(c, json_string_value(v), json_string_length(v), false, ids, n, key, err);
}

/* input_extra: [{"filename": string (optional), "text": string}, ...],
 * with llama-server's messages. */
static int infill_extra(const json_t *body, pdl_fim_file **out, int *n_out, srv_api_error *err) {
    const json_t *v = field(body, "input_extra");
    *out = NULL;
    *n_out = 0;
    if (!v) return 0;
    if (!json_is_array(v))
        return BAD("input_extra", "\"input_extra\" must be an array of {\"filename\": string, \"text\": string}");
    size_t n = json_array_size(v);
    if (n > 4096) return BAD("input_extra", "'input_extra' holds %zu chunks; at most 4096 are allowed", n);
    pdl_fim_file *f = calloc(n ? n : 1, sizeof *f);
    if (!f) return srv_api_fail(err, 500, NULL, "out of memory");
    for (size_t i = 0; i < n; i++) {
        const json_t *chunk = json_array_get(v, i);
        const json_t *text = json_is_object(chunk) ? json_object_get(chunk, "text") : NULL;
        const json_t *name = json_is_object(chunk) ? field(chunk, "filename") : NULL;
        if (!json_is_string(text)) {
            free(f);
            return BAD("input_extra", "'input_extra[%zu]': extra_context chunk must contain a \"text\" field with a "
                       "string value", i);
        }
        if (name && !json_is_string(name)) {
            free(f);
            return BAD("input_extra", "'input_extra[%zu]': extra_context chunk's \"filename\" field must be a string",
                       i);
        }
        f[i] = (pdl_fim_file){.name = name ? json_string_value(name) : NULL,
                              .name_len = name ? json_string_length(name) : 0,
                              .text = json_string_value(text), .text_len = json_string_length(text)};
    }
    *out = f;
    *n_out = (int)n;
    return 0;
}

int srv_parse_infill(const srv_parse_ctx *c, const json_t *body, srv_gen_request *r, srv_api_error *err) {
    init_request(r, SRV_API_INFILL);
    if (srv_check_model(c, body, err)) return -1;
    if (fim_check(c, "input_suffix", err)) return -1;
    if (parse_common(c, body, r, err)) return -1;
    r->prompt_logprobs = -1; /* vLLM's field: llama-server's answer has no place for it */
    pdl_request_params *p = &r->params;
    /* llama-server's sampling defaults where the body says nothing */
    if (!field(body, "temperature")) p->sampling.temperature = 0.8f;
    if (!field(body, "top_k")) p->sampling.top_k = 40;
    if (!field(body, "top_p")) p->sampling.top_p = 0.95f;
    if (!field(body, "min_p")) p->sampling.min_p = 0.05f;
    double d = p->sampling.repetition_penalty;
    if (get_num(body, "repeat_penalty", 0, 10, true, &d, err)) return -1;
    p->sampling.repetition_penalty = (float)d;
    if (r->seed_given && (int64_t)p->sampling.seed == -1) r->seed_given = false; /* llama-server: -1 = random */
    if (p->n != 1) return BAD("n", "/infill writes one completion; 'n' must be 1, got %d", p->n);
    long long ll = 0;
    if (get_int(body, "n_probs", 0, SRV_MAX_LOGPROBS, &ll, NULL, err)) return -1;
    if (ll > 0) return BAD("n_probs", "'n_probs' (completion_probabilities) is not supported on /infill");
    if (get_bool(body, "return_tokens", &r->return_tokens, err)) return -1;
    /* n_predict (or max_tokens): -1 = up to the context, 0 = the prompt only
     * (llama.vscode warms the cache so), as llama-server */
    ll = -1;
    bool given = false;
    if (get_int(body, "n_predict", -1, 1 << 30, &ll, &given, err)) return -1;
    if (!given && get_int(body, "max_tokens", -1, 1 << 30, &ll, &given, err)) return -1;
    given = ll >= 0;
    r->discard_output = ll == 0;
    p->max_tokens = ll <= 0 ? (ll == 0 ? 1 : 0) : (int)ll;
    const json_t *prompt = field(body, "prompt");
    if (prompt && !json_is_string(prompt)) return BAD("prompt", "'prompt' must be a string, got %s", type_name(prompt));

    int32_t *pre = NULL, *suf = NULL, *mid = NULL;
    size_t n_pre = 0, n_suf = 0, n_mid = 0;
    pdl_fim_file *files = NULL;
    int n_files = 0, rc = -1;
    pdl_error pe;
    if (infill_text(c, body, "input_prefix", &pre, &n_pre, err) ||
        infill_text(c, body, "input_suffix", &suf, &n_suf, err) || infill_extra(body, &files, &n_files, err))
        goto done;
    /* llama-server reads special-token text in the prompt */
    if (prompt && pdl_tokenize_ex(c->model, json_string_value(prompt), json_string_length(prompt),
                                  PDL_TOK_PARSE_SPECIAL, &mid, &n_mid, &pe)) {
        BAD("prompt", "%s", pe.message);
        goto done;
    }
    /* llama-server's cut (format_infill): prefix and suffix within a batch
     * (3:1), the files in what the context leaves after the batch and twice
     * n_predict; here the batch is at most what the context leaves for the
     * prompt, so that the whole fits with the tokens asked for */
    int np = given && p->max_tokens > 0 ? p->max_tokens : 1;
    int nb = c->batch_tokens > 0 ? c->batch_tokens : 2048;
    if (nb > c->ctx_len - np - 2) nb = c->ctx_len - np - 2;
    if (nb < 1) nb = 1;
    pdl_fim_input in = {.prefix = pre, .n_prefix = n_pre, .suffix = suf, .n_suffix = n_suf, .middle = mid,
                        .n_middle = n_mid, .repo_level = true, .extra = files, .n_extra = n_files,
                        .n_batch = nb, .n_ctx = c->ctx_len - 1, .n_predict = np};
    if (add_prompt(r, err)) goto done;
    srv_prompt *sp = &r->prompts[0];
    if (pdl_fim_prompt(c->model, &in, &sp->ids, &sp->n_ids, &r->fim_truncated, &pe)) {
        BAD("input_prefix", "%s", pe.message);
        goto done;
    }
    r->fim = true;
    rc = 0;
done:
    free(pre);
    free(suf);
    free(mid);
    free(files);
    if (rc || add_fim_stop_ids(c, r, err)) return -1;
    return finish_request(c, r, given, err);
}

int srv_parse_embeddings(const srv_parse_ctx *c, const json_t *body, srv_gen_request *r, srv_api_error *err) {
    init_request(r, SRV_API_EMBEDDINGS);
    if (srv_check_model(c, body, err)) return -1;
    if (c->pooling == PDL_POOLING_NONE)
        return BAD("model", "this server does not serve embeddings (start it with --task embed, or --pooling)");
    const json_t *fmt = json_object_get(body, "encoding_format");
    if (fmt && !json_is_null(fmt)) {
        if (!json_is_string(fmt) || (strcmp(json_string_value(fmt), "float") && strcmp(json_string_value(fmt), "base64")))
            return BAD("encoding_format", "'encoding_format' must be \"float\" or \"base64\"");
        r->embed_base64 = strcmp(json_string_value(fmt), "base64") == 0;
    }
    long long dims = 0;
    bool given = false;
    if (get_int(body, "dimensions", 1, c->hidden, &dims, &given, err)) return -1;
    if (given && !c->matryoshka)
        return BAD("dimensions", "'dimensions' needs a Matryoshka-trained model (its config.json says "
                   "matryoshka_dimensions or is_matryoshka); this one returns %d dimensions", c->hidden);
    r->embed_dims = (int)dims;
    if (parse_prompts_named(c, body, "input", r, err)) return -1;
    r->params.n = 1;
    r->params.pooling = c->pooling;
    r->params.normalize = c->pool_normalize;
    r->params.max_tokens = 1;
    return check_context(c, r, false, err);
}

int srv_parse_completion(const srv_parse_ctx *c, const json_t *body, srv_gen_request *r, srv_api_error *err) {
    init_request(r, SRV_API_COMPLETION);
    if (parse_common(c, body, r, err)) return -1;
    if (get_bool(body, "echo", &r->echo, err)) return -1;
    long long ll = -1;
    if (get_int(body, "logprobs", 0, SRV_MAX_LOGPROBS, &ll, NULL, err)) return -1;
    r->logprobs = (int)ll;
    ll = 16;
    bool given = false;
    /* max_completion_tokens: OpenAI's newer name, also taken here */
    if (get_int(body, "max_completion_tokens", 0, 1 << 30, &ll, &given, err)) return -1;
    if (!given && get_int(body, "max_tokens", 0, 1 << 30, &ll, &given, err)) return -1;
    if (ll == 0 && !r->echo)
        return BAD("max_tokens", "'max_tokens' must be at least 1 (0 is allowed only with echo)");
    r->discard_output = ll == 0;
    r->params.max_tokens = ll == 0 ? 1 : (int)ll;
    if (r->discard_output && r->stream)
        return BAD("max_tokens", "'max_tokens' 0 (echo only) is not available when 'stream' is true");
    if (parse_prompts(c, body, r, err)) return -1;
    if (apply_suffix(c, body, r, err)) return -1;
    if (r->echo)
        for (int i = 0; i < r->n_prompts; i++) {
            srv_prompt *p = &r->prompts[i];
            if (p->text) continue;
            pdl_error pe;
            if (pdl_detokenize(c->model, p->ids, p->n_ids, &p->text, &p->text_len, &pe))
                return BAD("prompt", "%s", pe.message);
        }
    return finish_request(c, r, true, err);
}

/* The thinking block (--reasoning-parser): where the output starts (the
 * rendered prompt says), its budget (thinking_token_budget, vLLM's, else
 * the server's --reasoning-budget) and whether the reasoning is returned
 * (include_reasoning, vLLM's). The engine follows the block by its
 * markers' tokens (a grammar then constrains the answer only, and the
 * budget can force the end); a model whose markers are not single tokens
 * gets the text split only, and a budget for it is a 400. */
static int parse_reasoning(const srv_parse_ctx *c, const json_t *body, srv_gen_request *r, srv_api_error *err) {
    bool include = true, given = false;
    long long budget = c->reasoning_budget;
    if (get_bool(body, "include_reasoning", &include, err) ||
        get_int(body, "thinking_token_budget", 0, 1 << 30, &budget, &given, err))
        return -1;
    if (c->harmony) { /* the analysis channel is the reasoning (gram_harmony.c) */
        if (given || budget >= 0)
            return BAD(given ? "thinking_token_budget" : "model", "a thinking budget is not supported for the harmony "
                       "format (gpt-oss) yet");
        pdl_error pe;
        const gram_vocab *v = c->grammar_vocab ? c->grammar_vocab(c->grammar_user, &pe) : NULL;
        if (!v) return srv_api_fail(err, 500, NULL, "the harmony format's control tokens are not available");
        r->harmony = true;
        r->tool_format = GRAM_TOOLS_OPENAI;
        r->tool_vocab = v;
        r->include_reasoning = include;
        return 0;
    }
    if (!c->reasoning) {
        if (given) return BAD("thinking_token_budget", "'thinking_token_budget' needs a reasoning model served with "
                              "--reasoning-parser");
        return 0;
    }
    const srv_prompt *p = &r->prompts[0];
    bool inside = p->text && reasoning_prompt_opens(c->reasoning, p->text, p->text_len);
    reasoning_params(c->reasoning, c->model, inside, (int)budget, &r->params.reasoning);
    if (!r->params.reasoning.enabled && budget >= 0)
        return BAD(given ? "thinking_token_budget" : "model", "a thinking budget needs the reasoning markers '%s' and "
                   "'%s' to be single tokens of the model's vocabulary, and they are not", c->reasoning->start,
                   c->reasoning->end);
    r->reasoning = c->reasoning;
    r->reasoning_starts_inside = inside;
    r->include_reasoning = include;
    return 0;
}

int srv_parse_chat(const srv_parse_ctx *c, const json_t *body, srv_gen_request *r, srv_api_error *err) {
    init_request(r, SRV_API_CHAT);
    if (parse_common(c, body, r, err)) return -1;
    const json_t *echo = field(body, "echo");
    if (echo && !json_is_false(echo)) return BAD("echo", "'echo' is not supported for chat completions");
    bool lp = false, given = false, top_given = false;
    if (get_bool(body, "logprobs", &lp, err)) return -1;
    long long top = 0;
    if (get_int(body, "top_logprobs", 0, SRV_MAX_LOGPROBS, &top, &top_given, err)) return -1;
    if (top_given && !lp) return BAD("top_logprobs", "when using 'top_logprobs', 'logprobs' must be set to true");
    r->logprobs = lp ? (int)top : -1;
    long long mt = 0;
    if (get_int(body, "max_completion_tokens", 1, 1 << 30, &mt, &given, err)) return -1;
    if (!given && get_int(body, "max_tokens", 1, 1 << 30, &mt, &given, err)) return -1;
    r->params.max_tokens = (int)mt; /* 0: up to the context length */
    if (add_prompt(r, err)) return -1;
    srv_prompt *p = &r->prompts[0];
    chat_images ci = {0};
    if (chat_prompt(c, body, &p->ids, &p->n_ids, &p->text, &p->text_len, &ci, &r->image_inputs, err)) {
        chat_images_free(&ci);
        return -1;
    }
    r->images = ci.img, r->n_images = ci.n;
    if (r->n_images) r->params.images = r->image_inputs, r->params.n_images = r->n_images;
    if (parse_reasoning(c, body, r, err)) return -1;
    return finish_request(c, r, given, err);
}

void srv_gen_request_free(srv_gen_request *r) {
    if (!r) return;
    for (int i = 0; i < r->n_prompts; i++) {
        free(r->prompts[i].ids);
        free(r->prompts[i].text);
    }
    free(r->prompts);
    if (r->stop)
        for (int i = 0; i < r->params.n_stop; i++) free(r->stop[i]);
    free(r->stop);
    stop_matcher_free(r->params.stop_matcher);
    free(r->stop_ids);
    free(r->logit_bias);
    free(r->cache_salt);
    free(r->tool_name);
    free(r->tools_json);
    if (r->grammar) gram_grammar_free(r->grammar);
    for (int i = 0; i < r->n_images; i++) pdl_image_free(r->images[i]);
    free(r->images);
    free(r->image_inputs);
    json_decref(r->rerank_docs);
    pdl_lora_free(r->params.lora); /* the request's reference (server/lora_registry.h) */
    memset(r, 0, sizeof *r);
}

/* ---- /tokenize and /detokenize -------------------------------------------- */

int srv_parse_tokenize(const srv_parse_ctx *c, const json_t *body, srv_tokenize_request *out, srv_api_error *err) {
    memset(out, 0, sizeof *out);
    if (srv_check_model(c, body, err)) return -1;
    if (get_bool(body, "return_token_strs", &out->return_token_strs, err)) return -1;
    const json_t *prompt = field(body, "prompt"), *msgs = field(body, "messages");
    if (prompt && msgs) return BAD("prompt", "give either 'prompt' or 'messages', not both");
    if (msgs) {
        char *text = NULL;
        size_t text_len;
        int rc = chat_prompt(c, body, &out->ids, &out->n_ids, &text, &text_len, NULL, NULL, err);
        free(text);
        return rc;
    }
    if (!prompt) return BAD("prompt", "'prompt' (or 'messages') is required");
    if (!json_is_string(prompt)) return BAD("prompt", "'prompt' must be a string, got %s", type_name(prompt));
    bool add_special = true;
    if (get_bool(body, "add_special_tokens", &add_special, err)) return -1;
    return tokenize_text(c, json_string_value(prompt), json_string_length(prompt), add_special, &out->ids,
                         &out->n_ids, "prompt", err);
}

int srv_count_chat_prompt(const srv_parse_ctx *c, const json_t *body, size_t *n_tokens, srv_api_error *err) {
    *n_tokens = 0;
    if (srv_check_model(c, body, err)) return -1;
    int32_t *ids = NULL;
    size_t n = 0, text_len = 0;
    char *text = NULL;
    chat_images ci = {0};
    pdl_mm_input *positions = NULL;
    int rc = chat_prompt(c, body, &ids, &n, &text, &text_len, &ci, &positions, err);
    free(ids);
    free(text);
    free(positions);
    chat_images_free(&ci);
    if (rc == 0) *n_tokens = n;
    return rc;
}

int srv_parse_detokenize(const srv_parse_ctx *c, const json_t *body, int32_t **ids, size_t *n_ids,
                         srv_api_error *err) {
    *ids = NULL;
    *n_ids = 0;
    if (srv_check_model(c, body, err)) return -1;
    const json_t *t = field(body, "tokens");
    if (!t) return BAD("tokens", "'tokens' is required");
    if (!json_is_array(t)) return BAD("tokens", "'tokens' must be a list of token ids, got %s", type_name(t));
    if (json_array_size(t) == 0) {
        *ids = malloc(sizeof **ids);
        return *ids ? 0 : srv_api_fail(err, 500, NULL, "out of memory");
    }
    return ids_from_array(c, t, ids, n_ids, "tokens", err);
}
