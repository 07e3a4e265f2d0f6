// The API layer: the exported malloc family (wrappers.c) and the C++ operators (cxx.c); the
// whole library below it, for the tests that look inside.
#ifndef HAK_API_H
#define HAK_API_H

#include "init.h"

// --- wrappers.c: slow paths of the exported API
// The inline free fast path; the debug build checks every free in full instead.
#if defined(HAK_DEBUG)
#define HAK_FREE_FAST_PATH 0
#else
#define HAK_FREE_FAST_PATH 1
#endif
// Sized frees (C++ sized delete, C23 free_sized) trust the size the caller gives in the builds
// without checks: a block of at most HAK_SIZED_SMALL_MAX bytes, aligned to at most
// HAK_NATURAL_ALIGN, lies on a small page whatever the routes (route.c: classes up to 8 KiB
// always have 64 KiB pages; an aligned request takes a class of at most 8 KiB then), so the
// free finds its page without the registry (hak_free_small). The debug and secure builds check
// the size against the block instead (a wrong size is misuse: wrappers.c, check_free_size).
#if defined(HAK_DEBUG) || defined(HAK_SECURE)
#define HAK_SIZED_FREE_TRUSTED 0
#else
#define HAK_SIZED_FREE_TRUSTED 1
#endif
#define HAK_SIZED_SMALL_MAX 8192
static inline int hak_sized_free_small(const void *p, size_t size, size_t alignment) {
#if HAK_SIZED_FREE_TRUSTED
    return HAK_LIKELY(size <= HAK_SIZED_SMALL_MAX && alignment <= HAK_NATURAL_ALIGN) && p != NULL;
#else
    (void)p, (void)size, (void)alignment;
    return 0;
#endif
}
void hak_free_small(void *p);
void *hak_malloc_slow(size_t size);
void hak_free_slow(void *p);

#endif
