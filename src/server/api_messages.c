/*
 * api_messages.c - Anthropic's Messages API (POST /v1/messages, and POST
 * /v1/messages/count_tokens) as an adapter over Chat Completions
 * (api_adapter.h), for Claude Code and the Anthropic SDKs.
 *
 * Request -> chat body:
 *   system (a string, or text blocks)     a system message first
 *   messages, role user or assistant:
 *     text, image (source base64 or url)   text and image_url parts
 *     tool_use (assistant)                 tool_calls (id, name, arguments =
 *                                          the input's JSON text)
 *     tool_result (user)                   a tool message per result
 *                                          (tool_call_id = tool_use_id; its
 *                                          content a string or text / image
 *                                          blocks; is_error writes "Error:"
 *                                          before it)
 *     thinking, redacted_thinking          skipped (templates leave earlier
 *                                          thinking out of the history)
 *     a last assistant message             continued (continue_final_message):
 *                                          Anthropic's prefill
 *   tools [{name, description, input_schema}]   function tools
 *   tool_choice {type: auto|any|tool|none}       auto / required / named /
 *                                                none; disable_parallel_tool_use
 *                                                -> parallel_tool_calls false
 *   max_tokens (required), stop_sequences -> stop; temperature, top_p,
 *   top_k, stream (with include_usage and continuous_usage_stats, so that
 *   message_start has the prompt's size)
 *   thinking {type: enabled, budget_tokens}      thinking_token_budget (needs
 *                                                --reasoning-parser) and
 *                                                enable_thinking true for the
 *                                                template; {type: disabled}:
 *                                                enable_thinking false;
 *                                                {type: adaptive}: the model's
 *                                                own way
 *   output_config {format: json_schema, effort}  response_format, and
 *   (and the older output_format)                reasoning_effort for the
 *                                                template
 * metadata, service_tier, container, context_management and cache_control
 * marks are accepted and ignored, as the anthropic-version / anthropic-beta
 * headers are; vLLM's sampling extras (seed, min_p, logit_bias, ...) pass
 * through. Refused with a 400: tools other than custom ones (Anthropic's
 * server tools: web search, code execution, ...), mcp_servers, document and
 * other block types. A system text block of Claude Code's
 * "x-anthropic-billing-header: ...; cch=...;" is dropped: it changes with
 * every request, and at the head of the prompt it would defeat the prefix
 * cache (vLLM drops it too).
 *
 * Tool calls: "auto", Anthropic's default when tools are given, parses the
 * model's calls whether or not the server has --enable-auto-tool-choice
 * (srv_messages_api.auto_tools): a Messages client always expects tool_use
 * blocks back, and has no way to ask for tools in the prompt without them.
 * The format is the server's (--tool-call-parser, else the model's).
 *
 * Response: a "message" whose content holds a thinking block (signature
 * ""), a text block and tool_use blocks (id: the chat call's, input: the
 * parsed arguments), in that order; stop_reason end_turn, max_tokens,
 * stop_sequence (stop_sequence set, from chat's stop_reason) or tool_use;
 * usage input_tokens (not read from the prefix cache), cache_read_input_tokens
 * (read from it), output_tokens. Streams send the published sequence:
 * message_start (content empty, usage.input_tokens the whole prompt), ping,
 * then per block content_block_start, its deltas (thinking_delta then
 * signature_delta, text_delta, input_json_delta) and content_block_stop,
 * then message_delta (stop_reason, stop_sequence, the usage as in a whole
 * response) and message_stop. Errors: {"type": "error", "error": {"type",
 * "message"}} with the HTTP status; in a stream an `error` event.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/api_adapter.h"

#define BAD(param, ...) srv_api_fail(err, 400, param, __VA_ARGS__)

static const json_t *field(const json_t *o, const char *key) {
    const json_t *v = json_object_get(o, key);
    return v && !json_is_null(v) ? v : NULL;
}

static bool is(const char *a, const char *b) { return a && strcmp(a, b) == 0; }

static const char *type_of(const json_t *block) { return json_string_value(json_object_get(block, "type")); }

/* ---- per request -------------------------------------------------------- */

enum { BLOCK_NONE = 0, BLOCK_THINKING, BLOCK_TEXT, BLOCK_TOOL };

typedef struct msg_state {
    char id[96];
    /* streaming */
    bool started;          /* message_start went out */
    int open;              /* BLOCK_*: the block being streamed */
    int open_index;        /* its index */
    int n_blocks;
    bool tool_used;        /* a tool_use block went out */
    const char *finish;    /* the chat finish_reason (a static string), NULL until it comes */
    char *stop_sequence;   /* chat's stop_reason when a stop string ended the output */
    json_int_t prompt_tokens, cached_tokens, completion_tokens;
    bool ended;
} msg_state;

static void state_free(void *p) {
    msg_state *st = p;
    if (!st) return;
    free(st->stop_sequence);
    free(st);
}

/* ---- request: Messages -> Chat Completions -------------------------------- */

/* An image block -> an image_url part; NULL with err. */
static json_t *image_part(const json_t *block, const char *param, srv_api_error *err) {
    const json_t *src = json_object_get(block, "source");
    const char *type = json_string_value(json_object_get(src, "type"));
    if (is(type, "base64")) {
        const json_t *mt = json_object_get(src, "media_type"), *data = json_object_get(src, "data");
        if (!json_is_string(mt) || !json_is_string(data)) {
            BAD(param, "'%s.source' (base64) needs 'media_type' and 'data' (strings)", param);
            return NULL;
        }
        size_t n = json_string_length(mt) + json_string_length(data) + 16;
        char *url = malloc(n);
        if (!url) {
            srv_api_fail(err, 500, NULL, "out of memory");
            return NULL;
        }
        int len = snprintf(url, n, "data:%s;base64,%s", json_string_value(mt), json_string_value(data));
        json_t *part = json_pack("{s:s, s:{s:s%}}", "type", "image_url", "image_url", "url", url, (size_t)len);
        free(url);
        return part;
    }
    if (is(type, "url")) {
        const json_t *url = json_object_get(src, "url");
        if (!json_is_string(url)) {
            BAD(param, "'%s.source.url' must be a string", param);
            return NULL;
        }
        /* the chat path takes data URLs (and file:// under --allowed-local-media-path): others are its 400 */
        return json_pack("{s:s, s:{s:O}}", "type", "image_url", "image_url", "url", url);
    }
    BAD(param, "'%s.source.type' must be \"base64\" or \"url\"%s", param,
        is(type, "file") ? " (files are not supported)" : "");
    return NULL;
}

/* A text block -> a text part (the string as it is: it may hold NUL). */
static json_t *text_part(const json_t *block, const char *param, srv_api_error *err) {
    const json_t *t = json_object_get(block, "text");
    if (!json_is_string(t)) {
        BAD(param, "'%s.text' must be a string", param);
        return NULL;
    }
    return json_pack("{s:s, s:O}", "type", "text", "text", t);
}

/* A tool_result block -> a tool message. */
static json_t *tool_message(const json_t *block, const char *param, srv_api_error *err) {
    const json_t *id = json_object_get(block, "tool_use_id"), *content = field(block, "content");
    if (!json_is_string(id)) {
        BAD(param, "'%s.tool_use_id' must be a string", param);
        return NULL;
    }
    json_t *parts = json_array();
    if (json_is_true(json_object_get(block, "is_error")))
        json_array_append_new(parts, json_pack("{s:s, s:s}", "type", "text", "text", "Error:"));
    if (json_is_string(content)) {
        json_array_append_new(parts, json_pack("{s:s, s:O}", "type", "text", "text", content));
    } else if (json_is_array(content)) {
        for (size_t k = 0; k < json_array_size(content); k++) {
            const json_t *b = json_array_get(content, k);
            char p[160];
            snprintf(p, sizeof p, "%s.content[%zu]", param, k);
            const char *type = type_of(b);
            json_t *part = is(type, "text")    ? text_part(b, p, err)
                           : is(type, "image") ? image_part(b, p, err)
                                               : NULL;
            if (!part && !is(type, "text") && !is(type, "image"))
                BAD(p, "'%s' has type '%.40s'; a tool result holds text and image blocks", p, type ? type : "(none)");
            if (!part) {
                json_decref(parts);
                return NULL;
            }
            json_array_append_new(parts, part);
        }
    } else if (content) {
        json_decref(parts);
        BAD(param, "'%s.content' must be a string or a list of text and image blocks", param);
        return NULL;
    }
    return json_pack("{s:s, s:O, s:o}", "role", "tool", "tool_call_id", id, "content", parts);
}

/* One assistant message's blocks -> one assistant message. */
static json_t *assistant_message(const json_t *content, const char *param, srv_api_error *err) {
    json_t *parts = json_array(), *calls = json_array();
    for (size_t k = 0; k < json_array_size(content); k++) {
        const json_t *b = json_array_get(content, k);
        char p[96];
        snprintf(p, sizeof p, "%s.content[%zu]", param, k);
        const char *type = type_of(b);
        json_t *part = NULL;
        if (is(type, "text")) {
            part = text_part(b, p, err);
        } else if (is(type, "image")) {
            part = image_part(b, p, err);
        } else if (is(type, "tool_use")) {
            const json_t *id = json_object_get(b, "id"), *name = json_object_get(b, "name");
            const json_t *input = field(b, "input");
            if (!json_is_string(id) || !json_is_string(name) || (input && !json_is_object(input))) {
                BAD(p, "'%s' (tool_use) needs 'id' and 'name' (strings) and 'input' (an object)", p);
            } else {
                char *args = input ? json_dumps(input, JSON_COMPACT) : strdup("{}");
                json_t *call = args ? json_pack("{s:O, s:s, s:{s:O, s:s}}", "id", id, "type", "function", "function",
                                                "name", name, "arguments", args)
                                    : NULL;
                free(args);
                if (call) {
                    json_array_append_new(calls, call);
                    continue;
                }
                srv_api_fail(err, 500, NULL, "out of memory");
            }
        } else if (is(type, "thinking") || is(type, "redacted_thinking")) {
            continue; /* earlier thinking: templates leave it out of the history */
        } else {
            BAD(p, "'%s' has type '%.40s'; an assistant message holds text, image, tool_use and thinking blocks", p,
                type ? type : "(none)");
        }
        if (!part) {
            json_decref(parts);
            json_decref(calls);
            return NULL;
        }
        json_array_append_new(parts, part);
    }
    json_t *m = json_pack("{s:s}", "role", "assistant");
    /* "" rather than no content, as vLLM gives templates */
    json_object_set_new(m, "content", json_array_size(parts) ? parts : (json_decref(parts), json_string("")));
    if (json_array_size(calls)) json_object_set_new(m, "tool_calls", calls);
    else json_decref(calls);
    return m;
}

/* One user message's blocks -> user messages and tool messages, in order
 * (a user message for each run of text and image blocks). */
static int user_messages(const json_t *content, const char *param, json_t *out, srv_api_error *err) {
    json_t *parts = json_array();
    for (size_t k = 0; k < json_array_size(content); k++) {
        const json_t *b = json_array_get(content, k);
        char p[96];
        snprintf(p, sizeof p, "%s.content[%zu]", param, k);
        const char *type = type_of(b);
        json_t *part = NULL;
        if (is(type, "text")) {
            part = text_part(b, p, err);
        } else if (is(type, "image")) {
            part = image_part(b, p, err);
        } else if (is(type, "tool_result")) {
            json_t *tm = tool_message(b, p, err);
            if (!tm) {
                json_decref(parts);
                return -1;
            }
            if (json_array_size(parts)) {
                json_array_append_new(out, json_pack("{s:s, s:o}", "role", "user", "content", parts));
                parts = json_array();
            }
            json_array_append_new(out, tm);
            continue;
        } else {
            BAD(p, "'%s' has type '%.40s'; a user message holds text, image and tool_result blocks%s", p,
                type ? type : "(none)", is(type, "document") ? " (documents are not supported)" : "");
        }
        if (!part) {
            json_decref(parts);
            return -1;
        }
        json_array_append_new(parts, part);
    }
    if (json_array_size(parts) || json_array_size(content) == 0)
        json_array_append_new(out, json_pack("{s:s, s:o}", "role", "user", "content", parts));
    else json_decref(parts);
    return 0;
}

static int chat_messages(const json_t *msgs, json_t *out, bool *prefill, srv_api_error *err) {
    if (!msgs) return BAD("messages", "'messages' is required");
    if (!json_is_array(msgs) || json_array_size(msgs) == 0)
        return BAD("messages", "'messages' must be a non-empty list of messages");
    *prefill = false;
    for (size_t i = 0; i < json_array_size(msgs); i++) {
        const json_t *m = json_array_get(msgs, i);
        char param[64];
        snprintf(param, sizeof param, "messages[%zu]", i);
        const char *role = json_string_value(json_object_get(m, "role"));
        if (!is(role, "user") && !is(role, "assistant"))
            return BAD(param, "'%s.role' must be \"user\" or \"assistant\" (the system prompt goes in 'system')",
                       param);
        const json_t *content = json_object_get(m, "content");
        if (json_is_string(content)) {
            json_array_append_new(out, json_pack("{s:s, s:O}", "role", role, "content", content));
        } else if (!json_is_array(content)) {
            return BAD(param, "'%s.content' must be a string or a list of content blocks", param);
        } else if (is(role, "assistant")) {
            json_t *am = assistant_message(content, param, err);
            if (!am) return -1;
            json_array_append_new(out, am);
        } else if (user_messages(content, param, out, err)) {
            return -1;
        }
        /* a last assistant message with text is continued: Anthropic's prefill */
        if (i + 1 == json_array_size(msgs) && is(role, "assistant")) {
            const json_t *last = json_array_get(out, json_array_size(out) - 1);
            const json_t *c = json_object_get(last, "content");
            *prefill = !json_object_get(last, "tool_calls") &&
                       (json_is_array(c) ? json_array_size(c) > 0 : json_string_length(c) > 0);
        }
    }
    return 0;
}

/* The system prompt: a string or text blocks (Claude Code's billing header
 * block dropped). */
static int chat_system(const json_t *sys, json_t *messages, srv_api_error *err) {
    if (!sys) return 0;
    if (json_is_string(sys)) {
        json_array_append_new(messages, json_pack("{s:s, s:O}", "role", "system", "content", sys));
        return 0;
    }
    if (!json_is_array(sys)) return BAD("system", "'system' must be a string or a list of text blocks");
    json_t *parts = json_array();
    for (size_t k = 0; k < json_array_size(sys); k++) {
        const json_t *b = json_array_get(sys, k);
        char p[32];
        snprintf(p, sizeof p, "system[%zu]", k);
        if (!is(type_of(b), "text")) {
            json_decref(parts);
            return BAD(p, "'%s' must be a text block", p);
        }
        json_t *part = text_part(b, p, err);
        if (!part) {
            json_decref(parts);
            return -1;
        }
        static const char billing[] = "x-anthropic-billing-header:";
        if (strncmp(json_string_value(json_object_get(part, "text")), billing, sizeof billing - 1) == 0) {
            json_decref(part);
            continue;
        }
        json_array_append_new(parts, part);
    }
    if (json_array_size(parts) == 0) {
        json_decref(parts);
        return 0;
    }
    json_array_append_new(messages, json_pack("{s:s, s:o}", "role", "system", "content", parts));
    return 0;
}

static int chat_tools(const json_t *tools, json_t *chat, srv_api_error *err) {
    if (!tools) return 0;
    if (!json_is_array(tools)) return BAD("tools", "'tools' must be a list of tools");
    json_t *out = json_array();
    for (size_t i = 0; i < json_array_size(tools); i++) {
        const json_t *t = json_array_get(tools, i);
        const char *type = type_of(t);
        if (!json_is_object(t) || (type && !is(type, "custom"))) {
            json_decref(out);
            return BAD("tools", "'tools[%zu]' has type '%.60s': only custom tools ({name, description, input_schema}) "
                       "are supported, not Anthropic's server tools", i, type ? type : "(none)");
        }
        const json_t *name = json_object_get(t, "name"), *schema = json_object_get(t, "input_schema");
        const json_t *desc = field(t, "description");
        if (!json_is_string(name) || !json_is_object(schema) || (desc && !json_is_string(desc))) {
            json_decref(out);
            return BAD("tools", "'tools[%zu]' needs 'name' (a string) and 'input_schema' (a JSON Schema object)", i);
        }
        json_t *fn = json_pack("{s:O}", "name", name);
        if (desc) json_object_set(fn, "description", (json_t *)desc);
        json_object_set(fn, "parameters", (json_t *)schema);
        json_array_append_new(out, json_pack("{s:s, s:o}", "type", "function", "function", fn));
    }
    if (json_array_size(out)) json_object_set_new(chat, "tools", out);
    else json_decref(out);
    return 0;
}

static int chat_tool_choice(const json_t *tc, json_t *chat, srv_api_error *err) {
    if (!tc) return 0;
    const char *type = json_is_object(tc) ? type_of(tc) : NULL;
    const json_t *name = json_object_get(tc, "name"), *dp = field(tc, "disable_parallel_tool_use");
    if (dp && !json_is_boolean(dp))
        return BAD("tool_choice", "'tool_choice.disable_parallel_tool_use' must be a boolean");
    bool tools = json_object_get(chat, "tools") != NULL;
    if (is(type, "auto") || is(type, "none")) {
        /* without tools, Anthropic takes either; chat refuses a choice without tools */
        if (tools) json_object_set_new(chat, "tool_choice", json_string(type));
    } else if (is(type, "any")) {
        json_object_set_new(chat, "tool_choice", json_string("required"));
    } else if (is(type, "tool") && json_is_string(name)) {
        json_object_set_new(chat, "tool_choice",
                            json_pack("{s:s, s:{s:O}}", "type", "function", "function", "name", name));
    } else {
        return BAD("tool_choice", "'tool_choice' must be {\"type\": \"auto\"}, {\"type\": \"any\"}, {\"type\": "
                   "\"none\"} or {\"type\": \"tool\", \"name\": ...}");
    }
    if (dp && json_is_true(dp)) json_object_set_new(chat, "parallel_tool_calls", json_false());
    return 0;
}

/* chat_template_kwargs, made an object (the body's own first) */
static json_t *template_kwargs(json_t *chat) {
    json_t *kw = json_object_get(chat, "chat_template_kwargs");
    if (!json_is_object(kw)) json_object_set_new(chat, "chat_template_kwargs", kw = json_object());
    return kw;
}

static int chat_thinking(const srv_parse_ctx *c, const json_t *th, bool counting, json_t *chat, srv_api_error *err) {
    if (!th) return 0;
    const char *type = json_is_object(th) ? type_of(th) : NULL;
    if (is(type, "enabled")) {
        const json_t *budget = json_object_get(th, "budget_tokens");
        if (!json_is_integer(budget) || json_integer_value(budget) < 0)
            return BAD("thinking", "'thinking.budget_tokens' must be a non-negative integer");
        json_object_set_new(template_kwargs(chat), "enable_thinking", json_true());
        if (counting) return 0; /* the prompt is all that counts */
        if (!c->reasoning)
            return BAD("thinking", "'thinking' needs a reasoning model served with --reasoning-parser (this server "
                       "returns no thinking blocks)");
        json_object_set(chat, "thinking_token_budget", (json_t *)budget);
        return 0;
    }
    if (is(type, "disabled")) {
        json_object_set_new(template_kwargs(chat), "enable_thinking", json_false());
        return 0;
    }
    if (is(type, "adaptive")) return 0;
    return BAD("thinking", "'thinking' must be {\"type\": \"enabled\", \"budget_tokens\": N}, {\"type\": \"disabled\"} "
               "or {\"type\": \"adaptive\"}");
}

/* output_config {format, effort}, and the older output_format. */
static int chat_output(const json_t *body, json_t *chat, srv_api_error *err) {
    const json_t *oc = field(body, "output_config");
    if (oc && !json_is_object(oc)) return BAD("output_config", "'output_config' must be an object");
    const json_t *format = oc ? field(oc, "format") : NULL, *effort = oc ? field(oc, "effort") : NULL;
    const char *param = "output_config.format";
    if (!format && (format = field(body, "output_format"))) param = "output_format";
    if (format) {
        const json_t *schema = json_object_get(format, "schema");
        if (!is(type_of(format), "json_schema") || !json_is_object(schema))
            return BAD(param, "'%s' must be {\"type\": \"json_schema\", \"schema\": {...}}", param);
        json_object_set_new(chat, "response_format", json_pack("{s:s, s:{s:s, s:O}}", "type", "json_schema",
                                                               "json_schema", "name", "output", "schema", schema));
    }
    if (effort) {
        if (!json_is_string(effort)) return BAD("output_config", "'output_config.effort' must be a string");
        json_object_set(template_kwargs(chat), "reasoning_effort", (json_t *)effort);
    }
    return 0;
}

static int chat_stop(const json_t *stop, json_t *chat, srv_api_error *err) {
    if (!stop) return 0;
    if (!json_is_array(stop)) return BAD("stop_sequences", "'stop_sequences' must be a list of strings");
    for (size_t i = 0; i < json_array_size(stop); i++) {
        const json_t *s = json_array_get(stop, i);
        if (!json_is_string(s) || json_string_length(s) == 0)
            return BAD("stop_sequences", "'stop_sequences[%zu]' must be a non-empty string", i);
    }
    if (json_array_size(stop)) json_object_set(chat, "stop", (json_t *)stop);
    return 0;
}

/* The chat body; counting: for count_tokens (max_tokens not needed, and
 * only what shapes the prompt is kept). */
static int convert(const srv_parse_ctx *c, const json_t *body, bool counting, json_t **chat_out, srv_api_error *err) {
    *chat_out = NULL;
    const json_t *v;
    if (!counting) {
        v = field(body, "max_tokens");
        if (!v) return BAD("max_tokens", "'max_tokens' is required");
        if (!json_is_integer(v) || json_integer_value(v) < 1)
            return BAD("max_tokens", "'max_tokens' must be an integer of at least 1");
    }
    if ((v = field(body, "mcp_servers")) && !(json_is_array(v) && json_array_size(v) == 0))
        return BAD("mcp_servers", "'mcp_servers' is not supported: this server connects to no MCP server");
    json_t *chat = json_object(), *messages = json_array();
    json_object_set_new(chat, "messages", messages);
    /* the fields of the same name, and vLLM's extras a client may add; a
     * count keeps the first two (what shapes the prompt) */
    static const char *const same[] = {"model", "chat_template_kwargs", "temperature", "top_p", "top_k", "seed",
                                       "min_p", "repetition_penalty", "presence_penalty", "frequency_penalty",
                                       "logit_bias", "cache_salt", "include_reasoning", "stream"};
    size_t n_same = sizeof same / sizeof same[0];
    for (size_t i = 0; i < (counting ? 2 : n_same); i++)
        if (field(body, same[i])) json_object_set(chat, same[i], json_object_get(body, same[i]));
    bool prefill = false;
    if (chat_system(field(body, "system"), messages, err) ||
        chat_messages(field(body, "messages"), messages, &prefill, err) ||
        chat_tools(field(body, "tools"), chat, err) ||
        (!counting && chat_tool_choice(field(body, "tool_choice"), chat, err)) ||
        chat_thinking(c, field(body, "thinking"), counting, chat, err) ||
        (!counting && (chat_output(body, chat, err) || chat_stop(field(body, "stop_sequences"), chat, err)))) {
        json_decref(chat);
        return -1;
    }
    if (prefill) {
        json_object_set_new(chat, "continue_final_message", json_true());
        json_object_set_new(chat, "add_generation_prompt", json_false());
    }
    if (!counting) {
        json_object_set(chat, "max_tokens", json_object_get(body, "max_tokens"));
        if (json_is_true(field(body, "stream")))
            json_object_set_new(chat, "stream_options",
                                json_pack("{s:b, s:b}", "include_usage", 1, "continuous_usage_stats", 1));
    }
    *chat_out = chat;
    return 0;
}

static int to_chat(const srv_parse_ctx *c, const json_t *body, const char *id, json_t **chat, void **state,
                   srv_api_error *err) {
    *state = NULL;
    if (convert(c, body, false, chat, err)) return -1;
    msg_state *st = calloc(1, sizeof *st);
    if (!st) {
        json_decref(*chat);
        *chat = NULL;
        return srv_api_fail(err, 500, NULL, "out of memory");
    }
    snprintf(st->id, sizeof st->id, "%s", id);
    *state = st;
    return 0;
}

int srv_messages_count_chat(const srv_parse_ctx *c, const json_t *body, json_t **chat, srv_api_error *err) {
    return convert(c, body, true, chat, err);
}

/* ---- response: Chat Completions -> Messages ------------------------------- */

/* Anthropic's usage: input_tokens are those not read from the cache. */
static json_t *usage_json(json_int_t prompt, json_int_t cached, json_int_t completion) {
    return json_pack("{s:I, s:I, s:I, s:I}", "input_tokens", prompt - cached, "cache_creation_input_tokens",
                     (json_int_t)0, "cache_read_input_tokens", cached, "output_tokens", completion);
}

static json_int_t cached_of(const json_t *usage) {
    return json_integer_value(json_object_get(json_object_get(usage, "prompt_tokens_details"), "cached_tokens"));
}

/* The stop_reason for chat's finish_reason; *seq gets the stop string (or NULL). */
static const char *stop_reason_of(const char *finish, bool tool_used, const json_t *chat_stop, const char **seq) {
    *seq = NULL;
    if (is(finish, "length")) return "max_tokens";
    if (tool_used || is(finish, "tool_calls")) return "tool_use";
    if (json_is_string(chat_stop)) {
        *seq = json_string_value(chat_stop);
        return "stop_sequence";
    }
    return "end_turn"; /* stop (EOS, a stop token), and abort */
}

static json_t *message_object(const msg_state *st, const char *model, json_t *content, const char *stop_reason,
                              const char *stop_sequence, json_t *usage) {
    return json_pack("{s:s, s:s, s:s, s:s, s:o, s:s?, s:s?, s:o}", "id", st->id, "type", "message", "role",
                     "assistant", "model", model ? model : "", "content", content, "stop_reason", stop_reason,
                     "stop_sequence", stop_sequence, "usage", usage);
}

/* A tool call's arguments as the input object ({} when they are not JSON). */
static json_t *input_of(const json_t *args) {
    json_t *in = json_is_string(args) ? json_loadb(json_string_value(args), json_string_length(args), 0, NULL) : NULL;
    return in ? in : json_object();
}

static char *whole(void *state, const json_t *chat, size_t *len) {
    msg_state *st = state;
    const json_t *c0 = json_array_get(json_object_get(chat, "choices"), 0);
    const json_t *msg = json_object_get(c0, "message");
    json_t *content = json_array();
    const json_t *r = json_object_get(msg, "reasoning"), *text = json_object_get(msg, "content");
    if (json_string_length(r))
        json_array_append_new(content,
                              json_pack("{s:s, s:O, s:s}", "type", "thinking", "thinking", r, "signature", ""));
    if (json_string_length(text)) json_array_append_new(content, json_pack("{s:s, s:O}", "type", "text", "text", text));
    const json_t *calls = json_object_get(msg, "tool_calls");
    for (size_t i = 0; i < json_array_size(calls); i++) {
        const json_t *tc = json_array_get(calls, i), *fn = json_object_get(tc, "function");
        json_array_append_new(content, json_pack("{s:s, s:O, s:O, s:o}", "type", "tool_use", "id",
                                                 json_object_get(tc, "id"), "name", json_object_get(fn, "name"),
                                                 "input", input_of(json_object_get(fn, "arguments"))));
    }
    const char *seq;
    const char *reason = stop_reason_of(json_string_value(json_object_get(c0, "finish_reason")),
                                        json_array_size(calls) > 0, json_object_get(c0, "stop_reason"), &seq);
    const json_t *u = json_object_get(chat, "usage");
    json_t *usage = usage_json(json_integer_value(json_object_get(u, "prompt_tokens")), cached_of(u),
                               json_integer_value(json_object_get(u, "completion_tokens")));
    json_t *o = message_object(st, json_string_value(json_object_get(chat, "model")), content, reason, seq, usage);
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    *len = s ? strlen(s) : 0;
    return s;
}

/* ---- streams ----------------------------------------------------------------- */

/* One event: {"type": type, ...members of o} (o consumed). */
static void emit(sbuf *out, const char *type, json_t *o) {
    json_t *e = json_pack("{s:s}", "type", type);
    if (o) json_object_update(e, o);
    json_decref(o);
    srv_sse_event(out, type, e);
}

static void close_block(msg_state *st, sbuf *out) {
    if (st->open == BLOCK_NONE) return;
    if (st->open == BLOCK_THINKING) /* Anthropic's signs its thinking; there is nothing to sign here */
        emit(out, "content_block_delta", json_pack("{s:i, s:{s:s, s:s}}", "index", st->open_index, "delta", "type",
                                                   "signature_delta", "signature", ""));
    emit(out, "content_block_stop", json_pack("{s:i}", "index", st->open_index));
    st->open = BLOCK_NONE;
}

/* Opens a block of kind k (closing the one before); block consumed. */
static void open_block(msg_state *st, int k, json_t *block, sbuf *out) {
    close_block(st, out);
    st->open = k;
    st->open_index = st->n_blocks++;
    emit(out, "content_block_start", json_pack("{s:i, s:o}", "index", st->open_index, "content_block", block));
}

static void delta(msg_state *st, sbuf *out, json_t *d) {
    emit(out, "content_block_delta", json_pack("{s:i, s:o}", "index", st->open_index, "delta", d));
}

static void stream_begin(void *state, sbuf *out) {
    (void)state, (void)out; /* message_start waits for the first chunk: its usage has the prompt's size */
}

static void message_start(msg_state *st, const char *model, sbuf *out) {
    st->started = true;
    json_t *usage = json_pack("{s:I, s:I, s:I, s:I}", "input_tokens", st->prompt_tokens, "cache_creation_input_tokens",
                              (json_int_t)0, "cache_read_input_tokens", (json_int_t)0, "output_tokens", (json_int_t)0);
    emit(out, "message_start",
         json_pack("{s:o}", "message", message_object(st, model, json_array(), NULL, NULL, usage)));
    emit(out, "ping", NULL);
}

static void stream_chunk(void *state, const json_t *chunk, sbuf *out) {
    msg_state *st = state;
    const json_t *usage = json_object_get(chunk, "usage");
    if (json_is_object(usage)) {
        st->prompt_tokens = json_integer_value(json_object_get(usage, "prompt_tokens"));
        st->completion_tokens = json_integer_value(json_object_get(usage, "completion_tokens"));
        st->cached_tokens = cached_of(usage);
    }
    if (!st->started) message_start(st, json_string_value(json_object_get(chunk, "model")), out);
    const json_t *c0 = json_array_get(json_object_get(chunk, "choices"), 0);
    if (!c0) return;
    const json_t *d = json_object_get(c0, "delta"), *v;
    if ((v = json_object_get(d, "reasoning")) && json_string_length(v)) {
        if (st->open != BLOCK_THINKING)
            open_block(st, BLOCK_THINKING, json_pack("{s:s, s:s, s:s}", "type", "thinking", "thinking", "", "signature",
                                                     ""), out);
        delta(st, out, json_pack("{s:s, s:O}", "type", "thinking_delta", "thinking", v));
    }
    if ((v = json_object_get(d, "content")) && json_string_length(v)) {
        if (st->open != BLOCK_TEXT)
            open_block(st, BLOCK_TEXT, json_pack("{s:s, s:s}", "type", "text", "text", ""), out);
        delta(st, out, json_pack("{s:s, s:O}", "type", "text_delta", "text", v));
    }
    const json_t *calls = json_object_get(d, "tool_calls");
    for (size_t i = 0; i < json_array_size(calls); i++) {
        const json_t *tc = json_array_get(calls, i), *fn = json_object_get(tc, "function");
        const json_t *id = json_object_get(tc, "id"), *name = json_object_get(fn, "name");
        if (json_is_string(id)) { /* a new call: its id and name come first */
            const char *nm = json_string_value(name);
            open_block(st, BLOCK_TOOL, json_pack("{s:s, s:O, s:s, s:{}}", "type", "tool_use", "id", id, "name",
                                                 nm ? nm : "", "input"), out);
            st->tool_used = true;
        }
        const json_t *args = json_object_get(fn, "arguments");
        if (st->open == BLOCK_TOOL && json_string_length(args))
            delta(st, out, json_pack("{s:s, s:O}", "type", "input_json_delta", "partial_json", args));
    }
    const json_t *fr = json_object_get(c0, "finish_reason");
    if (json_is_string(fr)) {
        close_block(st, out);
        st->finish = is(json_string_value(fr), "length") ? "length" : is(json_string_value(fr), "tool_calls")
                                                                          ? "tool_calls"
                                                                          : "stop";
        const json_t *sr = json_object_get(c0, "stop_reason");
        if (json_is_string(sr) && !st->stop_sequence && !(st->stop_sequence = strdup(json_string_value(sr))))
            out->oom = true;
    }
}

static void stream_end(void *state, sbuf *out) {
    msg_state *st = state;
    if (st->ended) return;
    st->ended = true;
    if (!st->started) message_start(st, NULL, out);
    close_block(st, out);
    json_t *seq_json = st->stop_sequence ? json_string(st->stop_sequence) : NULL;
    const char *seq;
    const char *reason = stop_reason_of(st->finish, st->tool_used, seq_json, &seq);
    emit(out, "message_delta",
         json_pack("{s:{s:s, s:s?}, s:o}", "delta", "stop_reason", reason, "stop_sequence", seq, "usage",
                   usage_json(st->prompt_tokens, st->cached_tokens, st->completion_tokens)));
    json_decref(seq_json);
    emit(out, "message_stop", NULL);
}

/* Anthropic's error types by HTTP status. */
static const char *error_type(int status) {
    switch (status) {
    case 400: case 405: case 422: return "invalid_request_error";
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503: case 529: return "overloaded_error";
    default: return status >= 400 && status < 500 ? "invalid_request_error" : "api_error";
    }
}

static json_t *error_json(const srv_api_error *e) {
    return json_pack("{s:s, s:{s:s, s:s}}", "type", "error", "error", "type", error_type(e->status), "message",
                     e->message);
}

static char *error_body(const srv_api_error *e, size_t *len) {
    json_t *o = error_json(e);
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (len) *len = s ? strlen(s) : 0;
    return s;
}

static void stream_error(void *state, const srv_api_error *e, sbuf *out) {
    msg_state *st = state;
    srv_sse_event(out, "error", error_json(e));
    st->ended = true;
}

const srv_adapter_ops srv_messages_api = {
    .name = "messages",
    .to_chat = to_chat,
    .whole = whole,
    .stream_begin = stream_begin,
    .stream_chunk = stream_chunk,
    .stream_end = stream_end,
    .error_body = error_body,
    .stream_error = stream_error,
    .free_state = state_free,
    .id_prefix = "msg_",
    .auto_tools = true,
};
