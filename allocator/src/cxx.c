// The C++ allocation functions and C23's sized frees, so that `new` and `delete` reach
// libhakmem directly instead of through libstdc++'s wrappers around malloc and free (one call
// and one PLT jump fewer each; measured on larson with C++ sized delete:
// docs/notebook/2026-11-25-issue30-programs.md), and plain `new` is malloc's fast pop itself.
// Every form the standard library declares: plain, array, nothrow, aligned (std::align_val_t),
// sized, and their combinations, by their Itanium C++ ABI names, written in C so that the
// library needs no libstdc++ of its own. What C++ adds to malloc is failure: operator new calls
// the program's new_handler until it succeeds or there is none, then throws std::bad_alloc;
// both come from libstdc++ by weak references, present whenever a C++ program is what calls.
// Sized deletes use the size the caller gives (as tcmalloc does): in the fast build a block of
// at most 8 KiB goes straight to its small page's free list, without reading the registry
// (hak_sized_free_small, api.h); the debug and secure builds check that the size fits the
// block (a mismatched delete is reported like an invalid free: hak_free_sized).
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#include "hakmem.h"
#include "api.h"

typedef void (*hak_new_handler)(void);
hak_new_handler _ZSt15get_new_handlerv(void) __attribute__((weak));
void _ZSt17__throw_bad_allocv(void) __attribute__((weak, noreturn));

// Out of memory in operator new: the new_handler's turn. Returns 1 to try again, 0 when there
// is no handler (nothrow forms then return NULL, the others throw).
static HAK_NOINLINE int new_handler_retry(void) {
    hak_new_handler handler = _ZSt15get_new_handlerv ? _ZSt15get_new_handlerv() : NULL;
    if (!handler) return 0;
    handler();
    return 1;
}

static HAK_NOINLINE HAK_COLD void throw_bad_alloc(void) {
    if (_ZSt17__throw_bad_allocv) _ZSt17__throw_bad_allocv();
    hak_message("hakmem: operator new: out of memory, and no C++ runtime to throw bad_alloc\n");
    abort();
}

static HAK_NOINLINE void *new_slow(size_t size, size_t alignment, int nothrow) {
    for (;;) {
        void *p = alignment ? hak_aligned_alloc(alignment, size) : hak_malloc(size);
        if (p) return p;
        if (!new_handler_retry()) break;
    }
    if (!nothrow) throw_bad_alloc();
    return NULL;
}

// operator new: malloc's fast pop inline (api.h), else new_slow, which calls malloc (its slow
// path) and the new_handler. The secure build's malloc adds the canary to the size and checks
// what a pop hands out: it is called whole.
static inline void *cxx_new(size_t size, int nothrow) {
#ifndef HAK_SECURE
    void *p = hak_malloc_pop(size);
    if (HAK_LIKELY(p != NULL)) return p;
#endif
    return new_slow(size, 0, nothrow);
}

// aligned_alloc wants the size a multiple of the alignment only in C11's wording; ours takes
// any size. An alignment that is not a power of two is undefined behaviour in C++: it fails.
static inline void *cxx_new_aligned(size_t size, size_t alignment, int nothrow) {
    void *p = hak_aligned_alloc(alignment, size);
    return HAK_LIKELY(p != NULL) ? p : new_slow(size, alignment, nothrow);
}

// Sized delete (alignment 0: not over-aligned): a small block straight to its page, else the
// checked path.
static inline void cxx_delete_sized(void *p, size_t size, size_t alignment) {
    if (hak_sized_free_small(p, size, alignment)) { // always 0 where sizes are checked
        hak_free_small(p);
        return;
    }
    if (alignment)
        hak_free_aligned_sized(p, alignment, size);
    else
        hak_free_sized(p, size);
}

#ifndef HAK_PREFIXED_ONLY
#define HAK_CXX_EXPORT HAK_EXPORT

// operator new / new[]
HAK_CXX_EXPORT void *_Znwm(size_t size) {
    return cxx_new(size, 0);
}
HAK_CXX_EXPORT void *_Znam(size_t size) {
    return cxx_new(size, 0);
}
HAK_CXX_EXPORT void *_ZnwmRKSt9nothrow_t(size_t size, const void *tag) {
    (void)tag;
    return cxx_new(size, 1);
}
HAK_CXX_EXPORT void *_ZnamRKSt9nothrow_t(size_t size, const void *tag) {
    (void)tag;
    return cxx_new(size, 1);
}
HAK_CXX_EXPORT void *_ZnwmSt11align_val_t(size_t size, size_t alignment) {
    return cxx_new_aligned(size, alignment, 0);
}
HAK_CXX_EXPORT void *_ZnamSt11align_val_t(size_t size, size_t alignment) {
    return cxx_new_aligned(size, alignment, 0);
}
HAK_CXX_EXPORT void *_ZnwmSt11align_val_tRKSt9nothrow_t(size_t size, size_t alignment,
                                                        const void *tag) {
    (void)tag;
    return cxx_new_aligned(size, alignment, 1);
}
HAK_CXX_EXPORT void *_ZnamSt11align_val_tRKSt9nothrow_t(size_t size, size_t alignment,
                                                        const void *tag) {
    (void)tag;
    return cxx_new_aligned(size, alignment, 1);
}

// operator delete / delete[]: plain, nothrow and aligned ones are free(); sized ones check the
// size in the debug build.
HAK_CXX_EXPORT void _ZdlPv(void *p) {
    hak_free(p);
}
HAK_CXX_EXPORT void _ZdaPv(void *p) {
    hak_free(p);
}
HAK_CXX_EXPORT void _ZdlPvRKSt9nothrow_t(void *p, const void *tag) {
    (void)tag;
    hak_free(p);
}
HAK_CXX_EXPORT void _ZdaPvRKSt9nothrow_t(void *p, const void *tag) {
    (void)tag;
    hak_free(p);
}
HAK_CXX_EXPORT void _ZdlPvSt11align_val_t(void *p, size_t alignment) {
    (void)alignment;
    hak_free(p);
}
HAK_CXX_EXPORT void _ZdaPvSt11align_val_t(void *p, size_t alignment) {
    (void)alignment;
    hak_free(p);
}
HAK_CXX_EXPORT void _ZdlPvSt11align_val_tRKSt9nothrow_t(void *p, size_t alignment,
                                                        const void *tag) {
    (void)alignment, (void)tag;
    hak_free(p);
}
HAK_CXX_EXPORT void _ZdaPvSt11align_val_tRKSt9nothrow_t(void *p, size_t alignment,
                                                        const void *tag) {
    (void)alignment, (void)tag;
    hak_free(p);
}
HAK_CXX_EXPORT void _ZdlPvm(void *p, size_t size) {
    cxx_delete_sized(p, size, 0);
}
HAK_CXX_EXPORT void _ZdaPvm(void *p, size_t size) {
    cxx_delete_sized(p, size, 0);
}
HAK_CXX_EXPORT void _ZdlPvmSt11align_val_t(void *p, size_t size, size_t alignment) {
    cxx_delete_sized(p, size, alignment);
}
HAK_CXX_EXPORT void _ZdaPvmSt11align_val_t(void *p, size_t size, size_t alignment) {
    cxx_delete_sized(p, size, alignment);
}

#endif
