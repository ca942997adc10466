/*
 * added.c - added tokens (tokenizer.json added_tokens; GGUF control and
 * user-defined tokens) found in text before normalization and the model.
 *
 * What it is for: splitting text into "token" and "text" fragments the way
 * Hugging Face's AddedVocabulary does: all added tokens go into one trie;
 * matches are leftmost-longest and non-overlapping (aho-corasick's
 * LeftmostLongest, resumed after each match's end); a special token is passed
 * over (left as text) unless the caller parses special tokens; a single_word
 * token needs no letter or digit on either side; lstrip / rstrip tokens
 * swallow the whitespace next to them. What it is not for: normalization or
 * the model (tokenizer.c drives those).
 *
 * Cost: one bitmap test per byte, and a trie walk only where some token can
 * start.
 */
#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>

#include "tokenizer/tok_internal.h"
#include "util/error.h"

bool tok_cp_is_space(uint32_t cp) {
    if (cp < 0x80) return cp == ' ' || (cp >= 0x09 && cp <= 0x0D);
    if (cp == 0x85) return true;
    utf8proc_category_t cat = utf8proc_category((utf8proc_int32_t)cp);
    return cat == UTF8PROC_CATEGORY_ZS || cat == UTF8PROC_CATEGORY_ZL || cat == UTF8PROC_CATEGORY_ZP;
}

bool tok_cp_is_alnum(uint32_t cp) {
    if (cp < 0x80)
        return (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z');
    switch (utf8proc_category((utf8proc_int32_t)cp)) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_NO:
        return true;
    default:
        return false;
    }
}

/* ---------------------------------------------------------------------------
 * The trie
 * ------------------------------------------------------------------------- */

void tok_trie_free(tok_trie *tr) {
    free(tr->nodes);
    free(tr->entries);
    memset(tr, 0, sizeof *tr);
}

static int32_t new_node(tok_trie *tr, uint8_t byte) {
    if (tr->n_nodes == tr->cap_nodes) {
        int32_t cap = tr->cap_nodes ? tr->cap_nodes * 2 : 64;
        tok_trie_node *nodes = realloc(tr->nodes, (size_t)cap * sizeof *nodes);
        if (!nodes) return -1;
        tr->nodes = nodes;
        tr->cap_nodes = cap;
    }
    tr->nodes[tr->n_nodes] = (tok_trie_node){.child = -1, .sibling = -1, .added = -1, .byte = byte};
    return tr->n_nodes++;
}

static int32_t find_child(const tok_trie *tr, int32_t node, uint8_t byte) {
    for (int32_t c = tr->nodes[node].child; c >= 0; c = tr->nodes[c].sibling)
        if (tr->nodes[c].byte == byte) return c;
    return -1;
}

bool tok_trie_add(tok_trie *tr, const char *s, size_t n, int32_t id, uint8_t flags) {
    if (n == 0) return true;  /* an empty token can never match */
    if (tr->n_nodes == 0 && new_node(tr, 0) < 0) return false;
    int32_t node = 0;
    for (size_t i = 0; i < n; i++) {
        uint8_t b = (uint8_t)s[i];
        int32_t c = find_child(tr, node, b);
        if (c < 0) {
            c = new_node(tr, b);
            if (c < 0) return false;
            tr->nodes[c].sibling = tr->nodes[node].child;
            tr->nodes[node].child = c;
        }
        node = c;
    }
    if (tr->nodes[node].added >= 0) {
        /* the same content twice: the last one wins, as in HF's map */
        tr->entries[tr->nodes[node].added] = (tok_added_entry){id, flags};
        return true;
    }
    if (tr->n_entries == tr->cap_entries) {
        int32_t cap = tr->cap_entries ? tr->cap_entries * 2 : 16;
        tok_added_entry *e = realloc(tr->entries, (size_t)cap * sizeof *e);
        if (!e) return false;
        tr->entries = e;
        tr->cap_entries = cap;
    }
    tr->entries[tr->n_entries] = (tok_added_entry){id, flags};
    tr->nodes[node].added = tr->n_entries++;
    tr->first[(uint8_t)s[0] >> 3] |= (uint8_t)(1u << ((uint8_t)s[0] & 7));
    return true;
}

/* The longest token starting at s[0..n): its entry index and length. */
static int32_t longest_at(const tok_trie *tr, const char *s, size_t n, size_t *len) {
    int32_t node = 0, best = -1;
    for (size_t i = 0; i < n; i++) {
        node = find_child(tr, node, (uint8_t)s[i]);
        if (node < 0) break;
        if (tr->nodes[node].added >= 0) {
            best = tr->nodes[node].added;
            *len = i + 1;
        }
    }
    return best;
}

/* ---------------------------------------------------------------------------
 * Characters around a match
 * ------------------------------------------------------------------------- */

/* The code point of the character that ends at s[end] (exclusive), or -1. */
static int64_t char_before(const char *s, size_t begin, size_t end) {
    size_t k = end;
    for (int back = 0; back < 4 && k > begin; back++) {
        k--;
        if (((uint8_t)s[k] & 0xC0) != 0x80) {
            size_t cl = tok_utf8_char_len((const uint8_t *)s + k, end - k);
            if (cl == end - k) return tok_utf8_decode((const uint8_t *)s + k, cl);
            return -1;
        }
    }
    return -1;
}

static int64_t char_at(const char *s, size_t i, size_t n, size_t *cl) {
    *cl = tok_utf8_char_len((const uint8_t *)s + i, n - i);
    return *cl ? (int64_t)tok_utf8_decode((const uint8_t *)s + i, *cl) : -1;
}

/* Start of the whitespace run that ends at s[end] (HF's space_leftmost_at_end). */
static size_t space_run_start(const char *s, size_t begin, size_t end) {
    for (;;) {
        int64_t cp = char_before(s, begin, end);
        if (cp < 0 || !tok_cp_is_space((uint32_t)cp)) return end;
        do end--; while (((uint8_t)s[end] & 0xC0) == 0x80);
    }
}

/* End of the whitespace run that starts at s[i] (HF's space_rightmost_at_start). */
static size_t space_run_end(const char *s, size_t i, size_t n) {
    size_t cl;
    int64_t cp;
    while (i < n && (cp = char_at(s, i, n, &cl)) >= 0 && tok_cp_is_space((uint32_t)cp)) i += cl;
    return i;
}

/* ---------------------------------------------------------------------------
 * The split
 * ------------------------------------------------------------------------- */

int tok_added_split(tok_ctx *c, const tok_trie *tr, const char *s, size_t n, bool parse_special,
                    tok_text_fn on_text) {
    if (tr->n_entries == 0) return n ? on_text(c, s, n, 0) : 0;
    size_t done = 0;  /* text before this offset has been handed on */
    size_t i = 0;
    while (i < n) {
        uint8_t b = (uint8_t)s[i];
        if (!(tr->first[b >> 3] & (1u << (b & 7)))) {
            i++;
            continue;
        }
        size_t len = 0;
        int32_t e = longest_at(tr, s + i, n - i, &len);
        if (e < 0) {
            i++;
            continue;
        }
        const tok_added_entry *a = &tr->entries[e];
        size_t start = i, stop = i + len;
        i = stop;  /* the next search starts after this match, used or not */
        if ((a->flags & TOK_ADDED_SPECIAL) && !parse_special) continue;
        if (a->flags & TOK_ADDED_SINGLE_WORD) {
            int64_t before = char_before(s, 0, start);
            size_t cl;
            int64_t after = stop < n ? char_at(s, stop, n, &cl) : -1;
            if ((before >= 0 && tok_cp_is_alnum((uint32_t)before)) ||
                (after >= 0 && tok_cp_is_alnum((uint32_t)after)))
                continue;
        }
        if (a->flags & TOK_ADDED_LSTRIP) {
            size_t ns = space_run_start(s, 0, start);
            start = ns > done ? ns : done;
        }
        if (a->flags & TOK_ADDED_RSTRIP) stop = space_run_end(s, stop, n);
        if (done < start && on_text(c, s + done, start - done, done) != 0) return -1;
        if (!tok_ctx_push(c, &a->id, 1)) return -1;
        done = stop;
    }
    if (done < n && on_text(c, s + done, n - done, done) != 0) return -1;
    return 0;
}
