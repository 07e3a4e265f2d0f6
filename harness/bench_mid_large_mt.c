/* bench_mid_large_mt: random-mixed in every thread, each with its own working set and seed
 * (seed + thread index), mid/large sizes by default. Timed from the first thread's start
 * (after a common start barrier) to the last thread's end. */
#define _GNU_SOURCE
#include "common.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "usage: bench_mid_large_mt --threads N --iters N [--ws N] [--seed N] [--min B] [--max B]\n"
    "  --threads N    worker threads\n"
    "  --iters N      iterations per thread, one malloc or free each (0: start-up only)\n"
    "  --ws N         working-set slots per thread (default 256)\n"
    "  --seed N       thread t uses seed N+t (default 1)\n"
    "  --min/--max B  block sizes, uniform in [min,max] (default 8192..32768)\n";

typedef struct {
    pthread_t thread;
    pthread_barrier_t *start_line;
    hb_mixed mixed;
    uint64_t iters;
    hb_timer timer;
} worker;

static void *run_worker(void *arg) {
    worker *w = arg;
    hb_extra_work no_work;
    hb_extra_work_init(&no_work, 0, 0);
    pthread_barrier_wait(w->start_line);
    hb_timer_start(&w->timer, HB_CPU_THREAD);
    hb_mixed_run_chunked(&w->mixed, w->iters, &no_work, &w->timer);
    hb_timer_stop(&w->timer);
    return NULL;
}

int main(int argc, char **argv) {
    hb_init("bench_mid_large_mt", usage);
    uint64_t threads = 0, iters = 0, ws = 256, seed = 1, min_size = 8192, max_size = 32768;
    hb_option opts[] = {
        {"--threads", HB_OPT_U64, &threads, true, false},
        {"--iters", HB_OPT_U64, &iters, true, false},
        {"--ws", HB_OPT_U64, &ws, false, false},
        {"--seed", HB_OPT_U64, &seed, false, false},
        {"--min", HB_OPT_U64, &min_size, false, false},
        {"--max", HB_OPT_U64, &max_size, false, false},
    };
    hb_parse_flags(argc, argv, opts, sizeof opts / sizeof opts[0]);
    hb_check_range("--threads", threads, 1, 1024);
    hb_check_range("--ws", ws, 1, HB_MAX_WORKING_SET);
    hb_check_size_range(min_size, max_size);

    worker *workers = calloc(threads, sizeof *workers);
    pthread_barrier_t start_line;
    if (!workers || pthread_barrier_init(&start_line, NULL, (unsigned)threads) != 0)
        hb_runtime_error("cannot set up %" PRIu64 " threads", threads);
    for (uint64_t t = 0; t < threads; t++) {
        workers[t].start_line = &start_line;
        workers[t].iters = iters;
        hb_mixed_init(&workers[t].mixed, ws, min_size, max_size, seed + t);
        hb_start_thread(&workers[t].thread, run_worker, &workers[t]);
    }

    for (uint64_t t = 0; t < threads; t++)
        pthread_join(workers[t].thread, NULL);

    hb_interval timed = hb_timer_interval(&workers[0].timer);
    uint64_t checksum_sum = 0;
    for (uint64_t t = 0; t < threads; t++) {
        timed = hb_interval_union(timed, hb_timer_interval(&workers[t].timer));
        hb_report_timer(&workers[t].timer);
        checksum_sum += hb_checksum_finish(workers[t].mixed.checksum);
        hb_mixed_destroy(&workers[t].mixed);
    }
    pthread_barrier_destroy(&start_line);
    free(workers);

    hb_print_result(threads * iters, timed.end - timed.start, hb_checksum_finish(checksum_sum));
    printf("threads=%" PRIu64 "\niters=%" PRIu64 "\nws=%" PRIu64 "\nmin=%" PRIu64 "\nmax=%" PRIu64
           "\nseed=%" PRIu64 "\n",
           threads, iters, ws, min_size, max_size, seed);
    hb_flush_stdout();
    return 0;
}
