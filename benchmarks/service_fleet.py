"""The service benchmark's coordinator process and its fleet of simulated workers (threads
speaking the real worker API, measuring nothing)."""

from __future__ import annotations

import contextlib
import statistics
import subprocess
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from benchmarks.cluster import ROOT, Proc, base_env, free_port, loomtune

SIM_TARGET = "llvm -mcpu=znver3 -mattr=+avx,+avx2,+fma -num-threads=1"
"""The simulated workers' target: any CPU will do, nothing is compiled."""
ADMIN = "lt_bench-admin-" + uuid.uuid4().hex
RUNNER = "bench"
MEASURE_WORKLOAD = ("matmul", {"m": 64, "n": 64, "k": 64})
"""The workload the real workers tune (and the simulated ones pretend to measure)."""

# -- processes -------------------------------------------------------------------------


class Coordinator:
    """`loomtune db upgrade`, then `loomtune serve` on loopback until /healthz answers."""

    def __init__(self, database_url: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = base_env(database_url, LOOMTUNE_ADMIN_TOKEN=ADMIN)
        done = subprocess.run(
            [*loomtune(), "db", "upgrade"],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        if done.returncode != 0:
            raise RuntimeError(f"loomtune db upgrade failed: {done.stderr[-2000:]}")
        argv = [*loomtune(), "serve", "--host", "127.0.0.1", "--port", str(self.port)]
        self.proc = Proc([*argv, "--log-level", "warning"], self.env)
        import httpx

        deadline = time.monotonic() + 120
        while True:
            if self.proc.proc.poll() is not None:
                raise RuntimeError(
                    f"serve exited {self.proc.proc.returncode}: {self.proc.text()[-2000:]}"
                )
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{self.url}/healthz", timeout=2, trust_env=False).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError("serve did not answer /healthz within 120 s")
            time.sleep(0.1)

    def token(self, role: str, owner: str) -> str:
        import httpx

        r = httpx.post(
            f"{self.url}/v1/tokens",
            json={"role": role, "owner": owner},
            headers={"Authorization": f"Bearer {ADMIN}"},
            timeout=30,
            trust_env=False,
        )
        r.raise_for_status()
        return r.json()["secret"]

    def stop(self) -> None:
        self.proc.stop(grace_s=5.0)


def pg_url(url: str, schema: str) -> str:
    """`url` whose connections use `schema` (what the subprocesses are given)."""
    from service.db.engine import database_url

    text = database_url(url)
    return f"{text}{'&' if '?' in text else '?'}options=-csearch_path%3D{schema}"


# -- simulated workers ------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    rank = q * (len(ordered) - 1)
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@dataclass
class SimStats:
    lease_ms: list[float] = field(default_factory=list)
    post_ms: list[float] = field(default_factory=list)
    leases: int = 0
    """Lease calls that returned candidates."""
    empty_leases: int = 0
    results: int = 0
    errors: list[str] = field(default_factory=list)


def fake_result(candidate_id: int) -> dict[str, Any]:
    return {
        "candidate_id": candidate_id,
        "record_id": str(uuid.uuid4()),
        "status": "ok",
        "run_times_ms": [1.0, 1.1, 1.05],
        "message": "",
        "loomtune_version": "bench",
        "llvm_version": "bench",
    }


class Fleet:
    """Simulated workers of one coordinator: the job, its candidates, the registered workers."""

    def __init__(self, coordinator: Coordinator, engine: Any) -> None:
        import httpx

        from codegen.host import parse_target
        from ir.task import library_task
        from service.coordinator import jobs
        from service.db.session import Sessions
        from tuner.database import utc_now

        self.coordinator = coordinator
        self.sessions = Sessions(engine)
        self.secret = coordinator.token("worker", "bench-workers")
        self.workers: list[int] = []
        self.added = 0
        self.taken = 0
        self._n = 0
        op, params = MEASURE_WORKLOAD
        with self.sessions.write() as s:
            job = jobs.create_job(
                s,
                owner="bench",
                task=library_task(op, params),
                target=parse_target(SIM_TARGET).canonical(),
                trials=10**9,
                strategy="replay",
                seed=0,
            )
            job.status = "running"
            job.runner = RUNNER
            job.runner_expires_at = utc_now() + timedelta(hours=6)
            s.flush()
            self.job_id = job.id
        self.http = httpx.Client(base_url=coordinator.url, timeout=120, trust_env=False)

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.secret}"}

    def ensure_workers(self, n: int) -> list[int]:
        while len(self.workers) < n:
            body = {"name": f"sim-{len(self.workers)}", "target": SIM_TARGET}
            r = self.http.post("/v1/workers", json=body, headers=self.headers())
            r.raise_for_status()
            self.workers.append(r.json()["id"])
        return self.workers[:n]

    def fill(self, pending: int, chunk: int = 1000) -> float:
        """Write candidates until `pending` are waiting (the runner's seam); seconds it took."""
        from service.coordinator import jobs

        start = time.perf_counter()
        while self.added - self.taken < pending:
            n = min(chunk, pending - (self.added - self.taken))
            traces = []
            for _ in range(n):
                self._n += 1
                trace = {"version": 1, "instructions": [], "decisions": {"0": [self._n, 1]}}
                traces.append((trace, uuid.UUID(int=self._n).hex + uuid.UUID(int=self._n).hex))
            with self.sessions.write() as s:
                jobs.add_candidates(s, self.job_id, traces)
            self.added += n
        return time.perf_counter() - start

    def drive(self, n: int, duration_s: float, batch: int) -> dict[str, Any]:
        """n simulated workers for `duration_s`; what they got done."""
        import httpx

        ids = self.ensure_workers(n)
        stats = [SimStats() for _ in ids]
        barrier = threading.Barrier(n + 1)
        deadline = [0.0]
        url, headers = self.coordinator.url, self.headers()

        def work(i: int) -> None:
            st, wid = stats[i], ids[i]
            with httpx.Client(base_url=url, headers=headers, timeout=120, trust_env=False) as http:
                http.get("/healthz")  # the connection, before the clock
                barrier.wait()
                while time.perf_counter() < deadline[0]:
                    try:
                        t = time.perf_counter()
                        r = http.post(f"/v1/workers/{wid}/lease", json={"max_candidates": batch})
                        st.lease_ms.append((time.perf_counter() - t) * 1e3)
                        if r.status_code != 200:
                            st.errors.append(f"lease {r.status_code}: {r.text[:200]}")
                            continue
                        cands = [c["candidate_id"] for c in r.json()["candidates"]]
                        if not cands:
                            st.empty_leases += 1
                            break  # ran dry: the window ends early
                        st.leases += 1
                        body = {"results": [fake_result(c) for c in cands]}
                        t = time.perf_counter()
                        r = http.post(f"/v1/workers/{wid}/results", json=body)
                        st.post_ms.append((time.perf_counter() - t) * 1e3)
                        if r.status_code != 200:
                            st.errors.append(f"results {r.status_code}: {r.text[:200]}")
                            continue
                        st.results += len(r.json()["accepted"])
                    except httpx.HTTPError as e:
                        st.errors.append(f"{type(e).__name__}: {e}")

        threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(n)]
        for t in threads:
            t.start()
        deadline[0] = time.perf_counter() + duration_s + 3600  # set for real below
        barrier.wait()
        start = time.perf_counter()
        deadline[0] = start + duration_s
        for t in threads:
            t.join()
        elapsed = time.perf_counter() - start
        lease_ms = [x for st in stats for x in st.lease_ms]
        post_ms = [x for st in stats for x in st.post_ms]
        results = sum(st.results for st in stats)
        leases = sum(st.leases for st in stats)
        self.taken += results
        errors = [e for st in stats for e in st.errors]
        return {
            "workers": n,
            "batch": batch,
            "window_s": elapsed,
            "results": results,
            "leases": leases,
            "lease_calls": len(lease_ms),
            "posts": len(post_ms),
            "results_per_s": results / elapsed,
            "leases_per_s": leases / elapsed,
            "requests_per_s": (len(lease_ms) + len(post_ms)) / elapsed,
            "lease_ms_median": statistics.median(lease_ms) if lease_ms else None,
            "lease_ms_p95": percentile(lease_ms, 0.95),
            "lease_ms_max": max(lease_ms) if lease_ms else None,
            "post_ms_median": statistics.median(post_ms) if post_ms else None,
            "post_ms_p95": percentile(post_ms, 0.95),
            "ran_dry": any(st.empty_leases for st in stats),
            "errors": len(errors),
            "first_errors": errors[:5],
        }

    def close(self) -> None:
        self.http.close()
