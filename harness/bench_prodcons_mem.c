/* bench_prodcons_mem: does memory freed by other threads go back? (issue #11). --pairs
 * producer/consumer pairs of threads live through the whole run. Each round has two phases,
 * separated by barriers: every producer allocates --count blocks of random sizes and hands
 * the batch over; then every consumer frees its producer's batch (all frees are remote).
 * After the last round a quiet phase follows: every thread stays alive but idle for
 * --quiet-ms, as a server between bursts. The resident set is reported at the end of each
 * phase of the last round (rss_after_produce_kb, rss_after_consume_kb), after the quiet
 * phase (rss_quiet_kb) and after the threads are joined and everything is freed
 * (rss_end_kb). Throughput covers the produce and consume phases only. */
#define _GNU_SOURCE
#include "common.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static const char usage[] =
    "usage: bench_prodcons_mem [--pairs N] [--rounds N] [--count N] [--quiet-ms N] [--min B]\n"
    "                          [--max B] [--seed N]\n"
    "  --pairs N      producer/consumer thread pairs (default 2)\n"
    "  --rounds N     produce/consume rounds (default 4)\n"
    "  --count N      blocks per producer per round (default 250000; 0 measures start-up "
    "only)\n"
    "  --quiet-ms N   idle phase after the last round, threads alive (default 200)\n"
    "  --min/--max B  block sizes, uniform in [min,max] (default 16..512; min >= 8)\n"
    "  --seed N       PRNG seed (default 1)\n";

typedef struct {
    pthread_barrier_t *phase;
    uint64_t index, rounds, count, min_size, max_size, seed;
    unsigned char **batch; /* filled by the producer, emptied by the consumer */
    uint64_t checksum;
} pair_side;

/* Each round: wait for "produce", (produce), wait for "consume", (consume); then the quiet
 * phase: wait for its start and its end. Both sides take the same barriers. */
static void *run_producer(void *arg) {
    pair_side *side = arg;
    uint64_t checksum = HB_CHECKSUM_INIT;
    for (uint64_t round = 0; round < side->rounds; round++) {
        hb_rng rng;
        hb_rng_seed_stream(&rng, side->seed, round, side->index);
        pthread_barrier_wait(side->phase);
        for (uint64_t i = 0; i < side->count; i++) {
            uint64_t size = hb_rng_between(&rng, side->min_size, side->max_size);
            unsigned char *block = hb_malloc(size);
            hb_fill_sized(block, size);
            side->batch[i] = block;
            hb_checksum_add(&checksum, hb_malloc_event(i & 0x7fffffff, size));
        }
        pthread_barrier_wait(side->phase);
        pthread_barrier_wait(side->phase);
        pthread_barrier_wait(side->phase);
    }
    pthread_barrier_wait(side->phase);
    pthread_barrier_wait(side->phase);
    side->checksum = hb_checksum_finish(checksum);
    return NULL;
}

static void *run_consumer(void *arg) {
    pair_side *side = arg;
    uint64_t checksum = HB_CHECKSUM_INIT;
    for (uint64_t round = 0; round < side->rounds; round++) {
        pthread_barrier_wait(side->phase);
        pthread_barrier_wait(side->phase);
        pthread_barrier_wait(side->phase);
        for (uint64_t i = 0; i < side->count; i++) {
            uint64_t size = hb_verify_sized(side->batch[i]);
            free(side->batch[i]);
            side->batch[i] = NULL;
            hb_checksum_add(&checksum, hb_free_event(i & 0x7fffffff) | size);
        }
        pthread_barrier_wait(side->phase);
    }
    pthread_barrier_wait(side->phase);
    pthread_barrier_wait(side->phase);
    side->checksum = hb_checksum_finish(checksum);
    return NULL;
}

static void sleep_ms(uint64_t ms) {
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

int main(int argc, char **argv) {
    hb_init("bench_prodcons_mem", usage);
    uint64_t pairs = 2, rounds = 4, count = 250000, quiet_ms = 200, min_size = 16;
    uint64_t max_size = 512, seed = 1;
    hb_option opts[] = {
        {"--pairs", HB_OPT_U64, &pairs, false, false},
        {"--rounds", HB_OPT_U64, &rounds, false, false},
        {"--count", HB_OPT_U64, &count, false, false},
        {"--quiet-ms", HB_OPT_U64, &quiet_ms, false, false},
        {"--min", HB_OPT_U64, &min_size, false, false},
        {"--max", HB_OPT_U64, &max_size, false, false},
        {"--seed", HB_OPT_U64, &seed, false, false},
    };
    hb_parse_flags(argc, argv, opts, sizeof opts / sizeof opts[0]);
    hb_check_range("--pairs", pairs, 1, 256);
    hb_check_range("--rounds", rounds, 1, 1u << 20);
    hb_check_range("--count", count, 0, HB_MAX_WORKING_SET);
    hb_check_range("--quiet-ms", quiet_ms, 0, 600000);
    hb_check_size_range(min_size, max_size);
    hb_check_range("--min", min_size, HB_SIZED_MIN, HB_MAX_BLOCK_SIZE);

    pair_side *sides = calloc(2 * pairs, sizeof *sides);
    pthread_t *threads = calloc(2 * pairs, sizeof *threads);
    pthread_barrier_t phase;
    if (!sides || !threads || pthread_barrier_init(&phase, NULL, (unsigned)(2 * pairs + 1)) != 0)
        hb_runtime_error("cannot set up %" PRIu64 " pairs", pairs);
    for (uint64_t p = 0; p < pairs; p++) {
        unsigned char **batch = calloc(count ? count : 1, sizeof *batch);
        if (!batch) hb_runtime_error("cannot allocate a batch of %" PRIu64 " slots", count);
        for (uint64_t side = 0; side < 2; side++)
            sides[2 * p + side] = (pair_side){.phase = &phase,
                                              .index = p,
                                              .rounds = rounds,
                                              .count = count,
                                              .min_size = min_size,
                                              .max_size = max_size,
                                              .seed = seed,
                                              .batch = batch};
        hb_start_thread(&threads[2 * p], run_producer, &sides[2 * p]);
        hb_start_thread(&threads[2 * p + 1], run_consumer, &sides[2 * p + 1]);
    }

    double seconds = 0;
    long rss_after_produce = 0, rss_after_consume = 0;
    hb_timer timer; /* CPU time of the rounds; one chunk */
    hb_timer_start(&timer, HB_CPU_PROCESS);
    for (uint64_t round = 0; round < rounds; round++) {
        double start = hb_now();
        pthread_barrier_wait(&phase); /* produce */
        pthread_barrier_wait(&phase);
        double produced = hb_now();
        rss_after_produce = hb_rss_kb();
        double resumed = hb_now();
        pthread_barrier_wait(&phase); /* consume */
        pthread_barrier_wait(&phase);
        seconds += (produced - start) + (hb_now() - resumed);
        rss_after_consume = hb_rss_kb();
    }
    hb_timer_lap(&timer, 2 * pairs * count * rounds);
    hb_timer_stop(&timer);
    hb_report_timer(&timer);
    pthread_barrier_wait(&phase); /* quiet */
    sleep_ms(quiet_ms);
    long rss_quiet = hb_rss_kb();
    pthread_barrier_wait(&phase);

    uint64_t checksum_sum = 0;
    for (uint64_t i = 0; i < 2 * pairs; i++) {
        pthread_join(threads[i], NULL);
        checksum_sum += sides[i].checksum;
    }
    for (uint64_t p = 0; p < pairs; p++)
        free(sides[2 * p].batch);
    pthread_barrier_destroy(&phase);
    free(sides);
    free(threads);

    hb_print_result_and_rss_end(2 * pairs * count * rounds, seconds,
                                hb_checksum_finish(checksum_sum));
    printf("rss_after_produce_kb=%ld\nrss_after_consume_kb=%ld\nrss_quiet_kb=%ld\npairs=%" PRIu64
           "\nrounds=%" PRIu64 "\ncount=%" PRIu64 "\nquiet_ms=%" PRIu64 "\nmin=%" PRIu64
           "\nmax=%" PRIu64 "\nseed=%" PRIu64 "\nthreads=%" PRIu64 "\n",
           rss_after_produce, rss_after_consume, rss_quiet, pairs, rounds, count, quiet_ms,
           min_size, max_size, seed, 2 * pairs);
    hb_flush_stdout();
    return 0;
}
