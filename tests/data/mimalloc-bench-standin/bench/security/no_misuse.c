/* No misuse at all: a block allocated, written, freed. Every working allocator lets it
 * pass (prints NOT_CAUGHT); only one that stops correct programs "catches" it. */
#include <string.h>

#include "standin_probe.h"

int main(void) {
    char *p = opaque_malloc(ALLOCATION_SIZE);
    memset(p, 'A', ALLOCATION_SIZE);
    opaque_free(p);
    report_not_caught();
    return 0;
}
