// The exported API. malloc and free are the hot paths, written out here so they inline into
// the exported functions: malloc = one table load for the class, pop the direct page's free
// list, one branch to the slow path; free = mask to the superslab, registry bit, compare the
// page's owner with this thread's heap, push on the local list. Everything else is in the
// noinline slow paths below or in other files.
#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "hakmem.h"
#include "internal.h"

#define HAK_OS_PAGE 4096

HAK_EXPORT void *hak_malloc(size_t size) {
    hak_heap *heap = hak_tls_heap;
    if (HAK_LIKELY(size <= HAK_TINY_MAX)) {
        unsigned cls = hak_tiny_class_of(size);
        hak_page *page = heap->direct[cls];
        hak_block *block = page->free;
        if (HAK_LIKELY(block != NULL)) {
            page->free = block->next;
            page->used++;
            HAK_HOT_STAT(heap, fast, cls);
            HAK_HOT_STAT(heap, alloc, cls);
            return block;
        }
    }
    return hak_malloc_slow(size);
}

HAK_EXPORT void hak_free(void *p) {
#ifndef HAK_DEBUG // the debug build checks every free in the slow path
    uintptr_t a = (uintptr_t)p;
    uintptr_t chunk = (a - 1) >> HAK_SS_SHIFT; // NULL wraps around to a huge chunk number
    if (HAK_LIKELY(chunk < HAK_REGISTRY_SIZE)) {
        if (HAK_LIKELY(atomic_load_explicit(&hak_registry[chunk], memory_order_relaxed))) {
            hak_superslab *ss = hak_superslab_of(a);
            hak_page *page = hak_page_of(ss, a);
            hak_heap *heap = hak_tls_heap;
            hak_block *block = p;
            // block == local_free: the cheap double-free check; the slow path reports it.
            if (HAK_LIKELY(hak_page_local_owner(page) == heap && block != page->local_free)) {
                block->next = page->local_free;
                page->local_free = block;
                HAK_HOT_STAT(heap, free, page->class_idx);
                if (HAK_UNLIKELY(--page->used == 0)) hak_heap_page_emptied(heap, page);
                return;
            }
        }
    }
#endif
    hak_free_slow(p);
}

__attribute__((noreturn)) HAK_COLD void hak_fatal_pointer(const char *func, const char *what,
                                                          const void *p) {
    hak_message("hakmem: %s(): %s %p\n", func, what, p);
    abort();
}

// Allocates from size class `cls` on `heap` (an initialised heap).
static inline __attribute__((always_inline)) void *alloc_class(hak_heap *heap, unsigned cls) {
    hak_page *page = heap->direct[cls];
    hak_block *block = page->free;
    if (block) {
        page->free = block->next;
        page->used++;
        HAK_HOT_STAT(heap, fast, cls);
    } else {
        block = heap->route[cls]->alloc_slow(heap, cls);
        if (!block) {
            errno = ENOMEM;
            return NULL;
        }
        HAK_HOT_STAT(heap, slow, cls);
    }
    HAK_HOT_STAT(heap, alloc, cls);
    return block;
}

static hak_heap *current_heap(void) {
    hak_heap *heap = hak_tls_heap;
    if (HAK_UNLIKELY(heap == &hak_heap_empty)) heap = hak_thread_init();
    return heap;
}

HAK_NOINLINE void *hak_malloc_slow(size_t size) {
    if (size > HAK_MID_MAX) {
        void *p = hak_large_alloc(size, HAK_MIN_ALIGN, 0);
        if (!p) errno = ENOMEM;
        return p;
    }
    hak_heap *heap = current_heap();
    if (!heap) {
        errno = ENOMEM;
        return NULL;
    }
    return alloc_class(heap, hak_class_of(size));
}

// Validates that p lies in a live region of ours; returns its superslab (small or large).
static hak_superslab *checked_superslab(const char *func, void *p) {
    uintptr_t a = (uintptr_t)p;
    if (a - 1 >= HAK_ADDRESS_LIMIT - 1) hak_fatal_pointer(func, "invalid pointer", p);
    hak_superslab *ss = hak_superslab_of(a);
    if (!hak_registry_has((uintptr_t)ss)) hak_fatal_pointer(func, "invalid pointer", p);
    // A region already given back (cached, kind FREE): the block was freed before.
    if (ss->kind == HAK_SS_FREE) hak_fatal_pointer(func, "double free", p);
    return ss;
}

// The page of small block p, which must be the start of one of its blocks.
static hak_page *checked_page(const char *func, hak_superslab *ss, void *p) {
    hak_page *page = hak_page_of(ss, (uintptr_t)p);
    if (!hak_page_contains_block(page, (uintptr_t)p)) hak_fatal_pointer(func, "invalid pointer", p);
    return page;
}

HAK_NOINLINE void hak_free_slow(void *p) {
    if (p == NULL) return;
    hak_superslab *ss = checked_superslab("free", p);
    if (ss->kind == HAK_SS_LARGE) {
        hak_large_free(ss, p);
        return;
    }
    hak_block *block = p;
    hak_heap *heap = hak_tls_heap;
    if (atomic_load_explicit(&ss->owner, memory_order_relaxed) == heap) {
        // Owner free of a full page. Like the fast path, the fast build skips the block-start
        // check (a division) here; the debug build checks it and walks the free lists.
        hak_page *page = hak_page_of(ss, (uintptr_t)p);
#ifdef HAK_DEBUG
        checked_page("free", ss, p);
        if (hak_page_has_free_block(page, block)) hak_fatal_pointer("free", "double free", p);
#endif
        if (!page->in_use) hak_fatal_pointer("free", "invalid pointer", p);
        if (page->used == 0 || block == page->local_free || block == page->free)
            hak_fatal_pointer("free", "double free", p);
        HAK_HOT_STAT(heap, free, page->class_idx);
        HAK_HOT_STAT(heap, free_slow, page->class_idx);
        heap->route[page->class_idx]->free_local_slow(heap, page, block);
        return;
    }
    // Remote: checked fully, since the owner will trust the chain it collects.
    hak_page *page = checked_page("free", ss, p);
    // A thread that only frees gets a heap too: it holds the remote batch, and its thread-exit
    // destructor flushes it.
    if (heap == &hak_heap_empty && !(heap = hak_thread_init())) {
        hak_page_free_remote(page, block, block);
        return;
    }
    HAK_HOT_STAT(heap, free, page->class_idx);
    HAK_HOT_STAT(heap, remote_free, page->class_idx);
    hak_heap_free_remote(heap, page, block);
}

// Usable size of a live block, after the same checks as free.
static size_t checked_usable_size(const char *func, void *p) {
    hak_superslab *ss = checked_superslab(func, p);
    if (ss->kind == HAK_SS_LARGE) return hak_large_usable(ss, p);
    return checked_page(func, ss, p)->block_size;
}

HAK_EXPORT void hak_cfree(void *p) {
    hak_free(p);
}

HAK_EXPORT size_t hak_malloc_usable_size(void *p) {
    return p ? checked_usable_size("malloc_usable_size", p) : 0;
}

HAK_EXPORT void *hak_calloc(size_t count, size_t size) {
    size_t total;
    if (__builtin_mul_overflow(count, size, &total)) {
        errno = ENOMEM;
        return NULL;
    }
    if (total > HAK_MID_MAX) { // skip the memset: a fresh mapping is already zero
        void *p = hak_large_alloc(total, HAK_MIN_ALIGN, 1);
        if (!p) errno = ENOMEM;
        return p;
    }
    void *p = hak_malloc(total);
    if (p) memset(p, 0, total);
    return p;
}

HAK_EXPORT void *hak_realloc(void *p, size_t size) {
    if (p == NULL) return hak_malloc(size);
    if (size == 0) { // glibc: free and return NULL
        hak_free(p);
        return NULL;
    }
    size_t usable = checked_usable_size("realloc", p);
    // Shrinking by up to half stays in place (for large blocks too: the tail stays mapped).
    if (size <= usable && size >= usable / 2) return p;
    void *q = hak_malloc(size);
    if (!q) return NULL;
    memcpy(q, p, size < usable ? size : usable);
    hak_free(p);
    return q;
}

HAK_EXPORT void *hak_reallocarray(void *p, size_t count, size_t size) {
    size_t total;
    if (__builtin_mul_overflow(count, size, &total)) {
        errno = ENOMEM;
        return NULL;
    }
    return hak_realloc(p, total);
}

// alignment: a power of two. Small requests take the first size class whose blocks are
// naturally aligned enough (pages are 4 KiB-aligned, blocks at multiples of their size), so
// no block ever needs an interior pointer; the rest go to large.c.
static void *aligned_alloc_impl(size_t alignment, size_t size) {
    if (alignment <= sizeof(void *)) return hak_malloc(size); // C0 blocks are 8-aligned
    if (size <= HAK_MID_MAX && alignment <= HAK_NATURAL_ALIGN) {
        unsigned cls = hak_class_of(size);
        while (cls < HAK_CLASS_COUNT &&
               (hak_class_block_size[cls] & (0u - hak_class_block_size[cls])) < alignment)
            cls++;
        if (cls < HAK_CLASS_COUNT) {
            hak_heap *heap = current_heap();
            if (!heap) {
                errno = ENOMEM;
                return NULL;
            }
            return alloc_class(heap, cls);
        }
    }
    void *p = hak_large_alloc(size, alignment, 0);
    if (!p) errno = ENOMEM;
    return p;
}

static int is_power_of_two(size_t x) {
    return x != 0 && (x & (x - 1)) == 0;
}

HAK_EXPORT int hak_posix_memalign(void **out, size_t alignment, size_t size) {
    if (alignment % sizeof(void *) != 0 || !is_power_of_two(alignment)) return EINVAL;
    int saved = errno;
    void *p = aligned_alloc_impl(alignment, size);
    errno = saved;
    if (!p) return ENOMEM;
    *out = p;
    return 0;
}

HAK_EXPORT void *hak_memalign(size_t alignment, size_t size) {
    if (alignment > SIZE_MAX / 2 + 1) {
        errno = EINVAL;
        return NULL;
    }
    if (!is_power_of_two(alignment) && alignment > HAK_MIN_ALIGN) // glibc rounds up
        alignment = (size_t)1 << (64 - __builtin_clzl(alignment));
    return aligned_alloc_impl(alignment, size);
}

HAK_EXPORT void *hak_aligned_alloc(size_t alignment, size_t size) {
    if (alignment != 0 && !is_power_of_two(alignment)) {
        errno = EINVAL;
        return NULL;
    }
    return aligned_alloc_impl(alignment, size);
}

HAK_EXPORT void *hak_valloc(size_t size) {
    return aligned_alloc_impl(HAK_OS_PAGE, size);
}

HAK_EXPORT void *hak_pvalloc(size_t size) {
    size_t rounded = (size + HAK_OS_PAGE - 1) & ~(size_t)(HAK_OS_PAGE - 1);
    if (rounded < size) {
        errno = ENOMEM;
        return NULL;
    }
    return aligned_alloc_impl(HAK_OS_PAGE, rounded ? rounded : HAK_OS_PAGE);
}

#ifndef HAK_PREFIXED_ONLY
// The standard names, and glibc's internal __libc_* entry points, are aliases of the hak_*
// functions (no extra jump), so libc-internal callers use the same allocator.
#define HAK_ALIAS(target) __attribute__((alias(#target), copy(target), visibility("default")))
void *malloc(size_t size) HAK_ALIAS(hak_malloc);
void free(void *p) HAK_ALIAS(hak_free);
void cfree(void *p) HAK_ALIAS(hak_free);
void *calloc(size_t count, size_t size) HAK_ALIAS(hak_calloc);
void *realloc(void *p, size_t size) HAK_ALIAS(hak_realloc);
void *reallocarray(void *p, size_t count, size_t size) HAK_ALIAS(hak_reallocarray);
int posix_memalign(void **out, size_t alignment, size_t size) HAK_ALIAS(hak_posix_memalign);
void *aligned_alloc(size_t alignment, size_t size) HAK_ALIAS(hak_aligned_alloc);
void *memalign(size_t alignment, size_t size) HAK_ALIAS(hak_memalign);
void *valloc(size_t size) HAK_ALIAS(hak_valloc);
void *pvalloc(size_t size) HAK_ALIAS(hak_pvalloc);
size_t malloc_usable_size(void *p) HAK_ALIAS(hak_malloc_usable_size);
void *__libc_malloc(size_t size) HAK_ALIAS(hak_malloc);
void __libc_free(void *p) HAK_ALIAS(hak_free);
void __libc_cfree(void *p) HAK_ALIAS(hak_free);
void *__libc_calloc(size_t count, size_t size) HAK_ALIAS(hak_calloc);
void *__libc_realloc(void *p, size_t size) HAK_ALIAS(hak_realloc);
void *__libc_reallocarray(void *p, size_t count, size_t size) HAK_ALIAS(hak_reallocarray);
void *__libc_memalign(size_t alignment, size_t size) HAK_ALIAS(hak_memalign);
void *__libc_valloc(size_t size) HAK_ALIAS(hak_valloc);
void *__libc_pvalloc(size_t size) HAK_ALIAS(hak_pvalloc);
int __posix_memalign(void **out, size_t alignment, size_t size) HAK_ALIAS(hak_posix_memalign);
#endif
