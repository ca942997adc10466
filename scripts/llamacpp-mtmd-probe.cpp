// llamacpp-mtmd-probe.cpp - llama.cpp's multimodal library (libmtmd) run on
// a text GGUF + mmproj GGUF pair, an image and a prompt with llama.cpp's
// media marker, printing one JSON object, for scripts/compare-llamacpp-vlm.
// Written here against llama.cpp's public headers only (llama.h, mtmd.h,
// mtmd-helper.h); the script compiles it against a llama.cpp tree given on
// its command line. Not part of pagedlm's build.
//
//   llamacpp-mtmd-probe logits -m TEXT.gguf --mmproj MMPROJ.gguf --image FILE -p PROMPT [-t N]
//       {"chunks": [{"type": "text", "tokens": [...]}, {"type": "image", "rows": 576}, ...],
//        "logits": [[...], ...]}    the logits of every row of the prompt, image rows included
//   llamacpp-mtmd-probe timing ... (the same options)
//       {"chunks": [...], "preprocess_ms": p, "encode_ms": e, "prefill_ms": f, "n_tokens": n}
//
// Both modes do the same work: mtmd_tokenize (the bitmap resized and
// normalised by the mmproj's preprocessor, the text tokenized; BOS added as
// the vocabulary says), mtmd_encode_chunk on each image chunk (the vision
// tower and projector; encode_ms times these calls alone), then the prompt
// decoded chunk by chunk in order with llama_decode, text as token ids and an
// image as its embedding rows (the attention made non-causal for them where
// mtmd_decode_use_non_causal says so, as for Gemma 3, whose image then sits
// in one micro-batch), as mtmd_helper_decode_image_chunk does it; logits on
// every row (logits mode) or on the last one (timing; prefill_ms: from the
// first decode to those logits). The prompt must end with text, so that its
// last row is a token's. Library defaults otherwise (mtmd's warm-up encode at
// load, batch 2048 / micro-batch 512, flash attention "auto", F16 KV cache),
// as llama-mtmd-cli runs.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "llama.h"
#include "mtmd-helper.h"
#include "mtmd.h"

namespace {

double now_ms() {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void quiet_log(enum ggml_log_level level, const char * text, void *) {
    if (level == GGML_LOG_LEVEL_ERROR) fputs(text, stderr);
}

int usage() {
    fprintf(stderr,
            "usage: llamacpp-mtmd-probe logits|timing -m TEXT.gguf --mmproj MMPROJ.gguf --image FILE -p PROMPT "
            "[-t THREADS] [-fa on|off|auto] [-v]\n");
    return 2;
}

// one chunk through llama_decode: token ids (text) or embedding rows (an
// image's, n x n_embd); with logits, every row's are appended to it
bool decode_rows(llama_context * lctx, const llama_token * ids, const float * embd, int n_embd, size_t n,
                 llama_pos * n_past, bool logits_last, std::vector<std::vector<float>> * logits) {
    llama_batch b = llama_batch_init((int32_t)n, ids ? 0 : n_embd, 1);
    for (size_t i = 0; i < n; i++) {
        if (ids) b.token[i] = ids[i];
        b.pos[i] = *n_past + (llama_pos)i;
        b.n_seq_id[i] = 1;
        b.seq_id[i][0] = 0;
        b.logits[i] = logits || (logits_last && i + 1 == n);
    }
    if (!ids) memcpy(b.embd, embd, n * (size_t)n_embd * sizeof(float));
    b.n_tokens = (int32_t)n;
    int rc = llama_decode(lctx, b);
    llama_batch_free(b);
    if (rc != 0) {
        fprintf(stderr, "llamacpp-mtmd-probe: llama_decode failed (%d)\n", rc);
        return false;
    }
    if (logits) {
        int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(llama_get_model(lctx)));
        for (size_t i = 0; i < n; i++) {
            const float * l = llama_get_logits_ith(lctx, (int32_t)i);
            if (!l) return false;
            logits->emplace_back(l, l + n_vocab);
        }
    }
    *n_past += (llama_pos)n;
    return true;
}

}  // namespace

int main(int argc, char ** argv) {
    if (argc < 2) return usage();
    std::string mode = argv[1];
    if (mode != "logits" && mode != "timing") return usage();
    const char *model_path = nullptr, *mmproj_path = nullptr, *image_path = nullptr, *prompt = nullptr;
    int threads = 2;
    bool verbose = false;
    llama_flash_attn_type fa = LLAMA_FLASH_ATTN_TYPE_AUTO;
    for (int i = 2; i < argc; i++) {
        std::string a = argv[i];
        if (a == "-v") {
            verbose = true;
            continue;
        }
        if (i + 1 >= argc) return usage();
        const char * v = argv[++i];
        if (a == "-m") model_path = v;
        else if (a == "--mmproj") mmproj_path = v;
        else if (a == "--image") image_path = v;
        else if (a == "-p") prompt = v;
        else if (a == "-t") threads = atoi(v);
        else if (a == "-fa" && (!strcmp(v, "on") || !strcmp(v, "off") || !strcmp(v, "auto")))
            fa = !strcmp(v, "on") ? LLAMA_FLASH_ATTN_TYPE_ENABLED
                 : !strcmp(v, "off") ? LLAMA_FLASH_ATTN_TYPE_DISABLED : LLAMA_FLASH_ATTN_TYPE_AUTO;
        else return usage();
    }
    if (!model_path || !mmproj_path || !image_path || !prompt || threads < 1) return usage();
    if (!verbose) {
        llama_log_set(quiet_log, nullptr);
        mtmd_helper_log_set(quiet_log, nullptr);
    }

    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    llama_model * model = llama_model_load_from_file(model_path, mp);
    if (!model) {
        fprintf(stderr, "llamacpp-mtmd-probe: cannot load %s\n", model_path);
        return 1;
    }
    mtmd_context_params mcp = mtmd_context_params_default();
    mcp.use_gpu = false;
    mcp.print_timings = verbose;
    mcp.n_threads = threads;
    mtmd_context * mctx = mtmd_init_from_file(mmproj_path, model, mcp);
    if (!mctx) {
        fprintf(stderr, "llamacpp-mtmd-probe: cannot load %s\n", mmproj_path);
        return 1;
    }

    double t0 = now_ms();
    mtmd_helper_bitmap_wrapper bw = mtmd_helper_bitmap_init_from_file(mctx, image_path, false);
    if (!bw.bitmap) {
        fprintf(stderr, "llamacpp-mtmd-probe: cannot read image %s\n", image_path);
        return 1;
    }
    mtmd_input_chunks * chunks = mtmd_input_chunks_init();
    mtmd_input_text text = {prompt, strlen(prompt), true, true};
    const mtmd_bitmap * bitmaps[1] = {bw.bitmap};
    if (mtmd_tokenize(mctx, chunks, &text, bitmaps, 1) != 0) {
        fprintf(stderr, "llamacpp-mtmd-probe: mtmd_tokenize failed (is there exactly one %s in the prompt?)\n",
                mtmd_default_marker());
        return 1;
    }
    double t_pre = now_ms() - t0;
    size_t n_chunks = mtmd_input_chunks_size(chunks);
    size_t n_tokens = mtmd_helper_get_n_tokens(chunks);
    if (n_chunks == 0 ||
        mtmd_input_chunk_get_type(mtmd_input_chunks_get(chunks, n_chunks - 1)) != MTMD_INPUT_CHUNK_TYPE_TEXT) {
        fprintf(stderr, "llamacpp-mtmd-probe: the prompt must end with text after the image\n");
        return 1;
    }

    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t)(n_tokens + 64);
    // rows that attend both ways (Gemma 3's image) must share one micro-batch
    for (size_t c = 0; c < n_chunks; c++) {
        const mtmd_input_chunk * ch = mtmd_input_chunks_get(chunks, c);
        uint32_t n = (uint32_t)mtmd_input_chunk_get_n_tokens(ch);
        if (mtmd_decode_use_non_causal(mctx, ch) && n > cp.n_ubatch) cp.n_ubatch = n;
        if (n > cp.n_batch) cp.n_batch = n;
    }
    cp.n_threads = cp.n_threads_batch = threads;
    cp.flash_attn_type = fa;
    cp.no_perf = !verbose;
    llama_context * lctx = llama_init_from_model(model, cp);
    if (!lctx) {
        fprintf(stderr, "llamacpp-mtmd-probe: cannot create a context of %u tokens\n", cp.n_ctx);
        return 1;
    }

    // the vision tower on each image chunk, timed alone; its rows kept for the decode
    std::vector<std::vector<float>> embd(n_chunks);
    int n_embd = llama_model_n_embd_inp(model);
    double t_encode = 0;
    for (size_t c = 0; c < n_chunks; c++) {
        const mtmd_input_chunk * ch = mtmd_input_chunks_get(chunks, c);
        if (mtmd_input_chunk_get_type(ch) != MTMD_INPUT_CHUNK_TYPE_IMAGE) continue;
        double t1 = now_ms();
        if (mtmd_encode_chunk(mctx, ch) != 0) {
            fprintf(stderr, "llamacpp-mtmd-probe: mtmd_encode_chunk failed\n");
            return 1;
        }
        t_encode += now_ms() - t1;
        const float * e = mtmd_get_output_embd(mctx);
        embd[c].assign(e, e + (size_t)n_embd * mtmd_input_chunk_get_n_tokens(ch));
    }

    // the prompt, chunk by chunk, to the last row's logits (logits mode: every row's)
    std::vector<std::vector<float>> rows_logits;
    std::vector<std::vector<float>> * want = mode == "logits" ? &rows_logits : nullptr;
    llama_pos n_past = 0;
    double t2 = now_ms();
    for (size_t c = 0; c < n_chunks; c++) {
        const mtmd_input_chunk * ch = mtmd_input_chunks_get(chunks, c);
        bool last = c + 1 == n_chunks;
        if (mtmd_input_chunk_get_type(ch) == MTMD_INPUT_CHUNK_TYPE_TEXT) {
            size_t n = 0;
            const llama_token * ids = mtmd_input_chunk_get_tokens_text(ch, &n);
            if (n && !decode_rows(lctx, ids, nullptr, n_embd, n, &n_past, last, want)) return 1;
        } else {
            bool non_causal = mtmd_decode_use_non_causal(mctx, ch);
            if (non_causal) llama_set_causal_attn(lctx, false);
            bool ok = decode_rows(lctx, nullptr, embd[c].data(), n_embd, mtmd_input_chunk_get_n_tokens(ch), &n_past,
                                  false, want);
            if (non_causal) llama_set_causal_attn(lctx, true);
            if (!ok) return 1;
        }
    }
    const float * logits = llama_get_logits_ith(lctx, -1);
    llama_synchronize(lctx);
    double t_prefill = now_ms() - t2;
    if (!logits) {
        fprintf(stderr, "llamacpp-mtmd-probe: no logits on the last row\n");
        return 1;
    }

    printf("{\"chunks\": [");
    for (size_t c = 0; c < n_chunks; c++) {
        const mtmd_input_chunk * ch = mtmd_input_chunks_get(chunks, c);
        printf("%s", c ? ", " : "");
        if (mtmd_input_chunk_get_type(ch) == MTMD_INPUT_CHUNK_TYPE_TEXT) {
            size_t n = 0;
            const llama_token * ids = mtmd_input_chunk_get_tokens_text(ch, &n);
            printf("{\"type\": \"text\", \"tokens\": [");
            for (size_t i = 0; i < n; i++) printf("%s%d", i ? ", " : "", ids[i]);
            printf("]}");
        } else {
            printf("{\"type\": \"image\", \"rows\": %zu}", mtmd_input_chunk_get_n_tokens(ch));
        }
    }
    printf("], \"n_tokens\": %zu", n_tokens);
    if (mode == "timing") {
        printf(", \"preprocess_ms\": %.3f, \"encode_ms\": %.3f, \"prefill_ms\": %.3f", t_pre, t_encode, t_prefill);
    } else {
        printf(", \"logits\": [");
        for (size_t r = 0; r < rows_logits.size(); r++) {
            printf("%s[", r ? ", " : "");
            for (size_t j = 0; j < rows_logits[r].size(); j++) printf("%s%.9g", j ? ", " : "", rows_logits[r][j]);
            printf("]");
        }
        printf("]");
    }
    printf("}\n");

    llama_free(lctx);
    mtmd_input_chunks_free(chunks);
    mtmd_bitmap_free(bw.bitmap);
    mtmd_free(mctx);
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
