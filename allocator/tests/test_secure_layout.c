// test_secure_layout: where the secure build puts its blocks.
//   guard after each superslab: a write running off the last block of a superslab (the
//     block nearest its 2 MiB end, of a small and of a medium class) faults at the first byte
//     past the superslab, in a forked child, instead of landing on the page descriptors of a
//     superslab mapped right after it (types.h, HAK_SS_GUARD). So that the write cannot fault
//     merely because nothing happens to be mapped there, the test first maps a page of its own
//     at that address where the kernel lets it (as it would place the next superslab, or any
//     other mapping); the guard is the allocator's, so the kernel must refuse. Sizes served as
//     large blocks (their own mapping between guards, large.c) are passed over.
//   carving order: two runs of this program (re-executed) carve the first page of a size class
//     in different orders, neither of them the address order (page.c, carve_shuffled); the
//     first block stays at the page's start.
// Other builds make no such promise: the checks are skipped there.
#include "testhelper.h"
#ifdef HAKTEST_SECURE_BUILD
#define HAK_SECURE
#include "../src/api.h"
#endif

#include <malloc.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>

#define SS_SIZE ((uintptr_t)2 << 20)

#ifdef HAKTEST_SECURE_BUILD
static volatile char *write_target;
static int write_past_end(void) {
    *write_target = 1;
    return 0;
}

enum { ORDER_BLOCKS = 64, ORDER_SIZE = 200 };

// The re-executed run: the offsets of ORDER_BLOCKS blocks of a fresh page from the first, in
// bytes, on one line.
static int print_order(void) {
    char *blocks[ORDER_BLOCKS];
    for (int i = 0; i < ORDER_BLOCKS; i++)
        blocks[i] = malloc(ORDER_SIZE);
    for (int i = 1; i < ORDER_BLOCKS; i++)
        printf("%ld ", (long)(blocks[i] - blocks[0]));
    printf("\n");
    return 0;
}

// Reads one run's line into buf; 0 if the run failed.
static int run_order(char *buf, size_t size) {
    char self[4096], command[4200];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) return 0;
    self[n] = 0;
    snprintf(command, sizeof command, "'%s' order", self);
    FILE *f = popen(command, "r");
    if (!f) return 0;
    int ok = fgets(buf, (int)size, f) != NULL;
    return pclose(f) == 0 && ok;
}

static void test_carving_order(void) {
    static char first[8192], second[8192];
    if (!CHECK(run_order(first, sizeof first)) || !CHECK(run_order(second, sizeof second))) return;
    // In address order every offset is larger than the one before it.
    int ascending = 1;
    long previous = 0, offset;
    int consumed;
    for (const char *s = first; sscanf(s, "%ld%n", &offset, &consumed) == 1; s += consumed) {
        ascending = ascending && offset > previous;
        previous = offset;
    }
    printf("carving order, run 1: %.60s...\n", first);
    printf("carving order, run 2: %.60s...\n", second);
    CHECK(strcmp(first, second) != 0);
    CHECK(!ascending);
}

// Allocates up to `count` blocks of `size` and, for up to 4 of their superslabs, writes the
// byte after the superslab's 2 MiB in a child; each must die of SIGSEGV. Returns how many
// superslabs were tried.
static unsigned test_guard_after_superslab(size_t size, size_t count) {
    char **blocks = calloc(count, sizeof *blocks);
    if (!CHECK(blocks != NULL)) return 0;
    uintptr_t last[64] = {0}; // highest block seen per superslab (by index in `ends`)
    uintptr_t ends[64] = {0};
    unsigned superslabs = 0;
    for (size_t i = 0; i < count; i++) {
        blocks[i] = malloc(size);
        if (!blocks[i]) break;
        unsigned kind = hak_registry_get((uintptr_t)blocks[i]);
        if (kind != HAK_REG_SMALL && kind != HAK_REG_MEDIUM && kind != HAK_REG_BIG) continue;
        uintptr_t p = (uintptr_t)blocks[i], end = (p & ~(SS_SIZE - 1)) + SS_SIZE;
        unsigned j = 0;
        while (j < superslabs && ends[j] != end)
            j++;
        if (j == superslabs && superslabs < 64) ends[superslabs++] = end;
        if (j < 64 && p > last[j]) last[j] = p;
    }
    unsigned tested = 0, faulted = 0;
    for (unsigned j = 0; j < superslabs && tested < 4; j++) {
        // Only a superslab whose last block is the one nearest its end: it is full up to there.
        if (ends[j] - last[j] > 2 * malloc_usable_size((void *)last[j]) + 64) continue;
        write_target = (volatile char *)ends[j];
        void *mine = mmap((void *)ends[j], 4096, PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
        int status = test_in_child(write_past_end);
        if (mine != MAP_FAILED) munmap(mine, 4096);
        tested++;
        faulted += WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV;
        printf("size %zu: last block %#lx, %lu bytes before the superslab's end (%s): %s\n", size,
               (unsigned long)last[j], (unsigned long)(ends[j] - last[j]),
               mine == MAP_FAILED ? "mapped by the allocator" : "a mapping of the test's there",
               WIFSIGNALED(status) ? strsignal(WTERMSIG(status)) : "the write landed");
    }
    CHECK(faulted == tested);
    for (size_t i = 0; i < count; i++)
        free(blocks[i]);
    free(blocks);
    return tested;
}
#endif

int main(int argc, char **argv) {
#ifdef HAKTEST_SECURE_BUILD
    if (argc > 1 && strcmp(argv[1], "order") == 0) return print_order();
#else
    (void)argc, (void)argv;
#endif
    printf("allocator: %s\n", allocator_name());
    free(malloc(64)); // (the allocator under test runs, and prints its stats, as in every test)
#ifndef HAKTEST_SECURE_BUILD
    printf("skipped: only the secure build guards its superslabs\n");
    return test_summary();
#endif
#ifdef HAKTEST_SECURE_BUILD
    CHECK(test_guard_after_superslab(48, 200000) > 0);
    test_guard_after_superslab(20000, 600);
    test_guard_after_superslab(40000, 600); // medium pages where SmallObject v3 serves it
    test_carving_order();
    return test_summary();
#endif
}
