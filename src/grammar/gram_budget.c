/*
 * gram_budget.c - the work budget of one grammar compilation: steps counted
 * as the compiler goes, the clock and the caller's cancel hook read every
 * GRAM_POLL_WORK steps, and the message that refuses a grammar which ran
 * out of any of them.
 *
 * Why count steps rather than check sizes at the end: the costly grammars
 * are small (a regex of a few bytes whose subset construction explodes), and
 * what they cost is time and memory on the way, so the bound must hold
 * while the work is done. The step count is deterministic (the same grammar
 * is refused on every machine); the clock is the backstop.
 *
 * What it is not for: the limits of a matcher at run time (gram_match.c).
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <time.h>

#include "grammar/gram_internal.h"
#include "util/error.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

void gram_budget_init(gram_budget *b, const gram_limits *lim) {
    gram_limits d = {0};
    if (lim) d = *lim;
    *b = (gram_budget){0};
    b->max_work = d.max_work > 0 ? d.max_work : GRAM_DEFAULT_MAX_WORK;
    b->max_states = d.max_states > 0 ? d.max_states : GRAM_DEFAULT_MAX_STATES;
    b->max_seconds = d.max_seconds == 0 ? GRAM_DEFAULT_MAX_SECONDS : d.max_seconds;
    b->deadline = b->max_seconds > 0 ? now_s() + b->max_seconds : 0;
    b->cancelled = d.cancelled;
    b->user = d.user;
    b->next_poll = GRAM_POLL_WORK < b->max_work ? GRAM_POLL_WORK : b->max_work;
    b->stage = "parsing";
}

bool gram_budget_poll(gram_budget *b) {
    if (b->stop != GRAM_BUDGET_OK) return false;
    if (b->used >= b->max_work) b->stop = GRAM_BUDGET_WORK;
    else if (b->deadline > 0 && now_s() > b->deadline) b->stop = GRAM_BUDGET_TIME;
    else if (b->cancelled && b->cancelled(b->user)) b->stop = GRAM_BUDGET_CANCELLED;
    int64_t next = b->used + GRAM_POLL_WORK;
    b->next_poll = next < b->max_work ? next : b->max_work;
    return b->stop == GRAM_BUDGET_OK;
}

int gram_budget_fail(const gram_budget *b, pdl_error *err) {
    static const char why[] = "nested or ambiguous repetitions such as (a|a)*, (ab|ab)* or ((a{1,100}){1,100}){1,100} "
                              "multiply the automaton's states; simplify the grammar";
    switch (b->stop) {
    case GRAM_BUDGET_WORK:
        return err_fail(err, "grammar too complex: compiling it needs more than %lld steps of work (the limit; "
                        "stopped while %s): %s", (long long)b->max_work, b->stage, why);
    case GRAM_BUDGET_STATES:
        return err_fail(err, "grammar too complex: it needs more than %d automaton states (the limit; stopped "
                        "while %s): %s", b->max_states, b->stage, why);
    case GRAM_BUDGET_TIME:
        return err_fail(err, "grammar too complex: compiling it takes longer than %.3g s (the limit; stopped "
                        "while %s): %s", b->max_seconds, b->stage, why);
    case GRAM_BUDGET_CANCELLED: return err_fail(err, "grammar: compilation cancelled (while %s)", b->stage);
    default: return err_fail(err, "grammar: compilation stopped");
    }
}
