/*
 * router_config.h - which models a multi-model `pagedlm serve` (the router,
 * router.h) offers, and the pure decisions it takes about them: the models
 * found in a --models-dir, NAME=PATH from --model, per-model `serve`
 * arguments from a --models-config JSON file, and which loaded model the
 * LRU rule stops. No processes, sockets or threads here (unit-tested in
 * tests/test_router_config.c).
 */
#ifndef PDL_SERVER_ROUTER_CONFIG_H
#define PDL_SERVER_ROUTER_CONFIG_H

#include <stdbool.h>

#include "pagedlm.h"

#define RT_MAX_NAME 128 /* bytes of a model name */

typedef struct rt_model_spec {
    char *name;   /* what clients put in "model" */
    char *path;   /* a .gguf file or a model folder (one with config.json) */
    char **args;  /* extra `pagedlm serve` arguments for this model only (--models-config) */
    int n_args;
} rt_model_spec;

typedef struct rt_spec_list {
    rt_model_spec *v;
    int n, cap;
} rt_spec_list;

/* 0, or -1 when name cannot be a model name: 1 to RT_MAX_NAME bytes of
 * letters, digits and . _ - : / @ + (no leading '.' or '-'). */
int rt_check_name(const char *name, pdl_error *err);

/* Adds every "NAME.gguf" file and every folder with a config.json directly in
 * dir, named by the file name without .gguf or by the folder name, in name
 * order; hidden entries are skipped. A name already in the list is an
 * error. */
int rt_scan_models_dir(const char *dir, rt_spec_list *l, pdl_error *err);

/* Adds "NAME=PATH" (--model NAME=PATH). */
int rt_add_model(rt_spec_list *l, const char *name_eq_path, pdl_error *err);

/* Whether a --model value is meant as NAME=PATH: it has an '=' after a valid
 * name and the whole value is not itself an existing file. */
bool rt_is_name_eq_path(const char *value);

/* Reads the --models-config file: a JSON object whose keys are model names
 * and whose values are either an array of `serve` arguments
 * (["--ctx-size", "256", "--threads", 2]; numbers are written as given) or
 * an object {"path": P, "args": [...]} (path adds the model when it is not
 * listed yet). A name that is not listed and has no path is an error, as is
 * a second entry for one name. The arguments replace nothing: they are
 * appended after the common ones, so the last of an option wins. */
int rt_load_config(const char *path, rt_spec_list *l, pdl_error *err);

/* The same, from JSON text (source names it in errors). */
int rt_load_config_text(const char *text, const char *source, rt_spec_list *l, pdl_error *err);

int rt_find(const rt_spec_list *l, const char *name);
void rt_spec_list_free(rt_spec_list *l);

/* One model as the LRU rule sees it. */
typedef struct rt_lru_entry {
    bool running;     /* a child process is up (loaded or loading) */
    bool loaded;      /* ... and answers */
    int in_flight;    /* requests being proxied to it */
    double last_used; /* when its last request started or ended (any clock) */
} rt_lru_entry;

/* The loaded model with no request in flight that was used longest ago
 * (ties: the lower index), other than index except; -1 when none is. */
int rt_pick_lru(const rt_lru_entry *e, int n, int except);

/* Models with a child running. */
int rt_count_running(const rt_lru_entry *e, int n);

#endif
