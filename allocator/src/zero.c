// The secure build's zero-size blocks: malloc(0) returns a unique address in a region that is
// never readable or writable (PROT_NONE), so any read or write through it faults, and so does
// one after it is freed; glibc and the fast build return a block of the smallest class, where
// such accesses land in heap memory. Slots are 16 bytes, handed out from an atomic bitmap
// (no lock: a fork child finds it whole); the region's registry byte (HAK_REG_ZERO) sends its
// frees here. When every slot is taken, malloc(0) falls back to the smallest class.
#include <errno.h>
#include <string.h>
#include <sys/mman.h>

#include "heap.h"

#ifdef HAK_SECURE
#define HAK_ZERO_SLOT  16
#define HAK_ZERO_SLOTS (HAK_SS_SIZE / HAK_ZERO_SLOT)
#define HAK_ZERO_WORDS (HAK_ZERO_SLOTS / 64)

static _Atomic uintptr_t zero_region;
static _Atomic uint64_t zero_taken[HAK_ZERO_WORDS];
static _Atomic unsigned zero_hint;

static uintptr_t region(void) {
    uintptr_t r = atomic_load_explicit(&zero_region, memory_order_acquire);
    if (r) return r;
    char *raw = hak_os_reserve(NULL, 2 * HAK_SS_SIZE);
    if (raw == MAP_FAILED) return 0;
    uintptr_t start = ((uintptr_t)raw + HAK_SS_MASK) & ~(uintptr_t)HAK_SS_MASK;
    if (start > (uintptr_t)raw) hak_os_unmap(raw, start - (uintptr_t)raw);
    if ((uintptr_t)raw + 2 * HAK_SS_SIZE > start + HAK_SS_SIZE)
        hak_os_unmap((void *)(start + HAK_SS_SIZE), (uintptr_t)raw + HAK_SS_SIZE - start);
    uintptr_t expected = 0;
    if (!atomic_compare_exchange_strong(&zero_region, &expected, start)) {
        hak_os_unmap((void *)start, HAK_SS_SIZE); // another thread's won
        return expected;
    }
    hak_registry_set(start, HAK_REG_ZERO);
    return start;
}

void *hak_zero_alloc(void) {
    uintptr_t r = region();
    if (!r) return NULL;
    unsigned start = atomic_fetch_add_explicit(&zero_hint, 1, memory_order_relaxed);
    for (unsigned n = 0; n < HAK_ZERO_WORDS; n++) {
        unsigned w = (start + n) % HAK_ZERO_WORDS;
        uint64_t bits = atomic_load_explicit(&zero_taken[w], memory_order_relaxed);
        while (~bits) {
            unsigned b = (unsigned)__builtin_ctzll(~bits);
            if (atomic_compare_exchange_weak_explicit(&zero_taken[w], &bits, bits | 1ull << b,
                                                      memory_order_relaxed, memory_order_relaxed))
                return (void *)(r + ((uintptr_t)w * 64 + b) * HAK_ZERO_SLOT);
        }
    }
    return NULL;
}

void hak_zero_free(const char *func, void *p) {
    uintptr_t offset = (uintptr_t)p - atomic_load_explicit(&zero_region, memory_order_relaxed);
    if (offset >= HAK_SS_SIZE || offset % HAK_ZERO_SLOT)
        hak_fatal_pointer(func, "invalid pointer", p);
    uintptr_t slot = offset / HAK_ZERO_SLOT;
    uint64_t bit = 1ull << (slot % 64);
    if (!(atomic_load_explicit(&zero_taken[slot / 64], memory_order_relaxed) & bit))
        hak_fatal_pointer(func, "double free", p);
    if (strcmp(func, "free") == 0) // (free_sized checks the block, then frees it as free)
        atomic_fetch_and_explicit(&zero_taken[slot / 64], ~bit, memory_order_relaxed);
}
#endif
