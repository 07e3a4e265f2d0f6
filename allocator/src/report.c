// Stats printer: walks the field lists in stats.h and writes one `[GROUP] key=value ...` line
// per enabled group, at exit, to stderr or HAKMEM_STATS_FILE. At the top of the layers, with
// init.c (which calls it at exit): the hot-path groups sum the live heaps' counters and name
// each front's classes from the routes.
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "init.h"
#include "lock.h"
#include "options.h"

#if HAK_STATS_HOT
static void add_live_heap(hak_heap *heap, void *sum) {
    uint64_t *total = sum;
    const uint64_t *counters = (const uint64_t *)&heap->hot;
    for (size_t i = 0; i < HAK_HOT_STATS_WORDS; i++)
        total[i] += counters[i];
}
#endif

typedef struct {
    char text[2048];
    size_t len;
} line_buffer;

static void append(line_buffer *b, const char *fmt_key, unsigned long long value) {
    int n = snprintf(b->text + b->len, sizeof b->text - b->len, "%s=%llu", fmt_key, value);
    if (n > 0 && b->len + (size_t)n < sizeof b->text) b->len += (size_t)n;
}

static void append_key(line_buffer *b, const char *prefix, const char *name,
                       unsigned long long value) {
    char key[64];
    snprintf(key, sizeof key, " %s%s", prefix, name);
    append(b, key, value);
}

static void start(line_buffer *b, const char *group) {
    b->len = (size_t)snprintf(b->text, sizeof b->text, "[%s]", group);
}

#define LOAD(group, field) atomic_load_explicit(&group.field, memory_order_relaxed)

static void format_ss_os(line_buffer *b) {
    start(b, "SS_OS_STATS");
#define HAK_APPEND(field) append_key(b, "", #field, LOAD(hak_stats_ss_os, field));
    HAK_SS_OS_STATS_FIELDS(HAK_APPEND)
#undef HAK_APPEND
}

static void format_large(line_buffer *b) {
    start(b, "LARGE_STATS");
#define HAK_APPEND(field) append_key(b, "", #field, LOAD(hak_stats_large, field));
    HAK_LARGE_STATS_FIELDS(HAK_APPEND)
#undef HAK_APPEND
}

// Per lock (lock.h): <name>_acquire (HAK_STATS_HOT builds only), <name>_contended,
// <name>_sleeps, <name>_wait_us.
static void format_lock(line_buffer *b) {
    start(b, "LOCK_STATS");
    static const char *const names[HAK_LOCK_COUNT] = {
#define HAK_LOCK_NAME(name) #name,
        HAK_LOCKS(HAK_LOCK_NAME)
#undef HAK_LOCK_NAME
    };
    for (unsigned i = 0; i < HAK_LOCK_COUNT; i++) {
        const hak_lock_counters *c = &hak_lock_stats[i];
        char prefix[24];
        snprintf(prefix, sizeof prefix, "%s_", names[i]);
        if (HAK_STATS_HOT) append_key(b, prefix, "acquire", LOAD((*c), acquire));
        append_key(b, prefix, "contended", LOAD((*c), contended));
        append_key(b, prefix, "sleeps", LOAD((*c), sleeps));
        append_key(b, prefix, "wait_us", LOAD((*c), wait_ns) / 1000);
    }
}

#if HAK_STATS_HOT
// Per group counter: c0_<name> .. c7_<name> (each the sum over the group's classes), then
// mid_<name> = sum over the mid pool.
static void append_per_class(line_buffer *b, const char *name, const uint64_t *by_class) {
    char prefix[8];
    uint64_t group[HAK_TINY_GROUP_COUNT] = {0}, mid = 0;
    for (unsigned c = 0; c < HAK_CLASS_COUNT; c++) {
        if (hak_class_is_tiny(c))
            group[hak_tiny_group[c]] += by_class[c];
        else
            mid += by_class[c];
    }
    for (unsigned g = 0; g < HAK_TINY_GROUP_COUNT; g++) {
        snprintf(prefix, sizeof prefix, "c%u_", g);
        append_key(b, prefix, name, group[g]);
    }
    append_key(b, "mid_", name, mid);
}

static void format_heap(line_buffer *b, const hak_hot_stats *s) {
    start(b, "HEAP_STATS");
#define HAK_APPEND(counter) append_per_class(b, #counter, s->counter);
    HAK_HEAP_STATS_COUNTERS(HAK_APPEND)
#undef HAK_APPEND
}

static void format_front_class(line_buffer *b, const hak_hot_stats *s) {
    start(b, "FRONT_CLASS");
#define HAK_APPEND(counter) append_per_class(b, #counter, s->counter);
    HAK_FRONT_CLASS_COUNTERS(HAK_APPEND)
#undef HAK_APPEND
}

// One front path's engagement: its classes' counters summed. route_hits counts every malloc
// served by the path, so a path that serves no class (switched off) reports 0.
static void format_path(line_buffer *b, const char *group, const hak_front *front,
                        const hak_hot_stats *s) {
    uint64_t classes = 0, alloc = 0, fast = 0, slow = 0, refill = 0, free_all = 0, remote = 0,
             free_slow = 0, fallback = 0;
    for (unsigned c = 0; c < HAK_CLASS_COUNT; c++) {
        if (hak_route_for_class(c) != front) continue;
        // The bits of the route masks: tiny group Ci = bit i, mid group Mj = bit 8 + j.
        if (hak_class_block_size[c] <= hak_small_max) classes |= 1ull << hak_class_group_bit(c);
        alloc += s->alloc[c];
        fast += s->fast[c];
        slow += s->slow[c];
        refill += s->refill[c];
        free_all += s->free[c];
        remote += s->remote_free[c];
        free_slow += s->free_slow[c];
        fallback += s->fallback[c];
    }
    start(b, group);
    append_key(b, "", "classes", classes);
    append_key(b, "", "route_hits", alloc);
    append_key(b, "", "alloc_fast", fast);
    append_key(b, "", "alloc_slow", slow);
    append_key(b, "", "refill", refill);
    append_key(b, "", "free_fast", free_all - remote - free_slow);
    append_key(b, "", "free_remote", remote);
    append_key(b, "", "fallback", fallback);
    append_key(b, "", "page_of_fail", free_slow);
}
#else
static void format_heap(line_buffer *b, const hak_hot_stats *s) {
    (void)s;
    start(b, "HEAP_STATS");
    append(b, " compiled", 0);
}
#define format_front_class(b, s)        (start(b, "FRONT_CLASS"), append(b, " compiled", 0))
#define format_path(b, group, front, s) (start(b, group), append(b, " compiled", 0))
#endif

void hak_stats_print(void) {
    int all = hak_option[HAK_OPT_STATS] != 0;
    int wanted[] = {
#define HAK_WANTED(group, kind) all || hak_option[HAK_OPT_##group],
        HAK_STATS_GROUPS(HAK_WANTED)
#undef HAK_WANTED
    };
    int any = 0;
    for (size_t i = 0; i < sizeof wanted / sizeof wanted[0]; i++)
        any |= wanted[i];
    if (!any) return;

    hak_hot_stats total;
    memset(&total, 0, sizeof total);
#if HAK_STATS_HOT
    uint64_t *sum = (uint64_t *)&total;
    for (size_t i = 0; i < HAK_HOT_STATS_WORDS; i++)
        sum[i] = atomic_load_explicit(&hak_stats_merged[i], memory_order_relaxed);
    hak_heap_for_each_live(add_live_heap, sum);
#endif

    int fd = STDERR_FILENO;
    const char *path = hak_option_text(HAK_OPT_STATS_FILE);
    if (path[0]) {
        fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (fd < 0) {
            hak_message("hakmem: cannot open HAKMEM_STATS_FILE=%s; stats go to stderr\n", path);
            fd = STDERR_FILENO;
        }
    }
    static line_buffer b; // static: keep a 2 KiB buffer off small thread stacks
    size_t group = 0;
#define HAK_PRINT(name, kind)                                                                      \
    if (wanted[group++]) {                                                                         \
        format_group_##name(&b, &total);                                                           \
        b.text[b.len++] = '\n';                                                                    \
        ssize_t written = write(fd, b.text, b.len);                                                \
        (void)written;                                                                             \
    }
#define format_group_SS_OS_STATS(b, s) format_ss_os(b)
#define format_group_LARGE_STATS(b, s) format_large(b)
#define format_group_LOCK_STATS(b, s)  format_lock(b)
#define format_group_HEAP_STATS(b, s)  format_heap(b, s)
#define format_group_FRONT_CLASS(b, s) format_front_class(b, s)
#define format_group_TINY_HEAP_STATS(b, s)                                                         \
    format_path(b, "TINY_HEAP_STATS", &hak_fronts[HAK_FRONT_TINYHEAP], s)
#define format_group_HOTHEAP_V2_STATS(b, s)                                                        \
    format_path(b, "HOTHEAP_V2_STATS", &hak_fronts[HAK_FRONT_HOTHEAP_V2], s)
#define format_group_SMALL_HEAP_V3_STATS(b, s)                                                     \
    format_path(b, "SMALL_HEAP_V3_STATS", &hak_fronts[HAK_FRONT_SMALLHEAP_V3], s)
    HAK_STATS_GROUPS(HAK_PRINT)
#undef HAK_PRINT
    if (fd != STDERR_FILENO) close(fd);
}
