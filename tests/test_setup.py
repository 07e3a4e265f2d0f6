"""make setup cannot half-work (scripts/setup.sh): a venv that an interrupted or failed run
left behind is found, and a package apt-get cannot install is an error naming it. (The
whole of it, interrupted and run again on a fresh Debian, is scripts/fresh_debian.sh.)"""

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from conftest import REPO_ROOT, skip_fails_in_ci

SETUP = REPO_ROOT / "scripts" / "setup.sh"


def setup(*args, env=None, user=None, script=SETUP):
    cmd = ["bash", str(script), *args]
    if user:
        cmd = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", *cmd]
    return subprocess.run(
        cmd, env=dict(os.environ, **(env or {})), capture_output=True, text=True, timeout=120
    )


def check_venv(venv):
    return setup("check-venv", env={"VENV": str(venv), "PYTHON": sys.executable})


def test_a_half_made_venv_is_found(tmp_path):
    venv = tmp_path / "venv"
    r = check_venv(venv)
    assert r.returncode == 1 and "there is no" in r.stdout
    # what `python3 -m venv` leaves when stopped before ensurepip (or without python3-venv)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    r = check_venv(venv)
    assert r.returncode == 1 and "has no pip" in r.stdout, r.stdout
    # a venv made by another python than the one it runs now (python3 upgraded under it)
    cfg = venv / "pyvenv.cfg"
    cfg.write_text(re.sub(r"(?m)^version *=.*$", "version = 3.9.2", cfg.read_text()))
    r = check_venv(venv)
    assert r.returncode == 1 and "made by python 3.9" in r.stdout, r.stdout
    shutil.rmtree(venv / "bin")
    r = check_venv(venv)
    assert r.returncode == 1 and "has no bin/python" in r.stdout, r.stdout


def test_the_venv_make_setup_made_passes_the_check():
    r = setup("check-venv", env={"VENV": str(REPO_ROOT / ".venv")})
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="apt-get needs root")
def test_a_package_apt_cannot_install_is_an_error_naming_it():
    r = setup("system", env={"SETUP_PACKAGES": "make hakmem-no-such-package"})
    assert r.returncode == 1
    assert "apt-get install failed" in r.stderr and "hakmem-no-such-package" in r.stderr
    assert "make" not in r.stderr.split("hakmem-no-such-package")[0].split("named")[-1]


def _known_uninstalled_package() -> str | None:
    """A small package apt knows of and this machine does not have installed."""
    for name in ("hello", "sl", "cowsay", "fortune-mod"):
        known = subprocess.run(["apt-cache", "show", "--no-all-versions", name],
                               capture_output=True).returncode == 0  # fmt: skip
        have = subprocess.run(["dpkg-query", "-W", "-f=${Status}", name],
                              capture_output=True, text=True).stdout  # fmt: skip
        if known and "ok installed" not in have:
            return name
    return None


@pytest.mark.skipif(os.geteuid() != 0, reason="apt-get needs root")
def test_an_install_that_fails_is_an_error_naming_what_is_missing(tmp_path):
    # a package apt knows, whose install fails (an apt-get that cannot fetch, as offline):
    # setup tries again after an update, then stops with apt's last lines and the names of
    # the packages that are still missing, never going on to make the venv
    package = _known_uninstalled_package()
    assert package, "no small uninstalled package known to apt (apt-get update?)"
    shim = tmp_path / "bin"
    shim.mkdir()
    (shim / "apt-get").write_text(
        "#!/bin/sh\n"
        'case " $* " in *" install "*)\n'
        '  echo "E: Failed to fetch $*: simulated" >&2; exit 100;;\n'
        "esac\n"
        "exit 0\n"
    )
    (shim / "apt-get").chmod(0o755)
    env = {"SETUP_PACKAGES": f"make {package}", "PATH": f"{shim}:{os.environ['PATH']}"}
    r = setup("system", env=env)
    assert r.returncode == 1, r.stderr
    assert f"apt-get install failed; not installed: {package}" in r.stderr
    assert "E: Failed to fetch" in r.stderr  # apt's own words, for the user to act on
    assert "make" not in r.stderr.split("not installed:")[-1]


@pytest.mark.skipif(os.geteuid() != 0, reason="switching to the user nobody needs root")
def test_without_root_missing_packages_stop_setup_unless_allowed():
    env = {"SETUP_PACKAGES": "make hakmem-no-such-package"}
    with tempfile.TemporaryDirectory() as d:  # a copy the user can read (/root is 0700)
        script = Path(d) / "scripts" / "setup.sh"
        script.parent.mkdir()
        shutil.copy(SETUP, script)
        os.chmod(d, 0o755)
        os.chmod(script.parent, 0o755)
        r = setup("system", env=env, user=65534, script=script)
        assert r.returncode == 1, r.stderr
        assert "apt-get install -y hakmem-no-such-package" in r.stderr
        r = setup("system", env=dict(env, SETUP_ALLOW_MISSING="1"), user=65534, script=script)
    assert r.returncode == 0 and "going on without hakmem-no-such-package" in r.stderr


def test_in_ci_a_skip_fails_unless_by_chance_or_allowed(monkeypatch):
    monkeypatch.delenv("HAKBENCH_MISSING_OK", raising=False)
    assert skip_fails_in_ci("Skipped: valgrind not installed")
    assert not skip_fails_in_ci("Skipped: by chance: the run finished before the signal")
    monkeypatch.setenv("HAKBENCH_MISSING_OK", "actionlint")
    assert not skip_fails_in_ci("actionlint not installed (make setup builds it)")
    assert skip_fails_in_ci("libmimalloc2.0 not installed")


def test_in_ci_a_skipped_test_is_reported_failed(tmp_path):
    """The conftest hook itself, in a pytest run of its own with CI set."""
    (tmp_path / "conftest.py").write_text((REPO_ROOT / "tests" / "conftest.py").read_text())
    (tmp_path / "test_x.py").write_text(
        "import pytest\n"
        "def test_tool():\n    pytest.skip('perf not installed')\n"
        "def test_chance():\n    pytest.skip('by chance: too quick')\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        env=dict(env, CI="true"),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 1 and "1 failed, 1 skipped" in r.stdout, r.stdout
    assert "CI is set, so this skip fails: perf not installed" in r.stdout
