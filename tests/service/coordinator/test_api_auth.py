"""Tokens and roles: 401 without a valid token, 403 for the wrong role or another owner's job."""

from __future__ import annotations

import hashlib

from sqlalchemy import text

from tests.service.coordinator.apikit import ADMIN, ZEN, Api, result


def test_no_token_is_401_naming_the_reason(sqlite_api: Api) -> None:
    for method, path in [
        ("GET", "/v1/jobs"),
        ("POST", "/v1/jobs"),
        ("GET", "/v1/tokens"),
        ("POST", "/v1/workers/1/lease"),
    ]:
        r = sqlite_api.call(method, path, None)
        assert r.status_code == 401, (method, path, r.text)
        assert "bearer token" in r.json()["detail"]
        assert r.headers["www-authenticate"] == "Bearer"
    assert sqlite_api.call("GET", "/v1/jobs", "lt_not-a-token").status_code == 401


def test_anyone_reaches_health_metrics_and_docs(sqlite_api: Api) -> None:
    assert sqlite_api.http.get("/healthz").json()["status"] == "ok"
    assert sqlite_api.http.get("/metrics").status_code == 200
    assert sqlite_api.http.get("/docs").status_code == 200
    assert "/v1/jobs" in sqlite_api.http.get("/openapi.json").json()["paths"]


def test_roles(sqlite_api: Api) -> None:
    api = sqlite_api
    client, worker = api.token("client", "alice"), api.token("worker", "farm")
    # A worker token cannot submit or read jobs, nor manage tokens.
    assert (
        api.call(
            "POST", "/v1/jobs", worker, json={"workload": {"op": "matmul"}, "trials": 1}
        ).status_code
        == 403
    )
    assert api.call("GET", "/v1/jobs", worker).status_code == 403
    assert api.call("GET", "/v1/schedules/best?op=matmul", worker).status_code == 403
    assert api.call("GET", "/v1/tokens", worker).status_code == 403
    # A client token cannot register, lease or report, nor manage tokens.
    wid = api.register(worker)
    r = api.call("POST", "/v1/workers", client, json={"name": "x", "target": ZEN})
    assert r.status_code == 403 and "client token" in r.json()["detail"]
    assert api.call("POST", f"/v1/workers/{wid}/lease", client, json={}).status_code == 403
    assert (
        api.call(
            "POST", f"/v1/workers/{wid}/results", client, json={"results": [result(1)]}
        ).status_code
        == 403
    )
    assert api.call("POST", "/v1/tokens", client, json={"role": "admin"}).status_code == 403
    assert api.call("GET", "/v1/workers", client).status_code == 403
    # Admins may list workers; clients may submit.
    assert api.call("GET", "/v1/workers", ADMIN).json()["workers"][0]["id"] == wid
    assert (
        api.call(
            "POST",
            "/v1/jobs",
            client,
            json={"workload": {"op": "matmul"}, "target": ZEN, "trials": 1},
        ).status_code
        == 201
    )


def test_owners_see_and_cancel_only_their_jobs(sqlite_api: Api) -> None:
    api = sqlite_api
    alice, bob = api.token("client", "alice"), api.token("client", "bob")
    job = api.submit(alice)
    assert job["owner"] == "alice"
    assert api.call("GET", f"/v1/jobs/{job['id']}", bob).status_code == 403
    assert api.call("GET", f"/v1/jobs/{job['id']}/history", bob).status_code == 403
    r = api.call("POST", f"/v1/jobs/{job['id']}/cancel", bob)
    assert r.status_code == 403 and "another owner" in r.json()["detail"]
    assert api.call("GET", "/v1/jobs", bob).json()["jobs"] == []
    assert [j["id"] for j in api.call("GET", "/v1/jobs", alice).json()["jobs"]] == [job["id"]]
    # A second token of the same owner (a rotation) sees the job; an admin sees everyone's.
    alice2 = api.token("client", "alice")
    assert api.call("GET", f"/v1/jobs/{job['id']}", alice2).status_code == 200
    api.submit(bob)
    assert len(api.call("GET", "/v1/jobs", ADMIN).json()["jobs"]) == 2
    assert api.call("GET", "/v1/jobs/999", alice).status_code == 404


def test_workers_of_another_owner_are_403(sqlite_api: Api) -> None:
    api = sqlite_api
    farm, other = api.token("worker", "farm"), api.token("worker", "other")
    wid = api.register(farm)
    assert api.call("POST", f"/v1/workers/{wid}/heartbeat", other).status_code == 403
    assert api.call("POST", f"/v1/workers/{wid}/lease", other, json={}).status_code == 403
    assert api.call("POST", f"/v1/workers/{wid}/heartbeat", farm).status_code == 200
    assert api.call("POST", "/v1/workers/12345/heartbeat", farm).status_code == 404


def test_revoked_token_is_401_and_listed_as_revoked(sqlite_api: Api) -> None:
    api = sqlite_api
    secret = api.token("client", "carol")
    assert api.call("GET", "/v1/jobs", secret).status_code == 200
    tokens = api.call("GET", "/v1/tokens", ADMIN).json()["tokens"]
    carol = next(t for t in tokens if t["owner"] == "carol")
    assert "secret" not in carol and carol["revoked_at"] is None
    r = api.call("DELETE", f"/v1/tokens/{carol['id']}", ADMIN)
    assert r.status_code == 200 and r.json()["revoked_at"] is not None
    r = api.call("GET", "/v1/jobs", secret)
    assert r.status_code == 401 and "revoked" in r.json()["detail"]
    assert api.call("DELETE", "/v1/tokens/4242", ADMIN).status_code == 404


def test_no_token_is_stored_in_plain_text(sqlite_api: Api) -> None:
    api = sqlite_api
    secrets = [ADMIN, api.token("client", "dave"), api.token("worker", "farm")]
    with api.engine.connect() as conn:
        stored = conn.execute(
            text("SELECT hashed_secret, role, owner FROM api_tokens ORDER BY id")
        ).all()
        dump = "\n".join(str(row) for row in conn.execute(text("SELECT * FROM api_tokens")).all())
    assert [row[0] for row in stored] == [hashlib.sha256(s.encode()).hexdigest() for s in secrets]
    assert [row[1:] for row in stored] == [
        ("admin", "admin"),
        ("client", "dave"),
        ("worker", "farm"),
    ]
    assert not any(s in dump for s in secrets)


def test_token_validation_is_422_naming_the_field(sqlite_api: Api) -> None:
    api = sqlite_api
    r = api.call("POST", "/v1/tokens", ADMIN, json={"role": "root"})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "role"]
    r = api.call("POST", "/v1/tokens", ADMIN, json={"role": "client", "owner": "a b"})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "owner"]
    r = api.call("POST", "/v1/tokens", ADMIN, json={"role": "client"})
    assert (
        r.status_code == 201
        and r.json()["owner"] == "client"
        and r.json()["secret"].startswith("lt_")
    )


def test_caller_cache_keeps_a_token_for_its_ttl_and_forgets_a_revoked_one() -> None:
    from service.coordinator.tokens import Caller, CallerCache

    now = [100.0]
    cache = CallerCache(2.0, clock=lambda: now[0])
    alice, bob = Caller(1, "client", "alice"), Caller(2, "worker", "farm")
    cache.put("h1", alice)
    cache.put("h2", bob)
    now[0] += 1.9
    assert cache.get("h1") == alice and cache.get("h2") == bob
    cache.forget(1)  # revoked by this coordinator: refused at once
    assert cache.get("h1") is None and cache.get("h2") == bob
    now[0] += 0.2  # past the ttl: looked up again
    assert cache.get("h2") is None
    off = CallerCache(0.0, clock=lambda: now[0])
    off.put("h1", alice)
    assert off.get("h1") is None


def test_auth_cache_seconds_comes_from_the_environment_and_is_checked() -> None:
    import pytest

    from service.coordinator.settings import Settings, SettingsError

    assert Settings.from_env({"LOOMTUNE_AUTH_CACHE_SECONDS": "0"}).auth_cache_seconds == 0
    assert Settings.from_env({}).auth_cache_seconds == 1.0
    for bad in ("-1", "nan", "soon", "7200"):
        with pytest.raises(SettingsError, match=r"LOOMTUNE_AUTH_CACHE_SECONDS|auth_cache_seconds"):
            Settings.from_env({"LOOMTUNE_AUTH_CACHE_SECONDS": bad})
