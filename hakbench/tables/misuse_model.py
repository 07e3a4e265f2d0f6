"""What a heap-misuse probe's output means, apart from running it: the classification of one
probe process into a tidy row, and the summaries every report of them prints.

``hakbench.experiments.misuse`` runs the probes; ``hakbench.report.misuse_md`` and
``hakbench.experiments.scorecard`` draw the rows. All three import this module; it imports none
of them.

The rule (docs/misuse.md):

- ``caught``: the allocator stopped the process itself: SIGABRT, or a nonzero exit with a
  message on stderr that is not the probe's own (a SIGILL/SIGTRAP with such a message too:
  some allocators check with a trap instruction);
- ``crashed``: SIGSEGV, SIGBUS or another signal: stopped, but by no check;
- ``hung``: the probe's CPU-time limit (2 s, SIGPROF), its alarm (10 s) or hakbench's timeout
  ended it: a corrupted list looped;
- ``not-caught``: the program finished; ``effect`` says what the corruption led to
  (``overlap``, ``arbitrary-address``, ``silent``, ...: the probe's first ``effect=`` line);
- ``error``: the probe could not run the pattern (its own error, a wrong allocator).

``at`` is where a process stopped (or where a stopping effect showed): the allocator call or
probe step and how many calls after the misuse (``free +0``: the misusing call itself).
"""

from __future__ import annotations

import csv
import io
import signal as _signal
from collections import Counter
from dataclasses import dataclass, field

from hakbench.engine.process import signal_name

PROGRAM = "misuse_probe"
OUTCOMES = ("caught", "crashed", "hung", "not-caught", "error")
# Effects after which the probe stopped at once (the corruption handed out memory).
STOPPING_EFFECTS = ("arbitrary-address", "overlap", "malloc-null")
CSV_FIELDS = (
    "allocator",
    "variant",
    "label",
    "pattern",
    "family",
    "size",
    "outcome",
    "effect",
    "signal",
    "exit_status",
    "at",
    "stderr_first",
    "note",
    "runs",
    "agree",
    "split",
)
# Ties between outcomes of a pattern's runs go to the less protective one.
TIE_ORDER = ("not-caught", "hung", "crashed", "error", "caught")
STDERR_KEPT_LINES = 5
STDERR_KEPT_CHARS = 200
SIZES = ("tiny", "mid", "large")


# ---- the probe's output ----


@dataclass
class ProbeOutput:
    """What the probe printed (every field None when it did not get that far)."""

    pattern: str | None = None
    malloc_impl: str | None = None
    request: int | None = None
    usable: int | None = None
    misuse_call: int | None = None
    misuse: str | None = None
    last_call: int | None = None
    last_op: str | None = None
    effect: str | None = None
    outcome: str | None = None  # the probe's own view (its signal handler's, or not-caught)
    ended: bool = False
    other: dict = field(default_factory=dict)


def parse_probe_output(text: str) -> ProbeOutput:
    out = ProbeOutput()
    for line in text.splitlines():
        key, eq, value = line.partition("=")
        if not eq:
            continue
        if key == "call":
            number, _, op = value.partition(" ")
            if number.isdigit():
                out.last_call, out.last_op = int(number), op.strip()
        elif key == "misuse":
            number, _, what = value.partition(" ")
            if number.isdigit():
                out.misuse_call, out.misuse = int(number), what.strip()
        elif key in ("request", "usable"):
            if value.isdigit():
                setattr(out, key, int(value))
        elif key == "effect":
            out.effect = out.effect or value  # the first one the probe saw
        elif key == "end":
            out.ended = value == "1"
        elif key in ("pattern", "malloc_impl", "outcome"):
            setattr(out, key, value)
        else:
            out.other[key] = value
    return out


def compact_stdout(text: str) -> str:
    """The probe's stdout without its ``call=`` lines but the last one: everything
    ``classify`` reads, at a tenth of the size (what the scorecard stores)."""
    lines = text.splitlines()
    calls = [i for i, line in enumerate(lines) if line.startswith("call=")]
    drop = set(calls[:-1])
    return "".join(line + "\n" for i, line in enumerate(lines) if i not in drop)


def compact_stderr(text: str) -> str:
    lines = [line[:STDERR_KEPT_CHARS] for line in text.splitlines() if line.strip()]
    return "".join(line + "\n" for line in lines[:STDERR_KEPT_LINES])


def pattern_family(pattern: str) -> tuple[str, str]:
    """(family, size) of a pattern name: ``overflow-usable-1-write-tiny`` ->
    (``overflow-usable``, ``tiny``), ``free-p+8-mid`` -> (``free-interior``, ``mid``),
    ``free-stack`` -> (``free-foreign``, ``""``)."""
    parts = pattern.split("-")
    size = parts[-1] if parts[-1] in SIZES else ""
    if parts[0] in ("overflow", "uaf", "realloc") and len(parts) > 1:
        family = f"{parts[0]}-{parts[1]}"
    elif pattern.startswith("double-free"):
        family = "double-free"
    elif pattern.startswith("free-p"):
        family = "free-interior"
    elif parts[0] == "free":
        family = "free-foreign"
    else:
        family = parts[0]
    return family, size


# ---- classification ----


@dataclass(frozen=True)
class Verdict:
    outcome: str
    effect: str
    signal: str
    at: str
    stderr_first: str
    note: str = ""


def _at(out: ProbeOutput) -> str:
    if out.last_op is None:
        return ""
    if out.misuse_call is None or out.last_call is None or out.last_call < out.misuse_call:
        return f"{out.last_op} (before the misuse)"
    return f"{out.last_op} +{out.last_call - out.misuse_call}"


def classify(
    *,
    returncode: int | None,
    signal: int | None,
    timed_out: bool,
    stdout: str,
    stderr: str,
    expect_impl: str | None = None,
) -> Verdict:
    """How one probe process ended (the rule is the module doc's). ``returncode`` is the
    exit code (negative for a signal, as ``os.waitstatus_to_exitcode`` gives it)."""
    out = parse_probe_output(stdout)
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    own = [line for line in lines if line.startswith(f"{PROGRAM}:")]
    first = lines[0] if lines else ""
    sig = signal if signal is not None else (-returncode if returncode and returncode < 0 else None)
    sig_text = signal_name(sig) if sig else ""
    at = _at(out)
    if out.malloc_impl and expect_impl and expect_impl not in out.malloc_impl:
        return Verdict(
            "error", "", sig_text, at, first, f"malloc_impl={out.malloc_impl} is not {expect_impl}"
        )
    if timed_out or sig in (_signal.SIGALRM, _signal.SIGPROF):
        why = {_signal.SIGALRM: "the probe's alarm", _signal.SIGPROF: "the probe's CPU limit"}
        why = "hakbench's timeout" if timed_out else why[sig]
        return Verdict("hung", "", sig_text, at, first, f"ended by {why}")
    if sig == _signal.SIGABRT:
        return Verdict("caught", "", sig_text, at, first)
    if sig is not None:
        # A trap instruction with a message is a check (some allocators __builtin_trap()).
        if sig in (_signal.SIGILL, _signal.SIGTRAP) and first and not own:
            return Verdict("caught", "", sig_text, at, first)
        return Verdict("crashed", "", sig_text, at, first)
    if returncode == 0:
        if not out.ended:
            return Verdict("error", "", "", at, first, "exit 0 without the probe's end=1 line")
        effect = out.effect or "silent"
        return Verdict("not-caught", effect, "", at if effect in STOPPING_EFFECTS else "", first)
    if own or returncode is None:
        note = own[0] if own else "the probe did not run"
        return Verdict("error", "", "", at, first, note)
    if first:
        return Verdict("caught", "", "", at, first)
    return Verdict("crashed", "", "", at, first, f"exit {returncode} without a message")


def row_of(record: dict) -> dict:
    """The tidy row of one record (CSV_FIELDS; ``runs`` 1)."""
    v = classify(
        returncode=record.get("returncode"),
        signal=record.get("signal"),
        timed_out=bool(record.get("timed_out")),
        stdout=record.get("stdout", ""),
        stderr=record.get("stderr", ""),
        expect_impl=record.get("expect_impl"),
    )
    family, size = pattern_family(record["pattern"])
    code = record.get("returncode")
    return {
        "allocator": record["allocator"],
        "variant": record.get("variant", ""),
        "label": record["label"],
        "pattern": record["pattern"],
        "family": family,
        "size": size,
        "outcome": v.outcome,
        "effect": v.effect,
        "signal": v.signal,
        "exit_status": "" if code is None or code < 0 else str(code),
        "at": v.at,
        "stderr_first": v.stderr_first,
        "note": v.note,
        "runs": 1,
        "agree": 1,
        "split": "",
    }


def pattern_records(records: list[dict]) -> list[dict]:
    """The records of our own patterns: a run that also ran the suite's probes
    (``hakbench.tables.misuse_suite_model``) stores theirs beside them, with a ``set``."""
    return [r for r in records if r.get("set", "patterns") == "patterns"]


def rows_of(records: list[dict]) -> list[dict]:
    """One row per allocator and pattern, in the records' order. A pattern run more than
    once (``hakbench misuse --runs``: address-space randomisation decides some outcomes,
    e.g. glibc's check of a forged tcache link passes 1 time in 16) takes the outcome most
    of its runs had (a tie goes to the less protective one, ``TIE_ORDER``), the details of
    the first such run, and ``split`` when the runs differed (``caught 2, crashed 1``)."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in records:
        groups.setdefault((r["label"], r["pattern"]), []).append(row_of(r))
    rows = []
    for runs in groups.values():
        seen = Counter((r["outcome"], r["effect"]) for r in runs)
        best = max(seen, key=lambda k: (seen[k], -TIE_ORDER.index(k[0])))
        row = dict(next(r for r in runs if (r["outcome"], r["effect"]) == best))
        row.update(runs=len(runs), agree=seen[best])
        if len(seen) > 1:
            ranked = sorted(seen.items(), key=lambda kv: (-kv[1], TIE_ORDER.index(kv[0][0])))
            row["split"] = ", ".join(f"{o}{f' ({e})' if e else ''} {n}" for (o, e), n in ranked)
        rows.append(row)
    return rows


def rows_csv(rows: list[dict], fields: tuple[str, ...] = CSV_FIELDS) -> str:
    """The tidy table of ``rows`` (``fields``: its columns; the suite's probes have theirs)."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fields, lineterminator="\n", extrasaction="ignore")
    w.writeheader()
    w.writerows(rows)
    return buf.getvalue()


# ---- summaries (shared by the run report and the scorecard) ----


def labels_of(rows: list[dict]) -> list[str]:
    return list(dict.fromkeys(r["label"] for r in rows))


def patterns_of(rows: list[dict]) -> list[str]:
    return list(dict.fromkeys(r["pattern"] for r in rows))


@dataclass(frozen=True)
class Counts:
    label: str
    total: int
    by_outcome: dict  # outcome -> patterns
    exploitable: int  # not caught, and malloc handed out overlapping or chosen memory

    @property
    def caught(self) -> int:
        return self.by_outcome.get("caught", 0)


def counts(rows: list[dict]) -> list[Counts]:
    out = []
    for label in labels_of(rows):
        mine = [r for r in rows if r["label"] == label]
        by = {o: sum(r["outcome"] == o for r in mine) for o in OUTCOMES}
        bad = sum(r["outcome"] == "not-caught" and r["effect"] in STOPPING_EFFECTS for r in mine)
        out.append(Counts(label, len(mine), by, bad))
    return out


def missed_against(rows: list[dict], label: str, reference: str = "system") -> list[str]:
    """Patterns ``reference`` caught and ``label`` did not, in the probe's order."""
    ref = {r["pattern"] for r in rows if r["label"] == reference and r["outcome"] == "caught"}
    mine = {r["pattern"]: r["outcome"] for r in rows if r["label"] == label}
    return [p for p in patterns_of(rows) if p in ref and mine.get(p, "caught") != "caught"]
