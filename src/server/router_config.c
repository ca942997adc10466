/*
 * router_config.c - the router's model list (--models-dir scan, --model
 * NAME=PATH, --models-config) and its LRU choice; see router_config.h.
 */
#define _POSIX_C_SOURCE 200809L
#include "server/router_config.h"

#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "util/error.h"
#include "util/json_file.h"

int rt_check_name(const char *name, pdl_error *err) {
    size_t n = name ? strlen(name) : 0;
    if (n == 0 || n > RT_MAX_NAME) return err_fail(err, "a model name must have 1 to %d bytes", RT_MAX_NAME);
    if (name[0] == '.' || name[0] == '-') return err_fail(err, "model name '%s' must not start with '.' or '-'", name);
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || strchr("._-:/@+", c);
        if (!ok) return err_fail(err, "model name '%s': only letters, digits and . _ - : / @ + are allowed", name);
    }
    return 0;
}

int rt_find(const rt_spec_list *l, const char *name) {
    for (int i = 0; i < l->n; i++)
        if (strcmp(l->v[i].name, name) == 0) return i;
    return -1;
}

static int add_spec(rt_spec_list *l, const char *name, size_t name_len, const char *path, pdl_error *err) {
    char nm[RT_MAX_NAME + 1];
    if (name_len == 0 || name_len > RT_MAX_NAME)
        return err_fail(err, "a model name must have 1 to %d bytes", RT_MAX_NAME);
    memcpy(nm, name, name_len);
    nm[name_len] = '\0';
    if (rt_check_name(nm, err)) return -1;
    if (rt_find(l, nm) >= 0) return err_fail(err, "model name '%s' is given twice", nm);
    if (!*path) return err_fail(err, "model '%s' has an empty path", nm);
    if (l->n == l->cap) {
        int cap = l->cap ? l->cap * 2 : 8;
        rt_model_spec *v = realloc(l->v, (size_t)cap * sizeof *v);
        if (!v) return err_fail(err, "out of memory");
        l->v = v;
        l->cap = cap;
    }
    rt_model_spec *m = &l->v[l->n];
    memset(m, 0, sizeof *m);
    m->name = strdup(nm);
    m->path = strdup(path);
    if (!m->name || !m->path) {
        free(m->name);
        free(m->path);
        return err_fail(err, "out of memory");
    }
    l->n++;
    return 0;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int rt_scan_models_dir(const char *dir, rt_spec_list *l, pdl_error *err) {
    DIR *d = opendir(dir);
    if (!d) return err_fail(err, "--models-dir %s: cannot open the folder", dir);
    char **names = NULL;
    size_t n = 0, cap = 0;
    int rc = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 16;
            char **nn = realloc(names, cap * sizeof *nn);
            if (!nn) {
                rc = err_fail(err, "out of memory");
                break;
            }
            names = nn;
        }
        if (!(names[n] = strdup(e->d_name))) {
            rc = err_fail(err, "out of memory");
            break;
        }
        n++;
    }
    closedir(d);
    if (!rc) qsort(names, n, sizeof *names, cmp_str); /* readdir's order is the file system's */
    for (size_t i = 0; i < n && !rc; i++) {
        size_t plen = strlen(dir) + strlen(names[i]) + 16;
        char *p = malloc(plen);
        if (!p) {
            rc = err_fail(err, "out of memory");
            break;
        }
        snprintf(p, plen, "%s/%s", dir, names[i]);
        struct stat st;
        size_t nl = strlen(names[i]);
        if (stat(p, &st) == 0 && S_ISREG(st.st_mode) && nl > 5 && strcmp(names[i] + nl - 5, ".gguf") == 0) {
            rc = add_spec(l, names[i], nl - 5, p, err);
        } else if (stat(p, &st) == 0 && S_ISDIR(st.st_mode)) {
            char *cfg = malloc(plen + 16);
            struct stat cs;
            if (!cfg) {
                rc = err_fail(err, "out of memory");
            } else {
                snprintf(cfg, plen + 16, "%s/config.json", p);
                if (stat(cfg, &cs) == 0 && S_ISREG(cs.st_mode)) rc = add_spec(l, names[i], nl, p, err);
                free(cfg);
            }
        }
        if (rc) err_fail_prefix(err, "--models-dir %s", dir);
        free(p);
    }
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
    return rc;
}

bool rt_is_name_eq_path(const char *value) {
    const char *eq = strchr(value, '=');
    if (!eq || eq == value || (size_t)(eq - value) > RT_MAX_NAME || !eq[1]) return false;
    char nm[RT_MAX_NAME + 1];
    memcpy(nm, value, (size_t)(eq - value));
    nm[eq - value] = '\0';
    if (rt_check_name(nm, NULL)) return false;
    struct stat st;
    return stat(value, &st) != 0; /* a file really named "a=b.gguf" stays a path */
}

int rt_add_model(rt_spec_list *l, const char *name_eq_path, pdl_error *err) {
    const char *eq = strchr(name_eq_path, '=');
    if (!eq) return err_fail(err, "--model %s: expected NAME=PATH", name_eq_path);
    if (add_spec(l, name_eq_path, (size_t)(eq - name_eq_path), eq + 1, err))
        return err_fail_prefix(err, "--model %s", name_eq_path);
    return 0;
}

/* One argument from the config: a string, or a number written as given. */
static char *arg_text(json_t *v) {
    char buf[64];
    if (json_is_string(v)) return strdup(json_string_value(v));
    if (json_is_integer(v)) {
        snprintf(buf, sizeof buf, "%lld", (long long)json_integer_value(v));
        return strdup(buf);
    }
    if (json_is_real(v)) {
        snprintf(buf, sizeof buf, "%.17g", json_real_value(v));
        return strdup(buf);
    }
    return NULL;
}

static int apply_config(json_t *root, const char *source, rt_spec_list *l, pdl_error *err) {
    if (!json_is_object(root)) return err_fail(err, "%s: expected a JSON object of model names", source);
    const char *name;
    json_t *val;
    json_object_foreach(root, name, val) {
        json_t *args = val, *path = NULL;
        if (json_is_object(val)) {
            const char *k;
            json_t *kv;
            json_object_foreach(val, k, kv) {
                if (strcmp(k, "args") != 0 && strcmp(k, "path") != 0)
                    return err_fail(err, "%s: model '%s': unknown key '%s' (args, path)", source, name, k);
            }
            args = json_object_get(val, "args");
            path = json_object_get(val, "path");
            if (path && !json_is_string(path))
                return err_fail(err, "%s: model '%s': path must be a string", source, name);
        } else if (!json_is_array(val)) {
            return err_fail(err, "%s: model '%s': expected an array of arguments or {\"path\", \"args\"}", source,
                            name);
        }
        if (args && !json_is_array(args))
            return err_fail(err, "%s: model '%s': args must be an array", source, name);
        int i = rt_find(l, name);
        if (i < 0) {
            if (!path)
                return err_fail(err, "%s: model '%s' is not in --models-dir or --model, and has no path", source,
                                name);
            if (add_spec(l, name, strlen(name), json_string_value(path), err))
                return err_fail_prefix(err, "%s", source);
            i = l->n - 1;
        } else if (path) {
            return err_fail(err, "%s: model '%s' is listed already; path may only name a new model", source, name);
        }
        rt_model_spec *m = &l->v[i];
        if (m->args) return err_fail(err, "%s: model '%s' is configured twice", source, name);
        size_t n = args ? json_array_size(args) : 0;
        m->args = calloc(n + 1, sizeof *m->args);
        if (!m->args) return err_fail(err, "out of memory");
        for (size_t j = 0; j < n; j++) {
            char *a = arg_text(json_array_get(args, j));
            if (!a)
                return err_fail(err, "%s: model '%s': argument %zu is not a string or a number", source, name, j + 1);
            m->args[m->n_args++] = a;
        }
    }
    return 0;
}

int rt_load_config_text(const char *text, const char *source, rt_spec_list *l, pdl_error *err) {
    json_error_t je;
    json_t *root = json_loads(text, JSON_REJECT_DUPLICATES, &je);
    if (!root) return err_fail(err, "%s: line %d column %d: %s", source, je.line, je.column, je.text);
    int rc = apply_config(root, source, l, err);
    json_decref(root);
    return rc;
}

int rt_load_config(const char *path, rt_spec_list *l, pdl_error *err) {
    json_t *root;
    if (json_file_load(path, JSON_REJECT_DUPLICATES, &root, err)) return -1;
    int rc = apply_config(root, path, l, err);
    json_decref(root);
    return rc;
}

void rt_spec_list_free(rt_spec_list *l) {
    for (int i = 0; i < l->n; i++) {
        free(l->v[i].name);
        free(l->v[i].path);
        for (int j = 0; j < l->v[i].n_args; j++) free(l->v[i].args[j]);
        free(l->v[i].args);
    }
    free(l->v);
    memset(l, 0, sizeof *l);
}

int rt_pick_lru(const rt_lru_entry *e, int n, int except) {
    int best = -1;
    for (int i = 0; i < n; i++) {
        if (i == except || !e[i].running || !e[i].loaded || e[i].in_flight > 0) continue;
        if (best < 0 || e[i].last_used < e[best].last_used) best = i;
    }
    return best;
}

int rt_count_running(const rt_lru_entry *e, int n) {
    int c = 0;
    for (int i = 0; i < n; i++) c += e[i].running;
    return c;
}
