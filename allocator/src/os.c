// The OS policy: how memory comes from and goes back to the kernel.
//   - every region is mapped 2 MiB-aligned (map twice the size, trim the ends), so a block's
//     header is one mask away;
//   - empty superslabs are kept in a cache (HAKMEM_SS_CACHE_SIZE bytes) instead of munmap,
//     because a heap that empties and refills a superslab would otherwise pay two syscalls and
//     512 page faults each time. Cached superslabs stay registered (kind HAK_SS_FREE), so a
//     stale free() into one is reported, not followed.
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/mman.h>

#include "internal.h"
#include "options.h"

static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static hak_superslab *cache_first;
static _Atomic size_t cache_count; // read without the lock only as a hint

// Maps `size` bytes (a multiple of 4 KiB) aligned to `alignment` (a power of two >= 2 MiB).
// The caller gets the aligned start; the mapping is exactly [start, start + size).
void *hak_os_map_aligned(size_t size, size_t alignment, char **map_base, size_t *map_size) {
    size_t over = size + alignment;
    if (over < size) return NULL;
    char *raw = mmap(NULL, over, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    hak_stat_add(ss_os, mmap_total, 1);
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

void hak_os_unmap(void *base, size_t size) {
    int saved = errno; // free() must preserve errno
    munmap(base, size);
    errno = saved;
    hak_stat_add(ss_os, munmap, 1);
}

// An empty 2 MiB superslab with a zeroed header, registered; NULL when out of memory.
hak_superslab *hak_os_superslab_get(void) {
    hak_superslab *ss = NULL;
    if (atomic_load_explicit(&cache_count, memory_order_relaxed)) { // a stale 0 costs a mapping
        pthread_mutex_lock(&cache_lock);
        ss = cache_first;
        if (ss) cache_first = ss->next, cache_count--;
        pthread_mutex_unlock(&cache_lock);
    }
    if (ss) {
        hak_stat_add(ss_os, cache_hit, 1);
        memset(ss, 0, sizeof *ss);
        return ss;
    }
    hak_stat_add(ss_os, cache_miss, 1);
    char *base;
    size_t size;
    ss = hak_os_map_aligned(HAK_SS_SIZE, HAK_SS_SIZE, &base, &size);
    if (!ss) return NULL;
    hak_registry_set((uintptr_t)ss, 1);
    return ss;
}

// Takes back an empty superslab: into the cache while it has room, else unmapped.
void hak_os_superslab_put(hak_superslab *ss) {
    ss->kind = HAK_SS_FREE;
    size_t limit = (size_t)hak_option[HAK_OPT_SS_CACHE_SIZE] / HAK_SS_SIZE;
    pthread_mutex_lock(&cache_lock);
    if (cache_count < limit) {
        ss->next = cache_first;
        cache_first = ss;
        cache_count++;
        ss = NULL;
    }
    pthread_mutex_unlock(&cache_lock);
    if (!ss) return;
    hak_stat_add(ss_os, cache_release, 1);
    hak_registry_set((uintptr_t)ss, 0);
    hak_os_unmap(ss, HAK_SS_SIZE);
    hak_stat_mapped(-(long)HAK_SS_SIZE);
}

void hak_os_fork_prepare(void) {
    pthread_mutex_lock(&cache_lock);
}
void hak_os_fork_parent(void) {
    pthread_mutex_unlock(&cache_lock);
}
void hak_os_fork_child(void) {
    pthread_mutex_init(&cache_lock, NULL);
}
