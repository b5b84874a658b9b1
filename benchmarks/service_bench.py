"""The coordinator under load, and remote measurement against embedded (issues 11 and 12).

    python -m benchmarks run --suite service      # result file + README table (benchmarks/harness.py)
    python -m benchmarks.service_bench [--quick]  # prints only

Everything runs on this machine, over loopback, with real processes: a
`loomtune serve` (uvicorn, one process, its job runner on) started as a
subprocess on a new PostgreSQL schema `loomtune_bench_<random>` of the
database of `LOOMTUNE_TEST_DATABASE_URL` (default the local `test`
database), prepared by `loomtune db upgrade` and dropped afterwards, also
when the run fails.

1. **Throughput** (the goal: at least `GOAL_RESULTS_PER_S` result
   submissions per second on PostgreSQL from 16 simulated workers). A
   simulated worker is a thread with its own `httpx.Client` (keep-alive)
   speaking the real worker API: registered (`POST /v1/workers`) before the
   clock starts, then in a loop `POST .../lease` for `BATCH` candidates and
   one `POST .../results` with a fake but valid result for each (status ok,
   three run times, a fresh record id), measuring nothing. The candidates
   are written beforehand through the job runner's seam
   (`service.coordinator.jobs.add_candidates`) for a job held by the runner `bench` (the
   coordinator's own job runner leaves it alone), so the search is not what
   is timed. Results/s = results the coordinator accepted / the window;
   lease round trip = the client-side time of one lease call.
2. **Sweep**: the same with 1, 2, 4, ..., 64 workers; lease p95 per count and
   the first count above `LEASE_P95_LIMIT_MS`. The simulated
   workers never measure, so each asks again at once: a real worker spends
   most of its time measuring and asks far less often.
3. **Measurement throughput**, the same job both ways: matmul
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
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from benchmarks.cluster import Proc, base_env, loomtune, tree_cpu
from benchmarks.db_queries import (
    PG_DEFAULT,
    Meter,
    local_server_cpu,
    postgres_schema,
    postgresql_unreachable,
    unmetered,
)

GOAL_RESULTS_PER_S = 500.0
"""The goal: result submissions per second from 16 simulated workers."""
THROUGHPUT_WORKERS = 16
LEASE_P95_LIMIT_MS = 100.0
"""The goal: serve workers while the lease round trip's p95 stays under this."""
SWEEP = (1, 2, 4, 8, 16, 32, 64)
BATCH = 8
"""Candidates per lease call (and results per post) of a simulated worker."""
MEASURE_TRIALS = 64


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
    from benchmarks.service_fleet import Coordinator, Fleet, pg_url

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
    from benchmarks.service_fleet import MEASURE_WORKLOAD
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
    from benchmarks.service_fleet import MEASURE_WORKLOAD, Coordinator, pg_url
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
                workers.append(Proc(argv, base_env()))
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
                w.stop(grace_s=5.0)
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
    unreachable = postgresql_unreachable(config.postgres_url)
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
