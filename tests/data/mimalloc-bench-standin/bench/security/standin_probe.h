/* What every stand-in probe shares: the NOT_CAUGHT line (printed, and flushed, when the
 * program got past its misuse: the allocator let it pass), and calls the compiler may not
 * see through, so the misuse reaches the allocator as written. */
#ifndef STANDIN_PROBE_H
#define STANDIN_PROBE_H
#include <stdio.h>
#include <stdlib.h>

#ifndef ALLOCATION_SIZE
#error "build with -DALLOCATION_SIZE=N"
#endif

static void report_not_caught(void) {
    fputs("NOT_CAUGHT\n", stdout);
    fflush(stdout);
}

__attribute__((noinline)) static void *opaque_malloc(size_t n) {
    void *volatile p = malloc(n);
    return p;
}

__attribute__((noinline)) static void opaque_free(void *p) {
    void *volatile q = p;
    free(q);
}
#endif
