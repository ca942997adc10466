/*
 * api_responses.c - OpenAI's Responses API (POST /v1/responses) as an
 * adapter over Chat Completions (api_adapter.h), for clients such as the
 * Codex CLI that speak only it.
 *
 * Request: `input` (a string, or items: messages whose content is a string
 * or input_text / input_image / output_text parts, function_call and
 * function_call_output items; reasoning items are skipped), `instructions`
 * (a system message first), function `tools` and `tool_choice`,
 * `parallel_tool_calls`, `text.format` (text, json_object, json_schema ->
 * response_format), `reasoning.effort` (to the template as
 * reasoning_effort), `max_output_tokens`, `temperature`, `top_p`, `stream`;
 * `metadata`, `user`, `include`, `truncation: "disabled"` and `store: false`
 * are taken. Refused with a 400 naming the field: `store: true` and
 * `previous_response_id` (nothing is stored: send the conversation in
 * `input`), `background`, tools other than functions, and input items of
 * other types.
 *
 * Response: an object "response" whose `output` holds a `reasoning` item
 * (reasoning_text), a `message` (output_text) and `function_call` items,
 * in that order; `status` "completed", or "incomplete" with reason
 * max_output_tokens; `usage` with input/output token counts. Streams send
 * the published event sequence: response.created, response.in_progress,
 * then per item response.output_item.added, its deltas
 * (response.reasoning_text.delta, response.content_part.added /
 * response.output_text.delta / .done / response.content_part.done,
 * response.function_call_arguments.delta / .done) and
 * response.output_item.done, and response.completed (or
 * response.incomplete) with the whole response; each event carries its
 * sequence_number.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/api_adapter.h"
#include "server/api_format.h"

#define BAD(param, ...) srv_api_fail(err, 400, param, __VA_ARGS__)

static const json_t *field(const json_t *o, const char *key) {
    const json_t *v = json_object_get(o, key);
    return v && !json_is_null(v) ? v : NULL;
}

/* ---- per request -------------------------------------------------------- */

enum { ITEM_NONE = 0, ITEM_REASONING, ITEM_MESSAGE, ITEM_CALL };

typedef struct resp_state {
    char id[96];
    json_t *echo;        /* the request fields a response repeats (model, instructions, tools, ...) */
    long long created;
    /* streaming */
    long long seq;       /* sequence_number of the next event */
    json_t *output;      /* items so far */
    int open;            /* ITEM_*: the item being streamed */
    int open_index;      /* its output_index */
    sbuf text;           /* its text (reasoning, output text, or arguments) */
    char item_id[96];
    char call_id[96], call_name[256];
    int n_items;
    const char *finish;  /* the chat finish_reason */
    json_t *usage;       /* the chat usage */
    bool ended;
} resp_state;

static void state_free(void *p) {
    resp_state *st = p;
    if (!st) return;
    json_decref(st->echo);
    json_decref(st->output);
    json_decref(st->usage);
    sbuf_free(&st->text);
    free(st);
}

/* ---- request: Responses -> Chat Completions ------------------------------- */

/* A Responses content part -> a chat content part; NULL with err. */
static json_t *chat_part(const json_t *part, const char *param, srv_api_error *err) {
    const char *type = json_string_value(json_object_get(part, "type"));
    if (!type) {
        BAD(param, "'%s' must be an object with a 'type'", param);
        return NULL;
    }
    if (strcmp(type, "input_text") == 0 || strcmp(type, "output_text") == 0 || strcmp(type, "text") == 0) {
        const json_t *t = json_object_get(part, "text");
        if (!json_is_string(t)) {
            BAD(param, "'%s.text' must be a string", param);
            return NULL;
        }
        return json_pack("{s:s, s:O}", "type", "text", "text", t);
    }
    if (strcmp(type, "input_image") == 0) {
        const json_t *u = json_object_get(part, "image_url");
        if (!json_is_string(u)) {
            BAD(param, "'%s.image_url' must be a data URL (file ids are not supported)", param);
            return NULL;
        }
        return json_pack("{s:s, s:{s:O}}", "type", "image_url", "image_url", "url", u);
    }
    BAD(param, "'%s' has type '%.40s'; input_text, input_image and output_text are supported", param, type);
    return NULL;
}

/* A message item's content (a string or parts) -> chat content. */
static json_t *chat_content(const json_t *content, const char *param, srv_api_error *err) {
    if (json_is_string(content)) return json_incref((json_t *)content);
    if (!json_is_array(content)) {
        BAD(param, "'%s' must be a string or a list of content parts", param);
        return NULL;
    }
    json_t *parts = json_array();
    for (size_t i = 0; i < json_array_size(content); i++) {
        char p[96];
        snprintf(p, sizeof p, "%s[%zu]", param, i);
        json_t *c = chat_part(json_array_get(content, i), p, err);
        if (!c) {
            json_decref(parts);
            return NULL;
        }
        json_array_append_new(parts, c);
    }
    return parts;
}

/* The assistant message that function_call items join (the last message,
 * when it is an assistant's), else a new one. */
static json_t *assistant_for_calls(json_t *messages) {
    json_t *last = json_array_get(messages, json_array_size(messages) - 1);
    if (last && strcmp(json_string_value(json_object_get(last, "role")), "assistant") == 0) return last;
    json_t *m = json_pack("{s:s, s:s}", "role", "assistant", "content", ""); /* "" as vLLM gives templates */
    json_array_append_new(messages, m);
    return m;
}

static int input_items(const json_t *input, json_t *messages, srv_api_error *err) {
    if (json_is_string(input)) {
        json_array_append_new(messages, json_pack("{s:s, s:O}", "role", "user", "content", input));
        return 0;
    }
    if (!json_is_array(input)) return BAD("input", "'input' must be a string or a list of items");
    for (size_t i = 0; i < json_array_size(input); i++) {
        const json_t *it = json_array_get(input, i);
        char param[64];
        snprintf(param, sizeof param, "input[%zu]", i);
        if (!json_is_object(it)) return BAD(param, "'%s' must be an object", param);
        const char *type = json_string_value(json_object_get(it, "type"));
        const char *role = json_string_value(json_object_get(it, "role"));
        if (!type || strcmp(type, "message") == 0) { /* EasyInputMessage has no type */
            if (!role) return BAD(param, "'%s.role' must be user, assistant, system or developer", param);
            if (strcmp(role, "developer") == 0) role = "system";
            if (strcmp(role, "user") && strcmp(role, "assistant") && strcmp(role, "system"))
                return BAD(param, "'%s.role' must be user, assistant, system or developer, got '%.40s'", param, role);
            char cp[80];
            snprintf(cp, sizeof cp, "%s.content", param);
            json_t *content = chat_content(json_object_get(it, "content"), cp, err);
            if (!content) return -1;
            json_array_append_new(messages, json_pack("{s:s, s:o}", "role", role, "content", content));
        } else if (strcmp(type, "function_call") == 0) {
            const json_t *call_id = json_object_get(it, "call_id"), *name = json_object_get(it, "name");
            const json_t *args = json_object_get(it, "arguments");
            if (!json_is_string(call_id) || !json_is_string(name) || !json_is_string(args))
                return BAD(param, "'%s' (function_call) needs call_id, name and arguments (strings)", param);
            json_t *m = assistant_for_calls(messages);
            json_t *calls = json_object_get(m, "tool_calls");
            if (!calls) json_object_set_new(m, "tool_calls", calls = json_array());
            json_array_append_new(calls, json_pack("{s:O, s:s, s:{s:O, s:O}}", "id", call_id, "type", "function",
                                                   "function", "name", name, "arguments", args));
        } else if (strcmp(type, "function_call_output") == 0) {
            const json_t *call_id = json_object_get(it, "call_id"), *output = json_object_get(it, "output");
            if (!json_is_string(call_id) || !output)
                return BAD(param, "'%s' (function_call_output) needs call_id and output", param);
            char cp[80];
            snprintf(cp, sizeof cp, "%s.output", param);
            json_t *content = chat_content(output, cp, err);
            if (!content) return -1;
            json_array_append_new(messages, json_pack("{s:s, s:O, s:o}", "role", "tool", "tool_call_id", call_id,
                                                      "content", content));
        } else if (strcmp(type, "reasoning") == 0) {
            continue; /* earlier thinking: templates leave it out of the history */
        } else {
            return BAD(param, "'%s' has type '%.40s'; message, function_call, function_call_output and reasoning "
                       "items are supported", param, type);
        }
    }
    return 0;
}

static int chat_tools(const json_t *tools, json_t *chat, srv_api_error *err) {
    if (!tools) return 0;
    if (!json_is_array(tools)) return BAD("tools", "'tools' must be a list");
    json_t *out = json_array();
    for (size_t i = 0; i < json_array_size(tools); i++) {
        const json_t *t = json_array_get(tools, i);
        const char *type = json_string_value(json_object_get(t, "type"));
        if (!type || strcmp(type, "function") != 0) {
            json_decref(out);
            return BAD("tools", "'tools[%zu]' has type '%.40s': only function tools are supported", i,
                       type ? type : "(none)");
        }
        json_t *fn = json_object();
        const char *keys[] = {"name", "description", "parameters"};
        for (int k = 0; k < 3; k++)
            if (field(t, keys[k])) json_object_set(fn, keys[k], json_object_get(t, keys[k]));
        json_array_append_new(out, json_pack("{s:s, s:o}", "type", "function", "function", fn));
    }
    json_object_set_new(chat, "tools", out);
    return 0;
}

static int chat_tool_choice(const json_t *tc, json_t *chat, srv_api_error *err) {
    if (!tc) return 0;
    if (json_is_string(tc)) {
        json_object_set(chat, "tool_choice", (json_t *)tc);
        return 0;
    }
    const char *type = json_string_value(json_object_get(tc, "type"));
    const json_t *name = json_object_get(tc, "name");
    if (!type || strcmp(type, "function") != 0 || !json_is_string(name))
        return BAD("tool_choice", "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
                   "\"name\": ...}");
    json_object_set_new(chat, "tool_choice", json_pack("{s:s, s:{s:O}}", "type", "function", "function", "name", name));
    return 0;
}

static int chat_text_format(const json_t *text, json_t *chat, srv_api_error *err) {
    const json_t *format = text ? field(text, "format") : NULL;
    if (!format) return 0;
    const char *type = json_string_value(json_object_get(format, "type"));
    if (!type) return BAD("text.format", "'text.format' must have a 'type'");
    if (strcmp(type, "text") == 0) return 0;
    if (strcmp(type, "json_object") == 0) {
        json_object_set_new(chat, "response_format", json_pack("{s:s}", "type", "json_object"));
        return 0;
    }
    if (strcmp(type, "json_schema") == 0) {
        const json_t *schema = json_object_get(format, "schema");
        if (!schema) return BAD("text.format", "'text.format.schema' is required for json_schema");
        json_t *js = json_pack("{s:O}", "schema", schema);
        const json_t *name = json_object_get(format, "name"), *strict = json_object_get(format, "strict");
        json_object_set(js, "name", name ? (json_t *)name : json_string("response"));
        if (strict) json_object_set(js, "strict", (json_t *)strict);
        json_object_set_new(chat, "response_format", json_pack("{s:s, s:o}", "type", "json_schema", "json_schema", js));
        return 0;
    }
    return BAD("text.format", "'text.format.type' must be text, json_object or json_schema, got '%.40s'", type);
}

static int to_chat(const srv_parse_ctx *c, const json_t *body, const char *id, json_t **chat_out, void **state,
                   srv_api_error *err) {
    (void)c;
    *chat_out = NULL;
    *state = NULL;
    const json_t *v;
    if ((v = field(body, "store")) && !json_is_false(v))
        return BAD("store", "'store' must be false: this server keeps no responses (send the whole conversation "
                   "in 'input')");
    if (field(body, "previous_response_id"))
        return BAD("previous_response_id", "'previous_response_id' is not supported: this server keeps no "
                   "responses; send the whole conversation in 'input'");
    if ((v = field(body, "background")) && !json_is_false(v))
        return BAD("background", "'background' responses are not supported");
    if ((v = field(body, "truncation")) && !(json_is_string(v) && strcmp(json_string_value(v), "disabled") == 0))
        return BAD("truncation", "'truncation' must be \"disabled\": a conversation longer than the context is a 400");
    if (!field(body, "input")) return BAD("input", "'input' is required");
    json_t *chat = json_object(), *messages = json_array();
    json_object_set_new(chat, "messages", messages);
    if ((v = field(body, "instructions"))) {
        if (!json_is_string(v)) {
            json_decref(chat);
            return BAD("instructions", "'instructions' must be a string");
        }
        json_array_append_new(messages, json_pack("{s:s, s:O}", "role", "system", "content", v));
    }
    if (input_items(field(body, "input"), messages, err) || chat_tools(field(body, "tools"), chat, err) ||
        chat_tool_choice(field(body, "tool_choice"), chat, err) || chat_text_format(field(body, "text"), chat, err)) {
        json_decref(chat);
        return -1;
    }
    /* the same fields, and vLLM's extras a client may add (extra_body) */
    static const char *const same[] = {"model", "temperature", "top_p", "parallel_tool_calls", "stream", "user",
                                       "seed", "top_k", "min_p", "repetition_penalty", "thinking_token_budget",
                                       "include_reasoning", "chat_template_kwargs", "cache_salt", "logit_bias"};
    for (size_t i = 0; i < sizeof same / sizeof same[0]; i++)
        if (field(body, same[i])) json_object_set(chat, same[i], json_object_get(body, same[i]));
    if ((v = field(body, "max_output_tokens"))) json_object_set(chat, "max_completion_tokens", (json_t *)v);
    const json_t *effort = field(field(body, "reasoning"), "effort");
    if (effort) {
        json_t *kw = json_object_get(chat, "chat_template_kwargs");
        if (!json_is_object(kw)) json_object_set_new(chat, "chat_template_kwargs", kw = json_object());
        json_object_set(kw, "reasoning_effort", (json_t *)effort);
    }
    if (json_is_true(field(body, "stream")))
        json_object_set_new(chat, "stream_options", json_pack("{s:b}", "include_usage", 1));

    resp_state *st = calloc(1, sizeof *st);
    if (!st) {
        json_decref(chat);
        return srv_api_fail(err, 500, NULL, "out of memory");
    }
    snprintf(st->id, sizeof st->id, "%s", id);
    st->created = (long long)time(NULL);
    st->echo = json_object();
    static const char *const echo[] = {"model", "instructions", "tools", "tool_choice", "parallel_tool_calls",
                                       "temperature", "top_p", "max_output_tokens", "text", "reasoning", "metadata",
                                       "user"};
    for (size_t i = 0; i < sizeof echo / sizeof echo[0]; i++)
        json_object_set(st->echo, echo[i], field(body, echo[i]) ? json_object_get(body, echo[i]) : json_null());
    if (!field(body, "tool_choice")) json_object_set_new(st->echo, "tool_choice", json_string("auto"));
    if (!field(body, "tools")) json_object_set_new(st->echo, "tools", json_array());
    if (!field(body, "parallel_tool_calls")) json_object_set_new(st->echo, "parallel_tool_calls", json_true());
    if (!field(body, "text")) json_object_set_new(st->echo, "text", json_pack("{s:{s:s}}", "format", "type", "text"));
    if (!field(body, "metadata")) json_object_set_new(st->echo, "metadata", json_object());
    st->output = json_array();
    *chat_out = chat;
    *state = st;
    return 0;
}

/* ---- response: Chat Completions -> Responses ------------------------------ */

static json_t *usage_of(const json_t *u) {
    json_int_t in = json_integer_value(json_object_get(u, "prompt_tokens"));
    json_int_t out = json_integer_value(json_object_get(u, "completion_tokens"));
    json_int_t cached = json_integer_value(json_object_get(json_object_get(u, "prompt_tokens_details"), "cached_tokens"));
    return json_pack("{s:I, s:{s:I}, s:I, s:{s:I}, s:I}", "input_tokens", in, "input_tokens_details", "cached_tokens",
                     cached, "output_tokens", out, "output_tokens_details", "reasoning_tokens", (json_int_t)0,
                     "total_tokens", in + out);
}

/* The response object around output (consumed), for a chat finish reason. */
static json_t *response_object(const resp_state *st, json_t *output, const char *finish, json_t *usage,
                               bool in_progress) {
    json_t *o = json_pack("{s:s, s:s, s:I}", "id", st->id, "object", "response", "created_at", (json_int_t)st->created);
    const char *status = in_progress                                       ? "in_progress"
                         : finish && strcmp(finish, "length") == 0         ? "incomplete"
                         : finish && strcmp(finish, "abort") == 0          ? "failed"
                                                                           : "completed";
    json_object_set_new(o, "status", json_string(status));
    json_object_set_new(o, "error", json_null());
    json_object_set_new(o, "incomplete_details", strcmp(status, "incomplete") == 0
                                                     ? json_pack("{s:s}", "reason", "max_output_tokens")
                                                     : json_null());
    json_object_update(o, st->echo);
    json_object_set_new(o, "output", output);
    json_object_set_new(o, "previous_response_id", json_null());
    json_object_set_new(o, "store", json_false());
    json_object_set_new(o, "truncation", json_string("disabled"));
    json_object_set_new(o, "usage", usage ? usage : json_null());
    return o;
}

static json_t *reasoning_item(const char *id, const char *text, size_t n) {
    return json_pack("{s:s, s:s, s:[], s:[{s:s, s:s%}], s:s}", "type", "reasoning", "id", id, "summary", "content",
                     "type", "reasoning_text", "text", text, n, "status", "completed");
}

static json_t *message_item(const char *id, const char *text, size_t n, const char *status) {
    return json_pack("{s:s, s:s, s:s, s:s, s:[{s:s, s:s%, s:[], s:[]}]}", "type", "message", "id", id, "status", status,
                     "role", "assistant", "content", "type", "output_text", "text", text, n, "annotations", "logprobs");
}

static json_t *call_item(const char *id, const char *call_id, const char *name, const char *args, size_t n,
                         const char *status) {
    return json_pack("{s:s, s:s, s:s, s:s, s:s%, s:s}", "type", "function_call", "id", id, "call_id", call_id, "name",
                     name, "arguments", args, n, "status", status);
}

static char *whole(void *state, const json_t *chat, size_t *len) {
    resp_state *st = state;
    const json_t *c0 = json_array_get(json_object_get(chat, "choices"), 0);
    const json_t *msg = json_object_get(c0, "message");
    json_t *output = json_array();
    char id[128];
    const json_t *r = json_object_get(msg, "reasoning");
    if (json_is_string(r) && json_string_length(r)) {
        snprintf(id, sizeof id, "rs_%s", st->id + 5);
        json_array_append_new(output, reasoning_item(id, json_string_value(r), json_string_length(r)));
    }
    const json_t *content = json_object_get(msg, "content"), *calls = json_object_get(msg, "tool_calls");
    if ((json_is_string(content) && json_string_length(content)) || json_array_size(calls) == 0) {
        snprintf(id, sizeof id, "msg_%s", st->id + 5);
        const char *t = json_is_string(content) ? json_string_value(content) : "";
        json_array_append_new(output, message_item(id, t, strlen(t), "completed"));
    }
    for (size_t i = 0; i < json_array_size(calls); i++) {
        const json_t *tc = json_array_get(calls, i), *fn = json_object_get(tc, "function");
        snprintf(id, sizeof id, "fc_%s_%zu", st->id + 5, i);
        const json_t *args = json_object_get(fn, "arguments");
        json_array_append_new(output, call_item(id, json_string_value(json_object_get(tc, "id")),
                                                json_string_value(json_object_get(fn, "name")),
                                                json_string_value(args), json_string_length(args), "completed"));
    }
    const char *finish = json_string_value(json_object_get(c0, "finish_reason"));
    json_t *o = response_object(st, output, finish, usage_of(json_object_get(chat, "usage")), false);
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    *len = s ? strlen(s) : 0;
    return s;
}

/* ---- streams ----------------------------------------------------------------- */

/* One event: {"type", "sequence_number", ...members of o} (o consumed). */
static void emit(resp_state *st, sbuf *out, const char *type, json_t *o) {
    json_t *e = json_pack("{s:s, s:I}", "type", type, "sequence_number", (json_int_t)st->seq++);
    json_object_update(e, o);
    json_decref(o);
    srv_sse_event(out, type, e);
}

static void stream_begin(void *state, sbuf *out) {
    resp_state *st = state;
    emit(st, out, "response.created", json_pack("{s:o}", "response", response_object(st, json_array(), NULL, NULL, true)));
    emit(st, out, "response.in_progress",
         json_pack("{s:o}", "response", response_object(st, json_array(), NULL, NULL, true)));
}

/* Ends the item being streamed: its done events, and the item in output. */
static void close_item(resp_state *st, sbuf *out) {
    if (st->open == ITEM_NONE) return;
    const char *t = st->text.data ? st->text.data : "";
    size_t n = st->text.len;
    json_t *item = NULL;
    if (st->open == ITEM_REASONING) {
        emit(st, out, "response.reasoning_text.done", json_pack("{s:s, s:i, s:i, s:s%}", "item_id", st->item_id,
                                                                "output_index", st->open_index, "content_index", 0,
                                                                "text", t, n));
        item = reasoning_item(st->item_id, t, n);
    } else if (st->open == ITEM_MESSAGE) {
        emit(st, out, "response.output_text.done", json_pack("{s:s, s:i, s:i, s:s%, s:[]}", "item_id", st->item_id,
                                                             "output_index", st->open_index, "content_index", 0, "text",
                                                             t, n, "logprobs"));
        emit(st, out, "response.content_part.done",
             json_pack("{s:s, s:i, s:i, s:{s:s, s:s%, s:[]}}", "item_id", st->item_id, "output_index", st->open_index,
                       "content_index", 0, "part", "type", "output_text", "text", t, n, "annotations"));
        item = message_item(st->item_id, t, n, "completed");
    } else {
        emit(st, out, "response.function_call_arguments.done",
             json_pack("{s:s, s:i, s:s%}", "item_id", st->item_id, "output_index", st->open_index, "arguments", t, n));
        item = call_item(st->item_id, st->call_id, st->call_name, t, n, "completed");
    }
    emit(st, out, "response.output_item.done", json_pack("{s:i, s:O}", "output_index", st->open_index, "item", item));
    json_array_append_new(st->output, item);
    st->open = ITEM_NONE;
    st->text.len = 0;
}

/* Opens an item of kind k (closing the one before). */
static void open_item(resp_state *st, int k, sbuf *out) {
    close_item(st, out);
    st->open = k;
    st->open_index = st->n_items++;
    const char *prefix = k == ITEM_REASONING ? "rs" : k == ITEM_MESSAGE ? "msg" : "fc";
    snprintf(st->item_id, sizeof st->item_id, "%s_%s_%d", prefix, st->id + 5, st->open_index);
    json_t *item = k == ITEM_REASONING ? json_pack("{s:s, s:s, s:[], s:[], s:s}", "type", "reasoning", "id",
                                                   st->item_id, "summary", "content", "status", "in_progress")
                   : k == ITEM_MESSAGE ? json_pack("{s:s, s:s, s:s, s:s, s:[]}", "type", "message", "id", st->item_id,
                                                   "status", "in_progress", "role", "assistant", "content")
                                       : call_item(st->item_id, st->call_id, st->call_name, "", 0, "in_progress");
    emit(st, out, "response.output_item.added", json_pack("{s:i, s:o}", "output_index", st->open_index, "item", item));
    if (k == ITEM_MESSAGE)
        emit(st, out, "response.content_part.added",
             json_pack("{s:s, s:i, s:i, s:{s:s, s:s, s:[]}}", "item_id", st->item_id, "output_index", st->open_index,
                       "content_index", 0, "part", "type", "output_text", "text", "", "annotations"));
}

static void stream_chunk(void *state, const json_t *chunk, sbuf *out) {
    resp_state *st = state;
    const json_t *usage = json_object_get(chunk, "usage");
    if (json_is_object(usage)) {
        json_decref(st->usage);
        st->usage = usage_of(usage);
    }
    const json_t *c0 = json_array_get(json_object_get(chunk, "choices"), 0);
    if (!c0) return;
    const json_t *d = json_object_get(c0, "delta"), *v;
    if ((v = json_object_get(d, "reasoning")) && json_string_length(v)) {
        if (st->open != ITEM_REASONING) open_item(st, ITEM_REASONING, out);
        sbuf_append(&st->text, json_string_value(v), json_string_length(v));
        emit(st, out, "response.reasoning_text.delta", json_pack("{s:s, s:i, s:i, s:O}", "item_id", st->item_id,
                                                                 "output_index", st->open_index, "content_index", 0,
                                                                 "delta", v));
    }
    if ((v = json_object_get(d, "content")) && json_string_length(v)) {
        if (st->open != ITEM_MESSAGE) open_item(st, ITEM_MESSAGE, out);
        sbuf_append(&st->text, json_string_value(v), json_string_length(v));
        emit(st, out, "response.output_text.delta", json_pack("{s:s, s:i, s:i, s:O, s:[]}", "item_id", st->item_id,
                                                              "output_index", st->open_index, "content_index", 0,
                                                              "delta", v, "logprobs"));
    }
    const json_t *calls = json_object_get(d, "tool_calls");
    for (size_t i = 0; i < json_array_size(calls); i++) {
        const json_t *tc = json_array_get(calls, i), *fn = json_object_get(tc, "function");
        if (json_is_string(json_object_get(tc, "id"))) { /* a new call: its id and name come first */
            snprintf(st->call_id, sizeof st->call_id, "%s", json_string_value(json_object_get(tc, "id")));
            snprintf(st->call_name, sizeof st->call_name, "%s", json_string_value(json_object_get(fn, "name")));
            open_item(st, ITEM_CALL, out);
        }
        const json_t *args = json_object_get(fn, "arguments");
        if (st->open == ITEM_CALL && json_string_length(args)) {
            sbuf_append(&st->text, json_string_value(args), json_string_length(args));
            emit(st, out, "response.function_call_arguments.delta",
                 json_pack("{s:s, s:i, s:O}", "item_id", st->item_id, "output_index", st->open_index, "delta", args));
        }
    }
    const json_t *fr = json_object_get(c0, "finish_reason");
    if (json_is_string(fr)) {
        close_item(st, out);
        st->finish = strcmp(json_string_value(fr), "length") == 0  ? "length"
                     : strcmp(json_string_value(fr), "abort") == 0 ? "abort"
                                                                   : "stop";
    }
}

static void stream_end(void *state, sbuf *out) {
    resp_state *st = state;
    if (st->ended) return;
    st->ended = true;
    close_item(st, out);
    json_t *o = response_object(st, json_incref(st->output), st->finish, json_incref(st->usage), false);
    const char *status = json_string_value(json_object_get(o, "status"));
    const char *type = strcmp(status, "incomplete") == 0 ? "response.incomplete"
                       : strcmp(status, "failed") == 0   ? "response.failed"
                                                         : "response.completed";
    emit(st, out, type, json_pack("{s:o}", "response", o));
}

static char *error_body(const srv_api_error *e, size_t *len) { return srv_error_body(e, len); }

static void stream_error(void *state, const srv_api_error *e, sbuf *out) {
    resp_state *st = state;
    emit(st, out, "error", json_pack("{s:s, s:s, s:s}", "code", e->code ? e->code : e->type ? e->type : "server_error",
                                     "message", e->message, "param", e->param));
    st->ended = true;
}

const srv_adapter_ops srv_responses_api = {
    .name = "responses",
    .to_chat = to_chat,
    .whole = whole,
    .stream_begin = stream_begin,
    .stream_chunk = stream_chunk,
    .stream_end = stream_end,
    .error_body = error_body,
    .stream_error = stream_error,
    .free_state = state_free,
    .id_prefix = "resp_",
};
