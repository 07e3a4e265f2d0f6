"""The machine a calibration belongs to, and what ``ab`` makes of it.

A calibration belongs to the machine it was measured on: ``calibrate`` keeps it under
``results/runs/calibration/<fingerprint>/`` (git-ignored); ``results/calibration/latest.json``
is the lab machine's committed reference, used when this machine has none. ``ab`` warns
from it (``noise_warning``) only when it shows that an effect larger than the threshold is
missed more than one time in five, and its report names it (``calibration_line``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from hakbench.core import paths
from hakbench.core.errors import UsageError
from hakbench.engine.meta import fingerprint
from hakbench.engine.store import read_json
from hakbench.tables.calibration import POWER


def machine_path(fp: str | None = None) -> Path:
    """This machine's latest calibration (results/runs is git-ignored)."""
    return paths.results_dir() / "runs" / "calibration" / (fp or fingerprint()) / "latest.json"


def reference_path() -> Path:
    """The lab machine's calibration, committed with the repository."""
    return paths.results_dir() / "calibration" / "latest.json"


@dataclass(frozen=True)
class Calibration:
    data: dict
    path: Path
    own: bool  # measured on this machine (else the committed reference)

    def describe(self) -> str:
        host = (self.data.get("machine") or {}).get("hostname", "?")
        date = str(self.data.get("date", "?"))[:10]
        whose = "this machine's" if self.own else f"the lab machine's reference ({host})"
        return (
            f"{whose} calibration of {date}: {self.data.get('runs')} pairs x "
            f"{self.data.get('trials')} trials ({self.path})"
        )


CONDITION_KEYS = ("extra_work", "effect_pct", "trials", "resolution_rate", "resolution_ci95")


def load_calibration() -> Calibration | None:
    """This machine's calibration, else the committed reference, else None. A corrupt file,
    or one without the figures the noise check reads, is bad input (exit 2) naming it."""
    for path, own in ((machine_path(), True), (reference_path(), False)):
        if path.exists():
            data = read_json(path)
            conditions = data.get("conditions") if isinstance(data, dict) else None
            if not isinstance(conditions, list) or not all(
                isinstance(c, dict) and all(k in c for k in CONDITION_KEYS) for c in conditions
            ):
                raise UsageError(
                    f"{path}: not a calibration this hakbench reads (each condition needs "
                    f"{', '.join(CONDITION_KEYS)}); run `hakbench calibrate`"
                )
            return Calibration(data, path, own)
    return None


def scaled_effect_pct(effect_pct: float, cal_runs: int, runs: int) -> float:
    """The effect that is as visible at ``runs`` pairs as ``effect_pct`` was at ``cal_runs``:
    the CI of the median and the signed-rank statistic both narrow as 1/sqrt(pairs)."""
    return effect_pct * math.sqrt(cal_runs / runs)


def metric_of(cal: Calibration) -> str:
    """The metric a calibration judged its pairs on (one written before it said: throughput)."""
    return str(cal.data.get("metric") or "throughput")


def noise_warning(
    threshold_pct: float,
    runs: int,
    cal: Calibration | None = None,
    *,
    metrics: set | None = None,
) -> str | None:
    """A warning when the calibration shows that ``runs`` pairs miss effects larger than
    ``threshold_pct``: an injected effect that, scaled to ``runs`` pairs, exceeds the
    threshold and was resolved in fewer than 80 % of trials (its whole Wilson interval below
    80 %, so a handful of unlucky trials does not cry wolf). ``metrics``: those the A/B
    judges; a calibration of another metric says nothing about them. None otherwise."""
    cal = cal or load_calibration()
    if cal is None or (metrics is not None and metric_of(cal) not in metrics):
        return None
    c = cal.data
    cal_runs = int(c.get("runs") or 0)
    conditions = [x for x in c.get("conditions") or [] if x.get("extra_work", 0) > 0]
    if not cal_runs or not conditions:
        return None
    missed = [
        x
        for x in conditions
        if scaled_effect_pct(x["effect_pct"], cal_runs, runs) > threshold_pct
        and x["resolution_ci95"][1] < POWER
    ]
    if not missed:
        return None
    worst = max(missed, key=lambda x: x["effect_pct"])
    seen = f"{worst['resolution_rate'] * 100:.0f} % of {worst['trials']} trials"
    visible = ""
    if runs != cal_runs:
        as_if = scaled_effect_pct(worst["effect_pct"], cal_runs, runs)
        visible = f" (as visible as {as_if:.2f} % at {runs} pairs)"
    text = (
        f"threshold {threshold_pct:g} % is below the noise floor of {metric_of(cal)}: an injected "
        f"{worst['effect_pct']:.2f} % slowdown at {cal_runs} pairs{visible} was resolved in "
        f"only {seen}"
    )
    floor = c.get("noise_floor_pct")
    if floor:
        need = math.ceil(cal_runs * (floor / threshold_pct) ** 2)
        text += (
            f"; use --runs {need} for {threshold_pct:g} %, or a threshold of at least "
            f"{scaled_effect_pct(floor, cal_runs, runs):.1f} %"
        )
    else:
        text += (
            "; no injected effect was resolved in 80 % of trials: use --metric instructions, "
            "or calibrate again when the machine is quieter"
        )
    return f"{text} ({cal.describe()})"


def calibration_line(metrics: set | None = None) -> str:
    """Which calibration ab's noise check used: one sentence for its report. ``metrics``:
    those the A/B judges (a calibration of another metric is named, and not used)."""
    cal = load_calibration()
    if cal is None:
        return "Noise check: none, no calibration here (run `hakbench calibrate`)."
    if metrics is not None and metric_of(cal) not in metrics:
        return (
            f"Noise check: none; {cal.describe()} measured {metric_of(cal)}, this A/B judges "
            f"{', '.join(sorted(metrics))} (`hakbench calibrate` measures what a default ab "
            "judges)."
        )
    return f"Noise check against {cal.describe()} (pairs judged on {metric_of(cal)})."


def write_record(doc: dict, out: Path, name: str) -> Path:
    """``out``/``name``, and (a finished run: no ``interrupted``) this machine's record of
    that name beside its calibration, where ``ab`` and the scorecard read it."""
    from hakbench.engine.store import write_json

    if not doc.get("interrupted"):
        write_json(machine_path(doc["fingerprint"]).with_name(name), doc)
    return write_json(out / name, doc)
