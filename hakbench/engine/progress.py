"""The one progress bar of every command: click's ``progressbar`` on stderr, with the ok and
failed counts and the latest note beside its ETA.

On a terminal click redraws the bar in place. Elsewhere (CI logs, pipes) click itself would
print only the label, so the same line is printed in full after the first step, at every
tenth of the work and at every failure, which keeps a long log readable.
"""

from __future__ import annotations

import sys
import time

import click


class Progress:
    def __init__(self, total: int, label: str = "", stream=None, eta: bool = True):
        """``eta``: False where the total is only a guess (a sequential A/B, which stops when
        its verdicts are decided or its budget is spent: its status says which)."""
        self.total = max(total, 1)
        self.ok = 0
        self.failed = 0
        self.note = ""  # the latest sample's (a failure's error), replaced at every step
        self.status = ""  # what the work as a whole says (kept across steps)
        self.stream = stream or sys.stderr
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self._last_decile = 0
        self._last_line = time.monotonic()
        self.bar = click.progressbar(
            length=self.total,
            label=label,
            file=self.stream,
            show_eta=eta,
            show_pos=True,
            item_show_func=self._counts,
        )
        if self.tty:
            self.bar.__enter__()

    @property
    def done(self) -> int:
        return self.ok + self.failed

    def _counts(self, _item=None) -> str:
        fail = f", {self.failed} failed" if self.failed else ""
        return " ".join(x for x in (f"{self.ok} ok{fail}", self.status, self.note) if x)

    def line(self) -> str:
        """The bar as one line: label, bar, position, ETA, counts, note."""
        return self.bar.format_progress_line()

    def step(self, ok: bool = True, note: str = "") -> None:
        self.ok += 1 if ok else 0
        self.failed += 0 if ok else 1
        self.note = note
        if self.done > self.total:  # an estimated total (a sequential A/B) ran over
            self.total = self.bar.length = self.done
        if self.tty:
            self.bar.update(1)
            return
        self.bar.make_step(1)  # advance position and ETA without click's non-terminal echo
        decile = int(10 * self.done / self.total)
        if decile != self._last_decile or not ok or self.done == 1:
            self._last_decile = decile
            click.echo(self.line(), file=self.stream)

    def refresh(self, every_s: float = 30.0) -> None:
        """Show the status now (a terminal redraws the bar; a log gets the line, at most every
        ``every_s`` seconds): for work whose total is a guess, where the tenths say little."""
        if self.tty:
            self.bar.render_progress()
            return
        now = time.monotonic()
        if now - self._last_line >= every_s:
            self._last_line = now
            click.echo(self.line(), file=self.stream)

    def phase(self, text: str) -> None:
        """A line of its own above the bar (a new stage of the work)."""
        if self.tty:
            click.echo("", file=self.stream)
        click.echo(text, file=self.stream)

    def close(self) -> None:
        if self.tty:
            self.bar.__exit__(None, None, None)


def progress_reporter(label: str):
    """A progress bar per group of samples: the timed rounds, then the instruction counts."""
    state: dict = {}

    def on_sample(done: int, total: int, sample: dict) -> None:
        if done == 1:
            counting = sample["phase"] == "instructions"
            state["bar"] = Progress(total, f"{label} instruction counts" if counting else label)
        bad = sample["status"] != "ok"
        note = f"{sample['cell'].split('|')[0]} {sample['workload']}: {sample['status']}"
        state["bar"].step(not bad, note if bad else "")
        if done == total:
            state["bar"].close()

    return on_sample
