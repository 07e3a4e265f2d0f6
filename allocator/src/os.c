// The operating system: the one file that makes memory system calls (mmap, munmap, mremap,
// madvise, mprotect) and reads the clock. Every call keeps errno as it was when it succeeds
// (free() and the other calls that must not change errno go through here), and counts itself
// in SS_OS_STATS. No policy here: what is cached, purged or given back, and when, is decided by
// the layers above (arena.c, large.c, purge.c).
//   - every region the allocator aligns is mapped over-sized and trimmed at both ends
//     (hak_os_map_aligned), so a superslab's header is one mask away from any of its blocks;
//   - out of memory, a call fails (MAP_FAILED, NULL or 0) and says nothing more: the caller
//     that can give cached memory back (purge.c: hak_release_cached) does, and tries again.
#include <errno.h>
#include <sys/mman.h>
#include <time.h>

#include "os.h"

uint64_t hak_coarse_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts); // vDSO, no syscall
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void *hak_os_map(size_t size) {
    int saved = errno;
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    hak_stat_add(ss_os, mmap_total, 1);
    if (p != MAP_FAILED) errno = saved;
    return p;
}

// Maps `size` bytes (a multiple of 4 KiB) aligned to `alignment` (a power of two >= 4 KiB).
// The caller gets the aligned start; the mapping is exactly [start, start + size).
void *hak_os_map_aligned(size_t size, size_t alignment, char **map_base, size_t *map_size) {
    size_t over = size + alignment;
    if (over < size) return NULL;
    char *raw = hak_os_map(over);
    if (raw == MAP_FAILED) return NULL;
    char *start = (char *)(((uintptr_t)raw + alignment - 1) & ~(uintptr_t)(alignment - 1));
    size_t head = (size_t)(start - raw), tail = over - head - size;
    if (head) hak_os_unmap(raw, head);
    if (tail) hak_os_unmap(start + size, tail);
    *map_base = start;
    *map_size = size;
    hak_stat_mapped((long)size);
    return start;
}

// Address space without memory: PROT_NONE, never committed. At `at` (MAP_FIXED: it replaces
// what was mapped there) or anywhere (`at` NULL). MAP_FAILED when refused.
void *hak_os_reserve(void *at, size_t size) {
    int saved = errno;
    void *p = mmap(at, size, PROT_NONE,
                   (at ? MAP_FIXED : 0) | MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    errno = saved;
    return p;
}

void hak_os_unmap(void *base, size_t size) {
    int saved = errno; // free() must preserve errno
    munmap(base, size);
    errno = saved;
    hak_stat_add(ss_os, munmap, 1);
}

// Resized in place or moved (MREMAP_MAYMOVE); MAP_FAILED, with errno as mremap left it, when
// refused (ENOMEM: out of address space).
void *hak_os_remap(void *p, size_t old_size, size_t new_size) {
    int saved = errno;
    void *q = mremap(p, old_size, new_size, MREMAP_MAYMOVE);
    if (q != MAP_FAILED) errno = saved;
    return q;
}

// The memory behind [start, start + size) goes back to the kernel; the range stays mapped and
// reads as zero when touched again.
void hak_os_decommit(void *start, size_t size) {
    int saved = errno;
    madvise(start, size, MADV_DONTNEED);
    errno = saved;
    hak_stat_add(ss_os, madvise, 1);
}

// Read-write (`writable`) or no access at all (a guard). Returns whether the kernel agreed.
int hak_os_protect(void *start, size_t size, int writable) {
    int saved = errno;
    int ok = mprotect(start, size, writable ? PROT_READ | PROT_WRITE : PROT_NONE) == 0;
    errno = saved;
    return ok;
}
