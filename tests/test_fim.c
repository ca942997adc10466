/*
 * test_fim.c - fill-in-the-middle in the tokenizer (src/tokenizer/fim.c):
 * which ids are a vocabulary's FIM tokens (GGUF keys, the older keys, token
 * texts as llama.cpp knows them), and the prompt a FIM request becomes,
 * token by token against llama-server's format_infill: the sequences below
 * are written out from its published algorithm (parts encoded one by one,
 * context before BOS, prefix cut from the front, suffix from the back, 3:1
 * within a batch), with the texts' ids as the tokenizers give them.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>

#include "format/gguf.h"
#include "support/gguf_writer.h"
#include "support/tok_test.h"
#include "test_util.h"

static pdl_error g_err;

static void check_fim(const tok_tokenizer *t, int32_t pre, int32_t suf, int32_t mid, int32_t pad, int32_t rep,
                      int32_t sep) {
    CHECK_EQ_INT(tok_fim_id(t, TOK_FIM_PRE), pre);
    CHECK_EQ_INT(tok_fim_id(t, TOK_FIM_SUF), suf);
    CHECK_EQ_INT(tok_fim_id(t, TOK_FIM_MID), mid);
    CHECK_EQ_INT(tok_fim_id(t, TOK_FIM_PAD), pad);
    CHECK_EQ_INT(tok_fim_id(t, TOK_FIM_REP), rep);
    CHECK_EQ_INT(tok_fim_id(t, TOK_FIM_SEP), sep);
    CHECK(tok_has_fim(t) == (pre >= 0 && suf >= 0 && mid >= 0));
}

/* Lays out in with t and compares with want[n_want]. */
static void check_prompt(const tok_tokenizer *t, const pdl_fim_input *in, const int32_t *want, size_t n_want,
                         bool want_truncated) {
    int32_t *ids = NULL;
    size_t n = 0;
    bool truncated = !want_truncated;
    REQUIRE_MSG(tok_fim_prompt(t, in, &ids, &n, &truncated, &g_err) == 0, "%s", g_err.message);
    if (!tt_ids_equal(ids, n, want, n_want)) {
        CHECK_MSG(false, "the FIM prompt differs from format_infill's");
        tt_print_ids("want", want, n_want);
        tt_print_ids("got ", ids, n);
    }
    CHECK(truncated == want_truncated);
    free(ids);
}

#define N(a) (sizeof(a) / sizeof((a)[0]))

/* ---- which tokens -------------------------------------------------------------------- */

/* Qwen3's tokenizer.json (Qwen2.5-Coder's FIM tokens, none of them special):
 * found by their text, <|repo_name|> as the repository token. */
static void test_qwen3_tokenizer_json_has_fim_tokens_by_text(void) {
    tok_tokenizer *t = tt_load_hf("tokenizers/qwen3");
    check_fim(t, 151659, 151661, 151660, 151662, 151663, 151664);
    tok_free(t);
}

/* StarCoder2's vocabulary (a GGUF without FIM keys): <fim_prefix> ... by
 * text; its <repo_name> and <file_sep> are no spellings llama.cpp knows,
 * so there is neither a repository nor a file token. */
static void test_starcoder_gguf_has_fim_tokens_by_text(void) {
    tok_tokenizer *t = tt_load_gguf("tokenizers/llama.cpp-vectors/ggml-vocab-starcoder.gguf");
    check_fim(t, 1, 3, 2, 4, -1, -1);
    tok_free(t);
}

/* Vocabularies without FIM tokens: Llama's, GPT-2's. */
static void test_vocabularies_without_fim_tokens(void) {
    const char *paths[] = {"tokenizers/llama.cpp-vectors/ggml-vocab-llama-spm.gguf",
                           "tokenizers/llama.cpp-vectors/ggml-vocab-gpt-2.gguf"};
    for (size_t i = 0; i < N(paths); i++) {
        tok_tokenizer *t = tt_load_gguf(paths[i]);
        check_fim(t, -1, -1, -1, -1, -1, -1);
        tok_free(t);
    }
    tok_tokenizer *t = tt_load_hf("models/stories260K-hf");
    check_fim(t, -1, -1, -1, -1, -1, -1);
    tok_free(t);
}

/* A small SPM vocabulary; extra[] are appended after its 8 tokens. */
static gguf_writer *small_vocab(const char *const *extra, int n_extra) {
    gguf_writer *w = gguf_writer_new(3);
    gguf_writer_add_str(w, "tokenizer.ggml.model", "llama");
    const char *toks[32] = {"<unk>", "<s>", "</s>", "\xe2\x96\x81", "a", "b", "\342\226\201a", "ab"};
    for (int i = 0; i < n_extra; i++) toks[8 + i] = extra[i];
    gguf_writer_add_str_arr(w, "tokenizer.ggml.tokens", toks, (size_t)(8 + n_extra));
    return w;
}

/* The keys name the tokens, whatever their text; a key wins over a token
 * spelled like a FIM token, and the texts fill in what the keys leave. */
static void test_gguf_keys_name_fim_tokens(void) {
    const char *extra[] = {"<|fim_prefix|>", "<x1>", "<x2>", "<x3>", "<|fim_pad|>", "<x5>", "<x6>", "<x7>"};
    gguf_writer *w = small_vocab(extra, 8);
    gguf_writer_add_u32(w, "tokenizer.ggml.fim_pre_token_id", 9);
    gguf_writer_add_u32(w, "tokenizer.ggml.fim_suf_token_id", 10);
    gguf_writer_add_u32(w, "tokenizer.ggml.fim_mid_token_id", 11);
    gguf_writer_add_u32(w, "tokenizer.ggml.fim_rep_token_id", 13);
    gguf_writer_add_u32(w, "tokenizer.ggml.fim_sep_token_id", 14);
    tok_tokenizer *t = NULL;
    REQUIRE_MSG(tt_load_written_gguf(w, "fim-keys.gguf", &t, &g_err) == 0, "%s", g_err.message);
    check_fim(t, 9, 10, 11, 12, 13, 14); /* FIM_PAD by its text (no key) */
    tok_free(t);
}

/* Older files (CodeLlama's first conversions) name them with
 * tokenizer.ggml.{prefix,suffix,middle}_token_id, which win over the new
 * keys as in llama.cpp. */
static void test_gguf_older_keys_name_fim_tokens(void) {
    const char *extra[] = {"<x0>", "<x1>", "<x2>", "<x3>"};
    gguf_writer *w = small_vocab(extra, 4);
    gguf_writer_add_u32(w, "tokenizer.ggml.prefix_token_id", 8);
    gguf_writer_add_u32(w, "tokenizer.ggml.suffix_token_id", 9);
    gguf_writer_add_u32(w, "tokenizer.ggml.middle_token_id", 10);
    gguf_writer_add_u32(w, "tokenizer.ggml.fim_mid_token_id", 11);
    tok_tokenizer *t = NULL;
    REQUIRE_MSG(tt_load_written_gguf(w, "fim-old-keys.gguf", &t, &g_err) == 0, "%s", g_err.message);
    check_fim(t, 8, 9, 10, -1, -1, -1);
    tok_free(t);
}

/* A key outside the vocabulary is an error naming it. */
static void test_gguf_fim_key_outside_vocabulary_fails(void) {
    gguf_writer *w = small_vocab(NULL, 0);
    gguf_writer_add_u32(w, "tokenizer.ggml.fim_suf_token_id", 8);
    tok_tokenizer *t = NULL;
    CHECK(tt_load_written_gguf(w, "fim-bad-key.gguf", &t, &g_err) == -1);
    CHECK(t == NULL);
    CHECK_CONTAINS(g_err.message, "tokenizer.ggml.fim_suf_token_id");
}

/* Each family's spellings (llama.cpp's lists): CodeLlama's "▁<PRE>",
 * DeepSeek-Coder's full-width bars, Granite's and StarCoder's underscores,
 * GLM-4.5's code_ tokens. */
static void test_fim_spellings_of_each_family(void) {
    static const struct {
        const char *name;
        const char *pre, *suf, *mid, *pad, *rep, *sep;
    } families[] = {
        {"codellama", "\xe2\x96\x81<PRE>", "\xe2\x96\x81<SUF>", "\xe2\x96\x81<MID>", "<x>", "<y>", "<z>"},
        /* <｜fim▁begin｜> <｜fim▁hole｜> <｜fim▁end｜> */
        {"deepseek", "<\xef\xbd\x9c" "fim\xe2\x96\x81" "begin\xef\xbd\x9c>",
         "<\xef\xbd\x9c" "fim\xe2\x96\x81" "hole\xef\xbd\x9c>", "<\xef\xbd\x9c" "fim\xe2\x96\x81" "end\xef\xbd\x9c>",
         "<x>", "<y>", "<z>"},
        {"granite", "<fim_prefix>", "<fim_suffix>", "<fim_middle>", "<fim_pad>", "<reponame>", "<z>"},
        {"dashes", "<fim-prefix>", "<fim-suffix>", "<fim-middle>", "<fim-pad>", "<fim-repo>", "<z>"},
        {"glm", "<|code_prefix|>", "<|code_suffix|>", "<|code_middle|>", "<x>", "<y>", "<z>"},
        {"qwen-repo", "<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|fim_pad|>", "<|fim_repo|>",
         "<|file_sep|>"},
    };
    for (size_t f = 0; f < N(families); f++) {
        const char *extra[] = {families[f].pre, families[f].suf, families[f].mid,
                               families[f].pad, families[f].rep, families[f].sep};
        tok_tokenizer *t = NULL;
        REQUIRE_MSG(tt_load_written_gguf(small_vocab(extra, 6), "fim-family.gguf", &t, &g_err) == 0, "%s",
                    g_err.message);
        bool named[3] = {strcmp(families[f].pad, "<x>") != 0, strcmp(families[f].rep, "<y>") != 0,
                         strcmp(families[f].sep, "<z>") != 0};
        fprintf(stderr, "  %s\n", families[f].name);
        check_fim(t, 8, 9, 10, named[0] ? 11 : -1, named[1] ? 12 : -1, named[2] ? 13 : -1);
        tok_free(t);
    }
}

/* ---- the prompt ---------------------------------------------------------------------- */

/* Qwen3's ids of the texts below (tokenizer.json, no BOS). */
static const int32_t Q_PREFIX[] = {750, 912, 2877, 11, 293, 982, 257};                     /* "def add(a, b):\n    " */
static const int32_t Q_SUFFIX[] = {198, 262, 470, 272, 271, 1350, 25906, 7, 16, 11, 220, 17, 1171};
                                                            /* "\n    return c\n\nprint(add(1, 2))\n" */
static const int32_t Q_MIDDLE[] = {66, 284, 264, 488, 293}; /* "c = a + b" */
enum { Q_PRE = 151659, Q_SUF = 151661, Q_MID = 151660, Q_REP = 151663, Q_SEP = 151664 };

/* Plain prefix-suffix-middle, as a /v1/completions request with a suffix
 * lays it out: no BOS (Qwen adds none), nothing cut. */
static void test_qwen3_plain_prefix_suffix_middle(void) {
    tok_tokenizer *t = tt_load_hf("tokenizers/qwen3");
    pdl_fim_input in = {.prefix = Q_PREFIX, .n_prefix = N(Q_PREFIX), .suffix = Q_SUFFIX, .n_suffix = N(Q_SUFFIX)};
    static const int32_t want[] = {Q_PRE, 750, 912, 2877, 11, 293, 982, 257,
                                   Q_SUF, 198, 262, 470, 272, 271, 1350, 25906, 7, 16, 11, 220, 17, 1171,
                                   Q_MID};
    check_prompt(t, &in, want, N(want), false);
    /* an empty suffix still gets its FIM_SUF */
    in.n_suffix = 0;
    static const int32_t want_empty[] = {Q_PRE, 750, 912, 2877, 11, 293, 982, 257, Q_SUF, Q_MID};
    check_prompt(t, &in, want_empty, N(want_empty), false);
    tok_free(t);
}

/* llama-server's /infill with input_extra and prompt on a vocabulary with
 * FIM_REP and FIM_SEP: the repository header, each file as FIM_SEP
 * "name\n" text (a file without a name is "tmp"), the closing FIM_SEP
 * "filename\n", then the prefix with the prompt after it. */
static void test_qwen3_repository_level_prompt(void) {
    tok_tokenizer *t = tt_load_hf("tokenizers/qwen3");
    pdl_fim_file files[] = {{"a.py", 4, "X = 1\n", 6}, {NULL, 0, "y = 2\n", 6}};
    pdl_fim_input in = {.prefix = Q_PREFIX, .n_prefix = N(Q_PREFIX), .suffix = Q_SUFFIX, .n_suffix = N(Q_SUFFIX),
                        .middle = Q_MIDDLE, .n_middle = N(Q_MIDDLE), .repo_level = true, .extra = files,
                        .n_extra = 2};
    static const int32_t want[] = {
        Q_REP, 2408, 4987, 198,                 /* "myproject\n" */
        Q_SEP, 64, 7197, 198, 55, 284, 220, 16, 198, /* "a.py\n" "X = 1\n" */
        Q_SEP, 5173, 198, 88, 284, 220, 17, 198,     /* "tmp\n" "y = 2\n" */
        Q_SEP, 8404, 198,                       /* "filename\n" */
        Q_PRE, 750, 912, 2877, 11, 293, 982, 257, 66, 284, 264, 488, 293,
        Q_SUF, 198, 262, 470, 272, 271, 1350, 25906, 7, 16, 11, 220, 17, 1171,
        Q_MID};
    check_prompt(t, &in, want, N(want), false);
    /* no files: the header and the closing separator still come */
    in.n_extra = 0;
    in.n_middle = 0;
    static const int32_t want_none[] = {Q_REP, 2408, 4987, 198, Q_SEP, 8404, 198,
                                        Q_PRE, 750, 912, 2877, 11, 293, 982, 257,
                                        Q_SUF, 198, 262, 470, 272, 271, 1350, 25906, 7, 16, 11, 220, 17, 1171,
                                        Q_MID};
    check_prompt(t, &in, want_none, N(want_none), false);
    tok_free(t);
}

/* format_infill's cut with n_batch 16, n_ctx 30, n_predict 4: the prefix
 * (20 ids) keeps its last min(20, 3 * (16 / 4)) = 12; the suffix (13) its
 * first min(13, 16 / 4 - (2 + 1)) = 1; the context (24) its last
 * min(24, 30 - 16 - 2 * 4) = 6. */
static void test_qwen3_prompt_cut_as_format_infill(void) {
    tok_tokenizer *t = tt_load_hf("tokenizers/qwen3");
    pdl_fim_file files[] = {{"a.py", 4, "X = 1\n", 6}, {NULL, 0, "y = 2\n", 6}};
    int32_t long_prefix[20];
    for (int i = 0; i < 20; i++) long_prefix[i] = 1000 + i;
    static const int32_t mid1[] = {66};
    pdl_fim_input in = {.prefix = long_prefix, .n_prefix = 20, .suffix = Q_SUFFIX, .n_suffix = N(Q_SUFFIX),
                        .middle = mid1, .n_middle = 1, .repo_level = true, .extra = files, .n_extra = 2,
                        .n_batch = 16, .n_ctx = 30, .n_predict = 4};
    static const int32_t want[] = {
        220, 17, 198, Q_SEP, 8404, 198, /* the last 6 of the context: "... 2\n" FIM_SEP "filename\n" */
        Q_PRE, 1008, 1009, 1010, 1011, 1012, 1013, 1014, 1015, 1016, 1017, 1018, 1019, 66,
        Q_SUF, 198,
        Q_MID};
    check_prompt(t, &in, want, N(want), true);
    /* a context budget below zero keeps none of it; a suffix budget below
     * zero none of the suffix */
    in.n_ctx = 10;
    in.n_middle = 3;
    static const int32_t mid3[] = {66, 284, 264};
    in.middle = mid3;
    static const int32_t want_small[] = {Q_PRE, 1008, 1009, 1010, 1011, 1012, 1013, 1014, 1015, 1016, 1017, 1018,
                                         1019, 66, 284, 264, Q_SUF, Q_MID};
    check_prompt(t, &in, want_small, N(want_small), true);
    /* everything fits: nothing cut, and truncated says so */
    in.n_batch = 4096;
    in.n_ctx = 8192;
    in.n_extra = 0;
    in.repo_level = false;
    in.n_middle = 0;
    in.n_prefix = 3;
    static const int32_t want_fit[] = {Q_PRE, 1000, 1001, 1002,
                                       Q_SUF, 198, 262, 470, 272, 271, 1350, 25906, 7, 16, 11, 220, 17, 1171,
                                       Q_MID};
    check_prompt(t, &in, want_fit, N(want_fit), false);
    tok_free(t);
}

/* A CodeLlama-like vocabulary: Llama's SentencePiece vocabulary with
 * ▁<PRE> ▁<SUF> ▁<MID> ▁<EOT> after it (ids 32000...), found by text; BOS
 * is added, after the context, and without FIM_REP / FIM_SEP each file
 * follows the "--- snippet ---" separator, each text encoded on its own
 * (so each starts with SentencePiece's "▁"). */
static tok_tokenizer *codellama_like(void) {
    char *src = test_data_path("tokenizers/llama.cpp-vectors/ggml-vocab-llama-spm.gguf");
    gguf_file *g = NULL;
    REQUIRE_MSG(gguf_open(&g, src, &g_err) == 0, "%s", g_err.message);
    free(src);
    gguf_array toks, scores, types;
    REQUIRE(gguf_get_arr(g, "tokenizer.ggml.tokens", &toks, &g_err) == 1);
    REQUIRE(gguf_get_arr(g, "tokenizer.ggml.scores", &scores, &g_err) == 1);
    REQUIRE(gguf_get_arr(g, "tokenizer.ggml.token_type", &types, &g_err) == 1);
    size_t n = (size_t)toks.count, total = n + 4;
    char **strs = calloc(total, sizeof *strs);
    float *sc = calloc(total, sizeof *sc);
    int32_t *ty = calloc(total, sizeof *ty);
    for (size_t i = 0; i < n; i++) {
        strs[i] = malloc(toks.strings[i].len + 1);
        memcpy(strs[i], toks.strings[i].ptr, toks.strings[i].len);
        strs[i][toks.strings[i].len] = '\0';
        sc[i] = (float)gguf_arr_f64(&scores, i);
        ty[i] = (int32_t)gguf_arr_i64(&types, i);
    }
    const char *fim[] = {"\xe2\x96\x81<PRE>", "\xe2\x96\x81<SUF>", "\xe2\x96\x81<MID>", "\xe2\x96\x81<EOT>"};
    for (size_t i = 0; i < 4; i++) {
        strs[n + i] = strdup(fim[i]);
        ty[n + i] = 3; /* control */
    }
    gguf_close(g);
    gguf_writer *w = gguf_writer_new(3);
    gguf_writer_add_str(w, "tokenizer.ggml.model", "llama");
    gguf_writer_add_str_arr(w, "tokenizer.ggml.tokens", (const char *const *)strs, total);
    gguf_writer_add_arr(w, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, sc, total);
    gguf_writer_add_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, ty, total);
    for (size_t i = 0; i < total; i++) free(strs[i]);
    free(strs);
    free(sc);
    free(ty);
    tok_tokenizer *t = NULL;
    REQUIRE_MSG(tt_load_written_gguf(w, "codellama-like.gguf", &t, &g_err) == 0, "%s", g_err.message);
    return t;
}

static void test_codellama_like_prompt_with_bos_and_snippets(void) {
    tok_tokenizer *t = codellama_like();
    check_fim(t, 32000, 32001, 32002, -1, -1, -1);
    REQUIRE(tok_add_bos(t));
    static const int32_t prefix[] = {938, 1667, 580, 426, 13}; /* "int main() {\n" */
    static const int32_t suffix[] = {500, 13};                 /* "}\n" */
    pdl_fim_file file = {"x.h", 3, "int x;\n", 7};
    pdl_fim_input in = {.prefix = prefix, .n_prefix = N(prefix), .suffix = suffix, .n_suffix = N(suffix),
                        .repo_level = true, .extra = &file, .n_extra = 1};
    static const int32_t want[] = {
        29871, 13, 13, 5634, 11534, 11474, 13, 13, /* "\n\n--- snippet ---\n\n" */
        938, 921, 29936, 13,                       /* "int x;\n" */
        1,                                         /* BOS */
        32000, 938, 1667, 580, 426, 13, 32001, 500, 13, 32002};
    check_prompt(t, &in, want, N(want), false);
    /* without the repository context: BOS first */
    in.repo_level = false;
    static const int32_t want_plain[] = {1, 32000, 938, 1667, 580, 426, 13, 32001, 500, 13, 32002};
    check_prompt(t, &in, want_plain, N(want_plain), false);
    tok_free(t);
}

/* A vocabulary without FIM tokens gets no prompt, and says why. */
static void test_prompt_needs_fim_tokens(void) {
    tok_tokenizer *t = tt_load_gguf("tokenizers/llama.cpp-vectors/ggml-vocab-llama-spm.gguf");
    static const int32_t ids[] = {938};
    pdl_fim_input in = {.prefix = ids, .n_prefix = 1};
    int32_t dummy, *out = &dummy; /* must be reset */
    size_t n = 7;
    CHECK(tok_fim_prompt(t, &in, &out, &n, NULL, &g_err) == -1);
    CHECK(out == NULL && n == 0);
    CHECK_CONTAINS(g_err.message, "fill-in-the-middle");
    tok_free(t);
}

int main(void) {
    RUN(test_qwen3_tokenizer_json_has_fim_tokens_by_text);
    RUN(test_starcoder_gguf_has_fim_tokens_by_text);
    RUN(test_vocabularies_without_fim_tokens);
    RUN(test_gguf_keys_name_fim_tokens);
    RUN(test_gguf_older_keys_name_fim_tokens);
    RUN(test_gguf_fim_key_outside_vocabulary_fails);
    RUN(test_fim_spellings_of_each_family);
    RUN(test_qwen3_plain_prefix_suffix_middle);
    RUN(test_qwen3_repository_level_prompt);
    RUN(test_qwen3_prompt_cut_as_format_infill);
    RUN(test_codellama_like_prompt_with_bos_and_snippets);
    RUN(test_prompt_needs_fim_tokens);
    return test_summary();
}
