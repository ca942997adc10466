/*
 * model_text.c - the model-level text API: the loaded model's tokenizer
 * behind pdl_tokenize / pdl_detokenize / pdl_detok / pdl_fim_prompt, with
 * the reason when the model came without a usable tokenizer.
 *
 * What it is for: everything that turns a model's text into its ids and
 * back (the CLI, the server, the engine's detokenizer, the vision prompt
 * builder). It lives with the model that owns the tokenizer, not in the
 * engine, so that code below the engine (src/vision) never calls up into
 * src/engine, and the tokenizer never reaches up into the model. What it
 * is not for: a tokenizer loaded on its own, without weights
 * (src/tokenizer/tok_api.c).
 */
#include <stdlib.h>

#include "model/model.h"
#include "util/error.h"

struct pdl_detok {
    tok_stream *stream;
};

bool pdl_model_has_tokenizer(const pdl_model *m) { return m->tok != NULL; }

static int need_tokenizer(const pdl_model *m, pdl_error *err) {
    if (m->tok) return 0;
    return err_fail(err, "this model has no usable tokenizer: %s", m->tok_error[0] ? m->tok_error : "none found");
}

int pdl_tokenize(const pdl_model *m, const char *text, size_t len, bool add_special, int32_t **ids, size_t *n_ids,
                 pdl_error *err) {
    *ids = NULL;
    *n_ids = 0;
    if (need_tokenizer(m, err)) return -1;
    return tok_encode(m->tok, text, len, add_special, ids, n_ids, err);
}

int pdl_tokenize_ex(const pdl_model *m, const char *text, size_t len, unsigned flags, int32_t **ids, size_t *n_ids,
                    pdl_error *err) {
    *ids = NULL;
    *n_ids = 0;
    if (need_tokenizer(m, err)) return -1;
    return tok_encode_ex(m->tok, text, len, (flags & PDL_TOK_ADD_SPECIAL) != 0, (flags & PDL_TOK_PARSE_SPECIAL) != 0,
                         ids, n_ids, err);
}

int pdl_detokenize(const pdl_model *m, const int32_t *ids, size_t n_ids, char **text, size_t *len, pdl_error *err) {
    *text = NULL;
    if (len) *len = 0;
    if (need_tokenizer(m, err)) return -1;
    *text = tok_decode_n(m->tok, ids, n_ids, len, err);
    return *text ? 0 : -1;
}

int pdl_detokenize_ex(const pdl_model *m, const int32_t *ids, size_t n_ids, unsigned flags, char **text, size_t *len,
                      pdl_error *err) {
    *text = NULL;
    if (len) *len = 0;
    if (need_tokenizer(m, err)) return -1;
    *text = tok_decode_ex(m->tok, ids, n_ids, (flags & PDL_TOK_KEEP_SPECIAL) != 0, len, err);
    return *text ? 0 : -1;
}

int pdl_fim_prompt(const pdl_model *m, const pdl_fim_input *in, int32_t **ids, size_t *n_ids, bool *truncated,
                   pdl_error *err) {
    *ids = NULL;
    *n_ids = 0;
    if (need_tokenizer(m, err)) return -1;
    pdl_model_info info;
    pdl_model_get_info(m, &info);
    if (info.fim.pre < 0 || info.fim.suf < 0 || info.fim.mid < 0)
        return err_fail(err, "this model's vocabulary has no fill-in-the-middle tokens (prefix, suffix and middle)");
    return tok_fim_prompt(m->tok, in, ids, n_ids, truncated, err);
}

pdl_detok *pdl_detok_new(const pdl_model *m, const int32_t *context, size_t n_context) {
    if (!m->tok) return NULL;
    pdl_detok *d = calloc(1, sizeof *d);
    if (!d) return NULL;
    d->stream = tok_stream_new(m->tok);
    if (!d->stream) {
        free(d);
        return NULL;
    }
    if (n_context) tok_stream_prime(d->stream, context, n_context);
    return d;
}

const char *pdl_detok_push(pdl_detok *d, int32_t id) { return d ? tok_stream_push(d->stream, id) : ""; }
const char *pdl_detok_flush(pdl_detok *d) { return d ? tok_stream_flush(d->stream) : ""; }
size_t pdl_detok_len(const pdl_detok *d) { return d ? tok_stream_len(d->stream) : 0; }

void pdl_detok_free(pdl_detok *d) {
    if (!d) return;
    tok_stream_free(d->stream);
    free(d);
}
