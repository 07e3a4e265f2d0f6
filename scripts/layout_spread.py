"""The layout spread of the current tree per workload: an A/A across K code layouts of the
same libhakmem objects (issue 29), until `hakbench calibrate --layouts` measures it.

    .venv/bin/python scripts/layout_spread.py --layouts 5 --pairs 1200 --scale 5 \\
        -w mixed -w tiny_hot -w c6_heavy --callgrind --out DIR

Layouts 1..K-1 are linked by hakbench.engine.layouts (layout 0 is build/<variant>/ itself).
Every round runs one pair per workload (workloads in random order, A and B in random order
within a pair); each pair's layouts come from engine.layouts.draw_layouts (every combination
once per block of K*K pairs), so both sides draw from the same K libraries. The pairs'
log ratios of throughput go to hakbench.stats.layouts: the spread of the layouts' own
effects (noise removed), each layout's effect, and whether the sign depends on the layout.
``--callgrind`` adds one exact instruction count per layout and workload (callgrind Ir per
harness op, net of start-up, at the workload's own iteration count). Samples go to
DIR/samples.jsonl (a ``layout`` field per sample), the tables to DIR/layout_spread.md.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hakbench.core.cell import make_cell  # noqa: E402
from hakbench.core.profiles import resolve_workload  # noqa: E402
from hakbench.engine.layouts import build_layouts, draw_layouts, with_layout  # noqa: E402
from hakbench.engine.runner import run_sample  # noqa: E402
from hakbench.engine.store import RunStore, write_text  # noqa: E402
from hakbench.experiments.runlength import iterations, with_iterations  # noqa: E402
from hakbench.stats.layouts import is_layout_sensitive, layout_cells, layout_spread  # noqa: E402


def pct(x: float) -> str:
    return f"{100 * math.expm1(x):+.2f}" if math.isfinite(x) else "n/a"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layouts", type=int, default=5)
    p.add_argument("--pairs", type=int, default=1200, help="measured pairs per workload")
    p.add_argument("--warmup", type=int, default=3, help="pairs per workload not kept")
    p.add_argument("--scale", type=float, default=1.0, help="iterations x this")
    p.add_argument("-w", "--workload", action="append", dest="workloads")
    p.add_argument("--profile", default="C7_SAFE")
    p.add_argument("--variant", default="fast")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument(
        "--metric",
        choices=("throughput", "task_clock_ms"),
        default="task_clock_ms",
        help="task_clock_ms (perf's CPU time of the process: the time it sat descheduled "
        "is not in it) or the harness's throughput (wall time of its loop)",
    )
    p.add_argument("--callgrind", action="store_true")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    names = args.workloads or ["mixed", "tiny_hot", "c6_heavy"]
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 31)
    rng = random.Random(seed)
    k = args.layouts
    layouts = build_layouts(None, args.variant, k)
    args.out.mkdir(parents=True, exist_ok=True)
    store = RunStore(args.out, fresh=True)
    store.write_meta({"seed": seed, "argv": sys.argv, "layouts": [str(x.library) for x in layouts]})
    cells = {}
    for name in names:
        w = resolve_workload(name)
        w = with_iterations(w, max(1, round(iterations(w) * args.scale)))
        base = make_cell("hakmem", w, variant=args.variant, profile=args.profile)
        cells[name] = [with_layout(base, lay) for lay in layouts]
    draws = {name: draw_layouts(k, k, seed + i) for i, name in enumerate(names)}
    t0, load0 = time.time(), os.getloadavg()
    for r in range(args.warmup + args.pairs):
        order = list(names)
        rng.shuffle(order)
        for name in order:
            a, b = next(draws[name]) if r >= args.warmup else (rng.randrange(k), rng.randrange(k))
            sides = [("A", a), ("B", b)]
            rng.shuffle(sides)
            for side, lay in sides:
                s = run_sample(cells[name][lay], perf=args.metric == "task_clock_ms")
                if r >= args.warmup:
                    store.append({**s, "workload": name, "pair": r, "side": side, "layout": lay})
        if r % 100 == 0:
            print(f"round {r}/{args.warmup + args.pairs} {time.time() - t0:.0f} s", flush=True)
    seconds, load1 = time.time() - t0, os.getloadavg()
    lines = [
        f"# Layout spread, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC",
        "",
        f"`{' '.join(sys.argv)}` (seed {seed}); {k} layouts of {args.variant} "
        f"(0 = build/{args.variant}/libhakmem.so); {seconds:.0f} s; load average "
        f"{load0[0]:.2f} at the start, {load1[0]:.2f} at the end. Metric {args.metric}; "
        "per pair x = log of B's speed over A's (+: B faster).",
        "",
        "| workload | pairs | pair spread % | layout spread % | raw % | effect per layout % "
        "| widened half-width % | sensitive |",
        "|---|---|---|---|---|---|---|---|",
    ]
    import numpy as np

    from hakbench.stats.layouts import random_effects_bounds

    samples = store.samples()
    for name in names:
        by_pair: dict = {}
        for s in samples:
            if s["workload"] == name and s["status"] == "ok":
                by_pair.setdefault(s["pair"], {})[s["side"]] = s
        x, la, lb = [], [], []
        for pair in by_pair.values():
            if "A" in pair and "B" in pair:
                va, vb = (pair[side]["metrics"].get(args.metric) for side in "AB")
                if not (va and vb):
                    continue
                # + : B faster, for either metric
                x.append(math.log(vb / va) if args.metric == "throughput" else math.log(va / vb))
                la.append(pair["A"]["layout"])
                lb.append(pair["B"]["layout"])
        x = np.asarray(x)
        sp = layout_spread(x, la, lb, k_a=k, k_b=k)
        # both sides draw the same libraries: a layout's effect from B's side (its median
        # as B) and from A's (minus its median as A), averaged
        effects = (
            [(sp.sides["B"].medians[j] - sp.sides["A"].medians[j]) / 2 for j in range(k)]
            if sp.sides.keys() == {"A", "B"}
            else []
        )
        effects = [e - float(np.mean(effects)) for e in effects]
        lo, hi = random_effects_bounds(sp, 0.025)
        robust = 1.4826 * float(np.median(np.abs(x - np.median(x))))
        cells_ = layout_cells(x, la, lb, k_a=k, k_b=k)
        lines.append(
            f"| {name} | {len(x)} | {100 * robust:.2f} | {100 * sp.sd:.2f} | {100 * sp.sd_raw:.2f} "
            f"| {' / '.join(pct(e) for e in effects)} | {100 * (hi - lo) / 2:.2f} "
            f"| {'LAYOUT-SENSITIVE' if is_layout_sensitive(cells_) else 'no'} |"
        )
    if args.callgrind:
        from hakbench.engine.instructions import measure_instructions

        lines += ["", "Instructions per op (callgrind, net of start-up), per layout:", ""]
        lines += ["| workload | " + " | ".join(f"layout {j}" for j in range(k)) + " |"]
        lines += ["|---|" + "---|" * k]
        for name in names:
            base = make_cell("hakmem", name, variant=args.variant, profile=args.profile)
            irs = [measure_instructions(with_layout(base, lay)) for lay in layouts]
            lines.append(
                f"| {name} | "
                + " | ".join(
                    f"{ir['ir_per_op']:.3f}" if ir["status"] == "ok" else ir["status"] for ir in irs
                )
                + " |"
            )
    text = "\n".join(lines) + "\n"
    write_text(args.out / "layout_spread.md", text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
