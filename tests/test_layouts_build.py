"""Code layouts of a real build (hakbench.engine.layouts): relinked from the build's own
objects, checked with nm and objdump, cached, refused when the objects are not the
library's, and run as a cell's allocator."""

from __future__ import annotations

import itertools
import math
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from hakbench.core.errors import MeasurementError, UsageError
from hakbench.engine.cells import make_cell
from hakbench.engine.layouts import (
    LINK_FLAGS_COMMON,
    PAD_SYMBOL,
    build_layouts,
    draw_layouts,
    layout_dir,
    layout_libraries,
    layouts_for_sides,
    with_layout,
)

pytestmark = pytest.mark.xdist_group("layouts")


def copy_build(src: Path, dst: Path, variant: str = "fast") -> Path:
    """A build directory of its own: the variant's objects and library copied (make's
    timestamps kept), the harness programs and tools linked."""
    (dst / "obj").mkdir(parents=True)
    shutil.copytree(src / "obj" / variant, dst / "obj" / variant)
    shutil.copytree(src / variant, dst / variant)
    for name in ("bench", "bin", "stats"):
        (dst / name).symlink_to(src / name)
    return dst


@pytest.fixture
def build(tmp_path, build_dir) -> Path:
    if not (build_dir / "fast" / "libhakmem.so").is_file():
        pytest.skip("libhakmem not built (make build)")
    return copy_build(build_dir, tmp_path / "build")


def tool(*argv) -> str:
    """The standard output of a binutils tool run on real files."""
    return subprocess.run(list(map(str, argv)), capture_output=True, text=True, check=True).stdout


def functions(library: Path) -> dict[str, tuple[int, int]]:
    """name -> (address, size) of every function in the library's symbol table."""
    out = tool("nm", "--defined-only", "--print-size", library)
    found = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[2] in "tT":
            found[parts[3]] = (int(parts[0], 16), int(parts[1], 16))
    return found


def text_size(library: Path) -> int:
    out = tool("objdump", "-h", library)
    return next(int(line.split()[2], 16) for line in out.splitlines() if " .text " in line)


def mnemonics(library: Path) -> dict[str, list[str]]:
    """function -> its instructions' mnemonics (objdump -d), addresses and the alignment
    padding after it (nops, which objdump counts to the function before) left out."""
    out = tool("objdump", "-d", "--no-show-raw-insn", library)
    found: dict[str, list[str]] = {}
    current = None
    for line in out.splitlines():
        head = re.match(r"^[0-9a-f]+ <(.+)>:$", line)
        if head:
            current = found.setdefault(head.group(1), [])
        elif current is not None and re.match(r"^\s+[0-9a-f]+:\t", line):
            fields = line.split("\t")[1].split()
            mnemonic = fields[0]
            # nops: the padding to the next function's alignment (`xchg %ax,%ax` is the
            # two-byte one, 66 90)
            padding = mnemonic.startswith("nop") or mnemonic in ("cs", "data16")
            if not padding and fields != ["xchg", "%ax,%ax"]:
                current.append(mnemonic)
    return found


def test_layouts_are_the_same_functions_at_other_addresses(build):
    layouts = build_layouts(build, "fast", 4)
    assert [lay.k for lay in layouts] == [0, 1, 2, 3]
    assert layouts[0].library == build / "fast" / "libhakmem.so"  # layout 0: make's own
    assert layouts[0].build_dir == build and layouts[0].pad_bytes == 0
    base = functions(layouts[0].library)
    base_code = mnemonics(layouts[0].library)
    base_text = text_size(layouts[0].library)
    objects = len(layouts[0].order)
    for lay in layouts[1:]:
        assert lay.library == build / "layouts" / "fast" / str(lay.k) / "fast" / "libhakmem.so"
        funcs = functions(lay.library)
        if lay.pad_bytes:
            assert funcs.pop(PAD_SYMBOL)[1] == lay.pad_bytes
        # the same functions, each of the same size and the same instructions ...
        assert {n: s for n, (_, s) in funcs.items()} == {n: s for n, (_, s) in base.items()}
        code = mnemonics(lay.library)
        assert all(code[name] == base_code[name] for name in base_code)
        # ... nearly all of them elsewhere (one may land on its old address by chance)
        moved = sum(funcs[n][0] != base[n][0] for n in base)
        assert moved >= 0.9 * len(base)
        # .text grows by the pad, give or take the objects' alignment
        assert abs(text_size(lay.library) - base_text - lay.pad_bytes) <= 16 * objects + 64
    assert len({lay.order for lay in layouts}) == 4  # every layout its own order
    assert any(lay.pad_bytes for lay in layouts[1:])


@pytest.mark.parametrize("variant", ["fast", "pgo"])
def test_the_pad_comes_before_every_function(variant, tmp_path, build_dir):
    """Before the hot and cold sections too, which the pgo objects have (.text.hot,
    .text.unlikely) and which the default linker script puts ahead of .text."""
    if not (build_dir / variant / "libhakmem.so").is_file():
        pytest.skip(f"{variant} not built (make build)")
    build = copy_build(build_dir, tmp_path / "build", variant)
    lay = next(lay for lay in build_layouts(build, variant, 6)[1:] if lay.pad_bytes)
    funcs = functions(lay.library)
    pad_address, pad_size = funcs.pop(PAD_SYMBOL)
    assert pad_size == lay.pad_bytes and lay.pad_bytes % 16 == 0 and lay.pad_bytes <= 4096
    assert all(address >= pad_address + pad_size for address, _ in funcs.values())


def test_a_layout_is_linked_once_and_again_when_its_objects_change(build, build_dir):
    first = build_layouts(build, "fast", 3)
    stamp = [lay.library.stat().st_mtime_ns for lay in first[1:]]
    again = build_layouts(build, "fast", 3)
    assert again == first
    assert [lay.library.stat().st_mtime_ns for lay in again[1:]] == stamp  # reused
    # make rebuilds one object (the secure variant's front.o stands in for an edit) and
    # relinks the library; the layouts follow, in the same orders
    shutil.copy(build_dir / "obj" / "secure" / "front.o", build / "obj" / "fast" / "front.o")
    objects = sorted((build / "obj" / "fast").glob("*.o"))
    library = build / "fast" / "libhakmem.so"
    subprocess.run(
        ["gcc", "-shared", "-o", str(library), *map(str, objects), *LINK_FLAGS_COMMON, "-lpthread"],
        check=True,
    )  # (make's own link line: allocator/allocator.mk)
    relinked = build_layouts(build, "fast", 3)
    assert [lay.library.stat().st_mtime_ns for lay in relinked[1:]] != stamp
    assert [lay.order for lay in relinked] == [lay.order for lay in first]
    sizes = {n: s for n, (_, s) in functions(library).items()}
    assert sizes != {n: s for n, (_, s) in functions(build_dir / "fast" / "libhakmem.so").items()}
    for lay in relinked[1:]:
        funcs = functions(lay.library)
        funcs.pop(PAD_SYMBOL, None)
        assert {n: s for n, (_, s) in funcs.items()} == sizes


def test_objects_that_are_not_the_librarys_are_refused(build, tmp_path):
    source = tmp_path / "stale.c"
    source.write_text("int hak_stale_leftover(int x) { return x + 1; }\n")
    subprocess.run(
        ["gcc", "-O2", "-fPIC", "-c", str(source), "-o", str(build / "obj" / "fast" / "stale.o")],
        check=True,
    )
    with pytest.raises(MeasurementError, match="do not relink"):
        build_layouts(build, "fast", 2)
    assert not (build / "layouts" / "fast" / "1" / "fast" / "libhakmem.so").exists()
    assert build_layouts(build, "fast", 1)[0].library == build / "fast" / "libhakmem.so"


def test_bad_requests_are_usage_errors(build):
    with pytest.raises(UsageError, match="at least 1"):
        build_layouts(build, "fast", 0)
    with pytest.raises(UsageError, match="unknown variant"):
        build_layouts(build, "turbo", 2)
    with pytest.raises(UsageError, match="not built"):
        build_layouts(build, "secure", 2)  # not copied into this build
    fast = build_layouts(build, "fast", 2)[1]
    for cell in (
        make_cell("hakmem", "tiny_hot", variant="stats", build=build),
        make_cell("system", "tiny_hot", build=build),
    ):
        with pytest.raises(UsageError, match="layout 1 is of hakmem:fast"):
            with_layout(cell, fast)


def test_a_cell_runs_a_layout(build):
    layouts = build_layouts(build, "fast", 2)
    base = make_cell("hakmem", "tiny_hot", profile="C7_SAFE", build=build)
    cell = with_layout(base, layouts[1])
    assert cell.build == layout_dir(build, "fast", 1) == layouts[1].build_dir
    assert cell.resolved_allocator().preload == layouts[1].library.resolve()
    assert cell.key != base.key and cell.env == base.env and cell.workload == base.workload
    argv, env = cell.command(["--size", "64", "--batch", "100", "--cycles", "100", "--seed", "1"])
    assert Path(argv[0]).resolve() == (build / "bench" / "bench_tiny_hot").resolve()
    out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0
    assert f"malloc_impl={layouts[1].library.resolve()}" in out.stdout
    # ab's observe run takes the stats variant from the same build directory
    stats = make_cell("hakmem", "tiny_hot", variant="stats", build=cell.build)
    assert stats.resolved_allocator().available


def test_sides_share_the_layouts_of_one_build(build, tmp_path, build_dir):
    same = layouts_for_sides((build, "fast"), (build, "fast"), 3)
    assert same["A"] is same["B"]
    other = copy_build(build_dir, tmp_path / "other")
    both = layout_libraries((build, "fast"), (other, "fast"), 3)
    assert both["A"][0] == build / "fast" / "libhakmem.so"
    assert both["B"][2] == other / "layouts" / "fast" / "2" / "fast" / "libhakmem.so"
    assert all(p.is_file() for p in both["A"] + both["B"])
    # a reference allocator's side is not laid out
    libraries = [lay.library for lay in same["B"]]
    assert layout_libraries(None, (build, "fast"), 3) == {"A": [], "B": libraries}


def test_draws_are_balanced_blocks_in_a_seeded_order():
    first = list(itertools.islice(draw_layouts(3, 2, seed=7), 16))
    # a first block of 2 x 2, then every combination once a block
    assert sorted(first[:4]) == [(a, b) for a in range(2) for b in range(2)]
    every = [(a, b) for a in range(3) for b in range(2)]
    assert sorted(first[4:10]) == sorted(first[10:16]) == every
    assert first[4:10] != first[10:16]  # each block shuffled on its own
    assert first == list(itertools.islice(draw_layouts(3, 2, seed=7), 16))
    assert first != list(itertools.islice(draw_layouts(3, 2, seed=8), 16))


def test_draws_take_the_layouts_in_by_blocks_so_a_few_pairs_have_an_interval():
    """16 layouts a side: after 20 pairs four layouts a side have their three pairs or more
    (a uniform draw would give each about one), and the interval from them is finite; every
    layout has its pairs once the blocks reach all 16."""
    from hakbench.stats.layouts import MIN_PAIRS_PER_LAYOUT, layout_spread, random_effects_bounds

    drawn = list(itertools.islice(draw_layouts(16, 16, seed=3), 20))
    la, lb = [a for a, _ in drawn], [b for _, b in drawn]
    assert max(la) == max(lb) == 3
    x = [0.01 * ((i * 7) % 5 - 2) for i in range(20)]
    sp = layout_spread(x, la, lb, k_a=16, k_b=16)
    assert sp.complete and sp.sides["A"].used == sp.sides["B"].used == 4
    assert all(math.isfinite(v) for v in random_effects_bounds(sp, 0.025))
    blocks = 4 + 16 + 64 + 256  # 2x2, 4x4, 8x8, 16x16
    many = list(itertools.islice(draw_layouts(16, 16, seed=3), blocks))
    counts = [sum(a == i for a, _ in many) for i in range(16)]
    assert min(counts) >= MIN_PAIRS_PER_LAYOUT and max(counts) - min(counts) == 2 + 4 + 8


def test_each_call_draws_its_own_layouts_and_a_replay_the_same(build):
    """The layouts follow the call's seed (fresh per call, recorded): a layout that happens to
    favour one side cannot decide every call the same way, and --seed, --resume and
    --continue link the very same ones again. A stored spec's own layout seed is kept."""
    from hakbench.experiments.ab_plan import layout_seed
    from hakbench.experiments.ab_spec import ABSpec

    assert layout_seed(ABSpec(layouts=3, seed=11)) == 11
    assert layout_seed(ABSpec(layouts=3, seed=11, layout_seed=0)) == 0  # a run stored before
    orders = {}
    for seed in (11, 12, 11):
        sides = layouts_for_sides((build, "fast"), (build, "fast"), 3, seed=seed)
        orders.setdefault(seed, []).append([lay.order for lay in sides["A"][1:]])
    assert orders[11][0] == orders[11][1]  # replayed: the same link orders
    assert orders[11][0] != orders[12][0]  # another call: other layouts


def test_calls_with_their_own_seeds_never_relink_each_others_layouts(build):
    """Two calls of one build at once draw layouts with their own seeds: each has its own
    directories, so linking the second leaves the first's libraries in place."""
    first = build_layouts(build, "fast", 3, seed=11)
    before = [lay.library.read_bytes() for lay in first[1:]]
    second = build_layouts(build, "fast", 3, seed=12)
    assert {lay.build_dir for lay in first[1:]}.isdisjoint(lay.build_dir for lay in second[1:])
    assert [lay.library.read_bytes() for lay in first[1:]] == before
    assert first[1].build_dir == layout_dir(build, "fast", 1, 11) == build / "layouts/fast/s11/1"
    cell = with_layout(make_cell("hakmem", "tiny_hot", build=build), second[2])
    assert cell.resolved_allocator().available  # bench, bin linked in from two levels deeper
