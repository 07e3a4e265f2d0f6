// Large blocks (above the mid pool, or aligned beyond what a size class gives): each gets its
// own region with a superslab header in front, so free() finds it exactly like a small block
// (mask, registry) and the header says HAK_SS_LARGE. Regions that fit in 2 MiB come from the
// OS policy's superslab cache; bigger ones are mapped and unmapped directly.
#include <string.h>

#include "internal.h"

// Block offset from the header: past the header, aligned; exactly 2 MiB for alignments of
// 2 MiB or more (the header then sits 2 MiB before the block, see hak_superslab_of).
static size_t block_offset(size_t alignment) {
    if (alignment >= HAK_SS_SIZE) return HAK_SS_SIZE;
    return alignment > HAK_SS_HEADER_SIZE ? alignment : HAK_SS_HEADER_SIZE;
}

void *hak_large_alloc(size_t size, size_t alignment, int zero) {
    size_t offset = block_offset(alignment);
    if (size > HAK_ADDRESS_LIMIT) return NULL;
    size_t total = (offset + size + 4095) & ~(size_t)4095;
    hak_superslab *ss;
    char *map_base;
    size_t map_size;
    int from_cache = total <= HAK_SS_SIZE;
    if (from_cache) {
        ss = hak_os_superslab_get();
        if (!ss) return NULL;
        map_base = (char *)ss;
        map_size = HAK_SS_SIZE;
        hak_stat_add(large, cached, 1);
    } else {
        // For alignments above 2 MiB, over-map and place the header 2 MiB below an aligned
        // block; the address space beyond is never touched.
        size_t extra = alignment > HAK_SS_SIZE ? alignment : 0;
        char *start = hak_os_map_aligned(total + extra, HAK_SS_SIZE, &map_base, &map_size);
        if (!start) return NULL;
        if (extra) {
            uintptr_t block = ((uintptr_t)start + HAK_SS_SIZE + alignment - 1) & ~(alignment - 1);
            start = (char *)(block - HAK_SS_SIZE);
        }
        ss = (hak_superslab *)start;
        hak_registry_set((uintptr_t)ss, 1);
        hak_stat_add(large, mapped, 1);
        zero = 0; // fresh anonymous memory is already zero
    }
    char *block = (char *)ss + offset;
    ss->kind = HAK_SS_LARGE;
    ss->map_base = map_base;
    ss->map_size = map_size;
    ss->from_cache = (uint8_t)from_cache;
    ss->large_usable = (size_t)(map_base + map_size - block);
    hak_stat_add(large, alloc, 1);
    hak_stat_add(large, live_kb, ss->large_usable / 1024);
    if (zero) memset(block, 0, size);
    return block;
}

static int is_large_block(hak_superslab *ss, void *p) {
    return ss->kind == HAK_SS_LARGE && (char *)p == ss->map_base + ss->map_size - ss->large_usable;
}

void hak_large_free(hak_superslab *ss, void *p) {
    if (!is_large_block(ss, p))
        hak_fatal_pointer("free", ss->kind == HAK_SS_FREE ? "double free" : "invalid pointer", p);
    hak_stat_add(large, free, 1);
    hak_stat_sub(large, live_kb, ss->large_usable / 1024);
    if (ss->from_cache) {
        hak_os_superslab_put(ss);
        return;
    }
    hak_registry_set((uintptr_t)ss, 0);
    hak_stat_mapped(-(long)ss->map_size);
    hak_os_unmap(ss->map_base, ss->map_size);
}

size_t hak_large_usable(hak_superslab *ss, void *p) {
    if (!is_large_block(ss, p)) hak_fatal_pointer("malloc_usable_size", "invalid pointer", p);
    return ss->large_usable;
}
