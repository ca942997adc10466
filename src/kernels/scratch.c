/*
 * scratch.c - the caller-owned scratch buffer of the kernels (scratch.h).
 */
#include "kernels/scratch.h"

#include <stdlib.h>

void *scratch_grow(void **buf, size_t *cap, size_t need) {
    if (need <= *cap && *buf) return *buf;
    size_t bytes = scratch_piece(need ? need : 1);
    void *p = aligned_alloc(64, bytes);
    if (!p) return NULL;
    free(*buf);
    *buf = p;
    *cap = bytes;
    return p;
}

static int grow(pdl_scratch *s, size_t need) { return scratch_grow(&s->buf, &s->cap, need) ? 0 : -1; }

void *scratch_take(pdl_scratch *s, size_t need) {
    s->takes++;
    if (s->fail_in > 0 && --s->fail_in == 0) {
        s->failed = need;
        return NULL;
    }
    if (grow(s, need)) {
        s->failed = need;
        return NULL;
    }
    return s->buf;
}

int scratch_reserve_bytes(pdl_scratch *s, size_t need) {
    if (grow(s, need)) {
        s->failed = need;
        return -1;
    }
    return 0;
}

void scratch_free(pdl_scratch *s) {
    free(s->buf);
    s->buf = NULL;
    s->cap = 0;
}
