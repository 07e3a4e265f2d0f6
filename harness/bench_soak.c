/* bench_soak: one long random-mixed process that reports, every epoch, a line
 * `epoch=N t=S ops=N ops_s=N rss_kb=N` (flushed at once, so a watcher sees it live), then the
 * standard result lines over the whole run. --leak-kb-per-s leaks on purpose, so that a leak
 * detector can be shown to work. SIGTERM/SIGINT end the run after the current epoch line. */
#define _GNU_SOURCE
#include "common.h"

#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "usage: bench_soak (--seconds S | --epochs N) --epoch-ms N [--min B] [--max B] [--ws N]\n"
    "                  [--seed N] [--leak-kb-per-s N]\n"
    "  --seconds S        run for S seconds (may be fractional)\n"
    "  --epochs N         run N epochs\n"
    "  --epoch-ms N       epoch length; one line per epoch on stdout\n"
    "  --min/--max B      block sizes, uniform in [min,max] (default 16..1024)\n"
    "  --ws N             working-set slots (default 400)\n"
    "  --seed N           PRNG seed (default 1)\n"
    "  --leak-kb-per-s N  leak N KiB per second on purpose (default 0)\n";

/* Iterations between clock reads: ~10-100 us of work, far below any sensible epoch. */
#define CHUNK_ITERATIONS    256
#define LEAK_BLOCK_SIZE     (64 * 1024)
#define PAGE_SIZE_FOR_TOUCH 4096

static volatile sig_atomic_t stop_requested;

static void request_stop(int signo) {
    (void)signo;
    stop_requested = 1;
}

static void install_stop_handlers(void) {
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = request_stop;
    sigemptyset(&action.sa_mask);
    sigaction(SIGTERM, &action, NULL);
    sigaction(SIGINT, &action, NULL);
}

/* Allocates and touches blocks that are never freed (the pointer is dropped) until
 * `target_bytes` have leaked in total. */
static void leak_until(uint64_t *leaked_bytes, double target_bytes) {
    while ((double)*leaked_bytes < target_bytes) {
        unsigned char *block = malloc(LEAK_BLOCK_SIZE);
        if (!block)
            hb_runtime_error("malloc(%d) for the deliberate leak returned NULL", LEAK_BLOCK_SIZE);
        for (size_t offset = 0; offset < LEAK_BLOCK_SIZE; offset += PAGE_SIZE_FOR_TOUCH)
            block[offset] = 1;
        __asm__ volatile("" : : "r"(block) : "memory");
        *leaked_bytes += LEAK_BLOCK_SIZE;
    }
}

int main(int argc, char **argv) {
    hb_init("bench_soak", usage);
    uint64_t epochs = 0, epoch_ms = 0, min_size = 16, max_size = 1024, ws = 400, seed = 1;
    double run_seconds = 0, leak_kb_per_s = 0;
    hb_option opts[] = {
        {"--seconds", HB_OPT_DOUBLE, &run_seconds, false, false},
        {"--epochs", HB_OPT_U64, &epochs, false, false},
        {"--epoch-ms", HB_OPT_U64, &epoch_ms, true, false},
        {"--min", HB_OPT_U64, &min_size, false, false},
        {"--max", HB_OPT_U64, &max_size, false, false},
        {"--ws", HB_OPT_U64, &ws, false, false},
        {"--seed", HB_OPT_U64, &seed, false, false},
        {"--leak-kb-per-s", HB_OPT_DOUBLE, &leak_kb_per_s, false, false},
    };
    hb_parse_flags(argc, argv, opts, sizeof opts / sizeof opts[0]);
    bool by_seconds = opts[0].seen, by_epochs = opts[1].seen;
    if (by_seconds == by_epochs) hb_usage_error("give exactly one of --seconds and --epochs");
    hb_check_range("--epoch-ms", epoch_ms, 1, 3600 * 1000);
    hb_check_size_range(min_size, max_size);
    hb_check_range("--ws", ws, 1, HB_MAX_WORKING_SET);
    if (leak_kb_per_s > 1e7)
        hb_usage_error("--leak-kb-per-s must be at most 10000000, got %g", leak_kb_per_s);

    install_stop_handlers();
    hb_extra_work no_work;
    hb_extra_work_init(&no_work, 0, 0);
    hb_mixed mixed;
    hb_mixed_init(&mixed, ws, min_size, max_size, seed);
    uint64_t total_ops = 0, epochs_done = 0, leaked_bytes = 0;

    hb_timer timer; /* CPU time of the epochs; one chunk (the epochs are the soak's own) */
    hb_timer_start(&timer, HB_CPU_PROCESS);
    double start = timer.start, now = start;
    bool more_epochs = by_epochs ? epochs > 0 : run_seconds > 0;
    while (more_epochs) {
        double epoch_start = now, epoch_end = epoch_start + (double)epoch_ms / 1000.0;
        if (by_seconds && epoch_end > start + run_seconds) epoch_end = start + run_seconds;
        uint64_t epoch_ops = 0;
        do {
            hb_mixed_run(&mixed, CHUNK_ITERATIONS, &no_work);
            epoch_ops += CHUNK_ITERATIONS;
            now = hb_now();
            leak_until(&leaked_bytes, leak_kb_per_s * 1024.0 * (now - start));
        } while (now < epoch_end && !stop_requested);
        epochs_done++;
        total_ops += epoch_ops;
        printf("epoch=%" PRIu64 " t=%.3f ops=%" PRIu64 " ops_s=%" PRIu64 " rss_kb=%ld\n",
               epochs_done, now - start, epoch_ops, hb_rate(epoch_ops, now - epoch_start),
               hb_rss_kb());
        hb_flush_stdout();
        more_epochs =
            !stop_requested && (by_epochs ? epochs_done < epochs : now - start < run_seconds);
    }
    double seconds = now - start;
    hb_timer_lap(&timer, total_ops);
    hb_timer_stop(&timer);
    hb_report_timer(&timer);

    uint64_t checksum = hb_checksum_finish(mixed.checksum);
    long final_rss_kb = hb_rss_kb();
    hb_mixed_destroy(&mixed);

    hb_print_result(total_ops, seconds, checksum);
    printf("epochs=%" PRIu64 "\nepoch_ms=%" PRIu64 "\nws=%" PRIu64 "\nmin=%" PRIu64 "\nmax=%" PRIu64
           "\nseed=%" PRIu64 "\nleak_kb_per_s=%.3f\nleaked_kb=%" PRIu64
           "\nrss_kb=%ld\nstopped_by_signal=%d\n",
           epochs_done, epoch_ms, ws, min_size, max_size, seed, leak_kb_per_s, leaked_bytes / 1024,
           final_rss_kb, stop_requested ? 1 : 0);
    hb_flush_stdout();
    return 0;
}
