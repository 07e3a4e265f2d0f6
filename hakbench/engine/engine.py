"""The execution loop every measuring command drives: plan -> take a sample -> tag -> store
-> progress, under the one signal policy (``hakbench.engine.interrupts``), resumable.

A command brings its own plan (``hakbench.engine.schedule`` slots, or its own order) and its own
stop rule; for each slot it calls ``Session.take(tags, run)``, which

- returns the sample already stored for that slot when the run directory holds one (a
  resumed or continued run: the same slot, by ``key``, is never run twice);
- else runs it and appends it to ``samples.jsonl`` the moment it finishes (flushed, see
  ``hakbench.engine.store.RunStore``), inside an ``interrupts.deferred`` section: a stop signal
  never loses a finished sample, and a sample whose process the signal cut is not stored
  (it did not finish), then the stop is raised;
- steps the progress display (``on_sample``).

``Session.take_concurrent(slots, jobs)`` is the same step for samples whose value does not
depend on what else runs (an exact instruction count: callgrind simulates one process, so
sharing the CPUs changes only its wall time): up to ``jobs`` run at once in worker threads,
each stored by the calling thread the moment it finishes, under the same rules (a stored
slot reused, a cut sample never stored, a stop raised once what finished is stored).

``open_run`` opens the run directory: a fresh one (refusing one that already holds
samples), or for ``--resume``/``--continue`` the stored one, after checking that the tree
(git HEAD and a digest of the uncommitted changes), the build (sha256 of the libraries and
harness programs), the profiles (every cell's environment) and the machine (its
fingerprint) are those the run started with (``identity``; one line, exit 2, otherwise).
``new_seed`` draws a fresh seed per call; the seed is recorded in meta.json and ``--seed``
replays it.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import secrets
import shutil
import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from hakbench.core.errors import UsageError
from hakbench.engine import interrupts, process
from hakbench.engine.meta import fingerprint, git_state
from hakbench.engine.store import RunStore, read_json

# What identifies a slot of any plan in its sample: a resumed run reuses the sample whose
# key matches the slot's (absent fields are None).
KEY_FIELDS = ("phase", "cell", "workload", "round", "pair", "side", "trial")


def key(tags: dict) -> tuple:
    return tuple(tags.get(f) for f in KEY_FIELDS)


def new_seed() -> int:
    """A fresh seed for one call (the pair order, the plan's shuffles); 6 digits, so a
    report's ``--seed N`` is easy to retype."""
    return secrets.randbelow(900_000) + 100_000


class Session:
    """One run directory being measured (see the module doc)."""

    def __init__(
        self,
        store: RunStore,
        *,
        stored: Iterable[dict] = (),
        on_sample: Callable[[dict], None] | None = None,
        on_part: Callable[[dict], None] | None = None,
    ):
        _import_whole()
        self.store = store
        self.on_sample = on_sample
        self.on_part = on_part
        self._stored = {key(s): s for s in stored}
        self.reused = 0
        self.ran = 0
        # every sample this session returned or stored, in order: the stored one a stop
        # came after (``take`` then raises) is here too, so a report misses none
        self.finished: list[dict] = []

    def stored(self, tags: dict) -> dict | None:
        return self._stored.get(key(tags))

    def take(self, tags: dict, run: Callable[[], dict], *, nested: bool = False) -> dict:
        """The sample of the slot ``tags`` (the fields it is stored with): the stored one,
        or ``run()``'s, tagged and stored the moment it finishes.

        ``nested``: ``run`` is itself a run of the engine (a calibration trial: a whole ab,
        or trials of pairs taken through a Session of their own), so a stop must reach its
        own samples; it runs outside a deferred section and raises KeyboardInterrupt when a
        stop cut it (then nothing is stored here), and only storing its result is deferred."""
        old = self._stored.pop(key(tags), None)
        if old is not None:
            self.reused += 1
            self.finished.append(old)
            if self.on_sample:  # (a resumed run's progress counts what it kept)
                self.on_sample(old)
            return old
        cut_before = interrupts.stops()
        if nested:
            sample = run()
        with interrupts.deferred():
            if not nested:
                sample = run()
            sample.update(tags)
            if not nested and interrupts.stops() != cut_before:
                return sample  # its process was stopped by the signal: not a finished sample
            self._store(sample)
        return sample

    def _store(self, sample: dict) -> None:
        self.store.append(sample)
        self.finished.append(sample)
        self.ran += 1
        if self.on_sample:
            self.on_sample(sample)

    def take_concurrent(
        self, slots: Sequence[tuple[dict, Callable[[], dict]]], jobs: int
    ) -> list[dict]:
        """The samples of ``slots`` ((tags, run) pairs), in their order, with up to ``jobs``
        runs at once: only for samples whose value does not depend on what else runs (see
        the module doc). A stored slot is reused; each other runs in a worker thread and is
        tagged and stored by this thread the moment it finishes (inside a deferred section,
        as ``take`` stores). A stop signal stops the running ones through their processes'
        stoppers (``interrupts.stopping``, counted per thread: a cut sample is not stored),
        starts no other, stores every one that finished, then raises ``Interrupted``."""
        out: dict[int, dict] = {}
        todo = []
        for i, (tags, run) in enumerate(slots):
            if key(tags) in self._stored:
                out[i] = self.take(tags, run)
            else:
                todo.append(i)
        pool = ThreadPoolExecutor(max_workers=max(1, jobs), thread_name_prefix="hakbench-take")
        stopped = threading.Event()  # set once the stop (or an error) reached this thread
        seen = interrupts.received()  # a signal other than this one stops the slots
        futures = {pool.submit(_run_uncut, slots[i][1], stopped, seen): i for i in todo}
        handled = set()

        def store(f) -> None:
            handled.add(f)
            sample = f.result()
            if sample is not None:  # None: cut by the stop, or never started
                i = futures[f]
                sample.update(slots[i][0])
                self._store(sample)
                out[i] = sample

        try:
            for f in as_completed(futures):
                with interrupts.deferred():
                    store(f)
        except BaseException:  # a stop (or an error): what finished is stored all the same
            stopped.set()
            pool.shutdown(wait=True, cancel_futures=True)
            for f in futures:
                if f not in handled and f.done() and not f.cancelled() and not f.exception():
                    store(f)
            raise
        pool.shutdown()
        return [out[i] for i in range(len(slots))]

    def part(self, name: str, row: dict) -> dict:
        """A part of the sample being run (a soak's epoch), stored in ``name``.jsonl the moment
        it arrives (flushed): a sample that a stop or a kill cuts keeps what it showed."""
        self.store.append_part(name, row)
        if self.on_part:
            self.on_part(row)
        return row


def _run_uncut(run: Callable[[], dict], stopped: threading.Event, seen) -> dict | None:
    """``run()`` in a worker thread of ``take_concurrent``: None when the stop came before
    it started (nothing starts after a stop) or stopped its process (a cut sample)."""
    if stopped.is_set() or interrupts.received() != seen:
        return None
    before = interrupts.stops()
    sample = run()
    return None if interrupts.stops() != before else sample


def take_slots(session: Session, slots, cell_of, run, **tags) -> list[dict]:
    """The samples of ``hakbench.engine.schedule`` A/B slots through ``session``, each tagged
    with its slot (phase, side, pair, round, workload), its cell's key and ``tags``;
    ``cell_of(slot)`` is its cell, ``run(cell, slot)`` takes its sample."""
    out = []
    for slot in slots:
        cell = cell_of(slot)
        slot_tags = {"cell": cell.key, "workload": slot.workload, "phase": slot.phase}
        slot_tags.update(side=slot.side, pair=slot.pair, round=slot.round, **tags)
        out.append(session.take(slot_tags, lambda cell=cell, slot=slot: run(cell, slot)))
    return out


def _import_whole() -> None:
    """numpy and scipy.stats, which the stop rules and the summaries use, imported before
    the loop and whole: a stop signal that lands inside a C extension's first import leaves
    it half-initialised, and the report written next fails on it ("cannot load module more
    than once per process"; the kill test found one in matrix)."""
    with interrupts.deferred():
        import numpy  # noqa: F401
        import scipy.stats  # noqa: F401


def progress_step(progress) -> Callable[[dict], None]:
    """``on_sample`` for a ``hakbench.engine.progress.Progress`` bar: ok/failed and the error."""

    def step(sample: dict) -> None:
        progress.step(sample["status"] == "ok", sample.get("error") or "")

    return step


# ---- what a resumed run must share with the run it resumes ----


def _sha256(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def tree_state(exclude: Path | None = None) -> dict:
    """git HEAD and a digest of the uncommitted changes to tracked files (``exclude``: the
    run directory itself, should it lie in the tree: its own samples are no change)."""
    from hakbench.core import paths

    state = git_state()
    root = paths.repo_root()
    spec = []
    if exclude is not None and Path(exclude).resolve().is_relative_to(root):
        spec = ["--", ".", f":(exclude){Path(exclude).resolve().relative_to(root)}"]
    r = process.run(["git", "diff", "HEAD", *spec], timeout=30, cwd=root, text=False)
    diff = r.stdout or b""  # "" when git could not start
    return {"commit": state.get("commit"), "dirty": hashlib.sha256(diff).hexdigest()[:16]}


def identity(cells: Iterable, out: Path | None = None) -> dict:
    """What a resumed run must share with its start: tree, build, profiles, machine.
    ``cells``: ``hakbench.core.cell.Cell`` objects (their library, program and environment);
    ``out``: the run directory (left out of the tree's digest)."""
    cells = list(cells)
    programs = [c.command()[0][0] for c in cells]  # a real program by name: the one on PATH
    return identity_of(
        [c.resolved_allocator().preload for c in cells]
        + [shutil.which(p) or p if "/" not in str(p) else p for p in programs],
        {c.key: c.env for c in cells},
        out,
    )


def identity_of(files: Iterable, envs: dict, out: Path | None = None) -> dict:
    """``identity`` from the files a run executes or preloads and each unit's environment."""
    hashes = {str(f): _sha256(Path(f)) for f in files if f is not None and Path(f).is_file()}
    envs = {k: dict(sorted(v.items())) for k, v in envs.items()}
    profile = hashlib.sha256(json.dumps(envs, sort_keys=True).encode()).hexdigest()[:16]
    return {
        "tree": tree_state(out),
        "build": dict(sorted(hashes.items())),
        "profile": profile,
        "machine": fingerprint(),
    }


IDENTITY_NAMES = {
    "tree": "source tree (git HEAD or uncommitted changes)",
    "build": "build (library or harness hashes)",
    "profile": "profiles (a cell's environment)",
    "machine": "machine (fingerprint)",
}


def check_identity(stored: dict | None, now: dict, where: Path, flag: str = "--resume") -> None:
    """One line (UsageError, exit 2) naming the first of tree, build, profile, machine that
    differs from the run's start."""
    if not isinstance(stored, dict):
        raise UsageError(f"{flag} {where}: the run recorded no identity (an older hakbench)")
    for what, name in IDENTITY_NAMES.items():
        if stored.get(what) != now.get(what):
            raise UsageError(
                f"{flag} {where}: the {name} differs from the run's; "
                "measure it again in a new --out"
            )


def stored_meta(out: Path, kind: str, flag: str = "--resume") -> dict:
    """The meta.json of a run directory to resume, made by command ``kind`` (one line,
    exit 2, otherwise)."""
    out = Path(out)
    if not (out / "meta.json").exists():
        raise UsageError(f"{flag} {out}: no meta.json there, nothing to resume")
    meta = read_json(out / "meta.json")
    if not isinstance(meta, dict) or meta.get("kind") != kind:
        raise UsageError(f"{flag} {out}: not a {kind} run directory")
    return meta


def open_run(
    out: Path,
    meta: dict,
    *,
    resume: bool,
    ident: dict,
    flag: str = "--resume",
    name: str = "samples.jsonl",
    check: Callable[[dict], None] | None = None,
) -> tuple[RunStore, dict, list[dict]]:
    """(store, meta, stored samples) of a run directory whose samples file is ``name``.
    Fresh: refuses one holding samples, records ``ident`` in meta.json. Resumed: the stored
    meta (its spec and seed rule), after ``check`` (the command's own questions of the
    stored meta: raises UsageError) and ``check_identity``; the call is listed under
    ``resumed``."""
    out = Path(out)
    if not resume:
        store = RunStore(out, fresh=True, name=name)
        meta["identity"] = ident
        store.write_meta(meta)
        return store, meta, []
    stored = stored_meta(out, meta.get("kind", ""), flag)
    if check is not None:
        check(stored)
    check_identity(stored.get("identity"), ident, out, flag)
    stored.setdefault("resumed", []).append(
        {"date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"), "how": flag}
    )
    store = RunStore(out, name=name)
    store.write_meta(stored)
    return store, stored, store.samples()
