/*
 * json_file.h - loading a small JSON file (config.json, tokenizer.json, ...)
 * with jansson, with one error format for every caller: the file, line,
 * column and byte offset of the first syntax error.
 */
#ifndef PDL_UTIL_JSON_FILE_H
#define PDL_UTIL_JSON_FILE_H

#include <jansson.h>

#include "pagedlm.h"

/* flags are jansson decoding flags (e.g. JSON_REJECT_DUPLICATES). */
int json_file_load(const char *path, size_t flags, json_t **out, pdl_error *err);

#endif
