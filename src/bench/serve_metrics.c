/*
 * serve_metrics.c - statistics and reports of the serving benchmark.
 */
#include "bench/serve_metrics.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util/sorted.h"

int record_chunk(request_record *r, double t) {
    if (r->n_chunks == r->cap_chunks) {
        int cap = r->cap_chunks ? r->cap_chunks * 2 : 64;
        double *p = realloc(r->chunk_times, (size_t)cap * sizeof *p);
        if (!p) return -1;
        r->chunk_times = p;
        r->cap_chunks = cap;
    }
    r->chunk_times[r->n_chunks++] = t;
    if (r->n_chunks == 1) r->first = t;
    return 0;
}

void record_free(request_record *r) {
    free(r->chunk_times);
    r->chunk_times = NULL;
    r->n_chunks = r->cap_chunks = 0;
}

double percentile_sorted(const double *v, size_t n, double q) {
    if (n == 0) return 0;
    double pos = q / 100.0 * (double)(n - 1);
    size_t lo = (size_t)floor(pos), hi = lo + 1 < n ? lo + 1 : lo;
    return v[lo] + (v[hi] - v[lo]) * (pos - (double)lo);
}

void summarize_values(double *v, size_t n, const double *pcts, int n_pcts, stat_summary *out) {
    memset(out, 0, sizeof *out);
    if (n == 0) return;
    sorted_doubles(v, n);
    double s = 0;
    for (size_t i = 0; i < n; i++) s += v[i];
    out->mean = s / (double)n;
    double ss = 0;
    for (size_t i = 0; i < n; i++) ss += (v[i] - out->mean) * (v[i] - out->mean);
    out->std = sqrt(ss / (double)n);
    out->median = percentile_sorted(v, n, 50);
    for (int i = 0; i < n_pcts && i < 8; i++) out->pct[i] = percentile_sorted(v, n, pcts[i]);
}

int serve_summarize(const request_record *recs, int n, double duration, const double *pcts, int n_pcts,
                    serve_summary *out) {
    memset(out, 0, sizeof *out);
    out->duration = duration;
    out->n_percentiles = n_pcts < 8 ? n_pcts : 8;
    memcpy(out->percentiles, pcts, (size_t)out->n_percentiles * sizeof *pcts);
    size_t n_itl = 0;
    for (int i = 0; i < n; i++)
        if (recs[i].ok && recs[i].n_chunks > 1) n_itl += (size_t)recs[i].n_chunks - 1;
    double *ttft = malloc(((size_t)n + 1) * sizeof *ttft), *tpot = malloc(((size_t)n + 1) * sizeof *tpot);
    double *e2el = malloc(((size_t)n + 1) * sizeof *e2el), *itl = malloc((n_itl + 1) * sizeof *itl);
    if (!ttft || !tpot || !e2el || !itl) {
        free(ttft), free(tpot), free(e2el), free(itl);
        return -1;
    }
    size_t nt = 0, np = 0, ne = 0, ni = 0;
    for (int i = 0; i < n; i++) {
        const request_record *r = &recs[i];
        if (!r->ok) {
            out->failed++;
            continue;
        }
        out->completed++;
        out->total_input += r->prompt_tokens;
        out->total_output += r->output_tokens;
        double lat = r->end - r->start;
        double t1 = r->n_chunks ? r->first - r->start : lat;
        ttft[nt++] = t1 * 1e3;
        e2el[ne++] = lat * 1e3;
        if (r->output_tokens > 1) tpot[np++] = (lat - t1) / (r->output_tokens - 1) * 1e3;
        for (int c = 1; c < r->n_chunks; c++) itl[ni++] = (r->chunk_times[c] - r->chunk_times[c - 1]) * 1e3;
    }
    summarize_values(ttft, nt, pcts, out->n_percentiles, &out->ttft);
    summarize_values(tpot, np, pcts, out->n_percentiles, &out->tpot);
    summarize_values(itl, ni, pcts, out->n_percentiles, &out->itl);
    summarize_values(e2el, ne, pcts, out->n_percentiles, &out->e2el);
    if (duration > 0) {
        out->request_throughput = out->completed / duration;
        out->output_throughput = (double)out->total_output / duration;
        out->total_token_throughput = (double)(out->total_input + out->total_output) / duration;
    }
    free(ttft), free(tpot), free(e2el), free(itl);
    return 0;
}

static void pct_name(double p, char *buf, size_t n) {
    if (p == floor(p)) snprintf(buf, n, "%d", (int)p);
    else snprintf(buf, n, "%g", p);
}

void serve_print(FILE *f, const serve_summary *s) {
    fprintf(f, "============ Serving Benchmark Result ============\n");
    fprintf(f, "%-40s %10d\n", "Successful requests:", s->completed);
    fprintf(f, "%-40s %10d\n", "Failed requests:", s->failed);
    fprintf(f, "%-40s %10.2f\n", "Benchmark duration (s):", s->duration);
    fprintf(f, "%-40s %10ld\n", "Total input tokens:", s->total_input);
    fprintf(f, "%-40s %10ld\n", "Total generated tokens:", s->total_output);
    fprintf(f, "%-40s %10.2f\n", "Request throughput (req/s):", s->request_throughput);
    fprintf(f, "%-40s %10.2f\n", "Output token throughput (tok/s):", s->output_throughput);
    fprintf(f, "%-40s %10.2f\n", "Total token throughput (tok/s):", s->total_token_throughput);
    const struct {
        const char *title, *name;
        const stat_summary *st;
    } groups[] = {{"Time to First Token", "TTFT", &s->ttft},
                  {"Time per Output Token (excl. 1st token)", "TPOT", &s->tpot},
                  {"Inter-token Latency", "ITL", &s->itl},
                  {"End-to-end Latency", "E2EL", &s->e2el}};
    for (size_t g = 0; g < 4; g++) {
        fprintf(f, "%s\n", groups[g].title);
        char label[64];
        snprintf(label, sizeof label, "Mean %s (ms):", groups[g].name);
        fprintf(f, "%-40s %10.2f\n", label, groups[g].st->mean);
        snprintf(label, sizeof label, "Median %s (ms):", groups[g].name);
        fprintf(f, "%-40s %10.2f\n", label, groups[g].st->median);
        for (int i = 0; i < s->n_percentiles; i++) {
            char pn[16];
            pct_name(s->percentiles[i], pn, sizeof pn);
            snprintf(label, sizeof label, "P%s %s (ms):", pn, groups[g].name);
            fprintf(f, "%-40s %10.2f\n", label, groups[g].st->pct[i]);
        }
    }
    fprintf(f, "==================================================\n");
}

char *serve_json(const serve_summary *s, const char *extra) {
    json_t *o = json_object();
    if (extra) {
        json_t *e = json_loads(extra, 0, NULL);
        if (e) json_object_update(o, e);
        json_decref(e);
    }
    json_object_set_new(o, "completed", json_integer(s->completed));
    json_object_set_new(o, "failed", json_integer(s->failed));
    json_object_set_new(o, "duration", json_real(s->duration));
    json_object_set_new(o, "total_input_tokens", json_integer(s->total_input));
    json_object_set_new(o, "total_output_tokens", json_integer(s->total_output));
    json_object_set_new(o, "request_throughput", json_real(s->request_throughput));
    json_object_set_new(o, "output_throughput", json_real(s->output_throughput));
    json_object_set_new(o, "total_token_throughput", json_real(s->total_token_throughput));
    const struct {
        const char *name;
        const stat_summary *st;
    } groups[] = {{"ttft", &s->ttft}, {"tpot", &s->tpot}, {"itl", &s->itl}, {"e2el", &s->e2el}};
    for (size_t g = 0; g < 4; g++) {
        char key[64];
        snprintf(key, sizeof key, "mean_%s_ms", groups[g].name);
        json_object_set_new(o, key, json_real(groups[g].st->mean));
        snprintf(key, sizeof key, "median_%s_ms", groups[g].name);
        json_object_set_new(o, key, json_real(groups[g].st->median));
        snprintf(key, sizeof key, "std_%s_ms", groups[g].name);
        json_object_set_new(o, key, json_real(groups[g].st->std));
        for (int i = 0; i < s->n_percentiles; i++) {
            char pn[16];
            pct_name(s->percentiles[i], pn, sizeof pn);
            snprintf(key, sizeof key, "p%s_%s_ms", pn, groups[g].name);
            json_object_set_new(o, key, json_real(groups[g].st->pct[i]));
        }
    }
    char *out = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(o);
    return out;
}
