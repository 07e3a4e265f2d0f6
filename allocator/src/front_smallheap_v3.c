// SmallObject v3 (HAKMEM_SMALL_HEAP_V3_ENABLED=1, classes in HAKMEM_SMALL_HEAP_V3_CLASSES): one
// page heap for the small classes whose pages are found from a block's address in O(1) (the
// superslab mask and descriptor index every front shares), and which talks to the backend
// through exactly two calls: v3_backend_refill (a page with free blocks: adopt an abandoned
// superslab or take a fresh page) and v3_backend_retire (give an empty page back).
// Its own policy is a bounded refill: it looks at no more than V3_SCAN_LIMIT pages of the
// class queue before asking the backend, so one slow path costs O(1) pages however many
// partial pages the class has (legacy walks the whole queue), at the price of sometimes taking
// a fresh page while an unvisited partial page still has room.
#include "internal.h"

#define V3_SCAN_LIMIT 4

static hak_page *v3_backend_refill(hak_heap *heap, unsigned cls) {
    hak_page *page = NULL;
    if (hak_heap_adopt(heap))
        page = hak_heap_scan_queue(heap, cls, HAK_CARVE_STEP_DEFAULT, V3_SCAN_LIMIT);
    return page ? page : hak_heap_new_page(heap, cls, HAK_CARVE_STEP_DEFAULT);
}

static void v3_backend_retire(hak_heap *heap, hak_page *page) {
    hak_heap_detach_page(heap, page);
    hak_heap_release_page(heap, page);
}

static void *smallheap_v3_alloc_slow(hak_heap *heap, unsigned cls) {
    hak_page *current = heap->direct[cls];
    hak_heap_slow_entry(heap);
    hak_page *page = hak_heap_scan_queue(heap, cls, HAK_CARVE_STEP_DEFAULT, V3_SCAN_LIMIT);
    if (!page) {
        HAK_HOT_STAT(heap, fallback, cls);
        page = v3_backend_refill(heap, cls);
        if (!page) return NULL;
    }
    if (page != current) HAK_HOT_STAT(heap, refill, cls);
    return hak_page_pop(page);
}

const hak_front hak_front_smallheap_v3 = {
    .name = "smallheap_v3",
    .alloc_slow = smallheap_v3_alloc_slow,
    .free_local_slow = hak_front_free_local,
    .page_emptied = v3_backend_retire,
};
