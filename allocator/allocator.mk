# libhakmem variants (included by the top-level Makefile; paths are relative to the repo root).
#   build/fast/libhakmem.{so,a}        -O2, NDEBUG, hot-path counters compiled out (timings)
#   build/stats/libhakmem.{so,a}       as fast, plus every hot-path counter (HAK_STATS_HOT)
#   build/debug/libhakmem.{so,a}       -O1 -g, assertions + full double-free checks, UBSan
#   build/secure/libhakmem.{so,a}      as fast, with encoded free-list links checked at every
#                                      pop and the other checks of HAK_SECURE (docs/allocator.md)
#   build/debug-asan/libhakmem_prefixed.a  debug checks under ASan+UBSan, exports only hak_*
#   build/debug-tsan/libhakmem_prefixed.a  the fast paths under ThreadSanitizer, exports only hak_*
#   build/bin/hakmem-options           prints the options table (--json for tools)
# Objects live in build/obj/<variant>/; dependency files (-MMD) make rebuilds incremental.

HAK_SRC_DIR := allocator/src
HAK_SRCS    := $(wildcard $(HAK_SRC_DIR)/*.c)
HAK_NAMES   := $(notdir $(HAK_SRCS:.c=))

HAK_CFLAGS_COMMON := -std=c11 -D_GNU_SOURCE -Wall -Wextra -Wshadow -fPIC -fvisibility=hidden \
    -ftls-model=initial-exec -fno-semantic-interposition -Iallocator/include -I$(HAK_SRC_DIR) \
    -MMD -MP
HAK_CFLAGS_fast       := -O2 -DNDEBUG
HAK_CFLAGS_stats      := -O2 -DNDEBUG -DHAK_STATS_HOT=1
HAK_CFLAGS_secure     := -O2 -DNDEBUG -DHAK_SECURE=1
HAK_CFLAGS_debug      := -O1 -g -DHAK_DEBUG=1 -DHAK_STATS_HOT=1 -fsanitize=undefined \
    -fno-sanitize-recover=undefined -fno-omit-frame-pointer
HAK_CFLAGS_debug-asan := -O1 -g -DHAK_DEBUG=1 -DHAK_STATS_HOT=1 -DHAK_PREFIXED_ONLY=1 \
    -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
# ThreadSanitizer: no HAK_DEBUG, so the owner and remote fast paths run as in the fast build.
HAK_CFLAGS_debug-tsan := -O1 -g -DHAK_STATS_HOT=1 -DHAK_PREFIXED_ONLY=1 -fsanitize=thread \
    -fno-omit-frame-pointer
HAK_LDFLAGS_debug     := -fsanitize=undefined
# Calls between the library's own exported functions (operator new -> hak_malloc, free_sized
# -> hak_free, ...) bound at link time, not through the PLT: nothing outside may replace
# them one by one, as it could not replace malloc without replacing the whole library.
HAK_LDFLAGS_COMMON    := -Wl,-Bsymbolic-functions

HAK_LIBS := $(BUILD)/fast/libhakmem.so $(BUILD)/fast/libhakmem.a \
    $(BUILD)/stats/libhakmem.so $(BUILD)/stats/libhakmem.a \
    $(BUILD)/debug/libhakmem.so $(BUILD)/debug/libhakmem.a \
    $(BUILD)/secure/libhakmem.so $(BUILD)/secure/libhakmem.a \
    $(BUILD)/debug-asan/libhakmem_prefixed.a $(BUILD)/debug-tsan/libhakmem_prefixed.a
HAK_OPTIONS_TOOL := $(BUILD)/bin/hakmem-options

.PHONY: allocator
allocator: $(HAK_LIBS) $(HAK_OPTIONS_TOOL)

# One object set per variant: $(call hak_objs,<variant>)
hak_objs = $(addprefix $(BUILD)/obj/$(1)/,$(addsuffix .o,$(HAK_NAMES)))

define HAK_VARIANT_RULES
$(BUILD)/obj/$(1)/%.o: $(HAK_SRC_DIR)/%.c allocator/allocator.mk | $(BUILD)/obj/$(1)
	$$(CC) $$(HAK_CFLAGS_COMMON) $$(HAK_CFLAGS_$(1)) -c $$< -o $$@
$(BUILD)/obj/$(1):
	@mkdir -p $$@
-include $(patsubst %.o,%.d,$(call hak_objs,$(1)))
endef

define HAK_LIBRARY_RULES
$(BUILD)/$(1)/libhakmem.a: $(call hak_objs,$(1))
	@mkdir -p $$(@D)
	rm -f $$@ && ar rcs $$@ $$^
$(BUILD)/$(1)/libhakmem.so: $(call hak_objs,$(1))
	@mkdir -p $$(@D)
	$$(CC) -shared -o $$@ $$^ $$(HAK_LDFLAGS_COMMON) $$(HAK_LDFLAGS_$(1)) -lpthread
endef

$(foreach v,fast stats debug secure debug-asan debug-tsan,$(eval $(call HAK_VARIANT_RULES,$(v))))
$(foreach v,fast stats debug secure,$(eval $(call HAK_LIBRARY_RULES,$(v))))

define HAK_PREFIXED_RULES
$(BUILD)/$(1)/libhakmem_prefixed.a: $(call hak_objs,$(1))
	@mkdir -p $$(@D)
	rm -f $$@ && ar rcs $$@ $$^
endef
$(foreach v,debug-asan debug-tsan,$(eval $(call HAK_PREFIXED_RULES,$(v))))

$(HAK_OPTIONS_TOOL): allocator/tools/hakmem_options.c $(BUILD)/fast/libhakmem.a
	@mkdir -p $(@D)
	$(CC) -std=c11 -O2 -Wall -Wextra -Iallocator/include -I$(HAK_SRC_DIR) -o $@ $< \
	    $(BUILD)/fast/libhakmem.a -lpthread
