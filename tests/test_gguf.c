/*
 * test_gguf.c - the GGUF reader (src/format/gguf.c).
 *
 * Every metadata type and array type round-trips; tensor infos come back with
 * reversed shapes, the right dtype, absolute aligned offsets and data pointing
 * at the written bytes; v2 and v3 open, other versions do not; every kind of
 * malformed file (bad magic, absurd counts and lengths, truncation, unknown
 * types, invalid UTF-8, bad dims, unsupported tensor types, misaligned or
 * out-of-file data, duplicates, bad alignment) fails with one message naming
 * the file, the offset and the key or tensor at fault; truncation at every
 * length and random corruption never crash. The real files in the shared data
 * folder open with the metadata and tensors they are known to have.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <time.h>

#include "format/gguf.h"
#include "support/gguf_writer.h"
#include "test_util.h"

static pdl_error g_err;

/* ---------------------------------------------------------------------------
 * Helpers
 * ------------------------------------------------------------------------- */

static void put_u32(uint8_t *b, size_t at, uint32_t v) {
    for (int i = 0; i < 4; i++) b[at + i] = (uint8_t)(v >> (8 * i));
}

static void put_u64(uint8_t *b, size_t at, uint64_t v) {
    for (int i = 0; i < 8; i++) b[at + i] = (uint8_t)(v >> (8 * i));
}

/* Writes bytes to the scratch file and opens it; *path gets the path. */
static int open_bytes(gguf_file **f, const uint8_t *bytes, size_t len, char **path) {
    *path = test_tmp_path("t.gguf");
    test_write_file(*path, bytes, len);
    memset(&g_err, 0, sizeof g_err);
    return gguf_open(f, *path, &g_err);
}

/* Opens the writer's file; REQUIREs success. Caller closes. */
static gguf_file *open_writer(gguf_writer *w) {
    size_t n;
    const uint8_t *b = gguf_writer_bytes(w, &n);
    char *path;
    gguf_file *f = NULL;
    int rc = open_bytes(&f, b, n, &path);
    free(path);
    REQUIRE_MSG(rc == 0, "open failed: %s", g_err.message);
    REQUIRE(f != NULL);
    return f;
}

/* Opens bytes that must be rejected; returns the message, which is checked
 * to name the file and an offset. */
static const char *expect_fail(const uint8_t *bytes, size_t len) {
    char *path;
    gguf_file *f = (gguf_file *)&g_err; /* must be reset to NULL */
    int rc = open_bytes(&f, bytes, len, &path);
    if (rc == 0) gguf_close(f);
    REQUIRE_MSG(rc == -1, "opening a corrupt file succeeded (%zu bytes)", len);
    CHECK(f == NULL);
    CHECK_CONTAINS(g_err.message, path);
    CHECK_CONTAINS(g_err.message, "offset");
    free(path);
    return g_err.message;
}

static const char *expect_fail_writer(gguf_writer *w) {
    size_t n;
    const uint8_t *b = gguf_writer_bytes(w, &n);
    return expect_fail(b, n);
}

/* A small valid file with a bit of everything; the last tensor's data ends
 * at the last byte of the file. */
static gguf_writer *small_writer(void) {
    gguf_writer *w = gguf_writer_new(3);
    gguf_writer_add_str(w, "general.architecture", "llama");
    gguf_writer_add_u32(w, "llama.block_count", 2);
    gguf_writer_add_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
    gguf_writer_add_bool(w, "tokenizer.ggml.add_bos_token", true);
    const char *toks[] = {"<unk>", "<s>", "</s>", "h\xC3\xA9", "\xE2\x96\x81the"};
    gguf_writer_add_str_arr(w, "tokenizer.ggml.tokens", toks, 5);
    float scores[] = {0, -1, -2, -3.5f, -4};
    gguf_writer_add_arr(w, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, scores, 5);
    float a[8];
    for (int i = 0; i < 8; i++) a[i] = (float)i + 0.5f;
    gguf_writer_add_tensor_f32(w, "a.weight", 2, (const int64_t[]){2, 4}, a);
    uint8_t h[6] = {1, 2, 3, 4, 5, 6};
    gguf_writer_add_tensor(w, "b.weight", GW_GGML_F16, 1, (const uint64_t[]){3}, h, 6);
    uint8_t q[34];
    for (int i = 0; i < 34; i++) q[i] = (uint8_t)(i * 7);
    gguf_writer_add_tensor(w, "c.weight", GW_GGML_Q8_0, 1, (const uint64_t[]){32}, q, 34);
    return w;
}

/* Walks everything an opened file exposes, so ASan sees any bad pointer. */
static uint64_t touch_everything(const gguf_file *f, size_t file_size) {
    uint64_t sum = 0;
    for (size_t i = 0; i < gguf_kv_count(f); i++) {
        const gguf_kv *kv = gguf_kv_at(f, i);
        for (uint64_t k = 0; k < kv->key.len; k++) sum += (uint8_t)kv->key.ptr[k];
        if (kv->type == GGUF_TYPE_STRING) {
            for (uint64_t k = 0; k < kv->v.str.len; k++) sum += (uint8_t)kv->v.str.ptr[k];
        } else if (kv->type == GGUF_TYPE_ARRAY) {
            const gguf_array *a = &kv->v.arr;
            for (uint64_t e = 0; e < a->count; e++) {
                if (a->elem_type == GGUF_TYPE_STRING) {
                    for (uint64_t k = 0; k < a->strings[e].len; k++)
                        sum += (uint8_t)a->strings[e].ptr[k];
                } else {
                    sum += (uint64_t)gguf_arr_i64(a, e);
                    sum += (uint64_t)(gguf_arr_f64(a, e) != 0);
                }
            }
        }
    }
    const pdl_tensor_set *ts = gguf_tensors(f);
    for (size_t i = 0; i < ts->count; i++) {
        const pdl_tensor *t = &ts->items[i];
        CHECK(t->file_offset + t->nbytes <= file_size);
        CHECK(t->n_dims >= 1 && t->n_dims <= PDL_GGUF_MAX_DIMS);
        CHECK(strlen(t->name) < PDL_TENSOR_NAME_MAX);
        const uint8_t *d = t->data;
        for (size_t k = 0; k < t->nbytes; k++) sum += d[k];
    }
    return sum;
}

/* ---------------------------------------------------------------------------
 * Valid files
 * ------------------------------------------------------------------------- */

static void test_scalar_types_round_trip(void) {
    gguf_writer *w = gguf_writer_new(3);
    gguf_writer_add_u8(w, "u8", 255);
    gguf_writer_add_i8(w, "i8", -128);
    gguf_writer_add_u16(w, "u16", 65535);
    gguf_writer_add_i16(w, "i16", -32768);
    gguf_writer_add_u32(w, "u32", 4294967295u);
    gguf_writer_add_i32(w, "i32", INT32_MIN);
    gguf_writer_add_f32(w, "f32", 3.25f);
    gguf_writer_add_bool(w, "bool.t", true);
    gguf_writer_add_bool(w, "bool.f", false);
    gguf_writer_add_str(w, "str", "h\xC3\xA9llo \xE2\x9C\x93 \xF0\x9F\x98\x80");
    gguf_writer_add_str(w, "str.empty", "");
    gguf_writer_add_u64(w, "u64", UINT64_MAX);
    gguf_writer_add_i64(w, "i64", INT64_MIN);
    gguf_writer_add_f64(w, "f64", -1.5e300);
    gguf_file *f = open_writer(w);

    CHECK_EQ_INT(gguf_version(f), 3);
    CHECK_EQ_INT(gguf_alignment(f), 32);
    CHECK_EQ_INT(gguf_kv_count(f), 14);
    CHECK_EQ_INT(gguf_tensors(f)->count, 0);
    const gguf_kv *kv;
    REQUIRE((kv = gguf_find_kv(f, "u8")) != NULL);
    CHECK(kv->type == GGUF_TYPE_UINT8 && kv->v.u64 == 255);
    REQUIRE((kv = gguf_find_kv(f, "i8")) != NULL);
    CHECK(kv->type == GGUF_TYPE_INT8 && kv->v.i64 == -128);
    REQUIRE((kv = gguf_find_kv(f, "u16")) != NULL);
    CHECK(kv->type == GGUF_TYPE_UINT16 && kv->v.u64 == 65535);
    REQUIRE((kv = gguf_find_kv(f, "i16")) != NULL);
    CHECK(kv->type == GGUF_TYPE_INT16 && kv->v.i64 == -32768);
    REQUIRE((kv = gguf_find_kv(f, "u32")) != NULL);
    CHECK(kv->type == GGUF_TYPE_UINT32 && kv->v.u64 == 4294967295u);
    REQUIRE((kv = gguf_find_kv(f, "i32")) != NULL);
    CHECK(kv->type == GGUF_TYPE_INT32 && kv->v.i64 == INT32_MIN);
    REQUIRE((kv = gguf_find_kv(f, "f32")) != NULL);
    CHECK(kv->type == GGUF_TYPE_FLOAT32 && kv->v.f64 == 3.25);
    REQUIRE((kv = gguf_find_kv(f, "bool.t")) != NULL);
    CHECK(kv->type == GGUF_TYPE_BOOL && kv->v.b == true);
    REQUIRE((kv = gguf_find_kv(f, "bool.f")) != NULL);
    CHECK(kv->type == GGUF_TYPE_BOOL && kv->v.b == false);
    REQUIRE((kv = gguf_find_kv(f, "str")) != NULL);
    CHECK(kv->type == GGUF_TYPE_STRING);
    const char *want = "h\xC3\xA9llo \xE2\x9C\x93 \xF0\x9F\x98\x80";
    CHECK(kv->v.str.len == strlen(want) && memcmp(kv->v.str.ptr, want, strlen(want)) == 0);
    REQUIRE((kv = gguf_find_kv(f, "str.empty")) != NULL);
    CHECK(kv->type == GGUF_TYPE_STRING && kv->v.str.len == 0);
    REQUIRE((kv = gguf_find_kv(f, "u64")) != NULL);
    CHECK(kv->type == GGUF_TYPE_UINT64 && kv->v.u64 == UINT64_MAX);
    REQUIRE((kv = gguf_find_kv(f, "i64")) != NULL);
    CHECK(kv->type == GGUF_TYPE_INT64 && kv->v.i64 == INT64_MIN);
    REQUIRE((kv = gguf_find_kv(f, "f64")) != NULL);
    CHECK(kv->type == GGUF_TYPE_FLOAT64 && kv->v.f64 == -1.5e300);

    /* Order and offsets are the file's. */
    for (size_t i = 0; i < gguf_kv_count(f); i++)
        CHECK_EQ_INT(gguf_kv_at(f, i)->offset, gguf_writer_kv_offset(w, i));
    CHECK(gguf_kv_at(f, 0) == gguf_find_kv(f, "u8"));
    CHECK(gguf_kv_at(f, 14) == NULL);
    CHECK(gguf_find_kv(f, "missing") == NULL);
    CHECK(gguf_find_kv(f, "u") == NULL);
    CHECK(gguf_find_kv(f, "u88") == NULL);
    CHECK(strcmp(gguf_type_name(GGUF_TYPE_FLOAT64), "FLOAT64") == 0);
    gguf_close(f);
    gguf_writer_free(w);
}

static void test_array_types_round_trip(void) {
    gguf_writer *w = gguf_writer_new(3);
    uint8_t u8[] = {0, 1, 255};
    int8_t i8[] = {-128, 0, 127};
    uint16_t u16[] = {0, 65535, 7};
    int16_t i16[] = {-32768, 32767, -1};
    uint32_t u32[] = {0, 4294967295u, 42};
    int32_t i32[] = {INT32_MIN, INT32_MAX, -5};
    float f32[] = {-0.5f, 1e-30f, 3e38f};
    bool bl[] = {true, false, true};
    uint64_t u64[] = {0, 1ull << 40, 12345};
    int64_t i64[] = {INT64_MIN, INT64_MAX, -3};
    double f64[] = {-1e300, 0.125, 2.5};
    gguf_writer_add_arr(w, "a.u8", GGUF_TYPE_UINT8, u8, 3);
    gguf_writer_add_arr(w, "a.i8", GGUF_TYPE_INT8, i8, 3);
    gguf_writer_add_arr(w, "a.u16", GGUF_TYPE_UINT16, u16, 3);
    gguf_writer_add_arr(w, "a.i16", GGUF_TYPE_INT16, i16, 3);
    gguf_writer_add_arr(w, "a.u32", GGUF_TYPE_UINT32, u32, 3);
    gguf_writer_add_arr(w, "a.i32", GGUF_TYPE_INT32, i32, 3);
    gguf_writer_add_arr(w, "a.f32", GGUF_TYPE_FLOAT32, f32, 3);
    gguf_writer_add_arr(w, "a.bool", GGUF_TYPE_BOOL, bl, 3);
    gguf_writer_add_arr(w, "a.u64", GGUF_TYPE_UINT64, u64, 3);
    gguf_writer_add_arr(w, "a.i64", GGUF_TYPE_INT64, i64, 3);
    gguf_writer_add_arr(w, "a.f64", GGUF_TYPE_FLOAT64, f64, 3);
    const char *strs[] = {"", "a b", "\xE2\x96\x81\xE4\xB8\x96\xE7\x95\x8C", "<0x0A>"};
    gguf_writer_add_str_arr(w, "a.str", strs, 4);
    gguf_writer_add_arr(w, "a.empty", GGUF_TYPE_UINT32, NULL, 0);
    gguf_writer_add_str_arr(w, "a.empty_str", NULL, 0);
    gguf_file *f = open_writer(w);

    gguf_array a;
#define ARR(key, et)                                                    \
    do {                                                                \
        memset(&a, 0, sizeof a);                                        \
        REQUIRE(gguf_get_arr(f, key, &a, &g_err) == 1);                  \
        CHECK(a.elem_type == et);                                       \
    } while (0)
    ARR("a.u8", GGUF_TYPE_UINT8);
    CHECK_EQ_INT(a.count, 3);
    for (int i = 0; i < 3; i++) CHECK_EQ_INT(gguf_arr_i64(&a, i), u8[i]);
    ARR("a.i8", GGUF_TYPE_INT8);
    for (int i = 0; i < 3; i++) CHECK_EQ_INT(gguf_arr_i64(&a, i), i8[i]);
    ARR("a.u16", GGUF_TYPE_UINT16);
    for (int i = 0; i < 3; i++) CHECK_EQ_INT(gguf_arr_i64(&a, i), u16[i]);
    ARR("a.i16", GGUF_TYPE_INT16);
    for (int i = 0; i < 3; i++) CHECK_EQ_INT(gguf_arr_i64(&a, i), i16[i]);
    ARR("a.u32", GGUF_TYPE_UINT32);
    for (int i = 0; i < 3; i++) CHECK_EQ_INT(gguf_arr_i64(&a, i), u32[i]);
    ARR("a.i32", GGUF_TYPE_INT32);
    for (int i = 0; i < 3; i++) {
        CHECK_EQ_INT(gguf_arr_i64(&a, i), i32[i]);
        CHECK(gguf_arr_f64(&a, i) == (double)i32[i]);
    }
    ARR("a.f32", GGUF_TYPE_FLOAT32);
    for (int i = 0; i < 3; i++) CHECK(gguf_arr_f64(&a, i) == (double)f32[i]);
    CHECK_EQ_INT(gguf_arr_i64(&a, 0), 0); /* -0.5 truncates toward zero */
    ARR("a.bool", GGUF_TYPE_BOOL);
    for (int i = 0; i < 3; i++) CHECK_EQ_INT(gguf_arr_i64(&a, i), bl[i]);
    ARR("a.u64", GGUF_TYPE_UINT64);
    for (int i = 0; i < 3; i++) CHECK(gguf_arr_i64(&a, i) == (int64_t)u64[i]);
    ARR("a.i64", GGUF_TYPE_INT64);
    for (int i = 0; i < 3; i++) CHECK(gguf_arr_i64(&a, i) == i64[i]);
    ARR("a.f64", GGUF_TYPE_FLOAT64);
    for (int i = 0; i < 3; i++) CHECK(gguf_arr_f64(&a, i) == f64[i]);
    CHECK_EQ_INT(gguf_arr_i64(&a, 3), 0); /* out of range reads nothing */
    ARR("a.str", GGUF_TYPE_STRING);
    REQUIRE(a.count == 4 && a.strings != NULL);
    for (int i = 0; i < 4; i++) {
        CHECK_EQ_INT(a.strings[i].len, strlen(strs[i]));
        CHECK(memcmp(a.strings[i].ptr, strs[i], strlen(strs[i])) == 0);
    }
    ARR("a.empty", GGUF_TYPE_UINT32);
    CHECK_EQ_INT(a.count, 0);
    ARR("a.empty_str", GGUF_TYPE_STRING);
    CHECK_EQ_INT(a.count, 0);
#undef ARR
    gguf_close(f);
    gguf_writer_free(w);
}

static void test_typed_getters_convert_and_report(void) {
    gguf_writer *w = gguf_writer_new(3);
    gguf_writer_add_u8(w, "small", 7);
    gguf_writer_add_u64(w, "big", 1ull << 33);
    gguf_writer_add_i32(w, "neg", -3);
    gguf_writer_add_i64(w, "i64.fits", -2000000000);
    gguf_writer_add_u32(w, "u32.max", 4294967295u);
    gguf_writer_add_f64(w, "f64", 0.25);
    gguf_writer_add_f64(w, "f64.huge", 1e300);
    gguf_writer_add_f32(w, "f32", -2.5f);
    gguf_writer_add_bool(w, "flag", true);
    gguf_writer_add_str(w, "name", "tiny");
    gguf_writer_add_strn(w, "nul", "a\0b", 3);
    const char *s[] = {"x"};
    gguf_writer_add_str_arr(w, "arr", s, 1);
    gguf_file *f = open_writer(w);

    uint32_t u = 99;
    int32_t i = 99;
    float x = 99;
    bool b = false;
    const char *str = NULL;
    gguf_array arr;

    CHECK_EQ_INT(gguf_get_u32(f, "small", &u, &g_err), 1);
    CHECK_EQ_INT(u, 7);
    CHECK_EQ_INT(gguf_get_u32(f, "u32.max", &u, &g_err), 1);
    CHECK(u == 4294967295u);
    CHECK_EQ_INT(gguf_get_i32(f, "neg", &i, &g_err), 1);
    CHECK_EQ_INT(i, -3);
    CHECK_EQ_INT(gguf_get_i32(f, "i64.fits", &i, &g_err), 1);
    CHECK_EQ_INT(i, -2000000000);
    CHECK_EQ_INT(gguf_get_i32(f, "small", &i, &g_err), 1);
    CHECK_EQ_INT(i, 7);
    CHECK_EQ_INT(gguf_get_f32(f, "f64", &x, &g_err), 1);
    CHECK(x == 0.25f);
    CHECK_EQ_INT(gguf_get_f32(f, "f32", &x, &g_err), 1);
    CHECK(x == -2.5f);
    CHECK_EQ_INT(gguf_get_f32(f, "neg", &x, &g_err), 1);
    CHECK(x == -3.0f);
    CHECK_EQ_INT(gguf_get_bool(f, "flag", &b, &g_err), 1);
    CHECK(b == true);
    CHECK_EQ_INT(gguf_get_str(f, "name", &str, &g_err), 1);
    REQUIRE(str != NULL);
    CHECK(strcmp(str, "tiny") == 0);
    CHECK(str != gguf_find_kv(f, "name")->v.str.ptr); /* a NUL-terminated copy */
    CHECK_EQ_INT(gguf_get_arr(f, "arr", &arr, &g_err), 1);
    CHECK_EQ_INT(arr.count, 1);

    /* Absent: 0, out untouched. */
    u = 5;
    CHECK_EQ_INT(gguf_get_u32(f, "absent", &u, &g_err), 0);
    CHECK_EQ_INT(u, 5);
    str = "keep";
    CHECK_EQ_INT(gguf_get_str(f, "absent", &str, &g_err), 0);
    CHECK(strcmp(str, "keep") == 0);
    CHECK_EQ_INT(gguf_get_bool(f, "absent", &b, &g_err), 0);
    CHECK_EQ_INT(gguf_get_f32(f, "absent", &x, &g_err), 0);
    CHECK_EQ_INT(gguf_get_i32(f, "absent", &i, &g_err), 0);
    CHECK_EQ_INT(gguf_get_arr(f, "absent", &arr, &g_err), 0);

    /* Unusable: -1, the message names the key, its type and offset. */
    u = 5;
    CHECK_EQ_INT(gguf_get_u32(f, "neg", &u, &g_err), -1);
    CHECK_EQ_INT(u, 5);
    CHECK_CONTAINS(g_err.message, "'neg'");
    CHECK_CONTAINS(g_err.message, "INT32");
    CHECK_CONTAINS(g_err.message, "offset");
    CHECK_CONTAINS(g_err.message, "t.gguf");
    CHECK_EQ_INT(gguf_get_u32(f, "big", &u, &g_err), -1);
    CHECK_CONTAINS(g_err.message, "'big'");
    CHECK_CONTAINS(g_err.message, "UINT64");
    CHECK_EQ_INT(gguf_get_i32(f, "u32.max", &i, &g_err), -1);
    CHECK_CONTAINS(g_err.message, "'u32.max'");
    CHECK_EQ_INT(gguf_get_u32(f, "name", &u, &g_err), -1);
    CHECK_CONTAINS(g_err.message, "STRING");
    CHECK_EQ_INT(gguf_get_u32(f, "f32", &u, &g_err), -1);
    CHECK_CONTAINS(g_err.message, "FLOAT32");
    CHECK_EQ_INT(gguf_get_f32(f, "f64.huge", &x, &g_err), -1);
    CHECK_CONTAINS(g_err.message, "'f64.huge'");
    CHECK_EQ_INT(gguf_get_f32(f, "name", &x, &g_err), -1);
    CHECK_EQ_INT(gguf_get_bool(f, "small", &b, &g_err), -1);
    CHECK_CONTAINS(g_err.message, "UINT8");
    CHECK_EQ_INT(gguf_get_str(f, "small", &str, &g_err), -1);
    CHECK_CONTAINS(g_err.message, "'small'");
    CHECK_EQ_INT(gguf_get_str(f, "nul", &str, &g_err), -1);
    CHECK_CONTAINS(g_err.message, "NUL");
    CHECK_EQ_INT(gguf_get_arr(f, "name", &arr, &g_err), -1);
    CHECK_CONTAINS(g_err.message, "'name'");
    char want[64];
    snprintf(want, sizeof want, "offset %zu", gguf_writer_kv_offset(w, 9));
    CHECK_CONTAINS(g_err.message, want);
    gguf_close(f);
    gguf_writer_free(w);
}

static void test_tensor_infos_shapes_dtypes_data(void) {
    gguf_writer *w = gguf_writer_new(3);
    gguf_writer_add_str(w, "general.architecture", "test");
    float m[12];
    for (int i = 0; i < 12; i++) m[i] = (float)i * 0.5f - 1.0f;
    gguf_writer_add_tensor_f32(w, "m.f32", 2, (const int64_t[]){3, 4}, m);
    uint16_t h[5] = {0x3C00, 0xC000, 0, 1, 0x7BFF};
    gguf_writer_add_tensor(w, "v.f16", GW_GGML_F16, 1, (const uint64_t[]){5}, h, sizeof h);
    uint16_t bf[24];
    for (int i = 0; i < 24; i++) bf[i] = (uint16_t)(0x3F80 + i);
    gguf_writer_add_tensor(w, "t.bf16", GW_GGML_BF16, 3, (const uint64_t[]){4, 3, 2}, bf, sizeof bf);
    uint8_t q[2 * 2 * 34];
    for (size_t i = 0; i < sizeof q; i++) q[i] = (uint8_t)(i * 13 + 1);
    uint64_t qne[2] = {64, 2};
    CHECK_EQ_INT(gguf_writer_tensor_nbytes(GW_GGML_Q8_0, 2, qne), sizeof q);
    gguf_writer_add_tensor(w, "q.q8_0", GW_GGML_Q8_0, 2, qne, q, sizeof q);
    float four[2 * 3 * 1 * 5];
    for (int i = 0; i < 30; i++) four[i] = (float)-i;
    gguf_writer_add_tensor_f32(w, "x.4d", 4, (const int64_t[]){2, 3, 1, 5}, four);
    gguf_file *f = open_writer(w);
    const pdl_tensor_set *ts = gguf_tensors(f);
    REQUIRE(ts->count == 5);

    const pdl_tensor *t = tensor_set_find(ts, "m.f32");
    REQUIRE(t != NULL);
    CHECK(t->dtype == PDL_DTYPE_F32);
    CHECK_EQ_INT(t->n_dims, 2);
    CHECK_EQ_INT(t->shape[0], 3);
    CHECK_EQ_INT(t->shape[1], 4);
    CHECK_EQ_INT(t->nbytes, sizeof m);
    CHECK(memcmp(t->data, m, sizeof m) == 0);
    CHECK_EQ_INT(t->file_offset, gguf_writer_tensor_data_offset(w, 0));
    CHECK_EQ_INT(t->file_offset, gguf_writer_data_start(w));
    CHECK_CONTAINS(t->file, "t.gguf");
    CHECK(strcmp(t->file, gguf_path(f)) == 0);

    t = tensor_set_find(ts, "v.f16");
    REQUIRE(t != NULL);
    CHECK(t->dtype == PDL_DTYPE_F16);
    CHECK_EQ_INT(t->n_dims, 1);
    CHECK_EQ_INT(t->shape[0], 5);
    CHECK_EQ_INT(t->nbytes, 10);
    CHECK(memcmp(t->data, h, sizeof h) == 0);
    CHECK_EQ_INT(t->file_offset, gguf_writer_tensor_data_offset(w, 1));

    t = tensor_set_find(ts, "t.bf16");
    REQUIRE(t != NULL);
    CHECK(t->dtype == PDL_DTYPE_BF16);
    CHECK_EQ_INT(t->n_dims, 3);
    CHECK(t->shape[0] == 2 && t->shape[1] == 3 && t->shape[2] == 4);
    CHECK_EQ_INT(tensor_nelems(t), 24);
    CHECK(memcmp(t->data, bf, sizeof bf) == 0);

    t = tensor_set_find(ts, "q.q8_0");
    REQUIRE(t != NULL);
    CHECK(t->dtype == PDL_DTYPE_Q8_0);
    CHECK(t->n_dims == 2 && t->shape[0] == 2 && t->shape[1] == 64);
    CHECK_EQ_INT(t->nbytes, 136);
    CHECK_EQ_INT(dtype_row_bytes(t->dtype, t->shape[1]) * 2, t->nbytes);
    CHECK(memcmp(t->data, q, sizeof q) == 0);

    t = tensor_set_find(ts, "x.4d");
    REQUIRE(t != NULL);
    CHECK(t->n_dims == 4 && t->shape[0] == 2 && t->shape[1] == 3 && t->shape[2] == 1 &&
          t->shape[3] == 5);
    CHECK(memcmp(t->data, four, sizeof four) == 0);

    /* Data pointers are into one mapping, at the absolute offsets. */
    const uint8_t *base = (const uint8_t *)ts->items[0].data - ts->items[0].file_offset;
    for (size_t i = 0; i < ts->count; i++) {
        CHECK_EQ_INT(ts->items[i].file_offset % 32, 0);
        CHECK((const uint8_t *)ts->items[i].data == base + ts->items[i].file_offset);
        CHECK_EQ_INT(ts->items[i].file_offset, gguf_writer_tensor_data_offset(w, i));
    }
    gguf_close(f);
    gguf_writer_free(w);
}

static void check_alignment(uint32_t alignment) {
    gguf_writer *w = gguf_writer_new(3);
    gguf_writer_set_alignment(w, alignment);
    gguf_writer_add_str(w, "odd.length.key.xyz", "abc");
    float v[3] = {1, 2, 3};
    gguf_writer_add_tensor_f32(w, "a", 1, (const int64_t[]){3}, v); /* 12 bytes: next needs padding */
    gguf_writer_add_tensor_f32(w, "b", 1, (const int64_t[]){1}, v);
    gguf_writer_add_tensor(w, "c", GW_GGML_F16, 1, (const uint64_t[]){1}, NULL, 2);
    gguf_file *f = open_writer(w);
    CHECK_EQ_INT(gguf_alignment(f), alignment);
    const pdl_tensor_set *ts = gguf_tensors(f);
    REQUIRE(ts->count == 3);
    CHECK_EQ_INT(ts->items[0].file_offset, gguf_writer_data_start(w));
    for (size_t i = 0; i < 3; i++) {
        CHECK_EQ_INT(ts->items[i].file_offset % alignment, 0);
        CHECK_EQ_INT(ts->items[i].file_offset, gguf_writer_tensor_data_offset(w, i));
    }
    CHECK_EQ_INT(ts->items[1].file_offset - ts->items[0].file_offset, alignment);
    CHECK(memcmp(ts->items[1].data, v, 4) == 0);
    gguf_close(f);
    gguf_writer_free(w);
}

static void test_alignment_default_32_and_64(void) {
    check_alignment(32);
    check_alignment(64);
    check_alignment(256);
    /* Without the key the alignment is 32. */
    gguf_writer *w = small_writer();
    gguf_file *f = open_writer(w);
    CHECK_EQ_INT(gguf_alignment(f), 32);
    CHECK(gguf_find_kv(f, "general.alignment") == NULL);
    for (size_t i = 0; i < gguf_tensors(f)->count; i++)
        CHECK_EQ_INT(gguf_tensors(f)->items[i].file_offset % 32, 0);
    gguf_close(f);
    gguf_writer_free(w);
}

static void test_version_2_accepted(void) {
    gguf_writer *w = gguf_writer_new(2);
    gguf_writer_add_str(w, "general.architecture", "llama");
    gguf_writer_add_tensor_f32(w, "w", 1, (const int64_t[]){4}, NULL);
    gguf_file *f = open_writer(w);
    CHECK_EQ_INT(gguf_version(f), 2);
    CHECK_EQ_INT(gguf_tensors(f)->count, 1);
    gguf_close(f);
    gguf_writer_free(w);
}

static void test_versions_1_and_4_rejected(void) {
    uint32_t versions[] = {0, 1, 4, 0x03000000u};
    for (size_t i = 0; i < 4; i++) {
        gguf_writer *w = gguf_writer_new(versions[i]);
        gguf_writer_add_str(w, "general.architecture", "llama");
        const char *msg = expect_fail_writer(w);
        char want[64];
        snprintf(want, sizeof want, "version %u", versions[i]);
        CHECK_CONTAINS(msg, want);
        CHECK_CONTAINS(msg, "offset 4");
        CHECK_CONTAINS(msg, "only versions 2 and 3");
        gguf_writer_free(w);
    }
}

static void test_vocab_only_file_without_final_padding(void) {
    /* llama.cpp writes tensor-less files that end right after the metadata,
     * before the data section's padding. */
    gguf_writer *w = gguf_writer_new(3);
    gguf_writer_add_str(w, "tokenizer.ggml.model", "abc"); /* 24 + 8+20+4+8+3 = 67 bytes */
    size_t n;
    uint8_t *b = gguf_writer_copy(w, &n);
    REQUIRE(n == 96);
    char *path;
    gguf_file *f = NULL;
    int rc = open_bytes(&f, b, 67, &path);
    REQUIRE_MSG(rc == 0, "%s", g_err.message);
    const char *s = NULL;
    CHECK_EQ_INT(gguf_get_str(f, "tokenizer.ggml.model", &s, &g_err), 1);
    CHECK(s && strcmp(s, "abc") == 0);
    CHECK_EQ_INT(gguf_tensors(f)->count, 0);
    gguf_close(f);
    free(path);
    free(b);
    gguf_writer_free(w);
}

static void test_large_string_array_is_fast(void) {
    enum { N = 152064 };
    char (*buf)[24] = malloc((size_t)N * sizeof *buf);
    const char **toks = malloc((size_t)N * sizeof *toks);
    REQUIRE(buf && toks);
    for (int i = 0; i < N; i++) {
        snprintf(buf[i], sizeof buf[i], (i % 3) ? "tok%d" : "\xC4\xA0w%d\xE2\x96\x81", i);
        toks[i] = buf[i];
    }
    gguf_writer *w = gguf_writer_new(3);
    gguf_writer_add_str(w, "general.architecture", "qwen2");
    gguf_writer_add_str_arr(w, "tokenizer.ggml.tokens", toks, N);
    size_t n;
    const uint8_t *bytes = gguf_writer_bytes(w, &n);
    char *path = test_tmp_path("big.gguf");
    test_write_file(path, bytes, n);

    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    gguf_file *f = NULL;
    int rc = gguf_open(&f, path, &g_err);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    REQUIRE_MSG(rc == 0, "%s", g_err.message);
    gguf_array a;
    REQUIRE(gguf_get_arr(f, "tokenizer.ggml.tokens", &a, &g_err) == 1);
    CHECK_EQ_INT(a.count, N);
    for (int i = 0; i < N; i += 9973) {
        CHECK_EQ_INT(a.strings[i].len, strlen(toks[i]));
        CHECK(memcmp(a.strings[i].ptr, toks[i], strlen(toks[i])) == 0);
    }
    CHECK_EQ_INT(a.strings[N - 1].len, strlen(toks[N - 1]));
    /* A few milliseconds in practice; generous for sanitizers and busy hosts. */
    CHECK_MSG(secs < 2.0, "opening took %.3f s", secs);
    gguf_close(f);
    gguf_writer_free(w);
    free(path);
    free(toks);
    free(buf);
}

/* ---------------------------------------------------------------------------
 * Malformed headers and metadata
 * ------------------------------------------------------------------------- */

static void test_bad_magic_and_tiny_files(void) {
    gguf_writer *w = small_writer();
    size_t n;
    uint8_t *b = gguf_writer_copy(w, &n);
    memcpy(b, "GGML", 4);
    const char *msg = expect_fail(b, n);
    CHECK_CONTAINS(msg, "offset 0");
    CHECK_CONTAINS(msg, "magic");
    msg = expect_fail(b, 0);
    CHECK_CONTAINS(msg, "offset 0");
    msg = expect_fail((const uint8_t *)"GGU", 3);
    CHECK_CONTAINS(msg, "truncated");
    msg = expect_fail((const uint8_t *)"{\"__metadata__\":{}}", 19);
    CHECK_CONTAINS(msg, "not a GGUF file");
    free(b);
    gguf_writer_free(w);

    /* A missing file names the path. */
    gguf_file *f = (gguf_file *)&g_err;
    char *path = test_tmp_path("does-not-exist.gguf");
    CHECK_EQ_INT(gguf_open(&f, path, &g_err), -1);
    CHECK(f == NULL);
    CHECK_CONTAINS(g_err.message, path);
    free(path);
}

static void test_absurd_counts_rejected_before_allocating(void) {
    gguf_writer *w = small_writer();
    size_t n;
    uint8_t *b = gguf_writer_copy(w, &n);

    uint8_t *c = malloc(n);
    REQUIRE(c != NULL);
    uint64_t huge[] = {1ull << 62, UINT64_MAX, 1000000};
    for (int k = 0; k < 3; k++) {
        memcpy(c, b, n);
        put_u64(c, 8, huge[k]); /* tensor_count */
        const char *msg = expect_fail(c, n);
        CHECK_CONTAINS(msg, "offset 8");
        CHECK_CONTAINS(msg, "tensor_count");

        memcpy(c, b, n);
        put_u64(c, 16, huge[k]); /* kv_count */
        msg = expect_fail(c, n);
        CHECK_CONTAINS(msg, "offset 16");
        CHECK_CONTAINS(msg, "kv_count");
    }

    /* String array count (kv 4: tokenizer.ggml.tokens): after elem type. */
    size_t count_at = gguf_writer_kv_value_offset(w, 4) + 4;
    char want[64];
    for (int k = 0; k < 3; k++) {
        memcpy(c, b, n);
        put_u64(c, count_at, huge[k]);
        const char *msg = expect_fail(c, n);
        snprintf(want, sizeof want, "offset %zu", count_at);
        CHECK_CONTAINS(msg, want);
        CHECK_CONTAINS(msg, "'tokenizer.ggml.tokens'");
        CHECK_CONTAINS(msg, "array count");
    }
    /* Numeric array count (kv 5: tokenizer.ggml.scores). */
    count_at = gguf_writer_kv_value_offset(w, 5) + 4;
    memcpy(c, b, n);
    put_u64(c, count_at, 1ull << 61);
    const char *msg = expect_fail(c, n);
    CHECK_CONTAINS(msg, "'tokenizer.ggml.scores'");
    CHECK_CONTAINS(msg, "array count");

    /* String lengths: a key, a string value, an array element, a tensor name. */
    memcpy(c, b, n);
    put_u64(c, gguf_writer_kv_offset(w, 1), UINT64_MAX - 3);
    msg = expect_fail(c, n);
    CHECK_CONTAINS(msg, "key #1");
    CHECK_CONTAINS(msg, "length");
    snprintf(want, sizeof want, "offset %zu:", gguf_writer_kv_offset(w, 1));
    CHECK_CONTAINS(msg, want);

    memcpy(c, b, n);
    put_u64(c, gguf_writer_kv_value_offset(w, 0), 1ull << 40);
    msg = expect_fail(c, n);
    CHECK_CONTAINS(msg, "'general.architecture'");
    CHECK_CONTAINS(msg, "string value length");

    memcpy(c, b, n);
    put_u64(c, gguf_writer_kv_value_offset(w, 4) + 12 + 8 + 5, 1ull << 50); /* element 1 */
    msg = expect_fail(c, n);
    CHECK_CONTAINS(msg, "'tokenizer.ggml.tokens'");
    CHECK_CONTAINS(msg, "array element 1 length");

    memcpy(c, b, n);
    put_u64(c, gguf_writer_tensor_info_offset(w, 2), n);
    msg = expect_fail(c, n);
    CHECK_CONTAINS(msg, "tensor #2");
    CHECK_CONTAINS(msg, "tensor name length");
    free(c);
    free(b);
    gguf_writer_free(w);
}

static void test_unknown_value_types_rejected(void) {
    uint8_t v[8] = {0};
    gguf_writer *w = gguf_writer_new(3);
    gguf_writer_add_u32(w, "ok", 1);
    gguf_writer_add_raw_kv(w, "weird.type", 13, v, 8);
    const char *msg = expect_fail_writer(w);
    CHECK_CONTAINS(msg, "'weird.type'");
    CHECK_CONTAINS(msg, "unknown value type 13");
    char want[64];
    snprintf(want, sizeof want, "offset %zu", gguf_writer_kv_value_offset(w, 1) - 4);
    CHECK_CONTAINS(msg, want);
    gguf_writer_free(w);

    w = gguf_writer_new(3);
    gguf_writer_add_raw_kv(w, "huge.type", 0xFFFFFFFFu, v, 8);
    msg = expect_fail_writer(w);
    CHECK_CONTAINS(msg, "unknown value type 4294967295");
    gguf_writer_free(w);

    /* Array of an unknown element type. */
    uint8_t arr[12];
    put_u32(arr, 0, 42);
    put_u64(arr, 4, 0);
    w = gguf_writer_new(3);
    gguf_writer_add_raw_kv(w, "arr.weird", GGUF_TYPE_ARRAY, arr, sizeof arr);
    msg = expect_fail_writer(w);
    CHECK_CONTAINS(msg, "'arr.weird'");
    CHECK_CONTAINS(msg, "unknown array element type 42");
    gguf_writer_free(w);
}

static void test_nested_arrays_rejected(void) {
    uint8_t arr[12 + 12 + 4];
    put_u32(arr, 0, GGUF_TYPE_ARRAY);
    put_u64(arr, 4, 1);
    put_u32(arr, 12, GGUF_TYPE_UINT32);
    put_u64(arr, 16, 1);
    put_u32(arr, 24, 7);
    gguf_writer *w = gguf_writer_new(3);
    gguf_writer_add_u32(w, "first", 1);
    gguf_writer_add_raw_kv(w, "nested", GGUF_TYPE_ARRAY, arr, sizeof arr);
    const char *msg = expect_fail_writer(w);
    CHECK_CONTAINS(msg, "'nested'");
    CHECK_CONTAINS(msg, "nested arrays are not supported");
    char want[64];
    snprintf(want, sizeof want, "offset %zu", gguf_writer_kv_value_offset(w, 1));
    CHECK_CONTAINS(msg, want);
    gguf_writer_free(w);
}

static void test_bool_values_must_be_0_or_1(void) {
    uint8_t two = 2;
    gguf_writer *w = gguf_writer_new(3);
    gguf_writer_add_raw_kv(w, "flag", GGUF_TYPE_BOOL, &two, 1);
    const char *msg = expect_fail_writer(w);
    CHECK_CONTAINS(msg, "'flag'");
    CHECK_CONTAINS(msg, "BOOL");
    gguf_writer_free(w);

    uint8_t arr[12 + 3];
    put_u32(arr, 0, GGUF_TYPE_BOOL);
    put_u64(arr, 4, 3);
    arr[12] = 1;
    arr[13] = 0;
    arr[14] = 0xFF;
    w = gguf_writer_new(3);
    gguf_writer_add_raw_kv(w, "flags", GGUF_TYPE_ARRAY, arr, sizeof arr);
    msg = expect_fail_writer(w);
    CHECK_CONTAINS(msg, "'flags'");
    CHECK_CONTAINS(msg, "element 2");
    gguf_writer_free(w);
}

static void test_duplicate_key_rejected(void) {
    gguf_writer *w = gguf_writer_new(3);
    gguf_writer_add_str(w, "general.architecture", "llama");
    gguf_writer_add_u32(w, "llama.block_count", 2);
    gguf_writer_add_u32(w, "llama.block_count", 3);
    const char *msg = expect_fail_writer(w);
    CHECK_CONTAINS(msg, "duplicate key");
    CHECK_CONTAINS(msg, "'llama.block_count'");
    char want[80];
    snprintf(want, sizeof want, "offset %zu:", gguf_writer_kv_offset(w, 2));
    CHECK_CONTAINS(msg, want);
    snprintf(want, sizeof want, "first at offset %zu", gguf_writer_kv_offset(w, 1));
    CHECK_CONTAINS(msg, want);
    gguf_writer_free(w);
}

static void test_bad_alignment_rejected(void) {
    uint32_t bad[] = {0, 3, 48, 0x80000001u};
    for (int k = 0; k < 4; k++) {
        gguf_writer *w = gguf_writer_new(3);
        gguf_writer_add_str(w, "general.architecture", "llama");
        gguf_writer_set_alignment(w, bad[k]);
        gguf_writer_add_tensor_f32(w, "w", 1, (const int64_t[]){8}, NULL);
        const char *msg = expect_fail_writer(w);
        CHECK_CONTAINS(msg, "'general.alignment'");
        CHECK_CONTAINS(msg, "power of two");
        char want[64];
        snprintf(want, sizeof want, "offset %zu", gguf_writer_kv_offset(w, 1));
        CHECK_CONTAINS(msg, want);
        gguf_writer_free(w);
    }
    gguf_writer *w = gguf_writer_new(3);
    gguf_writer_add_u64(w, "general.alignment", 32);
    const char *msg = expect_fail_writer(w);
    CHECK_CONTAINS(msg, "'general.alignment'");
    CHECK_CONTAINS(msg, "UINT64");
    CHECK_CONTAINS(msg, "expected UINT32");
    gguf_writer_free(w);
}

/* ---------------------------------------------------------------------------
 * UTF-8
 * ------------------------------------------------------------------------- */

static const char *const bad_utf8[] = {
    "\x80",             /* lone continuation byte */
    "a\xBF",            /* continuation after ASCII */
    "\xC0\x80",         /* overlong NUL */
    "\xC1\xBF",         /* overlong U+007F */
    "\xE0\x80\x80",     /* overlong 3-byte */
    "\xE0\x9F\xBF",     /* overlong U+07FF */
    "\xF0\x80\x80\x80", /* overlong 4-byte */
    "\xF0\x8F\xBF\xBF", /* overlong U+FFFF */
    "\xED\xA0\x80",     /* surrogate U+D800 */
    "\xED\xBF\xBF",     /* surrogate U+DFFF */
    "\xF4\x90\x80\x80", /* U+110000 */
    "\xF5\x80\x80\x80", /* lead byte above F4 */
    "\xFF",             /* never valid */
    "\xE2\x82",         /* truncated 3-byte at end */
    "x\xF0\x9F\x98",    /* truncated 4-byte at end */
    "\xC3\x28",         /* bad continuation */
    "\xE2\x28\xA1",     /* bad second byte */
    "\xF0\x9F\x28\x80", /* bad third byte */
};
static const char *const good_utf8[] = {
    "", "plain", "\xC2\x80", "\xDF\xBF", "\xE0\xA0\x80", "\xED\x9F\xBF", "\xEE\x80\x80",
    "\xEF\xBF\xBF", "\xF0\x90\x80\x80", "\xF4\x8F\xBF\xBF", "\xE2\x96\x81\xC4\xA0",
};

static void test_invalid_utf8_rejected_everywhere(void) {
    size_t nbad = sizeof bad_utf8 / sizeof bad_utf8[0];
    for (size_t k = 0; k < nbad; k++) {
        const char *s = bad_utf8[k];
        size_t len = strlen(s);
        /* A string value. */
        gguf_writer *w = gguf_writer_new(3);
        gguf_writer_add_u32(w, "ok", 1);
        gguf_writer_add_strn(w, "general.name", s, len);
        const char *msg = expect_fail_writer(w);
        CHECK_CONTAINS(msg, "'general.name'");
        CHECK_CONTAINS(msg, "UTF-8");
        CHECK_CONTAINS(msg, "string value");
        gguf_writer_free(w);

        /* A string array element. */
        const char *toks[] = {"a", "b", s};
        w = gguf_writer_new(3);
        gguf_writer_add_str_arr(w, "tokenizer.ggml.tokens", toks, 3);
        msg = expect_fail_writer(w);
        CHECK_CONTAINS(msg, "'tokenizer.ggml.tokens'");
        CHECK_CONTAINS(msg, "array element 2");
        CHECK_CONTAINS(msg, "UTF-8");
        gguf_writer_free(w);

        /* A key: the message can only say which one by number. */
        w = gguf_writer_new(3);
        gguf_writer_add_u32(w, "ok", 1);
        char key[16];
        snprintf(key, sizeof key, "k%s", s);
        gguf_writer_add_u32(w, key, 1);
        msg = expect_fail_writer(w);
        CHECK_CONTAINS(msg, "key #1");
        CHECK_CONTAINS(msg, "UTF-8");
        gguf_writer_free(w);

        /* A tensor name. */
        char name[16];
        snprintf(name, sizeof name, "w%s", s);
        w = gguf_writer_new(3);
        gguf_writer_add_tensor_f32(w, "good", 1, (const int64_t[]){1}, NULL);
        gguf_writer_add_tensor_f32(w, name, 1, (const int64_t[]){1}, NULL);
        msg = expect_fail_writer(w);
        CHECK_CONTAINS(msg, "tensor #1");
        CHECK_CONTAINS(msg, "UTF-8");
        char want[64];
        snprintf(want, sizeof want, "offset %zu", gguf_writer_tensor_info_offset(w, 1));
        CHECK_CONTAINS(msg, want);
        gguf_writer_free(w);
    }

    /* Well-formed edge cases open. */
    size_t ngood = sizeof good_utf8 / sizeof good_utf8[0];
    gguf_writer *w = gguf_writer_new(3);
    gguf_writer_add_str_arr(w, "tokens", (const char *const *)good_utf8, ngood);
    for (size_t k = 1; k < ngood; k++) {
        char key[32];
        snprintf(key, sizeof key, "k.%s", good_utf8[k]);
        gguf_writer_add_str(w, key, good_utf8[k]);
        gguf_writer_add_tensor_f32(w, key, 1, (const int64_t[]){1}, NULL);
    }
    gguf_file *f = open_writer(w);
    CHECK_EQ_INT(gguf_kv_count(f), ngood);
    CHECK_EQ_INT(gguf_tensors(f)->count, ngood - 1);
    CHECK(tensor_set_find(gguf_tensors(f), "k.\xF4\x8F\xBF\xBF") != NULL);
    gguf_close(f);
    gguf_writer_free(w);
}

static void test_nul_bytes_in_names_rejected(void) {
    gguf_writer *w = gguf_writer_new(3);
    gguf_writer_add_u32(w, "abc", 1);
    size_t n;
    uint8_t *b = gguf_writer_copy(w, &n);
    b[gguf_writer_kv_offset(w, 0) + 8 + 1] = 0; /* "a\0c" */
    const char *msg = expect_fail(b, n);
    CHECK_CONTAINS(msg, "key #0");
    CHECK_CONTAINS(msg, "NUL");
    free(b);
    gguf_writer_free(w);

    w = gguf_writer_new(3);
    gguf_writer_add_tensor_f32(w, "abc", 1, (const int64_t[]){1}, NULL);
    b = gguf_writer_copy(w, &n);
    b[gguf_writer_tensor_info_offset(w, 0) + 8 + 2] = 0;
    msg = expect_fail(b, n);
    CHECK_CONTAINS(msg, "tensor #0");
    CHECK_CONTAINS(msg, "NUL");
    free(b);
    gguf_writer_free(w);
}

/* ---------------------------------------------------------------------------
 * Malformed tensor infos
 * ------------------------------------------------------------------------- */

static void test_tensor_name_length_limit(void) {
    char name[PDL_TENSOR_NAME_MAX + 1];
    memset(name, 'n', sizeof name);
    name[PDL_TENSOR_NAME_MAX - 1] = '\0'; /* 255 bytes: the longest allowed */
    gguf_writer *w = gguf_writer_new(3);
    gguf_writer_add_tensor_f32(w, name, 1, (const int64_t[]){2}, NULL);
    gguf_file *f = open_writer(w);
    CHECK(tensor_set_find(gguf_tensors(f), name) != NULL);
    gguf_close(f);
    gguf_writer_free(w);

    name[PDL_TENSOR_NAME_MAX - 1] = 'n';
    name[PDL_TENSOR_NAME_MAX] = '\0'; /* 256 bytes */
    w = gguf_writer_new(3);
    gguf_writer_add_tensor_f32(w, "first", 1, (const int64_t[]){2}, NULL);
    gguf_writer_add_tensor_f32(w, name, 1, (const int64_t[]){2}, NULL);
    const char *msg = expect_fail_writer(w);
    CHECK_CONTAINS(msg, "tensor 'nnnnnnnn");
    CHECK_CONTAINS(msg, "256 bytes");
    CHECK_CONTAINS(msg, "limit is 255");
    char want[64];
    snprintf(want, sizeof want, "offset %zu", gguf_writer_tensor_info_offset(w, 1));
    CHECK_CONTAINS(msg, want);
    gguf_writer_free(w);
}

static void test_bad_n_dims_rejected(void) {
    uint64_t ne[5] = {2, 2, 2, 2, 2};
    int dims[] = {0, 5};
    for (int k = 0; k < 2; k++) {
        gguf_writer *w = gguf_writer_new(3);
        gguf_writer_add_tensor_f32(w, "fine", 1, (const int64_t[]){1}, NULL);
        gguf_writer_add_tensor(w, "blk.0.attn_q.weight", GW_GGML_F32, dims[k], ne, NULL, 128);
        const char *msg = expect_fail_writer(w);
        CHECK_CONTAINS(msg, "'blk.0.attn_q.weight'");
        CHECK_CONTAINS(msg, "n_dims");
        char want[64];
        snprintf(want, sizeof want, "n_dims %d", dims[k]);
        CHECK_CONTAINS(msg, want);
        gguf_writer_free(w);
    }
}

static void test_bad_dims_rejected(void) {
    gguf_writer *w = gguf_writer_new(3);
    gguf_writer_add_tensor(w, "zero", GW_GGML_F32, 2, (const uint64_t[]){4, 0}, NULL, 0);
    const char *msg = expect_fail_writer(w);
    CHECK_CONTAINS(msg, "'zero'");
    CHECK_CONTAINS(msg, "ne[1] is 0");
    gguf_writer_free(w);

    w = gguf_writer_new(3);
    gguf_writer_add_tensor(w, "overflow", GW_GGML_F32, 2,
                           (const uint64_t[]){1ull << 32, 1ull << 32}, NULL, 4);
    msg = expect_fail_writer(w);
    CHECK_CONTAINS(msg, "'overflow'");
    CHECK_CONTAINS(msg, "overflow");
    gguf_writer_free(w);

    w = gguf_writer_new(3);
    gguf_writer_add_tensor(w, "negative", GW_GGML_F32, 1, (const uint64_t[]){UINT64_MAX}, NULL, 4);
    msg = expect_fail_writer(w);
    CHECK_CONTAINS(msg, "'negative'");
    gguf_writer_free(w);

    w = gguf_writer_new(3);
    gguf_writer_add_tensor(w, "bytes.overflow", GW_GGML_F32, 2,
                           (const uint64_t[]){1ull << 31, 1ull << 31}, NULL, 4);
    msg = expect_fail_writer(w); /* 2^62 elements: 2^64 bytes */
    CHECK_CONTAINS(msg, "'bytes.overflow'");
    CHECK_CONTAINS(msg, "overflow");
    gguf_writer_free(w);

    /* Large but representable: rejected as data past the end of the file. */
    w = gguf_writer_new(3);
    gguf_writer_add_tensor(w, "huge", GW_GGML_F16, 3, (const uint64_t[]){1 << 20, 1 << 20, 1 << 10},
                           NULL, 4);
    msg = expect_fail_writer(w);
    CHECK_CONTAINS(msg, "'huge'");
    CHECK_CONTAINS(msg, "past end of file");
    gguf_writer_free(w);
}

static void test_unsupported_tensor_types_named(void) {
    struct {
        uint32_t id;
        const char *name;
    } cases[] = {
        {GW_GGML_Q8_K, "Q8_K"},   {GW_GGML_I8, "I8"},
        {GW_GGML_IQ2_XXS, "IQ2_XXS"},
        {GW_GGML_I32, "I32"},     {GW_GGML_F64, "F64"},       {GW_GGML_Q8_1, "Q8_1"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        gguf_writer *w = gguf_writer_new(3);
        gguf_writer_add_tensor_f32(w, "token_embd.weight", 2, (const int64_t[]){4, 256}, NULL);
        gguf_writer_add_tensor(w, "blk.0.ffn_down.weight", cases[k].id, 2,
                               (const uint64_t[]){256, 4}, NULL, 4096);
        const char *msg = expect_fail_writer(w);
        CHECK_CONTAINS(msg, "'blk.0.ffn_down.weight'");
        char want[48];
        snprintf(want, sizeof want, "type %s ", cases[k].name);
        CHECK_CONTAINS(msg, want);
        CHECK_CONTAINS(msg, "not supported yet");
        snprintf(want, sizeof want, "offset %zu", gguf_writer_tensor_type_field(w, 1));
        CHECK_CONTAINS(msg, want);
        gguf_writer_free(w);
    }
    uint32_t unknown[] = {99, 40, 0xFFFFFFFFu};
    for (int k = 0; k < 3; k++) {
        gguf_writer *w = gguf_writer_new(3);
        gguf_writer_add_tensor(w, "mystery", unknown[k], 1, (const uint64_t[]){32}, NULL, 128);
        const char *msg = expect_fail_writer(w);
        CHECK_CONTAINS(msg, "'mystery'");
        char want[48];
        snprintf(want, sizeof want, "unknown ggml type %u", unknown[k]);
        CHECK_CONTAINS(msg, want);
        gguf_writer_free(w);
    }
}

/* Every GGUF block format the engine reads maps to its dtype with the
 * block sizes of ggml's block_* structs; data is kept as stored. */
static void test_quantized_tensor_types_accepted(void) {
    struct {
        uint32_t id;
        pdl_dtype dtype;
        size_t block_bytes;
    } cases[] = {
        {GW_GGML_Q4_0, PDL_DTYPE_Q4_0, 18}, {GW_GGML_Q4_1, PDL_DTYPE_Q4_1, 20}, {GW_GGML_Q5_0, PDL_DTYPE_Q5_0, 22},
        {GW_GGML_Q5_1, PDL_DTYPE_Q5_1, 24}, {GW_GGML_Q8_0, PDL_DTYPE_Q8_0, 34}, {GW_GGML_Q2_K, PDL_DTYPE_Q2_K, 84},
        {GW_GGML_Q3_K, PDL_DTYPE_Q3_K, 110}, {GW_GGML_Q4_K, PDL_DTYPE_Q4_K, 144}, {GW_GGML_Q5_K, PDL_DTYPE_Q5_K, 176},
        {GW_GGML_Q6_K, PDL_DTYPE_Q6_K, 210}, {GW_GGML_MXFP4, PDL_DTYPE_MXFP4, 17}, {20, PDL_DTYPE_IQ4_NL, 18},
        {GW_GGML_IQ4_XS, PDL_DTYPE_IQ4_XS, 136}, {GW_GGML_TQ1_0, PDL_DTYPE_TQ1_0, 54}, {GW_GGML_TQ2_0, PDL_DTYPE_TQ2_0, 66},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        /* 512 x 3: 16 or 2 blocks per row */
        size_t per_row = 512 / dtype_block_elems(cases[k].dtype), nbytes = 3 * per_row * cases[k].block_bytes;
        uint8_t *data = malloc(nbytes);
        for (size_t i = 0; i < nbytes; i++) data[i] = (uint8_t)(i * 7 + k);
        gguf_writer *w = gguf_writer_new(3);
        gguf_writer_add_tensor(w, "blk.0.ffn_down.weight", cases[k].id, 2, (const uint64_t[]){512, 3}, data, nbytes);
        gguf_file *f = open_writer(w);
        const pdl_tensor *t = tensor_set_find(gguf_tensors(f), "blk.0.ffn_down.weight");
        REQUIRE(t != NULL);
        CHECK_MSG(t->dtype == cases[k].dtype, "ggml type %u", cases[k].id);
        CHECK(t->shape[0] == 3 && t->shape[1] == 512);
        CHECK_EQ_INT(t->nbytes, nbytes);
        CHECK(memcmp(t->data, data, nbytes) == 0);
        gguf_close(f);
        gguf_writer_free(w);
        free(data);
    }
}

/* K-quant rows hold whole 256-element super-blocks. */
static void test_k_quant_rows_must_be_whole_super_blocks(void) {
    gguf_writer *w = gguf_writer_new(3);
    gguf_writer_add_tensor(w, "k", GW_GGML_Q4_K, 2, (const uint64_t[]){384, 2}, NULL, 144 * 3);
    const char *msg = expect_fail_writer(w);
    CHECK_CONTAINS(msg, "'k'");
    CHECK_CONTAINS(msg, "Q4_K row length ne[0] = 384");
    CHECK_CONTAINS(msg, "multiple of the block size 256");
    gguf_writer_free(w);
}

static void test_q8_0_rows_must_be_whole_blocks(void) {
    gguf_writer *w = gguf_writer_new(3);
    gguf_writer_add_tensor(w, "q", GW_GGML_Q8_0, 2, (const uint64_t[]){48, 2}, NULL, 34 * 3);
    const char *msg = expect_fail_writer(w);
    CHECK_CONTAINS(msg, "'q'");
    CHECK_CONTAINS(msg, "ne[0] = 48");
    CHECK_CONTAINS(msg, "multiple of the block size 32");
    gguf_writer_free(w);
}

static void test_misaligned_offset_rejected(void) {
    gguf_writer *w = small_writer();
    size_t n;
    uint8_t *b = gguf_writer_copy(w, &n);
    size_t field = gguf_writer_tensor_offset_field(w, 1);
    uint64_t rel = gguf_writer_tensor_data_offset(w, 1) - gguf_writer_data_start(w);
    put_u64(b, field, rel + 2);
    const char *msg = expect_fail(b, n);
    CHECK_CONTAINS(msg, "'b.weight'");
    CHECK_CONTAINS(msg, "not a multiple of the alignment 32");
    char want[64];
    snprintf(want, sizeof want, "offset %zu", field);
    CHECK_CONTAINS(msg, want);
    free(b);
    gguf_writer_free(w);
}

static void test_element_misaligned_data_rejected(void) {
    /* With general.alignment 1 an F32 tensor can start at an odd address. */
    gguf_writer *w = gguf_writer_new(3);
    gguf_writer_set_alignment(w, 1);
    gguf_writer_add_tensor(w, "w", GW_GGML_F32, 1, (const uint64_t[]){2}, NULL, 16);
    size_t n;
    uint8_t *b = gguf_writer_copy(w, &n);
    size_t start = gguf_writer_data_start(w);
    uint64_t rel = start % 4 == 3 ? 2 : 1;
    put_u64(b, gguf_writer_tensor_offset_field(w, 0), rel);
    const char *msg = expect_fail(b, n);
    CHECK_CONTAINS(msg, "'w'");
    CHECK_CONTAINS(msg, "not aligned to 4 bytes for F32");
    /* Aligned to 4 it opens. */
    put_u64(b, gguf_writer_tensor_offset_field(w, 0), (4 - start % 4) % 4);
    char *path;
    gguf_file *f = NULL;
    int rc = open_bytes(&f, b, n, &path);
    CHECK_MSG(rc == 0, "%s", g_err.message);
    if (rc == 0) {
        CHECK_EQ_INT(gguf_alignment(f), 1);
        CHECK_EQ_INT(gguf_tensors(f)->items[0].file_offset % 4, 0);
        gguf_close(f);
    }
    free(path);
    free(b);
    gguf_writer_free(w);
}

static void test_data_past_end_of_file_rejected(void) {
    gguf_writer *w = small_writer();
    size_t n;
    uint8_t *b = gguf_writer_copy(w, &n);
    /* The last tensor loses its last byte. */
    const char *msg = expect_fail(b, n - 1);
    CHECK_CONTAINS(msg, "'c.weight'");
    char want[128];
    size_t start = gguf_writer_tensor_data_offset(w, 2);
    snprintf(want, sizeof want, "data [%zu, %zu) past end of file (size %zu)", start, start + 34, n - 1);
    CHECK_CONTAINS(msg, want);
    snprintf(want, sizeof want, "offset %zu:", gguf_writer_tensor_info_offset(w, 2));
    CHECK_CONTAINS(msg, want);

    /* An offset far beyond the file, and one that overflows. */
    put_u64(b, gguf_writer_tensor_offset_field(w, 0), 1ull << 40);
    msg = expect_fail(b, n);
    CHECK_CONTAINS(msg, "'a.weight'");
    CHECK_CONTAINS(msg, "past end of file");
    put_u64(b, gguf_writer_tensor_offset_field(w, 0), UINT64_MAX - 31);
    msg = expect_fail(b, n);
    CHECK_CONTAINS(msg, "'a.weight'");
    free(b);
    gguf_writer_free(w);
}

static void test_duplicate_tensor_rejected(void) {
    gguf_writer *w = gguf_writer_new(3);
    gguf_writer_add_tensor_f32(w, "blk.0.attn_q.weight", 1, (const int64_t[]){4}, NULL);
    gguf_writer_add_tensor_f32(w, "blk.0.attn_k.weight", 1, (const int64_t[]){4}, NULL);
    gguf_writer_add_tensor_f32(w, "blk.0.attn_q.weight", 1, (const int64_t[]){4}, NULL);
    const char *msg = expect_fail_writer(w);
    CHECK_CONTAINS(msg, "'blk.0.attn_q.weight'");
    CHECK_CONTAINS(msg, "duplicate");
    char want[64];
    snprintf(want, sizeof want, "offset %zu:", gguf_writer_tensor_info_offset(w, 2));
    CHECK_CONTAINS(msg, want);
    snprintf(want, sizeof want, "first at offset %zu", gguf_writer_tensor_info_offset(w, 0));
    CHECK_CONTAINS(msg, want);
    gguf_writer_free(w);
}

/* ---------------------------------------------------------------------------
 * Truncation and random corruption
 * ------------------------------------------------------------------------- */

static void test_truncation_at_every_length_fails_cleanly(void) {
    gguf_writer *w = small_writer();
    size_t n;
    uint8_t *b = gguf_writer_copy(w, &n);
    char *path = test_tmp_path("trunc.gguf");
    for (size_t len = 0; len < n; len++) {
        test_write_file(path, b, len);
        gguf_file *f = (gguf_file *)&g_err;
        memset(&g_err, 0, sizeof g_err);
        int rc = gguf_open(&f, path, &g_err);
        if (rc == 0) gguf_close(f);
        CHECK_MSG(rc == -1, "truncated to %zu of %zu bytes, it opened", len, n);
        CHECK(f == NULL);
        if (!strstr(g_err.message, path) || !strstr(g_err.message, "offset")) {
            CHECK_MSG(0, "length %zu: message \"%s\"", len, g_err.message);
            break;
        }
    }
    /* The whole file opens. */
    test_write_file(path, b, n);
    gguf_file *f = NULL;
    REQUIRE_MSG(gguf_open(&f, path, &g_err) == 0, "%s", g_err.message);
    touch_everything(f, n);
    gguf_close(f);
    free(path);
    free(b);
    gguf_writer_free(w);
}

static uint64_t rng_next(uint64_t *s) { /* splitmix64 */
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void test_random_corruption_never_crashes(void) {
    gguf_writer *w = small_writer();
    size_t n;
    uint8_t *orig = gguf_writer_copy(w, &n);
    size_t meta_end = gguf_writer_data_start(w); /* most flips land in the metadata */
    uint8_t *b = malloc(n);
    REQUIRE(b != NULL);
    char *path = test_tmp_path("fuzz.gguf");
    uint64_t seed = 0x5EED1234ull;
    int opened = 0, failed = 0;
    for (int iter = 0; iter < 2000; iter++) {
        memcpy(b, orig, n);
        int flips = 1 + (int)(rng_next(&seed) % 4);
        for (int k = 0; k < flips; k++) {
            uint64_t r = rng_next(&seed);
            size_t at = (r & 7) ? (size_t)(r >> 8) % meta_end : (size_t)(r >> 8) % n;
            switch ((r >> 3) & 3) {
            case 0: b[at] ^= (uint8_t)(1u << ((r >> 5) & 7)); break;  /* a bit */
            case 1: b[at] = (uint8_t)(r >> 40); break;                /* a byte */
            case 2: b[at] = 0xFF; break;
            default: b[at] = 0; break;
            }
        }
        size_t len = (rng_next(&seed) % 16 == 0) ? (size_t)(rng_next(&seed) % n) : n;
        test_write_file(path, b, len);
        gguf_file *f = NULL;
        memset(&g_err, 0, sizeof g_err);
        if (gguf_open(&f, path, &g_err) == 0) {
            opened++;
            touch_everything(f, len);
            const char *s;
            pdl_error e2;
            (void)gguf_get_str(f, "general.architecture", &s, &e2);
            gguf_close(f);
        } else {
            failed++;
            CHECK(f == NULL);
            CHECK_MSG(g_err.message[0] != '\0', "iteration %d: empty message", iter);
            CHECK_CONTAINS(g_err.message, path);
        }
    }
    CHECK(opened > 0);
    CHECK(failed > 0);
    free(path);
    free(b);
    free(orig);
    gguf_writer_free(w);
}

/* ---------------------------------------------------------------------------
 * Real files
 * ------------------------------------------------------------------------- */

static gguf_file *open_real(const char *rel) {
    char *path = test_data_path(rel);
    gguf_file *f = NULL;
    int rc = gguf_open(&f, path, &g_err);
    free(path);
    REQUIRE_MSG(rc == 0, "%s", g_err.message);
    return f;
}

static int count_dtype(const gguf_file *f, pdl_dtype dt) {
    int n = 0;
    for (size_t i = 0; i < gguf_tensors(f)->count; i++) n += gguf_tensors(f)->items[i].dtype == dt;
    return n;
}

static void test_real_stories260K(void) {
    gguf_file *f = open_real("models/stories260K/stories260K.gguf");
    CHECK_EQ_INT(gguf_version(f), 3);
    CHECK_EQ_INT(gguf_kv_count(f), 19);
    const char *arch = NULL;
    CHECK_EQ_INT(gguf_get_str(f, "general.architecture", &arch, &g_err), 1);
    CHECK(arch && strcmp(arch, "llama") == 0);
    uint32_t u = 0;
    CHECK_EQ_INT(gguf_get_u32(f, "llama.embedding_length", &u, &g_err), 1);
    CHECK_EQ_INT(u, 64);
    CHECK_EQ_INT(gguf_get_u32(f, "llama.block_count", &u, &g_err), 1);
    CHECK_EQ_INT(u, 5);
    CHECK_EQ_INT(gguf_get_u32(f, "llama.context_length", &u, &g_err), 1);
    CHECK_EQ_INT(u, 128);
    float eps = 0;
    CHECK_EQ_INT(gguf_get_f32(f, "llama.attention.layer_norm_rms_epsilon", &eps, &g_err), 1);
    CHECK(fabsf(eps - 1e-5f) < 1e-9f);
    /* The file stores "no token" ids as UINT32 0xFFFFFFFF. */
    int32_t i32 = 0;
    CHECK_EQ_INT(gguf_get_i32(f, "tokenizer.ggml.padding_token_id", &i32, &g_err), -1);

    gguf_array a;
    REQUIRE(gguf_get_arr(f, "tokenizer.ggml.tokens", &a, &g_err) == 1);
    CHECK(a.elem_type == GGUF_TYPE_STRING);
    CHECK_EQ_INT(a.count, 512);
    REQUIRE(a.strings != NULL);
    CHECK(a.strings[1].len == 3 && memcmp(a.strings[1].ptr, "<s>", 3) == 0);
    CHECK_EQ_INT(gguf_find_kv(f, "tokenizer.ggml.tokens")->offset, 24);
    REQUIRE(gguf_get_arr(f, "tokenizer.ggml.scores", &a, &g_err) == 1);
    CHECK(a.elem_type == GGUF_TYPE_FLOAT32 && a.count == 512);
    REQUIRE(gguf_get_arr(f, "tokenizer.ggml.token_type", &a, &g_err) == 1);
    CHECK(a.elem_type == GGUF_TYPE_INT32 && a.count == 512);
    CHECK_EQ_INT(gguf_arr_i64(&a, 0), 2); /* <unk>: UNKNOWN */
    CHECK_EQ_INT(gguf_arr_i64(&a, 1), 3); /* <s>: CONTROL */

    const pdl_tensor_set *ts = gguf_tensors(f);
    CHECK_EQ_INT(ts->count, 48);
    CHECK_EQ_INT(count_dtype(f, PDL_DTYPE_F32), 48);
    const pdl_tensor *t = tensor_set_find(ts, "token_embd.weight");
    REQUIRE(t != NULL);
    CHECK(t->dtype == PDL_DTYPE_F32);
    CHECK_EQ_INT(t->n_dims, 2);
    CHECK_EQ_INT(t->shape[0], 512);
    CHECK_EQ_INT(t->shape[1], 64);
    CHECK_EQ_INT(t->nbytes, 512 * 64 * 4);
    CHECK_EQ_INT(t->file_offset, 14176); /* the data section start */
    t = tensor_set_find(ts, "blk.0.attn_k.weight");
    REQUIRE(t != NULL);
    CHECK(t->shape[0] == 32 && t->shape[1] == 64);
    gguf_close(f);
}

static void test_real_llama2_tiny_random_f16(void) {
    gguf_file *f = open_real("models/llama-2-tiny-random/llama-2-tiny-random.gguf");
    gguf_array a;
    REQUIRE(gguf_get_arr(f, "tokenizer.ggml.tokens", &a, &g_err) == 1);
    CHECK(a.elem_type == GGUF_TYPE_STRING);
    CHECK_EQ_INT(a.count, 32000);
    CHECK_EQ_INT(count_dtype(f, PDL_DTYPE_F16), 9);
    CHECK_EQ_INT(count_dtype(f, PDL_DTYPE_F32), 3);
    const pdl_tensor *t = tensor_set_find(gguf_tensors(f), "token_embd.weight");
    REQUIRE(t != NULL);
    CHECK(t->dtype == PDL_DTYPE_F16);
    CHECK(t->n_dims == 2 && t->shape[0] == 32000 && t->shape[1] == 8);
    CHECK_EQ_INT(t->nbytes, 32000 * 8 * 2);
    uint32_t u = 0;
    CHECK_EQ_INT(gguf_get_u32(f, "general.file_type", &u, &g_err), 1);
    CHECK_EQ_INT(u, 1); /* MOSTLY_F16 */
    gguf_close(f);
}

static void test_real_qwen3_q8_0(void) {
    gguf_file *f = open_real("models/qwen3-tiny/model-q8_0.gguf");
    const char *arch = NULL;
    CHECK_EQ_INT(gguf_get_str(f, "general.architecture", &arch, &g_err), 1);
    CHECK(arch && strcmp(arch, "qwen3") == 0);
    CHECK_EQ_INT(count_dtype(f, PDL_DTYPE_Q8_0), 22);
    CHECK_EQ_INT(count_dtype(f, PDL_DTYPE_F32), 13);
    const pdl_tensor *t = tensor_set_find(gguf_tensors(f), "token_embd.weight");
    REQUIRE(t != NULL);
    CHECK(t->dtype == PDL_DTYPE_Q8_0);
    CHECK(t->n_dims == 2 && t->shape[0] == 1536 && t->shape[1] == 128);
    CHECK_EQ_INT(t->nbytes, 1536 * 4 * 34);
    gguf_array a;
    REQUIRE(gguf_get_arr(f, "tokenizer.ggml.merges", &a, &g_err) == 1);
    CHECK(a.elem_type == GGUF_TYPE_STRING && a.count == 944);
    bool add_bos = true;
    CHECK_EQ_INT(gguf_get_bool(f, "tokenizer.ggml.add_bos_token", &add_bos, &g_err), 1);
    CHECK(add_bos == false);
    gguf_close(f);
}

static void test_real_qwen3_q4_0(void) {
    gguf_file *f = open_real("models/qwen3-tiny/model-q4_0.gguf");
    CHECK_EQ_INT(count_dtype(f, PDL_DTYPE_Q4_0), 22);
    CHECK_EQ_INT(count_dtype(f, PDL_DTYPE_F32), 13);
    const pdl_tensor *t = tensor_set_find(gguf_tensors(f), "token_embd.weight");
    REQUIRE(t != NULL);
    CHECK(t->dtype == PDL_DTYPE_Q4_0);
    CHECK(t->n_dims == 2 && t->shape[0] == 1536 && t->shape[1] == 128);
    CHECK_EQ_INT(t->nbytes, 1536 * 4 * 18);
    gguf_close(f);
}

static void test_real_files_all_open(void) {
    const char *rels[] = {
        "models/cohere-tiny/model-f32.gguf",
        "models/gemma2-tiny/model-f32.gguf",
        "models/granite-tiny/model-f32.gguf",
        "models/llama31-tiny/model-f32.gguf",
        "models/llama31-tiny/model-q8_0.gguf",
        "models/qwen2-tiny/model-f32.gguf",
        "models/qwen3-tiny/model-f32.gguf",
        /* Vocab-only, no tensors, and the file ends before the data section's
         * padding. */
        "tokenizers/llama.cpp-vectors/ggml-vocab-llama-spm.gguf",
        "tokenizers/llama.cpp-vectors/ggml-vocab-gpt-2.gguf",
    };
    for (size_t i = 0; i < sizeof rels / sizeof rels[0]; i++) {
        gguf_file *f = open_real(rels[i]);
        gguf_array a;
        CHECK_MSG(gguf_get_arr(f, "tokenizer.ggml.tokens", &a, &g_err) == 1, "%s", rels[i]);
        if (strstr(rels[i], "vocab")) CHECK_EQ_INT(gguf_tensors(f)->count, 0);
        else CHECK(gguf_tensors(f)->count > 0);
        gguf_close(f);
    }
}

int main(void) {
    RUN(test_scalar_types_round_trip);
    RUN(test_array_types_round_trip);
    RUN(test_typed_getters_convert_and_report);
    RUN(test_tensor_infos_shapes_dtypes_data);
    RUN(test_alignment_default_32_and_64);
    RUN(test_version_2_accepted);
    RUN(test_versions_1_and_4_rejected);
    RUN(test_vocab_only_file_without_final_padding);
    RUN(test_large_string_array_is_fast);
    RUN(test_bad_magic_and_tiny_files);
    RUN(test_absurd_counts_rejected_before_allocating);
    RUN(test_unknown_value_types_rejected);
    RUN(test_nested_arrays_rejected);
    RUN(test_bool_values_must_be_0_or_1);
    RUN(test_duplicate_key_rejected);
    RUN(test_bad_alignment_rejected);
    RUN(test_invalid_utf8_rejected_everywhere);
    RUN(test_nul_bytes_in_names_rejected);
    RUN(test_tensor_name_length_limit);
    RUN(test_bad_n_dims_rejected);
    RUN(test_bad_dims_rejected);
    RUN(test_unsupported_tensor_types_named);
    RUN(test_quantized_tensor_types_accepted);
    RUN(test_k_quant_rows_must_be_whole_super_blocks);
    RUN(test_q8_0_rows_must_be_whole_blocks);
    RUN(test_misaligned_offset_rejected);
    RUN(test_element_misaligned_data_rejected);
    RUN(test_data_past_end_of_file_rejected);
    RUN(test_duplicate_tensor_rejected);
    RUN(test_truncation_at_every_length_fails_cleanly);
    RUN(test_random_corruption_never_crashes);
    RUN(test_real_stories260K);
    RUN(test_real_llama2_tiny_random_f16);
    RUN(test_real_qwen3_q8_0);
    RUN(test_real_qwen3_q4_0);
    RUN(test_real_files_all_open);
    return test_summary();
}
