/*
 * huge_alloc.h - large, long-lived buffers the kernel may back with 2 MiB
 * pages (the weight matrices' copies and the KV cache pools), and how much
 * memory there is for them.
 *
 * A decode step streams every weight once; through 4 KiB pages that is a
 * TLB miss every 4 KiB (about 300,000 per token for a 1.2 GB model).
 * Linux's transparent huge pages remove most of them, but with the usual
 * setting ("madvise") only for ranges that ask. These buffers are mapped
 * anonymously, start on a 2 MiB boundary and are advised MADV_HUGEPAGE;
 * where the kernel has no huge pages they are ordinary memory. Builds with
 * AddressSanitizer take them from the heap instead (bounds are checked
 * there).
 */
#ifndef PDL_UTIL_HUGE_ALLOC_H
#define PDL_UTIL_HUGE_ALLOC_H

#include <stddef.h>

/* bytes of zeroed memory (pages are zero-filled when first touched, so an
 * unused part costs nothing), 2 MiB aligned; NULL when out of memory. */
void *huge_alloc(size_t bytes);

/* Frees a huge_alloc buffer; NULL is ignored. */
void huge_free(void *p);

/* Bytes the system can still give without swapping (Linux MemAvailable;
 * else the free physical pages; 0 when unknown), for deciding whether a
 * large buffer should be made at all. */
size_t huge_available_memory(void);

#endif
