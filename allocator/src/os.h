// The OS layer (os.c): memory system calls and the clock.
#ifndef HAK_OS_H
#define HAK_OS_H

#include "types.h"

// The system calls (errno kept on success; no policy).
uint64_t hak_coarse_now_ns(void); // CLOCK_MONOTONIC_COARSE: vDSO, ticks every few ms
void *hak_os_map(size_t size);    // MAP_FAILED when refused
void *hak_os_map_aligned(size_t size, size_t alignment, char **map_base, size_t *map_size);
void *hak_os_reserve(void *at, size_t size); // PROT_NONE, at `at` (MAP_FIXED) or anywhere
void hak_os_unmap(void *base, size_t size);
void *hak_os_remap(void *p, size_t old_size, size_t new_size); // MAP_FAILED when refused
void hak_os_decommit(void *start, size_t size);
int hak_os_protect(void *start, size_t size, int writable);

#endif
