"""run_sample on real processes: the real harness, and small scripts that crash, hang,
lie about their allocator or print stats lines, placed as programs of a tmp lab."""

import os
import textwrap
from pathlib import Path

import pytest

from hakbench.core import paths
from hakbench.engine.cells import make_cell
from hakbench.engine.runner import perf_usable, run_sample

REAL_BENCH = Path(__file__).resolve().parents[1] / "build" / "bench"

SCRIPTS = {
    "crasher": 'echo "crasher: about to fault" >&2\nkill -SEGV $$\n',
    "sleeper": "sleep 30\n",
    "exit3": 'echo "bad thing" >&2\nexit 3\n',
    "liar": 'echo "Throughput = 5 ops/s"\necho "malloc_impl=/opt/libother.so"\n',
    "stats": 'echo "Throughput = 5 ops/s"\necho "malloc_impl=/lib/libc.so.6"\n'
    'echo "[SS_OS_STATS] alloc=${HAKMEM_STATS:-0} free=1" >&2\n',
}


@pytest.fixture
def lab(tmp_path, monkeypatch):
    bench = tmp_path / "build" / "bench"
    bench.mkdir(parents=True)
    for name, body in SCRIPTS.items():
        (bench / name).write_text("#!/bin/sh\n" + body)
        (bench / name).chmod(0o755)
    (bench / "bench_random_mixed").symlink_to(REAL_BENCH / "bench_random_mixed")
    (tmp_path / "profiles").mkdir()
    toml = "".join(f'[{n}]\nprogram = "{n}"\n' for n in SCRIPTS)
    toml += textwrap.dedent("""\
        [short]
        program = "bench_random_mixed"
        args = ["--min", "16", "--max", "1024", "--ws", "64", "--iters", "20000", "--seed", "7"]
        """)
    (tmp_path / "profiles" / "workloads.toml").write_text(toml)
    monkeypatch.setenv("HAKBENCH_ROOT", str(tmp_path))
    assert paths.repo_root() == tmp_path
    return tmp_path


needs_harness = pytest.mark.skipif(
    not (REAL_BENCH / "bench_random_mixed").exists(), reason="make build first"
)


@needs_harness
@pytest.mark.parametrize("perf", [True, False])
def test_real_harness_sample(lab, perf):
    s = run_sample(make_cell("system", "short"), perf=perf)
    assert s["status"] == "ok", s
    m = s["metrics"]
    assert m["throughput"] > 0 and m["maxrss_kb"] > 0 and m["page_faults"] > 0
    # perf 6.1 sometimes does not reap its child (see runner's docstring): its tool times are
    # then declared unavailable, never reported as 0
    for t in ("user_s", "sys_s"):
        assert (t in m and m[t] >= 0) or (perf and t in s["unavailable"])
    assert s["harness"]["checksum"]
    if perf and perf_usable():
        assert "task_clock_ms" in m and "nvcsw" in s["unavailable"]
    else:
        assert s["launcher"] == "direct"
        assert "nvcsw" in m and "task_clock_ms" in s["unavailable"]
        assert m["context_switches"] == m["nvcsw"] + m["nivcsw"]
    # The harness's own peak (VmHWM), not the ~70 MB of the Python that exec'd it, which
    # getrusage/wait4's ru_maxrss would carry across exec.
    assert m["maxrss_kb"] < 20 * 1024
    for hw in ("cycles", "instructions"):  # this VM has no hardware counters
        assert hw in m or hw in s["unavailable"]
        assert m.get(hw) != 0


@needs_harness
def test_caller_env_does_not_leak(lab, monkeypatch):
    monkeypatch.setenv("LD_PRELOAD", "/usr/lib/x86_64-linux-gnu/libmimalloc.so.2")
    s = run_sample(make_cell("system", "short"), perf=False)
    assert s["status"] == "ok" and "libc.so" in s["harness"]["malloc_impl"]


@pytest.mark.parametrize("launcher", ["perf", "direct"])
def test_crash_is_recorded_with_signal_and_stderr(lab, launcher):
    s = run_sample(make_cell("system", "crasher"), perf=launcher == "perf")
    if launcher != "perf" or perf_usable():
        # perf may lose the status (its SIGCHLD race): the runner re-runs directly, and says so
        assert s["launcher"] == launcher or s.get("perf_lost_status")
    assert s["status"] == "failed"
    assert s["signal"] == 11 and "SIGSEGV" in s["error"]
    assert "about to fault" in s["stderr_tail"]
    assert "throughput" not in s["metrics"]


def test_timeout_kills_the_process_group(lab):
    s = run_sample(make_cell("system", "sleeper"), timeout=0.5)
    assert s["status"] == "timeout" and "timed out" in s["error"]


def test_nonzero_exit_and_wrong_allocator(lab):
    s = run_sample(make_cell("system", "exit3"), perf=False)
    assert s["status"] == "failed" and s["returncode"] == 3 and "bad thing" in s["stderr_tail"]
    s = run_sample(make_cell("system", "liar"), perf=False)
    assert s["status"] == "wrong_allocator" and "libother" in s["error"]


def test_stats_run_switches_stats_on_and_parses_groups(lab):
    s = run_sample(make_cell("system", "stats"), perf=False, stats=True)
    assert s["status"] == "ok"
    assert s["alloc_stats"]["SS_OS_STATS"] == {"alloc": 1, "free": 1}
    s = run_sample(make_cell("system", "stats"), perf=False)
    assert s["alloc_stats"]["SS_OS_STATS"]["alloc"] == 0


def test_missing_program_is_an_error_sample(lab):
    os.unlink(lab / "build" / "bench" / "liar")
    s = run_sample(make_cell("system", "liar"))
    assert s["status"] == "error" and "not built" in s["error"]


@needs_harness
def test_run_command_measures_one_cell(lab):
    from click.testing import CliRunner

    from hakbench.cli import main

    out = lab / "res"
    r = CliRunner().invoke(
        main, ["run", "-a", "system", "-w", "short", "-n", "3", "--out", str(out)]
    )
    assert r.exit_code == 0, r.output
    assert r.output.strip().splitlines()[-1] == str(out)
    summary = (out / "summary.csv").read_text()
    assert "throughput" in summary and ",3," in summary
    assert len((out / "samples.jsonl").read_text().splitlines()) == 4  # 1 warm-up + 3
    r = CliRunner().invoke(main, ["run", "-a", "system", "-w", "crasher", "-n", "2"])
    assert r.exit_code == 3 and "no run of system succeeded" in r.output


@needs_harness
def test_run_perf_observe_keeps_perf_out_of_the_measured_runs(lab):
    from click.testing import CliRunner

    from hakbench.cli import main
    from hakbench.engine.store import load_samples

    out = lab / "observe"
    args = ["run", "-a", "system", "-w", "short", "-n", "2", "--warmups", "0"]
    r = CliRunner().invoke(
        main, [*args, "--perf", "observe", "--perf-runs", "2", "--out", str(out)]
    )
    assert r.exit_code == 0, r.output
    samples = load_samples(out)
    assert {s["launcher"] for s in samples if s["phase"] == "measure"} == {"direct"}
    perf_runs = [s for s in samples if s["phase"] == "perf"]
    summary = (out / "summary.csv").read_text()
    assert "runs,throughput" in summary.replace('"', "")
    if perf_usable():
        assert len(perf_runs) == 2 and {s["launcher"] for s in perf_runs} == {"perf"}
        assert "perf,task_clock_ms" in summary and "perf counters" in r.output
    else:
        assert not perf_runs
