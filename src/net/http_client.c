/*
 * http_client.c - sockets, request writing, response header parsing,
 * chunked decoding and SSE splitting for the serving benchmark.
 */
#define _POSIX_C_SOURCE 200809L
#include "net/http_client.h"

#include <errno.h>
#include <stdbool.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

int http_parse_url(const char *url, http_url *out) {
    memset(out, 0, sizeof *out);
    if (strncmp(url, "http://", 7) != 0) return -1;
    const char *h = url + 7, *slash = strchr(h, '/');
    size_t hostport = slash ? (size_t)(slash - h) : strlen(h);
    char hp[300];
    if (hostport == 0 || hostport >= sizeof hp) return -1;
    memcpy(hp, h, hostport);
    hp[hostport] = '\0';
    char *colon = strrchr(hp, ':');
    if (colon && !strchr(hp, ']')) {
        *colon = '\0';
        snprintf(out->port, sizeof out->port, "%s", colon + 1);
    } else {
        snprintf(out->port, sizeof out->port, "80");
    }
    size_t hlen = strlen(hp);
    if (hlen >= sizeof out->host || !hlen) return -1;
    memcpy(out->host, hp, hlen + 1);
    if (slash) snprintf(out->path, sizeof out->path, "%s", slash);
    size_t pl = strlen(out->path);
    while (pl > 0 && out->path[pl - 1] == '/') out->path[--pl] = '\0';
    return 0;
}

int http_chunked_feed(http_chunked *c, const char *data, size_t len, http_body_fn on_body, void *user) {
    size_t i = 0;
    while (i < len) {
        if (c->state == 4) return 1;
        if (c->state == 1) {
            size_t n = len - i < c->remaining ? len - i : c->remaining;
            if (n && on_body(data + i, n, user)) return 1;
            i += n;
            c->remaining -= n;
            if (c->remaining == 0) c->state = 2;
            continue;
        }
        char ch = data[i++];
        if (ch == '\r') continue;
        if (ch != '\n') {
            if (c->line_len + 1 >= sizeof c->line) return -1;
            c->line[c->line_len++] = ch;
            continue;
        }
        c->line[c->line_len] = '\0';
        if (c->state == 0) {
            char *end;
            errno = 0;
            unsigned long long n = strtoull(c->line, &end, 16);
            if (end == c->line || errno) return -1;
            c->remaining = (size_t)n;
            c->state = n == 0 ? 3 : 1;
        } else if (c->state == 2) {
            if (c->line_len != 0) return -1;
            c->state = 0;
        } else if (c->state == 3) {
            if (c->line_len == 0) c->state = 4; /* end of trailers */
        }
        c->line_len = 0;
    }
    return c->state == 4;
}

int sse_feed(sse_parser *p, const char *data, size_t len, sse_event_fn on_event, void *user) {
    if (p->len + len + 1 > p->cap) {
        size_t cap = (p->len + len + 1) * 2;
        char *b = realloc(p->buf, cap);
        if (!b) return -1;
        p->buf = b;
        p->cap = cap;
    }
    memcpy(p->buf + p->len, data, len);
    p->len += len;
    p->buf[p->len] = '\0';
    /* events end with a blank line; "\n\n" (or "\r\n\r\n") */
    size_t start = 0;
    for (;;) {
        char *end = strstr(p->buf + start, "\n\n");
        char *end_crlf = strstr(p->buf + start, "\r\n\r\n");
        size_t sep = 2;
        if (!end || (end_crlf && end_crlf < end)) {
            end = end_crlf;
            sep = 4;
        }
        if (!end) break;
        /* each "data:" line of the event */
        char *line = p->buf + start;
        while (line < end) {
            char *nl = memchr(line, '\n', (size_t)(end - line));
            char *le = nl ? nl : end;
            size_t ll = (size_t)(le - line);
            if (ll && line[ll - 1] == '\r') ll--;
            if (ll >= 5 && memcmp(line, "data:", 5) == 0) {
                const char *d = line + 5;
                size_t dl = ll - 5;
                if (dl && *d == ' ') d++, dl--;
                on_event(d, dl, user);
            }
            line = nl ? nl + 1 : end;
        }
        start = (size_t)(end - p->buf) + sep;
    }
    memmove(p->buf, p->buf + start, p->len - start + 1);
    p->len -= start;
    return 0;
}

void sse_free(sse_parser *p) {
    free(p->buf);
    memset(p, 0, sizeof *p);
}

static int write_all(int fd, const char *p, size_t n) {
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

int http_post(const http_url *url, const char *path, const char *headers_extra, const char *body, size_t body_len,
              http_body_fn on_body, void *user, int *status, char *err, size_t err_len) {
    *status = 0;
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
    int gai = getaddrinfo(url->host, url->port, &hints, &res);
    if (gai) {
        snprintf(err, err_len, "%s:%s: %s", url->host, url->port, gai_strerror(gai));
        return -1;
    }
    int fd = -1;
    for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
        if (fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    if (fd < 0) {
        snprintf(err, err_len, "cannot connect to %s:%s: %s", url->host, url->port, strerror(errno));
        return -1;
    }
    char head[2048];
    int hl = snprintf(head, sizeof head,
                      "POST %s%s HTTP/1.1\r\nHost: %s:%s\r\nContent-Type: application/json\r\n"
                      "Accept: text/event-stream, application/json\r\nContent-Length: %zu\r\nConnection: close\r\n%s\r\n",
                      url->path, path, url->host, url->port, body_len, headers_extra ? headers_extra : "");
    if (hl < 0 || (size_t)hl >= sizeof head || write_all(fd, head, (size_t)hl) || write_all(fd, body, body_len)) {
        snprintf(err, err_len, "sending the request failed: %s", strerror(errno));
        close(fd);
        return -1;
    }
    /* headers */
    char buf[16384];
    size_t have = 0;
    char *hdr_end = NULL;
    while (!hdr_end) {
        if (have == sizeof buf - 1) {
            snprintf(err, err_len, "response headers too long");
            close(fd);
            return -1;
        }
        ssize_t r = recv(fd, buf + have, sizeof buf - 1 - have, 0);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            snprintf(err, err_len, "connection closed before the response headers");
            close(fd);
            return -1;
        }
        have += (size_t)r;
        buf[have] = '\0';
        hdr_end = strstr(buf, "\r\n\r\n");
    }
    if (sscanf(buf, "HTTP/1.%*d %d", status) != 1) {
        snprintf(err, err_len, "not an HTTP response");
        close(fd);
        return -1;
    }
    bool chunked = false;
    long content_length = -1;
    for (char *line = strstr(buf, "\r\n") + 2; line < hdr_end; line = strstr(line, "\r\n") + 2) {
        if (strncasecmp(line, "Transfer-Encoding:", 18) == 0 && strstr(line, "chunked") &&
            strstr(line, "chunked") < strstr(line, "\r\n"))
            chunked = true;
        if (strncasecmp(line, "Content-Length:", 15) == 0) content_length = strtol(line + 15, NULL, 10);
    }
    size_t body_off = (size_t)(hdr_end + 4 - buf);
    http_chunked dec = {0};
    int rc = 0, stop = 0;
    long received = 0;
    const char *p = buf + body_off;
    size_t n = have - body_off;
    for (;;) {
        if (n) {
            if (chunked) {
                int d = http_chunked_feed(&dec, p, n, on_body, user);
                if (d < 0) {
                    snprintf(err, err_len, "malformed chunked body");
                    rc = -1;
                    break;
                }
                if (d == 1) break;
            } else {
                if (on_body(p, n, user)) stop = 1;
                received += (long)n;
                if (stop || (content_length >= 0 && received >= content_length)) break;
            }
        }
        ssize_t r = recv(fd, buf, sizeof buf, 0);
        if (r < 0 && errno == EINTR) {
            n = 0;
            continue;
        }
        if (r < 0) {
            snprintf(err, err_len, "reading the response failed: %s", strerror(errno));
            rc = -1;
            break;
        }
        if (r == 0) {
            if (chunked || (content_length >= 0 && received < content_length)) {
                snprintf(err, err_len, "connection closed mid-response");
                rc = -1;
            }
            break;
        }
        p = buf;
        n = (size_t)r;
    }
    close(fd);
    return rc;
}
