/*
 * error.h - filling a pdl_error and returning failure in one statement.
 *
 * Library code reports failures as values: `return err_fail(err, "...")`.
 * Nothing here prints or exits.
 */
#ifndef PDL_UTIL_ERROR_H
#define PDL_UTIL_ERROR_H

#include "pagedlm.h"

#if defined(__GNUC__)
#define PDL_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define PDL_PRINTF(a, b)
#endif

/* Formats the message into err (when err is not NULL) and returns -1. */
int err_fail(pdl_error *err, const char *fmt, ...) PDL_PRINTF(2, 3);

/* Prefixes an existing message: "prefix: old message". Returns -1. */
int err_fail_prefix(pdl_error *err, const char *fmt, ...) PDL_PRINTF(2, 3);

#endif
