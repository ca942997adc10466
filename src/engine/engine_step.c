/*
 * engine_step.c - one engine step (vLLM v1's engine core step): plan
 * (drafts proposed, sched_schedule), execute (runner_execute: one packed
 * forward) and update: blocks that filled go to the prefix cache, prompt
 * logprobs, a token drawn for each sequence that completed what it knows
 * (masked by its grammar or thinking budget), drafts verified, n > 1
 * prompts forked, stop conditions checked and finished sequences retired.
 *
 * Also finishing a sequence (eng_finish) and aborts, which the step
 * carries out. What it is not for: text and events (engine_output.c),
 * validation (engine_input.c).
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/engine_internal.h"
#include "model/context.h"
#include "model/model.h"

void eng_finish(pdl_engine *e, eng_seq *q, const char *reason, eng_stop_cause cause) {
    eng_out_finished(e, q, reason, cause);
    sched_remove(&e->sched, q);
    spec_release(&e->spec, q);
    eng_untrack(e, q);
    eng_request *r = q->req;
    q->state = SEQ_FINISHED;
    eng_seq_free(q);
    if (--r->n_live == 0) eng_request_free(r);
}

static int append_token(eng_seq *q, int32_t tok) {
    if (q->n_tokens == q->cap_tokens) {
        int cap = q->cap_tokens * 2;
        int32_t *t = realloc(q->tokens, (size_t)cap * sizeof *t);
        if (!t) return -1;
        q->tokens = t;
        q->cap_tokens = cap;
    }
    q->tokens[q->n_tokens++] = tok;
    return 0;
}

/* The thinking block's state after tok (pdl_reasoning). */
static eng_think think_after(const pdl_reasoning *rs, eng_think t, int32_t tok) {
    if (!rs->enabled) return t;
    if (t.inside) {
        if (tok == rs->end_token) t.inside = false;
        else t.n++;
    } else if (!t.decided) {
        t.decided = true;
        t.inside = tok == rs->start_token;
    }
    return t;
}

/* Whether tok, drawn in state t, is the answer's (what a grammar constrains). */
static bool is_answer(const pdl_reasoning *rs, eng_think t, int32_t tok) {
    return !rs->enabled || (!t.inside && (t.decided || tok != rs->start_token));
}

/* Draws the token at q's position n_tokens + ahead from its row of logits
 * (ahead > 0: a row past drafts that were accepted before it; the sampler
 * has recorded them), in thinking-block state t. One draw of the request's
 * random stream, as without speculation. Under a grammar the draw is from a
 * masked copy of the row (in scratch slot `ahead`), and inside a thinking
 * block from the row itself, or from one that forces the block's end once
 * its budget is spent; *used gets the row drawn from, for its logprobs. -1
 * (err set) when the grammar cannot go on. */
static int32_t draw_token(pdl_engine *e, eng_seq *q, eng_think t, const float *row, int ahead, const float **used,
                          pdl_error *err) {
    const eng_request *r = q->req;
    const pdl_reasoning *rs = &r->params.reasoning;
    if (e->opts.on_logits)
        e->opts.on_logits(r->id, q->index, q->n_tokens - 1 + ahead, row, e->runner.vocab, e->opts.on_logits_user);
    if (rs->enabled && t.inside) {
        if (rs->budget >= 0 && t.n >= rs->budget &&
            !(row = so_forced_row(&e->masked, e->runner.vocab, row, rs->end_token, true, ahead, err)))
            return -1;
    } else {
        /* before the block, the model may open it (unless the budget is 0) instead of answering */
        bool may_open = rs->enabled && !t.decided && rs->start_token >= 0;
        int32_t open = may_open && rs->budget != 0 ? rs->start_token : -1;
        if (q->sampling.matcher) {
            if (!(row = so_masked_row(&e->masked, q->sampling.matcher, row, ahead, open, err))) return -1;
        } else if (may_open && rs->budget == 0) {
            if (!(row = so_forced_row(&e->masked, e->runner.vocab, row, rs->start_token, false, ahead, err))) return -1;
        }
    }
    *used = row;
    bool hold_stops = n_generated(q) + ahead < r->params.min_tokens;
    return pdl_sampler_sample_ex(q->sampling.sampler, row, r->min_banned, hold_stops ? r->n_min_banned : 0);
}

/* Appends tok (drawn from row) to q, emits it (eng_out_token: logprobs, text
 * with stop strings held back), then follows it in the thinking block and
 * the grammar. *reason gets why q must now finish ("stop", "length",
 * "abort" when the grammar refused the token) or NULL; the caller finishes
 * it (after anything that still needs q). */
static int emit_token(pdl_engine *e, eng_seq *q, const float *row, int32_t tok, const char **reason, eng_stop_cause *why,
                      pdl_error *err) {
    *reason = NULL;
    if (append_token(q, tok)) return err_fail(err, "engine: out of memory");
    e->generation_tokens++;
    eng_stop_cause cause;
    bool stop_tok = eng_out_token(e, q, row, tok, &cause);
    *why = cause;
    bool grammar_ok = true, grammar_done = false;
    bool answer = is_answer(&q->req->params.reasoning, q->sampling.think, tok);
    q->sampling.think = think_after(&q->req->params.reasoning, q->sampling.think, tok);
    if (q->sampling.matcher && answer) {
        /* the draw came from the masked row: only an all -inf row (every
         * allowed token banned) can give a token the grammar refuses */
        grammar_ok = gram_matcher_accept_token(q->sampling.matcher, tok);
        grammar_done = grammar_ok && gram_matcher_is_terminated(q->sampling.matcher);
        if (!grammar_ok) {
            const char *why = gram_matcher_error(q->sampling.matcher);
            eng_log(e, "request %llu: token %d %s: ending it", (unsigned long long)q->req->id, tok,
                       why ? why : "is not allowed by its grammar");
        }
    }
    if (stop_tok || cause.string >= 0) *reason = "stop";
    else if (!grammar_ok) *reason = "abort";
    else if (grammar_done) *reason = "stop"; /* the grammar is complete: nothing but EOS could follow */
    else if (q->n_tokens >= eng_max_len(e, q)) *reason = "length";
    return 0;
}

/* The grammar of q cannot go on (no token continues it) or ran out of
 * memory: q ends ("abort"), the engine goes on. */
static void grammar_failed(pdl_engine *e, eng_seq *q, const pdl_error *why) {
    eng_log(e, "request %llu: %s", (unsigned long long)q->req->id, why->message);
    eng_finish(e, q, "abort", (eng_stop_cause){-1, -1});
}

/* Samples q's next token from its row, emits it, and finishes q when a
 * stop condition holds. */
static int sample_next(pdl_engine *e, eng_seq *q, const float *row, pdl_error *err) {
    const char *reason;
    eng_stop_cause why;
    const float *used;
    pdl_error gerr;
    int32_t tok = draw_token(e, q, q->sampling.think, row, 0, &used, &gerr);
    if (tok < 0) {
        grammar_failed(e, q, &gerr);
        return 0;
    }
    if (emit_token(e, q, used, tok, &reason, &why, err)) return -1;
    if (reason) eng_finish(e, q, reason, why);
    return 0;
}

/* A decode with n_draft speculative drafts, its rows[0 .. n_draft] from
 * the forward: each row's token is drawn as without speculation, and the
 * drafts are accepted while they equal the drawn tokens (for these one-hot
 * proposals, vLLM's rejection sampling; spec_decode.h). The tokens before
 * the first disagreement, and the token drawn there (or the bonus token
 * after the last draft), are emitted in order, stopping at a stop
 * condition; the K/V of rejected drafts is left behind (n_computed covers
 * the accepted ones only, and later rows overwrite the rest before any row
 * reads it; a hybrid model's recurrent state needs no undo either: the
 * drafts were capped so that the next step starts from the state at the
 * kept position, spec_decode.h). Under a grammar, row j is masked by the
 * matcher's state after drafts 0 .. j-1 (k + 1 masks), and the matcher is
 * rolled back before the emitted tokens are fed to it again one by one. */
static int verify_drafts(pdl_engine *e, eng_seq *q, int start, const float *rows, pdl_error *err) {
    int nd = q->spec.n_draft, V = e->runner.vocab, accepted = 0;
    int32_t drawn[PDL_MAX_SPEC_TOKENS + 1];
    const float *used[PDL_MAX_SPEC_TOKENS + 1];
    int n_drawn = 0, fed = 0; /* fed: drafts given to the matcher to mask the rows after them */
    pdl_error gerr;
    bool failed = false;
    const pdl_reasoning *rs = &q->req->params.reasoning;
    eng_think t = q->sampling.think; /* the thinking block's state after the drafts accepted so far */
    for (int j = 0; j <= nd; j++) {
        int32_t tok = draw_token(e, q, t, rows + (size_t)j * (size_t)V, j, &used[n_drawn], &gerr);
        if (tok < 0) {
            failed = true;
            break;
        }
        drawn[n_drawn++] = tok;
        if (j == nd || drawn[j] != q->spec.draft[j]) break;
        accepted++;
        bool answer = is_answer(rs, t, tok);
        t = think_after(rs, t, tok);
        if (q->sampling.matcher && answer) {
            if (!gram_matcher_accept_token(q->sampling.matcher, tok)) break; /* cannot happen: drawn from the mask */
            fed++;
        }
    }
    if (fed) gram_matcher_rollback(q->sampling.matcher, fed);
    spec_verified(&e->spec, q, accepted); /* before emitting: the sequence may end in it */
    const char *reason = NULL;
    eng_stop_cause why = {-1, -1};
    int emitted = 0;
    while (emitted < n_drawn && !reason) {
        if (emit_token(e, q, used[emitted], drawn[emitted], &reason, &why, err)) return -1;
        emitted++;
    }
    int valid = accepted < emitted - 1 ? accepted : emitted - 1; /* accepted drafts now in tokens */
    if (valid < 0) valid = 0;
    q->cache.n_computed = start + 1 + valid;
    sched_cache_full_blocks(&e->sched, q);
    sched_snapshot_after_step(&e->sched, q, start);
    if (reason) eng_finish(e, q, reason, why);
    else if (failed) grammar_failed(e, q, &gerr);
    return 0;
}

/* n > 1: the other n - 1 sequences start from the finished prompt (blocks
 * shared through the scheduler); *kids gets the ones that run now (they
 * sample their first token from the parent's row), *n_kids their count. */
static int fork_children(pdl_engine *e, eng_seq *parent, eng_seq **kids, int *n_kids, pdl_error *err) {
    eng_request *r = parent->req;
    parent->fork_pending = false;
    *n_kids = 0;
    int made = 0;
    for (int i = 1; i < r->n; i++) {
        eng_seq *c = eng_seq_new(e, r, i, parent->tokens, parent->n_tokens, parent->n_prompt);
        if (!c) return err_fail(err, "engine: out of memory");
        c->logprobs.prompt_next = parent->n_prompt; /* prompt logprobs belong to sequence 0 */
        c->cache.n_cached_prompt = parent->cache.n_cached_prompt;
        r->n_live++;
        if (eng_track(e, c, err)) return -1;
        kids[made++] = c;
    }
    int running = sched_fork(&e->sched, parent, kids, made, err);
    if (running < 0) return -1;
    *n_kids = running;
    return 0;
}

/* ---- the step ------------------------------------------------------------- */

void eng_process_aborts(pdl_engine *e) {
    for (int i = 0; i < e->n_seqs;) {
        eng_seq *q = e->seqs[i];
        if (q->abort_requested) eng_finish(e, q, "abort", (eng_stop_cause){-1, -1}); /* untracks q: index i now holds another */
        else i++;
    }
}

/* Drafts for the sequences that speculate this step (spec_decode.h). */
static int propose_drafts(pdl_engine *e, pdl_error *err) {
    if (e->spec.method == PDL_SPEC_NONE || e->n_seqs == 0) return 0;
    if (e->n_seqs > e->cap_max_lens) {
        int *p = realloc(e->max_lens, (size_t)e->n_seqs * sizeof *p);
        if (!p) return err_fail(err, "engine: out of memory");
        e->max_lens = p;
        e->cap_max_lens = e->n_seqs;
    }
    for (int i = 0; i < e->n_seqs; i++) e->max_lens[i] = eng_max_len(e, e->seqs[i]);
    if (spec_propose(&e->spec, e->seqs, e->max_lens, e->n_seqs, err)) return -1;
    for (int i = 0; e->opts.on_drafts && i < e->n_seqs; i++) {
        const eng_seq *q = e->seqs[i];
        if (q->spec.n_draft > 0)
            e->opts.on_drafts(q->req->id, q->index, q->n_tokens, q->spec.draft, q->spec.n_draft, e->opts.on_drafts_user);
    }
    return 0;
}

static double mono_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* An embedding request's entry (params.pooling): its pooled rows of the
 * forward's hidden states (row0: its first row in the batch) through the
 * final norm, summed in position order (MEAN) or kept (LAST, CLS); once the
 * prompt is done, the mean taken, the L2 norm divided out when asked, the
 * EMBEDDING event and the end ("stop"). */
static int pool_entry(pdl_engine *e, const sched_entry *en, int row0, pdl_error *err) {
    eng_seq *q = en->seq;
    const pdl_request_params *p = &q->req->params;
    int H = e->model->cfg.hidden;
    if (!e->pool_row && !(e->pool_row = malloc((size_t)H * sizeof *e->pool_row)))
        return err_fail(err, "engine: out of memory");
    const float *x = model_forward_hidden(e->runner.ctx) + (size_t)row0 * H;
    for (int i = 0; i < en->n_new; i++) {
        int pos = en->start + i;
        bool take = p->pooling == PDL_POOLING_MEAN ? pos >= q->pool_next
                    : p->pooling == PDL_POOLING_CLS ? pos == 0
                                                    : pos == q->n_prompt - 1;
        if (!take) continue;
        model_final_norm_rows(e->model, x + (size_t)i * H, 1, e->pool_row);
        for (int h = 0; h < H; h++)
            q->pool_acc[h] = p->pooling == PDL_POOLING_MEAN ? q->pool_acc[h] + e->pool_row[h] : e->pool_row[h];
    }
    if (en->start + en->n_new > q->pool_next) q->pool_next = en->start + en->n_new;
    q->cache.n_computed = en->start + en->n_new;
    sched_cache_full_blocks(&e->sched, q);
    sched_snapshot_after_step(&e->sched, q, en->start);
    if (q->cache.n_computed < q->n_tokens || q->abort_requested) return 0;
    e->prompt_tokens += (uint64_t)q->n_prompt;
    double div = p->pooling == PDL_POOLING_MEAN ? (double)q->n_prompt : 1.0, norm = 0;
    for (int h = 0; h < H; h++) norm += (q->pool_acc[h] / div) * (q->pool_acc[h] / div);
    norm = p->normalize && norm > 0 ? sqrt(norm) : 1.0;
    for (int h = 0; h < H; h++) e->pool_row[h] = (float)(q->pool_acc[h] / div / norm);
    eng_out_embedding(q, e->pool_row, H);
    eng_finish(e, q, "stop", (eng_stop_cause){-1, -1});
    return 0;
}

/* The update of one entry after the forward, from its logits rows: a
 * decode with drafts verifies them; otherwise the computed count moves on,
 * full blocks go to the prefix cache, prompt logprobs are emitted, and a
 * sequence that now has every token computed draws its next one (forking
 * first when it is an n > 1 prompt). */
static int update_entry(pdl_engine *e, const sched_entry *en, runner_rows out, pdl_error *err) {
    eng_seq *q = en->seq;
    size_t V = (size_t)e->runner.vocab;
    if (en->verifies_drafts) return q->abort_requested ? 0 : verify_drafts(e, q, en->start, out.logits, err);
    q->cache.n_computed = en->start + en->n_new;
    sched_cache_full_blocks(&e->sched, q);
    sched_snapshot_after_step(&e->sched, q, en->start);
    bool completes = q->cache.n_computed == q->n_tokens;
    for (int j = 0; j < out.n; j++)
        if (q->req->params.prompt_logprobs >= 0)
            eng_out_prompt_logprobs(e, q, out.positions[j], out.logits + (size_t)j * V);
    if (!completes || q->abort_requested) return 0;
    if (n_generated(q) == 0) e->prompt_tokens += (uint64_t)q->n_prompt; /* its prefill done (not a recompute) */
    const float *last = out.logits + (size_t)(out.n - 1) * V; /* a completing entry's last row is a logits row */
    /* forked children sample their first token from the same row */
    eng_seq *kids[ENG_MAX_N]; /* n <= ENG_MAX_N: checked when the request came in */
    int n_kids = 0, rc = 0;
    if (q->fork_pending) rc = fork_children(e, q, kids, &n_kids, err);
    if (rc == 0) rc = sample_next(e, q, last, err);
    for (int i = 0; rc == 0 && i < n_kids; i++) rc = sample_next(e, kids[i], last, err);
    return rc;
}

int pdl_engine_step(pdl_engine *e, int *active, pdl_error *err) {
    sched_output plan;
    e->in_step = true;
    double t0 = e->spec.method != PDL_SPEC_NONE ? mono_s() : 0;
    uint64_t gen0 = e->generation_tokens;
    /* plan: drafts proposed, then what runs */
    int rc = propose_drafts(e, err);
    if (rc == 0) rc = sched_schedule(&e->sched, &plan, err);
    int n_spec = 0; /* sequences verifying drafts this step */
    for (int k = 0; rc == 0 && k < plan.n_entries; k++) n_spec += plan.entries[k].verifies_drafts;
    /* execute: one packed forward */
    if (rc == 0 && plan.n_entries > 0) rc = runner_execute(&e->runner, &plan, err);
    /* update: each entry from its logits rows */
    if (rc == 0 && plan.n_entries > 0) {
        e->steps++;
        for (int k = 0; rc == 0 && k < plan.n_entries; k++) {
            /* the MTP drafter follows the rows the entry keeps (spec_mtp.h) */
            if (spec_note_rows(&e->spec, plan.entries[k].seq, e->runner.batch.cu_seqlens[k], plan.entries[k].start))
                rc = err_fail(err, "engine: out of memory");
            if (rc == 0)
                rc = plan.entries[k].seq->req->params.pooling != PDL_POOLING_NONE
                         ? pool_entry(e, &plan.entries[k], e->runner.batch.cu_seqlens[k], err)
                         : update_entry(e, &plan.entries[k], runner_entry_rows(&e->runner, k), err);
        }
        if (rc == 0) rc = spec_absorb(&e->spec, model_forward_hidden(e->runner.ctx), err);
        if (rc == 0 && e->spec.method != PDL_SPEC_NONE) {
            /* tokens beyond one per decode: what the drafts gained */
            int extra = (int)(e->generation_tokens - gen0) - plan.n_decode;
            spec_step_done(&e->spec, mono_s() - t0, plan.n_decode == plan.n_entries, n_spec > 0, n_spec + extra, n_spec);
        }
    }
    e->in_step = false;
    eng_process_aborts(e);
    if (active) *active = e->sched.n_running + e->sched.n_waiting;
    return rc;
}

int pdl_engine_run_until_idle(pdl_engine *e, pdl_error *err) {
    int active = 1;
    while (active > 0)
        if (pdl_engine_step(e, &active, err)) return -1;
    return 0;
}

int pdl_engine_abort(pdl_engine *e, uint64_t request_id) {
    int found = 0;
    for (int i = 0; i < e->n_seqs; i++)
        if (e->seqs[i]->req->id == request_id) {
            e->seqs[i]->abort_requested = true;
            found = 1;
        }
    if (found && !e->in_step) eng_process_aborts(e);
    return found ? 0 : -1;
}
