// test_thread_churn: the pages an exited thread leaves go to the thread that comes next
// (issue #38, mstress's pattern: a main thread that lives on, workers that come and go one
// after another, each handing a few blocks on to the main thread before it exits).
//
// Each round a worker allocates blocks of one size, hands a few to the main thread (which keeps
// them: they pin the worker's pages), frees the rest and exits; then the main thread allocates
// blocks of another size, which it has no page of yet. The next worker's first blocks must come
// from the superslab the last worker left (its pages of that size have room), not from a new
// one: the main thread, which still has free page slots of its own, must not take it. Before,
// the main thread adopted it (for the size it missed, with every page in it), the next worker
// mapped a fresh superslab, and the main thread's superslabs grew round after round.
// Checked by address (the 2 MiB region a block lies in) under libhakmem, and where the test links
// libhakmem, by its counters: at least one adoption by each worker after the first, and no
// superslab taken from the cache or the kernel by any of them.
#include "testhelper.h"

#include <pthread.h>

#if defined(HAKTEST_LINKS_HAKMEM)
#include "internal.h"
#define CHURN_COUNTERS 1
#endif

enum { ROUNDS = 6, BLOCKS = 2000, HANDED = 8, WORKER_SIZE = 64, MAIN_SIZE = 3000 };
#define REGION_MASK (~(uintptr_t)((2u << 20) - 1))

static void *handed[ROUNDS][HANDED];
static uintptr_t worker_region[ROUNDS]; // where each worker's first block lay

static void *worker(void *arg) {
    int round = (int)(intptr_t)arg;
    static __thread void *blocks[BLOCKS];
    for (int i = 0; i < BLOCKS; i++) {
        blocks[i] = malloc(WORKER_SIZE);
        if (blocks[i]) memset(blocks[i], round, WORKER_SIZE);
    }
    worker_region[round] = (uintptr_t)blocks[0] & REGION_MASK;
    for (int i = 0; i < BLOCKS; i++) {
        if (i % (BLOCKS / HANDED) == 0)
            handed[round][i / (BLOCKS / HANDED)] = blocks[i];
        else
            free(blocks[i]);
    }
    return NULL;
}

#ifdef CHURN_COUNTERS
static uint64_t acquired(void) {
    return atomic_load(&hak_stats_ss_os.cache_hit) + atomic_load(&hak_stats_ss_os.cache_miss);
}
#endif

int main(void) {
    printf("allocator: %s\n", allocator_name());
    void *own = malloc(WORKER_SIZE); // the main thread's own heap and superslab
    void *main_blocks[ROUNDS];
    int from_last = 0;
#ifdef CHURN_COUNTERS
    uint64_t adopted = 0, taken = 0; // by the workers of rounds 2 and after
#endif
    for (int round = 0; round < ROUNDS; round++) {
#ifdef CHURN_COUNTERS
        uint64_t adopt_before = atomic_load(&hak_stats_ss_os.adopt), acquired_before = acquired();
#endif
        pthread_t thread;
        if (!CHECK(pthread_create(&thread, NULL, worker, (void *)(intptr_t)round) == 0)) break;
        pthread_join(thread, NULL);
#ifdef CHURN_COUNTERS
        if (round > 0) {
            adopted += atomic_load(&hak_stats_ss_os.adopt) - adopt_before;
            taken += acquired() - acquired_before;
        }
#endif
        if (round > 0) from_last += worker_region[round] == worker_region[round - 1];
        // A size the main thread has no page of: a free slot of its own, not the worker's.
        main_blocks[round] = malloc(MAIN_SIZE + (size_t)round * 512);
        CHECK(main_blocks[round] != NULL);
    }
    printf("workers whose first block lay in the last worker's superslab: %d of %d\n", from_last,
           ROUNDS - 1);
    if (allocator_is_hakmem()) CHECK(from_last == ROUNDS - 1);
#ifdef CHURN_COUNTERS
    printf("workers 2-%d: %llu adoptions, %llu superslabs taken from the cache or the kernel\n",
           ROUNDS, (unsigned long long)adopted, (unsigned long long)taken);
    CHECK(adopted >= ROUNDS - 1);
    CHECK(taken == 0);
#endif
    for (int round = 0; round < ROUNDS; round++) {
        free(main_blocks[round]);
        for (int i = 0; i < HANDED; i++)
            free(handed[round][i]);
    }
    free(own);
    return test_summary();
}
