"""/metrics: Prometheus text with the loomtune_ names (jobs, candidates, workers, failures, results)."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from tests.service.coordinator.apikit import Api, result


def _samples(api: Api) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    r = api.http.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(r.text)
        for s in family.samples
    }


def test_metrics_follow_the_work(api: Api) -> None:
    client, worker = api.token("client"), api.token("worker")
    job = api.submit(client, trials=4)
    api.submit(client)
    ids = api.run_job(job["id"], 4)
    wid = api.register(worker)
    api.call("POST", f"/v1/workers/{wid}/lease", worker, json={"max_candidates": 3})
    api.call(
        "POST",
        f"/v1/workers/{wid}/results",
        worker,
        json={"results": [result(ids[0]), result(ids[1], status="timeout")]},
    )
    api.call(
        "POST", f"/v1/workers/{wid}/results", worker, json={"results": [result(ids[3])]}
    )  # not leased: 409

    m = _samples(api)
    assert m[("loomtune_jobs", (("status", "running"),))] == 1
    assert m[("loomtune_jobs", (("status", "queued"),))] == 1
    assert m[("loomtune_candidates", (("status", "leased"),))] == 1
    assert m[("loomtune_candidates", (("status", "pending"),))] == 1
    assert m[("loomtune_workers_alive", ())] == 1
    assert m[("loomtune_records", (("status", "ok"),))] == 1
    assert m[("loomtune_failures", (("status", "timeout"),))] == 1
    assert m[("loomtune_failures", (("status", "crashed"),))] == 0
    assert m[("loomtune_results_total", (("status", "ok"),))] == 1
    assert m[("loomtune_results_total", (("status", "timeout"),))] == 1
    assert m[("loomtune_results_rejected_total", ())] == 1
    assert m[("loomtune_candidates_leased_total", ())] == 3
    assert m[("loomtune_measurements_per_second", ())] > 0
    assert m[("loomtune_database_up", ())] == 1
    api.expire_leases()
    m = _samples(api)
    assert m[("loomtune_candidates", (("status", "leased"),))] == 0
    assert m[("loomtune_candidates", (("status", "pending"),))] == 2
    assert all(name.startswith("loomtune_") for name, _ in m)
