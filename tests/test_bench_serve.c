/*
 * test_bench_serve.c - the serving benchmark's arithmetic and client:
 * TTFT/TPOT/ITL/E2EL on scripted streams, percentiles as numpy computes
 * them, random dataset lengths, seeded Poisson arrivals, the JSON keys vLLM
 * uses, SSE and chunked decoding across arbitrary splits, and the whole
 * `pagedlm bench-serve` against a scripted server on 127.0.0.1 (including
 * one that fails: failures are counted, never dropped).
 */
#define _POSIX_C_SOURCE 200809L
#include <arpa/inet.h>
#include <jansson.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <time.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "net/http_client.h"
#include "bench/serve_dataset.h"
#include "bench/serve_metrics.h"
#include "pagedlm.h"
#include "test_util.h"

static void test_metrics_on_a_scripted_stream(void) {
    /* request 0: sent at 10.0, chunks at 10.5, 10.7, 11.0, done 11.0, 4 tokens
     * request 1: sent at 10.1, chunks at 10.3, 10.4, done 10.4, 2 tokens
     * request 2: failed */
    request_record r[3] = {0};
    r[0].ok = true, r[0].start = 10.0, r[0].end = 11.0, r[0].prompt_tokens = 7, r[0].output_tokens = 4;
    record_chunk(&r[0], 10.5), record_chunk(&r[0], 10.7), record_chunk(&r[0], 11.0);
    r[1].ok = true, r[1].start = 10.1, r[1].end = 10.4, r[1].prompt_tokens = 5, r[1].output_tokens = 2;
    record_chunk(&r[1], 10.3), record_chunk(&r[1], 10.4);
    r[2].ok = false;
    double pcts[2] = {50, 99};
    serve_summary s;
    REQUIRE(serve_summarize(r, 3, 2.0, pcts, 2, &s) == 0);
    CHECK_EQ_INT(s.completed, 2);
    CHECK_EQ_INT(s.failed, 1);
    CHECK_EQ_INT(s.total_input, 12);
    CHECK_EQ_INT(s.total_output, 6);
    CHECK(fabs(s.request_throughput - 1.0) < 1e-12);
    CHECK(fabs(s.output_throughput - 3.0) < 1e-12);
    CHECK(fabs(s.total_token_throughput - 9.0) < 1e-12);
    /* TTFT 500 and 200 ms */
    CHECK(fabs(s.ttft.mean - 350) < 1e-6);
    CHECK(fabs(s.ttft.median - 350) < 1e-6);
    CHECK(fabs(s.ttft.std - 150) < 1e-6);
    CHECK(fabs(s.ttft.pct[1] - 497) < 1e-6); /* numpy.percentile([200, 500], 99) = 497 */
    /* TPOT: (1000 - 500) / 3 and (300 - 200) / 1 */
    CHECK(fabs(s.tpot.mean - (500.0 / 3 + 100) / 2) < 1e-6);
    /* ITL: 200, 300 (request 0) and 100 (request 1) */
    CHECK(fabs(s.itl.mean - 200) < 1e-6);
    CHECK(fabs(s.itl.median - 200) < 1e-6);
    /* E2EL 1000 and 300 */
    CHECK(fabs(s.e2el.mean - 650) < 1e-6);
    char *js = serve_json(&s, "{\"model_id\": \"m\"}");
    json_t *j = json_loads(js, 0, NULL);
    REQUIRE(j != NULL);
    const char *keys[] = {"completed", "failed", "duration", "request_throughput", "output_throughput",
                          "total_token_throughput", "mean_ttft_ms", "median_ttft_ms", "std_ttft_ms", "p99_ttft_ms",
                          "p50_ttft_ms", "mean_tpot_ms", "median_tpot_ms", "std_tpot_ms", "p99_tpot_ms", "mean_itl_ms",
                          "median_itl_ms", "std_itl_ms", "p99_itl_ms", "mean_e2el_ms", "median_e2el_ms",
                          "std_e2el_ms", "p99_e2el_ms", "model_id"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) CHECK_MSG(json_object_get(j, keys[i]), "%s", keys[i]);
    CHECK(fabs(json_number_value(json_object_get(j, "p99_ttft_ms")) - 497) < 1e-6);
    json_decref(j);
    free(js);
    for (int i = 0; i < 3; i++) record_free(&r[i]);
}

static void test_percentiles_interpolate_like_numpy(void) {
    double v[5] = {1, 2, 3, 4, 10};
    CHECK(fabs(percentile_sorted(v, 5, 0) - 1) < 1e-12);
    CHECK(fabs(percentile_sorted(v, 5, 100) - 10) < 1e-12);
    CHECK(fabs(percentile_sorted(v, 5, 90) - 7.6) < 1e-12); /* numpy: 7.6 */
    CHECK(fabs(percentile_sorted(v, 5, 50) - 3) < 1e-12);
    CHECK(percentile_sorted(v, 0, 50) == 0);
}

static void test_random_dataset_lengths_and_seed(void) {
    char *path = test_data_path("models/stories260K/stories260K.gguf");
    pdl_model *m = NULL;
    pdl_error err;
    REQUIRE(pdl_model_load(&m, path, NULL, &err) == 0);
    int lo, hi;
    dataset_length_range(100, 0.25, &lo, &hi);
    CHECK_EQ_INT(lo, 75);
    CHECK_EQ_INT(hi, 125);
    bench_prompt *a = NULL, *b = NULL;
    REQUIRE_MSG(dataset_random(m, 50, 40, 16, 0.5, 8, 7, &a, &err) == 0, "%s", err.message);
    REQUIRE(dataset_random(m, 50, 40, 16, 0.5, 8, 7, &b, &err) == 0);
    int distinct_lengths = 0, last = -1;
    for (int i = 0; i < 50; i++) {
        CHECK(a[i].prompt_len >= 8 + 20 && a[i].prompt_len <= 8 + 60);
        CHECK(a[i].output_len >= 8 && a[i].output_len <= 24);
        CHECK(strcmp(a[i].text, b[i].text) == 0); /* same seed, same prompts */
        CHECK(a[i].text[0] != '\0');
        if (a[i].prompt_len != last) distinct_lengths++;
        last = a[i].prompt_len;
    }
    CHECK(distinct_lengths > 10);
    /* the shared prefix: every prompt starts with the same text */
    CHECK(strncmp(a[0].text, a[1].text, 8) == 0);
    int32_t *ids;
    size_t nv;
    REQUIRE(dataset_normal_vocab(m, &ids, &nv, &err) == 0);
    CHECK(nv > 200 && nv < 512); /* control and byte tokens left out */
    for (size_t i = 0; i < nv; i++) CHECK(ids[i] > 2);
    free(ids);
    dataset_free(a, 50);
    dataset_free(b, 50);
    pdl_model_free(m);
    free(path);
}

static void test_poisson_arrivals_are_seeded(void) {
    enum { N = 20000 };
    static double a[N], b[N], c[N];
    arrivals_poisson(4.0, N, 3, a);
    arrivals_poisson(4.0, N, 3, b);
    arrivals_poisson(4.0, N, 4, c);
    CHECK(memcmp(a, b, sizeof a) == 0);
    CHECK(memcmp(a, c, sizeof a) != 0);
    for (int i = 1; i < N; i++) CHECK(a[i] >= a[i - 1]);
    double mean_gap = a[N - 1] / N; /* 0.25 +- 0.25/sqrt(N) = 0.0018 */
    CHECK_MSG(fabs(mean_gap - 0.25) < 0.01, "mean gap %g", mean_gap);
    arrivals_poisson(0, 5, 3, a); /* infinite rate: all at once */
    for (int i = 0; i < 5; i++) CHECK(a[i] == 0);
}

typedef struct sse_collect {
    char got[1024];
    int n;
} sse_collect;

static void collect_event(const char *data, size_t len, void *user) {
    sse_collect *c = user;
    c->n++;
    strncat(c->got, data, len);
    strcat(c->got, "|");
}

static int collect_body(const char *data, size_t len, void *user) {
    strncat((char *)user, data, len);
    return 0;
}

static void test_sse_and_chunked_decoding_across_splits(void) {
    const char *stream = "data: {\"a\":1}\n\ndata: {\"b\":2}\r\n\r\n: comment\n\ndata: [DONE]\n\n";
    size_t n = strlen(stream);
    for (size_t split = 1; split < n; split++) {
        sse_parser p = {0};
        sse_collect c = {{0}, 0};
        sse_feed(&p, stream, split, collect_event, &c);
        sse_feed(&p, stream + split, n - split, collect_event, &c);
        CHECK_EQ_INT(c.n, 3);
        CHECK(strcmp(c.got, "{\"a\":1}|{\"b\":2}|[DONE]|") == 0);
        sse_free(&p);
    }
    const char *chunked = "5\r\nhello\r\n7\r\n, world\r\n0\r\n\r\n";
    size_t cn = strlen(chunked);
    for (size_t split = 1; split < cn; split++) {
        http_chunked d = {0};
        char out[64] = "";
        int r1 = http_chunked_feed(&d, chunked, split, collect_body, out);
        int r2 = r1 == 1 ? 1 : http_chunked_feed(&d, chunked + split, cn - split, collect_body, out);
        CHECK(r1 >= 0 && r2 == 1);
        CHECK(strcmp(out, "hello, world") == 0);
    }
    http_chunked bad = {0};
    char out[64] = "";
    CHECK(http_chunked_feed(&bad, "zz\r\n", 4, collect_body, out) == -1);
    http_url u;
    CHECK(http_parse_url("http://127.0.0.1:8123/base/", &u) == 0);
    CHECK(strcmp(u.host, "127.0.0.1") == 0 && strcmp(u.port, "8123") == 0 && strcmp(u.path, "/base") == 0);
    CHECK(http_parse_url("https://x", &u) == -1);
}

/* ---- a scripted OpenAI-style server on 127.0.0.1 ---------------------------- */

typedef struct fake_server {
    int fd, port, fail;
    int served;
    pthread_t th;
} fake_server;

static void *serve_loop(void *p) {
    fake_server *s = p;
    for (;;) {
        int c = accept(s->fd, NULL, NULL);
        if (c < 0) return NULL;
        char req[8192];
        size_t have = 0;
        /* read headers and the body (Content-Length) */
        for (;;) {
            ssize_t r = recv(c, req + have, sizeof req - 1 - have, 0);
            if (r <= 0) break;
            have += (size_t)r;
            req[have] = '\0';
            char *he = strstr(req, "\r\n\r\n");
            char *cl = strstr(req, "Content-Length:");
            if (he && cl && (size_t)(he + 4 - req) + (size_t)atoi(cl + 15) <= have) break;
        }
        __atomic_add_fetch(&s->served, 1, __ATOMIC_SEQ_CST);
        if (s->fail) {
            const char *r = "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 2\r\nConnection: close\r\n\r\nno";
            send(c, r, strlen(r), MSG_NOSIGNAL);
        } else {
            const char *head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n";
            send(c, head, strlen(head), MSG_NOSIGNAL);
            const char *events[] = {
                "data: {\"choices\":[{\"index\":0,\"text\":\"Hel\"}]}\n\n",
                "data: {\"choices\":[{\"index\":0,\"text\":\"lo\"}]}\n\n",
                "data: {\"choices\":[{\"index\":0,\"text\":\"!\",\"finish_reason\":\"length\"}]}\n\n",
                "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":3,\"total_tokens\":12}}\n\n",
                "data: [DONE]\n\n"};
            for (size_t i = 0; i < 5; i++) {
                char chunk[512];
                int n = snprintf(chunk, sizeof chunk, "%zx\r\n%s\r\n", strlen(events[i]), events[i]);
                send(c, chunk, (size_t)n, MSG_NOSIGNAL);
                nanosleep(&(struct timespec){0, 2000000}, NULL);
            }
            send(c, "0\r\n\r\n", 5, MSG_NOSIGNAL);
        }
        close(c);
    }
}

static void fake_start(fake_server *s, int fail) {
    s->fail = fail;
    s->served = 0;
    s->fd = socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(s->fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(bind(s->fd, (struct sockaddr *)&a, sizeof a) == 0);
    REQUIRE(listen(s->fd, 64) == 0);
    socklen_t len = sizeof a;
    getsockname(s->fd, (struct sockaddr *)&a, &len);
    s->port = ntohs(a.sin_port);
    pthread_create(&s->th, NULL, serve_loop, s);
}

static void fake_stop(fake_server *s) {
    shutdown(s->fd, SHUT_RDWR);
    close(s->fd);
    pthread_join(s->th, NULL);
}

static int run_bench(const char *args) {
    cmd_result r = test_pagedlm(args);
    int st = r.status;
    test_free_result(&r);
    return st;
}

static void test_bench_serve_against_a_scripted_server(void) {
    fake_server s;
    fake_start(&s, 0);
    char *model = test_data_path("models/stories260K/stories260K.gguf");
    char *result = test_tmp_path("result.json"), args[2048];
    snprintf(args, sizeof args,
             "bench-serve --base-url http://127.0.0.1:%d --model m --tokenizer '%s' --input-len 20 --output-len 3 "
             "--num-prompts 12 --max-concurrency 4 --metric-percentiles 50,99 --save-result '%s'",
             s.port, model, result);
    CHECK_EQ_INT(run_bench(args), 0);
    fake_stop(&s);
    CHECK_EQ_INT(s.served, 12);
    json_t *j = json_load_file(result, 0, NULL);
    REQUIRE(j != NULL);
    CHECK_EQ_INT(json_integer_value(json_object_get(j, "completed")), 12);
    CHECK_EQ_INT(json_integer_value(json_object_get(j, "failed")), 0);
    CHECK_EQ_INT(json_integer_value(json_object_get(j, "total_output_tokens")), 36);
    CHECK_EQ_INT(json_integer_value(json_object_get(j, "total_input_tokens")), 108);
    CHECK(json_number_value(json_object_get(j, "mean_ttft_ms")) > 0);
    CHECK(json_number_value(json_object_get(j, "mean_itl_ms")) > 0);
    CHECK(json_object_get(j, "p50_e2el_ms") != NULL);
    json_decref(j);

    fake_start(&s, 1); /* every request fails */
    snprintf(args, sizeof args,
             "bench-serve --base-url http://127.0.0.1:%d --model m --tokenizer '%s' --input-len 20 --output-len 3 "
             "--num-prompts 5 --request-rate 50 --seed 1 --save-result '%s'",
             s.port, model, result);
    CHECK_EQ_INT(run_bench(args), 0);
    fake_stop(&s);
    j = json_load_file(result, 0, NULL);
    REQUIRE(j != NULL);
    CHECK_EQ_INT(json_integer_value(json_object_get(j, "completed")), 0);
    CHECK_EQ_INT(json_integer_value(json_object_get(j, "failed")), 5);
    json_decref(j);
    CHECK_EQ_INT(run_bench("bench-serve --model m --tokenizer x --request-rate -3"), 2);
    free(model), free(result);
}

static int ignore_body(const char *data, size_t len, void *user) {
    (void)data, (void)len, (void)user;
    return 0;
}

/* `pagedlm serve` on a free port; returns its pid and port. */
static pid_t start_pagedlm_server(int *port) {
    int fds[2];
    REQUIRE(pipe(fds) == 0);
    char *model = test_data_path("models/stories260K/stories260K.gguf");
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        dup2(fds[1], 2);
        close(fds[0]);
        execl(getenv("PAGEDLM_BIN"), "pagedlm", "serve", "-m", model, "--port", "0", "--served-model-name", "s",
              "--disable-log-requests", (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    char log[4096] = "";
    size_t len = 0;
    *port = 0;
    while (!*port && len < sizeof log - 1) {
        ssize_t n = read(fds[0], log + len, sizeof log - 1 - len);
        REQUIRE_MSG(n > 0, "the server ended before listening: %s", log);
        len += (size_t)n;
        log[len] = '\0';
        const char *m = strstr(log, "listening on http://127.0.0.1:");
        if (m) *port = atoi(m + strlen("listening on http://127.0.0.1:"));
    }
    close(fds[0]); /* later lines go nowhere (the server ignores SIGPIPE) */
    free(model);
    /* ready once the model is loaded (503 until then) */
    http_url url;
    char base[64];
    snprintf(base, sizeof base, "http://127.0.0.1:%d", *port);
    REQUIRE(http_parse_url(base, &url) == 0);
    for (int i = 0; i < 600; i++) {
        int status = 0;
        char err[128];
        const char *body = "{\"prompt\": \"a\"}";
        if (http_post(&url, "/tokenize", "", body, strlen(body), ignore_body, NULL, &status, err, sizeof err) == 0 &&
            status == 200)
            return pid;
        struct timespec d = {.tv_sec = 0, .tv_nsec = 50 * 1000000L};
        nanosleep(&d, NULL);
    }
    REQUIRE_MSG(0, "the server did not become ready in 30 s");
    return pid;
}

/* Without --tokenizer the random dataset is made through the server's own
 * /tokenize and /detokenize, with vLLM's --random-* spellings; each prompt
 * comes within a token of the drawn length (a decode/encode round trip is
 * not always exact), BOS added by the server. */
static void test_bench_serve_without_a_tokenizer_uses_the_server(void) {
    int port;
    pid_t pid = start_pagedlm_server(&port);
    char *result = test_tmp_path("remote.json"), args[2048];
    snprintf(args, sizeof args,
             "bench-serve --base-url http://127.0.0.1:%d --model s --random-input-len 40 --random-output-len 4 "
             "--random-range-ratio 0 --random-prefix-len 0 --num-prompts 10 --ignore-eos --save-result '%s'",
             port, result);
    int st = run_bench(args);
    kill(pid, SIGTERM);
    waitpid(pid, NULL, 0);
    CHECK_EQ_INT(st, 0);
    json_t *j = json_load_file(result, 0, NULL);
    REQUIRE(j != NULL);
    CHECK_EQ_INT(json_integer_value(json_object_get(j, "completed")), 10);
    CHECK_EQ_INT(json_integer_value(json_object_get(j, "failed")), 0);
    CHECK_EQ_INT(json_integer_value(json_object_get(j, "total_output_tokens")), 40);
    long long in = json_integer_value(json_object_get(j, "total_input_tokens"));
    CHECK_MSG(in >= 10 * 41 - 10 && in <= 10 * 41 + 10, "total input tokens %lld, expected 410 +- 10", in);
    json_decref(j);
    free(result);
}

int main(void) {
    RUN(test_metrics_on_a_scripted_stream);
    RUN(test_percentiles_interpolate_like_numpy);
    RUN(test_random_dataset_lengths_and_seed);
    RUN(test_poisson_arrivals_are_seeded);
    RUN(test_sse_and_chunked_decoding_across_splits);
    RUN(test_bench_serve_against_a_scripted_server);
    RUN(test_bench_serve_without_a_tokenizer_uses_the_server);
    return test_summary();
}
