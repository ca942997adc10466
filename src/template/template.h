/*
 * template.h - a Jinja2-subset interpreter for chat templates.
 *
 * What it is for: rendering the chat templates that ship with Hugging Face
 * models exactly as transformers' apply_chat_template renders them: Jinja2
 * 3.1 in an immutable sandbox with trim_blocks, lstrip_blocks, the loop
 * controls extension, the `generation` tag, a `tojson` filter that calls
 * json.dumps(ensure_ascii=False, ...), and the globals raise_exception and
 * strftime_now. Values follow Python: printing a list gives "['a', 'b']",
 * floats print as Python's repr, dicts keep insertion order, undefined values
 * behave like Jinja2's default Undefined.
 *
 * What it is not for: finding a template in a model folder or building the
 * chat context (src/template/chat_template.c), HTML autoescaping, template
 * inheritance (extends/include/import).
 *
 * Safety: a template is untrusted input. Parsing and rendering never crash on
 * any input; rendering is bounded in nesting depth, steps, memory and output
 * size, and every failure comes back as a message with the template line.
 */
#ifndef PDL_TEMPLATE_TEMPLATE_H
#define PDL_TEMPLATE_TEMPLATE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pagedlm.h"

/* A failure: the message as Jinja2 / Python would word it (for
 * raise_exception exactly the template's text) and the template line (1-based,
 * 0 when no line applies). */
typedef struct tmpl_error {
    char message[PDL_ERROR_MAX];
    int line;
} tmpl_error;

/* Limits and the clock. Zero fields take the defaults shown. */
typedef struct tmpl_options {
    size_t max_output;    /* bytes of rendered text; 0 = 64 MiB */
    size_t max_memory;    /* bytes of values alive during one render; 0 = 1 GiB */
    int max_depth;        /* nested evaluation (macro recursion, deep expressions); 0 = 1000 */
    uint64_t max_steps;   /* statements + loop iterations + calls; 0 = 100 million */
    bool fixed_now;       /* strftime_now() formats `now` instead of the clock */
    int64_t now;          /* seconds since the epoch, formatted in local time */
} tmpl_options;

typedef struct tmpl_template tmpl_template;

/* Parses template source (len bytes, need not be NUL-terminated). Syntax
 * errors carry Jinja2's wording and the line. */
int tmpl_parse(tmpl_template **out, const char *src, size_t len, tmpl_error *err);
void tmpl_free(tmpl_template *t);

/* Renders with the variables of a JSON object (context may be NULL: no
 * variables). *out is malloc'ed, NUL-terminated, *out_len bytes long (the
 * text may itself contain NUL bytes). opts may be NULL. A template may be
 * rendered by several threads at once. */
int tmpl_render(const tmpl_template *t, const json_t *context, const tmpl_options *opts, char **out,
                size_t *out_len, tmpl_error *err);

#endif
