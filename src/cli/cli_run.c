/*
 * cli_run.c - `pagedlm run`: generate a continuation of one prompt.
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
#include "cli/cli_batch.h"

static void run_usage(FILE *f) {
    fprintf(f,
            "usage: pagedlm run -m MODEL (-p PROMPT | --tokens IDS) [options]\n"
            "  -m, --model PATH        .gguf file or Hugging Face folder\n"
            "  -p, --prompt TEXT       prompt text (BOS added as the model's tokenizer says)\n"
            "      --tokens IDS        prompt as comma-separated token ids instead of text\n"
            "  -n, --n-predict N       tokens to generate (default 128)\n"
            "      --temp T            temperature; 0 = greedy (default 0.8)\n"
            "      --seed S            random seed (default: from the clock, printed on stderr)\n"
            "  -t, --threads N         worker threads (default: all cores)\n"
            "  -c, --ctx-size N        context length (default: the model's)\n"
            "      --kv-cache-dtype T  f16 (default) or f32\n"
            "      --ignore-eos        keep generating after the end-of-sequence token\n"
            "      --json              print {prompt_tokens, tokens, text} as one JSON object\n"
            "      --verbose           also print on stderr the selective-logits probe's decision (accepted or\n"
            "                          rejected, and why)\n"
            "\n"
            "  --batch-file FILE.jsonl serve every line as a request, all at once (continuous batching); one\n"
            "                          line per request: {\"id\", \"prompt\": text or ids, \"max_tokens\", \"temperature\",\n"
            "                          \"top_k\", \"top_p\", \"min_p\", \"seed\", \"repetition_penalty\", \"presence_penalty\",\n"
            "                          \"frequency_penalty\", \"stop\", \"stop_token_ids\", \"ignore_eos\", \"logprobs\",\n"
            "                          \"prompt_logprobs\", \"n\"}; prints one JSON line per request in input order\n"
            "  engine options (with --batch-file):\n"
            "      --max-num-seqs N            running sequences at most (default 256)\n"
            "      --max-num-batched-tokens N  rows per step at most (default 2048)\n"
            "      --max-prefill-chunk N       prompt rows per request per step (default: no limit)\n"
            "      --block-size N              tokens per KV block (default 16)\n"
            "      --kv-cache-memory SIZE      KV pool size, e.g. 2GiB (default: min(4GiB, half the free memory))\n"
            "      --logits auto|full|selective  head over sampled rows only (auto: when the load-time probe passes)\n");
}

typedef struct run_output {
    bool json;
    bool ids_only;  /* no tokenizer: print token ids instead of text */
    char *text;     /* accumulated text for --json */
    size_t len, cap;
} run_output;

static bool on_token(int32_t token, const char *text, void *user) {
    run_output *o = user;
    size_t n = strlen(text);
    if (o->ids_only) {
        if (!o->json && token >= 0) printf("%d ", token);
        fflush(stdout);
        return true;
    }
    if (!o->json) {
        fwrite(text, 1, n, stdout);
        fflush(stdout);
        return true;
    }
    if (o->len + n + 1 > o->cap) {
        size_t cap = (o->len + n + 1) * 2;
        char *p = realloc(o->text, cap);
        if (!p) return false;
        o->text = p;
        o->cap = cap;
    }
    memcpy(o->text + o->len, text, n);
    o->len += n;
    o->text[o->len] = '\0';
    return true;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
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
    pdl_engine_options eo = {0};
    long lv;
    long n_predict = 128, threads = 0, ctx = 0;
    float temp = 0.8f;
    uint64_t seed = 0;
    bool have_seed = false, json = false, ignore_eos = false, verbose = false;
    pdl_kv_dtype kv_dtype = PDL_KV_F16;
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
        } else if (!(v = cli_value(argc, argv, &i))) {
            return CLI_USAGE;
        } else if (strcmp(a, "-m") == 0 || strcmp(a, "--model") == 0) {
            model_path = v;
        } else if (strcmp(a, "-p") == 0 || strcmp(a, "--prompt") == 0) {
            prompt = v;
        } else if (strcmp(a, "--tokens") == 0) {
            tokens_arg = v;
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
    if (!have_seed) seed = (uint64_t)time(NULL);

    pdl_error err;
    pdl_model *model = NULL;
    pdl_model_options mo = {.n_threads = (int)threads, .ctx_size = (int)ctx};
    double t0 = now_s();
    if (cli_load_model(&model, model_path, &mo, &err)) {
        fprintf(stderr, "error: %s\n", err.message);
        return CLI_FAIL;
    }
    double t_load = now_s() - t0;
    pdl_model_info info;
    pdl_model_get_info(model, &info);
    if (verbose && print_probe(model)) {
        pdl_model_free(model);
        return CLI_FAIL;
    }
    if (batch_file) {
        eo.kv_dtype = kv_dtype;
        int brc = cli_run_batch(model, batch_file, &eo, (int)n_predict);
        pdl_model_free(model);
        return brc;
    }

    int32_t *ids = NULL;
    size_t n_ids = 0;
    int rc = CLI_OK;
    if (tokens_arg) {
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

    run_output out = {.json = json, .ids_only = !pdl_model_has_tokenizer(model)};
    if (out.ids_only && rc == CLI_OK) fprintf(stderr, "pagedlm: no tokenizer for this model: printing token ids\n");
    int32_t *gen = NULL;
    size_t n_gen = 0;
    if (rc == CLI_OK) {
        pdl_generate_params gp = {
            .max_tokens = (int)n_predict,
            .sampling = {.temperature = temp, .seed = seed},
            .kv_dtype = kv_dtype,
            .stop_at_eos = !ignore_eos,
        };
        double t1 = now_s();
        if (pdl_generate(model, ids, n_ids, &gp, on_token, &out, &gen, &n_gen, &err)) {
            if (!json) fputc('\n', stdout);
            fprintf(stderr, "error: %s\n", err.message);
            rc = CLI_FAIL;
        } else {
            double dt = now_s() - t1;
            if (!json) fputc('\n', stdout);
            fflush(stdout);
            fprintf(stderr, "pagedlm: %zu prompt tokens, %zu generated in %.3f s (%.1f tokens/s)\n", n_ids, n_gen, dt,
                    dt > 0 ? n_gen / dt : 0.0);
        }
    }
    if (rc == CLI_OK && json) {
        json_t *o = json_object(), *pt = json_array(), *tk = json_array();
        for (size_t i = 0; i < n_ids; i++) json_array_append_new(pt, json_integer(ids[i]));
        for (size_t i = 0; i < n_gen; i++) json_array_append_new(tk, json_integer(gen[i]));
        json_object_set_new(o, "prompt_tokens", pt);
        json_object_set_new(o, "tokens", tk);
        json_object_set_new(o, "text", json_stringn(out.text ? out.text : "", out.len));
        char *s = json_dumps(o, JSON_COMPACT);
        if (s) printf("%s\n", s);
        free(s);
        json_decref(o);
    }
    free(out.text);
    free(gen);
    free(ids);
    pdl_model_free(model);
    return rc;
}
