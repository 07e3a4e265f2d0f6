"""Profile resolution and validation on profile directories made in tmp_path."""

import json
import textwrap

import pytest
from click.testing import CliRunner

from hakbench.cli import main
from hakbench.core.errors import UsageError
from hakbench.core.profiles import load_profiles, resolve_profile

OPTIONS = [
    {
        "name": "HAKMEM_TINY_HEAP_PROFILE",
        "type": "enum",
        "default": "C7_SAFE",
        "values": ["LEGACY", "C7_SAFE"],
        "description": "tiny front routing",
    },
    {"name": "HAKMEM_SS_MEM_LEAN", "type": "bool", "default": "0", "description": "lean"},
]


def lab(tmp_path, monkeypatch, profiles: dict, options=OPTIONS):
    """A lab root with these profile files and a hakmem-options that prints ``options``."""
    (tmp_path / "profiles").mkdir()
    for name, text in profiles.items():
        (tmp_path / "profiles" / f"{name}.toml").write_text(textwrap.dedent(text))
    (tmp_path / "profiles" / "workloads.toml").write_text("")
    if options is not None:
        binary = tmp_path / "build" / "bin" / "hakmem-options"
        binary.parent.mkdir(parents=True)
        binary.write_text(f"#!/bin/sh\ncat <<'JSON'\n{json.dumps(options)}\nJSON\n")
        binary.chmod(0o755)
    monkeypatch.setenv("HAKBENCH_ROOT", str(tmp_path))
    return tmp_path


BASE = """\
    name = "BASE"
    description = "the base"
    [env]
    HAKMEM_TINY_HEAP_PROFILE = "C7_SAFE"
    HAKMEM_SS_MEM_LEAN = 0
"""
CHILD = """\
    name = "CHILD"
    extends = "base"
    [env]
    HAKMEM_SS_MEM_LEAN = true
"""


def test_extends_chain_merges_and_names_sources(tmp_path, monkeypatch):
    lab(tmp_path, monkeypatch, {"base": BASE, "child": CHILD})
    r = resolve_profile("child")
    assert r.chain == ("BASE", "CHILD")
    assert r.env == {"HAKMEM_TINY_HEAP_PROFILE": "C7_SAFE", "HAKMEM_SS_MEM_LEAN": "1"}
    assert r.sources["HAKMEM_SS_MEM_LEAN"] == "CHILD"
    assert r.sources["HAKMEM_TINY_HEAP_PROFILE"] == "BASE"


def test_cycle_is_named(tmp_path, monkeypatch):
    lab(
        tmp_path,
        monkeypatch,
        {"x": 'name = "X"\nextends = "Y"\n', "y": 'name = "Y"\nextends = "X"\n'},
    )
    with pytest.raises(UsageError, match="cycle: X -> Y -> X"):
        resolve_profile("X")


def test_unknown_profile_and_unknown_parent_list_known_names(tmp_path, monkeypatch):
    lab(tmp_path, monkeypatch, {"child": CHILD})
    with pytest.raises(UsageError, match=r"unknown profile 'BASE' \(extended by CHILD\)"):
        resolve_profile("child")
    with pytest.raises(UsageError, match="known: CHILD"):
        resolve_profile("nope")


def test_malformed_toml_names_file_and_line(tmp_path, monkeypatch):
    lab(tmp_path, monkeypatch, {"bad": 'name = "BAD"\n[env]\nHAKMEM_X = \n'})
    with pytest.raises(UsageError) as e:
        load_profiles()
    assert "bad.toml" in str(e.value) and "line 3" in str(e.value)


def test_cli_show_prints_chain_and_validates(tmp_path, monkeypatch):
    lab(tmp_path, monkeypatch, {"base": BASE, "child": CHILD})
    r = CliRunner().invoke(main, ["profiles", "show", "child"])
    assert r.exit_code == 0, r.output
    assert "chain: BASE -> CHILD" in r.output
    assert "HAKMEM_SS_MEM_LEAN" in r.output and "(from CHILD)" in r.output
    assert "valid against hakmem-options" in r.output
    r = CliRunner().invoke(main, ["profiles", "list"])
    assert r.exit_code == 0 and "CHILD" in r.output and "extends BASE" in r.output


def test_cli_unknown_option_exits_2_with_closest(tmp_path, monkeypatch):
    typo = 'name = "TYPO"\n[env]\nHAKMEM_SS_MEM_LEEN = 1\n'
    lab(tmp_path, monkeypatch, {"typo": typo})
    r = CliRunner().invoke(main, ["profiles", "show", "typo"])
    assert r.exit_code == 2
    assert "HAKMEM_SS_MEM_LEEN" in r.output and "did you mean HAKMEM_SS_MEM_LEAN" in r.output


def test_cli_unknown_profile_exits_2(tmp_path, monkeypatch):
    lab(tmp_path, monkeypatch, {"base": BASE})
    r = CliRunner().invoke(main, ["profiles", "show", "nope"])
    assert r.exit_code == 2 and "known: BASE" in r.output
