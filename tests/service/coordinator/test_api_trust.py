"""Results are evidence: an implausible time is refused and counted, one worker's word is
never the best while a confirmed record exists, a liar is quarantined, a re-measurement
is kept (docs/architecture.md "Trust"). The job runner's part is played through its seam."""

from __future__ import annotations

from typing import Any

from service.coordinator import trust
from tests.service.coordinator.apikit import Api, result

BEST = "/v1/schedules/best?op=matmul&m=16&n=16&k=16"


def _lease(api: Api, secret: str, wid: int, n: int = 1) -> list[int]:
    r = api.call("POST", f"/v1/workers/{wid}/lease", secret, json={"max_candidates": n})
    assert r.status_code == 200, r.text
    return [c["candidate_id"] for c in r.json()["candidates"]]


def _post(api: Api, secret: str, wid: int, cid: int, median: float) -> Any:
    return api.call(
        "POST", f"/v1/workers/{wid}/results", secret, json={"results": [result(cid, median)]}
    )


def _post_times(api: Api, secret: str, wid: int, cid: int, times: list[float]) -> Any:
    body = {**result(cid), "run_times_ms": times}
    return api.call("POST", f"/v1/workers/{wid}/results", secret, json={"results": [body]})


def _confirm_round(api: Api, job_id: int) -> list[int]:
    with api.sessions.write() as s:
        return trust.start_confirmation(s, job_id, alive_seconds=60)


def test_an_impossible_time_is_422_and_three_quarantine_the_worker(sqlite_api: Api) -> None:
    api = sqlite_api
    liar = api.token("worker", "mallory")
    job = api.submit(api.token("client"), trials=4)
    api.run_job(job["id"], 4)
    wid = api.register(liar, name="honest-host-1")
    for _ in range(3):
        (cid,) = _lease(api, liar, wid)
        r = _post(api, liar, wid, cid, 1e-300)
        assert r.status_code == 422 and "physical peak" in r.json()["detail"][0]["msg"], r.text
        assert r.json()["detail"][0]["loc"] == ["body", "results", 0, "run_times_ms"]
        api.call("POST", f"/v1/workers/{wid}/release", liar)
    r = api.call("POST", f"/v1/workers/{wid}/lease", liar, json={"max_candidates": 1})
    assert r.status_code == 403 and "quarantined" in r.json()["detail"], r.text
    workers = api.call("GET", "/v1/workers", api.token("admin")).json()["workers"]
    assert workers[0]["strikes"] == 3 and workers[0]["quarantined_at"] is not None
    assert api.count("SELECT count(*) FROM records") == 0


def test_a_plausible_lie_is_refuted_by_another_worker_and_never_served(sqlite_api: Api) -> None:
    api = sqlite_api
    client = api.token("client")
    liar_token, lab = api.token("worker", "mallory"), api.token("worker", "lab")
    liar, honest, third = (
        api.register(liar_token, name="liar"),
        api.register(lab, name="a"),
        api.register(lab, name="b"),
    )
    job = api.submit(client, trials=2)
    api.run_job(job["id"], 2)
    (lied,) = _lease(api, liar_token, liar)
    assert _post(api, liar_token, liar, lied, 0.1).status_code == 200  # truth: 1.0 ms
    (fair,) = _lease(api, lab, honest)
    assert _post(api, lab, honest, fair, 1.0).status_code == 200
    # one worker's word only: served, but flagged
    best = api.call("GET", BEST, client).json()
    assert (
        best["latency_ms"] == 0.1
        and best["confirmed"] is False
        and best["standing"] == "unconfirmed"
    )

    # the job's end: the fastest unconfirmed record is re-timed by another worker
    ids = _confirm_round(api, job["id"])
    assert len(ids) == 1 and _lease(api, liar_token, liar) == []  # never by its own worker
    assert _lease(api, lab, honest) == ids
    assert _post(api, lab, honest, ids[0], 1.02).status_code == 200
    records = api.call("GET", f"/v1/workloads/{best['workload_key']}/records", client).json()
    standing = {r["median_ms"]: (r["standing"], r["worker_id"]) for r in records["records"]}
    assert standing[0.1] == ("refuted", liar)  # the lie, visible
    assert api.call("POST", f"/v1/workers/{liar}/lease", liar_token, json={}).status_code == 403

    # next round: the honest record, by the third worker
    ids = _confirm_round(api, job["id"])
    assert len(ids) == 1 and _lease(api, lab, honest) == []
    assert _lease(api, lab, third) == ids
    assert _post(api, lab, third, ids[0], 1.1).status_code == 200
    best = api.call("GET", BEST, client).json()
    assert best["confirmed"] is True and best["worker_id"] == honest
    assert best["trusted_ms"] == 1.1  # the slower of the two medians
    assert _confirm_round(api, job["id"]) == []  # nothing left to confirm
    shown = api.call("GET", f"/v1/jobs/{job['id']}", client).json()
    assert shown["best_latency_ms"] == 1.1


def test_a_remeasurement_is_another_observation_and_invalidation_voids_a_worker(
    sqlite_api: Api,
) -> None:
    api = sqlite_api
    client, lab = api.token("client"), api.token("worker", "lab")
    first, second = api.register(lab, name="a"), api.register(lab, name="b")
    job = api.submit(client, trials=1)
    api.run_job(job["id"], 1)
    (cid,) = _lease(api, lab, first)
    assert _post(api, lab, first, cid, 1.0).status_code == 200
    api.call("POST", f"/v1/jobs/{job['id']}/cancel", client)
    again = api.submit(client, trials=1)
    api.run_job(again["id"], 1)  # the same stand-in trace
    (cid,) = _lease(api, lab, second)
    assert _post(api, lab, second, cid, 1.2).status_code == 200
    assert api.count("SELECT count(*) FROM records") == 1
    assert api.count("SELECT count(*) FROM observations WHERE kind = 'remeasure'") == 1
    # another worker measured it within the tolerance: that confirms it
    assert api.count("SELECT count(*) FROM records WHERE standing = 'confirmed'") == 1

    with api.sessions.write() as s:
        assert trust.invalidate_worker(s, first) == 1
    assert api.count("SELECT count(*) FROM records WHERE standing = 'invalid'") == 1
    assert api.call("GET", BEST, client).status_code == 404


def test_a_crash_claim_refuted_by_another_worker_quarantines_its_poster(sqlite_api: Api) -> None:
    api = sqlite_api
    client, lab, bad = api.token("client"), api.token("worker", "lab"), api.token("worker", "x")
    hider, honest = api.register(bad, name="x"), api.register(lab, name="a")
    job = api.submit(client, trials=1)
    api.run_job(job["id"], 1)
    (cid,) = _lease(api, bad, hider)
    r = api.call(
        "POST",
        f"/v1/workers/{hider}/results",
        bad,
        json={"results": [result(cid, status="crashed")]},
    )
    assert r.status_code == 200, r.text
    api.call("POST", f"/v1/jobs/{job['id']}/cancel", client)
    again = api.submit(client, trials=1)
    api.run_job(again["id"], 1)
    (cid,) = _lease(api, lab, honest)
    assert _post(api, lab, honest, cid, 1.0).status_code == 200
    assert api.count("SELECT count(*) FROM records WHERE standing = 'refuted'") == 1
    assert api.count("SELECT count(*) FROM workers WHERE quarantined_at IS NOT NULL") == 1


def test_a_confirmation_nobody_may_take_is_an_orphan(sqlite_api: Api) -> None:
    """The only other worker quarantined: the job runner withdraws the confirmation at once
    instead of waiting two lease periods for a worker that cannot come."""
    api = sqlite_api
    poster_token, other_token = api.token("worker", "a"), api.token("worker", "b")
    poster, other = api.register(poster_token, name="p"), api.register(other_token, name="o")
    job = api.submit(api.token("client"), trials=1)
    (cid,) = api.run_job(job["id"], 1)
    assert _lease(api, poster_token, poster) == [cid]
    assert _post(api, poster_token, poster, cid, 1.0).status_code == 200
    ids = _confirm_round(api, job["id"])
    with api.sessions.write() as s:
        assert ids and trust.orphaned_confirmations(s, ids, alive_seconds=60) == []
        trust.quarantine(s, other, "on purpose")
    with api.sessions.write() as s:
        assert trust.orphaned_confirmations(s, ids, alive_seconds=60) == ids


def test_judge_confirms_noise_by_the_fastest_run_and_catches_liars() -> None:
    """Load slows a confirmer's median (here 4x the claim), not its fastest run."""
    noisy = [0.020, 0.021, 0.006, 0.019, 0.020]  # claim 5 us; median 20 us, fastest 6 us
    assert trust.judge(0.005, "ok", noisy) == (trust.CONFIRMED, 0.006)
    assert trust.judge(0.005, "ok", [0.004, 0.005]) == (trust.CONFIRMED, 0.005)  # never below
    assert trust.judge(1.0, "ok", [2.5, 4.0]) == (trust.CONFIRMED, 2.5)  # ranked at 2.5
    assert trust.judge(0.005 / 1000, "ok", [0.005, 0.006]) == (trust.CAUGHT, None)
    assert trust.judge(1e-300, "ok", [0.005]) == (trust.CAUGHT, None)
    assert trust.judge(0.1, "ok", [1.0]) == (trust.CAUGHT, None)  # 10x
    assert trust.judge(1.0, "ok", [4.0, 4.2]) == (trust.DOUBTED, None)  # 4x: doubt, a strike
    assert trust.judge(1.0, "crashed", []) == (trust.CAUGHT, None)  # deterministic
    assert trust.judge(1.0, "timeout", []) == (trust.DOUBTED, None)  # can be load


def test_a_noisy_honest_confirmation_confirms_and_doubt_only_strikes(sqlite_api: Api) -> None:
    api = sqlite_api
    client, lab = api.token("client"), api.token("worker", "lab")
    first, second = api.register(lab, name="a"), api.register(lab, name="b")
    job = api.submit(client, trials=1)
    api.run_job(job["id"], 1)
    (cid,) = _lease(api, lab, first)
    assert _post_times(api, lab, first, cid, [0.005, 0.0052, 0.0049]).status_code == 200
    ids = _confirm_round(api, job["id"])
    assert _lease(api, lab, second) == ids
    noisy = [0.020, 0.021, 0.006, 0.019, 0.020]  # the confirmer's machine was busy
    assert _post_times(api, lab, second, ids[0], noisy).status_code == 200
    best = api.call("GET", BEST, client).json()
    assert best["confirmed"] is True and best["worker_id"] == first
    assert best["trusted_ms"] == 0.006  # the confirmer's fastest run, not the claim
    assert api.count("SELECT count(*) FROM workers WHERE quarantined_at IS NOT NULL") == 0

    # a confirmer 4x slower even at its best: the record is refuted, its worker struck once
    api.call("POST", f"/v1/jobs/{job['id']}/cancel", client)
    again = api.submit(client, trials=1)
    api.run_job(again["id"], 1, start=1)
    (cid,) = _lease(api, lab, second)
    assert _post_times(api, lab, second, cid, [0.004, 0.004, 0.004]).status_code == 200
    ids = _confirm_round(api, again["id"])
    assert len(ids) == 2 and _lease(api, lab, first, 2) == ids  # with the trusted best
    for cid, times in zip(ids, ([0.016, 0.018], [0.006])):
        assert _post_times(api, lab, first, cid, times).status_code == 200
    rows = api.count("SELECT count(*) FROM records WHERE standing = 'refuted'")
    workers = {
        w["id"]: w for w in api.call("GET", "/v1/workers", api.token("admin")).json()["workers"]
    }
    assert rows == 1 and workers[second]["strikes"] == 1
    assert workers[second]["quarantined_at"] is None
    best = api.call("GET", BEST, client).json()
    assert best["worker_id"] == first and best["trusted_ms"] == 0.006  # the doubt is never served
