/*
 * router.c - the multi-model supervisor and reverse proxy (router.h): one
 * `pagedlm serve` child per loaded model, requests proxied by their "model".
 *
 * Threads: libmicrohttpd runs one thread per client connection, so a request
 * that waits for its model to load blocks only its own connection; the
 * supervisor thread alone forks children (PR_SET_PDEATHSIG is tied to the
 * thread that forked, and this one lives as long as the router), reaps them,
 * polls a loading child's /health, applies the LRU and idle rules and kills
 * children on the way out; one reader thread per child copies its stderr to
 * ours with a "[name] " prefix, remembers its last line (for the error of a
 * failed load) and takes the port from its "listening on" line. Every
 * model's state is under one mutex; its condition variable wakes both the
 * supervisor and the requests that wait for a load.
 *
 * Proxying: the request goes to the child as it came (method, path, query,
 * headers other than hop-by-hop ones, body) on a fresh connection with
 * "Connection: close"; the answer's status and headers are read while the
 * client's socket is watched, then the body is handed to MHD by a callback
 * response whose reader returns each piece the child sends (its chunked
 * framing undone; MHD frames it again), so Server-Sent Events pass through
 * event by event. A client that hangs up (its FIN or a reset) ends the
 * upstream connection at once, which the child takes as an abort. Unlike
 * the child's own server, a client that half-closes its socket is taken as
 * gone.
 */
#define _GNU_SOURCE /* POLLRDHUP, pipe2, SOCK_CLOEXEC */
#include "server/router.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "net/http_client.h"
#include "server/sbuf.h"
#include "util/error.h"

#define TICK_MS 50          /* the supervisor's period */
#define LOADING_TICK_MS 10  /* ... while a model loads */
#define WAIT_MS 100         /* how often a waiting request looks at its client */
#define PROXY_BLOCK 16384   /* bytes per body piece handed to MHD */
#define KILL_EXTRA_S 2.0    /* past the grace period, before SIGKILL */
#define LAST_LINE 512
#define PROBE_S 0.25        /* a loading child's /health this often (and at each line it prints) */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef enum mstate { M_UNLOADED = 0, M_LOADING, M_LOADED } mstate;
static const char *const STATE_NAME[] = {"unloaded", "loading", "loaded"};

typedef struct rt_model rt_model;

/* One child process, from fork to reaping (it outlives its model's interest
 * in it while it drains after SIGTERM). */
typedef struct rt_child {
    struct rt_router *r;
    rt_model *m;           /* whose child it is; the name stays valid (the spec list outlives us) */
    pid_t pid;
    int err_fd;            /* read end of its stderr */
    pthread_t reader;
    int port;              /* from its "listening on" line; 0 until then */
    bool exited;
    int status;            /* waitpid's */
    double t_term;         /* when SIGTERM went; 0 = not stopping */
    bool killed;           /* SIGKILL sent */
    double t_probe;        /* the last GET /health */
    unsigned long lines, lines_probed; /* stderr lines (other than probes' logs) seen, and when last probed */
    char last_error[LAST_LINE]; /* the last line starting "error:" */
    char last_line[LAST_LINE];
    struct rt_child *next;
} rt_child;

struct rt_model {
    const rt_model_spec *spec;
    mstate state;
    rt_child *child;       /* while loading or loaded */
    bool want;             /* a request or POST /models/load waits for it */
    int in_flight;
    double last_used;
    double t_load_start;
    unsigned long long attempts;   /* load attempts ended (success or failure): waiters see theirs end */
    bool failed;                   /* the last load failed */
    int exit_code;                 /* ... with this exit status (-1: a signal or a timeout) */
    char error[LAST_LINE + 160];
    /* counters for /metrics */
    unsigned long long n_requests, n_loads, n_load_failures, n_unloads, n_crashes;
    double load_seconds_total;
};

struct rt_router {
    rt_options o;
    rt_model *models;
    int n;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t supervisor;
    bool stopping;
    rt_child *children;
    struct MHD_Daemon *d;
    int port;
    long long created;     /* the model list's "created": when the router started */
};

static void rt_log(rt_router *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void rt_log(rt_router *r, const char *fmt, ...) {
    if (!r->o.log) return;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    r->o.log(line, r->o.log_user);
}

/* ---- children ----------------------------------------------------------------------- */

/* Copies the child's stderr to ours, line by line. */
static void *reader_main(void *arg) {
    rt_child *c = arg;
    rt_router *r = c->r;
    char buf[4096], line[LAST_LINE];
    size_t ll = 0;
    bool over = false;
    for (;;) {
        ssize_t n = read(c->err_fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        for (ssize_t i = 0; i < n; i++) {
            if (buf[i] != '\n') {
                if (ll + 1 < sizeof line) line[ll++] = buf[i];
                else over = true;
                continue;
            }
            line[ll] = '\0';
            fprintf(stderr, "[%s] %s%s\n", c->m->spec->name, line, over ? "..." : "");
            const char *l = strstr(line, "listening on http://127.0.0.1:");
            pthread_mutex_lock(&r->mu);
            if (l && !c->port) c->port = atoi(l + strlen("listening on http://127.0.0.1:"));
            if (ll) memcpy(c->last_line, line, ll + 1);
            if (strncmp(line, "error:", 6) == 0) memcpy(c->last_error, line, ll + 1);
            /* a line other than the log of our own probe (such as "model ... loaded"): the
               supervisor probes /health again at once, instead of at its next period */
            if (!strstr(line, " GET /health ")) {
                c->lines++;
                pthread_cond_broadcast(&r->cv);
            }
            pthread_mutex_unlock(&r->mu);
            ll = 0;
            over = false;
        }
    }
    close(c->err_fd);
    c->err_fd = -1;
    return NULL;
}

/* Forks and execs `pagedlm serve` for m (supervisor thread, lock held). */
static rt_child *spawn_child(rt_router *r, rt_model *m, pdl_error *err) {
    const rt_model_spec *sp = m->spec;
    int argc = 0, cap = 12 + r->o.n_common_args + sp->n_args + 2;
    char **argv = calloc((size_t)cap, sizeof *argv);
    rt_child *c = calloc(1, sizeof *c);
    int pfd[2] = {-1, -1};
    if (!argv || !c || pipe2(pfd, O_CLOEXEC) != 0) {
        free(argv);
        free(c);
        err_fail(err, "cannot start a child: %s", strerror(errno));
        return NULL;
    }
    argv[argc++] = (char *)r->o.exe;
    argv[argc++] = "serve";
    argv[argc++] = "--model";
    argv[argc++] = sp->path;
    argv[argc++] = "--host";
    argv[argc++] = "127.0.0.1";
    argv[argc++] = "--port";
    argv[argc++] = "0";
    argv[argc++] = "--served-model-name";
    argv[argc++] = sp->name;
    for (int i = 0; i < r->o.n_common_args; i++) argv[argc++] = r->o.common_args[i];
    for (int i = 0; i < sp->n_args; i++) argv[argc++] = sp->args[i];
    argv[argc] = NULL;
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) {
        /* only async-signal-safe calls from here to exec */
        setpgid(0, 0); /* a terminal's ^C reaches the router only; it stops the children */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(127); /* the router died before prctl */
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        signal(SIGPIPE, SIG_DFL);
        int dn = open("/dev/null", O_RDWR);
        if (dn >= 0) {
            dup2(dn, 0);
            dup2(dn, 1);
        }
        dup2(pfd[1], 2);
        execv(r->o.exe, argv);
        static const char msg[] = "pagedlm router: exec of the pagedlm binary failed\n";
        ssize_t w = write(2, msg, sizeof msg - 1);
        (void)w;
        _exit(127);
    }
    free(argv);
    close(pfd[1]);
    if (pid < 0) {
        close(pfd[0]);
        free(c);
        err_fail(err, "fork failed: %s", strerror(errno));
        return NULL;
    }
    c->r = r;
    c->m = m;
    c->pid = pid;
    c->err_fd = pfd[0];
    if (pthread_create(&c->reader, NULL, reader_main, c) != 0) {
        /* without a reader nobody drains its stderr: stop it now */
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        close(pfd[0]);
        free(c);
        err_fail(err, "cannot start a thread");
        return NULL;
    }
    c->next = r->children;
    r->children = c;
    return c;
}

/* GET /health of a child: its HTTP status, or -1. */
static int probe_health(int port) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    struct timeval tv = {.tv_sec = 1, .tv_usec = 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int status = -1;
    static const char req[] = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        send(fd, req, sizeof req - 1, MSG_NOSIGNAL) == (ssize_t)(sizeof req - 1)) {
        char buf[64];
        size_t have = 0;
        while (have < sizeof buf - 1) {
            ssize_t n = recv(fd, buf + have, sizeof buf - 1 - have, 0);
            if (n <= 0) break;
            have += (size_t)n;
            buf[have] = '\0';
            if (strstr(buf, "\r\n")) break;
        }
        buf[have] = '\0';
        if (sscanf(buf, "HTTP/1.%*d %d", &status) != 1) status = -1;
    }
    close(fd);
    return status;
}

/* SIGTERM to m's child; m is unloaded from now on (lock held). */
static void stop_model(rt_router *r, rt_model *m, const char *why) {
    rt_child *c = m->child;
    if (!c) return;
    rt_log(r, "router: stopping %s (%s)", m->spec->name, why);
    if (!c->exited) kill(c->pid, SIGTERM);
    c->t_term = now_s();
    if (m->state == M_LOADING) {
        m->failed = true;
        m->exit_code = -1;
        snprintf(m->error, sizeof m->error, "model %s was stopped while loading (%s)", m->spec->name, why);
        m->attempts++;
    } else {
        m->n_unloads++;
    }
    m->child = NULL;
    m->state = M_UNLOADED;
    pthread_cond_broadcast(&r->cv);
}

static int running_children(rt_router *r) {
    int n = 0;
    for (rt_child *c = r->children; c; c = c->next) n += !c->exited;
    return n;
}

/* Reaps exited children; joins their readers with the lock dropped. */
static void reap(rt_router *r) {
    for (rt_child **pp = &r->children; *pp;) {
        rt_child *c = *pp;
        if (!c->exited) {
            int st;
            pid_t w = waitpid(c->pid, &st, WNOHANG);
            if (w == c->pid) {
                c->exited = true;
                c->status = st;
            }
        }
        if (!c->exited) {
            pp = &c->next;
            continue;
        }
        *pp = c->next;
        pthread_mutex_unlock(&r->mu);
        pthread_join(c->reader, NULL); /* the pipe is at its end: the last line is in */
        pthread_mutex_lock(&r->mu);
        rt_model *m = c->m;
        int code = WIFEXITED(c->status) ? WEXITSTATUS(c->status) : -1;
        char how[64];
        if (WIFEXITED(c->status)) snprintf(how, sizeof how, "exit status %d", code);
        else snprintf(how, sizeof how, "signal %d", WIFSIGNALED(c->status) ? WTERMSIG(c->status) : 0);
        if (m->child == c) {
            if (m->state == M_LOADING) {
                m->failed = true;
                m->exit_code = code;
                m->n_load_failures++;
                m->attempts++;
                snprintf(m->error, sizeof m->error, "model %s failed to load (%s): %s", m->spec->name, how,
                         c->last_error[0] ? c->last_error : c->last_line[0] ? c->last_line : "(no message)");
                rt_log(r, "router: %s", m->error);
            } else {
                m->n_crashes++;
                m->n_unloads++;
                rt_log(r, "router: the server of %s ended (%s); it starts again on the next request", m->spec->name,
                       how);
            }
            m->child = NULL;
            m->state = M_UNLOADED;
            pthread_cond_broadcast(&r->cv);
        } else if (!r->stopping) {
            rt_log(r, "router: stopped server of %s ended (%s)", m->spec->name, how);
        }
        free(c);
        pthread_cond_broadcast(&r->cv);
    }
}

static void lru_view(rt_router *r, rt_lru_entry *e) {
    for (int i = 0; i < r->n; i++) {
        rt_model *m = &r->models[i];
        e[i] = (rt_lru_entry){.running = m->state != M_UNLOADED, .loaded = m->state == M_LOADED,
                              .in_flight = m->in_flight, .last_used = m->last_used};
    }
}

/* One pass of the supervisor (lock held); whether a model is loading. */
static bool supervise(rt_router *r) {
    double now = now_s();
    reap(r);
    double load_timeout = r->o.load_timeout_s > 0 ? r->o.load_timeout_s : 600;
    double kill_after = (r->o.shutdown_grace_s > 0 ? r->o.shutdown_grace_s : 0) + KILL_EXTRA_S;
    for (rt_child *c = r->children; c; c = c->next)
        if (c->t_term > 0 && !c->killed && now - c->t_term > kill_after) {
            rt_log(r, "router: the server of %s did not stop within %.0f s: SIGKILL", c->m->spec->name, kill_after);
            kill(c->pid, SIGKILL);
            c->killed = true;
        }
    if (r->stopping) return false;
    rt_lru_entry *e = malloc((size_t)r->n * sizeof *e);
    for (int i = 0; i < r->n; i++) {
        rt_model *m = &r->models[i];
        now = now_s();
        if (m->state == M_LOADING && m->child && m->child->port > 0 &&
            (m->child->lines != m->child->lines_probed || now - m->child->t_probe >= PROBE_S)) {
            int port = m->child->port;
            m->child->t_probe = now;
            m->child->lines_probed = m->child->lines;
            pthread_mutex_unlock(&r->mu);
            int st = probe_health(port);
            pthread_mutex_lock(&r->mu);
            if (st == 200 && m->state == M_LOADING && m->child && m->child->port == port) {
                double dt = now_s() - m->t_load_start;
                m->state = M_LOADED;
                m->failed = false;
                m->exit_code = 0;
                m->n_loads++;
                m->load_seconds_total += dt;
                m->last_used = now_s();
                m->attempts++;
                rt_log(r, "router: %s loaded in %.2f s (pid %d, port %d)", m->spec->name, dt, (int)m->child->pid,
                       port);
                pthread_cond_broadcast(&r->cv);
            }
        }
        if (m->state == M_LOADING && now - m->t_load_start > load_timeout) {
            stop_model(r, m, "no answer on /health in time");
            m->n_load_failures++;
        }
        if (m->state == M_LOADED && r->o.sleep_idle_s > 0 && m->in_flight == 0 &&
            now - m->last_used >= r->o.sleep_idle_s)
            stop_model(r, m, "idle");
        if (m->want && m->state == M_UNLOADED) {
            if (r->o.max_loaded > 0) {
                /* stopping children still hold their memory: they count until they exit */
                int busy = running_children(r);
                if (busy >= r->o.max_loaded && e) {
                    lru_view(r, e);
                    int v = rt_pick_lru(e, r->n, i);
                    if (v >= 0) stop_model(r, &r->models[v], "least recently used, at --max-loaded-models");
                    continue; /* started once the stopped one has exited */
                }
            }
            pdl_error err;
            rt_child *c = spawn_child(r, m, &err);
            m->want = false;
            if (!c) {
                m->failed = true;
                m->exit_code = -1;
                m->attempts++;
                m->n_load_failures++;
                snprintf(m->error, sizeof m->error, "model %s: %.400s", m->spec->name, err.message);
                pthread_cond_broadcast(&r->cv);
                continue;
            }
            m->child = c;
            m->state = M_LOADING;
            m->t_load_start = now_s();
            rt_log(r, "router: loading %s (pid %d)", m->spec->name, (int)c->pid);
            pthread_cond_broadcast(&r->cv);
        }
    }
    free(e);
    bool loading = false;
    for (int i = 0; i < r->n; i++) loading |= r->models[i].state == M_LOADING || r->models[i].want;
    return loading;
}

static void *supervisor_main(void *arg) {
    rt_router *r = arg;
    pthread_mutex_lock(&r->mu);
    while (!r->stopping) {
        bool loading = supervise(r);
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += (loading ? LOADING_TICK_MS : TICK_MS) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&r->cv, &r->mu, &ts);
    }
    /* stopping: every child gets SIGTERM, then SIGKILL past the grace period */
    for (int i = 0; i < r->n; i++) {
        rt_model *m = &r->models[i];
        if (m->child) stop_model(r, m, "the router stops");
    }
    while (r->children) {
        supervise(r);
        if (!r->children) break;
        pthread_mutex_unlock(&r->mu);
        usleep(TICK_MS * 1000);
        pthread_mutex_lock(&r->mu);
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

/* ---- HTTP: the router's own answers ---------------------------------------------------------- */

typedef struct req_ctx {
    sbuf body;
    uint64_t received;
    bool too_large;
} req_ctx;

static enum MHD_Result send_text(struct MHD_Connection *conn, int status, const char *ctype, char *body, size_t len) {
    if (!body) return MHD_NO;
    struct MHD_Response *resp = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    if (status == 401) MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    enum MHD_Result res = MHD_queue_response(conn, (unsigned int)status, resp);
    MHD_destroy_response(resp);
    return res;
}

static enum MHD_Result send_jsonv(struct MHD_Connection *conn, int status, json_t *v) {
    char *s = v ? json_dumps(v, JSON_COMPACT) : NULL;
    json_decref(v);
    return send_text(conn, status, "application/json", s, s ? strlen(s) : 0);
}

/* OpenAI's error shape. */
static enum MHD_Result send_error(struct MHD_Connection *conn, int status, const char *type, const char *param,
                                  const char *code, const char *fmt, ...) __attribute__((format(printf, 6, 7)));
static enum MHD_Result send_error(struct MHD_Connection *conn, int status, const char *type, const char *param,
                                  const char *code, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    json_t *e = json_pack("{s:{s:s, s:s, s:o, s:o}}", "error", "message", msg, "type", type, "param",
                          param ? json_string(param) : json_null(), "code", code ? json_string(code) : json_null());
    return send_jsonv(conn, status, e);
}

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

static bool authorized(rt_router *r, struct MHD_Connection *conn) {
    if (!r->o.api_key) return true;
    const char *auth = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (auth && strncasecmp(auth, "Bearer ", 7) == 0 && key_matches(r->o.api_key, auth + 7)) return true;
    return key_matches(r->o.api_key, MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "x-api-key"));
}

static json_t *model_entry(rt_router *r, rt_model *m) {
    json_t *args = json_array();
    for (int j = 0; j < r->o.n_common_args; j++) json_array_append_new(args, json_string(r->o.common_args[j]));
    for (int j = 0; j < m->spec->n_args; j++) json_array_append_new(args, json_string(m->spec->args[j]));
    json_t *status = json_pack("{s:s, s:o}", "value", STATE_NAME[m->state], "args", args);
    if (m->failed && m->state == M_UNLOADED) {
        json_object_set_new(status, "failed", json_true());
        json_object_set_new(status, "exit_code", json_integer(m->exit_code));
        json_object_set_new(status, "error", json_string(m->error));
    }
    return json_pack("{s:s, s:s, s:I, s:s, s:s, s:o}", "id", m->spec->name, "object", "model", "created",
                     (json_int_t)r->created,
                     "owned_by", "pagedlm", "path", m->spec->path, "status", status);
}

static enum MHD_Result models_list(rt_router *r, struct MHD_Connection *conn) {
    json_t *data = json_array();
    pthread_mutex_lock(&r->mu);
    for (int i = 0; i < r->n; i++) json_array_append_new(data, model_entry(r, &r->models[i]));
    pthread_mutex_unlock(&r->mu);
    return send_jsonv(conn, 200, json_pack("{s:s, s:o}", "object", "list", "data", data));
}

static enum MHD_Result metrics(rt_router *r, struct MHD_Connection *conn) {
    sbuf b = {0};
    static const struct {
        const char *name, *type, *help;
    } rows[] = {
        {"pagedlm_router_requests_total", "counter", "Requests routed to the model."},
        {"pagedlm_router_requests_in_flight", "gauge", "Requests being proxied to the model now."},
        {"pagedlm_router_model_loaded", "gauge", "1 while the model's server is loaded, else 0."},
        {"pagedlm_router_loads_total", "counter", "Times the model's server started and answered /health."},
        {"pagedlm_router_load_failures_total", "counter", "Starts of the model's server that failed."},
        {"pagedlm_router_unloads_total", "counter", "Times the model's server was stopped or ended."},
        {"pagedlm_router_crashes_total", "counter", "Times the model's loaded server ended on its own."},
        {"pagedlm_router_load_seconds_total", "counter", "Seconds from start to /health 200, summed over loads."},
    };
    pthread_mutex_lock(&r->mu);
    for (size_t k = 0; k < sizeof rows / sizeof rows[0]; k++) {
        sbuf_printf(&b, "# HELP %s %s\n# TYPE %s %s\n", rows[k].name, rows[k].help, rows[k].name, rows[k].type);
        for (int i = 0; i < r->n; i++) {
            rt_model *m = &r->models[i];
            double v = k == 0 ? (double)m->n_requests : k == 1 ? m->in_flight : k == 2 ? m->state == M_LOADED
                     : k == 3 ? (double)m->n_loads : k == 4 ? (double)m->n_load_failures : k == 5 ? (double)m->n_unloads
                     : k == 6 ? (double)m->n_crashes : m->load_seconds_total;
            sbuf_printf(&b, "%s{model=\"%s\"} %.6g\n", rows[k].name, m->spec->name, v);
        }
    }
    pthread_mutex_unlock(&r->mu);
    if (b.oom) {
        sbuf_free(&b);
        return MHD_NO;
    }
    size_t len;
    char *text = sbuf_take(&b, &len);
    return send_text(conn, 200, "text/plain; version=0.0.4; charset=utf-8", text, len);
}

/* ---- waiting for a model ---------------------------------------------------------------------- */

static int conn_fd(struct MHD_Connection *conn) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? (int)ci->connect_fd : -1;
}

/* A client that closed (FIN) or reset its connection. */
static bool client_gone(int fd) {
    if (fd < 0) return false;
    struct pollfd p = {.fd = fd, .events = POLLRDHUP};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

typedef enum wait_result { W_LOADED = 0, W_FAILED, W_GONE, W_STOPPING } wait_result;

/* Waits (lock held) until m is loaded; with count, the request is counted in
 * flight at once (so that nobody stops the child before it is proxied to). */
static wait_result wait_loaded(rt_router *r, rt_model *m, int client, bool count, int *port, char *why,
                               size_t why_len) {
    unsigned long long attempts0 = m->attempts;
    for (;;) {
        if (r->stopping) return W_STOPPING;
        if (m->state == M_LOADED && m->child) {
            *port = m->child->port;
            if (count) m->in_flight++;
            m->last_used = now_s();
            return W_LOADED;
        }
        if (m->attempts != attempts0 && m->state == M_UNLOADED && m->failed) {
            snprintf(why, why_len, "%s", m->error);
            return W_FAILED;
        }
        if (m->state == M_UNLOADED && !m->want) {
            m->want = true;
            pthread_cond_broadcast(&r->cv);
        }
        if (client_gone(client)) return W_GONE;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += WAIT_MS * 1000000L;
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&r->cv, &r->mu, &ts);
    }
}

static void request_done(rt_router *r, rt_model *m) {
    pthread_mutex_lock(&r->mu);
    m->in_flight--;
    m->last_used = now_s();
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

/* ---- proxying ----------------------------------------------------------------------------------- */

typedef struct proxy {
    rt_router *r;
    rt_model *m;
    int up;            /* the connection to the child */
    int client;
    bool chunked;
    long long content_length; /* -1: unknown (chunked, or until the child closes) */
    long long received;
    bool done;
    http_chunked dec;
    char *pending;     /* body bytes read with the headers, not handed out yet */
    size_t pending_len, pending_off;
    char raw[PROXY_BLOCK];
} proxy;

typedef struct out_buf {
    char *p;
    size_t len;
} out_buf;

static int out_append(const char *data, size_t len, void *user) {
    out_buf *o = user;
    memcpy(o->p + o->len, data, len);
    o->len += len;
    return 0;
}

/* Raw bytes from the child -> decoded body bytes in out (at most n <= max). */
static ssize_t take(proxy *p, const char *raw, size_t n, char *out) {
    if (!p->chunked) {
        memcpy(out, raw, n);
        p->received += (long long)n;
        if (p->content_length >= 0 && p->received >= p->content_length) p->done = true;
        return (ssize_t)n;
    }
    out_buf o = {out, 0};
    int d = http_chunked_feed(&p->dec, raw, n, out_append, &o); /* decoded <= raw: fits */
    if (d < 0) return -1;
    if (d == 1) p->done = true;
    return (ssize_t)o.len;
}

static ssize_t proxy_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    proxy *p = cls;
    for (;;) {
        if (p->pending_off < p->pending_len) {
            size_t n = p->pending_len - p->pending_off;
            if (n > max) n = max;
            ssize_t got = take(p, p->pending + p->pending_off, n, buf);
            p->pending_off += n;
            if (got < 0) return MHD_CONTENT_READER_END_WITH_ERROR;
            if (got > 0) return got;
            continue;
        }
        if (p->done) return MHD_CONTENT_READER_END_OF_STREAM;
        struct pollfd fds[2] = {{.fd = p->up, .events = POLLIN}, {.fd = p->client, .events = POLLRDHUP}};
        int pr = poll(fds, p->client >= 0 ? 2 : 1, WAIT_MS);
        if (pr < 0 && errno != EINTR) return MHD_CONTENT_READER_END_WITH_ERROR;
        if (pr > 0 && p->client >= 0 && (fds[1].revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)))
            return MHD_CONTENT_READER_END_WITH_ERROR; /* the client left: closing up aborts the child's request */
        if (pr <= 0 || !(fds[0].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        size_t want = max < sizeof p->raw ? max : sizeof p->raw;
        ssize_t n = recv(p->up, p->raw, want, 0);
        if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (n < 0) return MHD_CONTENT_READER_END_WITH_ERROR;
        if (n == 0) { /* the child closed: the end only when the body said so (or had no length) */
            if (p->chunked || (p->content_length >= 0 && p->received < p->content_length))
                return MHD_CONTENT_READER_END_WITH_ERROR;
            return MHD_CONTENT_READER_END_OF_STREAM;
        }
        ssize_t got = take(p, p->raw, (size_t)n, buf);
        if (got < 0) return MHD_CONTENT_READER_END_WITH_ERROR;
        if (got > 0) return got;
    }
}

static void proxy_free(void *cls) {
    proxy *p = cls;
    close(p->up);
    request_done(p->r, p->m);
    free(p->pending);
    free(p);
}

static bool hop_by_hop(const char *k) {
    static const char *const names[] = {"Connection", "Keep-Alive", "Transfer-Encoding", "Content-Length", "Host",
                                        "TE", "Trailer", "Upgrade", "Expect", "Proxy-Connection", "Date"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcasecmp(k, names[i]) == 0) return true;
    return false;
}

static enum MHD_Result add_header(void *cls, enum MHD_ValueKind kind, const char *k, const char *v) {
    (void)kind;
    if (!hop_by_hop(k)) sbuf_printf(cls, "%s: %s\r\n", k, v ? v : "");
    return MHD_YES;
}

static void url_escape(sbuf *b, const char *s) {
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || strchr("-._~", c))
            sbuf_append(b, (const char *)&c, 1);
        else
            sbuf_printf(b, "%%%02X", c);
    }
}

typedef struct query_ctx {
    sbuf *b;
    bool first;
} query_ctx;

static enum MHD_Result add_query(void *cls, enum MHD_ValueKind kind, const char *k, const char *v) {
    (void)kind;
    query_ctx *q = cls;
    sbuf_append(q->b, q->first ? "?" : "&", 1);
    q->first = false;
    url_escape(q->b, k);
    if (v) {
        sbuf_append(q->b, "=", 1);
        url_escape(q->b, v);
    }
    return MHD_YES;
}

static int connect_child(int port) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static int send_all(int fd, const char *p, size_t n) {
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Sends the request to the child on port and answers the client with what
 * comes back. m has this request counted in flight; it is uncounted here on
 * every path. */
static enum MHD_Result proxy_request(rt_router *r, rt_model *m, int port, struct MHD_Connection *conn,
                                     const char *method, const char *url, const char *body, size_t body_len) {
    int client = conn_fd(conn);
    int up = connect_child(port);
    if (up < 0) {
        request_done(r, m);
        return send_error(conn, 502, "server_error", NULL, NULL, "cannot reach the server of model %s: %s",
                          m->spec->name, strerror(errno));
    }
    sbuf head = {0};
    sbuf_printf(&head, "%s %s", method, url);
    query_ctx q = {&head, true};
    MHD_get_connection_values(conn, MHD_GET_ARGUMENT_KIND, add_query, &q);
    sbuf_printf(&head, " HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nConnection: close\r\n", port);
    MHD_get_connection_values(conn, MHD_HEADER_KIND, add_header, &head);
    if (body_len || strcmp(method, "POST") == 0) sbuf_printf(&head, "Content-Length: %zu\r\n", body_len);
    sbuf_puts(&head, "\r\n");
    bool sent = !head.oom && send_all(up, head.data, head.len) == 0 && (!body_len || send_all(up, body, body_len) == 0);
    sbuf_free(&head);
    if (!sent) {
        close(up);
        request_done(r, m);
        return send_error(conn, 502, "server_error", NULL, NULL, "sending to the server of model %s failed",
                          m->spec->name);
    }
    /* the status line and headers, skipping 1xx interim answers */
    size_t cap = 16384, have = 0;
    char *buf = malloc(cap + 1);
    char *hdr_end = NULL;
    int status = 0;
    while (buf) {
        hdr_end = have ? strstr(buf, "\r\n\r\n") : NULL;
        if (hdr_end) {
            if (sscanf(buf, "HTTP/1.%*d %d", &status) != 1) break;
            if (status >= 100 && status < 200) {
                size_t skip = (size_t)(hdr_end + 4 - buf);
                memmove(buf, buf + skip, have - skip + 1);
                have -= skip;
                hdr_end = NULL;
                continue;
            }
            break;
        }
        if (have == cap) break;
        struct pollfd fds[2] = {{.fd = up, .events = POLLIN}, {.fd = client, .events = POLLRDHUP}};
        int pr = poll(fds, client >= 0 ? 2 : 1, WAIT_MS);
        if (pr < 0 && errno != EINTR) break;
        if (pr > 0 && client >= 0 && (fds[1].revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL))) {
            free(buf);
            close(up); /* the child aborts the request */
            request_done(r, m);
            return MHD_NO;
        }
        if (pr <= 0 || !(fds[0].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        ssize_t n = recv(up, buf + have, cap - have, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        have += (size_t)n;
        buf[have] = '\0';
    }
    if (!buf || !hdr_end || status < 200) {
        free(buf);
        close(up);
        request_done(r, m);
        return send_error(conn, 502, "server_error", NULL, NULL,
                          "the server of model %s closed the connection without an answer", m->spec->name);
    }
    proxy *p = calloc(1, sizeof *p);
    if (!p) {
        free(buf);
        close(up);
        request_done(r, m);
        return MHD_NO;
    }
    *p = (proxy){.r = r, .m = m, .up = up, .client = client, .content_length = -1};
    /* headers to copy, and the framing */
    struct MHD_Response *resp = NULL;
    char *line = strstr(buf, "\r\n") + 2;
    *hdr_end = '\0';
    const char *names[64], *values[64];
    int nh = 0;
    while (line && *line) {
        char *eol = strstr(line, "\r\n");
        if (eol) *eol = '\0';
        char *colon = strchr(line, ':');
        if (colon) {
            *colon = '\0';
            char *v = colon + 1;
            while (*v == ' ' || *v == '\t') v++;
            if (strcasecmp(line, "Transfer-Encoding") == 0 && strstr(v, "chunked")) p->chunked = true;
            else if (strcasecmp(line, "Content-Length") == 0) p->content_length = strtoll(v, NULL, 10);
            else if (!hop_by_hop(line) && nh < 64) names[nh] = line, values[nh++] = v;
        }
        line = eol ? eol + 2 : NULL;
    }
    if (p->chunked) p->content_length = -1;
    size_t body_off = (size_t)(hdr_end + 4 - buf);
    p->pending_len = have - body_off;
    p->pending = malloc(p->pending_len + 1);
    if (p->pending) memcpy(p->pending, buf + body_off, p->pending_len);
    if (p->content_length == 0 || strcmp(method, "HEAD") == 0) p->done = true; /* HEAD: headers only */
    resp = p->pending ? MHD_create_response_from_callback(
                            p->content_length >= 0 ? (uint64_t)p->content_length : MHD_SIZE_UNKNOWN, PROXY_BLOCK,
                            proxy_read, p, proxy_free)
                      : NULL;
    if (!resp) {
        free(buf);
        proxy_free(p);
        return MHD_NO;
    }
    for (int i = 0; i < nh; i++) MHD_add_response_header(resp, names[i], values[i]);
    free(buf);
    enum MHD_Result res = MHD_queue_response(conn, (unsigned int)status, resp);
    MHD_destroy_response(resp);
    return res;
}

/* ---- routing -------------------------------------------------------------------------------------- */

static rt_model *find_model(rt_router *r, const char *name) {
    for (int i = 0; i < r->n; i++)
        if (name && strcmp(r->models[i].spec->name, name) == 0) return &r->models[i];
    return NULL;
}

static enum MHD_Result not_found(struct MHD_Connection *conn, const char *name) {
    return send_error(conn, 404, "invalid_request_error", "model", "model_not_found",
                      "The model `%.200s` does not exist.", name);
}

/* The "model" of a JSON body (malloc'ed), or NULL. */
/* The model called name (malloc'ed; freed here), or NULL with *res the
 * 404 sent for it. */
static rt_model *take_named(rt_router *r, struct MHD_Connection *conn, char *name, enum MHD_Result *res) {
    rt_model *m = find_model(r, name);
    if (!m) *res = not_found(conn, name);
    free(name);
    return m;
}

static char *body_model(const char *body, size_t len) {
    if (!len) return NULL;
    json_t *v = json_loadb(body, len, 0, NULL);
    json_t *m = json_is_object(v) ? json_object_get(v, "model") : NULL;
    char *out = json_is_string(m) ? strdup(json_string_value(m)) : NULL;
    json_decref(v);
    return out;
}

static enum MHD_Result load_unload(rt_router *r, struct MHD_Connection *conn, req_ctx *rc, bool load) {
    char *name = body_model(rc->body.data, rc->body.len);
    if (!name)
        return send_error(conn, 400, "invalid_request_error", "model", NULL,
                          "expected a JSON body {\"model\": NAME}");
    enum MHD_Result res;
    rt_model *m = take_named(r, conn, name, &res);
    if (!m) return res;
    pthread_mutex_lock(&r->mu);
    if (!load) {
        if (m->state != M_UNLOADED) stop_model(r, m, "POST /models/unload");
        m->want = false;
        pthread_mutex_unlock(&r->mu);
        return send_jsonv(conn, 200, json_pack("{s:b}", "success", 1));
    }
    int port;
    char why[sizeof m->error];
    wait_result w = wait_loaded(r, m, conn_fd(conn), false, &port, why, sizeof why);
    pthread_mutex_unlock(&r->mu);
    if (w == W_GONE) return MHD_NO;
    if (w == W_STOPPING) return send_error(conn, 503, "service_unavailable", NULL, NULL, "the router is stopping");
    if (w == W_FAILED) return send_error(conn, 500, "server_error", "model", "model_load_failed", "%s", why);
    return send_jsonv(conn, 200, json_pack("{s:b}", "success", 1));
}

static enum MHD_Result dispatch(rt_router *r, struct MHD_Connection *conn, req_ctx *rc, const char *url,
                                const char *method) {
    bool get = strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0;
    if (get && strcmp(url, "/health") == 0) {
        pthread_mutex_lock(&r->mu);
        bool stopping = r->stopping;
        pthread_mutex_unlock(&r->mu);
        return send_text(conn, stopping ? 503 : 200, "application/json",
                         strdup(stopping ? "{\"status\":\"stopping\"}" : "{\"status\":\"ok\"}"), stopping ? 21 : 15);
    }
    const char *qmodel = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "model");
    if (get && strcmp(url, "/metrics") == 0 && !qmodel) return metrics(r, conn);
    if (!authorized(r, conn))
        return send_error(conn, 401, "invalid_request_error", NULL, "invalid_api_key",
                          "Incorrect API key provided. Send it as 'Authorization: Bearer KEY' (or 'x-api-key: KEY').");
    if (rc->too_large)
        return send_error(conn, 413, "invalid_request_error", NULL, NULL, "the request body is over the limit");
    if (get && (strcmp(url, "/v1/models") == 0 || strcmp(url, "/models") == 0)) return models_list(r, conn);
    if (get && strncmp(url, "/v1/models/", 11) == 0) {
        rt_model *m = find_model(r, url + 11);
        if (!m) return not_found(conn, url + 11);
        pthread_mutex_lock(&r->mu);
        json_t *e = model_entry(r, m);
        pthread_mutex_unlock(&r->mu);
        return send_jsonv(conn, 200, e);
    }
    if (strcmp(method, "POST") == 0 && strcmp(url, "/models/load") == 0) return load_unload(r, conn, rc, true);
    if (strcmp(method, "POST") == 0 && strcmp(url, "/models/unload") == 0) return load_unload(r, conn, rc, false);

    /* everything else goes to a model's server */
    char *name = qmodel ? strdup(qmodel) : body_model(rc->body.data, rc->body.len);
    if (!name && r->n == 1) name = strdup(r->models[0].spec->name); /* one model: the model field may be left out */
    if (!name)
        return send_error(conn, 400, "invalid_request_error", "model", NULL,
                          "this server serves several models: name one in \"model\" (GET /v1/models lists them)");
    enum MHD_Result res;
    rt_model *m = take_named(r, conn, name, &res);
    if (!m) return res;
    pthread_mutex_lock(&r->mu);
    m->n_requests++;
    int port = 0;
    char why[sizeof m->error];
    wait_result w = wait_loaded(r, m, conn_fd(conn), true, &port, why, sizeof why);
    pthread_mutex_unlock(&r->mu);
    if (w == W_GONE) return MHD_NO;
    if (w == W_STOPPING) return send_error(conn, 503, "service_unavailable", NULL, NULL, "the router is stopping");
    if (w == W_FAILED) return send_error(conn, 503, "server_error", "model", "model_load_failed", "%s", why);
    return proxy_request(r, m, port, conn, method, url, rc->body.data ? rc->body.data : "", rc->body.len);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_data_size,
                                  void **con_cls) {
    (void)version;
    rt_router *r = cls;
    req_ctx *rc = *con_cls;
    if (!rc) {
        rc = calloc(1, sizeof *rc);
        if (!rc) return MHD_NO;
        *con_cls = rc;
        return MHD_YES;
    }
    if (*upload_data_size) {
        size_t max = r->o.max_body ? r->o.max_body : (size_t)4 << 20;
        rc->received += *upload_data_size;
        if (rc->received > max) rc->too_large = true;
        if (!rc->too_large) {
            sbuf_append(&rc->body, upload_data, *upload_data_size);
            if (rc->body.oom) return MHD_NO;
        }
        *upload_data_size = 0;
        return MHD_YES;
    }
    return dispatch(r, conn, rc, url, method);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls, enum MHD_RequestTerminationCode why) {
    (void)cls, (void)conn, (void)why;
    req_ctx *rc = *con_cls;
    if (!rc) return;
    sbuf_free(&rc->body);
    free(rc);
    *con_cls = NULL;
}

static void mhd_log(void *cls, const char *fmt, va_list ap) {
    char line[512];
    vsnprintf(line, sizeof line, fmt, ap);
    size_t n = strlen(line);
    while (n && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = '\0';
    rt_log(cls, "router http: %s", line);
}

/* ---- start and stop ------------------------------------------------------------------------------- */

int rt_start(rt_router **out, const rt_options *opts, pdl_error *err) {
    *out = NULL;
    if (!opts->models || opts->models->n == 0) return err_fail(err, "the router has no models");
    rt_router *r = calloc(1, sizeof *r);
    if (!r) return err_fail(err, "out of memory");
    r->o = *opts;
    r->n = opts->models->n;
    r->models = calloc((size_t)r->n, sizeof *r->models);
    if (!r->models) {
        free(r);
        return err_fail(err, "out of memory");
    }
    for (int i = 0; i < r->n; i++) r->models[i].spec = &opts->models->v[i];
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    r->created = (long long)time(NULL);
    /* the children check the same key, read from the environment (not argv: ps would show it); set
       before any thread of ours runs */
    if (opts->api_key && setenv("PAGEDLM_API_KEY", opts->api_key, 1) != 0) {
        err_fail(err, "cannot set PAGEDLM_API_KEY for the children");
        goto fail;
    }

    const char *host = opts->host ? opts->host : "127.0.0.1";
    char port_s[16];
    snprintf(port_s, sizeof port_s, "%d", opts->port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *ai = NULL;
    int gai = getaddrinfo(host, port_s, &hints, &ai);
    if (gai) {
        err_fail(err, "--host %s: %s", host, gai_strerror(gai));
        goto fail;
    }
    unsigned int flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL |
                         MHD_USE_ITC | MHD_USE_ERROR_LOG;
    if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
    r->d = MHD_start_daemon(flags, 0, NULL, NULL, on_request, r, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, r,
                            MHD_OPTION_SOCK_ADDR, ai->ai_addr, MHD_OPTION_NOTIFY_COMPLETED, on_completed, r,
                            MHD_OPTION_CONNECTION_TIMEOUT,
                            (unsigned int)(opts->timeout_keep_alive_s > 0 ? opts->timeout_keep_alive_s : 5),
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned int)1024, MHD_OPTION_LISTEN_BACKLOG_SIZE,
                            (unsigned int)512, MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!r->d) {
        err_fail(err, "cannot listen on %s:%d (address in use, or not allowed?)", host, opts->port);
        goto fail;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(r->d, MHD_DAEMON_INFO_BIND_PORT);
    r->port = di ? di->port : opts->port;
    if (pthread_create(&r->supervisor, NULL, supervisor_main, r) != 0) {
        MHD_stop_daemon(r->d);
        err_fail(err, "cannot start a thread");
        goto fail;
    }
    *out = r;
    return 0;
fail:
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    free(r->models);
    free(r);
    return -1;
}

int rt_port(const rt_router *r) { return r->port; }

void rt_stop(rt_router *r) {
    if (!r) return;
    MHD_socket lfd = MHD_quiesce_daemon(r->d); /* no new connections */
    if (lfd != MHD_INVALID_SOCKET) close(lfd);
    pthread_mutex_lock(&r->mu);
    r->stopping = true;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    /* the supervisor stops every child and returns once all have exited;
       their streams end with them, so the connection threads finish */
    pthread_join(r->supervisor, NULL);
    MHD_stop_daemon(r->d);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    free(r->models);
    free(r);
}
