/*
 * test_api_messages.c - Anthropic's Messages API as an adapter over Chat
 * Completions (src/server/api_messages.c), without HTTP or a model: a
 * Messages body -> the chat body it becomes (system, content blocks,
 * tool_use / tool_result, tools, tool_choice, thinking, stop_sequences,
 * prefill, output_config), what is refused (400 naming the field), the
 * count_tokens body and its count through a stand-in template; a chat
 * response -> a message (blocks in order, stop_reason, usage); a chat
 * stream -> the published event sequence; errors in Anthropic's shape.
 */
#define _POSIX_C_SOURCE 200809L
#include <jansson.h>
#include <string.h>

#include "engine/reasoning.h"
#include "server/api_adapter.h"
#include "test_util.h"

static const srv_adapter_ops *M = &srv_messages_api;

static json_t *js(const char *text) {
    json_error_t je;
    json_t *o = json_loads(text, JSON_DECODE_ANY, &je);
    REQUIRE_MSG(o != NULL, "test JSON: %s (column %d): %s", je.text, je.column, text);
    return o;
}

/* The chat body a Messages body becomes (REQUIREs success). */
static json_t *to_chat_ctx(const srv_parse_ctx *c, const char *body) {
    json_t *b = js(body), *chat = NULL;
    void *st = NULL;
    srv_api_error e = {0};
    int rc = M->to_chat(c, b, "msg_test", &chat, &st, &e);
    json_decref(b);
    M->free_state(st);
    REQUIRE_MSG(rc == 0, "refused (%s): %s", e.message, body);
    return chat;
}

static json_t *to_chat(const char *body) {
    srv_parse_ctx c = {0};
    return to_chat_ctx(&c, body);
}

/* Whether o equals the JSON text want (reported when not). */
static void check_json(const json_t *o, const char *want, int line) {
    json_t *w = js(want);
    if (!json_equal(o, w)) {
        char *got = json_dumps(o, JSON_COMPACT | JSON_ENCODE_ANY);
        fprintf(stderr, "  line %d: got  %s\n  want %s\n", line, got ? got : "(null)", want);
        free(got);
        test_failures++;
    }
    json_decref(w);
}
#define CHECK_JSON(o, want) check_json(o, want, __LINE__)

/* A body refused with a 400 naming param, the message containing needle. */
static void refused_ctx(const srv_parse_ctx *c, const char *body, const char *param, const char *needle) {
    json_t *b = js(body), *chat = NULL;
    void *st = NULL;
    srv_api_error e = {0};
    int rc = M->to_chat(c, b, "msg_test", &chat, &st, &e);
    json_decref(b);
    json_decref(chat);
    M->free_state(st);
    CHECK_MSG(rc == -1, "accepted: %s", body);
    if (rc != -1) return;
    CHECK_MSG(e.status == 400, "%s: status %d", body, e.status);
    CHECK_MSG(strcmp(e.param, param) == 0, "%s: param '%s', expected '%s'", body, e.param, param);
    CHECK_MSG(strstr(e.message, needle) != NULL, "%s: message '%s' lacks '%s'", body, e.message, needle);
}

static void refused(const char *body, const char *param, const char *needle) {
    srv_parse_ctx c = {0};
    refused_ctx(&c, body, param, needle);
}

#define USER "\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}]"

/* ---- requests ------------------------------------------------------------------------ */

static void test_a_plain_request_keeps_its_fields_and_max_tokens(void) {
    json_t *chat = to_chat("{\"model\": \"m\", \"max_tokens\": 7, \"system\": \"Be brief.\", \"temperature\": 0.5, "
                           "\"top_p\": 0.9, \"top_k\": 5, \"metadata\": {\"user_id\": \"u\"}, \"service_tier\": "
                           "\"auto\", " USER "}");
    CHECK_JSON(chat, "{\"model\": \"m\", \"temperature\": 0.5, \"top_p\": 0.9, \"top_k\": 5, \"max_tokens\": 7, "
                     "\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", "
                     "\"content\": \"Hi\"}]}");
    json_decref(chat);
}

static void test_max_tokens_is_required_and_at_least_1(void) {
    refused("{" USER "}", "max_tokens", "'max_tokens' is required");
    refused("{\"max_tokens\": 0, " USER "}", "max_tokens", "at least 1");
    refused("{\"max_tokens\": \"8\", " USER "}", "max_tokens", "integer");
}

static void test_system_blocks_are_parts_and_the_billing_header_is_dropped(void) {
    json_t *chat = to_chat("{\"max_tokens\": 1, \"system\": [{\"type\": \"text\", \"text\": "
                           "\"x-anthropic-billing-header: cc_version=2.1; cch=a5145;\"}, {\"type\": \"text\", "
                           "\"text\": \"You are a CLI.\", \"cache_control\": {\"type\": \"ephemeral\"}}, {\"type\": "
                           "\"text\", \"text\": \"Be brief.\"}], " USER "}");
    CHECK_JSON(json_object_get(chat, "messages"),
               "[{\"role\": \"system\", \"content\": [{\"type\": \"text\", \"text\": \"You are a CLI.\"}, {\"type\": "
               "\"text\", \"text\": \"Be brief.\"}]}, {\"role\": \"user\", \"content\": \"Hi\"}]");
    json_decref(chat);
    /* only the header: no system message */
    chat = to_chat("{\"max_tokens\": 1, \"system\": [{\"type\": \"text\", \"text\": \"x-anthropic-billing-header: "
                   "cch=1;\"}], " USER "}");
    CHECK_EQ_INT(json_array_size(json_object_get(chat, "messages")), 1);
    json_decref(chat);
    refused("{\"max_tokens\": 1, \"system\": [{\"type\": \"image\"}], " USER "}", "system[0]", "text block");
}

static void test_a_tool_round_trip_becomes_tool_calls_and_tool_messages(void) {
    json_t *chat = to_chat(
        "{\"max_tokens\": 1, \"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"Weather?"
        "\"}, {\"type\": \"image\", \"source\": {\"type\": \"base64\", \"media_type\": \"image/png\", \"data\": "
        "\"iVBO\"}}]}, {\"role\": \"assistant\", \"content\": [{\"type\": \"thinking\", \"thinking\": \"hmm\", "
        "\"signature\": \"s\"}, {\"type\": \"redacted_thinking\", \"data\": \"x\"}, {\"type\": \"text\", \"text\": "
        "\"Looking.\"}, {\"type\": \"tool_use\", \"id\": \"toolu_1\", \"name\": \"w\", \"input\": {\"city\": \"Paris\"}}, "
        "{\"type\": \"tool_use\", \"id\": \"toolu_2\", \"name\": \"t\", \"input\": {}}]}, {\"role\": \"user\", \"content\": "
        "[{\"type\": \"tool_result\", \"tool_use_id\": \"toolu_1\", \"content\": \"sunny\"}, {\"type\": \"tool_result\", "
        "\"tool_use_id\": \"toolu_2\", \"is_error\": true, \"content\": [{\"type\": \"text\", \"text\": \"no clock\"}]}, "
        "{\"type\": \"text\", \"text\": \"Thanks\"}]}]}");
    CHECK_JSON(json_object_get(chat, "messages"),
               "[{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"Weather?\"}, {\"type\": "
               "\"image_url\", \"image_url\": {\"url\": \"data:image/png;base64,iVBO\"}}]}, {\"role\": \"assistant\", "
               "\"content\": [{\"type\": \"text\", \"text\": \"Looking.\"}], \"tool_calls\": [{\"id\": \"toolu_1\", "
               "\"type\": \"function\", \"function\": {\"name\": \"w\", \"arguments\": \"{\\\"city\\\":\\\"Paris\\\"}\"}}, "
               "{\"id\": \"toolu_2\", \"type\": \"function\", \"function\": {\"name\": \"t\", \"arguments\": \"{}\"}}]}, "
               "{\"role\": \"tool\", \"tool_call_id\": \"toolu_1\", \"content\": [{\"type\": \"text\", \"text\": "
               "\"sunny\"}]}, {\"role\": \"tool\", \"tool_call_id\": \"toolu_2\", \"content\": [{\"type\": \"text\", "
               "\"text\": \"Error:\"}, {\"type\": \"text\", \"text\": \"no clock\"}]}, {\"role\": \"user\", \"content\": "
               "[{\"type\": \"text\", \"text\": \"Thanks\"}]}]");
    /* the last message is the user's: no prefill */
    CHECK(json_object_get(chat, "continue_final_message") == NULL);
    json_decref(chat);
    /* an assistant turn of calls only has content "" */
    chat = to_chat("{\"max_tokens\": 1, \"messages\": [{\"role\": \"user\", \"content\": \"x\"}, {\"role\": "
                   "\"assistant\", \"content\": [{\"type\": \"tool_use\", \"id\": \"a\", \"name\": \"f\", \"input\": {}}]}, "
                   "{\"role\": \"user\", \"content\": [{\"type\": \"tool_result\", \"tool_use_id\": \"a\"}]}]}");
    CHECK_JSON(json_array_get(json_object_get(chat, "messages"), 1),
               "{\"role\": \"assistant\", \"content\": \"\", \"tool_calls\": [{\"id\": \"a\", \"type\": \"function\", "
               "\"function\": {\"name\": \"f\", \"arguments\": \"{}\"}}]}");
    CHECK_JSON(json_array_get(json_object_get(chat, "messages"), 2),
               "{\"role\": \"tool\", \"tool_call_id\": \"a\", \"content\": []}");
    json_decref(chat);
}

static void test_an_image_url_source_goes_to_the_chat_path(void) {
    json_t *chat = to_chat("{\"max_tokens\": 1, \"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"image\", "
                           "\"source\": {\"type\": \"url\", \"url\": \"https://example.com/a.png\"}}]}]}");
    CHECK_JSON(json_object_get(json_array_get(json_object_get(chat, "messages"), 0), "content"),
               "[{\"type\": \"image_url\", \"image_url\": {\"url\": \"https://example.com/a.png\"}}]");
    json_decref(chat);
    refused("{\"max_tokens\": 1, \"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"image\", \"source\": "
            "{\"type\": \"file\", \"file_id\": \"f\"}}]}]}", "messages[0].content[0]", "files are not supported");
    refused("{\"max_tokens\": 1, \"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"image\", \"source\": "
            "{\"type\": \"base64\", \"data\": \"x\"}}]}]}", "messages[0].content[0]", "media_type");
}

static void test_a_last_assistant_message_is_continued(void) {
    json_t *chat = to_chat("{\"max_tokens\": 1, \"messages\": [{\"role\": \"user\", \"content\": \"Pick\"}, {\"role\": "
                           "\"assistant\", \"content\": \"The answer is (\"}]}");
    CHECK(json_is_true(json_object_get(chat, "continue_final_message")));
    CHECK(json_is_false(json_object_get(chat, "add_generation_prompt")));
    json_decref(chat);
    /* an assistant turn ending in calls is not a prefill */
    chat = to_chat("{\"max_tokens\": 1, \"messages\": [{\"role\": \"user\", \"content\": \"x\"}, {\"role\": "
                   "\"assistant\", \"content\": [{\"type\": \"tool_use\", \"id\": \"a\", \"name\": \"f\", \"input\": {}}]}]}");
    CHECK(json_object_get(chat, "continue_final_message") == NULL);
    json_decref(chat);
}

static void test_tools_and_every_tool_choice(void) {
    const char *tools = "\"tools\": [{\"name\": \"w\", \"description\": \"Weather\", \"input_schema\": {\"type\": "
                        "\"object\"}, \"cache_control\": {\"type\": \"ephemeral\"}}, {\"type\": \"custom\", \"name\": "
                        "\"t\", \"input_schema\": {\"type\": \"object\"}}]";
    char body[1024];
    snprintf(body, sizeof body, "{\"max_tokens\": 1, %s, " USER "}", tools);
    json_t *chat = to_chat(body);
    CHECK_JSON(json_object_get(chat, "tools"),
               "[{\"type\": \"function\", \"function\": {\"name\": \"w\", \"description\": \"Weather\", \"parameters\": "
               "{\"type\": \"object\"}}}, {\"type\": \"function\", \"function\": {\"name\": \"t\", \"parameters\": "
               "{\"type\": \"object\"}}}]");
    CHECK(json_object_get(chat, "tool_choice") == NULL); /* chat's default: "auto" with the adapter's auto_tools */
    json_decref(chat);
    CHECK(M->auto_tools);
    static const struct {
        const char *anthropic, *chat;
    } choices[] = {
        {"{\"type\": \"auto\"}", "\"auto\""},
        {"{\"type\": \"none\"}", "\"none\""},
        {"{\"type\": \"any\"}", "\"required\""},
        {"{\"type\": \"tool\", \"name\": \"t\"}", "{\"type\": \"function\", \"function\": {\"name\": \"t\"}}"},
    };
    for (size_t i = 0; i < sizeof choices / sizeof choices[0]; i++) {
        snprintf(body, sizeof body, "{\"max_tokens\": 1, %s, \"tool_choice\": %s, " USER "}", tools,
                 choices[i].anthropic);
        chat = to_chat(body);
        CHECK_JSON(json_object_get(chat, "tool_choice"), choices[i].chat);
        CHECK(json_object_get(chat, "parallel_tool_calls") == NULL);
        json_decref(chat);
    }
    snprintf(body, sizeof body, "{\"max_tokens\": 1, %s, \"tool_choice\": {\"type\": \"any\", "
             "\"disable_parallel_tool_use\": true}, " USER "}", tools);
    chat = to_chat(body);
    CHECK(json_is_false(json_object_get(chat, "parallel_tool_calls")));
    json_decref(chat);
    /* without tools, auto and none say nothing (chat would refuse a choice without tools) */
    chat = to_chat("{\"max_tokens\": 1, \"tool_choice\": {\"type\": \"auto\"}, " USER "}");
    CHECK(json_object_get(chat, "tool_choice") == NULL);
    json_decref(chat);
    refused("{\"max_tokens\": 1, \"tool_choice\": {\"type\": \"function\"}, " USER "}", "tool_choice", "\"any\"");
    refused("{\"max_tokens\": 1, \"tool_choice\": \"auto\", " USER "}", "tool_choice", "\"auto\"");
    refused("{\"max_tokens\": 1, \"tools\": [{\"type\": \"web_search_20250305\", \"name\": \"web_search\"}], " USER "}",
            "tools", "web_search_20250305");
    refused("{\"max_tokens\": 1, \"tools\": [{\"name\": \"w\"}], " USER "}", "tools", "input_schema");
}

static void test_thinking_maps_to_the_budget_and_the_template(void) {
    srv_parse_ctx c = {.reasoning = reasoning_format_find("qwen3")};
    REQUIRE(c.reasoning != NULL);
    json_t *chat = to_chat_ctx(&c, "{\"max_tokens\": 100, \"thinking\": {\"type\": \"enabled\", \"budget_tokens\": "
                                   "1024}, \"chat_template_kwargs\": {\"x\": 1}, " USER "}");
    CHECK_EQ_INT(json_integer_value(json_object_get(chat, "thinking_token_budget")), 1024);
    CHECK_JSON(json_object_get(chat, "chat_template_kwargs"), "{\"x\": 1, \"enable_thinking\": true}");
    json_decref(chat);
    chat = to_chat("{\"max_tokens\": 1, \"thinking\": {\"type\": \"disabled\"}, " USER "}");
    CHECK_JSON(json_object_get(chat, "chat_template_kwargs"), "{\"enable_thinking\": false}");
    CHECK(json_object_get(chat, "thinking_token_budget") == NULL);
    json_decref(chat);
    chat = to_chat("{\"max_tokens\": 1, \"thinking\": {\"type\": \"adaptive\"}, " USER "}");
    CHECK(json_object_get(chat, "chat_template_kwargs") == NULL);
    json_decref(chat);
    /* no --reasoning-parser: no thinking blocks to give */
    refused("{\"max_tokens\": 9, \"thinking\": {\"type\": \"enabled\", \"budget_tokens\": 1024}, " USER "}", "thinking",
            "--reasoning-parser");
    refused_ctx(&c, "{\"max_tokens\": 9, \"thinking\": {\"type\": \"enabled\"}, " USER "}", "thinking", "budget_tokens");
    refused_ctx(&c, "{\"max_tokens\": 9, \"thinking\": {\"type\": \"on\"}, " USER "}", "thinking", "\"enabled\"");
}

static void test_stop_sequences_stream_and_output_config(void) {
    json_t *chat = to_chat("{\"max_tokens\": 4, \"stop_sequences\": [\"END\", \"\\n\\n\"], \"stream\": true, "
                           "\"output_config\": {\"effort\": \"low\", \"format\": {\"type\": \"json_schema\", \"schema\": "
                           "{\"type\": \"integer\"}}}, " USER "}");
    CHECK_JSON(json_object_get(chat, "stop"), "[\"END\", \"\\n\\n\"]");
    CHECK(json_is_true(json_object_get(chat, "stream")));
    /* continuous usage: message_start takes the prompt's size from the first chunk */
    CHECK_JSON(json_object_get(chat, "stream_options"), "{\"include_usage\": true, \"continuous_usage_stats\": true}");
    CHECK_JSON(json_object_get(chat, "response_format"), "{\"type\": \"json_schema\", \"json_schema\": {\"name\": "
                                                         "\"output\", \"schema\": {\"type\": \"integer\"}}}");
    CHECK_JSON(json_object_get(chat, "chat_template_kwargs"), "{\"reasoning_effort\": \"low\"}");
    json_decref(chat);
    chat = to_chat("{\"max_tokens\": 4, \"output_format\": {\"type\": \"json_schema\", \"schema\": {\"type\": "
                   "\"string\"}}, " USER "}");
    CHECK(json_object_get(chat, "response_format") != NULL);
    CHECK(json_object_get(chat, "stream_options") == NULL);
    json_decref(chat);
    refused("{\"max_tokens\": 1, \"stop_sequences\": \"END\", " USER "}", "stop_sequences", "list of strings");
    refused("{\"max_tokens\": 1, \"stop_sequences\": [\"\"], " USER "}", "stop_sequences", "non-empty");
    refused("{\"max_tokens\": 1, \"output_config\": {\"format\": {\"type\": \"json_schema\"}}, " USER "}",
            "output_config.format", "json_schema");
}

static void test_what_is_refused_names_the_field(void) {
    refused("{\"max_tokens\": 1}", "messages", "'messages' is required");
    refused("{\"max_tokens\": 1, \"messages\": []}", "messages", "non-empty");
    refused("{\"max_tokens\": 1, \"messages\": [{\"role\": \"system\", \"content\": \"x\"}]}", "messages[0]",
            "'system'");
    refused("{\"max_tokens\": 1, \"messages\": [{\"role\": \"user\", \"content\": 3}]}", "messages[0]",
            "string or a list");
    refused("{\"max_tokens\": 1, \"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"document\", "
            "\"source\": {}}]}]}", "messages[0].content[0]", "documents are not supported");
    refused("{\"max_tokens\": 1, \"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"tool_use\", \"id\": "
            "\"a\", \"name\": \"f\", \"input\": {}}]}]}", "messages[0].content[0]", "tool_result");
    refused("{\"max_tokens\": 1, \"messages\": [{\"role\": \"assistant\", \"content\": [{\"type\": \"tool_result\", "
            "\"tool_use_id\": \"a\"}]}]}", "messages[0].content[0]", "tool_use");
    refused("{\"max_tokens\": 1, \"messages\": [{\"role\": \"assistant\", \"content\": [{\"type\": \"tool_use\", "
            "\"id\": \"a\", \"name\": \"f\", \"input\": \"x\"}]}]}", "messages[0].content[0]", "'input' (an object)");
    refused("{\"max_tokens\": 1, \"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"tool_result\", "
            "\"tool_use_id\": \"a\", \"content\": [{\"type\": \"document\"}]}]}]}", "messages[0].content[0].content[0]",
            "text and image");
    refused("{\"max_tokens\": 1, \"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\"}]}]}",
            "messages[0].content[0]", "'messages[0].content[0].text' must be a string");
    refused("{\"max_tokens\": 1, \"mcp_servers\": [{\"type\": \"url\", \"url\": \"https://x\"}], " USER "}",
            "mcp_servers", "MCP");
}

/* ---- count_tokens --------------------------------------------------------------------- */

/* A stand-in template: remembers what it was given; one id per byte of
 * "role:content;" and a tool name per tool. */
static json_t *seen_request;

static int fake_template(void *user, const json_t *messages, const json_t *request, int32_t **ids, size_t *n_ids,
                         char **text, size_t *text_len, srv_api_error *err) {
    (void)user, (void)err;
    json_decref(seen_request);
    seen_request = json_deep_copy(request);
    char buf[2048] = "";
    size_t i;
    const json_t *m;
    json_array_foreach(messages, i, m)
        snprintf(buf + strlen(buf), sizeof buf - strlen(buf), "%s:%s;", json_string_value(json_object_get(m, "role")),
                 json_string_value(json_object_get(m, "content")));
    json_array_foreach(json_object_get(request, "tools"), i, m)
        snprintf(buf + strlen(buf), sizeof buf - strlen(buf), "%s",
                 json_string_value(json_object_get(json_object_get(m, "function"), "name")));
    *n_ids = strlen(buf);
    *ids = calloc(*n_ids, sizeof **ids);
    *text = strdup(buf);
    *text_len = *n_ids;
    return 0;
}

static void test_count_tokens_renders_the_prompt_without_max_tokens(void) {
    srv_parse_ctx c = {.model_name = "m", .chat_prompt = fake_template};
    json_t *b = js("{\"model\": \"m\", \"system\": \"S\", \"tools\": [{\"name\": \"fn\", \"input_schema\": {}}], "
                   "\"tool_choice\": {\"type\": \"any\"}, \"stop_sequences\": [\"x\"], \"thinking\": {\"type\": "
                   "\"enabled\", \"budget_tokens\": 2000}, \"messages\": [{\"role\": \"user\", \"content\": [{\"type\": "
                   "\"text\", \"text\": \"ab\"}, {\"type\": \"text\", \"text\": \"cd\"}]}]}"),
           *chat = NULL;
    srv_api_error e = {0};
    /* counting needs no max_tokens, nor --reasoning-parser for thinking (it shapes the prompt only) */
    REQUIRE_MSG(srv_messages_count_chat(&c, b, &chat, &e) == 0, "%s", e.message);
    CHECK(json_object_get(chat, "max_tokens") == NULL);
    CHECK(json_object_get(chat, "tool_choice") == NULL);
    CHECK(json_object_get(chat, "stop") == NULL);
    CHECK(json_object_get(chat, "thinking_token_budget") == NULL);
    size_t n = 0;
    REQUIRE_MSG(srv_count_chat_prompt(&c, chat, &n, &e) == 0, "%s", e.message);
    CHECK_EQ_INT(n, strlen("system:S;user:ab\ncd;fn"));
    CHECK_JSON(json_object_get(seen_request, "chat_template_kwargs"), "{\"enable_thinking\": true}");
    json_decref(chat);
    json_decref(b);
    /* the model is checked as for generation */
    b = js("{\"model\": \"other\", \"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}");
    REQUIRE(srv_messages_count_chat(&c, b, &chat, &e) == 0);
    CHECK(srv_count_chat_prompt(&c, chat, &n, &e) == -1);
    CHECK_EQ_INT(e.status, 404);
    json_decref(chat);
    json_decref(b);
    json_decref(seen_request);
    seen_request = NULL;
}

/* ---- responses ------------------------------------------------------------------------ */

/* The message a chat response becomes. */
static json_t *whole_of(const char *chat_response) {
    json_t *chat = js(chat_response), *b = js("{\"max_tokens\": 1, " USER "}"), *cb = NULL;
    void *st = NULL;
    srv_parse_ctx c = {0};
    srv_api_error e = {0};
    REQUIRE(M->to_chat(&c, b, "msg_abc", &cb, &st, &e) == 0);
    size_t len = 0;
    char *s = M->whole(st, chat, &len);
    M->free_state(st);
    json_decref(cb);
    json_decref(b);
    json_decref(chat);
    REQUIRE(s != NULL);
    json_t *o = js(s);
    CHECK_EQ_INT(len, strlen(s));
    free(s);
    return o;
}

#define CHAT_RESPONSE(message, finish, stop_reason)                                                       \
    "{\"id\": \"chatcmpl-1\", \"object\": \"chat.completion\", \"model\": \"m\", \"choices\": [{\"index\": 0, " \
    "\"message\": " message ", \"finish_reason\": " finish ", \"stop_reason\": " stop_reason "}], \"usage\": " \
    "{\"prompt_tokens\": 40, \"completion_tokens\": 9, \"total_tokens\": 49, \"prompt_tokens_details\": "    \
    "{\"cached_tokens\": 32}}}"

static void test_a_response_holds_thinking_text_and_tool_use_in_order(void) {
    json_t *m = whole_of(CHAT_RESPONSE(
        "{\"role\": \"assistant\", \"reasoning\": \"think\", \"content\": \"I will look.\", \"tool_calls\": [{\"id\": "
        "\"call_1\", \"type\": \"function\", \"function\": {\"name\": \"w\", \"arguments\": \"{\\\"city\\\": "
        "\\\"Paris\\\"}\"}}]}", "\"tool_calls\"", "null"));
    CHECK_JSON(m, "{\"id\": \"msg_abc\", \"type\": \"message\", \"role\": \"assistant\", \"model\": \"m\", \"content\": "
                  "[{\"type\": \"thinking\", \"thinking\": \"think\", \"signature\": \"\"}, {\"type\": \"text\", \"text\": "
                  "\"I will look.\"}, {\"type\": \"tool_use\", \"id\": \"call_1\", \"name\": \"w\", \"input\": {\"city\": "
                  "\"Paris\"}}], \"stop_reason\": \"tool_use\", \"stop_sequence\": null, \"usage\": {\"input_tokens\": 8, "
                  "\"cache_creation_input_tokens\": 0, \"cache_read_input_tokens\": 32, \"output_tokens\": 9}}");
    json_decref(m);
}

static void test_stop_reasons(void) {
    static const struct {
        const char *message, *finish, *stop_reason, *want, *want_seq;
    } cases[] = {
        {"{\"role\": \"assistant\", \"content\": \"hi\"}", "\"stop\"", "null", "end_turn", NULL},
        {"{\"role\": \"assistant\", \"content\": \"hi\"}", "\"stop\"", "151645", "end_turn", NULL}, /* a stop token */
        {"{\"role\": \"assistant\", \"content\": \"hi\"}", "\"stop\"", "\"END\"", "stop_sequence", "END"},
        {"{\"role\": \"assistant\", \"content\": \"hi\"}", "\"length\"", "null", "max_tokens", NULL},
        /* a named tool_choice finishes "stop" in chat: the calls say tool_use */
        {"{\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{\"id\": \"c\", \"type\": \"function\", "
         "\"function\": {\"name\": \"f\", \"arguments\": \"{}\"}}]}", "\"stop\"", "null", "tool_use", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[1024];
        snprintf(text, sizeof text, CHAT_RESPONSE("%s", "%s", "%s"), cases[i].message, cases[i].finish,
                 cases[i].stop_reason);
        json_t *m = whole_of(text);
        const char *got = json_string_value(json_object_get(m, "stop_reason"));
        CHECK_MSG(got && strcmp(got, cases[i].want) == 0, "case %zu: %s", i, got ? got : "(null)");
        const json_t *seq = json_object_get(m, "stop_sequence");
        if (cases[i].want_seq) CHECK(json_is_string(seq) && strcmp(json_string_value(seq), cases[i].want_seq) == 0);
        else CHECK(json_is_null(seq));
        json_decref(m);
    }
    /* nothing said: an empty content, not an empty text block */
    json_t *m = whole_of(CHAT_RESPONSE("{\"role\": \"assistant\", \"content\": \"\"}", "\"stop\"", "null"));
    CHECK_JSON(json_object_get(m, "content"), "[]");
    json_decref(m);
}

/* ---- streams ---------------------------------------------------------------------------- */

/* The events a chat stream becomes: [{"event", "data"}], the data parsed. */
static json_t *events_of(const char *chat_sse) {
    json_t *b = js("{\"max_tokens\": 1, \"stream\": true, " USER "}"), *cb = NULL;
    void *st = NULL;
    srv_parse_ctx c = {0};
    srv_api_error e = {0};
    REQUIRE(M->to_chat(&c, b, "msg_s", &cb, &st, &e) == 0);
    sbuf out = {0};
    M->stream_begin(st, &out);
    srv_adapter_transcode(M, st, chat_sse, strlen(chat_sse), &out);
    M->free_state(st);
    json_decref(cb);
    json_decref(b);
    REQUIRE(!out.oom);
    json_t *list = json_array();
    const char *p = out.data ? out.data : "";
    while (*p) {
        REQUIRE_MSG(strncmp(p, "event: ", 7) == 0, "not an event: %.80s", p);
        const char *nl = strchr(p, '\n');
        REQUIRE(nl && strncmp(nl + 1, "data: ", 6) == 0);
        const char *end = strstr(nl, "\n\n");
        REQUIRE(end);
        json_t *data = json_loadb(nl + 7, (size_t)(end - nl - 7), 0, NULL);
        REQUIRE(data);
        json_t *ev = json_pack("{s:s%, s:o}", "event", p + 7, (size_t)(nl - p - 7), "data", data);
        /* every event's data names its own type */
        CHECK(strcmp(json_string_value(json_object_get(ev, "event")),
                     json_string_value(json_object_get(data, "type"))) == 0);
        json_array_append_new(list, ev);
        p = end + 2;
    }
    sbuf_free(&out);
    return list;
}

#define CHUNK(choices, usage) "data: {\"id\": \"c\", \"model\": \"m\", \"choices\": " choices ", \"usage\": " usage "}\n\n"
#define U(p, c) "{\"prompt_tokens\": " #p ", \"completion_tokens\": " #c ", \"prompt_tokens_details\": {\"cached_tokens\": 0}}"

static void test_a_stream_is_the_published_event_sequence(void) {
    json_t *evs = events_of(
        CHUNK("[{\"index\": 0, \"delta\": {\"role\": \"assistant\", \"content\": \"\"}, \"finish_reason\": null}]", U(40, 0))
        CHUNK("[{\"index\": 0, \"delta\": {\"reasoning\": \"th\"}, \"finish_reason\": null}]", U(40, 1))
        CHUNK("[{\"index\": 0, \"delta\": {\"reasoning\": \"ink\"}, \"finish_reason\": null}]", U(40, 2))
        CHUNK("[{\"index\": 0, \"delta\": {\"content\": \"Hi\"}, \"finish_reason\": null}]", U(40, 3))
        CHUNK("[{\"index\": 0, \"delta\": {\"tool_calls\": [{\"index\": 0, \"id\": \"call_1\", \"type\": \"function\", "
              "\"function\": {\"name\": \"w\", \"arguments\": \"\"}}]}, \"finish_reason\": null}]", U(40, 4))
        CHUNK("[{\"index\": 0, \"delta\": {\"tool_calls\": [{\"index\": 0, \"function\": {\"arguments\": \"{\\\"a\\\"\"}}]}, "
              "\"finish_reason\": null}]", U(40, 5))
        CHUNK("[{\"index\": 0, \"delta\": {\"tool_calls\": [{\"index\": 0, \"function\": {\"arguments\": \": 1}\"}}]}, "
              "\"finish_reason\": null}]", U(40, 6))
        CHUNK("[{\"index\": 0, \"delta\": {}, \"finish_reason\": \"tool_calls\", \"stop_reason\": null}]", U(40, 6))
        "data: {\"id\": \"c\", \"model\": \"m\", \"choices\": [], \"usage\": {\"prompt_tokens\": 40, "
        "\"completion_tokens\": 6, \"prompt_tokens_details\": {\"cached_tokens\": 16}}}\n\n"
        "data: [DONE]\n\n");
    json_t *data = json_array();
    size_t i;
    const json_t *ev;
    json_array_foreach(evs, i, ev) json_array_append(data, json_object_get(ev, "data"));
    CHECK_JSON(data,
               "[{\"type\": \"message_start\", \"message\": {\"id\": \"msg_s\", \"type\": \"message\", \"role\": "
               "\"assistant\", \"model\": \"m\", \"content\": [], \"stop_reason\": null, \"stop_sequence\": null, "
               "\"usage\": {\"input_tokens\": 40, \"cache_creation_input_tokens\": 0, \"cache_read_input_tokens\": 0, "
               "\"output_tokens\": 0}}},"
               "{\"type\": \"ping\"},"
               "{\"type\": \"content_block_start\", \"index\": 0, \"content_block\": {\"type\": \"thinking\", "
               "\"thinking\": \"\", \"signature\": \"\"}},"
               "{\"type\": \"content_block_delta\", \"index\": 0, \"delta\": {\"type\": \"thinking_delta\", "
               "\"thinking\": \"th\"}},"
               "{\"type\": \"content_block_delta\", \"index\": 0, \"delta\": {\"type\": \"thinking_delta\", "
               "\"thinking\": \"ink\"}},"
               "{\"type\": \"content_block_delta\", \"index\": 0, \"delta\": {\"type\": \"signature_delta\", "
               "\"signature\": \"\"}},"
               "{\"type\": \"content_block_stop\", \"index\": 0},"
               "{\"type\": \"content_block_start\", \"index\": 1, \"content_block\": {\"type\": \"text\", \"text\": \"\"}},"
               "{\"type\": \"content_block_delta\", \"index\": 1, \"delta\": {\"type\": \"text_delta\", \"text\": \"Hi\"}},"
               "{\"type\": \"content_block_stop\", \"index\": 1},"
               "{\"type\": \"content_block_start\", \"index\": 2, \"content_block\": {\"type\": \"tool_use\", \"id\": "
               "\"call_1\", \"name\": \"w\", \"input\": {}}},"
               "{\"type\": \"content_block_delta\", \"index\": 2, \"delta\": {\"type\": \"input_json_delta\", "
               "\"partial_json\": \"{\\\"a\\\"\"}},"
               "{\"type\": \"content_block_delta\", \"index\": 2, \"delta\": {\"type\": \"input_json_delta\", "
               "\"partial_json\": \": 1}\"}},"
               "{\"type\": \"content_block_stop\", \"index\": 2},"
               "{\"type\": \"message_delta\", \"delta\": {\"stop_reason\": \"tool_use\", \"stop_sequence\": null}, "
               "\"usage\": {\"input_tokens\": 24, \"cache_creation_input_tokens\": 0, \"cache_read_input_tokens\": 16, "
               "\"output_tokens\": 6}},"
               "{\"type\": \"message_stop\"}]");
    json_decref(data);
    json_decref(evs);
}

static void test_a_streamed_stop_sequence_and_keep_alives(void) {
    const char *sse =
        CHUNK("[{\"index\": 0, \"delta\": {\"role\": \"assistant\", \"content\": \"\"}, \"finish_reason\": null}]", U(9, 0))
        ": keep-alive\n\n"
        CHUNK("[{\"index\": 0, \"delta\": {\"content\": \"a\"}, \"finish_reason\": null}]", U(9, 1))
        CHUNK("[{\"index\": 0, \"delta\": {}, \"finish_reason\": \"stop\", \"stop_reason\": \"END\"}]", U(9, 2))
        "data: {\"id\": \"c\", \"model\": \"m\", \"choices\": [], \"usage\": " U(9, 2) "}\n\n"
        "data: [DONE]\n\n";
    json_t *b = js("{\"max_tokens\": 1, \"stream\": true, " USER "}"), *cb = NULL;
    void *st = NULL;
    srv_parse_ctx c = {0};
    srv_api_error e = {0};
    REQUIRE(M->to_chat(&c, b, "msg_s", &cb, &st, &e) == 0);
    sbuf out = {0};
    srv_adapter_transcode(M, st, sse, strlen(sse), &out);
    M->stream_end(st, &out); /* a second end says nothing more */
    M->free_state(st);
    json_decref(cb);
    json_decref(b);
    REQUIRE(out.data);
    CHECK_CONTAINS(out.data, "event: ping\n");
    CHECK_CONTAINS(out.data, ": keep-alive\n\n"); /* comments pass as they are */
    CHECK_CONTAINS(out.data, "\"delta\":{\"stop_reason\":\"stop_sequence\",\"stop_sequence\":\"END\"}");
    const char *stop = strstr(out.data, "event: message_stop");
    CHECK(stop && !strstr(stop + 1, "event: message_stop"));
    sbuf_free(&out);
}

/* ---- errors ----------------------------------------------------------------------------- */

static void test_errors_take_anthropics_shape(void) {
    static const struct {
        int status;
        const char *type;
    } cases[] = {{400, "invalid_request_error"}, {401, "authentication_error"}, {404, "not_found_error"},
                 {413, "request_too_large"},      {500, "api_error"},            {503, "overloaded_error"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        srv_api_error e;
        srv_api_fail(&e, cases[i].status, "x", "went %s", "wrong");
        size_t len;
        char *s = M->error_body(&e, &len);
        REQUIRE(s);
        json_t *o = js(s);
        char want[256];
        snprintf(want, sizeof want, "{\"type\": \"error\", \"error\": {\"type\": \"%s\", \"message\": \"went wrong\"}}",
                 cases[i].type);
        CHECK_JSON(o, want);
        CHECK_EQ_INT(len, strlen(s));
        json_decref(o);
        free(s);
    }
    /* in a stream: an error event, after which the end adds nothing */
    json_t *b = js("{\"max_tokens\": 1, \"stream\": true, " USER "}"), *cb = NULL;
    void *st = NULL;
    srv_parse_ctx c = {0};
    srv_api_error e = {0};
    REQUIRE(M->to_chat(&c, b, "msg_s", &cb, &st, &e) == 0);
    sbuf out = {0};
    srv_api_fail(&e, 500, NULL, "engine failed");
    M->stream_error(st, &e, &out);
    M->stream_end(st, &out);
    REQUIRE(out.data);
    CHECK(strcmp(out.data, "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":"
                           "\"engine failed\"}}\n\n") == 0);
    sbuf_free(&out);
    M->free_state(st);
    json_decref(cb);
    json_decref(b);
}

int main(void) {
    RUN(test_a_plain_request_keeps_its_fields_and_max_tokens);
    RUN(test_max_tokens_is_required_and_at_least_1);
    RUN(test_system_blocks_are_parts_and_the_billing_header_is_dropped);
    RUN(test_a_tool_round_trip_becomes_tool_calls_and_tool_messages);
    RUN(test_an_image_url_source_goes_to_the_chat_path);
    RUN(test_a_last_assistant_message_is_continued);
    RUN(test_tools_and_every_tool_choice);
    RUN(test_thinking_maps_to_the_budget_and_the_template);
    RUN(test_stop_sequences_stream_and_output_config);
    RUN(test_what_is_refused_names_the_field);
    RUN(test_count_tokens_renders_the_prompt_without_max_tokens);
    RUN(test_a_response_holds_thinking_text_and_tool_use_in_order);
    RUN(test_stop_reasons);
    RUN(test_a_stream_is_the_published_event_sequence);
    RUN(test_a_streamed_stop_sequence_and_keep_alives);
    RUN(test_errors_take_anthropics_shape);
    return test_summary();
}
