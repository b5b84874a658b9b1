"""What a newcomer tried from the README alone (issue 35): Ctrl-C, `export --trace`,
`--database`, baselines named for what they are, and the small promises of the CLI."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
TUNE_DENSE = ("tune", "dense", "m=64", "n=64", "k=64", "--trials", "64")


def loomtune(
    db: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "LOOMTUNE_DATABASE_URL": f"sqlite:///{db}", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "service.cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=full,
    )


def _records(db: Path) -> int:
    try:
        with sqlite3.connect(db) as con:
            return con.execute("SELECT count(*) FROM records").fetchone()[0]
    except sqlite3.Error:
        return 0


# -- 1. Ctrl-C during tune ------------------------------------------------------------------


@pytest.mark.parametrize("presses", [1, 2])
def test_ctrl_c_to_the_process_group_exits_130_without_tracebacks(
    tmp_path: Path, presses: int
) -> None:
    """A terminal's Ctrl-C signals the whole group: the search helpers and measurement
    processes stay quiet, the tuner prints the best so far (or ends at once) and exits 130."""
    db = tmp_path / "loomtune.db"
    proc = subprocess.Popen(
        [sys.executable, "-m", "service.cli", *TUNE_DENSE],
        cwd=ROOT,
        env={**os.environ, "LOOMTUNE_DATABASE_URL": f"sqlite:///{db}"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and _records(db) < 2 and proc.poll() is None:
        time.sleep(0.1)
    for i in range(presses):
        os.killpg(proc.pid, signal.SIGINT)
        if i + 1 < presses:
            time.sleep(0.3)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr, stderr
    assert "KeyboardInterrupt" not in stderr, stderr
    if presses == 1:
        assert "stopped: interrupted" in stderr and "loomtune (best)" in stdout, stderr
