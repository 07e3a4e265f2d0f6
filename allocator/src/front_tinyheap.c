// TinyHeap (HAKMEM_TINY_HEAP_PROFILE=C7_SAFE: class 7): a per-thread heap of pages, one
// current page per class popped through its page-local free list on the shared fast path.
// What differs from legacy is the refill: a page is carved whole (all its blocks linked in
// one pass) instead of 4 KiB at a time, so a class of large tiny blocks (C7: 64 blocks of
// 1 KiB per page) refills once per page instead of once per 4 blocks while pages are fresh,
// and a page's memory is touched at once (fine for blocks this big: four blocks fill a 4 KiB
// OS page anyway). Empty pages go straight back to their superslab, as in legacy.
#include "internal.h"

static void *tinyheap_alloc_slow(hak_heap *heap, unsigned cls) {
    hak_page *current = heap->direct[cls];
    hak_heap_slow_entry(heap);
    hak_page *page = hak_heap_scan_queue(heap, cls, HAK_CARVE_WHOLE_PAGE, ~0u);
    if (!page) {
        HAK_HOT_STAT(heap, fallback, cls);
        if (hak_heap_adopt(heap)) page = hak_heap_scan_queue(heap, cls, HAK_CARVE_WHOLE_PAGE, ~0u);
        if (!page) page = hak_heap_new_page(heap, cls, HAK_CARVE_WHOLE_PAGE);
        if (!page) return NULL;
    }
    if (page != current) HAK_HOT_STAT(heap, refill, cls);
    return hak_page_pop(page);
}

const hak_front hak_front_tinyheap = {
    .name = "tinyheap",
    .alloc_slow = tinyheap_alloc_slow,
    .free_local_slow = hak_front_free_local,
    .page_emptied = hak_front_release_page,
};
