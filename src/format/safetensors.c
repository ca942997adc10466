/*
 * safetensors.c - parsing and validating safetensors files and model folders.
 *
 * What it is for: turning one .safetensors file (u64 header length, JSON
 * header, data section) or a Hugging Face folder (model.safetensors, or the
 * shards named by model.safetensors.index.json) into a pdl_tensor_set whose
 * data pointers lie in read-only mappings of the files. Every number in the
 * header is checked against the file before a pointer is formed, so a hostile
 * file is rejected with a message and never read out of bounds.
 * What it is not for: config.json or what a tensor name means (src/model/).
 */
#define _POSIX_C_SOURCE 200809L
#include "format/safetensors.h"

#include <errno.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "util/error.h"
#include "util/file_map.h"

/* Real headers are kilobytes; the reference implementation caps them at
 * 100 MB too, which also bounds what a hostile length can make us parse. */
#define ST_MAX_HEADER_BYTES (100u * 1000u * 1000u)

struct st_model {
    pdl_file_map *files;    /* [n_files] mappings; tensors point into them */
    size_t n_files;
    pdl_tensor_set tensors; /* names unique across files */
    unsigned flags;         /* ST_ALLOW_* given at open */
    json_t *metadata;       /* the first file's __metadata__ object, or NULL */
};

/* ---------------------------------------------------------------------------
 * Header validation
 * ------------------------------------------------------------------------- */

/* Returns the index of the first byte that is not part of valid UTF-8
 * (overlong forms, surrogates and code points past U+10FFFF included), or
 * len when all of s is valid. */
static size_t utf8_invalid_at(const uint8_t *s, size_t len) {
    size_t i = 0;
    while (i < len) {
        uint8_t c = s[i];
        size_t n;
        uint32_t cp, min;
        if (c < 0x80) {
            i++;
            continue;
        } else if ((c & 0xE0) == 0xC0) {
            n = 2, cp = c & 0x1F, min = 0x80;
        } else if ((c & 0xF0) == 0xE0) {
            n = 3, cp = c & 0x0F, min = 0x800;
        } else if ((c & 0xF8) == 0xF0) {
            n = 4, cp = c & 0x07, min = 0x10000;
        } else {
            return i;
        }
        if (len - i < n) return i;
        for (size_t k = 1; k < n; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return i;
            cp = (cp << 6) | (s[i + k] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
        i += n;
    }
    return len;
}

static const char *json_type_name(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a real number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
    default: return "an unknown JSON value";
    }
}

static int parse_dtype(const char *s, unsigned flags, pdl_dtype *out) {
    if (strcmp(s, "F32") == 0) *out = PDL_DTYPE_F32;
    else if (strcmp(s, "F16") == 0) *out = PDL_DTYPE_F16;
    else if (strcmp(s, "BF16") == 0) *out = PDL_DTYPE_BF16;
    else if ((flags & ST_ALLOW_U32) && strcmp(s, "U32") == 0) *out = PDL_DTYPE_U32;
    else return -1;
    return 0;
}

/* Reads a non-negative JSON integer, or fails naming `what`. */
static int get_uint(const json_t *v, uint64_t *out, const char *path, const char *name,
                    const char *what, pdl_error *err) {
    if (!json_is_integer(v))
        return err_fail(err, "%s: tensor '%s': %s is %s, not an integer", path, name, what,
                        json_type_name(v));
    json_int_t x = json_integer_value(v);
    if (x < 0)
        return err_fail(err, "%s: tensor '%s': %s is negative (%lld)", path, name, what,
                        (long long)x);
    *out = (uint64_t)x;
    return 0;
}

/* Fills t from one header entry. data_start is the absolute offset of the
 * data section and data_size its length; everything is checked against them. */
static int parse_entry(pdl_tensor *t, const char *path, const char *name, const json_t *entry,
                       const uint8_t *base, uint64_t data_start, uint64_t data_size,
                       unsigned flags, pdl_error *err) {
    memset(t, 0, sizeof *t);
    if (!json_is_object(entry))
        return err_fail(err, "%s: tensor '%s': entry is %s, not an object", path, name,
                        json_type_name(entry));
    if (strlen(name) >= sizeof t->name)
        return err_fail(err, "%s: tensor '%.64s...': name is %zu bytes, longer than %d", path,
                        name, strlen(name), PDL_TENSOR_NAME_MAX - 1);
    memcpy(t->name, name, strlen(name) + 1);

    /* dtype */
    const json_t *dtype = json_object_get(entry, "dtype");
    if (!dtype) return err_fail(err, "%s: tensor '%s': missing \"dtype\"", path, name);
    if (!json_is_string(dtype))
        return err_fail(err, "%s: tensor '%s': \"dtype\" is %s, not a string", path, name,
                        json_type_name(dtype));
    size_t nl = strlen(name);
    bool mxfp4_part = nl > 7 && (strcmp(name + nl - 7, "_blocks") == 0 || strcmp(name + nl - 7, "_scales") == 0);
    if (mxfp4_part && strcmp(json_string_value(dtype), "U8") == 0) t->dtype = PDL_DTYPE_U8;
    else if (parse_dtype(json_string_value(dtype), flags, &t->dtype) != 0)
        return err_fail(err, "%s: tensor '%s': dtype '%.32s' is not supported (only F32, F16, BF16%s)",
                        path, name, json_string_value(dtype),
                        (flags & ST_ALLOW_U32) ? ", and U32 for MLX-quantized weights"
                        : strcmp(json_string_value(dtype), "U32") == 0
                            ? "; U32 only as MLX-quantized codes, with a \"quantization\" block in config.json"
                        : strcmp(json_string_value(dtype), "U8") == 0
                            ? "; U8 only as MXFP4 blocks and scales, in tensors named *_blocks / *_scales"
                            : "");

    /* shape */
    const json_t *shape = json_object_get(entry, "shape");
    if (!shape) return err_fail(err, "%s: tensor '%s': missing \"shape\"", path, name);
    if (!json_is_array(shape))
        return err_fail(err, "%s: tensor '%s': \"shape\" is %s, not an array", path, name,
                        json_type_name(shape));
    size_t n_dims = json_array_size(shape);
    if (n_dims > PDL_MAX_DIMS)
        return err_fail(err, "%s: tensor '%s': shape has %zu dimensions, more than %d", path, name,
                        n_dims, PDL_MAX_DIMS);
    t->n_dims = (int)n_dims;
    uint64_t nelems = 1;
    for (size_t i = 0; i < n_dims; i++) {
        char what[32];
        snprintf(what, sizeof what, "shape[%zu]", i);
        uint64_t d;
        if (get_uint(json_array_get(shape, i), &d, path, name, what, err) != 0) return -1;
        /* Products stay below 2^63 so that tensor_nelems never overflows,
         * whatever the order of the dimensions. */
        if (d != 0 && nelems > (uint64_t)INT64_MAX / d)
            return err_fail(err, "%s: tensor '%s': element count overflows at shape[%zu] = %llu",
                            path, name, i, (unsigned long long)d);
        nelems *= d;
        t->shape[i] = (int64_t)d;
    }
    uint64_t esize = dtype_block_bytes(t->dtype);
    if (nelems > UINT64_MAX / esize)
        return err_fail(err, "%s: tensor '%s': byte size of %llu elements overflows", path, name,
                        (unsigned long long)nelems);
    uint64_t want = nelems * esize;

    /* data_offsets */
    const json_t *offs = json_object_get(entry, "data_offsets");
    if (!offs) return err_fail(err, "%s: tensor '%s': missing \"data_offsets\"", path, name);
    if (!json_is_array(offs))
        return err_fail(err, "%s: tensor '%s': \"data_offsets\" is %s, not an array [begin, end]",
                        path, name, json_type_name(offs));
    if (json_array_size(offs) != 2)
        return err_fail(err, "%s: tensor '%s': \"data_offsets\" has %zu elements, not [begin, end]",
                        path, name, json_array_size(offs));
    uint64_t begin, end;
    if (get_uint(json_array_get(offs, 0), &begin, path, name, "data_offsets[0]", err) != 0 ||
        get_uint(json_array_get(offs, 1), &end, path, name, "data_offsets[1]", err) != 0)
        return -1;
    if (begin > end)
        return err_fail(err, "%s: tensor '%s': data_offsets [%llu, %llu) begin after end", path,
                        name, (unsigned long long)begin, (unsigned long long)end);
    if (end > data_size)
        return err_fail(err,
                        "%s: tensor '%s': data_offsets [%llu, %llu) end past the data section "
                        "(size %llu, header ends at offset %llu)",
                        path, name, (unsigned long long)begin, (unsigned long long)end,
                        (unsigned long long)data_size, (unsigned long long)data_start);
    if (end - begin != want)
        return err_fail(err,
                        "%s: tensor '%s': data_offsets [%llu, %llu) hold %llu bytes but %s shape "
                        "of %llu elements needs %llu",
                        path, name, (unsigned long long)begin, (unsigned long long)end,
                        (unsigned long long)(end - begin), dtype_name(t->dtype),
                        (unsigned long long)nelems, (unsigned long long)want);

    t->nbytes = (size_t)want;
    t->file_offset = data_start + begin;
    t->data = base + t->file_offset;
    t->file = path;
    return 0;
}

static int check_metadata(const json_t *md, const char *path, pdl_error *err) {
    if (!json_is_object(md))
        return err_fail(err, "%s: \"__metadata__\" is %s, not an object", path, json_type_name(md));
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)md, key, v) {
        if (!json_is_string(v))
            return err_fail(err, "%s: \"__metadata__\" key '%s' is %s, not a string", path, key,
                            json_type_name(v));
    }
    return 0;
}

/* Maps one file, validates its header and adds its tensors to m. The first
 * file's __metadata__ becomes m's. */
static int open_one(st_model *m, const char *path, pdl_error *err) {
    pdl_file_map *files = realloc(m->files, (m->n_files + 1) * sizeof *files);
    if (!files) return err_fail(err, "%s: out of memory", path);
    m->files = files;
    pdl_file_map *fm = &m->files[m->n_files];
    if (file_map_open(fm, path, err) != 0) return -1;
    m->n_files++;
    const char *p = fm->path; /* owned by the mapping; tensors keep it */

    if (fm->size < 8)
        return err_fail(err, "%s: file is %zu bytes, too short for the 8-byte header length", p,
                        fm->size);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = (n << 8) | fm->data[i];
    uint64_t avail = (uint64_t)fm->size - 8;
    if (n > ST_MAX_HEADER_BYTES)
        return err_fail(err, "%s: header length %llu is larger than the %u-byte limit", p,
                        (unsigned long long)n, ST_MAX_HEADER_BYTES);
    if (n > avail)
        return err_fail(err, "%s: header length %llu runs past the end of the file (%zu bytes)", p,
                        (unsigned long long)n, fm->size);
    const uint8_t *hdr = fm->data + 8;
    size_t bad = utf8_invalid_at(hdr, (size_t)n);
    if (bad != n)
        return err_fail(err, "%s: header is not valid UTF-8: byte 0x%02x at file offset %llu", p,
                        hdr[bad], (unsigned long long)(8 + bad));

    json_error_t jerr;
    json_t *root = json_loadb((const char *)hdr, (size_t)n, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return err_fail(err,
                        "%s: header is not valid JSON: %s (line %d, column %d, position %d; "
                        "file offset %llu)",
                        p, jerr.text, jerr.line, jerr.column, jerr.position,
                        (unsigned long long)(8 + (jerr.position > 0 ? jerr.position : 0)));
    if (!json_is_object(root)) {
        err_fail(err, "%s: header is %s, not a JSON object", p, json_type_name(root));
        json_decref(root);
        return -1;
    }

    uint64_t data_start = 8 + n;
    uint64_t data_size = avail - n;
    const char *name;
    json_t *entry;
    json_object_foreach(root, name, entry) {
        if (strcmp(name, "__metadata__") == 0) {
            if (check_metadata(entry, p, err) != 0) goto fail;
            if (m->n_files == 1) m->metadata = json_incref(entry);
            continue;
        }
        pdl_tensor t;
        if (parse_entry(&t, p, name, entry, fm->data, data_start, data_size, m->flags, err) != 0)
            goto fail;
        if (tensor_set_add(&m->tensors, &t, err) != 0) goto fail;
    }
    json_decref(root);
    return tensor_set_check_disjoint(&m->tensors, err);
fail:
    json_decref(root);
    return -1;
}

/* ---------------------------------------------------------------------------
 * Files and folders
 * ------------------------------------------------------------------------- */

static st_model *model_new(const char *what, pdl_error *err) {
    st_model *m = calloc(1, sizeof *m);
    if (!m) err_fail(err, "%s: out of memory", what);
    return m;
}

int st_open_file(st_model **out, const char *path, pdl_error *err) {
    *out = NULL;
    st_model *m = model_new(path, err);
    if (!m) return -1;
    if (open_one(m, path, err) != 0) {
        st_close(m);
        return -1;
    }
    *out = m;
    return 0;
}

static char *join_path(const char *dir, const char *name) {
    size_t a = strlen(dir), b = strlen(name);
    char *p = malloc(a + b + 2);
    if (!p) return NULL;
    memcpy(p, dir, a);
    p[a] = '/';
    memcpy(p + a + 1, name, b + 1);
    return p;
}

static bool file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* A shard must be a plain file name in the index's folder. */
static bool shard_name_ok(const char *s) {
    return s[0] != '\0' && !strchr(s, '/') && !strchr(s, '\\') && !strstr(s, "..");
}

static int open_index(st_model *m, const char *dir, const char *index_path, pdl_error *err) {
    json_error_t jerr;
    json_t *root = json_load_file(index_path, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return err_fail(err, "%s: not valid JSON: %s (line %d, column %d, position %d)", index_path,
                        jerr.text, jerr.line, jerr.column, jerr.position);
    const char **shards = NULL;
    char *shard_path = NULL;
    int rc = -1;

    if (!json_is_object(root)) {
        err_fail(err, "%s: top level is %s, not an object", index_path, json_type_name(root));
        goto done;
    }
    json_t *md = json_object_get(root, "metadata");
    if (md && !json_is_object(md) && !json_is_null(md)) {
        err_fail(err, "%s: \"metadata\" is %s, not an object", index_path, json_type_name(md));
        goto done;
    }
    json_t *wm = json_object_get(root, "weight_map");
    if (!wm) {
        err_fail(err, "%s: missing \"weight_map\"", index_path);
        goto done;
    }
    if (!json_is_object(wm)) {
        err_fail(err, "%s: \"weight_map\" is %s, not an object", index_path, json_type_name(wm));
        goto done;
    }
    size_t n_entries = json_object_size(wm);
    if (n_entries == 0) {
        err_fail(err, "%s: \"weight_map\" is empty", index_path);
        goto done;
    }

    /* The distinct shard names, sorted so the open order (and which file's
     * __metadata__ counts as the first) does not depend on the JSON order. */
    shards = malloc(n_entries * sizeof *shards);
    if (!shards) {
        err_fail(err, "%s: out of memory", index_path);
        goto done;
    }
    size_t n_shards = 0;
    const char *name;
    json_t *v;
    json_object_foreach(wm, name, v) {
        if (!json_is_string(v)) {
            err_fail(err, "%s: weight_map entry for tensor '%s' is %s, not a shard file name",
                     index_path, name, json_type_name(v));
            goto done;
        }
        const char *s = json_string_value(v);
        if (!shard_name_ok(s)) {
            err_fail(err,
                     "%s: weight_map entry for tensor '%s' names shard '%s', not a plain file "
                     "name in the same folder",
                     index_path, name, s);
            goto done;
        }
        shards[n_shards++] = s;
    }
    qsort(shards, n_shards, sizeof *shards, cmp_str);
    size_t u = 0;
    for (size_t i = 0; i < n_shards; i++)
        if (u == 0 || strcmp(shards[u - 1], shards[i]) != 0) shards[u++] = shards[i];
    n_shards = u;

    for (size_t i = 0; i < n_shards; i++) {
        free(shard_path);
        shard_path = join_path(dir, shards[i]);
        if (!shard_path) {
            err_fail(err, "%s: out of memory", index_path);
            goto done;
        }
        if (!file_exists(shard_path)) {
            err_fail(err, "%s: shard '%s' is missing (%s: %s)", index_path, shards[i], shard_path,
                     strerror(errno));
            goto done;
        }
        if (open_one(m, shard_path, err) != 0) goto done;
    }

    /* Every tensor the index names must be in the shard it names. */
    json_object_foreach(wm, name, v) {
        const char *s = json_string_value(v);
        const pdl_tensor *t = tensor_set_find(&m->tensors, name);
        free(shard_path);
        shard_path = join_path(dir, s);
        if (!shard_path) {
            err_fail(err, "%s: out of memory", index_path);
            goto done;
        }
        if (!t) {
            err_fail(err, "%s: tensor '%s' is listed in shard '%s' but %s does not contain it",
                     index_path, name, s, shard_path);
            goto done;
        }
        if (strcmp(t->file, shard_path) != 0) {
            err_fail(err, "%s: tensor '%s' is listed in shard '%s' but %s does not contain it "
                     "(it is in %s)",
                     index_path, name, s, shard_path, t->file);
            goto done;
        }
    }
    rc = 0;
done:
    free(shard_path);
    free(shards);
    json_decref(root);
    return rc;
}

int st_open_dir(st_model **out, const char *dir, pdl_error *err) {
    return st_open_dir_flags(out, dir, 0, err);
}

int st_open_dir_flags(st_model **out, const char *dir, unsigned flags, pdl_error *err) {
    *out = NULL;
    char *index_path = join_path(dir, "model.safetensors.index.json");
    char *single_path = join_path(dir, "model.safetensors");
    st_model *m = model_new(dir, err);
    int rc = -1;
    if (!index_path || !single_path || !m) {
        err_fail(err, "%s: out of memory", dir);
        goto done;
    }
    m->flags = flags;
    if (file_exists(index_path)) {
        rc = open_index(m, dir, index_path, err);
    } else if (file_exists(single_path)) {
        rc = open_one(m, single_path, err);
    } else {
        rc = err_fail(err, "%s: neither model.safetensors.index.json nor model.safetensors was found",
                      dir);
    }
done:
    free(index_path);
    free(single_path);
    if (rc != 0) {
        st_close(m);
        return -1;
    }
    *out = m;
    return 0;
}

void st_release(st_model *m, const void *data, size_t n) {
    for (size_t i = 0; i < m->n_files; i++)
        if (file_map_release(&m->files[i], data, n)) return;
}

void st_close(st_model *m) {
    if (!m) return;
    for (size_t i = 0; i < m->n_files; i++) file_map_close(&m->files[i]);
    free(m->files);
    tensor_set_free(&m->tensors);
    json_decref(m->metadata);
    free(m);
}

const pdl_tensor_set *st_tensors(const st_model *m) { return &m->tensors; }

pdl_tensor_set *st_tensors_mut(st_model *m) { return &m->tensors; }

const char *st_metadata(const st_model *m, const char *key) {
    if (!m->metadata) return NULL;
    return json_string_value(json_object_get(m->metadata, key));
}
