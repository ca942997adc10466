/*
 * chat.c - chat messages -> prompt ids through the library's chat templates
 * (pdl_chat_template_*, rendered as transformers' apply_chat_template).
 *
 * The template is the --chat-template file when given (with the model's BOS
 * and EOS text as bos_token / eos_token), else the model's own. A model
 * without one still serves completions; chat requests then get a 400. The
 * rendered text is tokenized without adding BOS (the template writes it) and
 * with special-token text parsed, as vLLM does.
 */
#define _POSIX_C_SOURCE 200809L
#include "server/chat.h"

#include <stdlib.h>
#include <string.h>

#include "util/error.h"
#include "util/file_map.h"

struct srv_chat {
    const pdl_model *model;
    pdl_chat_template *tmpl;
};

/* The text of one special token (BOS, EOS) from the model's tokenizer, or NULL. */
static char *special_text(const pdl_tokenizer *tok, int32_t id) {
    if (!tok || id < 0) return NULL;
    char *text = NULL;
    pdl_error err;
    if (pdl_tokenizer_decode(tok, &id, 1, PDL_TOK_KEEP_SPECIAL, &text, NULL, &err)) return NULL;
    return text;
}

int srv_chat_load(srv_chat **out, const pdl_model *model, const char *model_path, const char *template_path,
                  pdl_error *err) {
    *out = NULL;
    pdl_chat_template *t = NULL;
    if (template_path) {
        char *src = NULL;
        size_t len = 0;
        if (file_read(template_path, PDL_READ_MAX_TEMPLATE, &src, &len, err)) return -1;
        pdl_model_info info;
        pdl_model_get_info(model, &info);
        pdl_tokenizer *tok = NULL;
        pdl_error te;
        if (!model_path || pdl_tokenizer_load(&tok, model_path, &te)) tok = NULL; /* no BOS / EOS text then */
        char *bos = special_text(tok, info.bos_id), *eos = special_text(tok, info.eos_id);
        pdl_tokenizer_free(tok);
        int rc = pdl_chat_template_from_source(&t, src, bos, eos, err);
        free(src), free(bos), free(eos);
        if (rc) return err_fail_prefix(err, "%s", template_path);
    } else {
        pdl_error why;
        if (pdl_chat_template_load(&t, model_path, &why)) return 0; /* no template: chat is refused */
    }
    srv_chat *c = calloc(1, sizeof *c);
    if (!c) {
        pdl_chat_template_free(t);
        return err_fail(err, "out of memory");
    }
    c->model = model;
    c->tmpl = t;
    *out = c;
    return 0;
}

void srv_chat_free(srv_chat *c) {
    if (!c) return;
    pdl_chat_template_free(c->tmpl);
    free(c);
}

/* continue_final_message: the rendering stops right after the last
 * message's content (what follows is the template closing that turn). */
static void cut_after_last_content(char *text, size_t *len, const json_t *messages) {
    const json_t *last = json_array_get(messages, json_array_size(messages) - 1);
    const json_t *content = json_object_get(last, "content");
    if (!json_is_string(content) || json_string_length(content) == 0) return;
    const char *needle = json_string_value(content);
    size_t nl = json_string_length(content);
    for (size_t i = *len >= nl ? *len - nl + 1 : 0; i-- > 0;)
        if (memcmp(text + i, needle, nl) == 0) {
            *len = i + nl;
            text[*len] = '\0';
            return;
        }
}

int srv_chat_prompt(void *user, const json_t *messages, const json_t *request, int32_t **ids, size_t *n_ids,
                    char **text, size_t *text_len, srv_api_error *err) {
    srv_chat *c = user;
    *ids = NULL;
    *n_ids = 0;
    *text = NULL;
    *text_len = 0;
    const json_t *agp = json_object_get(request, "add_generation_prompt");
    const json_t *cont = json_object_get(request, "continue_final_message");
    bool add_gen = !agp || json_is_null(agp) || json_is_true(agp);
    bool continue_final = cont && json_is_true(cont);
    /* chat_template_kwargs first, so that the request's own keys win */
    json_t *ctx = json_object();
    const json_t *kw = json_object_get(request, "chat_template_kwargs");
    if (!ctx || (json_is_object(kw) && json_object_update(ctx, (json_t *)kw))) {
        json_decref(ctx);
        return srv_api_fail(err, 500, NULL, "out of memory");
    }
    json_object_set(ctx, "messages", (json_t *)messages);
    /* OpenAI's reasoning_effort reaches the template (gpt-oss's puts it in
     * its system message as "Reasoning: high") */
    const json_t *effort = json_object_get(request, "reasoning_effort");
    if (effort && !json_is_null(effort)) {
        static const char *const known[] = {"none", "minimal", "low", "medium", "high"};
        bool ok = false;
        for (size_t i = 0; json_is_string(effort) && i < sizeof known / sizeof known[0]; i++)
            ok = ok || strcmp(json_string_value(effort), known[i]) == 0;
        if (!ok) {
            json_decref(ctx);
            return srv_api_fail(err, 400, "reasoning_effort", "'reasoning_effort' must be one of \"none\", "
                                "\"minimal\", \"low\", \"medium\", \"high\"");
        }
        json_object_set(ctx, "reasoning_effort", (json_t *)effort);
    }
    /* the tools go to the template whatever tool_choice says (vLLM's default) */
    const json_t *tools = json_object_get(request, "tools");
    if (json_is_array(tools) && json_array_size(tools) > 0) json_object_set(ctx, "tools", (json_t *)tools);
    json_object_set_new(ctx, "add_generation_prompt", json_boolean(add_gen && !continue_final));
    char *json = json_dumps(ctx, JSON_COMPACT | JSON_ENCODE_ANY);
    json_decref(ctx);
    if (!json) return srv_api_fail(err, 500, NULL, "out of memory");
    char *rendered = NULL;
    size_t len = 0;
    pdl_error pe;
    int rc = pdl_chat_template_render(c->tmpl, json, &rendered, &len, &pe);
    free(json);
    if (rc) return srv_api_fail(err, 400, "messages", "%s", pe.message);
    if (continue_final) cut_after_last_content(rendered, &len, messages);
    if (pdl_tokenize_ex(c->model, rendered, len, PDL_TOK_PARSE_SPECIAL, ids, n_ids, &pe)) {
        free(rendered);
        return srv_api_fail(err, 400, "messages", "%s", pe.message);
    }
    *text = rendered;
    *text_len = len;
    return 0;
}
