/*
 * pagedlm.h - the public interface of libpagedlm.
 *
 * What this is for: programs (the pagedlm CLI, the server, embedders) load a
 * model, tokenize text, run the packed-batch forward and sample tokens through
 * these functions. What it is not for: kernels, file formats and other
 * internals, which live under src/ and may change without notice.
 *
 * Conventions: every function that can fail returns 0 on success and -1 on
 * failure, with a message in the caller's pdl_error naming the file, field or
 * offset at fault. The library never prints to stdout and never exits.
 */
#ifndef PAGEDLM_H
#define PAGEDLM_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What libpagedlm.so exports: every function declared in this header and
 * nothing else. The library is compiled with -fvisibility=hidden; this
 * pragma gives the declarations below default visibility, which their
 * definitions inherit (tests/install/check_exports.sh checks the .so). */
#if defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

#define PDL_ERROR_MAX 1024

/* A failure description, filled by the function that failed. */
typedef struct pdl_error {
    char message[PDL_ERROR_MAX];
} pdl_error;

/* ---------------------------------------------------------------------------
 * Models
 * ------------------------------------------------------------------------- */

typedef struct pdl_model pdl_model;

typedef enum pdl_kv_dtype {
    PDL_KV_F16 = 0,  /* default: half the memory, moves logits by ~3e-4 */
    PDL_KV_F32 = 1,  /* exact; used by the reference tests */
    PDL_KV_Q8_0 = 2, /* K/V rows per head as Q8_0 blocks of 32 (an f16 scale, 32 int8): 0.53x F16's memory;
                        head_dim a multiple of 32 (or below 32: one block per head) */
    PDL_KV_Q4_0 = 3, /* as Q4_0 blocks of 32 (an f16 scale, 32 4-bit codes): 0.28x F16's memory; head_dim a
                        multiple of 32 (or even and below 32) */
} pdl_kv_dtype;

/* Loading progress: done goes from 0 to 1 (reached once, at the end) as the
 * weight matrices are read and laid out for the kernels, the slow part of a
 * load. Called on the loading thread. */
typedef void (*pdl_load_progress_fn)(double done, void *user);

/* One line of a notice (no newline), for a log the caller keeps. */
typedef void (*pdl_log_fn)(const char *line, void *user);

/* What BF16 weights multiply: activations rounded to BF16 (VDPBF16PS where
 * the CPU has it, as llama.cpp does) or exact F32 products. */
typedef enum pdl_bf16_activations {
    PDL_BF16_ACT_DEFAULT = 0, /* as in effect process-wide (pdl_set_kernels; at first: round where the CPU
                               * has VDPBF16PS) */
    PDL_BF16_ACT_ROUND,       /* activations rounded to BF16 */
    PDL_BF16_ACT_EXACT,       /* exact F32 products */
} pdl_bf16_activations;

typedef struct pdl_model_options {
    int n_threads;        /* worker threads of the load and, by default, of each context over the model
                           * (pdl_context_options); 0 = all online cores */
    int ctx_size;         /* 0 = the model's own context length (what it declares: GGUF {arch}.context_length,
                           * config.json max_position_embeddings; with RoPE scaling configured, the scaled
                           * length); more is refused unless allow_long_context */
    bool allow_long_context; /* take a ctx_size past the model's own, with a log line: positions past it were
                              * not trained, and what the model does there is untested (vLLM's
                              * VLLM_ALLOW_LONG_MAX_MODEL_LEN) */
    pdl_load_progress_fn progress; /* NULL = none */
    void *progress_user;
    bool weights_mapped;  /* leave every matrix in the file mapping (shared with other processes) instead of
                           * copying it into weight panels for the kernels (the default) */
    pdl_log_fn log;       /* the loader's notices, one line each; NULL = none */
    void *log_user;
    const char *kernels;  /* the kernel family of this model and of every context over it: "scalar", "avx2",
                           * "avx512", "neon"; NULL = the one in effect (pdl_set_kernels). Unknown or not
                           * supported here: the best runs and `log` gets pdl_set_kernels' message */
    pdl_bf16_activations bf16_activations; /* how this model's BF16 weights multiply activations; with
                           * this or `kernels` set, the model's contexts keep the model's choice */
} pdl_model_options;

/* Process-wide kernel choices, before models are loaded (the weight layout
 * follows the family) and contexts made (a pdl_context keeps the kernels of
 * the family in effect when it is made, unless its model's options named
 * its own: pdl_model_options.kernels, .bf16_activations): the
 * kernel family ("scalar", "avx2", "avx512", "neon"; NULL leaves it as it
 * is, at first the best this CPU has) and whether BF16 weights multiply activations rounded
 * to BF16 (1), exact F32 products (0), or leave it as it is (-1; at first:
 * where the CPU has VDPBF16PS). -1 with err "NAME is not ...; using BEST"
 * when the family is unknown or not supported here (the best one runs). */
int pdl_set_kernels(const char *isa, int bf16_activations, pdl_error *err);

/* Process-wide order of operations of attention in the contexts made from
 * now on (a pdl_context keeps the order in effect when it is made):
 * "f32" (the default: F32 products, the same bits on every family), "bf16"
 * (Q, K, P and V rounded to BF16 and multiplied in pairs fixed by absolute
 * position: the AVX-512 family with AVX512_BF16, and the portable family,
 * which emulates it bit for bit) or "amx" (the same pairs on AMX tiles,
 * where the CPU has AMX-BF16 and Linux grants the tile state; its bits are
 * the hardware's). Each is batch invariant; docs/cli.md says what each
 * costs in accuracy and gains in speed. NULL leaves it as it is. -1 with
 * err "NAME is not one of f32, bf16, amx; ..." (the order stays) or, when
 * the active family lacks that order, "the ORDER order is not available to
 * the FAMILY kernels here; they attend in the ORDER order" (the order is
 * set: another family, or a context whose model names one, may have it). */
int pdl_set_attention(const char *order, pdl_error *err);

/* The fill-in-the-middle tokens a vocabulary declares (llama.cpp's FIM_PRE
 * ... FIM_SEP): from GGUF tokenizer.ggml.fim_*_token_id, or else by their
 * text (Qwen2.5-Coder's <|fim_prefix|>, StarCoder's <fim_prefix>, CodeLlama's
 * "▁<PRE>", DeepSeek-Coder's <｜fim▁begin｜>, ...); -1 for each one it lacks.
 * A model can fill in the middle when it has pre, suf and mid. */
typedef struct pdl_fim_tokens {
    int32_t pre;              /* before the prefix */
    int32_t suf;              /* before the suffix */
    int32_t mid;              /* before the middle, which the model writes */
    int32_t pad;              /* padding; ends generation */
    int32_t rep;              /* repository name (repository-level prompts) */
    int32_t sep;              /* before each file of a repository-level prompt */
} pdl_fim_tokens;

/* What an embedding request returns (vLLM's pooling types): the model's
 * final hidden state, after its final norm, of one prompt row or the mean
 * over them. */
typedef enum pdl_pooling {
    PDL_POOLING_NONE = 0,        /* a generation request */
    PDL_POOLING_LAST,            /* the last prompt row (Qwen3-Embedding, gte-Qwen2: decoder embedding models) */
    PDL_POOLING_MEAN,            /* the mean over every prompt row */
    PDL_POOLING_CLS,             /* the first row */
} pdl_pooling;

/* Hyperparameters as the engine uses them, whatever the source format. */
typedef struct pdl_model_info {
    const char *arch;         /* the family (src/model/arch.c): "llama", "qwen3", "mixtral", ... */
    const char *source;       /* "gguf" or "safetensors" */
    int n_layers;
    int hidden;               /* hidden size (embedding width) */
    int n_heads;
    int n_kv_heads;
    int head_dim;
    int ffn;                  /* intermediate size (an expert's, with experts) */
    int n_experts;            /* 0 for a dense MLP */
    int n_experts_used;       /* experts each token runs */
    int vocab;
    int ctx_len;              /* context length in effect */
    int bos_id;               /* -1 when none */
    int eos_id;               /* -1 when none */
    bool add_bos;             /* the tokenizer prepends BOS by default */
    pdl_fim_tokens fim;       /* the tokenizer's fill-in-the-middle tokens (all -1 without a tokenizer) */
    const char *weight_types; /* e.g. "F32" or "F16,F32" */
    int probe_state;          /* selective-logits probe, run at load: 0 rejected, 1 passed */
    /* Hybrid models (Qwen3.5: Gated DeltaNet linear attention beside full
     * attention): layers that keep a fixed-size recurrent state per
     * sequence instead of K/V rows. All 0 for other models. */
    int n_recurrent_layers;
    size_t state_bytes;       /* one state slot (pdl_kv_cache_create_hybrid), all recurrent layers */
    int state_chunk;          /* the state is kept at multiples of this many positions (the delta rule's
                               * chunks, counted from the sequence start): a prefix snapshot is taken
                               * at such a boundary (pdl_kv_cache_copy_state) */
    int state_max_rows;       /* a step may give one sequence at most this many rows that could be
                               * taken back (draft verification; see pdl_batch.state_slots) */
    int n_mtp_layers;         /* multi-token-prediction blocks loaded (0 or 1): speculative decoding's
                               * "mtp" method drafts with the first */
    /* What the model's files say of it as an embedding model: */
    pdl_pooling pooling;      /* GGUF pooling_type, or sentence-transformers' 1_Pooling/config.json; NONE when
                               * they name none */
    bool pool_normalize;      /* sentence-transformers' Normalize module (GGUF: always, as llama.cpp) */
    bool matryoshka;          /* config.json's matryoshka_dimensions or is_matryoshka: may be cut short */
    bool encoder;             /* an encoder (BERT): embeddings only, no LM head; a prompt's rows attend to each
                               * other both ways, so it is computed in one step (at most
                               * max_num_batched_tokens and ctx_len tokens) */
} pdl_model_info;

/* Loads a .gguf file or a Hugging Face folder (config.json + safetensors). */
int pdl_model_load(pdl_model **out, const char *path,
                   const pdl_model_options *opts, pdl_error *err);
void pdl_model_free(pdl_model *model);
void pdl_model_get_info(const pdl_model *model, pdl_model_info *info);
/* The logits of tokens ids[0 .. n) for one final-normed hidden state h
 * (hidden floats: an embedding request's PDL_POOLING_LAST vector without
 * normalization): those rows of the LM head only, dot products in double,
 * then the head's scaling and soft-cap. A yes/no reranker's score comes from
 * two of them. -1 (err) for an id outside the vocabulary. */
int pdl_model_token_logits(const pdl_model *model, const float *h, const int32_t *ids, int n, float *out,
                           pdl_error *err);

/* One tensor type of a model's files (pdl_model_tensor_types): what a
 * "Q4_K_M" or "UD-Q4_K_XL" file really holds, as gguf-dump sums it up. */
typedef struct pdl_tensor_type_stats {
    const char *type;         /* "Q4_K", "F32", ... */
    int n_tensors;
    uint64_t bytes;           /* as stored */
    int n_expanded;           /* matrices of a type without a dot kernel of its own: their rows are
                               * expanded to F32 on every multiply (the slow path) */
    const char *example;      /* a tensor of this type (an expanded matrix when there is one) */
} pdl_tensor_type_stats;

/* Fills out with up to max types, by bytes (largest first); returns how
 * many types there are. The names live as long as the model. */
int pdl_model_tensor_types(const pdl_model *model, pdl_tensor_type_stats *out, int max);

/* One model family the loaders know (a row of the architecture table). */
typedef struct pdl_arch_info {
    const char *name;           /* as pdl_model_info.arch names it */
    const char *hf_model_types; /* config.json model_type values, space-separated; NULL: none */
    const char *gguf_arch;      /* GGUF general.architecture values, space-separated; NULL: none */
    const char *about;          /* one line: what sets the family apart */
    bool experts;               /* a mixture-of-experts family */
} pdl_arch_info;

/* Row i of the table into *out; false when i is past its end. */
bool pdl_architecture(size_t i, pdl_arch_info *out);

/* ---------------------------------------------------------------------------
 * Images and vision-language models
 * ------------------------------------------------------------------------- */

/* A decoded image: 8-bit RGB pixels and a 128-bit hash of the bytes it was
 * decoded from (which keys the encoder cache and the prefix cache). */
typedef struct pdl_image pdl_image;

/* PNG, JPEG or WebP bytes (told by their signature); `what` names the
 * image in messages (a path, "image 2"). Corrupt or truncated data fails
 * with the decoder's reason; images over 8192 x 8192 pixels are refused. */
int pdl_image_decode(pdl_image **out, const void *bytes, size_t n, const char *what, pdl_error *err);
int pdl_image_load(pdl_image **out, const char *path, pdl_error *err);
/* An image URL as OpenAI's image_url.url: "data:image/...;base64,..." or,
 * when allowed_dir is not NULL, "file:///path" naming a file under
 * allowed_dir both by its text (dot segments removed) and once resolved;
 * any path outside gets one message, whether or not it exists. http(s)
 * URLs are refused (nothing is fetched), with a message saying that only
 * data URLs are accepted. */
int pdl_image_from_url(pdl_image **out, const char *url, size_t len, const char *allowed_dir, pdl_error *err);
void pdl_image_free(pdl_image *img);
int pdl_image_width(const pdl_image *img);
int pdl_image_height(const pdl_image *img);

/* The vision tower, projector and image processor of a vision-language
 * model. */
typedef struct pdl_vision pdl_vision;

/* Loads it from a Hugging Face folder (LlavaForConditionalGeneration,
 * LlavaNextForConditionalGeneration, Gemma3ForConditionalGeneration: the
 * folder of the text model) or a llama.cpp mmproj GGUF (projector type mlp
 * or gemma3). text is the text model
 * (loaded from the same folder, or from its own GGUF): its width, tokenizer
 * and default thread count (the vision model has worker threads of its
 * own); it must outlive the vision model. */
int pdl_vision_load(pdl_vision **out, const char *path, const pdl_model *text, pdl_error *err);
void pdl_vision_free(pdl_vision *v);

typedef struct pdl_vision_info {
    const char *family;       /* "llava", "llava_next", "gemma3", "qwen2_5_vl" */
    const char *tower;        /* "clip", "siglip", "qwen2_5_vit" */
    const char *source;       /* "safetensors", "gguf" */
    int image_size, patch_size, hidden, n_layers, n_layers_run, n_heads, ffn;
    int rows_per_image;       /* prompt rows per image; -1: it depends on the image's size (LLaVA 1.6) */
    int32_t image_token_id;   /* the token id image rows carry in the prompt (-1: none in the vocabulary) */
    const char *placeholder;  /* what a chat template writes per image: "<image>", "<start_of_image>" */
    bool bidirectional;       /* an image's rows attend to each other both ways (Gemma 3) */
} pdl_vision_info;
void pdl_vision_get_info(const pdl_vision *v, pdl_vision_info *info);

/* Rows an image takes in the prompt. */
int pdl_vision_image_rows(const pdl_vision *v, const pdl_image *img);
/* Processor, tower and projector: *rows (n_rows x the text model's hidden
 * size, malloc'ed) are the image's prompt rows. The vision model's own
 * threads and scratch: it may run while a forward of the text model runs
 * on another thread, but one image at a time per vision model. */
int pdl_vision_encode(pdl_vision *v, const pdl_image *img, float **rows, int *n_rows, pdl_error *err);

/* One image of a prompt: its rows are prompt positions [position, position
 * + pdl_vision_image_rows). */
typedef struct pdl_mm_input {
    const pdl_image *image;
    int position;
} pdl_mm_input;

/* A prompt with images: token ids (image rows carry the image token id, or
 * 0 when the vocabulary has none) and where each image's rows start. */
typedef struct pdl_mm_prompt {
    int32_t *ids;
    size_t n_ids;
    pdl_mm_input *images;     /* [n_images], image pointers as given */
    int n_images;
} pdl_mm_prompt;

/* Tokenizes text whose images sit where `marker` occurs (e.g. "<__media__>",
 * llama.cpp's, or the model's own placeholder from a chat template), laying
 * out each image as the model's processor does (LLaVA: the image token
 * repeated once per row; Gemma 3: "\n\n<start_of_image>", the rows,
 * "<end_of_image>\n\n"; Qwen2.5-VL: <|vision_start|>, <|image_pad|> per row,
 * <|vision_end|>, in place of the marker, which may be the whole triple its
 * chat template writes). With no marker in the text, the images go first.
 * The number of markers must equal n_images. flags: PDL_TOK_* (special-token
 * text is always parsed). */
int pdl_mm_tokenize(const pdl_model *m, const pdl_vision *v, const char *text, size_t len, const char *marker,
                    const pdl_image *const *images, int n_images, unsigned flags, pdl_mm_prompt *out,
                    pdl_error *err);
void pdl_mm_prompt_free(pdl_mm_prompt *p);
/* The two-way spans of a prompt's n positions (pdl_batch's span_first /
 * span_last): each image's rows form one span when the model attends both
 * ways within an image (pdl_vision_info.bidirectional: Gemma 3), every
 * other position is its own. Returns whether there is any span (false:
 * the arrays hold the positions only, and callers may pass NULL). */
bool pdl_mm_spans(const pdl_vision *v, const pdl_mm_input *images, int n_images, int n, int32_t *span_first,
                  int32_t *span_last);
/* M-RoPE positions of a prompt of n rows with images (Qwen2.5-VL; its
 * processor's get_rope_index): pos3 [n][3] (t, h, w) per row, text rows
 * all three equal and counting on from the previous row's largest + 1, an
 * image's rows (s, s + row, s + col) over its merged grid; *delta is what
 * rows past the prompt add to their index (all three components). Returns
 * whether the model uses them (false: nothing written, *delta 0). */
bool pdl_mm_rope_positions(const pdl_vision *v, const pdl_mm_input *images, int n_images, int n, int32_t *pos3,
                           int32_t *delta);

/* ---------------------------------------------------------------------------
 * Tokenizer (the one that came with the model)
 * ------------------------------------------------------------------------- */

/* Whether the model came with a usable tokenizer (text in and out). */
bool pdl_model_has_tokenizer(const pdl_model *model);

/* A model's tokenizer is read-only once loaded: pdl_tokenize*, pdl_detokenize
 * and separate pdl_detok streams may run on several threads at once, also
 * while an engine steps on another thread.
 *
 * Encodes UTF-8 text. add_special: prepend BOS when the tokenizer does.
 * *ids is malloc'ed; the caller frees it. */
int pdl_tokenize(const pdl_model *model, const char *text, size_t len,
                 bool add_special, int32_t **ids, size_t *n_ids, pdl_error *err);

/* Decodes ids to text (special tokens skipped); *text is malloc'ed and
 * NUL-terminated, *len (when not NULL) its length in bytes: the text itself
 * may hold NUL bytes (token <0x00>), so callers that keep it carry *len. */
int pdl_detokenize(const pdl_model *model, const int32_t *ids, size_t n_ids, char **text, size_t *len,
                   pdl_error *err);

/* The same with PDL_TOK_* flags (below): PDL_TOK_PARSE_SPECIAL turns
 * special-token text such as "<|im_start|>" into its id, as a rendered chat
 * template needs. */
int pdl_tokenize_ex(const pdl_model *model, const char *text, size_t len, unsigned flags, int32_t **ids,
                    size_t *n_ids, pdl_error *err);

/* The same with PDL_TOK_KEEP_SPECIAL: special tokens' text kept. */
int pdl_detokenize_ex(const pdl_model *model, const int32_t *ids, size_t n_ids, unsigned flags, char **text,
                      size_t *len, pdl_error *err);

/* One file of a repository-level fill-in-the-middle prompt. */
typedef struct pdl_fim_file {
    const char *name;         /* NULL: "tmp", as llama-server names a file without one */
    size_t name_len;
    const char *text;
    size_t text_len;
} pdl_fim_file;

/* A fill-in-the-middle request as token ids of plain text (pdl_tokenize
 * without BOS; special-token text left as text). */
typedef struct pdl_fim_input {
    const int32_t *prefix;    /* the text before the hole */
    size_t n_prefix;
    const int32_t *suffix;    /* the text after it */
    size_t n_suffix;
    const int32_t *middle;    /* the start of the middle, right after the prefix (llama-server's "prompt") */
    size_t n_middle;
    bool repo_level;          /* llama-server's repository-level context before the prefix: FIM_REP
                                 "myproject\n", each file as FIM_SEP "name\n" text, FIM_SEP "filename\n"
                                 (each FIM_* part only when the vocabulary has the token; files without
                                 FIM_SEP follow "\n\n--- snippet ---\n\n") */
    const pdl_fim_file *extra;/* [n_extra] the other files (repo_level) */
    int n_extra;
    int n_batch;              /* > 0: cut as llama-server does: the prefix keeps its last 3 (n_batch / 4)
                                 ids, the suffix its first n_batch / 4 - 2 - n_middle, the context its
                                 last n_ctx - n_batch - 2 n_predict; 0: nothing is cut */
    int n_ctx, n_predict;
} pdl_fim_input;

/* The prompt of a fill-in-the-middle request, as llama-server's
 * format_infill lays it out (prefix-suffix-middle):
 *   [context] [BOS] FIM_PRE prefix middle FIM_SUF suffix FIM_MID
 * BOS when the tokenizer adds it. *ids is malloc'ed; *truncated (may be
 * NULL) says whether anything was cut. Fails when the vocabulary has no
 * FIM_PRE, FIM_SUF or FIM_MID (pdl_model_info.fim). */
int pdl_fim_prompt(const pdl_model *model, const pdl_fim_input *in, int32_t **ids, size_t *n_ids, bool *truncated,
                   pdl_error *err);

/* Streaming detokenizer: feed ids one at a time, receive only complete UTF-8.
 * The concatenation of all outputs equals the whole sequence decoded at once.
 * context (e.g. the prompt) is decoded silently first, so a continuation
 * reads as it does after that context. NULL when the model has no tokenizer. */
typedef struct pdl_detok pdl_detok;
pdl_detok *pdl_detok_new(const pdl_model *model, const int32_t *context, size_t n_context);
/* The newly completed text for `id` (possibly ""), valid until the next call;
 * pdl_detok_len gives its length in bytes (it may hold NUL bytes). */
const char *pdl_detok_push(pdl_detok *d, int32_t id);
const char *pdl_detok_flush(pdl_detok *d);  /* pending incomplete bytes as U+FFFD */
size_t pdl_detok_len(const pdl_detok *d);   /* bytes of the last push or flush */
void pdl_detok_free(pdl_detok *d);

/* ---------------------------------------------------------------------------
 * Tokenizer on its own (no weights needed)
 * ------------------------------------------------------------------------- */

typedef struct pdl_tokenizer pdl_tokenizer;

/* Loads the tokenizer of a .gguf file (its tokenizer.ggml.* metadata), or of
 * a folder holding tokenizer.json (+ tokenizer_config.json): a Hugging Face
 * model folder or one with only the tokenizer files. */
int pdl_tokenizer_load(pdl_tokenizer **out, const char *path, pdl_error *err);
void pdl_tokenizer_free(pdl_tokenizer *tok);
int pdl_tokenizer_vocab_size(const pdl_tokenizer *tok);

/* Flags of pdl_tokenizer_encode / pdl_tokenizer_decode. */
enum {
    PDL_TOK_ADD_SPECIAL = 1u << 0,   /* encode: add BOS/EOS as the tokenizer does (HF encode(text)) */
    PDL_TOK_PARSE_SPECIAL = 1u << 1, /* encode: special-token text ("<|im_start|>") becomes its id */
    PDL_TOK_KEEP_SPECIAL = 1u << 2,  /* decode: keep special tokens' text (skipped by default) */
};

/* UTF-8 text (any bytes) -> ids, exactly as Hugging Face tokenizers encodes;
 * *ids is malloc'ed. */
int pdl_tokenizer_encode(const pdl_tokenizer *tok, const char *text, size_t len, unsigned flags,
                         int32_t **ids, size_t *n_ids, pdl_error *err);
/* ids -> text (*text malloc'ed, NUL-terminated, *len bytes when len != NULL).
 * Fails on an id outside the vocabulary. */
int pdl_tokenizer_decode(const pdl_tokenizer *tok, const int32_t *ids, size_t n_ids, unsigned flags,
                         char **text, size_t *len, pdl_error *err);

/* ---------------------------------------------------------------------------
 * KV cache and the packed-batch forward
 * ------------------------------------------------------------------------- */

typedef struct pdl_kv_cache pdl_kv_cache;

/* K/V storage for n_blocks blocks of block_size tokens, every layer. Who
 * holds which block is the caller's business: the engine has its own block
 * pool; a pdl_seq takes blocks 0, 1, ... of a cache of its own. */
int pdl_kv_cache_create(pdl_kv_cache **out, const pdl_model *model,
                        pdl_kv_dtype dtype, int block_size, int n_blocks,
                        pdl_error *err);
void pdl_kv_cache_free(pdl_kv_cache *kv);
/* Copies the first n_slots token slots of block src to block dst, every layer. */
void pdl_kv_cache_copy_block(pdl_kv_cache *kv, int32_t src, int32_t dst, int n_slots);
/* The same storage with n_state_slots recurrent state slots beside the
 * blocks (a hybrid model's linear-attention layers; pdl_model_info's
 * state_bytes each). pdl_kv_cache_create gives a hybrid model one slot
 * (slot 0, which a pdl_seq uses) and other models none. */
int pdl_kv_cache_create_hybrid(pdl_kv_cache **out, const pdl_model *model, pdl_kv_dtype dtype, int block_size,
                               int n_blocks, int n_state_slots, pdl_error *err);
int pdl_kv_cache_state_slots(const pdl_kv_cache *kv);
/* Copies the state a sequence has once positions [0, position) are computed
 * from slot src to slot dst (forks, prefix snapshots and their restores):
 * the delta-rule state at the last state_chunk boundary, the chunk's
 * positions since, and the convolution inputs before `position`. */
void pdl_kv_cache_copy_state(pdl_kv_cache *kv, int32_t src, int32_t dst, int position);
/* Bytes one block takes (K and V, all layers). */
size_t pdl_kv_cache_block_bytes(const pdl_model *model, pdl_kv_dtype dtype, int block_size);

/*
 * The run state of forwards over one loaded model: worker threads, the
 * forward's scratch and counters. The model itself is never written after
 * load, so any number of contexts (engines, the vision encoder, tests) may
 * run over one model at once, each on its own thread; one context runs one
 * forward at a time. The model must outlive its contexts.
 */
typedef struct pdl_context pdl_context;

typedef struct pdl_context_options {
    int n_threads;        /* 0 = the model's (pdl_model_options.n_threads) */
} pdl_context_options;

/* opts may be NULL (every default). */
int pdl_context_create(pdl_context **out, const pdl_model *model, const pdl_context_options *opts,
                       pdl_error *err);
void pdl_context_free(pdl_context *ctx);
const pdl_model *pdl_context_model(const pdl_context *ctx);
int pdl_context_threads(const pdl_context *ctx);
/* Expert MLPs this context has run (one per expert with rows, per layer
 * and forward): a prefill reads each chosen expert once, a decode step k. */
uint64_t pdl_context_expert_runs(const pdl_context *ctx);

/*
 * LoRA adapters (src/model/lora.c): low-rank deltas y += scale * B (A x) on
 * a model's per-layer linear weights (q, k, v, o, gate, up, down), applied
 * per sequence in a packed batch, so sequences of different adapters (or of
 * none) run in one forward. Loaded from a PEFT folder (adapter_config.json
 * + adapter_model.safetensors) or a llama.cpp LoRA GGUF, checked against
 * the model's shapes, held as F32. Reference counted: a request or batch
 * user takes a reference (pdl_lora_ref); pdl_lora_free drops one and frees
 * the adapter with the last. The model must outlive its adapters.
 */
typedef struct pdl_lora pdl_lora;

#define PDL_LORA_MAX_RANK 512

typedef struct pdl_lora_info {
    int rank;
    float alpha;
    float scale;          /* alpha / rank, or alpha / sqrt(rank) with use_rslora */
    int n_pairs;          /* (layer, module) pairs the adapter changes */
    char modules[64];     /* the modules it changes, e.g. "q,v,o,gate,down" */
    uint64_t key[2];      /* a hash of its ranks, scale and weights: the prefix cache keeps adapters apart by it */
} pdl_lora_info;

/* Loads the adapter at path (a PEFT folder, its adapter_config.json, or a
 * llama.cpp LoRA GGUF) for model; a clear error naming the file and tensor
 * when it does not fit the model or uses what is not supported (DoRA, bias,
 * modules_to_save, per-module rank or alpha patterns, ...). */
int pdl_lora_load(pdl_lora **out, const pdl_model *model, const char *path, pdl_error *err);
pdl_lora *pdl_lora_ref(pdl_lora *lora);
void pdl_lora_free(pdl_lora *lora);
void pdl_lora_get_info(const pdl_lora *lora, pdl_lora_info *info);

/*
 * One forward over a packed batch of sequences. Row i (0 <= i < n_tokens) is
 * token token_ids[i] at position positions[i] of the sequence s whose segment
 * cu_seqlens[s] <= i < cu_seqlens[s+1] holds it. Each sequence's K/V rows go to
 * the cache slots slot_mapping[i] (slot = block * block_size + offset); its
 * attention reads positions 0 .. positions[i] through block_tables[s].
 * Positions inside a segment are consecutive; positions before a segment's
 * first row must already be in the cache.
 *
 * Only the rows in logits_indices (ascending) get the final norm and the LM
 * head: logits_out holds n_logits x vocab floats, row j for input row
 * logits_indices[j]. A row's result does not depend on the other rows.
 * full_logits (measurement and the load-time probe only) runs the norm and
 * the head over every row, as engines without selective logits do, and then
 * copies the same rows out.
 */
typedef struct pdl_batch {
    int n_tokens;
    const int32_t *token_ids;            /* [n_tokens] */
    const int32_t *positions;            /* [n_tokens] */
    const int32_t *slot_mapping;         /* [n_tokens] */
    int n_seqs;
    const int32_t *cu_seqlens;           /* [n_seqs + 1], cu_seqlens[0] = 0 */
    const int32_t *const *block_tables;  /* [n_seqs][blocks of that sequence] */
    int n_logits;
    const int32_t *logits_indices;       /* [n_logits] */
    bool full_logits;
    /* Embedding rows (images): NULL, or [n_tokens] where embd[i], when not
     * NULL, is row i's input vector (hidden floats, taken as it is: no
     * embedding scale) in place of token_ids[i]'s embedding. */
    const float *const *embd;
    /* Two-way spans (Gemma 3's images, whose rows attend to each other both
     * ways): NULL, or both [n_tokens], the positions of the first and last
     * row of the span row i belongs to; a row outside any span holds its own
     * position in both. Row i attends to the keys of the causal rule (its
     * layer's window included) and to every key of its span:
     * [min(causal first, span_first[i]), max(positions[i], span_last[i])].
     * The span's rows from row i on must be in the batch (span_last[i] at
     * most the last position of i's segment): a span is computed whole. */
    const int32_t *span_first, *span_last;
    /* M-RoPE positions (a model whose config gives mrope_section: Qwen2-VL,
     * Qwen2.5-VL): NULL, or [n_tokens][3], row i's temporal, height and
     * width positions, which turn its RoPE sections in place of
     * positions[i]. positions[i] stays the row's index in its sequence (its
     * KV slot and the causal rule); NULL: all three are positions[i]. */
    const int32_t *rope_pos3;
    /* Recurrent state (hybrid models; NULL otherwise): [n_seqs], the state
     * slot of each sequence (pdl_kv_cache_create_hybrid). It holds the
     * sequence's state after positions [0, p) where p is the segment's
     * first position; a segment starting at 0 starts from zero state. The
     * forward leaves the state after the segment's last row. Rows taken
     * back (rejected drafts) need no undo as long as the rows of one step
     * that may be taken back are at most pdl_model_info.state_max_rows and
     * none of them but the segment's first sits at a position p with
     * p % state_chunk == state_chunk - 1 (that row closes a chunk of the
     * state): the next segment then starts at the position kept. */
    const int32_t *state_slots;
    /* LoRA (pdl_lora): NULL, or [n_seqs] the adapter of each sequence (NULL:
     * none), with lora_scale [n_seqs] its multiplier (NULL: 1 each). The
     * adapters must be the forward's model's. A row's result does not
     * depend on the other rows' adapters. */
    const pdl_lora *const *lora;
    const float *lora_scale;
} pdl_batch;

int pdl_forward(pdl_context *ctx, pdl_kv_cache *kv, const pdl_batch *batch,
                float *logits_out, pdl_error *err);

/*
 * The check that selective logits are safe for this model: a short
 * sequence runs once through the full-logits path (every row through the
 * complete head, post-processing included) and once through the selective
 * path, on a context of its own; the sampled rows must be bit-identical.
 * *ok says whether they were; otherwise `reason` (reason_len bytes) says
 * which rows and the largest difference. pdl_model_load runs it once, at
 * the end of the load, and keeps the verdict (pdl_model_info.probe_state);
 * calling it again recomputes the verdict without storing it (the model is
 * not written after load).
 */
int pdl_model_probe_selective_logits(const pdl_model *model, bool *ok, char *reason, size_t reason_len,
                                     pdl_error *err);

/*
 * One sequence over a KV cache of its own, for callers that run a single
 * sequence step by step (`pagedlm logits`, tests): its positions live in
 * blocks 0, 1, ... of the cache in order. The engine keeps its own tables.
 */
typedef struct pdl_seq {
    int32_t *block_table; /* [n_blocks] blocks holding positions in order (0, 1, ...) */
    int n_blocks, cap;
    int n_cached;         /* positions 0 .. n_cached-1 are in the cache */
    void *packer;         /* internal: the engine's batch packer, kept between calls (no allocation per
                           * token); pdl_seq_release frees it */
    const pdl_lora *lora; /* the adapter its rows run with (NULL: none; the caller keeps it alive) */
    float lora_scale;     /* its multiplier; 0 = 1 */
} pdl_seq;

typedef enum pdl_logits_rows {
    PDL_LOGITS_NONE = 0,  /* fill the cache only */
    PDL_LOGITS_LAST,      /* the last row only: n_logits = 1 */
    PDL_LOGITS_ALL,       /* every row: n_logits = n_tokens */
} pdl_logits_rows;

/* What a sequence's rows bring besides their token ids, each NULL or
 * [n_tokens] as pdl_batch's: embedding rows, two-way spans (pdl_mm_spans
 * fills them), and M-RoPE positions ([n_tokens][3]; pdl_mm_rope_positions
 * fills them). */
typedef struct pdl_row_inputs {
    const float *const *embd;
    const int32_t *span_first, *span_last;
    const int32_t *rope_pos3;
} pdl_row_inputs;

/* Appends tokens at positions n_cached.. to the sequence (taking the
 * cache's next blocks as needed) in one forward, with logits for the rows
 * asked. in: the rows' other inputs, or NULL for token rows only. */
int pdl_seq_forward(pdl_context *ctx, pdl_kv_cache *kv, pdl_seq *seq, const int32_t *tokens,
                    const pdl_row_inputs *in, int n_tokens, pdl_logits_rows rows, float *logits_out,
                    pdl_error *err);
/* Empties the sequence (its blocks may be used again from block 0). */
void pdl_seq_release(pdl_kv_cache *kv, pdl_seq *seq);

/* ---------------------------------------------------------------------------
 * Sampling and generation
 * ------------------------------------------------------------------------- */

/*
 * Per-request sampling parameters. A zeroed struct means greedy with no
 * filters and no penalties: every "off" value is 0.
 * Order of application (as vLLM): penalties on the raw logits, then
 * temperature, then min-p, top-k and top-p, then the draw.
 */
typedef struct pdl_sampling {
    float temperature;        /* 0 = greedy (argmax after penalties, ties -> lowest id) */
    int top_k;                /* keep the k most likely tokens; 0 = off */
    float top_p;              /* nucleus: smallest set with mass >= p; 0 or >= 1 = off */
    float min_p;              /* drop tokens with p < min_p * p_max; 0 = off */
    float repetition_penalty; /* > 0, 1 or 0 = off: logits of prompt and generated tokens
                                 divided by it when positive, multiplied when negative */
    float presence_penalty;   /* subtracted once from each token generated so far; 0 = off */
    float frequency_penalty;  /* subtracted per occurrence among generated tokens; 0 = off */
    uint64_t seed;            /* the request's own random stream */
    const struct pdl_logit_bias *logit_bias; /* [n_logit_bias] added to the raw logits first (OpenAI's
                                                logit_bias); copied by pdl_sampler_new */
    int n_logit_bias;
} pdl_sampling;

/* One entry of OpenAI's logit_bias: added to the token's logit before the
 * penalties and every other step (finite; the server allows -100 .. 100). */
typedef struct pdl_logit_bias {
    int32_t token;
    float bias;
} pdl_logit_bias;

/* A token and its log-probability under the model's raw distribution
 * (log-softmax of the logits before any sampling parameter). */
typedef struct pdl_logprob {
    int32_t token;
    float logprob;
} pdl_logprob;

typedef struct pdl_sampler pdl_sampler;
/* NULL when out of memory or when params are invalid (negative temperature,
 * top_k < 0, top_p/min_p outside [0, 1], repetition_penalty < 0, a logit
 * bias that is not finite or names a token outside the vocabulary). */
pdl_sampler *pdl_sampler_new(const pdl_sampling *params, int vocab);
/* Checks params; on failure err names the field and the allowed range.
 * vocab > 0 also checks the logit bias's token ids against it. */
int pdl_sampling_validate(const pdl_sampling *params, int vocab, pdl_error *err);
/* Tokens the repetition penalty applies to besides the generated ones. */
void pdl_sampler_add_prompt(pdl_sampler *s, const int32_t *ids, size_t n);
/* Draws the next token from one row of logits (not modified), and records it
 * as generated (for the penalties). Deterministic for a given seed and
 * history, whatever other requests do. */
int32_t pdl_sampler_sample(pdl_sampler *s, const float *logits);
/* The same with the n_banned tokens in banned[] excluded from this draw (as
 * if their logits were -inf after the logit bias and the penalties): the
 * engine bans EOS and the stop tokens until min_tokens are out. */
int32_t pdl_sampler_sample_ex(pdl_sampler *s, const float *logits, const int32_t *banned, int n_banned);
void pdl_sampler_free(pdl_sampler *s);

/* Raw log-probabilities of one row: *chosen_logprob for `chosen`, and the n
 * most likely tokens in top[0..n) (descending; ties -> lower id). */
void pdl_logprobs(const float *logits, int vocab, int32_t chosen, float *chosen_logprob, pdl_logprob *top, int n);

/* ---------------------------------------------------------------------------
 * Structured output: grammars that constrain what a request generates
 * ------------------------------------------------------------------------- */

/* A model's grammar vocabulary: every token's bytes and their trie, and the
 * model's end tokens. Made once per model by the caller (about 0.1 s for a
 * 150k vocabulary), read-only afterwards, shared by every grammar compiled
 * for it; it must outlive them. Fails when the model has no tokenizer. */
typedef struct pdl_grammar_vocab pdl_grammar_vocab;
int pdl_model_grammar_vocab(const pdl_model *model, pdl_grammar_vocab **out, pdl_error *err);
void pdl_grammar_vocab_free(pdl_grammar_vocab *vocab);

/* A compiled grammar: the language a request's output must belong to.
 * Read-only once compiled (its internal cache is filled under a lock), so
 * one grammar may serve many requests, on several engines and threads at
 * once; reference counted. */
typedef struct pdl_grammar pdl_grammar;

typedef enum pdl_grammar_kind {
    PDL_GRAMMAR_JSON_SCHEMA = 0, /* text: a JSON Schema (the subset in docs/architecture.md) */
    PDL_GRAMMAR_JSON_OBJECT,     /* any JSON object (OpenAI's response_format json_object); text unused */
    PDL_GRAMMAR_JSON_VALUE,      /* any JSON value; text unused */
    PDL_GRAMMAR_REGEX,           /* text: a regex the whole output matches (ECMAScript subset) */
    PDL_GRAMMAR_CHOICE,          /* text: a JSON array of strings; the output is one of them */
    PDL_GRAMMAR_GBNF,            /* text: a GBNF grammar (llama.cpp's format), rule "root" */
    PDL_GRAMMAR_TOOL_CALL,       /* text: an OpenAI "tools" array; the output is a call in tool_format */
} pdl_grammar_kind;

typedef struct pdl_grammar_spec {
    pdl_grammar_kind kind;
    const char *text;            /* see pdl_grammar_kind; NUL-terminated unless len is set */
    size_t len;                  /* 0: strlen(text) */
    /* PDL_GRAMMAR_TOOL_CALL only */
    const char *tool_format;     /* the model's call format, as vLLM's --tool-call-parser names it: "hermes",
                                    "llama3_json", "mistral", "qwen3_coder", "pythonic", "deepseek_v3",
                                    "glm45", "kimi_k2" */
    const char *tool_name;       /* a named function (tool_choice {"function": {"name"}}); NULL: any tool */
    bool parallel;               /* NULL tool_name: one or more calls (OpenAI's parallel_tool_calls) */
} pdl_grammar_spec;

/* What one compilation may cost. A grammar is untrusted input (a request's
 * regex, schema or GBNF): a few bytes such as "(a{1,100}){1,100}" can ask
 * for millions of automaton states, so the compiler counts its work (each
 * step about one memory access: a state or edge made, a state visited) and
 * stops at the first limit reached, with a message that says which.
 * Zero-initialised: the defaults. */
typedef struct pdl_grammar_limits {
    int64_t max_work;            /* steps; 0: 100 000 000 (about 0.5-1 s of one core) */
    int32_t max_states;          /* automaton states over all rules; 0: 200 000 */
    double max_seconds;          /* wall-clock time; 0: 5 s; < 0: none */
    /* Asked every 200 000 steps or so: true stops the compilation (e.g. the
     * client that sent it has gone), and the error says "cancelled". NULL:
     * never. */
    bool (*cancelled)(void *user);
    void *user;
} pdl_grammar_limits;

/* Compiles spec for vocab (which must outlive the grammar) within limits
 * (NULL: the defaults). Errors name what is wrong and where: a GBNF line
 * and column, a regex offset, a schema keyword and its JSON pointer
 * ("unsupported keyword 'not' at /properties/a"), or the limit that a
 * grammar too complex to compile reached. */
int pdl_grammar_compile(pdl_grammar **out, const pdl_grammar_vocab *vocab, const pdl_grammar_spec *spec,
                        const pdl_grammar_limits *limits, pdl_error *err);
/* Another reference (returns g); pdl_grammar_free drops one. */
pdl_grammar *pdl_grammar_ref(pdl_grammar *g);
void pdl_grammar_free(pdl_grammar *g);

/* ---------------------------------------------------------------------------
 * The engine: continuous batching over a paged KV cache
 * ------------------------------------------------------------------------- */

typedef struct pdl_engine pdl_engine;

typedef enum pdl_logits_mode {
    PDL_LOGITS_AUTO = 0,   /* selective when the load-time probe passed */
    PDL_LOGITS_FULL,       /* measurement: every row through the head */
    PDL_LOGITS_SELECTIVE,  /* measurement: selective even if the probe failed */
} pdl_logits_mode;

/* Speculative decoding: who proposes draft tokens (verified k + 1 rows at a
 * time in the normal batch; the output is the same tokens as without). */
typedef enum pdl_spec_method {
    PDL_SPEC_NONE = 0,
    PDL_SPEC_NGRAM,        /* prompt lookup: what followed the longest earlier match of the sequence's end */
    PDL_SPEC_DRAFT_MODEL,  /* a smaller model with the same vocabulary drafts greedily */
    PDL_SPEC_MTP,          /* the model's own multi-token-prediction block drafts greedily (Qwen3.5) */
} pdl_spec_method;

#define PDL_MAX_SPEC_TOKENS 16

typedef struct pdl_engine_options {
    int block_size;              /* tokens per KV block; 0 = 16 */
    size_t kv_cache_memory;      /* bytes for K and V (and a hybrid model's recurrent state slots: at most
                                    half for the running sequences' slots, which lowers max_num_seqs when
                                    fewer fit, up to a quarter for prefix snapshots, the rest blocks);
                                    0 = min(4 GiB, half the available memory) */
    pdl_kv_dtype kv_dtype;       /* F16 (default), F32 or Q8_0 */
    int max_num_seqs;            /* running sequences at most; 0 = 256 */
    int max_num_batched_tokens;  /* rows per step at most; 0 = 2048 */
    int max_prefill_chunk;       /* prompt rows per request per step; 0 = no limit but the budget */
    int max_model_len;           /* longest prompt + output; 0 = the model's context length, lowered (with a
                                    log line) to what the KV pool holds; > 0 = it must not exceed the model's
                                    context length, and creation fails when the pool cannot hold it */
    pdl_logits_mode logits_mode;
    bool no_prefix_caching;      /* prefix caching is on unless this is set (vLLM's
                                    --no-enable-prefix-caching) */
    pdl_spec_method spec_method; /* speculative decoding (vLLM's --speculative-config) */
    int num_speculative_tokens;  /* drafts per step, 1 .. PDL_MAX_SPEC_TOKENS */
    int prompt_lookup_min;       /* n-gram: shortest match (default 1) */
    int prompt_lookup_max;       /* n-gram: longest match (default 5, and at least prompt_lookup_min) */
    const pdl_model *draft_model; /* PDL_SPEC_DRAFT_MODEL: loaded by the caller, outlives the engine */
    int spec_max_batch;          /* no drafts when more sequences than this decode at once; 0 = 4 */
    bool spec_no_pause;          /* keep speculating when the measured cost says it does not pay (tests) */
    pdl_log_fn log;              /* one line per notable event; NULL = none */
    void *log_user;
    /* tests and debugging: called on the stepping thread with each row of
     * logits the engine samples from (the raw row, before any sampling
     * parameter); NULL = none */
    void (*on_logits)(uint64_t request_id, int index, int position, const float *row, int vocab, void *user);
    void *on_logits_user;
    /* tests and debugging: called with each sequence's drafts when they are
     * proposed, the first for position `position`; NULL = none */
    void (*on_drafts)(uint64_t request_id, int index, int position, const int32_t *drafts, int n, void *user);
    void *on_drafts_user;
    /* images: the vision model (loaded by the caller, outlives the engine;
     * NULL = text only). Each request's images are encoded once, when it is
     * added, on the calling thread (with the vision model's own threads). */
    pdl_vision *vision;
    /* Encoded image rows kept across requests by the hash of the image's
     * bytes, least recently used evicted first: the budget in bytes (0 =
     * 256 MiB); no_encoder_cache keeps none (every image encoded). */
    size_t encoder_cache_bytes;
    bool no_encoder_cache;
    /* Hybrid models' prefix caching (vLLM's "align" mode): a cached prefix
     * is usable up to a snapshot of the recurrent state, taken every
     * state_snapshot_interval positions (a multiple of the state's chunk and
     * the block size; 0 = 512, rounded up to such a multiple), at each
     * prompt's last boundary before its end and where the cached blocks a
     * prompt found end; state_snapshot_slots slots
     * hold them (0 = what a quarter of kv_cache_memory holds, at most two
     * per running sequence; -1 = none). Ignored by other models. */
    int state_snapshot_interval;
    int state_snapshot_slots;
} pdl_engine_options;

/* A reasoning model's thinking block as the engine follows it, token by
 * token (src/engine/reasoning.h makes it from a format such as qwen3):
 * while a sequence is inside the block its grammar does not apply (a
 * grammar constrains the answer) and its tokens are counted; once `budget`
 * tokens are out the end token is forced. Before the block (a model that
 * opens it itself) the start token is allowed beside the grammar's tokens,
 * or banned when the budget is 0. Zero-initialised: off. */
typedef struct pdl_reasoning {
    bool enabled;
    int32_t start_token;         /* opens the block (<think>); -1 = the model cannot open it itself */
    int32_t end_token;           /* closes it (</think>) */
    bool starts_inside;          /* the prompt opened the block: the output starts inside it */
    int budget;                  /* tokens inside the block at most; < 0 = no limit; 0 = no thinking */
} pdl_reasoning;

/* A request's stop strings made into one automaton ahead of time (the
 * engine otherwise builds it when the request is added, on its own
 * thread): n non-empty NUL-terminated strings; time and memory linear in
 * their bytes. Reference counted: a request given it keeps a reference, so
 * the caller may free its own at once. */
typedef struct pdl_stop_matcher pdl_stop_matcher;
int pdl_stop_matcher_new(pdl_stop_matcher **out, const char *const *stops, int n, pdl_error *err);
void pdl_stop_matcher_free(pdl_stop_matcher *m);

typedef struct pdl_request_params {
    pdl_sampling sampling;
    int max_tokens;              /* new tokens at most; 0 = up to the context length */
    int min_tokens;              /* EOS and stop tokens are banned, and stop strings not looked for, until
                                    this many tokens are out (vLLM's min_tokens); <= max_tokens */
    bool ignore_eos;             /* keep going after EOS */
    const int32_t *stop_ids;     /* extra token ids that end the sequence (included in tokens) */
    int n_stop_ids;
    const char *const *stop;     /* strings that end the sequence (not included in the text) */
    int n_stop;
    pdl_stop_matcher *stop_matcher; /* the automaton of stop[0 .. n_stop) made beforehand
                                    (pdl_stop_matcher_new), so that a server builds it while it parses the
                                    request rather than on the engine's thread; the engine keeps its own
                                    reference; NULL = the engine builds it */
    int logprobs;                /* top-N logprobs per generated token; -1 = none */
    int prompt_logprobs;         /* top-N logprobs per prompt token; -1 = none */
    int n;                       /* sequences sampled from the prompt (sharing its KV); 0 = 1 */
    const char *cache_salt;      /* prefix-cache isolation (vLLM's cache_salt): requests share cached
                                    blocks only with requests of the same salt; NULL = none (copied) */
    pdl_grammar *grammar;        /* structured output: every sampled row is masked to the tokens this
                                    grammar allows next, EOS only where it may end, and the sequence stops
                                    ("stop") once the grammar is complete; compiled for
                                    pdl_model_grammar_vocab(model); the engine keeps its own reference;
                                    NULL = none. With reasoning on, it applies to the answer */
    pdl_reasoning reasoning;     /* the thinking block (off when zero) */
    const pdl_mm_input *images;  /* [n_images] the prompt's images (pdl_mm_tokenize's layout; needs the
                                    engine's vision model): each takes pdl_vision_image_rows prompt rows from
                                    its position. Encoded when the request is added (the images need not
                                    outlive pdl_engine_add_request); prefix-cache blocks holding image rows
                                    are keyed by the image's hash as well as the ids */
    int n_images;
    pdl_pooling pooling;         /* not NONE: an embedding request: the prompt runs once, nothing is generated
                                    (no logits are computed for it), one PDL_EVENT_EMBEDDING then FINISHED
                                    ("stop"); n must be 1, and no grammar, reasoning or prompt logprobs */
    bool normalize;              /* the embedding is divided by its L2 norm */
    pdl_lora *lora;              /* the LoRA adapter the request runs with (the engine keeps its own reference
                                    while the request lives), or NULL; its prefix-cache blocks are shared only
                                    with requests of the same adapter and scale */
    float lora_scale;            /* the adapter's multiplier (llama.cpp's lora scale); 0 = 1 */
} pdl_request_params;

typedef enum pdl_event_kind {
    PDL_EVENT_TOKEN,             /* a generated token (text may be "" while held back) */
    PDL_EVENT_PROMPT_LOGPROB,    /* logprobs of prompt token `position` (>= 1) */
    PDL_EVENT_FINISHED,          /* the sequence ended: finish_reason says why */
    PDL_EVENT_EMBEDDING,         /* an embedding request's vector (embedding, n_embedding) */
} pdl_event_kind;

typedef struct pdl_event {
    pdl_event_kind kind;
    uint64_t request_id;
    int index;                   /* which of the request's n sequences */
    int32_t token;
    int position;                /* position of `token` in prompt + output */
    const char *text;            /* newly completed text (TOKEN, and FINISHED: the held-back rest) */
    size_t text_len;             /* its bytes: text may hold NUL bytes (token <0x00>) */
    float logprob;               /* of `token`, when logprobs were asked */
    const pdl_logprob *top;      /* [n_top] most likely tokens at this position */
    int n_top;
    const char *finish_reason;   /* FINISHED: "stop", "length" or "abort" */
    const char *stop_string;     /* FINISHED by a stop string: which one (NUL-terminated); else NULL */
    int32_t stop_token;          /* FINISHED by a stop_ids token: its id; else -1 (EOS gives -1, as vLLM) */
    int cached_tokens;           /* FINISHED: prompt tokens whose K/V came from the prefix cache (at the
                                    sequence's first admission) */
    const float *embedding;      /* EMBEDDING: [n_embedding] (the model's hidden size), valid during the call */
    int n_embedding;
} pdl_event;

/* Called from pdl_engine_step on the stepping thread. */
typedef void (*pdl_event_fn)(const pdl_event *ev, void *user);

typedef struct pdl_engine_stats {
    int running, waiting;
    int kv_blocks_total, kv_blocks_used;  /* used: held by a sequence */
    int kv_blocks_cached;        /* free blocks that still hold a cached prefix (reused by a hit, else
                                    evicted when needed) */
    uint64_t prefix_cache_queries; /* prompt tokens looked up in the prefix cache (vLLM's counter) */
    uint64_t prefix_cache_hits;  /* of those, found cached */
    uint64_t encoder_cache_queries; /* images looked up in the encoder cache (vLLM's mm_cache_queries) */
    uint64_t encoder_cache_hits; /* of those, found: their tower run saved */
    uint64_t encoder_cache_evictions; /* images dropped from it for room */
    uint64_t images_encoded;     /* images run through the vision tower (the cache's misses, or every image
                                    without it) */
    size_t encoder_cache_bytes;  /* rows it holds now */
    uint64_t spec_drafts;        /* speculative decoding: proposals verified (vLLM's num_drafts) */
    uint64_t spec_draft_tokens;  /* draft tokens verified */
    uint64_t spec_accepted_tokens; /* of those, accepted */
    uint64_t spec_accepted_per_pos[PDL_MAX_SPEC_TOKENS]; /* accepted at draft position i */
    uint64_t preemptions;
    uint64_t steps;
    uint64_t prompt_tokens;      /* of requests whose prefill has completed (counted then, once, cached tokens
                                    included: vLLM's num_prompt_tokens), not of those still waiting */
    uint64_t generation_tokens;
    bool selective_logits;       /* the mode in effect */
    size_t kv_block_bytes;       /* one KV block (K and V, every attention layer) */
    /* hybrid models' recurrent state (all 0 for other models) */
    int state_slots_total;       /* slots in the pool (live and snapshot ones) */
    int state_slots_used;        /* held by running sequences */
    int state_snapshots;         /* holding a prefix snapshot (dropped for a running sequence when needed) */
    size_t state_slot_bytes;     /* one slot (pdl_model_info's state_bytes) */
    uint64_t state_snapshots_taken, state_snapshots_restored; /* prefix hits started from a snapshot */
} pdl_engine_stats;

/* The engine takes the load-time probe's verdict (when logits_mode is
 * AUTO), makes its own context over the model (pdl_model_options'
 * threads) and sizes the KV pool. */
int pdl_engine_create(pdl_engine **out, const pdl_model *model, const pdl_engine_options *opts, pdl_error *err);
void pdl_engine_free(pdl_engine *e);

/* Queues a request; fails at once (with the reason) if it can never run:
 * empty prompt, ids out of range, prompt plus one token beyond the context
 * or beyond the whole KV pool, invalid sampling parameters. */
int pdl_engine_add_request(pdl_engine *e, const int32_t *prompt, size_t n_prompt, const pdl_request_params *params,
                           pdl_event_fn cb, void *user, uint64_t *id_out, pdl_error *err);
/* Runs one scheduler step (one forward). *active gets the number of
 * requests still running or waiting. */
int pdl_engine_step(pdl_engine *e, int *active, pdl_error *err);
int pdl_engine_run_until_idle(pdl_engine *e, pdl_error *err);
/* Ends a request now: its blocks are freed and each of its live sequences
 * gets a FINISHED event with "abort" (an n > 1 request aborted before its
 * prompt finished has one sequence, hence one event). Returns -1 when no
 * such request is active. The engine is not thread-safe: one thread calls
 * every pdl_engine_* function of an engine. */
int pdl_engine_abort(pdl_engine *e, uint64_t request_id);
void pdl_engine_get_stats(const pdl_engine *e, pdl_engine_stats *stats);
/* The longest prompt + output a request may reach (engine option
 * max_model_len as settled at creation). */
int pdl_engine_max_model_len(const pdl_engine *e);

/* ---------------------------------------------------------------------------
 * Chat templates (rendered as transformers' apply_chat_template does)
 * ------------------------------------------------------------------------- */

typedef struct pdl_chat_template pdl_chat_template;

/* A model's chat template: path is a folder (chat_template.jinja, else
 * chat_template.json, else tokenizer_config.json's chat_template; the
 * special tokens from tokenizer_config.json / special_tokens_map.json) or a
 * .gguf file (tokenizer.chat_template; special tokens from the vocabulary).
 * A template with a syntax error is refused here, with its line. */
int pdl_chat_template_load(pdl_chat_template **out, const char *path, pdl_error *err);
/* A template from its source; bos_token / eos_token may be NULL (undefined). */
int pdl_chat_template_from_source(pdl_chat_template **out, const char *source, const char *bos_token,
                                  const char *eos_token, pdl_error *err);
/* Renders with a JSON object: messages (content a string or a list of parts,
 * tool_calls, reasoning_content), tools, documents, add_generation_prompt and
 * any extra keys (enable_thinking, date_string, ...). Special tokens are
 * defined first and the context's keys override them; tools and documents
 * default to None, add_generation_prompt to false. *text is malloc'ed and
 * NUL-terminated (*len bytes when len != NULL). A template error, e.g. its
 * raise_exception, fails with "chat template line N: MESSAGE". Several
 * threads may render with one template at once. */
int pdl_chat_template_render(const pdl_chat_template *t, const char *context_json, char **text, size_t *len,
                             pdl_error *err);
void pdl_chat_template_free(pdl_chat_template *t);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif
#endif /* PAGEDLM_H */
