/*
 * tmpl_internal.h - what the files of src/template share: the arena, the
 * value type, the syntax tree and the render state.
 *
 * Memory: the syntax tree lives in the template's arena; every value made
 * during a render lives in that render's arena, freed in one go at the end.
 * Values are therefore plain structs copied by value, with pointers into the
 * arena, the template, or nothing. The arena counts bytes against
 * tmpl_options.max_memory.
 *
 * Errors: parsing and rendering stop at the first error by longjmp back to
 * tmpl_parse / tmpl_render (as Lua does), which free the arena. Nothing
 * between needs cleanup code, because nothing between owns memory outside the
 * arena except the output buffers, which the render state tracks.
 */
#ifndef PDL_TEMPLATE_INTERNAL_H
#define PDL_TEMPLATE_INTERNAL_H

#include <setjmp.h>
#include <stdarg.h>

#include "template/template.h"
#include "util/error.h"

#if defined(__GNUC__)
#define TMPL_NORETURN __attribute__((noreturn))
#else
#define TMPL_NORETURN
#endif

/* ---------------------------------------------------------------------------
 * Arena (arena.c)
 * ------------------------------------------------------------------------- */

typedef struct tmpl_arena {
    struct arena_chunk *head;
    size_t used;   /* bytes handed out, counted against limit */
    size_t limit;  /* 0 = none */
} tmpl_arena;

/* 8-byte aligned, zeroed; NULL when over the limit or out of memory. */
void *arena_alloc(tmpl_arena *a, size_t n);
void arena_release(tmpl_arena *a);

/* ---------------------------------------------------------------------------
 * Values (value.c)
 * ------------------------------------------------------------------------- */

typedef enum tv_kind {
    TV_UNDEF = 0, /* Jinja2 Undefined; `sub` says how to word its error */
    TV_NONE,
    TV_BOOL,
    TV_INT,       /* 64-bit; overflow is an error */
    TV_FLOAT,
    TV_STR,       /* UTF-8 bytes, not NUL-terminated */
    TV_LIST,      /* `sub` says list, tuple or which iterator it stands for */
    TV_DICT,      /* insertion-ordered, immutable once built (sandbox) */
    TV_NS,        /* namespace(): a dict whose attributes `set` may change */
    TV_FUNC,      /* builtin callable, possibly bound to `self` */
    TV_MACRO,
    TV_LOOP,      /* the `loop` variable of a for loop */
} tv_kind;

/* TV_LIST flavours: what Python object the sequence stands for. Generators
 * are always true and have no length; the views print as dict_items(...). */
enum { LIST_PLAIN = 0, LIST_TUPLE, LIST_GEN, LIST_ITEMS, LIST_KEYS, LIST_VALUES, LIST_RANGE };

/* TV_UNDEF flavours: the error message an operation on it raises. */
enum {
    UNDEF_NAME = 0, /* "'NAME' is undefined" */
    UNDEF_ATTR,     /* "'TYPE object' has no attribute 'NAME'" (aux = owner's kind) */
    UNDEF_MSG,      /* s holds the whole message */
    UNDEF_ABSENT,   /* internal: an argument that was not passed */
};

typedef struct tlist tlist;
typedef struct tdict tdict;
typedef struct tfunc tfunc;
typedef struct tmacro tmacro;
typedef struct tloop tloop;

typedef struct tv {
    uint8_t kind;
    uint8_t sub;   /* LIST_* or UNDEF_* */
    uint16_t aux;  /* UNDEF_ATTR: the owner's tv_kind (+ LIST_* << 8) */
    union {
        bool b;
        int64_t i;
        double f;
        struct {
            const char *p;
            size_t n;
        } s;       /* TV_STR; TV_UNDEF: the name or message */
        tlist *l;
        tdict *d;  /* TV_DICT, TV_NS */
        tfunc *fn;
        tmacro *m;
        tloop *lp;
    } u;
} tv;

struct tlist {
    size_t n;
    tv *items;
    int64_t range[3]; /* LIST_RANGE: start, stop, step (for printing) */
};

struct tdict {
    size_t n, cap;
    tv *keys, *vals;
    int32_t *index;   /* open addressing over keys, built when n grows past 8 */
    size_t index_cap; /* power of two, 0 = no index */
};

struct rt;
/* Positional and keyword arguments of a call. */
typedef struct tkwarg {
    const char *name;
    size_t n;
    tv v;
} tkwarg;
typedef struct targs {
    int n;
    tv *pos;
    int nkw;
    tkwarg *kw;
} targs;
typedef tv (*tmpl_builtin)(struct rt *r, tv self, const targs *a);

struct tfunc {
    const char *name;  /* for messages: "items", "raise_exception" */
    tmpl_builtin call;
    tv self;           /* the bound object of a method */
};

/* ---------------------------------------------------------------------------
 * Syntax tree (parser.c)
 * ------------------------------------------------------------------------- */

typedef enum tnode_kind {
    /* statements */
    N_BODY,      /* items: statements */
    N_DATA,      /* s, n: literal text */
    N_OUTPUT,    /* a: expression to print */
    N_IF,        /* a: condition, b: body, c: else body or elif N_IF */
    N_FOR,       /* a: target, b: iterable, c: filter condition, d: body, e: else body */
    N_SET,       /* a: target (N_NAME, N_NSREF, N_TUPLE), b: value */
    N_SETBLOCK,  /* a: target, b: filter chain (innermost a == NULL) or NULL, d: body */
    N_MACRO,     /* s: name, items: N_PARAM, d: body, flags: MACRO_* */
    N_CALLBLOCK, /* a: the call, items: caller's N_PARAM, d: caller body */
    N_FILTERBLOCK, /* b: filter chain, d: body */
    N_WITH,      /* items: N_SET, d: body */
    N_BREAK,
    N_CONTINUE,
    /* expressions */
    N_CONST,     /* val */
    N_NAME,      /* s, n */
    N_NSREF,     /* a: N_NAME of the namespace, s: attribute (set target only) */
    N_GETATTR,   /* a: object, s: attribute */
    N_GETITEM,   /* a: object, b: key */
    N_SLICE,     /* a: object, b: start, c: stop, d: step (each may be NULL) */
    N_CALL,      /* a: callee, items: arguments (N_KWARG, N_STARARGS, N_STARKW or expressions) */
    N_KWARG,     /* s: name, a: value */
    N_STARARGS,  /* a */
    N_STARKW,    /* a */
    N_FILTER,    /* a: input, s: name, fn: filter index or -1, items: arguments */
    N_TEST,      /* a: input, s: name, fn: test index or -1, items: arguments */
    N_NOT,       /* a */
    N_NEG,       /* a */
    N_POS,       /* a */
    N_BINOP,     /* op: BIN_*, a, b */
    N_AND,       /* a, b */
    N_OR,        /* a, b */
    N_COMPARE,   /* a: first operand, items: N_CMPOP (op, a) */
    N_CMPOP,
    N_COND,      /* a: value if true, b: condition, c: value if false or NULL */
    N_LIST,      /* items */
    N_TUPLE,     /* items */
    N_DICT,      /* items: N_PAIR (a: key, b: value) */
    N_PAIR,
    N_PARAM,     /* s: name, a: default or NULL */
} tnode_kind;

enum { BIN_ADD, BIN_SUB, BIN_MUL, BIN_DIV, BIN_FLOORDIV, BIN_MOD, BIN_POW, BIN_CONCAT };
enum { CMP_EQ, CMP_NE, CMP_LT, CMP_LE, CMP_GT, CMP_GE, CMP_IN, CMP_NOTIN };
enum { MACRO_VARARGS = 1, MACRO_KWARGS = 2, MACRO_CALLER = 4 };

typedef struct tnode tnode;
struct tnode {
    uint8_t kind, op;
    uint16_t flags;
    int line;
    int fn;
    const char *s;
    size_t n;
    tv val;
    tnode *a, *b, *c, *d, *e;
    tnode **items;
    int n_items;
};

struct tmacro {
    const tnode *def;     /* N_MACRO, or N_CALLBLOCK for `caller` */
    struct scope *closure;
    tv caller;            /* the caller macro passed by {% call %}, or UNDEF */
};

/* The `loop` variable: the items being iterated and the current index. */
struct tloop {
    tlist *items;
    size_t i;           /* index0 */
    int depth0;
    bool changed_set;   /* loop.changed() has a previous value */
    tv changed_last;
};

struct tmpl_template {
    tmpl_arena arena;
    tnode *root; /* N_BODY */
};

/* ---------------------------------------------------------------------------
 * Lexer (lexer.c)
 * ------------------------------------------------------------------------- */

typedef enum tok_type {
    T_EOF = 0,
    T_DATA,        /* literal text, whitespace control applied */
    T_VAR_BEGIN,   /* {{ */
    T_VAR_END,     /* }} */
    T_BLOCK_BEGIN, /* {% */
    T_BLOCK_END,   /* %} */
    T_NAME,
    T_STRING,      /* escapes decoded */
    T_INT,
    T_FLOAT,
    T_OP,          /* op holds the operator text */
} tok_type;

typedef struct ttoken {
    tok_type type;
    int line;
    const char *s; /* T_DATA, T_NAME, T_STRING: the text; T_OP: the operator */
    size_t n;
    int64_t i;
    double f;
} ttoken;

typedef struct tlexed {
    ttoken *toks;
    size_t n;
} tlexed;

/* Common error path of lexer and parser. */
typedef struct tparse_state {
    tmpl_arena *arena;
    tmpl_error *err;
    jmp_buf jb;
} tparse_state;

TMPL_NORETURN void parse_fail(tparse_state *ps, int line, const char *fmt, ...) PDL_PRINTF(3, 4);
void *parse_alloc(tparse_state *ps, size_t n);
/* Tokenizes the whole source (newlines normalized, one trailing newline
 * dropped, as Jinja2 does). */
void tmpl_lex(tparse_state *ps, const char *src, size_t len, tlexed *out);
tnode *tmpl_parse_tokens(tparse_state *ps, const tlexed *lx);

/* ---------------------------------------------------------------------------
 * Render state (eval.c)
 * ------------------------------------------------------------------------- */

typedef struct scope {
    struct scope *parent;
    tdict vars;
    bool captured; /* a macro closes over it: a loop must not reuse it */
} scope;

typedef struct sbuf {
    char *p;   /* malloc'ed */
    size_t n, cap;
    struct sbuf *prev;
} sbuf;

typedef struct rt {
    tmpl_arena arena;
    tmpl_options opt;
    tmpl_error *err;
    jmp_buf jb;
    sbuf *out;       /* current output; a stack of captures */
    scope *globals;
    scope *sc;       /* innermost scope */
    int line;        /* the line being executed, for messages */
    int depth;
    uint64_t steps;
} rt;

TMPL_NORETURN void rt_fail(rt *r, const char *fmt, ...) PDL_PRINTF(2, 3);
void *rt_alloc(rt *r, size_t n);
char *rt_strdup(rt *r, const char *s, size_t n);
void rt_step(rt *r);

/* eval.c: evaluation entry points used by filters and methods. */
tv rt_call(rt *r, tv callee, const targs *a);
tv rt_getattr(rt *r, tv obj, const char *name, size_t n);
tv rt_getitem(rt *r, tv obj, tv key);
void rt_out(rt *r, const char *s, size_t n);
/* Python's binary operators (BIN_*) and comparisons (CMP_*). */
tv rt_binop(rt *r, int op, tv a, tv b);
bool rt_compare_op(rt *r, int op, tv a, tv b);

/* ---------------------------------------------------------------------------
 * Value helpers (value.c)
 * ------------------------------------------------------------------------- */

tv tv_undef_name(const char *name, size_t n);
tv tv_undef_attr(tv owner, const char *name, size_t n);
tv tv_undef_msg(rt *r, const char *fmt, ...) PDL_PRINTF(2, 3);
tv tv_absent(void);
bool tv_given(tv v);
tv tv_none(void);
tv tv_bool(bool b);
tv tv_int(int64_t i);
tv tv_float(double f);
tv tv_str(const char *p, size_t n);
tv tv_cstr(const char *s);
tv tv_strdup(rt *r, const char *p, size_t n);
tv tv_list_new(rt *r, size_t n, int sub); /* n items, all UNDEF */
tv tv_dict_new(rt *r, size_t cap, int kind); /* TV_DICT or TV_NS */
tv tv_func(rt *r, const char *name, tmpl_builtin fn, tv self);

/* Raises the undefined value's error (for operations Undefined refuses). */
TMPL_NORETURN void tv_undef_fail(rt *r, tv u);
bool tv_is_num(tv v);     /* int, float or bool */
const char *tv_type_name(tv v); /* Python's type name: "str", "dict", "NoneType" */
bool tv_truthy(rt *r, tv v);
bool tv_equal(tv a, tv b);
int tv_compare(rt *r, tv a, tv b, const char *op); /* <0, 0, >0; TypeError when unordered */
uint64_t tv_hash(tv v);
double tv_num(tv v);      /* int/float/bool as double */

void dict_set(rt *r, tdict *d, tv key, tv val);
tv *dict_get(const tdict *d, tv key);
tv *dict_get_str(const tdict *d, const char *k, size_t n);

/* A growable list under construction. */
typedef struct tvec {
    tv *items;
    size_t n, cap;
} tvec;
void vec_push(rt *r, tvec *v, tv x);
tv vec_done(rt *r, tvec *v, int sub);

/* Iterates anything Python can: lists, strings (code points), dict keys,
 * Undefined (empty). Returns the items as a list. */
tv tv_iterate(rt *r, tv v);
/* Python len(); TypeError for what has none. */
int64_t tv_len(rt *r, tv v);

/* Python str() and repr(), appended to a growable byte buffer in the arena. */
typedef struct tstrb {
    char *p;
    size_t n, cap;
} tstrb;
void sb_put(rt *r, tstrb *b, const char *s, size_t n);
void sb_putc(rt *r, tstrb *b, char c);
void sb_printf(rt *r, tstrb *b, const char *fmt, ...) PDL_PRINTF(3, 4);
tv sb_done(tstrb *b);
void tv_write_str(rt *r, tstrb *b, tv v);
void tv_write_repr(rt *r, tstrb *b, tv v);
tv tv_to_str(rt *r, tv v);  /* str(v) as a TV_STR; strings pass through */
void fmt_float_repr(double f, char *buf, size_t cap); /* Python repr(float) */

/* Python's slice.indices: normalizes start/stop/step (NONE or absent for
 * defaults) against len; returns the number of items. */
int64_t py_slice_indices(rt *r, int64_t len, tv start, tv stop, tv step, int64_t *out_start, int64_t *out_step);

/* Python number parsing as int() / float() accept strings; false if invalid. */
bool parse_py_int(const char *p, size_t n, int base, int64_t *out);
bool parse_py_float(const char *p, size_t n, double *out);

/* ---------------------------------------------------------------------------
 * Python str operations on UTF-8 (pystr.c)
 * ------------------------------------------------------------------------- */

/* Decodes one code point at p (n > 0 bytes left); invalid bytes decode as
 * themselves (one byte each). Returns the byte length. */
size_t utf8_next(const char *p, size_t n, uint32_t *cp);
size_t utf8_put(uint32_t cp, char out[4]);
size_t utf8_count(const char *p, size_t n);
/* Byte offset of code point index i (clamped to n). */
size_t utf8_offset(const char *p, size_t n, size_t i);
bool py_isspace(uint32_t cp);
bool py_isprintable(uint32_t cp);
uint32_t py_upper(uint32_t cp);
uint32_t py_lower(uint32_t cp);
bool py_isalpha(uint32_t cp);
bool py_isdigit(uint32_t cp);
/* Length of the whitespace run ending at p + n (all of it Python whitespace). */
size_t ws_suffix(const char *p, size_t n);
/* Length of the whitespace run starting at p. */
size_t ws_prefix(const char *p, size_t n);

tv str_upper(rt *r, tv s);
tv str_lower(rt *r, tv s);
tv str_capitalize(rt *r, tv s);
tv str_title(rt *r, tv s);         /* Python str.title() */
tv str_jinja_title(rt *r, tv s);   /* Jinja2's title filter */
/* strip: which = 1 left, 2 right, 3 both; chars UNDEF/NONE = whitespace. */
tv str_strip(rt *r, tv s, tv chars, int which);
tv str_replace(rt *r, tv s, tv old, tv new_, int64_t count);
/* split / rsplit; sep NONE = runs of whitespace. */
tv str_split(rt *r, tv s, tv sep, int64_t maxsplit, bool from_right);
tv str_splitlines(rt *r, tv s, bool keepends);
tv str_slice(rt *r, tv s, tv start, tv stop, tv step);
tv str_index(rt *r, tv s, int64_t i);  /* one code point, UNDEF when out of range */
tv str_repeat(rt *r, tv s, int64_t times);
tv str_center(rt *r, tv s, int64_t width, const char *fill, size_t fill_n, int align); /* align: -1 left, 0 center, 1 right */

/* ---------------------------------------------------------------------------
 * Filters, tests, methods, globals, formatting (filters.c, methods.c, format.c)
 * ------------------------------------------------------------------------- */

typedef tv (*tmpl_filter_fn)(rt *r, tv v, const targs *a);
typedef bool (*tmpl_test_fn)(rt *r, tv v, const targs *a);

int tmpl_filter_index(const char *name, size_t n);  /* -1 when unknown */
int tmpl_test_index(const char *name, size_t n);
tmpl_filter_fn tmpl_filter_at(int i);
/* Runs test i, checking its argument count. */
bool tmpl_call_test(rt *r, int i, tv v, const targs *a);
/* Applies a filter or test by name (map('upper'), select('odd')). */
tv tmpl_apply_filter(rt *r, const char *name, size_t n, tv v, const targs *a);
bool tmpl_apply_test(rt *r, const char *name, size_t n, tv v, const targs *a);

/* Binds call arguments to parameter names; out[i] is tv_absent() for those
 * not passed. Raises Python's TypeError wording on a bad call. */
void args_bind(rt *r, const char *fname, const targs *a, const char *const *names, int n_names, tv *out);

/* The method `name` of a str, dict or list value, or UNDEF when none. */
tv tmpl_method(rt *r, tv self, const char *name, size_t n);
/* Fills the global scope: range, dict, namespace, raise_exception, ... */
void tmpl_add_globals(rt *r, tdict *g);
/* Python's "%" string formatting (also the `format` filter) and str.format
 * (format.c). */
tv py_percent_format(rt *r, tv fmt, tv args);
tv py_str_format(rt *r, tv fmt, const targs *a);

/* ---------------------------------------------------------------------------
 * JSON (json_value.c)
 * ------------------------------------------------------------------------- */

tv tv_from_json(rt *r, const json_t *j);
/* json.dumps(v, ensure_ascii, indent, separators, sort_keys). indent: NONE,
 * an int or a string; separators: NONE or a 2-sequence of strings. */
tv tv_to_json(rt *r, tv v, bool ensure_ascii, tv indent, tv separators, bool sort_keys);

#endif
