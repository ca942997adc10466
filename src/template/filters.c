/*
 * filters.c - Jinja2's builtin filters and tests, with Hugging Face's tojson.
 *
 * Each filter takes the piped value and the call's arguments, bound by name
 * as Jinja2's Python signatures bind them. Filters that return generators in
 * Jinja2 (map, select, reject, selectattr, rejectattr, items, unique,
 * reverse, batch) return LIST_GEN lists, which like generators are always
 * true and have no length. Not provided: groupby, slice, pprint, random,
 * urlize, urlencode, xmlattr, striptags, wordwrap, filesizeformat.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "template/tmpl_internal.h"

/* ---- arguments ---- */

void args_bind(rt *r, const char *fname, const targs *a, const char *const *names, int n_names, tv *out) {
    for (int i = 0; i < n_names; i++) out[i] = tv_absent();
    if (a->n > n_names) rt_fail(r, "%s() takes at most %d argument%s (%d given)", fname, n_names, n_names == 1 ? "" : "s", a->n);
    for (int i = 0; i < a->n; i++) out[i] = a->pos[i];
    for (int k = 0; k < a->nkw; k++) {
        int idx = -1;
        for (int i = 0; i < n_names; i++)
            if (strlen(names[i]) == a->kw[k].n && memcmp(names[i], a->kw[k].name, a->kw[k].n) == 0) idx = i;
        if (idx < 0) rt_fail(r, "%s() got an unexpected keyword argument '%.*s'", fname, (int)a->kw[k].n, a->kw[k].name);
        if (tv_given(out[idx])) rt_fail(r, "%s() got multiple values for argument '%s'", fname, names[idx]);
        out[idx] = a->kw[k].v;
    }
}

#define BIND(fname, ...)                                                        \
    static const char *const names_[] = {__VA_ARGS__};                          \
    enum { NARGS_ = sizeof names_ / sizeof *names_ };                           \
    tv arg[NARGS_];                                                             \
    args_bind(r, fname, a, names_, NARGS_, arg)

static tv or_default(tv v, tv d) { return tv_given(v) ? v : d; }

static bool arg_bool(rt *r, tv v) { return tv_given(v) && tv_truthy(r, v); }

static int64_t arg_int(rt *r, tv v, int64_t dflt, const char *what) {
    if (!tv_given(v) || v.kind == TV_NONE) return dflt;
    if (v.kind == TV_INT) return v.u.i;
    if (v.kind == TV_BOOL) return v.u.b;
    if (v.kind == TV_UNDEF) tv_undef_fail(r, v);
    rt_fail(r, "'%s' object cannot be interpreted as an integer (%s)", tv_type_name(v), what);
}

static tv soft_str(rt *r, tv v) { return tv_to_str(r, v); }

static void require_positional(rt *r, const char *fname, tv v, const char *name) {
    if (!tv_given(v)) rt_fail(r, "%s() missing 1 required positional argument: '%s'", fname, name);
}

/* Jinja2's make_attrgetter: "a.b.0" looked up item by item (subscript
 * rules), an undefined step replaced by dflt when one is given. */
static tv attr_path_default(rt *r, tv item, tv attribute, tv dflt) {
    bool use_default = tv_given(dflt) && dflt.kind != TV_NONE;
    if (!tv_given(attribute) || attribute.kind == TV_NONE) return item;
    if (attribute.kind != TV_STR) {
        item = rt_getitem(r, item, attribute);
        return (use_default && item.kind == TV_UNDEF) ? dflt : item;
    }
    const char *p = attribute.u.s.p, *end = p + attribute.u.s.n;
    for (;;) {
        const char *dot = memchr(p, '.', (size_t)(end - p));
        const char *e = dot ? dot : end;
        tv part = tv_str(p, (size_t)(e - p));
        int64_t idx;
        bool digits = e > p;
        for (const char *c = p; c < e; c++) digits = digits && *c >= '0' && *c <= '9';
        if (digits && parse_py_int(p, (size_t)(e - p), 10, &idx)) part = tv_int(idx);
        item = rt_getitem(r, item, part);
        if (use_default && item.kind == TV_UNDEF) item = dflt;
        if (!dot) return item;
        p = dot + 1;
    }
}

static tv attr_path(rt *r, tv item, tv attribute) { return attr_path_default(r, item, attribute, tv_absent()); }

/* ---- sorting ---- */

typedef struct sort_item {
    tv key, value;
} sort_item;

static tv lower_if_str(rt *r, tv v, bool case_sensitive) {
    return (!case_sensitive && v.kind == TV_STR) ? str_lower(r, v) : v;
}

static void merge_sort(rt *r, sort_item *v, sort_item *tmp, size_t n, bool reverse) {
    if (n < 2) return;
    size_t h = n / 2;
    merge_sort(r, v, tmp, h, reverse);
    merge_sort(r, v + h, tmp, n - h, reverse);
    size_t i = 0, j = h, k = 0;
    while (i < h && j < n) {
        int c = tv_equal(v[j].key, v[i].key) ? 0 : tv_compare(r, v[j].key, v[i].key, "<");
        /* take from the right only when strictly before (stable); reversed
         * order keeps equal items in their original order, as Python does */
        bool right_first = reverse ? (c > 0 && c != 2) : (c < 0);
        tmp[k++] = right_first ? v[j++] : v[i++];
    }
    while (i < h) tmp[k++] = v[i++];
    while (j < n) tmp[k++] = v[j++];
    memcpy(v, tmp, n * sizeof *v);
}

static void sort_items(rt *r, sort_item *v, size_t n, bool reverse) {
    if (n < 2) return;
    sort_item *tmp = rt_alloc(r, n * sizeof *tmp);
    merge_sort(r, v, tmp, n, reverse);
}

/* make_attrgetter with ignore_case: min, max, unique, groupby */
static tv item_key(rt *r, tv item, tv attribute, bool case_sensitive, tv dflt) {
    return lower_if_str(r, attr_path_default(r, item, attribute, dflt), case_sensitive);
}

/* make_multi_attrgetter: the sort filter's key is a list, one entry per
 * comma-separated attribute, compared as Python compares lists */
static tv multi_key(rt *r, tv item, tv attribute, bool case_sensitive) {
    tv parts;
    if (tv_given(attribute) && attribute.kind == TV_STR) {
        parts = str_split(r, attribute, tv_str(",", 1), -1, false);
    } else {
        parts = tv_list_new(r, 1, LIST_PLAIN);
        parts.u.l->items[0] = tv_given(attribute) ? attribute : tv_none();
    }
    tv key = tv_list_new(r, parts.u.l->n, LIST_PLAIN);
    for (size_t i = 0; i < parts.u.l->n; i++)
        key.u.l->items[i] = item_key(r, item, parts.u.l->items[i], case_sensitive, tv_absent());
    return key;
}

/* ---- filters ---- */

static tv f_abs(rt *r, tv v, const targs *a) {
    (void)a;
    if (v.kind == TV_INT) {
        if (v.u.i == INT64_MIN) rt_fail(r, "integer overflow in abs()");
        return tv_int(v.u.i < 0 ? -v.u.i : v.u.i);
    }
    if (v.kind == TV_BOOL) return tv_int(v.u.b);
    if (v.kind == TV_FLOAT) return tv_float(fabs(v.u.f));
    if (v.kind == TV_UNDEF) tv_undef_fail(r, v);
    rt_fail(r, "bad operand type for abs(): '%s'", tv_type_name(v));
}

static tv f_attr(rt *r, tv v, const targs *a) {
    BIND("attr", "name");
    require_positional(r, "do_attr", arg[0], "name");
    tv name = soft_str(r, arg[0]);
    if (v.kind == TV_NS) {
        tv *x = dict_get(v.u.d, name);
        if (x) return *x;
    } else if (v.kind == TV_UNDEF) {
        tv_undef_fail(r, v);
    } else {
        tv m = tmpl_method(r, v, name.u.s.p, name.u.s.n);
        if (m.kind != TV_UNDEF || m.sub == UNDEF_MSG) return m;
    }
    return tv_undef_attr(v, name.u.s.p, name.u.s.n);
}

static tv f_batch(rt *r, tv v, const targs *a) {
    BIND("batch", "linecount", "fill_with");
    require_positional(r, "do_batch", arg[0], "linecount");
    int64_t n = arg_int(r, arg[0], 1, "linecount");
    if (n <= 0) rt_fail(r, "batch size must be positive");
    tv items = tv_iterate(r, v);
    tvec out = {0};
    size_t total = items.u.l->n;
    for (size_t i = 0; i < total; i += (size_t)n) {
        size_t take = total - i < (size_t)n ? total - i : (size_t)n;
        bool fill = take < (size_t)n && tv_given(arg[1]) && arg[1].kind != TV_NONE;
        tv row = tv_list_new(r, fill ? (size_t)n : take, LIST_PLAIN);
        for (size_t k = 0; k < take; k++) row.u.l->items[k] = items.u.l->items[i + k];
        for (size_t k = take; fill && k < (size_t)n; k++) row.u.l->items[k] = arg[1];
        vec_push(r, &out, row);
    }
    return vec_done(r, &out, LIST_GEN);
}

static tv f_capitalize(rt *r, tv v, const targs *a) {
    (void)a;
    return str_capitalize(r, soft_str(r, v));
}

static tv f_center(rt *r, tv v, const targs *a) {
    BIND("center", "width");
    return str_center(r, soft_str(r, v), arg_int(r, arg[0], 80, "width"), " ", 1, 0);
}

static tv f_default(rt *r, tv v, const targs *a) {
    BIND("default", "default_value", "boolean");
    tv dflt = or_default(arg[0], tv_str("", 0));
    if (v.kind == TV_UNDEF || (arg_bool(r, arg[1]) && !tv_truthy(r, v))) return dflt;
    return v;
}

static tv f_dictsort(rt *r, tv v, const targs *a) {
    BIND("dictsort", "case_sensitive", "by", "reverse");
    if (v.kind != TV_DICT) rt_fail(r, "'%s' object has no attribute 'items'", tv_type_name(v));
    bool cs = arg_bool(r, arg[0]);
    int pos = 0;
    if (tv_given(arg[1])) {
        tv by = arg[1];
        if (by.kind == TV_STR && by.u.s.n == 5 && memcmp(by.u.s.p, "value", 5) == 0) pos = 1;
        else if (!(by.kind == TV_STR && by.u.s.n == 3 && memcmp(by.u.s.p, "key", 3) == 0))
            rt_fail(r, "You can only sort by either \"key\" or \"value\"");
    }
    size_t n = v.u.d->n;
    sort_item *items = rt_alloc(r, (n + 1) * sizeof *items);
    for (size_t i = 0; i < n; i++) {
        tv pair = tv_list_new(r, 2, LIST_TUPLE);
        pair.u.l->items[0] = v.u.d->keys[i];
        pair.u.l->items[1] = v.u.d->vals[i];
        items[i].value = pair;
        items[i].key = lower_if_str(r, pair.u.l->items[pos], cs);
    }
    sort_items(r, items, n, arg_bool(r, arg[2]));
    tv out = tv_list_new(r, n, LIST_PLAIN);
    for (size_t i = 0; i < n; i++) out.u.l->items[i] = items[i].value;
    return out;
}

/* (grouper, list) tuples, sorted and grouped by the attribute; the grouper
 * keeps the case of the group's first item */
static tv f_groupby(rt *r, tv v, const targs *a) {
    BIND("groupby", "attribute", "default", "case_sensitive");
    require_positional(r, "do_groupby", arg[0], "attribute");
    bool cs = arg_bool(r, arg[2]);
    tv items = tv_iterate(r, v);
    size_t n = items.u.l->n;
    sort_item *s = rt_alloc(r, (n + 1) * sizeof *s);
    for (size_t i = 0; i < n; i++) {
        s[i].value = items.u.l->items[i];
        s[i].key = item_key(r, s[i].value, arg[0], cs, arg[1]);
    }
    sort_items(r, s, n, false);
    tvec groups = {0};
    for (size_t i = 0; i < n;) {
        size_t j = i + 1;
        while (j < n && tv_equal(s[j].key, s[i].key)) j++;
        tv members = tv_list_new(r, j - i, LIST_PLAIN);
        for (size_t k = i; k < j; k++) members.u.l->items[k - i] = s[k].value;
        tv g = tv_list_new(r, 2, LIST_TUPLE);
        g.u.l->items[0] = cs ? s[i].key : attr_path_default(r, s[i].value, arg[0], arg[1]);
        g.u.l->items[1] = members;
        vec_push(r, &groups, g);
        i = j;
    }
    return vec_done(r, &groups, LIST_PLAIN);
}

static tv html_escape(rt *r, tv s) {
    tstrb b = {0};
    for (size_t i = 0; i < s.u.s.n; i++) {
        char c = s.u.s.p[i];
        switch (c) {
        case '&': sb_put(r, &b, "&amp;", 5); break;
        case '<': sb_put(r, &b, "&lt;", 4); break;
        case '>': sb_put(r, &b, "&gt;", 4); break;
        case '"': sb_put(r, &b, "&#34;", 5); break;
        case '\'': sb_put(r, &b, "&#39;", 5); break;
        default: sb_putc(r, &b, c);
        }
    }
    return sb_done(&b);
}

static tv f_escape(rt *r, tv v, const targs *a) {
    (void)a;
    return html_escape(r, soft_str(r, v));
}

static tv f_first(rt *r, tv v, const targs *a) {
    (void)a;
    tv items = tv_iterate(r, v);
    if (!items.u.l->n) return tv_undef_msg(r, "No first item, sequence was empty.");
    return items.u.l->items[0];
}

static tv f_last(rt *r, tv v, const targs *a) {
    (void)a;
    if ((v.kind == TV_LIST && v.sub == LIST_GEN) || !(v.kind == TV_LIST || v.kind == TV_STR || v.kind == TV_DICT || v.kind == TV_UNDEF))
        rt_fail(r, "'%s' object is not reversible", tv_type_name(v));
    tv items = tv_iterate(r, v);
    if (!items.u.l->n) return tv_undef_msg(r, "No last item, sequence was empty.");
    return items.u.l->items[items.u.l->n - 1];
}

static tv f_float(rt *r, tv v, const targs *a) {
    BIND("float", "default");
    tv dflt = or_default(arg[0], tv_float(0.0));
    switch (v.kind) {
    case TV_FLOAT: return v;
    case TV_INT: return tv_float((double)v.u.i);
    case TV_BOOL: return tv_float(v.u.b);
    case TV_STR: {
        double f;
        return parse_py_float(v.u.s.p, v.u.s.n, &f) ? tv_float(f) : dflt;
    }
    case TV_UNDEF: tv_undef_fail(r, v);
    default: return dflt;
    }
}

static tv f_format(rt *r, tv v, const targs *a) {
    tv fmt = soft_str(r, v);
    if (a->nkw) {
        if (a->n) rt_fail(r, "can't handle positional and keyword arguments at the same time");
        tv d = tv_dict_new(r, (size_t)a->nkw, TV_DICT);
        for (int k = 0; k < a->nkw; k++) dict_set(r, d.u.d, tv_str(a->kw[k].name, a->kw[k].n), a->kw[k].v);
        return py_percent_format(r, fmt, d);
    }
    tv args = tv_list_new(r, (size_t)a->n, LIST_TUPLE);
    for (int i = 0; i < a->n; i++) args.u.l->items[i] = a->pos[i];
    return py_percent_format(r, fmt, args);
}

static tv f_indent(rt *r, tv v, const targs *a) {
    BIND("indent", "width", "first", "blank");
    tv ind;
    if (tv_given(arg[0]) && arg[0].kind == TV_STR) ind = arg[0];
    else ind = str_repeat(r, tv_str(" ", 1), arg_int(r, arg[0], 4, "width"));
    if (v.kind == TV_UNDEF) tv_undef_fail(r, v);
    if (v.kind == TV_LIST && (v.sub == LIST_PLAIN)) rt_fail(r, "'list' object has no attribute 'splitlines'");
    if (v.kind != TV_STR) rt_fail(r, "unsupported operand type(s) for +=: '%s' and 'str'", tv_type_name(v));
    tv s = v;
    tstrb tmp = {0};
    sb_put(r, &tmp, s.u.s.p, s.u.s.n);
    sb_putc(r, &tmp, '\n');
    tv lines = str_splitlines(r, sb_done(&tmp), false);
    tstrb b = {0};
    if (arg_bool(r, arg[2])) {
        for (size_t i = 0; i < lines.u.l->n; i++) {
            if (i) {
                sb_putc(r, &b, '\n');
                sb_put(r, &b, ind.u.s.p, ind.u.s.n);
            }
            sb_put(r, &b, lines.u.l->items[i].u.s.p, lines.u.l->items[i].u.s.n);
        }
    } else {
        for (size_t i = 0; i < lines.u.l->n; i++) {
            tv line = lines.u.l->items[i];
            if (i) {
                sb_putc(r, &b, '\n');
                if (line.u.s.n) sb_put(r, &b, ind.u.s.p, ind.u.s.n);
            }
            sb_put(r, &b, line.u.s.p, line.u.s.n);
        }
    }
    if (arg_bool(r, arg[1])) {
        tstrb c = {0};
        sb_put(r, &c, ind.u.s.p, ind.u.s.n);
        sb_put(r, &c, b.p, b.n);
        return sb_done(&c);
    }
    return sb_done(&b);
}

static tv f_int(rt *r, tv v, const targs *a) {
    BIND("int", "default", "base");
    tv dflt = or_default(arg[0], tv_int(0));
    int64_t base = arg_int(r, arg[1], 10, "base");
    switch (v.kind) {
    case TV_INT: return v;
    case TV_BOOL: return tv_int(v.u.b);
    case TV_FLOAT:
        if (isinf(v.u.f)) rt_fail(r, "cannot convert float infinity to integer");
        if (isnan(v.u.f)) return dflt;
        if (fabs(v.u.f) >= 9.2233720368547758e18) rt_fail(r, "integer overflow converting float to int");
        return tv_int((int64_t)v.u.f);
    case TV_STR: {
        int64_t i;
        double f;
        if (base >= 2 && base <= 36 && parse_py_int(v.u.s.p, v.u.s.n, (int)base, &i)) return tv_int(i);
        if (parse_py_float(v.u.s.p, v.u.s.n, &f)) {
            if (isinf(f)) rt_fail(r, "cannot convert float infinity to integer");
            if (isnan(f) || fabs(f) >= 9.2233720368547758e18) return dflt;
            return tv_int((int64_t)f);
        }
        return dflt;
    }
    case TV_UNDEF: tv_undef_fail(r, v);
    default: return dflt;
    }
}

static tv f_items(rt *r, tv v, const targs *a) {
    (void)a;
    if (v.kind == TV_UNDEF) return tv_list_new(r, 0, LIST_GEN);
    if (v.kind != TV_DICT) rt_fail(r, "Can only get item pairs from a mapping.");
    tv out = tv_list_new(r, v.u.d->n, LIST_GEN);
    for (size_t i = 0; i < v.u.d->n; i++) {
        tv pair = tv_list_new(r, 2, LIST_TUPLE);
        pair.u.l->items[0] = v.u.d->keys[i];
        pair.u.l->items[1] = v.u.d->vals[i];
        out.u.l->items[i] = pair;
    }
    return out;
}

static tv f_join(rt *r, tv v, const targs *a) {
    BIND("join", "d", "attribute");
    tv sep = soft_str(r, or_default(arg[0], tv_str("", 0)));
    tv items = tv_iterate(r, v);
    tstrb b = {0};
    for (size_t i = 0; i < items.u.l->n; i++) {
        if (i) sb_put(r, &b, sep.u.s.p, sep.u.s.n);
        tv x = items.u.l->items[i];
        if (tv_given(arg[1]) && arg[1].kind != TV_NONE) x = attr_path(r, x, arg[1]);
        tv_write_str(r, &b, x);
    }
    return sb_done(&b);
}

static tv f_length(rt *r, tv v, const targs *a) {
    (void)a;
    return tv_int(tv_len(r, v));
}

static tv f_list(rt *r, tv v, const targs *a) {
    (void)a;
    tv items = tv_iterate(r, v);
    tv out = tv_list_new(r, items.u.l->n, LIST_PLAIN);
    if (items.u.l->n) memcpy(out.u.l->items, items.u.l->items, items.u.l->n * sizeof(tv));
    return out;
}

static tv f_lower(rt *r, tv v, const targs *a) {
    (void)a;
    return str_lower(r, soft_str(r, v));
}

static tv f_map(rt *r, tv v, const targs *a) {
    if (!tv_truthy(r, v)) return tv_list_new(r, 0, LIST_GEN); /* Jinja2 skips falsy input */
    tv items = tv_iterate(r, v);
    tv out = tv_list_new(r, items.u.l->n, LIST_GEN);
    if (a->n == 0) {
        tv attribute = tv_absent(), dflt = tv_none();
        for (int k = 0; k < a->nkw; k++) {
            if (a->kw[k].n == 9 && memcmp(a->kw[k].name, "attribute", 9) == 0) attribute = a->kw[k].v;
            else if (a->kw[k].n == 7 && memcmp(a->kw[k].name, "default", 7) == 0) dflt = a->kw[k].v;
            else rt_fail(r, "Unexpected keyword argument '%.*s'", (int)a->kw[k].n, a->kw[k].name);
        }
        if (!tv_given(attribute)) rt_fail(r, "map requires a filter argument");
        for (size_t i = 0; i < items.u.l->n; i++) out.u.l->items[i] = attr_path_default(r, items.u.l->items[i], attribute, dflt);
        return out;
    }
    tv name = a->pos[0];
    if (name.kind != TV_STR) rt_fail(r, "map requires a filter name");
    targs rest = {a->n - 1, a->pos + 1, a->nkw, a->kw};
    for (size_t i = 0; i < items.u.l->n; i++)
        out.u.l->items[i] = tmpl_apply_filter(r, name.u.s.p, name.u.s.n, items.u.l->items[i], &rest);
    return out;
}

static tv min_max(rt *r, tv v, const targs *a, bool want_max) {
    BIND(want_max ? "max" : "min", "case_sensitive", "attribute");
    tv items = tv_iterate(r, v);
    if (!items.u.l->n) return tv_undef_msg(r, "No aggregated item, sequence was empty.");
    bool cs = arg_bool(r, arg[0]);
    tv best = items.u.l->items[0], best_key = item_key(r, best, arg[1], cs, tv_absent());
    for (size_t i = 1; i < items.u.l->n; i++) {
        tv k = item_key(r, items.u.l->items[i], arg[1], cs, tv_absent());
        int c = tv_compare(r, k, best_key, want_max ? ">" : "<");
        if (c != 2 && (want_max ? c > 0 : c < 0)) {
            best = items.u.l->items[i];
            best_key = k;
        }
    }
    return best;
}

static tv f_max(rt *r, tv v, const targs *a) { return min_max(r, v, a, true); }
static tv f_min(rt *r, tv v, const targs *a) { return min_max(r, v, a, false); }

static tv select_or_reject(rt *r, tv v, const targs *a, bool by_attr, bool keep_if) {
    if (!tv_truthy(r, v)) return tv_list_new(r, 0, LIST_GEN); /* Jinja2 skips falsy input */
    tv items = tv_iterate(r, v);
    int off = 0;
    tv attribute = tv_absent();
    if (by_attr) {
        if (a->n < 1) rt_fail(r, "Missing parameter for attribute name");
        attribute = a->pos[0];
        off = 1;
    }
    bool have_test = a->n > off;
    tv test = have_test ? a->pos[off] : tv_none();
    if (have_test && test.kind != TV_STR) rt_fail(r, "test name must be a string");
    targs rest = {have_test ? a->n - off - 1 : 0, a->pos + off + (have_test ? 1 : 0), a->nkw, a->kw};
    tvec out = {0};
    for (size_t i = 0; i < items.u.l->n; i++) {
        tv item = items.u.l->items[i];
        tv x = by_attr ? attr_path(r, item, attribute) : item;
        bool ok = have_test ? tmpl_apply_test(r, test.u.s.p, test.u.s.n, x, &rest) : tv_truthy(r, x);
        if (ok == keep_if) vec_push(r, &out, item);
    }
    return vec_done(r, &out, LIST_GEN);
}

static tv f_select(rt *r, tv v, const targs *a) { return select_or_reject(r, v, a, false, true); }
static tv f_reject(rt *r, tv v, const targs *a) { return select_or_reject(r, v, a, false, false); }
static tv f_selectattr(rt *r, tv v, const targs *a) { return select_or_reject(r, v, a, true, true); }
static tv f_rejectattr(rt *r, tv v, const targs *a) { return select_or_reject(r, v, a, true, false); }

static tv f_replace(rt *r, tv v, const targs *a) {
    BIND("replace", "old", "new", "count");
    require_positional(r, "do_replace", arg[0], "old");
    require_positional(r, "do_replace", arg[1], "new");
    return str_replace(r, soft_str(r, v), soft_str(r, arg[0]), soft_str(r, arg[1]), arg_int(r, arg[2], -1, "count"));
}

static tv f_reverse(rt *r, tv v, const targs *a) {
    (void)a;
    if (v.kind == TV_STR) return str_slice(r, v, tv_none(), tv_none(), tv_int(-1));
    if (!(v.kind == TV_LIST || v.kind == TV_DICT || v.kind == TV_UNDEF)) rt_fail(r, "argument must be iterable");
    tv items = tv_iterate(r, v);
    size_t n = items.u.l->n;
    tv out = tv_list_new(r, n, LIST_GEN);
    for (size_t i = 0; i < n; i++) out.u.l->items[i] = items.u.l->items[n - 1 - i];
    return out;
}

/* Python's round(x, ndigits): correctly rounded, ties to even. */
static double py_round(double x, int64_t nd) {
    if (!isfinite(x)) return x;
    if (nd > 300) return x;
    if (nd >= 0) {
        char buf[400];
        snprintf(buf, sizeof buf, "%.*f", (int)nd, x);
        return strtod(buf, NULL);
    }
    if (nd < -308) return copysign(0.0, x);
    double p = pow(10.0, (double)-nd);
    double y = rint(x / p) * p;
    return y;
}

static tv f_round(rt *r, tv v, const targs *a) {
    BIND("round", "precision", "method");
    int64_t prec = arg_int(r, arg[0], 0, "precision");
    const char *method = "common";
    if (tv_given(arg[1])) {
        tv m = arg[1];
        if (m.kind == TV_STR && m.u.s.n == 4 && memcmp(m.u.s.p, "ceil", 4) == 0) method = "ceil";
        else if (m.kind == TV_STR && m.u.s.n == 5 && memcmp(m.u.s.p, "floor", 5) == 0) method = "floor";
        else if (!(m.kind == TV_STR && m.u.s.n == 6 && memcmp(m.u.s.p, "common", 6) == 0))
            rt_fail(r, "method must be common, ceil or floor");
    }
    if (v.kind == TV_UNDEF) tv_undef_fail(r, v);
    if (!tv_is_num(v)) rt_fail(r, "type %s doesn't define __round__ method", tv_type_name(v));
    if (method[0] == 'c' && method[1] == 'o') {
        if (v.kind != TV_FLOAT) {
            int64_t x = v.kind == TV_BOOL ? v.u.b : v.u.i;
            if (prec >= 0) return tv_int(x);
            return tv_int((int64_t)py_round((double)x, prec));
        }
        return tv_float(py_round(v.u.f, prec));
    }
    double p = pow(10.0, (double)prec), x = tv_num(v) * p;
    return tv_float((method[0] == 'c' ? ceil(x) : floor(x)) / p);
}

static tv f_safe(rt *r, tv v, const targs *a) {
    (void)a;
    return soft_str(r, v);
}

static tv f_sort(rt *r, tv v, const targs *a) {
    BIND("sort", "reverse", "case_sensitive", "attribute");
    tv items = tv_iterate(r, v);
    size_t n = items.u.l->n;
    sort_item *s = rt_alloc(r, (n + 1) * sizeof *s);
    bool cs = arg_bool(r, arg[1]);
    for (size_t i = 0; i < n; i++) {
        s[i].value = items.u.l->items[i];
        s[i].key = multi_key(r, s[i].value, arg[2], cs);
    }
    sort_items(r, s, n, arg_bool(r, arg[0]));
    tv out = tv_list_new(r, n, LIST_PLAIN);
    for (size_t i = 0; i < n; i++) out.u.l->items[i] = s[i].value;
    return out;
}

static tv f_string(rt *r, tv v, const targs *a) {
    (void)a;
    return soft_str(r, v);
}

static tv f_sum(rt *r, tv v, const targs *a) {
    BIND("sum", "attribute", "start");
    tv total = or_default(arg[1], tv_int(0));
    tv items = tv_iterate(r, v);
    for (size_t i = 0; i < items.u.l->n; i++) {
        tv x = items.u.l->items[i];
        if (tv_given(arg[0]) && arg[0].kind != TV_NONE) x = attr_path(r, x, arg[0]);
        total = rt_binop(r, BIN_ADD, total, x);
    }
    return total;
}

static tv f_title(rt *r, tv v, const targs *a) {
    (void)a;
    return str_jinja_title(r, soft_str(r, v));
}

static tv f_tojson(rt *r, tv v, const targs *a) {
    BIND("tojson", "ensure_ascii", "indent", "separators", "sort_keys");
    return tv_to_json(r, v, arg_bool(r, arg[0]), arg[1], arg[2], arg_bool(r, arg[3]));
}

static tv f_trim(rt *r, tv v, const targs *a) {
    BIND("trim", "chars");
    return str_strip(r, soft_str(r, v), or_default(arg[0], tv_none()), 3);
}

static tv f_truncate(rt *r, tv v, const targs *a) {
    BIND("truncate", "length", "killwords", "end", "leeway");
    tv s = soft_str(r, v);
    int64_t length = arg_int(r, arg[0], 255, "length");
    tv end = soft_str(r, or_default(arg[2], tv_str("...", 3)));
    int64_t leeway = arg_int(r, arg[3], 5, "leeway");
    int64_t end_len = (int64_t)utf8_count(end.u.s.p, end.u.s.n);
    if (length < end_len) rt_fail(r, "expected length >= %lld, got %lld", (long long)end_len, (long long)length);
    if (leeway < 0) rt_fail(r, "expected leeway >= 0, got %lld", (long long)leeway);
    int64_t len = (int64_t)utf8_count(s.u.s.p, s.u.s.n);
    if (len <= length + leeway) return s;
    tv head = str_slice(r, s, tv_none(), tv_int(length - end_len), tv_none());
    if (!arg_bool(r, arg[1])) head = str_split(r, head, tv_str(" ", 1), 1, true).u.l->items[0];
    return rt_binop(r, BIN_ADD, head, end);
}

static tv f_unique(rt *r, tv v, const targs *a) {
    BIND("unique", "case_sensitive", "attribute");
    tv items = tv_iterate(r, v);
    bool cs = arg_bool(r, arg[0]);
    tv seen = tv_dict_new(r, 0, TV_DICT);
    tvec out = {0};
    for (size_t i = 0; i < items.u.l->n; i++) {
        tv key = item_key(r, items.u.l->items[i], arg[1], cs, tv_absent());
        if (dict_get(seen.u.d, key)) continue;
        dict_set(r, seen.u.d, key, tv_none());
        vec_push(r, &out, items.u.l->items[i]);
    }
    return vec_done(r, &out, LIST_GEN);
}

static tv f_upper(rt *r, tv v, const targs *a) {
    (void)a;
    return str_upper(r, soft_str(r, v));
}

static bool is_word_char(uint32_t cp) { return cp == '_' || py_isdigit(cp) || py_isalpha(cp); }

static tv f_wordcount(rt *r, tv v, const targs *a) {
    (void)a;
    tv s = soft_str(r, v);
    int64_t count = 0;
    bool in_word = false;
    for (size_t i = 0; i < s.u.s.n;) {
        uint32_t cp;
        i += utf8_next(s.u.s.p + i, s.u.s.n - i, &cp);
        bool w = is_word_char(cp);
        if (w && !in_word) count++;
        in_word = w;
    }
    return tv_int(count);
}

/* ---- tests ---- */

static tv test_arg(rt *r, const char *name, const targs *a) {
    if (a->n < 1) {
        const char *param = strcmp(name, "divisibleby") == 0 ? "num" : strcmp(name, "in") == 0 ? "seq" : "other";
        rt_fail(r, "test_%s() missing 1 required positional argument: '%s'", name, param);
    }
    return a->pos[0];
}

static bool t_boolean(rt *r, tv v, const targs *a) { (void)r, (void)a; return v.kind == TV_BOOL; }
static bool t_callable(rt *r, tv v, const targs *a) {
    (void)r, (void)a;
    return v.kind == TV_FUNC || v.kind == TV_MACRO || v.kind == TV_LOOP || v.kind == TV_UNDEF;
}
static bool t_defined(rt *r, tv v, const targs *a) { (void)r, (void)a; return v.kind != TV_UNDEF; }
static bool t_divisibleby(rt *r, tv v, const targs *a) {
    tv m = rt_binop(r, BIN_MOD, v, test_arg(r, "divisibleby", a));
    return !tv_truthy(r, m);
}
static bool t_eq(rt *r, tv v, const targs *a) { return tv_equal(v, test_arg(r, "eq", a)); }
static bool t_escaped(rt *r, tv v, const targs *a) { (void)r, (void)v, (void)a; return false; }
static bool t_even(rt *r, tv v, const targs *a) {
    (void)a;
    return !tv_truthy(r, rt_binop(r, BIN_MOD, v, tv_int(2)));
}
static bool t_false(rt *r, tv v, const targs *a) { (void)r, (void)a; return v.kind == TV_BOOL && !v.u.b; }
static bool t_filter(rt *r, tv v, const targs *a) {
    (void)r, (void)a;
    return v.kind == TV_STR && tmpl_filter_index(v.u.s.p, v.u.s.n) >= 0;
}
static bool t_float(rt *r, tv v, const targs *a) { (void)r, (void)a; return v.kind == TV_FLOAT; }
static bool t_ge(rt *r, tv v, const targs *a) { return rt_compare_op(r, CMP_GE, v, test_arg(r, "ge", a)); }
static bool t_gt(rt *r, tv v, const targs *a) { return rt_compare_op(r, CMP_GT, v, test_arg(r, "gt", a)); }
static bool t_in(rt *r, tv v, const targs *a) { return rt_compare_op(r, CMP_IN, v, test_arg(r, "in", a)); }
static bool t_integer(rt *r, tv v, const targs *a) { (void)r, (void)a; return v.kind == TV_INT; }
static bool t_iterable(rt *r, tv v, const targs *a) {
    (void)r, (void)a;
    return v.kind == TV_STR || v.kind == TV_LIST || v.kind == TV_DICT || v.kind == TV_UNDEF;
}
static bool t_le(rt *r, tv v, const targs *a) { return rt_compare_op(r, CMP_LE, v, test_arg(r, "le", a)); }
static bool t_lower(rt *r, tv v, const targs *a) {
    (void)a;
    tv s = soft_str(r, v);
    bool cased = false;
    for (size_t i = 0; i < s.u.s.n;) {
        uint32_t cp;
        i += utf8_next(s.u.s.p + i, s.u.s.n - i, &cp);
        if (py_lower(cp) != cp) return false;
        if (py_upper(cp) != cp) cased = true;
    }
    return cased;
}
static bool t_lt(rt *r, tv v, const targs *a) { return rt_compare_op(r, CMP_LT, v, test_arg(r, "lt", a)); }
static bool t_mapping(rt *r, tv v, const targs *a) { (void)r, (void)a; return v.kind == TV_DICT; }
static bool t_ne(rt *r, tv v, const targs *a) { return !tv_equal(v, test_arg(r, "ne", a)); }
static bool t_none(rt *r, tv v, const targs *a) { (void)r, (void)a; return v.kind == TV_NONE; }
static bool t_number(rt *r, tv v, const targs *a) { (void)r, (void)a; return tv_is_num(v); }
static bool t_odd(rt *r, tv v, const targs *a) {
    (void)a;
    return tv_truthy(r, rt_binop(r, BIN_MOD, v, tv_int(2)));
}
static bool t_sameas(rt *r, tv v, const targs *a) {
    tv o = test_arg(r, "sameas", a);
    if (v.kind != o.kind) return false;
    switch (v.kind) {
    case TV_NONE: return true;
    case TV_BOOL: return v.u.b == o.u.b;
    case TV_INT: return v.u.i == o.u.i && v.u.i >= -5 && v.u.i <= 256; /* CPython's cached ints */
    case TV_STR: return v.u.s.p == o.u.s.p && v.u.s.n == o.u.s.n;
    case TV_LIST: return v.u.l == o.u.l;
    case TV_DICT:
    case TV_NS: return v.u.d == o.u.d;
    case TV_FUNC: return v.u.fn == o.u.fn;
    case TV_MACRO: return v.u.m == o.u.m;
    case TV_LOOP: return v.u.lp == o.u.lp;
    default: return false;
    }
}
static bool t_sequence(rt *r, tv v, const targs *a) {
    (void)r, (void)a;
    return v.kind == TV_STR || v.kind == TV_DICT || v.kind == TV_UNDEF ||
           (v.kind == TV_LIST && (v.sub == LIST_PLAIN || v.sub == LIST_TUPLE || v.sub == LIST_RANGE));
}
static bool t_string(rt *r, tv v, const targs *a) { (void)r, (void)a; return v.kind == TV_STR; }
static bool t_test(rt *r, tv v, const targs *a) {
    (void)r, (void)a;
    return v.kind == TV_STR && tmpl_test_index(v.u.s.p, v.u.s.n) >= 0;
}
static bool t_true(rt *r, tv v, const targs *a) { (void)r, (void)a; return v.kind == TV_BOOL && v.u.b; }
static bool t_undefined(rt *r, tv v, const targs *a) { (void)r, (void)a; return v.kind == TV_UNDEF; }
static bool t_upper(rt *r, tv v, const targs *a) {
    (void)a;
    tv s = soft_str(r, v);
    bool cased = false;
    for (size_t i = 0; i < s.u.s.n;) {
        uint32_t cp;
        i += utf8_next(s.u.s.p + i, s.u.s.n - i, &cp);
        if (py_upper(cp) != cp) return false;
        if (py_lower(cp) != cp) cased = true;
    }
    return cased;
}

/* ---- tables ---- */

typedef struct filter_def {
    const char *name;
    tmpl_filter_fn fn;
} filter_def;

typedef struct test_def {
    const char *name;
    tmpl_test_fn fn;
} test_def;

/* Tests that take no argument besides the value. */
static bool test_takes_no_args(tmpl_test_fn fn) {
    return fn == t_boolean || fn == t_callable || fn == t_defined || fn == t_escaped || fn == t_even || fn == t_false ||
           fn == t_filter || fn == t_float || fn == t_integer || fn == t_iterable || fn == t_lower || fn == t_mapping ||
           fn == t_none || fn == t_number || fn == t_odd || fn == t_sequence || fn == t_string || fn == t_test ||
           fn == t_true || fn == t_undefined || fn == t_upper;
}

static bool call_test(rt *r, const test_def *t, tv v, const targs *a) {
    int max = test_takes_no_args(t->fn) ? 0 : 1;
    if (a->nkw) rt_fail(r, "test_%s() got an unexpected keyword argument '%.*s'", t->name, (int)a->kw[0].n, a->kw[0].name);
    if (a->n > max)
        rt_fail(r, "test_%s() takes %d positional argument%s but %d were given", t->name, max + 1, max ? "s" : "", a->n + 1);
    return t->fn(r, v, a);
}

static const filter_def FILTERS[] = {
    {"abs", f_abs},         {"attr", f_attr},           {"batch", f_batch},     {"capitalize", f_capitalize},
    {"center", f_center},   {"count", f_length},        {"d", f_default},       {"default", f_default},
    {"dictsort", f_dictsort}, {"e", f_escape},          {"escape", f_escape},   {"first", f_first},
    {"float", f_float},     {"forceescape", f_escape},  {"format", f_format},   {"groupby", f_groupby},   {"indent", f_indent},
    {"int", f_int},         {"items", f_items},         {"join", f_join},       {"last", f_last},
    {"length", f_length},   {"list", f_list},           {"lower", f_lower},     {"map", f_map},
    {"max", f_max},         {"min", f_min},             {"reject", f_reject},   {"rejectattr", f_rejectattr},
    {"replace", f_replace}, {"reverse", f_reverse},     {"round", f_round},     {"safe", f_safe},
    {"select", f_select},   {"selectattr", f_selectattr}, {"sort", f_sort},     {"string", f_string},
    {"sum", f_sum},         {"title", f_title},         {"tojson", f_tojson},   {"trim", f_trim},
    {"truncate", f_truncate}, {"unique", f_unique},     {"upper", f_upper},     {"wordcount", f_wordcount},
};

static const test_def TESTS[] = {
    {"!=", t_ne},          {"<", t_lt},           {"<=", t_le},         {"==", t_eq},
    {">", t_gt},           {">=", t_ge},          {"boolean", t_boolean}, {"callable", t_callable},
    {"defined", t_defined}, {"divisibleby", t_divisibleby}, {"eq", t_eq}, {"equalto", t_eq},
    {"escaped", t_escaped}, {"even", t_even},     {"false", t_false},   {"filter", t_filter},
    {"float", t_float},    {"ge", t_ge},          {"greaterthan", t_gt}, {"gt", t_gt},
    {"in", t_in},          {"integer", t_integer}, {"iterable", t_iterable}, {"le", t_le},
    {"lessthan", t_lt},    {"lower", t_lower},    {"lt", t_lt},         {"mapping", t_mapping},
    {"ne", t_ne},          {"none", t_none},      {"number", t_number}, {"odd", t_odd},
    {"sameas", t_sameas},  {"sequence", t_sequence}, {"string", t_string}, {"test", t_test},
    {"true", t_true},      {"undefined", t_undefined}, {"upper", t_upper},
};

static bool def_name_eq(const char *def, const char *name, size_t n) { return strlen(def) == n && memcmp(def, name, n) == 0; }

int tmpl_filter_index(const char *name, size_t n) {
    for (size_t i = 0; i < sizeof FILTERS / sizeof *FILTERS; i++)
        if (def_name_eq(FILTERS[i].name, name, n)) return (int)i;
    return -1;
}

int tmpl_test_index(const char *name, size_t n) {
    for (size_t i = 0; i < sizeof TESTS / sizeof *TESTS; i++)
        if (def_name_eq(TESTS[i].name, name, n)) return (int)i;
    return -1;
}

tmpl_filter_fn tmpl_filter_at(int i) { return FILTERS[i].fn; }
bool tmpl_call_test(rt *r, int i, tv v, const targs *a) { return call_test(r, &TESTS[i], v, a); }

tv tmpl_apply_filter(rt *r, const char *name, size_t n, tv v, const targs *a) {
    int i = tmpl_filter_index(name, n);
    if (i < 0) rt_fail(r, "No filter named '%.*s'.", (int)n, name);
    return FILTERS[i].fn(r, v, a);
}

bool tmpl_apply_test(rt *r, const char *name, size_t n, tv v, const targs *a) {
    int i = tmpl_test_index(name, n);
    if (i < 0) rt_fail(r, "No test named '%.*s'.", (int)n, name);
    return call_test(r, &TESTS[i], v, a);
}
