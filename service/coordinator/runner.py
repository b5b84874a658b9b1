"""The coordinator's job runner: drives queued jobs with the tuner's own loop.

One thread per coordinator process claims a job (`service.coordinator.jobs.claim_job`, a
lease on the job so that with several coordinators on one PostgreSQL each job
has exactly one driver), rebuilds its search from the database (the strategy
de-duplicates against every stored record and the evolutionary model warm-
starts from them, so a restarted coordinator resumes where the last one
stopped), and runs `tuner.search.loop.tune_loop` with a `LeaseRunner`: proposed
traces become candidates rows, remote workers lease and measure them, and
their results come back as the records the workers posted. The job's lease is
renewed while it waits; a cancelled job, or one claimed by another runner after
this one stalled, stops at once.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import Engine

from ir.task import Task
from service.coordinator import jobs, trust
from service.db.session import Sessions
from service.db.store import SQLDatabase
from tuner.database import TuningRecord
from tuner.runner import MeasureResult, RunnerFuture
from tuner.search.loop import tune_loop
from tuner.search.strategy import SearchContext, make_strategy
from tuner.trace.trace import Trace

log = logging.getLogger("loomtune.jobs")

POLL_SECONDS = 0.25
"""How often a waiting runner looks for workers' results."""


class JobStopped(Exception):
    """The job was cancelled, finished elsewhere, or claimed by another runner."""


class RunnerStopping(Exception):
    """This runner is shutting down: leave the job to be resumed by another."""


class JobParked(Exception):
    """No live worker serves the job's target any more: back to the queue, holding nothing."""


MAX_DRIVERS = 16
"""Jobs one coordinator drives at once (a thread each, mostly waiting on the database)."""
SERVED_CHECK_SECONDS = 5.0
"""How often a waiting driver asks whether any live worker still serves its target."""


def _result_of(record: TuningRecord) -> MeasureResult:
    return MeasureResult(
        record.status,
        record.run_times_ms if record.status == "ok" else (),
        record.message,
        record.worker,
        0.0,
        record.llvm_version,
    )


class LeaseRunner:
    """A `Runner` whose measurements are done by remote workers through candidate leases."""

    def __init__(
        self,
        sessions: Sessions,
        job_id: int,
        runner: str,
        lease_seconds: float,
        stop: threading.Event | None = None,
    ) -> None:
        self.sessions = sessions
        self.stop = stop or threading.Event()
        self.job_id = job_id
        self.runner = runner
        self.lease_seconds = lease_seconds
        self._results: dict[int, MeasureResult] = {}
        self._last_poll = 0.0
        self._last_renew = time.monotonic()
        self._last_served = time.monotonic()
        self._last_check = time.monotonic()
        self.target_id: int | None = None

    def renew(self) -> None:
        with self.sessions.write() as s:
            if jobs.renew_job(s, self.job_id, self.runner, self.lease_seconds) is None:
                raise JobStopped(f"job {self.job_id} is no longer driven by {self.runner}")
        self._last_renew = time.monotonic()

    def poll(self, ids: Sequence[int]) -> None:
        """Fetch the results that arrived (at most every POLL_SECONDS); renew the job's lease."""
        if self.stop.is_set():
            raise RunnerStopping
        now = time.monotonic()
        if now - self._last_renew > self.lease_seconds / 4:
            self.renew()
        if self.target_id is not None and now - self._last_check > SERVED_CHECK_SECONDS:
            self._last_check = now
            with self.sessions.read() as s:
                if jobs.target_served(s, self.target_id, alive_seconds=self.lease_seconds):
                    self._last_served = now
            if now - self._last_served > self.lease_seconds:
                raise JobParked(f"job {self.job_id}: no live worker serves its target")
        if now - self._last_poll < POLL_SECONDS:
            time.sleep(POLL_SECONDS - (now - self._last_poll))
        self._last_poll = time.monotonic()
        wanted = [i for i in ids if i not in self._results]
        with self.sessions.read() as s:
            for cid, record in jobs.candidate_results(s, wanted).items():
                self._results[cid] = _result_of(record)

    def submit(self, task: Task, target: str, traces: Sequence[Trace]) -> list[RunnerFuture]:
        with self.sessions.write() as s:
            if jobs.renew_job(s, self.job_id, self.runner, self.lease_seconds) is None:
                raise JobStopped(f"job {self.job_id} is no longer driven by {self.runner}")
            ids = jobs.add_candidates(s, self.job_id, [(t.to_json(), t.hash) for t in traces])
        self._last_renew = time.monotonic()
        return [_LeaseFuture(self, cid, ids) for cid in ids]

    def close(self) -> None:
        pass


class _LeaseFuture:
    def __init__(self, runner: LeaseRunner, candidate_id: int, batch: Sequence[int]) -> None:
        self.runner = runner
        self.candidate_id = candidate_id
        self.batch = batch

    def done(self) -> bool:
        return self.candidate_id in self.runner._results

    def result(self, timeout: float | None = None) -> MeasureResult:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.candidate_id not in self.runner._results:
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"candidate {self.candidate_id} has no result yet")
            self.runner.poll(self.batch)
        return self.runner._results[self.candidate_id]


@dataclass
class JobRunnerService:
    """Claims and drives jobs in a background thread until stopped."""

    engine: Engine
    lease_seconds: float = 60.0
    idle_seconds: float = 1.0
    name: str = ""

    max_drivers: int = MAX_DRIVERS

    def __post_init__(self) -> None:
        self.name = self.name or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.sessions = Sessions(self.engine)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._drivers: list[threading.Thread] = []

    def start(self) -> None:
        self._thread = threading.Thread(target=self._main, name="loomtune-job-runner", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        for driver in self._drivers:
            driver.join(timeout)

    def _main(self) -> None:
        """Claim jobs while fewer than `max_drivers` run, each driven by a thread of its own:
        one job waiting on its workers never holds up another."""
        while not self._stop.is_set():
            try:
                self._drivers = [t for t in self._drivers if t.is_alive()]
                claimed = len(self._drivers) < self.max_drivers and self._claim()
                if claimed:
                    driver = threading.Thread(
                        target=self.drive, args=claimed, name="loomtune-job", daemon=True
                    )
                    driver.start()
                    self._drivers.append(driver)
                else:
                    self._stop.wait(self.idle_seconds)
            except Exception:  # a database hiccup must not kill the runner thread
                log.exception("job runner: unexpected error; retrying")
                self._stop.wait(self.idle_seconds)

    def run_one(self) -> bool:
        """Claim one job and drive it to its end; False when there was none."""
        claimed = self._claim()
        if claimed:
            self.drive(*claimed)
        return claimed is not None

    def _claim(self) -> tuple[int, Task, str, str, int, int] | None:
        """The next job a live worker can measure, leased to this runner (None: none is)."""
        while True:
            with self.sessions.write() as s:
                job = jobs.claim_job(
                    s, self.name, self.lease_seconds, alive_seconds=self.lease_seconds
                )
                if job is None:
                    return None
                job_id = job.id
                try:
                    task = jobs.job_task(job)
                except Exception as e:  # validated at submission; a newer loomtune may differ
                    jobs.finish_job(
                        s, job_id, self.name, "failed", f"cannot rebuild the workload: {e}"
                    )
                    continue
                return (
                    job_id,
                    task,
                    jobs.job_target(s, job),
                    job.strategy,
                    job.seed or 0,
                    job.target_id,
                )

    def drive(
        self,
        job_id: int,
        task: Task,
        target: str,
        strategy_name: str,
        seed: int,
        target_id: int | None = None,
    ) -> None:
        from codegen.host import parse_target
        from service.tuning import make_space

        runner = LeaseRunner(self.sessions, job_id, self.name, self.lease_seconds, self._stop)
        runner.target_id = target_id
        try:
            with self.sessions.read() as s:
                progress = jobs.job_progress(s, job_id)
                pending = jobs.outstanding_hashes(s, job_id)
                written = jobs.tuning_candidates(s, job_id)
            # Candidates an earlier runner wrote still count toward the budget: they are
            # measured and waited for, and the search does not propose them again. Counted in
            # one statement: trials_done and the pending ones, read apart, race a result post.
            remaining = max(0, progress.budget - written)
            database = SQLDatabase(self.engine)
            context = SearchContext(
                task, target, make_space(task, parse_target(target)), database, pending
            )
            strategy = make_strategy(strategy_name, context, seed)
            log.info("job %d: %s on %s, %d trials to go", job_id, task.op, target, remaining)
            run = tune_loop(
                task,
                target,
                strategy=strategy,
                runner=runner,
                database=database,
                trials=remaining,
                should_stop=self._stop.is_set,
                job_id=job_id,
            )
            if run.interrupted:
                return  # this process is stopping: the job's lease expires and another runner resumes it
            self._wait_outstanding(runner, job_id)
            self._confirm(runner, job_id)
            note = (
                f"the design space ran out after {run.trials_done} new trials"
                if run.exhausted
                else None
            )
            with self.sessions.write() as s:
                jobs.finish_job(s, job_id, self.name, "succeeded", note)
        except JobStopped:
            log.info("job %d: stopped (cancelled or taken over)", job_id)
        except RunnerStopping:
            log.info("job %d: left to another runner (this one is stopping)", job_id)
        except JobParked:
            with self.sessions.write() as s:
                jobs.park_job(s, job_id, self.name)
            log.info("job %d: queued again until a live worker serves its target", job_id)
        except Exception as e:
            log.exception("job %d failed", job_id)
            with self.sessions.write() as s:
                jobs.finish_job(s, job_id, self.name, "failed", f"{type(e).__name__}: {e}"[:500])

    def _confirm(self, runner: LeaseRunner, job_id: int) -> None:
        """Before the job ends, its fastest unconfirmed record is re-timed by another worker
        (with the trusted best); a refutation moves to the next (docs/architecture.md "Trust").

        A confirmation nobody leases within two lease periods (its only other worker
        died) is withdrawn: the record stays unconfirmed.
        """
        for _ in range(trust.MAX_ROUNDS):
            with self.sessions.write() as s:
                ids = trust.start_confirmation(s, job_id, alive_seconds=self.lease_seconds)
            if not ids:
                return
            log.info("job %d: confirming with candidate(s) %s", job_id, ids)
            deadline = time.monotonic() + 2 * self.lease_seconds + 30
            while not self._stop.is_set():
                with self.sessions.read() as s:
                    if jobs.job_progress(s, job_id).outstanding == 0:
                        break
                if time.monotonic() > deadline:
                    with self.sessions.write() as s:
                        jobs.withdraw_candidates(s, ids)
                    return
                runner.poll([])

    def _wait_outstanding(self, runner: LeaseRunner, job_id: int) -> None:
        """Candidates written by an earlier runner of this job count too: wait for them."""
        while not self._stop.is_set():
            with self.sessions.read() as s:
                if jobs.job_progress(s, job_id).outstanding == 0:
                    return
            runner.poll([])
