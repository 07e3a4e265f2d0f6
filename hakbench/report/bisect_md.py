"""report.md of ``hakbench bisect``: the range, how commits were judged, each step with its
verdict and the alpha it spent, the error budget spent in total, why the search stopped, the
commits skipped and the commit found (and whether its parent confirmed it)."""

from __future__ import annotations

from pathlib import Path

from hakbench.engine.store import write_text


def _short(sha: str | None) -> str:
    return (sha or "-")[:12]


def bisect_lines(result) -> list[str]:
    spec, n = result.spec, len(result.commits)
    subject = result.subjects.get
    lines = [
        f"# bisect: {spec.workload}, {spec.good} (good) .. {spec.bad} (bad)",
        "",
        f"Range: {n} commits after `{spec.good}` up to `{spec.bad}` along the first parents; "
        f"profile {spec.profile}, threshold {spec.threshold_pct:g} %.",
        "",
    ]
    if result.how == "instructions":
        lines += [
            "Judged on exact instruction counts (callgrind Ir per op, one count per commit): "
            "the bad revision needs at least the threshold more than the good one, and a "
            "commit is bad when it has at least half of that change. No error rate: a count "
            "does not vary.",
            "",
        ]
    elif result.how == "timed":
        lines += [
            "Judged by paired sequential A/Bs (`hakbench ab` between two revisions, code "
            "layouts drawn on both sides). The range is confirmed first (good against bad, "
            "NO-GO), each probe is the commit against the good revision at half the "
            "confirmed regression (NO-GO: bad, NEUTRAL: good, else undecided and skipped), "
            "the commit found against its parent.",
            "",
            *_budget_lines(result),
        ]
    if result.found:
        state = "confirmed" if result.confirmed else "NOT confirmed"
        lines += [
            f"**First bad commit: `{_short(result.found)}` {subject(result.found, '')}** "
            f"({state} against its parent).",
            "",
        ]
    elif result.candidates:
        lines += ["**The first bad commit is one of:**", ""]
        lines += [f"- `{_short(c)}` {subject(c, '')}" for c in result.candidates] + [""]
    if result.message:
        lines += [f"Note: {result.message}.", ""]
    if result.stop:
        lines += [f"Stopped: {result.stop}.", ""]
    if result.interrupted:
        lines += [
            f"**Interrupted**: `hakbench bisect --resume {result.out}` finishes the search "
            "from the steps that finished.",
            "",
        ]
    probes = result.probes
    lines += [
        f"Commits judged: {probes} (a linear scan of the range would judge up to {n + 1}).",
        "",
        "## Steps",
        "",
        "| # | step | commit | against | verdict | classified | alpha | detail |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for i, s in enumerate(result.steps, 1):
        commit = f"`{_short(s.commit)}` {subject(s.commit, '')}"
        alpha = f"{s.alpha:.4g}" if s.alpha else "0" if s.out else "-"
        lines.append(
            f"| {i} | {s.kind} | {commit} | {_short(s.against) if s.against else '-'} | "
            f"{s.verdict} | {s.classified or '-'} | {alpha} | {s.detail}"
            + (f" ([run](steps/{Path(s.out).name}/report.md))" if s.out else "")
            + " |"
        )
    skipped = [s for s in result.steps if s.verdict == "build failed"]
    if skipped:
        lines += ["", "## Skipped (did not build)", ""]
        lines += [f"- `{_short(s.commit)}`: {s.detail}" for s in skipped]
    return [*lines, ""]


def _budget_lines(result) -> list[str]:
    """The error budget: the rule, and what the steps spent of it."""
    spec, a, m = result.spec, result.alpha_step, result.max_steps
    spent, k = result.alpha_spent, result.ab_steps
    return [
        f"Error budget: alpha {spec.alpha:g} for the whole call, held by Bonferroni: every "
        f"A/B step runs at {spec.alpha:g}/{m} = {a:.4g} and spends it (an INCONCLUSIVE one "
        "too; a step without a verdict because a side did not build spends nothing), so at "
        f"most {m} A/B steps run for {len(result.commits)} commits; {a:.4g} stays reserved "
        "for the confirmation against the parent, and a probe runs only while it and that "
        "share still fit.",
        "",
        f"**Alpha spent: {spent:.4g} of {spec.alpha:g}** in {k} A/B steps "
        f"({max(0.0, round(spec.alpha - spent, 12)):.4g} left).",
        "",
    ]


def write_bisect_report(result, path: Path) -> Path:
    return write_text(path, "\n".join(bisect_lines(result)))
