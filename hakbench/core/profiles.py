"""Profiles (named HAKMEM_* env sets with ``extends``) and workloads, from profiles/*.toml.

A profile file: ``name``, optional ``extends`` (another profile's name), ``description`` and
an ``[env]`` table. ``profiles/workloads.toml``: one table per workload. A harness workload
has ``program``, ``args``, ``description``, optional ``threads`` and ``iters_flag`` (the
argument that sets the iteration count, zeroed for a start-up-only run); a command workload
(``kind = "command"``, a real program) is described in hakbench.core.commandspec. Any workload
may list ``groups``; ``-w @NAME`` stands for every workload in group NAME (``expand_workloads``).
Names match case-insensitively. A public suite's programs are command workloads declared in
``profiles/suites/<suite>.toml`` beside workloads.toml (``load_suite_workloads``).
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from hakbench.core import paths
from hakbench.core.commandspec import CommandSpec, parse_command
from hakbench.core.errors import UsageError

HARNESS_KEYS = {"kind", "program", "args", "description", "threads", "iters_flag", "groups"}


@dataclass(frozen=True)
class Profile:
    name: str
    description: str
    extends: str | None
    env: dict
    path: Path


@dataclass(frozen=True)
class ResolvedProfile:
    name: str
    chain: tuple[str, ...]  # root ancestor first, this profile last
    env: dict  # merged: later profiles override earlier ones
    sources: dict  # env key -> name of the profile that set it
    description: str


@dataclass(frozen=True)
class Workload:
    name: str
    program: str
    args: tuple[str, ...]
    description: str
    threads: int = 1
    iters_flag: str | None = None
    groups: tuple[str, ...] = ()
    command: CommandSpec | None = None  # a command workload (a real program), else harness
    suite: str | None = None  # the public suite whose built program this runs (core.suites)

    @property
    def primary_metric(self) -> str:
        """What judges this workload: the harness's throughput, or the command's time/rate."""
        return self.command.metric if self.command else "throughput"

    def zero_args(self) -> tuple[str, ...]:
        """The same arguments with the iteration count set to 0 (start-up cost only)."""
        if not self.iters_flag or self.iters_flag not in self.args:
            raise UsageError(f"workload '{self.name}' has no iters_flag to zero")
        a = list(self.args)
        a[a.index(self.iters_flag) + 1] = "0"
        return tuple(a)


def closest(name: str, candidates: Iterable[str]) -> str | None:
    m = difflib.get_close_matches(name, list(candidates), n=1, cutoff=0.0)
    return m[0] if m else None


def _load_toml(path: Path) -> dict:
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except tomllib.TOMLDecodeError as e:
        raise UsageError(f"{path}: malformed TOML: {e}") from None


def load_profiles(directory: Path | None = None) -> dict[str, Profile]:
    """Every ``*.toml`` in ``directory`` except workloads.toml, keyed by upper-case name."""
    directory = directory or paths.profiles_dir()
    out: dict[str, Profile] = {}
    for path in sorted(directory.glob("*.toml")):
        if path.name == "workloads.toml":
            continue
        data = _load_toml(path)
        name = str(data.get("name") or path.stem).upper()
        env = data.get("env", {})
        if not isinstance(env, dict):
            raise UsageError(f"{path}: [env] must be a table")
        if name in out:
            raise UsageError(f"{path}: profile {name} already defined in {out[name].path}")
        ext = data.get("extends")
        out[name] = Profile(
            name,
            str(data.get("description", "")),
            str(ext).upper() if ext else None,
            {str(k): _env_value(v) for k, v in env.items()},
            path,
        )
    return out


def _env_value(v) -> str:
    if isinstance(v, bool):
        return "1" if v else "0"
    return str(v)


def resolve_profile(name: str, profiles: Mapping[str, Profile] | None = None) -> ResolvedProfile:
    """Merge the ``extends`` chain; unknown names and cycles raise UsageError."""
    profiles = profiles if profiles is not None else load_profiles()
    key = name.upper()
    chain: list[str] = []
    while key is not None:
        if key not in profiles:
            known = ", ".join(sorted(profiles))
            where = f" (extended by {chain[-1]})" if chain else ""
            raise UsageError(f"unknown profile '{key}'{where}; known: {known}")
        if key in chain:
            raise UsageError("profile extends cycle: " + " -> ".join([*chain, key]))
        chain.append(key)
        key = profiles[key].extends
    chain.reverse()
    env: dict = {}
    sources: dict = {}
    for p in chain:
        for k, v in profiles[p].env.items():
            env[k] = v
            sources[k] = p
    return ResolvedProfile(chain[-1], tuple(chain), env, sources, profiles[chain[-1]].description)


def parse_sets(sets: Iterable[str]) -> dict:
    """``--set KEY=VALUE`` items -> dict; a malformed item raises UsageError."""
    out = {}
    for item in sets:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise UsageError(f"--set expects KEY=VALUE, got '{item}'")
        out[key.strip()] = value.strip()
    return out


def _groups(w: dict, where: str) -> tuple[str, ...]:
    groups = w.get("groups", [])
    if not isinstance(groups, list) or not all(isinstance(g, str) and g for g in groups):
        raise UsageError(f"{where}: groups must be a list of names")
    return tuple(g.lower() for g in groups)


def parse_workload(name: str, w, where: str) -> Workload:
    """One table of workloads.toml -> Workload; unknown keys and bad values raise UsageError."""
    if not isinstance(w, dict):
        raise UsageError(f"{where}: workload '{name}' must be a table")
    where = f"{where}: workload '{name}'"
    kind = w.get("kind", "harness")
    groups = _groups(w, where)
    threads = w.get("threads", 1)
    if not isinstance(threads, int) or isinstance(threads, bool) or threads < 1:
        raise UsageError(f"{where}: threads must be a positive integer")
    if kind == "command":
        cmd = parse_command(w, where)
        return Workload(
            name.lower(),
            cmd.argv[0] if cmd.server is None else cmd.server[0],
            cmd.argv,
            str(w.get("description", "")),
            threads,
            None,
            groups,
            cmd,
        )
    if kind != "harness":
        raise UsageError(f"{where}: kind must be harness or command, got {kind!r}")
    unknown = sorted(set(w) - HARNESS_KEYS)
    if unknown:
        raise UsageError(
            f"{where}: unknown key(s) {', '.join(unknown)}; known: {sorted(HARNESS_KEYS)}"
        )
    if "program" not in w:
        raise UsageError(f"{where} needs a program")
    return Workload(
        name.lower(),
        str(w["program"]),
        tuple(str(a) for a in w.get("args", [])),
        str(w.get("description", "")),
        threads,
        w.get("iters_flag"),
        groups,
    )


def load_workloads(path: Path | None = None) -> dict[str, Workload]:
    """workloads.toml's workloads, then those of every suite in ``suites/`` beside it."""
    path = path or paths.profiles_dir() / "workloads.toml"
    out = {name.lower(): parse_workload(name, w, str(path)) for name, w in _load_toml(path).items()}
    for suite_file in sorted((path.parent / "suites").glob("*.toml")):
        for name, w in load_suite_workloads(suite_file).items():
            if name in out:
                raise UsageError(f"{suite_file}: workload '{name}' is already defined")
            out[name] = w
    return out


def machine_procs() -> int:
    """The CPUs this process may run on (``nproc``): what mimalloc-bench's bench.sh calls
    ``procs`` and scales its thread counts by."""
    return len(os.sched_getaffinity(0))


def _with_procs(value, procs: int):
    if isinstance(value, str):
        return value.replace("{procs}", str(procs))
    if isinstance(value, list):
        return [_with_procs(v, procs) for v in value]
    return value


SUITE_DEFAULTS = ("warmup", "wait_for", "guardrails")


def load_suite_workloads(path: Path, procs: int | None = None) -> dict[str, Workload]:
    """A suite file: ``[suite]`` (``name``, ``description``, ``repo``, ``commit``, and
    ``SUITE_DEFAULTS``: keys every workload that states none takes) and one
    ``[workloads.NAME]`` command workload per program. Their argv may use ``{suite}`` (the
    checkout) and ``{suite_build}`` (the lab's build of it), bound when a cell is made
    (hakbench.engine.suite_build.bind_workload), and ``{procs}``, replaced here by the machine's
    CPU count (``threads = "{procs}"`` too). Every workload joins the group named after the
    suite (one workload per program), but one with ``alternative_to = "OTHER"`` (another run
    length of the program OTHER stands for) joins ``<suite>-alternatives`` instead."""
    data = _load_toml(path)
    head = data.get("suite")
    if not isinstance(head, dict) or not isinstance(head.get("name"), str):
        raise UsageError(f"{path}: a suite file needs [suite] with a name")
    unknown = sorted(set(data) - {"suite", "workloads"})
    if unknown:
        raise UsageError(f"{path}: unknown table(s) {', '.join(unknown)}; known: suite, workloads")
    suite = head["name"].lower()
    procs = procs or machine_procs()
    tables = data.get("workloads", {})
    out = {}
    for name, w in tables.items():
        if not isinstance(w, dict) or w.get("kind", "command") != "command":
            raise UsageError(f"{path}: workload '{name}' must be a command workload table")
        table = {k: _with_procs(v, procs) for k, v in w.items()}
        table["kind"] = "command"
        if table.get("threads") == str(procs):
            table["threads"] = procs
        for key in SUITE_DEFAULTS:
            if key in head:
                table.setdefault(key, head[key])
        group = suite
        other = table.pop("alternative_to", None)
        if other is not None:
            if other not in tables or "alternative_to" in tables[other]:
                raise UsageError(
                    f"{path}: workload '{name}': alternative_to must name a workload of the "
                    f"suite's group, not '{other}'"
                )
            group = f"{suite}-alternatives"
        table["groups"] = [group, *[g for g in table.get("groups", []) if g != group]]
        wl = parse_workload(name, table, str(path))
        out[wl.name] = dataclasses.replace(wl, suite=suite)
    return out


def workload_groups(workloads: Mapping[str, Workload]) -> dict[str, list[str]]:
    """group -> its workloads' names, in file order."""
    out: dict[str, list[str]] = {}
    for w in workloads.values():
        for g in w.groups:
            out.setdefault(g, []).append(w.name)
    return out


def expand_workloads(
    names: Iterable[str], workloads: Mapping[str, Workload] | None = None
) -> list[str]:
    """``-w`` values -> workload names: ``@GROUP`` expands to its members (file order),
    duplicates are dropped; an unknown group or workload raises UsageError."""
    workloads = workloads if workloads is not None else load_workloads()
    groups = workload_groups(workloads)
    out: list[str] = []
    for name in names:
        if name.startswith("@"):
            group = name[1:].lower()
            if group not in groups:
                known = ", ".join(f"@{g}" for g in sorted(groups)) or "none"
                if group == "misuse":  # probes that die on purpose: no sample to judge
                    raise UsageError(
                        "the heap-misuse probes are no workloads (a probe that dies is a "
                        f"result, not a failed sample): run `hakbench misuse`; groups: {known}"
                    )
                raise UsageError(f"unknown workload group '{name}'; known groups: {known}")
            members = groups[group]
        else:
            members = [resolve_workload(name, workloads).name]
        out += [m for m in members if m not in out]
    return out


def resolve_workload(name: str, workloads: Mapping[str, Workload] | None = None) -> Workload:
    workloads = workloads if workloads is not None else load_workloads()
    key = name.lower()
    if key.startswith("@"):
        raise UsageError(f"'{name}' is a group: this takes one workload")
    if key not in workloads:
        raise UsageError(f"unknown workload '{name}'; known: {', '.join(sorted(workloads))}")
    return workloads[key]


def validate_env(env: Mapping[str, str], options: Iterable[dict], where: str = "") -> None:
    """Every ``HAKMEM_*`` key must be a row of the options table, and enum values allowed."""
    table = {o["name"]: o for o in options}
    for key, value in env.items():
        if not key.startswith("HAKMEM_") or key.startswith("HAKMEM_BENCH_"):
            continue
        loc = f" in {where}" if where else ""
        if key not in table:
            hint = closest(key, table)
            raise UsageError(
                f"unknown option {key}{loc}" + (f"; did you mean {hint}?" if hint else "")
            )
        allowed = table[key].get("values")
        if allowed and str(value).upper() not in {str(a).upper() for a in allowed}:
            raise UsageError(f"{key}={value}{loc}: allowed values are {', '.join(allowed)}")
        kind = table[key].get("type")
        if kind in VALUE_FORMS and not VALUE_FORMS[kind][0].fullmatch(str(value).strip()):
            raise UsageError(f"{key}={value}{loc}: not a valid {kind} ({VALUE_FORMS[kind][1]})")


# What libhakmem's option parser (allocator/src/options.c, parse_value) accepts for each type
# of the options table; anything else it replaces by the default with only a warning on the
# measured process's stderr, so a run would be labelled with a value it never had.
VALUE_FORMS = {
    "bool": (
        re.compile(r"(?i)1|0|on|off|yes|no|true|false"),
        "1/0, on/off, yes/no or true/false",
    ),
    "int": (
        re.compile(r"[+-]?(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)"),
        "an integer: decimal, 0x hex or 0 octal",
    ),
    "size": (
        re.compile(r"\+?[0-9]+([kKmMgG][iI]?)?[bB]?"),
        "a byte count, optionally with K, M or G (KiB, MB ...)",
    ),
}


def scaled_workload(workload: Workload, scale: float) -> Workload:
    """The workload with its iteration count (``iters_flag``) multiplied by ``scale``."""
    if not workload.iters_flag or workload.iters_flag not in workload.args:
        raise UsageError(f"workload '{workload.name}' has no iters_flag: its length is fixed")
    args = list(workload.args)
    i = args.index(workload.iters_flag) + 1
    args[i] = str(max(1, round(int(args[i]) * scale)))
    return dataclasses.replace(workload, args=tuple(args))
