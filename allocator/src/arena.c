// The arena: where superslabs and large regions come from and what happens to the free memory
// in them, on one purge scheduler.
//   - empty superslabs are kept in a cache (HAKMEM_SS_CACHE_SIZE bytes) instead of munmap,
//     because a heap that empties and refills a superslab would otherwise pay two syscalls and
//     512 page faults each time. Cached superslabs stay registered (kind HAK_SS_FREE), so a
//     stale free() into one is reported, not followed. That is the speed-first policy.
//   - the lean policy (HAKMEM_SS_MEM_LEAN=1, profile BALANCED) keeps at most
//     SS_MEM_LEAN_TARGET_MB of empty superslabs and, with SS_MEM_LEAN_DECOMMIT, gives their
//     memory back once they have waited the purge delay in the cache (the header page stays,
//     so a stale free() is still reported): resident memory after a burst falls back to the
//     live set, and reusing a cached superslab costs page faults instead of an mmap.
//   - the free page slots of live superslabs are purged after a delay beyond a floor (below,
//     "A page slot of a live superslab became free"); the deadlines of a heap's own superslabs
//     are checked by the heap (purge.c), those of superslabs nobody owns (abandoned) here.
//   - freed large regions that no heap keeps wait in a cache of their own ranges, handed out
//     again whole or split, joined, purged after their delay ("Freed large regions" below).
//   - one scheduler: the earliest deadline of either cache and of the abandoned superslabs,
//     checked by every heap (hak_arena_cache_next_due, hak_arena_cache_purge_due).
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>

#include "segment.h"
#include "options.h"

static hak_lock cache_lock = HAK_LOCK_INIT(cache);
static hak_superslab *cache_first;
static _Atomic size_t cache_count; // read without the lock only as a hint
// Speed-first: the earliest time a cached superslab still resident is purged (0: none).
static _Atomic uint64_t cache_purge_next_ns;

// What a superslab's mapping spans: its 2 MiB and the secure build's guard after them.
#define HAK_SS_MAPPED (HAK_SS_SIZE + HAK_SS_GUARD)

#define HAK_DIRTY_SLOTS_MAX 4

static size_t region_release(void);

// Out of address space (purge.c: hak_release_cached): every cached superslab and large region
// unmapped, and the untaken rest of the current span chunk. Returns the bytes.
size_t hak_arena_release_cache(void) {
    size_t released = region_release();
    hak_lock_acquire(&cache_lock);
    hak_superslab *list = cache_first;
    cache_first = NULL;
    atomic_store_explicit(&cache_count, 0, memory_order_relaxed);
    atomic_store_explicit(&cache_purge_next_ns, 0, memory_order_relaxed);
    hak_lock_release(&cache_lock);
    for (hak_superslab *ss = list, *next; ss; ss = next) {
        next = ss->next;
        hak_stat_add(ss_os, cache_release, 1);
        hak_registry_set((uintptr_t)ss, HAK_REG_NONE);
        size_t size = HAK_SS_MAPPED;
        hak_os_unmap(ss, size);
        hak_stat_mapped(-(long)size);
        released += size;
    }
    return released;
}

// An empty 2 MiB superslab with a zeroed header, registered; NULL when out of memory.
hak_superslab *hak_arena_superslab_get(void) {
    hak_superslab *ss = NULL;
    if (atomic_load_explicit(&cache_count, memory_order_relaxed)) { // a stale 0 costs a mapping
        hak_lock_acquire(&cache_lock);
        ss = cache_first;
        if (ss) cache_first = ss->next, cache_count--;
        hak_lock_release(&cache_lock);
    }
    if (ss) {
        hak_stat_add(ss_os, cache_hit, 1);
        // Still resident unless it was decommitted in the cache: then every slot is a resident
        // free slot that the purge policy must know about, or it would never purge them.
        uint32_t dirty = ss->dirty_mask, rw_units = ss->rw_units;
        memset(ss, 0, sizeof *ss);
        ss->dirty_mask = dirty;
        ss->rw_units = rw_units;
        return ss;
    }
    hak_stat_add(ss_os, cache_miss, 1);
    char *base;
    size_t size;
    ss = hak_os_map_aligned(HAK_SS_SIZE + HAK_SS_GUARD, HAK_SS_SIZE, &base, &size);
    if (!ss) return NULL;
    // Past the header, PROT_NONE until a page slot is used (hak_superslab.rw_units); the guard
    // after it (HAK_SS_GUARD) for good.
    if (!hak_os_protect((char *)ss + HAK_SS_HEADER_SIZE,
                        HAK_SS_SIZE + HAK_SS_GUARD - HAK_SS_HEADER_SIZE, 0))
        ss->rw_units = ~0u;
    return ss; // registered by hak_superslab_acquire, with its page kind
}

// Superslabs the cache may hold under the current policy.
static size_t cache_limit(void) {
    if (!hak_option[HAK_OPT_SS_MEM_LEAN])
        return (size_t)hak_option[HAK_OPT_SS_CACHE_SIZE] / HAK_SS_SIZE;
    long target_mb = hak_option[HAK_OPT_SS_MEM_LEAN_TARGET_MB];
    return target_mb > 0 ? ((size_t)target_mb << 20) / HAK_SS_SIZE : 0;
}

// Lean policy: the pages behind the header go back to the kernel (they read as zero after).
static void decommit(hak_superslab *ss) {
    ss->dirty_mask = 0;
    hak_os_decommit((char *)ss + HAK_SS_HEADER_SIZE, HAK_SS_SIZE - HAK_SS_HEADER_SIZE);
}

#ifdef HAK_DEBUG
void (*hak_test_superslab_put_hook)(hak_superslab *ss);

// The cached superslabs that break the policy: resident (not decommitted) with
// no deadline to purge them. Speed-first gives every cached superslab a deadline; the lean
// policy with SS_MEM_LEAN_DECOMMIT decommits every one it caches. Either way none should be
// counted here: such a superslab would stay resident in the cache for good.
size_t hak_arena_cache_resident_undue(void) {
    if (hak_option[HAK_OPT_SS_MEM_LEAN] && !hak_option[HAK_OPT_SS_MEM_LEAN_DECOMMIT]) return 0;
    size_t count = 0;
    hak_lock_acquire(&cache_lock);
    for (hak_superslab *ss = cache_first; ss; ss = ss->next)
        count += ss->dirty_mask && !ss->purge_due_ns;
    hak_lock_release(&cache_lock);
    return count;
}
#endif

// Takes back an empty superslab: into the cache while it has room, else unmapped. A cached
// superslab stays resident for a delay (a heap that empties and refills one, or the next thread
// after one that exited, reuses it warm) and is decommitted after it (purge.c: hak_purge_due):
// HAK_PURGE_DELAY_NS under both policies, as its free page slots. The lean policy decommitted at
// once until issue #38, then after 1 ms: with thread churn (mstress, a thread a round) every
// exiting thread's empty superslabs went to the cache and the next thread faulted them back in
// (docs/notebook/2026-11-28-thread-churn.md, docs/notebook/2026-12-08.md). Every cached
// superslab is decommitted or has its deadline (the deadline is set before the lock, so no other
// thread's take can void it).
void hak_arena_superslab_put(hak_superslab *ss) {
    ss->kind = HAK_SS_FREE;
    ss->dirty_mask = ~0u; // whatever its pages were, they may be resident until decommitted
    size_t limit = cache_limit();
    int lean = hak_option[HAK_OPT_SS_MEM_LEAN] != 0;
    int decommits = !lean || hak_option[HAK_OPT_SS_MEM_LEAN_DECOMMIT];
    ss->purge_due_ns = !decommits ? 0 : hak_coarse_now_ns() + HAK_PURGE_DELAY_NS;
#ifdef HAK_DEBUG
    // Where another thread may take a cached superslab before this one takes the lock
    // (test_cache_decommit makes it happen, deterministically).
    if (hak_test_superslab_put_hook) hak_test_superslab_put_hook(ss);
#endif
    hak_lock_acquire(&cache_lock);
    if (cache_count < limit) {
        ss->next = cache_first;
        cache_first = ss;
        cache_count++;
        uint64_t next = atomic_load_explicit(&cache_purge_next_ns, memory_order_relaxed);
        if (ss->purge_due_ns && (!next || ss->purge_due_ns < next))
            atomic_store_explicit(&cache_purge_next_ns, ss->purge_due_ns, memory_order_relaxed);
        ss = NULL;
    }
    hak_lock_release(&cache_lock);
    if (!ss) return;
    hak_stat_add(ss_os, cache_release, 1);
    hak_registry_set((uintptr_t)ss, HAK_REG_NONE);
    size_t size = HAK_SS_MAPPED;
    hak_os_unmap(ss, size);
    hak_stat_mapped(-(long)size);
}

// A page slot of a live superslab became free. Up to a floor of free slots per superslab may
// stay resident (a heap whose live set breathes by a few pages reuses them warm): 4 under
// speed-first, none under the lean policy. Beyond the floor, a superslab's resident free slots
// are purged once that has lasted a delay, HAK_PURGE_DELAY_NS (10 ms; the coarse clock ticks
// every few ms). No timer thread: the owning heap checks its earliest deadline whenever it frees
// a page slot and in its periodic sweep (slow paths), every heap checks those of the superslabs
// nobody owns (below); an emptied superslab leaves through the cache policy above. The lean
// policy's delay was 1 ms until issue #38: mstress's threads (a few ms each) had the pages
// they emptied purged under them and faulted them back in, 30x C7_SAFE's page faults for a
// peak above the one it has with 10 ms (docs/notebook/2026-12-08.md). Purging at once made mid
// sizes (2-8 blocks a page, so pages empty and refill constantly) fault every refilled page back
// in, under both policies, and fall far behind mimalloc's throughput (mid_large_mt1; measured:
// docs/notebook/2026-11-26-allocator-measurements.md, "How memory goes back to the OS").
// mimalloc delays its purges the same way.
// The superslab's resident free slots beyond the policy's floor (0 when within it).
uint32_t hak_arena_slots_beyond_floor(const hak_superslab *ss) {
    uint32_t dirty = ss->dirty_mask & ss->free_page_mask;
    if (!hak_option[HAK_OPT_SS_MEM_LEAN]) {
        // More than the floor's bits: some remain after clearing that many lowest ones (no
        // popcount call: the build targets x86-64 without POPCNT). The floor is
        // HAK_DIRTY_SLOTS_MAX small pages (256 KiB), one medium page, no big page.
        for (unsigned i = HAK_DIRTY_SLOTS_MAX >> (2 * ss->page_kind); i; i--)
            dirty &= dirty - 1;
    }
    return dirty;
}

// A deadline set: every slot free now waits a whole delay from now (an adopter's grace is
// part of it, so it ends).
void hak_arena_arm(hak_superslab *ss, uint64_t due) {
    ss->purge_due_ns = due;
    ss->young_mask = 0;
}

// A deadline passed: the resident free slots go, but those an adopter was given a grace for
// (young: hak_arena_superslab_adopted), which wait one delay more, with a deadline again while
// they are beyond the floor. Looked at a whole delay late, the young go too: they waited as
// long.
void hak_arena_purge_aged(hak_superslab *ss, uint64_t now) {
    hak_superslab_purge(ss, now < ss->purge_due_ns + HAK_PURGE_DELAY_NS);
    if (hak_arena_slots_beyond_floor(ss)) hak_arena_arm(ss, now + HAK_PURGE_DELAY_NS);
}

// The exited owner's deadline was purging the free slots under the adopter as it started to
// reuse them (mstress). Adopted before that deadline, each resident free slot gets a whole
// delay from its adoption, once per free period: threads that adopt the superslab in turn keep
// none that no one reuses resident for more than two delays after its first adoption. Adopted
// after it, the slots waited their delay unused and go at the next check.
void hak_arena_superslab_adopted(hak_superslab *ss) {
    uint32_t grace = ss->dirty_mask & ss->free_page_mask & ~ss->graced_mask;
    if (!grace || !ss->purge_due_ns) return; // (no deadline: within the floor, nothing to spare)
    uint64_t now = hak_coarse_now_ns();
    if (now >= ss->purge_due_ns) return;
    ss->young_mask |= grace;
    ss->graced_mask |= grace;
    if (ss->purge_due_ns < now + HAK_PURGE_DELAY_NS) ss->purge_due_ns = now + HAK_PURGE_DELAY_NS;
}

// A superslab nobody owns (abandoned by an exiting thread, or visited on the abandoned list):
// no heap checks its deadline, so one is set here, and the arena's scheduler acts on it
// (hak_superslab_purge_due_abandoned), as do later visits. Its free slots get the purge delay,
// as in a live heap: a thread of the next generation adopts them warm instead of faulting in
// again the pages its predecessor just left, which a program with a thread per generation
// pays for in page faults and time when they are purged at abandonment (bench_larson under
// speed-first: docs/notebook/2026-11-26-allocator-measurements.md, "How memory goes back to
// the OS"; mstress under the lean policy, which purged them at once until issue #38:
// docs/notebook/2026-12-08.md).
void hak_arena_superslab_unowned(hak_superslab *ss) {
    if (!hak_arena_slots_beyond_floor(ss)) {
        ss->purge_due_ns = 0;
        return;
    }
    uint64_t now = hak_coarse_now_ns();
    if (!ss->purge_due_ns)
        hak_arena_arm(ss, now + HAK_PURGE_DELAY_NS);
    else if (now >= ss->purge_due_ns)
        hak_arena_purge_aged(ss, now);
}

// Which superslabs a page of `cls` may come from (hak_superslab.affinity). Small pages (64 KiB,
// 32 to a superslab) are shared by every small class, under both policies: a free slot left by
// one class is the next fresh page of any other, and an adopter (hak_heap_adopt) takes over the
// pages of every size its predecessor left. Pages of classes above 8 KiB (medium and big pages,
// 1-4 to a superslab) have a superslab per group of classes (C0..C7, M0..M7: the route masks'
// groups): once SmallObject v3 served the classes up to 256 KiB, bench_churn's new threads
// adopted medium superslabs for one group and took over free blocks of the others' with them,
// which raised its peak RSS above what it had with those blocks on the large path; groups took
// back part of it (measured:
// docs/notebook/2026-12-07-source-comments.md#arenac-medium-superslabs-per-group). The lean policy
// gave the small classes groups too until issue #38, for bench_churn (its new threads adopted
// shared superslabs unevenly and cut fresh pages while others held free blocks of the class;
// without the groups its peak is 1.13x glibc's). On mstress, the public program bench_churn was
// written to stand for, they did the opposite: each exiting thread left its free slots in five
// superslabs, usable only by their own group's classes, and with the purge delay the program
// needs for its time its peak was 15.5-17.6 MB against 11-13 shared (glibc 11.3-12.7;
// docs/notebook/2026-12-08.md). One superslab per class, tried earlier, cost bench_larson much
// of its speed (docs/notebook/2026-11-26-allocator-measurements.md, "Adoption: which abandoned
// superslab").
unsigned hak_arena_class_affinity(unsigned cls) {
    return hak_class_kind[cls] != HAK_KIND_SMALL ? hak_class_group_bit(cls) : HAK_AFFINITY_ANY;
}

// --- Freed large regions: the large blocks' shared cache
// Freed large regions that no heap keeps (large.c, heaplarge.c) wait here, as empty superslabs
// wait in theirs, on the same purge scheduler (hak_arena_cache_next_due). A region here is only
// an address range: its block's table entry went at its free (large.c), and the range is
// handed out again, whole or split, to the next large block, joined with the cached range right
// after it, purged when its delay has passed, or unmapped to make room.
// The cache holds up to HAK_LARGE_CACHE_COUNT regions and as many bytes as
// the program recently had live (HAK_LARGE_CACHE_BYTES at least, see below), each purged
// once it has waited its policy's delay (1 s speed-first, 100 ms lean): still mapped, no longer
// resident. A request takes the smallest cached region that holds it: whole when it is at
// most twice the request (the rest stays mapped behind the block, so a realloc that grows
// it back needs no syscall and no fault; the lean policy purges that rest when the
// region's delay has passed), else split, its tail cached; when none holds it, the largest
// smaller one grown by mremap (its pages move warm). A freed region joins the cached region
// after it (resident with resident). The lean policy cached 512 KiB before issue #30 and
// unmapped it at every thread exit, so a program whose threads come and go
// (bench_thread_churn under BALANCED) mapped its large regions anew every round; with this
// cache, purged after 10 ms and at every thread exit, it mapped few, but it still faulted
// in every big block anew (see HAK_LARGE_PURGE_DELAY_NS).
// Without any cache a program that frees and allocates blocks of 32-64 KiB in a loop pays
// an mmap, a munmap and 8-16 page faults for every one of them (bench_churn under
// BALANCED took many times glibc's page faults so), and its threads' page faults wait for
// each other's mmap and munmap on the kernel's lock of the address space. 64 regions and
// 8 MiB, less than its live blocks at their peak, still left bench_churn (4 threads, ~200
// such blocks live) with many fresh mappings a run and its threads sleeping on that lock
// far more often than under mimalloc; 256 and 32 MiB leave only its peak of live blocks
// to be mapped fresh. Regions of any size are cached within the
// byte limit: a vector grown by realloc is freed at its largest, and the next one starts at
// half that size and grows back (bench_churn's threads' pointer arrays, 800 KiB -> 1.6 MiB:
// with 1 MiB as the largest region cached each was a fresh mapping whose pages faulted
// in), and a loop over blocks of several MiB reuses them (issue #30). (Measured:
// docs/notebook/2026-12-07-source-comments.md#largec-the-caches-size.)
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
static hak_lock region_lock = HAK_LOCK_INIT(large_cache);
static uintptr_t region[HAK_LARGE_CACHE_COUNT];
static size_t region_size[HAK_LARGE_CACHE_COUNT];
static uint32_t region_map[HAK_LARGE_CACHE_COUNT]; // the mapping each lies in (hak_region.map_id)
static uint64_t region_due[HAK_LARGE_CACHE_COUNT]; // when region[i] is purged (0: purged already)
static unsigned region_count;
static _Atomic unsigned region_count_hint; // region_count, for a look without the lock
static size_t region_bytes;
static _Atomic uint64_t region_next_due; // the earliest region_due or tail_due (0: none)
// Lean policy: live blocks that took a cached region whole, whose rest beyond the block (written
// by the region's last user, unused now) is purged at tail_due[i], when it would have been had
// the region stayed in the cache (large.c: hak_large_purge_tail). It was purged at once before
// issue #30: a region reused for a smaller block and then for a larger one faulted it in again.
// Each has a ticket, which its block's table entry holds too: a block freed before its tail was
// due leaves it here, and the next block to take the region, with a ticket of its own or none,
// keeps its rest. By address alone such a stale entry purged the rest of that next block, early
// (its own was due only when its region's delay ran out), and a request that took the region
// again, larger, faulted it back in: mimalloc-bench's malloc-large (20 blocks of 5-25 MiB, one
// replaced every millisecond or so) took 3.7x C7_SAFE's page faults and 1.5x its time under
// BALANCED so. Taking a freed block's entry off the list at its free instead cost a scan of the
// list under the lock at every large free, and random sizes up to 64 KiB in two threads lost 14
// % of their speed (measured: docs/notebook/2026-12-07-late.md).
static uintptr_t tail_block[HAK_LARGE_CACHE_COUNT];
static uint64_t tail_due[HAK_LARGE_CACHE_COUNT];
static uint32_t tail_ticket[HAK_LARGE_CACHE_COUNT];
static unsigned tail_count;
static uint32_t tail_last_ticket; // (31 bits: large.c's hak_large.tail)
// The last blocks whose ranges went (unmapped, or joined into the region before them): a free
// that names one of them is reported as the double free it most likely is.
#define HAK_LARGE_RECENT 16
static uintptr_t recently_gone[HAK_LARGE_RECENT];
static unsigned recent_next;
static char *chunk_next; // the untaken rest of the current span chunk
static size_t chunk_left;
static uint32_t chunk_map_id; // the current chunk's (its spans share it)
// Speed-first: recent highest live large bytes (see above), raised at every free (without a
// lock: a free that loses a race raises it at its next), halved under the region lock.
static _Atomic size_t live_peak;
static uint64_t peak_halve_ns; // when live_peak is halved next

// Only bytes that change are written: chunks shared by several large blocks keep their mark
// while others are mapped next to them (the free fast path reads the byte without atomics).
void hak_arena_mark_large(uintptr_t block, size_t size) {
    for (uintptr_t c = block >> HAK_SS_SHIFT; c <= (block + size - 1) >> HAK_SS_SHIFT; c++)
        if (hak_registry_get(c << HAK_SS_SHIFT) != HAK_REG_LARGE)
            hak_registry_set(c << HAK_SS_SHIFT, HAK_REG_LARGE);
}

// The earliest deadline of the regions, lowered to `due` if that is earlier (0: none).
static void note_due(uint64_t due) {
    uint64_t next = atomic_load_explicit(&region_next_due, memory_order_relaxed);
    if (due && (!next || due < next))
        atomic_store_explicit(&region_next_due, due, memory_order_relaxed);
}

static void region_gone(uintptr_t block) {
    recently_gone[recent_next++ % HAK_LARGE_RECENT] = block;
}

// (Under the region lock, as every function below that is not exported.) With a free slot.
static void region_add(uintptr_t block, size_t size, uint32_t map_id, uint64_t due) {
    region[region_count] = block;
    region_due[region_count] = due;
    region_map[region_count] = map_id;
    region_size[region_count++] = size;
    atomic_store_explicit(&region_count_hint, region_count, memory_order_relaxed);
    region_bytes += size;
    note_due(due);
}

// Takes slot i's region out; returns it (*due: its deadline).
static hak_region region_remove(unsigned i, uint64_t *due) {
    hak_region r = {region[i], region_size[i], region_map[i], 0};
    *due = region_due[i];
    region_bytes -= region_size[i];
    region_count--;
    atomic_store_explicit(&region_count_hint, region_count, memory_order_relaxed);
    region[i] = region[region_count];
    region_size[i] = region_size[region_count];
    region_map[i] = region_map[region_count];
    region_due[i] = region_due[region_count];
    return r;
}

// Purges slot i's region (it stays mapped and cached, and reads as zero when reused).
static void purge_slot(unsigned i) {
    hak_os_decommit((void *)region[i], region_size[i]);
    region_due[i] = 0;
}

// Purges the regions whose delay passed (madvise: they stay mapped and cached, and read as zero
// when reused) and the lean policy's tails that are due, so no thread takes a region while its
// pages are being dropped; up to `now` (malloc_trim: all of them). Returns the bytes.
static size_t purge_until(uint64_t now) {
    uint64_t next = 0;
    size_t dropped = 0;
    for (unsigned i = 0; i < region_count; i++) {
        if (!region_due[i]) continue;
        if (region_due[i] <= now) {
            dropped += region_size[i];
            purge_slot(i);
        } else if (!next || region_due[i] < next) {
            next = region_due[i];
        }
    }
    for (unsigned i = 0; i < tail_count;) {
        if (tail_due[i] > now) {
            if (!next || tail_due[i] < next) next = tail_due[i];
            i++;
            continue;
        }
        dropped += hak_large_purge_tail(tail_block[i], tail_ticket[i]);
        tail_count--;
        tail_block[i] = tail_block[tail_count];
        tail_due[i] = tail_due[tail_count];
        tail_ticket[i] = tail_ticket[tail_count];
    }
    atomic_store_explicit(&region_next_due, next, memory_order_relaxed);
    return dropped;
}

static void purge_due_locked(void) {
    uint64_t due = atomic_load_explicit(&region_next_due, memory_order_relaxed);
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
// Returns the tail's ticket, for the block's table entry (0: none scheduled).
static uint32_t schedule_tail_purge(uintptr_t block, uint64_t due) {
    if (!due || tail_count == HAK_LARGE_CACHE_COUNT) return 0;
    tail_last_ticket = (tail_last_ticket + 1) & 0x7fffffffu;
    if (!tail_last_ticket) tail_last_ticket = 1;
    tail_block[tail_count] = block;
    tail_ticket[tail_count] = tail_last_ticket;
    tail_due[tail_count++] = due;
    note_due(due);
    return tail_last_ticket;
}

int hak_arena_region_take(size_t need, size_t alignment, hak_region *r) {
    if (!atomic_load_explicit(&region_count_hint, memory_order_relaxed) &&
        !atomic_load_explicit(&region_next_due, memory_order_relaxed))
        return 0; // (a stale 0 costs a mapping)
    hak_lock_acquire(&region_lock);
    purge_due_locked(); // (a region whose delay ran out is purged before it is reused, too)
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
    for (unsigned i = 0; i < region_count; i++) {
        size_t size = region_size[i];
        if (size < need) continue;
        if (region[i] & (alignment - 1)) continue;
        int warm = region_due[i] && size / 2 <= need;
        if (best == HAK_LARGE_CACHE_COUNT || warm > best_warm ||
            (warm == best_warm && size < best_size))
            best = i, best_size = size, best_warm = warm;
    }
    if (best == HAK_LARGE_CACHE_COUNT) {
        hak_lock_release(&region_lock);
        return 0;
    }
    uint64_t due;
    *r = region_remove(best, &due);
    if (r->size / 2 > need) { // the tail: a region of its own, as cached and as due as it was
        region_add(r->block + need, r->size - need, r->map_id, due);
        r->size = need;
    } else if (hak_option[HAK_OPT_SS_MEM_LEAN] && r->size > need) {
        // The region's rest beyond the request was written by its last user; it goes back
        // when the region would have (a 64 KiB region reused for 48 KiB must not keep 16 KiB
        // resident for as long as the block lives).
        r->tail = schedule_tail_purge(r->block, due);
    }
    hak_lock_release(&region_lock);
    hak_stat_add(large, cache_hit, 1);
    return 1;
}

// When no cached region fits a request of more than a span: the largest cached region smaller
// than it (at least a quarter of it), to be grown by mremap: the pages it has stay resident and
// move with it, only the rest is faulted in (a loop over blocks of 1-32 MiB otherwise faults in
// every block whole).
int hak_arena_region_take_smaller(size_t need, hak_region *r) {
    if (!atomic_load_explicit(&region_count_hint, memory_order_relaxed)) return 0; // (a hint)
    hak_lock_acquire(&region_lock);
    unsigned best = HAK_LARGE_CACHE_COUNT;
    for (unsigned i = 0; i < region_count; i++)
        if (region_size[i] < need && region_size[i] >= need / 4 &&
            (best == HAK_LARGE_CACHE_COUNT || region_size[i] > region_size[best]))
            best = i;
    uint64_t due;
    if (best != HAK_LARGE_CACHE_COUNT) *r = region_remove(best, &due);
    hak_lock_release(&region_lock);
    return best != HAK_LARGE_CACHE_COUNT;
}

// realloc growing block `b` to `need` bytes when the region right after it is cached (the tail
// a take split off, a neighbour freed): the block takes what it needs of it, in place, with no
// syscall and, while that region is warm, no page fault; the rest stays cached. Returns the
// block's new mapping size (0: no such region, or too small).
size_t hak_arena_region_take_after(hak_region b, size_t need) {
    uintptr_t end = b.block + b.size;
    size_t grown = 0;
    hak_lock_acquire(&region_lock);
    for (unsigned i = 0; i < region_count; i++) {
        if (region[i] != end || b.size + region_size[i] < need) continue;
        if (region_map[i] != b.map_id) continue; // (mremap would refuse it)
        uint64_t due;
        hak_region next = region_remove(i, &due);
        grown = b.size + next.size;
        if (grown > need) {
            region_add(b.block + need, grown - need, b.map_id, due);
            grown = need;
        }
        break;
    }
    hak_lock_release(&region_lock);
    return grown;
}

// The next `need` bytes of the current chunk (a span), mapping a new one when they do not fit
// (a chunk is mapped once per HAK_LARGE_CHUNK of spans); *map_id: the chunk's. NULL when mmap
// fails. Only page-aligned requests of at most HAK_LARGE_SPAN_MAX under speed-first.
void *hak_arena_span(size_t need, uint32_t *map_id) {
    if (need > HAK_LARGE_SPAN_MAX || hak_option[HAK_OPT_SS_MEM_LEAN]) return NULL;
    char *span = NULL;
    hak_lock_acquire(&region_lock);
    if (chunk_left < need) {
        char *chunk = hak_os_map(HAK_LARGE_CHUNK);
        if (chunk == MAP_FAILED) goto out;
        hak_stat_mapped((long)HAK_LARGE_CHUNK);
        if (chunk_left) {
            hak_os_unmap(chunk_next, chunk_left);
            hak_stat_mapped(-(long)chunk_left);
        }
        hak_arena_mark_large((uintptr_t)chunk, HAK_LARGE_CHUNK);
        chunk_map_id = hak_large_new_map_id();
        chunk_next = chunk;
        chunk_left = HAK_LARGE_CHUNK;
    }
    span = chunk_next;
    chunk_next += need;
    chunk_left -= need;
    *map_id = chunk_map_id;
out:
    hak_lock_release(&region_lock);
    return span;
}

// The bytes of large blocks live just before a free (large.c), for the cache's bound.
void hak_arena_note_live(size_t live) {
    if (live > atomic_load_explicit(&live_peak, memory_order_relaxed))
        atomic_store_explicit(&live_peak, live, memory_order_relaxed);
}

// The cache's byte bound, at a put.
static size_t region_limit(void) {
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
// join it (the tails a take split off, spans cut from one chunk), so that a request larger
// than either finds them whole again. Only regions after it: a region keeps its start, where a
// request takes its block, and that is the part its last user wrote (joined to a region before
// it, the next block came from that one's never-written tail as often as not, and test_release's
// regrown vector faulted in much of itself again now and then; measured:
// docs/notebook/2026-11-26-allocator-measurements.md, "Large blocks"). Regions of two mappings
// never join, however adjacent: mremap refuses (EFAULT) a range across two kernel mappings.
// Returns the joined size.
static size_t coalesce(hak_region r, uint64_t *due) {
    uint64_t now = 0;
    for (unsigned i = 0; i < region_count;) {
        if (r.block + r.size != region[i] || region_map[i] != r.map_id) {
            i++;
            continue;
        }
        if (region_due[i]) { // a neighbour whose delay ran out is purged first
            if (!now) now = hak_coarse_now_ns();
            if (region_due[i] <= now) purge_slot(i);
        }
        // Only regions alike join: resident with resident, purged with purged. A warm region
        // joined to a purged one would be handed out from the purged end as often as not.
        if (!region_due[i] != !*due) break;
        uint64_t after_due;
        hak_region after = region_remove(i, &after_due);
        *due = joined_due(*due, after_due);
        r.size += after.size;
        region_gone(after.block); // (for a second free of it)
        i = 0;
    }
    return r.size;
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
    for (unsigned i = 1; i < region_count; i++) {
        uint64_t due = region_due[i], best_due = region_due[best];
        if (!due != !best_due ? !due : (due ? due < best_due : region_size[i] > region_size[best]))
            best = i;
    }
    return best;
}

#define HAK_LARGE_EVICT_MAX 16 // regions unmapped to make room for one freed region, at most

void hak_arena_region_put(hak_region r, uint64_t due) {
    hak_lock_acquire(&region_lock);
    size_t limit = region_limit();
    // Room is made (the old regions unmapped once the lock is released) unless the region alone
    // is over the bound.
    hak_region evicted[HAK_LARGE_EVICT_MAX];
    unsigned evict_count = 0;
    while (r.size <= limit && region_count && evict_count < HAK_LARGE_EVICT_MAX &&
           (region_count == HAK_LARGE_CACHE_COUNT || region_bytes + r.size > limit)) {
        uint64_t old_due;
        evicted[evict_count] = region_remove(eviction_victim(), &old_due);
        region_gone(evicted[evict_count++].block);
    }
    int cached = region_count < HAK_LARGE_CACHE_COUNT && region_bytes + r.size <= limit;
    if (cached) {
        if (!due) due = hak_coarse_now_ns() + hak_arena_large_purge_delay();
        size_t joined = coalesce(r, &due);
        region_add(r.block, joined, r.map_id, due);
        purge_due_locked();
    } else {
        region_gone(r.block);
    }
    hak_lock_release(&region_lock);
    for (unsigned i = 0; i < evict_count; i++) {
        hak_stat_mapped(-(long)evicted[i].size);
        hak_os_unmap((void *)evicted[i].block, evicted[i].size);
    }
    hak_stat_add(large, cache_evict, evict_count);
    if (cached) {
        hak_stat_add(large, cache_put, 1);
        return;
    }
    hak_stat_mapped(-(long)r.size);
    hak_os_unmap((void *)r.block, r.size);
}

// Was `block` freed (a cached region starts there, or its range went lately)? For the report of
// a pointer that is not a live large block (large.c): a double free, or an invalid pointer.
int hak_arena_region_freed(uintptr_t block) {
    int freed = 0;
    hak_lock_acquire(&region_lock);
    for (unsigned i = 0; i < region_count; i++)
        freed |= region[i] == block;
    for (unsigned i = 0; i < HAK_LARGE_RECENT; i++)
        freed |= recently_gone[i] == block;
    hak_lock_release(&region_lock);
    return freed;
}

static size_t region_release(void) {
    size_t released = 0;
    hak_lock_acquire(&region_lock);
    while (region_count) {
        uint64_t due;
        hak_region r = region_remove(region_count - 1, &due);
        region_gone(r.block);
        hak_os_unmap((void *)r.block, r.size);
        hak_stat_mapped(-(long)r.size);
        hak_stat_add(large, cache_evict, 1);
        released += r.size;
    }
    if (chunk_left) {
        hak_os_unmap(chunk_next, chunk_left);
        hak_stat_mapped(-(long)chunk_left);
        released += chunk_left;
        chunk_left = 0;
    }
    hak_lock_release(&region_lock);
    return released;
}

// A block whose range went elsewhere (the secure build's quarantine), remembered as freed.
void hak_arena_region_gone(uintptr_t block) {
    hak_lock_acquire(&region_lock);
    region_gone(block);
    hak_lock_release(&region_lock);
}

// Freed large regions wait in the cache above for a delay of their own before they are
// purged, and the heaps' own regions for as long (heaplarge.c).
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
// when a request took them, at the same peak RSS either way. (Near its peak, 544 of its 557
// MiB at a free, the program had 380-384 MiB live; 95-100 MiB were cached regions, resident,
// and 55-65 MiB the rest of regions behind live blocks that took them whole:
// docs/notebook/2026-12-07-night.md.) bench_large pays for the long delay with a higher peak
// (its cached regions are still resident when the peak comes) in less time. The lean policy
// keeps 100 ms. (Measured: docs/notebook/2026-12-07-source-comments.md#largec-purge-delay.)
#define HAK_LARGE_PURGE_DELAY_LEAN_NS (10 * (uint64_t)HAK_PURGE_DELAY_NS)
#define HAK_LARGE_PURGE_DELAY_NS      (100 * (uint64_t)HAK_PURGE_DELAY_NS)
uint64_t hak_arena_large_purge_delay(void) {
    return hak_option[HAK_OPT_SS_MEM_LEAN] ? HAK_LARGE_PURGE_DELAY_LEAN_NS
                                           : HAK_LARGE_PURGE_DELAY_NS;
}

// The purge scheduler of the freed memory that no heap owns, the empty superslabs, the freed
// large regions and the abandoned superslabs' free slots: the earliest deadline of any (0:
// none), read by every heap's deadline check (purge.c: hak_purge_due), and the purge of
// whichever has one that passed.
static uint64_t earliest(uint64_t a, uint64_t b) {
    return a && b ? (a < b ? a : b) : a | b;
}

uint64_t hak_arena_cache_next_due(void) {
    uint64_t a = atomic_load_explicit(&cache_purge_next_ns, memory_order_relaxed);
    uint64_t b = atomic_load_explicit(&region_next_due, memory_order_relaxed);
    return earliest(earliest(a, b), hak_superslab_abandoned_next_due());
}

void hak_arena_cache_purge_due(uint64_t now) {
    uint64_t abandoned_due = hak_superslab_abandoned_next_due();
    if (abandoned_due && now >= abandoned_due) hak_superslab_purge_due_abandoned(now);
    uint64_t region_due_next = atomic_load_explicit(&region_next_due, memory_order_relaxed);
    if (region_due_next && now >= region_due_next) {
        hak_lock_acquire(&region_lock);
        purge_due_locked();
        hak_lock_release(&region_lock);
    }
    uint64_t due = atomic_load_explicit(&cache_purge_next_ns, memory_order_relaxed);
    if (!due || now < due) return;
    hak_lock_acquire(&cache_lock);
    uint64_t next = 0;
    for (hak_superslab *ss = cache_first; ss; ss = ss->next) {
        if (!ss->purge_due_ns) continue;
        if (ss->purge_due_ns <= now) {
            decommit(ss);
            ss->purge_due_ns = 0;
        } else if (!next || ss->purge_due_ns < next) {
            next = ss->purge_due_ns;
        }
    }
    atomic_store_explicit(&cache_purge_next_ns, next, memory_order_relaxed);
    hak_lock_release(&cache_lock);
}

// malloc_trim: every cached superslab and cached large region not purged yet, and every pending
// tail, go back to the kernel now. Returns the bytes.
size_t hak_arena_trim_cache(void) {
    hak_lock_acquire(&region_lock);
    size_t dropped = purge_until(UINT64_MAX);
    hak_lock_release(&region_lock);
    hak_lock_acquire(&cache_lock);
    for (hak_superslab *ss = cache_first; ss; ss = ss->next) {
        ss->purge_due_ns = 0;
        if (!ss->dirty_mask) continue;
        decommit(ss);
        dropped += HAK_SS_SIZE - HAK_SS_HEADER_SIZE;
    }
    atomic_store_explicit(&cache_purge_next_ns, 0, memory_order_relaxed);
    hak_lock_release(&cache_lock);
    return dropped;
}

// fork: the region lock before the large table's shards (large.c: a tail's purge takes one
// under it), so it is taken in hak_arena_fork_prepare, before hak_large_fork_prepare.
void hak_arena_fork_prepare(void) {
    hak_lock_acquire(&cache_lock);
    hak_lock_acquire(&region_lock);
}
void hak_arena_fork_parent(void) {
    hak_lock_release(&region_lock);
    hak_lock_release(&cache_lock);
}
void hak_arena_fork_child(void) {
    hak_lock_reset(&region_lock);
    hak_lock_reset(&cache_lock);
}
