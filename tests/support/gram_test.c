/*
 * gram_test.c - the grammar tests' shared helpers (see gram_test.h).
 */
#include "gram_test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"
#include "tokenizer/tokenizer.h"

static bool bit(const uint64_t *b, int32_t i) { return b[i >> 6] >> (i & 63) & 1; }

uint64_t gt_rand(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static struct {
    const char *name, *rel;
    tok_tokenizer *tok;
    gram_vocab *v;
} vocabs[] = {{"qwen3", "tokenizers/qwen3", NULL, NULL},
              {"llama3", "tokenizers/llama3", NULL, NULL},
              {"mistral", "tokenizers/mistral-7b-v0.1", NULL, NULL},
              {"stories", "models/stories260K/stories260K.gguf", NULL, NULL}};

const gram_vocab *gt_vocab(const char *name) {
    for (size_t i = 0; i < sizeof vocabs / sizeof vocabs[0]; i++) {
        if (strcmp(vocabs[i].name, name) != 0) continue;
        if (vocabs[i].v) return vocabs[i].v;
        char *path = test_data_path(vocabs[i].rel);
        pdl_error err;
        int rc = tok_load_path(&vocabs[i].tok, path, &err);
        free(path);
        REQUIRE_MSG(rc == 0, "%s", err.message);
        rc = gram_vocab_from_tokenizer(&vocabs[i].v, vocabs[i].tok, 0, NULL, 0, &err);
        REQUIRE_MSG(rc == 0, "%s", err.message);
        return vocabs[i].v;
    }
    REQUIRE_MSG(false, "unknown vocabulary %s", name);
    return NULL;
}

const struct tok_tokenizer *gt_tokenizer(const char *name) {
    gt_vocab(name);
    for (size_t i = 0; i < sizeof vocabs / sizeof vocabs[0]; i++)
        if (strcmp(vocabs[i].name, name) == 0) return vocabs[i].tok;
    return NULL;
}

gram_vocab *gt_byte_vocab(const char *const *extra, int n) {
    int total = 256 + n + 1;
    const char **bytes = calloc((size_t)total, sizeof *bytes);
    uint32_t *lens = calloc((size_t)total, sizeof *lens);
    static char single[256];
    for (int b = 0; b < 256; b++) {
        single[b] = (char)b;
        bytes[b] = &single[b];
        lens[b] = 1;
    }
    for (int i = 0; i < n; i++) {
        bytes[256 + i] = extra[i];
        lens[256 + i] = (uint32_t)strlen(extra[i]);
    }
    int32_t end = total - 1;
    bytes[end] = "</s>";
    lens[end] = 4;
    gram_vocab *v = NULL;
    pdl_error err;
    int rc = gram_vocab_new(&v, total, bytes, lens, NULL, &end, 1, &err);
    free(bytes);
    free(lens);
    REQUIRE_MSG(rc == 0, "%s", err.message);
    return v;
}

gram_grammar *gt_compile(const gram_vocab *v, gram_kind kind, const char *text) {
    gram_spec spec = {.kind = kind, .text = text};
    gram_grammar *g = NULL;
    pdl_error err;
    int rc = gram_compile(&g, v, &spec, &err);
    REQUIRE_MSG(rc == 0, "compiling %.200s: %s", text ? text : "", err.message);
    return g;
}

const char *gt_compile_error(const gram_vocab *v, gram_kind kind, const char *text) {
    static pdl_error err;
    gram_spec spec = {.kind = kind, .text = text};
    gram_grammar *g = NULL;
    int rc = gram_compile(&g, v, &spec, &err);
    if (rc == 0) {
        gram_grammar_free(g);
        return NULL;
    }
    return err.message;
}

bool gt_accepts(gram_grammar *g, const char *s, size_t n) {
    gram_matcher *m = gram_matcher_new(g);
    REQUIRE(m);
    bool ok = gram_matcher_accept_bytes(m, s, n) && gram_matcher_is_accepting(m);
    gram_matcher_free(m);
    return ok;
}

bool gt_prefix_ok(gram_grammar *g, const char *s, size_t n) {
    gram_matcher *m = gram_matcher_new(g);
    REQUIRE(m);
    bool ok = gram_matcher_accept_bytes(m, s, n);
    gram_matcher_free(m);
    return ok;
}

/* Tokens with JSON or arithmetic punctuation: the ones that can cross a
 * rule's end, where the mask's uncertain tokens live. */
static bool punct_token(const gram_vocab *v, int32_t id) {
    size_t l;
    const char *b = gram_vocab_token(v, id, &l);
    for (size_t i = 0; b && i < l; i++)
        if (memchr("\"{}[],:()+-*/0123456789", b[i], 24)) return true;
    return false;
}

int gt_check_mask(gram_matcher *m, const uint64_t *bits, bool all, uint64_t *rng) {
    const gram_vocab *v = gram_grammar_vocab(gram_matcher_grammar(m));
    int n = gram_vocab_size(v);
    int bad = 0;
    /* every token (small vocabularies), or samples: of the vocabulary, of
     * the allowed tokens, and of tokens with punctuation */
    int32_t *allowed = malloc((size_t)n * sizeof *allowed), *punct = malloc((size_t)n * sizeof *punct);
    int na = 0, np = 0;
    for (int32_t id = 0; id < n; id++) {
        if (bit(bits, id)) allowed[na++] = id;
        if (!all && punct_token(v, id)) punct[np++] = id;
    }
    int count = all ? n : 4500;
    for (int k = 0; k < count; k++) {
        int32_t id = all ? k
                   : (k % 3 == 0 || na == 0) ? (int32_t)(gt_rand(rng) % (uint64_t)n)
                   : (k % 3 == 1 || np == 0) ? allowed[gt_rand(rng) % (uint64_t)na]
                                             : punct[gt_rand(rng) % (uint64_t)np];
        bool ok = gram_matcher_accept_token(m, id);
        if (ok) gram_matcher_rollback(m, 1);
        if (ok != bit(bits, id)) {
            if (bad < 5) fprintf(stderr, "  mask disagrees for token %d: mask %d, accept %d\n", id, bit(bits, id), ok);
            bad++;
        }
    }
    free(allowed);
    free(punct);
    return bad;
}

char *gt_generate(gram_grammar *g, uint64_t seed, int max_steps, int check_every, size_t *len) {
    const gram_vocab *v = gram_grammar_vocab(g);
    int n = gram_vocab_size(v);
    uint64_t *bits = malloc(gram_mask_words(v) * sizeof *bits);
    int32_t *allowed = malloc((size_t)n * sizeof *allowed);
    gram_matcher *m = gram_matcher_new(g);
    REQUIRE(bits && allowed && m);
    size_t cap = 256, w = 0;
    char *out = malloc(cap);
    uint64_t rng = seed * 0x2545F4914F6CDD1DULL + 1;
    bool ended = false;
    for (int step = 0; step < max_steps; step++) {
        REQUIRE(gram_matcher_fill_mask(m, bits) == 0);
        int na = 0, end_bits = 0;
        for (int32_t i = 0; i < n; i++) {
            if (!bit(bits, i)) continue;
            if (gram_vocab_is_end(v, i)) end_bits++;
            else allowed[na++] = i;
        }
        bool accepting = gram_matcher_is_accepting(m);
        CHECK_MSG((end_bits > 0) == accepting, "step %d: end token allowed %d but accepting %d", step, end_bits > 0,
                  accepting);
        if (check_every && step % check_every == 0) {
            int bad = gt_check_mask(m, bits, n <= 4096, &rng);
            CHECK_MSG(bad == 0, "step %d: %d tokens where the mask and acceptance disagree", step, bad);
        }
        REQUIRE_MSG(na > 0 || accepting, "step %d: no token allowed and not accepting (after %.*s)", step, (int)w, out);
        /* early on half the steps take a uniform pick; the others close the
         * text: the token that leaves the fewest bytes to the end, from a
         * sample, or from every allowed token when the sample makes no
         * progress */
        bool finishing = step > 40 || gt_rand(&rng) % 2;
        if (accepting && (na == 0 || (finishing && gt_rand(&rng) % 3 != 0))) {
            ended = true;
            break;
        }
        int32_t pick = allowed[gt_rand(&rng) % (uint64_t)na];
        if (finishing) {
            int cur = gram_matcher_bytes_to_end(m), best = -1;
            for (int k = 0; k < 48; k++) {
                int32_t id = allowed[gt_rand(&rng) % (uint64_t)na];
                REQUIRE(gram_matcher_accept_token(m, id));
                int d = gram_matcher_bytes_to_end(m);
                gram_matcher_rollback(m, 1);
                if (best < 0 || d < best) best = d, pick = id;
            }
            for (int k = 0; best >= cur && k < na; k++) {
                REQUIRE(gram_matcher_accept_token(m, allowed[k]));
                int d = gram_matcher_bytes_to_end(m);
                gram_matcher_rollback(m, 1);
                if (d < best) best = d, pick = allowed[k];
            }
        }
        size_t tl;
        const char *tb = gram_vocab_token(v, pick, &tl);
        REQUIRE_MSG(gram_matcher_accept_token(m, pick), "step %d: token %d is in the mask but rejected", step, pick);
        while (w + tl + 1 > cap) out = realloc(out, cap *= 2);
        memcpy(out + w, tb, tl);
        w += tl;
    }
    REQUIRE_MSG(ended, "no end within %d steps: %.*s", max_steps, (int)w, out);
    out[w] = 0;
    *len = w;
    gram_matcher_free(m);
    free(bits);
    free(allowed);
    return out;
}
