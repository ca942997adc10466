/*
 * template.c - tmpl_parse and tmpl_free: source text to a reusable template,
 * and the error path shared by the lexer and the parser.
 */
#include <stdio.h>
#include <stdlib.h>

#include "template/tmpl_internal.h"

void parse_fail(tparse_state *ps, int line, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ps->err->message, sizeof ps->err->message, fmt, ap);
    va_end(ap);
    ps->err->line = line;
    longjmp(ps->jb, 1);
}

void *parse_alloc(tparse_state *ps, size_t n) {
    void *p = arena_alloc(ps->arena, n);
    if (!p) parse_fail(ps, 0, "out of memory while parsing the template");
    return p;
}

int tmpl_parse(tmpl_template **out, const char *src, size_t len, tmpl_error *err) {
    tmpl_error local;
    if (!err) err = &local;
    err->message[0] = '\0';
    err->line = 0;
    *out = NULL;
    tmpl_template *t = calloc(1, sizeof *t);
    tparse_state *ps = calloc(1, sizeof *ps);
    if (!t || !ps) {
        free(t);
        free(ps);
        snprintf(err->message, sizeof err->message, "out of memory");
        return -1;
    }
    ps->arena = &t->arena;
    ps->err = err;
    if (setjmp(ps->jb)) {
        arena_release(&t->arena);
        free(t);
        free(ps);
        return -1;
    }
    tlexed lx;
    tmpl_lex(ps, src ? src : "", src ? len : 0, &lx);
    t->root = tmpl_parse_tokens(ps, &lx);
    free(ps);
    *out = t;
    return 0;
}

void tmpl_free(tmpl_template *t) {
    if (!t) return;
    arena_release(&t->arena);
    free(t);
}
