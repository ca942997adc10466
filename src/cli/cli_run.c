/*
 * cli_run.c - `pagedlm run`: generate a continuation of one prompt, as one
 * request through the engine (the same path as the server's: stop strings,
 * n samples, logprobs and the prefix cache come with it).
 *
 * Streams the continuation to stdout as it is produced (or prints one JSON
 * object with --json); model information and speed go to stderr.
 */
#define _POSIX_C_SOURCE 200809L
#include <jansson.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli_args.h"
#include "engine/reasoning.h"
#include "cli/cli_batch.h"
#include "grammar/grammar.h"
#include "util/file_map.h"
#include "cli/cli_vision.h"
#include "util/clock.h"

#define MAX_SAMPLES 64

/* The one structured-output option given (NULL text: none). */
typedef struct run_constraint {
    const char *flag;
    gram_kind kind;
    const char *text;  /* the option's value, or a file's path when from_file */
    bool from_file;
} run_constraint;

static int take_constraint(run_constraint *c, const char *flag, gram_kind kind, const char *v, bool from_file) {
    if (c->text) {
        fprintf(stderr, "error: %s and %s: give one structured-output option\n", c->flag, flag);
        return -1;
    }
    *c = (run_constraint){flag, kind, v, from_file};
    return 0;
}

/* Compiles the constraint for model's vocabulary (*out NULL when none). */
static int compile_constraint(const run_constraint *c, const pdl_model *model, gram_vocab **vocab, gram_grammar **out) {
    *out = NULL;
    if (!c->text) return 0;
    pdl_error err;
    char *file = NULL;
    size_t len = 0;
    if (c->from_file && file_read(c->text, PDL_READ_MAX_JSON, &file, &len, &err)) {
        fprintf(stderr, "error: %s: %s\n", c->flag, err.message);
        return -1;
    }
    gram_spec spec = {.kind = c->kind, .text = file ? file : c->text, .len = file ? len : 0};
    int rc = 0;
    if (pdl_model_grammar_vocab(model, vocab, &err) || gram_compile(out, *vocab, &spec, &err)) {
        fprintf(stderr, "error: %s: %s\n", c->flag, err.message);
        rc = -1;
    }
    free(file);
    return rc;
}

/* What the request produced, per sample. */
typedef struct run_output {
    bool json, stream;  /* stream: print sample 0's text as it comes */
    bool ids_only;      /* no tokenizer: token ids instead of text */
    int n;
    json_t *tokens[MAX_SAMPLES], *logprobs[MAX_SAMPLES];
    char *text[MAX_SAMPLES];
    size_t len[MAX_SAMPLES];
    const char *finish[MAX_SAMPLES];
    size_t n_generated;
    double t_first;     /* when the first token came (the prompt's prefill done); 0 = not yet */
    reasoning_split *think[MAX_SAMPLES]; /* --reasoning-parser: each sample's text split; else NULL */
    char *reasoning[MAX_SAMPLES];
    size_t reasoning_len[MAX_SAMPLES];
    bool hide_think;
    const pdl_model *model; /* control tokens' text (harmony) */
} run_output;

static void append(char **text, size_t *len, const char *t, size_t n) {
    char *p = realloc(*text, *len + n + 1);
    if (!p) return;
    memcpy(p + *len, t, n);
    *len += n;
    p[*len] = '\0';
    *text = p;
}

/* A piece of sample `piece_sample`'s text: its answer or its thinking. */
typedef struct run_piece {
    run_output *o;
    int i;
} run_piece;

static void on_piece(void *user, bool reasoning, const char *t, size_t n) {
    run_piece *x = user;
    run_output *o = x->o;
    if (n == 0) return;
    if (o->stream && x->i == 0 && !(reasoning && o->hide_think)) {
        fwrite(t, 1, n, stdout);
        fflush(stdout);
    }
    if (reasoning) append(&o->reasoning[x->i], &o->reasoning_len[x->i], t, n);
    else append(&o->text[x->i], &o->len[x->i], t, n);
}


static void on_event(const pdl_event *ev, void *user) {
    run_output *o = user;
    int i = ev->index;
    if (i < 0 || i >= o->n) return;
    if (ev->kind == PDL_EVENT_TOKEN) {
        o->n_generated++;
        if (o->t_first == 0) o->t_first = clock_now_s();
        json_array_append_new(o->tokens[i], json_integer(ev->token));
        if (o->logprobs[i]) {
            json_t *top = json_array();
            for (int k = 0; k < ev->n_top; k++)
                json_array_append_new(top, json_pack("{s:i, s:f}", "token", ev->top[k].token, "logprob",
                                                     (double)ev->top[k].logprob));
            json_array_append_new(o->logprobs[i], json_pack("{s:i, s:f, s:o}", "token", ev->token, "logprob",
                                                            (double)ev->logprob, "top", top));
        }
        if (o->ids_only && o->stream) {
            printf("%d ", ev->token);
            fflush(stdout);
        }
    } else if (ev->kind == PDL_EVENT_FINISHED) {
        o->finish[i] = ev->finish_reason;
    }
    run_piece x = {o, i};
    if (o->think[i]) {
        reasoning_split_feed_token(o->think[i], o->model, ev->kind == PDL_EVENT_TOKEN ? ev->token : -1, ev->text,
                                   ev->text_len, on_piece, &x);
        if (ev->kind == PDL_EVENT_FINISHED) reasoning_split_finish(o->think[i], on_piece, &x);
    } else {
        on_piece(&x, false, ev->text, ev->text_len);
    }
}

/* The sample as JSON: {"tokens", "text", "finish_reason"[, "logprobs"]}. */
static json_t *sample_json(run_output *o, int i) {
    json_t *c = json_pack("{s:O, s:s%, s:s}", "tokens", o->tokens[i], "text", o->text[i] ? o->text[i] : "", o->len[i],
                          "finish_reason", o->finish[i] ? o->finish[i] : "abort");
    if (o->logprobs[i]) json_object_set(c, "logprobs", o->logprobs[i]);
    if (o->think[i])
        json_object_set_new(c, "reasoning", o->reasoning_len[i] ? json_stringn(o->reasoning[i], o->reasoning_len[i])
                                                                 : json_null());
    return c;
}

/* --verbose: whether the selective head (norm + LM head on sampled rows only)
 * reproduces the full head's bytes for this model, as the engine decides at
 * load time. */
static int print_probe(pdl_model *model) {
    bool ok = false;
    char reason[512];
    pdl_error err;
    if (pdl_model_probe_selective_logits(model, &ok, reason, sizeof reason, &err)) {
        fprintf(stderr, "error: %s\n", err.message);
        return -1;
    }
    if (ok) fprintf(stderr, "pagedlm: selective-logits probe: accepted (selective logits equal full logits)\n");
    else fprintf(stderr, "pagedlm: selective-logits probe: rejected: %s\n", reason);
    return 0;
}

/* ---- options ------------------------------------------------------------------ */

/* What the command line asks for. */
typedef struct run_args {
    const char *model_path, *prompt, *tokens_arg, *batch_file;
    const char *lora_path;        /* --lora */
    float lora_scale;             /* --lora-scale */
    cli_images ci;                /* --image paths and --mmproj */
    const char *stops[64];
    int n_stops;
    char *draft_path;             /* --speculative-config's draft model, malloc'ed */
    pdl_engine_options eo;        /* --speculative-config and the --batch-file engine options */
    int n_predict, threads, ctx, n_samples, n_logprobs, top_k;
    float temp, top_p, min_p;
    uint64_t seed;
    bool have_seed, json, ignore_eos, verbose, hide_think;
    const reasoning_format *think;
    int think_budget;
    pdl_kv_dtype kv_dtype;
    run_constraint constraint;
} run_args;

static int parse_seed(void *args, const cli_option *o, const char *opt, const char *v) {
    (void)o;
    run_args *a = args;
    if (cli_u64(opt, v, &a->seed)) return -1;
    a->have_seed = true;
    return 0;
}

static int parse_stop(void *args, const cli_option *o, const char *opt, const char *v) {
    (void)o, (void)opt;
    run_args *a = args;
    if (a->n_stops == 64 || !v[0]) {
        fprintf(stderr, "error: --stop takes a non-empty string, at most 64 times\n");
        return -1;
    }
    a->stops[a->n_stops++] = v;
    return 0;
}

static int parse_image(void *args, const cli_option *o, const char *opt, const char *v) {
    (void)o, (void)opt;
    return cli_images_add(&((run_args *)args)->ci, v);
}

static int parse_reasoning_parser(void *args, const cli_option *o, const char *opt, const char *v) {
    (void)o, (void)opt;
    run_args *a = args;
    if (!(a->think = reasoning_format_find(v))) {
        fprintf(stderr, "error: unknown --reasoning-parser '%s' (%s)\n", v, reasoning_format_names());
        return -1;
    }
    return 0;
}

static int parse_spec_config(void *args, const cli_option *o, const char *opt, const char *v) {
    (void)o;
    run_args *a = args;
    free(a->draft_path); /* the last --speculative-config wins */
    return cli_spec_config(opt, v, &a->eo, &a->draft_path);
}

/* The structured-output options: tag is the gram_kind, from a file when the
 * option's name ends in "-file". */
static int parse_constraint(void *args, const cli_option *o, const char *opt, const char *v) {
    size_t n = strlen(o->name);
    bool from_file = n > 5 && strcmp(o->name + n - 5, "-file") == 0;
    return take_constraint(&((run_args *)args)->constraint, opt, (gram_kind)o->tag, v, from_file);
}

#define A(f) offsetof(run_args, f)
static const cli_option RUN_OPTIONS[] = {
    {"--model", "-m", CLI_OPT_STRING, A(model_path), .value = "PATH", .help = ".gguf file or Hugging Face folder"},
    {"--prompt", "-p", CLI_OPT_STRING, A(prompt), .value = "TEXT",
     .help = "prompt text (BOS added as the model's tokenizer says)"},
    {"--tokens", NULL, CLI_OPT_STRING, A(tokens_arg), .value = "IDS",
     .help = "prompt as comma-separated token ids instead of text"},
    {"--image", NULL, CLI_OPT_CUSTOM, 0, .value = "FILE", .parse = parse_image,
     .help = "an image (PNG, JPEG, WebP; repeatable): its rows go where -p has <__media__>\n"
             "(llama.cpp's marker), or first"},
    {"--mmproj", NULL, CLI_OPT_STRING, A(ci.mmproj), .value = "FILE",
     .help = "the vision model of a GGUF text model (llama.cpp's mmproj GGUF); a Hugging\n"
             "Face LLaVA folder brings its own"},
    {"--lora", NULL, CLI_OPT_STRING, A(lora_path), .value = "PATH",
     .help = "a LoRA adapter (llama.cpp's flag): a PEFT folder or a llama.cpp LoRA GGUF"},
    {"--lora-scale", NULL, CLI_OPT_FLOAT, A(lora_scale), .min = -1e6, .max = 1e6, .value = "S",
     .help = "the adapter's multiplier (default 1; 0 = off)"},
    {"--n-predict", "-n", CLI_OPT_INT, A(n_predict), .min = 0, .max = 1 << 30, .value = "N",
     .help = "tokens to generate (default 128)"},
    {"--temp", NULL, CLI_OPT_FLOAT, A(temp), .min = 0, .max = INFINITY, .value = "T",
     .help = "temperature; 0 = greedy (default 0.8)"},
    {"--top-k", NULL, CLI_OPT_INT, A(top_k), .min = 0, .max = 1 << 30, .value = "K",
     .help = "keep the K most likely tokens (default 0: off)"},
    {"--top-p", NULL, CLI_OPT_FLOAT, A(top_p), .min = 0, .max = 1, .value = "P",
     .help = "keep the most likely tokens up to P of the mass (default 0: off)"},
    {"--min-p", NULL, CLI_OPT_FLOAT, A(min_p), .min = 0, .max = 1, .value = "P",
     .help = "drop tokens below P times the most likely one's probability (default 0: off)"},
    {"--seed", NULL, CLI_OPT_CUSTOM, 0, .value = "S", .parse = parse_seed,
     .help = "random seed (default: from the clock, printed on stderr)"},
    {"--stop", NULL, CLI_OPT_CUSTOM, 0, .value = "TEXT", .parse = parse_stop,
     .help = "end the text at this string (repeatable; not printed)"},
    {"--samples", NULL, CLI_OPT_INT, A(n_samples), .min = 1, .max = MAX_SAMPLES, .value = "N",
     .help = "N continuations of the prompt (sharing its KV blocks; default 1)"},
    {"--logprobs", NULL, CLI_OPT_INT, A(n_logprobs), .min = 0, .max = 20, .value = "N",
     .help = "with --json: the top-N log-probabilities of every generated token"},
    {"--threads", "-t", CLI_OPT_INT, A(threads), .min = 1, .max = 1024, .value = "N",
     .help = "worker threads (default: all cores)"},
    {"--ctx-size", "-c", CLI_OPT_INT, A(ctx), .min = 1, .max = 1 << 24, .value = "N",
     .help = "context length (default and most: the model's own; more only with\n"
     "PAGEDLM_ALLOW_LONG_MAX_MODEL_LEN=1, untrained positions)"},
    {"--kv-cache-dtype", NULL, CLI_OPT_KV_DTYPE, A(kv_dtype), .value = "T", .help = "f16 (default), f32, q8_0 or q4_0"},
    {"--no-enable-prefix-caching", NULL, CLI_OPT_FLAG, A(eo.no_prefix_caching),
     .help = "with --batch-file: recompute every prompt"},
    {"--enable-prefix-caching", NULL, CLI_OPT_FLAG_OFF, A(eo.no_prefix_caching),
     .help = "with --batch-file: reuse cached prompt blocks (the default)"},
    {"--speculative-config", NULL, CLI_OPT_CUSTOM, 0, .value = "JSON", .parse = parse_spec_config,
     .help = "speculative decoding, vLLM's spelling: {\"method\": \"ngram\",\n"
             "\"num_speculative_tokens\": 4, \"prompt_lookup_min\": 2, \"prompt_lookup_max\": 5}\n"
             "or {\"model\": DRAFT_MODEL, \"num_speculative_tokens\": 4}, or {\"method\": \"mtp\",\n"
             "\"num_speculative_tokens\": 2} (the model's own multi-token-prediction block: Qwen3.5)"},
    {"--ignore-eos", NULL, CLI_OPT_FLAG, A(ignore_eos), .help = "keep generating after the end-of-sequence token"},
    {"--reasoning-parser", NULL, CLI_OPT_CUSTOM, 0, .value = "NAME", .parse = parse_reasoning_parser,
     .help = "qwen3|deepseek_r1|openai: a reasoning model's thinking block (openai:\n"
             "gpt-oss's harmony analysis channel) apart from the\n"
             "answer (with --json: \"reasoning\" beside \"text\"); the block opens in the\n"
             "output, or in the prompt when -p ends with its start marker"},
    {"--hide-reasoning", NULL, CLI_OPT_FLAG, A(hide_think), .help = "with --reasoning-parser: print the answer only"},
    {"--reasoning-budget", NULL, CLI_OPT_INT, A(think_budget), .min = -1, .max = 1 << 30, .value = "N",
     .help = "with --reasoning-parser: thinking tokens at most, then the block is closed"},
    {"--json", NULL, CLI_OPT_FLAG, A(json), .help = "print {prompt_tokens, tokens, text} as one JSON object"},
    {"--verbose", NULL, CLI_OPT_FLAG, A(verbose),
     .help = "also print on stderr the selective-logits probe's decision (accepted or\n"
             "rejected, and why)"},
    {.kind = CLI_OPT_SECTION,
     .help = "structured output (one of; the output is constrained to it and ends when it is complete):"},
    {"--json-schema", "-j", CLI_OPT_CUSTOM, 0, .value = "JSON", .parse = parse_constraint, .tag = GRAM_JSON_SCHEMA,
     .help = "a JSON Schema (llama.cpp's -j)"},
    {"--json-schema-file", NULL, CLI_OPT_CUSTOM, 0, .value = "FILE", .parse = parse_constraint,
     .tag = GRAM_JSON_SCHEMA, .help = "a JSON Schema from a file"},
    {"--grammar", NULL, CLI_OPT_CUSTOM, 0, .value = "GBNF", .parse = parse_constraint, .tag = GRAM_GBNF,
     .help = "a GBNF grammar (llama.cpp's format, rule root)"},
    {"--grammar-file", NULL, CLI_OPT_CUSTOM, 0, .value = "FILE", .parse = parse_constraint, .tag = GRAM_GBNF,
     .help = "a GBNF grammar from a file"},
    {"--regex", NULL, CLI_OPT_CUSTOM, 0, .value = "RE", .parse = parse_constraint, .tag = GRAM_REGEX,
     .help = "the whole output matches RE"},
    {"--choice", NULL, CLI_OPT_CUSTOM, 0, .value = "JSON", .parse = parse_constraint, .tag = GRAM_CHOICE,
     .help = "a JSON list of strings: the output is one of them"},
    {.kind = CLI_OPT_SECTION, .help = "many requests at once:"},
    {"--batch-file", NULL, CLI_OPT_STRING, A(batch_file), .value = "FILE.jsonl",
     .help = "serve every line as a request, all at once (continuous batching); a line\n"
             "is a POST /v1/completions body plus an \"id\" (\"prompt\" text or ids, \"max_tokens\",\n"
             "sampling fields, \"stop\", \"logprobs\", \"n\", \"logit_bias\", \"min_tokens\",\n"
             "\"response_format\", \"structured_outputs\", ...; see docs/cli.md); temperature 0 and\n"
             "max_tokens -n when left out; prints one JSON line per request in input order"},
    {.kind = CLI_OPT_SECTION, .help = "engine options (with --batch-file):"},
    {"--max-num-seqs", NULL, CLI_OPT_INT, A(eo.max_num_seqs), .min = 1, .max = 1 << 20, .value = "N",
     .help = "running sequences at most (default 256)"},
    {"--max-num-batched-tokens", NULL, CLI_OPT_INT, A(eo.max_num_batched_tokens), .min = 1, .max = 1 << 24,
     .value = "N",
     .help = "rows per step at most (default 2048)"},
    {"--max-prefill-chunk", NULL, CLI_OPT_INT, A(eo.max_prefill_chunk), .min = 1, .max = 1 << 24, .value = "N",
     .help = "prompt rows per request per step (default: no limit)"},
    {"--block-size", NULL, CLI_OPT_INT, A(eo.block_size), .min = 1, .max = 1 << 16, .value = "N",
     .help = "tokens per KV block (default 16)"},
    {"--kv-cache-memory", NULL, CLI_OPT_SIZE, A(eo.kv_cache_memory), .value = "SIZE",
     .help = "KV pool size, e.g. 2GiB (default: min(4GiB, half the free memory))"},
    {"--logits", NULL, CLI_OPT_LOGITS, A(eo.logits_mode), .value = "auto|full|selective",
     .help = "head over sampled rows only (auto: when the load-time probe passes)"},
};
#undef A

static const cli_command RUN_COMMAND = {
    .name = "run",
    .usage = "usage: pagedlm run -m MODEL (-p PROMPT | --tokens IDS | --batch-file FILE) [options]\n",
    .options = RUN_OPTIONS,
    .n_options = sizeof RUN_OPTIONS / sizeof RUN_OPTIONS[0],
};

int cli_run(int argc, char **argv) {
    run_args a = {.eo = {.log = cli_log_stderr}, .lora_scale = 1.0f, .n_predict = 128, .n_samples = 1, .n_logprobs = -1, .temp = 0.8f,
                  .think_budget = -1, .kv_dtype = PDL_KV_F16};
    int prc = cli_parse(&RUN_COMMAND, argc, argv, &a);
    if (prc) {
        free(a.draft_path);
        return prc > 0 ? CLI_OK : CLI_USAGE;
    }
    if (!a.model_path || (!!a.prompt + !!a.tokens_arg + !!a.batch_file) != 1) {
        fprintf(stderr, "error: run needs -m MODEL and one of -p PROMPT, --tokens IDS or --batch-file FILE\n");
        cli_print_help(&RUN_COMMAND, stderr);
        free(a.draft_path);
        return CLI_USAGE;
    }
    if (a.ci.n_paths && !a.prompt) {
        fprintf(stderr, "error: --image needs -p PROMPT (its place marked with %s)\n", CLI_MEDIA_MARKER);
        free(a.draft_path);
        return CLI_USAGE;
    }
    if (!a.have_seed) a.seed = (uint64_t)time(NULL);

    pdl_error err;
    pdl_model *model = NULL;
    pdl_model_options mo = cli_model_options((int)a.threads, (int)a.ctx);
    double t0 = clock_now_s();
    if (cli_load_model(&model, a.model_path, &mo, &err)) {
        fprintf(stderr, "error: %s\n", err.message);
        return CLI_FAIL;
    }
    pdl_model *draft = NULL;
    if (a.draft_path) {
        pdl_model_options dmo = cli_model_options((int)a.threads, (int)a.ctx);
        if (cli_load_model(&draft, a.draft_path, &dmo, &err)) {
            fprintf(stderr, "error: draft model: %s\n", err.message);
            free(a.draft_path);
            pdl_model_free(model);
            return CLI_FAIL;
        }
        a.eo.draft_model = draft;
    }
    free(a.draft_path);
    double t_load = clock_now_s() - t0;
    pdl_model_info info;
    pdl_model_get_info(model, &info);
    pdl_lora *lora = NULL;
    if (a.lora_path && a.batch_file) {
        fprintf(stderr, "error: --lora applies to -p / --tokens, not to --batch-file\n");
        pdl_model_free(draft);
        pdl_model_free(model);
        return CLI_USAGE;
    }
    if (a.lora_path && pdl_lora_load(&lora, model, a.lora_path, &err)) {
        fprintf(stderr, "error: %s\n", err.message);
        pdl_model_free(draft);
        pdl_model_free(model);
        return CLI_FAIL;
    }
    if (a.verbose && print_probe(model)) {
        pdl_lora_free(lora);
        pdl_model_free(draft);
        pdl_model_free(model);
        return CLI_FAIL;
    }
    if (a.batch_file && a.constraint.text) {
        fprintf(stderr, "error: %s applies to -p / --tokens, not to --batch-file\n", a.constraint.flag);
        pdl_model_free(draft);
        pdl_model_free(model);
        return CLI_USAGE;
    }
    if (a.batch_file) {
        a.eo.kv_dtype = a.kv_dtype;
        int brc = cli_run_batch(model, a.batch_file, &a.eo, (int)a.n_predict);
        pdl_model_free(draft);
        pdl_model_free(model);
        return brc;
    }

    int32_t *ids = NULL;
    size_t n_ids = 0;
    int rc = CLI_OK;
    gram_vocab *gvocab = NULL;
    gram_grammar *grammar = NULL;
    pdl_mm_prompt mm = {0};
    if (compile_constraint(&a.constraint, model, &gvocab, &grammar)) {
        rc = CLI_FAIL;
    } else if (cli_images_open(&a.ci, model, a.model_path)) {
        rc = CLI_FAIL;
    } else if (a.ci.n_images) {
        if (cli_images_prompt(&a.ci, model, a.prompt, &mm)) rc = CLI_FAIL;
        else ids = mm.ids, n_ids = mm.n_ids, mm.ids = NULL;
        a.eo.vision = a.ci.vision;
    } else if (a.tokens_arg) {
        if (cli_token_list("--tokens", a.tokens_arg, &ids, &n_ids)) rc = CLI_USAGE;
    } else if (pdl_tokenize(model, a.prompt, strlen(a.prompt), true, &ids, &n_ids, &err)) {
        fprintf(stderr, "error: %s\n", err.message);
        rc = CLI_FAIL;
    }
    if (rc == CLI_OK && n_ids == 0) {
        fprintf(stderr, "error: the prompt encodes to no tokens and the model adds no BOS\n");
        rc = CLI_FAIL;
    }
    fprintf(stderr, "pagedlm: %s (%s, %s) %d layers, hidden %d, vocab %d, ctx %d; loaded in %.1f ms; seed %llu\n",
            a.model_path, info.arch, info.weight_types, info.n_layers, info.hidden, info.vocab, info.ctx_len,
            t_load * 1e3, (unsigned long long)a.seed);

    run_output out = {.json = a.json, .stream = !a.json, .ids_only = !pdl_model_has_tokenizer(model),
                      .n = a.n_samples, .hide_think = a.hide_think, .model = model};
    if (out.ids_only && rc == CLI_OK) fprintf(stderr, "pagedlm: no tokenizer for this model: printing token ids\n");
    pdl_reasoning think_params = {0};
    bool opens = a.think && a.prompt && reasoning_prompt_opens(a.think, a.prompt, strlen(a.prompt));
    if (rc == CLI_OK && a.think) {
        reasoning_params(a.think, model, opens, (int)a.think_budget, &think_params);
        if (a.think_budget >= 0 && !think_params.enabled) {
            fprintf(stderr, "error: --reasoning-budget needs '%s' to be one token of the model\n", a.think->end);
            rc = CLI_USAGE;
        }
    }
    for (int i = 0; i < out.n; i++) {
        out.tokens[i] = json_array();
        if (a.n_logprobs >= 0) out.logprobs[i] = json_array();
        if (a.think) out.think[i] = reasoning_split_new(a.think, opens);
    }
    /* one request through the engine, its KV sized for this request alone */
    pdl_engine *engine = NULL;
    if (rc == CLI_OK && a.n_predict > 0) {
        long need = (long)n_ids + a.n_predict;
        a.eo.kv_dtype = a.kv_dtype;
        a.eo.max_num_seqs = (int)a.n_samples;
        a.eo.max_model_len = need < info.ctx_len ? (int)need : info.ctx_len;
        if (pdl_engine_create(&engine, model, &a.eo, &err)) {
            fprintf(stderr, "error: %s\n", err.message);
            rc = CLI_FAIL;
        }
    }
    if (rc == CLI_OK && engine) {
        pdl_request_params rp = {.sampling = {.temperature = a.temp, .top_k = (int)a.top_k, .top_p = a.top_p,
                                              .min_p = a.min_p, .seed = a.seed},
                                 .max_tokens = (int)a.n_predict, .ignore_eos = a.ignore_eos, .stop = a.stops,
                                 .n_stop = a.n_stops, .logprobs = (int)a.n_logprobs, .prompt_logprobs = -1,
                                 .n = (int)a.n_samples, .grammar = grammar, .images = mm.images,
                                 .n_images = mm.n_images, .reasoning = think_params,
                                 .lora = a.lora_scale != 0.0f ? lora : NULL, .lora_scale = a.lora_scale};
        double t1 = clock_now_s();
        int arc = pdl_engine_add_request(engine, ids, n_ids, &rp, on_event, &out, NULL, &err);
        double t_added = clock_now_s();
        if (arc == 0 && mm.n_images) /* the engine encodes a request's images when it takes it */
            fprintf(stderr, "pagedlm: %d image%s encoded in %.1f ms\n", mm.n_images, mm.n_images == 1 ? "" : "s",
                    (t_added - t1) * 1e3);
        if (arc || pdl_engine_run_until_idle(engine, &err)) {
            if (!a.json) fputc('\n', stdout);
            fprintf(stderr, "error: %s\n", err.message);
            rc = CLI_FAIL;
        } else {
            double dt = clock_now_s() - t1;
            if (!a.json) {
                /* the other samples after the first, which streamed */
                for (int i = 1; i < out.n; i++) {
                    printf("\n--- sample %d\n", i);
                    if (out.ids_only) {
                        for (size_t k = 0; k < json_array_size(out.tokens[i]); k++)
                            printf("%lld ", (long long)json_integer_value(json_array_get(out.tokens[i], k)));
                    } else if (out.text[i]) {
                        fwrite(out.text[i], 1, out.len[i], stdout);
                    }
                }
                fputc('\n', stdout);
            }
            fflush(stdout);
            fprintf(stderr, "pagedlm: %zu prompt tokens, %zu generated in %.3f s (%.1f tokens/s)\n", n_ids,
                    out.n_generated, dt, dt > 0 ? out.n_generated / dt : 0.0);
            if (out.t_first > t_added)
                fprintf(stderr, "pagedlm: prefill of %zu tokens in %.1f ms (%.1f tokens/s)\n", n_ids,
                        (out.t_first - t_added) * 1e3, n_ids / (out.t_first - t_added));
            pdl_engine_stats st;
            pdl_engine_get_stats(engine, &st);
            if (a.eo.spec_method != PDL_SPEC_NONE)
                fprintf(stderr, "pagedlm: speculative decoding: %llu drafts, %llu of %llu draft tokens accepted\n",
                        (unsigned long long)st.spec_drafts, (unsigned long long)st.spec_accepted_tokens,
                        (unsigned long long)st.spec_draft_tokens);
        }
    } else if (rc == CLI_OK && !a.json) {
        fputc('\n', stdout); /* -n 0: nothing to generate */
    }
    if (rc == CLI_OK && a.json) {
        json_t *o = json_object(), *pt = json_array();
        for (size_t i = 0; i < n_ids; i++) json_array_append_new(pt, json_integer(ids[i]));
        json_object_set_new(o, "prompt_tokens", pt);
        if (out.n == 1) {
            json_t *c = sample_json(&out, 0);
            json_object_update(o, c);
            json_decref(c);
        } else {
            json_t *samples = json_array();
            for (int i = 0; i < out.n; i++) json_array_append_new(samples, sample_json(&out, i));
            json_object_set_new(o, "samples", samples);
        }
        char *js = json_dumps(o, JSON_COMPACT);
        if (js) printf("%s\n", js);
        free(js);
        json_decref(o);
    }
    for (int i = 0; i < out.n; i++) {
        json_decref(out.tokens[i]);
        json_decref(out.logprobs[i]);
        free(out.text[i]);
        free(out.reasoning[i]);
        reasoning_split_free(out.think[i]);
    }
    pdl_engine_free(engine);
    pdl_lora_free(lora);
    if (grammar) gram_grammar_free(grammar);
    gram_vocab_free(gvocab);
    free(ids);
    pdl_mm_prompt_free(&mm);
    cli_images_close(&a.ci);
    pdl_model_free(draft);
    pdl_model_free(model);
    return rc;
}
