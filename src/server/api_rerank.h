/*
 * api_rerank.h - POST /v1/rerank and /v1/score for a yes/no reranker
 * (Qwen3-Reranker), `serve --task rerank`: requests parsed into one
 * judging prompt per (query, document) pair, and the answer built from the
 * pairs' last hidden states. See api_rerank.c.
 */
#ifndef PDL_SERVER_API_RERANK_H
#define PDL_SERVER_API_RERANK_H

#include <jansson.h>
#include <stddef.h>

#include "server/api_format.h"
#include "server/api_parse.h"

/* Jina's / Cohere's rerank body: query, documents (strings or {"text"}),
 * top_n, return_documents; and "instruction" (Qwen3-Reranker's <Instruct>,
 * default its model card's). 400 when the server does not rerank. */
int srv_parse_rerank(const srv_parse_ctx *c, const json_t *body, srv_gen_request *r, srv_api_error *err);
/* vLLM's score body: text_1 (one, or one per text_2) and text_2. */
int srv_parse_score(const srv_parse_ctx *c, const json_t *body, srv_gen_request *r, srv_api_error *err);

/* The answer once every pair is done: rerank's results (best first, top_n,
 * with the documents unless return_documents was false) or score's data
 * (in order); malloc'ed JSON, NULL when out of memory. */
char *srv_rerank_body(const srv_response *resp, size_t *len);

#endif
