// Size classes. Tiny sizes (up to 1 KiB) are named by their power-of-two group C0..C7 (8, 16,
// 32, ... 1024 B: the names the profiles, route masks and stats use; c7 = 513..1024 B). Within
// a group the classes are 16 B apart up to 256 B, 32 B apart up to 512 B (eight per power of
// two: the sizes most small objects have, where glibc's 16-byte chunks waste ~15 B a block)
// and four per power of two in C7 (640, 768, 896, 1024), so a block wastes at most 12.5 % of
// its size up to 512 B and 25 % above (a power-of-two class wastes up to half: 257 B in a
// 512 B block), and every block is 16-byte aligned from 16 B up. Mid classes ("the mid pool")
// cover 1 KiB < n <= 256 KiB with four classes per power of two, served by the same page
// heap. Which of them exist in a process depends on the routes
// (route.c): the 64 KiB pages of the legacy fronts serve up to HAK_MID_MAX (32 KiB), the
// larger pages of SmallObject v3 up to HAK_SMALL_MAX_ALL (256 KiB). Above what the process
// serves (hak_small_max) a block is "large" (large.c, its own mapping).
#ifndef HAK_SIZECLASS_H
#define HAK_SIZECLASS_H

#include <stddef.h>
#include <stdint.h>

#define HAK_TINY_GROUP_COUNT 8 // C0..C7
#define HAK_TINY_CLASS_COUNT 29
#define HAK_MID_CLASS_COUNT  32
#define HAK_CLASS_COUNT      (HAK_TINY_CLASS_COUNT + HAK_MID_CLASS_COUNT)
#define HAK_TINY_MAX         1024
#define HAK_MID_MAX          (32 * 1024)  // largest class on 64 KiB pages (legacy fronts)
#define HAK_SMALL_MAX_ALL    (256 * 1024) // largest class of all (SmallObject v3)
#define HAK_MID_GROUP_COUNT  8            // M0..M7: (1, 2], (2, 4], ... (128, 256] KiB
// Mid sizes -> class by a table indexed by (n + 255) >> 8: every mid class boundary is a
// multiple of 256 B.
#define HAK_MID_INDEX(n)    (((n) + 255) >> 8)
#define HAK_MID_INDEX_COUNT (HAK_MID_INDEX(HAK_SMALL_MAX_ALL) + 1)

// (n + 7) / 8 -> tiny class, for n <= HAK_TINY_MAX: one byte load on the malloc fast path.
extern const uint8_t hak_tiny_class_by_words[HAK_TINY_MAX / 8 + 1];
extern const uint32_t hak_class_block_size[HAK_CLASS_COUNT];
// Tiny class -> its group C0..C7.
extern const uint8_t hak_tiny_group[HAK_TINY_CLASS_COUNT];

static inline unsigned hak_tiny_class_of(size_t n) {
    return hak_tiny_class_by_words[(n + 7) >> 3];
}

// Mid classes: the top three bits of (n - 1) pick one of four sizes per power of two.
static inline unsigned hak_mid_class_of(size_t n) {
    size_t m = n - 1;
    unsigned top_bit = 63u - (unsigned)__builtin_clzl(m);
    return HAK_TINY_CLASS_COUNT + (top_bit - 10) * 4 + (unsigned)((m >> (top_bit - 2)) & 3);
}

// Any size up to HAK_SMALL_MAX_ALL (n == 0 is class C0: malloc(0) returns a unique 8-byte block).
static inline unsigned hak_class_of(size_t n) {
    return n <= HAK_TINY_MAX ? hak_tiny_class_of(n) : hak_mid_class_of(n);
}

static inline int hak_class_is_tiny(unsigned cls) {
    return cls < HAK_TINY_CLASS_COUNT;
}

// The route-mask bit of a class: its tiny group C0..C7 (bits 0-7) or its mid group M0..M7
// (bits 8-15, one per power of two).
static inline unsigned hak_class_group_bit(unsigned cls) {
    return hak_class_is_tiny(cls) ? hak_tiny_group[cls]
                                  : HAK_TINY_GROUP_COUNT + (cls - HAK_TINY_CLASS_COUNT) / 4;
}

#endif
