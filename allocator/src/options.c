// Options: parse the table in options.h from `environ` (preload-safe: no getenv, no malloc),
// report unknown HAKMEM_* variables once with the closest real name, print values/table.
#include "options.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "types.h"

extern char **environ;

typedef struct {
    const char *name; // without the HAKMEM_ prefix
    hak_option_type type;
    const char *default_text;
    const char *variants;
    const char *values;
    const char *counters;
    const char *description;
} hak_option_desc;

static const hak_option_desc option_table[HAK_OPTION_COUNT] = {
#define HAK_OPTION_ROW(id, type, def, variants, values, counters, desc)                            \
    {#id, HAK_OPT_TYPE_##type, def, variants, values, counters, desc},
    HAK_OPTIONS(HAK_OPTION_ROW)
#undef HAK_OPTION_ROW
};

static const char *const type_names[] = {"bool", "int", "size", "enum", "str"};

#define HAK_OPTION_TEXT_MAX 256
long hak_option[HAK_OPTION_COUNT];
static char option_text[HAK_OPTION_COUNT][HAK_OPTION_TEXT_MAX];

const char *hak_option_text(hak_option_id id) {
    return option_text[id];
}

// Matches `text` against the enum's "A|B|C" list, case-insensitive; returns the index or -1.
static long enum_index(const char *values, const char *text) {
    long index = 0;
    for (const char *v = values; *v;) {
        size_t len = strcspn(v, "|");
        if (strlen(text) == len && strncasecmp(v, text, len) == 0) return index;
        v += len + (v[len] == '|');
        index++;
    }
    return -1;
}

// Parses `text` as the row's type; returns 0 and sets *out, or -1 if it does not parse.
static int parse_value(const hak_option_desc *d, const char *text, long *out) {
    static const char *const yes[] = {"1", "on", "yes", "true"};
    static const char *const no[] = {"0", "off", "no", "false"};
    char *end;
    switch (d->type) {
    case HAK_OPT_TYPE_BOOL:
        for (int i = 0; i < 4; i++) {
            if (strcasecmp(text, yes[i]) == 0) return *out = 1, 0;
            if (strcasecmp(text, no[i]) == 0) return *out = 0, 0;
        }
        return -1;
    case HAK_OPT_TYPE_INT:
        *out = strtol(text, &end, 0);
        return (end == text || *end) ? -1 : 0;
    case HAK_OPT_TYPE_SIZE: {
        long value = strtol(text, &end, 10);
        if (end == text || value < 0) return -1;
        int shift = 0;
        switch (*end) {
        case 'k':
        case 'K':
            shift = 10;
            end++;
            break;
        case 'm':
        case 'M':
            shift = 20;
            end++;
            break;
        case 'g':
        case 'G':
            shift = 30;
            end++;
            break;
        default:
            break;
        }
        if (shift && (*end == 'i' || *end == 'I')) end++;
        if (*end == 'b' || *end == 'B') end++;
        if (*end || value > (LONG_MAX >> shift)) return -1;
        *out = value << shift;
        return 0;
    }
    case HAK_OPT_TYPE_ENUM:
        *out = enum_index(d->values, text);
        return *out < 0 ? -1 : 0;
    case HAK_OPT_TYPE_STR:
        *out = text[0] != 0;
        return 0;
    }
    return -1;
}

static const char *env_value(const char *name) {
    size_t len = strlen(name);
    for (char **e = environ; e && *e; e++) {
        if (strncmp(*e, "HAKMEM_", 7) == 0 && strncmp(*e + 7, name, len) == 0 &&
            (*e)[7 + len] == '=')
            return *e + 7 + len + 1;
    }
    return NULL;
}

static size_t edit_distance(const char *a, size_t la, const char *b) {
    size_t lb = strlen(b), row[64];
    if (la >= 63 || lb >= 63) return (size_t)-1;
    for (size_t j = 0; j <= lb; j++)
        row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diagonal = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t cost = diagonal + (a[i - 1] != b[j - 1]);
            size_t best = up + 1 < row[j - 1] + 1 ? up + 1 : row[j - 1] + 1;
            row[j] = cost < best ? cost : best;
            diagonal = up;
        }
    }
    return row[lb];
}

// HAKMEM_BENCH_* belong to the harness programs, not to the allocator.
static void report_unknown_variables(void) {
    for (char **e = environ; e && *e; e++) {
        if (strncmp(*e, "HAKMEM_", 7) != 0 || strncmp(*e, "HAKMEM_BENCH_", 13) == 0) continue;
        const char *name = *e + 7;
        size_t len = strcspn(name, "=");
        int known = 0;
        for (int i = 0; i < HAK_OPTION_COUNT && !known; i++)
            known = strlen(option_table[i].name) == len &&
                    strncmp(option_table[i].name, name, len) == 0;
        if (known) continue;
        // Only an unknown name pays for the edit distances (one against every row of the
        // table), which every variable set would otherwise add to the process's start-up
        // (measured: docs/notebook/2026-12-07-source-comments.md#optionsc-unknown-names).
        size_t best = (size_t)-1;
        const char *closest = option_table[0].name;
        for (int i = 0; i < HAK_OPTION_COUNT; i++) {
            size_t distance = edit_distance(name, len, option_table[i].name);
            if (distance < best) best = distance, closest = option_table[i].name;
        }
        hak_message("hakmem: unknown option HAKMEM_%.*s in the environment "
                    "(closest: HAKMEM_%s)\n",
                    (int)len, name, closest);
    }
}

void hak_options_init(void) {
    for (int i = 0; i < HAK_OPTION_COUNT; i++) {
        const hak_option_desc *d = &option_table[i];
        const char *text = env_value(d->name);
        long value = 0;
        parse_value(d, d->default_text, &value);
        if (text && parse_value(d, text, &value) != 0) {
            hak_message("hakmem: HAKMEM_%s=%s is not a valid %s%s%s; using the default %s\n",
                        d->name, text, type_names[d->type], d->values[0] ? " of " : "", d->values,
                        d->default_text);
            text = NULL;
            parse_value(d, d->default_text, &value);
        }
        hak_option[i] = value;
        if (d->type == HAK_OPT_TYPE_STR) {
            const char *s = text ? text : d->default_text;
            size_t len = strlen(s);
            if (len >= HAK_OPTION_TEXT_MAX) len = HAK_OPTION_TEXT_MAX - 1;
            memcpy(option_text[i], s, len);
            option_text[i][len] = 0;
        }
    }
    report_unknown_variables();
}

// Writes the value of option i as text (the enum's name, not its index).
static void format_value(int i, long value, char *out, size_t size) {
    const hak_option_desc *d = &option_table[i];
    if (d->type == HAK_OPT_TYPE_ENUM) {
        const char *v = d->values;
        for (long k = 0; k < value && *v; k++)
            v += strcspn(v, "|") + 1;
        snprintf(out, size, "%.*s", (int)strcspn(v, "|"), v);
    } else if (d->type == HAK_OPT_TYPE_STR) {
        snprintf(out, size, "%s", option_text[i]);
    } else {
        snprintf(out, size, "%ld", value);
    }
}

void hak_options_print_values(void) {
    char text[HAK_OPTION_TEXT_MAX];
    for (int i = 0; i < HAK_OPTION_COUNT; i++) {
        format_value(i, hak_option[i], text, sizeof text);
        hak_message("hakmem: option HAKMEM_%s = %s\n", option_table[i].name, text);
    }
}

static void write_all(int fd, const char *s) {
    for (size_t len = strlen(s); len > 0;) {
        ssize_t n = write(fd, s, len);
        if (n <= 0) return;
        s += n, len -= (size_t)n;
    }
}

// Writes a JSON array of the comma- or bar-separated items of `list`.
static void write_json_list(int fd, const char *list, const char *separators) {
    char item[128];
    write_all(fd, "[");
    for (const char *s = list; *s;) {
        size_t len = strcspn(s, separators);
        snprintf(item, sizeof item, "%s\"%.*s\"", s == list ? "" : ", ", (int)len, s);
        write_all(fd, item);
        s += len + (s[len] != 0);
    }
    write_all(fd, "]");
}

void hak_options_print_table(int fd, int json) {
    char line[512], value[HAK_OPTION_TEXT_MAX];
    if (json) write_all(fd, "[\n");
    for (int i = 0; i < HAK_OPTION_COUNT; i++) {
        const hak_option_desc *d = &option_table[i];
        long def = 0;
        parse_value(d, d->default_text, &def);
        if (!json) {
            format_value(i, def, value, sizeof value);
            snprintf(line, sizeof line, "HAKMEM_%-22s %-5s default=%-8s [%s] %s%s%s\n", d->name,
                     type_names[d->type], d->type == HAK_OPT_TYPE_STR ? "\"\"" : value, d->variants,
                     d->description, d->values[0] ? " values=" : "", d->values);
            write_all(fd, line);
            continue;
        }
        if (d->type == HAK_OPT_TYPE_BOOL)
            snprintf(value, sizeof value, "%s", def ? "true" : "false");
        else if (d->type == HAK_OPT_TYPE_INT || d->type == HAK_OPT_TYPE_SIZE)
            snprintf(value, sizeof value, "%ld", def);
        else
            snprintf(value, sizeof value, "\"%s\"", d->default_text);
        snprintf(line, sizeof line,
                 "  {\"name\": \"HAKMEM_%s\", \"type\": \"%s\", \"default\": %s, "
                 "\"description\": \"%s\", \"variants\": ",
                 d->name, type_names[d->type], value, d->description);
        write_all(fd, line);
        write_json_list(fd, d->variants, ",");
        write_all(fd, ", \"counters\": ");
        write_json_list(fd, d->counters, ",");
        if (d->type == HAK_OPT_TYPE_ENUM) {
            write_all(fd, ", \"values\": ");
            write_json_list(fd, d->values, "|");
        }
        write_all(fd, i + 1 < HAK_OPTION_COUNT ? "},\n" : "}\n");
    }
    if (json) write_all(fd, "]\n");
}
