"""Heap-misuse probes (issue #27): run ``build/bench/misuse_probe PATTERN`` under any
allocator and keep how each process ended.

The probe (harness/misuse_probe.c) performs one misuse (an overflow, an underflow, a use
after free, a double free, a free of a pointer that is no block), then a fixed amount of
ordinary malloc/free activity that would expose it, and prints ``key=value`` lines as it
goes. Each process gives a raw *record* (exit status, signal, its compacted stdout and the
head of its stderr); ``hakbench.tables.misuse_model.row_of`` classifies a record into a tidy row
(caught / crashed / hung / not-caught / error, and the effect).

A probe that dies is a result here, not a failed sample: this is why the probes are a
command of their own (``hakbench misuse``) and not workloads, whose samples ``ab``, matrices
and the scorecard judge FAILED when the process dies (``-w @misuse`` says so).
"""

from __future__ import annotations

import fnmatch
import os
import subprocess
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from hakbench.core import paths
from hakbench.core.allocators import Allocator, resolve_allocator
from hakbench.core.errors import MeasurementError, UsageError
from hakbench.core.procenv import clean_env
from hakbench.core.profiles import closest
from hakbench.engine.process import wait_group
from hakbench.tables.misuse_model import PROGRAM, compact_stderr, compact_stdout, rows_csv, rows_of

# The allocators a misuse run covers by default: every known one; hakmem once per variant.
DEFAULT_ALLOCATORS = ("system", "mimalloc", "jemalloc", "tcmalloc", "tbbmalloc", "hakmem")
# libhakmem's builds the probes run against. Add "secure" here once build/secure exists
# (and allocators.VARIANTS knows it): one word.
HAKMEM_VARIANTS = ["fast", "debug", "secure"]
TIMEOUT_S = 20.0  # the probe ends itself after 2 s of CPU or 10 s; this is the backstop
# Runs per allocator and pattern: most outcomes repeat exactly, a few depend on where ASLR
# put things (glibc's alignment check of a forged tcache link misses 1 time in 16).
RUNS = 3


# ---- patterns and allocators ----


def probe_path(build: Path | None = None) -> Path:
    return paths.bench_binary(PROGRAM, build=build)


def list_patterns(build: Path | None = None) -> list[str]:
    """The probe's pattern names, in its order (``misuse_probe --list``)."""
    probe = probe_path(build)
    if not probe.exists():
        raise UsageError(f"{probe} not built (run `make build`)")
    r = subprocess.run([str(probe), "--list"], capture_output=True, text=True, timeout=30)
    if r.returncode != 0:
        raise MeasurementError(f"{probe} --list failed: exit {r.returncode}")
    return [line for line in r.stdout.splitlines() if line]


def select_patterns(known: list[str], wanted: Iterable[str]) -> list[str]:
    """Names or shell globs (``'double-free-*'``) -> patterns, in the probe's order; one
    that matches nothing is a UsageError naming the closest pattern."""
    wanted = list(wanted)
    if not wanted:
        return list(known)
    chosen: set[str] = set()
    for w in wanted:
        hits = [p for p in known if fnmatch.fnmatchcase(p, w)]
        if not hits:
            hint = closest(w, known)
            raise UsageError(
                f"unknown misuse pattern '{w}'"
                + (f"; closest: {hint}" if hint else "")
                + " (hakbench misuse --list names them)"
            )
        chosen.update(hits)
    return [p for p in known if p in chosen]


def resolve_targets(
    allocators: Iterable[str], variants: Iterable[str], build: Path | None = None
) -> tuple[list[Allocator], list[dict]]:
    """Allocator specs -> (the available ones, hakmem once per variant; the skipped ones
    as ``{label, reason}``)."""
    found: list[Allocator] = []
    skipped: list[dict] = []
    variants = list(variants)
    for spec in allocators:
        first = resolve_allocator(spec, build=build)
        todo = (
            [resolve_allocator(spec, v, build) for v in variants]
            if first.name == "hakmem"
            else [first]
        )
        for alloc in todo:
            if any(a.label == alloc.label for a in found):
                continue
            if alloc.available:
                found.append(alloc)
            else:
                skipped.append({"label": alloc.label, "reason": alloc.missing_reason or "missing"})
    return found, skipped


# ---- running ----


def run_probe(
    alloc: Allocator, pattern: str, *, build: Path | None = None, timeout: float = TIMEOUT_S
) -> dict:
    """One probe process under ``alloc``: the raw record (never raises for a process that
    died; that is the result)."""
    argv = [str(probe_path(build)), pattern]
    record = {
        "label": alloc.label,
        "allocator": alloc.name,
        "variant": alloc.variant or "",
        "pattern": pattern,
        "expect_impl": alloc.expect_impl,
        "returncode": None,
        "signal": None,
        "timed_out": False,
        "wall_s": None,
        "stdout": "",
        "stderr": "",
    }
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        try:
            proc = subprocess.Popen(
                argv,
                stdout=out,
                stderr=err,
                env=clean_env({}, alloc.preload),
                start_new_session=True,
            )
        except OSError as e:
            record["stderr"] = f"cannot start {argv[0]}: {e}\n"
            return record
        status, _, timed_out = wait_group(proc, timeout)
        record["wall_s"] = round(time.perf_counter() - t0, 4)
        texts = []
        for f in (out, err):
            f.seek(0)
            texts.append(f.read().decode(errors="replace"))
    code = os.waitstatus_to_exitcode(status)
    record.update(
        returncode=code,
        signal=-code if code < 0 else None,
        timed_out=timed_out,
        stdout=compact_stdout(texts[0]),
        stderr=compact_stderr(texts[1]),
    )
    return record


@dataclass
class MisuseRun:
    out: Path
    records: list[dict]
    rows: list[dict]
    skipped: list[dict]
    interrupted: bool = False


PROBES_FILE = "probes.jsonl"
# what a record keeps (``run_probe``'s fields and the run's number): the engine's tags and
# sequence numbers stay in the run directory's probes.jsonl, out of the scorecard's copy
RECORD_FIELDS = (
    *("label", "allocator", "variant", "pattern", "expect_impl", "returncode", "signal"),
    *("timed_out", "wall_s", "stdout", "stderr", "run"),
)


def run_misuse(
    allocators: list[Allocator],
    patterns: list[str],
    out: Path,
    *,
    build: Path | None = None,
    timeout: float = TIMEOUT_S,
    runs: int = RUNS,
    skipped: list[dict] | None = None,
    meta: dict | None = None,
    label: str | None = "misuse",
    resume: bool = False,
) -> MisuseRun:
    """Every pattern ``runs`` times under every allocator through the engine
    (``hakbench.engine.engine.Session``: meta.json first, each record appended to
    ``out/probes.jsonl`` as its process ends, one progress bar, labelled ``label``, None: no
    bar); then ``misuse.csv``, ``misuse.md`` and ``meta.json`` (``skipped``: allocators not
    run, ``{label, reason}``, for the report). A stop signal (``hakbench.engine.interrupts``)
    ends the run; the files are written from what finished and the result says
    ``interrupted``. ``resume``: ``out`` holds a stopped or killed run (``resumed`` gives
    its arguments): its records are kept, the other probes run, after the probe program and
    the libraries are checked to be those it ran (one line, exit 2, otherwise)."""
    from hakbench.engine import engine, interrupts
    from hakbench.engine.progress import Progress
    from hakbench.engine.store import write_json, write_text
    from hakbench.report.misuse_md import run_markdown
    from hakbench.tables.misuse_model import row_of

    if not resume and (out / PROBES_FILE).exists():
        raise UsageError(f"{out} already holds a misuse run ({PROBES_FILE}); pick another --out")
    meta = dict(meta or {})
    meta.update(
        kind="misuse",
        probe=str(probe_path(build)),
        allocators=[a.label for a in allocators],
        libraries={a.label: str(a.preload) if a.preload else "" for a in allocators},
        targets=[_target_record(a) for a in allocators],
        patterns=list(patterns),
        runs=runs,
        timeout=timeout,
        skipped=list(skipped or []),
    )
    ident = engine.identity_of([probe_path(build), *(a.preload for a in allocators)], {}, out)
    store, meta, stored = engine.open_run(out, meta, resume=resume, ident=ident, name=PROBES_FILE)
    bar = Progress(len(allocators) * len(patterns) * runs, label) if label else None

    def step(record: dict) -> None:
        outcome = row_of(record)["outcome"]
        bar.step(outcome != "error", f"{record['label']} {record['pattern']}: {outcome}")

    session = engine.Session(store, stored=stored, on_sample=step if bar else None)
    interrupted = False
    try:
        for alloc in allocators:
            for pattern in patterns:
                for run in range(runs):
                    tags = {"phase": "probe", "cell": alloc.label, "workload": pattern}
                    session.take(
                        {**tags, "round": run},
                        lambda alloc=alloc, pattern=pattern, run=run: {
                            **run_probe(alloc, pattern, build=build, timeout=timeout),
                            "run": run,
                        },
                    )
    except KeyboardInterrupt:
        interrupted = True
    finally:
        if bar:
            bar.close()
    with interrupts.finishing():  # the report of what finished: a stop cuts nothing here
        records = [{k: r[k] for k in RECORD_FIELDS} for r in session.finished]
        rows = rows_of(records)
        meta["interrupted"] = interrupted
        meta["probes_run"] = len(records)
        write_text(out / "misuse.csv", rows_csv(rows))
        write_text(out / "misuse.md", run_markdown(rows, meta))
        write_json(out / "meta.json", meta)
    return MisuseRun(out, records, rows, meta["skipped"], interrupted)


def _target_record(alloc: Allocator) -> dict:
    return {
        "name": alloc.name,
        "variant": alloc.variant,
        "preload": str(alloc.preload) if alloc.preload else None,
        "expect_impl": alloc.expect_impl,
    }


def resumed(out: Path) -> dict:
    """``run_misuse``'s arguments for ``--resume out``: the allocators (as the run resolved
    them), patterns, runs, timeout and skipped ones its meta.json records."""
    from hakbench.engine import engine

    meta = engine.stored_meta(out, "misuse")
    if not isinstance(meta.get("targets"), list):
        raise UsageError(f"--resume {out}: a misuse run made before misuse could resume")
    allocators = [
        Allocator(t["name"], t["variant"], t["preload"] and Path(t["preload"]), t["expect_impl"])
        for t in meta["targets"]
    ]
    return {
        "allocators": allocators,
        "patterns": meta["patterns"],
        "runs": meta["runs"],
        "timeout": meta["timeout"],
        "skipped": meta["skipped"],
    }
