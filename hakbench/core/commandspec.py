"""Command workloads: real programs declared in profiles/workloads.toml, parsed and checked.

A command workload is a table with ``kind = "command"``::

    [sqlite]
    kind = "command"
    groups = ["apps"]
    description = "..."
    argv = ["sqlite3", ":memory:"]           # the program; {input}, {dir}, {port} expand
    stdin = "{input}"                        # optional: a file fed on stdin
    input = { generator = "sql", rows = 40000 }   # optional: hakbench.core.inputs generator
    env = { PERL_HASH_SEED = "0" }           # optional: added to the clean environment
    cwd = "{dir}"                            # optional: default the run's scratch dir
    timeout = 60                             # optional: seconds, overrides the caller's
    measure = "wall"                         # "wall" (default) | "cpu" | a regex table
    check = { output = "stdout", substitute = [["[0-9.]+ ms", "N ms"]] }
    guardrails = ["maxrss_kb", "page_faults"]   # optional: judged beside the primary
    budget = 60                              # optional: seconds of A/B pairs it needs
    warmup = 1                               # optional: discarded warm-up pairs it needs
    wait_for = ["maxrss_kb"]                 # optional: guardrails a sequential stop waits for

``measure``: ``"wall"`` judges the process's wall time (metric ``wall_s``), ``"cpu"`` its
user + system time with every reaped child (``cpu_s``), and ``{ regex = "...", kind =
"rate" | "time" }`` the first group of a regex on stdout (``app_rate``, higher is better;
``app_time_s``, lower is better). ``check``: the program's stdout, or a file it writes
(a path relative to ``{dir}``), after the ``substitute`` regex replacements, must hash to
what the same workload printed under glibc; no ``check`` means no output check.
``guardrails``: the metrics an A/B judges beside the primary one (default: every metric of
hakbench.core.metrics.GUARDRAILS the run has). ``budget``: the seconds of interleaved pairs
the workload needs to reach a verdict here; ``ab``'s default ``--max-time`` is the sum over
the workloads asked for (at least its usual default). ``warmup``: the discarded pairs it
needs first (a fresh process per run has little to warm: a public suite's programs state 1);
``ab``'s default ``--warmup`` is the largest stated when every workload of the call states one.
``wait_for``: guardrails (of ``guardrails``) whose verdicts a sequential ``ab`` waits for
before it stops the workload: its primary, once decided, is held at that verdict while the
pairs go on until these are decisive too (or the budget ends).

A server workload adds ``server`` (the measured process: preloaded, its rusage and RSS
recorded), ``ready`` (a command run until it exits 0, with ``ready_expect`` in its stdout)
and ``stop`` (a command that asks the server to exit); ``argv`` is then the client, run
under glibc and not measured, whose stdout the check and a regex read. hakbench picks a
free port on 127.0.0.1 for ``{port}``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from hakbench.core.errors import UsageError
from hakbench.core.inputs import check_input_spec
from hakbench.core.metrics import GUARDRAILS

MEASURES = {"wall": "wall_s", "cpu": "cpu_s"}
REGEX_KINDS = {"rate": "app_rate", "time": "app_time_s"}
KEYS = {
    "kind",
    "description",
    "groups",
    "threads",
    "argv",
    "stdin",
    "input",
    "env",
    "cwd",
    "timeout",
    "measure",
    "check",
    "server",
    "ready",
    "ready_expect",
    "stop",
    "guardrails",
    "budget",
    "warmup",
    "wait_for",
}
PLACEHOLDERS = ("{input}", "{dir}", "{port}")


@dataclass(frozen=True)
class CommandSpec:
    argv: tuple[str, ...]
    metric: str  # the primary metric: wall_s | cpu_s | app_rate | app_time_s
    stdin: str | None = None
    input: dict | None = None
    env: dict = field(default_factory=dict)
    cwd: str = "{dir}"
    timeout: float | None = None
    regex: str | None = None
    check_output: str | None = None  # "stdout" or a path relative to {dir}
    substitute: tuple[tuple[str, str], ...] = ()
    server: tuple[str, ...] | None = None
    ready: tuple[str, ...] | None = None
    ready_expect: str = ""
    stop: tuple[str, ...] | None = None
    guardrails: tuple[str, ...] | None = None  # None: hakbench.core.metrics.GUARDRAILS
    budget: float | None = None  # seconds of A/B pairs this workload needs
    warmup: int | None = None  # discarded warm-up pairs this workload needs
    wait_for: tuple[str, ...] = ()  # guardrails a sequential stop waits for

    def parse_metric(self, output: str) -> float | None:
        """The number the measure regex captures in the program's output (its first match;
        thousands separators dropped); None without a regex or a match."""
        if not self.regex:
            return None
        m = re.search(self.regex, output, re.MULTILINE)
        if not m:
            return None
        try:
            return float(m.group(1).replace(",", ""))
        except ValueError:
            return None

    @property
    def uses_port(self) -> bool:
        return self.server is not None

    def fingerprint(self) -> list:
        """Everything that changes what the program does, for cell keys and reference hashes."""
        return [
            self.argv,
            self.stdin,
            sorted((self.input or {}).items()),
            sorted(self.env.items()),
            self.cwd,
            self.check_output,
            self.substitute,
            self.server,
        ]


def _argv(value, key: str, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not value or not all(isinstance(a, str) for a in value):
        raise UsageError(f"{where}: {key} must be a non-empty list of strings")
    return tuple(value)


def _regex(pattern, where: str) -> str:
    try:
        re.compile(pattern)
    except (re.error, TypeError) as e:
        raise UsageError(f"{where}: bad regex {pattern!r}: {e}") from None
    return pattern


def _measure(measure, where: str) -> tuple[str, str | None]:
    """The ``measure`` key -> (the metric, the regex that reads it from stdout or None)."""
    if isinstance(measure, str):
        if measure not in MEASURES:
            raise UsageError(
                f"{where}: measure must be one of {', '.join(MEASURES)} or a regex table"
            )
        return MEASURES[measure], None
    if not isinstance(measure, dict):
        raise UsageError(f"{where}: measure must be a string or a table")
    extra = sorted(set(measure) - {"regex", "kind"})
    if extra or measure.get("kind") not in REGEX_KINDS or "regex" not in measure:
        raise UsageError(f"{where}: measure table needs regex and kind = {' | '.join(REGEX_KINDS)}")
    regex = _regex(measure["regex"], where)
    if re.compile(regex).groups < 1:
        raise UsageError(f"{where}: measure regex needs a group capturing the number")
    return REGEX_KINDS[measure["kind"]], regex


def _check(check, where: str) -> tuple[str | None, tuple]:
    """The ``check`` key -> (the output to compare, its substitutions)."""
    if check is None:
        return None, ()
    if not isinstance(check, dict) or not isinstance(check.get("output"), str):
        raise UsageError(f'{where}: check must be a table with output = "stdout" or a path')
    extra = sorted(set(check) - {"output", "substitute"})
    if extra:
        raise UsageError(f"{where}: unknown check key(s) {', '.join(extra)}")
    pairs = check.get("substitute", [])
    if not isinstance(pairs, list) or not all(
        isinstance(p, list) and len(p) == 2 and all(isinstance(x, str) for x in p) for p in pairs
    ):
        raise UsageError(f"{where}: check.substitute must be a list of [regex, replacement]")
    return check["output"], tuple((_regex(p, where), r) for p, r in pairs)


def parse_command(table: dict, where: str) -> CommandSpec:
    """A command workload's table -> CommandSpec; the first problem raises UsageError."""
    unknown = sorted(set(table) - KEYS)
    if unknown:
        raise UsageError(f"{where}: unknown key(s) {', '.join(unknown)}; known: {sorted(KEYS)}")
    if "argv" not in table:
        raise UsageError(f"{where}: a command workload needs argv")
    argv = _argv(table["argv"], "argv", where)
    inp = table.get("input")
    if inp is not None:
        if not isinstance(inp, dict):
            raise UsageError(f"{where}: input must be a table {{ generator = NAME, ... }}")
        check_input_spec(inp, where)
    env = table.get("env", {})
    if not isinstance(env, dict) or not all(isinstance(v, str | int) for v in env.values()):
        raise UsageError(f"{where}: env must be a table of strings")
    timeout = table.get("timeout")
    if timeout is not None and (not isinstance(timeout, int | float) or timeout <= 0):
        raise UsageError(f"{where}: timeout must be a positive number of seconds")
    metric, regex = _measure(table.get("measure", "wall"), where)
    check_output, substitute = _check(table.get("check"), where)
    guardrails = table.get("guardrails")
    if guardrails is not None and (
        not isinstance(guardrails, list) or not all(g in GUARDRAILS for g in guardrails)
    ):
        raise UsageError(f"{where}: guardrails must be a list of {', '.join(GUARDRAILS)}")
    budget = table.get("budget")
    if budget is not None and (not isinstance(budget, int | float) or budget <= 0):
        raise UsageError(f"{where}: budget must be a positive number of seconds")
    warmup = table.get("warmup")
    if warmup is not None and (
        isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0
    ):
        raise UsageError(f"{where}: warmup must be a whole number of pairs (0 or more)")
    wait_for = table.get("wait_for", [])
    if not isinstance(wait_for, list) or not all(g in (guardrails or ()) for g in wait_for):
        raise UsageError(f"{where}: wait_for must be a list of the workload's guardrails")
    server = table.get("server")
    server_keys = [k for k in ("server", "ready", "stop") if k in table]
    if server_keys and len(server_keys) != 3:
        raise UsageError(f"{where}: a server workload needs server, ready and stop together")
    if server is not None:
        server = _argv(server, "server", where)
    spec = CommandSpec(
        argv=argv,
        metric=metric,
        stdin=table.get("stdin"),
        input=dict(inp) if inp else None,
        env={str(k): str(v) for k, v in env.items()},
        cwd=str(table.get("cwd", "{dir}")),
        timeout=float(timeout) if timeout is not None else None,
        regex=regex,
        check_output=check_output,
        substitute=substitute,
        server=server,
        ready=_argv(table["ready"], "ready", where) if server else None,
        ready_expect=str(table.get("ready_expect", "")),
        stop=_argv(table["stop"], "stop", where) if server else None,
        guardrails=tuple(guardrails) if guardrails is not None else None,
        budget=float(budget) if budget is not None else None,
        warmup=warmup,
        wait_for=tuple(wait_for),
    )
    texts = [*spec.argv, spec.stdin or "", spec.cwd, *(spec.server or ())]
    if any("{input}" in t for t in texts) and spec.input is None:
        raise UsageError(f"{where}: uses {{input}} but declares no input generator")
    if any("{port}" in t for t in texts) and spec.server is None:
        raise UsageError(f"{where}: uses {{port}} but is not a server workload")
    return spec
