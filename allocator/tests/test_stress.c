// test_stress [threads rounds scale]: multi-threaded stress with cross-thread frees, in the
// shape of mimalloc's test/test-stress.c (not a benchmark: nothing here is timed).
//
// - Every block starts with a header word (its length and a random cookie) and is filled
//   with a pattern derived from that header, not from its address, so it can be checked by
//   any thread after it has moved; the pattern is checked before every free and realloc.
// - Workers swap their blocks with the slots of a shared transfer array by atomic exchange,
//   so most blocks are freed (or reallocated) by a thread other than the one that
//   allocated them.
// - Workers are created and joined in rounds. Half of the transfer slots survive a round,
//   so their blocks outlive the thread that allocated them and are freed by later threads
//   or by main.
// - Blocks from calloc are checked to be zero; blocks grow and shrink with realloc; each
//   worker's own table of blocks grows with realloc too.
#include "testhelper.h"

#include <pthread.h>

#define TRANSFER_SLOTS 1000
#define MAX_THREADS    64

static size_t thread_count = 8;
static int round_count = 10;
static int scale = 20;

static _Atomic(uint64_t *) transfer[TRANSFER_SLOTS];

// Word 0 of every block: its length in words (low 24 bits) and a random cookie (the rest),
// so even an 8-byte block carries a checkable pattern.
#define LENGTH_BITS 24
#define LENGTH_MASK ((UINT64_C(1) << LENGTH_BITS) - 1)

static uint64_t pattern_word(uint64_t header, size_t index) {
    return (header + index) * 0x9e3779b97f4a7c15ULL ^ (header >> 7);
}

// Largest block: 128 words x 32 x 10 x 10 (3.2 MiB), see random_block_words.
static const size_t max_block_words = 128 * 32 * 10 * 10;

static void block_fill(uint64_t *block, size_t words, uint64_t cookie) {
    block[0] = cookie << LENGTH_BITS | words;
    for (size_t i = 1; i < words; i++)
        block[i] = pattern_word(block[0], i);
}

static uint64_t *block_new(size_t words, uint64_t *random_state) {
    bool zeroed = test_random_next(random_state) % 4 == 0;
    uint64_t *block = zeroed ? calloc(words, sizeof(uint64_t)) : malloc(words * sizeof(uint64_t));
    if (!CHECK(block != NULL)) return NULL;
    if (zeroed) {
        bool all_zero = true;
        for (size_t i = 0; i < words; i++)
            all_zero &= block[i] == 0;
        CHECK(all_zero);
    }
    block_fill(block, words, test_random_next(random_state));
    return block;
}

// The block's pattern intact, judged only from its own contents.
static bool block_is_intact(const uint64_t *block) {
    size_t words = block[0] & LENGTH_MASK;
    if (words < 1 || words > max_block_words) return false;
    for (size_t i = 1; i < words; i++)
        if (block[i] != pattern_word(block[0], i)) return false;
    return true;
}

static void block_free(uint64_t *block) {
    if (!block) return;
    CHECK(block_is_intact(block));
    free(block);
}

// realloc to a new length: the old pattern must survive on the common prefix; the block is
// then refilled for its new length.
static uint64_t *block_resize(uint64_t *block, size_t words) {
    CHECK(block_is_intact(block));
    uint64_t old_header = block[0];
    size_t old_words = old_header & LENGTH_MASK;
    uint64_t *resized = realloc(block, words * sizeof(uint64_t));
    if (!CHECK(resized != NULL)) return block;
    size_t kept = old_words < words ? old_words : words;
    bool prefix_kept = resized[0] == old_header;
    for (size_t i = 1; i < kept; i++)
        prefix_kept &= resized[i] == pattern_word(old_header, i);
    CHECK(prefix_kept);
    block_fill(resized, words, old_header >> LENGTH_BITS);
    return resized;
}

// 8 B .. 1 KiB (every tiny class C0..C7) for most blocks; 1 % x32 (the mid pool), 0.1 %
// x320 and, at scale >= 20, 0.01 % x3200 (the large path), in the spirit of mimalloc's test.
static size_t random_block_words(uint64_t *random_state) {
    uint64_t r = test_random_next(random_state);
    size_t words = 1 + (size_t)(r % 128);
    uint64_t tier = (r >> 8) % 10000;
    if (tier < 100) words *= 32;
    if (tier < 10) words *= 10;
    if (tier < 1 && scale >= 20) words *= 10;
    return words;
}

struct worker {
    pthread_t thread;
    unsigned id;
    int round;
};

static void *worker_main(void *arg) {
    struct worker *self = arg;
    uint64_t random_state = ((uint64_t)self->round << 32) ^ (self->id * 0x1234567ULL + 1);
    // Unequal loads, so threads finish (and exit with live blocks out) at different times.
    size_t operations = (size_t)100 * (size_t)scale * (self->id % 8 + 1);
    size_t capacity = 16;
    size_t used = 0;
    uint64_t **blocks = calloc(capacity, sizeof *blocks);
    if (!CHECK(blocks != NULL)) return NULL;

    for (size_t op = 0; op < operations; op++) {
        uint64_t r = test_random_next(&random_state) % 100;
        if (r < 50 || used == 0) {
            if (used == capacity) {
                capacity *= 2;
                uint64_t **grown = realloc(blocks, capacity * sizeof *blocks);
                if (!CHECK(grown != NULL)) break;
                blocks = grown;
            }
            blocks[used++] = block_new(random_block_words(&random_state), &random_state);
        } else if (r < 70) {
            size_t victim = test_random_next(&random_state) % used;
            block_free(blocks[victim]);
            blocks[victim] = blocks[--used];
        } else if (r < 90) {
            size_t mine = test_random_next(&random_state) % used;
            size_t slot = test_random_next(&random_state) % TRANSFER_SLOTS;
            blocks[mine] = atomic_exchange(&transfer[slot], blocks[mine]);
        } else {
            size_t mine = test_random_next(&random_state) % used;
            if (blocks[mine])
                blocks[mine] = block_resize(blocks[mine], random_block_words(&random_state));
        }
    }
    for (size_t i = 0; i < used; i++)
        block_free(blocks[i]);
    free(blocks);
    return NULL;
}

static void run_round(int round) {
    struct worker workers[MAX_THREADS];
    for (size_t t = 0; t < thread_count; t++) {
        workers[t].id = (unsigned)t;
        workers[t].round = round;
        CHECK(pthread_create(&workers[t].thread, NULL, worker_main, &workers[t]) == 0);
    }
    for (size_t t = 0; t < thread_count; t++)
        pthread_join(workers[t].thread, NULL);
    // Main frees every other slot now; the rest survive into the next round. Their
    // allocating threads are gone, so these frees go back to an abandoned owner.
    bool last_round = round == round_count - 1;
    for (size_t slot = 0; slot < TRANSFER_SLOTS; slot++)
        if (last_round || slot % 2 == (size_t)round % 2)
            block_free(atomic_exchange(&transfer[slot], NULL));
}

int main(int argc, char **argv) {
    if (argc > 1) thread_count = (size_t)atoi(argv[1]);
    if (argc > 2) round_count = atoi(argv[2]);
    if (argc > 3) scale = atoi(argv[3]);
    if (thread_count < 1 || thread_count > MAX_THREADS || round_count < 1 || scale < 1) {
        fprintf(stderr, "usage: test_stress [threads 1..%d] [rounds] [scale]\n", MAX_THREADS);
        return 2;
    }
    printf("allocator: %s threads=%zu rounds=%d scale=%d\n", allocator_name(), thread_count,
           round_count, scale);
    for (int round = 0; round < round_count; round++)
        run_round(round);
    return test_summary();
}
