"""``hakbench bisect``: the search itself (pure), the range from the scorecard's history, the
first-parent range of a real repository, and (slow: HAKBENCH_SLOW=1, run by .ci/run) the
whole command on a clone of this repository with 16 trivial commits, one of which adds a
loop to malloc's fast path: found with exact counts in fewer steps than a linear scan,
confirmed against its parent, interrupted and resumed without judging a commit twice."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from hakbench.cli import main
from hakbench.core.errors import UsageError
from hakbench.experiments import bisect

ROOT = Path(__file__).resolve().parents[1]
SLOW = pytest.mark.slow  # builds 6+ revisions: only with HAKBENCH_SLOW=1 (.ci/run)
REGRESSION_AT = 11  # of 16 commits: the one that adds a loop to hak_malloc's fast path


def git(root: Path, *args: str) -> str:
    r = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def test_pick_takes_the_middle_or_the_nearest_not_skipped():
    assert bisect.pick(-1, 15, set()) == 7
    assert bisect.pick(-1, 15, {7}) == 6
    assert bisect.pick(-1, 15, {6, 7}) == 8
    assert bisect.pick(3, 5, {4}) is None
    assert bisect.max_steps(16) == 4 + 2 + bisect.SPARE_STEPS


def test_range_from_history_takes_the_last_drop(tmp_path):
    path = tmp_path / "history.csv"
    head = "date,commit,workload,allocator,status,median_ops_s,reference,ratio_to_reference\n"
    rows = [
        ("2026-11-20T00:00:00", "aaaa", 1.00),
        ("2026-11-21T00:00:00", "bbbb", 1.03),
        ("2026-11-22T00:00:00", "cccc+dirty", 1.025),
        ("2026-11-23T00:00:00", "dddd", 0.99),
    ]
    path.write_text(
        head + "".join(f"{d},{c},mixed,hakmem:fast/C7_SAFE,ok,1,mimalloc,{r}\n" for d, c, r in rows)
    )
    good, bad, why = bisect.range_from_history("mixed", threshold_pct=1.0, path=path)
    assert (good, bad) == ("cccc", "dddd") and "1.0250" in why
    with pytest.raises(UsageError, match="never 5 % better"):
        bisect.range_from_history("mixed", threshold_pct=5.0, path=path)


def test_the_range_is_the_first_parent_line(tmp_path):
    repo = tmp_path / "r"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "t@t")
    git(repo, "config", "user.name", "t")
    shas = []
    for i in range(4):
        (repo / "f").write_text(str(i))
        git(repo, "commit", "-qam" if i else "-qm", f"c{i}", *([] if i else ["--allow-empty"]))
        if i == 0:
            git(repo, "add", "f")
            git(repo, "commit", "-qm", "add f")
        shas.append(git(repo, "rev-parse", "HEAD"))
    # a side branch merged in: its commit is not on the first-parent line
    git(repo, "checkout", "-q", "-b", "side", shas[1])
    (repo / "g").write_text("side")
    git(repo, "add", "g")
    git(repo, "commit", "-qm", "side")
    side = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "-q", "main")
    git(repo, "merge", "-q", "--no-ff", "-m", "merge", "side")
    merge = git(repo, "rev-parse", "HEAD")
    got = bisect.first_parent_range(shas[1], merge, repo)
    assert got == [shas[2], shas[3], merge] and side not in got
    with pytest.raises(UsageError, match="not on"):
        bisect.first_parent_range(side, shas[3], repo)


def test_bad_input_is_one_line_exit_2():
    r = CliRunner().invoke(main, ["bisect", "--good", "HEAD~1"])
    assert r.exit_code == 2 and "needs --good, --bad and -w" in r.output
    r = CliRunner().invoke(main, ["bisect", "--good", "nope-xyz", "--bad", "HEAD", "-w", "mixed"])
    assert r.exit_code == 2 and "unknown git revision" in r.output


def make_range(tmp_path: Path) -> tuple[Path, str, str, str]:
    """A clone of this repository (its committed HEAD) with 16 commits on top, each touching
    a text file, the REGRESSION_AT-th also adding an 8-iteration loop to hak_malloc."""
    clone = tmp_path / "lab"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    git(clone, "config", "user.email", "t@t")
    git(clone, "config", "user.name", "t")
    good = git(clone, "rev-parse", "HEAD")
    wrappers = clone / "allocator" / "src" / "wrappers.c"
    culprit = ""
    for i in range(1, 17):
        with open(clone / "BISECT_FIXTURE.txt", "a") as f:
            f.write(f"commit {i}\n")
        git(clone, "add", "BISECT_FIXTURE.txt")
        if i == REGRESSION_AT:
            text = wrappers.read_text()
            old = "HAK_EXPORT HAK_HOT_ALIGN void *hak_malloc(size_t size) {\n"
            assert old in text
            loop = '    for (int i = 8; i > 0; i--) __asm__ volatile("" : : : "memory");\n'
            wrappers.write_text(text.replace(old, old + loop, 1))
            git(clone, "add", str(wrappers))
        git(
            clone, "commit", "-qm", f"fixture {i}" + (": slow malloc" if i == REGRESSION_AT else "")
        )
        if i == REGRESSION_AT:
            culprit = git(clone, "rev-parse", "HEAD")
    return clone, good, git(clone, "rev-parse", "HEAD"), culprit


@SLOW
def test_bisect_finds_the_injected_regression_with_counts(tmp_path, monkeypatch):
    clone, good, bad, culprit = make_range(tmp_path)
    monkeypatch.setenv("HAKBENCH_ROOT", str(clone))
    out = tmp_path / "bisect"
    args = ["bisect", "--good", good, "--bad", bad, "-w", "mixed", "--iters", "20000"]
    r = CliRunner().invoke(main, [*args, "--out", str(out)])
    assert r.exit_code == 0, r.output
    meta = json.loads((out / "meta.json").read_text())
    assert meta["found"] == culprit and meta["confirmed"] is True
    counts = [s for s in meta["steps"] if s["kind"] == "count"]
    assert len(counts) < 16  # fewer commits judged than a linear scan of the 16
    report = (out / "report.md").read_text()
    assert f"First bad commit: `{culprit[:12]}` fixture {REGRESSION_AT}: slow malloc" in report
    assert "exact instruction counts" in report
    # --resume of the finished search judges nothing again: every count is a stored sample
    before = (out / "samples.jsonl").read_text()
    r = CliRunner().invoke(main, ["bisect", "--resume", str(out)])
    assert r.exit_code == 0, r.output
    assert (out / "samples.jsonl").read_text() == before
    assert json.loads((out / "meta.json").read_text())["found"] == culprit


class FakeSearch:
    """The search's steps without builds: commit i of 16 is bad from CULPRIT on; an A/B
    step says NO-GO when its B side is bad and its A side is not, else NEUTRAL; one commit
    does not build."""

    CULPRIT = 9

    def __init__(self, unbuildable=(), undecided=()):
        self.spec = bisect.BisectSpec(good="g", bad="b", workload="mixed", metric="auto")
        self.commits = [f"c{i:02d}" for i in range(16)]
        self.result = bisect.BisectResult(self.spec, Path("."), self.commits, {})
        self.unbuildable, self.undecided = set(unbuildable), set(undecided)
        self.judged = []

    def index(self, sha):
        return -1 if sha == "g" else self.commits.index(sha)

    def step(self, *args, **kw):
        s = bisect.Step(*args, **kw)
        self.result.steps.append(s)
        return s

    def count(self, sha):
        self.judged.append(sha)
        if sha in self.unbuildable:
            self.step("count", sha, None, "build failed", bisect.SKIPPED, "make failed")
            return None
        ir = 100.0 + (20.0 if self.index(sha) >= self.CULPRIT else 0.0)
        self.step("count", sha, None, "counted", "", f"{ir} Ir/op")
        return ir

    def ab(self, kind, a, b, threshold, alpha):
        from types import SimpleNamespace

        self.judged.append(b)
        if b in self.unbuildable:  # no verdict: spends no alpha
            self.step(kind, b, a, "build failed", bisect.SKIPPED, "make failed", f"steps/{b}")
            return None
        worse = self.index(b) >= self.CULPRIT > self.index(a)
        verdict = "INCONCLUSIVE" if b in self.undecided else "NO-GO" if worse else "NEUTRAL"
        c = SimpleNamespace(verdict=verdict, ratio=0.97 if worse else 1.0)
        return self.step(kind, b, a, verdict, "", "fake", f"steps/{b}", alpha), c


def test_counts_find_the_culprit_in_log_steps_and_skip_what_does_not_build():
    search = FakeSearch(unbuildable={"c07"})
    bisect._by_counts(search, "g", search.commits, 100.0, 120.0)
    assert search.result.found == "c09" and search.result.confirmed
    assert len(set(search.judged)) <= 6  # log2(16) probes + a neighbour of the skipped one
    assert any(s.verdict == "build failed" and s.commit == "c07" for s in search.result.steps)


def test_timed_steps_confirm_probe_at_half_and_verify_against_the_parent():
    search = FakeSearch(undecided={"c11"})
    bisect._by_pairs(search, "g", search.commits)
    kinds = [s.kind for s in search.result.steps]
    assert kinds[0] == "confirm" and kinds[-1] == "verify"
    assert search.result.found == "c09" and search.result.confirmed
    probes = [s for s in search.result.steps if s.kind == "probe"]
    assert len(probes) <= search.result.max_steps - 2  # within the error budget's steps
    assert any(s.commit == "c11" and s.classified == bisect.UNDECIDED for s in probes)
    verify = search.result.steps[-1]
    assert verify.against == "c08" and verify.commit == "c09"


def test_an_undecided_neighbour_leaves_both_candidates():
    search = FakeSearch(undecided={"c08"})
    bisect._by_pairs(search, "g", search.commits)
    assert search.result.found is None and search.result.candidates == ["c08", "c09"]


def test_a_range_that_is_no_regression_is_not_bisected():
    search = FakeSearch()
    search.CULPRIT = 99  # nothing is bad: the confirmation is NEUTRAL
    bisect._by_pairs(search, "g", search.commits)
    assert search.result.found is None and "not confirmed" in search.result.message


def test_a_stop_writes_the_report_of_the_steps_that_finished(tmp_path, monkeypatch):
    """SIGINT during the search (here: after its first step) writes report.md and meta.json
    from what finished and exits 130 with the --resume command; the directory resumes."""

    def one_step_then_stop(search, good, commits):
        search.step("count", good, None, "counted", bisect.GOOD, "83.662 Ir/op")
        raise KeyboardInterrupt

    monkeypatch.setattr(bisect, "_search", one_step_then_stop)
    out = tmp_path / "b"
    r = CliRunner().invoke(
        main, ["bisect", "--good", "HEAD~2", "--bad", "HEAD", "-w", "mixed", "--out", str(out)]
    )
    assert r.exit_code == 130, r.output
    assert f"hakbench bisect --resume {out}" in r.output
    meta = json.loads((out / "meta.json").read_text())
    assert meta["finished"] is False and len(meta["steps"]) == 1
    assert "**Interrupted**" in (out / "report.md").read_text()
    monkeypatch.setattr(bisect, "_search", lambda search, good, commits: None)
    r = CliRunner().invoke(main, ["bisect", "--resume", str(out)])
    assert json.loads((out / "meta.json").read_text())["finished"] is True
    assert r.exit_code == 3 and "no commit found" in r.output  # (nothing was searched)


def test_the_step_alpha_never_sums_past_the_call_alpha():
    from fractions import Fraction

    for alpha in (0.05, 0.01, 0.1, 0.003):
        for m in range(2, 40):
            a = bisect.step_alpha(alpha, m)
            assert Fraction(a) * m <= Fraction(alpha) and a > alpha / m * (1 - 1e-12)


def assert_within_budget(result):
    """Bonferroni as promised: the steps' alphas sum to at most the call's alpha, every A/B
    step that reached a verdict spent alpha_step, and no more of them ran than m."""
    from fractions import Fraction

    alpha, a = result.spec.alpha, result.alpha_step
    timed = [s for s in result.steps if s.verdict != "build failed"]
    assert all(s.alpha == a for s in timed)
    assert len(timed) == result.ab_steps <= result.max_steps
    assert sum(Fraction(s.alpha) for s in result.steps) <= Fraction(alpha)  # exactly
    assert result.alpha_spent <= alpha


def test_undecided_steps_stop_once_the_alpha_budget_is_spent():
    """Every probe INCONCLUSIVE: the old guard (4 m steps) let all 15 probes run at
    alpha / m, twice the call's alpha; the budget stops after m - 2 probes, keeps the
    verification's share and says so."""
    search = FakeSearch(undecided={f"c{i:02d}" for i in range(15)})
    bisect._by_pairs(search, "g", search.commits)
    result, m = search.result, search.result.max_steps
    assert_within_budget(result)
    assert result.stop == bisect.STOP_BUDGET and result.found is None
    assert [s.kind for s in result.steps] == ["confirm"] + ["probe"] * (m - 2)
    assert result.affords(1)  # the verification's share is left unspent
    assert result.candidates == search.commits  # nothing was told apart
    assert "error budget ran out" in result.message
    from hakbench.report.bisect_md import bisect_lines

    result.how = "timed"  # (what _search sets before _by_pairs)
    report = "\n".join(bisect_lines(result))
    assert f"Stopped: {bisect.STOP_BUDGET}." in report
    assert f"**Alpha spent: {result.alpha_spent:.4g} of 0.05** in {m - 1} A/B steps" in report
    assert "**The first bad commit is one of:**" in report and "`c15`" in report
    assert report.count(f"| {result.alpha_step:.4g} |") == m - 1  # each step's alpha


def test_the_verification_against_the_parent_keeps_its_reserved_alpha():
    # converges with the last probe that fits: the verification still runs, at alpha / m
    search = FakeSearch(undecided={"c06", "c07", "c11"})
    bisect._by_pairs(search, "g", search.commits)
    result, m = search.result, search.result.max_steps
    assert result.found == "c09" and result.confirmed and result.stop == bisect.STOP_FOUND
    assert [s.kind for s in result.steps].count("probe") == m - 2
    assert result.steps[-1].kind == "verify" and result.steps[-1].alpha == result.alpha_step
    assert_within_budget(result)
    assert not result.affords(1)  # the whole budget spent, none of it twice
    # one probe more would be needed: it would take the verification's share, so it does
    # not run (the old code ran it and the verification, m + 1 steps at alpha / m)
    search = FakeSearch(undecided={"c06", "c07", "c10", "c11"})
    bisect._by_pairs(search, "g", search.commits)
    result = search.result
    assert result.stop == bisect.STOP_BUDGET and result.found is None
    assert "verify" not in [s.kind for s in result.steps] and result.affords(1)
    assert_within_budget(result)
    assert result.candidates == ["c09", "c10", "c11", "c12"]  # after c08, up to c12
    # a step without a verdict (a side does not build) spends nothing
    search = FakeSearch(unbuildable={"c07"}, undecided={"c11"})
    bisect._by_pairs(search, "g", search.commits)
    assert search.result.found == "c09" and search.result.confirmed
    assert_within_budget(search.result)
    failed = [s for s in search.result.steps if s.verdict == "build failed"]
    assert failed and all(s.alpha == 0 for s in failed)


def test_resume_goes_on_with_the_budget_left_not_a_fresh_one(tmp_path, monkeypatch):
    """run_bisect with a fake ``run_ab`` (no builds, no pairs): every probe INCONCLUSIVE,
    stopped during its 3rd A/B step; --resume replays the stored steps, which spend their
    alphas again, and runs only the A/B steps the budget has left."""
    from types import SimpleNamespace

    from hakbench.experiments import ab

    calls, stop_at = [], [3]

    def fake_run_ab(ab_spec, where, *, show_progress, resume):
        calls.append((where.name, resume, ab_spec.alpha))
        where.mkdir(parents=True, exist_ok=True)
        (where / "meta.json").write_text(json.dumps({"kind": "ab", "alpha": ab_spec.alpha}))
        c = SimpleNamespace(
            verdict="NO-GO" if "confirm" in where.name else "INCONCLUSIVE",
            ratio=0.97,
            decide_low=0.96,
            decide_high=0.98,
            ci_low=0.96,
            ci_high=0.98,
            n_pairs=32,
            stop="fake",
        )
        stopped = not resume and len(calls) == stop_at[0]
        return SimpleNamespace(interrupted=stopped, spec=ab_spec, primary=lambda: [c])

    monkeypatch.setattr(ab, "run_ab", fake_run_ab)
    # the tree may change while this runs (another checkout's edits): not what is tested
    monkeypatch.setattr(bisect.engine, "identity_of", lambda *a, **k: {"tree": "fixed"})
    good, bad = git(ROOT, "rev-parse", "HEAD~16"), git(ROOT, "rev-parse", "HEAD")
    spec = bisect.BisectSpec(good=good, bad=bad, workload="mixed", metric="cpu_throughput")
    out = tmp_path / "b"
    first = bisect.run_bisect(spec, out)
    m, a = first.max_steps, first.alpha_step
    assert first.interrupted and first.ab_steps == 2 and len(calls) == 3
    stored = json.loads((out / "meta.json").read_text())
    assert (
        stored["alpha"]["spent"] == pytest.approx(2 * a)
        and stored["stop"] == bisect.STOP_INTERRUPTED
    )
    calls.clear()
    stop_at[0] = 0
    second = bisect.run_bisect(spec, out, resume=True)
    assert [c[1] for c in calls[:3]] == [True] * 3  # the stored steps, replayed
    assert len(calls) == m - 1  # in all: the confirmation and m - 2 probes
    assert [s["alpha"] for s in stored["steps"]] == [s.alpha for s in second.steps[:2]]
    assert second.stop == bisect.STOP_BUDGET and not second.interrupted
    assert_within_budget(second)
    assert second.ab_steps == m - 1 and second.affords(1)
    meta = json.loads((out / "meta.json").read_text())
    assert meta["alpha"] == {
        "total": 0.05,
        "per_step": a,
        "max_steps": m,
        "spent": pytest.approx((m - 1) * a),
    }
    assert len(meta["candidates"]) == 16
    assert "Alpha spent" in (out / "report.md").read_text()
