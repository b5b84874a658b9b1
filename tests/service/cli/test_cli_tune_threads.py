"""`loomtune tune --threads N` above the cores available warns, as `run` and `apply` do."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_tune_threads_above_the_cores_warns_before_tuning(tmp_path: Path) -> None:
    cores = len(os.sched_getaffinity(0))
    env = {**os.environ, "LOOMTUNE_DATABASE_URL": f"sqlite:///{tmp_path / 'loomtune.db'}"}
    args = ("tune", "gelu", "m=8", "n=8", "--threads", str(cores + 1), "--trials", "64")
    proc = subprocess.Popen(
        [sys.executable, "-m", "service.cli", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    lines = []
    for line in proc.stderr:  # what it says before tuning; then Ctrl-C: nothing is measured
        lines.append(line.rstrip("\n"))
        if line.startswith("tuning "):
            proc.send_signal(signal.SIGINT)
            break
    rest = proc.stderr.read()
    assert proc.wait(timeout=60) == 130, rest
    warnings = [line for line in lines if line.startswith("warning:")]
    assert len(warnings) == 1, lines
    assert f"--threads {cores + 1} is more than the {cores} core(s)" in warnings[0]
    assert "Traceback" not in rest
