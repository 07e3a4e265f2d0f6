# The PGO variant (included by the top-level Makefile after allocator.mk and harness.mk):
#   build/pgo/libhakmem.{so,a}   -O2 -DNDEBUG like fast, optimised with gcc's profile feedback
# 1. objects built with -fprofile-generate into build/obj/pgo-gen/, linked as
#    build/pgo-gen/libhakmem.so;
# 2. training (scripts/pgo_train.py): the instruction gate's cells (seed workloads, shortened,
#    under the shipping profiles) with that library preloaded; each object's counts land beside
#    it as build/obj/pgo-gen/*.gcda;
# 3. each .gcda is copied beside its pgo object (gcc looks for <object>.gcda) and the objects
#    are rebuilt with -fprofile-use.
# -fprofile-update=prefer-atomic keeps the counters exact on the two-thread workloads.

HAK_CFLAGS_pgo-gen := -O2 -DNDEBUG -fprofile-generate -fprofile-update=prefer-atomic
# -fprofile-partial-training: code the training never ran (large blocks, realloc, errors) stays
# optimised as in fast instead of for size. -w: gcc notes every such function ("missing
# counts"); the same sources are compiled with all warnings on in every other variant.
# -fprofile-correction: the value profiles (a division's divisors) are not updated atomically,
# so a two-thread training run can leave one inconsistent with its block's count, which gcc
# otherwise rejects ("corrupted value profile", page.c on 2026-12-07); it smooths them instead.
HAK_CFLAGS_pgo     := -O2 -DNDEBUG -fprofile-use -fprofile-partial-training -fprofile-correction -w
HAK_PGO_STAMP      := $(BUILD)/pgo-gen/trained.stamp

.PHONY: pgo
pgo: $(BUILD)/pgo/libhakmem.so $(BUILD)/pgo/libhakmem.a

$(eval $(call HAK_VARIANT_RULES,pgo-gen))

$(BUILD)/pgo-gen/libhakmem.so: $(call hak_objs,pgo-gen)
	@mkdir -p $(@D)
	$(CC) -shared -fprofile-generate -o $@ $^ $(HAK_LDFLAGS_COMMON) -lpthread

$(HAK_PGO_STAMP): $(BUILD)/pgo-gen/libhakmem.so $(HARNESS_PLAIN) scripts/pgo_train.py \
                  profiles/matrices/scorecard.toml profiles/workloads.toml
	rm -f $(BUILD)/obj/pgo-gen/*.gcda
	$(PYTHON3) scripts/pgo_train.py $(BUILD)
	@touch $@

$(BUILD)/obj/pgo/%.o: $(HAK_SRC_DIR)/%.c $(HAK_PGO_STAMP) allocator/pgo.mk | $(BUILD)/obj/pgo
	rm -f $(@:.o=.gcda)
	if [ -f $(BUILD)/obj/pgo-gen/$*.gcda ]; then cp $(BUILD)/obj/pgo-gen/$*.gcda $(@:.o=.gcda); fi
	$(CC) $(HAK_CFLAGS_COMMON) $(HAK_CFLAGS_pgo) -c $< -o $@
$(BUILD)/obj/pgo:
	@mkdir -p $@
-include $(patsubst %.o,%.d,$(call hak_objs,pgo))

$(eval $(call HAK_LIBRARY_RULES,pgo))
