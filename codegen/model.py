"""A compiled model: a plan's kernels bound once to one arena and the pre-arranged weights.

    model = CompiledModel(build_plan(graph), programs, target)
    (logits,) = model(input_ids=ids)

Everything that can be done once is done at construction: each distinct task compiles
once (repeated layers call the same kernel), the arena is allocated once (64-byte
aligned, offsets from the plan's liveness), the load-time nodes run once over the
weights (an OIHW→HWIO transpose, a folded Gemm transpose), so do the blocks of tuned
kernels that only repack a weight (`codegen.model_prepack`: a dense layer's W in
column panels is packed here, not on every call), and every kernel call is bound to
its argument pointers. A call then checks the inputs (names, shapes, dtypes:
one-line `GraphInputError`s), copies them into the arena, runs the bound calls in order
and returns copies of the outputs. Not thread-safe: one arena, one call at a time.

Weights are held once: the model keeps the arrays its kernels read and nothing else —
not the plan's graphs, whose constants include the originals the load-time nodes
rearranged (a conv weight's OIHW beside its HWIO). A graph constant the kernels read
as it is stays shared with the graph (no copy when it is already aligned), so a caller
that keeps the graph pays nothing twice either.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Set

import numpy as np

from codegen.host import host_target
from codegen.kernel import Kernel, KernelRuntimeError, compile_program
from codegen.model_prepack import model_kernels
from ir import dtype as dt
from ir.arrays import aligned_copy, aligned_empty
from ir.graph.graph import Graph, TensorType, make_graph
from ir.graph.interpret import bind_inputs
from ir.graph.ops import OPS
from ir.graph.plan import ModelPlan, PlanTask
from ir.graph.tasks import Arg
from ir.program import Program
from ir.target import Target


def prepare_constants(plan: ModelPlan, keep: Set[str] | None = None) -> dict[str, np.ndarray]:
    """The weights as the kernels read them: the graph's constants, then the load-time
    nodes' results (each computed once), every array 64-byte aligned. With `keep`, only
    those values are returned, and a constant is copied (for alignment) only when kept;
    the load-time nodes' inputs are dropped as soon as nothing later reads them."""
    g = plan.graph
    last_read = {v: i for i, node in enumerate(plan.prepare) for v in node.inputs if v}
    wanted = set(g.constants) | {v for node in plan.prepare for v in node.outputs}
    if keep is not None:
        wanted &= set(keep) | set(last_read)
    values: dict[str, np.ndarray] = {
        k: aligned_copy(a) if keep is None or k in keep else a
        for k, a in g.constants.items()
        if k in wanted
    }
    for i, node in enumerate(plan.prepare):
        results = OPS[node.op].evaluate([values[v] if v else None for v in node.inputs], node)
        for v, r in zip(node.outputs, results):
            t = g.types[v]
            values[v] = aligned_copy(
                np.ascontiguousarray(r, dtype=dt.to_numpy(t.dtype)).reshape(t.shape)
            )
        if keep is not None:
            for v in node.inputs:
                if v and last_read.get(v) == i and v not in keep:
                    del values[v]  # an original rearranged: not held beside its new layout
    return values if keep is None else {k: a for k, a in values.items() if k in keep}


class CompiledModel:
    """Native kernels for every step of a plan, callable with numpy arrays.

    `prepack=False` keeps each kernel's weight packing in the kernel (run on every call):
    what the tuner measured, and the baseline pre-packing is compared with."""

    def __init__(
        self,
        plan: ModelPlan,
        programs: Mapping[str, Program] | None = None,
        target: Target | None = None,
        *,
        prepack: bool = True,
    ) -> None:
        # The plan is read here and not kept: its graphs hold every original weight.
        self.target = target or host_target()
        programs = programs or {}
        self.tasks: tuple[PlanTask, ...] = plan.tasks
        self.inputs: tuple[tuple[str, TensorType], ...] = plan.inputs
        self.outputs: tuple[str, ...] = plan.outputs
        # Only the signature (no nodes, no weights): what `bind_inputs` checks a call against.
        self._signature: Graph = make_graph(
            plan.source.name, plan.inputs, (), {}, plan.source.input_names
        )
        read = {plan.base(a.value) for s in plan.steps for a in s.inputs}
        read |= {plan.base(v) for v in plan.outputs}
        run = model_kernels(
            plan, programs, prepare_constants(plan, read - set(plan.slots)), prepack=prepack
        )
        self.steps = run.steps  # the plan's, `task` an index into `kernels`, weights packed
        self.constants: dict[str, np.ndarray] = run.constants
        self._kernel_task = run.tasks
        self.kernels: list[Kernel] = [
            compile_program(p, self.target, symbol=f"loomtune_model_k{i}")
            for i, p in enumerate(run.programs)
        ]
        self.arena = aligned_empty((max(plan.arena_bytes, 1),), np.uint8)
        self._inputs = [(name, self._array(plan, Arg(name, t.shape))) for name, t in plan.inputs]
        self._calls: list[Callable[[], int]] = [
            self.kernels[s.task].bind_call(
                *(self._array(plan, a) for a in s.inputs), self._array(plan, s.output)
            )
            for s in self.steps
        ]
        self._outputs = [self._array(plan, Arg(v, plan.graph.types[v].shape)) for v in plan.outputs]

    @property
    def kernel_calls(self) -> int:
        """Kernels run per inference."""
        return len(self._calls)

    @property
    def weight_bytes(self) -> int:
        """Bytes of the weights the kernels read: all the model holds besides its arena."""
        return sum(a.nbytes for a in self.constants.values())

    def _array(self, plan: ModelPlan, arg: Arg) -> np.ndarray:
        """The memory of a value, as the shape the argument declares."""
        base = plan.base(arg.value)
        slot = plan.slots.get(base)
        if slot is None:
            return self.constants[base].reshape(arg.shape)
        dtype = dt.to_numpy(plan.graph.types[base].dtype)
        raw = self.arena[slot.offset : slot.offset + slot.nbytes]
        return raw.view(dtype).reshape(arg.shape)

    def run(self) -> None:
        """Run every kernel on the inputs already in the arena (what timing loops call)."""
        for i, call in enumerate(self._calls):
            rc = call()
            if rc != 0:
                self._failed(i, rc)

    def step_task(self, i: int) -> PlanTask:
        """The task the i-th kernel call of an inference runs (in run order)."""
        return self.tasks[self._kernel_task[self.steps[i].task]]

    def run_step(self, i: int) -> None:
        """Run the i-th kernel call alone, on what the arena holds: per-kernel profiles
        time these (one inference is `run_step(0)` … `run_step(kernel_calls − 1)`)."""
        rc = self._calls[i]()
        if rc != 0:
            self._failed(i, rc)

    def _failed(self, i: int, rc: int) -> None:
        raise KernelRuntimeError(
            f"kernel {i} ({self.step_task(i).pattern}) failed with code {rc} (out of memory?)"
        )

    def set_inputs(self, *arrays: np.ndarray, **named: np.ndarray) -> None:
        """Check the inputs against the graph's and copy them into the arena."""
        if arrays and named:
            raise TypeError("pass the inputs by position or by name, not both")
        given = bind_inputs(self._signature, named if named else arrays)
        for name, dst in self._inputs:
            np.copyto(dst, given[name])

    def __call__(self, *arrays: np.ndarray, **named: np.ndarray) -> list[np.ndarray]:
        """The outputs (fresh arrays) for these inputs: `model(x)` or `model(input=x)`."""
        self.set_inputs(*arrays, **named)
        self.run()
        return self.read_outputs()

    def read_outputs(self) -> list[np.ndarray]:
        """Copies of the outputs the arena holds (after `run`, or the last `run_step`)."""
        return [np.array(a) for a in self._outputs]
