"""A candidate as a model runs it: constants rearranged once, only the rest timed.

A model task's `layout_free` inputs are weights, given once at load; there
`codegen.model_prepack` runs the blocks that only rearrange them (`ir.prepack`: a
`pack_panels` copy of W) once and calls the main program per inference. Measuring the
whole program would charge every call with that copy — 9.4 MB per call for one of
ResNet-18's 512×512×3×3 convolutions — and rank packing schedules below what they are
worth exactly where they pay. So, like MetaSchedule's layout rewrite of
`layout_free_buffers`, a candidate of such a task is split the same way (`Task.hoist`,
in `workers/measure.py` and `workers/finalists.py`): the prologue
runs once on the generated weights, the main program is verified on its result
(main(prologue(W), X) against the reference, so a wrong prologue is caught) and timed.
A task without constants, or a candidate with nothing to hoist, is the program itself.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from codegen.kernel import Kernel
from ir import dtype as dt
from ir.arrays import aligned_empty
from ir.program import Program
from ir.task import Task

__all__ = ["main_arguments", "run_prologue"]


def run_prologue(
    kernel: Kernel, prologue: Program, task: Task, inputs: Sequence[np.ndarray]
) -> dict[str, np.ndarray]:
    """The prologue run once over the task's `inputs` (in its inputs' order): its outputs
    by buffer name, 64-byte aligned and zero-filled first, as a model's packed weights."""
    by_name = dict(zip((b.name for b in task.program.inputs), inputs))
    outs = [aligned_empty(b.concrete_shape(), dt.to_numpy(b.dtype)) for b in prologue.outputs]
    for a in outs:
        a.fill(0)
    kernel(*(by_name[b.name] for b in prologue.inputs), *outs)
    return {b.name: a for b, a in zip(prologue.outputs, outs)}


def main_arguments(
    task: Task, main: Program, inputs: Sequence[np.ndarray], packed: Mapping[str, np.ndarray]
) -> list[np.ndarray]:
    """The main program's inputs: the task's `inputs` it still reads, then the packed ones."""
    by_name = dict(zip((b.name for b in task.program.inputs), inputs)) | dict(packed)
    return [by_name[b.name] for b in main.inputs]
