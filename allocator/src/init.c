// Process and thread life cycle.
//   process  options are read at the first allocation or in the constructor, whichever comes
//            first (from `environ`; nothing here mallocs), stats printed by the destructor.
//   thread   a thread's first slow-path allocation creates its heap; a pthread key destructor
//            gives it back at thread exit (heap.c: hak_heap_destroy).
//   fork     prepare takes every global lock, the parent releases them, the child re-creates
//            them (the forking thread's heap stays valid in the child).
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>

#include "internal.h"
#include "options.h"

hak_page hak_page_empty; // never written: free == NULL and local_owner == NULL forever
const hak_heap hak_heap_empty = {.direct = {[0 ... HAK_CLASS_NONE] = &hak_page_empty}};
// Every thread starts on the empty heap, so its first malloc just finds an empty free list and
// lands in the slow path, which creates the real heap: no "initialised?" test on the fast path.
__thread hak_heap *hak_tls_heap __attribute__((tls_model("initial-exec"))) =
    (hak_heap *)&hak_heap_empty;

uintptr_t hak_remote_key;

static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic int options_ready;
static _Atomic int hooks_state; // 0 none, 1 being registered, 2 registered
static pthread_key_t thread_key;

#ifdef HAK_DEBUG
void hak_assert_fail(const char *expr, const char *file, int line) {
    hak_message("hakmem: assertion failed: %s (%s:%d)\n", expr, file, line);
    abort();
}
#endif

void hak_process_init(void) {
    if (atomic_load_explicit(&options_ready, memory_order_acquire)) return;
    pthread_mutex_lock(&init_lock);
    if (!atomic_load_explicit(&options_ready, memory_order_relaxed)) {
        hak_options_init();
        hak_route_init();
        // The kernel's 16 random bytes for this process (AT_RANDOM); odd, so never 0.
        const void *random_bytes = (const void *)getauxval(AT_RANDOM);
        uintptr_t key = (uintptr_t)&init_lock;
        if (random_bytes) memcpy(&key, random_bytes, sizeof key);
        hak_remote_key = key | 1;
        if (hak_option[HAK_OPT_VERBOSE]) {
            hak_options_print_values();
            hak_route_print();
        }
        atomic_store_explicit(&options_ready, 1, memory_order_release);
    }
    pthread_mutex_unlock(&init_lock);
}

static void thread_done(void *value) {
    hak_heap *heap = value;
    if (heap != hak_tls_heap) return;
    hak_tls_heap = (hak_heap *)&hak_heap_empty;
    hak_heap_destroy(heap);
}

static void fork_prepare(void) {
    hak_heap_fork_prepare();
    hak_superslab_fork_prepare();
    hak_os_fork_prepare();
    hak_large_fork_prepare();
}

static void fork_parent(void) {
    hak_large_fork_parent();
    hak_os_fork_parent();
    hak_superslab_fork_parent();
    hak_heap_fork_parent();
}

static void fork_child(void) {
    hak_large_fork_child();
    hak_os_fork_child();
    hak_superslab_fork_child();
    hak_heap_fork_child();
}

// pthread_key_create and pthread_atfork may call malloc; by the time they run the calling
// thread has its heap, so those calls take the normal path instead of recursing into here.
static void register_hooks(void) {
    int state = 0;
    if (atomic_compare_exchange_strong(&hooks_state, &state, 1)) {
        pthread_key_create(&thread_key, thread_done);
        pthread_atfork(fork_prepare, fork_parent, fork_child);
        atomic_store(&hooks_state, 2);
        return;
    }
    while (atomic_load(&hooks_state) != 2)
        sched_yield();
}

hak_heap *hak_thread_init(void) {
    hak_process_init();
    hak_heap *heap = hak_heap_create();
    if (!heap) return NULL;
    hak_tls_heap = heap;
    if (atomic_load_explicit(&hooks_state, memory_order_acquire) != 2) register_hooks();
    pthread_setspecific(thread_key, heap);
    return heap;
}

__attribute__((constructor)) static void process_start(void) {
    hak_process_init();
}

__attribute__((destructor)) static void process_exit(void) {
    hak_stats_print();
}
