// Large blocks (above the mid pool, or aligned beyond what a size class gives): each is its
// own region, sized to need: the request rounded up to OS pages, the block at the start of
// the region (over-aligned blocks are mapped over-size and trimmed, so they start there too).
// A region is a mapping of its own, or under the speed-first policy, up to 256 KiB, a span cut
// from a larger chunk (HAK_LARGE_SPAN_MAX below); either way it is handled alike.
// No header lives in the mapping. Their metadata is an entry in a hash table keyed by the
// block address (under one lock, held briefly: see "the heap's large cache" below):
//   - free() and malloc_usable_size() find the entry or report the pointer: an address that
//     is not the start of a live large block is an interior or foreign pointer, and one whose
//     entry is in the cache was freed before (double free);
//   - the registry byte of every 2 MiB chunk a large mapping touches says HAK_REG_LARGE, so
//     the free fast path (which only follows HAK_REG_SMALL) never reads such memory, and the
//     slow path asks the table only for pointers in chunks that held large blocks. A chunk
//     keeps the mark after its large blocks are gone: a later pointer there is still looked
//     up, and a miss is reported, which is what a foreign pointer deserves.
//   - realloc resizes in place: shrinking unmaps the tail, growing asks mremap to extend the
//     mapping where it is and, when the neighbourhood is taken, to move it (page tables move,
//     no byte is copied).
//   - freed regions go to a cache: up to HAK_LARGE_CACHE_COUNT regions and as many bytes as
//     the program recently had live (HAK_LARGE_CACHE_BYTES at least, see below), each purged
//     once it has waited its policy's delay (1 s speed-first, 100 ms lean): still mapped, no longer
//     resident. A request takes the smallest cached region that holds it: whole when it is at
//     most twice the request (the rest stays mapped behind the block, so a realloc that grows
//     it back needs no syscall and no fault; the lean policy purges that rest when the
//     region's delay has passed), else split, its tail cached; when none holds it, the largest
//     smaller one grown by mremap (its pages move warm). A freed region joins the cached region
//     after it (resident with resident). The lean policy cached 512 KiB before issue #30 and
//     unmapped it at every thread exit, so a program whose threads come and go
//     (bench_thread_churn under BALANCED) mapped its large regions anew every round; with this
//     cache, purged after 10 ms and at every thread exit, it mapped few, but it still faulted
//     in every big block anew (see HAK_LARGE_PURGE_DELAY_NS).
//     Without any cache a program that frees and allocates blocks of 32-64 KiB in a loop pays
//     an mmap, a munmap and 8-16 page faults for every one of them (bench_churn under
//     BALANCED took many times glibc's page faults so), and its threads' page faults wait for
//     each other's mmap and munmap on the kernel's lock of the address space. 64 regions and
//     8 MiB, less than its live blocks at their peak, still left bench_churn (4 threads, ~200
//     such blocks live) with many fresh mappings a run and its threads sleeping on that lock
//     far more often than under mimalloc; 256 and 32 MiB leave only its peak of live blocks
//     to be mapped fresh. Regions of any size are cached within the
//     byte limit: a vector grown by realloc is freed at its largest, and the next one starts at
//     half that size and grows back (bench_churn's threads' pointer arrays, 800 KiB -> 1.6 MiB:
//     with 1 MiB as the largest region cached each was a fresh mapping whose pages faulted
//     in), and a loop over blocks of several MiB reuses them (issue #30). (Measured:
//     docs/notebook/2026-12-07-source-comments.md#largec-the-caches-size.)
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>

#include "segment.h"
#include "options.h"

#define HAK_LARGE_CACHE_COUNT     256
#define HAK_LARGE_CACHE_BYTES     ((size_t)32 << 20) // at least this, see below
#define HAK_LARGE_CACHE_BYTES_MAX ((size_t)1 << 30)  // and at most this
// The cache may hold twice as much as the program recently had live in large blocks (between
// the two bounds above): a program that allocates, touches and frees blocks of several MiB in a
// loop gets the same mappings back warm instead of mapping and faulting in every page again each
// round (glibc keeps such blocks in its heap once it has freed one: its mmap threshold rises to
// the freed size, up to 32 MiB). "Recently": the highest live total seen at a free, halved every
// HAK_LARGE_PEAK_HALF_LIFE_NS. Twice: with a few big blocks live at once and freed out of order
// (bench_bigblock --live 4), a cache of once the live peak was full as often as not when a block
// was freed, which was then unmapped while the next request found no cached region to hold it
// and faulted in a fresh one; with twice, far fewer page faults, near tcmalloc's (whose page
// heap keeps everything), at the same peak RSS (measured:
// docs/notebook/2026-11-26-allocator-measurements.md, "Large blocks"). What it holds beyond the
// live set is resident for the purge delay only.
#define HAK_LARGE_PEAK_HALF_LIFE_NS ((uint64_t)1000 * 1000 * 1000)
#define HAK_LARGE_TABLE_MIN         1024 // entries (32 KiB)
// Regions of up to HAK_LARGE_SPAN_MAX (page-aligned requests) are cut from chunks mapped
// HAK_LARGE_CHUNK at a time, in address order, instead of one mmap each: a mapping takes the
// kernel's address-space lock for writing, and every other thread's page fault, mmap and
// munmap waits for it. A span is then a region like any other (its own table entry, cached,
// purged, unmapped, grown by mremap, which moves it out of its chunk); the chunk is never
// freed as a whole. What a chunk cannot fit at its end is unmapped when the next is mapped.
// Speed-first only: under the lean policy bench_churn's peak RSS under BALANCED rose with
// them (measured when its cache kept 512 KiB, so freed spans were unmapped one by one:
// docs/notebook/2026-11-26-allocator-measurements.md, "Spans from chunks").
#define HAK_LARGE_SPAN_MAX ((size_t)256 << 10)
#define HAK_LARGE_CHUNK    ((size_t)4 << 20)
// A cached region is purged after 100 ms, not the superslabs' 10 ms: a cache of 256 regions
// reused best-fit keeps some waiting longer than 10 ms between uses, and bench_churn then
// purged and faulted them back in, where with 100 ms it faults no more than with no purge at
// all. The lean policy waits as long since issue #30; it purged them after 10 ms and at every
// thread exit before, and in a program whose threads come and go a round at a time
// (bench_thread_churn: 8 threads a round, each round longer than 10 ms) the next round's
// threads faulted in again every big block the last round's had freed. Without the exit purge,
// shorter delays still did so, the more when other jobs slowed the run (the delay is
// wall-clock time, and a slowed round needs more of it). Speed-first waits 1 s:
// mimalloc-bench's malloc-large (20 buffers of 5-25 MiB, one replaced every few ms) leaves
// some cached regions unused for longer than 100 ms, which were purged and faulted in again
// when a request took them, at the same peak RSS either way (the peak is the live blocks and
// the one being replaced, not what waits in the cache). bench_large pays for it with a higher
// peak (its cached regions are still resident when the peak comes) in less time. The lean
// policy keeps 100 ms. (Measured:
// docs/notebook/2026-12-07-source-comments.md#largec-purge-delay.)
#define HAK_LARGE_PURGE_DELAY_LEAN_NS (10 * (uint64_t)HAK_PURGE_DELAY_NS)
#define HAK_LARGE_PURGE_DELAY_NS      (100 * (uint64_t)HAK_PURGE_DELAY_NS)

typedef struct hak_large {
    uintptr_t block; // key: 0 = empty slot, HAK_LARGE_TOMBSTONE = deleted
    size_t map_size; // the mapping [block, block + map_size)
    size_t usable;   // what malloc_usable_size says: the request rounded up to OS pages
    uint32_t cached; // freed, kept in the cache
    // Which mapping (kernel VMA) the region lies in: regions of different mappings are never
    // joined, however adjacent their addresses, because mremap refuses (EFAULT) a range that
    // spans two mappings. Before, a request grown from such a joined region found the call
    // failing, unmapped the region and mapped a fresh one, whose pages all faulted in again
    // (bench_bigblock --live 4; measured:
    // docs/notebook/2026-12-07-source-comments.md#largec-regions-of-two-mappings).
    uint32_t map_id;
} hak_large;

#define HAK_LARGE_TOMBSTONE ((uintptr_t)1)

static hak_lock large_lock = HAK_LOCK_INIT(large);
static hak_large *table;
static size_t table_capacity; // a power of two
static size_t table_used;     // live, cached and deleted slots
static uintptr_t cache[HAK_LARGE_CACHE_COUNT];
static size_t cache_size[HAK_LARGE_CACHE_COUNT];  // map_size of cache[i] (scanned without lookups)
static uint64_t cache_due[HAK_LARGE_CACHE_COUNT]; // when cache[i] is purged (0: purged already)
static _Atomic uint64_t cache_next_due;           // the earliest cache_due or tail_due (0: none)
// Lean policy: live blocks that took a cached region whole, whose rest beyond the block (written
// by the region's last user, unused now) is purged at tail_due[i], when it would have been had
// the region stayed in the cache. It was purged at once before issue #30: a region reused for a
// smaller block and then for a larger one faulted it in again.
static uintptr_t tail_block[HAK_LARGE_CACHE_COUNT];
static uint64_t tail_due[HAK_LARGE_CACHE_COUNT];
static unsigned tail_count;
// The last blocks unmapped at free: a miss in the table that names one of them is reported as
// the double free it most likely is (a region the cache had no room for has no entry left to
// recognise it by).
#define HAK_LARGE_RECENT 16
static uintptr_t recently_unmapped[HAK_LARGE_RECENT];
static unsigned recent_next;
static unsigned cache_count;
static size_t cache_bytes;
static char *chunk_next; // the untaken rest of the current chunk
static size_t chunk_left;
static size_t live_peak;       // speed-first: recent highest live large bytes (see above)
static uint64_t peak_halve_ns; // when live_peak is halved next

static size_t slot_of(uintptr_t block) {
    return (size_t)((block >> 12) * 0x9e3779b97f4a7c15ULL >> 20) & (table_capacity - 1);
}

static hak_large *table_find(uintptr_t block) {
    if (!table) return NULL;
    for (size_t i = slot_of(block);; i = (i + 1) & (table_capacity - 1)) {
        if (table[i].block == block) return &table[i];
        if (table[i].block == 0) return NULL;
    }
}

// Grows (or cleans out tombstones) when more than half the slots are taken. 0 on failure.
static int table_reserve(void) {
    if (table && (table_used + 1) * 2 <= table_capacity) return 1;
    size_t live = 0;
    for (size_t i = 0; i < table_capacity; i++)
        live += table[i].block > HAK_LARGE_TOMBSTONE;
    size_t capacity = table_capacity ? table_capacity : HAK_LARGE_TABLE_MIN;
    while ((live + 1) * 4 > capacity)
        capacity *= 2;
    hak_large *fresh = hak_os_map(capacity * sizeof(hak_large));
    if (fresh == MAP_FAILED) return 0;
    hak_large *old = table;
    size_t old_capacity = table_capacity;
    table = fresh;
    table_capacity = capacity;
    table_used = 0;
    for (size_t i = 0; i < old_capacity; i++) {
        if (old[i].block <= HAK_LARGE_TOMBSTONE) continue;
        size_t j = slot_of(old[i].block);
        while (table[j].block)
            j = (j + 1) & (capacity - 1);
        table[j] = old[i];
        table_used++;
    }
    if (old) hak_os_unmap(old, old_capacity * sizeof(hak_large));
    return 1;
}

static void table_put(uintptr_t block, size_t map_size, size_t usable, uint32_t map_id) {
    size_t i = slot_of(block);
    while (table[i].block > HAK_LARGE_TOMBSTONE)
        i = (i + 1) & (table_capacity - 1);
    if (table[i].block == 0) table_used++;
    table[i] = (hak_large){block, map_size, usable, 0, map_id};
}

static int table_insert(uintptr_t block, size_t map_size, size_t usable, uint32_t map_id) {
    if (!table_reserve()) return 0;
    table_put(block, map_size, usable, map_id);
    return 1;
}

// The entry of a block that realloc took out of the table while mremap moved or grew it: it
// must go back, so when the table cannot grow (out of memory) it takes a slot beyond the
// table's load bound, while one stays empty (a lookup ends at an empty slot). realloc reserved
// room before it took the entry out, so only concurrent inserts can have used that up.
static int table_insert_back(uintptr_t block, size_t map_size, size_t usable, uint32_t map_id) {
    if (!table_reserve() && table_used + 2 > table_capacity) return 0;
    table_put(block, map_size, usable, map_id);
    return 1;
}

static uint32_t last_map_id; // under the lock

// The id of a mapping just made (mmap, or an mremap that may have moved or grown a region).
static uint32_t new_map_id(void) {
    return ++last_map_id;
}

// Only bytes that change are written: chunks shared by several large blocks keep their mark
// while others are mapped next to them (the free fast path reads the byte without atomics).
static void mark_registry(uintptr_t block, size_t size) {
    for (uintptr_t c = block >> HAK_SS_SHIFT; c <= (block + size - 1) >> HAK_SS_SHIFT; c++)
        if (hak_registry_get(c << HAK_SS_SHIFT) != HAK_REG_LARGE)
            hak_registry_set(c << HAK_SS_SHIFT, HAK_REG_LARGE);
}

// A new region (a mapping or a span) of `need` bytes in the large stats.
static void count_new_region(size_t need) {
    hak_stat_add(large, mapped, 1);
    hak_stat_add(large, alloc, 1);
    hak_stat_add(large, live_kb, need / 1024);
}

static uint32_t chunk_map_id; // the current chunk's (its spans share it)

// The next `need` bytes of the current chunk, mapping a new one when they do not fit; under
// the lock (a chunk is mapped once per HAK_LARGE_CHUNK of spans). NULL when mmap fails.
static char *span_take(size_t need) {
    if (chunk_left < need) {
        char *chunk = hak_os_map(HAK_LARGE_CHUNK);
        if (chunk == MAP_FAILED) return NULL;
        hak_stat_mapped((long)HAK_LARGE_CHUNK);
        if (chunk_left) {
            hak_os_unmap(chunk_next, chunk_left);
            hak_stat_mapped(-(long)chunk_left);
        }
        mark_registry((uintptr_t)chunk, HAK_LARGE_CHUNK);
        chunk_map_id = new_map_id();
        chunk_next = chunk;
        chunk_left = HAK_LARGE_CHUNK;
    }
    char *span = chunk_next;
    chunk_next += need;
    chunk_left -= need;
    return span;
}

// Puts the region of entry e into the cache, to be purged at `due` (0: never, or purged
// already); under the lock, with a free cache slot.
static void cache_add(hak_large *e, uint64_t due) {
    e->cached = 1;
    e->usable = 0;
    cache[cache_count] = e->block;
    cache_due[cache_count] = due;
    cache_size[cache_count++] = e->map_size;
    cache_bytes += e->map_size;
    uint64_t next = atomic_load_explicit(&cache_next_due, memory_order_relaxed);
    if (due && (!next || due < next))
        atomic_store_explicit(&cache_next_due, due, memory_order_relaxed);
}

// Takes cache slot i's region out of the cache; under the lock.
static hak_large *cache_remove(unsigned i) {
    hak_large *e = table_find(cache[i]);
    cache_count--;
    cache[i] = cache[cache_count];
    cache_size[i] = cache_size[cache_count];
    cache_due[i] = cache_due[cache_count];
    cache_bytes -= e->map_size;
    e->cached = 0;
    return e;
}

// Takes the smallest cached region of at least `need` bytes that fits (see below) and is
// aligned enough; under the lock. *due_out: when it was to be purged (0: purged already).
static hak_large *cache_take(size_t need, size_t alignment, uint64_t *due_out) {
    // A region up to twice the request is taken whole (the rest stays mapped behind the block,
    // so a realloc that grows it back is served in place; the lean policy purges the rest once
    // the region's delay has passed: schedule_tail_purge), a larger one is split and its tail
    // stays cached. (Splitting every larger region under the lean policy, so that the rest
    // stayed cached, filled the cache with fragments: bench_thread_churn under BALANCED then
    // found no room in the cache for some of its frees and no cached region for some of its
    // requests; measured: docs/notebook/2026-12-07-source-comments.md#largec-region-splitting.)
    // Among the regions it would take whole, a resident one is preferred to a purged one: its
    // pages need no fault (the cache, up to twice the recent live peak, may well hold a smaller
    // purged region too). A larger resident region is not cut up for a request that a purged
    // one holds whole.
    unsigned best = HAK_LARGE_CACHE_COUNT;
    size_t best_size = 0;
    int best_warm = 0;
    for (unsigned i = 0; i < cache_count; i++) {
        size_t size = cache_size[i];
        if (size < need) continue;
        if (cache[i] & (alignment - 1)) continue;
        int warm = cache_due[i] && size / 2 <= need;
        if (best == HAK_LARGE_CACHE_COUNT || warm > best_warm ||
            (warm == best_warm && size < best_size))
            best = i, best_size = size, best_warm = warm;
    }
    if (best == HAK_LARGE_CACHE_COUNT) return NULL;
    uint64_t due = *due_out = cache_due[best];
    hak_large *e = cache_remove(best);
    if (best_size / 2 > need) {
        // The tail: a region of its own, as cached (and as due for purging) as it was.
        uintptr_t block = e->block, tail = block + need;
        if (table_insert(tail, best_size - need, 0, e->map_id)) {
            e = table_find(block); // (inserting may have rebuilt the table)
            e->map_size = need;
            cache_add(table_find(tail), due);
        } else {
            e = table_find(block);
        }
    }
    return e;
}

// When no cached region fits a request of more than a span: the largest cached
// region smaller than it (at least a quarter of it), taken out of the cache with its table
// entry, to be grown by mremap: the pages it has stay resident and move with it, only the rest
// is faulted in (a loop over blocks of 1-32 MiB otherwise faults in every block whole). Returns
// its address and size, or 0.
static uintptr_t cache_take_smaller(size_t need, size_t *size) {
    unsigned best = HAK_LARGE_CACHE_COUNT;
    for (unsigned i = 0; i < cache_count; i++)
        if (cache_size[i] < need && cache_size[i] >= need / 4 &&
            (best == HAK_LARGE_CACHE_COUNT || cache_size[i] > cache_size[best]))
            best = i;
    if (best == HAK_LARGE_CACHE_COUNT) return 0;
    hak_large *e = cache_remove(best);
    uintptr_t block = e->block;
    *size = e->map_size;
    e->block = HAK_LARGE_TOMBSTONE; // it may move: a new entry when it has (as in realloc)
    return block;
}

// Purges cache slot i's region (it stays mapped and cached, and reads as zero when reused).
static void purge_slot(unsigned i) {
    hak_os_decommit((void *)cache[i], cache_size[i]);
    cache_due[i] = 0;
}

// Purges the cached regions whose delay passed (madvise: they stay mapped and cached, and read
// as zero when reused) and the lean policy's tails that are due. Under the lock, so no thread takes
// a region while its pages are being dropped; it runs only when a deadline has passed (the clock is
// read only then), a few times a second at most in a program that keeps freeing large blocks.
// purge_until(now) does it for the deadlines up to `now` (malloc_trim: all of them) and
// returns the bytes.
static size_t purge_until(uint64_t now) {
    uint64_t next = 0;
    size_t dropped = 0;
    for (unsigned i = 0; i < cache_count; i++) {
        if (!cache_due[i]) continue;
        if (cache_due[i] <= now) {
            dropped += cache_size[i];
            purge_slot(i);
        } else if (!next || cache_due[i] < next) {
            next = cache_due[i];
        }
    }
    for (unsigned i = 0; i < tail_count;) {
        if (tail_due[i] > now) {
            if (!next || tail_due[i] < next) next = tail_due[i];
            i++;
            continue;
        }
        // The block may have been freed or resized since: what lies beyond its usable size now,
        // while it is live, is purged (a freed region is cached with a deadline of its own).
        hak_large *e = table_find(tail_block[i]);
        if (e && !e->cached && e->map_size > e->usable) {
            hak_os_decommit((void *)(e->block + e->usable), e->map_size - e->usable);
            dropped += e->map_size - e->usable;
        }
        tail_count--;
        tail_block[i] = tail_block[tail_count];
        tail_due[i] = tail_due[tail_count];
    }
    atomic_store_explicit(&cache_next_due, next, memory_order_relaxed);
    return dropped;
}

static void purge_due_locked(void) {
    uint64_t due = atomic_load_explicit(&cache_next_due, memory_order_relaxed);
    if (!due) return;
    uint64_t now = hak_coarse_now_ns();
    if (now >= due) purge_until(now);
}

// Lean policy: block e took a cached region whole; what lies beyond it is purged when the region
// would have been (due; 0: it was purged already). When the list is full the tail stays resident
// while the block lives (it is smaller than the block: a region is taken whole only up to twice
// the request) and goes with the region's purge once the block is freed. Purging it at once
// instead cost an madvise and the tail's page faults on nearly every large malloc of a program
// that keeps more than the list's worth of such blocks live and replaces them fast (random
// sizes up to 64 KiB in two threads under BALANCED: measured in
// docs/notebook/2026-12-07.md, "The lean large cache's tails"). Under the lock.
static void schedule_tail_purge(hak_large *e, uint64_t due) {
    if (!due || e->map_size == e->usable) return;
    if (tail_count == HAK_LARGE_CACHE_COUNT) return;
    tail_block[tail_count] = e->block;
    tail_due[tail_count++] = due;
    uint64_t next = atomic_load_explicit(&cache_next_due, memory_order_relaxed);
    if (!next || due < next) atomic_store_explicit(&cache_next_due, due, memory_order_relaxed);
}

// The periodic check of the heaps' sweeps (purge.c): takes the lock only when a deadline passed.
void hak_large_purge_due(void) {
    uint64_t due = atomic_load_explicit(&cache_next_due, memory_order_relaxed);
    if (!due || hak_coarse_now_ns() < due) return;
    hak_lock_acquire(&large_lock);
    purge_due_locked();
    hak_lock_release(&large_lock);
}

static hak_heap *cache_heap(void); // (the heap's large cache, below)

// malloc_trim: the calling thread's heap's regions to the shared cache, then every cached
// region not purged yet, and every pending tail, purged now.
// Returns the bytes.
size_t hak_large_trim(void) {
    hak_heap *heap = cache_heap(); // (other threads' heaps are theirs: at most their few regions)
    if (heap) hak_large_heap_flush(heap);
    hak_lock_acquire(&large_lock);
    size_t dropped = purge_until(UINT64_MAX);
    hak_lock_release(&large_lock);
    return dropped;
}

// The heap's large cache. Under the speed-first policy a thread keeps up to
// HAK_LARGE_HEAP_CACHE regions of at most HAK_LARGE_HEAP_REGION_MAX that it freed, for its own
// next large blocks: a free puts the region there, a request takes the smallest that holds it
// whole (at most twice the request, as from the shared cache). The region's entry stays in the
// table, marked as in a heap's cache, so a second free of it or a stale pointer is reported as
// before. What this saves is the shared cache's work under the lock: its linear scan, the
// coalescing, the byte bound, the eviction (a take or a put here is a table lookup and a few
// stores; the lock is still taken for the entry). The oldest region goes to the shared cache
// when a fifth comes, when its deadline (the shared cache's delay, from its free) has passed at
// one of its thread's frees or sweeps, and all of them at the thread's exit. A thread without a
// heap, the lean policy (memory first) and the secure build (no cache at all) do without.
#define HAK_LARGE_HEAP_REGION_MAX ((size_t)1 << 20)

static hak_heap *cache_heap(void) {
    hak_heap *heap = hak_tls_heap;
    return heap != &hak_heap_empty && !hak_option[HAK_OPT_SS_MEM_LEAN] ? heap : NULL;
}

// Takes the heap's region i out of its cache; returns its entry. Under the lock.
static hak_large *heap_cache_remove(hak_heap *heap, unsigned i, uint64_t *due) {
    hak_large *e = table_find(heap->large_block[i]);
    *due = heap->large_due[i];
    heap->large_count--;
    for (unsigned j = i; j < heap->large_count; j++) {
        heap->large_block[j] = heap->large_block[j + 1];
        heap->large_size[j] = heap->large_size[j + 1];
        heap->large_due[j] = heap->large_due[j + 1];
    }
    e->cached = 0;
    return e;
}

// The heap's region for a request of `need` bytes aligned to `alignment`, taken out of its cache
// (usable = need), or NULL. Under the lock.
static hak_large *heap_cache_take(hak_heap *heap, size_t need, size_t alignment) {
    unsigned best = HAK_LARGE_HEAP_CACHE;
    for (unsigned i = 0; i < heap->large_count; i++) {
        size_t size = heap->large_size[i];
        if (size < need || size / 2 > need || (heap->large_block[i] & (alignment - 1))) continue;
        // The smallest, and of those the one freed last (the warmest in the CPU's caches).
        if (best == HAK_LARGE_HEAP_CACHE || size <= heap->large_size[best]) best = i;
    }
    if (best == HAK_LARGE_HEAP_CACHE) return NULL;
    uint64_t due;
    hak_large *e = heap_cache_remove(heap, best, &due);
    e->usable = need;
    return e;
}

#ifdef HAK_SECURE
// The secure build's large blocks: no cache and no spans. Each block is a mapping of its own
// between two guard pages (PROT_NONE), so an overflow or underflow off its ends faults. A freed
// block's region, guards included, is replaced by a fresh PROT_NONE reservation (its pages
// dropped, its addresses kept) in a quarantine of the last HAK_QUARANTINE_COUNT freed, so a use
// after free faults, a read after free sees nothing, and the next allocations get other
// addresses; the oldest is unmapped when a new one enters. A table entry covers the block and
// its trailing guard; the leading guard is the page before it.
#define HAK_GUARD            HAK_OS_PAGE_SIZE
#define HAK_QUARANTINE_COUNT 64
static uintptr_t quarantine_base[HAK_QUARANTINE_COUNT];
static size_t quarantine_size[HAK_QUARANTINE_COUNT];
static unsigned quarantine_next;

static int quarantined(uintptr_t block) {
    for (unsigned i = 0; i < HAK_QUARANTINE_COUNT; i++)
        if (quarantine_size[i] && quarantine_base[i] + HAK_GUARD == block) return 1;
    return 0;
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
    mark_registry((uintptr_t)block, need);
    hak_lock_acquire(&large_lock);
    int ok = table_insert((uintptr_t)block, need + HAK_GUARD, need, new_map_id());
    hak_lock_release(&large_lock);
    if (!ok) {
        hak_os_unmap(block - HAK_GUARD, need + 2 * HAK_GUARD);
        hak_stat_mapped(-(long)(need + 2 * HAK_GUARD));
        return NULL;
    }
    count_new_region(need);
    return block;
}

static void secure_free(hak_large *e) {
    uintptr_t base = e->block - HAK_GUARD;
    size_t size = e->map_size + HAK_GUARD;
    recently_unmapped[recent_next++ % HAK_LARGE_RECENT] = e->block;
    e->block = HAK_LARGE_TOMBSTONE;
    void *fresh = hak_os_reserve((void *)base, size);
    if (fresh == MAP_FAILED) { // (no memory for the reservation: unmapped at once instead)
        hak_os_unmap((void *)base, size);
        hak_stat_mapped(-(long)size);
        return;
    }
    unsigned i = quarantine_next++ % HAK_QUARANTINE_COUNT;
    if (quarantine_size[i]) {
        hak_os_unmap((void *)quarantine_base[i], quarantine_size[i]);
        hak_stat_mapped(-(long)quarantine_size[i]);
    }
    quarantine_base[i] = base;
    quarantine_size[i] = size;
}

// Out of address space: the quarantine goes (hak_large_release_cache). Under the lock.
static size_t quarantine_release(void) {
    size_t released = 0;
    for (unsigned i = 0; i < HAK_QUARANTINE_COUNT; i++) {
        if (!quarantine_size[i]) continue;
        hak_os_unmap((void *)quarantine_base[i], quarantine_size[i]);
        hak_stat_mapped(-(long)quarantine_size[i]);
        released += quarantine_size[i];
        quarantine_size[i] = 0;
    }
    return released;
}
#endif

void *hak_large_alloc(size_t size, size_t alignment, int zero) {
    if (size > HAK_ADDRESS_LIMIT) return NULL;
    size_t need = hak_round_to_os_pages(size ? size : 1);
#ifdef HAK_SECURE
    (void)zero; // every block is a fresh mapping
    return secure_alloc(need, alignment);
#endif
    hak_heap *heap = cache_heap();
    hak_lock_acquire(&large_lock);
    hak_large *e = heap && heap->large_count ? heap_cache_take(heap, need, alignment) : NULL;
    if (e) {
        void *block = (void *)e->block; // (the entry is the table's: not read once unlocked)
        hak_lock_release(&large_lock);
        hak_stat_add(large, heap_cache_hit, 1);
        hak_stat_add(large, alloc, 1);
        hak_stat_add(large, live_kb, need / 1024);
        if (zero) memset(block, 0, need); // (see below: its last user wrote it)
        return block;
    }
    purge_due_locked(); // (a region whose delay ran out is purged before it is reused, too)
    uint64_t due = 0;
    e = cache_count ? cache_take(need, alignment, &due) : NULL;
    if (e) {
        e->usable = need;
        void *block = (void *)e->block;
        // Lean policy: the region's rest beyond the request was written by its last user; it
        // goes back when the region would have (a 64 KiB region reused for 48 KiB must not keep
        // 16 KiB resident for as long as the block lives).
        if (hak_option[HAK_OPT_SS_MEM_LEAN]) schedule_tail_purge(e, due);
        hak_lock_release(&large_lock);
        hak_stat_add(large, cache_hit, 1);
        hak_stat_add(large, alloc, 1);
        hak_stat_add(large, live_kb, need / 1024);
        // calloc: the whole usable size, which malloc_usable_size reports and the program may
        // use (the region's last user wrote it up to its own usable size).
        if (zero) memset(block, 0, need);
        return block;
    }
    if (alignment <= HAK_OS_PAGE_SIZE && need <= HAK_LARGE_SPAN_MAX &&
        !hak_option[HAK_OPT_SS_MEM_LEAN]) {
        char *span = span_take(need);
        int ok = span && table_insert((uintptr_t)span, need, need, chunk_map_id);
        hak_lock_release(&large_lock);
        if (!ok) return NULL; // a span without its entry stays unused in its chunk
        count_new_region(need);
        return span; // fresh (a chunk is never reused but through the cache): already zero
    }
    size_t grown_from = 0;
    uintptr_t smaller =
        alignment <= HAK_OS_PAGE_SIZE && cache_count ? cache_take_smaller(need, &grown_from) : 0;
    hak_lock_release(&large_lock);
    char *block;
    size_t map_size;
    if (smaller) {
        int saved = errno;
        block = hak_os_remap((void *)smaller, grown_from, need);
        errno = saved;
        hak_stat_add(large, mremap, 1);
        if (block == MAP_FAILED) { // out of address space: give it back, try a fresh mapping
            hak_os_unmap((void *)smaller, grown_from);
            hak_stat_mapped(-(long)grown_from);
            return hak_large_alloc(size, alignment, zero);
        }
        hak_stat_add(large, cache_hit, 1);
        hak_stat_mapped((long)(need - grown_from));
        map_size = need;
        if (zero) memset(block, 0, grown_from); // (the grown part is fresh)
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
    mark_registry((uintptr_t)block, map_size);
    hak_lock_acquire(&large_lock);
    int ok = table_insert((uintptr_t)block, map_size, need, new_map_id());
    hak_lock_release(&large_lock);
    if (!ok) {
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

// The live entry of p, under the lock; otherwise reports p for `func` (unlocking first).
static hak_large *live_entry(const char *func, void *p) {
    hak_large *e = table_find((uintptr_t)p);
    if (e && !e->cached) return e;
    int freed = e != NULL;
    for (unsigned i = 0; i < HAK_LARGE_RECENT; i++)
        freed |= recently_unmapped[i] == (uintptr_t)p;
#ifdef HAK_SECURE
    freed |= quarantined((uintptr_t)p);
#endif
    hak_lock_release(&large_lock);
    hak_fatal_pointer(func, freed ? "double free" : "invalid pointer", p);
}

// Under the lock, at a free (live: the large bytes live just before it).
static size_t cache_limit(size_t live) {
    uint64_t now = hak_coarse_now_ns();
    if (now >= peak_halve_ns) {
        live_peak /= 2;
        peak_halve_ns = now + HAK_LARGE_PEAK_HALF_LIFE_NS;
    }
    if (live > live_peak) live_peak = live;
    size_t limit = live_peak < HAK_LARGE_CACHE_BYTES / 2 ? HAK_LARGE_CACHE_BYTES : 2 * live_peak;
    return limit < HAK_LARGE_CACHE_BYTES_MAX ? limit : HAK_LARGE_CACHE_BYTES_MAX;
}

// When a region that is due for purging at `a` joins one due at `b` (0: nothing resident):
// the joined region is purged when the older part's delay runs out, so joining never keeps
// memory resident longer.
static uint64_t joined_due(uint64_t a, uint64_t b) {
    return a && b ? (a < b ? a : b) : a | b;
}

// A freed region about to be cached (to be purged at *due): the cached regions right after it
// join it (the tails cache_take split off, spans cut from one chunk), so that a request larger
// than either finds them whole again. Only regions after it: a region keeps its start, where a
// request takes its block, and that is the part its last user wrote (joined to a region before
// it, the next block came from that one's never-written tail as often as not, and test_release's
// regrown vector faulted in much of itself again now and then; measured:
// docs/notebook/2026-11-26-allocator-measurements.md, "Large blocks"). Under the lock.
static hak_large *coalesce(hak_large *e, uint64_t *due) {
    uint64_t now = 0;
    for (unsigned i = 0; i < cache_count;) {
        if (e->block + e->map_size != cache[i] || table_find(cache[i])->map_id != e->map_id) {
            i++;
            continue;
        }
        if (cache_due[i]) { // a neighbour whose delay ran out is purged first
            if (!now) now = hak_coarse_now_ns();
            if (cache_due[i] <= now) purge_slot(i);
        }
        // Only regions alike join: resident with resident, purged with purged. A warm region
        // joined to a purged one would be handed out from the purged end as often as not.
        if (!cache_due[i] != !*due) break;
        *due = joined_due(*due, cache_due[i]);
        hak_large *after = cache_remove(i);
        e->map_size += after->map_size;
        // (A block that loses its entry so is remembered as freed, for a second free of it.)
        recently_unmapped[recent_next++ % HAK_LARGE_RECENT] = after->block;
        after->block = HAK_LARGE_TOMBSTONE;
        i = 0;
    }
    return e;
}

// The cached region that makes room for a freed one when the cache is full (by count, or by
// bytes: its bound follows the recent live peak, which halves every second, so a cache filled
// while a program held 200 MiB can sit over a bound of 32 MiB for as long as nothing takes from
// it): a purged region before a resident one (it holds no memory, only address space and a
// slot), the largest of them (fewest unmaps), else the resident region freed longest ago.
// Before, such a cache refused every new region instead, and a program that freed and allocated
// one 48 KiB block in a loop got it unmapped and a fresh one, its pages faulted in, nearly every
// round (test_release on a loaded machine; measured: docs/notebook/2026-11-26-not-kept.md,
// "Issue #30, third pass"), while regions nobody had touched for seconds kept their slots.
// Under the lock, cache not empty.
static unsigned eviction_victim(void) {
    unsigned best = 0;
    for (unsigned i = 1; i < cache_count; i++) {
        uint64_t due = cache_due[i], best_due = cache_due[best];
        if (!due != !best_due ? !due : (due ? due < best_due : cache_size[i] > cache_size[best]))
            best = i;
    }
    return best;
}

#define HAK_LARGE_EVICT_MAX 16 // regions unmapped to make room for one freed region, at most

// Puts freed region e into the shared cache, to be purged at `due` (0: its policy's delay
// from now), or unmaps it when the cache has no room for it; under the lock, which it
// releases. `live`: the large bytes live just before the free.
static void cache_put_unlock(hak_large *e, uint64_t due, size_t live) {
    size_t limit = cache_limit(live);
    // Room is made (the old regions unmapped once the lock is released) unless the region alone
    // is over the bound.
    uintptr_t evicted[HAK_LARGE_EVICT_MAX];
    size_t evicted_size[HAK_LARGE_EVICT_MAX];
    unsigned evict_count = 0;
    while (e->map_size <= limit && cache_count && evict_count < HAK_LARGE_EVICT_MAX &&
           (cache_count == HAK_LARGE_CACHE_COUNT || cache_bytes + e->map_size > limit)) {
        hak_large *old = cache_remove(eviction_victim());
        evicted[evict_count] = old->block;
        evicted_size[evict_count++] = old->map_size;
        recently_unmapped[recent_next++ % HAK_LARGE_RECENT] = old->block;
        old->block = HAK_LARGE_TOMBSTONE;
    }
    int cached = cache_count < HAK_LARGE_CACHE_COUNT && cache_bytes + e->map_size <= limit;
    uintptr_t block = e->block;
    size_t map_size = e->map_size;
    if (cached) {
        if (!due)
            due = hak_coarse_now_ns() + (hak_option[HAK_OPT_SS_MEM_LEAN]
                                             ? HAK_LARGE_PURGE_DELAY_LEAN_NS
                                             : HAK_LARGE_PURGE_DELAY_NS);
        e = coalesce(e, &due);
        cache_add(e, due);
        purge_due_locked();
    } else {
        e->block = HAK_LARGE_TOMBSTONE;
        recently_unmapped[recent_next++ % HAK_LARGE_RECENT] = block;
    }
    hak_lock_release(&large_lock);
    for (unsigned i = 0; i < evict_count; i++) {
        hak_stat_mapped(-(long)evicted_size[i]);
        hak_os_unmap((void *)evicted[i], evicted_size[i]);
    }
    hak_stat_add(large, cache_evict, evict_count);
    if (cached) {
        hak_stat_add(large, cache_put, 1);
        return;
    }
    hak_stat_mapped(-(long)map_size);
    hak_os_unmap((void *)block, map_size);
}

static size_t live_large_bytes(void) {
    return (size_t)atomic_load_explicit(&hak_stats_large.live_kb, memory_order_relaxed) * 1024;
}

// The oldest region of the heap's cache to the shared cache (or unmapped); under the lock,
// which it releases.
static void heap_cache_evict_unlock(hak_heap *heap) {
    uint64_t due;
    hak_large *e = heap_cache_remove(heap, 0, &due);
    cache_put_unlock(e, due, live_large_bytes());
}

void hak_large_heap_flush(hak_heap *heap) {
    while (heap->large_count) { // (its thread's, or a fork child's: nobody else changes it)
        hak_lock_acquire(&large_lock);
        heap_cache_evict_unlock(heap);
    }
}

void hak_large_heap_purge_due(hak_heap *heap) {
    if (!heap->large_count) return;
    uint64_t now = hak_coarse_now_ns();
    while (heap->large_count && heap->large_due[0] <= now) {
        hak_lock_acquire(&large_lock);
        heap_cache_evict_unlock(heap);
    }
}

void hak_large_free(void *p) {
    hak_lock_acquire(&large_lock);
    hak_large *e = live_entry("free", p);
    hak_stat_add(large, free, 1);
    hak_stat_sub(large, live_kb, e->usable / 1024);
#ifdef HAK_SECURE
    secure_free(e);
    hak_lock_release(&large_lock);
    return;
#endif
    size_t live = live_large_bytes() + e->usable;
    hak_heap *heap = cache_heap();
    if (!heap || e->map_size > HAK_LARGE_HEAP_REGION_MAX) {
        cache_put_unlock(e, 0, live);
        return;
    }
    uint64_t now = hak_coarse_now_ns();
    unsigned n = heap->large_count;
    e->cached = 2; // (in a heap's cache: freed, for live_entry)
    e->usable = 0;
    heap->large_block[n] = e->block;
    heap->large_size[n] = e->map_size;
    heap->large_due[n] = now + HAK_LARGE_PURGE_DELAY_NS;
    heap->large_count = n + 1;
    hak_stat_add(large, heap_cache_put, 1);
    // A fifth region, or an oldest one whose delay ran out: the oldest to the shared cache.
    if (heap->large_count <= HAK_LARGE_HEAP_CACHE && heap->large_due[0] > now) {
        hak_lock_release(&large_lock);
        return;
    }
    heap_cache_evict_unlock(heap);
    hak_large_heap_purge_due(heap); // (and any other whose delay ran out)
}

size_t hak_large_usable(const char *func, void *p) {
    hak_lock_acquire(&large_lock);
    size_t usable = live_entry(func, p)->usable;
    hak_lock_release(&large_lock);
    return usable;
}

// realloc growing block e to `need` bytes when the region right after it is cached (the tail
// cache_take split off, a neighbour freed): the block takes what it needs of it, in place, with
// no syscall and, while that region is warm, no page fault; the rest stays cached. 0 when there
// is no such region or it is too small. Under the lock.
static int grow_into_cached_neighbour(hak_large *e, size_t need) {
    uintptr_t end = e->block + e->map_size, block = e->block;
    for (unsigned i = 0; i < cache_count; i++) {
        if (cache[i] != end || e->map_size + cache_size[i] < need) continue;
        if (table_find(cache[i])->map_id != e->map_id) continue; // (mremap would refuse it)
        uint64_t due = cache_due[i];
        hak_large *next = cache_remove(i);
        size_t total = e->map_size + next->map_size;
        next->block = HAK_LARGE_TOMBSTONE;
        if (total > need && table_insert(block + need, total - need, 0, next->map_id))
            cache_add(table_find(block + need), due);
        else
            need = total;
        e = table_find(block); // (inserting may have rebuilt the table)
        e->map_size = need;
        e->usable = need;
        return 1;
    }
    return 0;
}

// Resizes large block p to `size` (above the mid pool) without copying: returns the block (p
// or where mremap moved it), or NULL when the caller must allocate, copy and free.
void *hak_large_realloc(void *p, size_t size, int *out_of_memory) {
    if (size > HAK_ADDRESS_LIMIT) return NULL; // (rounding it up would wrap around)
    size_t need = hak_round_to_os_pages(size);
    hak_lock_acquire(&large_lock);
    hak_large *e = live_entry("realloc", p);
    size_t map_size = e->map_size, usable = e->usable;
#ifdef HAK_SECURE
    // Between its guards a block neither grows nor gives back its tail: within its usable
    // size it stays, anything larger is copied to a new block.
    hak_lock_release(&large_lock);
    (void)map_size;
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
        hak_lock_release(&large_lock);
        hak_stat_sub(large, live_kb, usable / 1024);
        hak_stat_add(large, live_kb, need / 1024);
        hak_stat_add(large, realloc_in_place, 1);
        if (trim) {
            hak_os_unmap((char *)p + need, map_size - need);
            hak_stat_mapped(-(long)(map_size - need));
        }
        return p;
    }
    if (grow_into_cached_neighbour(e, need)) {
        hak_lock_release(&large_lock);
        hak_stat_sub(large, live_kb, usable / 1024);
        hak_stat_add(large, live_kb, need / 1024);
        hak_stat_add(large, realloc_in_place, 1);
        return p;
    }
    // The entry leaves the table before the lock is dropped for the call: if mremap moves the
    // block, its old address is free for anyone's next mapping at once, and that mapping's
    // entry must not meet this one. (Only this thread may free or resize p meanwhile.)
    // Room for the entry to come back is made first: once mremap has moved the block, the
    // entry must go back, and a table that cannot grow then would leave no way to return NULL.
    if (!table_reserve()) {
        hak_lock_release(&large_lock);
        return NULL; // (the caller's malloc, copy and free fail as well: NULL, p untouched)
    }
    e = table_find((uintptr_t)p); // (growing may have rebuilt the table)
    uint32_t map_id = e->map_id;
    e->block = HAK_LARGE_TOMBSTONE;
    hak_lock_release(&large_lock);
    int saved = errno;
    void *q = hak_os_remap(p, map_size, need);
    if (q == MAP_FAILED && errno == ENOMEM) *out_of_memory = 1; // out of address space
    errno = saved;
    hak_stat_add(large, mremap, 1);
    int moved = q != MAP_FAILED;
    if (moved) {
        mark_registry((uintptr_t)q, need);
        hak_stat_mapped((long)(need - map_size));
        hak_stat_sub(large, live_kb, usable / 1024);
        hak_stat_add(large, live_kb, need / 1024);
        map_size = usable = need;
    } else {
        q = p; // p stays as it was, still mapped: its entry goes back
    }
    hak_lock_acquire(&large_lock);
    int ok = table_insert_back((uintptr_t)q, map_size, usable, moved ? new_map_id() : map_id);
    hak_lock_release(&large_lock);
    if (!ok) hak_fatal_pointer("realloc", "out of metadata memory for", q);
    if (!moved) return NULL;
    if (q == p) hak_stat_add(large, realloc_in_place, 1);
    return q;
}

// Out of address space (hak_release_cached): every cached region, and the untaken rest of
// the current chunk, unmapped. Returns the bytes.
size_t hak_large_release_cache(void) {
    hak_heap *heap = cache_heap();
    if (heap) hak_large_heap_flush(heap);
    hak_lock_acquire(&large_lock);
    size_t released = 0;
#ifdef HAK_SECURE
    released += quarantine_release();
#endif
    while (cache_count) {
        hak_large *e = cache_remove(cache_count - 1);
        recently_unmapped[recent_next++ % HAK_LARGE_RECENT] = e->block;
        hak_os_unmap((void *)e->block, e->map_size);
        hak_stat_mapped(-(long)e->map_size);
        hak_stat_add(large, cache_evict, 1);
        released += e->map_size;
        e->block = HAK_LARGE_TOMBSTONE;
    }
    if (chunk_left) {
        hak_os_unmap(chunk_next, chunk_left);
        hak_stat_mapped(-(long)chunk_left);
        released += chunk_left;
        chunk_left = 0;
    }
    hak_lock_release(&large_lock);
    return released;
}

void hak_large_fork_prepare(void) {
    hak_lock_acquire(&large_lock);
}
void hak_large_fork_parent(void) {
    hak_lock_release(&large_lock);
}
void hak_large_fork_child(void) {
    hak_lock_reset(&large_lock);
}
