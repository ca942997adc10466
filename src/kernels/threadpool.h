/*
 * threadpool.h - a persistent pool of worker threads for the kernels.
 *
 * A forward step runs many short parallel regions; the workers stay alive
 * between them so a region costs a wake-up, not a thread start. The calling
 * thread takes part as worker 0. Work is split by the kernels themselves
 * (by output columns), so results never depend on the number of threads.
 */
#ifndef PDL_KERNELS_THREADPOOL_H
#define PDL_KERNELS_THREADPOOL_H

typedef struct pdl_threadpool pdl_threadpool;

/* fn(ctx, ith, nth) is called once for every ith in [0, nth). */
typedef void (*pdl_task_fn)(void *ctx, int ith, int nth);

/* n_threads <= 0 means all online cores. Returns NULL when out of memory. */
pdl_threadpool *threadpool_new(int n_threads);
void threadpool_free(pdl_threadpool *pool);
int threadpool_size(const pdl_threadpool *pool);
/* Runs fn on every thread of the pool and returns when all are done. */
void threadpool_run(pdl_threadpool *pool, pdl_task_fn fn, void *ctx);
/* The same on the first n threads only (fn sees nth = n); n <= 1 runs fn
 * inline without waking anyone. Kernels split work so that their results
 * do not depend on n. */
void threadpool_run_n(pdl_threadpool *pool, int n, pdl_task_fn fn, void *ctx);
/* How many threads a region of `work` units deserves: at least
 * min_work_per_thread each, at most the pool size. Small regions run on one
 * thread: waking workers would cost more than the work. */
int threadpool_threads_for(const pdl_threadpool *pool, double work, double min_work_per_thread);

/* The [begin, end) share of n items for thread ith of nth. */
static inline void threadpool_split_range(long n, int ith, int nth, long *begin, long *end) {
    long per = n / nth, rem = n % nth;
    *begin = ith * per + (ith < rem ? ith : rem);
    *end = *begin + per + (ith < rem ? 1 : 0);
}

#endif
