"""A model job end to end: `loomtune jobs submit --model` to a real coordinator (`loomtune serve`
on SQLite), two real `loomtune worker`s measure its tasks' candidates, the budget is spent
exactly once over the tasks, and `loomtune run --model --coordinator` builds the model from
the records and verifies it."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import onnx
import pytest

from frontend.onnx import load_onnx
from ir.graph.interpret import run_graph
from loomtune import load_model
from service.model import check_outputs, sample_inputs
from tests import models
from tests.e2e.cluster import ROOT, Coordinator, Proc, Worker, base_env, command, core_list

SETTINGS = {"LOOMTUNE_LEASE_SECONDS": "3", "LOOMTUNE_HEARTBEAT_SECONDS": "0.5"}
TRIALS = 8


@pytest.fixture
def coordinator(tmp_path: Path) -> Iterator[Coordinator]:
    c = Coordinator(f"sqlite:///{tmp_path / 'coordinator.db'}", **SETTINGS)
    try:
        yield c.start()
    finally:
        c.close()


@pytest.fixture
def procs() -> Iterator[list[Proc]]:
    started: list[Proc] = []
    yield started
    for p in started:
        p.stop()


def cli(argv: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command(["loomtune", *argv]),
        cwd=ROOT,
        env=base_env(**env),
        capture_output=True,
        text=True,
        timeout=240,
    )


def test_a_model_job_spends_its_budget_once_over_two_workers_and_builds(
    coordinator: Coordinator, procs: list[Proc], tmp_path: Path
) -> None:
    c = coordinator
    model = tmp_path / "mlp.onnx"
    # Kernels of tens of microseconds: a confirmation re-timing them is not lost in noise.
    onnx.save(models.mlp(batch=16, features=128, hidden=128, classes=32), model)
    token = c.token("worker", "farm")
    cores = core_list()
    workers = [Worker(c.url, token, cores[i % len(cores)]) for i in range(2)]
    procs.extend(workers)
    for w in workers:
        w.ready()
    client = c.token("client", "alice")
    # replay: the learned search's cost-model rounds took 27 s of the job under load, vs 9 s
    argv = ["jobs", "submit", "--model", str(model), "--trials", str(TRIALS)]
    argv += ["--strategy", "replay", "--seed", "1"]
    submit = cli(
        [*argv, "--wait", "--json"],
        LOOMTUNE_COORDINATOR=c.url,
        LOOMTUNE_TOKEN=client,
    )
    assert submit.returncode == 0, submit.stderr
    job = json.loads(submit.stdout)
    assert job["status"] == "succeeded" and job["error"] is None, job
    assert job["trials"] == TRIALS and job["trials_done"] == TRIALS
    tasks = job["model"]["tasks"]
    assert len(tasks) == 4 and sum(t["trials"] for t in tasks) == TRIALS
    # A confirmation that a noisy machine refutes quarantines a worker and hides its
    # records (docs/architecture.md "Trust"): a task's best may then be unknown.
    known = [t for t in tasks if t["best_ms"] is not None]
    if len(known) == len(tasks):
        assert job["best_latency_ms"] > 0 and sum(t["share"] for t in tasks) == pytest.approx(1)

    # The budget, spent exactly once: one record per tuning candidate, TRIALS in all, each
    # by a registered worker (a batch of a small budget may go to one worker alone).
    children = ",".join(str(t["job_id"]) for t in tasks)
    tuning = c.rows(
        "SELECT c.id, c.status, count(r.record_id) FROM candidates c "
        "LEFT JOIN records r ON r.candidate_id = c.id "
        f"WHERE c.job_id IN ({children}) AND c.confirms = '' GROUP BY c.id, c.status"
    )
    assert len(tuning) == TRIALS and all(s == "done" and n == 1 for _, s, n in tuning), tuning
    by_worker = c.rows(
        f"SELECT worker_id, count(*) FROM records WHERE job_id IN ({children}) GROUP BY worker_id"
    )
    assert {w for w, _ in by_worker} <= {w.id for w in workers}
    assert sum(n for _, n in by_worker) == TRIALS, by_worker

    shown = cli(["jobs", "show", str(job["id"]), "--coordinator", c.url, "--token", client])
    assert shown.returncode == 0, shown.stderr
    assert "model mlp (4 tasks)" in shown.stdout and tasks[0]["pattern"] in shown.stdout

    run = cli(["run", "--model", str(model), "--coordinator", c.url, "--token", client, "--json"])
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)
    assert result["correct"] is True and result["tuned_tasks"] == len(known), result

    # The Python API builds from the same records, with the real weights.
    graph = load_onnx(model)
    (x,) = sample_inputs(graph)
    compiled = load_model(model, coordinator=c.url, token=client)
    problem, _ = check_outputs(compiled(x), run_graph(graph, [x]), list(graph.outputs))
    assert problem is None, problem
