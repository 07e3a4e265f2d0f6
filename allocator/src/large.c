// Large blocks (above the mid pool, or aligned beyond what a size class gives): each is its
// own region, sized to need: the request rounded up to OS pages, the block at the start of
// the region (over-aligned blocks are mapped over-size and trimmed, so they start there too).
// A region is a mapping of its own, or under the speed-first policy, up to 256 KiB, a span cut
// from a larger chunk (HAK_LARGE_SPAN_MAX below); either way it is handled alike.
// No header lives in the mapping. Their metadata is an entry in a hash table keyed by the
// block address, split into HAK_LARGE_SHARDS shards by the address's hash, each under a lock
// of its own held for a lookup and a few stores (free, malloc_usable_size, a realloc in place, a
// heap's own region taken or put back: heaplarge.c). The cache of freed regions shared by all
// threads has one lock, taken only when a heap's own regions cannot serve (see "Locks" below):
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
// Locks. A shard's lock guards its part of the table; the cache lock guards the shared cache
// (its regions, their deadlines, the lean policy's tails), the current span chunk, the record of
// recently unmapped blocks and the secure build's quarantine. Whoever holds both took the cache
// lock first, and no code holds two shards' locks at once (fork's prepare aside, which takes them
// all in order). A freed region keeps its entry, marked freed, while any cache holds it, so a
// second free of it is reported as one; the cache's own arrays hold what its scans need (address,
// size, mapping, deadline), so a scan reads no entry. Before, one lock guarded the table and the
// cache together, and every large malloc and free took it: two threads freeing and allocating
// blocks of 256 KiB-1 MiB found it held at three takes in four
// (docs/notebook/2026-12-03.md, "The large lock under two threads, counted").
#define HAK_LARGE_SHARD_BITS 4
#define HAK_LARGE_SHARDS     (1u << HAK_LARGE_SHARD_BITS)

typedef struct hak_large {
    uintptr_t block; // key: 0 = empty slot, HAK_LARGE_TOMBSTONE = deleted
    size_t map_size; // the mapping [block, block + map_size)
    size_t usable;   // what malloc_usable_size says: the request rounded up to OS pages
    uint32_t freed;  // freed: in a cache (a heap's or the shared one), or on its way there
    // Which mapping (kernel VMA) the region lies in: regions of different mappings are never
    // joined, however adjacent their addresses, because mremap refuses (EFAULT) a range that
    // spans two mappings. Before, a request grown from such a joined region found the call
    // failing, unmapped the region and mapped a fresh one, whose pages all faulted in again
    // (bench_bigblock --live 4; measured:
    // docs/notebook/2026-12-07-source-comments.md#largec-regions-of-two-mappings).
    uint32_t map_id;
} hak_large;

#define HAK_LARGE_TOMBSTONE ((uintptr_t)1)

typedef struct {
    hak_lock lock;
    hak_large *table;
    size_t capacity; // a power of two
    size_t used;     // live, freed and deleted slots
} __attribute__((aligned(64))) hak_large_shard; // (a cache line each: no false sharing)

static hak_large_shard shards[HAK_LARGE_SHARDS] = {
    [0 ... HAK_LARGE_SHARDS - 1] = {.lock = HAK_LOCK_INIT(large_table)}};

static hak_lock cache_lock = HAK_LOCK_INIT(large_cache);
static uintptr_t cache[HAK_LARGE_CACHE_COUNT];
static size_t cache_size[HAK_LARGE_CACHE_COUNT];  // map_size of cache[i]
static uint32_t cache_map[HAK_LARGE_CACHE_COUNT]; // map_id of cache[i]
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
static uint32_t chunk_map_id;   // the current chunk's (its spans share it)
static _Atomic uint32_t last_map_id;
// Speed-first: recent highest live large bytes (see above), raised at every free (without a
// lock: a free that loses a race raises it at its next), halved under the cache lock.
static _Atomic size_t live_peak;
static uint64_t peak_halve_ns; // when live_peak is halved next

// The id of a mapping just made (mmap, or an mremap that may have moved or grown a region).
static uint32_t new_map_id(void) {
    return atomic_fetch_add_explicit(&last_map_id, 1, memory_order_relaxed) + 1;
}

// --- The table

static uint64_t hash_of(uintptr_t block) {
    return (uint64_t)(block >> 12) * 0x9e3779b97f4a7c15ULL;
}

static hak_large_shard *shard_of(uintptr_t block) {
    return &shards[hash_of(block) >> (64 - HAK_LARGE_SHARD_BITS)];
}

static hak_large_shard *shard_lock(uintptr_t block) {
    hak_large_shard *s = shard_of(block);
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

// Grows (or cleans out tombstones) when more than half the slots are taken. 0 on failure.
static int reserve(hak_large_shard *s) {
    if (s->table && (s->used + 1) * 2 <= s->capacity) return 1;
    size_t live = 0;
    for (size_t i = 0; i < s->capacity; i++)
        live += s->table[i].block > HAK_LARGE_TOMBSTONE;
    size_t capacity = s->capacity ? s->capacity : HAK_LARGE_TABLE_MIN / HAK_LARGE_SHARDS;
    while ((live + 1) * 4 > capacity)
        capacity *= 2;
    hak_large *fresh = hak_os_map(capacity * sizeof(hak_large));
    if (fresh == MAP_FAILED) return 0;
    hak_large *old = s->table;
    size_t old_capacity = s->capacity;
    s->table = fresh;
    s->capacity = capacity;
    s->used = 0;
    for (size_t i = 0; i < old_capacity; i++) {
        if (old[i].block <= HAK_LARGE_TOMBSTONE) continue;
        size_t j = slot_of(s, old[i].block);
        while (s->table[j].block)
            j = (j + 1) & (capacity - 1);
        s->table[j] = old[i];
        s->used++;
    }
    if (old) hak_os_unmap(old, old_capacity * sizeof(hak_large));
    return 1;
}

static void put(hak_large_shard *s, hak_large entry) {
    size_t i = slot_of(s, entry.block);
    while (s->table[i].block > HAK_LARGE_TOMBSTONE)
        i = (i + 1) & (s->capacity - 1);
    if (s->table[i].block == 0) s->used++;
    s->table[i] = entry;
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
    if (e) e->block = HAK_LARGE_TOMBSTONE;
    hak_lock_release(&s->lock);
}

// Sets a freed region's size (a split or a join changed it), taking its shard's lock.
static void entry_resize(uintptr_t block, size_t map_size) {
    hak_large_shard *s = shard_lock(block);
    hak_large *e = find(s, block);
    if (e) e->map_size = map_size;
    hak_lock_release(&s->lock);
}

// A block unmapped or joined into another region: its entry goes, its address is remembered for
// a second free of it. Under the cache lock.
static void forget(uintptr_t block) {
    entry_remove(block);
    recently_unmapped[recent_next++ % HAK_LARGE_RECENT] = block;
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

// The next `need` bytes of the current chunk, mapping a new one when they do not fit; under
// the cache lock (a chunk is mapped once per HAK_LARGE_CHUNK of spans). NULL when mmap fails.
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

// --- The shared cache (under the cache lock)

// The earliest deadline of the cache, lowered to `due` if that is earlier (0: none).
static void note_due(uint64_t due) {
    uint64_t next = atomic_load_explicit(&cache_next_due, memory_order_relaxed);
    if (due && (!next || due < next))
        atomic_store_explicit(&cache_next_due, due, memory_order_relaxed);
}

// Puts a freed region into the cache, to be purged at `due` (0: never, or purged already);
// with a free cache slot.
static void cache_add(uintptr_t block, size_t size, uint32_t map_id, uint64_t due) {
    cache[cache_count] = block;
    cache_due[cache_count] = due;
    cache_map[cache_count] = map_id;
    cache_size[cache_count++] = size;
    cache_bytes += size;
    note_due(due);
}

// Takes cache slot i's region out of the cache (its entry stays, freed); returns its address.
static uintptr_t cache_remove(unsigned i) {
    uintptr_t block = cache[i];
    cache_bytes -= cache_size[i];
    cache_count--;
    cache[i] = cache[cache_count];
    cache_size[i] = cache_size[cache_count];
    cache_map[i] = cache_map[cache_count];
    cache_due[i] = cache_due[cache_count];
    return block;
}

// Takes the smallest cached region of at least `need` bytes that fits (see below) and is
// aligned enough: returns its address (0: none) and its size, which is `need` when it was split,
// with *due_out, when it was to be purged (0: purged already). Its entry stays freed: the caller
// makes it live.
static uintptr_t cache_take(size_t need, size_t alignment, size_t *size_out, uint64_t *due_out) {
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
    if (best == HAK_LARGE_CACHE_COUNT) return 0;
    uint64_t due = *due_out = cache_due[best];
    uint32_t map_id = cache_map[best];
    uintptr_t block = cache_remove(best);
    *size_out = best_size;
    if (best_size / 2 > need) {
        // The tail: a region of its own, as cached (and as due for purging) as it was.
        uintptr_t tail = block + need;
        if (insert((hak_large){tail, best_size - need, 0, 1, map_id})) {
            cache_add(tail, best_size - need, map_id, due);
            *size_out = need;
        }
    }
    return block;
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
    *size = cache_size[best];
    uintptr_t block = cache_remove(best);
    entry_remove(block); // it may move: a new entry when it has (as in realloc)
    return block;
}

// Purges cache slot i's region (it stays mapped and cached, and reads as zero when reused).
static void purge_slot(unsigned i) {
    hak_os_decommit((void *)cache[i], cache_size[i]);
    cache_due[i] = 0;
}

// Purges the cached regions whose delay passed (madvise: they stay mapped and cached, and read
// as zero when reused) and the lean policy's tails that are due. Under the cache lock, so no
// thread takes a region while its pages are being dropped; it runs only when a deadline has
// passed (the arena's scheduler reads the clock for both caches: hak_arena_cache_purge_due).
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
        // Under its shard's lock, so the block is not freed and reused meanwhile.
        hak_large_shard *s = shard_lock(tail_block[i]);
        hak_large *e = find(s, tail_block[i]);
        if (e && !e->freed && e->map_size > e->usable) {
            hak_os_decommit((void *)(e->block + e->usable), e->map_size - e->usable);
            dropped += e->map_size - e->usable;
        }
        hak_lock_release(&s->lock);
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

// Lean policy: `block` took a cached region whole; what lies beyond it is purged when the region
// would have been (due; 0: it was purged already). When the list is full the tail stays resident
// while the block lives (it is smaller than the block: a region is taken whole only up to twice
// the request) and goes with the region's purge once the block is freed. Purging it at once
// instead cost an madvise and the tail's page faults on nearly every large malloc of a program
// that keeps more than the list's worth of such blocks live and replaces them fast (random
// sizes up to 64 KiB in two threads under BALANCED: measured in
// docs/notebook/2026-12-07.md, "The lean large cache's tails").
static void schedule_tail_purge(uintptr_t block, uint64_t due) {
    if (!due || tail_count == HAK_LARGE_CACHE_COUNT) return;
    tail_block[tail_count] = block;
    tail_due[tail_count++] = due;
    note_due(due);
}

// The arena's scheduler (arena.c: hak_arena_cache_purge_due) asks for the earliest deadline of
// the cached regions and calls the purge once it has passed.
uint64_t hak_large_cache_next_due(void) {
    return atomic_load_explicit(&cache_next_due, memory_order_relaxed);
}

void hak_large_cache_purge_due(uint64_t now) {
    hak_lock_acquire(&cache_lock);
    uint64_t due = atomic_load_explicit(&cache_next_due, memory_order_relaxed);
    if (due && now >= due) purge_until(now);
    hak_lock_release(&cache_lock);
}

// malloc_trim: every cached region not purged yet, and every pending tail, purged now (the
// calling thread's own regions went to this cache first: wrappers.c). Returns the bytes.
size_t hak_large_trim(void) {
    hak_lock_acquire(&cache_lock);
    size_t dropped = purge_until(UINT64_MAX);
    hak_lock_release(&cache_lock);
    return dropped;
}

#ifdef HAK_SECURE
// The secure build's large blocks: no cache and no spans. Each block is a mapping of its own
// between two guard pages (PROT_NONE), so an overflow or underflow off its ends faults. A freed
// block's region, guards included, is replaced by a fresh PROT_NONE reservation (its pages
// dropped, its addresses kept) in a quarantine of the last HAK_QUARANTINE_COUNT freed, so a use
// after free faults, a read after free sees nothing, and the next allocations get other
// addresses; the oldest is unmapped when a new one enters. A table entry covers the block and
// its trailing guard; the leading guard is the page before it. The quarantine is under the
// cache lock.
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
    if (!insert((hak_large){(uintptr_t)block, need + HAK_GUARD, need, 0, new_map_id()})) {
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
    hak_lock_acquire(&cache_lock);
    recently_unmapped[recent_next++ % HAK_LARGE_RECENT] = block;
    void *fresh = hak_os_reserve((void *)base, size);
    if (fresh == MAP_FAILED) { // (no memory for the reservation: unmapped at once instead)
        hak_lock_release(&cache_lock);
        hak_os_unmap((void *)base, size);
        hak_stat_mapped(-(long)size);
        return;
    }
    unsigned i = quarantine_next++ % HAK_QUARANTINE_COUNT;
    uintptr_t old_base = quarantine_base[i];
    size_t old_size = quarantine_size[i];
    quarantine_base[i] = base;
    quarantine_size[i] = size;
    hak_lock_release(&cache_lock);
    if (old_size) {
        hak_os_unmap((void *)old_base, old_size);
        hak_stat_mapped(-(long)old_size);
    }
}

// Out of address space: the quarantine goes (hak_large_release_cache). Under the cache lock.
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

// A block that took a region: its entry made live, sized and counted.
static void *take_region(uintptr_t block, size_t map_size, size_t need, int zero) {
    hak_large_shard *s = shard_lock(block);
    hak_large *e = find(s, block);
    e->freed = 0;
    e->usable = need;
    e->map_size = map_size;
    hak_lock_release(&s->lock);
    hak_stat_add(large, alloc, 1);
    hak_stat_add(large, live_kb, need / 1024);
    // calloc: the whole usable size, which malloc_usable_size reports and the program may use
    // (the region's last user wrote it up to its own usable size).
    if (zero) memset((void *)block, 0, need);
    return (void *)block;
}

// A large block from the shared cache, a span or a mapping of its own (the heap's own regions,
// tried first, are the heap layer's: heaplarge.c).
void *hak_large_alloc(size_t size, size_t alignment, int zero) {
    if (size > HAK_ADDRESS_LIMIT) return NULL;
    size_t need = hak_round_to_os_pages(size ? size : 1);
#ifdef HAK_SECURE
    (void)zero; // every block is a fresh mapping
    return secure_alloc(need, alignment);
#endif
    hak_lock_acquire(&cache_lock);
    purge_due_locked(); // (a region whose delay ran out is purged before it is reused, too)
    uint64_t due = 0;
    size_t taken_size = 0;
    uintptr_t taken = cache_count ? cache_take(need, alignment, &taken_size, &due) : 0;
    if (taken) {
        // Lean policy: the region's rest beyond the request was written by its last user; it
        // goes back when the region would have (a 64 KiB region reused for 48 KiB must not keep
        // 16 KiB resident for as long as the block lives).
        if (hak_option[HAK_OPT_SS_MEM_LEAN] && taken_size > need) schedule_tail_purge(taken, due);
        hak_lock_release(&cache_lock);
        hak_stat_add(large, cache_hit, 1);
        return take_region(taken, taken_size, need, zero);
    }
    if (alignment <= HAK_OS_PAGE_SIZE && need <= HAK_LARGE_SPAN_MAX &&
        !hak_option[HAK_OPT_SS_MEM_LEAN]) {
        char *span = span_take(need);
        uint32_t map_id = chunk_map_id;
        hak_lock_release(&cache_lock);
        if (!span || !insert((hak_large){(uintptr_t)span, need, need, 0, map_id}))
            return NULL; // a span without its entry stays unused in its chunk
        count_new_region(need);
        return span; // fresh (a chunk is never reused but through the cache): already zero
    }
    size_t grown_from = 0;
    uintptr_t smaller =
        alignment <= HAK_OS_PAGE_SIZE && cache_count ? cache_take_smaller(need, &grown_from) : 0;
    hak_lock_release(&cache_lock);
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
    if (!insert((hak_large){(uintptr_t)block, map_size, need, 0, new_map_id()})) {
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
// if its entry says so (`freed`), or if it was unmapped lately or is quarantined.
__attribute__((noreturn)) static void report(const char *func, void *p, int freed) {
    hak_lock_acquire(&cache_lock);
    for (unsigned i = 0; i < HAK_LARGE_RECENT; i++)
        freed |= recently_unmapped[i] == (uintptr_t)p;
#ifdef HAK_SECURE
    freed |= quarantined((uintptr_t)p);
#endif
    hak_lock_release(&cache_lock);
    hak_fatal_pointer(func, freed ? "double free" : "invalid pointer", p);
}

// The live entry of p, under its shard's lock (held); otherwise reports p for `func`.
static hak_large *live_entry(const char *func, hak_large_shard *s, void *p) {
    hak_large *e = find(s, (uintptr_t)p);
    if (e && !e->freed) return e;
    hak_lock_release(&s->lock);
    report(func, p, e != NULL);
}

// Under the cache lock, at a free.
static size_t cache_limit(void) {
    uint64_t now = hak_coarse_now_ns();
    size_t peak = atomic_load_explicit(&live_peak, memory_order_relaxed);
    if (now >= peak_halve_ns) {
        peak /= 2;
        atomic_store_explicit(&live_peak, peak, memory_order_relaxed);
        peak_halve_ns = now + HAK_LARGE_PEAK_HALF_LIFE_NS;
    }
    size_t limit = peak < HAK_LARGE_CACHE_BYTES / 2 ? HAK_LARGE_CACHE_BYTES : 2 * peak;
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
// docs/notebook/2026-11-26-allocator-measurements.md, "Large blocks"). Returns the joined size.
static size_t coalesce(uintptr_t block, size_t size, uint32_t map_id, uint64_t *due) {
    uint64_t now = 0;
    for (unsigned i = 0; i < cache_count;) {
        if (block + size != cache[i] || cache_map[i] != map_id) {
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
        size += cache_size[i];
        // (A block that loses its entry so is remembered as freed, for a second free of it.)
        forget(cache_remove(i));
        i = 0;
    }
    return size;
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
// Cache not empty.
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

// A freed region (hak_large_release: its size and mapping) into the shared cache, to be purged
// at `due` (0: its policy's delay from now), or unmapped when the cache has no room for it.
void hak_large_cache_put(hak_region r, uint64_t due) {
    uintptr_t block = r.block;
    size_t map_size = r.size;
    uint32_t map_id = r.map_id;
    hak_lock_acquire(&cache_lock);
    size_t limit = cache_limit();
    // Room is made (the old regions unmapped once the lock is released) unless the region alone
    // is over the bound.
    uintptr_t evicted[HAK_LARGE_EVICT_MAX];
    size_t evicted_size[HAK_LARGE_EVICT_MAX];
    unsigned evict_count = 0;
    while (map_size <= limit && cache_count && evict_count < HAK_LARGE_EVICT_MAX &&
           (cache_count == HAK_LARGE_CACHE_COUNT || cache_bytes + map_size > limit)) {
        unsigned victim = eviction_victim();
        evicted_size[evict_count] = cache_size[victim];
        evicted[evict_count] = cache_remove(victim);
        forget(evicted[evict_count++]);
    }
    int cached = cache_count < HAK_LARGE_CACHE_COUNT && cache_bytes + map_size <= limit;
    if (cached) {
        if (!due) due = hak_coarse_now_ns() + hak_arena_large_purge_delay();
        size_t joined = coalesce(block, map_size, map_id, &due);
        if (joined != map_size) entry_resize(block, joined);
        cache_add(block, joined, map_id, due);
        purge_due_locked();
    } else {
        forget(block);
    }
    hak_lock_release(&cache_lock);
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

// free(p) of a large block: p checked (reported unless it is a live large block), its entry
// marked freed and counted; returns its region for the caller to cache it (size 0: the secure
// build's quarantine took it).
hak_region hak_large_release(void *p) {
    hak_large_shard *s = shard_lock((uintptr_t)p);
    hak_large *e = live_entry("free", s, p);
    size_t usable = e->usable, map_size = e->map_size;
    hak_region r = {(uintptr_t)p, map_size, e->map_id};
#ifdef HAK_SECURE
    e->block = HAK_LARGE_TOMBSTONE;
#else
    e->freed = 1;
    e->usable = 0;
#endif
    hak_lock_release(&s->lock);
    // (the large bytes live just before this free)
    size_t live = (size_t)atomic_load_explicit(&hak_stats_large.live_kb, memory_order_relaxed) * 1024;
    hak_stat_add(large, free, 1);
    hak_stat_sub(large, live_kb, usable / 1024);
#ifdef HAK_SECURE
    (void)live;
    secure_free((uintptr_t)p, map_size);
    r.size = 0;
#else
    size_t peak = atomic_load_explicit(&live_peak, memory_order_relaxed);
    if (live > peak) atomic_store_explicit(&live_peak, live, memory_order_relaxed);
#endif
    return r;
}

// A region of a heap's own cache (freed, its entry kept) taken for a block of `need` bytes.
void *hak_large_reuse(uintptr_t block, size_t map_size, size_t need, int zero) {
    return take_region(block, map_size, need, zero);
}

size_t hak_large_usable(const char *func, void *p) {
    hak_large_shard *s = shard_lock((uintptr_t)p);
    size_t usable = live_entry(func, s, p)->usable;
    hak_lock_release(&s->lock);
    return usable;
}

// realloc growing block `block` (its mapping map_size bytes of mapping map_id) to `need` bytes
// when the region right after it is cached (the tail cache_take split off, a neighbour freed):
// the block takes what it needs of it, in place, with no syscall and, while that region is warm,
// no page fault; the rest stays cached. 0 when there is no such region or it is too small.
static int grow_into_cached_neighbour(uintptr_t block, size_t map_size, uint32_t map_id,
                                      size_t need) {
    uintptr_t end = block + map_size;
    hak_lock_acquire(&cache_lock);
    for (unsigned i = 0; i < cache_count; i++) {
        if (cache[i] != end || map_size + cache_size[i] < need) continue;
        if (cache_map[i] != map_id) continue; // (mremap would refuse it)
        uint64_t due = cache_due[i];
        size_t total = map_size + cache_size[i];
        entry_remove(cache_remove(i));
        if (total > need && insert((hak_large){block + need, total - need, 0, 1, map_id}))
            cache_add(block + need, total - need, map_id, due);
        else
            need = total;
        hak_large_shard *s = shard_lock(block);
        hak_large *e = find(s, block);
        e->map_size = need;
        e->usable = need;
        hak_lock_release(&s->lock);
        hak_lock_release(&cache_lock);
        return 1;
    }
    hak_lock_release(&cache_lock);
    return 0;
}

// Resizes large block p to `size` (above the mid pool) without copying: returns the block (p
// or where mremap moved it), or NULL when the caller must allocate, copy and free.
void *hak_large_realloc(void *p, size_t size, int *out_of_memory) {
    if (size > HAK_ADDRESS_LIMIT) return NULL; // (rounding it up would wrap around)
    size_t need = hak_round_to_os_pages(size);
    hak_large_shard *s = shard_lock((uintptr_t)p);
    hak_large *e = live_entry("realloc", s, p);
    size_t map_size = e->map_size, usable = e->usable;
    uint32_t map_id = e->map_id;
#ifdef HAK_SECURE
    // Between its guards a block neither grows nor gives back its tail: within its usable
    // size it stays, anything larger is copied to a new block.
    hak_lock_release(&s->lock);
    (void)map_size, (void)map_id;
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
    if (grow_into_cached_neighbour((uintptr_t)p, map_size, map_id, need)) {
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
        mark_registry((uintptr_t)q, need);
        hak_stat_mapped((long)(need - map_size));
        hak_stat_sub(large, live_kb, usable / 1024);
        hak_stat_add(large, live_kb, need / 1024);
        map_size = usable = need;
    } else {
        q = p; // p stays as it was, still mapped: its entry goes back
    }
    if (!insert_back((hak_large){(uintptr_t)q, map_size, usable, 0, moved ? new_map_id() : map_id}))
        hak_fatal_pointer("realloc", "out of metadata memory for", q);
    if (!moved) return NULL;
    if (q == p) hak_stat_add(large, realloc_in_place, 1);
    return q;
}

// Out of address space (hak_release_cached): every cached region, and the untaken rest of
// the current chunk, unmapped. Returns the bytes.
size_t hak_large_release_cache(void) {
    hak_lock_acquire(&cache_lock);
    size_t released = 0;
#ifdef HAK_SECURE
    released += quarantine_release();
#endif
    while (cache_count) {
        size_t size = cache_size[cache_count - 1];
        uintptr_t block = cache_remove(cache_count - 1);
        forget(block);
        hak_os_unmap((void *)block, size);
        hak_stat_mapped(-(long)size);
        hak_stat_add(large, cache_evict, 1);
        released += size;
    }
    if (chunk_left) {
        hak_os_unmap(chunk_next, chunk_left);
        hak_stat_mapped(-(long)chunk_left);
        released += chunk_left;
        chunk_left = 0;
    }
    hak_lock_release(&cache_lock);
    return released;
}

// fork: the cache lock, then every shard's, in order (the order of every path that holds two).
void hak_large_fork_prepare(void) {
    hak_lock_acquire(&cache_lock);
    for (unsigned i = 0; i < HAK_LARGE_SHARDS; i++)
        hak_lock_acquire(&shards[i].lock);
}
void hak_large_fork_parent(void) {
    for (unsigned i = HAK_LARGE_SHARDS; i-- > 0;)
        hak_lock_release(&shards[i].lock);
    hak_lock_release(&cache_lock);
}
void hak_large_fork_child(void) {
    for (unsigned i = 0; i < HAK_LARGE_SHARDS; i++)
        hak_lock_reset(&shards[i].lock);
    hak_lock_reset(&cache_lock);
}
