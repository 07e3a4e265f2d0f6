"""A results directory: samples.jsonl (one line per process, fsynced), meta.json, tidy tables.

An interrupted run keeps every finished sample: each line is written, flushed and fsynced
before the next process starts.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

from hakbench.errors import UsageError

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


class RunStore:
    """One results directory."""

    def __init__(self, path: Path | str, *, fresh: bool = False):
        """``fresh``: refuse a directory that already holds samples, so two runs never mix."""
        self.path = Path(path)
        self.samples_path = self.path / "samples.jsonl"
        if fresh and self.samples_path.exists():
            raise UsageError(f"{self.path} already holds samples.jsonl; choose another --out")
        self.path.mkdir(parents=True, exist_ok=True)
        self._seq = sum(1 for _ in self._lines())

    def _lines(self):
        if not self.samples_path.exists():
            return
        with open(self.samples_path) as f:
            yield from (line for line in f if line.strip())

    def append(self, sample: dict) -> dict:
        """Give the sample its ``seq`` and make it durable before returning."""
        sample.setdefault("run_id", self.path.name)
        sample["seq"] = self._seq
        self._seq += 1
        with open(self.samples_path, "a") as f:
            f.write(json.dumps(sample, sort_keys=True) + "\n")
            f.flush()
            os.fsync(f.fileno())
        return sample

    def samples(self) -> list[dict]:
        return load_samples(self.samples_path)

    def write_meta(self, meta: dict) -> Path:
        return write_json(self.path / "meta.json", meta)


def write_json(path: Path, data) -> Path:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
    tmp.replace(path)
    return path


def load_samples(path: Path | str) -> list[dict]:
    """Samples of a samples.jsonl (or of the directory holding one); a torn last line is
    skipped, since it can only be the process that was interrupted mid-write."""
    path = Path(path)
    if path.is_dir():
        path = path / "samples.jsonl"
    out = []
    with open(path) as f:
        for line in f:
            if not line.strip():
                continue
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return out


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
    """pyperf/<workload>/a.json and b.json; see hakbench.pyperf_export."""
    from hakbench.pyperf_export import export_ab

    return export_ab(samples, directory)


def default_run_dir(name: str) -> Path:
    """``results/runs/<UTC timestamp>-<name>/`` (not created)."""
    import datetime as _dt

    from hakbench import paths

    stamp = _dt.datetime.now(_dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name)[:60]
    return paths.results_dir() / "runs" / f"{stamp}-{safe}"
