// The options table: every HAKMEM_* switch is one row of HAK_OPTIONS. The environment is read
// once (hak_options_init, from `environ`, no getenv and no malloc) and the values copied into
// hak_option[]; nothing on a hot path reads them.
//
// Row: X(ID, type, default, variants, enum values, description)
//   env name   "HAKMEM_" #ID (generated, so the name and the enum cannot drift apart)
//   type       BOOL (1/0/on/off/yes/no/true/false), INT, SIZE (K/M/G suffix), ENUM, STR
//   default    text, parsed by the same parser as the environment
//   variants   which builds honour it ("fast,stats,debug" = every build)
//   enum values "A|B|C" for ENUM rows (value = index), else ""
#ifndef HAK_OPTIONS_H
#define HAK_OPTIONS_H

#define HAK_ALL_VARIANTS "fast,stats,debug"
#define HAK_HOT_VARIANTS "stats,debug"

// clang-format off
#define HAK_OPTIONS(X) \
    X(VERBOSE, BOOL, "0", HAK_ALL_VARIANTS, "", \
      "print every option's value and the class->path table to stderr at start") \
    X(STATS, BOOL, "0", HAK_ALL_VARIANTS, "", \
      "print every stats group at exit (one [GROUP] key=value line each)") \
    X(STATS_FILE, STR, "", HAK_ALL_VARIANTS, "", \
      "append the stats lines to this file instead of stderr") \
    X(SS_OS_STATS, BOOL, "0", HAK_ALL_VARIANTS, "", \
      "print the SS_OS_STATS group: superslab and OS events (mmap, munmap, cache)") \
    X(LARGE_STATS, BOOL, "0", HAK_ALL_VARIANTS, "", \
      "print the LARGE_STATS group: blocks above 32 KiB or over-aligned (own region each)") \
    X(HEAP_STATS, BOOL, "0", HAK_HOT_VARIANTS, "", \
      "print the HEAP_STATS group: per-class fast/slow allocations (fast: compiled=0)") \
    X(FRONT_CLASS, BOOL, "0", HAK_HOT_VARIANTS, "", \
      "print the FRONT_CLASS group: per-class alloc/free/remote_free (fast: compiled=0)") \
    X(SS_CACHE_SIZE, SIZE, "32M", HAK_ALL_VARIANTS, "", \
      "bytes of empty 2 MiB superslabs kept mapped for reuse instead of munmap") \
    X(TINY_HEAP_PROFILE, ENUM, "LEGACY", HAK_ALL_VARIANTS, "LEGACY", \
      "which front path serves the tiny classes C0..C7 (route table, latched per thread)")
// clang-format on

typedef enum {
#define HAK_OPTION_ENUM(id, type, def, variants, values, desc) HAK_OPT_##id,
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
enum { HAK_TINY_PROFILE_LEGACY = 0 };

// Numeric value of every option (BOOL 0/1, ENUM index, SIZE bytes); STR options: 1 if set.
extern long hak_option[HAK_OPTION_COUNT];
// STR options' text ("" when unset).
const char *hak_option_text(hak_option_id id);

void hak_options_init(void);
void hak_options_print_values(void);
// The table for tools: human-readable, or a JSON list of objects
// {name, type, default, description, variants[], values[] (enum only)}.
void hak_options_print_table(int fd, int json);

#endif
