// Size class tables (see sizeclass.h for the class layout).
#include "sizeclass.h"

// Tiny class of (n + 7) / 8: word counts 0..1 -> C0, 2 -> C1, 3..4 -> C2, ... 65..128 -> C7.
#define RANGE(lo, hi, c) [lo... hi] = c
const uint8_t hak_tiny_class_by_words[HAK_TINY_MAX / 8 + 1] = {
    RANGE(0, 1, 0),  RANGE(2, 2, 1),   RANGE(3, 4, 2),   RANGE(5, 8, 3),
    RANGE(9, 16, 4), RANGE(17, 32, 5), RANGE(33, 64, 6), RANGE(65, 128, 7),
};

const uint32_t hak_class_block_size[HAK_CLASS_COUNT] = {
    8,     16,    32,    64,    128,   256,   512,   1024,  // C0..C7
    1280,  1536,  1792,  2048,  2560,  3072,  3584,  4096,  // mid pool
    5120,  6144,  7168,  8192,  10240, 12288, 14336, 16384, //
    20480, 24576, 28672, 32768,                             //
};
