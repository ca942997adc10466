/*
 * engine_loop.c - the thread that owns the pdl_engine.
 *
 * Loop: take every queued command (add a call, cancel a call), step the
 * engine while any request is active, publish its statistics, sleep on the
 * command queue's condition variable when idle. Event callbacks run on this
 * thread inside pdl_engine_step; each copies the event into its call's queue
 * and wakes the HTTP thread that waits on that call. Timing for the latency
 * histograms is taken here, where tokens appear.
 *
 * Locking: the engine's mutex guards the command queue and the drain/stop
 * flags; each call's mutex guards its state and event queue. The engine
 * thread never holds both at once; HTTP threads never touch the pdl_engine.
 */
#define _POSIX_C_SOURCE 200809L
#include "server/engine_loop.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util/error.h"
#include "util/clock.h"

/* An absolute CLOCK_MONOTONIC deadline ms from now (condition variables below
 * are created on the monotonic clock). */
static struct timespec deadline_in(double seconds) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    long long ns = ts.tv_nsec + (long long)(seconds * 1e9);
    ts.tv_sec += (time_t)(ns / 1000000000LL);
    ts.tv_nsec = (long)(ns % 1000000000LL);
    return ts;
}

static int cond_init_monotonic(pthread_cond_t *cv) {
    pthread_condattr_t a;
    if (pthread_condattr_init(&a)) return -1;
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    int rc = pthread_cond_init(cv, &a);
    pthread_condattr_destroy(&a);
    return rc;
}

/* ---- calls ---------------------------------------------------------------- */

typedef struct call_part {
    srv_call *call;
    int prompt;
    uint64_t id;            /* the engine's request id */
    bool live;              /* in the engine: added and not every sequence finished */
    int n_finished;
    int *gen_tokens;        /* [n] tokens generated per sequence */
    double *last_token_t;   /* [n] when the last token of each sequence came (0 = none yet) */
} call_part;

struct srv_call {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs;
    srv_gen_request req;
    /* guarded by mu */
    srv_call_state state;
    srv_api_error error;
    srv_event *head, *tail;
    /* engine thread only */
    struct srv_engine *engine;
    call_part *parts;       /* [req.n_prompts] */
    int parts_live;
    srv_call *prev, *next;  /* the engine's list of live calls */
    double t_arrival;
    bool first_token_seen;
};

void srv_events_free(srv_event *ev) {
    while (ev) {
        srv_event *next = ev->next;
        free(ev->top);
        free(ev->text);
        free(ev->stop_string);
        free(ev->embedding);
        free(ev);
        ev = next;
    }
}

srv_call *srv_call_new(srv_gen_request *req) {
    srv_call *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->parts = calloc((size_t)(req->n_prompts ? req->n_prompts : 1), sizeof *c->parts);
    bool ok = c->parts != NULL;
    int n = req->params.n > 0 ? req->params.n : 1;
    for (int i = 0; ok && i < req->n_prompts; i++) {
        c->parts[i].call = c;
        c->parts[i].prompt = i;
        c->parts[i].gen_tokens = calloc((size_t)n, sizeof *c->parts[i].gen_tokens);
        c->parts[i].last_token_t = calloc((size_t)n, sizeof *c->parts[i].last_token_t);
        ok = c->parts[i].gen_tokens && c->parts[i].last_token_t;
    }
    if (ok && pthread_mutex_init(&c->mu, NULL) != 0) ok = false;
    if (ok && cond_init_monotonic(&c->cv) != 0) {
        pthread_mutex_destroy(&c->mu);
        ok = false;
    }
    if (!ok) {
        for (int i = 0; c->parts && i < req->n_prompts; i++) {
            free(c->parts[i].gen_tokens);
            free(c->parts[i].last_token_t);
        }
        free(c->parts);
        free(c);
        return NULL;
    }
    c->refs = 1;
    c->req = *req;
    memset(req, 0, sizeof *req);
    c->t_arrival = clock_now_s();
    return c;
}

const srv_gen_request *srv_call_request(const srv_call *c) { return &c->req; }

static void call_ref(srv_call *c) {
    pthread_mutex_lock(&c->mu);
    c->refs++;
    pthread_mutex_unlock(&c->mu);
}

void srv_call_release(srv_call *c) {
    if (!c) return;
    pthread_mutex_lock(&c->mu);
    int left = --c->refs;
    pthread_mutex_unlock(&c->mu);
    if (left > 0) return;
    srv_events_free(c->head);
    for (int i = 0; i < c->req.n_prompts; i++) {
        free(c->parts[i].gen_tokens);
        free(c->parts[i].last_token_t);
    }
    free(c->parts);
    srv_gen_request_free(&c->req);
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

srv_call_state srv_call_wait(srv_call *c, int timeout_ms, srv_event **events, srv_api_error *err) {
    pthread_mutex_lock(&c->mu);
    if (!c->head && (c->state == SRV_CALL_QUEUED || c->state == SRV_CALL_RUNNING) && timeout_ms > 0) {
        struct timespec dl = deadline_in(timeout_ms / 1000.0);
        pthread_cond_timedwait(&c->cv, &c->mu, &dl);
    }
    *events = c->head;
    c->head = c->tail = NULL;
    srv_call_state st = c->state;
    if (st == SRV_CALL_FAILED && err) *err = c->error;
    pthread_mutex_unlock(&c->mu);
    return st;
}

static void call_push(srv_call *c, srv_event *ev) {
    pthread_mutex_lock(&c->mu);
    if (c->tail) c->tail->next = ev;
    else c->head = ev;
    c->tail = ev;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

static void call_set_state(srv_call *c, srv_call_state st, const srv_api_error *err) {
    pthread_mutex_lock(&c->mu);
    c->state = st;
    if (err) c->error = *err;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

/* ---- the engine thread ------------------------------------------------------ */

typedef struct command {
    struct command *next;
    enum { CMD_ADD, CMD_CANCEL } kind;
    srv_call *call; /* holds a reference */
} command;

struct srv_engine {
    pdl_engine *engine;
    srv_metrics *metrics;
    pdl_log_fn log;
    void *log_user;
    pthread_t thread;
    bool thread_started;
    /* guarded by mu */
    pthread_mutex_t mu;
    pthread_cond_t cv;       /* commands arrived, or drain/stop asked */
    pthread_cond_t idle_cv;  /* busy went false */
    command *head, *tail;
    bool draining, stopping;
    double drain_deadline;
    bool busy;               /* calls live or commands queued */
    /* engine thread only */
    srv_call *live;
    int n_live;
    double stats_at;         /* when the last periodic stats line was logged */
    pdl_engine_stats stats_last;
};

#define STATS_EVERY_S 10.0

static void engine_log(srv_engine *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Every STATS_EVERY_S seconds while there is work, one line as vLLM's stats
 * logger prints it: throughputs since the last line, queue, KV usage and
 * the prefix cache's hit rate. */
static void log_stats(srv_engine *e, const pdl_engine_stats *st) {
    double t = clock_now_s(), dt = t - e->stats_at;
    const pdl_engine_stats *o = &e->stats_last;
    if (dt < STATS_EVERY_S) return;
    bool moved = st->prompt_tokens != o->prompt_tokens || st->generation_tokens != o->generation_tokens ||
                 st->running || st->waiting;
    if (moved && e->stats_at > 0) {
        uint64_t q = st->prefix_cache_queries - o->prefix_cache_queries, h = st->prefix_cache_hits - o->prefix_cache_hits;
        engine_log(e, "avg prompt throughput: %.1f tokens/s, avg generation throughput: %.1f tokens/s, running: %d, "
                   "waiting: %d, KV cache usage: %.1f%% (%d cached blocks free), prefix cache hit rate: %.1f%% "
                   "(%llu of %llu tokens)",
                   (double)(st->prompt_tokens - o->prompt_tokens) / dt,
                   (double)(st->generation_tokens - o->generation_tokens) / dt, st->running, st->waiting,
                   st->kv_blocks_total ? 100.0 * st->kv_blocks_used / st->kv_blocks_total : 0.0, st->kv_blocks_cached,
                   q ? 100.0 * (double)h / (double)q : 0.0, (unsigned long long)h, (unsigned long long)q);
        if (st->state_slots_total > 0)
            engine_log(e, "recurrent state: %d of %d slots live (%.1f MiB of %.1f MiB), %d prefix snapshots",
                       st->state_slots_used, st->state_slots_total,
                       (double)st->state_slots_used * (double)st->state_slot_bytes / 1048576.0,
                       (double)st->state_slots_total * (double)st->state_slot_bytes / 1048576.0, st->state_snapshots);
    }
    e->stats_at = t;
    e->stats_last = *st;
}

static void engine_log(srv_engine *e, const char *fmt, ...) {
    char line[PDL_ERROR_MAX + 128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (e->log) e->log(line, e->log_user);
}

static void live_add(srv_engine *e, srv_call *c) {
    c->prev = NULL;
    c->next = e->live;
    if (e->live) e->live->prev = c;
    e->live = c;
    e->n_live++;
}

static void live_remove(srv_engine *e, srv_call *c) {
    if (c->prev) c->prev->next = c->next;
    else e->live = c->next;
    if (c->next) c->next->prev = c->prev;
    c->prev = c->next = NULL;
    e->n_live--;
}

/* The last sequence of a part ended; when it was the call's last part, the
 * call is done and the engine lets go of it. */
static void part_done(call_part *p) {
    if (!p->live) return;
    p->live = false;
    srv_call *c = p->call;
    if (--c->parts_live > 0) return;
    srv_engine *e = c->engine;
    live_remove(e, c);
    call_set_state(c, SRV_CALL_DONE, NULL);
    srv_call_release(c); /* the engine's reference: c may be gone now */
}

static void on_event(const pdl_event *ev, void *user) {
    call_part *p = user;
    srv_call *c = p->call;
    srv_engine *e = c->engine;
    int n = c->req.params.n > 0 ? c->req.params.n : 1;
    if (ev->index < 0 || ev->index >= n) return;
    double t = clock_now_s();
    srv_event *out = calloc(1, sizeof *out);
    const char *text = ev->text ? ev->text : "";
    size_t text_len = ev->text ? ev->text_len : 0;
    if (out) {
        out->kind = ev->kind;
        out->prompt = p->prompt;
        out->index = ev->index;
        out->token = ev->token;
        out->position = ev->position;
        out->logprob = ev->logprob;
        out->finish_reason = ev->finish_reason;
        out->stop_token = ev->stop_token;
        out->cached_tokens = ev->cached_tokens;
        out->text = malloc(text_len + 1);
        if (out->text) {
            memcpy(out->text, text, text_len);
            out->text[text_len] = '\0';
            out->text_len = text_len;
        }
        if (ev->stop_string && !(out->stop_string = strdup(ev->stop_string))) {
            free(out->text);
            out->text = NULL;
        }
        if (ev->n_embedding > 0 && ev->embedding) {
            out->embedding = malloc((size_t)ev->n_embedding * sizeof *out->embedding);
            if (out->embedding) {
                memcpy(out->embedding, ev->embedding, (size_t)ev->n_embedding * sizeof *out->embedding);
                out->n_embedding = ev->n_embedding;
            } else {
                free(out->text);
                out->text = NULL;
            }
        }
        if (ev->n_top > 0 && ev->top) {
            out->top = malloc((size_t)ev->n_top * sizeof *out->top);
            if (out->top) {
                memcpy(out->top, ev->top, (size_t)ev->n_top * sizeof *out->top);
                out->n_top = ev->n_top;
            }
        }
        if (!out->text) {
            free(out->top);
            free(out->embedding);
            free(out);
            out = NULL;
        }
    }
    if (ev->kind == PDL_EVENT_TOKEN) {
        if (!c->first_token_seen) {
            c->first_token_seen = true;
            srv_metrics_observe_ttft(e->metrics, t - c->t_arrival);
        } else if (p->last_token_t[ev->index] > 0) {
            srv_metrics_observe_tpot(e->metrics, t - p->last_token_t[ev->index]);
        }
        p->last_token_t[ev->index] = t;
        p->gen_tokens[ev->index]++;
    } else if (ev->kind == PDL_EVENT_FINISHED) {
        srv_metrics_observe_request(e->metrics, t - c->t_arrival, (int)c->req.prompts[p->prompt].n_ids,
                                    p->gen_tokens[ev->index], ev->finish_reason);
    }
    if (out) {
        call_push(c, out);
    } else {
        /* out of memory: the client cannot get a consistent answer any more */
        srv_api_error err;
        srv_api_fail(&err, 500, NULL, "out of memory while streaming the result");
        call_set_state(c, SRV_CALL_FAILED, &err);
    }
    if (ev->kind == PDL_EVENT_FINISHED && ++p->n_finished >= n) part_done(p);
}

/* Ends every live part of c in the engine (engine thread; c stays valid
 * because the caller holds a reference). */
static void abort_call(srv_engine *e, srv_call *c) {
    for (int i = 0; i < c->req.n_prompts; i++) {
        call_part *p = &c->parts[i];
        if (!p->live) continue;
        pdl_engine_abort(e->engine, p->id); /* FINISHED "abort" events, synchronously */
        part_done(p);                       /* n > 1 before its fork: one event only */
    }
}

static void add_call(srv_engine *e, srv_call *c, bool closed) {
    c->engine = e;
    srv_api_error err;
    if (closed) {
        srv_api_fail(&err, 503, NULL, "the server is shutting down");
        err.type = "service_unavailable";
        call_set_state(c, SRV_CALL_FAILED, &err);
        srv_call_release(c); /* the engine's reference */
        return;
    }
    call_ref(c); /* held by abort_call below while parts go */
    live_add(e, c);
    c->parts_live = c->req.n_prompts;
    for (int i = 0; i < c->req.n_prompts; i++) c->parts[i].live = true;
    call_set_state(c, SRV_CALL_RUNNING, NULL);
    for (int i = 0; i < c->req.n_prompts; i++) {
        call_part *p = &c->parts[i];
        const srv_prompt *sp = &c->req.prompts[i];
        pdl_error pe;
        if (pdl_engine_add_request(e->engine, sp->ids, sp->n_ids, &c->req.params, on_event, p, &p->id, &pe) == 0)
            continue;
        /* refused (the prompt cannot fit the KV pool, out of memory): undo the
         * parts already added and fail the whole call */
        srv_api_fail(&err, 400, c->req.kind == SRV_API_CHAT ? "messages" : "prompt", "%s", pe.message);
        for (int k = i; k < c->req.n_prompts; k++) c->parts[k].live = false;
        c->parts_live -= c->req.n_prompts - i;
        pthread_mutex_lock(&c->mu);
        c->state = SRV_CALL_FAILED;
        c->error = err;
        pthread_mutex_unlock(&c->mu);
        if (c->parts_live == 0) {
            live_remove(e, c);
            srv_call_release(c); /* the engine's reference */
        } else {
            abort_call(e, c);
        }
        /* abort_call's part_done set DONE: failure wins */
        call_set_state(c, SRV_CALL_FAILED, &err);
        break;
    }
    srv_call_release(c);
}

static void fail_all(srv_engine *e, const char *why) {
    srv_api_error err;
    srv_api_fail(&err, 500, NULL, "engine failure: %s", why);
    while (e->live) {
        srv_call *c = e->live;
        call_ref(c);
        abort_call(e, c);
        call_set_state(c, SRV_CALL_FAILED, &err);
        srv_call_release(c);
    }
}

static void *engine_main(void *arg) {
    srv_engine *e = arg;
    int active = 0;
    for (;;) {
        pthread_mutex_lock(&e->mu);
        for (;;) {
            e->busy = e->n_live > 0 || e->head != NULL;
            if (!e->busy) pthread_cond_broadcast(&e->idle_cv);
            if (e->head || e->stopping || active > 0) break;
            if (e->draining && e->n_live > 0) {
                if (clock_now_s() >= e->drain_deadline) break;
                struct timespec dl = deadline_in(e->drain_deadline - clock_now_s());
                pthread_cond_timedwait(&e->cv, &e->mu, &dl);
                continue;
            }
            pthread_cond_wait(&e->cv, &e->mu);
        }
        command *cmds = e->head;
        e->head = e->tail = NULL;
        bool stopping = e->stopping, closed = e->draining || e->stopping;
        bool abort_all = stopping || (e->draining && clock_now_s() >= e->drain_deadline);
        pthread_mutex_unlock(&e->mu);

        while (cmds) {
            command *cmd = cmds;
            cmds = cmd->next;
            if (cmd->kind == CMD_ADD) {
                add_call(e, cmd->call, closed); /* the command's reference becomes the engine's */
            } else {
                abort_call(e, cmd->call);
                srv_call_release(cmd->call);
            }
            free(cmd);
        }
        if (abort_all)
            while (e->live) {
                srv_call *c = e->live;
                call_ref(c);
                abort_call(e, c);
                srv_call_release(c);
            }
        active = 0;
        if (e->n_live > 0) {
            pdl_error err;
            if (pdl_engine_step(e->engine, &active, &err)) {
                engine_log(e, "engine step failed: %s", err.message);
                fail_all(e, err.message);
                active = 0;
            } else if (active == 0 && e->n_live > 0) {
                /* cannot happen: live calls always have requests in the engine */
                engine_log(e, "engine idle with %d calls unfinished: failing them", e->n_live);
                fail_all(e, "requests lost by the engine");
            }
        }
        pdl_engine_stats st;
        pdl_engine_get_stats(e->engine, &st);
        srv_metrics_set_engine(e->metrics, &st);
        log_stats(e, &st);
        if (stopping && e->n_live == 0) {
            pthread_mutex_lock(&e->mu);
            bool more = e->head != NULL;
            pthread_mutex_unlock(&e->mu);
            if (!more) break;
        }
    }
    pthread_mutex_lock(&e->mu);
    e->busy = false;
    pthread_cond_broadcast(&e->idle_cv);
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

/* ---- the public side -------------------------------------------------------- */

int srv_engine_start(srv_engine **out, pdl_model *model, const pdl_engine_options *opts, srv_metrics *metrics,
                     pdl_error *err) {
    *out = NULL;
    srv_engine *e = calloc(1, sizeof *e);
    if (!e) return err_fail(err, "server: out of memory");
    e->metrics = metrics;
    e->log = opts ? opts->log : NULL;
    e->log_user = opts ? opts->log_user : NULL;
    if (pthread_mutex_init(&e->mu, NULL) != 0) {
        free(e);
        return err_fail(err, "server: cannot create a mutex");
    }
    if (cond_init_monotonic(&e->cv) != 0 || cond_init_monotonic(&e->idle_cv) != 0) {
        pthread_mutex_destroy(&e->mu);
        free(e);
        return err_fail(err, "server: cannot create a condition variable");
    }
    if (pdl_engine_create(&e->engine, model, opts, err)) {
        srv_engine_free(e);
        return -1;
    }
    pdl_engine_stats st;
    pdl_engine_get_stats(e->engine, &st);
    srv_metrics_set_engine(metrics, &st);
    if (pthread_create(&e->thread, NULL, engine_main, e) != 0) {
        srv_engine_free(e);
        return err_fail(err, "server: cannot start the engine thread");
    }
    e->thread_started = true;
    *out = e;
    return 0;
}

static void push_command(srv_engine *e, command *cmd) {
    pthread_mutex_lock(&e->mu);
    if (e->tail) e->tail->next = cmd;
    else e->head = cmd;
    e->tail = cmd;
    e->busy = true;
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

int srv_engine_max_model_len(const srv_engine *e) { return pdl_engine_max_model_len(e->engine); }

void srv_engine_submit(srv_engine *e, srv_call *c) {
    command *cmd = calloc(1, sizeof *cmd);
    srv_api_error err;
    pthread_mutex_lock(&e->mu);
    bool closed = e->draining || e->stopping;
    pthread_mutex_unlock(&e->mu);
    if (!cmd || closed) {
        free(cmd);
        if (closed) {
            srv_api_fail(&err, 503, NULL, "the server is shutting down");
            err.type = "service_unavailable";
        } else {
            srv_api_fail(&err, 500, NULL, "out of memory");
        }
        call_set_state(c, SRV_CALL_FAILED, &err);
        return;
    }
    call_ref(c);
    cmd->kind = CMD_ADD;
    cmd->call = c;
    push_command(e, cmd);
}

void srv_engine_cancel(srv_engine *e, srv_call *c) {
    pthread_mutex_lock(&c->mu);
    bool over = c->state == SRV_CALL_DONE || c->state == SRV_CALL_FAILED;
    pthread_mutex_unlock(&c->mu);
    if (over) return;
    command *cmd = calloc(1, sizeof *cmd);
    if (!cmd) return; /* the request runs to its end instead */
    call_ref(c);
    cmd->kind = CMD_CANCEL;
    cmd->call = c;
    push_command(e, cmd);
}

void srv_engine_drain(srv_engine *e, double grace_s) {
    pthread_mutex_lock(&e->mu);
    e->draining = true;
    e->drain_deadline = clock_now_s() + grace_s;
    pthread_cond_signal(&e->cv);
    while (e->busy && e->thread_started) {
        struct timespec dl = deadline_in(0.1);
        pthread_cond_timedwait(&e->idle_cv, &e->mu, &dl);
    }
    pthread_mutex_unlock(&e->mu);
}

void srv_engine_free(srv_engine *e) {
    if (!e) return;
    if (e->thread_started) {
        pthread_mutex_lock(&e->mu);
        e->stopping = true;
        pthread_cond_signal(&e->cv);
        pthread_mutex_unlock(&e->mu);
        pthread_join(e->thread, NULL);
    }
    /* commands queued after the thread ended */
    while (e->head) {
        command *cmd = e->head;
        e->head = cmd->next;
        if (cmd->kind == CMD_ADD) {
            srv_api_error err;
            srv_api_fail(&err, 503, NULL, "the server is shutting down");
            err.type = "service_unavailable";
            call_set_state(cmd->call, SRV_CALL_FAILED, &err);
        }
        srv_call_release(cmd->call);
        free(cmd);
    }
    pdl_engine_free(e->engine);
    pthread_cond_destroy(&e->cv);
    pthread_cond_destroy(&e->idle_cv);
    pthread_mutex_destroy(&e->mu);
    free(e);
}
