/*
 * st_writer.h - writing safetensors files and index.json folders for tests.
 *
 * What it is for: tests build valid safetensors files from tensors (name,
 * dtype string, shape, bytes) and __metadata__, or deliberately broken ones:
 * a raw JSON value for any header entry, overridden data_offsets, a byte
 * count that disagrees with the shape, or a whole raw header string. The
 * serialized bytes are available so a test can corrupt them before writing.
 * Several writers and stw_write_index() make a sharded Hugging Face folder.
 * What it is not for: library code (it aborts on out-of-memory).
 *
 * Layout of what it writes: u64 little-endian header length N, N bytes of
 * compact JSON padded with spaces so that the data section starts at a
 * multiple of 8, then the tensors' bytes. Header entries keep insertion order
 * (__metadata__ first); data is laid out contiguously, widest dtype first, so
 * every tensor is aligned to its element size, as the reference writer does.
 */
#ifndef PDL_TEST_ST_WRITER_H
#define PDL_TEST_ST_WRITER_H

#include <stddef.h>
#include <stdint.h>

typedef struct stw_writer stw_writer;

stw_writer *stw_new(void);
void stw_free(stw_writer *w);

/* Bytes per element of a safetensors dtype string ("F32" -> 4, "BF16" -> 2,
 * "F64" -> 8, "BOOL" -> 1, ...); 1 for strings it does not know. */
size_t stw_dtype_size(const char *dtype);

/* Adds a tensor whose byte count follows from dtype and shape. data may be
 * NULL: the bytes are then a deterministic pattern (byte i = i * 31 + 7). */
void stw_add(stw_writer *w, const char *name, const char *dtype, int n_dims,
             const int64_t *shape, const void *data);
/* Adds a tensor with exactly nbytes bytes of data, whatever the shape says. */
void stw_add_bytes(stw_writer *w, const char *name, const char *dtype, int n_dims,
                   const int64_t *shape, const void *data, size_t nbytes);
/* Shorthand for an F32 tensor. */
void stw_add_f32(stw_writer *w, const char *name, int n_dims, const int64_t *shape,
                 const float *data);
/* A header entry whose value is the given JSON text, written verbatim (it
 * need not be valid); no data is added for it. name "__metadata__" replaces
 * the metadata object. */
void stw_add_raw_entry(stw_writer *w, const char *name, const char *json_value);
/* Writes data_offsets [begin, end] for an already added tensor instead of the
 * real ones (its data stays where the layout put it). */
void stw_set_offsets(stw_writer *w, const char *name, uint64_t begin, uint64_t end);
/* Adds a __metadata__ string (keys in insertion order). */
void stw_metadata(stw_writer *w, const char *key, const char *value);

/* The padded header JSON (NUL-terminated, malloc'ed); *len gets its length. */
char *stw_header(const stw_writer *w, size_t *len);
/* The whole file (malloc'ed); *len gets its length. */
uint8_t *stw_serialize(const stw_writer *w, size_t *len);
/* Where a tensor's data really is: begin/end relative to the data section,
 * and the data section's absolute offset. Returns 0, or -1 for an unknown name. */
int stw_offsets(const stw_writer *w, const char *name, uint64_t *begin, uint64_t *end,
                uint64_t *data_start);
/* Writes the file; 0 on success, -1 on an I/O error. */
int stw_write(const stw_writer *w, const char *path);

/* A file made of an 8-byte length header_len, header_len bytes of header and
 * data_len bytes of data (malloc'ed); *len gets its length. */
uint8_t *stw_raw_bytes(const char *header, size_t header_len, const void *data, size_t data_len,
                       size_t *len);
/* The same, written to path; 0 or -1. */
int stw_write_raw(const char *path, const char *header, size_t header_len, const void *data,
                  size_t data_len);

/* Writes a model.safetensors.index.json: {"metadata": {"total_size": 0},
 * "weight_map": {names[i]: shards[i]}}. 0 or -1. */
int stw_write_index(const char *path, size_t n, const char *const *names,
                    const char *const *shards);

#endif
