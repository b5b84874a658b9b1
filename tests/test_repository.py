"""The README's commands are the ones CI runs."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _command_after(text: str, heading: str) -> str:
    m = re.search(re.escape(heading) + r"\s*```\n(.+?)\n```", text, re.S)
    assert m, f"README has no command block after {heading!r}"
    return m.group(1).strip()


def test_ci_runs_exactly_the_readme_test_command() -> None:
    readme = (ROOT / "README.md").read_text()
    test_cmd = _command_after(readme, "Run the tests:")
    assert "pytest" in test_cmd
    ci = (ROOT / ".ci" / "run").read_text()
    assert test_cmd in ci.splitlines(), ".ci/run must run the README's test command verbatim"
    assert "export CI=true" in ci


def test_readme_main_command_runs_loomtune() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "loomtune run matmul" in _command_after(readme, "matmul against numpy:")
