/*
 * engine_loop.h - the engine thread and the calls HTTP threads hand it.
 *
 * What it is for: pdl_engine is not thread-safe, so one thread owns it. HTTP
 * threads submit a call (one HTTP request: its prompts and parameters) or ask
 * for one to be cancelled through a command queue; the engine thread adds the
 * prompts as engine requests, steps the engine while anything is active, and
 * routes every event back to its call's own queue, waking the HTTP thread
 * waiting on it. A cancelled call is aborted in the engine, which frees its
 * KV blocks at once.
 * What it is not for: parsing or formatting (api_parse.c, api_format.c).
 *
 * Lifetime: a call is reference-counted. The submitter holds one reference
 * (srv_call_release when done with it); the engine holds one while any of its
 * prompts is in the engine.
 */
#ifndef PDL_SERVER_ENGINE_LOOP_H
#define PDL_SERVER_ENGINE_LOOP_H

#include <stdbool.h>
#include <stdint.h>

#include "pagedlm.h"
#include "server/api_parse.h"
#include "server/metrics.h"

/* One engine event, copied out of the engine for the HTTP thread. */
typedef struct srv_event {
    struct srv_event *next;
    pdl_event_kind kind;
    int prompt;                /* which prompt of the call */
    int index;                 /* which of that prompt's n sequences */
    int32_t token;
    int position;
    float logprob;
    int n_top;
    pdl_logprob *top;          /* [n_top] owned */
    char *text;                /* owned, NUL-terminated ("" when none); may hold NUL bytes */
    size_t text_len;           /* bytes of text */
    const char *finish_reason; /* FINISHED: "stop", "length", "abort" (static) */
    char *stop_string;         /* FINISHED by a stop string: it (owned); else NULL */
    int32_t stop_token;        /* FINISHED by a stop token: its id; else -1 */
    int cached_tokens;         /* FINISHED: prompt tokens from the prefix cache */
    float *embedding;          /* EMBEDDING: [n_embedding] owned */
    int n_embedding;
} srv_event;

void srv_events_free(srv_event *list);

typedef enum srv_call_state {
    SRV_CALL_QUEUED = 0, /* submitted; the engine thread has not added it yet */
    SRV_CALL_RUNNING,    /* in the engine: events flow */
    SRV_CALL_FAILED,     /* refused (error filled); no event will come */
    SRV_CALL_DONE,       /* every sequence finished; the queue holds the last events */
} srv_call_state;

typedef struct srv_call srv_call;

/* A call over req, whose contents it takes (req is left zeroed). */
srv_call *srv_call_new(srv_gen_request *req);
const srv_gen_request *srv_call_request(const srv_call *c);
void srv_call_release(srv_call *c);

/*
 * Waits up to timeout_ms for events or a state change; moves the queued
 * events (oldest first) to *events (the caller frees them with
 * srv_events_free) and returns the state. For SRV_CALL_FAILED, *err gets the
 * reason.
 */
srv_call_state srv_call_wait(srv_call *c, int timeout_ms, srv_event **events, srv_api_error *err);

typedef struct srv_engine srv_engine;

/* Creates the engine over model (which must outlive it) and starts its thread. */
int srv_engine_start(srv_engine **out, pdl_model *model, const pdl_engine_options *opts, srv_metrics *metrics,
                     pdl_error *err);
/* The longest prompt + output a request may have (pdl_engine_max_model_len). */
int srv_engine_max_model_len(const srv_engine *e);
/* Queues the call for the engine (which takes its own reference). */
void srv_engine_submit(srv_engine *e, srv_call *c);
/* Ends the call's requests in the engine if they are still there (a client
 * went away); its blocks are freed. Safe at any time, from any thread. */
void srv_engine_cancel(srv_engine *e, srv_call *c);
/* Refuses new calls (503), waits up to grace_s seconds for the calls in
 * flight to finish, then aborts the rest. The thread keeps running. */
void srv_engine_drain(srv_engine *e, double grace_s);
/* Stops the thread (aborting anything left) and frees the engine. */
void srv_engine_free(srv_engine *e);

#endif
