/* Stands in for a defence that draws random numbers (a randomised free-slot choice, a
 * random canary): a block freed twice, then the process stops itself on a coin toss from
 * getrandom(2), as such a defence catches a misuse in some runs and not in others. */
#include <sys/random.h>

#include "standin_probe.h"

int main(void) {
    unsigned char coin = 0;
    char *p = opaque_malloc(ALLOCATION_SIZE);
    opaque_free(p);
    if (getrandom(&coin, 1, 0) == 1 && (coin & 1)) {
        fputs("caught_by_chance: the coin stopped it\n", stderr);
        abort();
    }
    report_not_caught();
    return 0;
}
