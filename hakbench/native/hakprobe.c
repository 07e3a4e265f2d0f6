/* hakprobe.so: preloaded into a command workload's program ahead of the allocator, it
 * proves the preload took effect the way the harness's malloc_impl= line does: its
 * constructor asks the dynamic linker which object defines the `malloc` the program calls
 * and writes that path to the file named by $HAKPROBE_OUT.
 *
 * dlsym(RTLD_NEXT) from here searches every object after this one in the global scope:
 * the allocator, then the program's libraries in load order, so the first definition found
 * is the one the program's calls bind to. (dlsym(RTLD_DEFAULT) would answer the program
 * itself for a non-PIE executable that takes malloc's address: its canonical PLT entry,
 * not a definition. /usr/bin/python3 is one.) A program that defines malloc in its own
 * executable is not seen here; such a program ignores LD_PRELOAD'ed allocators anyway.
 *
 * The file is created with O_EXCL, so only the first process of a tree (the program
 * hakbench started, not gcc's cc1) records it. Nothing else is done: no allocation, no
 * symbol interposed.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

__attribute__((constructor)) static void hakprobe_record(void) {
    const char *out = getenv("HAKPROBE_OUT");
    if (!out) return;
    void *fn = dlsym(RTLD_NEXT, "malloc");
    Dl_info info;
    const char *where = (fn && dladdr(fn, &info) && info.dli_fname) ? info.dli_fname : "?";
    int fd = open(out, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) return;
    ssize_t n = write(fd, where, strlen(where));
    (void)n;
    close(fd);
}
