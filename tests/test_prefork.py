"""The tests' preloader gives what a fresh interpreter gives: the exit code, both output
streams, the working directory, the environment and standard input are the command's."""

from __future__ import annotations

import os
import subprocess
import sys

import prefork
import pytest
from conftest import REPO

SCRIPT = (
    "import os, sys; print(os.getcwd(), os.environ['PREFORK_PROBE'], sys.stdin.read());"
    "print('to stderr', file=sys.stderr); sys.exit(int(os.environ['PREFORK_CODE']))"
)


def test_a_command_gives_the_same_as_in_a_fresh_interpreter():
    command = [sys.executable, "-m", "vesti_scrapy", "extract", "--help"]
    forked = prefork.run(command, cwd=REPO, timeout=60)
    fresh = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert "extract" in forked.stdout
    assert (forked.returncode, forked.stdout, forked.stderr) == (
        fresh.returncode,
        fresh.stdout,
        fresh.stderr,
    )


def test_cwd_environment_input_and_exit_code_are_the_commands(tmp_path, monkeypatch):
    monkeypatch.setattr(prefork, "MODULES", (*prefork.MODULES, "probe"))
    env = {**os.environ, "PREFORK_PROBE": "seen", "PREFORK_CODE": "3"}
    (tmp_path / "probe.py").write_text(SCRIPT, encoding="utf-8")
    result = prefork.run(
        [sys.executable, "-m", "probe"], cwd=tmp_path, env=env, input="typed", timeout=60
    )
    assert (result.returncode, result.stdout, result.stderr) == (
        3,
        f"{tmp_path} seen typed\n",
        "to stderr\n",
    )
    with pytest.raises(subprocess.CalledProcessError):
        prefork.run([sys.executable, "-m", "probe"], cwd=tmp_path, env=env, check=True)


def test_a_command_past_its_timeout_is_killed(tmp_path, monkeypatch):
    monkeypatch.setattr(prefork, "MODULES", (*prefork.MODULES, "sleeper"))
    (tmp_path / "sleeper.py").write_text("import time; time.sleep(60)", encoding="utf-8")
    with pytest.raises(subprocess.TimeoutExpired):
        prefork.run([sys.executable, "-m", "sleeper"], cwd=tmp_path, timeout=0.5)
