/*
 * test_pretok_names.c - every tokenizer.ggml.pre value llama.cpp's
 * llama-vocab.cpp maps: each loads (or, for the few that are not
 * byte-level regex pre-tokenizers, is refused by name), and the ones this
 * project added split text as an independent implementation does.
 *
 * llama.cpp's own vectors for these families need their vocabularies
 * (ggml-vocab-deepseek-llm.gguf, ...), which ../shared does not hold; the
 * names with vocabularies there are checked token for token in
 * test_tokenizer_bpe.c. Here the split itself is checked instead: for each
 * name, scripts/pretok-expected (Python's `regex` module and Hugging Face's
 * Split semantics written out independently) gives the words of one mixed
 * text (tests/pretok_expected.h). The test makes a vocabulary of the bytes,
 * those words and each pair of neighbours joined, looked up whole: the
 * encoding is one token per expected word exactly when the engine cuts the
 * text where the reference does (load_word_vocab).
 */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/gguf.h"
#include "pretok_expected.h"
#include "support/gguf_writer.h"
#include "test_util.h"
#include "tok_test.h"
#include "tokenizer/tok_internal.h"
#include "tokenizer/tokenizer.h"

static pdl_error g_err;

/* ---- a growing list of unique strings ------------------------------------- */

typedef struct strlist {
    char **s;
    size_t n, cap;
} strlist;

static long find(const strlist *l, const char *s) {
    for (size_t i = 0; i < l->n; i++)
        if (strcmp(l->s[i], s) == 0) return (long)i;
    return -1;
}

static void add_unique(strlist *l, const char *s) {
    if (find(l, s) >= 0) return;
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 512;
        l->s = realloc(l->s, l->cap * sizeof *l->s);
    }
    l->s[l->n++] = strdup(s);
}

static void free_list(strlist *l) {
    for (size_t i = 0; i < l->n; i++) free(l->s[i]);
    free(l->s);
}

/* the byte-level form of raw bytes: each byte as GPT-2's code point, UTF-8 */
static char *byte_level(const char *raw) {
    size_t n = strlen(raw);
    char *out = malloc(4 * n + 1), *o = out;
    for (size_t i = 0; i < n; i++) {
        uint32_t cp = tok_bl_cp((uint8_t)raw[i]);
        if (cp < 0x80) *o++ = (char)cp;
        else *o++ = (char)(0xC0 | (cp >> 6)), *o++ = (char)(0x80 | (cp & 0x3F));
    }
    *o = '\0';
    return out;
}

/* A "gpt2" vocabulary for pre-tokenizer `pre` whose tokens are the 256
 * bytes, each of the words and each pair of neighbouring words joined
 * (also as merges); the tokenizer looks each piece up whole (ignore_merges,
 * as llama.cpp's Llama 3 vocabularies do). A piece that is one of the words
 * is its token; a missing cut gives a joined pair (or merges of one), an
 * extra cut a word's pieces: either way not the words' tokens. */
static int load_word_vocab(const char *pre, const char *const *words, tok_tokenizer **out) {
    strlist toks = {0};
    add_unique(&toks, "\xc4\x80"); /* U+0100: GPT-2's code point of byte 0 (strlen cannot carry it) */
    for (int b = 1; b < 256; b++) {
        char raw[2] = {(char)b, 0};
        char *bl = byte_level(raw);
        add_unique(&toks, bl);
        free(bl);
    }
    strlist merges = {0};
    add_unique(&toks, "ab");
    add_unique(&merges, "a b");
    for (size_t w = 0; words[w]; w++) {
        char *bl = byte_level(words[w]);
        add_unique(&toks, bl);
        if (words[w + 1]) { /* two neighbours as one token, and as a merge of the two */
            char *next = byte_level(words[w + 1]), both[2048];
            snprintf(both, sizeof both, "%s%s", bl, next);
            add_unique(&toks, both);
            snprintf(both, sizeof both, "%s %s", bl, next);
            add_unique(&merges, both);
            free(next);
        }
        free(bl);
    }
    add_unique(&toks, "<|endoftext|>");
    gguf_writer *gw = gguf_writer_new(3);
    gguf_writer_add_str(gw, "tokenizer.ggml.model", "gpt2");
    gguf_writer_add_str(gw, "tokenizer.ggml.pre", pre);
    gguf_writer_add_str_arr(gw, "tokenizer.ggml.tokens", (const char *const *)toks.s, toks.n);
    int32_t *types = malloc(toks.n * sizeof *types);
    for (size_t i = 0; i < toks.n; i++) types[i] = i + 1 == toks.n ? 3 : 1;
    gguf_writer_add_arr(gw, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, types, toks.n);
    gguf_writer_add_str_arr(gw, "tokenizer.ggml.merges", (const char *const *)merges.s, merges.n);
    gguf_writer_add_u32(gw, "tokenizer.ggml.eos_token_id", (uint32_t)(toks.n - 1));
    char name[128];
    snprintf(name, sizeof name, "pretok-%s.gguf", pre);
    int rc = tt_load_written_gguf(gw, name, out, &g_err);
    free(types);
    free_list(&toks), free_list(&merges);
    if (rc == 0) (*out)->ignore_merges = true;
    return rc;
}

/* Each added pre-tokenizer cuts PRETOK_TEXT where the reference does. */
static void test_splits_match_the_reference(void) {
    for (size_t i = 0; i < sizeof PRETOK_EXPECTED / sizeof PRETOK_EXPECTED[0]; i++) {
        const struct pretok_expected *e = &PRETOK_EXPECTED[i];
        tok_tokenizer *t = NULL;
        REQUIRE_MSG(load_word_vocab(e->name, e->words, &t) == 0, "%s: %s", e->name, g_err.message);
        int32_t *ids = NULL;
        size_t n = 0;
        REQUIRE_MSG(tok_encode_ex(t, PRETOK_TEXT, strlen(PRETOK_TEXT), false, false, &ids, &n, &g_err) == 0, "%s",
                    g_err.message);
        size_t n_words = 0, bad_at = (size_t)-1;
        while (e->words[n_words]) n_words++;
        for (size_t w = 0; w < n_words && w < n && bad_at == (size_t)-1; w++) {
            char *bl = byte_level(e->words[w]);
            if (ids[w] != tok_piece_to_id(t, bl, strlen(bl))) bad_at = w;
            free(bl);
        }
        if (n != n_words && bad_at == (size_t)-1) bad_at = n < n_words ? n : n_words;
        if (bad_at != (size_t)-1) {
            size_t len = 0;
            char *got = bad_at < n ? tok_decode_ex(t, ids + bad_at, 1, true, &len, &g_err) : NULL;
            CHECK_MSG(false, "%s: %zu tokens for %zu words; first difference at word %zu: want \"%s\", got \"%s\"",
                      e->name, n, n_words, bad_at, bad_at < n_words ? e->words[bad_at] : "(end)",
                      got ? got : "(end)");
            free(got);
        }
        free(ids);
        tok_free(t);
    }
}

/* Every name llama.cpp's llama-vocab.cpp maps to a pre-tokenizer loads; the
 * few that are not byte-level regex splits are refused with the name; an
 * unknown name too. */
static void test_every_llama_cpp_name_loads_or_is_named(void) {
    static const char *const known[] = {
        "default", "llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2",
        "jina-v5-nano", "deepseek-llm", "deepseek-coder", "deepseek-v3", "youtu", "falcon", "mpt", "starcoder",
        "gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de", "a.x-4.0", "mellum",
        "modern-bert", "jais-2", "jina-v1-en", "jina-v2-code", "roberta-bpe", "refact", "command-r", "qwen2",
        "deepseek-r1-qwen", "kormo", "f2llmv2", "qwen35", "stablelm2", "olmo", "dbrx", "smaug-bpe", "poro-chat",
        "glm4", "chatglm-bpe", "viking", "jais", "tekken", "smollm", "codeshell", "bloom", "gpt3-finnish", "exaone",
        "exaone4", "exaone-moe", "chameleon", "minerva-7b", "megrez", "gpt-4o", "llama4", "kanana2", "talkie",
        "granite-embed-multi-97m", "tiny_aya", "cohere2moe", "superbpe", "trillion", "granite-docling", "kimi-k2",
        "bailingmoe", "bailingmoe2", "llada-moe", "seed-coder", "hunyuan", "hunyuan-dense", "joyai-llm", "grok-2",
        "laguna", "minimax-m2", "solar-open", "mellum2", "minicpm5",
    };
    static const char *const words[] = {"ab", NULL};
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
        tok_tokenizer *t = NULL;
        CHECK_MSG(load_word_vocab(known[i], words, &t) == 0, "%s: %s", known[i], g_err.message);
        tok_free(t);
    }
    static const char *const refused[] = {"gemma4", "granite-embed-multi-311m", "sarvam-moe", "whitespace",
                                          "afmoe"};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        tok_tokenizer *t = NULL;
        CHECK(load_word_vocab(refused[i], words, &t) != 0);
        CHECK_CONTAINS(g_err.message, refused[i]);
        CHECK_CONTAINS(g_err.message, "not supported yet");
    }
    tok_tokenizer *t = NULL;
    CHECK(load_word_vocab("no-such-pre", words, &t) != 0);
    CHECK_CONTAINS(g_err.message, "\"no-such-pre\" is not a known pre-tokenizer");
}

int main(void) {
    RUN(test_splits_match_the_reference);
    RUN(test_every_llama_cpp_name_loads_or_is_named);
    return test_summary();
}
