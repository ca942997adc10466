/*
 * api_adapter.h - another API served through Chat Completions: OpenAI's
 * Responses API (api_responses.c) and Anthropic's Messages API
 * (api_messages.c).
 *
 * An adapter turns its request body into a Chat Completions body, which
 * then goes the one way every chat request goes (srv_parse_chat, the
 * engine, api_format.c: reasoning, tool calls, structured output, images,
 * usage); and turns the chat answer back into its own shapes: a whole
 * response from the chat response's JSON, a stream from the chat stream's
 * chunks (each `data:` object of the chat SSE, in order, then its end).
 * Errors take the adapter's shape too. So the protocols share every check
 * and behaviour, and each adapter is about its wire format only.
 *
 * What it is not for: anything the engine would do differently for another
 * API (nothing does), HTTP (http.c routes and streams).
 */
#ifndef PDL_SERVER_API_ADAPTER_H
#define PDL_SERVER_API_ADAPTER_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "server/api_parse.h"
#include "server/sbuf.h"

typedef struct srv_adapter_ops {
    const char *name;
    /* body -> a Chat Completions body (*chat, a new reference) and the
     * adapter's per-request state (*state, freed by free_state); -1 with err
     * filled when the body is wrong. id: the response's id (unique); c: the
     * server's parse context (what the server was started with). */
    int (*to_chat)(const srv_parse_ctx *c, const json_t *body, const char *id, json_t **chat, void **state,
                   srv_api_error *err);
    /* The chat response's JSON -> the adapter's response body (malloc'ed,
     * *len bytes; NULL when out of memory). */
    char *(*whole)(void *state, const json_t *chat_response, size_t *len);
    /* Streams: the events before any chunk, one chat chunk, and the end (the
     * chat stream's [DONE]); each appends SSE text to out. */
    void (*stream_begin)(void *state, sbuf *out);
    void (*stream_chunk)(void *state, const json_t *chunk, sbuf *out);
    void (*stream_end)(void *state, sbuf *out);
    /* An error in the adapter's shape: a whole body, and a stream's event. */
    char *(*error_body)(const srv_api_error *e, size_t *len);
    void (*stream_error)(void *state, const srv_api_error *e, sbuf *out);
    void (*free_state)(void *state);
    const char *id_prefix; /* of the response's id: "resp_", "msg_" */
    /* tool_choice "auto" (the default with tools) parses tool calls whether
     * or not the server has --enable-auto-tool-choice: an API whose clients
     * cannot ask for anything else */
    bool auto_tools;
} srv_adapter_ops;

extern const srv_adapter_ops srv_responses_api; /* POST /v1/responses */
extern const srv_adapter_ops srv_messages_api;  /* POST /v1/messages */

/* POST /v1/messages/count_tokens: a Messages body (max_tokens not needed)
 * -> the Chat Completions body whose rendered prompt is counted (no
 * generation fields: nothing is compiled or checked for generating), or -1
 * with err. */
int srv_messages_count_chat(const srv_parse_ctx *c, const json_t *body, json_t **chat, srv_api_error *err);

/* The chat stream's SSE text (whole events) through the adapter into out:
 * each `data: {...}` chunk to stream_chunk, `data: [DONE]` to stream_end,
 * comment lines (keep-alives) as they are. */
void srv_adapter_transcode(const srv_adapter_ops *ad, void *state, const char *chat_sse, size_t len, sbuf *out);

/* One SSE event "event: TYPE\ndata: JSON\n\n" (o consumed). */
void srv_sse_event(sbuf *out, const char *type, json_t *o);

#endif
