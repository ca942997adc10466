/*
 * gguf.h - reading GGUF (v2, v3) files: metadata and memory-mapped tensors.
 *
 * What it is for: parsing the header, every metadata key/value (all value
 * types, arrays of strings included), the tensor infos and the aligned data
 * section of a .gguf file, and validating all of it against the file size so
 * that no later read goes out of bounds. What it is not for: knowing what a
 * key means for a model (src/model/model_load_gguf.c) or a tokenizer.
 */
#ifndef PDL_FORMAT_GGUF_H
#define PDL_FORMAT_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "format/tensor.h"
#include "pagedlm.h"

/* Metadata value types, numbered as in the GGUF specification. */
typedef enum gguf_type {
    GGUF_TYPE_UINT8 = 0,
    GGUF_TYPE_INT8 = 1,
    GGUF_TYPE_UINT16 = 2,
    GGUF_TYPE_INT16 = 3,
    GGUF_TYPE_UINT32 = 4,
    GGUF_TYPE_INT32 = 5,
    GGUF_TYPE_FLOAT32 = 6,
    GGUF_TYPE_BOOL = 7,
    GGUF_TYPE_STRING = 8,
    GGUF_TYPE_ARRAY = 9,
    GGUF_TYPE_UINT64 = 10,
    GGUF_TYPE_INT64 = 11,
    GGUF_TYPE_FLOAT64 = 12,
} gguf_type;

const char *gguf_type_name(gguf_type t);
/* Bytes of one scalar value of type t; 0 for STRING, ARRAY and unknown types. */
size_t gguf_type_size(uint32_t t);

/* A string inside the mapping: not NUL-terminated, validated as UTF-8. */
typedef struct gguf_str {
    const char *ptr;
    uint64_t len;
} gguf_str;

/* An array value. Numeric elements are read with gguf_arr_* (the data may be
 * unaligned); string elements are in `strings`. Nested arrays are rejected. */
typedef struct gguf_array {
    gguf_type elem_type;
    uint64_t count;
    const uint8_t *data;      /* numeric: count * element size bytes */
    const gguf_str *strings;  /* string arrays: [count] */
} gguf_array;

typedef struct gguf_kv {
    gguf_str key;
    gguf_type type;
    uint64_t offset;          /* file offset of the key, for messages */
    union {
        uint64_t u64;         /* UINT8/16/32/64 */
        int64_t i64;          /* INT8/16/32/64 */
        double f64;           /* FLOAT32/64 */
        bool b;
        gguf_str str;
        gguf_array arr;
    } v;
} gguf_kv;

typedef struct gguf_file gguf_file;

/* Opens and validates a GGUF file. Errors name the file, the byte offset and
 * the key or tensor at fault. Tensor types other than F32, F16, BF16 and Q8_0
 * are rejected with the tensor's name and type name. */
int gguf_open(gguf_file **out, const char *path, pdl_error *err);
void gguf_close(gguf_file *f);
/* Gives back the resident pages of a tensor's data that was copied
 * elsewhere (util/file_map.h); a range outside the file is left alone. */
void gguf_release(gguf_file *f, const void *data, size_t n);

const char *gguf_path(const gguf_file *f);
uint32_t gguf_version(const gguf_file *f);
uint64_t gguf_alignment(const gguf_file *f);

size_t gguf_kv_count(const gguf_file *f);
const gguf_kv *gguf_kv_at(const gguf_file *f, size_t i);
const gguf_kv *gguf_find_kv(const gguf_file *f, const char *key);

/* Typed getters. Return 1 when found and converted, 0 when the key is absent
 * (out untouched), -1 when present with an unusable type or value (err says
 * which key, its type and offset). Integer getters accept any integer type
 * whose value fits; gguf_get_f32 accepts FLOAT32/FLOAT64 and integers. */
int gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out, pdl_error *err);
int gguf_get_i32(const gguf_file *f, const char *key, int32_t *out, pdl_error *err);
int gguf_get_f32(const gguf_file *f, const char *key, float *out, pdl_error *err);
int gguf_get_bool(const gguf_file *f, const char *key, bool *out, pdl_error *err);
/* *out is a NUL-terminated copy owned by the gguf_file. */
int gguf_get_str(const gguf_file *f, const char *key, const char **out, pdl_error *err);
int gguf_get_arr(const gguf_file *f, const char *key, gguf_array *out, pdl_error *err);

/* Numeric array element access with conversion (index must be < count). */
int64_t gguf_arr_i64(const gguf_array *a, uint64_t i);
double gguf_arr_f64(const gguf_array *a, uint64_t i);

/* The tensors, with shapes in pdl_tensor order (GGUF ne[] reversed) and data
 * pointing into the mapping. */
const pdl_tensor_set *gguf_tensors(const gguf_file *f);

#endif
