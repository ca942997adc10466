/*
 * main.c - the pagedlm program: dispatches to a subcommand.
 *
 * Each subcommand lives in its own cli_*.c file; results go to stdout,
 * diagnostics to stderr.
 */
#include <stdio.h>
#include <string.h>

#include "cli/cli_args.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: pagedlm COMMAND [options]\n"
            "\n"
            "commands:\n"
            "  run     generate text from a prompt\n"
            "          pagedlm run -m MODEL -p PROMPT [-n N] [--temp T] [--seed S] [--threads N] [--json]\n"
            "  chat    an interactive chat in the terminal (the model's chat template, history, streaming)\n"
            "          pagedlm chat -m MODEL [--chat-template F] [--system TEXT] [--temp T]\n"
            "  logits  print the logits of a token sequence as JSON\n"
            "          pagedlm logits -m MODEL --tokens 1,403,407 [--all-rows] [--kv-cache-dtype f32|f16|q8_0|q4_0]\n"
            "  info    print a model's hyperparameters as JSON\n"
            "          pagedlm info -m MODEL | pagedlm info --architectures\n"
            "  bench   prompt processing (ppN) and generation (tgN) speed, like llama-bench\n"
            "          pagedlm bench -m MODEL [-p 512,2048] [-n 128] [-r 5] [--batch 1,4,16] [--json]\n"
            "  serve   OpenAI-compatible HTTP server (completions, chat, streaming, /metrics)\n"
            "          pagedlm serve -m MODEL [--host 127.0.0.1] [--port 8000] [--api-key KEY] [--chat-template F]\n"
            "  bench-serve  online benchmark of an OpenAI-compatible server, like vllm bench serve\n"
            "          pagedlm bench-serve --model NAME --tokenizer MODEL [--base-url URL] [--num-prompts N]\n"
            "  make-random-model  write a random-weight GGUF in a real model's shape (for benchmarks)\n"
            "          pagedlm make-random-model --preset qwen3-0.6b -o FILE.gguf [--dtype bf16]\n"
            "  tokenize    print the token ids of a text\n"
            "          pagedlm tokenize -m MODEL_OR_DIR [--no-add-special] [--parse-special] [--json] TEXT\n"
            "  detokenize  print the text of token ids\n"
            "          pagedlm detokenize -m MODEL_OR_DIR [--keep-special] IDS...\n"
            "  bench-tokenizer  tokenizer load time and encode/decode speed on one core\n"
            "          pagedlm bench-tokenizer -m MODEL_OR_DIR [--file TEXT] [--repeat N]\n"
            "  bench-grammar  token-mask time of constrained decoding (JSON schema, any JSON)\n"
            "          pagedlm bench-grammar -t TOKENIZER [-t TOKENIZER] [--schema FILE] [--tokens N] [--runs R]\n"
            "  template    render the chat template with a JSON context (messages, tools, ...)\n"
            "          pagedlm template -m MODEL_OR_DIR --context FILE.json\n"
            "\n"
            "MODEL is a .gguf file or a Hugging Face folder (config.json + *.safetensors).\n"
            "MODEL_OR_DIR may also be a folder with only tokenizer.json (+ tokenizer_config.json).\n"
            "Run 'pagedlm COMMAND --help' for the options of a command.\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return CLI_USAGE;
    }
    cli_apply_kernel_env();
    const char *cmd = argv[1];
    if (strcmp(cmd, "run") == 0) return cli_run(argc - 1, argv + 1);
    if (strcmp(cmd, "chat") == 0) return cli_chat(argc - 1, argv + 1);
    if (strcmp(cmd, "logits") == 0) return cli_logits(argc - 1, argv + 1);
    if (strcmp(cmd, "info") == 0) return cli_info(argc - 1, argv + 1);
    if (strcmp(cmd, "bench") == 0) return cli_bench(argc - 1, argv + 1);
    if (strcmp(cmd, "serve") == 0) return cli_serve(argc - 1, argv + 1);
    if (strcmp(cmd, "bench-serve") == 0) return cli_bench_serve(argc - 1, argv + 1);
    if (strcmp(cmd, "make-random-model") == 0) return cli_make_random_model(argc - 1, argv + 1);
    if (strcmp(cmd, "tokenize") == 0) return cli_tokenize(argc - 1, argv + 1);
    if (strcmp(cmd, "detokenize") == 0) return cli_detokenize(argc - 1, argv + 1);
    if (strcmp(cmd, "bench-tokenizer") == 0) return cli_bench_tokenizer(argc - 1, argv + 1);
    if (strcmp(cmd, "bench-grammar") == 0) return cli_bench_grammar(argc - 1, argv + 1);
    if (strcmp(cmd, "template") == 0) return cli_template(argc - 1, argv + 1);
    if (strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "help") == 0) {
        usage(stdout);
        return CLI_OK;
    }
    fprintf(stderr, "error: unknown command '%s'\n\n", cmd);
    usage(stderr);
    return CLI_USAGE;
}
