"""A model's plan: its graph cut into tasks, the kernels' order, arguments and memory.

    plan = build_plan(graph)
    for step in plan.steps: plan.tasks[step.task].task ...   # one kernel call each

Pure data, computed once per model: which distinct tasks there are (repeated layers
share one, `count` says how often it runs), the steps in order with the graph values
each reads and writes (as views of the shape the task declares), the nodes run once at
load over the weights (`prepare`: a conv weight's OIHW→HWIO transpose, a Gemm's
transposed B), and where every activation lives in one arena (`slots`, `arena_bytes`).
A task's inputs bound to weights (constants or load-time results) are its `layout_free`
ones, so a task keys the kernel as the model runs it. `codegen/model.py` turns it into
a callable model.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType

from ir import dtype as dt
from ir.graph.fuse import partition
from ir.graph.graph import Graph, Node, TensorType
from ir.graph.layout import to_nhwc
from ir.graph.memory import Lifetime, Slot, plan_arena
from ir.graph.rewrite import canonicalize
from ir.graph.tasks import Arg, group_task
from ir.task import Task


@dataclass(frozen=True)
class PlanTask:
    """One distinct task of the model: it runs `count` times, `flops` each."""

    task: Task
    pattern: str
    count: int
    flops: int
    implementation: str = "direct"
    alternatives: tuple[tuple[str, Task], ...] = ()
    """Other implementations on the same arguments, by name: tuned beside `task`, and
    the faster stands in for it (`choose`)."""

    @property
    def op(self) -> str:
        """The library operator's name, or "fused" for a custom workload."""
        return "fused" if self.task.is_custom else self.task.op

    @property
    def implementations(self) -> tuple[tuple[str, Task], ...]:
        """Every implementation of the task, this one first."""
        return ((self.implementation, self.task), *self.alternatives)

    def label(self, implementation: str | None = None) -> str:
        """The pattern, with the implementation named when there is a choice."""
        name = implementation or self.implementation
        return f"{self.pattern} [{name}]" if self.alternatives else self.pattern

    def choose(self, implementation: str) -> PlanTask:
        """This task run by `implementation` (one of `implementations`)."""
        found = dict(self.implementations)
        if implementation not in found:
            raise KeyError(f"{self.pattern}: no implementation {implementation!r}")
        rest = tuple((n, t) for n, t in self.implementations if n != implementation)
        return replace(
            self, task=found[implementation], implementation=implementation, alternatives=rest
        )


@dataclass(frozen=True)
class Step:
    """One kernel call: task `task` (an index into `ModelPlan.tasks`) on these values."""

    task: int
    inputs: tuple[Arg, ...]
    output: Arg


@dataclass(frozen=True)
class ModelPlan:
    source: Graph  # as imported: inputs, outputs and the reference
    graph: Graph  # rewritten (NHWC convolutions, recognised patterns): what steps name
    prepare: tuple[Node, ...]
    tasks: tuple[PlanTask, ...]
    steps: tuple[Step, ...]
    views: Mapping[str, str]  # value -> the stored value whose buffer it reinterprets
    slots: Mapping[str, Slot]  # graph inputs and step outputs, in the arena
    arena_bytes: int

    @property
    def inputs(self) -> tuple[tuple[str, TensorType], ...]:
        return self.source.inputs

    @property
    def outputs(self) -> tuple[str, ...]:
        return self.source.outputs

    def base(self, value: str) -> str:
        """The stored value whose memory `value` is (itself unless it is a view)."""
        return self.views.get(value, value)

    @property
    def flops(self) -> int:
        return sum(t.flops * t.count for t in self.tasks)

    def implementations(self) -> list[tuple[int, str, Task]]:
        """Every implementation of every task as (task index, label, task): what is tuned."""
        return [(i, t.label(n), u) for i, t in enumerate(self.tasks) for n, u in t.implementations]

    def choose(self, pick: Callable[[PlanTask], str]) -> ModelPlan:
        """The plan with each task run by the implementation `pick` names for it (steps
        are unchanged: every implementation reads the same arguments)."""
        return replace(
            self, tasks=tuple(t.choose(pick(t)) if t.alternatives else t for t in self.tasks)
        )

    @property
    def stored_bytes(self) -> int:
        """Bytes of every arena value side by side: what the arena saves memory against."""
        return sum(s.nbytes for s in self.slots.values())


def lower_graph(graph: Graph) -> Graph:
    """The graph the plan cuts: patterns recognised, convolutions NHWC, dead nodes gone."""
    return canonicalize(to_nhwc(canonicalize(graph)))


def build_plan(graph: Graph) -> ModelPlan:
    """Cut `graph` into tasks and plan its kernels and memory (pure; nothing compiles)."""
    g = lower_graph(graph)
    part = partition(g)
    cache: dict[str, Task] = {}
    load_time = set(g.constants) | {v for i in part.prepare for v in g.nodes[i].outputs}

    def constant(value: str) -> bool:
        return part.views.get(value, value) in load_time

    index: dict[str, int] = {}
    tasks: list[PlanTask] = []
    steps: list[Step] = []
    for group in part.groups:
        gt = group_task(g, group, cache, constant)
        key = gt.task.key
        if key not in index:
            index[key] = len(tasks)
            tasks.append(PlanTask(gt.task, gt.pattern, 0, gt.flops, alternatives=gt.alternatives))
        i = index[key]
        tasks[i] = replace(tasks[i], count=tasks[i].count + 1)
        steps.append(Step(i, gt.inputs, gt.output))
    views = dict(part.views)
    slots, arena = plan_arena(_lifetimes(g, graph, steps, views))
    return ModelPlan(
        graph,
        g,
        tuple(g.nodes[i] for i in part.prepare),
        tuple(tasks),
        tuple(steps),
        MappingProxyType(views),
        MappingProxyType(slots),
        arena,
    )


def _lifetimes(
    g: Graph, source: Graph, steps: list[Step], views: Mapping[str, str]
) -> list[Lifetime]:
    """Each arena value alive from its writer (graph inputs: -1) to its last reader
    (graph outputs: one past the last step)."""

    def base(v: str) -> str:
        return views.get(v, v)

    first: dict[str, int] = {v: -1 for v in source.input_names}
    last: dict[str, int] = {v: -1 for v in source.input_names}
    for s, step in enumerate(steps):
        for arg in step.inputs:
            if base(arg.value) in first:
                last[base(arg.value)] = s
        out = base(step.output.value)
        first[out], last[out] = s, s
    for v in source.outputs:
        if base(v) in first:
            last[base(v)] = len(steps)
    return [
        Lifetime(v, g.types[v].size * dt.itemsize(g.types[v].dtype), first[v], last[v])
        for v in first
    ]
