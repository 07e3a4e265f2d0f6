"""The soak report: ``report.md`` (figures, verdicts, syscall budget, provenance) and
``soak.png`` (RSS and ops/s over time, one line per allocator/profile, two panels).

Made from the summary (``hakbench.experiments.soak.write_results``) and the epoch rows; says what is
uncertain: an incomplete run, a CV that machine noise explains, a syscall count whose short
pass includes start-up.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from hakbench.engine.load import describe as describe_load

PLOT_NAME = "soak.png"


def _pct(value: float | None, signed: bool = True) -> str:
    if value is None:
        return "n/a"
    return f"{value:+.1f} %" if signed else f"{value:.1f} %"


def _per_h(value: float | None) -> str:
    return "n/a" if value is None else f"{value:+.1f} %/h"


def _num(value, fmt: str = "{:,.0f}") -> str:
    return "n/a" if value is None else fmt.format(value)


def _mib(kb) -> str:
    return "n/a" if kb is None else f"{kb / 1024:.1f} MiB"


def _trend_line(name: str, fig: dict, key: str, verdict: str, budget: str) -> str:
    if verdict == "n/a":
        return f"{name}: n/a (too few epochs after warm-up)"
    low, high = fig[f"{key}_trend_ci95"]
    return (
        f"{name}: {_per_h(fig[f'{key}_trend_pct_per_h'])} (95 % CI {low:+.1f} to {high:+.1f}) "
        f"{verdict} (budget {budget}; edge drift {_pct(fig[f'{key}_drift_pct'])} = "
        f"{_per_h(fig[f'{key}_drift_pct_per_h'])})"
    )


def verdict_lines(fig: dict, thresholds: dict) -> list[str]:
    """One line per verdict of one run: the figure, its CI, PASS/FAIL and the budget."""
    v = fig["verdicts"]
    rss_budget = f"≤ {thresholds['rss_pct_per_h']:+.1f} %/h"
    ops_budget = f"≥ {-thresholds['ops_pct_per_h']:+.1f} %/h"
    lines = [
        _trend_line("RSS trend", fig, "rss", v["rss_trend"], rss_budget),
        _trend_line("ops/s trend", fig, "ops", v["ops_trend"], ops_budget),
    ]
    if thresholds.get("cv_pct") is None:
        lines.append(f"ops/s CV: {_pct(fig['ops_cv_pct'], False)} (reported, not judged)")
    elif v["ops_cv"] == "n/a":
        lines.append("ops/s CV: n/a (too few epochs after warm-up)")
    else:
        lines.append(
            f"ops/s CV: {_pct(fig['ops_cv_pct'], False)} {v['ops_cv']} "
            f"(limit ≤ {_pct(thresholds['cv_pct'], False)})"
        )
    lines.append(
        "syscalls: n/a (no count taken)"
        if v["syscalls"] == "n/a"
        else f"syscalls: {fig['syscalls_per_kop']:.3g} per 1000 ops {v['syscalls']} "
        f"(budget ≤ {thresholds['syscalls_per_kop']:g}; {fig['syscalls_source']})"
    )
    return lines


def cv_noise_note(figures: Sequence[dict]) -> str | None:
    """Whether a failing ops/s CV is the allocator's or this machine's, judged against the
    reference allocators of the same soak (this VM flips between speed modes ~30 % apart)."""
    failing = [f for f in figures if f["verdicts"]["ops_cv"] == "FAIL"]
    if not failing:
        return None
    refs = [f for f in figures if f["profile"] is None]
    ref_failing = [f for f in refs if f["verdicts"]["ops_cv"] == "FAIL"]
    hak_failing = [f for f in failing if f["profile"] is not None]
    listed = ", ".join(f"{f['label']} {_pct(f['ops_cv_pct'], False)}" for f in ref_failing)
    if ref_failing:
        return (
            f"ops/s CV is dominated by machine noise: the reference allocator(s) in this soak "
            f"fail the same limit ({listed}). This shared VM switches between speed modes about "
            f"30 % apart, so the CV verdicts here say little about the allocators."
        )
    if hak_failing and refs:
        return (
            "libhakmem's ops/s varies more than every reference allocator's in the same soak; "
            "machine noise alone does not explain its CV."
        )
    if hak_failing:
        return (
            "No reference allocator ran in this soak, so machine noise cannot be told apart "
            "from the allocator's own variation; add `--allocator system` to compare."
        )
    return None


def _figures_table(figures: Sequence[dict]) -> list[str]:
    rows = [
        "| run | status | epochs (after warm-up; window) | RSS first → last | peak HWM "
        "| RSS trend | RSS slope | ops/s median | ops/s trend | ops/s CV | syscalls/1000 ops "
        "| minflt | majflt |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for f in figures:
        rows.append(
            f"| {f['label']} | {f['status']} | {f['epochs']} ({f['steady_epochs']}; "
            f"{f['window_epochs']}) "
            f"| {_mib(f['rss_first_kb'])} → {_mib(f['rss_last_kb'])} | {_mib(f['peak_hwm_kb'])} "
            f"| {_per_h(f['rss_trend_pct_per_h'])} "
            f"| {_num(f['rss_slope_kib_per_h'], '{:+,.0f} KiB/h')} "
            f"| {_num(f['ops_s_median'])} | {_per_h(f['ops_trend_pct_per_h'])} "
            f"| {_pct(f['ops_cv_pct'], False)} | {_num(f['syscalls_per_kop'], '{:.3g}')} "
            f"| {_num(f['minflt'])} | {_num(f['majflt'])} |"
        )
    return rows


def _budget_table(figures: Sequence[dict]) -> list[str]:
    rows = [
        "| run | source | mmap | munmap | madvise | brk | mremap | ops | syscalls/op | note |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for f in figures:
        for b in f["syscall_budget"]:
            counts = " | ".join(_num(b[s]) for s in ("mmap", "munmap", "madvise", "brk", "mremap"))
            rows.append(
                f"| {f['label']} | {b['source']} | {counts} | {_num(b['ops'])} "
                f"| {_num(b['syscalls_per_op'], '{:.3g}')} | {b['note']} |"
            )
    return rows if len(rows) > 2 else ["No syscall counts were taken (`--syscall-pass 0`)."]


def _provenance(meta: dict) -> list[str]:
    git = meta.get("git") or {}
    commit = git.get("commit") or "no commit"
    dirty = " (uncommitted changes)" if git.get("dirty") else ""
    return [
        f"- date: {meta.get('date')}; hakbench {meta.get('hakbench_version')}",
        f"- commit: {commit}{dirty}",
        f"- host: {meta.get('hostname')}, {meta.get('cpu_model')}, {meta.get('cpu_count')} CPUs, "
        f"1-min load {_num(meta.get('load_avg_1min'), '{:.2f}')} at start",
        f"- kernel {meta.get('kernel')}, {meta.get('glibc')}, {meta.get('compiler')}",
        f"- THP enabled={meta.get('thp_enabled')} defrag={meta.get('thp_defrag')}, "
        f"overcommit_memory={meta.get('overcommit_memory')}",
        f"- profile values validated against the options table: {meta.get('options_validated')}",
        "- everything else: `meta.json`",
    ]


def render_markdown(summary: dict, meta: dict, plot_name: str | None = PLOT_NAME) -> str:
    figures = summary["runs"]
    th = summary["thresholds"]
    labels = ", ".join(f["label"] for f in figures) or "nothing"
    minutes = summary["duration_s"] / 60
    out = [
        f"# Soak: {labels}",
        "",
        f"{summary['epochs_planned']} epochs of {summary['epoch_ms'] / 1000:g} s "
        f"({minutes:.1f} min) per allocator/profile, workload `{summary['workload']}`, "
        f"one process each, one after another.",
        "",
        f"Command: `{summary['command']}`",
        "",
        describe_load(meta.get("load")),
    ]
    problems = [f for f in figures if f["status"] != "complete"]
    for notice in _notices(summary, problems):
        out += ["", notice]
    out += ["", "## Verdicts", ""]
    for f in figures:
        out.append(f"### {f['label']}")
        out.append("")
        out += [f"- {line}" for line in verdict_lines(f, th)]
        out.append("")
    note = cv_noise_note(figures)
    if note:
        out += [f"Note: {note}", ""]
    out += ["## Figures", "", *_figures_table(figures), ""]
    out += _method_lines(summary, figures)
    if plot_name:
        out += ["## Over time", "", f"![RSS and ops/s over time]({plot_name})", ""]
    out += _tail_lines(figures, problems)
    out += ["## Provenance", "", *_provenance(meta), ""]
    return "\n".join(out)


def _notices(summary: dict, problems: list[dict]) -> list[str]:
    """What to know before the verdicts: an interruption, cut attempts, incomplete or
    skipped targets, an injected leak."""
    notices: list[str] = []
    if summary["interrupted"]:
        by = summary.get("interrupted_by") or "Ctrl-C (SIGINT)"
        notices.append(
            f"**Interrupted by {by}**: the figures below use the epochs so far; "
            "`hakbench soak --resume DIR` (this directory) continues the soak."
        )
    for c in summary.get("cut_attempts") or ():
        notices.append(
            f"An earlier process of {c['target']} (attempt {c['attempt']}) was cut after "
            f"{c['epochs']} epochs and ran again from its start; its epochs are kept in "
            "epochs.jsonl."
        )
    for f in problems:
        notices.append(f"**{f['label']} is incomplete**: {f['cause']}.")
    if summary["skipped"]:
        notices.append(f"Not run: {', '.join(summary['skipped'])}.")
    if summary["leak_kb_per_s"]:
        notices.append(
            f"A leak of {summary['leak_kb_per_s']} KiB/s was injected on purpose "
            f"(`--inject-leak`): the RSS trend should FAIL."
        )
    return notices


def _method_lines(summary: dict, figures: list[dict]) -> list[str]:
    """How the trends are judged, and the syscall budget."""
    return [
        f"Warm-up: the first {summary['warmup_epochs']} epoch(s) are left out. A trend is the "
        "least-squares slope over the remaining epochs in percent of its fitted start per "
        "hour, with the 95 % CI of the slope (Student t); it FAILs when it goes the bad way "
        "faster than its budget and its CI excludes zero. Per hour, the same leak fails a "
        "short soak and a long one alike. Edge drift compares the median of the last 10 % of "
        "the epochs with the median of the first 10 % (the window: at least one epoch). "
        "RSS is the kernel's VmRSS read from /proc the moment each epoch line "
        "arrived; when the process had already exited (it may after its last epoch) "
        "`rss_kb` is empty in epochs.csv and the harness's own reading (`harness_rss_kb`) "
        "stands in.",
        "",
        "## Syscall budget",
        "",
        *_budget_table(figures),
        "",
        "The counters cover the whole soak; the strace pass is a separate short run so the "
        "soak's timing is undisturbed, and it includes process start-up.",
        "",
    ]


def _tail_lines(figures: list[dict], problems: list[dict]) -> list[str]:
    """The stderr tail of each incomplete target and every target's allocator stats."""
    out = []
    for f in problems:
        if f["stderr_tail"]:
            out += [f"### stderr tail of {f['label']}", "", "```", f["stderr_tail"].rstrip()]
            out += ["```", ""]
    for f in figures:
        if f["alloc_stats"]:
            out += [f"### Allocator stats of {f['label']}", "", "```"]
            for group, counters in f["alloc_stats"].items():
                kv = " ".join(f"{k}={v}" for k, v in counters.items())
                out.append(f"[{group}] {kv}")
            out += ["```", ""]
    return out


def plot_soak(path: Path, epochs: Sequence[dict]) -> bool:
    """RSS (top) and ops/s (bottom) against time, one line per allocator/profile.

    Returns False (and writes nothing) when there is no epoch to draw.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd

    df = pd.DataFrame(list(epochs))
    if df.empty:
        return False
    in_minutes = df["t"].max() > 300
    df["x"] = df["t"] / 60 if in_minutes else df["t"]
    # Same fallback as the figures: the harness's reading when /proc was already gone.
    df["rss_kb"] = df["rss_kb"].fillna(df["harness_rss_kb"])
    fig, (ax_rss, ax_ops) = plt.subplots(2, 1, sharex=True, figsize=(9, 6.5))
    for (alloc, profile), g in df.groupby(["allocator", "profile"], sort=False):
        label = f"{alloc} {profile}".strip()
        ax_rss.plot(g["x"], g["rss_kb"] / 1024, marker=".", label=label)
        ax_ops.plot(g["x"], g["ops_s"] / 1e6, marker=".", label=label)
    ax_rss.set_ylabel("RSS (MiB, VmRSS)")
    ax_rss.set_ylim(bottom=0)
    ax_ops.set_ylabel("throughput (M ops/s)")
    ax_ops.set_ylim(bottom=0)
    ax_ops.set_xlabel("time (min)" if in_minutes else "time (s)")
    ax_rss.legend(loc="best", fontsize="small")
    ax_rss.set_title("Soak: resident memory and throughput per epoch")
    for ax in (ax_rss, ax_ops):
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def write_report(out_dir: Path, summary: dict, meta: dict, epochs: Sequence[dict]) -> Path:
    """Write ``report.md`` (and ``soak.png`` when there are epochs); return the report path."""
    plotted = plot_soak(out_dir / PLOT_NAME, epochs)
    report = out_dir / "report.md"
    report.write_text(render_markdown(summary, meta, PLOT_NAME if plotted else None))
    return report
