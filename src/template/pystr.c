/*
 * pystr.c - Python's str semantics over UTF-8 bytes: code points for len()
 * and indexing, Unicode whitespace for strip()/split(), case mapping,
 * printability for repr(), and the str methods chat templates call.
 *
 * Case mapping covers Latin, Greek, Cyrillic, Armenian and fullwidth forms
 * (the scripts whose letters change case in practice); other code points map
 * to themselves. Invalid UTF-8 bytes are carried through unchanged, one
 * "code point" per byte.
 */
#include <string.h>

#include "template/tmpl_internal.h"

/* ---- UTF-8 ---- */

size_t utf8_next(const char *s, size_t n, uint32_t *cp) {
    const unsigned char *p = (const unsigned char *)s;
    unsigned char c = p[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    size_t len = c >= 0xf0 && c <= 0xf4 ? 4 : c >= 0xe0 ? 3 : c >= 0xc2 && c < 0xe0 ? 2 : 0;
    if (len == 0 || len > n) goto invalid;
    uint32_t v = c & (len == 2 ? 0x1f : len == 3 ? 0x0f : 0x07);
    for (size_t i = 1; i < len; i++) {
        if ((p[i] & 0xc0) != 0x80) goto invalid;
        v = (v << 6) | (p[i] & 0x3f);
    }
    if ((len == 3 && v < 0x800) || (len == 4 && (v < 0x10000 || v > 0x10ffff)) || (v >= 0xd800 && v <= 0xdfff))
        goto invalid;
    *cp = v;
    return len;
invalid:
    *cp = c;
    return 1;
}

size_t utf8_put(uint32_t cp, char out[4]) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xc0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xe0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        out[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    out[0] = (char)(0xf0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    out[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

size_t utf8_count(const char *p, size_t n) {
    size_t count = 0, i = 0;
    while (i < n) {
        if ((unsigned char)p[i] < 0x80) {
            i++;
        } else {
            uint32_t cp;
            i += utf8_next(p + i, n - i, &cp);
        }
        count++;
    }
    return count;
}

size_t utf8_offset(const char *p, size_t n, size_t idx) {
    size_t i = 0;
    while (idx > 0 && i < n) {
        uint32_t cp;
        i += utf8_next(p + i, n - i, &cp);
        idx--;
    }
    return i;
}

/* ---- character classes ---- */

bool py_isspace(uint32_t c) {
    return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

bool py_isprintable(uint32_t c) {
    if (c < 0x20 || (c >= 0x7f && c <= 0xa0) || c == 0xad) return false;
    if (c < 0x300) return true;
    if (c == 0x1680 || (c >= 0x2000 && c <= 0x200f) || (c >= 0x2028 && c <= 0x202f) || (c >= 0x205f && c <= 0x2064) ||
        (c >= 0x2066 && c <= 0x206f) || c == 0x3000)
        return false;
    if ((c >= 0x600 && c <= 0x605) || c == 0x61c || c == 0x6dd || c == 0x70f || c == 0x180e || c == 0xfeff ||
        (c >= 0xfff9 && c <= 0xfffb))
        return false;
    if ((c >= 0xd800 && c <= 0xf8ff) || (c >= 0xfdd0 && c <= 0xfdef) || (c & 0xfffe) == 0xfffe || c >= 0xf0000)
        return false;
    if (c == 0xe0001 || (c >= 0xe0020 && c <= 0xe007f)) return false;
    return true;
}

/* Upper/lower pairs laid out as even/odd neighbours. */
static bool in_pair_range(uint32_t c) {
    return (c >= 0x100 && c <= 0x137) || (c >= 0x14a && c <= 0x177) || (c >= 0x182 && c <= 0x185) ||
           (c >= 0x1a0 && c <= 0x1a5) || (c >= 0x1de && c <= 0x1ef) || (c >= 0x1f8 && c <= 0x21f) ||
           (c >= 0x222 && c <= 0x233) || (c >= 0x246 && c <= 0x24f) || (c >= 0x3d8 && c <= 0x3ef) ||
           (c >= 0x460 && c <= 0x481) || (c >= 0x48a && c <= 0x4bf) || (c >= 0x4d0 && c <= 0x52f) ||
           (c >= 0x1e00 && c <= 0x1e95) || (c >= 0x1ea0 && c <= 0x1eff);
}
/* ... and as odd/even neighbours. */
static bool in_odd_pair_range(uint32_t c) {
    return (c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17e) || (c >= 0x4c1 && c <= 0x4ce);
}

uint32_t py_upper(uint32_t c) {
    if (c < 0x80) return c >= 'a' && c <= 'z' ? c - 32 : c;
    if (c == 0xb5) return 0x39c;
    if (c == 0xff) return 0x178;
    if (c >= 0xe0 && c <= 0xfe && c != 0xf7) return c - 32;
    if (c == 0x131) return 'I';
    if (c == 0x17f) return 'S';
    if (in_pair_range(c)) return c & ~1u;
    if (in_odd_pair_range(c)) return (c & 1) ? c : c - 1;
    if (c >= 0x3b1 && c <= 0x3c9) return c == 0x3c2 ? 0x3a3 : c - 32;
    if (c == 0x3ac) return 0x386;
    if (c >= 0x3ad && c <= 0x3af) return c - 37;
    if (c == 0x3cc) return 0x38c;
    if (c == 0x3cd || c == 0x3ce) return c - 63;
    if (c >= 0x430 && c <= 0x44f) return c - 32;
    if (c >= 0x450 && c <= 0x45f) return c - 80;
    if (c >= 0x561 && c <= 0x586) return c - 48;
    if (c >= 0xff41 && c <= 0xff5a) return c - 32;
    return c;
}

uint32_t py_lower(uint32_t c) {
    if (c < 0x80) return c >= 'A' && c <= 'Z' ? c + 32 : c;
    if (c >= 0xc0 && c <= 0xde && c != 0xd7) return c + 32;
    if (c == 0x178) return 0xff;
    if (c == 0x130) return 'i';
    if (in_pair_range(c)) return c | 1u;
    if (in_odd_pair_range(c)) return (c & 1) ? c + 1 : c;
    if (c >= 0x391 && c <= 0x3a9 && c != 0x3a2) return c + 32;
    if (c == 0x386) return 0x3ac;
    if (c >= 0x388 && c <= 0x38a) return c + 37;
    if (c == 0x38c) return 0x3cc;
    if (c == 0x38e || c == 0x38f) return c + 63;
    if (c >= 0x410 && c <= 0x42f) return c + 32;
    if (c >= 0x400 && c <= 0x40f) return c + 80;
    if (c >= 0x531 && c <= 0x556) return c + 48;
    if (c >= 0xff21 && c <= 0xff3a) return c + 32;
    return c;
}

static bool is_cased(uint32_t c) { return py_upper(c) != c || py_lower(c) != c || c == 0xdf; }

bool py_isalpha(uint32_t c) {
    if (c < 0x80) return ((c | 32) - 'a') < 26u;
    if (c == 0xaa || c == 0xba || c == 0xdf) return true;
    if (c < 0x100) return is_cased(c) && c != 0xd7 && c != 0xf7;
    return is_cased(c) || (c >= 0x4e00 && c <= 0x9fff) || (c >= 0x3040 && c <= 0x30ff) || (c >= 0xac00 && c <= 0xd7a3) ||
           (c >= 0x5d0 && c <= 0x5ea) || (c >= 0x620 && c <= 0x64a);
}

bool py_isdigit(uint32_t c) { return c >= '0' && c <= '9'; }

size_t ws_prefix(const char *p, size_t n) {
    size_t i = 0;
    while (i < n) {
        uint32_t cp;
        size_t w = utf8_next(p + i, n - i, &cp);
        if (!py_isspace(cp)) break;
        i += w;
    }
    return i;
}

/* Start of the code point that ends at p + end. */
static size_t prev_cp(const char *p, size_t end) {
    size_t i = end - 1;
    size_t lim = end >= 4 ? end - 4 : 0;
    while (i > lim && ((unsigned char)p[i] & 0xc0) == 0x80) i--;
    uint32_t cp;
    if (utf8_next(p + i, end - i, &cp) != end - i) return end - 1;
    return i;
}

size_t ws_suffix(const char *p, size_t n) {
    size_t end = n;
    while (end > 0) {
        size_t s = prev_cp(p, end);
        uint32_t cp;
        utf8_next(p + s, end - s, &cp);
        if (!py_isspace(cp)) break;
        end = s;
    }
    return n - end;
}

/* ---- case ---- */

static void put_cp(rt *r, tstrb *b, uint32_t cp) {
    char u[4];
    sb_put(r, b, u, utf8_put(cp, u));
}

static void put_upper(rt *r, tstrb *b, uint32_t cp) {
    if (cp == 0xdf) sb_put(r, b, "SS", 2);
    else put_cp(r, b, py_upper(cp));
}

/* mode: 0 lower, 1 upper, 2 capitalize, 3 str.title */
static tv map_case(rt *r, tv s, int mode) {
    tstrb b = {0};
    const char *p = s.u.s.p;
    size_t n = s.u.s.n, i = 0;
    bool prev_cased = false, first = true;
    while (i < n) {
        uint32_t cp;
        size_t w = utf8_next(p + i, n - i, &cp);
        bool up = mode == 1 || (mode == 2 && first) || (mode == 3 && !prev_cased);
        if (up) put_upper(r, &b, cp);
        else put_cp(r, &b, py_lower(cp));
        prev_cased = is_cased(cp);
        first = false;
        i += w;
    }
    return sb_done(&b);
}

tv str_upper(rt *r, tv s) { return map_case(r, s, 1); }
tv str_lower(rt *r, tv s) { return map_case(r, s, 0); }
tv str_capitalize(rt *r, tv s) { return map_case(r, s, 2); }
tv str_title(rt *r, tv s) { return map_case(r, s, 3); }

/* Jinja2: each run between [-\s({[<]+ separators gets its first character
 * upper-cased and the rest lower-cased. */
tv str_jinja_title(rt *r, tv s) {
    tstrb b = {0};
    const char *p = s.u.s.p;
    size_t n = s.u.s.n, i = 0;
    bool word_start = true;
    while (i < n) {
        uint32_t cp;
        size_t w = utf8_next(p + i, n - i, &cp);
        bool sep = py_isspace(cp) || cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<';
        if (sep) {
            sb_put(r, &b, p + i, w);
            word_start = true;
        } else {
            if (word_start) put_upper(r, &b, cp);
            else put_cp(r, &b, py_lower(cp));
            word_start = false;
        }
        i += w;
    }
    return sb_done(&b);
}

/* ---- strip, replace, split ---- */

static bool in_chars(uint32_t cp, tv chars) {
    if (chars.kind != TV_STR) return py_isspace(cp);
    const char *p = chars.u.s.p;
    size_t n = chars.u.s.n, i = 0;
    while (i < n) {
        uint32_t c;
        i += utf8_next(p + i, n - i, &c);
        if (c == cp) return true;
    }
    return false;
}

tv str_strip(rt *r, tv s, tv chars, int which) {
    if (chars.kind != TV_STR && chars.kind != TV_NONE && tv_given(chars))
        rt_fail(r, "strip arg must be None or str");
    const char *p = s.u.s.p;
    size_t a = 0, e = s.u.s.n;
    if (which & 1) {
        while (a < e) {
            uint32_t cp;
            size_t w = utf8_next(p + a, e - a, &cp);
            if (!in_chars(cp, chars)) break;
            a += w;
        }
    }
    if (which & 2) {
        while (e > a) {
            size_t st = prev_cp(p, e);
            if (st < a) st = a;
            uint32_t cp;
            utf8_next(p + st, e - st, &cp);
            if (!in_chars(cp, chars)) break;
            e = st;
        }
    }
    return tv_str(p + a, e - a);
}

static const char *find_bytes(const char *h, size_t hn, const char *nd, size_t nn) {
    if (nn == 0) return h;
    if (nn > hn) return NULL;
    const char *end = h + hn - nn;
    for (const char *p = h; p <= end; p++) {
        p = memchr(p, nd[0], (size_t)(end - p) + 1);
        if (!p) return NULL;
        if (memcmp(p, nd, nn) == 0) return p;
    }
    return NULL;
}

static const char *rfind_bytes(const char *h, size_t hn, const char *nd, size_t nn) {
    if (nn > hn) return NULL;
    for (size_t i = hn - nn + 1; i-- > 0;)
        if (memcmp(h + i, nd, nn) == 0) return h + i;
    return NULL;
}

tv str_replace(rt *r, tv s, tv old, tv new_, int64_t count) {
    const char *p = s.u.s.p;
    size_t n = s.u.s.n;
    tstrb b = {0};
    if (old.u.s.n == 0) {
        /* insert `new` before every code point and at the end */
        size_t i = 0;
        int64_t done = 0;
        while (count < 0 || done < count) {
            sb_put(r, &b, new_.u.s.p, new_.u.s.n);
            done++;
            if (i >= n) break;
            uint32_t cp;
            size_t w = utf8_next(p + i, n - i, &cp);
            sb_put(r, &b, p + i, w);
            i += w;
        }
        sb_put(r, &b, p + i, n - i);
        return sb_done(&b);
    }
    size_t i = 0;
    int64_t done = 0;
    bool changed = false;
    while (count < 0 || done < count) {
        const char *hit = find_bytes(p + i, n - i, old.u.s.p, old.u.s.n);
        if (!hit) break;
        size_t at = (size_t)(hit - p);
        sb_put(r, &b, p + i, at - i);
        sb_put(r, &b, new_.u.s.p, new_.u.s.n);
        i = at + old.u.s.n;
        done++;
        changed = true;
    }
    if (!changed) return s;
    sb_put(r, &b, p + i, n - i);
    return sb_done(&b);
}

tv str_split(rt *r, tv s, tv sep, int64_t maxsplit, bool from_right) {
    const char *p = s.u.s.p;
    size_t n = s.u.s.n;
    tvec parts = {0};
    if (sep.kind == TV_STR) {
        if (sep.u.s.n == 0) rt_fail(r, "empty separator");
        const char *sp = sep.u.s.p;
        size_t sn = sep.u.s.n;
        if (!from_right) {
            size_t i = 0;
            while (maxsplit < 0 || (int64_t)parts.n < maxsplit) {
                const char *hit = find_bytes(p + i, n - i, sp, sn);
                if (!hit) break;
                vec_push(r, &parts, tv_str(p + i, (size_t)(hit - p) - i));
                i = (size_t)(hit - p) + sn;
            }
            vec_push(r, &parts, tv_str(p + i, n - i));
        } else {
            size_t e = n;
            while (maxsplit < 0 || (int64_t)parts.n < maxsplit) {
                const char *hit = rfind_bytes(p, e, sp, sn);
                if (!hit) break;
                size_t at = (size_t)(hit - p);
                vec_push(r, &parts, tv_str(p + at + sn, e - at - sn));
                e = at;
            }
            vec_push(r, &parts, tv_str(p, e));
            for (size_t a = 0, b = parts.n - 1; a < b; a++, b--) {
                tv t = parts.items[a];
                parts.items[a] = parts.items[b];
                parts.items[b] = t;
            }
        }
        return vec_done(r, &parts, LIST_PLAIN);
    }
    /* runs of whitespace; no empty strings */
    if (!from_right) {
        size_t i = ws_prefix(p, n);
        while (i < n) {
            if (maxsplit >= 0 && (int64_t)parts.n >= maxsplit) {
                vec_push(r, &parts, tv_str(p + i, n - i));
                break;
            }
            size_t j = i;
            while (j < n) {
                uint32_t cp;
                size_t w = utf8_next(p + j, n - j, &cp);
                if (py_isspace(cp)) break;
                j += w;
            }
            vec_push(r, &parts, tv_str(p + i, j - i));
            i = j + ws_prefix(p + j, n - j);
        }
    } else {
        size_t e = n - ws_suffix(p, n);
        while (e > 0) {
            if (maxsplit >= 0 && (int64_t)parts.n >= maxsplit) {
                vec_push(r, &parts, tv_str(p, e));
                break;
            }
            size_t j = e;
            while (j > 0) {
                size_t st = prev_cp(p, j);
                uint32_t cp;
                utf8_next(p + st, j - st, &cp);
                if (py_isspace(cp)) break;
                j = st;
            }
            vec_push(r, &parts, tv_str(p + j, e - j));
            e = j - ws_suffix(p, j);
        }
        for (size_t a = 0, b = parts.n ? parts.n - 1 : 0; a < b; a++, b--) {
            tv t = parts.items[a];
            parts.items[a] = parts.items[b];
            parts.items[b] = t;
        }
    }
    return vec_done(r, &parts, LIST_PLAIN);
}

static size_t line_break_at(const char *p, size_t n, size_t i) {
    uint32_t cp;
    size_t w = utf8_next(p + i, n - i, &cp);
    if (cp == '\r') return (i + 1 < n && p[i + 1] == '\n') ? 2 : 1;
    if (cp == '\n' || cp == 0x0b || cp == 0x0c || cp == 0x1c || cp == 0x1d || cp == 0x1e || cp == 0x85 ||
        cp == 0x2028 || cp == 0x2029)
        return w;
    return 0;
}

tv str_splitlines(rt *r, tv s, bool keepends) {
    const char *p = s.u.s.p;
    size_t n = s.u.s.n, start = 0, i = 0;
    tvec lines = {0};
    while (i < n) {
        size_t br = line_break_at(p, n, i);
        if (br) {
            vec_push(r, &lines, tv_str(p + start, (keepends ? i + br : i) - start));
            i += br;
            start = i;
        } else {
            uint32_t cp;
            i += utf8_next(p + i, n - i, &cp);
        }
    }
    if (start < n) vec_push(r, &lines, tv_str(p + start, n - start));
    return vec_done(r, &lines, LIST_PLAIN);
}

/* ---- indexing ---- */

static bool is_ascii(const char *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)p[i] >= 0x80) return false;
    return true;
}

tv str_slice(rt *r, tv s, tv start, tv stop, tv step) {
    const char *p = s.u.s.p;
    size_t n = s.u.s.n;
    bool ascii = is_ascii(p, n);
    int64_t len = ascii ? (int64_t)n : (int64_t)utf8_count(p, n);
    int64_t lo, st;
    int64_t count = py_slice_indices(r, len, start, stop, step, &lo, &st);
    if (count <= 0) return tv_str("", 0);
    if (st == 1) {
        if (ascii) return tv_str(p + lo, (size_t)count);
        size_t a = utf8_offset(p, n, (size_t)lo);
        size_t e = a + utf8_offset(p + a, n - a, (size_t)count);
        return tv_str(p + a, e - a);
    }
    /* general step: offsets of every code point */
    size_t *off = rt_alloc(r, ((size_t)len + 1) * sizeof *off);
    size_t i = 0;
    for (int64_t k = 0; k < len; k++) {
        off[k] = i;
        uint32_t cp;
        i += ascii ? 1 : utf8_next(p + i, n - i, &cp);
    }
    off[len] = n;
    tstrb b = {0};
    for (int64_t k = 0, idx = lo; k < count; k++, idx += st) sb_put(r, &b, p + off[idx], off[idx + 1] - off[idx]);
    return sb_done(&b);
}

tv str_index(rt *r, tv s, int64_t i) {
    const char *p = s.u.s.p;
    size_t n = s.u.s.n;
    int64_t len = (int64_t)utf8_count(p, n);
    int64_t k = i < 0 ? i + len : i;
    if (k < 0 || k >= len) return tv_undef_msg(r, "str object has no element %lld", (long long)i);
    size_t a = utf8_offset(p, n, (size_t)k);
    uint32_t cp;
    return tv_str(p + a, utf8_next(p + a, n - a, &cp));
}

tv str_repeat(rt *r, tv s, int64_t times) {
    if (times <= 0 || s.u.s.n == 0) return tv_str("", 0);
    if ((uint64_t)times > SIZE_MAX / s.u.s.n) rt_fail(r, "repeated string is too long");
    size_t total = s.u.s.n * (size_t)times;
    char *buf = rt_alloc(r, total);
    for (int64_t i = 0; i < times; i++) memcpy(buf + (size_t)i * s.u.s.n, s.u.s.p, s.u.s.n);
    return tv_str(buf, total);
}

tv str_center(rt *r, tv s, int64_t width, const char *fill, size_t fill_n, int align) {
    int64_t len = (int64_t)utf8_count(s.u.s.p, s.u.s.n);
    if (width <= len) return s;
    int64_t marg = width - len, left;
    if (align < 0) left = 0;
    else if (align > 0) left = marg;
    else left = marg / 2 + (marg & width & 1);
    if (marg > (int64_t)(SIZE_MAX / 8)) rt_fail(r, "padded string is too long");
    tstrb b = {0};
    for (int64_t i = 0; i < left; i++) sb_put(r, &b, fill, fill_n);
    sb_put(r, &b, s.u.s.p, s.u.s.n);
    for (int64_t i = left; i < marg; i++) sb_put(r, &b, fill, fill_n);
    return sb_done(&b);
}
