/* bench_bigblock: big blocks allocated, touched and freed, over and over (issue #30). A live
 * set of --live slots; each of --rounds rounds picks a slot at random, checks and frees the
 * block it holds (if any), then mallocs a block of a random size in [--min, --max]
 * (log-uniform: every power-of-two range equally likely, then uniform inside it; 1-32 MiB by
 * default) and writes one word every --stride bytes of it (by default one per 4 KiB page:
 * every page touched). With --live 1 (the default) that is the plain loop: allocate, touch,
 * free, the next block; with a few live at once the blocks are freed out of order.
 *
 * The pattern of the classic "allocate a buffer of several MiB, fill it, drop it" loops:
 * an allocator that keeps such blocks mapped hands the same pages out again, one that gives
 * them back to the OS at free pays a page fault per page of the next block. minflt= is the
 * minor page faults (getrusage) of the timed loop, so that difference shows directly.
 *
 * The checksum covers slots and sizes. ops counts mallocs and frees. */
#define _GNU_SOURCE
#include "common.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

static const char usage[] =
    "usage: bench_bigblock [--rounds N] [--live N] [--min B] [--max B] [--stride B] [--seed N]\n"
    "  --rounds N     blocks allocated, each replacing the block of a random slot (default\n"
    "                 300; 0 measures start-up only)\n"
    "  --live N       slots: blocks live at once (default 1: allocate, touch, free)\n"
    "  --min/--max B  block sizes, log-uniform in [min,max] (default 1048576..33554432)\n"
    "  --stride B     bytes between the words written (default 4096: one per page; 8..4096)\n"
    "  --seed N       PRNG seed (default 1)\n";

static inline uint64_t word_tag(uint64_t slot, uint64_t offset) {
    return hb_mix64(slot * 0x100000001ull + offset);
}

static void touch(unsigned char *block, uint64_t size, uint64_t stride, uint64_t slot) {
    for (uint64_t offset = 0; offset + sizeof(uint64_t) <= size; offset += stride) {
        uint64_t tag = word_tag(slot, offset);
        memcpy(block + offset, &tag, sizeof tag);
    }
}

static void check(const unsigned char *block, uint64_t size, uint64_t stride, uint64_t slot) {
    for (uint64_t offset = 0; offset + sizeof(uint64_t) <= size; offset += stride) {
        uint64_t tag;
        memcpy(&tag, block + offset, sizeof tag);
        if (tag != word_tag(slot, offset)) hb_block_overwritten(block, size);
    }
}

int main(int argc, char **argv) {
    hb_init("bench_bigblock", usage);
    uint64_t rounds = 300, live = 1, min_size = 1ull << 20, max_size = 32ull << 20;
    uint64_t stride = 4096, seed = 1;
    hb_option opts[] = {
        {"--rounds", HB_OPT_U64, &rounds, false, false},
        {"--live", HB_OPT_U64, &live, false, false},
        {"--min", HB_OPT_U64, &min_size, false, false},
        {"--max", HB_OPT_U64, &max_size, false, false},
        {"--stride", HB_OPT_U64, &stride, false, false},
        {"--seed", HB_OPT_U64, &seed, false, false},
    };
    hb_parse_flags(argc, argv, opts, sizeof opts / sizeof opts[0]);
    hb_check_range("--rounds", rounds, 0, 1ull << 32);
    hb_check_range("--live", live, 1, 1u << 10);
    hb_check_size_range(min_size, max_size);
    hb_check_range("--min", min_size, sizeof(uint64_t), HB_MAX_BLOCK_SIZE);
    hb_check_range("--stride", stride, sizeof(uint64_t), 4096);

    unsigned char **blocks = calloc(live, sizeof *blocks);
    uint64_t *sizes = calloc(live, sizeof *sizes);
    if (!blocks || !sizes) hb_runtime_error("cannot allocate %" PRIu64 " slots", live);
    hb_rng rng;
    hb_rng_seed(&rng, seed);
    uint64_t checksum = HB_CHECKSUM_INIT, mallocs = 0, frees = 0, allocated = 0;

    long faults_before = hb_minflt();
    hb_timer timer;
    hb_timer_start(&timer, HB_CPU_PROCESS);
    for (unsigned c = 0; c < hb_chunks(); c++) {
        uint64_t to = hb_chunk_bound(rounds, c + 1, 1);
        for (uint64_t i = hb_chunk_bound(rounds, c, 1); i < to; i++) {
            uint64_t slot = hb_rng_below(&rng, live);
            if (blocks[slot]) {
                check(blocks[slot], sizes[slot], stride, slot);
                free(blocks[slot]);
                frees++;
                hb_checksum_add(&checksum, hb_free_event(slot));
            }
            uint64_t size = hb_rng_log_uniform(&rng, min_size, max_size);
            blocks[slot] = hb_malloc(size);
            touch(blocks[slot], size, stride, slot);
            sizes[slot] = size;
            mallocs++;
            allocated += size;
            hb_checksum_add(&checksum, hb_malloc_event(slot, size));
        }
        if (c + 1 == hb_chunks()) break; /* the last chunk goes on with the drain */
        hb_timer_lap(&timer, mallocs + frees);
    }
    for (uint64_t slot = 0; slot < live; slot++) {
        if (blocks[slot]) {
            check(blocks[slot], sizes[slot], stride, slot);
            free(blocks[slot]);
            frees++;
        }
    }
    hb_timer_lap(&timer, mallocs + frees);
    double seconds = hb_timer_stop(&timer);
    hb_report_timer(&timer);
    long faults = hb_minflt() - faults_before;
    free(blocks);
    free(sizes);

    hb_print_result_and_rss_end(mallocs + frees, seconds, hb_checksum_finish(checksum));
    printf("minflt=%ld\nmallocs=%" PRIu64 "\nfrees=%" PRIu64 "\nallocated_mib=%" PRIu64
           "\nrounds=%" PRIu64 "\nlive=%" PRIu64 "\nmin=%" PRIu64 "\nmax=%" PRIu64
           "\nstride=%" PRIu64 "\nseed=%" PRIu64 "\n",
           faults, mallocs, frees, allocated >> 20, rounds, live, min_size, max_size, stride, seed);
    hb_flush_stdout();
    return 0;
}
