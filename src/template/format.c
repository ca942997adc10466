/*
 * format.c - Python's string formatting: the "%" operator (and Jinja2's
 * `format` filter, which uses it) and str.format with the format-spec
 * mini-language (fill, align, sign, #, 0, width, grouping, precision, type).
 * Floats go through C's correctly rounded printf, which agrees with Python's
 * own digits; the no-type float form is Python's repr.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "template/tmpl_internal.h"

static int64_t int_arg(rt *r, tv v) {
    if (v.kind == TV_INT) return v.u.i;
    if (v.kind == TV_BOOL) return v.u.b;
    if (v.kind == TV_UNDEF) tv_undef_fail(r, v);
    rt_fail(r, "'%s' object cannot be interpreted as an integer", tv_type_name(v));
}

/* ---- formatting shared by "%" and str.format ---- */

typedef struct fspec {
    char fill[4];
    size_t fill_n;
    char align;     /* '<' '>' '^' '=' or 0 */
    char sign;      /* '-' '+' ' ' */
    bool alt, zero;
    int64_t width;  /* -1 none */
    char grouping;  /* 0 ',' '_' */
    int64_t prec;   /* -1 none */
    char type;      /* 0 none */
} fspec;

static void group_digits(rt *r, tstrb *b, const char *digits, size_t n, char sep, int every) {
    for (size_t i = 0; i < n; i++) {
        if (sep && i > 0 && (n - i) % (size_t)every == 0) sb_putc(r, b, sep);
        sb_putc(r, b, digits[i]);
    }
}

/* sign/prefix part and digits part, padded per spec */
static tv pad_parts(rt *r, const fspec *s, const char *head, size_t hn, const char *body, size_t bn, char dflt_align) {
    char align = s->align ? s->align : dflt_align;
    const char *fill = s->fill_n ? s->fill : " ";
    size_t fill_n = s->fill_n ? s->fill_n : 1;
    if (!s->align && s->zero) {
        align = '=';
        fill = "0";
        fill_n = 1;
    }
    int64_t len = (int64_t)(utf8_count(head, hn) + utf8_count(body, bn));
    int64_t pad = s->width > len ? s->width - len : 0;
    if (pad > 100000000) rt_fail(r, "format width too large");
    int64_t left = 0, right = 0;
    switch (align) {
    case '<': right = pad; break;
    case '^': left = pad / 2, right = pad - left; break;
    default: left = pad; break;
    }
    tstrb b = {0};
    if (align == '=') {
        sb_put(r, &b, head, hn);
        for (int64_t i = 0; i < left; i++) sb_put(r, &b, fill, fill_n);
        sb_put(r, &b, body, bn);
        return sb_done(&b);
    }
    for (int64_t i = 0; i < left; i++) sb_put(r, &b, fill, fill_n);
    sb_put(r, &b, head, hn);
    sb_put(r, &b, body, bn);
    for (int64_t i = 0; i < right; i++) sb_put(r, &b, fill, fill_n);
    return sb_done(&b);
}

static tv format_int(rt *r, const fspec *s, int64_t v, char type) {
    char head[8];
    size_t hn = 0;
    uint64_t mag = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    if (v < 0) head[hn++] = '-';
    else if (s->sign == '+' || s->sign == ' ') head[hn++] = s->sign;
    if (type == 'c') {
        if (v < 0 || v > 0x10ffff) rt_fail(r, "%%c arg not in range(0x110000)");
        char u[4];
        size_t un = utf8_put((uint32_t)v, u);
        return pad_parts(r, s, "", 0, u, un, '<');
    }
    int base = type == 'b' ? 2 : type == 'o' ? 8 : (type == 'x' || type == 'X') ? 16 : 10;
    if (s->alt && base != 10) {
        head[hn++] = '0';
        head[hn++] = type == 'b' ? 'b' : type == 'o' ? 'o' : type;
    }
    char digits[72];
    size_t dn = 0;
    const char *set = type == 'X' ? "0123456789ABCDEF" : "0123456789abcdef";
    do {
        digits[dn++] = set[mag % (uint64_t)base];
        mag /= (uint64_t)base;
    } while (mag);
    for (size_t i = 0; i < dn / 2; i++) {
        char t = digits[i];
        digits[i] = digits[dn - 1 - i];
        digits[dn - 1 - i] = t;
    }
    tstrb body = {0};
    group_digits(r, &body, digits, dn, s->grouping, base == 10 ? 3 : 4);
    return pad_parts(r, s, head, hn, body.p ? body.p : "", body.n, '>');
}

static tv format_float(rt *r, const fspec *s, double f, char type) {
    char head[4];
    size_t hn = 0;
    if (signbit(f) && !isnan(f)) head[hn++] = '-';
    else if (s->sign == '+' || s->sign == ' ') head[hn++] = s->sign;
    double m = fabs(f);
    char buf[512];
    if (!isfinite(m)) {
        bool up = type == 'F' || type == 'E' || type == 'G';
        snprintf(buf, sizeof buf, "%s%s", isnan(m) ? (up ? "NAN" : "nan") : (up ? "INF" : "inf"), type == '%' ? "%" : "");
    } else {
        int64_t prec = s->prec;
        if (prec > 200) prec = 200;
        switch (type) {
        case 'f':
        case 'F': snprintf(buf, sizeof buf, s->alt ? "%#.*f" : "%.*f", (int)(prec < 0 ? 6 : prec), m); break;
        case 'e':
        case 'E': snprintf(buf, sizeof buf, s->alt ? "%#.*e" : "%.*e", (int)(prec < 0 ? 6 : prec), m); break;
        case 'g':
        case 'G': snprintf(buf, sizeof buf, s->alt ? "%#.*g" : "%.*g", (int)(prec < 0 ? 6 : prec == 0 ? 1 : prec), m); break;
        case '%': snprintf(buf, sizeof buf, "%.*f%%", (int)(prec < 0 ? 6 : prec), m * 100.0); break;
        default:
            if (prec < 0) {
                fmt_float_repr(m, buf, sizeof buf);
            } else {
                snprintf(buf, sizeof buf, "%.*g", (int)(prec == 0 ? 1 : prec), m);
                if (!strchr(buf, '.') && !strchr(buf, 'e')) strcat(buf, ".0");
            }
        }
        if (type == 'E' || type == 'G')
            for (char *c = buf; *c; c++)
                if (*c == 'e') *c = 'E';
    }
    /* grouping applies to the integer part */
    tstrb body = {0};
    size_t ip = strspn(buf, "0123456789");
    if (s->grouping && isfinite(m)) {
        group_digits(r, &body, buf, ip, s->grouping, 3);
        sb_put(r, &body, buf + ip, strlen(buf) - ip);
    } else {
        sb_put(r, &body, buf, strlen(buf));
    }
    return pad_parts(r, s, head, hn, body.p, body.n, '>');
}

/* format(v, spec) for a parsed spec */
static tv format_value(rt *r, tv v, const fspec *s) {
    char t = s->type;
    if (v.kind == TV_STR || (!tv_is_num(v) && !t)) {
        if (t && t != 's') rt_fail(r, "Unknown format code '%c' for object of type '%s'", t, tv_type_name(v));
        if (v.kind != TV_STR && (s->width >= 0 || s->prec >= 0 || s->align || s->sign != '-'))
            rt_fail(r, "unsupported format string passed to %s.__format__", tv_type_name(v));
        tv str = tv_to_str(r, v);
        if (s->prec >= 0) str = str_slice(r, str, tv_none(), tv_int(s->prec), tv_none());
        if (s->sign != '-' || s->alt) rt_fail(r, "Sign not allowed in string format specifier");
        return pad_parts(r, s, "", 0, str.u.s.p, str.u.s.n, '<');
    }
    if (!tv_is_num(v)) rt_fail(r, "Unknown format code '%c' for object of type '%s'", t, tv_type_name(v));
    if (v.kind == TV_BOOL && !t && s->width < 0) return tv_to_str(r, v);
    if (v.kind != TV_FLOAT && (!t || strchr("dnbcoxX", t))) return format_int(r, s, v.kind == TV_BOOL ? v.u.b : v.u.i, t == 'n' || !t ? 'd' : t);
    if (t && !strchr("eEfFgGn%", t)) rt_fail(r, "Unknown format code '%c' for object of type '%s'", t, tv_type_name(v));
    return format_float(r, s, tv_num(v), t == 'n' ? 'g' : t);
}

static void parse_spec(rt *r, const char *p, size_t n, fspec *s) {
    memset(s, 0, sizeof *s);
    s->sign = '-';
    s->width = s->prec = -1;
    size_t i = 0;
    uint32_t cp;
    size_t w = n ? utf8_next(p, n, &cp) : 0;
    if (n > w && strchr("<>^=", p[w])) {
        memcpy(s->fill, p, w);
        s->fill_n = w;
        s->align = p[w];
        i = w + 1;
    } else if (n && strchr("<>^=", p[0])) {
        s->align = p[0];
        i = 1;
    }
    if (i < n && (p[i] == '+' || p[i] == '-' || p[i] == ' ')) s->sign = p[i++];
    if (i < n && p[i] == '#') s->alt = true, i++;
    if (i < n && p[i] == '0') s->zero = true, i++;
    if (i < n && p[i] >= '0' && p[i] <= '9') {
        s->width = 0;
        while (i < n && p[i] >= '0' && p[i] <= '9' && s->width < 100000000) s->width = s->width * 10 + (p[i++] - '0');
    }
    if (i < n && (p[i] == ',' || p[i] == '_')) s->grouping = p[i++];
    if (i < n && p[i] == '.') {
        i++;
        if (!(i < n && p[i] >= '0' && p[i] <= '9')) rt_fail(r, "Format specifier missing precision");
        s->prec = 0;
        while (i < n && p[i] >= '0' && p[i] <= '9' && s->prec < 100000000) s->prec = s->prec * 10 + (p[i++] - '0');
    }
    if (i < n) s->type = p[i++];
    if (i < n) rt_fail(r, "Invalid format specifier '%.*s'", (int)n, p);
}

/* ---- "%" formatting ---- */

tv py_percent_format(rt *r, tv fmt, tv args) {
    const char *p = fmt.u.s.p;
    size_t n = fmt.u.s.n;
    bool is_tuple = args.kind == TV_LIST && args.sub == LIST_TUPLE;
    bool is_map = args.kind == TV_DICT;
    size_t argi = 0, nargs_ = is_tuple ? args.u.l->n : 1;
    tstrb b = {0};
    for (size_t i = 0; i < n; i++) {
        if (p[i] != '%') {
            sb_putc(r, &b, p[i]);
            continue;
        }
        if (++i >= n) rt_fail(r, "incomplete format");
        tv key = tv_absent();
        if (p[i] == '(') {
            if (!is_map) rt_fail(r, "format requires a mapping");
            size_t depth = 1, st = ++i;
            while (i < n && depth) {
                if (p[i] == '(') depth++;
                else if (p[i] == ')') depth--;
                if (depth) i++;
            }
            if (i >= n) rt_fail(r, "incomplete format key");
            key = tv_str(p + st, i - st);
            i++;
        }
        fspec s;
        memset(&s, 0, sizeof s);
        s.sign = '-';
        s.width = s.prec = -1;
        bool left = false;
        for (; i < n && strchr("-+ #0", p[i]); i++) {
            if (p[i] == '-') left = true;
            else if (p[i] == '+') s.sign = '+';
            else if (p[i] == ' ' && s.sign != '+') s.sign = ' ';
            else if (p[i] == '#') s.alt = true;
            else s.zero = true;
        }
#define NEXT_ARG() (is_tuple ? (argi < nargs_ ? args.u.l->items[argi++] : (rt_fail(r, "not enough arguments for format string"), tv_none())) : (argi++ == 0 ? args : (rt_fail(r, "not enough arguments for format string"), tv_none())))
        if (i < n && p[i] == '*') {
            s.width = int_arg(r, NEXT_ARG());
            if (s.width < 0) left = true, s.width = -s.width;
            i++;
        } else {
            while (i < n && p[i] >= '0' && p[i] <= '9' && s.width < 100000000) s.width = (s.width < 0 ? 0 : s.width * 10) + (p[i++] - '0');
        }
        if (i < n && p[i] == '.') {
            i++;
            s.prec = 0;
            if (i < n && p[i] == '*') {
                s.prec = int_arg(r, NEXT_ARG());
                i++;
            } else {
                while (i < n && p[i] >= '0' && p[i] <= '9' && s.prec < 100000000) s.prec = s.prec * 10 + (p[i++] - '0');
            }
        }
        while (i < n && strchr("hlL", p[i])) i++;
        if (i >= n) rt_fail(r, "incomplete format");
        char c = p[i];
        if (c == '%') {
            sb_putc(r, &b, '%');
            continue;
        }
        tv v;
        if (tv_given(key)) {
            tv *found = dict_get(args.u.d, key);
            if (!found) rt_fail(r, "'%.*s'", (int)key.u.s.n, key.u.s.p);
            v = *found;
        } else if (is_map) {
            v = args;
        } else {
            v = NEXT_ARG();
        }
#undef NEXT_ARG
        if (left) s.align = '<', s.zero = false;
        else if (!s.zero) s.align = '>';
        if (v.kind == TV_UNDEF && c != 's' && c != 'r' && c != 'a') tv_undef_fail(r, v);
        tv out;
        switch (c) {
        case 's':
        case 'r':
        case 'a': {
            tv str;
            if (c == 's') {
                str = tv_to_str(r, v);
            } else {
                tstrb rb = {0};
                tv_write_repr(r, &rb, v);
                str = sb_done(&rb);
            }
            if (s.prec >= 0) str = str_slice(r, str, tv_none(), tv_int(s.prec), tv_none());
            fspec ss = s;
            ss.zero = false;
            if (!left) ss.align = '>';
            out = pad_parts(r, &ss, "", 0, str.u.s.p, str.u.s.n, '>');
            break;
        }
        case 'd':
        case 'i':
        case 'u':
            if (v.kind == TV_FLOAT) {
                if (!isfinite(v.u.f)) rt_fail(r, "cannot convert float %s to integer", isnan(v.u.f) ? "NaN" : "infinity");
                v = tv_int((int64_t)v.u.f);
            }
            if (!tv_is_num(v)) rt_fail(r, "%%%c format: a real number is required, not %s", c, tv_type_name(v));
            out = format_int(r, &s, v.kind == TV_BOOL ? v.u.b : v.u.i, 'd');
            if (s.prec > 0) {
                /* precision pads the digits with zeros */
                int64_t iv = v.kind == TV_BOOL ? v.u.b : v.u.i;
                char digits[32];
                int dn = snprintf(digits, sizeof digits, "%0*" PRIu64, (int)(s.prec > 30 ? 30 : s.prec),
                                  iv < 0 ? (uint64_t)0 - (uint64_t)iv : (uint64_t)iv);
                const char *head = iv < 0 ? "-" : s.sign == '+' ? "+" : s.sign == ' ' ? " " : "";
                out = pad_parts(r, &s, head, strlen(head), digits, (size_t)dn, '>');
            }
            break;
        case 'x':
        case 'X':
        case 'o':
            if (!(v.kind == TV_INT || v.kind == TV_BOOL))
                rt_fail(r, "%%%c format: an integer is required, not %s", c, tv_type_name(v));
            out = format_int(r, &s, v.kind == TV_BOOL ? v.u.b : v.u.i, c);
            break;
        case 'c':
            if (v.kind == TV_STR) {
                if (utf8_count(v.u.s.p, v.u.s.n) != 1) rt_fail(r, "%%c requires int or char");
                out = pad_parts(r, &s, "", 0, v.u.s.p, v.u.s.n, '>');
            } else {
                out = format_int(r, &s, int_arg(r, v), 'c');
            }
            break;
        case 'f':
        case 'F':
        case 'e':
        case 'E':
        case 'g':
        case 'G':
            if (!tv_is_num(v)) rt_fail(r, "must be real number, not %s", tv_type_name(v));
            out = format_float(r, &s, tv_num(v), c);
            break;
        default: rt_fail(r, "unsupported format character '%c' (0x%x) at index %zu", c, (unsigned)(unsigned char)c, i);
        }
        sb_put(r, &b, out.u.s.p, out.u.s.n);
    }
    /* Python lets anything subscriptable (dict, list) go unused */
    bool subscriptable = is_map || args.kind == TV_LIST;
    if (is_tuple ? argi < nargs_ : (!subscriptable && argi == 0))
        rt_fail(r, "not all arguments converted during string formatting");
    return sb_done(&b);
}

/* ---- str.format ---- */

static tv format_field(rt *r, const char *p, size_t n, const targs *a, size_t *auto_idx, int depth);

static tv str_format_impl(rt *r, tv fmt, const targs *a, int depth) {
    if (depth > 2) rt_fail(r, "Max string recursion exceeded");
    const char *p = fmt.u.s.p;
    size_t n = fmt.u.s.n, auto_idx = 0;
    tstrb b = {0};
    for (size_t i = 0; i < n; i++) {
        char c = p[i];
        if (c == '}') {
            if (i + 1 < n && p[i + 1] == '}') {
                sb_putc(r, &b, '}');
                i++;
                continue;
            }
            rt_fail(r, "Single '}' encountered in format string");
        }
        if (c != '{') {
            sb_putc(r, &b, c);
            continue;
        }
        if (i + 1 < n && p[i + 1] == '{') {
            sb_putc(r, &b, '{');
            i++;
            continue;
        }
        size_t st = i + 1, lvl = 1, j = st;
        while (j < n) {
            if (p[j] == '{') lvl++;
            else if (p[j] == '}' && --lvl == 0) break;
            j++;
        }
        if (j >= n) rt_fail(r, "expected '}' before end of string");
        tv out = format_field(r, p + st, j - st, a, &auto_idx, depth);
        sb_put(r, &b, out.u.s.p, out.u.s.n);
        i = j;
    }
    return sb_done(&b);
}

static tv format_field(rt *r, const char *p, size_t n, const targs *a, size_t *auto_idx, int depth) {
    /* field_name [!conv] [:spec] */
    size_t k = 0;
    while (k < n && p[k] != '!' && p[k] != ':') {
        if (p[k] == '[') {
            while (k < n && p[k] != ']') k++;
        }
        if (k < n) k++;
    }
    size_t name_end = k;
    char conv = 0;
    if (k < n && p[k] == '!') {
        if (k + 1 >= n) rt_fail(r, "end of string while looking for conversion specifier");
        conv = p[k + 1];
        k += 2;
        if (k < n && p[k] != ':') rt_fail(r, "expected ':' after conversion specifier");
    }
    tv spec = tv_str("", 0);
    if (k < n && p[k] == ':') spec = tv_str(p + k + 1, n - k - 1);
    /* the first name part: empty (automatic), a number, or a keyword */
    size_t e = 0;
    while (e < name_end && p[e] != '.' && p[e] != '[') e++;
    tv v;
    bool numeric = e > 0;
    for (size_t i = 0; i < e; i++) numeric = numeric && p[i] >= '0' && p[i] <= '9';
    if (e == 0 || numeric) {
        size_t idx;
        if (e == 0) {
            idx = (*auto_idx)++;
        } else {
            int64_t x = 0;
            parse_py_int(p, e, 10, &x);
            idx = (size_t)x;
        }
        if (idx >= (size_t)a->n) rt_fail(r, "tuple index out of range");
        v = a->pos[idx];
    } else {
        v = tv_absent();
        for (int i = 0; i < a->nkw; i++)
            if (a->kw[i].n == e && memcmp(a->kw[i].name, p, e) == 0) v = a->kw[i].v;
        if (!tv_given(v)) rt_fail(r, "'%.*s'", (int)e, p);
    }
    while (e < name_end) {
        if (p[e] == '.') {
            size_t s = ++e;
            while (e < name_end && p[e] != '.' && p[e] != '[') e++;
            v = rt_getattr(r, v, p + s, e - s);
        } else {
            size_t s = ++e;
            while (e < name_end && p[e] != ']') e++;
            tv key = tv_str(p + s, e - s);
            int64_t ix;
            bool digits = e > s;
            for (size_t i = s; i < e; i++) digits = digits && p[i] >= '0' && p[i] <= '9';
            if (digits && parse_py_int(p + s, e - s, 10, &ix)) key = tv_int(ix);
            v = rt_getitem(r, v, key);
            e++;
        }
    }
    if (conv == 'r' || conv == 'a') {
        tstrb rb = {0};
        tv_write_repr(r, &rb, v);
        v = sb_done(&rb);
    } else if (conv == 's') {
        v = tv_to_str(r, v);
    } else if (conv) {
        rt_fail(r, "Unknown conversion specifier %c", conv);
    }
    if (memchr(spec.u.s.p, '{', spec.u.s.n)) spec = str_format_impl(r, spec, a, depth + 1);
    fspec s;
    parse_spec(r, spec.u.s.p, spec.u.s.n, &s);
    return format_value(r, v, &s);
}

tv py_str_format(rt *r, tv fmt, const targs *a) { return str_format_impl(r, fmt, a, 0); }
