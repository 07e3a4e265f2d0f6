/* bench_xmalloc: the producer/consumer pattern of the xmalloc test Lever and Boreham
 * described in "malloc() Performance in a Multithreaded Linux Environment" (USENIX 2000),
 * written here from that description: threads that only allocate and threads that only
 * free. --pairs producers each allocate --batches batches of --batch-size small blocks and
 * push every full batch on one shared queue (bounded by --queue batches); --pairs
 * consumers pop whichever batch is next and free its blocks. Every free is remote, and a
 * consumer frees blocks of any producer. With --stack 1 the consumers take the newest batch
 * (mimalloc-bench's xmalloc-test keeps its batches on a stack): its blocks were just written
 * by the producer and are freed while still in cache, and the oldest batches wait at the
 * bottom; with --stack 0 (the default) the oldest, as a FIFO queue.
 *
 * The checksum: each producer hashes its own sizes; each consumer adds, for every batch it
 * frees, a hash of the batch's origin and the sizes it found, so the total does not depend
 * on which consumer took which batch. Throughput counts one malloc and one free per block. */
#define _GNU_SOURCE
#include "common.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static const char usage[] =
    "usage: bench_xmalloc [--pairs N] [--batches N] [--batch-size N] [--queue N] [--min B]\n"
    "                     [--max B] [--seed N]\n"
    "  --pairs N       producer threads, and as many consumer threads (default 2)\n"
    "  --batches N     batches per producer (default 60000; 0 measures start-up only)\n"
    "  --batch-size N  blocks per batch (default 100)\n"
    "  --queue N       batches the queue holds before producers wait (default 64)\n"
    "  --stack 0|1     1: consumers take the newest batch (a stack); 0: the oldest (default)\n"
    "  --min/--max B   block sizes, uniform in [min,max] (default 8..64; min >= 8)\n"
    "  --seed N        PRNG seed (default 1)\n";

typedef struct {
    uint64_t producer, sequence;
    unsigned char *blocks[];
} batch;

typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t not_full, not_empty;
    batch **ring;
    uint64_t capacity, head, count;
    uint64_t producers_left;
    bool stack; /* pop the newest batch, not the oldest */
} batch_queue;

typedef struct {
    pthread_t thread;
    pthread_barrier_t *start_line;
    batch_queue *queue;
    uint64_t index, batches, batch_size, min_size, max_size, seed;
    uint64_t checksum, blocks;
    hb_timer timer; /* one chunk: the consumers take batches as they come */
} worker;

static void push_batch(batch_queue *q, batch *b) {
    pthread_mutex_lock(&q->lock);
    while (q->count == q->capacity)
        pthread_cond_wait(&q->not_full, &q->lock);
    q->ring[(q->head + q->count) % q->capacity] = b;
    q->count++;
    pthread_cond_signal(&q->not_empty);
    pthread_mutex_unlock(&q->lock);
}

/* NULL once the queue is empty and every producer has finished. */
static batch *pop_batch(batch_queue *q) {
    pthread_mutex_lock(&q->lock);
    while (q->count == 0 && q->producers_left > 0)
        pthread_cond_wait(&q->not_empty, &q->lock);
    batch *b = NULL;
    if (q->count > 0) {
        b = q->ring[(q->stack ? q->head + q->count - 1 : q->head) % q->capacity];
        if (!q->stack) q->head = (q->head + 1) % q->capacity;
        q->count--;
        pthread_cond_signal(&q->not_full);
    }
    pthread_mutex_unlock(&q->lock);
    return b;
}

static void producer_finished(batch_queue *q) {
    pthread_mutex_lock(&q->lock);
    q->producers_left--;
    pthread_cond_broadcast(&q->not_empty);
    pthread_mutex_unlock(&q->lock);
}

static void *run_producer(void *arg) {
    worker *w = arg;
    hb_rng rng;
    hb_rng_seed_stream(&rng, w->seed, w->index, 0);
    uint64_t checksum = HB_CHECKSUM_INIT;
    pthread_barrier_wait(w->start_line);
    hb_timer_start(&w->timer, HB_CPU_THREAD);
    for (uint64_t s = 0; s < w->batches; s++) {
        batch *b = (batch *)hb_malloc(sizeof(batch) + w->batch_size * sizeof(unsigned char *));
        b->producer = w->index;
        b->sequence = s;
        for (uint64_t i = 0; i < w->batch_size; i++) {
            uint64_t size = hb_rng_between(&rng, w->min_size, w->max_size);
            b->blocks[i] = hb_malloc(size);
            hb_fill_sized(b->blocks[i], size);
            hb_checksum_add(&checksum, hb_malloc_event(i, size));
        }
        push_batch(w->queue, b);
    }
    producer_finished(w->queue);
    hb_timer_lap(&w->timer, w->batches * w->batch_size);
    hb_timer_stop(&w->timer);
    w->checksum = hb_checksum_finish(checksum);
    return NULL;
}

static void *run_consumer(void *arg) {
    worker *w = arg;
    uint64_t checksum_sum = 0, blocks = 0;
    pthread_barrier_wait(w->start_line);
    hb_timer_start(&w->timer, HB_CPU_THREAD);
    for (batch *b; (b = pop_batch(w->queue)) != NULL;) {
        uint64_t checksum = HB_CHECKSUM_INIT;
        hb_checksum_add(&checksum, (b->producer << 32) ^ b->sequence);
        for (uint64_t i = 0; i < w->batch_size; i++) {
            uint64_t size = hb_verify_sized(b->blocks[i]);
            free(b->blocks[i]);
            hb_checksum_add(&checksum, hb_free_event(i) | size);
        }
        free(b);
        blocks += w->batch_size;
        checksum_sum += hb_checksum_finish(checksum);
    }
    hb_timer_lap(&w->timer, blocks);
    hb_timer_stop(&w->timer);
    w->checksum = checksum_sum;
    w->blocks = blocks;
    return NULL;
}

int main(int argc, char **argv) {
    hb_init("bench_xmalloc", usage);
    uint64_t pairs = 2, batches = 60000, batch_size = 100, queue_batches = 64, min_size = 8;
    uint64_t max_size = 64, seed = 1, stack = 0;
    hb_option opts[] = {
        {"--pairs", HB_OPT_U64, &pairs, false, false},
        {"--batches", HB_OPT_U64, &batches, false, false},
        {"--batch-size", HB_OPT_U64, &batch_size, false, false},
        {"--queue", HB_OPT_U64, &queue_batches, false, false},
        {"--min", HB_OPT_U64, &min_size, false, false},
        {"--max", HB_OPT_U64, &max_size, false, false},
        {"--seed", HB_OPT_U64, &seed, false, false},
        {"--stack", HB_OPT_U64, &stack, false, false},
    };
    hb_parse_flags(argc, argv, opts, sizeof opts / sizeof opts[0]);
    hb_check_range("--pairs", pairs, 1, 256);
    hb_check_range("--batches", batches, 0, 1ull << 32);
    hb_check_range("--batch-size", batch_size, 1, 1u << 20);
    hb_check_range("--queue", queue_batches, 1, 1u << 20);
    hb_check_range("--stack", stack, 0, 1);
    hb_check_size_range(min_size, max_size);
    hb_check_range("--min", min_size, HB_SIZED_MIN, HB_MAX_BLOCK_SIZE);

    batch_queue queue = {.lock = PTHREAD_MUTEX_INITIALIZER,
                         .not_full = PTHREAD_COND_INITIALIZER,
                         .not_empty = PTHREAD_COND_INITIALIZER,
                         .ring = calloc(queue_batches, sizeof(batch *)),
                         .capacity = queue_batches,
                         .producers_left = pairs,
                         .stack = stack != 0};
    worker *workers = calloc(2 * pairs, sizeof *workers);
    pthread_barrier_t start_line;
    if (!queue.ring || !workers ||
        pthread_barrier_init(&start_line, NULL, (unsigned)(2 * pairs)) != 0)
        hb_runtime_error("cannot set up %" PRIu64 " threads", 2 * pairs);
    for (uint64_t i = 0; i < 2 * pairs; i++) {
        workers[i] = (worker){.start_line = &start_line,
                              .queue = &queue,
                              .index = i / 2,
                              .batches = batches,
                              .batch_size = batch_size,
                              .min_size = min_size,
                              .max_size = max_size,
                              .seed = seed};
        hb_start_thread(&workers[i].thread, i % 2 ? run_consumer : run_producer, &workers[i]);
    }

    uint64_t checksum_sum = 0, freed = 0;
    hb_interval timed = {0, 0};
    for (uint64_t i = 0; i < 2 * pairs; i++) {
        pthread_join(workers[i].thread, NULL);
        hb_interval own = hb_timer_interval(&workers[i].timer);
        timed = i ? hb_interval_union(timed, own) : own;
        hb_report_timer(&workers[i].timer);
        checksum_sum += workers[i].checksum;
        freed += workers[i].blocks;
    }
    uint64_t blocks = pairs * batches * batch_size;
    if (freed != blocks)
        hb_runtime_error("consumers freed %" PRIu64 " of %" PRIu64 " blocks", freed, blocks);
    pthread_barrier_destroy(&start_line);
    free(queue.ring);
    free(workers);

    hb_print_result_and_rss_end(2 * blocks, timed.end - timed.start,
                                hb_checksum_finish(checksum_sum));
    printf("pairs=%" PRIu64 "\nthreads=%" PRIu64 "\nbatches=%" PRIu64 "\nbatch_size=%" PRIu64
           "\nqueue=%" PRIu64 "\nmin=%" PRIu64 "\nmax=%" PRIu64 "\nseed=%" PRIu64 "\nstack=%" PRIu64
           "\n",
           pairs, 2 * pairs, batches, batch_size, queue_batches, min_size, max_size, seed, stack);
    hb_flush_stdout();
    return 0;
}
