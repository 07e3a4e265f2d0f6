// The front layer (front.c).
#ifndef HAK_FRONT_H
#define HAK_FRONT_H

#include "heap.h"

// --- front.c: the refill skeleton, compiled once per row of the fronts' table
// The refill of each row, indexed as the table: a class's is hak_front_slow[heap->route[cls]].
extern void *(*const hak_front_slow[HAK_FRONT_COUNT])(hak_heap *heap, unsigned cls);

#endif
