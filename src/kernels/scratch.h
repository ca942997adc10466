/*
 * scratch.h - the scratch memory a kernel call borrows from its caller:
 * one growable buffer that the forward (per context), the vision encoder and
 * a test own and pass to the matmul entry points with every call. A call
 * takes what it needs at its start (the activations quantized, reordered or
 * rounded once, the expanded weight rows of the slow path), carves it into
 * pieces and is done with it when it returns, so calls in sequence share
 * it; one scratch serves one calling thread at a time (the workers of the
 * call only read and write the pieces the caller carved).
 *
 * Not for: anything kept between calls (the forward's activations live in
 * its own buffers, model/context.h).
 *
 * Hot paths allocate nothing: the forward reserves what its matmuls will
 * take when its row capacity grows (matmul_scratch_bytes), so a take
 * within the capacity only returns the buffer. A take that cannot be had
 * returns NULL and the kernel returns -1 without touching its output.
 */
#ifndef PDL_KERNELS_SCRATCH_H
#define PDL_KERNELS_SCRATCH_H

#include <stddef.h>

typedef struct pdl_scratch {
    void *buf;     /* 64-byte aligned, cap bytes */
    size_t cap;
    size_t failed; /* bytes of the last take that failed (for the caller's message) */
    /* A test's failing allocation: when > 0, the fail_in-th take from now
     * fails (1: the next one) and fail_in goes back to 0. takes counts
     * every take, for a test to know how many a forward makes. */
    long fail_in;
    long takes;
} pdl_scratch;

/* At least `need` bytes on a cache line (a heap address 16 mod 64 splits
 * every other vector load of a row across two lines), grown without
 * keeping the old contents when need > cap; NULL when the memory cannot be
 * had (then the buffer is kept as it was). */
void *scratch_take(pdl_scratch *s, size_t need);

/* Grows the buffer to `need` bytes ahead of the takes that will need them
 * (not counted as a take). 0, or -1 when out of memory. */
int scratch_reserve_bytes(pdl_scratch *s, size_t need);

void scratch_free(pdl_scratch *s);

/* A caller's own aligned buffer of at least `need` bytes, kept in *buf
 * (capacity *cap) and grown like a scratch's (the forward's activation
 * buffers). NULL when out of memory (*buf is left as it was). */
void *scratch_grow(void **buf, size_t *cap, size_t need);

/* Bytes rounded up to whole cache lines: the size of one carved piece. */
static inline size_t scratch_piece(size_t bytes) { return (bytes + 63) / 64 * 64; }

#endif
