"""The README's commands are the ones CI runs."""

from __future__ import annotations

import os
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


_CODE_FOLDERS = ("ir", "codegen", "tuner", "workers", "service", "migrations", "loomtune")


def _section(text: str, heading: str) -> str:
    m = re.search(r"^## " + re.escape(heading) + r"\n(.+?)(?=^## |\Z)", text, re.S | re.M)
    assert m, f"README has no section {heading!r}"
    return m.group(1)


def test_readme_is_short() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 260, f"README.md has {len(lines)} lines; long explanations go to docs/"


def test_readme_configuration_lists_every_environment_variable() -> None:
    """Every LOOMTUNE_ variable the code, the tests or the benchmarks read is documented."""
    names: set[str] = set()
    for folder in (*_CODE_FOLDERS, "tests", "benchmarks"):
        for path in (ROOT / folder).rglob("*.py"):
            names |= set(re.findall(r"\bLOOMTUNE_[A-Z0-9_]*[A-Z0-9]\b", path.read_text()))
    assert len(names) >= 10, names  # the grep itself works
    configuration = _section((ROOT / "README.md").read_text(), "Configuration")
    missing = sorted(n for n in names if f"`{n}`" not in configuration)
    assert not missing, f"README's Configuration section does not list {missing}"


MAX_MODULE_LINES = 650
MAX_FUNCTION_LINES = 120


def _python_files() -> list[Path]:
    folders = (*_CODE_FOLDERS, "tests", "benchmarks", "examples")
    return sorted(
        p for f in folders for p in (ROOT / f).rglob("*.py") if "migrations" not in p.parts
    )


def test_modules_and_functions_stay_small_enough_to_keep_in_mind() -> None:
    import ast

    too_long: list[str] = []
    for path in _python_files():
        text = path.read_text()
        name = path.relative_to(ROOT)
        if (n := len(text.splitlines())) > MAX_MODULE_LINES:
            too_long.append(f"{name}: {n} lines (at most {MAX_MODULE_LINES})")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                n = (node.end_lineno or node.lineno) - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    too_long.append(
                        f"{name}:{node.lineno} {node.name}: {n} lines (at most {MAX_FUNCTION_LINES})"
                    )
    assert len(_python_files()) > 200  # the walk itself works
    assert not too_long, "split these:\n" + "\n".join(too_long)


def test_readme_python_snippet_runs(tmp_path: Path) -> None:
    """The README's Python example runs as written (with a smaller budget) and checks itself."""
    import subprocess
    import sys

    m = re.search(r"```python\n(.+?)```", (ROOT / "README.md").read_text(), re.S)
    assert m, "README has no Python example"
    code = m.group(1)
    assert "trials=32" in code and "assert np.allclose" in code
    script = tmp_path / "snippet.py"
    script.write_text(code.replace("trials=32", "trials=2"))
    env = {**os.environ, "LOOMTUNE_DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite'}"}
    proc = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_the_fast_subset_leaves_out_servers_and_benchmarks() -> None:
    """`pytest -m "not slow"` (the README's fast subset) selects no end-to-end or benchmark
    test, and still selects the unit tests."""
    import subprocess
    import sys

    # the selection is tests/conftest.py's: installed plugins (hypothesis, schemathesis,
    # anyio: 1.7 s of imports per run) take no part in it
    env = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}

    def selected(*args: str, marks: str = "not slow") -> list[str]:
        out = subprocess.run(
            [sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", marks, *args],
            capture_output=True, text=True, cwd=ROOT, env=env, check=False,
        ).stdout  # fmt: skip
        return [line for line in out.splitlines() if "::" in line]

    fast = selected("tests/e2e", "tests/benchmarks", "tests/test_readme_shell.py", __file__)
    assert fast and all(t.startswith("tests/test_repository.py") for t in fast)
    # the README's command runs the end-to-end tests (`e2e`) alone, after all the others
    alone = selected("tests/e2e", "tests/benchmarks", __file__, marks="e2e")
    assert alone and all(t.startswith("tests/e2e/") for t in alone)
