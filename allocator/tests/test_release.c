// test_release: memory goes back and large blocks are sized to need (issue #11).
//   - every size 0..HAK_MID_MAX maps to a class at least that large (the tables themselves)
//   - a 33 KiB block's usable size is within one OS page of the request
//   - growing a 100 MiB block to 200 MiB does not copy it (resident memory barely moves: a
//     copy would touch all 100 MiB of the new block)
//   - blocks freed by another thread: once they are all back, their pages are given back
//     while the allocating thread lives (resident memory falls) — the remote-emptied path
//   - a live set of mid-size blocks that breathes (pages empty and refill all the time) does
//     not fault its pages back in on every refill under the speed-first policy: emptied
//     page slots are purged only after a delay, not at once
//   - malloc/free from pthread key destructors at thread exit
//   - memalign/posix_memalign reject invalid alignments (aligned_alloc rounds them up, as
//   glibc 2.36)
//   - a 48 KiB block freed and allocated again in a loop is served from the large cache under
//     both memory policies (page faults stay near zero instead of 12 per round)
//   - a few big blocks freed out of order and replaced by others of other sizes are served
//     from the cache (up to twice the recent live peak), not mapped and faulted in anew
//   - freed large regions stay resident while cached, and are purged after the cache's delay
//     (both policies; the lean policy purged them at every thread exit until issue #30)
//   - lean policy: a cached region reused for a smaller request keeps no resident tail once
//     the region's delay has passed; past the tails the allocator tracks, a tail stays with its
//     live block instead of costing every large malloc an madvise
//   - lean policy: when a thread exits leaving a few live mid blocks in its pages, the free
//     blocks between them keep no more than their first OS page resident (speed-first keeps
//     them warm for the adopter)
//   - an exited thread's empty page slots: both policies keep them resident for the purge
//     delay, and a thread of the next generation takes them warm (no page faults); they go at
//     the first visit after the delay (the lean policy purged them at the exit until issue
//     #38)
//   - speed-first: blocks of 32-256 KiB are cut from larger chunks in address order, not
//     mapped one by one (each mmap stalls every other thread's page faults)
//   - C6's odd classes (288, 352, 416, 480 B) start merged into the next in every thread, and
//     split off once the heap holds more than a page of those sizes, or adopts a page of the
//     smaller class from an exited thread
//   - mid blocks freed in the order they were allocated give their pages back (a page that
//     emptied while its class's current one goes back once another is current)
//   - a class that holds one block touches one or two OS pages of its 64 KiB page, not the
//     front's whole carve step (TinyHeap's C7 pages were carved whole at once: 16 OS pages for
//     one 1 KiB block)
//   - malloc_trim(0) gives back at once what the policies would keep for their delays (the
//     freed blocks' page slots, the cached superslabs and large regions), says 1 when it gave
//     any, and 0 when called again with nothing left
// Bounds that only libhakmem promises are checked only under libhakmem.
#include "testhelper.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>

#include "../src/sizeclass.c"
#if defined(HAKTEST_LINKS_HAKMEM)
#include "api.h" // the allocator's own counters (SS_OS_STATS)
#endif

#define KiB ((size_t)1024)
#define MiB (1024 * KiB)

static void test_size_classes(void) {
    bool ok = true;
    for (size_t n = 0; n <= HAK_SMALL_MAX_ALL; n++) {
        unsigned cls = hak_class_of(n);
        ok &= cls < HAK_CLASS_COUNT && hak_class_block_size[cls] >= n;
        if (cls > 0) ok &= hak_class_block_size[cls - 1] < n; // the smallest class that fits
    }
    CHECK(ok);
}

// Above 32 KiB a block is large (its size rounded up to 4 KiB pages) or, when SmallObject v3
// serves the mid classes up to 256 KiB, in a size class (at most 25 % over); above 256 KiB
// always large.
static void test_usable_size(void) {
    size_t sizes[] = {33 * KiB, 40 * KiB, 100000, 256 * KiB + 1, 300000, 3 * MiB + 5};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        unsigned char *p = malloc(sizes[i]);
        if (!CHECK(p != NULL)) continue;
        size_t usable = malloc_usable_size(p), over = usable - sizes[i];
        CHECK(usable >= sizes[i]);
        if (allocator_is_hakmem())
            CHECK(over < 4096 || (sizes[i] <= HAK_SMALL_MAX_ALL && over <= sizes[i] / 4));
        memset(p, 1, usable);
        free(p);
    }
}

static size_t resident_now(void) {
    size_t resident = 0;
    CHECK(process_memory(&resident, NULL));
    return resident;
}

static void test_realloc_does_not_copy(void) {
    size_t size = 100 * MiB;
    unsigned char *p = malloc(size);
    if (!CHECK(p != NULL)) return;
    p[0] = 7;
    p[size - 1] = 9;
    size_t before = resident_now();
    unsigned char *q = realloc(p, 2 * size);
    if (!CHECK(q != NULL)) return;
    size_t after = resident_now();
    CHECK(q[0] == 7 && q[size - 1] == 9);
    printf("realloc 100 MiB -> 200 MiB: resident %zu -> %zu KiB\n", before / KiB, after / KiB);
    if (allocator_is_hakmem() && resident_bounds_apply()) CHECK(after < before + 8 * MiB);
    q = realloc(q, 50 * MiB); // shrinks in place
    CHECK(q != NULL && q[0] == 7);
    free(q);
}

// 48 MiB of 64-byte blocks allocated here, freed by another thread.
#define REMOTE_BLOCKS (48 * MiB / 64)
static void **remote_blocks;

static void *free_all(void *arg) {
    (void)arg;
    for (size_t i = 0; i < REMOTE_BLOCKS; i++)
        free(remote_blocks[i]);
    return NULL;
}

static void test_remote_emptied_pages_released(void) {
    remote_blocks = calloc(REMOTE_BLOCKS, sizeof(void *));
    if (!CHECK(remote_blocks != NULL)) return;
    for (size_t i = 0; i < REMOTE_BLOCKS; i++) {
        remote_blocks[i] = malloc(64);
        memset(remote_blocks[i], 0x33, 64);
    }
    size_t peak = resident_now();
    pthread_t thread;
    if (!CHECK(pthread_create(&thread, NULL, free_all, NULL) == 0)) return;
    pthread_join(thread, NULL);
    // This thread goes on allocating other sizes: its slow paths find the emptied pages. Their
    // slots are purged once they have stayed free for the purge delay (10 ms speed-first), so
    // the last round comes after a pause, as any thread's later work does.
    void *keep[4096];
    for (int round = 0; round < 5; round++) {
        if (round == 4) nanosleep(&(struct timespec){.tv_nsec = 30 * 1000 * 1000}, NULL);
        for (int i = 0; i < 4096; i++)
            keep[i] = malloc(2000 + (size_t)round * 16);
        for (int i = 0; i < 4096; i++)
            free(keep[i]);
    }
    size_t after = resident_now();
    printf("48 MiB freed by another thread: resident %zu -> %zu KiB\n", peak / KiB, after / KiB);
    if (allocator_is_hakmem() && resident_bounds_apply()) CHECK(after + 16 * MiB < peak);
    free(remote_blocks);
}

static long minor_faults(void) {
    struct rusage usage;
    getrusage(RUSAGE_SELF, &usage);
    return usage.ru_minflt;
}

// bench_mid_large_mt's pattern: 256 live blocks of 8-32 KiB, each op frees a random one and
// allocates another size. A 64 KiB page holds 2-8 of them, so pages empty constantly. When
// emptied slots were purged at once (madvise) every refill faulted its 4 KiB pages back in:
// 100,000 ops took ~9,000 faults; kept resident, they need a few hundred (the first touch).
static void test_breathing_mid_pages_stay_resident(void) {
    enum { LIVE = 256, OPS = 100000 };
    static void *live[LIVE];
    uint64_t rng = 42;
    for (int i = 0; i < LIVE; i++) {
        size_t size = 8 * KiB + test_random_next(&rng) % (24 * KiB);
        live[i] = malloc(size);
        memset(live[i], 1, 64);
    }
    long before = minor_faults();
    for (int op = 0; op < OPS; op++) {
        unsigned i = (unsigned)(test_random_next(&rng) % LIVE);
        free(live[i]);
        size_t size = 8 * KiB + test_random_next(&rng) % (24 * KiB);
        live[i] = malloc(size);
        memset(live[i], 1, 64);
    }
    long faults = minor_faults() - before;
    for (int i = 0; i < LIVE; i++)
        free(live[i]);
    const char *lean = getenv("HAKMEM_SS_MEM_LEAN");
    bool speed_first = !(lean && lean[0] == '1');
    printf("mid live set breathing, %d ops: %ld minor faults (%s)\n", OPS, faults,
           speed_first ? "speed-first" : "lean");
#if !defined(HAKTEST_DEBUG_BUILD) // sanitizer shadow and assertions change the counts
    if (allocator_is_hakmem() && speed_first && resident_bounds_apply()) CHECK(faults < 3000);
#endif
}

// Open addressing over block addresses: true if `p` was not in the set yet.
enum { SEEN_SLOTS = 1 << 14 };
static bool seen_insert(uintptr_t *set, uintptr_t p) {
    size_t h = (size_t)((p * 0x9E3779B97F4A7C15ull) >> 50);
    for (; set[h]; h = (h + 1) & (SEEN_SLOTS - 1))
        if (set[h] == p) return false;
    set[h] = p;
    return true;
}

// bench_mid_large_mt's other pattern: 256 slots of 8-32 KiB blocks, each op frees a random
// slot's block if it has one, else allocates. The live set per size class drifts up and down
// across page boundaries. Freed blocks must be handed out again: once the live set has met its
// range, hardly any block address is new. An allocator that gives a class's emptied page back
// and takes a fresh one (another slot, another block grid) at the next refill keeps handing out
// new blocks, and each new block faults in fresh memory (before the fix: 325 new addresses in
// 1.8 M ops after warm-up, against tcmalloc's 13; the same run touched 30 % more OS pages).
static void test_mid_blocks_reused(void) {
    enum { SLOTS = 256, WARM_OPS = 200000, OPS = 400000 };
    static void *slot[SLOTS];
    static uintptr_t seen[SEEN_SLOTS];
    uint64_t rng = 42;
    unsigned fresh_after_warmup = 0, distinct = 0;
    for (int op = 0; op < WARM_OPS + OPS; op++) {
        unsigned i = (unsigned)(test_random_next(&rng) % SLOTS);
        if (slot[i]) {
            free(slot[i]);
            slot[i] = NULL;
            continue;
        }
        size_t size = 8 * KiB + test_random_next(&rng) % (24 * KiB + 1);
        slot[i] = malloc(size);
        if (!CHECK(slot[i] != NULL)) return;
        *(volatile char *)slot[i] = 1;
        if (distinct < SEEN_SLOTS / 2 && seen_insert(seen, (uintptr_t)slot[i])) {
            distinct++;
            if (op >= WARM_OPS) fresh_after_warmup++;
        }
    }
    for (int i = 0; i < SLOTS; i++)
        free(slot[i]);
    printf("mid blocks: %u distinct addresses%s, %u of them first handed out after warm-up\n",
           distinct, distinct >= SEEN_SLOTS / 2 ? " (counting stopped)" : "", fresh_after_warmup);
    // The legacy fronts' 64 KiB mid pages hold 2-8 blocks: pages empty at every turn and come
    // back fresh (~100 new addresses here, retaining 2 pages as HotHeap v2 does or not); that
    // geometry is what SmallObject v3 replaces, so the bound is v3's.
    const char *v3 = getenv("HAKMEM_SMALL_HEAP_V3_ENABLED");
    if (allocator_is_hakmem() && !(v3 && v3[0] == '0')) CHECK(fresh_after_warmup < 64);
}

// A thread's first 280 B blocks come from the 320 B class (C6 merged two by two); once that
// class needs a second page, 280 B gets its own 288 B class. Keeps every tenth of its 288 B
// blocks alive for the adopter below, then exits.
enum { MERGE_N = 600 };
static void *merge_kept[MERGE_N];
static size_t merge_first_usable, merge_last_usable;

static void *merged_class_thread(void *arg) {
    (void)arg;
    static void *blocks[MERGE_N];
    for (int i = 0; i < MERGE_N; i++)
        blocks[i] = malloc(280);
    merge_first_usable = malloc_usable_size(blocks[0]);
    merge_last_usable = malloc_usable_size(blocks[MERGE_N - 1]);
    for (int i = 0; i < MERGE_N; i++) {
        if (i % 10 == 0 && malloc_usable_size(blocks[i]) == 288)
            merge_kept[i] = blocks[i];
        else
            free(blocks[i]);
    }
    return NULL;
}

static size_t adopter_usable[2];

static void *adopter_thread(void *arg) {
    (void)arg;
    void *a = malloc(280), *b = malloc(280); // the first refill adopts the exited thread's pages
    adopter_usable[0] = malloc_usable_size(a);
    adopter_usable[1] = malloc_usable_size(b);
    free(a);
    free(b);
    return NULL;
}

// Runs before any other test's thread exits: the merging thread's superslab is then the only
// abandoned one, the one the adopter's first refill takes.
static void test_merged_classes_split(void) {
    pthread_t t;
    CHECK(pthread_create(&t, NULL, merged_class_thread, NULL) == 0 && pthread_join(t, NULL) == 0);
    CHECK(pthread_create(&t, NULL, adopter_thread, NULL) == 0 && pthread_join(t, NULL) == 0);
    printf("280 B: usable %zu first, %zu after %d blocks; in a thread adopting 288 B pages: %zu, "
           "then %zu\n",
           merge_first_usable, merge_last_usable, MERGE_N, adopter_usable[0], adopter_usable[1]);
    for (int i = 0; i < MERGE_N; i++)
        free(merge_kept[i]);
    CHECK(merge_first_usable >= 280 && merge_last_usable >= 280 && adopter_usable[1] >= 280);
    if (!allocator_is_hakmem()) return;
    CHECK(merge_first_usable == 320); // merged: few such blocks cost one page, not two
    CHECK(merge_last_usable == 288);  // split: many cost 10 % less
    CHECK(adopter_usable[1] == 288);  // adopted pages of the smaller class are used at once
}

// 200 live 40 KiB blocks (large unless SmallObject v3 serves M5, as with mask 0xffff): under
// the speed-first policy consecutive ones are neighbours in their chunk, ascending; mapped one
// by one they would come from wherever mmap put them (top-down: descending).
static void test_large_spans_from_chunks(void) {
    // 40 KiB blocks are large only where SmallObject v3 does not serve the group M5 (32-64 KiB):
    // v3 off, or a mask without it (the default mask has it; the test matrix runs it with v3 off).
    const char *v3 = getenv("HAKMEM_SMALL_HEAP_V3_CLASSES");
    int v3_serves_40k =
        !env_is("HAKMEM_SMALL_HEAP_V3_ENABLED", "0") && (!v3 || (strtol(v3, NULL, 0) & 0x2000));
    if (!allocator_is_hakmem() || env_is("HAKMEM_SS_MEM_LEAN", "1") || v3_serves_40k) return;
    enum { COUNT = 200 };
    const size_t size = 40 * KiB;
    static char *blocks[COUNT];
    int neighbours = 0;
    for (int i = 0; i < COUNT; i++) {
        blocks[i] = malloc(size);
        if (!CHECK(blocks[i] != NULL)) return;
        blocks[i][size - 1] = 1;
        neighbours += i > 0 && blocks[i] == blocks[i - 1] + size;
    }
    for (int i = 0; i < COUNT; i++)
        free(blocks[i]);
    printf("speed-first: %d of %d consecutive 40 KiB blocks adjacent, ascending\n", neighbours,
           COUNT - 1);
    // A new chunk every ~100 of them; a few cached regions first (a larger one is split, its
    // pieces ascending too), each switch of region or chunk a non-neighbour. (Regions of two
    // mappings stay apart in the cache however adjacent, so the earlier tests' leave a few
    // more pieces than they did: 190-194 neighbours.)
    CHECK(neighbours >= COUNT - 1 - 12);
}

static pthread_key_t destructor_key;
static atomic_int destructor_runs;

static void destructor(void *value) {
    free(value);
    void *blocks[64];
    for (int i = 0; i < 64; i++) {
        blocks[i] = malloc((size_t)(i * 37) % 5000 + 1);
        memset(blocks[i], i, 1);
    }
    for (int i = 0; i < 64; i++)
        free(blocks[i]);
    atomic_fetch_add(&destructor_runs, 1);
}

static void *thread_with_destructor(void *arg) {
    (void)arg;
    pthread_setspecific(destructor_key, malloc(100));
    void *p = malloc(3000);
    free(p);
    return NULL;
}

static void test_thread_exit_destructors(void) {
    CHECK(pthread_key_create(&destructor_key, destructor) == 0);
    for (int i = 0; i < 64; i++) {
        pthread_t thread;
        if (!CHECK(pthread_create(&thread, NULL, thread_with_destructor, NULL) == 0)) return;
        pthread_join(thread, NULL);
    }
    CHECK(atomic_load(&destructor_runs) == 64);
}

static void test_aligned_invalid(void) {
    void *p = (void *)1;
    CHECK(posix_memalign(&p, 3, 16) == EINVAL);
    CHECK(posix_memalign(&p, 0, 16) == EINVAL);
    CHECK(posix_memalign(&p, sizeof(void *) / 2, 16) == EINVAL);
    CHECK(p == (void *)1); // untouched on failure
    if (allocator_is_hakmem()) {
        // As the glibc installed here (2.36): aligned_alloc is memalign, and rounds an alignment
        // that is not a power of two up (2.38 refuses it with EINVAL).
        void *rounded = aligned_alloc(24, 48);
        CHECK(rounded != NULL && ((uintptr_t)rounded & 31) == 0);
        free(rounded);
        errno = 0;
        CHECK(memalign(SIZE_MAX / 2 + 2, 16) == NULL && errno == EINVAL);
    }
    CHECK(posix_memalign(&p, 64, SIZE_MAX - 100) == ENOMEM);
    void *q = aligned_alloc(4096, 100);
    CHECK(q != NULL && ((uintptr_t)q & 4095) == 0);
    free(q);
    q = memalign(1 << 20, 100000);
    CHECK(q != NULL && ((uintptr_t)q & ((1 << 20) - 1)) == 0);
    free(q);
}

static void test_large_cache_reuse(void) {
    long before = minor_faults();
    struct timespec start, end;
    clock_gettime(CLOCK_MONOTONIC, &start);
    void *first = NULL;
    int moved = 0;
    for (int round = 0; round < 2000; round++) {
        unsigned char *p = malloc(48 * KiB);
        if (!CHECK(p != NULL)) return;
        if (!first) first = p;
        moved += p != first;
        memset(p, round, 48 * KiB);
        free(p);
    }
    long faults = minor_faults() - before;
    clock_gettime(CLOCK_MONOTONIC, &end);
    double ms =
        (double)(end.tv_sec - start.tv_sec) * 1e3 + (double)(end.tv_nsec - start.tv_nsec) / 1e6;
    printf("2000 x malloc/write/free of 48 KiB: %ld page faults, %.0f ms, %d moved\n", faults, ms,
           moved);
    if (allocator_is_hakmem()) CHECK(faults < 2000); // 12 per round without reuse
}

// A full cache makes room for the region freed now: it is the one the program will ask for
// again. Before, a full cache refused it, so a loop over one block size behind a cache filled
// by earlier, other sizes mapped and faulted in a fresh block every round (test_large_cache_reuse
// did so on a loaded machine: the bound on cached bytes follows the recent live peak, which
// halves every second, and a slow run found the cache over its shrunken bound).
static void test_full_large_cache_keeps_the_block_freed_now(void) {
    enum { FILL = 256, ROUNDS = 50 }; // FILL: the cache's slots (HAK_LARGE_CACHE_COUNT)
    const size_t filler = 260 * KiB, big = 2 * MiB; // large under every route; no filler can
                                                    // serve (or be grown into) a big block
    void **held = malloc(2 * FILL * sizeof *held);
    if (!CHECK(held != NULL)) return;
    for (int i = 0; i < 2 * FILL; i++) {
        held[i] = malloc(filler);
        if (!CHECK(held[i] != NULL)) return;
    }
    for (int i = 0; i < 2 * FILL; i += 2) // every other one: no two cached regions adjacent
        free(held[i]);
    long before = minor_faults();
    for (int round = 0; round < ROUNDS; round++) {
        unsigned char *p = malloc(big);
        if (!CHECK(p != NULL)) break;
        memset(p, round, big);
        free(p);
    }
    long faults = minor_faults() - before;
    printf("%d x malloc/write/free of 2 MiB behind a full cache: %ld page faults\n", ROUNDS,
           faults);
    // 512 a round when every block is a fresh mapping; the first round faults it in once (not
    // under TSan: its shadow of the block faults in as well)
    if (allocator_is_hakmem() && resident_bounds_apply()) CHECK(faults < 4 * (long)(big / 4096));
    for (int i = 1; i < 2 * FILL; i += 2)
        free(held[i]);
    free(held);
}

// A few big blocks live at once, each freed out of order and replaced by one of another size
// (bench_bigblock --live 4, scaled down): the freed regions serve the next blocks, taken whole,
// split or grown, instead of being unmapped and the next block mapped and faulted in anew
// (every page written, ~329,000, would fault). 14,600 faults with the cache of twice the recent
// live peak, 18,000-22,000 with once (which bench_bigblock --live 4 shows more: 98,900 against
// 52,600-61,700); tcmalloc, whose page heap joins free spans on both sides, 1.
static void test_large_cache_serves_blocks_freed_out_of_order(void) {
    enum { LIVE = 4, ROUNDS = 120 };
    unsigned char *blocks[LIVE] = {0};
    uint64_t seed = 0x2545f4914f6cdd1dull;
    long faults = 0, touched = 0;
    struct timespec start, end;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (int round = 0; round < ROUNDS; round++) {
        seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
        unsigned slot = (unsigned)(seed % LIVE);
        size_t size = ((seed >> 8) % 24 + 1) * MiB - (seed >> 20) % MiB; // 0-24 MiB
        long before = minor_faults();
        free(blocks[slot]);
        blocks[slot] = malloc(size);
        if (!CHECK(blocks[slot] != NULL)) return;
        for (size_t at = 0; at < size; at += 4096)
            blocks[slot][at] = (unsigned char)round;
        if (round >= LIVE * 4) { // (the first rounds build the live set and the cache)
            faults += minor_faults() - before;
            touched += (long)(size / 4096);
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &end);
    for (unsigned i = 0; i < LIVE; i++)
        free(blocks[i]);
    double ms =
        (double)(end.tv_sec - start.tv_sec) * 1e3 + (double)(end.tv_nsec - start.tv_nsec) / 1e6;
    printf("%d big blocks of up to 24 MiB, %d live, freed out of order: %ld page faults for %ld "
           "pages written (%.0f ms)\n",
           ROUNDS, LIVE, faults, touched, ms);
#if !defined(HAKTEST_DEBUG_BUILD) // sanitizer shadow and assertions change the counts
    // A run much slower than the lean purge delay (100 ms) purges cached regions: not judged
    // then.
    if (allocator_is_hakmem() && resident_bounds_apply() && ms < 400) CHECK(faults < touched / 8);
#endif
}

// A vector grown by realloc is freed at its largest, and the next one starts small again (a
// worker thread's pointer array, a parser's buffer). Both policies: the freed 1.6 MiB region
// serves the next 800 KiB request with the rest of it still mapped behind the block, so the
// reallocs (to 1.2 MiB, then 1.6 MiB) grow in place and none faults in a page. Before,
// regions over 1 MiB were never cached (~400 faults a round: every page of a fresh mapping),
// a cached region served requests of at least 3/4 of its size only, and a regrow within the
// mapping gave back a tail of a quarter of it or more (the 1.2 MiB step).
static void test_large_cache_serves_regrown_vector(void) {
    if (!allocator_is_hakmem()) return;
    const size_t small = 800 * KiB, grown = 1600 * KiB;
    long faults = 0;
    double slowest_ms = 0; // a round slower than the purge delay (100 ms) refaults: not judged
    for (int round = 0; round < 4; round++) {
        struct timespec start, end;
        clock_gettime(CLOCK_MONOTONIC, &start);
        long before = minor_faults();
        unsigned char *p = malloc(small);
        if (!CHECK(p != NULL)) return;
        memset(p, round, small);
        // Grown 1.5x and then to the full size, as vectors grow.
        unsigned char *q = realloc(p, small + small / 2);
        if (!CHECK(q != NULL)) return;
        memset(q + small, round, small / 2);
        q = realloc(q, grown);
        if (!CHECK(q != NULL)) return;
        memset(q + small + small / 2, round, grown - small - small / 2);
        CHECK(q[0] == round && q[grown - 1] == round);
        free(q);
        if (round > 0) faults += minor_faults() - before; // round 0 maps the region
        clock_gettime(CLOCK_MONOTONIC, &end);
        double ms =
            (double)(end.tv_sec - start.tv_sec) * 1e3 + (double)(end.tv_nsec - start.tv_nsec) / 1e6;
        if (ms > slowest_ms) slowest_ms = ms;
    }
    printf("3 x malloc 800 KiB, realloc to 1.2 and 1.6 MiB, free, after the first: %ld page "
           "faults\n",
           faults);
#if !defined(HAKTEST_DEBUG_BUILD) // sanitizer shadow and assertions change the counts
    if (resident_bounds_apply() && slowest_ms < 50)
        CHECK(faults < 3 * 40);
    else
        printf("(a round took %.0f ms, near the purge delay: not judged)\n", slowest_ms);
#endif
}

// Freed large regions stay cached and resident for reuse, then are purged once they have waited
// past the cache's delay (1 s speed-first, 100 ms lean) and a later large free looks. Both
// policies: the lean policy also purged them at every thread exit until issue #30, which made a
// program whose threads come and go a round at a time fault in every big block anew each round.
static void test_large_cache_purged_after_delay(void) {
    if (!allocator_is_hakmem() || !resident_bounds_apply()) return;
    enum { COUNT = 8 };
    const size_t size = 512 * KiB; // above every size class, within the cache's region limit
    unsigned char *blocks[COUNT];
    for (int i = 0; i < COUNT; i++) {
        blocks[i] = malloc(size);
        if (!CHECK(blocks[i] != NULL)) return;
        memset(blocks[i], 0x66, size);
    }
    size_t live = resident_now();
    for (int i = 0; i < COUNT; i++)
        free(blocks[i]);
    size_t cached = resident_now();
    int lean = env_is("HAKMEM_SS_MEM_LEAN", "1");
    int wait_ms = lean ? 250 : 1250; // the policy's delay and a margin
    usleep((useconds_t)wait_ms * 1000);
    free(malloc(size)); // takes one cached region back and returns it: the others are due
    size_t after = resident_now();
    printf("%s: 4 MiB of freed large blocks resident %zu -> %zu KiB after free, "
           "%zu KiB after %d ms\n",
           lean ? "lean" : "speed-first", live / KiB, cached / KiB, after / KiB, wait_ms);
    CHECK(cached + MiB > live);      // kept for reuse at first
    CHECK(after + 3 * MiB < cached); // purged after the delay
}

static void test_lean_reused_region_tail_released(void) {
    const char *lean = getenv("HAKMEM_SS_MEM_LEAN");
    if (!allocator_is_hakmem() || !lean || strcmp(lean, "1")) return;
    unsigned char *p = malloc(64 * KiB);
    if (!CHECK(p != NULL)) return;
    memset(p, 0x55, 64 * KiB);
    free(p);
    unsigned char *q = malloc(48 * KiB); // the cached 64 KiB region fits (>= 3/4 of it)
    if (!CHECK(q != NULL)) return;
    // What lies behind the block is purged when the region's delay (100 ms from its free) has
    // passed, whether the region was taken whole or split and its tail cached: wait that out,
    // and let the allocator act on it (a large allocation checks the deadlines).
    nanosleep(&(struct timespec){.tv_nsec = 150 * 1000 * 1000}, NULL);
    free(malloc(300 * KiB));
    if (q == p) {
        unsigned char resident[4] = {1, 1, 1, 1};
        CHECK(mincore(q + 48 * KiB, 16 * KiB, resident) == 0);
        CHECK(!(resident[0] & 1) && !(resident[1] & 1) && !(resident[2] & 1) && !(resident[3] & 1));
    }
    free(q);
}

static double ms_between(struct timespec a, struct timespec b) {
    return (double)(b.tv_sec - a.tv_sec) * 1e3 + (double)(b.tv_nsec - a.tv_nsec) / 1e6;
}

// Lean policy: a block that took a region whole and was freed before its tail was due leaves
// that tail's entry on the schedule, and the next block to take the region keeps its rest until
// its own region is due. (By address, the entry purged that next block's rest early, and a
// larger request taking the region again faulted it back in: mimalloc-bench's malloc-large took
// 3.7x C7_SAFE's page faults.)
static void test_lean_freed_block_leaves_no_tail_behind(void) {
    if (!allocator_is_hakmem() || !env_is("HAKMEM_SS_MEM_LEAN", "1")) return;
    unsigned char *p = malloc(MiB);
    if (!CHECK(p != NULL)) return;
    memset(p, 0x55, MiB);
    struct timespec t0, t1, t2;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    free(p);                              // cached: due at t0 + 100 ms
    unsigned char *q = malloc(896 * KiB); // takes it whole: its tail due at t0 + 100 ms
    nanosleep(&(struct timespec){.tv_nsec = 90 * 1000 * 1000}, NULL);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    free(q);                              // cached again: due at t1 + 100 ms
    unsigned char *r = malloc(896 * KiB); // whole again: its tail due at t1 + 100 ms
    nanosleep(&(struct timespec){.tv_nsec = 40 * 1000 * 1000}, NULL);
    free(malloc(4 * MiB)); // a large malloc checks the deadlines: t0's has passed
    unsigned tail = r == p ? resident_inside(r, 896 * KiB, MiB) : 0;
    clock_gettime(CLOCK_MONOTONIC, &t2);
    printf(
        "lean: a region taken twice 90 ms apart (%d%d): %u of 32 tail pages resident %.0f ms after "
        "the first due, %.0f ms after the second free\n",
        q == p, r == p, tail, ms_between(t0, t2) - 100, ms_between(t1, t2));
    // (On a machine slow enough that the second delay passed too, nothing is decided.)
    if (q == p && r == p && ms_between(t0, t2) > 100 && ms_between(t1, t2) < 95) CHECK(tail == 32);
    free(r);
}

// Lean policy, more live large blocks with a tail to purge than the tail list holds: each
// malloc takes a freed 400 KiB region whole for 300 KiB, and the 100 KiB behind it is due
// when the region would have been. Once the list is full, the tail stays (the block is live,
// the tail smaller than it) instead of an madvise and its page faults on every malloc.
static void test_lean_tails_beyond_the_list_cost_no_madvise(void) {
#if defined(HAKTEST_LINKS_HAKMEM)
    if (!allocator_is_hakmem() || !env_is("HAKMEM_SS_MEM_LEAN", "1")) return;
    enum { LIVE = 300, STEPS = 1200 };
    static unsigned char *live[LIVE];
    for (int i = 0; i < LIVE; i++) {
        live[i] = malloc(400 * KiB);
        if (!CHECK(live[i] != NULL)) return;
        live[i][0] = 1;
    }
    uint64_t before = atomic_load(&hak_stats_ss_os.madvise);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int step = 0; step < STEPS; step++) {
        int j = step % LIVE;
        free(live[j]);
        live[j] = malloc(300 * KiB);
        if (!CHECK(live[j] != NULL)) return;
        live[j][0] = 1;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    uint64_t madvised = atomic_load(&hak_stats_ss_os.madvise) - before;
    double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
    printf("lean: %d large mallocs past a full tail list: %llu madvise calls (%.1f ms)\n", STEPS,
           (unsigned long long)madvised, ms);
    // Within the purge delay (100 ms) no tail is due; a slow machine may pass it, and then due
    // tails and regions are purged, a few each.
    if (ms < 80.0) CHECK(madvised < STEPS / 10);
    for (int i = 0; i < LIVE; i++)
        free(live[i]);
#endif
}

// A thread fills 12 small pages with 8 KiB blocks and exits with one block alive: its
// superslab is abandoned with 11 empty page slots. Both policies keep them resident while the
// purge delay runs (a thread of the next generation adopts them warm: bench_larson faulted
// 0.77x as often under speed-first, mstress 1/30 under the lean policy), and the first visit
// after the delay gives them back (all of a superslab's resident free slots, once they are more
// than the policy's floor: 4 slots, none under the lean policy).
enum { SLOT_BLOCKS = 96, SLOT_SIZE = 8 * 1024 }; // 8 blocks a 64 KiB page
static unsigned char *slot_blocks[SLOT_BLOCKS];
static struct timespec slot_first_free;

static void *leave_empty_slots(void *arg) {
    (void)arg;
    for (int i = 0; i < SLOT_BLOCKS; i++) {
        slot_blocks[i] = malloc(SLOT_SIZE);
        if (slot_blocks[i]) memset(slot_blocks[i], 0x6b, SLOT_SIZE);
    }
    clock_gettime(CLOCK_MONOTONIC_COARSE, &slot_first_free);
    for (int i = 1; i < SLOT_BLOCKS; i++) // block 0 survives its thread
        free(slot_blocks[i]);
    return NULL;
}

// A thread whose only block is medium-sized (it adopts no small-page superslab): its exit
// visits the abandoned superslabs at the head of the list.
static void *visit_abandoned(void *arg) {
    (void)arg;
    void *p = malloc(20 * KiB);
    if (p) memset(p, 1, 64);
    free(p);
    return NULL;
}

static unsigned resident_slot_blocks(void) {
    unsigned resident = 0;
    for (int i = 1; i < SLOT_BLOCKS; i++)
        if (slot_blocks[i]) resident += resident_inside(slot_blocks[i], 16, SLOT_SIZE);
    return resident;
}

static void test_abandoned_slots_purged_after_delay(void) {
    bool is_lean = env_is("HAKMEM_SS_MEM_LEAN", "1");
    if (!allocator_is_hakmem() || !resident_bounds_apply()) return;
    pthread_t thread;
    if (!CHECK(pthread_create(&thread, NULL, leave_empty_slots, NULL) == 0)) return;
    pthread_join(thread, NULL);
    unsigned at_exit = resident_slot_blocks();
    // The delay runs from the thread's first emptied page (10 ms on the allocator's coarse
    // clock). Read on the same clock before the first free and after the join, the span bounds
    // the allocator's from above: below 10 ms the delay cannot have passed at the thread's exit.
    // (A loaded VM can stall the thread, or the coarse clock's tick, well past 5 ms.)
    struct timespec joined;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &joined);
    double exit_ms = ms_between(slot_first_free, joined);
    // The delay (10 ms) and the coarse clock's tick passed; visitors come until the superslab
    // was visited (earlier tests may have left others ahead of it in the list).
    nanosleep(&(struct timespec){.tv_nsec = 40 * 1000 * 1000}, NULL);
    unsigned after = at_exit;
    for (int visitor = 0; visitor < 64 && after > 40; visitor++) {
        if (!CHECK(pthread_create(&thread, NULL, visit_abandoned, NULL) == 0)) break;
        pthread_join(thread, NULL);
        after = resident_slot_blocks();
    }
    printf("%s: 95 free 8 KiB blocks in an abandoned superslab: %u OS pages resident at "
           "their thread's exit, %u after the delay and a visit\n",
           is_lean ? "lean" : "speed-first", at_exit, after);
    if (exit_ms < 10.0)
        CHECK(at_exit >= 90);
    else
        printf("(the thread took %.1f ms from its first free to its exit: not judged)\n", exit_ms);
    // At most the floor's empty slots (4 of 8 blocks; the lean policy none) may stay warm, and
    // the survivor's page its 7 free blocks.
    CHECK(after <= (is_lean ? 8u : 40u));
    free(slot_blocks[0]);
}

// The next generation: a thread started as soon as the one before it exited takes the page slots
// it left (warm, within the purge delay) and faults none of them in, under both policies. The
// lean policy purged them at the exit until issue #38, and every thread of mstress (a few ms
// each) faulted its predecessor's pages in again: 30x C7_SAFE's page faults and 1.4x its time.
enum { TAKEN_BLOCKS = 80 };
static unsigned char *taken_blocks[TAKEN_BLOCKS];
static long taken_faults;

static void *take_slots(void *arg) {
    (void)arg;
    struct rusage before, after;
    getrusage(RUSAGE_THREAD, &before);
    for (int i = 0; i < TAKEN_BLOCKS; i++) {
        taken_blocks[i] = malloc(SLOT_SIZE);
        if (taken_blocks[i]) memset(taken_blocks[i], 0x3c, SLOT_SIZE);
    }
    getrusage(RUSAGE_THREAD, &after);
    taken_faults = after.ru_minflt - before.ru_minflt;
    return NULL;
}

static void test_next_generation_takes_slots_warm(void) {
    if (!allocator_is_hakmem() || !resident_bounds_apply()) return;
    pthread_t thread;
    if (!CHECK(pthread_create(&thread, NULL, leave_empty_slots, NULL) == 0)) return;
    pthread_join(thread, NULL);
    if (!CHECK(pthread_create(&thread, NULL, take_slots, NULL) == 0)) return;
    pthread_join(thread, NULL);
    struct timespec joined;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &joined);
    double took_ms = ms_between(slot_first_free, joined);
    uintptr_t region = (uintptr_t)slot_blocks[0] & ~(uintptr_t)(2 * MiB - 1);
    int same = 0;
    for (int i = 0; i < TAKEN_BLOCKS; i++)
        same += ((uintptr_t)taken_blocks[i] & ~(uintptr_t)(2 * MiB - 1)) == region;
    // Fresh memory: two OS pages a block, 160 faults.
    printf("%s: the next thread's %d blocks of 8 KiB: %d in the exited thread's superslab, %ld "
           "page faults (%.1f ms after the first free)\n",
           env_is("HAKMEM_SS_MEM_LEAN", "1") ? "lean" : "speed-first", TAKEN_BLOCKS, same,
           taken_faults, took_ms);
    if (took_ms < 10.0 && same >= TAKEN_BLOCKS * 3 / 4)
        CHECK(taken_faults < TAKEN_BLOCKS / 2);
    else
        printf("(took the delay or another superslab: not judged)\n");
    for (int i = 0; i < TAKEN_BLOCKS; i++)
        free(taken_blocks[i]);
    free(slot_blocks[0]);
}

// Speed-first: a superslab emptied by its thread waits in the cache, resident, for the purge
// delay. A thread that takes it from there
// within the delay gets its slots warm, and must still know they are resident: after it leaves the
// superslab with one live block, the first visit after the delay gives them back as for any
// superslab (test_abandoned_slots_purged_after_delay).
static unsigned char *cached_first_block;

static void *fill_and_empty_superslab(void *arg) {
    (void)arg;
    for (int i = 0; i < SLOT_BLOCKS; i++) {
        slot_blocks[i] = malloc(SLOT_SIZE);
        if (slot_blocks[i]) memset(slot_blocks[i], 0x5c, SLOT_SIZE);
    }
    for (int i = 0; i < SLOT_BLOCKS; i++)
        free(slot_blocks[i]);
    return NULL; // its emptied superslab goes to the cache
}

static void *reuse_cached_superslab(void *arg) {
    (void)arg;
    cached_first_block = malloc(SLOT_SIZE); // lives on: the superslab is abandoned at exit
    if (cached_first_block) memset(cached_first_block, 1, 64);
    return NULL;
}

static void test_cached_superslab_slots_purged(void) {
    if (!allocator_is_hakmem() || !resident_bounds_apply() || env_is("HAKMEM_SS_MEM_LEAN", "1"))
        return;
    pthread_t thread;
    if (!CHECK(pthread_create(&thread, NULL, fill_and_empty_superslab, NULL) == 0)) return;
    pthread_join(thread, NULL);
    if (!CHECK(pthread_create(&thread, NULL, reuse_cached_superslab, NULL) == 0)) return;
    pthread_join(thread, NULL);
    uintptr_t region = (uintptr_t)slot_blocks[0] & ~(uintptr_t)(2 * MiB - 1);
    bool same = ((uintptr_t)cached_first_block & ~(uintptr_t)(2 * MiB - 1)) == region;
    unsigned warm = resident_slot_blocks();
    nanosleep(&(struct timespec){.tv_nsec = 40 * 1000 * 1000}, NULL);
    unsigned after = warm;
    for (int visitor = 0; visitor < 64 && after > 40; visitor++) {
        if (!CHECK(pthread_create(&thread, NULL, visit_abandoned, NULL) == 0)) break;
        pthread_join(thread, NULL);
        after = resident_slot_blocks();
    }
    printf("speed-first: a cached superslab taken warm (%s region, %u OS pages of its free slots "
           "resident), %u after the delay and a visit\n",
           same ? "same" : "another", warm, after);
    if (same && warm >= 60)
        CHECK(after <= 40);
    else
        printf("(the superslab was purged in the cache or not reused: not judged)\n");
    free(cached_first_block);
}

// Lean policy: free medium blocks (10-32 KiB) that stay free while their thread goes on give all
// their memory back (the most recently freed few stay warm), and come back intact when needed.
enum { IDLE_BLOCKS = 20, IDLE_SIZE = 24 * 1024 }; // one 512 KiB page of them

static void *idle_blocks_thread(void *arg) {
    int is_lean = *(int *)arg;
    unsigned char *blocks[IDLE_BLOCKS];
    for (int i = 0; i < IDLE_BLOCKS; i++) {
        blocks[i] = malloc(IDLE_SIZE);
        if (!CHECK(blocks[i] != NULL)) return NULL;
        memset(blocks[i], 0x3c, IDLE_SIZE);
    }
    for (int i = 0; i < IDLE_BLOCKS - 2; i++)
        free(blocks[i]);
    // Allocation slow paths of another class (a 64 B block page carves 64 at a time): every 256
    // the lean policy reads the clock, and 10 ms after its last look at the idle medium blocks
    // it looks again: it marks those it finds, and purges those it had marked.
    enum { SMALL = 60000 };
    void **small = malloc(SMALL * sizeof *small);
    for (int round = 0; round < 3; round++) {
        usleep(25 * 1000);
        for (int i = round * SMALL / 3; i < (round + 1) * SMALL / 3; i++)
            small[i] = malloc(64);
    }
    // Resident blocks per 512 KiB page (an earlier test's thread may have left a page of
    // 24 KiB blocks that this thread adopted: some blocks come from there).
    unsigned resident = 0, pages = 0, worst_page = 0;
    for (int i = 0; i < IDLE_BLOCKS - 2; i++) {
        unsigned in_page = 0;
        for (int j = 0; j < IDLE_BLOCKS - 2; j++)
            if (((uintptr_t)blocks[j] >> 19) == ((uintptr_t)blocks[i] >> 19))
                in_page += resident_inside(blocks[j], 0, IDLE_SIZE) > 0;
        if (in_page > worst_page) worst_page = in_page;
        resident += resident_inside(blocks[i], 0, IDLE_SIZE);
        pages += IDLE_SIZE / 4096;
    }
    // They come back: handed out again from the same pages, each once, holding what is
    // written into it.
    unsigned char *again[IDLE_BLOCKS - 2];
    int same_pages = 1, distinct = 1;
    for (int i = 0; i < IDLE_BLOCKS - 2; i++) {
        again[i] = malloc(IDLE_SIZE);
        if (!CHECK(again[i] != NULL)) return NULL;
        memset(again[i], i, IDLE_SIZE);
        int found = 0;
        for (int j = 0; j < IDLE_BLOCKS; j++)
            found |= ((uintptr_t)again[i] >> 19) == ((uintptr_t)blocks[j] >> 19);
        same_pages &= found;
        for (int j = 0; j < i; j++)
            distinct &= again[i] != again[j];
    }
    int intact = 1;
    for (int i = 0; i < IDLE_BLOCKS - 2; i++)
        intact &= again[i][0] == (unsigned char)i && again[i][IDLE_SIZE - 1] == (unsigned char)i;
    printf("%s: %d free 24 KiB blocks while their thread allocates on: %u of %u OS pages "
           "resident, at most %u blocks in a page; handed out again from the same pages: %s\n",
           is_lean ? "lean" : "speed-first", IDLE_BLOCKS - 2, resident, pages, worst_page,
           same_pages ? "yes" : "no");
    CHECK(distinct && intact);
    if (allocator_is_hakmem()) CHECK(same_pages);
    // The four most recently freed of each page stay (HAK_IDLE_KEEP, purge.c).
    if (allocator_is_hakmem() && is_lean) CHECK(worst_page <= 4 && resident < pages / 2);
    for (int i = 0; i < IDLE_BLOCKS - 2; i++)
        free(again[i]);
    for (int i = IDLE_BLOCKS - 2; i < IDLE_BLOCKS; i++)
        free(blocks[i]);
    for (int i = 0; i < SMALL; i++)
        free(small[i]);
    free(small);
    return NULL;
}

static void test_lean_idle_medium_blocks_released(void) {
    int is_lean = env_is("HAKMEM_SS_MEM_LEAN", "1");
    if (!allocator_is_hakmem() || !resident_bounds_apply() ||
        env_is("HAKMEM_SMALL_HEAP_V3_ENABLED", "0")) // 24 KiB blocks on 64 KiB pages then
        return;
    pthread_t thread;
    if (!CHECK(pthread_create(&thread, NULL, idle_blocks_thread, &is_lean) == 0)) return;
    pthread_join(thread, NULL);
}

// 24 MiB of 4 KiB blocks and 8 MiB of 1 MiB blocks, touched and freed: without a trim, the
// speed-first policy keeps most of it resident for its delays (so that a program that frees
// and allocates again does not fault it back in); malloc_trim(0) gives it back now. glibc
// trims its own heap top at free already: there only the call itself is checked.
#define TRIM_SMALL 6144
static void *trim_blocks[TRIM_SMALL + 8];
static void test_malloc_trim(void) {
    if (!allocator_has_glibc_semantics()) return; // elsewhere malloc_trim is glibc's, idle
    malloc_trim(0);
    size_t base = resident_now();
    for (int i = 0; i < TRIM_SMALL + 8; i++) {
        trim_blocks[i] = malloc(i < TRIM_SMALL ? 4 * KiB : MiB);
        if (!CHECK(trim_blocks[i] != NULL)) return;
        memset(trim_blocks[i], 0x6b, i < TRIM_SMALL ? 4 * KiB : MiB);
    }
    for (int i = 0; i < TRIM_SMALL + 8; i++)
        free(trim_blocks[i]);
    size_t high = resident_now();
    int released = malloc_trim(0);
    size_t low = resident_now();
    int again = malloc_trim(0);
    printf("malloc_trim: resident %zu KiB before the blocks, %zu KiB after their frees, %zu KiB "
           "after the trim (returned %d, then %d)\n",
           base / KiB, high / KiB, low / KiB, released, again);
    CHECK(released == 0 || released == 1);
    if (!allocator_is_hakmem()) return;
#ifndef __SANITIZE_THREAD__ // ThreadSanitizer's shadow of the written blocks stays resident
    CHECK(low <= base + 4 * MiB);
#endif
    if (high > low + 2 * MiB) CHECK(released == 1);
    CHECK(again == 0);
}

// 64 MiB of blocks of four interleaved classes, freed in the order they were allocated: the
// last block of each page is freed while its page is the class's current one (an owner free
// makes its page current), and the free that empties the current page keeps it. Only a
// couple of such empty pages a class may stay: the others go back, and the superslabs they
// empty with them, so that beyond the superslab cache's 32 MiB the mappings go (virtual
// memory falls by more than 24 MiB). They did not: every page stayed in use with no block in
// it (161 of 165 medium pages in a thread that freed 100 MiB this way; and all of 800,000
// 48-byte blocks freed in order once small pages took the same LIFO rule). A trim then leaves
// little resident (the empty pages kept in the queues go too). Medium pages: 10-16 KiB blocks;
// small pages: 48-96 B.
#define ORDERED_BLOCKS (1u << 20)
static void *ordered_blocks[ORDERED_BLOCKS];
static void freed_in_allocation_order(const char *what, const size_t sizes[4]) {
    if (!allocator_has_glibc_semantics()) return; // malloc_trim below is glibc's elsewhere
    size_t per_round = sizes[0] + sizes[1] + sizes[2] + sizes[3];
    unsigned count = (unsigned)(64 * MiB / per_round * 4);
    if (count > ORDERED_BLOCKS) count = ORDERED_BLOCKS;
    memset(ordered_blocks, 0, count * sizeof *ordered_blocks); // resident from here on
    malloc_trim(0);
    size_t base = resident_now(), mapped = 0, unmapped = 0;
    for (unsigned i = 0; i < count; i++) {
        ordered_blocks[i] = malloc(sizes[i % 4]);
        if (!CHECK(ordered_blocks[i] != NULL)) return;
        memset(ordered_blocks[i], 0x3c, sizes[i % 4]);
    }
    size_t high = resident_now();
    CHECK(process_memory(NULL, &mapped));
    for (unsigned i = 0; i < count; i++)
        free(ordered_blocks[i]);
    CHECK(process_memory(NULL, &unmapped));
    malloc_trim(0);
    size_t low = resident_now();
    printf("%s blocks freed in allocation order: resident %zu KiB before, %zu KiB with the "
           "blocks, %zu KiB after their frees and a trim; mapped %zu KiB with them, %zu KiB "
           "after their frees\n",
           what, base / KiB, high / KiB, low / KiB, mapped / KiB, unmapped / KiB);
    if (!allocator_is_hakmem()) return;
    CHECK(unmapped + 24 * MiB <= mapped);
#ifndef __SANITIZE_THREAD__ // ThreadSanitizer's shadow of the written blocks stays resident
    CHECK(low <= base + 4 * MiB);
#endif
}

static void test_pages_freed_in_allocation_order_released(void) {
    static const size_t mid[4] = {10 * KiB, 12 * KiB, 14 * KiB, 16 * KiB};
    static const size_t small[4] = {48, 64, 80, 96};
    freed_in_allocation_order("mid", mid);
    freed_in_allocation_order("small", small);
}

// A thread frees the 48 MiB of 1-16 KiB blocks it allocated, in their order, and then waits for
// another (issue #38's thread chain: each thread starts the next and joins it). A waiting thread
// never comes back to purge what it keeps, so what it keeps at that point is held for good:
// its classes' current pages, and nothing that waits for a purge deadline. It kept 18 MiB
// (14 under the lean policy) while it gave pages back without taking any: the last 10 ms of
// its freed slots, and three empty pages of each medium class with the superslabs they pinned
// (the lean policy: 9 MiB).
// The other thread measures, after the delay and a trim (which reach the superslab cache and
// its own heap, not the waiting one's).
#define WAITING_BLOCKS 12000
static void *waiting_blocks[WAITING_BLOCKS];
static size_t waiting_resident;

static void *measure_beside_waiting(void *arg) {
    (void)arg;
    nanosleep(&(struct timespec){.tv_nsec = 30 * 1000 * 1000}, NULL);
    malloc_trim(0);
    waiting_resident = resident_now();
    return NULL;
}

static void *free_all_then_wait(void *arg) {
    (void)arg;
    uint64_t rng = 38;
    size_t total = 0;
    int count = 0;
    while (total < 48 * MiB && count < WAITING_BLOCKS) {
        size_t size = 1 + test_random_next(&rng) % (16 * KiB);
        waiting_blocks[count] = malloc(size);
        if (!CHECK(waiting_blocks[count] != NULL)) break;
        memset(waiting_blocks[count++], 0x38, size);
        total += size;
    }
    for (int i = 0; i < count; i++)
        free(waiting_blocks[i]);
    pthread_t thread;
    if (CHECK(pthread_create(&thread, NULL, measure_beside_waiting, NULL) == 0))
        pthread_join(thread, NULL);
    return NULL;
}

static void test_waiting_thread_keeps_little(void) {
    if (!allocator_has_glibc_semantics()) return; // malloc_trim
    malloc_trim(0);
    size_t base = resident_now();
    pthread_t thread;
    if (!CHECK(pthread_create(&thread, NULL, free_all_then_wait, NULL) == 0)) return;
    pthread_join(thread, NULL);
    size_t kept = waiting_resident > base ? waiting_resident - base : 0;
    printf("a thread that freed 48 MiB of 1-16 KiB blocks and waits keeps %zu KiB resident\n",
           kept / KiB);
    if (allocator_is_hakmem() && resident_bounds_apply()) CHECK(kept <= 8 * MiB);
}

// One block each of a C7 size (TinyHeap's front by default) and of a 3 KiB class (four blocks
// were the least a step carved), in a thread of its own: a fresh heap, fresh pages. The carve
// writes a link into every block it carves, so each block carved is resident.
static unsigned first_block_pages[2];
static void *one_block_each(void *arg) {
    (void)arg;
    static const size_t sizes[2] = {1000, 3000};
    for (int i = 0; i < 2; i++) {
        unsigned char *p = malloc(sizes[i]);
        if (!CHECK(p != NULL)) return NULL;
        p[0] = 1;
        unsigned char *page = (unsigned char *)((uintptr_t)p & ~(uintptr_t)(64 * KiB - 1));
        first_block_pages[i] = resident_inside(page, 0, 64 * KiB);
        free(p);
    }
    return NULL;
}

static void test_one_block_touches_little(void) {
    pthread_t thread;
    if (!CHECK(pthread_create(&thread, NULL, one_block_each, NULL) == 0)) return;
    pthread_join(thread, NULL);
    printf("one block of 1000 B: %u OS pages of its 64 KiB page resident; of 3000 B: %u\n",
           first_block_pages[0], first_block_pages[1]);
    if (allocator_is_hakmem() && resident_bounds_apply())
        CHECK(first_block_pages[0] <= 2 && first_block_pages[1] <= 2);
}

int main(void) {
    printf("allocator: %s\n", allocator_name());
#ifdef HAKTEST_SECURE_BUILD
    // These pin the fast layout: which class a size lands in, which slot a block takes. The
    // secure build's blocks carry a canary word, so every size lands a class higher.
    printf("skipped: the secure build's size classes are a word shorter\n");
    return test_summary();
#endif
    // First of all, while no thread has exited: its superslabs would be adopted instead.
    test_one_block_touches_little();
    // First, while the large cache is empty: the other tests' freed regions (up to 16 MiB
    // each) may otherwise fill its 32 MiB, and these regions would be unmapped at once.
    test_large_cache_purged_after_delay();
    // Also early: superslabs other tests abandon would be adopted instead of the cached one.
    test_cached_superslab_slots_purged();
    test_merged_classes_split();
    test_large_spans_from_chunks();
    test_size_classes();
    test_usable_size();
    test_realloc_does_not_copy();
    test_remote_emptied_pages_released();
    test_breathing_mid_pages_stay_resident();
    test_mid_blocks_reused();
    test_thread_exit_destructors();
    test_aligned_invalid();
    test_large_cache_reuse();
    test_large_cache_serves_regrown_vector();
    test_large_cache_serves_blocks_freed_out_of_order();
    test_lean_reused_region_tail_released();
    test_lean_freed_block_leaves_no_tail_behind();
    test_lean_tails_beyond_the_list_cost_no_madvise();
    test_abandoned_slots_purged_after_delay();
    test_next_generation_takes_slots_warm();
    test_lean_idle_medium_blocks_released();
    test_malloc_trim();
    test_pages_freed_in_allocation_order_released();
    test_waiting_thread_keeps_little();
    test_full_large_cache_keeps_the_block_freed_now(); // last: it leaves the cache full
    return test_summary();
}
