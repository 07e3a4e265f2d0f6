// test_invalid_free (libhakmem only): freeing memory that is not a live libhakmem block must
// not corrupt anything silently. Each case runs in a forked child, which must be killed by
// SIGABRT after writing a one-line message on stderr that names the pointer (like glibc's
// "free(): invalid pointer"). Other allocators make no such promise: there the test only
// says so and passes without checks.
#include "testhelper.h"

#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>

static long global_word;
// Where the forged links of the *_BELOW cases point: the program's static data, below the
// heap (the program's image is mapped low, the allocator's memory high).
static uintptr_t link_target[4] __attribute__((aligned(64)));

enum invalid_case {
    STACK_POINTER,
    GLOBAL_POINTER,
    FOREIGN_MMAP,
    DOUBLE_FREE_SMALL,
    DOUBLE_FREE_MID,
    DOUBLE_FREE_LARGE,
    INTERIOR_PLUS_1,
    INTERIOR_PLUS_16,
    INTERIOR_LARGE,
    INTERLEAVED_DOUBLE_FREE,
    INTERLEAVED_WITH_NEIGHBOURS,
    CROSS_THREAD_DOUBLE_FREE,
    WRITE_AFTER_FREE,
    HEADER_SMALL,
    HEADER_MID,
    WRITE_AFTER_FREE_BELOW,
    REMOTE_CHAIN_BELOW,
    CASE_COUNT
};

static const char *const case_names[] = {"stack pointer",
                                         "global pointer",
                                         "foreign mmap",
                                         "double free 64 B",
                                         "double free 8 KiB",
                                         "double free 1 MiB",
                                         "free(p + 1)",
                                         "free(p + 16)",
                                         "free(large + 4096)",
                                         "free a; b; a",
                                         "free a; b; a (live neighbours)",
                                         "cross-thread double free",
                                         "write after free",
                                         "free(superslab of 64 B block)",
                                         "free(superslab of 8 KiB block)",
                                         "write after free: link below the heap",
                                         "remote free: link below the heap"};
// The kind of error the message must name.
static const char *const case_kinds[] = {
    "invalid pointer",     "invalid pointer", "invalid pointer", "double free",
    "double free",         "double free",     "invalid pointer", "invalid pointer",
    "invalid pointer",     "double free",     "double free",     "double free",
    "free list corrupted", "invalid pointer", "invalid pointer", "free list corrupted",
    "free list corrupted"};

// What a forged link's report names: the fast build finds the forged link itself when the
// slow path checks it (hak_page_bad_link), the debug and secure builds the block that held
// it, at the pop that read it.
static uintptr_t forged_link_report(void *block) {
#if defined(HAKTEST_DEBUG_BUILD) || defined(HAKTEST_SECURE_BUILD)
    return (uintptr_t)block;
#else
    (void)block;
    return (uintptr_t)link_target;
#endif
}

static void *free_in_thread(void *p) {
    free(p);
    return NULL;
}

// Child side: writes the pointer it is about to pass to free() into `report_fd`, then does
// the bad free. Returning from here means the free did not abort.
static void commit_invalid_free(enum invalid_case which, int report_fd) {
    long stack_word = 0;
    void *bad = NULL;
    switch (which) {
    case STACK_POINTER:
        bad = &stack_word;
        break;
    case GLOBAL_POINTER:
        bad = &global_word;
        break;
    case FOREIGN_MMAP: {
        unsigned char *page =
            mmap(NULL, 65536, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        bad = page == MAP_FAILED ? NULL : page + 64;
        break;
    }
    case DOUBLE_FREE_SMALL:
    case DOUBLE_FREE_MID:
    case DOUBLE_FREE_LARGE: {
        size_t size = which == DOUBLE_FREE_SMALL ? 64 : which == DOUBLE_FREE_MID ? 8192 : 1 << 20;
        bad = malloc(size);
        // Other live blocks around it, so the free is not of a page's only block.
        void *neighbour = malloc(size);
        memset(bad, 0x5a, size);
        free(bad);
        (void)neighbour;
        break;
    }
    case INTERIOR_PLUS_1:
    case INTERIOR_PLUS_16:
    case INTERIOR_LARGE: {
        size_t size = which == INTERIOR_LARGE ? 100000 : 64;
        unsigned char *block = malloc(size);
        void *neighbour = malloc(size);
        (void)neighbour;
        bad = block + (which == INTERIOR_PLUS_1 ? 1 : which == INTERIOR_PLUS_16 ? 16 : 4096);
        break;
    }
    case INTERLEAVED_DOUBLE_FREE:
    case INTERLEAVED_WITH_NEIGHBOURS: {
        // A size nothing else in this process uses, so a and b are alone on their page (the
        // second free of a takes the page below empty); with live neighbours the page does not
        // empty, and only the debug build's list walk sees it (docs/allocator.md).
        size_t size = 2900;
        void *keep[8];
        for (int i = 0; which == INTERLEAVED_WITH_NEIGHBOURS && i < 8; i++)
            keep[i] = malloc(size);
        void *a = malloc(size), *b = malloc(size);
        (void)keep;
        free(a);
        free(b);
        bad = a;
        break;
    }
    case CROSS_THREAD_DOUBLE_FREE: {
        // Allocated here, freed by one thread, then by another: both frees are remote.
        bad = malloc(64);
        void *neighbour = malloc(64);
        (void)neighbour;
        pthread_t thread;
        if (pthread_create(&thread, NULL, free_in_thread, bad) != 0) _exit(3);
        pthread_join(thread, NULL);
        uintptr_t value = (uintptr_t)bad;
        if (write(report_fd, &value, sizeof value) != (ssize_t)sizeof value) _exit(3);
        if (pthread_create(&thread, NULL, free_in_thread, bad) != 0) _exit(3);
        pthread_join(thread, NULL);
        _exit(0);
    }
    case WRITE_AFTER_FREE: {
        // A freed block's link overwritten; the malloc that pops it reports it (debug build).
        // The mallocs after it drain the page's carved blocks (how many a carve links depends
        // on the front) until the freed block's turn comes.
        void *blocks[4];
        for (int i = 0; i < 4; i++)
            blocks[i] = malloc(2900);
        free(blocks[3]);
        bad = blocks[3];
        uintptr_t value = (uintptr_t)bad;
        if (write(report_fd, &value, sizeof value) != (ssize_t)sizeof value) _exit(3);
        *(volatile uintptr_t *)blocks[3] = 0x4141414141414140;
        for (int i = 0; i < 64; i++) {
            void *again = malloc(2900);
            (void)again;
        }
        _exit(0);
    }
    case WRITE_AFTER_FREE_BELOW: {
        // As above, the link aimed at the program's static data: every build, the fast one
        // included, must refuse it (the fast pop's test, then the slow path's full check)
        // rather than hand out link_target.
        void *blocks[4];
        for (int i = 0; i < 4; i++)
            blocks[i] = malloc(2900);
        free(blocks[3]);
        uintptr_t value = forged_link_report(blocks[3]);
        if (write(report_fd, &value, sizeof value) != (ssize_t)sizeof value) _exit(3);
        *(volatile uintptr_t *)blocks[3] = (uintptr_t)link_target;
        for (int i = 0; i < 64; i++)
            if (malloc(2900) == (void *)link_target) _exit(4); // handed out: not caught
        _exit(0);
    }
    case REMOTE_CHAIN_BELOW: {
        // A block freed by another thread waits on its page's remote list; a write after free
        // aims its link at static data. The owner's collect walks that list and writes into
        // each block: it must refuse the forged link before writing through it.
        void *block = malloc(64);
        void *neighbour = malloc(64);
        (void)neighbour;
        pthread_t thread;
        if (pthread_create(&thread, NULL, free_in_thread, block) != 0) _exit(3);
        pthread_join(thread, NULL);
        uintptr_t value = forged_link_report(block);
        if (write(report_fd, &value, sizeof value) != (ssize_t)sizeof value) _exit(3);
        link_target[1] = 0x5a5a5a5a;
        *(volatile uintptr_t *)block = (uintptr_t)link_target;
        for (int i = 0; i < 8192; i++)
            if (malloc(64) == (void *)link_target) _exit(4);
        _exit(link_target[1] == 0x5a5a5a5a ? 0 : 5); // 5: the walk wrote into it
    }
    case HEADER_SMALL:
    case HEADER_MID: {
        // The start of the 2 MiB region a block lies in: where libhakmem keeps the region's
        // page descriptors. Accepted, it would be handed out by a later malloc.
        void *block = malloc(which == HEADER_SMALL ? 64 : 8192);
        bad = (void *)((uintptr_t)block & ~(uintptr_t)((2 << 20) - 1));
        break;
    }
    case CASE_COUNT:
        break;
    }
    uintptr_t value = (uintptr_t)bad;
    if (write(report_fd, &value, sizeof value) != (ssize_t)sizeof value) _exit(3);
    free(bad);
    _exit(0);
}

// Every 0x... number in the text, compared with `expected`.
static bool text_names_pointer(const char *text, uintptr_t expected) {
    for (const char *p = text; (p = strstr(p, "0x")) != NULL; p += 2) {
        char *end = NULL;
        unsigned long long value = strtoull(p, &end, 16);
        if (end != p + 2 && (uintptr_t)value == expected) return true;
    }
    return false;
}

// Lines the child wrote to stderr: the message must be one line, not a dump.
static int count_lines(const char *text) {
    int lines = 0;
    for (const char *p = text; *p; p++)
        lines += *p == '\n';
    return lines;
}

static void run_case(enum invalid_case which) {
    int report_pipe[2], stderr_pipe[2];
    if (!CHECK(pipe(report_pipe) == 0 && pipe(stderr_pipe) == 0)) return;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        close(report_pipe[0]);
        close(stderr_pipe[0]);
        dup2(stderr_pipe[1], STDERR_FILENO);
        alarm(10);
        commit_invalid_free(which, report_pipe[1]);
    }
    close(report_pipe[1]);
    close(stderr_pipe[1]);
    if (!CHECK(pid > 0)) return;
    uintptr_t bad = 0;
    bool reported = read(report_pipe[0], &bad, sizeof bad) == (ssize_t)sizeof bad;
    static char text[8192];
    size_t length = 0;
    ssize_t n;
    while (length < sizeof text - 1 &&
           (n = read(stderr_pipe[0], text + length, sizeof text - 1 - length)) > 0)
        length += (size_t)n;
    text[length] = '\0';
    close(report_pipe[0]);
    close(stderr_pipe[0]);
    int status = 0;
    waitpid(pid, &status, 0);

    bool aborted = WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT;
    bool named = reported && text_names_pointer(text, bad);
    bool one_line = count_lines(text) == 1;
    bool kind = strstr(text, case_kinds[which]) != NULL && strstr(text, "free") != NULL;
    CHECK(reported);
    CHECK(aborted);
    CHECK(named);
    CHECK(one_line);
    CHECK(kind);
    printf("%-18s %s, stderr: %s", case_names[which],
           aborted               ? "SIGABRT"
           : WIFSIGNALED(status) ? strsignal(WTERMSIG(status))
                                 : "exited",
           length ? text : "(nothing)\n");
}

#ifdef HAKTEST_SECURE_BUILD
#define HAK_SECURE
#include "../src/api.h"
// The secure build's tail canary: its first byte, the one an off-by-one write past the block
// hits (a NUL, in the classic strcpy bug), must never be 0, whatever the process's key, or
// that write passes unnoticed for the keys whose low byte is 0. The key is swapped only
// between two points where this thread neither allocates nor frees (no block's canary or link
// is computed meanwhile), and the function is the one the library inlines.
static void test_canary_first_byte_never_zero(void) {
    static const uintptr_t keys[] = {0, 0x100, 0x123456789abcde00u, ~(uintptr_t)0xff};
    static const uintptr_t addresses[] = {0x7f0000000000u, 0x7f0000001000u, 0x7f0000000100u,
                                          0x7f0000000030u, 0x7f00001ff000u, 0x7fffffffe000u};
    uintptr_t saved = hak_canary_key;
    unsigned zero = 0;
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
        hak_canary_key = keys[k];
        for (size_t a = 0; a < sizeof addresses / sizeof addresses[0]; a++)
            zero += (hak_canary_value((const void *)addresses[a]) & 0xff) == 0;
    }
    hak_canary_key = saved;
    printf("canary first byte 0 for %u of %zu keys x addresses\n", zero,
           sizeof keys / sizeof keys[0] * (sizeof addresses / sizeof addresses[0]));
    CHECK(zero == 0);
}
#endif

int main(void) {
    printf("allocator: %s\n", allocator_name());
#ifdef HAKTEST_SECURE_BUILD
    test_canary_first_byte_never_zero();
#endif
    if (!allocator_is_hakmem()) {
        printf("skipped: only libhakmem promises an abort with a message naming the pointer\n");
        return test_summary();
    }
    for (enum invalid_case c = STACK_POINTER; c < CASE_COUNT; c++) {
#ifndef HAKTEST_DEBUG_BUILD
        if (c == INTERLEAVED_WITH_NEIGHBOURS) continue;
#ifndef HAKTEST_SECURE_BUILD // the secure build checks every link it pops
        if (c == WRITE_AFTER_FREE) continue;
#endif
#endif
        run_case(c);
    }
    return test_summary();
}
