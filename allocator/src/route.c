// The route table: which front serves each size class. Latched into heap->route[] once per
// thread (hak_heap_create) from the options, never consulted on the fast paths.
//
// Precedence when several switches claim a class (first match wins, the order of the checks in
// hak_route_for_class):
//   1. SmallObject v3   HAKMEM_SMALL_HEAP_V3_ENABLED=1 (the default) and the class in
//                       SMALL_HEAP_V3_CLASSES (default 0xff7f: up to 256 KiB, all but C7)
//   2. HotHeap v2       HAKMEM_TINY_HOTHEAP_V2=1 and the class in TINY_HOTHEAP_CLASSES
//   3. TinyHeap         the class in TINY_HEAP_CLASSES (or the TINY_HEAP_PROFILE's mask)
//   4. legacy           everything else
// The switches win in that order over the profile, so turning one on for an A/B changes the
// route of its classes (and its group's route_hits shows it).
#include <string.h>

#include "heap.h"
#include "options.h"

// Masks: bit i = every class of tiny group Ci (C0..C7, bits 0-7), bit 8 + j = every class of
// mid group Mj ((1, 2] KiB, (2, 4] KiB, ... (128, 256] KiB; bits 8-15).
#define HAK_CLASS_MASK 0xffffu

size_t hak_small_max = HAK_MID_MAX;
uint8_t hak_class_kind[HAK_CLASS_COUNT];
uint8_t hak_class_merged_into[HAK_TINY_CLASS_COUNT];
uint8_t hak_route_class_of_size[HAK_TINY_MAX + 1];
uint8_t hak_route_class_of_mid[HAK_MID_INDEX_COUNT];

static unsigned tinyheap_mask(void) {
    long override = hak_option[HAK_OPT_TINY_HEAP_CLASSES];
    if (override >= 0) return (unsigned) override & HAK_CLASS_MASK;
    switch (hak_option[HAK_OPT_TINY_HEAP_PROFILE]) {
    case HAK_TINY_PROFILE_C7_SAFE:
        return 1u << 7; // class 7 (513-1024 B)
    case HAK_TINY_PROFILE_LEGACY:
    default:
        return 0;
    }
}

static int in_mask(long mask, unsigned cls) {
    return ((unsigned long)mask & HAK_CLASS_MASK) >> hak_class_group_bit(cls) & 1u;
}

// The fronts' table as data (types.h: HAK_FRONTS). Compared by address (report.c).
#define HAK_FRONT_ROW(id, name, carve, blocks, spare, sized)                                       \
    [HAK_FRONT_##id] = {name, carve, blocks, spare, sized},
const hak_front hak_fronts[HAK_FRONT_COUNT] = {HAK_FRONTS(HAK_FRONT_ROW)};
#undef HAK_FRONT_ROW

// Each class's front (HAK_FRONT_*), decided once from the options at process init; every
// heap copies it (hak_route_latch): deciding it again for each class of each new thread cost
// a program whose threads live for one malloc more than the rest of its heap's set-up.
static uint8_t route_of[HAK_CLASS_COUNT];

static unsigned decide_route(unsigned cls) {
    if (hak_option[HAK_OPT_SMALL_HEAP_V3_ENABLED] &&
        in_mask(hak_option[HAK_OPT_SMALL_HEAP_V3_CLASSES], cls))
        return HAK_FRONT_SMALLHEAP_V3;
    if (hak_option[HAK_OPT_TINY_HOTHEAP_V2] &&
        in_mask(hak_option[HAK_OPT_TINY_HOTHEAP_CLASSES], cls))
        return HAK_FRONT_HOTHEAP_V2;
    if (in_mask(tinyheap_mask(), cls)) return HAK_FRONT_TINYHEAP;
    return HAK_FRONT_LEGACY;
}

const hak_front *hak_route_for_class(unsigned cls) {
    return &hak_fronts[route_of[cls]];
}

// Page geometry and the largest small size, from the routes (process init, after the
// options). Classes above 32 KiB exist only on SmallObject v3, whose pages grow with the
// class so that each holds at least 7 blocks (page 0 gives 4 KiB to the header): 64 KiB pages
// up to 8 KiB, 512 KiB pages up to 32 KiB, one 2 MiB page above (31-51 blocks up to 64 KiB,
// whose 512 KiB pages held 7-12 and ran dry every few mallocs under random sizes:
// docs/notebook/2026-12-07-remote-frees.md). The other fronts keep 64 KiB pages (up to
// 32 KiB).
void hak_route_init(void) {
    for (unsigned c = 0; c < HAK_CLASS_COUNT; c++)
        route_of[c] = (uint8_t)decide_route(c);
    int served = 1;
    for (unsigned c = 0; c < HAK_CLASS_COUNT; c++) {
        uint32_t size = hak_class_block_size[c];
        int v3 = hak_route_for_class(c)->sized_pages;
        hak_class_kind[c] = !v3 || size <= 8192 ? HAK_KIND_SMALL
                            : size <= 32768     ? HAK_KIND_MEDIUM
                                                : HAK_KIND_BIG;
        served = served && (v3 || size <= HAK_MID_MAX);
        if (served) hak_small_max = size;
    }
    // C6's odd classes start merged into the next (types.h, hak_class_merged_into); both
    // are of one group, so of one route (route masks are per group).
    for (unsigned c = 0; c < HAK_TINY_CLASS_COUNT; c++)
        hak_class_merged_into[c] =
            (uint8_t)(hak_tiny_group[c] == 6 && hak_class_block_size[c] % 64 ? c + 1 : c);
    // Every heap starts with these size -> class tables (a copy, hak_heap_create: a heap's own
    // tiny table changes when it splits a merged class). Computed once here: built per heap,
    // the tables (the mid table most of all, with the classes up to 256 KiB served) cost every
    // thread's start far more than the copy does (measured:
    // docs/notebook/2026-12-02-mid-classes-default.md, "Every thread's start").
    for (size_t n = 0; n <= HAK_TINY_MAX; n++)
        hak_route_class_of_size[n] = hak_class_merged_into[hak_tiny_class_of(n)];
    // Index i covers sizes (256 (i - 1), 256 i]; class boundaries are multiples of 256 B.
    for (size_t i = 0; i < HAK_MID_INDEX_COUNT; i++) {
        size_t n = i * 256;
        hak_route_class_of_mid[i] =
            n <= HAK_TINY_MAX || n > hak_small_max ? HAK_CLASS_NONE : (uint8_t)hak_mid_class_of(n);
    }
}

void hak_route_latch(hak_heap *heap) {
    memcpy(heap->route, route_of, sizeof heap->route);
}

void hak_route_print(void) {
    for (unsigned c = 0; c < HAK_CLASS_COUNT; c++) {
        unsigned lo = c == 0 ? 0 : hak_class_block_size[c - 1] + 1;
        static const char *const kind_name[HAK_KIND_COUNT] = {"64 KiB", "512 KiB", "2 MiB"};
        if (hak_class_block_size[c] > hak_small_max)
            hak_message("hakmem: route m%u (%u..%u B) -> large (not served by a size class)\n",
                        hak_class_group_bit(c) - HAK_TINY_GROUP_COUNT, lo, hak_class_block_size[c]);
        else if (hak_class_is_tiny(c))
            hak_message("hakmem: route c%u (%u..%u B) -> %s, %s pages\n", hak_tiny_group[c], lo,
                        hak_class_block_size[c], hak_route_for_class(c)->name,
                        kind_name[hak_class_kind[c]]);
        else
            hak_message("hakmem: route m%u (%u..%u B) -> %s, %s pages\n",
                        hak_class_group_bit(c) - HAK_TINY_GROUP_COUNT, lo, hak_class_block_size[c],
                        hak_route_for_class(c)->name, kind_name[hak_class_kind[c]]);
    }
}
