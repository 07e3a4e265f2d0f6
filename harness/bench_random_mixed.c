/* bench_random_mixed: a working set of ws slots; each iteration a seeded PRNG picks a slot,
 * an occupied slot is freed, an empty one gets malloc(uniform size in [min,max]). */
#define _GNU_SOURCE
#include "common.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "usage: bench_random_mixed --iters N [--min B] [--max B] [--ws N] [--seed N]\n"
    "                          [--extra-work N] [--extra-ops N]\n"
    "   or: bench_random_mixed ITERS WS SEED   (sizes from HAKMEM_BENCH_MIN_SIZE,\n"
    "       HAKMEM_BENCH_MAX_SIZE; HAKMEM_BENCH_C7_ONLY=1 means 1024 B only)\n"
    "  --iters N       iterations, one malloc or free each (0 measures start-up only)\n"
    "  --min/--max B   block sizes, uniform in [min,max] (default 16..1024)\n"
    "  --ws N          working-set slots (default 400)\n"
    "  --seed N        PRNG seed (default 1)\n"
    "  --extra-work N  N units of dummy work per op, N may be fractional (default 0)\n"
    "  --extra-ops N   a burst of N units every 1024 ops, a steady cost (default 0)\n";

typedef struct {
    uint64_t iters, min_size, max_size, ws, seed;
    double extra_work;
    uint64_t extra_ops;
} config;

static uint64_t env_u64(const char *name, uint64_t fallback) {
    const char *text = getenv(name);
    return text ? hb_parse_u64(name, text) : fallback;
}

/* The positional form used in the older notes: ITERS WS SEED, sizes from the environment. */
static void parse_positional(int argc, char **argv, config *cfg) {
    if (argc != 4)
        hb_usage_error("positional form takes exactly ITERS WS SEED, got %d arguments", argc - 1);
    cfg->iters = hb_parse_u64("ITERS", argv[1]);
    cfg->ws = hb_parse_u64("WS", argv[2]);
    cfg->seed = hb_parse_u64("SEED", argv[3]);
    cfg->min_size = env_u64("HAKMEM_BENCH_MIN_SIZE", cfg->min_size);
    cfg->max_size = env_u64("HAKMEM_BENCH_MAX_SIZE", cfg->max_size);
    const char *c7_only = getenv("HAKMEM_BENCH_C7_ONLY");
    if (c7_only && strcmp(c7_only, "1") == 0) {
        cfg->min_size = 1024;
        cfg->max_size = 1024;
    } else if (c7_only && strcmp(c7_only, "0") != 0 && c7_only[0] != '\0') {
        hb_usage_error("HAKMEM_BENCH_C7_ONLY must be 0 or 1, got '%s'", c7_only);
    }
}

static void parse_args(int argc, char **argv, config *cfg) {
    if (argc > 1 && argv[1][0] != '-') {
        parse_positional(argc, argv, cfg);
        return;
    }
    hb_option opts[] = {
        {"--iters", HB_OPT_U64, &cfg->iters, true, false},
        {"--min", HB_OPT_U64, &cfg->min_size, false, false},
        {"--max", HB_OPT_U64, &cfg->max_size, false, false},
        {"--ws", HB_OPT_U64, &cfg->ws, false, false},
        {"--seed", HB_OPT_U64, &cfg->seed, false, false},
        {"--extra-work", HB_OPT_DOUBLE, &cfg->extra_work, false, false},
        {"--extra-ops", HB_OPT_U64, &cfg->extra_ops, false, false},
    };
    hb_parse_flags(argc, argv, opts, sizeof opts / sizeof opts[0]);
}

int main(int argc, char **argv) {
    hb_init("bench_random_mixed", usage);
    config cfg = {.min_size = 16, .max_size = 1024, .ws = 400, .seed = 1};
    parse_args(argc, argv, &cfg);
    hb_check_size_range(cfg.min_size, cfg.max_size);
    hb_check_range("--ws", cfg.ws, 1, HB_MAX_WORKING_SET);
    if (cfg.extra_work > 1e6)
        hb_usage_error("--extra-work must be at most 1000000, got %g", cfg.extra_work);
    hb_check_range("--extra-ops", cfg.extra_ops, 0, 1000000);

    hb_extra_work work;
    hb_extra_work_init(&work, cfg.extra_work, cfg.extra_ops);
    hb_mixed mixed;
    hb_mixed_init(&mixed, cfg.ws, cfg.min_size, cfg.max_size, cfg.seed);

    hb_timer timer;
    hb_timer_start(&timer, HB_CPU_PROCESS);
    hb_mixed_run_chunked(&mixed, cfg.iters, &work, &timer);
    double seconds = hb_timer_stop(&timer);
    hb_report_timer(&timer);

    uint64_t checksum = hb_checksum_finish(mixed.checksum);
    hb_mixed_destroy(&mixed);
    hb_extra_work_finish(&work);

    hb_print_result(cfg.iters, seconds, checksum);
    printf("iters=%" PRIu64 "\nws=%" PRIu64 "\nmin=%" PRIu64 "\nmax=%" PRIu64 "\nseed=%" PRIu64
           "\nextra_work=%.6f\nextra_ops=%" PRIu64 "\n",
           cfg.iters, cfg.ws, cfg.min_size, cfg.max_size, cfg.seed, hb_extra_work_units(&work),
           cfg.extra_ops);
    hb_flush_stdout();
    return 0;
}
