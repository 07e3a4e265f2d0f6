# Harness programs: build/bench/<name> (allocator chosen by LD_PRELOAD) and, once the
# allocator sources exist, build/bench/<name>_hakmem (libhakmem.a linked in).
HARNESS_PROGRAMS := bench_random_mixed bench_tiny_hot bench_mid_large_mt bench_xthread bench_soak \
                    bench_burst bench_churn bench_prodcons_mem bench_large bench_larson \
                    bench_xmalloc bench_cache_scratch bench_leak_grow bench_bigblock bench_thread_churn \
                    bench_random_st bench_thread_chain
# C++ programs (g++): the same contract, allocation by new/delete.
HARNESS_CXX_PROGRAMS := bench_larson_cxx
HARNESS_BIN := $(BUILD)/bench
HARNESS_OBJ := $(BUILD)/harness
# -fno-builtin-malloc/free: gcc must not elide or merge the allocations being measured.
HARNESS_CFLAGS := -std=c11 -O2 -g -Wall -Wextra -Werror=implicit-function-declaration -pthread \
                  -fno-builtin-malloc -fno-builtin-free -fno-builtin-calloc -fno-builtin-realloc
HARNESS_LDLIBS := -pthread -ldl -lm
# -fsized-deallocation: `delete` of a complete object calls operator delete(void *, size_t);
# -fno-allocation-dce and -fno-builtin: g++ must not elide or merge new/delete pairs either.
HARNESS_CXXFLAGS := -std=c++17 -O2 -g -Wall -Wextra -pthread -fsized-deallocation \
                    -fno-allocation-dce -fno-builtin

HARNESS_PLAIN := $(addprefix $(HARNESS_BIN)/,$(HARNESS_PROGRAMS))
HARNESS_TWINS := $(addsuffix _hakmem,$(HARNESS_PLAIN))
HARNESS_CXX_PLAIN := $(addprefix $(HARNESS_BIN)/,$(HARNESS_CXX_PROGRAMS))
HARNESS_CXX_TWINS := $(addsuffix _hakmem,$(HARNESS_CXX_PLAIN))
HARNESS_TARGETS := $(HARNESS_PLAIN) $(HARNESS_CXX_PLAIN)
ifneq ($(wildcard allocator/src/*.c),)
HARNESS_TARGETS += $(HARNESS_TWINS) $(HARNESS_CXX_TWINS)
endif

# The heap-misuse probe (docs/misuse.md): not a benchmark, so no common.o and no twin; no
# fortify (glibc's own checks of memcpy would answer for the allocator) and no builtin
# memcpy (the overflow by memcpy is a real call to whatever library defines it).
MISUSE_PROBE := $(HARNESS_BIN)/misuse_probe
HARNESS_TARGETS += $(MISUSE_PROBE)

.PHONY: harness
harness: $(HARNESS_TARGETS)

$(MISUSE_PROBE): harness/misuse_probe.c
	@mkdir -p $(@D)
	$(CC) $(HARNESS_CFLAGS) -U_FORTIFY_SOURCE -fno-builtin-memcpy -o $@ $< -ldl

$(HARNESS_OBJ)/%.o: harness/%.c harness/common.h
	@mkdir -p $(@D)
	$(CC) $(HARNESS_CFLAGS) -c -o $@ $<

$(HARNESS_OBJ)/%.o: harness/%.cc harness/common.h
	@mkdir -p $(@D)
	$(CXX) $(HARNESS_CXXFLAGS) -c -o $@ $<

$(HARNESS_PLAIN): $(HARNESS_BIN)/%: $(HARNESS_OBJ)/%.o $(HARNESS_OBJ)/common.o
	@mkdir -p $(@D)
	$(CC) $(HARNESS_CFLAGS) -o $@ $^ $(HARNESS_LDLIBS)

# --whole-archive: take every allocator entry point (free, calloc, memalign, ...), not only
# the ones the harness names; -rdynamic exports them so libc's own calls reach them too.
$(HARNESS_TWINS): $(HARNESS_BIN)/%_hakmem: $(HARNESS_OBJ)/%.o $(HARNESS_OBJ)/common.o \
                  $(BUILD)/fast/libhakmem.a
	@mkdir -p $(@D)
	$(CC) $(HARNESS_CFLAGS) -rdynamic -o $@ $(filter %.o,$^) \
	  -Wl,--whole-archive $(BUILD)/fast/libhakmem.a -Wl,--no-whole-archive $(HARNESS_LDLIBS)

$(HARNESS_CXX_PLAIN): $(HARNESS_BIN)/%: $(HARNESS_OBJ)/%.o $(HARNESS_OBJ)/common.o
	@mkdir -p $(@D)
	$(CXX) $(HARNESS_CXXFLAGS) -o $@ $^ $(HARNESS_LDLIBS)

# The C++ twins the same way, linked by g++ (libstdc++'s operator new and delete, unless
# libhakmem.a defines its own).
$(HARNESS_CXX_TWINS): $(HARNESS_BIN)/%_hakmem: $(HARNESS_OBJ)/%.o $(HARNESS_OBJ)/common.o \
                      $(BUILD)/fast/libhakmem.a
	@mkdir -p $(@D)
	$(CXX) $(HARNESS_CXXFLAGS) -rdynamic -o $@ $(filter %.o,$^) \
	  -Wl,--whole-archive $(BUILD)/fast/libhakmem.a -Wl,--no-whole-archive $(HARNESS_LDLIBS)
