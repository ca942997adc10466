/*
 * server.h - `pagedlm serve`: an OpenAI-compatible HTTP server over the
 * engine (what the CLI calls).
 *
 * What it is for: starting the listener at once, loading the model and the
 * chat template in the background (GET /health answers 503 until then),
 * serving the OpenAI and vLLM endpoints, naming the replica in every answer
 * (for a load balancer's routing to be seen), and stopping gracefully: no new
 * connections, in-flight requests finish (or are aborted after a grace
 * period), every thread joined and every byte freed.
 * What it is not for: signals and the command line (src/cli/cli_serve.c).
 */
#ifndef PDL_SERVER_SERVER_H
#define PDL_SERVER_SERVER_H

#include <stdbool.h>
#include <stddef.h>

#include "pagedlm.h"

#define SRV_MAX_REPLICA_NAME 128 /* bytes */

typedef struct srv_options {
    const char *model_path;
    const char *host;               /* NULL = 127.0.0.1 */
    int port;                       /* 0 = a free port (srv_port says which) */
    const char *served_model_name;  /* NULL = model_path */
    const char *replica_name;       /* X-Pagedlm-Replica and system_fingerprint; NULL = host:port (the
                                       machine's name for a wildcard host such as 0.0.0.0) */
    const char *api_key;            /* NULL = no authentication */
    const char *chat_template;      /* a Jinja file; NULL = the model's own */
    size_t max_body;                /* request bytes at most; 0 = 4 MiB */
    double shutdown_grace_s;        /* in-flight requests get this long to finish; < 0 = 0 */
    int timeout_keep_alive_s;       /* an idle connection closes after this long; 0 = 5 s (uvicorn's) */
    int test_load_delay_ms;         /* tests only: the loader waits this long first (the 503 window) */
    const char *draft_model_path;   /* speculative decoding with a draft model (engine.spec_method) */
    const char *mmproj_path;        /* the vision model of a GGUF model (llama.cpp's mmproj GGUF); a Hugging
                                       Face folder with a vision_config brings its own */
    const char *allowed_media_path; /* file:// image URLs under this folder are read; NULL = data URLs only */
    bool log_requests;              /* one log line per request */
    bool enable_auto_tool_choice;   /* tool_choice "auto" parses tool calls out of the output (vLLM's flag) */
    const char *tool_call_parser;   /* a gram_tool_format_parse name ("hermes", "qwen3_coder", ...); NULL =
                                       from the model's tokens */
    const char *reasoning_parser;   /* "qwen3" | "deepseek_r1": the thinking block apart from the answer
                                       (vLLM's --reasoning-parser); NULL = none */
    const char *task;               /* "embed": /v1/embeddings is served (vLLM's --task); "rerank": /v1/rerank and
                                       /v1/score for a yes/no reranker; NULL = as the model's files say (a
                                       declared pooling serves embeddings) */
    const char *pooling;            /* "last" | "mean" | "cls": how /v1/embeddings pools (implies --task embed);
                                       NULL = the model's declared pooling, else last */
    int reasoning_budget;           /* thinking tokens at most for requests that name none; < 0 = no limit
                                       (llama.cpp's --reasoning-budget); used with reasoning_parser only */
    double grammar_timeout_s;       /* a request's grammar (regex, schema, GBNF, forced tool call) must compile
                                       within this long; 0 = GRAM_DEFAULT_MAX_SECONDS */
    long long grammar_max_work;     /* ... and within this many steps of work; 0 = GRAM_DEFAULT_MAX_WORK */
    /* LoRA (vLLM's --enable-lora): adapters served by name (server/lora_registry.h) */
    bool enable_lora;               /* adapters may be selected, loaded and unloaded */
    const char *const *lora_modules;/* [n_lora_modules] "name=path" or {"name": .., "path": ..}, loaded with the
                                       model */
    int n_lora_modules;
    int max_loras;                  /* adapters loaded at once at most; 0 = 64 */
    int max_lora_rank;              /* the largest rank accepted; 0 = 64 */
    pdl_model_options model;
    pdl_engine_options engine;      /* .log is set by the server */
    pdl_log_fn log;                 /* NULL = no logging */
    void *log_user;
} srv_options;

typedef enum srv_state {
    SRV_LOADING = 0,
    SRV_READY,
    SRV_FAILED,   /* the model or the template did not load */
    SRV_STOPPING,
} srv_state;

typedef struct srv_server srv_server;

/* Binds host:port and starts serving; the model loads on another thread. */
int srv_start(srv_server **out, const srv_options *opts, pdl_error *err);
int srv_port(const srv_server *s);
/* 0, or -1 when name cannot be a replica name (printable ASCII, 1 to
 * SRV_MAX_REPLICA_NAME bytes, no space at either end), with why in err. */
int srv_check_replica_name(const char *name, pdl_error *err);
/* The name this replica answers with (X-Pagedlm-Replica). */
const char *srv_replica_name(const srv_server *s);
/* The state; for SRV_FAILED, err gets the reason. */
srv_state srv_get_state(srv_server *s, pdl_error *err);
/* Stops accepting, lets in-flight requests finish within the grace period,
 * aborts the rest, and frees everything. */
void srv_stop(srv_server *s);

#endif
