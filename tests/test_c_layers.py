"""libhakmem's call graph goes one way, as tests/test_imports.py keeps hakbench's imports:
a function calls functions of its own layer or of the layers below, never above. The graph
is the compiler's own: gcc's ``-fcallgraph-info`` writes, per translation unit, every
function it defines (node with its file and line) and every call it compiles (edge with the
call site), so a call through a macro or an inline function counts, and an include that is
never called does not.

The layers, bottom to top (issue #41: mimalloc's os -> segment -> page -> heap -> alloc/free).
The calls that still go upward today are listed in PENDING, each with why; the C layering
work of issue #41 empties it. A new upward call fails the test, and so does a pending one
that is gone (take it off the list)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "allocator" / "src"

LAYERS = [
    {"options.c", "stats.c", "lock.c", "sizeclass.c"},  # settings, counters, locks, classes
    {"os.c"},  # system calls
    {"superslab.c", "large.c"},  # segments: superslabs and large regions
    {"page.c"},  # pages and their free lists
    {"heap.c", "route.c", "zero.c"},  # per-thread heaps, routing by size, zero-size blocks
    {"front.c"},  # the fronts' refill paths
    {"init.c"},  # process and thread start and exit
    {"wrappers.c", "cxx.c"},  # the malloc API and the C++ operators
]

# (caller's file, callee's file): why it still goes up
PENDING = {
    ("os.c", "superslab.c"): "the superslab cache and its purge live in os.c "
    "(hak_os_purge_due, hak_os_release_cached -> hak_superslab_purge, hak_registry_set)",
    ("os.c", "large.c"): "one purge clock and ENOMEM release for both caches "
    "(hak_os_purge_due, hak_os_release_cached -> hak_large_*)",
    ("os.c", "page.c"): "the idle tick purges free blocks (hak_os_idle_tick)",
    ("superslab.c", "page.c"): "reclaiming an abandoned superslab collects its pages' "
    "remote frees (hak_page_collect)",
    ("heap.c", "front.c"): "a page emptied or a delayed free goes back through its front "
    "(hak_front_page_emptied, hak_front_free_local)",
    ("heap.c", "init.c"): "a remote free from a thread with no heap yet sets it up "
    "(hak_thread_init)",
    ("heap.c", "wrappers.c"): "the error path (hak_fatal_pointer) lives in wrappers.c",
    ("page.c", "wrappers.c"): "the error path (hak_fatal_pointer) lives in wrappers.c",
    ("large.c", "wrappers.c"): "the error path (hak_fatal_pointer) lives in wrappers.c",
}

NODE = re.compile(
    r'node: \{ title: "([^"]+)" label: "[^"\\]*\\n([^:"]+):\d+:\d+"( shape : ellipse)? \}'
)
EDGE = re.compile(r'edge: \{ sourcename: "([^"]+)" targetname: "([^"]+)"')


def callgraph(sources: list[Path], out: Path, include: Path = SRC) -> set[tuple[str, str]]:
    """(caller's file, callee's file) for every call between two files of ``sources``,
    from gcc -fcallgraph-info (-O0: the calls as written, none inlined away); a call made
    inside a header's inline function counts for the file that uses it."""
    defined: dict[str, str] = {}  # function -> the .c file that defines it
    calls: list[tuple[str, str, str]] = []  # (caller, callee, the unit compiling the call)
    for src in sources:
        r = subprocess.run(
            ["gcc", "-std=c11", "-D_GNU_SOURCE", "-O0", f"-I{include}",
             f"-I{ROOT / 'allocator' / 'include'}", "-fcallgraph-info", "-c", str(src),
             "-o", str(out / f"{src.stem}.o")],
            cwd=out, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert r.returncode == 0, r.stderr[-2000:]
        text = (out / f"{src.stem}.ci").read_text()
        for name, path, external in NODE.findall(text):
            if not external and path.endswith(".c"):
                defined[name] = Path(path).name
        calls += [(a, b, src.name) for a, b in EDGE.findall(text)]
    edges = set()
    for caller, callee, unit in calls:
        # a call made by a header's inline function belongs to the unit that compiles it
        a, b = defined.get(caller, unit), defined.get(callee)
        if a and b and a != b:
            edges.add((a, b))
    return edges


def upward(edges: set[tuple[str, str]], layers: list[set[str]]) -> set[tuple[str, str]]:
    """The edges whose callee sits in a higher layer than its caller."""
    level = {f: i for i, layer in enumerate(layers) for f in layer}
    return {(a, b) for a, b in edges if a in level and b in level and level[b] > level[a]}


@pytest.fixture(scope="module")
def edges(tmp_path_factory):
    return callgraph(sorted(SRC.glob("*.c")), tmp_path_factory.mktemp("callgraph"))


def test_every_source_file_has_a_layer():
    placed = set().union(*LAYERS)
    assert {p.name for p in SRC.glob("*.c")} == placed


def test_no_call_goes_up_a_layer(edges):
    new = upward(edges, LAYERS) - PENDING.keys()
    assert not new, f"calls from a lower layer into a higher one: {sorted(new)}"


def test_pending_upward_calls_still_exist(edges):
    gone = PENDING.keys() - upward(edges, LAYERS)
    assert not gone, f"no longer called upward, take them off PENDING: {sorted(gone)}"


def test_an_upward_call_in_a_fixture_is_found(tmp_path):
    """Two files, a lower one calling the higher one (through an inline function of a header,
    so the edge comes from the compiler, not from reading the source)."""
    (tmp_path / "x.h").write_text(
        "int top(int);\nint low(int);\nstatic inline int via(int x) { return top(x); }\n"
    )
    (tmp_path / "low.c").write_text('#include "x.h"\nint low(int x) { return via(x) + 1; }\n')
    (tmp_path / "top.c").write_text('#include "x.h"\nint top(int x) { return x * 2; }\n')
    out = tmp_path / "out"
    out.mkdir()
    edges = callgraph([tmp_path / "low.c", tmp_path / "top.c"], out, include=tmp_path)
    assert upward(edges, [{"low.c"}, {"top.c"}]) == {("low.c", "top.c")}
    assert upward(edges, [{"top.c"}, {"low.c"}]) == set()
    # and the graph as a whole: a file of a layer may call down
    assert edges == {("low.c", "top.c")}
