"""How small a change can ``ab`` see on this machine, and how often does it cry wolf?

Trials of the ``ab`` design (interleaved pairs, random order within a pair, warm-ups
discarded, verdict by ``hakbench.stats.stats.verdict`` on the per-pair throughput ratio) where the
truth is known: A/A (no change: any GO/NO-GO is a false positive) and A against the same
cell with a known injected cost (the harness's ``--extra-work K``, a real dependent multiply
chain per op). The effect of each K is measured here, from every pair of its trials, since
it depends on the harness and the machine.

Two rates per injected effect, each with its Wilson 95 % interval:

- **detection**: the share of trials judged NO-GO by the whole rule (threshold included);
- **resolution**: the share where the noise let the rule see the effect at all (the CI and
  Wilcoxon legs, threshold 0). The smallest effect resolved in >= 80 % of trials is the
  machine's noise floor at that pair count.

``ab`` warns from these figures (``noise_warning``): only when the calibration shows that an
effect larger than its threshold is missed more than one time in five. A calibration belongs
to the machine it was measured on: ``calibrate`` keeps it under
``results/runs/calibration/<fingerprint>/`` (git-ignored); ``results/calibration/latest.json``
is the lab machine's committed reference, used when this machine has none.
"""

from __future__ import annotations

import datetime as _dt
import math
import os
import random
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from statistics import NormalDist

from hakbench.core import paths
from hakbench.core.errors import UsageError
from hakbench.engine import interrupts
from hakbench.engine.meta import fingerprint, machine
from hakbench.engine.runner import run_sample
from hakbench.engine.schedule import ab_schedule, complete_pairs
from hakbench.engine.store import append_jsonl, read_json, write_json, write_text
from hakbench.stats import stats as st

ALPHA = st.ALPHA
POWER = 0.8
# ab's default pair count (hakbench.experiments.ab_spec.DEFAULT_PAIRS; a test keeps them equal):
# calibrating at the pair count ab runs by default lets ab read its figures without scaling.
DEFAULT_RUNS = 100
# K of --extra-work around ab's 1 % threshold. On `mixed` the lab machine's reference
# calibration measured K=0.5 at 1.84 % and K=1.25 at 4.1 %; the effect of a K is not linear
# (below 0.25 the dithered loop's branch mispredicts), so each calibration measures it.
DEFAULT_EXTRA_WORK = (0.25, 0.5, 1.25)
AA = "A/A"
FORMAT = 2  # calibration.json layout; 1 had an analytic MDE instead of resolution rates


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
    verdict: str  # the ab rule with the calibration's threshold
    resolved: bool = False  # the ab rule with threshold 0 found a slowdown (A/A: any change)
    log_ratios: list = field(default_factory=list)
    failed: int = 0


def condition_name(k: float) -> str:
    return AA if k == 0 else f"K={k:g}"


def extra_work_arg(k: float) -> tuple[str, str]:
    """Fixed width (``0.0000``), so argv and stack layout are the same size on both sides."""
    return ("--extra-work", f"{k:.4f}")


def extra_ops_arg(k: int) -> tuple[str, str]:
    """``--extra-ops``, fixed width (``0002``) like ``extra_work_arg``."""
    return ("--extra-ops", f"{k:04d}")


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
    session=None,
    trial: int | None = None,
) -> Trial:
    """One A/B exactly as ``ab`` schedules and judges it: A = K 0, B = K ``k``. Each sample
    goes through ``session`` (``hakbench.engine.engine.Session``: stored as it finishes, tagged
    ``trial``, reused when a resumed calibration holds it). A side that failed where the
    other did not (``stats.failures``) makes the trial FAILED, as it makes an ab's verdict."""
    base = tuple(cell.workload.args)
    args = {"A": [*base, *extra_work_arg(0.0)], "B": [*base, *extra_work_arg(k)]}
    samples = []
    for slot in ab_schedule([cell.workload.name], runs, warmup, seed):
        tags = {"cell": cell.key, "workload": cell.workload.name, "trial": trial}
        tags.update(phase=slot.phase, side=slot.side, pair=slot.pair, round=slot.round)

        def run(slot=slot) -> dict:
            return run_sample(
                cell, phase=slot.phase, perf=perf, timeout=timeout, args=args[slot.side]
            )

        samples.append(session.take(tags, run) if session else {**run(), **tags})
    failed = sum(s["status"] != "ok" for s in samples)
    pairs = complete_pairs(samples, cell.workload.name)
    a = [float(x["metrics"]["throughput"]) for x, _ in pairs]
    b = [float(y["metrics"]["throughput"]) for _, y in pairs]
    t = judge_trial(condition_name(k), k, index, a, b, threshold_pct, failed)
    measured = [s for s in samples if s["phase"] == "measure"]
    if st.failures(*([s for s in measured if s["side"] == x] for x in "AB")).verdict:
        t.verdict, t.resolved = st.FAILED, False  # survivors never decide
    return t


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
    v0 = st.verdict(c.ratio, c.ci_low, c.ci_high, c.p_value, threshold_pct=0.0)
    resolved = v0 != st.NEUTRAL and v0 != st.NO_DATA if k == 0 else v0 == st.NO_GO
    logs = [float(x) for x in np.log(st.paired_ratios(a, b))]
    return Trial(
        condition,
        k,
        index,
        c.n_pairs,
        c.ratio,
        c.ci_low,
        c.ci_high,
        c.p_value,
        v,
        resolved,
        logs,
        failed,
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


def trials_frame(trials: Sequence[Trial]):
    """The tidy table of trials: one row per trial (its pairs' log-ratios as a list)."""
    import pandas as pd

    columns = [f.name for f in Trial.__dataclass_fields__.values()]
    return pd.DataFrame([asdict(t) for t in trials], columns=columns)


def _rate(hits: int, n: int) -> dict:
    low, high = wilson_ci(hits, n)
    return {"hits": int(hits), "rate": hits / n if n else math.nan, "ci95": [low, high]}


def condition_table(trials: Sequence[Trial]):
    """One row per condition: trials, measured effect, detection and resolution counts."""
    import numpy as np

    df = trials_frame(trials)
    df["no_go"] = df["verdict"] == st.NO_GO
    df["go"] = df["verdict"] == st.GO
    df["significant"] = df["p_value"] < ALPHA
    g = df.groupby(["extra_work", "condition"], sort=True)
    table = g.agg(
        trials=("index", "size"),
        no_go=("no_go", "sum"),
        go=("go", "sum"),
        significant=("significant", "sum"),
        resolved=("resolved", "sum"),
        failed_samples=("failed", "sum"),
    ).reset_index()
    pooled = g["log_ratios"].agg(lambda s: [x for row in s for x in row]).reset_index(drop=True)
    table["pairs"] = pooled.map(len)
    # the paired median of every pair of the condition, as a slowdown of B in percent
    table["effect_pct"] = pooled.map(
        lambda xs: 100 * (1 / math.exp(float(np.median(xs))) - 1) if xs else math.nan
    )
    # A/A: any GO/NO-GO is a false positive; K>0: NO-GO is a detection
    table["detected"] = np.where(
        table["extra_work"] == 0, table["no_go"] + table["go"], table["no_go"]
    )
    return table


def summarize(trials: list[Trial], runs: int, threshold_pct: float) -> dict:
    """Rates (with Wilson CIs) and effects per condition, the false-positive rate, the
    smallest effect detected and the smallest resolved in >= 80 % of trials. A FAILED trial
    (a side failed) is counted apart and judges nothing."""
    failed_trials = [t for t in trials if t.verdict == st.FAILED]
    trials = [t for t in trials if t.verdict != st.FAILED]
    if not trials:
        return {
            "format": FORMAT,
            "false_positive_rate": None,
            "false_positive_ci95": None,
            "smallest_detected_pct": None,
            "noise_floor_pct": None,
            "noise_log_sd": None,
            "runs": runs,
            "threshold_pct": threshold_pct,
            "alpha": ALPHA,
            "power": POWER,
            "conditions": [],
            "failed_trials": len(failed_trials),
        }
    table = condition_table(trials)
    conditions = []
    for r in table.to_dict("records"):
        n = int(r["trials"])
        det, res = _rate(int(r["detected"]), n), _rate(int(r["resolved"]), n)
        conditions.append(
            {
                "condition": r["condition"],
                "extra_work": float(r["extra_work"]),
                "trials": n,
                "pairs": int(r["pairs"]),
                "effect_pct": round(float(r["effect_pct"]), 3),
                "no_go": int(r["no_go"]),
                "go": int(r["go"]),
                "significant": int(r["significant"]),
                "detection_rate": det["rate"],
                "detection_ci95": [round(x, 3) for x in det["ci95"]],
                "resolution_rate": res["rate"],
                "resolution_ci95": [round(x, 3) for x in res["ci95"]],
                "failed_samples": int(r["failed_samples"]),
            }
        )
    aa = next((c for c in conditions if c["extra_work"] == 0), None)
    aa_logs = [x for t in trials if t.extra_work == 0 for x in t.log_ratios]
    sigma = robust_sd(aa_logs)
    return {
        "format": FORMAT,
        "false_positive_rate": aa["detection_rate"] if aa else None,
        "false_positive_ci95": aa["detection_ci95"] if aa else None,
        "smallest_detected_pct": smallest_effect(conditions, "detection_rate"),
        "noise_floor_pct": smallest_effect(conditions, "resolution_rate"),
        "noise_log_sd": round(sigma, 6) if not math.isnan(sigma) else None,
        "runs": runs,
        "threshold_pct": threshold_pct,
        "alpha": ALPHA,
        "power": POWER,
        "conditions": conditions,
        "failed_trials": len(failed_trials),
    }


def smallest_effect(conditions: Sequence[dict], rate: str) -> float | None:
    """The smallest injected effect whose ``rate`` reached ``POWER`` (80 %), or None."""
    hit = [c["effect_pct"] for c in conditions if c["extra_work"] > 0 and c[rate] >= POWER]
    return min(hit) if hit else None


# ---- the machine a calibration belongs to ----


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


# ---- a whole calibration ----


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
    session=None,
    finished: Sequence[Trial] = (),
) -> tuple[dict, list[Trial]]:
    """Run every trial and summarise; ``on_trial(trial, done, total)`` reports progress.
    ``session``: the run directory's ``engine.Session`` (samples stored as they finish);
    ``finished``: trials a resumed calibration already holds (not run again).

    A stop signal ends the calibration after the finished trials: the summary covers them
    and says ``"interrupted": true``.
    """
    order = plan(extra_work, trials, seed)
    load_before = os.getloadavg()[0]
    kept = {(t.extra_work, t.index): t for t in finished}
    done: list[Trial] = []
    interrupted = False
    try:
        for n, (k, i) in enumerate(order, 1):
            if (k, i) in kept:
                done.append(kept[(k, i)])
                continue
            t = run_trial(
                cell,
                k,
                index=i,
                runs=runs,
                warmup=warmup,
                seed=seed * 100003 + n,
                threshold_pct=threshold_pct,
                perf=perf,
                session=session,
                trial=n,
            )
            done.append(t)
            if on_trial:
                on_trial(t, n, len(order))
    except KeyboardInterrupt:
        interrupted = True
    with interrupts.finishing():  # the summary of what finished: a stop cuts nothing here
        result = summarize(done, runs, threshold_pct)
        result.update(
            {
                "workload": cell.workload.name,
                "argv_base": list(cell.workload.args),
                "allocator": cell.allocator_label,
                "profile": cell.profile,
                "trials": trials,
                "trials_done": len(done),
                "trials_planned": len(order),
                "interrupted": interrupted,
                "warmup_pairs": warmup,
                "perf_wrapped": perf,
                "seed": seed,
                "machine": machine(),
                "fingerprint": fingerprint(),
                # the noise floor is the machine's *and* its neighbours': say how busy it was
                "load_avg_1min": [round(load_before, 2), round(os.getloadavg()[0], 2)],
                "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
            }
        )
    return result, done


def record_trial(out: Path, trial: Trial) -> None:
    """Append one finished trial to ``out``/trials.jsonl (fsynced)."""
    out.mkdir(parents=True, exist_ok=True)
    append_jsonl(out / "trials.jsonl", asdict(trial))


def write_calibration(result: dict, out: Path, meta: dict) -> Path:
    """calibration.json, report.md and meta.json in ``out``; a complete calibration also
    becomes this machine's latest (never a tracked file)."""
    path = write_json(out / "calibration.json", result)
    write_json(out / "meta.json", meta)
    write_text(out / "report.md", report_markdown(result))
    if not result.get("interrupted"):
        write_json(machine_path(result.get("fingerprint")), result)
    return path


def _fmt(v, spec=".2f") -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, spec)


def _pct_ci(rate: float, ci: Sequence[float]) -> str:
    return f"{100 * rate:.0f} % ({100 * ci[0]:.0f}-{100 * ci[1]:.0f})"


def report_markdown(c: dict) -> str:
    m = c["machine"]
    fp = c["false_positive_rate"]
    fp_ci = _pct_ci(fp, c["false_positive_ci95"]) if fp is not None else "-"
    lines = [
        f"# Calibration of `hakbench ab` on {m['hostname']} (fingerprint {c.get('fingerprint')})",
        "",
    ]
    if c.get("interrupted"):
        lines += [
            f"**Interrupted** after {c.get('trials_done')} of {c.get('trials_planned')} "
            "trials: the figures cover those only, "
            "and this calibration did not become the machine's latest.",
            "",
        ]
    lines += [
        f"- {c['date']}, {m['cpu']} x{m['cpu_count']}, kernel {m['kernel']}; 1-min load "
        f"average {' -> '.join(str(x) for x in c.get('load_avg_1min', []))} (start -> end)",
        f"- workload `{c['workload']}` under {c['allocator']}; {c['runs']} measured pairs "
        f"(+{c['warmup_pairs']} warm-up) per trial, {c['trials']} trials per condition; "
        f"verdict threshold {c['threshold_pct']:g} %; seed {c.get('seed')} (`--seed` replays "
        "the plan)",
        f"- **false-positive rate** (A/A not NEUTRAL): {fp_ci}",
        f"- **smallest injected effect detected** (NO-GO) in >= 80 % of trials: "
        f"{_fmt(c['smallest_detected_pct'])} %",
        f"- **noise floor** (smallest injected effect the CI and Wilcoxon legs resolve in "
        f">= 80 % of trials, threshold aside): {_fmt(c['noise_floor_pct'])} %",
        f"- pair noise (robust SD of log B/A in the A/A trials): {_fmt(c['noise_log_sd'], '.4f')}",
        f"- trials FAILED (a side failed where the other did not; not judged): "
        f"{c.get('failed_trials', 0)}",
        "",
        "| condition | effect here (paired median) | trials | NO-GO | GO | p<0.05 "
        "| detected (95 % CI) | resolved (95 % CI) |",
        "|---|---:|---:|---:|---:|---:|---|---|",
    ]
    for r in c["conditions"]:
        lines.append(
            f"| {r['condition']} | {_fmt(r['effect_pct'])} % | {r['trials']} | {r['no_go']} "
            f"| {r['go']} | {r['significant']} "
            f"| {_pct_ci(r['detection_rate'], r['detection_ci95'])} "
            f"| {_pct_ci(r['resolution_rate'], r['resolution_ci95'])} |"
        )
    lines += [
        "",
        "Detected: for A/A the share of trials with any GO/NO-GO (false positives); for K>0 "
        "the share judged NO-GO by ab's rule. Resolved: the same rule with threshold 0 (the "
        "CI excludes 1 and Wilcoxon's p < 0.05). K is the harness's `--extra-work` (side B; "
        "side A runs K=0); its effect is measured here from all pairs of its trials. "
        "Intervals are Wilson 95 % intervals.",
    ]
    return "\n".join(lines) + "\n"


# ---- what ab makes of it ----


def scaled_effect_pct(effect_pct: float, cal_runs: int, runs: int) -> float:
    """The effect that is as visible at ``runs`` pairs as ``effect_pct`` was at ``cal_runs``:
    the CI of the median and the signed-rank statistic both narrow as 1/sqrt(pairs)."""
    return effect_pct * math.sqrt(cal_runs / runs)


def noise_warning(threshold_pct: float, runs: int, cal: Calibration | None = None) -> str | None:
    """A warning when the calibration shows that ``runs`` pairs miss effects larger than
    ``threshold_pct``: an injected effect that, scaled to ``runs`` pairs, exceeds the
    threshold and was resolved in fewer than 80 % of trials (its whole Wilson interval below
    80 %, so a handful of unlucky trials does not cry wolf). None otherwise."""
    cal = cal or load_calibration()
    if cal is None:
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
        f"threshold {threshold_pct:g} % is below the noise floor: an injected "
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


def calibration_line() -> str:
    """Which calibration ab's noise check used: one sentence for its report."""
    cal = load_calibration()
    if cal is None:
        return "Noise check: none, no calibration here (run `hakbench calibrate`)."
    return f"Noise check against {cal.describe()}."
