"""The A/B report's closing sections: what this machine did not measure, what failed (with
each failed sample's stderr tail), and how each figure was measured."""

from __future__ import annotations


def ab_unavailable_lines(result) -> list[str]:
    if not result.unavailable:
        return []
    why = (
        "not measured: no process ran under perf"
        if result.spec.perf == "off" or result.perf_note
        else "not measured on this machine"
    )
    return [
        "## Unavailable here",
        "",
        f"{why.capitalize()} (recorded as unavailable, never as 0): "
        + ", ".join(result.unavailable)
        + ".",
        "",
    ]


def ab_failure_lines(result) -> list[str]:
    """The workloads a failure decided, and every failed sample with its stderr tail."""
    lines = []
    noted = {w: note for w, note in result.failures.items() if note}
    if noted:
        lines += ["## Failures", ""]
        lines += [f"- {w}: **{result.verdicts().get(w)}**: {note}" for w, note in noted.items()]
        lines.append("")
    lines += ["## Failed samples", ""]
    if not result.failed:
        lines += ["None.", ""]
    for s in result.failed:
        sig = f", signal {s['signal']}" if s.get("signal") else ""
        lines += [
            f"- seq {s.get('seq')} {s.get('phase')} side {s.get('side')} pair {s.get('pair')} "
            f"`{s.get('allocator')}` {s.get('workload')}: **{s['status']}**{sig} — "
            f"{s.get('error')}"
        ]
        if s.get("stderr_tail"):
            tail = "\n".join("      " + ln for ln in s["stderr_tail"].splitlines())
            lines += ["", "  stderr tail:", "", tail, ""]
    n_failed_pairs = len(
        {(s.get("workload"), s.get("pair")) for s in result.failed if s.get("phase") == "measure"}
    )
    if n_failed_pairs:
        lines += [
            "",
            f"{n_failed_pairs} pair(s) with a failed side; the verdict counts them (see "
            "Failures above), the ratios are of the complete pairs.",
            "",
        ]
    return lines


def ab_notes_lines(samples: list[dict]) -> list[str]:
    """How each figure was measured, by the launcher of the measured processes."""
    launchers = {s.get("launcher") for s in samples if s.get("phase") == "measure"}
    how = [
        "- throughput is the harness's own `Throughput` line (timed loop only); CPU times, "
        "faults and switches are the harness process's own: "
        + {
            "perf": "perf counts the child only, user/sys are its rusage tool events",
            "direct": "hakbench's wait4 of the harness (no wrapper process)",
            "hakrun": "command workloads: wait4 through hakrun of the program and every "
            "child it reaped",
        }.get(next(iter(launchers), None) if len(launchers) == 1 else None, "mixed launchers")
        + ".",
        "- maxrss_kb is the harness's `maxrss_kb=` line: VmHWM of its own address space, plus "
        "the HugeTLB pages mapped when it reports (`hugetlb_kb=`; RSS leaves them out). "
        "wait4's ru_maxrss is not used: Linux carries the launcher's RSS high-water mark "
        "across exec into it (~70 MB when the launcher is hakbench's Python). Command "
        "workloads: ru_maxrss from hakrun's wait4 (a small C wrapper, so no Python mark), "
        "the largest single process of the reaped tree; for a server, the server.",
        f"- Launcher of the measured processes: {', '.join(sorted(map(str, launchers)))}.",
    ]
    return [
        "## Notes",
        "",
        *how,
        "- Files: samples.jsonl (every process), meta.json (provenance), summary.csv, "
        "pyperf/<workload>/{a,b}.json (complete pairs only), paired_ratios.png, "
        "engagement.json.",
        "",
    ]
