/*
 * engine_output.c - what a request gets back (vLLM v1's output processor):
 * each token's event with its logprobs and its text (detokenized
 * incrementally, stop strings held back until they can no longer start
 * one), prompt logprobs, and the FINISHED event with the rest of the text.
 *
 * What it is not for: deciding tokens or when a sequence ends (the step:
 * engine_step.c); freeing a finished sequence (engine.c's finish).
 */
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"
#include "model/model.h"

static void emit(eng_seq *q, pdl_event *ev) {
    ev->request_id = q->req->id;
    ev->index = q->index;
    if (q->req->cb) q->req->cb(ev, q->req->user);
}

static int held_append(eng_seq *q, const char *s, size_t n) {
    if (q->text.held_len + n + 1 > q->text.held_cap) {
        size_t cap = (q->text.held_len + n + 1) * 2;
        char *p = realloc(q->text.held, cap);
        if (!p) return -1;
        q->text.held = p;
        q->text.held_cap = cap;
    }
    memcpy(q->text.held + q->text.held_len, s, n);
    q->text.held_len += n;
    q->text.held[q->text.held_len] = '\0';
    return 0;
}



/* Adds len bytes of new text to what is held; returns how many bytes of
 * q->text.held can be released now. A stop string completed by the new text
 * (looked for once more than min_tokens tokens are out, as vLLM does) sets
 * *stop to its index (else -1) and drops the text from it on. Work per call
 * is proportional to len (stop_match.h), whatever the stop strings. */
static size_t text_release(eng_seq *q, const char *text, size_t len, int *stop) {
    *stop = -1;
    const eng_request *r = q->req;
    size_t before = q->text.held_len;
    if (held_append(q, text, len)) return q->text.held_len;
    if (!r->stops) return q->text.held_len;
    bool look = n_generated(q) > r->params.min_tokens;
    size_t fed = 0;
    stop_hit hit;
    while (fed < len && stop_matcher_feed(r->stops, &q->text.stop_state, text + fed, len - fed, &hit, NULL)) {
        fed += hit.end;
        if (!look) continue;
        /* the stop string starts inside the held text (a prefix of it was held) */
        size_t end = before + fed;
        q->text.held_len = end >= hit.len ? end - hit.len : 0;
        q->text.held[q->text.held_len] = '\0';
        *stop = hit.stop;
        return q->text.held_len;
    }
    size_t hold = stop_matcher_hold(r->stops, q->text.stop_state);
    return hold < q->text.held_len ? q->text.held_len - hold : 0;
}

/* Passes the first n held bytes on as ev->text, through the sequence's own
 * reusable buffer (valid during emit; no allocation per token once grown). */
static void release_into(eng_seq *q, size_t n, pdl_event *ev) {
    if (n + 1 > q->text.out_cap) {
        char *p = realloc(q->text.out, n + 1 > 64 ? n + 1 : 64);
        if (!p) {
            ev->text = "";
            ev->text_len = 0;
            return;
        }
        q->text.out = p;
        q->text.out_cap = n + 1 > 64 ? n + 1 : 64;
    }
    memcpy(q->text.out, q->text.held, n);
    q->text.out[n] = '\0';
    memmove(q->text.held, q->text.held + n, q->text.held_len - n + 1);
    q->text.held_len -= n;
    ev->text = q->text.out;
    ev->text_len = n;
}

void eng_out_finished(pdl_engine *e, eng_seq *q, const char *reason, eng_stop_cause cause) {
    (void)e;
    pdl_event ev = {.kind = PDL_EVENT_FINISHED, .token = -1, .finish_reason = reason, .stop_token = cause.token};
    bool aborted = strcmp(reason, "abort") == 0;
    if (!aborted && cause.string < 0) {
        /* the end of the text: incomplete UTF-8 as U+FFFD; a stop string it
         * completes still ends the text there */
        const char *tail = pdl_detok_flush(q->text.detok);
        int stop;
        text_release(q, tail, pdl_detok_len(q->text.detok), &stop);
        if (stop >= 0 && cause.token < 0) {
            ev.finish_reason = "stop";
            cause.string = stop;
        }
    }
    if (cause.string >= 0) ev.stop_string = q->req->stop_strings[cause.string];
    ev.cached_tokens = q->cache.n_cached_prompt > 0 ? q->cache.n_cached_prompt : 0;
    ev.text = aborted || !q->text.held ? "" : q->text.held;
    ev.text_len = aborted ? 0 : q->text.held_len;
    ev.position = q->n_tokens - 1;
    emit(q, &ev);
}

void eng_out_embedding(eng_seq *q, const float *vec, int n) {
    pdl_event ev = {.kind = PDL_EVENT_EMBEDDING, .token = -1, .position = q->n_prompt - 1, .embedding = vec,
                    .n_embedding = n, .text = "", .stop_token = -1};
    emit(q, &ev);
}

/* Whether tok ends the sequence: EOS first (no stop reason, as vLLM), then
 * the request's stop tokens (*cause_token = tok). */
static bool is_stop_token(const pdl_engine *e, const eng_seq *q, int32_t tok, int32_t *cause_token) {
    const pdl_request_params *p = &q->req->params;
    *cause_token = -1;
    const pdl_model_config *c = &e->model->cfg;
    for (int i = 0; !p->ignore_eos && i < c->n_eos; i++)
        if (c->eos_ids[i] == tok) return true;
    for (int i = 0; i < p->n_stop_ids; i++)
        if (p->stop_ids[i] == tok) {
            *cause_token = tok;
            return true;
        }
    return false;
}

bool eng_out_token(pdl_engine *e, eng_seq *q, const float *row, int32_t tok, eng_stop_cause *cause) {
    pdl_event ev = {.kind = PDL_EVENT_TOKEN, .token = tok, .position = q->n_tokens - 1, .text = ""};
    int nl = q->req->params.logprobs;
    if (nl >= 0) {
        pdl_logprobs(row, e->runner.vocab, tok, &ev.logprob, e->top, nl);
        ev.top = e->top;
        ev.n_top = nl;
    }
    *cause = (eng_stop_cause){-1, -1};
    bool stop_tok = is_stop_token(e, q, tok, &cause->token);
    /* the text of a stop token (EOS) is not part of the output */
    const char *piece = stop_tok ? "" : pdl_detok_push(q->text.detok, tok);
    size_t n = text_release(q, piece, stop_tok ? 0 : pdl_detok_len(q->text.detok), &cause->string);
    release_into(q, n, &ev);
    emit(q, &ev);
    return stop_tok;
}

void eng_out_prompt_logprobs(pdl_engine *e, eng_seq *q, int row_pos, const float *row) {
    int target = row_pos + 1; /* row r predicts prompt token r + 1 */
    if (target >= q->n_prompt || target < q->logprobs.prompt_next) return;
    pdl_event ev = {.kind = PDL_EVENT_PROMPT_LOGPROB, .token = q->tokens[target], .position = target, .text = ""};
    int nl = q->req->params.prompt_logprobs;
    pdl_logprobs(row, e->runner.vocab, ev.token, &ev.logprob, e->top, nl);
    ev.top = e->top;
    ev.n_top = nl;
    emit(q, &ev);
    q->logprobs.prompt_next = target + 1;
}
