/*
 * mm_prompt.c - text with image markers -> prompt ids and image positions,
 * laid out as each model's processor lays them out.
 *
 * As transformers' processors do, each marker is replaced in the text by the
 * model's image sequence (LLaVA: the image token's text once per image row;
 * Gemma 3: "\n\n" <start_of_image> rows <end_of_image> "\n\n"; Qwen2.5-VL:
 * <|vision_start|>, <|image_pad|> once per row, <|vision_end|>), the whole
 * text is tokenized with special tokens parsed, and the image token's runs
 * are the images' rows. A vocabulary without an image token (a GGUF text
 * model converted without it) falls back to llama.cpp's way: the text
 * between markers tokenized piece by piece and the rows inserted between,
 * carrying id 0.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"
#include "vision/image.h"
#include "vision/vision_model.h"

typedef struct sbuf {
    char *p;
    size_t n, cap;
} sbuf;

static int sb_add(sbuf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t cap = (b->n + n + 1) * 2;
        char *p = realloc(b->p, cap);
        if (!p) return -1;
        b->p = p, b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return 0;
}

static const char *find(const char *s, size_t n, const char *needle) {
    size_t m = strlen(needle);
    for (size_t i = 0; m && i + m <= n; i++)
        if (memcmp(s + i, needle, m) == 0) return s + i;
    return NULL;
}

void pdl_mm_prompt_free(pdl_mm_prompt *p) {
    free(p->ids);
    free(p->images);
    memset(p, 0, sizeof *p);
}

/* Whether the vocabulary holds the image token as the special token the
 * processor's expansion needs. */
static bool image_token_usable(const pdl_model *m, const pdl_vision_config *c) {
    if (!m->tok || c->image_token_id < 0 || !c->image_token_text[0]) return false;
    return tok_piece_to_id(m->tok, c->image_token_text, strlen(c->image_token_text)) == c->image_token_id;
}

static int append_ids(pdl_mm_prompt *out, size_t *cap, const int32_t *ids, size_t n) {
    if (out->n_ids + n > *cap) {
        size_t c = (out->n_ids + n) * 2 + 16;
        int32_t *p = realloc(out->ids, c * sizeof *p);
        if (!p) return -1;
        out->ids = p, *cap = c;
    }
    memcpy(out->ids + out->n_ids, ids, n * sizeof *ids);
    out->n_ids += n;
    return 0;
}

/* llama.cpp's layout: pieces tokenized apart, rows of id 0 between;
 * markers = 0 puts the images first. */
static int tokenize_pieces(const pdl_model *m, const pdl_vision *v, const char *text, size_t len, const char *marker,
                           int markers, const pdl_image *const *images, int n_images, unsigned flags,
                           pdl_mm_prompt *out, pdl_error *err) {
    const pdl_vision_config *c = &v->cfg;
    if (c->family == PDL_VLM_GEMMA3 || c->family == PDL_VLM_QWEN25VL)
        return err_fail(err, "images: the text model's vocabulary has no '%s' token (the model's image token)",
                        c->image_token_text[0] ? c->image_token_text : "image");
    size_t cap = 0, ml = strlen(marker);
    const char *p = text, *end = text + len;
    for (int i = 0; i <= n_images; i++) {
        const char *at = i == n_images ? end : markers ? find(p, (size_t)(end - p), marker) : p;
        int32_t *ids = NULL;
        size_t n = 0;
        /* BOS (when the flags ask) only before the first piece */
        unsigned f = ((i == 0 ? flags : flags & ~PDL_TOK_ADD_SPECIAL)) | PDL_TOK_PARSE_SPECIAL;
        if ((at > p || i == 0) && pdl_tokenize_ex(m, p, (size_t)(at - p), f, &ids, &n, err)) return -1;
        int rc = append_ids(out, &cap, ids, n);
        free(ids);
        if (rc) return err_fail(err, "out of memory");
        if (i == n_images) break;
        int rows = pdl_vision_image_rows(v, images[i]);
        out->images[i] = (pdl_mm_input){.image = images[i], .position = (int)out->n_ids};
        for (int r = 0; r < rows; r++) {
            int32_t z = 0;
            if (append_ids(out, &cap, &z, 1)) return err_fail(err, "out of memory");
        }
        if (markers) p = at + ml;
    }
    return 0;
}

int pdl_mm_tokenize(const pdl_model *m, const pdl_vision *v, const char *text, size_t len, const char *marker,
                    const pdl_image *const *images, int n_images, unsigned flags, pdl_mm_prompt *out,
                    pdl_error *err) {
    memset(out, 0, sizeof *out);
    const pdl_vision_config *c = &v->cfg;
    if (!m->tok) return err_fail(err, "images: %s", m->tok_error[0] ? m->tok_error : "the model has no tokenizer");
    if (!marker || !marker[0]) marker = c->placeholder;
    int markers = 0;
    for (const char *p = text, *at; (at = find(p, (size_t)(text + len - p), marker)); p = at + strlen(marker)) markers++;
    if (markers != 0 && markers != n_images)
        return err_fail(err, "images: the prompt has %d image marker%s ('%s') for %d image%s", markers,
                        markers == 1 ? "" : "s", marker, n_images, n_images == 1 ? "" : "s");
    out->images = calloc((size_t)(n_images ? n_images : 1), sizeof *out->images);
    if (!out->images) return err_fail(err, "out of memory");
    out->n_images = n_images;
    for (int i = 0; i < n_images; i++)
        if (pdl_vision_image_rows(v, images[i]) < 0) {
            pdl_mm_prompt_free(out);
            return err_fail(err, "images: image %d (%d x %d pixels) has an aspect ratio over 200, which the model's "
                            "processor refuses", i, images[i]->width, images[i]->height);
        }
    if (!image_token_usable(m, c)) {
        if (tokenize_pieces(m, v, text, len, marker, markers, images, n_images, flags, out, err)) {
            pdl_mm_prompt_free(out);
            return -1;
        }
        return 0;
    }
    /* the processor's expansion of the text */
    sbuf b = {0};
    const char *p = text, *end = text + len;
    int rc = 0;
    for (int i = 0; i <= n_images && rc == 0; i++) {
        const char *at = i == n_images ? end : markers ? find(p, (size_t)(end - p), marker) : p;
        rc |= sb_add(&b, p, (size_t)(at - p));
        if (i == n_images) break;
        int rows = pdl_vision_image_rows(v, images[i]);
        char boi[64] = "", eoi[64] = "";
        if (c->family == PDL_VLM_GEMMA3) {
            size_t l;
            const char *s = c->boi_id >= 0 ? tok_id_to_piece(m->tok, c->boi_id, &l) : NULL;
            if (s && l < sizeof boi) memcpy(boi, s, l), boi[l] = 0;
            s = c->eoi_id >= 0 ? tok_id_to_piece(m->tok, c->eoi_id, &l) : NULL;
            if (s && l < sizeof eoi) memcpy(eoi, s, l), eoi[l] = 0;
            rc |= sb_add(&b, "\n\n", 2) | sb_add(&b, boi, strlen(boi));
        }
        /* Qwen2.5-VL: the marker (<__media__>, or the placeholder the chat
         * template writes per image) becomes <|vision_start|> pads <|vision_end|> */
        bool qwen_wrap = c->family == PDL_VLM_QWEN25VL;
        if (qwen_wrap) {
            size_t l;
            const char *s = tok_id_to_piece(m->tok, c->boi_id, &l);
            if (s && l < sizeof boi) memcpy(boi, s, l), boi[l] = 0;
            s = tok_id_to_piece(m->tok, c->eoi_id, &l);
            if (s && l < sizeof eoi) memcpy(eoi, s, l), eoi[l] = 0;
            rc |= sb_add(&b, boi, strlen(boi));
        }
        for (int r = 0; r < rows && rc == 0; r++) rc |= sb_add(&b, c->image_token_text, strlen(c->image_token_text));
        if (c->family == PDL_VLM_GEMMA3) rc |= sb_add(&b, eoi, strlen(eoi)) | sb_add(&b, "\n\n", 2);
        if (qwen_wrap) rc |= sb_add(&b, eoi, strlen(eoi));
        p = markers ? at + strlen(marker) : p;
    }
    if (rc) {
        free(b.p);
        pdl_mm_prompt_free(out);
        return err_fail(err, "out of memory");
    }
    rc = pdl_tokenize_ex(m, b.p ? b.p : "", b.n, flags | PDL_TOK_PARSE_SPECIAL, &out->ids, &out->n_ids, err);
    free(b.p);
    if (rc) {
        pdl_mm_prompt_free(out);
        return -1;
    }
    /* the images' rows: runs of the image token, in order */
    int k = 0;
    for (size_t i = 0; i < out->n_ids;) {
        if (out->ids[i] != c->image_token_id) {
            i++;
            continue;
        }
        if (k == n_images) {
            pdl_mm_prompt_free(out);
            return err_fail(err, "images: the prompt text holds the image token '%s' outside its %d image%s",
                            c->image_token_text, n_images, n_images == 1 ? "" : "s");
        }
        int rows = pdl_vision_image_rows(v, images[k]);
        size_t j = i;
        while (j < out->n_ids && j < i + (size_t)rows && out->ids[j] == c->image_token_id) j++;
        if (j - i != (size_t)rows) {
            pdl_mm_prompt_free(out);
            return err_fail(err, "images: image %d's %d rows tokenized into %zu image tokens", k, rows, j - i);
        }
        out->images[k] = (pdl_mm_input){.image = images[k], .position = (int)i};
        k++;
        i = j;
    }
    if (k != n_images) {
        pdl_mm_prompt_free(out);
        return err_fail(err, "images: found the rows of %d of %d images after tokenizing", k, n_images);
    }
    return 0;
}
