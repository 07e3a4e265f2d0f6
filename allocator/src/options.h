// The options table: every HAKMEM_* switch is one row of HAK_OPTIONS. The environment is read
// once (hak_options_init, from `environ`, no getenv and no malloc) and the values copied into
// hak_option[]; nothing on a hot path reads them.
//
// Row: X(ID, type, default, variants, enum values, counters, description)
//   env name   "HAKMEM_" #ID (generated, so the name and the enum cannot drift apart)
//   type       BOOL (1/0/on/off/yes/no/true/false), INT, SIZE (K/M/G suffix), ENUM, STR
//   default    text, parsed by the same parser as the environment
//   variants   which builds honour it ("fast,stats,debug" = every build)
//   enum values "A|B|C" for ENUM rows (value = index), else ""
//   counters   the stats counters ("GROUP.key,...") that show the switch acted in a run: one
//              of them differs between a run with and one without it (hakbench ab's engagement
//              check reads them from `hakmem-options --json`); "" for switches that only change
//              what is printed
#ifndef HAK_OPTIONS_H
#define HAK_OPTIONS_H

#define HAK_ALL_VARIANTS "fast,stats,debug"
#define HAK_HOT_VARIANTS "stats,debug"

// clang-format off
#define HAK_OPTIONS(X) \
    X(VERBOSE, BOOL, "0", HAK_ALL_VARIANTS, "", "", \
      "print every option's value and the class->path table to stderr at start") \
    X(STATS, BOOL, "0", HAK_ALL_VARIANTS, "", "", \
      "print every stats group at exit (one [GROUP] key=value line each)") \
    X(STATS_FILE, STR, "", HAK_ALL_VARIANTS, "", "", \
      "append the stats lines to this file instead of stderr") \
    X(SS_OS_STATS, BOOL, "0", HAK_ALL_VARIANTS, "", "", \
      "print the SS_OS_STATS group: superslab and OS events (mmap, munmap, cache)") \
    X(LARGE_STATS, BOOL, "0", HAK_ALL_VARIANTS, "", "", \
      "print the LARGE_STATS group: blocks above 32 KiB or over-aligned (own region each)") \
    X(LOCK_STATS, BOOL, "0", HAK_ALL_VARIANTS, "", "", \
      "print the LOCK_STATS group: per lock, waits for another thread's hold (and takes)") \
    X(HEAP_STATS, BOOL, "0", HAK_HOT_VARIANTS, "", "", \
      "print the HEAP_STATS group: per-class fast/slow allocations (fast: compiled=0)") \
    X(FRONT_CLASS, BOOL, "0", HAK_HOT_VARIANTS, "", "", \
      "print the FRONT_CLASS group: per-class alloc/free/remote_free (fast: compiled=0)") \
    X(TINY_HEAP_STATS, BOOL, "0", HAK_HOT_VARIANTS, "", "", \
      "print the TINY_HEAP_STATS group: engagement of the TinyHeap path (fast: compiled=0)") \
    X(HOTHEAP_V2_STATS, BOOL, "0", HAK_HOT_VARIANTS, "", "", \
      "print the HOTHEAP_V2_STATS group: engagement of the HotHeap v2 path (fast: compiled=0)") \
    X(SMALL_HEAP_V3_STATS, BOOL, "0", HAK_HOT_VARIANTS, "", "", \
      "print the SMALL_HEAP_V3_STATS group: engagement of the SmallObject v3 path (fast: compiled=0)") \
    X(SS_CACHE_SIZE, SIZE, "32M", HAK_ALL_VARIANTS, "", "SS_OS_STATS.cache_hit,SS_OS_STATS.cache_release", \
      "speed-first policy: bytes of empty 2 MiB superslabs kept mapped (and resident) for reuse") \
    X(SS_MEM_LEAN, BOOL, "0", HAK_ALL_VARIANTS, "", "SS_OS_STATS.madvise,SS_OS_STATS.slot_purge_kb,SS_OS_STATS.cache_release,LARGE_STATS.cache_put,SS_OS_STATS.alloc", \
      "lean memory policy (BALANCED): keep at most SS_MEM_LEAN_TARGET_MB of empty superslabs; " \
      "no free page slot kept past the purge delay; idle medium blocks purged") \
    X(SS_MEM_LEAN_TARGET_MB, INT, "8", HAK_ALL_VARIANTS, "", "SS_OS_STATS.madvise,SS_OS_STATS.cache_release", \
      "lean policy: MiB of empty superslabs kept mapped; the rest is unmapped at once") \
    X(SS_MEM_LEAN_DECOMMIT, BOOL, "1", HAK_ALL_VARIANTS, "", "SS_OS_STATS.madvise", \
      "lean policy: madvise(DONTNEED) kept empty superslabs, so they cost no resident memory") \
    X(TINY_HEAP_PROFILE, ENUM, "C7_SAFE", HAK_ALL_VARIANTS, "LEGACY|C7_SAFE", "TINY_HEAP_STATS.route_hits", \
      "TinyHeap routing: LEGACY = no class, C7_SAFE = class 7 (513-1024 B) on TinyHeap") \
    X(TINY_HEAP_CLASSES, INT, "-1", HAK_ALL_VARIANTS, "", "TINY_HEAP_STATS.route_hits", \
      "TinyHeap class mask override (bit i = class Ci, C0..C7); -1 = the profile's mask") \
    X(TINY_HOTHEAP_V2, BOOL, "0", HAK_ALL_VARIANTS, "", "HOTHEAP_V2_STATS.route_hits", \
      "route TINY_HOTHEAP_CLASSES to HotHeap v2 (partial list + max_partial empty pages kept)") \
    X(TINY_HOTHEAP_CLASSES, INT, "0x80", HAK_ALL_VARIANTS, "", "HOTHEAP_V2_STATS.route_hits", \
      "HotHeap v2 class mask (bits as SMALL_HEAP_V3_CLASSES; mid groups up to M4 = 32 KiB), used when TINY_HOTHEAP_V2=1") \
    X(SMALL_HEAP_V3_ENABLED, BOOL, "1", HAK_ALL_VARIANTS, "", "SMALL_HEAP_V3_STATS.route_hits", \
      "route SMALL_HEAP_V3_CLASSES to SmallObject v3 (pages sized per class, classes up to 256 KiB)") \
    X(SMALL_HEAP_V3_CLASSES, INT, "0xff7f", HAK_ALL_VARIANTS, "", "SMALL_HEAP_V3_STATS.route_hits", \
      "SmallObject v3 class mask (bits 0-7 = tiny groups C0..C7, bits 8-15 = mid groups M0..M7: (1,2] .. (128,256] KiB); default 0xff7f: up to 256 KiB but C7, which TinyHeap keeps (C7_SAFE); 0x1f7f stops at 32 KiB (larger blocks: large.c)")
// clang-format on

typedef enum {
#define HAK_OPTION_ENUM(id, type, def, variants, values, counters, desc) HAK_OPT_##id,
    HAK_OPTIONS(HAK_OPTION_ENUM)
#undef HAK_OPTION_ENUM
        HAK_OPTION_COUNT
} hak_option_id;

typedef enum {
    HAK_OPT_TYPE_BOOL,
    HAK_OPT_TYPE_INT,
    HAK_OPT_TYPE_SIZE,
    HAK_OPT_TYPE_ENUM,
    HAK_OPT_TYPE_STR
} hak_option_type;

// Values of HAKMEM_TINY_HEAP_PROFILE (index into its "values" list).
enum { HAK_TINY_PROFILE_LEGACY = 0, HAK_TINY_PROFILE_C7_SAFE = 1 };

// Numeric value of every option (BOOL 0/1, ENUM index, SIZE bytes); STR options: 1 if set.
extern long hak_option[HAK_OPTION_COUNT];
// STR options' text ("" when unset).
const char *hak_option_text(hak_option_id id);

void hak_options_init(void);
void hak_options_print_values(void);
// The table for tools: human-readable, or a JSON list of objects
// {name, type, default, description, variants[], counters[], values[] (enum only)}.
void hak_options_print_table(int fd, int json);

#endif
