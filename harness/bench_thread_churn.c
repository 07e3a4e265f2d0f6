/* bench_thread_churn: thread churn with survivors and cross-thread hand-off (issue #30), the
 * pattern mimalloc-bench runs as "mstress", written here from its public description. Each of
 * --rounds rounds starts --threads new threads and joins them. Thread t of a round does
 * A = 100 * --scale * (t % 8 + 1) short-lived allocations (so some threads work up to 8x
 * longer than others and outlive them) and A / 2 long-lived ones, interleaved at random:
 *   - a short-lived block (8-128 B: 1, 2, 4, 8 or 16 words) goes into the thread's pointer
 *     array, which grows by realloc in steps of 100000 entries (800 KB);
 *   - a long-lived block (8-512 B: 1 to 64 words, powers of two) goes into the thread's
 *     keep array and lives until the thread's end;
 *   - after each allocation, with probability 2/3 a random entry of the pointer array is
 *     freed (it may already be empty) and, with probability 1/4, a random entry is swapped
 *     with a random slot of a shared transfer array of --transfer slots: the thread takes in
 *     a block another thread (of this round or an earlier one) allocated.
 * --big-percent of the blocks (2 %) are big: 100x their size (87 in 100 of them), 1000x
 * (11 in 100) or 10000x (2 in 100): up to 5 MiB. Every word of every block is written at
 * malloc and read back at free. At its end a thread frees everything it still holds, its
 * long-lived blocks and whatever the swaps brought in, in one burst just before it exits
 * (--handoff-percent of the long-lived blocks instead outlive it: the thread of the same
 * index frees them at the start of the next round). After each round the main thread frees
 * a random half of the transfer array (all of it after the last): the other half survives
 * into the next round, to be freed by a new thread.
 * Two switches make it mstress's pattern exactly (docs/stress.md: without them libhakmem
 * C7_SAFE held 0.64x mimalloc's peak RSS here where mstress, 2 threads x 400 rounds, had it
 * at 1.9x): --main-works 1, the main thread does thread 0's work itself each round and only
 * threads 1.. are new, so one heap lives through every round beside the short-lived ones;
 * --same-rounds 1, every round repeats the same choices (mstress seeds a thread by its index
 * only), so the peak is that of one round's pattern, not of the rarest round's big blocks.
 *
 * So the live set of a thread grows through its lifetime (its long-lived blocks and about
 * 40 % of its short-lived ones) and drops at once at its exit, round after round, with the
 * frees of other threads' blocks in between, and the big blocks come and go with it.
 *
 * The checksum covers each thread's own choices (sizes, indices, transfer slots) and the main
 * thread's, summed over threads: which block a swap brings in depends on the interleaving, so
 * it is not part of it. ops counts every malloc, free and realloc; every block is freed by the
 * end, so the count does not depend on the interleaving either. */
#define _GNU_SOURCE
#include "common.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "usage: bench_thread_churn [--threads N] [--rounds N] [--scale N] [--transfer N]\n"
    "                          [--big-percent N] [--handoff-percent N] [--main-works N]\n"
    "                          [--same-rounds N] [--seed N]\n"
    "  --threads N          threads started (and joined) each round (default 8)\n"
    "  --rounds N           rounds (default 20; 0 measures start-up only)\n"
    "  --scale N            thread t does 100*N*(t%8+1) short-lived and half as many\n"
    "                       long-lived allocations (default 25)\n"
    "  --transfer N         slots of the shared transfer array (default 1000)\n"
    "  --big-percent N      share of blocks 100x-10000x their size (default 2)\n"
    "  --handoff-percent N  share of long-lived blocks freed by the next round's thread\n"
    "                       instead of their own (default 0)\n"
    "  --main-works N       1: the main thread does thread 0's work each round, the\n"
    "                       others are new threads (as mstress); 0: all new (default)\n"
    "  --same-rounds N      1: every round repeats round 0's choices (as mstress)\n"
    "  --seed N             PRNG seed (default 1)\n";

#define WORD         sizeof(uint64_t)
#define POINTER_STEP 100000 /* entries the pointer array grows by: 800 KB */

typedef struct {
    uint64_t threads, scale, transfer_slots, big_percent, handoff_percent, same_rounds, seed;
    _Atomic(uint64_t *) *transfer;
    uint64_t ***handoff;     /* per thread index: long-lived blocks left for the next round */
    uint64_t *handoff_count; /* per thread index */
    _Atomic uint64_t ops, mallocs;
} churn;

typedef struct {
    pthread_t thread;
    churn *c;
    uint64_t index, round, checksum;
} churn_thread;

/* Every word of a block: its length in words in word 0, a pattern of the length and the index
 * in the others, so a free can check the whole block without knowing its size. */
static inline uint64_t word_pattern(uint64_t words, uint64_t i) {
    return words ^ (i * 0x9e3779b97f4a7c15ull);
}

static uint64_t *alloc_words(uint64_t words) {
    uint64_t *block = (uint64_t *)hb_malloc(words * WORD);
    block[0] = words;
    for (uint64_t i = 1; i < words; i++)
        block[i] = word_pattern(words, i);
    return block;
}

/* Checks and frees a block; returns 1 (an op) when there was one. */
static uint64_t free_words(uint64_t *block) {
    if (!block) return 0;
    uint64_t words = block[0];
    if (words == 0 || words > HB_MAX_BLOCK_SIZE / WORD)
        hb_block_overwritten((unsigned char *)block, WORD);
    for (uint64_t i = 1; i < words; i++)
        if (block[i] != word_pattern(words, i))
            hb_block_overwritten((unsigned char *)block, words * WORD);
    free(block);
    return 1;
}

/* Words of a block: 2^k for k uniform below max_shift, and for big_percent % of blocks 100x
 * (87 in 100 of them), 1000x (11 in 100) or 10000x (2 in 100). */
static uint64_t block_words(hb_rng *rng, unsigned max_shift, uint64_t big_percent) {
    uint64_t words = 1ull << hb_rng_below(rng, max_shift);
    if (hb_rng_below(rng, 100) < big_percent) {
        uint64_t tier = hb_rng_below(rng, 100);
        words *= tier < 2 ? 10000 : tier < 13 ? 1000 : 100;
    }
    return words;
}

static void *run_thread(void *arg) {
    churn_thread *self = arg;
    churn *c = self->c;
    hb_rng rng;
    hb_rng_seed_stream(&rng, c->seed, c->same_rounds ? 1 : self->round + 1, self->index);
    uint64_t checksum = HB_CHECKSUM_INIT, ops = 0, mallocs = 0;

    uint64_t short_left = 100 * c->scale * (self->index % 8 + 1);
    uint64_t keep_left = short_left / 2;
    uint64_t **live = NULL; /* the pointer array of short-lived blocks */
    uint64_t kept = 0, top = 0, capacity = 0;

    /* The blocks the previous round's thread of this index left behind die here first. */
    uint64_t **keep = c->handoff[self->index];
    for (uint64_t i = 0; i < c->handoff_count[self->index]; i++)
        ops += free_words(keep[i]);
    if (keep) {
        free(keep);
        ops++;
    }
    keep = (uint64_t **)hb_malloc((keep_left ? keep_left : 1) * sizeof *keep);
    ops++;

    while (short_left > 0 || keep_left > 0) {
        if (keep_left == 0 || (short_left > 0 && hb_rng_below(&rng, 2))) {
            if (top == capacity) {
                capacity += POINTER_STEP;
                live = (uint64_t **)hb_realloc(live, capacity * sizeof *live);
                ops++;
            }
            uint64_t words = block_words(&rng, 5, c->big_percent);
            live[top++] = alloc_words(words);
            short_left--;
            hb_checksum_add(&checksum, hb_malloc_event(top & 0x7fffffff, words));
        } else {
            uint64_t words = block_words(&rng, 7, c->big_percent);
            keep[kept++] = alloc_words(words);
            keep_left--;
            hb_checksum_add(&checksum, hb_malloc_event(kept & 0x7fffffff, words) | (1ull << 62));
        }
        mallocs++;
        if (top > 0 && hb_rng_below(&rng, 3) < 2) {
            uint64_t i = hb_rng_below(&rng, top);
            ops += free_words(live[i]);
            live[i] = NULL;
            hb_checksum_add(&checksum, hb_free_event(i));
        }
        if (top > 0 && hb_rng_below(&rng, 4) == 0) {
            uint64_t i = hb_rng_below(&rng, top), x = hb_rng_below(&rng, c->transfer_slots);
            live[i] = atomic_exchange_explicit(&c->transfer[x], live[i], memory_order_acq_rel);
            hb_checksum_add(&checksum, hb_free_event(i) ^ ((x + 1) << 1));
        }
    }
    /* --handoff-percent of the long-lived blocks outlive their thread; the rest die here. */
    uint64_t left = 0;
    for (uint64_t i = 0; i < kept; i++) {
        if (hb_rng_below(&rng, 100) < c->handoff_percent)
            keep[left++] = keep[i];
        else
            ops += free_words(keep[i]);
    }
    hb_checksum_add(&checksum, left);
    for (uint64_t i = 0; i < top; i++)
        ops += free_words(live[i]);
    c->handoff[self->index] = keep;
    c->handoff_count[self->index] = left;
    if (live) {
        free(live);
        ops++;
    }
    atomic_fetch_add_explicit(&c->ops, ops + mallocs, memory_order_relaxed);
    atomic_fetch_add_explicit(&c->mallocs, mallocs, memory_order_relaxed);
    self->checksum = hb_checksum_finish(checksum);
    return NULL;
}

int main(int argc, char **argv) {
    hb_init("bench_thread_churn", usage);
    uint64_t threads = 8, rounds = 20, scale = 25, transfer = 1000, big_percent = 2, seed = 1;
    uint64_t handoff_percent = 0, main_works = 0, same_rounds = 0;
    hb_option opts[] = {
        {"--threads", HB_OPT_U64, &threads, false, false},
        {"--rounds", HB_OPT_U64, &rounds, false, false},
        {"--scale", HB_OPT_U64, &scale, false, false},
        {"--transfer", HB_OPT_U64, &transfer, false, false},
        {"--big-percent", HB_OPT_U64, &big_percent, false, false},
        {"--handoff-percent", HB_OPT_U64, &handoff_percent, false, false},
        {"--main-works", HB_OPT_U64, &main_works, false, false},
        {"--same-rounds", HB_OPT_U64, &same_rounds, false, false},
        {"--seed", HB_OPT_U64, &seed, false, false},
    };
    hb_parse_flags(argc, argv, opts, sizeof opts / sizeof opts[0]);
    hb_check_range("--threads", threads, 1, 512);
    hb_check_range("--rounds", rounds, 0, 1u << 20);
    hb_check_range("--scale", scale, 1, 1u << 16);
    hb_check_range("--transfer", transfer, 1, HB_MAX_WORKING_SET);
    hb_check_range("--big-percent", big_percent, 0, 100);
    hb_check_range("--handoff-percent", handoff_percent, 0, 100);
    hb_check_range("--main-works", main_works, 0, 1);
    hb_check_range("--same-rounds", same_rounds, 0, 1);

    churn c = {.threads = threads,
               .scale = scale,
               .transfer_slots = transfer,
               .big_percent = big_percent,
               .handoff_percent = handoff_percent,
               .same_rounds = same_rounds,
               .seed = seed};
    c.transfer = calloc(transfer, sizeof *c.transfer);
    c.handoff = calloc(threads, sizeof *c.handoff);
    c.handoff_count = calloc(threads, sizeof *c.handoff_count);
    churn_thread *workers = calloc(threads, sizeof *workers);
    if (!c.transfer || !c.handoff || !c.handoff_count || !workers)
        hb_runtime_error("cannot set up %" PRIu64 " threads", threads);
    atomic_init(&c.ops, 0);
    atomic_init(&c.mallocs, 0);

    hb_rng main_rng;
    hb_rng_seed_stream(&main_rng, seed, 0, 0);
    uint64_t checksum = HB_CHECKSUM_INIT, thread_sum = 0, main_ops = 0, started = 0;
    hb_timer timer; /* one chunk: no loop of like parts */
    hb_timer_start(&timer, HB_CPU_PROCESS);
    for (uint64_t round = 0; round < rounds; round++) {
        for (uint64_t t = 0; t < threads; t++) {
            workers[t] = (churn_thread){.c = &c, .index = t, .round = round};
            if (t >= main_works) {
                hb_start_thread(&workers[t].thread, run_thread, &workers[t]);
                started++;
            }
        }
        if (main_works) run_thread(&workers[0]); /* main is thread 0, as in mstress */
        for (uint64_t t = 0; t < threads; t++) {
            if (t >= main_works) pthread_join(workers[t].thread, NULL);
            thread_sum += workers[t].checksum;
        }
        /* Half of the transfer array survives into the next round; none after the last. */
        for (uint64_t x = 0; x < transfer; x++) {
            if (round + 1 == rounds || hb_rng_below(&main_rng, 2)) {
                main_ops += free_words(atomic_exchange(&c.transfer[x], NULL));
                hb_checksum_add(&checksum, hb_free_event(x));
            }
        }
    }
    for (uint64_t t = 0; t < threads; t++) {
        for (uint64_t i = 0; i < c.handoff_count[t]; i++)
            main_ops += free_words(c.handoff[t][i]);
        if (c.handoff[t]) {
            free(c.handoff[t]);
            main_ops++;
        }
    }
    hb_timer_lap(&timer, atomic_load(&c.ops) + main_ops);
    double seconds = hb_timer_stop(&timer);
    hb_report_timer(&timer);
    free(c.handoff);
    free(c.handoff_count);
    free(c.transfer);
    free(workers);

    uint64_t ops = atomic_load(&c.ops) + main_ops;
    hb_print_result_and_rss_end(ops, seconds,
                                hb_checksum_finish(thread_sum + hb_checksum_finish(checksum)));
    printf("mallocs=%" PRIu64 "\nthreads=%" PRIu64 "\nrounds=%" PRIu64 "\nscale=%" PRIu64
           "\ntransfer=%" PRIu64 "\nbig_percent=%" PRIu64 "\nhandoff_percent=%" PRIu64
           "\nmain_works=%" PRIu64 "\nsame_rounds=%" PRIu64 "\nthreads_started=%" PRIu64
           "\nseed=%" PRIu64 "\n",
           atomic_load(&c.mallocs), threads, rounds, scale, transfer, big_percent, handoff_percent,
           main_works, same_rounds, started, seed);
    hb_flush_stdout();
    return 0;
}
