/* bench_burst: the memory-policy measurement. Allocates about --mb MiB of small blocks
 * (random sizes in [--min, --max], each written), frees them all, and reports how much of
 * that memory the allocator still keeps resident afterwards (rss_kb) next to the peak
 * (rss_peak_kb). A speed-first allocator keeps its freed memory for reuse; a lean one gives
 * it back. Throughput covers the allocations and frees. */
#define _GNU_SOURCE
#include "common.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

static const char usage[] =
    "usage: bench_burst [--mb N] [--min B] [--max B] [--seed N]\n"
    "  --mb N     MiB of blocks to allocate before freeing them all (default 300; 0 measures\n"
    "             start-up only)\n"
    "  --min B    smallest block (default 16)\n"
    "  --max B    largest block (default 1024)\n"
    "  --seed N   PRNG seed for the sizes (default 1)\n";

int main(int argc, char **argv) {
    hb_init("bench_burst", usage);
    uint64_t mb = 300, min_size = 16, max_size = 1024, seed = 1;
    hb_option opts[] = {
        {"--mb", HB_OPT_U64, &mb, false, false},
        {"--min", HB_OPT_U64, &min_size, false, false},
        {"--max", HB_OPT_U64, &max_size, false, false},
        {"--seed", HB_OPT_U64, &seed, false, false},
    };
    hb_parse_flags(argc, argv, opts, sizeof opts / sizeof opts[0]);
    hb_check_range("--mb", mb, 0, 64 * 1024);
    hb_check_size_range(min_size, max_size);

    /* First pass: how many blocks make the target, so the pointer array is allocated once
     * (exactly), not grown by realloc while the burst is being measured. */
    uint64_t target = mb << 20, count = 0;
    hb_rng rng;
    hb_rng_seed(&rng, seed);
    for (uint64_t total = 0; total < target; count++)
        total += min_size + hb_rng_below(&rng, max_size - min_size + 1);
    unsigned char **blocks = calloc(count ? count : 1, sizeof *blocks);
    uint32_t *sizes = calloc(count ? count : 1, sizeof *sizes);
    if (!blocks || !sizes) hb_runtime_error("cannot allocate %" PRIu64 " slots", count);

    uint64_t checksum = HB_CHECKSUM_INIT;
    hb_rng_seed(&rng, seed);
    hb_timer timer; /* one chunk: no loop of like parts */
    hb_timer_start(&timer, HB_CPU_PROCESS);
    for (uint64_t i = 0; i < count; i++) {
        uint64_t size = min_size + hb_rng_below(&rng, max_size - min_size + 1);
        unsigned char *block = malloc(size);
        if (!block) hb_runtime_error("malloc(%" PRIu64 ") returned NULL", size);
        hb_fill_block(block, size, hb_block_tag(i));
        blocks[i] = block;
        sizes[i] = (uint32_t)size;
        hb_checksum_add(&checksum, hb_malloc_event(i & 0x7fffffff, size));
    }
    long rss_peak_kb = hb_rss_kb();
    for (uint64_t i = 0; i < count; i++) {
        hb_verify_block(blocks[i], sizes[i], hb_block_tag(i));
        free(blocks[i]);
        hb_checksum_add(&checksum, hb_free_event(i & 0x7fffffff));
    }
    hb_timer_lap(&timer, 2 * count);
    double seconds = hb_timer_stop(&timer);
    hb_report_timer(&timer);
    free(blocks);
    free(sizes);
    long rss_kb = hb_rss_kb(); /* after everything is freed, the slot arrays included */

    hb_print_result(2 * count, seconds, hb_checksum_finish(checksum));
    printf("rss_kb=%ld\nrss_peak_kb=%ld\nblocks=%" PRIu64 "\nmb=%" PRIu64 "\nmin=%" PRIu64
           "\nmax=%" PRIu64 "\nseed=%" PRIu64 "\n",
           rss_kb, rss_peak_kb, count, mb, min_size, max_size, seed);
    hb_flush_stdout();
    return 0;
}
