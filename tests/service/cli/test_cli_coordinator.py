"""`loomtune serve` where it cannot listen: one line saying what to do, before anything starts."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def serve(db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "LOOMTUNE_DATABASE_URL": f"sqlite:///{db}"}
    return subprocess.run(
        [sys.executable, "-m", "service.cli", "serve", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


def test_a_busy_port_is_one_line_and_opens_nothing(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        db = tmp_path / "loomtune.db"
        proc = serve(db, "--port", str(port))
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("loomtune: error: cannot listen on 127.0.0.1:")
    assert f":{port}:" in lines[0] and "in use" in lines[0] and "--port" in lines[0]
    assert not db.exists()  # refused before the database was opened


def test_an_address_not_of_this_machine_is_one_line(tmp_path: Path) -> None:
    # 192.0.2.1 is TEST-NET-1 (RFC 5737): never an address of this machine, no DNS asked.
    proc = serve(tmp_path / "loomtune.db", "--host", "192.0.2.1", "--port", "0")
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert lines[0].startswith("loomtune: error: cannot listen on 192.0.2.1:0: no such address")


def test_port_0_prints_the_port_it_got_and_ctrl_c_ends_quietly(tmp_path: Path) -> None:
    env = {**os.environ, "LOOMTUNE_DATABASE_URL": f"sqlite:///{tmp_path / 'loomtune.db'}"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "service.cli", "serve", "--port", "0", "--log-level", "warning"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    try:
        said = ""
        for line in proc.stderr:
            if line.startswith("loomtune coordinator on "):
                said = line
                break
        assert said, "serve exited before saying where it listens"
        port = int(said.split("http://127.0.0.1:", 1)[1].split()[0])
        assert port > 0
        deadline = time.monotonic() + 30
        while True:  # the printed port is the one that answers
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as r:
                    assert r.status == 200
                    break
            except OSError:
                assert time.monotonic() < deadline, "serve did not answer on the printed port"
                time.sleep(0.1)
    finally:
        proc.send_signal(signal.SIGINT)
        rest = proc.stderr.read()
    assert proc.wait(timeout=30) == 0, rest  # a server stopped by Ctrl-C ends as uvicorn does
    assert "Traceback" not in rest and "interrupted" not in rest
