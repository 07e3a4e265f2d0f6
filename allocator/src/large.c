// Large blocks (above the mid pool, or aligned beyond what a size class gives): each is its
// own region, sized to need: the request rounded up to OS pages, the block at the start of
// the region (over-aligned blocks are mapped over-size and trimmed, so they start there too).
// A region is a mapping of its own, a span cut from a larger chunk (speed-first, up to 256 KiB:
// arena.c), or a freed region the arena's cache hands out again; either way it is handled alike.
// No header lives in the mapping. Their metadata is an entry in a hash table keyed by the
// block address, split into HAK_LARGE_SHARDS shards by the address's hash, each under a lock
// of its own held for a lookup and a few stores (a malloc, a free, malloc_usable_size, a realloc
// in place, a heap's own region taken or put back: heaplarge.c):
//   - free() and malloc_usable_size() find the entry or report the pointer: an address that
//     is not the start of a live large block is an interior or foreign pointer, and one whose
//     entry is marked freed (a heap keeps its region), or whose range waits in the arena's cache
//     or went lately, was freed before (double free);
//   - the registry byte of every 2 MiB chunk a large mapping touches says HAK_REG_LARGE, so
//     the free fast path (which only follows HAK_REG_SMALL) never reads such memory, and the
//     slow path asks the table only for pointers in chunks that held large blocks. A chunk
//     keeps the mark after its large blocks are gone: a later pointer there is still looked
//     up, and a miss is reported, which is what a foreign pointer deserves.
//   - realloc resizes in place: shrinking unmaps the tail, growing takes the cached region
//     right after the block or asks mremap to extend the mapping where it is and, when the
//     neighbourhood is taken, to move it (page tables move, no byte is copied).
//   - a freed region stays with its thread's heap (heaplarge.c, entry kept, marked freed), or
//     goes to the arena's cache of freed regions (arena.c, "Freed large regions": its entry goes),
//     where the next large block of any thread finds it.
// Locks: a shard's lock guards its part of the table, and no code holds two shards' locks at
// once (fork's prepare aside, which takes them all in order). The arena's region lock is taken
// before a shard's when both are held (the lean policy's tail purge below). Before, one lock
// guarded the table and the cache together, and every large malloc and free took it, so threads
// that freed and allocated large blocks queued on it (measured: docs/notebook/2026-12-03.md,
// "The large lock under two threads, counted"; as threads are added now:
// docs/notebook/2026-12-07-large-locks.md).
#include <errno.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>

#include "segment.h"
#include "options.h"

#define HAK_LARGE_SHARD_BITS 4
#define HAK_LARGE_SHARDS     (1u << HAK_LARGE_SHARD_BITS)
#define HAK_LARGE_SHARD_MIN  64 // entries (2 KiB) a shard's table starts with

typedef struct hak_large {
    uintptr_t block;    // key: 0 = empty slot
    size_t map_size;    // the mapping [block, block + map_size)
    size_t usable;      // what malloc_usable_size says: the request rounded up to OS pages
    uint32_t freed : 1; // freed, its region kept by its thread's heap
    // The lean policy's ticket for the rest of the region beyond this block (arena.c:
    // schedule_tail_purge; 0: none). A ticket names one block, not an address: the schedule
    // still holds it after the block is freed, and the next block to take the region must not
    // lose its rest to it.
    uint32_t tail : 31;
    // Which mapping (kernel VMA) the region lies in: regions of different mappings are never
    // joined, however adjacent their addresses, because mremap refuses (EFAULT) a range that
    // spans two mappings. Before, a request grown from such a joined region found the call
    // failing, unmapped the region and mapped a fresh one, whose pages all faulted in again
    // (bench_bigblock --live 4; measured:
    // docs/notebook/2026-12-07-source-comments.md#largec-regions-of-two-mappings).
    uint32_t map_id;
} hak_large;

typedef struct {
    hak_lock lock;
    hak_large *table;
    size_t capacity;                            // a power of two
    size_t used;                                // entries
} __attribute__((aligned(64))) hak_large_shard; // (a cache line each: no false sharing)

static hak_large_shard shards[HAK_LARGE_SHARDS] = {
    [0 ... HAK_LARGE_SHARDS - 1] = {.lock = HAK_LOCK_INIT(large_table)}};
static _Atomic uint32_t last_map_id;

// The id of a mapping just made (mmap, or an mremap that may have moved or grown a region).
uint32_t hak_large_new_map_id(void) {
    return atomic_fetch_add_explicit(&last_map_id, 1, memory_order_relaxed) + 1;
}

// --- The table

static uint64_t hash_of(uintptr_t block) {
    return (uint64_t)(block >> 12) * 0x9e3779b97f4a7c15ULL;
}

static hak_large_shard *shard_lock(uintptr_t block) {
    hak_large_shard *s = &shards[hash_of(block) >> (64 - HAK_LARGE_SHARD_BITS)];
    hak_lock_acquire(&s->lock);
    return s;
}

static size_t slot_of(const hak_large_shard *s, uintptr_t block) {
    return (size_t)(hash_of(block) >> 20) & (s->capacity - 1);
}

// Under the shard's lock, as every function of the table.
static hak_large *find(hak_large_shard *s, uintptr_t block) {
    if (!s->table) return NULL;
    for (size_t i = slot_of(s, block);; i = (i + 1) & (s->capacity - 1)) {
        if (s->table[i].block == block) return &s->table[i];
        if (s->table[i].block == 0) return NULL;
    }
}

// Grows the table when more than half its slots would be taken. 0 on failure.
static int reserve(hak_large_shard *s) {
    if (s->table && (s->used + 1) * 2 <= s->capacity) return 1;
    size_t capacity = s->capacity ? 2 * s->capacity : HAK_LARGE_SHARD_MIN;
    hak_large *fresh = hak_os_map(capacity * sizeof(hak_large));
    if (fresh == MAP_FAILED) return 0;
    hak_large *old = s->table;
    size_t old_capacity = s->capacity;
    s->table = fresh;
    s->capacity = capacity;
    for (size_t i = 0; i < old_capacity; i++) {
        if (!old[i].block) continue;
        size_t j = slot_of(s, old[i].block);
        while (s->table[j].block)
            j = (j + 1) & (capacity - 1);
        s->table[j] = old[i];
    }
    if (old) hak_os_unmap(old, old_capacity * sizeof(hak_large));
    return 1;
}

static void put(hak_large_shard *s, hak_large entry) {
    size_t i = slot_of(s, entry.block);
    while (s->table[i].block)
        i = (i + 1) & (s->capacity - 1);
    s->table[i] = entry;
    s->used++;
}

// Deletes entry e, moving back the entries after it that its slot would otherwise cut off from
// their home slots (linear probing's deletion: no tombstones, so a table whose regions keep
// coming and going never fills up with them and never needs rebuilding).
static void erase(hak_large_shard *s, hak_large *e) {
    size_t mask = s->capacity - 1, hole = (size_t)(e - s->table);
    for (size_t j = (hole + 1) & mask; s->table[j].block; j = (j + 1) & mask) {
        size_t home = slot_of(s, s->table[j].block);
        // Entry j stays if its home lies cyclically in (hole, j]: its probe never passed the hole.
        if (hole <= j ? (hole < home && home <= j) : (hole < home || home <= j)) continue;
        s->table[hole] = s->table[j];
        hole = j;
    }
    s->table[hole].block = 0;
    s->used--;
}

// Adds an entry (taking its shard's lock). 0 when the table cannot grow (out of memory).
static int insert(hak_large entry) {
    hak_large_shard *s = shard_lock(entry.block);
    int ok = reserve(s);
    if (ok) put(s, entry);
    hak_lock_release(&s->lock);
    return ok;
}

// The entry of a block that realloc took out of the table while mremap moved or grew it: it
// must go back, so when the shard cannot grow (out of memory) it takes a slot beyond the load
// bound, while one stays empty (a lookup ends at an empty slot). 0 when even that fails.
static int insert_back(hak_large entry) {
    hak_large_shard *s = shard_lock(entry.block);
    int ok = reserve(s) || (s->table && s->used + 2 <= s->capacity);
    if (ok) put(s, entry);
    hak_lock_release(&s->lock);
    return ok;
}

// Deletes block's entry (taking its shard's lock).
static void entry_remove(uintptr_t block) {
    hak_large_shard *s = shard_lock(block);
    hak_large *e = find(s, block);
    if (e) erase(s, e);
    hak_lock_release(&s->lock);
}

// A new region (a mapping or a span) of `need` bytes in the large stats.
static void count_new_region(size_t need) {
    hak_stat_add(large, mapped, 1);
    hak_stat_add(large, alloc, 1);
    hak_stat_add(large, live_kb, need / 1024);
}

#ifdef HAK_SECURE
// The secure build's large blocks: no cache and no spans. Each block is a mapping of its own
// between two guard pages (PROT_NONE), so an overflow or underflow off its ends faults. A freed
// block's region, guards included, is replaced by a fresh PROT_NONE reservation (its pages
// dropped, its addresses kept) in a quarantine of the last HAK_QUARANTINE_COUNT freed, so a use
// after free faults, a read after free sees nothing, and the next allocations get other
// addresses; the oldest is unmapped when a new one enters. A table entry covers the block and
// its trailing guard; the leading guard is the page before it. (The quarantine's lock counts
// with the freed regions' cache in LOCK_STATS: it is this build's cache of freed regions.)
#define HAK_GUARD            HAK_OS_PAGE_SIZE
#define HAK_QUARANTINE_COUNT 64
static hak_lock quarantine_lock = HAK_LOCK_INIT(large_cache);
static uintptr_t quarantine_base[HAK_QUARANTINE_COUNT];
static size_t quarantine_size[HAK_QUARANTINE_COUNT];
static unsigned quarantine_next;

static int quarantined(uintptr_t block) {
    int found = 0;
    hak_lock_acquire(&quarantine_lock);
    for (unsigned i = 0; i < HAK_QUARANTINE_COUNT; i++)
        found |= quarantine_size[i] && quarantine_base[i] + HAK_GUARD == block;
    hak_lock_release(&quarantine_lock);
    return found;
}

static void *secure_alloc(size_t need, size_t alignment) {
    size_t extra = alignment > HAK_GUARD ? alignment : 0, total = HAK_GUARD + need + HAK_GUARD;
    if (total < need || total + extra < total) return NULL;
    char *base = hak_os_map(total + extra);
    if (base == MAP_FAILED) return NULL;
    hak_stat_mapped((long)(total + extra));
    uintptr_t lowest = (uintptr_t)base + HAK_GUARD;
    char *block = (char *)(extra ? (lowest + extra - 1) & ~(uintptr_t)(extra - 1) : lowest);
    if (block - HAK_GUARD > base) { // over-aligned: the surplus before the leading guard goes
        hak_os_unmap(base, (size_t)(block - HAK_GUARD - base));
        hak_stat_mapped(-(long)(block - HAK_GUARD - base));
    }
    char *end = base + total + extra, *guard_end = block + need + HAK_GUARD;
    if (end > guard_end) {
        hak_os_unmap(guard_end, (size_t)(end - guard_end));
        hak_stat_mapped(-(long)(end - guard_end));
    }
    hak_os_protect(block - HAK_GUARD, HAK_GUARD, 0);
    hak_os_protect(block + need, HAK_GUARD, 0);
    hak_arena_mark_large((uintptr_t)block, need);
    if (!insert((hak_large){(uintptr_t)block, need + HAK_GUARD, need,
                            .map_id = hak_large_new_map_id()})) {
        hak_os_unmap(block - HAK_GUARD, need + 2 * HAK_GUARD);
        hak_stat_mapped(-(long)(need + 2 * HAK_GUARD));
        return NULL;
    }
    count_new_region(need);
    return block;
}

// A freed block's region (its entry deleted already) into the quarantine.
static void secure_free(uintptr_t block, size_t map_size) {
    uintptr_t base = block - HAK_GUARD;
    size_t size = map_size + HAK_GUARD;
    hak_arena_region_gone(block);
    void *fresh = hak_os_reserve((void *)base, size);
    if (fresh == MAP_FAILED) { // (no memory for the reservation: unmapped at once instead)
        hak_os_unmap((void *)base, size);
        hak_stat_mapped(-(long)size);
        return;
    }
    hak_lock_acquire(&quarantine_lock);
    unsigned i = quarantine_next++ % HAK_QUARANTINE_COUNT;
    uintptr_t old_base = quarantine_base[i];
    size_t old_size = quarantine_size[i];
    quarantine_base[i] = base;
    quarantine_size[i] = size;
    hak_lock_release(&quarantine_lock);
    if (old_size) {
        hak_os_unmap((void *)old_base, old_size);
        hak_stat_mapped(-(long)old_size);
    }
}

// Out of address space: the quarantine goes (hak_large_release_cache).
static size_t quarantine_release(void) {
    size_t released = 0;
    hak_lock_acquire(&quarantine_lock);
    for (unsigned i = 0; i < HAK_QUARANTINE_COUNT; i++) {
        if (!quarantine_size[i]) continue;
        hak_os_unmap((void *)quarantine_base[i], quarantine_size[i]);
        hak_stat_mapped(-(long)quarantine_size[i]);
        released += quarantine_size[i];
        quarantine_size[i] = 0;
    }
    hak_lock_release(&quarantine_lock);
    return released;
}
#endif

// A block of `need` bytes handed out in a region used before: counted, and for calloc zeroed
// over the whole usable size, which malloc_usable_size reports and the program may use (the
// region's last user wrote it up to its own usable size).
static void *reused(uintptr_t block, size_t need, int zero) {
    hak_stat_add(large, alloc, 1);
    hak_stat_add(large, live_kb, need / 1024);
    if (zero) memset((void *)block, 0, need);
    return (void *)block;
}

// A block in region r from the arena's cache: its entry added.
static void *new_block(hak_region r, size_t need, int zero) {
    if (!insert((hak_large){r.block, r.size, need, .tail = r.tail, .map_id = r.map_id})) {
        hak_arena_region_put(r, 0); // (out of memory for the table: the region stays cached)
        return NULL;
    }
    return reused(r.block, need, zero);
}

// A large block from the arena's cache, a span or a mapping of its own (the heap's own regions,
// tried first, are the heap layer's: heaplarge.c).
void *hak_large_alloc(size_t size, size_t alignment, int zero) {
    if (size > HAK_ADDRESS_LIMIT) return NULL;
    size_t need = hak_round_to_os_pages(size ? size : 1);
#ifdef HAK_SECURE
    (void)zero; // every block is a fresh mapping
    return secure_alloc(need, alignment);
#endif
    hak_region r;
    if (hak_arena_region_take(need, alignment, &r)) return new_block(r, need, zero);
    uint32_t map_id;
    char *span = alignment <= HAK_OS_PAGE_SIZE ? hak_arena_span(need, &map_id) : NULL;
    if (span) {
        if (!insert((hak_large){(uintptr_t)span, need, need, .map_id = map_id}))
            return NULL; // a span without its entry stays unused in its chunk
        count_new_region(need);
        return span; // fresh (a chunk is never reused but through the cache): already zero
    }
    int smaller = alignment <= HAK_OS_PAGE_SIZE && hak_arena_region_take_smaller(need, &r);
    char *block;
    size_t map_size;
    if (smaller) {
        int saved = errno;
        block = hak_os_remap((void *)r.block, r.size, need);
        errno = saved;
        hak_stat_add(large, mremap, 1);
        if (block == MAP_FAILED) { // out of address space: give it back, try a fresh mapping
            hak_os_unmap((void *)r.block, r.size);
            hak_stat_mapped(-(long)r.size);
            return hak_large_alloc(size, alignment, zero);
        }
        hak_stat_add(large, cache_hit, 1);
        hak_stat_mapped((long)(need - r.size));
        map_size = need;
        if (zero) memset(block, 0, r.size); // (the grown part is fresh)
    } else if (alignment <= HAK_OS_PAGE_SIZE) {
        block = hak_os_map(need);
        if (block == MAP_FAILED) return NULL;
        map_size = need;
        hak_stat_mapped((long)need);
    } else {
        char *base;
        if (!hak_os_map_aligned(need, alignment, &base, &map_size)) return NULL;
        block = base;
    }
    hak_arena_mark_large((uintptr_t)block, map_size);
    if (!insert((hak_large){(uintptr_t)block, map_size, need, .map_id = hak_large_new_map_id()})) {
        hak_os_unmap(block, map_size);
        hak_stat_mapped(-(long)map_size);
        return NULL;
    }
    if (smaller) {
        hak_stat_add(large, alloc, 1);
        hak_stat_add(large, live_kb, need / 1024);
    } else {
        count_new_region(need); // fresh anonymous memory is already zero
    }
    return block;
}

// p is not a live large block: reported for `func` (p's shard unlocked already). Freed before
// if its entry says so (`freed`), if its range waits in the arena's cache or went lately, or if
// it is quarantined.
__attribute__((noreturn)) static void report(const char *func, void *p, int freed) {
    freed = freed || hak_arena_region_freed((uintptr_t)p);
#ifdef HAK_SECURE
    freed = freed || quarantined((uintptr_t)p);
#endif
    hak_fatal_pointer(func, freed ? "double free" : "invalid pointer", p);
}

// The live entry of p, under its shard's lock (held); otherwise reports p for `func`.
static hak_large *live_entry(const char *func, hak_large_shard *s, void *p) {
    hak_large *e = find(s, (uintptr_t)p);
    if (e && !e->freed) return e;
    hak_lock_release(&s->lock);
    report(func, p, e != NULL);
}

// free(p) of a large block: p checked (reported unless it is a live large block), its entry
// marked freed and counted; returns its region for the caller to keep or cache (size 0: the
// secure build's quarantine took it).
hak_region hak_large_release(void *p) {
    hak_large_shard *s = shard_lock((uintptr_t)p);
    hak_large *e = live_entry("free", s, p);
    size_t usable = e->usable;
    hak_region r = {(uintptr_t)p, e->map_size, e->map_id, 0};
#ifdef HAK_SECURE
    erase(s, e);
#else
    e->freed = 1;
    e->usable = 0;
#endif
    hak_lock_release(&s->lock);
    // (the large bytes live just before this free, for the cache's bound)
    hak_arena_note_live(
        (size_t)atomic_load_explicit(&hak_stats_large.live_kb, memory_order_relaxed) * 1024);
    hak_stat_add(large, free, 1);
    hak_stat_sub(large, live_kb, usable / 1024);
#ifdef HAK_SECURE
    secure_free(r.block, r.size);
    r.size = 0;
#endif
    return r;
}

// A freed region of the arena's cache now (its entry goes), purged at `due` (0: the policy's
// delay from now), or unmapped when the cache has no room for it.
void hak_large_cache_put(hak_region r, uint64_t due) {
    entry_remove(r.block);
    hak_arena_region_put(r, due);
}

// A region a heap kept (freed, its entry kept) taken for a block of `need` bytes.
void *hak_large_reuse(uintptr_t block, size_t need, int zero) {
    hak_large_shard *s = shard_lock(block);
    hak_large *e = find(s, block);
    e->freed = 0;
    e->tail = 0;
    e->usable = need;
    hak_lock_release(&s->lock);
    return reused(block, need, zero);
}

// The lean policy's tail `ticket` of `block` (arena.c: schedule_tail_purge), due: what lies
// beyond its usable size now, while the block it was given to is live, is purged (it may have
// been resized since; once freed, its region waits with a deadline of its own, and a later block
// in the region has a ticket of its own or none). Under the arena's region lock; the block's
// shard is locked so it is not freed and reused meanwhile. Returns the bytes.
size_t hak_large_purge_tail(uintptr_t block, uint32_t ticket) {
    size_t dropped = 0;
    hak_large_shard *s = shard_lock(block);
    hak_large *e = find(s, block);
    if (e && !e->freed && e->tail == ticket && e->map_size > e->usable) {
        hak_os_decommit((void *)(e->block + e->usable), e->map_size - e->usable);
        dropped = e->map_size - e->usable;
    }
    hak_lock_release(&s->lock);
    return dropped;
}

size_t hak_large_usable(const char *func, void *p) {
    hak_large_shard *s = shard_lock((uintptr_t)p);
    size_t usable = live_entry(func, s, p)->usable;
    hak_lock_release(&s->lock);
    return usable;
}

// Resizes large block p to `size` (above the mid pool) without copying: returns the block (p
// or where mremap moved it), or NULL when the caller must allocate, copy and free.
void *hak_large_realloc(void *p, size_t size, int *out_of_memory) {
    if (size > HAK_ADDRESS_LIMIT) return NULL; // (rounding it up would wrap around)
    size_t need = hak_round_to_os_pages(size);
    hak_large_shard *s = shard_lock((uintptr_t)p);
    hak_large *e = live_entry("realloc", s, p);
    size_t map_size = e->map_size, usable = e->usable;
    uint32_t map_id = e->map_id, tail = e->tail;
#ifdef HAK_SECURE
    // Between its guards a block neither grows nor gives back its tail: within its usable
    // size it stays, anything larger is copied to a new block.
    hak_lock_release(&s->lock);
    (void)map_size, (void)map_id, (void)tail;
    return need <= usable ? p : NULL;
#endif
    if (need <= map_size) {
        // Shrink, or regrow within the mapping (a cached region serves requests down to half
        // its size): a shrink gives back the tail beyond the block when it is at least a
        // quarter of the mapping; a regrow keeps it (a vector grown 1.5x at a time would
        // otherwise unmap, remap and fault in the same tail at each step).
        int trim = need < usable && map_size - need >= map_size / 4;
        e->usable = need;
        if (trim) e->map_size = need;
        hak_lock_release(&s->lock);
        hak_stat_sub(large, live_kb, usable / 1024);
        hak_stat_add(large, live_kb, need / 1024);
        hak_stat_add(large, realloc_in_place, 1);
        if (trim) {
            hak_os_unmap((char *)p + need, map_size - need);
            hak_stat_mapped(-(long)(map_size - need));
        }
        return p;
    }
    // (Only this thread may free or resize p meanwhile: its entry stays as it is.)
    hak_lock_release(&s->lock);
    size_t grown =
        hak_arena_region_take_after((hak_region){(uintptr_t)p, map_size, map_id, 0}, need);
    if (grown) { // the cached region right after it, in place
        s = shard_lock((uintptr_t)p);
        e = find(s, (uintptr_t)p);
        e->map_size = grown;
        e->usable = need;
        hak_lock_release(&s->lock);
        hak_stat_sub(large, live_kb, usable / 1024);
        hak_stat_add(large, live_kb, need / 1024);
        hak_stat_add(large, realloc_in_place, 1);
        return p;
    }
    // The entry leaves the table before the call: if mremap moves the block, its old address
    // is free for anyone's next mapping at once, and that mapping's entry must not meet this one.
    entry_remove((uintptr_t)p);
    int saved = errno;
    void *q = hak_os_remap(p, map_size, need);
    if (q == MAP_FAILED && errno == ENOMEM) *out_of_memory = 1; // out of address space
    errno = saved;
    hak_stat_add(large, mremap, 1);
    int moved = q != MAP_FAILED;
    if (moved) {
        hak_arena_mark_large((uintptr_t)q, need);
        hak_stat_mapped((long)(need - map_size));
        hak_stat_sub(large, live_kb, usable / 1024);
        hak_stat_add(large, live_kb, need / 1024);
        map_size = usable = need;
    } else {
        q = p; // p stays as it was, still mapped: its entry goes back
    }
    // (A moved block's old range is gone, and with it any tail it had scheduled.)
    hak_large entry = {(uintptr_t)q, map_size, usable, .tail = moved ? 0 : tail,
                       .map_id = moved ? hak_large_new_map_id() : map_id};
    if (!insert_back(entry)) hak_fatal_pointer("realloc", "out of metadata memory for", q);
    if (!moved) return NULL;
    if (q == p) hak_stat_add(large, realloc_in_place, 1);
    return q;
}

// Out of address space (hak_release_cached): the secure build's quarantine unmapped (the
// arena's cache goes in hak_arena_release_cache). Returns the bytes.
size_t hak_large_release_cache(void) {
#ifdef HAK_SECURE
    return quarantine_release();
#else
    return 0;
#endif
}

// fork: every shard's lock, in order (after the arena's region lock: init.c).
void hak_large_fork_prepare(void) {
#ifdef HAK_SECURE
    hak_lock_acquire(&quarantine_lock);
#endif
    for (unsigned i = 0; i < HAK_LARGE_SHARDS; i++)
        hak_lock_acquire(&shards[i].lock);
}
void hak_large_fork_parent(void) {
    for (unsigned i = HAK_LARGE_SHARDS; i-- > 0;)
        hak_lock_release(&shards[i].lock);
#ifdef HAK_SECURE
    hak_lock_release(&quarantine_lock);
#endif
}
void hak_large_fork_child(void) {
    for (unsigned i = 0; i < HAK_LARGE_SHARDS; i++)
        hak_lock_reset(&shards[i].lock);
#ifdef HAK_SECURE
    hak_lock_reset(&quarantine_lock);
#endif
}
