// The route table: which front serves each size class. Latched into heap->route[] once per
// thread (hak_heap_create) from the options, never consulted on the fast paths.
//
// Precedence when several switches claim a class (first match wins, the order of the checks in
// hak_route_for_class):
//   1. SmallObject v3   HAKMEM_SMALL_HEAP_V3_ENABLED=1 and the class in SMALL_HEAP_V3_CLASSES
//   2. HotHeap v2       HAKMEM_TINY_HOTHEAP_V2=1 and the class in TINY_HOTHEAP_CLASSES
//   3. TinyHeap         the class in TINY_HEAP_CLASSES (or the TINY_HEAP_PROFILE's mask)
//   4. legacy           everything else, and every mid-pool class
// The experimental switches win over the profile, so turning one on for an A/B always changes
// the route of its classes (and its group's route_hits shows it).
#include "internal.h"
#include "options.h"

// Masks cover the tiny groups C0..C7 only (bit i = every class of group Ci); mid-pool classes
// stay legacy.
#define HAK_TINY_CLASS_MASK 0xffu

static unsigned tinyheap_mask(void) {
    long override = hak_option[HAK_OPT_TINY_HEAP_CLASSES];
    if (override >= 0) return (unsigned) override & HAK_TINY_CLASS_MASK;
    switch (hak_option[HAK_OPT_TINY_HEAP_PROFILE]) {
    case HAK_TINY_PROFILE_C7_SAFE:
        return 1u << 7; // class 7 (513-1024 B)
    case HAK_TINY_PROFILE_LEGACY:
    default:
        return 0;
    }
}

static int in_mask(long mask, unsigned cls) {
    return cls < HAK_TINY_CLASS_COUNT && ((unsigned long)mask >> hak_tiny_group[cls]) & 1u;
}

const hak_front *hak_route_for_class(unsigned cls) {
    if (hak_option[HAK_OPT_SMALL_HEAP_V3_ENABLED] &&
        in_mask(hak_option[HAK_OPT_SMALL_HEAP_V3_CLASSES], cls))
        return &hak_front_smallheap_v3;
    if (hak_option[HAK_OPT_TINY_HOTHEAP_V2] &&
        in_mask(hak_option[HAK_OPT_TINY_HOTHEAP_CLASSES], cls))
        return &hak_front_hotheap_v2;
    if (in_mask(tinyheap_mask(), cls)) return &hak_front_tinyheap;
    return &hak_front_legacy;
}

void hak_route_latch(hak_heap *heap) {
    for (unsigned c = 0; c < HAK_CLASS_COUNT; c++)
        heap->route[c] = hak_route_for_class(c);
}

void hak_route_print(void) {
    for (unsigned c = 0; c < HAK_CLASS_COUNT; c++) {
        unsigned lo = c == 0 ? 0 : hak_class_block_size[c - 1] + 1;
        if (hak_class_is_tiny(c))
            hak_message("hakmem: route c%u (%u..%u B) -> %s\n", hak_tiny_group[c], lo,
                        hak_class_block_size[c], hak_route_for_class(c)->name);
        else
            hak_message("hakmem: route mid%u (%u..%u B) -> %s\n", c - HAK_TINY_CLASS_COUNT, lo,
                        hak_class_block_size[c], hak_route_for_class(c)->name);
    }
}
