/*
 * tok_test.h - helpers the tokenizer tests share: loading a tokenizer from
 * the test data (GGUF or a tokenizer.json folder) or from a GGUF a test
 * wrote, and comparing id lists.
 */
#ifndef PDL_TEST_TOK_TEST_H
#define PDL_TEST_TOK_TEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tokenizer/tokenizer.h"
#include "util/error.h"

struct gguf_writer;

/* PAGEDLM_TESTDATA/rel as a GGUF file's tokenizer; REQUIREs success. */
tok_tokenizer *tt_load_gguf(const char *rel);
/* Writes w (a GGUF under construction, freed here) to the temporary file
 * `name` and loads its tokenizer into *out: 0, or -1 with *err (then
 * *out is NULL). */
int tt_load_written_gguf(struct gguf_writer *w, const char *name, tok_tokenizer **out, pdl_error *err);
/* PAGEDLM_TESTDATA/rel as a folder with tokenizer.json; REQUIREs success. */
tok_tokenizer *tt_load_hf(const char *rel);
bool tt_ids_equal(const int32_t *a, size_t na, const int32_t *b, size_t nb);
/* "    label: 1 2 3" on stderr, for failure messages. */
void tt_print_ids(const char *label, const int32_t *ids, size_t n);

#endif
