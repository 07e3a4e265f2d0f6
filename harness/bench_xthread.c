/* bench_xthread: remote frees. Each pair is a producer thread that mallocs blocks and passes
 * them through a bounded single-producer/single-consumer ring to its consumer thread, which
 * frees them. Both sides yield the CPU when the ring is full or empty, so more threads than
 * cores still make progress. */
#define _GNU_SOURCE
#include "common.h"

#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "usage: bench_xthread --pairs N --count N [--min B] [--max B] [--seed N]\n"
    "                     [--extra-ops N] [--hold-ops N]\n"
    "  --pairs N      producer/consumer thread pairs\n"
    "  --count N      blocks per producer (0 measures start-up only)\n"
    "  --min/--max B  block sizes, uniform in [min,max] (default 16..1024)\n"
    "  --seed N       pair p uses seed N+p (default 1)\n"
    "  --extra-ops N  every thread: a burst of N units of work every 1024 ops (default 0)\n"
    "  --hold-ops N   every thread: N units of work every 1024 ops while holding a mutex\n"
    "                 all threads share: injected contention (default 0)\n";

#define RING_SLOTS 1024 /* a power of two */

typedef struct {
    unsigned char *block;
    uint64_t size;
} ring_entry;

typedef struct {
    /* head and tail on their own cache lines: producer and consumer write one each. */
    alignas(64) _Atomic uint64_t head; /* next slot the consumer reads */
    alignas(64) _Atomic uint64_t tail; /* next slot the producer writes */
    alignas(64) ring_entry entries[RING_SLOTS];
} ring;

typedef struct {
    pthread_t producer, consumer;
    pthread_barrier_t *start_line;
    ring *ring;
    uint64_t count, min_size, max_size, seed, extra_ops, hold_ops;
    uint64_t producer_checksum, consumer_checksum;
    hb_timer producer_timer, consumer_timer;
} pair;

static void *run_producer(void *arg) {
    pair *p = arg;
    ring *r = p->ring;
    hb_rng rng;
    hb_rng_seed(&rng, p->seed);
    uint64_t checksum = HB_CHECKSUM_INIT, span = p->max_size - p->min_size + 1;
    hb_inject inject = {p->extra_ops, p->hold_ops, 1};
    pthread_barrier_wait(p->start_line);
    hb_timer_start(&p->producer_timer, HB_CPU_THREAD);
    for (unsigned c = 0; c < hb_chunks(); c++) {
        uint64_t from = hb_chunk_bound(p->count, c, 1), to = hb_chunk_bound(p->count, c + 1, 1);
        for (uint64_t i = from, end; i < to; hb_inject_after(&inject, i))
            for (end = hb_period_end(i, to); i < end; i++) {
                uint64_t size = p->min_size + hb_rng_below(&rng, span);
                unsigned char *block = malloc(size);
                if (!block) hb_runtime_error("malloc(%" PRIu64 ") returned NULL", size);
                hb_fill_block(block, size, hb_block_tag(i));
                hb_checksum_add(&checksum, hb_malloc_event(i % RING_SLOTS, size));
                uint64_t tail = atomic_load_explicit(&r->tail, memory_order_relaxed);
                if (tail - atomic_load_explicit(&r->head, memory_order_acquire) == RING_SLOTS) {
                    double spin = hb_spin_begin();
                    do
                        sched_yield();
                    while (tail - atomic_load_explicit(&r->head, memory_order_acquire) ==
                           RING_SLOTS);
                    hb_spin_end(&p->producer_timer, spin);
                }
                r->entries[tail % RING_SLOTS] = (ring_entry){block, size};
                atomic_store_explicit(&r->tail, tail + 1, memory_order_release);
            }
        hb_timer_lap(&p->producer_timer, to);
    }
    hb_timer_stop(&p->producer_timer);
    p->producer_checksum = checksum;
    return NULL;
}

static void *run_consumer(void *arg) {
    pair *p = arg;
    ring *r = p->ring;
    uint64_t checksum = HB_CHECKSUM_INIT;
    hb_inject inject = {p->extra_ops, p->hold_ops, 1};
    pthread_barrier_wait(p->start_line);
    hb_timer_start(&p->consumer_timer, HB_CPU_THREAD);
    for (unsigned c = 0; c < hb_chunks(); c++) {
        uint64_t from = hb_chunk_bound(p->count, c, 1), to = hb_chunk_bound(p->count, c + 1, 1);
        for (uint64_t i = from, end; i < to; hb_inject_after(&inject, i))
            for (end = hb_period_end(i, to); i < end; i++) {
                uint64_t head = atomic_load_explicit(&r->head, memory_order_relaxed);
                if (atomic_load_explicit(&r->tail, memory_order_acquire) == head) {
                    double spin = hb_spin_begin();
                    do
                        sched_yield();
                    while (atomic_load_explicit(&r->tail, memory_order_acquire) == head);
                    hb_spin_end(&p->consumer_timer, spin);
                }
                ring_entry entry = r->entries[head % RING_SLOTS];
                atomic_store_explicit(&r->head, head + 1, memory_order_release);
                hb_verify_block(entry.block, entry.size, hb_block_tag(i));
                free(entry.block);
                /* The size as received: a lost or reordered block changes the checksum. */
                hb_checksum_add(&checksum, hb_free_event(i % RING_SLOTS) | entry.size);
            }
        hb_timer_lap(&p->consumer_timer, to);
    }
    hb_timer_stop(&p->consumer_timer);
    p->consumer_checksum = checksum;
    return NULL;
}

int main(int argc, char **argv) {
    hb_init("bench_xthread", usage);
    uint64_t pairs = 0, count = 0, min_size = 16, max_size = 1024, seed = 1, extra_ops = 0;
    uint64_t hold_ops = 0;
    hb_option opts[] = {
        {"--pairs", HB_OPT_U64, &pairs, true, false},
        {"--count", HB_OPT_U64, &count, true, false},
        {"--min", HB_OPT_U64, &min_size, false, false},
        {"--max", HB_OPT_U64, &max_size, false, false},
        {"--seed", HB_OPT_U64, &seed, false, false},
        {"--extra-ops", HB_OPT_U64, &extra_ops, false, false},
        {"--hold-ops", HB_OPT_U64, &hold_ops, false, false},
    };
    hb_parse_flags(argc, argv, opts, sizeof opts / sizeof opts[0]);
    hb_check_range("--pairs", pairs, 1, 512);
    hb_check_size_range(min_size, max_size);
    hb_check_range("--extra-ops", extra_ops, 0, 1000000);
    hb_check_range("--hold-ops", hold_ops, 0, 1000000);

    pair *pairs_arr = calloc(pairs, sizeof *pairs_arr);
    ring *rings = aligned_alloc(64, pairs * sizeof *rings);
    pthread_barrier_t start_line;
    if (!pairs_arr || !rings || pthread_barrier_init(&start_line, NULL, (unsigned)(2 * pairs)) != 0)
        hb_runtime_error("cannot set up %" PRIu64 " pairs", pairs);
    for (uint64_t i = 0; i < pairs; i++) {
        atomic_init(&rings[i].head, 0);
        atomic_init(&rings[i].tail, 0);
        pairs_arr[i] = (pair){.start_line = &start_line,
                              .ring = &rings[i],
                              .count = count,
                              .min_size = min_size,
                              .max_size = max_size,
                              .seed = seed + i,
                              .extra_ops = extra_ops,
                              .hold_ops = hold_ops};
        hb_start_thread(&pairs_arr[i].producer, run_producer, &pairs_arr[i]);
        hb_start_thread(&pairs_arr[i].consumer, run_consumer, &pairs_arr[i]);
    }

    for (uint64_t i = 0; i < pairs; i++) {
        pthread_join(pairs_arr[i].producer, NULL);
        pthread_join(pairs_arr[i].consumer, NULL);
    }

    hb_interval timed = hb_timer_interval(&pairs_arr[0].producer_timer);
    uint64_t checksum_sum = 0;
    for (uint64_t i = 0; i < pairs; i++) {
        timed = hb_interval_union(timed, hb_timer_interval(&pairs_arr[i].producer_timer));
        timed = hb_interval_union(timed, hb_timer_interval(&pairs_arr[i].consumer_timer));
        hb_report_timer(&pairs_arr[i].producer_timer);
        hb_report_timer(&pairs_arr[i].consumer_timer);
        checksum_sum += hb_checksum_finish(pairs_arr[i].producer_checksum) +
                        hb_checksum_finish(pairs_arr[i].consumer_checksum);
    }
    pthread_barrier_destroy(&start_line);
    free(rings);
    free(pairs_arr);

    hb_print_result(2 * pairs * count, timed.end - timed.start, hb_checksum_finish(checksum_sum));
    printf("pairs=%" PRIu64 "\ncount=%" PRIu64 "\nmin=%" PRIu64 "\nmax=%" PRIu64 "\nseed=%" PRIu64
           "\nthreads=%" PRIu64 "\n",
           pairs, count, min_size, max_size, seed, 2 * pairs);
    hb_flush_stdout();
    return 0;
}
