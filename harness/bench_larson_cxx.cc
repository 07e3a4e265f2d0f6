/* bench_larson_cxx: bench_larson's server simulation with C++ allocation (issue #30): the
 * chains of thread lifetimes of Larson and Krishnan ("Memory Allocation for Long-Running
 * Server Applications", ISMM 1998), each thread replacing random objects in its chain's
 * --slots slots --steps times and then handing the slots to its successor, but every object
 * made with `new` and destroyed with `delete`, as a C++ server does:
 *   - 40 %: char arrays of a random size in [--min, --max], `new char[n]` / `delete[]`;
 *   - 35 %: objects of one of six class types of fixed sizes (16 B to 512 B), `new T` /
 *     `delete p` through the complete type, so that the compiler calls the sized operator
 *     delete(void *, size_t) (-fsized-deallocation);
 *   - 15 %: objects of four classes (24 B to 520 B) derived from one polymorphic base,
 *     deleted through a base pointer: the virtual destructor passes the dynamic size;
 *   -  5 %: alignas(64) objects: operator new(size_t, align_val_t) and the aligned delete;
 *   -  5 %: `new (std::nothrow)` objects (deleted as usual).
 * Every object carries a tag in its first and last byte, checked before it is deleted, often
 * by another thread than the one that made it (the successor of its maker).
 *
 * Built with g++ -fsized-deallocation -fno-allocation-dce -fno-builtin: the objects escape
 * into the shared slot arrays anyway, so no new/delete pair can be elided. The op sequence of
 * a chain is fixed by the seed; the checksum is the sum over chains. Throughput counts one
 * new and one delete per step. */
#include "common.h"

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <pthread.h>

static const char usage[] =
    "usage: bench_larson_cxx [--threads N] [--generations N] [--steps N] [--slots N]\n"
    "                        [--min B] [--max B] [--seed N]\n"
    "  --threads N      chains of threads running at once (default 4)\n"
    "  --generations N  threads per chain, one after the other (default 50; 0 measures\n"
    "                   start-up only)\n"
    "  --steps N        delete+new steps per thread lifetime (default 50000)\n"
    "  --slots N        objects each chain owns (default 1000)\n"
    "  --min/--max B    sizes of the char arrays, uniform in [min,max] (default 8..1000)\n"
    "  --seed N         PRNG seed (default 1)\n";

namespace {

/* The tag goes into the first and the last byte of every object. */
template <size_t N> struct Fixed { unsigned char bytes[N]; };

struct Base {
    virtual ~Base() {}
    virtual unsigned char *bytes() = 0;
    virtual size_t length() const = 0;
};

template <size_t N> struct Derived final : Base {
    unsigned char data[N];
    ~Derived() override {}
    unsigned char *bytes() override { return data; }
    size_t length() const override { return N; }
};

struct alignas(64) Aligned {
    unsigned char bytes[192];
};

enum Kind : uint8_t {
    ARRAY,
    FIXED_16,
    FIXED_32,
    FIXED_64,
    FIXED_128,
    FIXED_256,
    FIXED_512,
    DERIVED_24,
    DERIVED_72,
    DERIVED_200,
    DERIVED_520,
    ALIGNED,
    NOTHROW_96,
    KINDS
};

struct Slot {
    void *object;
    uint32_t length; /* bytes carrying the tag */
    Kind kind;
};

template <typename T> unsigned char *fixed_new(uint32_t *length) {
    T *object = new T;
    *length = sizeof object->bytes;
    return object->bytes;
}

template <size_t N> Base *derived_new() {
    return new Derived<N>;
}

/* Makes an object of the given kind; returns the pointer the slot keeps and, in *bytes and
 * *length, where its tag goes. */
void *make(Kind kind, uint64_t array_size, unsigned char **bytes, uint32_t *length) {
    Base *base = nullptr;
    switch (kind) {
    case ARRAY: {
        unsigned char *array = new unsigned char[array_size];
        *bytes = array;
        *length = (uint32_t)array_size;
        return array;
    }
    case FIXED_16:
        return *bytes = fixed_new<Fixed<16>>(length);
    case FIXED_32:
        return *bytes = fixed_new<Fixed<32>>(length);
    case FIXED_64:
        return *bytes = fixed_new<Fixed<64>>(length);
    case FIXED_128:
        return *bytes = fixed_new<Fixed<128>>(length);
    case FIXED_256:
        return *bytes = fixed_new<Fixed<256>>(length);
    case FIXED_512:
        return *bytes = fixed_new<Fixed<512>>(length);
    case DERIVED_24:
        base = derived_new<24>();
        break;
    case DERIVED_72:
        base = derived_new<72>();
        break;
    case DERIVED_200:
        base = derived_new<200>();
        break;
    case DERIVED_520:
        base = derived_new<520>();
        break;
    case ALIGNED: {
        Aligned *object = new Aligned;
        if ((uintptr_t)object % alignof(Aligned) != 0)
            hb_runtime_error("new Aligned returned %p, not 64-byte aligned", (void *)object);
        *bytes = object->bytes;
        *length = sizeof object->bytes;
        return object;
    }
    case NOTHROW_96: {
        Fixed<96> *object = new (std::nothrow) Fixed<96>;
        if (!object) hb_alloc_failed("operator new(nothrow)", sizeof(Fixed<96>));
        *bytes = object->bytes;
        *length = sizeof object->bytes;
        return object;
    }
    case KINDS:
        break;
    }
    if (!base) hb_runtime_error("unknown object kind %d", (int)kind);
    *bytes = base->bytes();
    *length = (uint32_t)base->length();
    return base;
}

unsigned char *bytes_of(const Slot &slot) {
    switch (slot.kind) {
    case DERIVED_24:
    case DERIVED_72:
    case DERIVED_200:
    case DERIVED_520:
        return static_cast<Base *>(slot.object)->bytes();
    default:
        return static_cast<unsigned char *>(slot.object);
    }
}

/* Deletes through the object's own type: sized delete for the class types, the virtual
 * destructor for the derived ones, delete[] for the arrays. */
void destroy(const Slot &slot) {
    void *object = slot.object;
    switch (slot.kind) {
    case ARRAY:
        delete[] static_cast<unsigned char *>(object);
        return;
    case FIXED_16:
        delete static_cast<Fixed<16> *>(object);
        return;
    case FIXED_32:
        delete static_cast<Fixed<32> *>(object);
        return;
    case FIXED_64:
        delete static_cast<Fixed<64> *>(object);
        return;
    case FIXED_128:
        delete static_cast<Fixed<128> *>(object);
        return;
    case FIXED_256:
        delete static_cast<Fixed<256> *>(object);
        return;
    case FIXED_512:
        delete static_cast<Fixed<512> *>(object);
        return;
    case DERIVED_24:
    case DERIVED_72:
    case DERIVED_200:
    case DERIVED_520:
        delete static_cast<Base *>(object);
        return;
    case ALIGNED:
        delete static_cast<Aligned *>(object);
        return;
    case NOTHROW_96:
        delete static_cast<Fixed<96> *>(object);
        return;
    case KINDS:
        break;
    }
    hb_runtime_error("unknown object kind %d", (int)slot.kind);
}

/* 40 % arrays, 35 % fixed classes, 15 % derived, 5 % aligned, 5 % nothrow. */
Kind pick_kind(hb_rng *rng) {
    uint64_t p = hb_rng_below(rng, 100);
    if (p < 40) return ARRAY;
    if (p < 75) return (Kind)(FIXED_16 + hb_rng_below(rng, 6));
    if (p < 90) return (Kind)(DERIVED_24 + hb_rng_below(rng, 4));
    return p < 95 ? ALIGNED : NOTHROW_96;
}

struct FinishLine {
    pthread_mutex_t lock;
    pthread_cond_t all_done;
    uint64_t chains_done;
};

struct Chain {
    FinishLine *finish;
    uint64_t index, generation, generations, steps, slots, min_size, max_size, seed;
    Slot *slots_array;
    uint64_t checksum;
};

/* Replaces the object of one slot: checks and deletes the old one (if any), makes a new
 * one of a random kind and tags it; returns the checksum event. */
uint64_t replace(Chain *c, hb_rng *rng, uint64_t index) {
    Slot &slot = c->slots_array[index];
    unsigned char tag = hb_block_tag(index);
    if (slot.object) {
        hb_verify_block(bytes_of(slot), slot.length, tag);
        destroy(slot);
    }
    Kind kind = pick_kind(rng);
    uint64_t array_size = kind == ARRAY ? hb_rng_between(rng, c->min_size, c->max_size) : 0;
    unsigned char *bytes = nullptr;
    uint32_t length = 0;
    slot.object = make(kind, array_size, &bytes, &length);
    slot.kind = kind;
    slot.length = length;
    hb_fill_block(bytes, length, tag);
    return hb_malloc_event(index, ((uint64_t)kind << 24) | length);
}

void *run_generation(void *arg) {
    Chain *c = static_cast<Chain *>(arg);
    hb_rng rng;
    hb_rng_seed_stream(&rng, c->seed, c->index, c->generation + 1);
    hb_thread_mark mark = hb_thread_begin();
    uint64_t checksum = c->checksum;
    for (uint64_t i = 0; i < c->steps; i++)
        hb_checksum_add(&checksum, replace(c, &rng, hb_rng_below(&rng, c->slots)));
    c->checksum = checksum;
    if (++c->generation < c->generations) {
        hb_start_detached_thread(run_generation, c); /* hands the slots over */
        hb_thread_end(mark, 2 * c->steps);
        return nullptr;
    }
    hb_thread_end(mark,
                  2 * c->steps); /* before the finish line: main prints once every chain is there */
    FinishLine *finish = c->finish;
    pthread_mutex_lock(&finish->lock);
    finish->chains_done++;
    pthread_cond_signal(&finish->all_done);
    pthread_mutex_unlock(&finish->lock);
    return nullptr;
}

} // namespace

int main(int argc, char **argv) {
    hb_init("bench_larson_cxx", usage);
    uint64_t threads = 4, generations = 50, steps = 50000, slots = 1000, min_size = 8;
    uint64_t max_size = 1000, seed = 1;
    hb_option opts[] = {
        {"--threads", HB_OPT_U64, &threads, false, false},
        {"--generations", HB_OPT_U64, &generations, false, false},
        {"--steps", HB_OPT_U64, &steps, false, false},
        {"--slots", HB_OPT_U64, &slots, false, false},
        {"--min", HB_OPT_U64, &min_size, false, false},
        {"--max", HB_OPT_U64, &max_size, false, false},
        {"--seed", HB_OPT_U64, &seed, false, false},
    };
    hb_parse_flags(argc, argv, opts, sizeof opts / sizeof opts[0]);
    hb_check_range("--threads", threads, 1, 512);
    hb_check_range("--generations", generations, 0, 1u << 20);
    hb_check_range("--slots", slots, 1, HB_MAX_WORKING_SET);
    hb_check_size_range(min_size, max_size);
    hb_check_range("--max", max_size, min_size, 1u << 24);

    FinishLine finish;
    pthread_mutex_init(&finish.lock, nullptr);
    pthread_cond_init(&finish.all_done, nullptr);
    finish.chains_done = 0;
    Chain *chains = new Chain[threads];
    for (uint64_t t = 0; t < threads; t++) {
        Chain *c = &chains[t];
        c->finish = &finish;
        c->index = t;
        c->generation = 0;
        c->generations = generations;
        c->steps = steps;
        c->slots = slots;
        c->min_size = min_size;
        c->max_size = max_size;
        c->seed = seed;
        c->slots_array = new Slot[slots]();
        c->checksum = HB_CHECKSUM_INIT;
        hb_rng rng;
        hb_rng_seed_stream(&rng, seed, t, 0);
        for (uint64_t slot = 0; slot < slots; slot++)
            hb_checksum_add(&c->checksum, replace(c, &rng, slot));
    }

    hb_timer timer; /* one chunk: no loop of like parts */
    hb_timer_start(&timer, HB_CPU_PROCESS);
    for (uint64_t t = 0; generations > 0 && t < threads; t++)
        hb_start_detached_thread(run_generation, &chains[t]);
    pthread_mutex_lock(&finish.lock);
    while (generations > 0 && finish.chains_done < threads)
        pthread_cond_wait(&finish.all_done, &finish.lock);
    pthread_mutex_unlock(&finish.lock);
    hb_timer_lap(&timer, 2 * threads * generations * steps);
    double seconds = hb_timer_stop(&timer);
    hb_report_timer(&timer);

    uint64_t checksum_sum = 0;
    for (uint64_t t = 0; t < threads; t++) {
        Chain *c = &chains[t];
        for (uint64_t slot = 0; slot < slots; slot++) {
            const Slot &s = c->slots_array[slot];
            hb_verify_block(bytes_of(s), s.length, hb_block_tag(slot));
            destroy(s);
        }
        delete[] c->slots_array;
        checksum_sum += hb_checksum_finish(c->checksum);
    }
    delete[] chains;

    uint64_t ops = 2 * threads * generations * steps;
    hb_print_result_and_rss_end(ops, seconds, hb_checksum_finish(checksum_sum));
    printf("threads=%" PRIu64 "\ngenerations=%" PRIu64 "\nsteps=%" PRIu64 "\nslots=%" PRIu64
           "\nmin=%" PRIu64 "\nmax=%" PRIu64 "\nseed=%" PRIu64 "\n",
           threads, generations, steps, slots, min_size, max_size, seed);
    hb_flush_stdout();
    return 0;
}
