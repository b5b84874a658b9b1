"""The measurement worker: `loomtune worker --coordinator URL --token T [--threads N] [--cores LIST]`.

A worker runs on the machine kernels are tuned for. It

1. pins itself to `--cores` and cuts them into slots of `--threads` cores,
   each slot one persistent measurement process (`workers/process.py`: replay,
   compile, verify, time; crash and timeout isolation) pinned to its cores;
2. registers its target (this CPU's LLVM name and features, `-num-threads=N`)
   with the coordinator, its name saying host, pid, cores and LLVM version;
3. leases batches of candidates of that target (two per slot, so a slot has
   its next candidate at hand), measures each in a slot, and reports every
   result with a record id (a UUID made at measurement time, resent unchanged
   when a post may not have arrived: the coordinator stores it once);
4. heartbeats every `heartbeat_seconds` (the coordinator's
   LOOMTUNE_HEARTBEAT_SECONDS, or this process's when set), which extends its
   leases while a long candidate runs;
5. while the coordinator is unreachable (connection refused, timeouts, 5xx),
   retries with exponential backoff, logging one line when the link goes
   down and one when it is back — never a line per try;
6. on SIGTERM or SIGINT stops its measurements, posts the results it has,
   hands every lease back (`release`), and exits 0.

A token the coordinator refuses (401, 403) is fatal: one line, exit 2
(`WorkerError`, a `LoomtuneError`). A result for a lease the worker no longer
holds (409: it expired and went to another worker) is dropped with a line.
Its options are `workers/config.py`; its HTTP link to the coordinator is
`workers/link.py`.
"""

from __future__ import annotations

import os
import queue
import signal
import socket
import sys
import threading
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from tuner.runner import MeasureResult
from workers import protocol as P
from workers.config import HEARTBEAT_SECONDS_ENV, TOKEN_ENV, WorkerConfig, WorkerError, core_text
from workers.link import Link, Rejected, Unreachable
from workers.pool import core_slots
from workers.process import MeasureProcess


def _loomtune_version() -> str:
    from importlib import metadata

    try:
        return metadata.version("loomtune")[: P.MAX_VERSION_CHARS]
    except metadata.PackageNotFoundError:
        return "0+unknown"


def default_log(message: str) -> None:
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    print(f"{stamp} loomtune worker: {message}", file=sys.stderr, flush=True)


# -- the worker ---------------------------------------------------------------------------


class _Slot:
    """One measurement process pinned to its cores, fed from the shared work queue by its thread."""

    def __init__(self, index: int, cores: tuple[int, ...], process: MeasureProcess) -> None:
        self.index = index
        self.cores = cores
        self.process = process
        self.busy = False
        self.thread: threading.Thread | None = None


class WorkerDaemon:
    """A coordinator's measurement worker; `run()` until `stop()` (SIGTERM/SIGINT), then hand leases back."""

    def __init__(
        self,
        config: WorkerConfig,
        *,
        log: Callable[[str], None] = default_log,
        env: dict[str, str] | None = None,
    ) -> None:
        from codegen.host import host_target, llvm_version

        self.config = config
        self.log = log
        self.env = dict(os.environ if env is None else env)
        self.cores = (
            config.cores if config.cores is not None else tuple(sorted(os.sched_getaffinity(0)))
        )
        self.target = host_target(config.threads).canonical()
        self.llvm_version = llvm_version()[: P.MAX_VERSION_CHARS]
        self.loomtune_version = _loomtune_version()
        self.name = (
            config.name
            or (
                f"{socket.gethostname()}:{os.getpid()} cores={core_text(self.cores)} llvm={self.llvm_version}"
            )[:256]
        )
        slots = core_slots(config.threads, self.cores)
        self.slots = [
            _Slot(
                i,
                s,
                MeasureProcess(
                    s,
                    worker=f"{self.name} slot {i}",
                    timeout_s=config.measure_timeout_seconds,
                    env=self.env,
                ),
            )
            for i, s in enumerate(slots)
        ]
        self.batch = config.batch or 2 * len(self.slots)
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._lock = threading.Lock()
        self._work: queue.Queue[P.LeasedCandidate] = queue.Queue()
        self._outstanding = 0  # leased, not yet measured (queued or in a slot)
        self._unsent: list[P.Result] = []  # measured, not yet accepted by the coordinator
        self._known: set[int] = set()  # candidates leased to us that we have not reported
        self._strangers: set[int] = set()  # held by us per the last heartbeat, unknown to us
        self._fatal: WorkerError | None = None
        self.worker_id: int | None = None
        self.lease_seconds = 60.0
        self.heartbeat_seconds = 10.0
        self.link = Link(config, self._stop, log)
        self.measured = 0
        self.reported = 0

    # -- control ----------------------------------------------------------------------

    def stop(self) -> None:
        """Ask the worker to stop (what SIGTERM and SIGINT do); `run()` then hands its leases back."""
        self._stop.set()
        self._wake.set()

    def _fail(self, error: WorkerError) -> None:
        with self._lock:
            if self._fatal is None:
                self._fatal = error
        self.stop()

    def _rejected(self, what: str, e: Rejected) -> WorkerError:
        if e.status == 401:
            return WorkerError(
                f"the coordinator refused the token ({what}: 401 {e.message}); check --token / {TOKEN_ENV}"
            )
        if e.status == 403:
            return WorkerError(
                f"the coordinator refused the token ({what}: 403 {e.message}); a worker needs a token of role worker"
            )
        return WorkerError(f"the coordinator refused {what}: {e.status} {e.message}")

    def install_signal_handlers(self) -> None:
        def handler(signum: int, frame: Any) -> None:
            if not self._stop.is_set():
                self.log(f"{signal.Signals(signum).name}: stopping, handing leases back")
            self.stop()

        signal.signal(signal.SIGTERM, handler)
        signal.signal(signal.SIGINT, handler)

    # -- the main loop ------------------------------------------------------------------

    def run(self) -> int:
        """Pin, start the slots, register, then lease and measure until stopped; 0 on a clean stop."""
        if self.config.cores is not None:
            os.sched_setaffinity(0, self.cores)  # before any thread starts: they inherit it
        try:
            self._register()  # first: a refused token costs no process start
            if not self._stop.is_set():
                self._start_slots()
                slots = ", ".join(core_text(s.cores) for s in self.slots)
                self.log(
                    f"ready: {len(self.slots)} measurement process(es) on cores {slots}, leasing {self.batch} at a time"
                )
            if not self._stop.is_set():
                threads = [
                    threading.Thread(
                        target=self._heartbeats, name="loomtune-heartbeat", daemon=True
                    ),
                    threading.Thread(target=self._reporter, name="loomtune-reporter", daemon=True),
                ]
                for slot in self.slots:
                    slot.thread = threading.Thread(
                        target=self._slot_loop,
                        args=(slot,),
                        name=f"loomtune-slot{slot.index}",
                        daemon=True,
                    )
                    threads.append(slot.thread)
                for t in threads:
                    t.start()
                self._lease_loop()
        finally:
            self._shutdown()
        if self._fatal is not None:
            raise self._fatal
        return 0

    def _start_slots(self) -> None:
        """Start every slot's measurement process at once (numpy and llvmlite take a moment to import)."""
        errors: list[BaseException] = []

        def start(slot: _Slot) -> None:
            try:
                slot.process.start()
            except Exception as e:  # a broken installation: reported below, fatal
                errors.append(e)

        starters = [threading.Thread(target=start, args=(s,), daemon=True) for s in self.slots]
        for t in starters:
            t.start()
        for t in starters:
            t.join()
        if errors:
            raise WorkerError(f"a measurement process did not start: {errors[0]}")

    def _register(self) -> None:
        body = P.Register(name=self.name, target=self.target).to_json()
        try:
            reply = P.Registered.from_json(self.link.call(P.API_PREFIX, body))
        except Unreachable:
            return  # stopped while waiting for the coordinator
        except Rejected as e:
            self._fail(self._rejected("registration", e))
            return
        self.worker_id = reply.id
        self.lease_seconds = reply.lease_seconds
        self.heartbeat_seconds = self._heartbeat_interval(
            reply.heartbeat_seconds, reply.lease_seconds
        )
        from codegen.host import parse_target

        t = parse_target(reply.target)
        self.log(
            f"registered as worker {reply.id} ({self.name}) at {self.link.base}: target {t.cpu} "
            f"({len(t.features)} features), {t.num_threads} thread(s); "
            f"heartbeat every {self.heartbeat_seconds:g} s, leases {reply.lease_seconds:g} s"
        )

    def _heartbeat_interval(self, coordinator_s: float, lease_s: float) -> float:
        interval = self.config.heartbeat_seconds
        if interval is None:
            text = self.env.get(HEARTBEAT_SECONDS_ENV, "").strip()
            try:
                interval = float(text) if text else coordinator_s
            except ValueError:
                raise WorkerError(
                    f"{HEARTBEAT_SECONDS_ENV} must be a number, got {text!r}"
                ) from None
        if not interval > 0:
            raise WorkerError(f"the heartbeat interval must be positive, got {interval!r}")
        return min(interval, lease_s / 3)

    def _path(self, action: str) -> str:
        return f"{P.API_PREFIX}/{self.worker_id}/{action}"

    def _lease_loop(self) -> None:
        idle = self.config.idle_seconds / 4
        while not self._stop.is_set():
            with self._lock:
                room = self.batch - self._outstanding
            if room <= 0:
                self._wake.wait(1.0)
                self._wake.clear()
                continue
            try:
                data = self.link.call(
                    self._path("lease"),
                    P.LeaseRequest(max_candidates=min(room, P.MAX_LEASE_BATCH)).to_json(),
                )
            except Unreachable:
                continue
            except Rejected as e:
                if e.status == 404:  # a coordinator whose database was replaced: start afresh
                    self.log(
                        f"the coordinator no longer knows worker {self.worker_id} ({e.message}); registering again"
                    )
                    self._register()
                    continue
                self._fail(self._rejected("a lease", e))
                return
            reply = P.LeaseReply.from_json(data)
            if not reply.candidates:
                if self._stop.wait(idle):
                    return
                idle = min(idle * 2, self.config.idle_seconds)
                continue
            idle = self.config.idle_seconds / 4
            with self._lock:
                self._outstanding += len(reply.candidates)
                self._known.update(c.candidate_id for c in reply.candidates)
            for c in reply.candidates:
                self._work.put(c)

    # -- measuring ----------------------------------------------------------------------

    def _slot_loop(self, slot: _Slot) -> None:
        while not self._stop.is_set():
            try:
                candidate = self._work.get(timeout=0.2)
            except queue.Empty:
                continue
            with self._lock:
                if self._stop.is_set():
                    return
                slot.busy = True
            try:
                result = slot.process.measure(candidate.workload, candidate.target, candidate.trace)
            except Exception as e:  # the process was killed under us by the shutdown
                if self._stop.is_set():
                    return
                result = MeasureResult.failure(
                    "crashed", f"the measurement process failed: {type(e).__name__}: {e}"
                )
            finally:
                with self._lock:
                    slot.busy = False
            if self._stop.is_set():
                return  # its lease goes back with the others
            self._finished(candidate, result)

    def _finished(self, candidate: P.LeasedCandidate, result: MeasureResult) -> None:
        message = result.message.replace("\x00", "")[: P.MAX_MESSAGE_CHARS]
        if result.status in ("crashed", "timeout"):  # the slot's process was replaced
            first = message.splitlines()[0] if message else ""
            self.log(
                f"candidate {candidate.candidate_id} (job {candidate.job_id}): {result.status}: {first[:200]}"
            )
        out = P.Result(
            candidate_id=candidate.candidate_id,
            record_id=str(uuid.uuid4()),
            status=result.status,
            run_times_ms=tuple(result.run_times_ms),
            message=message,
            loomtune_version=self.loomtune_version,
            llvm_version=(result.llvm_version or self.llvm_version)[: P.MAX_VERSION_CHARS],
        )
        with self._lock:
            self._outstanding -= 1
            self._unsent.append(out)
            self.measured += 1
        self._wake.set()

    # -- reporting ----------------------------------------------------------------------

    def _reporter(self) -> None:
        while not self._stop.is_set():
            try:
                if not self._send_results(retry=True):
                    self._stop.wait(0.05)
            except Exception as e:  # e.g. an answer of another shape: keep the results, try again
                self.log(f"posting results failed: {type(e).__name__}: {e}")
                self._stop.wait(self.config.max_backoff_seconds)

    def _send_results(self, *, retry: bool, timeout: float | None = None) -> bool:
        """Post the unsent results (each keeps its record id across tries); False when there were none."""
        with self._lock:
            batch = self._unsent[: P.MAX_RESULTS_PER_POST]
        if not batch:
            return False
        try:
            self._post(batch, retry=retry, timeout=timeout)
        except Unreachable:
            return True  # kept in _unsent, for the next try or the shutdown's flush
        except Rejected as e:
            if e.status in (401, 403):
                self._fail(self._rejected("results", e))
            else:
                self.log(
                    f"the coordinator refused {len(batch)} result(s): {e.status} {e.message}; dropped"
                )
            self._sent(batch)
        return True

    def _post(self, batch: list[P.Result], *, retry: bool, timeout: float | None) -> None:
        body = P.ResultsPost(results=tuple(batch)).to_json()
        try:
            P.ResultsReply.from_json(
                self.link.call(self._path("results"), body, retry=retry, timeout=timeout)
            )
        except Rejected as e:
            if e.status == 413 and len(batch) > 1:
                # Larger than the coordinator's LOOMTUNE_MAX_BODY_BYTES: two halves.
                half = len(batch) // 2
                self._post(batch[:half], retry=retry, timeout=timeout)
                self._post(batch[half:], retry=retry, timeout=timeout)
                return
            if e.status != 409:
                raise
            # Nothing of that post was stored: one lease no longer held spoils it all; post one by one.
            if len(batch) == 1:
                self.log(f"result of candidate {batch[0].candidate_id} dropped: {e.message}")
                self._sent(batch)
                return
            for r in batch:
                self._post([r], retry=retry, timeout=timeout)
            return
        self._sent(batch)

    def _sent(self, batch: list[P.Result]) -> None:
        done = {id(r) for r in batch}
        with self._lock:
            self._known.difference_update(r.candidate_id for r in batch)
            self._unsent = [r for r in self._unsent if id(r) not in done]
            self.reported += len(batch)

    # -- heartbeats ---------------------------------------------------------------------

    def _heartbeats(self) -> None:
        while not self._stop.wait(self.heartbeat_seconds):
            try:
                reply = P.HeartbeatReply.from_json(
                    self.link.call(self._path("heartbeat"), retry=False)
                )
                self._hand_back_strangers(reply.held)
            except Unreachable:
                continue  # logged by the link; the next beat tries again
            except Rejected as e:
                if e.status in (401, 403):
                    self._fail(self._rejected("a heartbeat", e))
                    return
                self.log(f"heartbeat refused: {e.status} {e.message}")
            except Exception as e:  # an answer of another shape must not end the heartbeats
                self.log(f"heartbeat failed: {type(e).__name__}: {e}")

    def _hand_back_strangers(self, held: Sequence[int]) -> None:
        """Release leases the coordinator says we hold but we never heard of.

        That happens when the coordinator granted a lease and the answer was
        lost (it died mid-response): held and heartbeated, the candidate would
        never be measured. A stranger in two heartbeats in a row (not a lease
        whose answer is arriving right now) is handed back.
        """
        with self._lock:
            unknown = set(held) - self._known
            stale = sorted(unknown & self._strangers)
            self._strangers = unknown - set(stale)
        if not stale:
            return
        data = self.link.call(
            self._path("release"),
            P.ReleaseRequest(candidate_ids=tuple(stale)).to_json(),
            retry=False,
        )
        released = P.ReleaseReply.from_json(data).released
        self.log(
            f"handed back {len(released)} lease(s) whose grant never reached this worker: {list(released)}"
        )

    # -- stopping -----------------------------------------------------------------------

    def _shutdown(self) -> None:
        """Stop measuring, post what was measured, hand every lease back; bounded to about 2 s."""
        self.stop()
        with self._lock:
            busy = [s for s in self.slots if s.busy]
        for s in busy:  # its thread reads EOF, sees the stop, and drops the result
            proc = s.process.proc
            if proc is not None and proc.poll() is None:
                proc.kill()
        if self.worker_id is not None and self._fatal is None:
            try:
                self._send_results(retry=False, timeout=1.0)
            except Exception as e:  # never let a last post keep the leases from going back
                self.log(f"could not post the last results: {e}")
            try:
                data = self.link.call(
                    self._path("release"), P.ReleaseRequest().to_json(), retry=False, timeout=1.0
                )
                released = P.ReleaseReply.from_json(data).released
                self.log(
                    f"handed {len(released)} lease(s) back; stopped after {self.measured} measurement(s)"
                )
            except (Unreachable, Rejected) as e:
                self.log(
                    f"could not hand leases back ({e}); they expire after {self.lease_seconds:g} s"
                )
        for s in self.slots:
            if s.thread is not None:
                s.thread.join(timeout=0.5)
            s.process.kill()
        self.link.close()


def run_worker(config: WorkerConfig, *, log: Callable[[str], None] = default_log) -> int:
    """Run a worker in this process until SIGTERM/SIGINT; its exit code."""
    daemon = WorkerDaemon(config, log=log)
    daemon.install_signal_handlers()
    return daemon.run()
