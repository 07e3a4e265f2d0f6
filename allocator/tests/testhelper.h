// Minimal test harness shared by the libhakmem C tests (model: mimalloc's test/testhelper.h).
//
// CHECK(expr) counts one passed or failed check and names file:line on failure; the test's
// main() ends with `return test_summary();`, which prints "N passed, N failed" alone on a
// line and makes the exit code non-zero when anything failed. Counters are atomic so worker
// threads may CHECK too.
#ifndef HAKMEM_TESTHELPER_H
#define HAKMEM_TESTHELPER_H

// Include this first: dladdr, reallocarray and pvalloc need _GNU_SOURCE before any header.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_alloc_api.h"

// A failing check inside a loop of thousands must not drown the log: print the first few.
#define TEST_MAX_PRINTED_FAILURES 25

static atomic_long test_passed_count;
static atomic_long test_failed_count;

static inline bool test_record(bool ok, const char *expr, const char *file, int line) {
    if (ok) {
        atomic_fetch_add_explicit(&test_passed_count, 1, memory_order_relaxed);
        return true;
    }
    long failed = atomic_fetch_add_explicit(&test_failed_count, 1, memory_order_relaxed) + 1;
    if (failed <= TEST_MAX_PRINTED_FAILURES) {
        fprintf(stderr, "FAIL %s:%d: %s\n", file, line, expr);
        fflush(stderr);
    }
    return false;
}

// Evaluates to the check's outcome, so a test can skip dependent checks after a failure.
#define CHECK(expr) test_record((expr) ? true : false, #expr, __FILE__, __LINE__)

static inline int test_summary(void) {
    long passed = atomic_load(&test_passed_count);
    long failed = atomic_load(&test_failed_count);
    fflush(stderr);
    printf("%ld passed, %ld failed\n", passed, failed);
    fflush(stdout);
    return failed != 0;
}

// The file name of the library (or executable) whose `malloc` this process calls.
static inline const char *malloc_provider_path(void) {
    Dl_info info;
    void *malloc_symbol = dlsym(RTLD_DEFAULT, "malloc");
    if (malloc_symbol == NULL || dladdr(malloc_symbol, &info) == 0 || info.dli_fname == NULL)
        return "";
    return info.dli_fname;
}

// Which allocator is under test: "hakmem" when linked in (static and prefixed builds say so at
// compile time) or interposed (the library defining `malloc` is libhakmem*), else "glibc",
// "mimalloc" or "other". Checks of promises that glibc makes and libhakmem copies but
// other allocators do not (ENOMEM on huge sizes, realloc(p, 0) freeing) and of
// hakmem-only behaviour are gated on it, so the same tests also pass under mimalloc.
static inline const char *allocator_name(void) {
#if defined(HAKTEST_LINKS_HAKMEM)
    return "hakmem";
#else
    const char *path = malloc_provider_path();
    if (strstr(path, "libhakmem")) return "hakmem";
    if (strstr(path, "libc.so")) return "glibc";
    if (strstr(path, "libmimalloc")) return "mimalloc";
    return "other";
#endif
}

static inline bool allocator_is_hakmem(void) {
    return strcmp(allocator_name(), "hakmem") == 0;
}

static inline bool allocator_has_glibc_semantics(void) {
    return allocator_is_hakmem() || strcmp(allocator_name(), "glibc") == 0;
}

// Small deterministic PRNG (splitmix64): same sequence under every allocator.
static inline uint64_t test_random_next(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

// Whether environment variable `name` is set to `value`.
static inline bool env_is(const char *name, const char *value) {
    const char *v = getenv(name);
    return v && strcmp(v, value) == 0;
}

// Whether resident-memory bounds say anything about the allocator: under ThreadSanitizer the
// process's resident set is mostly the sanitizer's shadow memory, which grows with every
// address and thread the program touches.
static inline bool resident_bounds_apply(void) {
#if defined(__SANITIZE_THREAD__)
    return false;
#else
    return true;
#endif
}

// Resident OS pages wholly inside [p + skip, p + size).
static inline unsigned resident_inside(unsigned char *p, size_t skip, size_t size) {
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t start = ((uintptr_t)p + skip + page - 1) & ~(page - 1);
    uintptr_t end = ((uintptr_t)p + size) & ~(page - 1);
    unsigned char vec[64];
    size_t n = (end - start) / page;
    if (end <= start || n > sizeof vec || mincore((void *)start, end - start, vec) != 0) return 0;
    unsigned resident = 0;
    for (size_t i = 0; i < n; i++)
        resident += vec[i] & 1;
    return resident;
}

// Resident and virtual size of this process in bytes, from /proc/self/statm. Reading it with
// read(2) rather than stdio keeps the measurement itself free of malloc.
static inline bool process_memory(size_t *resident, size_t *virtual_size) {
    char text[128];
    int fd = open("/proc/self/statm", O_RDONLY);
    if (fd < 0) return false;
    ssize_t n = read(fd, text, sizeof text - 1);
    close(fd);
    if (n <= 0) return false;
    text[n] = '\0';
    unsigned long pages_virtual = 0, pages_resident = 0;
    if (sscanf(text, "%lu %lu", &pages_virtual, &pages_resident) != 2) return false;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    if (resident) *resident = pages_resident * page;
    if (virtual_size) *virtual_size = pages_virtual * page;
    return true;
}

// Runs fn in a forked child, which exits with fn's result (stdout flushed first: _exit does
// not); returns the child's wait status, -1 if the fork or the wait failed.
static inline int test_in_child(int (*fn)(void)) {
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        int code = fn();
        fflush(stdout);
        _exit(code);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid) return -1;
    return status;
}

#endif
