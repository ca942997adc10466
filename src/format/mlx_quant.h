/*
 * mlx_quant.h - MLX affine-quantized weights in Hugging Face folders.
 *
 * One job: reading the quantization block of a folder's config.json and
 * folding each quantized module's three tensors (X.weight: U32 packed codes
 * of shape [out, in * bits / 32]; X.scales and X.biases: [out, in / group]
 * in F32, F16 or BF16) into one tensor named X.weight of dtype
 * PDL_DTYPE_MLX_Q4 or PDL_DTYPE_MLX_Q8 with the logical shape [out, in],
 * whose scales and biases pointers (pdl_tensor.mlx) stay in the mapped
 * files. X.scales and X.biases remain in the set; nothing takes them.
 *
 * The block is "quantization" (what mlx-lm writes) or, failing that,
 * "quantization_config" (newer mlx-lm writes both, same content):
 * {"group_size": G, "bits": B, "mode": "affine"} plus optional per-module
 * entries "model.layers.0.mlp.gate_proj": {"group_size": G, "bits": B} or
 * false (kept in float). Supported: affine mode, 4 and 8 bits, groups of
 * 32, 64 and 128. A quantization_config naming a quant_method (awq, gptq,
 * bitsandbytes, fp8, compressed-tensors, ...) is refused, except mxfp4
 * (gpt-oss: its *_blocks / *_scales tensors are read by the model loader).
 * What it is not for: dequantizing (kernels/cpu_ops.c) or tensor roles.
 */
#ifndef PDL_FORMAT_MLX_QUANT_H
#define PDL_FORMAT_MLX_QUANT_H

#include <jansson.h>
#include <stdbool.h>

#include "format/safetensors.h"
#include "format/tensor.h"
#include "pagedlm.h"

/* The parsed quantization block. */
typedef struct pdl_mlx_quant {
    bool enabled;          /* the config declares MLX quantization */
    long long bits, group; /* defaults (validated per tensor) */
    const char *key;       /* "quantization" or "quantization_config" */
    json_t *obj;           /* that object (a reference): per-module entries */
    char cfg_path[1024];   /* config.json, for messages */
} pdl_mlx_quant;

/* Reads the block from a parsed config.json (cfg_path for messages). Not
 * quantized: q->enabled = false. Fails on another quant_method, a mode
 * other than affine, or a malformed block. Free with mlx_quant_free. */
int mlx_quant_parse(const json_t *cfg, const char *cfg_path, pdl_mlx_quant *q, pdl_error *err);
void mlx_quant_free(pdl_mlx_quant *q);

/* Folds every quantized triple of set in place (see above), checking
 * dtypes, shapes, bits and group sizes; the message names the tensor and
 * its file. A no-op when !q->enabled. */
int mlx_quant_fold(pdl_tensor_set *set, const pdl_mlx_quant *q, pdl_error *err);

/* st_open_dir for a Hugging Face folder, with dir/config.json's MLX
 * quantization applied: parse, open (U32 accepted when quantized), fold.
 * On failure *out is NULL. */
int mlx_open_dir(st_model **out, const char *dir, pdl_error *err);

#endif
