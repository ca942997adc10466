/*
 * reasoning.h - a reasoning model's thinking block (Qwen3's and DeepSeek-R1's
 * <think> ... </think>) kept apart from its answer.
 *
 * Two halves. Text: a sequence's released text split, as it streams, into
 * reasoning and content (the server's message.reasoning / delta.reasoning,
 * the terminal chat's dimmed thinking); the split depends on the text only,
 * never on how it was cut into tokens (a marker cut across pieces is held
 * until it is decided). Tokens: pdl_reasoning, made here from a format and a
 * model, tells the engine where the block is, so that a grammar applies to
 * the answer only and a thinking budget can force the end marker.
 *
 * The formats are vLLM's --reasoning-parser names:
 *   qwen3        <think> ... </think>; the model opens the block itself (or
 *                its template does, in the generation prompt)
 *   deepseek_r1  the same markers; R1's template opens the block in the
 *                generation prompt, so output starts inside it
 *   openai       gpt-oss's harmony messages: the analysis channel is the
 *                reasoning, final (and commentary) the answer; the split is
 *                src/grammar's harmony reader (gram_harmony.c), and a call
 *                to a function shows in the answer as "[tool call NAME ARGS]"
 *                (the server reads harmony calls as tool calls itself)
 * Either way where the output starts is read from the rendered prompt
 * (reasoning_prompt_opens), not assumed from the format.
 *
 * Text rules: the block opens only if the output begins with the start
 * marker (marker dropped), as the engine lets only the first token open it;
 * else everything is content. Inside, text up to the end marker is
 * reasoning, with the
 * whitespace at its two ends dropped; after it, the whitespace before the
 * answer is dropped and the rest is content. A block the output ends inside
 * (max_tokens) is reasoning to its end. A second start marker after the
 * answer began is content.
 *
 * What it is not for: tool calls inside the answer (src/grammar's tool
 * parsers run on the content this gives).
 */
#ifndef PDL_ENGINE_REASONING_H
#define PDL_ENGINE_REASONING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pagedlm.h"

typedef struct reasoning_format {
    const char *name;
    const char *start, *end; /* the markers' text */
    bool harmony;            /* openai: the harmony format's channels, not a block between markers */
} reasoning_format;

/* The format called name, or NULL. */
const reasoning_format *reasoning_format_find(const char *name);
/* The names, for messages: "qwen3, deepseek_r1". */
const char *reasoning_format_names(void);

/* The format a model's vocabulary shows: openai when <|channel|> is one
 * token (gpt-oss), qwen3 when <think> and </think> are; else NULL. */
const reasoning_format *reasoning_format_of_model(const pdl_model *m);

/* Whether a rendered prompt ends inside a thinking block: its last text
 * (whitespace aside) is the start marker, as a template's generation
 * prompt that opens the block leaves it. */
bool reasoning_prompt_opens(const reasoning_format *f, const char *text, size_t len);

/* The engine's view of f for model m: the markers' token ids (each must be
 * one token of m's vocabulary; -1 when it is not, then the engine cannot
 * follow the block: out->enabled stays false), where the output starts,
 * and the budget (< 0: none). */
void reasoning_params(const reasoning_format *f, const pdl_model *m, bool starts_inside, int budget,
                      pdl_reasoning *out);

/* ---- the text split ---------------------------------------------------- */

typedef struct reasoning_split reasoning_split;

/* NULL when out of memory. starts_inside: the prompt opened the block. */
reasoning_split *reasoning_split_new(const reasoning_format *f, bool starts_inside);
void reasoning_split_free(reasoning_split *s);

/* Called with each piece released: reasoning text or content. */
typedef void (*reasoning_out_fn)(void *user, bool reasoning, const char *text, size_t len);

/* Feeds the next text; what is decided goes to fn. -1 when out of memory. */
int reasoning_split_feed(reasoning_split *s, const char *text, size_t len, reasoning_out_fn fn, void *user);
/* The end of the text: what was held is released. */
int reasoning_split_finish(reasoning_split *s, reasoning_out_fn fn, void *user);
/* reasoning_split_feed for one generated token's event: a harmony split is
 * given a control token's own text (token, of model m) where the event has
 * none (a detokenizer skips them; harmony's markers are control tokens). */
int reasoning_split_feed_token(reasoning_split *s, const pdl_model *m, int32_t token, const char *text, size_t len,
                               reasoning_out_fn fn, void *user);

/* Whether the answer has begun (the block ended, or there was none). */
bool reasoning_split_in_answer(const reasoning_split *s);

#endif
