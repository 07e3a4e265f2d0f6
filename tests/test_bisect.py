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
        self.result.max_steps = bisect.max_steps(16)
        self.result.alpha_step = self.spec.alpha / self.result.max_steps
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

    def ab(self, kind, a, b, threshold):
        from types import SimpleNamespace

        self.judged.append(b)
        if b in self.unbuildable:
            self.step(kind, b, a, "build failed", bisect.SKIPPED, "make failed")
            return None
        worse = self.index(b) >= self.CULPRIT > self.index(a)
        verdict = "INCONCLUSIVE" if b in self.undecided else "NO-GO" if worse else "NEUTRAL"
        c = SimpleNamespace(verdict=verdict, ratio=0.97 if worse else 1.0)
        return self.step(kind, b, a, verdict, "", "fake"), c


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
