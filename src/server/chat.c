/*
 * chat.c - placeholder until src/template/ is part of the build: no chat
 * template, so /v1/chat/completions answers 400 naming --chat-template.
 */
#include "server/chat.h"

#include "util/error.h"

#include <stdlib.h>

struct srv_chat {
    int unused;
};

int srv_chat_load(srv_chat **out, const pdl_model *model, const char *model_path, const char *template_path,
                  pdl_error *err) {
    (void)model, (void)model_path;
    *out = NULL;
    if (template_path) return pdl_fail(err, "%s: chat templates are not available in this build", template_path);
    return 0;
}

void srv_chat_free(srv_chat *c) { free(c); }

int srv_chat_prompt(void *user, const json_t *messages, const json_t *request, int32_t **ids, size_t *n_ids,
                    char **text, srv_api_error *err) {
    (void)user, (void)messages, (void)request, (void)ids, (void)n_ids, (void)text;
    return srv_api_fail(err, 400, "messages", "chat templates are not available in this build");
}
