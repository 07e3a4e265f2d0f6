"""The scorecard's "Public suites" section: mimalloc-bench's programs under every allocator.

From the rows of hakbench.report.apps (time and peak RSS per program and allocator, ratios
to mimalloc as medians of per-round ratios with 95 % CIs): the table, the geomeans, and for
libhakmem the program where it is furthest behind the fastest peer: per program the peer
(every allocator but libhakmem) with the lowest median time ratio, and libhakmem's time
against that peer's as the median of their per-round ratios (each cell runs once a round).
The
section says where its samples are, the suite's commit, the peers' versions and the command
that refreshes it.
"""

from __future__ import annotations

from hakbench.core.metrics import METRICS
from hakbench.engine.load import describe as describe_load
from hakbench.report.apps import Row, _ratio_text, geomean_table, ratio_table

REFRESH = "hakbench scorecard --refresh --suite"
HAKMEM = "hakmem"


def _round_ratios(samples, key_a: str, key_b: str, metric: str) -> list[float]:
    """a/b per measured round in which both cells have an ok ``metric``."""
    by_round: dict = {}
    for s in samples:
        v = (s.get("metrics") or {}).get(metric)
        if s.get("phase") == "measure" and s.get("status") == "ok" and v:
            by_round.setdefault((s["cell"], s["round"]), v)
    return [
        v / by_round[(key_b, r)]
        for (k, r), v in sorted(by_round.items(), key=lambda kv: (kv[0][0], kv[0][1]))
        if k == key_a and (key_b, r) in by_round
    ]


def against_fastest_peer(rows: list[Row], samples: list[dict], reference: str) -> list[dict]:
    """Per program: the fastest peer (lowest median time ratio to the reference) and
    libhakmem's time and peak RSS against it: the table's own ratios when that peer is the
    reference (adjacent pairs), else the median of the per-round ratios with its CI (each
    other cell runs once per round, in the same shuffled rounds); programs without a
    libhakmem or a peer ratio are left out."""
    from hakbench.stats.stats import median_ci

    out = []
    for program in dict.fromkeys(r.workload for r in rows):
        mine = next((r for r in rows if r.workload == program and r.allocator == HAKMEM), None)
        peers = [
            r
            for r in rows
            if r.workload == program and r.allocator != HAKMEM and r.time_ratio is not None
        ]
        if mine is None or not peers:
            continue
        fastest = min(peers, key=lambda r: r.time_ratio[0])
        if fastest.allocator == reference:
            if mine.time_ratio is not None:
                out.append(
                    {
                        "program": program,
                        "peer": fastest.label,
                        "time": mine.time_ratio,
                        "memory": mine.memory_ratio,
                    }
                )
            continue
        ratios = _round_ratios(samples, mine.time.key, fastest.time.key, mine.time_metric)
        if not ratios:
            continue
        if METRICS[mine.time_metric].higher_is_better:  # a rate: time is its inverse
            ratios = [1 / x for x in ratios]
        memory = _round_ratios(samples, mine.time.key, fastest.time.key, "maxrss_kb")
        out.append(
            {
                "program": program,
                "peer": fastest.label,
                "time": median_ci(ratios),
                "memory": median_ci(memory) if memory else None,
            }
        )
    return out


def suite_markdown(rows: list[Row], meta: dict, plot_prefix: str, samples=()) -> str:
    ref = meta["matrix"]["reference"]["allocator"]
    m = meta["matrix"]
    suite = (meta.get("suites") or {}).get("mimalloc-bench", {})
    packages = meta.get("reference_packages") or {}
    versions = ", ".join(f"{k} {v}" for k, v in sorted(packages.items()) if v) or "not recorded"
    lines = [
        "## Public suites: mimalloc-bench",
        "",
        f"Stored in `results/scorecard-suite/` ({meta.get('date', '?')}, lab commit "
        f"{((meta.get('git') or {}).get('commit') or '?')[:10]}). Refresh: `{REFRESH}` "
        "(with `--suite-dir PATH` or `$HAKBENCH_MIMALLOC_BENCH`; docs/suites.md); this one "
        f"ran `{meta.get('command', '?')}`.",
        "",
        f"mimalloc-bench commit {suite.get('commit', '?')[:12]}, built by the lab (targets "
        f"skipped: {', '.join(suite.get('skipped_targets') or []) or 'none'}); peers: "
        f"{versions}; transparent huge pages: {meta.get('thp_enabled', '?')}. Each program "
        "runs with bench.sh's arguments (or issue #36's lengths, `-2s`, `-400`) and is timed "
        "by its own figure where it runs for a fixed time (larson's and glibc-thread's rates, "
        "xmalloc-test's rtime), else by its elapsed time; a rate counts as reference rate / "
        f"rate. {m['runs']} interleaved rounds (+{m['warmup']} warm-up): every cell once per "
        f"round in a seeded shuffled order; ratios to {ref} are the medians of the per-round "
        "ratios with 95 % CIs (with fewer than 6 ratios the interval is their range), < 1 better.",
        "",
        describe_load(meta.get("load")),
        "",
        *ratio_table(rows, ref, "program"),
        "",
        f"### Geometric means over the programs (ratio to {ref})",
        "",
        *geomean_table(rows, "programs"),
        "",
    ]
    versus = against_fastest_peer(rows, list(samples), ref)
    if versus:
        worst = max(versus, key=lambda v: v["time"][0])
        lines += [
            "### libhakmem against the fastest peer of each program",
            "",
            f"Worst: **{worst['program']}**, {worst['time'][0]:.2f}× the time of "
            f"{worst['peer']} (95 % CI {worst['time'][1]:.2f}-{worst['time'][2]:.2f}).",
            "",
            "| program | fastest peer | libhakmem's time ÷ peer's | peak RSS ÷ peer's |",
            "|---|---|---|---|",
        ]
        lines += [
            f"| {v['program']} | {v['peer']} | {_ratio_text(v['time'])} "
            f"| {_ratio_text(v['memory'])} |"
            for v in versus
        ]
        lines.append("")
    lines += [
        f"![time]({plot_prefix}time.png)",
        "",
        f"![memory]({plot_prefix}memory.png)",
        "",
    ]
    return "\n".join(lines)
