// A heap's own large regions. Under the speed-first policy a thread keeps up to
// HAK_LARGE_HEAP_CACHE regions of at most HAK_LARGE_HEAP_REGION_MAX that it freed, for its own
// next large blocks: a free puts the region here, a request takes the smallest that holds it
// whole (at most twice the request, as from the shared cache). The region's entry stays in the
// large table (large.c), marked freed, so a second free of it or a stale pointer is reported as
// before. What this saves is the shared cache's lock and its work: the linear scan, the
// coalescing, the byte bound, the eviction. A take or a put here changes the thread's own arrays,
// without a lock, and the region's entry under its table shard's lock. The oldest region goes
// to the shared cache when a fifth comes, when its deadline (the shared cache's delay, from its
// free) has passed at one of its thread's frees or deadline checks (purge.c), and all of them
// at the thread's exit and at malloc_trim. A thread without a heap, the lean policy (memory
// first) and the secure build (no cache at all) do without.
//
// Only the heap's thread changes its arrays (or a fork child that takes the heap over: they are
// changed inside hak_heap_enter/leave, so a child never adopts them half changed).
#include <string.h>

#include "heap.h"
#include "options.h"

#define HAK_LARGE_HEAP_REGION_MAX ((size_t)1 << 20)

static hak_heap *regions_heap(void) {
    hak_heap *heap = hak_tls_heap;
    return heap != &hak_heap_empty && !hak_option[HAK_OPT_SS_MEM_LEAN] ? heap : NULL;
}

// Takes the heap's region i out of its arrays; returns it (*due: its deadline).
static hak_region regions_remove(hak_heap *heap, unsigned i, uint64_t *due) {
    hak_heap_enter(heap);
    hak_region r = {heap->large_block[i], heap->large_size[i], heap->large_map[i], 0};
    *due = heap->large_due[i];
    heap->large_count--;
    for (unsigned j = i; j < heap->large_count; j++) {
        heap->large_block[j] = heap->large_block[j + 1];
        heap->large_size[j] = heap->large_size[j + 1];
        heap->large_map[j] = heap->large_map[j + 1];
        heap->large_due[j] = heap->large_due[j + 1];
    }
    hak_heap_leave(heap);
    return r;
}

// The oldest region to the shared cache (with its deadline).
static void regions_evict(hak_heap *heap) {
    uint64_t due;
    hak_region r = regions_remove(heap, 0, &due);
    hak_large_cache_put(r, due);
}

void *hak_heap_large_alloc(size_t size, size_t alignment, int zero) {
#ifndef HAK_SECURE
    hak_heap *heap = regions_heap();
    if (heap && heap->large_count && size <= HAK_ADDRESS_LIMIT) {
        size_t need = hak_round_to_os_pages(size ? size : 1);
        unsigned best = HAK_LARGE_HEAP_CACHE;
        for (unsigned i = 0; i < heap->large_count; i++) {
            size_t have = heap->large_size[i];
            if (have < need || have / 2 > need || (heap->large_block[i] & (alignment - 1)))
                continue;
            // The smallest, and of those the one freed last (the warmest in the CPU's caches).
            if (best == HAK_LARGE_HEAP_CACHE || have <= heap->large_size[best]) best = i;
        }
        if (best != HAK_LARGE_HEAP_CACHE) {
            uint64_t due;
            hak_region r = regions_remove(heap, best, &due);
            hak_stat_add(large, heap_cache_hit, 1);
            return hak_large_reuse(r.block, need, zero);
        }
    }
#endif
    return hak_large_alloc(size, alignment, zero);
}

void hak_heap_large_free(void *p) {
    hak_region r = hak_large_release(p);
    if (!r.size) return; // (the secure build's quarantine took it)
    hak_heap *heap = regions_heap();
    if (!heap || r.size > HAK_LARGE_HEAP_REGION_MAX) {
        hak_large_cache_put(r, 0);
        return;
    }
    uint64_t now = hak_coarse_now_ns();
    hak_heap_enter(heap);
    unsigned n = heap->large_count;
    heap->large_block[n] = r.block;
    heap->large_size[n] = r.size;
    heap->large_map[n] = r.map_id;
    heap->large_due[n] = now + hak_arena_large_purge_delay();
    heap->large_count = n + 1;
    hak_heap_leave(heap);
    hak_stat_add(large, heap_cache_put, 1);
    // A fifth region, or an oldest one whose delay ran out: the oldest to the shared cache (and
    // any other whose delay ran out).
    if (heap->large_count <= HAK_LARGE_HEAP_CACHE && heap->large_due[0] > now) return;
    regions_evict(heap);
    hak_heap_large_purge_due(heap, now);
}

void hak_heap_large_flush(hak_heap *heap) {
    while (heap->large_count)
        regions_evict(heap);
}

void hak_heap_large_purge_due(hak_heap *heap, uint64_t now) {
    while (heap->large_count && heap->large_due[0] <= now)
        regions_evict(heap);
}
