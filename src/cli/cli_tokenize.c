/*
 * cli_tokenize.c - `pagedlm tokenize`, `pagedlm detokenize` and
 * `pagedlm bench-tokenizer`: a model's tokenizer on its own.
 *
 * -m takes a .gguf file, a Hugging Face model folder, or a folder with only
 * tokenizer.json (+ tokenizer_config.json); no weights are read
 * (pdl_tokenizer_load). What it is not for: chat templates (`pagedlm
 * template`).
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli_args.h"
#include "util/file_map.h"
#include "util/clock.h"
#include "util/sorted.h"

/* ---------------------------------------------------------------------------
 * tokenize
 * ------------------------------------------------------------------------- */

static void tokenize_usage(FILE *f) {
    fprintf(f,
            "usage: pagedlm tokenize -m MODEL_OR_DIR [--no-add-special] [--parse-special] [--json] TEXT\n"
            "prints the ids of TEXT (\"-\": standard input), space-separated, or one JSON array with --json.\n"
            "  --no-add-special  add no BOS/EOS (by default: what the tokenizer adds, as HF encode(text))\n"
            "  --parse-special   special-token text such as <|im_start|> becomes its id\n");
}

static pdl_tokenizer *load_or_report(const char *path) {
    pdl_error err;
    pdl_tokenizer *tok = NULL;
    if (pdl_tokenizer_load(&tok, path, &err) != 0) {
        fprintf(stderr, "error: %s\n", err.message);
        return NULL;
    }
    return tok;
}

int cli_tokenize(int argc, char **argv) {
    const char *model_path = NULL, *text = NULL;
    unsigned flags = PDL_TOK_ADD_SPECIAL;
    bool json = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            tokenize_usage(stdout);
            return CLI_OK;
        } else if (strcmp(a, "--no-add-special") == 0) {
            flags &= ~(unsigned)PDL_TOK_ADD_SPECIAL;
        } else if (strcmp(a, "--parse-special") == 0) {
            flags |= PDL_TOK_PARSE_SPECIAL;
        } else if (strcmp(a, "--json") == 0) {
            json = true;
        } else if (strcmp(a, "-m") == 0 || strcmp(a, "--model") == 0) {
            if (!(v = cli_value(argc, argv, &i))) return CLI_USAGE;
            model_path = v;
        } else if (a[0] == '-' && a[1] != '\0') {
            fprintf(stderr, "error: unknown option '%s' for tokenize\n", a);
            tokenize_usage(stderr);
            return CLI_USAGE;
        } else if (text) {
            fprintf(stderr, "error: tokenize takes one TEXT argument (quote it)\n");
            return CLI_USAGE;
        } else {
            text = a;
        }
    }
    if (!model_path || !text) {
        fprintf(stderr, "error: tokenize needs -m MODEL_OR_DIR and TEXT\n");
        tokenize_usage(stderr);
        return CLI_USAGE;
    }
    size_t len = strlen(text);
    char *input = NULL;
    if (strcmp(text, "-") == 0) {
        input = cli_read_stdin(&len, PDL_READ_MAX_TOKENIZER);
        if (!input) {
            fprintf(stderr, "error: out of memory reading standard input\n");
            return CLI_FAIL;
        }
        text = input;
    }
    pdl_tokenizer *tok = load_or_report(model_path);
    if (!tok) {
        free(input);
        return CLI_FAIL;
    }
    pdl_error err;
    int32_t *ids = NULL;
    size_t n = 0;
    int rc = CLI_OK;
    if (pdl_tokenizer_encode(tok, text, len, flags, &ids, &n, &err) != 0) {
        fprintf(stderr, "error: %s\n", err.message);
        rc = CLI_FAIL;
    } else {
        if (json) putchar('[');
        for (size_t i = 0; i < n; i++) printf(i ? (json ? ", %d" : " %d") : "%d", (int)ids[i]);
        puts(json ? "]" : "");
    }
    free(ids);
    free(input);
    pdl_tokenizer_free(tok);
    return rc;
}

/* ---------------------------------------------------------------------------
 * detokenize
 * ------------------------------------------------------------------------- */

static void detokenize_usage(FILE *f) {
    fprintf(f,
            "usage: pagedlm detokenize -m MODEL_OR_DIR [--keep-special] IDS...\n"
            "prints the text of the ids (separated by spaces or commas) and a newline.\n"
            "  --keep-special  print special tokens' text too (skipped by default, as HF\n"
            "                  decode(skip_special_tokens=True))\n");
}

/* Appends the ids in s ("1 2", "1,2") to *ids. */
static int parse_ids(const char *s, int32_t **ids, size_t *n, size_t *cap) {
    const char *p = s;
    for (;;) {
        while (*p == ' ' || *p == ',' || *p == '\t' || *p == '\n') p++;
        if (!*p) return 0;
        char *end;
        long v = strtol(p, &end, 10);
        bool sep = !*end || *end == ' ' || *end == ',' || *end == '\t' || *end == '\n';
        if (end == p || v < 0 || v > INT32_MAX || !sep) {
            fprintf(stderr, "error: detokenize expects token ids, bad item at '%s'\n", p);
            return -1;
        }
        if (*n == *cap) {
            size_t nc = *cap ? *cap * 2 : 64;
            int32_t *ni = realloc(*ids, nc * sizeof *ni);
            if (!ni) return -1;
            *ids = ni;
            *cap = nc;
        }
        (*ids)[(*n)++] = (int32_t)v;
        p = end;
    }
}

int cli_detokenize(int argc, char **argv) {
    const char *model_path = NULL;
    unsigned flags = 0;
    int32_t *ids = NULL;
    size_t n = 0, cap = 0;
    bool any = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            detokenize_usage(stdout);
            free(ids);
            return CLI_OK;
        } else if (strcmp(a, "--keep-special") == 0) {
            flags |= PDL_TOK_KEEP_SPECIAL;
        } else if (strcmp(a, "-m") == 0 || strcmp(a, "--model") == 0) {
            if (!(v = cli_value(argc, argv, &i))) {
                free(ids);
                return CLI_USAGE;
            }
            model_path = v;
        } else if (a[0] == '-' && !(a[1] >= '0' && a[1] <= '9')) {
            fprintf(stderr, "error: unknown option '%s' for detokenize\n", a);
            detokenize_usage(stderr);
            free(ids);
            return CLI_USAGE;
        } else {
            any = true;
            if (parse_ids(a, &ids, &n, &cap) != 0) {
                free(ids);
                return CLI_USAGE;
            }
        }
    }
    if (!model_path || !any) {
        fprintf(stderr, "error: detokenize needs -m MODEL_OR_DIR and IDS\n");
        detokenize_usage(stderr);
        free(ids);
        return CLI_USAGE;
    }
    pdl_tokenizer *tok = load_or_report(model_path);
    if (!tok) {
        free(ids);
        return CLI_FAIL;
    }
    pdl_error err;
    char *text = NULL;
    size_t len = 0;
    int rc = CLI_OK;
    if (pdl_tokenizer_decode(tok, ids, n, flags, &text, &len, &err) != 0) {
        fprintf(stderr, "error: %s\n", err.message);
        rc = CLI_FAIL;
    } else {
        fwrite(text, 1, len, stdout);
        putchar('\n');
    }
    free(text);
    free(ids);
    pdl_tokenizer_free(tok);
    return rc;
}

/* ---------------------------------------------------------------------------
 * bench-tokenizer
 * ------------------------------------------------------------------------- */

/* Public-domain English prose (Jane Austen, Pride and Prejudice, 1813,
 * chapter 1), repeated to the benchmark size when no --file is given. */
static const char PROSE[] =
    "It is a truth universally acknowledged, that a single man in possession of a good fortune, "
    "must be in want of a wife.\n\n"
    "However little known the feelings or views of such a man may be on his first entering a "
    "neighbourhood, this truth is so well fixed in the minds of the surrounding families, that he is "
    "considered the rightful property of some one or other of their daughters.\n\n"
    "\"My dear Mr. Bennet,\" said his lady to him one day, \"have you heard that Netherfield Park is let "
    "at last?\"\n\n"
    "Mr. Bennet replied that he had not.\n\n"
    "\"But it is,\" returned she; \"for Mrs. Long has just been here, and she told me all about it.\"\n\n"
    "Mr. Bennet made no answer.\n\n"
    "\"Do you not want to know who has taken it?\" cried his wife impatiently.\n\n"
    "\"You want to tell me, and I have no objection to hearing it.\"\n\n"
    "This was invitation enough.\n\n"
    "\"Why, my dear, you must know, Mrs. Long says that Netherfield is taken by a young man of large "
    "fortune from the north of England; that he came down on Monday in a chaise and four to see the "
    "place, and was so much delighted with it, that he agreed with Mr. Morris immediately; that he is "
    "to take possession before Michaelmas, and some of his servants are to be in the house by the end "
    "of next week.\"\n\n"
    "\"What is his name?\"\n\n"
    "\"Bingley.\"\n\n"
    "\"Is he married or single?\"\n\n"
    "\"Oh! Single, my dear, to be sure! A single man of large fortune; four or five thousand a year. "
    "What a fine thing for our girls!\"\n\n"
    "\"How so? How can it affect them?\"\n\n"
    "\"My dear Mr. Bennet,\" replied his wife, \"how can you be so tiresome! You must know that I am "
    "thinking of his marrying one of them.\"\n\n"
    "\"Is that his design in settling here?\"\n\n"
    "\"Design! Nonsense, how can you talk so! But it is very likely that he may fall in love with one "
    "of them, and therefore you must visit him as soon as he comes.\"\n\n"
    "\"I see no occasion for that. You and the girls may go, or you may send them by themselves, which "
    "perhaps will be still better, for as you are as handsome as any of them, Mr. Bingley may like you "
    "the best of the party.\"\n\n"
    "\"My dear, you flatter me. I certainly have had my share of beauty, but I do not pretend to be "
    "anything extraordinary now. When a woman has five grown-up daughters, she ought to give over "
    "thinking of her own beauty.\"\n\n"
    "\"In such cases, a woman has not often much beauty to think of.\"\n\n"
    "\"But, my dear, you must indeed go and see Mr. Bingley when he comes into the neighbourhood.\"\n\n"
    "\"It is more than I engage for, I assure you.\"\n\n"
    "\"But consider your daughters. Only think what an establishment it would be for one of them. Sir "
    "William and Lady Lucas are determined to go, merely on that account, for in general, you know, "
    "they visit no newcomers. Indeed you must go, for it will be impossible for us to visit him if you "
    "do not.\"\n\n";

static void bench_usage(FILE *f) {
    fprintf(f,
            "usage: pagedlm bench-tokenizer -m MODEL_OR_DIR [--file TEXT] [--repeat N] [--size BYTES]\n"
            "times loading the tokenizer, encoding TEXT (default: English prose repeated to --size,\n"
            "1 MiB) and decoding the ids on one core; prints the median of N runs (default 5).\n");
}

static double median(double *v, int n) {
    sorted_doubles(v, (size_t)n);
    return sorted_median(v, (size_t)n);
}

int cli_bench_tokenizer(int argc, char **argv) {
    const char *model_path = NULL, *file = NULL;
    long repeat = 5;
    size_t size = 1u << 20;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            bench_usage(stdout);
            return CLI_OK;
        } else if (!(v = cli_value(argc, argv, &i))) {
            return CLI_USAGE;
        } else if (strcmp(a, "-m") == 0 || strcmp(a, "--model") == 0) {
            model_path = v;
        } else if (strcmp(a, "--file") == 0) {
            file = v;
        } else if (strcmp(a, "--repeat") == 0) {
            if (cli_int(a, v, 1, 1000, &repeat)) return CLI_USAGE;
        } else if (strcmp(a, "--size") == 0) {
            if (cli_size(a, v, &size) || size == 0) return CLI_USAGE;
        } else {
            fprintf(stderr, "error: unknown option '%s' for bench-tokenizer\n", a);
            bench_usage(stderr);
            return CLI_USAGE;
        }
    }
    if (!model_path) {
        fprintf(stderr, "error: bench-tokenizer needs -m MODEL_OR_DIR\n");
        bench_usage(stderr);
        return CLI_USAGE;
    }

    char *text = NULL;
    size_t len = 0;
    if (file) {
        pdl_error err;
        if (file_read(file, PDL_READ_MAX_TOKENIZER, &text, &len, &err)) {
            fprintf(stderr, "error: %s\n", err.message);
            return CLI_FAIL;
        }
    } else {
        text = malloc(size);
        for (size_t k = 0; text && k < size; k += sizeof PROSE - 1) {
            size_t l = size - k < sizeof PROSE - 1 ? size - k : sizeof PROSE - 1;
            memcpy(text + k, PROSE, l);
        }
        len = text ? size : 0;
    }
    if (!text) {
        fprintf(stderr, "error: out of memory for the text\n");
        return CLI_FAIL;
    }

    double *t_load = calloc((size_t)repeat, sizeof *t_load);
    double *t_enc = calloc((size_t)repeat, sizeof *t_enc);
    double *t_dec = calloc((size_t)repeat, sizeof *t_dec);
    pdl_tokenizer *tok = NULL;
    int32_t *ids = NULL;
    size_t n_ids = 0, dec_len = 0;
    pdl_error err;
    int rc = CLI_OK;
    for (long r = 0; r < repeat && rc == CLI_OK; r++) {
        pdl_tokenizer_free(tok);
        double t0 = clock_now_s();
        if (pdl_tokenizer_load(&tok, model_path, &err) != 0) {
            fprintf(stderr, "error: %s\n", err.message);
            tok = NULL;
            rc = CLI_FAIL;
            break;
        }
        t_load[r] = clock_now_s() - t0;
    }
    for (long r = 0; r < repeat && rc == CLI_OK; r++) {
        free(ids);
        ids = NULL;
        double t0 = clock_now_s();
        if (pdl_tokenizer_encode(tok, text, len, 0, &ids, &n_ids, &err) != 0) {
            fprintf(stderr, "error: %s\n", err.message);
            rc = CLI_FAIL;
            break;
        }
        t_enc[r] = clock_now_s() - t0;
    }
    for (long r = 0; r < repeat && rc == CLI_OK; r++) {
        char *out = NULL;
        double t0 = clock_now_s();
        if (pdl_tokenizer_decode(tok, ids, n_ids, 0, &out, &dec_len, &err) != 0) {
            fprintf(stderr, "error: %s\n", err.message);
            rc = CLI_FAIL;
            break;
        }
        t_dec[r] = clock_now_s() - t0;
        free(out);
    }
    if (rc == CLI_OK) {
        int n = (int)repeat;
        double load = median(t_load, n), enc = median(t_enc, n), dec = median(t_dec, n);
        printf("tokenizer: %s (vocab %d)\n", model_path, pdl_tokenizer_vocab_size(tok));
        printf("text:      %zu bytes (%s), %zu tokens, %.2f bytes/token\n", len, file ? file : "built-in prose",
               n_ids, n_ids ? (double)len / (double)n_ids : 0.0);
        printf("load:      %.1f ms (median of %d)\n", load * 1e3, n);
        printf("encode:    %.1f MB/s, %.1f ms (median of %d, one thread)\n", (double)len / enc / 1e6, enc * 1e3, n);
        printf("decode:    %.1f MB/s, %.1f ms (median of %d, one thread)\n", (double)dec_len / dec / 1e6,
               dec * 1e3, n);
    }
    pdl_tokenizer_free(tok);
    free(ids);
    free(text);
    free(t_load);
    free(t_enc);
    free(t_dec);
    return rc;
}
