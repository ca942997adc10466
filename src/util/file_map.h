/*
 * file_map.h - how the library and the programs open the files they are
 * given: read-only memory mappings of model files, and bounded reads of
 * small ones (JSON, chat templates, request files).
 *
 * Every path must name a regular file: a FIFO, a device or a directory is
 * refused before anything is read (and opening never blocks on a FIFO), and
 * what is read into memory has a size limit per kind of file, so
 * `--chat-template /dev/zero` is an error, not a process that reads until
 * the kernel kills it. Model weights are used in place from the mapping;
 * nothing is copied.
 */
#ifndef PDL_UTIL_FILE_MAP_H
#define PDL_UTIL_FILE_MAP_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "pagedlm.h"

typedef struct pdl_file_map {
    const uint8_t *data;  /* [size] bytes, or NULL for an empty file */
    size_t size;
    char *path;           /* owned copy, for error messages */
} pdl_file_map;

int file_map_open(pdl_file_map *map, const char *path, pdl_error *err);
void file_map_close(pdl_file_map *map);
/* When [p, p + n) lies inside the mapping: gives the whole pages inside it
 * back to the kernel (they are read from the file again if touched), so a
 * tensor copied elsewhere (weight panels) stops counting in the resident
 * set. Returns whether the range was inside. */
int file_map_release(const pdl_file_map *map, const void *p, size_t n);

/* Size limits of whole-file reads, per kind of file. */
#define PDL_READ_MAX_JSON ((size_t)64 << 20)        /* config.json, tokenizer_config.json, an index, ... */
#define PDL_READ_MAX_TOKENIZER ((size_t)512 << 20)  /* tokenizer.json (real ones reach ~35 MB) */
#define PDL_READ_MAX_TEMPLATE ((size_t)4 << 20)     /* a chat template's source */
#define PDL_READ_MAX_CONTEXT ((size_t)8 << 20)      /* a chat template's context (pagedlm template) */
#define PDL_READ_MAX_LINE ((size_t)64 << 20)        /* one line of a JSONL request file */

/* Reads a whole regular file of at most max_bytes into a NUL-terminated
 * malloc'ed buffer (*len bytes; the text itself may hold NUL bytes). */
int file_read(const char *path, size_t max_bytes, char **out, size_t *len, pdl_error *err);

/* A regular file opened for reading ("rb"), or NULL with err filled. */
FILE *file_open_regular(const char *path, pdl_error *err);

/* Reads one line (with its '\n', NUL-terminated) into *buf, growing it up to
 * max bytes. Returns its length, 0 at the end of the file, or -1 when the
 * line is longer than max (*buf then holds its first max bytes) or memory
 * ran out (errno ENOMEM). */
long long file_read_line(FILE *f, char **buf, size_t *cap, size_t max);

#endif
