"""Model jobs over the API: a model's structure in (no weight data), its distinct tasks out as
child jobs whose progress, best and share `GET /v1/jobs/{id}` shows; bad graphs are 422s."""

from __future__ import annotations

import base64
import json
from typing import Any

import httpx
import numpy as np
import pytest

from frontend.onnx import load_onnx
from frontend.stripped import strip_graph
from ir.graph.plan import build_plan
from ir.task import task_from_spec
from service.client import Client
from service.coordinator import jobs
from tests import models
from tests.service.coordinator.apikit import ZEN, Api, make_api, result, trace_of


@pytest.fixture(scope="module")
def mlp_graph() -> Any:
    return load_onnx(models.mlp())


def submit_model(api: Api, secret: str, doc: Any, **extra: Any) -> httpx.Response:
    body = {"model": doc, "target": ZEN, "trials": 12, **extra}
    return api.call("POST", "/v1/jobs", secret, json=body)


def test_the_request_carries_no_weight_data(sqlite_api: Api, mlp_graph: Any) -> None:
    """The bytes sent: the structure only; no float weight's bytes, base64 or values."""
    sent: list[bytes] = []
    sqlite_api.http.event_hooks["request"] = [lambda r: sent.append(r.read())]
    with Client(token=sqlite_api.token("client"), http=sqlite_api.http) as client:
        job = client.submit_model(mlp_graph, trials=12, target=ZEN)
    sqlite_api.http.event_hooks["request"] = []
    body = sent[-1]
    weights = {n: a for n, a in mlp_graph.constants.items() if a.dtype.kind == "f" and a.size > 1}
    weight_bytes = sum(a.nbytes for a in weights.values())
    assert weights and weight_bytes > 4 * len(body), (weight_bytes, len(body))
    for name, array in weights.items():
        raw = array.tobytes()
        assert raw[:32] not in body, name
        assert base64.b64encode(raw[:48]).decode()[:32].encode() not in body, name
        assert repr(float(array.reshape(-1)[0])).encode() not in body, name
    sent_doc = json.loads(body)["model"]
    assert all("data" not in c for c in sent_doc["constants"] if c["name"] in weights)
    assert job["status"] == "waiting" and job["model"]["name"] == mlp_graph.name


def test_a_model_job_is_its_distinct_tasks_cut_on_the_server(
    sqlite_api: Api, mlp_graph: Any
) -> None:
    api = sqlite_api
    client = api.token("client", "alice")
    r = submit_model(api, client, strip_graph(mlp_graph))
    assert r.status_code == 201, r.text
    job = r.json()
    plan = build_plan(mlp_graph)  # the client's own plan of the real model
    assert job["workload"] is None and job["trials"] == 12 and job["trials_done"] == 0
    assert job["model"]["model_key"] == mlp_graph.key
    tasks = job["model"]["tasks"]
    assert [t["key"] for t in tasks] == [t.task.key for t in plan.tasks]
    assert [(t["pattern"], t["count"]) for t in tasks] == [(t.pattern, t.count) for t in plan.tasks]
    assert all(t["trials"] == 0 and t["best_ms"] is None for t in tasks)
    assert api.call("GET", f"/v1/jobs/{job['id']}", client).json() == job
    listed = api.call("GET", "/v1/jobs", client).json()["jobs"]
    assert [j["id"] for j in listed] == [job["id"]]  # its tasks are shown with it, not apart
    children = api.count("SELECT count(*) FROM jobs WHERE parent_id = :p", p=job["id"])
    assert children == len(plan.tasks)


def test_progress_best_and_share_per_task(sqlite_api: Api, mlp_graph: Any) -> None:
    api = sqlite_api
    client, worker = api.token("client"), api.token("worker")
    wid = api.register(worker, ZEN)
    job = submit_model(api, client, strip_graph(mlp_graph)).json()
    tasks = job["model"]["tasks"]
    with api.sessions.write() as s:  # play the job runner: claim it, write candidates per task
        assert jobs.claim_job(s, "test-runner", 600).id == job["id"]
        ids = [jobs.add_candidates(s, t["job_id"], [trace_of(i)])[0] for i, t in enumerate(tasks)]
    leased = api.call("POST", f"/v1/workers/{wid}/lease", worker, json={"max_candidates": 64})
    got = {c["candidate_id"]: c for c in leased.json()["candidates"]}
    assert sorted(got) == sorted(ids)
    assert {got[i]["workload_key"] for i in ids} == {t["key"] for t in tasks}
    # a worker rebuilds each task from its spec, the weights it keys included (layout_free)
    assert all(task_from_spec(c["workload"]).key == c["workload_key"] for c in got.values())
    assert any(c["workload"].get("layout_free") for c in got.values())
    times = [1.0 + i for i in range(len(ids))]
    posted = api.call(
        "POST",
        f"/v1/workers/{wid}/results",
        worker,
        json={"results": [result(i, ms) for i, ms in zip(ids, times)]},
    )
    assert posted.status_code == 200, posted.text
    shown = api.call("GET", f"/v1/jobs/{job['id']}", client).json()
    assert shown["status"] == "running" and shown["trials_done"] == len(ids)
    total = sum(t["count"] * ms for t, ms in zip(tasks, times))
    assert shown["best_latency_ms"] == pytest.approx(total)
    for t, ms in zip(shown["model"]["tasks"], times):
        assert t["trials"] == 1 and t["best_ms"] == pytest.approx(ms)
        assert t["share"] == pytest.approx(t["count"] * ms / total)
    assert sum(t["share"] for t in shown["model"]["tasks"]) == pytest.approx(1.0)
    history = api.call("GET", f"/v1/jobs/{job['id']}/history", client).json()["points"]
    assert len(history) == len(ids) and history[-1]["best_ms"] == pytest.approx(total)
    assert all(p["best_ms"] is None for p in history[:-1])  # until every task has a best


def test_each_implementation_is_a_task_and_the_faster_counts(sqlite_api: Api) -> None:
    """A ResNet block's 3×3 convs are tuned directly and by Winograd: both are child jobs,
    and the model's latency and shares count, per conv, the faster one only."""
    api = sqlite_api
    client, worker = api.token("client"), api.token("worker")
    wid = api.register(worker, ZEN)
    graph = load_onnx(models.res_block())
    job = submit_model(api, client, strip_graph(graph)).json()
    tasks = job["model"]["tasks"]
    plan = build_plan(graph)
    want = [(t.label(n), task.key) for t in plan.tasks for n, task in t.implementations]
    assert [(t["pattern"], t["key"]) for t in tasks] == want and len(tasks) == 5
    with api.sessions.write() as s:
        assert jobs.claim_job(s, "test-runner", 600).id == job["id"]
        ids = [jobs.add_candidates(s, t["job_id"], [trace_of(i)])[0] for i, t in enumerate(tasks)]
    api.call("POST", f"/v1/workers/{wid}/lease", worker, json={"max_candidates": 64})
    # stem 1 ms; conv+relu: direct 3, winograd 2; conv+add: direct 4, winograd 5
    ms = {p: m for p, m in zip([p for p, _ in want], [1.0, 3.0, 2.0, 4.0, 5.0])}
    times = [ms[t["pattern"]] for t in tasks]
    posted = api.call(
        "POST",
        f"/v1/workers/{wid}/results",
        worker,
        json={"results": [result(i, m) for i, m in zip(ids[:-1], times[:-1])]},
    )
    assert posted.status_code == 200, posted.text
    # every plan task has a best once one implementation of each has one
    total = 1.0 + 2.0 + 4.0
    shown = api.call("GET", f"/v1/jobs/{job['id']}", client).json()
    assert shown["best_latency_ms"] == pytest.approx(total)
    api.call(
        "POST",
        f"/v1/workers/{wid}/results",
        worker,
        json={"results": [result(ids[-1], times[-1])]},
    )
    shown = api.call("GET", f"/v1/jobs/{job['id']}", client).json()
    assert shown["best_latency_ms"] == pytest.approx(total)  # the slower Winograd is not counted
    shares = {t["pattern"]: t["share"] for t in shown["model"]["tasks"]}
    assert (
        shares["conv2d+relu [direct]"] is None
        and shares["conv2d+add+relu+transpose [winograd]"] is None
    )
    assert shares["conv2d+relu [winograd]"] == pytest.approx(2.0 / total)
    assert sum(v for v in shares.values() if v is not None) == pytest.approx(1.0)
    history = api.call("GET", f"/v1/jobs/{job['id']}/history", client).json()["points"]
    assert history[-1]["best_ms"] == pytest.approx(total)


def test_cancel_takes_the_tasks_along(sqlite_api: Api, mlp_graph: Any) -> None:
    api = sqlite_api
    client = api.token("client")
    job = submit_model(api, client, strip_graph(mlp_graph)).json()
    child = job["model"]["tasks"][0]["job_id"]
    with api.sessions.write() as s:
        jobs.claim_job(s, "test-runner", 600)
        jobs.add_candidates(s, child, [trace_of(0)])
    r = api.call("POST", f"/v1/jobs/{child}/cancel", client)
    assert r.status_code == 409 and f"model job {job['id']}" in r.json()["detail"]
    assert api.call("POST", f"/v1/jobs/{job['id']}/cancel", client).json()["status"] == "cancelled"
    assert api.count("SELECT count(*) FROM jobs WHERE status != 'cancelled'") == 0
    assert api.count("SELECT count(*) FROM candidates WHERE status != 'cancelled'") == 0


def _bad(doc: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """`doc` with the JSON path `path` (keys and list indices, dotted) set to `value`."""
    out = json.loads(json.dumps(doc))
    *parents, last = [int(p) if p.isdigit() else p for p in path.split(".")]
    node = out
    for p in parents:
        node = node[p]
    node[last] = value
    return out


BAD = [
    ("format", "format", "loomtune.graph/9", ["body", "model", "format"], "loomtune.graph/1"),
    ("unknown op", "nodes.0.op", "conv9d", ["body", "model", "nodes"], "unknown graph op"),
    (
        "undefined input",
        "nodes.1.inputs.0",
        "nowhere",
        ["body", "model", "nodes"],
        "not defined",
    ),
    ("bad dtype", "inputs.0.dtype", "float7", ["body", "model", "inputs[0].dtype"], "dtype"),
    (
        "huge constant",
        "constants.0.shape",
        [2**30, 2**30],
        ["body", "model", "constants[0].shape"],
        "LOOMTUNE_MAX_BYTES",
    ),
    ("short data", "constants.0.data", "AAAA", ["body", "model", "constants[0].data"], "bytes"),
    ("no outputs", "outputs", [], ["body", "model", "outputs"], "at least one"),
]


@pytest.mark.parametrize("what, path, value, loc, words", BAD, ids=[b[0] for b in BAD])
def test_a_malformed_graph_is_a_422_naming_what_is_wrong(
    sqlite_api: Api, mlp_graph: Any, what: str, path: str, value: Any, loc: list, words: str
) -> None:
    doc = strip_graph(mlp_graph)
    r = submit_model(sqlite_api, sqlite_api.token("client"), _bad(doc, path, value))
    assert r.status_code == 422, r.text
    error = r.json()["detail"][0]
    assert error["loc"] == loc and words.lower() in error["msg"].lower(), error
    assert sqlite_api.count("SELECT count(*) FROM jobs") == 0


def test_a_job_is_a_workload_or_a_model(sqlite_api: Api, mlp_graph: Any) -> None:
    client = sqlite_api.token("client")
    both = submit_model(
        sqlite_api,
        client,
        strip_graph(mlp_graph),
        workload={"op": "gelu", "params": {"m": 8, "n": 8}},
    )
    neither = sqlite_api.call("POST", "/v1/jobs", client, json={"target": ZEN, "trials": 1})
    for r in (both, neither):
        assert r.status_code == 422 and "exactly one" in r.text


def test_a_model_beyond_the_body_limit_is_a_413(sqlite_url: str, mlp_graph: Any) -> None:
    api, http = make_api(sqlite_url, max_body_bytes=1024)
    with http:
        doc = strip_graph(mlp_graph)
        assert len(json.dumps(doc)) > 1024
        r = submit_model(api, api.token("client"), doc)
        assert r.status_code == 413
    api.engine.dispose()


def test_weights_are_rebuilt_as_zeros_without_memory(mlp_graph: Any) -> None:
    from frontend.stripped import load_stripped

    graph = load_stripped(json.loads(json.dumps(strip_graph(mlp_graph))), max_bytes=2**30)
    assert graph.key == mlp_graph.key
    for name, array in graph.constants.items():
        real = mlp_graph.constants[name]
        if real.size > 1 and real.dtype.kind == "f":
            assert not array.any() and not array.flags.writeable
        else:
            assert np.array_equal(array, real)  # scalars keep their values: they are literals
