"""PGO training run (allocator/pgo.mk): the cells the instruction gate measures — every
workload of the [gate] table of profiles/matrices/scorecard.toml under every shipping
profile, at the gate's scale of iterations — with the profile-generating libhakmem
preloaded. Each process adds its counts to build/obj/pgo-gen/*.gcda at exit.

Runs with the system python3 (stdlib only; hakbench's profile and workload code is
imported from the tree), so `make build` does not need the venv.
"""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hakbench.core.procenv import clean_env  # noqa: E402
from hakbench.core.profiles import resolve_profile, resolve_workload  # noqa: E402
from hakbench.engine import process  # noqa: E402
from hakbench.experiments.gate import load_gate, scaled_workload  # noqa: E402

TIMEOUT_S = 600  # one training process (seconds at the gate's scale): a hang must not hang make


def main(build: Path) -> int:
    lib = (build / "pgo-gen" / "libhakmem.so").resolve()
    spec = load_gate()
    for profile in spec.profiles:
        env = clean_env(resolve_profile(profile).env, lib)
        for name in spec.workloads:
            w = scaled_workload(resolve_workload(name), spec.scale)
            argv = [str(build / "bench" / w.program), *w.args]
            r = process.run(argv, env=env, timeout=TIMEOUT_S)
            if not r.ok:
                why = r.error or ("timed out" if r.timed_out else r.stderr[-500:])
                print(f"pgo-train: {profile} {name} failed: {why}")
                return 1
    n = len(list((build / "obj" / "pgo-gen").glob("*.gcda")))
    print(f"pgo-train: {len(spec.profiles)} profiles x {len(spec.workloads)} workloads, {n} profiles")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1] if len(sys.argv) > 1 else "build")))
