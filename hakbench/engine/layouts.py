"""Code layouts of one libhakmem build: the same objects linked in other orders behind a
seeded pad, so that an A/B can treat the code layout as a factor (issue 29).

Why. Where code lands decides which cache lines, 32-byte fetch windows, pages and branch
predictor entries its hot loops share. A code change moves every function after it, so an
A/B of two binaries measures the change plus the accident of the new layout: linking the
very same objects in another order read +0.66 % on tiny_hot (issue 29). Relinking each side
in K layouts and drawing them at random turns that accident into a spread the verdict can
include (``hakbench.stats.layouts``).

How a layout is made. Layout 0 is the library ``make build`` linked: the build's own
``<variant>/libhakmem.so``. Layout k >= 1 is linked by the same command (``$CC -shared``,
the variant's link flags, ``-lpthread``) from the same objects (``obj/<variant>/*.o``):
- in an order shuffled by the layout's seed, which moves whole objects (code and data)
  relative to each other;
- behind a pad: one local function of 0-4096 bytes in 16-byte steps, in a section the
  default linker script places first in ``.text`` (``.text.unlikely.*``), so every function
  of the library moves. 16-byte steps, not 64: functions are 16-byte aligned, so 64-byte
  steps would keep every function at the same offset in its cache line and 32-byte window.
Objects are compiled without ``-ffunction-sections``, so functions move with their object,
never relative to each other inside it; ordering single functions would need a second,
differently compiled object set (and rev builds keep no sources to compile).

Same code. Before a layout is linked, the objects relinked in make's order (by name, no pad)
must give a library byte-identical to the build's ``<variant>/libhakmem.so``; otherwise they
are not that library's objects (a stale object of a deleted source, an interrupted build) and
nothing is linked (``MeasurementError``). The relinked library is that check only.

Where. ``<build>/layouts/<variant>/<k>/`` (seed 0; ``.../s<seed>/<k>/`` for a call's own
seed, so concurrent calls never relink each other's libraries; old seeds are pruned) is a
build directory of its own:
``<variant>/libhakmem.so`` is layout k; ``bench``, ``bin`` and the other variants' directories
are links to the build's own. So a Cell whose ``build`` is that directory (``with_layout``)
runs the same harness programs (the glibc reference checksum is keyed by the resolved
program, so it is shared) with layout k preloaded, under the same ``HAKMEM_*`` options.
``layout.json`` there records the seed, the order, the pad and the key (the sha256 of every
object, the seed, the compiler and the link flags); a layout is linked again only when its
key changes. Concurrent callers serialise on a lock of ``<build>/layouts/``.
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import json
import os
import random
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from hakbench.core import paths
from hakbench.core.allocators import VARIANTS
from hakbench.core.cell import Cell
from hakbench.core.errors import MeasurementError, UsageError
from hakbench.engine import process
from hakbench.engine.store import write_json

LIBRARY = "libhakmem.so"
RECORD = "layout.json"
PAD_MAX_BYTES = 4096
PAD_STEP_BYTES = 16  # the functions' alignment: every step moves them within a cache line
PAD_SECTION = ".text.unlikely.hak_layout_pad"  # first in .text under the default script
PAD_SYMBOL = "hak_layout_pad"
# Link flags of each variant after the objects, as allocator/allocator.mk and pgo.mk give
# them; the byte-identity check of make's own order catches any drift.
LINK_FLAGS_COMMON = ("-Wl,-Bsymbolic-functions",)
LINK_FLAGS = {"debug": ("-fsanitize=undefined",)}
FORMAT = 2  # bump when the way a layout is made changes: every cached layout is relinked


@dataclass(frozen=True)
class Layout:
    """One code layout of a build's variant."""

    k: int  # 0: the build's own library
    variant: str
    build_dir: Path  # what Cell.build takes: <build> for k = 0, else layouts/<variant>/<k>
    library: Path  # <build_dir>/<variant>/libhakmem.so
    seed: int | None = None  # None for layout 0
    order: tuple[str, ...] = ()  # object names in link order (layout 0: make's, by name)
    pad_bytes: int = 0


def layout_dir(build: Path | None, variant: str, k: int, seed: int = 0) -> Path:
    """The build directory of layout ``k`` drawn with the call's ``seed`` (pure: nothing is
    checked or built): the build itself for k = 0, else ``<build>/layouts/<variant>/<k>``
    for seed 0 and ``<build>/layouts/<variant>/s<seed>/<k>`` for another seed, so that two
    calls that draw their own layouts of one build at the same time (two sessions comparing
    the same revisions) never relink a library the other is running."""
    base = _base(build)
    if k == 0:
        return base
    return base / "layouts" / variant / (str(k) if seed == 0 else f"s{seed}/{k}")


# The layouts of other seeds kept beside a call's (the newest by time): older ones, unused
# for KEEP_HOURS, are removed when a call links its own (a layout is relinked in ~0.1 s).
KEEP_SEEDS = 24
KEEP_HOURS = 6.0


def _prune(root: Path, keep: Path) -> None:
    """Remove ``root``'s seed directories beyond the KEEP_SEEDS newest that were not touched
    for KEEP_HOURS (never ``keep``, the call's own)."""
    import time

    seeds = sorted(
        (d for d in root.glob("s*") if d.is_dir() and d != keep),
        key=lambda d: d.stat().st_mtime,
        reverse=True,
    )
    for d in seeds[KEEP_SEEDS:]:
        if time.time() - d.stat().st_mtime > KEEP_HOURS * 3600:
            shutil.rmtree(d, ignore_errors=True)


def with_layout(cell: Cell, layout: Layout) -> Cell:
    """``cell`` with libhakmem from ``layout``. Everything else (workload, profile, ``--set``,
    the harness programs) is the cell's own; its key and label name the layout's directory.
    A cell of another allocator or variant than the layout's is a UsageError: the layout's
    directory holds that variant's library only (the others are the build's own)."""
    if cell.allocator != "hakmem" or (cell.variant or "fast") != layout.variant:
        raise UsageError(
            f"layout {layout.k} is of hakmem:{layout.variant}, not of {cell.allocator_label}"
        )
    return dataclasses.replace(cell, build=layout.build_dir)


def plan_layout(objects: list[str], k: int, seed: int = 0) -> tuple[tuple[str, ...], int, int]:
    """(link order, pad bytes, layout seed) of layout ``k`` >= 1 of ``objects`` (names)."""
    layout_seed = seed * 1_000_003 + k
    rng = random.Random(f"hakmem-layout:{layout_seed}")
    order = sorted(objects)
    rng.shuffle(order)
    pad = PAD_STEP_BYTES * rng.randint(0, PAD_MAX_BYTES // PAD_STEP_BYTES)
    return tuple(order), pad, layout_seed


def draw_layouts(k_a: int, k_b: int, seed: int) -> Iterator[tuple[int, int]]:
    """Endless (layout of A, layout of B) per pair, in blocks that each run every combination
    of their layouts once, in an order shuffled by (seed, block). The first blocks take a
    side's first 2, then 4, 8, ... layouts (at most its k), so that a few layouts a side have
    the pairs the random-effects interval needs early (``stats.layouts.MIN_PAIRS_PER_LAYOUT``
    each: 20 pairs give 4 layouts a side 4 pairs or more), and a workload whose pairs take
    seconds is judged within its budget on the layouts drawn so far instead of none; each
    block after them runs all k_a * k_b. Random, yet balanced at the end of every block, so
    every layout of a side meets the layouts of the other alike and a layout mean is not
    tilted by which partners it happened to draw."""
    block = 0
    while True:
        width = 2 << block  # 2, 4, 8, ...
        ka, kb = min(k_a, width), min(k_b, width)
        order = [(a, b) for a in range(ka) for b in range(kb)]
        random.Random(f"hakmem-layout-draw:{seed}:{block}").shuffle(order)
        yield from order
        block += 1


def build_layouts(
    build: Path | None, variant: str, k: int, *, seed: int = 0, cc: str | None = None
) -> list[Layout]:
    """The ``k`` layouts of ``variant`` in ``build`` (default: the work tree's build/):
    layout 0 the build's own library, layouts 1..k-1 linked (or reused) as the module doc
    says. UsageError for a bad k or an unbuilt variant; MeasurementError when the objects
    are not the library's or a link fails."""
    base = _base(build)
    if k < 1:
        raise UsageError(f"layouts: K must be at least 1 (got {k})")
    if variant not in VARIANTS:
        raise UsageError(f"layouts: unknown variant '{variant}'; known: {', '.join(VARIANTS)}")
    library = base / variant / LIBRARY
    if not library.is_file():
        raise UsageError(f"layouts: {library} not built (run `make build`)")
    layouts = [Layout(0, variant, base, library, None, tuple(sorted(_objects(base, variant))), 0)]
    if k == 1:
        return layouts
    root = base / "layouts" / variant
    root.mkdir(parents=True, exist_ok=True)
    lock = os.open(root, os.O_RDONLY)  # one linker of this build's layouts at a time
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        linker = _Linker(base, variant, cc or os.environ.get("CC") or "gcc")
        for i in range(1, k):
            layouts.append(linker.layout(i, seed))
        if seed != 0:
            own = layout_dir(base, variant, 1, seed).parent
            os.utime(own)  # in use now: the newest
            _prune(root, own)
    finally:
        os.close(lock)
    return layouts


Side = tuple[Path | None, str] | None  # (build, variant) of a libhakmem side; None: no layouts


def layouts_for_sides(a: Side, b: Side, k: int, *, seed: int = 0) -> dict[str, list[Layout]]:
    """{"A": layouts, "B": layouts}: ``k`` layouts of each side's (build, variant) (build
    None: the work tree's build/). The same list when both sides are the same build and
    variant (an A/A across layouts); an empty one for a side given as None (not libhakmem: a
    reference allocator runs as it is, one layout for the statistics). Layout k of two builds
    has the same order seed and pad: the libraries differ only where the code does."""
    side_a = build_layouts(a[0], a[1], k, seed=seed) if a is not None else []
    if b is not None and a is not None and _same_build(a[0], b[0]) and a[1] == b[1]:
        return {"A": side_a, "B": side_a}
    return {"A": side_a, "B": build_layouts(b[0], b[1], k, seed=seed) if b is not None else []}


def layout_libraries(a: Side, b: Side, k: int, *, seed: int = 0) -> dict[str, list[Path]]:
    """{"A": [library of layout 0..k-1], "B": [...]} (``layouts_for_sides``)."""
    sides = layouts_for_sides(a, b, k, seed=seed)
    return {side: [lay.library for lay in layouts] for side, layouts in sides.items()}


def _base(build: Path | None) -> Path:
    return Path(build) if build is not None else paths.build_dir()


def _same_build(x: Path | None, y: Path | None) -> bool:
    return _base(x).resolve() == _base(y).resolve()


def _objects(base: Path, variant: str) -> dict[str, Path]:
    """name -> path of the variant's objects (the ones make links: obj/<variant>/*.o)."""
    found = {p.name: p for p in sorted((base / "obj" / variant).glob("*.o"))}
    if not found:
        raise UsageError(f"layouts: no objects in {base / 'obj' / variant} (run `make build`)")
    return found


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


class _Linker:
    """Links the layouts of one (build, variant), checking first that its objects are the
    library's."""

    def __init__(self, base: Path, variant: str, cc: str):
        self.base, self.variant, self.cc = base, variant, cc
        self.objects = _objects(base, variant)
        self.hashes = {name: _sha256(p) for name, p in self.objects.items()}
        self.flags = [*LINK_FLAGS_COMMON, *LINK_FLAGS.get(variant, ()), "-lpthread"]
        self.checked = False

    def key(self, order: tuple[str, ...], pad: int, layout_seed: int) -> str:
        parts = [FORMAT, self.cc, self.flags, sorted(self.hashes.items()), order, pad, layout_seed]
        return hashlib.sha256(json.dumps(parts).encode()).hexdigest()

    def layout(self, k: int, seed: int) -> Layout:
        order, pad, layout_seed = plan_layout(list(self.objects), k, seed)
        target = layout_dir(self.base, self.variant, k, seed)
        library = target / self.variant / LIBRARY
        key = self.key(order, pad, layout_seed)
        if not (library.is_file() and _recorded_key(target) == key):
            self.check_objects()
            self.link(target, order, pad, layout_seed, key)
        self._link_the_rest(target)  # a variant built since is linked too
        return Layout(k, self.variant, target, library, layout_seed, order, pad)

    def check_objects(self) -> None:
        """Refuse objects that do not relink, in make's order, into the build's library."""
        if self.checked:
            return
        library = self.base / self.variant / LIBRARY
        with tempfile.TemporaryDirectory(prefix="hakmem-layout-check-") as tmp:
            again = Path(tmp) / LIBRARY
            self._run(
                [
                    self.cc,
                    "-shared",
                    "-o",
                    str(again),
                    *self._paths(sorted(self.objects)),
                    *self.flags,
                ]
            )
            if again.read_bytes() != library.read_bytes():
                raise MeasurementError(
                    f"layouts: the objects in {self.base / 'obj' / self.variant} do not relink "
                    f"into {library} (a stale object, or the library is older than its "
                    "objects): run `make build`"
                )
        self.checked = True

    def link(self, target: Path, order: tuple[str, ...], pad: int, layout_seed: int, key: str):
        if target.exists():
            shutil.rmtree(target)
        (target / self.variant).mkdir(parents=True)
        inputs = self._paths(order)
        if pad:
            pad_object = target / "pad.o"
            self._run(
                [self.cc, "-c", "-x", "assembler", "-", "-o", str(pad_object)],
                stdin=_pad_source(pad),
            )
            inputs.insert(0, str(pad_object))  # first: its .text.unlikely.* precedes all code
        self._run(
            [self.cc, "-shared", "-o", str(target / self.variant / LIBRARY), *inputs, *self.flags]
        )
        record = {
            "k": int(target.name),  # (the seed's directory is its parent)
            "variant": self.variant,
            "seed": layout_seed,
            "order": list(order),
            "pad_bytes": pad,
            "key": key,
            "objects": self.hashes,
            "cc": self.cc,
            "link_flags": self.flags,
        }
        write_json(target / RECORD, record)  # written last: it marks a finished layout

    def _link_the_rest(self, target: Path) -> None:
        """bench, bin and the other variants' directories: relative links to the build's."""
        up = Path(*[".."] * len(target.relative_to(self.base).parts))
        for name in ("bench", "bin", *VARIANTS):
            link = target / name
            if name != self.variant and (self.base / name).exists() and not link.is_symlink():
                link.symlink_to(up / name)

    def _paths(self, order) -> list[str]:
        return [str(self.objects[name]) for name in order]

    def _run(self, argv: list[str], stdin: str | None = None) -> None:
        r = process.run(argv, input=stdin, timeout=300)
        if not r.ok:
            why = r.error or r.stderr.strip()[-400:] or "timed out"
            raise MeasurementError(f"layouts: {' '.join(argv[:3])} ... failed: {why}")


def _pad_source(pad: int) -> str:
    """Assembly of the pad: one local function of ``pad`` bytes of int3."""
    return (
        f'\t.section {PAD_SECTION},"ax",@progbits\n'
        f"\t.p2align 4\n"
        f"\t.type {PAD_SYMBOL}, @function\n"
        f"{PAD_SYMBOL}:\n"
        f"\t.skip {pad}, 0xcc\n"
        f"\t.size {PAD_SYMBOL}, {pad}\n"
        '\t.section .note.GNU-stack,"",@progbits\n'
    )


def _recorded_key(target: Path) -> str | None:
    try:
        return json.loads((target / RECORD).read_text()).get("key")
    except (OSError, ValueError):
        return None
