/*
 * safetensors.h - reading Hugging Face safetensors weights, single or sharded.
 *
 * What it is for: parsing each file's 8-byte header length and JSON header
 * (dtype, shape, data_offsets, __metadata__), validating every tensor against
 * the file, and memory-mapping the data; for a folder, finding
 * model.safetensors or the shards listed in model.safetensors.index.json.
 * What it is not for: config.json or tensor naming (src/model/).
 */
#ifndef PDL_FORMAT_SAFETENSORS_H
#define PDL_FORMAT_SAFETENSORS_H

#include "format/tensor.h"
#include "pagedlm.h"

typedef struct st_model st_model;

/* Opens one .safetensors file. */
int st_open_file(st_model **out, const char *path, pdl_error *err);
/* Opens a model folder: model.safetensors, or every shard named by
 * model.safetensors.index.json (each index entry must exist in its shard). */
int st_open_dir(st_model **out, const char *dir, pdl_error *err);
/* st_open_dir with options: ST_ALLOW_U32 also accepts U32 tensors (MLX's
 * packed quantized codes, for format/mlx_quant.c to fold). */
#define ST_ALLOW_U32 1u
int st_open_dir_flags(st_model **out, const char *dir, unsigned flags, pdl_error *err);
void st_close(st_model *m);
/* Gives back the resident pages of a tensor's data that was copied
 * elsewhere (util/file_map.h), in whichever shard holds it. */
void st_release(st_model *m, const void *data, size_t n);

/* All tensors of all shards (names unique across shards). Only F32, F16 and
 * BF16 are accepted (and U32 with ST_ALLOW_U32, and U8 in tensors named
 * *_blocks / *_scales: MXFP4 parts); another dtype fails at open with file,
 * tensor, dtype. */
const pdl_tensor_set *st_tensors(const st_model *m);
/* The same set, for a pass that rewrites entries in place (names unchanged;
 * format/mlx_quant.c). */
pdl_tensor_set *st_tensors_mut(st_model *m);

/* A value from the first file's __metadata__, or NULL. */
const char *st_metadata(const st_model *m, const char *key);

#endif
