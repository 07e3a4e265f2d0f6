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

// --- The malloc fast path: inlined into wrappers.c's malloc and cxx.c's operator new, so that
// `new` is the pop itself, without a push, a call, a test, a pop and a return around it
// (docs/notebook/2026-12-07-night.md).
// The secure build's tail canary (wrappers.c): the last word of every block of a size class,
// armed at every pop.
#ifdef HAK_SECURE
#define HAK_CANARY_SIZE sizeof(uintptr_t)
static inline uintptr_t *canary_of(void *p, const hak_page *page) {
    return (uintptr_t *)((char *)p + page->block_size) - 1;
}
static inline void canary_arm(void *p, const hak_page *page) {
    *canary_of(p, page) = hak_canary_value(p);
}
#else
#define HAK_CANARY_SIZE     0
#define canary_arm(p, page) ((void)0)
#endif

// Pops the direct page of `cls`, or NULL when it has no free block (or its head fails
// hak_pop_ok: the slow path reports it).
static inline __attribute__((always_inline)) void *hak_pop_direct(hak_heap *heap, unsigned cls) {
    hak_page *page = heap->direct[cls];
    hak_block *block = page->free;
    if (HAK_UNLIKELY(!hak_pop_ok(page, block))) return NULL;
    page->free = hak_link_checked(page, block);
    page->used++;
    canary_arm(block, page);
    HAK_HOT_STAT(heap, fast, cls);
    HAK_HOT_STAT(heap, alloc, cls);
    return block;
}

// One fast path for every size class: a table load for the class (tiny sizes index by the
// size itself, mid sizes by HAK_MID_INDEX), pop; NULL for the slow path (hak_malloc_slow) to
// finish. Mid sizes this process does not serve find HAK_CLASS_NONE, whose direct page is
// always empty, and so does a thread without a heap (hak_heap_empty). `size` includes the
// secure build's canary.
static inline __attribute__((always_inline)) void *hak_malloc_pop(size_t size) {
    hak_heap *heap = hak_tls_heap;
    if (HAK_LIKELY(size <= HAK_TINY_MAX)) return hak_pop_direct(heap, heap->class_of_size[size]);
    if (size <= HAK_SMALL_MAX_ALL)
        return hak_pop_direct(heap, heap->class_of_mid[HAK_MID_INDEX(size)]);
    return NULL;
}

#endif
