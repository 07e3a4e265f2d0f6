// test_fork [forks]: fork while other threads allocate and free. The child inherits the
// allocator's state at an arbitrary moment of those threads' work (locks possibly held,
// lists half-updated unless the allocator's atfork handlers prevent it); it must still
// allocate, free, start a thread of its own and exit 0. A hang in the child is caught by
// an alarm, so a deadlock fails the test instead of stalling it.
#include "testhelper.h"

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>

#define BUSY_THREADS 3

static atomic_bool stop_busy_threads;
static atomic_int busy_threads_running;

// Allocation traffic across tiny, mid and large sizes, with blocks passed between threads.
static _Atomic(void *) shared_slots[64];

static void *busy_allocator(void *arg) {
    uint64_t random_state = (uintptr_t)arg;
    void *held[32] = {0};
    for (long step = 0; !atomic_load_explicit(&stop_busy_threads, memory_order_relaxed); step++) {
        if (step == 100) atomic_fetch_add(&busy_threads_running, 1);
        uint64_t r = test_random_next(&random_state);
        size_t size = (size_t)8 << (r % 12);
        if (r % 97 == 0) size = (size_t)512 * 1024 + (r % 4096);
        size_t i = (r >> 16) % 32;
        free(held[i]);
        held[i] = malloc(size);
        if (held[i]) memset(held[i], (int)r, size < 64 ? size : 64);
        if (r % 5 == 0) {
            void *swapped = atomic_exchange(&shared_slots[(r >> 24) % 64], held[i]);
            held[i] = swapped;
        }
    }
    for (size_t i = 0; i < 32; i++)
        free(held[i]);
    return NULL;
}

static void *child_thread(void *arg) {
    (void)arg;
    for (int i = 0; i < 1000; i++) {
        void *p = malloc((size_t)(i % 2048) + 1);
        if (!p) return (void *)1;
        free(p);
    }
    return NULL;
}

// Runs in the forked child: exit status 0 means every allocation worked and was intact.
static int child_work(void) {
    alarm(20);
    enum { BLOCKS = 128, SIZE_STEPS = 20 };
    unsigned char *blocks[BLOCKS];
    for (int i = 0; i < BLOCKS; i++) {
        size_t size = (size_t)1 << (i % SIZE_STEPS); // 1 B .. 512 KiB: every path
        blocks[i] = malloc(size);
        if (!blocks[i]) return 10;
        memset(blocks[i], i & 0xff, size);
    }
    // Blocks the parent's threads held at the fork belong to threads that do not exist here.
    for (size_t slot = 0; slot < 64; slot++)
        free(atomic_exchange(&shared_slots[slot], NULL));
    pthread_t thread;
    void *thread_result = (void *)1;
    if (pthread_create(&thread, NULL, child_thread, NULL) != 0) return 11;
    pthread_join(thread, &thread_result);
    if (thread_result != NULL) return 12;
    for (int i = 0; i < BLOCKS; i++) {
        size_t size = (size_t)1 << (i % SIZE_STEPS);
        for (size_t b = 0; b < size; b += 512)
            if (blocks[i][b] != (unsigned char)(i & 0xff)) return 13;
        free(blocks[i]);
    }
    return 0;
}

int main(int argc, char **argv) {
    int forks = argc > 1 ? atoi(argv[1]) : 50;
    printf("allocator: %s forks=%d\n", allocator_name(), forks);
    fflush(stdout);
    pthread_t busy[BUSY_THREADS];
    for (uintptr_t t = 0; t < BUSY_THREADS; t++)
        CHECK(pthread_create(&busy[t], NULL, busy_allocator, (void *)(t + 1)) == 0);
    // Fork only once every busy thread is past its start. A starting thread allocates inside
    // libc (pthread_setspecific's key pages), which under ASan means ASan's own allocator;
    // gcc 12's libasan takes no lock across fork, so a fork at that moment can leave its
    // lock held in the child — a hang that is not libhakmem's.
    while (atomic_load(&busy_threads_running) < BUSY_THREADS)
        sched_yield();
    for (int i = 0; i < forks; i++) {
        pid_t pid = fork();
        if (pid == 0) exit(child_work());
        if (!CHECK(pid > 0)) break;
        int status = 0;
        CHECK(waitpid(pid, &status, 0) == pid);
        if (!CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
            fprintf(stderr, "fork %d: child %s %d\n", i,
                    WIFSIGNALED(status) ? "killed by signal" : "exited with",
                    WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
        }
    }
    atomic_store(&stop_busy_threads, true);
    for (int t = 0; t < BUSY_THREADS; t++)
        pthread_join(busy[t], NULL);
    for (size_t slot = 0; slot < 64; slot++)
        free(atomic_exchange(&shared_slots[slot], NULL));
    return test_summary();
}
