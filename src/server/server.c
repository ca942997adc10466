/*
 * server.c - the server's life: bind and listen first, load the model, the
 * chat template and the engine on a loader thread (so /health can say 503
 * meanwhile), then serve until srv_stop drains and frees everything.
 */
#define _POSIX_C_SOURCE 200809L
#include "server/server_internal.h"

#include <fcntl.h>
#include <jansson.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <microhttpd.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "engine/reasoning.h"
#include "server/lora_registry.h"
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

const char *srv_replica_name(const srv_server *s) { return s->replica_name; }

/* A name goes out as an HTTP header value and in JSON: printable ASCII,
 * without spaces at either end. Returns NULL or what is wrong. */
static const char *bad_replica_name(const char *name) {
    size_t n = strlen(name);
    if (n == 0) return "it is empty";
    if (n > SRV_MAX_REPLICA_NAME) return "it is longer than 128 bytes";
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)name[i] < 0x20 || (unsigned char)name[i] > 0x7e)
            return "it may hold printable ASCII characters only";
    if (name[0] == ' ' || name[n - 1] == ' ') return "it starts or ends with a space";
    return NULL;
}

int srv_check_replica_name(const char *name, pdl_error *err) {
    const char *why = bad_replica_name(name);
    return why ? err_fail(err, "--replica-name '%.200s': %s", name, why) : 0;
}

/* host:port as bound ([host]:port for IPv6); for a wildcard host (every
 * address) the machine's name, which tells replicas on several machines (or
 * pods) apart. */
static char *default_replica_name(const char *host, int port) {
    char name[300];
    bool wildcard = strcmp(host, "0.0.0.0") == 0 || strcmp(host, "::") == 0 || host[0] == '\0';
    char machine[256];
    if (wildcard && gethostname(machine, sizeof machine) == 0) {
        machine[sizeof machine - 1] = '\0';
        snprintf(name, sizeof name, "%s:%d", machine, port);
    } else if (strchr(host, ':')) {
        snprintf(name, sizeof name, "[%s]:%d", host, port);
    } else {
        snprintf(name, sizeof name, "%s:%d", host, port);
    }
    return strdup(name);
}

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

/* srv_parse_ctx.grammar_vocab: the model's grammar vocabulary, made by the
 * first request that needs one; later requests share it read-only. */
static const gram_vocab *grammar_vocab(void *user, pdl_error *err) {
    srv_server *s = user;
    pthread_mutex_lock(&s->grammar_mu);
    if (!s->grammar_vocab_tried) {
        s->grammar_vocab_tried = true;
        pdl_error e;
        if (pdl_model_grammar_vocab(s->model, &s->grammar_vocab, &e))
            snprintf(s->grammar_vocab_error, sizeof s->grammar_vocab_error, "%s", e.message);
    }
    const gram_vocab *v = s->grammar_vocab;
    if (!v) snprintf(err->message, sizeof err->message, "%s", s->grammar_vocab_error);
    pthread_mutex_unlock(&s->grammar_mu);
    return v;
}

/* srv_parse_ctx.grammar_turn_take / give: at most half the cores' worth of
 * request grammars compile at once (each may hold its work budget's memory,
 * ~75 MB at the default); the others wait, looking every 100 ms whether
 * their client is still there, for at most the grammar time limit. */
static int grammar_turn_take(void *user, const gram_limits *lim) {
    srv_server *s = user;
    double wait_s = lim->max_seconds > 0 ? lim->max_seconds : GRAM_DEFAULT_MAX_SECONDS;
    struct timespec start;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (;;) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += 100 * 1000000L;
        if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
        if (sem_timedwait(&s->grammar_turns, &until) == 0) return SRV_TURN_OK;
        if (lim->cancelled && lim->cancelled(lim->user)) return SRV_TURN_CANCELLED;
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if ((double)(now.tv_sec - start.tv_sec) + (now.tv_nsec - start.tv_nsec) * 1e-9 > wait_s) return SRV_TURN_BUSY;
    }
}

static void grammar_turn_give(void *user) {
#ifdef __GLIBC__
    /* the compilation's memory is free, but in this connection thread's
     * malloc arena, which keeps it: hand it back, or a flood of grammars
     * compiled on many threads holds a budget's worth per thread */
    malloc_trim(0);
#endif
    sem_post(&((srv_server *)user)->grammar_turns);
}

/* The model's tool-call format when its vocabulary makes it plain: a single
 * token <|channel|> (gpt-oss: the harmony format, its reasoning too),
 * <|tool_calls_section_begin|> (Kimi-K2), <｜tool▁calls▁begin｜>
 * (DeepSeek-V3), <arg_key> (GLM-4.5+, which also has <tool_call>, so it
 * comes first), <tool_call> (Qwen, Hermes; Qwen3-Coder's vocabulary is
 * Qwen3's: its format needs --tool-call-parser qwen3_coder), [TOOL_CALLS]
 * (Mistral) or <|python_tag|> (Llama 3.1+). false when none is one token. */
static bool tool_format_from_tokens(const pdl_model *model, gram_tool_format *out) {
    static const struct {
        const char *text;
        gram_tool_format fmt;
    } marks[] = {{"<|channel|>", GRAM_TOOLS_OPENAI},
                 {"<|tool_calls_section_begin|>", GRAM_TOOLS_KIMI_K2},
                 {"<\xef\xbd\x9c" "tool\xe2\x96\x81" "calls\xe2\x96\x81" "begin\xef\xbd\x9c>", GRAM_TOOLS_DEEPSEEK_V3},
                 {"<arg_key>", GRAM_TOOLS_GLM45},
                 {"<tool_call>", GRAM_TOOLS_HERMES},
                 {"[TOOL_CALLS]", GRAM_TOOLS_MISTRAL},
                 {"<|python_tag|>", GRAM_TOOLS_LLAMA3_JSON}};
    for (size_t i = 0; i < sizeof marks / sizeof marks[0]; i++) {
        int32_t *ids = NULL;
        size_t n = 0;
        pdl_error e;
        bool one = pdl_tokenize_ex(model, marks[i].text, strlen(marks[i].text), PDL_TOK_PARSE_SPECIAL, &ids, &n,
                                   &e) == 0 && n == 1;
        free(ids);
        if (one) {
            *out = marks[i].fmt;
            return true;
        }
    }
    return false;
}

/* --task rerank: the "no" and "yes" tokens whose logits score a pair
 * (api_rerank.c); each must be one token, as in Qwen3-Reranker's vocabulary. */
static int rerank_tokens(const pdl_model *model, int32_t ids[2], pdl_error *err) {
    static const char *const words[2] = {"no", "yes"};
    for (int k = 0; k < 2; k++) {
        int32_t *t = NULL;
        size_t n = 0;
        if (pdl_tokenize(model, words[k], strlen(words[k]), false, &t, &n, err)) return -1;
        ids[k] = n == 1 ? t[0] : -1;
        free(t);
        if (n != 1)
            return err_fail(err, "--task rerank needs \"%s\" to be one token of the model's vocabulary (a yes/no "
                            "reranker such as Qwen3-Reranker); it is %zu", words[k], n);
    }
    return 0;
}

/* Whether path is a Hugging Face folder of a vision-language model
 * (config.json with a vision_config). */
static bool has_vision_config(const char *path) {
    char cfg[4096];
    snprintf(cfg, sizeof cfg, "%s/config.json", path);
    json_t *j = json_load_file(cfg, 0, NULL);
    bool yes = j && json_is_object(json_object_get(j, "vision_config"));
    json_decref(j);
    return yes;
}

static bool lora_known(void *user, const char *name) { return srv_loras_has(user, name); }

/* --lora-modules: each "name=path" or {"name": .., "path": ..} (vLLM's
 * forms) loaded into a new table. */
static int load_lora_modules(srv_server *s, const pdl_model *model, srv_loras **out, pdl_error *err) {
    srv_loras *r = srv_loras_new(model, s->max_loras, s->max_lora_rank);
    if (!r) return err_fail(err, "out of memory");
    for (int i = 0; i < s->n_lora_modules; i++) {
        const char *m = s->lora_modules[i];
        char name[SRV_LORA_NAME_MAX] = "";
        const char *path = NULL;
        json_t *j = m[0] == '{' ? json_loads(m, 0, NULL) : NULL;
        if (j) {
            const char *n = json_string_value(json_object_get(j, "name"));
            path = json_string_value(json_object_get(j, "path"));
            if (n) snprintf(name, sizeof name, "%s", n);
        } else if (strchr(m, '=')) {
            size_t k = (size_t)(strchr(m, '=') - m);
            snprintf(name, sizeof name, "%.*s", (int)(k < sizeof name ? k : sizeof name - 1), m);
            path = m + k + 1;
        }
        srv_api_error e;
        int rc = !name[0] || !path ? err_fail(err, "--lora-modules '%s': expected name=path or {\"name\": .., "
                                              "\"path\": ..}", m)
                 : srv_loras_load(r, s->model_name, name, path, &e) ? err_fail(err, "--lora-modules %s: %s", name,
                                                                               e.message)
                                                                  : 0;
        if (rc == 0) srv_log(s, "LoRA adapter '%s' loaded from %s", name, path);
        json_decref(j);
        if (rc) {
            srv_loras_free(r);
            return -1;
        }
    }
    *out = r;
    return 0;
}

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
        rc = err_fail(&err, "%s: the server needs text in and out: %s", s->model_path, te.message);
    }
    if (rc == 0) rc = srv_chat_load(&chat, model, s->model_path, s->chat_template_path, &err);
    pdl_vision *vision = NULL;
    if (rc == 0 && (s->mmproj_path || has_vision_config(s->model_path))) {
        if (pdl_vision_load(&vision, s->mmproj_path ? s->mmproj_path : s->model_path, model, &err))
            rc = err_fail_prefix(&err, "vision model");
        s->engine_opts.vision = vision;
    }
    pdl_model *draft = NULL;
    if (rc == 0 && s->draft_model_path) {
        if (pdl_model_load(&draft, s->draft_model_path, &s->model_opts, &err)) rc = err_fail_prefix(&err, "draft model");
        s->engine_opts.draft_model = draft;
    }
    if (rc == 0 && s->reasoning && s->reasoning_budget >= 0) {
        pdl_reasoning rp;
        reasoning_params(s->reasoning, model, true, s->reasoning_budget, &rp);
        if (!rp.enabled)
            rc = err_fail(&err, "--reasoning-budget needs the end of a thinking block, '%s', to be one token of the "
                          "model's vocabulary, and it is not", s->reasoning->end);
    }
    int32_t rerank_ids[2] = {-1, -1};
    if (rc == 0 && s->rerank_task) rc = rerank_tokens(model, rerank_ids, &err);
    srv_loras *loras = NULL;
    if (rc == 0 && s->enable_lora) rc = load_lora_modules(s, model, &loras, &err);
    if (rc == 0) rc = srv_engine_start(&engine, model, &s->engine_opts, s->metrics, &err);
    pthread_mutex_lock(&s->mu);
    if (rc == 0) {
        pdl_model_info info;
        pdl_model_get_info(model, &info);
        s->model = model;
        s->draft = draft;
        s->engine = engine;
        s->chat = chat;
        gram_tool_format fmt = s->tool_format;
        bool fmt_known = s->tool_parser_set || tool_format_from_tokens(model, &fmt);
        s->parse = (srv_parse_ctx){.model = model,
                                   .model_name = s->model_name,
                                   .ctx_len = srv_engine_max_model_len(engine),
                                   .vocab = info.vocab,
                                   .chat_prompt = chat ? srv_chat_prompt : NULL,
                                   .chat_user = chat,
                                   .grammar_vocab = grammar_vocab,
                                   .grammar_user = s,
                                   .auto_tool_choice = s->auto_tool_choice,
                                   .tool_parser_set = fmt_known,
                                   .tool_format = fmt,
                                   .grammar_limits = s->grammar_limits,
                                   .reasoning = s->reasoning,
                                   .harmony = s->harmony || (fmt_known && fmt == GRAM_TOOLS_OPENAI),
                                   .reasoning_budget = s->reasoning_budget,
                                   .grammar_turn_take = grammar_turn_take,
                                   .grammar_turn_give = grammar_turn_give,
                                   .grammar_turn_user = s,
                                   .vision = vision,
                                   .allowed_media_path = s->allowed_media_path,
                                   .batch_tokens = s->engine_opts.max_num_batched_tokens,
                                   /* /v1/embeddings: --pooling, else what the files declare, else (with
                                    * --task embed) the last row, normalized as vLLM does */
                                   .pooling = s->pooling != PDL_POOLING_NONE ? s->pooling
                                              : info.pooling != PDL_POOLING_NONE ? info.pooling
                                              : info.encoder  ? PDL_POOLING_CLS /* vLLM's default for BERT */
                                              : s->embed_task ? PDL_POOLING_LAST
                                                              : PDL_POOLING_NONE,
                                   .pool_normalize = info.pooling != PDL_POOLING_NONE ? info.pool_normalize : true,
                                   .hidden = info.hidden,
                                   .matryoshka = info.matryoshka,
                                   .encoder = info.encoder,
                                   .rerank = s->rerank_task,
                                   .rerank_no = rerank_ids[0],
                                   .rerank_yes = rerank_ids[1]};
        s->vision = vision;
        s->loras = loras;
        if (loras) s->parse.model_known = lora_known, s->parse.model_known_user = loras;
        if (s->state == SRV_LOADING) s->state = SRV_READY;
    } else {
        snprintf(s->load_error, sizeof s->load_error, "%s", err.message);
        if (s->state == SRV_LOADING) s->state = SRV_FAILED;
    }
    pthread_mutex_unlock(&s->mu);
    if (rc == 0) {
        pdl_model_info info;
        pdl_model_get_info(model, &info);
        srv_log(s, "model %s loaded (%s, %d layers, vocab %d, max model len %d); %s; %s; serving '%s'", s->model_path,
                info.arch, info.n_layers, info.vocab, s->parse.ctx_len, chat ? "chat template ready" : "no chat template",
                info.fim.pre >= 0 && info.fim.suf >= 0 && info.fim.mid >= 0 ? "fill-in-the-middle tokens"
                                                                             : "no fill-in-the-middle tokens",
                s->model_name);
    } else {
        srv_chat_free(chat); /* the caller reports the error (srv_get_state) */
        srv_loras_free(loras);
        pdl_vision_free(vision);
        pdl_model_free(draft);
        pdl_model_free(model);
    }
    return NULL;
}

static void server_free(srv_server *s) {
    pthread_cond_destroy(&s->requests_cv);
    pthread_mutex_destroy(&s->grammar_mu);
    if (s->grammar_turns_made) sem_destroy(&s->grammar_turns);
    gram_vocab_free(s->grammar_vocab);
    free(s->model_path);
    free(s->model_name);
    free(s->replica_name);
    free(s->api_key);
    free(s->chat_template_path);
    free(s->draft_model_path);
    free(s->mmproj_path);
    free(s->allowed_media_path);
    for (int i = 0; i < s->n_lora_modules; i++) free(s->lora_modules[i]);
    free(s->lora_modules);
    srv_metrics_free(s->metrics);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

static char *dup_or_null(const char *v) { return v ? strdup(v) : NULL; }

int srv_start(srv_server **out, const srv_options *o, pdl_error *err) {
    *out = NULL;
    if (!o->model_path) return err_fail(err, "serve: no model given");
    if (o->replica_name && srv_check_replica_name(o->replica_name, err)) return err_fail_prefix(err, "serve");
    srv_server *s = calloc(1, sizeof *s);
    if (!s) return err_fail(err, "serve: out of memory");
    pthread_condattr_t ca;
    bool cv_ok = pthread_condattr_init(&ca) == 0;
    if (cv_ok) {
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        cv_ok = pthread_cond_init(&s->requests_cv, &ca) == 0;
        pthread_condattr_destroy(&ca);
    }
    if (!cv_ok) {
        free(s);
        return err_fail(err, "serve: cannot create a condition variable");
    }
    if (pthread_mutex_init(&s->mu, NULL) != 0) {
        pthread_cond_destroy(&s->requests_cv);
        free(s);
        return err_fail(err, "serve: cannot create a mutex");
    }
    if (pthread_mutex_init(&s->grammar_mu, NULL) != 0) {
        pthread_mutex_destroy(&s->mu);
        pthread_cond_destroy(&s->requests_cv);
        free(s);
        return err_fail(err, "serve: cannot create a mutex");
    }
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (sem_init(&s->grammar_turns, 0, cores >= 4 ? (unsigned)(cores / 2) : 1) != 0) {
        server_free(s);
        return err_fail(err, "serve: cannot create a semaphore");
    }
    s->grammar_turns_made = true;
    s->model_path = strdup(o->model_path);
    s->model_name = strdup(o->served_model_name ? o->served_model_name : o->model_path);
    s->api_key = dup_or_null(o->api_key && o->api_key[0] ? o->api_key : NULL);
    s->chat_template_path = dup_or_null(o->chat_template);
    s->max_body = o->max_body ? o->max_body : SRV_MAX_BODY_DEFAULT;
    s->grace_s = o->shutdown_grace_s > 0 ? o->shutdown_grace_s : 0;
    s->keep_alive_s = o->timeout_keep_alive_s > 0 ? (unsigned int)o->timeout_keep_alive_s : 5;
    s->test_load_delay_ms = o->test_load_delay_ms;
    s->draft_model_path = dup_or_null(o->draft_model_path);
    s->mmproj_path = dup_or_null(o->mmproj_path);
    s->allowed_media_path = dup_or_null(o->allowed_media_path);
    s->log_requests = o->log_requests;
    s->enable_lora = o->enable_lora;
    s->max_loras = o->max_loras;
    s->max_lora_rank = o->max_lora_rank;
    if (o->n_lora_modules > 0) {
        if (!o->enable_lora) {
            server_free(s);
            return err_fail(err, "serve: --lora-modules needs --enable-lora");
        }
        s->lora_modules = calloc((size_t)o->n_lora_modules, sizeof *s->lora_modules);
        for (int i = 0; s->lora_modules && i < o->n_lora_modules && (s->lora_modules[i] = strdup(o->lora_modules[i]));
             i++)
            s->n_lora_modules++;
        if (s->n_lora_modules != o->n_lora_modules) {
            server_free(s);
            return err_fail(err, "serve: out of memory");
        }
    }
    s->auto_tool_choice = o->enable_auto_tool_choice;
    if (o->tool_call_parser) {
        if (gram_tool_format_parse(o->tool_call_parser, &s->tool_format)) {
            server_free(s);
            return err_fail(err, "serve: unknown --tool-call-parser '%s' (hermes, llama3_json, mistral, qwen3_coder, "
                            "pythonic, deepseek_v3, glm45, kimi_k2, openai)",
                            o->tool_call_parser);
        }
        s->tool_parser_set = true;
    }
    s->grammar_limits = (gram_limits){.max_work = o->grammar_max_work, .max_seconds = o->grammar_timeout_s};
    s->reasoning_budget = o->reasoning_budget;
    s->harmony = o->reasoning_parser && strcmp(o->reasoning_parser, "openai") == 0; /* gram_harmony.c */
    if (o->task && strcmp(o->task, "embed") != 0 && strcmp(o->task, "generate") != 0 && strcmp(o->task, "rerank") != 0) {
        server_free(s);
        return err_fail(err, "serve: unknown --task '%s' (generate, embed, rerank)", o->task);
    }
    s->rerank_task = o->task && strcmp(o->task, "rerank") == 0;
    s->embed_task = (o->task && strcmp(o->task, "embed") == 0) || o->pooling;
    if (o->pooling) {
        static const char *const names[] = {"last", "mean", "cls"};
        for (int i = 0; i < 3; i++)
            if (strcmp(o->pooling, names[i]) == 0) s->pooling = (pdl_pooling)(PDL_POOLING_LAST + i);
        if (s->pooling == PDL_POOLING_NONE) {
            server_free(s);
            return err_fail(err, "serve: unknown --pooling '%s' (last, mean, cls)", o->pooling);
        }
    }
    if (o->reasoning_parser && !s->harmony && !(s->reasoning = reasoning_format_find(o->reasoning_parser))) {
        server_free(s);
        return err_fail(err, "serve: unknown --reasoning-parser '%s' (%s, openai)", o->reasoning_parser,
                        reasoning_format_names());
    }
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
        return err_fail(err, "serve: out of memory");
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
        return err_fail(err, "serve: cannot resolve host '%s': %s", host, gai_strerror(gai));
    }
    s->daemon = srv_http_start(s, ai->ai_addr, ai->ai_family == AF_INET6, err);
    freeaddrinfo(ai);
    if (!s->daemon) {
        server_free(s);
        return err_fail_prefix(err, "serve: %s:%d", host, o->port);
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : o->port;
    s->replica_name = o->replica_name ? strdup(o->replica_name) : default_replica_name(host, s->port);
    const char *why = s->replica_name ? bad_replica_name(s->replica_name) : "out of memory";
    if (why) {
        MHD_stop_daemon(s->daemon);
        err_fail(err, "serve: the replica name '%.200s' (from the host name): %s; give --replica-name",
                 s->replica_name ? s->replica_name : "", why);
        server_free(s);
        return -1;
    }
    if (pthread_create(&s->loader, NULL, loader_main, s) != 0) {
        MHD_stop_daemon(s->daemon);
        server_free(s);
        return err_fail(err, "serve: cannot start the loader thread");
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
    srv_loras_free(s->loras); /* after the engine: its requests held adapters of the model */
    srv_chat_free(s->chat);
    pdl_vision_free(s->vision);
    pdl_model_free(s->draft);
    pdl_model_free(s->model);
    server_free(s);
}
