/*
 * stop_match.h - finding a request's stop strings in its output as the text
 * streams out, in time proportional to the new text whatever the stop
 * strings' number and length (an Aho-Corasick automaton over them).
 *
 * The matcher is built once per request and shared, read-only, by its
 * sequences (and, as it is read-only, by threads); each sequence keeps one
 * int32 state. After any text, the state's
 * depth is the length of the longest tail of the output that is still the
 * start of some stop string: exactly the bytes the engine must hold back
 * (they may yet turn into a stop string), and everything before them can be
 * released.
 *
 * Which stop wins: the output stops at the first byte where any stop string
 * is complete; among the stop strings that end there, the longest (it starts
 * earliest). That depends on the text only, never on how it was cut into
 * tokens.
 *
 * What it is not for: tokens that stop a sequence (stop_token_ids, EOS),
 * which the engine checks by id.
 */
#ifndef PDL_ENGINE_STOP_MATCH_H
#define PDL_ENGINE_STOP_MATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pagedlm.h"

/* The internal name of the public pdl_stop_matcher (pagedlm.h). */
typedef struct pdl_stop_matcher stop_matcher;

/* A matcher for n non-empty stop strings (byte strings; lens[i] bytes, or
 * strlen when lens is NULL), in time linear in their bytes (plus sorting n
 * strings). Reference counted: the server builds it while it parses a
 * request, off the engine thread, and the engine keeps a reference. */
int stop_matcher_new(stop_matcher **out, const char *const *stops, const size_t *lens, int n, pdl_error *err);
/* Another reference; stop_matcher_free drops one. */
stop_matcher *stop_matcher_ref(stop_matcher *m);
void stop_matcher_free(stop_matcher *m);
/* The n it was built for. */
int stop_matcher_count(const stop_matcher *m);

/* The state before any text. */
#define STOP_STATE_START 0

typedef struct stop_hit {
    int stop;          /* which stop string (the index given to stop_matcher_new) */
    size_t end;        /* bytes of the fed text up to and including the stop string's last byte */
    size_t len;        /* the stop string's length */
} stop_hit;

/* Advances *state over text[0, n). Returns true at the first byte that
 * completes a stop string (then *hit says which and where, and *state is
 * left at that byte), false when none completed (the whole text consumed).
 * *steps (may be NULL) counts the automaton's moves, fail links included:
 * at most 2 per byte fed over a sequence's life (tests bound it). */
bool stop_matcher_feed(const stop_matcher *m, int32_t *state, const char *text, size_t n, stop_hit *hit,
                       uint64_t *steps);

/* Bytes at the end of the text fed so far that may still begin a stop
 * string (the state's depth). */
size_t stop_matcher_hold(const stop_matcher *m, int32_t state);

#endif
