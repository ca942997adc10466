/*
 * lora_registry.h - the LoRA adapters a server serves by name (vLLM's
 * --enable-lora --lora-modules name=path, POST /v1/load_lora_adapter and
 * /v1/unload_lora_adapter), and which one a request runs with: "model"
 * naming an adapter (vLLM), or llama-server's "lora": [{"id", "scale"}].
 *
 * What it is for: a name -> adapter table under a lock, shared by the
 * HTTP threads; each request takes its own reference to the adapter it
 * selects, so unloading one drops it from the table at once (new requests
 * get 404) while requests already running finish with it (the memory goes
 * with the last of them: the unload is deferred, never refused).
 * What it is not for: loading and applying adapters (src/model/lora.c).
 */
#ifndef PDL_SERVER_LORA_REGISTRY_H
#define PDL_SERVER_LORA_REGISTRY_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "pagedlm.h"
#include "server/api_parse.h"

#define SRV_LORA_NAME_MAX 128

typedef struct srv_loras srv_loras;

/* A table for model: at most max_loras adapters at once (0 = 64), of rank
 * at most max_rank (0 = 64, as vLLM's --max-lora-rank default is 16 but
 * accepts up to 512). NULL when out of memory. */
srv_loras *srv_loras_new(const pdl_model *model, int max_loras, int max_rank);
void srv_loras_free(srv_loras *r);

/* Loads path as adapter `name`: 400 for a bad name, a name taken (the base
 * model's too), a full table, a rank above the limit, or an adapter that
 * does not load (the loader's message). */
int srv_loras_load(srv_loras *r, const char *base_name, const char *name, const char *path, srv_api_error *err);
/* Drops adapter `name` from the table: 404 when there is none. */
int srv_loras_unload(srv_loras *r, const char *name, srv_api_error *err);
/* Whether `name` is an adapter of the table now. */
bool srv_loras_has(srv_loras *r, const char *name);

/* The adapter a request body selects, into p->lora (a reference of the
 * request's own: srv_gen_request_free drops it) and p->lora_scale, and its
 * name into model_name (cap bytes) for the answer's "model": "model"
 * naming an adapter, or "lora": [{"id": N, "scale": S}] (ids in the order
 * adapters were loaded, from 0; entries of scale 0 ignored; one adapter of
 * non-zero scale at most). 400 for a malformed or unsupported "lora", 404
 * for an id that is not loaded. Nothing selected: p untouched. */
int srv_loras_select(srv_loras *r, const json_t *body, const char *base_name, pdl_request_params *p,
                     char *model_name, size_t cap, srv_api_error *err);

/* GET /v1/models: the base model's card then one per adapter ("parent":
 * the base model, "root": the adapter's path); GET /v1/models/NAME: one
 * card (NULL when name is neither). Malloc'ed JSON, *len bytes. */
char *srv_loras_models_body(srv_loras *r, const char *base_name, const char *base_root, int ctx_len,
                            long long created, const char *one, size_t *len);

#endif
