"""The ``hakbench`` command line: parse, call the library, print. Nothing else lives here.

Each sub-command is defined in its own module under ``hakbench/commands/`` and exposes
``COMMANDS`` (a list of click commands); they are registered here in name order.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys

import click

from hakbench import __version__
from hakbench.core.errors import HakbenchError
from hakbench.engine import interrupts, meta


class _Group(click.Group):
    """Run every command under the one signal policy (hakbench.engine.interrupts: SIGINT, SIGTERM
    and SIGHUP stop it alike); turn HakbenchError into one line on stderr and its exit code,
    and a stop that no command caught (each one that writes files catches it to write what
    finished first) into one line and exit 128 + the signal (130, 143, 129), not click's
    "Aborted!" and exit 1."""

    def main(self, args=None, *a, **kw):
        meta.INVOCATION = ["hakbench", *(sys.argv[1:] if args is None else list(args))]
        if args is None:  # a process of its own (not a test's in-process call)
            interrupts.exit_outside_commands()
        return super().main(args, *a, **kw)

    def invoke(self, ctx):
        try:
            with interrupts.installed():
                value = super().invoke(ctx)
                if interrupts.received():  # a stop came while the report was written
                    raise KeyboardInterrupt
                return value
        except HakbenchError as e:
            click.echo(f"hakbench: error: {e}", err=True)
            sys.exit(e.exit_code)
        except KeyboardInterrupt:
            click.echo("\nhakbench: interrupted", err=True)
            sys.exit(interrupts.exit_code())


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="hakbench")
def main():
    """Allocator lab: run cells, judge A/B experiments, build scorecards, soak."""


def _suite_dir_option() -> click.Option:
    """``--suite-dir``, on every command: the public suite's checkout (hakbench.core.suites)."""
    from hakbench.core import suites

    return click.Option(
        ["--suite-dir"],
        type=click.Path(file_okay=False),
        expose_value=False,
        is_eager=True,
        callback=lambda ctx, param, value: suites.configure(value),
        help=f"mimalloc-bench checkout for its workloads (-w @mimalloc-bench) [default: "
        f"${suites.ENV_VAR}, else `make suites`' clone]",
    )


def _register() -> None:
    from hakbench import commands

    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"hakbench.commands.{info.name}")
        for cmd in getattr(module, "COMMANDS", []):
            cmd.params.append(_suite_dir_option())
            main.add_command(cmd)


_register()
