// The counters (stats.h): the process-wide groups, the mapped-bytes gauge, and the hot-path
// counters of exited heaps merged. Printing them is report.c's, at the top of the layers: it
// walks the live heaps and the routes.
#include "stats.h"

#include "types.h"

hak_ss_os_stats hak_stats_ss_os;
hak_large_stats hak_stats_large;

void hak_stat_mapped(long delta_bytes) {
    long kb = delta_bytes / 1024;
    uint64_t now =
        atomic_fetch_add_explicit(&hak_stats_ss_os.mapped_kb, (uint64_t)kb, memory_order_relaxed) +
        (uint64_t)kb;
    uint64_t peak = atomic_load_explicit(&hak_stats_ss_os.mapped_peak_kb, memory_order_relaxed);
    while (delta_bytes > 0 && now > peak &&
           !atomic_compare_exchange_weak(&hak_stats_ss_os.mapped_peak_kb, &peak, now)) {
    }
}

#if HAK_STATS_HOT
// Counters of exited threads, and (at exit) the sum over everything.
_Atomic uint64_t hak_stats_merged[HAK_HOT_STATS_WORDS];

void hak_stats_merge_heap(struct hak_heap *heap) {
    uint64_t *counters = (uint64_t *)&heap->hot;
    for (size_t i = 0; i < HAK_HOT_STATS_WORDS; i++) {
        atomic_fetch_add_explicit(&hak_stats_merged[i], counters[i], memory_order_relaxed);
        counters[i] = 0;
    }
}

#else
void hak_stats_merge_heap(struct hak_heap *heap) {
    (void)heap;
}
#endif
