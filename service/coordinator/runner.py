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

A model job (`service.coordinator.model_jobs`) is driven the same way with the
task scheduler over its tasks (`service.tuning.schedule_model_tasks`, what `tune
--model` runs): each task's candidates are written to its own child job, and the
trials of all of them together spend the model job's one budget.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

from sqlalchemy import Engine

from ir.task import Task
from service.coordinator import jobs, trust
from service.coordinator.model_jobs import model_tasks, task_groups
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
        self.lost = False
        """The job's lease was lost (`keep_lease`): stop driving it."""
        self.jobs_of: dict[str, int] = {}
        """Workload key -> the job its candidates belong to (a model job's tasks); else `job_id`."""

    def renew(self) -> None:
        with self.sessions.write() as s:
            if jobs.renew_job(s, self.job_id, self.runner, self.lease_seconds) is None:
                raise JobStopped(f"job {self.job_id} is no longer driven by {self.runner}")
        self._last_renew = time.monotonic()

    def keep_lease(self, done: threading.Event) -> None:
        """Renew the job's lease every quarter lease until `done`, also while the search
        proposes (a model's first batches can outlast a short lease: the job would look
        abandoned and be claimed again); a lost lease stops the driver at its next poll."""
        while not done.wait(self.lease_seconds / 4):
            try:
                self.renew()
            except JobStopped:
                self.lost = True
                return
            except Exception:  # a database hiccup: the next renewal tries again
                log.warning("job %d: could not renew its lease; retrying", self.job_id)

    def poll(self, ids: Sequence[int]) -> None:
        """Fetch the results that arrived (at most every POLL_SECONDS); renew the job's lease."""
        if self.stop.is_set():
            raise RunnerStopping
        if self.lost:
            raise JobStopped(f"job {self.job_id} is no longer driven by {self.runner}")
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
            owner = self.jobs_of.get(task.key, self.job_id)
            ids = jobs.add_candidates(s, owner, [(t.to_json(), t.hash) for t in traces])
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


@dataclass(frozen=True)
class Claimed:
    """A job leased to this runner, with what driving it needs."""

    job_id: int
    target: str
    strategy: str
    seed: int
    target_id: int
    task: Task | None = None
    """A workload job's task; None for a model job (see `tasks`)."""
    tasks: list[tuple[int, Task, float]] = field(default_factory=list)
    """A model job's (child job id, task, weight) per distinct task."""
    groups: list[int] | None = None
    """A model job's plan task per task: alternatives (direct, Winograd) share one."""


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
                        target=self.drive, args=(claimed,), name="loomtune-job", daemon=True
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
            self.drive(claimed)
        return claimed is not None

    def _claim(self) -> Claimed | None:
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
                    task = jobs.job_task(job) if job.model is None else None
                    tasks = model_tasks(s, job_id) if job.model is not None else []
                except Exception as e:  # validated at submission; a newer loomtune may differ
                    jobs.finish_job(
                        s, job_id, self.name, "failed", f"cannot rebuild the workload: {e}"
                    )
                    continue
                target = jobs.job_target(s, job)
                groups = task_groups(job.model) if job.model is not None else None
                return Claimed(
                    job_id, target, job.strategy, job.seed or 0, job.target_id, task, tasks, groups
                )

    def drive(self, claimed: Claimed) -> None:
        """Tune the job to its budget, wait for its results, confirm its best, finish it."""
        job_id = claimed.job_id
        runner = LeaseRunner(self.sessions, job_id, self.name, self.lease_seconds, self._stop)
        runner.target_id = claimed.target_id
        runner.jobs_of = {task.key: child for child, task, _ in claimed.tasks}
        done = threading.Event()
        keeper = threading.Thread(
            target=runner.keep_lease, args=(done,), name="loomtune-job-lease", daemon=True
        )
        keeper.start()
        try:
            note = self._tune(claimed, runner)
            if note is None:
                return  # this process is stopping: the job's lease expires and another runner resumes it
            self._wait_outstanding(runner, job_id)
            self._confirm(runner, list(runner.jobs_of.values()) or [job_id])
            with self.sessions.write() as s:
                jobs.finish_job(s, job_id, self.name, "succeeded", note=note or None)
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
        finally:
            done.set()
            keeper.join()

    def _tune(self, claimed: Claimed, runner: LeaseRunner) -> str | None:
        """Spend what is left of the budget; the job's note ("" for none), or None when
        interrupted (this runner is stopping)."""
        from codegen.host import parse_target
        from service.tuning import make_space

        job_id, target = claimed.job_id, claimed.target
        ids = [job_id, *runner.jobs_of.values()]
        with self.sessions.read() as s:
            budget = jobs.job_progress(s, job_id).budget
            pending = frozenset().union(*(jobs.outstanding_hashes(s, i) for i in ids))
            written = sum(jobs.tuning_candidates(s, i) for i in ids)
        # Candidates an earlier runner wrote still count toward the budget: they are
        # measured and waited for, and the search does not propose them again. Counted in
        # one statement per job: trials_done and the pending ones, read apart, race a post.
        remaining = max(0, budget - written)
        database = SQLDatabase(self.engine)
        if claimed.task is None:
            return self._tune_model(claimed, runner, database, remaining)
        task = claimed.task
        space = make_space(task, parse_target(target))
        strategy = make_strategy(
            claimed.strategy, SearchContext(task, target, space, database, pending), claimed.seed
        )
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
            return None
        return (
            f"the design space ran out after {run.trials_done} new trials" if run.exhausted else ""
        )

    def _tune_model(
        self, claimed: Claimed, runner: LeaseRunner, database: SQLDatabase, remaining: int
    ) -> str | None:
        """A model job: the task scheduler over its tasks, under the one budget left."""
        from codegen.host import parse_target
        from service.tuning import make_space, schedule_model_tasks, task_states

        log.info(
            "job %d: a model's %d tasks on %s, %d trials to go",
            claimed.job_id,
            len(claimed.tasks),
            claimed.target,
            remaining,
        )
        if remaining == 0:
            return ""
        machine = parse_target(claimed.target)
        states = task_states(
            database, [(t.key, t.op, "", int(w)) for _, t, w in claimed.tasks], claimed.target
        )
        scheduler, done = schedule_model_tasks(
            [task for _, task, _ in claimed.tasks],
            states,
            target=claimed.target,
            space_of=lambda t: make_space(t, machine),
            database=database,
            runner=runner,
            trials=remaining,
            strategy=claimed.strategy,
            seed=claimed.seed,
            should_stop=self._stop.is_set,
            groups=claimed.groups,
        )
        if scheduler.interrupted:
            return None
        if done < remaining:
            return f"the design spaces ran out after {done} new trials"
        return ""

    def _confirm(self, runner: LeaseRunner, job_ids: Sequence[int]) -> None:
        """Before the job ends, its fastest unconfirmed record (a model job's: each task's)
        is re-timed by another worker with the trusted best; a refutation moves to the next
        (docs/architecture.md "Trust"). The tasks of a model are confirmed together.

        A confirmation nobody leases within two lease periods is withdrawn, and one no
        live worker in good standing may take (its only other worker was quarantined or
        died) at once: the record stays unconfirmed.
        """
        open_ids = list(job_ids)
        for _ in range(trust.MAX_ROUNDS):
            ids: list[int] = []
            with self.sessions.write() as s:
                for job_id in list(open_ids):
                    started = trust.start_confirmation(s, job_id, alive_seconds=self.lease_seconds)
                    if started:
                        ids += started
                    else:
                        open_ids.remove(job_id)
            if not ids:
                return
            log.info("job %d: confirming with candidate(s) %s", runner.job_id, ids)
            deadline = time.monotonic() + 2 * self.lease_seconds + 30
            while not self._stop.is_set():
                with self.sessions.read() as s:
                    if jobs.job_progress(s, runner.job_id).outstanding == 0:
                        break
                if time.monotonic() > deadline:
                    with self.sessions.write() as s:
                        jobs.withdraw_candidates(s, ids)
                    return
                with self.sessions.write() as s:  # nobody left to take them: do not wait
                    orphans = trust.orphaned_confirmations(s, ids, alive_seconds=self.lease_seconds)
                    jobs.withdraw_candidates(s, orphans)
                runner.poll([])

    def _wait_outstanding(self, runner: LeaseRunner, job_id: int) -> None:
        """Candidates written by an earlier runner of this job count too: wait for them."""
        while not self._stop.is_set():
            with self.sessions.read() as s:
                if jobs.job_progress(s, job_id).outstanding == 0:
                    return
            runner.poll([])
