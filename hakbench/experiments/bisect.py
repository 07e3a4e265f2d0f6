"""``hakbench bisect``: the first commit between a good and a bad revision where a workload
got worse, by binary search over the first-parent history.

How a commit is judged. Each revision is built once (the fast variant, its options tool and
the workload's harness program: ``engine.revs.fast_targets``; cached by commit in
``build/rev-<sha>/``, as ``ab --rev`` does). Then:

- **Exact instruction counts** where the regression shows in them: the good and the bad
  revision are counted first (``--metric auto``, the default, or ``instructions``); when the
  bad one needs at least the threshold more instructions per op, every probed commit is
  counted once and is bad when it has at least half of the regression
  (``(Ir - Ir_good) / (Ir_bad - Ir_good) >= 1/2``). A count is exact: no error rate.
- **Paired sequential A/Bs** otherwise (``ab`` between two revisions, with its code layouts:
  a commit that only moved code is not blamed): the range is confirmed first (good against
  bad, NO-GO at the threshold), each probe is the commit against the good revision at half
  the confirmed regression (NO-GO: bad; NEUTRAL: good; else undecided, skipped like a commit
  that does not build), and the commit found is confirmed against its parent. The error
  rate over all steps is held at alpha by Bonferroni, as a budget: each A/B step runs at and
  spends alpha / m (m = ceil(log2 n) + 2 + SPARE_STEPS for n commits), INCONCLUSIVE too
  (counts, and A/Bs a side did not build for, spend nothing); alpha / m stays reserved for
  the confirmation against the parent, so a probe runs only while it and that share fit.
  Out of budget, the search stops (STOP_BUDGET) with the candidates left.

Commits that do not build are skipped and reported. The call is one engine run directory:
the counts are samples (``samples.jsonl``), every A/B step a run directory of its own under
``steps/``; ``--resume DIR`` replays the search from them (a finished step is judged again
from its stored pairs, an interrupted one finished; they spend their alphas again, so the
budget goes on from what they left) and runs only what is missing. A stop (SIGINT, SIGTERM,
SIGHUP) writes the report of the steps that finished.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import asdict, dataclass, field
from fractions import Fraction
from pathlib import Path

from hakbench.core import paths
from hakbench.core.errors import MeasurementError, UsageError
from hakbench.core.profiles import resolve_workload
from hakbench.engine import engine, process
from hakbench.engine.cells import make_cell
from hakbench.engine.revs import build_at_rev, fast_targets, resolve_rev
from hakbench.engine.runner import instruction_sample
from hakbench.experiments.ab_spec import DEFAULT_MAX_TIME_S, DEFAULT_PROFILE, ABSpec
from hakbench.stats.stats import ALPHA, NEUTRAL, NO_GO

METRICS = ("auto", "instructions", "cpu_throughput", "throughput")
SPARE_STEPS = 2  # steps the error budget allows beyond the search itself (skips, undecided)
BAD, GOOD, SKIPPED, UNDECIDED = "bad", "good", "skipped", "undecided"
# why a search ended (BisectResult.stop); STOP_GUARD: 4 m counts (which spend no alpha)
STOP_FOUND, STOP_SKIPPED, STOP_BUDGET = "found", "skipped", "alpha budget spent"
STOP_GUARD, STOP_NO_RANGE, STOP_INTERRUPTED = "step limit", "range not confirmed", "interrupted"


@dataclass
class BisectSpec:
    good: str
    bad: str
    workload: str
    metric: str = "auto"  # auto: instructions where the regression shows in them, else time
    profile: str = DEFAULT_PROFILE
    threshold_pct: float = 1.0
    alpha: float = ALPHA
    max_time_s: float = DEFAULT_MAX_TIME_S  # budget of each timed step
    seed: int | None = None
    iters: int | None = None


@dataclass
class Step:
    """One step of the search: a count of one commit, or an A/B of two."""

    kind: str  # count | confirm | probe | verify
    commit: str
    against: str | None  # the A side of an A/B step
    verdict: str  # an A/B verdict, or "counted" / "build failed"
    classified: str  # bad | good | skipped | undecided | ""
    detail: str
    out: str | None = None  # the A/B's run directory
    alpha: float = 0.0  # the error rate it spent: its A/B's alpha (0: a count, no verdict)


@dataclass
class BisectResult:
    spec: BisectSpec
    out: Path
    commits: list  # the range, oldest first: good's first-parent successors up to bad
    subjects: dict  # sha -> its subject line
    how: str = ""  # instructions | timed
    steps: list = field(default_factory=list)
    found: str | None = None  # the first bad commit
    candidates: list = field(default_factory=list)  # when skips left several
    confirmed: bool = False
    message: str = ""
    alpha_step: float = math.nan  # each A/B step's alpha: spec.alpha / max_steps
    max_steps: int = 0  # the A/B steps the call's alpha is split over
    stop: str = ""  # why the search ended: one of the STOP_* values
    interrupted: bool = False

    def __post_init__(self):
        if not self.max_steps:
            self.max_steps = max_steps(len(self.commits))
            self.alpha_step = step_alpha(self.spec.alpha, self.max_steps)

    @property
    def alpha_spent(self) -> float:  # the sum of the steps' alphas: at most spec.alpha
        return math.fsum(s.alpha for s in self.steps)

    @property
    def ab_steps(self) -> int:  # the A/B steps that spent alpha
        return sum(1 for s in self.steps if s.alpha > 0)

    def affords(self, k: int) -> bool:
        """Whether ``k`` more A/B steps at alpha_step fit in the budget (exact arithmetic)."""
        spent = sum((Fraction(s.alpha) for s in self.steps), Fraction(0))
        return spent + k * Fraction(self.alpha_step) <= Fraction(self.spec.alpha)

    @property
    def probes(self) -> int:
        """The distinct commits the search judged (counted, or a side of an A/B step), good
        and bad included: what a linear scan's n + 1 compares with."""
        seen = {s.commit for s in self.steps} | {s.against for s in self.steps if s.against}
        return len(seen)


def first_parent_range(good: str, bad: str, root: Path) -> list[str]:
    """The commits after ``good`` up to ``bad`` along bad's first parents, oldest first; one
    line (UsageError) when good is not on that line."""
    git = ["git", "-C", str(root), "rev-list", "--first-parent"]
    r = process.run([*git, "--reverse", f"{good}..{bad}"], timeout=60)
    if not r.ok:
        why = r.error or r.stderr.strip()
        raise UsageError(f"git rev-list {good[:12]}..{bad[:12]} failed: {why}")
    commits = r.stdout.split()
    chain = process.run([*git, bad], timeout=60).stdout.split()
    if good not in chain:
        raise UsageError(f"--good {good[:12]} is not on --bad {bad[:12]}'s first-parent line")
    if not commits:
        raise UsageError("--good and --bad are the same commit: nothing to bisect")
    return commits


def subjects_of(commits: list[str], root: Path) -> dict:
    log = ["git", "-C", str(root), "log", "-1", "--format=%s"]
    return {sha: process.run([*log, sha], timeout=30).stdout.strip() for sha in commits}


def max_steps(n: int) -> int:
    """The steps the error budget is split over for a range of ``n`` commits."""
    return math.ceil(math.log2(max(2, n))) + 2 + SPARE_STEPS


def step_alpha(alpha: float, m: int) -> float:
    """alpha / m, rounded down: m of them sum to at most alpha, exactly."""
    a = alpha / m
    while Fraction(a) * m > Fraction(alpha):
        a = math.nextafter(a, 0.0)
    return a


def pick(lo: int, hi: int, skipped: set) -> int | None:
    """The commit to probe between the last good (``lo``) and the first bad (``hi``) index:
    the middle, or the nearest one to it that was not skipped (None: all were)."""
    mid = (lo + hi) // 2
    order = sorted(range(lo + 1, hi), key=lambda i: (abs(i - mid), i))
    return next((i for i in order if i not in skipped), None)


class _Search:
    """The state of one bisect call: the engine session of its counts, its steps."""

    def __init__(self, spec: BisectSpec, out: Path, session, result: BisectResult, seed: int):
        self.spec, self.out, self.session, self.result, self.seed = spec, out, session, result, seed
        self.workload = resolve_workload(spec.workload)
        if self.workload.command is not None:
            raise UsageError(f"bisect measures harness workloads; {spec.workload} is a command")
        if spec.iters is not None:
            from hakbench.experiments.runlength import with_iterations

            self.workload = with_iterations(self.workload, spec.iters)
        self.targets = fast_targets((self.workload.program,))
        self.counts: dict = {}

    def step(self, *args, **kw) -> Step:
        s = Step(*args, **kw)
        self.result.steps.append(s)
        return s

    def build(self, sha: str):
        """The revision's build directory, or None (the step says why) when it fails."""
        try:
            return build_at_rev(sha, targets=self.targets).build_dir
        except MeasurementError as e:
            self.step("count", sha, None, "build failed", SKIPPED, str(e)[:300])
            return None

    def count(self, sha: str) -> float | None:
        """The instructions per op of the workload at ``sha`` (one exact count, a sample)."""
        if sha in self.counts:
            return self.counts[sha]
        build = self.build(sha)
        if build is None:
            return None
        cell = make_cell("hakmem", self.workload, profile=self.spec.profile, build=build)
        tags = {"phase": "instructions", "cell": sha, "workload": self.workload.name}
        s = self.session.take(tags, lambda: instruction_sample(cell))
        ir = s["metrics"]["ir_per_op"] if s["status"] == "ok" else None
        self.counts[sha] = ir
        detail = f"{ir:.3f} Ir/op" if ir else f"count failed: {s.get('error')}"
        self.step("count", sha, None, "counted" if ir else "failed", "" if ir else SKIPPED, detail)
        return ir

    def ab(self, kind: str, a: str, b: str, threshold: float, alpha: float):
        """One paired sequential A/B step (A = ``a``, B = ``b``) at ``alpha``, which the step
        records as spent (nothing when a side does not build: no verdict)."""
        from hakbench.experiments.ab import run_ab

        k = len([s for s in self.result.steps if s.out])
        where = self.out / "steps" / f"{k:02d}-{kind}-{b[:10]}"
        metric = "cpu_throughput" if self.spec.metric == "auto" else self.spec.metric
        ab_spec = ABSpec(
            profile=self.spec.profile,
            workloads=(self.workload.name,),
            rev=b,
            baseline_rev=a,
            threshold_pct=threshold,
            alpha=alpha,
            metric=metric,
            max_time_s=self.spec.max_time_s,
            iters=self.spec.iters,
            seed=self.seed + k,
            observe=False,
            perf="off",
            rev_build="fast",
        )
        try:
            result = run_ab(
                ab_spec, where, show_progress=False, resume=(where / "meta.json").exists()
            )
        except MeasurementError as e:  # a side that does not build
            self.step(kind, b, a, "build failed", SKIPPED, str(e)[:300], str(where))
            return None
        if result.interrupted:
            raise KeyboardInterrupt
        (c,) = result.primary()
        detail = f"B/A {c.ratio:.4f} [{c.decide_low or c.ci_low:.4f}, "
        detail += f"{c.decide_high or c.ci_high:.4f}], {c.n_pairs} pairs, {c.stop}"
        return self.step(kind, b, a, c.verdict, "", detail, str(where), result.spec.alpha), c


def run_bisect(spec: BisectSpec, out: Path, *, resume: bool = False) -> BisectResult:
    """Search ``spec``'s range into ``out`` (see the module doc); ``resume``: replay the
    stored counts and steps of an interrupted call and finish it."""
    root = paths.repo_root()
    if spec.metric not in METRICS:
        raise UsageError(f"--metric {spec.metric}: one of {', '.join(METRICS)}")
    good, bad = resolve_rev(spec.good, root), resolve_rev(spec.bad, root)
    commits = first_parent_range(good, bad, root)
    spec = dataclasses.replace(spec, seed=spec.seed or engine.new_seed())
    meta = {"kind": "bisect", "spec": asdict(spec), "good": good, "bad": bad, "commits": commits}
    ident = engine.identity_of([], {}, out)
    ident["range"] = {"good": good, "bad": bad}
    store, meta, stored = engine.open_run(out, meta, resume=resume, ident=ident)
    if resume:
        spec = BisectSpec(**meta["spec"])
    result = BisectResult(spec, Path(out), commits, subjects_of([good, *commits], root))
    search = _Search(spec, Path(out), engine.Session(store, stored=stored), result, spec.seed)
    try:
        _search(search, good, commits)
    except KeyboardInterrupt:
        result.interrupted, result.stop = True, STOP_INTERRUPTED
    meta["steps"] = [asdict(s) for s in result.steps]
    meta["found"], meta["confirmed"] = result.found, result.confirmed
    meta["stop"], meta["candidates"] = result.stop, result.candidates
    meta["alpha"] = dict(total=spec.alpha, per_step=result.alpha_step, max_steps=result.max_steps)
    meta["alpha"]["spent"] = result.alpha_spent
    meta["finished"] = not result.interrupted
    store.write_meta(meta)
    from hakbench.report.bisect_md import write_bisect_report

    write_bisect_report(result, Path(out) / "report.md")
    return result


def _search(search: _Search, good: str, commits: list[str]) -> None:
    spec, result = search.spec, search.result
    bad, result.stop = commits[-1], STOP_NO_RANGE  # until the search concludes
    if spec.metric in ("auto", "instructions"):
        ir_good, ir_bad = search.count(good), search.count(bad)
        if ir_good is None or ir_bad is None:
            result.message = "the good or the bad revision could not be counted"
            return
        shows = abs(ir_bad / ir_good - 1) * 100 >= spec.threshold_pct
        if shows:
            result.how = "instructions"
            return _by_counts(search, good, commits, ir_good, ir_bad)
        if spec.metric == "instructions":
            result.message = (
                f"the bad revision's count is within {spec.threshold_pct:g} % of the good "
                f"one's ({ir_bad:.3f} against {ir_good:.3f} Ir/op): the regression does not "
                "show in instructions; bisect with --metric cpu_throughput"
            )
            return
    result.how = "timed"
    _by_pairs(search, good, commits)


def _bracket(commits: list[str], is_bad, halt) -> tuple[int, int, str]:
    """The binary search: (last good index, first bad index, why it stopped); index -1 is
    the good revision, len - 1 the bad one. ``is_bad(sha)``: True, False or None (skip);
    ``halt()``: why no further probe may run ("" while one may)."""
    lo, hi, skipped = -1, len(commits) - 1, set()
    while hi - lo > 1:
        if why := halt():
            return lo, hi, why
        i = pick(lo, hi, skipped)
        if i is None:
            return lo, hi, STOP_SKIPPED
        verdict = is_bad(commits[i])
        if verdict is None:
            skipped.add(i)
        elif verdict:
            hi = i
        else:
            lo = i
    return lo, hi, STOP_FOUND


def _conclude(result: BisectResult, commits: list[str], lo: int, hi: int, stop: str):
    """The found commit, or the candidates left and why (``result.message``)."""
    result.candidates, result.stop = [commits[i] for i in range(lo + 1, hi + 1)], stop
    if stop == STOP_FOUND:
        result.found = commits[hi]
        return
    n, spent = len(result.candidates), f"{result.alpha_spent:.4g} of {result.spec.alpha:g}"
    result.message = {
        STOP_BUDGET: f"the error budget ran out (alpha {spent} spent, the verification's share "
        f"unused) before the search converged: the first bad commit is one of {n}",
        STOP_GUARD: f"the search stopped after {len(result.steps)} steps, {n} commits left",
    }.get(stop, f"the first bad commit is one of {n}: the others were skipped")


def _by_counts(search: _Search, good: str, commits: list[str], ir_good: float, ir_bad: float):
    def is_bad(sha):
        ir = search.count(sha)
        if ir is None:
            return None
        bad = (ir - ir_good) / (ir_bad - ir_good) >= 0.5
        search.result.steps[-1].classified = BAD if bad else GOOD
        return bad

    for s in search.result.steps:  # the two counts that bracket the range
        if s.kind == "count" and s.commit in (good, commits[-1]):
            s.classified = GOOD if s.commit == good else BAD

    steps, limit = search.result.steps, 4 * search.result.max_steps  # counts spend no alpha
    lo, hi, stop = _bracket(commits, is_bad, lambda: STOP_GUARD if len(steps) >= limit else "")
    _conclude(search.result, commits, lo, hi, stop)
    if search.result.found:  # exact counts: the found commit against its parent
        parent = commits[hi - 1] if hi > 0 else good
        ir_found, ir_parent = search.count(commits[hi]), search.count(parent)
        share = (ir_found - ir_parent) / (ir_bad - ir_good)
        search.result.confirmed = ok = share >= 0.5
        detail = f"{ir_parent:.3f} -> {ir_found:.3f} Ir/op ({100 * (ir_found / ir_parent - 1):+.2f}"
        detail += f" %, {100 * share:.0f} % of the range's change)"
        search.step(
            "verify", commits[hi], parent, "confirmed" if ok else "not confirmed", "", detail
        )


def _by_pairs(search: _Search, good: str, commits: list[str]):
    """The timed search: every A/B step spends ``alpha_step`` of the call's alpha."""
    spec, result, a = search.spec, search.result, search.result.alpha_step
    confirm = search.ab("confirm", good, commits[-1], spec.threshold_pct, a)
    if confirm is None or confirm[0].verdict != NO_GO:
        got = "a build failed" if confirm is None else confirm[0].verdict
        result.message = f"the range is not confirmed as a regression ({got}): nothing to bisect"
        result.stop = STOP_NO_RANGE
        return
    confirm[0].classified, c = BAD, confirm[1]
    # each probe at half the confirmed regression: NO-GO has at least half, NEUTRAL at most
    half = max(spec.threshold_pct / 2, 100 * abs(math.log(c.ratio)) / 2)

    def is_bad(sha):
        found = search.ab("probe", good, sha, half, a)
        if found is None:
            return None
        s, _ = found
        s.classified = BAD if s.verdict == NO_GO else GOOD if s.verdict == NEUTRAL else UNDECIDED
        return {BAD: True, GOOD: False}.get(s.classified)

    # a probe runs only while it and the verification's reserved share both fit
    lo, hi, stop = _bracket(commits, is_bad, lambda: "" if result.affords(2) else STOP_BUDGET)
    _conclude(result, commits, lo, hi, stop)
    if result.found:
        assert result.affords(1)  # the reserved share: no probe ran into it
        parent = commits[hi - 1] if hi > 0 else good
        verify = search.ab("verify", parent, result.found, half, a)
        result.confirmed = verify is not None and verify[0].verdict == NO_GO
        if verify is not None:
            verify[0].classified = BAD if result.confirmed else UNDECIDED


def range_from_history(
    workload: str,
    *,
    allocator: str = f"hakmem:fast/{DEFAULT_PROFILE}",
    threshold_pct: float = 1.0,
    path: Path | None = None,
) -> tuple[str, str, str]:
    """(good, bad, why) from the scorecard's history (``results/history.csv``): bad is the
    last commit it measured ``workload`` at, good the latest earlier commit whose ratio to
    the reference allocator was at least ``threshold_pct`` better. One line (UsageError)
    when the history shows no such drop."""
    import csv

    path = path or paths.results_dir() / "history.csv"
    if not path.exists():
        raise UsageError(f"--from-history: no {path}")
    with open(path, newline="") as f:
        rows = [
            r
            for r in csv.DictReader(f)
            if r["workload"] == workload and r["allocator"] == allocator and r["status"] == "ok"
        ]
    if len(rows) < 2:
        raise UsageError(f"--from-history: fewer than 2 rows of {workload} / {allocator}")
    rows.sort(key=lambda r: r["date"])
    last = rows[-1]
    worse = float(last["ratio_to_reference"])
    for r in reversed(rows[:-1]):
        ratio = float(r["ratio_to_reference"])
        if ratio >= worse * (1 + threshold_pct / 100):
            why = (
                f"results/history.csv: {workload} {allocator} at {ratio:.4f} of "
                f"{r['reference']} on {r['date'][:16]} ({r['commit']}), {worse:.4f} on "
                f"{last['date'][:16]} ({last['commit']})"
            )
            # a refresh from a dirty tree is recorded as <sha>+dirty: its commit is the base
            if "+" in r["commit"] + last["commit"]:
                why += "; +dirty: measured with uncommitted changes its commit may not hold"
            return r["commit"].split("+")[0], last["commit"].split("+")[0], why
    raise UsageError(
        f"--from-history: {workload} ({allocator}) was never {threshold_pct:g} % better than "
        f"its last ratio {worse:.4f} in results/history.csv"
    )
