/*
 * gram_tools.c - the grammar of a forced tool call (OpenAI tool_choice
 * "required" or a named function): given the request's "tools" array, the
 * output must be a call in the model's format whose arguments follow the
 * function's "parameters" schema.
 *
 *   hermes       <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>
 *                (one or more, separated by a newline, when parallel)
 *   llama3_json  {"name": "f", "parameters": {...}}
 *   mistral      [TOOL_CALLS][{"name": "f", "arguments": {...}}, ...]
 *                ([TOOL_CALLS] is a control token: the grammar names it as
 *                a special so the token itself may be sampled)
 *
 * JSON whitespace inside a call follows gram_json.c's policy.
 *
 * What it is not for: reading calls out of text (gram_toolparse.c).
 */
#define _POSIX_C_SOURCE 200809L /* strdup, clock_gettime */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/gram_internal.h"
#include "util/error.h"

int gram_tool_format_parse(const char *name, gram_tool_format *out) {
    if (strcmp(name, "hermes") == 0) *out = GRAM_TOOLS_HERMES;
    else if (strcmp(name, "llama3_json") == 0) *out = GRAM_TOOLS_LLAMA3_JSON;
    else if (strcmp(name, "mistral") == 0) *out = GRAM_TOOLS_MISTRAL;
    else return -1;
    return 0;
}

const char *gram_tool_format_name(gram_tool_format fmt) {
    switch (fmt) {
    case GRAM_TOOLS_HERMES: return "hermes";
    case GRAM_TOOLS_LLAMA3_JSON: return "llama3_json";
    case GRAM_TOOLS_MISTRAL: return "mistral";
    }
    return "?";
}

/* The function object of tools[i]: {"type": "function", "function": {...}}
 * or, as some clients send, the function itself. */
static json_t *function_of(json_t *tool) {
    json_t *f = json_object_get(tool, "function");
    return json_is_object(f) ? f : tool;
}

int gram_tools_grammar(gram_ir *ir, const gram_spec *spec, int32_t *out, pdl_error *err) {
    const char *text = spec->text ? spec->text : "";
    size_t len = spec->len ? spec->len : strlen(text);
    json_error_t je;
    json_t *tools = json_loadb(text, len, 0, &je);
    if (!tools) return pdl_fail(err, "tools: invalid JSON at line %d, column %d: %s", je.line, je.column, je.text);
    int rc = -1;
    int32_t *calls = NULL;
    if (!json_is_array(tools) || json_array_size(tools) == 0) {
        pdl_fail(err, "tools: expected a non-empty array");
        goto done;
    }
    gram_json_rules j;
    if (gram_json_rules_init(ir, &j) != 0) {
        pdl_fail(err, "tools: out of memory");
        goto done;
    }
    size_t n = json_array_size(tools);
    calls = malloc(n * sizeof *calls);
    if (!calls) {
        pdl_fail(err, "tools: out of memory");
        goto done;
    }
    const char *args_key = spec->tool_format == GRAM_TOOLS_LLAMA3_JSON ? "parameters" : "arguments";
    int32_t ws = j.ws;
    int n_calls = 0;
    for (size_t i = 0; i < n; i++) {
        json_t *f = function_of(json_array_get(tools, i));
        json_t *name = json_object_get(f, "name");
        if (!json_is_string(name)) {
            pdl_fail(err, "tools[%zu]: the function has no \"name\"", i);
            goto done;
        }
        if (spec->tool_name && strcmp(spec->tool_name, json_string_value(name)) != 0) continue;
        json_t *params = json_object_get(f, "parameters");
        int32_t args;
        if (!params) {
            args = gx_seqv(ir, gx_str(ir, "{"), ws, gx_str(ir, "}"), GX_END); /* no parameters */
        } else {
            char where[64];
            snprintf(where, sizeof where, "tools[%zu].function.parameters", i);
            if (gram_schema_compile_json(ir, &j, params, where, &args, err) != 0) goto done;
        }
        int32_t call = gx_seqv(ir, gx_str(ir, "{"), ws, gx_str(ir, "\"name\""), ws, gx_str(ir, ":"), ws,
                               gram_json_string_literal(ir, json_string_value(name), json_string_length(name)), ws,
                               gx_str(ir, ","), ws, gram_json_string_literal(ir, args_key, strlen(args_key)), ws,
                               gx_str(ir, ":"), ws, args, ws, gx_str(ir, "}"), GX_END);
        calls[n_calls++] = call;
    }
    if (n_calls == 0) {
        pdl_fail(err, "tool_choice names the function '%s', which is not in tools", spec->tool_name);
        goto done;
    }
    int32_t call = gx_alt(ir, calls, n_calls);
    bool many = spec->parallel && !spec->tool_name;
    switch (spec->tool_format) {
    case GRAM_TOOLS_HERMES: {
        int32_t one = gx_seqv(ir, gx_str(ir, "<tool_call>\n"), call, gx_str(ir, "\n</tool_call>"), GX_END);
        *out = many ? gx_seqv(ir, one, gx_star(ir, gx_seqv(ir, gx_str(ir, "\n"), one, GX_END)), GX_END) : one;
        break;
    }
    case GRAM_TOOLS_LLAMA3_JSON: *out = call; break;
    case GRAM_TOOLS_MISTRAL: {
        gram_ir_add_special(ir, "[TOOL_CALLS]");
        int32_t list = many ? gx_seqv(ir, call, gx_star(ir, gx_seqv(ir, gx_str(ir, ","), ws, call, GX_END)), GX_END) : call;
        *out = gx_seqv(ir, gx_str(ir, "[TOOL_CALLS]"), gx_str(ir, "["), list, gx_str(ir, "]"), GX_END);
        break;
    }
    default: pdl_fail(err, "tools: unknown tool-call format"); goto done;
    }
    rc = ir->oom ? pdl_fail(err, "tools: out of memory") : 0;
done:
    free(calls);
    json_decref(tools);
    return rc;
}
