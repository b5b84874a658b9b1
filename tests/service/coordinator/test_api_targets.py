"""Short targets at the coordinator (match workers of that CPU) and GET /v1/targets."""

from __future__ import annotations

from ir.cpus import cpu_features
from tests.service.coordinator.apikit import SKX, ZEN, Api

ZEN_HOST = "llvm -mcpu=znver3 -mattr=+avx,+avx2,+fma,+sse4.2 -num-threads=1"


def test_targets_lists_what_live_workers_serve_and_needs_a_token(api: Api) -> None:
    worker = api.token("worker", "farm")
    api.register(worker, ZEN, "a")
    api.register(worker, ZEN, "b")
    api.register(worker, SKX, "c")
    assert api.call("GET", "/v1/targets", None).status_code == 401
    r = api.call("GET", "/v1/targets", api.token("client", "alice"))
    assert r.status_code == 200, r.text
    rows = {t["target"]: t for t in r.json()["targets"]}
    assert set(rows) == {ZEN, SKX}
    assert rows[ZEN]["workers"] == 2 and rows[ZEN]["cpu"] == "znver3"
    assert rows[ZEN]["display"] == "znver3 (3 features), 1 thread(s)"
    assert api.call("GET", "/v1/targets", worker).status_code == 403


def test_a_short_target_matches_the_worker_of_that_cpu(api: Api) -> None:
    client = api.token("client", "alice")
    api.register(api.token("worker", "farm"), ZEN_HOST)
    for short in ("znver3", "llvm -mcpu=znver3", "znver3 -num-threads=2"):
        job = api.submit(client, target=short)
        threads = 2 if "2" in short else 1
        assert job["target"] == ZEN_HOST.replace("-num-threads=1", f"-num-threads={threads}")


def test_a_short_target_no_worker_serves_gets_llvm_features_and_waits(api: Api) -> None:
    job = api.submit(api.token("client", "alice"), target="emeraldrapids")
    features = cpu_features("emeraldrapids")
    assert features is not None and "+amx-tile" in features
    assert job["target"] == f"llvm -mcpu=emeraldrapids -mattr={','.join(features)} -num-threads=1"


def test_an_unknown_cpu_is_a_422_naming_the_closest(api: Api) -> None:
    client = api.token("client", "alice")
    body = {"workload": {"op": "matmul", "params": {"m": 16}}, "trials": 4}
    r = api.call("POST", "/v1/jobs", client, json={**body, "target": "llvm -mcpu=znver9"})
    assert r.status_code == 422, r.text
    (err,) = r.json()["detail"]
    assert err["loc"] == ["body", "target"] and "unknown CPU 'znver9'" in err["msg"]
    assert "znver5" in err["msg"] and "\n" not in err["msg"]


def test_workers_of_one_cpu_with_several_feature_sets(api: Api) -> None:
    worker, client = api.token("worker", "farm"), api.token("client", "alice")
    full = f"llvm -mcpu=znver3 -mattr={','.join(cpu_features('znver3') or ())} -num-threads=1"
    api.register(worker, ZEN, "trimmed")
    api.register(worker, full, "full")
    assert api.submit(client, target="znver3")["target"] == full  # has all of LLVM's features
    api.register(worker, ZEN_HOST, "other")
    api.register(worker, full.replace("-mattr=", "-mattr=+avx512f,"), "more")
    body = {"workload": {"op": "matmul", "params": {"m": 16}}, "trials": 4, "target": "znver3"}
    r = api.call("POST", "/v1/jobs", client, json=body)
    assert r.status_code == 422 and "ambiguous" in r.text, r.text
