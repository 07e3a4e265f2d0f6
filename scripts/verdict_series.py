"""A series of real default ``hakbench ab`` calls, and the table of what each decided
(issue #29's done-when tables in docs/measuring.md).

``run``: calls ``hakbench ab`` once per trial and condition, in shuffled blocks (every condition
once per block), each in its own ``--out`` directory under DIR, and notes the load average at
the start and end of each call. A condition is ``NAME=ARGS``: the ``ab`` arguments of that row
(``aa=-w mixed``, ``slow=--rev scratch-slow --baseline-rev base --layouts 4 --threshold 0.5``).
``--busy CMD`` keeps one core busy with CMD (restarted whenever it ends) for the whole series
and stops it at the end: "under one busy core running another benchmark".

``table``: per condition, the calls' verdicts, the median call time and time to the stop,
and per call the pairs, the judged B/A with the interval that decided it, and the pair
spread (robust SD of the per-pair log ratio, in %) of the judged metric and of wall-clock
throughput measured in the same call.

    python scripts/verdict_series.py run --trials 10 --out DIR \\
        --condition "aa=-w mixed" --condition "slow=-w mixed --threshold 0.5 ..." \\
        [--busy "build/bench/bench_random_mixed --iters 20000000"]
    python scripts/verdict_series.py table DIR
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import random
import shlex
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from hakbench.engine import process  # noqa: E402

PY = [sys.executable, "-m", "hakbench"]
CALL_TIMEOUT_S = 24 * 3600  # one ab call: its own budget ends it long before


def load1() -> float:
    return os.getloadavg()[0]


class Busy:
    """CMD in a loop in its own process group for as long as the series runs."""

    def __init__(self, cmd: str | None):
        self.proc = None
        if cmd:
            loop = f"while :; do {cmd} >/dev/null 2>&1; done"
            self.proc = process.spawn(["sh", "-c", loop], dict(os.environ))

    def stop(self) -> None:
        if self.proc is not None:
            process.kill_group(self.proc)


def run(args) -> None:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    conditions = dict(c.split("=", 1) for c in args.condition)
    rng = random.Random(args.seed)
    busy = Busy(args.busy)
    log = open(out / "calls.jsonl", "a")
    try:
        for trial in range(args.trials):
            names = list(conditions)
            rng.shuffle(names)
            for name in names:
                d = out / f"{name}-{trial}"
                if (d / "summary.csv").exists():
                    continue
                argv = [*PY, "ab", *shlex.split(conditions[name]), "--out", str(d)]
                start, l0 = time.time(), load1()
                r = process.run(argv, timeout=CALL_TIMEOUT_S)
                row = {
                    "condition": name,
                    "trial": trial,
                    "args": conditions[name],
                    "start": time.strftime("%H:%M:%S", time.gmtime(start)),
                    "call_s": round(time.time() - start, 1),
                    "load_start": l0,
                    "load_end": load1(),
                    "exit": r.returncode,
                    "dir": str(d),
                }
                if r.returncode not in (0, 4, 1):
                    row["error"] = r.stderr.strip().splitlines()[-1:] or r.stdout[-200:]
                log.write(json.dumps(row) + "\n")
                log.flush()
                print(f"{name} #{trial}: exit {r.returncode}, {row['call_s']} s", flush=True)
    finally:
        busy.stop()


def robust_spread(values: list[float]) -> float:
    """1.4826 x MAD of the log ratios, in %."""
    if len(values) < 3:
        return float("nan")
    med = statistics.median(values)
    return 100 * 1.4826 * statistics.median(abs(v - med) for v in values)


def pair_logs(samples: list[dict], metric: str, workload: str) -> list[float]:
    sides = defaultdict(dict)
    for s in samples:
        if s.get("phase") != "measure" or s.get("workload") != workload or s.get("status") != "ok":
            continue
        v = s.get("metrics", {}).get(metric)
        if v:
            sides[(s.get("round"), s.get("pair"))][s.get("side")] = v
    return [math.log(p["B"] / p["A"]) for p in sides.values() if "A" in p and "B" in p]


def call_row(call: dict) -> dict | None:
    d = Path(call["dir"])
    try:
        summary = list(csv.DictReader(open(d / "summary.csv")))
    except OSError:
        return None
    primary = [r for r in summary if r["role"] == "primary"]
    if not primary:
        return None
    p = primary[0]
    samples = [json.loads(x) for x in open(d / "samples.jsonl") if x.strip()]
    judged = pair_logs(samples, p["metric"], p["workload"])
    wall = pair_logs(samples, "throughput", p["workload"])
    pct = lambda x: 100 * (float(x) - 1)  # noqa: E731
    return {
        **call,
        "workload": p["workload"],
        "metric": p["metric"],
        "verdict": p["verdict"],
        "pairs": int(p["n_pairs"]),
        "stop_s": float(p["seconds"] or "nan"),
        "stop": p["stop"],
        "effect": f"{pct(p['ratio']):+.2f} "
        f"[{pct(p['decide_low']):+.2f}, {pct(p['decide_high']):+.2f}]",
        "spread_judged": robust_spread(judged),
        "spread_wall": robust_spread(wall),
        "layout_spread": p.get("layout_spread") or "",
    }


def table(args) -> None:
    calls = [json.loads(x) for x in open(Path(args.dir) / "calls.jsonl") if x.strip()]
    rows = [r for r in map(call_row, calls) if r]
    by = defaultdict(list)
    for r in rows:
        by[r["condition"]].append(r)
    for name, rs in by.items():
        verdicts = defaultdict(int)
        for r in rs:
            verdicts[r["verdict"]] += 1

        def med(k, rs=rs):
            return statistics.median(r[k] for r in rs)

        load = f"{min(r['load_start'] for r in rs):.1f}-{max(r['load_end'] for r in rs):.1f}"
        print(
            f"\n{name} ({rs[0]['args']}): {len(rs)} calls; "
            + ", ".join(f"{v} {n}" for v, n in sorted(verdicts.items()))
            + f"; median call {med('call_s'):.1f} s, to the stop {med('stop_s'):.1f} s; "
            f"median pair spread {med('spread_judged'):.1f} % judged, {med('spread_wall'):.1f} % "
            f"wall; load {load}"
        )
        print(
            "| # | start (UTC) | call s | to stop s | load start/end | verdict | pairs "
            "| B/A % [interval that decides] | spread judged | spread wall | layout spread |"
        )
        print("|---|---|---:|---:|---|---|---:|---|---:|---:|---:|")
        for r in sorted(rs, key=lambda r: r["start"]):
            ls = f"{100 * float(r['layout_spread']):.2f} %" if r["layout_spread"] else "-"
            print(
                f"| {r['trial']} | {r['start']} | {r['call_s']:.1f} | {r['stop_s']:.1f} "
                f"| {r['load_start']:.1f} / {r['load_end']:.1f} | {r['verdict']} | {r['pairs']} "
                f"| {r['effect']} | {r['spread_judged']:.1f} % | {r['spread_wall']:.1f} % | {ls} |"
            )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--trials", type=int, default=10)
    r.add_argument("--out", required=True)
    r.add_argument("--condition", action="append", required=True)
    r.add_argument("--busy")
    r.add_argument("--seed", type=int, default=1)
    t = sub.add_parser("table")
    t.add_argument("dir")
    a = ap.parse_args()
    run(a) if a.cmd == "run" else table(a)


if __name__ == "__main__":
    main()
