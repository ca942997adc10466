/*
 * arch.h - the architecture table: one row per model family, naming it in
 * both formats (Hugging Face config.json model_type values, GGUF
 * general.architecture) and listing its traits (norm kind, activation, q/k
 * norms, block shape, window pattern, RoPE layout per format, tied head,
 * scalings, fused tensors, mixture-of-experts layout).
 *
 * Both loaders look their family up here and copy its traits into
 * pdl_model_config (arch_apply); after that each reads only its own
 * format's numbers and tensor names. The forward never sees a family, only
 * the config. Adding a Llama-like family is one row in arch.c (and its
 * reference test).
 *
 * What it is not for: numbers a file gives (sizes, eps, theta, scales),
 * which the loaders read.
 */
#ifndef PDL_MODEL_ARCH_H
#define PDL_MODEL_ARCH_H

#include <stdbool.h>
#include <stddef.h>

typedef enum pdl_norm_kind {
    PDL_NORM_RMS = 0,    /* x / rms(x) * w */
    PDL_NORM_LAYER,      /* (x - mean) / std(x) * w, plus a bias where the files hold one (BERT; Command-R
                          * has none) */
} pdl_norm_kind;

typedef enum pdl_activation {
    PDL_ACT_SILU = 0,    /* silu(gate) * up */
    PDL_ACT_GELU_TANH,   /* gelu_tanh(gate) * up (Gemma) */
    PDL_ACT_SWIGLU_OAI,  /* gpt-oss's clamped SwiGLU: g = min(gate, 7), u = clamp(up, -7, 7),
                          * (u + 1) * g * sigmoid(1.702 g) (ops_swiglu_oai_mul) */
    PDL_ACT_GELU_ERF,    /* gelu(up) = up * (1 + erf(up / sqrt 2)) / 2, no gate: an ungated MLP
                          * down(act(up x + b_up)) + b_down (BERT's "gelu") */
} pdl_activation;

/* How RoPE pairs dimensions within a head of head_dim values. */
typedef enum pdl_rope_style {
    PDL_ROPE_NEOX = 0,   /* rotate-half: (i, i + d/2); Hugging Face layout */
    PDL_ROPE_NORM,       /* adjacent pairs (2i, 2i+1); GGUF llama's permuted Q/K */
} pdl_rope_style;

/* Where a block's norms sit. */
typedef enum pdl_block_kind {
    PDL_BLOCK_PRE_NORM = 0, /* x + f(n(x)) for attention, then MLP (Llama) */
    PDL_BLOCK_PARALLEL,     /* x + attn(n(x)) + mlp(n(x)), one norm (Command-R); no ffn_norm */
    PDL_BLOCK_SANDWICH,     /* x + n_post(f(n_pre(x))) (Gemma 2 and 3) */
    PDL_BLOCK_POST_NORM,    /* x + n_post(f(x)): no norm before a branch (OLMo 2) */
    PDL_BLOCK_POST_ADD,     /* n_post(x + f(x)): the norm after the residual add (BERT's post-LN) */
} pdl_block_kind;

/* Normalization of q and k before RoPE (RMSNorm, the model's eps). */
typedef enum pdl_qk_norm {
    PDL_QK_NORM_NONE = 0,
    PDL_QK_NORM_HEAD,    /* each head over head_dim, one (head_dim) weight (Qwen3, Gemma 3) */
    PDL_QK_NORM_WHOLE,   /* the whole projection: q over n_heads * head_dim, k over
                          * n_kv_heads * head_dim, weights of those sizes (OLMo 2, OLMoE) */
} pdl_qk_norm;

/* The Hugging Face window fields a family reads (GGUF files always say
 * attention.sliding_window when they have one). */
typedef enum pdl_window_kind {
    PDL_WINDOW_NONE = 0, /* no window */
    PDL_WINDOW_UNIFORM,  /* sliding_window on every layer when given (Mistral, Phi-3) */
    PDL_WINDOW_PATTERN,  /* every swa_period-th layer global (Gemma 2/3, Cohere2); window 4096 unless given */
    PDL_WINDOW_REFUSED,  /* use_sliding_window = true is refused (Qwen's layer-range windows) */
} pdl_window_kind;

/* Numbers a family scales by; each loader reads them under its format's names. */
enum {
    PDL_SCALE_MULTIPLIERS = 1u << 0, /* Granite: embedding, attention, residual multipliers, logits divided */
    PDL_SCALE_LOGIT = 1u << 1,       /* Command-R: logits times logit_scale (Hugging Face default 0.0625) */
    PDL_SCALE_GEMMA = 1u << 2,       /* embeddings times sqrt(hidden), query_pre_attn_scalar, soft-caps */
};

/* Where a family keeps its experts in a Hugging Face checkpoint (GGUF
 * always stacks them: blk.N.ffn_{gate,up,down}_exps, router ffn_gate_inp). */
typedef enum pdl_moe_layout {
    PDL_MOE_NONE = 0,         /* a dense MLP */
    PDL_MOE_MLP,              /* mlp.gate, mlp.experts.E.{gate,up,down}_proj (Qwen-MoE, OLMoE) */
    PDL_MOE_BLOCK_SPARSE,     /* block_sparse_moe.gate, .experts.E.{w1,w3,w2} (Mixtral) */
    PDL_MOE_GPT_OSS,          /* mlp.router.{weight,bias}; mlp.experts.gate_up_proj (E, hidden, 2 * ffn) with
                               * gate and up in alternate columns, down_proj (E, ffn, hidden), both x W as
                               * stored, and their _bias (gpt-oss); GGUF adds ffn_*_exps.bias, ffn_gate_inp.bias */
} pdl_moe_layout;

/* How router logits become expert weights: top-k of their softmax over all
 * experts, or of each one's sigmoid; then optionally renormalized to sum 1. */
typedef enum pdl_router_kind {
    PDL_ROUTER_SOFTMAX = 0,
    PDL_ROUTER_SIGMOID,
    PDL_ROUTER_SOFTMAX_TOPK, /* softmax over the k chosen logits only (gpt-oss; llama.cpp's softmax_weight) */
} pdl_router_kind;

/* Gemma3TextConfig's defaults (a multimodal checkpoint's text_config often
 * lists only what differs); other families must give every size. */
typedef struct pdl_hf_defaults {
    int hidden, n_layers, n_heads, n_kv_heads, head_dim, ffn, vocab, ctx_len;
    float rope_theta;
} pdl_hf_defaults;

typedef struct pdl_arch_desc {
    const char *name;        /* the family as pdl_model_info.arch names it */
    const char *hf_types;    /* config.json model_type values, space-separated; NULL: none */
    const char *gguf_arch;   /* general.architecture values, space-separated; NULL: none */
    const char *gguf_mrope;  /* of those, the ones whose files give {arch}.rope.dimension_sections
                              * (M-RoPE: llama.cpp's qwen2vl); NULL: none */
    const char *about;       /* one line: what sets it apart (pagedlm info --architectures) */
    pdl_norm_kind norm;
    pdl_activation act;
    pdl_block_kind block;
    pdl_qk_norm qk_norm;
    bool qkv_bias;           /* Q/K/V biases always (other families: when the files hold them) */
    bool attn_sinks;         /* a learned sink logit per query head in the softmax's denominator (gpt-oss) */
    bool hf_norm_plus_one;   /* Hugging Face stores w of norms applied as (1 + w) (Gemma) */
    pdl_window_kind window;
    int swa_period;          /* PDL_WINDOW_PATTERN: default period (every p-th layer global) */
    bool gguf_window_required; /* the GGUF must give attention.sliding_window (Cohere2) */
    pdl_rope_style rope_gguf, rope_hf;
    bool rope_global_none;   /* global layers apply no RoPE (Cohere2) */
    float rope_theta_local;  /* windowed layers' default RoPE base, unscaled; 0 = the global one (Gemma 3) */
    bool hf_tied;            /* transformers' default of tie_word_embeddings */
    float hf_eps;            /* transformers' default norm epsilon; 0: 1e-6 (RMSNorm), 1e-5 (LayerNorm) */
    unsigned scalings;       /* PDL_SCALE_* */
    float hf_attn_softcap, hf_final_softcap; /* PDL_SCALE_GEMMA: Hugging Face defaults (Gemma 2: 50, 30) */
    int gguf_qpas_layers;    /* GGUF: with this many layers q.k is scaled by (hidden / heads)^-0.5, which
                              * llama.cpp infers from the layer count (Gemma 3 27B's files do not say) */
    bool fused_gate_up;      /* gate and up are one matrix (Phi-3 gate_up_proj / GGUF ffn_up) */
    pdl_moe_layout moe;      /* PDL_MOE_NONE: dense MLP; else every layer's MLP is experts */
    pdl_router_kind router;
    bool hf_moe_norm;        /* default of norm_topk_prob (transformers' config default) */
    bool gguf_moe_norm;      /* llama.cpp's choice for the family (expert_weights_norm overrides) */
    bool shared_expert_gate; /* a shared expert, times sigmoid(w . x) (Qwen2-MoE) */
    bool hybrid;             /* Gated DeltaNet layers beside gated full attention (Qwen3.5): layer kinds from
                              * layer_types / full_attention_interval, the linear layers' shape, q_proj
                              * with an output gate */
    bool encoder;            /* an encoder (BERT): every prompt row attends to every other, absolute position
                              * and token-type embeddings, no LM head: embeddings only (model_load_bert.c) */
    const pdl_hf_defaults *hf_defaults;
} pdl_arch_desc;

/* The family whose hf_types lists model_type, or NULL. */
const pdl_arch_desc *arch_by_hf(const char *model_type);

/* The family of a GGUF general.architecture: several may share one name
 * (GGUF `llama` is Llama, or Mixtral when the file has experts); the row
 * whose MoE layout agrees with has_experts wins, else the first of that
 * name. NULL when no row has it. */
const pdl_arch_desc *arch_by_gguf(const char *name, bool has_experts);

/* Whether a GGUF of this family under general.architecture `name` must
 * give M-RoPE sections (gguf_mrope lists name). */
bool arch_gguf_mrope(const pdl_arch_desc *a, const char *name);

/* "llama, mistral, ..." - every name of one format, for error messages. */
void arch_supported(bool gguf, char *buf, size_t cap);

/* Copies a family's traits into the config (the loader's format picks the
 * RoPE layout); numbers the files give are read afterwards by the loader. */
struct pdl_model_config;
void arch_apply(const pdl_arch_desc *a, bool gguf, struct pdl_model_config *c);

/* Listing the table: pdl_architecture (pagedlm.h). */

#endif
