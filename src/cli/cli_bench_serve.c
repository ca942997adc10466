/*
 * cli_bench_serve.c - `pagedlm bench-serve`: an online benchmark of any
 * OpenAI-compatible server (pagedlm serve, llama-server, vLLM) with vLLM's
 * `vllm bench serve` options and metric definitions. Each request streams
 * (SSE) and every content chunk is timed at arrival with a monotonic clock;
 * failed requests are counted and reported, never dropped.
 */
#define _POSIX_C_SOURCE 200809L
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <semaphore.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "net/http_client.h"
#include "bench/serve_dataset.h"
#include "bench/serve_metrics.h"
#include "cli/cli_args.h"

static double mono(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef struct bench_cfg {
    http_url url;
    const char *endpoint;
    const char *model;
    char auth[512];        /* "Authorization: Bearer KEY\r\n" or "" */
    bool chat, ignore_eos;
    sem_t *slots;          /* max concurrency, or NULL */
    char **loras;          /* [n_loras] --lora-modules: request k names loras[k % n_loras] as its model */
    int n_loras;
} bench_cfg;

typedef struct job {
    const bench_cfg *cfg;
    const bench_prompt *prompt;
    const char *model;     /* the model name it asks for */
    request_record *rec;
    double send_at;        /* absolute monotonic time */
    sse_parser sse;
    bool done;
} job;

static void on_sse(const char *data, size_t len, void *user) {
    job *j = user;
    request_record *r = j->rec;
    double t = mono();
    if (len == 6 && memcmp(data, "[DONE]", 6) == 0) {
        j->done = true;
        return;
    }
    json_t *o = json_loadb(data, len, 0, NULL);
    if (!o) return;
    json_t *err = json_object_get(o, "error");
    if (err) {
        json_t *m = json_object_get(err, "message");
        snprintf(r->error, sizeof r->error, "%s", json_is_string(m) ? json_string_value(m) : "error event");
        r->ok = false;
    }
    json_t *choice = json_array_get(json_object_get(o, "choices"), 0);
    json_t *text = j->cfg->chat ? json_object_get(json_object_get(choice, "delta"), "content")
                                : json_object_get(choice, "text");
    if (json_is_string(text) && json_string_length(text) > 0) record_chunk(r, t);
    json_t *usage = json_object_get(o, "usage");
    if (json_is_object(usage)) {
        json_t *pt = json_object_get(usage, "prompt_tokens"), *ct = json_object_get(usage, "completion_tokens");
        if (json_is_integer(pt)) r->prompt_tokens = (int)json_integer_value(pt);
        if (json_is_integer(ct)) r->output_tokens = (int)json_integer_value(ct);
    }
    json_decref(o);
}

static int on_body(const char *data, size_t len, void *user) {
    job *j = user;
    return sse_feed(&j->sse, data, len, on_sse, j) != 0;
}

static void *run_job(void *p) {
    job *j = p;
    const bench_cfg *c = j->cfg;
    double wait = j->send_at - mono();
    if (wait > 0) {
        struct timespec ts = {(time_t)wait, (long)((wait - floor(wait)) * 1e9)};
        nanosleep(&ts, NULL);
    }
    if (c->slots) sem_wait(c->slots);
    json_t *body = json_object();
    json_object_set_new(body, "model", json_string(j->model));
    if (c->chat) {
        json_object_set_new(body, "messages",
                            json_pack("[{s:s, s:s}]", "role", "user", "content", j->prompt->text));
    } else {
        json_object_set_new(body, "prompt", json_string(j->prompt->text));
    }
    json_object_set_new(body, "max_tokens", json_integer(j->prompt->output_len));
    json_object_set_new(body, "temperature", json_real(0.0));
    json_object_set_new(body, "stream", json_true());
    json_object_set_new(body, "stream_options", json_pack("{s:b}", "include_usage", 1));
    if (c->ignore_eos) json_object_set_new(body, "ignore_eos", json_true());
    char *text = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    request_record *r = j->rec;
    r->ok = true;
    r->start = mono();
    int status = 0;
    char err[256] = "";
    int rc = text ? http_post(&c->url, c->endpoint, c->auth, text, strlen(text), on_body, j, &status, err, sizeof err) : -1;
    r->end = mono();
    if (rc != 0) {
        r->ok = false;
        snprintf(r->error, sizeof r->error, "%s", text ? err : "out of memory");
    } else if (status != 200) {
        r->ok = false;
        snprintf(r->error, sizeof r->error, "HTTP %d: %.200s", status, j->sse.buf ? j->sse.buf : "");
    } else if (!j->done && r->ok) {
        r->ok = false;
        snprintf(r->error, sizeof r->error, "stream ended without [DONE]");
    }
    if (r->ok && r->output_tokens == 0) r->output_tokens = r->n_chunks; /* no usage from the server */
    if (r->ok && r->prompt_tokens == 0) r->prompt_tokens = j->prompt->prompt_len;
    free(text);
    sse_free(&j->sse);
    if (c->slots) sem_post(c->slots);
    return NULL;
}

/* What the command line asks for. */
typedef struct bench_serve_args {
    const char *base, *endpoint, *model, *dataset, *dataset_path, *tokenizer, *save, *api_key;
    const char *pcts_s;          /* --metric-percentiles as given: "99" or "50,90,99" */
    const char *loras;           /* --lora-modules as given: "a,b,c" */
    int input_len, output_len, prefix_len, num_prompts, max_conc;
    float range_ratio, rate;     /* rate: requests per second, INFINITY: all at once */
    uint64_t seed;
    bool ignore_eos;
} bench_serve_args;

static int parse_range_ratio(void *args, const cli_option *o, const char *opt, const char *v) {
    (void)o;
    float *r = &((bench_serve_args *)args)->range_ratio;
    if (cli_float(opt, v, r) || *r < 0 || *r >= 1) {
        fprintf(stderr, "error: --range-ratio must be in [0, 1)\n");
        return -1;
    }
    return 0;
}

static int parse_request_rate(void *args, const cli_option *o, const char *opt, const char *v) {
    (void)o;
    float *rate = &((bench_serve_args *)args)->rate;
    if (strcmp(v, "inf") == 0) *rate = INFINITY;
    else if (cli_float(opt, v, rate) || !(*rate > 0)) {
        fprintf(stderr, "error: --request-rate must be positive or inf\n");
        return -1;
    }
    return 0;
}

/* vLLM's bench serve spellings (--random-input-len, ...) are the aliases. */
#define A(f) offsetof(bench_serve_args, f)
static const cli_option BENCH_SERVE_OPTIONS[] = {
    {"--model", NULL, CLI_OPT_STRING, A(model), .value = "NAME", .help = "the model name the server serves"},
    {"--base-url", NULL, CLI_OPT_STRING, A(base), .value = "URL", .help = "the server (default http://127.0.0.1:8000)"},
    {"--endpoint", NULL, CLI_OPT_STRING, A(endpoint), .value = "PATH",
     .help = "/v1/completions (default) or /v1/chat/completions (the prompt as one user message)"},
    {"--dataset-name", NULL, CLI_OPT_STRING, A(dataset), .value = "random|jsonl", .help = "default random"},
    {"--dataset-path", NULL, CLI_OPT_STRING, A(dataset_path), .value = "FILE.jsonl", .help = "the jsonl dataset"},
    {"--tokenizer", NULL, CLI_OPT_STRING, A(tokenizer), .value = "MODEL_OR_DIR",
     .help = "random dataset: random ids from this tokenizer's normal vocabulary, decoded to text;\n"
             "without it, through the server's own /tokenize and /detokenize (ids decoded, the text\n"
             "encoded again and cut to the drawn length)"},
    {"--input-len", "--random-input-len", CLI_OPT_INT, A(input_len), .min = 1, .max = 1 << 24, .value = "N",
     .help = "prompt tokens (default 1024)"},
    {"--output-len", "--random-output-len", CLI_OPT_INT, A(output_len), .min = 1, .max = 1 << 24, .value = "N",
     .help = "tokens to generate (default 128)"},
    {"--range-ratio", "--random-range-ratio", CLI_OPT_CUSTOM, 0, .value = "R", .parse = parse_range_ratio,
     .help = "lengths drawn in [1 - R, 1 + R] times the given ones (default 0)"},
    {"--prefix-len", "--random-prefix-len", CLI_OPT_INT, A(prefix_len), .min = 0, .max = 1 << 24, .value = "N",
     .help = "tokens of a prefix every prompt shares (default 0)"},
    {"--num-prompts", NULL, CLI_OPT_INT, A(num_prompts), .min = 1, .max = 1 << 20, .value = "N",
     .help = "requests (default 1000)"},
    {"--request-rate", NULL, CLI_OPT_CUSTOM, 0, .value = "R", .parse = parse_request_rate,
     .help = "requests per second, or inf: all at once (default inf)"},
    {"--seed", NULL, CLI_OPT_U64, A(seed), .value = "S", .help = "random seed (default 0)"},
    {"--max-concurrency", NULL, CLI_OPT_INT, A(max_conc), .min = 1, .max = 1 << 16, .value = "N",
     .help = "requests in flight at most (default: no limit)"},
    {"--ignore-eos", NULL, CLI_OPT_FLAG, A(ignore_eos), .help = "ask for every output token"},
    {"--metric-percentiles", NULL, CLI_OPT_STRING, A(pcts_s), .value = "LIST",
     .help = "percentiles reported, e.g. 50,90,99 (default 99)"},
    {"--save-result", NULL, CLI_OPT_STRING, A(save), .value = "FILE.json", .help = "also write the results there"},
    {"--api-key", NULL, CLI_OPT_STRING, A(api_key), .value = "KEY", .help = "sent as 'Authorization: Bearer KEY'"},
    {"--lora-modules", "--lora-names", CLI_OPT_STRING, A(loras), .value = "A,B,...",
     .help = "LoRA adapter names the server serves: request k asks for the k-th in turn\n"
             "(round robin; vLLM's bench picks at random) instead of --model"},
};
#undef A

static const cli_command BENCH_SERVE_COMMAND = {
    .name = "bench-serve",
    .usage = "usage: pagedlm bench-serve --model NAME [--base-url http://127.0.0.1:8000] [--endpoint /v1/completions]\n"
             "       [--dataset-name random|jsonl] [--dataset-path FILE.jsonl] [--tokenizer MODEL_OR_DIR]\n"
             "       [--input-len 1024] [--output-len 128] [--range-ratio 0] [--prefix-len 0]\n"
             "       [--num-prompts 1000] [--request-rate inf] [--seed 0] [--max-concurrency N] [--ignore-eos]\n"
             "       [--metric-percentiles 99[,90,...]] [--save-result FILE.json] [--api-key KEY] [--lora-modules A,B]\n",
    .options = BENCH_SERVE_OPTIONS,
    .n_options = sizeof BENCH_SERVE_OPTIONS / sizeof BENCH_SERVE_OPTIONS[0],
};

int cli_bench_serve(int argc, char **argv) {
    bench_serve_args a = {.base = "http://127.0.0.1:8000", .endpoint = "/v1/completions", .dataset = "random",
                          .pcts_s = "99", .input_len = 1024, .output_len = 128, .num_prompts = 1000,
                          .rate = INFINITY};
    int prc = cli_parse(&BENCH_SERVE_COMMAND, argc, argv, &a);
    if (prc) return prc > 0 ? CLI_OK : CLI_USAGE;
    double pcts[8];
    int n_pcts = 0;
    for (const char *p = a.pcts_s; *p && n_pcts < 8;) {
        char *end;
        double q = strtod(p, &end);
        if (end == p || q < 0 || q > 100) {
            fprintf(stderr, "error: --metric-percentiles expects numbers in [0, 100], e.g. 50,90,99\n");
            return CLI_USAGE;
        }
        pcts[n_pcts++] = q;
        p = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') {
            fprintf(stderr, "error: --metric-percentiles expects comma-separated numbers\n");
            return CLI_USAGE;
        }
    }
    bench_cfg cfg = {.endpoint = a.endpoint, .model = a.model, .ignore_eos = a.ignore_eos,
                     .chat = strstr(a.endpoint, "chat") != NULL};
    if (a.api_key) snprintf(cfg.auth, sizeof cfg.auth, "Authorization: Bearer %s\r\n", a.api_key);
    if (!a.model) {
        fprintf(stderr, "error: bench-serve needs --model (the served model name)\n");
        return CLI_USAGE;
    }
    char *lora_list = a.loras ? strdup(a.loras) : NULL;
    char *lora_names[64];
    for (char *t = lora_list ? strtok(lora_list, ",") : NULL; t && cfg.n_loras < 64; t = strtok(NULL, ","))
        lora_names[cfg.n_loras++] = t;
    cfg.loras = lora_names;
    if (a.loras && cfg.n_loras == 0) {
        fprintf(stderr, "error: --lora-modules expects comma-separated adapter names\n");
        free(lora_list);
        return CLI_USAGE;
    }
    if (http_parse_url(a.base, &cfg.url)) {
        fprintf(stderr, "error: --base-url must look like http://host:port, got '%s'\n", a.base);
        return CLI_USAGE;
    }
    pdl_error err;
    bench_prompt *prompts = NULL;
    int n = (int)a.num_prompts;
    if (strcmp(a.dataset, "random") == 0 && !a.tokenizer) {
        fprintf(stderr, "pagedlm bench-serve: no --tokenizer: making the prompts with the server's /tokenize and "
                        "/detokenize\n");
        if (dataset_random_remote(&cfg.url, cfg.auth, n, a.input_len, a.output_len, a.range_ratio, a.prefix_len,
                                  a.seed, &prompts, &err)) {
            fprintf(stderr, "error: %s\n", err.message);
            return CLI_FAIL;
        }
    } else if (strcmp(a.dataset, "random") == 0) {
        pdl_model *tok = NULL;
        pdl_model_options mo = cli_model_options(1, 0);
        if (pdl_model_load(&tok, a.tokenizer, &mo, &err) ||
            dataset_random(tok, n, a.input_len, a.output_len, a.range_ratio, a.prefix_len, a.seed, &prompts, &err)) {
            fprintf(stderr, "error: %s\n", err.message);
            pdl_model_free(tok);
            return CLI_FAIL;
        }
        pdl_model_free(tok);
    } else if (strcmp(a.dataset, "jsonl") == 0) {
        if (!a.dataset_path || dataset_jsonl(a.dataset_path, n, (int)a.output_len, &prompts, &err)) {
            fprintf(stderr, "error: %s\n", a.dataset_path ? err.message : "the jsonl dataset needs --dataset-path");
            return a.dataset_path ? CLI_FAIL : CLI_USAGE;
        }
    } else {
        fprintf(stderr, "error: --dataset-name expects random or jsonl, got '%s'\n", a.dataset);
        return CLI_USAGE;
    }

    sem_t slots;
    if (a.max_conc > 0) {
        sem_init(&slots, 0, (unsigned)a.max_conc);
        cfg.slots = &slots;
    }
    double *offsets = malloc((size_t)n * sizeof *offsets);
    request_record *recs = calloc((size_t)n, sizeof *recs);
    job *jobs = calloc((size_t)n, sizeof *jobs);
    pthread_t *th = malloc((size_t)n * sizeof *th);
    if (!offsets || !recs || !jobs || !th) {
        fprintf(stderr, "error: out of memory\n");
        return CLI_FAIL;
    }
    arrivals_poisson(isinf(a.rate) ? 0 : a.rate, n, a.seed, offsets);
    fprintf(stderr, "pagedlm bench-serve: %d prompts to %s%s, request rate %s, max concurrency %s\n", n, a.base,
            a.endpoint, isinf(a.rate) ? "inf" : "Poisson", a.max_conc ? "set" : "unlimited");
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    double t0 = mono();
    int started = 0;
    for (int k = 0; k < n; k++) {
        jobs[k] = (job){.cfg = &cfg, .prompt = &prompts[k], .rec = &recs[k], .send_at = t0 + offsets[k],
                        .model = cfg.n_loras ? cfg.loras[k % cfg.n_loras] : cfg.model};
        if (pthread_create(&th[k], &attr, run_job, &jobs[k]) != 0) {
            recs[k].ok = false;
            snprintf(recs[k].error, sizeof recs[k].error, "could not start a client thread");
            continue;
        }
        th[started++] = th[k];
    }
    for (int k = 0; k < started; k++) pthread_join(th[k], NULL);
    double duration = mono() - t0;
    pthread_attr_destroy(&attr);

    int shown = 0;
    for (int k = 0; k < n; k++)
        if (!recs[k].ok && shown++ < 5) fprintf(stderr, "request %d failed: %s\n", k, recs[k].error);
    serve_summary sum;
    serve_summarize(recs, n, duration, pcts, n_pcts, &sum);
    serve_print(stdout, &sum);
    int rc = CLI_OK;
    if (a.save) {
        char extra[1024];
        snprintf(extra, sizeof extra,
                 "{\"backend\": \"openai\", \"base_url\": \"%s\", \"endpoint\": \"%s\", \"model_id\": \"%s\", "
                 "\"num_prompts\": %d, \"request_rate\": \"%s\", \"max_concurrency\": %d}",
                 a.base, a.endpoint, a.model, n, isinf(a.rate) ? "inf" : "poisson", a.max_conc);
        char *js = serve_json(&sum, extra);
        FILE *f = js ? fopen(a.save, "w") : NULL;
        if (!f || fputs(js, f) < 0 || fclose(f) != 0) {
            fprintf(stderr, "error: cannot write %s\n", a.save);
            rc = CLI_FAIL;
        }
        free(js);
    }
    for (int k = 0; k < n; k++) record_free(&recs[k]);
    free(offsets), free(recs), free(jobs), free(th);
    dataset_free(prompts, n);
    if (cfg.slots) sem_destroy(&slots);
    free(lora_list);
    return rc;
}
