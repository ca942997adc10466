/*
 * test_tokenizer_bpe.c - byte-level BPE and the features every tokenizer
 * shares: llama.cpp's vectors for every vocabulary, added and special
 * tokens, decode and streaming, invalid UTF-8, random bytes.
 *
 * Encoding matches Hugging Face token for token: every string of every
 * llama.cpp vector file (expected ids are HF encode(text,
 * add_special_tokens=False)) through each ggml-vocab-*.gguf, and the qwen2 /
 * llama-bpe vectors through the real Qwen3 and Llama 3 tokenizer.json.
 * Decoding gives the text back wherever the tokenizer is lossless, one id at
 * a time as well as whole. Special-token text becomes its id only when asked;
 * non-special added tokens always do; lstrip / rstrip / single_word behave as
 * in HF's AddedVocabulary. Random bytes (invalid UTF-8 included) never crash
 * and go through the byte-level map.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>

#include <utf8proc.h>

#include "format/gguf.h"
#include "support/gguf_writer.h"
#include "test_util.h"
#include "tok_test.h"
#include "tokenizer/tok_internal.h"
#include "tokenizer/tokenizer.h"
#include "vocab_vectors.h"

static pdl_error g_err;

/* ---------------------------------------------------------------------------
 * Helpers
 * ------------------------------------------------------------------------- */

static tok_tokenizer *load_vocab(const char *name) {
    char rel[256];
    snprintf(rel, sizeof rel, "tokenizers/llama.cpp-vectors/ggml-vocab-%s.gguf", name);
    return tt_load_gguf(rel);
}

static int32_t *encode_ex(const tok_tokenizer *t, const char *s, size_t len, bool add_special,
                          bool parse_special, size_t *n) {
    int32_t *ids = NULL;
    int rc = tok_encode_ex(t, s, len, add_special, parse_special, &ids, n, &g_err);
    REQUIRE_MSG(rc == 0, "%s", g_err.message);
    return ids;
}

static int32_t *encode(const tok_tokenizer *t, const char *s, size_t len, size_t *n) {
    return encode_ex(t, s, len, false, false, n);
}

static char *decode_n(const tok_tokenizer *t, const int32_t *ids, size_t n, bool keep, size_t *len) {
    char *s = tok_decode_ex(t, ids, n, keep, len, &g_err);
    REQUIRE_MSG(s != NULL, "%s", g_err.message);
    return s;
}

static void check_encode(const tok_tokenizer *t, const char *text, bool add_special, bool parse_special,
                         const int32_t *want, size_t n_want) {
    size_t n;
    int32_t *got = encode_ex(t, text, strlen(text), add_special, parse_special, &n);
    CHECK_MSG(tt_ids_equal(got, n, want, n_want), "encode(\"%s\")", text);
    if (!tt_ids_equal(got, n, want, n_want)) {
        tt_print_ids("got ", got, n);
        tt_print_ids("want", want, n_want);
    }
    free(got);
}

/* Whether s[0..n) is valid UTF-8 made of whole characters. */
static bool valid_utf8(const char *s, size_t n) {
    utf8proc_int32_t cp;
    for (size_t i = 0; i < n;) {
        utf8proc_ssize_t l = utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(n - i), &cp);
        if (l <= 0) return false;
        i += (size_t)l;
    }
    return true;
}

/* NFC of valid UTF-8 (malloc'ed). */
static char *nfc(const char *s, size_t n, size_t *out_len) {
    utf8proc_uint8_t *out = NULL;
    utf8proc_ssize_t l = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &out,
                                      UTF8PROC_STABLE | UTF8PROC_COMPOSE);
    REQUIRE(l >= 0);
    *out_len = (size_t)l;
    return (char *)out;
}

/* Pushes ids one at a time and flushes; returns the concatenation. */
static char *stream_all(const tok_tokenizer *t, const int32_t *ids, size_t n, bool keep, size_t *len) {
    tok_stream *s = tok_stream_new_ex(t, keep);
    REQUIRE(s != NULL);
    size_t cap = 64, used = 0;
    char *acc = malloc(cap);
    REQUIRE(acc != NULL);
    for (size_t i = 0; i <= n; i++) {
        const char *piece = i < n ? tok_stream_push(s, ids[i]) : tok_stream_flush(s);
        size_t pl = tok_stream_len(s);
        CHECK_MSG(valid_utf8(piece, pl), "stream piece %zu is not whole UTF-8", i);
        while (used + pl + 1 > cap) {
            cap *= 2;
            acc = realloc(acc, cap);
            REQUIRE(acc != NULL);
        }
        memcpy(acc + used, piece, pl);
        used += pl;
    }
    acc[used] = '\0';
    tok_stream_free(s);
    *len = used;
    return acc;
}

/* The stream (one id at a time) equals the whole decode, with and without
 * special tokens kept. */
static bool stream_matches(const tok_tokenizer *t, const int32_t *ids, size_t n) {
    bool ok = true;
    for (int keep = 0; keep < 2; keep++) {
        size_t wl, sl;
        char *whole = decode_n(t, ids, n, keep, &wl);
        char *streamed = stream_all(t, ids, n, keep, &sl);
        ok = ok && sl == wl && memcmp(whole, streamed, wl) == 0;
        free(whole);
        free(streamed);
    }
    return ok;
}

/* ---------------------------------------------------------------------------
 * llama.cpp's vectors
 * ------------------------------------------------------------------------- */

/* Every vector encodes to its ids, decodes back to its text (NFC'ed when
 * the tokenizer normalizes; SPM tokenizers are checked in
 * test_tokenizer.c), and streams as it decodes. Returns the failures. */
static int check_vectors(const tok_tokenizer *t, const char *vectors, const char *what, bool nfc_text) {
    vocab_vectors v;
    vocab_vectors_load(&v, vectors);
    REQUIRE(v.n >= 40);
    int bad = 0, bad_round = 0, bad_stream = 0;
    for (size_t i = 0; i < v.n; i++) {
        size_t n;
        int32_t *got = encode(t, v.text[i], v.text_len[i], &n);
        if (!tt_ids_equal(got, n, v.ids[i], v.n_ids[i])) {
            fprintf(stderr, "  %s: vector %zu \"%s\" differs\n", what, i, v.text[i]);
            tt_print_ids("got ", got, n);
            tt_print_ids("want", v.ids[i], v.n_ids[i]);
            bad++;
        }
        size_t dl, wl = v.text_len[i];
        char *back = decode_n(t, v.ids[i], v.n_ids[i], false, &dl);
        char *want = nfc_text ? nfc(v.text[i], v.text_len[i], &wl) : NULL;
        if (dl != wl || memcmp(back, want ? want : v.text[i], wl) != 0) {
            fprintf(stderr, "  %s: vector %zu decodes to \"%s\"\n", what, i, back);
            bad_round++;
        }
        if (!stream_matches(t, v.ids[i], v.n_ids[i])) {
            fprintf(stderr, "  %s: vector %zu streams differently\n", what, i);
            bad_stream++;
        }
        free(want);
        free(back);
        free(got);
    }
    CHECK_EQ_INT(bad, 0);
    CHECK_EQ_INT(bad_round, 0);
    CHECK_EQ_INT(bad_stream, 0);
    fprintf(stderr, "  %s: %zu vectors, %d differ, %d do not round-trip\n", what, v.n, bad, bad_round);
    vocab_vectors_free(&v);
    return bad + bad_round + bad_stream;
}

static void test_gpt2_gguf_vectors(void) {
    tok_tokenizer *t = load_vocab("gpt-2");
    CHECK(tok_is_byte_level(t));
    check_vectors(t, "gpt-2", "gpt-2", false);
    tok_free(t);
}

static void test_mpt_gguf_vectors(void) {
    tok_tokenizer *t = load_vocab("mpt");
    check_vectors(t, "mpt", "mpt", false);
    tok_free(t);
}

static void test_falcon_gguf_vectors(void) {
    tok_tokenizer *t = load_vocab("falcon");
    check_vectors(t, "falcon", "falcon", false);
    tok_free(t);
}

static void test_starcoder_gguf_vectors(void) {
    tok_tokenizer *t = load_vocab("starcoder");
    check_vectors(t, "starcoder", "starcoder", false);
    tok_free(t);
}

static void test_phi3_gguf_vectors(void) {
    tok_tokenizer *t = load_vocab("phi-3");
    CHECK(!tok_is_byte_level(t));
    check_vectors(t, "phi-3", "phi-3", false);
    tok_free(t);
}

static void test_llama_spm_gguf_vectors(void) {
    tok_tokenizer *t = load_vocab("llama-spm");
    check_vectors(t, "llama-spm", "llama-spm", false);
    tok_free(t);
}

static void test_qwen2_vectors_through_qwen3_tokenizer_json(void) {
    tok_tokenizer *t = tt_load_hf("tokenizers/qwen3");
    CHECK(tok_is_byte_level(t));
    check_vectors(t, "qwen2", "qwen3 tokenizer.json", true);
    tok_free(t);
}

static void test_llama_bpe_vectors_through_llama3_tokenizer_json(void) {
    tok_tokenizer *t = tt_load_hf("tokenizers/llama3");
    check_vectors(t, "llama-bpe", "llama3 tokenizer.json", false);
    tok_free(t);
}

/* ---------------------------------------------------------------------------
 * The tiny models' tokenizers: GGUF and tokenizer.json agree
 * ------------------------------------------------------------------------- */

static void check_gguf_and_hf_agree(const char *model) {
    char rel[256];
    snprintf(rel, sizeof rel, "models/%s/model-f32.gguf", model);
    tok_tokenizer *g = tt_load_gguf(rel);
    snprintf(rel, sizeof rel, "models/%s/hf", model);
    tok_tokenizer *h = tt_load_hf(rel);
    CHECK(tok_is_byte_level(g) && tok_is_byte_level(h));
    CHECK_EQ_INT(tok_add_bos(g), tok_add_bos(h));
    if (tok_add_bos(g)) CHECK_EQ_INT(tok_bos_id(g), tok_bos_id(h));
    vocab_vectors v;
    vocab_vectors_load(&v, "qwen2");
    int differ = 0;
    for (size_t i = 0; i < v.n; i++) {
        for (int special = 0; special < 2; special++) {
            size_t na, nb;
            int32_t *a = encode_ex(g, v.text[i], v.text_len[i], special, false, &na);
            int32_t *b = encode_ex(h, v.text[i], v.text_len[i], special, false, &nb);
            if (!tt_ids_equal(a, na, b, nb)) {
                fprintf(stderr, "  %s: vector %zu \"%s\" differs\n", model, i, v.text[i]);
                tt_print_ids("gguf", a, na);
                tt_print_ids("hf  ", b, nb);
                differ++;
            }
            size_t la, lb;
            char *da = decode_n(g, a, na, false, &la), *db = decode_n(h, b, nb, false, &lb);
            CHECK(la == lb && memcmp(da, db, la) == 0);
            CHECK_MSG(la == v.text_len[i] && memcmp(da, v.text[i], la) == 0, "%s: vector %zu round trip",
                      model, i);
            free(da), free(db), free(a), free(b);
        }
    }
    CHECK_EQ_INT(differ, 0);
    vocab_vectors_free(&v);
    tok_free(g);
    tok_free(h);
}

static void test_qwen3_tiny_gguf_and_hf_agree(void) { check_gguf_and_hf_agree("qwen3-tiny"); }
static void test_llama31_tiny_gguf_and_hf_agree(void) { check_gguf_and_hf_agree("llama31-tiny"); }
static void test_qwen2_tiny_gguf_and_hf_agree(void) { check_gguf_and_hf_agree("qwen2-tiny"); }
static void test_granite_tiny_gguf_and_hf_agree(void) { check_gguf_and_hf_agree("granite-tiny"); }
static void test_cohere_tiny_gguf_and_hf_agree(void) { check_gguf_and_hf_agree("cohere-tiny"); }

/* ---------------------------------------------------------------------------
 * Special and added tokens
 * ------------------------------------------------------------------------- */

/* Qwen3: "<|im_start|>" is its id only with parse_special; "<think>"
 * (a non-special added token) always is. */
static void test_qwen3_parse_special(void) {
    tok_tokenizer *t = tt_load_hf("tokenizers/qwen3");
    static const int32_t parsed[] = {151644, 872};
    check_encode(t, "<|im_start|>user", false, true, parsed, 2);
    size_t n;
    int32_t *ids = encode_ex(t, "<|im_start|>user", 16, false, false, &n);
    CHECK(n > 2);
    for (size_t i = 0; i < n; i++) CHECK(ids[i] < 151643);
    char *back = decode_n(t, ids, n, false, NULL);
    CHECK(strcmp(back, "<|im_start|>user") == 0);
    free(back);
    free(ids);
    /* non-special added tokens: matched either way */
    static const int32_t think[] = {151667, 6023, 151668};
    check_encode(t, "<think>hi</think>", false, false, think, 3);
    check_encode(t, "<think>hi</think>", false, true, think, 3);
    /* a chat turn */
    static const int32_t turn[] = {151644, 872, 198, 9707, 151645, 198};
    check_encode(t, "<|im_start|>user\nHello<|im_end|>\n", false, true, turn, 6);
    /* Qwen3 adds nothing with add_special */
    CHECK(!tok_add_bos(t) && !tok_add_eos(t));
    check_encode(t, "<|im_start|>user", true, true, parsed, 2);
    tok_free(t);
}

/* Decode skips special tokens by default and keeps them when asked; the
 * stream does the same. */
static void test_decode_keeps_special_tokens_when_asked(void) {
    tok_tokenizer *t = tt_load_hf("tokenizers/qwen3");
    static const int32_t turn[] = {151644, 872, 198, 9707, 151645, 198};
    char *a = decode_n(t, turn, 6, false, NULL), *b = decode_n(t, turn, 6, true, NULL);
    CHECK(strcmp(a, "user\nHello\n") == 0);
    CHECK(strcmp(b, "<|im_start|>user\nHello<|im_end|>\n") == 0);
    CHECK(stream_matches(t, turn, 6));
    CHECK(tok_is_control(t, 151644));
    CHECK(!tok_is_control(t, 151667));
    free(a), free(b);
    tok_free(t);
}

/* Llama 3: the special token text with parse_special; this tokenizer.json's
 * post-processor is ByteLevel alone, so HF encode(text) adds no BOS either. */
static void test_llama3_parse_special_and_no_bos(void) {
    tok_tokenizer *t = tt_load_hf("tokenizers/llama3");
    static const int32_t want[] = {128000, 9906};
    check_encode(t, "<|begin_of_text|>Hello", false, true, want, 2);
    CHECK(!tok_add_bos(t));
    CHECK_EQ_INT(tok_bos_id(t), 128000);
    check_encode(t, "Hello", true, false, want + 1, 1);
    tok_free(t);
}

/* llama31-tiny: BOS from GGUF add_bos_token and from the HF template. */
static void test_bos_added_as_the_tokenizer_says(void) {
    tok_tokenizer *g = tt_load_gguf("models/llama31-tiny/model-f32.gguf");
    tok_tokenizer *h = tt_load_hf("models/llama31-tiny/hf");
    size_t na, nb;
    int32_t *a = encode_ex(g, "Hi", 2, true, false, &na);
    int32_t *b = encode_ex(h, "Hi", 2, true, false, &nb);
    CHECK(na >= 2 && a[0] == tok_bos_id(g));
    CHECK(tt_ids_equal(a, na, b, nb));
    free(a), free(b);
    /* empty text: BOS only */
    a = encode_ex(g, "", 0, true, false, &na);
    CHECK(na == 1 && a[0] == tok_bos_id(g));
    free(a);
    tok_free(g);
    tok_free(h);
}

/* Phi-3 (GGUF, SPM): special tokens carry rstrip as llama.cpp sets it by
 * model name (HF's Phi-3 tokenizer.json has rstrip on them); "</s>" is
 * user-defined there and always matched. */
static void test_phi3_special_tokens_rstrip(void) {
    tok_tokenizer *t = load_vocab("phi-3");
    static const int32_t user[] = {32010, 15043};
    check_encode(t, "<|user|>\nHello", false, true, user, 2);
    static const int32_t eos_text[] = {15043, 2};
    check_encode(t, "Hello</s>", false, false, eos_text, 2);
    tok_free(t);
}

/* A small byte-level tokenizer.json with added tokens of every flag. */
static const char FLAGS_JSON[] =
    "{\"version\": \"1.0\",\n"
    " \"added_tokens\": [\n"
    "  {\"id\": 17, \"content\": \"<sp>\", \"special\": true, \"lstrip\": false, \"rstrip\": false,"
    "   \"normalized\": false, \"single_word\": false},\n"
    "  {\"id\": 18, \"content\": \"[L]\", \"special\": false, \"lstrip\": true, \"rstrip\": false,"
    "   \"normalized\": false, \"single_word\": false},\n"
    "  {\"id\": 19, \"content\": \"[R]\", \"special\": false, \"lstrip\": false, \"rstrip\": true,"
    "   \"normalized\": false, \"single_word\": false},\n"
    "  {\"id\": 20, \"content\": \"cat\", \"special\": false, \"lstrip\": false, \"rstrip\": false,"
    "   \"normalized\": false, \"single_word\": true},\n"
    "  {\"id\": 21, \"content\": \"Ab\", \"special\": false, \"lstrip\": false, \"rstrip\": false,"
    "   \"normalized\": true, \"single_word\": false}],\n"
    " \"normalizer\": {\"type\": \"NFKC\"},\n"
    " \"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true,"
    "  \"use_regex\": true},\n"
    " \"post_processor\": {\"type\": \"ByteLevel\"},\n"
    " \"decoder\": {\"type\": \"ByteLevel\"},\n"
    " \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"c\": 2, \"\\u0120\": 3, \"ab\": 4,"
    "  \"\\u0120a\": 5, \"\\u0120ab\": 6, \"<\": 7, \">\": 8, \"s\": 9, \"p\": 10, \"[\": 11, \"]\": 12,"
    "  \"L\": 13, \"R\": 14, \"t\": 15, \"\\u010a\": 16},\n"
    "  \"merges\": [\"a b\", \"\\u0120 a\", \"\\u0120a b\"]}}\n";

static tok_tokenizer *load_json_text(const char *name, const char *json) {
    char *dir = test_make_dir(name);
    char *p = test_join(dir, "tokenizer.json");
    test_write_file(p, json, strlen(json));
    tok_tokenizer *t = NULL;
    int rc = tok_load_hf_dir(&t, dir, &g_err);
    free(p);
    free(dir);
    REQUIRE_MSG(rc == 0, "%s", g_err.message);
    return t;
}

static void test_added_token_flags_as_hf(void) {
    tok_tokenizer *t = load_json_text("flags", FLAGS_JSON);
    /* merges in rank order: "a b" before "Ġ a", so " ab" is Ġ + ab */
    static const int32_t sp_parsed[] = {4, 17, 4};
    check_encode(t, "ab<sp>ab", false, true, sp_parsed, 3);
    static const int32_t sp_text[] = {4, 7, 9, 10, 8, 4};
    check_encode(t, "ab<sp>ab", false, false, sp_text, 6);
    static const int32_t space_ab[] = {3, 4};
    check_encode(t, " ab", false, false, space_ab, 2);
    /* lstrip swallows the spaces on the left, rstrip those on the right */
    static const int32_t l[] = {0, 18, 1};
    check_encode(t, "a  [L]b", false, false, l, 3);
    static const int32_t r[] = {0, 19, 1};
    check_encode(t, "a[R] \n b", false, false, r, 3);
    /* single_word: not next to a letter or digit */
    static const int32_t word[] = {0, 3, 20, 3, 1};
    check_encode(t, "a cat b", false, false, word, 5);
    static const int32_t inside[] = {0, 2, 0, 15, 3, 1};
    check_encode(t, "acat b", false, false, inside, 6);
    static const int32_t before[] = {0, 3, 2, 0, 15, 1};
    check_encode(t, "a catb", false, false, before, 6);
    /* normalized=true: matched after NFKC ("Ａb" -> "Ab") */
    static const int32_t ab[] = {21};
    check_encode(t, "\xef\xbc\xa1" "b", false, false, ab, 1);
    char *s = decode_n(t, ab, 1, false, NULL);
    CHECK(strcmp(s, "Ab") == 0);
    free(s);
    tok_free(t);
}

/* ---------------------------------------------------------------------------
 * Invalid UTF-8, partial characters, streaming
 * ------------------------------------------------------------------------- */

/* Invalid bytes go through the byte-level map like any byte ("\xff" is the
 * piece "ÿ") and decode to U+FFFD; nothing is lost around them. */
static void test_invalid_utf8_goes_through_byte_map(void) {
    tok_tokenizer *t = tt_load_hf("tokenizers/qwen3");
    int32_t y = tok_piece_to_id(t, "\xc3\xbf", 2);
    REQUIRE(y >= 0);
    check_encode(t, "\xff", false, false, &y, 1);
    size_t n, len;
    int32_t *ids = encode(t, "ab\xff" "cd \xe4\xb8", 7, &n);
    char *back = decode_n(t, ids, n, false, &len);
    CHECK(len == 11 && memcmp(back, "ab\xef\xbf\xbd" "cd \xef\xbf\xbd", 11) == 0);
    CHECK(stream_matches(t, ids, n));
    free(back);
    free(ids);
    tok_free(t);
}

/* A character split over byte-level tokens comes out of the stream whole,
 * with the token that completes it. */
static void test_stream_holds_partial_characters(void) {
    tok_tokenizer *t = load_vocab("gpt-2");
    size_t n;
    int32_t *ids = encode(t, "\xf0\x9f\xa6\x99", 4, &n); /* 🦙 */
    REQUIRE(n >= 2);
    tok_stream *s = tok_stream_new(t);
    REQUIRE(s != NULL);
    for (size_t i = 0; i + 1 < n; i++) CHECK(strcmp(tok_stream_push(s, ids[i]), "") == 0);
    CHECK(strcmp(tok_stream_push(s, ids[n - 1]), "\xf0\x9f\xa6\x99") == 0);
    CHECK(strcmp(tok_stream_flush(s), "") == 0);
    tok_stream_free(s);
    /* cut short: the flush gives U+FFFD */
    s = tok_stream_new(t);
    CHECK(strcmp(tok_stream_push(s, ids[0]), "") == 0);
    CHECK(strcmp(tok_stream_flush(s), "\xef\xbf\xbd") == 0);
    tok_stream_free(s);
    free(ids);
    tok_free(t);
}

/* ---------------------------------------------------------------------------
 * Merge paths and the word memo
 * ------------------------------------------------------------------------- */

static uint64_t rng_next(uint64_t *s) {
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

/* Long words merge on a heap, short ones by rescanning: same result. */
static void test_long_and_short_merge_paths_agree(void) {
    tok_tokenizer *t = tt_load_hf("tokenizers/qwen3");
    static const char letters[] = "etaoinshrdlucmfwypvbgkqjxz  ";
    uint64_t seed = 12345;
    int32_t a[200], b[200];
    int differ = 0;
    for (int iter = 0; iter < 300; iter++) {
        size_t n = 2 + rng_next(&seed) % 150;
        for (size_t i = 0; i < n; i++) {
            char ch = letters[rng_next(&seed) % (sizeof letters - 1)];
            a[i] = t->bl_byte_id[(uint8_t)ch];
        }
        memcpy(b, a, n * sizeof *a);
        tok_ctx c = {.t = t, .err = &g_err};
        long na = tok_bpe_merge(&c, a, n, 1), nb = tok_bpe_merge(&c, b, n, 2);
        REQUIRE(na > 0 && nb > 0);
        if (!tt_ids_equal(a, (size_t)na, b, (size_t)nb)) differ++;
        tok_bpe_ctx_free(&c);
    }
    CHECK_EQ_INT(differ, 0);
    tok_free(t);
}

/* A long text (memoized words, memo resets included) encodes as its lines do
 * one by one: lines end in "\n" and start with a letter, so no word crosses. */
static void test_word_memo_changes_nothing(void) {
    tok_tokenizer *t = load_vocab("gpt-2");
    uint64_t seed = 99;
    size_t cap = 1 << 17, len = 0;
    char *text = malloc(cap);
    REQUIRE(text != NULL);
    int32_t *want = malloc(cap * sizeof *want);
    REQUIRE(want != NULL);
    size_t n_want = 0;
    while (len + 200 < cap) {
        char line[200];
        size_t l = 0;
        int words = 1 + (int)(rng_next(&seed) % 8);
        for (int w = 0; w < words; w++) {
            if (w) line[l++] = ' ';
            /* half the words from a small set (memo hits), half random */
            uint64_t r = rng_next(&seed);
            int wl = 1 + (int)(r % 9);
            for (int k = 0; k < wl; k++)
                line[l++] = (char)('a' + (r & 1 ? (int)(rng_next(&seed) % 26) : (k * 7 + (int)(r % 5)) % 26));
        }
        line[l++] = '\n';
        size_t n;
        int32_t *ids = encode(t, line, l, &n);
        memcpy(want + n_want, ids, n * sizeof *ids);
        n_want += n;
        free(ids);
        memcpy(text + len, line, l);
        len += l;
    }
    size_t n;
    int32_t *got = encode(t, text, len, &n);
    CHECK(tt_ids_equal(got, n, want, n_want));
    free(got);
    free(want);
    free(text);
    tok_free(t);
}

/* Very long runs (spaces, one letter, digits) take the heap path and round-trip. */
static void test_long_runs(void) {
    tok_tokenizer *ts[] = {tt_load_hf("tokenizers/qwen3"), load_vocab("gpt-2"), tt_load_hf("tokenizers/llama3")};
    size_t len = 100000;
    char *text = malloc(len + 1);
    REQUIRE(text != NULL);
    const char fill[] = {' ', 'a', '7', '\n', '!'};
    for (int k = 0; k < 3; k++) {
        for (size_t f = 0; f < sizeof fill; f++) {
            memset(text, fill[f], len);
            size_t n, bl;
            int32_t *ids = encode(ts[k], text, len, &n);
            char *back = decode_n(ts[k], ids, n, false, &bl);
            CHECK_MSG(bl == len && memcmp(back, text, len) == 0, "run of '%c' with tokenizer %d", fill[f], k);
            free(back);
            free(ids);
        }
        tok_free(ts[k]);
    }
    free(text);
}

/* ---------------------------------------------------------------------------
 * Random bytes
 * ------------------------------------------------------------------------- */

/* Whether the vocabulary has a piece for every byte of s (Falcon's lacks
 * some control bytes, which HF then drops, as we do). */
static bool has_all_bytes(const tok_tokenizer *t, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (t->bl_byte_id[(uint8_t)s[i]] < 0) return false;
    return true;
}

/* 1500 random strings per tokenizer (fragments of text, special-token text,
 * combining marks, invalid bytes): encode and decode never fail, ids are in
 * range, decoded text is valid UTF-8, valid input round-trips (after NFC for
 * Qwen3; when the vocabulary covers its bytes) with and without
 * parse_special (then keeping special tokens), and the stream equals the
 * decode. */
static void test_random_bytes_byte_level(void) {
    struct {
        tok_tokenizer *t;
        bool nfc;
    } ts[] = {{tt_load_hf("tokenizers/qwen3"), true},  {tt_load_hf("tokenizers/llama3"), false},
              {load_vocab("gpt-2"), false},          {load_vocab("falcon"), false},
              {load_vocab("mpt"), false},            {load_vocab("starcoder"), false}};
    static const char *frag[] = {" ", "a", "the", "The", "\n", "\t", "  ", "    ", "3", "123", "'s", "'LL",
                                 "\xc3\xa9", "e\xcc\x81", "\xe4\xb8\xad", "\xf0\x9f\xa6\x99", "!", "...",
                                 "<|im_start|>", "<|endoftext|>", "<think>", "<|begin_of_text|>", "\xc2\xbd",
                                 "\r\n", "\xe2\x80\x99", "\xd0\xbd\xd0\xb5", ">>"};
    uint64_t seed = 0x9E3779B97F4A7C15ull;
    char buf[256];
    int roundtrips = 0, bad = 0;
    for (int iter = 0; iter < 1500; iter++) {
        size_t len = 0, target = rng_next(&seed) % 120;
        while (len < target) {
            uint64_t r = rng_next(&seed);
            if (r % 5 == 0) {
                buf[len++] = (char)(r >> 8); /* any byte */
            } else {
                const char *f = frag[(r >> 8) % (sizeof frag / sizeof frag[0])];
                size_t fl = strlen(f);
                if (len + fl > sizeof buf) break;
                memcpy(buf + len, f, fl);
                len += fl;
            }
        }
        bool valid = valid_utf8(buf, len);
        for (size_t k = 0; k < sizeof ts / sizeof ts[0]; k++) {
            const tok_tokenizer *t = ts[k].t;
            for (int parse = 0; parse < 2; parse++) {
                size_t n, bl;
                int32_t *ids = encode_ex(t, buf, len, iter & 1, parse, &n);
                for (size_t i = 0; i < n; i++) REQUIRE(ids[i] >= 0 && ids[i] < tok_vocab_size(t));
                size_t skip = (iter & 1) && tok_add_bos(t) ? 1 : 0;
                char *back = decode_n(t, ids + skip, n - skip, parse, &bl);
                CHECK(valid_utf8(back, bl));
                if (valid && has_all_bytes(t, buf, len)) {
                    size_t wl = len;
                    char *want = ts[k].nfc ? nfc(buf, len, &wl) : NULL;
                    if (bl != wl || memcmp(back, want ? want : buf, wl) != 0) {
                        if (bad++ < 5)
                            fprintf(stderr, "  tokenizer %zu, iteration %d (parse %d): no round trip\n", k,
                                    iter, parse);
                    }
                    roundtrips++;
                    free(want);
                }
                if (!stream_matches(t, ids, n)) {
                    if (bad++ < 5) fprintf(stderr, "  tokenizer %zu, iteration %d: stream differs\n", k, iter);
                }
                free(back);
                free(ids);
            }
        }
    }
    CHECK_EQ_INT(bad, 0);
    CHECK(roundtrips > 1000);
    for (size_t k = 0; k < sizeof ts / sizeof ts[0]; k++) tok_free(ts[k].t);
}

/* ---------------------------------------------------------------------------
 * Bad files
 * ------------------------------------------------------------------------- */

/* Writes a small "gpt2" vocabulary and loads it; returns 0 or -1 (g_err). */
static int load_small_gpt2(const char *name, const char *pre, bool with_merges, const char *merge,
                           tok_tokenizer **out) {
    gguf_writer *w = gguf_writer_new(3);
    gguf_writer_add_str(w, "tokenizer.ggml.model", "gpt2");
    if (pre) gguf_writer_add_str(w, "tokenizer.ggml.pre", pre);
    const char *toks[] = {"a", "b", "ab", "\xc4\xa0", "<|endoftext|>"};
    gguf_writer_add_str_arr(w, "tokenizer.ggml.tokens", toks, 5);
    int32_t types[] = {1, 1, 1, 1, 3};
    gguf_writer_add_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, types, 5);
    if (with_merges) gguf_writer_add_str_arr(w, "tokenizer.ggml.merges", &merge, 1);
    gguf_writer_add_u32(w, "tokenizer.ggml.eos_token_id", 4);
    return tt_load_written_gguf(w, name, out, &g_err);
}

static void test_gguf_gpt2_vocabularies(void) {
    tok_tokenizer *t;
    REQUIRE_MSG(load_small_gpt2("gpt2-ok.gguf", "gpt-2", true, "a b", &t) == 0, "%s", g_err.message);
    static const int32_t want[] = {2, 3, 2, 4};
    check_encode(t, "ab ab<|endoftext|>", false, true, want, 4);
    CHECK(!tok_add_bos(t));
    tok_free(t);
    /* no pre key: llama.cpp's "default" */
    REQUIRE_MSG(load_small_gpt2("gpt2-default.gguf", NULL, true, "a b", &t) == 0, "%s", g_err.message);
    tok_free(t);
    CHECK(load_small_gpt2("gpt2-no-merges.gguf", "gpt-2", false, NULL, &t) == -1);
    CHECK_CONTAINS(g_err.message, "tokenizer.ggml.merges");
    CHECK(load_small_gpt2("gpt2-bad-pre.gguf", "no-such-pre", true, "a b", &t) == -1);
    CHECK_CONTAINS(g_err.message, "no-such-pre");
    CHECK(load_small_gpt2("gpt2-bad-merge.gguf", "gpt-2", true, "a c", &t) == -1);
    CHECK_CONTAINS(g_err.message, "merges[0]");
    CHECK(load_small_gpt2("gpt2-merge-no-space.gguf", "gpt-2", true, "ab", &t) == -1);
    CHECK_CONTAINS(g_err.message, "merges[0]");
}

static void test_hf_refuses_unsupported_pre_tokenizer(void) {
    static const char json[] =
        "{\"added_tokens\": [], \"normalizer\": null,\n"
        " \"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [\n"
        "   {\"type\": \"WhitespaceSplit\"}, {\"type\": \"ByteLevel\", \"add_prefix_space\": false}]},\n"
        " \"post_processor\": null, \"decoder\": {\"type\": \"ByteLevel\"},\n"
        " \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}}\n";
    char *dir = test_make_dir("bad-pre");
    char *p = test_join(dir, "tokenizer.json");
    test_write_file(p, json, strlen(json));
    tok_tokenizer *t = NULL;
    CHECK(tok_load_hf_dir(&t, dir, &g_err) == -1);
    CHECK(t == NULL);
    CHECK_CONTAINS(g_err.message, "WhitespaceSplit");
    CHECK_CONTAINS(g_err.message, p);
    free(p);
    free(dir);
}

/* ---------------------------------------------------------------------------
 * The public pdl_tokenizer_* functions
 * ------------------------------------------------------------------------- */

static void test_public_tokenizer_api(void) {
    const char *paths[] = {"tokenizers/qwen3", "models/qwen3-tiny/model-f32.gguf", "models/qwen3-tiny/hf",
                           "tokenizers/llama.cpp-vectors/ggml-vocab-gpt-2.gguf"};
    for (size_t k = 0; k < sizeof paths / sizeof paths[0]; k++) {
        char *p = test_data_path(paths[k]);
        pdl_tokenizer *tok = NULL;
        REQUIRE_MSG(pdl_tokenizer_load(&tok, p, &g_err) == 0, "%s", g_err.message);
        CHECK(pdl_tokenizer_vocab_size(tok) > 1000);
        int32_t *ids = NULL;
        size_t n = 0, len = 0;
        REQUIRE(pdl_tokenizer_encode(tok, "Hello world", 11, PDL_TOK_ADD_SPECIAL, &ids, &n, &g_err) == 0);
        char *text = NULL;
        REQUIRE(pdl_tokenizer_decode(tok, ids, n, 0, &text, &len, &g_err) == 0);
        CHECK(len == 11 && strcmp(text, "Hello world") == 0);
        free(text);
        free(ids);
        pdl_tokenizer_free(tok);
        free(p);
    }
    char *p = test_data_path("tokenizers/qwen3");
    pdl_tokenizer *tok = NULL;
    REQUIRE(pdl_tokenizer_load(&tok, p, &g_err) == 0);
    int32_t *ids = NULL;
    size_t n = 0;
    REQUIRE(pdl_tokenizer_encode(tok, "<|im_end|>", 10, PDL_TOK_PARSE_SPECIAL, &ids, &n, &g_err) == 0);
    CHECK(n == 1 && ids[0] == 151645);
    char *text = NULL;
    REQUIRE(pdl_tokenizer_decode(tok, ids, n, PDL_TOK_KEEP_SPECIAL, &text, NULL, &g_err) == 0);
    CHECK(strcmp(text, "<|im_end|>") == 0);
    free(text);
    int32_t bad = 999999;
    CHECK(pdl_tokenizer_decode(tok, &bad, 1, 0, &text, NULL, &g_err) == -1);
    CHECK(text == NULL);
    CHECK_CONTAINS(g_err.message, "999999");
    free(ids);
    pdl_tokenizer_free(tok);
    free(p);
    tok = (pdl_tokenizer *)&g_err;
    CHECK(pdl_tokenizer_load(&tok, "/nonexistent/tok", &g_err) == -1);
    CHECK(tok == NULL);
    CHECK_CONTAINS(g_err.message, "/nonexistent/tok");
}

int main(void) {
    RUN(test_gpt2_gguf_vectors);
    RUN(test_mpt_gguf_vectors);
    RUN(test_falcon_gguf_vectors);
    RUN(test_starcoder_gguf_vectors);
    RUN(test_phi3_gguf_vectors);
    RUN(test_llama_spm_gguf_vectors);
    RUN(test_qwen2_vectors_through_qwen3_tokenizer_json);
    RUN(test_llama_bpe_vectors_through_llama3_tokenizer_json);
    RUN(test_qwen3_tiny_gguf_and_hf_agree);
    RUN(test_llama31_tiny_gguf_and_hf_agree);
    RUN(test_qwen2_tiny_gguf_and_hf_agree);
    RUN(test_granite_tiny_gguf_and_hf_agree);
    RUN(test_cohere_tiny_gguf_and_hf_agree);
    RUN(test_qwen3_parse_special);
    RUN(test_decode_keeps_special_tokens_when_asked);
    RUN(test_llama3_parse_special_and_no_bos);
    RUN(test_bos_added_as_the_tokenizer_says);
    RUN(test_phi3_special_tokens_rstrip);
    RUN(test_added_token_flags_as_hf);
    RUN(test_invalid_utf8_goes_through_byte_map);
    RUN(test_stream_holds_partial_characters);
    RUN(test_long_and_short_merge_paths_agree);
    RUN(test_word_memo_changes_nothing);
    RUN(test_long_runs);
    RUN(test_random_bytes_byte_level);
    RUN(test_gguf_gpt2_vocabularies);
    RUN(test_hf_refuses_unsupported_pre_tokenizer);
    RUN(test_public_tokenizer_api);
    return test_summary();
}
