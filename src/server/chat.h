/*
 * chat.h - chat messages -> prompt token ids through the model's chat
 * template (or the one given with --chat-template).
 *
 * What it is for: finding and parsing the template once at load, and for each
 * request rendering it with the messages (plus add_generation_prompt,
 * bos_token, eos_token and chat_template_kwargs) and tokenizing the result
 * without adding BOS again. The template language itself lives in
 * src/template/.
 */
#ifndef PDL_SERVER_CHAT_H
#define PDL_SERVER_CHAT_H

#include <jansson.h>

#include "pagedlm.h"
#include "server/api_parse.h"

typedef struct srv_chat srv_chat;

/* template_path: a Jinja file, or NULL for the model's own template.
 * *out is NULL (and 0 returned) when the model has none. */
int srv_chat_load(srv_chat **out, const pdl_model *model, const char *model_path, const char *template_path,
                  pdl_error *err);
void srv_chat_free(srv_chat *c);

/* An srv_chat_prompt_fn (user = the srv_chat). */
int srv_chat_prompt(void *user, const json_t *messages, const json_t *request, int32_t **ids, size_t *n_ids,
                    char **text, size_t *text_len, srv_api_error *err);

#endif
