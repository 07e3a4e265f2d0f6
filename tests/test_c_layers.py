"""libhakmem's call graph goes one way, as tests/test_imports.py keeps hakbench's imports:
a function calls functions of its own layer or of the layers below, never above. The graph
is the compiler's own: gcc's ``-fcallgraph-info`` writes, per translation unit, every
function it defines (node with its file and line) and every call it compiles (edge with the
call site), so a call through a macro or an inline function counts, and an include that is
never called does not.

The layers, bottom to top (issue #41: mimalloc's os -> segment -> page -> heap -> alloc/free).
An upward call fails the test; so does a memory system call made anywhere but in os.c, the
one file that talks to the kernel about memory."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "allocator" / "src"

LAYERS = [
    # errors, settings, counters, locks, size classes
    {"error.c", "options.c", "stats.c", "lock.c", "sizeclass.c"},
    {"os.c"},  # memory system calls and the clock
    # segments: the arena (empty superslabs cached, purge deadlines), superslabs, large regions
    {"arena.c", "superslab.c", "large.c"},
    {"page.c"},  # pages and their free lists; abandoned superslabs' pages collected
    # per-thread heaps, the heap's purges and trim, routing by size, zero-size blocks
    {"heap.c", "heaplarge.c", "purge.c", "route.c", "zero.c"},
    {"front.c"},  # the fronts' refill paths
    {"init.c", "report.c"},  # process and thread start and exit, the stats printed at exit
    {"wrappers.c", "cxx.c"},  # the malloc API and the C++ operators
]

# Each layer's header (the functions it offers the layers above; it includes the one below).
# The base headers (types.h, error.h, options.h, stats.h, lock.h, sizeclass.h) are layer 0.
LAYER_HEADERS = ["types.h", "os.h", "segment.h", "page.h", "heap.h", "front.h", "init.h", "api.h"]
INCLUDE = re.compile(r'^#include "([^"]+)"', re.M)

# the memory system calls: only os.c makes them
SYSCALLS = {"mmap", "mmap64", "munmap", "mremap", "madvise", "mprotect", "brk", "sbrk"}

NODE = re.compile(
    r'node: \{ title: "([^"]+)" label: "[^"\\]*\\n([^:"]+):\d+:\d+"( shape : ellipse)? \}'
)
EDGE = re.compile(r'edge: \{ sourcename: "([^"]+)" targetname: "([^"]+)"')


# Each build compiles other code (hot-path counters and their printer, the debug checks, the
# secure build's checks): the graph is the union of every variant's.
VARIANT_DEFINES = ([], ["-DHAK_STATS_HOT=1", "-DHAK_DEBUG=1"], ["-DHAK_SECURE=1"])


def compile_graph(sources: list[Path], out: Path, include: Path = SRC, variants=VARIANT_DEFINES):
    """gcc -fcallgraph-info over ``sources`` (-O0: the calls as written, none inlined away), once
    per variant: {function: the .c file defining it} and [(caller, callee, the unit compiling
    the call)]."""
    defined: dict[str, str] = {}
    calls: list[tuple[str, str, str]] = []
    for defines in variants:
        for src in sources:
            r = subprocess.run(
                ["gcc", "-std=c11", "-D_GNU_SOURCE", "-O0", *defines, f"-I{include}",
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
    return defined, calls


def edges_of(defined: dict[str, str], calls) -> set[tuple[str, str]]:
    """(caller's file, callee's file) for every call between two files; a call made inside a
    header's inline function counts for the unit that compiles it."""
    edges = set()
    for caller, callee, unit in calls:
        a, b = defined.get(caller, unit), defined.get(callee)
        if a and b and a != b:
            edges.add((a, b))
    return edges


def system_calls_of(defined: dict[str, str], calls) -> set[tuple[str, str]]:
    """(the file that makes it, the call) for every memory system call."""
    return {(defined.get(a, unit), b) for a, b, unit in calls if b in SYSCALLS and b not in defined}


def callgraph(sources: list[Path], out: Path, include: Path = SRC) -> set[tuple[str, str]]:
    return edges_of(*compile_graph(sources, out, include))


def upward(edges: set[tuple[str, str]], layers: list[set[str]]) -> set[tuple[str, str]]:
    """The edges whose callee sits in a higher layer than its caller."""
    level = {f: i for i, layer in enumerate(layers) for f in layer}
    return {(a, b) for a, b in edges if a in level and b in level and level[b] > level[a]}


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    return compile_graph(sorted(SRC.glob("*.c")), tmp_path_factory.mktemp("callgraph"))


@pytest.fixture(scope="module")
def edges(graph):
    return edges_of(*graph)


def test_every_source_file_has_a_layer():
    placed = set().union(*LAYERS)
    assert {p.name for p in SRC.glob("*.c")} == placed


def header_layer(name: str) -> int:
    return LAYER_HEADERS.index(name) if name in LAYER_HEADERS else 0


def headers_above(source: Path, layers=LAYERS) -> list[str]:
    """The headers ``source`` includes that belong to a layer above its own."""
    level = {f: i for i, layer in enumerate(layers) for f in layer}[source.name]
    included = INCLUDE.findall(source.read_text())
    return [h for h in included if header_layer(Path(h).name) > level]


def test_each_file_includes_no_header_above_its_layer():
    above = {p.name: headers_above(p) for p in sorted(SRC.glob("*.c"))}
    assert not {f: h for f, h in above.items() if h}, above


def test_a_header_above_the_layer_is_found(tmp_path):
    (tmp_path / "page.c").write_text('#include "heap.h"\nint x;\n')
    assert headers_above(tmp_path / "page.c") == ["heap.h"]
    (tmp_path / "page.c").write_text('#include "segment.h"\n#include "types.h"\n')
    assert headers_above(tmp_path / "page.c") == []


def test_no_call_goes_up_a_layer(edges):
    up = upward(edges, LAYERS)
    assert not up, f"calls from a lower layer into a higher one: {sorted(up)}"


def test_only_os_c_makes_memory_system_calls(graph):
    made = system_calls_of(*graph)
    assert {call for _, call in made} >= {"mmap", "munmap", "mremap", "madvise", "mprotect"}
    elsewhere = sorted(f"{file}: {call}" for file, call in made if file != "os.c")
    assert not elsewhere, f"memory system calls outside os.c: {elsewhere}"


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


def test_a_system_call_outside_os_c_is_found(tmp_path):
    """A file that maps memory itself, through a header's inline function, is seen."""
    (tmp_path / "x.h").write_text(
        "#include <sys/mman.h>\n"
        "static inline void *grab(void) { return mmap(0, 4096, PROT_READ, "
        "MAP_PRIVATE | MAP_ANONYMOUS, -1, 0); }\n"
    )
    (tmp_path / "low.c").write_text('#include "x.h"\nvoid *low(void) { return grab(); }\n')
    out = tmp_path / "out"
    out.mkdir()
    assert system_calls_of(*compile_graph([tmp_path / "low.c"], out, include=tmp_path)) == {
        ("low.c", "mmap")
    }
