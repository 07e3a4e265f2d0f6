# libhakmem C tests (included by the top-level Makefile; paths are relative to the repo root).
#
# Each test is built once per way of getting an allocator, into $(BUILD)/tests/<kind>/:
#   dynamic  plain binary; the allocator comes from LD_PRELOAD (or is glibc's)
#   fast     statically linked with $(BUILD)/fast/libhakmem.a
#   stats    statically linked with $(BUILD)/stats/libhakmem.a
#   debug    statically linked with $(BUILD)/debug/libhakmem.a (assertions, UBSan)
#   secure   statically linked with $(BUILD)/secure/libhakmem.a (encoded, checked free lists)
#   asan     ASan+UBSan binary calling the prefixed API of
#            $(BUILD)/debug-asan/libhakmem_prefixed.a (ASan owns malloc itself)
#   tsan     ThreadSanitizer binary calling the prefixed API of
#            $(BUILD)/debug-tsan/libhakmem_prefixed.a (the multi-threaded tests only)
#
# make test-allocator runs profiles x variants x tests through run_tests.sh (a part of the
# profile matrix; make test-allocator-full all of it), then
# check_routes.sh (each path switch engages exactly its path, by the stats counters):
#   HAKMEM_TEST_PROFILES  env profiles, space-separated; each is `default` (no settings) or
#                         comma-joined assignments, e.g. HAKMEM_TINY_HEAP_PROFILE=C7_SAFE,X=1
#   HAKMEM_TEST_VARIANTS  fast stats debug asan preload (also: glibc mimalloc, reference runs);
#                         the default profile runs under all of them
#   HAKMEM_TEST_MATRIX_VARIANTS  the variants for every other profile (the optimised build
#                         and the sanitized debug build)
#   HAKMEM_TEST_NAMES     which tests (default: all, plus preload_programs in preload)
#   HAKMEM_TEST_MATRIX_NAMES  the tests for every other profile
#
# The profile matrix: the settings of profiles/*.toml (default = C7_SAFE) and the path
# switches with every tiny class routed to the path, so each front serves all its sizes.
# The differential fuzzer (fuzz_api) also runs under every profile in the debug build.
# make test-allocator-reference runs the same tests under glibc and mimalloc, without
# libhakmem, to show that the tests themselves are right, and checks that the fuzzer catches
# each bug planted by its self-test builds (fuzz_selftest.sh).
#
# make fuzz (top-level Makefile) runs fuzz_api against the debug build under each profile in
# turn with fresh seeds: FUZZ_SECONDS in all (shared by the profiles), FUZZ_PROFILES (default
# HAKMEM_TEST_PROFILES), FUZZ_THREADS worker threads besides the main stream.

HAKTEST_DIR     := allocator/tests
HAKTEST_NAMES   := test_api test_stress test_fork test_thread_exit test_large test_invalid_free test_release \
    test_lifecycle test_oom test_hooks test_link_tamper test_secure_layout test_cache_decommit test_thread_churn \
    test_paths test_conformance test_fork_signal fuzz_api
HAKTEST_HEADERS := $(HAKTEST_DIR)/testhelper.h $(HAKTEST_DIR)/test_alloc_api.h
# gcc may fold a malloc/free pair or a comparison of two fresh blocks away; the tests are
# about what the allocator really returns.
HAKTEST_NO_BUILTINS := -fno-builtin-malloc -fno-builtin-free -fno-builtin-calloc \
    -fno-builtin-realloc
HAKTEST_CFLAGS  := -std=c11 -D_GNU_SOURCE -O2 -g -Wall -Wextra -pthread -I$(HAKTEST_DIR) -Iallocator/src \
    $(HAKTEST_NO_BUILTINS)
HAKTEST_LDLIBS  := -pthread -ldl

HAKMEM_TEST_PROFILES ?= default \
    HAKMEM_SS_MEM_LEAN=1 \
    HAKMEM_SMALL_HEAP_V3_CLASSES=0xffff \
    HAKMEM_SMALL_HEAP_V3_ENABLED=0 \
    HAKMEM_SMALL_HEAP_V3_ENABLED=0,HAKMEM_TINY_HEAP_PROFILE=LEGACY \
    HAKMEM_SMALL_HEAP_V3_ENABLED=0,HAKMEM_SS_MEM_LEAN=1 \
    HAKMEM_SMALL_HEAP_V3_ENABLED=0,HAKMEM_TINY_HEAP_CLASSES=0xC0 \
    HAKMEM_SMALL_HEAP_V3_ENABLED=0,HAKMEM_TINY_HEAP_CLASSES=0xff \
    HAKMEM_SMALL_HEAP_V3_ENABLED=0,HAKMEM_TINY_HOTHEAP_V2=1,HAKMEM_TINY_HOTHEAP_CLASSES=0xff
HAKMEM_TEST_VARIANTS ?= fast stats debug secure asan preload
HAKMEM_TEST_NAMES    ?= $(HAKTEST_NAMES) test_cxx preload_programs
# make test (kept to minutes): every test under the default profile, and under the other
# profiles the optimised build with the tests whose paths a profile switches (the fronts,
# the lean policy's release and purge, the large path). make test-allocator-full (.ci/run):
# every test under every profile in the optimised and the sanitized build.
HAKMEM_TEST_MATRIX_VARIANTS ?= fast
HAKMEM_TEST_MATRIX_NAMES    ?= test_api test_stress test_thread_exit test_large test_release \
    test_lifecycle test_paths test_thread_churn fuzz_api
FUZZ_SECONDS  ?= 60
FUZZ_PROFILES ?= $(HAKMEM_TEST_PROFILES)
FUZZ_THREADS  ?= 2

# Per kind: extra compile flags and the library linked in (empty for dynamic).
HAKTEST_FLAGS_dynamic :=
HAKTEST_FLAGS_fast    := -DHAKTEST_LINKS_HAKMEM
HAKTEST_FLAGS_stats   := -DHAKTEST_LINKS_HAKMEM
HAKTEST_FLAGS_secure  := -DHAKTEST_LINKS_HAKMEM -DHAKTEST_SECURE_BUILD
HAKTEST_FLAGS_debug   := -DHAKTEST_LINKS_HAKMEM -DHAKTEST_DEBUG_BUILD -fsanitize=undefined -fno-omit-frame-pointer
HAKTEST_FLAGS_asan    := -DHAKTEST_LINKS_HAKMEM -DHAKTEST_DEBUG_BUILD -DHAKTEST_PREFIXED_API -Iallocator/include \
    -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -O1
HAKTEST_LIB_dynamic :=
HAKTEST_LIB_fast    := $(BUILD)/fast/libhakmem.a
HAKTEST_LIB_stats   := $(BUILD)/stats/libhakmem.a
HAKTEST_LIB_secure  := $(BUILD)/secure/libhakmem.a
HAKTEST_LIB_debug   := $(BUILD)/debug/libhakmem.a
HAKTEST_LIB_asan    := $(BUILD)/debug-asan/libhakmem_prefixed.a
HAKTEST_FLAGS_tsan    := -DHAKTEST_LINKS_HAKMEM -DHAKTEST_PREFIXED_API -Iallocator/include \
    -fsanitize=thread -fno-omit-frame-pointer -O1
HAKTEST_LIB_tsan    := $(BUILD)/debug-tsan/libhakmem_prefixed.a
# The multi-threaded tests, also run against the ThreadSanitizer build (default profile).
HAKTEST_TSAN_NAMES  := test_stress test_thread_exit test_release

# Variants to the kind of binary they run: preload, glibc and mimalloc use the dynamic one.
haktest_kind = $(if $(filter preload glibc mimalloc,$(1)),dynamic,$(1))
HAKTEST_KINDS := $(sort $(foreach v,$(HAKMEM_TEST_VARIANTS),$(call haktest_kind,$(v))))
haktest_bins = $(addprefix $(BUILD)/tests/$(1)/,$(HAKTEST_NAMES))

# A test is compiled once per set of flags into $(BUILD)/tests/obj/<kind>/ (fast and stats
# compile alike: stats links the fast object with its own library), then linked per kind.
# The objects need no library, so they compile while the libraries build; -MMD tracks the
# allocator headers the tests include.
HAKTEST_ALL_KINDS := dynamic fast stats debug secure asan tsan
haktest_obj_kind = $(if $(filter stats,$(1)),fast,$(1))
haktest_obj = $(BUILD)/tests/obj/$(call haktest_obj_kind,$(1))/$(2).o
define HAKTEST_KIND_RULES
$(BUILD)/tests/obj/$(1)/%.o: $(HAKTEST_DIR)/%.c $(HAKTEST_HEADERS) $(HAKTEST_DIR)/tests.mk
	@mkdir -p $$(@D)
	$$(CC) $$(HAKTEST_CFLAGS) $$(HAKTEST_FLAGS_$(1)) -MMD -MP -c -o $$@ $$<
$(BUILD)/tests/$(1)/%: $(BUILD)/tests/obj/$(call haktest_obj_kind,$(1))/%.o $(HAKTEST_LIB_$(1))
	@mkdir -p $$(@D)
	$$(CC) $$(HAKTEST_CFLAGS) $$(HAKTEST_FLAGS_$(1)) -o $$@ $$< $$(HAKTEST_LIB_$(1)) $$(HAKTEST_LDLIBS)
endef
$(foreach k,$(HAKTEST_ALL_KINDS),$(eval $(call HAKTEST_KIND_RULES,$(k))))
HAKTEST_OBJS := $(sort $(foreach k,$(HAKTEST_ALL_KINDS),$(foreach t,$(HAKTEST_NAMES),$(call haktest_obj,$(k),$(t)))))
.SECONDARY: $(HAKTEST_OBJS) # kept: make would delete them as intermediates
-include $(HAKTEST_OBJS:.o=.d)

# test_cxx (C++: operator new/delete in every form) in the builds that export them: not the
# sanitized ones, whose prefixed API leaves C++'s allocation to ASan and TSan.
HAKTEST_CXX_KINDS := dynamic fast stats debug secure
define HAKTEST_CXX_RULES
$(BUILD)/tests/$(1)/test_cxx: $(HAKTEST_DIR)/test_cxx.cc $(HAKTEST_LIB_$(1)) $(HAKTEST_DIR)/tests.mk
	@mkdir -p $$(@D)
	$$(CXX) -std=c++17 -O2 -g -Wall -Wextra -pthread -fsized-deallocation -fno-builtin \
	    $$(filter-out -fsanitize=%,$$(HAKTEST_FLAGS_$(1))) $$(if $$(filter debug,$(1)),-fsanitize=undefined) \
	    -o $$@ $$< $$(HAKTEST_LIB_$(1)) $$(HAKTEST_LDLIBS)
endef
$(foreach k,$(HAKTEST_CXX_KINDS),$(eval $(call HAKTEST_CXX_RULES,$(k))))

# The fuzzer in the debug build too under the profiles the matrix runs in the other builds.
HAKTEST_FUZZ_DEBUG_PROFILES = $(if $(filter fuzz_api,$(HAKMEM_TEST_NAMES)),$(filter-out \
    default,$(HAKMEM_TEST_PROFILES)))

HAKTEST_RUN = bash $(HAKTEST_DIR)/run_tests.sh --build "$(BUILD)" --profiles "$(HAKMEM_TEST_PROFILES)"

.PHONY: test-allocator test-allocator-full test-allocator-reference test-allocator-bins
test-allocator-full:
	$(MAKE) --no-print-directory test-allocator HAKMEM_TEST_MATRIX_VARIANTS="fast asan" \
	    HAKMEM_TEST_MATRIX_NAMES="$(HAKMEM_TEST_NAMES)"

# every binary test-allocator runs (make test builds them beside the rest of the build)
test-allocator-bins: allocator $(foreach k,$(HAKTEST_KINDS) stats,$(call haktest_bins,$(k))) \
    $(foreach k,$(filter $(HAKTEST_CXX_KINDS),$(HAKTEST_KINDS) stats),$(BUILD)/tests/$(k)/test_cxx) \
    $(addprefix $(BUILD)/tests/tsan/,$(HAKTEST_TSAN_NAMES)) \
    $(if $(HAKTEST_FUZZ_DEBUG_PROFILES),$(BUILD)/tests/debug/fuzz_api)

test-allocator: test-allocator-bins
	$(HAKTEST_RUN) --variants "$(HAKMEM_TEST_VARIANTS)" \
	    --matrix-variants "$(HAKMEM_TEST_MATRIX_VARIANTS)" --tests "$(HAKMEM_TEST_NAMES)" \
	    --matrix-tests "$(HAKMEM_TEST_MATRIX_NAMES)"
	bash $(HAKTEST_DIR)/run_tests.sh --build "$(BUILD)" --profiles default --variants tsan \
	    --tests "$(HAKTEST_TSAN_NAMES)"
	[ -z "$(HAKTEST_FUZZ_DEBUG_PROFILES)" ] || bash $(HAKTEST_DIR)/run_tests.sh --build "$(BUILD)" \
	    --profiles "$(HAKTEST_FUZZ_DEBUG_PROFILES)" --variants debug --tests fuzz_api
	bash $(HAKTEST_DIR)/check_routes.sh "$(BUILD)"

# The fuzzer's self-test builds: each plants one allocator bug (fuzz_api.c, FUZZ_SELFTEST_BUG).
HAKTEST_SELFTEST_BUGS := 1 2 3 4 5 6 7 8
$(BUILD)/tests/selftest/fuzz_api_bug%: $(HAKTEST_DIR)/fuzz_api.c $(HAKTEST_HEADERS) $(HAKTEST_DIR)/tests.mk
	@mkdir -p $(@D)
	$(CC) $(HAKTEST_CFLAGS) -DFUZZ_SELFTEST_BUG=$* -o $@ $< $(HAKTEST_LDLIBS)

test-allocator-reference: $(call haktest_bins,dynamic) $(BUILD)/tests/dynamic/test_cxx \
    $(addprefix $(BUILD)/tests/selftest/fuzz_api_bug,$(HAKTEST_SELFTEST_BUGS))
	$(HAKTEST_RUN) --variants "glibc mimalloc" --tests "$(HAKMEM_TEST_NAMES)"
	bash $(HAKTEST_DIR)/fuzz_selftest.sh "$(BUILD)" $(HAKTEST_SELFTEST_BUGS)
