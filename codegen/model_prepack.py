"""A model's kernels with their weights pre-packed once, at load.

A tuned kernel whose schedule packs a weight (`pack_panels`: a dense layer's W into
column panels) would repack that constant on every call. `ir.prepack` splits such a
program into a prologue (the packing, over the constants) and a main program reading
the packed buffer; here every step's prologue runs once over that step's weights, and
the step is rebound to the main kernel and the packed arrays. Both the compiled model
and the exported library run what this returns, so they share the packed layout.

Which of a task's arguments are constants is part of the task (`Task.layout_free`: a
matmul of two activations and one of an activation and a weight are two tasks), so it
was tuned as it runs here: without the packing, and one kernel per task suffices.
Steps sharing a task and the same weights (tied weights) share one packed copy; an
original weight that no kernel reads any more is dropped, so the packed copy replaces
it rather than sitting beside it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from codegen.host import host_target
from codegen.kernel import Kernel, compile_program
from ir import dtype as dt
from ir.arrays import aligned_empty
from ir.graph.plan import ModelPlan, Step
from ir.graph.tasks import Arg
from ir.program import Program

__all__ = ["ModelKernels", "model_kernels"]


@dataclass(frozen=True)
class ModelKernels:
    """What a model runs: distinct kernel programs, the steps calling them, their weights."""

    programs: tuple[Program, ...]  # one per plan task: its main program
    tasks: tuple[int, ...]  # per program: the plan task it computes
    steps: tuple[Step, ...]  # the plan's steps, `task` an index into `programs`
    constants: dict[str, np.ndarray]  # every weight a step reads, packed ones included
    packed: int  # packed copies made at load


def model_kernels(
    plan: ModelPlan,
    programs: Mapping[str, Program],
    constants: dict[str, np.ndarray],
    *,
    prepack: bool = True,
) -> ModelKernels:
    """The plan's steps on `programs` (by task key, else each task's own program), with every
    block that only rearranges a step's weights run once here (`prepack`). `constants` are
    the weights as `codegen.model.prepare_constants` returns them; the result's replace them."""
    constants = dict(constants)
    splits: list[tuple[Program | None, Program]] = []
    for t in plan.tasks:
        program = programs.get(t.task.key, t.task.program)
        splits.append(t.task.hoist(program) if prepack else (None, program))
    prologues: dict[int, Kernel] = {}
    packed: dict[tuple[int, tuple[str, ...]], dict[str, Arg]] = {}
    steps: list[Step] = []
    for step in plan.steps:
        v = step.task
        names = (b.name for b in plan.tasks[v].task.program.inputs)
        args = dict(zip(names, step.inputs))
        prologue, main = splits[v]
        if prologue is not None:
            weights = tuple(plan.base(args[b.name].value) for b in prologue.inputs)
            if (v, weights) not in packed:
                if v not in prologues:  # bit copies: the host runs them for any target
                    prologues[v] = compile_program(
                        prologue, host_target(1), symbol=f"loomtune_prologue_{v}"
                    )
                packed[(v, weights)] = _run_prologue(
                    prologues[v], prologue, [args[b.name] for b in prologue.inputs], plan, constants
                )
            args |= packed[(v, weights)]
        steps.append(Step(v, tuple(args[b.name] for b in main.inputs), step.output))
    read = {plan.base(a.value) for s in steps for a in s.inputs}
    read |= {plan.base(v) for v in plan.outputs}
    kept = {k: a for k, a in constants.items() if k in read}
    return ModelKernels(
        tuple(main for _, main in splits),
        tuple(range(len(splits))),
        tuple(steps),
        kept,
        len(packed),
    )


def _run_prologue(
    kernel: Kernel,
    prologue: Program,
    inputs: list[Arg],
    plan: ModelPlan,
    constants: dict[str, np.ndarray],
) -> dict[str, Arg]:
    """Run one prologue over a step's weights; its outputs become new constants (by a name
    no graph value has), returned as the arguments that replace its buffers."""
    outs = [aligned_empty(b.concrete_shape(), dt.to_numpy(b.dtype)) for b in prologue.outputs]
    for a in outs:  # elements a layout leaves unwritten (nobody reads them) are zeros, not noise
        a.fill(0)
    kernel(*(constants[plan.base(a.value)].reshape(a.shape) for a in inputs), *outs)
    result: dict[str, Arg] = {}
    for b, array in zip(prologue.outputs, outs):
        name = f"{plan.base(inputs[0].value)}#{b.name}"
        while name in constants:
            name += "'"
        constants[name] = array
        result[b.name] = Arg(name, array.shape)
    return result
