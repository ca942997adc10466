/*
 * file_map.h - read-only memory mapping of whole files.
 *
 * Model weights are used in place from the mapping; nothing is copied.
 */
#ifndef PDL_UTIL_FILE_MAP_H
#define PDL_UTIL_FILE_MAP_H

#include <stddef.h>
#include <stdint.h>

#include "pagedlm.h"

typedef struct pdl_file_map {
    const uint8_t *data;  /* [size] bytes, or NULL for an empty file */
    size_t size;
    char *path;           /* owned copy, for error messages */
} pdl_file_map;

int pdl_file_map_open(pdl_file_map *map, const char *path, pdl_error *err);
void pdl_file_map_close(pdl_file_map *map);
/* When [p, p + n) lies inside the mapping: gives the whole pages inside it
 * back to the kernel (they are read from the file again if touched), so a
 * tensor copied elsewhere (weight panels) stops counting in the resident
 * set. Returns whether the range was inside. */
int pdl_file_map_release(const pdl_file_map *map, const void *p, size_t n);

/* Reads a whole (small) file into a NUL-terminated malloc'ed buffer. */
int pdl_read_file(const char *path, char **out, size_t *len, pdl_error *err);

#endif
