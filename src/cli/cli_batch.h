/*
 * cli_batch.h - the --batch-file mode of `pagedlm run` (see cli_batch.c).
 */
#ifndef PDL_CLI_BATCH_H
#define PDL_CLI_BATCH_H

#include "cli/cli_args.h"

/* Serves every request of a JSONL file concurrently; prints one JSON line
 * per request (per sequence when n > 1) in input order. */
int cli_run_batch(pdl_model *model, const char *path, const pdl_engine_options *opts, int default_max_tokens);

#endif
