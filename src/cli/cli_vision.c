/*
 * cli_vision.c - what `pagedlm run` and `pagedlm logits` share for images:
 * --image FILE (repeatable) and --mmproj FILE, the vision model they need,
 * and a -p prompt whose images sit at llama.cpp's marker "<__media__>"
 * (with no marker, the images go first).
 *
 * The vision model comes from --mmproj (llama.cpp's mmproj GGUF beside a
 * GGUF text model) or, without it, from the model's own Hugging Face folder
 * (LlavaForConditionalGeneration, ...).
 */
#include "cli/cli_vision.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int cli_images_add(cli_images *ci, const char *path) {
    if (ci->n_paths >= CLI_MAX_IMAGES) {
        fprintf(stderr, "error: --image: at most %d images\n", CLI_MAX_IMAGES);
        return -1;
    }
    ci->paths[ci->n_paths++] = path;
    return 0;
}

int cli_images_open(cli_images *ci, pdl_model *model, const char *model_path) {
    if (ci->n_paths == 0) {
        if (ci->mmproj) fprintf(stderr, "pagedlm: --mmproj without --image: the projector is not loaded\n");
        return 0;
    }
    pdl_error err;
    const char *vpath = ci->mmproj;
    struct stat st;
    if (!vpath) {
        if (stat(model_path, &st) != 0 || !S_ISDIR(st.st_mode)) {
            fprintf(stderr, "error: --image with a GGUF model needs --mmproj FILE (its multimodal projector)\n");
            return -1;
        }
        vpath = model_path;
    }
    if (pdl_vision_load(&ci->vision, vpath, model, &err)) {
        fprintf(stderr, "error: %s\n", err.message);
        return -1;
    }
    for (int i = 0; i < ci->n_paths; i++)
        if (pdl_image_load(&ci->images[i], ci->paths[i], &err)) {
            fprintf(stderr, "error: %s\n", err.message);
            return -1;
        }
    ci->n_images = ci->n_paths;
    return 0;
}

int cli_images_prompt(cli_images *ci, const pdl_model *model, const char *prompt, pdl_mm_prompt *out) {
    pdl_error err;
    if (pdl_mm_tokenize(model, ci->vision, prompt, strlen(prompt), CLI_MEDIA_MARKER,
                        (const pdl_image *const *)ci->images, ci->n_images, PDL_TOK_ADD_SPECIAL, out, &err)) {
        fprintf(stderr, "error: %s\n", err.message);
        return -1;
    }
    return 0;
}

void cli_images_close(cli_images *ci) {
    for (int i = 0; i < ci->n_images; i++) pdl_image_free(ci->images[i]);
    pdl_vision_free(ci->vision);
    memset(ci, 0, sizeof *ci);
}
