/*
 * cli_vision.h - images on the command line (--image, --mmproj, the
 * "<__media__>" marker) for `pagedlm run` and `pagedlm logits`.
 */
#ifndef PDL_CLI_VISION_H
#define PDL_CLI_VISION_H

#include "pagedlm.h"

#define CLI_MAX_IMAGES 16
/* llama.cpp's marker of an image's place in the prompt text, so prompts
 * move between the two unchanged */
#define CLI_MEDIA_MARKER "<__media__>"

typedef struct cli_images {
    const char *paths[CLI_MAX_IMAGES]; /* --image, in order */
    int n_paths;
    const char *mmproj;                /* --mmproj, or NULL */
    pdl_vision *vision;                /* loaded by cli_images_open when there are images */
    pdl_image *images[CLI_MAX_IMAGES];
    int n_images;
} cli_images;

/* Records one --image; -1 (message on stderr) past CLI_MAX_IMAGES. */
int cli_images_add(cli_images *ci, const char *path);
/* Loads the vision model (--mmproj, or the model's own folder) and decodes
 * the images; nothing without --image. -1 with a message on stderr. */
int cli_images_open(cli_images *ci, pdl_model *model, const char *model_path);
/* Tokenizes -p text with the images at CLI_MEDIA_MARKER (BOS as the
 * tokenizer says). -1 with a message on stderr. */
int cli_images_prompt(cli_images *ci, const pdl_model *model, const char *prompt, pdl_mm_prompt *out);
void cli_images_close(cli_images *ci);

#endif
