/*
 * grammar.h - structured output: constrain sampling so the generated text
 * belongs to a language (a JSON Schema, any JSON, a regex, a list of choices,
 * a GBNF grammar, a forced tool call), and parse tool calls out of text.
 *
 * What it is for: the engine and the server. One vocabulary per model, one
 * compiled grammar per request (shareable between requests with the same
 * spec), one matcher per sequence. Nothing here prints, exits, or reads the
 * environment. What it is not for: sampling itself (the sampler applies the
 * mask like any other logit processor) and the HTTP shapes (src/server/).
 *
 * How the engine uses it, per request:
 *
 *   model load:   gram_vocab_from_tokenizer(&v, tok, info.vocab, stop_ids, n, &err)   once
 *   request:      gram_compile(&g, v, &spec, &err)  -> 400 with err.message on failure
 *   sequence:     m = gram_matcher_new(g)       (n > 1: one per sequence)
 *   each sampled row of that sequence (the rows logits_indices selects):
 *                 gram_matcher_fill_mask(m, bits)        bits: gram_mask_words(v) uint64
 *                 gram_mask_apply(bits, row, n_vocab)    disallowed logits -> -inf
 *                 ... temperature, penalties, top-k/p, min-p, sampling as usual ...
 *   the token:    gram_matcher_accept_token(m, id)       (false only if the sampler ignored the mask)
 *   finish:       the sequence may stop once gram_matcher_is_terminated(m);
 *                 an end token (vocab end ids) is allowed exactly when accepting.
 *   speculative decoding: accept the k draft tokens one by one, filling a mask
 *                 before each (k+1 masks); on rejection gram_matcher_rollback(m, r).
 *   free:         gram_matcher_free(m); gram_grammar_free(g) (reference counted).
 *
 * Threads: a vocabulary and a compiled grammar are read-only after creation
 * except for the grammar's internal cache (filled under a mutex), so several
 * matchers of one grammar may run on different threads. A matcher is used by
 * one thread at a time.
 *
 * Text and bytes: a token stands for the bytes it adds to the decoded output
 * (tok_id_bytes: "\xe2\x96\x81" is a space, <0xNN> one byte, byte-level BPE
 * through GPT-2's map), which is what the engine streams after a prompt. The
 * grammar is over bytes, so a multi-byte UTF-8 character may be split over
 * tokens. Control tokens never appear inside grammar text: a format's
 * markers (Mistral's [TOOL_CALLS], harmony's <|channel|>, in a forced call)
 * are the grammar's specials, allowed only where the format writes them
 * (as the control token where the vocabulary holds one, else as text).
 */
#ifndef PDL_GRAMMAR_GRAMMAR_H
#define PDL_GRAMMAR_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pagedlm.h"

/* ---------------------------------------------------------------------------
 * Vocabulary: the bytes of every token and their trie
 * ------------------------------------------------------------------------- */

/* The public pdl_grammar_vocab (pagedlm.h) under its module's name: one
 * struct, so the engine and the server pass it either way. */
typedef struct pdl_grammar_vocab gram_vocab;
struct tok_tokenizer;

/* From a loaded tokenizer. n_vocab: the model's vocabulary (the logits row
 * may be longer than the tokenizer, e.g. Qwen3's 151936 rows for 151669
 * tokens; ids past the tokenizer are never allowed); 0: the tokenizer's.
 * end_ids: tokens that end generation besides the tokenizer's EOS (e.g.
 * <|im_end|>, <|eot_id|>); duplicates are fine. */
int gram_vocab_from_tokenizer(gram_vocab **out, const struct tok_tokenizer *tok, int n_vocab, const int32_t *end_ids,
                              int n_end_ids, pdl_error *err);
/* From explicit bytes: token i is bytes[i][0..lens[i]); bytes[i] == NULL or
 * lens[i] == 0 for tokens never allowed. special: optional [n] flags of
 * control tokens (never inside text; a grammar's specials may name them by
 * their bytes). */
int gram_vocab_new(gram_vocab **out, int n_vocab, const char *const *bytes, const uint32_t *lens,
                   const bool *special, const int32_t *end_ids, int n_end_ids, pdl_error *err);
void gram_vocab_free(gram_vocab *v);
int gram_vocab_size(const gram_vocab *v);
/* Words of a mask: bit i of words[i / 64] is token i. */
size_t gram_mask_words(const gram_vocab *v);
/* The bytes token id stands for (NULL for ids outside the vocabulary). */
const char *gram_vocab_token(const gram_vocab *v, int32_t id, size_t *len);
bool gram_vocab_is_end(const gram_vocab *v, int32_t id);
/* Nodes of the token trie (for statistics). */
int gram_vocab_trie_nodes(const gram_vocab *v);

/* ---------------------------------------------------------------------------
 * Grammars
 * ------------------------------------------------------------------------- */

typedef enum gram_kind {
    GRAM_JSON_SCHEMA = 0, /* text: a JSON Schema (see docs/architecture.md for the subset) */
    GRAM_JSON_OBJECT,     /* any JSON object (OpenAI response_format json_object); text unused */
    GRAM_JSON_VALUE,      /* any JSON value; text unused */
    GRAM_REGEX,           /* text: a regex the whole output matches (ECMAScript subset) */
    GRAM_CHOICE,          /* text: a JSON array of strings; the output is one of them */
    GRAM_GBNF,            /* text: a GBNF grammar (llama.cpp's format), rule "root" */
    GRAM_TOOL_CALL,       /* text: an OpenAI "tools" array; the output is a call in tool_format */
} gram_kind;

/* Tool-call formats of models (the output parsers below and forced calls),
 * named as vLLM's --tool-call-parser names them. */
typedef enum gram_tool_format {
    GRAM_TOOLS_HERMES = 0,  /* <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call> (Qwen, Hermes) */
    GRAM_TOOLS_LLAMA3_JSON, /* {"name": ..., "parameters": {...}} (Llama 3.1-3.3) */
    GRAM_TOOLS_MISTRAL,     /* [TOOL_CALLS][{"name": ..., "arguments": {...}}, ...] */
    GRAM_TOOLS_QWEN3_CODER, /* <tool_call>\n<function=f>\n<parameter=p>\nvalue\n</parameter>\n</function>\n</tool_call>
                             * (Qwen3-Coder, Qwen3.5) */
    GRAM_TOOLS_PYTHONIC,    /* [f(a=1, b="x"), g()] (Llama 3.2, Llama 4) */
    GRAM_TOOLS_DEEPSEEK_V3, /* <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{...}\n```
                             * <｜tool▁call▁end｜><｜tool▁calls▁end｜> (DeepSeek-V3, R1) */
    GRAM_TOOLS_GLM45,       /* <tool_call>f\n<arg_key>p</arg_key>\n<arg_value>value</arg_value>\n</tool_call> (GLM-4.5+) */
    GRAM_TOOLS_KIMI_K2,     /* <|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>
                             * {...}<|tool_call_end|><|tool_calls_section_end|> (Kimi-K2) */
    GRAM_TOOLS_OPENAI,      /* harmony: <|channel|>commentary to=functions.f <|constrain|>json<|message|>{...}<|call|>,
                             * the analysis channel as reasoning (gpt-oss) */
} gram_tool_format;

typedef struct gram_spec {
    gram_kind kind;
    const char *text;     /* see gram_kind; NUL-terminated unless len is set */
    size_t len;           /* 0: strlen(text) */
    /* GRAM_TOOL_CALL only */
    gram_tool_format tool_format;
    const char *tool_name; /* a named function (tool_choice {"function": {"name"}}); NULL: any tool */
    bool parallel;         /* NULL tool_name: one or more calls (OpenAI parallel_tool_calls) */
    /* The output is harmony (gpt-oss): the constraint applies to the answer,
     * after an optional analysis message of free text; a non-call
     * constraint's answer is the final channel's message (gram_harmony.c) */
    bool harmony;
} gram_spec;

/* The public pdl_grammar (pagedlm.h) under its module's name: one struct,
 * so pdl_request_params.grammar takes either. */
typedef struct pdl_grammar gram_grammar;

/* What one compilation may cost: the public pdl_grammar_limits (pagedlm.h
 * says what each field bounds). The compiler counts its work as it goes
 * (llguidance's "fuel") and stops at the first limit reached. */
typedef pdl_grammar_limits gram_limits;

/* About 0.5-1 s of work on one core of a 2-core VM; the largest grammar of
 * the tests (a 24-tool call schema) takes ~2% of it. */
#define GRAM_DEFAULT_MAX_WORK ((int64_t)100000000)
/* Each state costs a transition row (4 bytes per byte class, twice) and,
 * once the matcher reaches it, a token classification. */
#define GRAM_DEFAULT_MAX_STATES 200000
#define GRAM_DEFAULT_MAX_SECONDS 5.0
#define GRAM_POLL_WORK 200000

/* Compiles spec for vocabulary v (which must outlive the grammar) within the
 * default limits. Errors name what is wrong and where: a GBNF line and
 * column, a regex offset, a schema keyword and its JSON pointer
 * ("unsupported keyword 'not' at /properties/a"), or the limit a grammar
 * too complex to compile reached. */
int gram_compile(gram_grammar **out, const gram_vocab *v, const gram_spec *spec, pdl_error *err);
/* The same within lim (NULL: the defaults). */
int gram_compile_limited(gram_grammar **out, const gram_vocab *v, const gram_spec *spec, const gram_limits *lim,
                         pdl_error *err);
/* Another reference; gram_grammar_free drops one. */
gram_grammar *gram_grammar_ref(gram_grammar *g);
void gram_grammar_free(gram_grammar *g);
/* The vocabulary g was compiled for. */
const gram_vocab *gram_grammar_vocab(const gram_grammar *g);

typedef struct gram_stats {
    int n_states;      /* DFA states over all rules */
    int n_walk_classes; /* classes of states that share one token classification */
    int n_rules;       /* rules left after inlining */
    int n_classes;     /* byte classes */
    long long compile_work; /* steps of work the compilation took (gram_limits.max_work) */
    long class_walks;  /* states whose token classification was computed */
    double class_walk_ms;
} gram_stats;
void gram_grammar_stats(const gram_grammar *g, gram_stats *st);

/* ---------------------------------------------------------------------------
 * Matchers: one sequence's parse state
 * ------------------------------------------------------------------------- */

typedef struct gram_matcher gram_matcher;

/* NULL when out of memory. Keeps a reference to g. */
gram_matcher *gram_matcher_new(gram_grammar *g);
void gram_matcher_free(gram_matcher *m);
/* The grammar m runs. */
gram_grammar *gram_matcher_grammar(const gram_matcher *m);
/* Back to the start (the history is dropped). */
void gram_matcher_reset(gram_matcher *m);

/* Advances by one token. An end token is accepted only in an accepting
 * state and terminates the matcher. false (state unchanged): not allowed,
 * or the matcher could not go on (gram_matcher_error says why). */
bool gram_matcher_accept_token(gram_matcher *m, int32_t id);
/* Advances by raw bytes (e.g. a prefix the engine forces); one history step. */
bool gram_matcher_accept_bytes(gram_matcher *m, const char *bytes, size_t len);
/* Undoes the last n accepted tokens (speculative decoding). Returns how many
 * were undone (fewer when the history is shorter). */
int gram_matcher_rollback(gram_matcher *m, int n);
/* Steps that can be rolled back. */
int gram_matcher_history(const gram_matcher *m);

/* The text so far is a complete sentence: an end token is allowed. */
bool gram_matcher_is_accepting(const gram_matcher *m);
/* Nothing but an end token can follow (or one was accepted). */
bool gram_matcher_is_terminated(const gram_matcher *m);

/* The allowed tokens of the next step: bits[gram_mask_words(v)], bit i set
 * when token i may come next. End tokens are set exactly when accepting.
 * -1: the mask is incomplete (fail the request): out of memory, or a
 * grammar too ambiguous to follow (gram_matcher_error says which). */
int gram_matcher_fill_mask(gram_matcher *m, uint64_t *bits);
/* Why the last accept or fill_mask failed: a message, or NULL when it did
 * not fail or only refused a token the grammar does not allow. A matcher's
 * work per call is bounded (a grammar's ambiguity can make its stacks
 * double with each byte); past the bound it fails with this reason. */
const char *gram_matcher_error(const gram_matcher *m);
/* Sets logits[i] = -INFINITY for every token i whose bit is clear. */
void gram_mask_apply(const uint64_t *bits, float *logits, int n_vocab);
/* The bytes every continuation must start with (up to cap), e.g. a JSON
 * key's remaining text; 0 when the next byte is not forced. */
size_t gram_matcher_forced_bytes(gram_matcher *m, char *buf, size_t cap);
/* Fewest bytes that complete the text (0 when accepting); for heuristics such
 * as closing the output near max_tokens. */
int gram_matcher_bytes_to_end(gram_matcher *m);

/* ---------------------------------------------------------------------------
 * Tool-call output parsers (the format of tool_choice "auto")
 * ------------------------------------------------------------------------- */

/*
 * Fed the generated text in pieces (as it is detokenized), a parser splits
 * it into content and tool calls and reports both as deltas, the way OpenAI
 * streams them: content text, a call's start (index, id, name), fragments of
 * its arguments (JSON text; their concatenation is the arguments string).
 * Whatever the pieces, the concatenated deltas are the same. Text that looks
 * like the start of a call is held back until it is decided; a call whose
 * JSON turns out malformed is given back as content (unless its start was
 * already reported, then it ends incomplete). A call the text ends inside
 * (cut by max_tokens) is dropped: never content; if its start was reported
 * it ends incomplete.
 */
typedef enum gram_tool_event_kind {
    GRAM_TOOL_CONTENT = 0, /* text: content */
    GRAM_TOOL_CALL_BEGIN,  /* index, id, name */
    GRAM_TOOL_CALL_ARGS,   /* index, text: the next piece of the arguments */
    GRAM_TOOL_CALL_END,    /* index; complete: false when the text ended inside the call */
    GRAM_TOOL_REASONING,   /* text: reasoning (openai: the harmony analysis channel) */
} gram_tool_event_kind;

typedef struct gram_tool_event {
    gram_tool_event_kind kind;
    int index;
    const char *id, *name;
    const char *text;
    size_t len;
    bool complete;
} gram_tool_event;

typedef void (*gram_tool_event_fn)(const gram_tool_event *ev, void *user);

typedef struct gram_tool_parser gram_tool_parser;

/* id_seed makes the call ids ("call_" + 24 alphanumerics; Mistral: 9, as its
 * templates require; Kimi-K2: the model's own "functions.NAME:IDX"); the same
 * seed gives the same ids. */
gram_tool_parser *gram_tool_parser_new(gram_tool_format fmt, uint64_t id_seed);
/* The same, given the request's OpenAI "tools" array as JSON text (len 0:
 * NUL-terminated; NULL: none). qwen3_coder and glm45 write each parameter
 * as text: its JSON value follows the parameter's schema type, as vLLM
 * converts it (a string stays the text, numbers, booleans, objects and
 * arrays are parsed); without the tools every parameter is read as
 * qwen3_coder: a string, glm45: JSON if it parses. */
gram_tool_parser *gram_tool_parser_new_with_tools(gram_tool_format fmt, uint64_t id_seed, const char *tools,
                                                  size_t tools_len);
void gram_tool_parser_free(gram_tool_parser *p);
/* -1 only when out of memory. */
int gram_tool_parser_feed(gram_tool_parser *p, const char *text, size_t len, gram_tool_event_fn fn,
                          void *user);
/* End of the text: releases what was held back. */
int gram_tool_parser_finish(gram_tool_parser *p, gram_tool_event_fn fn, void *user);

/* "hermes", "llama3_json", "mistral", "qwen3_coder", "pythonic",
 * "deepseek_v3", "glm45", "kimi_k2", "openai" (vLLM's --tool-call-parser
 * names). */
int gram_tool_format_parse(const char *name, gram_tool_format *out);
const char *gram_tool_format_name(gram_tool_format fmt);
/* The format's markers that a model's vocabulary may hold as control
 * tokens, whose text a detokenizer skips (Mistral's [TOOL_CALLS],
 * DeepSeek's <｜tool▁calls▁begin｜>, ...): a caller feeding detokenized text
 * feeds a sampled marker token's own text instead (grammars name them as
 * specials). NULL-terminated. */
const char *const *gram_tool_format_markers(gram_tool_format fmt);

#endif
