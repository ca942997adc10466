/*
 * cli_chat.c - `pagedlm chat`: an interactive chat in the terminal, as
 * `llama-cli -cnv` and `ollama run` give one.
 *
 * Each turn renders the whole conversation with the model's chat template
 * (or --chat-template FILE), runs it as one request through the engine and
 * streams the answer as it comes. The conversation is kept across turns;
 * when it no longer fits the model length, the oldest turns are dropped (a
 * system prompt stays) and the user is told. Commands: /clear forgets the
 * conversation, /exit (or end of input) quits; a line ending in '\' goes
 * on on the next line. Ctrl-C stops the answer being written (the part
 * written so far stays in the conversation) and returns to the prompt; at
 * the prompt it says how to quit.
 *
 * A reasoning model's thinking (<think> ... </think>: --reasoning-parser,
 * by default qwen3 when the vocabulary has both markers as single tokens)
 * is shown dimmed on a terminal (under a "Thinking:" line elsewhere), or
 * not at all with --hide-reasoning; only the answer goes into the
 * conversation's history.
 *
 * What it is not for: serving many users (`pagedlm serve`), scripting
 * (`pagedlm run`). Prompts and notes go to stderr, the answers to stdout.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <stddef.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli_args.h"
#include "engine/reasoning.h"
#include "server/chat.h"
#include "util/file_map.h"

/* Ctrl-C while an answer is written stops it (the step loop polls the
 * flag); at the prompt the handler itself says how to quit, so no reading
 * has to be interrupted (a signal between a check and a blocking read
 * would be lost) and the terminal has already dropped the line typed. */
static volatile sig_atomic_t interrupted, at_prompt;

static void on_sigint(int sig) {
    (void)sig;
    if (at_prompt) {
        static const char msg[] = "\n(Ctrl-D or /exit to quit)\n> ";
        ssize_t w = write(STDERR_FILENO, msg, sizeof msg - 1);
        (void)w;
        return;
    }
    interrupted = 1;
}

typedef struct answer {
    char *text;         /* the answer (without the thinking): what the history keeps */
    size_t len, cap;
    int tokens;
    bool done;
    const char *finish;
    reasoning_split *think; /* NULL: no reasoning parser */
    const pdl_model *model; /* control tokens' text (harmony) */
    bool show_think, dim, in_think;
} answer;

/* A piece of the answer's text, or of its thinking. */
static void on_piece(void *user, bool reasoning, const char *t, size_t n) {
    answer *a = user;
    if (n == 0) return;
    if (reasoning) {
        if (!a->show_think) return;
        if (!a->in_think) fputs(a->dim ? "\x1b[2m" : "Thinking:\n", stdout);
        a->in_think = true;
        fwrite(t, 1, n, stdout);
        fflush(stdout);
        return;
    }
    if (a->in_think) fputs(a->dim ? "\x1b[0m\n\n" : "\n\n", stdout); /* the thinking is over */
    a->in_think = false;
    fwrite(t, 1, n, stdout);
    fflush(stdout);
    if (a->len + n + 1 > a->cap) {
        size_t cap = (a->len + n + 1) * 2;
        char *p = realloc(a->text, cap);
        if (!p) return;
        a->text = p;
        a->cap = cap;
    }
    memcpy(a->text + a->len, t, n);
    a->len += n;
    a->text[a->len] = '\0';
}

static void on_event(const pdl_event *ev, void *user) {
    answer *a = user;
    if (ev->kind == PDL_EVENT_TOKEN) a->tokens++;
    if (a->think) reasoning_split_feed_token(a->think, a->model, ev->kind == PDL_EVENT_TOKEN ? ev->token : -1, ev->text,
                                             ev->text_len, on_piece, a);
    else on_piece(a, false, ev->text, ev->text_len);
    if (ev->kind == PDL_EVENT_FINISHED) {
        if (a->think) reasoning_split_finish(a->think, on_piece, a);
        if (a->in_think && a->dim) fputs("\x1b[0m", stdout);
        a->in_think = false;
        a->done = true;
        a->finish = ev->finish_reason;
    }
}

/* One line of input (continued lines joined with '\n'); NULL at the end of
 * input. */
static char *read_message(bool tty) {
    char *msg = NULL, *line = NULL;
    size_t msg_len = 0, cap = 0;
    for (;;) {
        at_prompt = 1; /* before the prompt shows: a Ctrl-C right after it is the prompt's */
        if (tty) fputs(msg_len ? ". " : "> ", stderr);
        long long n = file_read_line(stdin, &line, &cap, PDL_READ_MAX_CONTEXT);
        at_prompt = 0;
        if (n <= 0) {
            free(line);
            if (msg_len == 0) {
                free(msg);
                return NULL;
            }
            return msg; /* the end of input after a continued line */
        }
        if (line[n - 1] == '\n') line[--n] = '\0';
        bool more = n > 0 && line[n - 1] == '\\';
        if (more) line[--n] = '\0';
        char *p = realloc(msg, msg_len + (size_t)n + 2);
        if (!p) {
            free(line), free(msg);
            return NULL;
        }
        msg = p;
        if (msg_len) msg[msg_len++] = '\n';
        memcpy(msg + msg_len, line, (size_t)n + 1);
        msg_len += (size_t)n;
        if (!more) break;
    }
    free(line);
    return msg;
}

static void add_message(json_t *history, const char *role, const char *content) {
    json_array_append_new(history, json_pack("{s:s, s:s%}", "role", role, "content", content, strlen(content)));
}

/* The conversation rendered and tokenized; oldest turns (after a system
 * message) are dropped while it leaves fewer than `room` tokens for the
 * answer. Returns 0, or -1 with the reason printed. */
static int render(srv_chat *chat, json_t *history, int max_len, int room, int32_t **ids, size_t *n,
                  const reasoning_format *think, bool *opens) {
    json_t *request = json_object();
    bool dropped = false;
    for (;;) {
        char *text = NULL;
        size_t text_len;
        srv_api_error e;
        int rc = srv_chat_prompt(chat, history, request, ids, n, &text, &text_len, &e);
        *opens = rc == 0 && think && reasoning_prompt_opens(think, text, text_len);
        free(text);
        if (rc) {
            fprintf(stderr, "error: %s\n", e.message);
            json_decref(request);
            return -1;
        }
        if ((long long)*n + room <= max_len) break;
        size_t first = json_array_size(history) > 0 &&
                               strcmp(json_string_value(json_object_get(json_array_get(history, 0), "role")),
                                      "system") == 0
                           ? 1
                           : 0;
        if (json_array_size(history) <= first + 1) { /* only the new message is left */
            fprintf(stderr, "error: the message takes %zu tokens; the model length is %d\n", *n, max_len);
            free(*ids);
            *ids = NULL;
            json_decref(request);
            return -1;
        }
        free(*ids);
        *ids = NULL;
        /* drop the oldest exchange: a user message and what answered it */
        json_array_remove(history, first);
        while (json_array_size(history) > first + 1 &&
               strcmp(json_string_value(json_object_get(json_array_get(history, first), "role")), "user") != 0)
            json_array_remove(history, first);
        dropped = true;
    }
    if (dropped) fprintf(stderr, "[the oldest turns were dropped to fit the model length %d]\n", max_len);
    json_decref(request);
    return 0;
}

/* ---- options ------------------------------------------------------------------ */

/* What the command line asks for. */
typedef struct chat_args {
    const char *model_path, *template_path, *system;
    int n_predict, threads, ctx, top_k;
    float temp, top_p;
    uint64_t seed;
    bool have_seed, verbose, ignore_eos, hide_think;
    const char *think_name;   /* --reasoning-parser: a format's name, "none", or NULL (by the vocabulary) */
    int think_budget;
} chat_args;

static int parse_seed(void *args, const cli_option *o, const char *opt, const char *v) {
    (void)o;
    chat_args *c = args;
    if (cli_u64(opt, v, &c->seed)) return -1;
    c->have_seed = true;
    return 0;
}

static int parse_reasoning_parser(void *args, const cli_option *o, const char *opt, const char *v) {
    (void)o, (void)opt;
    if (strcmp(v, "none") != 0 && !reasoning_format_find(v)) {
        fprintf(stderr, "error: unknown --reasoning-parser '%s' (%s, none)\n", v, reasoning_format_names());
        return -1;
    }
    ((chat_args *)args)->think_name = v;
    return 0;
}

#define A(f) offsetof(chat_args, f)
static const cli_option CHAT_OPTIONS[] = {
    {"--model", "-m", CLI_OPT_STRING, A(model_path), .value = "PATH", .help = ".gguf file or Hugging Face folder"},
    {"--chat-template", NULL, CLI_OPT_STRING, A(template_path), .value = "FILE",
     .help = "Jinja chat template (default: the model's own)"},
    {"--system", "-s", CLI_OPT_STRING, A(system), .value = "TEXT", .help = "a system prompt for the conversation"},
    {"--n-predict", "-n", CLI_OPT_INT, A(n_predict), .min = 1, .max = 1 << 30, .value = "N",
     .help = "tokens per answer at most (default: up to the model length)"},
    {"--temp", NULL, CLI_OPT_FLOAT, A(temp), .min = 0, .max = INFINITY, .value = "T",
     .help = "temperature; 0 = greedy (default 0.7)"},
    {"--top-p", NULL, CLI_OPT_FLOAT, A(top_p), .min = 0, .max = 1, .value = "P",
     .help = "nucleus sampling (default 0.95)"},
    {"--top-k", NULL, CLI_OPT_INT, A(top_k), .min = 0, .max = 1 << 30, .value = "K",
     .help = "keep the K most likely tokens (default 40; 0 = off)"},
    {"--seed", NULL, CLI_OPT_CUSTOM, 0, .value = "S", .parse = parse_seed,
     .help = "random seed (default: from the clock)"},
    {"--threads", "-t", CLI_OPT_INT, A(threads), .min = 1, .max = 1024, .value = "N",
     .help = "worker threads (default: all cores)"},
    {"--ctx-size", "-c", CLI_OPT_INT, A(ctx), .min = 1, .max = 1 << 24, .value = "N",
     .help = "model length (default and most: the model's own; more only with\n"
             "PAGEDLM_ALLOW_LONG_MAX_MODEL_LEN=1, untrained positions)"},
    {"--ignore-eos", NULL, CLI_OPT_FLAG, A(ignore_eos),
     .help = "keep writing after the end-of-sequence token (up to -n)"},
    {"--reasoning-parser", NULL, CLI_OPT_CUSTOM, 0, .value = "NAME", .parse = parse_reasoning_parser,
     .help = "qwen3|deepseek_r1|openai|none: a reasoning model's thinking block (default:\n"
             "openai (gpt-oss's harmony) when <|channel|> is one token of the vocabulary,\n"
             "qwen3 when <think> and </think> are, else none)"},
    {"--hide-reasoning", NULL, CLI_OPT_FLAG, A(hide_think),
     .help = "do not show the thinking (it is not kept in the conversation either way)"},
    {"--reasoning-budget", NULL, CLI_OPT_INT, A(think_budget), .min = -1, .max = 1 << 30, .value = "N",
     .help = "thinking tokens at most per answer, then the block is closed (default: no limit)"},
    {"--verbose", NULL, CLI_OPT_FLAG, A(verbose),
     .help = "after each answer, the prompt and answer token counts and speed"},
};
#undef A

static const cli_command CHAT_COMMAND = {
    .name = "chat",
    .usage = "usage: pagedlm chat -m MODEL [options]\n",
    .options = CHAT_OPTIONS,
    .n_options = sizeof CHAT_OPTIONS / sizeof CHAT_OPTIONS[0],
    .epilogue = "\n"
                "In the chat: /clear forgets the conversation, /exit or Ctrl-D quits, a line ending in '\\'\n"
                "continues on the next line, Ctrl-C stops the answer being written.\n",
};

int cli_chat(int argc, char **argv) {
    chat_args args = {.top_k = 40, .temp = 0.7f, .top_p = 0.95f, .think_budget = -1};
    int prc = cli_parse(&CHAT_COMMAND, argc, argv, &args);
    if (prc) return prc > 0 ? CLI_OK : CLI_USAGE;
    if (!args.model_path) {
        fprintf(stderr, "error: chat needs -m MODEL\n");
        cli_print_help(&CHAT_COMMAND, stderr);
        return CLI_USAGE;
    }
    if (!args.have_seed) args.seed = (uint64_t)time(NULL);

    pdl_error err;
    pdl_model *model = NULL;
    pdl_model_options mo = cli_model_options((int)args.threads, (int)args.ctx);
    if (cli_load_model(&model, args.model_path, &mo, &err)) {
        fprintf(stderr, "error: %s\n", err.message);
        return CLI_FAIL;
    }
    srv_chat *chat = NULL;
    pdl_engine *engine = NULL;
    int rc = CLI_OK;
    if (srv_chat_load(&chat, model, args.model_path, args.template_path, &err)) {
        fprintf(stderr, "error: %s\n", err.message);
        rc = CLI_FAIL;
    } else if (!chat) {
        fprintf(stderr, "error: %s has no chat template; give one with --chat-template FILE\n", args.model_path);
        rc = CLI_FAIL;
    }
    pdl_engine_options eo = {.max_num_seqs = 1, .log = cli_log_stderr};
    if (rc == CLI_OK && pdl_engine_create(&engine, model, &eo, &err)) {
        fprintf(stderr, "error: %s\n", err.message);
        rc = CLI_FAIL;
    }
    if (rc != CLI_OK) {
        srv_chat_free(chat);
        pdl_model_free(model);
        return rc;
    }
    int max_len = pdl_engine_max_model_len(engine);
    /* the thinking block: as asked, or as the model's tokens show (Qwen3's
     * markers, gpt-oss's harmony channels) */
    const reasoning_format *think = NULL;
    if (!args.think_name) {
        think = reasoning_format_of_model(model);
    } else if (strcmp(args.think_name, "none") != 0) {
        think = reasoning_format_find(args.think_name);
    }

    struct sigaction sa = {.sa_handler = on_sigint, .sa_flags = SA_RESTART};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    bool tty = isatty(STDIN_FILENO);
    if (tty)
        fprintf(stderr, "pagedlm chat: %s (model length %d). /clear forgets, /exit quits, Ctrl-C stops an answer.\n",
                args.model_path, max_len);

    json_t *history = json_array();
    if (args.system) add_message(history, "system", args.system);
    int turn = 0;
    for (;;) {
        char *msg = read_message(tty);
        if (!msg) break;
        if (strcmp(msg, "/exit") == 0 || strcmp(msg, "/quit") == 0 || strcmp(msg, "/bye") == 0) {
            free(msg);
            break;
        }
        if (strcmp(msg, "/clear") == 0) {
            json_array_clear(history);
            if (args.system) add_message(history, "system", args.system);
            fputs("[conversation cleared]\n", stderr);
            free(msg);
            continue;
        }
        if (msg[0] == '/' && msg[1] && !strchr(msg, ' ')) {
            fprintf(stderr, "unknown command %s: /clear forgets the conversation, /exit quits\n", msg);
            free(msg);
            continue;
        }
        add_message(history, "user", msg);
        free(msg);
        int32_t *ids = NULL;
        size_t n_ids = 0;
        int room = args.n_predict > 0 && args.n_predict < max_len / 2 ? (int)args.n_predict : 1;
        bool opens = false;
        if (render(chat, history, max_len, room, &ids, &n_ids, think, &opens)) {
            json_array_remove(history, json_array_size(history) - 1);
            continue;
        }
        answer a = {.show_think = !args.hide_think, .dim = isatty(STDOUT_FILENO), .model = model};
        pdl_request_params p = {.sampling = {.temperature = args.temp, .top_p = args.top_p, .top_k = (int)args.top_k,
                                             .seed = args.seed + (uint64_t)turn++},
                                .max_tokens = (int)args.n_predict, .ignore_eos = args.ignore_eos, .logprobs = -1,
                                .prompt_logprobs = -1};
        if (think) {
            reasoning_params(think, model, opens, (int)args.think_budget, &p.reasoning);
            if (args.think_budget >= 0 && !p.reasoning.enabled) {
                fprintf(stderr, "error: --reasoning-budget needs '%s' to be one token of the model\n", think->end);
                free(ids);
                rc = CLI_USAGE;
                break;
            }
            a.think = reasoning_split_new(think, opens);
        }
        uint64_t id;
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        if (pdl_engine_add_request(engine, ids, n_ids, &p, on_event, &a, &id, &err)) {
            fprintf(stderr, "error: %s\n", err.message);
            reasoning_split_free(a.think);
            free(ids);
            json_array_remove(history, json_array_size(history) - 1);
            continue;
        }
        interrupted = 0;
        int active = 1;
        while (active > 0 && !a.done) {
            if (interrupted) {
                pdl_engine_abort(engine, id);
                interrupted = 0;
                break;
            }
            if (pdl_engine_step(engine, &active, &err)) {
                fprintf(stderr, "\nerror: %s\n", err.message);
                rc = CLI_FAIL;
                break;
            }
        }
        clock_gettime(CLOCK_MONOTONIC, &t1);
        fputc('\n', stdout);
        fflush(stdout);
        if (a.finish && strcmp(a.finish, "abort") == 0) fputs("[stopped]\n", stderr);
        else if (a.finish && strcmp(a.finish, "length") == 0) fputs("[the answer reached its length limit]\n", stderr);
        if (args.verbose) {
            double dt = (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9;
            fprintf(stderr, "[prompt %zu tokens, answer %d tokens, %.1f tokens/s]\n", n_ids, a.tokens,
                    dt > 0 ? a.tokens / dt : 0.0);
        }
        add_message(history, "assistant", a.text ? a.text : "");
        free(a.text);
        reasoning_split_free(a.think);
        free(ids);
        if (rc != CLI_OK) break;
    }
    json_decref(history);
    pdl_engine_free(engine);
    srv_chat_free(chat);
    pdl_model_free(model);
    return rc;
}
