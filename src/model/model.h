/*
 * model.h - the in-memory model description every loader fills and the
 * forward pass reads: hyperparameters (pdl_model_config) and weight views
 * (pdl_layer_weights) into the memory-mapped file, whatever the format.
 *
 * Architectures differ here by data (flags and numbers), never by code paths
 * copied per architecture: the forward in forward.c reads only this struct.
 *
 * Not for anything a forward writes: a loaded model is immutable (the
 * forward takes it const), and the threads, scratch and counters of a run
 * are a pdl_context's (context.h), so that several contexts can run over
 * one model at once.
 */
#ifndef PDL_MODEL_MODEL_H
#define PDL_MODEL_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "format/gguf.h"
#include "format/safetensors.h"
#include "format/tensor.h"
#include "kernels/matmul_table.h"
#include "model/arch.h"
#include "pagedlm.h"
#include "tokenizer/tokenizer.h"

typedef enum pdl_rope_scaling {
    PDL_ROPE_SCALING_NONE = 0,
    PDL_ROPE_SCALING_LINEAR,   /* positions divided by factor */
    PDL_ROPE_SCALING_LLAMA3,   /* Llama 3.1 frequency-dependent scaling */
    PDL_ROPE_SCALING_FREQS,    /* GGUF rope_freqs tensor: frequency i / freqs[i] */
    PDL_ROPE_SCALING_LONGROPE, /* Phi-3: frequency i / long[i] when the context in effect exceeds
                                * rope_orig_ctx, else / short[i]; cos and sin times rope_mscale */
    PDL_ROPE_SCALING_YARN,     /* YaRN (Qwen3, Qwen2.5, gpt-oss): each pair's frequency between itself
                                * (fast pairs, > beta_fast turns in rope_orig_ctx) and itself / factor
                                * (slow pairs, < beta_slow turns) on a linear ramp; cos and sin times
                                * rope_mscale (the attention factor) */
} pdl_rope_scaling;

#define PDL_MAX_EOS 8

/* What mixes a layer's tokens: attention over the paged K/V, or a Gated
 * DeltaNet linear attention with a recurrent state per sequence (Qwen3.5,
 * Qwen3-Next; deltanet.c). */
typedef enum pdl_layer_kind {
    PDL_LAYER_ATTENTION = 0,
    PDL_LAYER_DELTANET,
} pdl_layer_kind;

typedef struct pdl_model_config {
    const pdl_arch_desc *arch; /* the family's row (arch.c): name and traits */
    int n_layers;
    int hidden;          /* d_model */
    int n_heads;
    int n_kv_heads;
    int head_dim;        /* may differ from hidden / n_heads (qwen3) */
    int ffn;             /* intermediate size of a dense MLP */
    int vocab;
    int ctx_len;         /* context length the model declares (2048 when it declares none) */
    bool ctx_len_declared; /* the files gave ctx_len: a longer context is refused by default */
    float rms_eps;       /* epsilon of every norm, RMS or Layer */
    pdl_norm_kind norm;  /* every norm of the model: blocks and final */
    pdl_activation act;  /* the MLP's gate activation (experts' too) */
    float rope_theta;
    int rope_dim;        /* dimensions rotated per head (<= head_dim; Phi-3 partial) */
    pdl_rope_style rope_style;
    bool tied_embeddings;/* LM head reuses token_embd */
    bool qkv_bias;
    bool attn_sinks;     /* each query head's learned sink logit joins its softmax's denominator (gpt-oss) */
    pdl_qk_norm qk_norm; /* q/k RMSNorm per head or over the whole projection */
    pdl_block_kind block;/* where the norms sit: before the branch, one shared (parallel),
                          * before and after (sandwich), after only */
    bool norm_plus_one;  /* load time only: the file holds w for norms applied as (1 + w)
                          * (Hugging Face Gemma); model_finish folds the 1 in */
    float embed_scale;   /* embeddings *= embed_scale (1 = none; Granite, Gemma sqrt(hidden)) */
    float residual_scale;/* each branch *= residual_scale before the add (1 = none; Granite) */
    float attn_scale;    /* 1/sqrt(head_dim) unless the model says otherwise */
    float attn_softcap;  /* scores = c * tanh(scores / c) before the mask; 0 = none (Gemma 2) */
    int sliding_window;  /* attend to the last W positions only; 0 = all */
    int swa_pattern;     /* with a window: layers l with l % p == p - 1 attend globally
                          * (Gemma 2: p = 2, windowed even layers; Gemma 3: 6; Cohere2: 4);
                          * 0 = every layer windowed. See model_layer_windowed. */
    float rope_theta_local; /* windowed layers' RoPE base, unscaled (Gemma 3); 0 = rope_theta */
    bool rope_global_none;  /* layers that attend globally apply no RoPE (Cohere2) */
    float rope_mscale;      /* RoPE cos and sin multiplied by this (LongRoPE / YaRN attention factor); 1 = none */
    bool fused_gate_up;     /* gate and up come from one (2 * ffn, hidden) matrix, gate rows
                             * first (Phi-3 gate_up_proj / GGUF ffn_up) */
    /* Mixture of experts (every layer's MLP when n_experts > 0; moe.c). */
    int n_experts;          /* 0 = a dense MLP */
    int n_experts_used;     /* k: experts each row runs (top-k of the router) */
    int ffn_expert;         /* an expert's intermediate size */
    pdl_router_kind router; /* softmax over all experts, or sigmoid of each, then top-k */
    bool router_norm;       /* the k weights renormalized to sum 1 (Mixtral, Qwen3-MoE) */
    float router_scale;     /* the k weights times this (1 = none) */
    int ffn_shared;         /* the shared expert's intermediate size; 0 = none (Qwen2-MoE) */
    bool shared_gate;       /* the shared expert's output times sigmoid(w . x) (Qwen2-MoE) */
    /* Head post-processing, in this order, in both head paths (head_postprocess). */
    float logit_div;     /* logits /= logit_div (1 = none; Granite logits_scaling) */
    float logit_scale;   /* logits *= logit_scale (1 = none; Command-R) */
    float final_softcap; /* logits = c * tanh(logits / c); 0 = none (Gemma 2) */
    int32_t bos_id;      /* from the model files; -1 when absent */
    int32_t eos_ids[PDL_MAX_EOS]; /* generation stops at any of these */
    int n_eos;
    /* RoPE scaling as the model declares it (applied in rope_inv_freq). */
    pdl_rope_scaling rope_scaling;
    float rope_factor;           /* linear / llama3 / yarn factor */
    float rope_low_freq_factor;  /* llama3 */
    float rope_high_freq_factor; /* llama3 */
    int rope_orig_ctx;           /* llama3, longrope, yarn: original_max_position_embeddings */
    float rope_yarn_beta_fast;   /* yarn: turns in rope_orig_ctx above which a pair is kept (32) */
    float rope_yarn_beta_slow;   /* yarn: turns below which a pair is divided by the factor (1) */
    float rope_yarn_ext;         /* yarn: the ramp's weight (llama.cpp's ext_factor; 1, 0 = all scaled) */
    bool rope_yarn_truncate;     /* yarn: the ramp's ends rounded out to whole pairs (transformers'
                                  * truncate, llama.cpp always; gpt-oss's config says false) */
    int mrope_section[3];        /* M-RoPE (Qwen2-VL, Qwen2.5-VL): frequency pairs turned by a row's
                                  * temporal, height and width position (pdl_batch's rope_pos3), summing
                                  * to rope_dim / 2; all 0: one position per row */
    /* Hybrid models (Qwen3.5, Qwen3-Next): which layers are Gated DeltaNet
     * linear attention, and its shape (deltanet.c). */
    uint8_t *layer_kind;   /* [n_layers] pdl_layer_kind, malloc'ed; NULL: every layer attention */
    int *kind_index;       /* [n_layers] the layer's index among the layers of its kind (its K/V
                            * layer in the cache, or its recurrent state in a slot); NULL with layer_kind */
    int n_attn_layers;     /* layers with K/V in the cache (n_layers without layer_kind) */
    int n_rec_layers;      /* Gated DeltaNet layers */
    int lin_k_heads, lin_v_heads; /* key and value heads (value heads a multiple of key heads) */
    int lin_k_dim, lin_v_dim;     /* a key head's and a value head's width */
    int lin_conv;          /* the causal depthwise convolution's kernel (4) */
    bool lin_v_tiled;      /* value head h reads key head h % lin_k_heads (llama.cpp's converter reorders
                            * Qwen3.5's value heads so); false: h / (lin_v_heads / lin_k_heads) (Hugging
                            * Face, and Qwen3-Next's GGUF) */
    bool lin_a_log;        /* load time only: lin_a_neg holds A_log (Hugging Face); model_finish turns it
                            * into -exp(A_log) */
    int n_mtp_layers;      /* multi-token-prediction blocks after the main stack (GGUF blk.N with N >=
                            * n_layers, nextn_predict_layers; Hugging Face mtp.*, mtp_num_hidden_layers);
                            * the main forward runs none of them */
    pdl_pooling pooling;   /* what the files declare for embeddings (pdl_model_info) */
    bool pool_normalize;
    bool matryoshka;
    bool mtp_loaded;       /* the first MTP block's weights are loaded: w.layers[n_layers] and w.mtp_*
                            * (model_forward_mtp, the speculative drafter) */
    bool attn_out_gate;    /* attention layers: q_proj gives per head its query then a gate of the same
                            * width; the attention output is times sigmoid(gate) (Qwen3.5) */
    bool encoder;          /* BERT: a prompt's rows attend to each other both ways (the engine gives each
                            * prompt one two-way span and computes it in one step), no LM head, no RoPE
                            * (rope_dim 0): position p adds w.pos_embd row p and w.type_embd row 0 */
    int n_positions;       /* rows of w.pos_embd: the longest prompt an encoder takes; 0: none */
} pdl_model_config;

/* Hybrid models: makes layer_kind / kind_index for n_layers layers, layer l
 * being Gated DeltaNet when recurrent[l], or (recurrent NULL) unless
 * (l + 1) % full_interval == 0 (Qwen3.5's full_attention_interval), and
 * counts each kind. Errors name `where`. */
int model_set_layer_kinds(pdl_model_config *c, const bool *recurrent, int full_interval, const char *where,
                          pdl_error *err);

/* Whether layer l is a Gated DeltaNet layer. */
static inline bool model_layer_recurrent(const pdl_model_config *c, int l) {
    return c->layer_kind && l < c->n_layers && c->layer_kind[l] == PDL_LAYER_DELTANET;
}

/* Layers with weights: the main stack, and the MTP block (an attention
 * layer at index n_layers) when it is loaded. */
static inline int model_weight_layers(const pdl_model_config *c) { return c->n_layers + (c->mtp_loaded ? 1 : 0); }

/* Per-layer weights. Linear weights have shape {out, in}; biases and norm
 * weights are F32 vectors. A weight a model lacks has data == NULL. */
typedef struct pdl_layer_weights {
    pdl_tensor attn_norm;  /* (hidden); absent with PDL_BLOCK_POST_NORM */
    pdl_tensor wq;         /* (n_heads * head_dim, hidden) */
    pdl_tensor wk;         /* (n_kv_heads * head_dim, hidden) */
    pdl_tensor wv;         /* (n_kv_heads * head_dim, hidden) */
    pdl_tensor bq, bk, bv; /* (n_heads * head_dim), (n_kv * head_dim) x2: qkv_bias */
    pdl_tensor bo;         /* (hidden): the output projection's bias, when the files hold one (gpt-oss) */
    pdl_tensor sinks;      /* (n_heads) F32: attn_sinks */
    pdl_tensor q_norm;     /* (head_dim), or (n_heads * head_dim) with PDL_QK_NORM_WHOLE */
    pdl_tensor k_norm;     /* (head_dim), or (n_kv_heads * head_dim) with PDL_QK_NORM_WHOLE */
    pdl_tensor wo;         /* (hidden, n_heads * head_dim) */
    pdl_tensor ffn_norm;   /* (hidden); absent with PDL_BLOCK_PARALLEL and _POST_NORM */
    pdl_tensor post_attn_norm; /* (hidden): PDL_BLOCK_SANDWICH and _POST_NORM */
    pdl_tensor post_ffn_norm;  /* (hidden): likewise */
    pdl_tensor post_attn_norm_b, post_ffn_norm_b; /* (hidden): their LayerNorm biases (BERT), or absent */
    pdl_tensor b_up, b_down;   /* (ffn), (hidden): the ungated MLP's biases (PDL_ACT_GELU_ERF) */
    pdl_tensor w_gate;     /* (ffn, hidden): a dense MLP */
    pdl_tensor w_up;       /* (ffn, hidden) */
    pdl_tensor w_down;     /* (hidden, ffn) */
    /* Mixture of experts (n_experts > 0): */
    pdl_tensor router;     /* (n_experts, hidden) */
    pdl_tensor router_b;   /* (n_experts) F32: the router's bias, or absent */
    pdl_tensor exp_gate_b, exp_up_b; /* (n_experts, ffn_expert) F32: the experts' biases, or absent (gpt-oss) */
    pdl_tensor exp_down_b; /* (n_experts, hidden) F32, or absent */
    pdl_tensor *exp_gate;  /* [n_experts] of (ffn_expert, hidden): views of one stacked
                            * GGUF tensor, or one Hugging Face tensor each */
    pdl_tensor *exp_up;    /* [n_experts] of (ffn_expert, hidden) */
    pdl_tensor *exp_down;  /* [n_experts] of (hidden, ffn_expert) */
    pdl_tensor sh_gate, sh_up; /* (ffn_shared, hidden): the shared expert, when ffn_shared > 0 */
    pdl_tensor sh_down;    /* (hidden, ffn_shared) */
    pdl_tensor sh_gate_w;  /* (hidden): shared_gate's w */
    /* Gated DeltaNet (a PDL_LAYER_DELTANET layer; wq..wo absent). conv_dim =
     * 2 * lin_k_heads * lin_k_dim + lin_v_heads * lin_v_dim. */
    pdl_tensor lin_qkv;    /* (conv_dim, hidden): q, k, v before the convolution */
    pdl_tensor lin_z;      /* (lin_v_heads * lin_v_dim, hidden): the output gate */
    pdl_tensor lin_b;      /* (lin_v_heads, hidden): beta = sigmoid(b . x) */
    pdl_tensor lin_a;      /* (lin_v_heads, hidden): the decay's input */
    pdl_tensor lin_conv1d; /* (conv_dim, lin_conv) in the files; after model_finish (lin_conv, conv_dim) F32:
                            * row i holds tap i (oldest first) of every channel */
    pdl_tensor lin_dt_bias;/* (lin_v_heads) F32 */
    pdl_tensor lin_a_neg;  /* (lin_v_heads) F32: -exp(A_log) (GGUF ssm_a holds it so; a Hugging Face
                            * A_log is turned into it at load) */
    pdl_tensor lin_norm;   /* (lin_v_dim) F32: the gated RMSNorm's weight (applied as w, not 1 + w) */
    pdl_tensor lin_out;    /* (hidden, lin_v_heads * lin_v_dim) */
} pdl_layer_weights;

typedef struct pdl_model_weights {
    pdl_tensor tok_embd;     /* (vocab, hidden) */
    pdl_tensor output_norm;  /* (hidden) */
    pdl_tensor output;       /* (vocab, hidden); == tok_embd when tied; absent for an encoder */
    pdl_tensor pos_embd;     /* (n_positions, hidden): absolute position embeddings (encoder) */
    pdl_tensor type_embd;    /* (token types, hidden): row 0 is added to every row (encoder) */
    pdl_tensor embd_norm, embd_norm_b; /* (hidden): the LayerNorm of the embeddings' sum (encoder) */
    pdl_layer_weights *layers; /* [model_weight_layers]: the main stack, then the MTP block's layer */
    pdl_tensor *experts;     /* [model_weight_layers][3][n_experts]: every layer's exp_gate, exp_up, exp_down */
    /* The MTP block (cfg.mtp_loaded; DeepSeek-V3's and Qwen3.5's multi-token
     * prediction): the next token's embedding and the main model's final
     * hidden state, each normed, concatenated and projected, then its layer
     * and its own final norm; the head is the model's. */
    pdl_tensor mtp_fc;       /* (hidden, 2 * hidden): [embedding, hidden] -> hidden (GGUF nextn.eh_proj) */
    pdl_tensor mtp_enorm;    /* (hidden): the embedding's norm (pre_fc_norm_embedding, nextn.enorm) */
    pdl_tensor mtp_hnorm;    /* (hidden): the hidden state's norm (pre_fc_norm_hidden, nextn.hnorm) */
    pdl_tensor mtp_norm;     /* (hidden): the block's final norm (mtp.norm, nextn.shared_head_norm) */
} pdl_model_weights;

struct pdl_model {
    pdl_model_config cfg;
    pdl_model_weights w;
    float *rope_inv_freq;   /* [rope_dim / 2]: theta^(-2i/d), scaled (llama3) */
    float *rope_inv_freq_local; /* [rope_dim / 2] of windowed layers (rope_theta_local), or NULL */
    float *rope_factors;    /* [rope_dim / 2] frequency divisors: GGUF rope_freqs, or LongRoPE long */
    float *rope_factors_short; /* [rope_dim / 2] LongRoPE short factors, or NULL */
    int ctx_size;           /* context in effect (option or cfg.ctx_len) */
    char source[16];        /* "gguf" or "safetensors" */
    char weight_types[64];  /* distinct dtypes of the matrices, e.g. "F16,F32" */

    /* Backing files: exactly one is set. */
    gguf_file *gguf;
    st_model *st;

    /* The tokenizer, or NULL with the reason kept for when text is needed. */
    tok_tokenizer *tok;
    char tok_error[PDL_ERROR_MAX];

    pdl_kernels kernels;    /* the kernel family in effect at the load: which matrices got weight panels
                             * (a context keeps its own table, of the family in effect when it is made) */
    bool kernels_chosen;    /* pdl_model_options named them: every context over the model takes `kernels` */
    int default_threads;    /* pdl_model_options.n_threads: what a context asking for 0 threads gets */
    int probe_state;        /* selective-logits probe, run once at the end of the load: 0 rejected, 1 passed
                             * (-1 not run: a model still loading) */

    void **owned;           /* buffers the model allocated (converted weights) */
    size_t n_owned;
    void *matrices;         /* the weight matrices' copies (panels or bytes), one huge_alloc buffer */
};

/* Loaders: fill cfg and w from one source; the generic checks (shapes,
 * presence) run in model_load.c for both. */
int model_load_gguf(pdl_model *m, const char *path, pdl_error *err);
int model_load_hf(pdl_model *m, const char *dir, pdl_error *err);

/* Looks `name` up in set; a missing required tensor is an error naming it and
 * `where` (the file or folder). An absent optional one leaves dst zeroed. */
int model_take_tensor(const pdl_tensor_set *set, const char *name, bool required, const char *where,
                      pdl_tensor *dst, pdl_error *err);

/* Takes every per-layer weight from set under either format's names
 * (GGUF "blk.N.attn_q.weight" when hf_prefix is NULL, else Hugging Face
 * "<hf_prefix>layers.N.self_attn.q_proj.weight", hf_prefix "model." or a
 * multimodal checkpoint's "language_model.model."), allocating m->w.layers.
 * Q/K/V biases found in the files switch cfg.qkv_bias on; fused qkv and
 * gate_up matrices are split into row views. */
int model_take_layers(pdl_model *m, const pdl_tensor_set *set, const char *hf_prefix, const char *where,
                      pdl_error *err);

/* The encoder family's (BERT) weights from set under Hugging Face's
 * BertModel names (bare or under "bert.") or, with gguf, llama.cpp's
 * `bert` names; sets cfg.encoder, its position count and the rest of what
 * an encoder's forward reads (model_load_bert.c). */
int model_take_bert(pdl_model *m, const pdl_tensor_set *set, bool gguf, const char *where, pdl_error *err);

/* After a loader: checks every weight against cfg (presence, shapes, dtypes)
 * with one clear error naming the tensor, its file and the expected shape;
 * makes vectors F32. RoPE frequencies are computed later, once the context
 * in effect is known (LongRoPE picks its factors by it). */
int model_finish(pdl_model *m, pdl_error *err);

/* A malloc'ed F32 copy of a vector tensor of exactly n elements (RoPE factor
 * tensors); a clear error naming it otherwise. */
int model_vector_copy(const pdl_tensor *t, int64_t n, float **out, pdl_error *err);

/* Rows [r0, r0 + rows) of a matrix as a view (fused Q/K/V, gate/up), named
 * "<name>[what]" in messages. */
void model_tensor_rows(const pdl_tensor *t, int64_t r0, int64_t rows, const char *what, pdl_tensor *out);

/* The selective-logits probe's verdict (logits_probe.c): the sampled rows'
 * logits through the full head and through the selective head (n_rows x
 * vocab each) must be equal bit for bit; otherwise *ok is false and reason
 * names the rows (rows[0], rows[n_rows - 1] of an n_tokens probe) and the
 * largest difference. */
void probe_compare(const float *full, const float *sel, int n_rows, int vocab, const int32_t *rows, int n_tokens,
                   bool *ok, char *reason, size_t reason_len);

/* One row's routing: its k experts of the (n_experts) logits, best first
 * (the lower id on a tie), and their weights (softmax over all experts,
 * over the k chosen, or sigmoid, then renormalized and scaled as the config
 * says). */
void moe_route(const pdl_model_config *c, const float *logits, int32_t *sel, float *w);

/* Whether layer l attends through the sliding window (see swa_pattern). */
static inline bool model_layer_windowed(const pdl_model_config *c, int l) {
    if (c->sliding_window <= 0) return false;
    return !(c->swa_pattern > 0 && l % c->swa_pattern == c->swa_pattern - 1);
}

#endif
