/*
 * structured.c - structured output inside the engine: the model's grammar
 * vocabulary, and masked copies of the rows constrained sequences sample
 * from (structured.h).
 */
#include "engine/structured.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "util/error.h"

int pdl_model_grammar_vocab(const pdl_model *m, gram_vocab **out, pdl_error *err) {
    *out = NULL;
    if (!m->tok)
        return err_fail(err, "structured output needs the model's tokenizer: %s",
                        m->tok_error[0] ? m->tok_error : "none found");
    /* the logits row may be longer than the tokenizer (ids past it are never allowed) */
    return gram_vocab_from_tokenizer(out, m->tok, m->cfg.vocab, m->cfg.eos_ids, m->cfg.n_eos, err);
}

void so_rows_free(so_rows *s) {
    free(s->rows);
    free(s->bits);
    memset(s, 0, sizeof *s);
}

static int so_rows_ready(so_rows *s, int vocab, pdl_error *err) {
    if (s->rows && s->vocab == vocab) return 0;
    so_rows_free(s);
    size_t words = ((size_t)vocab + 63) / 64;
    s->rows = malloc((size_t)(PDL_MAX_SPEC_TOKENS + 1) * (size_t)vocab * sizeof *s->rows);
    s->bits = malloc(words * sizeof *s->bits);
    if (!s->rows || !s->bits) {
        so_rows_free(s);
        return err_fail(err, "structured output: out of memory for masked rows");
    }
    s->vocab = vocab;
    return 0;
}

const float *so_masked_row(so_rows *s, gram_matcher *m, const float *row, int slot, int32_t also, pdl_error *err) {
    const gram_vocab *v = gram_grammar_vocab(gram_matcher_grammar(m));
    if (so_rows_ready(s, gram_vocab_size(v), err)) return NULL;
    if (gram_matcher_fill_mask(m, s->bits) != 0) {
        const char *why = gram_matcher_error(m);
        err_fail(err, "structured output: %s", why ? why : "the token mask could not be computed");
        return NULL;
    }
    if (also >= 0 && also < s->vocab) s->bits[also >> 6] |= 1ull << (also & 63);
    size_t words = gram_mask_words(v);
    bool any = false;
    for (size_t i = 0; i < words && !any; i++) any = s->bits[i] != 0;
    if (!any) {
        err_fail(err, "structured output: no token of the vocabulary can continue the grammar here");
        return NULL;
    }
    float *dst = s->rows + (size_t)slot * (size_t)s->vocab;
    memcpy(dst, row, (size_t)s->vocab * sizeof *dst);
    gram_mask_apply(s->bits, dst, s->vocab);
    return dst;
}

const float *so_forced_row(so_rows *s, int vocab, const float *row, int32_t tok, bool only, int slot,
                           pdl_error *err) {
    if (so_rows_ready(s, vocab, err)) return NULL;
    float *dst = s->rows + (size_t)slot * (size_t)vocab;
    if (only) {
        for (int i = 0; i < vocab; i++) dst[i] = -INFINITY;
        dst[tok] = row[tok];
    } else {
        memcpy(dst, row, (size_t)vocab * sizeof *dst);
        dst[tok] = -INFINITY;
    }
    return dst;
}
