/*
 * http.c - libmicrohttpd glue: routing, API-key check, body limit, JSON
 * responses and Server-Sent Events. Every answer carries the header
 * X-Pagedlm-Replica (the replica's name), so that a client or a test behind
 * a load balancer sees where its request went.
 *
 * MHD runs one thread per connection, so a handler may block: a
 * non-streaming request waits for its call to finish; a streaming response
 * is an MHD callback response whose reader waits for the next events and
 * hands out SSE text. While waiting, the connection's socket is polled for a
 * hang-up, so a client that goes away mid-stream (or while queued) has its
 * request aborted in the engine at once, which frees its KV blocks.
 *
 * A peer that shut down only its sending side (a half-close: "I am done
 * sending, still reading") looks like one that closed until something is
 * written to it, so it is probed rather than dropped: an SSE comment line
 * on a stream, an interim "102 Processing" before a non-streaming answer
 * (HTTP/1.1 clients skip 1xx responses). A closed peer answers the probe
 * with a reset, which the next poll sees.
 *
 * Idle connections: every connection closes after --timeout-keep-alive
 * seconds without traffic (uvicorn's keep-alive timeout, 5 s by default). A
 * generation request lifts the limit while the engine works on it and puts
 * it back (its timer restarted) when the answer is queued. A stream counts
 * as traffic whenever it sends, and while it has nothing to send (queued,
 * a long prompt, text held back by a stop string) it sends an SSE comment
 * line every half limit, which clients skip; a client that stops reading
 * therefore has its stream closed (and its request aborted) after the
 * limit.
 *
 * Framing and size: a body whose length is ambiguous (Content-Length fields
 * that differ, or one beside Transfer-Encoding) gets 400, a Transfer-Encoding
 * other than chunked alone 400 or 501, at once and with the connection
 * closed. A body over --max-body gets 413: it is read and dropped to its end
 * (so that the client, still sending, reads the answer) up to
 * HARD_BODY_LIMIT; past that the 413 comes at once (a Content-Length says
 * so before the body; a chunked body is cut where it passes the limit).
 * What it is not for: validation (api_parse.c), response shapes
 * (api_format.c), the engine (engine_loop.c).
 */
#define _GNU_SOURCE /* POLLRDHUP */
#include <errno.h>
#include <microhttpd.h>
#include <poll.h>
#include <strings.h>
#include <sys/socket.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/api_adapter.h"
#include "server/api_format.h"
#include "server/api_rerank.h"
#include "server/lora_registry.h"
#include "server/server_internal.h"
#include "util/error.h"

#define HARD_BODY_LIMIT ((uint64_t)64 << 20) /* beyond this a body is not drained: 413 at once, connection closed */
#define WAIT_MS 100                          /* how often a waiting thread looks for a hang-up */
#define SSE_BLOCK 16384

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Per HTTP request: the body as it arrives, and what to log at the end. */
typedef struct req_ctx {
    bool http11;    /* the request said HTTP/1.1 (1xx interim responses allowed) */
    sbuf body;
    uint64_t received;
    bool too_large;
    int status;
    double t_start;
    char method[12];
    char path[96];
} req_ctx;

/* ---- plain responses ------------------------------------------------------------ */

#define REPLICA_HEADER "X-Pagedlm-Replica"

static enum MHD_Result send_owned(srv_server *s, struct MHD_Connection *conn, req_ctx *rc, int status,
                                  const char *ctype, char *body, size_t len, bool close) {
    if (!body) {
        body = strdup("{\"error\": {\"message\": \"out of memory\", \"type\": \"server_error\", \"param\": null, "
                      "\"code\": null}}");
        if (!body) return MHD_NO;
        len = strlen(body);
        status = 500;
    }
    struct MHD_Response *resp = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    MHD_add_response_header(resp, REPLICA_HEADER, s->replica_name);
    if (status == 401) MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    if (close) MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    rc->status = status;
    enum MHD_Result r = MHD_queue_response(conn, (unsigned int)status, resp);
    MHD_destroy_response(resp);
    return r;
}

static enum MHD_Result send_json(srv_server *s, struct MHD_Connection *conn, req_ctx *rc, int status, char *body,
                                 size_t len) {
    return send_owned(s, conn, rc, status, "application/json", body, len, false);
}

static enum MHD_Result send_error(srv_server *s, struct MHD_Connection *conn, req_ctx *rc, const srv_api_error *e) {
    size_t len;
    char *body = srv_error_body(e, &len);
    /* a body that was not read (413) cannot leave the connection reusable */
    return send_owned(s, conn, rc, e->status, "application/json", body, len, e->status == 413 || e->status == 503);
}

static enum MHD_Result fail(srv_server *s, struct MHD_Connection *conn, req_ctx *rc, int status, const char *type,
                            const char *code, const char *fmt, const char *arg) {
    srv_api_error e;
    srv_api_fail(&e, status, NULL, fmt, arg);
    if (type) e.type = type;
    e.code = code;
    return send_error(s, conn, rc, &e);
}

/* ---- client liveness -------------------------------------------------------------- */

static int conn_fd(struct MHD_Connection *conn) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? (int)ci->connect_fd : -1;
}

typedef enum peer_state {
    PEER_OK = 0,
    PEER_SENT_EOF,  /* shut down its sending side, or closed: a probe tells which */
    PEER_GONE,      /* reset or closed both ways: nobody reads the answer */
} peer_state;

static peer_state peer(int fd) {
    if (fd < 0) return PEER_OK;
    struct pollfd p = {.fd = fd, .events = POLLRDHUP};
    if (poll(&p, 1, 0) <= 0) return PEER_OK;
    if (p.revents & (POLLHUP | POLLERR | POLLNVAL)) return PEER_GONE;
    return p.revents & POLLRDHUP ? PEER_SENT_EOF : PEER_OK;
}

/* Liveness of a client that waits for a non-streaming answer (or for its
 * stream to start): whether it is gone. At its first EOF an HTTP/1.1 client
 * gets "102 Processing" written to the socket (MHD writes nothing while the
 * handler runs); a closed one answers with a reset. */
static bool client_gone(int fd, bool http11, bool *probed) {
    peer_state ps = peer(fd);
    if (ps == PEER_GONE) return true;
    if (ps != PEER_SENT_EOF) return false;
    if (!http11) return true; /* no interim responses in HTTP/1.0: take EOF as gone */
    if (!*probed) {
        static const char interim[] = "HTTP/1.1 102 Processing\r\n\r\n";
        *probed = true;
        if (send(fd, interim, sizeof interim - 1, MSG_NOSIGNAL | MSG_DONTWAIT) != (ssize_t)(sizeof interim - 1))
            return true;
    }
    return false;
}

/* The client of a request being parsed, for the grammar compiler's cancel
 * hook (gram_limits.cancelled): a request whose client leaves while its
 * grammar compiles stops compiling within a few milliseconds. */
typedef struct parse_liveness {
    int fd;
    bool http11, probed, gone;
} parse_liveness;

static bool parse_client_gone(void *user) {
    parse_liveness *l = user;
    if (!l->gone) l->gone = client_gone(l->fd, l->http11, &l->probed);
    return l->gone;
}

/* ---- authentication ---------------------------------------------------------------- */

/* got against the key, in time that depends on the key's length only,
 * never on where the first difference is. */
static bool key_matches(const char *key, const char *got) {
    if (!got) return false;
    size_t klen = strlen(key), glen = strlen(got);
    volatile unsigned char diff = (unsigned char)(klen != glen);
    for (size_t i = 0; i < klen; i++) {
        unsigned char g = i < glen ? (unsigned char)got[i] : 0;
        diff |= (unsigned char)(g ^ (unsigned char)key[i]);
    }
    return diff == 0;
}

/* "Authorization: Bearer KEY" (OpenAI's clients), or "x-api-key: KEY"
 * (Anthropic's), on every route. */
static bool authorized(const srv_server *s, struct MHD_Connection *conn) {
    if (!s->api_key) return true;
    const char *h = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (h && strncasecmp(h, "Bearer ", 7) == 0 && key_matches(s->api_key, h + 7)) return true;
    return key_matches(s->api_key, MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "x-api-key"));
}

/* ---- generation ---------------------------------------------------------------------- */

static void make_id(srv_server *s, const char *prefix, char *out, size_t cap) {
    snprintf(out, cap, "%s%016llx%016llx", prefix, (unsigned long long)srv_random(s),
             (unsigned long long)srv_random(s));
}

typedef struct stream_ctx {
    srv_server *server;
    srv_call *call;
    srv_response *resp;
    const srv_adapter_ops *ad; /* another API over chat (api_adapter.h), or NULL */
    void *ad_state;
    sbuf chat;                 /* with an adapter: the chat stream, before it is turned into out */
    sbuf out;
    int fd;
    double next_check;  /* when to look for a hang-up next */
    double next_probe;  /* when a half-closed peer may get the next SSE comment */
    double last_sent;   /* when bytes last went out */
    double heartbeat_s; /* a comment line after this long without bytes */
    bool ended;         /* the last bytes are in out */
} stream_ctx;

#define PROBE_EVERY_S 1.0

/* With an adapter, the chat stream gathered in st->chat goes out in the
 * adapter's events. */
static void stream_adapt(stream_ctx *st) {
    if (!st->ad || st->chat.len == 0) return;
    srv_adapter_transcode(st->ad, st->ad_state, st->chat.data, st->chat.len, &st->out);
    if (st->chat.oom) st->out.oom = true;
    st->chat.len = 0;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    stream_ctx *st = cls;
    sbuf *chat = st->ad ? &st->chat : &st->out; /* where the chat stream goes */
    while (st->out.len == 0) {
        if (st->ended) return MHD_CONTENT_READER_END_OF_STREAM;
        srv_event *evs;
        srv_api_error err;
        srv_call_state cs = srv_call_wait(st->call, WAIT_MS, &evs, &err);
        if (evs) srv_response_stream_events(st->resp, evs, chat);
        srv_events_free(evs);
        if (cs == SRV_CALL_DONE) {
            srv_response_stream_end(st->resp, chat);
            st->ended = true;
        } else if (cs == SRV_CALL_FAILED) {
            if (st->ad) {
                stream_adapt(st);
                st->ad->stream_error(st->ad_state, &err, &st->out);
            } else {
                srv_stream_error(&err, &st->out);
                if (srv_call_request(st->call)->kind != SRV_API_INFILL) /* llama-server's streams have no [DONE] */
                    sbuf_puts(&st->out, "data: [DONE]\n\n");
            }
            st->ended = true;
        }
        stream_adapt(st);
        if (cs != SRV_CALL_DONE && cs != SRV_CALL_FAILED && now_s() >= st->next_check) {
            /* events may be held back (stop strings) or the call queued:
             * nothing is written, so look for a hang-up directly */
            double t = now_s();
            st->next_check = t + WAIT_MS / 1000.0;
            peer_state ps = peer(st->fd);
            if (ps == PEER_GONE) return MHD_CONTENT_READER_END_WITH_ERROR; /* stream_free aborts the call */
            if (ps == PEER_SENT_EOF && t >= st->next_probe) {
                /* half-closed, or closed: an SSE comment (ignored by clients) tells */
                st->next_probe = t + PROBE_EVERY_S;
                sbuf_puts(&st->out, ": ping\n\n");
            }
            /* nothing to send for a while: keep the connection's idle timer
             * from firing while the server works */
            if (st->out.len == 0 && t - st->last_sent >= st->heartbeat_s) sbuf_puts(&st->out, ": keep-alive\n\n");
        }
        if (st->out.oom) return MHD_CONTENT_READER_END_WITH_ERROR;
    }
    st->last_sent = now_s();
    size_t n = st->out.len < max ? st->out.len : max;
    memcpy(buf, st->out.data, n);
    sbuf_consume(&st->out, n);
    return (ssize_t)n;
}

static void stream_free(void *cls) {
    stream_ctx *st = cls;
    srv_engine_cancel(st->server->engine, st->call); /* nothing when it already finished */
    srv_response_free(st->resp); /* before the call: it reads the call's request */
    srv_call_release(st->call);
    if (st->ad) st->ad->free_state(st->ad_state);
    sbuf_free(&st->chat);
    sbuf_free(&st->out);
    free(st);
}

/* Waits until the engine took the call (or refused it), or the client left.
 * Returns the state; *events gets what already came. */
static srv_call_state wait_started(srv_call *call, int fd, bool http11, bool *probed, srv_event **events,
                                   srv_api_error *err, bool *gone) {
    *gone = false;
    for (;;) {
        srv_call_state cs = srv_call_wait(call, WAIT_MS, events, err);
        if (cs != SRV_CALL_QUEUED || *events) return cs;
        if (client_gone(fd, http11, probed)) {
            *gone = true;
            return cs;
        }
    }
}

/* The idle limit back on a connection whose answer is queued (its timer
 * restarts: it was 0). */
static void restore_idle_timeout(const srv_server *s, struct MHD_Connection *conn) {
    MHD_set_connection_option(conn, MHD_CONNECTION_OPTION_TIMEOUT, s->keep_alive_s);
}

/* An error in an adapter's shape (or the OpenAI one without). */
static enum MHD_Result send_error_as(srv_server *s, struct MHD_Connection *conn, req_ctx *rc,
                                     const srv_adapter_ops *ad, const srv_api_error *e) {
    if (!ad) return send_error(s, conn, rc, e);
    size_t len;
    char *body = ad->error_body(e, &len);
    return send_owned(s, conn, rc, e->status, "application/json", body, len, e->status == 413 || e->status == 503);
}

/* generate()'s work; *ad_state is the adapter's state, which a stream
 * takes over (then set to NULL); generate frees what is left. */
static enum MHD_Result run_generation(srv_server *s, struct MHD_Connection *conn, req_ctx *rc, const json_t *body,
                                      srv_api_kind kind, const srv_adapter_ops *ad, void **ad_state_out) {
    srv_gen_request req;
    srv_api_error err;
    char id[64];
    make_id(s, ad ? ad->id_prefix : kind == SRV_API_CHAT ? "chatcmpl-" : kind == SRV_API_EMBEDDINGS ? "embd-"
                   : kind == SRV_API_RERANK || kind == SRV_API_SCORE ? "rerank-" : "cmpl-", id,
            sizeof id);
    json_t *chat_body = NULL;
    void *ad_state = NULL;
    int arc = ad ? ad->to_chat(&s->parse, body, id, &chat_body, &ad_state, &err) : 0;
    *ad_state_out = ad_state;
    if (arc) return send_error_as(s, conn, rc, ad, &err);
    if (ad) body = chat_body;
    int fd = conn_fd(conn);
    parse_liveness live = {.fd = fd, .http11 = rc->http11};
    srv_parse_ctx pc = s->parse; /* this request's copy: its grammar stops when its client leaves */
    pc.grammar_limits.cancelled = parse_client_gone;
    pc.grammar_limits.user = &live;
    if (ad && ad->auto_tools) pc.auto_tool_choice = true;
    int prc = kind == SRV_API_CHAT         ? srv_parse_chat(&pc, body, &req, &err)
              : kind == SRV_API_INFILL     ? srv_parse_infill(&pc, body, &req, &err)
              : kind == SRV_API_EMBEDDINGS ? srv_parse_embeddings(&pc, body, &req, &err)
              : kind == SRV_API_RERANK     ? srv_parse_rerank(&pc, body, &req, &err)
              : kind == SRV_API_SCORE      ? srv_parse_score(&pc, body, &req, &err)
                                           : srv_parse_completion(&pc, body, &req, &err);
    /* the LoRA adapter "model" or "lora" selects (server/lora_registry.h) */
    char model_name[SRV_LORA_NAME_MAX] = "";
    if (prc == 0 && s->loras)
        prc = srv_loras_select(s->loras, body, s->model_name, &req.params, model_name, sizeof model_name, &err);
    json_decref(chat_body);
    if (prc) {
        srv_gen_request_free(&req);
        if (live.gone) { /* nobody to answer: drop the connection */
            srv_log(s, "request dropped: its client left while the request was parsed (%s)", err.message);
            return MHD_NO;
        }
        return send_error_as(s, conn, rc, ad, &err);
    }
    if (!req.seed_given) req.params.sampling.seed = srv_random(s);
    srv_call *call = srv_call_new(&req);
    if (!call) {
        srv_gen_request_free(&req);
        return fail(s, conn, rc, 500, NULL, NULL, "%s", "out of memory");
    }
    const srv_gen_request *r = srv_call_request(call);
    srv_response *resp = srv_response_new(s->model, r, model_name[0] ? model_name : s->model_name, s->replica_name,
                                          id, (long long)time(NULL));
    if (!resp) {
        srv_call_release(call);
        return fail(s, conn, rc, 500, NULL, NULL, "%s", "out of memory");
    }
    /* a generation may take long: no idle timeout on this connection now */
    MHD_set_connection_option(conn, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned int)0);
    srv_engine_submit(s->engine, call);

    srv_event *evs = NULL;
    bool gone, probed = live.probed;
    srv_call_state cs = wait_started(call, fd, rc->http11, &probed, &evs, &err, &gone);
    if (gone || cs == SRV_CALL_FAILED) {
        srv_events_free(evs);
        srv_engine_cancel(s->engine, call);
        srv_response_free(resp);
        srv_call_release(call);
        if (gone) return MHD_NO; /* drop the connection */
        restore_idle_timeout(s, conn);
        return send_error_as(s, conn, rc, ad, &err);
    }

    if (r->stream) {
        stream_ctx *st = calloc(1, sizeof *st);
        if (!st) {
            srv_events_free(evs);
            srv_engine_cancel(s->engine, call);
            srv_response_free(resp);
            srv_call_release(call);
            return fail(s, conn, rc, 500, NULL, NULL, "%s", "out of memory");
        }
        st->server = s;
        st->call = call;
        st->resp = resp;
        st->ad = ad;
        st->ad_state = ad_state; /* the stream owns it now */
        *ad_state_out = NULL;
        st->fd = fd;
        st->next_probe = probed ? now_s() + PROBE_EVERY_S : 0; /* a 102 went out already */
        st->last_sent = now_s();
        st->heartbeat_s = s->keep_alive_s / 2.0;
        if (ad) ad->stream_begin(ad_state, &st->out);
        srv_response_stream_begin(resp, ad ? &st->chat : &st->out);
        srv_response_stream_events(resp, evs, ad ? &st->chat : &st->out);
        srv_events_free(evs);
        stream_adapt(st);
        struct MHD_Response *mr = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, SSE_BLOCK, stream_read, st,
                                                                    stream_free);
        if (!mr) {
            stream_free(st);
            return MHD_NO;
        }
        MHD_add_response_header(mr, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream; charset=utf-8");
        MHD_add_response_header(mr, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
        MHD_add_response_header(mr, REPLICA_HEADER, s->replica_name);
        rc->status = 200;
        enum MHD_Result res = MHD_queue_response(conn, MHD_HTTP_OK, mr);
        MHD_destroy_response(mr); /* stream_free runs when MHD is done with it */
        /* each send restarts it, and the reader sends at least a comment
         * line every heartbeat_s: a stream lives as long as its client reads */
        restore_idle_timeout(s, conn);
        return res;
    }

    /* non-streaming: collect everything, then answer */
    srv_response_add(resp, evs);
    srv_events_free(evs);
    double next_check = now_s() + WAIT_MS / 1000.0;
    while (cs != SRV_CALL_DONE && cs != SRV_CALL_FAILED) {
        cs = srv_call_wait(call, WAIT_MS, &evs, &err);
        srv_response_add(resp, evs);
        srv_events_free(evs);
        if (cs == SRV_CALL_DONE || cs == SRV_CALL_FAILED || now_s() < next_check) continue;
        next_check = now_s() + WAIT_MS / 1000.0;
        if (client_gone(fd, rc->http11, &probed)) {
            srv_engine_cancel(s->engine, call);
            srv_response_free(resp);
            srv_call_release(call);
            return MHD_NO;
        }
    }
    enum MHD_Result res;
    if (cs == SRV_CALL_FAILED) {
        res = send_error_as(s, conn, rc, ad, &err);
    } else {
        size_t len;
        char *out = srv_response_body(resp, &len);
        if (ad && out) { /* the chat response in the adapter's shape */
            json_t *chat = json_loadb(out, len, 0, NULL);
            free(out);
            out = chat ? ad->whole(ad_state, chat, &len) : NULL;
            json_decref(chat);
        }
        res = out ? send_json(s, conn, rc, 200, out, len) : fail(s, conn, rc, 500, NULL, NULL, "%s", "out of memory");
    }
    restore_idle_timeout(s, conn);
    srv_response_free(resp);
    srv_call_release(call);
    return res;
}

/* A completion, a chat completion, or (ad) another API's request served as
 * a chat completion (api_adapter.h). */
static enum MHD_Result generate(srv_server *s, struct MHD_Connection *conn, req_ctx *rc, const json_t *body,
                                srv_api_kind kind, const srv_adapter_ops *ad) {
    void *ad_state = NULL;
    enum MHD_Result res = run_generation(s, conn, rc, body, kind, ad, &ad_state);
    if (ad_state) ad->free_state(ad_state);
    return res;
}

/* ---- the other endpoints ---------------------------------------------------------------- */

static enum MHD_Result tokenize(srv_server *s, struct MHD_Connection *conn, req_ctx *rc, const json_t *body) {
    srv_tokenize_request t;
    srv_api_error err;
    if (srv_parse_tokenize(&s->parse, body, &t, &err)) {
        free(t.ids);
        return send_error(s, conn, rc, &err);
    }
    size_t len;
    char *out = srv_tokenize_body(s->model, t.ids, t.n_ids, s->parse.ctx_len, t.return_token_strs, &len);
    free(t.ids);
    return send_json(s, conn, rc, 200, out, len);
}

/* vLLM's POST /v1/load_lora_adapter {"lora_name", "lora_path"} and
 * /v1/unload_lora_adapter {"lora_name"}: a plain-text "Success: ..." or an
 * error. An unload takes the name away at once; requests running with the
 * adapter finish with it (server/lora_registry.h). */
static enum MHD_Result lora_adapter(srv_server *s, struct MHD_Connection *conn, req_ctx *rc, const json_t *body,
                                    bool load) {
    srv_api_error err;
    const char *name = json_string_value(json_object_get(body, "lora_name"));
    const char *path = json_string_value(json_object_get(body, "lora_path"));
    if (!s->loras) {
        srv_api_fail(&err, 400, NULL, "LoRA adapters are not enabled on this server (start it with --enable-lora)");
        return send_error(s, conn, rc, &err);
    }
    if (!name || (load && !path)) {
        srv_api_fail(&err, 400, !name ? "lora_name" : "lora_path", "'lora_name'%s must be given as strings",
                     load ? " and 'lora_path'" : "");
        return send_error(s, conn, rc, &err);
    }
    if (load ? srv_loras_load(s->loras, s->model_name, name, path, &err) : srv_loras_unload(s->loras, name, &err))
        return send_error(s, conn, rc, &err);
    srv_log(s, "LoRA adapter '%s' %s", name, load ? "loaded" : "unloaded");
    char msg[SRV_LORA_NAME_MAX + 64];
    int n = snprintf(msg, sizeof msg, "Success: LoRA adapter '%s' %s successfully.", name, load ? "added" : "removed");
    return send_owned(s, conn, rc, 200, "text/plain; charset=utf-8", strdup(msg), (size_t)n, false);
}

/* POST /v1/messages/count_tokens (Anthropic's): {"input_tokens": N}, the
 * prompt the same body would render to for /v1/messages. */
static enum MHD_Result count_tokens(srv_server *s, struct MHD_Connection *conn, req_ctx *rc, const json_t *body) {
    json_t *chat;
    srv_api_error err;
    size_t n;
    if (srv_messages_count_chat(&s->parse, body, &chat, &err))
        return send_error_as(s, conn, rc, &srv_messages_api, &err);
    int crc = srv_count_chat_prompt(&s->parse, chat, &n, &err);
    json_decref(chat);
    if (crc) return send_error_as(s, conn, rc, &srv_messages_api, &err);
    json_t *o = json_pack("{s:I}", "input_tokens", (json_int_t)n);
    char *out = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return send_json(s, conn, rc, 200, out, out ? strlen(out) : 0);
}

static enum MHD_Result detokenize(srv_server *s, struct MHD_Connection *conn, req_ctx *rc, const json_t *body) {
    int32_t *ids;
    size_t n;
    srv_api_error err;
    if (srv_parse_detokenize(&s->parse, body, &ids, &n, &err)) return send_error(s, conn, rc, &err);
    char *text = NULL;
    size_t text_len = 0;
    pdl_error pe;
    int drc = pdl_detokenize(s->model, ids, n, &text, &text_len, &pe);
    free(ids);
    if (drc) return fail(s, conn, rc, 400, NULL, NULL, "%s", pe.message);
    size_t len;
    char *out = srv_detokenize_body(text, text_len, &len);
    free(text);
    return send_json(s, conn, rc, 200, out, len);
}

/* ---- routing ------------------------------------------------------------------------------ */

/* src/server/chat_page.html, built in (cmake/embed_file.cmake) */
extern const unsigned char srv_chat_page[];
extern const size_t srv_chat_page_len;

typedef enum route {
    R_NONE = 0, R_HEALTH, R_METRICS, R_MODELS, R_MODEL, R_COMPLETIONS, R_CHAT, R_RESPONSES, R_INFILL, R_MESSAGES,
    R_COUNT_TOKENS, R_TOKENIZE, R_DETOKENIZE, R_EMBEDDINGS, R_RERANK, R_SCORE, R_CHAT_PAGE, R_LOAD_LORA,
    R_UNLOAD_LORA
} route;

static route find_route(const char *url, const char **method_wanted) {
    static const struct {
        const char *path;
        route r;
        const char *method;
    } table[] = {
        {"/health", R_HEALTH, "GET"},           {"/metrics", R_METRICS, "GET"},
        {"/", R_CHAT_PAGE, "GET"},
        {"/v1/models", R_MODELS, "GET"},        {"/v1/completions", R_COMPLETIONS, "POST"},
        {"/v1/chat/completions", R_CHAT, "POST"}, {"/tokenize", R_TOKENIZE, "POST"},
        {"/detokenize", R_DETOKENIZE, "POST"},  {"/v1/responses", R_RESPONSES, "POST"},
        {"/infill", R_INFILL, "POST"}, /* llama-server's */
        {"/v1/messages", R_MESSAGES, "POST"},   {"/v1/messages/count_tokens", R_COUNT_TOKENS, "POST"},
        {"/v1/embeddings", R_EMBEDDINGS, "POST"},
        {"/v1/rerank", R_RERANK, "POST"},       {"/rerank", R_RERANK, "POST"}, /* vLLM's and llama-server's */
        {"/v1/score", R_SCORE, "POST"},         {"/score", R_SCORE, "POST"},
        {"/v1/load_lora_adapter", R_LOAD_LORA, "POST"}, {"/v1/unload_lora_adapter", R_UNLOAD_LORA, "POST"},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (strcmp(url, table[i].path) == 0) {
            *method_wanted = table[i].method;
            return table[i].r;
        }
    if (strncmp(url, "/v1/models/", 11) == 0 && url[11]) {
        *method_wanted = "GET";
        return R_MODEL;
    }
    return R_NONE;
}

/* The API whose error shape a path's answers take: Anthropic's under
 * /v1/messages, else OpenAI's (NULL). */
static const srv_adapter_ops *errors_of(const char *url) {
    return strncmp(url, "/v1/messages", 12) == 0 && (url[12] == '\0' || url[12] == '/') ? &srv_messages_api : NULL;
}

static enum MHD_Result dispatch(srv_server *s, struct MHD_Connection *conn, req_ctx *rc, const char *url,
                                const char *method) {
    const char *want = NULL;
    route r = find_route(url, &want);
    const srv_adapter_ops *shape = errors_of(url);
    srv_api_error e;
    if (r == R_NONE) {
        srv_api_fail(&e, 404, NULL, "no such endpoint: %.200s", url);
        return send_error_as(s, conn, rc, shape, &e);
    }
    bool head = strcmp(method, "HEAD") == 0 && strcmp(want, "GET") == 0;
    if (strcmp(method, want) != 0 && !head) {
        srv_api_fail(&e, 405, NULL, "method %.16s is not allowed for %.200s; use %s", method, url, want);
        return send_error_as(s, conn, rc, shape, &e);
    }
    srv_state st = srv_state_now(s);
    if (r == R_HEALTH)
        return send_owned(s, conn, rc, st == SRV_READY ? 200 : 503, "text/plain", strdup(""), 0, st == SRV_STOPPING);
    if (r == R_CHAT_PAGE) { /* static, before the API key: the page sends the key with its calls */
        char *page = malloc(srv_chat_page_len + 1);
        if (page) memcpy(page, srv_chat_page, srv_chat_page_len + 1);
        return page ? send_owned(s, conn, rc, 200, "text/html; charset=utf-8", page, srv_chat_page_len, false)
                    : fail(s, conn, rc, 500, NULL, NULL, "%s", "out of memory");
    }
    if (r == R_METRICS) {
        size_t len;
        char *text = srv_metrics_render(s->metrics, &len);
        return send_owned(s, conn, rc, 200, "text/plain; version=0.0.4; charset=utf-8", text, len, false);
    }
    if (!authorized(s, conn)) {
        srv_api_fail(&e, 401, NULL, "Incorrect API key provided. Send it as 'Authorization: Bearer KEY' (or "
                     "'x-api-key: KEY').");
        e.code = "invalid_api_key";
        return send_error_as(s, conn, rc, shape, &e);
    }
    if (st != SRV_READY) {
        const char *why = st == SRV_LOADING ? "the model is still loading" : st == SRV_STOPPING
                                                                              ? "the server is shutting down"
                                                                              : "the model failed to load";
        srv_api_fail(&e, 503, NULL, "%s", why);
        e.type = "service_unavailable";
        return send_error_as(s, conn, rc, shape, &e);
    }
    if (rc->too_large && srv_check_body_size((size_t)rc->received, s->max_body, &e))
        return send_error_as(s, conn, rc, shape, &e);
    if ((r == R_MODELS || r == R_MODEL) && s->loras) { /* the adapters too, "parent": the base model */
        size_t len;
        char *out = srv_loras_models_body(s->loras, s->model_name, s->model_path, s->parse.ctx_len, s->created,
                                          r == R_MODEL ? url + 11 : NULL, &len);
        if (out) return send_json(s, conn, rc, 200, out, len);
        srv_api_fail(&e, 404, "model", "The model `%.200s` does not exist.", url + 11);
        e.code = "model_not_found";
        return send_error(s, conn, rc, &e);
    }
    if (r == R_MODELS || r == R_MODEL) {
        if (r == R_MODEL && strcmp(url + 11, s->model_name) != 0) {
            srv_api_fail(&e, 404, "model", "The model `%.200s` does not exist.", url + 11);
            e.code = "model_not_found";
            return send_error(s, conn, rc, &e);
        }
        size_t len;
        char *out = srv_models_body(s->model_name, s->model_path, s->parse.ctx_len, s->created, r == R_MODELS, &len);
        return send_json(s, conn, rc, 200, out, len);
    }
    json_t *body;
    if (srv_parse_json(rc->body.data, rc->body.len, s->max_body, &body, &e))
        return send_error_as(s, conn, rc, shape, &e);
    enum MHD_Result res;
    switch (r) {
    case R_COMPLETIONS: res = generate(s, conn, rc, body, SRV_API_COMPLETION, NULL); break;
    case R_CHAT: res = generate(s, conn, rc, body, SRV_API_CHAT, NULL); break;
    case R_RESPONSES: res = generate(s, conn, rc, body, SRV_API_CHAT, &srv_responses_api); break;
    case R_INFILL: res = generate(s, conn, rc, body, SRV_API_INFILL, NULL); break;
    case R_EMBEDDINGS: res = generate(s, conn, rc, body, SRV_API_EMBEDDINGS, NULL); break;
    case R_RERANK: res = generate(s, conn, rc, body, SRV_API_RERANK, NULL); break;
    case R_SCORE: res = generate(s, conn, rc, body, SRV_API_SCORE, NULL); break;
    case R_MESSAGES: res = generate(s, conn, rc, body, SRV_API_CHAT, &srv_messages_api); break;
    case R_COUNT_TOKENS: res = count_tokens(s, conn, rc, body); break;
    case R_LOAD_LORA:
    case R_UNLOAD_LORA: res = lora_adapter(s, conn, rc, body, r == R_LOAD_LORA); break;
    case R_TOKENIZE: res = tokenize(s, conn, rc, body); break;
    default: res = detokenize(s, conn, rc, body); break;
    }
    json_decref(body);
    return res;
}

/* Counts the request's framing headers (MHD keeps every copy of a header). */
typedef struct framing {
    int content_length;      /* Content-Length fields */
    bool lengths_differ;     /* with different values */
    const char *first_length;
    bool transfer_encoding;
    char codings[200];       /* every Transfer-Encoding field's value, joined by ", " (cut at 199 bytes) */
} framing;

static enum MHD_Result count_framing(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
    (void)kind;
    framing *f = cls;
    if (strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH) == 0) {
        if (f->content_length++ == 0) f->first_length = value;
        else if (strcmp(value ? value : "", f->first_length ? f->first_length : "") != 0) f->lengths_differ = true;
    } else if (strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING) == 0) {
        size_t n = strlen(f->codings);
        snprintf(f->codings + n, sizeof f->codings - n, "%s%s", f->transfer_encoding ? ", " : "", value ? value : "");
        f->transfer_encoding = true;
    }
    return MHD_YES;
}

/* The Transfer-Encoding fields' value: what MHD frames is exactly one field
 * "chunked" (in any case, nothing around it). Returns 0 for that, else the
 * status to answer (RFC 9112 sections 6.1 and 6.3): 400 when chunked is not
 * the last coding, or comes twice, since the body's length cannot be known
 * (this takes in "identity", which is no longer a transfer coding); 501 for
 * a coding applied before chunked (gzip, deflate, ...), which the server
 * does not implement; 400 for chunked alone written with spaces or commas
 * around it, which MHD would not frame. */
static int transfer_coding_status(const char *codings, char *why, size_t cap) {
    int n = 0, n_chunked = 0;
    bool last_chunked = false;
    for (const char *p = codings; *p;) {
        while (*p == ' ' || *p == '\t' || *p == ',') p++;
        if (!*p) break;
        const char *e = p;
        while (*e && *e != ',') e++;
        size_t len = (size_t)(e - p);
        while (len && (p[len - 1] == ' ' || p[len - 1] == '\t')) len--;
        last_chunked = len == 7 && strncasecmp(p, "chunked", 7) == 0;
        n_chunked += last_chunked;
        n++;
        p = e;
    }
    if (n == 1 && last_chunked) {
        if (strcasecmp(codings, "chunked") == 0) return 0;
        snprintf(why, cap, "the request's Transfer-Encoding '%.120s' is not framed: write it as 'Transfer-Encoding: "
                 "chunked', one field, nothing around the coding", codings);
        return 400;
    }
    if (!last_chunked || n_chunked > 1) {
        snprintf(why, cap, "the request's Transfer-Encoding '%.120s' does not end in one chunked coding, so its "
                 "body's length cannot be determined; send Content-Length, or Transfer-Encoding: chunked", codings);
        return 400;
    }
    snprintf(why, cap,
             "the request's Transfer-Encoding '%.120s' is not implemented: only chunked is; send the body without "
             "other codings", codings);
    return 501;
}

/* RFC 9112 section 6.3: a request whose body length is ambiguous (Content-
 * Length fields that disagree, or one beside Transfer-Encoding) cannot be
 * framed; it gets 400 and the connection closes (no request smuggling). So
 * does a Transfer-Encoding other than chunked alone, with 400 or 501
 * (transfer_coding_status): MHD would otherwise wait for a body it cannot
 * frame until the idle timeout. Returns the status (0: framed), *why the
 * message. */
static int bad_framing(struct MHD_Connection *conn, char *why, size_t cap) {
    framing f = {0};
    MHD_get_connection_values(conn, MHD_HEADER_KIND, count_framing, &f);
    if (f.lengths_differ) {
        snprintf(why, cap, "the request has Content-Length fields with different values");
        return 400;
    }
    if (f.content_length > 0 && f.transfer_encoding) {
        snprintf(why, cap, "the request has both Content-Length and Transfer-Encoding");
        return 400;
    }
    return f.transfer_encoding ? transfer_coding_status(f.codings, why, cap) : 0;
}

/* A chunked body that passed HARD_BODY_LIMIT: MHD takes no response in the
 * middle of an upload (MHD_queue_response refuses one) and the body's end
 * is not in sight, so the 413 is written to the socket here, as MHD would
 * write it, then the sending side is shut and what the client still sends
 * is read and dropped for up to LINGER_S (a lingering close: closing with
 * unread bytes resets the connection, and a reset can destroy the answer
 * before the client reads it). MHD then closes the connection. */
#define LINGER_S 2.0

static void send_413_mid_upload(srv_server *s, struct MHD_Connection *conn, req_ctx *rc) {
    int fd = conn_fd(conn);
    srv_api_error e;
    srv_check_body_size((size_t)rc->received, s->max_body, &e);
    size_t blen;
    char *body = srv_error_body(&e, &blen);
    rc->status = 413;
    if (fd < 0 || !body) {
        free(body);
        return;
    }
    char head[512];
    int hlen = snprintf(head, sizeof head, "HTTP/1.1 413 Content Too Large\r\nConnection: close\r\nContent-Type: "
                        "application/json\r\n" REPLICA_HEADER ": %s\r\nContent-Length: %zu\r\n\r\n", s->replica_name,
                        blen);
    double deadline = now_s() + LINGER_S;
    const char *parts[2] = {head, body};
    size_t lens[2] = {hlen > 0 && (size_t)hlen < sizeof head ? (size_t)hlen : 0, blen};
    bool sent = lens[0] > 0;
    for (int i = 0; i < 2 && sent; i++)
        for (size_t off = 0; off < lens[i] && sent;) {
            ssize_t w = send(fd, parts[i] + off, lens[i] - off, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (w > 0) {
                off += (size_t)w;
                continue;
            }
            struct pollfd p = {.fd = fd, .events = POLLOUT};
            int left_ms = (int)((deadline - now_s()) * 1e3);
            sent = w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) && left_ms > 0 &&
                   poll(&p, 1, left_ms) >= 0;
        }
    free(body);
    if (!sent) return;
    shutdown(fd, SHUT_WR);
    char sink[16384];
    for (;;) {
        int left_ms = (int)((deadline - now_s()) * 1e3);
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (left_ms <= 0 || poll(&p, 1, left_ms) <= 0) break;
        ssize_t r = recv(fd, sink, sizeof sink, MSG_DONTWAIT);
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) break;
    }
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_data_size,
                                  void **con_cls) {
    srv_server *s = cls;
    req_ctx *rc = *con_cls;
    if (!rc) {
        rc = calloc(1, sizeof *rc);
        if (!rc) return MHD_NO;
        rc->t_start = now_s();
        srv_request_begin(s);
        snprintf(rc->method, sizeof rc->method, "%s", method);
        snprintf(rc->path, sizeof rc->path, "%s", url);
        rc->http11 = version && strcmp(version, MHD_HTTP_VERSION_1_1) == 0;
        *con_cls = rc;
        char why[400];
        int bad = bad_framing(conn, why, sizeof why);
        if (bad) {
            srv_api_error e;
            srv_api_fail(&e, bad, NULL, "%s", why);
            e.type = "invalid_request_error"; /* a 501 too: what the request asks for, not a server failure */
            size_t len;
            char *body = srv_error_body(&e, &len);
            return send_owned(s, conn, rc, bad, "application/json", body, len, true);
        }
        const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl && strtoull(cl, NULL, 10) > HARD_BODY_LIMIT) {
            rc->received = strtoull(cl, NULL, 10);
            rc->too_large = true;
            srv_api_error e;
            srv_check_body_size((size_t)rc->received, s->max_body, &e);
            return send_error(s, conn, rc, &e);
        }
        return MHD_YES;
    }
    if (*upload_data_size > 0) {
        rc->received += *upload_data_size;
        if (rc->received > s->max_body) {
            /* keep reading (and dropping) so that the client gets the 413 */
            rc->too_large = true;
            sbuf_free(&rc->body);
            if (rc->received > HARD_BODY_LIMIT) {
                send_413_mid_upload(s, conn, rc); /* only a chunked body gets here: a length says so at once */
                return MHD_NO;
            }
        } else {
            sbuf_append(&rc->body, upload_data, *upload_data_size);
            if (rc->body.oom) return MHD_NO;
        }
        *upload_data_size = 0;
        return MHD_YES;
    }
    return dispatch(s, conn, rc, url, method);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls, enum MHD_RequestTerminationCode why) {
    (void)conn;
    srv_server *s = cls;
    req_ctx *rc = *con_cls;
    if (!rc) return;
    if (s->log_requests)
        srv_log(s, "%s %s %d %.1f ms%s", rc->method, rc->path, rc->status, (now_s() - rc->t_start) * 1e3,
                why == MHD_REQUEST_TERMINATED_COMPLETED_OK ? "" : " (connection ended early)");
    sbuf_free(&rc->body);
    free(rc);
    *con_cls = NULL;
    srv_request_end(s);
}

static void mhd_log(void *cls, const char *fmt, va_list ap) {
    srv_server *s = cls;
    char line[512];
    vsnprintf(line, sizeof line, fmt, ap);
    size_t n = strlen(line);
    while (n && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = '\0';
    srv_log(s, "http: %s", line);
}

struct MHD_Daemon *srv_http_start(srv_server *s, const void *addr, bool ipv6, pdl_error *err) {
    unsigned int flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL | MHD_USE_ITC |
                         MHD_USE_ERROR_LOG;
    if (ipv6) flags |= MHD_USE_IPv6;
    struct MHD_Daemon *d = MHD_start_daemon(flags, 0, NULL, NULL, on_request, s,
                                            MHD_OPTION_EXTERNAL_LOGGER, mhd_log, s,
                                            MHD_OPTION_SOCK_ADDR, addr,
                                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                                            MHD_OPTION_CONNECTION_TIMEOUT, s->keep_alive_s,
                                            MHD_OPTION_CONNECTION_LIMIT, (unsigned int)1024,
                                            MHD_OPTION_LISTEN_BACKLOG_SIZE, (unsigned int)512,
                                            MHD_OPTION_END);
    if (!d) err_fail(err, "cannot listen (address in use, or not allowed?)");
    return d;
}
