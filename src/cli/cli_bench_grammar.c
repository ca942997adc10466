/*
 * cli_bench_grammar.c - `pagedlm bench-grammar`: how long the grammar engine
 * takes to compute one token mask, on a real vocabulary.
 *
 * For each tokenizer (-t, repeatable) and each case (a JSON schema with
 * nested objects, any JSON object; or --schema FILE), it compiles the
 * grammar, then walks random valid paths: every step fills the mask (the
 * timed part), then picks an allowed token (40% uniformly, 40% the one of a
 * sample that leaves the fewest bytes to a complete text, 20% one of a
 * sample with JSON punctuation in it) and accepts it, until an end token
 * (taken at random once allowed, after 16 tokens) or --tokens. The first sequence starts
 * with an empty token cache (each new parser state pays its trie walk), the
 * later ones reuse it, as requests sharing a compiled grammar do; both are
 * reported, with mean, median, p99 and max per mask. One thread.
 *
 * What it is not for: correctness (tests/test_grammar*.c).
 */
#define _POSIX_C_SOURCE 200809L
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli_args.h"
#include "grammar/grammar.h"
#include "tokenizer/tokenizer.h"
#include "util/clock.h"
#include "util/sorted.h"

/* Nested objects, arrays of objects, enums, bounded numbers, formats. */
static const char NESTED_SCHEMA[] =
    "{\"type\": \"object\", \"properties\": {"
    "\"id\": {\"type\": \"string\", \"format\": \"uuid\"},"
    "\"customer\": {\"type\": \"object\", \"properties\": {"
    "  \"name\": {\"type\": \"string\"}, \"email\": {\"type\": \"string\", \"format\": \"email\"},"
    "  \"address\": {\"type\": \"object\", \"properties\": {\"street\": {\"type\": \"string\"}, \"city\": {\"type\": \"string\"},"
    "    \"zip\": {\"type\": \"string\", \"pattern\": \"^[0-9]{5}$\"}, \"country\": {\"enum\": [\"US\", \"CA\", \"MX\"]}},"
    "    \"required\": [\"street\", \"city\", \"country\"]}},"
    "  \"required\": [\"name\", \"address\"]},"
    "\"items\": {\"type\": \"array\", \"items\": {\"type\": \"object\", \"properties\": {"
    "  \"sku\": {\"type\": \"string\"}, \"quantity\": {\"type\": \"integer\", \"minimum\": 1, \"maximum\": 1000},"
    "  \"price\": {\"type\": \"number\", \"minimum\": 0}, \"tags\": {\"type\": \"array\", \"items\": {\"type\": \"string\"}}},"
    "  \"required\": [\"sku\", \"quantity\", \"price\"]}, \"minItems\": 1},"
    "\"status\": {\"enum\": [\"pending\", \"shipped\", \"delivered\"]},"
    "\"notes\": {\"type\": [\"string\", \"null\"]},"
    "\"created\": {\"type\": \"string\", \"format\": \"date-time\"}},"
    "\"required\": [\"id\", \"customer\", \"items\", \"status\"]}";

typedef struct stats {
    double mean, p50, p99, max;
    int n;
} stats;

static stats summarize(double *t, int n) {
    stats s = {0};
    s.n = n;
    if (n == 0) return s;
    double sum = 0;
    for (int i = 0; i < n; i++) sum += t[i];
    sorted_doubles(t, (size_t)n);
    s.mean = sum / n;
    s.p50 = t[n / 2];
    s.p99 = t[(int)((double)(n - 1) * 0.99 + 0.5)];
    s.max = t[n - 1];
    return s;
}

static uint64_t next_rand(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static bool has_punct(const char *b, size_t l) {
    for (size_t i = 0; i < l; i++)
        if (memchr("{[,:\"", b[i], 5)) return true;
    return false;
}

typedef struct bench_case {
    const char *name;
    gram_spec spec;
} bench_case;

static int run_case(const char *tok_path, const gram_vocab *v, const bench_case *bc, long max_tokens, long runs,
                    uint64_t seed, bool json) {
    pdl_error err;
    double t0 = clock_now_s();
    gram_grammar *g = NULL;
    if (gram_compile(&g, v, &bc->spec, &err) != 0) {
        fprintf(stderr, "error: %s: %s\n", bc->name, err.message);
        return CLI_FAIL;
    }
    double compile_ms = (clock_now_s() - t0) * 1e3;
    int n = gram_vocab_size(v);
    size_t words = gram_mask_words(v);
    uint64_t *bits = malloc(words * sizeof *bits);
    int32_t *allowed = malloc((size_t)n * sizeof *allowed);
    float *logits = calloc((size_t)n, sizeof *logits);
    double *cold = malloc((size_t)max_tokens * sizeof *cold);
    double *warm = malloc((size_t)(max_tokens * (runs > 1 ? runs - 1 : 1)) * sizeof *warm);
    double *all = malloc((size_t)(max_tokens * runs) * sizeof *all);
    if (!bits || !allowed || !logits || !cold || !warm || !all) {
        fprintf(stderr, "error: out of memory\n");
        return CLI_FAIL;
    }
    int n_cold = 0, n_warm = 0, n_all = 0, ended = 0;
    double apply_s = 0;
    uint64_t rng = seed;
    gram_stats st0;
    gram_grammar_stats(g, &st0);
    for (long r = 0; r < runs; r++) {
        gram_matcher *m = gram_matcher_new(g);
        if (!m) {
            fprintf(stderr, "error: out of memory\n");
            return CLI_FAIL;
        }
        for (long step = 0; step < max_tokens; step++) {
            double a = clock_now_s();
            int fill = gram_matcher_fill_mask(m, bits);
            double dt = clock_now_s() - a;
            if (fill != 0) {
                fprintf(stderr, "error: out of memory computing a mask\n");
                return CLI_FAIL;
            }
            for (int i = 0; i < n; i++) logits[i] = (float)(i & 7); /* a fresh row, as the LM head leaves it */
            a = clock_now_s();
            gram_mask_apply(bits, logits, n);
            apply_s += clock_now_s() - a;
            all[n_all++] = dt;
            if (r == 0) cold[n_cold++] = dt;
            else warm[n_warm++] = dt;
            int na = 0;
            bool end_ok = false;
            for (size_t w = 0; w < words; w++)
                for (uint64_t x = bits[w]; x; x &= x - 1) {
                    int32_t id = (int32_t)(w * 64) + __builtin_ctzll(x);
                    if (gram_vocab_is_end(v, id)) end_ok = true;
                    else allowed[na++] = id;
                }
            /* end when allowed after a few tokens (or when nothing else is) */
            if (end_ok && (na == 0 || (step >= 16 && next_rand(&rng) % 4 == 0))) {
                ended++;
                break;
            }
            if (na == 0) break;
            /* 40% a uniform pick, 40% the sampled token closest to a complete
             * text, 20% a sampled token with JSON structure in it ({[,:") */
            int32_t pick = allowed[next_rand(&rng) % (uint64_t)na];
            uint64_t mode = next_rand(&rng) % 5;
            if (mode >= 3) {
                for (int k = 0; k < 16; k++) {
                    int32_t id = allowed[next_rand(&rng) % (uint64_t)na];
                    size_t l;
                    const char *b = gram_vocab_token(v, id, &l);
                    if (b && has_punct(b, l)) {
                        pick = id;
                        break;
                    }
                }
            } else if (mode >= 1) {
                int best = -1;
                for (int k = 0; k < 16; k++) {
                    int32_t id = allowed[next_rand(&rng) % (uint64_t)na];
                    if (!gram_matcher_accept_token(m, id)) continue;
                    int d = gram_matcher_bytes_to_end(m);
                    gram_matcher_rollback(m, 1);
                    if (best < 0 || d < best) best = d, pick = id;
                }
            }
            if (!gram_matcher_accept_token(m, pick)) {
                fprintf(stderr, "error: %s: token %d was in the mask but rejected\n", bc->name, pick);
                return CLI_FAIL;
            }
        }
        gram_matcher_free(m);
    }
    gram_stats st;
    gram_grammar_stats(g, &st);
    stats sc = summarize(cold, n_cold), sw = summarize(warm, n_warm), sa = summarize(all, n_all);
    double apply_us = n_all ? apply_s / n_all * 1e6 : 0;
    if (json) {
        printf("{\"tokenizer\": \"%s\", \"vocab\": %d, \"case\": \"%s\", \"compile_ms\": %.2f, \"compile_work\": %lld, \"states\": %d, "
               "\"masks\": %d, \"sequences\": %ld, \"ended\": %d, \"mean_us\": %.2f, \"p50_us\": %.2f, \"p99_us\": %.2f, "
               "\"max_us\": %.2f, \"cold_mean_us\": %.2f, \"cold_p99_us\": %.2f, \"warm_mean_us\": %.2f, "
               "\"warm_p99_us\": %.2f, \"state_walks\": %ld, \"state_walk_ms\": %.2f, \"apply_us\": %.2f}\n",
               tok_path, n, bc->name, compile_ms, st.compile_work, st.n_states, sa.n, runs, ended, sa.mean * 1e6, sa.p50 * 1e6,
               sa.p99 * 1e6, sa.max * 1e6, sc.mean * 1e6, sc.p99 * 1e6, sw.mean * 1e6, sw.p99 * 1e6, st.class_walks,
               st.class_walk_ms, apply_us);
    } else {
        printf("%s  (vocab %d)  %s\n", tok_path, n, bc->name);
        printf("  compile %.2f ms (%lld steps of work), %d DFA states (%d walk classes), %d rules\n", compile_ms,
               st.compile_work, st.n_states, st.n_walk_classes, st.n_rules);
        printf("  %d masks over %ld sequences (%d ended by an end token)\n", sa.n, runs, ended);
        printf("  all    mean %8.1f us  p50 %8.1f us  p99 %8.1f us  max %8.1f us\n", sa.mean * 1e6, sa.p50 * 1e6,
               sa.p99 * 1e6, sa.max * 1e6);
        printf("  cold   mean %8.1f us  p50 %8.1f us  p99 %8.1f us  max %8.1f us  (first sequence, %d masks)\n",
               sc.mean * 1e6, sc.p50 * 1e6, sc.p99 * 1e6, sc.max * 1e6, sc.n);
        if (sw.n)
            printf("  warm   mean %8.1f us  p50 %8.1f us  p99 %8.1f us  max %8.1f us\n", sw.mean * 1e6, sw.p50 * 1e6,
                   sw.p99 * 1e6, sw.max * 1e6);
        printf("  state walks %ld (%.1f ms in all), mask apply %.1f us a row\n", st.class_walks, st.class_walk_ms,
               apply_us);
    }
    free(bits);
    free(allowed);
    free(logits);
    free(cold);
    free(warm);
    free(all);
    gram_grammar_free(g);
    return CLI_OK;
}

/* What the command line asks for. */
typedef struct bench_grammar_args {
    const char *toks[8];         /* -t: tokenizers, in order */
    int n_toks;
    const char *schema_file;
    int max_tokens, runs, n_logits;
    uint64_t seed;
    bool json;
} bench_grammar_args;

static int parse_tokenizer(void *args, const cli_option *o, const char *opt, const char *v) {
    (void)o, (void)opt;
    bench_grammar_args *a = args;
    if (a->n_toks == 8) {
        fprintf(stderr, "error: at most 8 tokenizers\n");
        return -1;
    }
    a->toks[a->n_toks++] = v;
    return 0;
}

#define A(f) offsetof(bench_grammar_args, f)
static const cli_option BENCH_GRAMMAR_OPTIONS[] = {
    {"--tokenizer", "-t", CLI_OPT_CUSTOM, 0, .value = "TOKENIZER", .parse = parse_tokenizer,
     .help = "a .gguf file or a folder with tokenizer.json (repeatable, up to 8)"},
    {"--schema", NULL, CLI_OPT_STRING, A(schema_file), .value = "FILE",
     .help = "a JSON Schema to time instead of the built-in cases\n"
             "(built in: a schema with nested objects, and any JSON object)"},
    {"--tokens", NULL, CLI_OPT_INT, A(max_tokens), .min = 1, .max = 1000000, .value = "N",
     .help = "tokens per sequence at most (default 256)"},
    {"--n-vocab", NULL, CLI_OPT_INT, A(n_logits), .min = 1, .max = 100000000, .value = "N",
     .help = "the model's logits per row when longer than the tokenizer (Qwen3: 151936)"},
    {"--runs", NULL, CLI_OPT_INT, A(runs), .min = 1, .max = 100000, .value = "R",
     .help = "sequences per case (default 20; the first starts with a cold cache)"},
    {"--seed", NULL, CLI_OPT_U64, A(seed), .value = "S", .help = "random path seed (default 1)"},
    {"--json", NULL, CLI_OPT_FLAG, A(json), .help = "one JSON object per case"},
};
#undef A

static const cli_command BENCH_GRAMMAR_COMMAND = {
    .name = "bench-grammar",
    .usage = "usage: pagedlm bench-grammar -t TOKENIZER [-t TOKENIZER ...] [--schema FILE] [--tokens N]\n"
             "                             [--n-vocab N] [--runs R] [--seed S] [--json]\n"
             "times the token mask of constrained decoding on a real vocabulary, one thread.\n",
    .options = BENCH_GRAMMAR_OPTIONS,
    .n_options = sizeof BENCH_GRAMMAR_OPTIONS / sizeof BENCH_GRAMMAR_OPTIONS[0],
};

int cli_bench_grammar(int argc, char **argv) {
    bench_grammar_args a = {.max_tokens = 256, .runs = 20, .seed = 1};
    int prc = cli_parse(&BENCH_GRAMMAR_COMMAND, argc, argv, &a);
    if (prc) return prc > 0 ? CLI_OK : CLI_USAGE;
    if (a.n_toks == 0) {
        fprintf(stderr, "error: bench-grammar needs -t TOKENIZER\n");
        cli_print_help(&BENCH_GRAMMAR_COMMAND, stderr);
        return CLI_USAGE;
    }
    char *schema_text = NULL;
    if (a.schema_file) {
        FILE *f = fopen(a.schema_file, "rb");
        if (!f) {
            fprintf(stderr, "error: %s: cannot open\n", a.schema_file);
            return CLI_FAIL;
        }
        fseek(f, 0, SEEK_END);
        long len = ftell(f);
        fseek(f, 0, SEEK_SET);
        schema_text = calloc(1, (size_t)(len > 0 ? len : 0) + 1);
        if (!schema_text || (len > 0 && fread(schema_text, 1, (size_t)len, f) != (size_t)len)) {
            fclose(f);
            free(schema_text);
            fprintf(stderr, "error: %s: cannot read\n", a.schema_file);
            return CLI_FAIL;
        }
        fclose(f);
    }
    bench_case cases[2];
    int n_cases = 0;
    if (schema_text) {
        cases[n_cases++] = (bench_case){a.schema_file, {.kind = GRAM_JSON_SCHEMA, .text = schema_text}};
    } else {
        cases[n_cases++] = (bench_case){"nested JSON schema", {.kind = GRAM_JSON_SCHEMA, .text = NESTED_SCHEMA}};
        cases[n_cases++] = (bench_case){"free JSON (json_object)", {.kind = GRAM_JSON_OBJECT}};
    }
    int rc = CLI_OK;
    for (int t = 0; t < a.n_toks && rc == CLI_OK; t++) {
        pdl_error err;
        tok_tokenizer *tok = NULL;
        gram_vocab *v = NULL;
        double t0 = clock_now_s();
        if (tok_load_path(&tok, a.toks[t], &err) != 0 || gram_vocab_from_tokenizer(&v, tok, (int)a.n_logits, NULL, 0, &err) != 0) {
            fprintf(stderr, "error: %s\n", err.message);
            tok_free(tok);
            rc = CLI_FAIL;
            break;
        }
        if (!a.json)
            printf("%s: vocabulary of %d tokens (%d in the tokenizer), trie of %d nodes, loaded in %.0f ms\n", a.toks[t],
                   gram_vocab_size(v), tok_vocab_size(tok), gram_vocab_trie_nodes(v), (clock_now_s() - t0) * 1e3);
        for (int c = 0; c < n_cases && rc == CLI_OK; c++)
            rc = run_case(a.toks[t], v, &cases[c], a.max_tokens, a.runs, a.seed, a.json);
        gram_vocab_free(v);
        tok_free(tok);
    }
    free(schema_text);
    return rc;
}
