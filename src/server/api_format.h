/*
 * api_format.h - response bodies and Server-Sent Events exactly as OpenAI
 * and vLLM send them.
 *
 * What it is for: turning engine events into a completion / chat completion
 * object (non-streaming) or into `data: {...}\n\n` chunks ending with
 * `data: [DONE]\n\n` (streaming, with stream_options.include_usage), logprobs
 * in both APIs' shapes (completions: tokens/token_logprobs/top_logprobs/
 * text_offset; chat: content[{token, logprob, bytes, top_logprobs}]), vLLM's
 * prompt_logprobs, error bodies, /v1/models, /tokenize and /detokenize;
 * llama-server's /infill result ({"content", "stop", "tokens_predicted",
 * "timings", ...}, streamed as partial results then the final one, without
 * [DONE]).
 * What it is not for: HTTP or deciding when to send (http.c).
 *
 * Choice i of prompt p has index p * n + i, as vLLM numbers them.
 */
#ifndef PDL_SERVER_API_FORMAT_H
#define PDL_SERVER_API_FORMAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pagedlm.h"
#include "server/api_parse.h"
#include "server/engine_loop.h"
#include "server/sbuf.h"

/* A JSON string of n bytes (NUL bytes kept); bytes that are not UTF-8
 * become U+FFFD. Never NULL ("" when out of memory). */
json_t *srv_json_text(const char *s, size_t n);

/* {"error": {"message", "type", "param", "code"}} (malloc'ed). */
char *srv_error_body(const srv_api_error *e, size_t *len);

typedef struct srv_response srv_response;

/* The response under construction for req (which must outlive it). id is
 * "cmpl-..." or "chatcmpl-..."; created is seconds since the epoch;
 * fingerprint is the system_fingerprint of the object and of every chunk
 * (the replica's name; NULL = null). */
srv_response *srv_response_new(const pdl_model *model, const srv_gen_request *req, const char *model_name,
                               const char *fingerprint, const char *id, long long created);
void srv_response_free(srv_response *r);

/* Non-streaming: fold events in, then take the whole body (malloc'ed). */
void srv_response_add(srv_response *r, const srv_event *events);
char *srv_response_body(srv_response *r, size_t *len);
/* What a response holds, for bodies built elsewhere (api_rerank.c). */
const srv_gen_request *srv_response_request(const srv_response *r);
const pdl_model *srv_response_model(const srv_response *r);
const char *srv_response_id(const srv_response *r);
const char *srv_response_model_name(const srv_response *r);
int srv_response_prompt_tokens(const srv_response *r);
/* Prompt i's embedding (*n floats), NULL when it has none. */
const float *srv_response_embedding(const srv_response *r, int i, int *n);

/* Streaming: the opening chunks (chat: the assistant role per choice), the
 * chunks for a batch of events, and the end (usage chunk when asked, then
 * [DONE]). An error after the stream began is one `data: {"error": ...}`. */
void srv_response_stream_begin(srv_response *r, sbuf *out);
void srv_response_stream_events(srv_response *r, const srv_event *events, sbuf *out);
void srv_response_stream_end(srv_response *r, sbuf *out);
void srv_stream_error(const srv_api_error *e, sbuf *out);

/* GET /v1/models (one model) and GET /v1/models/{id}. */
char *srv_models_body(const char *name, const char *root, int ctx_len, long long created, bool list, size_t *len);
/* POST /tokenize: {"count", "max_model_len", "tokens", "token_strs"}. */
char *srv_tokenize_body(const pdl_model *model, const int32_t *ids, size_t n, int ctx_len, bool token_strs,
                        size_t *len);
/* POST /detokenize: {"prompt": text} (text_len bytes, NUL bytes included). */
char *srv_detokenize_body(const char *text, size_t text_len, size_t *len);

#endif
