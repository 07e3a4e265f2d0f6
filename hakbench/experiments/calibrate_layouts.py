"""``calibrate --layouts K``: the layout spread of the current tree per workload, an A/A
across K code layouts of the same libhakmem (issue 29; ``hakbench.engine.layouts`` makes
them, ``hakbench.stats.layouts`` reads them).

The run is one fixed-count ``ab`` (``run_ab``) of the work tree's build against itself with
``--layouts K``, in ``<out>/ab``: both sides draw from the same K libraries (every
combination once per block of K*K pairs, after the first blocks of 2x2, 4x4, ...), so the
pairs' log ratios hold the layouts' own effects twice over and nothing else. Per workload:
the pair spread (robust SD of the log ratios), the layout spread (the SD of the layouts'
own effects, the pairs' noise removed: ``layout_spread``), each layout's effect, whether
any combination of layouts was LAYOUT-SENSITIVE, and the floor a two-code A/B with K = 4
and 8 layouts a side would have. A stop keeps every finished pair (the ab's samples.jsonl);
``calibrate --resume DIR`` finishes the same ab. A finished run is this machine's record
(``results/runs/calibration/<fingerprint>/layouts.json``, beside the run-length and noise
calibrations); ``results/calibration/layouts.json`` is the lab machine's, committed, which
the scorecard shows beside the noise floor.
"""

from __future__ import annotations

import datetime as _dt
import math
from pathlib import Path

from hakbench.engine.meta import collect_meta, fingerprint, machine
from hakbench.engine.schedule import complete_pairs
from hakbench.engine.store import load_samples, read_json, write_json
from hakbench.experiments import calibration
from hakbench.experiments.ab_spec import ABSpec
from hakbench.stats import stats as st
from hakbench.stats.layouts import (
    SEQUENTIAL_SHARE,
    is_layout_sensitive,
    layout_cells,
    layout_spread,
)

FILE = "layouts.json"
KIND = "calibrate-layouts"
DEFAULT_WORKLOADS = ("mixed", "tiny_hot", "c6_heavy")
DEFAULT_PAIRS = 400  # per workload: ~16 per combination of 5 layouts


def spec_of(params: dict) -> ABSpec:
    """The A/A of the calibration: the tree's own build against itself in K layouts."""
    return ABSpec(
        profile=params["profile"],
        workloads=tuple(params["workloads"]),
        pairs=params["pairs"],
        warmup_pairs=params["warmup"],
        seed=params["seed"],
        layouts=params["layouts"],
        perf="off",
        observe=False,
        iters=params.get("iters"),
        name="calibrate-layouts",
    )


def run_calibration(out: Path, params: dict, *, resume: bool, command=None) -> dict:
    """The whole ``calibrate --layouts``: the ab, then the record (and this machine's copy
    when it finished)."""
    from hakbench.experiments import calibrate as cal
    from hakbench.experiments.ab import run_ab

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    if resume:  # the stored record of what was asked
        meta = read_json(out / "meta.json")
    else:
        meta = collect_meta(command, kind=KIND, layouts=params)
        write_json(out / "meta.json", meta)
    ab_dir = out / "ab"
    started = (ab_dir / "meta.json").exists()
    result = run_ab(spec_of(params), ab_dir, show_progress=True, resume=resume and started)
    rows = load_samples(result.out)
    entries = [workload_entry(w, rows, params["layouts"]) for w in result.cells]
    doc = document(entries, params, interrupted=result.interrupted)
    doc["load"] = result.load
    calibration.write_record(doc, out, FILE)
    doc["report"] = cal.write_report(out, meta, report_lines(doc), result.load)
    doc["interrupted"] = result.interrupted
    return doc


def workload_entry(workload: str, samples: list[dict], k: int) -> dict:
    """The layout spread of one workload from its A/A pairs across layouts."""
    import numpy as np

    pairs = complete_pairs(samples, workload)
    x = [math.log(b["metrics"]["throughput"] / a["metrics"]["throughput"]) for a, b in pairs]
    la = [a.get("layout") or 0 for a, _ in pairs]
    lb = [b.get("layout") or 0 for _, b in pairs]
    sp = layout_spread(x, la, lb, k_a=k, k_b=k)
    effects: list[float] = []
    if sp.sides.keys() == {"A", "B"}:  # a layout's effect: its median as B minus as A, halved
        raw = [(sp.sides["B"].medians[j] - sp.sides["A"].medians[j]) / 2 for j in range(k)]
        effects = [e - float(np.mean(raw)) for e in raw]
    sensitive = is_layout_sensitive(layout_cells(x, la, lb, k_a=k, k_b=k)) if x else False
    return {
        "workload": workload,
        "pairs": len(x),
        "pair_spread": round(st.robust_sd(x), 6) if len(x) >= 2 else None,
        "layout_spread": _num(sp.sd),
        "layout_spread_raw": _num(sp.sd_raw),
        "effects": [round(e, 6) for e in effects],
        "layout_sensitive": bool(sensitive),
        "floor": {str(n): _num(two_code_floor(sp.sd, n)) for n in (4, 8)},
    }


def two_code_floor(sd: float, k: int, alpha: float = st.ALPHA) -> float:
    """The half-width (log units) the layout interval of a sequential call of one workload
    tends to when both sides have ``k`` layouts of spread ``sd``: t at alpha/3 one-sided
    with 2(k - 1) df times sqrt(2 sd^2 / k)."""
    from scipy import stats as _st

    if not math.isfinite(sd):
        return math.nan
    return float(_st.t.ppf(1 - alpha * SEQUENTIAL_SHARE, 2 * (k - 1))) * math.sqrt(2 * sd**2 / k)


def _num(v: float) -> float | None:
    return round(v, 6) if v is not None and math.isfinite(v) else None


def document(entries: list[dict], params: dict, *, interrupted: bool) -> dict:
    return {
        "format": 1,
        "layouts": params["layouts"],
        "pairs_per_workload": params["pairs"],
        "profile": params["profile"],
        "metric": "throughput",
        "seed": params["seed"],
        "machine": machine(),
        "fingerprint": fingerprint(),
        "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "interrupted": interrupted,
        "workloads": {e["workload"]: e for e in entries},
    }


def machine_path(fp: str | None = None) -> Path:
    """This machine's record (``results/runs/calibration/<fingerprint>/layouts.json``)."""
    return calibration.machine_path(fp).with_name(FILE)


def load_reference() -> dict | None:
    """The lab machine's committed record (what the scorecard shows), or None."""
    path = calibration.reference_path().with_name(FILE)
    return read_json(path) if path.exists() else None


def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:.2f} %"


def report_lines(doc: dict) -> list[str]:
    k = doc["layouts"]
    lines = [
        f"# Layout spread: an A/A across {k} code layouts of the current tree",
        "",
        f"- {doc['date']}, {doc['machine'].get('hostname')} (fingerprint {doc['fingerprint']}); "
        f"{doc['pairs_per_workload']} pairs per workload, profile {doc['profile']}, metric "
        f"throughput, seed {doc['seed']}; layout 0 is the build's own libhakmem",
        "- pair spread: robust SD of the pairs' log ratios; layout spread: SD of the layouts' "
        "own effects, the pairs' noise removed (hakbench.stats.layouts.layout_spread); floor: "
        "the half-width of a two-code A/B's layout interval that no number of pairs narrows",
        "",
        f"| workload | pairs | pair spread | layout spread | raw | effect per layout (0..{k - 1}) "
        "| floor K=4 / 8 | sensitive |",
        "|---|---:|---:|---:|---:|---|---|---|",
    ]
    for e in doc["workloads"].values():
        effects = " / ".join(f"{100 * math.expm1(x):+.2f}" for x in e["effects"]) or "-"
        floor = f"{_pct(e['floor']['4'])} / {_pct(e['floor']['8'])}"
        lines.append(
            f"| {e['workload']} | {e['pairs']} | {_pct(e['pair_spread'])} "
            f"| **{_pct(e['layout_spread'])}** | {_pct(e['layout_spread_raw'])} | {effects} % "
            f"| {floor} | {'LAYOUT-SENSITIVE' if e['layout_sensitive'] else 'no'} |"
        )
    if doc.get("interrupted"):
        lines += ["", "**Interrupted**: nothing recorded for the machine."]
    return lines
