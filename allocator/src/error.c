// The error path (error.h): every layer reports through here, and nothing here calls back up.
#include "error.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

void hak_message(const char *fmt, ...) {
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    size_t len = (size_t)n < sizeof line ? (size_t)n : sizeof line - 1;
    ssize_t written = write(STDERR_FILENO, line, len);
    (void)written;
}

__attribute__((noreturn, cold)) void hak_fatal_pointer(const char *func, const char *what,
                                                       const void *p) {
    hak_message("hakmem: %s(): %s %p\n", func, what, p);
    abort();
}

#ifdef HAK_DEBUG
void hak_assert_fail(const char *expr, const char *file, int line) {
    hak_message("hakmem: assertion failed: %s (%s:%d)\n", expr, file, line);
    abort();
}
#endif
