/*
 * cli_serve.c - `pagedlm serve`: the OpenAI-compatible HTTP server
 * (src/server/) from the command line, with vLLM's flag names.
 *
 * Signals: SIGINT and SIGTERM are blocked in every thread and taken here with
 * sigtimedwait, so the server stops from ordinary code (no async handler):
 * the first stops accepting and drains in-flight requests, a second one
 * during the drain exits at once. Exit status 0 after a signal, 1 when the
 * model does not load, 2 for bad usage.
 *
 * Several models (--models-dir DIR, --model NAME=PATH repeated,
 * --models-config FILE): the router (src/server/router.c) serves them from
 * one port, one `pagedlm serve` child per loaded model; every other option
 * here is passed on to each child, after which a model's own arguments from
 * --models-config come.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli_args.h"
#include "server/router.h"
#include "server/server.h"

static void log_line(const char *line, void *user) {
    (void)user;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    localtime_r(&ts.tv_sec, &tm);
    fprintf(stderr, "pagedlm: %02d:%02d:%02d.%03ld %s\n", tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000,
            line);
}

/* After the first signal: a second one ends the process without draining. */
static void *second_signal(void *arg) {
    sigset_t *set = arg;
    int sig;
    if (sigwait(set, &sig) == 0) {
        fprintf(stderr, "pagedlm: second signal %d: exiting without draining\n", sig);
        _exit(1);
    }
    return NULL;
}

/* ---- options ------------------------------------------------------------------ */

/* What the command line asks for: the server's options, and the draft
 * model's path --speculative-config names (malloc'ed; o.draft_model_path
 * points at it). */
typedef struct serve_args {
    srv_options o;
    char *draft_path;
    /* several models (the router) */
    const char **model_values; /* every --model, as given */
    int n_model_values;
    const char *models_dir, *models_config;
    int max_loaded_models;
    float sleep_idle_s;
    const char *lora_modules[64]; /* --lora-modules (o.lora_modules points here) */
} serve_args;

static int parse_lora_module(void *args, const cli_option *opt_row, const char *opt, const char *v) {
    (void)opt_row;
    serve_args *a = args;
    if (a->o.n_lora_modules == 64) {
        fprintf(stderr, "error: %s: at most 64 adapters\n", opt);
        return -1;
    }
    a->lora_modules[a->o.n_lora_modules++] = v;
    a->o.lora_modules = a->lora_modules;
    return 0;
}

static int parse_model(void *args, const cli_option *opt_row, const char *opt, const char *v) {
    (void)opt_row, (void)opt;
    serve_args *a = args;
    const char **nv = realloc(a->model_values, (size_t)(a->n_model_values + 1) * sizeof *nv);
    if (!nv) return -1;
    a->model_values = nv;
    nv[a->n_model_values++] = v;
    a->o.model_path = v; /* one model: the last --model wins */
    return 0;
}

static int parse_max_model_len(void *args, const cli_option *opt_row, const char *opt, const char *v) {
    (void)opt_row;
    serve_args *a = args;
    long n;
    if (cli_int(opt, v, 1, 1 << 24, &n)) return -1;
    a->o.model.ctx_size = (int)n;
    a->o.engine.max_model_len = (int)n; /* the KV pool must hold it, or the server refuses to start */
    return 0;
}

static int parse_replica_name(void *args, const cli_option *opt_row, const char *opt, const char *v) {
    (void)opt_row, (void)opt;
    pdl_error e;
    if (srv_check_replica_name(v, &e)) {
        fprintf(stderr, "error: %s\n", e.message);
        return -1;
    }
    ((serve_args *)args)->o.replica_name = v;
    return 0;
}

static int parse_spec_config(void *args, const cli_option *opt_row, const char *opt, const char *v) {
    (void)opt_row;
    serve_args *a = args;
    free(a->draft_path); /* the last --speculative-config wins */
    a->o.draft_model_path = NULL;
    if (cli_spec_config(opt, v, &a->o.engine, &a->draft_path)) return -1;
    a->o.draft_model_path = a->draft_path;
    return 0;
}

static int parse_grammar_timeout(void *args, const cli_option *opt_row, const char *opt, const char *v) {
    (void)opt_row;
    float f;
    if (cli_float(opt, v, &f)) return -1;
    if (!(f > 0)) {
        fprintf(stderr, "error: --grammar-timeout must be positive\n");
        return -1;
    }
    ((serve_args *)args)->o.grammar_timeout_s = f;
    return 0;
}

static int parse_grammar_max_work(void *args, const cli_option *opt_row, const char *opt, const char *v) {
    (void)opt_row;
    long n;
    if (cli_int(opt, v, 1, (long)1 << 40, &n)) return -1;
    ((serve_args *)args)->o.grammar_max_work = n;
    return 0;
}

static int parse_shutdown_grace(void *args, const cli_option *opt_row, const char *opt, const char *v) {
    (void)opt_row;
    float f;
    if (cli_float(opt, v, &f)) return -1;
    if (f < 0) {
        fprintf(stderr, "error: --shutdown-grace must not be negative\n");
        return -1;
    }
    ((serve_args *)args)->o.shutdown_grace_s = f;
    return 0;
}

#define O(f) offsetof(serve_args, o.f)
static const cli_option SERVE_OPTIONS[] = {
    {"--model", "-m", CLI_OPT_CUSTOM, 0, .value = "PATH", .parse = parse_model,
     .help = ".gguf file or Hugging Face folder; NAME=PATH (repeatable) serves\n"
             "several models from one port (see below)"},
    {"--host", NULL, CLI_OPT_STRING, O(host), .value = "HOST", .help = "address to listen on (default 127.0.0.1)"},
    {"--port", NULL, CLI_OPT_INT, O(port), .min = 0, .max = 65535, .value = "PORT",
     .help = "port (default 8000; 0 = any free port, printed on stderr)"},
    {"--served-model-name", NULL, CLI_OPT_STRING, O(served_model_name), .value = "NAME",
     .help = "the model name clients use (default: MODEL as given)"},
    {"--replica-name", NULL, CLI_OPT_CUSTOM, 0, .value = "NAME", .parse = parse_replica_name,
     .help = "this server's name in the X-Pagedlm-Replica header and in\n"
             "system_fingerprint (default HOST:PORT; the machine's name\n"
             "for a wildcard HOST such as 0.0.0.0)"},
    {"--api-key", NULL, CLI_OPT_STRING, O(api_key), .value = "KEY",
     .help = "require 'Authorization: Bearer KEY' (or env PAGEDLM_API_KEY)"},
    {"--chat-template", NULL, CLI_OPT_STRING, O(chat_template), .value = "FILE",
     .help = "Jinja chat template (default: the model's own)"},
    {"--mmproj", NULL, CLI_OPT_STRING, O(mmproj_path), .value = "FILE",
     .help = "vision model of a GGUF model (llama.cpp's mmproj GGUF): chat content\n"
             "parts of type image_url (a Hugging Face LLaVA folder brings its own)"},
    {"--allowed-local-media-path", NULL, CLI_OPT_STRING, O(allowed_media_path), .value = "DIR",
     .help = "file:// image URLs under DIR are read (default: data URLs only)"},
    {"--encoder-cache-size", NULL, CLI_OPT_SIZE, O(engine.encoder_cache_bytes), .value = "SIZE",
     .help = "encoded images kept across requests by image hash, least recently\n"
             "used dropped first (default 256MiB)"},
    {"--no-encoder-cache", NULL, CLI_OPT_FLAG, O(engine.no_encoder_cache),
     .help = "encode every image (no cache across requests)"},
    {"--max-model-len", "-c", CLI_OPT_CUSTOM, 0, .value = "N", .parse = parse_max_model_len,
     .help = "context length (default and most: the model's own; more only with\n"
             "PAGEDLM_ALLOW_LONG_MAX_MODEL_LEN=1, untrained positions); also --ctx-size"},
    {"--ctx-size", NULL, CLI_OPT_CUSTOM, 0, .value = "N", .parse = parse_max_model_len,
     .help = "the same as --max-model-len"},
    {"--max-num-seqs", NULL, CLI_OPT_INT, O(engine.max_num_seqs), .min = 1, .max = 1 << 20, .value = "N",
     .help = "running sequences at most (default 256)"},
    {"--max-num-batched-tokens", NULL, CLI_OPT_INT, O(engine.max_num_batched_tokens), .min = 1, .max = 1 << 24,
     .value = "N", .help = "rows per engine step at most (default 2048)"},
    {"--max-prefill-chunk", NULL, CLI_OPT_INT, O(engine.max_prefill_chunk), .min = 1, .max = 1 << 24, .value = "N",
     .help = "prompt rows per request per step (default: no limit)"},
    {"--kv-cache-memory", NULL, CLI_OPT_SIZE, O(engine.kv_cache_memory), .value = "SIZE",
     .help = "KV pool size, e.g. 2GiB (default: min(4GiB, half the free memory))"},
    {"--block-size", NULL, CLI_OPT_INT, O(engine.block_size), .min = 1, .max = 1 << 16, .value = "N",
     .help = "tokens per KV block (default 16)"},
    {"--kv-cache-dtype", NULL, CLI_OPT_KV_DTYPE, O(engine.kv_dtype), .value = "f16|f32|q8_0|q4_0",
     .help = "KV cache precision (default f16)"},
    {"--threads", "-t", CLI_OPT_INT, O(model.n_threads), .min = 1, .max = 1024, .value = "N",
     .help = "worker threads (default: all cores)"},
    {"--logits", NULL, CLI_OPT_LOGITS, O(engine.logits_mode), .value = "auto|full|selective",
     .help = "LM head over sampled rows only (auto: when the probe passes)"},
    {"--no-enable-prefix-caching", NULL, CLI_OPT_FLAG, O(engine.no_prefix_caching),
     .help = "recompute every prompt (prefix caching is on by default)"},
    {"--enable-prefix-caching", NULL, CLI_OPT_FLAG_OFF, O(engine.no_prefix_caching),
     .help = "reuse cached prompt blocks (the default)"},
    {"--speculative-config", NULL, CLI_OPT_CUSTOM, 0, .value = "JSON", .parse = parse_spec_config,
     .help = "{\"method\": \"ngram\", \"num_speculative_tokens\": 4,\n"
             "\"prompt_lookup_min\": 2, \"prompt_lookup_max\": 5} or\n"
             "{\"model\": DRAFT_MODEL, \"num_speculative_tokens\": 4} or\n"
             "{\"method\": \"mtp\", \"num_speculative_tokens\": 2} (the model's own MTP block: Qwen3.5)"},
    {"--enable-lora", NULL, CLI_OPT_FLAG, O(enable_lora),
     .help = "serve LoRA adapters: a request's \"model\" names one (or llama-server's\n"
             "\"lora\": [{\"id\", \"scale\"}]); POST /v1/load_lora_adapter, /v1/unload_lora_adapter"},
    {"--lora-modules", NULL, CLI_OPT_CUSTOM, 0, .value = "NAME=PATH", .parse = parse_lora_module,
     .help = "an adapter (PEFT folder or llama.cpp LoRA GGUF) served as NAME, or\n"
             "{\"name\": .., \"path\": ..}; repeat the flag for several"},
    {"--max-loras", NULL, CLI_OPT_INT, O(max_loras), .min = 1, .max = 4096, .value = "N",
     .help = "adapters loaded at once at most (default 64)"},
    {"--max-lora-rank", NULL, CLI_OPT_INT, O(max_lora_rank), .min = 1, .max = PDL_LORA_MAX_RANK, .value = "R",
     .help = "adapters of a higher rank are refused (default 64)"},
    {"--max-body", NULL, CLI_OPT_SIZE, O(max_body), .value = "SIZE",
     .help = "request body limit (default 4MiB; larger bodies get 413)"},
    {"--shutdown-grace", NULL, CLI_OPT_CUSTOM, 0, .value = "SECONDS", .parse = parse_shutdown_grace,
     .help = "on SIGINT/SIGTERM, time in-flight requests get (default 10)"},
    {"--timeout-keep-alive", NULL, CLI_OPT_INT, O(timeout_keep_alive_s), .min = 1, .max = 86400, .value = "SECONDS",
     .help = "an idle connection closes after this long (default 5)"},
    {"--disable-log-requests", NULL, CLI_OPT_FLAG_OFF, O(log_requests), .help = "no log line per request"},
    {"--enable-auto-tool-choice", NULL, CLI_OPT_FLAG, O(enable_auto_tool_choice),
     .help = "tool_choice \"auto\" (the default with tools): tool calls are parsed\n"
             "out of the output; without it the model's text is returned as is"},
    {"--tool-call-parser", NULL, CLI_OPT_STRING, O(tool_call_parser), .value = "NAME",
     .help = "the model's tool-call format, as vLLM names it: hermes, llama3_json,\n"
             "mistral, qwen3_coder (Qwen3-Coder, Qwen3.5), pythonic (Llama 3.2/4),\n"
             "deepseek_v3, glm45, kimi_k2, openai (gpt-oss's harmony) (default:\n"
             "from the model's tokens: <|channel|>, <|tool_calls_section_begin|>, <\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "begin\xef\xbd\x9c>, <arg_key>,\n"
             "<tool_call>, [TOOL_CALLS], <|python_tag|>; else hermes)"},
    {"--reasoning-parser", NULL, CLI_OPT_STRING, O(reasoning_parser), .value = "NAME",
     .help = "qwen3|deepseek_r1: the thinking block (<think>...</think>) goes to\n"
             "message.reasoning / reasoning_content, apart from the answer; grammars\n"
             "and tool calls apply to the answer; openai: gpt-oss's harmony format\n"
             "(the analysis channel; on by default for a model with <|channel|>)"},
    {"--task", NULL, CLI_OPT_STRING, O(task), .value = "generate|embed|rerank",
     .help = "embed: also serve /v1/embeddings (the default for a model whose files\n"
             "declare a pooling: GGUF pooling_type, sentence-transformers' modules.json);\n"
             "rerank: /v1/rerank and /v1/score for a yes/no reranker (Qwen3-Reranker)"},
    {"--pooling", NULL, CLI_OPT_STRING, O(pooling), .value = "last|mean|cls",
     .help = "how /v1/embeddings pools the final hidden states (implies --task embed;\n"
             "default: the model's declared pooling, else last); L2-normalized unless the\n"
             "model's sentence-transformers modules leave Normalize out"},
    {"--reasoning-budget", NULL, CLI_OPT_INT, O(reasoning_budget), .min = -1, .max = 1 << 30, .value = "N",
     .help = "thinking tokens at most when a request names none\n"
             "(thinking_token_budget); then the block's end is forced (default -1: no limit)"},
    {"--grammar-timeout", NULL, CLI_OPT_CUSTOM, 0, .value = "SECONDS", .parse = parse_grammar_timeout,
     .help = "a request's regex, JSON schema, GBNF grammar or forced tool call must\n"
             "compile within this long, or it gets a 400 (default 5)"},
    {"--grammar-max-work", NULL, CLI_OPT_CUSTOM, 0, .value = "STEPS", .parse = parse_grammar_max_work,
     .help = "... and within this many steps of work (default 100000000, about\n"
             "0.5-1 s of one core; deterministic, unlike the clock)"},
    {NULL, NULL, CLI_OPT_SECTION, 0,
     .help = "several models behind one port (a router process, one `serve` child per loaded model):"},
    {"--models-dir", NULL, CLI_OPT_STRING, offsetof(serve_args, models_dir), .value = "DIR",
     .help = "serve every NAME.gguf file and every folder NAME with a config.json\n"
             "in DIR (the client's \"model\" names it)"},
    {"--models-config", NULL, CLI_OPT_STRING, offsetof(serve_args, models_config), .value = "FILE",
     .help = "per-model serve arguments: {\"NAME\": [\"--ctx-size\", \"256\"], ...} or\n"
             "{\"NAME\": {\"path\": PATH, \"args\": [...]}} (a path adds a model)"},
    {"--max-loaded-models", NULL, CLI_OPT_INT, offsetof(serve_args, max_loaded_models), .min = 1, .max = 1 << 16,
     .value = "N", .help = "models loaded at once at most: loading one more stops the least\n"
                          "recently used idle one (default: no limit)"},
    {"--sleep-idle-seconds", NULL, CLI_OPT_FLOAT, offsetof(serve_args, sleep_idle_s), .min = 0, .max = 1e9,
     .value = "S", .help = "stop a model's server after S seconds without requests (default: never)"},
};
#undef O

static const cli_command SERVE_COMMAND = {
    .name = "serve",
    .usage = "usage: pagedlm serve -m MODEL [options]\n",
    .options = SERVE_OPTIONS,
    .n_options = sizeof SERVE_OPTIONS / sizeof SERVE_OPTIONS[0],
    .epilogue = "\n"
                "endpoints: POST /v1/completions (suffix: fill-in-the-middle), POST /v1/chat/completions,\n"
                "           POST /v1/responses (OpenAI's Responses API), POST /v1/messages and\n"
                "           /v1/messages/count_tokens (Anthropic's Messages API), POST /infill (llama-server's),\n"
                "           GET /v1/models, POST /tokenize, POST /detokenize, GET /health, GET /metrics,\n"
                "           POST /v1/load_lora_adapter and /v1/unload_lora_adapter (with --enable-lora)\n"
                "several models: the same, routed by the request's \"model\"; GET /v1/models shows each\n"
                "           one's status (loaded, loading, unloaded); POST /models/load and /models/unload\n"
                "           with {\"model\": NAME}; GET /metrics?model=NAME is that model's own\n",
};

/* ---- several models: the router -------------------------------------------------------- */

static const cli_option *serve_option(const char *arg) {
    for (size_t i = 0; i < SERVE_COMMAND.n_options; i++) {
        const cli_option *o = &SERVE_COMMAND.options[i];
        if (o->kind != CLI_OPT_SECTION && (strcmp(arg, o->name) == 0 || (o->alias && strcmp(arg, o->alias) == 0)))
            return o;
    }
    return NULL;
}

/* Options the router takes for itself, never passed to a child. */
static bool router_own(const cli_option *o) {
    static const char *const own[] = {"--model", "--host", "--port", "--served-model-name", "--api-key",
                                      "--models-dir", "--models-config", "--max-loaded-models",
                                      "--sleep-idle-seconds", "--replica-name"};
    for (size_t i = 0; i < sizeof own / sizeof own[0]; i++)
        if (strcmp(o->name, own[i]) == 0) return true;
    return false;
}

/* Several models: a router option, or a --model NAME=PATH (plain --model
 * paths given twice keep meaning "the last one"). */
static bool is_router(const serve_args *a) {
    bool named = false;
    for (int i = 0; i < a->n_model_values; i++) named |= rt_is_name_eq_path(a->model_values[i]);
    return a->models_dir || a->models_config || a->max_loaded_models || a->sleep_idle_s > 0 || named;
}

/* A model's --models-config arguments, checked as `serve` would check them;
 * the router's own options are refused there. */
static int check_model_args(const rt_model_spec *m) {
    for (int i = 0; i < m->n_args; i++) {
        const cli_option *o = serve_option(m->args[i]);
        if (o && router_own(o)) {
            fprintf(stderr, "error: --models-config: model %s: %s is the router's option, not a model's\n", m->name,
                    m->args[i]);
            return -1;
        }
    }
    char **argv = calloc((size_t)m->n_args + 2, sizeof *argv);
    if (!argv) return -1;
    argv[0] = "serve";
    for (int i = 0; i < m->n_args; i++) argv[i + 1] = m->args[i];
    serve_args scratch = {0};
    scratch.o.model = cli_model_options(0, 0);
    int rc = cli_parse(&SERVE_COMMAND, m->n_args + 1, argv, &scratch);
    free(scratch.draft_path);
    free(scratch.model_values);
    free(argv);
    if (rc) fprintf(stderr, "error: --models-config: the arguments of model %s are not valid\n", m->name);
    return rc ? -1 : 0;
}

static int serve_router(serve_args *a, int argc, char **argv, sigset_t *set) {
    rt_spec_list models = {0};
    char **common = calloc((size_t)argc + 1, sizeof *common);
    int n_common = 0, rc = CLI_USAGE;
    pdl_error err;
    rt_router *r = NULL;
    if (!common) return CLI_FAIL;
    if (a->o.served_model_name) {
        fprintf(stderr, "error: --served-model-name names one model; with several, the names come from\n"
                        "--models-dir (file and folder names) and --model NAME=PATH\n");
        goto out;
    }
    if (a->models_dir && rt_scan_models_dir(a->models_dir, &models, &err)) goto bad;
    for (int i = 0; i < a->n_model_values; i++)
        if (rt_add_model(&models, a->model_values[i], &err)) goto bad;
    if (a->models_config && rt_load_config(a->models_config, &models, &err)) goto bad;
    if (models.n == 0) {
        fprintf(stderr, "error: no models: --models-dir %s has no .gguf file and no folder with a config.json\n",
                a->models_dir ? a->models_dir : "(none)");
        goto out;
    }
    for (int i = 0; i < models.n; i++)
        if (check_model_args(&models.v[i])) goto out;
    /* every option that is not the router's goes to each child, in order */
    for (int i = 1; i < argc; i++) {
        const cli_option *o = serve_option(argv[i]);
        bool value = o && o->kind != CLI_OPT_FLAG && o->kind != CLI_OPT_FLAG_OFF;
        if (!o || !router_own(o)) {
            common[n_common++] = argv[i];
            if (value && i + 1 < argc) common[n_common++] = argv[i + 1];
        }
        if (value) i++;
    }
    char exe[4096];
    ssize_t el = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (el <= 0) {
        fprintf(stderr, "error: cannot find the pagedlm binary (/proc/self/exe)\n");
        rc = CLI_FAIL;
        goto out;
    }
    exe[el] = '\0';
    rt_options ro = {.models = &models, .exe = exe, .common_args = common, .n_common_args = n_common,
                     .host = a->o.host, .port = a->o.port, .api_key = a->o.api_key,
                     .max_loaded = a->max_loaded_models, .sleep_idle_s = a->sleep_idle_s,
                     .shutdown_grace_s = a->o.shutdown_grace_s, .max_body = a->o.max_body,
                     .timeout_keep_alive_s = a->o.timeout_keep_alive_s, .log = log_line};
    if (rt_start(&r, &ro, &err)) {
        fprintf(stderr, "error: %s\n", err.message);
        rc = CLI_FAIL;
        goto out;
    }
    const char *host = a->o.host ? a->o.host : "127.0.0.1";
    bool v6 = strchr(host, ':') != NULL;
    fprintf(stderr, "pagedlm: listening on http://%s%s%s:%d (router of %d models: ", v6 ? "[" : "", host,
            v6 ? "]" : "", rt_port(r), models.n);
    for (int i = 0; i < models.n; i++) fprintf(stderr, "%s%s", i ? ", " : "", models.v[i].name);
    fprintf(stderr, ")\n");
    for (;;) {
        siginfo_t info;
        int sig = sigwaitinfo(set, &info);
        if (sig == SIGINT || sig == SIGTERM) {
            fprintf(stderr, "pagedlm: %s: stopping every model's server\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
            pthread_t t;
            if (pthread_create(&t, NULL, second_signal, set) == 0) pthread_detach(t);
            break;
        }
        if (sig < 0 && errno != EINTR) break;
    }
    rt_stop(r);
    fprintf(stderr, "pagedlm: stopped\n");
    rc = CLI_OK;
    goto out;
bad:
    fprintf(stderr, "error: %s\n", err.message);
out:
    rt_spec_list_free(&models);
    free(common);
    return rc;
}

int cli_serve(int argc, char **argv) {
    serve_args args = {.o = {.port = 8000, .shutdown_grace_s = 10, .log_requests = true, .log = log_line,
                             .reasoning_budget = -1}};
    args.o.model = cli_model_options(0, 0);
    int prc = cli_parse(&SERVE_COMMAND, argc, argv, &args);
    if (prc) {
        free(args.draft_path);
        free(args.model_values);
        return prc > 0 ? CLI_OK : CLI_USAGE;
    }
    if (!args.o.api_key) args.o.api_key = getenv("PAGEDLM_API_KEY");
    if (is_router(&args)) {
        static sigset_t rset;
        sigemptyset(&rset);
        sigaddset(&rset, SIGINT);
        sigaddset(&rset, SIGTERM);
        pthread_sigmask(SIG_BLOCK, &rset, NULL);
        signal(SIGPIPE, SIG_IGN);
        int rc = serve_router(&args, argc, argv, &rset);
        free(args.draft_path);
        free(args.model_values);
        return rc;
    }
    free(args.model_values);
    srv_options o = args.o;
    char *draft_path = args.draft_path;
    if (!o.model_path) {
        fprintf(stderr, "error: serve needs -m MODEL (or several: --models-dir DIR, --model NAME=PATH)\n");
        cli_print_help(&SERVE_COMMAND, stderr);
        free(draft_path);
        return CLI_USAGE;
    }
    if (!o.api_key) o.api_key = getenv("PAGEDLM_API_KEY");
    /* for the e2e test of the loading state (GET /health 503): not a user option */
    const char *delay = getenv("PAGEDLM_TEST_LOAD_DELAY_MS");
    if (delay) o.test_load_delay_ms = atoi(delay);

    /* every thread started from here on inherits the blocked signals */
    static sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);

    cli_show_load_progress(&o.model, o.model_path);
    srv_server *s = NULL;
    pdl_error err;
    if (srv_start(&s, &o, &err)) {
        fprintf(stderr, "error: %s\n", err.message);
        free(draft_path);
        return CLI_FAIL;
    }
    const char *host = o.host ? o.host : "127.0.0.1";
    bool v6 = strchr(host, ':') != NULL;
    fprintf(stderr, "pagedlm: listening on http://%s%s%s:%d (loading %s)\n", v6 ? "[" : "", host, v6 ? "]" : "",
            srv_port(s), o.model_path);
    int rc = CLI_OK;
    bool ready = false;
    for (;;) {
        struct timespec tick = {.tv_sec = 0, .tv_nsec = 200 * 1000000L};
        siginfo_t info;
        int sig = sigtimedwait(&set, &info, &tick);
        if (sig == SIGINT || sig == SIGTERM) {
            fprintf(stderr, "pagedlm: %s: stopping\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
            pthread_t t;
            if (pthread_create(&t, NULL, second_signal, &set) == 0) pthread_detach(t);
            break;
        }
        if (sig < 0 && errno != EAGAIN && errno != EINTR) break;
        srv_state st = srv_get_state(s, &err);
        if (st == SRV_FAILED) {
            fprintf(stderr, "error: %s\n", err.message);
            rc = CLI_FAIL;
            break;
        }
        if (st == SRV_READY && !ready) {
            ready = true;
            fprintf(stderr, "pagedlm: ready on http://%s%s%s:%d (replica %s)\n", v6 ? "[" : "", host, v6 ? "]" : "",
                    srv_port(s), srv_replica_name(s));
        }
    }
    srv_stop(s);
    free(draft_path);
    fprintf(stderr, "pagedlm: stopped\n");
    return rc;
}
