/*
 * test_safetensors.c - the safetensors reader (src/format/safetensors.c).
 *
 * Valid files round-trip (dtype, shape, bytes, absolute offsets, metadata),
 * sharded folders resolve through index.json, every malformed header or
 * index is rejected with a message naming the file and the tensor or key at
 * fault, and truncated or randomly corrupted files fail cleanly, never
 * crashing or reading outside the file. The real tiny models in the shared
 * data folder open with the tensor counts and shapes they have.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <sys/stat.h>

#include "format/safetensors.h"
#include "support/st_writer.h"
#include "test_util.h"

static pdl_error g_err;

/* ---------------------------------------------------------------------------
 * Helpers
 * ------------------------------------------------------------------------- */

/* Opens bytes written to a scratch file; REQUIREs failure and returns the
 * message (which must name the file). */
static const char *expect_fail_bytes(const uint8_t *bytes, size_t len) {
    char *path = test_tmp_path("bad.safetensors");
    test_write_file(path, bytes, len);
    st_model *m = (st_model *)&g_err; /* must be reset to NULL */
    memset(&g_err, 0, sizeof g_err);
    int rc = st_open_file(&m, path, &g_err);
    if (rc == 0) st_close(m);
    REQUIRE_MSG(rc == -1, "opening a corrupt file succeeded (%zu bytes)", len);
    CHECK(m == NULL);
    CHECK(g_err.message[0] != '\0');
    CHECK_CONTAINS(g_err.message, path);
    free(path);
    return g_err.message;
}

static const char *expect_fail_header(const char *header, const void *data, size_t data_len) {
    size_t len;
    uint8_t *bytes = stw_raw_bytes(header, strlen(header), data, data_len, &len);
    const char *msg = expect_fail_bytes(bytes, len);
    free(bytes);
    return msg;
}

/* Serializes and frees w, then expects the open to fail. */
static const char *expect_fail_writer(stw_writer *w) {
    size_t len;
    uint8_t *bytes = stw_serialize(w, &len);
    stw_free(w);
    const char *msg = expect_fail_bytes(bytes, len);
    free(bytes);
    return msg;
}

static st_model *open_ok(const char *path) {
    st_model *m = NULL;
    int rc = st_open_file(&m, path, &g_err);
    REQUIRE_MSG(rc == 0, "%s", g_err.message);
    REQUIRE(m != NULL);
    return m;
}

static st_model *open_dir_ok(const char *dir) {
    st_model *m = NULL;
    int rc = st_open_dir(&m, dir, &g_err);
    REQUIRE_MSG(rc == 0, "%s", g_err.message);
    REQUIRE(m != NULL);
    return m;
}

static const char *expect_dir_fail(const char *dir) {
    st_model *m = (st_model *)&g_err;
    memset(&g_err, 0, sizeof g_err);
    int rc = st_open_dir(&m, dir, &g_err);
    if (rc == 0) st_close(m);
    REQUIRE_MSG(rc == -1, "opening folder %s succeeded", dir);
    CHECK(m == NULL);
    CHECK(g_err.message[0] != '\0');
    return g_err.message;
}

/* Reads len bytes at offset of path, to compare with a tensor's data. */
static void read_at(const char *path, uint64_t offset, void *buf, size_t len) {
    FILE *f = fopen(path, "rb");
    REQUIRE_MSG(f != NULL, "cannot open %s", path);
    REQUIRE(fseek(f, (long)offset, SEEK_SET) == 0);
    REQUIRE(fread(buf, 1, len, f) == len);
    fclose(f);
}

static void check_shape(const pdl_tensor *t, int n_dims, const int64_t *shape) {
    CHECK_EQ_INT(t->n_dims, n_dims);
    for (int i = 0; i < n_dims && i < t->n_dims; i++) CHECK_EQ_INT(t->shape[i], shape[i]);
}

/* A small valid file: two F32 tensors, one F16, one BF16 and metadata. */
static stw_writer *small_model(void) {
    stw_writer *w = stw_new();
    static const float a[6] = {1, 2, 3, 4, 5, 6};
    static const float b[3] = {-1, 0.5f, 8};
    static const uint16_t h[4] = {0x3C00, 0xC000, 0x3800, 0x0000};
    static const uint16_t bf[2] = {0x3F80, 0x4040};
    stw_metadata(w, "format", "pt");
    stw_add_f32(w, "a.weight", 2, (const int64_t[]){2, 3}, a);
    stw_add(w, "h.weight", "F16", 2, (const int64_t[]){2, 2}, h);
    stw_add_f32(w, "b.bias", 1, (const int64_t[]){3}, b);
    stw_add(w, "bf.weight", "BF16", 1, (const int64_t[]){2}, bf);
    return w;
}

/* ---------------------------------------------------------------------------
 * Valid files
 * ------------------------------------------------------------------------- */

static void test_roundtrip_f32_f16_bf16(void) {
    stw_writer *w = small_model();
    char *path = test_tmp_path("small.safetensors");
    REQUIRE(stw_write(w, path) == 0);
    st_model *m = open_ok(path);
    const pdl_tensor_set *ts = st_tensors(m);
    CHECK_EQ_INT(ts->count, 4);

    static const struct {
        const char *name;
        pdl_dtype dtype;
        int n_dims;
        int64_t shape[2];
        size_t nbytes;
    } want[] = {
        {"a.weight", PDL_DTYPE_F32, 2, {2, 3}, 24},
        {"h.weight", PDL_DTYPE_F16, 2, {2, 2}, 8},
        {"b.bias", PDL_DTYPE_F32, 1, {3}, 12},
        {"bf.weight", PDL_DTYPE_BF16, 1, {2}, 4},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const pdl_tensor *t = tensor_set_find(ts, want[i].name);
        REQUIRE_MSG(t != NULL, "%s", want[i].name);
        CHECK_EQ_INT(t->dtype, want[i].dtype);
        check_shape(t, want[i].n_dims, want[i].shape);
        CHECK_EQ_INT(t->nbytes, want[i].nbytes);
        CHECK_EQ_INT(tensor_nelems(t) * (int64_t)dtype_block_bytes(t->dtype), t->nbytes);
        CHECK(strcmp(t->file, path) == 0);
        uint64_t begin, end, data_start;
        REQUIRE(stw_offsets(w, want[i].name, &begin, &end, &data_start) == 0);
        CHECK_EQ_INT(t->file_offset, data_start + begin);
        CHECK_EQ_INT(end - begin, t->nbytes);
        /* The pointer is into the file at file_offset. */
        uint8_t buf[64];
        read_at(path, t->file_offset, buf, t->nbytes);
        CHECK(memcmp(buf, t->data, t->nbytes) == 0);
        /* The writer aligns each tensor to its element size. */
        CHECK((uintptr_t)t->data % dtype_block_bytes(t->dtype) == 0);
    }

    const pdl_tensor *a = tensor_set_find(ts, "a.weight");
    const float *af = a->data;
    CHECK(af[0] == 1.0f && af[5] == 6.0f);
    const pdl_tensor *b = tensor_set_find(ts, "b.bias");
    CHECK(((const float *)b->data)[1] == 0.5f);
    const uint16_t *hv = tensor_set_find(ts, "h.weight")->data;
    CHECK(hv[0] == 0x3C00 && hv[1] == 0xC000 && hv[2] == 0x3800);
    const uint16_t *bv = tensor_set_find(ts, "bf.weight")->data;
    CHECK(bv[0] == 0x3F80 && bv[1] == 0x4040);
    CHECK(tensor_set_find(ts, "__metadata__") == NULL);
    st_close(m);
    stw_free(w);
    free(path);
}

static void test_shape_order_is_outermost_first(void) {
    stw_writer *w = stw_new();
    stw_add(w, "t4", "F32", 4, (const int64_t[]){2, 3, 4, 5}, NULL);
    stw_add(w, "t3", "BF16", 3, (const int64_t[]){7, 1, 9}, NULL);
    char *path = test_tmp_path("dims.safetensors");
    REQUIRE(stw_write(w, path) == 0);
    st_model *m = open_ok(path);
    check_shape(tensor_set_find(st_tensors(m), "t4"), 4, (const int64_t[]){2, 3, 4, 5});
    check_shape(tensor_set_find(st_tensors(m), "t3"), 3, (const int64_t[]){7, 1, 9});
    CHECK_EQ_INT(tensor_set_find(st_tensors(m), "t4")->nbytes, 2 * 3 * 4 * 5 * 4);
    st_close(m);
    stw_free(w);
    free(path);
}

static void test_scalar_and_empty_tensors(void) {
    stw_writer *w = stw_new();
    float one = 1.0f;
    stw_add(w, "scalar", "F32", 0, NULL, &one);
    stw_add(w, "empty", "F16", 2, (const int64_t[]){0, 16}, NULL);
    char *path = test_tmp_path("scalar.safetensors");
    REQUIRE(stw_write(w, path) == 0);
    st_model *m = open_ok(path);
    const pdl_tensor *s = tensor_set_find(st_tensors(m), "scalar");
    REQUIRE(s != NULL);
    CHECK_EQ_INT(s->n_dims, 0);
    CHECK_EQ_INT(s->nbytes, 4);
    CHECK(*(const float *)s->data == 1.0f);
    const pdl_tensor *e = tensor_set_find(st_tensors(m), "empty");
    REQUIRE(e != NULL);
    CHECK_EQ_INT(e->nbytes, 0);
    CHECK_EQ_INT(tensor_nelems(e), 0);
    st_close(m);
    stw_free(w);
    free(path);
}

static void test_empty_header_object_has_no_tensors(void) {
    char *path = test_tmp_path("empty.safetensors");
    REQUIRE(stw_write_raw(path, "{}      ", 8, NULL, 0) == 0);
    st_model *m = open_ok(path);
    CHECK_EQ_INT(st_tensors(m)->count, 0);
    CHECK(st_metadata(m, "format") == NULL);
    st_close(m);
    free(path);
}

static void test_metadata_lookup(void) {
    stw_writer *w = small_model();
    stw_metadata(w, "note", "caf\xc3\xa9 \"quoted\"");
    char *path = test_tmp_path("meta.safetensors");
    REQUIRE(stw_write(w, path) == 0);
    st_model *m = open_ok(path);
    CHECK(st_metadata(m, "format") && strcmp(st_metadata(m, "format"), "pt") == 0);
    CHECK(st_metadata(m, "note") && strcmp(st_metadata(m, "note"), "caf\xc3\xa9 \"quoted\"") == 0);
    CHECK(st_metadata(m, "missing") == NULL);
    st_close(m);
    stw_free(w);

    /* No __metadata__ at all. */
    w = stw_new();
    stw_add(w, "x", "F32", 1, (const int64_t[]){2}, NULL);
    REQUIRE(stw_write(w, path) == 0);
    m = open_ok(path);
    CHECK(st_metadata(m, "format") == NULL);
    st_close(m);
    stw_free(w);
    free(path);
}

static void test_unknown_entry_keys_are_ignored(void) {
    char *path = test_tmp_path("extra.safetensors");
    const char *h = "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"extra\":[1]}}";
    REQUIRE(stw_write_raw(path, h, strlen(h), "abcd", 4) == 0);
    st_model *m = open_ok(path);
    CHECK_EQ_INT(st_tensors(m)->count, 1);
    st_close(m);
    free(path);
}

/* ---------------------------------------------------------------------------
 * Corrupt files
 * ------------------------------------------------------------------------- */

static void test_rejects_file_shorter_than_8_bytes(void) {
    static const uint8_t bytes[8] = {2, 0, 0, 0, 0, 0, 0, 0};
    for (size_t n = 0; n < 8; n++) {
        const char *msg = expect_fail_bytes(bytes, n);
        CHECK_CONTAINS(msg, "too short");
    }
}

static void test_rejects_header_length_past_file(void) {
    uint8_t bytes[8 + 10] = {0};
    bytes[0] = 0xE8, bytes[1] = 0x03; /* 1000 */
    memcpy(bytes + 8, "{}        ", 10);
    const char *msg = expect_fail_bytes(bytes, sizeof bytes);
    CHECK_CONTAINS(msg, "header length 1000");
    CHECK_CONTAINS(msg, "18 bytes");
}

static void test_rejects_header_length_over_100mb(void) {
    uint8_t bytes[16] = {0};
    uint64_t n = 200000000;
    for (int i = 0; i < 8; i++) bytes[i] = (uint8_t)(n >> (8 * i));
    memcpy(bytes + 8, "{}      ", 8);
    CHECK_CONTAINS(expect_fail_bytes(bytes, sizeof bytes), "header length 200000000");
    memset(bytes, 0xFF, 8);
    CHECK_CONTAINS(expect_fail_bytes(bytes, sizeof bytes), "header length 18446744073709551615");
}

/* The format forbids overlapping data: one tensor's bytes read as another's
 * is a corrupt or crafted file. The same offsets, a one-element overlap,
 * and (the boundary) tensors that touch without overlapping. */
static void test_rejects_overlapping_tensors(void) {
    float data[4] = {1, 2, 3, 4};
    const char *msg = expect_fail_header(
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
        "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", data, 8);
    CHECK_CONTAINS(msg, "tensors 'a' (bytes");
    CHECK_CONTAINS(msg, "and 'b'");
    CHECK_CONTAINS(msg, "overlap");
    msg = expect_fail_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                             "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", data, 12);
    CHECK_CONTAINS(msg, "overlap");
    char *path = test_tmp_path("touching.safetensors");
    const char *h = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                    "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}";
    REQUIRE(stw_write_raw(path, h, strlen(h), data, 16) == 0);
    st_model *m = open_ok(path);
    st_close(m);
    free(path);
}

static void test_rejects_invalid_json(void) {
    const char *msg = expect_fail_header("{\"w\": {\"dtype\": \"F32\",", NULL, 0);
    CHECK_CONTAINS(msg, "not valid JSON");
    CHECK_CONTAINS(msg, "line 1");
    CHECK_CONTAINS(msg, "position");
    msg = expect_fail_header("", NULL, 0);
    CHECK_CONTAINS(msg, "not valid JSON");
    msg = expect_fail_header("{\"a\": 1,\n \"b\": tru}", NULL, 0);
    CHECK_CONTAINS(msg, "line 2");
    /* A NUL byte inside the header. */
    static const char nul[] = "{\"a\"\0: 1}";
    size_t len;
    uint8_t *bytes = stw_raw_bytes(nul, sizeof nul - 1, NULL, 0, &len);
    CHECK_CONTAINS(expect_fail_bytes(bytes, len), "not valid JSON");
    free(bytes);
}

static void test_rejects_invalid_utf8(void) {
    /* byte 0xff at header offset 3 = file offset 11 */
    const char *msg = expect_fail_header("{\"a\xff\": 1}", NULL, 0);
    CHECK_CONTAINS(msg, "not valid UTF-8");
    CHECK_CONTAINS(msg, "0xff");
    CHECK_CONTAINS(msg, "offset 11");
    CHECK_CONTAINS(expect_fail_header("{\"\xc0\xaf\": 1}", NULL, 0), "UTF-8");     /* overlong */
    CHECK_CONTAINS(expect_fail_header("{\"\xed\xa0\x80\": 1}", NULL, 0), "UTF-8"); /* surrogate */
    CHECK_CONTAINS(expect_fail_header("{\"\xf4\x90\x80\x80\": 1}", NULL, 0), "UTF-8"); /* > U+10FFFF */
    CHECK_CONTAINS(expect_fail_header("{} \xe2\x82", NULL, 0), "UTF-8");           /* cut short */
}

static void test_rejects_top_level_not_object(void) {
    CHECK_CONTAINS(expect_fail_header("[1, 2]", NULL, 0), "not a JSON object");
    CHECK_CONTAINS(expect_fail_header("\"str\"", NULL, 0), "not valid JSON");
}

/* Deep nesting must not exhaust the stack: the parser has a depth limit. */
static void test_rejects_deeply_nested_header(void) {
    size_t n = 1000000;
    char *h = malloc(n + 1);
    REQUIRE(h != NULL);
    memset(h, '[', n);
    h[n] = '\0';
    CHECK_CONTAINS(expect_fail_header(h, NULL, 0), "not valid JSON");
    h[0] = '{';
    memcpy(h + 1, "\"w\":", 4);
    CHECK_CONTAINS(expect_fail_header(h, NULL, 0), "not valid JSON");
    free(h);
}

static void test_rejects_duplicate_keys(void) {
    const char *h = "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                    "\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}";
    const char *msg = expect_fail_header(h, "abcd", 4);
    CHECK_CONTAINS(msg, "duplicate");
    CHECK_CONTAINS(msg, "w");
}

static void test_rejects_entry_not_object(void) {
    stw_writer *w = stw_new();
    stw_add_raw_entry(w, "layer.0.w", "[1, 2]");
    const char *msg = expect_fail_writer(w);
    CHECK_CONTAINS(msg, "tensor 'layer.0.w'");
    CHECK_CONTAINS(msg, "not an object");
}

static void test_rejects_missing_fields(void) {
    static const struct { const char *entry, *field; } cases[] = {
        {"{\"shape\":[1],\"data_offsets\":[0,4]}", "missing \"dtype\""},
        {"{\"dtype\":\"F32\",\"data_offsets\":[0,4]}", "missing \"shape\""},
        {"{\"dtype\":\"F32\",\"shape\":[1]}", "missing \"data_offsets\""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        stw_writer *w = stw_new();
        stw_add_raw_entry(w, "model.norm.weight", cases[i].entry);
        const char *msg = expect_fail_writer(w);
        CHECK_CONTAINS(msg, "tensor 'model.norm.weight'");
        CHECK_CONTAINS(msg, cases[i].field);
    }
}

static void test_rejects_wrong_field_types(void) {
    static const struct { const char *entry, *want; } cases[] = {
        {"{\"dtype\":32,\"shape\":[1],\"data_offsets\":[0,4]}", "\"dtype\" is an integer"},
        {"{\"dtype\":null,\"shape\":[1],\"data_offsets\":[0,4]}", "\"dtype\" is null"},
        {"{\"dtype\":\"F32\",\"shape\":\"1\",\"data_offsets\":[0,4]}", "\"shape\" is a string"},
        {"{\"dtype\":\"F32\",\"shape\":{},\"data_offsets\":[0,4]}", "\"shape\" is an object"},
        {"{\"dtype\":\"F32\",\"shape\":[\"1\"],\"data_offsets\":[0,4]}", "shape[0] is a string"},
        {"{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":{\"0\":4}}", "\"data_offsets\" is an object"},
        {"{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}", "\"data_offsets\" has 1 elements, not [begin, end]"},
        {"{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}", "has 3 elements"},
        {"{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,\"4\"]}", "data_offsets[1] is a string"},
        {"{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0.0,4]}", "data_offsets[0] is a real number"},
        {"{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[true,4]}", "data_offsets[0] is a boolean"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        stw_writer *w = stw_new();
        stw_add_raw_entry(w, "emb", cases[i].entry);
        const char *msg = expect_fail_writer(w);
        CHECK_CONTAINS(msg, "tensor 'emb'");
        CHECK_CONTAINS(msg, cases[i].want);
    }
}

static void test_rejects_bad_dims(void) {
    static const struct { const char *shape, *want; } cases[] = {
        {"[-1]", "shape[0] is negative (-1)"},
        {"[2, -3]", "shape[1] is negative (-3)"},
        {"[1.5]", "shape[0] is a real number, not an integer"},
        {"[2.0]", "shape[0] is a real number"},
        {"[1, 1, 1, 1, 1, 1]", "6 dimensions"},
        {"[4294967296, 4294967296]", "element count overflows at shape[1]"},
        {"[4294967296, 4294967296, 0]", "element count overflows"},
        {"[4611686018427387904]", "byte size of 4611686018427387904 elements overflows"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char entry[256];
        snprintf(entry, sizeof entry, "{\"dtype\":\"F32\",\"shape\":%s,\"data_offsets\":[0,4]}",
                 cases[i].shape);
        stw_writer *w = stw_new();
        stw_add(w, "ok.weight", "F32", 1, (const int64_t[]){1}, NULL);
        stw_add_raw_entry(w, "bad.weight", entry);
        const char *msg = expect_fail_writer(w);
        CHECK_CONTAINS(msg, "tensor 'bad.weight'");
        CHECK_CONTAINS(msg, cases[i].want);
    }
    /* A number too large for a 64-bit integer fails in the JSON parser. */
    stw_writer *w = stw_new();
    stw_add_raw_entry(w, "huge", "{\"dtype\":\"F32\",\"shape\":[99999999999999999999],\"data_offsets\":[0,4]}");
    CHECK_CONTAINS(expect_fail_writer(w), "not valid JSON");
}

static void test_rejects_bad_data_offsets(void) {
    const char *msg;
    stw_writer *w = stw_new();
    stw_add(w, "model.layers.0.self_attn.q_proj.weight", "F32", 2, (const int64_t[]){4, 2}, NULL);
    stw_set_offsets(w, "model.layers.0.self_attn.q_proj.weight", 16, 8);
    msg = expect_fail_writer(w);
    CHECK_CONTAINS(msg, "tensor 'model.layers.0.self_attn.q_proj.weight'");
    CHECK_CONTAINS(msg, "[16, 8)");
    CHECK_CONTAINS(msg, "begin after end");

    /* End past the data section: the data section holds 32 bytes. */
    size_t hlen;
    w = stw_new();
    stw_add_bytes(w, "model.layers.0.self_attn.q_proj.weight", "F32", 2, (const int64_t[]){32, 32},
                  NULL, 32);
    stw_set_offsets(w, "model.layers.0.self_attn.q_proj.weight", 0, 4096);
    free(stw_header(w, &hlen));
    char want[160];
    snprintf(want, sizeof want,
             "tensor 'model.layers.0.self_attn.q_proj.weight': data_offsets [0, 4096) end past the "
             "data section (size 32, header ends at offset %zu)",
             8 + hlen);
    msg = expect_fail_writer(w);
    CHECK_CONTAINS(msg, want);

    /* begin inside, end one past */
    w = stw_new();
    stw_add(w, "x", "F16", 1, (const int64_t[]){4}, NULL);
    stw_set_offsets(w, "x", 2, 10);
    CHECK_CONTAINS(expect_fail_writer(w), "end past the data section (size 8");

    /* offsets that would overflow begin + file position */
    w = stw_new();
    stw_add(w, "x", "F16", 1, (const int64_t[]){4}, NULL);
    stw_set_offsets(w, "x", 9223372036854775800ull, 9223372036854775807ull);
    CHECK_CONTAINS(expect_fail_writer(w), "end past the data section");

    w = stw_new();
    stw_add_raw_entry(w, "neg", "{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}");
    msg = expect_fail_writer(w);
    CHECK_CONTAINS(msg, "tensor 'neg'");
    CHECK_CONTAINS(msg, "data_offsets[0] is negative (-4)");
}

static void test_rejects_size_mismatch(void) {
    stw_writer *w = stw_new();
    stw_add_bytes(w, "lm_head.weight", "F32", 2, (const int64_t[]){3, 4}, NULL, 44);
    const char *msg = expect_fail_writer(w);
    CHECK_CONTAINS(msg, "tensor 'lm_head.weight'");
    CHECK_CONTAINS(msg, "[0, 44) hold 44 bytes but F32 shape of 12 elements needs 48");

    /* BF16 counted as 4 bytes per element would be wrong. */
    w = stw_new();
    stw_add_bytes(w, "bf", "BF16", 1, (const int64_t[]){4}, NULL, 16);
    CHECK_CONTAINS(expect_fail_writer(w), "BF16 shape of 4 elements needs 8");
}

static void test_rejects_unsupported_dtypes(void) {
    static const char *const dtypes[] = {"F64", "I8",  "U8",      "I16",     "U16",  "I32", "U32",
                                         "I64", "U64", "BOOL",    "F8_E4M3", "F8_E5M2", "f32",
                                         "",    "F32 ", "Q8_0"};
    for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++) {
        stw_writer *w = stw_new();
        stw_add(w, "model.embed_tokens.weight", dtypes[i], 2, (const int64_t[]){2, 2}, NULL);
        const char *msg = expect_fail_writer(w);
        char want[64];
        snprintf(want, sizeof want, "dtype '%s' is not supported", dtypes[i]);
        CHECK_CONTAINS(msg, "tensor 'model.embed_tokens.weight'");
        CHECK_CONTAINS(msg, want);
    }
}

static void test_rejects_bad_metadata(void) {
    stw_writer *w = stw_new();
    stw_add_raw_entry(w, "__metadata__", "[\"pt\"]");
    const char *msg = expect_fail_writer(w);
    CHECK_CONTAINS(msg, "\"__metadata__\" is an array, not an object");

    w = stw_new();
    stw_add_raw_entry(w, "__metadata__", "{\"format\":\"pt\",\"total\":12}");
    msg = expect_fail_writer(w);
    CHECK_CONTAINS(msg, "\"__metadata__\" key 'total' is an integer, not a string");

    w = stw_new();
    stw_add_raw_entry(w, "__metadata__", "{\"nested\":{\"a\":\"b\"}}");
    CHECK_CONTAINS(expect_fail_writer(w), "key 'nested' is an object");
}

static void test_rejects_overlong_name(void) {
    char name[400];
    memset(name, 'n', sizeof name - 1);
    name[sizeof name - 1] = '\0';
    stw_writer *w = stw_new();
    stw_add(w, name, "F32", 1, (const int64_t[]){1}, NULL);
    const char *msg = expect_fail_writer(w);
    CHECK_CONTAINS(msg, "399 bytes");
    CHECK_CONTAINS(msg, "nnnnnnnn");
}

/* Cutting a valid file anywhere before its end must fail, never crash. */
static void test_truncation_sweep_fails_cleanly(void) {
    stw_writer *w = small_model();
    size_t len;
    uint8_t *bytes = stw_serialize(w, &len);
    stw_free(w);
    char *path = test_tmp_path("trunc.safetensors");
    for (size_t n = 0; n < len; n++) {
        test_write_file(path, bytes, n);
        st_model *m = NULL;
        int rc = st_open_file(&m, path, &g_err);
        CHECK_MSG(rc == -1, "truncated to %zu of %zu bytes opened", n, len);
        if (rc == 0) st_close(m);
        else CHECK_CONTAINS(g_err.message, path);
    }
    test_write_file(path, bytes, len);
    st_model *m = open_ok(path);
    st_close(m);
    free(path);
    free(bytes);
}

static uint64_t rng_next(uint64_t *s) {
    /* xorshift64* */
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ull;
}

/* Random byte changes, mostly in the header: an open either fails with a
 * message or yields tensors that lie entirely inside the file. */
static void test_random_byte_flips_never_crash(void) {
    stw_writer *w = small_model();
    size_t len, hlen;
    uint8_t *orig = stw_serialize(w, &len);
    free(stw_header(w, &hlen));
    stw_free(w);
    uint8_t *bytes = malloc(len);
    REQUIRE(bytes != NULL);
    char *path = test_tmp_path("fuzz.safetensors");
    uint64_t seed = 0x9E3779B97F4A7C15ull;
    int n_ok = 0, n_fail = 0;
    for (int iter = 0; iter < 2000; iter++) {
        memcpy(bytes, orig, len);
        int flips = 1 + (int)(rng_next(&seed) % 4);
        for (int k = 0; k < flips; k++) {
            uint64_t r = rng_next(&seed);
            size_t pos = (r % 10 == 0) ? (size_t)(r >> 8) % len : (size_t)(r >> 8) % (8 + hlen);
            uint64_t kind = (r >> 40) % 4;
            uint8_t v = (uint8_t)(r >> 48);
            /* Prefer JSON-significant bytes so the parser sees near-valid input. */
            static const char tokens[] = "{}[],:\"0123456789-.e \\";
            if (kind == 0) v = (uint8_t)tokens[(r >> 48) % (sizeof tokens - 1)];
            else if (kind == 1) v = bytes[pos] ^ (uint8_t)(1u << ((r >> 48) % 8));
            bytes[pos] = v;
        }
        /* Sometimes also cut the file. */
        size_t n = len;
        if (rng_next(&seed) % 8 == 0) n = (size_t)(rng_next(&seed) % (len + 1));
        test_write_file(path, bytes, n);
        st_model *m = NULL;
        memset(&g_err, 0, sizeof g_err);
        int rc = st_open_file(&m, path, &g_err);
        if (rc != 0) {
            n_fail++;
            CHECK(m == NULL);
            CHECK_MSG(g_err.message[0] != '\0', "iteration %d: empty message", iter);
            continue;
        }
        n_ok++;
        const pdl_tensor_set *ts = st_tensors(m);
        unsigned sum = 0;
        for (size_t i = 0; i < ts->count; i++) {
            const pdl_tensor *t = &ts->items[i];
            CHECK(t->n_dims >= 0 && t->n_dims <= PDL_MAX_DIMS);
            CHECK(t->dtype == PDL_DTYPE_F32 || t->dtype == PDL_DTYPE_F16 ||
                  t->dtype == PDL_DTYPE_BF16);
            CHECK_MSG(t->file_offset + t->nbytes <= n, "iteration %d: tensor '%s' past the file",
                      iter, t->name);
            CHECK_EQ_INT(tensor_nelems(t) * (int64_t)dtype_block_bytes(t->dtype),
                         t->nbytes);
            for (size_t b = 0; b < t->nbytes; b++) sum += ((const uint8_t *)t->data)[b];
        }
        (void)sum;
        st_close(m);
    }
    /* Both outcomes happen, so the loop exercised the parser, not just one check. */
    CHECK(n_fail > 0);
    CHECK(n_ok > 0);
    free(path);
    free(bytes);
    free(orig);
}

/* ---------------------------------------------------------------------------
 * Folders
 * ------------------------------------------------------------------------- */

static void test_dir_with_single_file(void) {
    char *dir = test_make_dir("single");
    char *file = test_join(dir, "model.safetensors");
    stw_writer *w = small_model();
    REQUIRE(stw_write(w, file) == 0);
    stw_free(w);
    st_model *m = open_dir_ok(dir);
    CHECK_EQ_INT(st_tensors(m)->count, 4);
    CHECK(strcmp(tensor_set_find(st_tensors(m), "a.weight")->file, file) == 0);
    CHECK(st_metadata(m, "format") != NULL);
    st_close(m);
    free(file);
    free(dir);
}

static void test_dir_without_weights_fails(void) {
    char *dir = test_make_dir("noweights");
    const char *msg = expect_dir_fail(dir);
    CHECK_CONTAINS(msg, dir);
    CHECK_CONTAINS(msg, "neither model.safetensors.index.json nor model.safetensors was found");
    free(dir);
    char *missing = test_tmp_path("no-such-folder");
    CHECK_CONTAINS(expect_dir_fail(missing), "neither");
    free(missing);
}

/* Writes a two-shard folder: shard 1 holds embed + layer 0, shard 2 layer 1
 * + norm, with its own metadata. */
static char *make_sharded(const char *name) {
    char *dir = test_make_dir(name);
    char *s1 = test_join(dir, "model-00001-of-00002.safetensors");
    char *s2 = test_join(dir, "model-00002-of-00002.safetensors");
    stw_writer *w = stw_new();
    stw_metadata(w, "format", "pt");
    stw_add(w, "model.embed_tokens.weight", "F32", 2, (const int64_t[]){8, 4}, NULL);
    stw_add(w, "model.layers.0.w", "BF16", 2, (const int64_t[]){4, 4}, NULL);
    REQUIRE(stw_write(w, s1) == 0);
    stw_free(w);
    w = stw_new();
    stw_metadata(w, "format", "second");
    stw_add(w, "model.layers.1.w", "F16", 2, (const int64_t[]){4, 4}, NULL);
    stw_add(w, "model.norm.weight", "F32", 1, (const int64_t[]){4}, NULL);
    REQUIRE(stw_write(w, s2) == 0);
    stw_free(w);
    free(s1);
    free(s2);
    return dir;
}

static void write_index(const char *dir, size_t n, const char *const *names,
                        const char *const *shards) {
    char *p = test_join(dir, "model.safetensors.index.json");
    REQUIRE(stw_write_index(p, n, names, shards) == 0);
    free(p);
}

static void write_index_text(const char *dir, const char *text) {
    char *p = test_join(dir, "model.safetensors.index.json");
    test_write_file(p, text, strlen(text));
    free(p);
}

static const char *const k_names[] = {"model.embed_tokens.weight", "model.layers.0.w",
                                      "model.layers.1.w", "model.norm.weight"};
static const char *const k_shards[] = {
    "model-00001-of-00002.safetensors", "model-00001-of-00002.safetensors",
    "model-00002-of-00002.safetensors", "model-00002-of-00002.safetensors"};

static void test_sharded_dir_with_index(void) {
    char *dir = make_sharded("sharded");
    write_index(dir, 4, k_names, k_shards);
    /* A stray model.safetensors is ignored when the index exists. */
    char *stray = test_join(dir, "model.safetensors");
    test_write_file(stray, "junk", 4);
    st_model *m = open_dir_ok(dir);
    const pdl_tensor_set *ts = st_tensors(m);
    CHECK_EQ_INT(ts->count, 4);
    char *s1 = test_join(dir, k_shards[0]);
    char *s2 = test_join(dir, k_shards[2]);
    const pdl_tensor *e = tensor_set_find(ts, "model.embed_tokens.weight");
    REQUIRE(e != NULL);
    CHECK(strcmp(e->file, s1) == 0);
    check_shape(e, 2, (const int64_t[]){8, 4});
    const pdl_tensor *l1 = tensor_set_find(ts, "model.layers.1.w");
    REQUIRE(l1 != NULL);
    CHECK(strcmp(l1->file, s2) == 0);
    CHECK_EQ_INT(l1->dtype, PDL_DTYPE_F16);
    CHECK_EQ_INT(tensor_set_find(ts, "model.layers.0.w")->dtype, PDL_DTYPE_BF16);
    /* Data really comes from each shard. */
    uint8_t buf[32];
    read_at(s2, l1->file_offset, buf, l1->nbytes);
    CHECK(memcmp(buf, l1->data, l1->nbytes) == 0);
    /* Metadata is the first shard's. */
    CHECK(st_metadata(m, "format") && strcmp(st_metadata(m, "format"), "pt") == 0);
    st_close(m);
    free(s1);
    free(s2);
    free(stray);
    free(dir);
}

static void test_index_naming_missing_shard_fails(void) {
    char *dir = make_sharded("missing-shard");
    const char *shards[] = {k_shards[0], k_shards[1], "model-00003-of-00002.safetensors",
                            k_shards[3]};
    write_index(dir, 4, k_names, shards);
    const char *msg = expect_dir_fail(dir);
    CHECK_CONTAINS(msg, "model.safetensors.index.json");
    CHECK_CONTAINS(msg, "shard 'model-00003-of-00002.safetensors' is missing");
    free(dir);
}

static void test_index_tensor_absent_from_shard_fails(void) {
    char *dir = make_sharded("absent");
    const char *names[] = {k_names[0], k_names[1], k_names[2], k_names[3], "lm_head.weight"};
    const char *shards[] = {k_shards[0], k_shards[1], k_shards[2], k_shards[3], k_shards[3]};
    write_index(dir, 5, names, shards);
    const char *msg = expect_dir_fail(dir);
    CHECK_CONTAINS(msg, "tensor 'lm_head.weight' is listed in shard 'model-00002-of-00002.safetensors'");
    CHECK_CONTAINS(msg, "does not contain it");
    free(dir);
}

static void test_index_tensor_in_other_shard_fails(void) {
    char *dir = make_sharded("wrong-shard");
    const char *shards[] = {k_shards[0], k_shards[2], k_shards[2], k_shards[3]};
    write_index(dir, 4, k_names, shards);
    const char *msg = expect_dir_fail(dir);
    CHECK_CONTAINS(msg, "tensor 'model.layers.0.w' is listed in shard 'model-00002-of-00002");
    CHECK_CONTAINS(msg, "(it is in ");
    free(dir);
}

static void test_index_rejects_paths_as_shard_names(void) {
    static const char *const bad[] = {"../model-00001-of-00002.safetensors",
                                      "sub/model.safetensors", "/etc/passwd", "..", "",
                                      "a\\b.safetensors"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char name[32];
        snprintf(name, sizeof name, "badname%zu", i);
        char *dir = make_sharded(name);
        const char *shards[] = {k_shards[0], k_shards[1], k_shards[2], bad[i]};
        write_index(dir, 4, k_names, shards);
        const char *msg = expect_dir_fail(dir);
        CHECK_CONTAINS(msg, "tensor 'model.norm.weight'");
        CHECK_CONTAINS(msg, "not a plain file name");
        free(dir);
    }
}

static void test_index_malformed_fails(void) {
    static const struct { const char *text, *want; } cases[] = {
        {"{\"weight_map\": {", "not valid JSON"},
        {"[]", "top level is an array, not an object"},
        {"{\"metadata\": {}}", "missing \"weight_map\""},
        {"{\"weight_map\": []}", "\"weight_map\" is an array, not an object"},
        {"{\"weight_map\": {}}", "\"weight_map\" is empty"},
        {"{\"weight_map\": {\"model.norm.weight\": 3}}", "tensor 'model.norm.weight' is an integer"},
        {"{\"metadata\": 5, \"weight_map\": {\"a\": \"b\"}}", "\"metadata\" is an integer"},
        {"{\"weight_map\": {\"a\": \"x\", \"a\": \"y\"}}", "duplicate"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char name[32];
        snprintf(name, sizeof name, "badindex%zu", i);
        char *dir = make_sharded(name);
        write_index_text(dir, cases[i].text);
        const char *msg = expect_dir_fail(dir);
        CHECK_CONTAINS(msg, "model.safetensors.index.json");
        CHECK_CONTAINS(msg, cases[i].want);
        free(dir);
    }
}

static void test_duplicate_names_across_shards_fail(void) {
    char *dir = make_sharded("dup");
    /* Rewrite shard 2 so it also holds the embedding. */
    char *s2 = test_join(dir, k_shards[2]);
    stw_writer *w = stw_new();
    stw_add(w, "model.layers.1.w", "F16", 2, (const int64_t[]){4, 4}, NULL);
    stw_add(w, "model.norm.weight", "F32", 1, (const int64_t[]){4}, NULL);
    stw_add(w, "model.embed_tokens.weight", "F32", 2, (const int64_t[]){8, 4}, NULL);
    REQUIRE(stw_write(w, s2) == 0);
    stw_free(w);
    write_index(dir, 4, k_names, k_shards);
    const char *msg = expect_dir_fail(dir);
    CHECK_CONTAINS(msg, "duplicate tensor 'model.embed_tokens.weight'");
    CHECK_CONTAINS(msg, s2);
    free(s2);
    free(dir);
}

static void test_corrupt_shard_error_names_the_shard(void) {
    char *dir = make_sharded("corrupt-shard");
    char *s2 = test_join(dir, k_shards[2]);
    stw_writer *w = stw_new();
    stw_add(w, "model.layers.1.w", "F64", 2, (const int64_t[]){4, 4}, NULL);
    stw_add(w, "model.norm.weight", "F32", 1, (const int64_t[]){4}, NULL);
    REQUIRE(stw_write(w, s2) == 0);
    stw_free(w);
    write_index(dir, 4, k_names, k_shards);
    const char *msg = expect_dir_fail(dir);
    CHECK_CONTAINS(msg, s2);
    CHECK_CONTAINS(msg, "tensor 'model.layers.1.w': dtype 'F64' is not supported");
    free(s2);
    free(dir);
}

/* ---------------------------------------------------------------------------
 * The real models in the shared data folder
 * ------------------------------------------------------------------------- */

static uint64_t header_end_of(const char *path) {
    uint8_t b[8];
    read_at(path, 0, b, 8);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = (n << 8) | b[i];
    return 8 + n;
}

static void check_all_inside(const st_model *m) {
    const pdl_tensor_set *ts = st_tensors(m);
    for (size_t i = 0; i < ts->count; i++) {
        const pdl_tensor *t = &ts->items[i];
        struct stat st;
        REQUIRE(stat(t->file, &st) == 0);
        CHECK_MSG(t->file_offset + t->nbytes <= (uint64_t)st.st_size, "%s", t->name);
        CHECK_MSG((uintptr_t)t->data % 4 == 0, "%s: F32 data not 4-byte aligned", t->name);
    }
}

static void test_real_stories260k_hf(void) {
    char *dir = test_data_path("models/stories260K-hf");
    st_model *m = open_dir_ok(dir);
    const pdl_tensor_set *ts = st_tensors(m);
    /* embed + 5 layers x 9 + final norm; the LM head is tied, so absent. */
    CHECK_EQ_INT(ts->count, 47);
    const pdl_tensor *e = tensor_set_find(ts, "model.embed_tokens.weight");
    REQUIRE(e != NULL);
    CHECK_EQ_INT(e->dtype, PDL_DTYPE_F32);
    check_shape(e, 2, (const int64_t[]){512, 64});
    CHECK_EQ_INT(e->nbytes, 512 * 64 * 4);
    CHECK_EQ_INT(e->file_offset, header_end_of(e->file)); /* data_offsets [0, ...) */
    float buf[64];
    read_at(e->file, e->file_offset, buf, sizeof buf);
    CHECK(memcmp(buf, e->data, sizeof buf) == 0);
    check_shape(tensor_set_find(ts, "model.layers.0.mlp.down_proj.weight"), 2,
                (const int64_t[]){64, 172});
    check_shape(tensor_set_find(ts, "model.norm.weight"), 1, (const int64_t[]){64});
    CHECK(tensor_set_find(ts, "model.layers.4.self_attn.v_proj.weight") != NULL);
    CHECK(tensor_set_find(ts, "model.layers.5.self_attn.v_proj.weight") == NULL);
    CHECK(tensor_set_find(ts, "lm_head.weight") == NULL);
    for (size_t i = 0; i < ts->count; i++) CHECK_EQ_INT(ts->items[i].dtype, PDL_DTYPE_F32);
    CHECK(st_metadata(m, "format") && strcmp(st_metadata(m, "format"), "pt") == 0);
    check_all_inside(m);
    st_close(m);

    /* The same file opened directly. */
    char *file = test_join(dir, "model.safetensors");
    m = open_ok(file);
    CHECK_EQ_INT(st_tensors(m)->count, 47);
    st_close(m);
    free(file);
    free(dir);
}

static void test_real_qwen3_tiny_hf(void) {
    char *dir = test_data_path("models/qwen3-tiny/hf");
    st_model *m = open_dir_ok(dir);
    const pdl_tensor_set *ts = st_tensors(m);
    CHECK_EQ_INT(ts->count, 35);
    const pdl_tensor *e = tensor_set_find(ts, "model.embed_tokens.weight");
    REQUIRE(e != NULL);
    CHECK_EQ_INT(e->dtype, PDL_DTYPE_F32);
    check_shape(e, 2, (const int64_t[]){1536, 128});
    const pdl_tensor *q = tensor_set_find(ts, "model.layers.0.self_attn.q_proj.weight");
    REQUIRE(q != NULL);
    check_shape(q, 2, (const int64_t[]){256, 128});
    const pdl_tensor *qn = tensor_set_find(ts, "model.layers.0.self_attn.q_norm.weight");
    REQUIRE(qn != NULL);
    check_shape(qn, 1, (const int64_t[]){64});
    CHECK(st_metadata(m, "format") != NULL);
    check_all_inside(m);
    st_close(m);
    free(dir);
}

static void test_real_hf_folders_all_open(void) {
    static const struct { const char *dir; size_t count; } models[] = {
        {"models/cohere-tiny/hf", 18},  {"models/gemma2-softcap-tiny/hf", 46},
        {"models/gemma2-tiny/hf", 46},  {"models/granite-tiny/hf", 29},
        {"models/llama31-tiny/hf", 30}, {"models/qwen2-tiny/hf", 26},
    };
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
        char *dir = test_data_path(models[i].dir);
        st_model *m = open_dir_ok(dir);
        CHECK_MSG(st_tensors(m)->count == models[i].count, "%s: %zu tensors", models[i].dir,
                  st_tensors(m)->count);
        check_all_inside(m);
        st_close(m);
        free(dir);
    }
}

int main(void) {
    RUN(test_roundtrip_f32_f16_bf16);
    RUN(test_shape_order_is_outermost_first);
    RUN(test_scalar_and_empty_tensors);
    RUN(test_empty_header_object_has_no_tensors);
    RUN(test_metadata_lookup);
    RUN(test_unknown_entry_keys_are_ignored);
    RUN(test_rejects_file_shorter_than_8_bytes);
    RUN(test_rejects_header_length_past_file);
    RUN(test_rejects_header_length_over_100mb);
    RUN(test_rejects_invalid_json);
    RUN(test_rejects_overlapping_tensors);
    RUN(test_rejects_invalid_utf8);
    RUN(test_rejects_top_level_not_object);
    RUN(test_rejects_deeply_nested_header);
    RUN(test_rejects_duplicate_keys);
    RUN(test_rejects_entry_not_object);
    RUN(test_rejects_missing_fields);
    RUN(test_rejects_wrong_field_types);
    RUN(test_rejects_bad_dims);
    RUN(test_rejects_bad_data_offsets);
    RUN(test_rejects_size_mismatch);
    RUN(test_rejects_unsupported_dtypes);
    RUN(test_rejects_bad_metadata);
    RUN(test_rejects_overlong_name);
    RUN(test_truncation_sweep_fails_cleanly);
    RUN(test_random_byte_flips_never_crash);
    RUN(test_dir_with_single_file);
    RUN(test_dir_without_weights_fails);
    RUN(test_sharded_dir_with_index);
    RUN(test_index_naming_missing_shard_fails);
    RUN(test_index_tensor_absent_from_shard_fails);
    RUN(test_index_tensor_in_other_shard_fails);
    RUN(test_index_rejects_paths_as_shard_names);
    RUN(test_index_malformed_fails);
    RUN(test_duplicate_names_across_shards_fail);
    RUN(test_corrupt_shard_error_names_the_shard);
    RUN(test_real_stories260k_hf);
    RUN(test_real_qwen3_tiny_hf);
    RUN(test_real_hf_folders_all_open);
    return test_summary();
}
