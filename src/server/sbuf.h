/*
 * sbuf.h - a growable byte buffer for the text the server sends (JSON
 * bodies, SSE chunks, the metrics exposition).
 *
 * On out-of-memory the buffer remembers the failure (oom) and ignores further
 * appends, so a caller checks once at the end.
 */
#ifndef PDL_SERVER_SBUF_H
#define PDL_SERVER_SBUF_H

#include <stdbool.h>
#include <stddef.h>

typedef struct sbuf {
    char *data;  /* NUL-terminated when len > 0 */
    size_t len, cap;
    bool oom;
} sbuf;

void sbuf_append(sbuf *b, const char *s, size_t n);
void sbuf_puts(sbuf *b, const char *s);
void sbuf_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Drops the first n bytes (already sent). */
void sbuf_consume(sbuf *b, size_t n);
/* Hands the text over (malloc'ed, "" when empty; NULL after an oom) and empties b. */
char *sbuf_take(sbuf *b, size_t *len);
void sbuf_free(sbuf *b);

#endif
