/*
 * cli_logits.c - `pagedlm logits` and `pagedlm info`: a model's raw outputs
 * and hyperparameters as JSON, for tests and debugging.
 */
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli_args.h"
#include "cli/cli_vision.h"

/* What the command line asks for. */
typedef struct logits_args {
    const char *model_path, *tokens_arg, *prompt;
    const char *lora_path;       /* --lora */
    float lora_scale;            /* --lora-scale */
    cli_images ci;               /* --image paths and --mmproj */
    bool all_rows;
    int threads, ctx;
    pdl_kv_dtype kv_dtype;
} logits_args;

static int parse_image(void *args, const cli_option *o, const char *opt, const char *v) {
    (void)o, (void)opt;
    return cli_images_add(&((logits_args *)args)->ci, v);
}

#define A(f) offsetof(logits_args, f)
static const cli_option LOGITS_OPTIONS[] = {
    {"--model", "-m", CLI_OPT_STRING, A(model_path), .value = "PATH", .help = ".gguf file or Hugging Face folder"},
    {"--tokens", NULL, CLI_OPT_STRING, A(tokens_arg), .value = "IDS",
     .help = "the prompt as comma-separated token ids"},
    {"--prompt", "-p", CLI_OPT_STRING, A(prompt), .value = "TEXT",
     .help = "the prompt as text (BOS as the tokenizer says; special-token text parsed)"},
    {"--image", NULL, CLI_OPT_CUSTOM, 0, .value = "FILE", .parse = parse_image,
     .help = "an image (PNG, JPEG, WebP; repeatable): its rows go where -p has <__media__>\n"
             "(llama.cpp's marker), or first; \"images\": [{\"position\", \"rows\"}] is added"},
    {"--mmproj", NULL, CLI_OPT_STRING, A(ci.mmproj), .value = "FILE",
     .help = "the vision model of a GGUF text model (llama.cpp's mmproj GGUF); a Hugging Face\n"
             "LLaVA folder brings its own"},
    {"--all-rows", NULL, CLI_OPT_FLAG, A(all_rows), .help = "every row's logits, not only the last"},
    {"--lora", NULL, CLI_OPT_STRING, A(lora_path), .value = "PATH",
     .help = "a LoRA adapter: a PEFT folder or a llama.cpp LoRA GGUF"},
    {"--lora-scale", NULL, CLI_OPT_FLOAT, A(lora_scale), .min = -1e6, .max = 1e6, .value = "S",
     .help = "the adapter's multiplier (default 1)"},
    {"--kv-cache-dtype", NULL, CLI_OPT_KV_DTYPE, A(kv_dtype), .value = "f16|f32|q8_0|q4_0", .help = "default f16"},
    {"--threads", "-t", CLI_OPT_INT, A(threads), .min = 1, .max = 1024, .value = "N",
     .help = "worker threads (default: all cores)"},
    {"--ctx-size", "-c", CLI_OPT_INT, A(ctx), .min = 1, .max = 1 << 24, .value = "N",
     .help = "context length (default and most: the model's own; more only with\n"
             "PAGEDLM_ALLOW_LONG_MAX_MODEL_LEN=1, untrained positions)"},
};
#undef A

static const cli_command LOGITS_COMMAND = {
    .name = "logits",
    .usage = "usage: pagedlm logits -m MODEL (--tokens 1,403,407 | -p TEXT) [--all-rows] [--kv-cache-dtype f32|f16|q8_0|q4_0]\n"
             "       [--image FILE]... [--mmproj FILE] [--lora PATH [--lora-scale S]] [--threads N] [--ctx-size N]\n"
             "prints {\"tokens\": [...], \"logits\": [[...], ...]}: the last row, or every row with --all-rows\n",
    .options = LOGITS_OPTIONS,
    .n_options = sizeof LOGITS_OPTIONS / sizeof LOGITS_OPTIONS[0],
};

int cli_logits(int argc, char **argv) {
    logits_args a = {.kv_dtype = PDL_KV_F16, .lora_scale = 1.0f};
    int prc = cli_parse(&LOGITS_COMMAND, argc, argv, &a);
    if (prc) return prc > 0 ? CLI_OK : CLI_USAGE;
    if (!a.model_path || !!a.tokens_arg + !!a.prompt != 1) {
        fprintf(stderr, "error: logits needs -m MODEL and one of --tokens IDS or -p TEXT\n");
        cli_print_help(&LOGITS_COMMAND, stderr);
        return CLI_USAGE;
    }
    if (a.ci.n_paths && !a.prompt) {
        fprintf(stderr, "error: --image needs -p TEXT (its place marked with %s)\n", CLI_MEDIA_MARKER);
        return CLI_USAGE;
    }
    int32_t *ids = NULL;
    size_t n = 0;
    if (a.tokens_arg && cli_token_list("--tokens", a.tokens_arg, &ids, &n)) return CLI_USAGE;

    pdl_error err;
    pdl_model *model = NULL;
    pdl_model_options mo = cli_model_options((int)a.threads, (int)a.ctx);
    if (pdl_model_load(&model, a.model_path, &mo, &err)) {
        fprintf(stderr, "error: %s\n", err.message);
        free(ids);
        return CLI_FAIL;
    }
    pdl_lora *lora = NULL;
    if (a.lora_path && pdl_lora_load(&lora, model, a.lora_path, &err)) {
        fprintf(stderr, "error: %s\n", err.message);
        pdl_model_free(model);
        free(ids);
        return CLI_FAIL;
    }
    pdl_model_info info;
    pdl_model_get_info(model, &info);
    /* -p: the text's ids, with each image's rows (their vectors in embd) */
    pdl_mm_prompt mm = {0};
    float **image_rows = NULL;
    const float **embd = NULL;
    if (a.prompt) {
        if (cli_images_open(&a.ci, model, a.model_path)) {
            cli_images_close(&a.ci);
            pdl_lora_free(lora);
            pdl_model_free(model);
            return CLI_FAIL;
        }
        int prc = 0;
        if (a.ci.n_images) {
            prc = cli_images_prompt(&a.ci, model, a.prompt, &mm);
            if (prc == 0) ids = mm.ids, n = mm.n_ids, mm.ids = NULL;
        } else if (pdl_tokenize_ex(model, a.prompt, strlen(a.prompt), PDL_TOK_ADD_SPECIAL | PDL_TOK_PARSE_SPECIAL, &ids,
                                   &n, &err)) {
            fprintf(stderr, "error: %s\n", err.message);
            prc = -1;
        }
        if (prc == 0 && n == 0) {
            fprintf(stderr, "error: the prompt encodes to no tokens\n");
            prc = -1;
        }
        image_rows = calloc((size_t)(a.ci.n_images ? a.ci.n_images : 1), sizeof *image_rows);
        embd = calloc(n ? n : 1, sizeof *embd);
        if (prc == 0 && (!image_rows || !embd)) {
            fprintf(stderr, "error: out of memory\n");
            prc = -1;
        }
        for (int i = 0; prc == 0 && i < mm.n_images; i++) {
            int rows = 0;
            if (pdl_vision_encode(a.ci.vision, mm.images[i].image, &image_rows[i], &rows, &err)) {
                fprintf(stderr, "error: image %d (%s): %s\n", i, a.ci.paths[i], err.message);
                prc = -1;
                break;
            }
            for (int k = 0; k < rows; k++) embd[mm.images[i].position + k] = image_rows[i] + (size_t)k * info.hidden;
        }
        if (prc) {
            for (int i = 0; image_rows && i < a.ci.n_images; i++) free(image_rows[i]);
            free(image_rows), free(embd), free(ids);
            pdl_mm_prompt_free(&mm);
            cli_images_close(&a.ci);
            pdl_lora_free(lora);
            pdl_model_free(model);
            return CLI_FAIL;
        }
    }
    int rc = CLI_OK;
    pdl_kv_cache *kv = NULL;
    pdl_context *run = NULL;
    size_t rows = a.all_rows ? n : 1;
    float *logits = malloc(rows * (size_t)info.vocab * sizeof *logits);
    /* scale 0 is the adapter off, as llama.cpp's; pdl_seq's 0 means 1 */
    pdl_seq seq = {.lora = a.lora_scale != 0.0f ? lora : NULL, .lora_scale = a.lora_scale};
    int bs = 16;
    if (!logits) {
        fprintf(stderr, "error: out of memory\n");
        rc = CLI_FAIL;
    }
    /* Gemma 3: each image's rows attend to each other both ways */
    /* Qwen2.5-VL: M-RoPE positions */
    int32_t *span_first = NULL, *span_last = NULL, *pos3 = NULL, delta = 0;
    bool spans = false, mrope = false;
    if (rc == CLI_OK && mm.n_images) {
        span_first = malloc(n * sizeof *span_first), span_last = malloc(n * sizeof *span_last);
        pos3 = malloc(n * 3 * sizeof *pos3);
        if (!span_first || !span_last || !pos3) {
            fprintf(stderr, "error: out of memory\n");
            rc = CLI_FAIL;
        } else {
            spans = pdl_mm_spans(a.ci.vision, mm.images, mm.n_images, (int)n, span_first, span_last);
            mrope = pdl_mm_rope_positions(a.ci.vision, mm.images, mm.n_images, (int)n, pos3, &delta);
        }
    }
    pdl_row_inputs in = {.embd = mm.n_images ? (const float *const *)embd : NULL,
                         .span_first = spans ? span_first : NULL, .span_last = spans ? span_last : NULL,
                         .rope_pos3 = mrope ? pos3 : NULL};
    if (rc != CLI_OK) {
    } else if (pdl_kv_cache_create(&kv, model, a.kv_dtype, bs, (int)((n + bs - 1) / bs), &err) ||
               pdl_context_create(&run, model, NULL, &err) ||
               pdl_seq_forward(run, kv, &seq, ids, &in, (int)n, a.all_rows ? PDL_LOGITS_ALL : PDL_LOGITS_LAST,
                               logits, &err)) {
        fprintf(stderr, "error: %s\n", err.message);
        rc = CLI_FAIL;
    }
    if (rc == CLI_OK) {
        /* %.9g round-trips every float exactly */
        printf("{\"tokens\": [");
        for (size_t i = 0; i < n; i++) printf("%s%d", i ? ", " : "", ids[i]);
        printf("]");
        if (mm.n_images) {
            printf(", \"images\": [");
            for (int i = 0; i < mm.n_images; i++)
                printf("%s{\"position\": %d, \"rows\": %d}", i ? ", " : "", mm.images[i].position,
                       pdl_vision_image_rows(a.ci.vision, mm.images[i].image));
            printf("]");
        }
        printf(", \"logits\": [");
        for (size_t r = 0; r < rows; r++) {
            printf("%s[", r ? ", " : "");
            for (int j = 0; j < info.vocab; j++) printf("%s%.9g", j ? ", " : "", logits[r * info.vocab + j]);
            printf("]");
        }
        printf("]}\n");
    }
    if (kv) pdl_seq_release(kv, &seq);
    pdl_kv_cache_free(kv);
    pdl_context_free(run);
    free(logits);
    free(span_first), free(span_last), free(pos3);
    free(ids);
    for (int i = 0; image_rows && i < a.ci.n_images; i++) free(image_rows[i]);
    free(image_rows), free(embd);
    pdl_mm_prompt_free(&mm);
    cli_images_close(&a.ci);
    pdl_lora_free(lora);
    pdl_model_free(model);
    return rc;
}

/* The families the loaders know, from the architecture table: one JSON
 * object per family (name, Hugging Face model_type values, GGUF name, what
 * sets it apart, whether it has experts). */
static int print_architectures(void) {
    json_t *list = json_array();
    pdl_arch_info a;
    for (size_t i = 0; list && pdl_architecture(i, &a); i++)
        json_array_append_new(list, json_pack("{s:s, s:s?, s:s?, s:s, s:b}", "name", a.name, "hf_model_types",
                                              a.hf_model_types, "gguf", a.gguf_arch, "about", a.about, "experts",
                                              a.experts));
    char *s = list ? json_dumps(list, JSON_INDENT(1)) : NULL;
    if (s) printf("%s\n", s);
    free(s);
    json_decref(list);
    return s ? CLI_OK : CLI_FAIL;
}

int cli_info(int argc, char **argv) {
    const char *model_path = NULL;
    for (int i = 1; i < argc; i++) {
        const char *v;
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            printf("usage: pagedlm info -m MODEL\n"
                   "       pagedlm info --architectures   (the model families this build loads)\n");
            return CLI_OK;
        }
        if (strcmp(argv[i], "--architectures") == 0) return print_architectures();
        if (strcmp(argv[i], "-m") != 0 && strcmp(argv[i], "--model") != 0) {
            fprintf(stderr, "error: unknown option '%s' for info\n", argv[i]);
            return CLI_USAGE;
        }
        if (!(v = cli_value(argc, argv, &i))) return CLI_USAGE;
        model_path = v;
    }
    if (!model_path) {
        fprintf(stderr, "error: info needs -m MODEL\n");
        return CLI_USAGE;
    }
    pdl_error err;
    pdl_model *model = NULL;
    pdl_model_options mo = cli_model_options(1, 0);
    if (pdl_model_load(&model, model_path, &mo, &err)) {
        fprintf(stderr, "error: %s\n", err.message);
        return CLI_FAIL;
    }
    pdl_model_info in;
    pdl_model_get_info(model, &in);
    json_t *o = json_pack("{s:s, s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:b, s:s}", "arch",
                          in.arch, "source", in.source, "n_layers", in.n_layers, "hidden", in.hidden, "n_heads",
                          in.n_heads, "n_kv_heads", in.n_kv_heads, "head_dim", in.head_dim, "ffn", in.ffn,
                          "n_experts", in.n_experts, "n_experts_used", in.n_experts_used, "vocab", in.vocab,
                          "ctx_len", in.ctx_len, "bos_id", in.bos_id, "eos_id", in.eos_id, "add_bos", in.add_bos,
                          "weight_types", in.weight_types);
    /* the fill-in-the-middle tokens (null: the vocabulary has none) */
    json_t *fim = json_object();
    const char *names[] = {"pre", "suf", "mid", "pad", "rep", "sep"};
    const int32_t ids[] = {in.fim.pre, in.fim.suf, in.fim.mid, in.fim.pad, in.fim.rep, in.fim.sep};
    for (int k = 0; fim && k < 6; k++)
        json_object_set_new(fim, names[k], ids[k] >= 0 ? json_integer(ids[k]) : json_null());
    if (o) json_object_set_new(o, "fim", fim ? fim : json_null());
    else json_decref(fim);
    if (o && in.n_recurrent_layers > 0) { /* hybrid models: the state a sequence holds beside its K/V */
        json_object_set_new(o, "recurrent_layers", json_integer(in.n_recurrent_layers));
        json_object_set_new(o, "state_bytes_per_sequence", json_integer((json_int_t)in.state_bytes));
        json_object_set_new(o, "kv_bytes_per_token",
                            json_integer((json_int_t)pdl_kv_cache_block_bytes(model, PDL_KV_F16, 1)));
    }
    if (o && in.n_mtp_layers > 0) /* its own drafter: --speculative-config '{"method": "mtp"}' */
        json_object_set_new(o, "mtp_layers", json_integer(in.n_mtp_layers));
    /* the file's type mix, as gguf-dump sums it up, and what runs on the slow path */
    pdl_tensor_type_stats types[64];
    int n_types = pdl_model_tensor_types(model, types, 64);
    json_t *mix = json_array();
    for (int i = 0; mix && i < n_types && i < 64; i++) {
        json_t *t = json_pack("{s:s, s:i, s:I, s:i, s:s}", "type", types[i].type, "tensors", types[i].n_tensors, "bytes",
                              (json_int_t)types[i].bytes, "expanded_to_f32", types[i].n_expanded, "example",
                              types[i].example ? types[i].example : "");
        if (t) json_array_append_new(mix, t);
    }
    if (o && mix) json_object_set_new(o, "tensor_types", mix);
    else json_decref(mix);
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    if (s) printf("%s\n", s);
    free(s);
    json_decref(o);
    pdl_model_free(model);
    return s ? CLI_OK : CLI_FAIL;
}
