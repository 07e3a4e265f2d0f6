"""Cells: which env a cell gets, its argv and clean environment, its key; validation."""

import json
import textwrap

import pytest

from hakbench.core.errors import UsageError
from hakbench.engine.cells import make_cell

OPTIONS = [
    {
        "name": "HAKMEM_TINY_HEAP_PROFILE",
        "type": "enum",
        "default": "C7_SAFE",
        "values": ["LEGACY", "C7_SAFE"],
        "description": "tiny front routing",
    },
    {"name": "HAKMEM_TINY_HOTHEAP_V2", "type": "bool", "default": "0", "description": "v2"},
]


@pytest.fixture
def lab(tmp_path, monkeypatch):
    prof = tmp_path / "profiles"
    prof.mkdir()
    (prof / "safe.toml").write_text('name = "SAFE"\n[env]\nHAKMEM_TINY_HEAP_PROFILE = "C7_SAFE"\n')
    (prof / "workloads.toml").write_text(
        textwrap.dedent("""\
        [small]
        program = "bench_random_mixed"
        args = ["--iters", "1000", "--seed", "1"]
        iters_flag = "--iters"
        """)
    )
    (tmp_path / "build" / "fast").mkdir(parents=True)
    (tmp_path / "build" / "fast" / "libhakmem.so").write_bytes(b"")
    opts = tmp_path / "build" / "bin" / "hakmem-options"
    opts.parent.mkdir()
    opts.write_text(f"#!/bin/sh\necho '{json.dumps(OPTIONS)}'\n")
    opts.chmod(0o755)
    monkeypatch.setenv("HAKBENCH_ROOT", str(tmp_path))
    return tmp_path


def test_profile_env_applies_to_hakmem_only(lab):
    h = make_cell("hakmem", "small", profile="safe")
    assert h.env == {"HAKMEM_TINY_HEAP_PROFILE": "C7_SAFE"} and h.profile == "SAFE"
    m = make_cell("mimalloc", "small", profile="safe")
    assert m.env == {} and m.profile is None
    assert m.label == "mimalloc"


def test_sets_override_and_change_the_key(lab):
    plain = make_cell("hakmem", "small", profile="safe")
    changed = make_cell("hakmem", "small", profile="safe", sets={"HAKMEM_TINY_HOTHEAP_V2": "1"})
    assert changed.env["HAKMEM_TINY_HOTHEAP_V2"] == "1"
    assert plain.key != changed.key
    assert plain.key == make_cell("hakmem", "small", profile="safe").key
    assert "HAKMEM_TINY_HOTHEAP_V2=1" in changed.label


def test_command_uses_a_clean_env(lab, monkeypatch):
    monkeypatch.setenv("HAKMEM_TINY_HOTHEAP_V2", "1")
    monkeypatch.setenv("LD_PRELOAD", "/tmp/stray.so")
    argv, env = make_cell("hakmem", "small", profile="safe").command()
    assert argv == [str(lab / "build/bench/bench_random_mixed"), "--iters", "1000", "--seed", "1"]
    assert "HAKMEM_TINY_HOTHEAP_V2" not in env
    assert env["HAKMEM_TINY_HEAP_PROFILE"] == "C7_SAFE"
    assert env["LD_PRELOAD"].endswith("build/fast/libhakmem.so")
    _, env = make_cell("system", "small").command()
    assert "LD_PRELOAD" not in env and set(env) == {"PATH", "LANG", "LC_ALL"}
    argv, _ = make_cell("system", "small").command(["--iters", "0"])
    assert argv[1:] == ["--iters", "0"]


def test_unknown_set_names_the_closest_option(lab):
    with pytest.raises(
        UsageError, match="HAKMEM_TINY_HOTHEAP_V3 in --set; did you mean HAKMEM_TINY_HOTHEAP_V2"
    ):
        make_cell("hakmem", "small", sets={"HAKMEM_TINY_HOTHEAP_V3": "1"})
    with pytest.raises(UsageError, match="allowed values"):
        make_cell("hakmem", "small", sets={"HAKMEM_TINY_HEAP_PROFILE": "FAST"})


def test_unknown_names_and_missing_library(lab):
    with pytest.raises(UsageError, match="known: hakmem, system"):
        make_cell("nope", "small")
    with pytest.raises(UsageError, match="known: small"):
        make_cell("system", "nope")
    with pytest.raises(UsageError, match="not built"):
        make_cell("hakmem", "small", variant="stats")
