/* bench_tiny_hot: malloc a batch of same-size blocks, free them in allocation order, repeat.
 * The hot path of one size class, with no PRNG work between ops. */
#define _GNU_SOURCE
#include "common.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

static const char usage[] =
    "usage: bench_tiny_hot --cycles N [--size B] [--batch N] [--seed N]\n"
    "  --cycles N  batches to allocate and free (0 measures start-up only)\n"
    "  --size B    block size (default 64)\n"
    "  --batch N   blocks per batch (default 100)\n"
    "  --seed N    offsets the block tags and so the checksum (default 1)\n";

int main(int argc, char **argv) {
    hb_init("bench_tiny_hot", usage);
    uint64_t cycles = 0, size = 64, batch = 100, seed = 1;
    hb_option opts[] = {
        {"--cycles", HB_OPT_U64, &cycles, true, false},
        {"--size", HB_OPT_U64, &size, false, false},
        {"--batch", HB_OPT_U64, &batch, false, false},
        {"--seed", HB_OPT_U64, &seed, false, false},
    };
    hb_parse_flags(argc, argv, opts, sizeof opts / sizeof opts[0]);
    hb_check_range("--size", size, 1, HB_MAX_BLOCK_SIZE);
    hb_check_range("--batch", batch, 1, HB_MAX_WORKING_SET);

    unsigned char **blocks = calloc(batch, sizeof *blocks);
    if (!blocks) hb_runtime_error("cannot allocate a batch array of %" PRIu64 " slots", batch);
    uint64_t checksum = HB_CHECKSUM_INIT;

    hb_timer timer;
    hb_timer_start(&timer, HB_CPU_PROCESS);
    for (unsigned c = 0; c < hb_chunks(); c++) {
        uint64_t to = hb_chunk_bound(cycles, c + 1, 1);
        for (uint64_t cycle = hb_chunk_bound(cycles, c, 1); cycle < to; cycle++) {
            for (uint64_t i = 0; i < batch; i++) {
                unsigned char *block = malloc(size);
                if (!block) hb_runtime_error("malloc(%" PRIu64 ") returned NULL", size);
                hb_fill_block(block, size, hb_block_tag(seed + i));
                blocks[i] = block;
                hb_checksum_add(&checksum, hb_malloc_event(seed + i, size));
            }
            for (uint64_t i = 0; i < batch; i++) {
                hb_verify_block(blocks[i], size, hb_block_tag(seed + i));
                free(blocks[i]);
                hb_checksum_add(&checksum, hb_free_event(seed + i));
            }
        }
        hb_timer_lap(&timer, 2 * batch * to);
    }
    double seconds = hb_timer_stop(&timer);
    hb_report_timer(&timer);
    free(blocks);

    hb_print_result(2 * cycles * batch, seconds, hb_checksum_finish(checksum));
    printf("cycles=%" PRIu64 "\nsize=%" PRIu64 "\nbatch=%" PRIu64 "\nseed=%" PRIu64 "\n", cycles,
           size, batch, seed);
    hb_flush_stdout();
    return 0;
}
