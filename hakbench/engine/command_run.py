"""One sample of a command workload: a real program under an allocator, measured and checked.

What is measured, and how (the same in ``run``, ``ab`` and ``matrix``):

- The program runs through hakrun (hakbench/native/hakrun.c), which forks it, sets
  ``LD_PRELOAD`` in the child only, and wait4s it. ``wall_s`` is hakrun's fork-to-reap
  time; ``user_s``/``sys_s``/``cpu_s`` and faults are wait4's rusage, which covers the
  program and every child it reaped (gcc's cc1 and as); ``maxrss_kb`` is wait4's ru_maxrss:
  the largest peak RSS of any single process of that tree, never a sum, and not inflated
  by hakbench's own Python (hakrun is a small C program, see its header).
- The preload check: hakprobe.so is preloaded just ahead of the allocator; its constructor
  writes the path of the library that defines the program's ``malloc`` (dlsym + dladdr,
  as the harness's ``malloc_impl=`` line) to a file, kept as ``process.malloc_impl``. With
  an allocator preloaded the sample is ``wrong_allocator`` unless that path names it. This
  is race-free for programs of any length (an earlier /proc/PID/maps poll missed 1 of 2
  runs of a 10 ms program on the loaded VM) and proves more: that malloc resolves to the
  library, not only that it is mapped. Under "system" nothing is preloaded, so the
  program's own linkage decides and is only recorded: Debian's redis-server links
  libjemalloc, so its "system" runs use jemalloc.
- The output check: stdout or a file the program wrote, after the workload's regex
  substitutions, is hashed (sha256) and compared with the hash of one run of the same
  workload under glibc (computed once and cached in ``build/reference/``, keyed by the
  workload's definition, its input and the program binary). A mismatch makes a
  ``wrong_output`` sample: it never counts as a number.
- A server workload (redis): hakbench picks a free port on 127.0.0.1, starts the server
  through hakrun with the allocator preloaded, runs ``ready`` until it answers, runs the
  client (``argv``, glibc, not measured), runs ``stop`` (e.g. ``SHUTDOWN NOSAVE``), and waits
  for the server to exit (killing its process group after 15 s). The server's rusage and
  peak RSS are the sample's numbers; the client's stdout is what the check and a measure
  regex read.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import socket
import tempfile
import time
from pathlib import Path

from hakbench.core.inputs import input_key, input_path
from hakbench.core.procenv import clean_env
from hakbench.engine.hakrun import hakprobe_library, hakrun_binary, parse_report, report_metrics
from hakbench.engine.process import (
    DEVNULL,
    kill_group,
    new_sample,
    signal_name,
    spawn,
    tail,
    wait_group,
)
from hakbench.engine.process import run as run_tool
from hakbench.engine.reference import cache_key, cached, program_identity

SERVER_READY_S = 20.0  # how long a server may take to answer ``ready``
SERVER_EXIT_S = 15.0  # how long it may take to exit after ``stop``
# What a command run cannot measure: perf's counters (it never runs under perf).
UNAVAILABLE = ("task_clock_ms", "cpu_migrations", "cycles", "instructions", "branch_misses", "ipc")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (bind to port 0, read, close)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _expand(text: str, values: dict) -> str:
    for key, value in values.items():
        text = text.replace("{" + key + "}", str(value))
    return text


def normalised_hash(data: bytes, substitute) -> str:
    """sha256 of ``data`` after the regex substitutions (applied to its latin-1 text)."""
    if substitute:
        text = data.decode("latin-1")
        for pattern, repl in substitute:
            text = re.sub(pattern, repl, text, flags=re.MULTILINE)
        data = text.encode("latin-1")
    return hashlib.sha256(data).hexdigest()


def reference_key(workload) -> str:
    spec = workload.command
    parts = [
        spec.fingerprint(),
        input_key(spec.input) if spec.input else None,
        program_identity((spec.server or spec.argv)[0]),
        program_identity(spec.argv[0]),
    ]
    return cache_key(workload.name, parts)


def reference_hash(workload, timeout: float) -> tuple[str | None, str | None]:
    """(hash of the output under glibc, error) for ``workload``, cached per definition."""
    from hakbench.engine.cells import make_cell

    def under_glibc():
        cell = make_cell("system", workload)
        sample = run_command_sample(cell, phase="reference", timeout=timeout)
        if sample["status"] != "ok" or not sample.get("output_sha256"):
            why = sample["error"] or sample["status"]
            return None, f"reference run under glibc failed: {why}"
        return {"output_sha256": sample["output_sha256"], "seconds": sample["wall_s"]}, None

    ref, error = cached(reference_key(workload), under_glibc)
    return (ref["output_sha256"] if ref else None), error


def _start(argv, *, report: Path, preload, env, cwd, stdin, out, err):
    preload = ":".join(str(p) for p in (hakprobe_library(), preload) if p)
    full = [str(hakrun_binary()), str(report), preload, "--", *argv]
    return spawn(full, env, cwd=cwd, stdin=stdin, stdout=out, stderr=err)


def _wait_ready(spec, values, env, server) -> str | None:
    """None once ``ready`` answers; else why not."""
    deadline = time.monotonic() + SERVER_READY_S
    argv = [_expand(a, values) for a in spec.ready]
    while time.monotonic() < deadline:
        if server.poll() is not None:
            return f"server exited before it was ready (hakrun status {server.returncode})"
        r = run_tool(argv, env=env, timeout=5)
        if r.ok and spec.ready_expect in r.stdout:
            return None
        time.sleep(0.05)
    return f"server not ready after {SERVER_READY_S:g} s"


def _run_server(spec, sample, values, run, timeout) -> tuple[bytes, str | None, bool]:
    """Start the server, drive it with the client, stop it. -> (client stdout, error,
    timed out). The server's hakrun report is written to run["report"]."""

    plain_env = run["plain_env"]
    server_argv = [_expand(a, values) for a in spec.server]
    sample["argv"] = server_argv
    with open(run["out"], "wb") as out, open(run["err"], "wb") as err:
        proc = _start(server_argv, stdin=DEVNULL, out=out, err=err, **run["start"])
    try:
        why = _wait_ready(spec, values, plain_env, proc)
        if why:
            return b"", why, False
        client = [_expand(a, values) for a in spec.argv]
        cwd = run["start"]["cwd"]
        r = run_tool(client, env=plain_env, cwd=cwd, timeout=timeout, text=False)
        if r.error is not None:
            raise OSError(r.error)
        if r.timed_out:
            return b"", f"client timed out after {timeout:g} s", True
        sample["client"] = {
            "argv": client,
            "returncode": r.returncode,
            "wall_s": r.wall_s,
            "stderr_tail": r.stderr.decode(errors="replace")[-500:],
        }
        run_tool([_expand(a, values) for a in spec.stop], env=plain_env, timeout=10)
        _, _, timed_out = wait_group(proc, SERVER_EXIT_S)
        if timed_out:
            return r.stdout, f"server did not exit {SERVER_EXIT_S:g} s after stop", True
        if r.returncode != 0:
            return r.stdout, f"client exit status {r.returncode}", False
        return r.stdout, None, False
    finally:
        if proc.returncode is None:
            kill_group(proc)


def run_command_sample(cell, *, phase: str = "measure", timeout: float = 120.0, stats=False):
    """One sample of a command workload cell; never raises for a failed program."""

    spec = cell.workload.command
    alloc = cell.resolved_allocator()
    sample = new_sample(cell, phase)
    sample["launcher"] = "hakrun"
    timeout = spec.timeout or timeout
    if not alloc.available:
        sample["error"] = alloc.missing_reason
        return sample
    program = (spec.server or spec.argv)[0]
    if shutil.which(program, path=clean_env()["PATH"]) is None:
        sample["error"] = f"{program} not installed (run `make setup`)"
        return sample
    env = clean_env({**spec.env, **cell.env})
    if stats:
        env["HAKMEM_STATS"] = "1"
    with tempfile.TemporaryDirectory(prefix="hakbench-cmd-") as tmp:
        run, values = _plan(spec, Path(tmp), alloc, env)
        try:
            if spec.server:
                output, error, timed_out = _run_server(spec, sample, values, run, timeout)
            else:
                output, error, timed_out = _run_program(spec, sample, values, run, timeout)
        except OSError as e:  # a missing stdin file or cwd: the sample says so
            sample["error"] = f"cannot start {program}: {e}"
            return sample
        report = parse_report(run["report"].read_text()) if run["report"].exists() else {}
        probe = Path(tmp) / "malloc_impl"
        malloc_impl = probe.read_text() if probe.exists() else None
        sample["process"] = {**report, "malloc_impl": malloc_impl}
        sample["stderr_tail"] = tail(run["err"].read_text(errors="replace"))
        checked = None
        if spec.check_output and spec.check_output != "stdout":
            target = values["dir"] / spec.check_output
            checked = target.read_bytes() if target.is_file() else None
        elif spec.check_output == "stdout":
            checked = output
    if report:
        sample["metrics"] = report_metrics(report)
        sample["wall_s"] = sample["metrics"]["wall_s"]
        sample["returncode"] = report["exit"] if report["exit"] >= 0 else -report["signal"]
        sample["signal"] = report["signal"] or None
    sample["unavailable"] = list(UNAVAILABLE)
    if spec.regex:
        value = spec.parse_metric(output.decode(errors="replace"))
        if value is not None:
            sample["metrics"][spec.metric] = value
        elif error is None:
            error = f"measure regex {spec.regex!r} matched nothing"
    if checked is not None:
        sample["output_sha256"] = normalised_hash(checked, spec.substitute)
    ended = {"report": report, "error": error, "timed_out": timed_out, "checked": checked}
    _judge(sample, spec, alloc, program, malloc_impl, ended, timeout)
    if sample["status"] == "ok" and spec.check_output and phase != "reference":
        _check_reference(sample, cell, timeout)
    return sample


def _plan(spec, tmp: Path, alloc, env: dict) -> tuple[dict, dict]:
    """Where a run in ``tmp`` writes (hakrun's report, stdout, stderr), how hakrun starts it
    and the placeholders' values (``{dir}``, ``{input}``, ``{port}``). -> (run, values)"""
    env["HAKPROBE_OUT"] = str(tmp / "malloc_impl")
    work = tmp / "dir"
    work.mkdir()
    values = {"dir": work}
    if spec.input:
        values["input"] = input_path(spec.input)
    if spec.server:
        values["port"] = free_port()
    run = {
        "report": tmp / "hakrun.report",
        "out": tmp / "stdout",
        "err": tmp / "stderr",
        "plain_env": clean_env(spec.env),
        "start": {
            "report": tmp / "hakrun.report",
            "preload": alloc.preload,
            "env": env,
            "cwd": _expand(spec.cwd, values),
        },
    }
    return run, values


def _run_program(spec, sample, values, run, timeout) -> tuple[bytes, None, bool]:
    """Run the program through hakrun to its end. -> (its stdout, no error, timed out)"""
    argv = [_expand(a, values) for a in spec.argv]
    sample["argv"] = argv
    stdin_path = _expand(spec.stdin, values) if spec.stdin else os.devnull
    with (
        open(stdin_path, "rb") as stdin,
        open(run["out"], "wb") as out,
        open(run["err"], "wb") as err,
    ):
        proc = _start(argv, stdin=stdin, out=out, err=err, **run["start"])
        _, _, timed_out = wait_group(proc, timeout)
    return run["out"].read_bytes(), None, timed_out


def _judge(sample, spec, alloc, program, malloc_impl, ended: dict, timeout: float) -> None:
    """The sample's status and error from how the program ended and what it wrote."""
    report, error = ended["report"], ended["error"]
    if ended["timed_out"]:
        sample["status"], sample["error"] = "timeout", error or f"timed out after {timeout:g} s"
    elif not report:
        sample["error"] = error or "hakrun wrote no report (killed?)"
    elif report.get("exec_errno"):
        sample["status"] = "failed"
        sample["error"] = f"cannot start {program}: {os.strerror(report['exec_errno'])}"
    elif report["signal"]:
        sample["status"] = "failed"
        sample["error"] = f"killed by signal {report['signal']} ({signal_name(report['signal'])})"
    elif report["exit"] != 0:
        sample["status"], sample["error"] = "failed", f"exit status {report['exit']}"
    elif error:
        sample["status"], sample["error"] = "failed", error
    elif alloc.preload is not None and alloc.expect_impl not in str(malloc_impl):
        sample["status"] = "wrong_allocator"
        sample["error"] = (
            f"malloc in {program} resolves to {malloc_impl!r}, not {alloc.expect_impl}"
        )
    elif spec.check_output and ended["checked"] is None:
        sample["status"] = "wrong_output"
        sample["error"] = f"the program wrote no {spec.check_output}"
    else:
        sample["status"] = "ok"


def _check_reference(sample, cell, timeout: float) -> None:
    """An ok sample's output against the same program's under glibc (wrong_output if not)."""
    spec = cell.workload.command
    ref, why = reference_hash(cell.workload, timeout)
    sample["reference_sha256"] = ref
    if why:
        sample["status"], sample["error"] = "error", why
    elif ref != sample["output_sha256"]:
        sample["status"] = "wrong_output"
        sample["error"] = (
            f"{spec.check_output} hashes to {sample['output_sha256'][:12]}, under glibc {ref[:12]}"
        )
