"""Where a cell's time goes: ``perf record`` of one process, ``perf report`` parsed and grouped.

Sampling uses hardware cycles when the machine exposes them, else the ``cpu-clock`` software
event (a timer: same picture, coarser). The report is the *self* time per (shared object,
symbol) (``--no-children -g none``), so the percentages add up to 100. Symbols are grouped by
where they live: the harness, libhakmem's front (exported API and per-thread fast paths) or
backend (pages, superslabs, OS, pool, large, init), glibc, the kernel, a reference allocator,
other. libhakmem's symbols are recognised from the library itself (``nm``; source file of
origin when it has debug info), so a statically linked twin is grouped the same way.

The recording is a sample of the engine (``profile_sample``): stored in the run directory's
samples.jsonl once perf finished, under the one signal policy, so ``hotspots --resume DIR``
records a cut profile again and reports a finished one without recording it again.
"""

from __future__ import annotations

import csv
import re
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

from hakbench.core.allocators import REFERENCES
from hakbench.core.errors import MeasurementError
from hakbench.engine import process
from hakbench.engine.probes import probe_perf

REPORT_FIELDS = ("rank", "self_pct", "symbol", "dso", "space", "group")
GROUPS = (
    "harness",
    "libhakmem front",
    "libhakmem backend",
    "libc",
    "kernel",
    "other allocator",
    "other",
)
FRONT, BACKEND = "libhakmem front", "libhakmem backend"

# libhakmem's front is what every malloc/free runs through: the exported API, the wrappers'
# helpers and the per-thread front paths (front_*.c; their refills included, since they are
# the front's own code). Everything else is backend: the generic slow paths, heap page
# queues, pages, superslabs, OS, pool, large, options, stats, init. Source files decide when
# the library has debug info; otherwise (the fast variant) symbol names do.
FRONT_FILE_PREFIXES = ("wrappers", "front", "tinyheap", "hotheap", "smallheap")
FRONT_SYMBOL_PREFIXES = (
    "alloc_slow_",  # the refill of a row of the fronts' table (front.c: alloc_slow_<ID>)
    "legacy_",
    "hak_front",
    "tinyheap",
    "tiny_heap",
    "hak_tinyheap",
    "hotheap",
    "hot_heap",
    "hak_hotheap",
    "smallheap",
    "small_heap",
    "hak_smallheap",
    "v3_",  # SmallObject v3's two backend calls belong to the front (front_smallheap_v3.c)
)
WRAPPER_HELPERS = frozenset(("alloc_class", "checked_page", "aligned_alloc_impl"))
API_SYMBOLS = frozenset(
    "malloc free calloc realloc reallocarray posix_memalign aligned_alloc memalign valloc "
    "pvalloc malloc_usable_size cfree".split()
)
GLIBC_DSO = re.compile(r"^(libc|libm|libpthread|libdl|librt|ld-linux[-\w]*)[.-]")
REFERENCE_SONAMES = tuple(so.split(".so")[0] for so, _ in REFERENCES.values())
SPACE_BY_MARKER = {"k": "kernel", ".": "user", "g": "guest kernel", "u": "guest user"}


@dataclass(frozen=True)
class Hotspot:
    rank: int
    self_pct: float
    symbol: str
    dso: str
    space: str  # kernel | user | guest kernel | guest user | unknown
    group: str = "other"


def _strip_version(symbol: str) -> str:
    """``cfree@GLIBC_2.2.5`` -> ``cfree``; ``malloc@plt`` stays (a PLT stub is the caller's)."""
    if symbol.endswith("@plt"):
        return symbol
    return symbol.split("@", 1)[0]


def parse_perf_report(text: str) -> list[Hotspot]:
    """Rows of ``perf report --stdio --no-children -g none -s dso,symbol -t ';'``.

    perf pads the fields with spaces even with ``-t`` and may add IPC columns; the symbol
    carries a privilege marker (``[k]`` kernel, ``[.]`` user, ...). Comment lines start with
    ``#``. Group is left as "other"; see ``classify``.
    """
    rows: list[Hotspot] = []
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        fields = [f.strip() for f in line.split(";")]
        if len(fields) < 3 or not fields[0].endswith("%"):
            continue
        try:
            pct = float(fields[0].rstrip("%"))
        except ValueError:
            continue
        dso, sym = fields[1], fields[2]
        m = re.match(r"^\[(.)\]\s+(.*)$", sym)
        space = "unknown"
        if m:
            space = SPACE_BY_MARKER.get(m.group(1), "unknown")
            sym = m.group(2)
        if space == "unknown" and dso.startswith("[kernel"):
            space = "kernel"
        rows.append(Hotspot(len(rows) + 1, pct, sym, dso, space))
    return rows


def parse_report_header(text: str) -> dict:
    """Sample count and event name from the report's ``# Samples: 3K of event 'x'`` line."""
    m = re.search(r"^# Samples: (\S+)\s+of event '([^']+)'", text, re.M)
    if not m:
        return {}
    return {"samples": m.group(1), "event": m.group(2)}


def _base_name(symbol: str) -> str:
    """``checked_page.constprop.0.cold`` -> ``checked_page``; ``cfree@GLIBC_2.2.5`` -> ``cfree``."""
    return _strip_version(symbol).split(".", 1)[0]


def is_api(name: str) -> bool:
    for prefix in ("hak_", "__libc_", "__"):
        if name.startswith(prefix) and name[len(prefix) :] in API_SYMBOLS:
            return True
    return name in API_SYMBOLS


def hakmem_group_by_name(symbol: str) -> str:
    name = _base_name(symbol)
    if is_api(name) or name in WRAPPER_HELPERS or name.startswith(FRONT_SYMBOL_PREFIXES):
        return FRONT
    return BACKEND


def hakmem_group_by_file(source: str) -> str:
    return FRONT if Path(source).name.startswith(FRONT_FILE_PREFIXES) else BACKEND


def parse_nm(text: str) -> dict[str, str]:
    """``nm --defined-only -l`` output -> {function symbol: group}."""
    groups: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split(None, 2)
        if len(parts) < 3 or parts[1] not in ("t", "T", "W", "i"):
            continue
        name, _, where = parts[2].partition("\t")
        name = name.strip()
        source = where.rsplit(":", 1)[0].strip()
        if is_api(_base_name(name)):
            groups[name] = FRONT  # the API is front wherever it is defined
        elif source:
            groups[name] = hakmem_group_by_file(source)
        else:
            groups[name] = hakmem_group_by_name(name)
    return groups


def hakmem_symbols(library: Path | None) -> dict[str, str]:
    """libhakmem's function symbols and their group; {} when the library or nm is missing."""
    if library is None or not Path(library).exists() or shutil.which("nm") is None:
        return {}
    out = process.output(["nm", "--defined-only", "-l", str(library)], timeout=120)
    return parse_nm(out) if out is not None else {}


def classify(row: Hotspot, hakmem: dict[str, str], harness_dsos: set[str]) -> str:
    if row.space in ("kernel", "guest kernel") or row.dso.startswith("[kernel"):
        return "kernel"
    name = _strip_version(row.symbol)
    if row.dso in harness_dsos:
        return hakmem.get(name, "harness")  # a static *_hakmem twin holds libhakmem too
    if row.dso.startswith("libhakmem"):
        return hakmem.get(name) or hakmem_group_by_name(name)
    if GLIBC_DSO.match(row.dso):
        return "libc"
    if row.dso.startswith(REFERENCE_SONAMES):
        return "other allocator"
    return "other"


def group_totals(rows: list[Hotspot]) -> dict[str, float]:
    """Self % per group (of the rows shown, i.e. above the percent limit), in GROUPS order."""
    totals = {g: 0.0 for g in GROUPS}
    for r in rows:
        totals[r.group] = totals.get(r.group, 0.0) + r.self_pct
    return {g: round(v, 2) for g, v in totals.items() if v > 0}


def pick_event() -> str:
    return "cycles" if "cycles" in probe_perf().get("supported", []) else "cpu-clock"


def max_sample_rate() -> int:
    try:
        return int(Path("/proc/sys/kernel/perf_event_max_sample_rate").read_text())
    except (OSError, ValueError):
        return 1000


def require_perf() -> None:
    """MeasurementError (exit 3) when perf is missing: before a run directory is made."""
    if shutil.which("perf") is None:
        raise MeasurementError("perf is not installed: apt-get install linux-perf")


PHASE = "profile"  # a hotspots run's one sample


def profile_sample(
    cell,
    args: list[str],
    data: Path,
    *,
    event: str,
    frequency: int,
    call_graph: bool = False,
    timeout: float = 600,
) -> dict:
    """``perf record`` of one process of ``cell`` (run with ``args``) into ``data``, as a
    sample of the engine (``hakbench.engine.engine.Session.take``): its status (``ok``,
    ``failed`` when perf failed or wrote nothing, ``wrong_allocator``, ``timeout``), the
    harness's output, the paths of its perf data and of the report written from it.
    perf runs in its own session under the one signal policy (``process.run``, stoppable):
    a stop signal ends it and the profile is a cut sample, never stored."""
    from hakbench.collect.harness import parse_harness_output
    from hakbench.engine.process import new_sample

    sample = new_sample(cell, PHASE)
    argv, env = cell.command(args=list(args))
    cmd = ["perf", "record", "-o", str(data), "-e", event, "-F", str(frequency)]
    cmd += ["-g"] if call_graph else []
    sample.update(argv=argv, perf_event=event, perf_frequency=frequency, perf_data=str(data))
    sample["perf_report"] = str(data.parent / "perf_report.txt")
    ended = process.run([*cmd, "--", *argv], env=env, timeout=timeout, stoppable=True)
    if ended.timed_out:
        sample.update(status="timeout", error=f"perf record exceeded {timeout:g} s")
        return sample
    code, stderr = ended.returncode, ended.stderr or ended.error or ""
    harness = parse_harness_output(ended.stdout)
    sample.update(wall_s=ended.wall_s, returncode=code, harness=harness)
    impl, expect = str(harness.get("malloc_impl", "")), cell.resolved_allocator().expect_impl
    if code != 0 or not data.exists():
        tail = " | ".join(stderr.strip().splitlines()[-3:])
        sample.update(
            status="failed",
            error=f"perf record failed (exit {code}): {tail}; if this is a permission "
            "problem, see /proc/sys/kernel/perf_event_paranoid",
        )
    elif expect not in impl:
        sample.update(
            status="wrong_allocator", error=f"malloc_impl={impl or '?'}, expected {expect}"
        )
    else:
        sample["status"] = "ok"
    return sample


def report(data: Path, percent_limit: float) -> str:
    argv = ["perf", "report", "-i", str(data), "--stdio", "--no-children", "-g", "none"]
    argv += ["-s", "dso,symbol", "-t", ";", "--percent-limit", f"{percent_limit:g}"]
    # not stoppable: the report is written after a stop too (the launcher's own session
    # spares it a Ctrl-C at the terminal)
    r = process.run(argv, timeout=600)
    if not r.ok:
        raise MeasurementError(f"perf report failed: {(r.error or r.stderr).strip()[-300:]}")
    return r.stdout


def write_csv(rows: list[Hotspot], path: Path) -> Path:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=REPORT_FIELDS)
        w.writeheader()
        for r in rows:
            w.writerow({k: v for k, v in asdict(r).items() if k in REPORT_FIELDS})
    return path


def markdown(rows: list[Hotspot], *, title: str, top: int, notes: list[str]) -> str:
    """A Markdown report: where time goes by group, then the top symbols."""
    lines = [f"# Hotspots: {title}", ""]
    lines += [f"- {n}" for n in notes]
    lines += ["", "## By group (self %)", "", "| group | self % |", "|---|---:|"]
    lines += [f"| {g} | {v:.2f} |" for g, v in group_totals(rows).items()]
    lines += [
        "",
        f"## Top {min(top, len(rows))} symbols (self %)",
        "",
        "| # | self % | symbol | shared object | space | group |",
        "|---:|---:|---|---|---|---|",
    ]
    for r in rows[:top]:
        sym = r.symbol.replace("|", "\\|")
        lines.append(f"| {r.rank} | {r.self_pct:.2f} | `{sym}` | {r.dso} | {r.space} | {r.group} |")
    return "\n".join(lines) + "\n"
