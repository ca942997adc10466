/*
 * test_server_parse.c - what `pagedlm serve` accepts and refuses, without
 * HTTP: the body limit (413), malformed JSON, the model name (404
 * model_not_found), every request field with its defaults, types and ranges
 * (400 naming the field), the prompt forms, chat messages through a stand-in
 * template, the context length (400 context_length_exceeded),
 * prompt_cache_key (checked, then ignored), the /tokenize and /detokenize
 * bodies, and fill-in-the-middle: OpenAI's suffix and llama-server's
 * /infill, their prompts id by id, their defaults and refusals. Uses
 * stories260K's tokenizer (vocabulary 512, context 128; no FIM tokens) and
 * qwen3-tiny with Qwen2.5-Coder's FIM tokens added to its tokenizer.json.
 */
#define _POSIX_C_SOURCE 200809L
#include <jansson.h>
#include <string.h>
#include <unistd.h>

#include "engine/stop_match.h"
#include "server/api_parse.h"
#include "server/chat.h"
#include "test_util.h"

static pdl_model *model;
static srv_parse_ctx ctx;

static void setup(void) {
    if (model) return;
    char *path = test_data_path("models/stories260K/stories260K.gguf");
    pdl_error err;
    REQUIRE_MSG(pdl_model_load(&model, path, NULL, &err) == 0, "%s", err.message);
    free(path);
    ctx = (srv_parse_ctx){.model = model, .model_name = "stories", .ctx_len = 128, .vocab = 512};
}

static json_t *body_of(const char *text) {
    json_t *o = json_loads(text, 0, NULL);
    REQUIRE_MSG(o != NULL, "test body is not JSON: %s", text);
    return o;
}

/* Parses a completion request; returns the parse result. */
static int completion(const char *text, srv_gen_request *r, srv_api_error *e) {
    setup();
    json_t *o = body_of(text);
    memset(e, 0, sizeof *e);
    int rc = srv_parse_completion(&ctx, o, r, e);
    json_decref(o);
    return rc;
}

/* A completion body that must be refused with status and param, the message
 * containing `needle`. */
static void refused(const char *text, int status, const char *param, const char *needle) {
    srv_gen_request r;
    srv_api_error e;
    int rc = completion(text, &r, &e);
    srv_gen_request_free(&r);
    CHECK_MSG(rc == -1, "accepted: %s", text);
    if (rc != -1) return;
    CHECK_MSG(e.status == status, "%s: status %d, expected %d (%s)", text, e.status, status, e.message);
    CHECK_MSG(strcmp(e.param, param) == 0, "%s: param '%s', expected '%s'", text, e.param, param);
    CHECK_MSG(strstr(e.message, needle) != NULL, "%s: message '%s' lacks '%s'", text, e.message, needle);
    CHECK(e.type && strcmp(e.type, "invalid_request_error") == 0);
}

/* ---- body and model ---------------------------------------------------------------- */

static void test_body_limit_is_413(void) {
    srv_api_error e;
    json_t *o = NULL;
    const char *ok = "{\"prompt\": \"hi\"}";
    CHECK(srv_parse_json(ok, strlen(ok), 16, &o, &e) == 0);
    json_decref(o);
    CHECK(srv_parse_json(ok, strlen(ok), 15, &o, &e) == -1);
    CHECK_EQ_INT(e.status, 413);
    CHECK(e.code && strcmp(e.code, "request_too_large") == 0);
    CHECK_CONTAINS(e.message, "limit is 15");
    CHECK(o == NULL);
    CHECK(srv_check_body_size(SRV_MAX_BODY_DEFAULT, 0, &e) == 0);
    CHECK(srv_check_body_size(SRV_MAX_BODY_DEFAULT + 1, 0, &e) == -1);
    CHECK_EQ_INT(e.status, 413);
}

static void test_malformed_json_is_400_with_position(void) {
    const char *cases[] = {"{bad", "", "[1, 2]", "\"text\"", "{\"a\": 1,}", "{\"a\": 1, \"a\": 2}", "nul"};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        srv_api_error e;
        json_t *o = NULL;
        CHECK_MSG(srv_parse_json(cases[i], strlen(cases[i]), 0, &o, &e) == -1, "accepted %s", cases[i]);
        CHECK_EQ_INT(e.status, 400);
        CHECK(e.param[0] == '\0');
        CHECK(o == NULL);
    }
    srv_api_error e;
    json_t *o;
    CHECK(srv_parse_json("{\n  \"a\": }", 10, 0, &o, &e) == -1);
    CHECK_CONTAINS(e.message, "line 2");
}

/* \u0000 is taken where text is carried with its length (a prompt, a
 * message's content or its text parts), as the server writes NUL in the
 * text it returns; anywhere else the string is a name or a C string, and
 * the body is a 400 naming the field. */
static void test_nul_is_taken_in_prompt_and_message_text_only(void) {
    setup();
    const char *ok[] = {
        "{\"prompt\": \"Once\\u0000 upon\"}",
        "{\"prompt\": [\"a\", \"b\\u0000\"]}",
        "{\"messages\": [{\"role\": \"user\", \"content\": \"\\u0000\"}]}",
        "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"x\\u0000y\"}]}]}",
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        srv_api_error e;
        json_t *o = NULL;
        CHECK_MSG(srv_parse_json(ok[i], strlen(ok[i]), 0, &o, &e) == 0, "%s: %s", ok[i], e.message);
        json_decref(o);
    }
    /* the prompt keeps its NUL through parsing and tokenizing */
    const char *text = "{\"prompt\": \"Once\\u0000 upon\", \"echo\": true}";
    srv_api_error e;
    json_t *o = NULL;
    REQUIRE(srv_parse_json(text, strlen(text), 0, &o, &e) == 0);
    srv_gen_request r;
    REQUIRE_MSG(srv_parse_completion(&ctx, o, &r, &e) == 0, "%s", e.message);
    json_decref(o);
    CHECK_EQ_INT(r.prompts[0].text_len, 10);
    CHECK(memcmp(r.prompts[0].text, "Once\0 upon", 10) == 0);
    int32_t *ids = NULL;
    size_t n = 0;
    pdl_error pe;
    REQUIRE(pdl_tokenize(model, "Once", 4, true, &ids, &n, &pe) == 0);
    CHECK(r.prompts[0].n_ids > n + 1); /* more than "Once": the NUL and " upon" are in */
    free(ids);
    srv_gen_request_free(&r);
    const struct {
        const char *body, *param;
    } bad[] = {
        {"{\"model\": \"stories\\u0000x\", \"prompt\": \"hi\"}", "model"},
        {"{\"prompt\": \"hi\", \"stop\": [\"a\", \"b\\u0000\"]}", "stop[1]"},
        {"{\"prompt\": \"hi\", \"user\": \"\\u0000\"}", "user"},
        {"{\"messages\": [{\"role\": \"user\\u0000\", \"content\": \"x\"}]}", "messages[0].role"},
        {"{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"te\\u0000xt\", \"text\": \"x\"}]}]}",
         "messages[0].content[0].type"},
        {"{\"prompt\": \"hi\", \"response_format\": {\"type\": \"json_schema\", \"json_schema\": {\"schema\": "
         "{\"const\": \"\\u0000\"}}}}", "response_format.json_schema.schema.const"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        o = NULL;
        CHECK_MSG(srv_parse_json(bad[i].body, strlen(bad[i].body), 0, &o, &e) == -1, "accepted %s", bad[i].body);
        CHECK_EQ_INT(e.status, 400);
        CHECK_MSG(strcmp(e.param, bad[i].param) == 0, "%s: param '%s'", bad[i].body, e.param);
        CHECK_CONTAINS(e.message, "holds a NUL character (\\u0000)");
        CHECK(o == NULL);
    }
}

static void test_unknown_model_is_404_model_not_found(void) {
    refused("{\"model\": \"gpt-4\", \"prompt\": \"hi\"}", 404, "model", "`gpt-4` does not exist");
    srv_api_error e;
    srv_gen_request r;
    completion("{\"model\": \"gpt-4\", \"prompt\": \"hi\"}", &r, &e);
    srv_gen_request_free(&r);
    CHECK(e.code && strcmp(e.code, "model_not_found") == 0);
    refused("{\"model\": 3, \"prompt\": \"hi\"}", 400, "model", "must be a string");
    CHECK(completion("{\"model\": \"stories\", \"prompt\": \"hi\"}", &r, &e) == 0);
    srv_gen_request_free(&r);
    CHECK(completion("{\"model\": null, \"prompt\": \"hi\"}", &r, &e) == 0);
    srv_gen_request_free(&r);
}

/* ---- completions ------------------------------------------------------------------- */

static void test_completion_defaults(void) {
    srv_gen_request r;
    srv_api_error e;
    REQUIRE(completion("{\"prompt\": \"Once upon a time\"}", &r, &e) == 0);
    CHECK_EQ_INT(r.kind, SRV_API_COMPLETION);
    CHECK_EQ_INT(r.n_prompts, 1);
    CHECK_EQ_INT(r.prompts[0].n_ids, 5);
    CHECK_EQ_INT(r.prompts[0].ids[0], 1); /* BOS */
    CHECK(strcmp(r.prompts[0].text, "Once upon a time") == 0);
    CHECK_EQ_INT(r.params.max_tokens, 16);
    CHECK(r.params.sampling.temperature == 1.0f);
    CHECK(r.params.sampling.top_p == 1.0f);
    CHECK_EQ_INT(r.params.sampling.top_k, 0);
    CHECK(r.params.sampling.min_p == 0.0f);
    CHECK(r.params.sampling.repetition_penalty == 1.0f);
    CHECK(r.params.sampling.presence_penalty == 0.0f && r.params.sampling.frequency_penalty == 0.0f);
    CHECK_EQ_INT(r.params.n, 1);
    CHECK_EQ_INT(r.params.n_stop, 0);
    CHECK(r.params.stop_matcher == NULL);
    CHECK_EQ_INT(r.params.n_stop_ids, 0);
    CHECK(!r.params.ignore_eos);
    CHECK_EQ_INT(r.params.logprobs, -1);
    CHECK_EQ_INT(r.params.prompt_logprobs, -1);
    CHECK(!r.seed_given && !r.stream && !r.include_usage && !r.echo && !r.discard_output);
    srv_gen_request_free(&r);
}

static void test_completion_every_field(void) {
    srv_gen_request r;
    srv_api_error e;
    REQUIRE_MSG(completion("{\"model\": \"stories\", \"prompt\": \"Hi\", \"max_tokens\": 7, \"temperature\": 0.5, "
                           "\"top_p\": 0.9, \"top_k\": 40, \"min_p\": 0.05, \"presence_penalty\": 0.5, "
                           "\"frequency_penalty\": -0.5, \"repetition_penalty\": 1.2, \"seed\": -3, \"n\": 3, "
                           "\"stop\": [\"a\", \"bc\"], \"stop_token_ids\": [13, 2], \"ignore_eos\": true, "
                           "\"logprobs\": 4, \"echo\": true, \"stream\": true, \"stream_options\": "
                           "{\"include_usage\": true, \"continuous_usage_stats\": true}, \"user\": \"u1\", "
                           "\"best_of\": 3, \"min_tokens\": 0, \"logit_bias\": {}, \"suffix\": null, "
                           "\"some_future_field\": [1]}",
                           &r, &e) == 0,
                "%s", e.message);
    CHECK_EQ_INT(r.params.max_tokens, 7);
    CHECK(r.params.sampling.temperature == 0.5f);
    CHECK(r.params.sampling.top_p == 0.9f);
    CHECK_EQ_INT(r.params.sampling.top_k, 40);
    CHECK(r.params.sampling.min_p == 0.05f);
    CHECK(r.params.sampling.presence_penalty == 0.5f);
    CHECK(r.params.sampling.frequency_penalty == -0.5f);
    CHECK(r.params.sampling.repetition_penalty == 1.2f);
    CHECK(r.seed_given);
    CHECK(r.params.sampling.seed == (uint64_t)-3);
    CHECK_EQ_INT(r.params.n, 3);
    REQUIRE(r.params.n_stop == 2);
    CHECK(strcmp(r.params.stop[0], "a") == 0 && strcmp(r.params.stop[1], "bc") == 0);
    /* the stop matcher is made here, while parsing, not on the engine's thread */
    REQUIRE(r.params.stop_matcher);
    CHECK_EQ_INT(stop_matcher_count(r.params.stop_matcher), 2);
    REQUIRE(r.params.n_stop_ids == 2);
    CHECK(r.params.stop_ids[0] == 13 && r.params.stop_ids[1] == 2);
    CHECK(r.params.ignore_eos);
    CHECK_EQ_INT(r.logprobs, 4);
    CHECK_EQ_INT(r.params.logprobs, 4);
    CHECK(r.echo);
    CHECK_EQ_INT(r.params.prompt_logprobs, 4); /* echo with logprobs scores the prompt */
    CHECK_EQ_INT(r.prompt_logprobs, -1);
    CHECK(r.stream && r.include_usage && r.continuous_usage);
    srv_gen_request_free(&r);

    REQUIRE(completion("{\"prompt\": \"Hi\", \"stop\": \"x\", \"top_k\": -1, \"prompt_logprobs\": 2, "
                       "\"temperature\": 0, \"seed\": 5}", &r, &e) == 0);
    CHECK(r.params.n_stop == 1 && strcmp(r.params.stop[0], "x") == 0);
    CHECK_EQ_INT(r.params.sampling.top_k, 0);
    CHECK_EQ_INT(r.params.prompt_logprobs, 2);
    CHECK_EQ_INT(r.prompt_logprobs, 2);
    CHECK(r.params.sampling.temperature == 0.0f);
    CHECK(r.params.sampling.seed == 5);
    srv_gen_request_free(&r);

    /* integral numbers count as integers; null means "default" */
    REQUIRE(completion("{\"prompt\": \"Hi\", \"max_tokens\": 8.0, \"n\": null, \"stop\": null}", &r, &e) == 0);
    CHECK_EQ_INT(r.params.max_tokens, 8);
    CHECK_EQ_INT(r.params.n, 1);
    srv_gen_request_free(&r);
}

static void test_completion_prompt_forms(void) {
    srv_gen_request r;
    srv_api_error e;
    REQUIRE(completion("{\"prompt\": [1, 403, 407]}", &r, &e) == 0);
    CHECK_EQ_INT(r.n_prompts, 1);
    CHECK_EQ_INT(r.prompts[0].n_ids, 3);
    CHECK(r.prompts[0].ids[1] == 403 && r.prompts[0].text == NULL);
    srv_gen_request_free(&r);
    REQUIRE(completion("{\"prompt\": [\"Once\", \"The dog\", \"\"]}", &r, &e) == 0);
    CHECK_EQ_INT(r.n_prompts, 3);
    CHECK(strcmp(r.prompts[1].text, "The dog") == 0);
    CHECK_EQ_INT(r.prompts[2].n_ids, 1); /* "" is BOS alone */
    srv_gen_request_free(&r);
    REQUIRE(completion("{\"prompt\": [[1, 403], [1, 407, 261]], \"n\": 2}", &r, &e) == 0);
    CHECK_EQ_INT(r.n_prompts, 2);
    CHECK_EQ_INT(r.prompts[1].n_ids, 3);
    srv_gen_request_free(&r);
    /* echo of a token-id prompt: the prompt's text is decoded */
    REQUIRE(completion("{\"prompt\": [1, 403, 407], \"echo\": true}", &r, &e) == 0);
    CHECK(r.prompts[0].text && strcmp(r.prompts[0].text, "Once upon") == 0);
    srv_gen_request_free(&r);

    refused("{}", 400, "prompt", "'prompt' is required");
    refused("{\"prompt\": null}", 400, "prompt", "required");
    refused("{\"prompt\": 42}", 400, "prompt", "got an integer");
    refused("{\"prompt\": {}}", 400, "prompt", "got an object");
    refused("{\"prompt\": []}", 400, "prompt", "empty list");
    refused("{\"prompt\": [1, \"a\"]}", 400, "prompt", "item 1 is a string");
    refused("{\"prompt\": [\"a\", 1]}", 400, "prompt", "item 1 is an integer");
    refused("{\"prompt\": [[1], []]}", 400, "prompt", "empty list of token ids");
    refused("{\"prompt\": [1, 512]}", 400, "prompt", "token id 512 at position 1 is out of vocabulary");
    refused("{\"prompt\": [-1]}", 400, "prompt", "out of vocabulary");
    refused("{\"prompt\": [1.5]}", 400, "prompt", "a number");
}

/* Special-token text in a prompt is that token, as vLLM and llama-server
 * tokenize prompts: stories260K's "</s>" (EOS, id 2) inside the text. */
static void test_completion_prompt_special_token_text_is_the_token(void) {
    srv_gen_request r;
    srv_api_error e;
    REQUIRE_MSG(completion("{\"prompt\": \"Once</s>upon\"}", &r, &e) == 0, "%s", e.message);
    int eos_at = -1;
    for (size_t i = 0; i < r.prompts[0].n_ids; i++)
        if (r.prompts[0].ids[i] == 2) eos_at = (int)i;
    CHECK_MSG(eos_at > 1 && eos_at + 1 < (int)r.prompts[0].n_ids, "</s> at %d of %zu", eos_at, r.prompts[0].n_ids);
    CHECK_EQ_INT(r.prompts[0].ids[0], 1); /* BOS still added */
    srv_gen_request_free(&r);
}

static void test_completion_wrong_types_name_the_field(void) {
    static const char *const fields[][2] = {
        {"temperature", "\"hot\""}, {"top_p", "true"}, {"top_k", "1.5"}, {"min_p", "[]"},
        {"presence_penalty", "\"x\""}, {"frequency_penalty", "{}"}, {"repetition_penalty", "\"1\""},
        {"seed", "1.5"}, {"n", "\"2\""}, {"max_tokens", "\"ten\""}, {"logprobs", "true"},
        {"prompt_logprobs", "\"1\""}, {"echo", "1"}, {"stream", "\"yes\""}, {"ignore_eos", "0"},
        {"stop", "5"}, {"stop_token_ids", "3"}, {"user", "5"}, {"stream_options", "true"},
    };
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        char body[256];
        snprintf(body, sizeof body, "{\"prompt\": \"Hi\", \"%s\": %s}", fields[i][0], fields[i][1]);
        refused(body, 400, fields[i][0], fields[i][0]);
    }
}

static void test_completion_out_of_range_values(void) {
    refused("{\"prompt\": \"Hi\", \"temperature\": -0.1}", 400, "temperature", "got -0.1");
    refused("{\"prompt\": \"Hi\", \"temperature\": 1000}", 400, "temperature", "<= 100");
    refused("{\"prompt\": \"Hi\", \"top_p\": 0}", 400, "top_p", "> 0");
    refused("{\"prompt\": \"Hi\", \"top_p\": 1.01}", 400, "top_p", "<= 1");
    refused("{\"prompt\": \"Hi\", \"top_k\": -2}", 400, "top_k", "between -1 and");
    refused("{\"prompt\": \"Hi\", \"min_p\": 1.5}", 400, "min_p", "<= 1");
    refused("{\"prompt\": \"Hi\", \"presence_penalty\": 2.5}", 400, "presence_penalty", "<= 2");
    refused("{\"prompt\": \"Hi\", \"frequency_penalty\": -3}", 400, "frequency_penalty", ">= -2");
    refused("{\"prompt\": \"Hi\", \"repetition_penalty\": 0}", 400, "repetition_penalty", "> 0");
    refused("{\"prompt\": \"Hi\", \"n\": 0}", 400, "n", "between 1 and 64");
    refused("{\"prompt\": \"Hi\", \"n\": 65}", 400, "n", "between 1 and 64");
    refused("{\"prompt\": \"Hi\", \"max_tokens\": -1}", 400, "max_tokens", "between 0 and");
    refused("{\"prompt\": \"Hi\", \"max_tokens\": 0}", 400, "max_tokens", "only with echo");
    refused("{\"prompt\": \"Hi\", \"logprobs\": 21}", 400, "logprobs", "between 0 and 20");
    refused("{\"prompt\": \"Hi\", \"logprobs\": -1}", 400, "logprobs", "between 0 and 20");
    refused("{\"prompt\": \"Hi\", \"prompt_logprobs\": 21}", 400, "prompt_logprobs", "between 0 and 20");
    refused("{\"prompt\": \"Hi\", \"stop\": [\"\"]}", 400, "stop", "non-empty");
    refused("{\"prompt\": \"Hi\", \"stop\": [\"a\", 1]}", 400, "stop", "'stop[1]' must be a string");
    refused("{\"prompt\": \"Hi\", \"stop_token_ids\": [512]}", 400, "stop_token_ids", "[0, 512)");
    /* 64 prompts x n = 5 sequences is more than one request may ask */
    char body[4096] = "{\"n\": 5, \"prompt\": [";
    for (int i = 0; i < 64; i++) strcat(body, i ? ", \"a\"" : "\"a\"");
    strcat(body, "]}");
    refused(body, 400, "n", "at most 256");
}

static void test_completion_inconsistent_options(void) {
    refused("{\"prompt\": \"Hi\", \"stream_options\": {\"include_usage\": true}}", 400, "stream_options",
            "only allowed when 'stream' is true");
    refused("{\"prompt\": \"Hi\", \"stream\": true, \"stream_options\": {\"include_usage\": 1}}", 400,
            "stream_options", "include_usage");
    refused("{\"prompt\": \"Hi\", \"stream\": true, \"prompt_logprobs\": 1}", 400, "prompt_logprobs",
            "not available when 'stream' is true");
    refused("{\"prompt\": \"Hi\", \"echo\": true, \"max_tokens\": 0, \"stream\": true}", 400, "max_tokens",
            "not available when 'stream'");
    refused("{\"prompt\": \"Hi\", \"best_of\": 2}", 400, "best_of", "not supported");
    refused("{\"prompt\": \"Hi\", \"max_tokens\": 4, \"min_tokens\": 5}", 400, "min_tokens",
            "must not exceed max_tokens (4)");

    /* echo with max_tokens 0 scores the prompt: one token is generated and dropped */
    srv_gen_request r;
    srv_api_error e;
    REQUIRE(completion("{\"prompt\": \"Hi\", \"echo\": true, \"max_tokens\": 0, \"logprobs\": 1}", &r, &e) == 0);
    CHECK(r.discard_output);
    CHECK_EQ_INT(r.params.max_tokens, 1);
    CHECK_EQ_INT(r.params.prompt_logprobs, 1);
    srv_gen_request_free(&r);
}

static void test_logit_bias_min_tokens_and_the_newer_names(void) {
    srv_gen_request r;
    srv_api_error e;
    REQUIRE_MSG(completion("{\"prompt\": \"Hi\", \"logit_bias\": {\"400\": -100, \"5\": 2.5, \"0\": 100}, "
                           "\"min_tokens\": 3, \"max_completion_tokens\": 7, \"metadata\": {\"k\": \"v\"}, "
                           "\"user\": \"u\"}", &r, &e) == 0, "%s", e.message);
    CHECK_EQ_INT(r.params.min_tokens, 3);
    CHECK_EQ_INT(r.params.max_tokens, 7); /* max_completion_tokens is max_tokens */
    REQUIRE(r.params.sampling.n_logit_bias == 3 && r.params.sampling.logit_bias == r.logit_bias);
    /* sorted by token id */
    CHECK(r.logit_bias[0].token == 0 && r.logit_bias[0].bias == 100.0f);
    CHECK(r.logit_bias[1].token == 5 && r.logit_bias[1].bias == 2.5f);
    CHECK(r.logit_bias[2].token == 400 && r.logit_bias[2].bias == -100.0f);
    srv_gen_request_free(&r);
    /* LangChain sends an empty object */
    REQUIRE(completion("{\"prompt\": \"Hi\", \"logit_bias\": {}}", &r, &e) == 0);
    CHECK_EQ_INT(r.params.sampling.n_logit_bias, 0);
    srv_gen_request_free(&r);

    refused("{\"prompt\": \"Hi\", \"logit_bias\": {\"512\": 1}}", 400, "logit_bias", "'512' must be a token id in [0, 512)");
    refused("{\"prompt\": \"Hi\", \"logit_bias\": {\"-1\": 1}}", 400, "logit_bias", "must be a token id");
    refused("{\"prompt\": \"Hi\", \"logit_bias\": {\"a\": 1}}", 400, "logit_bias", "'a' must be a token id");
    refused("{\"prompt\": \"Hi\", \"logit_bias\": {\"7\": 100.5}}", 400, "logit_bias", "between -100 and 100");
    refused("{\"prompt\": \"Hi\", \"logit_bias\": {\"7\": \"1\"}}", 400, "logit_bias", "must be a number");
    refused("{\"prompt\": \"Hi\", \"logit_bias\": {\"7\": 1, \"07\": 2}}", 400, "logit_bias", "token 7 twice");
    refused("{\"prompt\": \"Hi\", \"logit_bias\": [1]}", 400, "logit_bias", "must be an object");
    refused("{\"prompt\": \"Hi\", \"metadata\": 3}", 400, "metadata", "must be an object");
    refused("{\"prompt\": \"Hi\", \"min_tokens\": -1}", 400, "min_tokens", "between 0 and");
}

static void test_stop_strings_are_capped_in_number_and_length(void) {
    /* 64 strings of 4096 bytes are fine; one byte or one string more is a 400 */
    size_t cap = 70 * 4200 + 256;
    char *body = malloc(cap);
    for (int extra_len = 0; extra_len < 2; extra_len++) {
        strcpy(body, "{\"prompt\": \"Hi\", \"stop\": [");
        for (int i = 0; i < 64; i++) {
            size_t at = strlen(body);
            body[at++] = i ? ',' : ' ';
            body[at++] = '"';
            int len = 4096 + (i == 63 ? extra_len : 0);
            for (int k = 0; k < len; k++) body[at++] = (char)('a' + (i + k) % 26);
            body[at++] = '"';
            body[at] = '\0';
        }
        strcat(body, "]}");
        if (extra_len == 0) {
            srv_gen_request r;
            srv_api_error e;
            CHECK_MSG(completion(body, &r, &e) == 0, "%s", e.message);
            CHECK_EQ_INT(r.params.n_stop, 64);
            srv_gen_request_free(&r);
        } else {
            refused(body, 400, "stop", "'stop[63]' has 4097 bytes; stop strings are limited to 4096 bytes");
        }
    }
    strcpy(body, "{\"prompt\": \"Hi\", \"stop\": [");
    for (int i = 0; i < 65; i++) strcat(body, i ? ", \"x\"" : "\"x\"");
    strcat(body, "]}");
    refused(body, 400, "stop", "65 strings; at most 64");
    free(body);
}

static void test_prompt_logprobs_are_bounded_per_request(void) {
    /* entries = prompt tokens x (top-N + 1): 100 tokens x 21 fit, 13000 x 21 do not */
    char *body = malloc(13000 * 6 + 128);
    for (int n_tok = 100; n_tok <= 13000; n_tok += 12900) {
        strcpy(body, "{\"max_tokens\": 1, \"prompt_logprobs\": 20, \"prompt\": [1");
        size_t at = strlen(body);
        for (int i = 1; i < n_tok; i++) at += (size_t)sprintf(body + at, ",403");
        strcpy(body + at, "]}");
        ctx.ctx_len = 1 << 20;
        if (n_tok == 100) {
            srv_gen_request r;
            srv_api_error e;
            CHECK_MSG(completion(body, &r, &e) == 0, "%s", e.message);
            srv_gen_request_free(&r);
        } else {
            refused(body, 400, "prompt_logprobs", "13000 prompt tokens with 20 alternatives each would be 273000 entries");
        }
        ctx.ctx_len = 128;
    }
    free(body);
}

static void test_prompt_longer_than_context_is_400(void) {
    /* 127 prompt tokens + 1 fits the 128-token context; + 2 does not */
    char body[2048] = "{\"max_tokens\": 1, \"prompt\": [1";
    for (int i = 1; i < 127; i++) strcat(body, ", 403");
    strcat(body, "]}");
    srv_gen_request r;
    srv_api_error e;
    CHECK(completion(body, &r, &e) == 0);
    srv_gen_request_free(&r);
    body[15] = '2';
    refused(body, 400, "prompt", "maximum context length is 128 tokens. However, you requested 129 tokens");
    completion(body, &r, &e);
    srv_gen_request_free(&r);
    CHECK(e.code && strcmp(e.code, "context_length_exceeded") == 0);
    /* the default max_tokens (16) counts too */
    refused("{\"prompt\": \"Once upon a time there was a girl\", \"max_tokens\": 120}", 400, "prompt",
            "maximum context length");
}

/* ---- chat ---------------------------------------------------------------------------- */

/* A stand-in template: "<role>: <content>\n" per message, "assistant:" at the end. */
static int fake_chat(void *user, const json_t *messages, const json_t *request, int32_t **ids, size_t *n_ids,
                     char **text, size_t *text_len, srv_api_error *err) {
    (void)user;
    char buf[4096] = "";
    size_t i;
    const json_t *m;
    json_array_foreach(messages, i, m) {
        const json_t *c = json_object_get(m, "content");
        snprintf(buf + strlen(buf), sizeof buf - strlen(buf), "%s: %s\n", json_string_value(json_object_get(m, "role")),
                 json_is_string(c) ? json_string_value(c) : "");
    }
    const json_t *agp = json_object_get(request, "add_generation_prompt");
    if (!agp || json_is_true(agp)) strcat(buf, "assistant:");
    *text = strdup(buf);
    *text_len = strlen(buf);
    pdl_error pe;
    if (pdl_tokenize(model, buf, strlen(buf), true, ids, n_ids, &pe)) return srv_api_fail(err, 400, "messages", "%s", pe.message);
    return 0;
}

static int chat(const char *text, srv_gen_request *r, srv_api_error *e, bool with_template) {
    setup();
    srv_parse_ctx c = ctx;
    if (with_template) c.chat_prompt = fake_chat;
    json_t *o = body_of(text);
    memset(e, 0, sizeof *e);
    int rc = srv_parse_chat(&c, o, r, e);
    json_decref(o);
    return rc;
}

static void chat_refused(const char *text, int status, const char *param, const char *needle) {
    srv_gen_request r;
    srv_api_error e;
    int rc = chat(text, &r, &e, true);
    srv_gen_request_free(&r);
    CHECK_MSG(rc == -1, "accepted: %s", text);
    if (rc != -1) return;
    CHECK_MSG(e.status == status, "%s: status %d (%s)", text, e.status, e.message);
    CHECK_MSG(strcmp(e.param, param) == 0, "%s: param '%s', expected '%s'", text, e.param, param);
    CHECK_MSG(strstr(e.message, needle) != NULL, "%s: message '%s' lacks '%s'", text, e.message, needle);
}

static void test_chat_messages_through_the_template(void) {
    srv_gen_request r;
    srv_api_error e;
    REQUIRE_MSG(chat("{\"model\": \"stories\", \"messages\": [{\"role\": \"system\", \"content\": \"Be kind.\"}, "
                     "{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"Hi\"}, "
                     "{\"type\": \"text\", \"text\": \"there\"}]}]}", &r, &e, true) == 0,
                "%s", e.message);
    CHECK_EQ_INT(r.kind, SRV_API_CHAT);
    CHECK_EQ_INT(r.n_prompts, 1);
    CHECK(strcmp(r.prompts[0].text, "system: Be kind.\nuser: Hi\nthere\nassistant:") == 0);
    CHECK(r.prompts[0].n_ids > 5);
    CHECK_EQ_INT(r.params.max_tokens, 0); /* up to the context */
    CHECK_EQ_INT(r.logprobs, -1);
    srv_gen_request_free(&r);

    REQUIRE(chat("{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], \"max_tokens\": 9, "
                  "\"max_completion_tokens\": 5, \"logprobs\": true, \"top_logprobs\": 3, "
                  "\"add_generation_prompt\": false}", &r, &e, true) == 0);
    CHECK_EQ_INT(r.params.max_tokens, 5); /* max_completion_tokens wins */
    CHECK_EQ_INT(r.logprobs, 3);
    CHECK_EQ_INT(r.params.logprobs, 3);
    CHECK(strcmp(r.prompts[0].text, "user: Hi\n") == 0);
    srv_gen_request_free(&r);

    REQUIRE(chat("{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], \"logprobs\": true}", &r, &e,
                 true) == 0);
    CHECK_EQ_INT(r.logprobs, 0);
    srv_gen_request_free(&r);
    REQUIRE(chat("{\"messages\": [{\"role\": \"assistant\", \"content\": null, \"name\": \"x\"}], "
                 "\"tools\": [], \"tool_choice\": \"none\", \"response_format\": {\"type\": \"text\"}}",
                 &r, &e, true) == 0);
    srv_gen_request_free(&r);
}

static const gram_vocab *test_grammar_vocab(void *user, pdl_error *err);

/* A stand-in template that writes each assistant message's "thinking". */
static int thinking_chat(void *user, const json_t *messages, const json_t *request, int32_t **ids, size_t *n_ids,
                         char **text, size_t *text_len, srv_api_error *err) {
    (void)user, (void)request;
    char buf[1024] = "";
    size_t i;
    const json_t *m;
    json_array_foreach(messages, i, m) {
        const json_t *t = json_object_get(m, "thinking");
        snprintf(buf + strlen(buf), sizeof buf - strlen(buf), "[%s]", json_is_string(t) ? json_string_value(t) : "-");
    }
    *text = strdup(buf);
    *text_len = strlen(buf);
    pdl_error pe;
    if (pdl_tokenize(model, buf, strlen(buf), true, ids, n_ids, &pe)) return srv_api_fail(err, 400, "messages", "%s", pe.message);
    return 0;
}

/* gpt-oss's template renders an assistant's earlier reasoning from
 * "thinking": the reasoning a client sends back (reasoning_content, or
 * vLLM's reasoning) reaches it there, for a harmony model only. */
static void test_harmony_reasoning_goes_back_as_thinking(void) {
    static const char BODY[] =
        "{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}, "
        "{\"role\": \"assistant\", \"content\": null, \"reasoning_content\": \"r1\", \"tool_calls\": "
        "[{\"id\": \"c1\", \"type\": \"function\", \"function\": {\"name\": \"f\", \"arguments\": \"{}\"}}]}, "
        "{\"role\": \"tool\", \"tool_call_id\": \"c1\", \"content\": \"ok\"}, "
        "{\"role\": \"assistant\", \"content\": \"a\", \"reasoning\": \"r2\"}, "
        "{\"role\": \"assistant\", \"content\": \"b\", \"reasoning\": \"r3\", \"thinking\": \"own\"}, "
        "{\"role\": \"user\", \"content\": \"more\", \"reasoning_content\": \"not an assistant\"}]}";
    for (int harmony = 0; harmony <= 1; harmony++) {
        setup();
        srv_parse_ctx c = ctx;
        c.chat_prompt = thinking_chat;
        c.harmony = harmony;
        c.reasoning_budget = -1;
        c.grammar_vocab = test_grammar_vocab;
        json_t *o = body_of(BODY);
        srv_gen_request r;
        srv_api_error e = {0};
        int rc = srv_parse_chat(&c, o, &r, &e);
        json_decref(o);
        REQUIRE_MSG(rc == 0, "%s", e.message);
        const char *want = harmony ? "[-][r1][-][r2][own][-]" : "[-][-][-][-][own][-]";
        CHECK_MSG(strcmp(r.prompts[0].text, want) == 0, "harmony %d: rendered %s", harmony, r.prompts[0].text);
        srv_gen_request_free(&r);
    }
}

static void test_chat_errors(void) {
    chat_refused("{}", 400, "messages", "'messages' is required");
    chat_refused("{\"messages\": \"hi\"}", 400, "messages", "must be a list");
    chat_refused("{\"messages\": []}", 400, "messages", "must not be empty");
    chat_refused("{\"messages\": [5]}", 400, "messages[0]", "must be an object");
    chat_refused("{\"messages\": [{\"content\": \"x\"}]}", 400, "messages[0]", "role");
    chat_refused("{\"messages\": [{\"role\": \"user\", \"content\": 5}]}", 400, "messages[0]", "content");
    chat_refused("{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"image_url\", \"image_url\": {}}]}]}",
                 400, "messages[0]", "this model takes no images");
    chat_refused("{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"input_audio\"}]}]}", 400,
                 "messages[0]", "'input_audio' are not supported");
    chat_refused("{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\"}]}]}", 400, "messages[0]",
                 "text' must be a string");
    chat_refused("{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"top_logprobs\": 2}", 400,
                 "top_logprobs", "'logprobs' must be set to true");
    chat_refused("{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"logprobs\": true, \"top_logprobs\": 21}",
                 400, "top_logprobs", "between 0 and 20");
    chat_refused("{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"logprobs\": 3}", 400, "logprobs",
                 "boolean");
    chat_refused("{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"max_tokens\": 0}", 400, "max_tokens",
                 "between 1 and");
    chat_refused("{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"continue_final_message\": true}", 400,
                 "continue_final_message", "cannot both be true");
    chat_refused("{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"chat_template_kwargs\": 1}", 400,
                 "chat_template_kwargs", "object");
    chat_refused("{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tools\": [{\"type\": \"function\"}]}",
                 400, "tools", "tools[0]");
    chat_refused("{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"echo\": true}", 400, "echo",
                 "not supported");
    chat_refused("{\"model\": \"other\", \"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}", 404, "model",
                 "does not exist");
    chat_refused("{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"max_tokens\": 126}", 400, "messages",
                 "maximum context length is 128");
    /* no template at all */
    srv_gen_request r;
    srv_api_error e;
    CHECK(chat("{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}", &r, &e, false) == -1);
    srv_gen_request_free(&r);
    CHECK_EQ_INT(e.status, 400);
    CHECK_CONTAINS(e.message, "--chat-template");
}

/* A tool message's tool_call_id names a call of an earlier assistant
 * message, or the request is a 400 naming messages[i].tool_call_id (as
 * OpenAI answers); a tool message without one goes to the template. */
static void test_tool_call_id_must_name_an_earlier_call(void) {
#define CALL(id) "{\"id\": \"" id "\", \"type\": \"function\", \"function\": {\"name\": \"f\", \"arguments\": \"{}\"}}"
#define ASKED "{\"role\": \"user\", \"content\": \"x\"}, {\"role\": \"assistant\", \"content\": null, " \
              "\"tool_calls\": [" CALL("call_a") ", " CALL("call_b") "]}"
    const char *ok[] = {
        "{\"messages\": [" ASKED ", {\"role\": \"tool\", \"tool_call_id\": \"call_b\", \"content\": \"1\"}, "
        "{\"role\": \"tool\", \"tool_call_id\": \"call_a\", \"content\": \"2\"}]}",
        /* a call of any earlier assistant message, not only the last one */
        "{\"messages\": [" ASKED ", {\"role\": \"tool\", \"tool_call_id\": \"call_a\", \"content\": \"1\"}, "
        "{\"role\": \"assistant\", \"content\": \"and\"}, {\"role\": \"tool\", \"tool_call_id\": \"call_b\", "
        "\"content\": \"2\"}]}",
        /* without an id (or a null one) the template decides */
        "{\"messages\": [" ASKED ", {\"role\": \"tool\", \"content\": \"1\"}, {\"role\": \"tool\", "
        "\"tool_call_id\": null, \"content\": \"2\"}]}",
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        srv_gen_request r;
        srv_api_error e;
        CHECK_MSG(chat(ok[i], &r, &e, true) == 0, "%s: %s", ok[i], e.message);
        srv_gen_request_free(&r);
    }
    chat_refused("{\"messages\": [" ASKED ", {\"role\": \"tool\", \"tool_call_id\": \"call_a\", \"content\": \"1\"}, "
                 "{\"role\": \"tool\", \"tool_call_id\": \"call_c\", \"content\": \"2\"}]}",
                 400, "messages[3].tool_call_id", "'messages[3].tool_call_id' is 'call_c', which is the id of no tool "
                 "call in an earlier assistant message");
    /* the call must come before its result */
    chat_refused("{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}, {\"role\": \"tool\", \"tool_call_id\": "
                 "\"call_a\", \"content\": \"1\"}, {\"role\": \"assistant\", \"tool_calls\": [" CALL("call_a") "]}]}",
                 400, "messages[1].tool_call_id", "'call_a'");
    /* only assistant messages make calls */
    chat_refused("{\"messages\": [{\"role\": \"user\", \"content\": \"x\", \"tool_calls\": [" CALL("call_a") "]}, "
                 "{\"role\": \"tool\", \"tool_call_id\": \"call_a\", \"content\": \"1\"}]}",
                 400, "messages[1].tool_call_id", "no tool call");
    chat_refused("{\"messages\": [" ASKED ", {\"role\": \"tool\", \"tool_call_id\": 7, \"content\": \"1\"}]}", 400,
                 "messages[2].tool_call_id", "must be a string, got an integer");
#undef ASKED
#undef CALL
}

/* ---- /tokenize and /detokenize ---------------------------------------------------------- */

/* ---- structured output and tools (api_structured.c) ------------------------------------ */

static gram_vocab *grammar_vocab_made;
static const gram_vocab *test_grammar_vocab(void *user, pdl_error *err) {
    (void)user;
    if (!grammar_vocab_made && pdl_model_grammar_vocab(model, &grammar_vocab_made, err)) return NULL;
    return grammar_vocab_made;
}

#define USER_X "\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]"
#define TOOL_A "{\"type\": \"function\", \"function\": {\"name\": \"a\", \"parameters\": {\"type\": \"object\"}}}"

/* The compile limits parse_structured gives (zero: the defaults), and the
 * turn it takes (NULL: none). */
static gram_limits structured_limits;
static int structured_format = -1; /* the server's --tool-call-parser, or -1: none given */
static int (*structured_turn)(void *user, const gram_limits *lim);
static int turns_taken, turns_given;
static void turn_give(void *user) {
    (void)user;
    turns_given++;
}

/* Parses a body (chat when it has messages) with structured output available. */
static int parse_structured(const char *text, srv_gen_request *r, srv_api_error *e, bool auto_tools) {
    setup();
    srv_parse_ctx c = ctx;
    c.grammar_limits = structured_limits;
    c.grammar_turn_take = structured_turn;
    c.grammar_turn_give = structured_turn ? turn_give : NULL;
    c.chat_prompt = fake_chat;
    c.grammar_vocab = test_grammar_vocab;
    c.auto_tool_choice = auto_tools;
    if (structured_format >= 0) {
        c.tool_parser_set = true;
        c.tool_format = (gram_tool_format)structured_format;
    }
    json_t *o = body_of(text);
    memset(e, 0, sizeof *e);
    memset(r, 0, sizeof *r);
    int rc = json_object_get(o, "messages") ? srv_parse_chat(&c, o, r, e) : srv_parse_completion(&c, o, r, e);
    json_decref(o);
    return rc;
}

static void structured_ok(const char *text, bool want_grammar, bool want_parse_tools, bool auto_tools) {
    srv_gen_request r;
    srv_api_error e;
    int rc = parse_structured(text, &r, &e, auto_tools);
    CHECK_MSG(rc == 0, "%s: refused: %s", text, e.message);
    if (rc == 0) {
        CHECK_MSG((r.grammar != NULL) == want_grammar, "%s: grammar %s", text, r.grammar ? "set" : "not set");
        CHECK(r.params.grammar == r.grammar);
        CHECK_MSG(r.parse_tools == want_parse_tools, "%s: parse_tools %d", text, r.parse_tools);
    }
    srv_gen_request_free(&r);
}

static int hook_calls;
static bool client_left(void *user) {
    (void)user;
    hook_calls++;
    return true;
}

static void structured_refused(const char *text, const char *param, const char *needle, bool auto_tools) {
    srv_gen_request r;
    srv_api_error e;
    int rc = parse_structured(text, &r, &e, auto_tools);
    srv_gen_request_free(&r);
    CHECK_MSG(rc == -1, "accepted: %s", text);
    if (rc != -1) return;
    CHECK_MSG(e.status == 400, "%s: status %d (%s)", text, e.status, e.message);
    CHECK_MSG(strcmp(e.param, param) == 0, "%s: param '%s', expected '%s'", text, e.param, param);
    CHECK_MSG(strstr(e.message, needle) != NULL, "%s: message '%s' lacks '%s'", text, e.message, needle);
}

static void test_structured_output_fields(void) {
    /* every spelling clients send compiles into the request's grammar */
    structured_ok("{\"prompt\": \"x\", \"response_format\": {\"type\": \"json_object\"}}", true, false, false);
    structured_ok("{\"prompt\": \"x\", \"response_format\": {\"type\": \"json_schema\", \"json_schema\": "
                  "{\"name\": \"n\", \"schema\": {\"type\": \"integer\"}, \"strict\": true}}}", true, false, false);
    structured_ok("{\"prompt\": \"x\", \"response_format\": {\"type\": \"text\"}}", false, false, false);
    structured_ok("{\"prompt\": \"x\", \"structured_outputs\": {\"choice\": [\"a\", \"b\"]}}", true, false, false);
    structured_ok("{\"prompt\": \"x\", \"structured_outputs\": {\"regex\": \"[a-c]+\"}}", true, false, false);
    structured_ok("{\"prompt\": \"x\", \"structured_outputs\": {\"json\": \"{\\\"type\\\": \\\"null\\\"}\"}}", true,
                  false, false);
    structured_ok("{\"prompt\": \"x\", \"guided_json\": {\"type\": \"boolean\"}}", true, false, false);
    structured_ok("{\"prompt\": \"x\", \"grammar\": \"root ::= [a-z]+\"}", true, false, false);
    structured_ok("{\"prompt\": \"x\", \"json_schema\": {\"enum\": [1, 2]}}", true, false, false);
    structured_ok("{" USER_X ", \"response_format\": {\"type\": \"json_object\"}}", true, false, false);
    /* what is wrong is named */
    structured_refused("{\"prompt\": \"x\", \"response_format\": {\"type\": \"json_schema\", \"json_schema\": "
                       "{\"name\": \"n\", \"schema\": {\"type\": \"object\", \"properties\": {\"a\": {\"not\": {}}}}}}}",
                       "response_format", "'not' (at #/properties/a/not)", false);
    structured_refused("{\"prompt\": \"x\", \"response_format\": {\"type\": \"xml\"}}", "response_format", "type",
                       false);
    structured_refused("{\"prompt\": \"x\", \"grammar\": \"root ::= \\\"a\\\" b\"}", "grammar", "'b'", false);
    structured_refused("{\"prompt\": \"x\", \"response_format\": {\"type\": \"json_object\"}, \"grammar\": \"root ::= "
                       "[a]\"}", "grammar", "only one", false);
    structured_refused("{\"prompt\": \"x\", \"structured_outputs\": {\"choice\": []}}", "structured_outputs.choice",
                       "non-empty", false);
    structured_refused("{\"prompt\": \"x\", \"tools\": [" TOOL_A "]}", "tools", "chat", false);
}

static void test_tools_and_tool_choice(void) {
    /* tools alone: "none" unless the server parses calls ("auto" is then the default) */
    structured_ok("{" USER_X ", \"tools\": [" TOOL_A "]}", false, false, false);
    structured_ok("{" USER_X ", \"tools\": [" TOOL_A "]}", false, true, true);
    structured_ok("{" USER_X ", \"tools\": [" TOOL_A "], \"tool_choice\": \"none\"}", false, false, true);
    /* "required" and a named function force a call with a grammar */
    structured_ok("{" USER_X ", \"tools\": [" TOOL_A "], \"tool_choice\": \"required\"}", true, true, false);
    structured_ok("{" USER_X ", \"tools\": [" TOOL_A "], \"tool_choice\": {\"type\": \"function\", \"function\": "
                  "{\"name\": \"a\"}}}", true, true, false);
    /* "auto" beside a constraint: the constraint's grammar, calls parsed from its output */
    structured_ok("{" USER_X ", \"tools\": [" TOOL_A "], \"tool_choice\": \"auto\", \"structured_outputs\": "
                  "{\"regex\": \"a\"}}", true, true, true);
    structured_refused("{" USER_X ", \"tools\": [" TOOL_A "], \"tool_choice\": \"auto\"}", "tool_choice",
                       "--enable-auto-tool-choice", false);
    structured_refused("{" USER_X ", \"tool_choice\": \"required\"}", "tool_choice", "'tools' must be set", false);
    structured_refused("{" USER_X ", \"tools\": [" TOOL_A "], \"tool_choice\": {\"type\": \"function\", \"function\": "
                       "{\"name\": \"b\"}}}", "tool_choice", "'b'", false);
    structured_refused("{" USER_X ", \"tools\": [" TOOL_A "], \"tool_choice\": \"sometimes\"}", "tool_choice",
                       "\"required\"", false);
    structured_refused("{" USER_X ", \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"a\", "
                       "\"parameters\": {\"type\": \"object\", \"properties\": {\"p\": {\"if\": {}}}}}}], "
                       "\"tool_choice\": \"required\"}", "tools", "'if'", false);
    structured_refused("{" USER_X ", \"tools\": [" TOOL_A "], \"tool_choice\": \"required\", \"response_format\": "
                       "{\"type\": \"json_object\"}}", "tool_choice", "only one", false);
    /* an earlier assistant call's arguments must be JSON text */
    structured_refused("{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}, {\"role\": \"assistant\", "
                       "\"tool_calls\": [{\"id\": \"c\", \"type\": \"function\", \"function\": {\"name\": \"a\", "
                       "\"arguments\": \"{oops\"}}]}]}", "messages[1]", "not valid JSON", false);
}

/* In every format a forced call compiles into the format's grammar, and
 * the output's parser gets the request's tools (the XML-like formats read
 * parameter values by their types). */
static void test_every_format_forces_and_parses_with_the_tools(void) {
    static const char body[] = "{" USER_X ", \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"a\", "
                               "\"parameters\": {\"type\": \"object\", \"properties\": {\"n\": {\"type\": "
                               "\"integer\"}}}}}], \"tool_choice\": \"required\"}";
    json_t *whole = body_of(body), *want = json_object_get(whole, "tools");
    for (int f = GRAM_TOOLS_HERMES; f <= GRAM_TOOLS_KIMI_K2; f++) {
        structured_format = f;
        srv_gen_request r;
        srv_api_error e;
        int rc = parse_structured(body, &r, &e, false);
        CHECK_MSG(rc == 0, "%s: refused: %s", gram_tool_format_name(f), e.message);
        if (rc == 0) {
            CHECK(r.grammar != NULL && r.parse_tools && (int)r.tool_format == f);
            json_t *got = r.tools_json ? json_loads(r.tools_json, 0, NULL) : NULL;
            if (f == GRAM_TOOLS_QWEN3_CODER || f == GRAM_TOOLS_GLM45)
                CHECK_MSG(got && json_equal(got, want), "%s: tools_json %s", gram_tool_format_name(f),
                          r.tools_json ? r.tools_json : "(none)");
            else
                CHECK_MSG(!got, "%s: tools_json %s, not needed", gram_tool_format_name(f), r.tools_json);
            json_decref(got);
        }
        srv_gen_request_free(&r);
    }
    structured_format = -1;
    json_decref(whole);
}

/* A grammar whose automaton explodes (issue 33: a few bytes of regex took
 * the server to 24 GB) is a 400 naming the field it came in, whichever
 * spelling; the work limit stops it while it compiles. */
static void test_explosive_grammars_are_a_400_naming_the_field(void) {
    structured_limits = (gram_limits){.max_work = 2000000, .max_seconds = -1};
    static const char *const P = "\"pattern\": \"^((a{1,100}){1,100}){1,100}$\"";
    char body[1024];
    struct {
        const char *fmt, *param;
    } cases[] = {
        {"{\"prompt\": \"x\", \"guided_regex\": \"((a{1,100}){1,100}){1,100}\"}", "guided_regex"},
        {"{\"prompt\": \"x\", \"structured_outputs\": {\"regex\": \"(a{1,1000}){1,1000}\"}}",
         "structured_outputs.regex"},
        {"{\"prompt\": \"x\", \"response_format\": {\"type\": \"json_schema\", \"json_schema\": {\"name\": \"n\", "
         "\"schema\": {\"type\": \"string\", %s}}}}", "response_format"},
        {"{\"prompt\": \"x\", \"json_schema\": {\"type\": \"string\", %s}}", "json_schema"},
        {"{\"prompt\": \"x\", \"grammar\": \"root ::= ((\\\"a\\\"){1,100}){1,100} \\\"b\\\"\"}", "grammar"},
        {"{" USER_X ", \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"a\", \"parameters\": "
         "{\"type\": \"object\", \"properties\": {\"s\": {\"type\": \"string\", %s}}}}}], \"tool_choice\": \"required\"}",
         "tools"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(body, sizeof body, cases[i].fmt, P);
        structured_refused(body, cases[i].param, "grammar too complex", false);
    }
    /* the hook the server sets per request: its client has gone */
    hook_calls = 0;
    structured_limits = (gram_limits){.max_work = (int64_t)1 << 40, .max_seconds = -1, .cancelled = client_left};
    srv_gen_request r;
    srv_api_error e;
    CHECK(parse_structured("{\"prompt\": \"x\", \"guided_regex\": \"((a{1,100}){1,100}){1,100}\"}", &r, &e, false) == -1);
    srv_gen_request_free(&r);
    CHECK_CONTAINS(e.message, "cancelled");
    CHECK(hook_calls == 1);
    structured_limits = (gram_limits){0};
}

static int turn_ok(void *user, const gram_limits *lim) {
    (void)user, (void)lim;
    turns_taken++;
    return SRV_TURN_OK;
}
static int turn_busy(void *user, const gram_limits *lim) {
    (void)user, (void)lim;
    turns_taken++;
    return SRV_TURN_BUSY;
}

/* A grammar compiles in a turn the server hands out (a few at once): one
 * taken and given back per compiled grammar; none left means 503. */
static void test_a_grammar_compiles_in_a_turn(void) {
    turns_taken = turns_given = 0;
    structured_turn = turn_ok;
    structured_ok("{\"prompt\": \"x\", \"guided_regex\": \"[a-c]+\"}", true, false, false);
    CHECK(turns_taken == 1 && turns_given == 1);
    structured_ok("{\"prompt\": \"x\"}", false, false, false); /* no grammar: no turn */
    CHECK(turns_taken == 1);
    structured_turn = turn_busy;
    srv_gen_request r;
    srv_api_error e;
    CHECK(parse_structured("{\"prompt\": \"x\", \"guided_regex\": \"[a-c]+\"}", &r, &e, false) == -1);
    srv_gen_request_free(&r);
    CHECK_EQ_INT(e.status, 503);
    CHECK(strcmp(e.param, "guided_regex") == 0);
    CHECK(turns_taken == 2 && turns_given == 1);
    structured_turn = NULL;
}

/* OpenAI's prompt_cache_key: a routing hint for the balancer in front
 * (deploy/haproxy/pagedlm.cfg); a replica checks its type and otherwise
 * ignores it, in both APIs. */
static void test_prompt_cache_key_is_a_string(void) {
    srv_gen_request r;
    srv_api_error e;
    REQUIRE_MSG(completion("{\"prompt\": \"Hi\", \"prompt_cache_key\": \"user-42\"}", &r, &e) == 0, "%s", e.message);
    srv_gen_request_free(&r);
    REQUIRE(completion("{\"prompt\": \"Hi\", \"prompt_cache_key\": \"\"}", &r, &e) == 0);
    srv_gen_request_free(&r);
    REQUIRE_MSG(chat("{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], \"prompt_cache_key\": \"s-1\"}", &r, &e,
                     true) == 0, "%s", e.message);
    srv_gen_request_free(&r);
    /* null is absent, as for every optional field */
    REQUIRE(completion("{\"prompt\": \"Hi\", \"prompt_cache_key\": null}", &r, &e) == 0);
    srv_gen_request_free(&r);
    refused("{\"prompt\": \"Hi\", \"prompt_cache_key\": 7}", 400, "prompt_cache_key", "must be a string, got an integer");
    chat_refused("{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"prompt_cache_key\": {}}", 400,
                 "prompt_cache_key", "got an object");
}

static void test_tokenize_and_detokenize_bodies(void) {
    setup();
    srv_tokenize_request t;
    srv_api_error e;
    json_t *o = body_of("{\"model\": \"stories\", \"prompt\": \"Once upon\", \"return_token_strs\": true}");
    REQUIRE(srv_parse_tokenize(&ctx, o, &t, &e) == 0);
    json_decref(o);
    CHECK_EQ_INT(t.n_ids, 3);
    CHECK(t.ids[0] == 1 && t.ids[1] == 403 && t.ids[2] == 407);
    CHECK(t.return_token_strs);
    free(t.ids);
    o = body_of("{\"prompt\": \"Once upon\", \"add_special_tokens\": false}");
    REQUIRE(srv_parse_tokenize(&ctx, o, &t, &e) == 0);
    json_decref(o);
    CHECK_EQ_INT(t.n_ids, 2);
    free(t.ids);
    static const char *const bad_tok[][2] = {
        {"{}", "prompt"}, {"{\"prompt\": 5}", "prompt"}, {"{\"prompt\": \"a\", \"messages\": []}", "prompt"},
        {"{\"prompt\": \"a\", \"add_special_tokens\": 1}", "add_special_tokens"},
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}", "messages"}, /* no template */
    };
    for (size_t i = 0; i < sizeof bad_tok / sizeof bad_tok[0]; i++) {
        o = body_of(bad_tok[i][0]);
        CHECK_MSG(srv_parse_tokenize(&ctx, o, &t, &e) == -1, "accepted %s", bad_tok[i][0]);
        json_decref(o);
        free(t.ids);
        CHECK_EQ_INT(e.status, 400);
        CHECK_MSG(strcmp(e.param, bad_tok[i][1]) == 0, "%s: param %s", bad_tok[i][0], e.param);
    }

    int32_t *ids;
    size_t n;
    o = body_of("{\"tokens\": [1, 403, 407]}");
    REQUIRE(srv_parse_detokenize(&ctx, o, &ids, &n, &e) == 0);
    json_decref(o);
    CHECK_EQ_INT(n, 3);
    free(ids);
    o = body_of("{\"tokens\": []}");
    REQUIRE(srv_parse_detokenize(&ctx, o, &ids, &n, &e) == 0);
    json_decref(o);
    CHECK_EQ_INT(n, 0);
    free(ids);
    static const char *const bad_detok[] = {"{}", "{\"tokens\": \"1 2\"}", "{\"tokens\": [1, 512]}",
                                            "{\"tokens\": [1, \"a\"]}", "{\"tokens\": [1], \"model\": \"x\"}"};
    for (size_t i = 0; i < sizeof bad_detok / sizeof bad_detok[0]; i++) {
        o = body_of(bad_detok[i]);
        CHECK_MSG(srv_parse_detokenize(&ctx, o, &ids, &n, &e) == -1, "accepted %s", bad_detok[i]);
        json_decref(o);
        CHECK(ids == NULL);
        CHECK(e.status == (i == 4 ? 404 : 400));
    }
}

/* ---- fill-in-the-middle: a suffix, /infill ---------------------------------------- */

/* stories260K has no FIM tokens: a suffix, or /infill, is a 400 naming the
 * field and saying so; an empty suffix is no hole (a plain completion). */
static void test_fim_on_a_model_without_fim_tokens_is_400(void) {
    refused("{\"prompt\": \"Hi\", \"suffix\": \"end\"}", 400, "suffix", "this model has no FIM tokens");
    refused("{\"prompt\": \"Hi\", \"suffix\": \"end\"}", 400, "suffix", "prefix/suffix/middle");
    srv_gen_request r;
    srv_api_error e;
    REQUIRE_MSG(completion("{\"prompt\": \"Hi\", \"suffix\": \"\"}", &r, &e) == 0, "%s", e.message);
    CHECK(!r.fim);
    srv_gen_request_free(&r);
    json_t *o = body_of("{\"input_prefix\": \"a\", \"input_suffix\": \"b\"}");
    int rc = srv_parse_infill(&ctx, o, &r, &e);
    srv_gen_request_free(&r);
    json_decref(o);
    CHECK(rc == -1);
    CHECK_EQ_INT(e.status, 400);
    CHECK(strcmp(e.param, "input_suffix") == 0);
    CHECK_CONTAINS(e.message, "this model has no FIM tokens");
}

/* qwen3-tiny (random weights, Qwen's byte-level BPE cut to 1203 tokens)
 * with Qwen2.5-Coder's six FIM tokens added to its tokenizer.json at ids
 * 1203... (its embeddings have 1536 rows), as a folder of its own. */
enum { F_PRE = 1203, F_MID, F_SUF, F_PAD, F_REP, F_SEP };
static pdl_model *fim_model;
static srv_parse_ctx fim_ctx;

static void copy_file(const char *from_dir, const char *to_dir, const char *name) {
    char *from = test_join(from_dir, name), *to = test_join(to_dir, name);
    size_t n;
    char *data = test_slurp(from, &n);
    REQUIRE_MSG(n > 0, "cannot read %s", from);
    test_write_file(to, data, n);
    free(data);
    free(from);
    free(to);
}

static void fim_setup(void) {
    setup();
    if (fim_model) return;
    char *src = test_data_path("models/qwen3-tiny/hf");
    char *dir = test_make_dir("qwen3-tiny-fim");
    copy_file(src, dir, "config.json");
    copy_file(src, dir, "generation_config.json");
    copy_file(src, dir, "tokenizer_config.json");
    char *from = test_join(src, "model.safetensors"), *to = test_join(dir, "model.safetensors");
    REQUIRE(symlink(from, to) == 0);
    free(from);
    free(to);
    char *tj = test_join(src, "tokenizer.json");
    json_error_t je;
    json_t *tok = json_load_file(tj, 0, &je);
    REQUIRE_MSG(tok, "%s: %s", tj, je.text);
    free(tj);
    const char *names[] = {"<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>",
                           "<|file_sep|>"};
    json_t *added = json_object_get(tok, "added_tokens");
    for (int i = 0; i < 6; i++)
        json_array_append_new(added, json_pack("{s:i, s:s, s:b, s:b, s:b, s:b, s:b}", "id", F_PRE + i, "content",
                                               names[i], "single_word", 0, "lstrip", 0, "rstrip", 0, "normalized", 0,
                                               "special", 0));
    tj = test_join(dir, "tokenizer.json");
    REQUIRE(json_dump_file(tok, tj, 0) == 0);
    free(tj);
    json_decref(tok);
    pdl_error err;
    REQUIRE_MSG(pdl_model_load(&fim_model, dir, NULL, &err) == 0, "%s", err.message);
    free(dir);
    free(src);
    /* a batch of 64 leaves the files room in a context of 256 (format_infill
     * gives them what the context has beyond the batch) */
    fim_ctx = (srv_parse_ctx){.model = fim_model, .model_name = "stories", .ctx_len = 256, .vocab = 1536,
                              .batch_tokens = 64};
}

/* Plain text -> ids (no BOS: Qwen adds none anyway). */
static size_t ids_of(const char *text, int32_t *out, size_t cap) {
    int32_t *ids;
    size_t n;
    pdl_error err;
    REQUIRE_MSG(pdl_tokenize(fim_model, text, strlen(text), false, &ids, &n, &err) == 0, "%s", err.message);
    REQUIRE(n <= cap);
    memcpy(out, ids, n * sizeof *ids);
    free(ids);
    return n;
}

/* want = pieces joined: positive numbers are ids, a string's ids follow. */
typedef struct idlist {
    int32_t v[512];
    size_t n;
} idlist;
static void add_id(idlist *l, int32_t id) { l->v[l->n++] = id; }
static void add_text(idlist *l, const char *text) { l->n += ids_of(text, l->v + l->n, 512 - l->n); }

static void check_ids(const srv_prompt *p, const idlist *want) {
    bool same = p->n_ids == want->n && memcmp(p->ids, want->v, want->n * sizeof *want->v) == 0;
    CHECK_MSG(same, "the FIM prompt differs (%zu ids, want %zu)", p->n_ids, want->n);
    if (!same) {
        for (size_t i = 0; i < p->n_ids; i++) fprintf(stderr, " %d", p->ids[i]);
        fputs("\n  want:", stderr);
        for (size_t i = 0; i < want->n; i++) fprintf(stderr, " %d", want->v[i]);
        fputc('\n', stderr);
    }
}

static int fim_completion(const char *text, srv_gen_request *r, srv_api_error *e) {
    fim_setup();
    json_t *o = body_of(text);
    memset(e, 0, sizeof *e);
    int rc = srv_parse_completion(&fim_ctx, o, r, e);
    json_decref(o);
    return rc;
}

static int infill(const char *text, srv_gen_request *r, srv_api_error *e) {
    fim_setup();
    json_t *o = body_of(text);
    memset(e, 0, sizeof *e);
    int rc = srv_parse_infill(&fim_ctx, o, r, e);
    json_decref(o);
    return rc;
}

static void fim_refused(bool is_infill, const char *text, const char *param, const char *needle) {
    srv_gen_request r;
    srv_api_error e;
    int rc = is_infill ? infill(text, &r, &e) : fim_completion(text, &r, &e);
    srv_gen_request_free(&r);
    CHECK_MSG(rc == -1, "accepted: %s", text);
    if (rc != -1) return;
    CHECK_MSG(e.status == 400, "%s: status %d (%s)", text, e.status, e.message);
    CHECK_MSG(strcmp(e.param, param) == 0, "%s: param '%s', expected '%s'", text, e.param, param);
    CHECK_MSG(strstr(e.message, needle) != NULL, "%s: message '%s' lacks '%s'", text, e.message, needle);
}

/* The FIM stop ids (FIM_PAD, FIM_REP, FIM_SEP) follow the client's, once each. */
static void check_fim_stops(const srv_gen_request *r, const int32_t *first, int n_first) {
    REQUIRE(r->params.n_stop_ids == n_first + 3 - (n_first > 0 && first[n_first - 1] == F_SEP));
    for (int i = 0; i < n_first; i++) CHECK(r->params.stop_ids[i] == first[i]);
    CHECK(r->params.stop_ids[n_first] == F_PAD && r->params.stop_ids[n_first + 1] == F_REP);
}

/* OpenAI's suffix: FIM_PRE prompt FIM_SUF suffix FIM_MID for every prompt
 * (a text prompt without BOS, ids as given), nothing cut. */
static void test_completion_suffix_lays_out_prefix_suffix_middle(void) {
    srv_gen_request r;
    srv_api_error e;
    REQUIRE_MSG(fim_completion("{\"prompt\": \"def add(a, b):\", \"suffix\": \"  return c\", \"max_tokens\": 9}",
                               &r, &e) == 0, "%s", e.message);
    CHECK(r.fim);
    REQUIRE(r.n_prompts == 1);
    idlist want = {.n = 0};
    add_id(&want, F_PRE), add_text(&want, "def add(a, b):"), add_id(&want, F_SUF), add_text(&want, "  return c"),
        add_id(&want, F_MID);
    check_ids(&r.prompts[0], &want);
    check_fim_stops(&r, NULL, 0);
    CHECK_EQ_INT(r.params.max_tokens, 9);
    srv_gen_request_free(&r);

    /* two prompts, one given as ids; the client's stop ids first */
    REQUIRE_MSG(fim_completion("{\"prompt\": [[5, 6, 7], [8]], \"suffix\": \"x\", \"stop_token_ids\": [3, 1208]}",
                               &r, &e) == 0, "%s", e.message);
    REQUIRE(r.n_prompts == 2);
    idlist w0 = {.n = 0}, w1 = {.n = 0};
    add_id(&w0, F_PRE), add_id(&w0, 5), add_id(&w0, 6), add_id(&w0, 7), add_id(&w0, F_SUF), add_text(&w0, "x"),
        add_id(&w0, F_MID);
    add_id(&w1, F_PRE), add_id(&w1, 8), add_id(&w1, F_SUF), add_text(&w1, "x"), add_id(&w1, F_MID);
    check_ids(&r.prompts[0], &w0);
    check_ids(&r.prompts[1], &w1);
    check_fim_stops(&r, (const int32_t[]){3, F_SEP}, 2);
    srv_gen_request_free(&r);

    /* an empty suffix: a plain completion */
    REQUIRE(fim_completion("{\"prompt\": \"def\", \"suffix\": \"\"}", &r, &e) == 0);
    CHECK(!r.fim && r.params.n_stop_ids == 0);
    idlist plain = {.n = 0};
    add_text(&plain, "def");
    check_ids(&r.prompts[0], &plain);
    srv_gen_request_free(&r);
}

static void test_completion_suffix_refusals(void) {
    fim_refused(false, "{\"prompt\": \"a\", \"suffix\": \"b\", \"echo\": true}", "echo",
                "cannot be used with 'suffix'");
    fim_refused(false, "{\"prompt\": \"a\", \"suffix\": 3}", "suffix", "must be a string");
    fim_refused(false, "{\"prompt\": \"a\", \"suffix\": [\"b\"]}", "suffix", "must be a string");
    /* no cut on /v1/completions: too long is the usual 400 */
    char body[4096] = "{\"prompt\": \"a\", \"max_tokens\": 16, \"suffix\": \"";
    for (int i = 0; i < 300; i++) strcat(body, " x");
    strcat(body, "\"}");
    fim_refused(false, body, "prompt", "maximum context length is 256");
}

/* /infill: llama-server's fields and defaults. */
static void test_infill_fields_and_defaults(void) {
    srv_gen_request r;
    srv_api_error e;
    REQUIRE_MSG(infill("{\"input_prefix\": \"def f():\", \"input_suffix\": \"  pass\", \"id_slot\": 0, "
                       "\"cache_prompt\": true, \"samplers\": [\"top_k\", \"infill\"], \"n_indent\": 4, "
                       "\"t_max_predict_ms\": 500, \"response_fields\": [\"content\"]}", &r, &e) == 0,
                "%s", e.message);
    CHECK(r.kind == SRV_API_INFILL && r.fim && !r.fim_truncated);
    CHECK(r.params.sampling.temperature == 0.8f);
    CHECK_EQ_INT(r.params.sampling.top_k, 40);
    CHECK(r.params.sampling.top_p == 0.95f);
    CHECK(r.params.sampling.min_p == 0.05f);
    CHECK(r.params.sampling.repetition_penalty == 1.0f);
    CHECK_EQ_INT(r.params.max_tokens, 0); /* n_predict -1: up to the context */
    CHECK(!r.seed_given && !r.stream && !r.discard_output && !r.return_tokens);
    CHECK_EQ_INT(r.params.n, 1);
    /* the repository header even without files (the vocabulary has FIM_REP and FIM_SEP) */
    idlist want = {.n = 0};
    add_id(&want, F_REP), add_text(&want, "myproject\n"), add_id(&want, F_SEP), add_text(&want, "filename\n");
    add_id(&want, F_PRE), add_text(&want, "def f():"), add_id(&want, F_SUF), add_text(&want, "  pass"),
        add_id(&want, F_MID);
    check_ids(&r.prompts[0], &want);
    check_fim_stops(&r, NULL, 0);
    srv_gen_request_free(&r);

    REQUIRE_MSG(infill("{\"input_prefix\": \"a\", \"input_suffix\": \"b\", \"n_predict\": 12, \"temperature\": 0, "
                       "\"top_k\": 5, \"top_p\": 0.5, \"min_p\": 0, \"repeat_penalty\": 1.1, \"seed\": 7, "
                       "\"stop\": [\"\\n\"], \"stream\": true, \"return_tokens\": true, \"ignore_eos\": true, "
                       "\"prompt\": \"<|fim_pad|>c\", \"input_extra\": [{\"filename\": \"u.py\", \"text\": \"u\"}, "
                       "{\"text\": \"v\"}]}", &r, &e) == 0, "%s", e.message);
    CHECK_EQ_INT(r.params.max_tokens, 12);
    CHECK(r.params.sampling.temperature == 0.0f && r.params.sampling.top_k == 5 && r.params.sampling.top_p == 0.5f);
    CHECK(r.params.sampling.min_p == 0.0f && r.params.sampling.repetition_penalty == 1.1f);
    CHECK(r.seed_given && r.params.sampling.seed == 7 && r.stream && r.return_tokens && r.params.ignore_eos);
    REQUIRE(r.params.n_stop == 1);
    /* the files, then the prefix with the prompt after it; the prompt's
     * special-token text is read as its token, as llama-server does */
    idlist w2 = {.n = 0};
    add_id(&w2, F_REP), add_text(&w2, "myproject\n"), add_id(&w2, F_SEP), add_text(&w2, "u.py\n"), add_text(&w2, "u");
    add_id(&w2, F_SEP), add_text(&w2, "tmp\n"), add_text(&w2, "v"), add_id(&w2, F_SEP), add_text(&w2, "filename\n");
    add_id(&w2, F_PRE), add_text(&w2, "a"), add_id(&w2, F_PAD), add_text(&w2, "c"), add_id(&w2, F_SUF),
        add_text(&w2, "b"), add_id(&w2, F_MID);
    check_ids(&r.prompts[0], &w2);
    srv_gen_request_free(&r);

    /* n_predict 0: the prompt only (llama.vscode fills the cache so); max_tokens
     * is n_predict's other name; seed -1 is random; token ids as the texts */
    REQUIRE(infill("{\"input_prefix\": [5, 6], \"input_suffix\": [], \"n_predict\": 0, \"seed\": -1}", &r, &e) == 0);
    CHECK(r.discard_output && r.params.max_tokens == 1 && !r.seed_given);
    idlist w3 = {.n = 0};
    add_id(&w3, F_REP), add_text(&w3, "myproject\n"), add_id(&w3, F_SEP), add_text(&w3, "filename\n");
    add_id(&w3, F_PRE), add_id(&w3, 5), add_id(&w3, 6), add_id(&w3, F_SUF), add_id(&w3, F_MID);
    check_ids(&r.prompts[0], &w3);
    srv_gen_request_free(&r);
    REQUIRE(infill("{\"input_prefix\": \"a\", \"input_suffix\": \"b\", \"max_tokens\": 3}", &r, &e) == 0);
    CHECK_EQ_INT(r.params.max_tokens, 3);
    srv_gen_request_free(&r);
}

/* A prefix and suffix longer than the batch are cut as format_infill cuts
 * them: the end of the prefix, the start of the suffix; truncated says so. */
static void test_infill_cuts_long_prefix_and_suffix(void) {
    srv_gen_request r;
    srv_api_error e;
    char prefix[1024] = "", suffix[1024] = "y";
    for (int i = 0; i < 100; i++) strcat(prefix, i % 10 ? " a" : " b");
    strcat(prefix, " z");
    for (int i = 0; i < 100; i++) strcat(suffix, " c");
    char body[4096];
    snprintf(body, sizeof body, "{\"n_predict\": 8, \"input_prefix\": \"%s\", \"input_suffix\": \"%s\"}", prefix,
             suffix);
    REQUIRE_MSG(infill(body, &r, &e) == 0, "%s", e.message);
    CHECK(r.fim_truncated);
    const srv_prompt *p = &r.prompts[0];
    size_t pre = 0, suf = 0, mid = 0;
    for (size_t i = 0; i < p->n_ids; i++) {
        if (p->ids[i] == F_PRE) pre = i;
        if (p->ids[i] == F_SUF) suf = i;
        if (p->ids[i] == F_MID) mid = i;
    }
    /* a batch of 64: the prefix keeps 3 * 16 ids, the suffix 16 - 2 */
    REQUIRE(suf - pre - 1 == 48 && mid - suf - 1 == 14);
    idlist all_pre = {.n = 0}, all_suf = {.n = 0};
    add_text(&all_pre, prefix);
    add_text(&all_suf, suffix);
    REQUIRE(all_pre.n > 48 && all_suf.n > 14);
    CHECK(memcmp(p->ids + pre + 1, all_pre.v + all_pre.n - 48, 48 * sizeof(int32_t)) == 0); /* its end */
    CHECK(memcmp(p->ids + suf + 1, all_suf.v, 14 * sizeof(int32_t)) == 0);                  /* its start */
    /* the repository header fits in 255 - 64 - 2 * 8 */
    idlist head = {.n = 0};
    add_id(&head, F_REP), add_text(&head, "myproject\n"), add_id(&head, F_SEP), add_text(&head, "filename\n");
    CHECK_EQ_INT((int)pre, (int)head.n);
    CHECK(p->n_ids + 8 <= 256);
    srv_gen_request_free(&r);
    /* a small batch leaves no room for the suffix, and a large n_predict
     * none for the files (255 - 8 - 2 * 124 < 0) */
    fim_ctx.batch_tokens = 8;
    snprintf(body, sizeof body, "{\"n_predict\": 124, \"input_prefix\": \"%s\", \"input_suffix\": \"%s\", "
             "\"prompt\": \"q\"}", prefix, suffix);
    int rc = infill(body, &r, &e);
    fim_ctx.batch_tokens = 64;
    REQUIRE_MSG(rc == 0, "%s", e.message);
    idlist want = {.n = 0};
    add_id(&want, F_PRE);
    for (size_t i = all_pre.n - 6; i < all_pre.n; i++) add_id(&want, all_pre.v[i]);
    add_text(&want, "q"), add_id(&want, F_SUF), add_id(&want, F_MID);
    check_ids(&r.prompts[0], &want);
    srv_gen_request_free(&r);
}

static void test_infill_refusals(void) {
    fim_refused(true, "{\"input_suffix\": \"b\"}", "input_prefix", "'input_prefix' is required");
    fim_refused(true, "{\"input_prefix\": \"a\"}", "input_suffix", "'input_suffix' is required");
    fim_refused(true, "{\"input_prefix\": 1, \"input_suffix\": \"b\"}", "input_prefix", "must be a string");
    fim_refused(true, "{\"input_prefix\": \"a\", \"input_suffix\": \"b\", \"prompt\": [1]}", "prompt",
                "must be a string");
    fim_refused(true, "{\"input_prefix\": \"a\", \"input_suffix\": \"b\", \"input_extra\": {}}", "input_extra",
                "must be an array of {\"filename\": string, \"text\": string}");
    fim_refused(true, "{\"input_prefix\": \"a\", \"input_suffix\": \"b\", \"input_extra\": [{\"filename\": \"x\"}]}",
                "input_extra", "must contain a \"text\" field");
    fim_refused(true, "{\"input_prefix\": \"a\", \"input_suffix\": \"b\", \"input_extra\": [{\"text\": \"x\", "
                "\"filename\": 2}]}", "input_extra", "\"filename\" field must be a string");
    fim_refused(true, "{\"input_prefix\": \"a\", \"input_suffix\": \"b\", \"n\": 2}", "n", "must be 1");
    fim_refused(true, "{\"input_prefix\": \"a\", \"input_suffix\": \"b\", \"n_probs\": 3}", "n_probs",
                "not supported");
    fim_refused(true, "{\"input_prefix\": \"a\", \"input_suffix\": \"b\", \"n_predict\": -2}", "n_predict",
                "between -1");
    fim_refused(true, "{\"input_prefix\": \"a\", \"input_suffix\": \"b\", \"n_predict\": 400}", "input_prefix",
                "maximum context length");
}

/* \u0000 may stand in the text around the hole, not in a file name. */
static void test_nul_in_fim_text_only(void) {
    const char *ok[] = {"{\"prompt\": \"a\", \"suffix\": \"b\\u0000\"}",
                        "{\"input_prefix\": \"\\u0000\", \"input_suffix\": \"\\u0000\", "
                        "\"input_extra\": [{\"text\": \"\\u0000\"}]}"};
    for (size_t i = 0; i < 2; i++) {
        srv_api_error e;
        json_t *o = NULL;
        CHECK_MSG(srv_parse_json(ok[i], strlen(ok[i]), 0, &o, &e) == 0, "%s: %s", ok[i], e.message);
        json_decref(o);
    }
    const char *bad = "{\"input_prefix\": \"a\", \"input_extra\": [{\"filename\": \"\\u0000\", \"text\": \"t\"}]}";
    srv_api_error e;
    json_t *o = NULL;
    CHECK(srv_parse_json(bad, strlen(bad), 0, &o, &e) == -1);
    CHECK(strcmp(e.param, "input_extra[0].filename") == 0);
}

/* OpenAI's reasoning_effort reaches the chat template (gpt-oss writes it
 * into its system message), over chat_template_kwargs' value; an unknown
 * effort is a 400 naming the field. */
static void test_reasoning_effort_reaches_the_template(void) {
    setup();
    char *tmpl = test_tmp_path("effort.jinja");
    static const char T[] = "{{ reasoning_effort | default('medium') }}|{% for m in messages %}{{ m.content }}{% endfor %}";
    test_write_file(tmpl, T, strlen(T));
    srv_chat *chat = NULL;
    pdl_error err;
    REQUIRE_MSG(srv_chat_load(&chat, model, NULL, tmpl, &err) == 0 && chat, "%s", err.message);
    static const struct {
        const char *body, *want;
    } cases[] = {
        {"{}", "medium|hi"},
        {"{\"reasoning_effort\": \"high\"}", "high|hi"},
        {"{\"chat_template_kwargs\": {\"reasoning_effort\": \"low\"}}", "low|hi"},
        {"{\"chat_template_kwargs\": {\"reasoning_effort\": \"low\"}, \"reasoning_effort\": \"high\"}", "high|hi"},
    };
    json_t *msgs = body_of("[{\"role\": \"user\", \"content\": \"hi\"}]");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        json_t *req = body_of(cases[i].body);
        int32_t *ids = NULL;
        size_t n = 0, len = 0;
        char *text = NULL;
        srv_api_error e = {0};
        REQUIRE_MSG(srv_chat_prompt(chat, msgs, req, &ids, &n, &text, &len, &e) == 0, "%s: %s", cases[i].body,
                    e.message);
        CHECK_MSG(len == strlen(cases[i].want) && !memcmp(text, cases[i].want, len), "%s: rendered '%.*s'",
                  cases[i].body, (int)len, text);
        free(ids), free(text);
        json_decref(req);
    }
    json_t *req = body_of("{\"reasoning_effort\": \"max\"}");
    int32_t *ids = NULL;
    size_t n = 0, len = 0;
    char *text = NULL;
    srv_api_error e = {0};
    CHECK(srv_chat_prompt(chat, msgs, req, &ids, &n, &text, &len, &e) != 0);
    CHECK_EQ_INT(e.status, 400);
    CHECK_MSG(strstr(e.message, "reasoning_effort") != NULL, "%s", e.message);
    free(ids), free(text);
    json_decref(req), json_decref(msgs);
    srv_chat_free(chat);
    free(tmpl);
}

int main(void) {
    RUN(test_body_limit_is_413);
    RUN(test_reasoning_effort_reaches_the_template);
    RUN(test_malformed_json_is_400_with_position);
    RUN(test_nul_is_taken_in_prompt_and_message_text_only);
    RUN(test_unknown_model_is_404_model_not_found);
    RUN(test_completion_defaults);
    RUN(test_completion_every_field);
    RUN(test_completion_prompt_forms);
    RUN(test_completion_wrong_types_name_the_field);
    RUN(test_completion_prompt_special_token_text_is_the_token);
    RUN(test_completion_out_of_range_values);
    RUN(test_completion_inconsistent_options);
    RUN(test_logit_bias_min_tokens_and_the_newer_names);
    RUN(test_stop_strings_are_capped_in_number_and_length);
    RUN(test_prompt_logprobs_are_bounded_per_request);
    RUN(test_prompt_longer_than_context_is_400);
    RUN(test_chat_messages_through_the_template);
    RUN(test_chat_errors);
    RUN(test_harmony_reasoning_goes_back_as_thinking);
    RUN(test_structured_output_fields);
    RUN(test_tools_and_tool_choice);
    RUN(test_every_format_forces_and_parses_with_the_tools);
    RUN(test_explosive_grammars_are_a_400_naming_the_field);
    RUN(test_a_grammar_compiles_in_a_turn);
    RUN(test_tool_call_id_must_name_an_earlier_call);
    RUN(test_prompt_cache_key_is_a_string);
    RUN(test_tokenize_and_detokenize_bodies);
    RUN(test_fim_on_a_model_without_fim_tokens_is_400);
    RUN(test_completion_suffix_lays_out_prefix_suffix_middle);
    RUN(test_completion_suffix_refusals);
    RUN(test_infill_fields_and_defaults);
    RUN(test_infill_cuts_long_prefix_and_suffix);
    RUN(test_infill_refusals);
    RUN(test_nul_in_fim_text_only);
    gram_vocab_free(grammar_vocab_made);
    pdl_model_free(fim_model);
    pdl_model_free(model);
    return test_summary();
}
