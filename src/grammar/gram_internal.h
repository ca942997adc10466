/*
 * gram_internal.h - the grammar module's inner representations, shared by
 * its files and by nothing outside src/grammar/ (the engine uses grammar.h).
 *
 * The data path of a constrained request:
 *
 *   front end (GBNF, JSON Schema, regex, choice, tool calls)
 *      -> gram_ir: rules whose bodies are regular expressions over byte sets
 *         and references to other rules (gram_ir.c builds it)
 *      -> gram_auto: one DFA per rule that stays a rule, over byte classes,
 *         with "call rule R, then continue at state t" edges (gram_compile.c;
 *         rules that are not recursive are inlined into their callers)
 *      -> a parser state: a set of stacks, each stack a top DFA state plus a
 *         hash-consed chain of return states (gram_match.c)
 *      -> a token mask: per DFA state, a cached classification of every
 *         vocabulary token (accepted whatever lies below on the stack,
 *         rejected, or uncertain: decided by a walk with the real stack),
 *         computed by walking the token trie (gram_mask.c, gram_vocab.c).
 *
 * What it is not for: the public interface (grammar.h) and the front ends'
 * own parsing state.
 */
#ifndef PDL_GRAMMAR_GRAM_INTERNAL_H
#define PDL_GRAMMAR_GRAM_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "grammar/grammar.h"

/* ---------------------------------------------------------------------------
 * The intermediate form (gram_ir.c)
 * ------------------------------------------------------------------------- */

/* Expression node kinds. Nodes live in one array and refer to each other by
 * index; a builder returns -1 when out of memory (and sets ir->oom), and
 * every builder passes a -1 argument through, so a front end checks once. */
enum {
    GX_EMPTY = 0, /* the empty string */
    GX_NONE,      /* no string at all (an empty character class) */
    GX_BYTES,     /* one byte out of sets[a] */
    GX_REF,       /* rule a */
    GX_SEQ,       /* kids[a .. a+b) one after another */
    GX_ALT,       /* one of kids[a .. a+b) */
    GX_REPEAT,    /* node a, at least b and at most c times (c = GX_INF: no bound) */
    GX_SPECIAL,   /* the marker specials[a]: its control token where the vocabulary holds one, else its
                   * text (grammar.c resolves it before compiling) */
};
#define GX_INF (-1)
/* Ends the argument list of gx_seqv / gx_altv. */
#define GX_END INT32_MIN

typedef struct gx_node {
    uint8_t kind;
    int32_t a, b, c;
} gx_node;

enum { GX_RULE_NOINLINE = 1 }; /* keep as a rule (a shared lexeme-like rule such as a JSON string) */

typedef struct gx_rule {
    char *name;     /* for messages */
    int32_t body;   /* node index; -1 while only declared */
    uint32_t flags;
} gx_rule;

typedef struct gram_ir {
    gx_node *nodes;           /* [n_nodes] */
    int32_t n_nodes, cap_nodes;
    int32_t *kids;            /* [n_kids] children of SEQ/ALT nodes */
    int32_t n_kids, cap_kids;
    uint8_t (*sets)[32];      /* [n_sets] byte sets (bit b of byte b/8), deduplicated */
    int32_t n_sets, cap_sets;
    int32_t *set_hash;        /* [set_hash_cap] open addressing into sets, -1 empty */
    int32_t set_hash_cap;
    gx_rule *rules;           /* [n_rules] */
    int32_t n_rules, cap_rules;
    int32_t root;             /* rule index, -1 until set */
    char **specials;          /* [n_specials] texts of the markers GX_SPECIAL nodes name */
    int32_t n_specials;
    const char *const *marks; /* NULL-terminated: the markers gx_fmt writes as GX_SPECIAL (a tool-call
                                 format's, set by its builder); NULL: none */
    bool oom;
} gram_ir;

void gram_ir_init(gram_ir *ir);
void gram_ir_free(gram_ir *ir);

int32_t gx_empty(gram_ir *ir);
int32_t gx_none(gram_ir *ir);
int32_t gx_byteset(gram_ir *ir, const uint8_t set[32]);
int32_t gx_byte_range(gram_ir *ir, unsigned lo, unsigned hi);
int32_t gx_literal(gram_ir *ir, const char *s, size_t n);
int32_t gx_str(gram_ir *ir, const char *s); /* NUL-terminated literal */
/* A marker (a format's control token, such as <|channel|> or [TOOL_CALLS]):
 * only that token where the vocabulary holds it as one, so that it is
 * sampled here and nowhere else (never inside a JSON string), else its
 * text. */
int32_t gx_special(gram_ir *ir, const char *text);
/* A literal of a format's syntax: the markers of ir->marks in it become
 * gx_special, the rest is text. */
int32_t gx_fmt(gram_ir *ir, const char *s);
/* A growing list of expression ids (the kids of a sequence or alternation
 * being parsed): appends x; false (ir->oom set, the list kept) when out of
 * memory. */
typedef struct gx_list {
    int32_t *ids;
    int n, cap;
} gx_list;
bool gx_list_push(gram_ir *ir, gx_list *l, int32_t x);
int32_t gx_seq(gram_ir *ir, const int32_t *kids, int n);
int32_t gx_alt(gram_ir *ir, const int32_t *kids, int n);
int32_t gx_seqv(gram_ir *ir, ...); /* kids ..., GX_END */
int32_t gx_altv(gram_ir *ir, ...);
int32_t gx_repeat(gram_ir *ir, int32_t x, int32_t min, int32_t max);
int32_t gx_opt(gram_ir *ir, int32_t x);
int32_t gx_star(gram_ir *ir, int32_t x);
int32_t gx_ref(gram_ir *ir, int32_t rule);

/* A new rule (body -1) named name; -1 when out of memory. */
int32_t gram_ir_rule(gram_ir *ir, const char *name, uint32_t flags);
/* A rule whose body is already known. */
int32_t gram_ir_rule_def(gram_ir *ir, const char *name, uint32_t flags, int32_t body);
/* The index of a marker's text in ir->specials, added when new; -1 when out of memory. */
int32_t gram_ir_add_special(gram_ir *ir, const char *text);

/* A set of Unicode code points as sorted, disjoint, non-adjacent ranges. */
typedef struct gram_cpset {
    uint32_t *r;   /* [2 * n] lo, hi pairs (inclusive) */
    int n, cap;
    bool oom;
} gram_cpset;

void gram_cpset_add(gram_cpset *s, uint32_t lo, uint32_t hi);
/* Sorts and merges (call after adding, before the queries below). */
void gram_cpset_normalize(gram_cpset *s);
/* The complement within U+0000..U+10FFFF (normalized input). */
void gram_cpset_negate(gram_cpset *s);
void gram_cpset_free(gram_cpset *s);
/* The UTF-8 encodings of the set's code points, surrogates left out. */
int32_t gx_cpset(gram_ir *ir, const gram_cpset *s);
int32_t gx_cp_range(gram_ir *ir, uint32_t lo, uint32_t hi);
/* Writes the UTF-8 encoding of cp (<= 4 bytes); returns its length. */
int gram_utf8_encode(uint32_t cp, char *out);
/* Decodes one UTF-8 character of s[0..n): its length (0: invalid) and *cp. */
int gram_utf8_decode(const char *s, size_t n, uint32_t *cp);

/* ---------------------------------------------------------------------------
 * Front ends (each builds into a caller's IR; messages name where it failed)
 * ------------------------------------------------------------------------- */

/* GBNF text -> rules; root = the rule named "root" (gram_gbnf.c). */
int gram_gbnf_parse(gram_ir *ir, const char *text, size_t len, pdl_error *err);

/* Regex flavours of gram_regex_parse (flags). */
enum {
    GRAM_RE_PLAIN = 0,       /* the text itself */
    GRAM_RE_JSON_STRING = 1, /* the text as the inside of a JSON string: '"', '\\' and
                              * control characters as their (canonical) escapes */
    GRAM_RE_NO_LT = 2,       /* no '<' anywhere (text inside a tool-call format whose
                              * markers start with '<': gram_tools.c) */
};
/* One regex (ECMAScript subset, whole-string match) -> an expression. */
int gram_regex_parse(gram_ir *ir, const char *re, size_t len, int flavour, int32_t *out,
                     pdl_error *err);

/* How the JSON front ends write values (gram_json_rules.flags). */
enum {
    GRAM_JSON_NO_LT = 1,  /* strings never hold a raw '<' (it may be escaped as \u003c):
                           * JSON inside a format whose markers start with '<' */
    GRAM_JSON_PYTHON = 2, /* Python literals: True, False, None; no "\/" escape and no
                           * \u escape of a surrogate (pythonic tool calls) */
};

/* JSON value pieces shared by the JSON front ends (gram_json.c). */
typedef struct gram_json_rules {
    int32_t ws;      /* expression: whitespace between JSON tokens (the policy) */
    int32_t string;  /* rule: any JSON string, quotes included (NOINLINE) */
    int32_t value;   /* rule: any JSON value */
    int32_t object;  /* rule: any JSON object */
    unsigned flags;  /* GRAM_JSON_* */
} gram_json_rules;
/* Whitespace between JSON tokens: nothing, one space, or a newline and up to
 * GRAM_JSON_MAX_INDENT spaces or tabs (bounded so a model cannot loop on it). */
#define GRAM_JSON_MAX_INDENT 20
int gram_json_rules_init(gram_ir *ir, gram_json_rules *j);
/* The same with GRAM_JSON_* flags. */
int gram_json_rules_init_flags(gram_ir *ir, gram_json_rules *j, unsigned flags);
/* The literals true, false and null as j writes them. */
const char *gram_json_lit(const gram_json_rules *j, int which); /* 't', 'f', 'n' */
/* One character of a JSON string's inside: a raw character or an escape;
 * any_unicode_escape: \uXXXX for any character (else only for the control
 * characters, which have no raw form: length-bounded strings count
 * characters position by position, and the shorter automaton per position
 * keeps them small). */
int32_t gram_json_char(gram_ir *ir, bool any_unicode_escape);
/* The same as j writes it (j->flags). */
int32_t gram_json_char_of(gram_ir *ir, const gram_json_rules *j, bool any_unicode_escape);
/* Any JSON number. */
/* Digits a generated number may have in its integer part and in its
 * fraction (beyond those a schema's bounds need): gram_json.c, gram_numrange.c. */
#define GRAM_NUM_MAX_DIGITS 16
int32_t gram_json_any_number(gram_ir *ir);
/* A JSON string literal for the bytes s[0..n) (escaped as JSON does). */
int32_t gram_json_string_literal(gram_ir *ir, const char *s, size_t n);
/* Numbers in a decimal interval (gram_numrange.c). lo/hi: decimal strings
 * ("-12", "0.5", "1e3"), NULL for no bound. integer: whole numbers only. */
int gram_json_number_range(gram_ir *ir, const char *lo, bool lo_excl, const char *hi, bool hi_excl,
                           bool integer, int32_t *out, pdl_error *err);

/* JSON Schema text -> root rule (gram_schema.c). where: how messages name
 * the schema ("schema", "tools[0].function.parameters"). */
int gram_schema_compile(gram_ir *ir, const gram_json_rules *j, const char *text, size_t len,
                        const char *where, int32_t *out_expr, pdl_error *err);
struct json_t;
int gram_schema_compile_json(gram_ir *ir, const gram_json_rules *j, struct json_t *schema,
                             const char *where, int32_t *out_expr, pdl_error *err);
/* One part of a schema document: sub (inside doc, whose JSON pointer is
 * pointer, e.g. "#/properties/city") is compiled with "$ref"s resolved in
 * doc; messages name where and the pointer. */
int gram_schema_compile_sub(gram_ir *ir, const gram_json_rules *j, struct json_t *doc, struct json_t *sub,
                            const char *pointer, const char *where, int32_t *out_expr, pdl_error *err);
/* The schema a "$ref" ("#", "#/$defs/x", any "#/..." pointer) names in doc;
 * NULL when it names nothing there. */
struct json_t *gram_schema_resolve(struct json_t *doc, const char *ref);
/* The regex of a string "format" (date-time, date, time, uuid, email), or NULL. */
const char *gram_schema_format_regex(const char *format);

/* A call id made from a parser's seed and the call's number (from 1):
 * "call_" and 24 alphanumerics (gram_toolparse.c). out holds 30 bytes. */
void gram_call_id(uint64_t seed, int n_calls, char *out);

/* The harmony format's reader (gram_harmony.c), behind gram_tool_parser for
 * GRAM_TOOLS_OPENAI: the same events, and GRAM_TOOL_REASONING. */
typedef struct gram_harmony gram_harmony;
gram_harmony *gram_harmony_new(uint64_t id_seed);
void gram_harmony_free(gram_harmony *h);
int gram_harmony_feed(gram_harmony *h, const char *text, size_t len, gram_tool_event_fn fn, void *user);
int gram_harmony_finish(gram_harmony *h, gram_tool_event_fn fn, void *user);

/* Tools array + format -> the expression of a forced call (gram_tools.c). */
int gram_tools_grammar(gram_ir *ir, const gram_spec *spec, int32_t *out_expr, pdl_error *err);

/* Markers of tool-call formats that the parsers and the grammars share. */
#define GRAM_DS_BAR "\xef\xbd\x9c" /* U+FF5C FULLWIDTH VERTICAL LINE */
#define GRAM_DS_SP "\xe2\x96\x81"  /* U+2581 LOWER ONE EIGHTH BLOCK */
#define GRAM_DS_CALLS "<" GRAM_DS_BAR "tool" GRAM_DS_SP "calls" GRAM_DS_SP "begin" GRAM_DS_BAR ">"
#define GRAM_DS_CALLS_END "<" GRAM_DS_BAR "tool" GRAM_DS_SP "calls" GRAM_DS_SP "end" GRAM_DS_BAR ">"
#define GRAM_DS_CALL "<" GRAM_DS_BAR "tool" GRAM_DS_SP "call" GRAM_DS_SP "begin" GRAM_DS_BAR ">"
#define GRAM_DS_CALL_END "<" GRAM_DS_BAR "tool" GRAM_DS_SP "call" GRAM_DS_SP "end" GRAM_DS_BAR ">"
#define GRAM_DS_SEP "<" GRAM_DS_BAR "tool" GRAM_DS_SP "sep" GRAM_DS_BAR ">"
#define GRAM_KIMI_SECTION "<|tool_calls_section_begin|>"
#define GRAM_KIMI_SECTION_END "<|tool_calls_section_end|>"
#define GRAM_KIMI_CALL "<|tool_call_begin|>"
#define GRAM_KIMI_ARGS "<|tool_call_argument_begin|>"
#define GRAM_KIMI_CALL_END "<|tool_call_end|>"

/* How a tool-call parser reads the text of a parameter in the XML-like
 * formats (qwen3_coder, glm45), from the parameter's schema, as vLLM's
 * parsers do (gram_toolparse.c); the forced-call grammar writes each
 * parameter so that it reads back valid. */
typedef enum gram_xml_kind {
    GRAM_XML_STRING = 0, /* the text itself */
    GRAM_XML_INT,        /* Python's int(text) */
    GRAM_XML_NUMBER,     /* float(text), a whole number as an integer */
    GRAM_XML_BOOL,       /* text.lower() == "true" */
    GRAM_XML_JSON,       /* json.loads(text), else ast.literal_eval(text) */
    GRAM_XML_LITERAL,    /* ast.literal_eval(text) */
} gram_xml_kind;
/* prop: the parameter's schema (NULL: not described: a string). *allows_null:
 * "null" / "None" read as null even for a string (qwen3_coder: a "null" type
 * or member of anyOf). *str_branch: the schema a string is checked against
 * (qwen3_coder: the first non-null member of anyOf, else prop). */
gram_xml_kind gram_xml_value_kind(gram_tool_format fmt, struct json_t *prop, bool *allows_null,
                                  struct json_t **str_branch);

/* ---------------------------------------------------------------------------
 * Python's reading of values (gram_pyvalue.c): what vLLM's tool parsers do
 * with a parameter's text, each writing the JSON text Python's
 * json.dumps(value, ensure_ascii=False) writes
 * ------------------------------------------------------------------------- */

/* A growable text; on out of memory it keeps oom and drops appends. */
typedef struct gram_text {
    char *p; /* NUL-terminated when n > 0 */
    size_t n, cap;
    bool oom;
} gram_text;
bool gram_text_put(gram_text *t, const char *s, size_t n);
bool gram_text_byte(gram_text *t, char c);
void gram_text_free(gram_text *t);

/* Each appends to out and returns 0, or -1 (out unchanged) when s is not
 * such a value; nesting deeper than 64 is refused. */
int gram_py_literal(const char *s, size_t n, gram_text *out); /* ast.literal_eval(s) */
int gram_py_json(const char *s, size_t n, gram_text *out);    /* json.loads(s) */
int gram_py_int(const char *s, size_t n, gram_text *out);     /* int(s) */
/* float(s); a whole number written as an integer (vLLM's rule for
 * "number" parameters); infinities and NaN refused. */
int gram_py_number(const char *s, size_t n, gram_text *out);
/* A string's JSON text (quotes included) as json.dumps writes it. */
void gram_py_json_string(gram_text *out, const char *s, size_t n);

/* ---------------------------------------------------------------------------
 * The work budget of one compilation (gram_budget.c; grammar.h: gram_limits)
 * ------------------------------------------------------------------------- */

enum {
    GRAM_BUDGET_OK = 0,
    GRAM_BUDGET_WORK,      /* max_work steps spent */
    GRAM_BUDGET_STATES,    /* max_states automaton states */
    GRAM_BUDGET_TIME,      /* max_seconds passed */
    GRAM_BUDGET_CANCELLED, /* the cancelled hook said so */
};

typedef struct gram_budget {
    int64_t used, max_work;
    int64_t next_poll;     /* `used` at which the clock and the hook are read next */
    int32_t max_states;
    double deadline;       /* CLOCK_MONOTONIC seconds; 0: none */
    double max_seconds;
    bool (*cancelled)(void *user);
    void *user;
    int stop;              /* GRAM_BUDGET_*: why the compilation must stop */
    const char *stage;     /* what was being done when it stopped (for the message) */
} gram_budget;

void gram_budget_init(gram_budget *b, const gram_limits *lim);
/* Reads the clock and the hook; false once the budget is exhausted. */
bool gram_budget_poll(gram_budget *b);
/* Spends n steps: false once the budget is exhausted (then b->stop says why). */
static inline bool gram_spend(gram_budget *b, int64_t n) {
    b->used += n;
    return b->stop == GRAM_BUDGET_OK && (b->used < b->next_poll || gram_budget_poll(b));
}
/* The refusal of a grammar the budget stopped: "grammar too complex: ..." */
int gram_budget_fail(const gram_budget *b, pdl_error *err);

/* ---------------------------------------------------------------------------
 * The automaton (gram_compile.c)
 * ------------------------------------------------------------------------- */

typedef struct gram_ref {
    int32_t rule; /* callee */
    int32_t ret;  /* state of the caller once the callee is done */
} gram_ref;

enum {
    GS_FINAL = 1,  /* the rule may end here */
    GS_BYTES = 2,  /* at least one byte transition */
    GS_REFS = 4,   /* at least one call */
    GS_SIMPLE = 8, /* bytes only: not final, no calls (the trie walk's fast path) */
};

typedef struct gram_auto {
    int32_t n_states, n_rules, n_classes;
    int32_t root;                /* rule index */
    uint8_t byte_class[256];
    uint8_t class_byte[256];     /* a representative byte of each class */
    int32_t *trans;              /* [n_states * n_classes] next state, -1: no transition */
    int32_t *wtrans;             /* [n_states * n_classes] (next << 1) | (next is GS_SIMPLE), -1:
                                  * the same table for the trie walk's fast path (one load a byte) */
    uint8_t *flags;              /* [n_states] GS_* */
    int32_t *ref_off;            /* [n_states + 1] calls of state s: refs[ref_off[s] .. ref_off[s+1]) */
    gram_ref *refs;
    int32_t *state_rule;         /* [n_states] */
    int32_t *rule_start;         /* [n_rules] */
    char **rule_name;            /* [n_rules] */
    uint8_t (*follow)[32];       /* [n_rules] bytes that may follow a completed rule */
    int32_t *dist;               /* [n_states] fewest bytes to the rule's end (calls included) */
    uint8_t *rule_nullable;      /* [n_rules] the rule can match the empty string */
} gram_auto;

/* Stops with an error when budget (which it charges) runs out. */
int gram_auto_build(gram_auto *a, const gram_ir *ir, gram_budget *budget, pdl_error *err);
/* cls[s]: the class of s among the states that behave alike on every string
 * of up to depth bytes (calls included): such states sort every token of up
 * to depth bytes the same way, so they share one classification. */
int gram_auto_walk_classes(const gram_auto *a, int depth, int32_t *cls, int32_t *n_cls, gram_budget *budget,
                           pdl_error *err);
void gram_auto_free(gram_auto *a);

/* ---------------------------------------------------------------------------
 * The vocabulary and its trie (gram_vocab.c)
 * ------------------------------------------------------------------------- */

/*
 * Tokens that may appear inside grammar text, sorted by their bytes; the trie
 * is stored in preorder: node i's subtree is nodes i .. nodes[i].end - 1,
 * the tokens of that subtree are order[nodes[i].tok .. nodes[nodes[i].end].tok),
 * and the first nodes[i].nend of them end exactly at node i. Node 0 is the
 * root (the empty string); node n_nodes is a sentinel (tok = n_tokens).
 */
typedef struct gram_trie_node {
    int32_t end;      /* preorder index just after the subtree */
    int32_t tok;      /* index into order of the subtree's first token */
    uint16_t depth;   /* bytes from the root */
    uint16_t nend;    /* tokens ending exactly here */
    uint8_t byte;     /* the byte on the edge into the node */
    uint8_t pad[3];
} gram_trie_node;

struct pdl_grammar_vocab { /* gram_vocab */
    int32_t n_vocab;
    int32_t n_words;             /* uint64 words of a mask */
    char *bytes;                 /* pool of every token's bytes */
    uint32_t *off, *len;         /* [n_vocab] */
    uint8_t *kind;               /* [n_vocab] GRAM_TOKEN_* below */
    int32_t *end_ids;            /* [n_end] tokens that end generation */
    int32_t n_end;
    int32_t n_tokens;            /* tokens in the trie */
    int32_t *order;              /* [n_tokens] token ids in trie order */
    int32_t n_nodes;
    gram_trie_node *nodes;       /* [n_nodes + 1] */
    int32_t max_depth;
    /* Tokens of at most short_max bytes are classified per walk class (states
     * alike over that many bytes share one trie walk); the few longer ones
     * per state, by a walk over their list. short_max is the smallest length
     * (>= 16) that leaves at most GRAM_LONG_TOKENS longer tokens. */
    int32_t short_max;
    int32_t n_long;
    int32_t *long_ids;           /* [n_long] in trie order */
};

#define GRAM_LONG_TOKENS 512

enum {
    GRAM_TOKEN_TEXT = 0,    /* in the trie */
    GRAM_TOKEN_NONE = 1,    /* never allowed (no bytes) */
    GRAM_TOKEN_SPECIAL = 2, /* a control token: only as one of a grammar's specials */
};

/* ---------------------------------------------------------------------------
 * Parser states (gram_match.c)
 * ------------------------------------------------------------------------- */

#define GRAM_NIL (-1)    /* below the root rule's frame: nothing */
#define GRAM_BOTTOM (-2) /* below a cache walk's first frame: unknown */

/* Return frames, hash-consed: equal stacks have equal ids. */
typedef struct gram_pool {
    int32_t *state, *parent, *next; /* [cap] */
    int32_t *bucket;                /* [n_buckets] chains through next, -1 ends */
    uint32_t n_buckets;
    int32_t n, cap;
} gram_pool;

/* One stack of the set: the top state and the frames below it. */
typedef struct gram_elem {
    int32_t state;
    int32_t node; /* GRAM_NIL, GRAM_BOTTOM or a pool id */
} gram_elem;

typedef struct gram_elems {
    gram_elem *e;
    int32_t n, cap;
} gram_elems;

/* Bounds on a matcher's work at run time, where a grammar the compiler
 * accepted may still be ambiguous enough for its set of stacks to double
 * with every byte (root ::= a "b"; a ::= "x" a | "x" a a | ""): a step's
 * closure may visit at most GRAM_MAX_STACKS (state, stack) pairs, one
 * call of the matcher (a token accepted, a mask filled) at most
 * GRAM_STEP_FUEL over all its steps, and one state's token classification
 * (a walk over the vocabulary's trie, cached) at most GRAM_WALK_FUEL. A
 * deterministic grammar (JSON, a schema, a tool call) visits a few pairs a
 * step and, for a 150k vocabulary, some 10^5 per classification. Beyond
 * them the call fails and the request ends with the reason. Frames in a
 * matcher's pool are bounded too (they are kept for rollback). */
#define GRAM_MAX_STACKS 4096
#define GRAM_STEP_FUEL ((int64_t)1000000)
#define GRAM_WALK_FUEL ((int64_t)8000000)
#define GRAM_MAX_FRAMES (1 << 22)
#define GRAM_ERROR_TOO_COMPLEX                                                                                   \
    "the grammar is too ambiguous to follow here (its parser would track more than the bound of stacks or "    \
    "work per token)"

/* Scratch for advancing sets: the closure's worklist and seen-set, and the
 * result of the last step. */
typedef struct gram_stepper {
    const gram_auto *a;
    gram_pool *pool;
    gram_elems res;       /* the set a step produced */
    gram_elems work;
    uint64_t *seen_key;   /* [seen_cap] */
    uint32_t *seen_stamp; /* [seen_cap] */
    uint32_t seen_cap, seen_used, stamp;
    int64_t fuel;         /* (state, stack) pairs the steps may still visit (gram_step_fuel) */
    bool oom;             /* the last step failed: out of memory or out of bounds (then too_complex) */
    bool too_complex;     /* a bound above was reached (kept until gram_step_fuel) */
} gram_stepper;

void gram_pool_init(gram_pool *p);
void gram_pool_free(gram_pool *p);
int32_t gram_pool_intern(gram_pool *p, int32_t state, int32_t parent); /* -1: out of memory */
void gram_pool_truncate(gram_pool *p, int32_t n);

void gram_stepper_init(gram_stepper *s, const gram_auto *a, gram_pool *pool);
/* Grants the steps that follow `fuel` pair visits (and clears too_complex). */
void gram_step_fuel(gram_stepper *s, int64_t fuel);
void gram_stepper_free(gram_stepper *s);
/* Starts a fresh result (empties res and the seen-set). */
void gram_step_begin(gram_stepper *s);
/* Adds to res the closure of (state, node): every stack reachable without
 * consuming a byte whose top can read a byte, or that is complete at the
 * root. *can_end: a path completed the frame above GRAM_BOTTOM. */
void gram_step_close(gram_stepper *s, int32_t state, int32_t node, bool *can_end);
/* res = closure of every stack of in[0..n) after byte b (in must not point
 * into res). */
void gram_step_byte(gram_stepper *s, const gram_elem *in, int32_t n, uint8_t b, bool *can_end);
bool gram_elems_reserve(gram_elems *v, int32_t n);
void gram_elems_free(gram_elems *v);

/* ---------------------------------------------------------------------------
 * Compiled grammar and the token classification cache (gram_mask.c)
 * ------------------------------------------------------------------------- */

/* What the tokens do from one DFA state, whatever lies below on the stack. */
typedef struct gram_class {
    int32_t n_acc;
    int32_t *acc;         /* [n_acc] accepted ids, or NULL when acc_bits holds them */
    uint64_t *acc_bits;   /* [n_words] */
    int32_t n_unc;
    int32_t *unc;         /* [n_unc] uncertain ids in trie order */
} gram_class;

typedef struct gram_special {
    int32_t id;
    char *text;
    size_t len;
} gram_special;

/* Per-depth parser sets of a walk over token bytes. */
typedef struct gram_levels {
    gram_elems e;         /* level d is e.e[lo[d] .. lo[d] + n[d]) */
    int32_t *lo, *n;      /* [cap] */
    uint8_t *flags;       /* [cap] what the classification walk notes at each depth */
    int32_t cap;
} gram_levels;

struct pdl_grammar { /* gram_grammar */
    atomic_int refs;
    const gram_vocab *vocab;
    gram_auto a;
    gram_special *specials;          /* [n_specials] control tokens usable as text */
    int32_t n_specials;
    int32_t *walk_class;             /* [a.n_states] states alike over the vocabulary's short tokens */
    int32_t n_walk_classes;
    _Atomic(gram_class *) *cls;      /* [n_walk_classes] short tokens; NULL until first needed */
    _Atomic(gram_class *) *long_cls; /* [a.n_states] long tokens; NULL until first needed */
    pthread_mutex_t mu;              /* serializes cache fills */
    gram_pool walk_pool;             /* scratch of cache walks (under mu) */
    gram_stepper walk_step;
    gram_elems walk_buf;
    gram_levels walk_lv;
    uint64_t *walk_bits;             /* [n_words] */
    int32_t *walk_unc;
    int32_t walk_unc_cap;
    int64_t compile_work;            /* statistics: the budget's steps spent compiling */
    atomic_bool walk_too_complex;    /* a classification ran out of GRAM_WALK_FUEL: the grammar cannot
                                        go on from that state (kept: a retry would cost as much) */
    atomic_long n_class_walks;
    atomic_long class_walk_ns;
};

/* A recently computed mask, keyed by the parser state it was computed for
 * (elements sorted; the stack below a state without uncertain tokens does
 * not change its mask and is left out of the key). */
#define GRAM_MASK_CACHE 8
typedef struct gram_mask_entry {
    uint64_t hash, tick;
    gram_elem *key;
    int32_t n_key, cap_key;
    uint64_t *bits;       /* [n_words] */
} gram_mask_entry;


struct gram_matcher {
    gram_grammar *g;
    gram_pool pool;
    gram_stepper step;
    gram_elems hist;      /* every state of the history, concatenated */
    int32_t *hoff;        /* [n_hist + 1] state k is hist.e[hoff[k] .. hoff[k+1]) */
    uint8_t *hended;      /* [n_hist] an end token was accepted */
    int32_t n_hist, cap_hist;
    int32_t init_pool_n;  /* pool nodes of the initial state */
    gram_elems tmp;       /* scratch for accepting */
    gram_levels lv;
    gram_elems keybuf;
    gram_mask_entry cache[GRAM_MASK_CACHE];
    uint64_t tick;
    const char *error;    /* why the last call failed (gram_matcher_error), or NULL */
    long mask_hits, mask_misses;
};

bool gram_levels_reserve(gram_levels *l, int32_t depth);
void gram_levels_free(gram_levels *l);
/* The current state's elements. */
const gram_elem *gram_matcher_top(const gram_matcher *m, int32_t *n);
/* Whether the elements accept bytes[0..len) (pool nodes made on the way are
 * dropped again). */
bool gram_elems_accept(gram_matcher *m, const gram_elem *e, int32_t n, const char *bytes, size_t len);
void gram_mask_cache_clear(gram_matcher *m);
void gram_mask_cache_free(gram_matcher *m);

/* The classifications that apply to state s, computed on first use: short
 * tokens (shared by s's walk class) and long tokens (s's own). NULL: out of
 * memory. */
const gram_class *gram_class_short(gram_grammar *g, int32_t s);
const gram_class *gram_class_long(gram_grammar *g, int32_t s);
void gram_class_free(gram_class *c);

#endif
