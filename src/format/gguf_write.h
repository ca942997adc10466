/*
 * gguf_write.h - writing GGUF v3 files, streaming tensor data so that a
 * multi-gigabyte model never sits in memory at once.
 *
 * For tools that make models (pagedlm make-random-model); the engine itself
 * only reads GGUF (gguf.h).
 */
#ifndef PDL_FORMAT_GGUF_WRITE_H
#define PDL_FORMAT_GGUF_WRITE_H

#include <stdint.h>
#include <stdio.h>

#include "format/tensor.h"
#include "pagedlm.h"

typedef struct gguf_out gguf_out;

/* Fills `rows` rows starting at row0 of tensor t into buf (row bytes each). */
typedef void (*gguf_fill_fn)(const pdl_tensor *t, int64_t row0, int64_t rows, void *buf, void *user);

gguf_out *gguf_out_new(void);
void gguf_out_free(gguf_out *g);
int gguf_out_u32(gguf_out *g, const char *key, uint32_t v);
int gguf_out_f32(gguf_out *g, const char *key, float v);
int gguf_out_bool(gguf_out *g, const char *key, int v);
int gguf_out_str(gguf_out *g, const char *key, const char *v);
/* Arrays: strings (copied) and 32-bit integers / floats. */
int gguf_out_str_arr(gguf_out *g, const char *key, const char *const *v, size_t n);
int gguf_out_i32_arr(gguf_out *g, const char *key, const int32_t *v, size_t n);
/* A tensor with pdl_tensor shape order (outermost first) and dtype. */
int gguf_out_tensor(gguf_out *g, const char *name, pdl_dtype dtype, int n_dims, const int64_t *shape);
/* Streams one tensor's data to f in blocks of rows from fill; 0 or -1
 * (shared by the GGUF and safetensors writers). */
int gguf_write_tensor_rows(FILE *f, const pdl_tensor *t, gguf_fill_fn fill, void *user);

/* Writes the file; fill provides every tensor's data. */
int gguf_out_write(gguf_out *g, const char *path, gguf_fill_fn fill, void *user, pdl_error *err);

#endif
