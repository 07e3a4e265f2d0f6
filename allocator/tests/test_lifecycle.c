// test_lifecycle: the allocator across the life of threads and processes, and what its slow
// paths must never do (issue #37's code read; each case failed before its fix):
//   fork child       a child that frees what another thread of the parent allocated, and
//                    allocates as much again, must reuse that memory (the thread's heap is
//                    taken over in the child), not double its resident set
//   exited thread    a thread that allocates in glibc's last round of key destructors, after
//                    its heap was destroyed, must not leave a heap (and its superslab) behind
//   calloc           zeroes every byte malloc_usable_size reports, from a reused block too
//   free and errno   free never changes errno, even when the heap it creates cannot be mapped
//   forged link      a write after free that aims a remotely freed block's link outside its
//                    page is reported when the owner collects it, before anything is written
//                    through it
// Cases that set RLIMIT_AS or plant a forged link run in a forked child.
#include "testhelper.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>

#define KiB ((size_t)1024)
#define MiB (1024 * KiB)

static size_t resident_now(void) {
    size_t resident = 0;
    process_memory(&resident, NULL);
    return resident;
}

static bool exited_with(int status, int code) {
    return status >= 0 && WIFEXITED(status) && WEXITSTATUS(status) == code;
}

// --- fork child: another thread's heap is taken over
enum { FORK_BLOCK = 4096, FORK_BLOCKS = 24 * 1024 }; // 96 MiB
static void **fork_blocks;
static pthread_mutex_t fork_mutex = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t fork_cond = PTHREAD_COND_INITIALIZER;
static int fork_stage; // 1: the blocks are allocated; 2: the parent forked, threads may go

static void *fork_holder(void *arg) {
    if (arg) { // the thread whose blocks the child frees
        for (size_t i = 0; i < FORK_BLOCKS; i++) {
            fork_blocks[i] = malloc(FORK_BLOCK);
            if (fork_blocks[i]) memset(fork_blocks[i], 0x5a, FORK_BLOCK);
        }
    } else { // a bystander with a few blocks of its own
        for (int i = 0; i < 64; i++)
            free(malloc((size_t)16 << (i % 10)));
    }
    pthread_mutex_lock(&fork_mutex);
    if (arg) fork_stage = 1;
    pthread_cond_broadcast(&fork_cond);
    while (fork_stage < 2)
        pthread_cond_wait(&fork_cond, &fork_mutex);
    pthread_mutex_unlock(&fork_mutex);
    return NULL;
}

static int fork_child_rounds(void) {
    size_t start = resident_now(), peak = start;
    for (size_t i = 0; i < FORK_BLOCKS; i++)
        free(fork_blocks[i]);
    for (int round = 0; round < 3; round++) {
        for (size_t i = 0; i < FORK_BLOCKS; i++) {
            fork_blocks[i] = malloc(FORK_BLOCK);
            if (!fork_blocks[i]) return 2;
            memset(fork_blocks[i], round, FORK_BLOCK);
        }
        size_t now = resident_now();
        if (now > peak) peak = now;
        for (size_t i = 0; i < FORK_BLOCKS; i++)
            free(fork_blocks[i]);
    }
    size_t growth = peak > start ? peak - start : 0;
    printf("fork child: resident %zu MiB after the fork, peak %zu MiB (+%zu MiB)\n", start / MiB,
           peak / MiB, growth / MiB);
    fflush(stdout);
    // Taken over, the thread's 96 MiB serve the child's rounds; left with the dead thread, each
    // round needed 96 MiB more (the resident set doubled).
    return allocator_is_hakmem() && resident_bounds_apply() && growth > 32 * MiB ? 1 : 0;
}

static void test_fork_takes_over_thread_heaps(void) {
    fork_blocks = malloc(FORK_BLOCKS * sizeof *fork_blocks);
    if (!CHECK(fork_blocks != NULL)) return;
    pthread_t holder, bystanders[2];
    CHECK(pthread_create(&holder, NULL, fork_holder, (void *)1) == 0);
    for (int i = 0; i < 2; i++)
        CHECK(pthread_create(&bystanders[i], NULL, fork_holder, NULL) == 0);
    pthread_mutex_lock(&fork_mutex);
    while (fork_stage < 1)
        pthread_cond_wait(&fork_cond, &fork_mutex);
    pthread_mutex_unlock(&fork_mutex);
    int status = test_in_child(fork_child_rounds);
    CHECK(exited_with(status, 0));
    pthread_mutex_lock(&fork_mutex);
    fork_stage = 2;
    pthread_cond_broadcast(&fork_cond);
    pthread_mutex_unlock(&fork_mutex);
    pthread_join(holder, NULL);
    for (int i = 0; i < 2; i++)
        pthread_join(bystanders[i], NULL);
    for (size_t i = 0; i < FORK_BLOCKS; i++)
        free(fork_blocks[i]);
    free(fork_blocks);
}

// --- a malloc in the last round of key destructors
static pthread_key_t late_key;
enum { LATE_THREADS = 128, LATE_BLOCKS = 256, LATE_SIZE = 1000 };

static void late_destructor(void *value) {
    uintptr_t round = (uintptr_t)value;
    if (round < PTHREAD_DESTRUCTOR_ITERATIONS) { // run again in the next round
        pthread_setspecific(late_key, (void *)(round + 1));
        return;
    }
    void *blocks[LATE_BLOCKS];
    for (int i = 0; i < LATE_BLOCKS; i++) {
        blocks[i] = malloc(LATE_SIZE);
        if (blocks[i]) memset(blocks[i], i, LATE_SIZE);
    }
    for (int i = 0; i < LATE_BLOCKS; i++)
        free(blocks[i]);
}

static void *late_thread(void *arg) {
    (void)arg;
    free(malloc(64)); // the thread's heap exists, and its key destructor runs first
    pthread_setspecific(late_key, (void *)1);
    return NULL;
}

static void run_late_threads(int count) {
    for (int i = 0; i < count; i++) {
        pthread_t thread;
        if (!CHECK(pthread_create(&thread, NULL, late_thread, NULL) == 0)) return;
        pthread_join(thread, NULL);
    }
}

static void test_malloc_in_last_destructor_round(void) {
    if (!CHECK(pthread_key_create(&late_key, late_destructor) == 0)) return;
    run_late_threads(8);
    size_t before = resident_now();
    run_late_threads(LATE_THREADS);
    size_t after = resident_now(), growth = after > before ? after - before : 0;
    printf("last destructor round: %d threads, resident +%zu KiB\n", LATE_THREADS, growth / KiB);
    // Each heap left behind kept its superslab mapped and its pages resident: +10 MiB here.
    if (resident_bounds_apply()) CHECK(growth < 4 * MiB);
}

// --- calloc zeroes the whole usable size of a reused block
static void check_calloc_reuse(size_t size) {
    unsigned char *p = malloc(size);
    if (!CHECK(p != NULL)) return;
    size_t usable = malloc_usable_size(p);
    memset(p, 0xab, usable);
    free(p);
    unsigned char *q = calloc(1, size);
    if (!CHECK(q != NULL)) return;
    usable = malloc_usable_size(q);
    size_t dirty = 0;
    for (size_t i = 0; i < usable; i++)
        dirty += q[i] != 0;
    if (!CHECK(dirty == 0))
        fprintf(stderr, "calloc(1, %zu): %zu of %zu usable bytes not zero (%s)\n", size, dirty,
                usable, q == p ? "the same block" : "another block");
    free(q);
}

static void test_calloc_zeroes_usable_size(void) {
    const size_t sizes[] = {20, 100, 1000, 5000, 100 * KiB + 100, 300 * KiB + 1, 3 * MiB + 5};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
        check_calloc_reuse(sizes[i]);
}

// --- free keeps errno when the heap it needs cannot be mapped
enum { ERRNO_THREADS = 40, ERRNO_SENTINEL = 4242 };
static void *errno_blocks[ERRNO_THREADS];
static int errno_seen[ERRNO_THREADS];
static pthread_barrier_t errno_barrier;

static void *errno_thread(void *arg) {
    uintptr_t i = (uintptr_t)arg;
    pthread_barrier_wait(&errno_barrier); // the address-space limit is set now
    errno = ERRNO_SENTINEL;
    free(errno_blocks[i]); // a remote free: the thread's heap is created on the way
    errno_seen[i] = errno;
    pthread_barrier_wait(&errno_barrier); // every heap live at once: no exited thread's to reuse
    return NULL;
}

static int free_under_limit(void) {
    for (int i = 0; i < ERRNO_THREADS; i++)
        errno_blocks[i] = malloc(48);
    pthread_barrier_init(&errno_barrier, NULL, ERRNO_THREADS + 1);
    pthread_t threads[ERRNO_THREADS];
    for (uintptr_t i = 0; i < ERRNO_THREADS; i++)
        if (pthread_create(&threads[i], NULL, errno_thread, (void *)i) != 0) return 3;
    size_t virtual_size = 0;
    process_memory(NULL, &virtual_size);
    struct rlimit limit = {virtual_size, RLIM_INFINITY}; // no new mapping
    if (setrlimit(RLIMIT_AS, &limit) != 0) return 4;
    pthread_barrier_wait(&errno_barrier);
    pthread_barrier_wait(&errno_barrier);
    int changed = 0;
    for (int i = 0; i < ERRNO_THREADS; i++) {
        pthread_join(threads[i], NULL);
        changed += errno_seen[i] != ERRNO_SENTINEL;
    }
    if (changed) printf("free changed errno in %d of %d threads\n", changed, ERRNO_THREADS);
    return changed ? 1 : 0;
}

static void test_free_keeps_errno(void) {
#if defined(HAKTEST_PREFIXED_API) // ASan's runtime cannot run under an address-space limit
    return;
#endif
    CHECK(exited_with(test_in_child(free_under_limit), 0));
}

// --- a forged link in a remote-free chain
static void *forge_target_block;

static void *remote_freer(void *arg) {
    (void)arg;
    free(forge_target_block);
    return NULL; // its exit sends its batch to the owner's page
}

static int forge_remote_link(void) {
    enum { BLOCKS = 300, SIZE = 64 };
    void *blocks[BLOCKS];
    for (int i = 0; i < BLOCKS; i++)
        blocks[i] = malloc(SIZE);
    forge_target_block = blocks[BLOCKS - 1];
    pthread_t thread;
    if (pthread_create(&thread, NULL, remote_freer, NULL) != 0) return 3;
    pthread_join(thread, NULL);
    // A write after free: the freed block's link now names memory above the heap (the stack).
    _Alignas(64) volatile uintptr_t target[8] = {0, 0x5555, 0x5555, 0x5555};
    *(volatile uintptr_t *)forge_target_block = (uintptr_t)target;
    for (int i = 0; i < 100000; i++) {
        void *p = malloc(SIZE);
        if (target[1] != 0x5555 || p == (void *)target) {
            printf("forged link followed: %s\n",
                   p == (void *)target ? "malloc returned the stack" : "the stack was written");
            fflush(stdout);
            return 1;
        }
    }
    return 0; // never collected: the test did not reach the walk
}

static void test_forged_remote_link(void) {
    if (!allocator_is_hakmem()) return; // libhakmem's own free lists
    int status = test_in_child(forge_remote_link);
    bool aborted = status >= 0 && WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT;
    if (!CHECK(aborted))
        fprintf(stderr, "forged remote link: child %s %d\n",
                WIFSIGNALED(status) ? "killed by signal" : "exited with",
                WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
}

int main(void) {
    printf("allocator: %s\n", allocator_name());
    test_free_keeps_errno(); // first: no heap of an exited thread to reuse yet
    test_calloc_zeroes_usable_size();
    test_forged_remote_link();
    test_fork_takes_over_thread_heaps();
    test_malloc_in_last_destructor_round();
    return test_summary();
}
