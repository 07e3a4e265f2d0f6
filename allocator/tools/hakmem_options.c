// hakmem-options [--json]: prints libhakmem's options table (the rows of options.h), so tools
// can validate HAKMEM_* profiles against it and, from each row's counters, tell whether a
// switch acted in a run (hakbench ab's engagement check).
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "options.h"

int main(int argc, char **argv) {
    int json = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) {
            json = 1;
        } else {
            fprintf(stderr, "usage: %s [--json]\n", argv[0]);
            return 2;
        }
    }
    hak_options_print_table(STDOUT_FILENO, json);
    return 0;
}
