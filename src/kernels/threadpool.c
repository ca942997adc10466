/*
 * threadpool.c - persistent workers woken per parallel region.
 *
 * A decode step runs dozens of short regions, so waking must be cheap:
 * workers spin briefly on an atomic generation counter before sleeping on a
 * condition variable, and the caller spins briefly on the workers' pending
 * count before sleeping until the last worker signals. Both sleep after a
 * short spin so that an oversubscribed machine (more threads than cores)
 * hands the CPU over instead of burning it. Generation changes and the
 * caller's sleep are both under the mutex, so no wake-up is lost.
 *
 * A region's width travels in the generation word itself (the low bits), so
 * a worker reads the number of threads of the region it saw, never the next
 * one's: a worker left out of a region may see that region's generation late,
 * after the caller has already set up the next region; had it read the width
 * from a separate field it would have run the next region's share, then run
 * it again on seeing the new generation, and the caller would have returned
 * with a share still running. The task and its context are read only by
 * workers that take part, and a region cannot end without them.
 */
#define _POSIX_C_SOURCE 200809L
#include "kernels/threadpool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

/* Spin iterations before a worker sleeps / the caller starts yielding. */
#define WIDTH_BITS 16 /* generation = (region sequence << WIDTH_BITS) | threads taking part */
#define WIDTH_MASK ((1ul << WIDTH_BITS) - 1)
#define WORKER_SPINS 4000
#define CALLER_SPINS 4000

struct pdl_threadpool {
    int n_threads;
    pthread_t *threads;          /* [n_threads - 1]; worker 0 is the caller */
    pthread_mutex_t mu;
    pthread_cond_t start_cv;
    pthread_cond_t done_cv;
    int caller_waiting;          /* the caller sleeps on done_cv (under mu) */
    atomic_ulong generation;     /* (sequence << WIDTH_BITS) | width, changed (under mu) for every region */
    atomic_int pending;          /* workers still running the current region */
    int sleepers;                /* workers waiting on start_cv (under mu) */
    atomic_int stop;
    pdl_task_fn fn;              /* published before generation is bumped; read only by the threads taking part */
    void *ctx;
};

typedef struct worker_arg {
    pdl_threadpool *pool;
    int ith;
} worker_arg;

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static void *worker_main(void *p) {
    worker_arg a = *(worker_arg *)p;
    free(p);
    pdl_threadpool *pool = a.pool;
    unsigned long seen = 0;
    for (;;) {
        unsigned long g = atomic_load_explicit(&pool->generation, memory_order_acquire);
        for (int i = 0; i < WORKER_SPINS && g == seen && !atomic_load(&pool->stop); i++) {
            cpu_relax();
            g = atomic_load_explicit(&pool->generation, memory_order_acquire);
        }
        if (g == seen) {
            pthread_mutex_lock(&pool->mu);
            pool->sleepers++;
            while (!atomic_load(&pool->stop) && (g = atomic_load(&pool->generation)) == seen)
                pthread_cond_wait(&pool->start_cv, &pool->mu);
            pool->sleepers--;
            pthread_mutex_unlock(&pool->mu);
        }
        if (atomic_load(&pool->stop)) return NULL;
        seen = g;
        int width = (int)(g & WIDTH_MASK); /* this region's, whatever the caller does next */
        if (a.ith >= width) continue;      /* not needed for this region */
        pool->fn(pool->ctx, a.ith, width);
        if (atomic_fetch_sub_explicit(&pool->pending, 1, memory_order_acq_rel) == 1) {
            pthread_mutex_lock(&pool->mu);
            if (pool->caller_waiting) pthread_cond_signal(&pool->done_cv);
            pthread_mutex_unlock(&pool->mu);
        }
    }
}

pdl_threadpool *threadpool_new(int n_threads) {
    if (n_threads <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = n > 0 ? (int)n : 1;
    }
    if (n_threads > (int)WIDTH_MASK) n_threads = (int)WIDTH_MASK;
    pdl_threadpool *pool = calloc(1, sizeof *pool);
    if (!pool) return NULL;
    pool->n_threads = n_threads;
    pthread_mutex_init(&pool->mu, NULL);
    pthread_cond_init(&pool->start_cv, NULL);
    pthread_cond_init(&pool->done_cv, NULL);
    atomic_init(&pool->generation, 0);
    atomic_init(&pool->pending, 0);
    atomic_init(&pool->stop, 0);
    if (n_threads > 1) {
        pool->threads = calloc((size_t)n_threads - 1, sizeof *pool->threads);
        if (!pool->threads) {
            free(pool);
            return NULL;
        }
    }
    for (int i = 1; i < n_threads; i++) {
        worker_arg *a = malloc(sizeof *a);
        if (a) {
            a->pool = pool;
            a->ith = i;
        }
        if (!a || pthread_create(&pool->threads[i - 1], NULL, worker_main, a) != 0) {
            free(a);
            pool->n_threads = i; /* the workers started so far */
            threadpool_free(pool);
            return NULL;
        }
    }
    return pool;
}

void threadpool_free(pdl_threadpool *pool) {
    if (!pool) return;
    pthread_mutex_lock(&pool->mu);
    atomic_store(&pool->stop, 1);
    pthread_cond_broadcast(&pool->start_cv);
    pthread_mutex_unlock(&pool->mu);
    for (int i = 1; i < pool->n_threads; i++) pthread_join(pool->threads[i - 1], NULL);
    pthread_mutex_destroy(&pool->mu);
    pthread_cond_destroy(&pool->start_cv);
    pthread_cond_destroy(&pool->done_cv);
    free(pool->threads);
    free(pool);
}

int threadpool_size(const pdl_threadpool *pool) { return pool->n_threads; }

void threadpool_run(pdl_threadpool *pool, pdl_task_fn fn, void *ctx) {
    threadpool_run_n(pool, pool->n_threads, fn, ctx);
}

int threadpool_threads_for(const pdl_threadpool *pool, double work, double min_work_per_thread) {
    double n = work / min_work_per_thread;
    if (n < 1) return 1;
    return n >= pool->n_threads ? pool->n_threads : (int)n;
}

void threadpool_run_n(pdl_threadpool *pool, int n, pdl_task_fn fn, void *ctx) {
    if (n > pool->n_threads) n = pool->n_threads;
    if (n <= 1) {
        fn(ctx, 0, 1);
        return;
    }
    pool->fn = fn;
    pool->ctx = ctx;
    atomic_store_explicit(&pool->pending, n - 1, memory_order_relaxed);
    pthread_mutex_lock(&pool->mu);
    unsigned long seq = (atomic_load_explicit(&pool->generation, memory_order_relaxed) >> WIDTH_BITS) + 1;
    atomic_store_explicit(&pool->generation, (seq << WIDTH_BITS) | (unsigned long)n, memory_order_release);
    if (pool->sleepers > 0) pthread_cond_broadcast(&pool->start_cv);
    pthread_mutex_unlock(&pool->mu);

    fn(ctx, 0, n);

    for (int i = 0; i < CALLER_SPINS; i++) {
        if (atomic_load_explicit(&pool->pending, memory_order_acquire) == 0) return;
        cpu_relax();
    }
    pthread_mutex_lock(&pool->mu);
    pool->caller_waiting = 1;
    while (atomic_load(&pool->pending) > 0) pthread_cond_wait(&pool->done_cv, &pool->mu);
    pool->caller_waiting = 0;
    pthread_mutex_unlock(&pool->mu);
}
