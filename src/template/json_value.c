/*
 * json_value.c - JSON in and out of template values.
 *
 * In: a jansson value becomes a template value (objects keep their key
 * order; strings point into the json_t, which outlives the render). Out:
 * the `tojson` filter, byte-identical to Python's json.dumps with the
 * arguments Hugging Face passes through (ensure_ascii, indent, separators,
 * sort_keys): ", " and ": " separators, "," between items when indenting,
 * float repr, NaN/Infinity, \uXXXX escapes.
 */
#include <string.h>

#include "template/tmpl_internal.h"

static void enter(rt *r) {
    if (++r->depth > r->opt.max_depth) rt_fail(r, "maximum recursion depth exceeded");
}

tv tv_from_json(rt *r, const json_t *j) {
    switch (json_typeof(j)) {
    case JSON_OBJECT: {
        enter(r);
        tv d = tv_dict_new(r, json_object_size(j), TV_DICT);
        const char *key;
        json_t *value;
        json_object_foreach((json_t *)j, key, value) dict_set(r, d.u.d, tv_str(key, strlen(key)), tv_from_json(r, value));
        r->depth--;
        return d;
    }
    case JSON_ARRAY: {
        enter(r);
        size_t n = json_array_size(j);
        tv l = tv_list_new(r, n, LIST_PLAIN);
        for (size_t i = 0; i < n; i++) l.u.l->items[i] = tv_from_json(r, json_array_get(j, i));
        r->depth--;
        return l;
    }
    case JSON_STRING: return tv_str(json_string_value(j), json_string_length(j));
    case JSON_INTEGER: return tv_int((int64_t)json_integer_value(j));
    case JSON_REAL: return tv_float(json_real_value(j));
    case JSON_TRUE: return tv_bool(true);
    case JSON_FALSE: return tv_bool(false);
    default: return tv_none();
    }
}

typedef struct jout {
    tstrb b;
    bool ensure_ascii, sort_keys, indenting;
    tv indent; /* the indent string when indenting */
    tv item_sep, key_sep;
} jout;

static void put_str(rt *r, jout *o, const char *p, size_t n) {
    tstrb *b = &o->b;
    sb_putc(r, b, '"');
    size_t i = 0;
    while (i < n) {
        uint32_t cp;
        size_t w = utf8_next(p + i, n - i, &cp);
        switch (cp) {
        case '"': sb_put(r, b, "\\\"", 2); break;
        case '\\': sb_put(r, b, "\\\\", 2); break;
        case '\n': sb_put(r, b, "\\n", 2); break;
        case '\r': sb_put(r, b, "\\r", 2); break;
        case '\t': sb_put(r, b, "\\t", 2); break;
        case '\b': sb_put(r, b, "\\b", 2); break;
        case '\f': sb_put(r, b, "\\f", 2); break;
        default:
            if (cp < 0x20 || (o->ensure_ascii && cp >= 0x7f)) {
                if (cp >= 0x10000) {
                    uint32_t v = cp - 0x10000;
                    sb_printf(r, b, "\\u%04x\\u%04x", 0xd800 + (v >> 10), 0xdc00 + (v & 0x3ff));
                } else {
                    sb_printf(r, b, "\\u%04x", cp);
                }
            } else {
                sb_put(r, b, p + i, w);
            }
        }
        i += w;
    }
    sb_putc(r, b, '"');
}

static void put_float(rt *r, jout *o, double f) {
    if (f != f) {
        sb_put(r, &o->b, "NaN", 3);
    } else if (f > 1.7976931348623157e308) {
        sb_put(r, &o->b, "Infinity", 8);
    } else if (f < -1.7976931348623157e308) {
        sb_put(r, &o->b, "-Infinity", 9);
    } else {
        char buf[48];
        fmt_float_repr(f, buf, sizeof buf);
        sb_put(r, &o->b, buf, strlen(buf));
    }
}

static void newline_indent(rt *r, jout *o, int level) {
    sb_putc(r, &o->b, '\n');
    for (int i = 0; i < level; i++) sb_put(r, &o->b, o->indent.u.s.p, o->indent.u.s.n);
}

/* Dict keys as json.dumps converts them. */
static void put_key(rt *r, jout *o, tv k) {
    switch (k.kind) {
    case TV_STR: put_str(r, o, k.u.s.p, k.u.s.n); return;
    case TV_NONE: put_str(r, o, "null", 4); return;
    case TV_BOOL: put_str(r, o, k.u.b ? "true" : "false", k.u.b ? 4 : 5); return;
    case TV_INT:
    case TV_FLOAT: {
        jout tmp = *o;
        tmp.b = (tstrb){0};
        if (k.kind == TV_INT) sb_printf(r, &tmp.b, "%lld", (long long)k.u.i);
        else put_float(r, &tmp, k.u.f);
        put_str(r, o, tmp.b.p, tmp.b.n);
        return;
    }
    default: rt_fail(r, "keys must be str, int, float, bool or None, not %s", tv_type_name(k));
    }
}

static int key_cmp(rt *r, tv a, tv b) { return tv_compare(r, a, b, "<"); }

static void put_value(rt *r, jout *o, tv v, int level);

static void put_dict(rt *r, jout *o, const tdict *d, int level) {
    if (d->n == 0) {
        sb_put(r, &o->b, "{}", 2);
        return;
    }
    size_t *order = rt_alloc(r, d->n * sizeof *order);
    for (size_t i = 0; i < d->n; i++) order[i] = i;
    if (o->sort_keys) {
        /* insertion sort keeps it stable; dicts in templates are small */
        for (size_t i = 1; i < d->n; i++) {
            size_t x = order[i], j = i;
            while (j > 0 && key_cmp(r, d->keys[order[j - 1]], d->keys[x]) > 0) {
                order[j] = order[j - 1];
                j--;
            }
            order[j] = x;
        }
    }
    sb_putc(r, &o->b, '{');
    for (size_t i = 0; i < d->n; i++) {
        if (i) sb_put(r, &o->b, o->item_sep.u.s.p, o->item_sep.u.s.n);
        if (o->indenting) newline_indent(r, o, level + 1);
        put_key(r, o, d->keys[order[i]]);
        sb_put(r, &o->b, o->key_sep.u.s.p, o->key_sep.u.s.n);
        put_value(r, o, d->vals[order[i]], level + 1);
    }
    if (o->indenting) newline_indent(r, o, level);
    sb_putc(r, &o->b, '}');
}

static void put_value(rt *r, jout *o, tv v, int level) {
    switch (v.kind) {
    case TV_NONE: sb_put(r, &o->b, "null", 4); return;
    case TV_BOOL: sb_put(r, &o->b, v.u.b ? "true" : "false", v.u.b ? 4 : 5); return;
    case TV_INT: sb_printf(r, &o->b, "%lld", (long long)v.u.i); return;
    case TV_FLOAT: put_float(r, o, v.u.f); return;
    case TV_STR: put_str(r, o, v.u.s.p, v.u.s.n); return;
    case TV_LIST:
        if (v.sub != LIST_PLAIN && v.sub != LIST_TUPLE) break;
        enter(r);
        if (v.u.l->n == 0) {
            sb_put(r, &o->b, "[]", 2);
        } else {
            sb_putc(r, &o->b, '[');
            for (size_t i = 0; i < v.u.l->n; i++) {
                if (i) sb_put(r, &o->b, o->item_sep.u.s.p, o->item_sep.u.s.n);
                if (o->indenting) newline_indent(r, o, level + 1);
                put_value(r, o, v.u.l->items[i], level + 1);
            }
            if (o->indenting) newline_indent(r, o, level);
            sb_putc(r, &o->b, ']');
        }
        r->depth--;
        return;
    case TV_DICT:
        enter(r);
        put_dict(r, o, v.u.d, level);
        r->depth--;
        return;
    default: break;
    }
    rt_fail(r, "Object of type %s is not JSON serializable", tv_type_name(v));
}

tv tv_to_json(rt *r, tv v, bool ensure_ascii, tv indent, tv separators, bool sort_keys) {
    jout o = {.ensure_ascii = ensure_ascii, .sort_keys = sort_keys};
    if (indent.kind != TV_NONE && tv_given(indent)) {
        o.indenting = true;
        if (indent.kind == TV_STR) {
            o.indent = indent;
        } else if (indent.kind == TV_INT || indent.kind == TV_BOOL) {
            int64_t n = indent.kind == TV_BOOL ? indent.u.b : indent.u.i;
            o.indent = str_repeat(r, tv_str(" ", 1), n);
        } else {
            if (indent.kind == TV_UNDEF) tv_undef_fail(r, indent);
            rt_fail(r, "can't multiply sequence by non-int of type '%s'", tv_type_name(indent));
        }
    }
    o.item_sep = o.indenting ? tv_str(",", 1) : tv_str(", ", 2);
    o.key_sep = tv_str(": ", 2);
    if (separators.kind != TV_NONE && tv_given(separators)) {
        if (separators.kind != TV_LIST || separators.sub == LIST_GEN || separators.u.l->n != 2)
            rt_fail(r, "separators must be a pair of strings");
        o.item_sep = separators.u.l->items[0];
        o.key_sep = separators.u.l->items[1];
        if (o.item_sep.kind != TV_STR || o.key_sep.kind != TV_STR) rt_fail(r, "separators must be a pair of strings");
    }
    put_value(r, &o, v, 0);
    return sb_done(&o.b);
}
