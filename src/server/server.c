/*
 * server.c - the server's life: bind and listen first, load the model, the
 * chat template and the engine on a loader thread (so /health can say 503
 * meanwhile), then serve until srv_stop drains and frees everything.
 */
#define _POSIX_C_SOURCE 200809L
#include "server/server_internal.h"

#include <fcntl.h>
#include <microhttpd.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "util/error.h"

#define SEND_GRACE_S 5 /* after the grace period, seconds the last responses get to be sent */

void srv_log(srv_server *s, const char *fmt, ...) {
    if (!s->log) return;
    char line[PDL_ERROR_MAX + 256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    s->log(line, s->log_user);
}

srv_state srv_state_now(srv_server *s) {
    pthread_mutex_lock(&s->mu);
    srv_state st = s->state;
    pthread_mutex_unlock(&s->mu);
    return st;
}

srv_state srv_get_state(srv_server *s, pdl_error *err) {
    pthread_mutex_lock(&s->mu);
    srv_state st = s->state;
    if (st == SRV_FAILED && err) snprintf(err->message, sizeof err->message, "%s", s->load_error);
    pthread_mutex_unlock(&s->mu);
    return st;
}

int srv_port(const srv_server *s) { return s->port; }

void srv_request_begin(srv_server *s) {
    pthread_mutex_lock(&s->mu);
    s->active_requests++;
    pthread_mutex_unlock(&s->mu);
}

void srv_request_end(srv_server *s) {
    pthread_mutex_lock(&s->mu);
    s->active_requests--;
    pthread_cond_broadcast(&s->requests_cv);
    pthread_mutex_unlock(&s->mu);
}

/* Waits (at most until the CLOCK_MONOTONIC time `until`) for every response
 * in flight to be sent completely, so that stopping MHD cuts no stream. */
static void wait_requests_sent(srv_server *s, const struct timespec *until) {
    pthread_mutex_lock(&s->mu);
    while (s->active_requests > 0)
        if (pthread_cond_timedwait(&s->requests_cv, &s->mu, until) != 0) break;
    pthread_mutex_unlock(&s->mu);
}

uint64_t srv_random(srv_server *s) {
    pthread_mutex_lock(&s->mu);
    uint64_t z = (s->rng += 0x9e3779b97f4a7c15ull); /* splitmix64 */
    pthread_mutex_unlock(&s->mu);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t entropy(void) {
    uint64_t v = 0;
    int fd = open("/dev/urandom", O_RDONLY);
    if (fd >= 0) {
        if (read(fd, &v, sizeof v) != (ssize_t)sizeof v) v = 0;
        close(fd);
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return v ^ ((uint64_t)ts.tv_sec << 32) ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 16);
}

static void engine_log(const char *line, void *user) { srv_log(user, "%s", line); }

static void *loader_main(void *arg) {
    srv_server *s = arg;
    pdl_error err = {{0}};
    pdl_model *model = NULL;
    srv_engine *engine = NULL;
    srv_chat *chat = NULL;
    if (s->test_load_delay_ms > 0) {
        struct timespec d = {.tv_sec = s->test_load_delay_ms / 1000, .tv_nsec = (s->test_load_delay_ms % 1000) * 1000000L};
        nanosleep(&d, NULL);
    }
    int rc = pdl_model_load(&model, s->model_path, &s->model_opts, &err);
    if (rc == 0 && !pdl_model_has_tokenizer(model)) {
        pdl_error te;
        int32_t *ids = NULL;
        size_t n = 0;
        pdl_tokenize(model, "", 0, false, &ids, &n, &te);
        free(ids);
        rc = pdl_fail(&err, "%s: the server needs text in and out: %s", s->model_path, te.message);
    }
    if (rc == 0) rc = srv_chat_load(&chat, model, s->model_path, s->chat_template_path, &err);
    pdl_model *draft = NULL;
    if (rc == 0 && s->draft_model_path) {
        if (pdl_model_load(&draft, s->draft_model_path, &s->model_opts, &err)) rc = pdl_fail_prefix(&err, "draft model");
        s->engine_opts.draft_model = draft;
    }
    if (rc == 0) rc = srv_engine_start(&engine, model, &s->engine_opts, s->metrics, &err);
    pthread_mutex_lock(&s->mu);
    if (rc == 0) {
        pdl_model_info info;
        pdl_model_get_info(model, &info);
        s->model = model;
        s->draft = draft;
        s->engine = engine;
        s->chat = chat;
        s->parse = (srv_parse_ctx){.model = model,
                                   .model_name = s->model_name,
                                   .ctx_len = srv_engine_max_model_len(engine),
                                   .vocab = info.vocab,
                                   .chat_prompt = chat ? srv_chat_prompt : NULL,
                                   .chat_user = chat};
        if (s->state == SRV_LOADING) s->state = SRV_READY;
    } else {
        snprintf(s->load_error, sizeof s->load_error, "%s", err.message);
        if (s->state == SRV_LOADING) s->state = SRV_FAILED;
    }
    pthread_mutex_unlock(&s->mu);
    if (rc == 0) {
        pdl_model_info info;
        pdl_model_get_info(model, &info);
        srv_log(s, "model %s loaded (%s, %d layers, vocab %d, max model len %d); %s; serving '%s'", s->model_path,
                info.arch, info.n_layers, info.vocab, s->parse.ctx_len, chat ? "chat template ready" : "no chat template",
                s->model_name);
    } else {
        srv_chat_free(chat); /* the caller reports the error (srv_get_state) */
        pdl_model_free(draft);
        pdl_model_free(model);
    }
    return NULL;
}

static void server_free(srv_server *s) {
    pthread_cond_destroy(&s->requests_cv);
    free(s->model_path);
    free(s->model_name);
    free(s->api_key);
    free(s->chat_template_path);
    free(s->draft_model_path);
    srv_metrics_free(s->metrics);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

static char *dup_or_null(const char *v) { return v ? strdup(v) : NULL; }

int srv_start(srv_server **out, const srv_options *o, pdl_error *err) {
    *out = NULL;
    if (!o->model_path) return pdl_fail(err, "serve: no model given");
    srv_server *s = calloc(1, sizeof *s);
    if (!s) return pdl_fail(err, "serve: out of memory");
    pthread_condattr_t ca;
    bool cv_ok = pthread_condattr_init(&ca) == 0;
    if (cv_ok) {
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        cv_ok = pthread_cond_init(&s->requests_cv, &ca) == 0;
        pthread_condattr_destroy(&ca);
    }
    if (!cv_ok) {
        free(s);
        return pdl_fail(err, "serve: cannot create a condition variable");
    }
    if (pthread_mutex_init(&s->mu, NULL) != 0) {
        pthread_cond_destroy(&s->requests_cv);
        free(s);
        return pdl_fail(err, "serve: cannot create a mutex");
    }
    s->model_path = strdup(o->model_path);
    s->model_name = strdup(o->served_model_name ? o->served_model_name : o->model_path);
    s->api_key = dup_or_null(o->api_key && o->api_key[0] ? o->api_key : NULL);
    s->chat_template_path = dup_or_null(o->chat_template);
    s->max_body = o->max_body ? o->max_body : SRV_MAX_BODY_DEFAULT;
    s->grace_s = o->shutdown_grace_s > 0 ? o->shutdown_grace_s : 0;
    s->keep_alive_s = o->timeout_keep_alive_s > 0 ? (unsigned int)o->timeout_keep_alive_s : 5;
    s->test_load_delay_ms = o->test_load_delay_ms;
    s->draft_model_path = dup_or_null(o->draft_model_path);
    s->log_requests = o->log_requests;
    s->model_opts = o->model;
    s->engine_opts = o->engine;
    s->engine_opts.log = engine_log;
    s->engine_opts.log_user = s;
    s->model_opts.log = engine_log; /* the loader's notices into the server's log too */
    s->model_opts.log_user = s;
    s->log = o->log;
    s->log_user = o->log_user;
    s->created = (long long)time(NULL);
    s->rng = entropy();
    s->metrics = srv_metrics_new(s->model_name ? s->model_name : "");
    if (!s->model_path || !s->model_name || !s->metrics || (o->api_key && o->api_key[0] && !s->api_key) ||
        (o->chat_template && !s->chat_template_path)) {
        server_free(s);
        return pdl_fail(err, "serve: out of memory");
    }
    json_object_seed(0); /* before any thread builds JSON */

    const char *host = o->host ? o->host : "127.0.0.1";
    char port[16];
    snprintf(port, sizeof port, "%d", o->port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *ai = NULL;
    int gai = getaddrinfo(host, port, &hints, &ai);
    if (gai != 0 || !ai) {
        server_free(s);
        return pdl_fail(err, "serve: cannot resolve host '%s': %s", host, gai_strerror(gai));
    }
    s->daemon = srv_http_start(s, ai->ai_addr, ai->ai_family == AF_INET6, err);
    freeaddrinfo(ai);
    if (!s->daemon) {
        server_free(s);
        return pdl_fail_prefix(err, "serve: %s:%d", host, o->port);
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : o->port;
    if (pthread_create(&s->loader, NULL, loader_main, s) != 0) {
        MHD_stop_daemon(s->daemon);
        server_free(s);
        return pdl_fail(err, "serve: cannot start the loader thread");
    }
    s->loader_started = true;
    *out = s;
    return 0;
}

void srv_stop(srv_server *s) {
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    s->state = SRV_STOPPING;
    pthread_mutex_unlock(&s->mu);
    /* no new connections; the ones open get 503 for new requests */
    MHD_socket lfd = MHD_quiesce_daemon(s->daemon);
    if (lfd != MHD_INVALID_SOCKET) close(lfd);
    if (s->loader_started) pthread_join(s->loader, NULL);
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += (time_t)s->grace_s + SEND_GRACE_S;
    if (s->engine) {
        srv_log(s, "shutting down: waiting up to %.0f s for requests in flight", s->grace_s);
        srv_engine_drain(s->engine, s->grace_s);
    }
    /* the engine is done; let the last chunks reach their clients */
    wait_requests_sent(s, &until);
    MHD_stop_daemon(s->daemon); /* joins every connection thread */
    srv_engine_free(s->engine);
    srv_chat_free(s->chat);
    pdl_model_free(s->draft);
    pdl_model_free(s->model);
    server_free(s);
}
