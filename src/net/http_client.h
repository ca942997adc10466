/*
 * http_client.h - a minimal HTTP/1.1 client: the serving benchmark's
 * requests (bench-serve: one POST per connection, the response body
 * delivered as it arrives, so that streamed Server-Sent Events can be timed
 * at chunk arrival) and the chunked-transfer decoder the router
 * (server/router.c) undoes its children's answers with.
 *
 * Only plain http:// URLs; not a general client.
 */
#ifndef PDL_NET_HTTP_CLIENT_H
#define PDL_NET_HTTP_CLIENT_H

#include <stddef.h>

typedef struct http_url {
    char host[256];
    char port[16];
    char path[1024]; /* the base path, without a trailing slash */
} http_url;

/* "http://host:port/base" -> parts; -1 for anything else. */
int http_parse_url(const char *url, http_url *out);

/* Called with each piece of the decoded body as it arrives; return nonzero
 * to stop reading (the connection is closed). */
typedef int (*http_body_fn)(const char *data, size_t len, void *user);

/* POSTs body to url.path + path. *status gets the HTTP status. Returns 0
 * when a response was read to its end (or stopped by the callback), -1 on a
 * connection or protocol error (message in err). */
int http_post(const http_url *url, const char *path, const char *headers_extra, const char *body, size_t body_len,
              http_body_fn on_body, void *user, int *status, char *err, size_t err_len);

/* Incremental decoder of "Transfer-Encoding: chunked" bodies. */
typedef struct http_chunked {
    int state;          /* 0 size line, 1 data, 2 CRLF after data, 3 trailers, 4 done */
    size_t remaining;   /* bytes left in the current chunk */
    char line[64];
    size_t line_len;
} http_chunked;

/* Feeds raw bytes; decoded data goes to on_body. Returns 1 when the last
 * chunk was seen, 0 to continue, -1 on malformed input. */
int http_chunked_feed(http_chunked *c, const char *data, size_t len, http_body_fn on_body, void *user);

/* Splits a Server-Sent Events stream into its "data:" payloads, across
 * arbitrary chunk boundaries. */
typedef struct sse_parser {
    char *buf;
    size_t len, cap;
} sse_parser;

typedef void (*sse_event_fn)(const char *data, size_t len, void *user);
/* Appends bytes; calls on_event for every complete event's data. -1 on OOM. */
int sse_feed(sse_parser *p, const char *data, size_t len, sse_event_fn on_event, void *user);
void sse_free(sse_parser *p);

#endif
