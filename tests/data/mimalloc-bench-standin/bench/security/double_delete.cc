// A C++ array deleted twice (operator delete[] reaches the allocator's free).
#include "standin_probe.h"

int main() {
    char *p = new char[ALLOCATION_SIZE];
    void *volatile keep = p;
    delete[] static_cast<char *>(keep);
    delete[] static_cast<char *>(keep);
    report_not_caught();
    return 0;
}
