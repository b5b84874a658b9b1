"""How a job says where it is: `waiting` (with why) while no live worker can measure it, and a
job for `host` submitted before any worker registered waits for the first one."""

from __future__ import annotations

from sqlalchemy import text

from service.coordinator import jobs
from tests.service.coordinator.apikit import ZEN, Api


def test_host_before_any_worker_waits_and_binds_to_the_first_workers_cpu(
    sqlite_api: Api,
) -> None:
    api = sqlite_api
    client, worker = api.token("client"), api.token("worker")
    r = api.call(
        "POST",
        "/v1/jobs",
        client,
        json={
            "workload": {"op": "gelu", "params": {"m": 8, "n": 8}},
            "target": "host",
            "trials": 2,
        },
    )
    assert r.status_code == 201, r.text  # it was a 422 before any worker registered
    job = r.json()
    assert job["status"] == "waiting" and "'host'" in job["waiting_reason"]
    assert "registers" in job["waiting_reason"]
    assert job["target"] == "host -num-threads=1"
    with api.sessions.write() as s:  # nothing to claim: no worker serves it
        assert jobs.claim_job(s, "runner", 60, alive_seconds=60) is None
    api.register(worker, ZEN)
    with api.sessions.write() as s:
        claimed = jobs.claim_job(s, "runner", 60, alive_seconds=60)
        assert claimed is not None and claimed.id == job["id"]
    shown = api.call("GET", f"/v1/jobs/{job['id']}", client).json()
    assert shown["target"] == ZEN and shown["status"] == "running"
    assert shown["waiting_reason"] is None


def test_a_running_job_whose_workers_went_silent_shows_waiting(sqlite_api: Api) -> None:
    api = sqlite_api
    client, worker = api.token("client"), api.token("worker")
    api.register(worker, ZEN)
    job = api.submit(client, target=ZEN)
    assert job["status"] == "queued"  # a live worker serves it; no runner has started it
    api.run_job(job["id"], 1)
    shown = api.call("GET", f"/v1/jobs/{job['id']}", client).json()
    assert shown["status"] == "running" and shown["waiting_reason"] is None
    with api.engine.begin() as conn:
        conn.execute(text("UPDATE workers SET last_heartbeat = '2000-01-01 00:00:00'"))
    shown = api.call("GET", f"/v1/jobs/{job['id']}", client).json()
    assert shown["status"] == "waiting"  # was "running" with nobody to measure it
    assert shown["waiting_reason"] == f"no live worker serves the target {ZEN}"
    history = api.call("GET", f"/v1/jobs/{job['id']}/history", client).json()
    assert history["status"] == "running"  # the stored status is unchanged
