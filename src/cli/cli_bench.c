/*
 * cli_bench.c - `pagedlm bench`: offline speed of a model, like llama.cpp's
 * llama-bench. ppN: one prompt of N random tokens (one forward, logits only
 * for the sampled row unless --logits full). tgN: N greedy tokens after a
 * one-token prompt. --batch B: B sequences decoding together (aggregate
 * tokens/s). -d D (llama-bench's depth): each sequence has D tokens already
 * in its KV cache before the timed ppN / tgN; they are prefilled in the
 * untimed warm-up run and served by the prefix cache in every timed run, so
 * each run starts from the cache holding exactly the depth. Each test runs once to warm up, then -r times; the report has
 * mean, standard deviation and median, achieved weight bandwidth for
 * decode, and everything needed to reproduce it (commit, compiler, CPU,
 * threads, model, weight types).
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "cli/bench_attention.h"
#include "cli/bench_roofline.h"
#include "cli/cli_args.h"
#include "kernels/attention.h"
#include "kernels/cpu_features.h"
#include "kernels/matmul_table.h"
#include "kernels/weight_panels.h"
#include "model/model.h"
#include "util/clock.h"
#include "util/sorted.h"

extern const char pdl_build_commit[]; /* generated at build time (cmake/build_commit.cmake) */
#define PDL_GIT_COMMIT pdl_build_commit
#ifndef PDL_C_FLAGS
#define PDL_C_FLAGS "unknown"
#endif

typedef struct bench_result {
    char test[32];
    int n_prompt, n_gen, batch;
    int depth;     /* tokens in each sequence's KV cache before the timed part (-d) */
    double samples[64];
    int n_samples;
    double mean, sd, median;
    double gbps; /* decode: weight (and, at a depth, K/V) bytes read per token x tokens/s (batch 1) */
    double gflops; /* achieved: the test's floating-point work per second */
    long cached;   /* prompt tokens served by the prefix cache over the runs (random prompts: 0) */
} bench_result;

/* ---- timing one run through the engine ------------------------------------ */

typedef struct run_clock {
    int batch;
    int firsts;           /* sequences that produced their first token */
    double t_all_first;   /* when the last of them did */
    double t_end;
    long tokens_after;    /* tokens generated after t_all_first */
    int finished;
    long cached;          /* prompt tokens the prefix cache gave (0 unless prompts repeat) */
} run_clock;

typedef struct seq_clock {
    run_clock *rc;
    int n_tokens;
} seq_clock;

static void on_seq_event(const pdl_event *ev, void *user) {
    seq_clock *s = user;
    run_clock *c = s->rc;
    double t = clock_now_s();
    if (ev->kind == PDL_EVENT_TOKEN) {
        if (s->n_tokens++ == 0) {
            if (++c->firsts == c->batch) c->t_all_first = t;
            } else if (c->firsts == c->batch) {
            c->tokens_after++;
        }
    } else if (ev->kind == PDL_EVENT_FINISHED) {
        c->finished++;
        c->t_end = t;
        c->cached += ev->cached_tokens;
    }
}

static uint64_t rng_next(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Seed of sequence b's depth tokens in every run of test t: the same each
 * run, so the prefix cache serves them; different per sequence, so a batch
 * attends over b separate contexts as separate users' would. */
static uint64_t depth_seed(int t, int b) { return 0xd3b7ull * 1000003 + (uint64_t)t * 7919 + (uint64_t)b; }

/* One run: batch sequences with n_prompt random tokens each (after `depth`
 * tokens of test t's fixed depth prefix), n_gen tokens. Returns tokens/s:
 * prompt tokens per second of prefill when n_gen == 1, else aggregate
 * generated tokens per second after every first token. *cached grows by the
 * prompt tokens the prefix cache served. */
/* --lora: sequence b of a run takes bench_loras[b % n_bench_loras] */
static pdl_lora *bench_loras[8];
static int n_bench_loras;

static int run_once(pdl_engine *e, int vocab, int depth, int test, int n_prompt, int n_gen, int batch, uint64_t seed,
                    float temp, double *tps, long *cached) {
    run_clock c = {.batch = batch};
    seq_clock sc[256];
    int32_t *prompt = malloc((size_t)(depth + n_prompt) * sizeof *prompt);
    if (!prompt) {
        fprintf(stderr, "error: out of memory for a %d-token prompt\n", depth + n_prompt);
        return -1;
    }
    pdl_error err;
    double t0 = clock_now_s();
    for (int b = 0; b < batch; b++) {
        uint64_t ds = depth_seed(test, b);
        for (int i = 0; i < depth; i++) prompt[i] = (int32_t)(rng_next(&ds) % (uint64_t)vocab);
        for (int i = depth; i < depth + n_prompt; i++) prompt[i] = (int32_t)(rng_next(&seed) % (uint64_t)vocab);
        sc[b] = (seq_clock){&c, 0};
        pdl_request_params p = {.max_tokens = n_gen, .ignore_eos = true, .logprobs = -1, .prompt_logprobs = -1,
                                .lora = n_bench_loras ? bench_loras[b % n_bench_loras] : NULL};
        p.sampling.temperature = temp;
        p.sampling.seed = seed + (uint64_t)b;
        if (pdl_engine_add_request(e, prompt, (size_t)(depth + n_prompt), &p, on_seq_event, &sc[b], NULL, &err)) {
            fprintf(stderr, "error: %s\n", err.message);
            free(prompt);
            return -1;
        }
    }
    free(prompt);
    if (pdl_engine_run_until_idle(e, &err)) {
        fprintf(stderr, "error: %s\n", err.message);
        return -1;
    }
    if (n_gen <= 1) *tps = (double)n_prompt * batch / (c.t_end - t0);
    else *tps = c.tokens_after / (c.t_end - c.t_all_first);
    *cached += c.cached;
    return 0;
}

static void summarize(bench_result *r) {
    double s = 0, ss = 0;
    for (int i = 0; i < r->n_samples; i++) s += r->samples[i];
    r->mean = s / r->n_samples;
    for (int i = 0; i < r->n_samples; i++) ss += (r->samples[i] - r->mean) * (r->samples[i] - r->mean);
    r->sd = r->n_samples > 1 ? sqrt(ss / (r->n_samples - 1)) : 0;
    double sorted[64];
    memcpy(sorted, r->samples, (size_t)r->n_samples * sizeof(double));
    sorted_doubles(sorted, (size_t)r->n_samples);
    r->median = sorted_median(sorted, (size_t)r->n_samples);
}

/* ---- the machine ------------------------------------------------------------ */

static void cpu_model(char *buf, size_t n) {
    snprintf(buf, n, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "model name", 10) == 0) {
            char *p = strchr(line, ':');
            if (p) {
                p++;
                while (*p == ' ') p++;
                p[strcspn(p, "\n")] = '\0';
                snprintf(buf, n, "%s", p);
            }
            break;
        }
    fclose(f);
}

static void cpu_features(char *buf, size_t n) {
    buf[0] = '\0';
    const pdl_cpu_features *f = cpu_features_get();
    const char *names[] = {"avx512f", "avx512bw", "avx512vl", "avx512bf16", "avx512vnni", "avx2",
                           "avxvnni", "amx-bf16", "fma",      "f16c",       "neon",       "dotprod"};
    bool has[] = {f->avx512f, f->avx512bw, f->avx512vl, f->avx512bf16, f->avx512vnni, f->avx2,
                  f->avxvnni, f->amx_bf16, f->fma,      f->f16c,       f->neon,       f->neon_dotprod};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (has[i]) {
            size_t l = strlen(buf);
            snprintf(buf + l, n - l, "%s%s", l ? "," : "", names[i]);
        }
    if (!buf[0]) snprintf(buf, n, "none detected");
}

/* Bytes of the weight matrices read once per decoded token. */
/* Whether a model's weight types (pdl_model_info's comma-separated list)
 * include a block format whose fast kernels multiply integers (the
 * roofline's INT8 dot peak, and the AVX-VNNI panels' tiles): every GGUF
 * block type but the expanded ones. */
static bool integer_weights(const char *types) {
    static const char *const integer[] = {"Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "MXFP4", "IQ4_NL",
                                          "IQ4_XS", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"};
    for (size_t i = 0; i < sizeof integer / sizeof integer[0]; i++)
        if (strstr(types, integer[i])) return true;
    return false;
}

static double weight_bytes_per_token(const pdl_model *m) {
    double b = (double)m->w.output.nbytes;
    for (int l = 0; l < m->cfg.n_layers; l++) {
        const pdl_layer_weights *w = &m->w.layers[l];
        b += (double)w->wq.nbytes + w->wk.nbytes + w->wv.nbytes + w->wo.nbytes + w->w_gate.nbytes + w->w_up.nbytes +
             w->w_down.nbytes;
    }
    return b;
}

/* Multiply-adds x 2 of one forward of n tokens after ctx0 tokens already in
 * the cache (matmuls, attention over ctx0 plus the causal prefix, the head
 * on the sampled row): a prompt (n tokens) or one decoded token (n = 1). */
static double flops_forward(const pdl_model *m, int n, double ctx0) {
    const pdl_model_config *c = &m->cfg;
    double per_tok = 0;
    for (int l = 0; l < c->n_layers; l++) {
        const pdl_layer_weights *w = &m->w.layers[l];
        per_tok += (double)tensor_nelems(&w->wq) + tensor_nelems(&w->wk) + tensor_nelems(&w->wv) +
                   tensor_nelems(&w->wo) + tensor_nelems(&w->w_gate) + tensor_nelems(&w->w_up) +
                   tensor_nelems(&w->w_down);
    }
    double attn = 2.0 * c->n_layers * c->n_heads * c->head_dim * ((double)n * ctx0 + (double)n * (n + 1) / 2);
    return 2.0 * (per_tok * n + attn + (double)c->vocab * c->hidden);
}

/* ---- speculative decoding: plain against speculative decode ---------------------- */

/* tgN with one sequence, alternating a plain engine and a speculating one
 * (A, B, A, B, ...: the machine's drift hits both), same prompts for both
 * in each round; prints the medians, their ratio and the acceptance rate. */
static int bench_spec(pdl_engine *plain, pdl_engine *spec, int vocab, int n_gen, int reps, float temp,
                      const char *label, bool json) {
    double a[64], b[64];
    pdl_engine_stats s0, s1;
    pdl_engine_get_stats(spec, &s0);
    for (int rep = 0; rep <= reps; rep++) {
        uint64_t seed = 777 + (uint64_t)rep * 13;
        double tps_a = 0, tps_b = 0;
        long cached = 0;
        /* 16 random prompt tokens: what a speculator has to work with besides its own output */
        if (run_once(plain, vocab, 0, 0, 16, n_gen, 1, seed, temp, &tps_a, &cached) ||
            run_once(spec, vocab, 0, 0, 16, n_gen, 1, seed, temp, &tps_b, &cached))
            return -1;
        if (rep > 0) a[rep - 1] = tps_a, b[rep - 1] = tps_b; /* rep 0 warms up */
    }
    pdl_engine_get_stats(spec, &s1);
    bench_result ra = {.n_samples = reps}, rb = {.n_samples = reps};
    memcpy(ra.samples, a, (size_t)reps * sizeof *a);
    memcpy(rb.samples, b, (size_t)reps * sizeof *b);
    summarize(&ra), summarize(&rb);
    uint64_t drafted = s1.spec_draft_tokens - s0.spec_draft_tokens, accepted = s1.spec_accepted_tokens - s0.spec_accepted_tokens;
    double acc = drafted ? (double)accepted / (double)drafted : 0;
    if (json)
        printf("{\"test\": \"tg%d-spec\", \"spec\": \"%s\", \"plain_tokens_per_s\": {\"median\": %.3f, \"mean\": %.3f}, "
               "\"spec_tokens_per_s\": {\"median\": %.3f, \"mean\": %.3f}, \"ratio\": %.3f, \"draft_tokens\": %llu, "
               "\"accepted_tokens\": %llu, \"acceptance\": %.3f, \"drafts\": %llu}\n",
               n_gen, label, ra.median, ra.mean, rb.median, rb.mean, ra.median > 0 ? rb.median / ra.median : 0,
               (unsigned long long)drafted, (unsigned long long)accepted, acc,
               (unsigned long long)(s1.spec_drafts - s0.spec_drafts));
    else
        printf("tg%d with %s: plain %.2f tok/s, speculative %.2f tok/s (medians of %d alternating runs): %.2fx; "
               "%llu of %llu draft tokens accepted (%.1f%%)\n",
               n_gen, label, ra.median, rb.median, reps, ra.median > 0 ? rb.median / ra.median : 0,
               (unsigned long long)accepted, (unsigned long long)drafted, 100 * acc);
    return 0;
}

/* ---- command ------------------------------------------------------------------ */

static int parse_list(const char *opt, const char *s, int *out, int max, int *n) {
    int32_t *ids;
    size_t cnt;
    if (cli_token_list(opt, s, &ids, &cnt)) return -1;
    if ((int)cnt > max) {
        fprintf(stderr, "error: %s takes at most %d values\n", opt, max);
        free(ids);
        return -1;
    }
    for (size_t i = 0; i < cnt; i++) out[i] = ids[i];
    *n = (int)cnt;
    free(ids);
    return 0;
}

/* What the command line asks for. */
typedef struct bench_args {
    const char *model_path;
    int pp[8], n_pp;             /* -p: prompt lengths */
    int depths[8], n_depths;     /* -d: tokens already in the cache */
    int batches[8], n_batches;   /* --batch: sequences decoding together */
    int n_gen, reps, threads;
    bool json, csv, roofline, attention_kernel;
    pdl_engine_options eo;       /* --logits, --kv-cache-dtype */
    int spec_ngram, spec_k, spec_mtp;
    float spec_temp;
    const char *spec_model;
    const char *loras;           /* --lora A[,B...] */
} bench_args;

static int parse_prompt_lengths(void *args, const cli_option *o, const char *opt, const char *v) {
    (void)o;
    bench_args *a = args;
    return parse_list(opt, v, a->pp, 8, &a->n_pp);
}

static int parse_depths(void *args, const cli_option *o, const char *opt, const char *v) {
    (void)o;
    bench_args *a = args;
    if (parse_list(opt, v, a->depths, 8, &a->n_depths)) return -1;
    for (int k = 0; k < a->n_depths; k++)
        if (a->depths[k] < 0 || a->depths[k] > (1 << 24)) {
            fprintf(stderr, "error: %s values must be in [0, %d]\n", opt, 1 << 24);
            return -1;
        }
    return 0;
}

static int parse_batches(void *args, const cli_option *o, const char *opt, const char *v) {
    (void)o;
    bench_args *a = args;
    if (parse_list(opt, v, a->batches, 8, &a->n_batches)) return -1;
    for (int k = 0; k < a->n_batches; k++)
        if (a->batches[k] < 1 || a->batches[k] > 256) {
            fprintf(stderr, "error: --batch values must be in [1, 256]\n");
            return -1;
        }
    return 0;
}

#define A(f) offsetof(bench_args, f)
static const cli_option BENCH_OPTIONS[] = {
    {"--model", "-m", CLI_OPT_STRING, A(model_path), .value = "PATH", .help = ".gguf file or Hugging Face folder"},
    {"-p", NULL, CLI_OPT_CUSTOM, 0, .value = "LIST", .parse = parse_prompt_lengths,
     .help = "prompt lengths for ppN tests, up to 8 (default 512; 0 to skip)"},
    {"-n", NULL, CLI_OPT_INT, A(n_gen), .min = 0, .max = 1 << 20, .value = "N",
     .help = "generated tokens for tgN tests (default 128; 0 to skip)"},
    {"--depth", "-d", CLI_OPT_CUSTOM, 0, .value = "LIST", .parse = parse_depths,
     .help = "tokens already in each sequence's KV cache before ppN / tgN, up to 8 (default 0; llama-bench's -d)"},
    {"-r", NULL, CLI_OPT_INT, A(reps), .min = 1, .max = 64, .value = "N",
     .help = "repetitions after one warm-up run (default 5)"},
    {"--batch", NULL, CLI_OPT_CUSTOM, 0, .value = "LIST", .parse = parse_batches,
     .help = "sequences decoding together in tgN tests, up to 8 values in [1, 256] (default 1)"},
    {"--threads", "-t", CLI_OPT_INT, A(threads), .min = 1, .max = 1024, .value = "N",
     .help = "worker threads (default: all cores)"},
    {"--lora", NULL, CLI_OPT_STRING, A(loras), .value = "PATH[,PATH...]",
     .help = "LoRA adapters (up to 8): sequence b of a test runs with the (b mod count)-th"},
    {"--logits", NULL, CLI_OPT_LOGITS, A(eo.logits_mode), .value = "auto|full|selective",
     .help = "head over sampled rows only (auto: when the load-time probe passes)"},
    {"--kv-cache-dtype", NULL, CLI_OPT_KV_DTYPE, A(eo.kv_dtype), .value = "f16|f32|q8_0|q4_0", .help = "default f16"},
    {"--roofline", NULL, CLI_OPT_FLAG, A(roofline),
     .help = "also measure the machine's peak GFLOP/s and read bandwidth and report fractions"},
    {"--attention-kernel", NULL, CLI_OPT_FLAG, A(attention_kernel),
     .help = "also time the attention kernel alone (one thread, the model's heads, the deepest -d or 4096 keys)"},
    {"--spec-ngram", NULL, CLI_OPT_INT, A(spec_ngram), .min = 1, .max = PDL_MAX_SPEC_TOKENS, .value = "K",
     .help = "also tgN with n-gram speculative decoding (K drafts), against plain decode"},
    {"--spec-model", NULL, CLI_OPT_STRING, A(spec_model), .value = "PATH",
     .help = "also tgN with a draft model drafting (--spec-k drafts)"},
    {"--spec-mtp", NULL, CLI_OPT_INT, A(spec_mtp), .min = 1, .max = PDL_MAX_SPEC_TOKENS, .value = "K",
     .help = "also tgN with the model's own MTP block drafting (K drafts; Qwen3.5 files that have it)"},
    {"--spec-k", NULL, CLI_OPT_INT, A(spec_k), .min = 1, .max = PDL_MAX_SPEC_TOKENS, .value = "K",
     .help = "drafts per step of --spec-model (default 4)"},
    {"--spec-temp", NULL, CLI_OPT_FLOAT, A(spec_temp), .min = 0, .max = INFINITY, .value = "T",
     .help = "sampling temperature of those runs (default 0: greedy; the same seeds both ways)"},
    {"--json", NULL, CLI_OPT_FLAG, A(json), .help = "one JSON object per test"},
    {"--csv", NULL, CLI_OPT_FLAG, A(csv), .help = "one CSV line per test, after a header"},
};
#undef A

static const cli_command BENCH_COMMAND = {
    .name = "bench",
    .usage = "usage: pagedlm bench -m MODEL [-p 512[,2048]] [-n 128] [-d 0[,4096]] [-r 5] [--batch 1,4,16] [--threads N]\n"
             "       [--logits auto|full|selective] [--kv-cache-dtype f16|f32|q8_0|q4_0] [--roofline]\n"
             "       [--attention-kernel] [--json | --csv]\n",
    .options = BENCH_OPTIONS,
    .n_options = sizeof BENCH_OPTIONS / sizeof BENCH_OPTIONS[0],
};

int cli_bench(int argc, char **argv) {
    bench_args a = {.pp = {512}, .n_pp = 1, .depths = {0}, .n_depths = 1, .batches = {1}, .n_batches = 1, .n_gen = 128, .reps = 5,
                    .eo = {.log = cli_log_stderr}, .spec_k = 4};
    int prc = cli_parse(&BENCH_COMMAND, argc, argv, &a);
    if (prc) return prc > 0 ? CLI_OK : CLI_USAGE;
    if (!a.model_path) {
        fprintf(stderr, "error: bench needs -m MODEL\n");
        cli_print_help(&BENCH_COMMAND, stderr);
        return CLI_USAGE;
    }
    pdl_error err;
    pdl_model *model = NULL;
    pdl_model_options mo = cli_model_options((int)a.threads, 0);
    if (pdl_model_load(&model, a.model_path, &mo, &err)) {
        fprintf(stderr, "error: %s\n", err.message);
        return CLI_FAIL;
    }
    char *lora_list = a.loras ? strdup(a.loras) : NULL;
    for (char *t = lora_list ? strtok(lora_list, ",") : NULL; t && n_bench_loras < 8; t = strtok(NULL, ",")) {
        if (pdl_lora_load(&bench_loras[n_bench_loras], model, t, &err)) {
            fprintf(stderr, "error: %s\n", err.message);
            free(lora_list);
            while (n_bench_loras) pdl_lora_free(bench_loras[--n_bench_loras]);
            pdl_model_free(model);
            return CLI_FAIL;
        }
        n_bench_loras++;
    }
    free(lora_list);
    pdl_model_info info;
    pdl_model_get_info(model, &info);
    int max_pp = 1, max_depth = 0;
    for (int k = 0; k < a.n_pp; k++) max_pp = a.pp[k] > max_pp ? a.pp[k] : max_pp;
    for (int k = 0; k < a.n_depths; k++) max_depth = a.depths[k] > max_depth ? a.depths[k] : max_depth;
    /* the longest sequence a test runs: the depth, then the prompt and its
     * one sampled token, or the one-token prompt and the generated tokens */
    int longest = max_depth + (max_pp + 1 > (int)a.n_gen + 1 ? max_pp + 1 : (int)a.n_gen + 1);
    if (longest > info.ctx_len) {
        fprintf(stderr, "error: depth %d + %d tokens of test is %d tokens, beyond the model's context length %d\n",
                max_depth, longest - max_depth, longest, info.ctx_len);
        pdl_model_free(model);
        return CLI_USAGE;
    }
    a.eo.max_num_batched_tokens = max_pp > 256 ? max_pp : 256; /* each prompt in one forward */
    a.eo.max_num_seqs = 256;
    if (!a.eo.kv_cache_memory) {
        /* enough for the largest test, not gigabytes of untouched pool; at a
         * depth, room for each sequence's depth prefix to stay cached while
         * a run's new blocks come from the others (then evicted ones) */
        int max_b = 1;
        for (int k = 0; k < a.n_batches; k++) max_b = a.batches[k] > max_b ? a.batches[k] : max_b;
        size_t tokens = (size_t)longest * (size_t)max_b + 64;
        if (max_depth > 0) tokens += (size_t)(longest - max_depth) * (size_t)max_b;
        a.eo.kv_cache_memory = pdl_kv_cache_block_bytes(model, a.eo.kv_dtype, 16) * (tokens / 16 + 4);
        if (info.n_recurrent_layers > 0) {
            /* A hybrid model's state slots come out of the same budget: one
             * live slot per sequence (the engine gives them at most half of
             * it) and up to two prefix snapshots per live slot, so the
             * blocks keep the bytes above whatever the engine takes. */
            a.eo.max_num_seqs = max_b;
            a.eo.kv_cache_memory += 3 * (size_t)max_b * info.state_bytes;
        }
        /* the longest sequence a test runs, which that pool holds */
        int need = longest + 16;
        a.eo.max_model_len = need < info.ctx_len ? need : info.ctx_len;
    }
    pdl_engine *e = NULL;
    if (pdl_engine_create(&e, model, &a.eo, &err)) {
        fprintf(stderr, "error: %s\n", err.message);
        pdl_model_free(model);
        return CLI_FAIL;
    }
    pdl_engine_stats st;
    pdl_engine_get_stats(e, &st);

    static bench_result results[8 * 16]; /* depths x (prompt lengths + batches) */
    int n_results = 0;
    for (int d = 0; d < a.n_depths; d++) {
        int depth = a.depths[d];
        for (int k = 0; k < a.n_pp; k++)
            if (a.pp[k] > 0)
                results[n_results++] = (bench_result){.n_prompt = a.pp[k], .n_gen = 1, .batch = 1, .depth = depth};
        for (int k = 0; a.n_gen > 0 && k < a.n_batches; k++)
            results[n_results++] =
                (bench_result){.n_prompt = 1, .n_gen = (int)a.n_gen, .batch = a.batches[k], .depth = depth};
    }
    bool tty = isatty(2);
    int total = n_results * (int)(a.reps + 1), done = 0;
    int rc = CLI_OK;
    double wbytes = weight_bytes_per_token(model);
    double kv_bytes_per_token = (double)pdl_kv_cache_block_bytes(model, a.eo.kv_dtype, 16) / 16;
    for (int t = 0; t < n_results && rc == CLI_OK; t++) {
        bench_result *r = &results[t];
        int n = r->n_gen == 1 ? r->n_prompt : r->n_gen;
        if (r->depth > 0) snprintf(r->test, sizeof r->test, "%s%d @ d%d", r->n_gen == 1 ? "pp" : "tg", n, r->depth);
        else snprintf(r->test, sizeof r->test, "%s%d", r->n_gen == 1 ? "pp" : "tg", n);
        /* the depth tokens the prefix cache must serve each timed run (whole
         * blocks; a remainder is recomputed inside the timed forward) */
        long depth_served = (long)(r->depth / 16 * 16) * r->batch;
        for (int rep = 0; rep <= a.reps && rc == CLI_OK; rep++) {
            double tps;
            long cached = 0;
            /* every run's prompts are new (a seed per test and run): the prefix
             * cache must not serve a prompt the bench measures as computed,
             * only the depth's tokens, which the warm-up run (rep 0) prefilled */
            uint64_t seed = 1234 + (uint64_t)t * 1000003 + (uint64_t)rep * 7;
            if (run_once(e, info.vocab, r->depth, t, r->n_prompt, r->n_gen, r->batch, seed, 0.0f, &tps, &cached)) {
                rc = CLI_FAIL;
            } else if (rep > 0 && cached != depth_served) {
                fprintf(stderr,
                        "error: %s: the prefix cache served %ld of the %ld depth tokens, so the timed run would "
                        "include the depth's prefill (a model whose prefix cache cannot hold it?)\n",
                        r->test, cached, depth_served);
                rc = CLI_FAIL;
            } else if (rep > 0) {
                r->samples[r->n_samples++] = tps; /* rep 0 warms up (and prefills the depth) */
                r->cached += cached;
            }
            done++;
            if (tty) {
                int w = 30, fill = done * w / total;
                fprintf(stderr, "\r[%.*s%*s] %d/%d %s", fill, "##############################", w - fill, "", done,
                        total, r->test);
                fflush(stderr);
            }
        }
        if (rc == CLI_OK) {
            summarize(r);
            /* decode reads every weight and, at a depth, the K/V of the
             * context so far (on average the depth plus half the tokens) */
            double ctx_avg = r->depth + r->n_gen / 2.0;
            r->gbps = r->n_gen > 1 && r->batch == 1
                          ? (wbytes + (r->depth > 0 ? kv_bytes_per_token * ctx_avg : 0)) * r->median / 1e9
                          : 0;
            r->gflops = r->n_gen == 1 ? flops_forward(model, r->n_prompt, r->depth) * r->median / r->n_prompt / 1e9
                                      : flops_forward(model, 1, ctx_avg) * r->median / 1e9;
        }
    }
    if (tty) fprintf(stderr, "\r%*s\r", 60, "");
    struct rusage ru; /* before the roofline's 1 GiB buffer */
    getrusage(RUSAGE_SELF, &ru);
    bench_roofline roof = {0};
    if (rc == CLI_OK && a.roofline) {
        if (tty) fprintf(stderr, "measuring the machine's peak and bandwidth...\n");
        bench_roofline_measure(model->kernels.isa, (int)a.threads, &roof);
    }
    bench_attention attk = {0};
    if (rc == CLI_OK && a.attention_kernel) {
        const pdl_model_config *mc = &model->cfg;
        int keys = 0; /* the deepest -d, or 4096 */
        for (int k = 0; k < a.n_depths; k++)
            if (a.depths[k] > keys) keys = a.depths[k];
        if (keys == 0) keys = 4096;
        if (tty) fprintf(stderr, "timing the attention kernel...\n");
        if (mc->head_dim <= 0 || mc->n_kv_heads <= 0) {
            fprintf(stderr, "error: --attention-kernel: the model has no attention heads\n");
            rc = CLI_FAIL;
        } else if (bench_attention_measure(model->kernels.isa, mc->head_dim, mc->n_heads / mc->n_kv_heads, keys,
                                           a.eo.kv_dtype, &attk)) {
            fprintf(stderr, "error: out of memory for the attention kernel's cache\n");
            rc = CLI_FAIL;
        }
    }
    /* the peak that bounds these weights, for the family in effect: BF16
     * dot products for BF16 weights on CPUs that have them (with BF16
     * activations), INT8 dot products for the block formats (VNNI, or AVX2's
     * VPMADDUBSW step), F32 FMA otherwise */
    const char *peak_name = "F32 FMA";
    double peak = roof.f32_gflops;
    if (strstr(info.weight_types, "BF16") && roof.bf16_gflops > 0 && matmul_bf16_activations()) {
        peak = roof.bf16_gflops;
        peak_name = "BF16 dot";
    } else if (integer_weights(info.weight_types) && roof.int8_gops > 0) {
        peak = roof.int8_gops;
        peak_name = "INT8 dot";
    }
    if (rc == CLI_OK) {
        char cpu[256], feats[256];
        cpu_model(cpu, sizeof cpu);
        cpu_features(feats, sizeof feats);
        int nthreads = a.threads ? (int)a.threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
        const char *logits = st.selective_logits ? "selective" : "full";
        /* the model's kernel family, and BF16 activations where they apply */
        const pdl_kernels *k = &model->kernels;
        char isa[96];
        bool int_weights = integer_weights(info.weight_types);
        pdl_attention_table att; /* the attention order the contexts took (PAGEDLM_BF16_ATTENTION) */
        attn_table_for(k->isa, attn_order(), &att);
        char att_isa[32] = ""; /* +bf16-attention, +amx-attention */
        if (att.order != PDL_ATTN_F32) snprintf(att_isa, sizeof att_isa, "+%s-attention", attn_order_name(att.order));
        snprintf(isa, sizeof isa, "%s%s%s", cpu_isa_name(k->isa),
                 strstr(info.weight_types, "BF16") && k->isa == PDL_ISA_AVX512 &&
                         cpu_features_get()->avx512bf16 && k->bf16_activations
                     ? "+bf16-activations"
                 : int_weights && k->panels.avxvnni ? "+avx-vnni" /* the integer panels' tiles */
                     : "",
                 att_isa);
        const char *kvd = a.eo.kv_dtype == PDL_KV_F32    ? "f32"
                          : a.eo.kv_dtype == PDL_KV_Q8_0 ? "q8_0"
                          : a.eo.kv_dtype == PDL_KV_Q4_0 ? "q4_0"
                                                         : "f16";
        if (a.json) {
            printf("[\n");
            for (int t = 0; t < n_results; t++) {
                bench_result *r = &results[t];
                printf("  {\"test\": \"%s\", \"n_prompt\": %d, \"n_gen\": %d, \"n_depth\": %d, \"batch\": %d, "
                       "\"tokens_per_s\": {\"mean\": %.3f, \"sd\": %.3f, \"median\": %.3f, \"samples\": [",
                       r->test, r->n_gen == 1 ? r->n_prompt : 0, r->n_gen == 1 ? 0 : r->n_gen, r->depth, r->batch,
                       r->mean, r->sd, r->median);
                for (int i = 0; i < r->n_samples; i++) printf("%s%.3f", i ? ", " : "", r->samples[i]);
                printf("]}, \"weight_gb_per_s\": %.2f, \"commit\": \"%s\", \"compiler\": \"gcc %s\", \"flags\": \"%s\", "
                       "\"cpu\": \"%s\", \"isa\": \"%s\", \"cpu_features\": \"%s\", \"threads\": %d, "
                       "\"model\": \"%s\", \"weight_types\": \"%s\", \"logits\": \"%s\", \"kv_cache_dtype\": \"%s\", "
                       "\"peak_rss_mb\": %.1f, \"gflops\": %.1f, \"cached_tokens\": %ld, \"state_bytes_per_seq\": %zu",
                       r->gbps, PDL_GIT_COMMIT, __VERSION__, PDL_C_FLAGS, cpu, isa, feats, nthreads, a.model_path,
                       info.weight_types, logits, kvd, ru.ru_maxrss / 1024.0, r->gflops, r->cached, info.state_bytes);
                if (a.attention_kernel)
                    printf(", \"attention_kernel\": {\"order\": \"%s\", \"head_dim\": %d, \"keys\": %d, "
                           "\"queries\": [%d, %d], \"ns_per_query_key\": [%.3f, %.3f]}",
                           attk.order, attk.head_dim, attk.keys, attk.queries[0], attk.queries[1],
                           attk.ns_per_query_key[0], attk.ns_per_query_key[1]);
                if (a.roofline)
                    printf(", \"roofline\": {\"peak\": \"%s\", \"peak_gflops\": %.1f, \"read_gb_per_s\": %.1f, "
                           "\"read_method\": \"%s\", \"read_buffer_mib\": %zu, "
                           "\"fraction_of_peak\": %.3f, \"fraction_of_bandwidth\": %.3f}",
                           peak_name, peak, roof.read_gbs, roof.read_method ? roof.read_method : "none",
                           roof.read_bytes >> 20, peak > 0 ? r->gflops / peak : 0,
                           roof.read_gbs > 0 ? r->gbps / roof.read_gbs : 0);
                printf("}%s\n", t + 1 < n_results ? "," : "");
            }
            printf("]\n");
        } else if (a.csv) {
            printf("test,n_prompt,n_gen,batch,tps_mean,tps_sd,tps_median,samples,weight_gb_per_s,commit,cpu,threads,"
                   "model,weight_types,logits,kv_cache_dtype,state_bytes_per_seq,n_depth\n");
            for (int t = 0; t < n_results; t++) {
                bench_result *r = &results[t];
                printf("%s,%d,%d,%d,%.3f,%.3f,%.3f,%d,%.2f,%s,\"%s\",%d,\"%s\",\"%s\",%s,%s,%zu,%d\n", r->test,
                       r->n_gen == 1 ? r->n_prompt : 0, r->n_gen == 1 ? 0 : r->n_gen, r->batch, r->mean, r->sd,
                       r->median, r->n_samples, r->gbps, PDL_GIT_COMMIT, cpu, nthreads, a.model_path, info.weight_types,
                       logits, kvd, info.state_bytes, r->depth);
            }
        } else {
            printf("| model | weights | threads | logits | test | batch | t/s (mean ± sd) | median | GB/s |\n");
            printf("|---|---|---:|---|---|---:|---:|---:|---:|\n");
            for (int t = 0; t < n_results; t++) {
                bench_result *r = &results[t];
                char gb[32] = "-";
                if (r->gbps > 0) snprintf(gb, sizeof gb, "%.2f", r->gbps);
                printf("| %s | %s | %d | %s | %s | %d | %.2f ± %.2f | %.2f | %s |\n", info.arch, info.weight_types,
                       nthreads, logits, r->test, r->batch, r->mean, r->sd, r->median, gb);
            }
            printf("\ncommit %s, gcc %s (%s), %s [%s], kernels %s, peak RSS %.1f MiB\n", PDL_GIT_COMMIT, __VERSION__,
                   PDL_C_FLAGS, cpu, feats, isa, ru.ru_maxrss / 1024.0);
            if (info.n_recurrent_layers > 0)
                printf("recurrent state: %zu bytes per sequence (%d of %d layers)\n", info.state_bytes,
                       info.n_recurrent_layers, info.n_layers);
            if (a.attention_kernel)
                printf("attention kernel (%s, %s order, %s cache, head_dim %d, %d keys, one thread): %d queries a "
                       "call %.2f ns per query-key, %d queries %.2f ns\n",
                       cpu_isa_name(k->isa), attk.order, kvd, attk.head_dim, attk.keys, attk.queries[0],
                       attk.ns_per_query_key[0], attk.queries[1], attk.ns_per_query_key[1]);
            if (a.roofline) {
                printf("roofline (%s kernels): peaks F32 FMA %.0f GFLOP/s, BF16 dot %.0f GFLOP/s, INT8 dot %.0f GOP/s "
                       "(this model: %s); read bandwidth %.1f GB/s (%d threads, %s, %zu MiB buffer, best pass)\n",
                       cpu_isa_name(k->isa), roof.f32_gflops, roof.bf16_gflops, roof.int8_gops, peak_name,
                       roof.read_gbs, nthreads, roof.read_method ? roof.read_method : "none", roof.read_bytes >> 20);
                for (int t = 0; t < n_results; t++) {
                    bench_result *r = &results[t];
                    if (r->n_gen == 1)
                        printf("  %s: %.1f GFLOP/s = %.0f%% of peak\n", r->test, r->gflops,
                               peak > 0 ? 100 * r->gflops / peak : 0);
                    else if (r->batch == 1)
                        printf("  %s: %.1f GB/s of weights%s = %.0f%% of bandwidth\n", r->test, r->gbps,
                               r->depth > 0 ? " and K/V" : "",
                               roof.read_gbs > 0 ? 100 * r->gbps / roof.read_gbs : 0);
                }
            }
        }
    }
    /* speculative decoding against plain decode, one sequence */
    if (rc == CLI_OK && a.n_gen > 0 && (a.spec_ngram || a.spec_model || a.spec_mtp)) {
        pdl_model *draft = NULL;
        for (int which = 0; which < 3 && rc == CLI_OK; which++) {
            if ((which == 0 && !a.spec_ngram) || (which == 1 && !a.spec_model) || (which == 2 && !a.spec_mtp)) continue;
            pdl_engine_options so = a.eo;
            so.spec_method = which == 0 ? PDL_SPEC_NGRAM : which == 1 ? PDL_SPEC_DRAFT_MODEL : PDL_SPEC_MTP;
            so.num_speculative_tokens = which == 0 ? (int)a.spec_ngram : which == 1 ? (int)a.spec_k : (int)a.spec_mtp;
            char label[512];
            if (which == 1) {
                if (pdl_model_load(&draft, a.spec_model, &mo, &err)) {
                    fprintf(stderr, "error: draft model: %s\n", err.message);
                    rc = CLI_FAIL;
                    break;
                }
                so.draft_model = draft;
                snprintf(label, sizeof label, "draft model %s, k %d", a.spec_model, a.spec_k);
            } else if (which == 2) {
                snprintf(label, sizeof label, "MTP block, k %d", a.spec_mtp);
            } else {
                snprintf(label, sizeof label, "n-gram, k %d", a.spec_ngram);
            }
            pdl_engine *es = NULL;
            if (pdl_engine_create(&es, model, &so, &err)) {
                fprintf(stderr, "error: %s\n", err.message);
                rc = CLI_FAIL;
            } else if (bench_spec(e, es, info.vocab, (int)a.n_gen, (int)a.reps, a.spec_temp, label, a.json)) {
                rc = CLI_FAIL;
            }
            pdl_engine_free(es);
        }
        pdl_model_free(draft);
    }
    pdl_engine_free(e);
    while (n_bench_loras) pdl_lora_free(bench_loras[--n_bench_loras]);
    pdl_model_free(model);
    return rc;
}
