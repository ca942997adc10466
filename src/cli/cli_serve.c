/*
 * cli_serve.c - `pagedlm serve`: the OpenAI-compatible HTTP server
 * (src/server/) from the command line, with vLLM's flag names.
 *
 * Signals: SIGINT and SIGTERM are blocked in every thread and taken here with
 * sigtimedwait, so the server stops from ordinary code (no async handler):
 * the first stops accepting and drains in-flight requests, a second one
 * during the drain exits at once. Exit status 0 after a signal, 1 when the
 * model does not load, 2 for bad usage.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli_args.h"
#include "server/server.h"

static void serve_usage(FILE *f) {
    fprintf(f,
            "usage: pagedlm serve -m MODEL [options]\n"
            "  -m, --model PATH               .gguf file or Hugging Face folder\n"
            "      --host HOST                address to listen on (default 127.0.0.1)\n"
            "      --port PORT                port (default 8000; 0 = any free port, printed on stderr)\n"
            "      --served-model-name NAME   the model name clients use (default: MODEL as given)\n"
            "      --replica-name NAME        this server's name in the X-Pagedlm-Replica header and in\n"
            "                                 system_fingerprint (default HOST:PORT; the machine's name\n"
            "                                 for a wildcard HOST such as 0.0.0.0)\n"
            "      --api-key KEY              require 'Authorization: Bearer KEY' (or env PAGEDLM_API_KEY)\n"
            "      --chat-template FILE       Jinja chat template (default: the model's own)\n"
            "      --mmproj FILE              vision model of a GGUF model (llama.cpp's mmproj GGUF): chat content\n"
            "                                 parts of type image_url (a Hugging Face LLaVA folder brings its own)\n"
            "      --allowed-local-media-path DIR  file:// image URLs under DIR are read (default: data URLs only)\n"
            "      --encoder-cache-size SIZE  encoded images kept across requests by image hash, least recently\n"
            "                                 used dropped first (default 256MiB)\n"
            "      --no-encoder-cache         encode every image (no cache across requests)\n"
            "      --max-model-len N          context length (default and most: the model's own; more only with\n"
            "                                 PAGEDLM_ALLOW_LONG_MAX_MODEL_LEN=1, untrained positions)\n"
            "      --max-num-seqs N           running sequences at most (default 256)\n"
            "      --max-num-batched-tokens N rows per engine step at most (default 2048)\n"
            "      --max-prefill-chunk N      prompt rows per request per step (default: no limit)\n"
            "      --kv-cache-memory SIZE     KV pool size, e.g. 2GiB (default: min(4GiB, half the free memory))\n"
            "      --block-size N             tokens per KV block (default 16)\n"
            "      --kv-cache-dtype f16|f32   KV cache precision (default f16)\n"
            "  -t, --threads N                worker threads (default: all cores)\n"
            "      --logits auto|full|selective  LM head over sampled rows only (auto: when the probe passes)\n"
            "      --no-enable-prefix-caching  recompute every prompt (prefix caching is on by default;\n"
            "                                 --enable-prefix-caching is accepted)\n"
            "      --speculative-config JSON  {\"method\": \"ngram\", \"num_speculative_tokens\": 4,\n"
            "                                 \"prompt_lookup_min\": 2, \"prompt_lookup_max\": 5} or\n"
            "                                 {\"model\": DRAFT_MODEL, \"num_speculative_tokens\": 4}\n"
            "      --max-body SIZE            request body limit (default 4MiB; larger bodies get 413)\n"
            "      --shutdown-grace SECONDS   on SIGINT/SIGTERM, time in-flight requests get (default 10)\n"
            "      --timeout-keep-alive SECONDS  an idle connection closes after this long (default 5)\n"
            "      --disable-log-requests     no log line per request\n"
            "      --enable-auto-tool-choice  tool_choice \"auto\" (the default with tools): tool calls are parsed\n"
            "                                 out of the output; without it the model's text is returned as is\n"
            "      --tool-call-parser NAME    the model's tool-call format, as vLLM names it: hermes, llama3_json,\n"
            "                                 mistral, qwen3_coder (Qwen3-Coder, Qwen3.5), pythonic (Llama 3.2/4),\n"
            "                                 deepseek_v3, glm45, kimi_k2 (default: from the model's tokens:\n"
            "                                 <|tool_calls_section_begin|>, <\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "begin\xef\xbd\x9c>, <arg_key>,\n"
            "                                 <tool_call>, [TOOL_CALLS], <|python_tag|>; else hermes)\n"
            "      --reasoning-parser NAME    qwen3|deepseek_r1: the thinking block (<think>...</think>) goes to\n"
            "                                 message.reasoning / reasoning_content, apart from the answer; grammars\n"
            "                                 and tool calls apply to the answer\n"
            "      --reasoning-budget N       thinking tokens at most when a request names none\n"
            "                                 (thinking_token_budget); then the block's end is forced (default -1: no limit)\n"
            "      --grammar-timeout SECONDS  a request's regex, JSON schema, GBNF grammar or forced tool call must\n"
            "                                 compile within this long, or it gets a 400 (default 5)\n"
            "      --grammar-max-work STEPS   ... and within this many steps of work (default 100000000, about\n"
            "                                 0.5-1 s of one core; deterministic, unlike the clock)\n"
            "\n"
            "endpoints: POST /v1/completions (suffix: fill-in-the-middle), POST /v1/chat/completions,\n"
            "           POST /v1/responses (OpenAI's Responses API), POST /v1/messages and\n"
            "           /v1/messages/count_tokens (Anthropic's Messages API), POST /infill (llama-server's),\n"
            "           GET /v1/models, POST /tokenize, POST /detokenize, GET /health, GET /metrics\n");
}

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

int cli_serve(int argc, char **argv) {
    srv_options o = {.port = 8000, .shutdown_grace_s = 10, .log_requests = true, .log = log_line,
                     .reasoning_budget = -1};
    o.model = cli_model_options(0, 0);
    char *draft_path = NULL;
    long lv;
    float fv;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            serve_usage(stdout);
            return CLI_OK;
        } else if (strcmp(a, "--disable-log-requests") == 0) {
            o.log_requests = false;
        } else if (strcmp(a, "--no-encoder-cache") == 0) {
            o.engine.no_encoder_cache = true;
        } else if (strcmp(a, "--no-enable-prefix-caching") == 0) {
            o.engine.no_prefix_caching = true;
        } else if (strcmp(a, "--enable-prefix-caching") == 0) {
            o.engine.no_prefix_caching = false;
        } else if (strcmp(a, "--enable-auto-tool-choice") == 0) {
            o.enable_auto_tool_choice = true;
        } else if (!(v = cli_value(argc, argv, &i))) {
            return CLI_USAGE;
        } else if (strcmp(a, "-m") == 0 || strcmp(a, "--model") == 0) {
            o.model_path = v;
        } else if (strcmp(a, "--tool-call-parser") == 0) {
            o.tool_call_parser = v;
        } else if (strcmp(a, "--host") == 0) {
            o.host = v;
        } else if (strcmp(a, "--port") == 0) {
            if (cli_int(a, v, 0, 65535, &lv)) return CLI_USAGE;
            o.port = (int)lv;
        } else if (strcmp(a, "--served-model-name") == 0) {
            o.served_model_name = v;
        } else if (strcmp(a, "--replica-name") == 0) {
            pdl_error e;
            if (srv_check_replica_name(v, &e)) {
                fprintf(stderr, "error: %s\n", e.message);
                return CLI_USAGE;
            }
            o.replica_name = v;
        } else if (strcmp(a, "--api-key") == 0) {
            o.api_key = v;
        } else if (strcmp(a, "--chat-template") == 0) {
            o.chat_template = v;
        } else if (strcmp(a, "--mmproj") == 0) {
            o.mmproj_path = v;
        } else if (strcmp(a, "--allowed-local-media-path") == 0) {
            o.allowed_media_path = v;
        } else if (strcmp(a, "--max-model-len") == 0 || strcmp(a, "-c") == 0 || strcmp(a, "--ctx-size") == 0) {
            if (cli_int(a, v, 1, 1 << 24, &lv)) return CLI_USAGE;
            o.model.ctx_size = (int)lv;
            o.engine.max_model_len = (int)lv; /* the KV pool must hold it, or the server refuses to start */
        } else if (strcmp(a, "--max-num-seqs") == 0) {
            if (cli_int(a, v, 1, 1 << 20, &lv)) return CLI_USAGE;
            o.engine.max_num_seqs = (int)lv;
        } else if (strcmp(a, "--max-num-batched-tokens") == 0) {
            if (cli_int(a, v, 1, 1 << 24, &lv)) return CLI_USAGE;
            o.engine.max_num_batched_tokens = (int)lv;
        } else if (strcmp(a, "--max-prefill-chunk") == 0) {
            if (cli_int(a, v, 1, 1 << 24, &lv)) return CLI_USAGE;
            o.engine.max_prefill_chunk = (int)lv;
        } else if (strcmp(a, "--encoder-cache-size") == 0) {
            if (cli_size(a, v, &o.engine.encoder_cache_bytes)) return CLI_USAGE;
        } else if (strcmp(a, "--kv-cache-memory") == 0) {
            if (cli_size(a, v, &o.engine.kv_cache_memory)) return CLI_USAGE;
        } else if (strcmp(a, "--block-size") == 0) {
            if (cli_int(a, v, 1, 1 << 16, &lv)) return CLI_USAGE;
            o.engine.block_size = (int)lv;
        } else if (strcmp(a, "--kv-cache-dtype") == 0) {
            if (cli_kv_dtype(a, v, &o.engine.kv_dtype)) return CLI_USAGE;
        } else if (strcmp(a, "-t") == 0 || strcmp(a, "--threads") == 0) {
            if (cli_int(a, v, 1, 1024, &lv)) return CLI_USAGE;
            o.model.n_threads = (int)lv;
        } else if (strcmp(a, "--logits") == 0) {
            if (cli_logits_mode(a, v, &o.engine.logits_mode)) return CLI_USAGE;
        } else if (strcmp(a, "--speculative-config") == 0) {
            free(draft_path);
            if (cli_spec_config(a, v, &o.engine, &draft_path)) return CLI_USAGE;
            o.draft_model_path = draft_path;
        } else if (strcmp(a, "--reasoning-parser") == 0) {
            o.reasoning_parser = v;
        } else if (strcmp(a, "--reasoning-budget") == 0) {
            if (cli_int(a, v, -1, 1 << 30, &lv)) return CLI_USAGE;
            o.reasoning_budget = (int)lv;
        } else if (strcmp(a, "--grammar-timeout") == 0) {
            if (cli_float(a, v, &fv)) return CLI_USAGE;
            if (!(fv > 0)) {
                fprintf(stderr, "error: --grammar-timeout must be positive\n");
                return CLI_USAGE;
            }
            o.grammar_timeout_s = fv;
        } else if (strcmp(a, "--grammar-max-work") == 0) {
            if (cli_int(a, v, 1, (long)1 << 40, &lv)) return CLI_USAGE;
            o.grammar_max_work = lv;
        } else if (strcmp(a, "--max-body") == 0) {
            if (cli_size(a, v, &o.max_body)) return CLI_USAGE;
        } else if (strcmp(a, "--timeout-keep-alive") == 0) {
            if (cli_int(a, v, 1, 86400, &lv)) return CLI_USAGE;
            o.timeout_keep_alive_s = (int)lv;
        } else if (strcmp(a, "--shutdown-grace") == 0) {
            if (cli_float(a, v, &fv)) return CLI_USAGE;
            if (fv < 0) {
                fprintf(stderr, "error: --shutdown-grace must not be negative\n");
                return CLI_USAGE;
            }
            o.shutdown_grace_s = fv;
        } else {
            fprintf(stderr, "error: unknown option '%s' for serve\n", a);
            serve_usage(stderr);
            return CLI_USAGE;
        }
    }
    if (!o.model_path) {
        fprintf(stderr, "error: serve needs -m MODEL\n");
        serve_usage(stderr);
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
