"""The README's shell commands run as written: the quick start and the command-line examples.

Each fenced command of "Quick start" and of the examples under "The command line"
runs in bash, in a fresh folder with a fresh database, with `.venv/bin/` (and a
bare `loomtune`) meaning the bin folder of the interpreter running the tests.
Skipped, with the reason: making the venv and installing (what these tests run
under already) and the test command (this suite; test_repository.py checks that
CI runs it verbatim). The 32-trial tune runs with 4 trials, as the Python
snippet's test does: the command is the README's, the budget a test's.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
BIN = Path(sys.executable).parent

SETUP = (re.compile(r"^python3 -m venv "), re.compile(r"^\.venv/bin/pip install "))
"""Steps that make the environment these tests already run in."""
TRIALS_WRITTEN, TRIALS_RUN = "--trials 32", "--trials 4"


def _section(text: str, heading: str) -> str:
    m = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert m, f"README has no section {heading!r}"
    return m.group(1)


def _blocks(section: str) -> list[str]:
    return re.findall(r"^```[a-z]*\n(.*?)^```", section, re.M | re.S)


def readme_commands() -> list[str]:
    """The shell commands to run, setup steps dropped, in README order."""
    text = README.read_text()
    quick = _section(text, "Quick start")
    examples = _section(text, "The command line").split("For example:", 1)
    assert len(examples) == 2, "README's command line section has no 'For example:' block"
    commands = []
    for block in _blocks(quick) + _blocks(examples[1])[:1]:
        for line in block.splitlines():
            steps = [s.strip() for s in line.split("&&") if s.strip()]
            if any("pytest" in s for s in steps):
                continue  # the test command: this suite itself
            kept = [s for s in steps if not any(p.match(s) for p in SETUP)]
            if kept:
                commands.append(" && ".join(kept))
    return commands


def _as_run(command: str) -> str:
    """The command with `.venv/bin/` and a bare `loomtune` taken from this interpreter's bin."""
    command = command.replace(".venv/bin/", f"{BIN}/")
    command = re.sub(r"(^|&& )loomtune ", rf"\g<1>{BIN}/loomtune ", command)
    return command.replace(TRIALS_WRITTEN, TRIALS_RUN)


def test_the_readme_has_the_commands_a_newcomer_types_first() -> None:
    commands = readme_commands()
    assert commands[0].startswith(".venv/bin/loomtune run ")  # the main job, first
    assert any(c.startswith(".venv/bin/loomtune tune ") and TRIALS_WRITTEN in c for c in commands)
    assert len(commands) >= 5, commands
    assert (BIN / "loomtune").exists(), f"no loomtune script beside {sys.executable}"


@pytest.mark.parametrize("command", readme_commands())
def test_a_readme_command_runs_as_written(command: str, tmp_path: Path) -> None:
    shutil.copytree(ROOT / "examples", tmp_path / "examples")  # what a clone has
    env = {**os.environ, "LOOMTUNE_DATABASE_URL": f"sqlite:///{tmp_path / 'loomtune.db'}"}
    proc = subprocess.run(
        ["bash", "-c", f"set -e -o pipefail; {_as_run(command)}"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, f"{command}\n{proc.stderr[-3000:]}"
    assert "Traceback" not in proc.stderr
    # What the command says it writes is there.
    for written in re.findall(r"(?:--plot|-o) (\S+)", command):
        assert (tmp_path / written).stat().st_size > 0, f"{command} wrote no {written}"
    if "--format so -o libmm.so" in command:
        assert (tmp_path / "libmm.h").exists(), "export --format so writes its header too"
