/*
 * server_internal.h - the server's shared state, for server.c (lifecycle)
 * and http.c (requests). Not for other modules.
 */
#ifndef PDL_SERVER_INTERNAL_H
#define PDL_SERVER_INTERNAL_H

#include <pthread.h>
#include <semaphore.h>
#include <stdbool.h>
#include <stdint.h>

#include "server/api_parse.h"
#include "server/chat.h"
#include "server/engine_loop.h"
#include "server/metrics.h"
#include "server/server.h"

struct MHD_Daemon;

struct srv_server {
    /* fixed at start */
    char *model_path, *model_name, *api_key, *chat_template_path;
    char *replica_name;          /* X-Pagedlm-Replica, system_fingerprint */
    size_t max_body;
    double grace_s;
    unsigned int keep_alive_s;   /* idle connections close after this long */
    int test_load_delay_ms;      /* the loader waits this long first (tests of the loading state) */
    char *draft_model_path;      /* loaded beside the model; NULL = none */
    char *mmproj_path;           /* the vision model's file; NULL = the model's own folder, if it has one */
    char *allowed_media_path;    /* file:// image URLs under it; NULL = none */
    bool log_requests;
    bool auto_tool_choice;       /* --enable-auto-tool-choice */
    bool tool_parser_set;        /* --tool-call-parser given */
    gram_tool_format tool_format;
    gram_limits grammar_limits;  /* every request's grammar compiles within these */
    const struct reasoning_format *reasoning; /* --reasoning-parser, or NULL */
    bool harmony;                 /* --reasoning-parser openai: the harmony format (gram_harmony.c) */
    bool embed_task;              /* --task embed or --pooling: /v1/embeddings served whatever the model says */
    bool rerank_task;             /* --task rerank: /v1/rerank and /v1/score served */
    pdl_pooling pooling;          /* --pooling; NONE = the model's declared one (LAST under --task embed) */
    int reasoning_budget;        /* --reasoning-budget (< 0: none) */
    bool enable_lora;            /* --enable-lora */
    char **lora_modules;         /* [n_lora_modules] --lora-modules, loaded with the model */
    int n_lora_modules, max_loras, max_lora_rank;
    pdl_model_options model_opts;
    pdl_engine_options engine_opts;
    pdl_log_fn log;
    void *log_user;
    long long created;           /* seconds since the epoch, for /v1/models */
    struct MHD_Daemon *daemon;
    int port;
    srv_metrics *metrics;

    pthread_t loader;
    bool loader_started;

    /* guarded by mu */
    pthread_mutex_t mu;
    pthread_cond_t requests_cv;  /* active_requests went down */
    int active_requests;         /* HTTP requests begun and not completed (responses still being sent) */
    srv_state state;
    char load_error[PDL_ERROR_MAX];
    uint64_t rng;                /* ids and default seeds */

    /* set once by the loader before state becomes SRV_READY; read-only after */
    pdl_model *model;
    pdl_model *draft;            /* speculative decoding's draft model, or NULL */
    srv_engine *engine;
    srv_chat *chat;
    pdl_vision *vision;          /* images in chat requests; NULL = text only */
    struct srv_loras *loras;     /* the named LoRA adapters (--enable-lora), or NULL */
    srv_parse_ctx parse;

    /* structured output: the model's grammar vocabulary, made on first use
     * (about 0.1 s for a 150k vocabulary) under grammar_mu */
    pthread_mutex_t grammar_mu;
    sem_t grammar_turns;         /* request grammars that may compile now (srv_parse_ctx.grammar_turn_take) */
    bool grammar_turns_made;
    gram_vocab *grammar_vocab;
    bool grammar_vocab_tried;
    char grammar_vocab_error[PDL_ERROR_MAX];
};

void srv_log(srv_server *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The state, read under the lock. */
srv_state srv_state_now(srv_server *s);
/* An HTTP request begins / has been answered completely (http.c). */
void srv_request_begin(srv_server *s);
void srv_request_end(srv_server *s);
/* A fresh random 64-bit value (request ids, seeds). */
uint64_t srv_random(srv_server *s);

/* http.c: the MHD daemon on addr (struct sockaddr *), serving s. */
struct MHD_Daemon *srv_http_start(srv_server *s, const void *addr, bool ipv6, pdl_error *err);

#endif
