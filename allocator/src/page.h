// The page layer (page.c): a page's free lists, carving, the remote-free protocol, the visits
// of abandoned superslabs that collect their pages.
#ifndef HAK_PAGE_H
#define HAK_PAGE_H

#include "segment.h"

// --- page.c: page free lists
// Carve steps: the legacy front carves a fresh page 4 KiB at a time (a page that holds few
// blocks never faults in its whole 64 KiB); other fronts choose other steps. Every front's
// steps start at one OS page of blocks and double up to its own (hak_page_extend).
#define HAK_CARVE_STEP_DEFAULT 4096
#define HAK_CARVE_WHOLE_PAGE   ((uint32_t)HAK_SS_SIZE) // capped by the page's capacity
void hak_page_init(hak_page *page, unsigned cls, hak_heap *heap);
int hak_page_extend(hak_page *page, uint32_t max_bytes, uint32_t min_blocks);
#ifdef HAK_SECURE
// The secure build's per-thread random stream (splitmix64; seeded from getrandom on first use
// and again in a fork child): the order in which carved blocks are handed out (page.c) and
// which free list a freed block joins (wrappers.c, free_fast).
extern __thread uint64_t hak_secure_rng __attribute__((tls_model("initial-exec")));
uint64_t hak_secure_rng_seed(void) __attribute__((cold));
void hak_page_carve_reseed(void); // the calling thread's stream starts anew (a fork child)
static inline uint64_t hak_secure_random(void) {
    uint64_t z = hak_secure_rng;
    if (HAK_UNLIKELY(z == 0)) z = hak_secure_rng_seed();
    z = hak_secure_rng = z + 0x9e3779b97f4a7c15u;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}
#endif
void hak_page_collect(hak_page *page);
// Visits up to `visits` abandoned superslabs (and a sixteenth of the list): their pages' remote
// frees collected, emptied pages and superslabs given back. _all: every one, once.
void hak_page_reclaim_abandoned(unsigned visits);
void hak_page_reclaim_all_abandoned(void);
void hak_page_purge_idle_blocks(hak_page *page, unsigned keep, uintptr_t mark,
                                uintptr_t marked_before);
void hak_page_restore_purged(hak_page *page);
void hak_page_free_remote(hak_page *page, hak_block *first, hak_block *last);
// The same, with the common case inline: no flag set (the page is not on its owner's full
// list), one CAS. A flag sends the chain to hak_page_free_remote.
static inline void hak_page_push_remote(hak_page *page, hak_block *first, hak_block *last) {
    uintptr_t old = atomic_load_explicit(&page->xthread_free, memory_order_relaxed);
    while (HAK_LIKELY(!(old & HAK_XT_FLAGS))) {
        hak_link_set(last, (hak_block *)old);
        if (atomic_compare_exchange_weak_explicit(&page->xthread_free, &old, (uintptr_t)first,
                                                  memory_order_release, memory_order_relaxed))
            return;
    }
    hak_page_free_remote(page, first, last);
}
void hak_page_clear_full(hak_page *page);
// Asks to be told about the next remote free. Fails (returns 0) if remote frees are pending
// or a notifier is busy: the caller must look at the page again later. A page leaving the
// full list keeps its FULL flag (see hak_heap_page_unfull), so a page that fills up again
// usually needs no atomic operation here at all.
static inline int hak_page_mark_full(hak_page *page) {
    uintptr_t expected = atomic_load_explicit(&page->xthread_free, memory_order_relaxed);
    if (expected == HAK_XT_FULL) return 1;
    expected = 0;
    return atomic_compare_exchange_strong_explicit(&page->xthread_free, &expected, HAK_XT_FULL,
                                                   memory_order_acq_rel, memory_order_relaxed);
}
int hak_page_has_free_block(const hak_page *page, const hak_block *block);
void hak_page_verify_empty(const hak_page *page);
// Could `p` be a block of `page`: in the page's slot of its superslab, past the superslab
// header, aligned as the page's blocks are. What the secure build checks at every pop
// (hak_link_checked, with the block known to be in the slot), and every build where a walk
// writes through the links of any page (the lean purge, the delayed frees).
static inline int hak_page_slot_holds(const hak_page *page, uintptr_t p) {
    unsigned shift = hak_superslab_of_page(page)->page_shift;
    uintptr_t start = (uintptr_t)hak_page_start(page);
    return !((p ^ start) >> shift) && !(p & page->block_mask) && p >= start;
}
// The fast paths' test of the block a pop is about to hand out, in every build: a page's
// blocks lie above its descriptor (which sits in its superslab's header), so "above the
// descriptor" is one compare, the same as the NULL test it replaces. An empty list, and a link
// that a write after free or an overflow aimed below the heap (the program's image, its data
// and GOT, the brk heap, anything mapped after the superslab), both take the slow path, whose
// collect tells the two apart (hak_page_collect) before any slow pop follows the link. A link
// aimed above the heap passes it; the secure build checks every link in full.
static inline int hak_pop_ok(const hak_page *page, const hak_block *block) {
    return (uintptr_t)block > (uintptr_t)page;
}
void hak_page_bad_link(const void *p) __attribute__((noreturn, cold));
// Every pop in the debug and secure builds: the next link of a free block must be NULL or a
// block of the same page, else something wrote into the freed block (use after free,
// overflow). The debug build checks it in full (a block start of the page); the secure build
// that it lies in the page's slot past the superslab header, aligned as the page's blocks are.
void hak_page_link_corrupted(const hak_block *block) __attribute__((noreturn, cold));
#ifdef HAK_DEBUG
void hak_page_check_link(const hak_page *page, const hak_block *block);
#endif
static inline hak_block *hak_link_checked(const hak_page *page, const hak_block *block) {
    hak_block *next = hak_link(block);
#if defined(HAK_DEBUG)
    hak_page_check_link(page, block);
#elif defined(HAK_SECURE)
    uintptr_t n = (uintptr_t)next; // hak_page_slot_holds, with `block` known to be in the slot
    if (HAK_UNLIKELY(n && (((n ^ (uintptr_t)block) >> hak_superslab_of_page(page)->page_shift) ||
                           (n & page->block_mask) || (n & HAK_SS_MASK) < HAK_SS_HEADER_SIZE)))
        hak_page_link_corrupted(block);
#else
    (void)page;
#endif
    return next;
}

// Where a page's blocks may lie, for a walk over many links (the setup done once): at offsets
// d from the page's first block up to that of its last block, so that a write of 16 bytes at
// such a d stays in the page's blocks. A NULL link is not there: one subtraction and one
// compare a link, where the test against the page's descriptor was one compare. The blocks'
// alignment is not tested: a misaligned link still lies in the page, so what the walk writes
// through it lands in the page's own blocks and never in a header, another page or foreign
// memory (testing it too, by rotating d, cost more than the fast build's instruction budget:
// docs/notebook/2026-11-28-thread-churn.md; the debug and secure builds check every link in
// full).
typedef struct hak_slot_bounds {
    uintptr_t start, limit;
} hak_slot_bounds;
static inline hak_slot_bounds hak_page_slot_bounds(const hak_page *page) {
    uintptr_t start = (uintptr_t)hak_page_start(page);
    return (hak_slot_bounds){start, (uintptr_t)(page->capacity - 1) * page->block_size + 1};
}
static inline int hak_slot_bounds_hold(const hak_slot_bounds *bounds, uintptr_t p) {
    return p - bounds->start < bounds->limit;
}

// The next link of a chain of `page`'s blocks that a slow path walks (the remote frees being
// collected) into *next: 1 if there is one, 0 at the chain's end. Checked before the walk
// writes through it: in the fast build in full against the page's bounds, since the walk
// clears each block's second word, and a link that only lay above the page's descriptor (a
// write after free into a remotely freed block) made that an 8-byte write at an address of
// the writer's choosing (test_lifecycle: forged remote link). The debug and secure builds
// check it as a pop does.
static inline int hak_link_walk(const hak_page *page, const hak_slot_bounds *bounds,
                                const hak_block *block, hak_block **next) {
#if defined(HAK_DEBUG) || defined(HAK_SECURE)
    (void)bounds;
    *next = hak_link_checked(page, block);
    return *next != NULL;
#else
    (void)page;
    *next = hak_link(block);
    if (HAK_LIKELY(hak_slot_bounds_hold(bounds, (uintptr_t)*next))) return 1;
    if (*next) hak_page_bad_link(*next);
    return 0;
#endif
}

#endif
