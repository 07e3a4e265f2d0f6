/* misuse_probe: one heap misuse, then a fixed amount of ordinary allocator activity that
 * would expose it, and how the process ended (issue #27, the probe half; docs/misuse.md).
 *
 *   misuse_probe PATTERN     run one pattern
 *   misuse_probe --list      the pattern names, one a line
 *
 * Not a benchmark: no Throughput line, and dying is an expected result. stdout carries
 * key=value lines, each written with write(2) as it happens (nothing is lost to a stdio
 * buffer when the process dies):
 *   pattern=NAME, malloc_impl=PATH, request=N, usable=N
 *   call=K OP         before the K-th allocator call (malloc, free, realloc, ...) or probe
 *                     step (write, read, exit): the last one says where the process stopped
 *   misuse=K TEXT     the misuse is call K
 *   effect=NAME       what the corruption led to, when the probe saw it
 *   signal=NAME, outcome=caught|crashed|hung   from the signal handler, if it got to run
 *   outcome=not-caught, end=1                  the program finished
 * hakbench (hakbench/misuse_model.py) classifies from the exit status itself; these lines
 * are for a human at a shell and for where it stopped.
 *
 * Effects (the probe stops at once at the first three, before touching the block):
 *   arbitrary-address     malloc returned memory the probe chose (a static buffer, a stack
 *                         buffer, an mmap'd region: the target written into freed blocks)
 *   overlap               malloc returned memory that overlaps a block the probe holds
 *   malloc-null           malloc returned NULL after the misuse
 *   live-data-changed     the allocator wrote into a live block (found before its free)
 *   neighbor-overwritten  the overflow or underflow itself wrote into another live block
 *   read-stale, read-pointer, read-changed   what a use-after-free read saw
 *   silent                nothing the probe could see
 *
 * What a misuse writes: the target address (below) in every aligned word it covers; a
 * 1-byte overflow or underflow so writes a NUL (the address's low and high bytes are 0): the
 * strcpy off-by-one, and `buf[len - 1] = 0` with len 0.
 *
 * Safety: every address the misuse writes as data ("the attacker's choice") is inside
 * `arena`, a static buffer of this program (or, for the `-to-stack` patterns, a buffer in
 * main's frame), so a hijacked malloc hands back memory the probe owns; the probe's own state is
 * static, never on the heap it damages; a CPU-time limit (and alarm()) ends a probe whose allocator
 * loops on a corrupted list. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <limits.h>
#include <malloc.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/time.h>
#include <unistd.h>

/* A corrupted free list can make malloc loop: the probe ends itself after this much CPU time
 * (SIGPROF; a run takes ~30 ms) or, should it block instead, this much real time (SIGALRM). */
#define CPU_LIMIT_SECONDS 2
#define ALARM_SECONDS     10
#define KIB               1024ul
#define MIB               (1024ul * 1024ul)

static const char usage[] = "usage: misuse_probe PATTERN | --list\n"
                            "  Performs one heap misuse, then ordinary malloc/free activity,\n"
                            "  and prints how it ended (docs/misuse.md). --list: the patterns.\n";

/* ---- output: write(2) only, so a dying process loses nothing ---- */

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...) {
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line - 1, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n > sizeof line - 2) n = (int)sizeof line - 2;
    line[n++] = '\n';
    for (ssize_t off = 0, w; off < n; off += w)
        if ((w = write(STDOUT_FILENO, line + off, (size_t)(n - off))) <= 0) return;
}

static _Noreturn void probe_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static _Noreturn void probe_error(const char *fmt, ...) {
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    dprintf(STDERR_FILENO, "misuse_probe: %s\n", line);
    _exit(1);
}

static _Noreturn void usage_error(const char *fmt, const char *arg) {
    dprintf(STDERR_FILENO, "misuse_probe: ");
    dprintf(STDERR_FILENO, fmt, arg);
    dprintf(STDERR_FILENO, " (see --help)\n");
    _exit(2);
}

/* ---- the patterns ---- */

enum size_kind { TINY, MID, LARGE, NO_SIZE };
static const char *const SIZE_NAMES[] = {"tiny", "mid", "large"};
/* Requests: none is a size class of the common allocators, so a request below the usable
 * size leaves slack (40 -> 48, 12000 -> 12288, ~1.9 MiB -> page-rounded). */
static const size_t REQUEST[] = {40, 12000, 2000000};
/* Blocks laid out around the victim: every other one is freed again, so whatever follows the
 * victim in memory may be a live block, a free one, metadata or nothing mapped. */
static const int LAYOUT[] = {8, 8, 4};

enum kind {
    OVERFLOW,
    UNDERFLOW,
    UAF_READ,
    UAF_WRITE,
    DOUBLE_FREE,
    DOUBLE_FREE_DELAYED,
    DOUBLE_FREE_INTERLEAVED,
    FREE_OFFSET,
    REALLOC_FREED,
    FREE_FOREIGN,
};
enum foreign { STACK, STATIC, MMAP };
#define HALF LONG_MIN /* FREE_OFFSET: p + size/2 */

typedef struct {
    char name[48];
    enum kind kind;
    enum size_kind size;
    long amount; /* bytes over/under, the offset of a bad free, or the foreign kind */
    bool usable; /* OVERFLOW: the request is malloc_usable_size, written past it */
    bool use_memcpy;
    bool to_stack; /* the target lies on the stack, above the heap (see `target`) */
} pattern;

#define MAX_PATTERNS 96
static pattern patterns[MAX_PATTERNS];
static int n_patterns;

static pattern *add(enum kind kind, enum size_kind size, long amount) {
    if (n_patterns == MAX_PATTERNS) probe_error("too many patterns");
    pattern *p = &patterns[n_patterns++];
    *p = (pattern){.kind = kind, .size = size, .amount = amount};
    return p;
}

static void name(pattern *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void name(pattern *p, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->name, sizeof p->name, fmt, ap);
    va_end(ap);
}

static void build_patterns(void) {
    static const long overflows[] = {1, 32, (long)MIB};
    static const char *const overflow_names[] = {"1", "32", "1m"};
    for (int u = 1; u >= 0; u--)
        for (int o = 0; o < 3; o++)
            for (int m = 0; m < 2; m++)
                for (int s = TINY; s <= LARGE; s++) {
                    pattern *p = add(OVERFLOW, s, overflows[o]);
                    p->usable = u, p->use_memcpy = m;
                    name(p, "overflow-%s-%s-%s-%s", u ? "usable" : "req", overflow_names[o],
                         m ? "memcpy" : "write", SIZE_NAMES[s]);
                }
    for (int a = 0; a < 2; a++)
        for (int s = TINY; s <= LARGE; s++)
            name(add(UNDERFLOW, s, a ? 32 : 1), "underflow-%d-%s", a ? 32 : 1, SIZE_NAMES[s]);
    for (int s = TINY; s <= LARGE; s++)
        name(add(UAF_READ, s, 0), "uaf-read-%s", SIZE_NAMES[s]);
    for (int s = TINY; s <= LARGE; s++)
        name(add(UAF_WRITE, s, 0), "uaf-write-%s", SIZE_NAMES[s]);
    /* The same forged links aimed above the heap (the stack) instead of below it (the
     * program's static data): a check of only one side of the heap passes them. */
    for (int s = TINY; s <= LARGE; s++) {
        pattern *p = add(UAF_WRITE, s, 0);
        p->to_stack = true;
        name(p, "uaf-write-to-stack-%s", SIZE_NAMES[s]);
    }
    for (int s = TINY; s <= LARGE; s++) {
        pattern *p = add(OVERFLOW, s, 32);
        p->usable = p->to_stack = true;
        name(p, "overflow-usable-32-write-to-stack-%s", SIZE_NAMES[s]);
    }
    for (int s = TINY; s <= LARGE; s++)
        name(add(DOUBLE_FREE, s, 0), "double-free-%s", SIZE_NAMES[s]);
    for (int s = TINY; s <= LARGE; s++)
        name(add(DOUBLE_FREE_DELAYED, s, 0), "double-free-delayed-%s", SIZE_NAMES[s]);
    name(add(DOUBLE_FREE_INTERLEAVED, NO_SIZE, 0), "double-free-interleaved");
    static const long offsets[] = {1, 8, 16, -16, HALF};
    static const char *const offset_names[] = {"p+1", "p+8", "p+16", "p-16", "p+half"};
    for (int o = 0; o < 5; o++)
        for (int s = TINY; s <= LARGE; s++)
            name(add(FREE_OFFSET, s, offsets[o]), "free-%s-%s", offset_names[o], SIZE_NAMES[s]);
    for (int s = TINY; s <= LARGE; s++)
        name(add(REALLOC_FREED, s, 0), "realloc-freed-%s", SIZE_NAMES[s]);
    static const char *const foreign_names[] = {"stack", "static", "mmap"};
    for (int f = STACK; f <= MMAP; f++)
        name(add(FREE_FOREIGN, NO_SIZE, f), "free-%s", foreign_names[f]);
}

/* ---- memory the probe owns: the attacker's targets ---- */

/* The address a misuse writes as data (a forged free-list link, a forged size): the middle
 * of this buffer, so an allocator that hands it out, and the probe writing a large block
 * through it, stay inside. Page-aligned: its low byte is 0, so a 1-byte overflow writes a
 * NUL, the classic off-by-one. A static buffer lies below the heap (the program's image is
 * mapped low, the allocators' memory high); the `-to-stack` patterns aim at a buffer in
 * main's frame instead, above every mapping but the stack itself. Either way the probe stops
 * (`arbitrary-address`) before it writes through an address malloc should not have returned. */
static unsigned char arena[8 * MIB] __attribute__((aligned(4096)));
#define STACK_TARGET_SIZE (64 * KIB)
static unsigned char *target = arena + 4 * MIB;
static unsigned char static_block[4096] __attribute__((aligned(64)));
static unsigned char copy_source[MIB + 64]; /* memcpy's source for an overflow */

typedef struct {
    const unsigned char *start;
    size_t size;
} region;
#define MAX_REGIONS 4
static region chosen[MAX_REGIONS]; /* addresses malloc must never return */
static int n_chosen;

static void choose_region(const void *start, size_t size) {
    chosen[n_chosen++] = (region){start, size};
}

/* ---- allocator calls, numbered ---- */

static int calls;
static void *(*volatile memcpy_fn)(void *, const void *, size_t) = memcpy; /* a real call */

/* Hides a pointer's provenance from the compiler: no warning, no folding of misuse. */
static inline void *launder(void *p) {
    __asm__ volatile("" : "+r"(p));
    return p;
}

static void step(const char *op) {
    say("call=%d %s", ++calls, op);
}

static const char *soft_effect; /* a not-stopping effect: reported at the end */

static _Noreturn void finish(const char *effect) {
    say("effect=%s", effect);
    say("outcome=not-caught");
    say("end=1");
    _exit(0);
}

static void note(const char *effect) {
    if (!soft_effect) soft_effect = effect;
}

/* Blocks the probe holds, with their requests and fill bytes (a plain array: order and
 * content never depend on the heap under test). */
typedef struct {
    unsigned char *p;
    size_t n;
    unsigned char tag;
    bool dirty; /* the misuse wrote into it on purpose: not verified */
} held;
#define MAX_HELD 4200
static held live[MAX_HELD];
static int n_live;
static unsigned char next_tag = 0x11;

static bool overlaps(const unsigned char *a, size_t an, const unsigned char *b, size_t bn) {
    return a < b + bn && b < a + an;
}

static held *find(const void *p) {
    for (int i = 0; i < n_live; i++)
        if (live[i].p == p) return &live[i];
    return NULL;
}

/* The checks on what malloc returned, before the probe writes through it. */
static void check_new(const unsigned char *q, size_t n) {
    if (!q) finish("malloc-null");
    for (int i = 0; i < n_chosen; i++)
        if (overlaps(q, n, chosen[i].start, chosen[i].size)) finish("arbitrary-address");
    for (int i = 0; i < n_live; i++)
        if (overlaps(q, n, live[i].p, live[i].n)) finish("overlap");
}

static void hold(unsigned char *q, size_t n) {
    if (n_live == MAX_HELD) probe_error("more than %d live blocks", MAX_HELD);
    held *h = &live[n_live++];
    *h = (held){q, n, next_tag, false};
    next_tag = (unsigned char)(next_tag * 5 + 3);
    memset(q, h->tag, n);
}

static unsigned char *pm_malloc(size_t n) {
    step("malloc");
    unsigned char *q = malloc(n);
    check_new(q, n);
    hold(q, n);
    return q;
}

static bool intact(const held *h) {
    for (size_t i = 0; i < h->n; i++)
        if (h->p[i] != h->tag) return false;
    return true;
}

/* A free of a block the probe holds: its contents checked first. */
static void pm_free(unsigned char *p) {
    held *h = find(p);
    if (!h) probe_error("free of a block the probe does not hold");
    if (!h->dirty && !intact(h)) note("live-data-changed");
    *h = live[--n_live];
    step("free");
    free(p);
}

static void raw_free(void *p) {
    step("free");
    free(launder(p));
}

/* ---- the misuse writes ---- */

/* The attacker's bytes: the target address in every aligned word of memory they cover. */
static unsigned char attack_byte(uintptr_t address) {
    uintptr_t word = (uintptr_t)target;
    return (unsigned char)(word >> (8 * (address & 7)));
}

/* Marks every live block the write [at, at+n) covers and says so. */
static void mark_written(const unsigned char *at, size_t n, const unsigned char *self) {
    for (int i = 0; i < n_live; i++)
        if (live[i].p != self && overlaps(at, n, live[i].p, live[i].n)) {
            live[i].dirty = true;
            note("neighbor-overwritten");
        }
}

static void attack_write(unsigned char *at, size_t n, bool use_memcpy, const unsigned char *self) {
    mark_written(at, n, self);
    if (use_memcpy) {
        for (size_t i = 0; i < n; i++)
            copy_source[i] = attack_byte((uintptr_t)(at + i));
        step("memcpy");
        memcpy_fn(launder(at), copy_source, n);
    } else {
        volatile unsigned char *d = launder(at);
        step("write");
        for (size_t i = 0; i < n; i++)
            d[i] = attack_byte((uintptr_t)(at + i));
    }
}

/* ---- layout and the activity after the misuse ---- */

static unsigned char *blocks[8];
static int n_blocks;

/* n_blocks blocks of `request`, the odd ones freed again; the victim is the middle one. */
static unsigned char *lay_out(size_t request, int count) {
    n_blocks = count;
    for (int i = 0; i < count; i++)
        blocks[i] = pm_malloc(request);
    for (int i = 1; i < count; i += 2) {
        pm_free(blocks[i]);
        blocks[i] = NULL;
    }
    return blocks[count / 2];
}

static void forget_block(const void *p) {
    for (int i = 0; i < n_blocks; i++)
        if (blocks[i] == p) blocks[i] = NULL;
}

/* The fixed activity after the misuse, three phases:
 *  1. reuse: mallocs of the same size, each written in full and held, while the damaged
 *     blocks are still held, until REUSE_BYTES or REUSE_BLOCKS: enough for a freed block to
 *     come back even from a list that is taken last (a page's local free list behind ~1400
 *     tiny blocks), and for the next malloc to follow its (corrupted) link;
 *  2. every held block freed, the layout's first (the damaged headers are met);
 *  3. twice: as many mallocs of the size as the layout had, then their frees. */
#define REUSE_BYTES  (8 * MIB)
#define REUSE_BLOCKS 2048
static unsigned char *reuse[REUSE_BLOCKS];

static void exercise(size_t request) {
    size_t n_reuse = REUSE_BYTES / request;
    if (n_reuse > REUSE_BLOCKS) n_reuse = REUSE_BLOCKS;
    if (n_reuse < 8) n_reuse = 8;
    for (size_t i = 0; i < n_reuse; i++)
        reuse[i] = pm_malloc(request);
    for (int i = 0; i < n_blocks; i++)
        if (blocks[i]) pm_free(blocks[i]), blocks[i] = NULL;
    for (size_t i = 0; i < n_reuse; i++)
        pm_free(reuse[i]);
    int n = n_blocks ? n_blocks : 4;
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < n; i++)
            reuse[i] = pm_malloc(request);
        for (int i = 0; i < n; i++)
            pm_free(reuse[i]);
    }
}

static void release_all(void) {
    while (n_live)
        pm_free(live[n_live - 1].p);
}

/* ---- the patterns' bodies ---- */

static size_t usable_request(size_t request) {
    step("malloc");
    unsigned char *p = malloc(request);
    check_new(p, request);
    step("malloc_usable_size");
    size_t usable = malloc_usable_size(p);
    step("free");
    free(p);
    return usable < request ? request : usable;
}

static void run_overflow(const pattern *pt) {
    size_t request = REQUEST[pt->size];
    if (pt->usable) request = usable_request(request);
    unsigned char *victim = lay_out(request, LAYOUT[pt->size]);
    step("malloc_usable_size");
    size_t usable = malloc_usable_size(victim);
    say("request=%zu", request);
    say("usable=%zu", usable);
    say("misuse=%d write %ld bytes past the requested %zu", calls + 1, pt->amount, request);
    attack_write(victim + request, (size_t)pt->amount, pt->use_memcpy, victim);
    exercise(request);
}

static void run_underflow(const pattern *pt) {
    size_t request = REQUEST[pt->size];
    unsigned char *victim = lay_out(request, LAYOUT[pt->size]);
    say("request=%zu", request);
    say("misuse=%d write %ld bytes before the block", calls + 1, pt->amount);
    attack_write(victim - pt->amount, (size_t)pt->amount, false, victim);
    exercise(request);
}

static void run_uaf(const pattern *pt) {
    size_t request = REQUEST[pt->size];
    unsigned char *victim = lay_out(request, LAYOUT[pt->size]);
    unsigned char tag = find(victim)->tag;
    say("request=%zu", request);
    pm_free(victim);
    forget_block(victim);
    if (pt->kind == UAF_READ) {
        say("misuse=%d read the first 16 bytes of the freed block", calls + 1);
        step("read");
        volatile unsigned char *v = launder(victim);
        unsigned char seen[16];
        for (int i = 0; i < 16; i++)
            seen[i] = v[i];
        uintptr_t word;
        memcpy(&word, seen, sizeof word);
        bool stale = true;
        for (int i = 0; i < 16; i++)
            stale &= seen[i] == tag;
        uintptr_t distance =
            word > (uintptr_t)victim ? word - (uintptr_t)victim : (uintptr_t)victim - word;
        note(stale ? "read-stale" : distance < (1ul << 32) ? "read-pointer" : "read-changed");
    } else {
        say("misuse=%d write the target address into the first 16 bytes of the freed block",
            calls + 1);
        attack_write(victim, 16, false, NULL);
    }
    exercise(request);
}

static void run_double_free(const pattern *pt) {
    size_t request = REQUEST[pt->size];
    unsigned char *victim = lay_out(request, LAYOUT[pt->size]);
    say("request=%zu", request);
    pm_free(victim);
    forget_block(victim);
    if (pt->kind == DOUBLE_FREE_DELAYED) {
        unsigned char *other = blocks[n_blocks / 2 + 2 < n_blocks ? n_blocks / 2 + 2 : 0];
        pm_free(other);
        forget_block(other);
    }
    say("misuse=%d free the block again", calls + 1);
    raw_free(victim);
    exercise(request);
}

static void run_double_free_interleaved(void) {
    unsigned char *t1 = pm_malloc(REQUEST[TINY]), *t2 = pm_malloc(REQUEST[TINY]);
    unsigned char *m1 = pm_malloc(REQUEST[MID]), *l1 = pm_malloc(REQUEST[LARGE]);
    pm_free(t1);
    pm_free(m1);
    pm_free(t2);
    pm_free(l1);
    say("misuse=%d free a tiny and a mid block again, after frees of other sizes", calls + 1);
    raw_free(t1);
    raw_free(m1);
    for (enum size_kind s = TINY; s <= LARGE; s++) {
        n_blocks = 0;
        exercise(REQUEST[s]);
    }
}

static void run_free_offset(const pattern *pt) {
    size_t request = REQUEST[pt->size];
    unsigned char *victim = lay_out(request, LAYOUT[pt->size]);
    long offset = pt->amount == HALF ? (long)(request / 2) : pt->amount;
    say("request=%zu", request);
    say("misuse=%d free(p%+ld) of a live block p", calls + 1, offset);
    raw_free(victim + offset);
    exercise(request);
}

static void run_realloc_freed(const pattern *pt) {
    size_t request = REQUEST[pt->size];
    unsigned char *victim = lay_out(request, LAYOUT[pt->size]);
    say("request=%zu", request);
    pm_free(victim);
    forget_block(victim);
    say("misuse=%d realloc(p, 2 x size) of the freed block p", calls + 1);
    step("realloc");
    unsigned char *moved = realloc(launder(victim), 2 * request);
    check_new(moved, 2 * request);
    hold(moved, 2 * request);
    exercise(request);
}

static void run_free_foreign(const pattern *pt) {
    unsigned char stack_block[4096] __attribute__((aligned(64)));
    unsigned char *base;
    size_t size = sizeof stack_block;
    if (pt->amount == STACK) {
        base = launder(stack_block);
    } else if (pt->amount == STATIC) {
        base = static_block;
    } else {
        size = 64 * KIB;
        base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (base == MAP_FAILED) probe_error("mmap of %zu bytes failed", size);
    }
    memset(base, 0, size);
    choose_region(base, size);
    lay_out(REQUEST[TINY], LAYOUT[TINY]);
    say("request=%zu", REQUEST[TINY]);
    say("misuse=%d free of a pointer 64 bytes into a buffer malloc never returned", calls + 1);
    raw_free(base + 64);
    exercise(REQUEST[TINY]);
    release_all();
    __asm__ volatile("" ::"r"(stack_block) : "memory"); /* the buffer lives to here */
}

/* ---- signals and main ---- */

static void on_signal(int sig) {
    static const struct {
        int sig;
        const char *text;
    } names[] = {{SIGABRT, "signal=SIGABRT\noutcome=caught\n"},
                 {SIGSEGV, "signal=SIGSEGV\noutcome=crashed\n"},
                 {SIGBUS, "signal=SIGBUS\noutcome=crashed\n"},
                 {SIGILL, "signal=SIGILL\noutcome=crashed\n"},
                 {SIGFPE, "signal=SIGFPE\noutcome=crashed\n"},
                 {SIGTRAP, "signal=SIGTRAP\noutcome=crashed\n"},
                 {SIGALRM, "signal=SIGALRM\noutcome=hung\n"},
                 {SIGPROF, "signal=SIGPROF\noutcome=hung\n"}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (names[i].sig == sig) {
            ssize_t ignored = write(STDOUT_FILENO, names[i].text, strlen(names[i].text));
            (void)ignored;
        }
    signal(sig, SIG_DFL);
    raise(sig);
}

static void install_handlers(void) {
    static unsigned char alt_stack[64 * 1024];
    stack_t ss = {.ss_sp = alt_stack, .ss_size = sizeof alt_stack};
    sigaltstack(&ss, NULL);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_ONSTACK | SA_NODEFER | SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    const int sigs[] = {SIGABRT, SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGTRAP, SIGALRM, SIGPROF};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
        sigaction(sigs[i], &sa, NULL);
}

/* The object `malloc` resolves to (as the harness programs print it). */
static void print_malloc_impl(void) {
    void *address = dlsym(RTLD_DEFAULT, "malloc");
    Dl_info info;
    char path[PATH_MAX];
    if (!address || !dladdr(address, &info) || !info.dli_fname) {
        say("malloc_impl=unknown");
        return;
    }
    say("malloc_impl=%s", realpath(info.dli_fname, path) ? path : info.dli_fname);
}

int main(int argc, char **argv) {
    build_patterns();
    if (argc != 2) usage_error("%s", "give one PATTERN or --list");
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        fputs(usage, stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--list")) {
        for (int i = 0; i < n_patterns; i++)
            say("%s", patterns[i].name);
        return 0;
    }
    unsigned char stack_target[STACK_TARGET_SIZE] __attribute__((aligned(4096)));
    const pattern *pt = NULL;
    for (int i = 0; i < n_patterns; i++)
        if (!strcmp(argv[1], patterns[i].name)) pt = &patterns[i];
    if (!pt) usage_error("unknown pattern '%s'; misuse_probe --list names them", argv[1]);

    install_handlers();
    struct itimerval cpu_limit = {.it_value = {.tv_sec = CPU_LIMIT_SECONDS}};
    setitimer(ITIMER_PROF, &cpu_limit, NULL);
    alarm(ALARM_SECONDS);
    choose_region(arena, sizeof arena);
    if (pt->to_stack) {
        target = launder(stack_target + STACK_TARGET_SIZE / 2);
        choose_region(stack_target, sizeof stack_target);
    }
    say("pattern=%s", pt->name);
    print_malloc_impl();
    switch (pt->kind) {
    case OVERFLOW:
        run_overflow(pt);
        break;
    case UNDERFLOW:
        run_underflow(pt);
        break;
    case UAF_READ:
    case UAF_WRITE:
        run_uaf(pt);
        break;
    case DOUBLE_FREE:
    case DOUBLE_FREE_DELAYED:
        run_double_free(pt);
        break;
    case DOUBLE_FREE_INTERLEAVED:
        run_double_free_interleaved();
        break;
    case FREE_OFFSET:
        run_free_offset(pt);
        break;
    case REALLOC_FREED:
        run_realloc_freed(pt);
        break;
    case FREE_FOREIGN:
        run_free_foreign(pt);
        break;
    }
    release_all();
    say("effect=%s", soft_effect ? soft_effect : "silent");
    say("outcome=not-caught");
    step("exit");
    say("end=1");
    __asm__ volatile("" ::"r"(stack_target) : "memory"); /* the target lives to here */
    return 0;
}
