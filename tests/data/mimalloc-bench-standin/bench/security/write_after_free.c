/* A freed block written over in full, then one more malloc of its size: an allocator that
 * neither checks freed memory nor keeps it unmapped lets this pass. */
#include <string.h>

#include "standin_probe.h"

int main(void) {
    char *p = opaque_malloc(ALLOCATION_SIZE);
    opaque_free(p);
    memset(p, 'A', ALLOCATION_SIZE);
    report_not_caught();
    return 0;
}
