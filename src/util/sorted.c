/*
 * sorted.c - sorted_doubles (sorted.h).
 */
#include "util/sorted.h"

#include <stdlib.h>

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

void sorted_doubles(double *v, size_t n) { qsort(v, n, sizeof *v, cmp_double); }
