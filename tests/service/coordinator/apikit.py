"""Helpers of the coordinator tests: a coordinator per test, on SQLite or PostgreSQL, driven in-process over HTTP (httpx TestClient).

PostgreSQL comes from tests/postgresql.py: each test gets a schema of its
own, dropped afterwards; unreachable PostgreSQL skips those cases, except in
CI (CI=true), where it fails. The job runner does not exist yet: tests play
its part through its seam (`service.coordinator.jobs.claim_job`, `add_candidates`).
"""

from __future__ import annotations

import hashlib
import json
import uuid
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import Engine, text

from service.coordinator.app import create_app
from service.coordinator.settings import Settings
from service.db.engine import make_engine
from service.db.schema import ensure_schema
from service.db.session import Sessions

ADMIN = "lt_test-admin-secret-0123456789"
ZEN = "llvm -mcpu=znver3 -mattr=+avx,+avx2,+fma -num-threads=1"
SKX = "llvm -mcpu=skylake-avx512 -mattr=+avx2,+avx512f -num-threads=1"


class Api:
    """A coordinator under test: its HTTP client, its database and token helpers."""

    def __init__(self, client: TestClient, engine: Engine, settings: Settings) -> None:
        self.http = client
        self.engine = engine
        self.sessions = Sessions(engine)
        self.settings = settings

    @staticmethod
    def auth(secret: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {secret}"}

    def token(self, role: str, owner: str | None = None) -> str:
        body: dict[str, Any] = {"role": role}
        if owner is not None:
            body["owner"] = owner
        r = self.http.post("/v1/tokens", json=body, headers=self.auth(ADMIN))
        assert r.status_code == 201, r.text
        return r.json()["secret"]

    def call(self, method: str, path: str, secret: str | None, **kwargs: Any):
        headers = {**(self.auth(secret) if secret is not None else {}), **kwargs.pop("headers", {})}
        return self.http.request(method, path, headers=headers, **kwargs)

    def register(self, secret: str, target: str = ZEN, name: str = "w") -> int:
        r = self.call("POST", "/v1/workers", secret, json={"name": name, "target": target})
        assert r.status_code == 201, r.text
        return r.json()["id"]

    def submit(
        self, secret: str, *, target: str = ZEN, trials: int = 10, **workload: Any
    ) -> dict[str, Any]:
        wl = workload or {"op": "matmul", "params": {"m": 16, "n": 16, "k": 16}}
        r = self.call(
            "POST", "/v1/jobs", secret, json={"workload": wl, "target": target, "trials": trials}
        )
        assert r.status_code == 201, r.text
        return r.json()

    def run_job(self, job_id: int, n: int, *, start: int = 0) -> list[int]:
        """Play the job runner: claim the job and write `n` candidates; their ids."""
        from service.coordinator import jobs

        with self.sessions.write() as s:
            claimed = jobs.claim_job(s, "test-runner", 600)
            assert claimed is not None and claimed.id == job_id
            return jobs.add_candidates(s, job_id, [trace_of(i) for i in range(start, start + n)])

    def count(self, sql: str, **params: Any) -> int:
        with self.engine.connect() as conn:
            return int(conn.execute(text(sql), params).scalar() or 0)

    def expire_leases(self) -> None:
        """Jump past every lease's expiry (what LOOMTUNE_LEASE_SECONDS of silence does)."""
        with self.engine.begin() as conn:
            conn.execute(
                text("UPDATE candidates SET lease_expires_at = :t WHERE status = 'leased'"),
                {"t": "2000-01-01 00:00:00"},
            )


def trace_of(n: int) -> tuple[dict[str, Any], str]:
    """A stand-in trace (the coordinator treats traces as opaque JSON) and its hash."""
    trace = {"version": 1, "instructions": [], "decisions": {"0": [n, 1]}}
    return trace, hashlib.sha256(json.dumps(trace, sort_keys=True).encode()).hexdigest()


def result(
    candidate_id: int,
    median: float | None = 1.0,
    *,
    status: str = "ok",
    record_id: str | None = None,
) -> dict[str, Any]:
    return {
        "candidate_id": candidate_id,
        "record_id": record_id or str(uuid.uuid4()),
        "status": status,
        "run_times_ms": [median, median, median] if status == "ok" else [],
        "message": "" if status == "ok" else f"{status} on purpose",
        "loomtune_version": "0.1.0",
        "llvm_version": "22.1.0",
    }


def make_api(url: str, **settings: Any) -> tuple[Api, TestClient]:
    values: dict[str, Any] = {"admin_token": ADMIN, "lease_seconds": 60.0, "max_trials": 1000}
    values.update(settings)
    config = Settings(database_url=url, **values)
    engine = make_engine(url)
    ensure_schema(engine)
    client = TestClient(create_app(settings=config, engine=engine))
    return Api(client, engine, config), client
