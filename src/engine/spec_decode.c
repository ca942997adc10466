/*
 * spec_decode.c - the proposers (n-gram lookup, draft model) and the
 * adaptive policy of speculative decoding; verification is the engine's.
 *
 * The draft model keeps, per sequence, a block table of its own and how
 * many of the sequence's tokens it has in its cache (spec.computed). To
 * propose k drafts it catches up on the tokens it has not seen (all of the
 * prompt the first time, usually one or two after a verification) and then
 * runs k - 1 single-row steps, every step one forward over all speculating
 * sequences, each draft the argmax of its row. After verification its
 * cache counts only the accepted tokens; rows past them are written again
 * before anything reads them.
 */
#include "engine/spec_decode.h"

#include <stdlib.h>
#include <string.h>

#include "engine/scheduler.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "util/error.h"

#define MAX_BACKOFF 32
#define PAUSE_STEPS 64
#define EMA 0.2
#define TRUST 3 /* samples before an average is used */

/* ---- n-gram lookup ------------------------------------------------------------ */

int spec_ngram_propose(const int32_t *tokens, int n_tokens, int lookup_min, int lookup_max, int k, int32_t *out) {
    if (lookup_min < 1) lookup_min = 1;
    if (lookup_max > n_tokens - 1) lookup_max = n_tokens - 1;
    for (int n = lookup_max; n >= lookup_min; n--) {
        const int32_t *pat = tokens + n_tokens - n;
        /* earliest i with tokens[i .. i + n) == pat, i + n < n_tokens (something follows) */
        for (int i = 0; i + n < n_tokens; i++) {
            if (tokens[i] != pat[0] || memcmp(tokens + i, pat, (size_t)n * sizeof *tokens) != 0) continue;
            int m = 0;
            while (m < k && i + n + m < n_tokens) {
                out[m] = tokens[i + n + m];
                m++;
            }
            return m;
        }
    }
    return 0;
}

int spec_hybrid_cap(int first, int k, int chunk, int max_rows) {
    if (chunk <= 0) return k;
    int before_close = chunk - 1 - first % chunk; /* drafts before the position that closes the chunk */
    if (k > before_close) k = before_close;
    if (k > max_rows) k = max_rows;
    return k > 0 ? k : 0;
}

/* ---- setup -------------------------------------------------------------------- */

int spec_init(spec_state *s, const pdl_engine_options *o, const pdl_model *target, int block_size, int n_blocks,
              pdl_error *err) {
    memset(s, 0, sizeof *s);
    s->method = o->spec_method;
    if (s->method == PDL_SPEC_NONE) return 0;
    if (s->method != PDL_SPEC_NGRAM && s->method != PDL_SPEC_DRAFT_MODEL && s->method != PDL_SPEC_MTP)
        return err_fail(err, "speculative decoding: unknown method %d", (int)s->method);
    s->k = o->num_speculative_tokens;
    if (s->k < 1 || s->k > PDL_MAX_SPEC_TOKENS)
        return err_fail(err, "speculative decoding: num_speculative_tokens %d must be in [1, %d]", s->k,
                        PDL_MAX_SPEC_TOKENS);
    s->lookup_min = o->prompt_lookup_min > 0 ? o->prompt_lookup_min : 1;
    s->lookup_max = o->prompt_lookup_max > 0 ? o->prompt_lookup_max : 5;
    if (s->lookup_max < s->lookup_min)
        return err_fail(err, "speculative decoding: prompt_lookup_max %d is below prompt_lookup_min %d", s->lookup_max,
                        s->lookup_min);
    s->max_batch = o->spec_max_batch > 0 ? o->spec_max_batch : 4;
    s->no_pause = o->spec_no_pause;
    pdl_model_info info;
    pdl_model_get_info(target, &info);
    s->state_chunk = info.state_chunk;
    s->state_max_rows = info.state_max_rows;
    if (s->method == PDL_SPEC_NGRAM) return 0;
    if (s->method == PDL_SPEC_MTP) return mtp_init(&s->mtp, target, block_size, err);
    s->draft = o->draft_model;
    if (!s->draft) return err_fail(err, "speculative decoding: the draft-model method needs a draft model");
    if (s->draft->cfg.n_rec_layers > 0)
        return err_fail(err, "speculative decoding: the draft model has recurrent layers (a hybrid model), which a "
                        "draft model cannot have yet");
    if (s->draft->cfg.vocab != target->cfg.vocab)
        return err_fail(err, "speculative decoding: the draft model's vocabulary (%d) is not the target's (%d)",
                        s->draft->cfg.vocab, target->cfg.vocab);
    bb_init(&s->bb, block_size);
    if (pdl_context_create(&s->draft_ctx, s->draft, NULL, err) ||
        pdl_kv_cache_create(&s->kv, s->draft, o->kv_dtype, block_size, n_blocks, err) ||
        bpool_init(&s->pool, n_blocks, block_size, false, err)) {
        spec_free(s);
        return err_fail_prefix(err, "speculative decoding: the draft model's KV cache");
    }
    return 0;
}

void spec_free(spec_state *s) {
    if (s->method == PDL_SPEC_MTP) mtp_free(&s->mtp);
    pdl_context_free(s->draft_ctx);
    pdl_kv_cache_free(s->kv);
    if (s->pool.blocks) bpool_free(&s->pool);
    bb_free(&s->bb);
    free(s->logits);
    memset(s, 0, sizeof *s);
}

void spec_attach(spec_state *s, pdl_kv_cache *kv, sched *sc) {
    if (s->method == PDL_SPEC_MTP) mtp_attach(&s->mtp, kv, sc);
}

int spec_note_rows(spec_state *s, eng_seq *q, int row0, int start) {
    return s->method == PDL_SPEC_MTP ? mtp_note_rows(&s->mtp, q, row0, start) : 0;
}

int spec_absorb(spec_state *s, const float *hidden, pdl_error *err) {
    return s->method == PDL_SPEC_MTP ? mtp_absorb(&s->mtp, hidden, err) : 0;
}

void spec_release(spec_state *s, eng_seq *q) {
    if (s->method == PDL_SPEC_MTP) mtp_forget(&s->mtp, q);
    if (q->spec.n_blocks) bpool_release_all(&s->pool, q->spec.blocks, q->spec.n_blocks);
    q->spec.n_blocks = 0;
    q->spec.computed = 0;
    q->spec.n_draft = 0;
}

/* ---- the draft model -------------------------------------------------------------- */

/* Room in the draft cache for positions [0, n) of q; -1 when the pool is short. */
static int draft_reserve(spec_state *s, eng_seq *q, int n) {
    int bs = s->pool.block_size, need = (n + bs - 1) / bs;
    if (bpool_table_grow(&q->spec.blocks, &q->spec.cap_blocks, need)) return -1;
    if (!bpool_can_alloc(&s->pool, need - q->spec.n_blocks)) return -1;
    while (q->spec.n_blocks < need) q->spec.blocks[q->spec.n_blocks++] = bpool_alloc(&s->pool);
    return 0;
}

/* Room for the logits of `seqs` sequences. */
static int grow_logits(spec_state *s, int seqs) {
    if (seqs > s->logits_cap) {
        float *l = realloc(s->logits, (size_t)seqs * (size_t)s->draft->cfg.vocab * sizeof *l);
        if (!l) return -1;
        s->logits = l;
        s->logits_cap = seqs;
    }
    return 0;
}

int32_t spec_argmax(const float *x, int n) {
    int32_t best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

/* One draft-model forward: for each of the n sequences, its tokens from
 * spec.computed to `upto[i]` (the last one its proposal's input); the
 * argmax of each sequence's last row goes to next[i]. */
static int draft_step(spec_state *s, eng_seq **qs, const int *upto, int n, int32_t *next, pdl_error *err) {
    int rows = 0;
    for (int i = 0; i < n; i++) rows += upto[i] - qs[i]->spec.computed + 1;
    if (grow_logits(s, n)) return err_fail(err, "speculative decoding: out of memory");
    if (bb_begin(&s->bb, rows, n, err)) return err_fail_prefix(err, "speculative decoding");
    for (int i = 0; i < n; i++) {
        eng_seq *q = qs[i];
        /* positions spec.computed .. upto[i]: the tokens it has not seen,
         * then the drafts so far; the last row's argmax is the next draft */
        int start = q->spec.computed, known = q->n_tokens - start;
        int32_t last = upto[i];
        bb_segment seg = {.block_table = q->spec.blocks, .start = start, .n = upto[i] - start + 1,
                          .tokens = q->tokens + start, .draft = q->spec.draft, .logits_pos = &last, .n_logits = 1};
        seg.n_known = known < seg.n ? known : seg.n;
        if (bb_add(&s->bb, &seg, err)) return err_fail_prefix(err, "speculative decoding");
    }
    pdl_batch b = *bb_finish(&s->bb, false);
    if (pdl_forward(s->draft_ctx, s->kv, &b, s->logits, err)) return err_fail_prefix(err, "draft model");
    for (int i = 0; i < n; i++) {
        qs[i]->spec.computed = upto[i] + 1;
        next[i] = spec_argmax(s->logits + (size_t)i * (size_t)s->draft->cfg.vocab, s->draft->cfg.vocab);
    }
    return 0;
}

/* k greedy drafts for each of the n sequences (their want[i] <= k). */
static int draft_model_propose(spec_state *s, eng_seq **qs, const int *want, int n, pdl_error *err) {
    int *upto = malloc((size_t)n * sizeof *upto), *act_want = malloc((size_t)n * sizeof *act_want);
    int32_t *next = malloc((size_t)n * sizeof *next);
    eng_seq **act = malloc((size_t)n * sizeof *act);
    if (!upto || !act_want || !next || !act) {
        free(upto), free(act_want), free(next), free(act);
        return err_fail(err, "speculative decoding: out of memory");
    }
    int rc = 0, m = 0;
    for (int i = 0; i < n; i++) {
        eng_seq *q = qs[i];
        q->spec.n_draft = 0;
        if (q->spec.computed > q->n_tokens - 1) q->spec.computed = q->n_tokens - 1;
        if (draft_reserve(s, q, q->n_tokens + want[i])) continue; /* the draft cache is full: no drafts */
        act[m] = q;
        act_want[m] = want[i];
        upto[m] = q->n_tokens - 1;
        m++;
    }
    while (rc == 0 && m > 0) {
        rc = draft_step(s, act, upto, m, next, err);
        int keep = 0;
        for (int i = 0; rc == 0 && i < m; i++) {
            eng_seq *q = act[i];
            q->spec.draft[q->spec.n_draft++] = next[i];
            if (q->spec.n_draft < act_want[i]) { /* the next step feeds this draft */
                act[keep] = q;
                act_want[keep] = act_want[i];
                upto[keep] = q->n_tokens + q->spec.n_draft - 1;
                keep++;
            }
        }
        m = keep;
    }
    free(upto), free(act_want), free(next), free(act);
    return rc;
}

/* ---- the policy ------------------------------------------------------------------- */

void spec_step_done(spec_state *s, double seconds, bool decode_only, bool drafted, int spec_tokens, int n_spec) {
    if (s->method == PDL_SPEC_NONE || !decode_only) return;
    if (!drafted) {
        s->t_plain = s->n_plain++ ? s->t_plain + EMA * (seconds - s->t_plain) : seconds;
        return;
    }
    double g = n_spec ? (double)spec_tokens / n_spec : 1;
    s->t_spec = s->n_spec ? s->t_spec + EMA * (seconds - s->t_spec) : seconds;
    s->gain = s->n_spec ? s->gain + EMA * (g - s->gain) : g;
    s->n_spec++;
    /* time per token with drafts against without: pause when they do not pay */
    if (!s->no_pause && s->n_plain >= TRUST && s->n_spec >= TRUST && s->t_spec / s->t_plain > s->gain) {
        s->pause = PAUSE_STEPS;
        s->n_spec = 0; /* measured afresh when tried again */
    }
}

int spec_propose(spec_state *s, eng_seq **seqs, const int *max_len, int n, pdl_error *err) {
    for (int i = 0; i < n; i++) seqs[i]->spec.n_draft = 0;
    if (s->method == PDL_SPEC_NONE) return 0;
    if (s->pause > 0) {
        s->pause--;
        return 0;
    }
    /* decoding sequences (prompt done, one token to compute) */
    int decoding = 0;
    for (int i = 0; i < n; i++) {
        const eng_seq *q = seqs[i];
        decoding += q->state == SEQ_RUNNING && q->cache.n_computed == q->n_tokens - 1 && q->n_tokens > q->n_prompt;
    }
    if (decoding == 0 || decoding > s->max_batch) return 0;
    eng_seq **cand = malloc((size_t)n * sizeof *cand);
    int *want = malloc((size_t)n * sizeof *want);
    if (!cand || !want) {
        free(cand), free(want);
        return err_fail(err, "speculative decoding: out of memory");
    }
    int m = 0;
    for (int i = 0; i < n; i++) {
        eng_seq *q = seqs[i];
        if (q->state != SEQ_RUNNING || q->cache.n_computed != q->n_tokens - 1 || q->n_tokens <= q->n_prompt ||
            q->fork_pending || q->abort_requested)
            continue;
        if (q->spec.wait > 0) {
            q->spec.wait--;
            continue;
        }
        /* never past the sequence's end: the last draft's row predicts position n_tokens + k */
        int room = max_len[i] - q->n_tokens - 1;
        int k = s->k < room ? s->k : room;
        k = spec_hybrid_cap(q->n_tokens, k, s->state_chunk, s->state_max_rows);
        if (k <= 0) continue;
        if (s->method == PDL_SPEC_NGRAM) {
            q->spec.n_draft = spec_ngram_propose(q->tokens, q->n_tokens, s->lookup_min, s->lookup_max, k, q->spec.draft);
        } else {
            cand[m] = q;
            want[m] = k;
            m++;
        }
    }
    int rc = m == 0 ? 0 : s->method == PDL_SPEC_MTP ? mtp_propose(&s->mtp, cand, want, m, err)
                                                    : draft_model_propose(s, cand, want, m, err);
    free(cand), free(want);
    return rc;
}

void spec_verified(spec_state *s, eng_seq *q, int accepted) {
    if (q->spec.n_draft == 0) return;
    s->drafts++;
    s->draft_tokens += (uint64_t)q->spec.n_draft;
    s->accepted += (uint64_t)accepted;
    for (int j = 0; j < accepted && j < PDL_MAX_SPEC_TOKENS; j++) s->accepted_per_pos[j]++;
    if (accepted == 0) {
        q->spec.wait = q->spec.backoff ? q->spec.backoff : 1;
        q->spec.backoff = q->spec.wait * 2 > MAX_BACKOFF ? MAX_BACKOFF : q->spec.wait * 2;
    } else {
        q->spec.wait = q->spec.backoff = 0;
    }
    /* the draft cache keeps the accepted drafts (positions n_tokens ..
     * n_tokens + accepted - 1, the tokens not appended yet) and nothing
     * past them */
    int keep = q->n_tokens + accepted;
    if (q->spec.computed > keep) q->spec.computed = keep;
    q->spec.n_draft = 0;
}
