/*
 * api_structured.c - the structured-output and tool fields of a request
 * body -> one compiled grammar (src/grammar) and the tool-call settings of
 * the response.
 *
 * The spellings clients send, all taken:
 *   OpenAI   response_format {"type": "text" | "json_object" | "json_schema",
 *            "json_schema": {"name", "schema", "strict"}}; tools, tool_choice
 *            ("none" | "auto" | "required" | {"type": "function", "function":
 *            {"name"}}), parallel_tool_calls
 *   vLLM     structured_outputs {"json" | "regex" | "choice" | "grammar" |
 *            "json_object"}, and the older guided_json, guided_regex,
 *            guided_choice, guided_grammar (guided_decoding_backend ignored)
 *   llama.cpp grammar (GBNF text), json_schema (a schema object)
 * At most one constraint per request: two are a 400 naming both. A
 * grammar that does not compile is a 400 naming the field and, from the
 * compiler, the keyword and JSON pointer (or GBNF line, regex offset).
 *
 * Tool calls follow vLLM: "auto" needs the server's --enable-auto-tool-choice
 * (it is then the default when tools are given; without it the default is
 * "none" and an explicit "auto" is a 400), and the output is parsed for calls
 * in the model's format (--tool-call-parser, else the one the model's tokens
 * show, else hermes); "required" and a named function force a call with a
 * grammar in that format, and the output is parsed the same way.
 * finish_reason is "tool_calls" when "auto" or "required" produced calls.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>

#include "server/api_parse.h"

#define BAD(param, ...) srv_api_fail(err, 400, param, __VA_ARGS__)

static const json_t *field(const json_t *o, const char *key) {
    const json_t *v = json_object_get(o, key);
    return v && !json_is_null(v) ? v : NULL;
}

/* One constraint found in the body: where it came from and what it is. */
typedef struct found_spec {
    const char *param;   /* the field named in errors */
    gram_kind kind;
    const json_t *value; /* schema object/string, regex string, choice array, grammar string; NULL = none needed */
} found_spec;

static int take(found_spec *f, int *n, const char *param, gram_kind kind, const json_t *value, srv_api_error *err) {
    if (*n == 1)
        return BAD(param, "only one kind of structured output may be given per request: '%s' and '%s' both are",
                   f->param, param);
    *f = (found_spec){param, kind, value};
    (*n)++;
    return 0;
}

/* A schema: an object, or (vLLM) its JSON text. */
static int schema_value(const json_t *v, const char *param, srv_api_error *err) {
    if (json_is_object(v) || json_is_boolean(v) || json_is_string(v)) return 0;
    return BAD(param, "'%s' must be a JSON Schema (an object, or its JSON text)", param);
}

static int string_value(const json_t *v, const char *param, srv_api_error *err) {
    if (json_is_string(v) && json_string_length(v) > 0) return 0;
    return BAD(param, "'%s' must be a non-empty string", param);
}

static int choice_value(const json_t *v, const char *param, srv_api_error *err) {
    if (!json_is_array(v) || json_array_size(v) == 0) return BAD(param, "'%s' must be a non-empty list of strings", param);
    for (size_t i = 0; i < json_array_size(v); i++)
        if (!json_is_string(json_array_get(v, i)))
            return BAD(param, "'%s[%zu]' must be a string", param, i);
    return 0;
}

/* OpenAI's response_format. */
static int find_response_format(const json_t *body, found_spec *f, int *n, srv_api_error *err) {
    const json_t *rf = field(body, "response_format");
    if (!rf) return 0;
    const json_t *t = json_is_object(rf) ? json_object_get(rf, "type") : NULL;
    if (!json_is_string(t))
        return BAD("response_format", "'response_format' must be an object with a 'type' of \"text\", "
                   "\"json_object\" or \"json_schema\"");
    const char *type = json_string_value(t);
    if (strcmp(type, "text") == 0) return 0;
    if (strcmp(type, "json_object") == 0) return take(f, n, "response_format", GRAM_JSON_OBJECT, NULL, err);
    if (strcmp(type, "json_schema") == 0) {
        const json_t *js = field(rf, "json_schema");
        if (!json_is_object(js))
            return BAD("response_format", "'response_format.json_schema' must be an object with 'name' and 'schema'");
        const json_t *name = field(js, "name");
        if (name && !json_is_string(name)) return BAD("response_format", "'response_format.json_schema.name' must be a string");
        const json_t *schema = field(js, "schema");
        if (!schema) return take(f, n, "response_format", GRAM_JSON_OBJECT, NULL, err); /* no schema: any object */
        if (schema_value(schema, "response_format.json_schema.schema", err)) return -1;
        return take(f, n, "response_format", GRAM_JSON_SCHEMA, schema, err);
    }
    return BAD("response_format", "'response_format.type' must be \"text\", \"json_object\" or \"json_schema\", got "
               "\"%.64s\"", type);
}

/* vLLM's structured_outputs object. */
static int find_structured_outputs(const json_t *body, found_spec *f, int *n, srv_api_error *err) {
    const json_t *so = field(body, "structured_outputs");
    if (!so) return 0;
    if (!json_is_object(so)) return BAD("structured_outputs", "'structured_outputs' must be an object");
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)so, key, v) {
        if (json_is_null(v)) continue;
        char param[64];
        snprintf(param, sizeof param, "structured_outputs.%.40s", key);
        if (strcmp(key, "json") == 0) {
            if (schema_value(v, param, err) || take(f, n, "structured_outputs.json", GRAM_JSON_SCHEMA, v, err)) return -1;
        } else if (strcmp(key, "regex") == 0) {
            if (string_value(v, param, err) || take(f, n, "structured_outputs.regex", GRAM_REGEX, v, err)) return -1;
        } else if (strcmp(key, "choice") == 0) {
            if (choice_value(v, param, err) || take(f, n, "structured_outputs.choice", GRAM_CHOICE, v, err)) return -1;
        } else if (strcmp(key, "grammar") == 0) {
            if (string_value(v, param, err) || take(f, n, "structured_outputs.grammar", GRAM_GBNF, v, err)) return -1;
        } else if (strcmp(key, "json_object") == 0) {
            if (!json_is_boolean(v)) return BAD(param, "'%s' must be a boolean", param);
            if (json_is_true(v) && take(f, n, "structured_outputs.json_object", GRAM_JSON_OBJECT, NULL, err)) return -1;
        } else if (strcmp(key, "disable_fallback") == 0 || strcmp(key, "disable_any_whitespace") == 0 ||
                   strcmp(key, "disable_additional_properties") == 0 || strcmp(key, "backend") == 0) {
            continue; /* backend choices of vLLM's: one engine here */
        } else {
            return BAD(param, "'%s' is not supported (structured_outputs takes json, regex, choice, grammar, "
                       "json_object)", param);
        }
    }
    return 0;
}

/* vLLM's older guided_* fields and llama.cpp's grammar / json_schema. */
static int find_flat_fields(const json_t *body, found_spec *f, int *n, srv_api_error *err) {
    static const struct {
        const char *key;
        gram_kind kind;
    } flat[] = {{"guided_json", GRAM_JSON_SCHEMA}, {"guided_regex", GRAM_REGEX}, {"guided_choice", GRAM_CHOICE},
                {"guided_grammar", GRAM_GBNF},     {"json_schema", GRAM_JSON_SCHEMA}, {"grammar", GRAM_GBNF}};
    for (size_t i = 0; i < sizeof flat / sizeof flat[0]; i++) {
        const json_t *v = field(body, flat[i].key);
        if (!v) continue;
        int rc = flat[i].kind == GRAM_JSON_SCHEMA ? schema_value(v, flat[i].key, err)
                 : flat[i].kind == GRAM_CHOICE    ? choice_value(v, flat[i].key, err)
                                                  : string_value(v, flat[i].key, err);
        if (rc || take(f, n, flat[i].key, flat[i].kind, v, err)) return -1;
    }
    const json_t *ws = field(body, "guided_whitespace_pattern");
    if (ws) return BAD("guided_whitespace_pattern", "'guided_whitespace_pattern' is not supported");
    return 0;
}

/* tools / tool_choice / parallel_tool_calls (chat). */
static int find_tools(const srv_parse_ctx *c, const json_t *body, srv_gen_request *r, found_spec *f, int *n,
                      srv_api_error *err) {
    const json_t *tools = field(body, "tools"), *choice = field(body, "tool_choice");
    if (tools && !json_is_array(tools)) return BAD("tools", "'tools' must be a list of tools");
    if (tools && json_array_size(tools) == 0) tools = NULL;
    for (size_t i = 0; tools && i < json_array_size(tools); i++) {
        const json_t *t = json_array_get(tools, i), *type = json_object_get(t, "type");
        const json_t *fn = json_object_get(t, "function");
        if (!json_is_object(t) || !json_is_string(type) || strcmp(json_string_value(type), "function") != 0 ||
            !json_is_object(fn))
            return BAD("tools", "'tools[%zu]' must be {\"type\": \"function\", \"function\": {\"name\", ...}}", i);
        const json_t *name = json_object_get(fn, "name"), *params = field(fn, "parameters");
        if (!json_is_string(name) || json_string_length(name) == 0)
            return BAD("tools", "'tools[%zu].function.name' must be a non-empty string", i);
        if (params && !json_is_object(params))
            return BAD("tools", "'tools[%zu].function.parameters' must be a JSON Schema object", i);
    }
    bool parallel = true;
    const json_t *pt = field(body, "parallel_tool_calls");
    if (pt && !json_is_boolean(pt)) return BAD("parallel_tool_calls", "'parallel_tool_calls' must be a boolean");
    if (pt) parallel = json_is_true(pt);
    if (!choice) {
        if (!tools || !c->auto_tool_choice) return 0; /* "none" unless the server parses tool calls */
    } else if (json_is_string(choice) && strcmp(json_string_value(choice), "none") == 0) {
        return 0; /* the template still sees the tools; nothing is parsed */
    } else if (!tools) {
        return BAD("tool_choice", "when using 'tool_choice', 'tools' must be set");
    }
    r->tool_format = c->tool_parser_set ? c->tool_format : GRAM_TOOLS_HERMES;
    if (!choice || (json_is_string(choice) && strcmp(json_string_value(choice), "auto") == 0)) {
        if (!c->auto_tool_choice)
            return BAD("tool_choice", "\"auto\" tool choice requires the server's --enable-auto-tool-choice (and "
                       "--tool-call-parser when the model's format is not plain from its tokens)");
        r->parse_tools = true;
        r->tool_calls_finish = true;
        return 0;
    }
    if (json_is_string(choice) && strcmp(json_string_value(choice), "required") == 0) {
        r->parse_tools = true;
        r->tool_calls_finish = true;
        r->tool_parallel = parallel;
        return take(f, n, "tool_choice", GRAM_TOOL_CALL, tools, err);
    }
    const json_t *type = json_is_object(choice) ? json_object_get(choice, "type") : NULL;
    const json_t *fn = json_is_object(choice) ? json_object_get(choice, "function") : NULL;
    const json_t *name = json_is_object(fn) ? json_object_get(fn, "name") : NULL;
    if (!json_is_string(type) || strcmp(json_string_value(type), "function") != 0 || !json_is_string(name))
        return BAD("tool_choice", "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
                   "\"function\": {\"name\": ...}}");
    bool known = false;
    for (size_t i = 0; i < json_array_size(tools) && !known; i++) {
        const json_t *tn = json_object_get(json_object_get(json_array_get(tools, i), "function"), "name");
        known = strcmp(json_string_value(tn), json_string_value(name)) == 0;
    }
    if (!known) return BAD("tool_choice", "'tool_choice' names the function '%.100s', which is not in 'tools'",
                           json_string_value(name));
    if (!(r->tool_name = strdup(json_string_value(name)))) return srv_api_fail(err, 500, NULL, "out of memory");
    r->parse_tools = true;
    return take(f, n, "tool_choice", GRAM_TOOL_CALL, tools, err);
}

int srv_parse_structured(const srv_parse_ctx *c, const json_t *body, srv_gen_request *r, srv_api_error *err) {
    found_spec f = {0};
    int n = 0;
    if (find_response_format(body, &f, &n, err) || find_structured_outputs(body, &f, &n, err) ||
        find_flat_fields(body, &f, &n, err))
        return -1;
    if (r->kind == SRV_API_CHAT) {
        if (find_tools(c, body, r, &f, &n, err)) return -1;
    } else if (field(body, "tools") || field(body, "tool_choice")) {
        return BAD(field(body, "tools") ? "tools" : "tool_choice", "tools are for chat completions "
                   "(/v1/chat/completions)");
    }
    if (n == 0 && !r->parse_tools) return 0;
    /* formats that carry arguments as text read them by the tools' parameter types */
    const json_t *tools = field(body, "tools");
    bool typed = r->tool_format == GRAM_TOOLS_QWEN3_CODER || r->tool_format == GRAM_TOOLS_GLM45;
    if (r->parse_tools && typed && tools && !(r->tools_json = json_dumps(tools, JSON_COMPACT)))
        return srv_api_fail(err, 500, NULL, "out of memory");
    const char *param = n ? f.param : "tool_choice";
    if (!c->grammar_vocab) return srv_api_fail(err, 500, param, "structured output is not available");
    pdl_error pe;
    const gram_vocab *v = c->grammar_vocab(c->grammar_user, &pe);
    if (!v) return srv_api_fail(err, 500, param, "structured output is not available: %s", pe.message);
    if (r->parse_tools) r->tool_vocab = v;
    if (n == 0) return 0;
    char *text = NULL;
    gram_spec spec = {.kind = f.kind, .text = "", .tool_format = r->tool_format, .tool_name = r->tool_name,
                      .parallel = r->tool_parallel, .harmony = c->harmony && r->kind == SRV_API_CHAT};
    if (json_is_string(f.value)) {
        spec.text = json_string_value(f.value);
        spec.len = json_string_length(f.value);
    } else if (f.value) {
        if (!(text = json_dumps(f.value, JSON_COMPACT | JSON_ENCODE_ANY)))
            return srv_api_fail(err, 500, NULL, "out of memory");
        spec.text = text;
    }
    /* a forced call's grammar is made of the tools' parameter schemas: they are what failed */
    const char *at = f.kind == GRAM_TOOL_CALL ? "tools" : f.param;
    int turn = c->grammar_turn_take ? c->grammar_turn_take(c->grammar_turn_user, &c->grammar_limits) : SRV_TURN_OK;
    if (turn != SRV_TURN_OK) {
        free(text);
        if (turn == SRV_TURN_CANCELLED) return BAD(at, "'%s': grammar: compilation cancelled (the client left)", at);
        return srv_api_fail(err, 503, at, "the server is compiling as many grammars as it compiles at once; its "
                            "queue did not move within the grammar time limit: retry later");
    }
    int rc = gram_compile_limited(&r->grammar, v, &spec, &c->grammar_limits, &pe);
    if (c->grammar_turn_give) c->grammar_turn_give(c->grammar_turn_user);
    free(text);
    if (rc) return BAD(at, "'%s': %s", at, pe.message);
    r->params.grammar = r->grammar;
    return 0;
}
