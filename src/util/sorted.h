/*
 * sorted.h - timings and other samples sorted in place, and the median of
 * sorted ones: what bench, bench-grammar, bench-tokenizer and bench-serve
 * report.
 */
#ifndef PDL_UTIL_SORTED_H
#define PDL_UTIL_SORTED_H

#include <stddef.h>

/* v[0..n) in ascending order (qsort). */
void sorted_doubles(double *v, size_t n);

/* The median of n >= 1 sorted values (the mean of the middle two when n
 * is even). */
static inline double sorted_median(const double *v, size_t n) {
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

#endif
