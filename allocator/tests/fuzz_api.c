// fuzz_api: a differential fuzzer of the malloc API (issue #27). Allocator-agnostic: the same
// binary runs against glibc, mimalloc (LD_PRELOAD) and libhakmem (linked in, preloaded, or
// through the prefixed hak_* API under ASan), and the model it checks against is glibc's.
//
//   fuzz_api [--seed S|time]... [--ops N] [--seconds T] [--threads K] [--portable]
//            [--aligned-alloc-c17] [--mimalloc-issue-700]
//
// One run per --seed (default: one from the clock), each of N ops per stream (default
// 200000) or T seconds; at the end `ops=N seconds=S seeds=...`.
//
// Random sequences of malloc, calloc, realloc, reallocarray, free, posix_memalign,
// aligned_alloc, memalign, valloc, pvalloc, malloc_usable_size and malloc_trim (after which
// every live block of the stream is checked), with sizes drawn to hit
// class edges (0, 1, powers of two and multiples of 16 and 4096 +-1, 1 KiB, 8/32/256 KiB,
// 1-32 MiB) and huge sizes that must fail, valid and invalid alignments, realloc chains
// across tiny, mid and large sizes and back, and (--threads K) K worker threads that hand
// blocks to each other through a shared exchange array: the receiver checks the contents,
// then frees, reallocs or keeps the block.
//
// Every live block has a shadow record: requested size, a fill pattern from (seed, op index),
// the usable size when asked. Checked: contents intact at every touch (free, realloc,
// malloc_usable_size, exchange, explicit checks; blocks above 64 KiB on their first and last
// 4 KiB and 64 bytes every 32 KiB), realloc keeps min(old, new) bytes, a failed realloc or
// reallocarray leaves the old block intact, malloc_usable_size >= request (and constant while
// the block lives), alignment as requested and >= 16 for blocks of >= 16 bytes (smaller:
// their largest power of two), calloc zeroes, no two live blocks overlap (an ordered index of
// every live block of every thread), free keeps errno, and NULL, errno and posix_memalign's
// return value exactly where glibc 2.36 (this machine's) gives them:
//   huge sizes (>= 2^60), calloc/reallocarray overflow      NULL, errno ENOMEM
//   realloc(p, 0), reallocarray(p, 0, n)                     p freed, NULL
//   posix_memalign: alignment not a power of two or not a multiple of sizeof(void *):
//       EINVAL, errno and *out unchanged; huge size or alignment >= 2^62: ENOMEM and errno
//       ENOMEM (glibc's malloc sets it on the way), *out unchanged
//   memalign and aligned_alloc (one function in glibc 2.36): alignment > 2^63 EINVAL; any
//       other alignment is rounded up to a power of two (0 and 1 as malloc); >= 2^62 ENOMEM
//   valloc, pvalloc: page-aligned; pvalloc(n) usable >= n rounded up to pages
//   size 0: a unique non-NULL block from every function
// --aligned-alloc-c17: aligned_alloc with an alignment that is not a power of two (0
//   included) must fail with EINVAL, as C17 says and glibc does from 2.38; memalign keeps
//   glibc's rounding.
// --portable: the outcomes C and POSIX leave to the implementation are accepted either way,
//   for allocators that are not glibc clones (mimalloc 2.0.9 needs it): errno is not checked
//   after a failure (mimalloc leaves it unset on most), realloc(p, 0) may return a new block,
//   memalign/aligned_alloc with a non-power-of-two alignment may fail, size 0 may give NULL
//   (posix_memalign: 0 and *out = NULL, whatever the alignment).
//   Everything else is checked as in the default mode.
// --mimalloc-issue-700: no alignment check for the one class of calls that mimalloc 2.0.9
//   misaligns (a real bug, fixed upstream: see known_misaligned), so that the reference run
//   against Debian's mimalloc can look for anything else.
//
// On a failure: the last ops of the failing stream, one `FAIL [category]` line and one
// `reproduce:` line (the exact command, with the HAKMEM_* and LD_PRELOAD settings of the
// run), then abort(). Single-threaded (--threads 0) runs are exactly reproducible: the op
// sequence depends only on the seed. With --threads K, stream 0 (the main thread, which does
// not exchange) is still replayable alone with --threads 0; the workers' streams depend on
// the timing of the exchanges, so their seeds are printed and the reproducer is the
// threaded command. A crash (SIGSEGV, SIGBUS, an allocator's own abort) prints the same.
//
// Build with -DFUZZ_SELFTEST_BUG=1..8 to plant an allocator bug in the calls of stream 0
// from op 2000 on (fuzz_selftest.sh: each must be caught by its check). The summary line of
// each seed has a digest of stream 0's calls and arguments: the same seed gives the same
// digest under every allocator with glibc's semantics (mimalloc's differs: realloc(p, 0)).
#include "testhelper.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <time.h>

#define MAX_THREADS    16
#define MAX_STREAMS    (MAX_THREADS + 1)
#define MAX_LIVE       1024 // live blocks per stream
#define EXCHANGE_SLOTS 64
#define MAX_RECORDS    (MAX_STREAMS * (MAX_LIVE + 1) + EXCHANGE_SLOTS + 16)
#define NO_RECORD      UINT32_MAX
#define LOG_SIZE       20 // ops shown in a failure report
// Requested bytes a stream may hold; a size that would go beyond is taken modulo 1 KiB.
#define STREAM_BUDGET ((size_t)48 << 20)
#define MiB           ((size_t)1 << 20)
// Every size at or above this must fail: no machine maps an exbibyte.
#define HUGE_MIN ((size_t)1 << 60)
// Blocks up to FULL_LIMIT are filled and checked whole; larger ones on their first and last
// EDGE bytes and STRIPE bytes every STRIPE_STEP (so that a page moved by mremap is seen).
#define FULL_LIMIT  ((size_t)64 << 10)
#define EDGE        4096
#define STRIPE      64
#define STRIPE_STEP ((size_t)32 << 10)
// calloc blocks up to this are checked zero whole, larger ones on the stripes.
#define ZERO_FULL_LIMIT ((size_t)8 << 20)
#define PAGE            ((size_t)4096)
#define ERRNO_SENTINEL  0x5eed // errno before every call
#define ERRNO_ANY       0      // expected errno: not checked
#define ERRNO_UNCHANGED -1     // expected errno: the sentinel
#define SELFTEST_FROM   2000

enum api {
    API_MALLOC,
    API_CALLOC,
    API_REALLOC,
    API_REALLOCARRAY,
    API_FREE,
    API_POSIX_MEMALIGN,
    API_ALIGNED_ALLOC,
    API_MEMALIGN,
    API_VALLOC,
    API_PVALLOC,
    API_USABLE,
    API_CHECK,
    API_GIVE, // exchange: a block handed to the exchange array
    API_TAKE, // exchange: a block taken from it (allocated by another thread)
    API_TRIM, // malloc_trim(0), then every live block of the stream checked
    API_COUNT
};

static const char *const api_names[API_COUNT] = {
    "malloc",
    "calloc",
    "realloc",
    "reallocarray",
    "free",
    "posix_memalign",
    "aligned_alloc",
    "memalign",
    "valloc",
    "pvalloc",
    "malloc_usable_size",
    "check",
    "exchange-give",
    "exchange-take",
    "malloc_trim",
};

// Shadow of one live block.
struct record {
    unsigned char *p;
    size_t req;    // requested size (pvalloc: rounded up to pages)
    size_t fill;   // bytes filled with the pattern: req, or the usable size when asked
    size_t usable; // malloc_usable_size when asked, else 0
    uint64_t tag;  // pattern seed: from (stream seed, op index)
    uint64_t born_op;
    uint16_t born_stream;
    uint8_t born_api;
    uint32_t left, right, priority; // the address index (a treap)
    uint32_t next_free;
};

// One API call as the failure report shows it.
struct logged_call {
    uint64_t op;
    uint8_t api;
    size_t size, count, alignment;
    void *in, *out;
    int err, rc, used;
};

struct stream {
    int id; // 0: the main thread's stream; 1..K: workers
    uint64_t seed, random;
    uint64_t op;       // index of the current op
    uint64_t op_limit; // 0: until the deadline
    bool exchanges;    // takes part in the exchange array
    bool cleaning;     // freeing what is left after its last op
    uint32_t live[MAX_LIVE];
    size_t live_count;
    size_t held; // requested bytes of the live blocks
    uint64_t calls, cross_frees, cross_reallocs;
    uint64_t digest; // of the calls and their arguments: the same run gives the same digest
    struct logged_call log[LOG_SIZE];
    unsigned log_next;
    pthread_t thread;
};

// Options.
static bool portable_mode;
static bool aligned_alloc_c17;
static bool mimalloc_issue_700;
static int thread_count;
static uint64_t ops_per_stream;
static double run_seconds;
static const char *program_path = "fuzz_api";
static uint64_t run_seed;
static struct timespec deadline;

// The shadow records and the index live in static memory, not in the allocator under test:
// apart from stdio's buffers and thread creation, the allocator sees only the fuzzed calls.
static struct record records[MAX_RECORDS];
static uint32_t record_free_head = NO_RECORD;
static uint32_t record_fresh;
static uint32_t index_root = NO_RECORD;
static uint64_t index_random = 0x853c49e6748fea9bULL;
static pthread_mutex_t index_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic uint32_t exchange[EXCHANGE_SLOTS];
static struct stream streams[MAX_STREAMS];
static _Thread_local struct stream *current_stream;
// What the fuzzer itself is touching, for a crash report: a fault there means the memory the
// allocator handed out is not (all) mapped.
static _Thread_local struct {
    const char *what;
    const void *p;
    size_t length;
} touching;

static atomic_int report_started;

static uint64_t mix64(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

static uint64_t next_random(struct stream *s) {
    return test_random_next(&s->random);
}

static uint64_t stream_seed(uint64_t seed, int id) {
    return id == 0 ? seed : mix64(seed + (uint64_t)id * 0x9e3779b97f4a7c15ULL);
}

// ---------------------------------------------------------------------------------------
// Failure reports. Formatted into static buffers and written with write(2): the allocator
// under test may be what broke, and the same path serves the signal handler.

static char report_buffer[16384];
static size_t report_length;

static void report_add(const char *format, ...) __attribute__((format(printf, 1, 2)));
static void report_add(const char *format, ...) {
    if (report_length >= sizeof report_buffer) return;
    va_list args;
    va_start(args, format);
    int n = vsnprintf(report_buffer + report_length, sizeof report_buffer - report_length, format,
                      args);
    va_end(args);
    if (n > 0) report_length += (size_t)n;
    if (report_length > sizeof report_buffer) report_length = sizeof report_buffer;
}

static void report_flush(void) {
    size_t done = 0;
    while (done < report_length) {
        ssize_t n = write(2, report_buffer + done, report_length - done);
        if (n <= 0) break;
        done += (size_t)n;
    }
    report_length = 0;
}

static const char *errno_name(int err) {
    static _Thread_local char text[32];
    switch (err) {
    case ERRNO_SENTINEL:
    case ERRNO_UNCHANGED:
        return "unchanged";
    case ENOMEM:
        return "ENOMEM";
    case EINVAL:
        return "EINVAL";
    case 0:
        return "0";
    default:
        snprintf(text, sizeof text, "%d", err);
        return text;
    }
}

static void report_call(const struct logged_call *c) {
    report_add("  op %-8" PRIu64 " %-18s", c->op, api_names[c->api]);
    switch (c->api) {
    case API_CALLOC:
        report_add(" count=%zu size=%zu", c->count, c->size);
        break;
    case API_REALLOCARRAY:
        report_add(" p=%p count=%zu size=%zu", c->in, c->count, c->size);
        break;
    case API_REALLOC:
        report_add(" p=%p size=%zu", c->in, c->size);
        break;
    case API_POSIX_MEMALIGN:
    case API_ALIGNED_ALLOC:
    case API_MEMALIGN:
        report_add(" alignment=%zu size=%zu", c->alignment, c->size);
        break;
    case API_FREE:
    case API_USABLE:
    case API_CHECK:
    case API_GIVE:
    case API_TAKE:
        report_add(" p=%p size=%zu", c->in, c->size);
        break;
    default:
        report_add(" size=%zu", c->size);
    }
    const char *err = errno_name(c->err);
    if (c->api == API_POSIX_MEMALIGN)
        report_add(" -> rc=%d p=%p errno=%s\n", c->rc, c->out, err);
    else if (c->api == API_USABLE || c->api == API_TRIM)
        report_add(" -> %d\n", c->rc);
    else if (c->api == API_FREE || c->api == API_CHECK || c->api == API_GIVE || c->api == API_TAKE)
        report_add("\n");
    else
        report_add(" -> %p errno=%s\n", c->out, err);
}

// The command that replays: the HAKMEM_* and LD_PRELOAD settings of this run, the program,
// the seed, the ops up to the failing one and the thread count.
static void report_command(uint64_t seed, uint64_t ops, int threads) {
    extern char **environ;
    for (char **e = environ; e && *e; e++)
        if (strncmp(*e, "HAKMEM_", 7) == 0 || strncmp(*e, "LD_PRELOAD=", 11) == 0)
            report_add("%s ", *e);
    report_add("%s --seed 0x%" PRIx64 " --ops %" PRIu64 " --threads %d%s%s%s", program_path, seed,
               ops, threads, portable_mode ? " --portable" : "",
               aligned_alloc_c17 ? " --aligned-alloc-c17" : "",
               mimalloc_issue_700 ? " --mimalloc-issue-700" : "");
}

static void report_failure(struct stream *s, const char *category, const char *detail) {
    if (s) {
        report_add("fuzz_api: last calls of stream %d (seed 0x%" PRIx64 "), oldest first:\n", s->id,
                   s->seed);
        for (unsigned i = 0; i < LOG_SIZE; i++) {
            const struct logged_call *c = &s->log[(s->log_next + i) % LOG_SIZE];
            if (c->used) report_call(c);
        }
    }
    if (thread_count > 0) {
        report_add("fuzz_api: stream seeds:");
        for (int i = 0; i <= thread_count; i++)
            report_add(" %d=0x%" PRIx64, i, stream_seed(run_seed, i));
        report_add("\n");
    }
    uint64_t ops = s ? (s->cleaning ? s->op : s->op + 1) : ops_per_stream;
    report_add("fuzz_api: FAIL [%s] stream %d op %" PRIu64 ": %s\n", category, s ? s->id : -1,
               s ? s->op : 0, detail);
    if (s && s->id == 0) {
        report_add("fuzz_api: reproduce: ");
        report_command(run_seed, ops, 0);
        if (thread_count > 0) {
            report_add("   (stream 0 alone; as run: --threads %d)", thread_count);
        }
    } else {
        report_add("fuzz_api: reproduce (threaded: the exchanges depend on timing; failing "
                   "stream %d, seed 0x%" PRIx64 "): ",
                   s ? s->id : -1, s ? s->seed : 0);
        report_command(run_seed, ops, thread_count);
    }
    report_add("\n");
    report_flush();
}

static void fail(struct stream *s, const char *category, const char *format, ...)
    __attribute__((noreturn, format(printf, 3, 4)));
static void fail(struct stream *s, const char *category, const char *format, ...) {
    static char detail[1024];
    if (atomic_exchange(&report_started, 1)) {
        for (;;)
            pause(); // another thread is reporting; it aborts the process
    }
    va_list args;
    va_start(args, format);
    vsnprintf(detail, sizeof detail, format, args);
    va_end(args);
    report_failure(s, category, detail);
    signal(SIGABRT, SIG_DFL);
    abort();
}

static void crash_handler(int signal_number) {
    if (atomic_exchange(&report_started, 1)) {
        signal(signal_number, SIG_DFL);
        raise(signal_number);
        return;
    }
    char detail[256];
    const char *name = signal_number == SIGSEGV   ? "SIGSEGV"
                       : signal_number == SIGBUS  ? "SIGBUS"
                       : signal_number == SIGABRT ? "SIGABRT: the allocator aborted, its message "
                                                    "is above"
                                                  : "?";
    if (touching.p)
        snprintf(detail, sizeof detail,
                 "signal %d (%s) while %s block [%p, +%zu) after the last call: memory the "
                 "allocator handed out is not (all) accessible",
                 signal_number, name, touching.what, touching.p, touching.length);
    else
        snprintf(detail, sizeof detail, "signal %d (%s) inside the last call", signal_number, name);
    report_failure(current_stream, "crash", detail);
    signal(signal_number, SIG_DFL);
    raise(signal_number);
}

static struct logged_call *log_call(struct stream *s, enum api api, size_t size, size_t count,
                                    size_t alignment, void *in) {
    struct logged_call *c = &s->log[s->log_next];
    s->log_next = (s->log_next + 1) % LOG_SIZE;
    *c = (struct logged_call){.op = s->op,
                              .api = (uint8_t)api,
                              .size = size,
                              .count = count,
                              .alignment = alignment,
                              .in = in,
                              .used = 1};
    s->calls++;
    s->digest = mix64(s->digest ^ (s->op << 4 | api)) + size * 3 + count * 5 + alignment * 7;
    return c;
}

// ---------------------------------------------------------------------------------------
// The calls. With FUZZ_SELFTEST_BUG each can plant one allocator bug in stream 0.

static struct record *record_at(uint32_t index) {
    return &records[index];
}

// FUZZ_SELFTEST_BUG=n plants bug n once, in stream 0, from op SELFTEST_FROM on.
#ifdef FUZZ_SELFTEST_BUG
static bool selftest_fired;
static bool selftest(struct stream *s, int bug) {
    if (FUZZ_SELFTEST_BUG != bug || selftest_fired || s->id != 0 || s->op < SELFTEST_FROM)
        return false;
    return true;
}
#define SELFTEST(n, condition) (selftest(s, (n)) && (condition) && (selftest_fired = true))
#else
#define SELFTEST(n, condition) ((void)s, false)
#endif

static void *call_malloc(struct stream *s, size_t n) {
    void *p = malloc(n);
    int saved = errno;
    // 1: a stray write into another live block; 4: a block that is still live handed out
    // again (p leaks); 5: a failure without ENOMEM.
    if (SELFTEST(1, p && s->live_count > 0 && records[s->live[0]].fill > 0))
        records[s->live[0]].p[records[s->live[0]].fill / 2] ^= 0x40;
    if (SELFTEST(4, p && s->live_count > 0 && n > 0 && n <= records[s->live[0]].fill &&
                        (uintptr_t)records[s->live[0]].p % 16 == 0))
        p = records[s->live[0]].p;
    errno = saved;
    if (SELFTEST(5, !p)) errno = 0;
    return p;
}

static void *call_calloc(struct stream *s, size_t count, size_t size) {
    void *p = calloc(count, size);
    if (SELFTEST(6, p && count * size > 0)) ((unsigned char *)p)[count * size - 1] = 1;
    return p;
}

static void *call_realloc(struct stream *s, void *p, size_t n) {
    if (SELFTEST(8, p && n >= HUGE_MIN)) return p; // "succeeds" with a huge size
    void *q = realloc(p, n);
    // 3: the copy of a moving realloc loses a byte.
    if (SELFTEST(3, p && q && q != p && n > 0)) ((unsigned char *)q)[0] ^= 1;
    return q;
}

static void *call_reallocarray(struct stream *s, void *p, size_t count, size_t size) {
    (void)s;
    return reallocarray(p, count, size);
}

// 2: aligned allocations 16 bytes off their alignment.
static int call_posix_memalign(struct stream *s, void **out, size_t alignment, size_t n) {
    int rc = posix_memalign(out, alignment, n);
    if (SELFTEST(2, rc == 0 && alignment >= 32)) *out = (char *)*out + 16;
    return rc;
}

static void *call_aligned_alloc(struct stream *s, size_t alignment, size_t n) {
    void *p = aligned_alloc(alignment, n);
    if (SELFTEST(2, p && alignment >= 32)) p = (char *)p + 16;
    return p;
}

static void *call_memalign(struct stream *s, size_t alignment, size_t n) {
    void *p = memalign(alignment, n);
    if (SELFTEST(2, p && alignment >= 32)) p = (char *)p + 16;
    return p;
}

// 7: malloc_usable_size understates the block.
static size_t call_usable(struct stream *s, void *p, size_t req) {
    size_t usable = malloc_usable_size(p);
    if (SELFTEST(7, p && req > 0)) return req - 1;
    (void)req;
    return usable;
}

// ---------------------------------------------------------------------------------------
// Patterns. Word i of a block with tag t is t + (i + 1) * K: distinct per word and per tag,
// one add per word, so that blocks up to 64 KiB can be filled and checked whole.

#define PATTERN_STEP 0x9e3779b97f4a7c15ULL

static inline uint64_t pattern_word(uint64_t tag, size_t word) {
    return tag + (word + 1) * PATTERN_STEP;
}

enum walk_mode { WALK_FILL, WALK_CHECK, WALK_CHECK_ZERO };

// Fills or checks bytes [from, to) (from a multiple of 8); on a mismatch returns false with
// the offset of the first wrong byte in *bad.
static bool walk_range(unsigned char *p, size_t from, size_t to, uint64_t tag, enum walk_mode mode,
                       size_t *bad) {
    if (from >= to) return true;
    uint64_t step = mode == WALK_CHECK_ZERO ? 0 : PATTERN_STEP;
    uint64_t first = mode == WALK_CHECK_ZERO ? 0 : pattern_word(tag, from / 8);
    size_t words = (to - from) / 8, rest = (to - from) % 8;
    unsigned char *q = p + from;
    uint64_t want = first;
    if (mode == WALK_FILL) {
        for (size_t w = 0; w < words; w++, want += step)
            memcpy(q + 8 * w, &want, 8);
        memcpy(q + 8 * words, &want, rest);
        return true;
    }
    uint64_t diff = 0;
    for (size_t w = 0; w < words; w++, want += step) {
        uint64_t have;
        memcpy(&have, q + 8 * w, 8);
        diff |= have ^ want;
    }
    uint64_t have = 0, last = want & (rest ? ~(uint64_t)0 >> (64 - 8 * rest) : 0);
    memcpy(&have, q + 8 * words, rest);
    diff |= have ^ last;
    if (diff == 0) return true;
    for (size_t i = 0; i < to - from; i++) { // find the first wrong byte
        uint64_t word = first + step * (i / 8);
        if (q[i] != (unsigned char)(word >> (8 * (i % 8)))) {
            *bad = from + i;
            return false;
        }
    }
    return true;
}

// The pattern's segments of a block of `length` bytes, cut at `clip`.
static bool walk_segments(unsigned char *p, size_t length, size_t clip, uint64_t tag,
                          enum walk_mode mode, size_t *bad) {
    if (clip > length) clip = length;
    if (length <= FULL_LIMIT) return walk_range(p, 0, clip, tag, mode, bad);
    if (!walk_range(p, 0, clip < EDGE ? clip : EDGE, tag, mode, bad)) return false;
    for (size_t off = STRIPE_STEP; off + STRIPE <= length - EDGE && off < clip; off += STRIPE_STEP)
        if (!walk_range(p, off, off + STRIPE < clip ? off + STRIPE : clip, tag, mode, bad))
            return false;
    size_t tail = (length - EDGE) & ~(size_t)7;
    return tail >= clip || walk_range(p, tail, clip, tag, mode, bad);
}

static bool walk(unsigned char *p, size_t length, size_t clip, uint64_t tag, enum walk_mode mode,
                 size_t *bad) {
    touching.what = mode == WALK_FILL ? "writing" : "reading";
    touching.p = p;
    touching.length = length;
    bool ok = walk_segments(p, length, clip, tag, mode, bad);
    touching.p = NULL;
    return ok;
}

static void check_contents(struct stream *s, const struct record *r, const char *when) {
    size_t bad = 0;
    if (!walk(r->p, r->fill, r->fill, r->tag, WALK_CHECK, &bad))
        fail(s, "contents",
             "%s: block %p (size %zu, from %s at op %" PRIu64 " of stream %u) changed at offset "
             "%zu: byte 0x%02x, expected 0x%02x",
             when, (void *)r->p, r->req, api_names[r->born_api], r->born_op, r->born_stream, bad,
             r->p[bad], (unsigned)((pattern_word(r->tag, bad / 8) >> (8 * (bad % 8))) & 0xff));
}

static void check_zero(struct stream *s, unsigned char *p, size_t n) {
    size_t bad = 0;
    touching.what = "reading";
    touching.p = p;
    touching.length = n;
    bool ok = n <= ZERO_FULL_LIMIT ? walk_range(p, 0, n, 0, WALK_CHECK_ZERO, &bad)
                                   : walk(p, n, n, 0, WALK_CHECK_ZERO, &bad);
    touching.p = NULL;
    if (!ok)
        fail(s, "calloc-zero", "calloc block %p (size %zu) not zero at offset %zu: 0x%02x",
             (void *)p, n, bad, p[bad]);
}

// ---------------------------------------------------------------------------------------
// The address index: every live block of every stream, ordered by address (a treap), so that
// a new block is checked against its two neighbours. A block leaves the index before it is
// freed or reallocated and enters after it was allocated: any two blocks in the index are
// live at the same time, and must not overlap.

static size_t extent_of(const struct record *r) {
    return r->fill > 0 ? r->fill : 1;
}

static uint32_t treap_insert(uint32_t root, uint32_t node) {
    if (root == NO_RECORD) return node;
    struct record *r = record_at(root), *n = record_at(node);
    if (n->p < r->p) {
        r->left = treap_insert(r->left, node);
        if (record_at(r->left)->priority > r->priority) { // rotate right
            uint32_t l = r->left;
            r->left = record_at(l)->right;
            record_at(l)->right = root;
            return l;
        }
    } else {
        r->right = treap_insert(r->right, node);
        if (record_at(r->right)->priority > r->priority) { // rotate left
            uint32_t rr = r->right;
            r->right = record_at(rr)->left;
            record_at(rr)->left = root;
            return rr;
        }
    }
    return root;
}

static uint32_t treap_merge(uint32_t a, uint32_t b) {
    if (a == NO_RECORD) return b;
    if (b == NO_RECORD) return a;
    if (record_at(a)->priority > record_at(b)->priority) {
        record_at(a)->right = treap_merge(record_at(a)->right, b);
        return a;
    }
    record_at(b)->left = treap_merge(a, record_at(b)->left);
    return b;
}

static uint32_t treap_remove(uint32_t root, uint32_t node, bool *found) {
    if (root == NO_RECORD) return NO_RECORD;
    if (root == node) {
        *found = true;
        return treap_merge(record_at(root)->left, record_at(root)->right);
    }
    struct record *r = record_at(root);
    if (record_at(node)->p < r->p)
        r->left = treap_remove(r->left, node, found);
    else
        r->right = treap_remove(r->right, node, found);
    return root;
}

// Inserts block `index` and checks it against its neighbours.
static void index_insert(struct stream *s, uint32_t index) {
    struct record *n = record_at(index);
    pthread_mutex_lock(&index_lock);
    uint32_t before = NO_RECORD, after = NO_RECORD;
    for (uint32_t at = index_root; at != NO_RECORD;) {
        struct record *r = record_at(at);
        if (r->p <= n->p) {
            before = at;
            at = r->right;
        } else {
            after = at;
            at = r->left;
        }
    }
    uint32_t other = NO_RECORD;
    if (before != NO_RECORD && record_at(before)->p + extent_of(record_at(before)) > n->p)
        other = before;
    else if (after != NO_RECORD && n->p + extent_of(n) > record_at(after)->p)
        other = after;
    if (other != NO_RECORD) {
        struct record copy = *record_at(other);
        pthread_mutex_unlock(&index_lock);
        fail(s, "overlap",
             "new block [%p, +%zu) from %s overlaps live block [%p, +%zu) from %s at op %" PRIu64
             " of stream %u",
             (void *)n->p, extent_of(n), api_names[n->born_api], (void *)copy.p, extent_of(&copy),
             api_names[copy.born_api], copy.born_op, copy.born_stream);
    }
    index_random = index_random * 6364136223846793005ULL + 1442695040888963407ULL;
    n->priority = (uint32_t)(index_random >> 33);
    n->left = n->right = NO_RECORD;
    index_root = treap_insert(index_root, index);
    pthread_mutex_unlock(&index_lock);
}

static void index_remove(struct stream *s, uint32_t index) {
    bool found = false;
    pthread_mutex_lock(&index_lock);
    index_root = treap_remove(index_root, index, &found);
    pthread_mutex_unlock(&index_lock);
    if (!found) fail(s, "internal", "block %p missing from the index", (void *)record_at(index)->p);
}

static uint32_t record_new(struct stream *s) {
    pthread_mutex_lock(&index_lock);
    uint32_t index = record_free_head;
    if (index != NO_RECORD)
        record_free_head = record_at(index)->next_free;
    else if (record_fresh < MAX_RECORDS)
        index = record_fresh++;
    pthread_mutex_unlock(&index_lock);
    if (index == NO_RECORD) fail(s, "internal", "out of shadow records");
    return index;
}

static void record_release(uint32_t index) {
    pthread_mutex_lock(&index_lock);
    record_at(index)->next_free = record_free_head;
    record_free_head = index;
    pthread_mutex_unlock(&index_lock);
}

// ---------------------------------------------------------------------------------------
// What glibc does: the model.

static bool is_power_of_two(size_t x) {
    return x != 0 && (x & (x - 1)) == 0;
}

static size_t round_up_power_of_two(size_t x) {
    if (x <= 1) return 1;
    return (size_t)1 << (64 - __builtin_clzl(x - 1));
}

// The alignment every block of n bytes has: 16 from 16 bytes up (glibc on x86-64), else the
// largest power of two not above n (what an object of that size can need).
static size_t fundamental_alignment(size_t n) {
    if (n >= 16) return 16;
    if (n == 0) return 1;
    return (size_t)1 << (63 - __builtin_clzl(n));
}

struct expect {
    bool may_succeed, may_fail;
    int err;         // errno after a failure (strict mode)
    int rc;          // posix_memalign's return value after a failure
    size_t align;    // alignment of a success
    size_t req;      // the block's size after a success
    bool zero_frees; // realloc(p, 0): NULL means p was freed
};

static struct expect expect_success(size_t n, size_t align) {
    size_t fundamental = fundamental_alignment(n);
    return (struct expect){
        .may_succeed = true, .align = align > fundamental ? align : fundamental, .req = n};
}

static struct expect expect_failure(int err, int rc) {
    return (struct expect){.may_fail = true, .err = portable_mode ? ERRNO_ANY : err, .rc = rc};
}

// mimalloc 2.0.9 (Debian 12's) returns blocks aligned to only 128 bytes from aligned
// allocations of alignment 256, 512 or 1024 with a size that is a multiple of the alignment up
// to 1 KiB (microsoft/mimalloc#700, fixed upstream in 2023). --mimalloc-issue-700 exempts
// exactly these calls from the alignment check, so the reference run can look for other bugs.
static bool known_misaligned(size_t alignment, size_t n) {
    return alignment >= 256 && alignment <= 1024 && n > 0 && n <= 1024 && n % alignment == 0;
}

// memalign and aligned_alloc (one function in glibc 2.36).
static struct expect expect_memalign(enum api api, size_t alignment, size_t n) {
    if (api == API_ALIGNED_ALLOC && aligned_alloc_c17 && !is_power_of_two(alignment))
        return expect_failure(EINVAL, 0);
    if (alignment > SIZE_MAX / 2 + 1) return expect_failure(EINVAL, 0);
    size_t rounded = round_up_power_of_two(alignment);
    if (rounded >= (size_t)1 << 62 || n >= HUGE_MIN) return expect_failure(ENOMEM, 0);
    struct expect e = expect_success(n, rounded);
    if (mimalloc_issue_700 && known_misaligned(rounded, n)) e.align = fundamental_alignment(n);
    if (portable_mode && !is_power_of_two(alignment)) e.may_fail = true; // 0 included
    return e;
}

static struct expect expect_allocation(enum api api, size_t n, size_t count, size_t alignment) {
    struct expect e;
    switch (api) {
    case API_CALLOC:
    case API_REALLOCARRAY: // (from NULL)
        if (__builtin_mul_overflow(count, n, &n)) return expect_failure(ENOMEM, 0);
        e = n >= HUGE_MIN ? expect_failure(ENOMEM, 0) : expect_success(n, 1);
        break;
    case API_POSIX_MEMALIGN:
        if (alignment % sizeof(void *) != 0 || !is_power_of_two(alignment))
            return expect_failure(ERRNO_UNCHANGED, EINVAL);
        if (alignment >= (size_t)1 << 62 || n >= HUGE_MIN) return expect_failure(ENOMEM, ENOMEM);
        e = expect_success(n, alignment);
        if (mimalloc_issue_700 && known_misaligned(alignment, n))
            e.align = fundamental_alignment(n);
        break;
    case API_ALIGNED_ALLOC:
    case API_MEMALIGN:
        e = expect_memalign(api, alignment, n);
        break;
    case API_VALLOC:
        e = n >= HUGE_MIN ? expect_failure(ENOMEM, 0) : expect_success(n, PAGE);
        break;
    case API_PVALLOC:
        if (n >= HUGE_MIN) return expect_failure(ENOMEM, 0);
        e = expect_success(n ? (n + PAGE - 1) & ~(PAGE - 1) : 0, PAGE);
        break;
    default: // malloc, realloc from NULL
        e = n >= HUGE_MIN ? expect_failure(ENOMEM, 0) : expect_success(n, 1);
    }
    if (portable_mode && e.may_succeed && e.req == 0) e.may_fail = true;
    return e;
}

// realloc(p, n) and reallocarray(p, count, n) of a live block.
static struct expect expect_resize(enum api api, size_t n, size_t count) {
    if (api == API_REALLOCARRAY && __builtin_mul_overflow(count, n, &n))
        return expect_failure(ENOMEM, 0);
    if (n == 0) {
        struct expect e = {.may_fail = true, .err = ERRNO_ANY, .zero_frees = true};
        if (portable_mode) e.may_succeed = true, e.align = 1;
        return e;
    }
    if (n >= HUGE_MIN) return expect_failure(ENOMEM, 0);
    return expect_success(n, 1);
}

static void check_errno(struct stream *s, const char *what, int err, const struct expect *e) {
    if (e->err == ERRNO_ANY) return;
    int want = e->err == ERRNO_UNCHANGED ? ERRNO_SENTINEL : e->err;
    if (err != want)
        fail(s, "errno", "%s failed with errno %s, glibc leaves errno %s", what, errno_name(err),
             errno_name(want));
}

// ---------------------------------------------------------------------------------------
// Sizes and alignments.

static size_t edge_size(struct stream *s) {
    static const size_t landmarks[] = {
        0,       1,        7,         8,        15,         16,        17,     1024, 1025,
        8192,    32 << 10, 32768 + 1, 65536,    128 << 10,  256 << 10, 262145, MiB,  2 * MiB,
        4 * MiB, 8 * MiB,  16 * MiB,  32 * MiB, 768,        640,       896,    512,  513,
        4095,    4096,     4097,      16384,    131072 + 1, 1280,      1536,   1792, 2048 + 1,
        229376,  196608,   10240,     40960,    81920,      163840,
    };
    uint64_t r = next_random(s);
    size_t base;
    switch (r % 6) {
    case 0:
        base = (size_t)1 << ((r >> 8) % 26); // 1 B .. 32 MiB
        break;
    case 1:
        base = 16 * (1 + (r >> 8) % 64); // 16 B .. 1 KiB
        break;
    case 2:
        base = PAGE * (1 + (r >> 8) % 64); // 4 KiB .. 256 KiB
        break;
    case 3:
        base = landmarks[(r >> 8) % (sizeof landmarks / sizeof landmarks[0])];
        break;
    case 4: { // 5/4, 6/4, 7/4 of a power of two: four classes per power of two
        size_t power = (size_t)1 << (3 + (r >> 8) % 20);
        base = power + power / 4 * (1 + (r >> 16) % 3);
        break;
    }
    default:
        base = 256 * (4 + (r >> 8) % 1021); // mid classes: multiples of 256 B to 256 KiB
    }
    int delta = (int)((r >> 40) % 3) - 1;
    if (base == 0 && delta < 0) delta = 0;
    return base + (size_t)(ptrdiff_t)delta;
}

static size_t log_uniform(struct stream *s, size_t low, size_t high) {
    uint64_t r = next_random(s);
    unsigned low_bits = 63u - (unsigned)__builtin_clzl(low);
    unsigned high_bits = 63u - (unsigned)__builtin_clzl(high);
    unsigned bits = low_bits + (unsigned)(r % (high_bits - low_bits + 1));
    size_t n = ((size_t)1 << bits) + (size_t)((r >> 8) % ((size_t)1 << bits));
    return n < low ? low : n > high ? high : n;
}

static size_t fit_budget(struct stream *s, size_t n) {
    return s->held + n > STREAM_BUDGET ? n % 1024 : n;
}

static size_t pick_size(struct stream *s) {
    unsigned r = (unsigned)(next_random(s) % 1000);
    size_t n;
    if (r < 380)
        n = (size_t)(next_random(s) % 1025); // every tiny class
    else if (r < 630)
        n = edge_size(s);
    else if (r < 800)
        n = log_uniform(s, 1025, 256 << 10); // mid classes
    else if (r < 940)
        n = 256 + (size_t)(next_random(s) % 8192);
    else if (r < 990)
        n = log_uniform(s, 256 << 10, 4 * MiB); // large
    else
        n = log_uniform(s, MiB, 32 * MiB);
    return fit_budget(s, n);
}

// Sizes no allocator can serve.
static size_t huge_size(struct stream *s) {
    uint64_t r = next_random(s);
    size_t k = (size_t)(r >> 8) % 65536;
    switch (r % 6) {
    case 0:
        return SIZE_MAX - k;
    case 1:
        return (size_t)PTRDIFF_MAX - k;
    case 2:
        return (size_t)PTRDIFF_MAX + 1 + k;
    case 3:
        return HUGE_MIN + (size_t)(r >> 8);
    case 4:
        return SIZE_MAX - PAGE + 1 + k % PAGE; // pvalloc's rounding overflows
    default:
        return SIZE_MAX / 2 - k;
    }
}

// A count and size whose product overflows or is huge.
static void huge_pair(struct stream *s, size_t *count, size_t *size) {
    uint64_t r = next_random(s);
    switch (r % 5) {
    case 0:
        *count = SIZE_MAX / 2 + 1 + (r >> 8) % 1000, *size = 2;
        break;
    case 1:
        *count = (size_t)1 << 32, *size = ((size_t)1 << 32) + (r >> 8) % 1000;
        break;
    case 2:
        *count = (size_t)1 << 31, *size = (size_t)1 << 31; // 2^62: no overflow, huge
        break;
    case 3:
        *count = 1, *size = huge_size(s);
        break;
    default:
        *count = huge_size(s), *size = 1 + (r >> 8) % 64;
    }
}

static size_t valid_alignment(struct stream *s, size_t minimum) {
    uint64_t r = next_random(s);
    unsigned r1000 = (unsigned)(r % 1000);
    unsigned bits = r1000 < 700   ? (unsigned)(r >> 16) % 13      // 1 .. 4 KiB
                    : r1000 < 950 ? 13 + (unsigned)(r >> 16) % 4  // 8 .. 64 KiB
                                  : 17 + (unsigned)(r >> 16) % 6; // 128 KiB .. 4 MiB
    size_t a = (size_t)1 << bits;
    return a < minimum ? minimum : a;
}

// Alignments that are no power of two, or too large to serve.
static size_t odd_alignment(struct stream *s) {
    static const size_t odd[] = {0, 1, 2, 3, 4, 5, 12, 24, 48, 96, 100, 4095, 4097, 12345};
    uint64_t r = next_random(s);
    switch (r % 5) {
    case 0:
        return odd[(r >> 8) % (sizeof odd / sizeof odd[0])];
    case 1:
        return ((size_t)1 << (4 + (r >> 8) % 20)) + 8 * (1 + (r >> 32) % 4); // 2^k + 8m
    case 2:
        return (size_t)1 << (62 + (r >> 8) % 2); // 2^62, 2^63: powers of two, unservable
    case 3:
        return SIZE_MAX / 2 + 2 + (r >> 8) % 1000; // > 2^63
    default:
        return SIZE_MAX - (r >> 8) % 16;
    }
}

// ---------------------------------------------------------------------------------------
// The block table of a stream.

static void live_add(struct stream *s, uint32_t index) {
    s->live[s->live_count++] = index;
    s->held += record_at(index)->req;
}

static uint32_t live_take(struct stream *s, size_t slot) {
    uint32_t index = s->live[slot];
    s->live[slot] = s->live[--s->live_count];
    s->held -= record_at(index)->req;
    return index;
}

static size_t live_pick(struct stream *s) {
    return (size_t)(next_random(s) % s->live_count);
}

// Of a few live blocks, the largest: realloc to a huge size should meet large blocks.
static size_t live_pick_large(struct stream *s) {
    size_t best = live_pick(s);
    for (int i = 0; i < 8; i++) {
        size_t other = live_pick(s);
        if (record_at(s->live[other])->req > record_at(s->live[best])->req) best = other;
    }
    return best;
}

// A new block (also the result of a realloc, `old` being the block before it): alignment,
// usable size (every other block), calloc zero, overlap with every other live block, the
// bytes a realloc keeps, then the pattern; the block joins the stream's table (at the end).
static void accept_block(struct stream *s, enum api api, void *p, const struct expect *e,
                         bool zeroed, const struct record *old) {
    unsigned char *b = p;
    if ((uintptr_t)b % e->align != 0)
        fail(s, "alignment", "%s returned %p for %zu bytes: not %zu-aligned", api_names[api], p,
             e->req, e->align);
    uint32_t index = record_new(s);
    struct record *r = record_at(index);
    *r = (struct record){.p = b,
                         .req = e->req,
                         .fill = e->req,
                         .tag = mix64(s->seed ^ mix64(s->op << 8 ^ (s->calls & 0xff))),
                         .born_op = s->op,
                         .born_stream = (uint16_t)s->id,
                         .born_api = (uint8_t)api};
    if (next_random(s) % 2 == 0) {
        struct logged_call *c = log_call(s, API_USABLE, e->req, 0, 0, p);
        size_t usable = call_usable(s, p, e->req);
        c->rc = (int)usable;
        if (usable < e->req)
            fail(s, "usable-size", "malloc_usable_size(%p) = %zu < %zu requested from %s", p,
                 usable, e->req, api_names[api]);
        r->usable = usable;
        r->fill = usable;
    }
    if (zeroed) check_zero(s, b, e->req);
    index_insert(s, index);
    size_t bad = 0;
    if (old) {
        size_t kept = old->req < e->req ? old->req : e->req;
        if (!walk(b, old->fill, kept, old->tag, WALK_CHECK, &bad))
            fail(s, "realloc-preserve",
                 "%s moved a %zu-byte block from %p to %p (new size %zu) and byte %zu of the %zu "
                 "kept differs: 0x%02x, expected 0x%02x",
                 api_names[api], old->req, (void *)old->p, p, e->req, bad, kept, b[bad],
                 (unsigned)((pattern_word(old->tag, bad / 8) >> (8 * (bad % 8))) & 0xff));
    }
    walk(b, r->fill, r->fill, r->tag, WALK_FILL, &bad);
    live_add(s, index);
}

static void describe_call(char *out, size_t size, enum api api, size_t n, size_t count,
                          size_t alignment) {
    if (api == API_CALLOC || api == API_REALLOCARRAY)
        snprintf(out, size, "%s(%s%zu, %zu)", api_names[api],
                 api == API_REALLOCARRAY ? "NULL, " : "", count, n);
    else if (api == API_POSIX_MEMALIGN || api == API_ALIGNED_ALLOC || api == API_MEMALIGN)
        snprintf(out, size, "%s(%s%zu, %zu)", api_names[api],
                 api == API_POSIX_MEMALIGN ? "&out, " : "", alignment, n);
    else
        snprintf(out, size, "%s(%s%zu)", api_names[api], api == API_REALLOC ? "NULL, " : "", n);
}

static void describe_resize(char *out, size_t size, enum api api, const struct record *old,
                            size_t n, size_t count) {
    if (api == API_REALLOCARRAY)
        snprintf(out, size, "reallocarray(%p, %zu, %zu) of a %zu-byte block", (void *)old->p, count,
                 n, old->req);
    else
        snprintf(out, size, "realloc(%p, %zu) of a %zu-byte block", (void *)old->p, n, old->req);
}

// One call of an allocating function (realloc and reallocarray from NULL included).
static void do_allocate(struct stream *s, enum api api, size_t n, size_t count, size_t alignment) {
    struct expect e = expect_allocation(api, n, count, alignment);
    struct logged_call *c = log_call(s, api, n, count, alignment, NULL);
    void *const out_sentinel = (void *)(uintptr_t)0x5eed0;
    void *p = NULL;
    int rc = 0;
    errno = ERRNO_SENTINEL;
    switch (api) {
    case API_MALLOC:
        p = call_malloc(s, n);
        break;
    case API_CALLOC:
        p = call_calloc(s, count, n);
        break;
    case API_REALLOC:
        p = call_realloc(s, NULL, n);
        break;
    case API_REALLOCARRAY:
        p = call_reallocarray(s, NULL, count, n);
        break;
    case API_POSIX_MEMALIGN:
        p = out_sentinel;
        rc = call_posix_memalign(s, &p, alignment, n);
        break;
    case API_ALIGNED_ALLOC:
        p = call_aligned_alloc(s, alignment, n);
        break;
    case API_MEMALIGN:
        p = call_memalign(s, alignment, n);
        break;
    case API_VALLOC:
        p = valloc(n);
        break;
    default:
        p = pvalloc(n);
    }
    int err = errno;
    c->out = p, c->err = err, c->rc = rc;
    char what_text[160];
#define what (describe_call(what_text, sizeof what_text, api, n, count, alignment), what_text)
    if (api == API_POSIX_MEMALIGN) {
        if (rc != 0) {
            if (!e.may_fail)
                fail(s, "unexpected-failure", "%s returned %d (errno %s), glibc succeeds", what, rc,
                     errno_name(err));
            if (e.rc != 0 && rc != e.rc)
                fail(s, "return-value", "%s returned %d, glibc returns %d", what, rc, e.rc);
            if (p != out_sentinel)
                fail(s, "out-pointer", "%s failed but changed *out to %p", what, p);
            check_errno(s, what, err, &e);
            return;
        }
        // POSIX: for size 0, *out may be NULL (mimalloc does so even for alignment 2^62).
        if (p == NULL && n == 0 && portable_mode) return;
        if (!e.may_succeed)
            fail(s, "unexpected-success", "%s returned 0 and %p, glibc returns %d", what, p, e.rc);
        if (p == NULL) {
            if (!e.may_fail) fail(s, "unexpected-null", "%s returned 0 but *out = NULL", what);
            return;
        }
    } else if (p == NULL) {
        if (!e.may_fail)
            fail(s, "unexpected-null", "%s returned NULL (errno %s), glibc succeeds", what,
                 errno_name(err));
        check_errno(s, what, err, &e);
        return;
    } else if (!e.may_succeed) {
        fail(s, "unexpected-success", "%s returned %p, glibc fails (errno %s)", what, p,
             errno_name(e.err));
    }
    accept_block(s, api, p, &e, api == API_CALLOC, NULL);
#undef what
}

static void do_free(struct stream *s, size_t slot) {
    uint32_t index = live_take(s, slot);
    struct record *r = record_at(index);
    struct logged_call *c = log_call(s, API_FREE, r->req, 0, 0, r->p);
    check_contents(s, r, "before free");
    index_remove(s, index);
    errno = ERRNO_SENTINEL;
    free(r->p);
    c->err = errno;
    if (c->err != ERRNO_SENTINEL)
        fail(s, "errno", "free(%p) of a %zu-byte block changed errno to %d", (void *)r->p, r->req,
             c->err);
    record_release(index);
}

#define FREED SIZE_MAX

// realloc(p, n) or reallocarray(p, count, n) of live block `slot`. Returns the block's slot
// afterwards (the last one when it moved or was resized), or FREED.
static size_t do_resize(struct stream *s, size_t slot, enum api api, size_t n, size_t count) {
    uint32_t index = s->live[slot];
    struct record *r = record_at(index);
    struct expect e = expect_resize(api, n, count);
    struct logged_call *c = log_call(s, api, n, count, 0, r->p);
    check_contents(s, r, "before realloc");
    const struct record old = *r;
    char what_text[160];
#define what (describe_resize(what_text, sizeof what_text, api, &old, n, count), what_text)
    index_remove(s, index);
    errno = ERRNO_SENTINEL;
    void *q =
        api == API_REALLOCARRAY ? call_reallocarray(s, r->p, count, n) : call_realloc(s, r->p, n);
    int err = errno;
    c->out = q, c->err = err;
    if (q == NULL) {
        if (!e.may_fail)
            fail(s, "unexpected-null", "%s returned NULL (errno %s), glibc succeeds", what,
                 errno_name(err));
        if (e.zero_frees) { // glibc: p was freed
            live_take(s, slot);
            record_release(index);
            return FREED;
        }
        check_errno(s, what, err, &e);
        index_insert(s, index);
        check_contents(s, r, "after a failed realloc (the old block must stay intact)");
        return slot;
    }
    if (!e.may_succeed)
        fail(s, "unexpected-success", "%s returned %p, glibc %s", what, q,
             e.zero_frees ? "frees the block and returns NULL (--portable accepts a new block)"
                          : "fails with ENOMEM and leaves the block alone");
    live_take(s, slot);
    accept_block(s, api, q, &e, false, &old);
    record_release(index);
    return s->live_count - 1;
#undef what
}

// ---------------------------------------------------------------------------------------
// The ops.

static void op_usable(struct stream *s) {
    if (s->live_count == 0 || next_random(s) % 16 == 0) {
        struct logged_call *c = log_call(s, API_USABLE, 0, 0, 0, NULL);
        size_t usable = call_usable(s, NULL, 0);
        c->rc = (int)usable;
        if (usable != 0) fail(s, "usable-size", "malloc_usable_size(NULL) = %zu", usable);
        return;
    }
    struct record *r = record_at(s->live[live_pick(s)]);
    struct logged_call *c = log_call(s, API_USABLE, r->req, 0, 0, r->p);
    check_contents(s, r, "before malloc_usable_size");
    size_t usable = call_usable(s, r->p, r->req);
    c->rc = (int)usable;
    if (usable < r->req)
        fail(s, "usable-size", "malloc_usable_size(%p) = %zu < %zu requested", (void *)r->p, usable,
             r->req);
    if (r->usable != 0 && usable != r->usable)
        fail(s, "usable-size", "malloc_usable_size(%p) = %zu, was %zu for the same block",
             (void *)r->p, usable, r->usable);
    r->usable = usable;
    check_contents(s, r, "after malloc_usable_size");
}

// malloc_trim(0) gives free memory back to the kernel (in other threads' streams blocks are
// being allocated and freed meanwhile): it returns 0 or 1, and no live block loses a byte.
static void op_trim(struct stream *s) {
    struct logged_call *c = log_call(s, API_TRIM, 0, 0, 0, NULL);
    int rc = malloc_trim(0);
    c->rc = rc;
    if (rc != 0 && rc != 1) fail(s, "trim", "malloc_trim(0) = %d", rc);
    for (size_t i = 0; i < s->live_count; i++)
        check_contents(s, record_at(s->live[i]), "after malloc_trim");
}

static void op_check(struct stream *s) {
    if (s->live_count == 0) return;
    struct record *r = record_at(s->live[live_pick(s)]);
    log_call(s, API_CHECK, r->req, 0, 0, r->p);
    check_contents(s, r, "check");
}

// A new size for a live block of `old` bytes.
static size_t resize_target(struct stream *s, size_t old) {
    uint64_t r = next_random(s);
    switch (r % 20) {
    case 0:
        return 0;
    case 1:
    case 2:
        return old; // same size
    case 3:
    case 4:
    case 5: { // a few bytes either way: in-place growth and shrink
        size_t delta = 1 + (size_t)(r >> 8) % 64;
        return (r >> 20) % 2 && old > delta ? old - delta : fit_budget(s, old + delta);
    }
    default:
        return pick_size(s);
    }
}

static void op_realloc(struct stream *s, enum api api) {
    uint64_t r = next_random(s);
    if (s->live_count == 0 || r % 20 == 0) { // from NULL: an allocation
        size_t n = pick_size(s), count = 1 + (size_t)(r >> 8) % 4;
        if (api == API_REALLOCARRAY) n /= count;
        do_allocate(s, api, n, count, 0);
        return;
    }
    size_t slot = live_pick(s);
    size_t n = resize_target(s, record_at(s->live[slot])->req);
    size_t count = 1;
    if (api == API_REALLOCARRAY) {
        count = 1 + (size_t)(r >> 8) % 8;
        n /= count;
    }
    do_resize(s, slot, api, n, count);
}

// Sizes in one of four tiers: tiny (<= 1 KiB), mid (<= 32 KiB), mid on larger pages
// (<= 256 KiB), large; half of them on a tier's edge.
static size_t tier_size(struct stream *s, int tier) {
    static const size_t bounds[5] = {0, 1024, 32 << 10, 256 << 10, 4 * MiB};
    uint64_t r = next_random(s);
    size_t low = bounds[tier], high = bounds[tier + 1];
    if (r % 2) return (r >> 8) % 2 ? low + 1 : high; // the first and last size of the tier
    if (tier == 3 && (r >> 8) % 8 == 0) high = 32 * MiB;
    return low + 1 + (size_t)((r >> 16) % (high - low));
}

static int tier_of(size_t n) {
    return n <= 1024 ? 0 : n <= (32 << 10) ? 1 : n <= (256 << 10) ? 2 : 3;
}

// One block reallocated many times, up and down the tiers and back.
static void op_chain(struct stream *s) {
    size_t slot;
    if (s->live_count == 0 || next_random(s) % 4 == 0) {
        do_allocate(s, API_MALLOC, 1 + (size_t)(next_random(s) % 1024), 0, 0);
        slot = s->live_count - 1;
    } else {
        slot = live_pick(s);
    }
    int tier = tier_of(record_at(s->live[slot])->req);
    int steps = 4 + (int)(next_random(s) % 12);
    for (int i = 0; i < steps && slot != FREED; i++) {
        uint64_t r = next_random(s);
        if (r % 4 != 0) tier += (r >> 8) % 2 ? 1 : -1;
        tier = tier < 0 ? 1 : tier > 3 ? 2 : tier;
        size_t n = fit_budget(s, tier_size(s, tier));
        slot = do_resize(s, slot, (r >> 16) % 4 == 0 ? API_REALLOCARRAY : API_REALLOC, n, 1);
    }
}

// A call that must fail: a huge size, an overflowing count, an unservable alignment.
static void op_huge(struct stream *s) {
    uint64_t r = next_random(s);
    size_t count = 0, size = 0;
    switch (r % 9) {
    case 0:
        do_allocate(s, API_MALLOC, huge_size(s), 0, 0);
        break;
    case 1:
        huge_pair(s, &count, &size);
        do_allocate(s, API_CALLOC, size, count, 0);
        break;
    case 2:
        if (s->live_count == 0)
            do_allocate(s, API_REALLOC, huge_size(s), 0, 0);
        else
            do_resize(s, live_pick_large(s), API_REALLOC, huge_size(s), 1);
        break;
    case 3:
        huge_pair(s, &count, &size);
        if (s->live_count == 0)
            do_allocate(s, API_REALLOCARRAY, size, count, 0);
        else
            do_resize(s, live_pick_large(s), API_REALLOCARRAY, size, count);
        break;
    case 4:
    case 5:
    case 6: {
        enum api api = r % 9 == 4   ? API_POSIX_MEMALIGN
                       : r % 9 == 5 ? API_ALIGNED_ALLOC
                                    : API_MEMALIGN;
        if ((r >> 8) % 2)
            do_allocate(s, api, huge_size(s), 0, valid_alignment(s, sizeof(void *)));
        else
            do_allocate(s, api, (size_t)(next_random(s) % 4096), 0,
                        (size_t)1 << (62 + (r >> 9) % 2));
        break;
    }
    case 7:
        do_allocate(s, API_VALLOC, huge_size(s), 0, 0);
        break;
    default:
        do_allocate(s, API_PVALLOC, huge_size(s), 0, 0);
    }
}

static void op_odd_alignment(struct stream *s) {
    uint64_t r = next_random(s);
    enum api api = r % 3 == 0 ? API_POSIX_MEMALIGN : r % 3 == 1 ? API_ALIGNED_ALLOC : API_MEMALIGN;
    do_allocate(s, api, fit_budget(s, (size_t)(r >> 8) % 2048), 0, odd_alignment(s));
}

static void op_aligned(struct stream *s, enum api api) {
    size_t alignment = valid_alignment(s, api == API_POSIX_MEMALIGN ? sizeof(void *) : 1);
    do_allocate(s, api, pick_size(s), 0, alignment);
}

// A worker hands one of its blocks to the exchange array and takes what was there, which
// another thread allocated: checks it, then frees it, reallocs it or keeps it.
static void op_exchange(struct stream *s) {
    uint32_t give = NO_RECORD;
    if (s->live_count > 0 && next_random(s) % 4 != 0) {
        size_t slot = live_pick(s);
        struct record *r = record_at(s->live[slot]);
        log_call(s, API_GIVE, r->req, 0, 0, r->p);
        check_contents(s, r, "before handing the block to another thread");
        give = live_take(s, slot);
    }
    uint32_t got = atomic_exchange(&exchange[next_random(s) % EXCHANGE_SLOTS], give);
    if (got == NO_RECORD) return;
    struct record *r = record_at(got);
    log_call(s, API_TAKE, r->req, 0, 0, r->p);
    check_contents(s, r, "received from another thread");
    live_add(s, got);
    unsigned what = (unsigned)(next_random(s) % 10);
    if (what < 4) {
        if (r->born_stream != s->id) s->cross_frees++;
        do_free(s, s->live_count - 1);
    } else if (what < 7) {
        if (r->born_stream != s->id) s->cross_reallocs++;
        do_resize(s, s->live_count - 1, API_REALLOC, resize_target(s, r->req), 0);
    }
}

static void step(struct stream *s) {
    if (s->live_count >= MAX_LIVE - 1 || s->held > STREAM_BUDGET) {
        if (next_random(s) % 16 == 0) { // free about half
            for (size_t i = s->live_count; i-- > 0;)
                if (next_random(s) % 2) do_free(s, i);
        } else {
            do_free(s, live_pick(s));
        }
        return;
    }
    unsigned r = (unsigned)(next_random(s) % 1000);
    if (r < 150) {
        do_allocate(s, API_MALLOC, pick_size(s), 0, 0);
    } else if (r < 200) {
        size_t n = pick_size(s), count = next_random(s) % 3 ? 1 + (size_t)(next_random(s) % 8) : 1;
        do_allocate(s, API_CALLOC, n / count, count, 0);
    } else if (r < 310) {
        op_realloc(s, API_REALLOC);
    } else if (r < 350) {
        op_realloc(s, API_REALLOCARRAY);
    } else if (r < 510) {
        if (s->live_count == 0 || r < 355) {
            log_call(s, API_FREE, 0, 0, 0, NULL);
            errno = ERRNO_SENTINEL;
            free(NULL);
            if (errno != ERRNO_SENTINEL) fail(s, "errno", "free(NULL) changed errno to %d", errno);
        } else {
            do_free(s, live_pick(s));
        }
    } else if (r < 550) {
        op_aligned(s, API_POSIX_MEMALIGN);
    } else if (r < 580) {
        op_aligned(s, API_ALIGNED_ALLOC);
    } else if (r < 610) {
        op_aligned(s, API_MEMALIGN);
    } else if (r < 625) {
        do_allocate(s, API_VALLOC, pick_size(s), 0, 0);
    } else if (r < 640) {
        do_allocate(s, API_PVALLOC, pick_size(s), 0, 0);
    } else if (r < 670) {
        op_usable(s);
    } else if (r < 690) {
        op_check(s);
    } else if (r < 705) {
        op_chain(s);
    } else if (r < 745) {
        op_huge(s);
    } else if (r < 770) {
        op_odd_alignment(s);
    } else if (r < 772 && s->live_count > 0) {
        for (size_t i = s->live_count; i-- > 0;) // free about half
            if (next_random(s) % 2) do_free(s, i);
    } else if (r == 772) {
        op_trim(s);
    } else if (s->exchanges && r >= 900) {
        op_exchange(s);
    } else if (r % 2) {
        do_allocate(s, API_MALLOC, (size_t)(next_random(s) % 1025), 0, 0);
    } else if (s->live_count > 0) {
        do_free(s, live_pick(s));
    }
}

// ---------------------------------------------------------------------------------------
// Streams and the run.

static double seconds_since(const struct timespec *start) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)(now.tv_sec - start->tv_sec) + (double)(now.tv_nsec - start->tv_nsec) / 1e9;
}

static bool past_deadline(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return now.tv_sec > deadline.tv_sec ||
           (now.tv_sec == deadline.tv_sec && now.tv_nsec >= deadline.tv_nsec);
}

static void run_stream(struct stream *s) {
    current_stream = s;
    for (;;) {
        if (s->op_limit && s->op >= s->op_limit) break;
        if (run_seconds > 0 && s->op % 128 == 0 && past_deadline()) break;
        step(s);
        s->op++;
    }
    s->cleaning = true;
    while (s->live_count > 0)
        do_free(s, s->live_count - 1);
}

static void *worker_main(void *arg) {
    run_stream(arg);
    return NULL;
}

static uint64_t time_seed(void) {
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    return mix64(((uint64_t)now.tv_sec * 1000000000ULL + (uint64_t)now.tv_nsec) ^ (uint64_t)getpid()
                                                                                      << 40);
}

// One run: stream 0 here, the workers in their threads, then what is left in the exchange
// array (blocks whose allocating threads are gone) is checked and freed here.
static uint64_t run_one_seed(uint64_t seed) {
    run_seed = seed;
    for (size_t i = 0; i < EXCHANGE_SLOTS; i++)
        atomic_store(&exchange[i], NO_RECORD);
    for (int i = 0; i <= thread_count; i++) {
        struct stream *s = &streams[i];
        memset(s, 0, sizeof *s);
        s->id = i;
        s->seed = stream_seed(seed, i);
        s->random = s->seed;
        s->op_limit = ops_per_stream;
        s->exchanges = i > 0;
    }
    printf("fuzz_api: seed 0x%" PRIx64 " threads=%d", seed, thread_count);
    if (thread_count > 0) {
        printf(" stream seeds:");
        for (int i = 0; i <= thread_count; i++)
            printf(" %d=0x%" PRIx64, i, streams[i].seed);
    }
    printf("\n");
    fflush(stdout);
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    if (run_seconds > 0) {
        double whole = (double)(long)run_seconds;
        deadline.tv_sec += (time_t)whole;
        deadline.tv_nsec += (long)((run_seconds - whole) * 1e9);
        if (deadline.tv_nsec >= 1000000000L) deadline.tv_sec++, deadline.tv_nsec -= 1000000000L;
    }
    for (int i = 1; i <= thread_count; i++)
        if (pthread_create(&streams[i].thread, NULL, worker_main, &streams[i]) != 0) {
            fprintf(stderr, "fuzz_api: pthread_create failed\n");
            exit(2);
        }
    run_stream(&streams[0]);
    for (int i = 1; i <= thread_count; i++)
        pthread_join(streams[i].thread, NULL);
    struct stream *s = &streams[thread_count > 0 ? 1 : 0]; // reports the drain as threaded
    current_stream = s;
    for (size_t i = 0; i < EXCHANGE_SLOTS; i++) {
        uint32_t got = atomic_exchange(&exchange[i], NO_RECORD);
        if (got == NO_RECORD) continue;
        struct record *r = record_at(got);
        log_call(s, API_TAKE, r->req, 0, 0, r->p);
        check_contents(s, r, "left in the exchange array");
        live_add(s, got);
        do_free(s, s->live_count - 1);
    }
    if (index_root != NO_RECORD) fail(s, "internal", "blocks left in the index");
    uint64_t ops = 0, calls = 0, cross_frees = 0, cross_reallocs = 0;
    for (int i = 0; i <= thread_count; i++) {
        ops += streams[i].op;
        calls += streams[i].calls;
        cross_frees += streams[i].cross_frees;
        cross_reallocs += streams[i].cross_reallocs;
    }
    printf("fuzz_api: seed 0x%" PRIx64 " passed: ops=%" PRIu64 " calls=%" PRIu64
           " digest(stream 0)=0x%016" PRIx64,
           seed, ops, calls, streams[0].digest);
    if (thread_count > 0)
        printf(" cross-thread frees=%" PRIu64 " reallocs=%" PRIu64, cross_frees, cross_reallocs);
    printf("\n");
    fflush(stdout);
    return ops;
}

static void usage(void) {
    fprintf(stderr,
            "usage: fuzz_api [--seed S|time]... [--ops N] [--seconds T] [--threads K] "
            "[--portable] [--aligned-alloc-c17] [--mimalloc-issue-700]\n"
            "  --seed S     a run per seed (decimal or 0x hex; `time`: from the clock; "
            "default: time)\n"
            "  --ops N      ops per stream (default 200000 unless --seconds)\n"
            "  --seconds T  stop each seed's run after T seconds\n"
            "  --threads K  K worker threads exchanging blocks, besides stream 0 "
            "(0..%d, default 0)\n"
            "  --portable   accept what C/POSIX allow where glibc makes a choice "
            "(errno after failures, realloc(p, 0), odd memalign alignments)\n"
            "  --aligned-alloc-c17  aligned_alloc must reject non-power-of-two "
            "alignments with EINVAL (C17, glibc >= 2.38)\n"
            "  --mimalloc-issue-700  no alignment check for the calls that mimalloc "
            "2.0.9 misaligns (alignment 256-1024, size = k * alignment <= 1 KiB)\n",
            MAX_THREADS);
    exit(2);
}

int main(int argc, char **argv) {
    uint64_t seeds[64];
    int seed_count = 0;
    program_path = argv[0];
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        const char *value = i + 1 < argc ? argv[i + 1] : NULL;
        char *end = NULL;
        if (strcmp(arg, "--portable") == 0) {
            portable_mode = true;
        } else if (strcmp(arg, "--aligned-alloc-c17") == 0) {
            aligned_alloc_c17 = true;
        } else if (strcmp(arg, "--mimalloc-issue-700") == 0) {
            mimalloc_issue_700 = true;
        } else if (!value) {
            usage();
        } else if (strcmp(arg, "--seed") == 0) {
            if (seed_count == (int)(sizeof seeds / sizeof seeds[0])) usage();
            if (strcmp(value, "time") == 0) {
                seeds[seed_count] = time_seed() + (uint64_t)seed_count;
                seed_count++;
            } else {
                errno = 0;
                seeds[seed_count++] = strtoull(value, &end, 0);
                if (errno || *end) usage();
            }
            i++;
        } else if (strcmp(arg, "--ops") == 0) {
            errno = 0;
            ops_per_stream = strtoull(value, &end, 0);
            if (errno || *end) usage();
            i++;
        } else if (strcmp(arg, "--seconds") == 0) {
            run_seconds = strtod(value, &end);
            if (*end || !(run_seconds > 0)) usage();
            i++;
        } else if (strcmp(arg, "--threads") == 0) {
            thread_count = (int)strtol(value, &end, 10);
            if (*end || thread_count < 0 || thread_count > MAX_THREADS) usage();
            i++;
        } else {
            usage();
        }
    }
    if (seed_count == 0) seeds[seed_count++] = time_seed();
    if (ops_per_stream == 0 && run_seconds <= 0) ops_per_stream = 200000;

    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = crash_handler;
    sigaction(SIGSEGV, &action, NULL);
    sigaction(SIGBUS, &action, NULL);
    sigaction(SIGABRT, &action, NULL);

    printf("fuzz_api: allocator=%s model=%s%s%s threads=%d", allocator_name(),
           portable_mode ? "portable" : "glibc-2.36", aligned_alloc_c17 ? "+aligned-alloc-c17" : "",
           mimalloc_issue_700 ? "+mimalloc-issue-700" : "", thread_count);
    if (ops_per_stream) printf(" ops=%" PRIu64 "/stream", ops_per_stream);
    if (run_seconds > 0) printf(" seconds=%g/seed", run_seconds);
    printf(" seeds:");
    for (int i = 0; i < seed_count; i++)
        printf(" 0x%" PRIx64, seeds[i]);
    printf("\n");
    fflush(stdout);

    struct timespec start;
    clock_gettime(CLOCK_MONOTONIC, &start);
    uint64_t ops = 0;
    for (int i = 0; i < seed_count; i++)
        ops += run_one_seed(seeds[i]);
    printf("ops=%" PRIu64 " seconds=%.2f seeds=", ops, seconds_since(&start));
    for (int i = 0; i < seed_count; i++)
        printf("%s0x%" PRIx64, i ? "," : "", seeds[i]);
    printf("\n");
    return 0;
}
