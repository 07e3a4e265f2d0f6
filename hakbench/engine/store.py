"""The results directory, and every JSON/JSONL file hakbench reads or writes.

- ``write_json``: atomic (a temporary file in the same directory, fsynced, then renamed),
  so a reader never sees half a file, also when Ctrl-C lands mid-write.
- ``append_jsonl``: one line, flushed (and by default fsynced) before returning, so an
  interrupted run keeps every finished sample. ``RunStore.append`` fsyncs a run's samples
  at most once a second: an fsync costs 0.3-2 ms on this VM, a sizeable share of a short
  pair, and a flushed line already survives Ctrl-C or a crash of hakbench itself (only a
  crash of the machine can lose the last second).
- ``read_json`` / ``read_jsonl``: a missing, unreadable or corrupt file is bad input
  (``UsageError``, exit 2) naming the file and, for JSONL, the line. The one exception is
  a torn last line (no newline at the end of the file): only the process interrupted
  mid-write leaves one, so it is skipped.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

from hakbench.core.errors import UsageError

if TYPE_CHECKING:
    import pandas as pd

TIDY_COLUMNS = (
    "run_id",
    "seq",
    "cell",
    "side",
    "pair",
    "round",
    "phase",
    "allocator",
    "variant",
    "profile",
    "workload",
    "status",
    "metric",
    "value",
)


def _dumps(data, *, indent: int | None = 2) -> str:
    return json.dumps(data, indent=indent, sort_keys=True, default=str)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_text(path: Path | str, text: str) -> Path:
    """Replace ``path`` with ``text`` atomically: temporary file, fsync, rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)
    _fsync_dir(path.parent)
    return path


def write_json(path: Path | str, data) -> Path:
    """``data`` as indented, key-sorted JSON, written atomically."""
    return write_text(path, _dumps(data) + "\n")


def write_jsonl(path: Path | str, rows) -> Path:
    """A whole JSONL file at once (one key-sorted object per line), written atomically."""
    return write_text(path, "".join(_dumps(r, indent=None) + "\n" for r in rows))


def append_jsonl(path: Path | str, row, *, sync: bool = True) -> None:
    """Append one line and flush it; ``sync``: make it durable (fsync) before returning."""
    with open(path, "a") as f:
        f.write(_dumps(row, indent=None) + "\n")
        f.flush()
        if sync:
            os.fsync(f.fileno())


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"{path}: cannot read ({e})") from None


def read_json(path: Path | str):
    """The JSON value in ``path``; a missing or corrupt file is a UsageError naming it."""
    path = Path(path)
    text = _read(path)
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise UsageError(f"{path}: corrupt JSON at line {e.lineno}: {e.msg}") from None


def read_jsonl(path: Path | str) -> list:
    """Every line of a JSONL file; a corrupt line (other than a torn last one) is a
    UsageError naming the file and the line number."""
    path = Path(path)
    text = _read(path)
    lines = text.split("\n")
    torn = lines.pop()  # "" when the file ends with a newline, as every complete file does
    out = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError as e:
            raise UsageError(f"{path}:{number}: corrupt JSON line ({e.msg})") from None
    if torn.strip():
        try:
            out.append(json.loads(torn))
        except json.JSONDecodeError:
            pass  # written by the process that was interrupted mid-write
    return out


def _drop_torn_tail(path: Path) -> int:
    """Cut an unterminated last line off ``path`` (so the next append starts a line of its
    own); returns how many lines, torn one included, the file held."""
    if not path.exists():
        return 0
    data = path.read_bytes()
    lines = sum(1 for line in data.split(b"\n") if line.strip())
    if data and not data.endswith(b"\n"):
        with open(path, "r+b") as f:
            f.truncate(data.rfind(b"\n") + 1)
    return lines


SYNC_EVERY_S = 1.0  # RunStore fsyncs samples.jsonl at most this often


class RunStore:
    """One results directory: the samples file (``samples.jsonl`` unless ``name`` says
    otherwise: a calibration's ``trials.jsonl``, misuse's ``probes.jsonl``; one line per
    sample, flushed at once, fsynced at most every ``SYNC_EVERY_S``), the parts files of
    samples that stream (a soak's ``epochs.jsonl``, same rule) and meta.json."""

    def __init__(self, path: Path | str, *, fresh: bool = False, name: str = "samples.jsonl"):
        """``fresh``: refuse a directory that already holds samples, so two runs never mix."""
        self.path = Path(path)
        self.samples_path = self.path / name
        if fresh and self.samples_path.exists():
            raise UsageError(f"{self.path} already holds {name}; choose another --out")
        self.path.mkdir(parents=True, exist_ok=True)
        self._seq = _drop_torn_tail(self.samples_path)  # a seq is never reused
        self._synced = -float("inf")
        self._parts_opened: set[Path] = set()

    def _append(self, path: Path, row: dict) -> None:
        now = time.monotonic()
        sync = now - self._synced >= SYNC_EVERY_S
        append_jsonl(path, row, sync=sync)
        if sync:
            self._synced = now

    def append(self, sample: dict) -> dict:
        """Give the sample its ``seq`` and write it (flushed; fsynced when the last fsync is
        ``SYNC_EVERY_S`` old)."""
        sample.setdefault("run_id", self.path.name)
        sample["seq"] = self._seq
        self._seq += 1
        self._append(self.samples_path, sample)
        return sample

    def append_part(self, name: str, row: dict) -> None:
        """One row of ``name``.jsonl, a part of a sample still running (a soak's epoch)."""
        path = self.path / f"{name}.jsonl"
        if path not in self._parts_opened:  # a torn tail of a killed run is cut first
            _drop_torn_tail(path)
            self._parts_opened.add(path)
        self._append(path, row)

    def parts(self, name: str) -> list[dict]:
        path = self.path / f"{name}.jsonl"
        return read_jsonl(path) if path.exists() else []

    def samples(self) -> list[dict]:
        return load_samples(self.samples_path) if self.samples_path.exists() else []

    def write_meta(self, meta: dict) -> Path:
        return write_json(self.path / "meta.json", meta)

    def meta(self) -> dict:
        return read_json(self.path / "meta.json")


def load_samples(path: Path | str) -> list[dict]:
    """Samples of a samples.jsonl (or of the directory holding one); see ``read_jsonl``."""
    path = Path(path)
    return read_jsonl(path / "samples.jsonl" if path.is_dir() else path)


def tidy(samples: list[dict]) -> pd.DataFrame:
    """One row per sample x metric (failed samples keep their rows, marked by status)."""
    import pandas as pd  # heavy imports live where they are used: `hakbench --help` stays fast

    rows = []
    for s in samples:
        base = {c: s.get(c) for c in TIDY_COLUMNS[:12]}
        for metric, value in (s.get("metrics") or {}).items():
            rows.append({**base, "metric": metric, "value": float(value)})
    return pd.DataFrame(rows, columns=list(TIDY_COLUMNS))


def write_pyperf(samples: list[dict], directory: Path) -> list[Path]:
    """pyperf/<workload>/a.json and b.json; see hakbench.engine.pyperf_export."""
    from hakbench.engine.pyperf_export import export_ab

    return export_ab(samples, directory)


def default_run_dir(name: str) -> Path:
    """``results/runs/<UTC timestamp>-<name>/`` (not created)."""
    import datetime as _dt

    from hakbench.core import paths

    stamp = _dt.datetime.now(_dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name)[:60]
    return paths.results_dir() / "runs" / f"{stamp}-{safe}"
