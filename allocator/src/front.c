// Front paths: what happens on the slow paths of the size classes a front serves. Every front
// shares the two inline fast paths (pop heap->direct[cls], push page->local_free) and this one
// slow-path skeleton; a front is a policy, four numbers in a row of the fronts' table
// (types.h: HAK_FRONTS), not a copy of the code:
//   carve_bytes   how much of a page is linked into its free list at once, and
//   carve_blocks  at least how many blocks: a small step never touches (faults in) the rest
//                 of a page that holds few live blocks; a large one costs fewer slow paths.
//                 A fresh page's steps start at one OS page of blocks and double up to this
//                 one (page.c, hak_page_extend)
//   max_spare     empty pages kept per class instead of given back (already carved, reused
//                 first, never through the superslab)
//   sized_pages   pages sized per class: 64 KiB up to 8 KiB blocks, 512 KiB up to 64 KiB,
//                 2 MiB above, and size classes up to 256 KiB (the others keep 64 KiB pages and
//                 stop at 32 KiB, where a page still holds two blocks); see route.c
// The fronts, and why each exists (measured: docs/notebook/2026-11-26-allocator-measurements.md):
//   legacy         the reference: whole-queue scan, 4 KiB carve step, empty pages given back
//   TinyHeap       steps up to the whole page: a C7 page (64 blocks of 1 KiB) refills five
//                  times (4, 4, 8, 16, 32 blocks) instead of sixteen while pages are fresh
//   HotHeap v2     up to 2 empty pages per class retained: a live set that breathes over a
//                  few pages reuses them without the superslab and without re-carving
//   SmallObject v3 one hot box from 8 B to 256 KiB: pages sized to the class (so a mid page
//                  holds 7-64 blocks instead of 2-8), classes past 32 KiB; legacy's carve;
//                  one empty page per class retained, so a class whose live set drifts
//                  across a page boundary reuses its blocks instead of taking a fresh page
//                  (another slot, another block grid, fresh memory) at every crossing
#include "front.h"

static hak_page *reuse_empty_page(hak_heap *heap, unsigned cls) {
    hak_page *page = heap->spare[cls];
    if (!page) return NULL;
    heap->spare[cls] = page->next;
    heap->spare_count[cls]--;
    page->next = NULL;
    hak_page_set_local_owner(page, heap);
    hak_page_collect(page);
    if (!page->free && page->has_purged) hak_page_restore_purged(page);
    hak_assert(page->free != NULL); // every carved block is free
    hak_heap_install_page(heap, page);
    return page;
}

// The direct page of `cls` has no free block: the class queue, then a retained empty page,
// then the backend: a free slot of the heap's own superslabs, then an abandoned superslab
// (adopted), and only then a new superslab. Own slots before adoption: a heap that lives on
// (a program's main thread) adopted every superslab its short-lived peers left, for a class
// it ran out of, and with it pages of every other class, each pinned by a few blocks the peer
// had handed on; the next peer found none left and cut fresh pages, which its exit left to
// the long-lived heap in turn (mstress). With own slots first, the new thread adopts what its
// predecessor left (measured: docs/notebook/2026-11-28-thread-churn.md).
// Inlined once per row of the fronts' table (below), so that each runs with its row's numbers
// as constants.
static inline __attribute__((always_inline)) void *alloc_slow_body(hak_heap *heap, unsigned cls,
                                                                   const hak_front *front) {
    hak_page *current = heap->direct[cls];
    hak_heap_slow_entry(heap);
    hak_page *page = hak_heap_scan_queue(heap, cls, front->carve_bytes, front->carve_blocks);
    if (!page && front->max_spare && heap->spare[cls]) page = reuse_empty_page(heap, cls);
    if (!page) {
        HAK_HOT_STAT(heap, fallback, cls);
        hak_heap_need_memory(heap, cls);
        page = hak_heap_new_page(heap, cls, front->carve_bytes, front->carve_blocks, 0);
        if (!page && hak_heap_adopt(heap, cls))
            page = hak_heap_scan_queue(heap, cls, front->carve_bytes, front->carve_blocks);
        if (!page) page = hak_heap_new_page(heap, cls, front->carve_bytes, front->carve_blocks, 1);
        if (!page) return NULL;
    }
    if (page != current) HAK_HOT_STAT(heap, refill, cls);
    return hak_page_pop(page);
}

// One refill function per row of the fronts' table, each with its row's numbers as constants.
#define HAK_FRONT_SLOW(id, name, carve, blocks, spare, sized)                                      \
    static HAK_NOINLINE void *alloc_slow_##id(hak_heap *heap, unsigned cls) {                      \
        static const hak_front row = {name, carve, blocks, spare, sized};                          \
        hak_heap_enter(heap);                                                                      \
        void *block = alloc_slow_body(heap, cls, &row);                                            \
        hak_heap_leave(heap);                                                                      \
        return block;                                                                              \
    }
HAK_FRONTS(HAK_FRONT_SLOW)
#undef HAK_FRONT_SLOW

// The refill of each row, indexed as the table: a class's is hak_front_slow[heap->route[cls]].
void *(*const hak_front_slow[HAK_FRONT_COUNT])(hak_heap *heap, unsigned cls) = {
#define HAK_FRONT_FN(id, ...) [HAK_FRONT_##id] = alloc_slow_##id,
    HAK_FRONTS(HAK_FRONT_FN)
#undef HAK_FRONT_FN
};
