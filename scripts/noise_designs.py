"""Which way of measuring a pair has the least noise here? (issue #29, part 1)

``collect``: A/A pairs of the same cells ``ab`` builds (hakmem C7_SAFE, the workloads' own run
lengths), every design interleaved pair by pair: a round holds, for each workload (in a
shuffled order), one A/A pair of every design (in a shuffled order; A and B in a random
order inside the pair). So every design meets the same seconds of the VM's mood. A design
is a launch (hakbench.engine.process.Launch text, "" for today's) and whether perf wraps the
process (needed for task-clock). Every sample carries every metric the harness prints, so
the metrics of one design are compared on the very same pairs.

``analyse``: per design, workload and metric, the robust spread of the per-pair log ratio
(1.4826 x MAD, as ``calibrate --run-length``), its median, the seconds a pair cost (the
pair's two processes as hakbench ran them, its own work included), and the time to a
verdict: the sequential rule of ``ab`` (``sequential.Stopper``) run on pairs drawn with
replacement from the design's own pairs centred on zero (an A/A), until NEUTRAL, GO/NO-GO
or 60 s at the design's seconds per pair (median and shares over the simulated runs).

    python scripts/noise_designs.py collect --rounds 150 --out DIR \\
        --design base= --design pin1=cpu=1 ...
    python scripts/noise_designs.py analyse DIR

``verdicts``: real default ``ab`` calls (``run_ab``, sequential, 60 s budget, its warm-ups,
engagement and perf runs), one per design and condition in shuffled blocks, so the designs
take turns within minutes. A condition is ``WORKLOAD:KA:K@T`` (side A runs ``--extra-ops KA``,
side B ``--extra-ops K``, threshold T %; ``WORKLOAD:0:0@1`` is an A/A). A design here is
``name=metric/launch`` (metric: throughput, cpu_throughput, task_clock_ms, ...). Each call
records its verdict, pairs, seconds to the stop and of the whole call, and the paired
median B/A of throughput and of cpu_throughput over its pairs (the effect each metric saw).
A design may fix the iteration count after a second slash (``name=metric/launch/N``, as
``ab --iters N``; without it, ab's own run length). Each call records the run length it ran
and why.

    python scripts/noise_designs.py verdicts --trials 10 --out DIR \
        --design today=throughput/ --design cpu=cpu_throughput/ \
        --design half=cpu_throughput//500000 \
        --condition mixed:0:0@1 --condition mixed:1:230@1 ...
    python scripts/noise_designs.py summarize DIR
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

from hakbench.engine.process import Launch
from hakbench.engine.runner import run_sample
from hakbench.experiments.ab_plan import build_cells
from hakbench.experiments.ab_spec import ABSpec
from hakbench.stats import sequential as seq
from hakbench.stats.stats import GO, NEUTRAL, NO_GO

METRICS = (
    "throughput",
    "cpu_throughput",
    "chunk_throughput",
    "chunk_cpu_throughput",
    "task_clock_ms",
    "wall_s",
)
LOWER_IS_BETTER = {"task_clock_ms", "wall_s"}
LOOK_EVERY = 10


def parse_design(text: str) -> tuple[str, str, bool]:
    """``name=launch`` (``perf:`` before the launch wraps every process in perf stat)."""
    name, _, launch = text.partition("=")
    perf = launch.startswith("perf:") or launch == "perf"
    launch = launch.removeprefix("perf:").removeprefix("perf")
    Launch.parse(launch)
    return name, launch, perf


def collect(args) -> None:
    designs = [parse_design(d) for d in args.design]
    cells = build_cells(ABSpec(workloads=tuple(args.workload)), {})
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "designs.json").write_text(json.dumps(designs))
    rng = random.Random(args.seed)
    log = (out / "pairs.jsonl").open("a")
    t_end = time.monotonic() + args.max_minutes * 60
    for rnd in range(args.rounds):
        workloads = list(cells)
        rng.shuffle(workloads)
        for w in workloads:
            a, b = cells[w]
            order = list(designs)
            rng.shuffle(order)
            for name, launch, perf in order:
                sides = ["A", "B"]
                rng.shuffle(sides)
                got, t0 = {}, time.monotonic()
                for side in sides:
                    cell = a if side == "A" else b
                    s = run_sample(cell, perf=perf, timeout=120, launch=Launch.parse(launch))
                    got[side] = {
                        "status": s["status"],
                        "metrics": {m: s["metrics"][m] for m in METRICS if m in s["metrics"]},
                        "chunks": s["harness"].get("chunks"),
                    }
                record = {
                    "round": rnd,
                    "workload": w,
                    "design": name,
                    "first": sides[0],
                    "seconds": time.monotonic() - t0,
                    "time": time.strftime("%H:%M:%S"),
                    **got,
                }
                log.write(json.dumps(record) + "\n")
        log.flush()
        print(f"round {rnd + 1}/{args.rounds} {time.strftime('%H:%M:%S')}", file=sys.stderr)
        if time.monotonic() > t_end:
            break


def robust_sd(x: list[float]) -> float:
    med = statistics.median(x)
    return 1.4826 * statistics.median(abs(v - med) for v in x)


def time_to_verdict(logs: list[float], s_per_pair: float, sims: int, seed: int, threshold: float):
    """Simulated default ab calls (one workload) on pairs drawn with replacement from
    ``logs``, a look every ``LOOK_EVERY`` pairs (ab looks after every pair of a lone
    workload: a stop here comes at most 9 pairs later), the clock advancing by
    ``s_per_pair`` a pair: (median seconds to the stop, share NEUTRAL, share GO/NO-GO)."""
    rng = random.Random(seed)
    stops, verdicts = [], []
    for _ in range(sims):
        clock = {"t": 0.0}
        rule = seq.Stopper(
            {"w": True},
            threshold,
            max_time_s=60.0,
            max_pairs=20000,
            clock=lambda clock=clock: clock["t"],
        )
        while True:
            for _ in range(LOOK_EVERY):
                rule.add("w", rng.choice(logs))
            clock["t"] += LOOK_EVERY * s_per_pair
            if not rule.end_round():
                break
        stops.append(rule.elapsed())
        verdicts.append(rule.stops["w"].verdict)
    share = lambda *v: sum(x in v for x in verdicts) / sims  # noqa: E731
    return statistics.median(stops), share(NEUTRAL), share(GO, NO_GO)


def analyse(args) -> None:
    rows = [json.loads(line) for line in (Path(args.dir) / "pairs.jsonl").open()]
    rows = [r for r in rows if r["round"] >= args.skip]
    by = defaultdict(list)
    for r in rows:
        by[(r["design"], r["workload"])].append(r)
    first, last = rows[0]["time"], rows[-1]["time"]
    print(f"{len(rows)} pairs, {first}-{last} (VM time), rounds >= {args.skip}")
    print(
        "| design | workload | metric | pairs | spread (robust SD) | median B/A - 1 | s/pair "
        f"| A/A to a verdict at {args.threshold:g} %: median s (sim.) | NEUTRAL | GO/NO-GO |"
    )
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for (design, w), rs in sorted(by.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        ok = [r for r in rs if r["A"]["status"] == r["B"]["status"] == "ok"]
        s_pair = statistics.median(r["seconds"] for r in ok)
        for m in METRICS:
            pairs = [r for r in ok if m in r["A"]["metrics"] and m in r["B"]["metrics"]]
            if len(pairs) < 20 or (m == "wall_s" and not args.wall):
                continue
            sign = -1 if m in LOWER_IS_BETTER else 1
            logs = [
                sign * math.log(r["B"]["metrics"][m] / r["A"]["metrics"][m])
                for r in pairs
                if r["A"]["metrics"][m] > 0 and r["B"]["metrics"][m] > 0
            ]
            sd, med = robust_sd(logs), statistics.median(logs)
            # an A/A: the truth is no change, so the draws are centred on it (a sample median
            # off zero by chance would otherwise be simulated as a real change)
            t, neutral, decisive = time_to_verdict(
                [x - med for x in logs], s_pair, args.sims, args.seed, args.threshold
            )
            print(
                f"| {design} | {w} | {m} | {len(logs)} | {100 * sd:.2f} % "
                f"| {100 * math.expm1(med):+.2f} % | {s_pair:.3f} "
                f"| {t:.1f} | {neutral:.0%} | {decisive:.0%} |"
            )


def parse_condition(text: str) -> tuple[str, int, int, float]:
    w, rest = text.split(":", 1)
    ks, t = rest.split("@")
    ka, k = (int(x) for x in ks.split(":"))
    return w, ka, k, float(t)


def verdicts(args) -> None:
    from hakbench.engine.schedule import complete_pairs
    from hakbench.engine.store import read_jsonl
    from hakbench.experiments.ab import run_ab

    designs = []
    for d in args.design:
        name, _, rest = d.partition("=")
        metric, _, rest = rest.partition("/")
        launch, _, iters = rest.partition("/")
        designs.append((name, metric, launch, int(iters) if iters else None))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(args.seed)
    log = (out / "calls.jsonl").open("a")
    n = 0
    for trial in range(args.trials):
        block = [(c, d) for c in args.condition for d in designs]
        rng.shuffle(block)
        for cond, (name, metric, launch, iters) in block:
            n += 1
            w, ka, k, threshold = parse_condition(cond)
            spec = ABSpec(
                workloads=(w,),
                threshold_pct=threshold,
                metric=metric,
                launch=launch,
                iters=iters,
                perf="each" if metric == "task_clock_ms" else "observe",
                seed=args.seed * 100003 + n,
                pairs=args.pairs,  # None: sequential, as a default ab
                extra_ops=k if (k or ka) else None,
                baseline_extra_ops=ka,
            )
            t0, started = time.monotonic(), time.strftime("%H:%M:%S")
            result = run_ab(spec, out / "calls" / f"{n:04d}-{name}-{w}", show_progress=False)
            call_s = time.monotonic() - t0
            (c,) = result.primary()
            pairs = complete_pairs(read_jsonl(result.out / "samples.jsonl"), w)
            effects = {}
            for m in ("throughput", "cpu_throughput"):
                logs = [
                    math.log(b["metrics"][m] / a["metrics"][m])
                    for a, b in pairs
                    if m in a["metrics"] and m in b["metrics"]
                ]
                if logs:
                    effects[m] = {"median": statistics.median(logs), "spread": robust_sd(logs)}
            record = {
                "trial": trial,
                "condition": cond,
                "design": name,
                "metric": metric,
                "launch": launch,
                "iterations": result.iterations.get(w, ""),
                "time": started,
                "verdict": c.verdict,
                "n_pairs": c.n_pairs,
                "seconds": round(result.pairs_seconds, 2),
                "call_seconds": round(call_s, 2),
                "ratio": c.ratio,
                "effects": effects,
                "other_cores": (result.load or {}).get("other_cores"),
            }
            log.write(json.dumps(record) + "\n")
            log.flush()
            print(
                f"{started} {name:>8} {cond:>18}: {c.verdict} in {result.pairs_seconds:.1f} s "
                f"({c.n_pairs} pairs)",
                file=sys.stderr,
            )


def summarize(args) -> None:
    rows = [json.loads(line) for line in (Path(args.dir) / "calls.jsonl").open()]
    print(f"{len(rows)} calls, {rows[0]['time']}-{rows[-1]['time']} (VM time)")
    print(
        "| condition | design | calls | GO | NO-GO | NEUTRAL | INCONCLUSIVE "
        "| s to stop: median / p90 | call s: median | pairs: median "
        "| effect B/A-1: throughput / cpu (median of calls) | spread: throughput / cpu "
        "| other load (cores) | run lengths (calls) |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---|---:|---:|---|---|---:|---|")
    by = defaultdict(list)
    for r in rows:
        by[(r["condition"], r["design"])].append(r)

    def q(x, f):
        x = sorted(x)
        return x[min(len(x) - 1, int(f * len(x)))]

    def eff(rs, m, key):
        v = [r["effects"][m][key] for r in rs if m in r["effects"]]
        return statistics.median(v) if v else math.nan

    for (cond, design), rs in sorted(by.items()):
        counts = {v: sum(r["verdict"] == v for r in rs) for v in (GO, NO_GO, NEUTRAL)}
        inc = len(rs) - sum(counts.values())
        secs = [r["seconds"] for r in rs]
        load = [r["other_cores"] for r in rs if r["other_cores"] is not None]
        lengths = defaultdict(int)
        for r in rs:
            lengths[r.get("iterations", "").split(" ")[0]] += 1
        print(
            f"| {cond} | {design} | {len(rs)} | {counts[GO]} | {counts[NO_GO]} "
            f"| {counts[NEUTRAL]} | {inc} | {statistics.median(secs):.1f} / {q(secs, 0.9):.1f} "
            f"| {statistics.median(r['call_seconds'] for r in rs):.1f} "
            f"| {statistics.median(r['n_pairs'] for r in rs):.0f} "
            f"| {100 * math.expm1(eff(rs, 'throughput', 'median')):+.2f} % / "
            f"{100 * math.expm1(eff(rs, 'cpu_throughput', 'median')):+.2f} % "
            f"| {100 * eff(rs, 'throughput', 'spread'):.1f} % / "
            f"{100 * eff(rs, 'cpu_throughput', 'spread'):.1f} % "
            f"| {statistics.median(load) if load else math.nan:.2f} "
            f"| {', '.join(f'{k} x{v}' for k, v in sorted(lengths.items(), key=str))} |"
        )


def effects(args) -> None:
    """Per condition, all pairs of all its calls pooled (every design's): the median B/A - 1
    of each metric with the order-statistic 95 % interval of the median, on the same pairs."""
    from hakbench.engine.schedule import complete_pairs
    from hakbench.engine.store import read_jsonl

    calls = [json.loads(line) for line in (Path(args.dir) / "calls.jsonl").open()]
    by = defaultdict(lambda: defaultdict(list))
    for i, call in enumerate(calls, 1):
        (d,) = (Path(args.dir) / "calls").glob(f"{i:04d}-*")
        w = call["condition"].split(":")[0]
        for a, b in complete_pairs(read_jsonl(d / "samples.jsonl"), w):
            for m in ("throughput", "cpu_throughput"):
                if m in a["metrics"] and m in b["metrics"]:
                    by[(call["condition"], call["design"] if args.by_design else "all")][m].append(
                        math.log(b["metrics"][m] / a["metrics"][m])
                    )
    print(
        "| condition | calls' design | pairs | throughput: B/A - 1 [95 %] | cpu: B/A - 1 [95 %] |"
    )
    print("|---|---|---:|---|---|")
    for (cond, design), per in sorted(by.items()):
        cells = []
        for m in ("throughput", "cpu_throughput"):
            x = sorted(per[m])
            n = len(x)
            k = max(0, int(n / 2 - 1.96 * math.sqrt(n) / 2))
            lo, mid, hi = (100 * math.expm1(v) for v in (x[k], statistics.median(x), x[n - 1 - k]))
            cells.append(f"{mid:+.2f} % [{lo:+.2f}, {hi:+.2f}]")
        print(f"| {cond} | {design} | {len(per['throughput'])} | {cells[0]} | {cells[1]} |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("collect")
    c.add_argument("--design", action="append", required=True, help="name=launch or name=perf:")
    c.add_argument("--workload", "-w", action="append", required=True)
    c.add_argument("--rounds", type=int, default=100)
    c.add_argument("--max-minutes", type=float, default=60)
    c.add_argument("--seed", type=int, default=1)
    c.add_argument("--out", required=True)
    a = sub.add_parser("analyse")
    a.add_argument("dir")
    a.add_argument("--skip", type=int, default=1, help="warm-up rounds left out")
    a.add_argument("--sims", type=int, default=100)
    a.add_argument("--seed", type=int, default=1)
    a.add_argument("--threshold", type=float, default=1.0)
    a.add_argument("--wall", action="store_true", help="also the process wall time")
    v = sub.add_parser("verdicts")
    v.add_argument("--design", action="append", required=True, help="name=metric/launch")
    v.add_argument("--condition", action="append", required=True, help="WORKLOAD:KA:K@T")
    v.add_argument("--trials", type=int, default=10)
    v.add_argument("--pairs", type=int, help="a fixed count of pairs a call (ab --runs N)")
    v.add_argument("--seed", type=int, default=1)
    v.add_argument("--out", required=True)
    sm = sub.add_parser("summarize")
    sm.add_argument("dir")
    ef = sub.add_parser("effects")
    ef.add_argument("dir")
    ef.add_argument("--by-design", action="store_true")
    args = p.parse_args()
    commands = {"collect": collect, "analyse": analyse, "verdicts": verdicts}
    commands.update(summarize=summarize, effects=effects)
    commands[args.cmd](args)


if __name__ == "__main__":
    main()
