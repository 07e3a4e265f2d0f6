/* bench_large: large-block churn (issue #11). A live set of --live slots; each op picks a
 * slot at random and
 *   - empty slot: mallocs a block of a random size in [--min, --max] (log-uniform: every
 *     power-of-two range is equally likely, then uniform inside it) and writes every page;
 *   - live slot, half of the time: reallocs it to a new random size (up or down), checks
 *     that the kept prefix survived and writes the pages the block gained;
 *   - live slot, otherwise: checks and frees it.
 * Every page carries a tag in its first byte, so a realloc that loses or misplaces data is
 * caught. Throughput is ops (malloc, realloc, free) per second, page writes included. */
#define _GNU_SOURCE
#include "common.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

static const char usage[] =
    "usage: bench_large [--ops N] [--live N] [--min B] [--max B] [--seed N]\n"
    "  --ops N        operations: malloc, realloc or free (default 400; 0 measures start-up\n"
    "                 only)\n"
    "  --live N       slots of the live set (default 16)\n"
    "  --min/--max B  block sizes, log-uniform in [min,max] (default 32768..67108864)\n"
    "  --seed N       PRNG seed (default 1)\n";

#define PAGE 4096u

static unsigned char page_tag(uint64_t slot, uint64_t page) {
    return hb_block_tag(slot * 0x10001u + page);
}

/* Writes the tag of every page in [from, to) bytes: the first byte of each page that starts
 * there, and the block's first byte when from is 0. */
static void touch_pages(unsigned char *block, uint64_t slot, uint64_t from, uint64_t to) {
    for (uint64_t page = (from + PAGE - 1) / PAGE; page * PAGE < to; page++)
        block[page * PAGE] = page_tag(slot, page);
}

static void check_pages(const unsigned char *block, uint64_t slot, uint64_t size) {
    for (uint64_t page = 0; page * PAGE < size; page++)
        if (block[page * PAGE] != page_tag(slot, page)) hb_block_overwritten(block, size);
}

int main(int argc, char **argv) {
    hb_init("bench_large", usage);
    uint64_t ops = 400, live = 16, min_size = 32768, max_size = 64ull << 20, seed = 1;
    hb_option opts[] = {
        {"--ops", HB_OPT_U64, &ops, false, false},
        {"--live", HB_OPT_U64, &live, false, false},
        {"--min", HB_OPT_U64, &min_size, false, false},
        {"--max", HB_OPT_U64, &max_size, false, false},
        {"--seed", HB_OPT_U64, &seed, false, false},
    };
    hb_parse_flags(argc, argv, opts, sizeof opts / sizeof opts[0]);
    hb_check_range("--ops", ops, 0, 1ull << 32);
    hb_check_range("--live", live, 1, 1u << 16);
    hb_check_size_range(min_size, max_size);

    unsigned char **blocks = calloc(live, sizeof *blocks);
    uint64_t *sizes = calloc(live, sizeof *sizes);
    if (!blocks || !sizes) hb_runtime_error("cannot allocate %" PRIu64 " slots", live);
    hb_rng rng;
    hb_rng_seed(&rng, seed);
    uint64_t checksum = HB_CHECKSUM_INIT, mallocs = 0, reallocs = 0, frees = 0;

    hb_timer timer;
    hb_timer_start(&timer, HB_CPU_PROCESS);
    for (unsigned c = 0; c < hb_chunks(); c++) {
        uint64_t to = hb_chunk_bound(ops, c + 1, 1);
        for (uint64_t i = hb_chunk_bound(ops, c, 1); i < to; i++) {
            uint64_t slot = hb_rng_below(&rng, live);
            unsigned char *block = blocks[slot];
            if (!block) {
                uint64_t size = hb_rng_log_uniform(&rng, min_size, max_size);
                block = hb_malloc(size);
                touch_pages(block, slot, 0, size);
                blocks[slot] = block;
                sizes[slot] = size;
                mallocs++;
                hb_checksum_add(&checksum, hb_malloc_event(slot, size));
            } else if (hb_rng_below(&rng, 2)) {
                uint64_t old_size = sizes[slot],
                         size = hb_rng_log_uniform(&rng, min_size, max_size);
                block = hb_realloc(block, size);
                check_pages(block, slot, old_size < size ? old_size : size);
                touch_pages(block, slot, old_size, size);
                blocks[slot] = block;
                sizes[slot] = size;
                reallocs++;
                hb_checksum_add(&checksum, hb_malloc_event(slot, size) ^ (1ull << 62));
            } else {
                check_pages(block, slot, sizes[slot]);
                free(block);
                blocks[slot] = NULL;
                frees++;
                hb_checksum_add(&checksum, hb_free_event(slot));
            }
        }
        if (c + 1 == hb_chunks()) break; /* the last chunk goes on with the drain */
        hb_timer_lap(&timer, mallocs + reallocs + frees);
    }
    for (uint64_t slot = 0; slot < live; slot++) {
        if (blocks[slot]) {
            check_pages(blocks[slot], slot, sizes[slot]);
            free(blocks[slot]);
            frees++;
        }
    }
    hb_timer_lap(&timer, mallocs + reallocs + frees);
    double seconds = hb_timer_stop(&timer);
    hb_report_timer(&timer);
    free(blocks);
    free(sizes);

    hb_print_result_and_rss_end(mallocs + reallocs + frees, seconds, hb_checksum_finish(checksum));
    printf("mallocs=%" PRIu64 "\nreallocs=%" PRIu64 "\nfrees=%" PRIu64 "\nlive=%" PRIu64
           "\nmin=%" PRIu64 "\nmax=%" PRIu64 "\nseed=%" PRIu64 "\n",
           mallocs, reallocs, frees, live, min_size, max_size, seed);
    hb_flush_stdout();
    return 0;
}
