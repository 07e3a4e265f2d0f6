"""The scorecard's "Public suites" section: mimalloc-bench's programs under every allocator.

From the rows of hakbench.report.apps (time and peak RSS per program and allocator, ratios
to mimalloc as medians of per-round ratios with 95 % CIs): the table, the geomeans, and for
libhakmem the program where it is furthest behind the fastest peer: per program the peer
(every allocator but libhakmem) with the lowest median time ratio, and libhakmem's time
against that peer's, paired by round the same way (hakbench.tables.matrix_summary). The
section says where its samples are, the suite's commit, the peers' versions and the command
that refreshes it.
"""

from __future__ import annotations

from hakbench.engine.load import describe as describe_load
from hakbench.report.apps import Row, _ratio_text, geomean_table, ratio_table
from hakbench.tables.matrix_summary import summarize

REFRESH = "hakbench scorecard --refresh --suite"
HAKMEM = "hakmem"


def against_fastest_peer(rows: list[Row], samples: list[dict], meta: dict) -> list[dict]:
    """Per program: the fastest peer and libhakmem's time ratio to it (median, CI), from
    the stored samples; programs without a libhakmem or a peer ratio are left out."""
    cells = {c["key"]: c for c in meta["cells"]}
    out = []
    for program in dict.fromkeys(r.workload for r in rows):
        mine = [r for r in rows if r.workload == program and r.allocator == HAKMEM]
        peers = [
            r
            for r in rows
            if r.workload == program and r.allocator != HAKMEM and r.time_ratio is not None
        ]
        if not mine or not peers:
            continue
        fastest = min(peers, key=lambda r: r.time_ratio[0])
        chosen = [cells[mine[0].time.key], cells[fastest.time.key]]
        peer = {"allocator": fastest.allocator}
        time = summarize(samples, chosen, mine[0].time_metric, peer)[0]
        memory = summarize(samples, chosen, "maxrss_kb", peer)[0]
        if time.ratio is None:
            continue
        ratio = (time.ratio, time.ratio_ci_low, time.ratio_ci_high)
        if mine[0].time.metric in ("app_rate", "throughput"):  # a rate: time is its inverse
            ratio = (1 / ratio[0], 1 / ratio[2], 1 / ratio[1])
        mem = (memory.ratio, memory.ratio_ci_low, memory.ratio_ci_high) if memory.ratio else None
        out.append({"program": program, "peer": fastest.label, "time": ratio, "memory": mem})
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
        "ratios with 95 % CIs, < 1 better.",
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
    versus = against_fastest_peer(rows, list(samples), meta)
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
