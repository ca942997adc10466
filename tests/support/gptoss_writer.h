/*
 * gptoss_writer.h - tiny random-weight gpt-oss models for tests, written as
 * a Hugging Face folder and as a GGUF file.
 *
 * gpo_make_weights keeps every weight as F32 in the layout of the Hugging
 * Face model (modeling_gpt_oss.py: experts stacked, gate_up_proj (E, hidden,
 * 2 * ffn) multiplied as x W with gate and up in alternate columns,
 * down_proj (E, ffn, hidden), biases everywhere, one sink logit per query
 * head), which a reference forward reads. gpo_write_hf writes config.json
 * and model.safetensors as a GptOssForCausalLM folder with unquantized
 * experts; gpo_write_gguf writes what llama.cpp's converter (GptOssModel)
 * makes of that folder: arch gpt-oss, experts transposed and split into
 * ffn_gate_exps / ffn_up_exps / ffn_down_exps with their .bias tensors,
 * attn_sinks.weight, the MLP's input norm as post_attention_norm, YaRN under
 * rope.scaling.*, the window under attention.sliding_window.
 *
 * Not for: library code (it aborts when out of memory); real-size models
 * (every weight in memory as F32); tokenizers (the files carry none).
 */
#ifndef PDL_TEST_GPTOSS_WRITER_H
#define PDL_TEST_GPTOSS_WRITER_H

#include <stdbool.h>
#include <stdint.h>

typedef struct gpo_spec {
    int hidden, layers, heads, kv_heads, head_dim, vocab;
    int experts, experts_used, ffn; /* ffn: each expert's width (intermediate_size) */
    int window;                      /* sliding_window: layers 0, 2, 4, ... windowed */
    int max_pos;                     /* max_position_embeddings (= orig * factor) */
    int orig;                        /* YaRN original_max_position_embeddings */
    double factor, beta_fast, beta_slow, theta, eps;
    bool bf16_experts;               /* the experts' matrices rounded to BF16 values and written as BF16
                                      * (both formats), as a BF16 checkpoint and its conversion hold them */
    bool gguf_q8_0_experts;          /* GGUF: the expert matrices as Q8_0 (as llama.cpp quantizes them) */
    bool gguf_fused_gate_up;         /* GGUF: ffn_gate_up_exps (E, 2F, hidden) and its bias, each expert's gate
                                      * rows then up rows (the converter's --fuse-gate-up-exps); F32 */
    bool mxfp4_experts;              /* the expert matrices snapped to MXFP4 values (per 32 inputs of a row
                                      * of the converter's layout: E2M1 codes times 2^(e - 127), e as
                                      * llama.cpp's quantize_row_mxfp4_ref picks it) and the GGUF's experts
                                      * written as MXFP4 (ggml's block: e, then byte j = codes j | j + 16) */
    bool hf_truncate;                /* config.json's YaRN truncate: true (as the GGUF's reading rounds the
                                      * ramp's ends), so that both files hold the same model; default false */
    bool gguf_harmony_vocab;         /* GGUF: a vocabulary t0, t1, ... ending in the control tokens <|return|>
                                      * (the EOS, as llama.cpp's converter writes it) and <|call|> */
    bool gguf_no_sinks;              /* GGUF: leave attn_sinks.weight out (a broken file) */
    bool hf_mxfp4;                   /* HF: the experts as the published checkpoints hold them, MXFP4
                                      * gate_up_proj_blocks (E, 2F, hidden / 32, 16) and _scales (E, 2F,
                                      * hidden / 32) U8 (byte j of a block: values 2j | 2j + 1 << 4), down_proj
                                      * likewise, and config.json's quantization_config; needs mxfp4_experts */
} gpo_spec;

typedef struct gpo_layer {
    float *in_norm, *post_norm;       /* [hidden] */
    float *wq, *bq, *wk, *bk, *wv, *bv; /* [heads * head_dim][hidden] ... and biases */
    float *wo, *bo;                   /* [hidden][heads * head_dim], [hidden] */
    float *sinks;                     /* [heads] */
    float *router, *router_b;         /* [experts][hidden], [experts] */
    float *gate_up, *gate_up_b;       /* [experts][hidden][2 * ffn], [experts][2 * ffn] */
    float *down, *down_b;             /* [experts][ffn][hidden], [experts][hidden] */
} gpo_layer;

typedef struct gpo_weights {
    float *embed, *final_norm, *lm_head; /* [vocab][hidden], [hidden], [vocab][hidden] */
    gpo_layer *l;
} gpo_weights;

/* hidden 64, 4 layers, 4 query heads and 2 K/V heads of 16, 8 experts
 * (4 used) of width 32, vocab 96, window 16, YaRN factor 4 over 64
 * (betas 8 / 0.5 at base 100, so the ramp spans several of the 8 pairs). */
gpo_spec gpo_tiny_spec(void);

/* Random weights (deterministic for a seed): the experts' gate and up
 * products often pass the clamp (|x| > 7), the sinks take a real share of
 * the softmax. */
gpo_weights gpo_make_weights(const gpo_spec *s, uint64_t seed);
void gpo_free_weights(const gpo_spec *s, gpo_weights *w);

/* dir/config.json and dir/model.safetensors (dir must exist). */
void gpo_write_hf(const gpo_spec *s, const gpo_weights *w, const char *dir);
/* The GGUF llama.cpp's converter makes of that folder. */
void gpo_write_gguf(const gpo_spec *s, const gpo_weights *w, const char *path);

#endif
