// The slow paths of the allocator's locks (lock.h): a lock held by this thread already is
// taken again (a deeper hold), a lock held by another is spun on briefly and then slept on with
// a futex; releasing the last hold wakes one sleeper.
#include "lock.h"

#include <errno.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

__thread uint32_t hak_lock_tid __attribute__((tls_model("initial-exec")));
hak_lock_counters hak_lock_stats[HAK_LOCK_COUNT];

uint32_t hak_lock_tid_slow(void) {
    int saved = errno;
    hak_lock_tid = (uint32_t)syscall(SYS_gettid) & HAK_LOCK_TID_MASK;
    errno = saved;
    return hak_lock_tid;
}

static void futex_call(_Atomic uint32_t *word, int op, uint32_t value) {
    int saved = errno;
    syscall(SYS_futex, (uint32_t *)word, op | FUTEX_PRIVATE_FLAG, value, NULL, NULL, 0);
    errno = saved;
}

#define HAK_LOCK_SPINS 100

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts); // vDSO: no syscall, errno untouched
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void hak_lock_acquire_slow(hak_lock *lock, uint32_t self) {
    uint32_t word = atomic_load_explicit(&lock->word, memory_order_relaxed);
    uint64_t waited_from = 0; // when it was first found held by another thread (0: not yet)
    hak_lock_counters *counters = &hak_lock_stats[lock->id];
    for (unsigned spins = 0;; spins++) {
        if ((word & HAK_LOCK_TID_MASK) == self) { // ours already: one hold deeper
            if (atomic_compare_exchange_weak_explicit(&lock->word, &word, word + HAK_LOCK_DEPTH_ONE,
                                                      memory_order_relaxed, memory_order_relaxed))
                return;
            continue;
        }
        if (word == 0) {
            // Taken after a sleep: others may sleep too, so the waiters bit stays set (a
            // spurious wake at release at worst).
            uint32_t want =
                self | HAK_LOCK_DEPTH_ONE | (spins > HAK_LOCK_SPINS ? HAK_LOCK_WAITERS : 0);
            if (atomic_compare_exchange_weak_explicit(&lock->word, &word, want,
                                                      memory_order_acquire, memory_order_relaxed)) {
                if (waited_from)
                    atomic_fetch_add_explicit(&counters->wait_ns, now_ns() - waited_from,
                                              memory_order_relaxed);
                return;
            }
            continue;
        }
        if (!waited_from) {
            waited_from = now_ns();
            atomic_fetch_add_explicit(&counters->contended, 1, memory_order_relaxed);
        }
        if (spins < HAK_LOCK_SPINS) {
            __builtin_ia32_pause();
            word = atomic_load_explicit(&lock->word, memory_order_relaxed);
            continue;
        }
        if (!(word & HAK_LOCK_WAITERS) &&
            !atomic_compare_exchange_weak_explicit(&lock->word, &word, word | HAK_LOCK_WAITERS,
                                                   memory_order_relaxed, memory_order_relaxed))
            continue;
        atomic_fetch_add_explicit(&counters->sleeps, 1, memory_order_relaxed);
        futex_call(&lock->word, FUTEX_WAIT, word | HAK_LOCK_WAITERS);
        word = atomic_load_explicit(&lock->word, memory_order_relaxed);
    }
}

void hak_lock_release_slow(hak_lock *lock) {
    uint32_t word = atomic_load_explicit(&lock->word, memory_order_relaxed);
    for (;;) {
        if ((word & HAK_LOCK_DEPTH_MASK) > HAK_LOCK_DEPTH_ONE) { // an inner hold
            if (atomic_compare_exchange_weak_explicit(&lock->word, &word, word - HAK_LOCK_DEPTH_ONE,
                                                      memory_order_release, memory_order_relaxed))
                return;
            continue;
        }
        // The last hold (or, in a fork child, a hold the reset already ended).
        word = atomic_exchange_explicit(&lock->word, 0, memory_order_release);
        if (word & HAK_LOCK_WAITERS) futex_call(&lock->word, FUTEX_WAKE, 1);
        return;
    }
}
