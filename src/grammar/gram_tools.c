/*
 * gram_tools.c - the grammar of a forced tool call (OpenAI tool_choice
 * "required" or a named function): given the request's "tools" array, the
 * output must be a call in the model's format whose arguments follow the
 * function's "parameters" schema, written so that the format's parser
 * (gram_toolparse.c) reads back exactly those arguments.
 *
 *   hermes       <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>
 *                (one or more, separated by a newline, when parallel)
 *   llama3_json  {"name": "f", "parameters": {...}}
 *   mistral      [TOOL_CALLS][{"name": "f", "arguments": {...}}, ...]
 *   qwen3_coder  <tool_call>\n<function=f>\n<parameter=p>\nV\n</parameter>\n...
 *                </function>\n</tool_call> (newline-separated when parallel)
 *   glm45        <tool_call>f\n<arg_key>p</arg_key>\n<arg_value>V</arg_value>\n...
 *                </tool_call> (newline-separated when parallel)
 *   pythonic     [f(p=V, ...), ...]
 *   deepseek_v3  <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n
 *                {...}\n```<｜tool▁call▁end｜>[\n<｜tool▁call▁begin｜>...]<｜tool▁calls▁end｜>
 *   kimi_k2      <|tool_calls_section_begin|><|tool_call_begin|>functions.f:N
 *                <|tool_call_argument_begin|>{...}<|tool_call_end|>...<|tool_calls_section_end|>
 *
 * A format's markers may be control tokens of the model's vocabulary: the
 * grammar names them as specials, so the token itself may be sampled.
 *
 * Parameters as the formats write them (V above):
 *   - JSON formats: the arguments object per the schema (gram_schema.c),
 *     JSON whitespace following gram_json.c's policy;
 *   - pythonic: each parameter a Python literal (True/False/None, JSON
 *     strings, numbers, lists and dicts), in the schema's order, required
 *     ones always and optional ones as the model chooses;
 *   - qwen3_coder, glm45: each parameter's text, read back by its schema
 *     type as vLLM does (gram_xml_value_kind): a parameter read as a string
 *     is the string itself (a pattern, format or length bound holds no '<';
 *     free text holds no closing marker, such as "</parameter>"), any other
 *     is JSON text without a raw '<' (qwen3_coder: Python literals where the
 *     parser reads ast.literal_eval). Parameters come in the schema's order.
 *
 * What it is not for: reading calls out of text (gram_toolparse.c).
 */
#define _POSIX_C_SOURCE 200809L /* strdup, clock_gettime */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h> /* strcasecmp */

#include "grammar/gram_internal.h"
#include "util/error.h"

/* ---------------------------------------------------------------------------
 * Format names and markers
 * ------------------------------------------------------------------------- */

static const struct {
    const char *name;
    gram_tool_format fmt;
} FORMATS[] = {{"hermes", GRAM_TOOLS_HERMES},           {"llama3_json", GRAM_TOOLS_LLAMA3_JSON},
               {"mistral", GRAM_TOOLS_MISTRAL},         {"qwen3_coder", GRAM_TOOLS_QWEN3_CODER},
               {"pythonic", GRAM_TOOLS_PYTHONIC},       {"deepseek_v3", GRAM_TOOLS_DEEPSEEK_V3},
               {"glm45", GRAM_TOOLS_GLM45},             {"kimi_k2", GRAM_TOOLS_KIMI_K2},
               {"openai", GRAM_TOOLS_OPENAI}};

int gram_tool_format_parse(const char *name, gram_tool_format *out) {
    for (size_t i = 0; i < sizeof FORMATS / sizeof FORMATS[0]; i++)
        if (strcmp(name, FORMATS[i].name) == 0) {
            *out = FORMATS[i].fmt;
            return 0;
        }
    return -1;
}

const char *gram_tool_format_name(gram_tool_format fmt) {
    for (size_t i = 0; i < sizeof FORMATS / sizeof FORMATS[0]; i++)
        if (FORMATS[i].fmt == fmt) return FORMATS[i].name;
    return "?";
}

const char *const *gram_tool_format_markers(gram_tool_format fmt) {
    static const char *const hermes[] = {"<tool_call>", "</tool_call>", NULL};
    static const char *const llama3[] = {"<|python_tag|>", NULL};
    static const char *const mistral[] = {"[TOOL_CALLS]", "[ARGS]", NULL};
    static const char *const pythonic[] = {"<|python_start|>", "<|python_end|>", NULL};
    static const char *const deepseek[] = {GRAM_DS_CALLS, GRAM_DS_CALL, GRAM_DS_SEP, GRAM_DS_CALL_END, GRAM_DS_CALLS_END,
                                           NULL};
    static const char *const glm[] = {"<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>",
                                      "</arg_value>", NULL};
    static const char *const kimi[] = {GRAM_KIMI_SECTION, GRAM_KIMI_CALL, GRAM_KIMI_ARGS, GRAM_KIMI_CALL_END,
                                       GRAM_KIMI_SECTION_END, NULL};
    static const char *const harmony[] = {"<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|constrain|>",
                                          "<|call|>", "<|return|>", NULL};
    switch (fmt) {
    case GRAM_TOOLS_OPENAI: return harmony;
    case GRAM_TOOLS_HERMES:
    case GRAM_TOOLS_QWEN3_CODER: return hermes;
    case GRAM_TOOLS_LLAMA3_JSON: return llama3;
    case GRAM_TOOLS_MISTRAL: return mistral;
    case GRAM_TOOLS_PYTHONIC: return pythonic;
    case GRAM_TOOLS_DEEPSEEK_V3: return deepseek;
    case GRAM_TOOLS_GLM45: return glm;
    case GRAM_TOOLS_KIMI_K2: return kimi;
    }
    return hermes + 2; /* none */
}

/* ---------------------------------------------------------------------------
 * One compilation's state
 * ------------------------------------------------------------------------- */

typedef struct tc {
    gram_ir *ir;
    gram_tool_format fmt;
    gram_json_rules j;    /* the format's JSON (no raw '<' in the XML-like formats, Python for pythonic) */
    gram_json_rules py;   /* qwen3_coder: Python literals without '<', made on first use */
    bool have_py;
    pdl_error *err;
    bool failed;
    int n_rules;          /* pythonic argument lists made (their rules' names) */
    char where[96];       /* "tools[i].function.parameters" */
} tc;

static int32_t tc_fail(tc *t, const char *fmt, const char *a, const char *b) {
    if (!t->failed) {
        char msg[600];
        snprintf(msg, sizeof msg, fmt, a ? a : "", b ? b : "");
        err_fail(t->err, "%s", msg);
        t->failed = true;
    }
    return -1;
}

/* The function object of tools[i]: {"type": "function", "function": {...}}
 * or, as some clients send, the function itself. */
static json_t *function_of(json_t *tool) {
    json_t *f = json_object_get(tool, "function");
    return json_is_object(f) ? f : tool;
}

static bool is_ident(const char *s) {
    if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || *s == '_')) return false;
    for (s++; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '_')) return false;
    return true;
}

static bool outer_space(const char *s) {
    size_t n = strlen(s);
    return n == 0 || strchr(" \t\r\n", s[0]) || strchr(" \t\r\n", s[n - 1]);
}

/* Whether the format can write name (a function's or a parameter's) so
 * that its parser reads it back. */
static bool name_fits(gram_tool_format fmt, const char *name, bool param) {
    switch (fmt) {
    case GRAM_TOOLS_PYTHONIC: return is_ident(name);
    case GRAM_TOOLS_QWEN3_CODER: return !outer_space(name) && !strpbrk(name, "<>\n");
    case GRAM_TOOLS_GLM45: return !outer_space(name) && !strpbrk(name, param ? "<" : "<\n");
    case GRAM_TOOLS_DEEPSEEK_V3: return !outer_space(name) && !strpbrk(name, "<\n");
    case GRAM_TOOLS_KIMI_K2: return *name && !strpbrk(name, "<:.\n");
    case GRAM_TOOLS_OPENAI: return *name && !strpbrk(name, " \t\r\n<");
    default: return true;
    }
}

/* ---------------------------------------------------------------------------
 * Parameters as text (qwen3_coder, glm45)
 * ------------------------------------------------------------------------- */

/* What closes a parameter's text in the format, each after a '<'. */
static const char *const QWEN3_ENDS[] = {"/parameter>", "/function>", "parameter=", NULL};
static const char *const GLM45_ENDS[] = {"/arg_value>", NULL};

static const char *const *text_ends(gram_tool_format fmt) { return fmt == GRAM_TOOLS_GLM45 ? GLM45_ENDS : QWEN3_ENDS; }

/* Characters of a parameter's text: tab, newline, carriage return and
 * everything from space up, but '<'. */
static void text_chars(gram_cpset *s) {
    gram_cpset_add(s, '\t', '\n');
    gram_cpset_add(s, '\r', '\r');
    gram_cpset_add(s, 0x20, '<' - 1);
    gram_cpset_add(s, '<' + 1, 0x10FFFF);
    gram_cpset_normalize(s);
}

/* Text after a '<' up to the next '<' that does not begin with a word of
 * ends, pre (plen bytes) already read. */
static int32_t after_lt(gram_ir *ir, const char *const *ends, const char *pre, size_t plen) {
    int32_t kids[16];
    int n = 0;
    kids[n++] = gx_empty(ir);
    gram_cpset others = {0};
    text_chars(&others);
    char seen[16];
    int n_seen = 0;
    for (int w = 0; ends[w]; w++) {
        size_t wl = strlen(ends[w]);
        if (wl <= plen || memcmp(ends[w], pre, plen) != 0) continue;
        char b = ends[w][plen];
        if (memchr(seen, b, (size_t)n_seen) || n_seen == 15) continue;
        seen[n_seen++] = b;
        /* others loses b */
        gram_cpset rest = {0};
        for (int i = 0; i < others.n; i++) {
            uint32_t lo = others.r[2 * i], hi = others.r[2 * i + 1], x = (unsigned char)b;
            if (x < lo || x > hi) {
                gram_cpset_add(&rest, lo, hi);
                continue;
            }
            if (lo < x) gram_cpset_add(&rest, lo, x - 1);
            if (x < hi) gram_cpset_add(&rest, x + 1, hi);
        }
        gram_cpset_normalize(&rest);
        gram_cpset_free(&others);
        others = rest;
        if (wl == plen + 1) continue; /* b completes the word: never written */
        char next[64];
        if (plen + 1 >= sizeof next) continue;
        memcpy(next, pre, plen);
        next[plen] = b;
        if (n < 14) kids[n++] = gx_seqv(ir, gx_byte_range(ir, (unsigned char)b, (unsigned char)b),
                                        after_lt(ir, ends, next, plen + 1), GX_END);
    }
    gram_cpset all = {0};
    text_chars(&all);
    kids[n++] = gx_seqv(ir, gx_cpset(ir, &others), gx_star(ir, gx_cpset(ir, &all)), GX_END);
    gram_cpset_free(&others);
    gram_cpset_free(&all);
    return gx_alt(ir, kids, n);
}

/* Any text in which no closing marker of the format appears. */
static int32_t free_text(tc *t) {
    gram_ir *ir = t->ir;
    gram_cpset all = {0};
    text_chars(&all);
    int32_t run = gx_star(ir, gx_cpset(ir, &all));
    gram_cpset_free(&all);
    return gx_seqv(ir, run, gx_star(ir, gx_seqv(ir, gx_str(ir, "<"), after_lt(ir, text_ends(t->fmt), "", 0), GX_END)),
                   GX_END);
}

static bool holds_end(gram_tool_format fmt, const char *s, size_t n) {
    const char *const *ends = text_ends(fmt);
    for (size_t i = 0; i < n; i++)
        if (s[i] == '<')
            for (int w = 0; ends[w]; w++)
                if (n - i - 1 >= strlen(ends[w]) && memcmp(s + i + 1, ends[w], strlen(ends[w])) == 0) return true;
    return false;
}

static bool type_has_string(json_t *type) {
    if (!type) return true;
    if (json_is_string(type)) {
        static const char *const names[] = {"string", "str", "text", "varchar", "char", "enum"};
        for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
            if (strcasecmp(json_string_value(type), names[i]) == 0) return true;
        return false;
    }
    for (size_t i = 0; i < json_array_size(type); i++)
        if (type_has_string(json_array_get(type, i)) && json_is_string(json_array_get(type, i))) return true;
    return false;
}

/* A string parameter's text: the strings schema s allows, written as they
 * are. doc: the parameters schema ("$ref"s); pname for messages. */
static int32_t string_text(tc *t, json_t *doc, json_t *s, const char *pname, int depth) {
    gram_ir *ir = t->ir;
    char msg[200];
    snprintf(msg, sizeof msg, "%s: parameter '%.60s'", t->where, pname);
    if (depth > 16) return tc_fail(t, "%s: its schema's references nest too deeply%s", msg, "");
    if (!s || json_is_true(s) || (json_is_object(s) && json_object_size(s) == 0)) return free_text(t);
    if (!json_is_object(s)) return tc_fail(t, "%s: the schema must be an object%s", msg, "");
    json_t *ref = json_object_get(s, "$ref");
    if (ref) {
        json_t *target = json_is_string(ref) ? gram_schema_resolve(doc, json_string_value(ref)) : NULL;
        if (!target) return tc_fail(t, "%s: '$ref' names no schema of this document%s", msg, "");
        return string_text(t, doc, target, pname, depth + 1);
    }
    json_t *type = json_object_get(s, "type");
    json_t *values = json_object_get(s, "enum");
    json_t *one = NULL;
    if (!values && json_object_get(s, "const")) {
        one = json_array();
        json_array_append(one, json_object_get(s, "const"));
        values = one;
    }
    if (values) {
        int32_t kids[256];
        int n = 0;
        for (size_t i = 0; i < json_array_size(values) && n < 256; i++) {
            json_t *v = json_array_get(values, i);
            if (!json_is_string(v) || !type_has_string(type) || holds_end(t->fmt, json_string_value(v), json_string_length(v)))
                continue;
            kids[n++] = gx_literal(ir, json_string_value(v), json_string_length(v));
        }
        json_decref(one);
        if (n == 0)
            return tc_fail(t, "%s: the %s format reads it as a string, and it allows no string that format can "
                           "write", msg, gram_tool_format_name(t->fmt));
        return gx_alt(ir, kids, n);
    }
    const char *list_kw = json_object_get(s, "anyOf") ? "anyOf" : json_object_get(s, "oneOf") ? "oneOf" : NULL;
    if (list_kw) {
        json_t *list = json_object_get(s, list_kw);
        int32_t kids[64];
        int n = 0;
        for (size_t i = 0; i < json_array_size(list) && n < 64; i++) {
            json_t *m = json_array_get(list, i);
            if (json_is_object(m) && json_object_get(m, "type") && !type_has_string(json_object_get(m, "type"))) continue;
            int32_t k = string_text(t, doc, m, pname, depth + 1);
            if (k < 0) return -1;
            kids[n++] = k;
        }
        if (n == 0) return tc_fail(t, "%s: no member of '%s' allows a string", msg, list_kw);
        return gx_alt(ir, kids, n);
    }
    if (!type_has_string(type))
        return tc_fail(t, "%s: the %s format reads it as a string, which its type does not allow", msg,
                       gram_tool_format_name(t->fmt));
    json_t *pattern = json_object_get(s, "pattern"), *format = json_object_get(s, "format");
    const char *re = json_is_string(pattern) ? json_string_value(pattern) : NULL;
    if (!re && format) {
        re = json_is_string(format) ? gram_schema_format_regex(json_string_value(format)) : NULL;
        if (!re) return tc_fail(t, "%s: string format '%s' is not supported", msg, json_is_string(format) ? json_string_value(format) : "?");
    }
    if (re) {
        int32_t body;
        pdl_error e2;
        if (gram_regex_parse(ir, re, strlen(re), GRAM_RE_PLAIN | GRAM_RE_NO_LT, &body, &e2) != 0)
            return tc_fail(t, "%s: %s", msg, e2.message);
        return body;
    }
    json_t *mn = json_object_get(s, "minLength"), *mx = json_object_get(s, "maxLength");
    if (mn || mx) {
        json_int_t lo = json_is_integer(mn) ? json_integer_value(mn) : 0, hi = json_is_integer(mx) ? json_integer_value(mx) : -1;
        if (lo < 0 || lo > 10000 || hi > 10000 || (mx && (hi < lo)))
            return tc_fail(t, "%s: 'minLength'/'maxLength' must be counts up to 10000%s", msg, "");
        gram_cpset chars = {0};
        text_chars(&chars);
        int32_t r = gx_repeat(ir, gx_cpset(ir, &chars), (int32_t)lo, mx ? (int32_t)hi : GX_INF);
        gram_cpset_free(&chars);
        return r;
    }
    return free_text(t);
}

/* One parameter's value as the format writes it. ps: its schema (NULL: not
 * described); doc: the parameters schema. */
static int32_t param_value(tc *t, json_t *doc, const char *pname, json_t *ps) {
    char ptr[300];
    snprintf(ptr, sizeof ptr, "#/properties/%.250s", pname);
    const gram_json_rules *rules = &t->j; /* pythonic: Python literals; else JSON without a raw '<' */
    if (t->fmt != GRAM_TOOLS_PYTHONIC) {
        bool nullable;
        json_t *branch;
        gram_xml_kind k = gram_xml_value_kind(t->fmt, ps, &nullable, &branch);
        if (k == GRAM_XML_STRING) return string_text(t, doc, branch, pname, 0);
        if (k == GRAM_XML_LITERAL && ps) {
            /* read by ast.literal_eval: Python's True, False and None */
            if (!t->have_py) {
                if (gram_json_rules_init_flags(t->ir, &t->py, GRAM_JSON_NO_LT | GRAM_JSON_PYTHON) != 0)
                    return tc_fail(t, "tools: out of memory%s%s", "", "");
                t->have_py = true;
            }
            rules = &t->py;
        }
    }
    if (!ps) return gx_ref(t->ir, rules->value); /* not described: any value */
    int32_t v;
    if (gram_schema_compile_sub(t->ir, rules, doc, ps, ptr, t->where, &v, t->err) != 0) {
        t->failed = true;
        return -1;
    }
    return v;
}

/* The parameters of a function one by one: qwen3_coder and glm45 write a
 * block per parameter; pythonic writes "p=V" separated by ", ". */
static int32_t params_text(tc *t, json_t *params) {
    gram_ir *ir = t->ir;
    if (params && !json_is_object(params)) return tc_fail(t, "%s: must be a JSON Schema object%s", t->where, "");
    json_t *props = json_object_get(params, "properties"), *required = json_object_get(params, "required");
    static const char *const whole[] = {"$ref", "anyOf", "oneOf", "allOf", "enum", "const"};
    for (size_t i = 0; params && i < sizeof whole / sizeof whole[0]; i++)
        if (json_object_get(params, whole[i]))
            return tc_fail(t, "%s: '%s' at the top is not supported in forced calls of this format (it writes the "
                           "arguments one parameter at a time)", t->where, whole[i]);
    if (props && !json_is_object(props)) return tc_fail(t, "%s: 'properties' must be an object%s", t->where, "");
    /* the parameters: listed ones in order, then required ones not listed */
    size_t cap = (props ? json_object_size(props) : 0) + json_array_size(required) + 1, n = 0;
    const char **names = calloc(cap, sizeof *names);
    json_t **schemas = calloc(cap, sizeof *schemas);
    bool *req = calloc(cap, sizeof *req);
    int32_t *vals = calloc(cap, sizeof *vals);
    int32_t result = -1;
    if (!names || !schemas || !req || !vals) {
        ir->oom = true;
        goto done;
    }
    const char *k;
    json_t *v;
    json_object_foreach(props, k, v) {
        names[n] = k;
        schemas[n++] = v;
    }
    for (size_t i = 0; i < json_array_size(required); i++) {
        json_t *r = json_array_get(required, i);
        if (!json_is_string(r)) {
            tc_fail(t, "%s: 'required' must list strings%s", t->where, "");
            goto done;
        }
        size_t at = n;
        for (size_t q = 0; q < n; q++)
            if (strcmp(names[q], json_string_value(r)) == 0) at = q;
        if (at == n) names[n++] = json_string_value(r);
        req[at] = true;
    }
    for (size_t i = 0; i < n; i++) {
        if (!name_fits(t->fmt, names[i], true)) {
            tc_fail(t, "%s: the parameter name '%.100s' cannot be written in this format", t->where, names[i]);
            goto done;
        }
        if ((vals[i] = param_value(t, params, names[i], schemas[i])) < 0) goto done;
    }
    if (t->fmt != GRAM_TOOLS_PYTHONIC) {
        gx_list seq = {0};
        for (size_t i = 0; i < n; i++) {
            int32_t block;
            if (t->fmt == GRAM_TOOLS_QWEN3_CODER) {
                block = gx_seqv(ir, gx_fmt(ir, "<parameter="), gx_str(ir, names[i]), gx_fmt(ir, ">\n"), vals[i],
                                gx_fmt(ir, "\n</parameter>\n"), GX_END);
            } else {
                block = gx_seqv(ir, gx_fmt(ir, "<arg_key>"), gx_str(ir, names[i]), gx_fmt(ir, "</arg_key>\n<arg_value>"),
                                vals[i], gx_fmt(ir, "</arg_value>\n"), GX_END);
            }
            gx_list_push(ir, &seq, req[i] ? block : gx_opt(ir, block));
        }
        result = gx_seq(ir, seq.ids, seq.n);
        free(seq.ids);
        goto done;
    }
    /* pythonic: R[i][e], parameters i.. once e (0/1) of them were written,
     * as rules so that both continuations of an optional one share a copy */
    int32_t *rules = malloc((n + 1) * 2 * sizeof *rules);
    if (!rules) {
        ir->oom = true;
        goto done;
    }
    int id = t->n_rules++;
    for (size_t i = 0; i <= n; i++)
        for (int e = 0; e < 2; e++) {
            char name[80];
            snprintf(name, sizeof name, "call%d-args-from%zu%s", id, i, e ? "-more" : "");
            rules[i * 2 + e] = gram_ir_rule(ir, name, 0);
        }
    for (int e = 0; e < 2; e++)
        if (rules[n * 2 + e] >= 0) ir->rules[rules[n * 2 + e]].body = gx_empty(ir);
    for (size_t i = n; i-- > 0;) {
        int32_t kv = gx_seqv(ir, gx_str(ir, names[i]), gx_str(ir, "="), vals[i], GX_END);
        for (int e = 0; e < 2; e++) {
            int32_t take = gx_seqv(ir, e ? gx_str(ir, ", ") : gx_empty(ir), kv, gx_ref(ir, rules[(i + 1) * 2 + 1]), GX_END);
            int32_t body = req[i] ? take : gx_altv(ir, take, gx_ref(ir, rules[(i + 1) * 2 + e]), GX_END);
            if (rules[i * 2 + e] >= 0 && body >= 0) ir->rules[rules[i * 2 + e]].body = body;
        }
    }
    result = gx_ref(ir, rules[0]);
    free(rules);
done:
    free(names);
    free(schemas);
    free(req);
    free(vals);
    return t->failed || ir->oom ? -1 : result;
}

/* ---------------------------------------------------------------------------
 * One call, the calls
 * ------------------------------------------------------------------------- */

/* The arguments object per the function's parameters schema. */
static int32_t args_json(tc *t, json_t *params) {
    if (!params) return gx_seqv(t->ir, gx_str(t->ir, "{"), t->j.ws, gx_str(t->ir, "}"), GX_END); /* no parameters */
    int32_t args;
    if (gram_schema_compile_json(t->ir, &t->j, params, t->where, &args, t->err) != 0) {
        t->failed = true;
        return -1;
    }
    return args;
}

static int32_t one_call(tc *t, const char *name, size_t name_len, json_t *params) {
    gram_ir *ir = t->ir;
    int32_t ws = t->j.ws;
    switch (t->fmt) {
    case GRAM_TOOLS_HERMES:
    case GRAM_TOOLS_LLAMA3_JSON:
    case GRAM_TOOLS_MISTRAL: {
        const char *key = t->fmt == GRAM_TOOLS_LLAMA3_JSON ? "parameters" : "arguments";
        int32_t args = args_json(t, params);
        return gx_seqv(ir, gx_str(ir, "{"), ws, gx_str(ir, "\"name\""), ws, gx_str(ir, ":"), ws,
                       gram_json_string_literal(ir, name, name_len), ws, gx_str(ir, ","), ws,
                       gram_json_string_literal(ir, key, strlen(key)), ws, gx_str(ir, ":"), ws, args, ws, gx_str(ir, "}"),
                       GX_END);
    }
    case GRAM_TOOLS_DEEPSEEK_V3:
        return gx_seqv(ir, gx_fmt(ir, GRAM_DS_CALL "function" GRAM_DS_SEP), gx_literal(ir, name, name_len),
                       gx_fmt(ir, "\n```json\n"), args_json(t, params), gx_fmt(ir, "\n```" GRAM_DS_CALL_END), GX_END);
    case GRAM_TOOLS_KIMI_K2: {
        /* the id's index: any number (Kimi counts the calls of the conversation) */
        int32_t index = gx_altv(ir, gx_str(ir, "0"), gx_seqv(ir, gx_byte_range(ir, '1', '9'),
                                gx_repeat(ir, gx_byte_range(ir, '0', '9'), 0, 3), GX_END), GX_END);
        return gx_seqv(ir, gx_fmt(ir, GRAM_KIMI_CALL "functions."), gx_literal(ir, name, name_len), gx_fmt(ir, ":"), index,
                       gx_fmt(ir, GRAM_KIMI_ARGS), args_json(t, params), gx_fmt(ir, GRAM_KIMI_CALL_END), GX_END);
    }
    case GRAM_TOOLS_QWEN3_CODER:
        return gx_seqv(ir, gx_fmt(ir, "<tool_call>\n<function="), gx_literal(ir, name, name_len), gx_fmt(ir, ">\n"),
                       params_text(t, params), gx_fmt(ir, "</function>\n</tool_call>"), GX_END);
    case GRAM_TOOLS_GLM45:
        return gx_seqv(ir, gx_fmt(ir, "<tool_call>"), gx_literal(ir, name, name_len), gx_fmt(ir, "\n"),
                       params_text(t, params), gx_fmt(ir, "</tool_call>"), GX_END);
    case GRAM_TOOLS_PYTHONIC:
        return gx_seqv(ir, gx_literal(ir, name, name_len), gx_str(ir, "("), params_text(t, params), gx_str(ir, ")"), GX_END);
    case GRAM_TOOLS_OPENAI: /* one message to the function; <|call|> (an end-of-generation token) follows */
        return gx_seqv(ir, gx_fmt(ir, "<|channel|>commentary to=functions."), gx_literal(ir, name, name_len),
                       gx_fmt(ir, " <|constrain|>json<|message|>"), args_json(t, params), GX_END);
    }
    return -1;
}

/* One call, or (many) one or more separated by sep. */
static int32_t calls_of(gram_ir *ir, int32_t call, bool many, const char *sep) {
    return many ? gx_seqv(ir, call, gx_star(ir, gx_seqv(ir, gx_str(ir, sep), call, GX_END)), GX_END) : call;
}

int gram_tools_grammar(gram_ir *ir, const gram_spec *spec, int32_t *out, pdl_error *err) {
    const char *text = spec->text ? spec->text : "";
    size_t len = spec->len ? spec->len : strlen(text);
    json_error_t je;
    json_t *tools = json_loadb(text, len, 0, &je);
    if (!tools) return err_fail(err, "tools: invalid JSON at line %d, column %d: %s", je.line, je.column, je.text);
    int rc = -1;
    int32_t *calls = NULL;
    tc t = {.ir = ir, .fmt = spec->tool_format, .err = err};
    /* the format's markers that are control tokens in a vocabulary are
     * sampled as those tokens, where the format writes them (gx_fmt); Llama
     * 3's JSON calls are written without <|python_tag|> */
    ir->marks = t.fmt == GRAM_TOOLS_LLAMA3_JSON ? NULL : gram_tool_format_markers(t.fmt);
    if (!json_is_array(tools) || json_array_size(tools) == 0) {
        err_fail(err, "tools: expected a non-empty array");
        goto done;
    }
    unsigned flags = t.fmt == GRAM_TOOLS_QWEN3_CODER || t.fmt == GRAM_TOOLS_GLM45 ? GRAM_JSON_NO_LT
                     : t.fmt == GRAM_TOOLS_PYTHONIC                               ? GRAM_JSON_PYTHON
                                                                                  : 0;
    if (gram_json_rules_init_flags(ir, &t.j, flags) != 0) {
        err_fail(err, "tools: out of memory");
        goto done;
    }
    size_t n = json_array_size(tools);
    calls = malloc(n * sizeof *calls);
    if (!calls) {
        err_fail(err, "tools: out of memory");
        goto done;
    }
    int n_calls = 0;
    for (size_t i = 0; i < n; i++) {
        json_t *f = function_of(json_array_get(tools, i));
        json_t *name = json_object_get(f, "name");
        if (!json_is_string(name)) {
            err_fail(err, "tools[%zu]: the function has no \"name\"", i);
            goto done;
        }
        if (spec->tool_name && strcmp(spec->tool_name, json_string_value(name)) != 0) continue;
        if (!name_fits(t.fmt, json_string_value(name), false)) {
            err_fail(err, "tools[%zu]: the function name '%.100s' cannot be written in the %s format", i,
                     json_string_value(name), gram_tool_format_name(t.fmt));
            goto done;
        }
        snprintf(t.where, sizeof t.where, "tools[%zu].function.parameters", i);
        int32_t call = one_call(&t, json_string_value(name), json_string_length(name), json_object_get(f, "parameters"));
        if (t.failed) goto done;
        calls[n_calls++] = call;
    }
    if (n_calls == 0) {
        err_fail(err, "tool_choice names the function '%s', which is not in tools", spec->tool_name);
        goto done;
    }
    int32_t call = gx_alt(ir, calls, n_calls);
    bool many = spec->parallel && !spec->tool_name;
    switch (t.fmt) {
    case GRAM_TOOLS_HERMES: {
        int32_t one = gx_seqv(ir, gx_fmt(ir, "<tool_call>\n"), call, gx_fmt(ir, "\n</tool_call>"), GX_END);
        *out = calls_of(ir, one, many, "\n");
        break;
    }
    case GRAM_TOOLS_LLAMA3_JSON: *out = call; break;
    case GRAM_TOOLS_MISTRAL: {
        int32_t list = many ? gx_seqv(ir, call, gx_star(ir, gx_seqv(ir, gx_str(ir, ","), t.j.ws, call, GX_END)), GX_END) : call;
        *out = gx_seqv(ir, gx_fmt(ir, "[TOOL_CALLS]"), gx_fmt(ir, "["), list, gx_fmt(ir, "]"), GX_END);
        break;
    }
    case GRAM_TOOLS_QWEN3_CODER:
    case GRAM_TOOLS_GLM45: *out = calls_of(ir, call, many, "\n"); break;
    case GRAM_TOOLS_PYTHONIC: *out = gx_seqv(ir, gx_str(ir, "["), calls_of(ir, call, many, ", "), gx_str(ir, "]"), GX_END); break;
    case GRAM_TOOLS_DEEPSEEK_V3:
        *out = gx_seqv(ir, gx_fmt(ir, GRAM_DS_CALLS), calls_of(ir, call, many, "\n"), gx_fmt(ir, GRAM_DS_CALLS_END), GX_END);
        break;
    case GRAM_TOOLS_KIMI_K2:
        *out = gx_seqv(ir, gx_fmt(ir, GRAM_KIMI_SECTION), calls_of(ir, call, many, ""), gx_fmt(ir, GRAM_KIMI_SECTION_END),
                       GX_END);
        break;
    case GRAM_TOOLS_OPENAI: *out = call; break; /* a message calls one function */
    default: err_fail(err, "tools: unknown tool-call format"); goto done;
    }
    rc = ir->oom ? err_fail(err, "tools: out of memory") : 0;
done:
    free(calls);
    json_decref(tools);
    return rc;
}
