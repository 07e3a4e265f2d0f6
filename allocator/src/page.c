// Pages: the three free lists of one 64 KiB page (mimalloc's free-list sharding).
//   free         malloc pops here
//   local_free   the owner's frees; moved to `free` when `free` runs dry, so the owner comes
//                back here regularly and picks up remote frees too
//   xthread_free other threads' frees, pushed with one CAS; flag bits in its low bits
//                (HAK_XT_FULL, HAK_XT_NOTIFYING, see types.h and hak_page_free_remote)
#include <errno.h>
#include <sys/mman.h>
#include <sys/random.h>

#include "page.h"

void hak_page_init(hak_page *page, unsigned cls, hak_heap *heap) {
    hak_superslab *ss = hak_superslab_of_page(page);
    size_t index = (size_t)(page - ss->pages);
    uint32_t size = hak_class_block_size[cls], natural = size & (0u - size);
    page->block_size = size;
    page->block_mask = (uint16_t)((natural < 65536 ? natural : 65536) - 1);
    char *start = hak_page_start(page); // after block_mask: page 0 starts at that alignment
    char *end = (char *)ss + ((index + 1) << ss->page_shift);
    page->class_idx = (uint8_t)cls;
    page->capacity = (uint16_t)((size_t)(end - start) / size);
    hak_assert((size_t)(end - start) / size <= INT16_MAX); // `used` is 16 bits
    page->reserved = 0;
    page->used = 0;
    page->free = page->local_free = NULL;
    page->in_use = 1;
    page->in_full = 0;
    page->has_purged = 0;
    if (ss->page_kind == HAK_KIND_MEDIUM) ss->purged_blocks[index] = 0;
    page->next = page->prev = NULL;
    hak_page_set_local_owner(page, heap);
    atomic_store_explicit(&page->xthread_free, 0, memory_order_relaxed);
}

// Carves the next blocks into `free` (which must be empty): a step of at most max_bytes of
// blocks but at least min_blocks, reached by doubling (below). A step smaller than the page
// means a page that only ever holds a few blocks never touches (faults in) the rest of it.
// (Medium and big pages' steps stop at 4 blocks, not 8: with one empty page retained per
// class, fewer pages are faulted in; docs/notebook/2026-11-23-not-kept.md, "SmallObject v3 as
// a design".) Returns 0 if the page is used up.
#ifdef HAK_SECURE
__thread uint64_t hak_secure_rng;
void hak_page_carve_reseed(void) {
    hak_secure_rng = 0;
}
uint64_t hak_secure_rng_seed(void) {
    uint64_t seed;
    if (getrandom(&seed, sizeof seed, GRND_NONBLOCK) != sizeof seed)
        seed = hak_canary_key ^ (uintptr_t)&hak_secure_rng ^ hak_coarse_now_ns();
    return hak_secure_rng = seed | 1;
}

// The secure build carves in a random order: a carve step's free list visits its blocks in a
// uniformly random permutation (Fisher-Yates, drawn from hak_secure_random: only the page's
// owner carves), the permutation kept in the blocks' canary words until the links are written
// (blocks are at least 16 bytes: a link word and a canary word). Except the first block of a
// page's first step, which stays first: the page's first block handed out sits at the page's
// start, with a PROT_NONE slot, the superslab's header or another page's last block's canary
// before it, which is what catches an underflow out of it that no later free reveals (a memcpy
// to 32 bytes before the block; docs/notebook/2026-11-28-not-kept.md, "Issue #37"). Returns the
// list's head; the caller writes the canaries.
static hak_block *carve_shuffled(char *first, uint32_t count, uint32_t size, int keep_first) {
#define SLOT(i) (((uintptr_t *)(first + (size_t)(i)*size + size))[-1])
    for (uint32_t i = 0; i < count; i++)
        SLOT(i) = i;
    for (uint32_t i = count - 1; i > (uint32_t)keep_first; i--) {
        uint32_t lo = (uint32_t)keep_first, span = i - lo + 1;
        uint32_t j = lo + (uint32_t)(((hak_secure_random() & 0xffffffffu) * span) >> 32);
        uintptr_t t = SLOT(i);
        SLOT(i) = SLOT(j);
        SLOT(j) = t;
    }
    for (uint32_t k = 0; k + 1 < count; k++)
        hak_link_set((hak_block *)(first + SLOT(k) * size),
                     (hak_block *)(first + SLOT(k + 1) * size));
    hak_link_set((hak_block *)(first + SLOT(count - 1) * size), NULL);
    return (hak_block *)(first + SLOT(0) * size);
#undef SLOT
}
#endif

int hak_page_extend(hak_page *page, uint32_t max_bytes, uint32_t min_blocks) {
    hak_assert(page->free == NULL);
    uint32_t left = page->capacity - page->reserved;
    if (left == 0) return 0;
    // A fresh page's first step is one OS page of blocks (at least one block); each later step
    // doubles what the page has carved so far, up to the front's step (max_bytes of blocks, at
    // least min_blocks). A class that only ever holds a few blocks so touches one or two of its
    // page's OS pages, not the whole front's step (TinyHeap's is the whole 64 KiB page: carved at
    // once, espresso kept four C7 pages, 256 KiB, resident for a few blocks); a busy class
    // reaches the front's step after a few refills.
    uint32_t step = max_bytes / page->block_size;
    if (step < min_blocks) step = min_blocks;
    uint32_t count = page->reserved;
    uint32_t os_page = HAK_OS_PAGE_SIZE / page->block_size;
    if (count < os_page) count = os_page;
    if (count == 0) count = 1;
    if (count > step) count = step;
#ifdef HAK_SECURE
    if (count < min_blocks) count = min_blocks; // each step a permutation of several blocks
#endif
    if (count > left) count = left;
    char *first = hak_page_start(page) + (size_t)page->reserved * page->block_size;
#ifdef HAK_SECURE
    page->free = carve_shuffled(first, count, page->block_size, page->reserved == 0);
    // Each carved block's canary word says free (wrappers.c), whatever the slot held before.
    for (uint32_t i = 0; i < count; i++) {
        char *b = first + (size_t)i * page->block_size;
        ((uintptr_t *)(b + page->block_size))[-1] = hak_canary_value(b) ^ HAK_CANARY_FREED;
    }
#else
    char *p = first;
    for (uint32_t i = 1; i < count; i++, p += page->block_size)
        hak_link_set((hak_block *)p, (hak_block *)(p + page->block_size));
    hak_link_set((hak_block *)p, NULL);
    page->free = (hak_block *)first;
#endif
    page->reserved = (uint16_t)(page->reserved + count);
    return 1;
}

// Moves local_free and xthread_free into `free` when `free` is empty (owner only).
void hak_page_collect(hak_page *page) {
    if (page->free == NULL) {
        page->free = page->local_free;
        page->local_free = NULL;
    } else if (HAK_UNLIKELY(!hak_pop_ok(page, page->free))) {
        // A head left by a pop is a link nobody tested yet; the fast pop that found it below
        // the page's descriptor (hak_pop_ok) sent it here. Every slow pop follows a collect.
        hak_page_bad_link(page->free);
    }
    uintptr_t old = atomic_load_explicit(&page->xthread_free, memory_order_relaxed);
    if ((old & ~HAK_XT_FLAGS) == 0) return;
    // Take the blocks, keep the flags (a notifier in flight still owns its bit).
    while (!atomic_compare_exchange_weak_explicit(&page->xthread_free, &old, old & HAK_XT_FLAGS,
                                                  memory_order_acquire, memory_order_relaxed)) {
    }
    // Other threads free into this heap's pages: its next sweep looks for pages they emptied.
    hak_heap *owner = hak_page_local_owner(page); // NULL: full, or collected by a reclaimer
    if (owner) owner->remote_seen = 1;
    hak_block *list = (hak_block *)(old & ~HAK_XT_FLAGS);
    hak_block *tail = list, *next;
    int32_t left = page->used; // blocks the chain may hold
    const hak_slot_bounds bounds = hak_page_slot_bounds(page);
    // More blocks than ever handed out: a block was freed twice (the list may even be a
    // cycle); stop rather than walk it forever. Blocks of 16 B and up carry the remote-free
    // key in their second word: cleared here (two loops, so the test is not made per block).
    // Each link checked before the walk writes through it (hak_link_walk).
    if (page->block_size >= 16) {
        for (;; tail = next) {
            ((uintptr_t *)tail)[1] = 0;
            if (HAK_UNLIKELY(--left < 0)) hak_fatal_pointer("free", "double free", tail);
            if (!hak_link_walk(page, &bounds, tail, &next)) break;
        }
    } else {
        for (;; tail = next) {
            if (HAK_UNLIKELY(--left < 0)) hak_fatal_pointer("free", "double free", tail);
            if (!hak_link_walk(page, &bounds, tail, &next)) break;
        }
    }
    hak_link_set(tail, page->free);
    page->free = list;
    page->used = (int16_t)left;
}

// Medium pages: the superslab's word of purged blocks of this page.
static uint64_t *purged_bits(const hak_page *page) {
    hak_superslab *ss = hak_superslab_of_page(page);
    hak_assert(ss->page_kind == HAK_KIND_MEDIUM);
    return &ss->purged_blocks[page - ss->pages];
}

// The lean policy's purge of idle blocks (medium pages, owner only; purge.c decides when): of the
// free blocks past the first `keep` of `free` and then `local_free` (the most recently freed,
// which the next mallocs take), those that were there at the previous purge already give their
// whole OS pages back and leave the lists; the others are marked (their third word, `mark`
// mixed with their address) to go at the next. A bit per purged block in the superslab header
// remembers it (a purged block can hold no link: its memory reads as zero). They come back a
// few at a time when the lists run dry (hak_page_restore_purged). Unlike the purge at thread
// exit, which keeps each block's first OS page for its link, this returns all of a 10-32 KiB
// block but the OS pages it shares with its neighbours. Purging without the mark, whatever
// lay past the first few, made mid_large_mt1 (a steady live set of 8-32 KiB blocks) fault far
// more often and run far slower: the blocks it was about to reuse went back and faulted in
// again (measured: docs/notebook/2026-11-24-not-kept.md, "Issue #11, ninth pass").
#define HAK_RESTORE_STEP 4
// A link the purge follows, checked in full: a forged one must not be written or madvise'd.
static hak_block *checked_link(const hak_page *page, const hak_block *b) {
    hak_block *next = hak_link(b);
    if (HAK_UNLIKELY(next && !hak_page_slot_holds(page, (uintptr_t)next)))
        hak_page_link_corrupted(b);
    return next;
}
static unsigned purge_list(hak_page *page, hak_block **list, unsigned keep, int32_t *left,
                           uintptr_t mark, uintptr_t marked_before) {
    hak_block *prev = NULL, *b = *list; // b follows prev on the list (or heads it)
    unsigned kept = 0;
    if (b && !hak_page_slot_holds(page, (uintptr_t)b)) hak_page_bad_link(b);
    while (b && *left > 0 && kept < keep) {
        prev = b;
        b = checked_link(page, b);
        kept++;
        (*left)--;
    }
    uint64_t *bits = purged_bits(page);
    uintptr_t start = (uintptr_t)hak_page_start(page), os_mask = HAK_OS_PAGE_SIZE - 1;
    uint32_t size = page->block_size;
    for (; b && *left > 0; (*left)--) {
        uintptr_t *word = (uintptr_t *)b;
        hak_block *next = checked_link(page, b); // before the madvise: it may drop the link
        if (word[2] != (marked_before ^ (uintptr_t)b)) {
            word[2] = mark ^ (uintptr_t)b; // idle from now on: purged next time if still here
            prev = b;
            b = next;
            continue;
        }
        if (prev)
            hak_link_set(prev, next);
        else
            *list = next;
        uintptr_t lo = ((uintptr_t)b + os_mask) & ~os_mask, hi = ((uintptr_t)b + size) & ~os_mask;
        if (hi > lo) {
            hak_os_decommit((void *)lo, hi - lo);
            hak_stat_add(ss_os, block_purge_kb, (hi - lo) / 1024);
        }
        *bits |= (uint64_t)1 << (((uintptr_t)b - start) / size);
        page->has_purged = 1;
        b = next;
    }
    return kept;
}

void hak_page_purge_idle_blocks(hak_page *page, unsigned keep, uintptr_t mark,
                                uintptr_t marked_before) {
    int32_t left = (int32_t)page->reserved - page->used; // bounds lists a double free looped
    int saved = errno;
    keep -= purge_list(page, &page->free, keep, &left, mark, marked_before);
    purge_list(page, &page->local_free, keep, &left, mark, marked_before);
    errno = saved;
}

// Puts up to HAK_RESTORE_STEP purged blocks back on `free` (owner only): each is written (its
// link) and so faults in again; the others stay purged until needed.
void hak_page_restore_purged(hak_page *page) {
    uint64_t *bits = purged_bits(page);
    char *start = hak_page_start(page);
    for (unsigned n = 0; *bits && n < HAK_RESTORE_STEP; n++) {
        unsigned j = (unsigned)__builtin_ctzll(*bits);
        *bits &= *bits - 1;
        hak_block *block = (hak_block *)(start + (size_t)j * page->block_size);
        hak_link_set(block, page->free);
        page->free = block;
    }
    page->has_purged = *bits != 0;
}

#ifdef HAK_DEBUG
void hak_page_check_link(const hak_page *page, const hak_block *block) {
    const hak_block *next = hak_link(block);
    if (next && !hak_page_contains_block(page, (uintptr_t)next)) hak_page_link_corrupted(block);
}
#endif

#ifdef HAK_SECURE
void hak_link_tampered(const hak_block *holder) {
    hak_fatal_pointer("malloc", "free list corrupted (write after free or overflow?) at block",
                      holder);
}
#endif

void hak_page_link_corrupted(const hak_block *block) {
    hak_fatal_pointer("malloc", "free list corrupted (write after free?) at block", block);
}

void hak_page_bad_link(const void *p) {
    hak_fatal_pointer("malloc", "free list corrupted (write after free or overflow?): link to", p);
}

// A page whose `used` came down to 0 (and is about to be given back or retained): every block
// carved must now be on free or local_free, each once. More (a cycle, a duplicate) or fewer
// means a block was freed twice or a pointer that was no block was freed. Bounded walk.
void hak_page_verify_empty(const hak_page *page) {
    uintptr_t start = (uintptr_t)hak_page_start(page);
    uint32_t size = page->block_size, reserved = page->reserved, count = 0;
    uintptr_t carved = (uintptr_t)reserved * size; // no block lies beyond what was carved
    uint64_t purged = page->has_purged ? *purged_bits(page) : 0; // free, on no list
    const hak_block *lists[2] = {page->free, page->local_free};
    for (int l = 0; l < 2; l++)
        for (const hak_block *b = lists[l]; b; b = hak_link(b)) {
            uintptr_t offset = (uintptr_t)b - start;
            if (++count > reserved || offset >= carved || (uint32_t)offset % size ||
                (purged && (purged >> (offset / size) & 1)))
                hak_fatal_pointer("free", "double free or invalid pointer in the page of", b);
        }
    count += (uint32_t)__builtin_popcountll(purged);
    if (count != page->reserved)
        hak_fatal_pointer("free", "double free or invalid pointer in the page of",
                          hak_page_start(page));
}

// A free from a thread that does not own the page: `first`..`last`, a chain of this page's
// blocks (last->next is overwritten), goes onto xthread_free with one CAS. If the owner parked
// the page on its full list (HAK_XT_FULL), nobody would look at that list, so the first remote
// freer instead swaps FULL for NOTIFYING, pushes the chain's first block onto the owner heap's
// delayed_free list, and pushes the rest onto xthread_free as it clears NOTIFYING. The owner frees
// delayed blocks at its next refill, which moves the page back to its queue. The chain keeps the
// page in use until then, so the page cannot be recycled under the notifier; an exiting owner
// clears FULL and waits out NOTIFYING before it drains delayed_free, so no chain is ever pushed to
// a heap that has left.
void hak_page_free_remote(hak_page *page, hak_block *first, hak_block *last) {
    uintptr_t old = atomic_load_explicit(&page->xthread_free, memory_order_relaxed);
    for (;;) {
        if (old & HAK_XT_FULL) {
            uintptr_t notifying = (old & ~HAK_XT_FULL) | HAK_XT_NOTIFYING;
            if (!atomic_compare_exchange_weak_explicit(&page->xthread_free, &old, notifying,
                                                       memory_order_acq_rel, memory_order_relaxed))
                continue;
            hak_heap *owner =
                atomic_load_explicit(&hak_superslab_of_page(page)->owner, memory_order_acquire);
            if (owner) {
                // Only the chain's first block tells the owner; the rest goes onto
                // xthread_free below, which the owner takes in one exchange once the page is
                // back in its queue (each delayed block costs a lookup and a free of its own).
                hak_block *rest = first == last ? NULL : hak_link(first);
                hak_block *head = atomic_load_explicit(&owner->delayed_free, memory_order_relaxed);
                do {
                    hak_link_set(first, head);
                } while (!atomic_compare_exchange_weak_explicit(&owner->delayed_free, &head, first,
                                                                memory_order_release,
                                                                memory_order_relaxed));
                if (!rest) {
                    atomic_fetch_and_explicit(&page->xthread_free, ~HAK_XT_NOTIFYING,
                                              memory_order_release);
                    return;
                }
                first = rest;
            }
            // The chain (or its rest) onto xthread_free, NOTIFYING cleared with it. The owner
            // cannot set FULL meanwhile: NOTIFYING keeps xthread_free non-zero.
            old = atomic_load_explicit(&page->xthread_free, memory_order_relaxed);
            do {
                hak_link_set(last, (hak_block *)(old & ~HAK_XT_FLAGS));
            } while (!atomic_compare_exchange_weak_explicit(
                &page->xthread_free, &old, (uintptr_t)first | (old & HAK_XT_FULL),
                memory_order_release, memory_order_relaxed));
            return;
        }
        hak_link_set(last, (hak_block *)(old & ~HAK_XT_FLAGS));
        if (atomic_compare_exchange_weak_explicit(&page->xthread_free, &old,
                                                  (uintptr_t)first | (old & HAK_XT_FLAGS),
                                                  memory_order_release, memory_order_relaxed))
            return;
    }
}

void hak_page_clear_full(hak_page *page) {
    atomic_fetch_and_explicit(&page->xthread_free, ~HAK_XT_FULL, memory_order_acq_rel);
}

// Debug: is `block` already on one of the owner's free lists? (the full double-free check)
int hak_page_has_free_block(const hak_page *page, const hak_block *block) {
    if (page->has_purged &&
        (*purged_bits(page) >>
             (((uintptr_t)block - (uintptr_t)hak_page_start(page)) / page->block_size) &
         1))
        return 1;
    for (const hak_block *b = page->free; b; b = hak_link(b))
        if (b == block) return 1;
    for (const hak_block *b = page->local_free; b; b = hak_link(b))
        if (b == block) return 1;
    return 0;
}

// Visits up to `visits` abandoned superslabs from the head of the list (the longest waiting):
// collects the remote frees of every page, gives emptied pages back to their superslab and an
// emptied superslab to the OS policy; one with live blocks goes back to the tail, its free
// slots purged as the policy says (hak_superslab_requeue_abandoned). The visitor holds a
// taken superslab exclusively, as an adopter would, so it may collect its pages.
void hak_page_reclaim_abandoned(unsigned visits) {
    // And a sixteenth of the list: with many abandoned superslabs (a thread per generation,
    // each leaving a small one and medium ones of a group of classes each) two visits now and
    // then would leave most of those that the remote frees emptied mapped for long after.
    visits += (unsigned)(hak_superslab_abandoned_count() / 16);
    for (; visits; visits--) {
        hak_superslab *ss = hak_superslab_take_abandoned();
        if (!ss) return;
        for (unsigned i = 0; i < ss->page_count; i++) {
            hak_page *page = &ss->pages[i];
            if (!page->in_use) continue;
            hak_page_collect(page);
            if (page->used == 0) hak_superslab_page_free(ss, page);
        }
        if (ss->pages_in_use == 0) {
            hak_stat_add(ss_os, abandoned_reclaimed, 1);
            hak_superslab_release(ss);
            continue;
        }
        hak_superslab_requeue_abandoned(ss);
    }
}

// Every abandoned superslab visited once (out of address space: hak_release_cached).
void hak_page_reclaim_all_abandoned(void) {
    size_t count = hak_superslab_abandoned_count();
    if (count) hak_page_reclaim_abandoned((unsigned)(count - count / 16));
}
