// Superslabs: 2 MiB-aligned regions split into pages of one size (see types.h), the
// registry that tells our regions from foreign memory, and the list of superslabs abandoned
// by exited threads with blocks still live.
#include <pthread.h>
#include <sys/mman.h>
#include <sys/random.h>

#include "segment.h"

_Atomic uint8_t hak_registry[HAK_REGISTRY_SIZE];

void hak_registry_set(uintptr_t chunk, unsigned value) {
    atomic_store_explicit(&hak_registry[chunk >> HAK_SS_SHIFT], (uint8_t)value,
                          memory_order_release);
}

static hak_lock abandoned_lock = HAK_LOCK_INIT(abandoned);
static hak_superslab *abandoned_first, *abandoned_last;
static _Atomic size_t abandoned_count; // read without the lock as a hint
// The earliest purge deadline of a superslab on the list (0: none), on the arena's scheduler
// (hak_arena_cache_next_due). A superslab taken off the list leaves it as it was: the sweep
// that finds it gone sets it again.
static _Atomic uint64_t abandoned_next_due;

// The abandoned list is FIFO: pushed at the tail, popped at the head.
static void push_abandoned(hak_superslab *ss) {
    ss->next = NULL;
    ss->prev = abandoned_last;
    if (abandoned_last)
        abandoned_last->next = ss;
    else
        abandoned_first = ss;
    abandoned_last = ss;
    atomic_fetch_add_explicit(&abandoned_count, 1, memory_order_relaxed);
    uint64_t due = ss->purge_due_ns;
    uint64_t next = atomic_load_explicit(&abandoned_next_due, memory_order_relaxed);
    if (due && (!next || due < next))
        atomic_store_explicit(&abandoned_next_due, due, memory_order_relaxed);
}

static void unlink_abandoned(hak_superslab *ss) {
    if (ss->prev)
        ss->prev->next = ss->next;
    else
        abandoned_first = ss->next;
    if (ss->next)
        ss->next->prev = ss->prev;
    else
        abandoned_last = ss->prev;
    ss->next = ss->prev = NULL;
    atomic_fetch_sub_explicit(&abandoned_count, 1, memory_order_relaxed);
}

static const uint8_t kind_shift[HAK_KIND_COUNT] = {HAK_PAGE_SHIFT, HAK_KIND_MEDIUM_SHIFT,
                                                   HAK_KIND_BIG_SHIFT};
static const uint8_t kind_registry[HAK_KIND_COUNT] = {HAK_REG_SMALL, HAK_REG_MEDIUM, HAK_REG_BIG};

// An empty superslab cut into pages of `page_kind`, its registry byte saying so, for the pages
// of the classes of group `affinity` only (or of any class: HAK_AFFINITY_ANY).
hak_superslab *hak_superslab_acquire(hak_heap *heap, unsigned page_kind, unsigned affinity) {
    hak_superslab *ss = hak_arena_superslab_get();
    if (!ss) return NULL;
    ss->kind = HAK_SS_SMALL;
    ss->page_kind = (uint8_t)page_kind;
    ss->affinity = (uint8_t)affinity;
    ss->page_shift = kind_shift[page_kind];
    ss->page_count = (uint8_t)(HAK_SS_SIZE >> ss->page_shift);
    hak_registry_set((uintptr_t)ss, kind_registry[page_kind]);
    atomic_store_explicit(&ss->owner, heap, memory_order_relaxed);
    // A small superslab never uses slot 0 (the 60 KiB after its header): the free fast path
    // finds page 0's descriptor for the header's addresses too and tests only the page's owner
    // and block alignment, so with page 0 in use a free() of a pointer into the header would
    // link descriptor memory into a free list. Unused, slot 0 has no owner and such a free goes
    // to the full check; the slot is address space only, never touched, and costs no
    // instruction. Medium and big superslabs test the address instead (wrappers.c: in_header):
    // a medium superslab without slot 0 took more page faults and peak RSS on mid_large_mt1
    // and ran slower than with the test (docs/notebook/2026-11-26-allocator-measurements.md,
    // "Bad pointers").
    ss->free_page_mask = (uint32_t)((1ull << ss->page_count) - 1);
    if (page_kind == HAK_KIND_SMALL) ss->free_page_mask &= ~1u;
    ss->purge_due_ns = 0;
    ss->young_mask = ss->graced_mask = 0;
#ifdef HAK_SECURE
    // New secrets for its links (types.h, hak_link_encode); from the process's key stream
    // when the kernel's pool cannot answer at once.
    if (getrandom(ss->secrets, sizeof ss->secrets, GRND_NONBLOCK) != (ssize_t)sizeof ss->secrets)
        for (unsigned i = 0; i < HAK_PAGES_PER_SS; i++)
            ss->secrets[i] = hak_canary_key * 0x9e3779b97f4a7c15u ^
                             ((uintptr_t)ss + i) * 0xbf58476d1ce4e5b9u ^ hak_coarse_now_ns();
#endif
    hak_stat_add(ss_os, alloc, 1);
    return ss;
}

void hak_superslab_release(hak_superslab *ss) {
    hak_assert(ss->pages_in_use == 0);
    hak_stat_add(ss_os, free, 1);
    hak_arena_superslab_put(ss);
}

// Prefers a slot whose memory is still resident (freed, not purged yet): no page faults, and
// the speed-first policy purges fewer slots (it purges what stayed resident beyond
// HAK_DIRTY_SLOTS_MAX free slots for HAK_PURGE_DELAY_NS, see arena.c). Among those, the first at
// or after a start that a superslab of a group of classes takes from its group: every header
// sits at a multiple of 2 MiB, so the descriptors of each group's first page would otherwise
// share one set of every cache level, and their pages' first blocks another.
// Makes page slot i readable and writable if it is not yet (see hak_superslab.rw_units); 0 when
// the kernel refuses (out of memory, or of mappings: vm.max_map_count).
static int slot_writable(hak_superslab *ss, unsigned i) {
    unsigned per = 1u << (ss->page_shift - HAK_PAGE_SHIFT); // 64 KiB units per page
    uint32_t units = per >= 32 ? ~0u : ((1u << per) - 1) << (i * per);
    if ((ss->rw_units & units) == units) return 1;
    char *start = (char *)ss + (i == 0 ? HAK_SS_HEADER_SIZE : (size_t)i << ss->page_shift);
    char *end = (char *)ss + ((size_t)(i + 1) << ss->page_shift);
    int ok = hak_os_protect(start, (size_t)(end - start), 1);
    hak_stat_add(ss_os, mprotect, 1);
    if (ok) ss->rw_units |= units;
    return ok;
}

hak_page *hak_superslab_page_alloc(hak_superslab *ss) {
    if (!ss->free_page_mask) return NULL;
    uint32_t warm = ss->free_page_mask & ss->dirty_mask, mask = warm ? warm : ss->free_page_mask;
    unsigned start = ss->affinity == HAK_AFFINITY_ANY ? 0 : ss->affinity % ss->page_count;
    uint32_t from_start = mask & ~((1u << start) - 1);
    unsigned i = (unsigned)__builtin_ctz(from_start ? from_start : mask);
    if (!slot_writable(ss, i)) return NULL;
    ss->free_page_mask &= ~(1u << i);
    ss->dirty_mask &= ~(1u << i);
    ss->young_mask &= ~(1u << i);
    ss->graced_mask &= ~(1u << i);
    ss->pages_in_use++;
    return &ss->pages[i];
}

void hak_superslab_page_free(hak_superslab *ss, hak_page *page) {
    unsigned i = (unsigned)(page - ss->pages);
    hak_assert(!(ss->free_page_mask & (1u << i)));
    // A later free() of a stale pointer into this slot must not look like an owned page.
    page->in_use = 0;
    hak_page_set_local_owner(page, NULL);
    atomic_store_explicit(&page->xthread_free, 0, memory_order_relaxed);
    page->free = page->local_free = NULL; // (its purged blocks: hak_page_init resets them)
    ss->free_page_mask |= 1u << i;
    ss->dirty_mask |= 1u << i;
    ss->young_mask &= ~(1u << i); // (young: only an adopter's grace, arena.c)
    ss->graced_mask &= ~(1u << i);
    ss->pages_in_use--;
}

// Gives the memory of the superslab's resident free slots back to the kernel, one madvise per
// run of adjacent slots (they read as zero afterwards; carving rewrites every link anyway).
// The header page stays.
size_t hak_superslab_purge(hak_superslab *ss, int aged) {
    uint32_t mask = ss->dirty_mask & ss->free_page_mask & (aged ? ~ss->young_mask : ~0u);
    ss->young_mask = 0;
    ss->dirty_mask &= ~mask;
    ss->purge_due_ns = 0;
    size_t dropped = 0;
    while (mask) {
        unsigned first = (unsigned)__builtin_ctz(mask);
        unsigned end = first;
        while (end < ss->page_count && (mask >> end & 1u))
            end++;
        mask &= end < 32 ? ~((1u << end) - 1) : 0u;
        char *start =
            (char *)ss + (first == 0 ? HAK_SS_HEADER_SIZE : (size_t)first << ss->page_shift);
        char *stop = (char *)ss + ((size_t)end << ss->page_shift);
        hak_os_decommit(start, (size_t)(stop - start));
        hak_stat_add(ss_os, slot_purge_kb, (size_t)(stop - start) / 1024);
        dropped += (size_t)(stop - start);
    }
    return dropped;
}

void hak_superslab_abandon(hak_superslab *ss) {
    hak_stat_add(ss_os, abandon, 1);
    // Nobody allocates from it until it is adopted: its free slots stay resident while the
    // purge delay runs, warm for the adopter, then none if they are more than the floor.
    hak_arena_superslab_unowned(ss);
    atomic_store_explicit(&ss->owner, NULL, memory_order_seq_cst);
    hak_lock_acquire(&abandoned_lock);
    push_abandoned(ss);
    hak_lock_release(&abandoned_lock);
}

// The abandoned superslab that has waited longest, taken off the list (its taker holds it
// exclusively, as an adopter would); NULL when there is none (page.c: hak_page_reclaim_abandoned).
hak_superslab *hak_superslab_take_abandoned(void) {
    if (!atomic_load_explicit(&abandoned_count, memory_order_relaxed)) return NULL;
    hak_lock_acquire(&abandoned_lock);
    hak_superslab *ss = abandoned_first;
    if (ss) unlink_abandoned(ss);
    hak_lock_release(&abandoned_lock);
    return ss;
}

size_t hak_superslab_abandoned_count(void) {
    return atomic_load_explicit(&abandoned_count, memory_order_relaxed);
}

uint64_t hak_superslab_abandoned_next_due(void) {
    return atomic_load_explicit(&abandoned_next_due, memory_order_relaxed);
}

// The free slots of every listed superslab whose deadline passed are purged as the policy says
// (hak_arena_purge_aged), in place: the list's lock makes the sweeper their only holder, as a
// visitor is (only a holder changes a superslab's slots; remote frees touch its pages' lists).
// Without it, the slots a thread left waited for a visit (two superslabs from the head of the
// list now and then), well past their delay when the list is long.
void hak_superslab_purge_due_abandoned(uint64_t now) {
    hak_lock_acquire(&abandoned_lock);
    uint64_t next = 0;
    for (hak_superslab *ss = abandoned_first; ss; ss = ss->next) {
        if (!ss->purge_due_ns) continue;
        if (ss->purge_due_ns <= now) hak_arena_purge_aged(ss, now); // may set a new deadline
        if (ss->purge_due_ns && (!next || ss->purge_due_ns < next)) next = ss->purge_due_ns;
    }
    atomic_store_explicit(&abandoned_next_due, next, memory_order_relaxed);
    hak_lock_release(&abandoned_lock);
}

// A visited superslab that still has live blocks goes back to the tail, its free slots purged as
// the policy says for a superslab nobody owns.
void hak_superslab_requeue_abandoned(hak_superslab *ss) {
    hak_arena_superslab_unowned(ss);
    hak_lock_acquire(&abandoned_lock);
    push_abandoned(ss);
    hak_lock_release(&abandoned_lock);
}

// Could a heap that needs a page of `cls` use this abandoned superslab's pages? One of them
// holds the class with a block free (or not yet carved, or freed by another thread and not
// collected yet). Reads what its last owner left; only remote frees change it meanwhile.
static int has_room_for(const hak_superslab *ss, unsigned cls) {
    for (unsigned i = 0; i < ss->page_count; i++) {
        const hak_page *page = &ss->pages[i];
        if (!page->in_use || page->class_idx != cls) continue;
        if (page->used < page->reserved || page->reserved < page->capacity ||
            (atomic_load_explicit(&page->xthread_free, memory_order_relaxed) & ~HAK_XT_FLAGS))
            return 1;
    }
    return 0;
}

// May pages of `cls` come from this superslab (its page kind and affinity)?
static int takes_class(const hak_superslab *ss, unsigned cls) {
    return ss->page_kind == hak_class_kind[cls] && ss->affinity == hak_arena_class_affinity(cls);
}

// Could a heap use this abandoned superslab for `cls`: one it may take pages of `cls` from,
// with a page of the class that has room?
static int serves(const hak_superslab *ss, unsigned cls) {
    return takes_class(ss, cls) && has_room_for(ss, cls);
}

// An abandoned superslab for a heap out of pages of `cls` (whose sizes include those of class
// `merged` in this heap, else merged == cls), taken off the list: the longest waiting (of the
// first HAK_ADOPT_SCAN) with a page of either class that has room, else one of the class's page
// kind and affinity with a free slot, else none. An adopter takes every page of
// the superslab, so taking whichever came first made the first thread of a new generation
// adopt superslab after superslab for one class after another, with all their pages of the
// other classes, while the threads after it found none left and cut fresh pages
// (docs/allocator.md, "Adoption").
#define HAK_ADOPT_SCAN 256
hak_superslab *hak_superslab_pop_abandoned(unsigned cls, unsigned merged) {
    // The hint first, here too: every refill the heap cannot serve asks (no call when empty).
    if (!atomic_load_explicit(&abandoned_count, memory_order_relaxed)) return NULL;
    hak_lock_acquire(&abandoned_lock);
    hak_superslab *ss = NULL, *with_slot = NULL;
    unsigned n = 0;
    for (hak_superslab *s = abandoned_first; s && n < HAK_ADOPT_SCAN; s = s->next, n++) {
        if (serves(s, cls) || (merged != cls && serves(s, merged))) {
            ss = s;
            break;
        }
        if (!with_slot && s->free_page_mask && takes_class(s, cls)) with_slot = s;
    }
    if (!ss) ss = with_slot;
    if (ss) {
        unlink_abandoned(ss);
        hak_stat_add(ss_os, adopt, 1);
        hak_arena_superslab_adopted(ss);
    }
    hak_lock_release(&abandoned_lock);
    return ss;
}

void hak_superslab_fork_prepare(void) {
    hak_lock_acquire(&abandoned_lock);
}
void hak_superslab_fork_parent(void) {
    hak_lock_release(&abandoned_lock);
}
void hak_superslab_fork_child(void) {
    hak_lock_reset(&abandoned_lock);
}
