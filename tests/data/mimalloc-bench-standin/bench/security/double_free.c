/* The same block freed twice in a row. */
#include "standin_probe.h"

int main(void) {
    char *p = opaque_malloc(ALLOCATION_SIZE);
    opaque_free(p);
    opaque_free(p);
    report_not_caught();
    return 0;
}
