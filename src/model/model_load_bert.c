/*
 * model_load_bert.c - the encoder family's tensors (BERT: bge, all-MiniLM,
 * e5, gte-base and the other sentence-transformers encoders) under both
 * formats' names, into the config and the weight views the forward reads.
 *
 * BERT differs from the decoder families in ways the config carries
 * (arch.c's row, pdl_model_config.encoder): absolute position embeddings
 * and token-type row 0 added to the token's, a LayerNorm (with bias) of
 * that sum, every norm after its residual add (PDL_BLOCK_POST_ADD), biases
 * on every projection, an ungated GELU MLP, no RoPE, no LM head, and
 * attention both ways over the prompt (the engine gives an encoder's prompt
 * one two-way span). Hugging Face BertModel names (with or without the
 * "bert." prefix of a BertFor* checkpoint) and llama.cpp's `bert` GGUF
 * names map to the same fields:
 *
 *   embeddings.word_embeddings        token_embd         w.tok_embd
 *   embeddings.position_embeddings    position_embd      w.pos_embd
 *   embeddings.token_type_embeddings  token_types        w.type_embd
 *   embeddings.LayerNorm              token_embd_norm    w.embd_norm(_b)
 *   encoder.layer.N.
 *     attention.self.query/key/value  blk.N.attn_q/k/v   wq, wk, wv (+ b)
 *     attention.output.dense          attn_output        wo, bo
 *     attention.output.LayerNorm      attn_output_norm   post_attn_norm(_b)
 *     intermediate.dense              ffn_up             w_up, b_up
 *     output.dense                    ffn_down           w_down, b_down
 *     output.LayerNorm                layer_output_norm  post_ffn_norm(_b)
 *
 * The shapes are checked by model_finish like every family's.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "util/error.h"

typedef struct bert_name {
    size_t offset;    /* offsetof(pdl_layer_weights, field) */
    const char *hf;   /* after "encoder.layer.N." */
    const char *gguf; /* after "blk.N." */
} bert_name;

static const bert_name BERT_LAYER[] = {
    {offsetof(pdl_layer_weights, wq), "attention.self.query.weight", "attn_q.weight"},
    {offsetof(pdl_layer_weights, bq), "attention.self.query.bias", "attn_q.bias"},
    {offsetof(pdl_layer_weights, wk), "attention.self.key.weight", "attn_k.weight"},
    {offsetof(pdl_layer_weights, bk), "attention.self.key.bias", "attn_k.bias"},
    {offsetof(pdl_layer_weights, wv), "attention.self.value.weight", "attn_v.weight"},
    {offsetof(pdl_layer_weights, bv), "attention.self.value.bias", "attn_v.bias"},
    {offsetof(pdl_layer_weights, wo), "attention.output.dense.weight", "attn_output.weight"},
    {offsetof(pdl_layer_weights, bo), "attention.output.dense.bias", "attn_output.bias"},
    {offsetof(pdl_layer_weights, post_attn_norm), "attention.output.LayerNorm.weight", "attn_output_norm.weight"},
    {offsetof(pdl_layer_weights, post_attn_norm_b), "attention.output.LayerNorm.bias", "attn_output_norm.bias"},
    {offsetof(pdl_layer_weights, w_up), "intermediate.dense.weight", "ffn_up.weight"},
    {offsetof(pdl_layer_weights, b_up), "intermediate.dense.bias", "ffn_up.bias"},
    {offsetof(pdl_layer_weights, w_down), "output.dense.weight", "ffn_down.weight"},
    {offsetof(pdl_layer_weights, b_down), "output.dense.bias", "ffn_down.bias"},
    {offsetof(pdl_layer_weights, post_ffn_norm), "output.LayerNorm.weight", "layer_output_norm.weight"},
    {offsetof(pdl_layer_weights, post_ffn_norm_b), "output.LayerNorm.bias", "layer_output_norm.bias"},
};

static const bert_name BERT_TOP[] = {
    {offsetof(pdl_model_weights, tok_embd), "embeddings.word_embeddings.weight", "token_embd.weight"},
    {offsetof(pdl_model_weights, pos_embd), "embeddings.position_embeddings.weight", "position_embd.weight"},
    {offsetof(pdl_model_weights, type_embd), "embeddings.token_type_embeddings.weight", "token_types.weight"},
    {offsetof(pdl_model_weights, embd_norm), "embeddings.LayerNorm.weight", "token_embd_norm.weight"},
    {offsetof(pdl_model_weights, embd_norm_b), "embeddings.LayerNorm.bias", "token_embd_norm.bias"},
};

/* A tensor of a layer past the declared count means the count is wrong. */
static int check_layer_count(const pdl_model_config *c, const pdl_tensor_set *set, const char *prefix,
                             const char *where, pdl_error *err) {
    size_t pl = strlen(prefix);
    for (size_t i = 0; i < set->count; i++) {
        const char *name = set->items[i].name;
        if (strncmp(name, prefix, pl) != 0 || name[pl] < '0' || name[pl] > '9') continue;
        char *end;
        long l = strtol(name + pl, &end, 10);
        if (*end == '.' && l >= c->n_layers)
            return err_fail(err, "%s: tensor '%s' belongs to layer %ld, but the model declares %d layers", where, name,
                            l, c->n_layers);
    }
    return 0;
}

int model_take_bert(pdl_model *m, const pdl_tensor_set *set, bool gguf, const char *where, pdl_error *err) {
    pdl_model_config *c = &m->cfg;
    pdl_model_weights *w = &m->w;
    if (c->n_layers <= 0 || c->n_layers > 4096)
        return err_fail(err, "%s: %d layers (must be 1 to 4096)", where, c->n_layers);
    /* BertModel saves bare names; a BertFor* checkpoint puts "bert." before them */
    const char *hf = tensor_set_find(set, "bert.embeddings.word_embeddings.weight") ? "bert." : "";
    char name[PDL_TENSOR_NAME_MAX];
    for (size_t i = 0; i < sizeof BERT_TOP / sizeof BERT_TOP[0]; i++) {
        if (gguf) snprintf(name, sizeof name, "%s", BERT_TOP[i].gguf);
        else snprintf(name, sizeof name, "%s%s", hf, BERT_TOP[i].hf);
        if (model_take_tensor(set, name, true, where, (pdl_tensor *)((char *)w + BERT_TOP[i].offset), err))
            return -1;
    }
    w->layers = calloc((size_t)c->n_layers + 1, sizeof *w->layers);
    if (!w->layers) return err_fail(err, "out of memory");
    for (int l = 0; l < c->n_layers; l++)
        for (size_t i = 0; i < sizeof BERT_LAYER / sizeof BERT_LAYER[0]; i++) {
            if (gguf) snprintf(name, sizeof name, "blk.%d.%s", l, BERT_LAYER[i].gguf);
            else snprintf(name, sizeof name, "%sencoder.layer.%d.%s", hf, l, BERT_LAYER[i].hf);
            if (model_take_tensor(set, name, true, where, (pdl_tensor *)((char *)&w->layers[l] + BERT_LAYER[i].offset),
                                  err))
                return -1;
        }
    char prefix[64];
    if (gguf) snprintf(prefix, sizeof prefix, "blk.");
    else snprintf(prefix, sizeof prefix, "%sencoder.layer.", hf);
    if (check_layer_count(c, set, prefix, where, err)) return -1;
    /* what the forward reads for an encoder (model_finish checks the shapes) */
    c->encoder = true;
    c->qkv_bias = true;
    c->tied_embeddings = false;
    c->rope_dim = 0;
    c->n_positions = w->pos_embd.n_dims == 2 ? (int)w->pos_embd.shape[0] : 0;
    if (c->ctx_len <= 0 || c->ctx_len > c->n_positions) c->ctx_len = c->n_positions;
    if (w->tok_embd.n_dims == 2 && c->vocab <= 0) c->vocab = (int)w->tok_embd.shape[0];
    return 0;
}
