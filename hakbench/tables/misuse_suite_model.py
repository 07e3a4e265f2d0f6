"""What mimalloc-bench's security probes' output means, apart from running them: the
classification of one probe process, the benign programs' checks, and the rows and counts
every report of them prints (docs/misuse.md, "The suite's security probes").

``hakbench.experiments.misuse_suite`` runs them; ``hakbench.report.misuse_suite_md`` and the
scorecard draw the rows. This module imports none of them.

The suite's contract: a probe prints ``NOT_CAUGHT`` when the allocator let the misuse pass
(mimalloc-bench's ``bench.sh`` greps for it). The rule here:

- one process is ``not-caught`` when its stdout holds ``NOT_CAUGHT`` (a crash or a timeout
  after it is noted, as bench.sh's "late crash"); ``hung`` when hakbench's timeout ended it
  before; ``error`` when it could not run under the allocator (the dynamic linker refused
  the library, the program could not start, a SIGKILL from outside); ``caught``
  otherwise: stopped by a signal or an exit, or finished without the line (the allocator
  prevented the misuse, e.g. zeroed memory). ``ended`` says how (``SIGABRT``, ``exit 0``,
  ``timeout``), ``stderr_first`` the allocator's message.
- a probe runs several times per allocator (defences that draw random numbers, and address
  space randomisation, can let a misuse through in one run and not another): it is
  ``caught`` only when caught in every run, ``sometimes`` when in some, and the row keeps
  how many (``caught_runs`` of ``runs``).
- a probe counts only for an allocator that ran the suite's benign programs (``BENIGN``)
  cleanly in the same call: an allocator that aborts every program would otherwise "catch"
  every probe. One that fails them is ``not usable`` and none of its probes is counted.
"""

from __future__ import annotations

import re
import signal as _signal
from dataclasses import dataclass

from hakbench.engine.process import signal_name
from hakbench.tables import misuse_model

NOT_CAUGHT = "NOT_CAUGHT"
SUITE_CSV = "suite-probes.csv"  # the tidy table of a run and of the scorecard
# The optional reference's name: GrapheneOS's hardened_malloc, given by path (docs/misuse.md)
HARDENED = "hardened_malloc"
SIZES = ("small", "medium", "large")  # the suite's -DALLOCATION_SIZE=8, 4096, 256*1024
OUTCOMES = ("caught", "sometimes", "not-caught", "hung", "error")
# what the dynamic linker says when LD_PRELOAD names a library it cannot load
PRELOAD_FAILED = "ERROR: ld.so:"
STDOUT_KEPT_CHARS = 400
# a "caught" probe that ended so was stopped by no check of the allocator's
CRASH_SIGNALS = ("SIGSEGV", "SIGBUS")
CSV_FIELDS = (
    *("allocator", "variant", "label", "probe", "program", "size", "outcome"),
    *("caught_runs", "runs", "ended", "signal", "exit_status", "stderr_first", "note"),
    *("split", "usable", "counted"),
)


# ---- names ----


def probe_program(probe: str) -> tuple[str, str]:
    """``double_free_small`` -> (``double_free``, ``small``); a C++ probe, built once at
    4096 B, has no size: ``invalid_free_cpp`` -> (``invalid_free_cpp``, ``""``)."""
    head, _, tail = probe.rpartition("_")
    return (head, tail) if head and tail in SIZES else (probe, "")


def probe_order(probes) -> list[str]:
    """The probes by program name, then small, medium, large."""

    def order(p: str):
        program, size = probe_program(p)
        return (program, SIZES.index(size) if size else -1)

    return sorted(probes, key=order)


def programs_of(probes) -> list[str]:
    return list(dict.fromkeys(probe_program(p)[0] for p in probe_order(probes)))


# ---- the benign programs ----


@dataclass(frozen=True)
class Benign:
    """One of the suite's benchmark programs run shortly, as the check that the allocator
    runs real programs: its arguments and the line its output must hold (``cfrac``'s is
    checked by arithmetic: the factors must multiply to the number)."""

    program: str
    args: tuple[str, ...]
    shows: str


# Short runs of three of the suite's programs (each well under a second): cfrac factors a
# 30-digit number (bench.sh's 44-digit one takes 10 s here), mstress hands objects between
# 2 threads, mleak runs 10 threads.
BENIGN = (
    Benign("cfrac", ("175451865205073170563711388363",), "N = p * q"),
    Benign("mstress", ("2", "10", "2"), "start with 2 threads with a 10% load-per-thread"),
    Benign("mleak", ("1",), "Using 10 threads with 100*1 iterations"),
)
CFRAC_LINE = re.compile(r"^(\d+) = (\d+(?: \* \d+)+)\s*$", re.M)


def _output_problem(benign: Benign, stdout: str) -> str:
    if benign.program == "cfrac":
        m = CFRAC_LINE.search(stdout)
        if not m:
            return "no `N = p * q` line"
        product = 1
        for factor in m.group(2).split(" * "):
            product *= int(factor)
        if product != int(m.group(1)):
            return f"the factors of {m.group(1)} do not multiply to it"
        return ""
    return "" if benign.shows in stdout else f"no `{benign.shows}` line"


def ended_text(returncode: int | None, timed_out: bool) -> str:
    """``timeout``, a signal's name, ``exit N``, or ``did not start``."""
    if timed_out:
        return "timeout"
    if returncode is None:
        return "did not start"
    return signal_name(-returncode) if returncode < 0 else f"exit {returncode}"


def first_line(stderr: str) -> str:
    return next((line.strip() for line in stderr.splitlines() if line.strip()), "")


def benign_problem(record: dict) -> str:
    """Why one benign run does not show a usable allocator ('' when it does): it must exit
    0 in time, under the allocator it was given (the library hakprobe.so saw define
    ``malloc``), and print what ``BENIGN`` says."""
    code, timed_out = record.get("returncode"), bool(record.get("timed_out"))
    if timed_out or code != 0:
        message = first_line(record.get("stderr", ""))
        return ended_text(code, timed_out) + (f": {message}" if message else "")
    impl, expect = record.get("malloc_impl"), record.get("expect_impl")
    if record.get("preload") and expect and expect not in str(impl or ""):
        return f"malloc came from {impl or 'an unknown library'}, not {expect}"
    spec = next((b for b in BENIGN if b.program == record["program"]), None)
    if spec is None:
        return f"{record['program']} is no benign program of this hakbench"
    return _output_problem(spec, record.get("stdout", ""))


@dataclass(frozen=True)
class Usability:
    label: str
    usable: bool
    reason: str  # the first benign program that failed and why ('' when usable)
    programs: tuple[str, ...]


def usability(records: list[dict]) -> dict[str, Usability]:
    """Per allocator label with benign records: usable when every program of ``BENIGN``
    ran, and ran cleanly (the first failure, or the first program missing, is the reason)."""
    runs: dict[str, list[dict]] = {}
    for r in records:
        if r.get("set") == "benign":
            runs.setdefault(r["label"], []).append(r)
    out = {}
    for label, mine in runs.items():
        problems = [f"{r['program']}: {p}" for r in mine if (p := benign_problem(r))]
        ran = {r["program"] for r in mine}
        problems += [f"{b.program}: not run" for b in BENIGN if b.program not in ran]
        programs = tuple(r["program"] for r in mine)
        out[label] = Usability(label, not problems, problems[0] if problems else "", programs)
    return out


# ---- one probe process ----


@dataclass(frozen=True)
class ProbeRun:
    outcome: str  # caught, not-caught, hung, error
    ended: str
    signal: str
    exit_status: str
    stderr_first: str
    note: str = ""


def classify_run(record: dict) -> ProbeRun:
    """One probe process by the NOT_CAUGHT contract (the module doc's rule)."""
    code, timed_out = record.get("returncode"), bool(record.get("timed_out"))
    stdout, stderr = record.get("stdout", ""), record.get("stderr", "")
    ended = ended_text(code, timed_out)
    sig = signal_name(-code) if code is not None and code < 0 and not timed_out else ""
    exit_status = str(code) if code is not None and code >= 0 else ""
    message = first_line(stderr)
    if code is None or PRELOAD_FAILED in stderr:
        return ProbeRun("error", ended, sig, exit_status, message, message or "did not start")
    if NOT_CAUGHT in stdout:
        late = ""
        if timed_out:
            late = "late timeout: NOT_CAUGHT, then hakbench's timeout"
        elif code != 0:
            late = f"late crash: NOT_CAUGHT, then {ended}"
        return ProbeRun("not-caught", ended, sig, exit_status, message, late)
    if timed_out:
        return ProbeRun("hung", ended, sig, exit_status, message, "ended by hakbench's timeout")
    if code == 0:
        note = "finished without NOT_CAUGHT: the allocator prevented the misuse"
        return ProbeRun("caught", ended, sig, exit_status, message, note)
    if code == -_signal.SIGKILL:  # the kernel's OOM killer or a person: no allocator's check
        note = "killed from outside (SIGKILL), not by the allocator"
        return ProbeRun("error", ended, sig, exit_status, message, note)
    return ProbeRun("caught", ended, sig, exit_status, message)


def compact_output(text: str, limit: int = STDOUT_KEPT_CHARS) -> str:
    """A program's stdout as stored: NUL bytes (``read_zero_size`` prints one) made
    visible, cut to its first and last ``limit / 2`` characters (NOT_CAUGHT comes last in
    every probe; a benign program's check reads its first lines)."""
    text = text.replace("\0", "\\0")
    if len(text) <= limit:
        return text
    return text[: limit // 2] + "\n[...]\n" + text[-(limit // 2) :]


# ---- rows: one per allocator and probe ----


def rows_of(records: list[dict]) -> list[dict]:
    """One row per allocator label and probe (records of ``set`` ``suite``), in the records'
    order of labels and the probes' order: every run taken together (the module doc)."""
    usable = usability(records)
    groups: dict[tuple[str, str], list[tuple[dict, ProbeRun]]] = {}
    for r in records:
        if r.get("set") == "suite":
            groups.setdefault((r["label"], r["probe"]), []).append((r, classify_run(r)))
    labels = list(dict.fromkeys(label for label, _ in groups))
    probes = probe_order({p for _, p in groups})
    rows = []
    for label in labels:
        for probe in probes:
            runs = groups.get((label, probe))
            if runs:
                rows.append(_row(runs, usable.get(label)))
    return rows


def _row(runs: list[tuple[dict, ProbeRun]], usable: Usability | None) -> dict:
    outcomes = [v.outcome for _, v in runs]
    caught = outcomes.count("caught")
    if "error" in outcomes:
        outcome = "error"
    elif caught == len(runs):
        outcome = "caught"
    elif caught:
        outcome = "sometimes"
    elif all(o == "hung" for o in outcomes):
        outcome = "hung"
    else:
        outcome = "not-caught"
    shown = "caught" if outcome == "sometimes" else outcome
    record, v = next(((r, v) for r, v in runs if v.outcome == shown), runs[0])
    seen = {o: outcomes.count(o) for o in dict.fromkeys(outcomes)}
    program, size = probe_program(record["probe"])
    return {
        "allocator": record["allocator"],
        "variant": record.get("variant", ""),
        "label": record["label"],
        "probe": record["probe"],
        "program": program,
        "size": size,
        "outcome": outcome,
        "caught_runs": caught,
        "runs": len(runs),
        "ended": v.ended,
        "signal": v.signal,
        "exit_status": v.exit_status,
        "stderr_first": v.stderr_first,
        "note": v.note,
        "split": ", ".join(f"{o} {n}" for o, n in seen.items()) if len(seen) > 1 else "",
        "usable": "" if usable is None else int(usable.usable),
        "counted": int(outcome == "caught" and usable is not None and usable.usable),
    }


def rows_csv(rows: list[dict]) -> str:
    return misuse_model.rows_csv(rows, CSV_FIELDS)


# ---- counts ----


@dataclass(frozen=True)
class SuiteCounts:
    label: str
    total: int
    usable: Usability | None
    by_outcome: dict  # outcome -> probes
    caught_runs: int
    runs: int
    crashed: int  # of the probes caught: the ones whose process ended by SIGSEGV or SIGBUS
    finished: int  # of the probes caught: the ones that exited 0 (the misuse had no effect)

    @property
    def counted(self) -> int:
        """Probes caught in every run, by an allocator that ran the benign programs."""
        ok = self.usable is not None and self.usable.usable
        return self.by_outcome.get("caught", 0) if ok else 0

    @property
    def share(self) -> float:
        """The share of all probe runs that were caught (whatever the benign programs did)."""
        return self.caught_runs / self.runs if self.runs else 0.0


def counts(rows: list[dict], records: list[dict]) -> list[SuiteCounts]:
    usable = usability(records)
    out = []
    for label in dict.fromkeys(r["label"] for r in rows):
        mine = [r for r in rows if r["label"] == label]
        by = {o: sum(r["outcome"] == o for r in mine) for o in OUTCOMES}
        out.append(
            SuiteCounts(
                label,
                len(mine),
                usable.get(label),
                by,
                sum(int(r["caught_runs"]) for r in mine),
                sum(int(r["runs"]) for r in mine),
                sum(r["outcome"] == "caught" and r["signal"] in CRASH_SIGNALS for r in mine),
                sum(r["outcome"] == "caught" and r["ended"] == "exit 0" for r in mine),
            )
        )
    return out


def caught_by_not(rows: list[dict], reference: str, label: str) -> list[str]:
    """Probes ``reference`` caught (every run) and ``label`` did not, in the probes' order."""
    ref = {r["probe"] for r in rows if r["label"] == reference and r["outcome"] == "caught"}
    return [
        r["probe"]
        for r in rows
        if r["label"] == label and r["probe"] in ref and r["outcome"] != "caught"
    ]
