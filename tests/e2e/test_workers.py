"""Real `loomtune worker` processes against a real coordinator (`loomtune serve` on loopback, PostgreSQL).

A job submitted with `loomtune jobs submit --wait` is tuned by the
coordinator's job runner and two workers, and its best schedule verifies with
`loomtune apply`. With jobs whose candidates the test writes itself (through
the job runner's seam): two workers measure every candidate exactly once; a crashing
candidate is recorded as crashed and its worker goes on; a worker killed with
SIGKILL has its leases expire and re-dispatched; SIGTERM hands leases back
within 2 s and exits 0; a coordinator that is down (at start, or killed and
restarted) is waited out with backoff, one log line per change of state.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator

import pytest

from codegen.host import host_target
from ir.task import library_task
from tests.e2e.cluster import (
    ROOT,
    Coordinator,
    Proc,
    Worker,
    alive,
    base_env,
    command,
    core_list,
    faulty_trace,
    free_port,
    sample_traces,
)
from tests.postgresql import fresh_pg_schema, pg_url_for
from tests.tls import self_signed_cert

TASK = library_task("matmul", {"m": 16, "n": 16, "k": 16})
LEASE_SECONDS = "3"
SETTINGS = {"LOOMTUNE_LEASE_SECONDS": LEASE_SECONDS, "LOOMTUNE_HEARTBEAT_SECONDS": "0.5"}


def e2e_schema() -> Iterator[str]:
    yield from fresh_pg_schema("loomtune_e2e")


@pytest.fixture(scope="module")
def coordinator() -> Iterator[Coordinator]:
    """One coordinator for the module's tests (each test finishes its own jobs)."""
    for schema in e2e_schema():
        c = Coordinator(pg_url_for(schema), **SETTINGS)
        try:
            yield c.start()
        finally:
            c.close()


@pytest.fixture
def procs() -> Iterator[list[Proc]]:
    """Processes a test starts; killed (with their measurement processes) afterwards."""
    started: list[Proc] = []
    yield started
    for p in started:
        p.stop()


@pytest.fixture(scope="module")
def target() -> str:
    return host_target(1).canonical()


def records_per_candidate(c: Coordinator, job_id: int) -> dict[int, int]:
    rows = c.rows(
        "SELECT candidate_id, count(*) FROM records WHERE job_id = :j GROUP BY candidate_id",
        j=job_id,
    )
    return {cid: n for cid, n in rows}


def test_two_workers_measure_every_candidate_exactly_once(
    coordinator: Coordinator, procs: list[Proc], target: str
) -> None:
    c = coordinator
    token = c.token("worker", "farm")
    cores = core_list()
    workers = [Worker(c.url, token, cores[i % len(cores)], faults=True) for i in range(2)]
    procs.extend(workers)
    for w in workers:
        w.ready()
    for i, w in enumerate(workers):  # pinned to --cores, and so are its measurement processes
        core = {int(cores[i % len(cores)])}
        assert os.sched_getaffinity(w.pid) == core
        assert w.descendants and all(os.sched_getaffinity(pid) == core for pid in w.descendants)
    traces = [*sample_traces(TASK, 11), faulty_trace(TASK, "crash")]
    job_id, ids = c.start_job(TASK, target, traces)
    try:
        c.wait_measured(job_id)
        # Every candidate has exactly one record, measured by one of the two workers at the first attempt.
        assert records_per_candidate(c, job_id) == {cid: 1 for cid in ids}
        assert c.count(
            "SELECT count(*) FROM candidates WHERE job_id = :j AND status = 'done' AND attempts = 1",
            j=job_id,
        ) == len(ids)
        assert c.count("SELECT trials_done FROM jobs WHERE id = :j", j=job_id) == len(ids)
        by_worker = dict(
            c.rows(
                "SELECT worker, count(*) FROM records WHERE job_id = :j GROUP BY worker", j=job_id
            )
        )
        assert len(by_worker) == 2, by_worker  # both measured some
        # The crashing candidate is a crashed record, and its worker lives on.
        ((status, message),) = c.rows(
            "SELECT status, message FROM records WHERE candidate_id = :c", c=ids[-1]
        )
        assert status == "crashed" and "SIGSEGV" in message
        assert (
            c.count("SELECT count(*) FROM records WHERE job_id = :j AND status = 'ok'", j=job_id)
            == len(ids) - 1
        )
        assert all(w.proc.poll() is None for w in workers)
        assert {
            r[0] for r in c.rows("SELECT llvm_version FROM records WHERE job_id = :j", j=job_id)
        } != {""}

    finally:
        c.finish(job_id)


def test_a_job_submitted_over_http_is_tuned_by_two_workers(
    coordinator: Coordinator, procs: list[Proc], target: str, tmp_path
) -> None:
    """`loomtune jobs submit --wait`: the coordinator's job runner proposes, two workers measure, the job succeeds."""
    c = coordinator
    token = c.token("worker", "farm")
    cores = core_list()
    # Idle workers ask for work every 0.05 s, not every second: with the default one of them
    # could measure all 12 candidates while the other waited out its idle second.
    quick_poll = ("--idle-seconds", "0.05")
    workers = [Worker(c.url, token, cores[i % len(cores)], options=quick_poll) for i in range(2)]
    procs.extend(workers)
    for w in workers:
        w.ready()
    client = c.token("client", "alice")
    trials = 12
    submit = subprocess.run(
        command(
            [
                "loomtune",
                "jobs",
                "submit",
                "matmul",
                "m=32",
                "n=32",
                "k=32",
                "--trials",
                str(trials),
                # replay: the learned search's cost-model rounds were most of the job's time
                # (the default search's jobs run end to end in test_trust.py)
                "--strategy",
                "replay",
                "--seed",
                "1",
                "--wait",
                "--json",
            ]
        ),
        cwd=ROOT,
        env=base_env(LOOMTUNE_COORDINATOR=c.url, LOOMTUNE_TOKEN=client),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert submit.returncode == 0, submit.stderr
    job = json.loads(submit.stdout)
    assert job["status"] == "succeeded" and job["trials"] == trials and job["error"] is None
    assert job["trials_done"] == trials and job["best_latency_ms"] > 0 and job["target"] == target
    # Exactly its budget of measured candidates, each once, by both workers.
    counts = records_per_candidate(c, job["id"])
    assert len(counts) == trials and set(counts.values()) == {1}
    assert c.count("SELECT count(*) FROM records WHERE job_id = :j", j=job["id"]) == trials
    assert len(c.rows("SELECT DISTINCT worker FROM records WHERE job_id = :j", j=job["id"])) == 2

    trace_file = tmp_path / "best.json"
    best = subprocess.run(
        command(
            [
                "loomtune",
                "best",
                "matmul",
                "m=32",
                "n=32",
                "k=32",
                "--coordinator",
                c.url,
                "--token",
                client,
                "-o",
                str(trace_file),
            ]
        ),
        cwd=ROOT,
        env=base_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert best.returncode == 0, best.stderr
    applied = subprocess.run(
        command(["loomtune", "apply", str(trace_file), "--json"]),
        cwd=ROOT,
        env=base_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert applied.returncode == 0, applied.stderr
    assert json.loads(applied.stdout)["correct"] is True


def test_a_worker_killed_with_sigkill_has_its_leases_re_dispatched(
    coordinator: Coordinator, procs: list[Proc], target: str
) -> None:
    c = coordinator
    token = c.token("worker", "farm")
    cores = core_list()
    doomed = Worker(c.url, token, cores[0], faults=True)  # its first candidate hangs
    procs.append(doomed)
    doomed.ready()
    job_id, ids = c.start_job(
        TASK, target, [faulty_trace(TASK, "hang"), *sample_traces(TASK, 1, seed=1)]
    )
    try:
        c.wait_leased(ids, doomed.id)  # a batch of two: one hanging in its slot, one waiting
        doomed.signal(signal.SIGKILL)
        doomed.proc.wait()
        killed_at = time.monotonic()
        # Another worker (faults off: the annotation is ignored) gets them once the leases expire.
        rescuer = Worker(c.url, token, cores[-1])
        procs.append(rescuer)
        rescuer.ready()
        c.wait_measured(job_id)
        assert (
            time.monotonic() - killed_at >= float(LEASE_SECONDS) - 0.5
        )  # not before the lease expired
        assert records_per_candidate(c, job_id) == {cid: 1 for cid in ids}
        rows = c.rows(
            "SELECT attempts, lease_holder, status FROM candidates WHERE job_id = :j", j=job_id
        )
        assert sorted(rows) == [(2, rescuer.id, "done")] * 2
        assert (
            c.count("SELECT count(*) FROM records WHERE job_id = :j AND status = 'ok'", j=job_id)
            == 2
        )
        assert c.count("SELECT trials_done FROM jobs WHERE id = :j", j=job_id) == 2
    finally:
        c.finish(job_id)


def test_sigterm_hands_the_leases_back_within_2_s_and_exits_0(
    coordinator: Coordinator, procs: list[Proc], target: str
) -> None:
    c = coordinator
    worker = Worker(c.url, c.token("worker", "farm"), core_list()[0], faults=True)
    procs.append(worker)
    worker.ready()
    job_id, ids = c.start_job(
        TASK, target, [faulty_trace(TASK, "hang"), *sample_traces(TASK, 1, seed=2)]
    )
    try:
        c.wait_leased(ids, worker.id)
        deadline = time.monotonic() + 20  # the hanging candidate reaches its measurement process
        measuring: list[int] = []
        while not measuring and time.monotonic() < deadline:
            time.sleep(0.1)
            worker.remember_children()
            measuring = [pid for pid in worker.descendants if alive(pid)]
        assert measuring
        time.sleep(0.5)
        start = time.monotonic()
        worker.signal(signal.SIGTERM)
        assert worker.proc.wait(timeout=5) == 0
        assert time.monotonic() - start < 2.0
        rows = c.rows("SELECT status, lease_holder FROM candidates WHERE job_id = :j", j=job_id)
        assert rows == [("pending", None)] * 2  # handed back, not left to expire
        assert "handed 2 lease(s) back" in worker.text()
        time.sleep(0.2)
        assert not any(alive(pid) for pid in measuring)  # the hanging measurement was stopped too
        assert c.count("SELECT count(*) FROM records WHERE job_id = :j", j=job_id) == 0
    finally:
        c.finish(job_id)


def test_refused_tokens_are_one_line_and_exit_2(coordinator: Coordinator) -> None:
    c = coordinator
    for token, says in (("lt_no-such-token", "401"), (c.token("client"), "role worker")):
        done = subprocess.run(
            command(["loomtune", "worker", "--coordinator", c.url, "--token", token]),
            cwd=ROOT,
            env=base_env(),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 2
        assert done.stderr.count("\n") == 1 and done.stderr.startswith(
            "loomtune: error: the coordinator refused the token"
        )
        assert says in done.stderr
    done = subprocess.run(
        command(["loomtune", "worker", "--coordinator", c.url]),
        cwd=ROOT,
        env=base_env(LOOMTUNE_TOKEN=""),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "no token" in done.stderr


def test_workers_wait_out_an_unreachable_coordinator(procs: list[Proc], target: str) -> None:
    """Down at the start, then killed and restarted mid-job: the worker carries on, nothing lost or doubled."""
    for schema in e2e_schema():
        c = Coordinator(pg_url_for(schema), port=free_port(), **SETTINGS)
        try:
            c.upgrade()
            token = c.worker_token("farm")  # what compose's worker-token step does
            worker = Worker(c.url, token, core_list()[0])
            procs.append(worker)
            worker.wait_for("unreachable")
            time.sleep(1.0)  # a few retries: still one line
            c.serve()
            worker.ready()
            job_id, ids = c.start_job(TASK, target, sample_traces(TASK, 3, seed=3))
            c.wait_measured(job_id)

            c.kill()  # the coordinator dies while the worker runs
            more = c.add(job_id, sample_traces(TASK, 6, seed=4)[3:])
            time.sleep(1.5)
            c.start()  # same database, same port
            c.wait_measured(job_id)
            assert records_per_candidate(c, job_id) == {cid: 1 for cid in [*ids, *more]}
            assert c.count("SELECT trials_done FROM jobs WHERE id = :j", j=job_id) == 6
            log = worker.text()
            assert log.count("unreachable") == 2 and log.count("reachable again") == 2, log
            assert worker.proc.poll() is None
            c.finish(job_id)
        finally:
            c.close()


def test_workers_and_clients_over_tls(procs: list[Proc], target: str, tmp_path) -> None:
    """`serve --ssl-certfile/--ssl-keyfile`; workers and `loomtune jobs` trust a private CA through SSL_CERT_FILE."""
    cert, key = self_signed_cert(tmp_path)
    c = Coordinator(f"sqlite:///{tmp_path / 'tls.db'}", tls=(cert, key), **SETTINGS)
    try:
        c.start()
        assert c.url.startswith("https://")
        token = c.token("worker", "farm")
        untrusting = Worker(
            c.url, token, core_list()[0]
        )  # the system's CAs: the certificate is refused
        procs.append(untrusting)
        untrusting.wait_for(r"unreachable \(.*CERTIFICATE_VERIFY_FAILED")
        worker = Worker(c.url, token, core_list()[-1], SSL_CERT_FILE=str(cert))
        procs.append(worker)
        worker.ready()
        job_id, ids = c.start_job(TASK, target, sample_traces(TASK, 2, seed=5))
        deadline = time.monotonic() + 60
        while c.count(
            "SELECT count(*) FROM candidates WHERE job_id = :j AND status = 'done'", j=job_id
        ) < len(ids):
            assert time.monotonic() < deadline, "not measured over TLS"
            time.sleep(0.1)
        listed = subprocess.run(
            command(
                [
                    "loomtune",
                    "jobs",
                    "list",
                    "--json",
                    "--coordinator",
                    c.url,
                    "--token",
                    c.token("admin"),
                ]
            ),
            cwd=ROOT,
            env=base_env(SSL_CERT_FILE=str(cert)),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert listed.returncode == 0, listed.stderr
        assert [j["trials_done"] for j in json.loads(listed.stdout)["jobs"]] == [2]
        c.finish(job_id)
    finally:
        c.close()
