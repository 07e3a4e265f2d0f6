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
#include "api.h"

// The secure build's tail canary: the last word of every block of a size class holds a value
// made of a secret and the block's address while the block is allocated (usable sizes are a
// word shorter), and every free checks it. An overflow out of a block crosses it before it
// reaches the next block (whose link the pop checks), so an overflow is caught when the
// overflowed block is freed, as glibc catches one by the next chunk's size field. The free
// disarms it (HAK_CANARY_FREED; carving writes that too), so a second free of a free block is
// caught at that free, however late; and it checks the canary of the block before (armed,
// disarmed, or what other writers leave in a free block's last word: 0 once the lean policy has
// purged it, the remote-free mark in a 16-byte block's), so an underflow out of the block, or
// an overflow of the one before, is caught at this free too. Large blocks are mappings of
// their own between guard pages (large.c).
// (Where the canary lies and its arming at a pop: api.h, with the malloc fast path.)
#ifdef HAK_SECURE
static inline void canary_disarm(void *p, const hak_page *page) {
    *canary_of(p, page) ^= HAK_CANARY_FREED;
}
static inline int neighbour_intact(void *p, const hak_page *page) {
    char *prev = (char *)p - page->block_size;
    if (prev < hak_page_start(page)) return 1;
    uintptr_t word = *canary_of(prev, page), value = hak_canary_value(prev);
    return word == value || word == (value ^ HAK_CANARY_FREED) || word == 0 ||
           word == (hak_remote_key ^ (uintptr_t)prev);
}
// The free fast path's test: a block whose canaries are not intact (or that is no block start
// at all) goes to the slow path, which checks it in full and reports which it is. The canary
// is read only where the block would end inside its superslab.
static inline int canary_intact(void *p, const hak_page *page) {
    uintptr_t offset = (uintptr_t)p & HAK_SS_MASK;
    return offset + page->block_size <= HAK_SS_SIZE && *canary_of(p, page) == hak_canary_value(p) &&
           neighbour_intact(p, page);
}
static void secure_check(const char *func, const hak_page *page, void *p) {
    uintptr_t word = *canary_of(p, page), value = hak_canary_value(p);
    if (HAK_UNLIKELY(word == (value ^ HAK_CANARY_FREED))) hak_fatal_pointer(func, "double free", p);
    if (HAK_UNLIKELY(word != value)) hak_fatal_pointer(func, "heap overflow past the end of", p);
    if (HAK_UNLIKELY(!neighbour_intact(p, page)))
        hak_fatal_pointer(func, "heap underflow before (or overflow of the block before)", p);
}
#else
#define canary_disarm(p, page) ((void)0)
#define canary_intact(p, page) 1
#endif

// malloc: the fast pop (api.h), else the slow path.
static inline __attribute__((always_inline)) void *malloc_inline(size_t size) {
    void *block = hak_malloc_pop(size);
    if (HAK_LIKELY(block != NULL)) return block;
    return hak_malloc_slow(size);
}

#ifndef HAK_SECURE
HAK_EXPORT HAK_HOT_ALIGN void *hak_malloc(size_t size) {
    return malloc_inline(size);
}
#else
HAK_EXPORT HAK_HOT_ALIGN void *hak_malloc(size_t size) {
    if (HAK_UNLIKELY(size > PTRDIFF_MAX)) {
        errno = ENOMEM;
        return NULL;
    }
    if (HAK_UNLIKELY(size == 0)) {
        void *p = hak_zero_alloc(); // unreadable and unwritable (zero.c)
        if (p) return p;
        size = 1; // (an 8-byte block would have its canary where its link is)
    }
    return malloc_inline(size + HAK_CANARY_SIZE);
}
#endif

// The checks on the way (each miss goes to the slow path, which reports what it was):
//   registry == SMALL   a pointer into a superslab (NULL, foreign and large pointers miss)
//   local_owner == heap an owner free into a page on the fast path
//   a & block_mask      not at a block boundary (interior or unaligned pointer)
//   != head of its list the block freed just before (immediate double free), or, on `free`,
//                       the block the next malloc would hand out (never handed out)
//   --used <= 0         the page emptied, or went below empty (a double free, reported there)
// --*used, and whether it came down to 0 or below: one `sub` on memory and one `jle` (gcc does
// not fold a signed test into a read-modify-write by itself; the plain C costs three more).
static inline __attribute__((always_inline)) int used_drop_to_empty(int16_t *used) {
#if defined(__x86_64__) && !defined(__SANITIZE_THREAD__)
    __asm__ goto("subw $1, %0\n\tjle %l[empty]" : "+m"(*used) : : "cc" : empty);
    return 0;
empty:
    return 1;
#else
    return --*used <= 0;
#endif
}

// The owner free of block p into `page` (found from p's address), if the fast path takes it:
// onto the head of the page's `free`, and the page becomes its class's current one, so the
// next malloc of the class gets the block just freed while it is still in cache: a size
// class's LIFO, as a thread cache's free list is. The page stays where it is in its queue (the
// refill scans the queue from its head whatever the current page is). local_free, collected
// only once `free` has run dry, handed out blocks freed long before: on larson's random slots
// (8-1000 B) malloc's load of the popped block's link missed the cache at most calls
// (cachegrind: malloc's read misses fell by 58 % with this; medium pages measured the same
// before: docs/notebook/2026-11-26-allocator-measurements.md, "SmallObject v3, measured";
// small pages: docs/notebook/2026-12-07-lifo.md). Remote frees waiting on a page whose `free`
// never runs dry are collected by the heap's sweeps (hak_heap_sweep). The secure build pushes
// onto local_free on every page, in its random order (below).
static inline __attribute__((always_inline)) int free_fast(hak_page *page, void *p, int wide) {
    hak_heap *heap = hak_tls_heap;
    hak_block *block = p;
#ifdef HAK_SECURE
    hak_block **list = &page->local_free;
#else
    hak_block **list = &page->free;
#endif
    if (HAK_LIKELY(hak_page_local_owner(page) == heap &&
                   !((uint16_t)(uintptr_t)p & page->block_mask) && block != *list &&
                   canary_intact(p, page))) {
        canary_disarm(p, page);
#ifdef HAK_SECURE
        // Reuse in a random order, never the block just freed first: half the frees, at
        // random, go right after the head of `free` (handed out second), the others to
        // local_free (handed out once `free` has run dry).
        hak_block *head = page->free;
        if (head && (hak_secure_random() & 1) &&
            !(atomic_load_explicit(&page->xthread_free, memory_order_relaxed) & ~HAK_XT_FLAGS)) {
            hak_link_set(block, hak_link(head));
            hak_link_set(head, block);
        } else
#endif
        {
            hak_link_set(block, *list);
            *list = block;
        }
        HAK_HOT_STAT(heap, free, page->class_idx);
        if (HAK_UNLIKELY(used_drop_to_empty(&page->used))) {
            if (wide)
                hak_heap_free_emptied_slow(heap, page, block);
            else
                hak_heap_free_emptied(heap, page, block);
            return 1;
        }
#ifndef HAK_SECURE
        // (A page on the full list has no local owner, so its frees never get here.)
        heap->direct[page->class_idx] = page;
#endif
        return 1;
    }
    return 0;
}

// Is address `a` in its superslab's header? Page 0 of a medium or big superslab starts right
// after the header, and its descriptor serves the header's addresses too, so a pointer into the
// header could pass the fast path's block-boundary test and be linked into a free list: a later
// malloc would hand out the page descriptors. (Small superslabs never use slot 0, so such a
// pointer finds a page with no owner there: superslab.c.)
static inline int in_header(uintptr_t a) {
    return (a & HAK_SS_MASK) < HAK_SS_HEADER_SIZE;
}

// free() of a pointer on a medium or big page (512 KiB: descriptor index = address bits 19-20;
// 2 MiB: one page, descriptor 0), which registry byte `kind` says. One path for both, the
// descriptor's offset masked by the byte itself (types.h, HAK_REG_WIDE_INDEX) rather than
// chosen by a branch: a program whose sizes straddle 32 KiB (random sizes up to 64 KiB)
// mispredicted a branch on the kind at every other free (docs/notebook/2026-12-07-branches.md).
#if HAK_FREE_FAST_PATH
// (Arguments in the registers the fast path has them in: p, page, heap.)
static HAK_NOINLINE void free_miss(void *p, hak_page *page, hak_heap *heap, uintptr_t slot_mask);

static inline __attribute__((always_inline)) void free_wide_page(void *p, unsigned kind) {
    uintptr_t a = (uintptr_t)p;
    hak_page *page =
        (hak_page *)((char *)hak_superslab_of(a) + ((a >> 13) & kind & HAK_REG_WIDE_INDEX));
    if (HAK_LIKELY(!in_header(a) && free_fast(page, p, 1))) return;
    free_miss(p, page, hak_tls_heap, kind == HAK_REG_MEDIUM ? HAK_SS_SIZE / 4 - 1 : HAK_SS_MASK);
}

// A free into a small page (64 KiB): the descriptor index is address bits 16-20.
static inline __attribute__((always_inline)) void free_small_page(void *p) {
    uintptr_t a = (uintptr_t)p;
    hak_page *page = (hak_page *)((char *)hak_superslab_of(a) + ((a >> 10) & 0x7c0));
    if (HAK_LIKELY(free_fast(page, p, 0))) return;
    free_miss(p, page, hak_tls_heap, HAK_PAGE_SIZE - 1);
}

// A block its caller says lies on a small page (api.h: HAK_SIZED_SMALL_MAX): no registry
// byte read.
HAK_HOT_ALIGN void hak_free_small(void *p) {
    free_small_page(p);
}
#endif

HAK_EXPORT HAK_HOT_ALIGN void hak_free(void *p) {
#if HAK_FREE_FAST_PATH // the debug and secure builds check every free in the slow path
    uintptr_t a = (uintptr_t)p;
    uintptr_t chunk = a >> HAK_SS_SHIFT;
    if (HAK_LIKELY(chunk < HAK_REGISTRY_SIZE)) {
        // HAK_REGISTRY_PEEK: a plain byte read (types.h).
        if (HAK_LIKELY(HAK_REGISTRY_PEEK(chunk) == HAK_REG_SMALL)) {
            free_small_page(p);
            return;
        }
        // Medium and big pages inline as well (the mid sizes of SmallObject v3); the byte is read
        // again after a compiler barrier, so that the small-page test above stays one compare
        // against memory instead of a load into a register shared with this one.
        __asm__ volatile("" ::: "memory");
        unsigned kind = HAK_REGISTRY_PEEK(chunk);
        if (HAK_LIKELY(kind >= HAK_REG_WIDE)) {
            free_wide_page(p, kind);
            return;
        }
    }
#endif
    hak_free_slow(p); // large blocks, NULL and foreign pointers
}

// Allocates from size class `cls` on `heap` (an initialised heap).
static inline __attribute__((always_inline)) void *alloc_class(hak_heap *heap, unsigned cls) {
    void *block = hak_pop_direct(heap, cls);
    if (block) return block;
    block = hak_front_slow[heap->route[cls]](heap, cls);
    if (!block) {
        errno = ENOMEM;
        return NULL;
    }
    canary_arm(block, hak_page_of(hak_superslab_of((uintptr_t)block), (uintptr_t)block));
    HAK_HOT_STAT(heap, slow, cls);
    HAK_HOT_STAT(heap, alloc, cls);
    return block;
}

static HAK_NOINLINE void *alloc_class_slow(hak_heap *heap, unsigned cls) {
    return alloc_class(heap, cls);
}

// Allocates from size class `cls` on this thread's heap, created at its first allocation; after
// the thread's heap was destroyed at its exit, on the exited threads' shared heap
// (hak_heap_exited_alloc). NULL (errno ENOMEM) on failure.
static inline void *alloc_current(unsigned cls) {
    hak_heap *heap = hak_tls_heap;
    if (HAK_UNLIKELY(heap == &hak_heap_empty)) {
        void *block = NULL;
        if (hak_thread_exited)
            block = hak_heap_exited_alloc(cls, alloc_class_slow);
        else if ((heap = hak_thread_init()))
            block = alloc_class(heap, cls);
        if (!block) errno = ENOMEM;
        return block;
    }
    return alloc_class(heap, cls);
}

// Out of address space, what the allocator keeps cached goes back and the block is tried once
// more (purge.c: hak_release_cached). A thread's first large block makes its heap, as its first
// small one does: the heap keeps the thread's own freed large regions for its next large blocks
// without the shared cache's lock (heaplarge.c); a thread that only ever allocated large blocks
// went through that lock for every one.
static void *large_alloc(size_t size, size_t alignment, int zero) {
    if (HAK_UNLIKELY(hak_tls_heap == &hak_heap_empty) && !hak_thread_exited) {
        int saved = errno;
        hak_thread_init(); // (no heap, no cache of its own: the shared cache serves it)
        errno = saved;
    }
    void *p = hak_heap_large_alloc(size, alignment, zero);
    if (!p && size <= HAK_ADDRESS_LIMIT && hak_release_cached())
        p = hak_heap_large_alloc(size, alignment, zero);
    if (!p) errno = ENOMEM;
    return p;
}

// hak_malloc_slow of a thread without a heap: its first allocation, or one after its heap was
// destroyed at its exit. Tiny sizes map to classes as a new heap maps them.
static HAK_NOINLINE void *malloc_without_heap(size_t size) {
    hak_process_init(); // hak_small_max comes from the options
    if (size > hak_small_max) return large_alloc(size - HAK_CANARY_SIZE, HAK_MIN_ALIGN, 0);
    return alloc_current(size <= HAK_TINY_MAX ? hak_class_merged_into[hak_tiny_class_of(size)]
                                              : hak_class_of(size));
}

// (In the secure build `size` includes the tail canary, which large blocks do not have: they
// end at their trailing guard page.)
HAK_NOINLINE void *hak_malloc_slow(size_t size) {
    if (size > HAK_SMALL_MAX_ALL) return large_alloc(size - HAK_CANARY_SIZE, HAK_MIN_ALIGN, 0);
    hak_heap *heap = hak_tls_heap;
    if (HAK_UNLIKELY(heap == &hak_heap_empty)) return malloc_without_heap(size);
    if (size > hak_small_max) return large_alloc(size - HAK_CANARY_SIZE, HAK_MIN_ALIGN, 0);
    // tiny sizes through the heap's own map: its merged classes (hak_class_merged_into)
    return alloc_class(heap, size <= HAK_TINY_MAX ? heap->class_of_size[size] : hak_class_of(size));
}

// Validates that p lies in a region of ours: NULL for a large block (the caller asks
// large.c), else its superslab, in use.
static inline hak_superslab *checked_superslab(const char *func, void *p) {
    uintptr_t a = (uintptr_t)p;
    if (a >= HAK_ADDRESS_LIMIT) hak_fatal_pointer(func, "invalid pointer", p);
    unsigned kind = hak_registry_get(a);
    if (kind == HAK_REG_LARGE) return NULL;
    if (kind != HAK_REG_SMALL && kind != HAK_REG_MEDIUM && kind != HAK_REG_BIG)
        hak_fatal_pointer(func, "invalid pointer", p);
    hak_superslab *ss = hak_superslab_of(a);
    // A region already given back (cached, kind FREE): the block was freed before.
    if (ss->kind == HAK_SS_FREE) hak_fatal_pointer(func, "double free", p);
    return ss;
}

// p is no block start of `page`: which error it is. A pointer in a page slot that is free now
// (past the header) was freed with its page; anything else is no block we handed out.
__attribute__((noreturn)) HAK_COLD static void bad_block(const char *func, const hak_page *page,
                                                         const void *p) {
    if (!page->in_use && (uintptr_t)p >= (uintptr_t)hak_page_start(page))
        hak_fatal_pointer(func, "double free", p);
    hak_fatal_pointer(func, "invalid pointer", p);
}

// The page of small block p, which must be the start of one of its blocks (the full check:
// in a page in use, inside its blocks, at a multiple of the block size).
static inline hak_page *checked_page(const char *func, hak_superslab *ss, void *p) {
    hak_page *page = hak_page_of(ss, (uintptr_t)p);
    if (HAK_UNLIKELY(!hak_page_has_block_at(page, (uintptr_t)p))) bad_block(func, page, p);
    return page;
}

// An owner free that missed the fast path: mostly a full page (its local_owner is NULL), so
// the checks are the fast path's (page in use, no bits below the block size's power-of-two
// part); a pointer refused only by the full block-start check goes to the full check. The
// remaining interior offsets are caught when the page empties (hak_page_verify_empty), as on
// the fast path; the debug build checks in full and walks the free lists.
static void free_owner(hak_heap *heap, hak_page *page, void *p) {
    hak_block *block = p;
    hak_superslab *ss = hak_superslab_of((uintptr_t)p);
#if defined(HAK_DEBUG)
    checked_page("free", ss, p);
    if (hak_page_has_free_block(page, block)) hak_fatal_pointer("free", "double free", p);
#elif defined(HAK_SECURE)
    secure_check("free", checked_page("free", ss, p), p);
    canary_disarm(p, page);
#else
    if (HAK_UNLIKELY(!page->in_use || ((uint16_t)(uintptr_t)p & page->block_mask) ||
                     in_header((uintptr_t)p)))
        checked_page("free", ss, p);
#endif
    if (page->used <= 0 || block == page->local_free || block == page->free)
        hak_fatal_pointer("free", "double free", p);
    HAK_HOT_STAT(heap, free, page->class_idx);
    HAK_HOT_STAT(heap, free_slow, page->class_idx);
    hak_heap_free_local(heap, page, block);
}

// The remote frees the inline path leaves to heap.c (hak_heap_free_remote). A thread that only
// frees gets a heap too: it holds the remote batch, and its thread-exit destructor flushes it.
// Not once that destructor has run: nothing would flush or destroy the new heap, and the batch
// would keep its page from ever emptying.
static HAK_NOINLINE void free_remote_call(hak_heap *heap, hak_heap *owner, hak_page *page,
                                          hak_block *block) {
    if (heap == &hak_heap_empty && !hak_thread_exited) {
        int saved = errno; // free() must preserve errno: creating the heap may fail (ENOMEM)
        hak_heap *fresh = hak_thread_init();
        errno = saved;
        if (fresh) heap = fresh;
    }
    hak_heap_free_remote(heap, owner, page, block);
}

// A free from a thread that does not own the page (owner: the superslab's owner heap, NULL if
// abandoned). Checked fully, since the owner will trust the chain it collects: p must be a
// block start of a page in use. A block still carrying the remote key is on its way to its
// owner already: a second remote free. Then it joins this thread's batch for that page:
// a run of frees into one page costs a link each and one CAS at the end (hak_heap_free_remote).
static inline __attribute__((always_inline)) void
free_remote(hak_heap *heap, hak_heap *owner, hak_page *page, void *p, uintptr_t slot_mask) {
    // p's offset from the page's first block (page 0 starts after the superslab header; a
    // pointer into the header wraps around to a huge offset).
    uintptr_t header = ((uintptr_t)page & HAK_SS_MASK) ? 0 : hak_page0_offset(page);
    uintptr_t offset = ((uintptr_t)p & slot_mask) - header;
    if (HAK_UNLIKELY(!page->in_use || offset >= (uintptr_t)page->capacity * page->block_size ||
                     (uint32_t)offset % page->block_size != 0))
        bad_block("free", page, p);
#ifdef HAK_SECURE
    secure_check("free", page, p);
    canary_disarm(p, page);
#endif
    hak_block *block = p;
    if (page->block_size >= 16) {
        uintptr_t *words = p, key = hak_remote_key ^ (uintptr_t)p;
        if (HAK_UNLIKELY(words[1] == key)) hak_fatal_pointer("free", "double free", p);
        words[1] = key;
    }
    // A run of frees into one page: linked here, pushed with one CAS when the run ends. The
    // empty heap's remote_page is NULL, so a thread without a heap takes the slow call.
    hak_page *run = heap->remote_page;
    if (HAK_LIKELY(page == run)) {
        HAK_HOT_STAT(heap, free, page->class_idx);
        HAK_HOT_STAT(heap, remote_free, page->class_idx);
        hak_link_set(block, heap->remote_first);
        heap->remote_first = block;
        return;
    }
    // No run yet (the empty heap has none either) or an abandoned page: the call does it all.
    if (HAK_UNLIKELY(!run || !owner)) {
        free_remote_call(heap, owner, page, block);
        return;
    }
    { // the run so far goes to its page: one CAS when the page has no flag set
        uintptr_t old = atomic_load_explicit(&run->xthread_free, memory_order_relaxed);
        do {
            if (HAK_UNLIKELY(old & HAK_XT_FLAGS)) {
                hak_heap_free_remote(heap, owner, page, block);
                return;
            }
            hak_link_set(heap->remote_last, (hak_block *)old);
        } while (!atomic_compare_exchange_weak_explicit(
            &run->xthread_free, &old, (uintptr_t)heap->remote_first, memory_order_release,
            memory_order_relaxed));
    }
    HAK_HOT_STAT(heap, free, page->class_idx);
    HAK_HOT_STAT(heap, remote_free, page->class_idx);
    heap->remote_page = page;
    heap->remote_first = heap->remote_last = block;
}

// Any free the inline fast path did not take, found from the address alone (the debug build
// sends every free here).
// The secure build's zero-size blocks (zero.c): checked for `func`, freed by free. 1 if p is
// one of them.
static inline int zero_block(const char *func, void *p) {
#ifdef HAK_SECURE
    if ((uintptr_t)p < HAK_ADDRESS_LIMIT && hak_registry_get((uintptr_t)p) == HAK_REG_ZERO) {
        hak_zero_free(func, p);
        return 1;
    }
#endif
    (void)func, (void)p;
    return 0;
}

HAK_NOINLINE void hak_free_slow(void *p) {
    if (p == NULL || zero_block("free", p)) return;
    hak_superslab *ss = checked_superslab("free", p);
    if (!ss) {
        hak_heap_large_free(p);
        return;
    }
    hak_page *page = hak_page_of(ss, (uintptr_t)p);
    hak_heap *heap = hak_tls_heap;
    hak_heap *owner = atomic_load_explicit(&ss->owner, memory_order_relaxed);
    if (owner == heap)
        free_owner(heap, page, p);
    else
        free_remote(heap, owner, page, p, ((uintptr_t)1 << ss->page_shift) - 1);
}

#if HAK_FREE_FAST_PATH
// The fast path found p's page (a superslab of ours) but could not take the free: a full page
// of this thread, another thread's page (a remote free), or a bad pointer. A page whose
// local_owner is another heap is that heap's and not full (it cannot become ours while this
// thread is freeing), so only a NULL local_owner needs the superslab's owner to tell.
static HAK_NOINLINE void free_miss(void *p, hak_page *page, hak_heap *heap, uintptr_t slot_mask) {
    hak_heap *local_owner = hak_page_local_owner(page);
    if (local_owner == heap) {
        free_owner(heap, page, p); // interior pointer or immediate double free: reported there
        return;
    }
    hak_heap *owner = local_owner;
    if (!owner) {
        // (A region given back to the cache has no page in use: the checks of free_owner and
        // free_remote report the double free.)
        hak_superslab *ss = hak_superslab_of((uintptr_t)p);
        owner = atomic_load_explicit(&ss->owner, memory_order_relaxed);
        if (owner == heap) {
            free_owner(heap, page, p);
            return;
        }
    }
    free_remote(heap, owner, page, p, slot_mask);
}
#endif

// Usable size of a live block, after the same checks as free.
static size_t checked_usable_size(const char *func, void *p) {
    if (zero_block(func, p)) return 0;
    hak_superslab *ss = checked_superslab(func, p);
    if (!ss) return hak_large_usable(func, p);
    hak_page *page = checked_page(func, ss, p);
#ifdef HAK_SECURE
    secure_check(func, page, p);
#endif
    return page->block_size - HAK_CANARY_SIZE;
}

HAK_EXPORT void hak_cfree(void *p) {
    hak_free(p);
}

HAK_EXPORT size_t hak_malloc_usable_size(void *p) {
    return p ? checked_usable_size("malloc_usable_size", p) : 0;
}

// glibc's malloc_trim gives free memory at the top of its heaps back and madvises free pages
// inside them; 1 if it released any. Here: the calling thread's retained empty pages and the
// resident free page slots of its superslabs, the cached empty superslabs and the cached large
// regions, all now instead of after their purge delays. Other threads' heaps are theirs to
// touch: their delays still run (10 ms speed-first). `pad` (glibc: bytes left untrimmed at the
// top of the main heap) has no top to apply to.
HAK_EXPORT int hak_malloc_trim(size_t pad) {
    (void)pad;
    hak_process_init();
    hak_heap *heap = hak_tls_heap;
    if (heap == &hak_heap_empty) heap = NULL;
    if (heap) {
        hak_heap_large_flush(heap); // (other threads' regions are theirs: a few each)
        hak_heap_trim_spare(heap);
    }
    size_t dropped = hak_purge_trim(heap);
    return dropped != 0;
}

// Sized frees (C23 free_sized and free_aligned_sized, C++ sized delete: cxx.c). The debug and
// secure builds check the size against the block, as a mismatched delete (through a pointer to
// the wrong type, of an array as an object) is a bug like an invalid free: it must fit the
// block, and for an unaligned allocation be more than about half of it (a smaller size would
// have had a smaller block: size classes are at most twice apart, large blocks a page). The
// other builds trust it: a block of at most HAK_SIZED_SMALL_MAX bytes goes straight to its
// small page (hak_free_small), anything else through hak_free.
#if !HAK_SIZED_FREE_TRUSTED
static void check_free_size(const char *func, void *p, size_t size, int aligned) {
    if (!p) return;
    size_t usable = checked_usable_size(func, p);
    if (size > usable || (!aligned && usable - size > usable / 2 + 16))
        hak_fatal_pointer(func, "size does not match the block", p);
}
#else
#define check_free_size(func, p, size, aligned) ((void)(size))
#endif

HAK_EXPORT void hak_free_sized(void *p, size_t size) {
#if HAK_SIZED_FREE_TRUSTED
    if (hak_sized_free_small(p, size, 0)) {
        hak_free_small(p);
        return;
    }
#endif
    check_free_size("free_sized", p, size, 0);
    hak_free(p);
}

HAK_EXPORT void hak_free_aligned_sized(void *p, size_t alignment, size_t size) {
    (void)alignment; // (the checked builds check the size alone)
#if HAK_SIZED_FREE_TRUSTED
    if (hak_sized_free_small(p, size, alignment)) {
        hak_free_small(p);
        return;
    }
#endif
    check_free_size("free_aligned_sized", p, size, 1);
    hak_free(p);
}

HAK_EXPORT void *hak_calloc(size_t count, size_t size) {
    size_t total;
    if (__builtin_mul_overflow(count, size, &total)) {
        errno = ENOMEM;
        return NULL;
    }
#ifdef HAK_SECURE
    if (total == 0) return hak_malloc(0); // nothing to zero (zero.c)
#endif
    hak_process_init(); // hak_small_max comes from the options
    // Skip the memset for a large block: a fresh mapping is already zero.
    if (total + HAK_CANARY_SIZE > hak_small_max) return large_alloc(total, HAK_MIN_ALIGN, 1);
    void *p = hak_malloc(total);
    // The whole block, as glibc: malloc_usable_size says the program may use all of it.
    if (p)
        memset(p, 0,
               hak_page_of(hak_superslab_of((uintptr_t)p), (uintptr_t)p)->block_size -
                   HAK_CANARY_SIZE);
    return p;
}

HAK_EXPORT void *hak_realloc(void *p, size_t size) {
    if (p == NULL) return hak_malloc(size);
    if (size == 0) { // glibc: free and return NULL
        hak_free(p);
        return NULL;
    }
    size_t usable = checked_usable_size("realloc", p);
    if (HAK_UNLIKELY(size > PTRDIFF_MAX)) { // as glibc: no object is larger; p stays as it was
        errno = ENOMEM;
        return NULL;
    }
    // Large to large: resized in place or moved by mremap, never copied.
    if (hak_registry_get((uintptr_t)p) == HAK_REG_LARGE && size > hak_small_max) {
        int out_of_memory = 0;
        void *q = hak_large_realloc(p, size, &out_of_memory);
        if (!q && out_of_memory && hak_release_cached())
            q = hak_large_realloc(p, size, &out_of_memory);
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
    if (HAK_UNLIKELY(size > PTRDIFF_MAX)) { // as glibc (and before size + HAK_CANARY_SIZE wraps)
        errno = ENOMEM;
        return NULL;
    }
    if (alignment <= sizeof(void *)) return hak_malloc(size); // C0 blocks are 8-aligned
    hak_process_init(); // hak_small_max comes from the options
    if (size + HAK_CANARY_SIZE <= hak_small_max && alignment <= HAK_NATURAL_ALIGN) {
        unsigned cls = hak_class_of(size + HAK_CANARY_SIZE);
        while (cls < HAK_CLASS_COUNT && hak_class_block_size[cls] <= hak_small_max &&
               (hak_class_block_size[cls] & (0u - hak_class_block_size[cls])) < alignment)
            cls++;
        if (cls < HAK_CLASS_COUNT && hak_class_block_size[cls] <= hak_small_max)
            return alloc_current(cls);
    }
    return large_alloc(size, alignment, 0);
}

static int is_power_of_two(size_t x) {
    return x != 0 && (x & (x - 1)) == 0;
}

HAK_EXPORT int hak_posix_memalign(void **out, size_t alignment, size_t size) {
    if (alignment % sizeof(void *) != 0 || !is_power_of_two(alignment)) return EINVAL;
    void *p = aligned_alloc_impl(alignment, size); // sets errno to ENOMEM on failure, as glibc
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

// As glibc 2.36 (Debian 12's): memalign, so an alignment that is not a power of two is rounded
// up rather than refused (glibc 2.38 and C17 refuse it with EINVAL; docs/allocator.md).
HAK_EXPORT void *hak_aligned_alloc(size_t alignment, size_t size) {
    return hak_memalign(alignment, size);
}

HAK_EXPORT void *hak_valloc(size_t size) {
    return aligned_alloc_impl(HAK_OS_PAGE_SIZE, size);
}

HAK_EXPORT void *hak_pvalloc(size_t size) {
    size_t rounded = hak_round_to_os_pages(size);
    if (rounded < size) {
        errno = ENOMEM;
        return NULL;
    }
    return aligned_alloc_impl(HAK_OS_PAGE_SIZE, rounded ? rounded : HAK_OS_PAGE_SIZE);
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
int malloc_trim(size_t pad) HAK_ALIAS(hak_malloc_trim);
void free_sized(void *p, size_t size) HAK_ALIAS(hak_free_sized);
void free_aligned_sized(void *p, size_t alignment, size_t size) HAK_ALIAS(hak_free_aligned_sized);
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
