"""The pgo variant: built by `make build` with gcc's profile feedback from a real training
run, and usable everywhere the fast variant is."""

import subprocess
import sys

from hakbench.engine.cells import make_cell
from hakbench.engine.runner import run_sample


def test_pgo_objects_were_built_from_training_profiles(build_dir):
    lib = build_dir / "pgo" / "libhakmem.so"
    assert lib.exists(), "make build did not build the pgo variant"
    for hot in ("wrappers", "heap", "page"):
        gcda = build_dir / "obj" / "pgo" / f"{hot}.gcda"
        assert gcda.exists() and gcda.stat().st_size > 0, f"{hot}.o was built without a profile"
        assert (build_dir / "obj" / "pgo" / f"{hot}.o").stat().st_mtime >= gcda.stat().st_mtime


def test_pgo_runs_the_same_operations_as_fast():
    samples = {
        v: run_sample(make_cell("hakmem", "mixed_short", variant=v, profile="C7_SAFE"), perf=False)
        for v in ("fast", "pgo")
    }
    for v, s in samples.items():
        assert s["status"] == "ok", (v, s["error"])
        assert "/pgo/" in s["harness"]["malloc_impl"] if v == "pgo" else True
    assert samples["pgo"]["harness"]["checksum"] == samples["fast"]["harness"]["checksum"]


def test_ab_takes_a_baseline_variant(tmp_path, repo_root):
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "hakbench",
            "ab",
            "--variant",
            "pgo",
            "--baseline-variant",
            "fast",
            "-w",
            "mixed_short",
            "-n",
            "3",
            "--warmup",
            "0",
            "--perf",
            "off",
            "--out",
            str(tmp_path / "ab"),
        ],
        cwd=repo_root,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr[-1500:]
    assert "A = hakmem C7_SAFE, B = hakmem:pgo C7_SAFE" in r.stderr
    assert "A/A" not in r.stdout + r.stderr
