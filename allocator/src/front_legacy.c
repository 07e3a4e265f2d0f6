// The legacy (v1) front: every class it serves pops its heap's direct page on the fast path
// (wrappers.c); when that page is empty, the refill takes the next page of the class's queue,
// then a fresh page (heap.c).
#include "internal.h"

static void *legacy_alloc_slow(hak_heap *heap, unsigned cls) {
    hak_page *page = hak_heap_find_page(heap, cls);
    if (!page) return NULL;
    hak_block *block = page->free;
    page->free = block->next;
    page->used++;
    return block;
}

// An owner free that missed the fast path: the page is on the full list (or the debug build
// checks every free here).
static void legacy_free_local_slow(hak_heap *heap, hak_page *page, hak_block *block) {
    if (page->in_full) hak_heap_page_unfull(heap, page);
    block->next = page->local_free;
    page->local_free = block;
    if (--page->used == 0) hak_heap_page_emptied(heap, page);
}

const hak_front hak_front_legacy = {
    .name = "legacy",
    .alloc_slow = legacy_alloc_slow,
    .free_local_slow = legacy_free_local_slow,
};
