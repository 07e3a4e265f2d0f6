/* bench_leak_grow: a program that leaks slowly and keeps growing buffers. Each of --rounds
 * rounds runs --steps random-mixed steps over a working set of --ws slots (free a live slot
 * or fill an empty one, sizes in [--min, --max]); a live block leaves its slot without
 * being freed in --leak-permille of the cases, so the leaked blocks end up scattered
 * between live and freed ones and pin the pages they sit in. Each round also grows each of
 * --buffers buffers with realloc by a random 1..--grow-kb KiB and writes the new part (a
 * log or a string being appended to). The leaked set and the buffers only grow.
 *
 * rss_leaked_kb is the resident set at the end of the last round, with everything still
 * held; leaked_kb the bytes leaked. The program then frees everything (the blocks it had
 * "leaked" too) and reports rss_end_kb. Throughput counts mallocs, frees and reallocs of the
 * rounds, not the final clean-up. */
#define _GNU_SOURCE
#include "common.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

static const char usage[] =
    "usage: bench_leak_grow [--rounds N] [--steps N] [--ws N] [--leak-permille N]\n"
    "                       [--buffers N] [--grow-kb N] [--min B] [--max B] [--seed N]\n"
    "  --rounds N         rounds (default 100; 0 measures start-up only)\n"
    "  --steps N          random-mixed steps per round (default 200000)\n"
    "  --ws N             working-set slots (default 4000)\n"
    "  --leak-permille N  share of the blocks leaving the working set that leak (default 20)\n"
    "  --buffers N        buffers grown by realloc every round (default 8)\n"
    "  --grow-kb N        largest growth of a buffer per round in KiB (default 64)\n"
    "  --min/--max B      block sizes, uniform in [min,max] (default 16..1024)\n"
    "  --seed N           PRNG seed (default 1)\n";

typedef struct {
    unsigned char **blocks;
    uint64_t count, capacity;
} block_list;

static uint64_t list_push(block_list *list, unsigned char *block) {
    uint64_t ops = 0;
    if (list->count == list->capacity) {
        list->capacity = list->capacity ? 2 * list->capacity : 1024;
        list->blocks =
            (unsigned char **)hb_realloc(list->blocks, list->capacity * sizeof *list->blocks);
        ops = 1;
    }
    list->blocks[list->count++] = block;
    return ops;
}

int main(int argc, char **argv) {
    hb_init("bench_leak_grow", usage);
    uint64_t rounds = 100, steps = 200000, ws = 4000, leak_permille = 20, buffers = 8;
    uint64_t grow_kb = 64, min_size = 16, max_size = 1024, seed = 1;
    hb_option opts[] = {
        {"--rounds", HB_OPT_U64, &rounds, false, false},
        {"--steps", HB_OPT_U64, &steps, false, false},
        {"--ws", HB_OPT_U64, &ws, false, false},
        {"--leak-permille", HB_OPT_U64, &leak_permille, false, false},
        {"--buffers", HB_OPT_U64, &buffers, false, false},
        {"--grow-kb", HB_OPT_U64, &grow_kb, false, false},
        {"--min", HB_OPT_U64, &min_size, false, false},
        {"--max", HB_OPT_U64, &max_size, false, false},
        {"--seed", HB_OPT_U64, &seed, false, false},
    };
    hb_parse_flags(argc, argv, opts, sizeof opts / sizeof opts[0]);
    hb_check_range("--rounds", rounds, 0, 1u << 20);
    hb_check_range("--ws", ws, 1, HB_MAX_WORKING_SET);
    hb_check_range("--leak-permille", leak_permille, 0, 1000);
    hb_check_range("--buffers", buffers, 0, 1u << 16);
    hb_check_range("--grow-kb", grow_kb, 1, 1u << 20);
    hb_check_size_range(min_size, max_size);
    hb_check_range("--min", min_size, HB_SIZED_MIN, HB_MAX_BLOCK_SIZE);

    unsigned char **slots = calloc(ws, sizeof *slots);
    unsigned char **buffer = calloc(buffers ? buffers : 1, sizeof *buffer);
    uint64_t *buffer_size = calloc(buffers ? buffers : 1, sizeof *buffer_size);
    if (!slots || !buffer || !buffer_size) hb_runtime_error("cannot allocate the slot arrays");
    block_list leaked = {0};
    hb_rng rng;
    hb_rng_seed(&rng, seed);
    uint64_t checksum = HB_CHECKSUM_INIT, mallocs = 0, frees = 0, reallocs = 0, leaked_bytes = 0;

    hb_timer timer;
    hb_timer_start(&timer, HB_CPU_PROCESS);
    for (unsigned c = 0; c < hb_chunks(); c++) {
        uint64_t to = hb_chunk_bound(rounds, c + 1, 1);
        for (uint64_t round = hb_chunk_bound(rounds, c, 1); round < to; round++) {
            for (uint64_t i = 0; i < steps; i++) {
                uint64_t slot = hb_rng_below(&rng, ws);
                unsigned char *block = slots[slot];
                if (!block) {
                    uint64_t size = hb_rng_between(&rng, min_size, max_size);
                    block = hb_malloc(size);
                    hb_fill_sized(block, size);
                    slots[slot] = block;
                    mallocs++;
                    hb_checksum_add(&checksum, hb_malloc_event(slot, size));
                } else if (hb_rng_below(&rng, 1000) < leak_permille) {
                    leaked_bytes += hb_verify_sized(block);
                    reallocs += list_push(&leaked, block);
                    slots[slot] = NULL;
                    hb_checksum_add(&checksum, hb_free_event(slot) | 1);
                } else {
                    hb_verify_sized(block);
                    free(block);
                    slots[slot] = NULL;
                    frees++;
                    hb_checksum_add(&checksum, hb_free_event(slot));
                }
            }
            for (uint64_t b = 0; b < buffers; b++) {
                uint64_t old_size = buffer_size[b];
                uint64_t size = old_size + 1024 * hb_rng_between(&rng, 1, grow_kb);
                buffer[b] = hb_realloc(buffer[b], size);
                if (old_size && buffer[b][old_size - 1] != hb_block_tag(b + old_size))
                    hb_block_overwritten(buffer[b], old_size);
                memset(buffer[b] + old_size, 0, size - old_size - 1);
                buffer[b][size - 1] = hb_block_tag(b + size);
                buffer_size[b] = size;
                reallocs++;
                hb_checksum_add(&checksum, hb_malloc_event(b, size >> 10) ^ (1ull << 62));
            }
        }
        hb_timer_lap(&timer, mallocs + frees + reallocs);
    }
    double seconds = hb_timer_stop(&timer);
    hb_report_timer(&timer);
    long rss_leaked = hb_rss_kb();

    for (uint64_t i = 0; i < leaked.count; i++)
        free(leaked.blocks[i]);
    free(leaked.blocks);
    for (uint64_t slot = 0; slot < ws; slot++)
        free(slots[slot]);
    for (uint64_t b = 0; b < buffers; b++)
        free(buffer[b]);
    free(slots);
    free(buffer);
    free(buffer_size);

    hb_print_result_and_rss_end(mallocs + frees + reallocs, seconds, hb_checksum_finish(checksum));
    printf("mallocs=%" PRIu64 "\nfrees=%" PRIu64 "\nreallocs=%" PRIu64
           "\nrss_leaked_kb=%ld\nleaked_kb=%" PRIu64 "\nleaked_blocks=%" PRIu64 "\nrounds=%" PRIu64
           "\nsteps=%" PRIu64 "\nws=%" PRIu64 "\nleak_permille=%" PRIu64 "\nbuffers=%" PRIu64
           "\ngrow_kb=%" PRIu64 "\nmin=%" PRIu64 "\nmax=%" PRIu64 "\nseed=%" PRIu64 "\n",
           mallocs, frees, reallocs, rss_leaked, leaked_bytes >> 10, leaked.count, rounds, steps,
           ws, leak_permille, buffers, grow_kb, min_size, max_size, seed);
    hb_flush_stdout();
    return 0;
}
