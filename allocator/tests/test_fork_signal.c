// test_fork_signal [forks [patterns]]: fork never deadlocks, whatever the forking code
// interrupted (issue #27, item 2). Four patterns, each in a process of its own watched by this
// one: a pattern that makes no progress for STALL_SECONDS is killed with its whole process
// group and reported with the stage it hung in, so a deadlock fails the test in seconds
// instead of stalling `make test`. `forks` (default 200) sets how long each runs; `patterns`
// picks some of them by letter (default "abcd").
//   a  a signal handler forks, single-threaded: the main loop mallocs, frees, reallocs and
//      asks malloc_usable_size of large blocks (>= 1 MiB: libhakmem's large-block lock) and of
//      tiny and mid blocks; a one-shot ITIMER_REAL of 20..220 us interrupts it anywhere, and
//      the SIGALRM handler forks and waits for the child (`forks` times). fork is
//      async-signal-safe; an allocator whose atfork prepare handler takes a plain mutex that
//      the interrupted code holds deadlocks here.
//   b  the same handler (timer 50..550 us), and the main loop forks too (child _exit(0)),
//      forks / 2 times, between its allocations, so the handler's fork also interrupts fork
//      itself (between the atfork prepare and parent handlers, with the allocator's locks
//      held by them).
//   c  threads and stdio: one thread writes to several FILEs and calls fflush(NULL), one reads
//      lines of up to 2 MiB with getline() from an fmemopen FILE (each line grows the buffer
//      from nothing: realloc under the FILE's lock, into large sizes), one forks (forks / 2
//      times). glibc's fork takes the stdio list lock after the atfork prepare handlers: an
//      allocator that takes its locks in a prepare handler then waits for the list lock
//      (fflush holds it, waiting for getline's FILE lock) while getline waits inside realloc
//      for the allocator's lock.
//   d  six threads allocate and free tiny, mid and large blocks and swap them through shared
//      slots while the main thread forks (forks / 4 times); each child allocates and frees at
//      once, frees the blocks it inherited from the swap slots, starts a thread that
//      allocates, and exits; the parent allocates right after each fork too.
// A child allocates, writes, checks and frees tiny, mid and large (1 MiB) blocks; its exit
// status says whether that worked. The one exception: a child forked by the signal handler
// while the main loop was inside malloc, free or realloc only exits (see below).
// Patterns a and b are single-threaded on purpose (the watching process never starts a
// thread): there glibc's fork takes no lock at all, so a signal handler may call it, and glibc
// passes them.
// Under the asan variant the test calls libhakmem's prefixed API (hak_malloc) while glibc's
// own allocations (stdio buffers, getline's realloc, thread start-up) go to ASan's allocator:
// pattern c cannot form its cycle through libhakmem there (getline never calls it), and a
// fork while another thread is inside ASan's allocator can leave ASan's lock held in the
// child (gcc 12's libasan takes no lock across fork), a hang that would not be libhakmem's.
// So pattern c is skipped there (reported as SKIP); a, b and d run.
#include "testhelper.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>

#define KiB ((size_t)1024)
#define MiB (1024 * KiB)

// No progress for this long means a deadlock: a step of any pattern takes milliseconds.
#ifndef STALL_SECONDS
#define STALL_SECONDS 10.0
#endif
// However much progress, a pattern may not take longer than this.
#define PATTERN_MAX_SECONDS 120.0

// What a pattern process is doing, for the report when it hangs.
enum stage {
    STAGE_START,
    STAGE_MAIN_LOOP,
    STAGE_HANDLER_FORK,
    STAGE_HANDLER_WAIT,
    STAGE_LOOP_FORK,
    STAGE_LOOP_WAIT,
    STAGE_THREAD_FORK,
    STAGE_THREAD_WAIT,
    STAGE_PARENT_AFTER_FORK,
    STAGE_JOINING,
    STAGE_COUNT
};
static const char *const stage_names[STAGE_COUNT] = {
    "starting",
    "main loop (allocating)",
    "fork() in the signal handler",
    "waitpid() in the signal handler (child running)",
    "fork() in the main loop",
    "waitpid() in the main loop (child running)",
    "fork() in the forking thread",
    "waitpid() in the forking thread (child running)",
    "allocating in the parent right after fork",
    "joining threads"};

enum child_stage { CHILD_NONE, CHILD_ALLOCATING, CHILD_THREAD, CHILD_FREEING, CHILD_STAGE_COUNT };
static const char *const child_stage_names[CHILD_STAGE_COUNT] = {"none yet", "allocating",
                                                                 "running its thread", "freeing"};

// Shared between the watching process, the pattern process and its children (MAP_SHARED).
struct progress {
    _Atomic long steps; // advances with every step the pattern makes
    _Atomic long forks; // children forked and reaped
    _Atomic int stage;
    _Atomic int child_stage;     // of the latest child
    _Atomic long passed, failed; // the pattern process's checks, when it ends
};
static struct progress *progress;

static void set_stage(enum stage stage) {
    atomic_store_explicit(&progress->stage, stage, memory_order_relaxed);
}

static void step(void) {
    atomic_fetch_add_explicit(&progress->steps, 1, memory_order_relaxed);
}

static double now_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

// ---------------------------------------------------------------------------------------------
// Blocks tagged at both ends, so a block damaged while a fork came in between shows.

static void tag_block(unsigned char *p, size_t size, unsigned char tag) {
    size_t head = size < 64 ? size : 64;
    memset(p, tag, head);
    memset(p + size - head, tag, head);
}

static bool block_tagged(const unsigned char *p, size_t size, unsigned char tag) {
    size_t head = size < 64 ? size : 64;
    for (size_t i = 0; i < head; i++)
        if (p[i] != tag || p[size - head + i] != tag) return false;
    return true;
}

// ---------------------------------------------------------------------------------------------
// What every child does: allocate, write, check and free tiny, mid and large blocks, and, if
// asked, the same in a thread of its own. Returns the exit status: 0 when all worked. No
// stdio here: a child of a signal handler may have interrupted its parent inside stdio.

static const size_t child_sizes[] = {
    8, 24, 200, 1000, 3000, 20 * KiB, 40 * KiB, 300 * KiB, 1 * MiB, 1 * MiB + 5, 2 * MiB + 1};
enum { CHILD_SIZES = sizeof child_sizes / sizeof child_sizes[0] };

static int allocate_and_free(unsigned char tag) {
    unsigned char *blocks[CHILD_SIZES];
    for (int i = 0; i < CHILD_SIZES; i++) {
        blocks[i] = malloc(child_sizes[i]);
        if (!blocks[i]) return 10;
        tag_block(blocks[i], child_sizes[i], (unsigned char)(tag + i));
    }
    // Grow one block of each kind: tiny -> mid, mid -> large, large -> larger (mremap).
    const int grown[] = {1, 5, 8};
    for (int g = 0; g < 3; g++) {
        int i = grown[g];
        unsigned char *q = realloc(blocks[i], child_sizes[i] * 3);
        if (!q) return 11;
        size_t head = child_sizes[i] < 64 ? child_sizes[i] : 64;
        for (size_t b = 0; b < head; b++)
            if (q[b] != (unsigned char)(tag + i)) return 12;
        blocks[i] = q;
        tag_block(q, child_sizes[i] * 3, (unsigned char)(tag + i));
    }
    unsigned char *zeroed = calloc(1, 64 * KiB);
    if (!zeroed || zeroed[0] != 0 || zeroed[64 * KiB - 1] != 0) return 13;
    free(zeroed);
    for (int i = 0; i < CHILD_SIZES; i++) {
        bool was_grown = i == 1 || i == 5 || i == 8;
        size_t size = child_sizes[i] * (was_grown ? 3 : 1);
        if (!block_tagged(blocks[i], size, (unsigned char)(tag + i))) return 14;
        free(blocks[i]);
    }
    return 0;
}

static void *child_thread(void *arg) {
    (void)arg;
    return (void *)(uintptr_t)allocate_and_free(0x40);
}

static void free_shared_slots(void);

// free_inherited: also free the blocks the parent's threads had parked in the shared slots
// (pattern d): blocks of heaps whose threads do not exist in the child.
static int child_work(bool start_thread, bool free_inherited) {
    atomic_store_explicit(&progress->child_stage, CHILD_ALLOCATING, memory_order_relaxed);
    int status = allocate_and_free(0x10);
    if (status != 0) return status;
    if (free_inherited) free_shared_slots();
    if (!start_thread) return 0;
    atomic_store_explicit(&progress->child_stage, CHILD_THREAD, memory_order_relaxed);
    pthread_t thread;
    void *result = (void *)1;
    if (pthread_create(&thread, NULL, child_thread, NULL) != 0) return 20;
    pthread_join(thread, &result);
    if (result != NULL) return 21;
    atomic_store_explicit(&progress->child_stage, CHILD_FREEING, memory_order_relaxed);
    return allocate_and_free(0x20);
}

// The exit status of a child, checked; `what` names the pattern's fork site.
static bool child_status_ok(int status, const char *what) {
    bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (!ok)
        fprintf(stderr, "%s: child %s %d\n", what,
                WIFSIGNALED(status) ? "killed by signal" : "exited with status",
                WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
    return CHECK(ok);
}

static pid_t wait_for(pid_t pid, int *status) {
    pid_t r;
    while ((r = waitpid(pid, status, 0)) < 0 && errno == EINTR)
        ;
    return r;
}

// ---------------------------------------------------------------------------------------------
// Patterns a and b: fork in a SIGALRM handler.
//
// The child of a fork in a signal handler inherits the interrupted code's state. fork itself
// is async-signal-safe, so it must return (the deadlock this test is about); but malloc is
// not: when the handler interrupted the main loop inside malloc, free or realloc, the child
// finds the heap half-updated (glibc 2.36 then aborts in the child: "malloc(): mismatching
// next->prev_size", "corrupted double-linked list"). So the main loop marks its allocator
// calls, and a child forked from inside one only exits; every other child allocates. Most
// timer signals land in one (under glibc, large blocks are mmap, munmap and mremap calls, and
// a signal is delivered when the syscall returns), so the main loop also raises
// SIGUSR1 (same handler, which then leaves the timer alone) itself, once for every four
// timer signals in a and once per fork in b: children forked at those points always allocate.

static volatile sig_atomic_t in_allocator;
static volatile sig_atomic_t handler_armed;
static volatile long handler_forks, handler_timer_forks, handler_allocating_children,
    handler_fork_errors, handler_bad_children;
static volatile int handler_last_bad_status;
static uint64_t handler_random_state = 12345;
static long timer_min_us, timer_spread_us; // the one-shot timer's delay: min + [0, spread)

static void *guarded_malloc(size_t size) {
    in_allocator = 1;
    void *p = malloc(size);
    in_allocator = 0;
    return p;
}

static void *guarded_calloc(size_t size) {
    in_allocator = 1;
    void *p = calloc(1, size);
    in_allocator = 0;
    return p;
}

static void *guarded_realloc(void *p, size_t size) {
    in_allocator = 1;
    void *q = realloc(p, size);
    in_allocator = 0;
    return q;
}

static void guarded_free(void *p) {
    in_allocator = 1;
    free(p);
    in_allocator = 0;
}

static size_t guarded_usable_size(void *p) {
    in_allocator = 1;
    size_t usable = malloc_usable_size(p);
    in_allocator = 0;
    return usable;
}

static void arm_timer(void) {
    uint64_t r = test_random_next(&handler_random_state);
    struct itimerval timer = {{0, 0}, {0, timer_min_us + (long)(r % (uint64_t)timer_spread_us)}};
    setitimer(ITIMER_REAL, &timer, NULL);
}

static void fork_in_handler(int signal_number) {
    if (!handler_armed) return;
    int saved_errno = errno;
    int saved_stage = atomic_load_explicit(&progress->stage, memory_order_relaxed);
    bool child_may_allocate = !in_allocator;
    set_stage(STAGE_HANDLER_FORK);
    atomic_store_explicit(&progress->child_stage, CHILD_NONE, memory_order_relaxed);
    pid_t pid = fork();
    if (pid == 0) _exit(child_may_allocate ? child_work(false, false) : 0);
    if (pid < 0) {
        handler_fork_errors++;
    } else {
        set_stage(STAGE_HANDLER_WAIT);
        int status = 0;
        if (wait_for(pid, &status) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            handler_bad_children++;
            handler_last_bad_status = status;
        }
        handler_forks++;
        handler_timer_forks += signal_number == SIGALRM;
        handler_allocating_children += child_may_allocate;
        atomic_fetch_add_explicit(&progress->forks, 1, memory_order_relaxed);
        step();
    }
    set_stage((enum stage)saved_stage);
    if (signal_number == SIGALRM) arm_timer();
    errno = saved_errno;
}

static void start_signal_forks(long min_us, long spread_us) {
    timer_min_us = min_us;
    timer_spread_us = spread_us;
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = fork_in_handler;
    sigemptyset(&action.sa_mask);
    sigaddset(&action.sa_mask, SIGALRM);
    sigaddset(&action.sa_mask, SIGUSR1);
    action.sa_flags = SA_RESTART;
    sigaction(SIGALRM, &action, NULL);
    sigaction(SIGUSR1, &action, NULL);
    handler_armed = 1;
    arm_timer();
}

static void stop_signal_forks(long wanted_forks) {
    handler_armed = 0;
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &off, NULL);
    signal(SIGALRM, SIG_IGN);
    signal(SIGUSR1, SIG_IGN);
    printf("  %ld forks in the handler (%ld on the timer), %ld of whose children allocated (the "
           "others had interrupted an allocator call)\n",
           handler_forks, handler_timer_forks, handler_allocating_children);
    CHECK(handler_timer_forks >= wanted_forks);
    // The raised signals come outside the allocator: each of their children allocated.
    long raised_forks = handler_forks - handler_timer_forks;
    CHECK(raised_forks >= wanted_forks / 8);
    CHECK(handler_allocating_children >= raised_forks);
    if (!CHECK(handler_fork_errors == 0))
        fprintf(stderr, "%ld forks failed\n", handler_fork_errors);
    if (!CHECK(handler_bad_children == 0)) {
        int status = handler_last_bad_status;
        fprintf(stderr, "%ld children of the handler failed; the last %s %d\n",
                handler_bad_children, WIFSIGNALED(status) ? "killed by signal" : "exited with",
                WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
    }
}

// The main loop's allocation work, all tagged and checked. Two thirds of the steps work on
// large blocks (libhakmem: its large-block table and lock, taken by malloc, free, realloc and
// malloc_usable_size of every large block), mostly the cheap calls that take the lock and
// return (malloc_usable_size, in-place realloc by a few bytes, a free and malloc the cache
// serves), so that much of the loop's time is spent holding it; the rest on tiny and mid
// blocks (8 B .. 64 KiB), malloc, free and realloc.
enum { LARGE_SLOTS = 6, SMALL_SLOTS = 32 };
struct slots {
    unsigned char *large[LARGE_SLOTS];
    size_t large_size[LARGE_SLOTS];
    unsigned char *small[SMALL_SLOTS];
    size_t small_size[SMALL_SLOTS];
    uint64_t random_state;
};

static void large_step(struct slots *s, uint64_t r) {
    size_t i = (r >> 8) % LARGE_SLOTS;
    unsigned char tag = (unsigned char)(0x80 + i);
    unsigned char *p = s->large[i];
    size_t size = s->large_size[i];
    if (!p) {
        size = 1 * MiB + (size_t)((r >> 16) % (3 * MiB));
        p = guarded_malloc(size);
        if (!CHECK(p != NULL)) return;
        tag_block(p, size, tag);
        s->large[i] = p;
        s->large_size[i] = size;
        return;
    }
    CHECK(block_tagged(p, size, tag));
    unsigned what = (unsigned)((r >> 40) % 16);
    if (what < 8) { // the lock and a table lookup, nothing else
        for (int k = 0; k < 4; k++)
            CHECK(guarded_usable_size(p) >= size);
        return;
    }
    if (what < 12) { // realloc within the block's pages, both ways
        size_t next = size + 64 - (size_t)((r >> 20) % 128);
        unsigned char *q = guarded_realloc(p, next);
        if (!CHECK(q != NULL)) return;
        p = q;
        size = next;
    } else if (what < 15) { // free and allocate again (the cache's region, or a new one)
        guarded_free(p);
        size = 1 * MiB + (size_t)((r >> 16) % (3 * MiB));
        p = (r >> 50) & 1 ? guarded_calloc(size) : guarded_malloc(size);
    } else { // grow or shrink by megabytes (mremap, or unmapping the tail)
        size_t next = 1 * MiB + (size_t)((r >> 16) % (6 * MiB));
        unsigned char *q = guarded_realloc(p, next);
        if (q) {
            p = q;
            size = next;
        }
    }
    s->large[i] = p;
    s->large_size[i] = size;
    if (CHECK(p != NULL)) tag_block(p, size, tag);
}

static void small_step(struct slots *s, uint64_t r) {
    size_t i = (r >> 8) % SMALL_SLOTS;
    unsigned char tag = (unsigned char)(0x10 + i);
    unsigned char *p = s->small[i];
    if (p) CHECK(block_tagged(p, s->small_size[i], tag));
    size_t size = (size_t)8 << ((r >> 16) % 13); // 8 B .. 32 KiB, and up to 64 KiB below
    size += (r >> 24) % size;
    if ((r >> 40) & 1) {
        unsigned char *q = guarded_realloc(p, size);
        if (q)
            p = q;
        else
            size = s->small_size[i];
    } else {
        guarded_free(p);
        p = guarded_malloc(size);
    }
    s->small[i] = p;
    s->small_size[i] = size;
    if (CHECK(p != NULL)) tag_block(p, size, tag);
}

static void slots_step(struct slots *s) {
    uint64_t r = test_random_next(&s->random_state);
    if (r % 3 != 0)
        large_step(s, r);
    else
        small_step(s, r);
}

static void slots_free(struct slots *s) {
    for (int i = 0; i < LARGE_SLOTS; i++) {
        if (s->large[i])
            CHECK(block_tagged(s->large[i], s->large_size[i], (unsigned char)(0x80 + i)));
        free(s->large[i]);
    }
    for (int i = 0; i < SMALL_SLOTS; i++) {
        if (s->small[i])
            CHECK(block_tagged(s->small[i], s->small_size[i], (unsigned char)(0x10 + i)));
        free(s->small[i]);
    }
}

// a: `forks` forks in the handler on the timer (and those on SIGUSR1).
static void pattern_signal_fork(int forks) {
    static struct slots s = {.random_state = 1};
    set_stage(STAGE_MAIN_LOOP);
    start_signal_forks(20, 200);
    double start = now_seconds();
    while (handler_timer_forks < forks && now_seconds() - start < PATTERN_MAX_SECONDS) {
        slots_step(&s);
        if (handler_forks - handler_timer_forks < handler_timer_forks / 4) raise(SIGUSR1);
        step();
    }
    stop_signal_forks(forks);
    slots_free(&s);
}

// b: forks / 2 forks in the main loop, and at least as many in the handler on the timer.
static void pattern_signal_fork_in_fork(int forks) {
    static struct slots s = {.random_state = 2};
    set_stage(STAGE_MAIN_LOOP);
    // A longer delay than a's: each handler's fork and child take about a millisecond, and
    // the main loop needs time between them to fork too.
    start_signal_forks(50, 500);
    long loop_forks = 0;
    double start = now_seconds();
    while (loop_forks < forks / 2 && now_seconds() - start < PATTERN_MAX_SECONDS) {
        for (int i = 0; i < 4; i++)
            slots_step(&s);
        raise(SIGUSR1);
        set_stage(STAGE_LOOP_FORK);
        pid_t pid = fork();
        if (pid == 0) _exit(0);
        if (!CHECK(pid > 0)) break;
        set_stage(STAGE_LOOP_WAIT);
        int status = 0;
        CHECK(wait_for(pid, &status) == pid);
        child_status_ok(status, "fork in the main loop");
        loop_forks++;
        atomic_fetch_add_explicit(&progress->forks, 1, memory_order_relaxed);
        set_stage(STAGE_MAIN_LOOP);
        step();
    }
    stop_signal_forks(forks / 2);
    CHECK(loop_forks >= forks / 2);
    slots_free(&s);
}

// ---------------------------------------------------------------------------------------------
// Pattern c: fflush(NULL), getline and fork in three threads.

static atomic_bool stop_threads;

static void *flusher(void *arg) {
    (void)arg;
    FILE *files[4];
    files[0] = fopen("/dev/null", "w");
    files[1] = fopen("/dev/null", "w");
    files[2] = tmpfile();
    files[3] = fopen("/dev/null", "w");
    if (files[1]) setvbuf(files[1], NULL, _IOFBF, 64 * KiB);
    if (files[3]) setvbuf(files[3], NULL, _IOLBF, 0);
    long round = 0;
    while (!atomic_load_explicit(&stop_threads, memory_order_relaxed)) {
        for (int f = 0; f < 4; f++)
            if (files[f]) fprintf(files[f], "round %ld file %d: some text to flush\n", round, f);
        if (files[2] && round % 1024 == 0) rewind(files[2]);
        fflush(NULL);
        round++;
    }
    for (int f = 0; f < 4; f++)
        if (files[f]) fclose(files[f]);
    return NULL;
}

// Lines of 100 B .. 2 MiB; each is read into a buffer grown from nothing.
static char *line_text;
static size_t line_text_size;

static void build_lines(void) {
    const size_t lengths[] = {100,       1000,      10 * KiB, 40 * KiB,
                              100 * KiB, 300 * KiB, 1 * MiB,  2 * MiB};
    line_text_size = 0;
    for (size_t i = 0; i < sizeof lengths / sizeof lengths[0]; i++)
        line_text_size += lengths[i] + 1;
    line_text = malloc(line_text_size);
    if (!CHECK(line_text != NULL)) return;
    char *p = line_text;
    for (size_t i = 0; i < sizeof lengths / sizeof lengths[0]; i++) {
        memset(p, 'a' + (int)i, lengths[i]);
        p[lengths[i]] = '\n';
        p += lengths[i] + 1;
    }
}

static void *line_reader(void *arg) {
    (void)arg;
    FILE *f = fmemopen(line_text, line_text_size, "r");
    if (!CHECK(f != NULL)) return NULL;
    while (!atomic_load_explicit(&stop_threads, memory_order_relaxed)) {
        char *line = NULL;
        size_t capacity = 0;
        ssize_t length = getline(&line, &capacity, f);
        if (length < 0)
            rewind(f);
        else
            CHECK(line[0] >= 'a' && line[0] <= 'h' && line[length - 1] == '\n');
        free(line);
    }
    fclose(f);
    return NULL;
}

struct forker_args {
    int forks;
    bool child_starts_thread, child_frees_inherited;
    enum stage fork_stage, wait_stage;
};

static void *forker(void *arg) {
    struct forker_args *args = arg;
    for (int i = 0; i < args->forks; i++) {
        set_stage(args->fork_stage);
        atomic_store_explicit(&progress->child_stage, CHILD_NONE, memory_order_relaxed);
        pid_t pid = fork();
        if (pid == 0) _exit(child_work(args->child_starts_thread, args->child_frees_inherited));
        if (!CHECK(pid > 0)) break;
        set_stage(STAGE_PARENT_AFTER_FORK);
        // The parent allocates at once too.
        CHECK(allocate_and_free(0x60) == 0);
        set_stage(args->wait_stage);
        int status = 0;
        CHECK(wait_for(pid, &status) == pid);
        child_status_ok(status, "forking thread");
        atomic_fetch_add_explicit(&progress->forks, 1, memory_order_relaxed);
        step();
    }
    return NULL;
}

static void pattern_stdio_threads(int forks) {
    build_lines();
    if (!line_text) return;
    pthread_t flush_thread, read_thread, fork_thread;
    struct forker_args args = {forks / 2, false, false, STAGE_THREAD_FORK, STAGE_THREAD_WAIT};
    CHECK(pthread_create(&flush_thread, NULL, flusher, NULL) == 0);
    CHECK(pthread_create(&read_thread, NULL, line_reader, NULL) == 0);
    CHECK(pthread_create(&fork_thread, NULL, forker, &args) == 0);
    pthread_join(fork_thread, NULL);
    set_stage(STAGE_JOINING);
    atomic_store(&stop_threads, true);
    pthread_join(flush_thread, NULL);
    pthread_join(read_thread, NULL);
    free(line_text);
}

// ---------------------------------------------------------------------------------------------
// Pattern d: busy threads across every size path, the main thread forks.

enum { BUSY_THREADS = 6, SHARED_SLOTS = 64 };
static _Atomic(void *) shared_slots[SHARED_SLOTS];
static atomic_int busy_running;

static void free_shared_slots(void) {
    for (int i = 0; i < SHARED_SLOTS; i++)
        free(atomic_exchange(&shared_slots[i], NULL));
}

static void *busy_allocator(void *arg) {
    uint64_t random_state = (uintptr_t)arg;
    void *held[32] = {0};
    for (long n = 0; !atomic_load_explicit(&stop_threads, memory_order_relaxed); n++) {
        if (n == 100) atomic_fetch_add(&busy_running, 1);
        uint64_t r = test_random_next(&random_state);
        size_t size = (size_t)8 << (r % 13); // 8 B .. 32 KiB
        if (r % 61 == 0)
            size = 1 * MiB + (r >> 20) % (2 * MiB);
        else if (r % 17 == 0)
            size = 40 * KiB + (r >> 20) % (200 * KiB);
        size_t i = (r >> 8) % 32;
        free(held[i]);
        held[i] = (r >> 14) % 4 == 0 ? calloc(1, size) : malloc(size);
        if (held[i]) memset(held[i], (int)r, size < 64 ? size : 64);
        if ((r >> 16) % 4 == 0) {
            void *q = realloc(held[i], size + size / 2);
            if (q) held[i] = q;
        }
        if (r % 5 == 0) held[i] = atomic_exchange(&shared_slots[(r >> 24) % SHARED_SLOTS], held[i]);
    }
    for (int i = 0; i < 32; i++)
        free(held[i]);
    return NULL;
}

static void pattern_busy_threads(int forks) {
    pthread_t threads[BUSY_THREADS];
    for (uintptr_t t = 0; t < BUSY_THREADS; t++)
        CHECK(pthread_create(&threads[t], NULL, busy_allocator, (void *)(t + 1)) == 0);
    // Fork only once every thread is past its start-up (as test_fork: under ASan a thread's
    // start allocates in ASan's allocator, which gcc 12's libasan does not lock across fork).
    while (atomic_load(&busy_running) < BUSY_THREADS)
        sched_yield();
    struct forker_args args = {forks / 4, true, true, STAGE_LOOP_FORK, STAGE_LOOP_WAIT};
    forker(&args);
    set_stage(STAGE_JOINING);
    atomic_store(&stop_threads, true);
    for (int t = 0; t < BUSY_THREADS; t++)
        pthread_join(threads[t], NULL);
    free_shared_slots();
}

// ---------------------------------------------------------------------------------------------
// The watching process.

struct pattern {
    const char *name;
    void (*run)(int forks);
    bool skip;
};

// Runs one pattern in a process (group) of its own; false if it failed or hung.
static bool run_pattern(const struct pattern *pattern, int forks) {
    memset(progress, 0, sizeof *progress);
    fflush(stdout); // or the child would print what is still buffered again
    fflush(stderr);
    double start = now_seconds();
    pid_t pid = fork();
    if (pid == 0) {
        setpgid(0, 0);
        atomic_store(&test_passed_count, 0);
        atomic_store(&test_failed_count, 0);
        pattern->run(forks);
        atomic_store(&progress->passed, atomic_load(&test_passed_count));
        atomic_store(&progress->failed, atomic_load(&test_failed_count));
        fflush(stdout);
        fflush(stderr);
        // _exit: the watching process alone writes libhakmem's stats at its exit.
        _exit(atomic_load(&test_failed_count) != 0);
    }
    if (!CHECK(pid > 0)) return false;
    setpgid(pid, pid);
    long last_steps = -1;
    double last_change = start;
    int status = 0;
    for (;;) {
        // Exited? (Not reaped yet: while it is a zombie its pid and group id stay ours, so the
        // group can still be killed below without hitting anyone else's.)
        siginfo_t info;
        memset(&info, 0, sizeof info);
        if (waitid(P_PID, (id_t)pid, &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == pid)
            break;
        double now = now_seconds();
        long steps = atomic_load(&progress->steps);
        if (steps != last_steps) {
            last_steps = steps;
            last_change = now;
        }
        bool stalled = now - last_change > STALL_SECONDS;
        if (stalled || now - start > PATTERN_MAX_SECONDS) {
            int stage = atomic_load(&progress->stage);
            int child_stage = atomic_load(&progress->child_stage);
            fprintf(stderr,
                    "FAIL pattern %s: %s after %.1f s: %ld steps, %ld forks done; stage: %s; "
                    "latest child: %s\n",
                    pattern->name, stalled ? "HUNG (no progress)" : "took too long", now - start,
                    steps, atomic_load(&progress->forks),
                    stage >= 0 && stage < STAGE_COUNT ? stage_names[stage] : "?",
                    child_stage >= 0 && child_stage < CHILD_STAGE_COUNT
                        ? child_stage_names[child_stage]
                        : "?");
            kill(-pid, SIGKILL);
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            CHECK(!"pattern hung");
            return false;
        }
        struct timespec pause = {0, 2 * 1000 * 1000};
        nanosleep(&pause, NULL);
    }
    // The group may still hold children of a failed pattern; none should outlive it.
    kill(-pid, SIGKILL);
    waitpid(pid, &status, 0);
    // The pattern's own checks count in this process's summary.
    atomic_fetch_add(&test_passed_count, atomic_load(&progress->passed));
    atomic_fetch_add(&test_failed_count, atomic_load(&progress->failed));
    bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (!ok)
        fprintf(stderr, "FAIL pattern %s: process %s %d\n", pattern->name,
                WIFSIGNALED(status) ? "killed by signal" : "exited with status",
                WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
    CHECK(ok);
    printf("pattern %-45s %s  %6.3f s  %ld forks\n", pattern->name, ok ? "ok  " : "FAIL",
           now_seconds() - start, atomic_load(&progress->forks));
    fflush(stdout);
    return ok;
}

int main(int argc, char **argv) {
    int forks = argc > 1 ? atoi(argv[1]) : 200;
    printf("allocator: %s forks=%d\n", allocator_name(), forks);
    fflush(stdout);
    progress =
        mmap(NULL, sizeof *progress, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (!CHECK(progress != MAP_FAILED)) return test_summary();
#if defined(HAKTEST_PREFIXED_API)
    const bool stdio_pattern_applies = false; // see the head comment
#else
    const bool stdio_pattern_applies = true;
#endif
    const struct pattern patterns[] = {
        {"a: fork in a signal handler", pattern_signal_fork, false},
        {"b: fork in a handler interrupting fork", pattern_signal_fork_in_fork, false},
        {"c: fflush(NULL) + getline + fork threads", pattern_stdio_threads, !stdio_pattern_applies},
        {"d: fork among 6 allocating threads", pattern_busy_threads, false},
    };
    const char *selected = argc > 2 ? argv[2] : "abcd";
    for (size_t i = 0; i < sizeof patterns / sizeof patterns[0]; i++) {
        if (!strchr(selected, patterns[i].name[0])) continue;
        if (patterns[i].skip) {
            printf("pattern %-45s SKIP (stdio does not allocate through libhakmem here)\n",
                   patterns[i].name);
            fflush(stdout);
            continue;
        }
        run_pattern(&patterns[i], forks);
    }
    return test_summary();
}
