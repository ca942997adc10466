/*
 * lora.c - LoRA adapters: loading them (a PEFT folder, or a llama.cpp LoRA
 * GGUF) against a loaded model, and adding their deltas to a batch's rows
 * in the forward (lora.h).
 *
 * PEFT (peft's LoraModel.save_pretrained): adapter_config.json gives r,
 * lora_alpha, use_rslora (scale alpha / sqrt(r), else alpha / r) and the
 * options refused here (DoRA, bias, modules_to_save, rank/alpha patterns,
 * fan_in_fan_out, target_parameters, layer replication);
 * adapter_model.safetensors holds
 * base_model.model.model.layers.N.<self_attn|mlp>.<module>.lora_A.weight
 * (r, in) and .lora_B.weight (out, r). llama.cpp (convert_lora_to_gguf.py):
 * general.type "adapter", adapter.type "lora", adapter.lora.alpha, tensors
 * blk.N.<attn_q|...>.weight.lora_a (r, in) / .lora_b (out, r), scale
 * alpha / r (1 without alpha). Tensors of any dtype with a dequantization
 * are held as F32.
 *
 * Q and K rows: GGUF files of the Llama family store Q and K permuted for
 * adjacent-pair RoPE (the model's rope_style then differs from its Hugging
 * Face one); B's rows of an adapter from the other side are permuted the
 * same way at load, so that PEFT adapters fit GGUF models and llama.cpp
 * adapters fit Hugging Face folders.
 */
#define _POSIX_C_SOURCE 200809L
#include "model/lora.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include "format/gguf.h"
#include "format/safetensors.h"
#include "kernels/cpu_ops.h"
#include "util/error.h"
#include "util/json_file.h"

static const char *const MODULE_NAMES[LORA_N_MODULES] = {"q", "k", "v", "o", "gate", "up", "down"};
static const char *const PEFT_MODULES[LORA_N_MODULES] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                                                         "self_attn.o_proj", "mlp.gate_proj",    "mlp.up_proj",
                                                         "mlp.down_proj"};
static const char *const GGUF_MODULES[LORA_N_MODULES] = {"attn_q",   "attn_k", "attn_v",  "attn_output",
                                                         "ffn_gate", "ffn_up", "ffn_down"};

/* ---- one row ------------------------------------------------------------------------ */

#define LORA_ROW_NAME lora_row_portable
#include "model/lora_row_body.h"

lora_row_fn lora_row_for(pdl_isa isa) {
#if defined(__x86_64__) || defined(_M_X64)
    if (isa == PDL_ISA_AVX512) return lora_row_avx512;
    if (isa == PDL_ISA_AVX2) return lora_row_avx2;
#else
    (void)isa;
#endif
    return lora_row_portable;
}

/* ---- applying --------------------------------------------------------------------- */

bool lora_batch_touches(const pdl_batch *b, int layer, lora_module m) {
    if (!b->lora) return false;
    for (int s = 0; s < b->n_seqs; s++)
        if (lora_pair_at(b->lora[s], layer, m)) return true;
    return false;
}

typedef struct lora_task {
    const pdl_batch *b;
    int layer;
    const lora_job *jobs;
    int n_jobs;
    lora_row_fn row;
} lora_task;

static void lora_rows(void *p, int ith, int nth) {
    const lora_task *t = p;
    const pdl_batch *b = t->b;
    long r0, r1;
    threadpool_split_range(b->n_tokens, ith, nth, &r0, &r1);
    int s = 0;
    for (long r = r0; r < r1; r++) {
        while (b->cu_seqlens[s + 1] <= r) s++;
        const pdl_lora *lora = b->lora[s];
        for (int j = 0; j < t->n_jobs; j++) {
            const lora_job *job = &t->jobs[j];
            const lora_pair *pr = lora_pair_at(lora, t->layer, job->m);
            if (!pr) continue;
            float scale = lora->scale * (b->lora_scale ? b->lora_scale[s] : 1.0f);
            t->row(pr, lora->rank, scale, job->x + r * job->ldx, job->y + r * job->ldy);
        }
    }
}

void lora_apply(pdl_threadpool *pool, pdl_isa isa, const pdl_batch *b, int layer, const lora_job *jobs, int n_jobs) {
    if (!b->lora) return;
    double work = 0;
    for (int s = 0; s < b->n_seqs; s++)
        for (int j = 0; j < n_jobs; j++) {
            const lora_pair *pr = lora_pair_at(b->lora[s], layer, jobs[j].m);
            if (pr)
                work += (double)(b->cu_seqlens[s + 1] - b->cu_seqlens[s]) * b->lora[s]->rank * (pr->in + pr->out);
        }
    if (work == 0) return;
    lora_task t = {.b = b, .layer = layer, .jobs = jobs, .n_jobs = n_jobs, .row = lora_row_for(isa)};
    /* ~256k multiply-adds per thread at least: a decode step's deltas are
     * small, and a parallel region costs its wake-ups */
    threadpool_run_n(pool, threadpool_threads_for(pool, work, 262144.0), lora_rows, &t);
}

/* ---- loading ---------------------------------------------------------------------- */

static const pdl_tensor *base_weight(const pdl_model *m, int layer, lora_module mod) {
    const pdl_layer_weights *lw = &m->w.layers[layer];
    const pdl_tensor *w[LORA_N_MODULES] = {&lw->wq, &lw->wk, &lw->wv, &lw->wo, &lw->w_gate, &lw->w_up, &lw->w_down};
    return w[mod];
}

/* What a loader found: the A and B tensor of each (layer, module). */
typedef struct lora_found {
    const pdl_tensor **a, **b; /* [n_layers][LORA_N_MODULES] */
} lora_found;

/* Rows of a Q or K projection permuted between Hugging Face's halves
 * layout and GGUF's adjacent pairs (llama.cpp's converter's permute):
 * Hugging Face row h*hd + j*hd/2 + i is GGUF row h*hd + 2i + j. */
static void permute_rows(float *b, int out, int cols, int n_heads, bool to_gguf, float *tmp) {
    int hd = out / n_heads, half = hd / 2;
    memcpy(tmp, b, (size_t)out * cols * sizeof *tmp);
    for (int h = 0; h < n_heads; h++)
        for (int j = 0; j < 2; j++)
            for (int i = 0; i < half; i++) {
                int hf = h * hd + j * half + i, gg = h * hd + 2 * i + j;
                int dst = to_gguf ? gg : hf, src = to_gguf ? hf : gg;
                memcpy(b + (size_t)dst * cols, tmp + (size_t)src * cols, (size_t)cols * sizeof *b);
            }
}

/* Checks every pair against the model, copies them as F32 (permuting Q/K
 * rows when the adapter's layout is not the model's), hashes them. */
static int lora_build(pdl_lora *l, const pdl_model *m, const lora_found *f, bool adapter_gguf_layout,
                      const char *where, pdl_error *err) {
    const pdl_model_config *c = &m->cfg;
    size_t floats = 0;
    int rank = 0;
    for (int layer = 0; layer < c->n_layers; layer++)
        for (int mod = 0; mod < LORA_N_MODULES; mod++) {
            size_t k = (size_t)layer * LORA_N_MODULES + mod;
            const pdl_tensor *a = f->a[k], *b = f->b[k];
            if (!a && !b) continue;
            const char *name = MODULE_NAMES[mod];
            if (!a || !b)
                return err_fail(err, "%s: layer %d module %s has lora_%s but no lora_%s", where, layer, name,
                                a ? "A" : "B", a ? "B" : "A");
            const pdl_tensor *w = base_weight(m, layer, (lora_module)mod);
            if (!w->data)
                return err_fail(err, "%s: %s: layer %d of the model has no dense %s projection (a linear-attention "
                                "or mixture-of-experts layer): adapters of it are not supported", where, a->name,
                                layer, name);
            if (a->n_dims != 2 || b->n_dims != 2)
                return err_fail(err, "%s: %s and %s must be matrices", where, a->name, b->name);
            int r = (int)a->shape[0];
            if (rank == 0) rank = r;
            if (r != rank || b->shape[1] != r)
                return err_fail(err, "%s: %s is (%lld, %lld) and %s (%lld, %lld): every lora_A must be (rank %d, in) "
                                "and lora_B (out, rank %d)", where, a->name, (long long)a->shape[0],
                                (long long)a->shape[1], b->name, (long long)b->shape[0], (long long)b->shape[1], rank,
                                rank);
            if (a->shape[1] != w->shape[1] || b->shape[0] != w->shape[0])
                return err_fail(err, "%s: %s (%lld, %lld) and %s (%lld, %lld) do not fit the model's %s (out %lld, in "
                                "%lld): lora_A must be (rank, %lld) and lora_B (%lld, rank)", where, a->name,
                                (long long)a->shape[0], (long long)a->shape[1], b->name, (long long)b->shape[0],
                                (long long)b->shape[1], w->name, (long long)w->shape[0], (long long)w->shape[1],
                                (long long)w->shape[1], (long long)w->shape[0]);
            if (dtype_is_mlx(a->dtype) || dtype_is_mlx(b->dtype) || a->dtype == PDL_DTYPE_U32 ||
                a->dtype == PDL_DTYPE_U8 || b->dtype == PDL_DTYPE_U32 || b->dtype == PDL_DTYPE_U8)
                return err_fail(err, "%s: %s / %s: dtype %s / %s is not supported for adapters", where, a->name,
                                b->name, dtype_name(a->dtype), dtype_name(b->dtype));
            floats += (size_t)tensor_nelems(a) + (size_t)tensor_nelems(b);
        }
    if (rank == 0) return err_fail(err, "%s: the adapter changes no module of the model", where);
    if (rank > PDL_LORA_MAX_RANK) return err_fail(err, "%s: rank %d above the most supported (%d)", where, rank,
                                                  PDL_LORA_MAX_RANK);
    l->rank = rank;
    l->n_layers = c->n_layers;
    l->pairs = calloc((size_t)c->n_layers * LORA_N_MODULES, sizeof *l->pairs);
    l->data = malloc(floats * sizeof *l->data);
    size_t most_out = 0;
    for (size_t k = 0; k < (size_t)c->n_layers * LORA_N_MODULES; k++)
        if (f->b[k] && (size_t)f->b[k]->shape[0] > most_out) most_out = (size_t)f->b[k]->shape[0];
    float *tmp = malloc((most_out ? most_out : 1) * (size_t)rank * sizeof *tmp);
    if (!l->pairs || !l->data || !tmp) {
        free(tmp);
        return err_fail(err, "%s: out of memory for the adapter (%zu floats)", where, floats);
    }
    /* the model's Q/K rows are GGUF's adjacent pairs where its rope style is
     * not its family's Hugging Face one */
    bool model_gguf_layout = m->gguf && c->arch && c->rope_style != c->arch->rope_hf;
    bool hf_layout_family = c->arch && c->arch->rope_gguf != c->arch->rope_hf;
    XXH3_state_t st;
    XXH3_128bits_reset(&st);
    XXH3_128bits_update(&st, "pdl-lora", 8);
    XXH3_128bits_update(&st, &l->rank, sizeof l->rank);
    XXH3_128bits_update(&st, &l->scale, sizeof l->scale);
    float *at = l->data;
    for (int layer = 0; layer < c->n_layers; layer++)
        for (int mod = 0; mod < LORA_N_MODULES; mod++) {
            size_t k = (size_t)layer * LORA_N_MODULES + mod;
            const pdl_tensor *a = f->a[k], *b = f->b[k];
            if (!a) continue;
            lora_pair *p = &l->pairs[k];
            p->in = (int)a->shape[1];
            p->out = (int)b->shape[0];
            float *pa = at, *pb = at + (size_t)rank * p->in;
            at = pb + (size_t)p->out * rank;
            if (ops_dequant_blocks(a->dtype, a->data, pa, tensor_nelems(a)) ||
                ops_dequant_blocks(b->dtype, b->data, pb, tensor_nelems(b))) {
                free(tmp);
                return err_fail(err, "%s: %s / %s: dtype %s / %s cannot be read as F32", where, a->name, b->name,
                                dtype_name(a->dtype), dtype_name(b->dtype));
            }
            const pdl_tensor *bad = NULL;
            for (size_t i = 0; i < (size_t)tensor_nelems(a) && !bad; i++) bad = isfinite(pa[i]) ? NULL : a;
            for (size_t i = 0; i < (size_t)tensor_nelems(b) && !bad; i++) bad = isfinite(pb[i]) ? NULL : b;
            if (bad) {
                free(tmp);
                return err_fail(err, "%s: %s holds a value that is not finite", where, bad->name);
            }
            if (hf_layout_family && (mod == LORA_Q || mod == LORA_K) && adapter_gguf_layout != model_gguf_layout) {
                int heads = mod == LORA_Q ? c->n_heads : c->n_kv_heads;
                if (heads <= 0 || p->out % heads || (p->out / heads) % 2) {
                    free(tmp);
                    return err_fail(err, "%s: %s: cannot permute %d rows over %d heads", where, b->name, p->out,
                                    heads);
                }
                permute_rows(pb, p->out, rank, heads, model_gguf_layout, tmp);
            }
            int32_t ids[2] = {layer, mod};
            XXH3_128bits_update(&st, ids, sizeof ids);
            XXH3_128bits_update(&st, pa, (size_t)rank * p->in * sizeof *pa);
            XXH3_128bits_update(&st, pb, (size_t)p->out * rank * sizeof *pb);
            /* B (out, rank) -> B^T (rank, out) */
            memcpy(tmp, pb, (size_t)p->out * rank * sizeof *tmp);
            for (int o = 0; o < p->out; o++)
                for (int k = 0; k < rank; k++) pb[(size_t)k * p->out + o] = tmp[(size_t)o * rank + k];
            p->a = pa;
            p->bt = pb;
            l->module_mask |= 1u << mod;
            l->n_pairs++;
        }
    free(tmp);
    XXH128_hash_t h = XXH3_128bits_digest(&st);
    l->key[0] = h.low64;
    l->key[1] = h.high64;
    return 0;
}

/* ---- PEFT ------------------------------------------------------------------------- */

/* An option of adapter_config.json that must be absent, null, false or empty. */
static int refuse_set(const json_t *cfg, const char *key, const char *what, const char *where, pdl_error *err) {
    const json_t *v = json_object_get(cfg, key);
    bool set = v && !json_is_null(v) && !json_is_false(v) && !(json_is_object(v) && json_object_size(v) == 0) &&
               !(json_is_array(v) && json_array_size(v) == 0) && !(json_is_string(v) && !*json_string_value(v));
    if (set) return err_fail(err, "%s: \"%s\" is set: %s is not supported", where, key, what);
    return 0;
}

static int peft_config(pdl_lora *l, const char *path, int *r_out, pdl_error *err) {
    json_t *cfg = NULL;
    if (json_file_load(path, 0, &cfg, err)) return -1;
    int rc = -1;
    if (!json_is_object(cfg)) {
        err_fail(err, "%s: not a JSON object", path);
        goto out;
    }
    const json_t *type = json_object_get(cfg, "peft_type");
    if (type && (!json_is_string(type) || strcmp(json_string_value(type), "LORA") != 0)) {
        err_fail(err, "%s: peft_type %s: only LORA adapters are supported", path,
                 json_is_string(type) ? json_string_value(type) : "(not a string)");
        goto out;
    }
    const json_t *r = json_object_get(cfg, "r"), *alpha = json_object_get(cfg, "lora_alpha");
    if (!json_is_integer(r) || json_integer_value(r) <= 0 || json_integer_value(r) > PDL_LORA_MAX_RANK) {
        err_fail(err, "%s: \"r\" must be an integer in [1, %d]", path, PDL_LORA_MAX_RANK);
        goto out;
    }
    if (alpha && !json_is_number(alpha)) {
        err_fail(err, "%s: \"lora_alpha\" must be a number", path);
        goto out;
    }
    const json_t *bias = json_object_get(cfg, "bias");
    if (bias && !json_is_null(bias) && !(json_is_string(bias) && strcmp(json_string_value(bias), "none") == 0)) {
        err_fail(err, "%s: \"bias\" must be \"none\": trained biases are not supported", path);
        goto out;
    }
    if (refuse_set(cfg, "use_dora", "DoRA (weight-decomposed LoRA)", path, err) ||
        refuse_set(cfg, "modules_to_save", "training whole modules beside the adapter", path, err) ||
        refuse_set(cfg, "rank_pattern", "a rank per module", path, err) ||
        refuse_set(cfg, "alpha_pattern", "an alpha per module", path, err) ||
        refuse_set(cfg, "fan_in_fan_out", "transposed (Conv1D) weights", path, err) ||
        refuse_set(cfg, "target_parameters", "adapters of parameters (experts)", path, err) ||
        refuse_set(cfg, "layer_replication", "layer replication", path, err) ||
        refuse_set(cfg, "use_qalora", "QA-LoRA", path, err))
        goto out;
    const json_t *rs = json_object_get(cfg, "use_rslora");
    if (rs && !json_is_boolean(rs) && !json_is_null(rs)) {
        err_fail(err, "%s: \"use_rslora\" must be true or false", path);
        goto out;
    }
    int rank = (int)json_integer_value(r);
    l->alpha = alpha ? (float)json_number_value(alpha) : 8.0f; /* peft's default lora_alpha */
    l->scale = json_is_true(rs) ? l->alpha / sqrtf((float)rank) : l->alpha / (float)rank;
    *r_out = rank;
    rc = 0;
out:
    json_decref(cfg);
    return rc;
}

/* Parses a PEFT tensor name into (layer, module, A or B); -1 with a message
 * for a name of anything else. */
static int peft_name(const char *name, const char *where, int n_layers, int *layer, lora_module *mod, bool *is_a,
                     pdl_error *err) {
    const char *p = strstr(name, "layers.");
    if (strncmp(name, "base_model.model.", 17) != 0 || !p || (p > name && p[-1] != '.'))
        return err_fail(err, "%s: tensor %s: not a LoRA weight of a decoder layer (base_model.model.*.layers.N.*)",
                        where, name);
    p += 7;
    char *end;
    long n = strtol(p, &end, 10);
    if (end == p || *end != '.' || n < 0)
        return err_fail(err, "%s: tensor %s: no layer number after \"layers.\"", where, name);
    if (n >= n_layers)
        return err_fail(err, "%s: tensor %s: layer %ld, the model has %d layers", where, name, n, n_layers);
    const char *rest = end + 1;
    for (int m = 0; m < LORA_N_MODULES; m++) {
        size_t len = strlen(PEFT_MODULES[m]);
        if (strncmp(rest, PEFT_MODULES[m], len) != 0 || rest[len] != '.') continue;
        const char *ab = rest + len + 1;
        if (strcmp(ab, "lora_A.weight") == 0 || strcmp(ab, "lora_B.weight") == 0) {
            *layer = (int)n;
            *mod = (lora_module)m;
            *is_a = ab[5] == 'A';
            return 0;
        }
        return err_fail(err, "%s: tensor %s: only lora_A.weight and lora_B.weight are supported (DoRA magnitudes, "
                        "biases and embeddings are not)", where, name);
    }
    return err_fail(err, "%s: tensor %s: module not supported (adapters of q_proj, k_proj, v_proj, o_proj, gate_proj, "
                    "up_proj and down_proj are)", where, name);
}

static char *join_path(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/%s", dir, name);
    return p;
}

static int load_peft(pdl_lora *l, const pdl_model *m, const char *dir, pdl_error *err) {
    char *cfg_path = join_path(dir, "adapter_config.json"), *st_path = join_path(dir, "adapter_model.safetensors");
    st_model *st = NULL;
    lora_found f = {0};
    int rc = -1, rank = 0;
    size_t n = (size_t)m->cfg.n_layers * LORA_N_MODULES;
    if (!cfg_path || !st_path) {
        err_fail(err, "out of memory");
        goto out;
    }
    struct stat sb;
    if (stat(cfg_path, &sb) != 0) {
        err_fail(err, "%s: no adapter_config.json: not a PEFT adapter folder", dir);
        goto out;
    }
    if (stat(st_path, &sb) != 0) {
        char *bin = join_path(dir, "adapter_model.bin");
        bool has_bin = bin && stat(bin, &sb) == 0;
        free(bin);
        err_fail(err, "%s: no adapter_model.safetensors%s", dir,
                 has_bin ? " (adapter_model.bin, PyTorch's pickle format, is not read: save with safetensors)" : "");
        goto out;
    }
    if (peft_config(l, cfg_path, &rank, err)) goto out;
    if (st_open_file(&st, st_path, err)) goto out;
    f.a = calloc(n, sizeof *f.a);
    f.b = calloc(n, sizeof *f.b);
    if (!f.a || !f.b) {
        err_fail(err, "out of memory");
        goto out;
    }
    const pdl_tensor_set *set = st_tensors(st);
    for (size_t i = 0; i < set->count; i++) {
        const pdl_tensor *t = &set->items[i];
        int layer = 0;
        lora_module mod = LORA_Q;
        bool is_a = false;
        if (peft_name(t->name, st_path, m->cfg.n_layers, &layer, &mod, &is_a, err)) goto out;
        const pdl_tensor **slot = is_a ? &f.a[(size_t)layer * LORA_N_MODULES + mod]
                                       : &f.b[(size_t)layer * LORA_N_MODULES + mod];
        *slot = t;
        if (t->n_dims == 2 && (is_a ? t->shape[0] : t->shape[1]) != rank) {
            err_fail(err, "%s: tensor %s has rank %lld, adapter_config.json says r = %d", st_path, t->name,
                     (long long)(is_a ? t->shape[0] : t->shape[1]), rank);
            goto out;
        }
    }
    rc = lora_build(l, m, &f, false, st_path, err);
out:
    free(f.a), free(f.b);
    if (st) st_close(st);
    free(cfg_path), free(st_path);
    return rc;
}

/* ---- llama.cpp GGUF ------------------------------------------------------------- */

static int load_gguf(pdl_lora *l, const pdl_model *m, const char *path, pdl_error *err) {
    gguf_file *g = NULL;
    if (gguf_open(&g, path, err)) return -1;
    lora_found f = {0};
    int rc = -1;
    size_t n = (size_t)m->cfg.n_layers * LORA_N_MODULES;
    const char *s = NULL;
    if (gguf_get_str(g, "general.type", &s, err) < 0) goto out;
    if (!s || strcmp(s, "adapter") != 0) {
        err_fail(err, "%s: general.type is %s, not \"adapter\": not a LoRA adapter file", path, s ? s : "absent");
        goto out;
    }
    s = NULL;
    if (gguf_get_str(g, "adapter.type", &s, err) < 0) goto out;
    if (!s || strcmp(s, "lora") != 0) {
        err_fail(err, "%s: adapter.type is %s: only \"lora\" adapters are supported", path, s ? s : "absent");
        goto out;
    }
    s = NULL;
    if (gguf_get_str(g, "general.architecture", &s, err) < 0) goto out;
    if (s && m->gguf) {
        const char *arch = NULL;
        pdl_error e2;
        if (gguf_get_str(m->gguf, "general.architecture", &arch, &e2) > 0 && strcmp(arch, s) != 0) {
            err_fail(err, "%s: an adapter for architecture %s, the model is %s", path, s, arch);
            goto out;
        }
    }
    float alpha = 0;
    if (gguf_get_f32(g, "adapter.lora.alpha", &alpha, err) < 0) goto out;
    f.a = calloc(n, sizeof *f.a);
    f.b = calloc(n, sizeof *f.b);
    if (!f.a || !f.b) {
        err_fail(err, "out of memory");
        goto out;
    }
    const pdl_tensor_set *set = gguf_tensors(g);
    for (size_t i = 0; i < set->count; i++) {
        const pdl_tensor *t = &set->items[i];
        const char *name = t->name;
        char *end;
        long layer = strncmp(name, "blk.", 4) == 0 ? strtol(name + 4, &end, 10) : -1;
        if (layer < 0 || end == name + 4 || *end != '.') {
            err_fail(err, "%s: tensor %s: not a LoRA weight of a decoder layer (blk.N.*.weight.lora_a / _b)", path,
                     name);
            goto out;
        }
        if (layer >= m->cfg.n_layers) {
            err_fail(err, "%s: tensor %s: layer %ld, the model has %d layers", path, name, layer, m->cfg.n_layers);
            goto out;
        }
        int mod = -1;
        bool is_a = false;
        for (int k = 0; k < LORA_N_MODULES; k++) {
            char want[64];
            snprintf(want, sizeof want, ".%s.weight.lora_", GGUF_MODULES[k]);
            size_t wl = strlen(want);
            if (strncmp(end, want, wl) == 0 && (strcmp(end + wl, "a") == 0 || strcmp(end + wl, "b") == 0)) {
                mod = k;
                is_a = end[wl] == 'a';
            }
        }
        if (mod < 0) {
            err_fail(err, "%s: tensor %s: module not supported (adapters of attn_q, attn_k, attn_v, attn_output, "
                     "ffn_gate, ffn_up and ffn_down are)", path, name);
            goto out;
        }
        (is_a ? f.a : f.b)[(size_t)layer * LORA_N_MODULES + mod] = t;
    }
    /* llama.cpp: scale = alpha / rank, or 1 without alpha */
    int rank = 0;
    for (size_t k = 0; k < n && !rank; k++)
        if (f.a[k] && f.a[k]->n_dims == 2) rank = (int)f.a[k]->shape[0];
    l->alpha = alpha;
    l->scale = alpha != 0 && rank > 0 ? alpha / (float)rank : 1.0f;
    rc = lora_build(l, m, &f, true, path, err);
out:
    free(f.a), free(f.b);
    gguf_close(g);
    return rc;
}

/* ---- the public API -------------------------------------------------------------- */

int pdl_lora_load(pdl_lora **out, const pdl_model *model, const char *path, pdl_error *err) {
    *out = NULL;
    if (!model || !path) return err_fail(err, "lora: no model or path");
    if (model->cfg.encoder)
        return err_fail(err, "lora: %s: adapters of an encoder (%s) are not supported", path, model->cfg.arch->name);
    pdl_lora *l = calloc(1, sizeof *l);
    if (!l) return err_fail(err, "lora: out of memory");
    atomic_init(&l->refs, 1);
    l->model = model;
    struct stat sb;
    int rc;
    if (stat(path, &sb) != 0) {
        rc = err_fail(err, "lora: %s: no such file or folder", path);
    } else if (S_ISDIR(sb.st_mode)) {
        rc = load_peft(l, model, path, err);
    } else {
        size_t len = strlen(path);
        if (len >= 5 && strcmp(path + len - 5, ".json") == 0) { /* adapter_config.json: its folder */
            char *dir = strdup(path);
            char *slash = dir ? strrchr(dir, '/') : NULL;
            if (slash) *slash = '\0';
            rc = dir ? load_peft(l, model, slash ? dir : ".", err) : err_fail(err, "out of memory");
            free(dir);
        } else {
            rc = load_gguf(l, model, path, err);
        }
    }
    if (rc) {
        err_fail_prefix(err, "lora");
        pdl_lora_free(l);
        return -1;
    }
    *out = l;
    return 0;
}

pdl_lora *pdl_lora_ref(pdl_lora *lora) {
    if (lora) atomic_fetch_add(&lora->refs, 1);
    return lora;
}

void pdl_lora_free(pdl_lora *lora) {
    if (!lora || atomic_fetch_sub(&lora->refs, 1) != 1) return;
    free(lora->pairs);
    free(lora->data);
    free(lora);
}

void pdl_lora_get_info(const pdl_lora *lora, pdl_lora_info *info) {
    memset(info, 0, sizeof *info);
    info->rank = lora->rank;
    info->alpha = lora->alpha;
    info->scale = lora->scale;
    info->n_pairs = lora->n_pairs;
    info->key[0] = lora->key[0];
    info->key[1] = lora->key[1];
    size_t at = 0;
    for (int m = 0; m < LORA_N_MODULES; m++)
        if (lora->module_mask & (1u << m))
            at += (size_t)snprintf(info->modules + at, sizeof info->modules - at, "%s%s", at ? "," : "",
                                   MODULE_NAMES[m]);
}
