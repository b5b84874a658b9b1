"""The coordinator under load, and remote measurement against embedded (issues 11 and 12).

    python -m benchmarks run --suite service      # result file + README table (benchmarks/harness.py)
    python -m benchmarks.service_bench [--quick]  # prints only

Everything runs on this machine, over loopback, with real processes: a
`loomtune serve` (uvicorn, one process, its job runner on) started as a
subprocess on a new PostgreSQL schema `loomtune_bench_<random>` of the
database of `LOOMTUNE_TEST_DATABASE_URL` (default the local `test`
database), prepared by `loomtune db upgrade` and dropped afterwards, also
when the run fails.

1. **Throughput** (issue 11's goal: at least `GOAL_RESULTS_PER_S` result
   submissions per second on PostgreSQL from 16 simulated workers). A
   simulated worker is a thread with its own `httpx.Client` (keep-alive)
   speaking the real worker API: registered (`POST /v1/workers`) before the
   clock starts, then in a loop `POST .../lease` for `BATCH` candidates and
   one `POST .../results` with a fake but valid result for each (status ok,
   three run times, a fresh record id), measuring nothing. The candidates
   are written beforehand through the job runner's seam
   (`service.jobs.add_candidates`) for a job held by the runner `bench` (the
   coordinator's own job runner leaves it alone), so the search is not what
   is timed. Results/s = results the coordinator accepted / the window;
   lease round trip = the client-side time of one lease call.
2. **Sweep**: the same with 1, 2, 4, ..., 64 workers; lease p95 per count and
   the first count above `LEASE_P95_LIMIT_MS` (issue 12). The simulated
   workers never measure, so each asks again at once: a real worker spends
   most of its time measuring and asks far less often.
3. **Measurement throughput**, the same job both ways (issue 12): matmul
   64×64×64, replay strategy, seed 0, `MEASURE_TRIALS` candidates.
   *Embedded*: `service.tuning.tune_task` with a `LocalPool` of one-thread
   slots (one per usable core; its processes started before the clock) and a
   SQLite file. *Cluster*: `loomtune serve` (its job runner proposes the
   candidates) and two `loomtune worker --cores C` processes, one core each,
   registered and ready before the clock; the job submitted with
   `service.client.Client`, timed from the submission until the job reads
   succeeded (polled every 0.1 s) and by the coordinator's own timestamps.
   Quick runs leave this part out (starting workers takes seconds).

On a small machine the simulated workers (this process), the coordinator
and PostgreSQL share the cores: the CPU seconds each used in a window are
recorded (`cpu_s`), and the coordinator's and PostgreSQL's count as this
run's own when the harness decides whether a window was contended by
*other* processes.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from benchmarks.db_queries import (
    PG_DEFAULT,
    Meter,
    _unreachable,
    local_server_cpu,
    postgres_schema,
    unmetered,
)

ROOT = Path(__file__).resolve().parent.parent
GOAL_RESULTS_PER_S = 500.0
"""Issue 11: result submissions per second from 16 simulated workers."""
THROUGHPUT_WORKERS = 16
LEASE_P95_LIMIT_MS = 100.0
"""Issue 12: serve workers while the lease round trip's p95 stays under this."""
SWEEP = (1, 2, 4, 8, 16, 32, 64)
BATCH = 8
"""Candidates per lease call (and results per post) of a simulated worker."""
SIM_TARGET = "llvm -mcpu=znver3 -mattr=+avx,+avx2,+fma -num-threads=1"
"""The simulated workers' target: any CPU will do, nothing is compiled."""
MEASURE_WORKLOAD = ("matmul", {"m": 64, "n": 64, "k": 64})
MEASURE_TRIALS = 64
ADMIN = "lt_bench-admin-" + uuid.uuid4().hex
RUNNER = "bench"


@dataclass(frozen=True)
class ServiceBenchConfig:
    throughput_s: float = 15.0
    throughput_workers: int = THROUGHPUT_WORKERS
    sweep: tuple[int, ...] = SWEEP
    sweep_s: float = 6.0
    warmup_s: float = 2.0
    batch: int = BATCH
    measure_trials: int | None = MEASURE_TRIALS
    """None: leave part 3 (real workers) out."""
    postgres_url: str = PG_DEFAULT


def config_for(quick: bool) -> ServiceBenchConfig:
    url = os.environ.get("LOOMTUNE_TEST_DATABASE_URL") or PG_DEFAULT
    if quick:
        return ServiceBenchConfig(
            throughput_s=1.0,
            throughput_workers=2,
            sweep=(1,),
            sweep_s=0.5,
            warmup_s=0.3,
            measure_trials=None,
            postgres_url=url,
        )
    return ServiceBenchConfig(postgres_url=url)


# -- processes -------------------------------------------------------------------------


def loomtune() -> list[str]:
    script = Path(sys.executable).parent / "loomtune"
    return [str(script)] if script.exists() else [sys.executable, "-m", "service.cli"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _cpu_of(pid: int, tick: int) -> tuple[float, int] | None:
    """(utime + stime seconds, parent pid) of a live process."""
    try:
        line = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    fields = line.rpartition(") ")[2].split()
    return (int(fields[11]) + int(fields[12])) / tick, int(fields[1])


def tree_cpu(pids: Sequence[int]) -> float:
    """CPU seconds so far of these processes and their live descendants."""
    tick = os.sysconf("SC_CLK_TCK")
    table: dict[int, tuple[float, int]] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        got = _cpu_of(int(entry.name), tick)
        if got is not None:
            table[int(entry.name)] = got
    wanted, total, frontier = set(pids), 0.0, list(pids)
    while frontier:
        pid = frontier.pop()
        total += table.get(pid, (0.0, 0))[0]
        for child, (_, parent) in table.items():
            if parent == pid and child not in wanted:
                wanted.add(child)
                frontier.append(child)
    return total


class Proc:
    """A subprocess with its stderr in a temporary file."""

    def __init__(self, argv: Sequence[str], env: dict[str, str]) -> None:
        self.log = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)  # noqa: SIM115
        self.proc = subprocess.Popen(
            list(argv), cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=self.log, text=True
        )

    def text(self) -> str:
        return Path(self.log.name).read_text(encoding="utf-8", errors="replace")

    def wait_for(self, needle: str, timeout: float = 60.0) -> str:
        deadline = time.monotonic() + timeout
        while needle not in (text := self.text()):
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"exited {self.proc.returncode} before {needle!r}: {text[-2000:]}"
                )
            if time.monotonic() > deadline:
                raise RuntimeError(f"no {needle!r} within {timeout:g} s: {text[-2000:]}")
            time.sleep(0.05)
        return text

    def stop(self, grace_s: float = 5.0) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        Path(self.log.name).unlink(missing_ok=True)


def _env(database_url: str | None = None, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOMTUNE_TEST_FAULTS")}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    if database_url is not None:
        env["LOOMTUNE_DATABASE_URL"] = database_url
    env.update(extra)
    return env


class Coordinator:
    """`loomtune db upgrade`, then `loomtune serve` on loopback until /healthz answers."""

    def __init__(self, database_url: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = _env(database_url, LOOMTUNE_ADMIN_TOKEN=ADMIN)
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
        self.proc.stop()


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
        from service import jobs
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
        from service import jobs

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


# -- the parts ---------------------------------------------------------------------------


def _timed(
    meter: Meter, body: Callable[[], dict[str, Any]], helpers: Callable[[], float]
) -> tuple[dict[str, Any], dict[str, float] | None, dict[str, float]]:
    """Run `body` under the meter; (its answer, others' load, CPU seconds by party)."""
    box: dict[str, Any] = {}

    def timing() -> list[float]:
        box["before"] = (helpers(), os.times())
        box["answer"] = body()
        box["after"] = (helpers(), os.times())
        return []

    _, load = meter(timing, helpers)
    (h0, t0), (h1, t1) = box["before"], box["after"]
    cpu = {"helpers": h1 - h0, "bench_process": (t1.user + t1.system) - (t0.user + t0.system)}
    return box["answer"], load, cpu


def simulated_rows(
    config: ServiceBenchConfig, meter: Meter, log: Callable[[str], None]
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Parts 1 and 2 on one coordinator and one PostgreSQL schema."""
    rows: list[dict[str, Any]] = []
    with postgres_schema(config.postgres_url) as (engine, schema):
        coordinator = Coordinator(pg_url(config.postgres_url, schema))
        pg_cpu = local_server_cpu(engine)
        fleet = None
        try:
            fleet = Fleet(coordinator, engine)

            def helpers() -> float:
                return tree_cpu([coordinator.proc.proc.pid]) + (pg_cpu() if pg_cpu else 0.0)

            def cpu_split(
                before: tuple[float, float], after: tuple[float, float]
            ) -> dict[str, float]:
                return {"coordinator": after[0] - before[0], "postgres": after[1] - before[1]}

            def parties() -> tuple[float, float]:
                return tree_cpu([coordinator.proc.proc.pid]), (pg_cpu() if pg_cpu else 0.0)

            # Warm-up: connections, statement caches; and the rate, to size the fills.
            n = config.throughput_workers
            fleet.fill(max(500, n * config.batch * 4))
            warm = fleet.drive(n, config.warmup_s, config.batch)
            rate = max(warm["results_per_s"], 50.0)
            log(f"  warm-up: {warm['results_per_s']:.0f} results/s with {n} workers")

            def part(case: str, label: str, workers: int, seconds: float) -> dict[str, Any]:
                fill_s = fleet.fill(int(rate * seconds * 2) + workers * config.batch * 2)
                split: dict[str, tuple[float, float]] = {}

                def body() -> dict[str, Any]:
                    split["before"] = parties()
                    out = fleet.drive(workers, seconds, config.batch)
                    split["after"] = parties()
                    return out

                answer, load, cpu = _timed(meter, body, helpers)
                cpu.update(cpu_split(split["before"], split["after"]))
                row = {
                    "case": case,
                    "label": label,
                    **answer,
                    "fill_s": fill_s,
                    "cpu_s": cpu,
                    "others_load": load,
                    "correct": answer["errors"] == 0 and answer["results"] > 0,
                    "message": "; ".join(answer["first_errors"]) or None,
                }
                log(
                    f"  {label}: {answer['results_per_s']:.0f} results/s, {answer['leases_per_s']:.0f} leases/s, "
                    f"lease median {answer['lease_ms_median'] or 0:.1f} ms p95 {answer['lease_ms_p95'] or 0:.1f} ms"
                    + (" (ran dry)" if answer["ran_dry"] else "")
                    + (f", {answer['errors']} errors" if answer["errors"] else "")
                )
                return row

            rows.append(part("throughput", f"{n} simulated workers", n, config.throughput_s))
            rate = max(rate, rows[-1]["results_per_s"])
            for count in config.sweep:
                rows.append(part("sweep", f"sweep {count}", count, config.sweep_s))
        finally:
            if fleet is not None:
                fleet.close()
            coordinator.stop()
            with contextlib.suppress(Exception):
                engine.dispose()
    return rows, {"postgres_schema": schema}


def embedded_row(
    config: ServiceBenchConfig, meter: Meter, log: Callable[[str], None]
) -> dict[str, Any]:
    """Part 3a: `tune_task` with the local pool and a SQLite file."""
    from ir.task import library_task
    from service.db.store import open_database
    from service.tuning import tune_task
    from workers.pool import LocalPool

    assert config.measure_trials is not None
    op, params = MEASURE_WORKLOAD
    task = library_task(op, params)
    pool = LocalPool(threads=1)
    try:
        for p in pool.processes:
            p.start()
        pids = [p.pid for p in pool.processes]
        with tempfile.TemporaryDirectory() as tmp:
            database = open_database(f"sqlite:///{Path(tmp) / 'tuning.db'}")

            def body() -> dict[str, Any]:
                start = time.perf_counter()
                outcome = tune_task(
                    task,
                    threads=1,
                    trials=config.measure_trials,
                    strategy="replay",
                    seed=0,
                    database=database,
                    runner=pool,
                    compare=False,
                )
                wall = time.perf_counter() - start
                best = outcome.best.median_ms if outcome.best is not None else None
                return {"wall_s": wall, "measured": outcome.run.trials_done, "best_ms": best}

            answer, load, cpu = _timed(meter, body, lambda: tree_cpu(pids))
            database.engine.dispose()
        slots = pool.slots
    finally:
        pool.close()
    rate = answer["measured"] / answer["wall_s"]
    log(f"  embedded: {answer['measured']} candidates in {answer['wall_s']:.1f} s: {rate:.2f}/s")
    return {
        "case": "embedded",
        "label": f"embedded (tune_task, LocalPool of {slots} one-core slots, SQLite)",
        "slots": slots,
        "candidates": answer["measured"],
        "wall_s": answer["wall_s"],
        "candidates_per_s": rate,
        "best_ms": answer["best_ms"],
        "cpu_s": cpu,
        "others_load": load,
        "correct": answer["measured"] == config.measure_trials,
        "message": None
        if answer["measured"] == config.measure_trials
        else f"measured {answer['measured']}",
    }


def _parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def cluster_row(
    config: ServiceBenchConfig, meter: Meter, log: Callable[[str], None]
) -> dict[str, Any]:
    """Part 3b: `loomtune serve` + two `loomtune worker --cores C`, the job over HTTP."""
    from service.client import Client

    assert config.measure_trials is not None
    op, params = MEASURE_WORKLOAD
    cores = sorted(os.sched_getaffinity(0))
    worker_cores = [str(cores[i % len(cores)]) for i in range(2)]
    with postgres_schema(config.postgres_url) as (engine, schema):
        coordinator = Coordinator(pg_url(config.postgres_url, schema))
        pg_cpu = local_server_cpu(engine)
        workers: list[Proc] = []
        try:
            wsecret = coordinator.token("worker", "bench-workers")
            for c in worker_cores:
                argv = [
                    *loomtune(),
                    "worker",
                    "--coordinator",
                    coordinator.url,
                    "--token",
                    wsecret,
                    "--cores",
                    c,
                ]
                workers.append(Proc(argv, _env()))
            for w in workers:
                w.wait_for("ready: ", timeout=120)
            pids = [coordinator.proc.proc.pid, *(w.proc.pid for w in workers)]

            def helpers() -> float:
                return tree_cpu(pids) + (pg_cpu() if pg_cpu else 0.0)

            with Client(
                coordinator.url, coordinator.token("client", "bench"), timeout=60
            ) as client:

                def body() -> dict[str, Any]:
                    start = time.perf_counter()
                    job = client.submit(
                        op,
                        params,
                        trials=config.measure_trials,
                        target="host",
                        strategy="replay",
                        seed=0,
                    )
                    done = client.wait(job["id"], poll_seconds=0.1, timeout=900)
                    wall = time.perf_counter() - start
                    return {"wall_s": wall, "job": done}

                answer, load, cpu = _timed(meter, body, helpers)
        finally:
            for w in workers:
                w.stop()
            coordinator.stop()
            with contextlib.suppress(Exception):
                engine.dispose()
    job = answer["job"]
    server_s = None
    if job.get("finished_at"):
        server_s = (
            _parse_time(job["finished_at"]) - _parse_time(job["created_at"])
        ).total_seconds()
    ok = job["status"] == "succeeded" and job["trials_done"] == config.measure_trials
    rate = job["trials_done"] / answer["wall_s"]
    log(
        f"  cluster: {job['trials_done']} candidates in {answer['wall_s']:.1f} s: {rate:.2f}/s ({job['status']})"
    )
    return {
        "case": "cluster",
        "label": "cluster (loomtune serve + 2 loomtune worker, one core each, PostgreSQL)",
        "worker_cores": worker_cores,
        "candidates": job["trials_done"],
        "wall_s": answer["wall_s"],
        "server_s": server_s,
        "candidates_per_s": rate,
        "best_ms": job.get("best_latency_ms"),
        "job_status": job["status"],
        "cpu_s": cpu,
        "others_load": load,
        "postgres_schema": schema,
        "correct": ok,
        "message": None
        if ok
        else f"job {job['status']} with {job['trials_done']} trials: {job.get('error')}",
    }


def _failed(case: str, label: str, message: str) -> dict[str, Any]:
    return {"case": case, "label": label, "correct": False, "message": message, "others_load": None}


def run(
    quick: bool, seed: int = 0, *, meter: Meter = unmetered, log: Callable[[str], None] = print
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Rows (one per timed window) and ``{"service": details}`` for the harness."""
    del seed  # nothing random is drawn
    import httpx
    import sqlalchemy
    import uvicorn
    from sqlalchemy.engine import make_url

    from service.db.engine import database_url

    config = config_for(quick)
    details: dict[str, Any] = {
        "config": {**config.__dict__, "sweep": list(config.sweep)},
        "goals": {"results_per_s": GOAL_RESULTS_PER_S, "lease_p95_ms": LEASE_P95_LIMIT_MS},
        "postgres_url": make_url(database_url(config.postgres_url)).render_as_string(
            hide_password=True
        ),
        "versions": {
            "httpx": httpx.__version__,
            "uvicorn": uvicorn.__version__,
            "sqlalchemy": sqlalchemy.__version__,
        },
        "measure": {
            "batch": config.batch,
            "throughput_s": config.throughput_s,
            "sweep_s": config.sweep_s,
        },
        "helper_cpu_s": 0.0,
    }
    rows: list[dict[str, Any]] = []
    unreachable = _unreachable(config.postgres_url)
    if unreachable:
        log(f"  PostgreSQL unreachable: {unreachable}")
        rows.append(
            _failed("throughput", "simulated workers", f"PostgreSQL unreachable: {unreachable}")
        )
        return rows, {"service": details}
    try:
        sim, extra = simulated_rows(config, meter, log)
        rows += sim
        details["simulated_schema"] = extra["postgres_schema"]
    except Exception as e:  # a broken coordinator is a failed row, not a lost run
        log(f"  simulated workers FAILED: {type(e).__name__}: {e}")
        rows.append(_failed("throughput", "simulated workers", f"{type(e).__name__}: {e}"))
    if config.measure_trials is None:
        details["measurement"] = "left out (quick run)"
    else:
        for case, label, part in (
            ("embedded", "embedded", embedded_row),
            ("cluster", "cluster", cluster_row),
        ):
            try:
                rows.append(part(config, meter, log))
            except Exception as e:
                log(f"  {label} FAILED: {type(e).__name__}: {e}")
                rows.append(_failed(case, label, f"{type(e).__name__}: {e}"))
    details["helper_cpu_s"] = sum(r.get("cpu_s", {}).get("helpers", 0.0) for r in rows)
    details["summary"] = summary(rows)
    return rows, {"service": details}


def summary(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The goals: met or not."""
    by = {r["case"]: r for r in rows if r["case"] != "sweep"}
    sweep = [r for r in rows if r["case"] == "sweep" and r["correct"]]
    over = [r["workers"] for r in sweep if (r.get("lease_ms_p95") or 0) > LEASE_P95_LIMIT_MS]
    tp = by.get("throughput")
    emb, clu = by.get("embedded"), by.get("cluster")
    return {
        "results_per_s": tp.get("results_per_s") if tp and tp["correct"] else None,
        "results_goal_met": bool(
            tp and tp["correct"] and tp["results_per_s"] >= GOAL_RESULTS_PER_S
        ),
        "first_workers_over_limit": min(over) if over else None,
        # The largest count before the first one over the limit (counts above it are not "served",
        # even when a noisy window put one of them back under).
        "most_workers_under_limit": max(
            (r["workers"] for r in sweep if not over or r["workers"] < min(over)), default=None
        ),
        "cluster_over_embedded": (
            clu["candidates_per_s"] / emb["candidates_per_s"]
            if emb and clu and emb["correct"] and clu["correct"]
            else None
        ),
    }


# -- report ------------------------------------------------------------------------------


def _f(value: float | None, digits: int = 1) -> str:
    return "—" if value is None else f"{value:,.{digits}f}"


def _pg(value: float | None) -> str:
    """The local PostgreSQL server's CPU seconds: summed over its live processes, so a window where
    backends exited (their time gone with them) can read negative; shown as unknown."""
    return "—" if value is None or value < 0 else _f(value)


def _mark(row: dict[str, Any]) -> str:
    return " †" if row.get("contended") else ""


def report_tables(
    result: dict[str, Any], footnote: str | None = None
) -> list[tuple[str | None, list[str] | Any, str | None]]:
    """(caption, table, note) triples for `benchmarks/report.py`."""
    rows = result["rows"]
    details = result.get("service", {})
    s = summary(rows)  # derived from the rows: the current definitions
    batch = details.get("measure", {}).get("batch", BATCH)
    goals_rows: list[list[str]] = []
    tp = next((r for r in rows if r["case"] == "throughput"), None)
    if tp is not None:
        ok = tp["correct"]
        goals_rows.append(
            [
                f"result submissions/s, {tp.get('workers', THROUGHPUT_WORKERS)} simulated workers{_mark(tp)}",
                _f(tp.get("results_per_s"), 0) if ok else "failed",
                f"≥ {GOAL_RESULTS_PER_S:.0f}",
                "yes" if s["results_goal_met"] else "**no**",
            ]
        )
        if ok:
            goals_rows.append(
                [f"leases/s (batches of {batch}), same run", _f(tp["leases_per_s"], 0), "", ""]
            )
            goals_rows.append(
                [
                    "lease round trip, median / p95 ms, same run",
                    f"{_f(tp['lease_ms_median'])} / {_f(tp['lease_ms_p95'])}",
                    "",
                    "",
                ]
            )
    sweep = [r for r in rows if r["case"] == "sweep"]
    if sweep:
        first = s.get("first_workers_over_limit")
        goals_rows.append(
            [
                f"simulated workers served before lease p95 > {LEASE_P95_LIMIT_MS:.0f} ms",
                f"{s.get('most_workers_under_limit') or 0} (first over: {first if first else 'none up to ' + str(max(r['workers'] for r in sweep))})",
                "",
                "",
            ]
        )
    emb = next((r for r in rows if r["case"] == "embedded"), None)
    clu = next((r for r in rows if r["case"] == "cluster"), None)
    if emb and clu:
        goals_rows.append(
            [
                "measurement: 2 workers / embedded, candidates/s",
                f"{_f(clu.get('candidates_per_s'), 2)} / {_f(emb.get('candidates_per_s'), 2)}"
                + (
                    f" ({s['cluster_over_embedded']:.2f}×)"
                    if s.get("cluster_over_embedded")
                    else ""
                ),
                "",
                "",
            ]
        )
    goals = (["measure", "value", "goal", "met"], goals_rows)
    out: list[tuple[str | None, Any, str | None]] = [(None, goals, None)]
    table_rows = []
    for r in sweep:
        cpu = r.get("cpu_s", {})
        table_rows.append(
            [
                f"{r['workers']}{_mark(r)}",
                _f(r.get("lease_ms_median")),
                _f(r.get("lease_ms_p95")),
                _f(r.get("post_ms_median")),
                _f(r.get("results_per_s"), 0),
                _f(r.get("requests_per_s"), 0),
                f"{_f(cpu.get('coordinator'))} / {_pg(cpu.get('postgres'))} / {_f(cpu.get('bench_process'))}",
                "yes" if r["correct"] else f"**no**: {r.get('message')}",
            ]
        )
    if table_rows:
        caption = (
            f"Simulated workers (threads, one httpx client each, batches of {batch}, no measuring), "
            f"{details.get('measure', {}).get('sweep_s', 0):g} s each:"
        )
        headers = [
            "workers",
            "lease ms median",
            "lease ms p95",
            "post ms median",
            "results/s",
            "requests/s",
            "CPU s coordinator / PostgreSQL / clients",
            "ok",
        ]
        out.append((caption, (headers, table_rows), None))
    mrows = []
    for r in (emb, clu):
        if r is None:
            continue
        mrows.append(
            [
                r["label"] + _mark(r),
                str(r.get("candidates", "—")),
                _f(r.get("wall_s"), 2),
                _f(r.get("candidates_per_s"), 2),
                "yes" if r["correct"] else f"**no**: {r.get('message')}",
            ]
        )
    if mrows:
        op, params = MEASURE_WORKLOAD
        caption = (
            f"Measurement throughput, one job both ways ({op} {params['m']}×{params['n']}×{params['k']}, replay, "
            "seed 0; workers started before the clock):"
        )
        out.append((caption, (["mode", "candidates", "wall s", "candidates/s", "ok"], mrows), None))
    notes = [note(result), footnote]
    out[-1] = (out[-1][0], out[-1][1], "\n\n".join(n for n in notes if n))
    return out


def note(result: dict[str, Any]) -> str:
    details = result.get("service", {})
    cores = result.get("machine", {}).get("usable_cores")
    return (
        f"Everything on this machine ({cores} usable cores): the coordinator (one uvicorn process), "
        "PostgreSQL and the simulated workers (threads of the benchmark process) share the cores, so the "
        "simulated-worker numbers are a floor for a coordinator with cores of its own; in the measurement runs "
        "the coordinator, its job runner and the two workers share them too. A simulated worker leases again as "
        "soon as its post returns; a real one measures first (tens to hundreds of ms a candidate), so it asks "
        "far less often. The PostgreSQL CPU column is the whole local server's (other clients' "
        "queries included; — where backends exited mid-window). Schema dropped afterwards: "
        f"`{details.get('simulated_schema', '—')}`."
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.service_bench", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--quick", action="store_true", help="2 workers for 1 s, a 1-worker sweep, no real workers"
    )
    args = parser.parse_args(argv)
    rows, extra = run(args.quick, log=lambda m: print(m, file=sys.stderr, flush=True))
    import json

    print(json.dumps(extra["service"]["summary"], indent=1))
    return 0 if all(r["correct"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
