// Per-thread heaps: where a thread's pages live between the fast paths.
//   queue[cls]  pages of the class that may have free blocks; queue[cls].first is direct[cls],
//               except after an owner free into another medium or big page, which makes that
//               page direct[cls] wherever it is in the queue (free_fast, wrappers.c)
//   full        pages with no free block; they leave the free fast path (local_owner = NULL).
//               The first remote free into one goes to delayed_free instead (see page.c), so
//               the owner learns about it without ever scanning this list.
//   superslabs  owned regions, one list per page kind (small, medium, big pages); fresh pages
//               come from the first, and a superslab with a free slot is moved first when the
//               first is full
// Heap structs come from a pool and are never unmapped.
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <string.h>
#include <sys/mman.h>

#include "heap.h"

static hak_lock heaps_lock = HAK_LOCK_INIT(heaps);
static hak_heap *heaps_live;   // every heap in use (for stats at exit)
static hak_heap *heaps_unused; // released by exited threads, reused first
static char *heaps_chunk;      // bump area for new heap structs
static size_t heaps_chunk_left;

#define HAK_HEAP_CHUNK (64 * 1024)

static void queue_remove(hak_page_queue *q, hak_page *page) {
    if (page->prev)
        page->prev->next = page->next;
    else
        q->first = page->next;
    if (page->next)
        page->next->prev = page->prev;
    else
        q->last = page->prev;
    page->next = page->prev = NULL;
}

static void queue_push_front(hak_page_queue *q, hak_page *page) {
    page->prev = NULL;
    page->next = q->first;
    if (q->first)
        q->first->prev = page;
    else
        q->last = page;
    q->first = page;
}

static void queue_push_back(hak_page_queue *q, hak_page *page) {
    page->next = NULL;
    page->prev = q->last;
    if (q->last)
        q->last->next = page;
    else
        q->first = page;
    q->last = page;
}

static void set_direct(hak_heap *heap, unsigned cls) {
    hak_page *first = heap->queue[cls].first;
    heap->direct[cls] = first ? first : &hak_page_empty;
}

// Parks a page whose free lists are empty (and fully carved) on the full list, flagged so that
// the next remote free notifies this heap. Returns 0 instead if remote frees raced in and the
// page has blocks again (it then stays where it is).
static int park_full(hak_heap *heap, hak_page *page) {
    while (!hak_page_mark_full(page)) {
        hak_page_collect(page);
        if (page->free) return 0;
        sched_yield(); // only NOTIFYING was set: a notifier is finishing its last step
    }
    page->in_full = 1;
    hak_page_set_local_owner(page, NULL); // owner frees take the slow path, which un-fulls it
    page->prev = NULL;
    page->next = heap->full;
    if (heap->full) heap->full->prev = page;
    heap->full = page;
    return 1;
}

// A queued page the refill scan found without free blocks: to the full list (1), or kept where
// it is when remote frees raced in (0).
int hak_heap_park_exhausted(hak_heap *heap, hak_page *page) {
    hak_page_queue *q = &heap->queue[page->class_idx];
    queue_remove(q, page);
    if (park_full(heap, page)) return 1;
    queue_push_front(q, page);
    return 0;
}

static void full_remove(hak_heap *heap, hak_page *page) {
    if (page->prev)
        page->prev->next = page->next;
    else
        heap->full = page->next;
    if (page->next) page->next->prev = page->prev;
    page->next = page->prev = NULL;
    page->in_full = 0;
    // FULL stays set: clearing it would cost an atomic per full->queue move, and a stale flag
    // only sends one remote free through delayed_free, which the owner handles as a local free
    // (see hak_heap_free_delayed).
}

// A full page that got a block back. If other threads freed into it (its xthread_free holds a
// chain: the delayed free of a remote free's first block brought it here), it goes to the
// front of its queue, so that the next refill collects those blocks while the freeing thread's
// cache still has them; behind it the queue keeps the pages whose remote frees are older and
// colder. (Back of the queue: xmalloc-test, two threads allocating and two freeing 64-byte
// blocks, collected from the coldest page first, walking its chain a cache miss a link:
// docs/notebook/2026-12-07-branches.md.) A page that got only this owner free goes to the
// back, where more of its blocks can come back before a refill takes it.
void hak_heap_page_unfull(hak_heap *heap, hak_page *page) {
    full_remove(heap, page);
    hak_page_set_local_owner(page, heap);
    if (atomic_load_explicit(&page->xthread_free, memory_order_relaxed) & ~HAK_XT_FLAGS)
        queue_push_front(&heap->queue[page->class_idx], page);
    else
        queue_push_back(&heap->queue[page->class_idx], page);
    if (heap->direct[page->class_idx] == &hak_page_empty) set_direct(heap, page->class_idx);
}

// Blocks that other threads freed into this heap's full pages: freed here as owner frees,
// which moves their pages back to the queues.
void hak_heap_free_delayed_blocks(hak_heap *heap) {
    hak_block *block = atomic_exchange_explicit(&heap->delayed_free, NULL, memory_order_acquire);
    while (block) {
        hak_block *next = hak_link(block);
        // The chain runs through blocks of many pages: each link must be a block of a superslab
        // (checked in full: a forged one would be written through below).
        unsigned kind = hak_registry_get((uintptr_t)block);
        if (kind != HAK_REG_SMALL && kind != HAK_REG_MEDIUM && kind != HAK_REG_BIG)
            hak_page_bad_link(block);
        hak_superslab *ss = hak_superslab_of((uintptr_t)block);
        hak_page *page = hak_page_of(ss, (uintptr_t)block);
        if (!hak_page_slot_holds(page, (uintptr_t)block)) hak_page_bad_link(block);
        if (page->block_size >= 16) ((uintptr_t *)block)[1] = 0; // the remote-free key
        hak_heap_free_local(heap, page, block);
        block = next;
    }
}

static void unlink_superslab(hak_heap *heap, hak_superslab *ss) {
    if (ss->prev)
        ss->prev->next = ss->next;
    else
        heap->superslabs[ss->page_kind] = ss->next;
    if (ss->next) ss->next->prev = ss->prev;
}

static void push_superslab(hak_heap *heap, hak_superslab *ss) {
    hak_superslab **list = &heap->superslabs[ss->page_kind];
    atomic_store_explicit(&ss->owner, heap, memory_order_seq_cst);
    ss->prev = NULL;
    ss->next = *list;
    if (*list) (*list)->prev = ss;
    *list = ss;
}

// Does the heap own another superslab whose pages could serve the same classes as ss's?
static int has_other_alike(const hak_heap *heap, const hak_superslab *ss) {
    for (const hak_superslab *other = heap->superslabs[ss->page_kind]; other; other = other->next)
        if (other != ss && other->affinity == ss->affinity) return 1;
    return 0;
}

void hak_heap_release_page(hak_heap *heap, hak_page *page) {
    hak_superslab *ss = (hak_superslab *)((uintptr_t)page & ~(uintptr_t)HAK_SS_MASK);
    heap->shrink_bytes += (uint64_t)1 << ss->page_shift;
    hak_superslab_page_free(ss, page);
    hak_superslab *first = heap->superslabs[ss->page_kind];
    if (ss->pages_in_use == 0 && has_other_alike(heap, ss)) {
        // Empty and not the heap's only superslab of its kind (and affinity): back to the OS
        // policy.
        unlink_superslab(heap, ss);
        hak_superslab_release(ss);
        return;
    }
    hak_purge_slot_freed(heap, ss);
    if (ss != first) {
        // It has a free slot now: move it first, where fresh pages are taken from.
        unlink_superslab(heap, ss);
        push_superslab(heap, ss);
    }
}

void hak_heap_detach_page(hak_heap *heap, hak_page *page) {
    if (page->in_full)
        full_remove(heap, page);
    else
        queue_remove(&heap->queue[page->class_idx], page);
}

// A retained page carries no live block, so it leaves the free fast path (local_owner NULL): a
// stale free() into it reaches the slow path, which reports the double free.
static void retain_empty_page(hak_heap *heap, hak_page *page) {
    hak_page_set_local_owner(page, NULL);
    page->prev = NULL;
    page->next = heap->spare[page->class_idx];
    heap->spare[page->class_idx] = page;
    heap->spare_count[page->class_idx]++;
}

// A page's last block came back (used == 0). The current page of its class is kept by every
// front, so a malloc/free loop on one size does not map and unmap pages; any other page is
// retained while the class's front keeps fewer than max_spare of its class, else given back to
// its superslab, its lists checked in full first (hak_page_verify_empty).
void hak_heap_page_emptied(hak_heap *heap, hak_page *page) {
    if (page == heap->direct[page->class_idx]) return;
    hak_page_verify_empty(page);
    hak_heap_detach_page(heap, page);
    if (heap->spare_count[page->class_idx] < hak_fronts[heap->route[page->class_idx]].max_spare)
        retain_empty_page(heap, page);
    else
        hak_heap_release_page(heap, page);
}

// An owner free that missed the fast path: the page is on the full list (or the debug build
// checks every free here).
void hak_heap_free_local(hak_heap *heap, hak_page *page, hak_block *block) {
    hak_heap_enter(heap);
    if (page->in_full) hak_heap_page_unfull(heap, page);
    hak_link_set(block, page->local_free);
    page->local_free = block;
    if (--page->used <= 0) {
        hak_heap_free_emptied_slow(heap, page, block);
    }
    hak_heap_leave(heap);
}

// malloc_trim: the empty pages the fronts retain go back to their superslabs (whose free slots
// hak_purge_trim then purges).
void hak_heap_trim_spare(hak_heap *heap) {
    for (unsigned cls = 0; cls < HAK_CLASS_COUNT; cls++) {
        while (heap->spare[cls]) {
            hak_page *page = heap->spare[cls];
            heap->spare[cls] = page->next;
            heap->spare_count[cls]--;
            page->next = NULL;
            hak_heap_release_page(heap, page);
        }
        // and the empty pages a medium or big class keeps in its queue (current_emptied)
        for (hak_page *page = heap->queue[cls].first, *next; page; page = next) {
            next = page->next;
            if (page->used != 0 || page == heap->direct[cls]) continue;
            hak_heap_detach_page(heap, page);
            hak_heap_release_page(heap, page);
        }
    }
}

// An owner free brought `used` to 0 or below: below is a double free (block went onto
// local_free a second time). So is a block now at the head of both lists (it was free
// already: free(p + 8) into a page of 8-byte blocks finds the next, never-used block there),
// and a block past the blocks carved so far is no block handed out (free(p + 4096) there).
// Both tested here, where the free that empties a page lands, in O(1): the current page of a
// class is not walked (a loop of one malloc and one free empties it at every free), and these
// are the probes' cases that glibc catches by its chunk headers (docs/allocator.md).
// The class's current page stays as it is (hak_heap_page_emptied's first test), decided
// before the heap is marked busy: such a loop (a bare free(malloc(64))) then runs no stack
// frame and no busy mark here (measured: docs/notebook/2026-12-02-mid-classes-default.md, "The
// free that empties a class's current page").
static HAK_NOINLINE void free_emptied_other(hak_heap *heap, hak_page *page) {
    hak_heap_enter(heap);
    hak_heap_page_emptied(heap, page);
    hak_heap_leave(heap);
}

// The current page of a class emptied. A free there makes its page the class's
// current one (wrappers.c), so frees in allocation order empty every page while it is current,
// and the page then stays in the queue when the next free makes another current: a thread that
// freed 100 MiB of 1-16 KiB blocks that way kept nearly all its medium pages in use with no
// block in them. The emptied page stays current, ready for the next malloc, unless
// HAK_LEFT_EMPTY_KEEP other empty pages of its class wait in the queue (looked for among its
// first HAK_LEFT_EMPTY_SCAN): then it goes where the free that emptied it would have sent it
// had it not been current, and the queue's first page is current. Releasing every such page
// instead cost mid_large_mt1 throughput (its pages empty and refill all the time, and released
// pages come back through the slow paths), and a test on every medium free costs instructions
// on the fast path; this test runs only on the free that empties the current page (measured:
// docs/notebook/2026-12-02-evening.md, "The thread chain"). A heap
// that is shrinking (hak_heap_shrinking: it gives pages back and takes none) keeps none of
// them: the emptied page and the other empty pages among the first HAK_LEFT_EMPTY_SCAN go
// back. A thread that freed its data and then waited kept three empty 512 KiB pages of each
// medium class, pinning as many superslabs with their free slots resident.
#define HAK_LEFT_EMPTY_KEEP 2
#define HAK_LEFT_EMPTY_SCAN 32
static void release_empty_pages(hak_heap *heap, unsigned cls) {
    unsigned seen = 0;
    hak_heap_enter(heap);
    for (hak_page *other = heap->queue[cls].first, *next; other && seen < HAK_LEFT_EMPTY_SCAN;
         other = next, seen++) {
        next = other->next;
        if (other->used == 0) hak_heap_page_emptied(heap, other);
    }
    hak_heap_leave(heap);
}

static HAK_NOINLINE void current_emptied(hak_heap *heap, hak_page *page) {
    unsigned cls = page->class_idx, empty = 0, seen = 0;
    if (hak_heap_shrinking(heap)) {
        heap->direct[cls] = &hak_page_empty;
        release_empty_pages(heap, cls);
        set_direct(heap, cls);
        return;
    }
    for (hak_page *other = heap->queue[cls].first;
         other && seen < HAK_LEFT_EMPTY_SCAN && empty < HAK_LEFT_EMPTY_KEEP; other = other->next) {
        seen++;
        if (other != page && other->used == 0) empty++;
    }
    if (empty < HAK_LEFT_EMPTY_KEEP) return;
    heap->direct[cls] = &hak_page_empty;
    free_emptied_other(heap, page);
    set_direct(heap, cls);
}

static inline void check_emptied(const hak_page *page, hak_block *block) {
    if (page->used < 0 || (page->free == block && page->local_free == block))
        hak_fatal_pointer("free", "double free", block);
    if ((uintptr_t)block - (uintptr_t)hak_page_start(page) >=
        (uintptr_t)page->reserved * page->block_size)
        hak_fatal_pointer("free", "invalid pointer", block);
}

// What hak_heap_free_emptied (heap.h) does not finish inline, and every medium and big page's
// last free: a page that is not its class's current one goes (hak_heap_page_emptied), the
// current one stays unless others of its class wait empty (current_emptied); a bad free is
// reported.
void hak_heap_free_emptied_slow(hak_heap *heap, hak_page *page, hak_block *block) {
    check_emptied(page, block);
    if (page != heap->direct[page->class_idx])
        free_emptied_other(heap, page);
    else
        current_emptied(heap, page);
}

// Takes over a superslab an exited thread left with live blocks, one with room for class `cls`
// or for the class merged into it here (hak_superslab_pop_abandoned): every page joins this
// heap.
int hak_heap_adopt(hak_heap *heap, unsigned cls) {
    unsigned merged = cls > 0 && hak_heap_is_merged(heap, cls - 1) ? cls - 1 : cls;
    hak_superslab *ss = hak_superslab_pop_abandoned(cls, merged);
    if (!ss) return 0;
    heap->shrink_bytes = 0; // it takes pages: growing
    push_superslab(heap, ss);
    for (unsigned i = 0; i < ss->page_count; i++) {
        hak_page *page = &ss->pages[i];
        if (!page->in_use) continue;
        hak_page_set_local_owner(page, heap);
        hak_page_collect(page);
        if (page->used == 0) {
            hak_superslab_page_free(ss, page);
        } else if (page->free || page->has_purged || page->reserved < page->capacity ||
                   !park_full(heap, page)) {
            queue_push_back(&heap->queue[page->class_idx], page);
            if (heap->direct[page->class_idx] == &hak_page_empty) set_direct(heap, page->class_idx);
            hak_heap_unmerge(heap, page->class_idx); // a page of it with room: serve it again
        }
    }
    if (ss->pages_in_use == 0 && ss->next) { // all its blocks were freed meanwhile
        unlink_superslab(heap, ss);
        hak_superslab_release(ss);
    } else {
        hak_purge_slot_freed(heap, ss); // the slots of pages that emptied while abandoned
    }
    return 1;
}

// A page for `cls` from a free slot of the heap's superslabs of its kind and affinity (the first
// superslab, else any other, which is then moved first), else, if `may_map`, from a new
// superslab (NULL if not).
static hak_page *fresh_page(hak_heap *heap, unsigned cls, int may_map) {
    unsigned kind = hak_class_kind[cls], affinity = hak_arena_class_affinity(cls);
    hak_superslab *ss = heap->superslabs[kind];
    while (ss && !(ss->free_page_mask && ss->affinity == affinity))
        ss = ss->next;
    if (ss && ss != heap->superslabs[kind]) {
        unlink_superslab(heap, ss);
        push_superslab(heap, ss);
    }
    hak_page *page = ss ? hak_superslab_page_alloc(ss) : NULL;
    if (!page) {
        if (!may_map) return NULL;
        ss = hak_superslab_acquire(heap, kind, affinity);
        if (!ss && hak_release_cached()) ss = hak_superslab_acquire(heap, kind, affinity);
        if (!ss) return NULL;
        push_superslab(heap, ss);
        page = hak_superslab_page_alloc(ss);
    }
    heap->shrink_bytes = 0;
    hak_page_init(page, cls, heap);
    return page;
}

// A free into another heap's page (owner: its superslab's owner, NULL if abandoned) that does
// not continue this thread's current run, in the cases the inline path (wrappers.c:
// free_remote) leaves here: a thread without a heap, a run ending on a page with a flag set, a
// run into an abandoned superslab. The run so far goes to its page, and a new run starts with
// this block. The blocks of a run stay counted as used by their page until pushed, so the page
// cannot be recycled meanwhile; a run ends when a free goes to another page, when this thread
// enters an allocation slow path, and at thread exit. So a batch holds at most one page, and
// not for longer than this thread's next refill. (No bound on its length: a batch of any
// length keeps exactly that one page from emptying, and a count would cost every remote free
// an increment and a compare.)
// A thread without a heap (the caller could not make one: wrappers.c, free_remote_call) frees
// straight to the page.
void hak_heap_free_remote(hak_heap *heap, hak_heap *owner, hak_page *page, hak_block *block) {
    if (heap == &hak_heap_empty) {
        hak_page_free_remote(page, block, block);
        return;
    }
    HAK_HOT_STAT(heap, free, page->class_idx);
    HAK_HOT_STAT(heap, remote_free, page->class_idx);
    hak_heap_flush_remote(heap);
    heap->remote_page = page;
    heap->remote_first = heap->remote_last = block;
    if (!owner) hak_heap_note_abandoned_free(heap);
}

void hak_heap_flush_remote(hak_heap *heap) {
    if (!heap->remote_page) return;
    hak_page_push_remote(heap->remote_page, heap->remote_first, heap->remote_last);
    heap->remote_page = NULL;
    heap->remote_first = heap->remote_last = NULL;
}

// A run of remote frees into an abandoned superslab started. Every
// HAK_ABANDONED_FREES_PER_VISIT of them this thread visits two abandoned superslabs (its own batch
// flushed first, so a page it just emptied counts), so superslabs that only other threads still
// free into go back once empty even if no thread needs a page and adopts them (a thread that frees
// what exited threads left, then idles or exits).
#define HAK_ABANDONED_FREES_PER_VISIT 256
void hak_heap_note_abandoned_free(hak_heap *heap) {
    if (++heap->abandoned_frees < HAK_ABANDONED_FREES_PER_VISIT) return;
    heap->abandoned_frees = 0;
    hak_heap_flush_remote(heap);
    hak_page_reclaim_abandoned(2);
}

void hak_heap_sweep(hak_heap *heap) {
    heap->sweep_countdown = HAK_SWEEP_INTERVAL;
    hak_purge_due(heap); // a heap that only allocates purges too
    if (!heap->remote_seen && ++heap->sweep_idle < HAK_SWEEP_IDLE_EVERY) return;
    heap->remote_seen = 0;
    heap->sweep_idle = 0;
    for (unsigned cls = 0; cls < HAK_CLASS_COUNT; cls++) {
        hak_page *next;
        for (hak_page *page = heap->queue[cls].first; page; page = next) {
            next = page->next;
            hak_page_collect(page);
            if (page->used == 0) {
                hak_stat_add(ss_os, remote_emptied, 1);
                hak_heap_page_emptied(heap, page);
            }
        }
    }
    hak_page_reclaim_abandoned(2);
}

void hak_heap_move_to_front(hak_heap *heap, hak_page *page) {
    hak_page_queue *q = &heap->queue[page->class_idx];
    queue_remove(q, page);
    queue_push_front(q, page);
}

// Makes a page with free blocks (taken off every list) the head of its queue and the direct page.
void hak_heap_install_page(hak_heap *heap, hak_page *page) {
    queue_push_front(&heap->queue[page->class_idx], page);
    heap->direct[page->class_idx] = page;
}

// Class `small`, merged into the next (hak_class_merged_into), gets its own sizes back.
HAK_NOINLINE void hak_heap_split_class(hak_heap *heap, unsigned small) {
    for (size_t n = hak_class_block_size[small - 1] + 1; n <= hak_class_block_size[small]; n++)
        heap->class_of_size[n] = (uint8_t)small;
}

hak_page *hak_heap_new_page(hak_heap *heap, unsigned cls, uint32_t carve_bytes,
                            uint32_t carve_blocks, int may_map) {
    hak_page *page = fresh_page(heap, cls, may_map);
    if (!page) return NULL;
    hak_page_extend(page, carve_bytes, carve_blocks);
    hak_heap_install_page(heap, page);
    return page;
}

hak_heap *hak_heap_create(void) {
    hak_lock_acquire(&heaps_lock);
    hak_heap *heap = heaps_unused;
    if (heap) {
        heaps_unused = heap->next_live;
    } else {
        if (heaps_chunk_left < sizeof(hak_heap)) {
            void *chunk = hak_os_map(HAK_HEAP_CHUNK);
            if (chunk == MAP_FAILED && hak_release_cached()) chunk = hak_os_map(HAK_HEAP_CHUNK);
            if (chunk == MAP_FAILED) {
                hak_lock_release(&heaps_lock);
                return NULL;
            }
            heaps_chunk = chunk;
            heaps_chunk_left = HAK_HEAP_CHUNK;
        }
        heap = (hak_heap *)heaps_chunk;
        size_t step = (sizeof(hak_heap) + 63) & ~(size_t)63;
        heaps_chunk += step;
        heaps_chunk_left = heaps_chunk_left >= step ? heaps_chunk_left - step : 0;
    }
    memset(heap, 0, sizeof *heap);
    heap->busy = 1;            // until its routes are latched
    hak_purge_idle_tick(heap); // sets its countdown (nothing to purge yet)
    for (unsigned c = 0; c <= HAK_CLASS_NONE; c++)
        heap->direct[c] = &hak_page_empty;
    memcpy(heap->class_of_size, hak_route_class_of_size, sizeof heap->class_of_size);
    memcpy(heap->class_of_mid, hak_route_class_of_mid, sizeof heap->class_of_mid);
    heap->next_live = heaps_live;
    if (heaps_live) heaps_live->prev_live = heap;
    heaps_live = heap;
    hak_lock_release(&heaps_lock);
    hak_route_latch(heap);
    hak_heap_leave(heap);
    return heap;
}

// Leaves a page that still has live blocks, its free blocks resident, for whoever adopts its
// superslab (the lean policy gave back the interiors of its free blocks of 8 KiB and more
// until issue #30: docs/notebook/2026-11-26-not-kept.md, "Issue #30, third pass").
static void abandon_page(hak_page *page) {
    hak_page_set_local_owner(page, NULL);
    page->in_full = 0;
    page->next = page->prev = NULL;
    hak_page_clear_full(page);
}

// Thread exit, one list of superslabs: empty pages back to their superslab, empty superslabs to
// the OS policy, the others to the abandoned list.
static void abandon_superslabs(hak_superslab *ss) {
    for (hak_superslab *next_ss; ss; ss = next_ss) {
        next_ss = ss->next;
        for (unsigned i = 0; i < ss->page_count; i++) {
            hak_page *page = &ss->pages[i];
            if (!page->in_use) continue;
            hak_page_collect(page);
            if (page->used == 0)
                hak_superslab_page_free(ss, page);
            else
                abandon_page(page);
        }
        if (ss->pages_in_use == 0)
            hak_superslab_release(ss);
        else
            hak_superslab_abandon(ss);
    }
}

// Thread exit: no new notifications (FULL cleared, notifiers in flight waited for), delayed
// blocks freed, then empty pages go back to their superslabs, empty superslabs to the OS
// policy, superslabs with live blocks to the abandoned list; the struct is kept for the next
// thread.
void hak_heap_destroy(hak_heap *heap) {
    hak_heap_enter(heap); // for good: the struct is zeroed when a new thread takes it
    hak_heap_large_flush(heap);
    hak_heap_flush_remote(heap);
    hak_page_reclaim_abandoned(2);
    for (unsigned kind = 0; kind < HAK_KIND_COUNT; kind++)
        for (hak_superslab *ss = heap->superslabs[kind]; ss; ss = ss->next)
            for (unsigned i = 0; i < ss->page_count; i++) {
                hak_page *page = &ss->pages[i];
                if (!page->in_use) continue;
                hak_page_clear_full(page);
                while (atomic_load(&page->xthread_free) & HAK_XT_NOTIFYING)
                    sched_yield();
            }
    hak_heap_free_delayed(heap);
    for (unsigned kind = 0; kind < HAK_KIND_COUNT; kind++)
        abandon_superslabs(heap->superslabs[kind]);
    hak_stats_merge_heap(heap);
    hak_lock_acquire(&heaps_lock);
    if (heap->prev_live)
        heap->prev_live->next_live = heap->next_live;
    else
        heaps_live = heap->next_live;
    if (heap->next_live) heap->next_live->prev_live = heap->prev_live;
    heap->next_live = heaps_unused;
    heaps_unused = heap;
    hak_lock_release(&heaps_lock);
}

void hak_heap_for_each_live(void (*fn)(hak_heap *heap, void *arg), void *arg) {
    hak_lock_acquire(&heaps_lock);
    for (hak_heap *heap = heaps_live; heap; heap = heap->next_live)
        fn(heap, arg);
    hak_lock_release(&heaps_lock);
}

// A thread whose heap was destroyed at its exit (hak_thread_exited) that allocates again
// allocates from one heap shared by all such threads, under a lock: glibc runs other keys'
// destructors after ours (up to four rounds) and frees and allocates in its own teardown, and
// a heap created then was never destroyed (nothing runs after the last round), keeping its
// superslab for good. Frees into its pages need no lock: they are remote frees for every
// thread (an exited thread's go straight to the page: hak_heap_free_remote), collected at its
// refills. Returns the block of class `cls`, or NULL.
static hak_lock exited_lock = HAK_LOCK_INIT(exited);
static hak_heap *exited_heap;

void *hak_heap_exited_alloc(unsigned cls, void *(*alloc)(hak_heap *heap, unsigned cls)) {
    hak_lock_acquire(&exited_lock);
    if (!exited_heap) exited_heap = hak_heap_create();
    void *block = exited_heap ? alloc(exited_heap, cls) : NULL;
    hak_lock_release(&exited_lock);
    return block;
}

void hak_heap_fork_prepare(void) {
    hak_lock_acquire(&exited_lock);
    hak_lock_acquire(&heaps_lock);
}
void hak_heap_fork_parent(void) {
    hak_lock_release(&heaps_lock);
    hak_lock_release(&exited_lock);
}
// Clears NOTIFYING on every page of the heap: in a fork child the remote freer that set it
// is gone (the heap would wait for it forever; its blocks stay allocated).
static void clear_notifying(hak_heap *heap) {
    for (unsigned kind = 0; kind < HAK_KIND_COUNT; kind++)
        for (hak_superslab *ss = heap->superslabs[kind]; ss; ss = ss->next)
            for (unsigned i = 0; i < ss->page_count; i++)
                atomic_fetch_and(&ss->pages[i].xthread_free, ~HAK_XT_NOTIFYING);
}

// The free blocks on a page's own lists (free, local_free, and its purged ones), or -1 when a
// list is longer than the page's carved blocks or leaves it: a walk of a list its thread may
// have been changing at the fork.
static int32_t listed_free_blocks(const hak_page *page) {
    const hak_superslab *ss = hak_superslab_of_page(page);
    int32_t count =
        page->has_purged ? __builtin_popcountll(ss->purged_blocks[page - ss->pages]) : 0;
    const hak_block *lists[2] = {page->free, page->local_free};
    for (int l = 0; l < 2; l++)
        for (const hak_block *b = lists[l]; b; b = hak_link(b)) {
            if (++count > page->reserved || !hak_page_slot_holds(page, (uintptr_t)b)) return -1;
        }
    return count;
}

// Are the lists of every page of a heap whole (see listed_free_blocks)?
static int heap_lists_whole(const hak_heap *heap) {
    for (unsigned kind = 0; kind < HAK_KIND_COUNT; kind++)
        for (const hak_superslab *ss = heap->superslabs[kind]; ss; ss = ss->next)
            for (unsigned i = 0; i < ss->page_count; i++)
                if (ss->pages[i].in_use && listed_free_blocks(&ss->pages[i]) < 0) return 0;
    return 1;
}

// A fork child takes over the heap of a thread of the parent that does not exist here, as that
// thread's exit would have (hak_heap_destroy): its empty pages and superslabs go back, the
// others to the abandoned list, where the child's frees into them are collected and its
// allocations adopt them. Without it a child that freed what such a thread had allocated and
// allocated as much again doubled its memory: its frees went to queues nobody drained.
// The thread may have been anywhere in a fast path at the fork, each of which changes a page
// one store at a time: a pop that took a block off `free` but had not counted it in `used`,
// a push not yet counted out. So each page's `used` is recounted from its lists (a block on
// none is in use: leaked, never handed out twice); its batch of remote frees (possibly pushed
// already) is dropped, its blocks left in use. A heap inside a slow path (busy), or with a
// list that does not walk cleanly, stays as it was: leaked, as before.
static void adopt_orphan(hak_heap *heap) {
    if (heap->busy || !heap_lists_whole(heap)) return;
    for (unsigned kind = 0; kind < HAK_KIND_COUNT; kind++)
        for (hak_superslab *ss = heap->superslabs[kind]; ss; ss = ss->next)
            for (unsigned i = 0; i < ss->page_count; i++) {
                hak_page *page = &ss->pages[i];
                if (page->in_use) page->used = (int16_t)(page->reserved - listed_free_blocks(page));
            }
    heap->remote_page = NULL;
    heap->remote_first = heap->remote_last = NULL;
    clear_notifying(heap);
    hak_heap_destroy(heap);
}

// In the child only the forking thread exists: its heap stays valid; every other thread's
// heap is taken over (adopt_orphan), but the heap of the exited threads' allocations, which
// belongs to no thread (hak_heap_exited_alloc).
void hak_heap_fork_child(void) {
    hak_lock_reset(&heaps_lock);
    hak_lock_reset(&exited_lock);
    hak_heap *self = hak_tls_heap, *next;
    if (self != &hak_heap_empty) clear_notifying(self);
    for (hak_heap *heap = heaps_live; heap; heap = next) {
        next = heap->next_live;
        if (heap != self && heap != exited_heap) adopt_orphan(heap);
    }
}
