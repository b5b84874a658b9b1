"""How many candidates the tuning loop measures per second: `loomtune tune`'s machinery, timed.

    python -m benchmarks run --suite tuning          # result file + README table (benchmarks/harness.py)
    python -m benchmarks.throughput [--quick]        # prints only

For each workload of `WORKLOADS` (small kernels, where compiling dominates a
candidate) and each setup of `SETUPS` (every usable core, then one core, so
the rate per core is visible without the parent's share spread over
several), a run is:

1. a fresh `LocalPool` of one-thread slots (one pinned measurement process per
   core, as `loomtune tune` starts it), its processes started explicitly and
   in parallel before anything is timed: their start-up (interpreter, numpy,
   llvmlite) is reported as `startup_s` and kept out of the rate;
2. a fresh SQLite file in a temporary folder, through
   `service.db.store.open_database` (the store `loomtune tune` writes);
3. `tuner.search.loop.tune_loop` with the replay strategy over `SimpleSpace` (the
   space `service.tuning.make_space` gives `loomtune tune`), the loop's own
   batch size, for `trials` candidates; every candidate is replayed,
   compiled, verified and timed (`workers.measure.TUNING_CONFIG`) by a
   measurement process and recorded in the database.

Rate = candidates / the loop's wall time (first proposal to last record). The
parent's share of that time is split by thin wrappers around the strategy,
the design space, the runner and the database — nothing the loop does is
changed: `propose` (of which `sample`, the space, and `has_measured`, the
database), `submit`, `wait` (in `future.result()`: the pool measuring),
`record` (`commit_record`), `observe`, and the rest. The measurement
processes report their phases per candidate (`MeasureResult.extra`:
replay, lower, emit, LLVM, verify, timing; `compile_ms` is the first four);
their CPU time over the run, read from /proc, says how busy the cores were.
Every failure is counted by status: there must be none (`correct` is false
otherwise, and ``run`` exits 1). The issue's goal: at least `GOAL_PER_CORE`
candidates per second per core.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.common import BenchWorkload, process_cpu_s
from ir.task import Task

if TYPE_CHECKING:
    from benchmarks.db_queries import Meter
    from tuner.database import Database
    from tuner.runner import MeasureResult, RunnerFuture
    from tuner.search.strategy import SearchStrategy
    from workers.pool import LocalPool

GOAL_PER_CORE = 10.0
"""The goal: candidates measured per second, per core, for a small kernel."""
PHASES = ("replay", "lower", "emit", "llvm", "verify", "timing")
"""The measurement process's phases (`workers.measure.Measurer.measure`)."""
PARENT_PHASES = ("propose", "submit", "wait", "record", "observe")


SPACES = {
    "simple": "SimpleSpace(threads=1)",
    "rules": "default_space (rule-based)",
}
"""The design spaces a setup may sample: `tuner.space.simple.SimpleSpace` (the
tuning loop's baseline), `tuner.space.default_space` (the rule-based space)."""


@dataclass(frozen=True)
class Setup:
    """How many measurement slots (None: one per usable core), how many trials, which space."""

    name: str
    slots: int | None
    trials: int
    space: str = "simple"
    ops: tuple[str, ...] = ()
    """Only the workloads of these operators (all when empty)."""

    def runs(self, workload: BenchWorkload) -> bool:
        return not self.ops or workload.op in self.ops


def make_space(name: str, task: Task) -> Any:
    from codegen.host import host_target
    from tuner.space import default_space
    from tuner.space.simple import SimpleSpace

    if name == "simple":
        return SimpleSpace(task.program, threads=1)
    if name == "rules":
        return default_space(task.program, host_target(1))
    raise ValueError(f"unknown space {name!r}; known: {', '.join(SPACES)}")


# Shapes whose extents have many divisors up to 16: SimpleSpace splits each
# loop in two with an inner factor <= 16, so matmul 64³ has only 5³ = 125
# distinct one-thread traces (replay would spend its last proposals hunting
# duplicates) while 48³ has 8³ = 512; softmax's four blocks multiply theirs.
# A single-block element-wise op (gelu) has at most ~100: too few for 128.
WORKLOADS: tuple[BenchWorkload, ...] = (
    BenchWorkload("matmul 48³", "matmul", {"m": 48, "n": 48, "k": 48}),
    BenchWorkload("softmax 64×256", "softmax", {"m": 64, "n": 256}),
)
SETUPS: tuple[Setup, ...] = (
    Setup("all cores", None, 128),
    Setup("1 core", 1, 64),
    Setup("all cores, rule-based space", None, 64, "rules", ops=("matmul",)),
)
QUICK_WORKLOADS: tuple[BenchWorkload, ...] = (
    BenchWorkload("matmul 16³", "matmul", {"m": 16, "n": 16, "k": 16}),
    BenchWorkload("softmax 8×32", "softmax", {"m": 8, "n": 32}),
)
QUICK_SETUPS: tuple[Setup, ...] = (
    Setup("all cores", None, 4),
    Setup("1 core", 1, 2),
    Setup("all cores, rule-based space", None, 2, "rules", ops=("matmul",)),
)


def _unmetered(
    timing: Callable[[], list[float]], _helpers: Callable[[], float] | None = None
) -> tuple[list[float], dict[str, float] | None]:
    return timing(), None


# -- instruments: the loop's collaborators, timed, behaviour unchanged ------------------------


class Clock:
    """Seconds per phase, summed; calls per phase."""

    def __init__(self) -> None:
        self.seconds: defaultdict[str, float] = defaultdict(float)
        self.calls: Counter[str] = Counter()

    def timed(self, phase: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            self.seconds[phase] += time.perf_counter() - start
            self.calls[phase] += 1


class TimedSpace:
    def __init__(self, space: Any, clock: Clock) -> None:
        self._space, self._clock = space, clock

    def sample(self, rng: Any) -> Any:
        return self._clock.timed("sample", self._space.sample, rng)

    def mutate(self, trace: Any, rng: Any) -> Any:
        return self._clock.timed("mutate", self._space.mutate, trace, rng)


class TimedDatabase:
    """Times `commit_record` and `has_measured`; everything else passes through."""

    def __init__(self, database: Database, clock: Clock) -> None:
        self._database, self._clock = database, clock

    def commit_record(self, record: Any) -> Any:
        return self._clock.timed("record", self._database.commit_record, record)

    def has_measured(self, *args: Any) -> bool:
        return self._clock.timed("has_measured", self._database.has_measured, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._database, name)


class TimedStrategy:
    def __init__(self, strategy: SearchStrategy, clock: Clock) -> None:
        self._strategy, self._clock = strategy, clock

    def propose(self, n: int) -> list[Any]:
        return self._clock.timed("propose", self._strategy.propose, n)

    def observe(self, traces: Sequence[Any], results: Sequence[MeasureResult]) -> None:
        self._clock.timed("observe", self._strategy.observe, traces, results)


class _TimedFuture:
    def __init__(self, future: RunnerFuture, clock: Clock) -> None:
        self._future, self._clock = future, clock

    def done(self) -> bool:
        return self._future.done()

    def result(self, timeout: float | None = None) -> MeasureResult:
        return self._clock.timed("wait", self._future.result, timeout)


class TimedRunner:
    def __init__(self, runner: Any, clock: Clock) -> None:
        self._runner, self._clock = runner, clock

    def submit(self, task: Task, target: str, traces: Sequence[Any]) -> list[Any]:
        futures = self._clock.timed("submit", self._runner.submit, task, target, traces)
        return [_TimedFuture(f, self._clock) for f in futures]

    def close(self) -> None:
        self._runner.close()


# -- processes ---------------------------------------------------------------------------------


def start_pool(pool: LocalPool) -> list[float]:
    """Seconds each measurement process of `pool` took to start: the pool starts them all at
    once when it is made, each on its own slot's thread (a measurement process dies with the
    thread that started it: PR_SET_PDEATHSIG, `workers/child.py`)."""
    return pool.wait_started()


# -- one run -----------------------------------------------------------------------------------


def _stats(values: Sequence[float]) -> dict[str, float | None]:
    if not values:
        return {"median": None, "mean": None, "p90": None, "max": None}
    ordered = sorted(values)
    return {
        "median": statistics.median(ordered),
        "mean": statistics.fmean(ordered),
        "p90": ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))],
        "max": ordered[-1],
    }


def _problems(
    run: Any, trials: Sequence[Any], failures: dict[str, int], wanted: int, restarts: int
) -> list[str]:
    """What makes a throughput row wrong: failed candidates, a shortfall, restarted processes."""
    problems = []
    if failures:
        problems.append("failures: " + ", ".join(f"{n} {s}" for s, n in failures.items()))
        first = next(t.result for t in trials if not t.result.ok)
        problems.append(f"first: {first.status}: {first.message}")
    if run.trials_done < wanted:
        problems.append(run.stop_reason)
    if restarts:
        problems.append(f"{restarts} measurement process restart(s)")
    return problems


def measure_run(
    workload: BenchWorkload,
    setup: Setup,
    *,
    seed: int,
    folder: Path,
    meter: Meter | None = None,
    log: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    """One workload in one setup: a fresh pool and database, the loop timed; one result row."""
    from codegen.host import host_target
    from service.db.store import open_database
    from tuner.search.loop import tune_loop
    from tuner.search.strategy import SearchContext, make_strategy
    from workers.pool import LocalPool

    meter = meter or _unmetered
    task = workload.task()
    target = host_target(1).canonical()
    name = f"{setup.slots or 'all'}-{setup.space}-{task.op}-{task.key[:12]}.sqlite"
    clock = Clock()
    database = TimedDatabase(open_database(f"sqlite:///{folder / name}"), clock)
    pool = LocalPool(threads=1, max_slots=setup.slots)
    trials: list[Any] = []
    try:
        startup = start_pool(pool)
        context = SearchContext(
            task, target, TimedSpace(make_space(setup.space, task), clock), database
        )
        strategy = TimedStrategy(make_strategy("replay", context, seed), clock)
        runner = TimedRunner(pool, clock)
        pids = [p.pid for p in pool.processes]
        outcome: dict[str, Any] = {}

        def children_cpu() -> float:
            return sum(process_cpu_s(pid) for pid in pids)

        def timing() -> list[float]:
            children_before, parent_before = children_cpu(), time.process_time()
            outcome["run"] = tune_loop(
                task,
                target,
                strategy=strategy,
                runner=runner,
                database=database,
                trials=setup.trials,
                on_trial=trials.append,
            )
            outcome["parent_cpu_s"] = time.process_time() - parent_before
            outcome["children_cpu_s"] = children_cpu() - children_before
            return [outcome["run"].seconds]

        _, load = meter(timing, children_cpu)
        restarts = sum(p.starts for p in pool.processes) - pool.slots
    finally:
        pool.close()
    run = outcome["run"]
    statuses = Counter(t.result.status for t in trials)
    ok = [t.result for t in trials if t.result.ok]
    phases = {
        name: [r.extra["phases_ms"][name] for r in ok if "phases_ms" in r.extra] for name in PHASES
    }
    child_ms = [sum(r.extra["phases_ms"].values()) for r in ok if "phases_ms" in r.extra]
    rate = run.trials_done / run.seconds if run.seconds > 0 else None
    cores = pool.slots  # one-thread slots: one core each
    per_core = rate / cores if rate is not None else None
    parent = {name: clock.seconds[name] for name in (*PARENT_PHASES, "sample", "has_measured")}
    parent["other"] = max(0.0, run.seconds - sum(clock.seconds[name] for name in PARENT_PHASES))
    failures = dict(sorted(run.failures.items()))
    problems = _problems(run, trials, failures, setup.trials, restarts)
    row = {
        "case": workload.label,
        "label": f"{workload.label} · {setup.name}",
        "op": task.op,
        "params": dict(task.params),
        "workload_key": task.key,
        "target": target,
        "setup": setup.name,
        "space": SPACES[setup.space],
        "slots": pool.slots,
        "cores": [list(p.cores) for p in pool.processes],
        "threads": 1,
        "trials": setup.trials,
        "trials_done": run.trials_done,
        "stop_reason": run.stop_reason,
        "database": "SQLite file (temporary)",
        "startup_s": max(startup),
        "startup_per_process_s": startup,
        "loop_s": run.seconds,
        "candidates_per_s": rate,
        "per_core": per_core,
        "goal_per_core": GOAL_PER_CORE,
        "met": None if per_core is None else per_core >= GOAL_PER_CORE,
        "statuses": dict(sorted(statuses.items())),
        "failures": failures,
        "correct": not problems,
        "message": "; ".join(problems) or None,
        "parent_s": parent,
        "parent_calls": dict(clock.calls),
        "parent_cpu_s": outcome["parent_cpu_s"],
        "children_cpu_s": outcome["children_cpu_s"],
        "children_busy": outcome["children_cpu_s"] / (run.seconds * cores)
        if run.seconds > 0
        else None,
        "compile_ms": _stats([r.compile_ms for r in ok]),
        "child_ms": _stats(child_ms),
        "phases_ms": {name: _stats(values) for name, values in phases.items()},
        "kernel_ms": _stats([r.median_ms for r in ok if r.median_ms is not None]),
        "calls_per_repeat": _stats([float(r.extra.get("number", 0)) for r in ok]),
        "best_ms": min((r.median_ms for r in ok if r.median_ms is not None), default=None),
        "others_load": load,
    }
    log(
        f"  {row['label']}: {run.trials_done} candidates in {run.seconds:.1f} s = "
        f"{_f(rate, 1)}/s ({_f(per_core, 1)} per core; start-up {row['startup_s']:.1f} s), "
        f"compile median {_f(row['compile_ms']['median'], 1)} ms, failures {failures or 'none'}"
    )
    return row


def run(
    quick: bool,
    seed: int = 0,
    *,
    meter: Meter | None = None,
    log: Callable[[str], None] = lambda _: None,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Every workload in every setup: the rows and ``{"tuning": ...}`` of a result file."""
    from workers.measure import TUNING_CONFIG
    from workers.pool import core_slots

    workloads, setups = (QUICK_WORKLOADS, QUICK_SETUPS) if quick else (WORKLOADS, SETUPS)
    rows = []
    with tempfile.TemporaryDirectory(prefix="loomtune-tuning-bench-") as tmp:
        for setup in setups:
            for workload in filter(setup.runs, workloads):
                rows.append(
                    measure_run(workload, setup, seed=seed, folder=Path(tmp), meter=meter, log=log)
                )
    from tuner.search.loop import DEFAULT_BATCH

    details = {
        "workloads": [asdict(w) for w in workloads],
        "setups": [asdict(s) for s in setups],
        "usable_cores": len(core_slots(1)),
        "strategy": "replay",
        "spaces": {s.space: SPACES[s.space] for s in setups},
        "runner": "LocalPool(threads=1)",
        "database": "SQLite file in a temporary folder (service.db.store.open_database), fresh per run",
        "batch_size": DEFAULT_BATCH,
        "measure": asdict(TUNING_CONFIG),
        "goal_per_core": GOAL_PER_CORE,
        # the measurement processes worked for this run: not other processes
        "children_cpu_s": sum(r["children_cpu_s"] for r in rows),
    }
    return rows, {"tuning": details}


# -- tables ------------------------------------------------------------------------------------

Table = tuple[list[str], list[list[str]]]


def _f(value: float | None, digits: int = 1) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _case(row: dict[str, Any]) -> str:
    from benchmarks.common import fmt_case

    return fmt_case(row)


def rate_table(result: dict[str, Any]) -> Table:
    headers = [
        "workload",
        "space",
        "cores",
        "candidates",
        "loop s",
        "candidates/s",
        "per core",
        "start-up s",
        "failures",
        "correct",
        "goal",
    ]
    rows = []
    for r in result["rows"]:
        met = "–" if r["met"] is None else "met" if r["met"] else "not met"
        failures = sum(r["failures"].values())
        rows.append(
            [
                _case(r),
                _space(r),
                str(r["slots"]),
                f"{r['trials_done']}/{r['trials']}",
                _f(r["loop_s"]),
                _f(r["candidates_per_s"]),
                _f(r["per_core"], 2),
                _f(r["startup_s"]),
                str(failures) if not failures else f"**{failures}**",
                "yes" if r["correct"] else "**no**",
                f"≥ {r['goal_per_core']:g}/s per core ({met})",
            ]
        )
    return headers, rows


def _space(row: dict[str, Any]) -> str:
    return "rule-based" if row["space"] == SPACES["rules"] else row["space"].split("(")[0]


def _per_candidate_ms(row: dict[str, Any], seconds: float) -> str:
    return _f(seconds * 1e3 / row["trials_done"], 1) if row["trials_done"] else "–"


def split_table(result: dict[str, Any]) -> Table:
    """Where a candidate's time goes: in the parent (wall, per candidate) and in a measurement process."""
    headers = [
        "workload",
        "space",
        "cores",
        "propose",
        "wait",
        "record",
        "other",
        "child",
        "replay",
        "lower",
        "emit",
        "LLVM",
        "verify",
        "timing",
        "busy",
    ]
    rows = []
    for r in result["rows"]:
        p, ph = r["parent_s"], r["phases_ms"]
        other = p["other"] + p["submit"] + p["observe"]
        rows.append(
            [
                _case(r),
                _space(r),
                str(r["slots"]),
                _per_candidate_ms(r, p["propose"]),
                _per_candidate_ms(r, p["wait"]),
                _per_candidate_ms(r, p["record"]),
                _per_candidate_ms(r, other),
                _f(r["child_ms"]["mean"]),
                *(_f(ph[name]["mean"]) for name in PHASES),
                "–" if r["children_busy"] is None else f"{r['children_busy']:.0%}",
            ]
        )
    return headers, rows


def note(result: dict[str, Any]) -> str:
    t = result["tuning"]
    m = t["measure"]
    return (
        f"The real loop (`tune_loop`, replay strategy over `SimpleSpace` — rule-based: "
        f"`tuner.space.default_space` —, batches of {t['batch_size']}) "
        f"with the real `{t['runner']}` — one pinned measurement process per core, each replaying, "
        "compiling (O3), verifying against numpy and timing its candidates — recording into a fresh "
        "SQLite file. Rate = candidates / the loop's wall time; the processes' start-up (interpreter, "
        "numpy, llvmlite; started in parallel) is not in it and is shown apart. Timing per candidate "
        f"(`TUNING_CONFIG`): {m['warmup']} warm-up call, {m['repeat']} repeats of at least "
        f"{m['min_repeat_ms']:g} ms. Failures of every status count; there must be none."
    ) + "".join(f" **{r['label']}: {r['message']}.**" for r in result["rows"] if not r["correct"])


def split_note(result: dict[str, Any]) -> str:
    return (
        "ms per candidate. Parent (wall time of the loop's process, divided by the candidates): "
        "propose = sampling new traces and checking the database (the pool is idle meanwhile), "
        "wait = blocked on results, record = `commit_record` into SQLite, other = submit, observe "
        "and the loop. Measurement process (mean per ok candidate): child = its phases' sum; "
        "compile = replay + lower + emit + LLVM; verify includes the first candidate's inputs and "
        "numpy reference; busy = the processes' CPU time / (loop time × cores)."
    )


def report_tables(
    result: dict[str, Any], footnote: str | None = None
) -> list[tuple[str | None, Table, str | None]]:
    """(caption, table, note) triples for `benchmarks/report.py`."""
    return [
        (None, rate_table(result), "\n\n".join(n for n in (note(result), footnote) if n)),
        ("Where the time goes:", split_table(result), split_note(result)),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.throughput", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--quick", action="store_true", help="tiny workloads, a few candidates")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    from benchmarks.common import text_table

    rows, extra = run(args.quick, args.seed, log=lambda m: print(m, file=sys.stderr, flush=True))
    result = {"rows": rows, **extra}
    print(text_table(rate_table(result)))
    print(text_table(split_table(result)))
    return 0 if all(r["correct"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
