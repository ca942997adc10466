/*
 * metrics.h - the server's counters, gauges and latency histograms, and their
 * Prometheus text rendering for GET /metrics.
 *
 * What it is for: numbers a vLLM dashboard already knows, under vLLM's metric
 * names (vllm:num_requests_running, vllm:kv_cache_usage_perc,
 * vllm:time_to_first_token_seconds, ...), each labelled with model_name.
 * Every function may be called from any thread (one mutex inside).
 * What it is not for: measuring anything itself; the engine thread reports
 * observations and engine statistics here.
 */
#ifndef PDL_SERVER_METRICS_H
#define PDL_SERVER_METRICS_H

#include <stddef.h>

#include "pagedlm.h"

typedef struct srv_metrics srv_metrics;

srv_metrics *srv_metrics_new(const char *model_name);
void srv_metrics_free(srv_metrics *m);

/* The engine's gauges and totals as of its last step. */
void srv_metrics_set_engine(srv_metrics *m, const pdl_engine_stats *st);
void srv_metrics_observe_ttft(srv_metrics *m, double seconds);
/* One interval between two consecutive tokens of a sequence. */
void srv_metrics_observe_tpot(srv_metrics *m, double seconds);
/* A request that ended: its latency from arrival, its token counts, and why
 * it ended ("stop", "length" or "abort"). */
void srv_metrics_observe_request(srv_metrics *m, double e2e_seconds, int prompt_tokens, int generation_tokens,
                                 const char *finish_reason);

/* The exposition in Prometheus text format 0.0.4 (malloc'ed), or NULL when
 * out of memory. */
char *srv_metrics_render(srv_metrics *m, size_t *len);

#endif
