"""Whole models: an ONNX file to a plan, each task's best stored schedule, a compiled model.

    graph = load_graph("bert.onnx")
    loaded = compile_model(build_plan(graph), host_target(1))
    (logits,) = loaded.model(input_ids=ids)

A task uses the best stored record for the target — from the local database, or a
coordinator's when one is named (what `loomtune best --coordinator` asks) — replayed
onto its naive program (its own key's, else the same computation's measured whole:
`ir.task.schedule_keys`); locally, a schedule tuned at fewer threads of the same CPU
when the target has none or it ran faster (a serial 1-thread best beats a default nest
at 2 threads); a task with no record (or a record that no longer replays) runs its
default loop nest. Also the shared pieces of `model inspect` and
`run --model`: seeded inputs, the correctness rule, ONNX Runtime when installed.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from codegen.model import CompiledModel
from ir import dtype as dt
from ir.errors import LoomtuneError
from ir.graph.graph import Graph
from ir.graph.plan import ModelPlan, PlanTask
from ir.program import Program
from ir.target import Target
from ir.task import Task, schedule_keys
from tuner.database import Database, TuningRecord

TOLERANCE_REL = 1e-3
TOLERANCE_ABS = 1e-5


def load_graph(path: str | os.PathLike) -> Graph:
    """The graph of an ONNX file (`ModelError` naming what is wrong)."""
    from frontend.onnx import load_onnx

    return load_onnx(path)


@dataclass(frozen=True)
class Schedules:
    """Per distinct task (by workload key): its scheduled program when a record is stored.

    Every implementation of a plan task is looked up (`PlanTask.implementations`: a conv
    directly and by Winograd); `choose` runs each task by its fastest stored one."""

    programs: Mapping[str, Program]
    problems: tuple[str, ...] = field(default=())  # records found but not replayable
    borrowed: frozenset[str] = field(default=frozenset())  # from another thread count
    times: Mapping[str, float] = field(default_factory=dict)  # its re-timing, else its median

    def tuned(self, key: str) -> bool:
        return key in self.programs

    def choose(self, plan: ModelPlan) -> ModelPlan:
        """`plan` with each task run by its implementation whose stored schedule is the
        fastest (one with a schedule beats one without; none: the plan's own)."""
        return choose_fastest(plan, lambda key: self.times.get(key) if self.tuned(key) else None)


def choose_fastest(plan: ModelPlan, ms: Callable[[str], float | None]) -> ModelPlan:
    """`plan` with each task that has alternatives run by the implementation whose task key
    `ms` times lowest (keys it cannot time lose; none timed: the plan's choice stands)."""

    def pick(t: PlanTask) -> str:
        timed = [(m, name) for name, task in t.implementations if (m := ms(task.key)) is not None]
        return min(timed)[1] if timed else t.implementation

    return plan.choose(pick)


def stored_schedules(
    plan: ModelPlan,
    target: str,
    *,
    coordinator: str | None = None,
    token: str | None = None,
    database_url: str | None = None,
    database: Database | None = None,
) -> Schedules:
    """The best stored schedule of every task of `plan` on `target` (canonical, or for a
    coordinator any target string it resolves), replayed onto the task's program; locally
    from `database` when given (a tuning run's own), else the one `database_url` names."""
    from tuner.trace.errors import TraceError
    from tuner.trace.trace import Trace

    traces, times, borrowed = (
        (*_remote_traces(plan, target, coordinator, token), frozenset[str]())
        if coordinator is not None
        else _local_traces(plan, target, database_url, database)
    )
    programs: dict[str, Program] = {}
    problems = []
    for t in plan.tasks:
        for name, task in t.implementations:
            trace = traces.get(task.key)
            if trace is None:
                continue
            try:
                programs[task.key] = Trace.from_json(trace).apply(task.program).program
            except (TraceError, LoomtuneError) as e:
                problems.append(f"{t.label(name)} ({task.key[:12]}): stored schedule not used: {e}")
    return Schedules(
        programs,
        tuple(problems),
        borrowed & programs.keys(),
        {k: ms for k, ms in times.items() if k in programs},
    )


def _local_traces(
    plan: ModelPlan, target: str, database_url: str | None, database: Database | None
) -> tuple[dict[str, Any], dict[str, float], frozenset[str]]:
    """Each task's (and alternative's) best trace for `target` and its median; and the keys
    of the tasks whose best came from another thread count of the same CPU (`best_record`)."""
    if database is None:
        from service.db.store import open_database

        database = open_database(database_url)
    out, times, borrowed = {}, {}, set()
    for task in _all_tasks(plan):
        record, own = best_record(database, schedule_keys(task), target)
        if record is not None:
            out[task.key] = record.trace
            final = database.final(record.workload_key, target) if own else None
            if final is not None and final.record_id == record.record_id:
                times[task.key] = final.retimed_ms  # its finalists' re-timing, as tuning's
            elif record.median_ms is not None:
                times[task.key] = record.median_ms
            if not own:
                borrowed.add(task.key)
    return out, times, frozenset(borrowed)


def _all_tasks(plan: ModelPlan) -> list[Task]:
    return [task for t in plan.tasks for _, task in t.implementations]


def best_record(
    database: Database, keys: Sequence[str], target: str
) -> tuple[TuningRecord | None, bool]:
    """The best record of the first of `keys` stored for `target`, unless a schedule tuned
    at fewer threads of the same CPU ran faster, or there is none: a schedule runs the
    same on more threads than it was tuned for, and a short 2-thread pass may not have
    found a parallel schedule that beats the 1-thread best. A final choice on `target`
    (its finalists', or the model's in-model decision, `service.model_threads`) stands.
    (record, whether it is `target`'s own.)"""
    own = next(filter(None, (database.best(k, target) for k in keys)), None)
    if own is not None and database.final(own.workload_key, target) is not None:
        return own, True
    best = fewer_thread_best(database, keys, target)
    if best is not None and (own is None or best.median_ms < (own.median_ms or math.inf)):
        return best, False
    return own, own is not None


def fewer_thread_best(database: Database, keys: Sequence[str], target: str) -> TuningRecord | None:
    """The fastest (by median) best of `keys` tuned at fewer threads of `target`'s CPU."""
    threads = _threads(target)
    fewer = (
        database.best(k, o)
        for k in keys
        for o in database.other_thread_counts(k, target)
        if _threads(o) < threads
    )
    found = [r for r in fewer if r is not None and r.median_ms is not None]
    return min(found, key=lambda r: r.median_ms or math.inf, default=None)


def _threads(target: str) -> int:
    try:
        return Target.parse(target).num_threads
    except LoomtuneError:
        return 0


def _remote_traces(
    plan: ModelPlan, target: str, coordinator: str, token: str | None
) -> tuple[dict[str, Any], dict[str, float]]:
    from service.client import Client, CoordinatorError

    out, times = {}, {}
    with Client(coordinator, token) as client:
        for task in _all_tasks(plan):
            for key in schedule_keys(task):
                try:
                    best = client.best(workload_key=key, target=target)
                except CoordinatorError as e:
                    if e.status != 404:
                        raise
                    continue
                out[task.key] = best["trace"]
                if best.get("latency_ms") is not None:
                    times[task.key] = float(best["latency_ms"])
                break
    return out, times


def compile_model(
    plan: ModelPlan,
    target: Target,
    *,
    coordinator: str | None = None,
    token: str | None = None,
    database_url: str | None = None,
    remote_target: str | None = None,
    database: Database | None = None,
) -> tuple[CompiledModel, Schedules]:
    """The compiled model with each task's best stored schedule (else its default nest), each
    run by its fastest stored implementation (`Schedules.choose`)."""
    lookup = remote_target if coordinator is not None and remote_target else target.canonical()
    schedules = stored_schedules(
        plan,
        lookup,
        coordinator=coordinator,
        token=token,
        database_url=database_url,
        database=database,
    )
    return CompiledModel(schedules.choose(plan), schedules.programs, target), schedules


# --- inputs, correctness, ONNX Runtime ---------------------------------------------------------


def sample_inputs(graph: Graph, seed: int = 0) -> list[np.ndarray]:
    """Seeded inputs: floats uniform in [-1, 1]; integers (token ids) uniform in [0, rows)
    of the table a gather indexes with them, else in [0, 2); booleans either value."""
    rng = np.random.default_rng(seed)
    out = []
    for name, t in graph.inputs:
        np_dtype = dt.to_numpy(t.dtype)
        if dt.is_float(t.dtype):
            out.append(rng.uniform(-1.0, 1.0, size=t.shape).astype(np_dtype))
        elif t.dtype == "bool":
            out.append(rng.integers(0, 2, size=t.shape).astype(np.bool_))
        else:
            out.append(rng.integers(0, _index_range(graph, name), size=t.shape).astype(np_dtype))
    return out


def _index_range(graph: Graph, value: str) -> int:
    """Rows of the table `value` indexes (through views and casts), else 2."""
    seen = {value}
    frontier = [value]
    while frontier:
        v = frontier.pop()
        for i in graph.consumers(v):
            node = graph.nodes[i]
            if node.op == "gather" and node.inputs[1] == v:
                return graph.types[node.inputs[0]].shape[node.attr("axis")]
            if node.op in ("reshape", "cast", "identity") and node.outputs[0] not in seen:
                seen.add(node.outputs[0])
                frontier.append(node.outputs[0])
    return 2


def check_outputs(
    outputs: Sequence[np.ndarray], references: Sequence[np.ndarray], names: Sequence[str]
) -> tuple[str | None, float]:
    """The first output off its reference (None: all within max|out−ref| ≤ 1e-3·max|ref|
    + 1e-5, no NaN), and the largest absolute error over every output."""
    problem, worst = None, 0.0
    for name, out, ref in zip(names, outputs, references):
        if out.shape != ref.shape:
            problem = problem or f"output {name!r}: shape {out.shape}, expected {ref.shape}"
            continue
        diff = np.abs(out.astype(np.float64) - ref.astype(np.float64))
        err = float(diff.max()) if diff.size else 0.0
        worst = max(worst, err) if math.isfinite(err) else math.inf
        if np.isnan(out).any() and not np.isnan(ref).any():
            problem = problem or f"output {name!r}: NaN where the reference has none"
            continue
        scale = float(np.abs(ref).max()) if ref.size else 0.0
        bound = TOLERANCE_REL * scale + TOLERANCE_ABS
        if not err <= bound:
            problem = problem or f"output {name!r}: max |error| {err:.3g} > {bound:.3g}"
    return problem, worst


def onnxruntime_session(path: str | os.PathLike, threads: int) -> Any | None:
    """An ONNX Runtime CPU session at `threads` intra-op threads, or None when not installed."""
    try:
        import onnxruntime as ort
    except ImportError:
        return None
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


@dataclass(frozen=True)
class ModelCheck:
    """A compiled model checked on seeded inputs and timed: what `run --model` and
    `tune --model` report. `problem` names the first wrong output (None: correct)."""

    problem: str | None
    max_abs_err: float
    latency_ms: float | None
    onnxruntime_ms: float | None

    @property
    def correct(self) -> bool:
        return self.problem is None

    @property
    def speedup_vs_onnxruntime(self) -> float | None:
        if not self.latency_ms or not self.onnxruntime_ms:
            return None
        return self.onnxruntime_ms / self.latency_ms


def check_model(
    path: str | os.PathLike,
    graph: Graph,
    model: CompiledModel,
    threads: int,
    *,
    timing: bool = True,
) -> ModelCheck:
    """Verify `model` against the graph's numpy interpreter and (when installed) ONNX Runtime
    on seeded inputs; then, if correct and `timing`, time it against ONNX Runtime at the same
    thread count in one interleaved call (so both see the same machine state)."""
    from ir.graph.interpret import run_graph
    from workers.compare import COMPARE_CONFIG
    from workers.timing import time_callable, time_interleaved

    inputs = sample_inputs(graph, seed=0)
    outputs = model(*inputs)
    names = list(graph.outputs)
    problem, err = check_outputs(outputs, run_graph(graph, inputs), names)
    session = onnxruntime_session(path, threads)
    feed: dict[str, np.ndarray] = {}
    if session is not None:
        feed = {i.name: x for i, x in zip(session.get_inputs(), inputs)}
        ort_problem, ort_err = check_outputs(outputs, session.run(None, feed), names)
        if problem is None and ort_problem is not None:
            problem = f"against ONNX Runtime: {ort_problem}"
        err = max(err, ort_err)
    latency = ort_ms = None
    if problem is None and timing:
        model.set_inputs(*inputs)
        if session is not None:
            mine, theirs = time_interleaved(
                [model.run, lambda: session.run(None, feed)], COMPARE_CONFIG
            )
            latency, ort_ms = mine.median_ms, theirs.median_ms
        else:
            latency = time_callable(model.run, COMPARE_CONFIG).median_ms
    return ModelCheck(problem, err, latency, ort_ms)
