// Size class tables (see sizeclass.h for the class layout).
#include "sizeclass.h"

// Tiny class of (n + 7) / 8 (the size in 8-byte words), the smallest class that holds it.
#define RANGE(lo, hi, c) [lo... hi] = c
const uint8_t hak_tiny_class_by_words[HAK_TINY_MAX / 8 + 1] = {
    RANGE(0, 1, 0),      RANGE(2, 2, 1),    RANGE(3, 4, 2),    RANGE(5, 6, 3),
    RANGE(7, 8, 4),      RANGE(9, 10, 5),   RANGE(11, 12, 6),  RANGE(13, 14, 7),
    RANGE(15, 16, 8),    RANGE(17, 18, 9),  RANGE(19, 20, 10), RANGE(21, 22, 11),
    RANGE(23, 24, 12),   RANGE(25, 26, 13), RANGE(27, 28, 14), RANGE(29, 30, 15),
    RANGE(31, 32, 16),   RANGE(33, 36, 17), RANGE(37, 40, 18), RANGE(41, 44, 19),
    RANGE(45, 48, 20),   RANGE(49, 52, 21), RANGE(53, 56, 22), RANGE(57, 60, 23),
    RANGE(61, 64, 24),   RANGE(65, 80, 25), RANGE(81, 96, 26), RANGE(97, 112, 27),
    RANGE(113, 128, 28),
};

const uint32_t hak_class_block_size[HAK_CLASS_COUNT] = {
    8,     16,    32,                                             // C0, C1, C2
    48,    64,                                                    // C3
    80,    96,    112,    128,                                    // C4
    144,   160,   176,    192,    208,    224,    240,    256,    // C5
    288,   320,   352,    384,    416,    448,    480,    512,    // C6
    640,   768,   896,    1024,                                   // C7
    1280,  1536,  1792,   2048,   2560,   3072,   3584,   4096,   // mid pool
    5120,  6144,  7168,   8192,   10240,  12288,  14336,  16384,  //
    20480, 24576, 28672,  32768,  40960,  49152,  57344,  65536,  //
    81920, 98304, 114688, 131072, 163840, 196608, 229376, 262144, //
};

const uint8_t hak_tiny_group[HAK_TINY_CLASS_COUNT] = {
    0, 1, 2, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 5, 5, 5, 5, 6, 6, 6, 6, 6, 6, 6, 6, 7, 7, 7, 7,
};
