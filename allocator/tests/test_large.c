// test_large [iterations]: large-allocation churn, 64 KiB .. 64 MiB. Blocks are tagged on
// every page (so every page is touched, and a tag shows whose page it is), reallocated up and
// down, and checked before they are freed. Freed large memory must go back to the OS:
// resident memory after freeing hundreds of MiB returns near where it started.
#include "testhelper.h"

#include <pthread.h>
#include <time.h>
#if defined(HAKTEST_LINKS_HAKMEM)
#include "api.h" // the allocator's own counters (LARGE_STATS)
#endif

#define KiB         ((size_t)1024)
#define MiB         (1024 * KiB)
#define PAGE_STRIDE 4096

// Resident memory left after freeing everything, above the baseline: room for allocator
// caches of empty regions and for libc, far below the hundreds of MiB that were live.
static const size_t resident_slack = 32 * MiB;

// What libhakmem's speed-first policy may keep on top of that once its purge delay has passed
// (settle, below): its cache of freed large regions stays mapped, and regions purged after
// 100 ms hold no memory; 32 MiB of room for the regions freed within the delay. (The cache
// holds as much as the program recently had live, so right after a free it may hold all of
// it: a program that frees and allocates large blocks in a loop gets them back warm.)
static size_t large_cache_bound(void) {
    const char *lean = getenv("HAKMEM_SS_MEM_LEAN");
    return allocator_is_hakmem() && !(lean && *lean == '1') ? 32 * MiB : 0;
}

// Lets the lean policy's large-cache purge delay (100 ms) pass, then gives the allocator a
// chance to act on it, as any program that goes on allocating does (there is no timer thread).
// Speed-first waits 1 s, which four settles a run would add to every run of this test: there
// malloc_trim gives back what the delay would have (test_release checks the delay itself).
static void settle(void) {
    nanosleep(&(struct timespec){.tv_nsec = 150 * 1000 * 1000}, NULL);
    free(malloc(3 * MiB + 100));
    if (large_cache_bound()) malloc_trim(0);
}

static uint64_t page_tag(uint64_t block_id, size_t page) {
    return (block_id << 32) ^ (page * 0x9e3779b97f4a7c15ULL);
}

// Writes a tag word at the start of every page of the block and in its last word.
static void tag_pages(unsigned char *block, size_t size, uint64_t block_id) {
    for (size_t offset = 0; offset + sizeof(uint64_t) <= size; offset += PAGE_STRIDE) {
        uint64_t tag = page_tag(block_id, offset / PAGE_STRIDE);
        memcpy(block + offset, &tag, sizeof tag);
    }
    if (size >= sizeof(uint64_t)) memcpy(block + size - sizeof(uint64_t), &block_id, 8);
}

// Whether the tags of the first `size` bytes are intact; the last word only when
// `check_last` (a shrinking realloc cuts it off).
static bool pages_tagged(const unsigned char *block, size_t size, uint64_t block_id,
                         bool check_last) {
    for (size_t offset = 0; offset + sizeof(uint64_t) <= size; offset += PAGE_STRIDE) {
        uint64_t tag;
        memcpy(&tag, block + offset, sizeof tag);
        if (tag != page_tag(block_id, offset / PAGE_STRIDE)) return false;
    }
    if (check_last && size >= sizeof(uint64_t)) {
        uint64_t last;
        memcpy(&last, block + size - sizeof(uint64_t), sizeof last);
        if (last != block_id) return false;
    }
    return true;
}

static size_t resident_now(void) {
    size_t resident = 0;
    CHECK(process_memory(&resident, NULL));
    return resident;
}

// Log-uniform between 64 KiB and 64 MiB, plus a few bytes so sizes are rarely page-round.
static size_t random_large_size(uint64_t *random_state) {
    uint64_t r = test_random_next(random_state);
    size_t size = (size_t)64 * KiB << (r % 11);
    return size + (size_t)(r >> 8) % size;
}

// Many large blocks live at once, then all freed: resident memory must come back down.
static void test_memory_returns_after_free(size_t block_size, size_t total) {
    size_t count = total / block_size;
    unsigned char **blocks = malloc(count * sizeof *blocks);
    if (!CHECK(blocks != NULL)) return;
    size_t baseline = resident_now();
    for (size_t i = 0; i < count; i++) {
        blocks[i] = malloc(block_size);
        if (CHECK(blocks[i] != NULL)) tag_pages(blocks[i], block_size, i);
    }
    size_t peak = resident_now();
    // glibc and libhakmem unmap freed large blocks; mimalloc keeps freed segments resident
    // for reuse (its baseline already holds them), so these checks do not apply there.
    bool returns_memory = allocator_has_glibc_semantics();
    // The measurement itself must see the live blocks, or the check below proves nothing.
    if (returns_memory) CHECK(peak >= baseline + total / 2);
    for (size_t i = 0; i < count; i++) {
        if (!blocks[i]) continue;
        CHECK(pages_tagged(blocks[i], block_size, i, true));
        free(blocks[i]);
    }
    free(blocks);
    settle();
    size_t after = resident_now();
    printf("blocks of %zu KiB: baseline=%zu KiB peak=%zu KiB after_free=%zu KiB\n",
           block_size / KiB, baseline / KiB, peak / KiB, after / KiB);
    if (returns_memory) CHECK(after <= baseline + resident_slack + large_cache_bound());
}

enum { LIVE_SLOTS = 8 };

struct slot {
    unsigned char *block;
    size_t size;
    uint64_t id;
};

static void test_churn(int iterations) {
    struct slot slots[LIVE_SLOTS] = {{0}};
    uint64_t random_state = 42;
    uint64_t next_id = 1;
    for (int it = 0; it < iterations; it++) {
        struct slot *s = &slots[test_random_next(&random_state) % LIVE_SLOTS];
        uint64_t action = test_random_next(&random_state) % 4;
        if (s->block && action == 0) {
            // realloc: the common prefix keeps its tags, wherever the block lands.
            size_t new_size = random_large_size(&random_state);
            unsigned char *moved = realloc(s->block, new_size);
            if (!CHECK(moved != NULL)) continue;
            size_t kept = s->size < new_size ? s->size : new_size;
            CHECK(pages_tagged(moved, kept, s->id, new_size >= s->size));
            s->block = moved;
            s->size = new_size;
            tag_pages(s->block, s->size, s->id);
            continue;
        }
        if (s->block) {
            CHECK(pages_tagged(s->block, s->size, s->id, true));
            CHECK(malloc_usable_size(s->block) >= s->size);
            free(s->block);
        }
        s->size = random_large_size(&random_state);
        s->id = next_id++;
        s->block = action == 1 ? calloc(1, s->size) : malloc(s->size);
        if (!CHECK(s->block != NULL)) continue;
        if (action == 1) {
            bool zero = true;
            for (size_t offset = 0; offset < s->size; offset += PAGE_STRIDE / 4)
                zero &= s->block[offset] == 0;
            CHECK(zero && s->block[s->size - 1] == 0);
        }
        tag_pages(s->block, s->size, s->id);
    }
    for (int i = 0; i < LIVE_SLOTS; i++) {
        if (!slots[i].block) continue;
        CHECK(pages_tagged(slots[i].block, slots[i].size, slots[i].id, true));
        free(slots[i].block);
    }
}

// One block grown by doubling from 64 KiB to 64 MiB and shrunk back, content kept.
static void test_realloc_ladder(void) {
    size_t size = 64 * KiB;
    unsigned char *block = malloc(size);
    if (!CHECK(block != NULL)) return;
    tag_pages(block, size, 7);
    while (size < 64 * MiB) {
        unsigned char *grown = realloc(block, size * 2);
        if (!CHECK(grown != NULL)) break;
        CHECK(pages_tagged(grown, size, 7, true));
        block = grown;
        size *= 2;
        tag_pages(block, size, 7);
    }
    while (size > 64 * KiB) {
        size_t smaller = size / 2;
        unsigned char *shrunk = realloc(block, smaller);
        if (!CHECK(shrunk != NULL)) break;
        CHECK(pages_tagged(shrunk, smaller, 7, false));
        block = shrunk;
        size = smaller;
        tag_pages(block, size, 7);
    }
    free(block);
}

// realloc moving a large block by mremap while another thread maps and unmaps blocks of its
// own: the old address is free for the other thread's next mapping the moment mremap returns,
// and the block's bookkeeping must never confuse the two (a stale entry for the old address
// made the other block's usable size the moved block's old one, and its free unmap the wrong
// length). Large blocks of 20 MiB are never cached: each is a mapping of its own. (The window
// is a few hundred nanoseconds: this could not be made to fail before the fix; it guards it.)
static atomic_bool mover_done;
static atomic_long mover_moves;

static void *move_by_realloc(void *arg) {
    int rounds = *(int *)arg;
    for (int r = 0; r < rounds; r++) {
        unsigned char *block = malloc(1 * MiB);
        if (!CHECK(block != NULL)) break;
        block[0] = 0x11;
        unsigned char *obstacle = malloc(1 * MiB); // a neighbour, so growing moves the block
        unsigned char *grown = realloc(block, 3 * MiB);
        if (!CHECK(grown != NULL)) break;
        mover_moves += grown != block;
        CHECK(grown[0] == 0x11 && malloc_usable_size(grown) >= 3 * MiB);
        free(obstacle);
        free(grown);
    }
    atomic_store(&mover_done, true);
    return NULL;
}

static void test_realloc_move_races_mapping(int rounds) {
    atomic_store(&mover_done, false);
    pthread_t mover;
    if (!CHECK(pthread_create(&mover, NULL, move_by_realloc, &rounds) == 0)) return;
    long mapped = 0, wrong = 0;
    while (!atomic_load(&mover_done)) {
        size_t size = 20 * MiB + (size_t)(mapped % 7) * 4096;
        unsigned char *block = malloc(size);
        if (!CHECK(block != NULL)) break;
        block[size - 1] = 1;
        wrong += malloc_usable_size(block) < size;
        free(block);
        mapped++;
    }
    pthread_join(mover, NULL);
    printf("realloc moves %ld, concurrent 20 MiB mappings %ld, wrong usable sizes %ld\n",
           atomic_load(&mover_moves), mapped, wrong);
    CHECK(wrong == 0);
}

// A thread that frees large blocks and exits leaves their regions for the threads that go on:
// libhakmem's speed-first policy keeps a thread's last few freed regions of up to 1 MiB for
// that thread alone, and its exit hands them to the shared cache, where the next requests of
// the same size find them (the same addresses). Kept by the exited heap instead, they would
// stay mapped and resident for good, and the requests would get fresh mappings.
enum { EXIT_BLOCKS = 4 };
static const size_t exit_block_size = 512 * KiB; // above every size class, within 1 MiB
static void *free_large_and_exit(void *arg) {
    void **blocks = arg;
    free(malloc(64)); // a heap of its own, as any thread that allocates small blocks has
    for (int i = 0; i < EXIT_BLOCKS; i++) {
        blocks[i] = malloc(exit_block_size);
        if (blocks[i]) memset(blocks[i], 0x5a, exit_block_size);
    }
    for (int i = 0; i < EXIT_BLOCKS; i++)
        free(blocks[i]);
    return NULL;
}

static void test_exited_thread_leaves_its_large_regions(void) {
    if (!allocator_is_hakmem()) return; // (other allocators place blocks as they please)
#ifdef HAKTEST_SECURE_BUILD
    return; // (no cache: a freed block's addresses are quarantined, the next ones fresh)
#endif
    void *freed[EXIT_BLOCKS] = {0};
    pthread_t thread;
    if (!CHECK(pthread_create(&thread, NULL, free_large_and_exit, freed) == 0)) return;
    pthread_join(thread, NULL);
    void *again[EXIT_BLOCKS];
    int reused = 0;
    for (int i = 0; i < EXIT_BLOCKS; i++) {
        again[i] = malloc(exit_block_size);
        for (int j = 0; j < EXIT_BLOCKS; j++)
            reused += again[i] && again[i] == freed[j];
    }
    printf("an exited thread's %d freed blocks of %zu KiB: %d of them served again\n", EXIT_BLOCKS,
           exit_block_size / KiB, reused);
    CHECK(reused == EXIT_BLOCKS);
    for (int i = 0; i < EXIT_BLOCKS; i++)
        free(again[i]);
}

// A thread that only ever allocates large blocks has a heap as any other, so speed-first keeps
// its own freed regions for its next blocks (the heap's large cache) instead of sending every
// one through the shared cache: until its first large block made its heap, such a thread had
// none, and every free and malloc went to the shared cache.
enum { OWN_ROUNDS = 16 };
static void *large_blocks_only(void *arg) {
    (void)arg;
    for (int i = 0; i < OWN_ROUNDS; i++) {
        void *p = malloc(512 * KiB); // above every size class, within the heap cache's 1 MiB
        if (p) memset(p, 0x3c, 4096);
        free(p);
    }
    return NULL;
}

static void test_large_only_thread_keeps_its_regions(void) {
#if defined(HAKTEST_LINKS_HAKMEM) && !defined(HAKTEST_SECURE_BUILD)
    if (!allocator_is_hakmem() || env_is("HAKMEM_SS_MEM_LEAN", "1")) return; // speed-first only
    uint64_t before = atomic_load(&hak_stats_large.heap_cache_hit);
    pthread_t thread;
    if (!CHECK(pthread_create(&thread, NULL, large_blocks_only, NULL) == 0)) return;
    pthread_join(thread, NULL);
    uint64_t hits = atomic_load(&hak_stats_large.heap_cache_hit) - before;
    printf("a thread of large blocks only: %llu of %d mallocs from its own heap's regions\n",
           (unsigned long long)hits, OWN_ROUNDS);
    CHECK(hits >= OWN_ROUNDS - 1); // all but the first
#endif
}

int main(int argc, char **argv) {
    int iterations = argc > 1 ? atoi(argv[1]) : 80;
    printf("allocator: %s iterations=%d\n", allocator_name(), iterations);
    size_t initial = resident_now();
    // First, while no other region is cached that its requests could take instead.
    test_exited_thread_leaves_its_large_regions();
    test_large_only_thread_keeps_its_regions();
    // Before the churn, while no freed memory is cached anywhere, so each baseline is clean.
    test_memory_returns_after_free(4 * MiB, 128 * MiB);
    test_memory_returns_after_free(320 * KiB, 96 * MiB); // above every size class (256 KiB)
    test_memory_returns_after_free(24 * MiB, 120 * MiB);
    test_realloc_ladder();
    test_realloc_move_races_mapping(iterations * 5);
    test_churn(iterations);
    settle();
    size_t final = resident_now();
    printf("after churn: initial=%zu KiB final=%zu KiB\n", initial / KiB, final / KiB);
    // libhakmem unmaps large blocks. glibc does not promise it here: after large frees it
    // raises its mmap threshold (up to 32 MiB) and serves later blocks from the heap, which
    // it trims only past its trim threshold (~50 MiB stay resident in this test). The churn's
    // blocks of 64-256 KiB are size classes when SmallObject v3 serves them: their emptied
    // superslabs may then sit in the speed-first policy's cache (HAKMEM_SS_CACHE_SIZE, 32 MiB)
    // until a purge deadline is checked; the lean policy keeps none resident.
    const char *lean = getenv("HAKMEM_SS_MEM_LEAN");
    size_t cache = lean && *lean == '1' ? 0 : 32 * MiB;
    if (allocator_is_hakmem()) CHECK(final <= initial + resident_slack + cache);
    return test_summary();
}
