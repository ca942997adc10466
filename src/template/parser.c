/*
 * parser.c - tokens to the syntax tree, following Jinja2's grammar and its
 * error messages.
 *
 * Precedence, loosest first: `x if c else y`, or, and, not, comparisons
 * (==, !=, <, <=, >, >=, in, not in; chained), + and -, ~, * / // %, ** (left
 * associative, as in Jinja2), unary - and +, then postfix: .attr, [key],
 * [a:b:c], calls, | filters and `is` tests. Statements: if/elif/else, for
 * (with `if` filter and else), set (plain, namespace attribute, tuple,
 * block), macro, call, filter, with, print, break/continue and Hugging
 * Face's generation tag. Filter and test names are resolved here; an unknown
 * one fails only when evaluated, as in Jinja2.
 */
#include <string.h>

#include "template/tmpl_internal.h"

#define MAX_NESTING 400

typedef struct parser {
    tparse_state *ps;
    const ttoken *t;
    size_t n, i;
    const char *const *end_stack[MAX_NESTING]; /* NULL-terminated tag lists */
    int n_end;
    const char *tag_stack[MAX_NESTING];
    int n_tags;
    int loop_depth;
    int macro_flags; /* MACRO_* names seen in the macro being parsed */
    int depth;
} parser;

static tnode *parse_expression(parser *P, bool with_condexpr);
static tnode *parse_tuple(parser *P, int mode, const char *extra_end, bool explicit_parens);
static tnode *parse_unary(parser *P, bool with_filter);
static tnode *parse_primary(parser *P);
static tnode *parse_postfix(parser *P, tnode *node);
static tnode *parse_filter(parser *P, tnode *node, bool start_inline);
static tnode *subparse(parser *P, const char *const *end_tokens);

enum { TUPLE_SIMPLIFIED, TUPLE_CONDEXPR, TUPLE_NO_CONDEXPR };

/* ---- tokens ---- */

static const ttoken *cur(parser *P) { return &P->t[P->i]; }
static const ttoken *look(parser *P) { return &P->t[P->i + 1 < P->n ? P->i + 1 : P->i]; }
static const ttoken *next(parser *P) {
    const ttoken *t = &P->t[P->i];
    if (P->i + 1 < P->n) P->i++;
    return t;
}
static bool tok_is(const ttoken *t, tok_type type, const char *s) {
    if (t->type != type) return false;
    return !s || (t->n == strlen(s) && memcmp(t->s, s, t->n) == 0);
}
static bool is_op(parser *P, const char *op) { return tok_is(cur(P), T_OP, op); }
static bool is_name(parser *P, const char *name) { return tok_is(cur(P), T_NAME, name); }
static bool skip_op(parser *P, const char *op) {
    if (!is_op(P, op)) return false;
    next(P);
    return true;
}
static bool skip_name(parser *P, const char *name) {
    if (!is_name(P, name)) return false;
    next(P);
    return true;
}

/* Jinja2's describe_token. */
static void describe(const ttoken *t, char *buf, size_t cap) {
    switch (t->type) {
    case T_NAME:
    case T_OP: snprintf(buf, cap, "%.*s", (int)(t->n > 100 ? 100 : t->n), t->s); break;
    case T_STRING: snprintf(buf, cap, "string"); break;
    case T_INT: snprintf(buf, cap, "integer"); break;
    case T_FLOAT: snprintf(buf, cap, "float"); break;
    case T_DATA: snprintf(buf, cap, "template data / text"); break;
    case T_VAR_BEGIN: snprintf(buf, cap, "begin of print statement"); break;
    case T_VAR_END: snprintf(buf, cap, "end of print statement"); break;
    case T_BLOCK_BEGIN: snprintf(buf, cap, "begin of statement block"); break;
    case T_BLOCK_END: snprintf(buf, cap, "end of statement block"); break;
    case T_EOF: snprintf(buf, cap, "end of template"); break;
    }
}

TMPL_NORETURN static void fail_expected(parser *P, const char *what) {
    const ttoken *t = cur(P);
    if (t->type == T_EOF) parse_fail(P->ps, t->line, "unexpected end of template, expected '%s'.", what);
    char got[128];
    describe(t, got, sizeof got);
    parse_fail(P->ps, t->line, "expected token '%s', got '%s'", what, got);
}

static void expect_op(parser *P, const char *op) {
    if (!skip_op(P, op)) fail_expected(P, op);
}
static void expect_type(parser *P, tok_type type) {
    if (cur(P)->type == type) {
        next(P);
        return;
    }
    ttoken t = {.type = type};
    char what[64];
    describe(&t, what, sizeof what);
    fail_expected(P, what);
}
static const ttoken *expect_name(parser *P) {
    if (cur(P)->type != T_NAME) fail_expected(P, "name");
    return next(P);
}

/* ---- nodes ---- */

static tnode *new_node(parser *P, int kind, int line) {
    tnode *n = parse_alloc(P->ps, sizeof *n);
    n->kind = (uint8_t)kind;
    n->line = line;
    n->fn = -1;
    return n;
}

typedef struct nodelist {
    tnode **items;
    int n, cap;
} nodelist;

static void list_push(parser *P, nodelist *l, tnode *x) {
    if (l->n == l->cap) {
        int cap = l->cap ? l->cap * 2 : 4;
        tnode **items = parse_alloc(P->ps, (size_t)cap * sizeof *items);
        if (l->n) memcpy(items, l->items, (size_t)l->n * sizeof *items);
        l->items = items;
        l->cap = cap;
    }
    l->items[l->n++] = x;
}

static void set_items(tnode *node, const nodelist *l) {
    node->items = l->items;
    node->n_items = l->n;
}

static void enter(parser *P) {
    if (++P->depth > MAX_NESTING) parse_fail(P->ps, cur(P)->line, "template nested too deeply (more than %d levels)", MAX_NESTING);
}
static void leave(parser *P) { P->depth--; }

/* ---- expressions ---- */

static tnode *parse_call_args(parser *P, tnode *node) {
    int line = cur(P)->line;
    expect_op(P, "(");
    nodelist args = {0};
    bool require_comma = false, have_kw = false, have_star = false, have_starkw = false;
    while (!is_op(P, ")")) {
        if (require_comma) {
            expect_op(P, ",");
            if (is_op(P, ")")) break;
        }
        if (is_op(P, "*")) {
            if (have_star || have_starkw) parse_fail(P->ps, line, "invalid syntax for function call expression");
            next(P);
            tnode *s = new_node(P, N_STARARGS, line);
            s->a = parse_expression(P, true);
            have_star = true;
            list_push(P, &args, s);
        } else if (is_op(P, "**")) {
            if (have_starkw) parse_fail(P->ps, line, "invalid syntax for function call expression");
            next(P);
            tnode *s = new_node(P, N_STARKW, line);
            s->a = parse_expression(P, true);
            have_starkw = true;
            list_push(P, &args, s);
        } else if (cur(P)->type == T_NAME && tok_is(look(P), T_OP, "=")) {
            if (have_starkw) parse_fail(P->ps, line, "invalid syntax for function call expression");
            const ttoken *k = next(P);
            next(P);
            tnode *kw = new_node(P, N_KWARG, k->line);
            kw->s = k->s;
            kw->n = k->n;
            kw->a = parse_expression(P, true);
            have_kw = true;
            list_push(P, &args, kw);
        } else {
            if (have_star || have_starkw || have_kw) parse_fail(P->ps, line, "invalid syntax for function call expression");
            list_push(P, &args, parse_expression(P, true));
        }
        require_comma = true;
    }
    expect_op(P, ")");
    set_items(node, &args);
    return node;
}

static tnode *parse_call(parser *P, tnode *callee) {
    tnode *n = new_node(P, N_CALL, cur(P)->line);
    n->a = callee;
    return parse_call_args(P, n);
}

/* A filter or test name, possibly dotted. */
static void parse_dotted_name(parser *P, tnode *n) {
    const ttoken *t = expect_name(P);
    n->s = t->s;
    n->n = t->n;
    n->line = t->line;
    while (is_op(P, ".")) {
        next(P);
        const ttoken *u = expect_name(P);
        n->n = (size_t)(u->s + u->n - n->s); /* names are contiguous in the source */
    }
}

static tnode *parse_filter(parser *P, tnode *node, bool start_inline) {
    while (is_op(P, "|") || start_inline) {
        if (!start_inline) next(P);
        tnode *f = new_node(P, N_FILTER, cur(P)->line);
        parse_dotted_name(P, f);
        f->a = node;
        f->fn = tmpl_filter_index(f->s, f->n);
        if (is_op(P, "(")) parse_call_args(P, f);
        node = f;
        start_inline = false;
    }
    return node;
}

static tnode *parse_test(parser *P, tnode *node) {
    int line = next(P)->line; /* is */
    bool negated = skip_name(P, "not");
    tnode *t = new_node(P, N_TEST, line);
    parse_dotted_name(P, t);
    t->line = line;
    t->a = node;
    t->fn = tmpl_test_index(t->s, t->n);
    const ttoken *c = cur(P);
    if (is_op(P, "(")) {
        parse_call_args(P, t);
    } else if ((c->type == T_NAME || c->type == T_STRING || c->type == T_INT || c->type == T_FLOAT || is_op(P, "(") ||
                is_op(P, "[") || is_op(P, "{")) &&
               !is_name(P, "else") && !is_name(P, "or") && !is_name(P, "and")) {
        if (is_name(P, "is")) parse_fail(P->ps, c->line, "You cannot chain multiple tests with is");
        tnode *arg = parse_postfix(P, parse_primary(P));
        t->items = parse_alloc(P->ps, sizeof *t->items);
        t->items[0] = arg;
        t->n_items = 1;
    }
    if (negated) {
        tnode *n = new_node(P, N_NOT, line);
        n->a = t;
        return n;
    }
    return t;
}

static tnode *parse_subscribed(parser *P) {
    int line = cur(P)->line;
    tnode *args[3] = {NULL, NULL, NULL};
    if (is_op(P, ":")) {
        next(P);
    } else {
        tnode *node = parse_expression(P, true);
        if (!is_op(P, ":")) return node;
        next(P);
        args[0] = node;
    }
    if (!is_op(P, ":") && !is_op(P, "]") && !is_op(P, ",")) args[1] = parse_expression(P, true);
    if (is_op(P, ":")) {
        next(P);
        if (!is_op(P, "]") && !is_op(P, ",")) args[2] = parse_expression(P, true);
    }
    tnode *s = new_node(P, N_SLICE, line);
    s->b = args[0];
    s->c = args[1];
    s->d = args[2];
    return s;
}

static tnode *parse_subscript(parser *P, tnode *node) {
    const ttoken *t = next(P);
    if (tok_is(t, T_OP, ".")) {
        const ttoken *a = next(P);
        if (a->type == T_NAME) {
            tnode *g = new_node(P, N_GETATTR, t->line);
            g->a = node;
            g->s = a->s;
            g->n = a->n;
            return g;
        }
        if (a->type != T_INT) parse_fail(P->ps, a->line, "expected name or number");
        tnode *g = new_node(P, N_GETITEM, t->line);
        g->a = node;
        g->b = new_node(P, N_CONST, a->line);
        g->b->val = tv_int(a->i);
        return g;
    }
    /* [ ... ] */
    nodelist args = {0};
    while (!is_op(P, "]")) {
        if (args.n) expect_op(P, ",");
        list_push(P, &args, parse_subscribed(P));
    }
    expect_op(P, "]");
    tnode *key;
    if (args.n == 1) {
        key = args.items[0];
    } else {
        key = new_node(P, N_TUPLE, t->line);
        set_items(key, &args);
    }
    if (key->kind == N_SLICE) {
        key->a = node;
        return key;
    }
    tnode *g = new_node(P, N_GETITEM, t->line);
    g->a = node;
    g->b = key;
    return g;
}

static tnode *parse_postfix(parser *P, tnode *node) {
    for (;;) {
        if (is_op(P, ".") || is_op(P, "[")) node = parse_subscript(P, node);
        else if (is_op(P, "(")) node = parse_call(P, node);
        else return node;
    }
}

static tnode *parse_filter_expr(parser *P, tnode *node) {
    for (;;) {
        if (is_op(P, "|")) node = parse_filter(P, node, false);
        else if (is_name(P, "is")) node = parse_test(P, node);
        else if (is_op(P, "(")) node = parse_call(P, node);
        else return node;
    }
}

static tnode *parse_list(parser *P) {
    tnode *n = new_node(P, N_LIST, cur(P)->line);
    expect_op(P, "[");
    nodelist items = {0};
    while (!is_op(P, "]")) {
        if (items.n) expect_op(P, ",");
        if (is_op(P, "]")) break;
        list_push(P, &items, parse_expression(P, true));
    }
    expect_op(P, "]");
    set_items(n, &items);
    return n;
}

static tnode *parse_dict(parser *P) {
    tnode *n = new_node(P, N_DICT, cur(P)->line);
    expect_op(P, "{");
    nodelist items = {0};
    while (!is_op(P, "}")) {
        if (items.n) expect_op(P, ",");
        if (is_op(P, "}")) break;
        tnode *pair = new_node(P, N_PAIR, cur(P)->line);
        pair->a = parse_expression(P, true);
        expect_op(P, ":");
        pair->b = parse_expression(P, true);
        list_push(P, &items, pair);
    }
    expect_op(P, "}");
    set_items(n, &items);
    return n;
}

static bool name_eq(const ttoken *t, const char *s) { return tok_is(t, T_NAME, s); }

static tnode *parse_primary(parser *P) {
    const ttoken *t = cur(P);
    tnode *node;
    enter(P);
    if (t->type == T_NAME) {
        node = new_node(P, N_CONST, t->line);
        if (name_eq(t, "true") || name_eq(t, "True")) {
            node->val = tv_bool(true);
        } else if (name_eq(t, "false") || name_eq(t, "False")) {
            node->val = tv_bool(false);
        } else if (name_eq(t, "none") || name_eq(t, "None")) {
            node->val = tv_none();
        } else {
            node->kind = N_NAME;
            node->s = t->s;
            node->n = t->n;
            if (name_eq(t, "varargs")) P->macro_flags |= MACRO_VARARGS;
            if (name_eq(t, "kwargs")) P->macro_flags |= MACRO_KWARGS;
            if (name_eq(t, "caller")) P->macro_flags |= MACRO_CALLER;
        }
        next(P);
    } else if (t->type == T_STRING) {
        /* adjacent literals concatenate */
        size_t total = 0, j = P->i;
        while (j < P->n && P->t[j].type == T_STRING) total += P->t[j++].n;
        char *buf = parse_alloc(P->ps, total + 1);
        size_t k = 0;
        while (cur(P)->type == T_STRING) {
            memcpy(buf + k, cur(P)->s, cur(P)->n);
            k += cur(P)->n;
            next(P);
        }
        node = new_node(P, N_CONST, t->line);
        node->val = tv_str(buf, k);
    } else if (t->type == T_INT || t->type == T_FLOAT) {
        node = new_node(P, N_CONST, t->line);
        node->val = t->type == T_INT ? tv_int(t->i) : tv_float(t->f);
        next(P);
    } else if (is_op(P, "(")) {
        next(P);
        node = parse_tuple(P, TUPLE_CONDEXPR, NULL, true);
        expect_op(P, ")");
    } else if (is_op(P, "[")) {
        node = parse_list(P);
    } else if (is_op(P, "{")) {
        node = parse_dict(P);
    } else {
        char d[128];
        describe(t, d, sizeof d);
        parse_fail(P->ps, t->line, "unexpected '%s'", d);
    }
    leave(P);
    return node;
}

static tnode *parse_unary(parser *P, bool with_filter) {
    tnode *node;
    enter(P);
    if (is_op(P, "-") || is_op(P, "+")) {
        const ttoken *t = next(P);
        node = new_node(P, t->s[0] == '-' ? N_NEG : N_POS, t->line);
        node->a = parse_unary(P, false);
    } else {
        node = parse_primary(P);
    }
    node = parse_postfix(P, node);
    if (with_filter) node = parse_filter_expr(P, node);
    leave(P);
    return node;
}

static tnode *binop(parser *P, int op, tnode *a, tnode *b, int line) {
    tnode *n = new_node(P, N_BINOP, line);
    n->op = (uint8_t)op;
    n->a = a;
    n->b = b;
    return n;
}

static tnode *parse_pow(parser *P) {
    int line = cur(P)->line;
    tnode *left = parse_unary(P, true);
    while (is_op(P, "**")) {
        next(P);
        left = binop(P, BIN_POW, left, parse_unary(P, true), line);
        line = cur(P)->line;
    }
    return left;
}

static tnode *parse_math2(parser *P) {
    int line = cur(P)->line;
    tnode *left = parse_pow(P);
    for (;;) {
        int op;
        if (is_op(P, "*")) op = BIN_MUL;
        else if (is_op(P, "/")) op = BIN_DIV;
        else if (is_op(P, "//")) op = BIN_FLOORDIV;
        else if (is_op(P, "%")) op = BIN_MOD;
        else return left;
        next(P);
        left = binop(P, op, left, parse_pow(P), line);
        line = cur(P)->line;
    }
}

static tnode *parse_concat(parser *P) {
    int line = cur(P)->line;
    tnode *left = parse_math2(P);
    while (is_op(P, "~")) {
        next(P);
        left = binop(P, BIN_CONCAT, left, parse_math2(P), line);
    }
    return left;
}

static tnode *parse_math1(parser *P) {
    int line = cur(P)->line;
    tnode *left = parse_concat(P);
    while (is_op(P, "+") || is_op(P, "-")) {
        int op = cur(P)->s[0] == '+' ? BIN_ADD : BIN_SUB;
        next(P);
        left = binop(P, op, left, parse_concat(P), line);
        line = cur(P)->line;
    }
    return left;
}

static tnode *parse_compare(parser *P) {
    int line = cur(P)->line;
    tnode *expr = parse_math1(P);
    nodelist ops = {0};
    for (;;) {
        int op;
        static const char *const syms[] = {"==", "!=", "<", "<=", ">", ">="};
        static const int codes[] = {CMP_EQ, CMP_NE, CMP_LT, CMP_LE, CMP_GT, CMP_GE};
        op = -1;
        for (int k = 0; k < 6; k++)
            if (is_op(P, syms[k])) op = codes[k];
        if (op >= 0) {
            next(P);
        } else if (skip_name(P, "in")) {
            op = CMP_IN;
        } else if (is_name(P, "not") && name_eq(look(P), "in")) {
            next(P), next(P);
            op = CMP_NOTIN;
        } else {
            break;
        }
        tnode *o = new_node(P, N_CMPOP, cur(P)->line);
        o->op = (uint8_t)op;
        o->a = parse_math1(P);
        list_push(P, &ops, o);
        line = cur(P)->line;
    }
    if (!ops.n) return expr;
    tnode *c = new_node(P, N_COMPARE, line);
    c->a = expr;
    set_items(c, &ops);
    return c;
}

static tnode *parse_not(parser *P) {
    if (is_name(P, "not")) {
        int line = next(P)->line;
        enter(P);
        tnode *n = new_node(P, N_NOT, line);
        n->a = parse_not(P);
        leave(P);
        return n;
    }
    return parse_compare(P);
}

static tnode *parse_and(parser *P) {
    tnode *left = parse_not(P);
    while (is_name(P, "and")) {
        int line = next(P)->line;
        tnode *n = new_node(P, N_AND, line);
        n->a = left;
        n->b = parse_not(P);
        left = n;
    }
    return left;
}

static tnode *parse_or(parser *P) {
    tnode *left = parse_and(P);
    while (is_name(P, "or")) {
        int line = next(P)->line;
        tnode *n = new_node(P, N_OR, line);
        n->a = left;
        n->b = parse_and(P);
        left = n;
    }
    return left;
}

static tnode *parse_condexpr(parser *P) {
    int line = cur(P)->line;
    tnode *expr1 = parse_or(P);
    while (skip_name(P, "if")) {
        enter(P);
        tnode *n = new_node(P, N_COND, line);
        n->a = expr1;
        n->b = parse_or(P);
        n->c = skip_name(P, "else") ? parse_condexpr(P) : NULL;
        expr1 = n;
        line = cur(P)->line;
        leave(P);
    }
    return expr1;
}

static tnode *parse_expression(parser *P, bool with_condexpr) {
    enter(P);
    tnode *n = with_condexpr ? parse_condexpr(P) : parse_or(P);
    leave(P);
    return n;
}

static bool is_tuple_end(parser *P, const char *extra_end) {
    const ttoken *t = cur(P);
    if (t->type == T_VAR_END || t->type == T_BLOCK_END || is_op(P, ")")) return true;
    return extra_end && name_eq(t, extra_end);
}

static tnode *parse_tuple(parser *P, int mode, const char *extra_end, bool explicit_parens) {
    int line = cur(P)->line;
    nodelist args = {0};
    bool is_tuple = false;
    for (;;) {
        if (args.n) expect_op(P, ",");
        if (is_tuple_end(P, extra_end)) break;
        tnode *x = mode == TUPLE_SIMPLIFIED ? parse_primary(P) : parse_expression(P, mode == TUPLE_CONDEXPR);
        list_push(P, &args, x);
        if (is_op(P, ",")) is_tuple = true;
        else break;
        line = cur(P)->line;
    }
    if (!is_tuple) {
        if (args.n) return args.items[0];
        if (!explicit_parens) {
            char d[128];
            describe(cur(P), d, sizeof d);
            parse_fail(P->ps, cur(P)->line, "Expected an expression, got '%s'", d);
        }
    }
    tnode *t = new_node(P, N_TUPLE, line);
    set_items(t, &args);
    return t;
}

/* ---- statements ---- */

static void check_assignable(parser *P, tnode *t) {
    if (t->kind == N_NAME) return;
    if (t->kind == N_TUPLE) {
        for (int i = 0; i < t->n_items; i++) check_assignable(P, t->items[i]);
        return;
    }
    static const char *const names[] = {[N_CONST] = "const", [N_LIST] = "list", [N_DICT] = "dict",
                                        [N_GETATTR] = "getattr", [N_GETITEM] = "getitem", [N_CALL] = "call"};
    const char *what = t->kind < sizeof names / sizeof *names && names[t->kind] ? names[t->kind] : "expression";
    parse_fail(P->ps, t->line, "can't assign to '%s'", what);
}

static tnode *parse_assign_target(parser *P, bool with_tuple, bool name_only, const char *extra_end, bool with_namespace) {
    tnode *target;
    if (with_namespace && cur(P)->type == T_NAME && tok_is(look(P), T_OP, ".")) {
        const ttoken *ns = next(P);
        next(P);
        const ttoken *attr = expect_name(P);
        target = new_node(P, N_NSREF, ns->line);
        target->a = new_node(P, N_NAME, ns->line);
        target->a->s = ns->s;
        target->a->n = ns->n;
        target->s = attr->s;
        target->n = attr->n;
        return target;
    }
    if (name_only) {
        const ttoken *t = expect_name(P);
        target = new_node(P, N_NAME, t->line);
        target->s = t->s;
        target->n = t->n;
        if (name_eq(t, "true") || name_eq(t, "false") || name_eq(t, "none") || name_eq(t, "True") ||
            name_eq(t, "False") || name_eq(t, "None"))
            parse_fail(P->ps, t->line, "can't assign to 'name'");
        return target;
    }
    target = with_tuple ? parse_tuple(P, TUPLE_SIMPLIFIED, extra_end, false) : parse_primary(P);
    check_assignable(P, target);
    return target;
}

static const char *const END_FOR[] = {"endfor", "else", NULL};
static const char *const END_FOR_ELSE[] = {"endfor", NULL};
static const char *const END_IF[] = {"elif", "else", "endif", NULL};
static const char *const END_IF_ELSE[] = {"endif", NULL};
static const char *const END_SET[] = {"endset", NULL};
static const char *const END_MACRO[] = {"endmacro", NULL};
static const char *const END_CALL[] = {"endcall", NULL};
static const char *const END_FILTER[] = {"endfilter", NULL};
static const char *const END_WITH[] = {"endwith", NULL};
static const char *const END_GENERATION[] = {"endgeneration", NULL};

/* Jinja2's message for an unknown tag (name) or a premature end (NULL). */
TMPL_NORETURN static void fail_unknown_tag(parser *P, const ttoken *name, int line) {
    char msg[PDL_ERROR_MAX];
    size_t k = 0;
#define APPEND(...) k += (size_t)snprintf(msg + k, k < sizeof msg ? sizeof msg - k : 0, __VA_ARGS__)
    if (name) APPEND("Encountered unknown tag '%.*s'.", (int)(name->n > 100 ? 100 : name->n), name->s);
    else APPEND("Unexpected end of template.");
    if (P->n_end) {
        bool expected = false;
        for (int s = 0; s < P->n_end && name; s++)
            for (const char *const *e = P->end_stack[s]; *e; e++)
                if (name_eq(name, *e)) expected = true;
        char looking[256];
        size_t m = 0;
        for (const char *const *e = P->end_stack[P->n_end - 1]; *e && m < sizeof looking; e++)
            m += (size_t)snprintf(looking + m, sizeof looking - m, "%s'%s'", e == P->end_stack[P->n_end - 1] ? "" : " or ", *e);
        if (expected)
            APPEND(" You probably made a nesting mistake. Jinja is expecting this tag, but currently looking for %s.", looking);
        else
            APPEND(" Jinja was looking for the following tags: %s.", looking);
    }
    if (P->n_tags) APPEND(" The innermost block that needs to be closed is '%s'.", P->tag_stack[P->n_tags - 1]);
#undef APPEND
    parse_fail(P->ps, line, "%s", msg);
}

/* `%}`, the body up to one of end_tokens, leaving that name current. */
static tnode *parse_statements(parser *P, const char *const *end_tokens, bool drop_needle) {
    skip_op(P, ":");
    expect_type(P, T_BLOCK_END);
    tnode *body = subparse(P, end_tokens);
    if (cur(P)->type == T_EOF) {
        if (P->n_end < MAX_NESTING) P->end_stack[P->n_end++] = end_tokens;
        fail_unknown_tag(P, NULL, cur(P)->line);
    }
    if (drop_needle) next(P);
    return body;
}

static tnode *parse_for(parser *P) {
    tnode *n = new_node(P, N_FOR, next(P)->line);
    n->a = parse_assign_target(P, true, false, "in", false);
    if (!skip_name(P, "in")) fail_expected(P, "in");
    n->b = parse_tuple(P, TUPLE_NO_CONDEXPR, "recursive", false);
    if (skip_name(P, "if")) n->c = parse_expression(P, true);
    if (is_name(P, "recursive")) parse_fail(P->ps, cur(P)->line, "recursive for loops are not supported");
    P->loop_depth++;
    n->d = parse_statements(P, END_FOR, false);
    P->loop_depth--;
    if (name_eq(next(P), "else")) n->e = parse_statements(P, END_FOR_ELSE, true);
    return n;
}

static tnode *parse_if(parser *P) {
    tnode *result = new_node(P, N_IF, next(P)->line), *node = result;
    for (;;) {
        node->a = parse_tuple(P, TUPLE_NO_CONDEXPR, NULL, false);
        node->b = parse_statements(P, END_IF, false);
        const ttoken *t = next(P);
        if (name_eq(t, "elif")) {
            tnode *e = new_node(P, N_IF, cur(P)->line);
            node->c = e;
            node = e;
            continue;
        }
        if (name_eq(t, "else")) node->c = parse_statements(P, END_IF_ELSE, true);
        return result;
    }
}

static tnode *parse_set(parser *P) {
    int line = next(P)->line;
    tnode *target = parse_assign_target(P, true, false, NULL, true);
    if (skip_op(P, "=")) {
        tnode *n = new_node(P, N_SET, line);
        n->a = target;
        n->b = parse_tuple(P, TUPLE_CONDEXPR, NULL, false);
        return n;
    }
    tnode *n = new_node(P, N_SETBLOCK, line);
    n->a = target;
    n->b = parse_filter(P, NULL, false);
    n->d = parse_statements(P, END_SET, true);
    return n;
}

static void parse_signature(parser *P, tnode *node) {
    expect_op(P, "(");
    nodelist params = {0};
    bool defaults = false;
    while (!is_op(P, ")")) {
        if (params.n) expect_op(P, ",");
        tnode *p = parse_assign_target(P, false, true, NULL, false);
        p->kind = N_PARAM;
        if (skip_op(P, "=")) {
            p->a = parse_expression(P, true);
            defaults = true;
        } else if (defaults) {
            parse_fail(P->ps, p->line, "non-default argument follows default argument");
        }
        list_push(P, &params, p);
    }
    expect_op(P, ")");
    set_items(node, &params);
}

static tnode *parse_macro(parser *P) {
    tnode *n = new_node(P, N_MACRO, next(P)->line);
    tnode *name = parse_assign_target(P, false, true, NULL, false);
    n->s = name->s;
    n->n = name->n;
    parse_signature(P, n);
    int saved_flags = P->macro_flags, saved_loops = P->loop_depth;
    P->macro_flags = 0;
    P->loop_depth = 0;
    n->d = parse_statements(P, END_MACRO, true);
    n->flags = (uint16_t)P->macro_flags;
    for (int i = 0; i < n->n_items; i++)
        if (n->items[i]->n == 6 && memcmp(n->items[i]->s, "caller", 6) == 0) n->flags &= (uint16_t)~MACRO_CALLER;
    P->macro_flags = saved_flags;
    P->loop_depth = saved_loops;
    return n;
}

static tnode *parse_call_block(parser *P) {
    tnode *n = new_node(P, N_CALLBLOCK, next(P)->line);
    if (is_op(P, "(")) parse_signature(P, n);
    tnode *call = parse_expression(P, true);
    if (call->kind != N_CALL) parse_fail(P->ps, n->line, "expected call");
    n->a = call;
    int saved_flags = P->macro_flags, saved_loops = P->loop_depth;
    P->macro_flags = 0;
    P->loop_depth = 0;
    n->d = parse_statements(P, END_CALL, true);
    n->flags = (uint16_t)P->macro_flags;
    P->macro_flags = saved_flags;
    P->loop_depth = saved_loops;
    return n;
}

static tnode *parse_filter_block(parser *P) {
    tnode *n = new_node(P, N_FILTERBLOCK, next(P)->line);
    n->b = parse_filter(P, NULL, true);
    n->d = parse_statements(P, END_FILTER, true);
    return n;
}

static tnode *parse_with(parser *P) {
    tnode *n = new_node(P, N_WITH, next(P)->line);
    nodelist sets = {0};
    while (cur(P)->type != T_BLOCK_END) {
        if (sets.n) expect_op(P, ",");
        tnode *s = new_node(P, N_SET, cur(P)->line);
        s->a = parse_assign_target(P, true, false, NULL, false);
        expect_op(P, "=");
        s->b = parse_expression(P, true);
        list_push(P, &sets, s);
    }
    set_items(n, &sets);
    n->d = parse_statements(P, END_WITH, true);
    return n;
}

static tnode *parse_statement(parser *P) {
    const ttoken *t = cur(P);
    if (t->type != T_NAME) parse_fail(P->ps, t->line, "tag name expected");
    static const char *const known[] = {"for", "if", "set", "macro", "call", "filter", "with", "print",
                                        "break", "continue", "generation"};
    const char *tag = NULL;
    for (size_t k = 0; k < sizeof known / sizeof *known; k++)
        if (name_eq(t, known[k])) tag = known[k];
    static const char *const unsupported[] = {"block", "extends", "include", "import", "from", "autoescape"};
    for (size_t k = 0; k < sizeof unsupported / sizeof *unsupported; k++)
        if (name_eq(t, unsupported[k]))
            parse_fail(P->ps, t->line, "the '%s' tag is not supported in chat templates", unsupported[k]);
    if (!tag) fail_unknown_tag(P, t, t->line);
    if (P->n_tags >= MAX_NESTING) parse_fail(P->ps, t->line, "template nested too deeply (more than %d levels)", MAX_NESTING);
    P->tag_stack[P->n_tags++] = tag;
    enter(P);
    tnode *n;
    if (tag == known[0]) n = parse_for(P);
    else if (tag == known[1]) n = parse_if(P);
    else if (tag == known[2]) n = parse_set(P);
    else if (tag == known[3]) n = parse_macro(P);
    else if (tag == known[4]) n = parse_call_block(P);
    else if (tag == known[5]) n = parse_filter_block(P);
    else if (tag == known[6]) n = parse_with(P);
    else if (tag == known[7]) {
        n = new_node(P, N_OUTPUT, next(P)->line);
        n->a = parse_tuple(P, TUPLE_CONDEXPR, NULL, false);
    } else if (tag == known[8] || tag == known[9]) {
        next(P);
        if (!P->loop_depth) parse_fail(P->ps, t->line, "'%s' outside loop", tag);
        n = new_node(P, tag == known[8] ? N_BREAK : N_CONTINUE, t->line);
    } else {
        next(P);
        n = parse_statements(P, END_GENERATION, true);
    }
    leave(P);
    P->n_tags--;
    return n;
}

static tnode *subparse(parser *P, const char *const *end_tokens) {
    tnode *body = new_node(P, N_BODY, cur(P)->line);
    nodelist items = {0};
    if (end_tokens) {
        if (P->n_end >= MAX_NESTING) parse_fail(P->ps, cur(P)->line, "template nested too deeply (more than %d levels)", MAX_NESTING);
        P->end_stack[P->n_end++] = end_tokens;
    }
    while (cur(P)->type != T_EOF) {
        const ttoken *t = cur(P);
        if (t->type == T_DATA) {
            tnode *d = new_node(P, N_DATA, t->line);
            d->s = t->s;
            d->n = t->n;
            list_push(P, &items, d);
            next(P);
        } else if (t->type == T_VAR_BEGIN) {
            next(P);
            tnode *o = new_node(P, N_OUTPUT, t->line);
            o->a = parse_tuple(P, TUPLE_CONDEXPR, NULL, false);
            list_push(P, &items, o);
            expect_type(P, T_VAR_END);
        } else if (t->type == T_BLOCK_BEGIN) {
            next(P);
            if (end_tokens) {
                bool end = false;
                for (const char *const *e = end_tokens; *e; e++)
                    if (is_name(P, *e)) end = true;
                if (end) break;
            }
            list_push(P, &items, parse_statement(P));
            expect_type(P, T_BLOCK_END);
        } else {
            char d[128];
            describe(t, d, sizeof d);
            parse_fail(P->ps, t->line, "unexpected '%s'", d);
        }
    }
    if (end_tokens) P->n_end--;
    set_items(body, &items);
    return body;
}

tnode *tmpl_parse_tokens(tparse_state *ps, const tlexed *lx) {
    parser P = {.ps = ps, .t = lx->toks, .n = lx->n};
    return subparse(&P, NULL);
}
