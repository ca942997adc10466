/* generate.c - load a model, generate from a prompt, print the text as it comes. */
#include <pagedlm.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void on_event(const pdl_event *ev, void *user) {
    (void)user; /* text: a token's new text (may be ""), or what was held back when it finishes */
    if (ev->text_len) fwrite(ev->text, 1, ev->text_len, stdout);
}

int main(int argc, char **argv) {
    if (argc != 3) return fprintf(stderr, "usage: %s MODEL PROMPT\n", argv[0]), 2;
    pdl_error err;
    pdl_model *model = NULL;
    pdl_engine *engine = NULL;
    int32_t *ids = NULL;
    size_t n_ids = 0;
    pdl_request_params params = {.max_tokens = 40, .logprobs = -1, .prompt_logprobs = -1}; /* greedy */
    int rc = pdl_model_load(&model, argv[1], NULL, &err) || pdl_engine_create(&engine, model, NULL, &err) ||
             pdl_tokenize(model, argv[2], strlen(argv[2]), true, &ids, &n_ids, &err) ||
             pdl_engine_add_request(engine, ids, n_ids, &params, on_event, NULL, NULL, &err) ||
             pdl_engine_run_until_idle(engine, &err);
    if (rc) fprintf(stderr, "error: %s\n", err.message);
    else printf("\n");
    free(ids);
    pdl_engine_free(engine);
    pdl_model_free(model);
    return rc;
}
