// The route table: which front serves each size class. Latched into heap->route[] once per
// thread (hak_heap_create) from the options, never consulted on the fast paths.
//
// Adding a front (issue #4): write front_<name>.c defining a `const hak_front`, add its value
// to the HAKMEM_TINY_HEAP_PROFILE row in options.h (or its own option row), and add one row
// to route_for_class() below. Precedence when several switches claim a class is the order of
// the checks in route_for_class(), first match wins.
#include "internal.h"
#include "options.h"

static const hak_front *route_for_class(unsigned cls) {
    (void)cls;
    switch (hak_option[HAK_OPT_TINY_HEAP_PROFILE]) {
    case HAK_TINY_PROFILE_LEGACY:
    default:
        return &hak_front_legacy;
    }
}

void hak_route_latch(hak_heap *heap) {
    for (unsigned c = 0; c < HAK_CLASS_COUNT; c++)
        heap->route[c] = route_for_class(c);
}

void hak_route_print(void) {
    for (unsigned c = 0; c < HAK_CLASS_COUNT; c++) {
        unsigned lo = c == 0 ? 0 : hak_class_block_size[c - 1] + 1;
        if (hak_class_is_tiny(c))
            hak_message("hakmem: route c%u (%u..%u B) -> %s\n", c, lo, hak_class_block_size[c],
                        route_for_class(c)->name);
        else
            hak_message("hakmem: route mid%u (%u..%u B) -> %s\n", c - HAK_TINY_CLASS_COUNT, lo,
                        hak_class_block_size[c], route_for_class(c)->name);
    }
}
