"""The final comparison: a tuned kernel verified and timed interleaved with numpy, PyTorch
and TVM; the head-to-head timing of several runs' best kernels."""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.tune.neighbour import NEIGHBOUR_FIELDS
from benchmarks.tune.torch_ref import torch_call
from codegen.host import parse_target
from codegen.kernel import Kernel
from ir.arrays import aligned_copy, offset_of
from ir.task import Task, gflops
from workers.compare import SETTLE_S
from workers.machine import limit_numpy_threads
from workers.timing import MeasureConfig, Timing, time_interleaved
from workers.verify import empty_outputs, fill_outputs, first_wrong, verify

FINAL_ROUNDS = 3
ROUND_PAUSE_S = 5.0
"""A final comparison's repeats come in 3 rounds 5 s apart, pooled: a shared VM's slow phases
of seconds slow a whole interleaved call unevenly, and one phase then costs a third of the samples."""

PLACEMENTS = 3
"""Array sets the kernel is timed on for `align_gap`, of each kind (numpy's, 64-byte aligned):
where a set happens to lie moved one kernel by up to 45 % on a VM, as much as the offset
did (docs/decisions.md), so the gap compares the medians over sets, not one set each."""


def gap_config(config: MeasureConfig) -> MeasureConfig:
    """The gap's own interleaved call: three times the final comparison's repeats, each a
    tenth as long. A repeat visits every set back to back, so the sets' ratio within one
    repeat cancels the machine's phases; 15 repeats of 50 ms gave gaps that moved by
    ±5 % between runs of one kernel on a noisy VM (docs/decisions.md)."""
    return MeasureConfig(
        warmup=1, repeat=3 * config.repeat, min_repeat_ms=config.min_repeat_ms / 10
    )


def paired_gap(user: Sequence[Timing], aligned: Sequence[Timing]) -> float:
    """How much slower the kernel is on the user's sets than on aligned ones: the median
    over repeats of (median of the user sets' samples in that repeat / median of the
    aligned sets'), minus 1. The timings come from one `time_interleaved` call, so the
    j-th samples were taken side by side."""
    per_repeat = zip(
        zip(*(t.times_ms for t in user), strict=True),
        zip(*(t.times_ms for t in aligned), strict=True),
        strict=True,
    )
    return statistics.median(statistics.median(u) / statistics.median(a) for u, a in per_repeat) - 1


# Builds TVM's best kernel on the given inputs (benchmarks.tune.tvm_ref.best_kernel with the
# workload bound); None when TVM has no correct record to compile.
TVMFactory = Callable[[Sequence[np.ndarray], Sequence[tuple[tuple[int, ...], Any]]], Any]


def user_arrays(task: Task, seed: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Inputs and outputs as a user has them: allocated by numpy (`np.array`, `np.empty`),
    wherever its allocator puts them (16 bytes past a 64-byte boundary for large arrays)."""
    inputs = [np.array(a) for a in task.make_inputs(seed)]
    outputs = [np.empty(shape, dtype) for shape, dtype in task.output_specs()]
    fill_outputs(outputs)
    return inputs, outputs


def compare(
    kernel: Kernel,
    task: Task,
    config: MeasureConfig,
    seed: int = 0,
    with_torch: bool = True,
    tvm: TVMFactory | None = None,
    round_pause_s: float = ROUND_PAUSE_S,
    threads: int = 1,
    settle_s: float = SETTLE_S,
    with_neighbour: bool = False,
) -> dict[str, Any]:
    """Verify the kernel (PyTorch, TVM); time them and numpy in one interleaved call, all on
    numpy-allocated arrays; then the kernel alone on `PLACEMENTS` sets of numpy's arrays
    (the first the same) and as many 64-byte aligned copies, in a call of its own with many
    short repeats (`gap_config`; `align_gap`: `paired_gap`).
    `with_neighbour`: then time the kernel, numpy and PyTorch again, alone and beside a
    memory-bandwidth neighbour (`beside_neighbour`)."""
    inputs, outputs = user_arrays(task, seed)
    kernel(*inputs, *outputs)
    with limit_numpy_threads(threads):
        refs = task.reference(inputs)
    message = verify(outputs, refs, task.output_names, task.reduction_length)
    out: dict[str, Any] = {"correct": message is None, "message": message, "torch_message": None}
    if message is not None:
        return out
    aligned = [[aligned_copy(a) for a in inputs] for _ in range(PLACEMENTS)]
    aligned_out = [empty_outputs(task.output_specs()) for _ in range(PLACEMENTS)]
    more_user = [user_arrays(task, seed) for _ in range(PLACEMENTS - 1)]
    out["offsets"] = [offset_of(a) for a in (*inputs, *outputs)]
    fns: list[Callable[[], object]] = [
        kernel.bind_call(*inputs, *outputs),
        lambda: task.reference(inputs),
    ]
    names = ["loomtune", "numpy"]
    torch_fn = torch_call(task, inputs, threads) if with_torch else None
    if torch_fn is not None:
        call, result = torch_fn
        call()
        torch_wrong = verify(result(), refs, task.output_names, task.reduction_length)
        if torch_wrong is None:
            fns.append(call)
            names.append("torch")
        else:  # say so rather than time a different computation
            out["torch_message"] = torch_wrong
    if tvm is not None:
        tvm_kernel = tvm(inputs, task.output_specs())
        if tvm_kernel is None:
            out["tvm_message"] = "TVM's database holds no successful record to compile"
        else:
            tvm_kernel.reset()  # NaN outputs: a kernel that writes nothing cannot pass
            tvm_kernel.call()
            tvm_wrong = verify(tvm_kernel.outputs(), refs, task.output_names, task.reduction_length)
            out["tvm_message"] = tvm_wrong
            if tvm_wrong is None:
                fns.append(tvm_kernel.call)
                names.append("tvm")
    with limit_numpy_threads(threads):
        timings = dict(
            zip(
                names,
                time_interleaved(
                    fns,
                    config,
                    pause_s=settle_s if threads > 1 else 0.0,
                    rounds=FINAL_ROUNDS,
                    round_pause_s=round_pause_s,
                ),
            )
        )
    if threads > 1:
        time.sleep(settle_s)  # numpy's and PyTorch's threads stop spinning
    sets = [(inputs, outputs), *more_user, *zip(aligned, aligned_out)]
    placed = time_interleaved(
        [kernel.bind_call(*ins, *outs) for ins, outs in sets], gap_config(config), one_number=True
    )
    # each set may have run another variant of the kernel (`codegen.kernel`): check them all
    wrong = first_wrong(
        enumerate(o for _, o in sets), refs, task.output_names, task.reduction_length
    )
    if wrong is not None:
        at, reason = wrong
        out["correct"], out["message"] = (
            False,
            f"array set {at} ({sets_offsets(sets)[at]}): {reason}",
        )
    user_t, aligned_t = placed[:PLACEMENTS], placed[PLACEMENTS:]
    out["placements_ms"] = {
        "user": [t.median_ms for t in user_t],
        "aligned": [t.median_ms for t in aligned_t],
    }
    out["gap_offsets"] = sets_offsets(sets)
    # the shifts of a streamed weight's tiles the kernel ran with (`ir.schedule.shift`)
    out["variant_shifts"] = list(getattr(kernel, "variant_shifts", (0,)))
    timings["aligned"] = aligned_t[0]
    out["aligned_ms"] = statistics.median(out["placements_ms"]["aligned"])
    out["align_gap"] = paired_gap(user_t, aligned_t)  # > 0: slower on the user's arrays
    latency = timings["loomtune"].median_ms
    for name in ("loomtune", "numpy", "aligned", "torch", "tvm"):
        out[name] = _timing(timings[name]) if name in timings else None
    out["latency_ms"] = latency
    out["numpy_ms"] = timings["numpy"].median_ms
    out["torch_ms"] = timings["torch"].median_ms if "torch" in timings else None
    out["ratio_numpy"] = out["numpy_ms"] / latency
    out["ratio_torch"] = out["torch_ms"] / latency if out["torch_ms"] else None
    if tvm is not None:
        tvm_ms = timings["tvm"].median_ms if "tvm" in timings else None
        out["tvm_ms"] = tvm_ms
        out["ratio_tvm"] = tvm_ms / latency if tvm_ms else None  # > 1: loomtune faster
        out["tvm_ratio_numpy"] = out["numpy_ms"] / tvm_ms if tvm_ms else None
    out["gflops"] = gflops(task.flops, latency) if task.flops else None
    if with_neighbour:
        named = dict(zip(names, fns))
        mine = {k: named[k] for k in ("loomtune", "numpy", "torch") if k in named}
        out.update(beside_neighbour(mine, config, round_pause_s, threads))
    return out


def beside_neighbour(
    fns: Mapping[str, Callable[[], object]],
    config: MeasureConfig,
    round_pause_s: float = ROUND_PAUSE_S,
    threads: int = 1,
) -> dict[str, Any]:
    """Each callable timed alone and beside a memory-bandwidth neighbour on the other core
    (`benchmarks.tune.neighbour`), all in one interleaved call: per repeat each callable
    beside it, then at once alone, so a slow phase of the VM lands on both states and every
    sample follows a switch alike (with all beside, then all alone, the first sample after
    a pause ran up to 40% slow on a loaded VM). The neighbour streams only during the beside
    samples. ``slowdown_<name>`` = median beside / median alone (1.0: unaffected)."""
    from benchmarks.tune.neighbour import NeighbourError, neighbour

    out: dict[str, Any] = dict.fromkeys(NEIGHBOUR_FIELDS)
    if threads > 1:  # the kernel's threads would share a core with it: not a bandwidth figure
        out["neighbour"] = {"message": f"not timed at {threads} threads: it takes a core"}
        return out
    try:
        with neighbour() as nb:

            def beside(fn: Callable[[], object]) -> Callable[[], object]:
                def call() -> object:
                    nb.resume()
                    return fn()

                return call

            def alone(fn: Callable[[], object]) -> Callable[[], object]:
                def call() -> object:
                    nb.pause()
                    return fn()

                return call

            calls = [state(f) for f in fns.values() for state in (beside, alone)]
            with limit_numpy_threads(1):
                timings = time_interleaved(
                    calls,
                    config,
                    rounds=FINAL_ROUNDS,
                    round_pause_s=round_pause_s,
                    fixed_order=True,  # each beside sample, then at once alone
                )
    except NeighbourError as error:
        out["neighbour"] = {"message": str(error)}
        return out
    on_, off_ = timings[0::2], timings[1::2]
    out["neighbour"] = {
        "message": None,
        **nb.describe(),
        "order": "paired",
        "beside": {k: _timing(t) for k, t in zip(fns, on_)},
        "alone": {k: _timing(t) for k, t in zip(fns, off_)},
    }
    for name, on, off in zip(fns, on_, off_):
        out[f"slowdown_{name}"] = on.median_ms / off.median_ms
    return out


def _timing(t: Timing) -> dict[str, Any]:
    return {
        "times_ms": list(t.times_ms),
        "number": t.number,
        "median_ms": t.median_ms,
        "min_ms": t.min_ms,
    }


@dataclass
class Context:
    folder: Path
    seed: int
    quiet_wait_s: float
    measure: MeasureConfig
    log: Callable[[str], None]
    with_torch: bool = True
    round_pause_s: float = ROUND_PAUSE_S
    """Between the rounds of a final comparison (0 in a --quick smoke test)."""
    settle_s: float = SETTLE_S
    """Before each repeat of a comparison at several threads (0 in a --quick smoke test)."""
    neighbour: bool = False
    """Also time each final kernel, numpy and PyTorch beside a memory-bandwidth neighbour."""


def final_comparison(
    ctx: Context,
    task: Task,
    kernel: Kernel | None,
    tvm: TVMFactory | None = None,
    threads: int = 1,
) -> dict[str, Any]:
    from benchmarks import contention

    if kernel is None:
        return {
            "correct": False,
            "message": "no correct candidate",
            "latency_ms": None,
            "numpy_ms": None,
            "torch_ms": None,
            "ratio_numpy": None,
            "ratio_torch": None,
            "aligned_ms": None,
            "align_gap": None,
            "others_load": None,
            "contended": False,
            **(dict.fromkeys(NEIGHBOUR_FIELDS) if ctx.neighbour else {}),
            **(
                {"tvm_ms": None, "ratio_tvm": None, "tvm_ratio_numpy": None, "tvm_message": None}
                if tvm
                else {}
            ),
        }
    if ctx.quiet_wait_s > 0:
        contention.wait_until_quiet(ctx.quiet_wait_s)
    before = contention.cpu_snapshot()
    out = compare(
        kernel,
        task,
        ctx.measure,
        ctx.seed,
        ctx.with_torch,
        tvm,
        ctx.round_pause_s,
        threads,
        ctx.settle_s,
        ctx.neighbour,
    )
    after = contention.cpu_snapshot()
    helped = (out.get("neighbour") or {}).get("process_cpu_s") or 0.0
    if after is not None and helped:  # the neighbour is the run's own, not another's load
        after = dataclasses.replace(after, own=after.own + helped)
    load = contention.others_load(before, after)
    out.setdefault("latency_ms", None)
    out.setdefault("numpy_ms", None)
    out.setdefault("torch_ms", None)
    out.setdefault("ratio_numpy", None)
    out.setdefault("ratio_torch", None)
    out.setdefault("aligned_ms", None)
    out.setdefault("align_gap", None)
    out["others_load"] = load
    out["contended"] = contention.is_contended(load)
    if out["correct"]:
        torch_text = f", torch {out['torch_ms']:.3f} ms" if out["torch_ms"] else ""
        if tvm is not None:
            torch_text += (
                f", TVM {out['tvm_ms']:.3f} ms"
                if out.get("tvm_ms")
                else f", TVM: {out.get('tvm_message')}"
            )
        ctx.log(
            f"    final: loomtune {out['latency_ms']:.3f} ms, numpy {out['numpy_ms']:.3f} ms "
            f"({out['ratio_numpy']:.2f}×){torch_text}, on aligned arrays "
            f"{out['aligned_ms']:.3f} ms{' (contended)' if out['contended'] else ''}"
        )
        if out.get("slowdown_loomtune") is not None:
            ctx.log(
                "    beside a bandwidth neighbour: slowdown "
                + ", ".join(
                    f"{k.removeprefix('slowdown_')} {out[k]:.2f}×"
                    for k in NEIGHBOUR_FIELDS
                    if out.get(k) is not None
                )
                + f" (it streamed {out['neighbour'].get('gb_per_s') or 0:.1f} GB/s)"
            )
    else:
        ctx.log(f"    final: WRONG: {out['message']}")
    return out


def head_to_head(
    ctx: Context, task: Task, rows: dict[str, dict[str, Any]]
) -> dict[str, Any] | None:
    """The best kernels of several runs, compiled from their traces, verified, and timed
    interleaved in one call (with numpy for scale): the fair comparison of what each run
    found. None when a run found no correct kernel."""
    if any(not row.get("best_trace_json") for row in rows.values()):
        return None
    return time_kernels(
        ctx, task, _compile_traces(task, {k: r["best_trace_json"] for k, r in rows.items()}, rows)
    )


def _compile_traces(
    task: Task, traces: Mapping[str, dict[str, Any]], rows: Mapping[str, dict[str, Any]]
) -> dict[str, Kernel | None]:
    """Each run's trace (JSON) applied to `task` and compiled for that run's target."""
    from codegen.kernel import compile_program
    from tuner.trace.trace import Trace

    return {
        name: compile_program(
            Trace.from_json(t).apply(task.program).program, parse_target(rows[name]["target"])
        )
        for name, t in traces.items()
    }


def duel_at(
    ctx: Context, task: Task, rows: Mapping[str, dict[str, Any]], n: int
) -> dict[str, Any] | None:
    """The kernels that were each run's best after `n` trials (`best_trace_json_at`), timed
    interleaved in one call (`time_kernels`); one kernel found by both is not timed
    against itself. None when a run had no correct kernel by then."""
    from tuner.trace.trace import Trace

    traces = {name: (row.get("best_trace_json_at") or {}).get(str(n)) for name, row in rows.items()}
    if any(t is None for t in traces.values()):
        return None
    if len({Trace.from_json(t).hash for t in traces.values()}) == 1:
        return {"same_kernel": True}
    return time_kernels(ctx, task, _compile_traces(task, traces, rows))  # type: ignore[arg-type]


def time_kernels(
    ctx: Context, task: Task, kernels: Mapping[str, Kernel | None]
) -> dict[str, Any] | None:
    """Verify the kernels, then time them and numpy interleaved in one call (pooled rounds):
    `{name}_ms` per kernel and `numpy_ms`. None when one is missing or wrong."""
    from benchmarks import contention

    inputs = task.make_inputs(ctx.seed)
    with limit_numpy_threads(1):
        refs = task.reference(inputs)
    fns: list[Callable[[], object]] = []
    for kernel in kernels.values():
        if kernel is None:
            return None
        outputs = empty_outputs(task.output_specs())
        kernel(*inputs, *outputs)
        if verify(outputs, refs, task.output_names, task.reduction_length) is not None:
            return None
        fns.append(kernel.bind_call(*inputs, *outputs))
    fns.append(lambda: task.reference(inputs))
    if ctx.quiet_wait_s > 0:
        contention.wait_until_quiet(ctx.quiet_wait_s)
    before = contention.cpu_snapshot()
    with limit_numpy_threads(1):
        timings = time_interleaved(
            fns, ctx.measure, rounds=FINAL_ROUNDS, round_pause_s=ctx.round_pause_s
        )
    load = contention.others_load(before, contention.cpu_snapshot())
    out: dict[str, Any] = {f"{name}_ms": t.median_ms for name, t in zip(kernels, timings)}
    out["numpy_ms"] = timings[-1].median_ms
    ctx.log("    head to head: " + ", ".join(f"{k} {v:.3f}" for k, v in out.items()))
    out["contended"] = contention.is_contended(load)
    return out


def median_or_none(values: Sequence[float | None]) -> float | None:
    return None if not values or any(v is None for v in values) else statistics.median(values)  # type: ignore[type-var]


def sets_offsets(sets: list) -> list[list[int]]:
    """Bytes past a 64-byte boundary of each array (inputs, then outputs) of each set."""
    return [[offset_of(a) for a in (*ins, *outs)] for ins, outs in sets]
