/* bench_larson: a server simulation in the style of the benchmark Larson and Krishnan
 * described in "Memory Allocation for Long-Running Server Applications" (ISMM 1998), written
 * here from that description. --threads chains run at once. Each chain owns an array of
 * --slots blocks, filled by the main thread before the clock starts. A chain's thread does
 * --steps steps, each freeing the block of a random slot and allocating a block of random
 * size in [--min, --max] into it; at the end of its lifetime it starts its successor, hands
 * it the array and exits. The successor frees blocks its predecessor allocated, so memory
 * keeps "bleeding" from exited threads to live ones, --generations times per chain.
 *
 * The op sequence of a chain is fixed by the seed (one PRNG stream per chain and
 * generation); the checksum is the sum over chains. Throughput counts one malloc and one free
 * per step; the clock runs from the first thread's start to the last generation's end. */
#define _GNU_SOURCE
#include "common.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static const char usage[] =
    "usage: bench_larson [--threads N] [--generations N] [--steps N] [--slots N] [--min B]\n"
    "                    [--max B] [--seed N] [--extra-ops N] [--hold-ops N]\n"
    "  --threads N      chains of threads running at once (default 4)\n"
    "  --generations N  threads per chain, one after the other (default 100; 0 measures\n"
    "                   start-up only)\n"
    "  --steps N        free+malloc steps per thread lifetime (default 50000)\n"
    "  --slots N        blocks each chain owns (default 1000)\n"
    "  --min/--max B    block sizes, uniform in [min,max] (default 8..1000)\n"
    "  --seed N         PRNG seed (default 1)\n"
    "  --extra-ops N    every thread: a burst of N units of work every 1024 steps (default 0)\n"
    "  --hold-ops N     every thread: N units of work every 1024 steps while holding a mutex\n"
    "                   all threads share: injected contention (default 0)\n";

typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t all_done;
    uint64_t chains_done;
} finish_line;

typedef struct {
    finish_line *finish;
    uint64_t index, generation, generations, steps, slots, min_size, max_size, seed;
    uint64_t extra_ops, hold_ops;
    unsigned char **blocks;
    uint32_t *sizes;
    uint64_t checksum;
} chain;

static void *run_generation(void *arg) {
    chain *c = arg;
    hb_rng rng;
    hb_rng_seed_stream(&rng, c->seed, c->index, c->generation + 1);
    hb_thread_mark mark = hb_thread_begin();
    hb_inject inject = {c->extra_ops, c->hold_ops, 1};
    uint64_t checksum = c->checksum;
    unsigned char **blocks = c->blocks;
    uint32_t *sizes = c->sizes;
    for (uint64_t i = 0, end; i < c->steps; hb_inject_after(&inject, i))
        for (end = hb_period_end(i, c->steps); i < end; i++) {
            uint64_t slot = hb_rng_below(&rng, c->slots);
            hb_verify_block(blocks[slot], sizes[slot], hb_block_tag(slot));
            free(blocks[slot]);
            uint64_t size = hb_rng_between(&rng, c->min_size, c->max_size);
            unsigned char *block = hb_malloc(size);
            hb_fill_block(block, size, hb_block_tag(slot));
            blocks[slot] = block;
            sizes[slot] = (uint32_t)size;
            hb_checksum_add(&checksum, hb_malloc_event(slot, size));
        }
    c->checksum = checksum;
    if (++c->generation < c->generations) {
        hb_start_detached_thread(run_generation, c); /* hands the array over */
        hb_thread_end(mark, 2 * c->steps);
        return NULL;
    }
    hb_thread_end(mark,
                  2 * c->steps); /* before the finish line: main prints once every chain is there */
    finish_line *finish = c->finish;
    pthread_mutex_lock(&finish->lock);
    finish->chains_done++;
    pthread_cond_signal(&finish->all_done);
    pthread_mutex_unlock(&finish->lock);
    return NULL;
}

int main(int argc, char **argv) {
    hb_init("bench_larson", usage);
    uint64_t threads = 4, generations = 100, steps = 50000, slots = 1000, min_size = 8;
    uint64_t max_size = 1000, seed = 1, extra_ops = 0, hold_ops = 0;
    hb_option opts[] = {
        {"--threads", HB_OPT_U64, &threads, false, false},
        {"--generations", HB_OPT_U64, &generations, false, false},
        {"--steps", HB_OPT_U64, &steps, false, false},
        {"--slots", HB_OPT_U64, &slots, false, false},
        {"--min", HB_OPT_U64, &min_size, false, false},
        {"--max", HB_OPT_U64, &max_size, false, false},
        {"--seed", HB_OPT_U64, &seed, false, false},
        {"--extra-ops", HB_OPT_U64, &extra_ops, false, false},
        {"--hold-ops", HB_OPT_U64, &hold_ops, false, false},
    };
    hb_parse_flags(argc, argv, opts, sizeof opts / sizeof opts[0]);
    hb_check_range("--threads", threads, 1, 512);
    hb_check_range("--generations", generations, 0, 1u << 20);
    hb_check_range("--slots", slots, 1, HB_MAX_WORKING_SET);
    hb_check_size_range(min_size, max_size);
    hb_check_range("--extra-ops", extra_ops, 0, 1000000);
    hb_check_range("--hold-ops", hold_ops, 0, 1000000);

    finish_line finish = {
        .lock = PTHREAD_MUTEX_INITIALIZER, .all_done = PTHREAD_COND_INITIALIZER, .chains_done = 0};
    chain *chains = calloc(threads, sizeof *chains);
    if (!chains) hb_runtime_error("cannot set up %" PRIu64 " chains", threads);
    for (uint64_t t = 0; t < threads; t++) {
        chain *c = &chains[t];
        *c = (chain){.finish = &finish,
                     .index = t,
                     .generations = generations,
                     .steps = steps,
                     .slots = slots,
                     .min_size = min_size,
                     .max_size = max_size,
                     .seed = seed,
                     .extra_ops = extra_ops,
                     .hold_ops = hold_ops,
                     .blocks = calloc(slots, sizeof *c->blocks),
                     .sizes = calloc(slots, sizeof *c->sizes),
                     .checksum = HB_CHECKSUM_INIT};
        if (!c->blocks || !c->sizes) hb_runtime_error("cannot allocate %" PRIu64 " slots", slots);
        hb_rng rng;
        hb_rng_seed_stream(&rng, seed, t, 0);
        for (uint64_t slot = 0; slot < slots; slot++) {
            uint64_t size = hb_rng_between(&rng, min_size, max_size);
            c->blocks[slot] = hb_malloc(size);
            hb_fill_block(c->blocks[slot], size, hb_block_tag(slot));
            c->sizes[slot] = (uint32_t)size;
            hb_checksum_add(&c->checksum, hb_malloc_event(slot, size));
        }
    }

    hb_timer timer; /* one chunk: no loop of like parts */
    hb_timer_start(&timer, HB_CPU_PROCESS);
    for (uint64_t t = 0; generations > 0 && t < threads; t++)
        hb_start_detached_thread(run_generation, &chains[t]);
    pthread_mutex_lock(&finish.lock);
    while (generations > 0 && finish.chains_done < threads)
        pthread_cond_wait(&finish.all_done, &finish.lock);
    pthread_mutex_unlock(&finish.lock);
    hb_timer_lap(&timer, 2 * threads * generations * steps);
    double seconds = hb_timer_stop(&timer);
    hb_report_timer(&timer);

    uint64_t checksum_sum = 0;
    for (uint64_t t = 0; t < threads; t++) {
        chain *c = &chains[t];
        for (uint64_t slot = 0; slot < slots; slot++) {
            hb_verify_block(c->blocks[slot], c->sizes[slot], hb_block_tag(slot));
            free(c->blocks[slot]);
        }
        free(c->blocks);
        free(c->sizes);
        checksum_sum += hb_checksum_finish(c->checksum);
    }
    free(chains);

    uint64_t ops = 2 * threads * generations * steps;
    hb_print_result_and_rss_end(ops, seconds, hb_checksum_finish(checksum_sum));
    printf("threads=%" PRIu64 "\ngenerations=%" PRIu64 "\nsteps=%" PRIu64 "\nslots=%" PRIu64
           "\nmin=%" PRIu64 "\nmax=%" PRIu64 "\nseed=%" PRIu64 "\n",
           threads, generations, steps, slots, min_size, max_size, seed);
    hb_flush_stdout();
    return 0;
}
