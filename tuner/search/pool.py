"""The evolutionary search's children, made on every core: sample or mutate, then featurize.

A proposal round samples and mutates about 150 traces and lowers each one to
compute the features the cost model scores: tens of milliseconds of Python per
trace, more than half of a tuning run's time on a 2-core machine. The
measurement processes are idle while the strategy searches, so the search fans
this work out over the machine's cores.

A `Job` carries its own seed, so what it yields depends only on the space, the
parent and the seed, never on which process ran it or how many there are: a
seeded search proposes the same traces with one process or eight. The design
space travels pickled (a few KiB) with each chunk of jobs, under a token; a
process unpickles a space once and keeps the last few, with the programs they
built.
"""

from __future__ import annotations

import atexit
import os
import pickle
import random
import selectors
import struct
import subprocess
import sys
import threading
import uuid
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import BinaryIO

import numpy as np

from ir.program import Program
from ir.schedule import ScheduleError
from tuner.cost_model.features import program_features
from tuner.space.base import DesignSpace, SpaceRejected
from tuner.trace.errors import TraceError
from tuner.trace.trace import Trace

REJECTED = (SpaceRejected, ScheduleError, TraceError)
"""What a space raises for a candidate it will not make: the candidate is dropped."""

PROCESSES_ENV = "LOOMTUNE_SEARCH_PROCESSES"
"""Overrides how many processes the search uses (1: all in the calling process)."""

MAX_PROCESSES = 8
MIN_PARALLEL_JOBS = 8
"""Fewer jobs than this run in the calling process: a round trip would cost more."""


@dataclass(frozen=True)
class Job:
    """Make one child: a fresh sample (`parent` None) or a mutant of `parent`."""

    seed: int
    parent: Trace | None = None


Child = tuple[Trace | None, np.ndarray | None]
"""The trace made (None if the space refused) and its features (None if it does not lower)."""


def trace_features(space: DesignSpace, program: Program, trace: Trace) -> np.ndarray | None:
    """The cost model's features of the program `trace` schedules; None when it does not apply."""
    try:
        cached = getattr(space, "scheduled_program", None)
        scheduled = cached(trace) if cached is not None else None
        if scheduled is None:
            scheduled = trace.apply(program).program
        return program_features(scheduled)
    except (*REJECTED, RecursionError):
        return None


def make_child(space: DesignSpace, program: Program, job: Job) -> Child:
    rng = random.Random(job.seed)
    try:
        trace = space.sample(rng) if job.parent is None else space.mutate(job.parent, rng)
    except REJECTED:
        return None, None
    if trace is None:
        return None, None
    return trace, trace_features(space, program, trace)


def search_processes() -> int:
    """Processes the search uses: the usable cores (at most 8), or LOOMTUNE_SEARCH_PROCESSES."""
    value = os.environ.get(PROCESSES_ENV)
    if value:
        try:
            return max(1, int(value))
        except ValueError:
            raise ValueError(f"{PROCESSES_ENV} must be a whole number, got {value!r}") from None
    return max(1, min(len(os.sched_getaffinity(0)), MAX_PROCESSES))


# -- the helper processes' side ----------------------------------------------------------

_SPACES: OrderedDict[str, tuple[DesignSpace, Program]] = OrderedDict()
_KEEP_SPACES = 4


def run_chunk(token: str, payload: bytes, jobs: Sequence[Job]) -> list[Child]:
    """What a helper does with one request (`tuner/search/worker.py`)."""
    if token not in _SPACES:
        _SPACES[token] = pickle.loads(payload)
        while len(_SPACES) > _KEEP_SPACES:
            _SPACES.popitem(last=False)
    _SPACES.move_to_end(token)
    space, program = _SPACES[token]
    return [make_child(space, program, job) for job in jobs]


def write_frame(stream: BinaryIO, obj: object) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(struct.pack("<Q", len(data)) + data)
    stream.flush()


def read_frame(stream: BinaryIO) -> object:
    """The next pickled frame; EOFError when the other side is gone."""
    head = stream.read(8)
    if len(head) < 8:
        raise EOFError("search helper closed its pipe")
    (size,) = struct.unpack("<Q", head)
    data = stream.read(size)
    if len(data) < size:
        raise EOFError("search helper closed its pipe mid-frame")
    return pickle.loads(data)


# -- the caller's side --------------------------------------------------------------------


class _Helper:
    """`python -m tuner.search.worker`: a subprocess, so a user's script is never re-imported
    (multiprocessing's spawn would run an unguarded script's top level again).

    Its own session, like the measurement processes: a terminal's Ctrl-C signals
    the tuner alone, which owns the stop; the helper ends when its stdin closes."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tuner.search.worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            start_new_session=True,
        )

    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        if self.alive():
            self.process.kill()
        self.process.wait()


_HELPERS: list[_Helper] = []
_HELPERS_LOCK = threading.Lock()


def _helpers(n: int) -> list[_Helper]:
    """n live helpers, shared by every strategy of this process (the task scheduler runs several)."""
    global _HELPERS
    _HELPERS = [h for h in _HELPERS if h.alive()]
    while len(_HELPERS) < n:
        _HELPERS.append(_Helper())
    return _HELPERS[:n]


def start_helpers(processes: int | None = None) -> None:
    """Start the helper processes now, without waiting for them: their imports (~0.5 s each)
    then overlap what the caller does before its first proposal (`loomtune tune` opens the
    database meanwhile). Nothing when the search runs in one process."""
    n = search_processes() if processes is None else max(1, processes)
    if n > 1:
        with _HELPERS_LOCK:
            _helpers(n)


def helper_pids() -> list[int]:
    """The live helper processes (the benchmarks count their CPU time as the tuner's)."""
    return [h.process.pid for h in _HELPERS if h.alive()]


def shutdown() -> None:
    """Stop the helper processes (at exit); the next round starts new ones."""
    with _HELPERS_LOCK:
        for h in _HELPERS:
            h.kill()
        _HELPERS.clear()


atexit.register(shutdown)


class SearchPool:
    """Makes children of one space, in this process or spread over the helper processes."""

    def __init__(self, space: DesignSpace, program: Program, processes: int | None = None) -> None:
        self.space = space
        self.program = program
        self.processes = search_processes() if processes is None else max(1, processes)
        self._token = uuid.uuid4().hex
        self._payload: bytes | None = None

    def _pickled(self) -> bytes | None:
        if self._payload is None:
            try:
                self._payload = pickle.dumps((self.space, self.program))
            except Exception:  # a space holding something unpicklable runs here
                self._payload = b""
        return self._payload or None

    def children(self, jobs: Sequence[Job]) -> list[Child]:
        """One child per job, in order."""
        payload = self._pickled() if self.processes > 1 and len(jobs) >= MIN_PARALLEL_JOBS else None
        if payload is None:
            return [make_child(self.space, self.program, job) for job in jobs]
        size = -(-len(jobs) // (2 * self.processes))
        chunks = [list(jobs[i : i + size]) for i in range(0, len(jobs), size)]
        results: list[list[Child] | None] = [None] * len(chunks)
        with _HELPERS_LOCK:
            helpers = _helpers(self.processes)
            busy: dict[int, tuple[_Helper, int]] = {}  # stdout fd -> (helper, chunk index)
            pending = list(range(len(chunks)))
            with selectors.DefaultSelector() as selector:

                def send(helper: _Helper) -> None:
                    while pending:
                        i = pending.pop(0)
                        try:
                            write_frame(helper.process.stdin, (self._token, payload, chunks[i]))
                        except (BrokenPipeError, OSError):
                            pending.insert(0, i)
                            helper.kill()
                            return
                        busy[helper.process.stdout.fileno()] = (helper, i)
                        selector.register(helper.process.stdout, selectors.EVENT_READ)
                        return

                for h in helpers:
                    send(h)
                while busy:
                    for key, _ in selector.select():
                        helper, i = busy.pop(key.fd)
                        selector.unregister(key.fileobj)
                        try:
                            results[i] = read_frame(helper.process.stdout)  # type: ignore[assignment]
                        except (EOFError, pickle.UnpicklingError, OSError):
                            helper.kill()  # died (killed, out of memory): its chunk runs here
                            continue
                        send(helper)
        # What a dead helper left undone runs here; the children are the same either way.
        out: list[Child] = []
        for i, chunk in enumerate(chunks):
            done = results[i]
            out.extend(
                done
                if done is not None
                else [make_child(self.space, self.program, j) for j in chunk]
            )
        return out
