/*
 * gram_numrange.c - JSON numbers inside an interval, as an expression over
 * their digits (JSON Schema minimum / maximum / exclusiveMinimum /
 * exclusiveMaximum on "integer" and "number").
 *
 * Bounds are exact decimal strings (never doubles), so 0.1 is 0.1 and a
 * bound of 1e30 works. Integers are written without leading zeros and never
 * as "-0". Bounded numbers are written without an exponent (every number in
 * the interval has such a form, so nothing valid is lost but spelling).
 *
 * The construction splits by sign, then by the integer part (the bound's own
 * integer part with a constrained fraction, the integers strictly between
 * with any fraction), and compares fraction digits left to right against
 * the bounds' digits (FRAC below).
 *
 * What it is not for: unbounded numbers (gram_json.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/gram_internal.h"
#include "util/error.h"

#define NUM_DIGITS 400

/* A finite decimal: sign, integer digits without leading zeros ("0" for
 * zero), fraction digits without trailing zeros. */
typedef struct dec {
    bool neg;
    char ip[NUM_DIGITS + 1];
    char fp[NUM_DIGITS + 1];
} dec;

/* Parses "-12.50e-3"-style text. */
static bool dec_parse(const char *s, dec *d) {
    memset(d, 0, sizeof *d);
    const char *p = s;
    if (*p == '-') d->neg = true, p++;
    else if (*p == '+') p++;
    char digits[2 * NUM_DIGITS + 4];
    int nd = 0, point = -1;
    for (; *p && *p != 'e' && *p != 'E'; p++) {
        if (*p == '.') {
            if (point >= 0) return false;
            point = nd;
        } else if (*p >= '0' && *p <= '9') {
            if (nd >= NUM_DIGITS) return false;
            digits[nd++] = *p;
        } else {
            return false;
        }
    }
    if (nd == 0) return false;
    if (point < 0) point = nd;
    if (*p == 'e' || *p == 'E') {
        long e = strtol(p + 1, NULL, 10);
        if (e > NUM_DIGITS || e < -NUM_DIGITS) return false;
        point += (int)e;
    }
    /* digits[0..nd) with the point after `point` digits (may be outside) */
    char ip[2 * NUM_DIGITS + 4], fp[2 * NUM_DIGITS + 4];
    int ni = 0, nf = 0;
    for (int k = (point < 0 ? point : 0); k < point; k++) ip[ni++] = (k >= 0 && k < nd) ? digits[k] : '0';
    for (int k = point < 0 ? point : point; k < nd; k++) fp[nf++] = k < 0 ? '0' : digits[k];
    if (point < 0) ni = 0;
    int a = 0;
    while (a < ni && ip[a] == '0') a++;
    while (nf > 0 && fp[nf - 1] == '0') nf--;
    if (ni - a > NUM_DIGITS || nf > NUM_DIGITS) return false;
    if (a == ni) strcpy(d->ip, "0");
    else memcpy(d->ip, ip + a, (size_t)(ni - a)), d->ip[ni - a] = 0;
    memcpy(d->fp, fp, (size_t)nf);
    d->fp[nf] = 0;
    if (strcmp(d->ip, "0") == 0 && nf == 0) d->neg = false;
    return true;
}

/* Compares magnitudes. */
static int mag_cmp(const dec *a, const dec *b) {
    size_t la = strlen(a->ip), lb = strlen(b->ip);
    if (la != lb) return la < lb ? -1 : 1;
    int c = strcmp(a->ip, b->ip);
    if (c) return c < 0 ? -1 : 1;
    c = strcmp(a->fp, b->fp);
    return c < 0 ? -1 : c > 0;
}

static bool is_zero(const dec *a) { return strcmp(a->ip, "0") == 0 && a->fp[0] == 0; }

static int dec_cmp(const dec *a, const dec *b) {
    if (a->neg != b->neg) return a->neg ? -1 : 1;
    int m = mag_cmp(a, b);
    return a->neg ? -m : m;
}

/* Integer digit strings (no leading zeros) plus or minus one. */
static void digits_inc(char *s) {
    int n = (int)strlen(s), i = n - 1;
    while (i >= 0 && s[i] == '9') s[i--] = '0';
    if (i >= 0) {
        s[i]++;
    } else {
        memmove(s + 1, s, (size_t)n + 1);
        s[0] = '1';
    }
}

static void digits_dec(char *s) { /* s > 0 */
    int n = (int)strlen(s), i = n - 1;
    while (i >= 0 && s[i] == '0') s[i--] = '9';
    s[i]--;
    if (s[0] == '0' && n > 1) memmove(s, s + 1, (size_t)n);
}

static int digits_cmp(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    if (la != lb) return la < lb ? -1 : 1;
    int c = strcmp(a, b);
    return c < 0 ? -1 : c > 0;
}

/* ---------------------------------------------------------------------------
 * Integers
 * ------------------------------------------------------------------------- */

static int32_t digit_range(gram_ir *ir, char lo, char hi) { return gx_byte_range(ir, (unsigned char)lo, (unsigned char)hi); }

/* Same-length digit strings from x to y (x <= y). */
static int32_t same_len(gram_ir *ir, const char *x, const char *y) {
    size_t n = strlen(x);
    if (n == 0) return gx_empty(ir);
    if (x[0] == y[0]) return gx_seqv(ir, digit_range(ir, x[0], x[0]), same_len(ir, x + 1, y + 1), GX_END);
    bool x_zeros = strspn(x + 1, "0") == n - 1, y_nines = strspn(y + 1, "9") == n - 1;
    int32_t any = gx_repeat(ir, digit_range(ir, '0', '9'), (int32_t)n - 1, (int32_t)n - 1);
    if (x_zeros && y_nines) return gx_seqv(ir, digit_range(ir, x[0], y[0]), any, GX_END);
    char nines[NUM_DIGITS + 1], zeros[NUM_DIGITS + 1];
    memset(nines, '9', n - 1);
    nines[n - 1] = 0;
    memset(zeros, '0', n - 1);
    zeros[n - 1] = 0;
    int32_t kids[3];
    int k = 0;
    char lo;
    if (x_zeros) {
        lo = x[0];
    } else {
        kids[k++] = gx_seqv(ir, digit_range(ir, x[0], x[0]), same_len(ir, x + 1, nines), GX_END);
        lo = (char)(x[0] + 1);
    }
    char top = y_nines ? y[0] : (char)(y[0] - 1);
    if (lo <= top) kids[k++] = gx_seqv(ir, digit_range(ir, lo, top), any, GX_END);
    if (!y_nines) kids[k++] = gx_seqv(ir, digit_range(ir, y[0], y[0]), same_len(ir, zeros, y + 1), GX_END);
    return gx_alt(ir, kids, k);
}

/* Integers a..b (a >= 1; b NULL: no upper bound), without leading zeros. */
static int32_t pos_range(gram_ir *ir, const char *a, const char *b) {
    if (b && digits_cmp(a, b) > 0) return gx_none(ir);
    size_t la = strlen(a), lb = b ? strlen(b) : la;
    int32_t kids[NUM_DIGITS + 2];
    int k = 0;
    char lo[NUM_DIGITS + 2], hi[NUM_DIGITS + 2];
    for (size_t len = la; len <= lb; len++) {
        if (len == la) strcpy(lo, a);
        else memset(lo, '0', len), lo[0] = '1', lo[len] = 0;
        if (b && len == lb) strcpy(hi, b);
        else memset(hi, '9', len), hi[len] = 0;
        kids[k++] = same_len(ir, lo, hi);
    }
    if (!b && la < GRAM_NUM_MAX_DIGITS) /* longer than a: any digits, up to the cap */
        kids[k++] = gx_seqv(ir, digit_range(ir, '1', '9'),
                            gx_repeat(ir, digit_range(ir, '0', '9'), (int32_t)la, GRAM_NUM_MAX_DIGITS - 1), GX_END);
    return gx_alt(ir, kids, k);
}

/* Non-negative integers a..b ("0" allowed; b NULL: unbounded). */
static int32_t nonneg_int_range(gram_ir *ir, const char *a, const char *b) {
    if (b && digits_cmp(a, b) > 0) return gx_none(ir);
    if (strcmp(a, "0") != 0) return pos_range(ir, a, b);
    int32_t zero = gx_str(ir, "0");
    if (b && strcmp(b, "0") == 0) return zero;
    return gx_altv(ir, zero, pos_range(ir, "1", b), GX_END);
}

/* ---------------------------------------------------------------------------
 * Fractions: digit strings d compared as 0.d against 0.lo and 0.hi
 * ------------------------------------------------------------------------- */

/* The fraction digits after one prefix: whether no more digits is allowed
 * (the rest is zero) and the expression of a non-empty rest of at most left
 * digits. lo / hi: the bounds' remaining digits (NULL: no bound on that side
 * any more). */
static void frac(gram_ir *ir, const char *lo, bool ls, const char *hi, bool hs, int left, bool *empty_ok,
                 int32_t *nonempty) {
    int32_t digit = digit_range(ir, '0', '9');
    if (!lo && !hi) {
        *empty_ok = true;
        *nonempty = left > 0 ? gx_repeat(ir, digit, 1, left) : gx_none(ir);
        return;
    }
    if (lo && !*lo && !hi) {
        *empty_ok = !ls;
        if (left <= 0) *nonempty = gx_none(ir);
        else if (ls) /* some digit must be non-zero: zeros, that digit, any digits */
            *nonempty = gx_seqv(ir, gx_repeat(ir, gx_str(ir, "0"), 0, left - 1), digit_range(ir, '1', '9'),
                                gx_repeat(ir, digit, 0, left - 1), GX_END);
        else *nonempty = gx_repeat(ir, digit, 1, left);
        return;
    }
    if (hi && !*hi && (!lo || !*lo)) {
        bool ok = !hs && !(lo && ls);
        *empty_ok = ok;
        *nonempty = ok && left > 0 ? gx_repeat(ir, gx_str(ir, "0"), 1, left) : gx_none(ir);
        return;
    }
    if (left <= 0) {
        *empty_ok = (!lo || (!*lo && !ls)) && (!hi || *hi || !hs);
        *nonempty = gx_none(ir);
        return;
    }
    bool lower_ok = !lo || (!*lo && !ls);
    bool upper_ok = !hi || *hi || !hs;
    *empty_ok = lower_ok && upper_ok;
    int32_t kids[12];
    int k = 0;
    char run_lo = 0; /* a run of digits with no bound left on either side */
    for (char c = '0'; c <= '9'; c++) {
        char lc = lo ? (*lo ? *lo : '0') : '0', hc = hi ? (*hi ? *hi : '0') : '9';
        bool excluded = (lo && c < lc) || (hi && c > hc);
        const char *nlo = (lo && c == lc) ? (*lo ? lo + 1 : lo) : NULL;
        const char *nhi = (hi && c == hc) ? (*hi ? hi + 1 : hi) : NULL;
        bool free_digit = !excluded && !nlo && !nhi;
        if (free_digit) {
            if (!run_lo) run_lo = c;
        }
        if ((!free_digit || c == '9') && run_lo) {
            char run_hi = free_digit ? c : (char)(c - 1);
            kids[k++] = gx_seqv(ir, digit_range(ir, run_lo, run_hi), gx_repeat(ir, digit, 0, left - 1), GX_END);
            run_lo = 0;
        }
        if (excluded || free_digit) continue;
        bool e;
        int32_t ne;
        frac(ir, nlo, ls, nhi, hs, left - 1, &e, &ne);
        int32_t rest = e ? gx_altv(ir, gx_empty(ir), ne, GX_END) : ne;
        kids[k++] = gx_seqv(ir, digit_range(ir, c, c), rest, GX_END);
    }
    *nonempty = gx_alt(ir, kids, k);
}

/* "" or "." digits, per frac(): at most GRAM_NUM_MAX_DIGITS past the
 * bounds' own digits (so every bound stays reachable). */
static int32_t frac_part(gram_ir *ir, const char *lo, bool ls, const char *hi, bool hs) {
    bool e;
    int32_t ne;
    size_t bl = lo ? strlen(lo) : 0, bh = hi ? strlen(hi) : 0;
    frac(ir, lo, ls, hi, hs, GRAM_NUM_MAX_DIGITS + (int)(bl > bh ? bl : bh), &e, &ne);
    int32_t dot = gx_seqv(ir, gx_str(ir, "."), ne, GX_END);
    return e ? gx_altv(ir, gx_empty(ir), dot, GX_END) : dot;
}

/* Non-negative decimals from a to b (b NULL: unbounded), exclusivity per side. */
static int32_t nonneg_dec(gram_ir *ir, const dec *a, bool aex, const dec *b, bool bex) {
    if (b && strcmp(a->ip, b->ip) == 0) return gx_seqv(ir, gx_str(ir, a->ip), frac_part(ir, a->fp, aex, b->fp, bex), GX_END);
    int32_t kids[3];
    int k = 0;
    kids[k++] = gx_seqv(ir, gx_str(ir, a->ip), frac_part(ir, a->fp, aex, NULL, false), GX_END);
    char lo[NUM_DIGITS + 2], hi[NUM_DIGITS + 2];
    strcpy(lo, a->ip);
    digits_inc(lo);
    if (b) {
        strcpy(hi, b->ip);
        digits_dec(hi); /* b's integer part > a's >= 0, so > 0 */
    }
    if (!b || digits_cmp(lo, hi) <= 0)
        kids[k++] = gx_seqv(ir, nonneg_int_range(ir, lo, b ? hi : NULL), frac_part(ir, NULL, false, NULL, false), GX_END);
    if (b) kids[k++] = gx_seqv(ir, gx_str(ir, b->ip), frac_part(ir, NULL, false, b->fp, bex), GX_END);
    return gx_alt(ir, kids, k);
}

/* ---------------------------------------------------------------------------
 * The interval
 * ------------------------------------------------------------------------- */

/* Integer bounds: the smallest integer >= lo (> when exclusive), as sign + digits. */
static void int_lower(const dec *d, bool excl, bool *neg, char *digits) {
    strcpy(digits, d->ip);
    *neg = d->neg;
    bool whole = d->fp[0] == 0;
    if (!d->neg) {
        if (!whole || excl) digits_inc(digits);
    } else if (whole && excl) {
        /* -n + 1 */
        digits_dec(digits);
    }
    /* a negative with a fraction: ceil(-n.f) = -n (truncation) */
    if (strcmp(digits, "0") == 0) *neg = false;
}

static void int_upper(const dec *d, bool excl, bool *neg, char *digits) {
    strcpy(digits, d->ip);
    *neg = d->neg;
    bool whole = d->fp[0] == 0;
    if (d->neg) {
        if (!whole || excl) digits_inc(digits);
    } else if (whole && excl) {
        if (strcmp(digits, "0") == 0) {
            strcpy(digits, "1");
            *neg = true;
        } else {
            digits_dec(digits);
        }
    }
    if (strcmp(digits, "0") == 0) *neg = false;
}

static int int_interval(gram_ir *ir, const dec *lo, bool lo_excl, const dec *hi, bool hi_excl, int32_t *out,
                        pdl_error *err) {
    bool ln = false, hn = false;
    char ld[NUM_DIGITS + 2], hd[NUM_DIGITS + 2];
    if (lo) int_lower(lo, lo_excl, &ln, ld);
    if (hi) int_upper(hi, hi_excl, &hn, hd);
    if (lo && hi) {
        int c = ln != hn ? (ln ? -1 : 1) : (ln ? -digits_cmp(ld, hd) : digits_cmp(ld, hd));
        if (c > 0) return err_fail(err, "no integer lies within the bounds");
    }
    int32_t kids[3];
    int k = 0;
    /* negatives: -(max(1, -hi) .. -lo) */
    if (!lo || ln) {
        const char *mag_lo = (hi && hn) ? hd : "1";
        kids[k++] = gx_seqv(ir, gx_str(ir, "-"), pos_range(ir, mag_lo, lo ? ld : NULL), GX_END);
    }
    /* zero and positives: max(0, lo) .. hi */
    if (!hi || !hn) {
        const char *from = (lo && !ln) ? ld : "0";
        kids[k++] = nonneg_int_range(ir, from, hi ? hd : NULL);
    }
    *out = gx_alt(ir, kids, k);
    return 0;
}

int gram_json_number_range(gram_ir *ir, const char *lo_s, bool lo_excl, const char *hi_s, bool hi_excl, bool integer,
                           int32_t *out, pdl_error *err) {
    dec lo, hi;
    if (lo_s && !dec_parse(lo_s, &lo)) return err_fail(err, "bound '%s' is not a number this grammar can use", lo_s);
    if (hi_s && !dec_parse(hi_s, &hi)) return err_fail(err, "bound '%s' is not a number this grammar can use", hi_s);
    if (lo_s && hi_s) {
        int c = dec_cmp(&lo, &hi);
        if (c > 0 || (c == 0 && (lo_excl || hi_excl))) return err_fail(err, "the lower bound is above the upper bound");
    }
    if (integer) return int_interval(ir, lo_s ? &lo : NULL, lo_excl, hi_s ? &hi : NULL, hi_excl, out, err);

    dec zero;
    dec_parse("0", &zero);
    int32_t kids[2];
    int k = 0;
    /* negatives: "-" and a magnitude in (max(0, -hi), -lo] */
    if (!lo_s || lo.neg) {
        dec mlo = zero, mhi;
        bool mlo_ex = true, mhi_ex = false;
        if (hi_s && hi.neg) {
            mlo = hi;
            mlo.neg = false;
            mlo_ex = hi_excl;
        }
        if (lo_s) {
            mhi = lo;
            mhi.neg = false;
            mhi_ex = lo_excl;
        }
        kids[k++] = gx_seqv(ir, gx_str(ir, "-"), nonneg_dec(ir, &mlo, mlo_ex, lo_s ? &mhi : NULL, mhi_ex), GX_END);
    }
    /* zero and positives */
    if (!hi_s || !hi.neg) {
        bool top_ok = !hi_s || !is_zero(&hi) || !hi_excl;
        if (top_ok) {
            dec plo = zero;
            bool plo_ex = false;
            if (lo_s && !lo.neg) {
                plo = lo;
                plo_ex = lo_excl;
            }
            kids[k++] = nonneg_dec(ir, &plo, plo_ex, hi_s ? &hi : NULL, hi_excl);
        }
    }
    *out = gx_alt(ir, kids, k);
    return 0;
}
