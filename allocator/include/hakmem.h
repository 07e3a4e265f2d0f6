// libhakmem public API.
//
// Every build exports the prefixed functions below. The interposing builds (build/fast,
// build/stats, build/debug: libhakmem.so and libhakmem.a) also export the standard names
// (malloc, free, ..., and the __libc_* aliases) as aliases of these. The sanitized build
// (build/debug-asan/libhakmem_prefixed.a) exports ONLY the prefixed names, so a test binary
// can run under AddressSanitizer (which owns malloc) and still exercise libhakmem.
#ifndef HAKMEM_H
#define HAKMEM_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

void *hak_malloc(size_t size);
void hak_free(void *ptr);
void hak_cfree(void *ptr);
void *hak_calloc(size_t count, size_t size);
void *hak_realloc(void *ptr, size_t size);
void *hak_reallocarray(void *ptr, size_t count, size_t size);
int hak_posix_memalign(void **out, size_t alignment, size_t size);
void *hak_aligned_alloc(size_t alignment, size_t size);
void *hak_memalign(size_t alignment, size_t size);
void *hak_valloc(size_t size);
void *hak_pvalloc(size_t size);
size_t hak_malloc_usable_size(void *ptr);
// glibc's malloc_trim: gives what libhakmem keeps free back to the kernel now; 1 if it gave any.
int hak_malloc_trim(size_t pad);
// C23's sized frees (also free_sized and free_aligned_sized in the interposing builds, which
// export C++'s operator new and delete in every form too: allocator/src/cxx.c).
void hak_free_sized(void *ptr, size_t size);
void hak_free_aligned_sized(void *ptr, size_t alignment, size_t size);

#ifdef __cplusplus
}
#endif

#endif
