"""The coordinator's job runner: jobs driven by the tuner's loop, measured by a worker over the API.

The worker here is played in-process over HTTP (register, lease, measure with
the real `Measurer` — compile, verify, time on this machine — and report);
the real `loomtune worker` daemon is tested end to end in tests/e2e.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from codegen.host import host_target
from ir.target import Target
from service.coordinator.runner import JobRunnerService
from tests.service.coordinator.apikit import Api
from tuner.trace.trace import Trace
from workers.measure import Measurer

HOST = host_target(1).canonical()
TRIALS = 6
"""Each job's budget in the run-to-budget test: more than one lease of the played worker's 4."""


class PlayedWorker:
    """A worker over the REST API, measuring for real in this process."""

    def __init__(self, api: Api) -> None:
        self.api = api
        self.secret = api.token("worker", owner="lab")
        self.id = api.register(self.secret, target=HOST, name="played")
        self.measurer = Measurer(worker="played")
        self.measured: list[str] = []

    def step(self, batch: int = 4) -> int:
        from ir.task import task_from_spec

        r = self.api.call(
            "POST", f"/v1/workers/{self.id}/lease", self.secret, json={"max_candidates": batch}
        )
        assert r.status_code == 200, r.text
        results = []
        for c in r.json()["candidates"]:
            task = task_from_spec(c["workload"])
            res = self.measurer.measure(
                task, Target.parse(c["target"]), Trace.from_json(c["trace"])
            )
            self.measured.append(c["trace_hash"])
            results.append(
                {
                    "candidate_id": c["candidate_id"],
                    "record_id": str(uuid.uuid4()),
                    "status": res.status,
                    "run_times_ms": list(res.run_times_ms),
                    "message": res.message,
                    "llvm_version": res.llvm_version,
                }
            )
        if results:
            p = self.api.call(
                "POST", f"/v1/workers/{self.id}/results", self.secret, json={"results": results}
            )
            assert p.status_code in (200, 409), p.text
        return len(results)


def job(api: Api, secret: str, job_id: int) -> dict[str, Any]:
    r = api.call("GET", f"/v1/jobs/{job_id}", secret)
    assert r.status_code == 200, r.text
    return r.json()


def serve(
    api: Api,
    worker: PlayedWorker,
    secret: str,
    job_id: int,
    done: Callable[[dict[str, Any]], bool],
    runner: tuple[JobRunnerService, threading.Thread] | None = None,
    timeout: float = 120,
) -> tuple[dict[str, Any], threading.Thread | None]:
    """Step the worker until `done(job state)`; fails with the job's state after `timeout`.

    With `runner`, its thread is restarted when it has ended: on a loaded machine the
    worker's last call can be older than a test's short lease when the runner looks for
    a live worker, and the runner then claims nothing and ends. Returns the state and
    the runner's (last) thread.
    """
    thread = None if runner is None else runner[1]
    deadline = time.monotonic() + timeout
    while not done(state := job(api, secret, job_id)):
        assert time.monotonic() < deadline, f"job {job_id} did not finish as expected: {state}"
        if runner is not None and thread is not None and not thread.is_alive():
            thread = runner_thread(runner[0])
        if worker.step() == 0:
            time.sleep(0.05)
    return state, thread


def finished(state: dict[str, Any]) -> bool:
    return state["status"] in ("succeeded", "failed")


def runner_thread(runner: JobRunnerService) -> threading.Thread:
    t = threading.Thread(target=runner.run_one, daemon=True)
    t.start()
    return t


@pytest.mark.parametrize("strategy", ["replay", "evolutionary"])
def test_a_job_runs_to_its_budget_and_its_best_is_queryable(api: Api, strategy: str) -> None:
    worker = PlayedWorker(api)
    client = api.token("client", owner="alice")
    submitted = api.submit(
        client, target="host", trials=TRIALS, op="matmul", params={"m": 40, "n": 24, "k": 16}
    )
    r = api.call(
        "POST",
        "/v1/jobs",
        client,
        json={
            "workload": {"op": "matmul", "params": {"m": 40, "n": 24, "k": 16}},
            "target": "host",
            "trials": TRIALS,
            "strategy": strategy,
            "seed": 3,
        },
    )
    assert r.status_code == 201, r.text
    job_id = r.json()["id"]
    runner = JobRunnerService(api.engine, lease_seconds=30)
    first = runner_thread(runner)  # the first submitted job
    serve(api, worker, client, submitted["id"], lambda s: s["status"] == "succeeded")
    first.join(30)
    second = runner_thread(runner)
    done, _ = serve(api, worker, client, job_id, finished)
    second.join(30)
    assert done["status"] == "succeeded", done
    assert done["trials_done"] == TRIALS and done["best_latency_ms"] > 0
    assert api.count("SELECT count(*) FROM records WHERE job_id = :j", j=job_id) == TRIALS
    history = api.call("GET", f"/v1/jobs/{job_id}/history", client).json()
    assert len(history["points"]) == TRIALS and history["points"][-1]["best_ms"] == pytest.approx(
        done["best_latency_ms"]
    )
    best = api.call(
        "GET", "/v1/schedules/best", client, params={"workload_key": _key(), "target": HOST}
    )
    assert best.status_code == 200, best.text
    assert best.json()["trace_file"]["target"] == HOST
    assert best.json()["latency_ms"] <= done["best_latency_ms"] + 1e-9
    # a trace is measured once per workload and target, across the two jobs
    assert len(worker.measured) == len(set(worker.measured)) == 2 * TRIALS


def _key() -> str:
    from ir.task import library_task

    return library_task("matmul", {"m": 40, "n": 24, "k": 16}).key


def distinct_samples(op: str, params: dict[str, int], draws: int = 400) -> int:
    """How many distinct traces random sampling of the op's default space reaches."""
    import random

    from codegen.host import host_target
    from ir.task import library_task
    from tuner.space import default_space

    task = library_task(op, params)
    space = default_space(task.program, host_target(1))
    rng = random.Random(0)
    return len({space.sample(rng).hash for _ in range(draws)})


def test_a_space_that_runs_out_succeeds_with_fewer_trials_and_says_so(api: Api) -> None:
    worker = PlayedWorker(api)
    client = api.token("client", owner="alice")
    # a 1x1 gelu leaves the design space a handful of distinct schedules
    reachable = distinct_samples("gelu", {"m": 1, "n": 1})
    assert 0 < reachable < 50
    r = api.call(
        "POST",
        "/v1/jobs",
        client,
        json={
            "workload": {"op": "gelu", "params": {"m": 1, "n": 1}},
            "target": "host",
            "trials": 50,
            "strategy": "replay",
        },
    )
    job_id = r.json()["id"]
    runner = JobRunnerService(api.engine, lease_seconds=30)
    t = runner_thread(runner)
    done, _ = serve(api, worker, client, job_id, finished)
    t.join(30)
    assert done["status"] == "succeeded" and done["trials_done"] == reachable
    # A remark on a job that succeeded is its note, not an error.
    assert "ran out" in (done["note"] or "") and done["error"] is None


def test_cancel_stops_the_runner_and_keeps_the_records(api: Api) -> None:
    worker = PlayedWorker(api)
    client = api.token("client", owner="alice")
    r = api.call(
        "POST",
        "/v1/jobs",
        client,
        json={
            "workload": {"op": "matmul", "params": {"m": 48, "n": 32, "k": 16}},
            "target": "host",
            "trials": 200,
            "strategy": "replay",
        },
    )
    job_id = r.json()["id"]
    runner = JobRunnerService(api.engine, lease_seconds=30)
    _, t = serve(
        api,
        worker,
        client,
        job_id,
        lambda s: s["trials_done"] >= 5,
        (runner, runner_thread(runner)),
    )
    assert api.call("POST", f"/v1/jobs/{job_id}/cancel", client).status_code == 200
    t.join(30)
    assert not t.is_alive()
    state = job(api, client, job_id)
    assert state["status"] == "cancelled" and 5 <= state["trials_done"] < 200
    assert (
        api.count("SELECT count(*) FROM records WHERE job_id = :j", j=job_id)
        == state["trials_done"]
    )


def test_a_restarted_coordinator_resumes_the_job_from_the_database(api: Api) -> None:
    worker = PlayedWorker(api)
    client = api.token("client", owner="alice")
    job_id = api.submit(
        client, target="host", trials=12, op="matmul", params={"m": 48, "n": 32, "k": 16}
    )["id"]
    first = JobRunnerService(api.engine, lease_seconds=1.5, name="first")
    _, t = serve(
        api, worker, client, job_id, lambda s: s["trials_done"] >= 6, (first, runner_thread(first))
    )
    first.stop(timeout=30)  # the process stops: the job stays running, its lease runs out
    t.join(30)
    assert job(api, client, job_id)["status"] == "running"
    time.sleep(1.6)
    second = JobRunnerService(api.engine, lease_seconds=30, name="second")
    t2 = runner_thread(second)
    done, _ = serve(api, worker, client, job_id, finished)
    t2.join(30)
    assert done["status"] == "succeeded" and done["trials_done"] == 12
    hashes = [
        h for (h,) in _rows(api, "SELECT trace_hash FROM records WHERE job_id = :j", j=job_id)
    ]
    assert len(hashes) == len(set(hashes)) == 12


def _rows(api: Api, sql: str, **params: Any) -> list[tuple[Any, ...]]:
    from sqlalchemy import text

    with api.engine.connect() as conn:
        return [tuple(r) for r in conn.execute(text(sql), params)]


def test_two_runners_never_drive_the_same_job(api: Api) -> None:
    from service.coordinator import jobs

    client = api.token("client", owner="alice")
    api.token("worker", owner="lab")
    PlayedWorker(api)
    ids = [
        api.submit(
            client, target="host", trials=5, op="matmul", params={"m": 8 + i, "n": 8, "k": 8}
        )["id"]
        for i in range(3)
    ]
    claimed: list[int] = []
    lock = threading.Lock()

    def claim(name: str) -> None:
        from service.db.session import Sessions

        sessions = Sessions(api.engine)
        while True:
            with sessions.write() as s:
                j = jobs.claim_job(s, name, 600)
                if j is None:
                    return
                with lock:
                    claimed.append(j.id)

    threads = [threading.Thread(target=claim, args=(f"r{i}",)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(claimed) == sorted(ids)
