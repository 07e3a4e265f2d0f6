// test_hooks: the allocator's thread-exit key and fork handlers when registering them fails.
//   keys used up   every pthread key is taken before the first malloc: the allocator's key
//                  creation fails, and it must never store a heap in a key that is not its own
//                  (unchecked, its key variable stayed 0: the program's key 0 got every heap)
//   atfork fails   the first pthread_atfork fails (ENOMEM): it is tried again at a later
//                  thread start until it succeeds (statically linked builds only, where this
//                  test's pthread_atfork is the one the allocator calls)
// The keys are taken in a constructor that runs before anything in the process allocates.
#include "testhelper.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>

enum { MAX_KEYS = PTHREAD_KEYS_MAX };
static pthread_key_t keys[MAX_KEYS];
static int key_count;

__attribute__((constructor(101))) static void take_every_key(void) {
    while (key_count < MAX_KEYS && pthread_key_create(&keys[key_count], NULL) == 0)
        key_count++;
}

#if defined(HAKTEST_LINKS_HAKMEM)
// This definition is the one the statically linked allocator calls; the first call fails.
extern int __register_atfork(void (*prepare)(void), void (*parent)(void), void (*child)(void),
                             void *dso_handle);
extern void *__dso_handle;
static atomic_int atfork_calls, atfork_registered;
int pthread_atfork(void (*prepare)(void), void (*parent)(void), void (*child)(void)) {
    if (atomic_fetch_add(&atfork_calls, 1) == 0) return ENOMEM;
    int result = __register_atfork(prepare, parent, child, __dso_handle);
    if (result == 0) atomic_fetch_add(&atfork_registered, 1);
    return result;
}
#endif

// No key of the program holds a value it did not store.
static int foreign_values(void) {
    int count = 0;
    for (int i = 0; i < key_count; i++)
        count += pthread_getspecific(keys[i]) != NULL;
    return count;
}

static void *worker(void *arg) {
    (void)arg;
    for (int i = 0; i < 100; i++)
        free(malloc((size_t)16 << (i % 8)));
    return (void *)(intptr_t)foreign_values();
}

int main(void) {
    void *first = malloc(64); // the first allocation: the allocator registers its hooks now
    int foreign_main = foreign_values();
    free(first);
    printf("allocator: %s, %d keys taken before the first malloc\n", allocator_name(), key_count);
    CHECK(key_count > 0);
    CHECK(foreign_main == 0);
    // The keys come back: the next thread's start may create the allocator's key now.
    for (int i = 0; i < key_count; i++)
        pthread_key_delete(keys[i]);
    key_count = 0;
    for (int t = 0; t < 3; t++) {
        pthread_t thread;
        void *result = (void *)1;
        if (!CHECK(pthread_create(&thread, NULL, worker, NULL) == 0)) break;
        pthread_join(thread, &result);
        CHECK(result == NULL);
    }
#if defined(HAKTEST_LINKS_HAKMEM)
    printf("pthread_atfork: %d calls, %d registered\n", atomic_load(&atfork_calls),
           atomic_load(&atfork_registered));
    if (allocator_is_hakmem()) CHECK(atomic_load(&atfork_registered) == 1);
#endif
    return test_summary();
}
