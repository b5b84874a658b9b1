"""Submitting, showing and cancelling jobs; every bad input is a 422 naming its field."""

from __future__ import annotations

from typing import Any

import pytest

from tests.service.coordinator.apikit import ADMIN, SKX, ZEN, Api

MATMUL = {"op": "matmul", "params": {"m": 16, "n": 16, "k": 16}}
TANH_DEF = {
    "format": "loomtune.workload/1",
    "name": "twice",
    "sizes": {"n": 8},
    "inputs": [{"name": "A", "shape": ["n"], "dtype": "float32"}],
    "computes": [
        {"name": "B", "shape": ["n"], "axes": ["i"], "body": ["mul", ["load", "A", "i"], 2.0]}
    ],
    "outputs": ["B"],
}


def test_submit_answers_201_with_the_job(sqlite_api: Api) -> None:
    api = sqlite_api
    client = api.token("client", "alice")
    r = api.call(
        "POST",
        "/v1/jobs",
        client,
        json={
            "workload": MATMUL,
            "target": "llvm -mcpu=znver3 -mattr=+fma,+avx2,+avx",
            "trials": 32,
            "strategy": "replay",
            "seed": 7,
        },
    )
    assert r.status_code == 201, r.text
    job = r.json()
    assert job["status"] == "waiting" and job["owner"] == "alice"  # no worker serves ZEN
    assert job["target"] == ZEN  # canonical: features sorted, threads explicit
    assert (job["trials"], job["trials_done"], job["strategy"], job["seed"]) == (32, 0, "replay", 7)
    assert job["workload"]["op"] == "matmul" and job["workload"]["params"] == {
        "m": 16,
        "n": 16,
        "k": 16,
    }
    assert len(job["workload"]["key"]) == 64 and job["workload"]["spec"] == MATMUL
    assert job["best_latency_ms"] is None and job["error"] is None
    assert "no live worker serves" in job["waiting_reason"]
    assert api.call("GET", f"/v1/jobs/{job['id']}", client).json() == job
    history = api.call("GET", f"/v1/jobs/{job['id']}/history", client).json()
    assert history == {
        "job_id": job["id"],
        "status": "queued",
        "trials": 32,
        "trials_done": 0,
        "points": [],
    }
    # The workload is now known to the database.
    workloads = api.call("GET", "/v1/workloads", client).json()["workloads"]
    assert [w["key"] for w in workloads] == [job["workload"]["key"]]


def test_a_custom_workload_is_accepted(sqlite_api: Api) -> None:
    client = sqlite_api.token("client")
    job = sqlite_api.submit(client, definition=TANH_DEF, params={"n": 64})
    assert job["workload"]["op"] == "twice" and job["workload"]["params"] == {"n": 64}


def test_default_strategy_comes_from_the_tuner(sqlite_api: Api) -> None:
    from tuner.search.strategy import default_strategy

    job = sqlite_api.submit(sqlite_api.token("client"))
    assert job["strategy"] == default_strategy()


BAD: list[tuple[str, dict[str, Any], list[Any], str]] = [
    (
        "zero trials",
        {"workload": MATMUL, "trials": 0},
        ["body", "trials"],
        "greater than or equal to 1",
    ),
    (
        "over the max",
        {"workload": MATMUL, "trials": 1001},
        ["body", "trials"],
        "LOOMTUNE_MAX_TRIALS",
    ),
    ("no trials", {"workload": MATMUL}, ["body", "trials"], "required"),
    ("boolean trials", {"workload": MATMUL, "trials": True}, ["body", "trials"], "boolean"),
    (
        "unknown op",
        {"workload": {"op": "matmool"}, "trials": 1},
        ["body", "workload", "op"],
        "unknown operator",
    ),
    (
        "negative shape",
        {"workload": {"op": "matmul", "params": {"m": -4}}, "trials": 1},
        ["body", "workload", "params"],
        "m",
    ),
    (
        "huge shape",
        {"workload": {"op": "matmul", "params": {"m": 10**6, "n": 10**6, "k": 10**6}}, "trials": 1},
        ["body", "workload", "params"],
        "",
    ),
    (
        "unknown param",
        {"workload": {"op": "matmul", "params": {"q": 4}}, "trials": 1},
        ["body", "workload", "params"],
        "unknown parameter",
    ),
    (
        "param not an int",
        {"workload": {"op": "matmul", "params": {"m": "lots"}}, "trials": 1},
        ["body", "workload", "params", "m"],
        "integer",
    ),
    (
        "malformed definition",
        {"workload": {"definition": {"format": "loomtune.workload/1", "name": "x"}}, "trials": 1},
        ["body", "workload", "definition"],
        "",
    ),
    (
        "definition of another format",
        {"workload": {"definition": {"format": "nope"}}, "trials": 1},
        ["body", "workload", "definition"],
        "format",
    ),
    (
        "op and definition",
        {"workload": {"op": "matmul", "definition": TANH_DEF}, "trials": 1},
        ["body", "workload"],
        "exactly one",
    ),
    ("neither", {"workload": {"params": {}}, "trials": 1}, ["body", "workload"], "exactly one"),
    (
        "unparseable target",
        {"workload": MATMUL, "target": "gpu -fast", "trials": 1},
        ["body", "target"],
        "'host' or 'llvm'",
    ),
    (
        "target without cpu",
        {"workload": MATMUL, "target": "llvm -mattr=+avx", "trials": 1},
        ["body", "target"],
        "-mcpu",
    ),
    (
        "unknown strategy",
        {"workload": MATMUL, "target": ZEN, "trials": 1, "strategy": "magic"},
        ["body", "strategy"],
        "unknown strategy",
    ),
    (
        "negative seed",
        {"workload": MATMUL, "target": ZEN, "trials": 1, "seed": -1},
        ["body", "seed"],
        "",
    ),
    ("unknown field", {"workload": MATMUL, "trials": 1, "budget": 3}, ["body", "budget"], "Extra"),
]


@pytest.mark.parametrize("what, body, loc, words", BAD, ids=[b[0] for b in BAD])
def test_bad_submissions_are_422_naming_the_field(
    sqlite_api: Api, what: str, body: dict[str, Any], loc: list[Any], words: str
) -> None:
    client = sqlite_api.token("client")
    r = sqlite_api.call("POST", "/v1/jobs", client, json=body)
    assert r.status_code == 422, r.text
    errors = r.json()["detail"]
    assert errors[0]["loc"] == loc, errors
    assert words.lower() in errors[0]["msg"].lower(), errors
    assert sqlite_api.count("SELECT count(*) FROM jobs") == 0


def test_not_json_is_422(sqlite_api: Api) -> None:
    r = sqlite_api.call(
        "POST",
        "/v1/jobs",
        sqlite_api.token("client"),
        content=b"{not json",
        headers={"content-type": "application/json"},
    )
    assert r.status_code == 422


def test_host_means_the_workers_cpu_and_is_refused_when_ambiguous(sqlite_api: Api) -> None:
    api = sqlite_api
    client, worker = api.token("client"), api.token("worker")
    api.register(worker, ZEN)
    job = api.submit(client, target="host -num-threads=2")
    assert job["target"] == ZEN.replace("-num-threads=1", "-num-threads=2")
    api.register(worker, SKX)
    r = api.call(
        "POST", "/v1/jobs", client, json={"workload": MATMUL, "target": "host", "trials": 1}
    )
    assert r.status_code == 422
    assert (
        r.json()["detail"][0]["loc"] == ["body", "target"]
        and "ambiguous" in r.json()["detail"][0]["msg"]
    )


def test_a_target_no_worker_serves_waits_and_says_so(sqlite_api: Api) -> None:
    api = sqlite_api
    client, worker = api.token("client"), api.token("worker")
    api.register(worker, SKX)
    job = api.submit(client, target=ZEN)
    assert (
        job["status"] == "waiting"
        and job["waiting_reason"] == f"no live worker serves the target {ZEN}"
    )
    api.register(worker, ZEN)
    job = api.call("GET", f"/v1/jobs/{job['id']}", client).json()
    assert job["status"] == "queued" and "job runner" in job["waiting_reason"]


def test_cancel(sqlite_api: Api) -> None:
    api = sqlite_api
    client = api.token("client")
    job = api.submit(client)
    r = api.call("POST", f"/v1/jobs/{job['id']}/cancel", client)
    assert r.status_code == 200
    cancelled = r.json()
    assert (
        cancelled["status"] == "cancelled"
        and cancelled["finished_at"] is not None
        and cancelled["waiting_reason"] is None
    )
    assert api.call("POST", f"/v1/jobs/{job['id']}/cancel", client).json()["status"] == "cancelled"
    assert api.call("POST", "/v1/jobs/77/cancel", client).status_code == 404
    assert [
        j["id"] for j in api.call("GET", "/v1/jobs?status=cancelled", client).json()["jobs"]
    ] == [job["id"]]
    assert api.call("GET", "/v1/jobs?status=queued", client).json()["jobs"] == []


def test_a_finished_job_cannot_be_cancelled(sqlite_api: Api) -> None:
    from service.coordinator import jobs

    api = sqlite_api
    client = api.token("client")
    job = api.submit(client)
    api.run_job(job["id"], 1)
    with api.sessions.write() as s:
        assert jobs.finish_job(s, job["id"], "test-runner", "succeeded")
    r = api.call("POST", f"/v1/jobs/{job['id']}/cancel", client)
    assert r.status_code == 409 and "already succeeded" in r.json()["detail"]


def test_path_and_query_validation(sqlite_api: Api) -> None:
    client = sqlite_api.token("client")
    assert sqlite_api.call("GET", "/v1/jobs/0", client).status_code == 422
    assert sqlite_api.call("GET", f"/v1/jobs/{2**40}", client).status_code == 422
    assert sqlite_api.call("GET", "/v1/jobs?limit=0", client).json()["detail"][0]["loc"] == [
        "query",
        "limit",
    ]
    assert sqlite_api.call("GET", "/v1/jobs?status=sleeping", client).status_code == 422
    assert sqlite_api.call("GET", "/v1/workloads/not-a-key/records", client).status_code == 422
    assert sqlite_api.call("GET", f"/v1/workloads/{'0' * 64}/records", client).status_code == 404
    assert sqlite_api.call("GET", "/v1/schedules/best", client).json()["detail"][0]["loc"] == [
        "query",
        "workload_key",
    ]
    assert sqlite_api.call("GET", "/v1/schedules/best?op=nope", ADMIN).status_code == 422
