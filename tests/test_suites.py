"""The public suite (mimalloc-bench) as workloads: its definition in profiles/suites/, the
parsing of each program's own figure on outputs recorded from the real programs, finding and
building a checkout (hakbench.core.suites), and `run`/`ab` end to end on the stand-in suite
of tests/data (no network, no real suite). The stand-in's cmake build is cached in
build/suites/ like the real one's: the first run of this file builds it (~5 s quiet)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from hakbench.cli import main
from hakbench.core import suites
from hakbench.core.errors import EXIT_SUITE, UsageError
from hakbench.core.profiles import expand_workloads, load_suite_workloads, load_workloads
from hakbench.engine import suite_build
from hakbench.experiments.ab_plan import default_max_time, default_warmup
from hakbench.experiments.ab_spec import DEFAULT_WARMUP_PAIRS

REPO = Path(__file__).resolve().parents[1]
SUITE_FILE = REPO / "profiles" / "suites" / "mimalloc-bench.toml"
STANDIN = REPO / "tests" / "data" / "mimalloc-bench-standin"
OUTPUTS = REPO / "tests" / "data" / "mimalloc-bench-outputs"

# Every program of bench/ that builds from the repository alone (issue #36), and the
# variants bench.sh runs (1 and N threads) or issue #36 timed.
PROGRAMS = {
    "cfrac",
    "espresso",
    "barnes",
    "larson",
    "larson-sized",
    "mstress",
    "rptest",
    "alloc-test",
    "xmalloc-test",
    "cache-scratch",
    "cache-thrash",
    "glibc-simple",
    "glibc-thread",
    "malloc-large",
    "mleak",
}


@pytest.fixture(autouse=True)
def _no_suite_from_the_caller(monkeypatch):
    monkeypatch.delenv(suites.ENV_VAR, raising=False)
    suites.configure(None)
    yield
    suites.configure(None)


@pytest.fixture(scope="module")
def standin_build() -> Path:
    return suite_build.ensure_built(STANDIN)


# ---- the suite definition ----


def test_every_program_has_a_workload_with_bench_sh_arguments_scaled_to_the_cpus():
    wls = load_suite_workloads(SUITE_FILE, procs=7)
    programs = {Path(w.command.argv[0]).name for w in wls.values()}
    assert programs == PROGRAMS
    assert all(w.suite == "mimalloc-bench" for w in wls.values())
    # every program once in the suite's group; bench.sh's other lengths beside it
    judged = {n for n, w in wls.items() if "mimalloc-bench" in w.groups}
    assert {Path(wls[n].command.argv[0]).name for n in judged} == PROGRAMS
    assert len(
        {(Path(wls[n].command.argv[0]).name, wls[n].command.argv[1:2]) for n in judged}
    ) == len(judged)  # no program twice at one thread count
    others = set(wls) - judged
    assert others == {"mb-larson", "mb-larson-sized", "mb-xmalloc-test", "mb-mstress", "mb-mleak-5"}
    assert all(wls[n].groups == ("mimalloc-bench-alternatives",) for n in others)
    assert all(n.startswith("mb-") for n in wls)
    # bench.sh: larson 5 8 1000 5000 100 4141 $procs; xmalloc-test -w $procs -t 5 -s 64
    assert wls["mb-larson"].command.argv[1:] == ("5", "8", "1000", "5000", "100", "4141", "7")
    assert wls["mb-larson"].threads == 7
    assert wls["mb-xmalloc-test"].command.argv[1:] == ("-w", "7", "-t", "5", "-s", "64")
    assert wls["mb-alloc-test-1"].command.argv[1:] == ("1",)
    assert wls["mb-alloc-test-n"].command.argv[1:] == ("7",)
    assert wls["mb-mstress"].command.argv[1:] == ("7", "50", "25")
    assert wls["mb-mstress-400"].command.argv[1:] == ("7", "50", "400")
    assert wls["mb-barnes"].command.stdin == "{suite}/bench/barnes/input"
    # each program is judged on its own figure or its elapsed time, with its guardrails
    assert wls["mb-larson"].primary_metric == "app_rate"
    assert wls["mb-xmalloc-test"].primary_metric == "app_time_s"
    assert wls["mb-rptest"].primary_metric == "app_rate"
    assert wls["mb-glibc-thread"].primary_metric == "app_rate"
    assert wls["mb-cfrac"].primary_metric == "wall_s"
    for w in wls.values():
        assert w.command.guardrails == ("maxrss_kb", "page_faults"), w.name
        assert w.command.budget and w.description, w.name


def test_the_group_expands_and_abs_budget_and_warmup_are_the_programs_own():
    wls = load_workloads()
    names = expand_workloads(["@mimalloc-bench"], wls)
    assert len(names) == 18 and "mb-mstress-400" in names and "mb-mstress" not in names
    assert default_max_time(["@mimalloc-bench"]) == sum(wls[n].command.budget for n in names)
    assert default_max_time(["mixed"]) == 60.0  # harness workloads keep ab's default
    # the suite states one warm-up pair for every program: ab's default when all state it
    assert {wls[n].command.warmup for n in names} == {1}
    assert default_warmup(["@mimalloc-bench"]) == 1
    assert default_warmup(["@mimalloc-bench", "mixed"]) == DEFAULT_WARMUP_PAIRS


def test_an_alternative_must_name_a_judged_workload_of_its_suite(tmp_path):
    bad = tmp_path / "s.toml"
    bad.write_text(
        '[suite]\nname = "s"\n[workloads.a]\nargv = ["true"]\nalternative_to = "b"\n'
        '[workloads.c]\nargv = ["true"]\nalternative_to = "a"\n'
    )
    with pytest.raises(UsageError, match="alternative_to must name a workload of the suite"):
        load_suite_workloads(bad)
    bad.write_text('[suite]\nname = "s"\n[workloads.a]\nargv = ["true"]\nwarmup = -1\n')
    with pytest.raises(UsageError, match="warmup must be a whole number"):
        load_suite_workloads(bad)


@pytest.mark.parametrize(
    "workload, recorded, value",
    [
        ("mb-larson", "larson.txt", 14156655),
        ("mb-larson-sized", "larson-sized.txt", 7174621),  # two spaces before the figure
        ("mb-xmalloc-test", "xmalloc.txt", 9.303),
        ("mb-rptest", "rptest.txt", 326927),
        ("mb-glibc-thread", "glibc-thread.txt", 17124585),
    ],
)
def test_own_figures_parse_from_the_real_programs_recorded_output(workload, recorded, value):
    spec = load_suite_workloads(SUITE_FILE, procs=2)[workload].command
    assert spec.parse_metric((OUTPUTS / recorded).read_text()) == value
    assert spec.parse_metric("Segmentation fault\n") is None


# ---- finding the checkout ----


def test_missing_or_wrong_suite_dir_is_one_line_and_exit_5(tmp_path, monkeypatch):
    monkeypatch.setattr(suites, "default_clone_dir", lambda: tmp_path / "no-clone")
    with pytest.raises(suites.SuiteMissingError, match="pass --suite-dir PATH or set") as e:
        suites.resolve_suite_dir(None)
    assert e.value.exit_code == EXIT_SUITE == 5
    with pytest.raises(suites.SuiteMissingError, match="not a mimalloc-bench checkout"):
        suites.resolve_suite_dir(tmp_path)
    monkeypatch.setenv(suites.ENV_VAR, str(tmp_path / "gone"))
    with pytest.raises(suites.SuiteMissingError, match=r"\$HAKBENCH_MIMALLOC_BENCH"):
        suites.resolve_suite_dir(None)
    r = CliRunner().invoke(main, ["run", "-w", "mb-mstress", "-n", "1"])
    assert r.exit_code == 5
    assert r.output.strip().count("\n") == 0 and "not a directory" in r.output


def test_option_beats_environment_beats_the_make_suites_clone(tmp_path, monkeypatch):
    other = tmp_path / "other"
    (other / "bench").mkdir(parents=True)
    (other / "bench" / "CMakeLists.txt").write_text("project(x C)\n")
    monkeypatch.setattr(suites, "default_clone_dir", lambda: other)
    assert suites.resolve_suite_dir(None) == other.resolve()
    monkeypatch.setenv(suites.ENV_VAR, str(STANDIN))
    assert suites.resolve_suite_dir(None) == STANDIN
    suites.configure(other)
    assert suites.resolve_suite_dir(None) == other.resolve()
    assert suites.resolve_suite_dir(STANDIN) == STANDIN


def test_commit_of_a_git_checkout_a_dirty_one_and_a_plain_tree(tmp_path):
    suite = tmp_path / "suite"
    shutil.copytree(STANDIN, suite)
    plain = suite_build.suite_commit(suite)
    assert plain.startswith("tree-")
    (suite / "bench" / "extra.c").write_text("int x;\n")
    assert suite_build.suite_commit(suite) != plain  # the digest follows the files
    git = ["git", "-C", str(suite), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "x"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    assert suite_build.suite_commit(suite) == head.strip()
    (suite / "bench" / "extra.c").write_text("int y;\n")
    assert suite_build.suite_commit(suite) == head.strip() + "+dirty"
    # a directory inside another checkout (the stand-in in this repository) is a tree
    assert suite_build.suite_commit(STANDIN).startswith("tree-")


# ---- building it ----


def test_the_lab_builds_the_checkout_out_of_tree_and_skips_absent_sources(standin_build):
    programs = {p.name for p in standin_build.iterdir() if p.is_file() and os.access(p, os.X_OK)}
    assert PROGRAMS <= programs
    assert suites.skipped_targets(standin_build) == ["sh6bench"]  # its source is absent
    assert standin_build.parent == suites.default_cache_root()
    assert suite_build.suite_commit(STANDIN) in standin_build.name
    started = (standin_build / "hakbench-skip-missing.cmake").stat().st_mtime  # written first
    written = [p for p in STANDIN.rglob("*") if p.stat().st_mtime >= started]
    assert written == []  # nothing written into the checkout: every file predates the build
    stamp = json.loads((standin_build / suites.STAMP).read_text())
    assert stamp["commit"] == suite_build.suite_commit(STANDIN)
    assert suite_build.ensure_built(STANDIN) == standin_build  # reused, not rebuilt


def test_a_build_without_cmake_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(suites.SuiteBuildError, match="cmake not installed"):
        suite_build.ensure_built(STANDIN, tmp_path / "cache")


# ---- run and ab, end to end on the stand-in ----


def test_run_records_the_suite_its_commit_the_peers_and_thp(standin_build, tmp_path):
    out = tmp_path / "run"
    args = ["run", "-w", "mb-larson-2s", "-a", "system", "-n", "2", "--warmups", "0"]
    r = CliRunner().invoke(
        main, [*args, "--perf", "off", "--suite-dir", str(STANDIN), "--out", str(out)]
    )
    assert r.exit_code == 0, r.output
    meta = json.loads((out / "meta.json").read_text())
    suite = meta["suites"]["mimalloc-bench"]
    assert suite["path"] == str(STANDIN)
    assert suite["commit"] == suite_build.suite_commit(STANDIN)
    assert suite["build_dir"] == str(standin_build)
    assert suite["skipped_targets"] == ["sh6bench"]
    assert set(meta["reference_packages"]) >= {"libmimalloc2.0", "libjemalloc2"}
    assert meta["thp_enabled"]
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    measured = [s for s in samples if s["phase"] == "measure"]
    assert len(measured) == 2 and all(s["status"] == "ok" for s in measured)
    assert all(s["metrics"]["app_rate"] > 0 and s["metrics"]["maxrss_kb"] > 0 for s in measured)
    assert measured[0]["argv"][0] == str(standin_build / "larson")


def test_ab_judges_each_program_and_its_peak_rss_guardrail(standin_build, tmp_path):
    out = tmp_path / "ab"
    args = ["ab", "-a", "system", "--baseline-allocator", "mimalloc", "-w", "mb-larson-2s"]
    args += ["-w", "mb-mstress", "-n", "4", "--warmup", "0", "--perf", "off"]
    r = CliRunner().invoke(main, [*args, "--suite-dir", str(STANDIN), "--out", str(out)])
    assert r.exit_code == 0, r.output
    report = (out / "report.md").read_text()
    for w in ("mb-larson-2s", "mb-mstress"):
        assert w in report
    summary = json.loads((out / "meta.json").read_text())
    samples = (out / "samples.jsonl").read_text().splitlines()
    assert set(summary["verdicts"]) == {"mb-larson-2s", "mb-mstress"}
    assert all(
        v in ("GO", "NO-GO", "NEUTRAL", "INCONCLUSIVE") for v in summary["verdicts"].values()
    )
    assert "guardrail" in report.lower() and "maxrss_kb" in report
    assert summary["suites"]["mimalloc-bench"]["commit"] == suite_build.suite_commit(STANDIN)
    # --resume takes the checkout's place beside it (a finished run: nothing to add)
    again = CliRunner().invoke(main, ["ab", "--resume", str(out), "--suite-dir", str(STANDIN)])
    assert again.exit_code == 0, again.output
    assert len((out / "samples.jsonl").read_text().splitlines()) == len(samples)


# ---- the scorecard's "Public suites" section ----

TINY_SUITE = """
name = "tiny-suite"
runs = 2
quick_runs = 1
warmup = 0
seed = 3
reference = { allocator = "mimalloc" }
[axes]
allocator = ["hakmem", "system", "mimalloc"]
profile = ["C7_SAFE"]
workload = ["mb-mstress", "mb-larson-2s"]
"""


def small_main_scorecard(d: Path) -> None:
    """The committed main scorecard cut to one workload: render needs one, and all of it
    takes seconds to draw."""
    main_dir = REPO / "results" / "scorecard"
    meta = json.loads((main_dir / "meta.json").read_text())
    meta["cells"] = [c for c in meta["cells"] if c["coords"]["workload"] == "mixed"]
    keys = {c["key"] for c in meta["cells"]}
    lines = (main_dir / "samples.jsonl").read_text().splitlines()
    d.mkdir(parents=True)
    (d / "meta.json").write_text(json.dumps(meta))
    kept = [line for line in lines if json.loads(line).get("cell") in keys]
    (d / "samples.jsonl").write_text("\n".join(kept) + "\n")


def test_public_suites_section_is_stored_rendered_and_checked(standin_build, tmp_path):
    from hakbench.experiments import scorecard, scorecard_refresh

    results = tmp_path / "results"
    small_main_scorecard(results / scorecard.STORED_DIR)
    matrix = tmp_path / "suite.toml"
    matrix.write_text(TINY_SUITE)
    suites.configure(STANDIN)
    jemalloc = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"  # one more allocator, by path
    scorecard_refresh.refresh(results, matrix=matrix, suite=True, allocators=(f"je={jemalloc}",))
    stored = results / scorecard.SUITE_STORED_DIR
    meta = json.loads((stored / "meta.json").read_text())
    assert meta["suites"]["mimalloc-bench"]["commit"] == suite_build.suite_commit(STANDIN)
    md = (results / "SCORECARD.md").read_text()
    section = md[md.index("## Public suites: mimalloc-bench") :]
    assert "Refresh: `hakbench scorecard --refresh --suite`" in section
    assert "| mb-mstress | je |" in section and "| mb-larson-2s | system |" in section
    assert "### Geometric means over the programs (ratio to mimalloc)" in section
    assert "Worst: **mb-" in section  # libhakmem against each program's fastest peer
    plots = tmp_path / "plots"
    plots.mkdir()
    again, charts = scorecard.suite_section(results, plots)  # from the stored samples alone
    assert again in md and len(charts) == 2


def test_make_suites_without_network_says_how_to_point_at_a_checkout(tmp_path, monkeypatch):
    monkeypatch.setattr(suites, "default_clone_dir", lambda: tmp_path / "clone")
    assert suite_build.main([str(tmp_path / "no-such-mirror")]) == EXIT_SUITE
    with pytest.raises(suites.SuiteMissingError, match="point hakbench at an existing checkout"):
        suite_build.clone_pinned(str(tmp_path / "no-such-mirror"), tmp_path / "clone")
    assert not (tmp_path / "clone").exists() and not (tmp_path / "clone.partial").exists()
