/*
 * lora_registry.c - the server's named LoRA adapters and a request's
 * choice among them (lora_registry.h).
 */
#define _POSIX_C_SOURCE 200809L
#include "server/lora_registry.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct lora_entry {
    char name[SRV_LORA_NAME_MAX];
    char *path;
    int id;             /* llama-server's id: the load order, from 0 */
    pdl_lora *lora;     /* the table's reference */
} lora_entry;

struct srv_loras {
    const pdl_model *model;
    int max_loras, max_rank;
    pthread_mutex_t mu;
    lora_entry *items; /* [max_loras], n of them in load order */
    int n, next_id;
};

srv_loras *srv_loras_new(const pdl_model *model, int max_loras, int max_rank) {
    srv_loras *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->model = model;
    r->max_loras = max_loras > 0 ? max_loras : 64;
    r->max_rank = max_rank > 0 ? max_rank : 64;
    r->items = calloc((size_t)r->max_loras, sizeof *r->items);
    if (!r->items) {
        free(r);
        return NULL;
    }
    pthread_mutex_init(&r->mu, NULL);
    return r;
}

void srv_loras_free(srv_loras *r) {
    if (!r) return;
    for (int i = 0; i < r->n; i++) {
        pdl_lora_free(r->items[i].lora);
        free(r->items[i].path);
    }
    free(r->items);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

static lora_entry *find_locked(srv_loras *r, const char *name) {
    for (int i = 0; i < r->n; i++)
        if (strcmp(r->items[i].name, name) == 0) return &r->items[i];
    return NULL;
}

static int check_name(const char *name, srv_api_error *err) {
    size_t n = strlen(name);
    if (n == 0 || n >= SRV_LORA_NAME_MAX)
        return srv_api_fail(err, 400, "lora_name", "an adapter's name must be 1 to %d bytes", SRV_LORA_NAME_MAX - 1);
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)name[i] < 0x20 || name[i] == 0x7f)
            return srv_api_fail(err, 400, "lora_name", "an adapter's name must not hold control characters");
    return 0;
}

int srv_loras_load(srv_loras *r, const char *base_name, const char *name, const char *path, srv_api_error *err) {
    if (check_name(name, err)) return -1;
    if (base_name && strcmp(name, base_name) == 0)
        return srv_api_fail(err, 400, "lora_name", "'%.200s' is the base model's name", name);
    pthread_mutex_lock(&r->mu);
    bool taken = find_locked(r, name) != NULL, full = r->n == r->max_loras;
    pthread_mutex_unlock(&r->mu);
    if (taken) return srv_api_fail(err, 400, "lora_name", "The lora adapter '%.200s' has already been loaded.", name);
    if (full)
        return srv_api_fail(err, 400, "lora_name", "%d adapters are loaded, the most --max-loras allows: unload one "
                            "first", r->max_loras);
    pdl_lora *lora = NULL;
    pdl_error e;
    if (pdl_lora_load(&lora, r->model, path, &e)) return srv_api_fail(err, 400, "lora_path", "%s", e.message);
    pdl_lora_info info;
    pdl_lora_get_info(lora, &info);
    if (info.rank > r->max_rank) {
        pdl_lora_free(lora);
        return srv_api_fail(err, 400, "lora_path", "the adapter's rank %d is above --max-lora-rank %d", info.rank,
                            r->max_rank);
    }
    char *p = strdup(path);
    pthread_mutex_lock(&r->mu);
    /* checked again: another load may have come in between */
    int rc = 0;
    if (!p) rc = srv_api_fail(err, 500, NULL, "out of memory");
    else if (find_locked(r, name))
        rc = srv_api_fail(err, 400, "lora_name", "The lora adapter '%.200s' has already been loaded.", name);
    else if (r->n == r->max_loras)
        rc = srv_api_fail(err, 400, "lora_name", "%d adapters are loaded, the most --max-loras allows", r->max_loras);
    if (rc == 0) {
        lora_entry *en = &r->items[r->n++];
        memset(en, 0, sizeof *en);
        memcpy(en->name, name, strlen(name) + 1);
        en->path = p;
        en->id = r->next_id++;
        en->lora = lora;
    }
    pthread_mutex_unlock(&r->mu);
    if (rc) {
        free(p);
        pdl_lora_free(lora);
    }
    return rc;
}

int srv_loras_unload(srv_loras *r, const char *name, srv_api_error *err) {
    pthread_mutex_lock(&r->mu);
    lora_entry *en = find_locked(r, name);
    lora_entry gone = {0};
    if (en) {
        gone = *en;
        memmove(en, en + 1, (size_t)(r->items + r->n - (en + 1)) * sizeof *en);
        r->n--;
    }
    pthread_mutex_unlock(&r->mu);
    if (!en) {
        srv_api_fail(err, 404, "lora_name", "The lora adapter '%.200s' cannot be found.", name);
        err->type = "NotFoundError";
        return -1;
    }
    pdl_lora_free(gone.lora); /* requests running with it hold references of their own */
    free(gone.path);
    return 0;
}

bool srv_loras_has(srv_loras *r, const char *name) {
    pthread_mutex_lock(&r->mu);
    bool has = find_locked(r, name) != NULL;
    pthread_mutex_unlock(&r->mu);
    return has;
}

/* llama-server's "lora": [{"id": N, "scale": S}, ...]: the one entry of
 * non-zero scale, or none (*id -1). */
static int parse_lora_field(const json_t *v, int *id, float *scale, srv_api_error *err) {
    *id = -1;
    if (!json_is_array(v)) return srv_api_fail(err, 400, "lora", "'lora' must be an array of {\"id\", \"scale\"}");
    size_t i;
    const json_t *it;
    json_array_foreach(v, i, it) {
        const json_t *jid = json_object_get(it, "id"), *js = json_object_get(it, "scale");
        if (!json_is_object(it) || !json_is_integer(jid) || (js && !json_is_number(js)))
            return srv_api_fail(err, 400, "lora", "'lora' entries must be {\"id\": integer, \"scale\": number}");
        double s = js ? json_number_value(js) : 1.0;
        if (!isfinite(s) || fabs(s) > 1e6) return srv_api_fail(err, 400, "lora", "'lora' scale %g out of range", s);
        if (s == 0) continue;
        if (*id >= 0)
            return srv_api_fail(err, 400, "lora", "one adapter per request is supported; 'lora' gives several of "
                                "non-zero scale");
        if (json_integer_value(jid) < 0 || json_integer_value(jid) > 1 << 30)
            return srv_api_fail(err, 400, "lora", "'lora' id %lld out of range", (long long)json_integer_value(jid));
        *id = (int)json_integer_value(jid);
        *scale = (float)s;
    }
    return 0;
}

int srv_loras_select(srv_loras *r, const json_t *body, const char *base_name, pdl_request_params *p,
                     char *model_name, size_t cap, srv_api_error *err) {
    const json_t *m = json_object_get(body, "model"), *lf = json_object_get(body, "lora");
    const char *name = json_is_string(m) ? json_string_value(m) : NULL;
    bool by_name = name && (!base_name || strcmp(name, base_name) != 0);
    int id = -1;
    float scale = 1.0f;
    if (lf && !json_is_null(lf) && parse_lora_field(lf, &id, &scale, err)) return -1;
    if (by_name && id >= 0)
        return srv_api_fail(err, 400, "lora", "'model' names an adapter and 'lora' picks one: give one of them");
    if (!by_name && id < 0) return 0;
    pthread_mutex_lock(&r->mu);
    lora_entry *en = NULL;
    for (int i = 0; i < r->n && !en; i++)
        if (by_name ? strcmp(r->items[i].name, name) == 0 : r->items[i].id == id) en = &r->items[i];
    if (en) {
        p->lora = pdl_lora_ref(en->lora);
        p->lora_scale = scale;
        snprintf(model_name, cap, "%s", en->name);
    }
    pthread_mutex_unlock(&r->mu);
    if (en) return 0;
    if (by_name) {
        srv_api_fail(err, 404, "model", "The model `%.200s` does not exist.", name);
        err->code = "model_not_found";
        return -1;
    }
    return srv_api_fail(err, 404, "lora", "no LoRA adapter has id %d", id);
}

static json_t *card(const char *name, const char *root, const char *parent, int ctx_len, long long created) {
    json_t *c = json_object();
    json_object_set_new(c, "id", json_string(name));
    json_object_set_new(c, "object", json_string("model"));
    json_object_set_new(c, "created", json_integer(created));
    json_object_set_new(c, "owned_by", json_string("pagedlm"));
    json_object_set_new(c, "root", json_string(root));
    json_object_set_new(c, "parent", parent ? json_string(parent) : json_null());
    json_object_set_new(c, "max_model_len", json_integer(ctx_len));
    return c;
}

char *srv_loras_models_body(srv_loras *r, const char *base_name, const char *base_root, int ctx_len,
                            long long created, const char *one, size_t *len) {
    json_t *out = NULL;
    if (one && strcmp(one, base_name) == 0) out = card(base_name, base_root, NULL, ctx_len, created);
    pthread_mutex_lock(&r->mu);
    if (one) {
        lora_entry *en = out ? NULL : find_locked(r, one);
        if (en) out = card(en->name, en->path, base_name, ctx_len, created);
    } else {
        json_t *data = json_array();
        json_array_append_new(data, card(base_name, base_root, NULL, ctx_len, created));
        for (int i = 0; i < r->n; i++) {
            json_t *c = card(r->items[i].name, r->items[i].path, base_name, ctx_len, created);
            json_object_set_new(c, "lora_id", json_integer(r->items[i].id)); /* llama-server's "lora" ids */
            json_array_append_new(data, c);
        }
        out = json_pack("{s:s, s:o}", "object", "list", "data", data);
    }
    pthread_mutex_unlock(&r->mu);
    if (!out) return NULL;
    char *s = json_dumps(out, JSON_COMPACT);
    json_decref(out);
    if (s) *len = strlen(s);
    return s;
}
