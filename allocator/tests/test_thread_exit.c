// test_thread_exit [rounds]: many short-lived threads allocate, free and exit; the
// process's memory must not grow with the number of threads — a thread's cached free
// blocks and pages must go back for reuse when it exits, not stay with the dead thread.
//
// Each thread touches about 1 MiB of blocks across the tiny and mid sizes, frees nearly all
// of them (so its caches are full when it exits) and hands a few survivors to main, which
// frees them after the thread is gone. A per-thread leak of the caches would grow resident
// memory by ~1 MiB per thread; the bound below allows a few MiB in total.
#include "testhelper.h"

#include <limits.h>
#include <pthread.h>

#define KiB ((size_t)1024)
#define MiB (1024 * KiB)

enum {
    THREADS_PER_ROUND = 4,
    WARMUP_ROUNDS = 4,
    BLOCKS_PER_THREAD = 2000,
    SURVIVORS_PER_THREAD = 16,
};

// What the process may gain after warm-up however many threads come and go: slack for the
// allocator's bookkeeping and libc's (thread stacks are cached by glibc and reused).
static const size_t resident_growth_limit = 16 * MiB;
static const size_t virtual_growth_limit = 256 * MiB;
enum { RESIDENT_WINDOW = 9 }; // rounds whose median reading stands for the start and the end

static int compare_size(const void *a, const void *b) {
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    return (x > y) - (x < y);
}

static size_t median_size(const size_t *values, int n) {
    size_t sorted[n];
    memcpy(sorted, values, sizeof sorted);
    qsort(sorted, (size_t)n, sizeof sorted[0], compare_size);
    return sorted[n / 2];
}

struct worker {
    pthread_t thread;
    uint64_t seed;
    void *survivors[SURVIVORS_PER_THREAD];
    bool intact;
};

static size_t block_size(uint64_t r) {
    // Mostly tiny classes (8..1024 B), one in eight from the mid sizes (1..16 KiB).
    return r % 8 == 0 ? KiB + (size_t)(r >> 8) % (15 * KiB) : 8 + (size_t)(r >> 8) % 1017;
}

static void *worker_main(void *arg) {
    struct worker *self = arg;
    uint64_t random_state = self->seed;
    unsigned char **blocks = malloc(BLOCKS_PER_THREAD * sizeof *blocks);
    self->intact = blocks != NULL;
    if (!blocks) return NULL;
    for (int i = 0; i < BLOCKS_PER_THREAD; i++) {
        size_t size = block_size(test_random_next(&random_state));
        blocks[i] = malloc(size);
        if (!blocks[i]) {
            self->intact = false;
            continue;
        }
        memset(blocks[i], i & 0xff, size);
    }
    for (int i = 0; i < BLOCKS_PER_THREAD; i++) {
        if (!blocks[i]) continue;
        if (blocks[i][0] != (unsigned char)(i & 0xff)) self->intact = false;
        if (i < SURVIVORS_PER_THREAD)
            self->survivors[i] = blocks[i];
        else
            free(blocks[i]);
    }
    free(blocks);
    return NULL;
}

static void run_round(int round) {
    struct worker workers[THREADS_PER_ROUND];
    for (int t = 0; t < THREADS_PER_ROUND; t++) {
        memset(&workers[t], 0, sizeof workers[t]);
        workers[t].seed = (uint64_t)round * 1000 + (uint64_t)t;
        CHECK(pthread_create(&workers[t].thread, NULL, worker_main, &workers[t]) == 0);
    }
    for (int t = 0; t < THREADS_PER_ROUND; t++) {
        pthread_join(workers[t].thread, NULL);
        CHECK(workers[t].intact);
        // Freed by main after their allocating thread has exited.
        for (int i = 0; i < SURVIVORS_PER_THREAD; i++)
            free(workers[t].survivors[i]);
    }
}

// Frees after the thread's teardown: a pthread key created after the allocator's (so its
// destructor runs after the allocator's own in each round) that re-arms itself until glibc's
// last destructor round, then frees blocks main allocated. The allocator must not keep them
// (a heap created for those frees would never be destroyed, and its batch of remote frees
// would never reach main's pages): main allocates the same sizes again each round, and the
// process must not grow with the rounds.
enum { LATE_BLOCKS = 16, LATE_SIZE = 24 * 1024, LATE_ROUNDS = 64, LATE_WARMUP = 4 };
static pthread_key_t late_key;

struct late_free {
    int rearm; // destructor rounds to wait for
    void *blocks[LATE_BLOCKS];
};

static void late_destructor(void *value) {
    struct late_free *late = value;
    if (late->rearm-- > 0) {
        pthread_setspecific(late_key, late);
        return;
    }
    for (int i = 0; i < LATE_BLOCKS; i++)
        free(late->blocks[i]);
}

static void *late_thread(void *arg) {
    free(malloc(64)); // a heap of its own, destroyed by the allocator's destructor
    pthread_setspecific(late_key, arg);
    return NULL;
}

static void late_round(struct late_free *late) {
    late->rearm = PTHREAD_DESTRUCTOR_ITERATIONS - 1;
    for (int i = 0; i < LATE_BLOCKS; i++) {
        late->blocks[i] = malloc(LATE_SIZE);
        memset(late->blocks[i], 0x33, LATE_SIZE);
    }
    pthread_t thread;
    CHECK(pthread_create(&thread, NULL, late_thread, late) == 0);
    pthread_join(thread, NULL);
}

static void test_frees_after_thread_teardown(void) {
#if defined(__SANITIZE_THREAD__)
    return; // ThreadSanitizer has torn down its own state of the thread by the last round
#endif
    free(malloc(64)); // the allocator's key exists before this one
    CHECK(pthread_key_create(&late_key, late_destructor) == 0);
    static struct late_free late;
    for (int round = 0; round < LATE_WARMUP; round++)
        late_round(&late);
    size_t resident_before = 0, virtual_before = 0, resident_after = 0, virtual_after = 0;
    CHECK(process_memory(&resident_before, &virtual_before));
    for (int round = 0; round < LATE_ROUNDS; round++)
        late_round(&late);
    CHECK(process_memory(&resident_after, &virtual_after));
    long growth_kib = ((long)resident_after - (long)resident_before) / 1024;
    printf("late frees: resident_growth_kib=%ld over %d threads (%d KiB freed late by each)\n",
           growth_kib, LATE_ROUNDS, LATE_BLOCKS * LATE_SIZE / 1024);
    if (resident_bounds_apply())
        CHECK(growth_kib < LATE_ROUNDS * LATE_BLOCKS * LATE_SIZE / 1024 / 8);
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 80;
    if (rounds <= WARMUP_ROUNDS) rounds = WARMUP_ROUNDS + 1;
    printf("allocator: %s threads=%d\n", allocator_name(), rounds * THREADS_PER_ROUND);
    test_frees_after_thread_teardown();
    for (int round = 0; round < WARMUP_ROUNDS; round++)
        run_round(round);
    size_t resident_before = 0, virtual_before = 0, resident_after = 0, virtual_after = 0;
    CHECK(process_memory(NULL, &virtual_before));
    // Resident memory after each round; the growth is the median of the last few rounds'
    // less the median of the first few: one reading swings by +-9 MiB under a sanitizer as
    // the threads of a round come and go (libc's stack cache, the sanitizer's own state), and
    // a single pair of readings made the bound fail under make test's load (17 MiB once).
    size_t resident[rounds];
    int measured = 0;
    for (int round = WARMUP_ROUNDS; round < rounds; round++) {
        run_round(round);
        CHECK(process_memory(&resident[measured++], NULL));
    }
    CHECK(process_memory(NULL, &virtual_after));
    int window = measured >= 2 * RESIDENT_WINDOW ? RESIDENT_WINDOW : (measured + 1) / 2;
    resident_before = median_size(resident, window);
    resident_after = median_size(resident + measured - window, window);
    long resident_growth_kib = ((long)resident_after - (long)resident_before) / 1024;
    long virtual_growth_kib = ((long)virtual_after - (long)virtual_before) / 1024;
    printf("resident_growth_kib=%ld virtual_growth_kib=%ld threads_after_warmup=%d\n",
           resident_growth_kib, virtual_growth_kib, (rounds - WARMUP_ROUNDS) * THREADS_PER_ROUND);
    if (resident_bounds_apply()) CHECK(resident_after <= resident_before + resident_growth_limit);
    CHECK(virtual_after <= virtual_before + virtual_growth_limit);
    return test_summary();
}
