/*
 * cli_template.c - `pagedlm template`: a model's chat template rendered with
 * a JSON context, printed byte for byte (no newline added).
 *
 * -m takes a folder with tokenizer_config.json or chat_template.jinja (the
 * weights are not needed) or a .gguf file. A template error (a syntax error,
 * the template's raise_exception) is printed on stderr with exit status 1.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli_args.h"
#include "util/file_map.h"

static void template_usage(FILE *f) {
    fprintf(f,
            "usage: pagedlm template -m MODEL_OR_DIR --context FILE.json\n"
            "renders the chat template with the JSON object in FILE (\"-\": standard input): messages,\n"
            "add_generation_prompt, tools and extra keys such as enable_thinking, as transformers'\n"
            "apply_chat_template does, and prints the text exactly.\n");
}

int cli_template(int argc, char **argv) {
    const char *model_path = NULL, *context_path = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            template_usage(stdout);
            return CLI_OK;
        } else if (!(v = cli_value(argc, argv, &i))) {
            return CLI_USAGE;
        } else if (strcmp(a, "-m") == 0 || strcmp(a, "--model") == 0) {
            model_path = v;
        } else if (strcmp(a, "--context") == 0 || strcmp(a, "-c") == 0) {
            context_path = v;
        } else {
            fprintf(stderr, "error: unknown option '%s' for template\n", a);
            template_usage(stderr);
            return CLI_USAGE;
        }
    }
    if (!model_path || !context_path) {
        fprintf(stderr, "error: template needs -m MODEL_OR_DIR and --context FILE.json\n");
        template_usage(stderr);
        return CLI_USAGE;
    }
    pdl_error err;
    char *context = NULL;
    if (strcmp(context_path, "-") == 0) {
        if (!(context = cli_read_stdin(NULL, PDL_READ_MAX_CONTEXT))) {
            fprintf(stderr, "error: cannot read the context from standard input (at most %zu bytes)\n",
                    (size_t)PDL_READ_MAX_CONTEXT);
            return CLI_FAIL;
        }
    } else {
        size_t len;
        if (file_read(context_path, PDL_READ_MAX_CONTEXT, &context, &len, &err)) {
            fprintf(stderr, "error: %s\n", err.message);
            return CLI_FAIL;
        }
    }
    pdl_chat_template *t = NULL;
    if (pdl_chat_template_load(&t, model_path, &err)) {
        fprintf(stderr, "error: %s\n", err.message);
        free(context);
        return CLI_FAIL;
    }
    char *text = NULL;
    size_t n = 0;
    int rc = pdl_chat_template_render(t, context, &text, &n, &err);
    if (rc == 0) {
        fwrite(text, 1, n, stdout);
        rc = fflush(stdout) == 0 ? CLI_OK : CLI_FAIL;
    } else {
        fprintf(stderr, "error: %s\n", err.message);
        rc = CLI_FAIL;
    }
    free(text);
    free(context);
    pdl_chat_template_free(t);
    return rc;
}
