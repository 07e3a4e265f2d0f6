// The legacy (v1) front: every class it serves pops its heap's direct page on the fast path
// (wrappers.c). When that page is empty, the refill walks the whole class queue (collecting
// each page, carving fresh pages 4 KiB at a time, parking exhausted pages on the full list),
// then adopts an abandoned superslab, then takes a fresh page. A page that empties (other than
// the current one) goes straight back to its superslab.
#include "internal.h"

static void *legacy_alloc_slow(hak_heap *heap, unsigned cls) {
    hak_heap_slow_entry(heap);
    hak_page *page = hak_heap_scan_queue(heap, cls, HAK_CARVE_STEP_DEFAULT, ~0u);
    if (!page && hak_heap_adopt(heap))
        page = hak_heap_scan_queue(heap, cls, HAK_CARVE_STEP_DEFAULT, ~0u);
    if (!page) page = hak_heap_new_page(heap, cls, HAK_CARVE_STEP_DEFAULT);
    return page ? hak_page_pop(page) : NULL;
}

// An owner free that missed the fast path: the page is on the full list (or the debug build
// checks every free here). Shared by every front: they differ in refill and retention, not
// in how a block goes back onto its page.
void hak_front_free_local(hak_heap *heap, hak_page *page, hak_block *block) {
    if (page->in_full) hak_heap_page_unfull(heap, page);
    block->next = page->local_free;
    page->local_free = block;
    if (--page->used <= 0) hak_heap_free_emptied(heap, page, block);
}

void hak_front_release_page(hak_heap *heap, hak_page *page) {
    hak_heap_detach_page(heap, page);
    hak_heap_release_page(heap, page);
}

const hak_front hak_front_legacy = {
    .name = "legacy",
    .alloc_slow = legacy_alloc_slow,
    .free_local_slow = hak_front_free_local,
    .page_emptied = hak_front_release_page,
};
