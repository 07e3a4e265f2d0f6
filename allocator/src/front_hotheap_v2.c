// HotHeap v2 (HAKMEM_TINY_HOTHEAP_V2=1, classes in HAKMEM_TINY_HOTHEAP_CLASSES): a current
// page, a partial list (the class queue), and an empty-page retention policy. A page that
// empties is not given back to its superslab: up to HOTHEAP_V2_MAX_PARTIAL empty pages per
// class are retained on the heap's spare list, already carved, and reused before any fresh
// page. A workload whose live set breathes (fills a few pages, drains them, fills them again)
// then never returns pages to the superslab and never re-carves them. Fresh pages are carved
// 16 KiB at a time. The cost: up to max_partial x 64 KiB per class stays resident.
#include "internal.h"

#define HOTHEAP_V2_MAX_PARTIAL 2
#define HOTHEAP_V2_CARVE_BYTES (16 * 1024)

// A retained page carries no live block, so it leaves the free fast path (local_owner NULL): a
// stale free() into it reaches the slow path, which reports the double free.
static void retain_empty_page(hak_heap *heap, hak_page *page) {
    hak_page_set_local_owner(page, NULL);
    page->prev = NULL;
    page->next = heap->spare[page->class_idx];
    heap->spare[page->class_idx] = page;
    heap->spare_count[page->class_idx]++;
}

static hak_page *reuse_empty_page(hak_heap *heap, unsigned cls) {
    hak_page *page = heap->spare[cls];
    if (!page) return NULL;
    heap->spare[cls] = page->next;
    heap->spare_count[cls]--;
    page->next = NULL;
    hak_page_set_local_owner(page, heap);
    hak_page_collect(page);
    hak_assert(page->free != NULL); // every carved block is free
    hak_heap_install_page(heap, page);
    return page;
}

static void *hotheap_v2_alloc_slow(hak_heap *heap, unsigned cls) {
    hak_page *current = heap->direct[cls];
    hak_heap_slow_entry(heap);
    hak_page *page = hak_heap_scan_queue(heap, cls, HOTHEAP_V2_CARVE_BYTES, ~0u);
    if (!page) page = reuse_empty_page(heap, cls);
    if (!page) {
        HAK_HOT_STAT(heap, fallback, cls);
        if (hak_heap_adopt(heap))
            page = hak_heap_scan_queue(heap, cls, HOTHEAP_V2_CARVE_BYTES, ~0u);
        if (!page) page = hak_heap_new_page(heap, cls, HOTHEAP_V2_CARVE_BYTES);
        if (!page) return NULL;
    }
    if (page != current) HAK_HOT_STAT(heap, refill, cls);
    return hak_page_pop(page);
}

static void hotheap_v2_page_emptied(hak_heap *heap, hak_page *page) {
    hak_heap_detach_page(heap, page);
    if (heap->spare_count[page->class_idx] < HOTHEAP_V2_MAX_PARTIAL)
        retain_empty_page(heap, page);
    else
        hak_heap_release_page(heap, page);
}

const hak_front hak_front_hotheap_v2 = {
    .name = "hotheap_v2",
    .alloc_slow = hotheap_v2_alloc_slow,
    .free_local_slow = hak_front_free_local,
    .page_emptied = hotheap_v2_page_emptied,
};
