"""``hakbench profiles list`` / ``profiles show NAME``."""

from __future__ import annotations

import click

from hakbench.core import paths
from hakbench.core.errors import UsageError
from hakbench.core.profiles import load_profiles, resolve_profile, validate_env
from hakbench.engine.probes import load_options


def _validation_note(env: dict) -> str:
    """Validate against the built options table; say so when it cannot be checked."""
    try:
        options = load_options(paths.options_binary())  # keyed by path: the cache is per lab
    except UsageError as e:
        return f"not validated: {e}"
    validate_env(env, options)
    return "valid against hakmem-options --json"


@click.group("profiles")
def profiles_group():
    """List and show allocator ENV profiles (profiles/*.toml)."""


@profiles_group.command("list")
def list_cmd():
    """Every profile with its parent and description."""
    profiles = load_profiles()
    width = max((len(n) for n in profiles), default=4)
    for name in sorted(profiles):
        p = profiles[name]
        ext = f" (extends {p.extends})" if p.extends else ""
        click.echo(f"{name:<{width}}  {p.description}{ext}")


@profiles_group.command("show")
@click.argument("name")
def show_cmd(name):
    """The resolved env of NAME, which profile of the extends chain set each key."""
    r = resolve_profile(name)
    click.echo(f"profile {r.name}: {r.description}")
    click.echo("chain: " + " -> ".join(r.chain))
    width = max((len(k) for k in r.env), default=0)
    for key in sorted(r.env):
        click.echo(f"  {key:<{width}} = {r.env[key]:<10} (from {r.sources[key]})")
    click.echo(_validation_note(r.env))


COMMANDS = [profiles_group]
