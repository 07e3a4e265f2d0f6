// test_link_tamper: the secure build's free-list link encoding (allocator/src/types.h,
// hak_link_encode / hak_link_decode) detects a change of any byte of a stored link with
// probability at least 1 - 2^-16. The encoding is compiled in here as the secure build has it,
// against a superslab-shaped region with random secrets; the allocator under test does not
// matter (the same check runs under every variant).
//   every single-byte change: for each of TRIALS random (holder, link, secret), each of the 8
//                             bytes of the stored word set to each of its 255 other values
//   random words:             a stored word replaced by a random one (a forged link)
// Each must pass the tag check at most 2^-16 of the time (the tag has 17 bits: 2^-17 expected).
#define HAK_SECURE 1
#include "api.h"
#include "testhelper.h"

#include <sys/mman.h>

enum { TRIALS = 2048, FORGED = 1 << 21 };

int main(void) {
    printf("allocator: %s (the encoding is compiled in)\n", allocator_name());
    free(malloc(64)); // (the allocator under test runs, and prints its stats, as in every test)
    char *raw =
        mmap(NULL, 2 * HAK_SS_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (!CHECK(raw != MAP_FAILED)) return test_summary();
    hak_superslab *ss = (hak_superslab *)(((uintptr_t)raw + HAK_SS_MASK) & ~HAK_SS_MASK);
    uint64_t random_state = 2026;
    uint64_t changes = 0, undetected = 0, wrong_decode = 0;
    for (int trial = 0; trial < TRIALS; trial++) {
        for (unsigned i = 0; i < HAK_PAGES_PER_SS; i++)
            ss->secrets[i] = test_random_next(&random_state);
        uint64_t r = test_random_next(&random_state);
        // A holder past the header, 16-aligned; its link NULL or another block of the region.
        uintptr_t offset = HAK_SS_HEADER_SIZE + (r % (HAK_SS_SIZE - 2 * HAK_SS_HEADER_SIZE));
        hak_block *holder = (hak_block *)((char *)ss + (offset & ~(uintptr_t)15));
        uintptr_t next =
            trial % 8 == 0 ? 0 : (uintptr_t)ss + HAK_SS_HEADER_SIZE + (r >> 24) % 65536 * 16;
        uintptr_t stored = hak_link_encode(holder, next);
        hak_block *decoded;
        holder->next = (hak_block *)stored;
        wrong_decode += !hak_link_decode(holder, &decoded) || (uintptr_t)decoded != next;
        for (int byte = 0; byte < 8; byte++)
            for (unsigned value = 0; value < 256; value++) {
                uintptr_t shift = (uintptr_t)byte * 8;
                if (value == (stored >> shift & 0xff)) continue;
                holder->next = (hak_block *)((stored & ~((uintptr_t)0xff << shift)) |
                                             (uintptr_t)value << shift);
                changes++;
                undetected += hak_link_decode(holder, &decoded);
            }
    }
    uint64_t forged_passed = 0;
    hak_block *holder = (hak_block *)((char *)ss + HAK_SS_HEADER_SIZE + 4096);
    for (int i = 0; i < FORGED; i++) {
        holder->next = (hak_block *)test_random_next(&random_state);
        hak_block *decoded;
        forged_passed += hak_link_decode(holder, &decoded);
    }
    printf("single-byte changes: %llu, undetected %llu (%.2e; bound 2^-16 = %.2e)\n",
           (unsigned long long)changes, (unsigned long long)undetected,
           (double)undetected / (double)changes, 1.0 / 65536);
    printf("random words: %d, passed %llu (%.2e)\n", FORGED, (unsigned long long)forged_passed,
           (double)forged_passed / FORGED);
    CHECK(wrong_decode == 0);
    CHECK(undetected * 65536 <= changes);
    CHECK(forged_passed * 65536 <= (uint64_t)FORGED);
    munmap(raw, 2 * HAK_SS_SIZE);
    return test_summary();
}
