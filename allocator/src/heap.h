// The heap layer: per-thread heaps (heap.c), their purges and trim (purge.c), their own large
// regions (heaplarge.c), the routes of size classes to fronts (route.c), the secure build's
// zero-size blocks (zero.c).
#ifndef HAK_HEAP_H
#define HAK_HEAP_H

#include "page.h"

// --- purge.c: the heap's purge deadlines, malloc_trim, out of address space
// A heap that has given back more than this of page slots since it last took one is shrinking:
// it frees without refilling (a thread freeing its data before it waits or exits), so there is
// no refill for the delay to keep warm memory for, and the thread may never come back to purge
// it (hak_purge_slot_freed, current_emptied in heap.c).
#define HAK_SHRINK_BYTES (4u << 20)
static inline int hak_heap_shrinking(const hak_heap *heap) {
    return heap->shrink_bytes > HAK_SHRINK_BYTES;
}
void hak_purge_slot_freed(struct hak_heap *heap, hak_superslab *ss);
void hak_purge_due(struct hak_heap *heap);
size_t hak_purge_trim(struct hak_heap *heap);
// Everything cached given back (out of address space); whether anything was: then try again.
int hak_release_cached(void);

// --- heaplarge.c: the large blocks a thread frees and allocates again, through its heap's own
// regions first, else the shared cache and the segment layer (large.c)
void *hak_heap_large_alloc(size_t size, size_t alignment, int zero);
void hak_heap_large_free(void *p);
// Every region of the heap to the shared cache (its thread exits, malloc_trim, out of address
// space), or those whose delay ran out by `now` (the heap's deadline checks, purge.c).
void hak_heap_large_flush(hak_heap *heap);
void hak_heap_large_purge_due(hak_heap *heap, uint64_t now);

// --- heap.c: per-thread heap life cycle, page queues, full list, adoption
hak_heap *hak_heap_create(void);
void hak_heap_destroy(hak_heap *heap);
void hak_heap_page_emptied(hak_heap *heap, hak_page *page);
// An owner free that missed the fast path: the page is on the full list (or the debug build
// checks every free here).
void hak_heap_free_local(hak_heap *heap, hak_page *page, hak_block *block);
// malloc_trim: the retained empty pages, and the empty pages a class keeps in its
// queue, go back to their superslabs.
void hak_heap_trim_spare(hak_heap *heap);
void hak_heap_free_emptied_slow(hak_heap *heap, hak_page *page, hak_block *block);
void hak_heap_page_unfull(hak_heap *heap, hak_page *page);
// Building blocks of the fronts' refill and retire policies (heap.c, and inline below so that
// each front's slow path compiles with its own constants and no extra call level):
//   free_delayed   owner-free the blocks other threads pushed onto delayed_free
//   scan_queue     walk the class queue from its head: collect each page,
//                  carve up to carve_bytes into an exhausted free list, park pages with nothing
//                  left on the full list; the first page with a free block becomes the head and
//                  the direct page (returned), or NULL
//   adopt          take over one abandoned superslab with room for the class (its pages join
//                  the queues); 0 if none
//   new_page       a fresh page from a free slot of the heap's superslabs (or, if may_map, of
//                  a new superslab), carved by carve_bytes, made head and direct page; NULL
//                  when there is none (or out of memory)
//   install_page   make a page with free blocks (on no list) the head and direct page
//   detach_page    take a page off its queue or the full list
//   release_page   give a detached empty page back to its superslab (and an empty superslab
//                  to the OS policy)
void hak_heap_free_delayed_blocks(hak_heap *heap);
void hak_heap_flush_remote(hak_heap *heap);
int hak_heap_park_exhausted(hak_heap *heap, hak_page *page);
void hak_heap_move_to_front(hak_heap *heap, hak_page *page);
int hak_heap_adopt(hak_heap *heap, unsigned cls);
hak_page *hak_heap_new_page(hak_heap *heap, unsigned cls, uint32_t carve_bytes,
                            uint32_t carve_blocks, int may_map);
void hak_heap_install_page(hak_heap *heap, hak_page *page);
void hak_heap_detach_page(hak_heap *heap, hak_page *page);
void hak_heap_release_page(hak_heap *heap, hak_page *page);

// Brackets of a slow path that changes the heap's lists (see hak_heap.busy). The fences keep
// the compiler from moving the heap's stores across them; the fork snapshot sees the thread's
// stores in program order (x86-64's TSO).
static inline void hak_heap_enter(hak_heap *heap) {
    heap->busy++;
    atomic_signal_fence(memory_order_seq_cst);
}
static inline void hak_heap_leave(hak_heap *heap) {
    atomic_signal_fence(memory_order_seq_cst);
    heap->busy--;
}

// An owner free brought a small page's `used` to 0 or below (a bare free(malloc(64)) loop lands
// here at every free), inline in the free fast path. The class's current page, when it is the
// only page in its class's queue, stays as it is, finished here when the free is good: `used`
// not below 0, the block not at the head of both lists (a double free; the free has just pushed
// it onto one of them, `free` outside the secure build, so `local_free` is tested first), and
// not past the blocks carved so far (no block handed out); heap.c's check_emptied makes the same
// tests and reports. Small pages only: a small page's slot is 64 KiB and its blocks start at the
// slot's start (slot 0, whose blocks would start past the superslab's header, serves no page),
// so the block's offset comes from its address alone. Anything else (another page, a queue of
// several: which empty pages stay is heap.c's current_emptied) is one tail call, so the free
// fast path keeps no stack frame.
static inline void hak_heap_free_emptied(hak_heap *heap, hak_page *page, hak_block *block) {
    const hak_page_queue *queue = &heap->queue[page->class_idx];
    if (HAK_LIKELY(page == heap->direct[page->class_idx] && queue->first == queue->last &&
                   page->used == 0 && !(page->local_free == block && page->free == block) &&
                   ((uintptr_t)block & (HAK_PAGE_SIZE - 1)) <
                       (uintptr_t)page->reserved * page->block_size))
        return;
    hak_heap_free_emptied_slow(heap, page, block);
}

static inline void hak_heap_free_delayed(hak_heap *heap) {
    if (HAK_UNLIKELY(atomic_load_explicit(&heap->delayed_free, memory_order_relaxed) != NULL))
        hak_heap_free_delayed_blocks(heap);
}

// A heap sweeps every HAK_SWEEP_INTERVAL times its lists cannot serve a refill (before it
// adopts or takes a fresh page): it collects every queued page and hands those that remote
// frees emptied to their front's page_emptied (exactly as if the last block had come back
// locally), and it visits a few abandoned superslabs to give back what their remote frees
// emptied. So pages that other threads emptied go back before the heap grows. Counted there
// and not per slow path, because mid-pool pages of 2-7 blocks enter the slow path on nearly
// every refill: a counter there costs every refill. A heap that has collected no remote free
// since its last sweep sweeps only every HAK_SWEEP_IDLE_EVERY intervals (nothing but
// abandoned superslabs can have changed for it).
#define HAK_SWEEP_INTERVAL   32
#define HAK_SWEEP_IDLE_EVERY 16
void hak_heap_sweep(hak_heap *heap);

// What every front's alloc_slow does first: the blocks other threads freed into its full
// pages come back (as owner frees, which moves those pages back to their queues); and every
// so many, the lean policy's purge of idle medium blocks (hak_purge_idle_tick).
void hak_purge_idle_tick(hak_heap *heap);
static inline void hak_heap_slow_entry(hak_heap *heap) {
    hak_heap_free_delayed(heap);
    if (HAK_UNLIKELY(--heap->idle_countdown == 0)) hak_purge_idle_tick(heap);
}

void hak_heap_split_class(hak_heap *heap, unsigned small);

// Is class `cls`, which starts merged into the next (hak_class_merged_into), still served by
// it in this heap? Slow paths only.
static inline int hak_heap_is_merged(const hak_heap *heap, unsigned cls) {
    return cls < HAK_TINY_CLASS_COUNT && hak_class_merged_into[cls] != cls &&
           heap->class_of_size[hak_class_block_size[cls]] != cls;
}

// Gives class `cls` its own sizes back if this heap still serves them by the next class.
static inline void hak_heap_unmerge(hak_heap *heap, unsigned cls) {
    if (hak_heap_is_merged(heap, cls)) hak_heap_split_class(heap, cls);
}

// What every front does when its own lists cannot serve the refill, before it adopts or takes
// a fresh page: its remote batch goes out (the thread may now block on a lock or in the
// kernel, and must hold no other heap's page hostage meanwhile), and the periodic sweep; and
// a class with a smaller one merged into it (hak_class_merged_into) splits it off at its
// second such trip: the heap then holds more than a page of these sizes.
static inline void hak_heap_need_memory(hak_heap *heap, unsigned cls) {
    if (heap->backend_trips[cls] < UINT8_MAX && ++heap->backend_trips[cls] == 2 && cls > 0)
        hak_heap_unmerge(heap, cls - 1); // the class below, if it is merged into this one
    if (heap->remote_page) hak_heap_flush_remote(heap);
    if (HAK_UNLIKELY(heap->sweep_countdown-- == 0)) hak_heap_sweep(heap);
}

static inline hak_page *hak_heap_scan_queue(hak_heap *heap, unsigned cls, uint32_t carve_bytes,
                                            uint32_t carve_blocks) {
    hak_page_queue *q = &heap->queue[cls];
    hak_page *next, *carvable = NULL, *found = NULL;
    for (hak_page *page = q->first; page; page = next) {
        next = page->next;
        hak_page_collect(page);
        if (!page->free && page->has_purged) hak_page_restore_purged(page);
        if (page->free) {
            found = page;
            break;
        }
        // Free blocks anywhere in the queue come before fresh memory: carve only if none.
        if (page->reserved < page->capacity) {
            if (!carvable) carvable = page;
        } else if (!hak_heap_park_exhausted(heap, page)) {
            found = page; // remote frees raced in
            break;
        }
    }
    if (!found && carvable && hak_page_extend(carvable, carve_bytes, carve_blocks))
        found = carvable;
    if (found) {
        if (found != q->first) hak_heap_move_to_front(heap, found);
        heap->direct[cls] = found;
        return found;
    }
    heap->direct[cls] = q->first ? q->first : &hak_page_empty;
    return NULL;
}

// Per-process random key: a block on its way to another heap's page carries
// hak_remote_key ^ its address in its second word until the owner collects it, so a second
// remote free of it is recognised (blocks of 16 B and up).
extern uintptr_t hak_remote_key;

// Pops a block from a page whose free list is not empty (the slow paths, each after
// hak_page_collect, which checked a head it did not set itself).
static inline void *hak_page_pop(hak_page *page) {
    hak_block *block = page->free;
    page->free = hak_link_checked(page, block);
    page->used++;
    return block;
}
void hak_heap_free_remote(hak_heap *heap, hak_heap *owner, hak_page *page, hak_block *block);
void hak_heap_note_abandoned_free(hak_heap *heap);
void hak_heap_for_each_live(void (*fn)(hak_heap *heap, void *arg), void *arg);
void *hak_heap_exited_alloc(unsigned cls, void *(*alloc)(hak_heap *heap, unsigned cls));
void hak_heap_fork_prepare(void);
void hak_heap_fork_parent(void);
void hak_heap_fork_child(void);

// --- route.c: class -> front (a row of the fronts' table, HAK_FRONTS)
// The fronts' table as data, one row per front (HAK_FRONT_*).
extern const hak_front hak_fronts[HAK_FRONT_COUNT];
const hak_front *hak_route_for_class(unsigned cls);
void hak_route_latch(hak_heap *heap);
void hak_route_init(void);
void hak_route_print(void);

// --- zero.c: the secure build's zero-size blocks
void *hak_zero_alloc(void);
// Checks p (a pointer into their region) for `func`; frees it when func is "free".
void hak_zero_free(const char *func, void *p);

#endif
