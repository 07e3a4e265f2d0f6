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
        unsigned cls = heap->class_of_size[size];
        hak_page *page = heap->direct[cls];
        hak_block *block = page->free;
        if (HAK_LIKELY(block != NULL)) {
#ifdef HAK_DEBUG
            hak_page_check_link(page, block);
#endif
            page->free = block->next;
            page->used++;
            HAK_HOT_STAT(heap, fast, cls);
            HAK_HOT_STAT(heap, alloc, cls);
            return block;
        }
    }
    return hak_malloc_slow(size);
}

// The checks on the way (each miss goes to the slow path, which reports what it was):
//   registry == SMALL   a pointer into a superslab (NULL, foreign and large pointers miss)
//   local_owner == heap an owner free into a page on the fast path
//   a & block_mask      not at a block boundary (interior or unaligned pointer)
//   != local_free       the block freed just before (immediate double free)
//   --used <= 0         the page emptied, or went below empty (a double free, reported there)
// --*used, and whether it came down to 0 or below: one `sub` on memory and one `jle` (gcc does
// not fold a signed test into a read-modify-write by itself; the plain C costs three more).
static inline __attribute__((always_inline)) int used_drop_to_empty(int32_t *used) {
#if defined(__x86_64__) && !defined(__SANITIZE_THREAD__)
    __asm__ goto("subl $1, %0\n\tjle %l[empty]" : "+m"(*used) : : "cc" : empty);
    return 0;
empty:
    return 1;
#else
    return --*used <= 0;
#endif
}

HAK_EXPORT void hak_free(void *p) {
#ifndef HAK_DEBUG // the debug build checks every free in the slow path
    uintptr_t a = (uintptr_t)p;
    uintptr_t chunk = a >> HAK_SS_SHIFT;
    // A plain byte read, so the compare takes its operand from memory: the byte of a chunk
    // this pointer can be in changes only while no live block of ours is there.
    if (HAK_LIKELY(chunk < HAK_REGISTRY_SIZE) &&
        HAK_LIKELY(((const uint8_t *)hak_registry)[chunk] == HAK_REG_SMALL)) {
        hak_superslab *ss = hak_superslab_of(a);
        hak_page *page = hak_page_of(ss, a);
        hak_heap *heap = hak_tls_heap;
        hak_block *block = p;
        if (HAK_LIKELY(hak_page_local_owner(page) == heap && !((uint16_t)a & page->block_mask) &&
                       block != page->local_free)) {
            block->next = page->local_free;
            page->local_free = block;
            HAK_HOT_STAT(heap, free, page->class_idx);
            if (HAK_UNLIKELY(used_drop_to_empty(&page->used)))
                hak_heap_free_emptied(heap, page, block);
            return;
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
#ifdef HAK_DEBUG
        hak_page_check_link(page, block);
#endif
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

// Validates that p lies in a region of ours: NULL for a large block (the caller asks
// large.c), else its superslab, in use.
static hak_superslab *checked_superslab(const char *func, void *p) {
    uintptr_t a = (uintptr_t)p;
    if (a >= HAK_ADDRESS_LIMIT) hak_fatal_pointer(func, "invalid pointer", p);
    unsigned kind = hak_registry_get(a);
    if (kind == HAK_REG_LARGE) return NULL;
    if (kind != HAK_REG_SMALL) hak_fatal_pointer(func, "invalid pointer", p);
    hak_superslab *ss = hak_superslab_of(a);
    // A region already given back (cached, kind FREE): the block was freed before.
    if (ss->kind == HAK_SS_FREE) hak_fatal_pointer(func, "double free", p);
    return ss;
}

// The page of small block p, which must be the start of one of its blocks. A block start in
// a page slot that is free now was freed with its page.
static hak_page *checked_page(const char *func, hak_superslab *ss, void *p) {
    hak_page *page = hak_page_of(ss, (uintptr_t)p);
    if (!page->in_use && (uintptr_t)p >= (uintptr_t)hak_page_start(page))
        hak_fatal_pointer(func, "double free", p);
    if (!hak_page_contains_block(page, (uintptr_t)p)) hak_fatal_pointer(func, "invalid pointer", p);
    return page;
}

HAK_NOINLINE void hak_free_slow(void *p) {
    if (p == NULL) return;
    hak_superslab *ss = checked_superslab("free", p);
    if (!ss) {
        hak_large_free(p);
        return;
    }
    hak_block *block = p;
    hak_heap *heap = hak_tls_heap;
    if (atomic_load_explicit(&ss->owner, memory_order_relaxed) == heap) {
        // Owner free that missed the fast path: a full page, or a pointer the fast path
        // refused. Checked in full (block start, and in the debug build the free lists).
        hak_page *page = checked_page("free", ss, p);
#ifdef HAK_DEBUG
        if (hak_page_has_free_block(page, block)) hak_fatal_pointer("free", "double free", p);
#endif
        if (page->used <= 0 || block == page->local_free || block == page->free)
            hak_fatal_pointer("free", "double free", p);
        HAK_HOT_STAT(heap, free, page->class_idx);
        HAK_HOT_STAT(heap, free_slow, page->class_idx);
        heap->route[page->class_idx]->free_local_slow(heap, page, block);
        return;
    }
    // Remote: checked fully, since the owner will trust the chain it collects. A block still
    // carrying the remote key is on its way to its owner already: a second remote free.
    hak_page *page = checked_page("free", ss, p);
    if (page->block_size >= 16) {
        uintptr_t *words = p;
        if (words[1] == (hak_remote_key ^ (uintptr_t)p))
            hak_fatal_pointer("free", "double free", p);
        words[1] = hak_remote_key ^ (uintptr_t)p;
    }
    // A thread that only frees gets a heap too: it holds the remote batch, and its thread-exit
    // destructor flushes it.
    if (heap == &hak_heap_empty && !(heap = hak_thread_init())) {
        hak_page_free_remote(page, block, block);
        return;
    }
    HAK_HOT_STAT(heap, free, page->class_idx);
    HAK_HOT_STAT(heap, remote_free, page->class_idx);
    hak_heap_free_remote(heap, page, block);
    if (!atomic_load_explicit(&ss->owner, memory_order_relaxed)) hak_heap_note_abandoned_free(heap);
}

// Usable size of a live block, after the same checks as free.
static size_t checked_usable_size(const char *func, void *p) {
    hak_superslab *ss = checked_superslab(func, p);
    if (!ss) return hak_large_usable(func, p);
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
    // Large to large: resized in place or moved by mremap, never copied.
    if (usable > HAK_MID_MAX && size > HAK_MID_MAX) {
        void *q = hak_large_realloc(p, size);
        if (q) return q;
    }
    // A small block shrinking by up to half stays in place.
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
