// The allocator's locks: one 32-bit word holding the owner's thread id, how many times the
// owner holds it, and a waiters bit, so a thread can always tell whether it holds a lock
// itself, atomically, at any instruction. That is what makes fork() safe from a signal handler
// (init.c): a handler that interrupted this thread inside a critical section (or inside
// fork's own prepare handler) and then forks finds the lock its own and takes it again
// instead of waiting for itself forever, as a pthread mutex would make it. Other threads'
// locks are waited for (they are running and will let go).
//
// Bits 0-21 the owner's kernel thread id (Linux never hands out ids of 2^22 or more:
// PID_MAX_LIMIT), bits 22-30 the depth, bit 31 someone sleeps on the futex. Contended
// acquisitions spin briefly before they sleep, as glibc's adaptive mutex did here before: the
// locks are held for a few instructions, and with a plain mutex threads that allocate and free
// large blocks (bench_churn's 4 threads on 2 cores) made many times the futex calls on the
// large lock (docs/allocator.md, "Locks"; measured:
// docs/notebook/2026-11-26-allocator-measurements.md, "Thread exit, fork, process start").
#ifndef HAK_LOCK_H
#define HAK_LOCK_H

#include <stdatomic.h>
#include <stdint.h>

// Every lock of the allocator, named once: its LOCK_STATS counters are <name>_<counter>.
#define HAK_LOCKS(X)                                                                               \
    X(heaps)       /* the heap list (heap.c) */                                                    \
    X(exited)      /* the one heap of threads that allocate after their exit (heap.c) */           \
    X(abandoned)   /* the abandoned superslabs (superslab.c) */                                    \
    X(cache)       /* the empty-superslab cache (arena.c) */                                       \
    X(large_cache) /* the cache of freed large regions, span chunks (arena.c) */                   \
    X(large_table) /* the large blocks' table: one per shard, counted together (large.c) */        \
    X(init)        /* process start (init.c) */

typedef enum {
#define HAK_LOCK_ID(name) HAK_LOCK_##name,
    HAK_LOCKS(HAK_LOCK_ID)
#undef HAK_LOCK_ID
        HAK_LOCK_COUNT
} hak_lock_id;

typedef struct hak_lock {
    _Atomic uint32_t word;
    uint32_t id; // hak_lock_id: which LOCK_STATS counters it adds to
} hak_lock;

#define HAK_LOCK_INIT(name)                                                                        \
    { 0, HAK_LOCK_##name }

// LOCK_STATS (stats.h prints them): how often each lock was taken, and how often and how long
// a thread waited for one that another thread held. Waits are counted in every variant (they
// are on the slow path already: one clock read when the wait starts and one when it ends);
// acquisitions only where HAK_STATS_HOT is compiled in, since the uncontended path is one
// compare-and-swap and a shared counter beside it would be a second contended cache line.
typedef struct {
    _Atomic uint64_t acquire;   // acquisitions (HAK_STATS_HOT builds only)
    _Atomic uint64_t contended; // acquisitions that found another thread holding it
    _Atomic uint64_t sleeps;    // futex waits among them (spinning did not get it)
    _Atomic uint64_t wait_ns;   // time from finding it held to taking it
} hak_lock_counters;
extern hak_lock_counters hak_lock_stats[HAK_LOCK_COUNT];
#define HAK_LOCK_TID_MASK   ((uint32_t)0x3fffff)
#define HAK_LOCK_DEPTH_ONE  ((uint32_t)1 << 22)
#define HAK_LOCK_DEPTH_MASK ((uint32_t)0x1ff << 22)
#define HAK_LOCK_WAITERS    ((uint32_t)1 << 31)

// This thread's kernel id, cached (0 until the first lock; reset in a fork child).
extern __thread uint32_t hak_lock_tid __attribute__((tls_model("initial-exec")));
uint32_t hak_lock_tid_slow(void);
static inline uint32_t hak_lock_self(void) {
    uint32_t tid = hak_lock_tid;
    return tid ? tid : hak_lock_tid_slow();
}

void hak_lock_acquire_slow(hak_lock *lock, uint32_t self);
void hak_lock_release_slow(hak_lock *lock);

static inline void hak_lock_acquire(hak_lock *lock) {
#if defined(HAK_STATS_HOT) && HAK_STATS_HOT
    atomic_fetch_add_explicit(&hak_lock_stats[lock->id].acquire, 1, memory_order_relaxed);
#endif
    uint32_t self = hak_lock_self(), expected = 0;
    if (__builtin_expect(atomic_compare_exchange_strong_explicit(
                             &lock->word, &expected, self | HAK_LOCK_DEPTH_ONE,
                             memory_order_acquire, memory_order_relaxed),
                         1))
        return;
    hak_lock_acquire_slow(lock, self);
}

static inline void hak_lock_release(hak_lock *lock) {
    uint32_t expected = hak_lock_tid | HAK_LOCK_DEPTH_ONE;
    if (__builtin_expect(atomic_compare_exchange_strong_explicit(
                             &lock->word, &expected, 0, memory_order_release, memory_order_relaxed),
                         1))
        return;
    hak_lock_release_slow(lock);
}

// A fork child: only the forking thread exists, and its id is new. Every lock starts free.
// (The counters carry on: the child's LOCK_STATS count its parent's waits too.)
static inline void hak_lock_reset(hak_lock *lock) {
    atomic_store_explicit(&lock->word, 0, memory_order_relaxed);
}

#endif
