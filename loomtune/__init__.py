"""loomtune's public Python API.

    import loomtune
    result = loomtune.tune("matmul", {"m": 256, "n": 256, "k": 256}, trials=32)
    result.kernel(a, b, c)                      # the best kernel, verified
    kernel = loomtune.load_best("matmul", {"m": 256, "n": 256, "k": 256})
    model = loomtune.load_model("bert.onnx", threads=4)  # outputs = model(input_ids=ids)
    tuned = loomtune.tune_model("bert.onnx", trials=512)  # tuned.model, tuned.tasks

A workload is a library operator's name (with parameters), a custom workload
definition (`loomtune.workload/1`, as a dict or the path of a JSON file), or a
`Task`. Tuning uses the local database (LOOMTUNE_DATABASE_URL, SQLite by
default) and a pool of measurement processes on this machine.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from codegen.kernel import Kernel
from codegen.model import CompiledModel
from ir.task import Task
from service.client import Client, CoordinatorError
from service.tuning import ModelTaskState, ModelTuneResult
from tuner.database import DatabaseError, TuningRecord
from tuner.trace.trace import Trace

__all__ = [
    "Client",
    "CompiledModel",
    "CoordinatorError",
    "Kernel",
    "ModelTaskState",
    "ModelTuneResult",
    "Task",
    "TuneResult",
    "load_best",
    "load_model",
    "task",
    "tune",
    "tune_model",
]


def task(
    workload: str | Mapping[str, Any] | Path | Task, params: Mapping[str, int | str] | None = None
) -> Task:
    """The task a workload names: an operator, a definition (dict or file) or a Task."""
    from ir.definition import load_definition_file
    from ir.task import custom_task, library_task

    if isinstance(workload, Task):
        if params:
            raise TypeError(
                "pass parameters with an operator name or a definition, not with a Task"
            )
        return workload
    if isinstance(workload, Path) or (isinstance(workload, str) and workload.endswith(".json")):
        return custom_task(load_definition_file(workload), params)
    if isinstance(workload, str):
        return library_task(workload, params)
    if isinstance(workload, Mapping):
        return custom_task(workload, params)
    raise TypeError(
        f"a workload is an operator name, a definition or a Task, not {type(workload).__name__}"
    )


@dataclass(frozen=True)
class TuneResult:
    """The best schedule known after tuning, and its kernel (verified against numpy)."""

    task: Task
    target: str
    best_trace: Trace
    kernel: Kernel
    record: TuningRecord
    latency_ms: float | None
    numpy_ms: float | None
    trials_done: int
    history: list[float | None]
    failures: dict[str, int]

    @property
    def speedup_vs_numpy(self) -> float | None:
        if self.latency_ms is None or self.numpy_ms is None:
            return None
        return self.numpy_ms / self.latency_ms


def _database(database_url: str | None) -> Any:
    from service.db.store import open_database

    return open_database(database_url)


def tune(
    workload: str | Mapping[str, Any] | Path | Task,
    params: Mapping[str, int | str] | None = None,
    *,
    trials: int = 64,
    threads: int = 1,
    strategy: str | None = None,
    seed: int = 0,
    database_url: str | None = None,
) -> TuneResult:
    """Tune `workload` on this machine; the result's kernel is the best stored one."""
    from service.tuning import tune_task

    t = task(workload, params)
    outcome = tune_task(
        t,
        threads=threads,
        trials=trials,
        strategy=strategy,
        seed=seed,
        database=_database(database_url),
    )
    if outcome.best is None or outcome.kernel is None or outcome.best_trace is None:
        raise DatabaseError(
            f"tuning {t.op} found no correct kernel in {outcome.run.trials_done} trials"
        )
    cmp = outcome.comparison
    if cmp is not None and not cmp.correct:
        raise DatabaseError(
            f"the best stored kernel of {t.op} is wrong on fresh inputs: {cmp.message}"
        )
    return TuneResult(
        t,
        outcome.target.canonical(),
        outcome.best_trace,
        outcome.kernel,
        outcome.best,
        cmp.latency_ms if cmp else None,
        cmp.numpy_ms if cmp else None,
        outcome.run.trials_done,
        list(outcome.run.history),
        dict(outcome.run.failures),
    )


def load_best(
    workload: str | Mapping[str, Any] | Path | Task,
    params: Mapping[str, int | str] | None = None,
    *,
    target: str = "host",
    threads: int | None = None,
    database_url: str | None = None,
) -> Kernel:
    """The kernel of the best stored record of `workload` on `target` (nothing is measured)."""
    from codegen.host import parse_target
    from codegen.kernel import compile_program

    t = task(workload, params)
    tgt = parse_target(target)
    if threads is not None:
        tgt = tgt.with_threads(threads)
    record = _database(database_url).best(t.key, tgt.canonical())
    if record is None:
        raise DatabaseError(f"no correct record of {t.op} on {tgt.canonical()}; tune it first")
    program = Trace.from_json(record.trace).apply(t.program).program
    return compile_program(program, tgt)


def load_model(
    path: str | Path,
    *,
    threads: int = 1,
    target: str = "host",
    coordinator: str | None = None,
    token: str | None = None,
    database_url: str | None = None,
) -> CompiledModel:
    """An ONNX model compiled for `target`: call it with numpy arrays, by position or by
    input name; it returns the outputs as a list. Each task uses its best stored schedule
    (the local database's, or the coordinator's when one is named), else its default
    loop nest; nothing is measured. Errors: ModelError (the file), GraphInputError (a call)."""
    from codegen.host import parse_target
    from ir.graph.plan import build_plan
    from service.model import compile_model, load_graph

    tgt = parse_target(target).with_threads(threads)
    remote = None
    if coordinator is not None:
        words = [w for w in target.split() if not w.startswith("-num-threads=")]
        remote = " ".join([*words, f"-num-threads={threads}"])
    model, _ = compile_model(
        build_plan(load_graph(path)),
        tgt,
        coordinator=coordinator,
        token=token,
        database_url=database_url,
        remote_target=remote,
    )
    return model


def tune_model(
    path: str | Path,
    *,
    trials: int = 64,
    threads: int = 1,
    seed: int = 0,
    strategy: str | None = None,
    database_url: str | None = None,
) -> ModelTuneResult:
    """Tune an ONNX model's distinct tasks under one budget on this machine, then compile it
    with the best schedules, verify it and time it against ONNX Runtime.

    `trials` is the model's whole budget on this target: trials already stored for its tasks
    count, so tuning it again with the same budget measures nothing. The result holds the
    compiled model (`.model`), per-task results (`.tasks`: `key`, `pattern`, `count`,
    `trials`, `best_ms`, `share`), `.latency_ms` and `.onnxruntime_ms`. Errors: ModelError
    (the file); DatabaseError when the best schedules make the model wrong."""
    from service.tuning import tune_model as run

    result = run(
        path,
        trials=trials,
        threads=threads,
        seed=seed,
        strategy=strategy,
        database=_database(database_url),
    )
    if result.check is not None and not result.check.correct:
        raise DatabaseError(f"the best stored schedules make {path} wrong: {result.check.problem}")
    return result
