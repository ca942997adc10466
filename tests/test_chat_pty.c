/*
 * test_chat_pty.c - `pagedlm chat` as a person uses it, under a
 * pseudo-terminal: a prompt, answers streamed, the conversation kept across
 * turns (the second prompt holds the first exchange), /clear forgetting it
 * (the same question then gets the same greedy answer and prompt), Ctrl-C
 * stopping an answer mid-way without ending the program, and /exit.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "test_util.h"

typedef struct session {
    pid_t pid;
    int fd;            /* the terminal's master side */
    char buf[1 << 20]; /* everything the program wrote */
    size_t len;
} session;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void start(session *s, char *const argv[]) {
    struct winsize ws = {.ws_row = 40, .ws_col = 200};
    s->len = 0;
    s->pid = forkpty(&s->fd, NULL, NULL, &ws);
    REQUIRE(s->pid >= 0);
    if (s->pid == 0) {
        execv(argv[0], argv);
        _exit(127);
    }
}

/* Reads until `needle` appears after offset `from` (returns where it ends),
 * or fails after `seconds`. */
static size_t expect_after(session *s, size_t from, const char *needle, double seconds) {
    double until = now_s() + seconds;
    for (;;) {
        s->buf[s->len] = '\0';
        char *hit = strstr(s->buf + from, needle);
        if (hit) return (size_t)(hit - s->buf) + strlen(needle);
        double left = until - now_s();
        REQUIRE_MSG(left > 0, "no '%s' within %.0f s; the terminal shows:\n%s", needle, seconds, s->buf + from);
        struct pollfd p = {.fd = s->fd, .events = POLLIN};
        if (poll(&p, 1, (int)(left * 1000) + 1) <= 0) continue;
        ssize_t n = read(s->fd, s->buf + s->len, sizeof s->buf - 1 - s->len);
        REQUIRE_MSG(n > 0, "the program closed the terminal; it showed:\n%s", s->buf + from);
        s->len += (size_t)n;
    }
}

static void type(session *s, const char *text) {
    size_t n = strlen(text);
    REQUIRE(write(s->fd, text, n) == (ssize_t)n);
}

/* Waits (up to 10 s, reading what it still writes) for the program to exit;
 * its exit status, or -1 when it had to be killed. */
static int finish(session *s) {
    int st = 0;
    for (int i = 0; i < 200; i++) {
        if (waitpid(s->pid, &st, WNOHANG) == s->pid) {
            close(s->fd);
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        }
        char drain[4096];
        struct pollfd p = {.fd = s->fd, .events = POLLIN};
        if (poll(&p, 1, 50) > 0 && read(s->fd, drain, sizeof drain) < 0 && errno != EINTR) {
            /* the terminal closed: the program is exiting */
            struct timespec d = {.tv_sec = 0, .tv_nsec = 50 * 1000000L};
            nanosleep(&d, NULL);
        }
    }
    kill(s->pid, SIGKILL);
    waitpid(s->pid, &st, 0);
    close(s->fd);
    return -1;
}

/* The text between two offsets, for comparing answers. */
static char *slice(const session *s, size_t a, size_t b) {
    char *t = malloc(b - a + 1);
    memcpy(t, s->buf + a, b - a);
    t[b - a] = '\0';
    return t;
}

static void test_conversation_is_kept_and_cleared(void) {
    char *model = test_data_path("models/stories260K/stories260K.gguf");
    char *tmpl = test_source_path("tests/e2e/fixtures/chat_template.jinja");
    char *argv[] = {getenv("PAGEDLM_BIN"), "chat", "-m", model, "--chat-template", tmpl, "--temp", "0", "-n", "24",
                    "--verbose", NULL};
    REQUIRE_MSG(argv[0], "PAGEDLM_BIN is not set (run the tests through ctest)");
    static session s;
    start(&s, argv);
    size_t at = expect_after(&s, 0, "> ", 30);
    type(&s, "Hello\n");
    size_t a1 = at;
    at = expect_after(&s, at, "[prompt 18 tokens, answer 24 tokens", 30);
    char *first = slice(&s, a1, at);
    at = expect_after(&s, at, "> ", 10);
    type(&s, "Tell me more\n");
    /* the second prompt holds the first exchange: 18 + 24 answer tokens + the new turn */
    at = expect_after(&s, at, "[prompt ", 30);
    int n2 = atoi(s.buf + at);
    CHECK_MSG(n2 > 18 + 24, "second prompt has %d tokens: the first exchange is missing", n2);
    at = expect_after(&s, at, "> ", 10);
    type(&s, "/clear\n");
    at = expect_after(&s, at, "[conversation cleared]", 10);
    at = expect_after(&s, at, "> ", 10);
    type(&s, "Hello\n");
    size_t a3 = at;
    at = expect_after(&s, at, "[prompt 18 tokens, answer 24 tokens", 30);
    char *again = slice(&s, a3, at);
    CHECK_MSG(strcmp(first, again) == 0, "after /clear the same question got another answer:\n%s\nvs\n%s", first,
              again);
    at = expect_after(&s, at, "> ", 10);
    type(&s, "/exit\n");
    CHECK_EQ_INT(finish(&s), 0);
    free(first), free(again), free(model), free(tmpl);
}

/* Ctrl-C (the terminal's interrupt character) mid-answer stops the answer
 * and returns to the prompt; the program goes on and quits with /exit. */
static void test_ctrl_c_stops_the_answer_not_the_program(void) {
    char *model = test_data_path("models/qwen3-tiny/model-f32.gguf");
    char *tmpl = test_source_path("tests/e2e/fixtures/chat_template.jinja");
    char *argv[] = {getenv("PAGEDLM_BIN"), "chat", "-m", model, "--chat-template", tmpl, "--temp", "0", "-n",
                    "30000", "--ignore-eos", "--threads", "1", NULL};
    static session s;
    start(&s, argv);
    size_t at = expect_after(&s, 0, "> ", 30);
    type(&s, "Write a very long story\n");
    /* let it write for a while, then interrupt */
    struct timespec d = {.tv_sec = 0, .tv_nsec = 600 * 1000000L};
    nanosleep(&d, NULL);
    double t0 = now_s();
    type(&s, "\x03");
    at = expect_after(&s, at, "[stopped]", 10);
    CHECK_MSG(now_s() - t0 < 5, "Ctrl-C took %.1f s to stop the answer", now_s() - t0);
    at = expect_after(&s, at, "> ", 10);
    /* at the prompt, Ctrl-C says how to quit and the program stays */
    type(&s, "\x03");
    at = expect_after(&s, at, "Ctrl-D or /exit to quit", 10);
    at = expect_after(&s, at, "> ", 10);
    type(&s, "/exit\n");
    CHECK_EQ_INT(finish(&s), 0);
    free(model), free(tmpl);
}

/* A reasoning model (Qwen3's vocabulary, so qwen3's markers by default)
 * under a template whose generation prompt opens the thinking block: the
 * thinking is dimmed (SGR 2 ... SGR 0) and the budget closes it;
 * --hide-reasoning shows no thinking. */
static void test_thinking_is_dimmed_or_hidden(void) {
    char *dir = test_make_dir("qwen3-test");
    char *tok = test_data_path("tokenizers/qwen3");
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "make-random-model --preset qwen3-test --format hf --dtype bf16 --tokenizer '%s' -o '%s'",
             tok, dir);
    cmd_result made = test_pagedlm(cmd);
    REQUIRE_MSG(made.status == 0, "%s", made.err);
    test_free_result(&made);
    char *tmpl = test_tmp_path("opens.jinja");
    static const char OPENS[] = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
                                "{% endfor %}<|im_start|>assistant\n<think>\n";
    test_write_file(tmpl, OPENS, strlen(OPENS));
    for (int hide = 0; hide <= 1; hide++) {
        char *argv[] = {getenv("PAGEDLM_BIN"), "chat", "-m", dir, "--chat-template", tmpl, "--temp", "1", "--seed", "3",
                        "-n", "12", "--reasoning-budget", "4", "--verbose", hide ? "--hide-reasoning" : NULL, NULL};
        static session s;
        start(&s, argv);
        size_t at = expect_after(&s, 0, "> ", 30);
        type(&s, "What is 2+2?\n");
        size_t a0 = at;
        at = expect_after(&s, at, "answer 12 tokens", 30);
        char *shown = slice(&s, a0, at);
        if (hide) {
            CHECK_MSG(!strstr(shown, "\x1b[2m"), "--hide-reasoning showed thinking:\n%s", shown);
        } else {
            char *dim = strstr(shown, "\x1b[2m"), *end = dim ? strstr(dim, "\x1b[0m") : NULL;
            CHECK_MSG(dim && end && end - dim > 4, "no dimmed thinking:\n%s", shown);
        }
        free(shown);
        at = expect_after(&s, at, "> ", 10);
        type(&s, "/exit\n");
        CHECK_EQ_INT(finish(&s), 0);
    }
    free(dir), free(tok), free(tmpl);
}

int main(void) {
    RUN(test_conversation_is_kept_and_cleared);
    RUN(test_thinking_is_dimmed_or_hidden);
    RUN(test_ctrl_c_stops_the_answer_not_the_program);
    return test_summary();
}
