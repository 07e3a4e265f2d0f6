"""How small a change can ``ab`` see on this machine, and how often does it cry wolf?

Trials of the ``ab`` design (interleaved pairs, random order within a pair, warm-ups
discarded, verdict by ``hakbench.stats.verdict`` on the per-pair throughput ratio) where the
truth is known: A/A (no change: any GO/NO-GO is a false positive) and A against the same
cell with a known injected cost (the harness's ``--extra-work K``, a real dependent multiply
chain per op). The effect of each K is measured here, from every pair of its trials, since
it depends on the harness and the machine (the research note's values are kept beside it).

Beyond the rates, the A/A pairs give the noise of one pair's log-ratio on this machine
(robust SD); from it the minimum detectable effect at a run count follows (80 % power,
alpha 0.05, Wilcoxon ~ normal approximation), and the run count a threshold needs.
``load_latest`` / ``noise_warning`` let ``ab`` use that.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import platform
import random
import shutil
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from statistics import NormalDist

from hakbench import paths
from hakbench import stats as st
from hakbench.meta import cpu_model
from hakbench.runner import run_sample
from hakbench.schedule import ab_schedule
from hakbench.store import write_json

ALPHA = st.ALPHA
POWER = 0.8
# Asymptotic efficiency of Wilcoxon's signed-rank test relative to the t-test under normal
# noise (3/pi); with this VM's heavy tails it does better, so the MDE errs on the safe side.
WILCOXON_ARE = 3 / math.pi
# Slowdown (wall, paired median) of --extra-work K measured in research/ab_sensitivity_on_this_vm.md
# on its own loop program; ours differs, so the effect is re-measured in every calibration.
RESEARCH_EFFECT_PCT = {0.0156: 0.55, 0.5: 2.26, 1.25: 5.58, 2.5: 9.26}
DEFAULT_EXTRA_WORK = (0.5, 1.25)
AA = "A/A"


@dataclass
class Trial:
    condition: str  # "A/A" or "K=<k>"
    extra_work: float  # K of side B (side A is always 0)
    index: int
    n_pairs: int
    ratio: float  # median B/A throughput
    ci_low: float
    ci_high: float
    p_value: float
    verdict: str
    log_ratios: list = field(default_factory=list)
    failed: int = 0


def condition_name(k: float) -> str:
    return AA if k == 0 else f"K={k:g}"


def extra_work_arg(k: float) -> tuple[str, str]:
    """Fixed width (``0.0000``), so argv and stack layout are the same size on both sides."""
    return ("--extra-work", f"{k:.4f}")


def run_trial(
    cell,
    k: float,
    *,
    index: int,
    runs: int,
    warmup: int,
    seed: int,
    threshold_pct: float,
    perf: bool = False,
    timeout: float = 120.0,
) -> Trial:
    """One A/B exactly as ``ab`` schedules and judges it: A = K 0, B = K ``k``."""
    base = tuple(cell.workload.args)
    args = {"A": [*base, *extra_work_arg(0.0)], "B": [*base, *extra_work_arg(k)]}
    values: dict[tuple[int, str], float] = {}
    failed = 0
    for slot in ab_schedule(["cal"], runs, warmup, seed):
        s = run_sample(cell, phase=slot.phase, perf=perf, timeout=timeout, args=args[slot.side])
        tp = s["metrics"].get("throughput")
        if s["status"] != "ok" or not tp:
            failed += 1
            continue
        if slot.phase == "measure":
            values[(slot.pair, slot.side)] = float(tp)
    pairs = [p for p in range(runs) if (p, "A") in values and (p, "B") in values]
    a = [values[(p, "A")] for p in pairs]
    b = [values[(p, "B")] for p in pairs]
    return judge_trial(condition_name(k), k, index, a, b, threshold_pct, failed)


def judge_trial(
    condition: str,
    k: float,
    index: int,
    a: Sequence[float],
    b: Sequence[float],
    threshold_pct: float,
    failed: int = 0,
) -> Trial:
    """The ab verdict of one trial's pairs (one workload, so Holm changes nothing)."""
    import numpy as np  # heavy imports live where they are used: `hakbench --help` stays fast

    c = st.compare_paired("cal", "throughput", a, b, higher_is_better=True)
    v = st.verdict(c.ratio, c.ci_low, c.ci_high, c.p_value, threshold_pct=threshold_pct)
    logs = [float(x) for x in np.log(st.paired_ratios(a, b))]
    return Trial(
        condition, k, index, c.n_pairs, c.ratio, c.ci_low, c.ci_high, c.p_value, v, logs, failed
    )


def wilson_ci(successes: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    if n == 0:
        return (math.nan, math.nan)
    z = NormalDist().inv_cdf(1 - (1 - confidence) / 2)
    p = successes / n
    den = 1 + z * z / n
    mid = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return (float(max(0.0, mid - half)), float(min(1.0, mid + half)))


def robust_sd(values: Sequence[float]) -> float:
    """1.4826 x MAD: the SD of the bulk, not of the pairs that straddle a speed-mode switch."""
    import numpy as np

    x = np.asarray(values, dtype=float)
    if len(x) < 2:
        return math.nan
    return float(1.4826 * np.median(np.abs(x - np.median(x))))


def _z_sum(alpha: float, power: float) -> float:
    return NormalDist().inv_cdf(1 - alpha / 2) + NormalDist().inv_cdf(power)


def mde_pct(sigma: float, runs: int, alpha: float = ALPHA, power: float = POWER) -> float:
    """Smallest slowdown (%) the paired test finds with ``power`` at ``runs`` pairs."""
    if not sigma or math.isnan(sigma) or runs < 1:
        return math.nan
    delta = _z_sum(alpha, power) * sigma / math.sqrt(runs * WILCOXON_ARE)
    return 100 * (math.exp(delta) - 1)


def runs_needed(sigma: float, effect_pct: float, alpha: float = ALPHA, power: float = POWER):
    """Pairs needed to detect ``effect_pct`` with ``power``; None when it cannot be said."""
    if not sigma or math.isnan(sigma) or effect_pct <= 0:
        return None
    delta = math.log(1 + effect_pct / 100)
    return math.ceil((_z_sum(alpha, power) * sigma / delta) ** 2 / WILCOXON_ARE)


def summarize(trials: list[Trial], runs: int, threshold_pct: float) -> dict:
    """Rates and effects per condition, the false-positive rate and the noise floor."""
    import numpy as np

    conditions = []
    for name in dict.fromkeys(t.condition for t in sorted(trials, key=lambda t: t.extra_work)):
        ts = [t for t in trials if t.condition == name]
        k = ts[0].extra_work
        pooled = [x for t in ts for x in t.log_ratios]
        effect = 100 * (1 / math.exp(float(np.median(pooled))) - 1) if pooled else math.nan
        slower = sum(t.verdict == st.NO_GO for t in ts)
        faster = sum(t.verdict == st.GO for t in ts)
        significant = sum(t.p_value < ALPHA for t in ts)
        hits = slower + faster if k == 0 else slower
        low, high = wilson_ci(hits, len(ts))
        conditions.append(
            {
                "condition": name,
                "extra_work": k,
                "trials": len(ts),
                "effect_pct": round(effect, 3),
                "research_effect_pct": RESEARCH_EFFECT_PCT.get(k),
                "no_go": slower,
                "go": faster,
                "significant": significant,
                # A/A: how often the verdict was not NEUTRAL; K>0: how often it was NO-GO
                "rate": hits / len(ts),
                "rate_ci95": [round(low, 3), round(high, 3)],
                "pairs": len(pooled),
                "failed_samples": sum(t.failed for t in ts),
            }
        )
    aa = next((c for c in conditions if c["extra_work"] == 0), None)
    aa_logs = [x for t in trials if t.extra_work == 0 for x in t.log_ratios]
    sigma = robust_sd(aa_logs)
    detected = sorted(
        (c for c in conditions if c["extra_work"] > 0 and c["rate"] >= POWER),
        key=lambda c: c["effect_pct"],
    )
    return {
        "false_positive_rate": aa["rate"] if aa else None,
        "false_positive_ci95": aa["rate_ci95"] if aa else None,
        "mde_pct": round(mde_pct(sigma, runs), 3) if not math.isnan(sigma) else None,
        "mde_empirical_pct": detected[0]["effect_pct"] if detected else None,
        "noise_log_sd": round(sigma, 6) if not math.isnan(sigma) else None,
        "runs": runs,
        "threshold_pct": threshold_pct,
        "alpha": ALPHA,
        "power": POWER,
        "conditions": conditions,
    }


def machine() -> dict:
    return {
        "hostname": platform.node(),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "kernel": platform.release(),
    }


def plan(extra_work: Sequence[float], trials: int, seed: int) -> list[tuple[float, int]]:
    """(K, index) in run order: blocks holding every condition once, shuffled within each
    block, so a noisy stretch of the machine hits every condition alike."""
    rng = random.Random(seed)
    ks = [0.0, *extra_work]
    order = []
    for i in range(trials):
        block = list(ks)
        rng.shuffle(block)
        order.extend((k, i) for k in block)
    return order


def calibrate(
    cell,
    *,
    runs: int,
    trials: int,
    warmup: int,
    extra_work: Sequence[float] = DEFAULT_EXTRA_WORK,
    threshold_pct: float = st.DEFAULT_THRESHOLD_PCT,
    seed: int = 1,
    perf: bool = False,
    on_trial: Callable[[Trial, int, int], None] | None = None,
) -> tuple[dict, list[Trial]]:
    """Run every trial and summarise; ``on_trial(trial, done, total)`` reports progress."""
    order = plan(extra_work, trials, seed)
    load_before = os.getloadavg()[0]
    done: list[Trial] = []
    for n, (k, i) in enumerate(order, 1):
        t = run_trial(
            cell,
            k,
            index=i,
            runs=runs,
            warmup=warmup,
            seed=seed * 100003 + n,
            threshold_pct=threshold_pct,
            perf=perf,
        )
        done.append(t)
        if on_trial:
            on_trial(t, n, len(order))
    result = summarize(done, runs, threshold_pct)
    result.update(
        {
            "workload": cell.workload.name,
            "argv_base": list(cell.workload.args),
            "allocator": cell.allocator_label,
            "profile": cell.profile,
            "trials": trials,
            "warmup_pairs": warmup,
            "perf_wrapped": perf,
            "seed": seed,
            "machine": machine(),
            # the noise floor is the machine's *and* its neighbours': say how busy it was
            "load_avg_1min": [round(load_before, 2), round(os.getloadavg()[0], 2)],
            "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        }
    )
    return result, done


def latest_path() -> Path:
    return paths.results_dir() / "calibration" / "latest.json"


def write_calibration(result: dict, trials: list[Trial], out: Path, meta: dict) -> Path:
    """calibration.json, trials.json, report.md and meta.json in ``out``; latest.json copy."""
    out.mkdir(parents=True, exist_ok=True)
    path = write_json(out / "calibration.json", result)
    write_json(out / "trials.json", [asdict(t) for t in trials])
    write_json(out / "meta.json", meta)
    (out / "report.md").write_text(report_markdown(result))
    latest = latest_path()
    latest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(path, latest)
    return path


def _fmt(v, spec=".2f") -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, spec)


def report_markdown(c: dict) -> str:
    m = c["machine"]
    fp_low, fp_high = c["false_positive_ci95"] or (math.nan, math.nan)
    fp = c["false_positive_rate"]
    lines = [
        f"# Calibration of `hakbench ab` on {m['hostname']}",
        "",
        f"- {c['date']}, {m['cpu']} x{m['cpu_count']}, kernel {m['kernel']}; 1-min load "
        f"average {' -> '.join(str(x) for x in c.get('load_avg_1min', []))} (start -> end)",
        f"- workload `{c['workload']}` under {c['allocator']}; {c['runs']} measured pairs "
        f"(+{c['warmup_pairs']} warm-up) per trial, {c['trials']} trials per condition; "
        f"verdict threshold {c['threshold_pct']:g} %",
        f"- **false-positive rate** (A/A not NEUTRAL): {_fmt(fp and 100 * fp, '.1f')} % "
        f"(95 % CI {_fmt(100 * fp_low, '.0f')}-{_fmt(100 * fp_high, '.0f')} %)",
        f"- **minimum detectable effect** at {c['runs']} pairs (80 % power, alpha "
        f"{c['alpha']:g}): {_fmt(c['mde_pct'])} %, from the A/A pair noise "
        f"(robust SD of log B/A = {_fmt(c['noise_log_sd'], '.4f')}); the verdict also needs "
        f"the effect to pass the threshold",
        f"- smallest injected effect detected in >= 80 % of trials: "
        f"{_fmt(c['mde_empirical_pct'])} %",
        "",
        "| condition | effect here (paired median) | research note | trials | NO-GO | GO "
        "| p<0.05 | rate (95 % CI) |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in c["conditions"]:
        low, high = r["rate_ci95"]
        lines.append(
            f"| {r['condition']} | {_fmt(r['effect_pct'])} % | "
            f"{_fmt(r['research_effect_pct'])} % | {r['trials']} | {r['no_go']} | {r['go']} | "
            f"{r['significant']} | {100 * r['rate']:.0f} % ({100 * low:.0f}-{100 * high:.0f}) |"
        )
    lines += [
        "",
        "Rate: for A/A the share of trials with any GO/NO-GO (false positives); for K>0 the "
        "share judged NO-GO (detections). K is the harness's `--extra-work` (side B; side A "
        "runs K=0); its effect is measured here from all pairs of its trials.",
    ]
    return "\n".join(lines) + "\n"


def load_latest() -> dict | None:
    """The most recent calibration of this checkout, or None."""
    try:
        return json.loads(latest_path().read_text())
    except (OSError, ValueError):
        return None


def noise_warning(threshold_pct: float, runs: int) -> str | None:
    """A warning when ``threshold_pct`` is below what ``runs`` pairs can detect here."""
    cal = load_latest()
    if not cal or not cal.get("noise_log_sd"):
        return None
    sigma = float(cal["noise_log_sd"])
    floor = mde_pct(sigma, runs)
    if threshold_pct >= floor:
        return None
    need = runs_needed(sigma, threshold_pct)
    where = ""
    host = (cal.get("machine") or {}).get("hostname")
    if host and host != platform.node():
        where = f" (calibrated on {host}, not this host)"
    return (
        f"threshold {threshold_pct:g} % is below the noise floor: {runs} pairs detect about "
        f"{floor:.1f} % with 80 % power here{where}; use --runs {need} for {threshold_pct:g} %, "
        f"or a threshold of at least {floor:.1f} % (calibration of {cal.get('date', '?')})"
    )
