/*
 * chat_template.c - a model's chat template and the context Hugging Face's
 * apply_chat_template renders it with (the pdl_chat_template_* functions).
 *
 * Where the template comes from, first found wins (as in recent
 * transformers): a folder's chat_template.jinja, its chat_template.json, or
 * the `chat_template` of tokenizer_config.json (a string, or a list of
 * {name, template}); named extras in additional_chat_templates/NAME.jinja;
 * or a GGUF file's tokenizer.chat_template (and tokenizer.chat_template.NAME).
 * The special tokens (bos_token, eos_token, ...) come from
 * tokenizer_config.json and special_tokens_map.json, or the GGUF vocabulary.
 *
 * The context is what apply_chat_template passes: the special tokens, then
 * the caller's keys (messages, tools, documents, add_generation_prompt and
 * extras such as enable_thinking), with tools and documents None and
 * add_generation_prompt false when not given. The template named "tool_use"
 * is used when tools are given and it exists, else "default", else the first.
 */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "format/gguf.h"
#include "template/template.h"
#include "util/error.h"
#include "util/file_map.h"
#include "util/json_file.h"

#define MAX_TEMPLATES 32

struct pdl_chat_template {
    int n;
    char *names[MAX_TEMPLATES];
    tmpl_template *tmpls[MAX_TEMPLATES];
    json_t *specials; /* object: bos_token, eos_token, ... */
};

static char *join_path(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/%s", dir, name);
    return p;
}

static bool file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static int add_template(pdl_chat_template *t, const char *name, const char *src, size_t len, const char *where,
                        pdl_error *err) {
    for (int i = 0; i < t->n; i++)
        if (strcmp(t->names[i], name) == 0) return 0; /* the first source of a name wins */
    if (t->n == MAX_TEMPLATES) return err_fail(err, "%s: more than %d chat templates", where, MAX_TEMPLATES);
    tmpl_error te;
    tmpl_template *tp;
    if (tmpl_parse(&tp, src, len, &te)) {
        if (te.line) return err_fail(err, "%s: chat template '%s' line %d: %s", where, name, te.line, te.message);
        return err_fail(err, "%s: chat template '%s': %s", where, name, te.message);
    }
    t->names[t->n] = strdup(name);
    t->tmpls[t->n] = tp;
    if (!t->names[t->n]) {
        tmpl_free(tp);
        return err_fail(err, "out of memory");
    }
    t->n++;
    return 0;
}

/* "chat_template": a string, or [{"name": ..., "template": ...}, ...] */
static int add_from_json_field(pdl_chat_template *t, json_t *field, const char *where, pdl_error *err) {
    if (json_is_string(field))
        return add_template(t, "default", json_string_value(field), json_string_length(field), where, err);
    if (json_is_array(field)) {
        size_t i;
        json_t *entry;
        json_array_foreach(field, i, entry) {
            json_t *name = json_object_get(entry, "name"), *src = json_object_get(entry, "template");
            if (!json_is_string(name) || !json_is_string(src))
                return err_fail(err, "%s: chat_template[%zu] needs string 'name' and 'template'", where, i);
            if (add_template(t, json_string_value(name), json_string_value(src), json_string_length(src), where, err))
                return -1;
        }
        return 0;
    }
    if (field && !json_is_null(field)) return err_fail(err, "%s: chat_template must be a string or a list", where);
    return 0;
}

/* A special token as tokenizer_config.json writes it: "x" or {"content": "x"}. */
static json_t *token_text(json_t *v) {
    if (json_is_string(v)) return json_incref(v);
    if (json_is_object(v) && json_is_string(json_object_get(v, "content")))
        return json_incref(json_object_get(v, "content"));
    return NULL;
}

static void add_specials_from(json_t *specials, json_t *cfg) {
    static const char *const keys[] = {"bos_token", "eos_token", "unk_token", "sep_token",
                                       "pad_token", "cls_token", "mask_token"};
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
        json_t *v = json_object_get(cfg, keys[i]);
        if (!v) continue;
        json_t *s = token_text(v);
        if (s) json_object_set_new(specials, keys[i], s);
        else if (json_is_null(v)) json_object_del(specials, keys[i]);
    }
    json_t *extra = json_object_get(cfg, "additional_special_tokens");
    if (json_is_array(extra)) {
        json_t *list = json_array();
        size_t i;
        json_t *v;
        json_array_foreach(extra, i, v) {
            json_t *s = token_text(v);
            if (s) json_array_append_new(list, s);
        }
        json_object_set_new(specials, "additional_special_tokens", list);
    }
}

static int load_folder(pdl_chat_template *t, const char *dir, pdl_error *err) {
    int rc = -1;
    char *jinja = join_path(dir, "chat_template.jinja"), *cjson = join_path(dir, "chat_template.json"),
         *cfg_path = join_path(dir, "tokenizer_config.json"), *stm = join_path(dir, "special_tokens_map.json"),
         *extra_dir = join_path(dir, "additional_chat_templates");
    json_t *cfg = NULL, *cj = NULL, *sm = NULL;
    DIR *d = NULL;
    if (!jinja || !cjson || !cfg_path || !stm || !extra_dir) {
        err_fail(err, "out of memory");
        goto done;
    }
    /* JSON_DECODE_INT_AS_REAL: model_max_length is often too big for int64 */
    if (file_exists(cfg_path) && json_file_load(cfg_path, JSON_DECODE_INT_AS_REAL, &cfg, err)) goto done;
    if (cfg) add_specials_from(t->specials, cfg);
    if (file_exists(stm) && json_file_load(stm, JSON_DECODE_INT_AS_REAL, &sm, err)) goto done;
    if (sm) add_specials_from(t->specials, sm);

    if (file_exists(jinja)) {
        char *src;
        size_t len;
        if (file_read(jinja, PDL_READ_MAX_TEMPLATE, &src, &len, err)) goto done;
        int r = add_template(t, "default", src, len, jinja, err);
        free(src);
        if (r) goto done;
    }
    if (file_exists(cjson)) {
        if (json_file_load(cjson, JSON_DECODE_INT_AS_REAL, &cj, err)) goto done;
        if (add_from_json_field(t, json_object_get(cj, "chat_template"), cjson, err)) goto done;
    }
    if (cfg && add_from_json_field(t, json_object_get(cfg, "chat_template"), cfg_path, err)) goto done;
    if ((d = opendir(extra_dir)) != NULL) {
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            size_t n = strlen(e->d_name);
            if (n <= 6 || strcmp(e->d_name + n - 6, ".jinja") != 0) continue;
            char *path = join_path(extra_dir, e->d_name), *src = NULL;
            size_t len;
            int r = path ? file_read(path, PDL_READ_MAX_TEMPLATE, &src, &len, err) : err_fail(err, "out of memory");
            if (!r) {
                e->d_name[n - 6] = '\0';
                r = add_template(t, e->d_name, src, len, path, err);
            }
            free(src);
            free(path);
            if (r) goto done;
        }
    }
    if (!t->n) {
        err_fail(err, "%s: no chat template (looked for chat_template.jinja, chat_template.json and the chat_template of "
                      "tokenizer_config.json)", dir);
        goto done;
    }
    rc = 0;
done:
    if (d) closedir(d);
    json_decref(cfg), json_decref(cj), json_decref(sm);
    free(jinja), free(cjson), free(cfg_path), free(stm), free(extra_dir);
    return rc;
}

/* the text of token `key` (an id) from the GGUF vocabulary */
static void gguf_special(json_t *specials, gguf_file *g, const char *key, const char *name) {
    uint32_t id;
    gguf_array toks;
    if (gguf_get_u32(g, key, &id, NULL) != 1) return;
    if (gguf_get_arr(g, "tokenizer.ggml.tokens", &toks, NULL) != 1 || toks.elem_type != GGUF_TYPE_STRING) return;
    if (id >= toks.count) return;
    json_t *s = json_stringn(toks.strings[id].ptr, (size_t)toks.strings[id].len);
    if (s) json_object_set_new(specials, name, s);
}

static int load_gguf(pdl_chat_template *t, const char *path, pdl_error *err) {
    gguf_file *g;
    if (gguf_open(&g, path, err)) return -1;
    int rc = -1;
    const char *src;
    int found = gguf_get_str(g, "tokenizer.chat_template", &src, err);
    if (found < 0) goto done;
    if (found == 1 && add_template(t, "default", src, strlen(src), path, err)) goto done;
    static const char prefix[] = "tokenizer.chat_template.";
    for (size_t i = 0; i < gguf_kv_count(g); i++) {
        const gguf_kv *kv = gguf_kv_at(g, i);
        size_t pn = sizeof prefix - 1;
        if (kv->type != GGUF_TYPE_STRING || kv->key.len <= pn || memcmp(kv->key.ptr, prefix, pn) != 0) continue;
        char name[256];
        snprintf(name, sizeof name, "%.*s", (int)(kv->key.len - pn), kv->key.ptr + pn);
        if (add_template(t, name, kv->v.str.ptr, (size_t)kv->v.str.len, path, err)) goto done;
    }
    if (!t->n) {
        err_fail(err, "%s: no chat template (tokenizer.chat_template is not set)", path);
        goto done;
    }
    gguf_special(t->specials, g, "tokenizer.ggml.bos_token_id", "bos_token");
    gguf_special(t->specials, g, "tokenizer.ggml.eos_token_id", "eos_token");
    gguf_special(t->specials, g, "tokenizer.ggml.unknown_token_id", "unk_token");
    gguf_special(t->specials, g, "tokenizer.ggml.padding_token_id", "pad_token");
    rc = 0;
done:
    gguf_close(g);
    return rc;
}

static pdl_chat_template *chat_template_new(void) {
    pdl_chat_template *t = calloc(1, sizeof *t);
    if (t && !(t->specials = json_object())) {
        free(t);
        return NULL;
    }
    return t;
}

int pdl_chat_template_load(pdl_chat_template **out, const char *path, pdl_error *err) {
    *out = NULL;
    struct stat st;
    if (stat(path, &st) != 0) return err_fail(err, "%s: no such file or folder", path);
    pdl_chat_template *t = chat_template_new();
    if (!t) return err_fail(err, "out of memory");
    int rc = S_ISDIR(st.st_mode) ? load_folder(t, path, err) : load_gguf(t, path, err);
    if (rc) {
        pdl_chat_template_free(t);
        return -1;
    }
    *out = t;
    return 0;
}

int pdl_chat_template_from_source(pdl_chat_template **out, const char *source, const char *bos_token,
                                  const char *eos_token, pdl_error *err) {
    *out = NULL;
    pdl_chat_template *t = chat_template_new();
    if (!t) return err_fail(err, "out of memory");
    if (bos_token) json_object_set_new(t->specials, "bos_token", json_string(bos_token));
    if (eos_token) json_object_set_new(t->specials, "eos_token", json_string(eos_token));
    if (add_template(t, "default", source, strlen(source), "chat template", err)) {
        pdl_chat_template_free(t);
        return -1;
    }
    *out = t;
    return 0;
}

static const tmpl_template *pick(const pdl_chat_template *t, bool have_tools) {
    int dflt = -1;
    for (int i = 0; i < t->n; i++) {
        if (have_tools && strcmp(t->names[i], "tool_use") == 0) return t->tmpls[i];
        if (dflt < 0 && strcmp(t->names[i], "default") == 0) dflt = i;
    }
    return t->tmpls[dflt >= 0 ? dflt : 0];
}

int pdl_chat_template_render(const pdl_chat_template *t, const char *context_json, char **text, size_t *len,
                             pdl_error *err) {
    *text = NULL;
    if (len) *len = 0;
    json_error_t je;
    json_t *user = json_loads(context_json ? context_json : "{}", JSON_ALLOW_NUL, &je);
    if (!user) return err_fail(err, "chat context: invalid JSON at line %d, column %d: %s", je.line, je.column, je.text);
    if (!json_is_object(user)) {
        json_decref(user);
        return err_fail(err, "chat context: expected a JSON object");
    }
    json_t *ctx = json_deep_copy(t->specials);
    if (!ctx || json_object_update(ctx, user)) {
        json_decref(ctx), json_decref(user);
        return err_fail(err, "out of memory");
    }
    json_decref(user);
    if (!json_object_get(ctx, "tools")) json_object_set_new(ctx, "tools", json_null());
    if (!json_object_get(ctx, "documents")) json_object_set_new(ctx, "documents", json_null());
    if (!json_object_get(ctx, "add_generation_prompt")) json_object_set_new(ctx, "add_generation_prompt", json_false());
    const tmpl_template *tp = pick(t, !json_is_null(json_object_get(ctx, "tools")));
    tmpl_error te;
    int rc = tmpl_render(tp, ctx, NULL, text, len, &te);
    json_decref(ctx);
    if (rc) {
        if (te.line) return err_fail(err, "chat template line %d: %s", te.line, te.message);
        return err_fail(err, "chat template: %s", te.message);
    }
    return 0;
}

void pdl_chat_template_free(pdl_chat_template *t) {
    if (!t) return;
    for (int i = 0; i < t->n; i++) {
        free(t->names[i]);
        tmpl_free(t->tmpls[i]);
    }
    json_decref(t->specials);
    free(t);
}
