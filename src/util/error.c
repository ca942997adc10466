/*
 * error.c - formatting failure messages into pdl_error.
 */
#include "util/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int err_fail(pdl_error *err, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->message, sizeof err->message, fmt, ap);
        va_end(ap);
    }
    return -1;
}

int err_fail_prefix(pdl_error *err, const char *fmt, ...) {
    if (err) {
        char prefix[PDL_ERROR_MAX];
        char old[PDL_ERROR_MAX];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(prefix, sizeof prefix, fmt, ap);
        va_end(ap);
        memcpy(old, err->message, sizeof old);
        old[sizeof old - 1] = '\0';
        /* prefix + ": " + old, cut at the buffer's end */
        size_t cap = sizeof err->message, n = 0;
        for (const char *parts[3] = {prefix, ": ", old}, **p = parts; p < parts + 3; p++)
            for (const char *c = *p; *c && n + 1 < cap; c++) err->message[n++] = *c;
        err->message[n] = '\0';
    }
    return -1;
}
