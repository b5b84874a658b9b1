"""`loomtune.Client` against an in-process coordinator (SQLite): every call, and errors as `CoordinatorError`."""

from __future__ import annotations

import threading
import time

import pytest
from sqlalchemy import text

import loomtune
from ir.errors import LoomtuneError
from service.client import (
    Client,
    CoordinatorError,
    CoordinatorUnreachable,
    api_message,
    workload_spec,
)
from service.db.store import SQLDatabase
from tests.service.coordinator.apikit import ADMIN, ZEN, Api, result

MM = {"m": 16, "n": 16, "k": 16}


def _client(api: Api, secret: str) -> Client:
    return loomtune.Client(token=secret, http=api.http)


def test_jobs_submit_list_get_history_cancel(sqlite_api: Api) -> None:
    api = sqlite_api
    c = _client(api, api.token("client", "alice"))
    job = c.submit("matmul", MM, trials=4, target=ZEN, strategy="replay", seed=3)
    # queued, shown as waiting: no worker serves ZEN
    assert job["status"] == "waiting" and job["trials"] == 4 and job["trials_done"] == 0
    assert job["workload"]["op"] == "matmul" and job["workload"]["params"] == MM
    assert job["strategy"] == "replay" and job["seed"] == 3 and job["target"] == ZEN
    assert job["waiting_reason"]  # no worker serves ZEN
    assert [j["id"] for j in c.jobs()] == [job["id"]]
    assert c.jobs(status="succeeded") == []
    assert c.job(job["id"]) == job

    # A simulated worker measures two candidates: the history has them.
    worker = api.token("worker")
    ids = api.run_job(job["id"], 2)
    wid = api.register(worker)
    api.call("POST", f"/v1/workers/{wid}/lease", worker, json={"max_candidates": 2})
    r = api.call(
        "POST",
        f"/v1/workers/{wid}/results",
        worker,
        json={"results": [result(ids[0], 3.0), result(ids[1], 2.0)]},
    )
    assert r.status_code == 200, r.text
    history = c.history(job["id"])
    assert history["trials_done"] == 2 and sorted(p["best_ms"] for p in history["points"])[0] == 2.0
    assert c.job(job["id"])["best_latency_ms"] == 2.0

    cancelled = c.cancel(job["id"])
    assert cancelled["status"] == "cancelled" and cancelled["trials_done"] == 2
    assert c.cancel(job["id"])["status"] == "cancelled"  # again: nothing changes


def test_a_custom_workload_from_a_file_or_a_dict(sqlite_api: Api, tmp_path) -> None:
    from pathlib import Path

    c = _client(sqlite_api, sqlite_api.token("client"))
    path = Path(__file__).resolve().parents[2] / "examples" / "tanh_matmul.workload.json"
    job = c.submit(path, {"m": 32}, trials=2, target=ZEN)
    assert job["workload"]["spec"]["definition"]["format"] == "loomtune.workload/1"
    assert job["workload"]["params"]["m"] == 32
    import json

    again = c.submit(json.loads(path.read_text()), {"m": 32}, trials=2, target=ZEN)
    assert again["workload"]["key"] == job["workload"]["key"]
    assert workload_spec("matmul", {"m": "8"}) == {"op": "matmul", "params": {"m": 8}}
    with pytest.raises(LoomtuneError, match="parameter m must be an integer"):
        workload_spec("matmul", {"m": "eight"})


def test_api_errors_carry_the_status_and_the_message(sqlite_api: Api) -> None:
    api = sqlite_api
    alice = _client(api, api.token("client", "alice"))
    bob = _client(api, api.token("client", "bob"))
    job = alice.submit("matmul", MM, trials=2, target=ZEN)

    with pytest.raises(CoordinatorError) as e:
        alice.job(999_999)
    assert e.value.status == 404 and e.value.message == "job 999999 not found"
    assert str(e.value) == "coordinator: 404 job 999999 not found"
    with pytest.raises(CoordinatorError) as e:
        bob.job(job["id"])
    assert e.value.status == 403 and "another owner" in e.value.message
    with pytest.raises(CoordinatorError) as e:
        alice.submit("matmul", {"m": -3}, trials=2, target=ZEN)
    assert e.value.status == 422 and e.value.message.startswith("body.workload.params:")
    assert isinstance(e.value.detail, list) and e.value.detail[0]["loc"] == [
        "body",
        "workload",
        "params",
    ]
    with pytest.raises(CoordinatorError) as e:
        alice.submit("matmul", MM, trials=0, target=ZEN)
    assert e.value.status == 422 and "body.trials" in e.value.message
    with pytest.raises(CoordinatorError) as e:
        _client(api, "lt_not-a-token").jobs()
    assert e.value.status == 401
    with pytest.raises(CoordinatorError) as e:
        alice.tokens()
    assert e.value.status == 403
    assert api_message([{"loc": ["query", "m"], "msg": "bad"}, "x"]) == "query.m: bad; x"


def test_wait_follows_the_job_until_it_ends(sqlite_api: Api) -> None:
    api = sqlite_api
    c = _client(api, api.token("client"))
    job = c.submit("matmul", MM, trials=2, target=ZEN)

    def finish() -> None:
        time.sleep(0.3)
        with api.engine.begin() as conn:
            conn.execute(
                text("UPDATE jobs SET status = 'running', trials_done = 1 WHERE id = :id"),
                {"id": job["id"]},
            )
        time.sleep(0.3)
        with api.engine.begin() as conn:
            conn.execute(
                text("UPDATE jobs SET status = 'succeeded', trials_done = 2 WHERE id = :id"),
                {"id": job["id"]},
            )

    seen: list[tuple[str, int]] = []
    t = threading.Thread(target=finish)
    t.start()
    done = c.wait(
        job["id"],
        poll_seconds=0.05,
        timeout=30,
        on_progress=lambda j: seen.append((j["status"], j["trials_done"])),
    )
    t.join()
    assert done["status"] == "succeeded" and done["trials_done"] == 2
    # queued and running are shown as waiting while no worker serves ZEN
    assert seen[0] == ("waiting", 0) and ("waiting", 1) in seen and seen[-1] == ("succeeded", 2)

    other = c.submit("matmul", MM, trials=2, target=ZEN)
    with pytest.raises(TimeoutError, match=f"job {other['id']} did not finish"):
        c.wait(other["id"], poll_seconds=0.05, timeout=0.2)


def test_best_workloads_and_records(sqlite_api: Api) -> None:
    api = sqlite_api
    c = _client(api, api.token("client"))
    job = c.submit("matmul", MM, trials=2, target=ZEN)
    with pytest.raises(CoordinatorError) as e:
        c.best("matmul", MM, target=ZEN)
    assert e.value.status == 404
    worker = api.token("worker")
    ids = api.run_job(job["id"], 2)
    wid = api.register(worker)
    api.call("POST", f"/v1/workers/{wid}/lease", worker, json={"max_candidates": 2})
    api.call(
        "POST",
        f"/v1/workers/{wid}/results",
        worker,
        json={"results": [result(ids[0], 3.0), result(ids[1], status="crashed")]},
    )

    best = c.best("matmul", MM, target=ZEN)
    assert best["latency_ms"] == 3.0 and best["trace_file"]["format"] == "loomtune.trace/1"
    assert best["retimed_ms"] is None  # no tuning run's finalists chose it
    assert best["trace_file"]["workload"] == {"op": "matmul", "params": MM}
    assert c.best(workload_key=best["workload_key"], target=ZEN) == best
    assert c.best("matmul", MM) == best  # host: the CPU of the registered workers
    with pytest.raises(TypeError):
        c.best("matmul", MM, workload_key=best["workload_key"])
    (workload,) = c.workloads(op="matmul")
    assert workload["key"] == best["workload_key"] and workload["records"] == 2
    records = c.records(best["workload_key"], target=ZEN)
    assert [r["status"] for r in records] == ["ok", "crashed"]
    assert [r["status"] for r in c.records(best["workload_key"], status="crashed")] == ["crashed"]

    SQLDatabase(api.engine).commit_final(best["workload_key"], ZEN, best["record_id"], 3.25)
    assert c.best("matmul", MM, target=ZEN) == {**best, "retimed_ms": 3.25}


def test_tokens_and_workers_with_an_admin_token(sqlite_api: Api) -> None:
    admin = _client(sqlite_api, ADMIN)
    made = admin.create_token("worker", "farm")
    assert made["role"] == "worker" and made["owner"] == "farm" and made["secret"].startswith("lt_")
    assert made["id"] in [t["id"] for t in admin.tokens()]
    sqlite_api.register(made["secret"])
    (w,) = admin.workers()
    assert w["owner"] == "farm" and w["target"] == ZEN and w["alive"]
    assert admin.revoke_token(made["id"])["revoked_at"] is not None
    assert admin.health()["status"] == "ok"


def test_url_and_token_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOOMTUNE_COORDINATOR", "http://127.0.0.1:9/")
    monkeypatch.setenv("LOOMTUNE_TOKEN", "lt_from-env")
    with Client() as c:
        assert c.url == "http://127.0.0.1:9" and c._headers == {
            "Authorization": "Bearer lt_from-env"
        }
    with (
        Client("http://127.0.0.1:1", "t", timeout=2) as c,
        pytest.raises(CoordinatorUnreachable) as e,
    ):
        c.jobs()
    assert e.value.status is None and "cannot reach http://127.0.0.1:1" in str(e.value)
    monkeypatch.delenv("LOOMTUNE_COORDINATOR")
    with pytest.raises(LoomtuneError, match="no coordinator"):
        Client()
    with pytest.raises(LoomtuneError, match="http:// or https://"):
        Client("tuner:8000")
