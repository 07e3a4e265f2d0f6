/* bench_thread_chain: a chain of threads, each waiting for the next (issue #38's "thread
 * chain"). Thread d of --depth allocates blocks of 1 to --max bytes (uniform) until they hold
 * --mib MiB, writes every byte of each, checks and frees them all in the order they were
 * allocated, then starts thread d + 1 and waits for it. The main thread is thread 0.
 *
 * So at any time one thread holds live data and the ones before it hold none: they wait in
 * pthread_join with everything freed. An allocator that lends a waiting thread's freed
 * memory to the next one (a central free list, pages handed back) peaks near --mib; one that
 * keeps each thread's freed pages for that thread peaks near --depth x --mib. The figure is
 * peak RSS (maxrss_kb) against live_kib, the most any one thread held.
 *
 * The checksum covers every thread's block sizes. ops counts every malloc and free (and the
 * reallocs of each thread's pointer array). */
#define _GNU_SOURCE
#include "common.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "usage: bench_thread_chain [--depth N] [--mib N] [--max N] [--seed N]\n"
    "  --depth N   threads in the chain, each started by the one before (default 10; 0\n"
    "              measures start-up only)\n"
    "  --mib N     MiB of blocks each thread allocates, touches and frees (default 100)\n"
    "  --max N     largest block in bytes; sizes are uniform in 1..N (default 16384)\n"
    "  --seed N    PRNG seed (default 1)\n";

#define POINTER_STEP 16384 /* entries a thread's pointer array grows by */

typedef struct {
    uint64_t depth, bytes, max, seed;
    _Atomic uint64_t ops, checksum;
} chain;

typedef struct {
    chain *c;
    uint64_t index;
} link_arg;

static void *run_link(void *arg) {
    link_arg *self = arg;
    chain *c = self->c;
    hb_rng rng;
    hb_rng_seed_stream(&rng, c->seed, 1, self->index);
    uint64_t checksum = HB_CHECKSUM_INIT, ops = 0, total = 0, count = 0, capacity = 0;
    unsigned char **blocks = NULL;
    uint64_t *sizes = NULL;
    while (total < c->bytes) {
        if (count == capacity) {
            capacity += POINTER_STEP;
            blocks = (unsigned char **)hb_realloc(blocks, capacity * sizeof *blocks);
            sizes = (uint64_t *)hb_realloc(sizes, capacity * sizeof *sizes);
            ops += 2;
        }
        uint64_t size = 1 + hb_rng_below(&rng, c->max);
        unsigned char *block = hb_malloc(size);
        memset(block, hb_block_tag(count), size); /* every byte: the pages are resident */
        blocks[count] = block;
        sizes[count] = size;
        hb_checksum_add(&checksum, hb_malloc_event(count & 0x7fffffff, size));
        total += size;
        count++;
    }
    for (uint64_t i = 0; i < count; i++) {
        hb_verify_block(blocks[i], sizes[i], hb_block_tag(i));
        free(blocks[i]);
    }
    free(blocks);
    free(sizes);
    ops += 2 * count + 2;
    atomic_fetch_add_explicit(&c->ops, ops, memory_order_relaxed);
    atomic_fetch_add_explicit(&c->checksum, hb_checksum_finish(checksum), memory_order_relaxed);
    if (self->index + 1 < c->depth) {
        link_arg next = {.c = c, .index = self->index + 1};
        pthread_t thread;
        hb_start_thread(&thread, run_link, &next);
        pthread_join(thread, NULL);
    }
    return NULL;
}

int main(int argc, char **argv) {
    hb_init("bench_thread_chain", usage);
    uint64_t depth = 10, mib = 100, max = 16384, seed = 1;
    hb_option opts[] = {
        {"--depth", HB_OPT_U64, &depth, false, false},
        {"--mib", HB_OPT_U64, &mib, false, false},
        {"--max", HB_OPT_U64, &max, false, false},
        {"--seed", HB_OPT_U64, &seed, false, false},
    };
    hb_parse_flags(argc, argv, opts, sizeof opts / sizeof opts[0]);
    hb_check_range("--depth", depth, 0, 256);
    hb_check_range("--mib", mib, 1, 4096);
    hb_check_range("--max", max, 1, 1u << 24);

    chain c = {.depth = depth, .bytes = mib << 20, .max = max, .seed = seed};
    atomic_init(&c.ops, 0);
    atomic_init(&c.checksum, 0);
    hb_timer timer; /* one chunk: no loop of like parts */
    hb_timer_start(&timer, HB_CPU_PROCESS);
    link_arg first = {.c = &c, .index = 0};
    if (depth > 0) run_link(&first);
    uint64_t ops = atomic_load(&c.ops);
    hb_timer_lap(&timer, ops);
    double seconds = hb_timer_stop(&timer);
    hb_report_timer(&timer);
    hb_print_result_and_rss_end(ops, seconds, hb_checksum_finish(atomic_load(&c.checksum)));
    printf("depth=%" PRIu64 "\nlive_kib=%" PRIu64 "\nmax=%" PRIu64 "\nseed=%" PRIu64 "\n", depth,
           mib << 10, max, seed);
    hb_flush_stdout();
    return 0;
}
