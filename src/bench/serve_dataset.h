/*
 * serve_dataset.h - what the serving benchmark sends and when: the random
 * dataset (random token ids from the tokenizer's normal vocabulary, decoded
 * to text, lengths spread by --range-ratio, an optional shared prefix, as
 * vLLM's random dataset) with a local tokenizer or, without one, through
 * the server's own /tokenize and /detokenize; prompts from a JSONL file; and
 * the arrival schedule (all at once, or Poisson at a given rate, seeded).
 */
#ifndef PDL_BENCH_SERVE_DATASET_H
#define PDL_BENCH_SERVE_DATASET_H

#include <stdint.h>

#include "pagedlm.h"

typedef struct bench_prompt {
    char *text;
    int prompt_len;   /* tokens the prompt was made of (random dataset), 0 if unknown */
    int output_len;   /* max_tokens to ask for */
} bench_prompt;

/* The [lo, hi] range of lengths around len for range_ratio r (inclusive),
 * at least 1, as vLLM: floor(len * (1 - r)) .. floor(len * (1 + r)). */
void dataset_length_range(int len, double range_ratio, int *lo, int *hi);

/* Token ids whose text stands alone: not special, decodes to non-empty
 * valid text. *ids malloc'ed. */
int dataset_normal_vocab(const pdl_model *tok, int32_t **ids, size_t *n, pdl_error *err);

int dataset_random(const pdl_model *tok, int n, int input_len, int output_len, double range_ratio, int prefix_len,
                   uint64_t seed, bench_prompt **out, pdl_error *err);
/* The random dataset through a server's tokenizer (vLLM's /tokenize and
 * /detokenize): the vocabulary size is found with /detokenize, random ids
 * are decoded, and the text is encoded again and cut (or grown) to the
 * drawn length, as vLLM's random dataset re-encodes; prompt_len is the
 * server's count without special tokens. auth: extra header lines or "". */
struct http_url;
int dataset_random_remote(const struct http_url *url, const char *auth, int n, int input_len, int output_len,
                          double range_ratio, int prefix_len, uint64_t seed, bench_prompt **out, pdl_error *err);

/* Lines {"prompt": "...", "output_len": N (optional)}; the first n lines
 * (cycled when the file has fewer). */
int dataset_jsonl(const char *path, int n, int output_len, bench_prompt **out, pdl_error *err);
void dataset_free(bench_prompt *p, int n);

/* Send offsets in seconds from the start for n requests: all 0 when rate
 * is infinite (<= 0 here), else cumulative exponential gaps of mean 1/rate. */
void arrivals_poisson(double rate, int n, uint64_t seed, double *offsets);

/* splitmix64: the benchmark's seeded random stream. */
uint64_t bench_rng(uint64_t *state);

#endif
