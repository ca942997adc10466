/*
 * api_rerank.c - rerank and score for a yes/no reranker such as
 * Qwen3-Reranker (`serve --task rerank`): POST /v1/rerank (the Jina /
 * Cohere shape llama-server and vLLM serve) and POST /v1/score (vLLM's).
 *
 * Each (query, document) pair becomes one prompt in the model's judging
 * format (Qwen3-Reranker's, as its model card writes it), run as an
 * embedding request that keeps the last row's final-normed hidden state
 * (no normalization, no logits); the score is the model's probability of
 * "yes" against "no" there, sigmoid(logit(yes) - logit(no)), from the LM
 * head's two rows (pdl_model_token_logits). What it is not for: the
 * engine's pooling (engine_step.c) or embeddings' output (api_format.c).
 */
#define _POSIX_C_SOURCE 200809L
#include "server/api_rerank.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "server/sbuf.h"

/* Qwen3-Reranker's format (its model card's format_instruction, prefix and
 * suffix), with the card's default instruction. */
static const char JUDGE_PREFIX[] =
    "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the Instruct "
    "provided. Note that the answer can only be \"yes\" or \"no\".<|im_end|>\n<|im_start|>user\n";
static const char JUDGE_SUFFIX[] = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n";
static const char DEFAULT_INSTRUCTION[] = "Given a web search query, retrieve relevant passages that answer the query";

/* The text of a document: a string, or an object with "text" (Cohere's and
 * Jina's object form). NULL when it is neither. */
static const json_t *doc_text(const json_t *d) {
    if (json_is_string(d)) return d;
    const json_t *t = json_is_object(d) ? json_object_get(d, "text") : NULL;
    return json_is_string(t) ? t : NULL;
}

/* One judging prompt for (query, doc) as the next prompt of r. */
static int add_pair(const srv_parse_ctx *c, srv_gen_request *r, const char *instruction, const json_t *query,
                    const json_t *doc, const char *param, srv_api_error *err) {
    srv_prompt *grown = realloc(r->prompts, (size_t)(r->n_prompts + 1) * sizeof *grown);
    if (!grown) return srv_api_fail(err, 500, NULL, "out of memory");
    r->prompts = grown;
    srv_prompt *sp = &r->prompts[r->n_prompts++];
    memset(sp, 0, sizeof *sp);
    sbuf b = {0};
    sbuf_puts(&b, JUDGE_PREFIX);
    sbuf_printf(&b, "<Instruct>: %s\n<Query>: ", instruction);
    sbuf_append(&b, json_string_value(query), json_string_length(query));
    sbuf_puts(&b, "\n<Document>: ");
    sbuf_append(&b, json_string_value(doc), json_string_length(doc));
    sbuf_puts(&b, JUDGE_SUFFIX);
    size_t len;
    char *text = sbuf_take(&b, &len);
    if (!text) return srv_api_fail(err, 500, NULL, "out of memory");
    pdl_error pe;
    int rc = pdl_tokenize_ex(c->model, text, len, PDL_TOK_PARSE_SPECIAL, &sp->ids, &sp->n_ids, &pe);
    free(text);
    if (rc) return srv_api_fail(err, 400, param, "%s", pe.message);
    if (sp->n_ids + 1 > (size_t)c->ctx_len) {
        srv_api_fail(err, 400, param, "This model's maximum context length is %d tokens. However, a query and document "
                     "pair takes %zu tokens. Please reduce the length of the input.", c->ctx_len, sp->n_ids);
        err->code = "context_length_exceeded";
        return -1;
    }
    return 0;
}

/* What both endpoints share: the model, the task, the instruction. */
static int begin(const srv_parse_ctx *c, const json_t *body, srv_api_kind kind, srv_gen_request *r,
                 const char **instruction, srv_api_error *err) {
    memset(r, 0, sizeof *r);
    r->kind = kind;
    r->logprobs = r->prompt_logprobs = -1;
    r->params.logprobs = r->params.prompt_logprobs = -1;
    if (srv_check_model(c, body, err)) return -1;
    if (!c->rerank)
        return srv_api_fail(err, 400, "model", "this server does not rerank (start it with --task rerank, for a yes/no "
                            "reranker such as Qwen3-Reranker)");
    const json_t *ins = json_object_get(body, "instruction");
    if (ins && !json_is_null(ins) && !json_is_string(ins))
        return srv_api_fail(err, 400, "instruction", "'instruction' must be a string");
    *instruction = json_is_string(ins) ? json_string_value(ins) : DEFAULT_INSTRUCTION;
    r->rerank_ids[0] = c->rerank_no, r->rerank_ids[1] = c->rerank_yes;
    r->params.n = 1;
    r->params.pooling = PDL_POOLING_LAST;
    r->params.normalize = false;
    r->params.max_tokens = 1;
    return 0;
}

int srv_parse_rerank(const srv_parse_ctx *c, const json_t *body, srv_gen_request *r, srv_api_error *err) {
    const char *instruction;
    if (begin(c, body, SRV_API_RERANK, r, &instruction, err)) return -1;
    const json_t *query = json_object_get(body, "query"), *docs = json_object_get(body, "documents");
    if (!json_is_string(query)) return srv_api_fail(err, 400, "query", "'query' must be a string");
    if (!json_is_array(docs) || json_array_size(docs) == 0)
        return srv_api_fail(err, 400, "documents", "'documents' must be a non-empty list of strings");
    if (json_array_size(docs) > SRV_MAX_SEQS)
        return srv_api_fail(err, 400, "documents", "'documents' holds %zu documents; at most %d are allowed",
                            json_array_size(docs), SRV_MAX_SEQS);
    long long top_n = (long long)json_array_size(docs);
    const json_t *tn = json_object_get(body, "top_n");
    if (tn && !json_is_null(tn)) {
        if (!json_is_integer(tn) || json_integer_value(tn) < 1)
            return srv_api_fail(err, 400, "top_n", "'top_n' must be a positive integer");
        if (json_integer_value(tn) < top_n) top_n = json_integer_value(tn);
    }
    r->rerank_top_n = (int)top_n;
    const json_t *rd = json_object_get(body, "return_documents");
    if (rd && !json_is_null(rd) && !json_is_boolean(rd))
        return srv_api_fail(err, 400, "return_documents", "'return_documents' must be a boolean");
    r->rerank_docs = rd && json_is_false(rd) ? NULL : json_array();
    size_t i;
    const json_t *d;
    json_array_foreach(docs, i, d) {
        const json_t *text = doc_text(d);
        if (!text)
            return srv_api_fail(err, 400, "documents", "'documents[%zu]' must be a string or {\"text\": string}", i);
        if (r->rerank_docs) json_array_append(r->rerank_docs, (json_t *)text);
        if (add_pair(c, r, instruction, query, text, "documents", err)) return -1;
    }
    return 0;
}

/* text_1 / text_2 of /v1/score: a string or a non-empty list of strings. */
static int texts(const json_t *body, const char *name, const json_t **out, size_t *n, srv_api_error *err) {
    const json_t *v = json_object_get(body, name);
    *out = v;
    if (json_is_string(v)) {
        *n = 1;
        return 0;
    }
    if (!json_is_array(v) || json_array_size(v) == 0)
        return srv_api_fail(err, 400, name, "'%s' must be a string or a non-empty list of strings", name);
    for (size_t i = 0; i < json_array_size(v); i++)
        if (!json_is_string(json_array_get(v, i)))
            return srv_api_fail(err, 400, name, "'%s[%zu]' must be a string", name, i);
    *n = json_array_size(v);
    return 0;
}

int srv_parse_score(const srv_parse_ctx *c, const json_t *body, srv_gen_request *r, srv_api_error *err) {
    const char *instruction;
    if (begin(c, body, SRV_API_SCORE, r, &instruction, err)) return -1;
    const json_t *t1, *t2;
    size_t n1, n2;
    if (texts(body, "text_1", &t1, &n1, err) || texts(body, "text_2", &t2, &n2, err)) return -1;
    /* vLLM's pairing: one text_1 against each text_2, or pair by pair */
    if (n1 != 1 && n1 != n2)
        return srv_api_fail(err, 400, "text_1", "'text_1' holds %zu texts and 'text_2' %zu: give one text_1, or as "
                            "many as text_2", n1, n2);
    if (n2 > SRV_MAX_SEQS)
        return srv_api_fail(err, 400, "text_2", "'text_2' holds %zu texts; at most %d are allowed", n2, SRV_MAX_SEQS);
    for (size_t i = 0; i < n2; i++) {
        const json_t *q = json_is_string(t1) ? t1 : json_array_get(t1, n1 == 1 ? 0 : i);
        const json_t *d = json_is_string(t2) ? t2 : json_array_get(t2, i);
        if (add_pair(c, r, instruction, q, d, "text_2", err)) return -1;
    }
    return 0;
}

/* The score of one pair from its last row's final-normed hidden state. */
static double pair_score(const pdl_model *m, const srv_gen_request *r, const float *h) {
    float lg[2];
    pdl_error pe;
    if (!h || pdl_model_token_logits(m, h, r->rerank_ids, 2, lg, &pe)) return NAN;
    return 1.0 / (1.0 + exp(-((double)lg[1] - lg[0])));
}

typedef struct ranked {
    int index;
    double score;
} ranked;

static int by_score(const void *a, const void *b) {
    const ranked *x = a, *y = b;
    if (x->score != y->score) return x->score < y->score ? 1 : -1;
    return x->index - y->index; /* ties keep the documents' order */
}

char *srv_rerank_body(const srv_response *resp, size_t *len) {
    const srv_gen_request *r = srv_response_request(resp);
    int n = r->n_prompts;
    ranked *rk = malloc((size_t)(n ? n : 1) * sizeof *rk);
    if (!rk) return NULL;
    for (int i = 0; i < n; i++) {
        int dim;
        rk[i] = (ranked){i, pair_score(srv_response_model(resp), r, srv_response_embedding(resp, i, &dim))};
        if (isnan(rk[i].score)) {
            free(rk);
            return NULL;
        }
    }
    int tokens = srv_response_prompt_tokens(resp);
    json_t *o = json_pack("{s:s, s:s}", "id", srv_response_id(resp), "model", srv_response_model_name(resp));
    json_t *data = json_array();
    if (r->kind == SRV_API_RERANK) {
        qsort(rk, (size_t)n, sizeof *rk, by_score);
        for (int i = 0; i < r->rerank_top_n && i < n; i++) {
            json_t *e = json_pack("{s:i, s:f}", "index", rk[i].index, "relevance_score", rk[i].score);
            if (e && r->rerank_docs)
                json_object_set_new(e, "document",
                                    json_pack("{s:O}", "text", json_array_get(r->rerank_docs, (size_t)rk[i].index)));
            json_array_append_new(data, e);
        }
        json_object_set_new(o, "results", data);
    } else {
        json_object_set_new(o, "object", json_string("list"));
        for (int i = 0; i < n; i++)
            json_array_append_new(data, json_pack("{s:i, s:s, s:f}", "index", i, "object", "score", "score",
                                                  rk[i].score));
        json_object_set_new(o, "data", data);
    }
    json_object_set_new(o, "usage", json_pack("{s:i, s:i}", "prompt_tokens", tokens, "total_tokens", tokens));
    free(rk);
    char *out = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (out) *len = strlen(out);
    return out;
}
