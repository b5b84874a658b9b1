"""Compile, verify and time the cases of a suite; write one JSON result file.

Per case, in order:

1. compile with a cold cache (``codegen.jit.cache_clear()`` first) and time it:
   loomtune IR to a callable kernel;
2. verify against numpy on seeded inputs (numpy limited to the case's threads);
   a wrong kernel is recorded ``correct: false`` and never timed;
3. time the kernel and numpy interleaved in one ``time_interleaved`` call,
   numpy limited to the same number of threads. Cases of one group (the same
   program at 1 and 2 threads) are timed in one call together, so their
   speed-up is measured under the same machine conditions.

The compile suite repeats step 1 instead of step 3 and splits the time into
lowering, LLVM IR emission and LLVM (optimise + JIT). The db suite has no
kernels: it times the tuning database's queries (benchmarks/db_queries.py);
the tuning suite times the tuning loop with its pool of measurement
processes (benchmarks/throughput.py).
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import threadpoolctl

from benchmarks.common import log, result_header, utc_now
from benchmarks.contention import (
    CONTENDED,
    cpu_snapshot,
    is_contended,
    others_load,
    wait_until_quiet,
)
from benchmarks.programs import SUITES, Case, Suite
from benchmarks.record import write_result
from codegen import jit
from codegen.emit import emit_module
from codegen.host import host_target
from codegen.kernel import Kernel, compile_program
from ir.errors import LoomtuneError
from ir.lower import lower
from ir.task import gflops, library_task
from workers.machine import limit_numpy_threads
from workers.timing import MeasureConfig, Timing, time_interleaved
from workers.verify import empty_outputs, verify

if TYPE_CHECKING:
    from benchmarks import db_queries


@dataclass(frozen=True, kw_only=True)
class RunSettings:
    """How hard a run measures.

    Attributes:
        measure: the timing protocol for kernels and numpy alike.
        compile_repetitions: cold compiles per case in the compile suite
            (the median is reported).
        seed: seed of the verification and timing inputs.
        quiet_wait_s: before each timing, wait up to this long for other
            processes to leave the CPUs alone.
    """

    measure: MeasureConfig
    compile_repetitions: int
    seed: int = 0
    quiet_wait_s: float = 0.0


def settings_for(quick: bool, seed: int = 0, quiet_wait_s: float | None = None) -> RunSettings:
    """Full runs: 15 repeats of >= 50 ms each; quick (smoke) runs: just enough to run."""
    if quick:
        return RunSettings(
            measure=MeasureConfig(warmup=1, repeat=3, min_repeat_ms=5.0),
            compile_repetitions=2,
            seed=seed,
            quiet_wait_s=0.0 if quiet_wait_s is None else quiet_wait_s,
        )
    return RunSettings(
        measure=MeasureConfig(warmup=2, repeat=15, min_repeat_ms=50.0),
        compile_repetitions=7,
        seed=seed,
        quiet_wait_s=60.0 if quiet_wait_s is None else quiet_wait_s,
    )


# -- compile and verify ---------------------------------------------------------------


def compile_cold(case: Case) -> tuple[Kernel, float]:
    """Compile with an empty compile cache; (kernel, milliseconds)."""
    jit.cache_clear()
    start = time.perf_counter_ns()
    kernel = compile_program(case.program, host_target(case.threads))
    return kernel, (time.perf_counter_ns() - start) / 1e6


@dataclass
class Prepared:
    """A compiled, verified case with its arrays.

    Holds the kernel and the arrays on purpose: ``Kernel.bind_call`` keeps only
    raw addresses, so the code and the buffers must stay referenced for as
    long as the bound call may run.
    """

    case: Case
    kernel: Kernel | None  # None: compiling or running it failed
    inputs: list[np.ndarray]
    outputs: list[np.ndarray]
    compile_ms: float | None
    message: str | None

    @property
    def correct(self) -> bool:
        return self.message is None

    def kernel_call(self) -> Callable[[], object]:
        assert self.kernel is not None, "only correct cases are timed"
        return self.kernel.bind_call(*self.inputs, *self.outputs)

    def numpy_call(self, pools: NumpyPools) -> Callable[[], object]:
        task, inputs, threads = self.case.task, self.inputs, self.case.threads

        def call() -> object:
            pools.use(threads)
            return task.reference(inputs)

        return call


def prepare(case: Case, seed: int) -> Prepared:
    """Compile `case` cold, run it once on NaN-filled outputs and verify against numpy.

    A compile or run failure loomtune reports (a ``LoomtuneError``) becomes an
    incorrect row rather than the end of a run that may have taken minutes.
    """
    inputs = case.task.make_inputs(seed)
    outputs = empty_outputs(case.task.output_specs())
    try:
        kernel, compile_ms = compile_cold(case)
        kernel(*inputs, *outputs)
    except LoomtuneError as e:
        return Prepared(case, None, inputs, outputs, None, f"{type(e).__name__}: {e}")
    with limit_numpy_threads(case.threads):
        refs = case.task.reference(inputs)
    message = verify(outputs, refs, case.task.output_names, case.task.reduction_length)
    return Prepared(case, kernel, inputs, outputs, compile_ms, message)


# -- timing ---------------------------------------------------------------------------


class NumpyPools:
    """Sets numpy's BLAS thread count, only when it changes.

    Interleaving numpy at 1 and at 2 threads means switching inside the timed
    region. ``threadpool_limits`` rescans the loaded libraries (~0.3 ms); one
    controller built up front switches in microseconds, and only on the first
    call of a repeat. Use inside ``limit_numpy_threads`` so the original limits
    come back afterwards.
    """

    def __init__(self) -> None:
        self._controller = threadpoolctl.ThreadpoolController()
        self._current: int | None = None

    def use(self, threads: int) -> None:
        if threads != self._current:
            self._controller.limit(limits=threads)
            self._current = threads


def time_group(
    group: Sequence[Prepared], config: MeasureConfig
) -> dict[int, tuple[Timing, Timing]]:
    """Time the correct cases of `group` and their numpy baselines in one interleaved run.

    Returns {index in `group`: (kernel timing, numpy timing)}. In each repeat,
    numpy runs first, most threads first, then the kernels, fewest threads first:
    OpenBLAS workers spin for a while after a call, and this order leaves the
    most time between them and a multi-threaded kernel.
    """
    timed = [i for i, p in enumerate(group) if p.correct]
    if not timed:
        return {}
    pools = NumpyPools()
    numpy_order = sorted(timed, key=lambda i: -group[i].case.threads)
    kernel_order = sorted(timed, key=lambda i: group[i].case.threads)
    fns = [group[i].numpy_call(pools) for i in numpy_order]
    fns += [group[i].kernel_call() for i in kernel_order]
    with limit_numpy_threads(max(group[i].case.threads for i in timed)):
        timings = time_interleaved(fns, config)
    numpy_t = dict(zip(numpy_order, timings[: len(timed)]))
    kernel_t = dict(zip(kernel_order, timings[len(timed) :]))
    return {i: (kernel_t[i], numpy_t[i]) for i in timed}


def timing_dict(t: Timing | None) -> dict[str, Any] | None:
    if t is None:
        return None
    return {
        "times_ms": list(t.times_ms),
        "number": t.number,
        "median_ms": t.median_ms,
        "min_ms": t.min_ms,
    }


def case_dict(case: Case) -> dict[str, Any]:
    """What identifies a case in a result row."""
    return {
        "case": case.name,
        "label": case.label,
        "op": case.task.op,
        "params": dict(case.task.params),
        "schedule": case.schedule,
        "loops": [spec.to_dict() for spec in case.loops],
        "threads": case.threads,
        "group": case.group,
        "target": host_target(case.threads).canonical(),
        "workload_key": case.task.key,
        "flops": case.task.flops,
    }


def timed_row(
    p: Prepared, kernel_t: Timing | None, numpy_t: Timing | None, load: dict[str, float] | None
) -> dict[str, Any]:
    latency = kernel_t.median_ms if kernel_t else None
    numpy_ms = numpy_t.median_ms if numpy_t else None
    return {
        **case_dict(p.case),
        "correct": p.correct,
        "message": p.message,
        "compile_ms": p.compile_ms,
        "loomtune": timing_dict(kernel_t),
        "numpy": timing_dict(numpy_t),
        "latency_ms": latency,
        "numpy_ms": numpy_ms,
        "ratio": numpy_ms / latency if latency and numpy_ms else None,
        "gflops": gflops(p.case.task.flops, latency) if latency else None,
        "others_load": load,
        "contended": is_contended(load),
    }


def _groups(cases: Sequence[Case]) -> list[list[Case]]:
    """Cases in suite order; cases sharing a group become one list at the first one's place."""
    out: list[list[Case]] = []
    by_group: dict[str, list[Case]] = {}
    for case in cases:
        if case.group is None:
            out.append([case])
        elif case.group in by_group:
            by_group[case.group].append(case)
        else:
            by_group[case.group] = [case]
            out.append(by_group[case.group])
    return out


def scaling_entry(group: str, rows: Sequence[dict[str, Any]], goal: float | None) -> dict[str, Any]:
    """Speed-up of the most threads over the fewest, from one interleaved run.

    The headline is the ratio of the medians; the ratio within each repeat
    (the two ran back to back there) shows how much it moved during the run.
    """
    by_threads = sorted(rows, key=lambda r: r["threads"])
    low, high = by_threads[0], by_threads[-1]
    speedup = None
    per_repeat: list[float] = []
    if low["latency_ms"] and high["latency_ms"]:
        speedup = low["latency_ms"] / high["latency_ms"]
        pairs = zip(low["loomtune"]["times_ms"], high["loomtune"]["times_ms"])
        per_repeat = [a / b for a, b in pairs]
    return {
        "group": group,
        "threads": [r["threads"] for r in by_threads],
        "latency_ms": [r["latency_ms"] for r in by_threads],
        "speedup": speedup,
        "speedup_per_repeat": per_repeat,
        "goal": goal,
        "met": None if goal is None or speedup is None else speedup >= goal,
        "contended": any(r["contended"] for r in rows),
    }


def run_timed(
    cases: Sequence[Case], settings: RunSettings
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(rows in suite order, scaling entries of the groups)."""
    rows: dict[str, dict[str, Any]] = {}
    scaling: list[dict[str, Any]] = []
    for group in _groups(cases):
        prepared = []
        for case in group:
            p = prepare(case, settings.seed)
            if p.compile_ms is None:
                log(f"  {case.label}: FAILED: {p.message}")
            else:
                state = "ok" if p.correct else f"WRONG: {p.message}"
                log(f"  {case.label}: compiled in {p.compile_ms:.1f} ms, {state}")
            prepared.append(p)
        if settings.quiet_wait_s > 0:
            wait_until_quiet(settings.quiet_wait_s)
        before = cpu_snapshot()
        timings = time_group(prepared, settings.measure)
        load = others_load(before, cpu_snapshot())
        if is_contended(load):
            log(f"  contended while timed: {load}")
        group_rows = []
        for i, p in enumerate(prepared):
            kernel_t, numpy_t = timings.get(i, (None, None))
            rows[p.case.label] = timed_row(p, kernel_t, numpy_t, load)
            group_rows.append(rows[p.case.label])
        if group[0].group is not None and len(group) > 1:
            goal = max((c.speedup_goal or 0.0 for c in group), default=0.0) or None
            scaling.append(scaling_entry(group[0].group, group_rows, goal))
        del prepared  # frees the kernels and arrays of this group before the next
    return [rows[case.label] for case in cases], scaling


# -- compile suite ---------------------------------------------------------------------


def compile_phases(case: Case) -> dict[str, float]:
    """Milliseconds of lowering, LLVM IR emission and LLVM (optimise + JIT), cold cache.

    Mirrors ``compile_program``'s steps so a slow compile can be blamed on one.
    """
    target = host_target(case.threads)
    jit.cache_clear()
    t0 = time.perf_counter_ns()
    lowered = lower(case.program)
    t1 = time.perf_counter_ns()
    text = emit_module(
        lowered, case.program.name, num_threads=target.num_threads, vector_bits=target.vector_bits
    )
    t2 = time.perf_counter_ns()
    jit.compile_ir(text, target)
    t3 = time.perf_counter_ns()
    return {
        "lower": (t1 - t0) / 1e6,
        "emit": (t2 - t1) / 1e6,
        "llvm": (t3 - t2) / 1e6,
        "ir_lines": text.count("\n"),
    }


def run_compile(cases: Sequence[Case], settings: RunSettings) -> list[dict[str, Any]]:
    rows = []
    for case in cases:
        p = prepare(case, settings.seed)
        if p.kernel is None:  # fails to compile: nothing to time
            log(f"  {case.label}: FAILED: {p.message}")
            rows.append({**case_dict(case), "correct": False, "message": p.message})
            continue
        if settings.quiet_wait_s > 0:
            wait_until_quiet(settings.quiet_wait_s)
        before = cpu_snapshot()
        totals = [compile_cold(case)[1] for _ in range(settings.compile_repetitions)]
        phases = [compile_phases(case) for _ in range(settings.compile_repetitions)]
        load = others_load(before, cpu_snapshot())
        median = statistics.median(totals)
        log(f"  {case.label}: compile median {median:.1f} ms, {'ok' if p.correct else 'WRONG'}")
        rows.append(
            {
                **case_dict(case),
                "correct": p.correct,
                "message": p.message,
                "compile_ms": median,
                "compile_times_ms": totals,
                "phases_ms": {
                    key: statistics.median(ph[key] for ph in phases)
                    for key in ("lower", "emit", "llvm")
                },
                "ir_lines": int(phases[0]["ir_lines"]),
                "goal_ms": case.compile_goal_ms,
                "met": None if case.compile_goal_ms is None else median < case.compile_goal_ms,
                "others_load": load,
                "contended": is_contended(load),
            }
        )
        del p
    return rows


# -- db suite ----------------------------------------------------------------------------


def metered(quiet_wait_s: float) -> db_queries.Meter:
    """A `db_queries.Meter`: wait for a quiet moment, time, say how much others used meanwhile.

    CPU time of the helper processes (a local database server answering the
    queries) counts as this process's own.
    """

    def meter(
        timing: Callable[[], list[float]], helpers: Callable[[], float] | None = None
    ) -> tuple[list[float], dict[str, float] | None]:
        if quiet_wait_s > 0:
            # A local database server counts as others here: it should be idle
            # (autovacuum done) before the timing starts.
            wait_until_quiet(quiet_wait_s)
        before, helped_before = cpu_snapshot(), helpers() if helpers else 0.0
        times = timing()
        after, helped = cpu_snapshot(), (helpers() if helpers else 0.0) - helped_before
        if after is not None:
            after = dataclasses.replace(after, own=after.own + helped)
        load = others_load(before, after)
        if is_contended(load):
            log(f"  contended while timed: {load}")
        return times, load

    return meter


def run_db(quick: bool, settings: RunSettings) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The tuning database's queries on SQLite and PostgreSQL (benchmarks/db_queries.py).

    Returns the rows and ``{"db": ...}``: what was inserted, the PostgreSQL
    database and the (dropped) schema used, library versions.
    """
    from benchmarks import db_queries

    config = db_queries.config_for(quick)
    log(f"  {config.records:,} records per backend, {config.repeat} calls per query")
    rows, details = db_queries.run(config, metered(settings.quiet_wait_s))
    for row in rows:
        row["contended"] = is_contended(row["others_load"])
        if row["correct"]:
            log(
                f"  {row['label']}: median {row['median_ms']:.3f} ms (filled in {row['fill_s']:.1f} s)"
            )
        else:
            log(f"  {row['label']}: FAILED: {row['message']}")
    return rows, {"db": details}


# -- one run ---------------------------------------------------------------------------


def warm_up_llvm() -> float:
    """Compile a tiny program once so LLVM's start-up is not charged to the first case."""
    task = library_task("gelu", {"m": 2, "n": 8})
    jit.cache_clear()
    start = time.perf_counter_ns()
    compile_program(task.program, host_target())
    return (time.perf_counter_ns() - start) / 1e6


def run_suite(
    suite: Suite,
    *,
    quick: bool,
    out_dir: Path,
    seed: int = 0,
    quiet_wait_s: float | None = None,
    command: str = "",
    environment: dict[str, Any] | None = None,
    record: Path | None = None,
) -> tuple[dict[str, Any], Path]:
    """Measure every case of `suite`; write and return the result (and its path); with
    `record`, append the run's line to it."""
    settings = settings_for(quick, seed, quiet_wait_s)
    if suite.min_repeat_ms is not None and not quick:
        measure = dataclasses.replace(settings.measure, min_repeat_ms=suite.min_repeat_ms)
        settings = dataclasses.replace(settings, measure=measure)
    started = utc_now()
    wall = time.perf_counter()
    run_before = cpu_snapshot()
    log(f"suite {suite.name}{' (quick)' if quick else ''}: {suite.description}")
    first_compile_ms: float | None = None
    scaling: list[dict[str, Any]] = []
    measure: dict[str, Any] = dataclasses.asdict(settings.measure)
    extra: dict[str, Any] = {}
    if suite.kind == "db":
        rows, extra = run_db(quick, settings)
        measure = {"warmup": 1, "repeat": extra["db"]["repeat"]}
    elif suite.kind == "service":  # the coordinator under load: benchmarks/service_bench.py
        from benchmarks import service_bench

        rows, extra = service_bench.run(quick, seed, meter=metered(settings.quiet_wait_s), log=log)
        for row in rows:
            row["contended"] = is_contended(row["others_load"])
        measure = extra["service"]["measure"]
        if run_before is not None:  # the coordinator, PostgreSQL, the workers: this run's own
            helped_s = extra["service"]["helper_cpu_s"]
            run_before = dataclasses.replace(run_before, own=run_before.own - helped_s)
    elif suite.kind == "cost_model":  # no kernels of its own: benchmarks/cost_model.py
        from benchmarks import cost_model

        rows, extra = cost_model.run(quick, seed, log=log)
        measure = extra["cost_model"]["measure"] or {}
    elif suite.kind == "tuning":  # the tuning loop's throughput: benchmarks/throughput.py
        from benchmarks import throughput

        rows, extra = throughput.run(quick, seed, meter=metered(settings.quiet_wait_s), log=log)
        for row in rows:
            row["contended"] = is_contended(row["others_load"])
        measure = extra["tuning"]["measure"]
    else:
        first_compile_ms = warm_up_llvm()
        cases = suite.build(quick)
        if suite.kind == "compile":
            rows = run_compile(cases, settings)
        else:
            rows, scaling = run_timed(cases, settings)
    run_after = cpu_snapshot()
    # The local PostgreSQL server, the measurement processes: they worked for
    # this run, they are not other processes.
    helped = (
        extra.get("db", {}).get("postgres_cpu_s")
        or extra.get("cost_model", {}).get("children_cpu_s")
        or extra.get("tuning", {}).get("children_cpu_s")
    )
    if run_after is not None and helped:
        run_after = dataclasses.replace(run_after, own=run_after.own + helped)
    header = result_header(
        suite=suite.name, kind=suite.kind, description=suite.description, quick=quick,
        command=command, seed=seed, started=started, wall_s=time.perf_counter() - wall,
    )  # fmt: skip
    result = {
        **header,
        "environment": environment or {},
        "measure": measure,
        "compile_repetitions": settings.compile_repetitions,
        "quiet_wait_s": settings.quiet_wait_s,
        "contended_threshold": CONTENDED,
        "others_load": others_load(run_before, run_after),
        "first_compile_ms": first_compile_ms,
        "rows": rows,
        "scaling": scaling,
        **extra,
    }
    path = write_result(result, out_dir, started, record)
    return result, path


__all__ = [
    "SUITES",
    "RunSettings",
    "run_suite",
    "settings_for",
]
