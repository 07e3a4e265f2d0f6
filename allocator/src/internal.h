// libhakmem internals: the data structures every file shares, and the small inline helpers
// the hot paths need (pointer -> superslab -> page by address arithmetic).
//
//   superslab  2 MiB, 2 MiB-aligned region. Its first 4 KiB hold the header (this struct, with
//              the page descriptors); the rest is split into pages of one size, by its kind:
//              32 pages of 64 KiB (small), 4 of 512 KiB (medium) or 1 of 2 MiB (big); page 0
//              is 4 KiB shorter because the header sits in front of it. The registry byte of
//              its 2 MiB says the kind, so free() finds the descriptor by shift and mask. A
//              superslab is owned by one heap (thread); all its pages belong to that heap.
//              Under the lean policy its pages are all of one group of classes (its affinity).
//   page       blocks of one size class, with mimalloc's three free lists: `free` (malloc pops),
//              `local_free` (owner frees push), `xthread_free` (other threads push, atomically).
//   heap       per-thread: for each class the page to pop from (`direct`) and a queue of pages
//              that may have free blocks; full pages on a separate list.
//   large      blocks above the mid pool: their own mapping sized to need, found through a
//              table keyed by address (large.c); the registry tells the two kinds apart.
#ifndef HAK_INTERNAL_H
#define HAK_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "sizeclass.h"

// The allocator's few global locks (the large blocks' table and cache, the superslab cache,
// the abandoned list, the heap list) guard short critical sections on cold paths. They spin
// briefly before they sleep: with a plain mutex, bench_churn's 4 threads on 2 cores made
// ~1,000 futex calls a run on the large lock alone (every 32-64 KiB malloc and free takes it)
// and waited asleep while the holder ran on the other core; spinning first, ~40 (mimalloc:
// ~20). Each knows its owner, so fork() from a signal handler cannot deadlock on them (lock.h,
// init.c); a fork child resets them (hak_lock_reset).
#include "lock.h"

#define HAK_LIKELY(x)   __builtin_expect(!!(x), 1)
#define HAK_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define HAK_NOINLINE    __attribute__((noinline))
#define HAK_COLD        __attribute__((cold, noinline))
#define HAK_EXPORT      __attribute__((visibility("default")))
// The two fast paths start on a cache line of their own, so that an unrelated change elsewhere
// in the library does not move them across line (and decoder window) boundaries: measured
// here, such a shift alone moved tiny workloads' throughput by ~1 % with the same instructions.
#define HAK_HOT_ALIGN __attribute__((aligned(64)))


#define HAK_SS_SHIFT       21
#define HAK_SS_SIZE        ((size_t)1 << HAK_SS_SHIFT)
#define HAK_SS_MASK        (HAK_SS_SIZE - 1)
#define HAK_PAGE_SHIFT     16 // small pages; medium and big pages: HAK_KIND_*_SHIFT
#define HAK_PAGE_SIZE      ((size_t)1 << HAK_PAGE_SHIFT)
#define HAK_PAGES_PER_SS   (HAK_SS_SIZE / HAK_PAGE_SIZE) // descriptors in a header (small)
#define HAK_SS_HEADER_SIZE 4096
// The secure build maps every superslab with one PROT_NONE OS page after its 2 MiB: an overflow
// off the last block of its last page faults there instead of landing on the page descriptors
// of a superslab mapped right after it (no superslab can start there: the guard holds the
// next 2 MiB boundary). Other builds: none, superslabs may be adjacent.
#ifdef HAK_SECURE
#define HAK_SS_GUARD 4096
#else
#define HAK_SS_GUARD 0
#endif
#define HAK_OS_PAGE_SIZE  4096                 // the unit of madvise and of page faults
#define HAK_ADDRESS_LIMIT ((uintptr_t)1 << 47) // x86-64 user space (4-level paging)
#define HAK_MIN_ALIGN     16 // large blocks; size classes are aligned to their size up to 4 KiB
#define HAK_NATURAL_ALIGN                                                                          \
    4096 // blocks of a class are aligned at least to its size's power-of-two part, up to this
         // (aligned_alloc)

// `size` rounded up to whole OS pages; wraps to less than `size` when that overflows.
static inline size_t hak_round_to_os_pages(size_t size) {
    return (size + HAK_OS_PAGE_SIZE - 1) & ~(size_t)(HAK_OS_PAGE_SIZE - 1);
}

// A free block's first word links it to the next block of its list. Read and written only
// through hak_link / hak_link_set: in the secure build (HAK_SECURE) the word holds the link
// encoded and tagged (below, after the superslab), so an overflow or a write after free that
// changes it cannot aim the next malloc at an address of the attacker's choosing, and every
// read of a link checks it. Lists' heads (a page's free lists, xthread_free, delayed_free) are
// allocator metadata and hold plain pointers.
typedef struct hak_block {
    struct hak_block *next;
} hak_block;

#ifdef HAK_SECURE
// The key of the secure build's tail canaries, random, set at process init (init.c); the links
// have secrets of their own (hak_superslab.secrets), so an over-read of a canary reveals none.
extern uintptr_t hak_canary_key;
// The secure build's tail canary of the block at p (wrappers.c). Its first byte, the one an
// off-by-one write past the block hits, is never 0, so the classic NUL off-by-one always
// changes it: with the key alone there, a key whose low byte was 0 (1 process in 256) let
// it through for every block whose address ends in a 0 byte (all of them from 256 B up).
// A free block's canary word holds the value with its low bit cleared (freed), so a second
// free of it is told from an overflow (HAK_CANARY_FREED).
static inline uintptr_t hak_canary_value(const void *p) {
    return (hak_canary_key ^ ((uintptr_t)p * 0x9e3779b97f4a7c15u)) | 1;
}
#define HAK_CANARY_FREED ((uintptr_t)1)
#else
static inline hak_block *hak_link(const hak_block *block) {
    return block->next;
}
static inline void hak_link_set(hak_block *block, hak_block *next) {
    block->next = next;
}
#endif

struct hak_heap;

// Low bits of page->xthread_free (blocks are 8-byte aligned, so the bits are free):
//   FULL       the page is on its owner's full list; the next remote free goes to the owner's
//              delayed_free list instead, which tells the owner.
//   NOTIFYING  a remote freer is doing that; the owner's thread exit waits for it.
#define HAK_XT_FULL      ((uintptr_t)1)
#define HAK_XT_NOTIFYING ((uintptr_t)2)
#define HAK_XT_FLAGS     ((uintptr_t)3)

// 64 bytes, so free() finds a page's descriptor with a shift and a mask.
typedef struct hak_page {
    // Hot: malloc reads free/used, free reads local_owner/local_free/used.
    hak_block *free;
    hak_block *local_free;
    // Owner heap while the page takes owner frees on the fast path; NULL when the page is full,
    // abandoned, free or large. Other threads read it too (and never find their own heap).
    _Atomic(struct hak_heap *) local_owner;
    // Blocks handed out, including those in xthread_free. Signed: a double free that takes it
    // below zero lands on the fast path's "emptied" branch (`--used <= 0`), which reports it.
    // 16 bits: a page holds at most 8,192 blocks (8 B blocks in 64 KiB; larger pages hold only
    // classes above 8 KiB).
    int16_t used;
    // Low bits a block address must not have: the block size's power-of-two part (at most
    // 64 KiB) minus one: all of an interior offset of a tiny block, the low 8+ bits of a mid
    // block's. The free fast path tests them, so free(p + 1) or free(p + 16) never reaches a
    // free list. Blocks are aligned that far: pages start at multiples of 64 KiB, and page 0
    // after the header at that alignment (hak_page_first_offset).
    uint16_t block_mask;
    uint32_t block_size;
    // Cold.
    _Atomic uintptr_t xthread_free; // remote frees: block list | HAK_XT_* flags
    struct hak_page *next, *prev;   // heap queue or full list
    uint16_t capacity;              // blocks that fit
    uint16_t reserved;              // blocks carved into free lists so far
    uint8_t class_idx;
    uint8_t in_use;  // assigned to a class (else a free slot of its superslab)
    uint8_t in_full; // on the owner's full list
    // Medium pages under the lean policy: some free blocks are purged, on no list, and marked in
    // their superslab's purged_blocks (hak_page_purge_idle_blocks).
    uint8_t has_purged;
} hak_page;

_Static_assert(sizeof(hak_page) == 64, "page descriptors are indexed by shift");

enum hak_ss_kind { HAK_SS_FREE = 0, HAK_SS_SMALL = 1 };

// Page geometry: which pages a superslab is cut into. A class's kind is fixed per process by
// its route (route.c: hak_class_kind); each heap keeps one superslab list per kind.
enum { HAK_KIND_SMALL = 0, HAK_KIND_MEDIUM = 1, HAK_KIND_BIG = 2, HAK_KIND_COUNT = 3 };
#define HAK_KIND_MEDIUM_SHIFT 19 // 512 KiB pages, 4 per superslab
#define HAK_KIND_BIG_SHIFT    21 // one 2 MiB page

typedef struct hak_superslab {
    hak_page pages[HAK_PAGES_PER_SS];
    uint32_t kind;
    uint8_t page_kind;  // HAK_KIND_*
    uint8_t page_shift; // log2 of its page size
    uint8_t page_count; // pages in it (32, 4 or 1)
    uint32_t pages_in_use;
    uint32_t free_page_mask; // bit i: pages[i] is a free slot
    uint32_t dirty_mask;     // bit i: free slot i may still be resident (not purged yet)
    uint64_t purge_due_ns; // speed-first: when the resident free slots may be purged (0: none due)
    // The adopter's grace (arena.c, hak_arena_superslab_adopted): bit i: free slot i was handed to an
    // adopter before the deadline, which ages it instead of purging it; graced: slot i had that
    // grace since it was last freed (once a free period).
    uint32_t young_mask, graced_mask;
    // Owner heap; NULL while abandoned. Atomic: remote freers read it to notify the owner.
    _Atomic(struct hak_heap *) owner;
    struct hak_superslab *next, *prev; // owner's list, abandoned list or OS cache
    uint8_t huge; // backed by a 2 MiB huge page (HAKMEM_SS_HUGEPAGE_EXPERIMENT)
    // The group of size classes its pages serve (the lean policy: hak_arena_class_affinity), or
    // HAK_AFFINITY_ANY.
    uint8_t affinity;
    // Medium pages (4, at most 64 blocks each since their classes start above 8 KiB): bit j of
    // word i: block j of page i is free, purged whole and on no free list (see page.c).
    uint64_t purged_blocks[HAK_SS_SIZE >> HAK_KIND_MEDIUM_SHIFT];
    // Which 64 KiB units of the superslab are readable and writable (bit i: [i, i + 1) x 64 KiB,
    // the header excepted, which always is). A new superslab is PROT_NONE past its header, and
    // a page slot becomes writable when it is first used (hak_superslab_page_alloc), for the
    // superslab's lifetime: an overflow that runs off the used pages (a write 1 MiB past a small
    // block, an underflow off the first page of a small superslab, whose slot 0 is never used)
    // faults there instead of landing in memory that a later page hands out. Kept across the
    // cache; all set for a huge-page superslab (one page, one protection).
    uint32_t rw_units;
#ifdef HAK_SECURE
    uintptr_t secrets[HAK_PAGES_PER_SS]; // of the links held in each 64 KiB unit (see below)
#endif
} hak_superslab;

#define HAK_AFFINITY_ANY 0xff

#ifdef HAK_SECURE
// The secure build's links. A link is stored as its low 47 bits (every user address is below
// 2^47) XOR the secret of the 64 KiB unit of the block holding it (hak_superslab.secrets,
// random for each superslab as it is taken: getrandom), with a 17-bit tag in its top bits: a
// keyed hash of the link, the holder's address and that secret. Every read checks the tag:
// any change of the stored word, one byte or more, gives a link whose tag matches with
// probability 2^-17 (test_link_tamper measures it), and without the secret a forged link
// matches no better. The unit's secret rather than one per process: a link an attacker has
// decoded (knowing both addresses) gives away the secret of 64 KiB of the heap, not all of it.
#define HAK_LINK_TAG_SHIFT 47
#define HAK_LINK_ADDR_MASK (((uintptr_t)1 << HAK_LINK_TAG_SHIFT) - 1)
static inline uintptr_t hak_link_secret(const void *holder) {
    const hak_superslab *ss = (const hak_superslab *)((uintptr_t)holder & ~(uintptr_t)HAK_SS_MASK);
    return ss->secrets[((uintptr_t)holder >> HAK_PAGE_SHIFT) & (HAK_PAGES_PER_SS - 1)];
}
static inline uintptr_t hak_link_tag(uintptr_t next, uintptr_t holder, uintptr_t secret) {
    uintptr_t x = (next ^ secret) * 0x9e3779b97f4a7c15u ^ holder;
    x ^= x >> 29;
    x *= 0xbf58476d1ce4e5b9u;
    x ^= x >> 32;
    return x >> HAK_LINK_TAG_SHIFT;
}
static inline uintptr_t hak_link_encode(const void *holder, uintptr_t next) {
    uintptr_t secret = hak_link_secret(holder);
    uintptr_t tag = hak_link_tag(next, (uintptr_t)holder, secret);
    return ((next ^ secret) & HAK_LINK_ADDR_MASK) | tag << HAK_LINK_TAG_SHIFT;
}
// Decodes the link stored in `holder` into *next; 0 when its tag does not match.
static inline int hak_link_decode(const hak_block *holder, hak_block **next) {
    uintptr_t stored = (uintptr_t)holder->next, secret = hak_link_secret(holder);
    uintptr_t n = (stored ^ secret) & HAK_LINK_ADDR_MASK;
    *next = (hak_block *)n;
    return hak_link_tag(n, (uintptr_t)holder, secret) == stored >> HAK_LINK_TAG_SHIFT;
}
void hak_link_tampered(const hak_block *holder) __attribute__((noreturn, cold));
static inline hak_block *hak_link(const hak_block *block) {
    hak_block *next;
    if (HAK_UNLIKELY(!hak_link_decode(block, &next))) hak_link_tampered(block);
    return next;
}
static inline void hak_link_set(hak_block *block, const hak_block *next) {
    block->next = (hak_block *)hak_link_encode(block, (uintptr_t)next);
}
#endif

_Static_assert(sizeof(hak_superslab) <= HAK_SS_HEADER_SIZE, "superslab header must fit 4 KiB");

typedef struct hak_page_queue {
    hak_page *first, *last;
} hak_page_queue;

// A front path: the policy of the slow paths of the classes routed to it, a row of the fronts'
// table (route.c), latched into heap->route[] once at thread init. The shared fast path pops
// heap->direct[cls]; when that page is empty, the one refill skeleton (front.c) runs with the
// numbers of the class's row.
// The fronts' table: one row per front, X(ID, name, carve_bytes, carve_blocks, max_spare,
// sized_pages); what each is for in front.c's header. route.c makes the rows data (hak_fronts);
// front.c compiles the refill skeleton once per row, with the row's numbers as constants.
#define HAK_FRONTS(X)                                                                              \
    X(LEGACY, "legacy", HAK_CARVE_STEP_DEFAULT, 4, 0, 0)                                           \
    X(TINYHEAP, "tinyheap", HAK_CARVE_WHOLE_PAGE, 4, 0, 0)                                         \
    X(HOTHEAP_V2, "hotheap_v2", 16 * 1024, 4, 2, 0)                                                \
    X(SMALLHEAP_V3, "smallheap_v3", HAK_CARVE_STEP_DEFAULT, 4, 1, 1)
#define HAK_FRONT_ENUM(id, ...) HAK_FRONT_##id,
enum { HAK_FRONTS(HAK_FRONT_ENUM) HAK_FRONT_COUNT };
#undef HAK_FRONT_ENUM
typedef struct hak_front {
    const char *name;
    uint32_t carve_bytes;  // carved into a page's free list at once,
    uint32_t carve_blocks; // at least this many blocks
    uint8_t max_spare;     // empty pages retained per class
    uint8_t sized_pages;   // pages sized per class, classes up to 256 KiB (route.c)
} hak_front;

#include "stats.h"

// Large regions a heap keeps for its own thread (large.c, "the heap's large cache"): up to this
// many, each of at most HAK_LARGE_HEAP_REGION_MAX bytes.
#define HAK_LARGE_HEAP_CACHE 4

typedef struct hak_heap {
    // Page malloc pops from; &hak_page_empty if none. The extra entry, HAK_CLASS_NONE, stays
    // empty forever: the mid sizes this process does not serve (hak_small_max) map to it, so
    // the fast path sends them to the slow path, which makes them large.
    hak_page *direct[HAK_CLASS_COUNT + 1];
    // Size -> tiny class, indexed by the size itself (a copy per heap, so the malloc fast path
    // needs neither a table address from the GOT nor a shift). All zero in hak_heap_empty:
    // every size then finds class 0's empty page and goes to the slow path.
    uint8_t class_of_size[HAK_TINY_MAX + 1];
    // Mid size -> class, indexed by HAK_MID_INDEX(n) (HAK_CLASS_NONE above hak_small_max).
    uint8_t class_of_mid[HAK_MID_INDEX_COUNT];
    uint8_t route[HAK_CLASS_COUNT]; // each class's front: its row of hak_fronts (HAK_FRONT_*)
    hak_page_queue queue[HAK_CLASS_COUNT]; // pages that may have free blocks; first = direct
    hak_page *full;                        // pages without free blocks (all classes)
    // Empty pages a front retains for reuse instead of giving them back (HotHeap v2's
    // max_partial): a list linked by page->next, and its length.
    hak_page *spare[HAK_CLASS_COUNT];
    uint8_t spare_count[HAK_CLASS_COUNT];
    // How often each class's own lists could not serve a refill (saturating at 255): a class
    // that a smaller one starts merged into splits it off at the second (hak_heap_need_memory).
    uint8_t backend_trips[HAK_CLASS_COUNT];
    _Atomic(hak_block *) delayed_free;         // remote frees into full pages (see page.c)
    hak_superslab *superslabs[HAK_KIND_COUNT]; // owned, per page kind; fresh pages from the first
    // Remote frees waiting to go to one page of another heap as a single chain (one CAS per
    // run of frees into the same page instead of one per block).
    hak_page *remote_page;
    hak_block *remote_first, *remote_last;
    uint32_t sweep_countdown; // refills the heap could not serve until the next hak_heap_sweep
    uint32_t sweep_idle;      // sweeps skipped for want of remote frees (see hak_heap_sweep)
    // Set when this heap collects remote frees from one of its pages (hak_page_collect), i.e.
    // other threads free into its pages: the evidence that a sweep may find pages they
    // emptied. Written by the owner only.
    uint8_t remote_seen;
    uint32_t abandoned_frees; // remote frees into abandoned superslabs since the last visit
    uint64_t purge_next_ns;   // earliest purge_due_ns of its superslabs (0: none due; purge.c)
    uint32_t purge_checks;    // slot frees since the deadlines were last checked (purge.c)
    // Bytes of page slots given back since the heap last took one: beyond HAK_SHRINK_BYTES the
    // heap is shrinking (hak_heap_shrinking), and what it frees goes back at once (purge.c, heap.c).
    uint64_t shrink_bytes;
    // Allocation slow paths until the lean policy next purges idle medium blocks (purge.c; 0 under
    // speed-first: it wraps around and comes back after 2^32).
    uint32_t idle_countdown;
    uint32_t idle_epoch;   // passes so far (their marks differ)
    uint64_t idle_last_ns; // when the last pass was
    // Large regions this thread freed, kept for its next large blocks (speed-first; large.c):
    // their addresses, sizes and purge deadlines, oldest first (one slot more for the free that
    // overflows it, whose oldest then goes). Changed under the large lock.
    uintptr_t large_block[HAK_LARGE_HEAP_CACHE + 1];
    size_t large_size[HAK_LARGE_HEAP_CACHE + 1];
    uint64_t large_due[HAK_LARGE_HEAP_CACHE + 1];
    uint32_t large_count;
    struct hak_heap *next_live, *prev_live;
    // Nonzero while its thread is inside a slow path that changes the heap's lists (and while
    // the heap is being created or destroyed). A fork child adopts the heaps of the parent's
    // other threads (hak_heap_fork_child) only where this was 0 at the fork: their lists are
    // then whole, as the fast paths change them one store at a time.
    uint32_t busy;
#if HAK_STATS_HOT
    hak_hot_stats hot;
#endif
} hak_heap;

#define HAK_CLASS_NONE HAK_CLASS_COUNT

extern hak_page hak_page_empty;
// The largest size served by a size class in this process (32 KiB, or up to 256 KiB with the
// mid classes of SmallObject v3); larger ones are large blocks. Set once at process init.
extern size_t hak_small_max;
// Each class's page kind (HAK_KIND_*), set with the routes at process init.
extern uint8_t hak_class_kind[HAK_CLASS_COUNT];
// Classes merged until demand splits them (route.c, set at process init): C6's classes are
// 32 B apart, and each heap starts with each odd one (288, 352, 416, 480 B) served by the
// next (320, 384, 448, 512), so a heap holding few such blocks has four partly used pages
// where it would have eight. When the larger class's own lists cannot serve a refill for the
// second time (it holds more than a page of these sizes, and the tighter fit now pays), or
// the heap adopts a page of the smaller class from an exited thread, the heap splits the
// smaller one off: heap->class_of_size maps its sizes to it again. Only the slow paths
// look; the fast path reads heap->class_of_size as always. hak_class_merged_into[c]: the
// class that serves class c's sizes until the split (c itself if never merged).
extern uint8_t hak_class_merged_into[HAK_TINY_CLASS_COUNT];
// The size -> class tables every heap starts with (route.c, process init; heap->class_of_size
// and heap->class_of_mid are copies).
extern uint8_t hak_route_class_of_size[HAK_TINY_MAX + 1];
extern uint8_t hak_route_class_of_mid[HAK_MID_INDEX_COUNT];
extern const hak_heap hak_heap_empty;
extern __thread hak_heap *hak_tls_heap __attribute__((tls_model("initial-exec")));

// Registry: one byte per 2 MiB of address space (64 MiB of .bss, virtual: a 4 KiB page of it
// is touched per 8 GiB of address range in use). HAK_REG_SMALL for every superslab (in use or
// cached), HAK_REG_LARGE for every chunk a large mapping touches, so free() can tell "ours"
// from a foreign pointer before it reads any header. A byte rather than a bit: the test is one
// load and compare on the free fast path, which follows HAK_REG_SMALL only.
#define HAK_REGISTRY_SIZE (HAK_ADDRESS_LIMIT >> HAK_SS_SHIFT)
// HAK_REG_MEDIUM and HAK_REG_BIG mark superslabs of 512 KiB and 2 MiB pages (the free fast
// path takes the descriptor index from a different shift for them).
enum {
    HAK_REG_NONE = 0,
    HAK_REG_SMALL = 1,
    HAK_REG_LARGE = 2,
    HAK_REG_MEDIUM = 3,
    HAK_REG_BIG = 4,
    HAK_REG_ZERO = 5 // the secure build's zero-size blocks (zero.c)
};
extern _Atomic uint8_t hak_registry[HAK_REGISTRY_SIZE];

static inline unsigned hak_registry_get(uintptr_t p) {
    return atomic_load_explicit(&hak_registry[p >> HAK_SS_SHIFT], memory_order_relaxed);
}

// The free fast path's read of a chunk's byte: a plain byte read, so the compare takes its
// operand from memory (the byte of a chunk a live block of ours is in cannot change while the
// block lives). Under ThreadSanitizer the atomic load it stands for: TSan cannot see that a
// chunk unmapped by one thread and mapped again by another was ordered by the kernel, and
// reported the plain read against the other thread's store (test_thread_exit under the lean
// policy, whose superslabs come and go more often: 0-3 reports a run).
#if defined(__SANITIZE_THREAD__)
#define HAK_REGISTRY_PEEK(chunk) atomic_load_explicit(&hak_registry[chunk], memory_order_relaxed)
#else
#define HAK_REGISTRY_PEEK(chunk) (((const uint8_t *)hak_registry)[chunk])
#endif

static inline hak_superslab *hak_superslab_of(uintptr_t p) {
    return (hak_superslab *)(p & ~(uintptr_t)HAK_SS_MASK);
}

// Relaxed: a plain load and store on x86-64, but race-free for the threads that only compare.
static inline struct hak_heap *hak_page_local_owner(const hak_page *page) {
    return atomic_load_explicit(&((hak_page *)page)->local_owner, memory_order_relaxed);
}

static inline void hak_page_set_local_owner(hak_page *page, struct hak_heap *heap) {
    atomic_store_explicit(&page->local_owner, heap, memory_order_relaxed);
}

// The descriptor of the page p lies in (slow paths: the superslab's own geometry).
static inline hak_page *hak_page_of(hak_superslab *ss, uintptr_t p) {
    uintptr_t index = (p >> ss->page_shift) & (uintptr_t)(ss->page_count - 1);
    return &ss->pages[index];
}

static inline hak_superslab *hak_superslab_of_page(const hak_page *page) {
    return (hak_superslab *)((uintptr_t)page & ~(uintptr_t)HAK_SS_MASK);
}

// Where the first block of page 0 starts: after the superslab header, at the blocks' own
// alignment (block_mask + 1), so that every block is aligned as block_mask says. (It costs no
// block: the header takes a block's room from page 0 either way.) Other pages start at their
// slot, a multiple of 64 KiB.
static inline uintptr_t hak_page0_offset(const hak_page *page) {
    uintptr_t align = (uintptr_t)page->block_mask + 1;
    return align > HAK_SS_HEADER_SIZE ? align : HAK_SS_HEADER_SIZE;
}

// The first block of a page.
static inline char *hak_page_start(const hak_page *page) {
    hak_superslab *ss = hak_superslab_of_page(page);
    size_t index = (size_t)(page - ss->pages);
    return (char *)ss + (index == 0 ? hak_page0_offset(page) : index << ss->page_shift);
}

// p is the start of a block of this page (not an interior or foreign pointer). Reads only
// fields that stay fixed while the page holds a live block, so other threads may call it.
static inline int hak_page_contains_block(const hak_page *page, uintptr_t p) {
    uintptr_t start = (uintptr_t)hak_page_start(page);
    if (!page->in_use || p < start) return 0;
    uintptr_t offset = p - start;
    if (offset >= (uintptr_t)page->capacity * page->block_size) return 0;
    return (uint32_t)offset % page->block_size == 0; // 32-bit: a page is at most 2 MiB
}

// The same for a page found from p itself (hak_page_of), so p lies in the page's slot: its
// offset from the first block is p's offset in the slot, less the header in page 0 (a
// pointer into the header wraps around to a huge offset). Cheaper than the general form,
// for the remote free path, which checks every block in full.
static inline int hak_page_has_block_at(const hak_page *page, uintptr_t p) {
    uintptr_t header = ((uintptr_t)page & HAK_SS_MASK) ? 0 : hak_page0_offset(page);
    unsigned shift = hak_superslab_of_page(page)->page_shift;
    uintptr_t offset = (p & (((uintptr_t)1 << shift) - 1)) - header;
    return page->in_use && offset < (uintptr_t)page->capacity * page->block_size &&
           (uint32_t)offset % page->block_size == 0;
}

// --- superslab.c: regions, registry, page slots, abandoned superslabs
void hak_registry_set(uintptr_t chunk, unsigned value);
hak_superslab *hak_superslab_acquire(hak_heap *heap, unsigned page_kind, unsigned affinity);
void hak_superslab_release(hak_superslab *ss);
hak_page *hak_superslab_page_alloc(hak_superslab *ss);
void hak_superslab_page_free(hak_superslab *ss, hak_page *page);
// Gives back the resident free slots (bytes returned); `aged`: all but the young ones (an
// adopter's grace, arena.c), whose grace it ends (a deadline's purge; otherwise all, as at trim
// and under the lean policy).
size_t hak_superslab_purge(hak_superslab *ss, int aged);
void hak_superslab_abandon(hak_superslab *ss);
hak_superslab *hak_superslab_pop_abandoned(unsigned cls, unsigned merged);
// The abandoned list's visitors (page.c: hak_page_reclaim_abandoned): the longest waiting one
// taken off it, the list's length (a hint, read without the lock), and one put back at its tail.
hak_superslab *hak_superslab_take_abandoned(void);
size_t hak_superslab_abandoned_count(void);
void hak_superslab_requeue_abandoned(hak_superslab *ss);
void hak_superslab_fork_prepare(void);
void hak_superslab_fork_parent(void);
void hak_superslab_fork_child(void);

// --- os.c: the system calls (errno kept on success; no policy)
uint64_t hak_coarse_now_ns(void); // CLOCK_MONOTONIC_COARSE: vDSO, ticks every few ms
void *hak_os_map(size_t size);    // MAP_FAILED when refused
void *hak_os_map_aligned(size_t size, size_t alignment, char **map_base, size_t *map_size);
void *hak_os_map_huge(size_t size, unsigned shift);
void *hak_os_reserve(void *at, size_t size); // PROT_NONE, at `at` (MAP_FIXED) or anywhere
void hak_os_unmap(void *base, size_t size);
void *hak_os_remap(void *p, size_t old_size, size_t new_size); // MAP_FAILED when refused
void hak_os_decommit(void *start, size_t size);
int hak_os_protect(void *start, size_t size, int writable);

// --- arena.c: the cache of empty superslabs, the purge deadlines of free page slots
// Speed-first: how long freed memory the allocator keeps (empty superslabs, free page slots,
// cached large regions) stays resident before it is purged (arena.c, purge.c, large.c).
#define HAK_PURGE_DELAY_NS (10u * 1000u * 1000u)
hak_superslab *hak_arena_superslab_get(void);
void hak_arena_superslab_put(hak_superslab *ss);
void hak_arena_superslab_unowned(hak_superslab *ss);
// An adopter takes it: its resident free slots get a delay of their own (once per free period).
void hak_arena_superslab_adopted(hak_superslab *ss);
unsigned hak_arena_class_affinity(unsigned cls);
// The slot policy, for the heaps' own deadlines (purge.c): the resident free slots beyond the
// floor, a deadline set, the current delay, a deadline that passed acted on.
uint32_t hak_arena_slots_beyond_floor(const hak_superslab *ss);
void hak_arena_arm(hak_superslab *ss, uint64_t due);
uint64_t hak_arena_purge_delay(void);
void hak_arena_purge_aged(hak_superslab *ss, uint64_t now);
uint64_t hak_arena_cache_next_due(void);
void hak_arena_cache_purge_due(uint64_t now);
size_t hak_arena_trim_cache(void);
size_t hak_arena_release_cache(void);
#ifdef HAK_DEBUG
// Test hooks of the debug builds (test_cache_decommit): called by hak_arena_superslab_put just
// before it takes the cache lock; and the cached superslabs left resident with no purge
// deadline, against the policy (0 unless the cache's bookkeeping is wrong).
extern void (*hak_test_superslab_put_hook)(hak_superslab *ss);
size_t hak_arena_cache_resident_undue(void);
#endif
void hak_arena_fork_prepare(void);
void hak_arena_fork_parent(void);
void hak_arena_fork_child(void);
void hak_large_purge_due(void);       // cached large regions whose delay passed (large.c)
size_t hak_large_trim(void);          // malloc_trim: all of them now (bytes given back)
size_t hak_large_release_cache(void); // large.c: every cached region unmapped (bytes)

// --- page.c: page free lists
// Carve steps: the legacy front carves a fresh page 4 KiB at a time (a page that holds few
// blocks never faults in its whole 64 KiB); other fronts choose other steps.
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

// --- purge.c: the heap's purge deadlines, malloc_trim, out of address space
// A heap that has given back more than this of page slots since it last took one is shrinking:
// it frees without refilling (a thread freeing its data before it waits or exits), so there is
// no refill for the delay to keep warm memory for, and the thread may never come back to purge
// it (hak_purge_slot_freed, current_emptied in heap.c).
#define HAK_SHRINK_BYTES (4u << 20)
static inline int hak_heap_shrinking(const hak_heap *heap) {
    return heap->shrink_bytes > HAK_SHRINK_BYTES;
}
void hak_purge_slot_freed(struct hak_heap *heap, hak_superslab *ss);
void hak_purge_due(struct hak_heap *heap);
size_t hak_purge_trim(struct hak_heap *heap);
// Everything cached given back (out of address space); whether anything was: then try again.
int hak_release_cached(void);

// --- heap.c: per-thread heap life cycle, page queues, full list, adoption
hak_heap *hak_heap_create(void);
void hak_heap_destroy(hak_heap *heap);
void hak_heap_page_emptied(hak_heap *heap, hak_page *page);
// An owner free that missed the fast path: the page is on the full list (or the debug build
// checks every free here).
void hak_heap_free_local(hak_heap *heap, hak_page *page, hak_block *block);
// malloc_trim: the retained empty pages, and the empty pages a medium or big class keeps in its
// queue, go back to their superslabs.
void hak_heap_trim_spare(hak_heap *heap);
void hak_heap_free_emptied(hak_heap *heap, hak_page *page, hak_block *block);
void hak_heap_free_emptied_lifo(hak_heap *heap, hak_page *page, hak_block *block);
void hak_heap_page_unfull(hak_heap *heap, hak_page *page);
// Building blocks of the fronts' refill and retire policies (heap.c, and inline below so that
// each front's slow path compiles with its own constants and no extra call level):
//   free_delayed   owner-free the blocks other threads pushed onto delayed_free
//   scan_queue     walk the class queue from its head: collect each page,
//                  carve up to carve_bytes into an exhausted free list, park pages with nothing
//                  left on the full list; the first page with a free block becomes the head and
//                  the direct page (returned), or NULL
//   adopt          take over one abandoned superslab with room for the class (its pages join
//                  the queues); 0 if none
//   new_page       a fresh page from a free slot of the heap's superslabs (or, if may_map, of
//                  a new superslab), carved by carve_bytes, made head and direct page; NULL
//                  when there is none (or out of memory)
//   install_page   make a page with free blocks (on no list) the head and direct page
//   detach_page    take a page off its queue or the full list
//   release_page   give a detached empty page back to its superslab (and an empty superslab
//                  to the OS policy)
void hak_heap_free_delayed_blocks(hak_heap *heap);
void hak_heap_flush_remote(hak_heap *heap);
int hak_heap_park_exhausted(hak_heap *heap, hak_page *page);
void hak_heap_move_to_front(hak_heap *heap, hak_page *page);
int hak_heap_adopt(hak_heap *heap, unsigned cls);
hak_page *hak_heap_new_page(hak_heap *heap, unsigned cls, uint32_t carve_bytes,
                            uint32_t carve_blocks, int may_map);
void hak_heap_install_page(hak_heap *heap, hak_page *page);
void hak_heap_detach_page(hak_heap *heap, hak_page *page);
void hak_heap_release_page(hak_heap *heap, hak_page *page);

// Brackets of a slow path that changes the heap's lists (see hak_heap.busy). The fences keep
// the compiler from moving the heap's stores across them; the fork snapshot sees the thread's
// stores in program order (x86-64's TSO).
static inline void hak_heap_enter(hak_heap *heap) {
    heap->busy++;
    atomic_signal_fence(memory_order_seq_cst);
}
static inline void hak_heap_leave(hak_heap *heap) {
    atomic_signal_fence(memory_order_seq_cst);
    heap->busy--;
}

static inline void hak_heap_free_delayed(hak_heap *heap) {
    if (HAK_UNLIKELY(atomic_load_explicit(&heap->delayed_free, memory_order_relaxed) != NULL))
        hak_heap_free_delayed_blocks(heap);
}

// A heap sweeps every HAK_SWEEP_INTERVAL times its lists cannot serve a refill (before it
// adopts or takes a fresh page): it collects every queued page and hands those that remote
// frees emptied to their front's page_emptied (exactly as if the last block had come back
// locally), and it visits a few abandoned superslabs to give back what their remote frees
// emptied. So pages that other threads emptied go back before the heap grows. Counted there
// and not per slow path, because mid-pool pages of 2-7 blocks enter the slow path on nearly
// every refill: a counter there costs every refill. A heap that has collected no remote free
// since its last sweep sweeps only every HAK_SWEEP_IDLE_EVERY intervals (nothing but
// abandoned superslabs can have changed for it).
#define HAK_SWEEP_INTERVAL   32
#define HAK_SWEEP_IDLE_EVERY 16
void hak_heap_sweep(hak_heap *heap);

// What every front's alloc_slow does first: the blocks other threads freed into its full
// pages come back (as owner frees, which moves those pages back to their queues); and every
// so many, the lean policy's purge of idle medium blocks (hak_purge_idle_tick).
void hak_purge_idle_tick(hak_heap *heap);
static inline void hak_heap_slow_entry(hak_heap *heap) {
    hak_heap_free_delayed(heap);
    if (HAK_UNLIKELY(--heap->idle_countdown == 0)) hak_purge_idle_tick(heap);
}

void hak_heap_split_class(hak_heap *heap, unsigned small);

// Is class `cls`, which starts merged into the next (hak_class_merged_into), still served by
// it in this heap? Slow paths only.
static inline int hak_heap_is_merged(const hak_heap *heap, unsigned cls) {
    return cls < HAK_TINY_CLASS_COUNT && hak_class_merged_into[cls] != cls &&
           heap->class_of_size[hak_class_block_size[cls]] != cls;
}

// Gives class `cls` its own sizes back if this heap still serves them by the next class.
static inline void hak_heap_unmerge(hak_heap *heap, unsigned cls) {
    if (hak_heap_is_merged(heap, cls)) hak_heap_split_class(heap, cls);
}

// What every front does when its own lists cannot serve the refill, before it adopts or takes
// a fresh page: its remote batch goes out (the thread may now block on a lock or in the
// kernel, and must hold no other heap's page hostage meanwhile), and the periodic sweep; and
// a class with a smaller one merged into it (hak_class_merged_into) splits it off at its
// second such trip: the heap then holds more than a page of these sizes.
static inline void hak_heap_need_memory(hak_heap *heap, unsigned cls) {
    if (heap->backend_trips[cls] < UINT8_MAX && ++heap->backend_trips[cls] == 2 && cls > 0)
        hak_heap_unmerge(heap, cls - 1); // the class below, if it is merged into this one
    if (heap->remote_page) hak_heap_flush_remote(heap);
    if (HAK_UNLIKELY(heap->sweep_countdown-- == 0)) hak_heap_sweep(heap);
}

static inline hak_page *hak_heap_scan_queue(hak_heap *heap, unsigned cls, uint32_t carve_bytes,
                                            uint32_t carve_blocks) {
    hak_page_queue *q = &heap->queue[cls];
    hak_page *next, *carvable = NULL, *found = NULL;
    for (hak_page *page = q->first; page; page = next) {
        next = page->next;
        hak_page_collect(page);
        if (!page->free && page->has_purged) hak_page_restore_purged(page);
        if (page->free) {
            found = page;
            break;
        }
        // Free blocks anywhere in the queue come before fresh memory: carve only if none.
        if (page->reserved < page->capacity) {
            if (!carvable) carvable = page;
        } else if (!hak_heap_park_exhausted(heap, page)) {
            found = page; // remote frees raced in
            break;
        }
    }
    if (!found && carvable && hak_page_extend(carvable, carve_bytes, carve_blocks))
        found = carvable;
    if (found) {
        if (found != q->first) hak_heap_move_to_front(heap, found);
        heap->direct[cls] = found;
        return found;
    }
    heap->direct[cls] = q->first ? q->first : &hak_page_empty;
    return NULL;
}

// Per-process random key: a block on its way to another heap's page carries
// hak_remote_key ^ its address in its second word until the owner collects it, so a second
// remote free of it is recognised (blocks of 16 B and up).
extern uintptr_t hak_remote_key;

// Pops a block from a page whose free list is not empty (the slow paths, each after
// hak_page_collect, which checked a head it did not set itself).
static inline void *hak_page_pop(hak_page *page) {
    hak_block *block = page->free;
    page->free = hak_link_checked(page, block);
    page->used++;
    return block;
}
void hak_heap_free_remote(hak_heap *heap, hak_heap *owner, hak_page *page, hak_block *block);
void hak_heap_note_abandoned_free(hak_heap *heap);
void hak_heap_for_each_live(void (*fn)(hak_heap *heap, void *arg), void *arg);
void *hak_heap_exited_alloc(unsigned cls, void *(*alloc)(hak_heap *heap, unsigned cls));
void hak_heap_fork_prepare(void);
void hak_heap_fork_parent(void);
void hak_heap_fork_child(void);

// --- route.c and front.c: class -> front table, the fronts' slow paths
// The fronts' table, one row per front (HAK_FRONT_*), and the refill skeleton every front runs.
extern const hak_front hak_fronts[HAK_FRONT_COUNT];
extern void *(*const hak_front_slow[HAK_FRONT_COUNT])(hak_heap *heap, unsigned cls);
const hak_front *hak_route_for_class(unsigned cls);
void hak_route_latch(hak_heap *heap);
void hak_route_init(void);
void hak_route_print(void);

// --- large.c
void *hak_large_alloc(size_t size, size_t alignment, int zero);
void hak_large_free(void *p);
// The heap's large regions go to the shared cache: all of them (its thread exits), or those
// whose purge deadline passed (its sweeps).
void hak_large_heap_flush(struct hak_heap *heap);
void hak_large_heap_purge_due(struct hak_heap *heap);
size_t hak_large_usable(const char *func, void *p);
// Resized in place or moved; NULL when it is not (then the caller copies), with
// *out_of_memory set when mremap was refused for want of address space.
void *hak_large_realloc(void *p, size_t size, int *out_of_memory);
void hak_large_fork_prepare(void);
void hak_large_fork_parent(void);
void hak_large_fork_child(void);

// --- init.c
hak_heap *hak_thread_init(void);
// Set when this thread's heap was destroyed at its exit (its pthread key's destructor). Frees
// that come later (other keys' destructors, glibc's own teardown) go straight to their pages
// instead of creating a heap that no destructor would destroy (heap.c: hak_heap_free_remote).
extern __thread uint8_t hak_thread_exited __attribute__((tls_model("initial-exec")));
void hak_process_init(void);

// --- zero.c: the secure build's zero-size blocks
void *hak_zero_alloc(void);
// Checks p (a pointer into their region) for `func`; frees it when func is "free".
void hak_zero_free(const char *func, void *p);

// --- wrappers.c: slow paths of the exported API
// The inline free fast path; the debug build checks every free in full instead.
#if defined(HAK_DEBUG)
#define HAK_FREE_FAST_PATH 0
#else
#define HAK_FREE_FAST_PATH 1
#endif
// Sized frees (C++ sized delete, C23 free_sized) trust the size the caller gives in the builds
// without checks: a block of at most HAK_SIZED_SMALL_MAX bytes, aligned to at most
// HAK_NATURAL_ALIGN, lies on a small page whatever the routes (route.c: classes up to 8 KiB
// always have 64 KiB pages; an aligned request takes a class of at most 8 KiB then), so the
// free finds its page without the registry (hak_free_small). The debug and secure builds check
// the size against the block instead (a wrong size is misuse: wrappers.c, check_free_size).
#if defined(HAK_DEBUG) || defined(HAK_SECURE)
#define HAK_SIZED_FREE_TRUSTED 0
#else
#define HAK_SIZED_FREE_TRUSTED 1
#endif
#define HAK_SIZED_SMALL_MAX 8192
static inline int hak_sized_free_small(const void *p, size_t size, size_t alignment) {
#if HAK_SIZED_FREE_TRUSTED
    return HAK_LIKELY(size <= HAK_SIZED_SMALL_MAX && alignment <= HAK_NATURAL_ALIGN) && p != NULL;
#else
    (void)p, (void)size, (void)alignment;
    return 0;
#endif
}
void hak_free_small(void *p);
void *hak_malloc_slow(size_t size);
void hak_free_slow(void *p);

#endif
