/*
 * huge_alloc.c - anonymous mappings aligned to 2 MiB and advised for
 * transparent huge pages (huge_alloc.h).
 *
 * Layout of one allocation: a header page holding the length, then the
 * buffer, which starts on a 2 MiB boundary. The mapping is made 2 MiB
 * larger than needed and the parts before the header page and after the
 * buffer are unmapped again.
 */
#define _DEFAULT_SOURCE
#include "util/huge_alloc.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define PDL_HEAP_ONLY 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define PDL_HEAP_ONLY 1
#endif

#if defined(PDL_HEAP_ONLY)
/* AddressSanitizer checks the bounds of heap buffers, not of mappings: a
 * sanitizer build keeps these buffers on the heap so that a slot or panel
 * index past the end is reported. */
void *huge_alloc(size_t bytes) { return calloc(1, bytes ? bytes : 1); }
void huge_free(void *p) { free(p); }
#else

#define HUGE_PAGE ((size_t)2 << 20)

static size_t page_size(void) {
    long p = sysconf(_SC_PAGESIZE);
    return p > 0 ? (size_t)p : 4096;
}

void *huge_alloc(size_t bytes) {
    size_t page = page_size();
    size_t len = ((bytes ? bytes : 1) + page - 1) / page * page;
    if (len > SIZE_MAX - HUGE_PAGE - page) return NULL;
    size_t total = len + HUGE_PAGE + page;
    uint8_t *base = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) return NULL;
    uintptr_t at = ((uintptr_t)base + page + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE;
    uint8_t *p = (uint8_t *)at, *head = p - page, *end = p + len;
    if (head > base) munmap(base, (size_t)(head - base));
    if (base + total > end) munmap(end, (size_t)(base + total - end));
    *(size_t *)(void *)head = len;
#ifdef MADV_HUGEPAGE
    (void)madvise(p, len, MADV_HUGEPAGE); /* advice: no huge pages is not an error */
#endif
    return p;
}

void huge_free(void *p) {
    if (!p) return;
    size_t page = page_size();
    uint8_t *head = (uint8_t *)p - page;
    munmap(head, *(size_t *)(void *)head + page);
}
#endif

size_t huge_available_memory(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    size_t kb = 0;
    if (f) {
        char key[64];
        size_t v;
        while (fscanf(f, "%63s %zu kB\n", key, &v) == 2)
            if (strcmp(key, "MemAvailable:") == 0) {
                kb = v;
                break;
            }
        fclose(f);
    }
    if (kb == 0) {
        long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
        if (pages > 0 && page > 0) return (size_t)pages * (size_t)page;
    }
    return kb * 1024;
}
