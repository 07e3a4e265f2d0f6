// The error path, at the bottom of the layers so that every layer may report: one line on
// stderr through write(2) (never malloc: the allocator may be broken when it speaks), and the
// fatal reports of misuse and of failed assertions, which abort.
#ifndef HAK_ERROR_H
#define HAK_ERROR_H

// One message on stderr, at most 511 bytes, formatted as printf does.
void hak_message(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

// "hakmem: FUNC(): WHAT P" on stderr, then abort(): a bad free, a corrupted free list, ...
__attribute__((noreturn)) void hak_fatal_pointer(const char *func, const char *what, const void *p);

#ifdef HAK_DEBUG
void hak_assert_fail(const char *expr, const char *file, int line) __attribute__((noreturn));
#define hak_assert(e) ((e) ? (void)0 : hak_assert_fail(#e, __FILE__, __LINE__))
#else
#define hak_assert(e) ((void)0)
#endif

#endif
