/*
 * gram_test.h - what the grammar tests share: the real tokenizers'
 * vocabularies (loaded once per process), compiling a spec, checking a
 * string against a grammar, and random generation under the mask.
 */
#ifndef PDL_TEST_GRAM_TEST_H
#define PDL_TEST_GRAM_TEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "grammar/grammar.h"

/* "qwen3", "llama3", "mistral" (tokenizer.json folders) or "stories"
 * (stories260K.gguf: SentencePiece with <0xNN> byte fallback). Loaded once;
 * REQUIREs success. */
const gram_vocab *gt_vocab(const char *name);
/* The tokenizer behind gt_vocab(name). */
struct tok_tokenizer;
const struct tok_tokenizer *gt_tokenizer(const char *name);
/* A vocabulary of the 256 single bytes plus extra[0..n) (tokens n_vocab =
 * 256 + n + 1, the last one the end token); freed by the caller. */
gram_vocab *gt_byte_vocab(const char *const *extra, int n);

/* Compiles; REQUIREs success (printing the message). */
gram_grammar *gt_compile(const gram_vocab *v, gram_kind kind, const char *text);
/* Compiles expecting failure; returns the message (static). */
const char *gt_compile_error(const gram_vocab *v, gram_kind kind, const char *text);

/* Whether the whole of s is a sentence of g (bytes through a fresh matcher). */
bool gt_accepts(gram_grammar *g, const char *s, size_t n);
/* Whether s is a prefix of some sentence. */
bool gt_prefix_ok(gram_grammar *g, const char *s, size_t n);

/* Random generation under the mask until an end token: each step checks
 * that the end token's bit equals gram_matcher_is_accepting, that the
 * sampled token is accepted, and (every check_every steps, 0 = never) that
 * the mask agrees with accepting each token one by one (a sample of the
 * vocabulary plus every allowed token). Returns the text (malloc'ed,
 * NUL-terminated, *len bytes); REQUIREs that an end came within max_steps. */
char *gt_generate(gram_grammar *g, uint64_t seed, int max_steps, int check_every, size_t *len);

/* The mask against token-by-token acceptance: counts disagreements
 * (printing the first few) over every token when all, else a sample. */
int gt_check_mask(gram_matcher *m, const uint64_t *bits, bool all, uint64_t *rng);

uint64_t gt_rand(uint64_t *s);

#endif
