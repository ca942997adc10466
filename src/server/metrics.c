/*
 * metrics.c - vLLM-named counters, gauges and histograms, rendered as
 * Prometheus text (format 0.0.4) for GET /metrics.
 *
 * Histogram buckets are vLLM's, so existing dashboards and alert rules read
 * the same quantiles. Gauges come from the engine's last statistics; the
 * latency histograms from the engine thread's observations.
 */
#define _POSIX_C_SOURCE 200809L
#include "server/metrics.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/sbuf.h"

#define MAX_BUCKETS 24

typedef struct histogram {
    const char *name, *help;
    const double *bounds; /* [n] upper bounds, ascending; +Inf is implicit */
    int n;
    uint64_t counts[MAX_BUCKETS + 1]; /* per bucket (not cumulative); [n] = above every bound */
    double sum;
    uint64_t count;
} histogram;

static const double TTFT_BUCKETS[] = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25,  0.5,   0.75,
                                      1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
static const double TPOT_BUCKETS[] = {0.01, 0.025, 0.05, 0.075, 0.1,  0.15, 0.2,  0.3,  0.4, 0.5,
                                      0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
static const double E2E_BUCKETS[] = {0.3,  0.5,  0.8,  1.0,  1.5,  2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
                                     30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
static const double TOKEN_BUCKETS[] = {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000};

#define N_OF(a) ((int)(sizeof(a) / sizeof((a)[0])))

enum { FIN_STOP, FIN_LENGTH, FIN_ABORT, N_FIN };
static const char *const FIN_NAMES[N_FIN] = {"stop", "length", "abort"};

struct srv_metrics {
    pthread_mutex_t mu;
    char *label; /* model_name="..." escaped */
    pdl_engine_stats engine;
    uint64_t finished[N_FIN];
    histogram ttft, tpot, e2e, prompt_len, gen_len;
};

static void hist_init(histogram *h, const char *name, const char *help, const double *bounds, int n) {
    memset(h, 0, sizeof *h);
    h->name = name;
    h->help = help;
    h->bounds = bounds;
    h->n = n;
}

static void hist_observe(histogram *h, double v) {
    int i = 0;
    while (i < h->n && v > h->bounds[i]) i++;
    h->counts[i]++;
    h->sum += v;
    h->count++;
}

/* A label value with \ " and newline escaped, as the text format requires. */
static char *label_for(const char *model_name) {
    sbuf b = {0};
    sbuf_puts(&b, "model_name=\"");
    for (const char *p = model_name; *p; p++) {
        if (*p == '\\') sbuf_puts(&b, "\\\\");
        else if (*p == '"') sbuf_puts(&b, "\\\"");
        else if (*p == '\n') sbuf_puts(&b, "\\n");
        else sbuf_append(&b, p, 1);
    }
    sbuf_puts(&b, "\"");
    return sbuf_take(&b, NULL);
}

srv_metrics *srv_metrics_new(const char *model_name) {
    srv_metrics *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    m->label = label_for(model_name ? model_name : "");
    if (!m->label || pthread_mutex_init(&m->mu, NULL) != 0) {
        free(m->label);
        free(m);
        return NULL;
    }
    hist_init(&m->ttft, "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
              TTFT_BUCKETS, N_OF(TTFT_BUCKETS));
    hist_init(&m->tpot, "vllm:time_per_output_token_seconds", "Histogram of time per output token in seconds.",
              TPOT_BUCKETS, N_OF(TPOT_BUCKETS));
    hist_init(&m->e2e, "vllm:e2e_request_latency_seconds", "Histogram of end to end request latency in seconds.",
              E2E_BUCKETS, N_OF(E2E_BUCKETS));
    hist_init(&m->prompt_len, "vllm:request_prompt_tokens", "Number of prefill tokens processed.", TOKEN_BUCKETS,
              N_OF(TOKEN_BUCKETS));
    hist_init(&m->gen_len, "vllm:request_generation_tokens", "Number of generation tokens processed.", TOKEN_BUCKETS,
              N_OF(TOKEN_BUCKETS));
    return m;
}

void srv_metrics_free(srv_metrics *m) {
    if (!m) return;
    pthread_mutex_destroy(&m->mu);
    free(m->label);
    free(m);
}

void srv_metrics_set_engine(srv_metrics *m, const pdl_engine_stats *st) {
    pthread_mutex_lock(&m->mu);
    m->engine = *st;
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_observe_ttft(srv_metrics *m, double s) {
    pthread_mutex_lock(&m->mu);
    hist_observe(&m->ttft, s);
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_observe_tpot(srv_metrics *m, double s) {
    pthread_mutex_lock(&m->mu);
    hist_observe(&m->tpot, s);
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_observe_request(srv_metrics *m, double e2e, int prompt_tokens, int generation_tokens,
                                 const char *finish_reason) {
    int fin = FIN_ABORT;
    for (int i = 0; i < N_FIN; i++)
        if (finish_reason && strcmp(finish_reason, FIN_NAMES[i]) == 0) fin = i;
    pthread_mutex_lock(&m->mu);
    m->finished[fin]++;
    if (fin != FIN_ABORT) {
        hist_observe(&m->e2e, e2e);
        hist_observe(&m->prompt_len, prompt_tokens);
        hist_observe(&m->gen_len, generation_tokens);
    }
    pthread_mutex_unlock(&m->mu);
}

static void header(sbuf *b, const char *name, const char *help, const char *type) {
    sbuf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void gauge(sbuf *b, const char *label, const char *name, const char *help, double v) {
    header(b, name, help, "gauge");
    sbuf_printf(b, "%s{%s} %.17g\n", name, label, v);
}

static void counter(sbuf *b, const char *label, const char *name, const char *help, uint64_t v) {
    header(b, name, help, "counter");
    sbuf_printf(b, "%s{%s} %llu\n", name, label, (unsigned long long)v);
}

static void hist_render(sbuf *b, const char *label, const histogram *h) {
    header(b, h->name, h->help, "histogram");
    uint64_t cum = 0;
    for (int i = 0; i < h->n; i++) {
        cum += h->counts[i];
        sbuf_printf(b, "%s_bucket{%s,le=\"%g\"} %llu\n", h->name, label, h->bounds[i], (unsigned long long)cum);
    }
    cum += h->counts[h->n];
    sbuf_printf(b, "%s_bucket{%s,le=\"+Inf\"} %llu\n", h->name, label, (unsigned long long)cum);
    sbuf_printf(b, "%s_count{%s} %llu\n", h->name, label, (unsigned long long)h->count);
    sbuf_printf(b, "%s_sum{%s} %.17g\n", h->name, label, h->sum);
}

char *srv_metrics_render(srv_metrics *m, size_t *len) {
    sbuf b = {0};
    pthread_mutex_lock(&m->mu);
    const pdl_engine_stats *st = &m->engine;
    const char *L = m->label;
    gauge(&b, L, "vllm:num_requests_running", "Number of requests in model execution batches.", st->running);
    gauge(&b, L, "vllm:num_requests_waiting", "Number of requests waiting to be processed.", st->waiting);
    gauge(&b, L, "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
          st->kv_blocks_total ? (double)st->kv_blocks_used / st->kv_blocks_total : 0.0);
    gauge(&b, L, "pagedlm:kv_cache_blocks_used", "KV-cache blocks held by sequences.", st->kv_blocks_used);
    gauge(&b, L, "pagedlm:kv_cache_blocks_total", "KV-cache blocks in the pool.", st->kv_blocks_total);
    if (st->state_slots_total > 0) {
        /* a hybrid model's recurrent state slots, beside the blocks (one budget) */
        gauge(&b, L, "pagedlm:state_slots_used", "Recurrent state slots held by running sequences.",
              st->state_slots_used);
        gauge(&b, L, "pagedlm:state_slots_total", "Recurrent state slots in the pool (live and snapshots).",
              st->state_slots_total);
        gauge(&b, L, "pagedlm:state_snapshots", "Recurrent state slots holding a prefix-cache snapshot.",
              st->state_snapshots);
        gauge(&b, L, "pagedlm:state_bytes_used", "Bytes of recurrent state held by running sequences.",
              (double)st->state_slots_used * (double)st->state_slot_bytes);
        gauge(&b, L, "pagedlm:state_bytes_total", "Bytes of the recurrent state slots.",
              (double)st->state_slots_total * (double)st->state_slot_bytes);
        gauge(&b, L, "pagedlm:kv_cache_bytes_total", "Bytes of the KV-cache blocks.",
              (double)st->kv_blocks_total * (double)st->kv_block_bytes);
        counter(&b, L, "pagedlm:state_snapshots_restored_total", "Prefix-cache hits started from a state "
                "snapshot.", st->state_snapshots_restored);
    }
    counter(&b, L, "vllm:num_preemptions_total", "Cumulative number of preemption from the engine.", st->preemptions);
    counter(&b, L, "vllm:prompt_tokens_total", "Number of prefill tokens processed.", st->prompt_tokens);
    counter(&b, L, "vllm:generation_tokens_total", "Number of generation tokens processed.", st->generation_tokens);
    counter(&b, L, "pagedlm:engine_steps_total", "Engine steps (one packed forward each).", st->steps);
    counter(&b, L, "vllm:prefix_cache_queries_total",
            "Prefix cache queries, in terms of number of queried tokens.", st->prefix_cache_queries);
    counter(&b, L, "vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.",
            st->prefix_cache_hits);
    counter(&b, L, "vllm:mm_cache_queries_total", "Multi-modal (encoder) cache queries, in terms of number of "
            "queried images.", st->encoder_cache_queries);
    counter(&b, L, "vllm:mm_cache_hits_total", "Multi-modal (encoder) cache hits, in terms of number of cached "
            "images.", st->encoder_cache_hits);
    counter(&b, L, "pagedlm:images_encoded_total", "Images run through the vision tower.", st->images_encoded);
    counter(&b, L, "pagedlm:encoder_cache_evictions_total", "Images dropped from the encoder cache for room.",
            st->encoder_cache_evictions);
    gauge(&b, L, "pagedlm:encoder_cache_bytes", "Bytes of encoded image rows the encoder cache holds.",
          (double)st->encoder_cache_bytes);
    gauge(&b, L, "pagedlm:kv_cache_blocks_cached", "Free KV-cache blocks that still hold a cached prefix.",
          st->kv_blocks_cached);
    counter(&b, L, "vllm:spec_decode_num_drafts_total", "Number of spec decoding drafts.", st->spec_drafts);
    counter(&b, L, "vllm:spec_decode_num_draft_tokens_total", "Number of draft tokens.", st->spec_draft_tokens);
    counter(&b, L, "vllm:spec_decode_num_accepted_tokens_total", "Number of accepted tokens.", st->spec_accepted_tokens);
    header(&b, "vllm:spec_decode_num_accepted_tokens_per_pos_total", "Accepted tokens per draft position.", "counter");
    for (int i = 0; i < PDL_MAX_SPEC_TOKENS; i++)
        sbuf_printf(&b, "vllm:spec_decode_num_accepted_tokens_per_pos_total{%s,position=\"%d\"} %llu\n", L, i,
                    (unsigned long long)st->spec_accepted_per_pos[i]);
    header(&b, "vllm:request_success_total", "Count of finished sequences by finish reason.", "counter");
    for (int i = 0; i < N_FIN; i++)
        sbuf_printf(&b, "vllm:request_success_total{%s,finished_reason=\"%s\"} %llu\n", L, FIN_NAMES[i],
                    (unsigned long long)m->finished[i]);
    hist_render(&b, L, &m->ttft);
    hist_render(&b, L, &m->tpot);
    hist_render(&b, L, &m->e2e);
    hist_render(&b, L, &m->prompt_len);
    hist_render(&b, L, &m->gen_len);
    pthread_mutex_unlock(&m->mu);
    return sbuf_take(&b, len);
}
