"""The door: bodies beyond LOOMTUNE_MAX_BODY_BYTES are 413 and strangers 401, before a body is read."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.service.coordinator.apikit import ZEN, Api, make_api

LIMIT = 64 * 1024


@pytest.fixture
def small(sqlite_url: str) -> Iterator[Api]:
    api, client = make_api(sqlite_url, max_body_bytes=LIMIT)
    with client:
        yield api
    api.engine.dispose()


def _stream(total: int, read: list[int]) -> Iterator[bytes]:
    """A chunked body of `total` bytes that notes how much of it was taken."""
    chunk = b" " * 4096
    sent = 0
    while sent < total:
        read.append(len(chunk))
        sent += len(chunk)
        yield chunk


def test_a_declared_length_over_the_limit_is_413_unread(small: Api) -> None:
    worker = small.token("worker")
    for secret in (None, worker):
        r = small.call(
            "POST",
            "/v1/workers",
            secret,
            content=b" " * (LIMIT + 1),
            headers={"content-type": "application/json"},
        )
        assert r.status_code == 413, r.text
        assert "LOOMTUNE_MAX_BODY_BYTES" in r.json()["detail"]


def test_a_stranger_is_401_before_the_body_is_read(small: Api) -> None:
    read: list[int] = []
    r = small.call(
        "POST",
        "/v1/jobs",
        "lt_not-a-token",
        content=_stream(LIMIT * 4, read),
        headers={"content-type": "application/json"},
    )
    assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer", r.text
    r = small.call(
        "POST", "/v1/jobs", None, content=b"{}", headers={"content-type": "application/json"}
    )
    assert r.status_code == 401 and "no bearer token" in r.json()["detail"]


def test_a_chunked_body_is_cut_at_the_limit(small: Api) -> None:
    client = small.token("client")
    read: list[int] = []
    r = small.call(
        "POST",
        "/v1/jobs",
        client,
        content=_stream(LIMIT * 16, read),
        headers={"content-type": "application/json"},
    )
    assert r.status_code == 413, r.text
    assert small.count("SELECT count(*) FROM jobs") == 0
    # a body within the limit goes through
    body = {
        "workload": {"op": "matmul", "params": {"m": 16, "n": 16, "k": 16}},
        "target": ZEN,
        "trials": 2,
    }
    assert small.call("POST", "/v1/jobs", client, json=body).status_code == 201


def test_metrics_need_the_metrics_token_when_it_is_set(sqlite_url: str) -> None:
    secret = "lt_metrics-0123456789abcdef"
    api, client = make_api(sqlite_url, metrics_token=secret)
    with client:
        assert client.get("/metrics").status_code == 401
        assert (
            client.get("/metrics", headers=api.auth("lt_wrong-0123456789abcdef")).status_code == 401
        )
        r = client.get("/metrics", headers=api.auth(secret))
        assert r.status_code == 200 and "loomtune_" in r.text
    api.engine.dispose()


@pytest.mark.parametrize(
    "secret", ["aaaaaaaaaaaaaaaa", "abababababababababab", "0123456789", "short-token"]
)
def test_weak_operator_secrets_are_refused(secret: str) -> None:
    from service.coordinator.settings import Settings, SettingsError

    for name in ("LOOMTUNE_ADMIN_TOKEN", "LOOMTUNE_METRICS_TOKEN"):
        with pytest.raises(SettingsError, match=name):
            Settings.from_env({name: secret})


def test_an_owner_past_max_active_jobs_gets_429(sqlite_url: str) -> None:
    api, client = make_api(sqlite_url, max_active_jobs=2)
    with client:
        alice, bob = api.token("client", "alice"), api.token("client", "bob")
        first = api.submit(alice)
        api.submit(alice)
        body = {
            "workload": {"op": "matmul", "params": {"m": 8, "n": 8, "k": 8}},
            "target": ZEN,
            "trials": 2,
        }
        r = api.call("POST", "/v1/jobs", alice, json=body)
        assert r.status_code == 429 and "LOOMTUNE_MAX_ACTIVE_JOBS=2" in r.json()["detail"], r.text
        assert api.call("POST", "/v1/jobs", bob, json=body).status_code == 201  # per owner
        api.call("POST", f"/v1/jobs/{first['id']}/cancel", alice)
        assert api.call("POST", "/v1/jobs", alice, json=body).status_code == 201
    api.engine.dispose()


def test_a_changed_admin_token_revokes_the_old_one(sqlite_url: str) -> None:
    old, new = "lt_old-admin-0123456789abcdef", "lt_new-admin-0123456789abcdef"
    for secret in (old, new):
        api, client = make_api(sqlite_url, admin_token=secret)
        with client:
            assert api.call("GET", "/v1/tokens", secret).status_code == 200
        api.engine.dispose()
    api, client = make_api(sqlite_url, admin_token=new)
    with client:
        assert api.call("GET", "/v1/tokens", old).status_code == 401
        assert api.call("GET", "/v1/tokens", new).status_code == 200
        r = api.call("POST", "/v1/tokens", new, json={"role": "admin"})
        created = r.json()["secret"]  # an admin token made through the API is not rotated
    api.engine.dispose()
    api, client = make_api(sqlite_url, admin_token=new)
    with client:
        assert api.call("GET", "/v1/tokens", created).status_code == 200
    api.engine.dispose()
