// A heap's part of the purge policy (the arena's is in arena.c): the deadlines of the heap's
// own superslabs, checked by the heap as it frees page slots and in its sweeps; the lean
// policy's purge of idle medium blocks; malloc_trim; and, out of address space, everything
// cached given back (hak_release_cached) so that the caller may try its mapping again.

#include "heap.h"
#include "options.h"

#define HAK_PURGE_CHECK_EVERY 16

// Out of address space (a process under RLIMIT_AS, `ulimit -v`, as sandboxes and batch systems
// set it; or vm.overcommit_memory=2): when a mapping is refused, what the allocator keeps
// mapped for reuse goes back before the caller tries again: every cached large region and the rest
// of the current span chunk, the abandoned superslabs that emptied, every cached empty superslab.
// Only what sits behind a global lock can be reached safely; other threads' heaps are theirs.
// Without it, a burst of large blocks freed left the large cache holding the address space that a
// later, larger malloc needed (issue #37; test_oom). Returns whether anything was unmapped (then
// the caller tries once more: the layers that map memory only report the failure, mimalloc's way).
int hak_release_cached(void) {
    hak_heap *heap = hak_tls_heap;
    if (heap != &hak_heap_empty) hak_heap_large_flush(heap);
    size_t released = hak_large_release_cache();
    hak_page_reclaim_all_abandoned();
    released += hak_arena_release_cache();
    return released != 0;
}

// The lean policy's purge of idle medium blocks. A heap's live set of 10-32 KiB blocks breathes,
// per class, over a few blocks of one 512 KiB page, and what it held at its highest stayed
// resident, per class and per thread: bench_churn under BALANCED, at its peak, held far more
// medium pages than live medium blocks. So every HAK_IDLE_TICK_EVERY allocation slow paths a
// heap reads the coarse clock, and once HAK_IDLE_NS have passed since its last pass, the free
// blocks of its medium pages beyond the HAK_IDLE_KEEP most recently freed of each page that
// were free there at the last pass already give all their memory back; the others are marked
// for the next (hak_page_purge_idle_blocks). A block goes back once it has been free for
// HAK_IDLE_NS to 2 HAK_IDLE_NS. Passes every 256 slow paths without the clock made
// mid_large_mt1 (a steady live set of 8-32 KiB blocks) slower, with more page faults: counted
// in slow paths, a busy heap's blocks are not idle long before they go (both measured:
// docs/notebook/2026-12-07-source-comments.md#purgec-idle-medium-blocks). Speed-first keeps
// them (its countdown wraps around: 2^32 slow paths).
#define HAK_IDLE_TICK_EVERY 256
#define HAK_IDLE_KEEP       4
#define HAK_IDLE_NS         (10u * 1000u * 1000u)
static uintptr_t idle_mark(uint32_t epoch) {
    return hak_remote_key + (uintptr_t)epoch * 0x9e3779b97f4a7c15u;
}

void hak_purge_idle_tick(hak_heap *heap) {
    heap->idle_countdown = hak_option[HAK_OPT_SS_MEM_LEAN] ? HAK_IDLE_TICK_EVERY : 0;
    if (!hak_option[HAK_OPT_SS_MEM_LEAN]) return;
    uint64_t now = hak_coarse_now_ns();
    if (now - heap->idle_last_ns < HAK_IDLE_NS) return;
    heap->idle_last_ns = now;
    uintptr_t marked_before = idle_mark(heap->idle_epoch), mark = idle_mark(++heap->idle_epoch);
    for (unsigned cls = 0; cls < HAK_CLASS_COUNT; cls++) {
        if (hak_class_kind[cls] != HAK_KIND_MEDIUM) continue;
        for (hak_page *page = heap->queue[cls].first; page; page = page->next)
            if (page->free || page->local_free)
                hak_page_purge_idle_blocks(page, HAK_IDLE_KEEP, mark, marked_before);
    }
}

// A page slot of one of the heap's superslabs became free: its deadline set or cleared as the
// arena's policy says (arena.c, "A page slot of a live superslab became free").
void hak_purge_slot_freed(hak_heap *heap, hak_superslab *ss) {
    // A shrinking heap's freed slots go now, the floor's too (see HAK_SHRINK_BYTES): a thread
    // that freed 100 MiB of 1-16 KiB blocks and then waited for another kept the last 10 ms of
    // its frees resident, for good.
    if (hak_heap_shrinking(heap) && (ss->dirty_mask & ss->free_page_mask)) {
        hak_superslab_purge(ss, 0);
        hak_stat_add(ss_os, shrink_purge, 1);
    }
    uint32_t dirty = hak_arena_slots_beyond_floor(ss);
    if (!dirty) {
        ss->purge_due_ns = 0; // within the floor: the delay starts again when it is exceeded
    } else {
        if (!ss->purge_due_ns) hak_arena_arm(ss, hak_coarse_now_ns() + HAK_PURGE_DELAY_NS);
        if (!heap->purge_next_ns || ss->purge_due_ns < heap->purge_next_ns)
            heap->purge_next_ns = ss->purge_due_ns;
    }
    // The clock is read for the deadlines every HAK_PURGE_CHECK_EVERY slot frees (and in every
    // sweep), not at each: mid sizes free a slot every few operations.
    if (++heap->purge_checks >= HAK_PURGE_CHECK_EVERY) {
        heap->purge_checks = 0;
        hak_purge_due(heap);
    }
}

// Purges what waited its delay: the free slots of the heap's superslabs, the heap's own large
// regions (to the shared cache), and through the arena's scheduler the cached superslabs and
// large regions; keeps the heap's next deadline.
void hak_purge_due(hak_heap *heap) {
    uint64_t cache_next = hak_arena_cache_next_due();
    if (!heap->purge_next_ns && !cache_next && !heap->large_count) return;
    uint64_t now = hak_coarse_now_ns();
    if (heap->large_count) hak_heap_large_purge_due(heap, now);
    if (cache_next && now >= cache_next) hak_arena_cache_purge_due(now);
    if (!heap->purge_next_ns || now < heap->purge_next_ns) return;
    uint64_t next = 0;
    for (unsigned kind = 0; kind < HAK_KIND_COUNT; kind++)
        for (hak_superslab *ss = heap->superslabs[kind]; ss; ss = ss->next) {
            if (!ss->purge_due_ns) continue;
            if (ss->purge_due_ns <= now) hak_arena_purge_aged(ss, now); // may set a new deadline
            if (ss->purge_due_ns && (!next || ss->purge_due_ns < next)) next = ss->purge_due_ns;
        }
    heap->purge_next_ns = next;
}

// malloc_trim: every resident free page slot of the heap's superslabs (the floor's too) and
// every cached superslab not decommitted yet go back to the kernel now. Returns the bytes.
size_t hak_purge_trim(hak_heap *heap) {
    size_t dropped = 0;
    if (heap) {
        for (unsigned kind = 0; kind < HAK_KIND_COUNT; kind++)
            for (hak_superslab *ss = heap->superslabs[kind]; ss; ss = ss->next)
                dropped += hak_superslab_purge(ss, 0);
        heap->purge_next_ns = 0;
    }
    return dropped + hak_arena_trim_cache();
}
