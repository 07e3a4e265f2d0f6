"""One module per sub-command family; each exposes ``COMMANDS``."""

from __future__ import annotations

from pathlib import Path

import click
from click.core import ParameterSource

from hakbench.core.errors import UsageError


def resume_option(what: str):
    """The ``--resume DIR`` option of a measuring command (``what``: its help, after "continue
    a stopped or killed ... in DIR"): one spelling for every command that resumes."""
    return click.option(
        "--resume",
        type=click.Path(file_okay=False, path_type=Path),
        metavar="DIR",
        help=f"continue a stopped or killed {what}",
    )


def resume_alone(
    resume: Path | None, allowed: tuple[str, ...] = (), flag: str = "--resume"
) -> None:
    """``--resume DIR`` continues DIR's run with the options it recorded: another option
    given beside it (but ``allowed``, e.g. gate's ``--jobs``) is refused in one line (exit
    2) rather than silently ignored. ``flag``: the option that names DIR (``ab --continue``).
    ``--suite-dir`` is always allowed: it says where the suite's checkout is on this
    machine, not how the run measures (the cells check that their programs are the same)."""
    if resume is None:
        return
    ctx = click.get_current_context()
    own = next(p.name for p in ctx.command.params if flag in getattr(p, "opts", ()))
    given = [
        p.opts[0]
        for p in ctx.command.params
        if p.name not in (own, *allowed, "suite_dir")
        and ctx.get_parameter_source(p.name) is ParameterSource.COMMANDLINE
    ]
    if given:
        raise UsageError(f"{flag} {resume} continues with its run's own options; drop {given[0]}")
