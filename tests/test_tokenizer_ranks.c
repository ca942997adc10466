/*
 * test_tokenizer_ranks.c - merges derived from tiktoken ranks (bpe_ranks.c),
 * for a kimi-k2 GGUF that carries no tokenizer.ggml.merges.
 *
 * The reference is a real vocabulary that came out of tiktoken: Qwen3's
 * byte-level BPE (PAGEDLM_TESTDATA/tokenizers/qwen3, ids = tiktoken ranks,
 * merge i makes token 256 + i). Its shipped merges are what the derivation
 * must give back, pair for pair; and a GGUF with the shipped merges and one
 * without (merges derived at load) must encode a long multilingual text,
 * which also holds the text of every token, to the same ids. Qwen3's tokens
 * are all reachable through lower ranks, so the rules that only matter for
 * tokens that are not (the rank limit, control tokens left out) are checked
 * on a small vocabulary made for them.
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

static int by_rank(const void *a, const void *b) {
    const tok_pair_slot *x = *(const tok_pair_slot *const *)a, *y = *(const tok_pair_slot *const *)b;
    return (x->rank > y->rank) - (x->rank < y->rank);
}

/* The merges of t in rank order, as GGUF's "left right" strings (*n of them). */
static char **merge_strings(const tok_tokenizer *t, size_t *n) {
    size_t count = 0;
    for (uint32_t i = 0; t->merges.slots && i <= t->merges.mask; i++) count += t->merges.slots[i].left >= 0;
    const tok_pair_slot **order = malloc(count * sizeof *order);
    REQUIRE(order);
    count = 0;
    for (uint32_t i = 0; t->merges.slots && i <= t->merges.mask; i++)
        if (t->merges.slots[i].left >= 0) order[count++] = &t->merges.slots[i];
    qsort(order, count, sizeof *order, by_rank);
    char **out = malloc(count * sizeof *out);
    REQUIRE(out);
    for (size_t i = 0; i < count; i++) {
        const char *l = t->pool + t->piece_off[order[i]->left], *r = t->pool + t->piece_off[order[i]->right];
        out[i] = malloc(strlen(l) + strlen(r) + 2);
        REQUIRE(out[i]);
        sprintf(out[i], "%s %s", l, r);
    }
    free(order);
    *n = count;
    return out;
}

/* A kimi-k2 vocabulary-only GGUF of t's pieces and types, with t's merges
 * or (with_merges false) without; returns the loaded tokenizer, or NULL with
 * g_err set. drop_piece >= 0 writes that id's piece as "[DROPPED]". */
static tok_tokenizer *kimi_gguf(const tok_tokenizer *t, const char *pre, bool with_merges, int32_t drop_piece,
                                const char *name) {
    const char **pieces = malloc((size_t)t->n_vocab * sizeof *pieces);
    int32_t *types = malloc((size_t)t->n_vocab * sizeof *types);
    REQUIRE(pieces && types);
    for (int32_t i = 0; i < t->n_vocab; i++) {
        pieces[i] = i == drop_piece ? "[DROPPED]" : t->pool + t->piece_off[i];
        types[i] = t->type[i];
    }
    gguf_writer *gw = gguf_writer_new(3);
    gguf_writer_add_str(gw, "tokenizer.ggml.model", "gpt2");
    gguf_writer_add_str(gw, "tokenizer.ggml.pre", pre);
    gguf_writer_add_str_arr(gw, "tokenizer.ggml.tokens", pieces, (size_t)t->n_vocab);
    gguf_writer_add_arr(gw, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, types, (size_t)t->n_vocab);
    if (with_merges) {
        size_t n = 0;
        char **m = merge_strings(t, &n);
        gguf_writer_add_str_arr(gw, "tokenizer.ggml.merges", (const char *const *)m, n);
        for (size_t i = 0; i < n; i++) free(m[i]);
        free(m);
    }
    tok_tokenizer *out = NULL;
    int rc = tt_load_written_gguf(gw, name, &out, &g_err);
    free(pieces);
    free(types);
    return rc == 0 ? out : NULL;
}

/* Every shipped merge comes back, with the same result and the result's
 * rank as its priority, and no other merge is derived. */
static void test_derived_merges_are_the_shipped_ones(void) {
    tok_tokenizer *hf = tt_load_hf("tokenizers/qwen3");
    tok_tokenizer *derived = kimi_gguf(hf, "kimi-k2", false, -1, "kimi-derived.gguf");
    REQUIRE_MSG(derived, "%s", g_err.message);
    size_t n_shipped = 0, n_derived = 0, missing = 0, wrong = 0;
    for (uint32_t i = 0; i <= hf->merges.mask; i++) {
        const tok_pair_slot *s = &hf->merges.slots[i];
        if (s->left < 0) continue;
        n_shipped++;
        const tok_pair_slot *d = tok_pairmap_get(&derived->merges, s->left, s->right);
        if (!d) {
            if (missing++ < 5)
                fprintf(stderr, "    not derived: \"%s\" + \"%s\"\n", hf->pool + hf->piece_off[s->left],
                        hf->pool + hf->piece_off[s->right]);
        } else if (d->result != s->result || d->rank != s->result) {
            if (wrong++ < 5)
                fprintf(stderr, "    \"%s\" + \"%s\": derived result %d rank %d, shipped result %d\n",
                        hf->pool + hf->piece_off[s->left], hf->pool + hf->piece_off[s->right], d->result, d->rank,
                        s->result);
        }
    }
    for (uint32_t i = 0; i <= derived->merges.mask; i++) n_derived += derived->merges.slots[i].left >= 0;
    CHECK_EQ_INT(n_shipped, 151387);
    CHECK_EQ_INT(n_derived, n_shipped);
    CHECK_EQ_INT(missing, 0);
    CHECK_EQ_INT(wrong, 0);
    tok_free(derived);
    tok_free(hf);
}

/* The llama.cpp vectors' multilingual strings, the pre-tokenizer test text
 * and the text of every normal token (each followed by a space). */
static char *long_text(const tok_tokenizer *t, size_t *len) {
    char *inp_path = test_data_path("tokenizers/llama.cpp-vectors/ggml-vocab-qwen2.gguf.inp");
    size_t inp_len = 0;
    char *inp = test_slurp(inp_path, &inp_len);
    free(inp_path);
    size_t cap = inp_len + sizeof PRETOK_TEXT + t->pool_len + (size_t)t->n_vocab + 1, n = 0;
    char *text = malloc(cap);
    REQUIRE(text);
    memcpy(text + n, inp, inp_len), n += inp_len;
    memcpy(text + n, PRETOK_TEXT, sizeof PRETOK_TEXT - 1), n += sizeof PRETOK_TEXT - 1;
    free(inp);
    for (int32_t i = 0; i < t->n_vocab; i++) {
        if (t->type[i] != TOK_TYPE_NORMAL) continue;
        memcpy(text + n, t->dec_pool + t->dec_off[i], t->dec_len[i]), n += t->dec_len[i];
        text[n++] = ' ';
    }
    text[n] = '\0';
    *len = n;
    return text;
}

/* Shipped and derived merges encode the same text to the same ids. */
static void test_derived_merges_encode_as_the_shipped_ones(void) {
    tok_tokenizer *hf = tt_load_hf("tokenizers/qwen3");
    tok_tokenizer *shipped = kimi_gguf(hf, "kimi-k2", true, -1, "kimi-shipped.gguf");
    REQUIRE_MSG(shipped, "%s", g_err.message);
    tok_tokenizer *derived = kimi_gguf(hf, "kimi-k2", false, -1, "kimi-derived.gguf");
    REQUIRE_MSG(derived, "%s", g_err.message);
    size_t len = 0;
    char *text = long_text(hf, &len);
    int32_t *a = NULL, *b = NULL;
    size_t na = 0, nb = 0;
    REQUIRE_MSG(tok_encode_ex(shipped, text, len, false, false, &a, &na, &g_err) == 0, "%s", g_err.message);
    REQUIRE_MSG(tok_encode_ex(derived, text, len, false, false, &b, &nb, &g_err) == 0, "%s", g_err.message);
    /* the text of every token gives more ids than tokens; far fewer than bytes */
    CHECK_MSG(na > 151000 && na < len / 2, "%zu ids for %zu bytes", na, len);
    size_t first = 0;
    while (first < na && first < nb && a[first] == b[first]) first++;
    CHECK_MSG(na == nb && first == na, "%zu ids with shipped merges, %zu derived; first difference at id %zu", na,
              nb, first);
    free(a);
    free(b);
    free(text);
    tok_free(derived);
    tok_free(shipped);
    tok_free(hf);
}

/* A vocabulary of the 256 bytes (in byte order) and the tokens below, in
 * rank order, whose merges are known by hand. */
static void test_rank_limit_order_and_types(void) {
    static const struct {
        const char *text;
        int32_t type;
    } extra[] = {
        {"ab", TOK_TYPE_NORMAL},   /* 256: a + b */
        {"abc", TOK_TYPE_NORMAL},  /* 257: ab + c */
        {"xyz", TOK_TYPE_NORMAL},  /* 258: none (xy is no token, yz comes later) */
        {"yz", TOK_TYPE_NORMAL},   /* 259: y + z */
        {"bc", TOK_TYPE_NORMAL},   /* 260: b + c */
        {"abcd", TOK_TYPE_NORMAL}, /* 261: abc + d (ab, then abc, not bc) */
        {"xb", TOK_TYPE_NORMAL},   /* 262: x + b */
        {"xbc", TOK_TYPE_NORMAL},  /* 263: x + bc (bc has the lower rank, though xb is to the left) */
        {"pq", TOK_TYPE_CONTROL},  /* 264: a control token, no merge and no part */
        {"pqr", TOK_TYPE_NORMAL},  /* 265: none */
    };
    enum { N_EXTRA = sizeof extra / sizeof extra[0], N = 256 + N_EXTRA };
    static char bytes[256][3];
    const char *pieces[N];
    int32_t types[N];
    for (int b = 0; b < 256; b++) {
        uint32_t cp = tok_bl_cp((uint8_t)b);
        if (cp < 0x80) bytes[b][0] = (char)cp;
        else bytes[b][0] = (char)(0xC0 | (cp >> 6)), bytes[b][1] = (char)(0x80 | (cp & 0x3F));
        pieces[b] = bytes[b];
        types[b] = TOK_TYPE_NORMAL;
    }
    for (int i = 0; i < N_EXTRA; i++) pieces[256 + i] = extra[i].text, types[256 + i] = extra[i].type;
    gguf_writer *gw = gguf_writer_new(3);
    gguf_writer_add_str(gw, "tokenizer.ggml.model", "gpt2");
    gguf_writer_add_str(gw, "tokenizer.ggml.pre", "kimi-k2");
    gguf_writer_add_str_arr(gw, "tokenizer.ggml.tokens", pieces, N);
    gguf_writer_add_arr(gw, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, types, N);
    tok_tokenizer *t = NULL;
    REQUIRE_MSG(tt_load_written_gguf(gw, "kimi-hand.gguf", &t, &g_err) == 0, "%s", g_err.message);
    static const struct {
        const char *left, *right;
        int32_t result;
    } want[] = {{"a", "b", 256}, {"ab", "c", 257}, {"y", "z", 259}, {"b", "c", 260},
                {"abc", "d", 261}, {"x", "b", 262}, {"x", "bc", 263}};
    size_t n_merges = 0;
    for (uint32_t i = 0; i <= t->merges.mask; i++) n_merges += t->merges.slots[i].left >= 0;
    CHECK_EQ_INT(n_merges, sizeof want / sizeof want[0]);
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const tok_pair_slot *m = tok_pairmap_get(&t->merges, tok_piece_to_id(t, want[i].left, strlen(want[i].left)),
                                                 tok_piece_to_id(t, want[i].right, strlen(want[i].right)));
        CHECK_MSG(m && m->result == want[i].result && m->rank == want[i].result, "%s + %s -> %d", want[i].left,
                  want[i].right, want[i].result);
    }
    /* the words "xbc", " xyz", " pqr": xbc is one token, xyz x + yz, pqr
     * its bytes (pq is a control token); a byte's id is its value here */
    int32_t *ids = NULL;
    size_t n = 0;
    REQUIRE(tok_encode_ex(t, "xbc xyz pqr", 11, false, false, &ids, &n, &g_err) == 0);
    const int32_t want_ids[] = {263, ' ', 'x', 259, ' ', 'p', 'q', 'r'};
    CHECK(tt_ids_equal(ids, n, want_ids, 8));
    if (!tt_ids_equal(ids, n, want_ids, 8)) tt_print_ids("got", ids, n);
    free(ids);
    tok_free(t);
}

/* Only kimi-k2 derives merges; a vocabulary it cannot derive them from is
 * refused with the file and the byte. */
static void test_missing_merges_errors(void) {
    tok_tokenizer *hf = tt_load_hf("tokenizers/qwen3");
    CHECK(kimi_gguf(hf, "qwen2", false, -1, "qwen2-no-merges.gguf") == NULL);
    CHECK_CONTAINS(g_err.message, "qwen2-no-merges.gguf");
    CHECK_CONTAINS(g_err.message, "no tokenizer.ggml.merges key");
    /* id 0 is "!" (byte 0x21) */
    CHECK(kimi_gguf(hf, "kimi-k2", false, 0, "kimi-no-byte.gguf") == NULL);
    CHECK_CONTAINS(g_err.message, "kimi-no-byte.gguf");
    CHECK_CONTAINS(g_err.message, "byte 0x21");
    tok_free(hf);
}

int main(void) {
    RUN(test_derived_merges_are_the_shipped_ones);
    RUN(test_derived_merges_encode_as_the_shipped_ones);
    RUN(test_rank_limit_order_and_types);
    RUN(test_missing_merges_errors);
    return test_summary();
}
