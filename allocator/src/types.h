// libhakmem's types: the data structures every layer shares, the process-wide tables set once
// at init, and the small inline helpers the hot paths need (pointer -> superslab -> page by
// address arithmetic). The functions of each layer are declared in that layer's header, which
// includes the one below it: os.h -> segment.h -> page.h -> heap.h -> front.h -> init.h ->
// api.h (docs/allocator.md, "Files"); a file includes its own layer's.
//
//   superslab  2 MiB, 2 MiB-aligned region. Its first 4 KiB hold the header (this struct, with
//              the page descriptors); the rest is split into pages of one size, by its kind:
//              32 pages of 64 KiB (small), 4 of 512 KiB (medium) or 1 of 2 MiB (big); page 0
//              is 4 KiB shorter because the header sits in front of it. The registry byte of
//              its 2 MiB says the kind, so free() finds the descriptor by shift and mask. A
//              superslab is owned by one heap (thread); all its pages belong to that heap.
//              A superslab of medium or big pages serves one group of classes (its affinity).
//   page       blocks of one size class, with mimalloc's three free lists: `free` (malloc pops),
//              `local_free` (owner frees push), `xthread_free` (other threads push, atomically).
//   heap       per-thread: for each class the page to pop from (`direct`) and a queue of pages
//              that may have free blocks; full pages on a separate list.
//   large      blocks above the mid pool: their own mapping sized to need, found through a
//              table keyed by address, in shards (large.c), kept when freed by their thread's
//              heap (heaplarge.c) or a shared cache; the registry tells the two kinds apart.
#ifndef HAK_TYPES_H
#define HAK_TYPES_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "sizeclass.h"

// The allocator's few locks (the large table's shards, the large cache, the superslab cache,
// the abandoned list, the heap list) guard short critical sections on cold paths. They spin
// briefly before they sleep: with a plain mutex, threads on a few cores made a futex call for
// many of the large lock's takes and waited asleep while the holder ran on the other core
// (lock.h has the measurement). Each knows its owner, so fork() from a signal handler cannot
// deadlock on them (lock.h, init.c); a fork child resets them (hak_lock_reset).
#include "lock.h"

#define HAK_LIKELY(x)   __builtin_expect(!!(x), 1)
#define HAK_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define HAK_NOINLINE    __attribute__((noinline))
#define HAK_COLD        __attribute__((cold, noinline))
#define HAK_EXPORT      __attribute__((visibility("default")))
// The two fast paths start on a cache line of their own, so that an unrelated change elsewhere
// in the library does not move them across line (and decoder window) boundaries: such a
// shift alone moved tiny workloads' throughput with the same instructions (docs/measuring.md,
// "Code layout").
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
    // The adopter's grace (arena.c, hak_arena_superslab_adopted): bit i: free slot i was handed to
    // an adopter before the deadline, which ages it instead of purging it; graced: slot i had that
    // grace since it was last freed (once a free period).
    uint32_t young_mask, graced_mask;
    // Owner heap; NULL while abandoned. Atomic: remote freers read it to notify the owner.
    _Atomic(struct hak_heap *) owner;
    struct hak_superslab *next, *prev; // owner's list, abandoned list or OS cache
    // The group of size classes its pages serve (medium and big pages: hak_arena_class_affinity),
    // or HAK_AFFINITY_ANY (small pages).
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
    // cache.
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

// Large regions a heap keeps for its own thread (heaplarge.c): up to this
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
    // heap is shrinking (hak_heap_shrinking), and what it frees goes back at once (purge.c,
    // heap.c).
    uint64_t shrink_bytes;
    // Allocation slow paths until the lean policy next purges idle medium blocks (purge.c; 0 under
    // speed-first: it wraps around and comes back after 2^32).
    uint32_t idle_countdown;
    uint32_t idle_epoch;   // passes so far (their marks differ)
    uint64_t idle_last_ns; // when the last pass was
    // Large regions this thread freed, kept for its next large blocks (speed-first; heaplarge.c):
    // their addresses, sizes, mappings and purge deadlines, oldest first (one slot more for the
    // free that overflows it, whose oldest then goes). Changed by the heap's thread only, inside
    // hak_heap_enter/leave.
    uintptr_t large_block[HAK_LARGE_HEAP_CACHE + 1];
    size_t large_size[HAK_LARGE_HEAP_CACHE + 1];
    uint32_t large_map[HAK_LARGE_HEAP_CACHE + 1]; // their mappings (large.c: map_id)
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
// HAK_REG_MEDIUM and HAK_REG_BIG mark superslabs of 512 KiB and 2 MiB pages, the only bytes
// from HAK_REG_WIDE up. The free fast path takes both without a branch on which: a block's page
// descriptor is at (address >> 13) & byte & HAK_REG_WIDE_INDEX from its superslab (the medium
// byte keeps address bits 19-20, the page index times the descriptor's 64 bytes; the big byte
// keeps none: one page).
#define HAK_REG_WIDE_INDEX 0xc0u
enum {
    HAK_REG_NONE = 0,
    HAK_REG_SMALL = 1,
    HAK_REG_LARGE = 2,
    HAK_REG_ZERO = 3, // the secure build's zero-size blocks (zero.c)
    HAK_REG_WIDE = 4,
    HAK_REG_BIG = HAK_REG_WIDE,
    HAK_REG_MEDIUM = HAK_REG_WIDE_INDEX
};
_Static_assert((HAK_REG_BIG & HAK_REG_WIDE_INDEX) == 0 &&
                   (HAK_REG_MEDIUM & HAK_REG_WIDE_INDEX) == HAK_REG_WIDE_INDEX &&
                   HAK_REG_MEDIUM >= HAK_REG_WIDE,
               "the registry bytes of medium and big superslabs");
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

#endif
