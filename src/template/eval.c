/*
 * eval.c - running a parsed template: scopes, statements, expressions,
 * operators with Python semantics, attribute and item access with Jinja2's
 * sandbox rules, calls and macros, and tmpl_render itself.
 *
 * Scoping follows Jinja2: a for-loop iteration, a macro call and a with
 * block each open a scope whose assignments vanish when it ends; `if` opens
 * none; top-level assignments go to the template's scope. Undefined values
 * follow jinja2.Undefined: printing or iterating one is harmless, using one
 * in arithmetic, a call or an attribute access raises its error.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "template/tmpl_internal.h"

enum { CTL_NONE = 0, CTL_BREAK, CTL_CONTINUE };

#define SC(r) ((r)->sc)

static tv eval(rt *r, const tnode *n);
static int exec(rt *r, const tnode *n);

/* ---- render state ---- */

void rt_fail(rt *r, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->err->message, sizeof r->err->message, fmt, ap);
    va_end(ap);
    r->err->line = r->line;
    longjmp(r->jb, 1);
}

void *rt_alloc(rt *r, size_t n) {
    void *p = arena_alloc(&r->arena, n);
    if (!p) rt_fail(r, "template needs more than %zu MiB of memory", r->arena.limit >> 20);
    return p;
}

char *rt_strdup(rt *r, const char *s, size_t n) {
    char *p = rt_alloc(r, n + 1);
    if (n) memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

void rt_step(rt *r) {
    if (++r->steps > r->opt.max_steps)
        rt_fail(r, "template stopped after %" PRIu64 " steps (an endless or very long loop?)", r->opt.max_steps);
}

void rt_out(rt *r, const char *s, size_t n) {
    sbuf *b = r->out;
    if (!n) return;
    if (n > r->opt.max_output - b->n) rt_fail(r, "rendered text exceeds the limit of %zu bytes", r->opt.max_output);
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n) cap = cap > SIZE_MAX / 2 ? b->n + n : cap * 2;
        char *p = realloc(b->p, cap);
        if (!p) rt_fail(r, "out of memory");
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
}

static void capture_begin(rt *r) {
    sbuf *b = rt_alloc(r, sizeof *b);
    b->prev = r->out;
    r->out = b;
}

static tv capture_end(rt *r) {
    sbuf *b = r->out;
    tv s = tv_strdup(r, b->p ? b->p : "", b->n);
    r->out = b->prev;
    free(b->p);
    b->p = NULL;
    return s;
}

/* ---- scopes ---- */

static scope *scope_new(rt *r, scope *parent) {
    scope *s = rt_alloc(r, sizeof *s);
    s->parent = parent;
    return s;
}

/* Empties a loop iteration's scope for the next iteration. */
static void scope_reset(scope *s) {
    s->vars.n = 0;
    if (s->vars.index_cap) memset(s->vars.index, 0, s->vars.index_cap * sizeof *s->vars.index);
}

static void scope_set(rt *r, scope *s, const char *name, size_t n, tv v) { dict_set(r, &s->vars, tv_str(name, n), v); }

static tv lookup(rt *r, const char *name, size_t n) {
    for (scope *s = SC(r); s; s = s->parent) {
        tv *v = dict_get_str(&s->vars, name, n);
        if (v) return *v;
    }
    return tv_undef_name(name, n);
}

/* ---- attribute and item access ---- */

static tv loop_attr(rt *r, tv lpv, const char *name, size_t n);

static bool name_is(const char *name, size_t n, const char *s) { return strlen(s) == n && memcmp(name, s, n) == 0; }

tv rt_getattr(rt *r, tv obj, const char *name, size_t n) {
    switch (obj.kind) {
    case TV_UNDEF: tv_undef_fail(r, obj);
    case TV_DICT: {
        tv m = tmpl_method(r, obj, name, n);
        if (m.kind != TV_UNDEF || m.sub == UNDEF_MSG) return m;
        tv *v = dict_get_str(obj.u.d, name, n);
        return v ? *v : tv_undef_attr(obj, name, n);
    }
    case TV_NS: {
        tv *v = dict_get_str(obj.u.d, name, n);
        return v ? *v : tv_undef_attr(obj, name, n);
    }
    case TV_LOOP: return loop_attr(r, obj, name, n);
    case TV_LIST:
        /* groupby's tuples are named tuples: (grouper, list) */
        if (obj.sub == LIST_TUPLE && obj.u.l->n == 2) {
            if (name_is(name, n, "grouper")) return obj.u.l->items[0];
            if (name_is(name, n, "list")) return obj.u.l->items[1];
        }
        /* fall through */
    default: {
        tv m = tmpl_method(r, obj, name, n);
        if (m.kind != TV_UNDEF || m.sub == UNDEF_MSG) return m;
        return tv_undef_attr(obj, name, n);
    }
    }
}

static tv no_element(rt *r, tv obj, tv key) {
    tstrb b = {0};
    tv_write_repr(r, &b, key);
    if (obj.kind == TV_NONE) return tv_undef_msg(r, "None has no element %.*s", (int)b.n, b.p);
    return tv_undef_msg(r, "%s object has no element %.*s", tv_type_name(obj), (int)b.n, b.p);
}

tv rt_getitem(rt *r, tv obj, tv key) {
    if (obj.kind == TV_UNDEF) tv_undef_fail(r, obj);
    if (obj.kind == TV_DICT) {
        if (key.kind != TV_LIST || key.sub == LIST_TUPLE) {
            tv *v = dict_get(obj.u.d, key);
            if (v) return *v;
        }
    } else if (obj.kind == TV_LIST && (obj.sub == LIST_PLAIN || obj.sub == LIST_TUPLE || obj.sub == LIST_RANGE)) {
        if (key.kind == TV_INT || key.kind == TV_BOOL) {
            int64_t i = key.kind == TV_BOOL ? key.u.b : key.u.i, len = (int64_t)obj.u.l->n;
            int64_t k = i < 0 ? i + len : i;
            if (k >= 0 && k < len) return obj.u.l->items[k];
            return no_element(r, obj, key);
        }
    } else if (obj.kind == TV_STR) {
        if (key.kind == TV_INT || key.kind == TV_BOOL) return str_index(r, obj, key.kind == TV_BOOL ? key.u.b : key.u.i);
    }
    if (key.kind == TV_STR) return rt_getattr(r, obj, key.u.s.p, key.u.s.n);
    return no_element(r, obj, key);
}

static tv slice_value(rt *r, tv obj, tv start, tv stop, tv step) {
    if (obj.kind == TV_UNDEF) tv_undef_fail(r, obj);
    if (obj.kind == TV_STR) return str_slice(r, obj, start, stop, step);
    if (obj.kind == TV_LIST && (obj.sub == LIST_PLAIN || obj.sub == LIST_TUPLE || obj.sub == LIST_RANGE)) {
        int64_t lo, st;
        int64_t count = py_slice_indices(r, (int64_t)obj.u.l->n, start, stop, step, &lo, &st);
        tv out = tv_list_new(r, count > 0 ? (size_t)count : 0, obj.sub == LIST_TUPLE ? LIST_TUPLE : LIST_PLAIN);
        for (int64_t k = 0, i = lo; k < count; k++, i += st) out.u.l->items[k] = obj.u.l->items[i];
        return out;
    }
    return tv_undef_msg(r, "%s object has no element slice", tv_type_name(obj));
}

/* ---- the loop variable ---- */

static tv loop_cycle(rt *r, tv self, const targs *a) {
    if (a->n == 0) rt_fail(r, "no items for cycling given");
    return a->pos[self.u.lp->i % (size_t)a->n];
}

static tv loop_changed(rt *r, tv self, const targs *a) {
    tloop *lp = self.u.lp;
    tv cur = tv_list_new(r, (size_t)a->n, LIST_TUPLE);
    for (int i = 0; i < a->n; i++) cur.u.l->items[i] = a->pos[i];
    if (lp->changed_set && tv_equal(lp->changed_last, cur)) return tv_bool(false);
    lp->changed_set = true;
    lp->changed_last = cur;
    return tv_bool(true);
}

static tv loop_attr(rt *r, tv lpv, const char *name, size_t n) {
    tloop *lp = lpv.u.lp;
    int64_t i = (int64_t)lp->i, len = (int64_t)lp->items->n;
    if (name_is(name, n, "index")) return tv_int(i + 1);
    if (name_is(name, n, "index0")) return tv_int(i);
    if (name_is(name, n, "revindex")) return tv_int(len - i);
    if (name_is(name, n, "revindex0")) return tv_int(len - i - 1);
    if (name_is(name, n, "first")) return tv_bool(i == 0);
    if (name_is(name, n, "last")) return tv_bool(i == len - 1);
    if (name_is(name, n, "length")) return tv_int(len);
    if (name_is(name, n, "depth")) return tv_int(lp->depth0 + 1);
    if (name_is(name, n, "depth0")) return tv_int(lp->depth0);
    if (name_is(name, n, "previtem"))
        return i > 0 ? lp->items->items[i - 1] : tv_undef_msg(r, "there is no previous item");
    if (name_is(name, n, "nextitem"))
        return i + 1 < len ? lp->items->items[i + 1] : tv_undef_msg(r, "there is no next item");
    if (name_is(name, n, "cycle")) return tv_func(r, "cycle", loop_cycle, lpv);
    if (name_is(name, n, "changed")) return tv_func(r, "changed", loop_changed, lpv);
    return tv_undef_msg(r, "'jinja2.runtime.LoopContext object' has no attribute '%.*s'", (int)n, name);
}

/* ---- operators ---- */

static void check_undef2(rt *r, tv a, tv b) {
    if (a.kind == TV_UNDEF) tv_undef_fail(r, a);
    if (b.kind == TV_UNDEF) tv_undef_fail(r, b);
}

static bool is_intlike(tv v) { return v.kind == TV_INT || v.kind == TV_BOOL; }
static int64_t as_int(tv v) { return v.kind == TV_BOOL ? v.u.b : v.u.i; }

TMPL_NORETURN static void unsupported(rt *r, const char *op, tv a, tv b) {
    rt_fail(r, "unsupported operand type(s) for %s: '%s' and '%s'", op, tv_type_name(a), tv_type_name(b));
}

/* lists and tuples support + and *; ranges, generators and views do not */
static bool is_repeatable(tv v) { return v.kind == TV_LIST && (v.sub == LIST_PLAIN || v.sub == LIST_TUPLE); }

static tv concat_lists(rt *r, tv a, tv b) {
    tv out = tv_list_new(r, a.u.l->n + b.u.l->n, a.sub);
    if (a.u.l->n) memcpy(out.u.l->items, a.u.l->items, a.u.l->n * sizeof(tv));
    if (b.u.l->n) memcpy(out.u.l->items + a.u.l->n, b.u.l->items, b.u.l->n * sizeof(tv));
    return out;
}

static tv repeat_list(rt *r, tv l, int64_t times) {
    if (times <= 0 || l.u.l->n == 0) return tv_list_new(r, 0, l.sub);
    if ((uint64_t)times > SIZE_MAX / sizeof(tv) / l.u.l->n) rt_fail(r, "repeated list is too long");
    size_t n = l.u.l->n;
    tv out = tv_list_new(r, n * (size_t)times, l.sub);
    for (int64_t i = 0; i < times; i++) memcpy(out.u.l->items + (size_t)i * n, l.u.l->items, n * sizeof(tv));
    return out;
}

static double py_fmod(double x, double y) {
    double m = fmod(x, y);
    if (m != 0.0) {
        if ((y < 0) != (m < 0)) m += y;
    } else {
        m = copysign(0.0, y);
    }
    return m;
}

static double py_floordiv(double x, double y) {
    double m = fmod(x, y);
    double div = (x - m) / y;
    if (m != 0.0 && (y < 0) != (m < 0)) div -= 1.0;
    if (div == 0.0) return copysign(0.0, x / y);
    double fl = floor(div);
    if (div - fl > 0.5) fl += 1.0;
    return fl;
}

static tv int_pow(rt *r, int64_t base, int64_t exp) {
    int64_t result = 1;
    while (exp > 0) {
        if (exp & 1) {
            if (__builtin_mul_overflow(result, base, &result)) rt_fail(r, "integer overflow in **");
        }
        exp >>= 1;
        if (exp && __builtin_mul_overflow(base, base, &base)) rt_fail(r, "integer overflow in **");
    }
    return tv_int(result);
}

tv rt_binop(rt *r, int op, tv a, tv b) {
    if (op == BIN_CONCAT) {
        tstrb s = {0};
        tv_write_str(r, &s, a);
        tv_write_str(r, &s, b);
        return sb_done(&s);
    }
    /* str % anything formats it (str(Undefined) is ""); otherwise an
     * Undefined operand raises its error */
    if (!(op == BIN_MOD && a.kind == TV_STR)) check_undef2(r, a, b);
    bool ints = is_intlike(a) && is_intlike(b), nums = tv_is_num(a) && tv_is_num(b);
    int64_t x = ints ? as_int(a) : 0, y = ints ? as_int(b) : 0, z;
    switch (op) {
    case BIN_ADD:
        if (ints) {
            if (__builtin_add_overflow(x, y, &z)) rt_fail(r, "integer overflow in +");
            return tv_int(z);
        }
        if (nums) return tv_float(tv_num(a) + tv_num(b));
        if (a.kind == TV_STR && b.kind == TV_STR) {
            if (!a.u.s.n) return b;
            if (!b.u.s.n) return a;
            char *p = rt_alloc(r, a.u.s.n + b.u.s.n);
            memcpy(p, a.u.s.p, a.u.s.n);
            memcpy(p + a.u.s.n, b.u.s.p, b.u.s.n);
            return tv_str(p, a.u.s.n + b.u.s.n);
        }
        if (a.kind == TV_STR) rt_fail(r, "can only concatenate str (not \"%s\") to str", tv_type_name(b));
        if (a.kind == TV_LIST && (a.sub == LIST_PLAIN || a.sub == LIST_TUPLE)) {
            if (b.kind == TV_LIST && b.sub == a.sub) return concat_lists(r, a, b);
            rt_fail(r, "can only concatenate %s (not \"%s\") to %s", tv_type_name(a), tv_type_name(b), tv_type_name(a));
        }
        unsupported(r, "+", a, b);
    case BIN_SUB:
        if (ints) {
            if (__builtin_sub_overflow(x, y, &z)) rt_fail(r, "integer overflow in -");
            return tv_int(z);
        }
        if (nums) return tv_float(tv_num(a) - tv_num(b));
        unsupported(r, "-", a, b);
    case BIN_MUL:
        if (ints) {
            if (__builtin_mul_overflow(x, y, &z)) rt_fail(r, "integer overflow in *");
            return tv_int(z);
        }
        if (nums) return tv_float(tv_num(a) * tv_num(b));
        if (a.kind == TV_STR && is_intlike(b)) return str_repeat(r, a, as_int(b));
        if (b.kind == TV_STR && is_intlike(a)) return str_repeat(r, b, as_int(a));
        if (is_repeatable(a) && is_intlike(b)) return repeat_list(r, a, as_int(b));
        if (is_repeatable(b) && is_intlike(a)) return repeat_list(r, b, as_int(a));
        if (a.kind == TV_STR || is_repeatable(a))
            rt_fail(r, "can't multiply sequence by non-int of type '%s'", tv_type_name(b));
        if (b.kind == TV_STR || is_repeatable(b))
            rt_fail(r, "can't multiply sequence by non-int of type '%s'", tv_type_name(a));
        unsupported(r, "*", a, b);
    case BIN_DIV:
        if (nums) {
            if (tv_num(b) == 0.0) rt_fail(r, ints ? "division by zero" : "float division by zero");
            return tv_float(tv_num(a) / tv_num(b));
        }
        unsupported(r, "/", a, b);
    case BIN_FLOORDIV:
        if (ints) {
            if (y == 0) rt_fail(r, "integer division or modulo by zero");
            if (x == INT64_MIN && y == -1) rt_fail(r, "integer overflow in //");
            z = x / y;
            if ((x % y != 0) && ((x < 0) != (y < 0))) z--;
            return tv_int(z);
        }
        if (nums) {
            if (tv_num(b) == 0.0) rt_fail(r, "float floor division by zero");
            return tv_float(py_floordiv(tv_num(a), tv_num(b)));
        }
        unsupported(r, "//", a, b);
    case BIN_MOD:
        if (ints) {
            if (y == 0) rt_fail(r, "integer modulo by zero");
            if (y == -1) return tv_int(0);
            z = x % y;
            if (z != 0 && ((z < 0) != (y < 0))) z += y;
            return tv_int(z);
        }
        if (nums) {
            if (tv_num(b) == 0.0) rt_fail(r, "float modulo");
            return tv_float(py_fmod(tv_num(a), tv_num(b)));
        }
        if (a.kind == TV_STR) return py_percent_format(r, a, b);
        unsupported(r, "%", a, b);
    case BIN_POW:
        if (ints && y >= 0) return int_pow(r, x, y);
        if (nums) {
            double fa = tv_num(a), fb = tv_num(b);
            if (fa == 0.0 && fb < 0) rt_fail(r, "0.0 cannot be raised to a negative power");
            double p = pow(fa, fb);
            if (isinf(p) && !isinf(fa) && !isinf(fb)) rt_fail(r, "(34, 'Numerical result out of range')");
            return tv_float(p);
        }
        unsupported(r, "** or pow()", a, b);
    }
    rt_fail(r, "unknown operator");
}

static bool contains(rt *r, tv container, tv item) {
    switch (container.kind) {
    case TV_STR:
        if (item.kind != TV_STR) rt_fail(r, "'in <string>' requires string as left operand, not %s", tv_type_name(item));
        if (item.u.s.n == 0) return true;
        if (item.u.s.n > container.u.s.n) return false;
        for (size_t i = 0; i + item.u.s.n <= container.u.s.n; i++)
            if (memcmp(container.u.s.p + i, item.u.s.p, item.u.s.n) == 0) return true;
        return false;
    case TV_LIST:
        for (size_t i = 0; i < container.u.l->n; i++)
            if (tv_equal(container.u.l->items[i], item)) return true;
        return false;
    case TV_DICT:
        if (item.kind == TV_DICT || (item.kind == TV_LIST && item.sub != LIST_TUPLE))
            rt_fail(r, "unhashable type: '%s'", tv_type_name(item));
        return dict_get(container.u.d, item) != NULL;
    case TV_UNDEF: return false;
    default: rt_fail(r, "argument of type '%s' is not iterable", tv_type_name(container));
    }
}

bool rt_compare_op(rt *r, int op, tv a, tv b) {
    switch (op) {
    case CMP_EQ: return tv_equal(a, b);
    case CMP_NE: return !tv_equal(a, b);
    case CMP_IN: return contains(r, b, a);
    case CMP_NOTIN: return !contains(r, b, a);
    }
    static const char *const syms[] = {[CMP_LT] = "<", [CMP_LE] = "<=", [CMP_GT] = ">", [CMP_GE] = ">="};
    int c = tv_compare(r, a, b, syms[op]);
    if (c == 2) return false; /* NaN */
    switch (op) {
    case CMP_LT: return c < 0;
    case CMP_LE: return c <= 0;
    case CMP_GT: return c > 0;
    default: return c >= 0;
    }
}

/* ---- calls and macros ---- */

static targs eval_args(rt *r, const tnode *n) {
    tvec pos = {0};
    targs a = {0};
    int nkw = 0;
    for (int i = 0; i < n->n_items; i++) nkw += n->items[i]->kind == N_KWARG;
    tkwarg *kw = NULL;
    int kcap = nkw;
    if (kcap) kw = rt_alloc(r, (size_t)kcap * sizeof *kw);
    for (int i = 0; i < n->n_items; i++) {
        const tnode *x = n->items[i];
        if (x->kind == N_KWARG) {
            kw[a.nkw++] = (tkwarg){x->s, x->n, eval(r, x->a)};
        } else if (x->kind == N_STARARGS) {
            tv items = tv_iterate(r, eval(r, x->a));
            for (size_t k = 0; k < items.u.l->n; k++) vec_push(r, &pos, items.u.l->items[k]);
        } else if (x->kind == N_STARKW) {
            tv d = eval(r, x->a);
            if (d.kind != TV_DICT) rt_fail(r, "argument after ** must be a mapping, not %s", tv_type_name(d));
            tkwarg *grown = rt_alloc(r, (size_t)(kcap + (int)d.u.d->n + 1) * sizeof *grown);
            if (a.nkw) memcpy(grown, kw, (size_t)a.nkw * sizeof *kw);
            kw = grown;
            kcap += (int)d.u.d->n;
            for (size_t k = 0; k < d.u.d->n; k++) {
                tv key = d.u.d->keys[k];
                if (key.kind != TV_STR) rt_fail(r, "keywords must be strings");
                kw[a.nkw++] = (tkwarg){key.u.s.p, key.u.s.n, d.u.d->vals[k]};
            }
        } else {
            vec_push(r, &pos, eval(r, x));
        }
    }
    a.n = (int)pos.n;
    a.pos = pos.items;
    a.kw = kw;
    return a;
}

static tv call_macro(rt *r, tmacro *m, const targs *a) {
    const tnode *def = m->def;
    const char *mname = def->s ? def->s : "caller";
    int mname_n = def->s ? (int)def->n : 6;
    int np = def->n_items;
    scope *s = scope_new(r, m->closure);
    scope *saved = SC(r);
    bool *used = a->nkw ? rt_alloc(r, (size_t)a->nkw) : NULL;
    SC(r) = s;
    for (int i = 0; i < np; i++) {
        const tnode *p = def->items[i];
        tv v = tv_absent();
        if (i < a->n) {
            v = a->pos[i];
        } else {
            for (int k = 0; k < a->nkw; k++)
                if (!used[k] && a->kw[k].n == p->n && memcmp(a->kw[k].name, p->s, p->n) == 0) {
                    v = a->kw[k].v;
                    used[k] = true;
                    break;
                }
            if (!tv_given(v)) {
                v = p->a ? eval(r, p->a) : tv_undef_msg(r, "parameter '%.*s' was not provided", (int)p->n, p->s);
            }
        }
        scope_set(r, s, p->s, p->n, v);
    }
    if (def->flags & MACRO_CALLER) {
        tv caller = tv_undef_msg(r, "No caller defined");
        for (int k = 0; k < a->nkw; k++)
            if (!used[k] && name_is(a->kw[k].name, a->kw[k].n, "caller")) {
                caller = a->kw[k].v;
                used[k] = true;
            }
        scope_set(r, s, "caller", 6, caller);
    }
    if (def->flags & MACRO_KWARGS) {
        tv kw = tv_dict_new(r, 0, TV_DICT);
        for (int k = 0; k < a->nkw; k++)
            if (!used[k]) dict_set(r, kw.u.d, tv_str(a->kw[k].name, a->kw[k].n), a->kw[k].v);
        scope_set(r, s, "kwargs", 6, kw);
    } else {
        for (int k = 0; k < a->nkw; k++)
            if (!used[k]) {
                if (name_is(a->kw[k].name, a->kw[k].n, "caller"))
                    rt_fail(r, "macro '%.*s' was invoked with two values for the special caller argument. This is most likely a bug.", mname_n, mname);
                rt_fail(r, "macro '%.*s' takes no keyword argument '%.*s'", mname_n, mname, (int)a->kw[k].n, a->kw[k].name);
            }
    }
    if (def->flags & MACRO_VARARGS) {
        int extra = a->n > np ? a->n - np : 0;
        tv va = tv_list_new(r, (size_t)extra, LIST_TUPLE);
        for (int i = 0; i < extra; i++) va.u.l->items[i] = a->pos[np + i];
        scope_set(r, s, "varargs", 7, va);
    } else if (a->n > np) {
        rt_fail(r, "macro '%.*s' takes not more than %d argument(s)", mname_n, mname, np);
    }
    capture_begin(r);
    exec(r, def->d);
    tv out = capture_end(r);
    SC(r) = saved;
    return out;
}

tv rt_call(rt *r, tv callee, const targs *a) {
    rt_step(r);
    switch (callee.kind) {
    case TV_FUNC: return callee.u.fn->call(r, callee.u.fn->self, a);
    case TV_MACRO: return call_macro(r, callee.u.m, a);
    case TV_UNDEF: tv_undef_fail(r, callee);
    default: rt_fail(r, "'%s' object is not callable", tv_type_name(callee));
    }
}

static tv eval_call(rt *r, const tnode *n, tv extra_caller) {
    tv callee = eval(r, n->a);
    targs a = eval_args(r, n);
    if (extra_caller.kind == TV_MACRO) {
        tkwarg *kw = rt_alloc(r, (size_t)(a.nkw + 1) * sizeof *kw);
        if (a.nkw) memcpy(kw, a.kw, (size_t)a.nkw * sizeof *kw);
        kw[a.nkw++] = (tkwarg){"caller", 6, extra_caller};
        a.kw = kw;
    }
    r->line = n->line;
    return rt_call(r, callee, &a);
}

static tv make_macro(rt *r, const tnode *def) {
    tmacro *m = rt_alloc(r, sizeof *m);
    m->def = def;
    m->closure = SC(r);
    for (scope *s = SC(r); s && !s->captured; s = s->parent) s->captured = true;
    return (tv){.kind = TV_MACRO, .u.m = m};
}

/* ---- filters and tests ---- */

static tv apply_filter_node(rt *r, const tnode *f, tv input) {
    if (f->a) input = eval(r, f->a);
    targs a = eval_args(r, f);
    r->line = f->line;
    if (f->fn < 0) rt_fail(r, "No filter named '%.*s'.", (int)f->n, f->s);
    return tmpl_filter_at(f->fn)(r, input, &a);
}

/* A filter chain of a set or filter block: the innermost filter takes input. */
static tv apply_filter_chain(rt *r, const tnode *f, tv input) {
    if (++r->depth > r->opt.max_depth) rt_fail(r, "maximum recursion depth exceeded");
    if (f->a) input = apply_filter_chain(r, f->a, input);
    r->depth--;
    targs a = eval_args(r, f);
    r->line = f->line;
    if (f->fn < 0) rt_fail(r, "No filter named '%.*s'.", (int)f->n, f->s);
    return tmpl_filter_at(f->fn)(r, input, &a);
}

/* ---- expressions ---- */

static tv eval_inner(rt *r, const tnode *n) {
    switch (n->kind) {
    case N_CONST: return n->val;
    case N_NAME: return lookup(r, n->s, n->n);
    case N_GETATTR: {
        tv obj = eval(r, n->a);
        r->line = n->line;
        return rt_getattr(r, obj, n->s, n->n);
    }
    case N_GETITEM: {
        tv obj = eval(r, n->a);
        tv key = eval(r, n->b);
        r->line = n->line;
        return rt_getitem(r, obj, key);
    }
    case N_SLICE: {
        if (!n->a) rt_fail(r, "slices are only supported as the single subscript");
        tv obj = eval(r, n->a);
        tv start = n->b ? eval(r, n->b) : tv_none(), stop = n->c ? eval(r, n->c) : tv_none(),
           step = n->d ? eval(r, n->d) : tv_none();
        r->line = n->line;
        return slice_value(r, obj, start, stop, step);
    }
    case N_CALL: return eval_call(r, n, tv_none());
    case N_FILTER: return apply_filter_node(r, n, tv_none());
    case N_TEST: {
        tv v = eval(r, n->a);
        targs a = eval_args(r, n);
        r->line = n->line;
        if (n->fn < 0) rt_fail(r, "No test named '%.*s'.", (int)n->n, n->s);
        return tv_bool(tmpl_call_test(r, n->fn, v, &a));
    }
    case N_NOT: return tv_bool(!tv_truthy(r, eval(r, n->a)));
    case N_NEG:
    case N_POS: {
        tv v = eval(r, n->a);
        r->line = n->line;
        if (v.kind == TV_UNDEF) tv_undef_fail(r, v);
        bool neg = n->kind == N_NEG;
        if (is_intlike(v)) {
            int64_t x = as_int(v);
            if (neg && x == INT64_MIN) rt_fail(r, "integer overflow in unary -");
            return tv_int(neg ? -x : x);
        }
        if (v.kind == TV_FLOAT) return tv_float(neg ? -v.u.f : v.u.f);
        rt_fail(r, "bad operand type for unary %c: '%s'", neg ? '-' : '+', tv_type_name(v));
    }
    case N_BINOP: {
        tv a = eval(r, n->a);
        tv b = eval(r, n->b);
        r->line = n->line;
        return rt_binop(r, n->op, a, b);
    }
    case N_AND: {
        tv a = eval(r, n->a);
        return tv_truthy(r, a) ? eval(r, n->b) : a;
    }
    case N_OR: {
        tv a = eval(r, n->a);
        return tv_truthy(r, a) ? a : eval(r, n->b);
    }
    case N_COMPARE: {
        tv left = eval(r, n->a);
        for (int i = 0; i < n->n_items; i++) {
            const tnode *o = n->items[i];
            tv right = eval(r, o->a);
            r->line = n->line;
            if (!rt_compare_op(r, o->op, left, right)) return tv_bool(false);
            left = right;
        }
        return tv_bool(true);
    }
    case N_COND:
        if (tv_truthy(r, eval(r, n->b))) return eval(r, n->a);
        if (n->c) return eval(r, n->c);
        return tv_undef_msg(r, "the inline if-expression on line %d evaluated to false and no else section was defined.", n->line);
    case N_LIST:
    case N_TUPLE: {
        tv out = tv_list_new(r, (size_t)n->n_items, n->kind == N_LIST ? LIST_PLAIN : LIST_TUPLE);
        for (int i = 0; i < n->n_items; i++) out.u.l->items[i] = eval(r, n->items[i]);
        return out;
    }
    case N_DICT: {
        tv out = tv_dict_new(r, (size_t)n->n_items, TV_DICT);
        for (int i = 0; i < n->n_items; i++) {
            tv k = eval(r, n->items[i]->a);
            tv v = eval(r, n->items[i]->b);
            dict_set(r, out.u.d, k, v);
        }
        return out;
    }
    default: rt_fail(r, "cannot evaluate this expression");
    }
}

static tv eval(rt *r, const tnode *n) {
    if (++r->depth > r->opt.max_depth) rt_fail(r, "maximum recursion depth exceeded");
    tv v = eval_inner(r, n);
    r->depth--;
    return v;
}

/* ---- statements ---- */

static void assign(rt *r, const tnode *target, tv v) {
    switch (target->kind) {
    case N_NAME: scope_set(r, SC(r), target->s, target->n, v); return;
    case N_NSREF: {
        tv ns = lookup(r, target->a->s, target->a->n);
        if (ns.kind != TV_NS) rt_fail(r, "cannot assign attribute on non-namespace object");
        dict_set(r, ns.u.d, tv_str(target->s, target->n), v);
        return;
    }
    case N_TUPLE: {
        tv items = tv_iterate(r, v);
        size_t want = (size_t)target->n_items, got = items.u.l->n;
        if (got < want) rt_fail(r, "not enough values to unpack (expected %zu, got %zu)", want, got);
        if (got > want) rt_fail(r, "too many values to unpack (expected %zu)", want);
        for (size_t i = 0; i < want; i++) assign(r, target->items[i], items.u.l->items[i]);
        return;
    }
    default: rt_fail(r, "cannot assign to this target");
    }
}

static void output_value(rt *r, tv v) {
    if (v.kind == TV_STR) {
        rt_out(r, v.u.s.p, v.u.s.n);
    } else if (v.kind != TV_UNDEF) {
        tv s = tv_to_str(r, v);
        rt_out(r, s.u.s.p, s.u.s.n);
    }
}

static int exec_body(rt *r, const tnode *body) {
    for (int i = 0; i < body->n_items; i++) {
        int c = exec(r, body->items[i]);
        if (c) return c;
    }
    return CTL_NONE;
}

static int exec_for(rt *r, const tnode *n) {
    tv it = eval(r, n->b);
    r->line = n->line;
    tv items = tv_iterate(r, it);
    scope *outer = SC(r);
    if (n->c) {
        tvec kept = {0};
        SC(r) = scope_new(r, outer);
        for (size_t i = 0; i < items.u.l->n; i++) {
            rt_step(r);
            assign(r, n->a, items.u.l->items[i]);
            if (tv_truthy(r, eval(r, n->c))) vec_push(r, &kept, items.u.l->items[i]);
        }
        SC(r) = outer;
        items = vec_done(r, &kept, LIST_PLAIN);
    }
    tloop *lp = rt_alloc(r, sizeof *lp);
    lp->items = items.u.l;
    tv loopv = {.kind = TV_LOOP, .u.lp = lp};
    scope *s = NULL;
    for (size_t i = 0; i < items.u.l->n; i++) {
        rt_step(r);
        lp->i = i;
        /* each iteration starts with a fresh scope; reuse the memory unless a
         * macro defined in the last iteration still refers to it */
        if (!s || s->captured) s = scope_new(r, outer);
        else scope_reset(s);
        SC(r) = s;
        scope_set(r, s, "loop", 4, loopv);
        assign(r, n->a, items.u.l->items[i]);
        int c = exec_body(r, n->d);
        SC(r) = outer;
        if (c == CTL_BREAK) break;
    }
    if (items.u.l->n == 0 && n->e) {
        SC(r) = scope_new(r, outer);
        exec_body(r, n->e);
        SC(r) = outer;
    }
    return CTL_NONE;
}

/* The output of a set or filter block's body, run in its own scope (its
 * assignments and macros stay inside, as in Jinja2). */
static tv capture_in_scope(rt *r, const tnode *body) {
    scope *outer = SC(r);
    SC(r) = scope_new(r, outer);
    capture_begin(r);
    exec(r, body);
    tv v = capture_end(r);
    SC(r) = outer;
    return v;
}

static int exec_inner(rt *r, const tnode *n) {
    switch (n->kind) {
    case N_BODY: return exec_body(r, n);
    case N_DATA: rt_out(r, n->s, n->n); return CTL_NONE;
    case N_OUTPUT: output_value(r, eval(r, n->a)); return CTL_NONE;
    case N_IF:
        if (tv_truthy(r, eval(r, n->a))) return exec(r, n->b);
        return n->c ? exec(r, n->c) : CTL_NONE;
    case N_FOR: return exec_for(r, n);
    case N_SET: {
        tv v = eval(r, n->b);
        r->line = n->line;
        assign(r, n->a, v);
        return CTL_NONE;
    }
    case N_SETBLOCK: {
        tv v = capture_in_scope(r, n->d);
        if (n->b) v = apply_filter_chain(r, n->b, v);
        r->line = n->line;
        assign(r, n->a, v);
        return CTL_NONE;
    }
    case N_MACRO: scope_set(r, SC(r), n->s, n->n, make_macro(r, n)); return CTL_NONE;
    case N_CALLBLOCK: output_value(r, eval_call(r, n->a, make_macro(r, n))); return CTL_NONE;
    case N_FILTERBLOCK: {
        tv v = capture_in_scope(r, n->d);
        output_value(r, apply_filter_chain(r, n->b, v));
        return CTL_NONE;
    }
    case N_WITH: {
        tv *vals = rt_alloc(r, ((size_t)n->n_items + 1) * sizeof *vals);
        for (int i = 0; i < n->n_items; i++) vals[i] = eval(r, n->items[i]->b);
        scope *outer = SC(r);
        SC(r) = scope_new(r, outer);
        for (int i = 0; i < n->n_items; i++) assign(r, n->items[i]->a, vals[i]);
        int c = exec(r, n->d);
        SC(r) = outer;
        return c;
    }
    case N_BREAK: return CTL_BREAK;
    case N_CONTINUE: return CTL_CONTINUE;
    default: rt_fail(r, "cannot execute this statement");
    }
}

static int exec(rt *r, const tnode *n) {
    rt_step(r);
    r->line = n->line;
    if (++r->depth > r->opt.max_depth) rt_fail(r, "maximum recursion depth exceeded");
    int c = exec_inner(r, n);
    r->depth--;
    return c;
}

/* ---- entry point ---- */

int tmpl_render(const tmpl_template *t, const json_t *context, const tmpl_options *opts, char **out, size_t *out_len,
                tmpl_error *err) {
    tmpl_error local;
    if (!err) err = &local;
    err->message[0] = '\0';
    err->line = 0;
    *out = NULL;
    if (out_len) *out_len = 0;
    if (context && !json_is_object(context)) {
        snprintf(err->message, sizeof err->message, "the template context must be a JSON object");
        return -1;
    }
    rt *r = calloc(1, sizeof *r);
    if (!r) {
        snprintf(err->message, sizeof err->message, "out of memory");
        return -1;
    }
    if (opts) r->opt = *opts;
    if (!r->opt.max_output) r->opt.max_output = (size_t)64 << 20;
    if (!r->opt.max_memory) r->opt.max_memory = (size_t)1 << 30;
    if (!r->opt.max_depth) r->opt.max_depth = 1000;
    if (!r->opt.max_steps) r->opt.max_steps = 100000000;
    r->arena.limit = r->opt.max_memory;
    r->err = err;
    if (setjmp(r->jb)) {
        for (sbuf *b = r->out; b; b = b->prev) free(b->p);
        arena_release(&r->arena);
        free(r);
        return -1;
    }
    r->out = rt_alloc(r, sizeof *r->out);
    scope *globals = scope_new(r, NULL);
    tmpl_add_globals(r, &globals->vars);
    r->globals = globals;
    scope *top = scope_new(r, globals);
    if (context) {
        const char *key;
        json_t *value;
        json_object_foreach((json_t *)context, key, value) scope_set(r, top, key, strlen(key), tv_from_json(r, value));
    }
    r->sc = top;
    exec(r, t->root);
    sbuf *b = r->out;
    char *text = realloc(b->p, b->n + 1);
    if (!text) rt_fail(r, "out of memory");
    text[b->n] = '\0';
    *out = text;
    if (out_len) *out_len = b->n;
    r->out = NULL;
    arena_release(&r->arena);
    free(r);
    return 0;
}
