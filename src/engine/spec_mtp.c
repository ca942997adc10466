/*
 * spec_mtp.c - the MTP block as drafter: absorbing each step's kept rows,
 * and proposing drafts (spec_mtp.h says how and why).
 */
#include "engine/spec_mtp.h"

#include <stdlib.h>
#include <string.h>

#include "engine/scheduler.h"
#include "engine/spec_decode.h"
#include "model/context.h"
#include "model/model.h"
#include "util/error.h"

int mtp_init(spec_mtp *t, const pdl_model *target, int block_size, pdl_error *err) {
    memset(t, 0, sizeof *t);
    if (!target->cfg.mtp_loaded)
        return err_fail(err, "speculative decoding: method 'mtp' needs a model file with its multi-token-prediction "
                        "block (Hugging Face mtp.* tensors, GGUF nextn.* of a qwen35 / qwen35moe file), and this "
                        "model has none");
    t->model = target;
    bb_init(&t->bb, block_size);
    if (pdl_context_create(&t->ctx, target, NULL, err)) {
        mtp_free(t);
        return err_fail_prefix(err, "speculative decoding: the MTP drafter");
    }
    return 0;
}

void mtp_attach(spec_mtp *t, pdl_kv_cache *kv, sched *s) {
    t->kv = kv;
    t->sched = s;
}

void mtp_free(spec_mtp *t) {
    pdl_context_free(t->ctx);
    bb_free(&t->bb);
    free(t->hidden_in), free(t->hidden_out), free(t->logits), free(t->pending);
    free(t->seqs), free(t->pos), free(t->want);
    memset(t, 0, sizeof *t);
}

int mtp_note_rows(spec_mtp *t, eng_seq *q, int row0, int start) {
    if (t->n_pending == t->cap_pending) {
        int cap = t->cap_pending ? 2 * t->cap_pending : 16;
        mtp_pending *p = realloc(t->pending, (size_t)cap * sizeof *p);
        if (!p) return -1;
        t->pending = p, t->cap_pending = cap;
    }
    t->pending[t->n_pending++] = (mtp_pending){.seq = q, .row0 = row0, .start = start};
    return 0;
}

void mtp_forget(spec_mtp *t, eng_seq *q) {
    for (int i = 0; i < t->n_pending; i++)
        if (t->pending[i].seq == q) t->pending[i].seq = NULL;
    q->spec.mtp_pos = -1;
}

/* Room for rows MTP rows and seqs outputs (grown, never per step). */
static int grow(spec_mtp *t, int rows, int seqs) {
    size_t H = (size_t)t->model->cfg.hidden, V = (size_t)t->model->cfg.vocab;
    if (seqs > t->seq_cap) {
        eng_seq **q = realloc(t->seqs, (size_t)seqs * sizeof *q);
        if (q) t->seqs = q;
        int32_t *p = realloc(t->pos, (size_t)seqs * sizeof *p);
        if (p) t->pos = p;
        int *w = realloc(t->want, (size_t)seqs * sizeof *w);
        if (w) t->want = w;
        if (!q || !p || !w) return -1;
        t->seq_cap = seqs;
    }
    if ((size_t)rows > t->hidden_rows) {
        float *p = realloc(t->hidden_in, (size_t)rows * H * sizeof *p);
        if (!p) return -1;
        t->hidden_in = p, t->hidden_rows = (size_t)rows;
    }
    if (seqs > t->out_rows) {
        float *h = realloc(t->hidden_out, (size_t)seqs * H * sizeof *h);
        if (h) t->hidden_out = h;
        float *l = realloc(t->logits, (size_t)seqs * V * sizeof *l);
        if (l) t->logits = l;
        if (!h || !l) return -1;
        t->out_rows = seqs;
    }
    return 0;
}

static bb_segment mtp_segment(const eng_seq *q, int start, int n, const int32_t *tokens, const int32_t *last) {
    return (bb_segment){.block_table = q->cache.blocks, .start = start, .n = n, .tokens = tokens, .n_known = n,
                        .logits_pos = last, .n_logits = 1, .recurrent = q->cache.state_slot >= 0,
                        .state_slot = q->cache.state_slot};
}

int mtp_absorb(spec_mtp *t, const float *hidden, pdl_error *err) {
    size_t H = (size_t)t->model->cfg.hidden;
    int rows = 0, seqs = 0;
    /* the rows each sequence kept: [start, n_computed), each with its next token */
    for (int i = 0; i < t->n_pending; i++) {
        mtp_pending *p = &t->pending[i];
        eng_seq *q = p->seq;
        int kept = q ? q->cache.n_computed - p->start : 0;
        if (q && kept > q->n_tokens - 1 - p->start) kept = q->n_tokens - 1 - p->start; /* no next token yet */
        if (kept <= 0) {
            p->seq = NULL;
            continue;
        }
        rows += kept, seqs++;
    }
    int rc = 0;
    if (seqs == 0) goto done;
    if (grow(t, rows, seqs) || bb_begin(&t->bb, rows, seqs, err)) {
        rc = err_fail(err, "speculative decoding: the MTP drafter: out of memory");
        goto done;
    }
    int32_t *last = t->pos;
    eng_seq **order = t->seqs;
    int r = 0, k = 0;
    for (int i = 0; i < t->n_pending && rc == 0; i++) {
        const mtp_pending *p = &t->pending[i];
        eng_seq *q = p->seq;
        if (!q) continue;
        int kept = q->cache.n_computed - p->start;
        if (kept > q->n_tokens - 1 - p->start) kept = q->n_tokens - 1 - p->start;
        memcpy(t->hidden_in + (size_t)r * H, hidden + (size_t)p->row0 * H, (size_t)kept * H * sizeof(float));
        last[k] = p->start + kept - 1;
        bb_segment seg = mtp_segment(q, p->start, kept, q->tokens + p->start + 1, &last[k]);
        if (bb_add(&t->bb, &seg, err)) rc = err_fail_prefix(err, "speculative decoding: the MTP drafter");
        order[k++] = q;
        r += kept;
    }
    if (rc == 0) {
        pdl_batch b = *bb_finish(&t->bb, false);
        rc = model_forward_mtp(t->ctx, t->kv, &b, t->hidden_in, true, t->hidden_out, NULL, err);
        if (rc) err_fail_prefix(err, "speculative decoding: the MTP drafter");
    }
    for (int i = 0; i < k; i++) {
        eng_seq *q = order[i];
        q->spec.mtp_pos = -1;
        if (rc) continue;
        if (!q->spec.mtp_hidden && !(q->spec.mtp_hidden = malloc(H * sizeof(float)))) continue; /* no drafts */
        memcpy(q->spec.mtp_hidden, t->hidden_out + (size_t)i * H, H * sizeof(float));
        q->spec.mtp_pos = last[i];
    }
done:
    t->n_pending = 0;
    return rc;
}

int mtp_propose(spec_mtp *t, eng_seq **qs, const int *want, int n, pdl_error *err) {
    size_t H = (size_t)t->model->cfg.hidden, V = (size_t)t->model->cfg.vocab;
    int m = 0;
    if (grow(t, n, n)) return err_fail(err, "speculative decoding: out of memory");
    eng_seq **act = t->seqs;
    int *act_want = t->want;
    int32_t *pos = t->pos;
    for (int i = 0; i < n; i++) {
        eng_seq *q = qs[i];
        q->spec.n_draft = 0;
        if (q->spec.mtp_pos != q->n_tokens - 2 || !q->spec.mtp_hidden) continue; /* not absorbed up to here */
        /* draft j (j >= 2) is an MTP row at position n_tokens - 3 + j */
        int w = want[i];
        if (w > 1 && sched_reserve(t->sched, q, q->n_tokens + w - 2) != 0) w = 1;
        memcpy(t->hidden_out + (size_t)m * H, q->spec.mtp_hidden, H * sizeof(float));
        act[m] = q, act_want[m] = w;
        m++;
    }
    int rc = 0;
    /* the first draft: the head over the kept output */
    if (m > 0 && model_head_rows(t->ctx, t->hidden_out, m, t->logits, err)) rc = -1;
    while (rc == 0 && m > 0) {
        int keep = 0;
        for (int i = 0; i < m; i++) {
            eng_seq *q = act[i];
            q->spec.draft[q->spec.n_draft++] = spec_argmax(t->logits + (size_t)i * V, (int)V);
            if (q->spec.n_draft < act_want[i]) { /* the next row feeds this draft and this output */
                if (keep != i) memcpy(t->hidden_out + (size_t)keep * H, t->hidden_out + (size_t)i * H, H * sizeof(float));
                act[keep] = q, act_want[keep] = act_want[i];
                keep++;
            }
        }
        m = keep;
        if (m == 0) break;
        if (bb_begin(&t->bb, m, m, err)) {
            rc = err_fail_prefix(err, "speculative decoding");
            break;
        }
        for (int i = 0; i < m && rc == 0; i++) {
            eng_seq *q = act[i];
            pos[i] = q->n_tokens - 2 + q->spec.n_draft;
            bb_segment seg = mtp_segment(q, pos[i], 1, &q->spec.draft[q->spec.n_draft - 1], &pos[i]);
            if (bb_add(&t->bb, &seg, err)) rc = err_fail_prefix(err, "speculative decoding");
        }
        if (rc) break;
        memcpy(t->hidden_in, t->hidden_out, (size_t)m * H * sizeof(float));
        pdl_batch b = *bb_finish(&t->bb, false);
        if (model_forward_mtp(t->ctx, t->kv, &b, t->hidden_in, false, t->hidden_out, t->logits, err))
            rc = err_fail_prefix(err, "speculative decoding: the MTP drafter");
    }
    return rc;
}
