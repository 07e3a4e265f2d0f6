// test_paths [rounds]: the front paths' refill and retention policies under the workloads
// that stress them, checked by content. Runs under every profile of the test matrix, so the
// same checks cover legacy, TinyHeap, HotHeap v2 and SmallObject v3 (and the lean OS
// policy).
//
//   breathing   per tiny class and a few mid sizes, the live set grows to several pages,
//               drains to a few blocks and grows again: pages empty (retained or retired)
//               and are refilled (spare reuse, bounded scans, fresh pages)
//   remote      a second thread frees half of a class's blocks while the owner keeps
//               allocating: full pages get remote frees (delayed_free) and come back
//   lean burst  with HAKMEM_SS_MEM_LEAN=1 (profile BALANCED), resident memory after
//               allocating and freeing 96 MiB of small blocks must fall back near where it was
//
// Every block carries a pattern derived from its address and size, checked before it is freed.
#include "testhelper.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define KiB ((size_t)1024)
#define MiB (1024 * KiB)

// Up to the largest size class of SmallObject v3 (256 KiB, its 512 KiB and 2 MiB pages);
// under the other fronts the sizes above 32 KiB are large blocks.
static const size_t sizes[] = {8,   16,   24,   48,   100,   200,   384,
                               700, 1024, 1500, 5000, 20000, 50000, 200000};
#define SIZE_COUNT (sizeof sizes / sizeof sizes[0])

static unsigned char pattern_byte(const void *p, size_t size) {
    uintptr_t a = (uintptr_t)p;
    return (unsigned char)((a >> 4) ^ (a >> 12) ^ size);
}

static void fill(void *p, size_t size) {
    memset(p, pattern_byte(p, size), size);
}

static bool intact(const void *p, size_t size) {
    const unsigned char *b = p, want = pattern_byte(p, size);
    for (size_t i = 0; i < size; i++)
        if (b[i] != want) return false;
    return true;
}

// Grows a class's live set to `peak` blocks (several 64 KiB pages), drains it to `keep`, and
// grows it again, checking every block on the way.
static void breathe(size_t size, size_t peak, size_t keep, int cycles, uint64_t *seed) {
    void **blocks = calloc(peak, sizeof *blocks);
    if (!CHECK(blocks != NULL)) return;
    size_t live = 0;
    bool ok = true;
    for (int c = 0; c < cycles; c++) {
        while (live < peak) {
            void *p = malloc(size);
            if (!p) break;
            fill(p, size);
            blocks[live++] = p;
        }
        ok &= live == peak;
        // Free in a random order so pages empty at different times.
        while (live > keep) {
            size_t i = (size_t)(test_random_next(seed) % live);
            ok &= intact(blocks[i], size);
            free(blocks[i]);
            blocks[i] = blocks[--live];
        }
    }
    while (live > 0) {
        ok &= intact(blocks[live - 1], size);
        free(blocks[--live]);
    }
    CHECK(ok);
    free(blocks);
}

struct remote_batch {
    void **blocks;
    size_t count, size;
    bool ok;
};

static void *free_every_other(void *arg) {
    struct remote_batch *batch = arg;
    batch->ok = true;
    for (size_t i = 0; i < batch->count; i += 2) {
        batch->ok &= intact(batch->blocks[i], batch->size);
        free(batch->blocks[i]);
        batch->blocks[i] = NULL;
    }
    return NULL;
}

// The owner fills pages (they go to its full list), another thread frees half of the blocks
// (remote frees into full pages), then the owner allocates again and must get blocks back
// from those pages without corrupting the survivors.
static void remote_refill(size_t size, size_t count) {
    struct remote_batch batch = {calloc(count, sizeof(void *)), count, size, false};
    if (!CHECK(batch.blocks != NULL)) return;
    for (size_t i = 0; i < count; i++) {
        batch.blocks[i] = malloc(size);
        if (!CHECK(batch.blocks[i] != NULL)) return;
        fill(batch.blocks[i], size);
    }
    pthread_t thread;
    if (!CHECK(pthread_create(&thread, NULL, free_every_other, &batch) == 0)) return;
    pthread_join(thread, NULL);
    CHECK(batch.ok);
    bool ok = true;
    for (size_t i = 0; i < count; i += 2) {
        batch.blocks[i] = malloc(size);
        ok &= batch.blocks[i] != NULL;
        if (batch.blocks[i]) fill(batch.blocks[i], size);
    }
    for (size_t i = 0; i < count; i++) {
        if (!batch.blocks[i]) continue;
        ok &= intact(batch.blocks[i], size);
        free(batch.blocks[i]);
    }
    CHECK(ok);
    free(batch.blocks);
}

#ifndef HAKTEST_PREFIXED_API // ASan's shadow memory would swamp the resident figure
// BALANCED's promise: after a burst of small blocks is freed, the memory goes back.
static void lean_burst(void) {
    enum { BLOCK = 512 };
    size_t count = 96 * MiB / BLOCK;
    size_t before, after, virtual_size;
    void **blocks = calloc(count, sizeof *blocks);
    if (!CHECK(blocks != NULL) || !CHECK(process_memory(&before, &virtual_size))) return;
    for (size_t i = 0; i < count; i++) {
        blocks[i] = malloc(BLOCK);
        if (!blocks[i]) {
            CHECK(blocks[i] != NULL);
            return;
        }
        memset(blocks[i], 1, BLOCK);
    }
    for (size_t i = 0; i < count; i++)
        free(blocks[i]);
    free(blocks);
    CHECK(process_memory(&after, &virtual_size));
    // The lean target (8 MiB by default, decommitted) plus each class's current page.
    if (!CHECK(after < before + 16 * MiB))
        fprintf(stderr, "lean burst: resident %zu KiB before, %zu KiB after\n", before / KiB,
                after / KiB);
}
#endif

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 3;
    uint64_t seed = 12345;
    for (int r = 0; r < rounds; r++) {
        for (size_t i = 0; i < SIZE_COUNT; i++) {
            // About six pages of live blocks at the peak, at least 16 blocks.
            size_t per_page = 64 * KiB / sizes[i];
            size_t peak = per_page * 6 > 16 ? per_page * 6 : 16;
            breathe(sizes[i], peak, peak / 16, 3, &seed);
        }
        remote_refill(1024, 600);
        remote_refill(64, 5000);
    }
#ifndef HAKTEST_PREFIXED_API
    if (allocator_is_hakmem() && env_is("HAKMEM_SS_MEM_LEAN", "1")) lean_burst();
#endif
    return test_summary();
}
