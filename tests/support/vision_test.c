/*
 * vision_test.c - the shared vision model test helpers (vision_test.h).
 */
#include "vision_test.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

/* ---- random weights ---------------------------------------------------------------- */

static uint64_t rng;

void vt_seed(uint64_t seed) { rng = seed; }

float vt_frand(void) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng >> 40) / (double)(1ull << 24)) - 0.5f;
}

enum { MAX_TENSORS = 256 };
static vt_tensor tensors[MAX_TENSORS];
static int n_tensors;

int vt_add(const char *name, int n_dims, int64_t d0, int64_t d1, int64_t d2, int64_t d3, vt_init init, double scale) {
    REQUIRE_MSG(n_tensors < MAX_TENSORS, "more than %d weights", MAX_TENSORS);
    vt_tensor *t = &tensors[n_tensors];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->n_dims = n_dims;
    int64_t d[4] = {d0, d1, d2, d3}, n = 1;
    for (int i = 0; i < n_dims; i++) t->shape[i] = d[i], n *= d[i];
    t->data = malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++)
        t->data[i] = init == VT_NEAR_ONE ? 1.0f + 0.2f * vt_frand()
                     : init == VT_SMALL  ? 0.2f * vt_frand()
                                         : (float)(scale * vt_frand());
    return n_tensors++;
}

int vt_count(void) { return n_tensors; }

vt_tensor *vt_at(int i) { return &tensors[i]; }

vt_tensor *vt_find(const char *name) {
    for (int i = 0; i < n_tensors; i++)
        if (strcmp(tensors[i].name, name) == 0) return &tensors[i];
    return NULL;
}

float *vt_w(const char *name) {
    vt_tensor *t = vt_find(name);
    if (t) return t->data;
    fprintf(stderr, "no weight %s\n", name);
    abort();
}

void vt_free_weights(void) {
    for (int i = 0; i < n_tensors; i++) free(tensors[i].data);
    n_tensors = 0;
}

void vt_put_all_st(stw_writer *w) {
    for (int i = 0; i < n_tensors; i++)
        stw_add_f32(w, tensors[i].name, tensors[i].n_dims, tensors[i].shape, tensors[i].data);
}

void vt_put_gguf(gguf_writer *g, const char *gg, const char *hf) {
    const vt_tensor *t = vt_find(hf);
    REQUIRE_MSG(t, "no weight %s", hf);
    gguf_writer_add_tensor_f32(g, gg, t->n_dims, t->shape, t->data);
}

/* ---- float64 reference blocks ----------------------------------------------------- */

void vt_layernorm(double *x, int n, const float *w, const float *b, double eps) {
    double mean = 0, var = 0;
    for (int i = 0; i < n; i++) mean += x[i];
    mean /= n;
    for (int i = 0; i < n; i++) var += (x[i] - mean) * (x[i] - mean);
    var /= n;
    double inv = 1.0 / sqrt(var + eps);
    for (int i = 0; i < n; i++) x[i] = (x[i] - mean) * inv * w[i] + b[i];
}

static void rmsnorm(double *o, const double *x, const float *w, int n, double eps, bool plus_one) {
    double ss = 0;
    for (int i = 0; i < n; i++) ss += x[i] * x[i];
    double inv = 1.0 / sqrt(ss / n + eps);
    for (int i = 0; i < n; i++) o[i] = x[i] * inv * (plus_one ? 1.0 + w[i] : (double)w[i]);
}

void vt_rmsnorm(double *o, const double *x, const float *w, int n, double eps) { rmsnorm(o, x, w, n, eps, false); }

void vt_rmsnorm_plus_one(double *o, const double *x, const float *w, int n, double eps) {
    rmsnorm(o, x, w, n, eps, true);
}

void vt_linear(double *y, const float *w, const float *b, const double *x, int rows, int cols) {
    for (int r = 0; r < rows; r++) {
        double s = b ? b[r] : 0;
        for (int c = 0; c < cols; c++) s += (double)w[(size_t)r * cols + c] * x[c];
        y[r] = s;
    }
}

void vt_vit_layer(double *x, int n, int hidden, int heads, int ffn, const char *prefix, double eps,
                  double (*act)(double)) {
    char nm[256];
#define LW(name) (snprintf(nm, sizeof nm, "%s.%s", prefix, name), vt_w(nm))
    int hd = hidden / heads;
    size_t rows = (size_t)n * hidden;
    double *h = malloc(rows * sizeof *h), *q = malloc(rows * sizeof *q), *k = malloc(rows * sizeof *k);
    double *v = malloc(rows * sizeof *v), *a = malloc(rows * sizeof *a), *s = malloc((size_t)n * sizeof *s);
    double *f = malloc((size_t)ffn * sizeof *f), *t = malloc((size_t)hidden * sizeof *t);
    for (int r = 0; r < n; r++) {
        double *hr = h + (size_t)r * hidden;
        memcpy(hr, x + (size_t)r * hidden, (size_t)hidden * sizeof *hr);
        vt_layernorm(hr, hidden, LW("layer_norm1.weight"), LW("layer_norm1.bias"), eps);
        size_t o = (size_t)r * hidden;
        vt_linear(q + o, LW("self_attn.q_proj.weight"), LW("self_attn.q_proj.bias"), hr, hidden, hidden);
        vt_linear(k + o, LW("self_attn.k_proj.weight"), LW("self_attn.k_proj.bias"), hr, hidden, hidden);
        vt_linear(v + o, LW("self_attn.v_proj.weight"), LW("self_attn.v_proj.bias"), hr, hidden, hidden);
    }
    /* every row attends to every row (no mask), per head */
    for (int r = 0; r < n; r++)
        for (int hh = 0; hh < heads; hh++) {
            double mx = -1e300, z = 0;
            const double *qh = q + (size_t)r * hidden + hh * hd;
            for (int j = 0; j < n; j++) {
                const double *kh = k + (size_t)j * hidden + hh * hd;
                double d = 0;
                for (int i = 0; i < hd; i++) d += qh[i] * kh[i];
                s[j] = d / sqrt((double)hd);
                if (s[j] > mx) mx = s[j];
            }
            for (int j = 0; j < n; j++) z += s[j] = exp(s[j] - mx);
            for (int i = 0; i < hd; i++) {
                double o = 0;
                for (int j = 0; j < n; j++) o += s[j] / z * v[(size_t)j * hidden + hh * hd + i];
                a[(size_t)r * hidden + hh * hd + i] = o;
            }
        }
    for (int r = 0; r < n; r++) {
        double *xr = x + (size_t)r * hidden, *hr = h + (size_t)r * hidden;
        vt_linear(t, LW("self_attn.out_proj.weight"), LW("self_attn.out_proj.bias"), a + (size_t)r * hidden, hidden,
                  hidden);
        for (int i = 0; i < hidden; i++) xr[i] += t[i];
        memcpy(hr, xr, (size_t)hidden * sizeof *hr);
        vt_layernorm(hr, hidden, LW("layer_norm2.weight"), LW("layer_norm2.bias"), eps);
        vt_linear(f, LW("mlp.fc1.weight"), LW("mlp.fc1.bias"), hr, ffn, hidden);
        for (int i = 0; i < ffn; i++) f[i] = act(f[i]);
        vt_linear(t, LW("mlp.fc2.weight"), LW("mlp.fc2.bias"), f, hidden, ffn);
        for (int i = 0; i < hidden; i++) xr[i] += t[i];
    }
#undef LW
    free(h), free(q), free(k), free(v), free(a), free(s), free(f), free(t);
}

double vt_gelu_erf(double x) { return 0.5 * x * (1.0 + erf(x / sqrt(2.0))); }

double vt_silu(double x) { return x / (1.0 + exp(-x)); }

double vt_max_diff(const float *a, const double *b, size_t n) {
    double d = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - b[i]);
        if (isnan(e)) return INFINITY;
        if (e > d) d = e;
    }
    return d;
}

double vt_max_diff_d(const double *a, const double *b, size_t n) {
    double d = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs(a[i] - b[i]);
        if (isnan(e)) return INFINITY;
        if (e > d) d = e;
    }
    return d;
}

/* ---- reference pixels and the engine's inputs -------------------------------------- */

char *vt_reference_dir(void) {
    char *dir = test_make_dir("ref");
    char *script = test_source_path("scripts/vision-reference-pixels");
    char cmd[4096];
    /* Debian's interpreter: the one apt's python3-numpy and python3-pil are for */
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 '%s' '%s'", script, dir);
    int rc = system(cmd);
    free(script);
    REQUIRE_MSG(rc == 0, "scripts/vision-reference-pixels failed (%d): python3-numpy and python3-pil are needed "
                "(scripts/install-deps --test)", rc);
    return dir;
}

void vt_read_f32(const char *dir, const char *name, float *out, size_t bytes) {
    char *p = test_join(dir, name);
    size_t n = 0;
    char *d = test_slurp(p, &n);
    REQUIRE_MSG(n == bytes, "%s: %zu bytes, expected %zu", p, n, bytes);
    memcpy(out, d, n);
    free(d), free(p);
}

void vt_write_tokenizer(const char *dir, int first_id, const char *const *added, int n) {
    char *src = test_data_path("models/stories260K-hf/tokenizer.json");
    json_error_t je;
    json_t *tok = json_load_file(src, 0, &je);
    REQUIRE_MSG(tok, "%s: %s", src, je.text);
    for (int i = 0; i < n; i++)
        json_array_append_new(json_object_get(tok, "added_tokens"),
                              json_pack("{s:i, s:s, s:b, s:b, s:b, s:b, s:b}", "id", first_id + i, "content", added[i],
                                        "single_word", 0, "lstrip", 0, "rstrip", 0, "normalized", 0, "special", 1));
    char *p = test_join(dir, "tokenizer.json");
    REQUIRE(json_dump_file(tok, p, 0) == 0);
    free(p), free(src);
    json_decref(tok);
    src = test_data_path("models/stories260K-hf/tokenizer_config.json");
    size_t len = 0;
    char *d = test_slurp(src, &len);
    p = test_join(dir, "tokenizer_config.json");
    test_write_file(p, d, len);
    free(p), free(d), free(src);
}

pdl_image *vt_load_image(const char *dir, const char *name) {
    pdl_image *img = NULL;
    pdl_error err = {0};
    char *path = test_join(dir, name);
    int rc = pdl_image_load(&img, path, &err);
    free(path);
    REQUIRE_MSG(rc == 0, "%s", err.message);
    return img;
}

void vt_load(pdl_model **m, pdl_vision **v, const char *text_path, const char *vision_path,
             const pdl_model_options *mo) {
    pdl_error err = {0};
    pdl_model_options two = {.n_threads = 2};
    REQUIRE_MSG(pdl_model_load(m, text_path, mo ? mo : &two, &err) == 0, "%s", err.message);
    int rc = pdl_vision_load(v, vision_path, *m, &err);
    if (rc) pdl_model_free(*m);
    REQUIRE_MSG(rc == 0, "%s", err.message);
}

/* ---- requests through the engine ---------------------------------------------------- */

void vt_text_ids(int32_t *ids, int n, int salt, int modulus) {
    for (int k = 0; k < n; k++) ids[k] = (k * 7 + salt * 3 + 1) % modulus;
}

static void on_event(const pdl_event *ev, void *user) {
    vt_collected *c = user;
    int r = (int)ev->request_id - 1;
    if (r < 0 || r >= VT_MAX_REQ) return;
    if (ev->kind == PDL_EVENT_TOKEN && c->n[r] < c->gen) c->tokens[r][c->n[r]++] = ev->token;
    if (ev->kind == PDL_EVENT_FINISHED) c->cached[r] = ev->cached_tokens;
}

static void on_logits(uint64_t id, int index, int position, const float *row, int vocab, void *user) {
    vt_collected *c = user;
    int r = (int)id - 1;
    (void)index, (void)position;
    if (r < 0 || r >= VT_MAX_REQ || c->n_logits[r] >= c->gen || vocab != c->vocab) return;
    memcpy(c->logits[r][c->n_logits[r]++], row, (size_t)vocab * sizeof *row);
}

void vt_run_engine(pdl_model *m, const pdl_engine_options *eo, const vt_request *reqs, int n, const vt_run *run,
                   vt_collected *out) {
    REQUIRE(n <= VT_MAX_REQ && run->gen <= VT_MAX_GEN && run->vocab <= VT_MAX_VOCAB);
    memset(out, 0, sizeof *out);
    out->gen = run->gen, out->vocab = run->vocab;
    pdl_error err = {0};
    pdl_engine_options o = *eo;
    o.on_logits = on_logits, o.on_logits_user = out;
    pdl_engine *e = NULL;
    REQUIRE_MSG(pdl_engine_create(&e, m, &o, &err) == 0, "%s", err.message);
    for (int i = 0; i < n; i++) {
        pdl_image *img = reqs[i].image ? vt_load_image(run->image_dir, reqs[i].image) : NULL;
        pdl_mm_input in = {.image = img, .position = reqs[i].position};
        pdl_request_params rp = {.max_tokens = run->gen, .ignore_eos = true, .logprobs = -1, .prompt_logprobs = -1,
                                 .images = img ? &in : NULL, .n_images = img ? 1 : 0};
        uint64_t id = 0;
        int rc = pdl_engine_add_request(e, reqs[i].ids, (size_t)reqs[i].n_ids, &rp, on_event, out, &id, &err);
        pdl_image_free(img); /* the engine keeps the rows, not the image */
        if (rc != 0) {
            out->failed[i] = true;
            if (run->may_refuse) CHECK_CONTAINS(err.message, run->may_refuse);
            else CHECK_MSG(rc == 0, "%s", err.message);
            continue;
        }
        CHECK_EQ_INT(id, i + 1);
        if (run->sequential) CHECK_MSG(pdl_engine_run_until_idle(e, &err) == 0, "%s", err.message);
    }
    CHECK_MSG(pdl_engine_run_until_idle(e, &err) == 0, "%s", err.message);
    pdl_engine_get_stats(e, &out->stats);
    pdl_engine_free(e);
}

void vt_check_same_output(const vt_collected *alone, const vt_collected *batch, int r, int n_batch, int rows) {
    CHECK_EQ_INT(alone->n[0], alone->gen);
    CHECK_EQ_INT(batch->n[r], batch->gen);
    CHECK(memcmp(alone->tokens[0], batch->tokens[r], sizeof alone->tokens[0]) == 0);
    CHECK_MSG(alone->n_logits[0] >= rows && batch->n_logits[r] >= rows, "%d and %d sampled rows", alone->n_logits[0],
              batch->n_logits[r]);
    for (int k = 0; k < rows; k++)
        CHECK_MSG(memcmp(alone->logits[0][k], batch->logits[r][k], (size_t)alone->vocab * sizeof(float)) == 0,
                  "sampled row %d differs", k);
    for (int i = 0; i < n_batch; i++) CHECK_EQ_INT(batch->n[i], batch->gen);
}
