/*
 * test_chat_template.c - chat templates render exactly as Hugging Face
 * transformers' apply_chat_template renders them.
 *
 * What must hold: every case of reference/chat-templates/expected.json
 * renders byte-identical (or fails with the same message); the Jinja2
 * interpreter agrees with Jinja2 3.1 in Hugging Face's environment (sandbox,
 * trim_blocks, lstrip_blocks, loop controls, tojson as json.dumps with
 * ensure_ascii=False) on statements, whitespace control, filters, tests,
 * methods, operators, Python-style printing and undefined values, and on the
 * wording of errors; errors carry the template line; limits stop runaway
 * templates; random and truncated templates never crash; templates load from
 * tokenizer_config.json, chat_template.jinja and GGUF; `pagedlm template`
 * prints the text exactly and exits 1 on a template error.
 *
 * The expected strings below were computed with Jinja2 3.1.6 set up as
 * transformers sets it up (ImmutableSandboxedEnvironment, trim_blocks,
 * lstrip_blocks, loopcontrols, its tojson, raise_exception, strftime_now).
 */
#define _POSIX_C_SOURCE 200809L
#include <jansson.h>
#include <stdint.h>
#include <sys/wait.h>
#include <time.h>

#include "gguf_writer.h"
#include "template/template.h"
#include "test_util.h"

/* ---------------------------------------------------------------------------
 * Helpers
 * ------------------------------------------------------------------------- */

typedef struct tcase {
    const char *tmpl;
    const char *want; /* the text, or the error message when is_error */
    bool is_error;
} tcase;

/* Parses and renders; returns the text (malloc'ed) or NULL with err set. */
static char *render_opts(const char *src, const json_t *ctx, const tmpl_options *opts, size_t *len, tmpl_error *err) {
    tmpl_template *t;
    if (tmpl_parse(&t, src, strlen(src), err)) return NULL;
    char *out = NULL;
    size_t n = 0;
    int rc = tmpl_render(t, ctx, opts, &out, &n, err);
    tmpl_free(t);
    if (len) *len = n;
    return rc ? NULL : out;
}

static char *render(const char *src, const json_t *ctx, tmpl_error *err) { return render_opts(src, ctx, NULL, NULL, err); }

static json_t *parse_json(const char *text) {
    json_error_t je;
    json_t *j = json_loads(text, 0, &je);
    REQUIRE_MSG(j != NULL, "bad JSON in the test: %s", je.text);
    return j;
}

/* The text the template renders with ctx, or "ERROR: message". */
static char *outcome(const char *src, const json_t *ctx) {
    tmpl_error err;
    char *out = render(src, ctx, &err);
    if (out) return out;
    size_t n = strlen(err.message) + 8;
    char *e = malloc(n);
    snprintf(e, n, "ERROR: %s", err.message);
    return e;
}

static void check_table(const char *group, const tcase *cases, size_t n, const char *ctx_json) {
    json_t *ctx = parse_json(ctx_json);
    for (size_t i = 0; i < n; i++) {
        char *got = outcome(cases[i].tmpl, ctx);
        const char *g = got;
        if (cases[i].is_error) {
            bool ok = strncmp(g, "ERROR: ", 7) == 0 && strcmp(g + 7, cases[i].want) == 0;
            CHECK_MSG(ok, "%s[%zu] %s\n    got:  %s\n    want error: %s", group, i, cases[i].tmpl, g, cases[i].want);
        } else {
            CHECK_MSG(strcmp(g, cases[i].want) == 0, "%s[%zu] %s\n    got:  %s\n    want: %s", group, i, cases[i].tmpl, g,
                      cases[i].want);
        }
        free(got);
    }
    json_decref(ctx);
}

#define CHECK_TABLE(t) check_table(#t, t, sizeof t / sizeof *t, CTX_JSON)

static char *read_text(const char *path) {
    FILE *f = fopen(path, "rb");
    REQUIRE_MSG(f != NULL, "cannot read %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    size_t got = fread(buf, 1, (size_t)n, f);
    buf[got] = '\0';
    fclose(f);
    return buf;
}

/* ---------------------------------------------------------------------------
 * The interpreter against Jinja2 (tables computed with Jinja2 3.1.6)
 * ------------------------------------------------------------------------- */

/* The variables every table renders with. */
static const char CTX_JSON[] =
    "{\"s\": \"Hello World\", \"l\": [3, 1, 2], \"d\": {\"a\": 1, \"items\": 2, \"b\": [1, 2, {\"c\": \"x\"}]}, \"n\": null, \"e\": \"\", \"f\": 1.5, \"t\": true, \"u\": \"Übersetze: 你好 🌍 «ok»\\n\\tdone\", \"msgs\": [{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"yo\", \"tool_calls\": [{\"function\": {\"name\": \"f\", \"arguments\": {\"x\": 1, \"y\": [1, 2]}}}]}], \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"get\", \"parameters\": {\"type\": \"object\", \"properties\": {\"q\": {\"type\": \"string\"}}}}}]}";

static const tcase WHITESPACE[] = {
    {"a  {%- if true %} b {% endif -%}  c", "a b c", false},
    {"a\n  {% if true %}\n    x\n  {% endif %}\nb", "a\n    x\nb", false},
    {"  {%+ if true %}x{% endif %}", "  x", false},
    {"{% if true +%}\nx{% endif %}", "\nx", false},
    {"a {{- ' b ' -}} c", "a b c", false},
    {"a\n{{ 'b' }}\nc", "a\nb\nc", false},
    {"{% for i in l %}\n  {{ i }}\n{% endfor %}\n", "  3\n  1\n  2\n", false},
    {"{%- for i in l -%}\n  {{ i }}\n{%- endfor -%}\n", "312", false},
    {"x\r\ny\rz\n", "x\ny\nz", false},
    {"line\n", "line", false},
    {"line\n\n", "line\n", false},
    {"\t{% set x = 1 %}\n{{ x }}", "1", false},
    {"a  {# c #}\nb", "a  b", false},
    {"a\n  {# c #}\nb", "a\nb", false},
    {"a{#- c -#}  b", "ab", false},
    {"a {#+ c +#}\nb", "a \nb", false},
    {"  {%- if true %}x{% endif %}", "x", false},
    {"{{ 1 }} {% if true %}\n{% endif %}z", "1 z", false},
    {"{{ 1 }}\n  {% if true %}y{% endif %}", "1\ny", false},
    {"　 {% if true %}x{% endif %}", "x", false},
};
static const tcase COMMENTS_RAW[] = {
    {"{# a comment {{ not evaluated }} #}x", "x", false},
    {"{% raw %}{{ not rendered }} {% if %}{% endraw %}", "{{ not rendered }} {% if %}", false},
    {"a\n  {% raw %}\n  x {{ y }}\n  {% endraw %}\nb", "a\n\n  x {{ y }}\nb", false},
    {"{%- raw -%}  {{ x }}  {%- endraw -%}", "{{ x }}", false},
};
static const tcase IF[] = {
    {"{% if t %}yes{% else %}no{% endif %}", "yes", false},
    {"{% if n %}a{% elif e %}b{% elif l %}c{% else %}d{% endif %}", "c", false},
    {"{% if x %}a{% elif false %}b{% endif %}|", "|", false},
    {"{% if d.zz is defined %}a{% else %}b{% endif %}", "b", false},
    {"{% if 'a' in d and not n %}ok{% endif %}", "ok", false},
    {"{% if l, n %}tuple is true{% endif %}", "tuple is true", false},
};
static const tcase FOR[] = {
    {"{% for x in l %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}|{% endfor %}", "1032TrueFalse3|2121FalseFalse3|3210FalseTrue3|", false},
    {"{% for x in l %}[{{ loop.previtem }}<{{ x }}>{{ loop.nextitem }}]{% endfor %}", "[<3>1][3<1>2][1<2>]", false},
    {"{% for x in l %}{{ loop.cycle('a', 'b') }}{% endfor %}|{% for x in [1, 1, 2] %}{{ loop.changed(x) }}{% endfor %}", "aba|TrueFalseTrue", false},
    {"{% for x in l %}{{ loop.depth }}{{ loop.depth0 }}{% endfor %}", "101010", false},
    {"{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", "a=1;items=2;b=[1, 2, {'c': 'x'}];", false},
    {"{% for k in d %}{{ k }},{% endfor %}", "a,items,b,", false},
    {"{% for c in 'héllo' %}{{ c }}.{% endfor %}", "h.é.l.l.o.", false},
    {"{% for a, b in [[1, 2], [3, 4]] %}{{ a }}{{ b }}{% endfor %}", "1234", false},
    {"{% for x in l if x > 1 %}{{ loop.index }}/{{ loop.length }}:{{ x }} {% endfor %}", "1/2:3 2/2:2 ", false},
    {"{% for x in [] %}a{% else %}empty{% endfor %}", "empty", false},
    {"{% for x in l if x > 5 %}a{% else %}none matched{% endfor %}", "none matched", false},
    {"{% for x in x %}never{% endfor %}undefined iterates as empty", "undefined iterates as empty", false},
    {"{% for x in l %}{% for y in [1] %}{{ loop.index }}{% endfor %}{{ loop.index }}{% endfor %}", "111213", false},
    {"{% for m in msgs[::-1] %}{{ m.role }} {% endfor %}", "assistant user system ", false},
    {"{% for i in range(3) %}{{ i }}{% endfor %}", "012", false},
    {"{{ loop }}", "", false},
};
static const tcase LOOP_CONTROLS[] = {
    {"{% for x in l %}{% if x == 1 %}{% continue %}{% endif %}{{ x }}{% endfor %}", "32", false},
    {"{% for x in l %}{{ x }}{% if x == 1 %}{% break %}{% endif %}{% endfor %}", "31", false},
    {"{% for x in l %}{% for y in l %}{% if y == 1 %}{% break %}{% endif %}{{ x }}{{ y }} {% endfor %}{% endfor %}", "33 13 23 ", false},
    {"{% for x in l %}{% if true %}{% continue %}{% endif %}never{% endfor %}done", "done", false},
};
static const tcase SET_SCOPE[] = {
    {"{% set x = 1 %}{% set y = x + 1 %}{{ x }}{{ y }}", "12", false},
    {"{% set a, b = 1, 2 %}{{ a }}{{ b }}|{% set c, d = 'xy' %}{{ d }}", "12|y", false},
    {"{% for x in l %}{% set y = x %}{% endfor %}[{{ y }}]", "[]", false},
    {"{% set x = 1 %}{% for i in range(2) %}{{ x }}{% set x = 2 %}{{ x }}{% endfor %}{{ x }}", "12121", false},
    {"{% for i in range(3) %}{% if i == 0 %}{% set x = 5 %}{% endif %}[{{ x }}]{% endfor %}", "[5][][]", false},
    {"{% if true %}{% set x = 'set in if' %}{% endif %}{{ x }}", "set in if", false},
    {"{% set s = 'shadowed' %}{{ s }}", "shadowed", false},
    {"{% with a = 1 %}{% set b = 2 %}{{ a }}{{ b }}{% endwith %}[{{ a }}{{ b }}]", "12[]", false},
    {"{% set a = 5 %}{% with a = 1, b = a %}{{ a }}{{ b }}{% endwith %}", "15", false},
};
static const tcase NAMESPACE[] = {
    {"{% set ns = namespace(total=0, seen=[]) %}{% for x in l %}{% set ns.total = ns.total + x %}{% endfor %}{{ ns.total }}", "6", false},
    {"{% set ns = namespace() %}{% set ns.a = 'x' %}{{ ns.a }}|{{ ns.b }}|{{ ns }}", "x||<Namespace {'a': 'x'}>", false},
    {"{% set ns = namespace(d) %}{{ ns.a }}{{ ns['items'] }}", "12", false},
    {"{% set ns = namespace(found=false) %}{% for m in msgs %}{% if m.role == 'user' %}{% set ns.found = true %}{% endif %}{% endfor %}{{ ns.found }}", "True", false},
    {"{% set ns = namespace(i=0) %}{% for m in msgs %}{% if m.tool_calls is not defined %}{% set ns.i = ns.i + 1 %}{% endif %}{% endfor %}{{ ns.i }}", "2", false},
};
static const tcase BLOCK_SET[] = {
    {"{% set x %}  block {{ s }} {% endset %}[{{ x }}]", "[  block Hello World ]", false},
    {"{% set y | upper | trim %}  abc {% endset %}[{{ y }}]", "[ABC]", false},
    {"{% set ns = namespace(v='') %}{% set ns.v %}inner{% endset %}{{ ns.v }}", "inner", false},
    {"{% for i in l %}{% set line %}{{ i }}!{% endset %}{{ line }}{% endfor %}", "3!1!2!", false},
};
static const tcase MACROS[] = {
    {"{% macro m(a, b=2, c='z') %}{{ a }}-{{ b }}-{{ c }}{% endmacro %}{{ m(1) }}|{{ m(1, 3) }}|{{ m(1, c=5) }}|{{ m(a=9) }}", "1-2-z|1-3-z|1-2-5|9-2-z", false},
    {"{% macro m(a, b=a) %}{{ b }}{% endmacro %}{{ m(3) }}", "3", false},
    {"{% macro m(a) %}[{{ a }}]{% endmacro %}{{ m() }}", "[]", false},
    {"{% macro m() %}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, c=3) }}", "(1, 2){'c': 3}", false},
    {"{% macro m(x) %}<{{ caller(x) }}>{% endmacro %}{% call(y) m(5) %}[{{ y }}]{% endcall %}", "<[5]>", false},
    {"{% macro m() %}{{ s }}{% endmacro %}{% set s = 'later' %}{{ m() }}", "later", false},
    {"{% macro render(c) %}{% if c is string %}{{ c }}{% else %}{% for p in c %}{{ render(p) }}{% endfor %}{% endif %}{% endmacro %}{{ render(['a', ['b', 'c']]) }}", "abc", false},
    {"{% macro m() %}{% set inner = 1 %}{% endmacro %}{{ m() }}[{{ inner }}]", "[]", false},
    {"{% macro m(x) %}{{ x }}{% endmacro %}{{ m }}|{{ m('a') ~ m('b') }}|{{ m is callable }}", "<Macro 'm'>|ab|True", false},
};
static const tcase FILTER_BLOCK[] = {
    {"{% filter upper %}hello {{ s }}{% endfilter %}", "HELLO HELLO WORLD", false},
    {"{% filter replace('l', 'L') | trim %}  hello  {% endfilter %}", "heLLo", false},
    {"{% generation %}kept{% endgeneration %}", "kept", false},
};
static const tcase FILTERS_STRINGS[] = {
    {"{{ s|upper }}|{{ s|lower }}|{{ s|length }}|{{ u|length }}|{{ s|count }}", "HELLO WORLD|hello world|11|26|11", false},
    {"{{ 'hello world-wide (x)'|title }}|{{ 'hELLO wORLD'|capitalize }}|{{ u|upper }}|{{ 'ÄÖÜ'|lower }}", "Hello World-Wide (X)|Hello world|ÜBERSETZE: 你好 🌍 «OK»\n\tDONE|äöü", false},
    {"[{{ '  a b  '|trim }}]|[{{ 'xxaxx'|trim('x') }}]|[{{ u|trim }}]|[{{ '\\u3000x\\u3000'|trim }}]", "[a b]|[a]|[Übersetze: 你好 🌍 «ok»\n\tdone]|[x]", false},
    {"{{ s|replace('o', '0') }}|{{ s|replace('o', '0', 1) }}|{{ 'abc'|replace('', '-') }}", "Hell0 W0rld|Hell0 World|-a-b-c-", false},
    {"{{ 5|string }}|{{ none|string }}|{{ l|string }}|{{ x|string }}|{{ s|safe }}", "5|None|[3, 1, 2]||Hello World", false},
    {"{{ 'a\\nb\\n\\nc'|indent(2) }}|{{ 'a\\nb'|indent(2, true) }}|{{ 'a\\n\\nb'|indent('> ', blank=true) }}", "a\n  b\n\n  c|  a\n  b|a\n> \n> b", false},
    {"{{ 'abc'|center(9) }}|{{ 'hello world foo bar baz'|truncate(12) }}|{{ 'hello world'|truncate(8) }}|{{ 'hello'|truncate(3, true, '') }}", "   abc   |hello...|hello world|hello", false},
    {"{{ 'a b  c'|wordcount }}|{{ \"<a href='x'>&\"|e }}|{{ 'x'|escape }}|{{ 'abc'|reverse }}", "3|&lt;a href=&#39;x&#39;&gt;&amp;|x|cba", false},
    {"{{ '%s=%s'|format('a', 1) }}|{{ '%(x)s'|format(x=1) }}", "a=1|1", false},
};
static const tcase FILTERS_SEQUENCES[] = {
    {"{{ l|join(', ') }}|{{ l|join }}|{{ msgs|join('/', attribute='role') }}|{{ x|join(',') }}", "3, 1, 2|312|system/user/assistant|", false},
    {"{{ l|first }}|{{ l|last }}|{{ 'abc'|first }}|{{ d|first }}|{{ []|first }}|", "3|2|a|a||", false},
    {"{{ l|sort }}|{{ l|sort(reverse=true) }}|{{ ['b', 'A', 'a']|sort }}|{{ ['b', 'A', 'a']|sort(case_sensitive=true) }}", "[1, 2, 3]|[3, 2, 1]|['A', 'a', 'b']|['A', 'a', 'b']", false},
    {"{{ msgs|sort(attribute='role')|map(attribute='role')|list }}|{{ [{'a': 2, 'b': 1}, {'a': 1, 'b': 2}]|sort(attribute='a,b') }}", "['assistant', 'system', 'user']|[{'a': 1, 'b': 2}, {'a': 2, 'b': 1}]", false},
    {"{{ l|max }}|{{ l|min }}|{{ ['b', 'A']|max }}|{{ msgs|max(attribute='role') }}", "3|1|b|{'role': 'user', 'content': 'hi'}", false},
    {"{{ l|sum }}|{{ [1.5, 2]|sum }}|{{ msgs|map(attribute='content')|map('length')|sum }}|{{ [[1], [2]]|sum(start=[]) }}", "6|3.5|7|[1, 2]", false},
    {"{{ l|unique|list }}|{{ ['b', 'A', 'a', 'B']|unique|list }}|{{ l|reverse|list }}|{{ l|list }}|{{ 'ab'|list }}|{{ d|list }}", "[3, 1, 2]|['b', 'A']|[2, 1, 3]|[3, 1, 2]|['a', 'b']|['a', 'items', 'b']", false},
    {"{{ d|items|list }}|{{ x|items|list }}|{{ d|dictsort }}|{{ {'b': 1, 'A': 2, 'a': 3}|dictsort }}|{{ {'b': 1, 'a': 2}|dictsort(by='value', reverse=true) }}", "[('a', 1), ('items', 2), ('b', [1, 2, {'c': 'x'}])]|[]|[('a', 1), ('b', [1, 2, {'c': 'x'}]), ('items', 2)]|[('A', 2), ('a', 3), ('b', 1)]|[('a', 2), ('b', 1)]", false},
    {"{{ [1, 2, 3, 4, 5]|batch(2)|list }}|{{ [1, 2, 3]|batch(2, 'x')|list }}", "[[1, 2], [3, 4], [5]]|[[1, 2], [3, 'x']]", false},
    {"{% for g in msgs|groupby('role') %}{{ g.grouper }}:{{ g.list|length }} {% endfor %}|{{ [{'k': 'A'}, {'k': 'a'}]|groupby('k') }}", "assistant:1 system:1 user:1 |[('A', [{'k': 'A'}, {'k': 'a'}])]", false},
    {"{{ l|length }}|{{ d|length }}|{{ x|length }}|{{ (1, 2)|length }}", "3|3|0|2", false},
    {"{{ l|select('odd')|list }}|{{ l|reject('odd')|list }}|{{ [0, 1, '', 'a', none]|select|list }}|{{ l|select('gt', 1)|list }}|{{ l|select('in', [1, 3])|list }}", "[3, 1]|[2]|[1, 'a']|[3, 2]|[3, 1]", false},
};
static const tcase FILTERS_SELECT_MAP[] = {
    {"{{ msgs|selectattr('role', 'equalto', 'user')|list }}", "[{'role': 'user', 'content': 'hi'}]", false},
    {"{{ msgs|rejectattr('role', 'equalto', 'user')|map(attribute='role')|list }}", "['system', 'assistant']", false},
    {"{{ msgs|selectattr('tool_calls', 'defined')|list|length }}|{{ msgs|selectattr('tool_calls')|list|length }}|{{ msgs|rejectattr('tool_calls', 'undefined')|list|length }}", "1|1|1", false},
    {"{{ msgs|map(attribute='content')|join('/') }}|{{ msgs|map(attribute='nope', default='D')|list }}|{{ msgs|map(attribute='tool_calls.0.function.name')|list }}", "'dict object' has no attribute 'tool_calls'", true},
    {"{{ l|map('string')|list }}|{{ ['a', 'b']|map('upper')|join }}|{{ ['a ', ' b']|map('trim')|list }}|{{ l|map('int')|sum }}", "['3', '1', '2']|AB|['a', 'b']|6", false},
    {"{{ msgs|selectattr('role', 'eq', 'system')|first }}|{{ msgs|selectattr('role', 'ne', 'system')|map(attribute='role')|first }}", "{'role': 'system', 'content': 'sys'}|user", false},
    {"{{ none|selectattr('x')|list }}|{{ 0|map('string')|list }}", "[]|[]", false},
    {"{{ l|select|list }}|{{ l|select('odd') is iterable }}|{{ (l|select('odd')) is sequence }}", "[3, 1, 2]|True|False", false},
};
static const tcase FILTERS_NUMBERS[] = {
    {"{{ '42'|int + 1 }}|{{ '0x1A'|int(base=16) }}|{{ '3.7'|int }}|{{ ' 42 '|int }}|{{ '1_000'|int }}|{{ 3.99|int }}|{{ 'abc'|int(7) }}|{{ true|int }}|{{ none|int }}", "43|26|3|42|1000|3|7|1|0", false},
    {"{{ '4.5'|float }}|{{ 3|float }}|{{ 'x'|float }}|{{ 'x'|float(1.5) }}|{{ '1e3'|float }}|{{ ' -inf '|float }}", "4.5|3.0|0.0|1.5|1000.0|-inf", false},
    {"{{ -3|abs }}|{{ -2.5|abs }}|{{ 2.567|round(2) }}|{{ 2.5|round }}|{{ 3.5|round }}|{{ 2.675|round(2) }}|{{ 3|round }}|{{ 15.5|round(method='floor') }}|{{ 15.1|round(method='ceil') }}|{{ 1234|round(-2) }}", "3|2.5|2.57|2.0|4.0|2.67|3|15.0|16.0|1200", false},
    {"{{ x|default('dflt') }}|{{ e|default('dflt', true) }}|{{ n|default('z') }}|{{ x|d }}|{{ 0|default(5, boolean=true) }}|{{ d.zz|default(d.a) }}", "dflt|dflt|None||5|1", false},
};
static const tcase TOJSON[] = {
    {"{{ d|tojson }}", "{\"a\": 1, \"items\": 2, \"b\": [1, 2, {\"c\": \"x\"}]}", false},
    {"{{ d|tojson(indent=2) }}", "{\n  \"a\": 1,\n  \"items\": 2,\n  \"b\": [\n    1,\n    2,\n    {\n      \"c\": \"x\"\n    }\n  ]\n}", false},
    {"{{ tools|tojson(indent=4) }}", "[\n    {\n        \"type\": \"function\",\n        \"function\": {\n            \"name\": \"get\",\n            \"parameters\": {\n                \"type\": \"object\",\n                \"properties\": {\n                    \"q\": {\n                        \"type\": \"string\"\n                    }\n                }\n            }\n        }\n    }\n]", false},
    {"{{ u|tojson }}|{{ u|tojson(ensure_ascii=true) }}", "\"Übersetze: 你好 🌍 «ok»\\n\\tdone\"|\"\\u00dcbersetze: \\u4f60\\u597d \\ud83c\\udf0d \\u00abok\\u00bb\\n\\tdone\"", false},
    {"{{ [1.0, 2.5, none, true, false, -0.0, 1e20, 1e-7, 0.1]|tojson }}", "[1.0, 2.5, null, true, false, -0.0, 1e+20, 1e-07, 0.1]", false},
    {"{{ {'b': 1, 'a': [], 'c': {}}|tojson(sort_keys=true) }}|{{ [[], {}]|tojson(indent=2) }}", "{\"a\": [], \"b\": 1, \"c\": {}}|[\n  [],\n  {}\n]", false},
    {"{{ {'a': [1, {'b': 2}]}|tojson(indent='\\t') }}|{{ {'a': 1, 'b': 2}|tojson(separators=(',', ':')) }}", "{\n\t\"a\": [\n\t\t1,\n\t\t{\n\t\t\t\"b\": 2\n\t\t}\n\t]\n}|{\"a\":1,\"b\":2}", false},
    {"{{ '\\u2028\\x01\\x7f\"\\\\/'|tojson }}|{{ (1, 'a')|tojson }}|{{ {1: 'int key', true: 'x', none: 'y'}|tojson }}", "\" \\u0001\177\\\"\\\\/\"|[1, \"a\"]|{\"1\": \"x\", \"null\": \"y\"}", false},
    {"{{ msgs[2].tool_calls[0].function.arguments|tojson }}|{{ msgs[2].tool_calls[0].function|tojson }}", "{\"x\": 1, \"y\": [1, 2]}|{\"name\": \"f\", \"arguments\": {\"x\": 1, \"y\": [1, 2]}}", false},
    {"{{ d|tojson(indent=0) }}", "{\n\"a\": 1,\n\"items\": 2,\n\"b\": [\n1,\n2,\n{\n\"c\": \"x\"\n}\n]\n}", false},
};
static const tcase TESTS[] = {
    {"{{ x is defined }}{{ x is undefined }}{{ d.a is defined }}{{ d.zz is defined }}{{ n is none }}{{ n is not none }}", "FalseTrueTrueFalseTrueFalse", false},
    {"{{ s is string }}{{ 1 is string }}{{ d is mapping }}{{ l is mapping }}{{ l is sequence }}{{ s is sequence }}{{ d is sequence }}{{ 5 is sequence }}", "TrueFalseTrueFalseTrueTrueTrueFalse", false},
    {"{{ s is iterable }}{{ l is iterable }}{{ d is iterable }}{{ n is iterable }}{{ x is iterable }}{{ 5 is iterable }}", "TrueTrueTrueFalseTrueFalse", false},
    {"{{ 1 is number }}{{ 1.5 is number }}{{ t is number }}{{ s is number }}{{ 1 is integer }}{{ t is integer }}{{ 1.0 is integer }}{{ 1.0 is float }}", "TrueTrueTrueFalseTrueFalseFalseTrue", false},
    {"{{ t is boolean }}{{ 1 is boolean }}{{ t is true }}{{ 1 is true }}{{ false is false }}{{ 0 is false }}", "TrueFalseTrueFalseTrueFalse", false},
    {"{{ 3 is divisibleby 3 }}{{ 3 is odd }}{{ 4 is even }}{{ 'a' is lower }}{{ 'A' is upper }}{{ 'a1' is lower }}", "TrueTrueTrueTrueTrueTrue", false},
    {"{{ 1 is eq 1 }}{{ 1 is equalto 1.0 }}{{ 1 is ne 2 }}{{ 1 is lt 2 }}{{ 1 is le 1 }}{{ 2 is gt 1 }}{{ 2 is ge 3 }}{{ 2 is greaterthan 1 }}{{ 1 is lessthan 2 }}{{ 1 is == 1 }}", "expected token 'name', got '=='", true},
    {"{{ 1 is in l }}{{ 'ell' is in s }}{{ range is callable }}{{ s is callable }}{{ 'upper' is filter }}{{ 'odd' is test }}{{ n is sameas none }}{{ t is sameas true }}", "TrueTrueTrueFalseTrueTrueTrueTrue", false},
    {"{{ s is not string }}{{ not s is string }}{{ s is string and l is sequence }}", "FalseFalseTrue", false},
};
static const tcase STRING_METHODS[] = {
    {"{{ s.startswith('He') }}{{ s.endswith('ld') }}{{ s.startswith(('x', 'H')) }}{{ s.startswith('World', 6) }}{{ s.endswith('Hello', 0, 5) }}", "TrueTrueTrueTrueTrue", false},
    {"{{ s.split() }}{{ s.split('o') }}{{ s.rsplit('o', 1) }}{{ 'a,b,,c'.split(',') }}{{ ' a  b '.split(' ') }}{{ '  a b  c '.split(none, 1) }}{{ 'a b c '.rsplit(none, 1) }}", "['Hello', 'World']['Hell', ' W', 'rld']['Hello W', 'rld']['a', 'b', '', 'c']['', 'a', '', 'b', '']['a', 'b  c ']['a b', 'c']", false},
    {"[{{ '  x  '.strip() }}][{{ 'xyx'.lstrip('x') }}][{{ 'xyx'.rstrip('x') }}][{{ '\\n\\nx\\n'.strip('\\n') }}][{{ u.lstrip('Ü') }}]", "[x][yx][xy][x][bersetze: 你好 🌍 «ok»\n\tdone]", false},
    {"{{ s.replace('l', 'L') }}{{ s.replace('l', 'L', 1) }}{{ s.upper() }}{{ s.lower() }}{{ 'hello wORLD it\\'s'.title() }}{{ 'aXa'.swapcase() }}{{ 'hELLO'.capitalize() }}", "HeLLo WorLdHeLlo WorldHELLO WORLDhello worldHello World It'SAxAHello", false},
    {"{{ s.find('o') }}{{ s.rfind('o') }}{{ s.find('z') }}{{ s.index('W') }}{{ s.count('l') }}{{ u.find('🌍') }}{{ '-'.join(['a', 'b']) }}", "47-16314a-b", false},
    {"{{ 'abc'.isalpha() }}{{ '123'.isdigit() }}{{ '  '.isspace() }}{{ 'abc'.islower() }}{{ 'ABC'.isupper() }}{{ 'a1'.isalnum() }}", "TrueTrueTrueTrueTrueTrue", false},
    {"{{ 'abc'.partition('b') }}{{ 'a-b-c'.rpartition('-') }}{{ 'line1\\nline2\\r\\nline3'.splitlines() }}{{ 'x'.zfill(3) }}{{ 'ab'.center(6, '*') }}{{ 'ab'.ljust(4, '.') }}{{ 'ab'.rjust(4) }}", "('a', 'b', 'c')('a-b', '-', 'c')['line1', 'line2', 'line3']00x**ab**ab..  ab", false},
    {"{{ 'prefix-x'.removeprefix('prefix-') }}{{ 'x.txt'.removesuffix('.txt') }}", "xx", false},
    {"{{ msgs[2].content.split('</think>')[-1].lstrip('\\n') }}|{{ '<think>r</think>\\n\\nanswer'.split('</think>')[0].rstrip('\\n').split('<think>')[-1] }}", "yo|r", false},
};
static const tcase DICT_LIST_METHODS[] = {
    {"{{ d.get('a') }}|{{ d.get('zz', 5) }}|{{ d.get('zz') }}|{{ d.items()|list }}|{{ d.keys()|list }}|{{ d.values()|list }}", "1|5|None|[('a', 1), ('items', 2), ('b', [1, 2, {'c': 'x'}])]|['a', 'items', 'b']|[1, 2, [1, 2, {'c': 'x'}]]", false},
    {"{{ d.items() }}|{{ d.keys() }}|{{ d.values() }}", "dict_items([('a', 1), ('items', 2), ('b', [1, 2, {'c': 'x'}])])|dict_keys(['a', 'items', 'b'])|dict_values([1, 2, [1, 2, {'c': 'x'}]])", false},
    {"{{ d['items'] }}|{{ d.copy() }}|{{ l.index(1) }}|{{ l.count(3) }}|{{ (1, 2, 1).count(1) }}", "2|{'a': 1, 'items': 2, 'b': [1, 2, {'c': 'x'}]}|1|1|2", false},
    {"{% for k, v in tools[0].function.parameters.properties.items() %}{{ k }}:{{ v.type }}{% endfor %}", "q:string", false},
};
static const tcase SLICING[] = {
    {"{{ s[0] }}{{ s[-1] }}{{ s[1:3] }}{{ s[::-1] }}{{ s[:-1] }}{{ s[6:] }}{{ s[::2] }}{{ s[100:] }}|{{ s[-100:2] }}", "HdeldlroW olleHHello WorlWorldHloWrd|He", false},
    {"{{ l[::-1] }}{{ l[1:] }}{{ l[:-1] }}{{ l[::2] }}{{ l[5:] }}{{ (1, 2, 3)[1:] }}{{ l[-1] }}{{ l[0] }}", "[2, 1, 3][1, 2][3, 1][3, 2][](2, 3)23", false},
    {"{{ u[::2] }}|{{ u[-4:] }}|{{ u[11] }}|{{ 'héllo'[::-1] }}|{{ 'héllo'[1] }}", "Üeste 好🌍«k\ndn|done|你|olléh|é", false},
    {"{{ msgs[1:]|map(attribute='role')|list }}|{{ msgs[-1].role }}|{{ l[5] }}|{{ s[100] }}|{{ msgs[0]['role'] }}", "['user', 'assistant']|assistant|||system", false},
    {"{{ range(10)[2:8:3]|list }}|{{ l[x] }}|{{ l[n] }}", "[2, 5]||", false},
};
static const tcase OPERATORS[] = {
    {"{{ 1 + 2 * 3 - 4 / 2 }}|{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 7.5 // 2 }} {{ -7.5 % 2 }}|{{ 2 ** 10 }} {{ 2 ** -1 }} {{ 2 ** 3 ** 2 }} {{ -2 ** 2 }}", "5.0|3 -4 1 2 -2 3.0 0.5|1024 0.5 64 4", false},
    {"{{ 3 * 'ab' }}|{{ 'ab' * 2 }}|{{ [1] * 3 }}|{{ 'a' * 0 }}|{{ [1] + [2] }}|{{ (1, 2) + (3,) }}|{{ 'a' + 'b' }}|{{ 1 + 1.5 }}|{{ t + 1 }}", "ababab|abab|[1, 1, 1]||[1, 2]|(1, 2, 3)|ab|2.5|2", false},
    {"{{ 'a' ~ 1 ~ none ~ x ~ true ~ l }}|{{ -f }}|{{ +f }}|{{ f * 2 }}|{{ f // 1 }}|{{ f % 1 }}|{{ 10 / 4 }}|{{ 4 / 2 }}", "a1NoneTrue[3, 1, 2]|-1.5|1.5|3.0|1.0|0.5|2.5|2.0", false},
    {"{{ true and 1 }}|{{ 0 or 'b' }}|{{ none or none }}|{{ '' and x }}|{{ not x }}|{{ not not l }}|{{ n or 'fallback' }}", "1|b|None||True|True|fallback", false},
    {"{{ 1 if true else 2 }}|{{ 1 if false }}|{{ 1 if false else 2 if true else 3 }}|{{ 'a' if l else 'b' }}", "1||2|a", false},
};
static const tcase COMPARISONS[] = {
    {"{{ 1 < 2 < 3 }}{{ 3 > 2 > 2 }}{{ 1 == 1.0 }}{{ true == 1 }}{{ '1' == 1 }}{{ [1, 2] == [1, 2] }}{{ (1, 2) == [1, 2] }}{{ {'a': 1} == {'a': 1} }}{{ none == none }}{{ x == y }}{{ x == none }}", "TrueFalseTrueTrueFalseTrueFalseTrueTrueTrueFalse", false},
    {"{{ 'a' < 'b' }}{{ 'B' < 'a' }}{{ [1, 2] < [1, 3] }}{{ 2 >= 2.0 }}{{ 'é' > 'z' }}{{ 1 != 2 }}", "TrueTrueTrueTrueTrueTrue", false},
    {"{{ 'ell' in s }}{{ 'x' not in s }}{{ 1 in l }}{{ 'a' in d }}{{ 'zz' in d }}{{ x in l }}{{ '' in s }}{{ 'a' in x }}{{ msgs[0] in msgs }}{{ 'tool_calls' in msgs[2] }}", "TrueTrueTrueTrueFalseFalseTrueFalseTrueTrue", false},
};
static const tcase PRINTING[] = {
    {"{{ [1, 'a', none, true, 1.5, {'k': (1, 2)}] }}|{{ (1,) }}|{{ () }}|{{ {} }}|{{ [] }}|{{ n }}|{{ t }}|{{ false }}", "[1, 'a', None, True, 1.5, {'k': (1, 2)}]|(1,)|()|{}|[]|None|True|False", false},
    {"{{ 1e16 }} {{ 1e15 }} {{ 0.0001 }} {{ 0.00001 }} {{ 1/3 }} {{ 2/2 }} {{ -0.0 }} {{ 123456789.123 }} {{ 1.5e-7 }} {{ 0.1 + 0.2 }} {{ 1e300 * 1e10 }} {{ 2.5e-300 }} {{ 5e-324 }}", "1e+16 1000000000000000.0 0.0001 1e-05 0.3333333333333333 1.0 -0.0 123456789.123 1.5e-07 0.30000000000000004 inf 2.5e-300 5e-324", false},
    {"{{ ['\\''] }}|{{ ['\"'] }}|{{ ['a\\'b\"c'] }}|{{ ['\\n\\t\\\\'] }}|{{ ['\\x01\\x7f\\x85'] }}|{{ ['é🌍'] }}|{{ ['\\u200b\\u00a0\\u2028'] }}", "[\"'\"]|['\"']|['a\\'b\"c']|['\\n\\t\\\\']|['\\x01\\x7f\\x85']|['é🌍']|['\\u200b\\xa0\\u2028']", false},
    {"{{ d }}|{{ msgs[2] }}|{{ range(3) }}|{{ range(1, 10, 2) }}|{{ namespace(a=1) }}|{{ d.keys() }}", "{'a': 1, 'items': 2, 'b': [1, 2, {'c': 'x'}]}|{'role': 'assistant', 'content': 'yo', 'tool_calls': [{'function': {'name': 'f', 'arguments': {'x': 1, 'y': [1, 2]}}}]}|range(0, 3)|range(1, 10, 2)|<Namespace {'a': 1}>|dict_keys(['a', 'items', 'b'])", false},
    {"{{ 0x1F }} {{ 0o17 }} {{ 0b101 }} {{ 1_000 }} {{ 1.5e3 }} {{ 1e3 }} {{ 1_0.5 }}", "31 15 5 1000 1500.0 1000.0 10.5", false},
    {"{{ 'a\\'b' }}{{ \"a\\\"b\" }}{{ 'x\\ny' }}{{ '\\u00e9\\x41\\101' }}{{ '\\q' }}{{ 'adjacent' 'strings' }}{{ '\\U0001F600' }}", "a'ba\"bx\nyéAA\\qadjacentstrings😀", false},
};
static const tcase UNDEFINED[] = {
    {"[{{ x }}]|[{{ d.zz }}]|[{{ l[5] }}]|[{{ s.x }}]|[{{ n.x }}]|[{{ msgs[0].tool_calls }}]|[{{ x|default }}]", "[]|[]|[]|[]|[]|[]|[]", false},
    {"{{ x is defined }}|{{ x|length }}|{{ x|list }}|{{ x ~ 'a' }}|{{ x == x }}|{{ x == none }}|{{ not x }}|{{ x|string }}|{{ x|upper }}", "False|0|[]|a|True|False|True||", false},
    {"{% if x %}a{% else %}b{% endif %}|{{ x or 'or' }}|{{ x and 'and' }}|{{ 'a' in x }}|{% for i in x %}never{% endfor %}", "b|or||False|", false},
    {"{{ d.zz is not defined and msgs[0].name is undefined }}|{{ (d.zz or {}).a }}", "True|", false},
};
static const tcase FORMATTING[] = {
    {"{{ '%d%%' % 5 }}|{{ '%5s|%-5s|' % ('a', 'b') }}|{{ '%.2f' % 2.345 }}|{{ '%e' % 12345.678 }}|{{ '%g' % 0.00001234 }}|{{ '%i' % 3.9 }}|{{ '%c' % 65 }}|{{ '%+d' % 5 }}|{{ '% d' % 5 }}|{{ '%#x' % 255 }}|{{ '%05d' % -42 }}|{{ '%s' % [1, 2] }}|{{ '%r' % 'q' }}|{{ '%(a)s-%(b)s' % {'a': 1, 'b': 2} }}", "5%|    a|b    ||2.35|1.234568e+04|1.234e-05|3|A|+5| 5|0xff|-0042|[1, 2]|'q'|1-2", false},
    {"{{ '{} and {}'.format(1, 'b') }}|{{ '{0}{1}{0}'.format('a', 'b') }}|{{ '{x:>5}|{y:.2f}|{z:,}'.format(x='ab', y=3.14159, z=1234567) }}", "1 and b|aba|   ab|3.14|1,234,567", false},
    {"{{ '{:^10}|{:<4}|{:>4}|{:*^7}|{:+}|{:08.3f}|{:x}|{:#b}|{:e}|{:%}|{!r}|{:.3}|{{}}'.format('mid', 1, 2, 'c', 5, 3.14159, 255, 5, 1234.5, 0.25, 'q', 1.0) }}", "   mid    |1   |   2|***c***|+5|0003.142|ff|0b101|1.234500e+03|25.000000%|'q'|1.0|{}", false},
    {"{{ '{0[0]}-{1[a]}-{1.a}'.format(l, d) }}|{{ '{:{w}}|'.format('x', w=4) }}|{{ '{:d}'.format(true) }}|{{ '{}'.format(true) }}", "3-1-1|x   ||1|True", false},
};
static const tcase GLOBALS[] = {
    {"{{ range(5)|list }}|{{ range(1, 10, 3)|list }}|{{ range(5, 0, -2)|list }}|{{ range(0)|list }}|{{ range(3)|length }}", "[0, 1, 2, 3, 4]|[1, 4, 7]|[5, 3, 1]|[]|3", false},
    {"{{ dict(a=1, b=2) }}|{{ dict([('x', 1)]) }}|{{ dict(d, z=0)|length }}|{{ dict() }}", "{'a': 1, 'b': 2}|{'x': 1}|4|{}", false},
    {"{% set j = joiner('|') %}{% for x in l %}{{ j() }}{{ x }}{% endfor %}|{% set c = cycler('a', 'b') %}{{ c.next() }}{{ c.next() }}{{ c.next() }}{{ c.current }}", "3|1|2|abab", false},
    {"{{ raise_exception is defined }}{{ strftime_now is defined }}{{ namespace is callable }}", "TrueTrueTrue", false},
};
static const tcase RUNTIME_ERRORS[] = {
    {"{{ raise_exception('Custom error: ' ~ s) }}", "Custom error: Hello World", true},
    {"{{ x.y }}", "'x' is undefined", true},
    {"{{ x + 1 }}", "'x' is undefined", true},
    {"{{ x() }}", "'x' is undefined", true},
    {"{{ d.zz.x }}", "'dict object' has no attribute 'zz'", true},
    {"{{ l[5].x }}", "list object has no element 5", true},
    {"{{ msgs[0].tool_calls[0] }}", "'dict object' has no attribute 'tool_calls'", true},
    {"{{ 'a' + 1 }}", "can only concatenate str (not \"int\") to str", true},
    {"{{ 1 + 'a' }}", "unsupported operand type(s) for +: 'int' and 'str'", true},
    {"{{ 1 - 'a' }}", "unsupported operand type(s) for -: 'int' and 'str'", true},
    {"{{ l.append(4) }}", "access to attribute 'append' of 'list' object is unsafe.", true},
    {"{{ d.update({}) }}", "access to attribute 'update' of 'dict' object is unsafe.", true},
    {"{{ 1 // 0 }}", "integer division or modulo by zero", true},
    {"{{ 1 / 0 }}", "division by zero", true},
    {"{{ 1 % 0 }}", "integer modulo by zero", true},
    {"{% for x in none %}{% endfor %}", "'NoneType' object is not iterable", true},
    {"{% for x in 5 %}{% endfor %}", "'int' object is not iterable", true},
    {"{% for a, b in [[1, 2, 3]] %}{% endfor %}", "too many values to unpack (expected 2)", true},
    {"{% for a, b in [[1]] %}{% endfor %}", "not enough values to unpack (expected 2, got 1)", true},
    {"{{ 1 < 'a' }}", "'<' not supported between instances of 'int' and 'str'", true},
    {"{{ x < 1 }}", "'x' is undefined", true},
    {"{{ s() }}", "'str' object is not callable", true},
    {"{% set x = 1 %}{% set x.y = 2 %}", "cannot assign attribute on non-namespace object", true},
    {"{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}", "macro 'm' takes not more than 1 argument(s)", true},
    {"{% macro m(a) %}{% endmacro %}{{ m(b=1) }}", "macro 'm' takes no keyword argument 'b'", true},
    {"{% macro m(a) %}{{ a + 1 }}{% endmacro %}{{ m() }}", "parameter 'a' was not provided", true},
    {"{{ range(1000000) }}", "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).", true},
    {"{{ [1, 'a']|sort }}", "'<' not supported between instances of 'str' and 'int'", true},
    {"{{ d|dictsort(by='x') }}", "You can only sort by either \"key\" or \"value\"", true},
    {"{{ {}[[1]] }}|{{ {[1]: 2} }}", "unhashable type: 'list'", true},
    {"{{ 'x'.split('') }}", "empty separator", true},
    {"{{ '{}'.format() }}", "tuple index out of range", true},
    {"{{ '%s %s' % (1,) }}", "not enough arguments for format string", true},
    {"{{ '%d' % 'x' }}", "%d format: a real number is required, not str", true},
    {"{{ [1]|tojson(indent=x) }}", "'x' is undefined", true},
    {"{{ x|tojson }}", "Object of type Undefined is not JSON serializable", true},
    {"{{ 1 is divisibleby }}", "test_divisibleby() missing 1 required positional argument: 'num'", true},
    {"{{ l|map('nofilter')|list }}", "No filter named 'nofilter'.", true},
    {"{{ l|select('notest')|list }}", "No test named 'notest'.", true},
    {"{{ 'a' in 1 }}", "argument of type 'int' is not iterable", true},
    {"{{ 1 in 'a' }}", "'in <string>' requires string as left operand, not int", true},
    {"{{ '%s' % x }}", "", false},
};

/* Conversations beyond the reference set (tools, tool calls, reasoning, content parts). */
static const struct { const char *name, *json; } CONVS[] = {
    {"tools-and-calls", "{\"messages\": [{\"role\": \"system\", \"content\": \"You are helpful.\"}, {\"role\": \"user\", \"content\": \"Weather in Paris\?\"}, {\"role\": \"assistant\", \"content\": \"\", \"tool_calls\": [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"c\"}}}]}, {\"role\": \"tool\", \"content\": \"{\\\"temp\\\": 21.5}\"}, {\"role\": \"assistant\", \"content\": \"It is 21.5 °C.\"}, {\"role\": \"user\", \"content\": \"Thanks!\"}], \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Get the weather\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\", \"description\": \"City name\"}, \"unit\": {\"type\": \"string\", \"enum\": [\"c\", \"f\"]}}, \"required\": [\"city\"]}}}], \"add_generation_prompt\": true, \"date_string\": \"26 Jul 2024\"}"},
    {"reasoning", "{\"messages\": [{\"role\": \"user\", \"content\": \"2+2\?\"}, {\"role\": \"assistant\", \"content\": \"<think>\\nsimple\\n</think>\\n\\n4\"}, {\"role\": \"user\", \"content\": \"3+3\?\"}, {\"role\": \"assistant\", \"content\": \"6\", \"reasoning_content\": \"also simple\"}], \"add_generation_prompt\": false, \"enable_thinking\": false, \"date_string\": \"26 Jul 2024\"}"},
    {"no-thinking", "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi /no_think\"}], \"add_generation_prompt\": true, \"enable_thinking\": false, \"date_string\": \"26 Jul 2024\"}"},
    {"content-parts", "{\"messages\": [{\"role\": \"system\", \"content\": [{\"type\": \"text\", \"text\": \"Sys part.\"}]}, {\"role\": \"user\", \"content\": [{\"type\": \"image\"}, {\"type\": \"text\", \"text\": \"  Describe this.  \"}]}], \"add_generation_prompt\": true, \"date_string\": \"26 Jul 2024\"}"},
};

/* Expected renders, computed with Jinja2 3.1.6 in Hugging Face's environment. */
static const struct { const char *tmpl, *conv, *want; bool is_error; } CONV_CASES[] = {
    {"Qwen-Qwen3-0.6B", "tools-and-calls",
     "<|im_start|>system\nYou are helpful.\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Get the weather\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\", \"description\": \"City name\"}, \"unit\": {\"type\": \"string\", \"enum\": [\"c\", \"f\"]}}, \"required\": [\"city\"]}}}\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n<|im_start|>user\nWeather in Paris\?<|im_end|>\n<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"c\"}}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n{\"temp\": 21.5}\n</tool_response><|im_end|>\n<|im_start|>assistant\nIt is 21.5 °C.<|im_end|>\n<|im_start|>user\nThanks!<|im_end|>\n<|im_start|>assistant\n",
     false},
    {"Qwen-Qwen3-0.6B", "reasoning",
     "<|im_start|>user\n2+2\?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n<|im_start|>user\n3+3\?<|im_end|>\n<|im_start|>assistant\n<think>\nalso simple\n</think>\n\n6<|im_end|>\n",
     false},
    {"Qwen-Qwen3-0.6B", "no-thinking",
     "<|im_start|>user\nHi /no_think<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n",
     false},
    {"Qwen-Qwen2.5-7B-Instruct", "tools-and-calls",
     "<|im_start|>system\nYou are helpful.\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Get the weather\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\", \"description\": \"City name\"}, \"unit\": {\"type\": \"string\", \"enum\": [\"c\", \"f\"]}}, \"required\": [\"city\"]}}}\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n<|im_start|>user\nWeather in Paris\?<|im_end|>\n<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"c\"}}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n{\"temp\": 21.5}\n</tool_response><|im_end|>\n<|im_start|>assistant\nIt is 21.5 °C.<|im_end|>\n<|im_start|>user\nThanks!<|im_end|>\n<|im_start|>assistant\n",
     false},
    {"meta-llama-Llama-3.1-8B-Instruct", "tools-and-calls",
     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nEnvironment: ipython\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\nYou are helpful.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nGiven the following functions, please respond with a JSON for a function call with its proper arguments that best answers the given prompt.\n\nRespond in the format {\"name\": function name, \"parameters\": dictionary of argument name and its value}.Do not use variables.\n\n{\n    \"type\": \"function\",\n    \"function\": {\n        \"name\": \"get_weather\",\n        \"description\": \"Get the weather\",\n        \"parameters\": {\n            \"type\": \"object\",\n            \"properties\": {\n                \"city\": {\n                    \"type\": \"string\",\n                    \"description\": \"City name\"\n                },\n                \"unit\": {\n                    \"type\": \"string\",\n                    \"enum\": [\n                        \"c\",\n                        \"f\"\n                    ]\n                }\n            },\n            \"required\": [\n                \"city\"\n            ]\n        }\n    }\n}\n\nWeather in Paris\?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\", \"unit\": \"c\"}}<|eot_id|><|start_header_id|>ipython<|end_header_id|>\n\n\"{\\\"temp\\\": 21.5}\"<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nIt is 21.5 °C.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nThanks!<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
     false},
    {"meta-llama-Llama-3.2-3B-Instruct", "tools-and-calls",
     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nEnvironment: ipython\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\nYou are helpful.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nGiven the following functions, please respond with a JSON for a function call with its proper arguments that best answers the given prompt.\n\nRespond in the format {\"name\": function name, \"parameters\": dictionary of argument name and its value}.Do not use variables.\n\n{\n    \"type\": \"function\",\n    \"function\": {\n        \"name\": \"get_weather\",\n        \"description\": \"Get the weather\",\n        \"parameters\": {\n            \"type\": \"object\",\n            \"properties\": {\n                \"city\": {\n                    \"type\": \"string\",\n                    \"description\": \"City name\"\n                },\n                \"unit\": {\n                    \"type\": \"string\",\n                    \"enum\": [\n                        \"c\",\n                        \"f\"\n                    ]\n                }\n            },\n            \"required\": [\n                \"city\"\n            ]\n        }\n    }\n}\n\nWeather in Paris\?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\", \"unit\": \"c\"}}<|eot_id|><|start_header_id|>ipython<|end_header_id|>\n\n\"{\\\"temp\\\": 21.5}\"<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nIt is 21.5 °C.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nThanks!<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
     false},
    {"gemma3-tokenizer_config", "content-parts",
     "<bos><start_of_turn>user\nSys part.\n\n<start_of_image>Describe this.<end_of_turn>\n<start_of_turn>model\n",
     false},
    {"gemma3-tokenizer_config", "tools-and-calls",
     "Conversation roles must alternate user/assistant/user/assistant/...",
     true},
    {"HuggingFaceTB-SmolLM3-3B", "no-thinking",
     "<|im_start|>system\n## Metadata\n\nKnowledge Cutoff Date: June 2025\nReasoning Mode: /no_think\n\n## Custom Instructions\n\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face.\n\n<|im_end|>\n<|im_start|>user\nHi /no_think<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n",
     false},
    {"HuggingFaceTB-SmolLM3-3B", "content-parts",
     "'list object' has no attribute 'replace'",
     true},
    {"microsoft-Phi-3.5-mini-instruct", "tools-and-calls",
     "<|system|>\nYou are helpful.<|end|>\n<|user|>\nWeather in Paris\?<|end|>\n<|assistant|>\n<|end|>\n<|assistant|>\nIt is 21.5 °C.<|end|>\n<|user|>\nThanks!<|end|>\n<|assistant|>\n",
     false},
    {"mistral-style", "tools-and-calls",
     "<s>[INST] Weather in Paris\?[/INST][TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"c\"}, \"id\": \"call_0\"}]</s>[TOOL_RESULTS] {\"content\": {\"temp\": 21.5}}[/TOOL_RESULTS] It is 21.5 °C.</s>[AVAILABLE_TOOLS] [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Get the weather\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\", \"description\": \"City name\"}, \"unit\": {\"type\": \"string\", \"enum\": [\"c\", \"f\"]}}, \"required\": [\"city\"]}}}][/AVAILABLE_TOOLS][INST] You are helpful.\n\nThanks![/INST]",
     false},
    {"mistral-style", "reasoning",
     "<s>[INST] 2+2\?[/INST] <think>\nsimple\n</think>\n\n4</s>[INST] 3+3\?[/INST] 6</s>",
     false},
    {"mistral-style", "content-parts",
     "can only concatenate str (not \"list\") to str",
     true},
};

static const char MISTRAL_STYLE[] =
    "{%- if messages[0][\"role\"] == \"system\" %}\n"
    "    {%- set system_message = messages[0][\"content\"] %}\n"
    "    {%- set loop_messages = messages[1:] %}\n"
    "{%- else %}\n"
    "    {%- set loop_messages = messages %}\n"
    "{%- endif %}\n"
    "{%- set user_messages = loop_messages | selectattr(\"role\", \"equalto\", \"user\") | list %}\n"
    "{%- set ns = namespace(index=0) %}\n"
    "{%- for message in loop_messages %}\n"
    "    {%- if not (message.role == \"tool\" or (message.tool_calls is defined and message.tool_calls is not none)) %}\n"
    "        {%- if (message[\"role\"] == \"user\") != (ns.index % 2 == 0) %}\n"
    "            {{- raise_exception(\"After the optional system message, conversation roles must alternate user/assistant/user/assistant/...\") }}\n"
    "        {%- endif %}\n"
    "        {%- set ns.index = ns.index + 1 %}\n"
    "    {%- endif %}\n"
    "{%- endfor %}\n"
    "{{- bos_token }}\n"
    "{%- for message in loop_messages %}\n"
    "    {%- if message[\"role\"] == \"user\" %}\n"
    "        {%- if tools is not none and (message == user_messages[-1]) %}\n"
    "            {{- \"[AVAILABLE_TOOLS] [\" }}\n"
    "            {%- for tool in tools %}\n"
    "                {%- set tool = tool.function %}\n"
    "                {{- '{\"type\": \"function\", \"function\": {' }}\n"
    "                {%- for key, val in tool.items() if key != \"return\" %}\n"
    "                    {%- if val is string %}\n"
    "                        {{- '\"' + key + '\": \"' + val + '\"' }}\n"
    "                    {%- else %}\n"
    "                        {{- '\"' + key + '\": ' + val|tojson }}\n"
    "                    {%- endif %}\n"
    "                    {%- if not loop.last %}\n"
    "                        {{- \", \" }}\n"
    "                    {%- endif %}\n"
    "                {%- endfor %}\n"
    "                {{- \"}}\" }}\n"
    "                {%- if not loop.last %}{{- \", \" }}{%- else %}{{- \"]\" }}{%- endif %}\n"
    "            {%- endfor %}\n"
    "            {{- \"[/AVAILABLE_TOOLS]\" }}\n"
    "        {%- endif %}\n"
    "        {%- if loop.last and system_message is defined %}\n"
    "            {{- \"[INST] \" + system_message + \"\\n\\n\" + message[\"content\"] + \"[/INST]\" }}\n"
    "        {%- else %}\n"
    "            {{- \"[INST] \" + message[\"content\"] + \"[/INST]\" }}\n"
    "        {%- endif %}\n"
    "    {%- elif message.tool_calls is defined and message.tool_calls is not none %}\n"
    "        {{- \"[TOOL_CALLS] [\" }}\n"
    "        {%- for tool_call in message.tool_calls %}\n"
    "            {%- set out = tool_call.function|tojson %}\n"
    "            {{- out[:-1] }}\n"
    "            {{- ', \"id\": \"call_' ~ loop.index0 ~ '\"}' }}\n"
    "            {%- if not loop.last %}{{- \", \" }}{%- else %}{{- \"]\" + eos_token }}{%- endif %}\n"
    "        {%- endfor %}\n"
    "    {%- elif message[\"role\"] == \"assistant\" %}\n"
    "        {{- \" \" + message[\"content\"]|trim + eos_token }}\n"
    "    {%- elif message[\"role\"] == \"tool\" %}\n"
    "        {{- '[TOOL_RESULTS] {\"content\": ' + message.content|string + \"}[/TOOL_RESULTS]\" }}\n"
    "    {%- else %}\n"
    "        {{- raise_exception(\"Only user and assistant roles are supported, with the exception of an initial optional system message!\") }}\n"
    "    {%- endif %}\n"
    "{%- endfor %}\n"
    ;

static void test_whitespace_control_trim_and_lstrip_blocks(void) { CHECK_TABLE(WHITESPACE); }
static void test_comments_and_raw_blocks(void) { CHECK_TABLE(COMMENTS_RAW); }
static void test_if_elif_else(void) { CHECK_TABLE(IF); }
static void test_for_loops_and_loop_variables(void) { CHECK_TABLE(FOR); }
static void test_loop_controls_break_and_continue(void) { CHECK_TABLE(LOOP_CONTROLS); }
static void test_set_and_scoping_rules(void) { CHECK_TABLE(SET_SCOPE); }
static void test_namespace_attributes_survive_loops(void) { CHECK_TABLE(NAMESPACE); }
static void test_block_set_with_filters(void) { CHECK_TABLE(BLOCK_SET); }
static void test_macros_defaults_varargs_caller_recursion(void) { CHECK_TABLE(MACROS); }
static void test_filter_blocks_and_generation_tag(void) { CHECK_TABLE(FILTER_BLOCK); }
static void test_string_filters(void) { CHECK_TABLE(FILTERS_STRINGS); }
static void test_sequence_filters(void) { CHECK_TABLE(FILTERS_SEQUENCES); }
static void test_select_reject_and_map_filters(void) { CHECK_TABLE(FILTERS_SELECT_MAP); }
static void test_number_and_default_filters(void) { CHECK_TABLE(FILTERS_NUMBERS); }
static void test_tojson_matches_python_json_dumps(void) { CHECK_TABLE(TOJSON); }
static void test_is_tests(void) { CHECK_TABLE(TESTS); }
static void test_string_methods(void) { CHECK_TABLE(STRING_METHODS); }
static void test_dict_list_and_tuple_methods(void) { CHECK_TABLE(DICT_LIST_METHODS); }
static void test_slicing_and_indexing_by_code_point(void) { CHECK_TABLE(SLICING); }
static void test_arithmetic_and_logic_operators(void) { CHECK_TABLE(OPERATORS); }
static void test_comparisons_and_membership(void) { CHECK_TABLE(COMPARISONS); }
static void test_values_print_as_python_str(void) { CHECK_TABLE(PRINTING); }
static void test_undefined_values_behave_like_jinja2(void) { CHECK_TABLE(UNDEFINED); }
static void test_percent_and_format_string_formatting(void) { CHECK_TABLE(FORMATTING); }
static void test_globals_range_dict_joiner_cycler(void) { CHECK_TABLE(GLOBALS); }
static void test_runtime_errors_have_python_wording(void) { CHECK_TABLE(RUNTIME_ERRORS); }

/* ---------------------------------------------------------------------------
 * The reference renders
 * ------------------------------------------------------------------------- */

static char *template_source(const char *name) {
    char rel[512];
    snprintf(rel, sizeof rel, "reference/chat-templates/templates/%s.jinja", name);
    char *path = test_data_path(rel);
    char *src = read_text(path);
    free(path);
    return src;
}

/* templates/NAME.tokens.json: the bos_token / eos_token it renders with */
static json_t *template_tokens(const char *name) {
    char rel[512];
    snprintf(rel, sizeof rel, "reference/chat-templates/templates/%s.tokens.json", name);
    char *path = test_data_path(rel);
    json_t *j = json_load_file(path, 0, NULL);
    REQUIRE_MSG(j != NULL, "cannot parse %s", path);
    free(path);
    return j;
}

static json_t *reference_cases(void) {
    char *path = test_data_path("reference/chat-templates/expected.json");
    json_t *cases = json_load_file(path, 0, NULL);
    REQUIRE_MSG(json_is_array(cases) && json_array_size(cases) > 0, "cannot parse %s", path);
    free(path);
    return cases;
}

/* Every case: NAME.jinja with NAME.tokens.json and the case's context
 * renders byte-identical, or fails with the reference's message. */
static void test_reference_cases_render_byte_identical(void) {
    json_t *cases = reference_cases();
    size_t i, ok = 0;
    json_t *c;
    json_array_foreach(cases, i, c) {
        const char *name = json_string_value(json_object_get(c, "template"));
        const char *case_name = json_string_value(json_object_get(c, "case"));
        REQUIRE(name && case_name);
        char *src = template_source(name);
        json_t *ctx = template_tokens(name);
        json_object_update(ctx, json_object_get(c, "context"));
        tmpl_error err;
        size_t len = 0;
        char *out = NULL;
        tmpl_template *t;
        bool parsed = tmpl_parse(&t, src, strlen(src), &err) == 0;
        CHECK_MSG(parsed, "%s: %s (line %d)", name, err.message, err.line);
        if (parsed) {
            if (tmpl_render(t, ctx, NULL, &out, &len, &err)) out = NULL;
            tmpl_free(t);
        }
        json_t *want = json_object_get(c, "expected"), *want_err = json_object_get(c, "error");
        bool good;
        if (want_err) {
            good = parsed && !out && strcmp(err.message, json_string_value(want_err)) == 0 && err.line > 0;
            CHECK_MSG(good, "%s/%s: want error '%s', got %s", name, case_name, json_string_value(want_err),
                      out ? out : err.message);
        } else {
            good = out && len == json_string_length(want) && memcmp(out, json_string_value(want), len) == 0;
            CHECK_MSG(good, "%s/%s:\n    got:  %s\n    want: %s", name, case_name, out ? out : err.message,
                      json_string_value(want));
        }
        ok += good;
        free(out);
        free(src);
        json_decref(ctx);
    }
    fprintf(stderr, "  %zu/%zu expected.json cases identical\n", ok, json_array_size(cases));
    CHECK_EQ_INT(ok, json_array_size(cases));
    json_decref(cases);
}

/* expected.json's contexts are those of conversations.json, by case name. */
static void test_reference_contexts_come_from_conversations(void) {
    char *path = test_data_path("reference/chat-templates/conversations.json");
    json_t *convs = json_load_file(path, 0, NULL);
    REQUIRE(json_is_array(convs));
    free(path);
    json_t *cases = reference_cases();
    size_t i, k;
    json_t *c, *conv;
    json_array_foreach(cases, i, c) {
        bool found = false;
        json_array_foreach(convs, k, conv) {
            if (!json_equal(json_object_get(conv, "name"), json_object_get(c, "case"))) continue;
            found = true;
            CHECK(json_equal(json_object_get(conv, "context"), json_object_get(c, "context")));
        }
        CHECK_MSG(found, "case %s not in conversations.json", json_string_value(json_object_get(c, "case")));
    }
    json_decref(cases);
    json_decref(convs);
}

/* The same cases through the public API: the special tokens given to
 * pdl_chat_template_from_source, the context as JSON text. */
static void test_reference_cases_through_public_api(void) {
    json_t *cases = reference_cases();
    size_t i;
    json_t *c;
    json_array_foreach(cases, i, c) {
        const char *name = json_string_value(json_object_get(c, "template"));
        char *src = template_source(name);
        json_t *toks = template_tokens(name);
        pdl_error err;
        pdl_chat_template *t;
        REQUIRE_MSG(pdl_chat_template_from_source(&t, src, json_string_value(json_object_get(toks, "bos_token")),
                                                  json_string_value(json_object_get(toks, "eos_token")), &err) == 0,
                    "%s", err.message);
        char *ctx = json_dumps(json_object_get(c, "context"), 0), *out = NULL;
        size_t len = 0;
        int rc = pdl_chat_template_render(t, ctx, &out, &len, &err);
        json_t *want = json_object_get(c, "expected");
        if (want) {
            CHECK_MSG(rc == 0 && len == json_string_length(want) && memcmp(out, json_string_value(want), len) == 0,
                      "%s/%s", name, json_string_value(json_object_get(c, "case")));
            CHECK(rc != 0 || out[len] == '\0');
        } else {
            CHECK(rc != 0);
            CHECK_CONTAINS(err.message, json_string_value(json_object_get(c, "error")));
            CHECK_CONTAINS(err.message, "chat template line 1: ");
        }
        free(out), free(ctx), free(src);
        json_decref(toks);
        pdl_chat_template_free(t);
    }
    json_decref(cases);
}

/* The reference templates (and a Mistral-style one) with tools, tool calls,
 * reasoning content and content parts. */
static void test_rich_conversations_match_jinja2(void) {
    for (size_t i = 0; i < sizeof CONV_CASES / sizeof *CONV_CASES; i++) {
        const char *name = CONV_CASES[i].tmpl;
        bool mistral = strcmp(name, "mistral-style") == 0;
        char *src = mistral ? strdup(MISTRAL_STYLE) : template_source(name);
        json_t *toks = mistral ? json_pack("{s:s, s:s}", "bos_token", "<s>", "eos_token", "</s>") : template_tokens(name);
        const char *conv = NULL;
        for (size_t k = 0; k < sizeof CONVS / sizeof *CONVS; k++)
            if (strcmp(CONVS[k].name, CONV_CASES[i].conv) == 0) conv = CONVS[k].json;
        REQUIRE(conv != NULL);
        pdl_error err;
        pdl_chat_template *t;
        REQUIRE(pdl_chat_template_from_source(&t, src, json_string_value(json_object_get(toks, "bos_token")),
                                              json_string_value(json_object_get(toks, "eos_token")), &err) == 0);
        char *out = NULL;
        int rc = pdl_chat_template_render(t, conv, &out, NULL, &err);
        if (CONV_CASES[i].is_error) {
            CHECK_MSG(rc != 0 && strstr(err.message, CONV_CASES[i].want), "%s/%s: want error %s, got %s", name,
                      CONV_CASES[i].conv, CONV_CASES[i].want, rc ? err.message : out);
        } else {
            CHECK_MSG(rc == 0 && strcmp(out, CONV_CASES[i].want) == 0, "%s/%s:\n    got:  %s\n    want: %s", name,
                      CONV_CASES[i].conv, rc ? err.message : out, CONV_CASES[i].want);
        }
        free(out), free(src);
        json_decref(toks);
        pdl_chat_template_free(t);
    }
}

/* ---------------------------------------------------------------------------
 * Errors
 * ------------------------------------------------------------------------- */

static void check_error(const char *src, const char *ctx_json, const char *want, int want_line) {
    json_t *ctx = ctx_json ? parse_json(ctx_json) : NULL;
    tmpl_error err;
    char *out = render(src, ctx, &err);
    CHECK_MSG(out == NULL, "%s rendered: %s", src, out ? out : "");
    if (!out) {
        CHECK_MSG(strcmp(err.message, want) == 0, "%s\n    got:  %s\n    want: %s", src, err.message, want);
        CHECK_MSG(err.line == want_line, "%s: line %d, want %d", src, err.line, want_line);
    }
    free(out);
    json_decref(ctx);
}

static void test_syntax_errors_carry_jinja_message_and_line(void) {
    check_error("{% for x in l %}\n{{ x }}\n", NULL,
                "Unexpected end of template. Jinja was looking for the following tags: 'endfor' or 'else'. "
                "The innermost block that needs to be closed is 'for'.",
                2);
    check_error("line1\n{% if x %}\n{% endfor %}", NULL,
                "Encountered unknown tag 'endfor'. Jinja was looking for the following tags: 'elif' or 'else' or "
                "'endif'. The innermost block that needs to be closed is 'if'.",
                3);
    check_error("a\n\n{% foo %}", NULL, "Encountered unknown tag 'foo'.", 3);
    check_error("{% endif %}", NULL, "Encountered unknown tag 'endif'.", 1);
    check_error("\n\n{% if x %}{% else %}{% else %}{% endif %}", NULL,
                "Encountered unknown tag 'else'. Jinja was looking for the following tags: 'endif'. The innermost "
                "block that needs to be closed is 'if'.",
                3);
    check_error("{{ a b }}", NULL, "expected token 'end of print statement', got 'b'", 1);
    check_error("{{ }}", NULL, "Expected an expression, got 'end of print statement'", 1);
    check_error("{{ 'abc }}", NULL, "unexpected char \"'\" at 3", 1);
    check_error("{{ (a }}", NULL, "unexpected '}', expected ')'", 1);
    check_error("x\n{{ a @ b }}", NULL, "unexpected char '@' at 7", 2);
    check_error("{% set true = 1 %}", NULL, "can't assign to 'const'", 1);
    check_error("{% macro m(a=1, b) %}{% endmacro %}", NULL, "non-default argument follows default argument", 1);
    check_error("{# unclosed", NULL, "Missing end of comment tag", 1);
    check_error("{{ x is }}", NULL, "expected token 'name', got 'end of print statement'", 1);
    check_error("{{ a", NULL, "unexpected end of template, expected 'end of print statement'.", 1);
    check_error("{% break %}", NULL, "'break' outside loop", 1);
    check_error("{% include 'x.jinja' %}", NULL, "the 'include' tag is not supported in chat templates", 1);
}

static void test_raise_exception_gives_the_templates_message_and_line(void) {
    check_error("a\nb\n{{ raise_exception('on line three') }}", NULL, "on line three", 3);
    check_error("{% if messages %}\n\n{{ raise_exception('Bad role: ' ~ messages[0].role) }}{% endif %}",
                "{\"messages\": [{\"role\": \"tool\"}]}", "Bad role: tool", 3);
    check_error("{{ raise_exception() }}", NULL, "raise_exception() missing 1 required positional argument: 'message'", 1);
    /* no partial output comes back with an error */
    tmpl_error err;
    char *out = render("text before{{ raise_exception('stop') }}", NULL, &err);
    CHECK(out == NULL);
    CHECK(strcmp(err.message, "stop") == 0);
}

/* Unknown filters and tests fail where they are used, naming them, as in
 * Jinja2 (a branch never taken does not fail). */
static void test_unknown_filters_and_tests_are_named(void) {
    check_error("a\n{{ x|nofilter }}", NULL, "No filter named 'nofilter'.", 2);
    check_error("{{ 1 is nosuchtest }}", NULL, "No test named 'nosuchtest'.", 1);
    check_error("{% set y | nofilter %}x{% endset %}", NULL, "No filter named 'nofilter'.", 1);
    tmpl_error err;
    char *out = render("{% if false %}{{ x|nofilter }}{% endif %}ok", NULL, &err);
    CHECK(out && strcmp(out, "ok") == 0);
    free(out);
}

static void test_runtime_errors_report_their_line(void) {
    check_error("{% for x in l %}\n  {% if x %}\n    {{ x.y.z }}\n  {% endif %}\n{% endfor %}", "{\"l\": [3]}",
                "'int object' has no attribute 'y'", 3);
    check_error("{% set ns = 1 %}\n{% set ns.a = 2 %}", NULL, "cannot assign attribute on non-namespace object", 2);
}

/* ---------------------------------------------------------------------------
 * Limits: no crash, no endless loop, no unbounded memory
 * ------------------------------------------------------------------------- */

static char *repeat(const char *a, int n, const char *mid, const char *b) {
    size_t la = strlen(a), lm = strlen(mid), lb = strlen(b);
    char *s = malloc(la * (size_t)n + lm + lb * (size_t)n + 1), *p = s;
    for (int i = 0; i < n; i++) memcpy(p, a, la), p += la;
    memcpy(p, mid, lm), p += lm;
    for (int i = 0; i < n; i++) memcpy(p, b, lb), p += lb;
    *p = '\0';
    return s;
}

static void test_deep_recursion_is_stopped(void) {
    check_error("{% macro m(n) %}{{ m(n + 1) }}{% endmacro %}{{ m(0) }}", NULL, "maximum recursion depth exceeded", 1);
    tmpl_error err;
    /* deeply nested expressions and blocks fail at parse time */
    char *src = repeat("(", 20000, "1", ")");
    char *tmpl = malloc(strlen(src) + 8);
    sprintf(tmpl, "{{ %s }}", src);
    char *out = render(tmpl, NULL, &err);
    CHECK(out == NULL && strstr(err.message, "nested too deeply"));
    free(tmpl), free(src);
    src = repeat("{% if true %}", 5000, "x", "{% endif %}");
    out = render(src, NULL, &err);
    CHECK(out == NULL && strstr(err.message, "nested too deeply"));
    free(src);
    src = repeat("-", 50000, "1", "");
    tmpl = malloc(strlen(src) + 8);
    sprintf(tmpl, "{{ %s }}", src);
    out = render(tmpl, NULL, &err);
    CHECK(out == NULL && strstr(err.message, "nested too deeply"));
    free(tmpl), free(src);
    /* long filter chains and values nested by a loop fail while rendering */
    src = repeat("|string", 20000, "", "");
    tmpl = malloc(strlen(src) + 16);
    sprintf(tmpl, "{{ 1%s }}", src);
    out = render(tmpl, NULL, &err);
    CHECK(out == NULL && strcmp(err.message, "maximum recursion depth exceeded") == 0);
    free(tmpl), free(src);
    out = render("{% set ns = namespace(x=[]) %}{% for i in range(5000) %}{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x }}",
                 NULL, &err);
    CHECK(out == NULL && strstr(err.message, "maximum recursion depth exceeded"));
    out = render("{% set ns = namespace(x=[]) %}{% for i in range(5000) %}{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x|tojson }}",
                 NULL, &err);
    CHECK(out == NULL && strstr(err.message, "maximum recursion depth exceeded"));
}

static void test_step_limit_stops_long_loops(void) {
    tmpl_options o = {.max_steps = 100000};
    tmpl_error err;
    char *out = render_opts("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", NULL,
                            &o, NULL, &err);
    CHECK(out == NULL);
    CHECK_CONTAINS(err.message, "100000 steps");
    /* the sandbox's own bound on range() */
    check_error("{% for i in range(10000000) %}{% endfor %}", NULL,
                "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).", 1);
}

static void test_output_and_memory_limits(void) {
    tmpl_options o = {.max_output = 100000};
    tmpl_error err;
    char *out = render_opts("{% for i in range(1000) %}{{ 'x' * 1000 }}{% endfor %}", NULL, &o, NULL, &err);
    CHECK(out == NULL);
    CHECK_CONTAINS(err.message, "rendered text exceeds the limit of 100000 bytes");
    o = (tmpl_options){.max_memory = 1 << 20};
    out = render_opts("{% set ns = namespace(s='') %}{% for i in range(10000) %}{% set ns.s = ns.s ~ 'abcdefgh' %}{% endfor %}",
                      NULL, &o, NULL, &err);
    CHECK(out == NULL);
    CHECK_CONTAINS(err.message, "memory");
    /* well inside the limits the same template works */
    out = render_opts("{% for i in range(100) %}{{ 'x' * 10 }}{% endfor %}", NULL, &o, NULL, &err);
    CHECK(out && strlen(out) == 1000);
    free(out);
}

/* Random token soup and damaged real templates: every outcome is text or an
 * error message, never a crash (run under ASan/UBSan too). */
static void test_fuzz_random_and_truncated_templates_never_crash(void) {
    static const char *const pieces[] = {
        "{{", "}}", "{%", "%}", "{#", "#}", "{%-", "-%}", "{{-", "-}}", "+%}", "{%+", " ", "\n", "\t", "x", "'s'", "\"q",
        "if", "elif", "else", "endif", "for", "in", "endfor", "set", "endset", "macro", "endmacro", "call", "endcall",
        "raw", "endraw", "filter", "endfilter", "break", "continue", "namespace(", "loop.", "index", "messages", "[", "]",
        "(", ")", "{", "}", ":", ",", ".", "|", "~", "+", "-", "*", "/", "//", "%", "**", "==", "!=", "<", ">=", "not",
        "and", "or", "is", "defined", "none", "true", "1", "0", "-1", "2.5", "1e308", "9223372036854775807", "tojson",
        "trim", "join", "length", "items", "selectattr", "map", "attribute=", "'role'", "string", "int", "[::-1]",
        "raise_exception(", "range(", "m(", "caller()", "varargs", "é", "\xff", "\xc3", "=", "x.y", "content", "ns.a"};
    json_t *ctx = parse_json(CTX_JSON);
    json_object_set_new(ctx, "messages", json_deep_copy(json_object_get(ctx, "msgs")));
    uint64_t seed = 0x9e3779b97f4a7c15ULL;
#define NEXT_RAND() (seed = seed * 6364136223846793005ULL + 1442695040888963407ULL, (uint32_t)(seed >> 33))
    tmpl_options o = {.max_steps = 200000, .max_output = 1 << 20, .max_memory = 64 << 20};
    int rendered = 0, failed = 0;
    for (int it = 0; it < 3000; it++) {
        char src[2048];
        size_t n = 0;
        int count = 1 + (int)(NEXT_RAND() % 40);
        for (int k = 0; k < count; k++) {
            const char *p = pieces[NEXT_RAND() % (sizeof pieces / sizeof *pieces)];
            size_t l = strlen(p);
            if (n + l >= sizeof src) break;
            memcpy(src + n, p, l);
            n += l;
        }
        tmpl_template *t;
        tmpl_error err;
        if (tmpl_parse(&t, src, n, &err) != 0) {
            CHECK(err.message[0] != '\0');
            failed++;
            continue;
        }
        char *out = NULL;
        size_t len;
        if (tmpl_render(t, ctx, &o, &out, &len, &err) == 0) {
            rendered++;
        } else {
            CHECK(err.message[0] != '\0');
            failed++;
        }
        free(out);
        tmpl_free(t);
    }
    /* every prefix and a few damaged copies of each reference template */
    static const char *const names[] = {"Qwen-Qwen3-0.6B", "meta-llama-Llama-3.1-8B-Instruct", "gemma3-tokenizer_config",
                                        "HuggingFaceTB-SmolLM3-3B"};
    for (size_t k = 0; k < sizeof names / sizeof *names; k++) {
        char *src = template_source(names[k]);
        size_t len = strlen(src);
        for (size_t cut = 0; cut <= len; cut += 1 + cut / 64) {
            tmpl_template *t;
            tmpl_error err;
            if (tmpl_parse(&t, src, cut, &err) == 0) {
                char *out = NULL;
                size_t n;
                if (tmpl_render(t, ctx, &o, &out, &n, &err) != 0) CHECK(err.message[0] != '\0');
                free(out);
                tmpl_free(t);
            } else {
                CHECK(err.message[0] != '\0' && err.line >= 1);
            }
        }
        char *copy = malloc(len + 1);
        for (int m = 0; m < 200; m++) {
            memcpy(copy, src, len + 1);
            for (int e = 0; e < 3; e++) {
                size_t at = NEXT_RAND() % len;
                copy[at] = (char)(NEXT_RAND() % 256);
            }
            tmpl_template *t;
            tmpl_error err;
            if (tmpl_parse(&t, copy, len, &err) == 0) {
                char *out = NULL;
                size_t n;
                if (tmpl_render(t, ctx, &o, &out, &n, &err) != 0) CHECK(err.message[0] != '\0');
                free(out);
                tmpl_free(t);
            }
        }
        free(copy);
        free(src);
    }
#undef NEXT_RAND
    CHECK(rendered > 0 && failed > 0);
    json_decref(ctx);
}

/* ---------------------------------------------------------------------------
 * Clock, context and reuse
 * ------------------------------------------------------------------------- */

static void test_strftime_now_formats_the_clock(void) {
    setenv("TZ", "UTC", 1);
    tzset();
    tmpl_options o = {.fixed_now = true, .now = 1700000000}; /* 2023-11-14 22:13:20 UTC */
    tmpl_error err;
    char *out = render_opts("{{ strftime_now('%d %b %Y') }}|{{ strftime_now('%H:%M') }}|{{ strftime_now('') }}|", NULL,
                            &o, NULL, &err);
    CHECK(out && strcmp(out, "14 Nov 2023|22:13||") == 0);
    free(out);
    /* Llama 3.2 takes today's date from strftime_now when no date_string is given */
    char *src = template_source("meta-llama-Llama-3.2-3B-Instruct");
    json_t *ctx = parse_json("{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"bos_token\": \"<s>\"}");
    out = render_opts(src, ctx, &o, NULL, &err);
    CHECK(out && strstr(out, "Today Date: 14 Nov 2023\n"));
    free(out), free(src);
    json_decref(ctx);
    /* without a fixed clock it is today's date */
    out = render("{{ strftime_now('%Y') }}", NULL, &err);
    char year[16];
    time_t now = time(NULL);
    strftime(year, sizeof year, "%Y", localtime(&now));
    CHECK(out && strcmp(out, year) == 0);
    free(out);
}

/* apply_chat_template passes tools and documents (None when absent) and
 * add_generation_prompt (false); the special tokens can be overridden. */
static void test_context_defaults_follow_apply_chat_template(void) {
    pdl_chat_template *t;
    pdl_error err;
    REQUIRE(pdl_chat_template_from_source(&t,
                                          "{{ tools is defined }}{{ tools is none }}{{ documents is none }}"
                                          "{{ add_generation_prompt }}|{{ bos_token }}|{{ eos_token }}|{{ enable_thinking }}",
                                          "<s>", NULL, &err) == 0);
    char *out;
    REQUIRE(pdl_chat_template_render(t, "{\"messages\": []}", &out, NULL, &err) == 0);
    CHECK(strcmp(out, "TrueTrueTrueFalse|<s>||") == 0);
    free(out);
    REQUIRE(pdl_chat_template_render(t, "{\"bos_token\": \"B\", \"enable_thinking\": false, \"add_generation_prompt\": true}",
                                     &out, NULL, &err) == 0);
    CHECK(strcmp(out, "TrueTrueTrueTrue|B||False") == 0);
    free(out);
    CHECK(pdl_chat_template_render(t, "[1, 2]", &out, NULL, &err) != 0);
    CHECK_CONTAINS(err.message, "JSON object");
    CHECK(pdl_chat_template_render(t, "{\"a\": ", &out, NULL, &err) != 0);
    CHECK_CONTAINS(err.message, "invalid JSON");
    pdl_chat_template_free(t);
    CHECK(pdl_chat_template_from_source(&t, "{% if %}", NULL, NULL, &err) != 0);
    CHECK_CONTAINS(err.message, "line 1");
}

/* A parsed template renders any number of times with the same result. */
static void test_template_is_reusable(void) {
    char *src = template_source("Qwen-Qwen3-0.6B");
    tmpl_template *t;
    tmpl_error err;
    REQUIRE(tmpl_parse(&t, src, strlen(src), &err) == 0);
    json_t *ctx = parse_json("{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"add_generation_prompt\": true}");
    char *first = NULL;
    for (int i = 0; i < 20; i++) {
        char *out;
        size_t n;
        REQUIRE(tmpl_render(t, ctx, NULL, &out, &n, &err) == 0);
        if (!first) {
            first = out;
        } else {
            CHECK(strcmp(out, first) == 0);
            free(out);
        }
    }
    CHECK(strcmp(first, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n") == 0);
    free(first), free(src);
    json_decref(ctx);
    tmpl_free(t);
}

/* ---------------------------------------------------------------------------
 * Loading templates
 * ------------------------------------------------------------------------- */

static char *render_path(const char *path, const char *ctx, pdl_error *err) {
    pdl_chat_template *t;
    if (pdl_chat_template_load(&t, path, err)) return NULL;
    char *out = NULL;
    if (pdl_chat_template_render(t, ctx, &out, NULL, err)) out = NULL;
    pdl_chat_template_free(t);
    return out;
}

static const char *HI = "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], \"add_generation_prompt\": true}";

static void test_load_folder_with_only_tokenizer_config(void) {
    char *dir = test_make_dir("cfg-only"), *cfg = test_join(dir, "tokenizer_config.json");
    const char *json = "{\"bos_token\": {\"__type\": \"AddedToken\", \"content\": \"<s>\"}, \"eos_token\": \"</s>\", "
                       "\"unk_token\": null, \"chat_template\": \"{{ bos_token }}{% for m in messages %}[{{ m.content }}]"
                       "{% endfor %}{{ eos_token }}{{ unk_token is defined }}\"}";
    test_write_file(cfg, json, strlen(json));
    pdl_error err;
    char *out = render_path(dir, HI, &err);
    CHECK_MSG(out && strcmp(out, "<s>[Hi]</s>False") == 0, "%s", out ? out : err.message);
    free(out), free(cfg), free(dir);
}

/* chat_template.jinja wins over tokenizer_config.json's template; a trailing
 * newline of the file is dropped as Jinja2 drops it. */
static void test_chat_template_jinja_takes_precedence(void) {
    char *dir = test_make_dir("jinja-file"), *cfg = test_join(dir, "tokenizer_config.json"),
         *jf = test_join(dir, "chat_template.jinja");
    const char *json = "{\"eos_token\": \"<e>\", \"chat_template\": \"from config\"}";
    test_write_file(cfg, json, strlen(json));
    const char *jinja = "{%- for m in messages %}\n<{{ m.content }}>\n{%- endfor %}{{ eos_token }}\n";
    test_write_file(jf, jinja, strlen(jinja));
    pdl_error err;
    char *out = render_path(dir, HI, &err);
    CHECK_MSG(out && strcmp(out, "<Hi><e>") == 0, "%s", out ? out : err.message);
    free(out), free(cfg), free(jf), free(dir);
    /* a folder with only chat_template.jinja */
    dir = test_make_dir("jinja-only");
    jf = test_join(dir, "chat_template.jinja");
    test_write_file(jf, "{{ messages[0].content }}{{ bos_token is defined }}", 51);
    out = render_path(dir, HI, &err);
    CHECK_MSG(out && strcmp(out, "HiFalse") == 0, "%s", out ? out : err.message);
    free(out), free(jf), free(dir);
}

/* A list of named templates: "tool_use" when tools are given, else "default". */
static void test_named_templates_choose_tool_use_with_tools(void) {
    char *dir = test_make_dir("named"), *cfg = test_join(dir, "tokenizer_config.json");
    const char *json = "{\"chat_template\": [{\"name\": \"default\", \"template\": \"plain\"}, "
                       "{\"name\": \"tool_use\", \"template\": \"tools: {{ tools|length }}\"}]}";
    test_write_file(cfg, json, strlen(json));
    pdl_error err;
    char *out = render_path(dir, HI, &err);
    CHECK(out && strcmp(out, "plain") == 0);
    free(out);
    out = render_path(dir, "{\"messages\": [], \"tools\": [{\"type\": \"function\"}]}", &err);
    CHECK(out && strcmp(out, "tools: 1") == 0);
    free(out), free(cfg), free(dir);
}

static void test_load_errors_name_the_problem(void) {
    pdl_error err;
    pdl_chat_template *t;
    char *mistral = test_data_path("tokenizers/mistral-7b-v0.1");
    CHECK(pdl_chat_template_load(&t, mistral, &err) != 0);
    CHECK_CONTAINS(err.message, "no chat template");
    free(mistral);
    CHECK(pdl_chat_template_load(&t, "/nonexistent/folder", &err) != 0);
    CHECK_CONTAINS(err.message, "/nonexistent/folder");
    char *dir = test_make_dir("bad-template"), *jf = test_join(dir, "chat_template.jinja");
    test_write_file(jf, "ok\n{% for %}", 12);
    CHECK(pdl_chat_template_load(&t, dir, &err) != 0);
    CHECK_CONTAINS(err.message, "line 2");
    free(jf), free(dir);
}

/* The tokenizer folders in the test data render as their reference
 * templates do. */
static void test_load_shared_tokenizer_folders(void) {
    static const struct {
        const char *folder, *reference;
    } pairs[] = {{"tokenizers/qwen3", "Qwen-Qwen3-0.6B"}, {"tokenizers/llama3", "llama3-tokenizer_config"}};
    json_t *cases = reference_cases();
    for (size_t p = 0; p < 2; p++) {
        char *dir = test_data_path(pairs[p].folder);
        pdl_chat_template *t;
        pdl_error err;
        REQUIRE_MSG(pdl_chat_template_load(&t, dir, &err) == 0, "%s", err.message);
        size_t i;
        json_t *c;
        int checked = 0;
        json_array_foreach(cases, i, c) {
            if (strcmp(json_string_value(json_object_get(c, "template")), pairs[p].reference) != 0) continue;
            char *ctx = json_dumps(json_object_get(c, "context"), 0), *out = NULL;
            CHECK(pdl_chat_template_render(t, ctx, &out, NULL, &err) == 0);
            CHECK_MSG(out && strcmp(out, json_string_value(json_object_get(c, "expected"))) == 0, "%s %s", pairs[p].folder,
                      json_string_value(json_object_get(c, "case")));
            free(out), free(ctx);
            checked++;
        }
        CHECK(checked == 4);
        pdl_chat_template_free(t);
        free(dir);
    }
    json_decref(cases);
}

/* GGUF: tokenizer.chat_template, named templates, and BOS/EOS text from the
 * vocabulary. */
static void test_load_gguf_template(void) {
    char *phi3 = test_data_path("tokenizers/llama.cpp-vectors/ggml-vocab-phi-3.gguf");
    pdl_error err;
    char *out = render_path(phi3, "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}, "
                                  "{\"role\": \"assistant\", \"content\": \"Hello\"}]}", &err);
    CHECK_MSG(out && strcmp(out, "<s><|user|>\nHi<|end|>\n<|assistant|>\nHello<|end|>\n") == 0, "%s",
              out ? out : err.message);
    free(out), free(phi3);

    gguf_writer *w = gguf_writer_new(3);
    const char *toks[] = {"<unk>", "<|bos|>", "<|eos|>", "a"};
    gguf_writer_add_str(w, "general.architecture", "llama");
    gguf_writer_add_str_arr(w, "tokenizer.ggml.tokens", toks, 4);
    gguf_writer_add_u32(w, "tokenizer.ggml.bos_token_id", 1);
    gguf_writer_add_u32(w, "tokenizer.ggml.eos_token_id", 2);
    gguf_writer_add_str(w, "tokenizer.chat_template", "{{ bos_token }}{{ messages[0].content }}{{ eos_token }}");
    gguf_writer_add_str(w, "tokenizer.chat_template.tool_use", "tool:{{ tools[0] }}");
    char *path = test_tmp_path("chat.gguf");
    REQUIRE(gguf_writer_write(w, path) == 0);
    gguf_writer_free(w);
    out = render_path(path, HI, &err);
    CHECK_MSG(out && strcmp(out, "<|bos|>Hi<|eos|>") == 0, "%s", out ? out : err.message);
    free(out);
    out = render_path(path, "{\"tools\": [\"t\"]}", &err);
    CHECK(out && strcmp(out, "tool:t") == 0);
    free(out), free(path);

    char *stories = test_data_path("models/stories260K/stories260K.gguf");
    out = render_path(stories, HI, &err);
    CHECK(out == NULL);
    CHECK_CONTAINS(err.message, "tokenizer.chat_template");
    free(stories);
}

/* ---------------------------------------------------------------------------
 * pagedlm template
 * ------------------------------------------------------------------------- */

static char *write_context(const char *name, const char *json) {
    char *path = test_tmp_path(name);
    test_write_file(path, json, strlen(json));
    return path;
}

static void test_cli_renders_folder_with_tokenizer_config(void) {
    char *dir = test_make_dir("cli-cfg"), *cfg = test_join(dir, "tokenizer_config.json");
    char *src = template_source("meta-llama-Llama-3.1-8B-Instruct");
    json_t *j = json_pack("{s:s, s:{s:s}, s:s}", "chat_template", src, "bos_token", "content", "<|begin_of_text|>",
                          "eos_token", "<|eot_id|>");
    REQUIRE(json_dump_file(j, cfg, 0) == 0);
    json_decref(j);
    json_t *cases = reference_cases();
    size_t i;
    json_t *c;
    int checked = 0;
    json_array_foreach(cases, i, c) {
        if (strcmp(json_string_value(json_object_get(c, "template")), "meta-llama-Llama-3.1-8B-Instruct") != 0) continue;
        char *ctx_json = json_dumps(json_object_get(c, "context"), 0);
        char *ctx = write_context("cli-ctx.json", ctx_json);
        char args[2048];
        snprintf(args, sizeof args, "template -m '%s' --context '%s'", dir, ctx);
        cmd_result r = test_pagedlm(args);
        CHECK_EQ_INT(r.status, 0);
        const char *want = json_string_value(json_object_get(c, "expected"));
        CHECK_MSG(r.out_len == strlen(want) && memcmp(r.out, want, r.out_len) == 0, "got:\n%s\nwant:\n%s", r.out, want);
        test_free_result(&r);
        free(ctx), free(ctx_json);
        checked++;
    }
    CHECK(checked == 4);
    json_decref(cases);
    free(src), free(cfg), free(dir);
}

static void test_cli_renders_chat_template_jinja_folder_exactly(void) {
    char *dir = test_make_dir("cli-jinja"), *jf = test_join(dir, "chat_template.jinja");
    const char *jinja = "{% for m in messages %}{{ m.content }}{% endfor %}{{ '' }}\n\n";
    test_write_file(jf, jinja, strlen(jinja));
    char *ctx = write_context("cli-ctx2.json", "{\"messages\": [{\"role\": \"user\", \"content\": \"Übersetze 🌍\"}]}");
    char args[2048];
    snprintf(args, sizeof args, "template -m '%s' --context '%s'", dir, ctx);
    cmd_result r = test_pagedlm(args);
    CHECK_EQ_INT(r.status, 0);
    /* one trailing newline of the file is dropped, nothing is added */
    CHECK(r.out_len == strlen("Übersetze 🌍\n") && strcmp(r.out, "Übersetze 🌍\n") == 0);
    test_free_result(&r);
    free(ctx), free(jf), free(dir);
}

static void test_cli_template_error_exits_1_with_the_message(void) {
    char *dir = test_make_dir("cli-gemma"), *jf = test_join(dir, "chat_template.jinja");
    char *src = template_source("google-gemma-2-2b-it");
    test_write_file(jf, src, strlen(src));
    char *ctx = write_context("cli-ctx3.json", "{\"messages\": [{\"role\": \"system\", \"content\": \"s\"}, "
                                               "{\"role\": \"user\", \"content\": \"u\"}]}");
    char args[2048];
    snprintf(args, sizeof args, "template -m '%s' --context '%s'", dir, ctx);
    cmd_result r = test_pagedlm(args);
    CHECK_EQ_INT(r.status, 1);
    CHECK_CONTAINS(r.err, "System role not supported");
    CHECK(r.out_len == 0);
    test_free_result(&r);
    /* usage errors exit 2 */
    snprintf(args, sizeof args, "template -m '%s'", dir);
    r = test_pagedlm(args);
    CHECK_EQ_INT(r.status, 2);
    CHECK_CONTAINS(r.err, "--context");
    test_free_result(&r);
    /* a folder without a template and a missing context file exit 1 */
    char *mistral = test_data_path("tokenizers/mistral-7b-v0.1");
    snprintf(args, sizeof args, "template -m '%s' --context '%s'", mistral, ctx);
    r = test_pagedlm(args);
    CHECK_EQ_INT(r.status, 1);
    CHECK_CONTAINS(r.err, "no chat template");
    test_free_result(&r);
    snprintf(args, sizeof args, "template -m '%s' --context /nonexistent.json", dir);
    r = test_pagedlm(args);
    CHECK_EQ_INT(r.status, 1);
    CHECK_CONTAINS(r.err, "/nonexistent.json");
    test_free_result(&r);
    free(mistral), free(ctx), free(src), free(jf), free(dir);
}

static void test_cli_reads_context_from_stdin_and_gguf(void) {
    char *phi3 = test_data_path("tokenizers/llama.cpp-vectors/ggml-vocab-phi-3.gguf");
    char *ctx = write_context("cli-ctx4.json", "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}]}");
    char args[2048];
    snprintf(args, sizeof args, "template -m '%s' --context - < '%s'", phi3, ctx);
    cmd_result r = test_pagedlm(args);
    CHECK_EQ_INT(r.status, 0);
    CHECK(strcmp(r.out, "<s><|user|>\nHi<|end|>\n<|assistant|>\n") == 0);
    test_free_result(&r);
    free(ctx), free(phi3);
}

int main(void) {
    RUN(test_reference_cases_render_byte_identical);
    RUN(test_reference_contexts_come_from_conversations);
    RUN(test_reference_cases_through_public_api);
    RUN(test_rich_conversations_match_jinja2);
    RUN(test_whitespace_control_trim_and_lstrip_blocks);
    RUN(test_comments_and_raw_blocks);
    RUN(test_if_elif_else);
    RUN(test_for_loops_and_loop_variables);
    RUN(test_loop_controls_break_and_continue);
    RUN(test_set_and_scoping_rules);
    RUN(test_namespace_attributes_survive_loops);
    RUN(test_block_set_with_filters);
    RUN(test_macros_defaults_varargs_caller_recursion);
    RUN(test_filter_blocks_and_generation_tag);
    RUN(test_string_filters);
    RUN(test_sequence_filters);
    RUN(test_select_reject_and_map_filters);
    RUN(test_number_and_default_filters);
    RUN(test_tojson_matches_python_json_dumps);
    RUN(test_is_tests);
    RUN(test_string_methods);
    RUN(test_dict_list_and_tuple_methods);
    RUN(test_slicing_and_indexing_by_code_point);
    RUN(test_arithmetic_and_logic_operators);
    RUN(test_comparisons_and_membership);
    RUN(test_values_print_as_python_str);
    RUN(test_undefined_values_behave_like_jinja2);
    RUN(test_percent_and_format_string_formatting);
    RUN(test_globals_range_dict_joiner_cycler);
    RUN(test_runtime_errors_have_python_wording);
    RUN(test_syntax_errors_carry_jinja_message_and_line);
    RUN(test_raise_exception_gives_the_templates_message_and_line);
    RUN(test_unknown_filters_and_tests_are_named);
    RUN(test_runtime_errors_report_their_line);
    RUN(test_deep_recursion_is_stopped);
    RUN(test_step_limit_stops_long_loops);
    RUN(test_output_and_memory_limits);
    RUN(test_fuzz_random_and_truncated_templates_never_crash);
    RUN(test_strftime_now_formats_the_clock);
    RUN(test_context_defaults_follow_apply_chat_template);
    RUN(test_template_is_reusable);
    RUN(test_load_folder_with_only_tokenizer_config);
    RUN(test_chat_template_jinja_takes_precedence);
    RUN(test_named_templates_choose_tool_use_with_tools);
    RUN(test_load_errors_name_the_problem);
    RUN(test_load_shared_tokenizer_folders);
    RUN(test_load_gguf_template);
    RUN(test_cli_renders_folder_with_tokenizer_config);
    RUN(test_cli_renders_chat_template_jinja_folder_exactly);
    RUN(test_cli_template_error_exits_1_with_the_message);
    RUN(test_cli_reads_context_from_stdin_and_gguf);
    return test_summary();
}
