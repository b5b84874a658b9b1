"""The int8 / bf16 benchmark's run: each workload tuned from a fresh database, its best
kernel compared (`benchmarks.lowp.compare`), one result file and one record line."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchmarks.common import result_header, utc_now
from benchmarks.lowp.compare import NUMPY_FLOAT32, Tuned, compare
from benchmarks.lowp.report import headline
from benchmarks.lowp.suite import TENSORIZED_BY, not_measured, select
from benchmarks.record import append_record, write_result
from benchmarks.tune.compare import FINAL_ROUNDS, ROUND_PAUSE_S, Context
from benchmarks.tune.torch_ref import torch_version
from benchmarks.tune.tuning import tune_one
from codegen.host import host_target, parse_target
from codegen.kernel import compile_program
from ir.task import Task
from workers.timing import MeasureConfig

SUITE = "lowp"
DESCRIPTION = (
    "tensor instructions (VNNI, AVX-512 BF16, AMX): each workload tuned from a fresh "
    "database, its best kernel timed interleaved with numpy float32 on the same shapes and "
    "PyTorch's int8 / bf16 paths, 1 thread"
)


def tensorized_with(trace_json: dict[str, Any] | None) -> str | None:
    """The tensor intrinsic of a trace's product (its first `tensorize` of one that is not a
    packing copy's or a sum's), or None."""
    from ir.intrinsics import auxiliary_intrinsics
    from tuner.trace.trace import Trace

    if trace_json is None:
        return None
    helpers = auxiliary_intrinsics()
    for instruction in Trace.from_json(trace_json).instructions:
        if instruction.kind == "tensorize" and instruction.attr("intrinsic") not in helpers:
            return str(instruction.attr("intrinsic"))
    return None


def best_kernel(task: Task, row: dict[str, Any]) -> Tuned | None:
    """The row's best trace applied to `task`, compiled for the target it was tuned on, as
    it runs: a prologue over the task's constants once, the rest per call."""
    from tuner.trace.trace import Trace

    if not row.get("best_trace_json"):
        return None
    program = Trace.from_json(row["best_trace_json"]).apply(task.program).program
    target = parse_target(row["target"])
    prologue, main = task.hoist(program)
    return Tuned(
        task,
        main,
        compile_program(main, target),
        None if prologue is None else (prologue, compile_program(prologue, target)),
    )


def run(
    *,
    trials: int = 64,
    quick: bool = False,
    only: Sequence[str] | None = None,
    seed: int = 0,
    quiet_wait_s: float = 0.0,
    with_torch: bool = True,
    log: Callable[[str], None] = print,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """One row per workload (tuned at 1 thread, then compared) and the run's settings."""
    features = host_target().features
    workloads = select(quick=quick, only=only)
    measure = (
        MeasureConfig(warmup=1, repeat=3, min_repeat_ms=5.0)
        if quick
        else MeasureConfig(warmup=2, repeat=15, min_repeat_ms=50.0)
    )
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="loomtune-lowp-") as tmp:
        ctx = Context(
            Path(tmp), seed, quiet_wait_s, measure, log, with_torch, 0.0 if quick else ROUND_PAUSE_S
        )
        for w in workloads:
            task = w.task()
            log(f"tuning {w.name} ({trials} trials)")
            row = tune_one(
                ctx,
                task,
                trials=trials,
                strategy="evolutionary",
                db_file=ctx.folder / f"{len(rows)}-{task.op}.sqlite",
                label=w.name,
                final=False,
            )
            row["layout_free"] = list(task.layout_free)
            row["intrinsic"] = tensorized_with(row["best_trace_json"])
            early = (row["best_trace_json_at"] or {}).get(str(TENSORIZED_BY))
            reached = row["trials_done"] >= TENSORIZED_BY
            row["tensorized_at"] = {str(TENSORIZED_BY): tensorized_with(early)} if reached else {}
            row["goal"], row["goal_condition"] = w.goal_for(features)
            row.update(compare(ctx, task, best_kernel(task, row)))
            row["met"] = (
                row["ratio_numpy_f32"] >= row["goal"]
                if row["goal"] is not None and row.get("ratio_numpy_f32")
                else None
            )
            rows.append(row)
    extra = {
        "trials": trials,
        "threads": 1,
        "baseline": NUMPY_FLOAT32,
        "tensorized_by": TENSORIZED_BY,
        "measure_final": {
            "warmup": measure.warmup,
            "repeat": measure.repeat,
            "min_repeat_ms": measure.min_repeat_ms,
            "rounds": FINAL_ROUNDS,
            "round_pause_s": ctx.round_pause_s,
        },
        "not_measured": not_measured(workloads, features),
    }
    return rows, extra


def run_and_write(
    *,
    out_dir: Path,
    command: str = "",
    environment: dict[str, Any] | None = None,
    record: Path | None = None,
    log: Callable[[str], None] = print,
    **kwargs: Any,
) -> tuple[dict[str, Any], Path]:
    """Run the benchmark, write ``lowp-<UTC>.json`` to `out_dir` and append the run's line to
    `record` when given; (result, path)."""

    started = utc_now()
    wall = time.perf_counter()
    rows, extra = run(log=log, **kwargs)
    with_torch = kwargs.get("with_torch", True)
    header = result_header(
        suite=SUITE, kind="lowp", description=DESCRIPTION, quick=bool(kwargs.get("quick")),
        command=command, seed=kwargs.get("seed", 0), started=started,
        wall_s=time.perf_counter() - wall,
    )  # fmt: skip
    result: dict[str, Any] = {
        **header,
        "environment": environment or {},
        "measure": extra["measure_final"],
        "quiet_wait_s": kwargs.get("quiet_wait_s", 0.0),
        "rows": rows,
        "lowp": extra,
        # where benchmarks.record.versions reads PyTorch's version
        "tune": {"torch": torch_version() if with_torch else None},
    }
    path = write_result(result, out_dir, started)
    if record is not None:
        append_record(result, record, headline)
    return result, path
