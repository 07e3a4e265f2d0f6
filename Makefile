# hakmem lab — one Makefile, parts included from their own directories.
#   make setup   system packages (apt-get, when root) + .venv with hakbench[dev]
#   make build   every allocator variant (PGO included) and every harness program
#   make demo    setup + build + the main job: the lean memory policy (BALANCED) against
#                the speed-first default (C7_SAFE) where it acts (thread_churn) and where it
#                does not (mixed); sequential pairs until decided, at most 30 s of pairs
#   make test    setup + build + C tests + pytest + lint + scorecard check (committed
#                results/ must regenerate identically from results/scorecard/) + the
#                instruction and page-fault gate (exact Ir/op and minor faults of
#                libhakmem vs results/scorecard/gate.json)
#   make test-slow  what .ci/run adds: the C tests' whole profile matrix + the slow tests
#   make fuzz    the differential fuzzer of the malloc API against the debug build, each
#                profile in turn, fresh seeds (FUZZ_SECONDS=60 in all, FUZZ_PROFILES=...)
SHELL := /bin/bash
.DEFAULT_GOAL := build

BUILD   ?= build
ifeq ($(origin CC),default)
CC      := gcc
endif
PYTHON3 ?= python3
VENV    := .venv
VPY     := $(VENV)/bin/python
HAKBENCH := $(VENV)/bin/hakbench

-include allocator/allocator.mk
-include allocator/tests/tests.mk
-include harness/harness.mk
-include allocator/pgo.mk

# every C file clang-format checks (make lint) and rewrites (make format)
C_SOURCES := allocator/src/*.c allocator/include/*.h allocator/tools/*.c harness/*.c harness/*.cc harness/*.h allocator/tests/*.c allocator/tests/*.cc allocator/tests/*.h \
    hakbench/native/*.c

.PHONY: setup build demo test test-slow fuzz test-c test-py lint scorecard-check gate format clean bench-alloc suites test-slurm fresh-debian

# mimalloc-bench for `-w @mimalloc-bench` (docs/suites.md): the checkout hakbench finds
# ($$HAKBENCH_MIMALLOC_BENCH, else a clone at the pinned commit into build/suites/src/,
# from MIMALLOC_BENCH_URL when set: a local mirror), built with cmake into build/suites/.
suites: setup
	@$(VPY) -m hakbench.engine.suite_build $(MIMALLOC_BENCH_URL)

# system packages first (python3-venv among them), then .venv (made again when an interrupted
# or failed run left it half-made), then actionlint: scripts/setup.sh
setup:
	@bash scripts/setup.sh

build: allocator harness pgo

demo: setup build
	$(HAKBENCH) ab --profile BALANCED --baseline C7_SAFE -w thread_churn -w mixed --max-time 30 --perf-runs 1

# compiling is parallel (the tests run their own jobs)
NPROC := $(shell nproc 2>/dev/null || echo 1)

# The system packages first (the compilers among them); then the venv is made while the build
# compiles (it does not need the venv: pgo_train.py imports hakbench from the tree); then the
# C tests and pytest side by side, each a few processes that alone keep about one core busy
# (each one's output shown whole when it ends); then the checks.
test:
	@bash scripts/setup.sh system
	$(MAKE) --no-print-directory -j$(NPROC) setup build test-allocator-bins
	$(MAKE) --no-print-directory -j2 --output-sync=target test-c test-py
	$(MAKE) --no-print-directory -j$(NPROC) --output-sync=target lint scorecard-check gate

# the committed scorecard matches its samples; the instruction gate (exact callgrind counts:
# running beside the other checks does not move them)
scorecard-check: setup
	$(HAKBENCH) scorecard --check
gate: setup build
	$(HAKBENCH) gate

fuzz: $(BUILD)/tests/debug/fuzz_api
	bash allocator/tests/fuzz.sh --build "$(BUILD)" --seconds "$(FUZZ_SECONDS)" \
	    --profiles "$(FUZZ_PROFILES)" --threads "$(FUZZ_THREADS)"

test-c: test-allocator

test-py: setup build
	$(VPY) -m pytest -q -n 2 --dist loadgroup tests

# .ci/run and the pull-request workflow, after make test: what is too slow for it, the C
# tests' whole profile matrix (every test under every profile, optimised and sanitized) and
# the tests marked slow (bisect end to end, the statistical rules' long simulations, every
# command under every signal, the stress memory bounds)
test-slow: setup
	$(MAKE) --no-print-directory -j$(NPROC) build test-allocator-bins
	$(MAKE) --no-print-directory -j$(NPROC) test-allocator-full
	HAKBENCH_SLOW=1 $(VPY) -m pytest -q -n 2 --dist loadgroup -m slow tests

# .ci/run, after make test: a sharded matrix as a Slurm array job on a one-node cluster of
# this machine (tests/test_slurm.py), and make demo + make test on a fresh Debian 12 chroot
test-slurm: setup build
	$(VPY) -m pytest -q --slurm tests/test_slurm.py

fresh-debian:
	bash scripts/fresh_debian.sh

lint: setup
	$(VENV)/bin/ruff check hakbench tests
	$(VENV)/bin/ruff format --check hakbench tests
	@if command -v clang-format >/dev/null; then \
	  clang-format --dry-run --Werror $(C_SOURCES) 2>&1 | head -40; \
	  clang-format --dry-run --Werror $(C_SOURCES) >/dev/null 2>&1 || { echo "clang-format: run 'make format'"; exit 1; }; \
	else echo "note: clang-format missing, C formatting not checked"; fi

format: setup
	$(VENV)/bin/ruff format hakbench tests
	$(VENV)/bin/ruff check --fix hakbench tests
	clang-format -i $(C_SOURCES)

# libhakmem vs glibc and mimalloc on the seed workloads: interleaved throughput (median ops/s,
# per-round ratio to mimalloc), then one exact callgrind count per cell (instructions/op).
bench-alloc: setup build
	$(HAKBENCH) matrix profiles/matrices/bench_alloc.toml

clean:
	rm -rf $(BUILD)
