/*
 * qwen35_writer.h - tiny random-weight Qwen3.5 / Qwen3.5-MoE models for
 * tests, written as a Hugging Face folder and as a GGUF file.
 *
 * What it is for: tests that need a hybrid model (Gated DeltaNet linear
 * attention layers between gated full-attention layers) make one from a
 * small spec and a seed: q35_make_weights keeps every weight as F32 in the
 * layout of the published Hugging Face checkpoints (q35_weights, which a
 * reference forward reads), q35_write_hf lays it out as those checkpoints
 * are (Qwen3_5ForConditionalGeneration: config.json with a nested
 * text_config, tensors under model.language_model., a vision tensor and MTP
 * tensors a loader must leave alone), and q35_write_gguf writes what
 * llama.cpp's converter (conversion/qwen.py: Qwen3NextModel,
 * _LinearAttentionVReorderBase, Qwen3_5TextModel / Qwen3_5MoeTextModel)
 * makes of that folder: arch qwen35 / qwen35moe, norms stored as 1 + w
 * (except the linear layers' gated norm), ssm_a = -exp(A_log), the conv
 * kernel squeezed to (channels, 4), and the value heads reordered from
 * grouped-by-key-head to tiled when value heads outnumber key heads.
 *
 * With q35_spec.next the same weights are laid out as Qwen3-Next's are
 * (the math is Qwen3.5-MoE's): a Qwen3NextForCausalLM folder (a flat
 * config.json of model_type qwen3_next, tensors under model., the linear
 * layers' q, k, v, z fused per key head in in_proj_qkvz and b, a in
 * in_proj_ba, one tensor per expert, MTP tensors mtp.*), and what
 * llama.cpp's converter (Qwen3NextModel) makes of it: arch qwen3next,
 * attn_qkv and attn_gate with the value heads left grouped, ssm_ba fused
 * per key head, no MTP block (the converter drops it), or with
 * gguf_ssm_in the fused ssm_in of early converters instead of attn_qkv and
 * attn_gate.
 *
 * What it is not for: library code (it lives under tests/, aborts when out
 * of memory and REQUIREs that files can be written); models in a real
 * model's size (every weight is held in memory as F32); tokenizers (the
 * files carry none: the loaders accept a model without one).
 *
 * Shapes below are outermost first (rows, columns), as pdl_tensor's.
 */
#ifndef PDL_TEST_QWEN35_WRITER_H
#define PDL_TEST_QWEN35_WRITER_H

#include <stdbool.h>
#include <stdint.h>

typedef struct q35_spec {
    bool moe;                  /* Qwen3.5-MoE: every layer's MLP routed experts + a gated shared expert */
    bool next;                 /* Qwen3-Next's layouts (needs moe; see above) */
    bool gguf_ssm_in;          /* next: the GGUF holds ssm_in (per key head q, k, v, z as Hugging Face's
                                * in_proj_qkvz) instead of attn_qkv and attn_gate */
    int hidden, layers, vocab, ctx;
    int heads, kv_heads, head_dim; /* full-attention layers */
    int ffn;                   /* dense MLP width (not MoE) */
    int lin_k_heads, lin_v_heads, lin_k_dim, lin_v_dim; /* linear layers: value heads a multiple of key heads */
    int conv;                  /* the causal depthwise convolution's kernel (4) */
    int full_attention_interval; /* layer l is full attention when (l + 1) % interval == 0 */
    double partial_rotary;     /* RoPE turns the first head_dim * this of each head (0.25) */
    double theta, eps;
    bool tied;                 /* lm_head is the embedding (no lm_head.weight / output.weight) */
    int experts, experts_used, expert_ffn, shared_ffn; /* MoE */
    int mtp_layers;            /* 0, or 1: an MTP block after the main stack (HF mtp.*; GGUF blk.<layers>.*
                                * with nextn_predict_layers = 1 and block_count counting it) */
    int gguf_matrix_type;      /* GGUF type of the projection matrices: 0 (F32), GW_GGML_F16 or
                                * GW_GGML_Q8_0 (rows a multiple of 32); norms, conv and per-head vectors
                                * stay F32 as the converter keeps them */
} q35_spec;

/* One layer's weights as the Hugging Face checkpoint holds them. Norm
 * weights w are applied as (1 + w), except lin_norm (applied as w). Every
 * layer holds both kinds' mixer weights (the files hold the kind `linear`
 * names), so that a test can run a layer as the other kind. */
typedef struct q35_layer {
    bool linear;                /* Gated DeltaNet (linear_attn.*) or full attention (self_attn.*) */
    float *in_norm, *post_norm; /* [hidden] input_layernorm, post_attention_layernorm */
    /* full attention */
    float *wq;                  /* [heads * 2 * head_dim][hidden]: per head its query rows, then its gate rows */
    float *wk, *wv;             /* [kv_heads * head_dim][hidden] */
    float *wo;                  /* [hidden][heads * head_dim] */
    float *q_norm, *k_norm;     /* [head_dim] per-head RMSNorm */
    /* Gated DeltaNet; value heads in Hugging Face's grouped order (value
     * head h belongs to key head h / (v_heads / k_heads)) */
    float *qkv;                 /* [2 * k_heads * k_dim + v_heads * v_dim][hidden]: q (all heads), k, v */
    float *z;                   /* [v_heads * v_dim][hidden] the output gate */
    float *b, *a;               /* [v_heads][hidden]: beta = sigmoid(b . x); a feeds the decay */
    float *conv;                /* [conv_dim][conv] each channel's kernel, oldest tap first */
    float *dt_bias, *A_log;     /* [v_heads] */
    float *lin_norm;            /* [v_dim] the gated RMSNorm's weight */
    float *out;                 /* [hidden][v_heads * v_dim] */
    /* dense MLP */
    float *gate, *up, *down;    /* [ffn][hidden], [ffn][hidden], [hidden][ffn] */
    /* MoE */
    float *router;              /* [experts][hidden] */
    float *eg, *eu, *ed;        /* [experts][expert_ffn][hidden] x2, [experts][hidden][expert_ffn] */
    float *sg, *su, *sd;        /* shared expert [shared_ffn][hidden] x2, [hidden][shared_ffn] */
    float *sgate;               /* [hidden] shared_expert_gate (a (1, hidden) Linear) */
} q35_layer;

typedef struct q35_weights {
    float *embed;      /* [vocab][hidden] */
    float *final_norm; /* [hidden] applied as 1 + w */
    float *lm_head;    /* [vocab][hidden]; NULL when tied (the embedding is the head) */
    q35_layer *l;      /* [layers] */
    uint64_t seed;     /* what the MTP block's weights are made from (q35_make_mtp) */
} q35_weights;

/* The tiny shapes the reference tests use: hidden 64, 8 layers (6 linear,
 * 2 full with interval 4), 4 query heads and 2 K/V heads of 32, linear
 * layers with 2 key heads and 4 value heads of 16, vocab 128; MoE: 8
 * experts, 2 used, expert width 32, shared expert 48. */
q35_spec q35_tiny_spec(bool moe);

/* Whether layer l is a Gated DeltaNet layer (Hugging Face's layer_types
 * "linear_attention"). */
bool q35_layer_is_linear(const q35_spec *s, int l);
/* conv_dim = 2 * k_heads * k_dim + v_heads * v_dim */
int q35_conv_dim(const q35_spec *s);
/* The RoPE width: head_dim * partial_rotary. */
int q35_rope_dim(const q35_spec *s);

/* Random weights (deterministic for a seed), scaled so that activations
 * stay of order one through the layers and the decay spans fast and slow
 * heads (some forget within a few positions, some keep a state over more
 * than a 64-position chunk). */
q35_weights q35_make_weights(const q35_spec *s, uint64_t seed);

/* The MTP block's weights (spec.mtp_layers): made from the weights' seed
 * when a file is written, so adding the block changes no other weight and
 * both files hold the same. fc is [hidden][2 * hidden] over [embedding,
 * hidden]; the norms are applied as 1 + w; its layer is a full-attention
 * layer of the spec's kind (experts with moe). */
typedef struct q35_mtp {
    q35_layer layer;
    float *fc, *enorm, *hnorm, *norm;
} q35_mtp;
q35_mtp q35_make_mtp(const q35_spec *s, const q35_weights *w);
void q35_free_mtp(q35_mtp *m);
void q35_free_weights(const q35_spec *s, q35_weights *w);

/* dir/config.json and dir/model.safetensors (dir must exist). */
void q35_write_hf(const q35_spec *s, const q35_weights *w, const char *dir);
/* The GGUF llama.cpp's converter makes of that folder. */
void q35_write_gguf(const q35_spec *s, const q35_weights *w, const char *path);

/* llama.cpp's reorder of value heads: the head at grouped index
 * kh * (v_heads / k_heads) + j goes to tiled index j * k_heads + kh.
 * Returns the grouped index of the head at tiled index t. */
int q35_tiled_to_grouped(const q35_spec *s, int t);

#endif
