/*
 * test_server_format.c - what `pagedlm serve` writes, without HTTP: error
 * bodies, completion and chat objects, SSE chunks (role chunk, one chunk per
 * token, finish chunk, usage chunk, [DONE]), system_fingerprint (the
 * replica's name) in objects and chunks, logprobs in both APIs' shapes,
 * the Prometheus exposition (vLLM names, cumulative buckets, escaped
 * labels), and llama-server's /infill result, whole and streamed. Events
 * are made by hand; token texts come from stories260K.
 */
#define _POSIX_C_SOURCE 200809L
#include <jansson.h>
#include <string.h>

#include "engine/reasoning.h"
#include "server/api_format.h"
#include "server/metrics.h"
#include "test_util.h"

static pdl_model *model;

static void setup(void) {
    if (model) return;
    char *path = test_data_path("models/stories260K/stories260K.gguf");
    pdl_error err;
    REQUIRE_MSG(pdl_model_load(&model, path, NULL, &err) == 0, "%s", err.message);
    free(path);
}

/* A request over prompt "Once upon" = [1, 403, 407] with n sequences. */
static void make_request(srv_gen_request *r, srv_api_kind kind, int n) {
    memset(r, 0, sizeof *r);
    r->kind = kind;
    r->n_prompts = 1;
    r->prompts = calloc(1, sizeof *r->prompts);
    r->prompts[0].n_ids = 3;
    r->prompts[0].ids = malloc(3 * sizeof(int32_t));
    r->prompts[0].ids[0] = 1, r->prompts[0].ids[1] = 403, r->prompts[0].ids[2] = 407;
    r->prompts[0].text = strdup("Once upon");
    r->prompts[0].text_len = strlen("Once upon");
    r->params.n = n;
    r->logprobs = r->prompt_logprobs = -1;
}

static srv_event *event(pdl_event_kind kind, int index, int32_t token, const char *text, const char *finish) {
    srv_event *e = calloc(1, sizeof *e);
    e->kind = kind;
    e->index = index;
    e->token = token;
    e->text = strdup(text);
    e->text_len = strlen(text);
    e->finish_reason = finish;
    e->stop_token = -1;
    e->logprob = -0.5f;
    return e;
}

/* " a time" then the end: tokens 261 (" a") and 378 (" time"). */
static srv_event *story_events(const char *finish) {
    srv_event *a = event(PDL_EVENT_TOKEN, 0, 261, " a", NULL);
    a->next = event(PDL_EVENT_TOKEN, 0, 378, " time", NULL);
    a->next->next = event(PDL_EVENT_FINISHED, 0, -1, "", finish);
    return a;
}

static json_t *parse(const char *s) {
    json_t *o = json_loads(s, 0, NULL);
    REQUIRE_MSG(o != NULL, "not JSON: %s", s);
    return o;
}

static void test_error_body_has_the_openai_shape(void) {
    srv_api_error e;
    srv_api_fail(&e, 404, "model", "The model `x` does not exist.");
    e.code = "model_not_found";
    char *s = srv_error_body(&e, NULL);
    CHECK(strcmp(s, "{\"error\":{\"message\":\"The model `x` does not exist.\",\"type\":\"invalid_request_error\","
                    "\"param\":\"model\",\"code\":\"model_not_found\"}}") == 0);
    free(s);
    srv_api_fail(&e, 500, NULL, "boom");
    s = srv_error_body(&e, NULL);
    CHECK(strcmp(s, "{\"error\":{\"message\":\"boom\",\"type\":\"server_error\",\"param\":null,\"code\":null}}") == 0);
    free(s);
}

static void test_completion_object_and_usage(void) {
    setup();
    srv_gen_request r;
    make_request(&r, SRV_API_COMPLETION, 1);
    srv_response *resp = srv_response_new(model, &r, "stories", "127.0.0.1:8001", "cmpl-1", 1700000000);
    srv_event *evs = story_events("length");
    srv_response_add(resp, evs);
    srv_events_free(evs);
    char *s = srv_response_body(resp, NULL);
    CHECK(strcmp(s, "{\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"created\":1700000000,\"model\":\"stories\","
                    "\"system_fingerprint\":\"127.0.0.1:8001\","
                    "\"choices\":[{\"index\":0,\"text\":\" a time\",\"logprobs\":null,\"finish_reason\":\"length\","
                    "\"stop_reason\":null}],\"usage\":{\"prompt_tokens\":3,\"total_tokens\":5,\"completion_tokens\":2,"
                    "\"prompt_tokens_details\":{\"cached_tokens\":0}}}") == 0);
    free(s);
    srv_response_free(resp);
    srv_gen_request_free(&r);
}

static void test_completion_stream_chunks_then_usage_then_done(void) {
    setup();
    srv_gen_request r;
    make_request(&r, SRV_API_COMPLETION, 1);
    r.stream = r.include_usage = true;
    srv_response *resp = srv_response_new(model, &r, "stories", "r2", "cmpl-2", 7);
    sbuf out = {0};
    srv_response_stream_begin(resp, &out);
    CHECK_EQ_INT(out.len, 0); /* completions have no opening chunk */
    srv_event *evs = story_events("stop");
    srv_response_stream_events(resp, evs, &out);
    srv_events_free(evs);
    srv_response_stream_end(resp, &out);
    /* every chunk names the replica, as OpenAI's carry system_fingerprint */
#define HEAD "data: {\"id\":\"cmpl-2\",\"object\":\"text_completion\",\"created\":7,\"model\":\"stories\"," \
             "\"system_fingerprint\":\"r2\",\"choices\":"
    const char *expect =
        HEAD "[{\"index\":0,\"text\":\" a\",\"logprobs\":null,\"finish_reason\":null,\"stop_reason\":null}],"
        "\"usage\":null}\n\n"
        HEAD "[{\"index\":0,\"text\":\" time\",\"logprobs\":null,\"finish_reason\":null,\"stop_reason\":null}],"
        "\"usage\":null}\n\n"
        HEAD "[{\"index\":0,\"text\":\"\",\"logprobs\":null,\"finish_reason\":\"stop\",\"stop_reason\":null}],"
        "\"usage\":null}\n\n"
        HEAD "[],\"usage\":{\"prompt_tokens\":3,\"total_tokens\":5,\"completion_tokens\":2,\"prompt_tokens_details\":"
        "{\"cached_tokens\":0}}}\n\n"
        "data: [DONE]\n\n";
    CHECK_MSG(out.data && strcmp(out.data, expect) == 0, "got:\n%s", out.data ? out.data : "(null)");
#undef HEAD
    sbuf_free(&out);
    srv_response_free(resp);
    srv_gen_request_free(&r);
}

static void test_chat_stream_role_first_and_empty_finish_delta(void) {
    setup();
    srv_gen_request r;
    make_request(&r, SRV_API_CHAT, 2);
    r.stream = true;
    srv_response *resp = srv_response_new(model, &r, "stories", "r3", "chatcmpl-3", 9);
    sbuf out = {0};
    srv_response_stream_begin(resp, &out);
    srv_event *evs = event(PDL_EVENT_TOKEN, 1, 261, " a", NULL);
    evs->next = event(PDL_EVENT_FINISHED, 1, -1, "", "length");
    srv_response_stream_events(resp, evs, &out);
    srv_events_free(evs);
    srv_response_stream_end(resp, &out);
    const char *p = out.data;
    const char *deltas[] = {"{\"role\":\"assistant\",\"content\":\"\"}", "{\"role\":\"assistant\",\"content\":\"\"}",
                            "{\"content\":\" a\"}", "{}"};
    const int index[] = {0, 1, 1, 1};
    for (int i = 0; i < 4; i++) {
        REQUIRE(strncmp(p, "data: ", 6) == 0);
        const char *end = strstr(p, "\n\n");
        REQUIRE(end != NULL);
        char *line = strndup(p + 6, (size_t)(end - p - 6));
        json_t *o = parse(line);
        CHECK(strcmp(json_string_value(json_object_get(o, "object")), "chat.completion.chunk") == 0);
        CHECK(strcmp(json_string_value(json_object_get(o, "system_fingerprint")), "r3") == 0);
        CHECK(json_object_get(o, "usage") == NULL); /* only with include_usage */
        json_t *c = json_array_get(json_object_get(o, "choices"), 0);
        CHECK_EQ_INT(json_integer_value(json_object_get(c, "index")), index[i]);
        char *d = json_dumps(json_object_get(c, "delta"), JSON_COMPACT);
        CHECK_MSG(strcmp(d, deltas[i]) == 0, "chunk %d delta %s", i, d);
        json_t *fr = json_object_get(c, "finish_reason");
        CHECK(i == 3 ? json_is_string(fr) : json_is_null(fr));
        free(d);
        json_decref(o);
        free(line);
        p = end + 2;
    }
    CHECK(strcmp(p, "data: [DONE]\n\n") == 0);
    sbuf_free(&out);
    srv_response_free(resp);
    srv_gen_request_free(&r);
}

/* Tool calls parsed out of the text (hermes): a whole response has
 * message.tool_calls with content before the call; a stream split into one
 * event per byte gives delta.tool_calls chunks that add up to the same
 * call, and finish_reason "tool_calls". */
static const char TOOL_TEXT[] = "Sure.<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", "
                                "\"days\": [1, 2]}}\n</tool_call>";

/* text in events of `piece` bytes, then FINISHED with finish. */
static srv_event *text_events(const char *text, size_t piece, const char *finish) {
    srv_event *head = NULL, **tail = &head;
    size_t n = strlen(text);
    for (size_t i = 0; i < n; i += piece) {
        char buf[64];
        size_t len = n - i < piece ? n - i : piece;
        memcpy(buf, text + i, len);
        buf[len] = 0;
        *tail = event(PDL_EVENT_TOKEN, 0, 300, buf, NULL);
        tail = &(*tail)->next;
    }
    *tail = event(PDL_EVENT_FINISHED, 0, -1, "", finish);
    return head;
}

static srv_event *tool_events(size_t piece) { return text_events(TOOL_TEXT, piece, "stop"); }

static void tool_request(srv_gen_request *r) {
    make_request(r, SRV_API_CHAT, 1);
    r->parse_tools = true;
    r->tool_format = GRAM_TOOLS_HERMES;
    r->tool_calls_finish = true;
}

/* A reasoning model's output (--reasoning-parser qwen3): the thinking goes
 * to message.reasoning and reasoning_content, the answer to content, and a
 * tool call is parsed from the answer only (the one written inside the
 * thinking is not a call); streamed in single bytes, the reasoning deltas
 * come before any content and add up to the same texts. */
static void test_reasoning_apart_from_the_answer_and_its_tool_calls(void) {
    setup();
    static const char TEXT[] = "<think>\nI could write <tool_call>{\"name\": \"no\", \"arguments\": {}}</tool_call>.\n"
                               "</think>\n\nSure.<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                               "\"Paris\"}}\n</tool_call>";
    static const char REASONING[] = "I could write <tool_call>{\"name\": \"no\", \"arguments\": {}}</tool_call>.";
    srv_gen_request r;
    tool_request(&r);
    r.reasoning = reasoning_format_find("qwen3");
    r.include_reasoning = true;
    srv_response *resp = srv_response_new(model, &r, "stories", NULL, "chatcmpl-t", 9);
    srv_event *evs = text_events(TEXT, 7, "stop");
    srv_response_add(resp, evs);
    srv_events_free(evs);
    char *body = srv_response_body(resp, NULL);
    json_t *o = parse(body);
    json_t *c = json_array_get(json_object_get(o, "choices"), 0), *msg = json_object_get(c, "message");
    CHECK(strcmp(json_string_value(json_object_get(msg, "reasoning")), REASONING) == 0);
    CHECK(strcmp(json_string_value(json_object_get(msg, "reasoning_content")), REASONING) == 0);
    CHECK(strcmp(json_string_value(json_object_get(msg, "content")), "Sure.") == 0);
    json_t *calls = json_object_get(msg, "tool_calls");
    REQUIRE(json_array_size(calls) == 1);
    CHECK(strcmp(json_string_value(json_object_get(json_object_get(json_array_get(calls, 0), "function"), "name")),
                 "get_weather") == 0);
    CHECK(strcmp(json_string_value(json_object_get(c, "finish_reason")), "tool_calls") == 0);
    json_decref(o);
    free(body);
    srv_response_free(resp);

    /* streamed byte by byte */
    resp = srv_response_new(model, &r, "stories", NULL, "chatcmpl-t", 9);
    sbuf out = {0};
    srv_response_stream_begin(resp, &out);
    evs = text_events(TEXT, 1, "stop");
    srv_response_stream_events(resp, evs, &out);
    srv_events_free(evs);
    srv_response_stream_end(resp, &out);
    sbuf reasoning = {0}, content = {0};
    int n_calls = 0;
    bool content_seen = false, order_ok = true;
    for (char *line = out.data; line && *line;) {
        char *nl = strstr(line, "\n\n");
        if (!nl) break;
        *nl = '\0';
        if (strncmp(line, "data: {", 7) == 0) {
            json_t *ch = parse(line + 6);
            json_t *d = json_object_get(json_array_get(json_object_get(ch, "choices"), 0), "delta");
            const json_t *rt = json_object_get(d, "reasoning"), *ct = json_object_get(d, "content");
            if (rt) {
                CHECK(json_equal((json_t *)rt, json_object_get(d, "reasoning_content")));
                sbuf_append(&reasoning, json_string_value(rt), json_string_length(rt));
                if (content_seen) order_ok = false;
            }
            if (ct && json_string_length(ct)) {
                sbuf_append(&content, json_string_value(ct), json_string_length(ct));
                content_seen = true;
            }
            if (json_object_get(d, "tool_calls") && json_object_get(json_array_get(json_object_get(d, "tool_calls"), 0), "id"))
                n_calls++;
            json_decref(ch);
        }
        line = nl + 2;
    }
    CHECK(order_ok);
    CHECK(reasoning.data && strncmp(reasoning.data, REASONING, reasoning.len) == 0 && reasoning.len == strlen(REASONING));
    CHECK(content.data && content.len == 5 && memcmp(content.data, "Sure.", 5) == 0);
    CHECK_EQ_INT(n_calls, 1);
    sbuf_free(&reasoning), sbuf_free(&content), sbuf_free(&out);
    srv_response_free(resp);
    srv_gen_request_free(&r);
}

/* max_tokens cut the output inside a call (issue 33): finish_reason
 * "length", the complete calls before it kept, the cut one dropped and
 * none of its text in content; a forced call cut before its end gives no
 * call at all (not one with arguments ""). */
static void test_a_call_cut_by_max_tokens_is_dropped_and_the_finish_is_length(void) {
    setup();
    srv_gen_request r;
    tool_request(&r);
    static const struct {
        const char *text;
        int calls;
        const char *content; /* NULL: null */
    } cases[] = {
        {"Sure.<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n"
         "<tool_call>\n{\"name\": \"get_time\", \"argu", 1, "Sure."},
        {"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Pa", 0, ""},
        {"<tool_call>\n{\"na", 0, ""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        srv_response *resp = srv_response_new(model, &r, "stories", NULL, "chatcmpl-t", 9);
        srv_event *evs = text_events(cases[i].text, 5, "length");
        srv_response_add(resp, evs);
        srv_events_free(evs);
        char *body = srv_response_body(resp, NULL);
        json_t *o = parse(body);
        json_t *c = json_array_get(json_object_get(o, "choices"), 0), *msg = json_object_get(c, "message");
        CHECK_MSG(strcmp(json_string_value(json_object_get(c, "finish_reason")), "length") == 0, "case %zu", i);
        json_t *calls = json_object_get(msg, "tool_calls");
        CHECK_MSG((int)json_array_size(calls) == cases[i].calls, "case %zu: %zu calls", i, json_array_size(calls));
        const char *content = json_string_value(json_object_get(msg, "content"));
        CHECK_MSG(content && strcmp(content, cases[i].content) == 0, "case %zu: content '%s'", i,
                  content ? content : "(null)");
        CHECK_MSG(!strstr(body, "<tool_call>"), "case %zu: %s", i, body);
        json_decref(o);
        free(body);
        srv_response_free(resp);
    }
    srv_gen_request_free(&r);
}


static void test_tool_calls_whole_and_streamed(void) {
    setup();
    srv_gen_request r;
    tool_request(&r);
    srv_response *resp = srv_response_new(model, &r, "stories", NULL, "chatcmpl-t", 9);
    srv_event *evs = tool_events(7);
    srv_response_add(resp, evs);
    srv_events_free(evs);
    char *body = srv_response_body(resp, NULL);
    json_t *o = parse(body);
    json_t *c = json_array_get(json_object_get(o, "choices"), 0), *msg = json_object_get(c, "message");
    CHECK(strcmp(json_string_value(json_object_get(c, "finish_reason")), "tool_calls") == 0);
    CHECK(strcmp(json_string_value(json_object_get(msg, "content")), "Sure.") == 0);
    json_t *calls = json_object_get(msg, "tool_calls");
    REQUIRE(json_array_size(calls) == 1);
    json_t *call = json_array_get(calls, 0), *fn = json_object_get(call, "function");
    CHECK(strncmp(json_string_value(json_object_get(call, "id")), "call_", 5) == 0);
    CHECK(strcmp(json_string_value(json_object_get(call, "type")), "function") == 0);
    CHECK(strcmp(json_string_value(json_object_get(fn, "name")), "get_weather") == 0);
    json_t *args = json_loads(json_string_value(json_object_get(fn, "arguments")), 0, NULL);
    json_t *want = parse("{\"city\": \"Paris\", \"days\": [1, 2]}");
    CHECK(args && json_equal(args, want));
    json_decref(args), json_decref(want);
    char *whole_args = strdup(json_string_value(json_object_get(fn, "arguments")));
    json_decref(o);
    free(body);
    srv_response_free(resp);

    /* streamed, one byte per event: the deltas add up to the same message */
    resp = srv_response_new(model, &r, "stories", NULL, "chatcmpl-t", 9);
    sbuf out = {0};
    srv_response_stream_begin(resp, &out);
    evs = tool_events(1);
    srv_response_stream_events(resp, evs, &out);
    srv_events_free(evs);
    srv_response_stream_end(resp, &out);
    sbuf content = {0}, arguments = {0};
    int begins = 0;
    const char *finish = NULL;
    for (const char *p = out.data; strncmp(p, "data: {", 7) == 0;) {
        const char *end = strstr(p, "\n\n");
        REQUIRE(end);
        char *line = strndup(p + 6, (size_t)(end - p - 6));
        json_t *chunk = parse(line), *ch = json_array_get(json_object_get(chunk, "choices"), 0);
        json_t *d = json_object_get(ch, "delta");
        const json_t *t = json_object_get(d, "content");
        if (json_is_string(t)) sbuf_append(&content, json_string_value(t), json_string_length(t));
        json_t *tc = json_array_get(json_object_get(d, "tool_calls"), 0);
        if (tc) {
            CHECK_EQ_INT(json_integer_value(json_object_get(tc, "index")), 0);
            json_t *f = json_object_get(tc, "function");
            if (json_object_get(tc, "id")) {
                begins++;
                CHECK(strcmp(json_string_value(json_object_get(f, "name")), "get_weather") == 0);
            }
            const json_t *a = json_object_get(f, "arguments");
            if (json_is_string(a)) sbuf_append(&arguments, json_string_value(a), json_string_length(a));
        }
        const json_t *fr = json_object_get(ch, "finish_reason");
        if (json_is_string(fr)) {
            CHECK(strcmp(json_string_value(fr), "tool_calls") == 0);
            finish = "tool_calls";
        }
        json_decref(chunk);
        free(line);
        p = end + 2;
    }
    CHECK_EQ_INT(begins, 1);
    CHECK(finish != NULL);
    CHECK_MSG(content.len == 5 && memcmp(content.data, "Sure.", 5) == 0, "content '%.*s'", (int)content.len,
              content.data ? content.data : "");
    CHECK_MSG(arguments.len == strlen(whole_args) && memcmp(arguments.data, whole_args, arguments.len) == 0,
              "streamed arguments '%.*s' vs '%s'", (int)arguments.len, arguments.data ? arguments.data : "", whole_args);
    free(whole_args);
    sbuf_free(&content), sbuf_free(&arguments), sbuf_free(&out);
    srv_response_free(resp);
    srv_gen_request_free(&r);
}

/* Mistral: [TOOL_CALLS] is a control token, so the detokenized text leaves
 * it out (its event has no text); the parser is given its bytes from the
 * grammar vocabulary, and the call is found. */
static void test_mistral_marker_token_reaches_the_parser(void) {
    setup();
    const char *bytes[3] = {"[TOOL_CALLS]", "x", "</s>"};
    uint32_t lens[3] = {12, 1, 4};
    bool special[3] = {true, false, true};
    int32_t end = 2;
    gram_vocab *v = NULL;
    pdl_error err;
    REQUIRE(gram_vocab_new(&v, 3, bytes, lens, special, &end, 1, &err) == 0);
    for (int with_marker = 0; with_marker < 2; with_marker++) {
        srv_gen_request r;
        make_request(&r, SRV_API_CHAT, 1);
        r.parse_tools = true;
        r.tool_format = GRAM_TOOLS_MISTRAL;
        r.tool_calls_finish = true;
        r.tool_vocab = v;
        srv_response *resp = srv_response_new(model, &r, "stories", NULL, "chatcmpl-m", 9);
        srv_event *evs = event(PDL_EVENT_TOKEN, 0, with_marker ? 0 : 1, "", NULL);
        evs->next = event(PDL_EVENT_TOKEN, 0, 1, "[{\"name\": \"f\", \"arguments\": {\"a\": 1}}]", NULL);
        evs->next->next = event(PDL_EVENT_FINISHED, 0, -1, "", "stop");
        srv_response_add(resp, evs);
        srv_events_free(evs);
        char *body = srv_response_body(resp, NULL);
        json_t *o = parse(body);
        json_t *c = json_array_get(json_object_get(o, "choices"), 0), *msg = json_object_get(c, "message");
        json_t *calls = json_object_get(msg, "tool_calls");
        if (with_marker) {
            CHECK_MSG(json_array_size(calls) == 1, "%s", body);
            CHECK(strcmp(json_string_value(json_object_get(json_object_get(json_array_get(calls, 0), "function"),
                                                           "name")), "f") == 0);
            CHECK(strcmp(json_string_value(json_object_get(c, "finish_reason")), "tool_calls") == 0);
        } else { /* without the marker the text is content */
            CHECK_MSG(calls == NULL, "%s", body);
            CHECK(json_is_string(json_object_get(msg, "content")));
        }
        json_decref(o);
        free(body);
        srv_response_free(resp);
        srv_gen_request_free(&r);
    }
    gram_vocab_free(v);
}

/* Kimi-K2's markers are control tokens too: each one's event has no text,
 * the parser is given its bytes, and the call comes out with the model's
 * own id. */
static void test_kimi_marker_tokens_reach_the_parser(void) {
    setup();
    const char *bytes[7] = {"<|tool_calls_section_begin|>", "<|tool_call_begin|>", "<|tool_call_argument_begin|>",
                            "<|tool_call_end|>", "<|tool_calls_section_end|>", "x", "<|im_end|>"};
    uint32_t lens[7];
    bool special[7] = {true, true, true, true, true, false, true};
    for (int i = 0; i < 7; i++) lens[i] = (uint32_t)strlen(bytes[i]);
    int32_t end = 6;
    gram_vocab *v = NULL;
    pdl_error err;
    REQUIRE(gram_vocab_new(&v, 7, bytes, lens, special, &end, 1, &err) == 0);
    srv_gen_request r;
    make_request(&r, SRV_API_CHAT, 1);
    r.parse_tools = true;
    r.tool_format = GRAM_TOOLS_KIMI_K2;
    r.tool_calls_finish = true;
    r.tool_vocab = v;
    srv_response *resp = srv_response_new(model, &r, "stories", NULL, "chatcmpl-k", 9);
    srv_event *evs = event(PDL_EVENT_TOKEN, 0, 5, "Ok.", NULL), *last = evs;
    static const struct {
        int id;
        const char *text;
    } toks[] = {{0, ""}, {1, ""}, {5, "functions.f:0"}, {2, ""}, {5, "{\"a\": 1}"}, {3, ""}, {4, ""}};
    for (size_t i = 0; i < sizeof toks / sizeof toks[0]; i++) last = last->next = event(PDL_EVENT_TOKEN, 0, toks[i].id, toks[i].text, NULL);
    last->next = event(PDL_EVENT_FINISHED, 0, -1, "", "stop");
    srv_response_add(resp, evs);
    srv_events_free(evs);
    char *body = srv_response_body(resp, NULL);
    json_t *o = parse(body);
    json_t *c = json_array_get(json_object_get(o, "choices"), 0), *msg = json_object_get(c, "message");
    json_t *calls = json_object_get(msg, "tool_calls");
    REQUIRE_MSG(json_array_size(calls) == 1, "%s", body);
    json_t *call = json_array_get(calls, 0);
    CHECK(strcmp(json_string_value(json_object_get(call, "id")), "functions.f:0") == 0);
    CHECK(strcmp(json_string_value(json_object_get(json_object_get(call, "function"), "name")), "f") == 0);
    CHECK(strcmp(json_string_value(json_object_get(json_object_get(call, "function"), "arguments")), "{\"a\": 1}") == 0);
    CHECK(strcmp(json_string_value(json_object_get(msg, "content")), "Ok.") == 0);
    CHECK(strcmp(json_string_value(json_object_get(c, "finish_reason")), "tool_calls") == 0);
    json_decref(o);
    free(body);
    srv_response_free(resp);
    srv_gen_request_free(&r);
    gram_vocab_free(v);
}

/* gpt-oss's harmony output (its markers control tokens, whose events have
 * no text): the analysis channel goes to message.reasoning and
 * reasoning_content, a commentary message to functions.get_weather is a
 * tool call (content null beside it, finish_reason "tool_calls"), with or
 * without tools parsed a final message is the content; streamed, the
 * reasoning deltas come first and add up to the same text. */
static void test_harmony_channels_become_reasoning_content_and_calls(void) {
    setup();
    enum { START, CHANNEL, MESSAGE, END, CONSTRAIN, CALL, RETURN, TEXT, N_TOK };
    const char *bytes[N_TOK] = {"<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|constrain|>", "<|call|>",
                                "<|return|>", "x"};
    uint32_t lens[N_TOK];
    bool special[N_TOK];
    for (int i = 0; i < N_TOK; i++) lens[i] = (uint32_t)strlen(bytes[i]), special[i] = i != TEXT;
    int32_t ends[2] = {CALL, RETURN};
    gram_vocab *v = NULL;
    pdl_error err;
    REQUIRE(gram_vocab_new(&v, N_TOK, bytes, lens, special, ends, 2, &err) == 0);
    static const struct {
        int id;
        const char *text;
    } call_toks[] = {{CHANNEL, ""}, {TEXT, "analysis"}, {MESSAGE, ""}, {TEXT, "Weather "}, {TEXT, "needed."},
                     {END, ""}, {START, ""}, {TEXT, "assistant"}, {CHANNEL, ""}, {TEXT, "commentary to=functions."},
                     {TEXT, "get_weather "}, {CONSTRAIN, ""}, {TEXT, "json"}, {MESSAGE, ""},
                     {TEXT, "{\"city\": "}, {TEXT, "\"Paris\"}"}, {CALL, ""}},
      final_toks[] = {{CHANNEL, ""}, {TEXT, "analysis"}, {MESSAGE, ""}, {TEXT, "Say hi."}, {END, ""}, {START, ""},
                      {TEXT, "assistant"}, {CHANNEL, ""}, {TEXT, "final"}, {MESSAGE, ""}, {TEXT, "Hi!"}};
    for (int mode = 0; mode < 4; mode++) { /* a call or a final answer; whole or streamed */
        bool call = mode < 2, stream = mode % 2;
        srv_gen_request r;
        make_request(&r, SRV_API_CHAT, 1);
        r.harmony = true;
        r.tool_format = GRAM_TOOLS_OPENAI;
        r.tool_vocab = v;
        r.include_reasoning = true;
        r.parse_tools = call;
        r.tool_calls_finish = call;
        srv_response *resp = srv_response_new(model, &r, "gpt-oss", NULL, "chatcmpl-h", 9);
        srv_event *evs = NULL, **tail = &evs;
        size_t n = call ? sizeof call_toks / sizeof call_toks[0] : sizeof final_toks / sizeof final_toks[0];
        for (size_t i = 0; i < n; i++) {
            *tail = event(PDL_EVENT_TOKEN, 0, call ? call_toks[i].id : final_toks[i].id,
                          call ? call_toks[i].text : final_toks[i].text, NULL);
            tail = &(*tail)->next;
        }
        *tail = event(PDL_EVENT_FINISHED, 0, -1, "", "stop");
        const char *want_reasoning = call ? "Weather needed." : "Say hi.";
        if (!stream) {
            srv_response_add(resp, evs);
            char *body = srv_response_body(resp, NULL);
            json_t *o = parse(body);
            json_t *c = json_array_get(json_object_get(o, "choices"), 0), *msg = json_object_get(c, "message");
            CHECK_MSG(json_is_string(json_object_get(msg, "reasoning")) &&
                          !strcmp(json_string_value(json_object_get(msg, "reasoning")), want_reasoning), "%s", body);
            CHECK(json_equal(json_object_get(msg, "reasoning"), json_object_get(msg, "reasoning_content")));
            if (call) {
                json_t *calls = json_object_get(msg, "tool_calls");
                REQUIRE_MSG(json_array_size(calls) == 1, "%s", body);
                json_t *fn = json_object_get(json_array_get(calls, 0), "function");
                CHECK(!strcmp(json_string_value(json_object_get(fn, "name")), "get_weather"));
                CHECK(!strcmp(json_string_value(json_object_get(fn, "arguments")), "{\"city\": \"Paris\"}"));
                CHECK(json_is_null(json_object_get(msg, "content")));
                CHECK(!strcmp(json_string_value(json_object_get(c, "finish_reason")), "tool_calls"));
            } else {
                CHECK_MSG(!strcmp(json_string_value(json_object_get(msg, "content")), "Hi!"), "%s", body);
                CHECK(json_object_get(msg, "tool_calls") == NULL);
                CHECK(!strcmp(json_string_value(json_object_get(c, "finish_reason")), "stop"));
            }
            json_decref(o);
            free(body);
        } else {
            sbuf out = {0}, reasoning = {0}, content = {0}, args = {0};
            srv_response_stream_begin(resp, &out);
            srv_response_stream_events(resp, evs, &out);
            srv_response_stream_end(resp, &out);
            bool later = false, order_ok = true;
            for (char *line = out.data; line && *line;) {
                char *nl = strstr(line, "\n\n");
                if (!nl) break;
                *nl = '\0';
                if (strncmp(line, "data: {", 7) == 0) {
                    json_t *ch = parse(line + 6);
                    json_t *d = json_object_get(json_array_get(json_object_get(ch, "choices"), 0), "delta");
                    const json_t *rt = json_object_get(d, "reasoning"), *ct = json_object_get(d, "content");
                    json_t *tc = json_array_get(json_object_get(d, "tool_calls"), 0);
                    if (rt) {
                        sbuf_append(&reasoning, json_string_value(rt), json_string_length(rt));
                        if (later) order_ok = false;
                    }
                    if (ct && json_string_length(ct)) sbuf_append(&content, json_string_value(ct), json_string_length(ct)), later = true;
                    if (tc) {
                        const json_t *a = json_object_get(json_object_get(tc, "function"), "arguments");
                        if (a) sbuf_append(&args, json_string_value(a), json_string_length(a));
                        later = true;
                    }
                    json_decref(ch);
                }
                line = nl + 2;
            }
            CHECK(order_ok);
            CHECK(reasoning.len == strlen(want_reasoning) && !memcmp(reasoning.data, want_reasoning, reasoning.len));
            if (call) CHECK(args.len && !memcmp(args.data, "{\"city\": \"Paris\"}", args.len) && content.len == 0);
            else CHECK(content.len == 3 && !memcmp(content.data, "Hi!", 3) && args.len == 0);
            sbuf_free(&out), sbuf_free(&reasoning), sbuf_free(&content), sbuf_free(&args);
        }
        srv_events_free(evs);
        srv_response_free(resp);
        srv_gen_request_free(&r);
    }
    gram_vocab_free(v);
}

/* qwen3_coder carries parameters as text: the request's tools give their
 * types (r.tools_json), so the arguments are typed JSON. */
static void test_qwen3_coder_arguments_follow_the_tools(void) {
    setup();
    srv_gen_request r;
    make_request(&r, SRV_API_CHAT, 1);
    r.parse_tools = true;
    r.tool_format = GRAM_TOOLS_QWEN3_CODER;
    r.tool_calls_finish = true;
    r.tools_json = strdup("[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {\"type\": "
                          "\"object\", \"properties\": {\"n\": {\"type\": \"integer\"}, \"s\": {\"type\": \"string\"}}}}}]");
    srv_response *resp = srv_response_new(model, &r, "stories", NULL, "chatcmpl-q", 9);
    srv_event *evs = text_events("<tool_call>\n<function=f>\n<parameter=n>\n42\n</parameter>\n<parameter=s>\n42\n"
                                 "</parameter>\n</function>\n</tool_call>", 3, "stop");
    srv_response_add(resp, evs);
    srv_events_free(evs);
    char *body = srv_response_body(resp, NULL);
    json_t *o = parse(body);
    json_t *call = json_array_get(json_object_get(json_object_get(json_array_get(json_object_get(o, "choices"), 0),
                                                                  "message"), "tool_calls"), 0);
    const char *args = json_string_value(json_object_get(json_object_get(call, "function"), "arguments"));
    CHECK_MSG(args && strcmp(args, "{\"n\": 42, \"s\": \"42\"}") == 0, "%s", body);
    json_decref(o);
    free(body);
    srv_response_free(resp);
    srv_gen_request_free(&r);
}

static void test_logprobs_shapes(void) {
    setup();
    pdl_logprob top[2] = {{261, -0.5f}, {378, -2.0f}};
    /* completions: tokens / token_logprobs / top_logprobs / text_offset */
    srv_gen_request r;
    make_request(&r, SRV_API_COMPLETION, 1);
    r.logprobs = 2;
    srv_response *resp = srv_response_new(model, &r, "stories", NULL, "cmpl-4", 1);
    srv_event *evs = story_events("length");
    evs->top = malloc(sizeof top);
    memcpy(evs->top, top, sizeof top);
    evs->n_top = 2;
    srv_response_add(resp, evs);
    srv_events_free(evs);
    char *s = srv_response_body(resp, NULL);
    json_t *o = parse(s);
    /* no replica name: null, as vLLM sends it */
    CHECK(json_is_null(json_object_get(o, "system_fingerprint")));
    json_t *lp = json_object_get(json_array_get(json_object_get(o, "choices"), 0), "logprobs");
    char *d = json_dumps(lp, JSON_COMPACT | JSON_REAL_PRECISION(4));
    CHECK_MSG(strcmp(d, "{\"text_offset\":[0,2],\"token_logprobs\":[-0.5,-0.5],\"tokens\":[\" a\",\" time\"],"
                        "\"top_logprobs\":[{\" a\":-0.5,\" time\":-2.0},{\" time\":-0.5}]}") == 0,
              "%s", d);
    free(d), free(s);
    json_decref(o);
    srv_response_free(resp);
    srv_gen_request_free(&r);
    /* chat: content [{token, logprob, bytes, top_logprobs}] */
    make_request(&r, SRV_API_CHAT, 1);
    r.logprobs = 1;
    resp = srv_response_new(model, &r, "stories", NULL, "chatcmpl-5", 1);
    evs = event(PDL_EVENT_TOKEN, 0, 261, " a", NULL);
    evs->top = malloc(sizeof top);
    memcpy(evs->top, top, sizeof top);
    evs->n_top = 1;
    evs->next = event(PDL_EVENT_FINISHED, 0, -1, "", "stop");
    srv_response_add(resp, evs);
    srv_events_free(evs);
    s = srv_response_body(resp, NULL);
    o = parse(s);
    lp = json_object_get(json_array_get(json_object_get(o, "choices"), 0), "logprobs");
    d = json_dumps(lp, JSON_COMPACT | JSON_REAL_PRECISION(4));
    CHECK_MSG(strcmp(d, "{\"content\":[{\"token\":\" a\",\"logprob\":-0.5,\"bytes\":[32,97],\"top_logprobs\":"
                        "[{\"token\":\" a\",\"logprob\":-0.5,\"bytes\":[32,97]}]}]}") == 0,
              "%s", d);
    free(d), free(s);
    json_decref(o);
    srv_response_free(resp);
    srv_gen_request_free(&r);
}

static void test_metrics_exposition(void) {
    srv_metrics *m = srv_metrics_new("my \"model\"\n");
    REQUIRE(m != NULL);
    pdl_engine_stats st = {.running = 2, .waiting = 1, .kv_blocks_total = 8, .kv_blocks_used = 2,
                           .prompt_tokens = 30, .generation_tokens = 12};
    srv_metrics_set_engine(m, &st);
    srv_metrics_observe_ttft(m, 0.003);
    srv_metrics_observe_ttft(m, 0.5);
    srv_metrics_observe_tpot(m, 0.02);
    srv_metrics_observe_request(m, 1.2, 10, 6, "stop");
    srv_metrics_observe_request(m, 0.1, 10, 1, "abort");
    size_t len;
    char *text = srv_metrics_render(m, &len);
    REQUIRE(text != NULL);
    CHECK_EQ_INT(strlen(text), len);
    const char *L = "{model_name=\"my \\\"model\\\"\\n\"";
    char want[512];
    static const char *const lines[] = {
        "vllm:num_requests_running%s} 2\n", "vllm:num_requests_waiting%s} 1\n", "vllm:kv_cache_usage_perc%s} 0.25\n",
        "vllm:prompt_tokens_total%s} 30\n", "vllm:generation_tokens_total%s} 12\n",
        "vllm:request_success_total%s,finished_reason=\"stop\"} 1\n",
        "vllm:request_success_total%s,finished_reason=\"abort\"} 1\n",
        "vllm:time_to_first_token_seconds_bucket%s,le=\"0.001\"} 0\n",
        "vllm:time_to_first_token_seconds_bucket%s,le=\"0.005\"} 1\n",
        "vllm:time_to_first_token_seconds_bucket%s,le=\"0.5\"} 2\n",
        "vllm:time_to_first_token_seconds_bucket%s,le=\"+Inf\"} 2\n", "vllm:time_to_first_token_seconds_count%s} 2\n",
        "vllm:time_per_output_token_seconds_count%s} 1\n", "vllm:e2e_request_latency_seconds_count%s} 1\n",
        "vllm:e2e_request_latency_seconds_bucket%s,le=\"1.5\"} 1\n",
        "# TYPE vllm:time_to_first_token_seconds histogram\n%s", "# TYPE vllm:prompt_tokens_total counter\n%s",
        "# TYPE vllm:kv_cache_usage_perc gauge\n%s",
    };
    for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++) {
        snprintf(want, sizeof want, lines[i], lines[i][0] == '#' ? "" : L);
        CHECK_CONTAINS(text, want);
    }
    free(text);
    srv_metrics_free(m);
}

/* A hybrid model's recurrent state slots beside the KV blocks (slots and
 * bytes); a model without them prints none of these lines. */
static void test_metrics_report_a_hybrid_models_state_slots(void) {
    srv_metrics *m = srv_metrics_new("q");
    REQUIRE(m != NULL);
    pdl_engine_stats st = {.kv_blocks_total = 8, .kv_block_bytes = 1000, .state_slots_total = 6,
                           .state_slots_used = 2, .state_snapshots = 3, .state_slot_bytes = 4096,
                           .state_snapshots_restored = 5};
    srv_metrics_set_engine(m, &st);
    char *text = srv_metrics_render(m, NULL);
    REQUIRE(text != NULL);
    CHECK_CONTAINS(text, "pagedlm:state_slots_used{model_name=\"q\"} 2\n");
    CHECK_CONTAINS(text, "pagedlm:state_slots_total{model_name=\"q\"} 6\n");
    CHECK_CONTAINS(text, "pagedlm:state_snapshots{model_name=\"q\"} 3\n");
    CHECK_CONTAINS(text, "pagedlm:state_bytes_used{model_name=\"q\"} 8192\n");
    CHECK_CONTAINS(text, "pagedlm:state_bytes_total{model_name=\"q\"} 24576\n");
    CHECK_CONTAINS(text, "pagedlm:kv_cache_bytes_total{model_name=\"q\"} 8000\n");
    CHECK_CONTAINS(text, "pagedlm:state_snapshots_restored_total{model_name=\"q\"} 5\n");
    free(text);
    st.state_slots_total = 0; /* not hybrid */
    srv_metrics_set_engine(m, &st);
    text = srv_metrics_render(m, NULL);
    REQUIRE(text != NULL);
    CHECK(strstr(text, "pagedlm:state_") == NULL);
    free(text);
    srv_metrics_free(m);
}

/* llama-server's /infill result: content, the stop fields by what ended
 * it, tokens when asked, the prompt with special tokens, timings. */
static void test_infill_result_as_llama_server_writes_it(void) {
    setup();
    static const struct {
        const char *finish, *stop_string;
        const char *stop_type;
    } ends[] = {{"length", NULL, "limit"}, {"stop", NULL, "eos"}, {"stop", "\n", "word"}, {"abort", NULL, "none"}};
    for (size_t k = 0; k < sizeof ends / sizeof ends[0]; k++) {
        srv_gen_request r;
        make_request(&r, SRV_API_INFILL, 1);
        r.fim = true;
        r.return_tokens = k == 0;
        r.fim_truncated = k == 1;
        r.params.max_tokens = 2;
        srv_response *resp = srv_response_new(model, &r, "stories", "r", "cmpl-i", 7);
        srv_event *evs = story_events(ends[k].finish);
        evs->next->next->stop_string = ends[k].stop_string ? strdup(ends[k].stop_string) : NULL;
        evs->next->next->cached_tokens = 2;
        srv_response_add(resp, evs);
        srv_events_free(evs);
        char *s = srv_response_body(resp, NULL);
        json_t *o = parse(s);
        CHECK(strcmp(json_string_value(json_object_get(o, "content")), " a time") == 0);
        CHECK(json_is_true(json_object_get(o, "stop")));
        CHECK(strcmp(json_string_value(json_object_get(o, "model")), "stories") == 0);
        CHECK_EQ_INT(json_integer_value(json_object_get(o, "tokens_predicted")), 2);
        CHECK_EQ_INT(json_integer_value(json_object_get(o, "tokens_evaluated")), 3);
        CHECK_EQ_INT(json_integer_value(json_object_get(o, "tokens_cached")), 2);
        CHECK(strcmp(json_string_value(json_object_get(o, "stop_type")), ends[k].stop_type) == 0);
        CHECK(strcmp(json_string_value(json_object_get(o, "stopping_word")),
                     ends[k].stop_string ? ends[k].stop_string : "") == 0);
        CHECK(json_is_boolean(json_object_get(o, "has_new_line")) && !json_is_true(json_object_get(o, "has_new_line")));
        CHECK(json_is_true(json_object_get(o, "truncated")) == (k == 1));
        /* the prompt as text, BOS kept (special tokens are) */
        CHECK(strcmp(json_string_value(json_object_get(o, "prompt")), "<s> Once upon") == 0);
        json_t *toks = json_object_get(o, "tokens");
        CHECK(json_array_size(toks) == (k == 0 ? 2u : 0u));
        if (k == 0) CHECK(json_integer_value(json_array_get(toks, 1)) == 378);
        json_t *t = json_object_get(o, "timings");
        CHECK_EQ_INT(json_integer_value(json_object_get(t, "prompt_n")), 1); /* 3 - 2 from the cache */
        CHECK_EQ_INT(json_integer_value(json_object_get(t, "predicted_n")), 2);
        CHECK(json_real_value(json_object_get(t, "prompt_ms")) >= 0);
        json_t *g = json_object_get(o, "generation_settings");
        CHECK_EQ_INT(json_integer_value(json_object_get(g, "n_predict")), 2);
        CHECK(json_object_get(o, "id") == NULL && json_object_get(o, "choices") == NULL);
        json_decref(o);
        free(s);
        srv_response_free(resp);
        srv_gen_request_free(&r);
    }
}

/* Streamed: one partial result per piece of text (stop false), then the
 * final result with empty content (stop true), and no [DONE]. */
static void test_infill_stream_partials_then_final_without_done(void) {
    setup();
    srv_gen_request r;
    make_request(&r, SRV_API_INFILL, 1);
    r.fim = r.stream = r.return_tokens = true;
    srv_response *resp = srv_response_new(model, &r, "stories", "r", "cmpl-i", 7);
    sbuf out = {0};
    srv_response_stream_begin(resp, &out);
    CHECK_EQ_INT(out.len, 0);
    srv_event *evs = story_events("stop");
    free(evs->next->next->text);
    evs->next->next->text = strdup("\n"); /* text held back until the end */
    evs->next->next->text_len = 1;
    srv_response_stream_events(resp, evs, &out);
    srv_events_free(evs);
    srv_response_stream_end(resp, &out);
    size_t len;
    char *s = sbuf_take(&out, &len);
    CHECK(strstr(s, "[DONE]") == NULL);
    const char *want[] = {
        "{\"index\":0,\"content\":\" a\",\"tokens\":[261],\"stop\":false,\"id_slot\":0,\"tokens_predicted\":1,"
        "\"tokens_evaluated\":3}",
        "{\"index\":0,\"content\":\" time\",\"tokens\":[378],\"stop\":false,\"id_slot\":0,\"tokens_predicted\":2,"
        "\"tokens_evaluated\":3}",
        "{\"index\":0,\"content\":\"\\n\",\"tokens\":[],\"stop\":false,\"id_slot\":0,\"tokens_predicted\":2,"
        "\"tokens_evaluated\":3}"};
    char *p = s;
    for (int i = 0; i < 4; i++) {
        REQUIRE_MSG(strncmp(p, "data: ", 6) == 0, "%s", p);
        char *end = strstr(p, "\n\n");
        REQUIRE(end);
        *end = '\0';
        if (i < 3) {
            CHECK_MSG(strcmp(p + 6, want[i]) == 0, "chunk %d: %s", i, p + 6);
        } else {
            json_t *o = parse(p + 6);
            CHECK(json_is_true(json_object_get(o, "stop")));
            CHECK(strcmp(json_string_value(json_object_get(o, "content")), "") == 0);
            CHECK(strcmp(json_string_value(json_object_get(o, "stop_type")), "eos") == 0);
            CHECK(json_is_true(json_object_get(o, "has_new_line")));
            CHECK_EQ_INT(json_integer_value(json_object_get(o, "tokens_predicted")), 2);
            json_decref(o);
        }
        p = end + 2;
    }
    CHECK(*p == '\0');
    free(s);
    srv_response_free(resp);
    srv_gen_request_free(&r);
}

int main(void) {
    RUN(test_error_body_has_the_openai_shape);
    RUN(test_completion_object_and_usage);
    RUN(test_completion_stream_chunks_then_usage_then_done);
    RUN(test_chat_stream_role_first_and_empty_finish_delta);
    RUN(test_tool_calls_whole_and_streamed);
    RUN(test_a_call_cut_by_max_tokens_is_dropped_and_the_finish_is_length);
    RUN(test_reasoning_apart_from_the_answer_and_its_tool_calls);
    RUN(test_mistral_marker_token_reaches_the_parser);
    RUN(test_kimi_marker_tokens_reach_the_parser);
    RUN(test_harmony_channels_become_reasoning_content_and_calls);
    RUN(test_qwen3_coder_arguments_follow_the_tools);
    RUN(test_logprobs_shapes);
    RUN(test_metrics_exposition);
    RUN(test_metrics_report_a_hybrid_models_state_slots);
    RUN(test_infill_result_as_llama_server_writes_it);
    RUN(test_infill_stream_partials_then_final_without_done);
    pdl_model_free(model);
    return test_summary();
}
