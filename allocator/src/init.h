// The thread layer: process and thread start and exit (init.c), the stats at exit (report.c).
#ifndef HAK_INIT_H
#define HAK_INIT_H

#include "front.h"

// --- init.c
hak_heap *hak_thread_init(void);
// Set when this thread's heap was destroyed at its exit (its pthread key's destructor). Frees
// that come later (other keys' destructors, glibc's own teardown) go straight to their pages
// instead of creating a heap that no destructor would destroy (heap.c: hak_heap_free_remote).
extern __thread uint8_t hak_thread_exited __attribute__((tls_model("initial-exec")));
void hak_process_init(void);

#endif
