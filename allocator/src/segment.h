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
void hak_superslab_requeue_abandoned(hak_superslab *ss);
void hak_superslab_fork_prepare(void);
void hak_superslab_fork_parent(void);
void hak_superslab_fork_child(void);

// --- arena.c: the cache of empty superslabs, the purge deadlines of free page slots
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
// floor, a deadline set, the current delay, a deadline that passed acted on.
uint32_t hak_arena_slots_beyond_floor(const hak_superslab *ss);
void hak_arena_arm(hak_superslab *ss, uint64_t due);
uint64_t hak_arena_purge_delay(void);
void hak_arena_purge_aged(hak_superslab *ss, uint64_t now);
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

// --- large.c: large blocks' regions, their table (in shards) and the cache of freed regions
// shared by all threads (a heap's own regions are the heap layer's: heaplarge.c)
void *hak_large_alloc(size_t size, size_t alignment, int zero);
// A freed large region: its address, size and mapping (regions of two mappings never join).
typedef struct {
    uintptr_t block;
    size_t size;
    uint32_t map_id;
} hak_region;
// free(p): p checked, its entry marked freed; returns its region (size 0: the secure build's
// quarantine took it), for hak_large_cache_put or a heap's own cache.
hak_region hak_large_release(void *p);
// A freed region into the shared cache, purged at `due` (0: the policy's delay from now).
void hak_large_cache_put(hak_region region, uint64_t due);
// A freed region of `map_size` bytes kept by a heap, live again for a block of `need` bytes.
void *hak_large_reuse(uintptr_t block, size_t map_size, size_t need, int zero);
size_t hak_large_usable(const char *func, void *p);
// Resized in place or moved; NULL when it is not (then the caller copies), with
// *out_of_memory set when mremap was refused for want of address space.
void *hak_large_realloc(void *p, size_t size, int *out_of_memory);
void hak_large_fork_prepare(void);
void hak_large_fork_parent(void);
void hak_large_fork_child(void);
// The cache's earliest purge deadline and its purge (the arena's scheduler calls both).
uint64_t hak_large_cache_next_due(void);
void hak_large_cache_purge_due(uint64_t now);
size_t hak_large_trim(void);          // malloc_trim: all of them now (bytes given back)
size_t hak_large_release_cache(void); // every cached region unmapped (bytes)

#endif
