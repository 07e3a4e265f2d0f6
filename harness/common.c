#define _GNU_SOURCE
#include "common.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

static const char *program_name = "bench";
static const char *usage_text = "";
static unsigned chunk_count = 1; /* HB_CHUNKS */
static double spin_seconds;      /* HB_SPIN_MS / 1000 */
static bool pin_threads;         /* HB_PIN_THREADS */

static uint64_t env_in_range(const char *name, uint64_t fallback, uint64_t lo, uint64_t hi) {
    const char *text = getenv(name);
    if (!text) return fallback;
    uint64_t value = hb_parse_u64(name, text);
    hb_check_range(name, value, lo, hi);
    return value;
}

void hb_init(const char *name, const char *usage) {
    program_name = name;
    usage_text = usage;
    chunk_count = (unsigned)env_in_range("HB_CHUNKS", 1, 1, HB_MAX_CHUNKS);
    spin_seconds = (double)env_in_range("HB_SPIN_MS", 0, 0, 10000) / 1000.0;
    pin_threads = env_in_range("HB_PIN_THREADS", 0, 0, 1) == 1;
}

static void print_error_line(const char *fmt, va_list ap, const char *suffix) {
    fprintf(stderr, "%s: ", program_name);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "%s\n", suffix);
}

void hb_usage_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    print_error_line(fmt, ap, " (see --help)");
    va_end(ap);
    exit(HB_EXIT_USAGE);
}

void hb_runtime_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    print_error_line(fmt, ap, "");
    va_end(ap);
    exit(HB_EXIT_RUNTIME);
}

/* ---- numbers ---- */

static bool all_digits(const char *text) {
    if (*text == '\0') return false;
    for (const char *c = text; *c; c++)
        if (*c < '0' || *c > '9') return false;
    return true;
}

uint64_t hb_parse_u64(const char *what, const char *text) {
    /* strtoull alone accepts "-1" (wrapping), leading spaces and "+": check digits first. */
    if (!all_digits(text)) hb_usage_error("%s: '%s' is not a non-negative integer", what, text);
    errno = 0;
    char *end = NULL;
    unsigned long long value = strtoull(text, &end, 10);
    if (errno == ERANGE || *end != '\0') hb_usage_error("%s: '%s' is out of range", what, text);
    return (uint64_t)value;
}

/* Digits with at most one '.': no sign, exponent, hex, inf or nan. */
static bool plain_decimal(const char *text) {
    bool seen_digit = false, seen_dot = false;
    for (const char *c = text; *c; c++) {
        if (*c >= '0' && *c <= '9')
            seen_digit = true;
        else if (*c == '.' && !seen_dot)
            seen_dot = true;
        else
            return false;
    }
    return seen_digit;
}

double hb_parse_nonneg_double(const char *what, const char *text) {
    if (!plain_decimal(text))
        hb_usage_error("%s: '%s' is not a non-negative decimal number", what, text);
    errno = 0;
    char *end = NULL;
    double value = strtod(text, &end);
    if (errno == ERANGE || *end != '\0' || !isfinite(value))
        hb_usage_error("%s: '%s' is out of range", what, text);
    return value;
}

void hb_check_range(const char *what, uint64_t value, uint64_t lo, uint64_t hi) {
    if (value < lo || value > hi)
        hb_usage_error("%s must be in [%" PRIu64 ", %" PRIu64 "], got %" PRIu64, what, lo, hi,
                       value);
}

void hb_check_size_range(uint64_t min_size, uint64_t max_size) {
    hb_check_range("--min", min_size, 1, HB_MAX_BLOCK_SIZE);
    hb_check_range("--max", max_size, 1, HB_MAX_BLOCK_SIZE);
    if (min_size > max_size)
        hb_usage_error("--min (%" PRIu64 ") is greater than --max (%" PRIu64 ")", min_size,
                       max_size);
}

/* ---- flags ---- */

static hb_option *find_option(hb_option *opts, size_t n_opts, const char *flag, size_t len) {
    for (size_t i = 0; i < n_opts; i++)
        if (strlen(opts[i].flag) == len && strncmp(opts[i].flag, flag, len) == 0) return &opts[i];
    return NULL;
}

void hb_parse_flags(int argc, char **argv, hb_option *opts, size_t n_opts) {
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(usage_text, stdout);
            exit(0);
        }
    }
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strncmp(arg, "--", 2) != 0) hb_usage_error("unexpected argument '%s'", arg);
        const char *eq = strchr(arg, '=');
        size_t flag_len = eq ? (size_t)(eq - arg) : strlen(arg);
        hb_option *opt = find_option(opts, n_opts, arg, flag_len);
        if (!opt) hb_usage_error("unknown option '%.*s'", (int)flag_len, arg);
        if (opt->seen) hb_usage_error("%s given twice", opt->flag);
        const char *value;
        if (eq) {
            value = eq + 1;
        } else {
            if (i + 1 >= argc) hb_usage_error("%s needs a value", opt->flag);
            value = argv[++i];
        }
        opt->seen = true;
        if (opt->kind == HB_OPT_U64)
            *(uint64_t *)opt->target = hb_parse_u64(opt->flag, value);
        else
            *(double *)opt->target = hb_parse_nonneg_double(opt->flag, value);
    }
    for (size_t i = 0; i < n_opts; i++)
        if (opts[i].required && !opts[i].seen)
            hb_usage_error("missing required option %s", opts[i].flag);
}

/* ---- blocks ---- */

void hb_block_overwritten(const unsigned char *block, uint64_t size) {
    hb_runtime_error("block of %" PRIu64 " bytes at %p was overwritten while live", size,
                     (const void *)block);
}

/* ---- allocation and threads ---- */

void hb_alloc_failed(const char *function, uint64_t size) {
    hb_runtime_error("%s(%" PRIu64 ") returned NULL", function, size);
}

/* Threads the main thread has started with HB_PIN_THREADS: the next one's CPU index. */
static unsigned pinned_threads;

/* The (k mod n)-th CPU of the calling thread's affinity mask, -1 when it cannot be read. */
static int nth_allowed_cpu(unsigned k) {
    cpu_set_t allowed;
    if (sched_getaffinity(0, sizeof allowed, &allowed) != 0 || CPU_COUNT(&allowed) == 0) return -1;
    unsigned want = k % (unsigned)CPU_COUNT(&allowed);
    for (int cpu = 0; cpu < CPU_SETSIZE; cpu++)
        if (CPU_ISSET(cpu, &allowed) && want-- == 0) return cpu;
    return -1;
}

void hb_start_thread(pthread_t *thread, void *(*fn)(void *), void *arg) {
    pthread_attr_t attr, *attrs = NULL;
    int cpu = pin_threads && gettid() == getpid() ? nth_allowed_cpu(pinned_threads++) : -1;
    if (cpu >= 0) {
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(cpu, &one);
        if (pthread_attr_init(&attr) != 0 ||
            pthread_attr_setaffinity_np(&attr, sizeof one, &one) != 0)
            hb_runtime_error("cannot pin a thread to CPU %d", cpu);
        attrs = &attr;
    }
    int err = pthread_create(thread, attrs, fn, arg);
    if (attrs) pthread_attr_destroy(attrs);
    if (err) hb_runtime_error("pthread_create: %s", strerror(err));
}

void hb_start_detached_thread(void *(*fn)(void *), void *arg) {
    pthread_t thread;
    hb_start_thread(&thread, fn, arg);
    int err = pthread_detach(thread);
    if (err) hb_runtime_error("pthread_detach: %s", strerror(err));
}

/* ---- extra work ---- */

static pthread_mutex_t inject_lock = PTHREAD_MUTEX_INITIALIZER;
static volatile uint64_t inject_sink;

void hb_inject_period(hb_inject *inject) {
    inject->chain = hb_extra_rounds(inject->chain, inject->extra_ops);
    if (inject->hold_ops) {
        pthread_mutex_lock(&inject_lock);
        inject->chain = hb_extra_rounds(inject->chain, inject->hold_ops);
        inject_sink = inject->chain;
        pthread_mutex_unlock(&inject_lock);
    }
    inject_sink = inject->chain;
}

static volatile uint64_t extra_work_sink;

void hb_extra_work_init(hb_extra_work *work, double units, uint64_t ops) {
    work->units_q16 = (uint64_t)llround(units * 65536.0);
    work->carry_q16 = 0;
    work->ops = ops;
    work->chain = 1;
}

double hb_extra_work_units(const hb_extra_work *work) {
    return (double)work->units_q16 / 65536.0;
}

void hb_extra_work_finish(const hb_extra_work *work) {
    extra_work_sink = work->chain;
}

/* ---- random-mixed core ---- */

static void *xcalloc(size_t count, size_t size) {
    void *p = calloc(count, size);
    if (!p) hb_runtime_error("cannot allocate %zu x %zu bytes for the working set", count, size);
    return p;
}

void hb_mixed_init(hb_mixed *mixed, uint64_t ws, uint64_t min_size, uint64_t max_size,
                   uint64_t seed) {
    mixed->ws = ws;
    mixed->min_size = min_size;
    mixed->max_size = max_size;
    mixed->blocks = xcalloc(ws, sizeof *mixed->blocks);
    mixed->sizes = xcalloc(ws, sizeof *mixed->sizes);
    hb_rng_seed(&mixed->rng, seed);
    mixed->checksum = HB_CHECKSUM_INIT;
}

static void mixed_loop(hb_mixed *mixed, uint64_t iterations, hb_extra_work *work) {
    unsigned char **blocks = mixed->blocks;
    uint32_t *sizes = mixed->sizes;
    const uint64_t ws = mixed->ws, min_size = mixed->min_size;
    const uint64_t size_span = mixed->max_size - min_size + 1;
    /* Locals, not fields: their addresses never escape, so they stay in registers across
     * the malloc and free calls. */
    hb_rng rng = mixed->rng;
    uint64_t checksum = mixed->checksum;
    hb_extra_work local_work = *work;
    for (uint64_t i = 0; i < iterations; i++) {
        uint64_t slot = hb_rng_below(&rng, ws);
        unsigned char *block = blocks[slot];
        if (block) {
            hb_verify_block(block, sizes[slot], hb_block_tag(slot));
            free(block);
            blocks[slot] = NULL;
            hb_checksum_add(&checksum, hb_free_event(slot));
        } else {
            uint64_t size = min_size + hb_rng_below(&rng, size_span);
            block = malloc(size);
            if (!block) hb_runtime_error("malloc(%" PRIu64 ") returned NULL", size);
            hb_fill_block(block, size, hb_block_tag(slot));
            blocks[slot] = block;
            sizes[slot] = (uint32_t)size;
            hb_checksum_add(&checksum, hb_malloc_event(slot, size));
        }
        hb_extra_work_op(&local_work);
    }
    *work = local_work;
    mixed->rng = rng;
    mixed->checksum = checksum;
}

void hb_mixed_run(hb_mixed *mixed, uint64_t iterations, hb_extra_work *work) {
    if (!work->ops) {
        mixed_loop(mixed, iterations, work);
        return;
    }
    /* A burst after every HB_EXTRA_OPS_PERIOD ops (per call: callers run whole periods). */
    for (uint64_t done = 0; done < iterations; done += HB_EXTRA_OPS_PERIOD) {
        uint64_t n =
            iterations - done < HB_EXTRA_OPS_PERIOD ? iterations - done : HB_EXTRA_OPS_PERIOD;
        mixed_loop(mixed, n, work);
        if (n == HB_EXTRA_OPS_PERIOD) work->chain = hb_extra_rounds(work->chain, work->ops);
    }
}

void hb_mixed_run_chunked(hb_mixed *mixed, uint64_t iterations, hb_extra_work *work,
                          hb_timer *timer) {
    uint64_t align = work->ops ? HB_EXTRA_OPS_PERIOD : 1;
    for (unsigned c = 0; c < hb_chunks(); c++) {
        uint64_t to = hb_chunk_bound(iterations, c + 1, align);
        hb_mixed_run(mixed, to - hb_chunk_bound(iterations, c, align), work);
        hb_timer_lap(timer, to);
    }
}

void hb_mixed_destroy(hb_mixed *mixed) {
    for (uint64_t slot = 0; slot < mixed->ws; slot++)
        free(mixed->blocks[slot]);
    free(mixed->blocks);
    free(mixed->sizes);
    mixed->blocks = NULL;
    mixed->sizes = NULL;
}

/* ---- timing and output ---- */

double hb_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double clock_seconds(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double hb_cpu_now(void) {
    return clock_seconds(CLOCK_PROCESS_CPUTIME_ID);
}

double hb_thread_cpu_now(void) {
    return clock_seconds(CLOCK_THREAD_CPUTIME_ID);
}

/* ---- active time ---- */

/* schedstat's second field: the calling thread's nanoseconds runnable on a run queue but not
 * running. Read with open/read into the stack, so it never allocates under the allocator
 * being measured. UINT64_MAX when unreadable. */
static uint64_t run_delay_ns(void) {
    char buf[96];
    int fd = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return UINT64_MAX;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return UINT64_MAX;
    buf[n] = 0;
    char *end;
    strtoull(buf, &end, 10); /* time on a CPU */
    if (end == buf || *end != ' ') return UINT64_MAX;
    const char *wait = end + 1;
    uint64_t delay = strtoull(wait, &end, 10);
    return end == wait ? UINT64_MAX : delay;
}

/* The clocks are read wall, run_delay ... run_delay, wall: the run-queue interval lies inside
 * the wall one, so a wait between two reads never makes active time negative. */
hb_thread_mark hb_thread_begin(void) {
    hb_thread_mark mark = {.wall = hb_now()};
    mark.run_delay_ns = run_delay_ns();
    return mark;
}

/* The threads accounted so far (per-thread timers and hb_thread_end): their active and
 * run-queue nanoseconds, and whether any of them could not read schedstat. */
static _Atomic uint64_t accounted_threads, accounted_active_ns, accounted_delay_ns;
static atomic_bool accounted_unreadable;
/* Each accounted thread's ops per active second, for their median (the first ones only). */
#define MAX_THREAD_RATES 65536
static double thread_rates[MAX_THREAD_RATES];

/* (active seconds, run-queue seconds) of the calling thread since `begin`; false when
 * schedstat could not be read. */
static bool thread_figures(hb_thread_mark begin, double *active, double *delay) {
    uint64_t now = run_delay_ns();
    double wall = hb_now();
    if (begin.run_delay_ns == UINT64_MAX || now == UINT64_MAX || now < begin.run_delay_ns)
        return false;
    *delay = (double)(now - begin.run_delay_ns) * 1e-9;
    *active = wall - begin.wall - *delay;
    if (*active < 0) *active = 0; /* rounding: the two clocks tick apart */
    return true;
}

static void account(bool readable, double active, double delay, uint64_t ops) {
    if (!readable) {
        atomic_store(&accounted_unreadable, true);
        return;
    }
    uint64_t index = atomic_fetch_add(&accounted_threads, 1);
    if (index < MAX_THREAD_RATES) thread_rates[index] = active > 0 ? (double)ops / active : 0;
    atomic_fetch_add(&accounted_active_ns, (uint64_t)llround(active > 0 ? active * 1e9 : 0));
    atomic_fetch_add(&accounted_delay_ns, (uint64_t)llround(delay * 1e9));
}

void hb_thread_end(hb_thread_mark begin, uint64_t ops) {
    double active = 0, delay = 0;
    bool readable = thread_figures(begin, &active, &delay);
    account(readable, active, delay, ops);
}

/* ---- the timed region ---- */

unsigned hb_chunks(void) {
    return chunk_count;
}

uint64_t hb_chunk_bound(uint64_t total, unsigned chunk, uint64_t align) {
    if (chunk >= chunk_count) return total;
    uint64_t bound = (uint64_t)((unsigned __int128)total * chunk / chunk_count);
    return bound - bound % align;
}

static double timer_cpu(const hb_timer *timer) {
    return timer->clock == HB_CPU_THREAD ? hb_thread_cpu_now() : hb_cpu_now();
}

void hb_timer_start(hb_timer *timer, hb_cpu_clock clock) {
    if (spin_seconds > 0) {
        double until = hb_now() + spin_seconds;
        while (hb_now() < until) {
        }
    }
    timer->clock = clock;
    /* only a per-thread timer accounts its thread: a program timed by its main thread
     * reads no schedstat (single-threaded programs, whose instruction counts the gate
     * checks, pay nothing for it) */
    if (clock == HB_CPU_THREAD) timer->mark = hb_thread_begin();
    timer->active = timer->run_delay = -1;
    timer->spin = 0;
    timer->chunks = 0;
    timer->lap_ops = 0;
    /* wall, CPU ... CPU, wall: the CPU interval lies inside the wall one */
    timer->start = timer->lap_wall = hb_now();
    timer->cpu_start = timer->lap_cpu = timer_cpu(timer);
    timer->end = timer->start;
    timer->cpu_end = timer->cpu_start;
}

void hb_timer_lap(hb_timer *timer, uint64_t ops_done) {
    double wall = hb_now(), cpu = timer_cpu(timer);
    uint64_t ops = ops_done - timer->lap_ops;
    timer->lap_ops = ops_done;
    if (ops && timer->chunks < HB_MAX_CHUNKS) {
        timer->chunk_ops[timer->chunks] = ops;
        timer->chunk_wall[timer->chunks] = wall - timer->lap_wall;
        timer->chunk_cpu[timer->chunks] = cpu - timer->lap_cpu;
        timer->chunks++;
    }
    timer->lap_wall = wall;
    timer->lap_cpu = cpu;
}

double hb_timer_stop(hb_timer *timer) {
    timer->cpu_end = timer_cpu(timer);
    timer->end = hb_now();
    double active, delay;
    if (timer->clock == HB_CPU_THREAD && thread_figures(timer->mark, &active, &delay)) {
        timer->active = active;
        timer->run_delay = delay;
    }
    return timer->end - timer->start;
}

/* The run's figures: the sum of the reported timers (hb_report_timer). */
static struct {
    unsigned timers, chunks;
    hb_cpu_clock clock;
    double cpu;
    uint64_t ops[HB_MAX_CHUNKS];
    double wall[HB_MAX_CHUNKS], chunk_cpu[HB_MAX_CHUNKS];
    double spin; /* the timers' spin-waits (hb_spin_end) */
} run_timing;

void hb_report_timer(const hb_timer *timer) {
    run_timing.spin += timer->spin;
    if (timer->clock == HB_CPU_THREAD)
        account(timer->active >= 0, timer->active - timer->spin, timer->run_delay, timer->lap_ops);
    run_timing.timers++;
    run_timing.clock = timer->clock;
    run_timing.cpu += timer->cpu_end - timer->cpu_start;
    for (unsigned c = 0; c < timer->chunks; c++) {
        run_timing.ops[c] += timer->chunk_ops[c];
        if (timer->chunk_wall[c] > run_timing.wall[c]) run_timing.wall[c] = timer->chunk_wall[c];
        run_timing.chunk_cpu[c] += timer->chunk_cpu[c];
    }
    if (timer->chunks > run_timing.chunks) run_timing.chunks = timer->chunks;
}

static int compare_doubles(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Prints `key=r1,r2,...` (integers) and returns their median. */
static double print_rates(const char *key, const double *rates, unsigned n) {
    double sorted[HB_MAX_CHUNKS];
    printf("%s=", key);
    for (unsigned c = 0; c < n; c++) {
        printf("%s%.0f", c ? "," : "", rates[c]);
        sorted[c] = rates[c];
    }
    printf("\n");
    qsort(sorted, n, sizeof sorted[0], compare_doubles);
    return n % 2 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
}

/* active_seconds= and the rest: the accounted threads'; nothing when no thread was
 * accounted or one could not read schedstat. */
static void print_active(void) {
    uint64_t threads = atomic_load(&accounted_threads);
    if (!threads || atomic_load(&accounted_unreadable)) return;
    double active = (double)atomic_load(&accounted_active_ns) * 1e-9;
    double delay = (double)atomic_load(&accounted_delay_ns) * 1e-9;
    printf("active_seconds=%.6f\nrun_delay_seconds=%.6f\nspin_seconds=%.6f\nactive_threads=%" PRIu64
           "\n",
           active, delay, run_timing.spin, threads);
    if (pin_threads) printf("pinned_threads=%u\n", pinned_threads);
    uint64_t n = threads < MAX_THREAD_RATES ? threads : MAX_THREAD_RATES;
    qsort(thread_rates, n, sizeof thread_rates[0], compare_doubles);
    double median =
        n % 2 ? thread_rates[n / 2] : (thread_rates[n / 2 - 1] + thread_rates[n / 2]) / 2;
    printf("active_rate_median=%.0f\n", median);
}

static void print_timing(void) {
    if (!run_timing.timers) return;
    printf("cpu_seconds=%.6f\n", run_timing.cpu);
    printf("cpu_clock=%s\n", run_timing.clock == HB_CPU_THREAD ? "thread" : "process");
    print_active();
    printf("chunks=%u\n", run_timing.chunks);
    if (!run_timing.chunks) return; /* no op ran: no rates */
    double wall_rates[HB_MAX_CHUNKS], cpu_rates[HB_MAX_CHUNKS];
    for (unsigned c = 0; c < run_timing.chunks; c++) {
        wall_rates[c] = run_timing.wall[c] > 0 ? (double)run_timing.ops[c] / run_timing.wall[c] : 0;
        cpu_rates[c] =
            run_timing.chunk_cpu[c] > 0 ? (double)run_timing.ops[c] / run_timing.chunk_cpu[c] : 0;
    }
    double wall_median = print_rates("chunk_rates", wall_rates, run_timing.chunks);
    double cpu_median = print_rates("chunk_cpu_rates", cpu_rates, run_timing.chunks);
    printf("chunk_rate=%.0f\nchunk_cpu_rate=%.0f\n", wall_median, cpu_median);
}

static long hugetlb_kb(void);

/* Resident memory now in KiB (statm), HugeTLB pages included (see hugetlb_kb). */
long hb_rss_kb(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f) return -1;
    long size_pages = 0, resident_pages = -1;
    if (fscanf(f, "%ld %ld", &size_pages, &resident_pages) != 2) resident_pages = -1;
    fclose(f);
    if (resident_pages < 0) return -1;
    return resident_pages * (sysconf(_SC_PAGESIZE) / 1024) + hugetlb_kb();
}

/* The object `malloc` really resolves to, so a run proves which allocator it used. When
 * malloc lives in the executable itself (the *_hakmem twins), name the executable. */
static void print_malloc_impl(void) {
    void *malloc_addr = dlsym(RTLD_DEFAULT, "malloc");
    Dl_info malloc_info, self_info;
    if (!malloc_addr || !dladdr(malloc_addr, &malloc_info) || !malloc_info.dli_fname) {
        printf("malloc_impl=unknown\n");
        return;
    }
    bool in_executable = dladdr((void *)&hb_print_result, &self_info) &&
                         self_info.dli_fbase == malloc_info.dli_fbase;
    const char *object = in_executable ? "/proc/self/exe" : malloc_info.dli_fname;
    char path[PATH_MAX];
    printf("malloc_impl=%s\n", realpath(object, path) ? path : object);
}

void hb_print_rss(const char *key) {
    printf("%s=%ld\n", key, hb_rss_kb());
}

uint64_t hb_rate(uint64_t ops, double seconds) {
    return seconds > 0 ? (uint64_t)((double)ops / seconds) : 0;
}

/* A field of /proc/self/status in KiB ("VmHWM", "HugetlbPages"), or -1. Read with open/read,
 * not stdio, so reporting does not allocate under the allocator being measured. */
static long status_kb(const char *field) {
    char buf[8192], key[64];
    size_t len = 0;
    int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t n;
        while (len < sizeof buf - 1 && (n = read(fd, buf + len, sizeof buf - 1 - len)) > 0)
            len += (size_t)n;
        close(fd);
    }
    buf[len] = '\0';
    snprintf(key, sizeof key, "\n%s:", field);
    const char *line = strstr(buf, key);
    return line ? strtol(line + strlen(key), NULL, 10) : -1;
}

/* HugeTLB pages mapped now, in KiB (0 when none or unknown). RSS leaves them out (the kernel
 * accounts them apart: VmHWM, statm's resident and ru_maxrss never include them), so an
 * allocator that maps huge pages (mimalloc with MIMALLOC_LARGE_OS_PAGES=1, when pages are
 * reserved in /proc/sys/vm/nr_hugepages) would read as holding almost nothing. */
static long hugetlb_kb(void) {
    long kb = status_kb("HugetlbPages");
    return kb > 0 ? kb : 0;
}

/* Peak memory of this program in KiB: VmHWM, and `huge`, the HugeTLB pages mapped when it
 * reports (their own peak is not kept by the kernel: a lower bound of it). VmHWM belongs to the
 * address space exec created, so it is the harness's own; getrusage's ru_maxrss carries the
 * launcher's high-water mark across exec (69728 KiB when started by hakbench's Python, 1704
 * from a shell). */
static long peak_rss_kb(long huge) {
    long hwm = status_kb("VmHWM");
    if (hwm >= 0) return hwm + huge;
    struct rusage usage; /* /proc unreadable: the inherited figure beats none */
    getrusage(RUSAGE_SELF, &usage);
    return usage.ru_maxrss;
}

void hb_print_result(uint64_t ops, double seconds, uint64_t checksum) {
    printf("Throughput = %" PRIu64 " ops/s\n", hb_rate(ops, seconds));
    printf("ops=%" PRIu64 "\n", ops);
    printf("seconds=%.6f\n", seconds);
    printf("checksum=%016" PRIx64 "\n", checksum);
    long huge = hugetlb_kb();
    printf("maxrss_kb=%ld\n", peak_rss_kb(huge));
    printf("hugetlb_kb=%ld\n", huge);
    print_malloc_impl();
    print_timing();
}

void hb_print_result_and_rss_end(uint64_t ops, double seconds, uint64_t checksum) {
    hb_print_result(ops, ops ? seconds : 0, checksum);
    hb_print_rss("rss_end_kb");
}

void hb_flush_stdout(void) {
    if (fflush(stdout) != 0) hb_runtime_error("cannot write to stdout");
}

long hb_minflt(void) {
    struct rusage usage;
    if (getrusage(RUSAGE_SELF, &usage) != 0) return -1;
    return usage.ru_minflt;
}
