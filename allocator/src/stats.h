// Stats: one format, `[GROUP] key=value ...` per group at exit. Fields are declared once here
// (X-macros); the printer in stats.c walks the same lists.
//
// Cold groups (OS and large-block events) are global atomics, counted in every variant.
// Hot groups (per-class malloc/free) live in each heap and exist only when HAK_STATS_HOT is
// compiled in (stats and debug variants); they are merged at thread exit and at exit. A hot
// group requested from the fast variant prints `compiled=0` instead of zeros.
#ifndef HAK_STATS_H
#define HAK_STATS_H

#include <stdatomic.h>
#include <stdint.h>

#include "sizeclass.h"

#ifndef HAK_STATS_HOT
#define HAK_STATS_HOT 0
#endif

// X(GROUP, kind): kind COLD = scalar fields below, HOT = per-class counters below, PATH = the
// per-class counters summed over the classes routed to one front path (engagement counters).
#define HAK_STATS_GROUPS(X)                                                                        \
    X(SS_OS_STATS, COLD)                                                                           \
    X(LARGE_STATS, COLD)                                                                           \
    X(LOCK_STATS, COLD)                                                                            \
    X(HEAP_STATS, HOT)                                                                             \
    X(FRONT_CLASS, HOT)                                                                            \
    X(TINY_HEAP_STATS, PATH)                                                                       \
    X(HOTHEAP_V2_STATS, PATH)                                                                      \
    X(SMALL_HEAP_V3_STATS, PATH)

#define HAK_SS_OS_STATS_FIELDS(X)                                                                  \
    X(alloc)               /* superslabs handed to heaps */                                        \
    X(free)                /* superslabs given back by heaps */                                    \
    X(mmap_total)          /* mmap calls */                                                        \
    X(munmap)              /* munmap calls */                                                      \
    X(madvise)             /* madvise calls */                                                     \
    X(mprotect)            /* page slots made writable at their first use */                       \
    X(slot_purge_kb)       /* free page slots of live superslabs given back (madvise DONTNEED) */  \
    X(block_purge_kb)      /* idle free medium blocks given back (lean policy)                 */  \
    X(shrink_purge)        /* purges by a shrinking heap, before the delay (HAK_SHRINK_BYTES)  */  \
    X(cache_hit)           /* superslab taken from the empty-superslab cache */                    \
    X(cache_miss)          /* superslab had to be mapped */                                        \
    X(cache_release)       /* empty superslab unmapped because the cache was full */               \
    X(abandon)             /* superslabs left with live blocks by an exiting thread */             \
    X(adopt)               /* abandoned superslabs taken over by another thread */                 \
    X(abandoned_reclaimed) /* abandoned superslabs that emptied and went back to the OS policy */  \
    X(remote_emptied) /* pages a sweep found emptied by remote frees (then as if emptied locally)  \
                       */                                                                          \
    X(mapped_kb)      /* currently mapped superslab + large memory */                              \
    X(mapped_peak_kb)

#define HAK_LARGE_STATS_FIELDS(X)                                                                  \
    X(alloc)                                                                                       \
    X(free)                                                                                        \
    X(cache_hit)        /* served from the cache of freed large regions */                         \
    X(cache_put)        /* freed regions kept in that cache */                                     \
    X(cache_evict)      /* cached regions unmapped to make room for a freed one */                 \
    X(heap_cache_hit)   /* served from the freeing thread's own cached regions (speed-first) */    \
    X(heap_cache_put)   /* freed regions kept in the freeing thread's own cache */                 \
    X(mapped)           /* served by a new mapping */                                              \
    X(mremap)           /* realloc growths done by mremap (in place or moved, never copied) */     \
    X(realloc_in_place) /* reallocs that kept the block where it was */                            \
    X(live_kb)          /* currently allocated large memory (usable sizes) */

// Per-class hot counters: key c<i>_<name> for tiny classes, mid_<name> summed over the mid pool.
#define HAK_HEAP_STATS_COUNTERS(X)  X(fast) X(slow)
#define HAK_FRONT_CLASS_COUNTERS(X) X(alloc) X(free) X(remote_free)
// Counted per class for the PATH groups only:
//   free_slow  owner frees the fast path could not take (the page found from the address was
//              not on the fast path: full page); printed as page_of_fail
//   refill     the front's slow path switched the class to another page (partial, retained
//              or fresh)
//   fallback   the front's own lists had no page and it went to the backend (fresh page from a
//              superslab, or an adopted superslab)
#define HAK_PATH_COUNTERS(X) X(free_slow) X(refill) X(fallback)

#define HAK_FIELD(name) _Atomic uint64_t name;
typedef struct {
    HAK_SS_OS_STATS_FIELDS(HAK_FIELD)
} hak_ss_os_stats;
typedef struct {
    HAK_LARGE_STATS_FIELDS(HAK_FIELD)
} hak_large_stats;
#undef HAK_FIELD

extern hak_ss_os_stats hak_stats_ss_os;
extern hak_large_stats hak_stats_large;

#define hak_stat_add(group, field, n)                                                              \
    atomic_fetch_add_explicit(&hak_stats_##group.field, (uint64_t)(n), memory_order_relaxed)
#define hak_stat_sub(group, field, n)                                                              \
    atomic_fetch_sub_explicit(&hak_stats_##group.field, (uint64_t)(n), memory_order_relaxed)
void hak_stat_mapped(long delta_bytes);

#define HAK_COUNTER(name) uint64_t name[HAK_CLASS_COUNT];
typedef struct {
    HAK_HEAP_STATS_COUNTERS(HAK_COUNTER)
    HAK_FRONT_CLASS_COUNTERS(HAK_COUNTER)
    HAK_PATH_COUNTERS(HAK_COUNTER)
} hak_hot_stats;
#undef HAK_COUNTER

#if HAK_STATS_HOT
#define HAK_HOT_STAT(heap, counter, cls) ((heap)->hot.counter[cls]++)
#else
#define HAK_HOT_STAT(heap, counter, cls) ((void)0)
#endif

struct hak_heap;
void hak_stats_merge_heap(struct hak_heap *heap);
#if HAK_STATS_HOT
// The hot-path counters of every heap destroyed so far, summed word by word (stats.c).
#define HAK_HOT_STATS_WORDS (sizeof(hak_hot_stats) / sizeof(uint64_t))
extern _Atomic uint64_t hak_stats_merged[HAK_HOT_STATS_WORDS];
#endif
void hak_stats_print(void); // report.c: every enabled group, at exit

#endif
