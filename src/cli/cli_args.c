/*
 * cli_args.c - parsing numbers, token lists and enums from the command line,
 * and the model load with a progress line that the commands share.
 */
#define _POSIX_C_SOURCE 200809L
#include "cli/cli_args.h"

#include <jansson.h>

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "kernels/attention.h"

/* ---- option tables ------------------------------------------------------------ */

enum { HELP_COLUMN = 26 }; /* where an option's help starts in --help */

void cli_print_help(const cli_command *cmd, FILE *f) {
    fputs(cmd->usage, f);
    for (size_t i = 0; i < cmd->n_options; i++) {
        const cli_option *o = &cmd->options[i];
        if (o->kind == CLI_OPT_SECTION) {
            fprintf(f, "  %s\n", o->help);
            continue;
        }
        /* "  -n, --n-predict N", "  -p LIST" (a short name alone), "      --input-len, --random-input-len N" */
        char left[128];
        bool short_alias = o->alias && o->alias[1] != '-', short_name = o->name[1] != '-';
        snprintf(left, sizeof left, "  %s%s%s%s%s%s", short_alias ? o->alias : "", short_alias ? ", " : "",
                 short_alias || short_name ? "" : "    ", o->name, o->alias && !short_alias ? ", " : "",
                 o->alias && !short_alias ? o->alias : "");
        if (o->value) snprintf(left + strlen(left), sizeof left - strlen(left), " %s", o->value);
        int width = (int)strlen(left);
        fprintf(f, "%s%*s", left, width < HELP_COLUMN - 1 ? HELP_COLUMN - width : 2, "");
        /* continuation lines of the help under its first */
        for (const char *p = o->help; *p;) {
            size_t n = strcspn(p, "\n");
            fprintf(f, "%.*s\n", (int)n, p);
            p += n;
            if (*p == '\n' && *++p) fprintf(f, "%*s", HELP_COLUMN, "");
        }
    }
    fputs("  -h, --help              this help\n", f);
    if (cmd->epilogue) fputs(cmd->epilogue, f);
}

static const cli_option *find_option(const cli_command *cmd, const char *a) {
    for (size_t i = 0; i < cmd->n_options; i++) {
        const cli_option *o = &cmd->options[i];
        if (o->kind == CLI_OPT_SECTION) continue;
        if (strcmp(a, o->name) == 0 || (o->alias && strcmp(a, o->alias) == 0)) return o;
    }
    return NULL;
}

/* One option's value into its field. */
static int take_value(const cli_option *o, const char *opt, const char *v, void *args) {
    void *field = (char *)args + o->offset;
    switch (o->kind) {
    case CLI_OPT_INT: {
        long x;
        if (cli_int(opt, v, (long)o->min, (long)o->max, &x)) return -1;
        *(int *)field = (int)x;
        return 0;
    }
    case CLI_OPT_FLOAT: {
        float x;
        if (cli_float(opt, v, &x)) return -1;
        if (o->min < o->max && !(x >= o->min && x <= o->max)) {
            if (o->max == INFINITY && o->min == 0) fprintf(stderr, "error: %s must not be negative\n", opt);
            else if (o->max == INFINITY) fprintf(stderr, "error: %s must not be below %g\n", opt, o->min);
            else fprintf(stderr, "error: %s must be in [%g, %g]\n", opt, o->min, o->max);
            return -1;
        }
        *(float *)field = x;
        return 0;
    }
    case CLI_OPT_U64: return cli_u64(opt, v, (uint64_t *)field);
    case CLI_OPT_STRING: *(const char **)field = v; return 0;
    case CLI_OPT_SIZE: return cli_size(opt, v, (size_t *)field);
    case CLI_OPT_KV_DTYPE: return cli_kv_dtype(opt, v, (pdl_kv_dtype *)field);
    case CLI_OPT_LOGITS: return cli_logits_mode(opt, v, (pdl_logits_mode *)field);
    case CLI_OPT_CUSTOM: return o->parse(args, o, opt, v);
    case CLI_OPT_FLAG:
    case CLI_OPT_FLAG_OFF:
    case CLI_OPT_SECTION: break;
    }
    return -1;
}

int cli_parse(const cli_command *cmd, int argc, char **argv, void *args) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            cli_print_help(cmd, stdout);
            return 1;
        }
        const cli_option *o = find_option(cmd, a);
        if (!o) {
            fprintf(stderr, "error: unknown option '%s' for %s\n", a, cmd->name);
            cli_print_help(cmd, stderr);
            return -1;
        }
        if (o->kind == CLI_OPT_FLAG || o->kind == CLI_OPT_FLAG_OFF) {
            *(bool *)((char *)args + o->offset) = o->kind == CLI_OPT_FLAG;
            continue;
        }
        const char *v = cli_value(argc, argv, &i);
        if (!v || take_value(o, a, v, args)) return -1;
    }
    return 0;
}

const char *cli_value(int argc, char **argv, int *i) {
    if (*i + 1 >= argc) {
        fprintf(stderr, "error: option %s needs a value\n", argv[*i]);
        return NULL;
    }
    return argv[++*i];
}

int cli_int(const char *opt, const char *s, long min, long max, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < min || v > max) {
        fprintf(stderr, "error: %s expects an integer in [%ld, %ld], got '%s'\n", opt, min, max, s);
        return -1;
    }
    *out = v;
    return 0;
}

int cli_float(const char *opt, const char *s, float *out) {
    char *end;
    errno = 0;
    float v = strtof(s, &end);
    if (errno || end == s || *end || v != v) {
        fprintf(stderr, "error: %s expects a number, got '%s'\n", opt, s);
        return -1;
    }
    *out = v;
    return 0;
}

int cli_u64(const char *opt, const char *s, uint64_t *out) {
    char *end;
    errno = 0;
    if (*s == '-') {
        fprintf(stderr, "error: %s expects a non-negative integer, got '%s'\n", opt, s);
        return -1;
    }
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end) {
        fprintf(stderr, "error: %s expects a non-negative integer, got '%s'\n", opt, s);
        return -1;
    }
    *out = v;
    return 0;
}

int cli_token_list(const char *opt, const char *s, int32_t **ids, size_t *n) {
    size_t cap = 16, count = 0;
    int32_t *v = malloc(cap * sizeof *v);
    if (!v) return -1;
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        long x = strtol(p, &end, 10);
        if (errno || end == p || x < 0 || x > INT32_MAX || (*end && *end != ',')) {
            fprintf(stderr, "error: %s expects comma-separated token ids, bad item at '%s'\n", opt, p);
            free(v);
            return -1;
        }
        if (count == cap) {
            int32_t *nv = realloc(v, cap * 2 * sizeof *v);
            if (!nv) {
                free(v);
                return -1;
            }
            v = nv;
            cap *= 2;
        }
        v[count++] = (int32_t)x;
        p = *end ? end + 1 : end;
    }
    if (count == 0) {
        fprintf(stderr, "error: %s expects at least one token id\n", opt);
        free(v);
        return -1;
    }
    *ids = v;
    *n = count;
    return 0;
}

int cli_kv_dtype(const char *opt, const char *s, pdl_kv_dtype *out) {
    if (strcmp(s, "f16") == 0 || strcmp(s, "F16") == 0) *out = PDL_KV_F16;
    else if (strcmp(s, "f32") == 0 || strcmp(s, "F32") == 0) *out = PDL_KV_F32;
    else if (strcmp(s, "q8_0") == 0 || strcmp(s, "Q8_0") == 0) *out = PDL_KV_Q8_0;
    else if (strcmp(s, "q4_0") == 0 || strcmp(s, "Q4_0") == 0) *out = PDL_KV_Q4_0;
    else if (strncasecmp(s, "fp8", 3) == 0) {
        fprintf(stderr,
                "error: %s %s is not supported: a CPU has no FP8 arithmetic, and q8_0 takes the same memory "
                "(1.06 bytes an element) with more precision; use q8_0\n",
                opt, s);
        return -1;
    } else {
        fprintf(stderr, "error: %s expects f16, f32, q8_0 or q4_0, got '%s'\n", opt, s);
        return -1;
    }
    return 0;
}

int cli_size(const char *opt, const char *s, size_t *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    double mult = 1;
    if (end != s && *end) {
        static const struct {
            const char *suffix;
            double mult;
        } units[] = {{"B", 1}, {"K", 1e3}, {"KB", 1e3}, {"KiB", 1024.0}, {"M", 1e6}, {"MB", 1e6},
                     {"MiB", 1048576.0}, {"G", 1e9}, {"GB", 1e9}, {"GiB", 1073741824.0}, {"T", 1e12},
                     {"TB", 1e12}, {"TiB", 1099511627776.0}};
        mult = 0;
        for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
            if (strcmp(end, units[i].suffix) == 0) mult = units[i].mult;
    }
    if (errno || end == s || mult == 0 || !(v > 0) || v * mult > 1e18) {
        fprintf(stderr, "error: %s expects a size such as 2GiB, 512MiB or 1000000, got '%s'\n", opt, s);
        return -1;
    }
    *out = (size_t)(v * mult);
    return 0;
}

int cli_logits_mode(const char *opt, const char *s, pdl_logits_mode *out) {
    if (strcmp(s, "auto") == 0) *out = PDL_LOGITS_AUTO;
    else if (strcmp(s, "full") == 0) *out = PDL_LOGITS_FULL;
    else if (strcmp(s, "selective") == 0) *out = PDL_LOGITS_SELECTIVE;
    else {
        fprintf(stderr, "error: %s expects auto, full or selective, got '%s'\n", opt, s);
        return -1;
    }
    return 0;
}

char *cli_read_stdin(size_t *len, size_t max) {
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        if (n > max) {
            free(buf);
            return NULL;
        }
        size_t got = fread(buf + n, 1, cap - n - 1, stdin);
        n += got;
        if (got == 0) break;
        if (n + 1 == cap) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                return NULL;
            }
            buf = nb;
            cap *= 2;
        }
    }
    if (buf) buf[n] = '\0';
    if (len) *len = n;
    return buf;
}

/* ---- model loading with progress ---------------------------------------------- */

typedef struct load_progress {
    const char *path;
    double t0;
    int shown;      /* percent last printed + 1; 0 = nothing printed yet */
} load_progress;

static load_progress g_progress;

static double mono_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void on_load_progress(double done, void *user) {
    load_progress *p = user;
    double t = mono_s() - p->t0;
    if (!p->shown && t < 1.0) return; /* quick loads stay quiet */
    int pct = (int)(done * 100.0);
    if (done >= 1.0) {
        fprintf(stderr, "\rloading %s: done in %.1f s\n", p->path, t);
        p->shown = 0;
        p->t0 = mono_s(); /* nothing more for this load */
        return;
    }
    if (pct + 1 == p->shown) return;
    p->shown = pct + 1;
    fprintf(stderr, "\rloading %s: %3d%% (%.1f s)", p->path, pct, t);
    fflush(stderr);
}

void cli_show_load_progress(pdl_model_options *mo, const char *path) {
    if (!isatty(STDERR_FILENO)) return;
    g_progress = (load_progress){.path = path, .t0 = mono_s()};
    mo->progress = on_load_progress;
    mo->progress_user = &g_progress;
}

void cli_log_stderr(const char *line, void *user) {
    (void)user;
    fprintf(stderr, "pagedlm: %s\n", line);
}

void cli_apply_kernel_env(void) {
    const char *isa = getenv("PAGEDLM_ISA"), *bf16 = getenv("PAGEDLM_BF16_ACTIVATIONS");
    int act = bf16 && *bf16 ? strcmp(bf16, "0") != 0 : -1;
    pdl_error err;
    if (pdl_set_kernels(isa, act, &err)) fprintf(stderr, "pagedlm: PAGEDLM_ISA=%s\n", err.message);
    const char *att = getenv("PAGEDLM_BF16_ATTENTION"); /* f32, bf16, amx; 0 and 1 as f32 and bf16 */
    if (att && *att && pdl_set_attention(strcmp(att, "0") == 0 ? "f32" : strcmp(att, "1") == 0 ? "bf16" : att, &err))
        fprintf(stderr, "pagedlm: PAGEDLM_BF16_ATTENTION: %s\n", err.message);
}

/* An environment flag as vLLM reads VLLM_ALLOW_LONG_MAX_MODEL_LEN: "1" or
 * "true" (any case, blanks around it) is on. */
static bool env_flag(const char *name) {
    const char *v = getenv(name);
    if (!v) return false;
    while (*v == ' ' || *v == '\t') v++;
    size_t n = strlen(v);
    while (n && (v[n - 1] == ' ' || v[n - 1] == '\t' || v[n - 1] == '\n')) n--;
    return (n == 1 && v[0] == '1') || (n == 4 && strncasecmp(v, "true", 4) == 0);
}

pdl_model_options cli_model_options(int n_threads, int ctx_size) {
    const char *panels = getenv("PAGEDLM_WEIGHT_PANELS");
    return (pdl_model_options){.n_threads = n_threads, .ctx_size = ctx_size,
                               .allow_long_context = env_flag("PAGEDLM_ALLOW_LONG_MAX_MODEL_LEN"),
                               .weights_mapped = panels && strcmp(panels, "0") == 0, .log = cli_log_stderr};
}

int cli_load_model(pdl_model **out, const char *path, pdl_model_options *mo, pdl_error *err) {
    cli_show_load_progress(mo, path);
    int rc = pdl_model_load(out, path, mo, err);
    if (rc && g_progress.shown) fputc('\n', stderr); /* end the progress line before the error */
    return rc;
}

/* ---- speculative decoding ------------------------------------------------------ */

int cli_spec_config(const char *opt, const char *text, pdl_engine_options *eo, char **draft_path) {
    json_error_t je;
    json_t *o = json_loads(text, 0, &je);
    int rc = -1;
    if (!o || !json_is_object(o)) {
        fprintf(stderr, "error: %s must be a JSON object%s%s\n", opt, o ? "" : ": ", o ? "" : je.text);
        goto done;
    }
    const char *key;
    json_t *v;
    const char *method = NULL, *model = NULL;
    long k = 0, lmin = 0, lmax = 0;
    *draft_path = NULL;
    json_object_foreach(o, key, v) {
        if (strcmp(key, "method") == 0 && json_is_string(v)) method = json_string_value(v);
        else if (strcmp(key, "model") == 0 && json_is_string(v)) model = json_string_value(v);
        else if (strcmp(key, "num_speculative_tokens") == 0 && json_is_integer(v)) k = (long)json_integer_value(v);
        else if (strcmp(key, "prompt_lookup_min") == 0 && json_is_integer(v)) lmin = (long)json_integer_value(v);
        else if (strcmp(key, "prompt_lookup_max") == 0 && json_is_integer(v)) lmax = (long)json_integer_value(v);
        else {
            fprintf(stderr, "error: %s: unknown key or wrong type: '%s' (keys: method, model, num_speculative_tokens, "
                            "prompt_lookup_min, prompt_lookup_max)\n", opt, key);
            goto done;
        }
    }
    if (!method) method = model ? "draft_model" : "ngram";
    if (strcmp(method, "ngram") == 0 && !model) {
        eo->spec_method = PDL_SPEC_NGRAM;
    } else if ((strcmp(method, "draft_model") == 0 || strcmp(method, "draft") == 0) && model) {
        eo->spec_method = PDL_SPEC_DRAFT_MODEL;
    } else if ((strcmp(method, "mtp") == 0 || strcmp(method, "qwen3_next_mtp") == 0) && !model) {
        eo->spec_method = PDL_SPEC_MTP; /* vLLM's name, and its older one for Qwen3-Next */
    } else {
        fprintf(stderr, "error: %s: method '%s' %s (methods: ngram, mtp (the model's own MTP block), or a draft "
                "\"model\": PATH)\n", opt, method, model ? "does not take a model" : "needs a \"model\"");
        goto done;
    }
    if (k < 1 || k > PDL_MAX_SPEC_TOKENS) {
        fprintf(stderr, "error: %s: num_speculative_tokens must be in [1, %d]\n", opt, PDL_MAX_SPEC_TOKENS);
        goto done;
    }
    if (lmin < 0 || lmax < 0 || (lmin && lmax && lmax < lmin)) {
        fprintf(stderr, "error: %s: prompt_lookup_min/max must be positive, min <= max\n", opt);
        goto done;
    }
    eo->num_speculative_tokens = (int)k;
    eo->prompt_lookup_min = (int)lmin;
    eo->prompt_lookup_max = (int)lmax;
    if (model && !(*draft_path = strdup(model))) { /* outlives the JSON; the caller frees it */
        fprintf(stderr, "error: out of memory\n");
        goto done;
    }
    rc = 0;
done:
    json_decref(o);
    return rc;
}
