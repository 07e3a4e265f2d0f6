// Which allocation API the tests call.
//
// Tests are written against the standard malloc API, so the same source runs under glibc,
// mimalloc, LD_PRELOAD=libhakmem.so and a statically linked libhakmem.a. The sanitized debug
// build cannot replace malloc (ASan owns it), so libhakmem provides a prefixed API there
// (hak_malloc, hak_free, ... in allocator/include/hakmem.h); compiling with
// -DHAKTEST_PREFIXED_API routes every call below to it, the way mimalloc-override.h does.
// Include this after all system headers (testhelper.h does).
#ifndef HAKMEM_TEST_ALLOC_API_H
#define HAKMEM_TEST_ALLOC_API_H

#include <malloc.h>
#include <stdlib.h>

#if defined(HAKTEST_PREFIXED_API)
#include "hakmem.h"
#define malloc             hak_malloc
#define free               hak_free
#define calloc             hak_calloc
#define realloc            hak_realloc
#define reallocarray       hak_reallocarray
#define posix_memalign     hak_posix_memalign
#define aligned_alloc      hak_aligned_alloc
#define memalign           hak_memalign
#define valloc             hak_valloc
#define pvalloc            hak_pvalloc
#define malloc_usable_size hak_malloc_usable_size
#define cfree              hak_cfree
#define malloc_trim        hak_malloc_trim
#endif

#endif
