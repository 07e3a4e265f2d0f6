// test_conformance [section]: the malloc contract, entry point by entry point (issue #27,
// item 1), as glibc's manual and POSIX state it and as glibc 2.36 (Debian 12) does it:
//   - every entry point (malloc, calloc, realloc, reallocarray, free, posix_memalign,
//     aligned_alloc, memalign, valloc, pvalloc, malloc_usable_size) at every size 0..4200,
//     around every multiple of 4096 up to 256 KiB, around every power of two up to 64 MiB and
//     its quarter steps (5p/4, 3p/2, 7p/4) up to 4 MiB, each +-0/1/8/16: the block is aligned
//     (16 bytes once the size is 16 or more, else 8), its whole usable size is ours (written,
//     read back while the blocks of every entry point of that size are live together), calloc
//     zeroes it, also when the memory was just written and freed;
//   - alignments: every power of two from 1 (8 for posix_memalign) to 64 MiB; invalid ones
//     (0, 3, 24, ..., above SIZE_MAX / 2 + 1): posix_memalign returns EINVAL and leaves *out
//     and errno alone, memalign rounds a non-power of two up (and fails with EINVAL above
//     SIZE_MAX / 2 + 1), aligned_alloc either fails with EINVAL (C17, glibc >= 2.38) or acts
//     as memalign (glibc 2.36, whose aligned_alloc is memalign), both accepted;
//   - huge sizes (near SIZE_MAX, near PTRDIFF_MAX, 2^47 and more) and overflowing
//     count * size: NULL and errno ENOMEM from every entry point, ENOMEM returned by
//     posix_memalign (glibc also sets errno to ENOMEM there, although the Linux man page says
//     errno is not set: checked, as glibc does it); a failed realloc or reallocarray leaves
//     the old block mapped, intact and usable (read, rewritten, later grown and freed), for
//     tiny, mid and large blocks;
//   - contents across every realloc path: every size 1..4200 up and down, every pair of a
//     list of tiny, mid and large sizes both ways, a large block grown in place and moved,
//     shrunk by a little and by more than a quarter, and two interleaved chains of 30 reallocs
//     growing 1.5x at a time up to 32 MiB and back down;
//   - realloc(p, 0) and reallocarray(p, 0, n) free p and return NULL (glibc);
//     malloc(0), calloc(0, n), realloc(NULL, 0) and the aligned entry points with size 0
//     return distinct freeable blocks; malloc_usable_size(NULL) is 0.
// errno is set to 0 before every call whose failure is checked, so what successful calls do
// to errno does not matter (POSIX lets them change it); free must keep it (glibc >= 2.33).
// Checks of glibc behaviour that mimalloc 2.0.9 (Debian 12) does not share are gated on
// allocator_has_glibc_semantics(), so the binary is also a valid reference run there: errno
// after failures, realloc(p, 0) freeing, memalign of a non-power-of-two alignment.
// The optional argument runs only the sections whose name contains it (e.g. "realloc").
// Large blocks are written and checked in full up to 64 KiB, above that at their first 4 KiB,
// 64 bytes every 16 KiB (64 KiB above 1 MiB, 256 KiB above 4 MiB) and their last 64 bytes, so a
// lost or misplaced page shows without faulting in every page of hundreds of MiB.
#include "testhelper.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stddef.h>
#include <sys/mman.h>
#include <time.h>

#define KiB ((size_t)1024)
#define MiB (1024 * KiB)

// ---------------------------------------------------------------------------------------------
// Checks that say what failed: each check site prints its first few failures with the values
// involved, and the end of the run lists every failing site with its count.

enum { PRINTED_PER_SITE = 3, MAX_SITES = 128 };

struct check_site {
    int line;
    const char *expr;
    long failures;
};
static struct check_site failing_sites[MAX_SITES];
static int failing_site_count;

__attribute__((format(printf, 4, 5))) static bool checkf_record(bool ok, const char *expr, int line,
                                                                const char *fmt, ...) {
    if (ok) {
        atomic_fetch_add(&test_passed_count, 1);
        return true;
    }
    atomic_fetch_add(&test_failed_count, 1);
    struct check_site *site = NULL;
    for (int i = 0; i < failing_site_count; i++)
        if (failing_sites[i].line == line) site = &failing_sites[i];
    if (!site && failing_site_count < MAX_SITES) {
        site = &failing_sites[failing_site_count++];
        site->line = line;
        site->expr = expr;
    }
    long count = site ? ++site->failures : 1;
    if (count <= PRINTED_PER_SITE) {
        fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, line, expr);
        va_list args;
        va_start(args, fmt);
        vfprintf(stderr, fmt, args);
        va_end(args);
        fprintf(stderr, "%s\n",
                count == PRINTED_PER_SITE ? " (further failures here not printed)" : "");
        fflush(stderr);
    }
    return false;
}

// CHECKF(condition, printf-format, ...): a check whose failure prints the values given.
#define CHECKF(cond, ...) checkf_record((cond) ? true : false, #cond, __LINE__, __VA_ARGS__)

static void print_failing_sites(void) {
    for (int i = 0; i < failing_site_count; i++)
        fprintf(stderr, "failing check: line %d, %ld failures: %s\n", failing_sites[i].line,
                failing_sites[i].failures, failing_sites[i].expr);
}

// errno after a failed call: glibc's value (libhakmem copies glibc); mimalloc 2.0.9 returns
// NULL but does not always set errno, so there it is not judged.
static bool errno_is(int error, int expected) {
    return !allocator_has_glibc_semantics() || error == expected;
}

// ---------------------------------------------------------------------------------------------
// Helpers.

// Keeps the compiler from folding an impossible size into a warning or a constant NULL.
static size_t opaque_size(size_t n) {
    volatile size_t v = n;
    return v;
}

// Hides a pointer from gcc's -Wuse-after-free, which cannot know that a realloc failed.
static void *opaque_pointer(void *p) {
    void *volatile v = p;
    return v;
}

static size_t page_size;

static bool is_aligned(const void *p, size_t alignment) {
    return ((uintptr_t)p & (alignment - 1)) == 0;
}

// The smallest power of two >= n (1 for 0).
static size_t next_power_of_two(size_t n) {
    size_t p = 1;
    while (p < n)
        p *= 2;
    return p;
}

// What malloc must align a block of n bytes to: max_align_t (16) once an object of that type
// fits, else 8 (every allocator here gives 8 for the smallest sizes).
static size_t malloc_alignment(size_t n) {
    return n < 16 ? 8 : 16;
}

static double now_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

// Whether every page of [p, p + n) is mapped (mincore fails with ENOMEM on an unmapped page).
// Checked before a block is read after a failed realloc, so a block the allocator unmapped is
// reported instead of crashing the test. First, middle and last page are enough for that.
static bool block_mapped(const void *p, size_t n) {
    uintptr_t first = (uintptr_t)p & ~(uintptr_t)(page_size - 1);
    uintptr_t last = ((uintptr_t)p + (n ? n - 1 : 0)) & ~(uintptr_t)(page_size - 1);
    uintptr_t middle = (first + (last - first) / 2) & ~(uintptr_t)(page_size - 1);
    const uintptr_t pages[] = {first, middle, last};
    int saved = errno;
    bool mapped = true;
    for (int i = 0; i < 3; i++) {
        unsigned char residency;
        if (mincore((void *)pages[i], page_size, &residency) != 0) mapped = false;
    }
    errno = saved;
    return mapped;
}

// ---------------------------------------------------------------------------------------------
// Contents. A block of length L carries a pattern (per seed) at the positions of its layout:
// every byte up to FULL_PATTERN_LIMIT; above, the first 4 KiB, 64 bytes every stride (at an
// offset that varies per stride, so a page moved to the wrong place shows) and the last 64
// bytes. The pattern byte depends only on the offset and the seed.

enum { FULL_PATTERN_LIMIT = 64 * 1024, SAMPLE_BYTES = 64 };

static inline uint64_t pattern_word(size_t word_index, unsigned seed) {
    uint64_t x = ((uint64_t)word_index + 1) * 0x9e3779b97f4a7c15ULL;
    return x ^ (x >> 29) ^ ((uint64_t)seed * 0xbf58476d1ce4e5b9ULL);
}

static inline unsigned char pattern_byte(size_t i, unsigned seed) {
    return (unsigned char)(pattern_word(i >> 3, seed) >> (8 * (i & 7)));
}

enum pattern_op { FILL, VERIFY, VERIFY_ZERO };

// Applies op to [from, to): returns false at the first byte that differs (VERIFY, VERIFY_ZERO).
static bool range_op(unsigned char *p, size_t from, size_t to, unsigned seed, enum pattern_op op) {
    size_t i = from;
    for (; i < to && (i & 7); i++) {
        unsigned char want = op == VERIFY_ZERO ? 0 : pattern_byte(i, seed);
        if (op == FILL)
            p[i] = want;
        else if (p[i] != want)
            return false;
    }
    for (; i + 8 <= to; i += 8) {
        uint64_t want = op == VERIFY_ZERO ? 0 : pattern_word(i >> 3, seed), have;
        if (op == FILL) {
            memcpy(p + i, &want, 8);
        } else {
            memcpy(&have, p + i, 8);
            if (have != want) return false;
        }
    }
    for (; i < to; i++) {
        unsigned char want = op == VERIFY_ZERO ? 0 : pattern_byte(i, seed);
        if (op == FILL)
            p[i] = want;
        else if (p[i] != want)
            return false;
    }
    return true;
}

static size_t layout_stride(size_t length) {
    return length <= 1 * MiB ? 16 * KiB : length <= 4 * MiB ? 64 * KiB : 256 * KiB;
}

// Applies op to the positions of the layout of a block of `length` bytes that lie below
// `limit` (limit < length: the part a shrinking realloc kept; the layout's tail is then cut
// off, except what the sampled positions cover).
static bool pattern_apply(void *block, size_t length, size_t limit, unsigned seed,
                          enum pattern_op op) {
    unsigned char *p = block;
    if (limit > length) limit = length;
    if (length <= FULL_PATTERN_LIMIT) return range_op(p, 0, limit, seed, op);
    bool ok = range_op(p, 0, limit < 4096 ? limit : 4096, seed, op);
    size_t stride = layout_stride(length);
    for (size_t base = stride; ok && base < limit; base += stride) {
        size_t offset = (base / stride * 712) % (stride - SAMPLE_BYTES) & ~(size_t)7;
        size_t from = base + offset, to = from + SAMPLE_BYTES;
        if (from >= limit) break;
        ok = range_op(p, from, to < limit ? to : limit, seed, op);
    }
    if (ok && limit == length) ok = range_op(p, length - SAMPLE_BYTES, length, seed, op);
    return ok;
}

static void pattern_fill(void *p, size_t length, unsigned seed) {
    pattern_apply(p, length, length, seed, FILL);
}

static bool pattern_intact(const void *p, size_t length, size_t limit, unsigned seed) {
    return pattern_apply((void *)p, length, limit, seed, VERIFY);
}

static bool zeroed(const void *p, size_t length) {
    return pattern_apply((void *)p, length, length, 0, VERIFY_ZERO);
}

// free() that checks errno survives it (glibc manual: free preserves errno since 2.33).
static void free_keeping_errno(void *p) {
    errno = ENOTTY;
    free(p);
    CHECKF(errno == ENOTTY, "free(%p) changed errno to %d", p, errno);
}

// ---------------------------------------------------------------------------------------------
// Entry points. Every way of getting a block, with the alignment and usable size it promises.

enum entry {
    E_MALLOC,
    E_CALLOC,
    E_CALLOC_SWAPPED, // calloc(n, 1)
    E_REALLOC_NULL,
    E_REALLOCARRAY_NULL,
    E_POSIX_MEMALIGN,
    E_ALIGNED_ALLOC,
    E_MEMALIGN,
    E_VALLOC,
    E_PVALLOC,
    ENTRY_COUNT
};

static const char *const entry_names[ENTRY_COUNT] = {"malloc",
                                                     "calloc(1, n)",
                                                     "calloc(n, 1)",
                                                     "realloc(NULL, n)",
                                                     "reallocarray(NULL, n, 1)",
                                                     "posix_memalign",
                                                     "aligned_alloc",
                                                     "memalign",
                                                     "valloc",
                                                     "pvalloc"};

// mimalloc 2.0.x (Debian 12 ships 2.0.9) returns misaligned blocks for alignments 256..1024
// when the size is a multiple of the alignment up to 1 KiB: microsoft/mimalloc#700, fixed in
// 2.1 (as in test_api). Skipped only under mimalloc.
static bool mimalloc_bug_700(size_t alignment, size_t size) {
    return alignment >= 256 && alignment <= 1024 && size != 0 && size <= 1024 &&
           size % alignment == 0 && strcmp(allocator_name(), "mimalloc") == 0;
}

static void *allocate(enum entry e, size_t n, size_t alignment) {
    void *p = NULL;
    switch (e) {
    case E_MALLOC:
        return malloc(n);
    case E_CALLOC:
        return calloc(1, n);
    case E_CALLOC_SWAPPED:
        return calloc(n, 1);
    case E_REALLOC_NULL:
        return realloc(NULL, n);
    case E_REALLOCARRAY_NULL:
        return reallocarray(NULL, n, 1);
    case E_POSIX_MEMALIGN: {
        int rc = posix_memalign(&p, alignment, n);
        CHECKF(rc == 0, "posix_memalign(%zu, %zu) returned %d", alignment, n, rc);
        return rc == 0 ? p : NULL;
    }
    case E_ALIGNED_ALLOC:
        return aligned_alloc(alignment, n);
    case E_MEMALIGN:
        return memalign(alignment, n);
    case E_VALLOC:
        return valloc(n);
    case E_PVALLOC:
        return pvalloc(n);
    case ENTRY_COUNT:
        break;
    }
    return NULL;
}

static size_t entry_alignment(enum entry e, size_t n, size_t alignment) {
    switch (e) {
    case E_POSIX_MEMALIGN:
    case E_ALIGNED_ALLOC:
    case E_MEMALIGN:
        return alignment;
    case E_VALLOC:
    case E_PVALLOC:
        return page_size;
    default:
        return malloc_alignment(n);
    }
}

// pvalloc rounds the request up to whole pages (glibc: 0 stays 0).
static size_t entry_min_usable(enum entry e, size_t n) {
    return e == E_PVALLOC ? (n + page_size - 1) / page_size * page_size : n;
}

static bool entry_zeroes(enum entry e) {
    return e == E_CALLOC || e == E_CALLOC_SWAPPED;
}

// ---------------------------------------------------------------------------------------------
// The size sweep.

static size_t *sweep_sizes;
static size_t sweep_size_count;

static int compare_sizes(const void *a, const void *b) {
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    return (x > y) - (x < y);
}

static void build_sweep_sizes(void) {
    static const long offsets[] = {-16, -8, -1, 0, 1, 8, 16};
    enum { OFFSETS = sizeof offsets / sizeof offsets[0] };
    size_t capacity = 4201 + (256 * KiB / 4096 + 4 * 27) * OFFSETS + 16;
    sweep_sizes = malloc(capacity * sizeof *sweep_sizes);
    if (!CHECK(sweep_sizes != NULL)) return;
    size_t count = 0;
    for (size_t n = 0; n <= 4200; n++)
        sweep_sizes[count++] = n;
    // Every multiple of 4096 up to 256 KiB (libhakmem's largest mid class and large spans,
    // glibc's default mmap threshold of 128 KiB are all below).
    for (size_t m = 4096; m <= 256 * KiB; m += 4096)
        for (int o = 0; o < OFFSETS; o++)
            sweep_sizes[count++] = (size_t)((long)m + offsets[o]);
    // Every power of two up to 64 MiB, and its quarter steps up to 4 MiB (four classes per
    // power of two is how most allocators space their classes; libhakmem's mid classes are
    // spaced so; above, every size is pages to every allocator here).
    for (size_t p = 4096; p <= 64 * MiB; p *= 2)
        for (size_t q = 0; q < (p > 4 * MiB ? 1 : 4); q++)
            for (int o = 0; o < OFFSETS; o++)
                sweep_sizes[count++] = (size_t)((long)(p + q * (p / 4)) + offsets[o]);
    qsort(sweep_sizes, count, sizeof *sweep_sizes, compare_sizes);
    size_t unique = 0;
    for (size_t i = 0; i < count; i++)
        if (unique == 0 || sweep_sizes[i] != sweep_sizes[unique - 1])
            sweep_sizes[unique++] = sweep_sizes[i];
    sweep_size_count = unique;
}

struct live_block {
    void *p;
    size_t request;
    size_t usable;
    unsigned seed;
    enum entry entry;
};

// Every entry point at size n, all live together; then calloc over the memory just written
// and freed.
static void sweep_one_size(size_t n, size_t index) {
    struct live_block blocks[ENTRY_COUNT];
    // The aligned entry points take 8 .. 4096 in turn (the alignment sweep does the rest).
    size_t alignment = (size_t)8 << (index % 10);
    for (int e = 0; e < ENTRY_COUNT; e++) {
        struct live_block *b = &blocks[e];
        b->p = NULL;
        b->entry = (enum entry)e;
        if (e == E_ALIGNED_ALLOC && mimalloc_bug_700(alignment, n)) continue;
        if (e == E_MEMALIGN && mimalloc_bug_700(alignment, n)) continue;
        if (e == E_POSIX_MEMALIGN && mimalloc_bug_700(alignment, n)) continue;
        void *p = allocate(b->entry, n, alignment);
        if (!CHECKF(p != NULL, "%s of %zu bytes (alignment %zu) failed, errno %d", entry_names[e],
                    n, alignment, errno))
            continue;
        size_t want_alignment = entry_alignment(b->entry, n, alignment);
        CHECKF(is_aligned(p, want_alignment), "%s(%zu) = %p, not aligned to %zu", entry_names[e], n,
               p, want_alignment);
        size_t usable = malloc_usable_size(p);
        CHECKF(usable >= entry_min_usable(b->entry, n), "%s(%zu): malloc_usable_size %zu < %zu",
               entry_names[e], n, usable, entry_min_usable(b->entry, n));
        if (entry_zeroes(b->entry))
            CHECKF(zeroed(p, n), "%s(%zu) = %p is not zeroed", entry_names[e], n, p);
        b->p = p;
        b->request = n;
        b->usable = usable;
        b->seed = (unsigned)(index * ENTRY_COUNT + (size_t)e);
        pattern_fill(p, usable, b->seed);
    }
    for (int e = 0; e < ENTRY_COUNT; e++) {
        struct live_block *b = &blocks[e];
        if (!b->p) continue;
        CHECKF(pattern_intact(b->p, b->usable, b->usable, b->seed),
               "%s(%zu) = %p (usable %zu): contents changed while other blocks were written",
               entry_names[e], n, b->p, b->usable);
        free_keeping_errno(b->p);
    }
    // The memory just written and freed comes back zeroed from calloc, both ways round.
    void *again[3];
    for (int i = 0; i < 3; i++) {
        again[i] = i == 1 ? calloc(opaque_size(n), 1) : calloc(1, opaque_size(n));
        if (!CHECKF(again[i] != NULL, "calloc of %zu bytes after free failed", n)) continue;
        CHECKF(zeroed(again[i], n), "calloc(%zu) = %p over freed memory is not zeroed", n,
               again[i]);
        size_t usable = malloc_usable_size(again[i]);
        CHECKF(usable >= n, "calloc(%zu): usable %zu", n, usable);
        pattern_fill(again[i], usable, (unsigned)index + 77);
    }
    for (int i = 3; i-- > 0;)
        free(again[i]);
    void *last = calloc(opaque_size(n), 1);
    if (CHECKF(last != NULL, "calloc(%zu, 1) failed", n))
        CHECKF(zeroed(last, n), "calloc(%zu, 1) = %p over freed memory is not zeroed", n, last);
    free(last);
}

static void test_size_sweep(void) {
    for (size_t i = 0; i < sweep_size_count; i++)
        sweep_one_size(sweep_sizes[i], i);
    CHECK(malloc_usable_size(NULL) == 0);
}

// ---------------------------------------------------------------------------------------------
// Size 0 everywhere: distinct, freeable blocks (glibc; POSIX also allows NULL for some).

static void test_zero_sizes(void) {
    enum { COUNT = 16 };
    for (int e = 0; e < ENTRY_COUNT; e++) {
        void *blocks[COUNT];
        for (int i = 0; i < COUNT; i++) {
            blocks[i] = allocate((enum entry)e, 0, 64);
            CHECKF(blocks[i] != NULL, "%s(0) returned NULL", entry_names[e]);
            if (!blocks[i]) continue;
            CHECKF(is_aligned(blocks[i], entry_alignment((enum entry)e, 0, 64)),
                   "%s(0) = %p misaligned", entry_names[e], blocks[i]);
            for (int j = 0; j < i; j++)
                CHECKF(blocks[j] != blocks[i], "%s(0) returned %p twice", entry_names[e],
                       blocks[i]);
            // The usable size is ours even for size 0.
            memset(blocks[i], 0xee, malloc_usable_size(blocks[i]));
        }
        for (int i = 0; i < COUNT; i++)
            free_keeping_errno(blocks[i]);
    }
    void *p = calloc(0, opaque_size(SIZE_MAX));
    CHECKF(p != NULL, "calloc(0, SIZE_MAX) returned NULL");
    free(p);
    p = calloc(opaque_size(SIZE_MAX), 0);
    CHECKF(p != NULL, "calloc(SIZE_MAX, 0) returned NULL");
    free(p);
    p = reallocarray(NULL, 0, 0);
    CHECKF(p != NULL, "reallocarray(NULL, 0, 0) returned NULL");
    free(p);
    p = reallocarray(NULL, opaque_size(SIZE_MAX), 0);
    CHECKF(p != NULL, "reallocarray(NULL, SIZE_MAX, 0) returned NULL");
    free(p);
    free(NULL);
    CHECK(malloc_usable_size(NULL) == 0);
}

// realloc(p, 0) and reallocarray(p, 0, n) free p and return NULL under glibc (and libhakmem);
// other allocators may return a minimal block, which must be freeable.
static void test_realloc_to_zero(void) {
    const size_t sizes[] = {1, 24, 1000, 5000, 40 * KiB, 300 * KiB, 1 * MiB, 20 * MiB};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        for (int way = 0; way < 3; way++) {
            void *p = malloc(sizes[i]);
            if (!CHECK(p != NULL)) continue;
            pattern_fill(p, sizes[i], 5);
            void *q = way == 0   ? realloc(p, 0)
                      : way == 1 ? reallocarray(p, 0, 16)
                                 : reallocarray(p, 16, 0);
            if (allocator_has_glibc_semantics())
                CHECKF(q == NULL, "realloc-to-0 (way %d) of a %zu-byte block returned %p", way,
                       sizes[i], q);
            free(q);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Alignments.

static void test_valid_alignments(void) {
    enum { MAX_BLOCKS = 16 };
    for (int e = E_POSIX_MEMALIGN; e <= E_MEMALIGN; e++) {
        for (size_t alignment = 1; alignment <= 64 * MiB; alignment *= 2) {
            if (e == E_POSIX_MEMALIGN && alignment < sizeof(void *)) continue;
            size_t sizes[] = {
                0, 1, 8, 100, 5000, alignment - 1, alignment, alignment + 1, 2 * alignment + 8};
            size_t size_count = sizeof sizes / sizeof sizes[0];
            if (alignment >= 16 * MiB) size_count--; // 2 * 64 MiB + 8: no need
            struct live_block blocks[MAX_BLOCKS];
            int count = 0;
            for (size_t s = 0; s < size_count; s++) {
                size_t n = sizes[s];
                if (mimalloc_bug_700(alignment, n)) continue;
                void *p = allocate((enum entry)e, n, alignment);
                if (!CHECKF(p != NULL, "%s(alignment %zu, size %zu) failed, errno %d",
                            entry_names[e], alignment, n, errno))
                    continue;
                CHECKF(is_aligned(p, alignment), "%s(alignment %zu, size %zu) = %p misaligned",
                       entry_names[e], alignment, n, p);
                size_t usable = malloc_usable_size(p);
                CHECKF(usable >= n, "%s(alignment %zu, size %zu): usable %zu", entry_names[e],
                       alignment, n, usable);
                unsigned seed = (unsigned)(alignment * 31 + s);
                pattern_fill(p, usable, seed);
                blocks[count++] = (struct live_block){p, n, usable, seed, (enum entry)e};
            }
            for (int i = 0; i < count; i++) {
                CHECKF(
                    pattern_intact(blocks[i].p, blocks[i].usable, blocks[i].usable, blocks[i].seed),
                    "%s(alignment %zu, size %zu): contents changed", entry_names[e], alignment,
                    blocks[i].request);
                // An aligned block reallocs like any other.
                void *q = realloc(blocks[i].p, blocks[i].request + 100);
                if (CHECKF(q != NULL, "realloc of an aligned block failed")) {
                    CHECKF(pattern_intact(q, blocks[i].usable, blocks[i].request, blocks[i].seed),
                           "realloc of %s(alignment %zu, size %zu) lost its contents",
                           entry_names[e], alignment, blocks[i].request);
                    free_keeping_errno(q);
                }
            }
        }
    }
}

static const size_t invalid_alignments[] = {0,
                                            1,
                                            2,
                                            3,
                                            4,
                                            5,
                                            6,
                                            7,
                                            9,
                                            12,
                                            24,
                                            40,
                                            48,
                                            96,
                                            100,
                                            4095,
                                            4097,
                                            12288,
                                            65535,
                                            (1 << 20) + 1,
                                            3 << 20,
                                            SIZE_MAX / 2 + 2,
                                            SIZE_MAX / 2 + 4096,
                                            SIZE_MAX - 1,
                                            SIZE_MAX};

// posix_memalign: not a power of two multiple of sizeof(void *) -> EINVAL, *out and errno
// untouched.
static void test_posix_memalign_invalid(void) {
    for (size_t i = 0; i < sizeof invalid_alignments / sizeof invalid_alignments[0]; i++) {
        size_t alignment = invalid_alignments[i];
        bool valid = alignment >= sizeof(void *) && (alignment & (alignment - 1)) == 0;
        if (valid) continue;
        const size_t sizes[] = {0, 16, 5000};
        for (int s = 0; s < 3; s++) {
            void *sentinel = (void *)0x1234, *out = sentinel;
            errno = 0;
            int rc = posix_memalign(&out, opaque_size(alignment), sizes[s]);
            int error = errno;
            CHECKF(rc == EINVAL, "posix_memalign(%zu, %zu) returned %d", alignment, sizes[s], rc);
            CHECKF(out == sentinel, "posix_memalign(%zu, %zu) set *out to %p", alignment, sizes[s],
                   out);
            CHECKF(errno_is(error, 0), "posix_memalign(%zu, %zu) set errno to %d", alignment,
                   sizes[s], error);
            if (rc == 0 && out != sentinel) free(out);
        }
    }
}

// memalign: a non-power of two is rounded up to the next power of two (glibc); above
// SIZE_MAX / 2 + 1 it fails with EINVAL. aligned_alloc: glibc 2.36's is memalign; glibc 2.38
// and C17 fail a non-power of two with EINVAL: either is accepted.
static void test_memalign_aligned_alloc_invalid(void) {
    const size_t sizes[] = {1, 100, 5000};
    for (int e = E_ALIGNED_ALLOC; e <= E_MEMALIGN; e++) {
        size_t extra[130];
        for (size_t a = 0; a < 130; a++)
            extra[a] = a;
        for (size_t list = 0; list < 2; list++) {
            const size_t *alignments = list == 0 ? extra : invalid_alignments;
            size_t count =
                list == 0 ? 130 : sizeof invalid_alignments / sizeof invalid_alignments[0];
            for (size_t i = 0; i < count; i++) {
                size_t alignment = alignments[i];
                if (alignment != 0 && (alignment & (alignment - 1)) == 0) continue; // valid
                for (int s = 0; s < 3; s++) {
                    size_t n = sizes[s];
                    errno = 0;
                    void *p = e == E_MEMALIGN ? memalign(opaque_size(alignment), n)
                                              : aligned_alloc(opaque_size(alignment), n);
                    int error = errno;
                    if (alignment > SIZE_MAX / 2 + 1) {
                        CHECKF(p == NULL && errno_is(error, EINVAL),
                               "%s(%zu, %zu) = %p, errno %d (want NULL, EINVAL)", entry_names[e],
                               alignment, n, p, error);
                        free(p);
                        continue;
                    }
                    if (p == NULL) {
                        // memalign must round up (glibc); aligned_alloc may refuse.
                        bool may_refuse = e == E_ALIGNED_ALLOC || !allocator_has_glibc_semantics();
                        CHECKF(may_refuse, "memalign(%zu, %zu) failed, errno %d", alignment, n,
                               error);
                        CHECKF(errno_is(error, EINVAL), "%s(%zu, %zu) failed with errno %d",
                               entry_names[e], alignment, n, error);
                        continue;
                    }
                    size_t rounded = next_power_of_two(alignment);
                    CHECKF(is_aligned(p, rounded), "%s(%zu, %zu) = %p, not aligned to %zu",
                           entry_names[e], alignment, n, p, rounded);
                    size_t usable = malloc_usable_size(p);
                    CHECKF(usable >= n, "%s(%zu, %zu): usable %zu", entry_names[e], alignment, n,
                           usable);
                    pattern_fill(p, usable, 3);
                    CHECK(pattern_intact(p, usable, usable, 3));
                    free_keeping_errno(p);
                }
            }
        }
    }
}

// Alignments that are valid but cannot be satisfied (2^47 and more): ENOMEM.
static void test_huge_alignments(void) {
    const size_t alignments[] = {(size_t)1 << 47, (size_t)1 << 48, (size_t)1 << 62,
                                 SIZE_MAX / 2 + 1};
    for (size_t i = 0; i < sizeof alignments / sizeof alignments[0]; i++) {
        size_t alignment = alignments[i];
        const size_t sizes[] = {0, 1, 4096};
        for (int s = 0; s < 3; s++) {
            size_t n = sizes[s];
            errno = 0;
            void *p = memalign(opaque_size(alignment), n);
            int error = errno;
            CHECKF(p == NULL && errno_is(error, ENOMEM), "memalign(%zu, %zu) = %p, errno %d",
                   alignment, n, p, error);
            errno = 0;
            p = aligned_alloc(opaque_size(alignment), n);
            error = errno;
            CHECKF(p == NULL && errno_is(error, ENOMEM), "aligned_alloc(%zu, %zu) = %p, errno %d",
                   alignment, n, p, error);
            void *sentinel = (void *)0x1234, *out = sentinel;
            errno = 0;
            int rc = posix_memalign(&out, opaque_size(alignment), n);
            error = errno;
            // POSIX lets size 0 succeed with a null pointer instead (mimalloc 2.0.9 does).
            bool null_for_zero =
                n == 0 && rc == 0 && out == NULL && !allocator_has_glibc_semantics();
            CHECKF(rc == ENOMEM || null_for_zero, "posix_memalign(%zu, %zu) returned %d", alignment,
                   n, rc);
            CHECKF(out == sentinel || out == NULL, "posix_memalign(%zu, %zu) set *out to %p",
                   alignment, n, out);
            CHECKF(errno_is(error, ENOMEM), "posix_memalign(%zu, %zu) failed with errno %d",
                   alignment, n, error);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Huge sizes and overflowing products.

// In ascending order: a failed realloc that breaks the block shows at the first size that
// does it, after the checks of every smaller one passed on the same block.
static const size_t huge_sizes[] = {
    (size_t)1 << 47,    (size_t)1 << 48,  (size_t)1 << 62, PTRDIFF_MAX - 4096, PTRDIFF_MAX,
    SIZE_MAX / 2 + 1, // PTRDIFF_MAX + 1
    SIZE_MAX - 2 * MiB, SIZE_MAX - 65536, SIZE_MAX - 4097, SIZE_MAX - 4096,    SIZE_MAX - 4095,
    SIZE_MAX - 4094, // the first size whose rounding up to 4 KiB pages overflows
    SIZE_MAX - 100,     SIZE_MAX - 16,    SIZE_MAX - 15,   SIZE_MAX - 1,       SIZE_MAX};
enum { HUGE_SIZES = sizeof huge_sizes / sizeof huge_sizes[0] };

// count * size overflows.
static const size_t overflow_pairs[][2] = {
    {SIZE_MAX / 2, 3},    {2, SIZE_MAX / 2 + 1}, {(size_t)1 << 32, (size_t)1 << 32},
    {SIZE_MAX, SIZE_MAX}, {SIZE_MAX, 2},         {3, SIZE_MAX / 3 + 1},
    {(size_t)1 << 63, 2}};
enum { OVERFLOW_PAIRS = sizeof overflow_pairs / sizeof overflow_pairs[0] };

// call must return NULL with errno ENOMEM; x and y are the sizes printed when it does not.
#define CHECK_FAILS_ENOMEM(call, x, y)                                                             \
    do {                                                                                           \
        errno = 0;                                                                                 \
        void *result_ = (call);                                                                    \
        int error_ = errno;                                                                        \
        CHECKF(result_ == NULL && errno_is(error_, ENOMEM), "%s = %p, errno %d [%zu, %zu]", #call, \
               result_, error_, (size_t)(x), (size_t)(y));                                         \
        if (result_) free(result_);                                                                \
    } while (0)

static void test_huge_sizes(void) {
    for (int i = 0; i < HUGE_SIZES; i++) {
        size_t h = opaque_size(huge_sizes[i]);
        CHECK_FAILS_ENOMEM(malloc(h), h, 0);
        CHECK_FAILS_ENOMEM(calloc(1, h), h, 0);
        CHECK_FAILS_ENOMEM(calloc(h, 1), h, 0);
        CHECK_FAILS_ENOMEM(realloc(NULL, h), h, 0);
        CHECK_FAILS_ENOMEM(reallocarray(NULL, h, 1), h, 0);
        CHECK_FAILS_ENOMEM(reallocarray(NULL, 1, h), h, 0);
        CHECK_FAILS_ENOMEM(valloc(h), h, 0);
        CHECK_FAILS_ENOMEM(pvalloc(h), h, 0);
        const size_t alignments[] = {8, 16, 64, 4096, 2 * MiB};
        for (int a = 0; a < 5; a++) {
            size_t alignment = opaque_size(alignments[a]);
            CHECK_FAILS_ENOMEM(memalign(alignment, h), alignment, h);
            CHECK_FAILS_ENOMEM(aligned_alloc(alignment, h), alignment, h);
            void *sentinel = (void *)0x1234, *out = sentinel;
            errno = 0;
            int rc = posix_memalign(&out, alignment, h);
            int error = errno;
            CHECKF(rc == ENOMEM, "posix_memalign(%zu, %zu) returned %d", alignment, h, rc);
            CHECKF(out == sentinel || out == NULL, "posix_memalign(%zu, %zu) set *out to %p",
                   alignment, h, out);
            // glibc sets errno too (the Linux man page says it does not; glibc 2.36 does).
            CHECKF(errno_is(error, ENOMEM), "posix_memalign(%zu, %zu) failed with errno %d",
                   alignment, h, error);
            if (rc == 0 && out != sentinel) free(out);
        }
    }
    for (int i = 0; i < OVERFLOW_PAIRS; i++) {
        size_t count = opaque_size(overflow_pairs[i][0]), size = overflow_pairs[i][1];
        CHECK_FAILS_ENOMEM(calloc(count, size), count, size);
        CHECK_FAILS_ENOMEM(calloc(size, count), size, count);
        CHECK_FAILS_ENOMEM(reallocarray(NULL, count, size), count, size);
        CHECK_FAILS_ENOMEM(reallocarray(NULL, size, count), size, count);
    }
    // Products that do not overflow but are too large.
    CHECK_FAILS_ENOMEM(calloc(opaque_size(PTRDIFF_MAX / 2 + 1), 2), PTRDIFF_MAX / 2 + 1, 2);
    CHECK_FAILS_ENOMEM(calloc(opaque_size((size_t)1 << 24), (size_t)1 << 24), 1 << 24, 1 << 24);
    CHECK_FAILS_ENOMEM(reallocarray(NULL, opaque_size((size_t)1 << 24), (size_t)1 << 24), 1 << 24,
                       1 << 24);
}

// A failed realloc or reallocarray of a live block: NULL, ENOMEM, and the block still mapped,
// intact (read in full, its layout) and usable (written again, later grown and freed).
struct failing_block {
    void *p;
    size_t size;
    unsigned seed;
    bool lost; // the allocator broke the block: it is no longer touched (nor freed)
};

static void check_failed_resize(struct failing_block *b, void *result, int error, const char *call,
                                size_t x, size_t y) {
    if (b->lost) return;
    bool ok = CHECKF(result == NULL,
                     "%s(%zu-byte block %p, %zu, %zu) returned %p instead of failing; block %s",
                     call, b->size, b->p, x, y, result,
                     block_mapped(b->p, b->size) ? "still mapped" : "UNMAPPED");
    CHECKF(errno_is(error, ENOMEM), "%s(%zu-byte block, %zu, %zu) failed with errno %d", call,
           b->size, x, y, error);
    if (!ok) {
        // A block that "grew" to an impossible size: neither it nor the old one is trusted.
        b->lost = true;
        return;
    }
    if (!CHECKF(block_mapped(b->p, b->size),
                "%s(%zu-byte block %p, %zu, %zu) failed but unmapped the block", call, b->size,
                b->p, x, y)) {
        b->lost = true;
        return;
    }
    CHECKF(pattern_intact(b->p, b->size, b->size, b->seed),
           "%s(%zu-byte block %p, %zu, %zu) failed and changed the block", call, b->size, b->p, x,
           y);
    CHECKF(malloc_usable_size(b->p) >= b->size, "usable size of %p dropped below %zu", b->p,
           b->size);
    b->seed++;
    pattern_fill(b->p, b->size, b->seed); // still ours to write
}

static void test_failed_realloc_keeps_block(void) {
    const size_t sizes[] = {1,        24,        100,       1000,    1024,        5000,
                            40 * KiB, 200 * KiB, 300 * KiB, 1 * MiB, 5 * MiB + 3, 20 * MiB};
    enum { SIZES = sizeof sizes / sizeof sizes[0] };
    struct failing_block blocks[SIZES];
    for (int i = 0; i < SIZES; i++) {
        blocks[i] = (struct failing_block){malloc(sizes[i]), sizes[i], (unsigned)i * 1000, false};
        if (!CHECK(blocks[i].p != NULL))
            blocks[i].lost = true;
        else
            pattern_fill(blocks[i].p, sizes[i], blocks[i].seed);
    }
    for (int i = 0; i < SIZES; i++) {
        struct failing_block *b = &blocks[i];
        for (int h = 0; h < HUGE_SIZES && !b->lost; h++) {
            size_t n = opaque_size(huge_sizes[h]);
            errno = 0;
            void *q = realloc(opaque_pointer(b->p), n);
            check_failed_resize(b, q, errno, "realloc", n, 0);
            if (b->lost) break;
            errno = 0;
            q = reallocarray(opaque_pointer(b->p), n, 1);
            check_failed_resize(b, q, errno, "reallocarray", n, 1);
            if (b->lost) break;
            errno = 0;
            q = reallocarray(opaque_pointer(b->p), 1, n);
            check_failed_resize(b, q, errno, "reallocarray", 1, n);
        }
        for (int o = 0; o < OVERFLOW_PAIRS && !b->lost; o++) {
            size_t count = opaque_size(overflow_pairs[o][0]), size = overflow_pairs[o][1];
            errno = 0;
            void *q = reallocarray(opaque_pointer(b->p), count, size);
            check_failed_resize(b, q, errno, "reallocarray", count, size);
        }
        if (b->lost) continue;
        // Still a block like any other: it grows and is freed.
        void *q = realloc(b->p, 2 * b->size);
        if (CHECKF(q != NULL, "realloc(%zu-byte block, %zu) after failed reallocs failed", b->size,
                   2 * b->size)) {
            CHECKF(pattern_intact(q, b->size, b->size, b->seed),
                   "%zu-byte block lost its contents growing after failed reallocs", b->size);
            free_keeping_errno(q);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Contents across every realloc path.

// One realloc step of a block holding the layout of `*length` bytes with `seed`: checks the
// kept part and refills the whole new length. False when the block is gone (q NULL).
static bool realloc_step(void **block, size_t *length, unsigned seed, size_t to, const char *what) {
    void *q = realloc(*block, to);
    if (!CHECKF(q != NULL, "%s: realloc(%zu -> %zu) failed, errno %d", what, *length, to, errno))
        return false;
    size_t kept = *length < to ? *length : to;
    CHECKF(pattern_intact(q, *length, kept, seed),
           "%s: realloc(%zu -> %zu) lost contents (%p -> %p)", what, *length, to, *block, q);
    size_t usable = malloc_usable_size(q);
    CHECKF(usable >= to, "%s: realloc(%zu -> %zu): usable %zu", what, *length, to, usable);
    pattern_fill(q, to, seed);
    *block = q;
    *length = to;
    return true;
}

// Every size 1..4200 upwards one byte at a time, then down: tiny to tiny (grow and shrink in
// and across classes), tiny to mid and back.
static void test_realloc_dense_walk(void) {
    size_t length = 1;
    void *p = malloc(length);
    if (!CHECK(p != NULL)) return;
    pattern_fill(p, length, 11);
    for (size_t n = 2; n <= 4200; n++)
        if (!realloc_step(&p, &length, 11, n, "walk up")) return;
    for (size_t n = 4199; n >= 1; n--)
        if (!realloc_step(&p, &length, 11, n, "walk down")) return;
    free_keeping_errno(p);
}

// Every ordered pair of these sizes, both ways: tiny, class borders, mid, the mid/large
// border of every profile (32 KiB, 256 KiB), large spans, mappings, cached and uncached
// regions.
static void test_realloc_pairs(void) {
    const size_t sizes[] = {1,
                            8,
                            24,
                            100,
                            512,
                            1000,
                            1024,
                            1025,
                            2048,
                            4000,
                            4096,
                            4097,
                            8192,
                            16000,
                            32 * KiB - 1,
                            32 * KiB,
                            32 * KiB + 1,
                            48 * KiB,
                            64 * KiB,
                            100 * KiB,
                            128 * KiB + 1,
                            256 * KiB,
                            256 * KiB + 1,
                            600 * KiB,
                            1 * MiB,
                            2 * MiB + 5,
                            9 * MiB,
                            17 * MiB};
    enum { SIZES = sizeof sizes / sizeof sizes[0] };
    for (int a = 0; a < SIZES; a++) {
        for (int b = 0; b < SIZES; b++) {
            if (a == b) continue;
            unsigned seed = (unsigned)(a * SIZES + b);
            size_t length = sizes[a];
            void *p = malloc(length);
            if (!CHECK(p != NULL)) continue;
            pattern_fill(p, length, seed);
            if (realloc_step(&p, &length, seed, sizes[b], "pair") &&
                realloc_step(&p, &length, seed, sizes[a], "pair back"))
                free_keeping_errno(p);
        }
    }
}

// A large block through mremap's cases: grown by a page (in place when the next pages are
// free), grown far (moved), shrunk by a little and by more than a quarter, grown back into
// its own trimmed tail, with neighbours allocated in between so it cannot always stay.
static void test_realloc_large_paths(void) {
    const size_t steps[] = {1 * MiB + 4096, 1 * MiB + 8192 + 1, 3 * MiB,  3 * MiB - 100,
                            3 * MiB - 4096, 1536 * KiB,         6 * MiB,  300 * KiB,
                            20 * MiB,       17 * MiB,           16 * MiB, 5 * MiB,
                            5 * MiB + 1,    64 * KiB,           40 * MiB, 100,
                            2 * MiB,        2 * MiB - 1,        4 * MiB,  1000};
    void *neighbours[sizeof steps / sizeof steps[0]];
    size_t length = 1 * MiB;
    void *p = malloc(length);
    if (!CHECK(p != NULL)) return;
    pattern_fill(p, length, 21);
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        if (!realloc_step(&p, &length, 21, steps[i], "large path")) return;
        neighbours[i] = malloc(i % 2 ? 1 * MiB : 64 * KiB);
        if (neighbours[i])
            pattern_fill(neighbours[i], i % 2 ? 1 * MiB : 64 * KiB, 100 + (unsigned)i);
    }
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        if (!neighbours[i]) continue;
        CHECKF(pattern_intact(neighbours[i], i % 2 ? 1 * MiB : 64 * KiB, i % 2 ? 1 * MiB : 64 * KiB,
                              100 + (unsigned)i),
               "neighbour %zu of a reallocated large block changed", i);
        free(neighbours[i]);
    }
    free_keeping_errno(p);
}

// Two vectors grown 1.5x at a time, 30 reallocs each, from ~200 B to 32 MiB, then back down,
// interleaved (each one's growth is in the way of the other's), with small blocks allocated
// between the steps.
static void test_realloc_chains(void) {
    enum { CHAINS = 2, STEPS = 30 };
    size_t sizes[STEPS + 1];
    sizes[STEPS] = 32 * MiB;
    for (int s = STEPS; s-- > 0;)
        sizes[s] = sizes[s + 1] * 2 / 3;
    void *chain[CHAINS];
    size_t length[CHAINS];
    void *small[2 * STEPS * CHAINS];
    size_t small_count = 0;
    for (int c = 0; c < CHAINS; c++) {
        length[c] = sizes[0] + (size_t)c;
        chain[c] = malloc(length[c]);
        if (!CHECK(chain[c] != NULL)) return;
        pattern_fill(chain[c], length[c], 31 + (unsigned)c);
    }
    bool ok = true;
    for (int s = 1; s <= STEPS && ok; s++)
        for (int c = 0; c < CHAINS && ok; c++) {
            ok = realloc_step(&chain[c], &length[c], 31 + (unsigned)c, sizes[s] + (size_t)c,
                              "chain up");
            small[small_count++] = malloc((size_t)(s * 37));
        }
    for (int s = STEPS; s-- > 0 && ok;)
        for (int c = 0; c < CHAINS && ok; c++) {
            ok = realloc_step(&chain[c], &length[c], 31 + (unsigned)c, sizes[s] + (size_t)c,
                              "chain down");
            small[small_count++] = malloc((size_t)(s * 53));
        }
    for (size_t i = 0; i < small_count; i++)
        free(small[i]);
    if (ok)
        for (int c = 0; c < CHAINS; c++)
            free_keeping_errno(chain[c]);
}

// ---------------------------------------------------------------------------------------------

struct section {
    const char *name;
    void (*run)(void);
};

int main(int argc, char **argv) {
    page_size = (size_t)sysconf(_SC_PAGESIZE);
    printf("allocator: %s\n", allocator_name());
    fflush(stdout);
    build_sweep_sizes();
    // A failed realloc that breaks its block can leave the allocator's bookkeeping broken too:
    // that section runs last, so what it breaks does not show as failures of the others.
    const struct section sections[] = {
        {"huge sizes", test_huge_sizes},
        {"zero sizes", test_zero_sizes},
        {"realloc to zero", test_realloc_to_zero},
        {"posix_memalign invalid alignments", test_posix_memalign_invalid},
        {"memalign/aligned_alloc invalid alignments", test_memalign_aligned_alloc_invalid},
        {"huge alignments", test_huge_alignments},
        {"valid alignments 1 B .. 64 MiB", test_valid_alignments},
        {"size sweep", test_size_sweep},
        {"realloc walk 1..4200", test_realloc_dense_walk},
        {"realloc pairs", test_realloc_pairs},
        {"realloc large paths", test_realloc_large_paths},
        {"realloc chains to 32 MiB", test_realloc_chains},
        {"failed realloc keeps the block", test_failed_realloc_keeps_block},
    };
    for (size_t i = 0; i < sizeof sections / sizeof sections[0]; i++) {
        if (argc > 1 && !strstr(sections[i].name, argv[1])) continue;
        long failed_before = atomic_load(&test_failed_count);
        double start = now_seconds();
        sections[i].run();
        printf("%-45s %7.3f s%s\n", sections[i].name, now_seconds() - start,
               atomic_load(&test_failed_count) != failed_before ? "  FAILED" : "");
        fflush(stdout);
    }
    free(sweep_sizes);
    print_failing_sites();
    return test_summary();
}
