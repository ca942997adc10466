/*
 * arch.c - the architecture table (see arch.h): one row per family, and
 * the look-ups both loaders use.
 *
 * A row names a family in both formats and lists what sets it apart; every
 * field left out is the Llama default (RMSNorm, SiLU, pre-norm blocks, no
 * q/k norm, no window, Hugging Face rotate-half RoPE, untied head). GGUF
 * `llama`-family files store Q and K permuted for adjacent-pair RoPE
 * (rope_gguf = PDL_ROPE_NORM); Cohere's RoPE is interleaved in both.
 */
#include <stdio.h>
#include <string.h>

#include "model/arch.h"
#include "model/model.h"

static const pdl_hf_defaults GEMMA3_HF = {
    .hidden = 2304, .n_layers = 26, .n_heads = 8, .n_kv_heads = 4, .head_dim = 256, .ffn = 9216,
    .vocab = 262208, .ctx_len = 131072, .rope_theta = 1e6f,
};

static const pdl_arch_desc ARCHS[] = {
    {.name = "llama", .hf_types = "llama", .gguf_arch = "llama", .about = "Llama 2 and 3.x",
     .rope_gguf = PDL_ROPE_NORM},
    {.name = "mistral", .hf_types = "mistral", .gguf_arch = "mistral", .about = "a window on every layer",
     .rope_gguf = PDL_ROPE_NORM, .window = PDL_WINDOW_UNIFORM},
    {.name = "qwen2", .hf_types = "qwen2 qwen2_5_vl qwen2_5_vl_text", .gguf_arch = "qwen2 qwen2vl",
     .gguf_mrope = "qwen2vl", .about = "Q/K/V biases (Qwen2.5-VL's text model: M-RoPE)", .qkv_bias = true,
     .window = PDL_WINDOW_REFUSED},
    {.name = "qwen3", .hf_types = "qwen3", .gguf_arch = "qwen3", .about = "per-head q/k RMSNorm",
     .qk_norm = PDL_QK_NORM_HEAD, .window = PDL_WINDOW_REFUSED},
    {.name = "granite", .hf_types = "granite", .gguf_arch = "granite",
     .about = "embedding, attention, residual and logit multipliers", .rope_gguf = PDL_ROPE_NORM,
     .scalings = PDL_SCALE_MULTIPLIERS},
    {.name = "command-r", .hf_types = "cohere", .gguf_arch = "command-r",
     .about = "LayerNorm, parallel block, interleaved RoPE, logit scale", .norm = PDL_NORM_LAYER,
     .block = PDL_BLOCK_PARALLEL, .rope_gguf = PDL_ROPE_NORM, .rope_hf = PDL_ROPE_NORM, .hf_tied = true,
     .scalings = PDL_SCALE_LOGIT},
    {.name = "cohere2", .hf_types = "cohere2", .gguf_arch = "cohere2",
     .about = "Command-R with every 4th layer global and RoPE on windowed layers only", .norm = PDL_NORM_LAYER,
     .block = PDL_BLOCK_PARALLEL, .window = PDL_WINDOW_PATTERN, .swa_period = 4, .gguf_window_required = true,
     .rope_gguf = PDL_ROPE_NORM, .rope_hf = PDL_ROPE_NORM, .rope_global_none = true, .hf_tied = true,
     .scalings = PDL_SCALE_LOGIT},
    {.name = "gemma2", .hf_types = "gemma2", .gguf_arch = "gemma2",
     .about = "sandwich norms, GELU, soft-caps, every 2nd layer global", .act = PDL_ACT_GELU_TANH,
     .block = PDL_BLOCK_SANDWICH, .hf_norm_plus_one = true, .window = PDL_WINDOW_PATTERN, .swa_period = 2,
     .hf_tied = true, .scalings = PDL_SCALE_GEMMA, .hf_attn_softcap = 50.0f, .hf_final_softcap = 30.0f},
    {.name = "gemma3", .hf_types = "gemma3_text gemma3", .gguf_arch = "gemma3",
     .about = "Gemma 2 without soft-caps, per-head (1 + w) q/k norms, every 6th layer global, local RoPE base",
     .act = PDL_ACT_GELU_TANH, .block = PDL_BLOCK_SANDWICH, .qk_norm = PDL_QK_NORM_HEAD, .hf_norm_plus_one = true,
     .window = PDL_WINDOW_PATTERN, .swa_period = 6, .rope_theta_local = 10000.0f, .hf_tied = true,
     .scalings = PDL_SCALE_GEMMA, .gguf_qpas_layers = 62, .hf_defaults = &GEMMA3_HF},
    {.name = "phi3", .hf_types = "phi3", .gguf_arch = "phi3",
     .about = "fused qkv and gate_up, partial RoPE, LongRoPE", .window = PDL_WINDOW_UNIFORM,
     .fused_gate_up = true, .hf_eps = 1e-5f},
    {.name = "olmo2", .hf_types = "olmo2", .gguf_arch = "olmo2",
     .about = "norms after each branch only, q/k RMSNorm over the whole projection",
     .block = PDL_BLOCK_POST_NORM, .qk_norm = PDL_QK_NORM_WHOLE, .hf_eps = 1e-5f},
    {.name = "mixtral", .hf_types = "mixtral", .gguf_arch = "llama",
     .about = "Mistral with experts: softmax top-k, renormalized", .rope_gguf = PDL_ROPE_NORM,
     .window = PDL_WINDOW_UNIFORM, .moe = PDL_MOE_BLOCK_SPARSE, .hf_moe_norm = true, .gguf_moe_norm = true,
     .hf_eps = 1e-5f},
    {.name = "qwen2moe", .hf_types = "qwen2_moe", .gguf_arch = "qwen2moe",
     .about = "Qwen2 with experts and a sigmoid-gated shared expert", .qkv_bias = true,
     .window = PDL_WINDOW_REFUSED, .moe = PDL_MOE_MLP, .shared_expert_gate = true},
    {.name = "qwen3moe", .hf_types = "qwen3_moe", .gguf_arch = "qwen3moe",
     .about = "Qwen3 with experts: softmax top-k, norm_topk_prob", .qk_norm = PDL_QK_NORM_HEAD,
     .window = PDL_WINDOW_REFUSED, .moe = PDL_MOE_MLP, .gguf_moe_norm = true},
    {.name = "olmoe", .hf_types = "olmoe", .gguf_arch = "olmoe",
     .about = "q/k RMSNorm over the whole projection, experts: softmax top-k, not renormalized",
     .qk_norm = PDL_QK_NORM_WHOLE, .moe = PDL_MOE_MLP, .hf_eps = 1e-5f},
    {.name = "gpt-oss", .hf_types = "gpt_oss", .gguf_arch = "gpt-oss",
     .about = "attention sinks, biases, every 2nd layer global, experts: top-k softmax, clamped SwiGLU",
     .act = PDL_ACT_SWIGLU_OAI, .qkv_bias = true, .attn_sinks = true, .window = PDL_WINDOW_PATTERN, .swa_period = 2,
     .gguf_window_required = true, .hf_eps = 1e-5f, .moe = PDL_MOE_GPT_OSS, .router = PDL_ROUTER_SOFTMAX_TOPK},
    {.name = "bert", .hf_types = "bert", .gguf_arch = "bert",
     .about = "an encoder: attention both ways, absolute positions, norms after the add, GELU; embeddings only",
     .norm = PDL_NORM_LAYER, .act = PDL_ACT_GELU_ERF, .block = PDL_BLOCK_POST_ADD, .qkv_bias = true,
     .hf_eps = 1e-12f, .encoder = true},
    {.name = "qwen35", .hf_types = "qwen3_5 qwen3_5_text", .gguf_arch = "qwen35",
     .about = "Gated DeltaNet linear attention on 3 of 4 layers, gated full attention, (1 + w) norms",
     .qk_norm = PDL_QK_NORM_HEAD, .hf_norm_plus_one = true, .window = PDL_WINDOW_REFUSED, .hybrid = true},
    {.name = "qwen35moe", .hf_types = "qwen3_5_moe qwen3_5_moe_text", .gguf_arch = "qwen35moe",
     .about = "Qwen3.5 with experts: softmax top-k, renormalized, a sigmoid-gated shared expert",
     .qk_norm = PDL_QK_NORM_HEAD, .hf_norm_plus_one = true, .window = PDL_WINDOW_REFUSED, .hybrid = true,
     .moe = PDL_MOE_MLP, .hf_moe_norm = true, .gguf_moe_norm = true, .shared_expert_gate = true},
    {.name = "qwen3next", .hf_types = "qwen3_next", .gguf_arch = "qwen3next",
     .about = "Qwen3.5-MoE's predecessor: the same layers, q/k/v/z and b/a projections fused per key head",
     .qk_norm = PDL_QK_NORM_HEAD, .hf_norm_plus_one = true, .window = PDL_WINDOW_REFUSED, .hybrid = true,
     .moe = PDL_MOE_MLP, .hf_moe_norm = true, .gguf_moe_norm = true, .shared_expert_gate = true},
};

#define N_ARCHS (sizeof ARCHS / sizeof ARCHS[0])

static bool word_in(const char *words, const char *w) {
    size_t n = strlen(w);
    for (const char *p = words; p && *p;) {
        const char *sp = strchr(p, ' ');
        size_t len = sp ? (size_t)(sp - p) : strlen(p);
        if (len == n && memcmp(p, w, n) == 0) return true;
        p = sp ? sp + 1 : NULL;
    }
    return false;
}

const pdl_arch_desc *arch_by_hf(const char *model_type) {
    for (size_t i = 0; i < N_ARCHS; i++)
        if (ARCHS[i].hf_types && word_in(ARCHS[i].hf_types, model_type)) return &ARCHS[i];
    return NULL;
}

const pdl_arch_desc *arch_by_gguf(const char *name, bool has_experts) {
    const pdl_arch_desc *first = NULL;
    for (size_t i = 0; i < N_ARCHS; i++) {
        if (!ARCHS[i].gguf_arch || !word_in(ARCHS[i].gguf_arch, name)) continue;
        if ((ARCHS[i].moe != PDL_MOE_NONE) == has_experts) return &ARCHS[i];
        if (!first) first = &ARCHS[i];
    }
    return first;
}

bool arch_gguf_mrope(const pdl_arch_desc *a, const char *name) {
    return a->gguf_mrope && word_in(a->gguf_mrope, name);
}

void arch_supported(bool gguf, char *buf, size_t cap) {
    size_t off = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < N_ARCHS && off < cap; i++) {
        const char *names = gguf ? ARCHS[i].gguf_arch : ARCHS[i].hf_types;
        if (!names) continue;
        for (const char *p = names; *p && off < cap;) {
            const char *sp = strchr(p, ' ');
            int len = sp ? (int)(sp - p) : (int)strlen(p);
            /* a GGUF name shared by two rows (llama: Llama, Mixtral) once */
            char word[64];
            snprintf(word, sizeof word, "%.*s", len, p);
            bool seen = false;
            for (size_t j = 0; gguf && j < i; j++) seen |= ARCHS[j].gguf_arch && word_in(ARCHS[j].gguf_arch, word);
            if (!seen) off += (size_t)snprintf(buf + off, cap - off, "%s%.*s", off ? ", " : "", len, p);
            p = sp ? sp + 1 : p + len;
        }
    }
}

void arch_apply(const pdl_arch_desc *a, bool gguf, pdl_model_config *c) {
    c->arch = a;
    c->norm = a->norm;
    c->act = a->act;
    c->block = a->block;
    c->qk_norm = a->qk_norm;
    c->qkv_bias = a->qkv_bias;
    c->attn_sinks = a->attn_sinks;
    c->norm_plus_one = !gguf && a->hf_norm_plus_one; /* llama.cpp's converter stores 1 + w */
    c->swa_pattern = a->window == PDL_WINDOW_PATTERN ? a->swa_period : 0;
    c->rope_style = gguf ? a->rope_gguf : a->rope_hf;
    c->rope_global_none = a->rope_global_none;
    c->rope_theta_local = a->rope_theta_local;
    c->tied_embeddings = a->hf_tied;
    c->fused_gate_up = a->fused_gate_up;
    c->router = a->router;
    c->router_norm = gguf ? a->gguf_moe_norm : a->hf_moe_norm;
    c->shared_gate = a->shared_expert_gate;
    c->attn_out_gate = a->hybrid;
    /* llama.cpp's converter tiles Qwen3.5's value heads (not Qwen3-Next's:
     * model_load_gguf.c's read_hybrid) */
    c->lin_v_tiled = gguf && a->hybrid;
}


bool pdl_architecture(size_t i, pdl_arch_info *out) {
    if (i >= N_ARCHS) return false;
    const pdl_arch_desc *a = &ARCHS[i];
    *out = (pdl_arch_info){.name = a->name, .hf_model_types = a->hf_types, .gguf_arch = a->gguf_arch,
                           .about = a->about, .experts = a->moe != PDL_MOE_NONE};
    return true;
}
