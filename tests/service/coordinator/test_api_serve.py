"""`loomtune serve` as a real process on loopback, and `loomtune token` writing the database.

The coordinator runs in a subprocess (uvicorn) on PostgreSQL (and SQLite),
and the test talks to it with httpx like any client or worker would.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from sqlalchemy import text

from service.cli import main
from service.db.engine import make_engine
from tests.postgresql import pg_url_for
from tests.service.coordinator.apikit import ZEN, result
from tests.tls import self_signed_cert

ROOT = Path(__file__).resolve().parents[3]
ADMIN = "lt_serve-admin-secret-0123456789"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(database_url: str, **extra: str) -> dict[str, str]:
    env = {
        **os.environ,
        "LOOMTUNE_DATABASE_URL": database_url,
        "LOOMTUNE_ADMIN_TOKEN": ADMIN,
        **extra,
    }
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


@contextmanager
def serving(
    database_url: str, *args: str, scheme: str = "http", verify: object = True, **env: str
) -> Iterator[httpx.Client]:
    """`loomtune serve` in a subprocess; an httpx client on its address once /healthz answers."""
    port = _free_port()
    log = tempfile.TemporaryFile("w+")  # noqa: SIM115  (a pipe nobody reads could fill and stall the server)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "service.cli",
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--log-level",
            "warning",
            *args,
        ],
        cwd=ROOT,
        env=_env(database_url, **env),
        stdout=subprocess.DEVNULL,
        stderr=log,
        text=True,
    )
    base = f"{scheme}://127.0.0.1:{port}"
    try:
        with httpx.Client(base_url=base, verify=verify, timeout=10) as http:  # type: ignore[arg-type]
            deadline = time.monotonic() + 30
            while True:
                if proc.poll() is not None:
                    log.seek(0)
                    pytest.fail(f"serve exited {proc.returncode}: {log.read()[-2000:]}")
                try:
                    if http.get("/healthz").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline:
                    pytest.fail("serve did not answer /healthz within 30 s")
                time.sleep(0.1)
            yield http
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def _bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


def test_serve_on_loopback(database_url: str) -> None:
    with serving(database_url) as http:
        assert http.get("/v1/jobs").status_code == 401
        r = http.post(
            "/v1/tokens", json={"role": "client", "owner": "alice"}, headers=_bearer(ADMIN)
        )
        assert r.status_code == 201
        client = r.json()["secret"]
        worker = http.post("/v1/tokens", json={"role": "worker"}, headers=_bearer(ADMIN)).json()[
            "secret"
        ]
        r = http.post(
            "/v1/jobs",
            headers=_bearer(client),
            json={
                "workload": {"op": "softmax", "params": {"m": 8, "n": 8}},
                "target": ZEN,
                "trials": 4,
            },
        )
        assert r.status_code == 201 and r.json()["status"] == "waiting"  # no worker yet
        job = r.json()
        r = http.post(
            "/v1/jobs",
            headers=_bearer(client),
            json={"workload": {"op": "softmax"}, "target": ZEN, "trials": 0},
        )
        assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "trials"]
        wid = http.post(
            "/v1/workers", headers=_bearer(worker), json={"name": "w1", "target": ZEN}
        ).json()["id"]
        assert (
            http.post(f"/v1/workers/{wid}/lease", headers=_bearer(worker), json={}).json()[
                "candidates"
            ]
            == []
        )
        assert (
            http.post(
                f"/v1/workers/{wid}/results", headers=_bearer(worker), json={"results": [result(1)]}
            ).status_code
            == 409
        )
        assert http.get(f"/v1/jobs/{job['id']}", headers=_bearer(worker)).status_code == 403
        metrics = http.get("/metrics").text
        assert (
            'loomtune_jobs{status="queued"} 1.0' in metrics
            and "loomtune_workers_alive 1.0" in metrics
        )
        assert http.get("/docs").status_code == 200


CANDIDATES = 240
WORKERS = 8


def _work(base: str, secret: str, name: str) -> tuple[list[int], list[int]]:
    """A simulated worker: lease batches of 10 and report them until none is left; (ids, odd statuses)."""
    got: list[int] = []
    odd: list[int] = []
    with httpx.Client(base_url=base, headers=_bearer(secret), timeout=30) as http:
        wid = http.post("/v1/workers", json={"name": name, "target": ZEN}).json()["id"]
        while True:
            r = http.post(f"/v1/workers/{wid}/lease", json={"max_candidates": 10})
            batch = (
                [c["candidate_id"] for c in r.json()["candidates"]] if r.status_code == 200 else []
            )
            if r.status_code != 200:
                odd.append(r.status_code)
            if not batch:
                return got, odd
            if http.post(f"/v1/workers/{wid}/heartbeat").status_code != 200:
                odd.append(-1)
            r = http.post(
                f"/v1/workers/{wid}/results", json={"results": [result(c, 1.0 + c) for c in batch]}
            )
            if r.status_code != 200:
                odd.append(r.status_code)
            got += batch


def test_concurrent_workers_measure_each_candidate_once(database_url: str) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from service.coordinator import jobs
    from service.db.session import Sessions

    with serving(database_url) as http:
        client = http.post("/v1/tokens", json={"role": "client"}, headers=_bearer(ADMIN)).json()[
            "secret"
        ]
        worker = http.post("/v1/tokens", json={"role": "worker"}, headers=_bearer(ADMIN)).json()[
            "secret"
        ]
        job = http.post(
            "/v1/jobs",
            headers=_bearer(client),
            json={
                "workload": {"op": "softmax", "params": {"m": 8, "n": 8}},
                "target": ZEN,
                "trials": CANDIDATES,
            },
        ).json()
        engine = make_engine(database_url)
        with Sessions(engine).write() as s:  # the job runner's part
            assert jobs.claim_job(s, "test-runner", 600) is not None
            jobs.add_candidates(s, job["id"], [({"n": i}, f"{i:064x}") for i in range(CANDIDATES)])
        base = str(http.base_url)
        with ThreadPoolExecutor(WORKERS) as pool:
            done = list(pool.map(lambda i: _work(base, worker, f"w{i}"), range(WORKERS)))
        ids = [c for got, _ in done for c in got]
        assert [odd for _, odd in done] == [[]] * WORKERS
        assert len(ids) == CANDIDATES and len(set(ids)) == CANDIDATES
        shown = http.get(f"/v1/jobs/{job['id']}", headers=_bearer(client)).json()
        assert shown["trials_done"] == CANDIDATES
        with engine.connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM records")).scalar() == CANDIDATES
            assert conn.execute(text("SELECT max(attempts) FROM candidates")).scalar() == 1
        engine.dispose()


def test_serve_over_tls(sqlite_url: str, tmp_path: Path) -> None:
    cert, key = self_signed_cert(tmp_path)
    with serving(
        sqlite_url,
        "--ssl-certfile",
        str(cert),
        "--ssl-keyfile",
        str(key),
        scheme="https",
        verify=ssl.create_default_context(cafile=str(cert)),
    ) as http:
        assert http.get("/healthz").json()["status"] == "ok"
        assert http.get("/v1/tokens", headers=_bearer(ADMIN)).status_code == 200


def test_serve_refuses_a_stale_schema(pg_schema: str) -> None:
    engine = make_engine(pg_url_for(pg_schema))
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE alembic_version (version_num VARCHAR(32) PRIMARY KEY)"))
        conn.execute(text("INSERT INTO alembic_version VALUES ('0001')"))
    engine.dispose()
    proc = subprocess.run(
        [sys.executable, "-m", "service.cli", "serve", "--port", str(_free_port())],
        cwd=ROOT,
        env=_env(pg_url_for(pg_schema)),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "loomtune db upgrade" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_serve_refuses_a_bad_setting(sqlite_url: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "service.cli", "serve", "--port", str(_free_port())],
        cwd=ROOT,
        env=_env(sqlite_url, LOOMTUNE_LEASE_SECONDS="soon"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and "LOOMTUNE_LEASE_SECONDS" in proc.stderr


def test_token_cli(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from fastapi.testclient import TestClient

    from service.coordinator.app import create_app
    from service.coordinator.settings import Settings

    monkeypatch.setenv("LOOMTUNE_DATABASE_URL", sqlite_url)
    assert main(["token", "create", "--role", "client", "--owner", "alice"]) == 0
    out = capsys.readouterr().out.splitlines()
    secret = out[-1]
    assert secret.startswith("lt_") and " " not in secret and "alice" in out[0]
    assert main(["token", "create", "--role", "worker", "--json"]) == 0
    created = json.loads(capsys.readouterr().out)
    assert (
        created["role"] == "worker"
        and created["owner"] == "worker"
        and created["secret"].startswith("lt_")
    )
    assert main(["token", "list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)["tokens"]
    assert [(t["id"], t["role"], t["owner"]) for t in listed] == [
        (1, "client", "alice"),
        (created["id"], "worker", "worker"),
    ]
    assert all("secret" not in t for t in listed)
    assert main(["token", "list"]) == 0
    assert secret not in capsys.readouterr().out

    # A coordinator trusts a token it looked up for auth_cache_seconds: a revocation made
    # elsewhere (this CLI, another coordinator) reaches it within that time.
    with TestClient(
        create_app(settings=Settings(database_url=sqlite_url, auth_cache_seconds=0.5))
    ) as http:
        assert http.get("/v1/jobs", headers=_bearer(secret)).status_code == 200
        assert main(["token", "revoke", "1"]) == 0
        assert "revoked token 1" in capsys.readouterr().out
        time.sleep(0.6)
        assert http.get("/v1/jobs", headers=_bearer(secret)).status_code == 401

    assert main(["token", "revoke", "99"]) == 2
    assert "token 99 not found" in capsys.readouterr().err
    assert main(["token", "create", "--role", "client", "--owner", "no spaces"]) == 2
    assert capsys.readouterr().err.startswith("loomtune: error: --owner:")


def test_roles_are_spelt_alike() -> None:
    from service.cli import coordinator as coordinator_cli
    from service.coordinator import tokens

    assert coordinator_cli.ROLES == tokens.ROLES
