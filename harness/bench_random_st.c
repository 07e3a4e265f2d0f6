/* bench_random_st: random single-thread malloc/free with mixed lifetimes (issue #30), in the
 * spirit of the classic single-thread "alloc-test" random tests. Three pools of slots stand
 * for three lifetimes: --short slots (default 64), --medium (4096) and --long (16384). Each
 * op picks a pool (short 80 %, medium 18 %, long 2 % of the time) and a random slot in it,
 * checks and frees the block the slot holds (if any), mallocs a new one and writes all of it.
 * A short-lived block so lives about 80 ops, a medium one about 23 thousand, a long-lived
 * one about 800 thousand: blocks of all three ages sit side by side in the heap, and the
 * long-lived ones pin the pages around the short-lived ones' holes.
 *
 * Sizes from --min to --max (8 B to 64 KiB) skewed small: a power-of-two range is drawn as
 * the lower of two uniform picks (so 8-15 B is 25x as likely as 32-64 KiB), then uniform
 * inside it; the mean is about 1.7 KiB.
 *
 * The checksum covers pools, slots and sizes. ops counts mallocs and frees, the final frees
 * included. */
#define _GNU_SOURCE
#include "common.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

static const char usage[] =
    "usage: bench_random_st [--steps N] [--short N] [--medium N] [--long N] [--min B] [--max B]\n"
    "                       [--seed N]\n"
    "  --steps N      free+malloc steps (default 4000000; 0 measures start-up only)\n"
    "  --short N      slots of short-lived blocks, 80 % of the steps (default 64)\n"
    "  --medium N     slots of medium-lived blocks, 18 % of the steps (default 4096)\n"
    "  --long N       slots of long-lived blocks, 2 % of the steps (default 16384)\n"
    "  --min/--max B  block sizes, skewed small in [min,max] (default 8..65536)\n"
    "  --seed N       PRNG seed (default 1)\n";

enum { POOL_SHORT, POOL_MEDIUM, POOL_LONG, POOLS };

typedef struct {
    uint64_t slots;
    unsigned char **blocks;
    uint32_t *sizes;
} pool;

/* The lower of two uniform power-of-two ranges, then uniform inside it. */
static uint64_t skewed_size(hb_rng *rng, uint64_t min_size, uint64_t max_size) {
    unsigned lo_bit = 63 - (unsigned)__builtin_clzll(min_size);
    unsigned hi_bit = 63 - (unsigned)__builtin_clzll(max_size);
    uint64_t a = hb_rng_below(rng, hi_bit - lo_bit + 1), b = hb_rng_below(rng, hi_bit - lo_bit + 1);
    unsigned bit = lo_bit + (unsigned)(a < b ? a : b);
    uint64_t from = 1ull << bit, to = (2ull << bit) - 1;
    if (from < min_size) from = min_size;
    if (to > max_size) to = max_size;
    return hb_rng_between(rng, from, to);
}

static unsigned char pool_tag(unsigned which, uint64_t slot) {
    return hb_block_tag(slot * POOLS + which);
}

int main(int argc, char **argv) {
    hb_init("bench_random_st", usage);
    uint64_t steps = 4000000, slots[POOLS] = {64, 4096, 16384}, min_size = 8, max_size = 65536;
    uint64_t seed = 1;
    hb_option opts[] = {
        {"--steps", HB_OPT_U64, &steps, false, false},
        {"--short", HB_OPT_U64, &slots[POOL_SHORT], false, false},
        {"--medium", HB_OPT_U64, &slots[POOL_MEDIUM], false, false},
        {"--long", HB_OPT_U64, &slots[POOL_LONG], false, false},
        {"--min", HB_OPT_U64, &min_size, false, false},
        {"--max", HB_OPT_U64, &max_size, false, false},
        {"--seed", HB_OPT_U64, &seed, false, false},
    };
    hb_parse_flags(argc, argv, opts, sizeof opts / sizeof opts[0]);
    hb_check_range("--steps", steps, 0, 1ull << 40);
    hb_check_range("--short", slots[POOL_SHORT], 1, HB_MAX_WORKING_SET);
    hb_check_range("--medium", slots[POOL_MEDIUM], 1, HB_MAX_WORKING_SET);
    hb_check_range("--long", slots[POOL_LONG], 1, HB_MAX_WORKING_SET);
    hb_check_size_range(min_size, max_size);
    hb_check_range("--max", max_size, min_size, 1u << 24);

    pool pools[POOLS];
    for (unsigned p = 0; p < POOLS; p++) {
        pools[p].slots = slots[p];
        pools[p].blocks = calloc(slots[p], sizeof *pools[p].blocks);
        pools[p].sizes = calloc(slots[p], sizeof *pools[p].sizes);
        if (!pools[p].blocks || !pools[p].sizes)
            hb_runtime_error("cannot allocate %" PRIu64 " slots", slots[p]);
    }
    hb_rng rng;
    hb_rng_seed(&rng, seed);
    uint64_t checksum = HB_CHECKSUM_INIT, mallocs = 0, frees = 0;

    hb_timer timer;
    hb_timer_start(&timer, HB_CPU_PROCESS);
    for (unsigned c = 0; c < hb_chunks(); c++) {
        uint64_t to = hb_chunk_bound(steps, c + 1, 1);
        for (uint64_t i = hb_chunk_bound(steps, c, 1); i < to; i++) {
            uint64_t pick = hb_rng_below(&rng, 100);
            unsigned which = pick < 80 ? POOL_SHORT : pick < 98 ? POOL_MEDIUM : POOL_LONG;
            pool *p = &pools[which];
            uint64_t slot = hb_rng_below(&rng, p->slots);
            unsigned char tag = pool_tag(which, slot);
            if (p->blocks[slot]) {
                hb_verify_block(p->blocks[slot], p->sizes[slot], tag);
                free(p->blocks[slot]);
                frees++;
            }
            uint64_t size = skewed_size(&rng, min_size, max_size);
            unsigned char *block = hb_malloc(size);
            memset(block, tag, size);
            p->blocks[slot] = block;
            p->sizes[slot] = (uint32_t)size;
            mallocs++;
            hb_checksum_add(&checksum, hb_malloc_event(slot * POOLS + which, size));
        }
        if (c + 1 == hb_chunks()) break; /* the last chunk goes on with the drain */
        hb_timer_lap(&timer, mallocs + frees);
    }
    for (unsigned which = 0; which < POOLS; which++) {
        pool *p = &pools[which];
        for (uint64_t slot = 0; slot < p->slots; slot++) {
            if (p->blocks[slot]) {
                hb_verify_block(p->blocks[slot], p->sizes[slot], pool_tag(which, slot));
                free(p->blocks[slot]);
                frees++;
            }
        }
    }
    hb_timer_lap(&timer, mallocs + frees);
    double seconds = hb_timer_stop(&timer);
    hb_report_timer(&timer);
    for (unsigned which = 0; which < POOLS; which++) {
        free(pools[which].blocks);
        free(pools[which].sizes);
    }

    hb_print_result_and_rss_end(mallocs + frees, seconds, hb_checksum_finish(checksum));
    printf("mallocs=%" PRIu64 "\nfrees=%" PRIu64 "\nsteps=%" PRIu64 "\nshort=%" PRIu64
           "\nmedium=%" PRIu64 "\nlong=%" PRIu64 "\nmin=%" PRIu64 "\nmax=%" PRIu64 "\nseed=%" PRIu64
           "\n",
           mallocs, frees, steps, slots[POOL_SHORT], slots[POOL_MEDIUM], slots[POOL_LONG], min_size,
           max_size, seed);
    hb_flush_stdout();
    return 0;
}
