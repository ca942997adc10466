/*
 * cli_args.h - option parsing shared by the pagedlm subcommands.
 *
 * Each parser reports a bad value on stderr naming the option and returns
 * -1; the subcommand then exits with status 2 (usage error).
 */
#ifndef PDL_CLI_ARGS_H
#define PDL_CLI_ARGS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "pagedlm.h"

/* Exit statuses of every subcommand. */
enum { CLI_OK = 0, CLI_FAIL = 1, CLI_USAGE = 2 };

/* ---- option tables --------------------------------------------------------
 * A command lists its options once, as a table of cli_option; cli_parse reads
 * argv against it and cli_print_help writes --help from it, so an option's
 * spelling, value, range, target and help live in one row.
 *
 * Each row writes one field of the command's argument struct (offset, from
 * offsetof). Bad values are said on stderr as the cli_* parsers below say
 * them, naming the option as typed. */

typedef enum cli_opt_kind {
    CLI_OPT_FLAG = 0,  /* no value: the bool field becomes true */
    CLI_OPT_FLAG_OFF,  /* no value: the bool field becomes false (--enable-X beside --no-enable-X) */
    CLI_OPT_INT,       /* an int field, in [min, max] */
    CLI_OPT_FLOAT,     /* a float field; in [min, max] when min < max */
    CLI_OPT_U64,       /* a uint64_t field: a non-negative integer (seeds) */
    CLI_OPT_STRING,    /* a const char * field: the argv string itself */
    CLI_OPT_SIZE,      /* a size_t field: "2GiB", "512MiB", "4096" (cli_size) */
    CLI_OPT_KV_DTYPE,  /* a pdl_kv_dtype field: f16 | f32 | q8_0 */
    CLI_OPT_LOGITS,    /* a pdl_logits_mode field: auto | full | selective */
    CLI_OPT_CUSTOM,    /* parse() takes the value: repeatable options, lists, cross-checks */
    CLI_OPT_SECTION,   /* not an option: a heading line in --help (help is its text) */
} cli_opt_kind;

typedef struct cli_option cli_option;
struct cli_option {
    const char *name;     /* "--n-predict" (or a short name when there is no long one: "-r") */
    const char *alias;    /* "-n", or NULL */
    cli_opt_kind kind;
    size_t offset;        /* the field written, in the command's argument struct */
    double min, max;      /* CLI_OPT_INT: the range; CLI_OPT_FLOAT: the range when min < max */
    const char *value;    /* the value's name in --help ("N", "PATH"); NULL: a flag */
    const char *help;     /* what it does, its default; '\n' continues on an indented line */
    /* CLI_OPT_CUSTOM: takes value for option opt (as typed) into args; -1
     * after a message on stderr */
    int (*parse)(void *args, const cli_option *o, const char *opt, const char *value);
    int tag;              /* CLI_OPT_CUSTOM: tells options sharing one parse apart */
};

typedef struct cli_command {
    const char *name;     /* "run": said in "unknown option '...' for run" */
    const char *usage;    /* the first lines of --help, newline-terminated */
    const cli_option *options;
    size_t n_options;
    const char *epilogue; /* printed after the options, or NULL */
} cli_command;

/* Reads argv[1..argc) into args. 0: parsed; 1: -h or --help, the help is
 * on stdout (the command exits CLI_OK); -1: a bad option or value, said on
 * stderr (the command exits CLI_USAGE). Positional arguments are refused
 * as unknown options. */
int cli_parse(const cli_command *cmd, int argc, char **argv, void *args);
/* --help: the usage, every option with its value and help, the epilogue. */
void cli_print_help(const cli_command *cmd, FILE *f);

/* The value after option argv[*i] (advancing *i), or NULL with a message. */
const char *cli_value(int argc, char **argv, int *i);
int cli_int(const char *opt, const char *s, long min, long max, long *out);
int cli_float(const char *opt, const char *s, float *out);
int cli_u64(const char *opt, const char *s, uint64_t *out);
/* "1,403,407" -> malloc'ed ids. */
int cli_token_list(const char *opt, const char *s, int32_t **ids, size_t *n);
int cli_kv_dtype(const char *opt, const char *s, pdl_kv_dtype *out);
/* "2GiB", "512MiB", "1G", "4096" -> bytes. */
int cli_size(const char *opt, const char *s, size_t *out);
int cli_logits_mode(const char *opt, const char *s, pdl_logits_mode *out);
/* All of standard input, NUL-terminated (*len bytes when len != NULL);
 * NULL when out of memory or longer than max bytes. */
char *cli_read_stdin(size_t *len, size_t max);

/* vLLM's --speculative-config JSON into eo: {"method": "ngram",
 * "num_speculative_tokens": K, "prompt_lookup_min": A, "prompt_lookup_max":
 * B} or {"model": PATH, "num_speculative_tokens": K} (*draft_path gets a
 * malloc'ed PATH, for the caller to load into eo->draft_model and free;
 * NULL otherwise). A message on stderr and -1 for anything else. */
int cli_spec_config(const char *opt, const char *json, pdl_engine_options *eo, char **draft_path);

/* pdl_model_load with a progress line on stderr when stderr is a terminal
 * and the load takes more than a second. */
int cli_load_model(pdl_model **out, const char *path, pdl_model_options *mo, pdl_error *err);

/* The environment the programs read (the library reads none): PAGEDLM_ISA
 * and PAGEDLM_BF16_ACTIVATIONS into pdl_set_kernels, once at start (a bad
 * family is said on stderr and the best one runs). */
void cli_apply_kernel_env(void);

/* Model options for n_threads and ctx_size with what the environment says
 * (PAGEDLM_WEIGHT_PANELS=0: matrices left in the file mapping;
 * PAGEDLM_ALLOW_LONG_MAX_MODEL_LEN=1 or true: a ctx_size past the model's
 * own context is taken, with a warning, instead of refused, as vLLM's
 * VLLM_ALLOW_LONG_MAX_MODEL_LEN) and the loader's notices on stderr. */
pdl_model_options cli_model_options(int n_threads, int ctx_size);

/* A pdl_log_fn writing "pagedlm: LINE" to stderr. */
void cli_log_stderr(const char *line, void *user);
/* The same progress display for loads that run elsewhere (the server's
 * loader thread): sets mo->progress when stderr is a terminal. The state
 * lives in static storage (one load at a time). */
void cli_show_load_progress(pdl_model_options *mo, const char *path);

/* Subcommands. */
int cli_chat(int argc, char **argv);
int cli_run(int argc, char **argv);
int cli_logits(int argc, char **argv);
int cli_info(int argc, char **argv);
int cli_make_random_model(int argc, char **argv);
int cli_bench(int argc, char **argv);
int cli_bench_serve(int argc, char **argv);
int cli_serve(int argc, char **argv);
int cli_tokenize(int argc, char **argv);
int cli_detokenize(int argc, char **argv);
int cli_bench_tokenizer(int argc, char **argv);
int cli_bench_grammar(int argc, char **argv);
int cli_template(int argc, char **argv);

#endif
