// Size classes. Tiny sizes (up to 1 KiB) are named by their power-of-two group C0..C7 (8, 16,
// 32, ... 1024 B: the names the profiles, route masks and stats use; c7 = 513..1024 B). Within
// a group the classes are 16 B apart up to 128 B and four per power of two above (160, 192,
// 224, 256, 320, ...), so a block wastes at most 25 % of its size (a power-of-two class
// wastes up to half: 257 B in a 512 B block), and every block is 16-byte aligned from 16 B
// up. Mid classes ("the mid pool") cover 1 KiB < n <= 32 KiB with four classes per power of
// two, served by the same page heap. Above HAK_MID_MAX a block is "large" (large.c, its own
// mapping).
#ifndef HAK_SIZECLASS_H
#define HAK_SIZECLASS_H

#include <stddef.h>
#include <stdint.h>

#define HAK_TINY_GROUP_COUNT 8 // C0..C7
#define HAK_TINY_CLASS_COUNT 21
#define HAK_MID_CLASS_COUNT  20
#define HAK_CLASS_COUNT      (HAK_TINY_CLASS_COUNT + HAK_MID_CLASS_COUNT)
#define HAK_TINY_MAX         1024
#define HAK_MID_MAX          (32 * 1024)

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

// Any size up to HAK_MID_MAX (n == 0 is class C0: malloc(0) returns a unique 8-byte block).
static inline unsigned hak_class_of(size_t n) {
    return n <= HAK_TINY_MAX ? hak_tiny_class_of(n) : hak_mid_class_of(n);
}

static inline int hak_class_is_tiny(unsigned cls) {
    return cls < HAK_TINY_CLASS_COUNT;
}

#endif
