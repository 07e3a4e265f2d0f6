/* bench_cache_scratch: false sharing between threads' blocks, the two tests Berger et al.
 * described with the Hoard allocator ("Hoard: A Scalable Memory Allocator for Multithreaded
 * Applications", ASPLOS 2000), written here from that description.
 *   --mode thrash  (active false sharing) every thread repeatedly allocates a small block,
 *                  writes it --writes times and frees it. An allocator that hands
 *                  different threads blocks on one cache line makes their writes fight.
 *   --mode scratch (passive false sharing) the main thread allocates one small block per
 *                  thread, side by side, and hands them out; each thread frees the block it
 *                  got and then works as in thrash. An allocator that gives a freed block
 *                  back to the thread that freed it reuses main's line in every thread.
 * Each write is a read-modify-write through a volatile pointer, so it reaches memory. The
 * checksum is the sum of the values each thread reads back (the same under every
 * allocator); ops counts the writes, which are what false sharing slows down. */
#define _GNU_SOURCE
#include "common.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static const char usage[] =
    "usage: bench_cache_scratch --mode scratch|thrash [--threads N] [--iters N] [--writes N]\n"
    "                           [--size B] [--seed N]\n"
    "  --mode M     scratch (passive false sharing) or thrash (active false sharing)\n"
    "  --threads N  threads (default 2)\n"
    "  --iters N    malloc/write/free iterations per thread (default 10000; 0 measures\n"
    "               start-up only)\n"
    "  --writes N   writes to each block per iteration (default 50000)\n"
    "  --size B     block size (default 8)\n"
    "  --seed N     first value written (default 1)\n";

typedef struct {
    pthread_t thread;
    pthread_barrier_t *start_line;
    unsigned char *handed; /* scratch: main's block, freed first */
    uint64_t index, iters, writes, size, seed, checksum;
    hb_timer timer;
} worker;

static void *run_worker(void *arg) {
    worker *w = arg;
    uint64_t checksum = HB_CHECKSUM_INIT;
    pthread_barrier_wait(w->start_line);
    hb_timer_start(&w->timer, HB_CPU_THREAD);
    if (w->handed) free(w->handed);
    for (unsigned c = 0; c < hb_chunks(); c++) {
        uint64_t from = hb_chunk_bound(w->iters, c, 1), to = hb_chunk_bound(w->iters, c + 1, 1);
        for (uint64_t i = from; i < to; i++) {
            volatile unsigned char *block = hb_malloc(w->size);
            for (uint64_t b = 0; b < w->size; b++)
                block[b] = (unsigned char)(w->seed + w->index + i);
            for (uint64_t j = 0, b = 0; j < w->writes; j++) {
                block[b] = (unsigned char)(block[b] + j);
                if (++b == w->size) b = 0;
            }
            uint64_t sum = 0;
            for (uint64_t b = 0; b < w->size; b++)
                sum += block[b];
            free((void *)block);
            hb_checksum_add(&checksum, hb_malloc_event(i & 0x7fffffff, sum));
        }
        hb_timer_lap(&w->timer, w->writes * to); /* ops: the writes */
    }
    hb_timer_stop(&w->timer);
    w->checksum = hb_checksum_finish(checksum);
    return NULL;
}

int main(int argc, char **argv) {
    hb_init("bench_cache_scratch", usage);
    uint64_t threads = 2, iters = 10000, writes = 50000, size = 8, seed = 1;
    const char *mode = NULL;
    /* --mode takes a word: pull it out before the numeric flags are parsed. */
    int kept = 1;
    for (int i = 1; i < argc; i++) {
        const char *value = NULL;
        if (strcmp(argv[i], "--mode") == 0) {
            if (i + 1 >= argc) hb_usage_error("--mode needs a value");
            value = argv[++i];
        } else if (strncmp(argv[i], "--mode=", 7) == 0) {
            value = argv[i] + 7;
        } else {
            argv[kept++] = argv[i];
            continue;
        }
        if (mode) hb_usage_error("--mode given twice");
        mode = value;
    }
    hb_option opts[] = {
        {"--threads", HB_OPT_U64, &threads, false, false},
        {"--iters", HB_OPT_U64, &iters, false, false},
        {"--writes", HB_OPT_U64, &writes, false, false},
        {"--size", HB_OPT_U64, &size, false, false},
        {"--seed", HB_OPT_U64, &seed, false, false},
    };
    hb_parse_flags(kept, argv, opts, sizeof opts / sizeof opts[0]);
    if (!mode) hb_usage_error("missing required option --mode");
    bool scratch = strcmp(mode, "scratch") == 0;
    if (!scratch && strcmp(mode, "thrash") != 0)
        hb_usage_error("--mode must be scratch or thrash, got '%s'", mode);
    hb_check_range("--threads", threads, 1, 512);
    hb_check_range("--size", size, 1, 1u << 20);

    worker *workers = calloc(threads, sizeof *workers);
    pthread_barrier_t start_line;
    if (!workers || pthread_barrier_init(&start_line, NULL, (unsigned)threads) != 0)
        hb_runtime_error("cannot set up %" PRIu64 " threads", threads);
    for (uint64_t t = 0; t < threads; t++) {
        workers[t] = (worker){.start_line = &start_line,
                              .handed = scratch ? hb_malloc(size) : NULL,
                              .index = t,
                              .iters = iters,
                              .writes = writes,
                              .size = size,
                              .seed = seed};
        if (scratch) memset(workers[t].handed, 0, size);
    }
    for (uint64_t t = 0; t < threads; t++)
        hb_start_thread(&workers[t].thread, run_worker, &workers[t]);

    uint64_t checksum_sum = 0;
    hb_interval timed = {0, 0};
    for (uint64_t t = 0; t < threads; t++) {
        pthread_join(workers[t].thread, NULL);
        hb_interval own = hb_timer_interval(&workers[t].timer);
        timed = t ? hb_interval_union(timed, own) : own;
        hb_report_timer(&workers[t].timer);
        checksum_sum += workers[t].checksum;
    }
    pthread_barrier_destroy(&start_line);
    free(workers);

    uint64_t ops = threads * iters * writes;
    hb_print_result_and_rss_end(ops, timed.end - timed.start, hb_checksum_finish(checksum_sum));
    printf("mode=%s\nthreads=%" PRIu64 "\niters=%" PRIu64 "\nwrites=%" PRIu64 "\nsize=%" PRIu64
           "\nseed=%" PRIu64 "\n",
           mode, threads, iters, writes, size, seed);
    hb_flush_stdout();
    return 0;
}
