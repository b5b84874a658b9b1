"""Coordinators that die and coordinators side by side, with the real job runner and real workers.

Jobs are submitted over HTTP and driven by `loomtune serve`'s own job runner
(not the test): the coordinator killed with SIGKILL mid-job and started again
resumes the job from the database; two coordinators on one PostgreSQL drive
each job exactly once.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest

from tests.e2e.cluster import Coordinator, Proc, Worker, core_list, free_port
from tests.e2e.test_workers import SETTINGS, e2e_schema, records_per_candidate
from tests.postgresql import pg_url_for


@pytest.fixture
def procs() -> Iterator[list[Proc]]:
    started: list[Proc] = []
    yield started
    for p in started:
        p.stop()


def submit(c: Coordinator, token: str, m: int, trials: int) -> int:
    body = {
        "workload": {"op": "matmul", "params": {"m": m, "n": 32, "k": 16}},
        "target": "host",
        "trials": trials,
        "strategy": "replay",
        "seed": 5,
    }
    r = httpx.post(
        f"{c.url}/v1/jobs", json=body, headers={"Authorization": f"Bearer {token}"}, timeout=30
    )
    assert r.status_code == 201, r.text
    return r.json()["id"]


def job(c: Coordinator, token: str, job_id: int) -> dict:
    r = httpx.get(
        f"{c.url}/v1/jobs/{job_id}", headers={"Authorization": f"Bearer {token}"}, timeout=30
    )
    assert r.status_code == 200, r.text
    return r.json()


def wait_status(c: Coordinator, token: str, job_id: int, timeout: float = 180) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        state = job(c, token, job_id)
        if state["status"] in ("succeeded", "failed", "cancelled"):
            return state
        assert time.monotonic() < deadline, (
            f"job {job_id} still {state['status']} after {timeout} s: {state}"
        )
        time.sleep(0.2)


def test_a_coordinator_killed_mid_job_resumes_it_after_a_restart(procs: list[Proc]) -> None:
    for schema in e2e_schema():
        c = Coordinator(pg_url_for(schema), port=free_port(), **SETTINGS)
        try:
            c.start()
            worker = Worker(c.url, c.token("worker", "farm"), core_list()[0])
            procs.append(worker)
            worker.ready()
            client = c.token("client", "alice")
            trials = 12
            job_id = submit(c, client, 40, trials)
            deadline = time.monotonic() + 120
            while job(c, client, job_id)["trials_done"] < 5:
                assert time.monotonic() < deadline
                time.sleep(0.1)
            c.kill()  # SIGKILL: the job stays "running" under a lease that now runs out
            assert c.count("SELECT trials_done FROM jobs WHERE id = :j", j=job_id) < trials
            time.sleep(1.0)
            c.serve()  # same database and port; its job runner claims the job once the lease expired
            try:
                done = wait_status(c, client, job_id, timeout=60)
            except AssertionError:
                print(
                    "CANDIDATES",
                    c.rows(
                        "SELECT id, status, lease_holder, lease_expires_at, attempts FROM candidates WHERE job_id = :j ORDER BY id",
                        j=job_id,
                    ),
                )
                print(
                    "JOB", c.rows("SELECT status, runner, runner_expires_at, trials_done FROM jobs")
                )
                print("LOG", c.proc.text()[-4000:])
                print("WORKER", worker.text()[-3000:])
                raise
            assert done["status"] == "succeeded" and done["trials_done"] == trials, done
            counts = records_per_candidate(c, job_id)
            assert len(counts) == trials and set(counts.values()) == {1}
            hashes = [
                h for (h,) in c.rows("SELECT trace_hash FROM records WHERE job_id = :j", j=job_id)
            ]
            assert len(hashes) == len(set(hashes)) == trials  # nothing measured twice
            assert worker.proc.poll() is None and "reachable again" in worker.text()
        finally:
            c.close()


def test_two_coordinators_on_one_database_drive_each_job_once(procs: list[Proc]) -> None:
    for schema in e2e_schema():
        url = pg_url_for(schema)
        first = Coordinator(url, port=free_port(), **SETTINGS).start()
        second = Coordinator(url, port=free_port(), **SETTINGS).serve()
        try:
            token = first.token("worker", "farm")
            cores = core_list()
            for i, c in enumerate((first, second)):
                w = Worker(c.url, token, cores[i % len(cores)])
                procs.append(w)
                w.ready()
            client = first.token("client", "alice")
            trials = 6
            ids = [submit(first if i % 2 else second, client, 24 + 8 * i, trials) for i in range(4)]
            for job_id in ids:
                done = wait_status(first, client, job_id)
                assert done["status"] == "succeeded" and done["trials_done"] == trials, done
                # one driver per job: exactly its budget of candidates was ever written
                # (besides the confirmation of its best by the other worker)
                assert (
                    first.count(
                        "SELECT count(*) FROM candidates WHERE job_id = :j AND confirms = ''",
                        j=job_id,
                    )
                    == trials
                )
                assert (
                    first.count("SELECT count(*) FROM records WHERE job_id = :j", j=job_id)
                    == trials
                )
        finally:
            second.kill()
            second.engine.dispose()
            first.close()
