"""A cluster of real processes on loopback: `loomtune db upgrade`, `loomtune serve`, `loomtune worker`.

The commands are the ones `docker-compose.yml` runs (`test_compose.py` checks
that), with loopback addresses and this test's ports, tokens and cores. The
coordinator runs on a PostgreSQL schema of its own. The job runner's part is
played through its seam in `service.coordinator.jobs`: a job is created already running,
held by the runner `e2e-test` (so a coordinator's own job runner leaves it
alone), and its candidates are real traces of the task, written with
`add_candidates`.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import time
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import text

from benchmarks.cluster import (  # noqa: F401 (the tests use them from here)
    ROOT,
    Proc,
    alive,
    base_env,
    children,
    free_port,
    loomtune,
)
from service.coordinator import jobs
from service.db.engine import make_engine
from service.db.session import Sessions
from tuner.database import utc_now

ADMIN = "lt_e2e-admin-secret-0123456789"
RUNNER = "e2e-test"

# The commands, as docker-compose.yml spells them; HOST, PORT, URL and TOKEN stand for values.
COORDINATOR_COMMANDS = (("loomtune", "db", "upgrade"), ("loomtune", "serve", "--host", "HOST"))
WORKER_COMMAND = (
    "loomtune",
    "worker",
    "--coordinator",
    "URL",
    "--token",
    "TOKEN",
    "--cores",
    "CORES",
)
WORKER_TOKEN_COMMAND = ("loomtune", "token", "create", "--role", "worker", "--owner", "OWNER")
PLACEHOLDER_OPTIONS = {
    "--host": "HOST",
    "--coordinator": "URL",
    "--token": "TOKEN",
    "--cores": "CORES",
    "--owner": "OWNER",
}
LOCAL_OPTIONS = ("--port", "--log-level", "--ssl-certfile", "--ssl-keyfile", "--idle-seconds")
"""Options only the tests add (a free port on loopback, quieter logs, TLS, quicker polling);
compose uses the defaults."""


def fill(template: Sequence[str], **values: str) -> list[str]:
    """A command with its placeholders (HOST, URL, TOKEN, CORES, OWNER) replaced by values."""
    return [values.get(word.lower(), word) if word.isupper() else word for word in template]


def normalise(argv: Sequence[str]) -> tuple[str, ...]:
    """A command with the values of addresses, tokens and cores replaced by their placeholders
    and the tests' local options left out."""
    out: list[str] = []
    words = iter(argv)
    for word in words:
        if word in LOCAL_OPTIONS:
            next(words, None)
            continue
        out.append(word)
        if word in PLACEHOLDER_OPTIONS:
            next(words, None)
            out.append(PLACEHOLDER_OPTIONS[word])
    return tuple(out)


def command(argv: Sequence[str]) -> list[str]:
    assert argv[0] == "loomtune"
    return [*loomtune(), *argv[1:]]


class Coordinator:
    """`loomtune db upgrade` then `loomtune serve` on 127.0.0.1, on one database."""

    def __init__(
        self,
        database_url: str,
        port: int | None = None,
        *,
        tls: tuple[Path, Path] | None = None,
        **settings: str,
    ) -> None:
        self.database_url = database_url
        self.port = port or free_port()
        self.tls = tls
        """(certificate, key): serve HTTPS."""
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}"
        self.env = base_env(database_url, LOOMTUNE_ADMIN_TOKEN=ADMIN, **settings)
        self.proc: Proc | None = None
        self.engine = make_engine(database_url)
        self.sessions = Sessions(self.engine)

    def argv(self) -> list[list[str]]:
        """The commands, with this coordinator's host and port."""
        upgrade, serve = (fill(c, host="127.0.0.1") for c in COORDINATOR_COMMANDS)
        tls = (
            ["--ssl-certfile", str(self.tls[0]), "--ssl-keyfile", str(self.tls[1])]
            if self.tls
            else []
        )
        return [upgrade, [*serve, "--port", str(self.port), "--log-level", "warning", *tls]]

    def start(self) -> Coordinator:
        """`db upgrade`, then `serve` until /healthz answers."""
        return self.upgrade().serve()

    def upgrade(self) -> Coordinator:
        done = subprocess.run(
            command(self.argv()[0]),
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        return self

    def worker_token(self, owner: str) -> str:
        """`loomtune token create --role worker` (the database directly, no coordinator needed): the secret."""
        argv = fill(WORKER_TOKEN_COMMAND, owner=owner)
        done = subprocess.run(
            command(argv), cwd=ROOT, env=self.env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.strip().splitlines()[-1]

    def serve(self) -> Coordinator:
        self.proc = Proc(command(self.argv()[1]), self.env)
        deadline = time.monotonic() + 60
        while True:
            if self.proc.proc.poll() is not None:
                raise AssertionError(
                    f"serve exited {self.proc.proc.returncode}: {self.proc.text()[-2000:]}"
                )
            try:
                if (
                    httpx.get(f"{self.url}/healthz", timeout=2, verify=self._verify()).status_code
                    == 200
                ):
                    return self
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "serve did not answer /healthz within 60 s"
            time.sleep(0.1)

    def _verify(self) -> Any:
        import ssl

        return ssl.create_default_context(cafile=str(self.tls[0])) if self.tls else True

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.stop()
            self.proc = None

    def close(self) -> None:
        self.kill()
        self.engine.dispose()

    def token(self, role: str, owner: str | None = None) -> str:
        body: dict[str, Any] = {"role": role, **({"owner": owner} if owner else {})}
        r = httpx.post(
            f"{self.url}/v1/tokens",
            json=body,
            headers={"Authorization": f"Bearer {ADMIN}"},
            timeout=10,
            verify=self._verify(),
        )
        assert r.status_code == 201, r.text
        return r.json()["secret"]

    # -- the job runner's part ------------------------------------------------------------

    def start_job(self, task: Any, target: str, traces: Sequence[Any]) -> tuple[int, list[int]]:
        """A running job held by RUNNER, with one candidate per trace; (job id, candidate ids)."""
        with self.sessions.write() as s:
            job = jobs.create_job(
                s,
                owner="e2e",
                task=task,
                target=target,
                trials=len(traces),
                strategy="replay",
                seed=0,
            )
            job.status = "running"
            job.runner = RUNNER
            job.runner_expires_at = utc_now() + timedelta(hours=1)
            s.flush()
            ids = jobs.add_candidates(s, job.id, [(t.to_json(), t.hash) for t in traces])
            return job.id, ids

    def add(self, job_id: int, traces: Sequence[Any]) -> list[int]:
        with self.sessions.write() as s:
            return jobs.add_candidates(s, job_id, [(t.to_json(), t.hash) for t in traces])

    def finish(self, job_id: int) -> None:
        with self.sessions.write() as s:
            jobs.finish_job(s, job_id, RUNNER, "succeeded")

    def wait_measured(self, job_id: int, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            with self.sessions.read() as s:
                progress = jobs.job_progress(s, job_id)
            if progress.outstanding == 0:
                return
            assert time.monotonic() < deadline, (
                f"job {job_id}: {progress.outstanding} candidate(s) still unmeasured after {timeout} s"
            )
            time.sleep(0.1)

    def wait_leased(
        self, candidate_ids: Sequence[int], worker_id: int, timeout: float = 30.0
    ) -> None:
        deadline = time.monotonic() + timeout
        while self.count(
            "SELECT count(*) FROM candidates WHERE id = ANY(:ids) AND status = 'leased' AND lease_holder = :w",
            ids=list(candidate_ids),
            w=worker_id,
        ) < len(candidate_ids):
            assert time.monotonic() < deadline, f"worker {worker_id} did not lease {candidate_ids}"
            time.sleep(0.05)

    def count(self, sql: str, **params: Any) -> int:
        with self.engine.connect() as conn:
            return int(conn.execute(text(sql), params).scalar() or 0)

    def rows(self, sql: str, **params: Any) -> list[Any]:
        with self.engine.connect() as conn:
            return list(conn.execute(text(sql), params).all())


class Worker(Proc):
    """`loomtune worker --coordinator URL --token T --cores C`; `id` once it registered."""

    def __init__(
        self,
        url: str,
        token: str,
        cores: str,
        *,
        faults: bool = False,
        options: tuple[str, ...] = (),
        **env: str,
    ) -> None:
        argv = fill(WORKER_COMMAND, url=url, token=token, cores=cores) + list(options)
        extra = {"LOOMTUNE_TEST_FAULTS": "1"} if faults else {}
        super().__init__(command(argv), base_env(**extra, **env))
        self.loomtune_argv = argv
        """The command as a user types it (`loomtune worker ...`)."""
        self.id: int | None = None

    def ready(self, timeout: float = 60.0) -> Worker:
        self.id = int(self.wait_for(r"registered as worker (\d+)", timeout).group(1))
        self.wait_for(r"ready: ", timeout)
        self.remember_children()
        return self


def log_tails(procs: Sequence[Proc | None], chars: int = 1500) -> str:
    """Each process's command and the end of its stderr: what a stalled e2e test shows."""
    return "\n".join(
        f"--- {' '.join(p.argv[1:4])} (exit {p.proc.poll()}):\n{p.text()[-chars:]}"
        for p in procs
        if p is not None
    )


def core_list() -> list[str]:
    """One core per worker, round robin over this process's cores."""
    return [str(c) for c in sorted(os.sched_getaffinity(0))]


def sample_traces(task: Any, n: int, seed: int = 0) -> list[Any]:
    """`n` distinct traces of the task's simple design space."""
    from tuner.space.simple import SimpleSpace

    space = SimpleSpace(task.program)
    rng = random.Random(seed)
    found: dict[str, Any] = {}
    for _ in range(50 * n):
        trace = space.sample(rng)
        found.setdefault(trace.hash, trace)
        if len(found) == n:
            return list(found.values())
    raise AssertionError(f"the space of {task.op} has fewer than {n} traces")


def faulty_trace(task: Any, fault: str) -> Any:
    """A correct schedule of a matmul annotated with a test fault (`workers/measure.py`)."""
    from tuner.trace.traced_schedule import TracedSchedule
    from workers.measure import FAULT_KEY

    sch = TracedSchedule(task.program)
    c = sch.get_block("C")
    _, j, _ = sch.get_loops(c)
    _, ji = sch.split(j, [None, 4])
    sch.vectorize(ji)
    sch.annotate(c, FAULT_KEY, fault)
    return sch.trace


def docker_compose() -> str | None:
    return shutil.which("docker-compose")
