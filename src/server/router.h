/*
 * router.h - several models behind one endpoint: a supervisor that runs one
 * `pagedlm serve` child process per loaded model (on 127.0.0.1 and a port the
 * child picks) and proxies each request to the child named by the request's
 * "model", streaming the child's answer through as it comes.
 *
 * What it is for: loading a model on its first request (other models'
 * requests keep flowing), stopping the least recently used idle child past
 * --max-loaded-models and any child idle for --sleep-idle-seconds, explicit
 * POST /models/load and /models/unload (llama-server's router names), the
 * model list with each model's state, the router's own /health and /metrics,
 * and stopping every child (SIGTERM, then SIGKILL) when it stops. A child
 * that dies is marked unloaded and started again by the next request; one
 * model's crash never takes another's process.
 * What it is not for: which models exist and the LRU choice
 * (router_config.c), the command line (src/cli/cli_serve.c), serving a model
 * (server.c, in each child).
 */
#ifndef PDL_SERVER_ROUTER_H
#define PDL_SERVER_ROUTER_H

#include <stddef.h>

#include "pagedlm.h"
#include "server/router_config.h"

typedef struct rt_options {
    const rt_spec_list *models;  /* what the router offers (kept by the caller while it runs) */
    const char *exe;             /* the pagedlm binary that runs each child */
    char *const *common_args;    /* `serve` arguments every child gets (before its own) */
    int n_common_args;
    const char *host;            /* NULL = 127.0.0.1 */
    int port;                    /* 0 = a free port (rt_port says which) */
    const char *api_key;         /* checked by the router; the children get it too (env PAGEDLM_API_KEY) */
    int max_loaded;              /* children at most (loaded, loading or stopping); 0 = no limit */
    double sleep_idle_s;         /* a child with no request for this long is stopped; 0 = never */
    double shutdown_grace_s;     /* after SIGTERM a child gets this long (plus 2 s), then SIGKILL */
    double load_timeout_s;       /* a child must answer /health within this long; 0 = 600 s */
    size_t max_body;             /* request bytes at most; 0 = 4 MiB */
    int timeout_keep_alive_s;    /* an idle client connection closes after this long; 0 = 5 s */
    pdl_log_fn log;              /* NULL = no logging */
    void *log_user;
} rt_options;

typedef struct rt_router rt_router;

/* Binds host:port and starts the supervisor; no child starts until a
 * request (or POST /models/load) names its model. */
int rt_start(rt_router **out, const rt_options *opts, pdl_error *err);
int rt_port(const rt_router *r);
/* Stops accepting, sends SIGTERM to every child, waits for them (SIGKILL
 * after the grace period), and frees everything. */
void rt_stop(rt_router *r);

#endif
