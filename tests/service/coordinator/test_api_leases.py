"""Workers lease candidates, report results and hand leases back, on SQLite and PostgreSQL.

The job runner's part (claim the job, write candidates) is played through its
seam in `service.coordinator.jobs`; workers are simulated by HTTP calls.
"""

from __future__ import annotations

import time
import uuid
from datetime import timedelta

from sqlalchemy import update

from service.coordinator import jobs
from service.db import models as m
from tests.service.coordinator.apikit import ADMIN, SKX, ZEN, Api, make_api, result
from tuner.database import utc_now


def _setup(api: Api, candidates: int = 4) -> tuple[str, str, dict, list[int], int]:
    client, worker = api.token("client", "alice"), api.token("worker", "farm")
    job = api.submit(client, trials=candidates)
    ids = api.run_job(job["id"], candidates)
    wid = api.register(worker)
    return client, worker, job, ids, wid


def _lease(api: Api, worker: str, wid: int, n: int) -> list[dict]:
    r = api.call("POST", f"/v1/workers/{wid}/lease", worker, json={"max_candidates": n})
    assert r.status_code == 200, r.text
    return r.json()["candidates"]


def test_a_result_becomes_a_record_and_counts_as_a_trial(api: Api) -> None:
    client, worker, job, ids, wid = _setup(api)
    leased = _lease(api, worker, wid, 3)
    assert [c["candidate_id"] for c in leased] == ids[:3]
    first = leased[0]
    assert first["job_id"] == job["id"] and first["target"] == ZEN and first["attempt"] == 1
    assert first["workload"] == {"op": "matmul", "params": {"m": 16, "n": 16, "k": 16}}
    assert first["workload_key"] == job["workload"]["key"]
    assert first["trace"]["version"] == 1 and len(first["trace_hash"]) == 64

    posted = [result(ids[0], 2.0), result(ids[1], status="compile_error")]
    r = api.call("POST", f"/v1/workers/{wid}/results", worker, json={"results": posted})
    assert r.status_code == 200, r.text
    assert r.json() == {"accepted": ids[:2], "duplicates": []}

    shown = api.call("GET", f"/v1/jobs/{job['id']}", client).json()
    assert shown["status"] == "running" and shown["trials_done"] == 2
    assert shown["best_latency_ms"] == 2.0 and shown["best_record_id"] == posted[0]["record_id"]
    assert shown["waiting_reason"] is None
    history = api.call("GET", f"/v1/jobs/{job['id']}/history", client).json()
    # One post's results share a time: their order in the curve is by record id.
    points = sorted((p["status"], p["latency_ms"]) for p in history["points"])
    assert (
        points == [("compile_error", None), ("ok", 2.0)] and history["points"][-1]["best_ms"] == 2.0
    )

    # The records are TuningRecords of the database, with the job and the candidate.
    with api.sessions.read() as s:
        done = jobs.candidate_results(s, ids)
    assert set(done) == set(ids[:2])
    ok = done[ids[0]]
    assert ok.record_id == posted[0]["record_id"] and ok.median_ms == 2.0 and ok.status == "ok"
    assert (
        ok.job_id == job["id"]
        and ok.target == ZEN
        and ok.worker == "w"
        and ok.llvm_version == "22.1.0"
    )
    assert done[ids[1]].status == "compile_error" and done[ids[1]].median_ms is None
    assert api.count("SELECT count(*) FROM candidates WHERE status = 'done'") == 2

    # Records and the best schedule over the API.
    key = job["workload"]["key"]
    records = api.call("GET", f"/v1/workloads/{key}/records", client).json()["records"]
    assert [r["status"] for r in records] == ["ok", "compile_error"]
    best = api.call(
        "GET", "/v1/schedules/best", client, params={"workload_key": key, "target": ZEN}
    ).json()
    assert best["record_id"] == posted[0]["record_id"] and best["latency_ms"] == 2.0
    assert best["trace_file"]["format"] == "loomtune.trace/1"
    assert best["trace_file"]["workload"] == {"op": "matmul", "params": {"m": 16, "n": 16, "k": 16}}
    by_op = api.call(
        "GET",
        "/v1/schedules/best",
        client,
        params={"op": "matmul", "m": 16, "n": 16, "k": 16, "target": ZEN},
    ).json()
    assert by_op["record_id"] == best["record_id"]
    assert (
        api.call(
            "GET", "/v1/schedules/best", client, params={"workload_key": key, "target": SKX}
        ).status_code
        == 404
    )


def test_results_are_idempotent(api: Api) -> None:
    client, worker, job, ids, wid = _setup(api)
    _lease(api, worker, wid, 2)
    posted = [result(ids[0]), result(ids[1], 3.0)]
    first = api.call("POST", f"/v1/workers/{wid}/results", worker, json={"results": posted})
    again = api.call("POST", f"/v1/workers/{wid}/results", worker, json={"results": posted})
    assert first.json() == {"accepted": ids[:2], "duplicates": []}
    assert again.status_code == 200 and again.json() == {"accepted": [], "duplicates": ids[:2]}
    assert api.count("SELECT count(*) FROM records") == 2
    assert api.call("GET", f"/v1/jobs/{job['id']}", client).json()["trials_done"] == 2
    # The same candidate with another record id is not a repeat: that lease is spent.
    r = api.call("POST", f"/v1/workers/{wid}/results", worker, json={"results": [result(ids[0])]})
    assert r.status_code == 409
    # One record id for two measurements is refused.
    _lease(api, worker, wid, 1)
    r = api.call(
        "POST",
        f"/v1/workers/{wid}/results",
        worker,
        json={"results": [result(ids[2], record_id=posted[0]["record_id"])]},
    )
    assert r.status_code == 409 and "already another measurement" in r.json()["detail"]


def test_expired_leases_are_redispatched_and_late_results_refused(api: Api) -> None:
    client, worker, job, ids, wid = _setup(api, candidates=3)
    other_worker = api.register(worker, name="w2")
    leased = _lease(api, worker, wid, 2)
    assert [c["candidate_id"] for c in leased] == ids[:2]
    api.expire_leases()
    # Another worker gets them back, oldest first, as second attempts.
    again = _lease(api, worker, other_worker, 3)
    assert [(c["candidate_id"], c["attempt"]) for c in again] == [
        (ids[0], 2),
        (ids[1], 2),
        (ids[2], 1),
    ]
    # The first worker's late result is refused and stores nothing (all or nothing).
    late = api.call(
        "POST",
        f"/v1/workers/{wid}/results",
        worker,
        json={"results": [result(ids[0]), result(ids[1])]},
    )
    assert late.status_code == 409
    assert f"no longer holds the lease on candidate(s) {ids[0]}, {ids[1]}" in late.json()["detail"]
    assert api.count("SELECT count(*) FROM records") == 0
    assert api.call("GET", f"/v1/jobs/{job['id']}", client).json()["trials_done"] == 0
    # The new holder's results count.
    r = api.call(
        "POST",
        f"/v1/workers/{other_worker}/results",
        worker,
        json={"results": [result(i) for i in ids]},
    )
    assert r.status_code == 200 and r.json()["accepted"] == ids
    assert api.call("GET", f"/v1/jobs/{job['id']}", client).json()["trials_done"] == 3


def test_an_expired_lease_not_yet_redispatched_is_still_refused(api: Api) -> None:
    _, worker, _, ids, wid = _setup(api, candidates=1)
    _lease(api, worker, wid, 1)
    api.expire_leases()
    r = api.call("POST", f"/v1/workers/{wid}/results", worker, json={"results": [result(ids[0])]})
    assert r.status_code == 409
    # A heartbeat does not revive it.
    assert api.call("POST", f"/v1/workers/{wid}/heartbeat", worker).json()["leases_extended"] == 0
    assert (
        api.call(
            "POST", f"/v1/workers/{wid}/results", worker, json={"results": [result(ids[0])]}
        ).status_code
        == 409
    )


def test_release_hands_leases_back(api: Api) -> None:
    _, worker, _, ids, wid = _setup(api, candidates=3)
    second = api.register(worker, name="w2")
    _lease(api, worker, wid, 3)
    assert _lease(api, worker, second, 3) == []
    r = api.call("POST", f"/v1/workers/{wid}/release", worker, json={"candidate_ids": [ids[1]]})
    assert r.json() == {"released": [ids[1]]}
    assert [c["candidate_id"] for c in _lease(api, worker, second, 3)] == [ids[1]]
    assert api.call("POST", f"/v1/workers/{wid}/release", worker).json() == {
        "released": [ids[0], ids[2]]
    }
    r = api.call("POST", f"/v1/workers/{wid}/results", worker, json={"results": [result(ids[0])]})
    assert r.status_code == 409


def test_workers_lease_only_their_targets_candidates(api: Api) -> None:
    _, worker, _, _, _ = _setup(api, candidates=2)
    skx = api.register(worker, SKX, name="skx")
    assert _lease(api, worker, skx, 5) == []


def test_cancelling_withdraws_candidates(api: Api) -> None:
    client, worker, job, ids, wid = _setup(api, candidates=3)
    _lease(api, worker, wid, 1)
    api.call("POST", f"/v1/workers/{wid}/results", worker, json={"results": [result(ids[0])]})
    _lease(api, worker, wid, 1)
    assert api.call("POST", f"/v1/jobs/{job['id']}/cancel", client).json()["status"] == "cancelled"
    assert _lease(api, worker, wid, 5) == []
    r = api.call("POST", f"/v1/workers/{wid}/results", worker, json={"results": [result(ids[1])]})
    assert r.status_code == 409
    # The record measured before the cancel is kept.
    assert api.count("SELECT count(*) FROM records") == 1
    assert api.call("GET", f"/v1/jobs/{job['id']}", client).json()["trials_done"] == 1


def test_result_validation_is_422_naming_the_field(api: Api) -> None:
    _, worker, _, ids, wid = _setup(api, candidates=1)
    path = f"/v1/workers/{wid}/results"
    cases = [
        ({"results": [{**result(ids[0]), "run_times_ms": []}]}, ["body", "results", 0], "run time"),
        (
            {"results": [{**result(ids[0]), "record_id": "seven"}]},
            ["body", "results", 0, "record_id"],
            "uuid",
        ),
        ({"results": [{**result(ids[0]), "status": "fast"}]}, ["body", "results", 0, "status"], ""),
        (
            {"results": [{**result(ids[0]), "run_times_ms": [-1.0]}]},
            ["body", "results", 0, "run_times_ms", 0],
            "greater than 0",
        ),
        ({"results": []}, ["body", "results"], "at least 1"),
        ({"results": [result(ids[0]), result(ids[0])]}, ["body", "results"], "twice"),
    ]
    for body, loc, words in cases:
        r = api.call("POST", path, worker, json=body)
        assert r.status_code == 422, (body, r.text)
        detail = r.json()["detail"][0]
        assert detail["loc"] == loc and words in detail["msg"].lower(), detail
    r = api.call("POST", "/v1/workers", worker, json={"name": "w", "target": "host"})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "target"]
    r = api.call("POST", f"/v1/workers/{wid}/lease", worker, json={"max_candidates": 100000})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "max_candidates"]


def test_a_heartbeat_keeps_leases_alive(database_url: str) -> None:
    """Real time: a 3 s lease survives 3.6 s when the worker heartbeats in between, and ends
    without (margins of over a second: a loaded CI machine took 0.4 s for a request)."""
    api, client = make_api(database_url, lease_seconds=3.0)
    with client:
        _, worker, _, ids, wid = _setup(api, candidates=2)
        _lease(api, worker, wid, 2)
        time.sleep(1.8)
        assert (
            api.call("POST", f"/v1/workers/{wid}/heartbeat", worker).json()["leases_extended"] == 2
        )
        time.sleep(1.8)
        assert (
            api.call(
                "POST", f"/v1/workers/{wid}/results", worker, json={"results": [result(ids[0])]}
            ).status_code
            == 200
        )
        time.sleep(3.3)
        assert (
            api.call(
                "POST", f"/v1/workers/{wid}/results", worker, json={"results": [result(ids[1])]}
            ).status_code
            == 409
        )
        workers = api.call("GET", "/v1/workers", ADMIN).json()["workers"]
        assert workers[0]["alive"] is False and workers[0]["leases"] == 0
    api.engine.dispose()


def test_the_runner_seam(api: Api) -> None:
    """claim / renew / add candidates again / progress / finish, as the job runner will use them."""
    client = api.token("client")
    job = api.submit(client, trials=5)
    with api.sessions.write() as s:
        claimed = jobs.claim_job(s, "runner-a", 600)
        assert claimed is not None and claimed.id == job["id"] and claimed.status == "running"
        assert jobs.claim_job(s, "runner-b", 600) is None  # held by runner-a
        assert jobs.job_task(claimed).key == job["workload"]["key"]
        assert jobs.job_target(s, claimed) == ZEN
        first = jobs.add_candidates(s, job["id"], [({"t": 1}, "a" * 64), ({"t": 2}, "b" * 64)])
        assert (
            jobs.add_candidates(s, job["id"], [({"t": 2}, "b" * 64)]) == first[1:]
        )  # the same trace: the same candidate
    with api.sessions.write() as s:
        # runner-a's lease expires (its coordinator died): runner-b resumes the job.
        s.execute(update(m.Job).values(runner_expires_at=utc_now() - timedelta(seconds=1)))
    with api.sessions.write() as s:
        resumed = jobs.claim_job(s, "runner-b", 600)
        assert resumed is not None and resumed.id == job["id"]
        assert jobs.renew_job(s, job["id"], "runner-a", 600) is None
        assert jobs.renew_job(s, job["id"], "runner-b", 600) is not None
        progress = jobs.job_progress(s, job["id"])
        assert (progress.status, progress.trials_done, progress.outstanding) == ("running", 0, 2)
        assert not jobs.finish_job(s, job["id"], "runner-a", "succeeded")
        assert jobs.finish_job(s, job["id"], "runner-b", "failed", "the space is empty")
    shown = api.call("GET", f"/v1/jobs/{job['id']}", client).json()
    assert shown["status"] == "failed" and shown["error"] == "the space is empty"
    assert api.count("SELECT count(*) FROM candidates WHERE status = 'cancelled'") == 2


def test_record_ids_are_uuids_of_the_workers_choice(api: Api) -> None:
    _, worker, _, ids, wid = _setup(api, candidates=1)
    _lease(api, worker, wid, 1)
    rid = str(uuid.uuid4())
    api.call(
        "POST",
        f"/v1/workers/{wid}/results",
        worker,
        json={"results": [result(ids[0], record_id=rid)]},
    )
    assert api.count("SELECT count(*) FROM records WHERE record_id = :r", r=rid) == 1


def test_a_heartbeat_names_the_leases_held_so_a_lost_grant_can_be_handed_back(api: Api) -> None:
    _client, worker, _job, ids, wid = _setup(api)
    _lease(api, worker, wid, 2)  # the worker never saw this answer (its connection died)
    beat = api.call("POST", f"/v1/workers/{wid}/heartbeat", worker)
    assert beat.status_code == 200, beat.text
    assert beat.json()["held"] == ids[:2] and beat.json()["leases_extended"] == 2
    r = api.call("POST", f"/v1/workers/{wid}/release", worker, json={"candidate_ids": ids[:2]})
    assert r.status_code == 200 and sorted(r.json()["released"]) == ids[:2]
    assert api.call("POST", f"/v1/workers/{wid}/heartbeat", worker).json()["held"] == []
