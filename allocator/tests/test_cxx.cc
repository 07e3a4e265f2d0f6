// test_cxx: C++'s allocation functions reach libhakmem in every form the standard library
// declares (plain, array, nothrow, aligned, sized, and their combinations), with C++'s failure
// semantics: the new_handler is called until it gives up, then std::bad_alloc is thrown, and
// the nothrow forms return nullptr. The debug and secure builds check the size a sized delete
// passes: a delete through a pointer of the wrong type aborts like an invalid free; the fast
// build trusts it (a block of at most 8 KiB goes straight to its page): sizes and alignments
// at that bound, and sized deletes from another thread, must free exactly. Also C23's
// free_sized and free_aligned_sized. Under glibc (the dynamic binary without LD_PRELOAD) it
// checks the semantics only: libstdc++ implements them there.
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <initializer_list>
#include <malloc.h>
#include <new>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

extern "C" void free_sized(void *p, size_t size) __attribute__((weak));
extern "C" void free_aligned_sized(void *p, size_t alignment, size_t size) __attribute__((weak));

static long passed, failed;
#define CHECK(e)                                                                                   \
    ((e) ? (void)passed++                                                                          \
         : (void)(failed++, std::printf("FAIL %s:%d: %s\n", __FILE__, __LINE__, #e)))

// Whether operator new comes from libhakmem here (linked in, or preloaded), not libstdc++.
static bool hakmem_new() {
    void *(*op_new)(size_t) = &::operator new;
    Dl_info info;
    return dladdr((void *)op_new, &info) && info.dli_fname &&
           !std::strstr(info.dli_fname, "libstdc++");
}

struct Small {
    long words[3];
};
struct alignas(64) Line {
    char bytes[100];
};
struct alignas(4096) PageAligned {
    char bytes[5000];
};

static void fill_and_check(unsigned char *p, size_t n, unsigned char v) {
    std::memset(p, v, n);
    CHECK(p[0] == v && p[n - 1] == v);
}

static void test_forms() {
    for (int round = 0; round < 200; round++) {
        size_t n = 1 + (size_t)round * 37 % 70000; // tiny, mid and large
        Small *s = new Small;                      // operator new(size_t)
        s->words[2] = round;
        delete s; // sized: operator delete(void*, size_t) with -fsized-deallocation
        unsigned char *a = new unsigned char[n]; // operator new[](size_t)
        fill_and_check(a, n, (unsigned char)round);
        delete[] a; // operator delete[](void*)
        Small *arr = new Small[(size_t)round % 50 + 1];
        delete[] arr;
        Small *nt = new (std::nothrow) Small; // nothrow
        CHECK(nt != nullptr);
        delete nt;
        unsigned char *nta = new (std::nothrow) unsigned char[n];
        CHECK(nta != nullptr);
        ::operator delete[](nta, std::nothrow);
        Line *l = new Line; // operator new(size_t, align_val_t)
        CHECK((uintptr_t)l % 64 == 0);
        delete l; // operator delete(void*, size_t, align_val_t)
        Line *la = new Line[3];
        CHECK((uintptr_t)la % 64 == 0);
        delete[] la;
        PageAligned *pa = new PageAligned;
        CHECK((uintptr_t)pa % 4096 == 0);
        fill_and_check((unsigned char *)pa, sizeof *pa, 7);
        delete pa;
        void *an = ::operator new(n, std::align_val_t(256), std::nothrow);
        CHECK(an != nullptr && (uintptr_t)an % 256 == 0);
        ::operator delete(an, std::align_val_t(256), std::nothrow);
        void *ana = ::operator new[](n, std::align_val_t(128));
        CHECK((uintptr_t)ana % 128 == 0);
        ::operator delete[](ana, n, std::align_val_t(128));
        void *sized = ::operator new(n);
        ::operator delete(sized, n);
        void *sized_array = ::operator new[](n);
        ::operator delete[](sized_array, n);
        void *aligned_plain = ::operator new(n, std::align_val_t(32));
        ::operator delete(aligned_plain, std::align_val_t(32));
    }
}

// Sized deletes at the bound below which the fast build trusts the size (8 KiB, alignment
// 4 KiB: a small page), on both sides of it, from this thread and from another one; then the
// same blocks again: a block freed to the wrong list would be handed out twice.
static void *sized_blocks[3][4][16];
static const size_t sized_sizes[3] = {8191, 8192, 8193};
static const size_t sized_aligns[4] = {16, 64, 4096, 8192};
static void sized_alloc_all() {
    for (int s = 0; s < 3; s++)
        for (int a = 0; a < 4; a++)
            for (int i = 0; i < 16; i++) {
                sized_blocks[s][a][i] =
                    ::operator new(sized_sizes[s], std::align_val_t(sized_aligns[a]));
                std::memset(sized_blocks[s][a][i], s * 4 + a, sized_sizes[s]);
            }
}
static void *sized_delete_all(void *) {
    for (int s = 0; s < 3; s++)
        for (int a = 0; a < 4; a++)
            for (int i = 0; i < 16; i++)
                ::operator delete(sized_blocks[s][a][i], sized_sizes[s],
                                  std::align_val_t(sized_aligns[a]));
    return nullptr;
}
static void test_sized_bounds() {
    for (int round = 0; round < 4; round++) {
        sized_alloc_all();
        if (round % 2) {
            pthread_t thread;
            CHECK(pthread_create(&thread, nullptr, sized_delete_all, nullptr) == 0);
            pthread_join(thread, nullptr);
        } else {
            sized_delete_all(nullptr);
        }
    }
    // Every block handed out once: distinct addresses, none overlapping another.
    sized_alloc_all();
    int overlaps = 0;
    for (int s = 0; s < 3; s++)
        for (int a = 0; a < 4; a++)
            for (int i = 0; i < 16; i++) {
                unsigned char *p = (unsigned char *)sized_blocks[s][a][i];
                CHECK((uintptr_t)p % sized_aligns[a] == 0);
                for (size_t k = 0; k < sized_sizes[s]; k += 512)
                    overlaps += p[k] != (unsigned char)(s * 4 + a);
            }
    CHECK(overlaps == 0);
    sized_delete_all(nullptr);
    for (size_t n = 0; n <= 9000; n += 97) { // every size the trusted path takes, and beyond
        void *p = ::operator new(n);
        ::operator delete(p, n);
    }
    ::operator delete(nullptr, (size_t)8);
}

static int handler_calls;
static void give_up_handler() {
    handler_calls++;
    std::set_new_handler(nullptr); // the next failure throws
}

static void test_failure() {
    volatile size_t huge = (size_t)1 << 62;
    bool thrown = false;
    try {
        char *p = new char[huge];
        CHECK(p == nullptr); // unreachable
    } catch (const std::bad_alloc &) {
        thrown = true;
    }
    CHECK(thrown);
    CHECK(new (std::nothrow) char[huge] == nullptr);
    CHECK(::operator new(huge, std::align_val_t(64), std::nothrow) == nullptr);
    thrown = false;
    try {
        void *p = ::operator new(huge, std::align_val_t(64));
        CHECK(p == nullptr);
    } catch (const std::bad_alloc &) {
        thrown = true;
    }
    CHECK(thrown);
    // The new_handler runs until it gives up.
    handler_calls = 0;
    std::set_new_handler(give_up_handler);
    thrown = false;
    try {
        void *p = ::operator new(huge);
        CHECK(p == nullptr);
    } catch (const std::bad_alloc &) {
        thrown = true;
    }
    CHECK(thrown && handler_calls == 1);
    handler_calls = 0;
    std::set_new_handler(give_up_handler);
    CHECK(::operator new(huge, std::nothrow) == nullptr &&handler_calls == 1);
}

static void test_c23() {
    if (!free_sized) {
        std::printf("free_sized: not provided by this allocator\n");
        return;
    }
    for (size_t n : {(size_t)1, (size_t)100, (size_t)5000, (size_t)300000}) {
        void *p = std::malloc(n);
        free_sized(p, n);
        void *q = std::aligned_alloc(256, n);
        free_aligned_sized(q, 256, n);
    }
    free_sized(nullptr, 10);
}

// Debug build: a sized delete whose size does not match the block aborts with one line.
[[maybe_unused]] static bool aborts_with_size_message(void (*misuse)()) {
    int pipe_fds[2];
    if (pipe(pipe_fds) != 0) return false;
    std::fflush(nullptr);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(pipe_fds[1], STDERR_FILENO);
        alarm(10);
        misuse();
        _exit(0);
    }
    close(pipe_fds[1]);
    char text[512] = {0};
    ssize_t got = read(pipe_fds[0], text, sizeof text - 1);
    (void)got;
    close(pipe_fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT &&
           std::strstr(text, "size does not match") != nullptr;
}

[[maybe_unused]] static void delete_too_large() {
    char *p = new char[100];
    ::operator delete[](p, 5000);
}
[[maybe_unused]] static void delete_too_small() {
    void *p = ::operator new(1000);
    ::operator delete(p, 8);
}
[[maybe_unused]] static void free_sized_wrong() {
    void *p = std::malloc(40000);
    free_sized(p, 1000);
}
[[maybe_unused]] static void delete_aligned_too_large() {
    void *p = ::operator new(100, std::align_val_t(64));
    ::operator delete(p, 6000, std::align_val_t(64));
}
[[maybe_unused]] static void delete_small_as_large() { // a size the fast build trusts is wrong
    void *p = ::operator new(40000);
    ::operator delete(p, 64);
}

int main() {
    bool ours = hakmem_new();
    std::printf("operator new from libhakmem: %s\n", ours ? "yes" : "no");
    test_forms();
    test_failure();
    test_c23();
    test_sized_bounds();
#if defined(HAKTEST_DEBUG_BUILD) || defined(HAKTEST_SECURE_BUILD)
    CHECK(ours);
    CHECK(aborts_with_size_message(delete_too_large));
    CHECK(aborts_with_size_message(delete_too_small));
    CHECK(aborts_with_size_message(free_sized_wrong));
    CHECK(aborts_with_size_message(delete_aligned_too_large));
    CHECK(aborts_with_size_message(delete_small_as_large));
#endif
#ifdef HAKTEST_LINKS_HAKMEM
    CHECK(ours);
#endif
    std::printf("%ld passed, %ld failed\n", passed, failed);
    return failed ? 1 : 0;
}
