// The segment layer: superslabs (superslab.c), the arena that caches them and sets their purge
// deadlines, its and the large cache's (arena.c), large regions (large.c).
#ifndef HAK_SEGMENT_H
#define HAK_SEGMENT_H

#include "os.h"

// --- superslab.c: regions, registry, page slots, abandoned superslabs
void hak_registry_set(uintptr_t chunk, unsigned value);
hak_superslab *hak_superslab_acquire(hak_heap *heap, unsigned page_kind, unsigned affinity);
void hak_superslab_release(hak_superslab *ss);
hak_page *hak_superslab_page_alloc(hak_superslab *ss);
void hak_superslab_page_free(hak_superslab *ss, hak_page *page);
// Gives back the resident free slots (bytes returned); `aged`: all but the young ones (an
// adopter's grace, arena.c), whose grace it ends (a deadline's purge; otherwise all, as at trim
// and under the lean policy).
size_t hak_superslab_purge(hak_superslab *ss, int aged);
void hak_superslab_abandon(hak_superslab *ss);
hak_superslab *hak_superslab_pop_abandoned(unsigned cls, unsigned merged);
// The abandoned list's visitors (page.c: hak_page_reclaim_abandoned): the longest waiting one
// taken off it, the list's length (a hint, read without the lock), and one put back at its tail.
hak_superslab *hak_superslab_take_abandoned(void);
size_t hak_superslab_abandoned_count(void);
uint64_t hak_superslab_abandoned_next_due(void);
void hak_superslab_purge_due_abandoned(uint64_t now);
void hak_superslab_requeue_abandoned(hak_superslab *ss);
void hak_superslab_fork_prepare(void);
void hak_superslab_fork_parent(void);
void hak_superslab_fork_child(void);

// A freed large region: its address, size and mapping (regions of two mappings never join).
// `tail`: set by hak_arena_region_take, the lean policy's ticket for the rest beyond the block
// that takes the region whole (0: none; see schedule_tail_purge).
typedef struct {
    uintptr_t block;
    size_t size;
    uint32_t map_id;
    uint32_t tail;
} hak_region;

// --- arena.c: the cache of empty superslabs, the purge deadlines of free page slots, the cache
// of freed large regions and the span chunks, one purge scheduler for both caches
// Speed-first: how long freed memory the allocator keeps (empty superslabs, free page slots,
// cached large regions) stays resident before it is purged (arena.c, purge.c, large.c).
#define HAK_PURGE_DELAY_NS (10u * 1000u * 1000u)
hak_superslab *hak_arena_superslab_get(void);
void hak_arena_superslab_put(hak_superslab *ss);
void hak_arena_superslab_unowned(hak_superslab *ss);
// An adopter takes it: its resident free slots get a delay of their own (once per free period).
void hak_arena_superslab_adopted(hak_superslab *ss);
unsigned hak_arena_class_affinity(unsigned cls);
// The slot policy, for the heaps' own deadlines (purge.c): the resident free slots beyond the
// floor, a deadline set, a deadline that passed acted on (the delay: HAK_PURGE_DELAY_NS).
uint32_t hak_arena_slots_beyond_floor(const hak_superslab *ss);
void hak_arena_arm(hak_superslab *ss, uint64_t due);
void hak_arena_purge_aged(hak_superslab *ss, uint64_t now);
// Freed large regions (large.c hands them over, its entries gone): a region for a request of
// `need` bytes (taken whole up to twice that, else split: r->size is what the block gets), the
// largest smaller one to grow by mremap, the one right after block b's end taken by b growing
// to `need` in place (returns b's new size, 0: none), a freed one cached or unmapped, whether a
// block was freed (for the reports), one whose range went (secure quarantine).
int hak_arena_region_take(size_t need, size_t alignment, hak_region *r);
int hak_arena_region_take_smaller(size_t need, hak_region *r);
size_t hak_arena_region_take_after(hak_region b, size_t need);
void hak_arena_region_put(hak_region r, uint64_t due);
int hak_arena_region_freed(uintptr_t block);
void hak_arena_region_gone(uintptr_t block);
// A span of `need` bytes cut from the current chunk (speed-first, up to 256 KiB), or NULL.
void *hak_arena_span(size_t need, uint32_t *map_id);
// The live large bytes before a free (the cache's bound follows their recent peak).
void hak_arena_note_live(size_t live);
// The registry marks of the 2 MiB chunks a large mapping touches.
void hak_arena_mark_large(uintptr_t block, size_t size);
// The one purge scheduler of the caches no heap owns (empty superslabs, freed large regions).
uint64_t hak_arena_cache_next_due(void);
void hak_arena_cache_purge_due(uint64_t now);
// How long a freed large region stays resident (in the shared cache or its heap's).
uint64_t hak_arena_large_purge_delay(void);
size_t hak_arena_trim_cache(void);
size_t hak_arena_release_cache(void);
#ifdef HAK_DEBUG
// Test hooks of the debug builds (test_cache_decommit): called by hak_arena_superslab_put just
// before it takes the cache lock; and the cached superslabs left resident with no purge
// deadline, against the policy (0 unless the cache's bookkeeping is wrong).
extern void (*hak_test_superslab_put_hook)(hak_superslab *ss);
size_t hak_arena_cache_resident_undue(void);
#endif
void hak_arena_fork_prepare(void);
void hak_arena_fork_parent(void);
void hak_arena_fork_child(void);

// --- large.c: large blocks, their table (in shards); a heap's own regions are the heap layer's
// (heaplarge.c), the cache of freed regions the arena's (above)
void *hak_large_alloc(size_t size, size_t alignment, int zero);
// free(p): p checked, its entry marked freed; returns its region (size 0: the secure build's
// quarantine took it), for hak_large_cache_put or a heap's own cache.
hak_region hak_large_release(void *p);
// A freed region to the arena's cache (its entry goes), purged at `due` (0: the delay from now).
void hak_large_cache_put(hak_region region, uint64_t due);
// A freed region a heap kept, live again for a block of `need` bytes.
void *hak_large_reuse(uintptr_t block, size_t need, int zero);
size_t hak_large_usable(const char *func, void *p);
// Resized in place or moved; NULL when it is not (then the caller copies), with
// *out_of_memory set when mremap was refused for want of address space.
void *hak_large_realloc(void *p, size_t size, int *out_of_memory);
// For the arena: a new mapping's id; a live block's lean tail purged (bytes).
uint32_t hak_large_new_map_id(void);
size_t hak_large_purge_tail(uintptr_t block, uint32_t ticket);
size_t hak_large_release_cache(void); // the secure build's quarantine unmapped (bytes)
void hak_large_fork_prepare(void);
void hak_large_fork_parent(void);
void hak_large_fork_child(void);

#endif
