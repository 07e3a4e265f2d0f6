// test_cache_decommit: an empty superslab that enters the cache of empty superslabs while
// another thread takes one out must still be purged by the policy: given a purge deadline,
// after which it is decommitted (arena.c: hak_arena_superslab_put; 1 ms under the lean policy, 10
// ms under speed-first). Until issue #37 the lean policy decided to decommit at once, before it
// took the cache lock: a superslab put while the cache looked full was not decommitted, and
// when a cached one left meanwhile it was cached anyway, resident, with no deadline: resident
// for good. (Since issue #38 it decommits after its delay, as speed-first does.)
//
// The race is made deterministic with the debug build's hook (hak_test_superslab_put_hook),
// called where the put is about to take the lock: it takes a superslab out of the cache, as
// another thread's malloc would. The cache holds one superslab (a 2 MiB limit). Checked: the
// allocator's own record (hak_arena_cache_resident_undue: cached, resident, no deadline) and the
// kernel's (mincore on the page the test wrote before the put). Each policy runs in a child
// started with its settings. Other builds have no hook: the test says so and passes.
#include "testhelper.h"

#if defined(HAKTEST_LINKS_HAKMEM) && defined(HAKTEST_DEBUG_BUILD)
#define HAK_DEBUG 1
#include "api.h"
#include "options.h"

#include <sys/mman.h>

static hak_superslab *taken; // what the hook took out of the cache

static void take_one_cached(hak_superslab *ss) {
    (void)ss;
    hak_test_superslab_put_hook = NULL;
    taken = hak_arena_superslab_get();
}

// Is the first OS page of the superslab's page slot 1 resident?
static int slot_resident(hak_superslab *ss) {
    unsigned char vec = 0;
    if (mincore((char *)ss + HAK_PAGE_SIZE, HAK_OS_PAGE_SIZE, &vec) != 0) return -1;
    return vec & 1;
}

static void run_policy(const char *policy) {
    int lean = strcmp(policy, "lean") == 0;
    printf("policy: %s (cache limit 2 MiB)\n", policy);
    if (!CHECK(hak_option[HAK_OPT_SS_MEM_LEAN] == lean)) return;
    // Two superslabs from the kernel (the cache is empty); the first goes into the cache.
    hak_superslab *cached = hak_superslab_acquire(NULL, HAK_KIND_SMALL, HAK_AFFINITY_ANY);
    hak_superslab *ss = hak_superslab_acquire(NULL, HAK_KIND_SMALL, HAK_AFFINITY_ANY);
    if (!CHECK(cached && ss)) return;
    hak_superslab_release(cached);
    // The second, its page slot 1 written (resident), goes in while the hook takes the first out.
    hak_page *page = hak_superslab_page_alloc(ss);
    if (!CHECK(page == &ss->pages[1])) return;
    memset((char *)ss + HAK_PAGE_SIZE, 0x5a, HAK_OS_PAGE_SIZE);
    hak_superslab_page_free(ss, page);
    CHECK(slot_resident(ss) == 1);
    hak_test_superslab_put_hook = take_one_cached;
    hak_superslab_release(ss);
    CHECK(taken == cached); // the hook ran, and the cache had the first one
    size_t undue = hak_arena_cache_resident_undue();
    int resident = slot_resident(ss);
    printf("cached resident with no purge deadline: %zu; its written page resident: %d\n", undue,
           resident);
    CHECK(undue == 0);
    CHECK(ss->dirty_mask == 0 || ss->purge_due_ns != 0);
    // Past its deadline, the next purge check decommits it (the coarse clock ticks every few
    // ms; the lean delay is 1 ms, speed-first's 10 ms).
    for (int i = 0; i < 100 && slot_resident(ss) == 1; i++) {
        usleep(2000);
        hak_purge_due(hak_tls_heap);
    }
    int later = slot_resident(ss);
    printf("after its delay: resident %d\n", later);
    CHECK(later == 0);
    if (taken) hak_arena_superslab_put(taken);
}

int main(int argc, char **argv) {
    printf("allocator: %s\n", allocator_name());
    if (argc > 1) {
        run_policy(argv[1]);
        return test_summary();
    }
    const char *policies[][2] = {{"lean", "1"}, {"speed-first", "0"}};
    for (int i = 0; i < 2; i++) {
        pid_t pid = fork();
        if (pid == 0) {
            setenv("HAKMEM_SS_MEM_LEAN", policies[i][1], 1);
            setenv("HAKMEM_SS_MEM_LEAN_TARGET_MB", "2", 1);
            setenv("HAKMEM_SS_MEM_LEAN_DECOMMIT", "1", 1);
            setenv("HAKMEM_SS_CACHE_SIZE", "2M", 1);
            execl("/proc/self/exe", argv[0], policies[i][0], (char *)NULL);
            _exit(127);
        }
        int status = -1;
        CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    return test_summary();
}
#else
int main(void) {
    printf("allocator: %s: no test hook in this build (the debug builds have it); skipped\n",
           allocator_name());
    free(malloc(64));
    return test_summary();
}
#endif
