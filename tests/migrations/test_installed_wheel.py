"""`loomtune db upgrade` from a non-editable install: the wheel ships the migrations.

The project is built into a wheel as `pip install .` builds it (PEP 517, in
an isolated build environment with the setuptools pyproject.toml asks for —
the venv's own may be older, and need not include `bdist_wheel`), from a copy
of the sources, so the working tree gets no `build/` folder. The wheel is
installed with `pip install --target` into a folder of its own, and the
command runs from a folder outside the repository with only that folder on
PYTHONPATH: the editable install, if any, comes after it on `sys.path`, and
the test checks that every loomtune module the command used came from the
wheel.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import migrations

ROOT = Path(__file__).resolve().parents[2]

# Runs the CLI's entry point like the `loomtune` script does, then says where
# the modules it used came from.
RUN_CLI = """
import json, sys
from service.cli import main
code = main(sys.argv[1:])
files = {name: getattr(module, "__file__", None) for name, module in sorted(sys.modules.items())
         if name.split(".")[0] in ("ir", "tuner", "codegen", "workers", "service", "migrations")}
print(json.dumps({"files": files, "script_location": str(sys.modules["migrations"].SCRIPT_LOCATION)}))
sys.exit(code)
"""


def copy_sources(to: Path) -> None:
    """What a source checkout needs to build: pyproject.toml, README.md and the packages."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    patterns = config["tool"]["setuptools"]["packages"]["find"]["include"]
    packages = {p.rstrip("*") for p in patterns}
    to.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, to / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.so")
    for package in sorted(packages):
        shutil.copytree(ROOT / package, to / package, ignore=ignore)


def pip(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "pip", *args], cwd=cwd, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, f"pip {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc


def test_db_upgrade_runs_from_an_installed_wheel(tmp_path: Path) -> None:
    source, dist, site, elsewhere = (tmp_path / n for n in ("src", "dist", "site", "elsewhere"))
    copy_sources(source)
    pip("wheel", "--no-deps", "--quiet", "--wheel-dir", str(dist), str(source), cwd=tmp_path)
    [wheel] = dist.glob("loomtune-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    shipped = {"migrations/__init__.py", "migrations/env.py", "migrations/script.py.mako"}
    shipped |= {
        f"migrations/versions/{p.name}" for p in (ROOT / "migrations" / "versions").glob("*.py")
    }
    assert shipped <= names, f"the wheel lacks {sorted(shipped - names)}"

    pip(
        "install",
        "--no-deps",
        "--no-index",
        "--quiet",
        "--target",
        str(site),
        str(wheel),
        cwd=tmp_path,
    )
    elsewhere.mkdir()
    database = tmp_path / "fresh" / "loomtune.db"
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env |= {"PYTHONPATH": str(site), "LOOMTUNE_DATABASE_URL": f"sqlite:///{database}"}
    proc = subprocess.run(
        [sys.executable, "-c", RUN_CLI, "db", "upgrade"],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    head = migrations.head_revision()
    assert f"schema at revision {head}" in proc.stderr

    used = json.loads(proc.stdout.strip().splitlines()[-1])
    assert Path(used["script_location"]).is_relative_to(site.resolve())
    assert "migrations" in used["files"] and "service.cli" in used["files"]
    for name, file in used["files"].items():
        assert file is not None and Path(file).resolve().is_relative_to(site.resolve()), (
            name,
            file,
        )

    with sqlite3.connect(database) as conn:
        tables = {
            row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        }
        versions = [row[0] for row in conn.execute("SELECT version_num FROM alembic_version")]
    expected = {
        "workloads",
        "targets",
        "jobs",
        "candidates",
        "records",
        "cost_models",
        "workers",
        "api_tokens",
    }
    assert expected | {"alembic_version"} <= tables
    assert versions == [head]
