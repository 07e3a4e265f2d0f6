"""Parse harness program output (the ARCHITECTURE.md stdout contract).

stdout: ``Throughput = <int> ops/s``, then ``key=value`` lines (ops, seconds, checksum,
maxrss_kb, malloc_impl, cpu_seconds, chunks, ...). ``chunk_rates`` and ``chunk_cpu_rates``
hold one figure per chunk of the timed loop, comma-separated (harness/common.h, HB_CHUNKS).
bench_soak also prints one ``epoch=N t=S ops=N ...`` line per epoch.
"""

from __future__ import annotations

import re

_THROUGHPUT = re.compile(r"^Throughput\s*=\s*(\d+)\s*ops/s\s*$")
_KV = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(\S*)\s*$")
_EPOCH = re.compile(r"^epoch=\d+(\s+[a-z_]+=\S+)+\s*$")
# keys whose value is a comma-separated list of numbers (one a chunk)
LIST_KEYS = ("chunk_rates", "chunk_cpu_rates")


def _number(text: str):
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text


def parse_harness_output(text: str) -> dict:
    """Return ``{"throughput": int|None, <key>: value, ...}``; numbers become int/float.

    ``checksum`` and ``malloc_impl`` stay strings; ``LIST_KEYS`` become lists of numbers.
    Epoch lines are ignored here.
    """
    out: dict = {"throughput": None}
    for line in text.splitlines():
        line = line.strip()
        m = _THROUGHPUT.match(line)
        if m:
            out["throughput"] = int(m.group(1))
            continue
        if _EPOCH.match(line):
            continue
        m = _KV.match(line)
        if m:
            key, val = m.group(1), m.group(2)
            if key in LIST_KEYS:
                out[key] = [_number(x) for x in val.split(",") if x]
            else:
                out[key] = val if key in ("checksum", "malloc_impl") else _number(val)
    return out


def parse_epoch_line(line: str) -> dict | None:
    """``epoch=3 t=3.001 ops=123 ops_s=456 rss_kb=789`` -> dict of numbers, else None."""
    line = line.strip()
    if not _EPOCH.match(line):
        return None
    return {k: _number(v) for k, v in (tok.split("=", 1) for tok in line.split())}
