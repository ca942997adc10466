/*
 * tensor.h - the weight tensor view shared by every file format.
 *
 * A pdl_tensor points into a memory-mapped file; the loaders (gguf.c,
 * safetensors.c; mlx_quant.c then folds MLX-quantized triples into one
 * tensor) fill a pdl_tensor_set, the model loader looks weights up in it by
 * name. Shapes are in row-major order, outermost first, as PyTorch
 * writes them: a linear layer's weight is {out_features, in_features}, and a
 * row of in_features elements is contiguous (GGUF's ne[] reversed).
 */
#ifndef PDL_FORMAT_TENSOR_H
#define PDL_FORMAT_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#include "pagedlm.h"

/* Element types the engine knows. Quantized types store blocks of
 * dtype_block_elems() elements in dtype_block_bytes() bytes. */
typedef enum pdl_dtype {
    PDL_DTYPE_F32 = 0,
    PDL_DTYPE_F16,
    PDL_DTYPE_BF16,
    PDL_DTYPE_Q8_0,   /* blocks of 32: f16 scale, 32 x int8 (34 bytes) */
    /* GGUF's other block formats, byte layouts as ggml's block_* structs
     * (dequantization in kernels/cpu_ops.c): */
    PDL_DTYPE_Q4_0,   /* 32: f16 d, 16 bytes of nibbles (18) */
    PDL_DTYPE_Q4_1,   /* 32: f16 d, f16 m, 16 bytes of nibbles (20) */
    PDL_DTYPE_Q5_0,   /* 32: f16 d, u32 fifth bits, 16 bytes of nibbles (22) */
    PDL_DTYPE_Q5_1,   /* 32: f16 d, f16 m, u32 fifth bits, nibbles (24) */
    PDL_DTYPE_Q2_K,   /* 256: 16 scale/min bytes, 64 bytes of 2-bit q, f16 d, dmin (84) */
    PDL_DTYPE_Q3_K,   /* 256: 32 high-bit bytes, 64 bytes of 2-bit q, 12 scale bytes, f16 d (110) */
    PDL_DTYPE_Q4_K,   /* 256: f16 d, dmin, 12 scale/min bytes, 128 bytes of nibbles (144) */
    PDL_DTYPE_Q5_K,   /* 256: f16 d, dmin, 12 scale/min bytes, 32 high-bit bytes, nibbles (176) */
    PDL_DTYPE_Q6_K,   /* 256: 128 low-nibble bytes, 64 high-bit bytes, 16 int8 scales, f16 d (210) */
    /* Raw 32-bit words as safetensors' U32: only MLX's packed codes, which
     * format/mlx_quant.c folds into one of the two types below; never a
     * weight the forward pass reads. */
    PDL_DTYPE_U32,
    /* MLX affine quantization: a row's codes are packed little-endian from
     * the least significant bits into u32 words (4-bit: element j is bits
     * 4 (j % 8) .. +3 of word j / 8; 8-bit: byte j % 4 of word j / 4); the
     * value is scale * q + bias with one scale and bias per group of
     * `mlx.group` elements, held outside the data (pdl_tensor.mlx). A
     * "block" here is one u32 word, so the row-byte helpers give the size
     * of the packed codes only. */
    PDL_DTYPE_MLX_Q4, /* 8 elements per 4-byte word */
    PDL_DTYPE_MLX_Q8, /* 4 elements per 4-byte word */
    /* OCP Microscaling FP4 (ggml's block_mxfp4): blocks of 32, one E8M0
     * scale byte e, then 16 bytes of 4-bit E2M1 codes (byte j: element j
     * in the low nibble, j + 16 in the high, as Q4_0) (17 bytes) */
    PDL_DTYPE_MXFP4,
    /* Non-linear 4-bit (ggml's IQ4_NL / IQ4_XS): codes index the 16 int8
     * values of kvalues_iq4nl (-127 ... 113), byte j of 16 holding codes j
     * (low nibble) and j + 16 (high) */
    PDL_DTYPE_IQ4_NL, /* 32: f16 d, 16 bytes of codes (18) */
    PDL_DTYPE_IQ4_XS, /* 256: f16 d, u16 scales_h, 4 bytes scales_l, 8 x 16 bytes of codes (136); sub-block
                       * i's 6-bit scale: nibble i % 2 of scales_l[i / 2], top 2 bits at bit 2i of scales_h,
                       * minus 32 */
    /* Ternary (ggml's TQ1_0 / TQ2_0): values -1, 0, 1 times d */
    PDL_DTYPE_TQ1_0,  /* 256: 48 bytes of 5 trits (base 3, most significant first), 4 bytes of 4, f16 d (54) */
    PDL_DTYPE_TQ2_0,  /* 256: 64 bytes of 2-bit codes (value + 1), f16 d (66) */
    /* Raw bytes as safetensors' U8: only the MXFP4 blocks and scales of
     * Hugging Face's gpt-oss checkpoints (tensors named *_blocks /
     * *_scales), which the loader repacks as PDL_DTYPE_MXFP4; never a
     * weight the forward pass reads. */
    PDL_DTYPE_U8,
    PDL_DTYPE_COUNT
} pdl_dtype;

const char *dtype_name(pdl_dtype t);
size_t dtype_block_elems(pdl_dtype t);
size_t dtype_block_bytes(pdl_dtype t);
/* Whether t is a block format (Q*, MLX_*): such data is read bytewise. */
int dtype_is_quantized(pdl_dtype t);
/* Whether t is one of the MLX affine types (scales and biases in
 * pdl_tensor.mlx). */
int dtype_is_mlx(pdl_dtype t);
/* Bytes of a row of n elements; n must be a multiple of the block size. */
size_t dtype_row_bytes(pdl_dtype t, int64_t n);

/* 5: safetensors holds PyTorch's Conv3d weights (Qwen2.5-VL's patch
 * embedding); GGUF allows 4 (PDL_GGUF_MAX_DIMS) */
#define PDL_MAX_DIMS 5
#define PDL_GGUF_MAX_DIMS 4
#define PDL_TENSOR_NAME_MAX 256

typedef struct pdl_tensor {
    char name[PDL_TENSOR_NAME_MAX];
    pdl_dtype dtype;
    int n_dims;
    int64_t shape[PDL_MAX_DIMS];   /* outermost first; shape[n_dims-1] is contiguous */
    const void *data;              /* into the mapping of `file`, or the model's copy (model_load.c) */
    size_t nbytes;
    const char *file;              /* path of the file holding it (for messages) */
    uint64_t file_offset;          /* absolute offset of data in that file */
    /* The same matrix copied into 16-row panels for the matmul
     * (kernels/weight_panels.h), made at model load; NULL if not. */
    const void *panels;
    /* MLX_Q4 / MLX_Q8 only (zero otherwise): row r's group g has scale
     * scales[r * (shape[1] / group) + g] and bias biases[same], of dtype
     * `dtype` (F32, F16 or BF16), each unaligned and possibly in another
     * file of the folder. */
    struct {
        const void *scales, *biases;
        pdl_dtype dtype;
        int32_t group;             /* 32, 64 or 128 */
    } mlx;
} pdl_tensor;

/* A growable list of tensors, with lookup by name through an
 * open-addressing hash index (so a hostile file with many tensors cannot
 * make loading quadratic). */
typedef struct pdl_tensor_set {
    pdl_tensor *items;
    size_t count, cap;
    uint32_t *index;     /* [index_cap] item number + 1; 0 = empty */
    size_t index_cap;    /* a power of two, at least twice count */
    bool *taken;         /* [cap] items[i] was looked up with tensor_set_take */
} pdl_tensor_set;

/* Appends a copy of t; fails on a duplicate name (message names both). */
int tensor_set_add(pdl_tensor_set *set, const pdl_tensor *t, pdl_error *err);
const pdl_tensor *tensor_set_find(const pdl_tensor_set *set, const char *name);
/* tensor_set_find for a tensor the caller uses (the model loader's
 * weights): also records it as taken (set->taken), so that what no one
 * took can be reported. Only that record changes. */
const pdl_tensor *tensor_set_take(const pdl_tensor_set *set, const char *name);
void tensor_set_free(pdl_tensor_set *set);

/* Fails when two tensors' data overlap (the same offset included), naming
 * both and their file offsets: safetensors forbids it and llama.cpp writes
 * tensors one after the other, so overlap means a corrupt or crafted file
 * (one weight's bytes read as another's). Empty tensors are ignored. */
int tensor_set_check_disjoint(const pdl_tensor_set *set, pdl_error *err);

/* Number of elements (product of the shape). */
int64_t tensor_nelems(const pdl_tensor *t);

/* For a view of t starting r0 rows in (data moved by r0 rows): moves the
 * MLX scales and biases pointers by r0 rows too; a no-op for other types. */
void tensor_mlx_skip_rows(pdl_tensor *t, int64_t r0);

/* The tensor's type as shown to users: the dtype name, with the group size
 * for MLX types ("MLX_Q4(g64)"). Returns buf. */
const char *tensor_type_name(const pdl_tensor *t, char *buf, size_t n);

#endif
