/*
 * threadpool.c - persistent workers woken per parallel region.
 *
 * Each region bumps a generation counter under a mutex and broadcasts; the
 * workers run their share and the last one to finish signals the caller.
 */
#define _POSIX_C_SOURCE 200809L
#include "kernels/threadpool.h"

#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

struct pdl_threadpool {
    int n_threads;
    pthread_t *threads;      /* [n_threads - 1]; worker 0 is the caller */
    pthread_mutex_t mu;
    pthread_cond_t start_cv;
    pthread_cond_t done_cv;
    unsigned long generation;/* bumped for every region */
    int pending;             /* workers still running the current region */
    int stop;
    pdl_task_fn fn;
    void *ctx;
};

typedef struct worker_arg {
    pdl_threadpool *pool;
    int ith;
} worker_arg;

static void *worker_main(void *p) {
    worker_arg a = *(worker_arg *)p;
    free(p);
    pdl_threadpool *pool = a.pool;
    unsigned long seen = 0;
    for (;;) {
        pthread_mutex_lock(&pool->mu);
        while (!pool->stop && pool->generation == seen) pthread_cond_wait(&pool->start_cv, &pool->mu);
        if (pool->stop) {
            pthread_mutex_unlock(&pool->mu);
            return NULL;
        }
        seen = pool->generation;
        pdl_task_fn fn = pool->fn;
        void *ctx = pool->ctx;
        pthread_mutex_unlock(&pool->mu);

        fn(ctx, a.ith, pool->n_threads);

        pthread_mutex_lock(&pool->mu);
        if (--pool->pending == 0) pthread_cond_signal(&pool->done_cv);
        pthread_mutex_unlock(&pool->mu);
    }
}

pdl_threadpool *pdl_threadpool_new(int n_threads) {
    if (n_threads <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = n > 0 ? (int)n : 1;
    }
    pdl_threadpool *pool = calloc(1, sizeof *pool);
    if (!pool) return NULL;
    pool->n_threads = n_threads;
    pthread_mutex_init(&pool->mu, NULL);
    pthread_cond_init(&pool->start_cv, NULL);
    pthread_cond_init(&pool->done_cv, NULL);
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
            pdl_threadpool_free(pool);
            return NULL;
        }
    }
    return pool;
}

void pdl_threadpool_free(pdl_threadpool *pool) {
    if (!pool) return;
    pthread_mutex_lock(&pool->mu);
    pool->stop = 1;
    pthread_cond_broadcast(&pool->start_cv);
    pthread_mutex_unlock(&pool->mu);
    for (int i = 1; i < pool->n_threads; i++) pthread_join(pool->threads[i - 1], NULL);
    pthread_mutex_destroy(&pool->mu);
    pthread_cond_destroy(&pool->start_cv);
    pthread_cond_destroy(&pool->done_cv);
    free(pool->threads);
    free(pool);
}

int pdl_threadpool_size(const pdl_threadpool *pool) { return pool->n_threads; }

void pdl_threadpool_run(pdl_threadpool *pool, pdl_task_fn fn, void *ctx) {
    if (pool->n_threads == 1) {
        fn(ctx, 0, 1);
        return;
    }
    pthread_mutex_lock(&pool->mu);
    pool->fn = fn;
    pool->ctx = ctx;
    pool->pending = pool->n_threads - 1;
    pool->generation++;
    pthread_cond_broadcast(&pool->start_cv);
    pthread_mutex_unlock(&pool->mu);

    fn(ctx, 0, pool->n_threads);

    pthread_mutex_lock(&pool->mu);
    while (pool->pending > 0) pthread_cond_wait(&pool->done_cv, &pool->mu);
    pthread_mutex_unlock(&pool->mu);
}
