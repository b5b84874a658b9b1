"""The final comparison of a low-precision kernel: verified, then timed interleaved with
numpy float32 on the same shapes and PyTorch's int8 / bf16 paths, in one call."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from benchmarks.tune.compare import FINAL_ROUNDS, Context, user_arrays
from benchmarks.tune.torch_ref import lowp_paths
from codegen.kernel import Kernel
from ir.program import Program
from ir.task import Task, gflops, library_task
from workers.machine import limit_numpy_threads
from workers.prepacked import main_arguments, run_prologue
from workers.timing import time_interleaved
from workers.verify import verify

NUMPY_FLOAT32 = "numpy float32"


def float_twin(task: Task) -> Task:
    """numpy's float32 version of `task` (`OpDef.float_twin`): matmul for matmul_int8 and
    matmul_bf16, dense with bias for dense_int8."""
    if task.opdef is None or task.opdef.float_twin is None:
        raise ValueError(f"{task.op} has no float32 twin: it is not a low-precision operator")
    op, params = task.opdef.float_twin(task.params)
    return library_task(op, params)


@dataclass(frozen=True)
class Tuned:
    """A tuned program as it runs: `main` per call and, for a task with constants
    (`Task.layout_free`), its `prologue` (program, kernel) once over them, as a model's
    load does (`Task.hoist`)."""

    task: Task
    main_program: Program
    main: Kernel
    prologue: tuple[Program, Kernel] | None = None

    def bind(
        self, inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray]
    ) -> Callable[[], object]:
        """The prologue run now; a call of `main` on the task's `inputs` and `outputs`."""
        if self.prologue is None:
            return self.main.bind_call(*inputs, *outputs)
        program, kernel = self.prologue
        packed = run_prologue(kernel, program, self.task, inputs)
        args = main_arguments(self.task, self.main_program, inputs, packed)
        return self.main.bind_call(*args, *outputs)


def compare(ctx: Context, task: Task, kernel: Tuned | None, threads: int = 1) -> dict[str, Any]:
    """Verify the kernel on numpy-allocated arrays, then time it, numpy float32 and each
    PyTorch path that computes what it should, interleaved (pooled rounds) at `threads`.
    Only the kernel's per-call part is timed: its prologue over the task's constants runs
    before (PyTorch's quantized Linear, too, packs its weight once, when it is made)."""
    from benchmarks import contention

    out: dict[str, Any] = {"correct": False, "latency_ms": None, "torch_paths": []}
    if kernel is None:
        return out | {"message": "no correct candidate"}
    inputs, outputs = user_arrays(task, ctx.seed)
    call = kernel.bind(inputs, outputs)
    call()
    with limit_numpy_threads(threads):
        refs = task.reference(inputs)
    out["message"] = verify(outputs, refs, task.output_names, task.reduction_length)
    out["correct"] = out["message"] is None
    if not out["correct"]:
        return out
    twin = float_twin(task)
    twin_inputs = [np.array(a) for a in twin.make_inputs(ctx.seed)]
    fns: list[Callable[[], object]] = [
        call,
        lambda: twin.reference(twin_inputs),
    ]
    names = ["loomtune", NUMPY_FLOAT32]
    for path in lowp_paths(task, inputs, threads) if ctx.with_torch else []:
        message = path.check()
        out["torch_paths"].append({"path": path.name, "note": path.note, "message": message})
        if message is None:  # time only what computes what it says
            fns.append(path.call)
            names.append(path.name)
    if ctx.quiet_wait_s > 0:
        contention.wait_until_quiet(ctx.quiet_wait_s)
    before = contention.cpu_snapshot()
    with limit_numpy_threads(threads):
        timings = dict(
            zip(
                names,
                time_interleaved(
                    fns, ctx.measure, rounds=FINAL_ROUNDS, round_pause_s=ctx.round_pause_s
                ),
            )
        )
    load = contention.others_load(before, contention.cpu_snapshot())
    latency = timings["loomtune"].median_ms
    out["latency_ms"] = latency
    out["times_ms"] = {name: list(t.times_ms) for name, t in timings.items()}
    out["numpy_f32_ms"] = timings[NUMPY_FLOAT32].median_ms
    out["ratio_numpy_f32"] = out["numpy_f32_ms"] / latency
    out["gops"] = gflops(task.flops, latency) if task.flops else None
    for p in out["torch_paths"]:
        t = timings.get(p["path"])
        p["torch_ms"] = t.median_ms if t else None
        p["ratio"] = t.median_ms / latency if t else None  # > 1: loomtune faster
    out["others_load"] = load
    out["contended"] = contention.is_contended(load)
    torch_text = "".join(
        f", {p['path']} {p['torch_ms']:.3f} ms" for p in out["torch_paths"] if p["torch_ms"]
    )
    ctx.log(
        f"    final: loomtune {latency:.3f} ms, numpy float32 {out['numpy_f32_ms']:.3f} ms "
        f"({out['ratio_numpy_f32']:.2f}×){torch_text}{' (contended)' if out['contended'] else ''}"
    )
    return out
