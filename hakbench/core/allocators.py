"""Allocators a cell can run under: libhakmem's build variants, the Debian references, and
any shared library the user names by path.

A reference is swapped in by ``LD_PRELOAD`` of Debian's shared library; a missing one is
reported with the package that provides it, never guessed. ``expect_impl`` is what the
harness's ``malloc_impl=`` line must contain for a sample to count: it proves the process
really used the intended allocator (the harness prints, via dladdr, the path of the library
that defines ``malloc``; for command workloads hakbench.engine.hakrun checks /proc/PID/maps).

An allocator spec is a known name, a path (``-a ./libfoo.so``: anything with a ``/`` or
``.so`` in it) or ``NAME=PATH``. A path allocator is named by its file name unless named
explicitly; it is remembered for the rest of the process under that name, so cells, labels
and matrix coordinates carry the name and re-resolve it. A path that is not a readable file
is a UsageError (one line, exit 2).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from hakbench.core import paths
from hakbench.core.errors import UsageError

VARIANTS = ("fast", "stats", "debug", "secure", "pgo")  # pgo: fast + gcc profile feedback (pgo.mk)
LIB_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib", "/usr/local/lib")

# name -> (shared object, Debian package)
REFERENCES = {
    "mimalloc": ("libmimalloc.so.2", "libmimalloc2.0"),
    "jemalloc": ("libjemalloc.so.2", "libjemalloc2"),
    "tcmalloc": ("libtcmalloc_minimal.so.4", "libtcmalloc-minimal4"),
    # oneTBB's malloc replacement: the proxy library defines malloc and forwards to
    # libtbbmalloc.so.2 (same package).
    "tbbmalloc": ("libtbbmalloc_proxy.so.2", "libtbbmalloc2"),
}
KNOWN = ("hakmem", "system", *REFERENCES)


@dataclass(frozen=True)
class Allocator:
    name: str
    variant: str | None  # hakmem only
    preload: Path | None  # None: glibc, nothing preloaded
    expect_impl: str  # substring the harness's malloc_impl= must contain
    available: bool = True
    missing_reason: str | None = None

    @property
    def label(self) -> str:
        return f"{self.name}:{self.variant}" if self.variant else self.name


def find_library(soname: str) -> Path | None:
    for d in LIB_DIRS:
        p = Path(d) / soname
        if p.exists():
            return p
    return None


# Allocators given by path in this process: name -> Allocator (see the module doc).
_BY_PATH: dict[str, Allocator] = {}


def impl_marker(library: Path) -> str:
    """What ``malloc_impl=`` must contain for ``library``: its file name up to ``.so``."""
    return Path(library).name.split(".so")[0] + ".so"


def is_path_spec(spec: str) -> bool:
    return "=" in spec or "/" in spec or ".so" in spec


def _resolve_path_spec(spec: str) -> Allocator:
    name, eq, path_text = spec.partition("=")
    if not eq:
        name, path_text = "", spec
    name = name.strip().lower()
    path = Path(path_text.strip()).expanduser()
    if not path.is_file():
        raise UsageError(f"allocator library {path_text.strip()!r}: no such file")
    lib = path.resolve()
    name = name or path.name.lower()
    if name in KNOWN or name in ("glibc", "sys"):
        raise UsageError(
            f"allocator name '{name}' is taken by a known allocator; name it NAME=PATH"
        )
    if not re.fullmatch(r"[a-z0-9][a-z0-9._+-]*", name):
        raise UsageError(f"allocator name '{name}': use letters, digits, '.', '-', '_'")
    known = _BY_PATH.get(name)
    if known is not None and known.preload != lib:
        raise UsageError(f"two allocators named '{name}' ({known.preload}, {lib}); use NAME=PATH")
    _BY_PATH[name] = Allocator(name, None, lib, impl_marker(lib))
    return _BY_PATH[name]


def resolve_allocator(name: str, variant: str = "fast", build: Path | None = None) -> Allocator:
    """Resolve an allocator spec (name, PATH or NAME=PATH); unknown names raise UsageError
    listing the known ones, a missing library file raises UsageError."""
    key = name.strip().lower()
    if key in ("glibc", "sys"):
        key = "system"
    if key in _BY_PATH:
        return _BY_PATH[key]
    if key not in KNOWN and is_path_spec(name):
        return _resolve_path_spec(name)
    if key not in KNOWN:
        raise UsageError(
            f"unknown allocator '{name}'; known: {', '.join(KNOWN)}, or a library PATH / NAME=PATH"
        )
    if key == "system":
        return Allocator("system", None, None, "libc.so")
    if key == "hakmem":
        if variant not in VARIANTS:
            raise UsageError(f"unknown variant '{variant}'; known: {', '.join(VARIANTS)}")
        lib = (build or paths.build_dir()) / variant / "libhakmem.so"
        ok = lib.exists()
        return Allocator(
            "hakmem",
            variant,
            lib.resolve() if ok else lib,
            "libhakmem.so",
            ok,
            None if ok else f"{lib} not built (run `make build`)",
        )
    soname, package = REFERENCES[key]
    lib = find_library(soname)
    if lib is None:
        return Allocator(
            key, None, None, soname, False, f"{soname} not found (apt-get install {package})"
        )
    return Allocator(key, None, lib, impl_marker(lib))


def available_allocators(build: Path | None = None) -> list[Allocator]:
    return [resolve_allocator(n, build=build) for n in KNOWN]
