// test_oom: out of address space (RLIMIT_AS, as `ulimit -v` sets it for sandboxes and batch
// jobs). Each case runs in a forked child under a limit:
//   largest malloc   after a burst of 1-8 MiB blocks is allocated and freed, the largest malloc
//                    that succeeds under a 1 GB limit (glibc: 896 MiB); what the allocator keeps
//                    cached must go back before a mapping is refused
//   realloc doubling a 1 MiB block doubled by realloc until it fails must reach 512 MiB
//   realloc, table   a large realloc whose block table cannot grow (the limit leaves room for
//                    the block's growth only) returns NULL or the grown block, never aborts
// Skipped in the sanitized builds: their runtimes cannot run under an address-space limit.
#include "testhelper.h"

#include <errno.h>
#include <sys/resource.h>

#define KiB ((size_t)1024)
#define MiB (1024 * KiB)

static size_t virtual_now(void) {
    size_t virtual_size = 0;
    process_memory(NULL, &virtual_size);
    return virtual_size;
}

static bool limit_address_space(size_t bytes) {
    struct rlimit limit = {bytes, RLIM_INFINITY};
    return setrlimit(RLIMIT_AS, &limit) == 0;
}

// Runs fn in a forked child; true when it exited 0.
static bool in_child(int (*fn)(void)) {
    int status = test_in_child(fn);
    if (status >= 0 && WIFSIGNALED(status))
        fprintf(stderr, "child killed by signal %d\n", WTERMSIG(status));
    return status >= 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

#define AS_LIMIT ((size_t)1000000 * KiB) // `ulimit -v 1000000`

static void burst(void) {
    enum { BLOCKS = 96 };
    void *blocks[BLOCKS];
    uint64_t random_state = 37;
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < BLOCKS; i++) {
            size_t size = MiB + (size_t)(test_random_next(&random_state) % (7 * MiB));
            blocks[i] = malloc(size);
            if (blocks[i]) memset(blocks[i], i, 4096);
        }
        for (int i = 0; i < BLOCKS; i++)
            free(blocks[i]);
    }
}

static int largest_malloc(void) {
    if (!limit_address_space(AS_LIMIT)) return 3;
    burst();
    size_t low = 0, high = AS_LIMIT; // largest found to succeed, smallest found to fail
    while (high - low > MiB) {
        size_t mid = low + (high - low) / 2;
        void *p = malloc(mid);
        if (p) {
            low = mid;
            free(p);
        } else {
            high = mid;
        }
    }
    printf("largest malloc after the burst under a %zu MiB limit: %zu MiB\n", AS_LIMIT / MiB,
           low / MiB);
    return low >= 768 * MiB ? 0 : 1;
}

static int realloc_doubling(void) {
    if (!limit_address_space(AS_LIMIT)) return 3;
    burst();
    size_t size = MiB;
    char *p = malloc(size);
    if (!p) return 2;
    p[0] = 1;
    for (;;) {
        char *q = realloc(p, 2 * size);
        if (!q) break;
        p = q;
        size *= 2;
        p[size - 1] = 1;
    }
    printf("realloc doubling from 1 MiB under a %zu MiB limit: reached %zu MiB\n", AS_LIMIT / MiB,
           size / MiB);
    int intact = p[0] == 1;
    free(p);
    return size >= 512 * MiB && intact ? 0 : 1;
}

// The block table of libhakmem's large blocks holds up to 1,024 entries at first and grows at
// half full: live 40 KiB blocks are added one at a time, and at each step a 1 MiB block grows to
// 2 MiB under a limit that leaves room for exactly that, and shrinks back. At one step the
// table must grow to take the grown block's entry back, and cannot.
static int realloc_table_full(void) {
    enum { STEPS = 1100 };
    static void *live[STEPS];
    char *block = malloc(MiB);
    if (!block) return 2;
    memset(block, 0x3c, MiB);
    int refused = 0;
    for (int step = 0; step < STEPS; step++) {
        live[step] = malloc(40 * KiB);
        if (!live[step]) return 2;
        if (!limit_address_space(virtual_now() + MiB + 16 * KiB)) return 3;
        char *grown = realloc(block, 2 * MiB);
        if (!limit_address_space(RLIM_INFINITY)) return 3;
        if (!grown) {
            refused++;
            if (block[MiB - 1] != 0x3c) return 4; // untouched
            continue;
        }
        if (grown[0] != 0x3c || grown[MiB - 1] != 0x3c) return 4;
        block = realloc(grown, MiB);
        if (!block) return 2;
    }
    printf("realloc under a limit with the table full: %d of %d refused\n", refused, STEPS);
    for (int step = 0; step < STEPS; step++)
        free(live[step]);
    free(block);
    return 0;
}

int main(void) {
    printf("allocator: %s\n", allocator_name());
#if defined(HAKTEST_PREFIXED_API) || defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    printf("skipped: sanitizer runtimes cannot run under an address-space limit\n");
#else
    CHECK(in_child(realloc_table_full));
    // glibc, mimalloc and tcmalloc reach these; the checks hold for any allocator that gives
    // back what it caches when a mapping is refused.
    if (allocator_has_glibc_semantics()) {
        CHECK(in_child(largest_malloc));
        CHECK(in_child(realloc_doubling));
    }
#endif
    return test_summary();
}
