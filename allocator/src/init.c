// Process and thread life cycle.
//   process  options are read at the first allocation or in the constructor, whichever comes
//            first (from `environ`; nothing here mallocs), stats printed by the destructor.
//   thread   a thread's first slow-path allocation creates its heap; a pthread key destructor
//            gives it back at thread exit (heap.c: hak_heap_destroy).
//   fork     prepare takes glibc's stdio list lock (while the process has threads), then every
//            global lock, a lock this thread holds already once more (a fork from a signal
//            handler: lock.h); the parent releases them, the child resets them (the forking
//            thread's heap stays valid in the child). Frees that come after the thread's heap
//            was destroyed go straight to their pages (hak_thread_exited).
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>

#include "init.h"
#include "options.h"

hak_page hak_page_empty; // never written: free == NULL and local_owner == NULL forever
const hak_heap hak_heap_empty = {.direct = {[0 ... HAK_CLASS_NONE] = &hak_page_empty}};
// Every thread starts on the empty heap, so its first malloc just finds an empty free list and
// lands in the slow path, which creates the real heap: no "initialised?" test on the fast path.
__thread hak_heap *hak_tls_heap __attribute__((tls_model("initial-exec"))) =
    (hak_heap *)&hak_heap_empty;

uintptr_t hak_remote_key;
#ifdef HAK_SECURE
uintptr_t hak_canary_key;
#endif

static hak_lock init_lock = HAK_LOCK_INIT(init);
static _Atomic int options_ready;
static _Atomic int hooks_state; // 0 none, 1 being registered, 2 registered
static pthread_key_t thread_key;

void hak_process_init(void) {
    if (atomic_load_explicit(&options_ready, memory_order_acquire)) return;
    hak_lock_acquire(&init_lock);
    if (!atomic_load_explicit(&options_ready, memory_order_relaxed)) {
        hak_options_init();
        hak_route_init();
        // The kernel's 16 random bytes for this process (AT_RANDOM); odd, so never 0.
        const void *random_bytes = (const void *)getauxval(AT_RANDOM);
        uintptr_t key = (uintptr_t)&init_lock;
        if (random_bytes) memcpy(&key, random_bytes, sizeof key);
        hak_remote_key = key | 1;
#ifdef HAK_SECURE
        // The other 8 bytes, for the canaries: a key odd in no particular bit.
        uintptr_t canary_key = key * 0x9e3779b97f4a7c15u;
        if (random_bytes) memcpy(&canary_key, (const char *)random_bytes + 8, sizeof canary_key);
        hak_canary_key = canary_key;
#endif
        if (hak_option[HAK_OPT_VERBOSE]) {
            hak_options_print_values();
            hak_route_print();
        }
        atomic_store_explicit(&options_ready, 1, memory_order_release);
    }
    hak_lock_release(&init_lock);
}

__thread uint8_t hak_thread_exited __attribute__((tls_model("initial-exec")));

static void thread_done(void *value) {
    hak_heap *heap = value;
    if (heap != hak_tls_heap) return;
    hak_tls_heap = (hak_heap *)&hak_heap_empty;
    hak_thread_exited = 1;
    hak_heap_destroy(heap);
}

// glibc's stdio list lock, taken by fork() after the prepare handlers: taken here first, so
// the allocator's locks come after it as in glibc's own fork (a thread in fflush(NULL) holds it
// and waits for a stream's lock; the stream's holder, in getline, waits for an allocator lock;
// fork would otherwise hold that and wait for the list lock). It is recursive, so fork taking
// it again, or a handler that interrupted stdio, is fine. Weak: absent outside glibc.
extern void _IO_list_lock(void) __attribute__((weak));
extern void _IO_list_unlock(void) __attribute__((weak));
extern void _IO_list_resetlock(void) __attribute__((weak));

// Taken only while the process has threads: a single-threaded one has no other thread that could
// hold it, and glibc's recursive lock is not signal-safe itself (its owner is set after the
// lock word is taken), so a handler's fork that interrupted the outer fork right there would
// wait for itself. glibc's own fork takes it under the same condition.
extern char __libc_single_threaded __attribute__((weak));
static int list_lock_taken;

static void fork_prepare(void) {
    list_lock_taken = _IO_list_lock && &__libc_single_threaded && !__libc_single_threaded;
    if (list_lock_taken) _IO_list_lock();
    hak_lock_acquire(&init_lock);
    hak_heap_fork_prepare();
    hak_superslab_fork_prepare();
    hak_arena_fork_prepare();
    hak_large_fork_prepare();
}

static void fork_parent(void) {
    hak_large_fork_parent();
    hak_arena_fork_parent();
    hak_superslab_fork_parent();
    hak_heap_fork_parent();
    hak_lock_release(&init_lock);
    if (list_lock_taken) _IO_list_unlock();
}

// The child's only thread has a new id; every lock starts free (glibc resets its stdio list
// lock itself when the parent had threads, and this does it when it had none).
static void fork_child(void) {
    hak_lock_tid = 0;
    hak_lock_reset(&init_lock);
    hak_large_fork_child();
    hak_arena_fork_child();
    hak_superslab_fork_child();
    hak_heap_fork_child();
#ifdef HAK_SECURE
    hak_page_carve_reseed();
#endif
    if (list_lock_taken) _IO_list_resetlock();
}

// pthread_key_create and pthread_atfork may call malloc; by the time they run the calling
// thread has its heap, so those calls take the normal path instead of recursing into here.
// Either can fail (the process's keys used up, no memory for the handler): each is tried again
// at the next thread's start until it succeeds, and the first failure is said. Without the key
// a heap is not given back at its thread's exit; without the handlers a fork child may find a
// lock held. (Unchecked, a failed key creation left thread_key at 0, and every thread's heap
// went into whoever's key 0 was.)
static _Atomic int key_created;
static int atfork_registered, failure_said;

static void register_hooks(void) {
    int state = 0;
    if (atomic_compare_exchange_strong(&hooks_state, &state, 1)) {
        if (!atomic_load(&key_created) && pthread_key_create(&thread_key, thread_done) == 0)
            atomic_store(&key_created, 1);
        if (!atfork_registered)
            atfork_registered = pthread_atfork(fork_prepare, fork_parent, fork_child) == 0;
        int done = atomic_load(&key_created) && atfork_registered;
        if (!done && !failure_said) {
            failure_said = 1;
            int key = atomic_load(&key_created);
            hak_message("hakmem: %s%s%s failed (tried again at each thread start)\n",
                        key ? "" : "pthread_key_create", key || atfork_registered ? "" : " and ",
                        atfork_registered ? "" : "pthread_atfork");
        }
        atomic_store(&hooks_state, done ? 2 : 0);
        return;
    }
    while (atomic_load(&hooks_state) == 1)
        sched_yield();
}

hak_heap *hak_thread_init(void) {
    hak_process_init();
    hak_heap *heap = hak_heap_create();
    if (!heap) return NULL;
    hak_tls_heap = heap;
    if (atomic_load_explicit(&hooks_state, memory_order_acquire) != 2) register_hooks();
    if (atomic_load_explicit(&key_created, memory_order_relaxed))
        pthread_setspecific(thread_key, heap);
    return heap;
}

__attribute__((constructor)) static void process_start(void) {
    hak_process_init();
}

__attribute__((destructor)) static void process_exit(void) {
    hak_stats_print();
}
