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

#include "pagedlm.h"

/* Exit statuses of every subcommand. */
enum { CLI_OK = 0, CLI_FAIL = 1, CLI_USAGE = 2 };

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
