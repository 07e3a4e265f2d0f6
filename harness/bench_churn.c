/* bench_churn: thread churn with survivors and cross-thread frees (issue #11). Every round
 * starts --threads new threads and joins them. Thread t of a round
 *   1. frees about half of its retained set, which earlier (now exited) threads allocated or
 *      swapped in;
 *   2. allocates --objects blocks of random sizes (mostly small, a few per thousand up to
 *      --big-max, as real programs mix in the odd buffer) and writes each whole, so the
 *      resident set is live data plus what the allocator adds; records them in a pointer array
 *      that it grows with realloc in --grow-kb steps (a vector-like buffer: ~800 KB steps);
 *   3. refills its empty retained slots from those blocks (they survive into the next
 *      round), swaps a share of the rest into a shared transfer array (taking out whatever
 *      block another thread left there and freeing it), and frees the others itself.
 * The main thread frees the survivors at the end. The pattern follows the description of
 * mimalloc-bench's "mstress" (thread churn with survivors) and the larson-like hand-off of
 * objects between threads; no code is taken from either.
 *
 * The checksum covers each thread's own decisions (sizes, slots, transfer indices), summed
 * over threads, so it does not depend on the interleaving; which block a swap takes out does,
 * so it is not part of it. ops counts every malloc, free and realloc. */
#define _GNU_SOURCE
#include "common.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "usage: bench_churn [--threads N] [--rounds N] [--objects N] [--window N] [--retain N]\n"
    "                   [--transfer N] [--swap-percent N] [--grow-kb N] [--min B] [--max B]\n"
    "                   [--big-permille N] [--big-max B] [--seed N]\n"
    "  --threads N       threads started (and joined) each round (default 4)\n"
    "  --rounds N        rounds (default 8; 0 measures start-up only)\n"
    "  --objects N       blocks each thread allocates per round (default 120000)\n"
    "  --window N        a new block is kept, swapped or freed N blocks later (default 4096)\n"
    "  --retain N        retained slots per thread; half are freed each round (default 10000)\n"
    "  --transfer N      slots of the shared transfer array (default 4096)\n"
    "  --swap-percent N  share of the non-retained blocks swapped through it (default 25)\n"
    "  --grow-kb N       realloc step of each thread's pointer array in KiB (default 800)\n"
    "  --min/--max B     block sizes, uniform in [min,max] (default 16..512; min >= 8)\n"
    "  --big-permille N  share of blocks sized uniformly in [max,big-max] instead (default 10)\n"
    "  --big-max B       largest of those (default 65536)\n"
    "  --seed N          PRNG seed (default 1)\n";

typedef struct {
    uint64_t threads, objects, window, retain, transfer_slots, swap_percent, grow_entries;
    uint64_t min_size, max_size, big_permille, big_max, seed;
    unsigned char **retained;           /* threads x retain */
    _Atomic(unsigned char *) *transfer; /* transfer_slots */
    _Atomic uint64_t ops;
} churn;

typedef struct {
    pthread_t thread;
    churn *c;
    uint64_t index, round, checksum;
} churn_thread;

/* The pointer array of one round: grown with realloc, a step of grow_entries at a time. */
static unsigned char **append_block(unsigned char **array, uint64_t count, uint64_t *capacity,
                                    uint64_t step, uint64_t *ops, unsigned char *block) {
    if (count == *capacity) {
        *capacity += step;
        array = (unsigned char **)hb_realloc(array, *capacity * sizeof *array);
        (*ops)++;
    }
    array[count] = block;
    return array;
}

/* One thread's round: its PRNG stream, checksum and op count, and its retained set. */
typedef struct {
    churn *c;
    hb_rng rng;
    uint64_t checksum, ops;
    unsigned char **retained;
    uint64_t empty, next_slot;
} round_state;

/* 3. Block i of the round either fills an empty retained slot (spread evenly over the
 *    round, so survivors sit among freed blocks), or is swapped into the transfer array
 *    (freeing the block it displaces, usually another thread's), or is freed here. */
static void dispose(round_state *st, unsigned char **fresh, uint64_t i) {
    churn *c = st->c;
    unsigned char *block = fresh[i];
    fresh[i] = NULL;
    if (st->empty > 0 && hb_rng_below(&st->rng, c->objects - i) < st->empty) {
        while (st->retained[st->next_slot])
            st->next_slot++;
        st->retained[st->next_slot] = block;
        st->empty--;
        hb_checksum_add(&st->checksum, hb_malloc_event(st->next_slot, 0));
    } else if (hb_rng_below(&st->rng, 100) < c->swap_percent) {
        uint64_t x = hb_rng_below(&st->rng, c->transfer_slots);
        unsigned char *out = atomic_exchange_explicit(&c->transfer[x], block, memory_order_acq_rel);
        if (out) {
            hb_verify_sized(out);
            free(out);
            st->ops++;
        }
        hb_checksum_add(&st->checksum, hb_free_event(x) | 1);
    } else {
        hb_verify_sized(block);
        free(block);
        st->ops++;
        hb_checksum_add(&st->checksum, hb_free_event(i & 0x7fffffff) | 2);
    }
}

static void *run_round(void *arg) {
    churn_thread *self = arg;
    churn *c = self->c;
    round_state st = {
        .c = c, .checksum = HB_CHECKSUM_INIT, .retained = c->retained + self->index * c->retain};
    hb_rng_seed_stream(&st.rng, c->seed, self->round, self->index);

    /* 1. Half of the survivors go. */
    for (uint64_t slot = 0; slot < c->retain; slot++) {
        if (st.retained[slot] && hb_rng_below(&st.rng, 2)) {
            hb_verify_sized(st.retained[slot]);
            free(st.retained[slot]);
            st.retained[slot] = NULL;
            st.ops++;
            hb_checksum_add(&st.checksum, hb_free_event(slot));
        }
        st.empty += st.retained[slot] == NULL;
    }

    /* 2. New blocks, recorded in a pointer array grown with realloc; each block is disposed
     *    of --window blocks later (3.), so only the window of them is live at once. */
    unsigned char **fresh = NULL;
    uint64_t capacity = 0;
    for (uint64_t i = 0; i < c->objects; i++) {
        bool big = hb_rng_below(&st.rng, 1000) < c->big_permille;
        uint64_t size = big ? hb_rng_between(&st.rng, c->max_size, c->big_max)
                            : hb_rng_between(&st.rng, c->min_size, c->max_size);
        unsigned char *block = hb_malloc(size);
        st.ops++;
        memset(block, 0x5a, size);
        hb_fill_sized(block, size);
        fresh = append_block(fresh, i, &capacity, c->grow_entries, &st.ops, block);
        hb_checksum_add(&st.checksum, hb_malloc_event(i & 0x7fffffff, size));
        if (i >= c->window) dispose(&st, fresh, i - c->window);
    }
    for (uint64_t i = c->objects > c->window ? c->objects - c->window : 0; i < c->objects; i++)
        dispose(&st, fresh, i);
    free(fresh);
    st.ops++;
    atomic_fetch_add_explicit(&c->ops, st.ops, memory_order_relaxed);
    self->checksum = hb_checksum_finish(st.checksum);
    return NULL;
}

static uint64_t free_if_live(unsigned char *block) {
    if (!block) return 0;
    hb_verify_sized(block);
    free(block);
    return 1;
}

int main(int argc, char **argv) {
    hb_init("bench_churn", usage);
    uint64_t threads = 4, rounds = 8, objects = 120000, window = 4096, retain = 10000;
    uint64_t transfer = 4096;
    uint64_t swap_percent = 25, grow_kb = 800, min_size = 16, max_size = 512, seed = 1;
    uint64_t big_permille = 10, big_max = 64 * 1024;
    hb_option opts[] = {
        {"--threads", HB_OPT_U64, &threads, false, false},
        {"--rounds", HB_OPT_U64, &rounds, false, false},
        {"--objects", HB_OPT_U64, &objects, false, false},
        {"--window", HB_OPT_U64, &window, false, false},
        {"--retain", HB_OPT_U64, &retain, false, false},
        {"--transfer", HB_OPT_U64, &transfer, false, false},
        {"--swap-percent", HB_OPT_U64, &swap_percent, false, false},
        {"--grow-kb", HB_OPT_U64, &grow_kb, false, false},
        {"--min", HB_OPT_U64, &min_size, false, false},
        {"--max", HB_OPT_U64, &max_size, false, false},
        {"--big-permille", HB_OPT_U64, &big_permille, false, false},
        {"--big-max", HB_OPT_U64, &big_max, false, false},
        {"--seed", HB_OPT_U64, &seed, false, false},
    };
    hb_parse_flags(argc, argv, opts, sizeof opts / sizeof opts[0]);
    hb_check_range("--threads", threads, 1, 512);
    hb_check_range("--rounds", rounds, 0, 1u << 20);
    hb_check_range("--objects", objects, 0, HB_MAX_WORKING_SET);
    hb_check_range("--window", window, 1, HB_MAX_WORKING_SET);
    hb_check_range("--retain", retain, 0, HB_MAX_WORKING_SET);
    hb_check_range("--transfer", transfer, 1, HB_MAX_WORKING_SET);
    hb_check_range("--swap-percent", swap_percent, 0, 100);
    hb_check_range("--grow-kb", grow_kb, 1, 1u << 20);
    hb_check_size_range(min_size, max_size);
    hb_check_range("--min", min_size, HB_SIZED_MIN, HB_MAX_BLOCK_SIZE);
    hb_check_range("--big-permille", big_permille, 0, 1000);
    hb_check_range("--big-max", big_max, max_size, HB_MAX_BLOCK_SIZE);

    churn c = {.threads = threads,
               .objects = objects,
               .window = window,
               .retain = retain,
               .transfer_slots = transfer,
               .swap_percent = swap_percent,
               .grow_entries = grow_kb * 1024 / sizeof(unsigned char *),
               .min_size = min_size,
               .max_size = max_size,
               .big_permille = big_permille,
               .big_max = big_max,
               .seed = seed};
    if (c.grow_entries == 0) c.grow_entries = 1;
    uint64_t retained_slots = threads * retain;
    c.retained = calloc(retained_slots ? retained_slots : 1, sizeof *c.retained);
    c.transfer = calloc(transfer, sizeof *c.transfer);
    churn_thread *workers = calloc(threads, sizeof *workers);
    if (!c.retained || !c.transfer || !workers)
        hb_runtime_error("cannot set up %" PRIu64 " threads", threads);
    atomic_init(&c.ops, 0);

    uint64_t checksum_sum = 0;
    hb_timer timer; /* one chunk: no loop of like parts */
    hb_timer_start(&timer, HB_CPU_PROCESS);
    for (uint64_t round = 0; round < rounds; round++) {
        for (uint64_t t = 0; t < threads; t++) {
            workers[t] = (churn_thread){.c = &c, .index = t, .round = round};
            hb_start_thread(&workers[t].thread, run_round, &workers[t]);
        }
        for (uint64_t t = 0; t < threads; t++) {
            pthread_join(workers[t].thread, NULL);
            checksum_sum += workers[t].checksum;
        }
    }
    uint64_t ops = atomic_load(&c.ops);
    for (uint64_t i = 0; i < retained_slots; i++)
        ops += free_if_live(c.retained[i]);
    for (uint64_t i = 0; i < transfer; i++)
        ops += free_if_live(atomic_load(&c.transfer[i]));
    hb_timer_lap(&timer, ops);
    double seconds = hb_timer_stop(&timer);
    hb_report_timer(&timer);
    free(c.retained);
    free(c.transfer);
    free(workers);

    hb_print_result_and_rss_end(ops, seconds, hb_checksum_finish(checksum_sum));
    printf("threads=%" PRIu64 "\nrounds=%" PRIu64 "\nobjects=%" PRIu64 "\nwindow=%" PRIu64
           "\nretain=%" PRIu64 "\ntransfer=%" PRIu64 "\nswap_percent=%" PRIu64 "\ngrow_kb=%" PRIu64
           "\nmin=%" PRIu64 "\nmax=%" PRIu64 "\nbig_permille=%" PRIu64 "\nbig_max=%" PRIu64
           "\nseed=%" PRIu64 "\n",
           threads, rounds, objects, window, retain, transfer, swap_percent, grow_kb, min_size,
           max_size, big_permille, big_max, seed);
    hb_flush_stdout();
    return 0;
}
