/*
 * serve_metrics.h - the serving benchmark's measurements and statistics,
 * with vLLM's definitions (benchmark_serving / `vllm bench serve`):
 * TTFT = first streamed content after the request was sent; TPOT =
 * (latency - TTFT) / (output tokens - 1), for requests with more than one
 * output token; ITL = every gap between consecutive content chunks; E2EL =
 * latency. Means, medians, standard deviations (population, as numpy.std)
 * and percentiles (linear interpolation, as numpy.percentile).
 */
#ifndef PDL_BENCH_SERVE_METRICS_H
#define PDL_BENCH_SERVE_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

/* What one request measured (times in seconds, from a monotonic clock). */
typedef struct request_record {
    bool ok;
    double start, first, end;  /* sent, first content chunk, response complete */
    double *chunk_times;       /* arrival of each content chunk */
    int n_chunks, cap_chunks;
    int prompt_tokens;         /* from the server's usage (or the dataset) */
    int output_tokens;         /* from usage, else the number of chunks */
    char error[256];
} request_record;

int record_chunk(request_record *r, double t);
void record_free(request_record *r);

typedef struct stat_summary {
    double mean, median, std;
    double pct[8];             /* at the requested percentiles */
} stat_summary;

typedef struct serve_summary {
    int completed, failed;
    double duration;
    long total_input, total_output;
    double request_throughput, output_throughput, total_token_throughput;
    stat_summary ttft, tpot, itl, e2el; /* milliseconds */
    double percentiles[8];
    int n_percentiles;
} serve_summary;

/* numpy.percentile with linear interpolation over sorted values. */
double percentile_sorted(const double *sorted, size_t n, double q);
void summarize_values(double *values, size_t n, const double *pcts, int n_pcts, stat_summary *out);

int serve_summarize(const request_record *recs, int n, double duration, const double *pcts, int n_pcts,
                    serve_summary *out);
void serve_print(FILE *f, const serve_summary *s);
/* vLLM's key names: completed, failed, duration, request_throughput, ...,
 * mean_ttft_ms, median_ttft_ms, std_ttft_ms, p99_ttft_ms, and tpot/itl/e2el. */
char *serve_json(const serve_summary *s, const char *extra_json_fields);

#endif
