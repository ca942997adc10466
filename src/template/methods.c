/*
 * methods.c - what templates can call besides filters: the methods of str,
 * dict, list and tuple values (with the immutable sandbox refusing the ones
 * that modify) and the globals range, dict, namespace, joiner, cycler, plus
 * Hugging Face's raise_exception and strftime_now. Formatting itself is in
 * format.c.
 */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "template/tmpl_internal.h"

#define MAX_RANGE 100000

static bool str_eq(const char *a, size_t an, const char *b) { return strlen(b) == an && memcmp(a, b, an) == 0; }

static void no_kwargs(rt *r, const char *name, const targs *a) {
    if (a->nkw) rt_fail(r, "%s() takes no keyword arguments", name);
}

static void nargs(rt *r, const char *name, const targs *a, int lo, int hi) {
    no_kwargs(r, name, a);
    if (a->n < lo || a->n > hi) {
        if (lo == hi) rt_fail(r, "%s() takes exactly %d argument%s (%d given)", name, lo, lo == 1 ? "" : "s", a->n);
        if (a->n < lo) rt_fail(r, "%s() takes at least %d argument%s (%d given)", name, lo, lo == 1 ? "" : "s", a->n);
        rt_fail(r, "%s() takes at most %d argument%s (%d given)", name, hi, hi == 1 ? "" : "s", a->n);
    }
}

static tv str_arg(rt *r, const char *fname, tv v, int index) {
    if (v.kind == TV_STR) return v;
    if (v.kind == TV_UNDEF) tv_undef_fail(r, v);
    rt_fail(r, "%s() argument %d must be str, not %s", fname, index, tv_type_name(v));
}

static int64_t int_arg(rt *r, tv v) {
    if (v.kind == TV_INT) return v.u.i;
    if (v.kind == TV_BOOL) return v.u.b;
    if (v.kind == TV_UNDEF) tv_undef_fail(r, v);
    rt_fail(r, "'%s' object cannot be interpreted as an integer", tv_type_name(v));
}

/* ---- str methods ---- */

typedef tv (*method_fn)(rt *r, tv self, const targs *a);

static tv sm_upper(rt *r, tv s, const targs *a) { nargs(r, "upper", a, 0, 0); return str_upper(r, s); }
static tv sm_lower(rt *r, tv s, const targs *a) { nargs(r, "lower", a, 0, 0); return str_lower(r, s); }
static tv sm_title(rt *r, tv s, const targs *a) { nargs(r, "title", a, 0, 0); return str_title(r, s); }
static tv sm_capitalize(rt *r, tv s, const targs *a) { nargs(r, "capitalize", a, 0, 0); return str_capitalize(r, s); }

static tv sm_swapcase(rt *r, tv s, const targs *a) {
    nargs(r, "swapcase", a, 0, 0);
    tstrb b = {0};
    for (size_t i = 0; i < s.u.s.n;) {
        uint32_t cp;
        i += utf8_next(s.u.s.p + i, s.u.s.n - i, &cp);
        uint32_t u = py_upper(cp), l = py_lower(cp);
        char buf[4];
        sb_put(r, &b, buf, utf8_put(u != cp ? u : l, buf));
    }
    return sb_done(&b);
}

static tv strip_common(rt *r, tv s, const targs *a, const char *name, int which) {
    nargs(r, name, a, 0, 1);
    return str_strip(r, s, a->n ? a->pos[0] : tv_none(), which);
}
static tv sm_strip(rt *r, tv s, const targs *a) { return strip_common(r, s, a, "strip", 3); }
static tv sm_lstrip(rt *r, tv s, const targs *a) { return strip_common(r, s, a, "lstrip", 1); }
static tv sm_rstrip(rt *r, tv s, const targs *a) { return strip_common(r, s, a, "rstrip", 2); }

static tv split_common(rt *r, tv s, const targs *a, bool right) {
    const char *const names[] = {"sep", "maxsplit"};
    tv arg[2];
    args_bind(r, right ? "rsplit" : "split", a, names, 2, arg);
    tv sep = tv_given(arg[0]) ? arg[0] : tv_none();
    if (sep.kind != TV_NONE && sep.kind != TV_STR) rt_fail(r, "must be str or None, not %s", tv_type_name(sep));
    int64_t maxsplit = tv_given(arg[1]) ? int_arg(r, arg[1]) : -1;
    return str_split(r, s, sep, maxsplit, right);
}
static tv sm_split(rt *r, tv s, const targs *a) { return split_common(r, s, a, false); }
static tv sm_rsplit(rt *r, tv s, const targs *a) { return split_common(r, s, a, true); }

static tv sm_splitlines(rt *r, tv s, const targs *a) {
    const char *const names[] = {"keepends"};
    tv arg[1];
    args_bind(r, "splitlines", a, names, 1, arg);
    return str_splitlines(r, s, tv_given(arg[0]) && tv_truthy(r, arg[0]));
}

static tv sm_replace(rt *r, tv s, const targs *a) {
    nargs(r, "replace", a, 2, 3);
    tv old = str_arg(r, "replace", a->pos[0], 1), new_ = str_arg(r, "replace", a->pos[1], 2);
    return str_replace(r, s, old, new_, a->n > 2 ? int_arg(r, a->pos[2]) : -1);
}

/* start/end arguments narrow s to a code point range; *offset gets the start */
static tv sub_range(rt *r, tv s, const targs *a, int first, int64_t *offset) {
    tv start = a->n > first ? a->pos[first] : tv_none(), end = a->n > first + 1 ? a->pos[first + 1] : tv_none();
    *offset = 0;
    if (start.kind == TV_NONE && end.kind == TV_NONE) return s;
    int64_t len = (int64_t)utf8_count(s.u.s.p, s.u.s.n), lo, st;
    py_slice_indices(r, len, start, end, tv_none(), &lo, &st);
    *offset = lo;
    tv sub = str_slice(r, s, start, end, tv_none());
    return sub;
}

static bool affix_match(rt *r, tv s, tv affix, bool at_end, const char *name) {
    if (affix.kind == TV_LIST && affix.sub == LIST_TUPLE) {
        for (size_t i = 0; i < affix.u.l->n; i++)
            if (affix_match(r, s, affix.u.l->items[i], at_end, name)) return true;
        return false;
    }
    if (affix.kind != TV_STR) {
        if (affix.kind == TV_UNDEF) tv_undef_fail(r, affix);
        rt_fail(r, "%s first arg must be str or a tuple of str, not %s", name, tv_type_name(affix));
    }
    if (affix.u.s.n > s.u.s.n) return false;
    const char *p = at_end ? s.u.s.p + s.u.s.n - affix.u.s.n : s.u.s.p;
    return memcmp(p, affix.u.s.p, affix.u.s.n) == 0;
}

static tv sm_startswith(rt *r, tv s, const targs *a) {
    nargs(r, "startswith", a, 1, 3);
    int64_t off;
    return tv_bool(affix_match(r, sub_range(r, s, a, 1, &off), a->pos[0], false, "startswith"));
}

static tv sm_endswith(rt *r, tv s, const targs *a) {
    nargs(r, "endswith", a, 1, 3);
    int64_t off;
    return tv_bool(affix_match(r, sub_range(r, s, a, 1, &off), a->pos[0], true, "endswith"));
}

static int64_t find_cp(tv hay, tv needle, bool right) {
    const char *h = hay.u.s.p, *nd = needle.u.s.p;
    size_t hn = hay.u.s.n, nn = needle.u.s.n;
    if (nn > hn) return -1;
    if (!right) {
        for (size_t i = 0; i + nn <= hn; i++)
            if (memcmp(h + i, nd, nn) == 0) return (int64_t)utf8_count(h, i);
    } else {
        for (size_t i = hn - nn + 1; i-- > 0;)
            if (memcmp(h + i, nd, nn) == 0) return (int64_t)utf8_count(h, i);
    }
    return -1;
}

static tv plain_str_arg(rt *r, tv v) {
    if (v.kind == TV_STR) return v;
    if (v.kind == TV_UNDEF) tv_undef_fail(r, v);
    rt_fail(r, "must be str, not %s", tv_type_name(v));
}

static tv find_common(rt *r, tv s, const targs *a, const char *name, bool right, bool raise) {
    nargs(r, name, a, 1, 3);
    tv sub = plain_str_arg(r, a->pos[0]);
    int64_t off;
    tv hay = sub_range(r, s, a, 1, &off);
    int64_t i = find_cp(hay, sub, right);
    if (i < 0) {
        if (raise) rt_fail(r, "substring not found");
        return tv_int(-1);
    }
    return tv_int(i + off);
}
static tv sm_find(rt *r, tv s, const targs *a) { return find_common(r, s, a, "find", false, false); }
static tv sm_rfind(rt *r, tv s, const targs *a) { return find_common(r, s, a, "rfind", true, false); }
static tv sm_index(rt *r, tv s, const targs *a) { return find_common(r, s, a, "index", false, true); }
static tv sm_rindex(rt *r, tv s, const targs *a) { return find_common(r, s, a, "rindex", true, true); }

static tv sm_count(rt *r, tv s, const targs *a) {
    nargs(r, "count", a, 1, 3);
    tv sub = plain_str_arg(r, a->pos[0]);
    int64_t off;
    tv hay = sub_range(r, s, a, 1, &off);
    if (sub.u.s.n == 0) return tv_int((int64_t)utf8_count(hay.u.s.p, hay.u.s.n) + 1);
    int64_t c = 0;
    for (size_t i = 0; i + sub.u.s.n <= hay.u.s.n;) {
        if (memcmp(hay.u.s.p + i, sub.u.s.p, sub.u.s.n) == 0) {
            c++;
            i += sub.u.s.n;
        } else {
            i++;
        }
    }
    return tv_int(c);
}

static tv sm_join(rt *r, tv s, const targs *a) {
    nargs(r, "join", a, 1, 1);
    tv items = tv_iterate(r, a->pos[0]);
    tstrb b = {0};
    for (size_t i = 0; i < items.u.l->n; i++) {
        tv x = items.u.l->items[i];
        if (x.kind != TV_STR) rt_fail(r, "sequence item %zu: expected str instance, %s found", i, tv_type_name(x));
        if (i) sb_put(r, &b, s.u.s.p, s.u.s.n);
        sb_put(r, &b, x.u.s.p, x.u.s.n);
    }
    return sb_done(&b);
}

typedef bool (*cp_pred)(uint32_t);
static bool is_alnum(uint32_t c) { return py_isalpha(c) || py_isdigit(c); }
static bool is_lower_cp(uint32_t c) { return py_upper(c) != c; }
static bool is_upper_cp(uint32_t c) { return py_lower(c) != c; }

static tv all_chars(rt *r, tv s, const targs *a, const char *name, cp_pred pred) {
    nargs(r, name, a, 0, 0);
    if (!s.u.s.n) return tv_bool(false);
    for (size_t i = 0; i < s.u.s.n;) {
        uint32_t cp;
        i += utf8_next(s.u.s.p + i, s.u.s.n - i, &cp);
        if (!pred(cp)) return tv_bool(false);
    }
    return tv_bool(true);
}
static tv sm_isdigit(rt *r, tv s, const targs *a) { return all_chars(r, s, a, "isdigit", py_isdigit); }
static tv sm_isalpha(rt *r, tv s, const targs *a) { return all_chars(r, s, a, "isalpha", py_isalpha); }
static tv sm_isalnum(rt *r, tv s, const targs *a) { return all_chars(r, s, a, "isalnum", is_alnum); }
static tv sm_isspace(rt *r, tv s, const targs *a) { return all_chars(r, s, a, "isspace", py_isspace); }

/* islower/isupper: no cased character of the other case, at least one cased */
static tv case_check(rt *r, tv s, const targs *a, const char *name, bool want_lower) {
    nargs(r, name, a, 0, 0);
    bool cased = false;
    for (size_t i = 0; i < s.u.s.n;) {
        uint32_t cp;
        i += utf8_next(s.u.s.p + i, s.u.s.n - i, &cp);
        if (want_lower ? is_upper_cp(cp) : is_lower_cp(cp)) return tv_bool(false);
        if (want_lower ? is_lower_cp(cp) : is_upper_cp(cp)) cased = true;
    }
    return tv_bool(cased);
}
static tv sm_islower(rt *r, tv s, const targs *a) { return case_check(r, s, a, "islower", true); }
static tv sm_isupper(rt *r, tv s, const targs *a) { return case_check(r, s, a, "isupper", false); }

static tv pad_common(rt *r, tv s, const targs *a, const char *name, int align) {
    nargs(r, name, a, 1, 2);
    int64_t width = int_arg(r, a->pos[0]);
    tv fill = a->n > 1 ? a->pos[1] : tv_str(" ", 1);
    if (fill.kind != TV_STR || utf8_count(fill.u.s.p, fill.u.s.n) != 1)
        rt_fail(r, "The fill character must be exactly one character long");
    return str_center(r, s, width, fill.u.s.p, fill.u.s.n, align);
}
static tv sm_center(rt *r, tv s, const targs *a) { return pad_common(r, s, a, "center", 0); }
static tv sm_ljust(rt *r, tv s, const targs *a) { return pad_common(r, s, a, "ljust", -1); }
static tv sm_rjust(rt *r, tv s, const targs *a) { return pad_common(r, s, a, "rjust", 1); }

static tv sm_zfill(rt *r, tv s, const targs *a) {
    nargs(r, "zfill", a, 1, 1);
    int64_t width = int_arg(r, a->pos[0]);
    int64_t len = (int64_t)utf8_count(s.u.s.p, s.u.s.n);
    if (width <= len) return s;
    if (width - len > 100000000) rt_fail(r, "zfill width too large");
    tstrb b = {0};
    size_t sign = s.u.s.n && (s.u.s.p[0] == '+' || s.u.s.p[0] == '-') ? 1 : 0;
    sb_put(r, &b, s.u.s.p, sign);
    for (int64_t i = 0; i < width - len; i++) sb_putc(r, &b, '0');
    sb_put(r, &b, s.u.s.p + sign, s.u.s.n - sign);
    return sb_done(&b);
}

static tv partition_common(rt *r, tv s, const targs *a, bool right) {
    nargs(r, right ? "rpartition" : "partition", a, 1, 1);
    tv sep = str_arg(r, right ? "rpartition" : "partition", a->pos[0], 1);
    if (!sep.u.s.n) rt_fail(r, "empty separator");
    tv out = tv_list_new(r, 3, LIST_TUPLE);
    tv *it = out.u.l->items;
    tv parts = str_split(r, s, sep, 1, right);
    if (parts.u.l->n == 2) {
        it[0] = parts.u.l->items[0], it[1] = sep, it[2] = parts.u.l->items[1];
    } else if (right) {
        it[0] = tv_str("", 0), it[1] = tv_str("", 0), it[2] = s;
    } else {
        it[0] = s, it[1] = tv_str("", 0), it[2] = tv_str("", 0);
    }
    return out;
}
static tv sm_partition(rt *r, tv s, const targs *a) { return partition_common(r, s, a, false); }
static tv sm_rpartition(rt *r, tv s, const targs *a) { return partition_common(r, s, a, true); }

static tv sm_removeprefix(rt *r, tv s, const targs *a) {
    nargs(r, "removeprefix", a, 1, 1);
    tv x = str_arg(r, "removeprefix", a->pos[0], 1);
    if (x.u.s.n <= s.u.s.n && memcmp(s.u.s.p, x.u.s.p, x.u.s.n) == 0) return tv_str(s.u.s.p + x.u.s.n, s.u.s.n - x.u.s.n);
    return s;
}

static tv sm_removesuffix(rt *r, tv s, const targs *a) {
    nargs(r, "removesuffix", a, 1, 1);
    tv x = str_arg(r, "removesuffix", a->pos[0], 1);
    if (x.u.s.n && x.u.s.n <= s.u.s.n && memcmp(s.u.s.p + s.u.s.n - x.u.s.n, x.u.s.p, x.u.s.n) == 0)
        return tv_str(s.u.s.p, s.u.s.n - x.u.s.n);
    return s;
}

static tv sm_format(rt *r, tv s, const targs *a) { return py_str_format(r, s, a); }

/* ---- dict, list and tuple methods ---- */

static tv dm_get(rt *r, tv d, const targs *a) {
    nargs(r, "get", a, 1, 2);
    tv key = a->pos[0];
    if (key.kind == TV_DICT || (key.kind == TV_LIST && key.sub != LIST_TUPLE))
        rt_fail(r, "unhashable type: '%s'", tv_type_name(key));
    tv *v = dict_get(d.u.d, key);
    return v ? *v : a->n > 1 ? a->pos[1] : tv_none();
}

static tv dict_view(rt *r, tv d, int which) {
    size_t n = d.u.d->n;
    tv out = tv_list_new(r, n, which);
    for (size_t i = 0; i < n; i++) {
        if (which == LIST_KEYS) {
            out.u.l->items[i] = d.u.d->keys[i];
        } else if (which == LIST_VALUES) {
            out.u.l->items[i] = d.u.d->vals[i];
        } else {
            tv pair = tv_list_new(r, 2, LIST_TUPLE);
            pair.u.l->items[0] = d.u.d->keys[i];
            pair.u.l->items[1] = d.u.d->vals[i];
            out.u.l->items[i] = pair;
        }
    }
    return out;
}
static tv dm_items(rt *r, tv d, const targs *a) { nargs(r, "items", a, 0, 0); return dict_view(r, d, LIST_ITEMS); }
static tv dm_keys(rt *r, tv d, const targs *a) { nargs(r, "keys", a, 0, 0); return dict_view(r, d, LIST_KEYS); }
static tv dm_values(rt *r, tv d, const targs *a) { nargs(r, "values", a, 0, 0); return dict_view(r, d, LIST_VALUES); }

static tv dm_copy(rt *r, tv d, const targs *a) {
    nargs(r, "copy", a, 0, 0);
    tv out = tv_dict_new(r, d.u.d->n, TV_DICT);
    for (size_t i = 0; i < d.u.d->n; i++) dict_set(r, out.u.d, d.u.d->keys[i], d.u.d->vals[i]);
    return out;
}

static tv lm_index(rt *r, tv l, const targs *a) {
    nargs(r, "index", a, 1, 3);
    int64_t lo, st, n = (int64_t)l.u.l->n;
    int64_t count = py_slice_indices(r, n, a->n > 1 ? a->pos[1] : tv_none(), a->n > 2 ? a->pos[2] : tv_none(), tv_none(), &lo, &st);
    for (int64_t i = lo; i < lo + count; i++)
        if (tv_equal(l.u.l->items[i], a->pos[0])) return tv_int(i);
    tstrb b = {0};
    tv_write_repr(r, &b, a->pos[0]);
    rt_fail(r, "%.*s is not in %s", (int)b.n, b.p, l.sub == LIST_TUPLE ? "tuple" : "list");
}

static tv lm_count(rt *r, tv l, const targs *a) {
    nargs(r, "count", a, 1, 1);
    int64_t c = 0;
    for (size_t i = 0; i < l.u.l->n; i++) c += tv_equal(l.u.l->items[i], a->pos[0]);
    return tv_int(c);
}

static tv lm_copy(rt *r, tv l, const targs *a) {
    nargs(r, "copy", a, 0, 0);
    tv out = tv_list_new(r, l.u.l->n, LIST_PLAIN);
    if (l.u.l->n) memcpy(out.u.l->items, l.u.l->items, l.u.l->n * sizeof(tv));
    return out;
}

typedef struct method_def {
    const char *name;
    method_fn fn;
} method_def;

static const method_def STR_METHODS[] = {
    {"capitalize", sm_capitalize}, {"casefold", sm_lower},     {"center", sm_center},
    {"count", sm_count},           {"endswith", sm_endswith},  {"find", sm_find},
    {"format", sm_format},         {"index", sm_index},        {"isalnum", sm_isalnum},
    {"isalpha", sm_isalpha},       {"isdecimal", sm_isdigit},  {"isdigit", sm_isdigit},
    {"islower", sm_islower},       {"isnumeric", sm_isdigit},  {"isspace", sm_isspace},
    {"isupper", sm_isupper},       {"join", sm_join},          {"ljust", sm_ljust},
    {"lower", sm_lower},           {"lstrip", sm_lstrip},      {"partition", sm_partition},
    {"removeprefix", sm_removeprefix}, {"removesuffix", sm_removesuffix}, {"replace", sm_replace},
    {"rfind", sm_rfind},           {"rindex", sm_rindex},      {"rjust", sm_rjust},
    {"rpartition", sm_rpartition}, {"rsplit", sm_rsplit},      {"rstrip", sm_rstrip},
    {"split", sm_split},           {"splitlines", sm_splitlines}, {"startswith", sm_startswith},
    {"strip", sm_strip},           {"swapcase", sm_swapcase},  {"title", sm_title},
    {"upper", sm_upper},           {"zfill", sm_zfill},
};

static const method_def DICT_METHODS[] = {
    {"copy", dm_copy}, {"get", dm_get}, {"items", dm_items}, {"keys", dm_keys}, {"values", dm_values},
};

static const method_def LIST_METHODS[] = {{"copy", lm_copy}, {"count", lm_count}, {"index", lm_index}};
static const method_def TUPLE_METHODS[] = {{"count", lm_count}, {"index", lm_index}};

static const char *const DICT_UNSAFE[] = {"clear", "pop", "popitem", "setdefault", "update", NULL};
static const char *const LIST_UNSAFE[] = {"append", "clear", "extend", "insert", "pop", "remove", "reverse", "sort", NULL};

static tv find_method(rt *r, tv self, const char *name, size_t n, const method_def *defs, size_t count,
                      const char *const *unsafe, const char *type) {
    for (size_t i = 0; i < count; i++)
        if (str_eq(name, n, defs[i].name)) return tv_func(r, defs[i].name, defs[i].fn, self);
    for (const char *const *u = unsafe; u && *u; u++)
        if (str_eq(name, n, *u)) return tv_undef_msg(r, "access to attribute '%s' of '%s' object is unsafe.", *u, type);
    return (tv){.kind = TV_UNDEF, .sub = UNDEF_NAME};
}

tv tmpl_method(rt *r, tv self, const char *name, size_t n) {
    switch (self.kind) {
    case TV_STR: return find_method(r, self, name, n, STR_METHODS, sizeof STR_METHODS / sizeof *STR_METHODS, NULL, "str");
    case TV_DICT:
        return find_method(r, self, name, n, DICT_METHODS, sizeof DICT_METHODS / sizeof *DICT_METHODS, DICT_UNSAFE, "dict");
    case TV_LIST:
        if (self.sub == LIST_PLAIN)
            return find_method(r, self, name, n, LIST_METHODS, sizeof LIST_METHODS / sizeof *LIST_METHODS, LIST_UNSAFE, "list");
        if (self.sub == LIST_TUPLE || self.sub == LIST_RANGE)
            return find_method(r, self, name, n, TUPLE_METHODS, sizeof TUPLE_METHODS / sizeof *TUPLE_METHODS, NULL, "tuple");
        return (tv){.kind = TV_UNDEF, .sub = UNDEF_NAME};
    default: return (tv){.kind = TV_UNDEF, .sub = UNDEF_NAME};
    }
}

/* ---- globals ---- */

static tv g_range(rt *r, tv self, const targs *a) {
    (void)self;
    no_kwargs(r, "range", a);
    if (a->n < 1) rt_fail(r, "range expected at least 1 argument, got 0");
    if (a->n > 3) rt_fail(r, "range expected at most 3 arguments, got %d", a->n);
    int64_t start = 0, stop, step = 1;
    if (a->n == 1) {
        stop = int_arg(r, a->pos[0]);
    } else {
        start = int_arg(r, a->pos[0]);
        stop = int_arg(r, a->pos[1]);
        if (a->n == 3) step = int_arg(r, a->pos[2]);
    }
    if (step == 0) rt_fail(r, "range() arg 3 must not be zero");
    double count_d = step > 0 ? ceil(((double)stop - (double)start) / (double)step) : ceil(((double)start - (double)stop) / (double)-step);
    if (count_d > MAX_RANGE) rt_fail(r, "Range too big. The sandbox blocks ranges larger than MAX_RANGE (%d).", MAX_RANGE);
    size_t count = count_d > 0 ? (size_t)count_d : 0;
    tv out = tv_list_new(r, count, LIST_RANGE);
    for (size_t i = 0; i < count; i++) out.u.l->items[i] = tv_int(start + (int64_t)i * step);
    out.u.l->range[0] = start;
    out.u.l->range[1] = stop;
    out.u.l->range[2] = step;
    return out;
}

/* dict(*args, **kwargs) into d */
static void fill_dict(rt *r, tdict *d, const targs *a, const char *name) {
    if (a->n > 1) rt_fail(r, "%s expected at most 1 argument, got %d", name, a->n);
    if (a->n == 1) {
        tv src = a->pos[0];
        if (src.kind == TV_DICT || src.kind == TV_NS) {
            for (size_t i = 0; i < src.u.d->n; i++) dict_set(r, d, src.u.d->keys[i], src.u.d->vals[i]);
        } else {
            tv items = tv_iterate(r, src);
            for (size_t i = 0; i < items.u.l->n; i++) {
                tv pair = tv_iterate(r, items.u.l->items[i]);
                if (pair.u.l->n != 2)
                    rt_fail(r, "dictionary update sequence element #%zu has length %zu; 2 is required", i, pair.u.l->n);
                dict_set(r, d, pair.u.l->items[0], pair.u.l->items[1]);
            }
        }
    }
    for (int k = 0; k < a->nkw; k++) dict_set(r, d, tv_str(a->kw[k].name, a->kw[k].n), a->kw[k].v);
}

static tv g_dict(rt *r, tv self, const targs *a) {
    (void)self;
    tv d = tv_dict_new(r, 0, TV_DICT);
    fill_dict(r, d.u.d, a, "dict");
    return d;
}

static tv g_namespace(rt *r, tv self, const targs *a) {
    (void)self;
    tv d = tv_dict_new(r, 0, TV_NS);
    fill_dict(r, d.u.d, a, "namespace");
    return d;
}

static tv g_raise_exception(rt *r, tv self, const targs *a) {
    (void)self;
    const char *const names[] = {"message"};
    tv arg[1];
    args_bind(r, "raise_exception", a, names, 1, arg);
    if (!tv_given(arg[0])) rt_fail(r, "raise_exception() missing 1 required positional argument: 'message'");
    tv msg = tv_to_str(r, arg[0]);
    rt_fail(r, "%.*s", (int)msg.u.s.n, msg.u.s.p);
}

static tv g_strftime_now(rt *r, tv self, const targs *a) {
    (void)self;
    const char *const names[] = {"format"};
    tv arg[1];
    args_bind(r, "strftime_now", a, names, 1, arg);
    if (!tv_given(arg[0])) rt_fail(r, "strftime_now() missing 1 required positional argument: 'format'");
    if (arg[0].kind != TV_STR) rt_fail(r, "strftime() argument 1 must be str, not %s", tv_type_name(arg[0]));
    time_t now = r->opt.fixed_now ? (time_t)r->opt.now : time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    /* a trailing sentinel tells an empty result from a too-small buffer */
    char *fmt = rt_alloc(r, arg[0].u.s.n + 2);
    memcpy(fmt, arg[0].u.s.p, arg[0].u.s.n);
    fmt[arg[0].u.s.n] = '|';
    for (size_t cap = 256; cap <= ((size_t)1 << 20); cap *= 4) {
        char *buf = rt_alloc(r, cap);
        size_t n = strftime(buf, cap, fmt, &tm);
        if (n > 0) return tv_str(buf, n - 1);
    }
    rt_fail(r, "strftime result too long");
}

/* joiner(sep): "" on the first call, sep afterwards; state in a namespace */
static tv joiner_call(rt *r, tv self, const targs *a) {
    nargs(r, "joiner", a, 0, 0);
    tv *used = dict_get_str(self.u.d, "used", 4);
    if (!used || !tv_truthy(r, *used)) {
        dict_set(r, self.u.d, tv_str("used", 4), tv_bool(true));
        return tv_str("", 0);
    }
    return *dict_get_str(self.u.d, "sep", 3);
}

static tv g_joiner(rt *r, tv self, const targs *a) {
    (void)self;
    const char *const names[] = {"sep"};
    tv arg[1];
    args_bind(r, "joiner", a, names, 1, arg);
    tv state = tv_dict_new(r, 2, TV_NS);
    dict_set(r, state.u.d, tv_str("sep", 3), tv_given(arg[0]) ? arg[0] : tv_str(", ", 2));
    dict_set(r, state.u.d, tv_str("used", 4), tv_bool(false));
    return tv_func(r, "joiner", joiner_call, state);
}

/* cycler(*items): .next(), .current, .reset(); state in a namespace */
static tv cycler_next(rt *r, tv self, const targs *a) {
    nargs(r, "next", a, 0, 0);
    tv ns = self;
    tlist *items = dict_get_str(ns.u.d, "items", 5)->u.l;
    int64_t pos = dict_get_str(ns.u.d, "pos", 3)->u.i;
    tv rv = items->items[pos];
    pos = (pos + 1) % (int64_t)items->n;
    dict_set(r, ns.u.d, tv_str("pos", 3), tv_int(pos));
    dict_set(r, ns.u.d, tv_str("current", 7), items->items[pos]);
    return rv;
}

static tv cycler_reset(rt *r, tv self, const targs *a) {
    nargs(r, "reset", a, 0, 0);
    tlist *items = dict_get_str(self.u.d, "items", 5)->u.l;
    dict_set(r, self.u.d, tv_str("pos", 3), tv_int(0));
    dict_set(r, self.u.d, tv_str("current", 7), items->items[0]);
    return tv_none();
}

static tv g_cycler(rt *r, tv self, const targs *a) {
    (void)self;
    no_kwargs(r, "cycler", a);
    if (a->n < 1) rt_fail(r, "at least one item has to be provided");
    tv items = tv_list_new(r, (size_t)a->n, LIST_TUPLE);
    memcpy(items.u.l->items, a->pos, (size_t)a->n * sizeof(tv));
    tv ns = tv_dict_new(r, 5, TV_NS);
    dict_set(r, ns.u.d, tv_str("items", 5), items);
    dict_set(r, ns.u.d, tv_str("pos", 3), tv_int(0));
    dict_set(r, ns.u.d, tv_str("current", 7), a->pos[0]);
    dict_set(r, ns.u.d, tv_str("next", 4), tv_func(r, "next", cycler_next, ns));
    dict_set(r, ns.u.d, tv_str("reset", 5), tv_func(r, "reset", cycler_reset, ns));
    return ns;
}

void tmpl_add_globals(rt *r, tdict *g) {
    static const struct {
        const char *name;
        tmpl_builtin fn;
    } defs[] = {
        {"range", g_range},   {"dict", g_dict},       {"namespace", g_namespace}, {"raise_exception", g_raise_exception},
        {"strftime_now", g_strftime_now}, {"joiner", g_joiner}, {"cycler", g_cycler},
    };
    for (size_t i = 0; i < sizeof defs / sizeof *defs; i++)
        dict_set(r, g, tv_cstr(defs[i].name), tv_func(r, defs[i].name, defs[i].fn, (tv){.kind = TV_UNDEF}));
}
