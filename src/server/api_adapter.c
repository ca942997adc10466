/*
 * api_adapter.c - what the adapters (api_adapter.h) share: the chat
 * stream's SSE text cut into its chunks for an adapter, and SSE events in
 * the "event: TYPE / data: JSON" form the Responses and Messages streams use.
 */
#include "server/api_adapter.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void srv_sse_event(sbuf *out, const char *type, json_t *o) {
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (!s) {
        out->oom = true;
        return;
    }
    sbuf_printf(out, "event: %s\ndata: ", type);
    sbuf_puts(out, s);
    sbuf_puts(out, "\n\n");
    free(s);
}

void srv_adapter_transcode(const srv_adapter_ops *ad, void *state, const char *chat_sse, size_t len, sbuf *out) {
    size_t i = 0;
    while (i < len) {
        /* one event: up to a blank line */
        const char *ev = chat_sse + i, *end = NULL;
        for (size_t k = i; k + 1 < len; k++)
            if (chat_sse[k] == '\n' && chat_sse[k + 1] == '\n') {
                end = chat_sse + k;
                break;
            }
        size_t n = end ? (size_t)(end - ev) : len - i;
        i += n + (end ? 2 : 0);
        if (n >= 6 && memcmp(ev, "data: ", 6) == 0) {
            if (n == 12 && memcmp(ev + 6, "[DONE]", 6) == 0) {
                ad->stream_end(state, out);
                continue;
            }
            json_t *chunk = json_loadb(ev + 6, n - 6, 0, NULL);
            if (!chunk) {
                out->oom = true; /* our own text: only memory can fail */
                continue;
            }
            if (json_object_get(chunk, "error")) {
                srv_api_error e = {.status = 500, .type = "server_error"};
                const json_t *m = json_object_get(json_object_get(chunk, "error"), "message");
                snprintf(e.message, sizeof e.message, "%s", json_is_string(m) ? json_string_value(m) : "error");
                ad->stream_error(state, &e, out);
            } else {
                ad->stream_chunk(state, chunk, out);
            }
            json_decref(chunk);
        } else if (n > 0 && ev[0] == ':') { /* a comment (keep-alive, probe) */
            sbuf_append(out, ev, n);
            sbuf_puts(out, "\n\n");
        }
    }
}
