// The arena: where superslabs come from and what happens to the free memory in them.
//   - empty superslabs are kept in a cache (HAKMEM_SS_CACHE_SIZE bytes) instead of munmap,
//     because a heap that empties and refills a superslab would otherwise pay two syscalls and
//     512 page faults each time. Cached superslabs stay registered (kind HAK_SS_FREE), so a
//     stale free() into one is reported, not followed. That is the speed-first policy.
//   - the lean policy (HAKMEM_SS_MEM_LEAN=1, profile BALANCED) keeps at most
//     SS_MEM_LEAN_TARGET_MB of empty superslabs and, with SS_MEM_LEAN_DECOMMIT, gives their
//     memory back once they have waited 1 ms in the cache (the header page stays, so a stale
//     free() is still reported): resident memory after a burst falls back to the live set, and
//     reusing a cached superslab costs page faults instead of an mmap.
//   - the free page slots of live superslabs are purged after a delay beyond a floor (below,
//     "A page slot of a live superslab became free"); the deadlines of a heap's own superslabs
//     are checked by the heap (purge.c), those of superslabs nobody owns here.
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

#define HAK_DIRTY_SLOTS_MAX     4
#define HAK_LEAN_PURGE_DELAY_NS (1u * 1000u * 1000u)

// Out of address space (purge.c: hak_release_cached): every cached superslab unmapped.
// Returns the bytes.
size_t hak_arena_release_cache(void) {
    size_t released = 0;
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
// after one that exited, reuses it warm) and is decommitted after it (purge.c: hak_purge_due): 10
// ms under speed-first, 1 ms under the lean policy, as its free page slots. The lean policy
// decommitted at once until issue #38: with thread churn (mstress, a thread a round) every
// exiting thread's empty superslabs went to the cache and the next thread faulted them back in
// (docs/notebook/2026-11-28-thread-churn.md). Every cached superslab is decommitted or has its
// deadline (the deadline is set before the lock, so no other thread's take can void it).
void hak_arena_superslab_put(hak_superslab *ss) {
    ss->kind = HAK_SS_FREE;
    ss->dirty_mask = ~0u; // whatever its pages were, they may be resident until decommitted
    size_t limit = cache_limit();
    int lean = hak_option[HAK_OPT_SS_MEM_LEAN] != 0;
    int decommits = !lean || hak_option[HAK_OPT_SS_MEM_LEAN_DECOMMIT];
    uint64_t delay = lean ? HAK_LEAN_PURGE_DELAY_NS : HAK_PURGE_DELAY_NS;
    ss->purge_due_ns = !decommits ? 0 : hak_coarse_now_ns() + delay;
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
// are purged once that has lasted a delay: 10 ms under speed-first, 1 ms under the lean
// policy (the coarse clock ticks every few ms). No timer thread: the owning heap checks its
// earliest deadline whenever it frees a page slot and in its periodic sweep (slow paths), and
// thread exit and abandonment purge as well; an emptied superslab leaves through the cache
// policy above. Purging at once made mid sizes (2-8 blocks a page, so pages empty and refill
// constantly) fault every refilled page back in, under both policies, and fall far behind
// mimalloc's throughput (mid_large_mt1; measured:
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

uint64_t hak_arena_purge_delay(void) {
    return hak_option[HAK_OPT_SS_MEM_LEAN] ? HAK_LEAN_PURGE_DELAY_NS : HAK_PURGE_DELAY_NS;
}

// A deadline passed: the resident free slots go, but those an adopter was given a grace for
// (young: hak_arena_superslab_adopted), which wait one delay more, with a deadline again while
// they are beyond the floor. Looked at a whole delay late, the young go too: they waited as
// long.
void hak_arena_purge_aged(hak_superslab *ss, uint64_t now) {
    hak_superslab_purge(ss, now < ss->purge_due_ns + hak_arena_purge_delay());
    if (hak_arena_slots_beyond_floor(ss)) hak_arena_arm(ss, now + hak_arena_purge_delay());
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
    if (ss->purge_due_ns < now + hak_arena_purge_delay())
        ss->purge_due_ns = now + hak_arena_purge_delay();
}

// A superslab nobody owns (abandoned by an exiting thread, or visited on the abandoned list):
// no heap checks its deadline, so one is set here and acted on here. The lean policy purges
// every resident free slot at once. Speed-first gives the purge delay a chance, as in a live
// heap: a thread of the next generation adopts the slots warm instead of faulting in again
// the pages its predecessor just left, which a program with a thread per generation
// (bench_larson) pays for in page faults and time when they are purged at abandonment
// (measured: docs/notebook/2026-11-26-allocator-measurements.md, "How memory goes back to
// the OS"), and the first abandonment or visit after the deadline purges them all if they are
// still more than the floor.
void hak_arena_superslab_unowned(hak_superslab *ss) {
    if (!hak_arena_slots_beyond_floor(ss)) {
        ss->purge_due_ns = 0;
    } else if (hak_option[HAK_OPT_SS_MEM_LEAN]) {
        hak_superslab_purge(ss, 0);
    } else {
        uint64_t now = hak_coarse_now_ns();
        if (!ss->purge_due_ns)
            hak_arena_arm(ss, now + HAK_PURGE_DELAY_NS);
        else if (now >= ss->purge_due_ns)
            hak_arena_purge_aged(ss, now);
    }
}

// Which superslabs a page of `cls` may come from (hak_superslab.affinity). The lean policy gives
// every group of classes (C0..C7, M0..M7: the route masks' groups) superslabs of its own, so
// that an adopter (hak_heap_adopt) takes over pages of the sizes it needs, not up to 31 pages
// of any other sizes with them. With pages shared by all classes, bench_churn's new threads
// adopted the superslabs of the exited ones unevenly and cut fresh pages while the others held
// the free blocks: most of its fresh pages were cut while other heaps had free blocks of the
// class. One superslab per class did as well for memory but cost bench_larson (a thread per
// generation, 28 classes) much of its speed: each new thread cut a page in a superslab of each
// class, and the free-list heads it pops sat in as many more header pages and cache lines.
// Speed-first shares superslabs between all classes: with groups there too, bench_churn ran
// faster in less memory, but bench_larson slower in more (docs/allocator.md, "Adoption";
// measured: docs/notebook/2026-11-26-allocator-measurements.md, "Adoption: which abandoned
// superslab"). Pages of classes above 8 KiB (medium and big pages, 1-4 to a superslab) have
// groups under both policies: larson's classes are all small, and once SmallObject v3 served
// the classes up to 256 KiB, bench_churn's new threads adopted medium superslabs for one group
// and took over free blocks of the others' with them, which raised its peak RSS above what it
// had with those blocks on the large path; groups took back part of it (measured:
// docs/notebook/2026-12-07-source-comments.md#arenac-medium-superslabs-per-group).
unsigned hak_arena_class_affinity(unsigned cls) {
    return hak_option[HAK_OPT_SS_MEM_LEAN] || hak_class_kind[cls] != HAK_KIND_SMALL
               ? hak_class_group_bit(cls)
               : HAK_AFFINITY_ANY;
}

// Freed large regions wait in the large cache (large.c) for a delay of their own before they are
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
// when a request took them, at the same peak RSS either way (the peak is the live blocks and
// the one being replaced, not what waits in the cache). bench_large pays for it with a higher
// peak (its cached regions are still resident when the peak comes) in less time. The lean
// policy keeps 100 ms. (Measured:
// docs/notebook/2026-12-07-source-comments.md#largec-purge-delay.)
#define HAK_LARGE_PURGE_DELAY_LEAN_NS (10 * (uint64_t)HAK_PURGE_DELAY_NS)
#define HAK_LARGE_PURGE_DELAY_NS      (100 * (uint64_t)HAK_PURGE_DELAY_NS)
uint64_t hak_arena_large_purge_delay(void) {
    return hak_option[HAK_OPT_SS_MEM_LEAN] ? HAK_LARGE_PURGE_DELAY_LEAN_NS
                                           : HAK_LARGE_PURGE_DELAY_NS;
}

// The purge scheduler of the two caches of freed memory that no heap owns, the empty superslabs
// (here) and the freed large regions (large.c): the earliest deadline of either (0: none), read
// by every heap's deadline check (purge.c: hak_purge_due), and the purge of whichever has one
// that passed.
uint64_t hak_arena_cache_next_due(void) {
    uint64_t a = atomic_load_explicit(&cache_purge_next_ns, memory_order_relaxed);
    uint64_t b = hak_large_cache_next_due();
    return a && b ? (a < b ? a : b) : a | b;
}

void hak_arena_cache_purge_due(uint64_t now) {
    uint64_t large_due = hak_large_cache_next_due();
    if (large_due && now >= large_due) hak_large_cache_purge_due(now);
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

// malloc_trim: every cached superslab not decommitted yet goes back to the kernel now.
// Returns the bytes.
size_t hak_arena_trim_cache(void) {
    size_t dropped = 0;
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

void hak_arena_fork_prepare(void) {
    hak_lock_acquire(&cache_lock);
}
void hak_arena_fork_parent(void) {
    hak_lock_release(&cache_lock);
}
void hak_arena_fork_child(void) {
    hak_lock_reset(&cache_lock);
}
