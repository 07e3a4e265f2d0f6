/* Shared pieces of the harness programs: strict argument parsing, the seeded PRNG, the
 * op-sequence checksum, timing, extra work, the random-mixed core loop and the stdout
 * contract (`Throughput = N ops/s` then key=value lines). Every program links common.o so
 * that the same logic exists once and behaves identically under every allocator. */
#ifndef HARNESS_COMMON_H
#define HARNESS_COMMON_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* C++ programs (bench_larson_cxx) include this header too: C linkage, no C-only keywords. */
#ifdef __cplusplus
#define HB_NORETURN [[noreturn]]
extern "C" {
#else
#define HB_NORETURN _Noreturn
#endif

/* Exit statuses: 0 success, 1 runtime failure (malloc returned NULL, corruption, thread
 * start failed), 2 bad arguments. */
enum { HB_EXIT_RUNTIME = 1, HB_EXIT_USAGE = 2 };

/* Sizes are kept in 32-bit slots; 1 GiB is far beyond anything a benchmark here needs. */
#define HB_MAX_BLOCK_SIZE (1ull << 30)
/* Slot numbers go into bits 32..62 of a checksum event; 64 Mi slots is already 768 MiB. */
#define HB_MAX_WORKING_SET (1ull << 26)

/* ---- errors and argument parsing ---- */

/* Set once in main: the program name used as prefix of every error line, and the usage
 * text printed by --help. */
void hb_init(const char *program_name, const char *usage);

/* One line on stderr `bench_xxx: <message> (see --help)`, exit status 2. */
HB_NORETURN void hb_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* One line on stderr `bench_xxx: <message>`, exit status 1. */
HB_NORETURN void hb_runtime_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

typedef enum { HB_OPT_U64, HB_OPT_DOUBLE } hb_option_kind;

typedef struct {
    const char *flag; /* "--ws" */
    hb_option_kind kind;
    void *target; /* uint64_t * or double *, holding the default on entry */
    bool required;
    bool seen; /* set by hb_parse_flags */
} hb_option;

/* Parses `--flag value` and `--flag=value` against opts; handles --help (usage on stdout,
 * exit 0). Unknown, repeated, valueless or missing required flags, stray positional
 * arguments and malformed numbers are usage errors. */
void hb_parse_flags(int argc, char **argv, hb_option *opts, size_t n_opts);

/* Strict numbers: decimal digits only (no sign, no spaces, no trailing garbage), must fit.
 * `what` names the flag or variable in the error message. */
uint64_t hb_parse_u64(const char *what, const char *text);
double hb_parse_nonneg_double(const char *what, const char *text);

void hb_check_range(const char *what, uint64_t value, uint64_t lo, uint64_t hi);
/* min >= 1, max <= HB_MAX_BLOCK_SIZE, min <= max. */
void hb_check_size_range(uint64_t min_size, uint64_t max_size);

/* ---- PRNG: xorshift64*, seeded through splitmix64 so that any seed (even 0) works ---- */

typedef struct {
    uint64_t state;
} hb_rng;

static inline uint64_t hb_mix64(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

static inline void hb_rng_seed(hb_rng *rng, uint64_t seed) {
    uint64_t s = hb_mix64(seed + 0x9e3779b97f4a7c15ull);
    rng->state = s ? s : 0x9e3779b97f4a7c15ull;
}

static inline uint64_t hb_rng_next(hb_rng *rng) {
    uint64_t x = rng->state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    rng->state = x;
    return x * 0x2545f4914f6cdd1dull;
}

/* Uniform in [0, n) by multiply-high: no division on the hot path. */
static inline uint64_t hb_rng_below(hb_rng *rng, uint64_t n) {
    return (uint64_t)(((unsigned __int128)hb_rng_next(rng) * n) >> 64);
}

/* Uniform in [lo, hi]. */
static inline uint64_t hb_rng_between(hb_rng *rng, uint64_t lo, uint64_t hi) {
    return lo + hb_rng_below(rng, hi - lo + 1);
}

/* Log-uniform in [lo, hi] (1 <= lo <= hi): a power-of-two range first, each equally likely,
 * then uniform inside it; as many 40 KiB blocks as 40 MiB ones. */
static inline uint64_t hb_rng_log_uniform(hb_rng *rng, uint64_t lo, uint64_t hi) {
    unsigned lo_bit = 63 - (unsigned)__builtin_clzll(lo);
    unsigned hi_bit = 63 - (unsigned)__builtin_clzll(hi);
    unsigned bit = lo_bit + (unsigned)hb_rng_below(rng, hi_bit - lo_bit + 1);
    uint64_t from = 1ull << bit, to = bit >= 63 ? UINT64_MAX : (2ull << bit) - 1;
    if (from < lo) from = lo;
    if (to > hi) to = hi;
    return hb_rng_between(rng, from, to);
}

/* Seeds the stream of one thread in one round (or generation): every (seed, a, b) gets its
 * own sequence, so a thread's ops do not depend on which threads ran before it. */
static inline void hb_rng_seed_stream(hb_rng *rng, uint64_t seed, uint64_t a, uint64_t b) {
    hb_rng_seed(rng, seed ^ hb_mix64(hb_mix64(a + 1) + b));
}

/* ---- checksum of the op sequence (sizes and slot choices, never pointers) ---- */

#define HB_CHECKSUM_INIT 0xcbf29ce484222325ull

static inline void hb_checksum_add(uint64_t *checksum, uint64_t event) {
    *checksum = (*checksum ^ event) * 0x100000001b3ull;
}

/* Op events: the kind in the top bit, the slot (or index) and the size below it. */
static inline uint64_t hb_malloc_event(uint64_t slot, uint64_t size) {
    return (1ull << 63) | (slot << 32) | size;
}
static inline uint64_t hb_free_event(uint64_t slot) {
    return slot << 32;
}

/* Threaded programs: sum of finalised per-thread checksums, so thread order never matters. */
static inline uint64_t hb_checksum_finish(uint64_t checksum) {
    return hb_mix64(checksum);
}

/* ---- block contents: written after malloc, verified before free ---- */

static inline unsigned char hb_block_tag(uint64_t slot) {
    return (unsigned char)(slot * 131u + 7u);
}
/* Inline: they run once per op, and a call each would add ~10 instructions of harness
 * overhead to every malloc/free measured (callgrind, mixed). */
static inline void hb_fill_block(unsigned char *block, uint64_t size, unsigned char tag) {
    block[0] = tag;
    block[size - 1] = tag;
}
HB_NORETURN void hb_block_overwritten(const unsigned char *block, uint64_t size);
/* Exits with a runtime error when the first or last byte was overwritten. */
static inline void hb_verify_block(const unsigned char *block, uint64_t size, unsigned char tag) {
    if (__builtin_expect(block[0] != tag || block[size - 1] != tag, 0))
        hb_block_overwritten(block, size);
}

/* Blocks that travel between threads carry their own size: the first 4 bytes hold it and
 * the last byte a tag derived from it, so whichever thread frees a block can check it. */
#define HB_SIZED_MIN 8

static inline void hb_fill_sized(unsigned char *block, uint64_t size) {
    uint32_t size32 = (uint32_t)size;
    memcpy(block, &size32, sizeof size32);
    block[size - 1] = hb_block_tag(size);
}
/* Returns the block's size; exits with a runtime error when the block was overwritten. */
static inline uint64_t hb_verify_sized(const unsigned char *block) {
    uint32_t size32;
    memcpy(&size32, block, sizeof size32);
    if (__builtin_expect(size32 < HB_SIZED_MIN || block[size32 - 1] != hb_block_tag(size32), 0))
        hb_block_overwritten(block, size32);
    return size32;
}

/* ---- allocation and threads ---- */

HB_NORETURN void hb_alloc_failed(const char *function, uint64_t size);

static inline unsigned char *hb_malloc(uint64_t size) {
    unsigned char *block = (unsigned char *)malloc(size);
    if (__builtin_expect(!block, 0)) hb_alloc_failed("malloc", size);
    return block;
}
static inline unsigned char *hb_realloc(void *block, uint64_t size) {
    unsigned char *moved = (unsigned char *)realloc(block, size);
    if (__builtin_expect(!moved, 0)) hb_alloc_failed("realloc", size);
    return moved;
}

/* pthread_create or a runtime error. Detached threads are never joined.
 * HB_PIN_THREADS=1 (environment; `ab --launch pin-threads`): a thread the main thread starts
 * is pinned to the next CPU of the process's affinity mask, round-robin (the k-th started
 * thread to the (k mod n)-th allowed CPU), so the scheduler cannot put a producer and its
 * consumer on one CPU in one run and on two in the next; a thread a worker starts inherits
 * its creator's CPU (Linux's default), so a chain of threads stays where it began. */
void hb_start_thread(pthread_t *thread, void *(*fn)(void *), void *arg);
void hb_start_detached_thread(void *(*fn)(void *), void *arg);

/* ---- extra work: injected cost per op, a known slowdown for calibration ----
 * Two kinds, both dependent multiply-adds on a chain carried from op to op:
 * - units (--extra-work N): N rounds per op, N fractional; the fraction is dithered (a round
 *   on some ops, none on others), whose branch pattern makes small N cost more than its
 *   share, and a round or two per op can hide in the gaps of out-of-order execution;
 * - ops (--extra-ops N): one burst of N rounds every HB_EXTRA_OPS_PERIOD ops. A burst of
 *   hundreds of rounds is far longer than the reorder window, so its latency cannot hide.
 *   hb_mixed_run runs the loop in chunks of a period with a burst between them, so the loop
 *   itself is the same with and without bursts (the instruction gate counts it). A steady
 *   cost that grows in fine steps with N: docs/measuring.md has what N cost here. */

#define HB_EXTRA_OPS_PERIOD 1024

typedef struct {
    uint64_t units_q16; /* N in 16.16 fixed point */
    uint64_t carry_q16; /* dithering remainder, so the mean over ops is exactly units_q16 */
    uint64_t ops;       /* rounds per burst */
    uint64_t chain;
} hb_extra_work;

void hb_extra_work_init(hb_extra_work *work, double units, uint64_t ops);
double hb_extra_work_units(const hb_extra_work *work);
/* Publishes the chain value so the compiler must compute it. */
void hb_extra_work_finish(const hb_extra_work *work);

static inline uint64_t hb_extra_rounds(uint64_t m, uint64_t rounds) {
    for (uint64_t i = 0; i < rounds; i++) {
        m = m * 0x9e3779b97f4a7c15ull + 1;
        __asm__ volatile("" : "+r"(m));
    }
    return m;
}

/* The dithered units after each op; the bursts come between chunks of ops (hb_mixed_run),
 * so a loop without them carries no trace of them: the instruction gate counts it too. */
static inline void hb_extra_work_op(hb_extra_work *work) {
    uint64_t total = work->carry_q16 + work->units_q16;
    uint64_t rounds = total >> 16;
    work->carry_q16 = total & 0xffff;
    work->chain = hb_extra_rounds(work->chain, rounds);
}

/* ---- injected cost of threaded programs: known work, and known contention ----
 * Between periods of HB_EXTRA_OPS_PERIOD ops (never per op, so a loop without injection is
 * unchanged and the instruction gate counts it the same) a thread does a burst of
 * `extra_ops` rounds (--extra-ops: work, which every clock sees), then takes a mutex that all
 * threads of the program share and does `hold_ops` rounds while holding it (--hold-ops: a
 * lock held longer; the other threads sleep on it, a wait that CPU time does not see). */
typedef struct {
    uint64_t extra_ops, hold_ops, chain;
} hb_inject;

void hb_inject_period(hb_inject *inject);
/* Where the period holding op i ends, at most `to`. */
static inline uint64_t hb_period_end(uint64_t i, uint64_t to) {
    uint64_t end = (i / HB_EXTRA_OPS_PERIOD + 1) * HB_EXTRA_OPS_PERIOD;
    return end < to ? end : to;
}
/* After the ops up to `done`: the injection when a whole period just ended. */
static inline void hb_inject_after(hb_inject *inject, uint64_t done) {
    if ((inject->extra_ops | inject->hold_ops) && done % HB_EXTRA_OPS_PERIOD == 0)
        hb_inject_period(inject);
}

/* ---- the random-mixed core shared by random_mixed, mid_large_mt and soak ---- */

typedef struct {
    uint64_t ws;
    uint64_t min_size, max_size;
    unsigned char **blocks; /* NULL = empty slot */
    uint32_t *sizes;
    hb_rng rng;
    uint64_t checksum;
} hb_mixed;

void hb_mixed_init(hb_mixed *mixed, uint64_t ws, uint64_t min_size, uint64_t max_size,
                   uint64_t seed);
/* Runs `iterations` iterations (one op each: free an occupied slot or fill an empty one),
 * each followed by the extra work (zero units cost one predictable branch). */
void hb_mixed_run(hb_mixed *mixed, uint64_t iterations, hb_extra_work *work);
/* Frees every live block and the slot arrays (not part of the timed region). */
void hb_mixed_destroy(hb_mixed *mixed);

/* ---- timing and output ---- */

double hb_now(void);            /* CLOCK_MONOTONIC seconds */
double hb_cpu_now(void);        /* CLOCK_PROCESS_CPUTIME_ID seconds: every thread of the process */
double hb_thread_cpu_now(void); /* CLOCK_THREAD_CPUTIME_ID seconds: the calling thread */

long hb_rss_kb(void); /* current resident set from /proc/self/statm, -1 if unreadable */

/* Threaded programs: every thread stamps its own start (after the start barrier) and end; the
 * timed region runs from the earliest start to the latest end. The main thread's clock would
 * be wrong whenever it is descheduled after the barrier (more threads than cores). */
typedef struct {
    double start, end;
} hb_interval;

static inline hb_interval hb_interval_union(hb_interval a, hb_interval b) {
    return (hb_interval){a.start < b.start ? a.start : b.start, a.end > b.end ? a.end : b.end};
}

/* ---- active time: each thread's time in the timed region less its run-queue wait ----
 * A thread's time is on a CPU, blocked (asleep on a lock, a condition variable, a pipe) or
 * runnable but waiting for a CPU. The first two are the program's own: work, and waiting
 * for its other threads (contention); the third is mostly other processes holding the CPU,
 * the noise of a shared machine. The kernel keeps the third per thread (schedstat's
 * run_delay, /proc/thread-self/schedstat, CONFIG_SCHED_INFO), so a thread's active time is
 * its wall time in the region less its run_delay, and the run's active_seconds= the sum
 * over its threads. Per-thread timers (HB_CPU_THREAD) account their thread by themselves; a
 * program timed by its main thread accounts each worker with hb_thread_begin/hb_thread_end
 * (the main thread, asleep in a join, is then not counted); a program with neither prints
 * no active time (single-threaded programs: their CPU time is what `ab` judges).
 * A thread that waits for another by spinning (a sched_yield loop until a ring has room or
 * an entry) burns CPU for as long as its partner is held up, by other processes too; it
 * times the spin on its CPU clock (hb_spin_begin/hb_spin_end, once per wait, not per turn)
 * and that CPU time is taken off its active time: what the partner did meanwhile is in the
 * partner's own active time. (A thread asleep on a lock is not spinning: that wait stays.) */
typedef struct {
    double wall;
    uint64_t run_delay_ns; /* UINT64_MAX: schedstat unreadable */
} hb_thread_mark;

/* The calling thread's wall clock and run-queue wait now. */
hb_thread_mark hb_thread_begin(void);
/* Adds the calling thread's time since `begin`, in which it did `ops` ops, to the run's
 * active time (thread-safe). Each thread's rate, ops per active second, is kept too: the
 * run also prints their median (active_rate_median=), a figure that a long sleep of a few
 * threads (a lock holder preempted) does not move, while a cost every thread pays does. */
void hb_thread_end(hb_thread_mark begin, uint64_t ops);

/* ---- the timed region: wall and CPU time, in chunks ----
 * A timer measures one timed region on two clocks, CLOCK_MONOTONIC and a CPU clock, read at
 * its start, at the end of each chunk (hb_timer_lap) and at its stop, never per op. The CPU
 * clock does not count the time the program sat descheduled waiting for a CPU, which on a
 * shared machine is most of the noise of a wall-clock figure. It is either the process's
 * (HB_CPU_PROCESS: a region timed by the main thread, every thread's CPU counted, the
 * allocator's own threads too) or the calling thread's (HB_CPU_THREAD: one timer per worker
 * thread, timed inside the worker; their CPU seconds add up).
 *
 * HB_CHUNKS=K (environment, 1..HB_MAX_CHUNKS; unset: 1): a program with a natural loop runs
 * it as K chunks of (nearly) equal ops, bounds from hb_chunk_bound, and laps its timer after
 * each. The run then also reports each chunk's rate and their medians, a per-run figure that
 * a burst of other load hitting one chunk does not move. The clocks are read between chunks
 * only: no per-op cost. A program without a natural loop laps once (one chunk). The chunks
 * weigh alike, so the median is the steady rate: a first chunk slowed by first touches of
 * fresh memory counts no more than any other.
 * HB_SPIN_MS=N (environment, 0..10000; unset: 0): hb_timer_start first keeps the CPU busy
 * for N ms, untimed, so the region starts on a CPU the program already holds. */

#define HB_MAX_CHUNKS 256

typedef enum { HB_CPU_PROCESS, HB_CPU_THREAD } hb_cpu_clock;

typedef struct {
    hb_cpu_clock clock;
    double start, end;         /* wall clock of the region (end: at hb_timer_stop) */
    double cpu_start, cpu_end; /* its CPU clock */
    hb_thread_mark mark;       /* the timing thread at hb_timer_start (active time) */
    double active, run_delay;  /* at hb_timer_stop: its active time and run-queue wait */
    double spin;               /* CPU seconds spent spin-waiting (hb_spin_end) */
    double lap_wall, lap_cpu;  /* where the current chunk began */
    uint64_t lap_ops;          /* the region's ops before the current chunk */
    unsigned chunks;           /* chunks recorded */
    uint64_t chunk_ops[HB_MAX_CHUNKS];
    double chunk_wall[HB_MAX_CHUNKS], chunk_cpu[HB_MAX_CHUNKS];
} hb_timer;

/* A spin-wait of the thread that owns `timer`: its CPU clock before and after. */
static inline double hb_spin_begin(void) {
    return hb_thread_cpu_now();
}
static inline void hb_spin_end(hb_timer *timer, double began) {
    timer->spin += hb_thread_cpu_now() - began;
}

/* K of HB_CHUNKS (1 when unset); read by hb_init. */
unsigned hb_chunks(void);
/* Where chunk `chunk` (0..K) of a loop of `total` units begins: total * chunk / K rounded
 * down to a multiple of `align` (>= 1; the last bound is total itself). A program whose
 * bursts come every `align` units (--extra-ops) keeps them where they were. */
uint64_t hb_chunk_bound(uint64_t total, unsigned chunk, uint64_t align);
/* Spins HB_SPIN_MS, then reads both clocks. */
void hb_timer_start(hb_timer *timer, hb_cpu_clock clock);
/* Ends the current chunk where the region has done `ops_done` ops in all (a count since
 * hb_timer_start, not since the last lap); a chunk of no ops is not recorded. */
void hb_timer_lap(hb_timer *timer, uint64_t ops_done);
/* Ends the region; returns its wall seconds. */
double hb_timer_stop(hb_timer *timer);
static inline hb_interval hb_timer_interval(const hb_timer *timer) {
    return (hb_interval){timer->start, timer->end};
}
/* Adds a stopped timer to the run's figures, which hb_print_result prints: cpu_seconds= (the
 * sum over the timers), cpu_clock=, active_seconds= and run_delay_seconds= (see active time
 * above; absent when schedstat is unreadable), and with HB_CHUNKS the chunk lines (chunk j of the
 * run is chunk j of every timer: their ops added, over the longest wall time and the summed CPU
 * time). Call it from one thread, after the workers are joined. A program that runs no
 * timer prints none of these lines. */
void hb_report_timer(const hb_timer *timer);

/* hb_mixed_run in the chunks of hb_chunks(), lapping `timer` after each; with bursts
 * (--extra-ops) the bounds fall on whole burst periods, so the bursts stay where they were. */
void hb_mixed_run_chunked(hb_mixed *mixed, uint64_t iterations, hb_extra_work *work,
                          hb_timer *timer);

/* Prints `key=N` with the current resident set in KiB (rss_end_kb= and phase figures). */
void hb_print_rss(const char *key);

/* ops per second as an integer; 0 when no time passed (an empty run). */
uint64_t hb_rate(uint64_t ops, double seconds);

/* Prints `Throughput = N ops/s`, ops=, seconds=, checksum=, maxrss_kb= (VmHWM: this
 * program's own peak RSS, not the launcher's), malloc_impl=; after hb_report_timer also
 * cpu_seconds=, cpu_clock=, chunks= and, when an op ran, chunk_rates=, chunk_cpu_rates= (ops per
 * wall and per CPU second of each chunk, comma-separated) and their medians chunk_rate=,
 * chunk_cpu_rate= (without HB_CHUNKS: one chunk, the whole region).
 * The program prints its own key=value lines after it and then calls hb_flush_stdout. */
void hb_print_result(uint64_t ops, double seconds, uint64_t checksum);
/* The new stress programs: hb_print_result (seconds count as 0 when no op ran, so a
 * start-up-only run reports no rate) then rss_end_kb=, the resident set now, which the
 * caller reaches after freeing everything and joining its threads. */
void hb_print_result_and_rss_end(uint64_t ops, double seconds, uint64_t checksum);
/* Flushes stdout; a failed write (closed pipe, full disk) is a runtime error. */
void hb_flush_stdout(void);

/* Minor page faults of the whole process so far (getrusage), -1 if unavailable. */
long hb_minflt(void);

#ifdef __cplusplus
}
#endif

#endif
