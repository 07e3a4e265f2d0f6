"""What an A/B is asked (``ABSpec``, with the defaults of a bare ``hakbench ab``) and what it
answers (``ABResult``). ``hakbench.experiments.ab`` runs a spec into a result.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from hakbench.core.metrics import ACTIVE_TIME_PROGRAMS
from hakbench.stats import stats as st

# Defaults of a bare ``hakbench ab``: mixed is ~35 ms a process (~55 ms under perf, ~125 ms
# while the 2-core VM ran a load of 7), so 100 pairs + 3 warm-up pairs (206 processes) take
# ~12-30 s. More pairs narrow the median's CI as 1/sqrt(n); 30 pairs detected 2 % in 11/15
# trials on a quiet VM (docs/measuring.md); 100 still fit in ~30 s
# under load, where the CI is 2-4 times wider.
DEFAULT_WORKLOADS = ("mixed",)
DEFAULT_PAIRS = 100  # the fixed count of `--runs` when given alone, and calibrate's
# By default ab samples sequentially (hakbench.stats.sequential): pairs in rounds until each
# workload's verdict is decisive, or until this budget (seconds per call, warm-ups
# included) or the pair cap runs out: INCONCLUSIVE, with the pairs that would likely decide.
DEFAULT_MAX_TIME_S = 60.0
DEFAULT_MAX_PAIRS = 20000
DEFAULT_WARMUP_PAIRS = 3
DEFAULT_PROFILE = "C7_SAFE"
# Metrics a timed A/B can be judged on. task-clock (the harness's CPU time) is the choice on
# a loaded VM: at load 3.5-8.7 on 2 cores (2026-11-22, 100 pairs, 12 trials) its paired CI
# was 2.4 % wide (median) where throughput's was 10.3 %, and it caught a 5.6 % slowdown 4/4
# times against 1/4, because time spent waiting for a CPU is not in it.
# cpu_throughput (`--metric cpu`, the default): the harness's ops per CPU second of its timed
# loop (hakbench.core.metrics). It leaves out the time the process waited for a CPU: on
# this VM, loaded (2026-11-25 21:00 UTC, 199 interleaved A/A pairs a workload), the spread of
# a pair's log ratio was 1.5 / 4.0 / 1.6 % on mixed / tiny_hot / c6_heavy against 20 / 9.6 /
# 7.0 % for throughput (docs/measuring.md, "CPU time of the timed loop"). It also leaves out
# the time threads wait for each other (a lock's futex sleep), so a workload of several
# threads is judged on throughput (``judged_metric``). The chunk medians need `--launch
# chunks=K` to differ from the rest.
DEFAULT_METRIC = "cpu_throughput"
TIMED_METRICS = (
    "throughput",
    "task_clock_ms",
    "cpu_throughput",
    "chunk_throughput",
    "chunk_cpu_throughput",
)
# Why pairs run without perf by default: wrapping every sample in `perf stat` roughly doubled
# the width of the throughput CI and halved power on this VM (same ~2 % A/B, load 2.6-3.6:
# CI width 4.9-7.5 % with perf against 1.7-4.3 % without; detected 1/4 against 3/4; 12-20 s
# against 7-10 s per trial). The counters still come from a few perf runs per side.
PERF_MODES = ("observe", "each", "off")
DEFAULT_PERF_MODE = "observe"
DEFAULT_PERF_RUNS = 3
# Code layouts a side when the two sides are different libhakmem binaries: their difference
# is the change plus where its code landed, and a relayout alone moved tiny_hot by up to
# 1.6-2 % (issue 42), so a verdict between builds must include the layout spread. 16: the
# layout floor narrows as 1/sqrt(K) and its t quantile with the degrees of freedom; measured
# 2026-11-28 (docs/notebook/2026-11-28-verdicts.md) on tiny_hot, a ~1.6 % slowdown between
# two revisions was NO-GO in 3 of 10 default calls with 8 layouts a side (7 layout-limited)
# and 9 of 10 with 16, an unused function never GO/NO-GO with either; a layout is a link of
# the same objects (~0.1 s).
DEFAULT_BUILD_LAYOUTS = 16


def judged_metric(metric: str, workload) -> str:
    """The metric that judges ``workload`` when the A/B asks for ``metric``: a command
    workload's own time or rate; for a harness workload of several threads, instead of CPU
    time (which leaves out the time they wait for each other), their active time where the
    program reports it for every thread (``metrics.ACTIVE_TIME_PROGRAMS``), else wall-clock
    throughput; else ``metric``."""
    if workload.command is not None:
        return workload.primary_metric
    if metric == "cpu_throughput" and workload.threads > 1:
        if workload.program in ACTIVE_TIME_PROGRAMS:
            return "active_throughput"
        return "throughput"
    return metric


@dataclass
class ABSpec:
    profile: str = DEFAULT_PROFILE
    baseline: str | None = None
    sets: dict = field(default_factory=dict)
    allocator: str = "hakmem"
    baseline_allocator: str | None = None
    variant: str = "fast"
    baseline_variant: str | None = None  # A's hakmem build variant [default: variant]
    workloads: tuple = DEFAULT_WORKLOADS
    pairs: int | None = None  # a fixed count; None: sequential, to a decision or the budget
    max_time_s: float = DEFAULT_MAX_TIME_S  # sequential only
    max_pairs: int = DEFAULT_MAX_PAIRS  # sequential only
    iters: int | None = None  # iterations of every harness workload [default: run length]
    warmup_pairs: int = DEFAULT_WARMUP_PAIRS
    threshold_pct: float = st.DEFAULT_THRESHOLD_PCT
    seed: int | None = None  # None: a fresh one per call (engine.new_seed), recorded
    metric: str = DEFAULT_METRIC  # a TIMED_METRICS name, or "instructions"
    rev: str | None = None
    baseline_rev: str | None = None
    timeout: float = 120.0
    perf: str = DEFAULT_PERF_MODE  # one of PERF_MODES
    perf_runs: int = DEFAULT_PERF_RUNS  # per side, perf "observe" only
    observe: bool = True
    name: str | None = None
    launch: str = ""  # how harness processes start: hakbench.engine.process.Launch text
    # calibration only (`calibrate --sequential`): side B passes the harness's --extra-ops K,
    # side A --extra-ops KA, a known injected slowdown
    extra_ops: int | None = None
    baseline_extra_ops: int = 0  # side A's K when extra_ops is set
    # code layouts a side (issue 29; hakbench.engine.layouts): 1 = the build's own library;
    # None: DEFAULT_BUILD_LAYOUTS when A and B are two different libhakmem binaries (two
    # revisions, two variants), else 1 (``ab_plan.resolve_layouts``, before anything runs)
    layouts: int | None = None
    # the layouts' link order and pad (engine.layouts.plan_layout); None: the call's seed, so
    # every call draws K - 1 fresh layouts of each side (layout 0 is the build as it is) and
    # --seed, --resume and --continue link the same ones again
    layout_seed: int | None = None
    # the call's error rate: Holm's level, NEUTRAL's Bonferroni total (bisect splits its own
    # over its steps)
    alpha: float = st.ALPHA
    # what a revision's build makes: "needed" (both sides' library variants, the stats one
    # for the engagement check, the options tool and the workloads' harness programs), "fast"
    # (the same without the stats library: what bisect's steps need) or "full" (make build)
    rev_build: str = "needed"

    @property
    def sequential(self) -> bool:
        return self.pairs is None and self.metric in TIMED_METRICS

    @property
    def is_aa(self) -> bool:
        """Bare ``ab --profile P``: A is P itself, so A and B are the same cell."""
        return (
            self.baseline in (None, self.profile)
            and not self.sets
            and self.baseline_allocator in (None, self.allocator)
            and self.baseline_variant in (None, self.variant)
            and self.rev == self.baseline_rev
            and not self.extra_ops
        )

    def describe(self) -> str:
        def side(allocator, variant, profile, sets, rev):
            hakmem = allocator == "hakmem"
            text = allocator + (f":{variant}" if hakmem and variant != "fast" else "")
            text += f" {profile}" if hakmem else ""
            text += "".join(f" {k}={v}" for k, v in sorted(sets.items()))
            # the revision each side was built at (the working tree when none is named, if
            # the other side names one)
            if self.rev or self.baseline_rev:
                text += f" @ {rev}" if rev else " @ the working tree"
            return text

        a = side(
            self.baseline_allocator or self.allocator,
            self.baseline_variant or self.variant,
            self.baseline or self.profile,
            {},
            self.baseline_rev,
        )
        b = side(self.allocator, self.variant, self.profile, self.sets, self.rev)
        text = f"A = {a}, B = {b}"
        if self.extra_ops is not None:
            text += (
                f" --extra-ops {self.extra_ops} against A's {self.baseline_extra_ops}"
                " (a known injected cost)"
            )
        return f"A/A (no --baseline/--set): a noise check; {text}" if self.is_aa else text


@dataclass
class ABResult:
    out: Path
    spec: ABSpec
    cells: dict  # workload -> (cell A, cell B)
    comparisons: list  # stats.Comparison
    roles: dict  # metric -> primary | guardrail | info
    engagement: dict  # workload -> {"status": engaged|not-engaged|unknown|n/a, "detail": str}
    failed: list  # failed samples
    unavailable: list  # metric names no measured or perf run of this A/B had
    interrupted: bool = False
    shas: dict = field(default_factory=dict)
    changed_libraries: list = field(default_factory=list)  # rebuilt while the A/B ran
    perf_counters: list = field(default_factory=list)  # stats.Comparison, source "perf"
    perf_note: str = ""  # why perf counter runs were not taken, when they were not
    noise_warning: str | None = None  # threshold below this machine's calibrated noise floor
    failures: dict = field(default_factory=dict)  # workload -> what failed ("" when nothing)
    load: dict | None = None  # hakbench.engine.load: how busy the machine was while this measured
    iterations: dict = field(default_factory=dict)  # workload -> "N iterations: why"
    pairs_seconds: float = 0.0  # wall time from the first pair (warm-ups included) to the last
    history: list = field(default_factory=list)  # resumes and continuations (meta.json)
    stopped_by: str = ""  # the stop signal's description when interrupted
    layouts: dict = field(default_factory=dict)  # workload -> ab_analysis.LayoutSummary
    layout_note: str = ""  # two binaries compared in one layout each: not controlled
    allocator_warnings: dict = field(default_factory=dict)  # side -> libhakmem's stderr lines

    def role(self, c) -> str:
        """primary | guardrail | info of a comparison: per (workload, metric) where a command
        workload set its own (its primary is its time or rate), else per metric."""
        return self.roles.get((c.workload, c.metric), self.roles.get(c.metric, "info"))

    def primary(self) -> list:
        return [c for c in self.comparisons if self.role(c) == "primary"]

    def verdicts(self) -> dict:
        return {c.workload: c.verdict for c in self.primary()}
