/*
 * grammar.c - gram_compile: a request's spec -> intermediate form (through
 * the front end its kind names) -> automaton, plus the compiled grammar's
 * lifetime (reference counts, the token cache, statistics), and the public
 * pdl_grammar_* functions (pagedlm.h), which are these under the library's
 * prefix: pdl_grammar is gram_grammar, pdl_grammar_vocab is gram_vocab.
 *
 * What it is not for: any front end's syntax, matching, masks.
 */
#define _POSIX_C_SOURCE 200809L /* strdup, clock_gettime */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/gram_internal.h"
#include "util/error.h"

/* GRAM_CHOICE: a JSON array of strings, one of which is the whole output. */
static int choice_expr(gram_ir *ir, const char *text, size_t len, int32_t *out, pdl_error *err) {
    json_error_t je;
    json_t *arr = json_loadb(text, len, 0, &je);
    if (!arr) return err_fail(err, "choice: invalid JSON at line %d, column %d: %s", je.line, je.column, je.text);
    int rc = 0;
    if (!json_is_array(arr) || json_array_size(arr) == 0) {
        rc = err_fail(err, "choice: expected a non-empty JSON array of strings");
    } else {
        size_t n = json_array_size(arr);
        int32_t *kids = malloc(n * sizeof *kids);
        if (!kids) {
            rc = err_fail(err, "choice: out of memory");
        } else {
            for (size_t i = 0; i < n && rc == 0; i++) {
                json_t *s = json_array_get(arr, i);
                if (!json_is_string(s))
                    rc = err_fail(err, "choice: element %zu is not a string", i);
                else
                    kids[i] = gx_literal(ir, json_string_value(s), json_string_length(s));
            }
            if (rc == 0) *out = gx_alt(ir, kids, (int)n);
            free(kids);
        }
    }
    json_decref(arr);
    return rc;
}

static int build_constraint(gram_ir *ir, const gram_spec *spec, pdl_error *err);

/* gpt-oss's harmony: the constraint (rule ir->root) applies to the answer,
 * after an optional analysis message of free text, as vLLM applies a
 * grammar after the reasoning; a call is a commentary message of its own
 * (gram_tools.c writes its header), other answers the final channel's. */
static int harmony_envelope(gram_ir *ir, const gram_spec *spec, pdl_error *err) {
    /* free text without "<|": a marker can only end it (else the text could
     * take in the answer and go on) */
    int32_t not_lt = gx_altv(ir, gx_cp_range(ir, 1, '<' - 1), gx_cp_range(ir, '<' + 1, 0x10FFFF), GX_END);
    int32_t after_lt = gx_altv(ir, gx_cp_range(ir, 1, '<' - 1), gx_cp_range(ir, '<' + 1, '|' - 1),
                               gx_cp_range(ir, '|' + 1, 0x10FFFF), GX_END);
    int32_t text = gx_star(ir, gx_altv(ir, not_lt, gx_seqv(ir, gx_repeat(ir, gx_str(ir, "<"), 1, GX_INF), after_lt, GX_END),
                                       GX_END));
    ir->marks = gram_tool_format_markers(GRAM_TOOLS_OPENAI); /* sampled as their control tokens */
    int32_t analysis = gx_opt(ir, gx_seqv(ir, gx_fmt(ir, "<|channel|>analysis<|message|>"), text,
                                          gx_fmt(ir, "<|end|><|start|>assistant"), GX_END));
    int32_t head = spec->kind == GRAM_TOOL_CALL ? gx_empty(ir) : gx_fmt(ir, "<|channel|>final<|message|>");
    int32_t expr = gx_seqv(ir, analysis, head, gx_ref(ir, ir->root), GX_END);
    if (ir->oom || expr < 0) return err_fail(err, "grammar: out of memory");
    ir->root = gram_ir_rule_def(ir, "$harmony", 0, expr);
    return ir->root < 0 ? err_fail(err, "grammar: out of memory") : 0;
}

static int build_ir(gram_ir *ir, const gram_spec *spec, pdl_error *err) {
    if (build_constraint(ir, spec, err)) return -1;
    return spec->harmony ? harmony_envelope(ir, spec, err) : 0;
}

static int build_constraint(gram_ir *ir, const gram_spec *spec, pdl_error *err) {
    const char *text = spec->text ? spec->text : "";
    size_t len = spec->len ? spec->len : strlen(text);
    int32_t expr = -1;
    gram_json_rules j;
    switch (spec->kind) {
    case GRAM_GBNF: return gram_gbnf_parse(ir, text, len, err);
    case GRAM_JSON_OBJECT:
    case GRAM_JSON_VALUE:
        if (gram_json_rules_init(ir, &j) != 0) break;
        expr = gx_ref(ir, spec->kind == GRAM_JSON_OBJECT ? j.object : j.value);
        break;
    case GRAM_JSON_SCHEMA:
        if (gram_json_rules_init(ir, &j) != 0) break;
        if (gram_schema_compile(ir, &j, text, len, "schema", &expr, err) != 0) return -1;
        break;
    case GRAM_REGEX:
        if (gram_regex_parse(ir, text, len, GRAM_RE_PLAIN, &expr, err) != 0) return -1;
        break;
    case GRAM_CHOICE:
        if (choice_expr(ir, text, len, &expr, err) != 0) return -1;
        break;
    case GRAM_TOOL_CALL:
        if (gram_tools_grammar(ir, spec, &expr, err) != 0) return -1;
        break;
    default: return err_fail(err, "grammar: unknown kind %d", (int)spec->kind);
    }
    if (ir->oom || expr < 0) return err_fail(err, "grammar: out of memory");
    ir->root = gram_ir_rule_def(ir, "root", 0, expr);
    return ir->root < 0 ? err_fail(err, "grammar: out of memory") : 0;
}

/* Each GX_SPECIAL node becomes the bytes that stand for its marker: where
 * the vocabulary holds the marker as a control token, 0xFF and the index of
 * its g->specials entry + 1, which that token's acceptance feeds (no text
 * writes them: valid UTF-8 has no 0xFF, and the vocabulary keeps tokens with
 * one out of grammar text); else the marker's own text. So a control token
 * is allowed exactly where the grammar writes its marker, never where its
 * text merely fits (inside a JSON string, in free text). */
static int resolve_specials(gram_ir *ir, gram_grammar *g, const gram_vocab *v) {
    g->specials = calloc((size_t)(ir->n_specials ? ir->n_specials : 1), sizeof *g->specials);
    int32_t *slot = malloc((size_t)(ir->n_specials ? ir->n_specials : 1) * sizeof *slot); /* [marker]: entry or -1 */
    if (!g->specials || !slot) {
        free(slot);
        return -1;
    }
    for (int32_t k = 0; k < ir->n_specials; k++) {
        slot[k] = -1;
        size_t l = strlen(ir->specials[k]);
        for (int32_t id = 0; id < v->n_vocab && g->n_specials < 255; id++) {
            if (v->kind[id] != GRAM_TOKEN_SPECIAL || v->len[id] != l || memcmp(v->bytes + v->off[id], ir->specials[k], l))
                continue;
            gram_special *sp = &g->specials[g->n_specials];
            sp->text = malloc(2);
            if (!sp->text) {
                free(slot);
                return -1;
            }
            sp->text[0] = (char)0xFF, sp->text[1] = (char)(g->n_specials + 1);
            sp->len = 2;
            sp->id = id;
            slot[k] = g->n_specials++;
            break;
        }
    }
    for (int32_t i = 0, n = ir->n_nodes; i < n; i++) {
        if (ir->nodes[i].kind != GX_SPECIAL) continue;
        int32_t k = ir->nodes[i].a;
        int32_t r = slot[k] >= 0 ? gx_literal(ir, g->specials[slot[k]].text, 2) : gx_str(ir, ir->specials[k]);
        if (r < 0) break;
        ir->nodes[i] = ir->nodes[r];
    }
    free(slot);
    return ir->oom ? -1 : 0;
}

int gram_compile(gram_grammar **out, const gram_vocab *v, const gram_spec *spec, pdl_error *err) {
    return gram_compile_limited(out, v, spec, NULL, err);
}

int gram_compile_limited(gram_grammar **out, const gram_vocab *v, const gram_spec *spec, const gram_limits *lim,
                         pdl_error *err) {
    *out = NULL;
    gram_budget budget;
    gram_budget_init(&budget, lim);
    gram_ir ir;
    gram_ir_init(&ir);
    if (build_ir(&ir, spec, err) != 0) {
        gram_ir_free(&ir);
        return -1;
    }
    if (ir.oom) {
        gram_ir_free(&ir);
        return err_fail(err, "grammar: out of memory");
    }
    gram_grammar *g = calloc(1, sizeof *g);
    if (!g) {
        gram_ir_free(&ir);
        return err_fail(err, "grammar: out of memory");
    }
    atomic_init(&g->refs, 1);
    atomic_init(&g->walk_too_complex, false);
    g->vocab = v;
    pthread_mutex_init(&g->mu, NULL);
    bool oom = resolve_specials(&ir, g, v) != 0;
    if (oom || gram_auto_build(&g->a, &ir, &budget, err) != 0) {
        gram_ir_free(&ir);
        for (int32_t i = 0; i < g->n_specials; i++) free(g->specials[i].text);
        free(g->specials);
        pthread_mutex_destroy(&g->mu);
        free(g);
        return oom ? err_fail(err, "grammar: out of memory") : -1;
    }
    gram_ir_free(&ir);
    gram_pool_init(&g->walk_pool);
    gram_stepper_init(&g->walk_step, &g->a, &g->walk_pool);
    /* states alike over the short tokens' bytes share their classification
     * (two more rounds: the end flag and the closure after the last byte) */
    g->walk_class = malloc((size_t)g->a.n_states * sizeof *g->walk_class);
    if (!oom && g->walk_class &&
        gram_auto_walk_classes(&g->a, v->short_max + 2, g->walk_class, &g->n_walk_classes, &budget, err) != 0) {
        gram_grammar_free(g);
        return -1;
    }
    g->cls = calloc((size_t)(g->n_walk_classes ? g->n_walk_classes : 1), sizeof *g->cls);
    g->long_cls = calloc((size_t)g->a.n_states, sizeof *g->long_cls);
    g->walk_bits = malloc((size_t)v->n_words * sizeof *g->walk_bits);
    if (oom || !g->walk_class || !g->cls || !g->long_cls || !g->walk_bits) {
        gram_grammar_free(g);
        return err_fail(err, "grammar: out of memory");
    }
    g->compile_work = budget.used;
    *out = g;
    return 0;
}

gram_grammar *gram_grammar_ref(gram_grammar *g) {
    atomic_fetch_add(&g->refs, 1);
    return g;
}

void gram_grammar_free(gram_grammar *g) {
    if (!g || atomic_fetch_sub(&g->refs, 1) != 1) return;
    for (int32_t c = 0; g->cls && c < g->n_walk_classes; c++) gram_class_free(atomic_load(&g->cls[c]));
    for (int32_t s = 0; g->long_cls && s < g->a.n_states; s++) gram_class_free(atomic_load(&g->long_cls[s]));
    free(g->cls);
    free(g->long_cls);
    free(g->walk_class);
    gram_levels_free(&g->walk_lv);
    for (int32_t i = 0; i < g->n_specials; i++) free(g->specials[i].text);
    free(g->specials);
    gram_stepper_free(&g->walk_step);
    gram_pool_free(&g->walk_pool);
    gram_elems_free(&g->walk_buf);
    free(g->walk_bits);
    free(g->walk_unc);
    gram_auto_free(&g->a);
    pthread_mutex_destroy(&g->mu);
    free(g);
}

const gram_vocab *gram_grammar_vocab(const gram_grammar *g) { return g->vocab; }

void gram_grammar_stats(const gram_grammar *g, gram_stats *st) {
    st->n_states = g->a.n_states;
    st->n_walk_classes = g->n_walk_classes;
    st->n_rules = g->a.n_rules;
    st->n_classes = g->a.n_classes;
    st->compile_work = g->compile_work;
    st->class_walks = atomic_load(&((gram_grammar *)g)->n_class_walks);
    st->class_walk_ms = (double)atomic_load(&((gram_grammar *)g)->class_walk_ns) / 1e6;
}

/* ---------------------------------------------------------------------------
 * The public API (pagedlm.h)
 * ------------------------------------------------------------------------- */

/* pdl_grammar_kind -> gram_kind: the public values are numbered apart from
 * the internal ones, so that either may grow without breaking the other. */
static int public_kind(pdl_grammar_kind kind, gram_kind *out) {
    switch (kind) {
    case PDL_GRAMMAR_JSON_SCHEMA: *out = GRAM_JSON_SCHEMA; return 0;
    case PDL_GRAMMAR_JSON_OBJECT: *out = GRAM_JSON_OBJECT; return 0;
    case PDL_GRAMMAR_JSON_VALUE: *out = GRAM_JSON_VALUE; return 0;
    case PDL_GRAMMAR_REGEX: *out = GRAM_REGEX; return 0;
    case PDL_GRAMMAR_CHOICE: *out = GRAM_CHOICE; return 0;
    case PDL_GRAMMAR_GBNF: *out = GRAM_GBNF; return 0;
    case PDL_GRAMMAR_TOOL_CALL: *out = GRAM_TOOL_CALL; return 0;
    }
    return -1;
}

int pdl_grammar_compile(pdl_grammar **out, const pdl_grammar_vocab *vocab, const pdl_grammar_spec *spec,
                        const pdl_grammar_limits *limits, pdl_error *err) {
    if (!out) return err_fail(err, "pdl_grammar_compile: out is NULL");
    *out = NULL;
    if (!vocab || !spec) return err_fail(err, "pdl_grammar_compile: %s is NULL", vocab ? "spec" : "vocab");
    gram_spec s = {.text = spec->text, .len = spec->len, .tool_name = spec->tool_name, .parallel = spec->parallel};
    if (public_kind(spec->kind, &s.kind) != 0)
        return err_fail(err, "grammar: unknown kind %d (pdl_grammar_kind)", (int)spec->kind);
    if (s.kind == GRAM_TOOL_CALL) {
        if (!spec->tool_format) return err_fail(err, "grammar: a tool call needs tool_format (e.g. \"hermes\")");
        if (gram_tool_format_parse(spec->tool_format, &s.tool_format) != 0)
            return err_fail(err, "grammar: unknown tool_format '%s' (hermes, llama3_json, mistral, qwen3_coder, "
                            "pythonic, deepseek_v3, glm45, kimi_k2)", spec->tool_format);
    }
    bool needs_text = s.kind != GRAM_JSON_OBJECT && s.kind != GRAM_JSON_VALUE;
    if (needs_text && !spec->text) return err_fail(err, "grammar: text is NULL (this kind needs it)");
    return gram_compile_limited(out, vocab, &s, limits, err);
}

pdl_grammar *pdl_grammar_ref(pdl_grammar *g) { return gram_grammar_ref(g); }

void pdl_grammar_free(pdl_grammar *g) { gram_grammar_free(g); }

void pdl_grammar_vocab_free(pdl_grammar_vocab *vocab) { gram_vocab_free(vocab); }
