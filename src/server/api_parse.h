/*
 * api_parse.h - OpenAI / vLLM request bodies -> validated generation
 * requests, or an OpenAI-style error (HTTP status, message, type, param,
 * code).
 *
 * What it is for: every check the server makes on what a client sent, before
 * anything reaches the engine: JSON syntax and size, field types, ranges,
 * the model name, prompt forms (text, list of texts, token ids, lists of
 * token ids), chat messages, and the context length. Pure functions of the
 * body and a parse context, so they are unit-tested without HTTP
 * (tests/test_server_parse.c).
 * What it is not for: HTTP (http.c), running requests (engine_loop.c),
 * writing responses (api_format.c). Fields nobody knows are ignored, as vLLM
 * does (`user`, `metadata` and `prompt_cache_key` are checked for type and
 * ignored); known fields the engine cannot honour (best_of > n, ...) are
 * refused rather than silently dropped. Structured output and tools:
 * api_structured.c. A suffix (completions) and llama-server's /infill lay
 * the prompt out for fill-in-the-middle (pdl_fim_prompt).
 */
#ifndef PDL_SERVER_API_PARSE_H
#define PDL_SERVER_API_PARSE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "grammar/grammar.h"
#include "pagedlm.h"

#define SRV_MAX_BODY_DEFAULT ((size_t)4 << 20) /* 4 MiB */
#define SRV_MAX_N 64                           /* sequences per prompt (the engine's limit) */
#define SRV_MAX_SEQS 256                       /* prompts x n per HTTP request */
#define SRV_MAX_LOGPROBS 20                    /* the engine's limit */
#define SRV_MAX_STOP 64                        /* stop strings (and stop token ids) per request */
#define SRV_MAX_STOP_LEN 4096                  /* bytes per stop string */
#define SRV_MAX_LOGIT_BIAS 4096                /* logit_bias entries per request */
#define SRV_MAX_PROMPT_LOGPROBS (1 << 18)      /* prompt logprob entries per request: sum over prompts of
                                                  tokens x (top-N + 1); the response holds each */

/* What a client did wrong (or what went wrong for it), as an OpenAI error
 * body {"error": {"message", "type", "param", "code"}} with an HTTP status. */
typedef struct srv_api_error {
    int status;        /* 400, 401, 404, 405, 413, 500, 503 */
    const char *type;  /* "invalid_request_error", "server_error", ... */
    const char *code;  /* "model_not_found", "context_length_exceeded", ...; NULL = null */
    char param[64];    /* the field at fault; "" = null */
    char message[PDL_ERROR_MAX];
} srv_api_error;

/* Fills err and returns -1. */
int srv_api_fail(srv_api_error *err, int status, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* /v1/completions, /v1/chat/completions, llama-server's /infill. */
typedef enum srv_api_kind {
    SRV_API_COMPLETION = 0,
    SRV_API_CHAT,
    SRV_API_INFILL,
    SRV_API_EMBEDDINGS,
    SRV_API_RERANK,             /* /v1/rerank (api_rerank.c) */
    SRV_API_SCORE,              /* /v1/score */
} srv_api_kind;

/* One prompt of a request. */
typedef struct srv_prompt {
    int32_t *ids;
    size_t n_ids;
    char *text;      /* the prompt as text: as given, rendered (chat), or NULL when given as ids */
    size_t text_len; /* bytes of text (it may hold NUL bytes) */
} srv_prompt;

/* A validated /v1/completions or /v1/chat/completions request. Every prompt
 * becomes one engine request with `params` (n sequences each). */
typedef struct srv_gen_request {
    srv_api_kind kind;
    srv_prompt *prompts;
    int n_prompts;
    pdl_request_params params; /* stop / stop_ids point into the owned arrays below */
    char **stop;
    int32_t *stop_ids;
    pdl_logit_bias *logit_bias; /* params.sampling.logit_bias points here */
    char *cache_salt;          /* params.cache_salt points here */
    bool seed_given;           /* else the server picks a random seed */
    bool stream;
    bool include_usage;        /* stream_options.include_usage */
    bool continuous_usage;     /* stream_options.continuous_usage_stats (vLLM) */
    bool echo;                 /* completions: the prompt is part of the text */
    bool discard_output;       /* echo with max_tokens 0: one token is generated, then dropped */
    int logprobs;              /* top-N per generated token; -1 = none (chat: top_logprobs when logprobs) */
    int prompt_logprobs;       /* the prompt_logprobs field (vLLM): top-N per prompt token; -1 = none */
    /* fill-in-the-middle (completions with a suffix, /infill) */
    bool fim;                  /* the prompts are laid out around a hole (pdl_fim_prompt) */
    bool fim_truncated;        /* /infill: the prompt was cut to fit (its "truncated") */
    bool return_tokens;        /* /infill: the generated ids in "tokens" */
    /* structured output and tools (api_structured.c) */
    gram_grammar *grammar;     /* the compiled constraint (params.grammar), or NULL */
    bool parse_tools;          /* the output is parsed for tool calls in tool_format */
    gram_tool_format tool_format;
    bool tool_calls_finish;    /* finish_reason "tool_calls" when calls came out ("auto", "required") */
    bool tool_parallel;        /* "required": one or more calls (parallel_tool_calls) */
    char *tool_name;           /* a named tool_choice, or NULL */
    char *tools_json;          /* the request's "tools" (compact JSON) when parse_tools in a format that
                                  carries arguments as text and types them by it (qwen3_coder, glm45) */
    const gram_vocab *tool_vocab; /* parse_tools: the model's grammar vocabulary (control tokens' text) */
    /* reasoning (chat, --reasoning-parser): the thinking block apart from the answer */
    const struct reasoning_format *reasoning; /* NULL: the text is all content */
    bool reasoning_starts_inside; /* the rendered prompt opened the block */
    bool include_reasoning;    /* message.reasoning is returned (vLLM's include_reasoning, default true) */
    bool harmony;              /* chat with a harmony model (gpt-oss): the output's messages are read by
                                  tool_format GRAM_TOOLS_OPENAI, tools or not (reasoning, content, calls) */
    bool embed_base64;         /* embeddings: encoding_format "base64" (little-endian float32) */
    int embed_dims;            /* embeddings: "dimensions" (the first ones, renormalized); 0 = all */
    int32_t rerank_ids[2];     /* rerank / score: the "no" and "yes" tokens whose logits make the score */
    int rerank_top_n;          /* rerank: results returned */
    json_t *rerank_docs;       /* rerank: the documents' texts returned with the results (owned), or NULL */
    pdl_image **images;        /* chat: the image_url parts' images, in order (owned) */
    pdl_mm_input *image_inputs;/* [n_images] where their rows sit in prompts[0] (params.images points here) */
    int n_images;
} srv_gen_request;

/* The chat template step: messages -> prompt ids (and the rendered text,
 * *text_len bytes: message text may hold NUL). request is the whole body
 * (add_generation_prompt, chat_template_kwargs). Returns 0, or -1 with err
 * filled. */
typedef int (*srv_chat_prompt_fn)(void *user, const json_t *messages, const json_t *request, int32_t **ids,
                                  size_t *n_ids, char **text, size_t *text_len, srv_api_error *err);

typedef struct srv_parse_ctx {
    const pdl_model *model;        /* tokenizer (text prompts, /tokenize, /detokenize) */
    const char *model_name;        /* the name clients must use (or leave out) */
    int ctx_len;                   /* context length in effect */
    int vocab;
    srv_chat_prompt_fn chat_prompt; /* NULL: the model has no chat template */
    void *chat_user;
    /* structured output: the model's grammar vocabulary, made on first use
     * (NULL with *err when it cannot be); NULL fn = not available */
    const gram_vocab *(*grammar_vocab)(void *user, pdl_error *err);
    void *grammar_user;
    bool auto_tool_choice;         /* --enable-auto-tool-choice */
    bool tool_parser_set;          /* --tool-call-parser NAME given: tool_format */
    gram_tool_format tool_format;
    /* what compiling a request's grammar may cost (grammar.h); the server
     * sets .cancelled per request: the client is gone */
    gram_limits grammar_limits;
    /* A turn to compile: the server lets few grammars compile at once, so
     * that a flood of them holds a bounded memory and few cores. Waits for
     * a turn and returns SRV_TURN_OK, or SRV_TURN_CANCELLED (lim->cancelled
     * said so while waiting), or SRV_TURN_BUSY (no turn within the grammar
     * time limit). NULL: no limit. */
    int (*grammar_turn_take)(void *user, const gram_limits *lim);
    void (*grammar_turn_give)(void *user);
    void *grammar_turn_user;
    const struct reasoning_format *reasoning; /* --reasoning-parser (src/engine/reasoning.h); NULL = none */
    bool harmony;                  /* the model writes the harmony format (--reasoning-parser or
                                      --tool-call-parser openai, or its <|channel|> token) */
    int reasoning_budget;          /* --reasoning-budget: thinking tokens at most when a request names none
                                      (thinking_token_budget); < 0 = no limit */
    pdl_vision *vision;            /* image_url content parts need it; NULL: they are refused */
    const char *allowed_media_path;/* file:// image URLs under this folder are read (vLLM's
                                      --allowed-local-media-path); NULL: only data URLs */
    pdl_pooling pooling;           /* /v1/embeddings: how the hidden states are pooled; NONE = not served */
    bool pool_normalize;           /* the embeddings are L2-normalised */
    int hidden;                    /* the model's hidden size: the embeddings' dimensions */
    bool matryoshka;               /* the model may be cut to fewer dimensions ("dimensions") */
    bool encoder;                  /* an encoder (BERT): embeddings only, every generating endpoint refused */
    bool rerank;                   /* /v1/rerank and /v1/score served (--task rerank) */
    int32_t rerank_no, rerank_yes; /* ... with the scores from these two tokens' logits */
    int batch_tokens;              /* rows per engine step (0 = 2048): /infill fits prefix and suffix
                                      in it, as llama-server in its --batch-size */
    /* other names "model" may take (LoRA adapters, server/lora_registry.h); NULL = none */
    bool (*model_known)(void *user, const char *name);
    void *model_known_user;
} srv_parse_ctx;

enum { SRV_TURN_OK = 0, SRV_TURN_CANCELLED, SRV_TURN_BUSY };

/* 413 when a body of len bytes exceeds limit (0 = the default 4 MiB). */
int srv_check_body_size(size_t len, size_t limit, srv_api_error *err);

/* The body as a JSON object: 413 beyond `limit` bytes, 400 for malformed
 * JSON (with line and column), a non-object, or NUL (\u0000) in a string
 * that is not the text of a prompt or a message (srv_check_nul). */
int srv_parse_json(const char *body, size_t len, size_t limit, json_t **out, srv_api_error *err);
/* A body parsed with JSON_ALLOW_NUL: 400 naming the first string that
 * holds NUL outside the text a model reads ("prompt", and a message's
 * "content" or its parts' "text"; they are carried with their length, as
 * generated text with NUL is carried back out as \u0000). */
int srv_check_nul(const json_t *body, srv_api_error *err);

/* The "model" field: absent/null = the served model (or a name
 * model_known knows); a string naming another model: 404 model_not_found;
 * another type: 400. */
int srv_check_model(const srv_parse_ctx *c, const json_t *body, srv_api_error *err);

int srv_parse_completion(const srv_parse_ctx *c, const json_t *body, srv_gen_request *out, srv_api_error *err);
/* OpenAI's POST /v1/embeddings: input (a string, strings, token ids or
 * lists of them: one pooled embedding each, params.pooling from the
 * server), encoding_format, dimensions; 400 when the server serves none. */
int srv_parse_embeddings(const srv_parse_ctx *c, const json_t *body, srv_gen_request *out, srv_api_error *err);
/* llama-server's POST /infill: input_prefix, input_suffix, input_extra,
 * prompt and /completion's generation fields (n_predict, temperature,
 * top_k, ...), with llama-server's defaults. */
int srv_parse_infill(const srv_parse_ctx *c, const json_t *body, srv_gen_request *out, srv_api_error *err);
int srv_parse_chat(const srv_parse_ctx *c, const json_t *body, srv_gen_request *out, srv_api_error *err);
void srv_gen_request_free(srv_gen_request *r);

/* The structured-output fields (response_format, structured_outputs,
 * guided_*, grammar, json_schema) and, for chat, tools / tool_choice /
 * parallel_tool_calls: compiles the one constraint into r->grammar and sets
 * the tool-call fields of r. 400 naming the field for what is wrong
 * (api_structured.c). */
int srv_parse_structured(const srv_parse_ctx *c, const json_t *body, srv_gen_request *r, srv_api_error *err);

/* POST /tokenize (vLLM): {"prompt": text, "add_special_tokens": true} or
 * {"messages": [...], "add_generation_prompt": true}. */
typedef struct srv_tokenize_request {
    int32_t *ids;
    size_t n_ids;
    bool return_token_strs;
} srv_tokenize_request;
int srv_parse_tokenize(const srv_parse_ctx *c, const json_t *body, srv_tokenize_request *out, srv_api_error *err);

/* The prompt a chat body renders to, counted: its messages (image parts
 * too, as the rows they take), tools and chat_template_kwargs through the
 * template, as srv_parse_chat renders them; nothing else is parsed, and no
 * context length applies (a client counts to learn whether it fits).
 * Anthropic's /v1/messages/count_tokens. */
int srv_count_chat_prompt(const srv_parse_ctx *c, const json_t *body, size_t *n_tokens, srv_api_error *err);

/* POST /detokenize (vLLM): {"tokens": [ids]} -> ids checked against the vocabulary. */
int srv_parse_detokenize(const srv_parse_ctx *c, const json_t *body, int32_t **ids, size_t *n_ids,
                         srv_api_error *err);

#endif
