/*
 * test_grammar_tools.c - tool calls: the streaming output parsers (hermes,
 * llama3_json, mistral, qwen3_coder, glm45, pythonic, deepseek_v3, kimi_k2,
 * and openai: gpt-oss's harmony messages, with its reasoning)
 * on model outputs (for the newer formats, the text each model's own chat
 * template renders for an earlier call), fed whole, split at every byte
 * boundary and byte by byte (all must give the same result), and the
 * forced-call grammars (tool_choice "required" / a named function):
 * generated under the mask, parsed back, arguments validated against the
 * function's parameters schema.
 */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "gram_test.h"
#include "json_validate.h"
#include "test_util.h"

typedef struct call {
    char id[64], name[128];
    char args[1024];
    size_t args_len;
    bool begun, ended, complete;
} call;

typedef struct result {
    char content[2048];
    size_t content_len;
    char reasoning[2048];
    size_t reasoning_len;
    call calls[8];
    int n_calls;
    int errors; /* events out of order */
} result;

static void on_event(const gram_tool_event *ev, void *user) {
    result *r = user;
    switch (ev->kind) {
    case GRAM_TOOL_CONTENT:
        if (r->content_len + ev->len < sizeof r->content) {
            memcpy(r->content + r->content_len, ev->text, ev->len);
            r->content_len += ev->len;
        }
        break;
    case GRAM_TOOL_CALL_BEGIN:
        if (ev->index != r->n_calls || r->n_calls >= 8) {
            r->errors++;
            break;
        }
        snprintf(r->calls[r->n_calls].id, sizeof r->calls[0].id, "%s", ev->id);
        snprintf(r->calls[r->n_calls].name, sizeof r->calls[0].name, "%s", ev->name);
        r->calls[r->n_calls].begun = true;
        r->n_calls++;
        break;
    case GRAM_TOOL_CALL_ARGS: {
        if (ev->index < 0 || ev->index >= r->n_calls || r->calls[ev->index].ended) {
            r->errors++;
            break;
        }
        call *c = &r->calls[ev->index];
        if (c->args_len + ev->len < sizeof c->args) {
            memcpy(c->args + c->args_len, ev->text, ev->len);
            c->args_len += ev->len;
        }
        break;
    }
    case GRAM_TOOL_CALL_END:
        if (ev->index < 0 || ev->index >= r->n_calls || r->calls[ev->index].ended) {
            r->errors++;
            break;
        }
        r->calls[ev->index].ended = true;
        r->calls[ev->index].complete = ev->complete;
        break;
    case GRAM_TOOL_REASONING:
        if (r->reasoning_len + ev->len < sizeof r->reasoning) {
            memcpy(r->reasoning + r->reasoning_len, ev->text, ev->len);
            r->reasoning_len += ev->len;
        }
        break;
    }
}

/* Feeds text in pieces cut at the given offsets (tools: the request's
 * tools JSON, or NULL). */
static void parse_t(gram_tool_format fmt, const char *tools, const char *text, const size_t *cuts, int n_cuts,
                    result *r) {
    memset(r, 0, sizeof *r);
    gram_tool_parser *p = tools ? gram_tool_parser_new_with_tools(fmt, 42, tools, 0) : gram_tool_parser_new(fmt, 42);
    REQUIRE(p);
    size_t at = 0, len = strlen(text);
    for (int i = 0; i <= n_cuts; i++) {
        size_t to = i < n_cuts ? cuts[i] : len;
        REQUIRE(gram_tool_parser_feed(p, text + at, to - at, on_event, r) == 0);
        at = to;
    }
    REQUIRE(gram_tool_parser_finish(p, on_event, r) == 0);
    gram_tool_parser_free(p);
}

static bool same_result(const result *a, const result *b) {
    if (a->content_len != b->content_len || memcmp(a->content, b->content, a->content_len) != 0) return false;
    if (a->reasoning_len != b->reasoning_len || memcmp(a->reasoning, b->reasoning, a->reasoning_len) != 0) return false;
    if (a->n_calls != b->n_calls || a->errors || b->errors) return false;
    for (int i = 0; i < a->n_calls; i++) {
        const call *x = &a->calls[i], *y = &b->calls[i];
        if (strcmp(x->id, y->id) || strcmp(x->name, y->name) || x->args_len != y->args_len ||
            memcmp(x->args, y->args, x->args_len) || x->ended != y->ended || x->complete != y->complete)
            return false;
    }
    return true;
}

/* The result fed whole; checks that every two-piece split, every
 * three-piece split around a cut (a marker or a UTF-8 character split
 * twice) and byte-by-byte feeding give the same. */
static void parse_all_ways_t(gram_tool_format fmt, const char *tools, const char *text, result *whole) {
    parse_t(fmt, tools, text, NULL, 0, whole);
    CHECK_EQ_INT(whole->errors, 0);
    size_t len = strlen(text);
    result r;
    for (size_t k = 0; k <= len; k++) {
        parse_t(fmt, tools, text, &k, 1, &r);
        CHECK_MSG(same_result(whole, &r), "split at %zu of \"%s\" changes the result", k, text);
        if (k + 3 <= len) {
            size_t two[2] = {k, k + 3};
            parse_t(fmt, tools, text, two, 2, &r);
            CHECK_MSG(same_result(whole, &r), "splits at %zu and %zu of \"%s\" change the result", k, k + 3, text);
        }
    }
    size_t *cuts = malloc((len + 1) * sizeof *cuts);
    for (size_t k = 0; k < len; k++) cuts[k] = k + 1;
    parse_t(fmt, tools, text, cuts, (int)len, &r);
    CHECK_MSG(same_result(whole, &r), "byte-by-byte feeding of \"%s\" changes the result", text);
    free(cuts);
}

static void parse_all_ways(gram_tool_format fmt, const char *text, result *whole) {
    parse_all_ways_t(fmt, NULL, text, whole);
}

static void expect_call(const result *r, int i, const char *name, const char *args, bool complete) {
    REQUIRE_MSG(i < r->n_calls, "call %d missing (%d calls)", i, r->n_calls);
    const call *c = &r->calls[i];
    CHECK_MSG(strcmp(c->name, name) == 0, "call %d name \"%s\", expected \"%s\"", i, c->name, name);
    CHECK_MSG(c->args_len == strlen(args) && memcmp(c->args, args, c->args_len) == 0, "call %d args \"%.*s\", expected \"%s\"",
              i, (int)c->args_len, c->args, args);
    CHECK(c->ended);
    CHECK_EQ_INT(c->complete, complete);
}

static void expect_content(const result *r, const char *content) {
    CHECK_MSG(r->content_len == strlen(content) && memcmp(r->content, content, r->content_len) == 0,
              "content \"%.*s\", expected \"%s\"", (int)r->content_len, r->content, content);
}

static void test_hermes_outputs(void) {
    result r;
    parse_all_ways(GRAM_TOOLS_HERMES,
                   "I'll check the weather.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", "
                   "\"unit\": \"celsius\"}}\n</tool_call>",
                   &r);
    expect_content(&r, "I'll check the weather.\n");
    CHECK_EQ_INT(r.n_calls, 1);
    expect_call(&r, 0, "get_weather", "{\"city\": \"Paris\", \"unit\": \"celsius\"}", true);
    CHECK(strncmp(r.calls[0].id, "call_", 5) == 0 && strlen(r.calls[0].id) == 29);

    parse_all_ways(GRAM_TOOLS_HERMES,
                   "<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\": \"b\", "
                   "\"arguments\": {\"x\": [1, {\"y\": \"}]\\\"\"}]}}\n</tool_call>\n",
                   &r);
    expect_content(&r, "");
    CHECK_EQ_INT(r.n_calls, 2);
    expect_call(&r, 0, "a", "{}", true);
    expect_call(&r, 1, "b", "{\"x\": [1, {\"y\": \"}]\\\"\"}]}", true);
    CHECK(strcmp(r.calls[0].id, r.calls[1].id) != 0);

    /* arguments before the name; a JSON-encoded arguments string */
    parse_all_ways(GRAM_TOOLS_HERMES, "<tool_call>{\"arguments\": {\"q\": \"a b\"}, \"name\": \"search\"}</tool_call>", &r);
    expect_call(&r, 0, "search", "{\"q\": \"a b\"}", true);
    parse_all_ways(GRAM_TOOLS_HERMES, "<tool_call>\n{\"name\": \"f\", \"arguments\": \"{\\\"a\\\": 1}\"}\n</tool_call>", &r);
    expect_call(&r, 0, "f", "{\"a\": 1}", true);

    /* no arguments at all: "{}" */
    parse_all_ways(GRAM_TOOLS_HERMES, "<tool_call>{\"name\": \"now\"}</tool_call>", &r);
    expect_call(&r, 0, "now", "{}", true);

    /* text that only looks like a tag is content */
    parse_all_ways(GRAM_TOOLS_HERMES, "Use <tool> or <tool_cal, not a call. <", &r);
    expect_content(&r, "Use <tool> or <tool_cal, not a call. <");
    CHECK_EQ_INT(r.n_calls, 0);
    /* a tag right after a character that started a false one */
    parse_all_ways(GRAM_TOOLS_HERMES, "a <<tool_call>{\"name\": \"x\", \"arguments\": {}}</tool_call>", &r);
    expect_content(&r, "a <");
    expect_call(&r, 0, "x", "{}", true);

    /* malformed call JSON: given back as content */
    parse_all_ways(GRAM_TOOLS_HERMES, "<tool_call>\nnot json\n</tool_call> done", &r);
    expect_content(&r, "<tool_call>\nnot json\n</tool_call> done");
    CHECK_EQ_INT(r.n_calls, 0);

    /* non-ASCII arguments */
    parse_all_ways(GRAM_TOOLS_HERMES,
                   "<tool_call>\n{\"name\": \"translate\", \"arguments\": {\"text\": \"\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e\", "
                   "\"to\": \"en\"}}\n</tool_call>",
                   &r);
    expect_call(&r, 0, "translate", "{\"text\": \"\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e\", \"to\": \"en\"}", true);

    /* cut off by max_tokens: a begun call ends incomplete, an unnamed one
     * is dropped; neither comes back as content */
    parse_all_ways(GRAM_TOOLS_HERMES, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1", &r);
    expect_call(&r, 0, "f", "{\"a\": 1", false);
    expect_content(&r, "");
    parse_all_ways(GRAM_TOOLS_HERMES, "Hi <tool_call>\n{\"nam", &r);
    expect_content(&r, "Hi ");
    CHECK_EQ_INT(r.n_calls, 0);
    parse_all_ways(GRAM_TOOLS_HERMES,
                   "<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>\n<tool_call>\n{\"name\": \"b\", \"argu", &r);
    CHECK_EQ_INT(r.n_calls, 2);
    expect_call(&r, 0, "a", "{}", true);
    expect_call(&r, 1, "b", "", false);
    expect_content(&r, "");
    parse_all_ways(GRAM_TOOLS_LLAMA3_JSON, "{\"name\": \"get_weath", &r);
    expect_content(&r, "");
    CHECK_EQ_INT(r.n_calls, 0);
    parse_all_ways(GRAM_TOOLS_MISTRAL, "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {\"x\"", &r);
    expect_content(&r, "");
    expect_call(&r, 0, "f", "{\"x\"", false);

    /* text after the calls is content again */
    parse_all_ways(GRAM_TOOLS_HERMES, "<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>\nDone.", &r);
    expect_call(&r, 0, "a", "{}", true);
    expect_content(&r, "\nDone.");
}

static void test_llama3_json_outputs(void) {
    result r;
    parse_all_ways(GRAM_TOOLS_LLAMA3_JSON, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}", &r);
    expect_content(&r, "");
    expect_call(&r, 0, "get_weather", "{\"city\": \"Paris\"}", true);
    parse_all_ways(GRAM_TOOLS_LLAMA3_JSON, "<|python_tag|>{\"name\": \"f\", \"parameters\": {}}", &r);
    expect_call(&r, 0, "f", "{}", true);
    parse_all_ways(GRAM_TOOLS_LLAMA3_JSON,
                   "  \n{\"name\": \"a\", \"parameters\": {\"n\": 1}}; {\"name\": \"b\", \"parameters\": {\"n\": -2.5e3}}", &r);
    CHECK_EQ_INT(r.n_calls, 2);
    expect_call(&r, 0, "a", "{\"n\": 1}", true);
    expect_call(&r, 1, "b", "{\"n\": -2.5e3}", true);
    parse_all_ways(GRAM_TOOLS_LLAMA3_JSON, "The answer is {42}.", &r);
    expect_content(&r, "The answer is {42}.");
    CHECK_EQ_INT(r.n_calls, 0);
    parse_all_ways(GRAM_TOOLS_LLAMA3_JSON, "{\"foo\": 1}", &r);
    expect_content(&r, "{\"foo\": 1}");
    CHECK_EQ_INT(r.n_calls, 0);
    parse_all_ways(GRAM_TOOLS_LLAMA3_JSON, "{\"name\": \"f\", \"arguments\": {\"a\": true}}", &r);
    expect_call(&r, 0, "f", "{\"a\": true}", true);
}

static void test_mistral_outputs(void) {
    result r;
    parse_all_ways(GRAM_TOOLS_MISTRAL, "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]", &r);
    expect_content(&r, "");
    expect_call(&r, 0, "get_weather", "{\"city\": \"Paris\"}", true);
    CHECK_EQ_INT((int)strlen(r.calls[0].id), 9); /* Mistral's templates check 9-character ids */
    parse_all_ways(GRAM_TOOLS_MISTRAL,
                   "Sure.[TOOL_CALLS] [{\"name\": \"a\", \"arguments\": {\"x\": 1}}, {\"name\": \"b\", \"arguments\": {}}]", &r);
    expect_content(&r, "Sure.");
    CHECK_EQ_INT(r.n_calls, 2);
    expect_call(&r, 0, "a", "{\"x\": 1}", true);
    expect_call(&r, 1, "b", "{}", true);
    parse_all_ways(GRAM_TOOLS_MISTRAL, "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}", &r);
    expect_call(&r, 0, "get_weather", "{\"city\": \"Paris\"}", true);
    parse_all_ways(GRAM_TOOLS_MISTRAL, "[[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {}}]", &r);
    expect_content(&r, "[");
    expect_call(&r, 0, "a", "{}", true);
    parse_all_ways(GRAM_TOOLS_MISTRAL, "No tools needed [TOOL] here [TOOL_CALL", &r);
    expect_content(&r, "No tools needed [TOOL] here [TOOL_CALL");
    CHECK_EQ_INT(r.n_calls, 0);
}

/* ---- the newer formats, on what each model's own chat template renders ----
 *
 * Each fixture is the assistant turn of one conversation as the model's
 * chat template renders it (Jinja2 with transformers' apply_chat_template
 * settings; pagedlm's own renderer gives the same bytes), from after the
 * generation prompt to before the end-of-turn token: the text the model
 * learned to write. The conversation: a user asks for the weather in São
 * Paulo and the time in Tokyo, the assistant calls
 *   get_weather {"city": "São Paulo", "days": 3, "unit": "celsius", "detailed": true, "threshold": 0.5}
 *   get_time    {"zone": "Asia/Tokyo", "options": {"format": "24h", "fields": ["hour", "minute"]}}
 */

/* The tools of that conversation (the XML-like formats read parameter
 * values by these types). */
static const char FIX_TOOLS[] =
    "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": {\"type\": \"object\", "
    "\"properties\": {\"city\": {\"type\": \"string\"}, \"days\": {\"type\": \"integer\"}, \"unit\": {\"type\": "
    "\"string\", \"enum\": [\"celsius\", \"fahrenheit\"]}, \"detailed\": {\"type\": \"boolean\"}, \"threshold\": "
    "{\"type\": \"number\"}}, \"required\": [\"city\"]}}},"
    " {\"type\": \"function\", \"function\": {\"name\": \"get_time\", \"parameters\": {\"type\": \"object\", "
    "\"properties\": {\"zone\": {\"type\": \"string\"}, \"options\": {\"type\": \"object\"}}}}}]";

static const char WEATHER_ARGS[] =
    "{\"city\": \"S\xc3\xa3o Paulo\", \"days\": 3, \"unit\": \"celsius\", \"detailed\": true, \"threshold\": 0.5}";
static const char TIME_ARGS[] = "{\"zone\": \"Asia/Tokyo\", \"options\": {\"format\": \"24h\", \"fields\": [\"hour\", \"minute\"]}}";

static void expect_fixture_calls(const result *r) {
    expect_content(r, "");
    CHECK_EQ_INT(r->n_calls, 2);
    expect_call(r, 0, "get_weather", WEATHER_ARGS, true);
    expect_call(r, 1, "get_time", TIME_ARGS, true);
}

/* Qwen3-Coder's chat template (Qwen/Qwen3-Coder-30B-A3B-Instruct,
 * chat_template.jinja; the same as llama.cpp's models/templates/
 * Qwen3-Coder.jinja): each argument as `args_value | string`, so Python's
 * str(): True, and a dict as its repr. Generation prompt
 * "<|im_start|>assistant\n". */
static const char FIX_QWEN3_CODER[] =
    "<tool_call>\n<function=get_weather>\n<parameter=city>\nS\xc3\xa3o Paulo\n</parameter>\n<parameter=days>\n3\n"
    "</parameter>\n<parameter=unit>\ncelsius\n</parameter>\n<parameter=detailed>\nTrue\n</parameter>\n"
    "<parameter=threshold>\n0.5\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=get_time>\n"
    "<parameter=zone>\nAsia/Tokyo\n</parameter>\n<parameter=options>\n{'format': '24h', 'fields': ['hour', 'minute']}\n"
    "</parameter>\n</function>\n</tool_call>";
/* The later revision of that template (also vLLM's examples/
 * tool_chat_template_qwen3coder.jinja): mappings and lists through tojson. */
static const char FIX_QWEN3_CODER_TOJSON[] =
    "<tool_call>\n<function=get_weather>\n<parameter=city>\nS\xc3\xa3o Paulo\n</parameter>\n<parameter=days>\n3\n"
    "</parameter>\n<parameter=unit>\ncelsius\n</parameter>\n<parameter=detailed>\nTrue\n</parameter>\n"
    "<parameter=threshold>\n0.5\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=get_time>\n"
    "<parameter=zone>\nAsia/Tokyo\n</parameter>\n<parameter=options>\n{\"format\": \"24h\", \"fields\": [\"hour\", "
    "\"minute\"]}\n</parameter>\n</function>\n</tool_call>";

static void test_qwen3_coder_outputs(void) {
    result r;
    parse_all_ways_t(GRAM_TOOLS_QWEN3_CODER, FIX_TOOLS, FIX_QWEN3_CODER, &r);
    expect_fixture_calls(&r);
    CHECK(strncmp(r.calls[0].id, "call_", 5) == 0 && strlen(r.calls[0].id) == 29);
    parse_all_ways_t(GRAM_TOOLS_QWEN3_CODER, FIX_TOOLS, FIX_QWEN3_CODER_TOJSON, &r);
    expect_fixture_calls(&r);
    /* without the tools every parameter is its text, as in vLLM */
    parse_all_ways(GRAM_TOOLS_QWEN3_CODER, FIX_QWEN3_CODER, &r);
    CHECK_EQ_INT(r.n_calls, 2);
    expect_call(&r, 0, "get_weather",
                "{\"city\": \"S\xc3\xa3o Paulo\", \"days\": \"3\", \"unit\": \"celsius\", \"detailed\": \"True\", "
                "\"threshold\": \"0.5\"}", true);
    expect_call(&r, 1, "get_time", "{\"zone\": \"Asia/Tokyo\", \"options\": \"{'format': '24h', 'fields': ['hour', "
                "'minute']}\"}", true);

    /* content first: the template writes it trimmed, then "\n" before each call */
    parse_all_ways_t(GRAM_TOOLS_QWEN3_CODER, FIX_TOOLS,
                     "Let me check.\n\n<tool_call>\n<function=get_time>\n<parameter=zone>\nUTC\n</parameter>\n"
                     "</function>\n</tool_call>", &r);
    expect_content(&r, "Let me check.\n\n");
    expect_call(&r, 0, "get_time", "{\"zone\": \"UTC\"}", true);

    /* a value spans lines and holds markup; an integer that is not one stays
     * text; "null" is null unless the type is a string; no parameters: {} */
    parse_all_ways_t(GRAM_TOOLS_QWEN3_CODER, FIX_TOOLS,
                     "<tool_call>\n<function=get_weather>\n<parameter=city>\n<b>Rio</b>\nde Janeiro\n\n</parameter>\n"
                     "<parameter=days>\nthree\n</parameter>\n<parameter=threshold>\nnull\n</parameter>\n"
                     "<parameter=unit>\nnull\n</parameter>\n</function>\n</tool_call>"
                     "<tool_call>\n<function=now>\n</function>\n</tool_call>", &r);
    CHECK_EQ_INT(r.n_calls, 2);
    expect_call(&r, 0, "get_weather", "{\"city\": \"<b>Rio</b>\\nde Janeiro\\n\", \"days\": \"three\", \"threshold\": "
                "null, \"unit\": \"null\"}", true);
    expect_call(&r, 1, "now", "{}", true);
    /* a missing </parameter>: the next parameter or </function> ends the value (vLLM too) */
    parse_all_ways_t(GRAM_TOOLS_QWEN3_CODER, FIX_TOOLS,
                     "<tool_call>\n<function=get_weather>\n<parameter=city>\nLima\n<parameter=days>\n2\n</function>\n"
                     "</tool_call>", &r);
    expect_call(&r, 0, "get_weather", "{\"city\": \"Lima\", \"days\": 2}", true);

    /* not a call: content; cut off: a begun call ends incomplete, never content */
    parse_all_ways(GRAM_TOOLS_QWEN3_CODER, "Use <tool_call> like <this>.", &r);
    expect_content(&r, "Use <tool_call> like <this>.");
    CHECK_EQ_INT(r.n_calls, 0);
    parse_all_ways_t(GRAM_TOOLS_QWEN3_CODER, FIX_TOOLS,
                     "Hi <tool_call>\n<function=get_weather>\n<parameter=days>\n4\n</parameter>\n<parameter=ci", &r);
    expect_content(&r, "Hi ");
    expect_call(&r, 0, "get_weather", "{\"days\": 4", false);
    parse_all_ways(GRAM_TOOLS_QWEN3_CODER, "Hi <tool_call>\n<funct", &r);
    expect_content(&r, "Hi ");
    CHECK_EQ_INT(r.n_calls, 0);
    /* text after the calls is content again */
    parse_all_ways(GRAM_TOOLS_QWEN3_CODER, "<tool_call>\n<function=now>\n</function>\n</tool_call>\nDone.", &r);
    expect_call(&r, 0, "now", "{}", true);
    expect_content(&r, "\nDone.");
}

/* GLM-4.6's chat template (zai-org/GLM-4.6 chat_template.jinja, as in
 * llama.cpp's models/templates/GLM-4.6.jinja; GLM-4.5's renders a call the
 * same), with thinking off: the generation prompt ends
 * "<|assistant|>\n<think></think>" and the model goes on with "\n<tool_call>". */
static const char FIX_GLM45[] =
    "\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>S\xc3\xa3o Paulo</arg_value>\n<arg_key>days</arg_key>\n"
    "<arg_value>3</arg_value>\n<arg_key>unit</arg_key>\n<arg_value>celsius</arg_value>\n<arg_key>detailed</arg_key>\n"
    "<arg_value>true</arg_value>\n<arg_key>threshold</arg_key>\n<arg_value>0.5</arg_value>\n</tool_call>\n"
    "<tool_call>get_time\n<arg_key>zone</arg_key>\n<arg_value>Asia/Tokyo</arg_value>\n<arg_key>options</arg_key>\n"
    "<arg_value>{\"format\": \"24h\", \"fields\": [\"hour\", \"minute\"]}</arg_value>\n</tool_call>";
/* GLM-4.7's template writes the same call without newlines. */
static const char FIX_GLM47[] =
    "<tool_call>get_time<arg_key>zone</arg_key><arg_value>Asia/Tokyo</arg_value><arg_key>options</arg_key>"
    "<arg_value>{\"format\": \"24h\", \"fields\": [\"hour\", \"minute\"]}</arg_value></tool_call>";

static void test_glm45_outputs(void) {
    result r;
    parse_all_ways_t(GRAM_TOOLS_GLM45, FIX_TOOLS, FIX_GLM45, &r);
    expect_fixture_calls(&r); /* the newline before the calls is no content (vLLM: null) */
    parse_all_ways(GRAM_TOOLS_GLM45, FIX_GLM45, &r); /* without tools: JSON where it parses, else text */
    expect_fixture_calls(&r);
    parse_all_ways_t(GRAM_TOOLS_GLM45, FIX_TOOLS, FIX_GLM47, &r);
    expect_call(&r, 0, "get_time", TIME_ARGS, true);
    /* a string parameter stays the text even when it reads as JSON, kept whole */
    parse_all_ways_t(GRAM_TOOLS_GLM45, FIX_TOOLS,
                     "Checking.\n<tool_call>get_time\n<arg_key>zone</arg_key>\n<arg_value> 123 </arg_value>\n</tool_call>", &r);
    expect_content(&r, "Checking.\n");
    expect_call(&r, 0, "get_time", "{\"zone\": \" 123 \"}", true);
    parse_all_ways(GRAM_TOOLS_GLM45, "<tool_call>get_time\n<arg_key>zone</arg_key>\n<arg_value> 123 </arg_value>\n</tool_call>",
                   &r);
    expect_call(&r, 0, "get_time", "{\"zone\": 123}", true);
    /* Python literals (ast.literal_eval) where JSON does not parse */
    parse_all_ways(GRAM_TOOLS_GLM45,
                   "<tool_call>f\n<arg_key>a</arg_key>\n<arg_value>{'k': (1, None)}</arg_value>\n</tool_call>", &r);
    expect_call(&r, 0, "f", "{\"a\": {\"k\": [1, null]}}", true);
    /* malformed before the name: content; cut off: incomplete */
    parse_all_ways(GRAM_TOOLS_GLM45, "a <tool_call>\n<arg_key>x</arg_key></tool_call> b", &r);
    expect_content(&r, "a <tool_call>\n<arg_key>x</arg_key></tool_call> b");
    CHECK_EQ_INT(r.n_calls, 0);
    parse_all_ways(GRAM_TOOLS_GLM45, "<tool_call>f\n<arg_key>x</arg_key>\n<arg_value>1</arg_value>\n<arg_key>y", &r);
    expect_call(&r, 0, "f", "{\"x\": 1", false);
    expect_content(&r, "");
}

/* vLLM's examples/tool_chat_template_llama3.2_pythonic.jinja writes each
 * argument with "%s" | format(value): Python's str(), so a string comes out
 * unquoted (then the list is no Python, and vLLM keeps it as content), the
 * other values as Python literals. Generation prompt
 * "<|start_header_id|>assistant<|end_header_id|>\n\n". */
static const char FIX_LLAMA32_PYTHONIC[] =
    "[get_weather(days=3, detailed=True, threshold=0.5, options={'format': '24h', 'fields': ['hour', 'minute']})]";
static const char FIX_LLAMA32_PYTHONIC_STRINGS[] =
    "[get_weather(city=S\xc3\xa3o Paulo, days=3, unit=celsius, detailed=True, threshold=0.5), get_time(zone=Asia/Tokyo, "
    "options={'format': '24h', 'fields': ['hour', 'minute']})]";
/* vLLM's examples/tool_chat_template_llama4_pythonic.jinja quotes every
 * value's str(). Generation prompt "<|header_start|>assistant<|header_end|>\n\n". */
static const char FIX_LLAMA4_PYTHONIC[] =
    "[get_weather(city=\"S\xc3\xa3o Paulo\", days=\"3\", unit=\"celsius\", detailed=\"True\", threshold=\"0.5\"), "
    "get_time(zone=\"Asia/Tokyo\", options=\"{'format': '24h', 'fields': ['hour', 'minute']}\")]";

static void test_pythonic_outputs(void) {
    result r;
    parse_all_ways(GRAM_TOOLS_PYTHONIC, FIX_LLAMA32_PYTHONIC, &r);
    expect_content(&r, "");
    expect_call(&r, 0, "get_weather",
                "{\"days\": 3, \"detailed\": true, \"threshold\": 0.5, \"options\": {\"format\": \"24h\", \"fields\": "
                "[\"hour\", \"minute\"]}}", true);
    parse_all_ways(GRAM_TOOLS_PYTHONIC, FIX_LLAMA32_PYTHONIC_STRINGS, &r);
    expect_content(&r, FIX_LLAMA32_PYTHONIC_STRINGS);
    CHECK_EQ_INT(r.n_calls, 0);
    parse_all_ways(GRAM_TOOLS_PYTHONIC, FIX_LLAMA4_PYTHONIC, &r);
    expect_content(&r, "");
    CHECK_EQ_INT(r.n_calls, 2);
    expect_call(&r, 0, "get_weather", "{\"city\": \"S\xc3\xa3o Paulo\", \"days\": \"3\", \"unit\": \"celsius\", "
                "\"detailed\": \"True\", \"threshold\": \"0.5\"}", true);
    expect_call(&r, 1, "get_time", "{\"zone\": \"Asia/Tokyo\", \"options\": \"{'format': '24h', 'fields': ['hour', "
                "'minute']}\"}", true);
    CHECK(strncmp(r.calls[1].id, "call_", 5) == 0 && strlen(r.calls[1].id) == 29);

    /* Llama 4's <|python_start|> ... <|python_end|>; Python's string forms,
     * commas and brackets inside strings, a sign, a tuple, no arguments */
    parse_all_ways(GRAM_TOOLS_PYTHONIC,
                   "<|python_start|>[search(q='a, (b)]', n=-2, t=(1, 'x'), raw=r'\\d+', s=\"it's\", u=\"\"\"x\"y\"\"\"), "
                   "now()]<|python_end|>", &r);
    CHECK_EQ_INT(r.n_calls, 2);
    expect_call(&r, 0, "search", "{\"q\": \"a, (b)]\", \"n\": -2, \"t\": [1, \"x\"], \"raw\": \"\\\\d+\", \"s\": \"it's\", "
                "\"u\": \"x\\\"y\"}", true);
    expect_call(&r, 1, "now", "{}", true);
    expect_content(&r, "");
    /* a list that is not calls, text before a list: content, as in vLLM */
    parse_all_ways(GRAM_TOOLS_PYTHONIC, "[1, 2] are numbers", &r);
    expect_content(&r, "[1, 2] are numbers");
    parse_all_ways(GRAM_TOOLS_PYTHONIC, "Sure: [f(a=1)]", &r);
    expect_content(&r, "Sure: [f(a=1)]");
    CHECK_EQ_INT(r.n_calls, 0);
    parse_all_ways(GRAM_TOOLS_PYTHONIC, "[f(a=undefined_name)]", &r);
    expect_content(&r, "[f(a=undefined_name)]");
    CHECK_EQ_INT(r.n_calls, 0);
    /* cut off inside the second call: the first stays, the rest is dropped */
    parse_all_ways(GRAM_TOOLS_PYTHONIC, "[f(a=1), g(b='x", &r);
    CHECK_EQ_INT(r.n_calls, 1);
    expect_call(&r, 0, "f", "{\"a\": 1}", true);
    expect_content(&r, "");
}

/* DeepSeek-V3's chat template (deepseek-ai/DeepSeek-V3-0324 and R1,
 * tokenizer_config.json), with the arguments as the string the API
 * carries; the format vLLM's deepseek_v3 parser reads. Generation prompt
 * "<｜Assistant｜>". */
#define DS_BAR "\xef\xbd\x9c"
#define DS_SP "\xe2\x96\x81"
#define DS_CALLS "<" DS_BAR "tool" DS_SP "calls" DS_SP "begin" DS_BAR ">"
#define DS_CALLS_END "<" DS_BAR "tool" DS_SP "calls" DS_SP "end" DS_BAR ">"
#define DS_CALL "<" DS_BAR "tool" DS_SP "call" DS_SP "begin" DS_BAR ">"
#define DS_CALL_END "<" DS_BAR "tool" DS_SP "call" DS_SP "end" DS_BAR ">"
#define DS_SEP "<" DS_BAR "tool" DS_SP "sep" DS_BAR ">"
static const char FIX_DEEPSEEK_V3[] =
    DS_CALLS DS_CALL "function" DS_SEP "get_weather\n```json\n{\"city\": \"S\xc3\xa3o Paulo\", \"days\": 3, \"unit\": "
    "\"celsius\", \"detailed\": true, \"threshold\": 0.5}\n```" DS_CALL_END "\n" DS_CALL "function" DS_SEP
    "get_time\n```json\n{\"zone\": \"Asia/Tokyo\", \"options\": {\"format\": \"24h\", \"fields\": [\"hour\", "
    "\"minute\"]}}\n```" DS_CALL_END DS_CALLS_END;
/* DeepSeek-V3.1's (deepseek-ai/DeepSeek-V3.1, as in llama.cpp's
 * models/templates/deepseek-ai-DeepSeek-V3.1.jinja): name before the
 * separator, the arguments after it. Generation prompt "<｜Assistant｜></think>". */
static const char FIX_DEEPSEEK_V31[] =
    DS_CALLS DS_CALL "get_weather" DS_SEP "{\"city\": \"S\xc3\xa3o Paulo\", \"days\": 3, \"unit\": \"celsius\", "
    "\"detailed\": true, \"threshold\": 0.5}" DS_CALL_END DS_CALL "get_time" DS_SEP "{\"zone\": \"Asia/Tokyo\", "
    "\"options\": {\"format\": \"24h\", \"fields\": [\"hour\", \"minute\"]}}" DS_CALL_END DS_CALLS_END;

static void test_deepseek_v3_outputs(void) {
    result r;
    parse_all_ways(GRAM_TOOLS_DEEPSEEK_V3, FIX_DEEPSEEK_V3, &r);
    expect_fixture_calls(&r);
    parse_all_ways(GRAM_TOOLS_DEEPSEEK_V3, FIX_DEEPSEEK_V31, &r);
    expect_fixture_calls(&r);
    parse_all_ways(GRAM_TOOLS_DEEPSEEK_V3, "I will look." DS_CALLS DS_CALL "function" DS_SEP "now\n```json\n{}\n```"
                   DS_CALL_END DS_CALLS_END " Done.", &r);
    expect_content(&r, "I will look. Done.");
    expect_call(&r, 0, "now", "{}", true);
    /* a partial marker is content; cut off inside the arguments: incomplete */
    parse_all_ways(GRAM_TOOLS_DEEPSEEK_V3, "<" DS_BAR "tool and more", &r);
    expect_content(&r, "<" DS_BAR "tool and more");
    parse_all_ways(GRAM_TOOLS_DEEPSEEK_V3, DS_CALLS DS_CALL "function" DS_SEP "f\n```json\n{\"a\": [1,", &r);
    expect_call(&r, 0, "f", "{\"a\": [1,", false);
    expect_content(&r, "");
}

/* Kimi-K2's chat template (moonshotai/Kimi-K2-Instruct-0905,
 * chat_template.jinja): the call's id is the model's "functions.NAME:IDX".
 * Generation prompt "<|im_assistant|>assistant<|im_middle|>". */
static const char FIX_KIMI_K2[] =
    "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{\"city\": "
    "\"S\xc3\xa3o Paulo\", \"days\": 3, \"unit\": \"celsius\", \"detailed\": true, \"threshold\": 0.5}<|tool_call_end|>"
    "<|tool_call_begin|>functions.get_time:1<|tool_call_argument_begin|>{\"zone\": \"Asia/Tokyo\", \"options\": "
    "{\"format\": \"24h\", \"fields\": [\"hour\", \"minute\"]}}<|tool_call_end|><|tool_calls_section_end|>";

static void test_kimi_k2_outputs(void) {
    result r;
    parse_all_ways(GRAM_TOOLS_KIMI_K2, FIX_KIMI_K2, &r);
    expect_fixture_calls(&r);
    CHECK(strcmp(r.calls[0].id, "functions.get_weather:0") == 0);
    CHECK(strcmp(r.calls[1].id, "functions.get_time:1") == 0);
    parse_all_ways(GRAM_TOOLS_KIMI_K2, "Sure.<|tool_calls_section_begin|>\n<|tool_call_begin|> get_time:7 "
                   "<|tool_call_argument_begin|> {} <|tool_call_end|>\n<|tool_calls_section_end|>", &r);
    expect_content(&r, "Sure.");
    expect_call(&r, 0, "get_time", "{}", true);
    CHECK(strcmp(r.calls[0].id, "get_time:7") == 0);
    /* an id without its index: not a call */
    parse_all_ways(GRAM_TOOLS_KIMI_K2, "<|tool_calls_section_begin|><|tool_call_begin|>functions.f<|tool_call_argument_begin|>{}",
                   &r);
    CHECK_EQ_INT(r.n_calls, 0);
    parse_all_ways(GRAM_TOOLS_KIMI_K2, "<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>"
                   "{\"x\": \"y", &r);
    expect_call(&r, 0, "f", "{\"x\": \"y", false);
    expect_content(&r, "");
}

/* Text made of each format's pieces (markers whole and cut, JSON and
 * Python fragments, plain words) at random: whatever the parser makes of
 * it, every split gives the same, events come in order, and nothing
 * crashes. */
static void test_random_text_any_split(void) {
    static const char *const pieces[] = {
        "<tool_call>", "</tool_call>", "<tool_", "\n", " ", "<function=f>", "<function=", ">", "</function>",
        "<parameter=p>", "</parameter>", "<parameter=", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>", "g",
        "[", "]", "(", ")", "=", ",", "'", "\"", "\"\"\"", "f(a=1)", "True", "None", "{", "}", "{\"a\": 1}", ":", "1",
        "[TOOL_CALLS]", "[ARGS]", "<|python_tag|>", "<|python_start|>", "<|python_end|>", DS_CALLS, DS_CALL, DS_SEP,
        DS_CALL_END, DS_CALLS_END, "<" DS_BAR "tool", "```json", "```", "function", "<|tool_calls_section_begin|>",
        "<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>", "<|tool_calls_section_end|>",
        "functions.f:0", "<|tool_", "\xc3\xa9", "\xc3", "text", "{\"name\": \"f\", \"arguments\": {}}", ";"};
    const size_t n_pieces = sizeof pieces / sizeof pieces[0];
    static const gram_tool_format fmts[] = {GRAM_TOOLS_HERMES,      GRAM_TOOLS_LLAMA3_JSON, GRAM_TOOLS_MISTRAL,
                                            GRAM_TOOLS_QWEN3_CODER, GRAM_TOOLS_PYTHONIC,    GRAM_TOOLS_DEEPSEEK_V3,
                                            GRAM_TOOLS_GLM45,       GRAM_TOOLS_KIMI_K2};
    uint64_t rng = 7;
    for (size_t f = 0; f < sizeof fmts / sizeof fmts[0]; f++) {
        for (int k = 0; k < 30; k++) {
            char text[400];
            size_t w = 0;
            int n = 1 + (int)(gt_rand(&rng) % 14);
            for (int i = 0; i < n; i++) {
                const char *pc = pieces[gt_rand(&rng) % n_pieces];
                size_t l = strlen(pc);
                if (w + l >= sizeof text) break;
                memcpy(text + w, pc, l);
                w += l;
            }
            text[w] = 0;
            result r;
            parse_all_ways_t(fmts[f], FIX_TOOLS, text, &r);
        }
    }
}

static void expect_text(const char *what, const char *got, size_t n, const char *want) {
    CHECK_MSG(n == strlen(want) && memcmp(got, want, n) == 0, "%s \"%.*s\", expected \"%s\"", what, (int)n, got, want);
}

/* The harmony format (gpt-oss), as the model writes it after the prompt's
 * <|start|>assistant (the markers are its control tokens' text): the
 * analysis channel is reasoning, final is content, a commentary message to
 * functions.NAME is a call whose body is the arguments, a commentary
 * message without a recipient (a preamble) is content; <|call|> and
 * <|return|> end generation, so the text may end without them. */
static void test_openai_harmony_outputs(void) {
    result r;
    parse_all_ways(GRAM_TOOLS_OPENAI, "<|channel|>analysis<|message|>User asks 2+2. Simple.<|end|>"
                   "<|start|>assistant<|channel|>final<|message|>2 + 2 = 4.<|return|>", &r);
    expect_text("reasoning", r.reasoning, r.reasoning_len, "User asks 2+2. Simple.");
    expect_text("content", r.content, r.content_len, "2 + 2 = 4.");
    CHECK_EQ_INT(r.n_calls, 0);
    /* a call, the recipient after the channel, <|call|> never fed (it stopped generation) */
    parse_all_ways(GRAM_TOOLS_OPENAI, "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant"
                   "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\"}", &r);
    expect_text("reasoning", r.reasoning, r.reasoning_len, "Need weather.");
    CHECK_EQ_INT((int)r.content_len, 0);
    CHECK_EQ_INT(r.n_calls, 1);
    expect_call(&r, 0, "get_weather", "{\"city\": \"Paris\"}", true);
    CHECK_MSG(strncmp(r.calls[0].id, "call_", 5) == 0 && strlen(r.calls[0].id) == 29, "id %s", r.calls[0].id);
    /* the recipient before the channel, <|call|> fed; a preamble on commentary is content */
    parse_all_ways(GRAM_TOOLS_OPENAI, "<|channel|>commentary<|message|>Checking the weather.<|end|><|start|>assistant "
                   "to=functions.lookup<|channel|>commentary json<|message|>{}<|call|>", &r);
    expect_text("content", r.content, r.content_len, "Checking the weather.");
    expect_call(&r, 0, "lookup", "{}", true);
    /* cut inside the arguments (max_tokens): incomplete */
    parse_all_ways(GRAM_TOOLS_OPENAI, "<|channel|>commentary to=functions.f<|message|>{\"a\": [1, 2", &r);
    expect_call(&r, 0, "f", "{\"a\": [1, 2", false);
    /* a marker inside the arguments (a control token sampled in a JSON string) cuts them: incomplete */
    parse_all_ways(GRAM_TOOLS_OPENAI, "<|channel|>commentary to=functions.f<|message|>{\"a\": \"x<|end|>y\"}", &r);
    expect_call(&r, 0, "f", "{\"a\": \"x", false);
    /* cut inside the reasoning: reasoning to its end, a partial marker included */
    parse_all_ways(GRAM_TOOLS_OPENAI, "<|channel|>analysis<|message|>thinking <|en", &r);
    expect_text("reasoning", r.reasoning, r.reasoning_len, "thinking <|en");
    CHECK_EQ_INT((int)r.content_len, 0);
    /* text in a body that only looks like a marker stays text */
    parse_all_ways(GRAM_TOOLS_OPENAI, "<|channel|>final<|message|>a <|b|> and <|endless|> c", &r);
    expect_text("content", r.content, r.content_len, "a <|b|> and <|endless|> c");
    /* not harmony at all: everything is content */
    parse_all_ways(GRAM_TOOLS_OPENAI, "Hello there, <b>friend</b>", &r);
    expect_text("content", r.content, r.content_len, "Hello there, <b>friend</b>");
    parse_all_ways(GRAM_TOOLS_OPENAI, "the answer", &r);
    expect_text("content", r.content, r.content_len, "the answer");
    CHECK_EQ_INT((int)r.reasoning_len, 0);
    /* a final message with no analysis before it */
    parse_all_ways(GRAM_TOOLS_OPENAI, "<|channel|>final<|message|>Hi!", &r);
    expect_text("content", r.content, r.content_len, "Hi!");
}

static void test_format_names(void) {
    static const char *const names[] = {"hermes", "llama3_json", "mistral", "qwen3_coder", "pythonic", "deepseek_v3",
                                        "glm45", "kimi_k2", "openai"};
    static const gram_tool_format fmts[] = {GRAM_TOOLS_HERMES, GRAM_TOOLS_LLAMA3_JSON, GRAM_TOOLS_MISTRAL,
                                            GRAM_TOOLS_QWEN3_CODER, GRAM_TOOLS_PYTHONIC, GRAM_TOOLS_DEEPSEEK_V3,
                                            GRAM_TOOLS_GLM45, GRAM_TOOLS_KIMI_K2, GRAM_TOOLS_OPENAI};
    for (int i = 0; i < 9; i++) {
        gram_tool_format f;
        CHECK(gram_tool_format_parse(names[i], &f) == 0 && f == fmts[i]);
        CHECK(strcmp(gram_tool_format_name(fmts[i]), names[i]) == 0);
    }
    gram_tool_format f;
    CHECK(gram_tool_format_parse("qwen3_xml", &f) != 0);
    CHECK(gram_tool_format_parse("", &f) != 0);
    /* the markers a vocabulary may hold as control tokens */
    const char *const *m = gram_tool_format_markers(GRAM_TOOLS_KIMI_K2);
    CHECK(m[0] && strcmp(m[0], "<|tool_calls_section_begin|>") == 0);
    m = gram_tool_format_markers(GRAM_TOOLS_DEEPSEEK_V3);
    CHECK(m[0] && strcmp(m[0], DS_CALLS) == 0);
    m = gram_tool_format_markers(GRAM_TOOLS_MISTRAL);
    CHECK(m[0] && strcmp(m[0], "[TOOL_CALLS]") == 0 && m[1] && strcmp(m[1], "[ARGS]") == 0 && !m[2]);
}

/* ---- forced calls ---- */

static const char TOOLS[] =
    "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Weather now\", "
    "\"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\", \"maxLength\": 30}, "
    "\"unit\": {\"enum\": [\"celsius\", \"fahrenheit\"]}}, \"required\": [\"city\"]}}},"
    " {\"type\": \"function\", \"function\": {\"name\": \"add\", \"parameters\": {\"type\": \"object\", \"properties\": "
    "{\"a\": {\"type\": \"integer\", \"minimum\": -100, \"maximum\": 100}, \"b\": {\"type\": \"number\"}}, "
    "\"required\": [\"a\", \"b\"], \"additionalProperties\": false}}},"
    " {\"type\": \"function\", \"function\": {\"name\": \"now\"}}]";

static json_t *params_of(json_t *tools, const char *name) {
    for (size_t i = 0; i < json_array_size(tools); i++) {
        json_t *f = json_object_get(json_array_get(tools, i), "function");
        if (strcmp(json_string_value(json_object_get(f, "name")), name) == 0) {
            return json_object_get(f, "parameters"); /* NULL: no parameters */
        }
    }
    return NULL;
}

/* Calls generated under the forced-call grammar of tools_json (seeds
 * 1..n_seeds) parse back with the format's parser into calls whose
 * arguments validate against their function's parameters. */
static void forced_calls_of(const char *vocab, gram_tool_format fmt, const char *tools_json, const char *only,
                            bool parallel, int n_seeds) {
    const gram_vocab *v = gt_vocab(vocab);
    gram_spec spec = {.kind = GRAM_TOOL_CALL, .text = tools_json, .tool_format = fmt, .tool_name = only, .parallel = parallel};
    gram_grammar *g = NULL;
    pdl_error err;
    REQUIRE_MSG(gram_compile(&g, v, &spec, &err) == 0, "%s", err.message);
    json_t *tools = json_loads(tools_json, 0, NULL);
    REQUIRE(tools);
    for (uint64_t seed = 1; seed <= (uint64_t)n_seeds; seed++) {
        size_t len;
        char *out = gt_generate(g, seed, 1500, 20, &len);
        result r;
        parse_t(fmt, tools_json, out, NULL, 0, &r);
        CHECK_MSG(r.n_calls >= 1, "%s: no call parsed from %s", vocab, out);
        CHECK_MSG(r.content_len == 0, "%s: content \"%.*s\" beside the forced call", vocab, (int)r.content_len, r.content);
        if (!parallel || only) CHECK_MSG(r.n_calls == 1, "%s: %d calls from %s", vocab, r.n_calls, out);
        for (int i = 0; i < r.n_calls; i++) {
            CHECK(r.calls[i].complete);
            if (only) CHECK(strcmp(r.calls[i].name, only) == 0);
            json_t *params = params_of(tools, r.calls[i].name);
            bool known = params || strcmp(r.calls[i].name, "now") == 0;
            if (fmt == GRAM_TOOLS_KIMI_K2) /* the model's id: functions.NAME:INDEX */
                CHECK_MSG(strncmp(r.calls[i].id, "functions.", 10) == 0 && strstr(r.calls[i].id, r.calls[i].name) &&
                          strchr(r.calls[i].id, ':'), "%s: id %s", vocab, r.calls[i].id);
            CHECK_MSG(known, "%s: unknown function \"%s\"", vocab, r.calls[i].name);
            json_t *args = json_loadb(r.calls[i].args, r.calls[i].args_len, JSON_DECODE_INT_AS_REAL, NULL);
            CHECK_MSG(args && json_is_object(args), "%s: arguments are not a JSON object: %.*s", vocab, (int)r.calls[i].args_len,
                      r.calls[i].args);
            char why[256];
            if (args && params) CHECK_MSG(jv_validate(args, params, params, why, sizeof why), "%s: %s: %s", vocab, why, out);
            if (args && !params) CHECK(json_object_size(args) == 0);
            json_decref(args);
        }
        free(out);
    }
    json_decref(tools);
    gram_grammar_free(g);
}

static void forced_calls(const char *vocab, gram_tool_format fmt, const char *only, bool parallel) {
    forced_calls_of(vocab, fmt, TOOLS, only, parallel, 6);
}

static void test_forced_calls_hermes_qwen3(void) {
    forced_calls("qwen3", GRAM_TOOLS_HERMES, NULL, true);
    forced_calls("qwen3", GRAM_TOOLS_HERMES, "add", false);
}
static void test_forced_calls_llama3(void) {
    forced_calls("llama3", GRAM_TOOLS_LLAMA3_JSON, NULL, false);
    forced_calls("llama3", GRAM_TOOLS_LLAMA3_JSON, "get_weather", false);
}
static void test_forced_calls_mistral(void) { forced_calls("mistral", GRAM_TOOLS_MISTRAL, NULL, true); }

/* Parameters of every kind the XML-like and pythonic formats write one by
 * one: strings free, bounded, patterned, formatted and from an enum behind
 * a $ref; numbers; a boolean; an array and an object (JSON text, no raw
 * '<'); a nullable string (anyOf) and type lists (Python literals for
 * qwen3_coder: True, None). */
static const char TOOLS_PARAMS[] =
    "[{\"type\": \"function\", \"function\": {\"name\": \"book\", \"parameters\": {\"type\": \"object\", "
    "\"$defs\": {\"seat\": {\"type\": \"string\", \"enum\": [\"aisle\", \"window\"]}}, \"properties\": {"
    "\"who\": {\"type\": \"string\", \"maxLength\": 12}, "
    "\"code\": {\"type\": \"string\", \"pattern\": \"^[A-Z]{3}[0-9]{2}$\"}, "
    "\"day\": {\"type\": \"string\", \"format\": \"date\"}, "
    "\"note\": {\"type\": \"string\"}, "
    "\"seat\": {\"$ref\": \"#/$defs/seat\"}, "
    "\"n\": {\"type\": \"integer\", \"minimum\": 1, \"maximum\": 9}, "
    "\"price\": {\"type\": \"number\", \"minimum\": 0, \"maximum\": 1000}, "
    "\"vip\": {\"type\": \"boolean\"}, "
    "\"tags\": {\"type\": \"array\", \"items\": {\"type\": \"string\", \"maxLength\": 6}, \"maxItems\": 2}, "
    "\"opts\": {\"type\": \"object\", \"properties\": {\"x\": {\"type\": \"integer\"}, \"y\": {\"type\": \"string\", "
    "\"maxLength\": 5}}, \"required\": [\"x\"], \"additionalProperties\": false}, "
    "\"memo\": {\"anyOf\": [{\"type\": \"string\", \"maxLength\": 8}, {\"type\": \"null\"}]}, "
    "\"level\": {\"type\": [\"integer\", \"null\"], \"minimum\": 0, \"maximum\": 99}, "
    "\"flag\": {\"type\": [\"boolean\", \"null\"]}}, "
    "\"required\": [\"who\", \"code\", \"day\", \"note\", \"seat\", \"n\", \"price\", \"vip\", \"tags\", \"opts\", "
    "\"flag\"], "
    "\"additionalProperties\": false}}},"
    " {\"type\": \"function\", \"function\": {\"name\": \"now\"}}]";

static void test_forced_calls_qwen3_coder(void) {
    forced_calls("qwen3", GRAM_TOOLS_QWEN3_CODER, NULL, true);
    forced_calls("qwen3", GRAM_TOOLS_QWEN3_CODER, "add", false);
    forced_calls_of("qwen3", GRAM_TOOLS_QWEN3_CODER, TOOLS_PARAMS, "book", false, 12);
}
static void test_forced_calls_glm45(void) {
    forced_calls("qwen3", GRAM_TOOLS_GLM45, NULL, true);
    forced_calls_of("qwen3", GRAM_TOOLS_GLM45, TOOLS_PARAMS, "book", false, 12);
}
static void test_forced_calls_pythonic(void) {
    forced_calls("qwen3", GRAM_TOOLS_PYTHONIC, NULL, true);
    forced_calls("llama3", GRAM_TOOLS_PYTHONIC, "get_weather", false);
    forced_calls_of("qwen3", GRAM_TOOLS_PYTHONIC, TOOLS_PARAMS, "book", false, 12);
}
static void test_forced_calls_deepseek_v3(void) {
    forced_calls("qwen3", GRAM_TOOLS_DEEPSEEK_V3, NULL, true);
    forced_calls("qwen3", GRAM_TOOLS_DEEPSEEK_V3, "get_weather", false);
}
static void test_forced_calls_openai(void) {
    forced_calls("qwen3", GRAM_TOOLS_OPENAI, NULL, false);
    forced_calls("qwen3", GRAM_TOOLS_OPENAI, "get_weather", false);
}
/* Under harmony (gpt-oss) a constraint applies to the answer: generated
 * under the mask, the output may open with an analysis message of free
 * text, then the final channel's message is the schema's JSON, or a
 * commentary message is the forced call; the harmony reader gets them
 * back. */
static void test_harmony_constraints_apply_to_the_answer(void) {
    const gram_vocab *v = gt_vocab("qwen3");
    static const char SCHEMA[] = "{\"type\": \"object\", \"properties\": {\"n\": {\"type\": \"integer\"}}, "
                                 "\"required\": [\"n\"], \"additionalProperties\": false}";
    gram_spec specs[2] = {{.kind = GRAM_JSON_SCHEMA, .text = SCHEMA, .harmony = true},
                          {.kind = GRAM_TOOL_CALL, .text = TOOLS, .tool_format = GRAM_TOOLS_OPENAI, .harmony = true}};
    int with_analysis = 0;
    for (int k = 0; k < 2; k++) {
        gram_grammar *g = NULL;
        pdl_error err;
        REQUIRE_MSG(gram_compile(&g, v, &specs[k], &err) == 0, "%s", err.message);
        for (uint64_t seed = 1; seed <= 12; seed++) {
            size_t len;
            char *out = gt_generate(g, seed, 1500, 20, &len);
            result r;
            parse_t(GRAM_TOOLS_OPENAI, NULL, out, NULL, 0, &r);
            with_analysis += r.reasoning_len > 0 || strstr(out, "analysis") != NULL;
            if (k == 0) {
                json_t *j = json_loadb(r.content, r.content_len, 0, NULL);
                CHECK_MSG(j && json_is_integer(json_object_get(j, "n")) && json_object_size(j) == 1,
                          "the answer is not the schema's JSON: %s", out);
                CHECK_EQ_INT(r.n_calls, 0);
                json_decref(j);
            } else {
                CHECK_MSG(r.n_calls == 1 && r.calls[0].complete && r.content_len == 0, "no forced call in %s", out);
            }
            free(out);
        }
        gram_grammar_free(g);
    }
    CHECK_MSG(with_analysis > 0, "no output took the analysis message");
}

static void test_forced_calls_kimi_k2(void) {
    forced_calls("qwen3", GRAM_TOOLS_KIMI_K2, NULL, true);
    forced_calls("qwen3", GRAM_TOOLS_KIMI_K2, "add", false);
}

/* What a format cannot write is refused when the grammar is made, naming
 * the parameter or function. */
static void test_forced_call_format_limits(void) {
    const gram_vocab *v = gt_vocab("stories");
    gram_spec spec = {.kind = GRAM_TOOL_CALL, .tool_format = GRAM_TOOLS_PYTHONIC};
    gram_grammar *g = NULL;
    pdl_error err;
    spec.text = "[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {\"type\": \"object\", "
                "\"properties\": {\"user-id\": {\"type\": \"integer\"}}}}}]";
    CHECK(gram_compile(&g, v, &spec, &err) != 0);
    CHECK_CONTAINS(err.message, "'user-id'");
    spec.text = "[{\"type\": \"function\", \"function\": {\"name\": \"get.weather\"}}]";
    spec.tool_format = GRAM_TOOLS_KIMI_K2;
    CHECK(gram_compile(&g, v, &spec, &err) != 0);
    CHECK_CONTAINS(err.message, "kimi_k2");
    /* qwen3_coder reads an untyped parameter as a string: an enum of numbers cannot be written */
    spec.tool_format = GRAM_TOOLS_QWEN3_CODER;
    spec.text = "[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {\"type\": \"object\", "
                "\"properties\": {\"n\": {\"enum\": [1, 2]}}}}}]";
    CHECK(gram_compile(&g, v, &spec, &err) != 0);
    CHECK_CONTAINS(err.message, "parameter 'n'");
    /* ... which glm45 reads as JSON, so there it can */
    spec.tool_format = GRAM_TOOLS_GLM45;
    CHECK_MSG(gram_compile(&g, v, &spec, &err) == 0, "%s", err.message);
    gram_grammar_free(g);
    /* a schema keyword the compiler refuses is named with its pointer */
    spec.text = "[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {\"type\": \"object\", "
                "\"properties\": {\"x\": {\"type\": \"integer\", \"not\": {}}}}}}]";
    CHECK(gram_compile(&g, v, &spec, &err) != 0);
    CHECK_CONTAINS(err.message, "tools[0].function.parameters");
    CHECK_CONTAINS(err.message, "#/properties/x/not");
}

/* A free string parameter may hold markup, but never the marker that
 * would end it: the mask refuses "</parameter>" inside it and allows it
 * right after. */
static void test_forced_text_never_closes_early(void) {
    const gram_vocab *v = gt_vocab("qwen3");
    gram_spec spec = {.kind = GRAM_TOOL_CALL, .tool_format = GRAM_TOOLS_QWEN3_CODER,
                      .text = "[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {\"type\": "
                              "\"object\", \"properties\": {\"s\": {\"type\": \"string\"}}, \"required\": [\"s\"]}}}]"};
    gram_grammar *g = NULL;
    pdl_error err;
    REQUIRE_MSG(gram_compile(&g, v, &spec, &err) == 0, "%s", err.message);
    const char *head = "<tool_call>\n<function=f>\n<parameter=s>\n";
    char buf[200];
    snprintf(buf, sizeof buf, "%s<b>x</b> < y</", head);
    CHECK(gt_prefix_ok(g, buf, strlen(buf)));
    snprintf(buf, sizeof buf, "%sa</parameter>", head);
    CHECK(!gt_prefix_ok(g, buf, strlen(buf)));
    snprintf(buf, sizeof buf, "%sa<parameter=", head);
    CHECK(!gt_prefix_ok(g, buf, strlen(buf)));
    snprintf(buf, sizeof buf, "%sa</function>", head);
    CHECK(!gt_prefix_ok(g, buf, strlen(buf)));
    snprintf(buf, sizeof buf, "%sa</parameter\n</parameter>\n</function>\n</tool_call>", head);
    CHECK(gt_accepts(g, buf, strlen(buf)));
    gram_grammar_free(g);
}

static void test_forced_call_errors(void) {
    const gram_vocab *v = gt_vocab("stories");
    gram_spec spec = {.kind = GRAM_TOOL_CALL, .text = TOOLS, .tool_format = GRAM_TOOLS_HERMES, .tool_name = "missing"};
    gram_grammar *g = NULL;
    pdl_error err;
    CHECK(gram_compile(&g, v, &spec, &err) != 0);
    CHECK_CONTAINS(err.message, "'missing'");
    spec.tool_name = NULL;
    spec.text = "[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {\"type\": \"object\", "
                "\"properties\": {\"x\": {\"not\": {}}}}}}]";
    CHECK(gram_compile(&g, v, &spec, &err) != 0);
    CHECK_CONTAINS(err.message, "tools[0].function.parameters");
    CHECK_CONTAINS(err.message, "#/properties/x/not");
}

/* A control token the grammar names ([TOOL_CALLS]) may be sampled as itself. */
static void test_special_token_stands_for_its_text(void) {
    const char *bytes[260];
    uint32_t lens[260];
    bool special[260] = {0};
    static char single[256];
    for (int b = 0; b < 256; b++) {
        single[b] = (char)b;
        bytes[b] = &single[b];
        lens[b] = 1;
    }
    bytes[256] = "[TOOL_CALLS]";
    lens[256] = 12;
    special[256] = true;
    bytes[257] = "<s>";
    lens[257] = 3;
    special[257] = true;
    bytes[258] = "{\"";
    lens[258] = 2;
    bytes[259] = "</s>";
    lens[259] = 4;
    int32_t end = 259;
    gram_vocab *v = NULL;
    pdl_error err;
    REQUIRE(gram_vocab_new(&v, 260, bytes, lens, special, &end, 1, &err) == 0);
    gram_spec spec = {.kind = GRAM_TOOL_CALL, .text = TOOLS, .tool_format = GRAM_TOOLS_MISTRAL, .tool_name = "now"};
    gram_grammar *g = NULL;
    REQUIRE_MSG(gram_compile(&g, v, &spec, &err) == 0, "%s", err.message);
    gram_matcher *m = gram_matcher_new(g);
    uint64_t bits[5];
    gram_matcher_fill_mask(m, bits);
    CHECK(bits[256 / 64] >> (256 % 64) & 1);  /* [TOOL_CALLS] itself */
    CHECK(!(bits['[' / 64] >> ('[' % 64) & 1)); /* not its text: the vocabulary holds it as a control token */
    CHECK(!(bits[257 / 64] >> (257 % 64) & 1)); /* other control tokens: never */
    CHECK(!gram_matcher_accept_bytes(m, "[TOOL_CALLS]", 12));
    CHECK(gram_matcher_accept_token(m, 256));
    CHECK(gram_matcher_accept_bytes(m, "[", 1));
    CHECK(gram_matcher_accept_token(m, 258));
    CHECK(gram_matcher_accept_bytes(m, "name\": \"now\", \"arguments\": {}}]", 31));
    CHECK(gram_matcher_is_accepting(m));
    gram_matcher_free(m);
    gram_grammar_free(g);
    gram_vocab_free(v);
}

/* A marker that is a control token of the vocabulary is allowed where the
 * format writes it and nowhere else: not spelled as text, not inside the
 * analysis message's free text, not inside a JSON string of the arguments
 * (a random-weight gpt-oss sampled control tokens there when their text
 * merely fitted). A token holding a byte 0xFF (never UTF-8 text; grammars
 * write 0xFF for a control token's place) is never allowed. */
static void test_harmony_markers_only_where_the_format_writes_them(void) {
    enum { N = 256 + 5 };
    static const char *const marks[5] = {"<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|constrain|>"};
    const char *bytes[N];
    uint32_t lens[N];
    bool special[N] = {0};
    static char single[256];
    for (int b = 0; b < 256; b++) {
        single[b] = (char)b;
        bytes[b] = &single[b];
        lens[b] = 1;
    }
    for (int k = 0; k < 5; k++) {
        bytes[256 + k] = marks[k];
        lens[256 + k] = (uint32_t)strlen(marks[k]);
        special[256 + k] = true;
    }
    enum { START = 256, CHANNEL, MESSAGE, END, CONSTRAIN };
    gram_vocab *v = NULL;
    pdl_error err;
    REQUIRE(gram_vocab_new(&v, N, bytes, lens, special, NULL, 0, &err) == 0);
    static const char WEATHER[] = "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": "
                                  "{\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}, "
                                  "\"required\": [\"city\"]}}}]";
    gram_spec spec = {.kind = GRAM_TOOL_CALL, .text = WEATHER, .tool_format = GRAM_TOOLS_OPENAI, .harmony = true};
    gram_grammar *g = NULL;
    REQUIRE_MSG(gram_compile(&g, v, &spec, &err) == 0, "%s", err.message);
    gram_matcher *m = gram_matcher_new(g);
    uint64_t bits[(N + 63) / 64];
#define ALLOWED(id) (bits[(id) / 64] >> ((id) % 64) & 1)
    gram_matcher_fill_mask(m, bits);
    CHECK(ALLOWED(CHANNEL));
    CHECK(!ALLOWED('<')); /* the marker's text spelled out */
    REQUIRE(gram_matcher_accept_token(m, CHANNEL));
    REQUIRE(gram_matcher_accept_bytes(m, "analysis", 8));
    REQUIRE(gram_matcher_accept_token(m, MESSAGE));
    REQUIRE(gram_matcher_accept_bytes(m, "I think <b> a|b", 15));
    gram_matcher_fill_mask(m, bits); /* free text: any text, and the end marker only */
    CHECK(ALLOWED('<') && ALLOWED('x') && ALLOWED(END));
    CHECK(!ALLOWED(START) && !ALLOWED(CHANNEL) && !ALLOWED(MESSAGE) && !ALLOWED(CONSTRAIN) && !ALLOWED(0xFF));
    REQUIRE(gram_matcher_accept_token(m, END));
    REQUIRE(gram_matcher_accept_token(m, START));
    REQUIRE(gram_matcher_accept_bytes(m, "assistant", 9));
    REQUIRE(gram_matcher_accept_token(m, CHANNEL));
    REQUIRE(gram_matcher_accept_bytes(m, "commentary to=functions.get_weather ", 36));
    REQUIRE(gram_matcher_accept_token(m, CONSTRAIN));
    REQUIRE(gram_matcher_accept_bytes(m, "json", 4));
    REQUIRE(gram_matcher_accept_token(m, MESSAGE));
    REQUIRE(gram_matcher_accept_bytes(m, "{\"city\": \"Pa", 12));
    gram_matcher_fill_mask(m, bits); /* inside the JSON string */
    CHECK(ALLOWED('r') && ALLOWED('<') && ALLOWED('"'));
    for (int id = START; id <= CONSTRAIN; id++) CHECK_MSG(!ALLOWED(id), "control token %s inside a string", marks[id - START]);
    CHECK(!ALLOWED(0xFF));
    CHECK(!gram_matcher_accept_token(m, START));
    REQUIRE(gram_matcher_accept_bytes(m, "ris\"}", 5));
    CHECK(gram_matcher_is_accepting(m));
#undef ALLOWED
    gram_matcher_free(m);
    gram_grammar_free(g);
    gram_vocab_free(v);
}

int main(void) {
    RUN(test_hermes_outputs);
    RUN(test_harmony_markers_only_where_the_format_writes_them);
    RUN(test_llama3_json_outputs);
    RUN(test_mistral_outputs);
    RUN(test_qwen3_coder_outputs);
    RUN(test_glm45_outputs);
    RUN(test_pythonic_outputs);
    RUN(test_deepseek_v3_outputs);
    RUN(test_kimi_k2_outputs);
    RUN(test_openai_harmony_outputs);
    RUN(test_random_text_any_split);
    RUN(test_format_names);
    RUN(test_forced_calls_hermes_qwen3);
    RUN(test_forced_calls_llama3);
    RUN(test_forced_calls_mistral);
    RUN(test_forced_calls_qwen3_coder);
    RUN(test_forced_calls_glm45);
    RUN(test_forced_calls_pythonic);
    RUN(test_forced_calls_deepseek_v3);
    RUN(test_forced_calls_kimi_k2);
    RUN(test_forced_calls_openai);
    RUN(test_harmony_constraints_apply_to_the_answer);
    RUN(test_forced_call_errors);
    RUN(test_forced_call_format_limits);
    RUN(test_forced_text_never_closes_early);
    RUN(test_special_token_stands_for_its_text);
    return test_summary();
}
