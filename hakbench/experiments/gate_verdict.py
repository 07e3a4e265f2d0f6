"""The gate's verdicts (pure): each measured cell against its baseline row, its
instructions and its page faults each with a status (ok, ROSE, DROPPED, FAILED, new), the
rows that fail the gate, and the table CI prints (``hakbench.experiments.gate`` measures).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from hakbench.experiments.gate import FAULT_RUNS, GateSpec

OK, ROSE, DROPPED, FAILED, NEW, MISSING = "ok", "ROSE", "DROPPED", "FAILED", "new", "missing"


def toolchain_differences(baseline: dict, now: dict) -> list[str]:
    return [
        f"{k}: baseline {baseline.get(k)!r}, here {now.get(k)!r}"
        for k in sorted(set(baseline) | set(now))
        if baseline.get(k) != now.get(k)
    ]


@dataclass(frozen=True)
class GateRow:
    profile: str
    workload: str
    baseline: float | None
    now: float | None
    tolerance_pct: float
    status: str
    error: str | None = None
    faults_baseline: int | None = None
    faults_now: int | None = None
    faults_status: str | None = None

    @property
    def change_pct(self) -> float | None:
        if self.baseline and self.now is not None:
            return (self.now / self.baseline - 1) * 100
        return None

    @property
    def faults_change(self) -> int | None:
        if self.faults_baseline is not None and self.faults_now is not None:
            return self.faults_now - self.faults_baseline
        return None

    @property
    def faults_change_pct(self) -> float | None:
        if self.faults_baseline and self.faults_now is not None:
            return (self.faults_now / self.faults_baseline - 1) * 100
        return None


def judge_faults(spec: GateSpec, workload: str, baseline: int, now: int) -> str:
    """ROSE or DROPPED when the faults moved by more than the workload's fault tolerance (%
    of the baseline) AND by more than ``faults_min_change`` faults; otherwise OK (pure)."""
    change = now - baseline
    pct = change / baseline * 100 if baseline else float("inf") if change else 0.0
    if abs(change) <= spec.faults_min_change or abs(pct) <= spec.faults_tolerance(workload):
        return OK
    return ROSE if change > 0 else DROPPED


def compare(spec: GateSpec, baseline: Iterable[dict], current: Iterable[dict]) -> list[GateRow]:
    """Judge every measured cell against its baseline row (pure): its instructions and its
    page faults, each with its own status."""
    base = {(r["profile"], r["workload"]): r for r in baseline}
    rows = []
    for r in current:
        key = (r["profile"], r["workload"])
        tol = spec.tolerance(r["workload"])
        b = base.pop(key, None)
        b_ir = b.get("ir_per_op") if b else None
        b_flt = b.get("minflt") if b else None
        flt = r.get("minflt")
        if r["status"] != "ok" or r["ir_per_op"] is None or flt is None:
            error = r.get("error") or r["status"]
            rows.append(GateRow(*key, b_ir, None, tol, FAILED, error, b_flt, None, FAILED))
            continue
        if b_ir is None or b_flt is None:
            rows.append(GateRow(*key, b_ir, r["ir_per_op"], tol, NEW, None, b_flt, flt, NEW))
            continue
        if b.get("args") and b["args"] != r["args"]:
            other = "measured with other arguments"
            rows.append(GateRow(*key, b_ir, r["ir_per_op"], tol, NEW, other, b_flt, flt, NEW))
            continue
        change = (r["ir_per_op"] / b_ir - 1) * 100
        status = ROSE if change > tol else DROPPED if change < -tol else OK
        faults = judge_faults(spec, r["workload"], b_flt, flt)
        rows.append(GateRow(*key, b_ir, r["ir_per_op"], tol, status, None, b_flt, flt, faults))
    return rows


def failing(rows: Iterable[GateRow]) -> list[GateRow]:
    """Rows that fail the gate: a rise, a drop (of instructions or of page faults), a cell
    without a baseline."""
    bad = (ROSE, DROPPED, NEW)
    return [r for r in rows if r.status in bad or r.faults_status in bad]


def table(rows: Sequence[GateRow]) -> str:
    """The gate's table, Markdown (readable in a terminal and in a CI log)."""

    def num(v, spec):
        return "—" if v is None else format(v, spec)

    lines = [
        "| profile | workload | baseline Ir/op | now Ir/op | change | tolerance | verdict "
        "| baseline faults | now faults | change | faults verdict |",
        "|---|---|---:|---:|---:|---:|---|---:|---:|---:|---|",
    ]
    for r in rows:
        verdict = r.status + (f" ({r.error})" if r.error else "")
        flt_change = "—"
        if r.faults_change is not None:
            pct = r.faults_change_pct
            flt_change = f"{r.faults_change:+d}" + ("" if pct is None else f" ({pct:+.0f} %)")
        lines.append(
            f"| {r.profile} | {r.workload} | {num(r.baseline, '.2f')} | {num(r.now, '.2f')} "
            f"| {num(r.change_pct, '+.2f')}{'' if r.change_pct is None else ' %'} "
            f"| ±{r.tolerance_pct:g} % | {verdict} "
            f"| {num(r.faults_baseline, 'd')} | {num(r.faults_now, 'd')} | {flt_change} "
            f"| {r.faults_status or '—'} |"
        )
    return "\n".join(lines)


def faults_rule(spec: GateSpec) -> str:
    """The fault columns' rule, printed under the table."""
    wider = "".join(
        f", {w} {pct:g} %" for w, pct in sorted(spec.faults_tolerance_by_workload.items())
    )
    return (
        f"faults: minor page faults, median of {FAULT_RUNS} native runs; a cell fails when "
        f"they moved by more than {spec.faults_tolerance_pct:g} %{wider} and by more than "
        f"{spec.faults_min_change} faults"
    )
