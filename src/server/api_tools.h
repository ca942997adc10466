/*
 * api_tools.h - one chat choice's generated text read for tool calls, in the
 * response shapes OpenAI uses: message.tool_calls (whole responses) and
 * delta.tool_calls chunks (streams).
 *
 * What it is for: api_format.c, when a request's tool_choice makes the
 * output a place for calls (srv_gen_request.parse_tools). The text goes
 * through the model format's parser (src/grammar, gram_tool_parser) as it is
 * generated; whatever the pieces, the concatenated deltas equal the whole
 * response's content and arguments. What it is not for: forcing calls (a
 * grammar does that, api_structured.c) or HTTP.
 */
#ifndef PDL_SERVER_API_TOOLS_H
#define PDL_SERVER_API_TOOLS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "server/api_parse.h"

typedef struct srv_tool_output srv_tool_output;

/* For one choice of req; id_seed makes the call ids. NULL when out of memory. */
srv_tool_output *srv_tool_output_new(const srv_gen_request *req, uint64_t id_seed);
void srv_tool_output_free(srv_tool_output *t);

/* One token's text (token: its id, for formats whose markers are control
 * tokens the text leaves out, e.g. Mistral's [TOOL_CALLS]: such a token is
 * read as its own text, gram_tool_format_markers). Each delta it
 * produces is appended to deltas (when not NULL) as a chat delta object:
 * {"content"} or {"tool_calls": [{"index", "id", "type", "function": {"name",
 * "arguments"}}]} then {"tool_calls": [{"index", "function": {"arguments"}}]}.
 * -1 when out of memory. */
int srv_tool_output_feed(srv_tool_output *t, int32_t token, const char *text, size_t len, json_t *deltas);
/* The end of the text: what was held back comes out (into deltas). */
int srv_tool_output_finish(srv_tool_output *t, json_t *deltas);

/* The finish_reason of the choice given the engine's: "tool_calls" when
 * the engine stopped ("stop") after complete calls and the request's
 * tool_choice ("auto", "required") says so; otherwise the engine's
 * ("length" when max_tokens cut the output, calls or not). */
const char *srv_tool_output_finish_reason(const srv_tool_output *t, const char *engine_reason);
/* Whole responses (after srv_tool_output_finish): sets msg's "content"
 * (null when there is none besides calls, as OpenAI) and "tool_calls", the
 * complete calls only: a call the output was cut inside is dropped (its
 * arguments are not JSON), and never comes back as content. A stream has
 * sent such a call's start already; its finish_reason "length" says it was
 * cut. */
void srv_tool_output_message(const srv_tool_output *t, json_t *msg);

#endif
