"""`loomtune jobs submit --model` and `jobs show` of a model job, and how `jobs show` words a
job's state: a note is not an error, waiting is not running, `host` waits for a worker."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import onnx
import pytest
from sqlalchemy import text

from service.cli import jobs as jobs_cli
from service.cli import main
from service.client import Client
from tests import models
from tests.service.coordinator.apikit import ZEN, Api


@pytest.fixture
def cli(sqlite_api: Api, monkeypatch: pytest.MonkeyPatch) -> Iterator[Api]:
    """`loomtune jobs ...` talks to `sqlite_api` with the token given by --token."""
    monkeypatch.setattr(
        jobs_cli, "make_client", lambda args: Client(token=args.token, http=sqlite_api.http)
    )
    yield sqlite_api


@pytest.fixture
def mlp_file(tmp_path: Path) -> Path:
    path = tmp_path / "mlp.onnx"
    onnx.save(models.mlp(), path)
    return path


def test_submit_a_model_and_show_its_tasks(
    cli: Api, capsys: pytest.CaptureFixture[str], mlp_file: Path
) -> None:
    token = cli.token("client")
    argv = ["jobs", "submit", "--model", str(mlp_file), "--trials", "16", "--target", ZEN]
    assert main([*argv, "--json", "--token", token]) == 0
    job = json.loads(capsys.readouterr().out)
    assert job["op"] == "model" and job["trials"] == 16 and job["status"] == "waiting"
    assert job["model"]["name"] == "mlp" and len(job["model"]["tasks"]) == 4
    assert list(job["model"]["tasks"][0]) == list(jobs_cli.TASK_FIELDS)
    assert main(["jobs", "show", str(job["id"]), "--token", token]) == 0
    out = capsys.readouterr().out
    assert f"job {job['id']}: model mlp (4 tasks)" in out and "status: waiting" in out
    for t in job["model"]["tasks"]:
        assert t["key"][:12] in out and t["pattern"] in out


def test_a_model_and_an_operator_together_are_refused(
    cli: Api, capsys: pytest.CaptureFixture[str], mlp_file: Path
) -> None:
    argv = ["jobs", "submit", "gelu", "m=8", "n=8", "--model", str(mlp_file), "--token", "t"]
    assert main(argv) == 2
    assert "--model tunes a whole model" in capsys.readouterr().err


def test_show_separates_a_note_from_an_error(cli: Api, capsys: pytest.CaptureFixture[str]) -> None:
    token = cli.token("client")
    job = cli.submit(token)
    note = "the design space ran out after 3 new trials"
    with cli.engine.begin() as conn:
        conn.execute(
            text("UPDATE jobs SET status = 'succeeded', note = :n WHERE id = :id"),
            {"n": note, "id": job["id"]},
        )
    assert main(["jobs", "show", str(job["id"]), "--token", token]) == 0
    out = capsys.readouterr().out
    assert f"note: {note}" in out and "error:" not in out
    assert main(["jobs", "show", str(job["id"]), "--json", "--token", token]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["note"] == note and shown["error"] is None


def test_submit_for_host_before_any_worker_waits_and_says_why(
    cli: Api, capsys: pytest.CaptureFixture[str]
) -> None:
    token = cli.token("client")
    assert main(["jobs", "submit", "gelu", "m=8", "n=8", "--trials", "2", "--token", token]) == 0
    captured = capsys.readouterr()
    assert "status: waiting" in captured.out
    assert "waiting: 'host' means the CPU of this coordinator's workers" in captured.out
    assert "(waiting)" in captured.err
