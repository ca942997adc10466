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

static void run_usage(FILE *f) {
    fprintf(f,
            "usage: pagedlm run -m MODEL (-p PROMPT | --tokens IDS) [options]\n"
            "  -m, --model PATH        .gguf file or Hugging Face folder\n"
            "  -p, --prompt TEXT       prompt text (BOS added as the model's tokenizer says)\n"
            "      --tokens IDS        prompt as comma-separated token ids instead of text\n"
            "      --image FILE        an image (PNG, JPEG, WebP; repeatable): its rows go where -p has <__media__>\n"
            "                          (llama.cpp's marker), or first\n"
            "      --mmproj FILE       the vision model of a GGUF text model (llama.cpp's mmproj GGUF); a Hugging\n"
            "                          Face LLaVA folder brings its own\n"
            "  -n, --n-predict N       tokens to generate (default 128)\n"
            "      --temp T            temperature; 0 = greedy (default 0.8)\n"
            "      --top-k K, --top-p P, --min-p P   sampling filters (default off)\n"
            "      --seed S            random seed (default: from the clock, printed on stderr)\n"
            "      --stop TEXT         end the text at this string (repeatable; not printed)\n"
            "      --samples N         N continuations of the prompt (sharing its KV blocks; default 1)\n"
            "      --logprobs N        with --json: the top-N log-probabilities of every generated token\n"
            "  -t, --threads N         worker threads (default: all cores)\n"
            "  -c, --ctx-size N        context length (default and most: the model's own; more only with\n"
            "                          PAGEDLM_ALLOW_LONG_MAX_MODEL_LEN=1, untrained positions)\n"
            "      --kv-cache-dtype T  f16 (default) or f32\n"
            "      --no-enable-prefix-caching  with --batch-file: recompute every prompt\n"
            "      --speculative-config JSON   speculative decoding, vLLM's spelling: {\"method\": \"ngram\",\n"
            "                          \"num_speculative_tokens\": 4, \"prompt_lookup_min\": 2, \"prompt_lookup_max\": 5}\n"
            "                          or {\"model\": DRAFT_MODEL, \"num_speculative_tokens\": 4}\n"
            "      --ignore-eos        keep generating after the end-of-sequence token\n"
            "      --reasoning-parser NAME  qwen3|deepseek_r1: a reasoning model's thinking block apart from the\n"
            "                          answer (with --json: \"reasoning\" beside \"text\"); the block opens in the\n"
            "                          output, or in the prompt when -p ends with its start marker\n"
            "      --hide-reasoning    with --reasoning-parser: print the answer only\n"
            "      --reasoning-budget N  with --reasoning-parser: thinking tokens at most, then the block is closed\n"
            "  structured output (one of; the output is constrained to it and ends when it is complete):\n"
            "      --json-schema JSON  a JSON Schema (llama.cpp's -j); --json-schema-file FILE\n"
            "      --grammar GBNF      a GBNF grammar (llama.cpp's format, rule root); --grammar-file FILE\n"
            "      --regex RE          the whole output matches RE\n"
            "      --choice JSON       a JSON list of strings: the output is one of them\n"
            "      --json              print {prompt_tokens, tokens, text} as one JSON object\n"
            "      --verbose           also print on stderr the selective-logits probe's decision (accepted or\n"
            "                          rejected, and why)\n"
            "\n"
            "  --batch-file FILE.jsonl serve every line as a request, all at once (continuous batching); a line\n"
            "                          is a POST /v1/completions body plus an \"id\" (\"prompt\" text or ids, \"max_tokens\",\n"
            "                          sampling fields, \"stop\", \"logprobs\", \"n\", \"logit_bias\", \"min_tokens\",\n"
            "                          \"response_format\", \"structured_outputs\", ...; see README); temperature 0 and\n"
            "                          max_tokens -n when left out; prints one JSON line per request in input order\n"
            "  engine options (with --batch-file):\n"
            "      --max-num-seqs N            running sequences at most (default 256)\n"
            "      --max-num-batched-tokens N  rows per step at most (default 2048)\n"
            "      --max-prefill-chunk N       prompt rows per request per step (default: no limit)\n"
            "      --block-size N              tokens per KV block (default 16)\n"
            "      --kv-cache-memory SIZE      KV pool size, e.g. 2GiB (default: min(4GiB, half the free memory))\n"
            "      --logits auto|full|selective  head over sampled rows only (auto: when the load-time probe passes)\n");
}

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
    if (c->from_file && pdl_read_file(c->text, PDL_READ_MAX_JSON, &file, &len, &err)) {
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
        if (o->t_first == 0) o->t_first = pdl_now_s();
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
        reasoning_split_feed(o->think[i], ev->text, ev->text_len, on_piece, &x);
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

int cli_run(int argc, char **argv) {
    const char *model_path = NULL, *prompt = NULL, *tokens_arg = NULL, *batch_file = NULL;
    cli_images ci = {0};
    const char *stops[64];
    int n_stops = 0;
    char *draft_path = NULL;
    pdl_engine_options eo = {.log = cli_log_stderr};
    long lv;
    long n_predict = 128, threads = 0, ctx = 0, n_samples = 1, n_logprobs = -1, top_k = 0;
    float temp = 0.8f, top_p = 0, min_p = 0;
    uint64_t seed = 0;
    bool have_seed = false, json = false, ignore_eos = false, verbose = false, hide_think = false;
    const reasoning_format *think = NULL;
    long think_budget = -1;
    pdl_kv_dtype kv_dtype = PDL_KV_F16;
    run_constraint constraint = {0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            run_usage(stdout);
            return CLI_OK;
        } else if (strcmp(a, "--json") == 0) {
            json = true;
        } else if (strcmp(a, "--ignore-eos") == 0) {
            ignore_eos = true;
        } else if (strcmp(a, "--verbose") == 0) {
            verbose = true;
        } else if (strcmp(a, "--hide-reasoning") == 0) {
            hide_think = true;
        } else if (strcmp(a, "--no-enable-prefix-caching") == 0) {
            eo.no_prefix_caching = true;
        } else if (strcmp(a, "--enable-prefix-caching") == 0) {
            eo.no_prefix_caching = false;
        } else if (!(v = cli_value(argc, argv, &i))) {
            return CLI_USAGE;
        } else if (strcmp(a, "-m") == 0 || strcmp(a, "--model") == 0) {
            model_path = v;
        } else if (strcmp(a, "-p") == 0 || strcmp(a, "--prompt") == 0) {
            prompt = v;
        } else if (strcmp(a, "--tokens") == 0) {
            tokens_arg = v;
        } else if (strcmp(a, "--reasoning-parser") == 0) {
            if (!(think = reasoning_format_find(v))) {
                fprintf(stderr, "error: unknown --reasoning-parser '%s' (%s)\n", v, reasoning_format_names());
                return CLI_USAGE;
            }
        } else if (strcmp(a, "--reasoning-budget") == 0) {
            if (cli_int(a, v, -1, 1 << 30, &think_budget)) return CLI_USAGE;
        } else if (strcmp(a, "--image") == 0) {
            if (cli_images_add(&ci, v)) return CLI_USAGE;
        } else if (strcmp(a, "--mmproj") == 0) {
            ci.mmproj = v;
        } else if (strcmp(a, "-n") == 0 || strcmp(a, "--n-predict") == 0) {
            if (cli_int(a, v, 0, 1 << 30, &n_predict)) return CLI_USAGE;
        } else if (strcmp(a, "--temp") == 0) {
            if (cli_float(a, v, &temp)) return CLI_USAGE;
            if (temp < 0) {
                fprintf(stderr, "error: --temp must not be negative\n");
                return CLI_USAGE;
            }
        } else if (strcmp(a, "--seed") == 0) {
            if (cli_u64(a, v, &seed)) return CLI_USAGE;
            have_seed = true;
        } else if (strcmp(a, "--top-k") == 0) {
            if (cli_int(a, v, 0, 1 << 30, &top_k)) return CLI_USAGE;
        } else if (strcmp(a, "--top-p") == 0 || strcmp(a, "--min-p") == 0) {
            float *f = a[2] == 't' ? &top_p : &min_p;
            if (cli_float(a, v, f) || !(*f >= 0 && *f <= 1)) {
                fprintf(stderr, "error: %s must be in [0, 1]\n", a);
                return CLI_USAGE;
            }
        } else if (strcmp(a, "--stop") == 0) {
            if (n_stops == 64 || !v[0]) {
                fprintf(stderr, "error: --stop takes a non-empty string, at most 64 times\n");
                return CLI_USAGE;
            }
            stops[n_stops++] = v;
        } else if (strcmp(a, "--json-schema") == 0 || strcmp(a, "-j") == 0) {
            if (take_constraint(&constraint, a, GRAM_JSON_SCHEMA, v, false)) return CLI_USAGE;
        } else if (strcmp(a, "--json-schema-file") == 0) {
            if (take_constraint(&constraint, a, GRAM_JSON_SCHEMA, v, true)) return CLI_USAGE;
        } else if (strcmp(a, "--grammar") == 0) {
            if (take_constraint(&constraint, a, GRAM_GBNF, v, false)) return CLI_USAGE;
        } else if (strcmp(a, "--grammar-file") == 0) {
            if (take_constraint(&constraint, a, GRAM_GBNF, v, true)) return CLI_USAGE;
        } else if (strcmp(a, "--regex") == 0) {
            if (take_constraint(&constraint, a, GRAM_REGEX, v, false)) return CLI_USAGE;
        } else if (strcmp(a, "--choice") == 0) {
            if (take_constraint(&constraint, a, GRAM_CHOICE, v, false)) return CLI_USAGE;
        } else if (strcmp(a, "--samples") == 0) {
            if (cli_int(a, v, 1, MAX_SAMPLES, &n_samples)) return CLI_USAGE;
        } else if (strcmp(a, "--logprobs") == 0) {
            if (cli_int(a, v, 0, 20, &n_logprobs)) return CLI_USAGE;
        } else if (strcmp(a, "--speculative-config") == 0) {
            free(draft_path);
            if (cli_spec_config(a, v, &eo, &draft_path)) return CLI_USAGE;
        } else if (strcmp(a, "-t") == 0 || strcmp(a, "--threads") == 0) {
            if (cli_int(a, v, 1, 1024, &threads)) return CLI_USAGE;
        } else if (strcmp(a, "-c") == 0 || strcmp(a, "--ctx-size") == 0) {
            if (cli_int(a, v, 1, 1 << 24, &ctx)) return CLI_USAGE;
        } else if (strcmp(a, "--kv-cache-dtype") == 0) {
            if (cli_kv_dtype(a, v, &kv_dtype)) return CLI_USAGE;
        } else if (strcmp(a, "--batch-file") == 0) {
            batch_file = v;
        } else if (strcmp(a, "--max-num-seqs") == 0) {
            if (cli_int(a, v, 1, 1 << 20, &lv)) return CLI_USAGE;
            eo.max_num_seqs = (int)lv;
        } else if (strcmp(a, "--max-num-batched-tokens") == 0) {
            if (cli_int(a, v, 1, 1 << 24, &lv)) return CLI_USAGE;
            eo.max_num_batched_tokens = (int)lv;
        } else if (strcmp(a, "--max-prefill-chunk") == 0) {
            if (cli_int(a, v, 1, 1 << 24, &lv)) return CLI_USAGE;
            eo.max_prefill_chunk = (int)lv;
        } else if (strcmp(a, "--block-size") == 0) {
            if (cli_int(a, v, 1, 1 << 16, &lv)) return CLI_USAGE;
            eo.block_size = (int)lv;
        } else if (strcmp(a, "--kv-cache-memory") == 0) {
            if (cli_size(a, v, &eo.kv_cache_memory)) return CLI_USAGE;
        } else if (strcmp(a, "--logits") == 0) {
            if (cli_logits_mode(a, v, &eo.logits_mode)) return CLI_USAGE;
        } else {
            fprintf(stderr, "error: unknown option '%s' for run\n", a);
            run_usage(stderr);
            return CLI_USAGE;
        }
    }
    if (!model_path || (!!prompt + !!tokens_arg + !!batch_file) != 1) {
        fprintf(stderr, "error: run needs -m MODEL and one of -p PROMPT, --tokens IDS or --batch-file FILE\n");
        run_usage(stderr);
        return CLI_USAGE;
    }
    if (ci.n_paths && !prompt) {
        fprintf(stderr, "error: --image needs -p PROMPT (its place marked with %s)\n", CLI_MEDIA_MARKER);
        return CLI_USAGE;
    }
    if (!have_seed) seed = (uint64_t)time(NULL);

    pdl_error err;
    pdl_model *model = NULL;
    pdl_model_options mo = cli_model_options((int)threads, (int)ctx);
    double t0 = pdl_now_s();
    if (cli_load_model(&model, model_path, &mo, &err)) {
        fprintf(stderr, "error: %s\n", err.message);
        return CLI_FAIL;
    }
    pdl_model *draft = NULL;
    if (draft_path) {
        pdl_model_options dmo = cli_model_options((int)threads, (int)ctx);
        if (cli_load_model(&draft, draft_path, &dmo, &err)) {
            fprintf(stderr, "error: draft model: %s\n", err.message);
            free(draft_path);
            pdl_model_free(model);
            return CLI_FAIL;
        }
        eo.draft_model = draft;
    }
    free(draft_path);
    double t_load = pdl_now_s() - t0;
    pdl_model_info info;
    pdl_model_get_info(model, &info);
    if (verbose && print_probe(model)) {
        pdl_model_free(draft);
        pdl_model_free(model);
        return CLI_FAIL;
    }
    if (batch_file && constraint.text) {
        fprintf(stderr, "error: %s applies to -p / --tokens, not to --batch-file\n", constraint.flag);
        pdl_model_free(draft);
        pdl_model_free(model);
        return CLI_USAGE;
    }
    if (batch_file) {
        eo.kv_dtype = kv_dtype;
        int brc = cli_run_batch(model, batch_file, &eo, (int)n_predict);
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
    if (compile_constraint(&constraint, model, &gvocab, &grammar)) {
        rc = CLI_FAIL;
    } else if (cli_images_open(&ci, model, model_path)) {
        rc = CLI_FAIL;
    } else if (ci.n_images) {
        if (cli_images_prompt(&ci, model, prompt, &mm)) rc = CLI_FAIL;
        else ids = mm.ids, n_ids = mm.n_ids, mm.ids = NULL;
        eo.vision = ci.vision;
    } else if (tokens_arg) {
        if (cli_token_list("--tokens", tokens_arg, &ids, &n_ids)) rc = CLI_USAGE;
    } else if (pdl_tokenize(model, prompt, strlen(prompt), true, &ids, &n_ids, &err)) {
        fprintf(stderr, "error: %s\n", err.message);
        rc = CLI_FAIL;
    }
    if (rc == CLI_OK && n_ids == 0) {
        fprintf(stderr, "error: the prompt encodes to no tokens and the model adds no BOS\n");
        rc = CLI_FAIL;
    }
    fprintf(stderr, "pagedlm: %s (%s, %s) %d layers, hidden %d, vocab %d, ctx %d; loaded in %.1f ms; seed %llu\n",
            model_path, info.arch, info.weight_types, info.n_layers, info.hidden, info.vocab, info.ctx_len,
            t_load * 1e3, (unsigned long long)seed);

    run_output out = {.json = json, .stream = !json, .ids_only = !pdl_model_has_tokenizer(model), .n = (int)n_samples,
                      .hide_think = hide_think};
    if (out.ids_only && rc == CLI_OK) fprintf(stderr, "pagedlm: no tokenizer for this model: printing token ids\n");
    pdl_reasoning think_params = {0};
    bool opens = think && prompt && reasoning_prompt_opens(think, prompt, strlen(prompt));
    if (rc == CLI_OK && think) {
        reasoning_params(think, model, opens, (int)think_budget, &think_params);
        if (think_budget >= 0 && !think_params.enabled) {
            fprintf(stderr, "error: --reasoning-budget needs '%s' to be one token of the model\n", think->end);
            rc = CLI_USAGE;
        }
    }
    for (int i = 0; i < out.n; i++) {
        out.tokens[i] = json_array();
        if (n_logprobs >= 0) out.logprobs[i] = json_array();
        if (think) out.think[i] = reasoning_split_new(think, opens);
    }
    /* one request through the engine, its KV sized for this request alone */
    pdl_engine *engine = NULL;
    if (rc == CLI_OK && n_predict > 0) {
        long need = (long)n_ids + n_predict;
        eo.kv_dtype = kv_dtype;
        eo.max_num_seqs = (int)n_samples;
        eo.max_model_len = need < info.ctx_len ? (int)need : info.ctx_len;
        if (pdl_engine_create(&engine, model, &eo, &err)) {
            fprintf(stderr, "error: %s\n", err.message);
            rc = CLI_FAIL;
        }
    }
    if (rc == CLI_OK && engine) {
        pdl_request_params rp = {.sampling = {.temperature = temp, .top_k = (int)top_k, .top_p = top_p,
                                              .min_p = min_p, .seed = seed},
                                 .max_tokens = (int)n_predict, .ignore_eos = ignore_eos, .stop = stops,
                                 .n_stop = n_stops, .logprobs = (int)n_logprobs, .prompt_logprobs = -1,
                                 .n = (int)n_samples, .grammar = grammar, .images = mm.images,
                                 .n_images = mm.n_images, .reasoning = think_params};
        double t1 = pdl_now_s();
        int arc = pdl_engine_add_request(engine, ids, n_ids, &rp, on_event, &out, NULL, &err);
        double t_added = pdl_now_s();
        if (arc == 0 && mm.n_images) /* the engine encodes a request's images when it takes it */
            fprintf(stderr, "pagedlm: %d image%s encoded in %.1f ms\n", mm.n_images, mm.n_images == 1 ? "" : "s",
                    (t_added - t1) * 1e3);
        if (arc || pdl_engine_run_until_idle(engine, &err)) {
            if (!json) fputc('\n', stdout);
            fprintf(stderr, "error: %s\n", err.message);
            rc = CLI_FAIL;
        } else {
            double dt = pdl_now_s() - t1;
            if (!json) {
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
            if (eo.spec_method != PDL_SPEC_NONE)
                fprintf(stderr, "pagedlm: speculative decoding: %llu drafts, %llu of %llu draft tokens accepted\n",
                        (unsigned long long)st.spec_drafts, (unsigned long long)st.spec_accepted_tokens,
                        (unsigned long long)st.spec_draft_tokens);
        }
    } else if (rc == CLI_OK && !json) {
        fputc('\n', stdout); /* -n 0: nothing to generate */
    }
    if (rc == CLI_OK && json) {
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
    if (grammar) gram_grammar_free(grammar);
    gram_vocab_free(gvocab);
    free(ids);
    pdl_mm_prompt_free(&mm);
    cli_images_close(&ci);
    pdl_model_free(draft);
    pdl_model_free(model);
    return rc;
}
