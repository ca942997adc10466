/*
 * pretok.c - the pre-tokenizer of byte-level BPE: a list of split steps run
 * on PCRE2, and the step lists that GGUF's tokenizer.ggml.pre names stand for.
 *
 * What it is for: cutting normalized text into the words that BPE merges
 * within, as Hugging Face's Split / ByteLevel / Digits / Punctuation
 * pre-tokenizers do. Every step is applied to each piece the steps before it
 * made; a piece is its own regex subject (lookarounds and anchors stop at its
 * ends). Matches are found left to right, each search starting where the last
 * match ended (after an empty match, one character further), as onig's
 * find_iter does; empty pieces are dropped. Pieces are (pointer, length)
 * views into the text or into a per-step scratch buffer: nothing is
 * allocated per piece or per match.
 *
 * Regexes: patterns are compiled with PCRE2_UTF | PCRE2_UCP and JIT.
 * Invalid UTF-8 is allowed (PCRE2_MATCH_INVALID_UTF): an invalid byte never
 * matches any part of a pattern, so it ends up in a gap, which is a piece of
 * its own with the Isolated behaviour, and goes through the byte-level map
 * like any byte. Hugging Face's regexes are Oniguruma's; the one difference
 * for these patterns is \s, which PCRE2 (UCP) also lets match U+180E: \s
 * and \S outside classes and \s inside classes are rewritten to Unicode's
 * White_Space list, which is Oniguruma's.
 *
 * Steps after a ByteLevel step see the byte-level form of the text (HF runs
 * them on "Ġ123", not " 123"); such a step maps its piece, matches, and maps
 * the offsets back, so that words stay raw bytes.
 *
 * What it is not for: merging (bpe.c), added tokens (added.c).
 */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"
#include "util/error.h"

/* ---------------------------------------------------------------------------
 * The regexes Hugging Face and llama.cpp use
 * ------------------------------------------------------------------------- */

const char TOK_RE_GPT2[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
static const char RE_LLAMA3[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
    "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char RE_QWEN2[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
    "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char TOK_RE_PUNCT[] = "[\\p{P}!-/:-@\\[-`{-~]";
/* llama.cpp's default list (no Hugging Face tokenizer.json corresponds). */
static const char RE_DEFAULT_PUNCT[] = "[\\p{P}\\$\\+<=>\\^~\\|]+";
static const char RE_DEFAULT_WORDS[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";
/* The families below: each model's tokenizer.json regexes (as llama.cpp's
 * llama-vocab.cpp records them, its comments giving the originals where it
 * rewrote them for its own engine). */
static const char RE_CJK_DEEPSEEK[] = "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+";
static const char RE_DEEPSEEK_LLM_LATIN[] =
    "\\s?[A-Za-z\u00b5\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u01ba\u01bc-\u01bf\u01c4-\u0293\u0295-\u02af\u0370-\u0373"
    "\u0376\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c\u038e-\u03a1\u03a3-\u03f5\u03f7-\u0481\u048a-\u052f"
    "\u0531-\u0556\u10a0-\u10c5\u13a0-\u13f5\u13f8-\u13fd\u1c90-\u1cba\u1cbd-\u1cbf\u1d00-\u1d2b\u1d6b-\u1d77"
    "\u1d79-\u1d9a\u1e00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45\u1f48-\u1f4d\u1f50-\u1f57\u1f59\u1f5b\u1f5d\u1f5f-\u1f7d"
    "\u1f80-\u1fb4\u1fb6-\u1fbc\u1fbe\u1fc2-\u1fc4\u1fc6-\u1fcc\u1fd0-\u1fd3\u1fd6-\u1fdb\u1fe0-\u1fec\u1ff2-\u1ff4"
    "\u1ff6-\u1ffc\u2102\u2107\u210a-\u2113\u2115\u2119-\u211d\u2124\u2126\u2128\u212a-\u212d\u212f-\u2134\u2139"
    "\u213c-\u213f\u2145-\u2149\u214e\u2183\u2184\u2c00-\u2c7b\u2c7e-\u2ce4\u2ceb-\u2cee\u2cf2\u2cf3\ua640-\ua66d"
    "\ua680-\ua69b\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e\uab70-\uabbf\ufb00-\ufb06\ufb13-\ufb17\uff21-\uff3a"
    "\uff41-\uff5a\U00010400-\U0001044f\U000104b0-\U000104d3\U000104d8-\U000104fb\U00010c80-\U00010cb2"
    "\U00010cc0-\U00010cf2\U000118a0-\U000118df\U0001e900-\U0001e943]+";
static const char RE_DEEPSEEK_LLM_PUNCT[] = "\\s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+";
static const char RE_DEEPSEEK3[] =
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+"
    "| ?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char RE_GPT4O[] =
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    "|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    "|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char RE_TEKKEN[] =
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+"
    "|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*"
    "|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char RE_YOUTU_CJK[] =
    "[\uac00-\ud7a3\u3131-\u318e]+|[\uff01\u2026\u201c\u201d\u2018\u2019\u2014\uff1a\uff1b\uff0c\u3001-\u303f"
    "\ufe30-\ufe4f]+|[\u3105-\u312f]+|[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+";
static const char RE_YOUTU[] =
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    "|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    "|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char RE_QWEN35[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*"
    "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char RE_JAIS2[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+"
    "|\\s{512}(?!\\S)|\\s{256}(?!\\S)|\\s{128}(?!\\S)|\\s{64}(?!\\S)|\\s{32}(?!\\S)|\\s{16}(?!\\S)|\\s{8}(?!\\S)"
    "|\\s{4}(?!\\S)|\\s{1,2}(?!\\S)|\\s{1}";
/* BLOOM's " ?[^(\s|[.,!?…。，、।۔،])]+" with Oniguruma's nested class flattened */
static const char RE_BLOOM[] = " ?[^(\\s|.,!?\u2026\u3002\uff0c\u3001\u0964\u06d4\u060c)]+";
static const char RE_SEED_CODER[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1}| ?[^\\s\\p{L}\\p{N}\\r\\n]+|\\s*[\\r\\n]+"
    "|\\s+(?!\\S)|\\s+";
static const char RE_BAILING[] =
    "'(?i:[sdmt]|ll|ve|re)|[^\\r\\n\\p{L}\\p{N}]?+\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]++[\\r\\n]*|\\s*[\\r\\n]|\\s+(?!\\S)"
    "|\\s+";
static const char RE_EXAONE_MOE[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?(?:\\p{L}\\p{M}*(?: \\p{L}\\p{M}*)*)+|\\p{N}"
    "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]?|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+";
static const char RE_MINICPM5[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}+| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+"
    "|\\s+(?!\\S)|\\s+";
static const char RE_GRANITE_EMB_MULTI[] =
    "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}\\p{M}])([^a-z]))*((?=[\\p{L}\\p{M}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]"
    "|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}\\p{M}])([^a-z]))+((?=[\\p{L}\\p{M}])([^A-Z]))*(?:'[sS]"
    "|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+"
    "|\\s+(?!\\S)|\\s+";
/* Kimi-K2 (tokenization_kimi.py, run by tiktoken on Rust's fancy-regex):
 * Han runs apart, then GPT-4o's words over letters that are not Han.
 * PCRE2 has no class intersection: [X&&[^\p{Han}]] is written as one
 * character of X that is not Han, (?:(?!Han)[X]). "Han" is the Script
 * property, as Rust's bare \p{Han} is; PCRE2's bare \p{Han} means
 * Script_Extensions, which would also take 、 and 。 into Han runs. */
#define KIMI_HAN "\\p{sc:Han}"
#define KIMI_UPPER "(?:(?!" KIMI_HAN ")[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}])"
#define KIMI_LOWER "(?:(?!" KIMI_HAN ")[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}])"
static const char RE_KIMI_K2[] =
    "[" KIMI_HAN "]+"
    "|[^\\r\\n\\p{L}\\p{N}]?" KIMI_UPPER "*" KIMI_LOWER "+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    "|[^\\r\\n\\p{L}\\p{N}]?" KIMI_UPPER "+" KIMI_LOWER "*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    "|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

typedef struct pre_step_def {
    const char *re;
    uint8_t behavior;
    bool mapped;
} pre_step_def;

typedef struct pre_def {
    const char *names;  /* space-separated tokenizer.ggml.pre values */
    pre_step_def steps[6];
    bool ignore_merges;
    bool add_bos;
} pre_def;

/* The step lists, from each model's tokenizer.json (llama.cpp's
 * llm_tokenizer_bpe has the same regexes, partly rewritten for its own
 * engine). */
static const pre_def PRE_DEFS[] = {
    {"gpt-2 phi-2 mpt olmo jina-es jina-de jina-v1-en jina-v2-es jina-v2-de jina-v2-code roberta-bpe "
     "gigachat exaone4 a.x-4.0 mellum trillion granite-docling jais modern-bert",
     {{TOK_RE_GPT2, TOK_SPLIT_ISOLATED, false}}, false, false},
    {"llama3 llama-v3 llama-bpe falcon3 falcon-h1 pixtral midm-2.0 lfm2 jina-v5-nano",
     {{RE_LLAMA3, TOK_SPLIT_ISOLATED, false}}, true, true},
    {"dbrx smaug-bpe glm4 chatglm-bpe", {{RE_LLAMA3, TOK_SPLIT_ISOLATED, false}}, false, false},
    {"qwen2 deepseek-r1-qwen stablelm2 megrez hunyuan kormo f2llmv2 solar-open grok-2",
     {{RE_QWEN2, TOK_SPLIT_ISOLATED, false}}, false, false},
    /* Digits(individual_digits) + ByteLevel(use_regex) */
    {"starcoder refact command-r smollm codeshell exaone minerva-7b mellum2",
     {{"\\p{N}", TOK_SPLIT_ISOLATED, false}, {TOK_RE_GPT2, TOK_SPLIT_ISOLATED, false}}, false, false},
    /* a Sequence of Splits, then ByteLevel without its regex */
    {"deepseek-llm",
     {{"[\\r\\n]", TOK_SPLIT_ISOLATED, false},
      {RE_DEEPSEEK_LLM_LATIN, TOK_SPLIT_ISOLATED, false},
      {RE_DEEPSEEK_LLM_PUNCT, TOK_SPLIT_ISOLATED, false},
      {"\\s+$", TOK_SPLIT_ISOLATED, false},
      {RE_CJK_DEEPSEEK, TOK_SPLIT_ISOLATED, false},
      {"\\p{N}+", TOK_SPLIT_ISOLATED, false}},
     false, false},
    {"deepseek-coder",
     {{"[\\r\\n]", TOK_SPLIT_ISOLATED, false},
      {"\\s?\\p{L}+", TOK_SPLIT_ISOLATED, false},
      {"\\s?\\p{P}+", TOK_SPLIT_ISOLATED, false},
      {RE_CJK_DEEPSEEK, TOK_SPLIT_ISOLATED, false},
      {"\\p{N}", TOK_SPLIT_ISOLATED, false}},
     false, false},
    {"deepseek-v3 hunyuan-dense joyai-llm",
     {{"\\p{N}{1,3}", TOK_SPLIT_ISOLATED, false},
      {"[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+", TOK_SPLIT_ISOLATED, false},
      {RE_DEEPSEEK3, TOK_SPLIT_ISOLATED, false}},
     false, false},
    {"youtu", {{RE_YOUTU_CJK, TOK_SPLIT_ISOLATED, false}, {RE_YOUTU, TOK_SPLIT_ISOLATED, false}}, true, false},
    {"gpt-4o llama4 kanana2 talkie minimax-m2", {{RE_GPT4O, TOK_SPLIT_ISOLATED, false}}, false, false},
    /* llama.cpp keeps merges on (tiktoken takes a word in the vocabulary
     * whole; the merges derived from its ranks rebuild such a word) */
    {"kimi-k2", {{RE_KIMI_K2, TOK_SPLIT_ISOLATED, false}}, false, false},
    {"granite-embed-multi-97m", {{RE_GRANITE_EMB_MULTI, TOK_SPLIT_ISOLATED, false}}, true, false},
    {"tiny_aya cohere2moe",
     {{"\\d{1,3}(?=(?:\\d{3})*\\b)", TOK_SPLIT_ISOLATED, false}, {RE_GPT4O, TOK_SPLIT_ISOLATED, false}}, false, false},
    {"tekken", {{RE_TEKKEN, TOK_SPLIT_ISOLATED, false}}, true, true},
    {"qwen35", {{RE_QWEN35, TOK_SPLIT_ISOLATED, false}}, false, false},
    {"jais-2", {{RE_JAIS2, TOK_SPLIT_ISOLATED, false}}, false, false},
    {"poro-chat bloom gpt3-finnish", {{RE_BLOOM, TOK_SPLIT_ISOLATED, false}}, false, false},
    {"viking", {{RE_BLOOM, TOK_SPLIT_ISOLATED, false}, {"\\p{N}", TOK_SPLIT_ISOLATED, false}}, false, false},
    {"chameleon",
     {{"<sentinel:[0-9]+>", TOK_SPLIT_ISOLATED, false},
      {"(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z", TOK_SPLIT_ISOLATED, false},
      {"([\\t\\n]|    |  )", TOK_SPLIT_ISOLATED, false},
      {"\\p{N}", TOK_SPLIT_ISOLATED, false},
      {TOK_RE_PUNCT, TOK_SPLIT_ISOLATED, false},
      {TOK_RE_GPT2, TOK_SPLIT_ISOLATED, false}},
     false, true},
    {"superbpe", {{"\\p{N}+", TOK_SPLIT_ISOLATED, false}, {"(?=(\\d{3})+(?!\\d))", TOK_SPLIT_ISOLATED, false}},
     false, false},
    {"bailingmoe bailingmoe2 llada-moe", {{RE_BAILING, TOK_SPLIT_ISOLATED, false}}, false, false},
    {"seed-coder", {{RE_SEED_CODER, TOK_SPLIT_ISOLATED, false}}, false, false},
    {"exaone-moe", {{RE_EXAONE_MOE, TOK_SPLIT_ISOLATED, false}}, false, false},
    {"minicpm5", {{"\\p{N}{1,3}", TOK_SPLIT_ISOLATED, false}, {RE_MINICPM5, TOK_SPLIT_ISOLATED, false}}, true, false},
    {"laguna", {{"[^\\n]+|[\\n]+", TOK_SPLIT_ISOLATED, false}, {RE_QWEN2, TOK_SPLIT_ISOLATED, false}}, false, false},
    /* Punctuation(contiguous) + ByteLevel(use_regex) + Digits + Split("[0-9][0-9][0-9]") */
    {"falcon",
     {{TOK_RE_PUNCT, TOK_SPLIT_CONTIGUOUS, false},
      {TOK_RE_GPT2, TOK_SPLIT_ISOLATED, false},
      {"\\p{N}", TOK_SPLIT_CONTIGUOUS, true},
      {"[0-9][0-9][0-9]", TOK_SPLIT_ISOLATED, true}},
     false, false},
    {"default",
     {{RE_DEFAULT_PUNCT, TOK_SPLIT_ISOLATED, false},
      {RE_DEFAULT_WORDS, TOK_SPLIT_ISOLATED, false},
      {"\\p{N}+", TOK_SPLIT_ISOLATED, false},
      {"[0-9][0-9][0-9]", TOK_SPLIT_ISOLATED, false}},
     false, false},
};

static bool name_in(const char *names, const char *name) {
    size_t n = strlen(name);
    for (const char *p = names; *p;) {
        const char *sp = strchr(p, ' ');
        size_t len = sp ? (size_t)(sp - p) : strlen(p);
        if (len == n && memcmp(p, name, n) == 0) return true;
        if (!sp) break;
        p = sp + 1;
    }
    return false;
}

int tok_pre_from_gguf(tok_tokenizer *t, const char *name, bool *add_bos, pdl_error *err) {
    for (size_t i = 0; i < sizeof PRE_DEFS / sizeof PRE_DEFS[0]; i++) {
        const pre_def *d = &PRE_DEFS[i];
        if (!name_in(d->names, name)) continue;
        for (int k = 0; k < 6 && d->steps[k].re; k++)
            if (tok_pre_add_split(t, d->steps[k].re, strlen(d->steps[k].re), false, d->steps[k].behavior,
                                  false, d->steps[k].mapped, err) != 0)
                return -1;
        t->ignore_merges = d->ignore_merges;
        *add_bos = d->add_bos;
        return 0;
    }
    /* llama.cpp's names whose tokenizers are not byte-level BPE over regex
     * splits (raw UTF-8 with U+2581 spaces, or hand-written splitters) */
    if (name_in("gemma4 granite-embed-multi-311m sarvam-moe whitespace afmoe", name))
        return err_fail(err, "tokenizer.ggml.pre \"%s\" is not supported yet (not a byte-level regex pre-tokenizer)",
                        name);
    return err_fail(err, "tokenizer.ggml.pre \"%s\" is not a known pre-tokenizer", name);
}

/* ---------------------------------------------------------------------------
 * Compiling
 * ------------------------------------------------------------------------- */

/* Unicode White_Space, Oniguruma's \s. */
#define WS_CLASS_BODY "\\t-\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"

/* Rewrites \s / \S as described at the top; *out is malloc'ed. */
static char *rewrite_spaces(const char *p, size_t n, size_t *out_len) {
    size_t cap = n * 4 + 256, w = 0;
    char *out = malloc(cap);
    if (!out) return NULL;
    bool in_class = false;
    for (size_t i = 0; i < n; i++) {
        if (w + 128 > cap) {
            cap *= 2;
            char *o = realloc(out, cap);
            if (!o) {
                free(out);
                return NULL;
            }
            out = o;
        }
        char ch = p[i];
        if (ch == '\\' && i + 1 < n) {
            char nx = p[i + 1];
            const char *rep = NULL;
            if (nx == 's') rep = in_class ? WS_CLASS_BODY : "[" WS_CLASS_BODY "]";
            else if (nx == 'S' && !in_class) rep = "[^" WS_CLASS_BODY "]";
            if (rep) {
                size_t rl = strlen(rep);
                memcpy(out + w, rep, rl);
                w += rl;
            } else {
                out[w++] = ch;
                out[w++] = nx;
            }
            i++;
            continue;
        }
        if (!in_class && ch == '[') {
            in_class = true;
            out[w++] = ch;
            /* a ']' right after '[' or '[^' is a literal */
            if (i + 1 < n && p[i + 1] == '^') out[w++] = p[++i];
            if (i + 1 < n && p[i + 1] == ']') out[w++] = p[++i];
            continue;
        }
        if (in_class && ch == '[' && i + 1 < n && p[i + 1] == ':') {
            /* POSIX class [:alpha:] inside a class */
            const char *end = strstr(p + i, ":]");
            if (end && (size_t)(end - p) < n) {
                size_t l = (size_t)(end - (p + i)) + 2;
                memcpy(out + w, p + i, l);
                w += l;
                i += l - 1;
                continue;
            }
        }
        if (in_class && ch == ']') in_class = false;
        out[w++] = ch;
    }
    *out_len = w;
    return out;
}

int tok_pre_add_split(tok_tokenizer *t, const char *pattern, size_t len, bool literal,
                      tok_split_behavior behavior, bool invert, bool mapped, pdl_error *err) {
    if (t->n_pre == TOK_MAX_PRE_STEPS)
        return err_fail(err, "tokenizer: more than %d pre-tokenizer steps", TOK_MAX_PRE_STEPS);
    char *src = NULL;
    size_t src_len = len;
    uint32_t opts = PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF;
    if (literal) {
        opts |= PCRE2_LITERAL;
    } else {
        src = rewrite_spaces(pattern, len, &src_len);
        if (!src) return err_fail(err, "tokenizer: out of memory compiling a regex");
    }
    int ecode;
    PCRE2_SIZE eoff;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)(literal ? pattern : src), src_len, opts, &ecode, &eoff, NULL);
    free(src);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(ecode, msg, sizeof msg);
        return err_fail(err, "pre-tokenizer regex \"%.*s\": %s", (int)len, pattern, (const char *)msg);
    }
    tok_pre_step *s = &t->pre[t->n_pre++];
    *s = (tok_pre_step){.re = re, .behavior = (uint8_t)behavior, .invert = invert, .mapped = mapped};
    s->jit = pcre2_jit_compile(re, PCRE2_JIT_COMPLETE) == 0;
    return 0;
}

int tok_pre_add_prefix_space(tok_tokenizer *t, pdl_error *err) {
    if (t->n_pre == TOK_MAX_PRE_STEPS)
        return err_fail(err, "tokenizer: more than %d pre-tokenizer steps", TOK_MAX_PRE_STEPS);
    t->pre[t->n_pre++] = (tok_pre_step){.re = NULL};
    return 0;
}

void tok_pre_free(tok_tokenizer *t) {
    for (int i = 0; i < t->n_pre; i++)
        if (t->pre[i].re) pcre2_code_free(t->pre[i].re);
    t->n_pre = 0;
}

/* ---------------------------------------------------------------------------
 * Running
 * ------------------------------------------------------------------------- */

static int run_step(tok_ctx *c, int k, const char *s, size_t n);

static int emit(tok_ctx *c, int k, const char *s, size_t n) {
    if (n == 0) return 0;
    return k + 1 < c->t->n_pre ? run_step(c, k + 1, s, n) : tok_bpe_word(c, s, n);
}

/* The next match at or after *off in s[0..n): 1 and its bounds, 0 when none. */
static int next_match(tok_ctx *c, const tok_pre_step *st, const char *s, size_t n, size_t off,
                      size_t *ms, size_t *me) {
    int rc = st->jit ? pcre2_jit_match(st->re, (PCRE2_SPTR)s, n, off, 0, c->md, NULL)
                     : pcre2_match(st->re, (PCRE2_SPTR)s, n, off, 0, c->md, NULL);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT)  /* the interpreter keeps its frames on the heap */
        rc = pcre2_match(st->re, (PCRE2_SPTR)s, n, off, PCRE2_NO_JIT, c->md, NULL);
    if (rc == PCRE2_ERROR_NOMATCH) return 0;
    if (rc < 0) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(rc, msg, sizeof msg);
        return err_fail(c->err, "tokenizer: pre-tokenizer regex failed: %s", (const char *)msg);
    }
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(c->md);
    *ms = ov[0];
    *me = ov[1];
    return 1;
}

/* Length of the character (or invalid byte) at s[i]. */
static size_t step_over(const char *s, size_t i, size_t n) {
    size_t cl = tok_utf8_char_len((const uint8_t *)s + i, n - i);
    return cl ? cl : 1;
}

/* Collects the match/gap list of s[0..n) into c->spans[k]. */
static int collect(tok_ctx *c, int k, const tok_pre_step *st, const char *s, size_t n, size_t *count) {
    size_t m = 0, prev = 0, off = 0;
    for (;;) {
        if (m + 2 > c->spans_cap[k]) {
            size_t cap = c->spans_cap[k] ? c->spans_cap[k] * 2 : 64;
            tok_span *p = realloc(c->spans[k], cap * sizeof *p);
            if (!p) return err_fail(c->err, "tokenizer: out of memory");
            c->spans[k] = p;
            c->spans_cap[k] = cap;
        }
        size_t ms, me;
        int got = off <= n ? next_match(c, st, s, n, off, &ms, &me) : 0;
        if (got < 0) return -1;
        if (!got) break;
        if (prev < ms) c->spans[k][m++] = (tok_span){(uint32_t)prev, (uint32_t)ms, false};
        c->spans[k][m++] = (tok_span){(uint32_t)ms, (uint32_t)me, true};
        prev = me;
        off = me > ms ? me : me + (me < n ? step_over(s, me, n) : 1);
    }
    if (prev < n) {
        if (m + 1 > c->spans_cap[k]) {
            tok_span *p = realloc(c->spans[k], (m + 1) * sizeof *p);
            if (!p) return err_fail(c->err, "tokenizer: out of memory");
            c->spans[k] = p;
            c->spans_cap[k] = m + 1;
        }
        c->spans[k][m++] = (tok_span){(uint32_t)prev, (uint32_t)n, false};
    }
    if (st->invert)
        for (size_t i = 0; i < m; i++) c->spans[k][i].match = !c->spans[k][i].match;
    *count = m;
    return 0;
}

/* Applies the behaviour to the span list in place (HF's split folds). */
static size_t apply_behavior(tok_span *sp, size_t m, tok_split_behavior b) {
    size_t w = 0;
    bool prev_match = false;
    switch (b) {
    case TOK_SPLIT_ISOLATED:
        return m;
    case TOK_SPLIT_REMOVED:
        for (size_t i = 0; i < m; i++)
            if (!sp[i].match) sp[w++] = sp[i];
        return w;
    case TOK_SPLIT_MERGED_PREV:
        for (size_t i = 0; i < m; i++) {
            if (sp[i].match && !prev_match && w > 0)
                sp[w - 1].end = sp[i].end;
            else
                sp[w++] = sp[i];
            prev_match = sp[i].match;
        }
        return w;
    case TOK_SPLIT_MERGED_NEXT: {
        /* right to left: a match joins the piece after it */
        size_t r = m;
        for (size_t i = m; i-- > 0;) {
            if (sp[i].match && !prev_match && r < m)
                sp[r].start = sp[i].start;
            else
                sp[--r] = sp[i];
            prev_match = sp[i].match;
        }
        memmove(sp, sp + r, (m - r) * sizeof *sp);
        return m - r;
    }
    case TOK_SPLIT_CONTIGUOUS:
        for (size_t i = 0; i < m; i++) {
            if (sp[i].match == prev_match && w > 0)
                sp[w - 1].end = sp[i].end;
            else
                sp[w++] = sp[i];
            prev_match = sp[i].match;
        }
        return w;
    }
    return m;
}

/* Prepares the byte-level form of s[0..n) in step k's buffer; back[m] is the
 * raw offset of mapped offset m. */
static bool map_piece(tok_ctx *c, int k, const char *s, size_t n, const char **mapped, size_t *mn) {
    if (!tok_buf_reserve(&c->step_buf[k], 2 * n + 1)) return false;
    if (2 * n + 1 > c->step_back_cap[k]) {
        uint32_t *b = realloc(c->step_back[k], (2 * n + 1) * sizeof *b);
        if (!b) return false;
        c->step_back[k] = b;
        c->step_back_cap[k] = 2 * n + 1;
    }
    char *out = c->step_buf[k].p;
    uint32_t *back = c->step_back[k];
    size_t w = 0;
    for (size_t i = 0; i < n; i++) {
        size_t l = tok_bl_map(s + i, 1, out + w);
        for (size_t j = 0; j < l; j++) back[w + j] = (uint32_t)i;
        w += l;
    }
    back[w] = (uint32_t)n;
    *mapped = out;
    *mn = w;
    return true;
}

static int run_step(tok_ctx *c, int k, const char *s, size_t n) {
    const tok_pre_step *st = &c->t->pre[k];
    if (!st->re) {
        /* ByteLevel add_prefix_space */
        if (s[0] == ' ') return emit(c, k, s, n);
        if (!tok_buf_reserve(&c->step_buf[k], n + 1)) return err_fail(c->err, "tokenizer: out of memory");
        c->step_buf[k].p[0] = ' ';
        memcpy(c->step_buf[k].p + 1, s, n);
        return emit(c, k, c->step_buf[k].p, n + 1);
    }
    if (st->mapped) {
        const char *ms;
        size_t mn, m;
        if (!map_piece(c, k, s, n, &ms, &mn)) return err_fail(c->err, "tokenizer: out of memory");
        if (collect(c, k, st, ms, mn, &m) != 0) return -1;
        m = apply_behavior(c->spans[k], m, (tok_split_behavior)st->behavior);
        const uint32_t *back = c->step_back[k];
        for (size_t i = 0; i < m; i++) {
            size_t a = back[c->spans[k][i].start], b = back[c->spans[k][i].end];
            if (emit(c, k, s + a, b - a) != 0) return -1;
        }
        return 0;
    }
    if (st->behavior == TOK_SPLIT_ISOLATED && !st->invert) {
        /* the common case, streamed: gap, match, gap, match, ... */
        size_t prev = 0, off = 0;
        while (off <= n) {
            size_t ms, me;
            int got = next_match(c, st, s, n, off, &ms, &me);
            if (got < 0) return -1;
            if (!got) break;
            if (emit(c, k, s + prev, ms - prev) != 0 || emit(c, k, s + ms, me - ms) != 0) return -1;
            prev = me;
            off = me > ms ? me : me + (me < n ? step_over(s, me, n) : 1);
        }
        return emit(c, k, s + prev, n - prev);
    }
    size_t m;
    if (collect(c, k, st, s, n, &m) != 0) return -1;
    m = apply_behavior(c->spans[k], m, (tok_split_behavior)st->behavior);
    for (size_t i = 0; i < m; i++)
        if (emit(c, k, s + c->spans[k][i].start, c->spans[k][i].end - c->spans[k][i].start) != 0)
            return -1;
    return 0;
}

int tok_pre_run(tok_ctx *c, const char *s, size_t n) {
    if (n == 0) return 0;
    if (c->t->n_pre == 0) return tok_bpe_word(c, s, n);
    return run_step(c, 0, s, n);
}
