/*
 * gguf_writer.h - building GGUF files in memory for tests.
 *
 * What it is for: tests that need a GGUF file (the GGUF reader's own tests,
 * and model/tokenizer tests that write whole tiny models: a llama with a
 * missing tensor, a wrong shape, an odd tokenizer) build one here: add
 * key/values of any type and tensors with their bytes, then take the file
 * image (to corrupt it) or write it to a path. The writer lays the file out
 * exactly as the format says (tensor data at offsets that are multiples of
 * the alignment, the data section aligned) and otherwise writes what it is
 * given without judging it: duplicate keys, bad dimensions or inconsistent
 * sizes are written as asked, so that tests can make invalid files.
 *
 * What it is not for: library code (it lives under tests/ and aborts when
 * out of memory).
 *
 * Conventions: tensor dimensions passed as `ne` are in GGUF order (ne[0] is
 * the fastest-varying, i.e. the row length); gguf_writer_add_tensor_f32 takes
 * a pdl_tensor-style shape (outermost first) instead. Values are passed in
 * host representation and written little-endian.
 */
#ifndef PDL_TEST_GGUF_WRITER_H
#define PDL_TEST_GGUF_WRITER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "format/gguf.h"

/* ggml tensor type ids (ggml.h), for gguf_writer_add_tensor. */
enum {
    GW_GGML_F32 = 0,
    GW_GGML_F16 = 1,
    GW_GGML_Q4_0 = 2,
    GW_GGML_Q4_1 = 3,
    GW_GGML_Q5_0 = 6,
    GW_GGML_Q5_1 = 7,
    GW_GGML_Q8_0 = 8,
    GW_GGML_Q8_1 = 9,
    GW_GGML_Q2_K = 10,
    GW_GGML_Q3_K = 11,
    GW_GGML_Q4_K = 12,
    GW_GGML_Q5_K = 13,
    GW_GGML_Q6_K = 14,
    GW_GGML_Q8_K = 15,
    GW_GGML_IQ2_XXS = 16,
    GW_GGML_IQ4_NL = 20,
    GW_GGML_IQ4_XS = 23,
    GW_GGML_I8 = 24,
    GW_GGML_I32 = 26,
    GW_GGML_F64 = 28,
    GW_GGML_BF16 = 30,
    GW_GGML_TQ1_0 = 34,
    GW_GGML_TQ2_0 = 35,
    GW_GGML_MXFP4 = 39,
};

typedef struct gguf_writer gguf_writer;

/* A writer for a file of the given GGUF version (normally 3; any value is
 * written as given, so 1 or 4 make files a reader must reject). */
gguf_writer *gguf_writer_new(uint32_t version);
void gguf_writer_free(gguf_writer *w);

/* Scalars. */
void gguf_writer_add_u8(gguf_writer *w, const char *key, uint8_t v);
void gguf_writer_add_i8(gguf_writer *w, const char *key, int8_t v);
void gguf_writer_add_u16(gguf_writer *w, const char *key, uint16_t v);
void gguf_writer_add_i16(gguf_writer *w, const char *key, int16_t v);
void gguf_writer_add_u32(gguf_writer *w, const char *key, uint32_t v);
void gguf_writer_add_i32(gguf_writer *w, const char *key, int32_t v);
void gguf_writer_add_f32(gguf_writer *w, const char *key, float v);
void gguf_writer_add_bool(gguf_writer *w, const char *key, bool v);
void gguf_writer_add_u64(gguf_writer *w, const char *key, uint64_t v);
void gguf_writer_add_i64(gguf_writer *w, const char *key, int64_t v);
void gguf_writer_add_f64(gguf_writer *w, const char *key, double v);
void gguf_writer_add_str(gguf_writer *w, const char *key, const char *v);
/* A string value of len raw bytes (may hold NULs or invalid UTF-8). */
void gguf_writer_add_strn(gguf_writer *w, const char *key, const char *v, size_t len);

/* A numeric (or BOOL) array: `elems` points to count values of the C type
 * matching elem_type (uint8_t, int8_t, ..., float, bool, uint64_t, int64_t,
 * double). */
void gguf_writer_add_arr(gguf_writer *w, const char *key, gguf_type elem_type,
                         const void *elems, size_t count);
/* An array of NUL-terminated strings. */
void gguf_writer_add_str_arr(gguf_writer *w, const char *key, const char *const *strs,
                             size_t count);

/* A key/value whose value bytes are given verbatim after the u32 type: for
 * unknown types, nested arrays and other malformed values. */
void gguf_writer_add_raw_kv(gguf_writer *w, const char *key, uint32_t type, const void *value,
                            size_t len);

/* Adds the general.alignment key (UINT32) and lays the data out with it
 * (when it is a nonzero power of two; otherwise the layout keeps 32). */
void gguf_writer_set_alignment(gguf_writer *w, uint32_t alignment);

/* Bytes of a tensor of the given ggml type and ne dims (ne[0] a multiple of
 * the block size); 0 for types the writer does not know the size of. */
size_t gguf_writer_tensor_nbytes(uint32_t ggml_type, int n_dims, const uint64_t *ne);

/* A tensor of any ggml type with n_dims (0..8) dims ne[] in GGUF order and
 * nbytes of data (copied; NULL data writes zeros). Its offset is the next
 * multiple of the alignment after the previous tensor's data. */
void gguf_writer_add_tensor(gguf_writer *w, const char *name, uint32_t ggml_type, int n_dims,
                            const uint64_t *ne, const void *data, size_t nbytes);
/* An F32 tensor with a pdl_tensor-style shape (outermost first); data holds
 * the product of the shape floats (NULL: zeros). */
void gguf_writer_add_tensor_f32(gguf_writer *w, const char *name, int n_dims,
                                const int64_t *shape, const float *data);

/* The file image, built from what was added so far; owned by the writer and
 * valid until the next add or free. */
const uint8_t *gguf_writer_bytes(gguf_writer *w, size_t *size);
/* A malloc'ed copy of the file image (for corrupting); caller frees. */
uint8_t *gguf_writer_copy(gguf_writer *w, size_t *size);
/* Writes the file image to path; returns 0, or -1 when it cannot. */
int gguf_writer_write(gguf_writer *w, const char *path);

/* Where things are in the image (valid after gguf_writer_bytes/copy/write):
 * the key's length field of kv i, the first byte of its value (after the type
 * field), the name length field of tensor i's info, its u32 type field, its
 * u64 data offset field, the absolute position of its data, and the start of
 * the data section. */
size_t gguf_writer_kv_offset(const gguf_writer *w, size_t i);
size_t gguf_writer_kv_value_offset(const gguf_writer *w, size_t i);
size_t gguf_writer_tensor_info_offset(const gguf_writer *w, size_t i);
size_t gguf_writer_tensor_type_field(const gguf_writer *w, size_t i);
size_t gguf_writer_tensor_offset_field(const gguf_writer *w, size_t i);
size_t gguf_writer_tensor_data_offset(const gguf_writer *w, size_t i);
size_t gguf_writer_data_start(const gguf_writer *w);

#endif
