"""`loomtune jobs submit|list|show|cancel` and `best --coordinator` against an in-process coordinator (SQLite).

The commands' client is pointed at the app's TestClient (`service.cli.jobs.make_client`);
everything else — parsing, the API calls, the output, the exit codes — is the real thing.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text

from service.cli import jobs as jobs_cli
from service.cli import main
from service.client import Client
from tests.service.coordinator.apikit import ZEN, Api, result

ROOT = Path(__file__).resolve().parents[3]
MM = ["matmul", "m=16", "n=16", "k=16"]


@pytest.fixture
def cli(sqlite_api: Api, monkeypatch: pytest.MonkeyPatch) -> Iterator[Api]:
    """`loomtune jobs ...` talks to `sqlite_api` with the token given by --token."""
    monkeypatch.setattr(
        jobs_cli, "make_client", lambda args: Client(token=args.token, http=sqlite_api.http)
    )
    monkeypatch.setattr(jobs_cli, "POLL_SECONDS", 0.05)
    yield sqlite_api


def _json(capsys: pytest.CaptureFixture[str]) -> dict:
    out = capsys.readouterr().out
    assert out.count("\n") == 1, out  # exactly one JSON object
    return json.loads(out)


def test_submit_list_show_cancel(
    cli: Api, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    token = cli.token("client", "alice")
    assert (
        main(
            [
                "jobs",
                "submit",
                *MM,
                "--trials",
                "3",
                "--target",
                ZEN,
                "--strategy",
                "replay",
                "--seed",
                "5",
                "--json",
                "--token",
                token,
            ]
        )
        == 0
    )
    job = _json(capsys)
    assert list(job)[:7] == [
        "id",
        "status",
        "trials",
        "trials_done",
        "best_latency_ms",
        "error",
        "waiting_reason",
    ]
    assert (
        job["status"] == "waiting"  # no worker serves ZEN
        and job["trials"] == 3
        and job["trials_done"] == 0
        and job["best_latency_ms"] is None
    )
    assert (
        job["op"] == "matmul"
        and job["params"] == {"m": 16, "n": 16, "k": 16}
        and job["target"] == ZEN
    )
    assert (
        job["strategy"] == "replay"
        and job["seed"] == 5
        and "no live worker" in job["waiting_reason"]
    )

    # A simulated worker measures two candidates.
    worker = cli.token("worker")
    ids = cli.run_job(job["id"], 2)
    wid = cli.register(worker)
    cli.call("POST", f"/v1/workers/{wid}/lease", worker, json={"max_candidates": 2})
    cli.call(
        "POST",
        f"/v1/workers/{wid}/results",
        worker,
        json={"results": [result(ids[0], 4.0), result(ids[1], 2.0)]},
    )

    assert main(["jobs", "list", "--json", "--token", token]) == 0
    (listed,) = _json(capsys)["jobs"]
    assert (
        listed["id"] == job["id"] and listed["status"] == "running" and listed["trials_done"] == 2
    )
    assert main(["jobs", "list", "--token", token]) == 0
    out = capsys.readouterr().out
    assert "running" in out and "2/3" in out and "matmul m=16 n=16 k=16" in out

    plot = tmp_path / "curve.png"
    assert (
        main(["jobs", "show", str(job["id"]), "--json", "--plot", str(plot), "--token", token]) == 0
    )
    shown = _json(capsys)
    assert (
        shown["best_latency_ms"] == 2.0
        and shown["trials_done"] == 2
        and sorted(shown["history"])[0] == 2.0
    )
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["jobs", "show", str(job["id"]), "--token", token]) == 0
    out = capsys.readouterr().out
    assert "best: 2.0000 ms" in out and "trials: 2/3" in out

    assert main(["jobs", "cancel", str(job["id"]), "--token", token]) == 0
    assert "cancelled after 2/3 trials" in capsys.readouterr().out
    assert main(["jobs", "show", str(job["id"]), "--json", "--token", token]) == 0
    assert _json(capsys)["status"] == "cancelled"


def test_submit_a_custom_workload_file(cli: Api, capsys: pytest.CaptureFixture[str]) -> None:
    token = cli.token("client")
    example = str(ROOT / "examples" / "tanh_matmul.workload.json")
    assert (
        main(
            [
                "jobs",
                "submit",
                "--workload",
                example,
                "m=32",
                "--trials",
                "2",
                "--target",
                ZEN,
                "--json",
                "--token",
                token,
            ]
        )
        == 0
    )
    job = _json(capsys)
    assert job["params"]["m"] == 32 and job["status"] == "waiting"


class _Polls:
    """What the CLI's polls have seen: the job at all (`queued`), then running (`running`)."""

    def __init__(self) -> None:
        self.queued = threading.Event()
        self.running = threading.Event()


def _watched(api: Api, monkeypatch: pytest.MonkeyPatch) -> _Polls:
    """Point the CLI at a client that reports what each poll returned."""
    polls = _Polls()

    class Watching(Client):
        def job(self, job_id: int) -> dict:
            j = super().job(job_id)
            (polls.running if j["status"] == "running" else polls.queued).set()
            return j

    monkeypatch.setattr(
        jobs_cli, "make_client", lambda args: Watching(token=args.token, http=api.http)
    )
    return polls


def _finish_later(
    api: Api, job_id: int, status: str, polls: _Polls, error: str | None = None
) -> threading.Thread:
    """Start the job once the CLI polls it, finish it once the CLI has seen it running: no race with the polls."""

    def run() -> None:
        polls.queued.wait(timeout=60)
        with api.engine.begin() as conn:
            conn.execute(
                text("UPDATE jobs SET status = 'running', trials_done = 1 WHERE id = :id"),
                {"id": job_id},
            )
        polls.running.wait(timeout=60)
        with api.engine.begin() as conn:
            conn.execute(
                text("UPDATE jobs SET status = :s, trials_done = 2, error = :e WHERE id = :id"),
                {"id": job_id, "s": status, "e": error},
            )

    t = threading.Thread(target=run)
    t.start()
    return t


def test_submit_wait_follows_the_job_until_it_ends(
    cli: Api, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    token = cli.token("client")
    cli.register(cli.token("worker"), ZEN)  # a live worker: the job is not waiting for one
    t = _finish_later(cli, 1, "succeeded", _watched(cli, monkeypatch))
    assert (
        main(
            [
                "jobs",
                "submit",
                *MM,
                "--trials",
                "2",
                "--target",
                ZEN,
                "--wait",
                "--json",
                "--token",
                token,
            ]
        )
        == 0
    )
    t.join()
    captured = capsys.readouterr()
    job = json.loads(captured.out)
    assert job["id"] == 1 and job["status"] == "succeeded" and job["trials_done"] == 2
    # Not a terminal: a line per change of state on stderr, no progress bar.
    assert "submitted job 1" in captured.err and "job 1: running, 1/2 trials" in captured.err
    assert "job 1: succeeded, 2/2 trials" in captured.err

    t = _finish_later(cli, 2, "failed", _watched(cli, monkeypatch), "the space is empty")
    assert (
        main(["jobs", "submit", *MM, "--trials", "2", "--target", ZEN, "--wait", "--token", token])
        == 1
    )
    t.join()
    captured = capsys.readouterr()
    assert (
        "status: failed" in captured.out
        and "loomtune: job 2 failed: the space is empty" in captured.err
    )


def test_errors_are_one_line_and_exit_2(
    cli: Api, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    token = cli.token("client")
    cases = [
        (
            ["jobs", "show", "999", "--token", token],
            "loomtune: error: coordinator: 404 job 999 not found",
        ),
        (
            ["jobs", "submit", "matmul", "m=-3", "--target", ZEN, "--token", token],
            "loomtune: error: coordinator: 422 body.workload.params:",
        ),
        (
            ["jobs", "submit", "matmul", "m=x", "--token", token],
            "loomtune: error: parameter m must be an integer",
        ),
        (["jobs", "list", "--token", "lt_wrong"], "loomtune: error: coordinator: 401"),
        (["jobs", "submit", "--token", token], "loomtune: error: name an operator"),
        (
            ["jobs", "show", "1", "--plot", "x.svg", "--token", token],
            "loomtune: error: --plot writes a PNG file",
        ),
    ]
    for argv, message in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith(message) and err.count("\n") == 1, (argv, err)
    monkeypatch.undo()  # the real client: no coordinator anywhere
    monkeypatch.delenv("LOOMTUNE_COORDINATOR", raising=False)
    assert main(["jobs", "list"]) == 2
    assert (
        "no coordinator: pass --coordinator URL or set LOOMTUNE_COORDINATOR"
        in capsys.readouterr().err
    )
    assert main(["jobs", "list", "--coordinator", "http://127.0.0.1:1"]) == 2
    assert "cannot reach http://127.0.0.1:1" in capsys.readouterr().err


def test_best_from_the_coordinator(cli: Api, capsys: pytest.CaptureFixture[str]) -> None:
    token = cli.token("client")
    job = cli.submit(token, trials=2)
    worker = cli.token("worker")
    ids = cli.run_job(job["id"], 2)
    wid = cli.register(worker)
    cli.call("POST", f"/v1/workers/{wid}/lease", worker, json={"max_candidates": 2})
    cli.call(
        "POST",
        f"/v1/workers/{wid}/results",
        worker,
        json={"results": [result(ids[0], 5.0), result(ids[1], 1.5)]},
    )

    argv = ["best", *MM, "--coordinator", "http://unused", "--token", token]
    assert main([*argv, "--json"]) == 0
    best = _json(capsys)
    assert set(best) == {
        "op",
        "params",
        "workload_key",
        "target",
        "record_id",
        "measured_at",
        "latency_ms",
        "retimed_ms",
        "run_times_ms",
        "trace",
    }
    assert (
        best["latency_ms"] == 1.5
        and best["target"] == ZEN
        and best["workload_key"] == job["workload"]["key"]
    )
    assert main([*argv, "--threads", "1"]) == 0
    assert "best: 1.5000 ms (median of 3 runs)" in capsys.readouterr().out
    assert main([*argv, "--threads", "2"]) == 2  # no worker serves 2 threads: no record
    assert "coordinator: 404" in capsys.readouterr().err
    assert main([*argv, "--target", "host -num-threads=1", "--threads", "2"]) == 2
    assert "--threads 2 contradicts -num-threads=1" in capsys.readouterr().err
    assert jobs_cli.remote_target("host", 4) == "host -num-threads=4"
    assert jobs_cli.short_target(ZEN) == "znver3 (3 features), 1 thread(s)"
