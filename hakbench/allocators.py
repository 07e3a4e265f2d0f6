"""Allocators a cell can run under: libhakmem's build variants and the Debian references.

A reference is swapped in by ``LD_PRELOAD`` of Debian's shared library; a missing one is
reported with the package that provides it, never guessed. ``expect_impl`` is what the
harness's ``malloc_impl=`` line must contain for a sample to count: it proves the process
really used the intended allocator.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hakbench import paths
from hakbench.errors import UsageError

VARIANTS = ("fast", "stats", "debug", "pgo")  # pgo: fast + gcc profile feedback (pgo.mk)
LIB_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib", "/usr/local/lib")

# name -> (shared object, Debian package)
REFERENCES = {
    "mimalloc": ("libmimalloc.so.2", "libmimalloc2.0"),
    "jemalloc": ("libjemalloc.so.2", "libjemalloc2"),
    "tcmalloc": ("libtcmalloc_minimal.so.4", "libtcmalloc-minimal4"),
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


def resolve_allocator(name: str, variant: str = "fast", build: Path | None = None) -> Allocator:
    """Resolve an allocator name; unknown names raise UsageError listing the known ones."""
    key = name.strip().lower()
    if key in ("glibc", "sys"):
        key = "system"
    if key not in KNOWN:
        raise UsageError(f"unknown allocator '{name}'; known: {', '.join(KNOWN)}")
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
    return Allocator(key, None, lib, soname.split(".so")[0] + ".so")


def available_allocators(build: Path | None = None) -> list[Allocator]:
    return [resolve_allocator(n, build=build) for n in KNOWN]
