"""A progress bar with ETA on a terminal; plain lines (every 10 %) elsewhere."""

from __future__ import annotations

import sys
import time


class Progress:
    def __init__(self, total: int, label: str = "", stream=None, width: int = 30):
        self.total = max(total, 1)
        self.label = label
        self.stream = stream or sys.stderr
        self.width = width
        self.done = 0
        self.failed = 0
        self.start = time.monotonic()
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self._last_decile = -1

    def eta_s(self) -> float | None:
        if self.done == 0:
            return None
        elapsed = time.monotonic() - self.start
        return elapsed / self.done * (self.total - self.done)

    def line(self, note: str = "") -> str:
        frac = self.done / self.total
        filled = int(frac * self.width)
        bar = "#" * filled + "-" * (self.width - filled)
        eta = self.eta_s()
        eta_text = f"ETA {eta:4.0f}s" if eta is not None else "ETA    ?"
        fail = f" failed {self.failed}" if self.failed else ""
        return f"{self.label} [{bar}] {self.done}/{self.total} {eta_text}{fail} {note}".rstrip()

    def step(self, ok: bool = True, note: str = "") -> None:
        self.done += 1
        self.failed += 0 if ok else 1
        if self.tty:
            self.stream.write("\r\x1b[K" + self.line(note))
            self.stream.flush()
            return
        decile = int(10 * self.done / self.total)
        if decile != self._last_decile or not ok:
            self._last_decile = decile
            self.stream.write(self.line(note) + "\n")
            self.stream.flush()

    def close(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()
