/*
 * safetensors_write.h - writing a .safetensors file, streaming tensor data
 * (for pagedlm make-random-model --format hf); the engine only reads.
 */
#ifndef PDL_FORMAT_SAFETENSORS_WRITE_H
#define PDL_FORMAT_SAFETENSORS_WRITE_H

#include "format/gguf_write.h"
#include "format/tensor.h"
#include "pagedlm.h"

typedef struct st_out st_out;

st_out *st_out_new(void);
void st_out_free(st_out *s);
/* F32, F16 or BF16 only (safetensors has no Q8_0). */
int st_out_tensor(st_out *s, const char *name, pdl_dtype dtype, int n_dims, const int64_t *shape);
/* Writes the header (8-byte length, JSON padded to 8 bytes) and the data. */
int st_out_write(st_out *s, const char *path, gguf_fill_fn fill, void *user, pdl_error *err);

#endif
